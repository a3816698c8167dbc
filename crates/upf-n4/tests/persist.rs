//! Persisted state (#29): what the agent writes for a store brings every session back in a new
//! agent, with our Recovery Time Stamp, so that the SMF sees no restart and goes on with the
//! sessions it had.

mod harness;

use harness::{Smf, NTP0, SMF_IP};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;
use upf_n4::{Agent, Changes, Restored};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_rules::mem::MemDatapath;
use upf_rules::{Seid, Session, UrrId as RUrrId, Volume};
use upf_smf as smf;

/// A store as a map, fed as the driver feeds the real one.
#[derive(Default)]
struct Store {
    recovery: u32,
    associations: BTreeMap<Vec<u8>, Vec<u8>>,
    sessions: BTreeMap<u64, Vec<u8>>,
}

impl Store {
    fn apply(&mut self, c: Changes) {
        for (k, v) in c.associations {
            match v {
                Some(v) => self.associations.insert(k, v),
                None => self.associations.remove(&k),
            };
        }
        for (k, v) in c.sessions {
            match v {
                Some(v) => self.sessions.insert(k, v),
                None => self.sessions.remove(&k),
            };
        }
    }

    fn save(&mut self, s: &mut Smf) {
        self.recovery = s.agent.recovery_time_stamp();
        let c = s.agent.take_changes();
        self.apply(c);
    }
}

fn tracked() -> Smf {
    let mut s = Smf::new();
    s.agent.track_changes();
    s.associate(1234);
    s
}

/// The UPF restarts (a new agent, a later clock) and restores what the store holds.
fn restart(s: &mut Smf, store: &Store) -> Restored {
    // 5 s later, by both clocks.
    s.now += Duration::from_secs(5);
    let cfg = s.agent.config().clone();
    let mut agent = Agent::new(cfg, MemDatapath::recording(), s.now, NTP0 + 5).unwrap();
    agent.track_changes();
    let r = agent.restore(
        s.now,
        store.recovery,
        store.associations.clone(),
        store.sessions.clone(),
    );
    s.agent = agent;
    r
}

fn sessions(a: &Agent<MemDatapath>) -> BTreeMap<u64, Session> {
    a.sessions().map(|s| (s.seid.0, s.clone())).collect()
}

/// The standard session with what only some sessions have: a Monitoring Time, a QER
/// Correlation ID (an APN-AMBR aggregate), an inactivity timer, a static UE address.
fn rich(s: &mut Smf, ue: Ipv4Addr) -> u64 {
    s.cp_seid += 1;
    let mut req = smf::establishment(s.node.clone(), s.cp_seid, SMF_IP, smf::UeAddr::Static(ue));
    req.create_urrs[0].monitoring_time = Some(MonitoringTime(NTP0 + 3600));
    req.create_qers[0].qer_correlation_id = Some(QerCorrelationId(7));
    req.user_plane_inactivity_timer = Some(UserPlaneInactivityTimer(600));
    let (_, r) = s.establish_with(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    r.up_f_seid.unwrap().seid
}

fn created_teids(r: &SessionEstablishmentResponse) -> Vec<u32> {
    r.created_pdrs
        .iter()
        .filter_map(|c| match c.local_f_teid {
            Some(FTeid::Assigned { teid, .. }) => Some(teid),
            _ => None,
        })
        .collect()
}

#[test]
fn a_restart_brings_back_every_session_and_our_recovery_time_stamp() {
    let mut s = tracked();
    let mut store = Store::default();
    let a = s.establish_ok();
    let b = rich(&mut s, Ipv4Addr::new(10, 45, 0, 9));
    let c = s.establish_ok();
    let d = s.establish_ok();
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x77, Ipv4Addr::new(192, 0, 2, 9)));
    assert_eq!(s.modify(a, m).cause, Cause::REQUEST_ACCEPTED);
    s.delete(c);
    store.save(&mut s);
    assert_eq!(
        store.sessions.len(),
        3,
        "the deleted session is not in the store"
    );
    let before = sessions(&s.agent);

    let r = restart(&mut s, &store);
    assert_eq!((r.associations, r.sessions), (1, 3), "{:?}", r.failed);
    assert!(r.failed.is_empty());
    // Aggregates are named anew by the agent that installs them.
    let unnamed = |mut m: BTreeMap<u64, Session>| {
        m.values_mut()
            .for_each(|s| s.qers.iter_mut().for_each(|q| q.aggregate = None));
        m
    };
    assert!(unnamed(sessions(&s.agent)) == unnamed(before.clone()));
    let rules = s.agent.session(upf_rules::Seid(b)).unwrap();
    assert!(
        rules.qers[0].aggregate.is_some(),
        "the aggregate is attached again"
    );
    let installed: Vec<u64> = s.agent.datapath().sessions().map(|s| s.seid.0).collect();
    assert_eq!(installed.len(), 3);
    assert!(s.agent.take_changes().is_empty(), "nothing to write back");

    // The SMF sees no restart: same Recovery Time Stamp, same association, same sessions.
    assert_eq!(s.agent.recovery_time_stamp(), NTP0);
    let hb = s.request(
        None,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1234),
            source_ip_address: None,
        },
    );
    assert_eq!(
        hb.message,
        Message::HeartbeatResponse(HeartbeatResponse {
            recovery_time_stamp: RecoveryTimeStamp(NTP0)
        })
    );
    assert_eq!(
        s.agent.session_count(),
        3,
        "a heartbeat of the same peer keeps them"
    );
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x78, Ipv4Addr::new(192, 0, 2, 9)));
    assert_eq!(s.modify(b, m).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(s.delete(a).1.cause, Cause::REQUEST_ACCEPTED);

    // What the restored sessions hold is not handed out again: b's TEIDs, d's UE address.
    let held_teids: Vec<u32> = before[&b]
        .pdrs
        .iter()
        .filter_map(|p| p.pdi.local_f_teid.map(|f| f.teid.0))
        .collect();
    let held_ue = ue_of(&s.agent, d);
    for _ in 0..20 {
        let (_, r) = s.establish(smf::UeAddr::Choose);
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        assert!(created_teids(&r).iter().all(|t| !held_teids.contains(t)));
        let seid = r.up_f_seid.unwrap().seid;
        assert_ne!(ue_of(&s.agent, seid), held_ue);
    }
}

fn ue_of(a: &Agent<MemDatapath>, seid: u64) -> Option<Ipv4Addr> {
    a.session(upf_rules::Seid(seid))?
        .pdrs
        .iter()
        .find_map(|p| p.pdi.ue_ip.and_then(|u| u.ipv4))
}

#[test]
fn ur_seqn_goes_on_after_a_restart() {
    let mut s = tracked();
    let mut store = Store::default();
    let a = s.establish_ok();
    let query = |s: &mut Smf| {
        let mut m = smf::modification();
        m.query_urrs.push(QueryUrr { urr_id: UrrId(1) });
        let r = s.modify(a, m);
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        r.usage_reports[0].ur_seqn.0
    };
    assert_eq!(query(&mut s), 0);
    assert_eq!(query(&mut s), 1);
    store.save(&mut s);
    restart(&mut s, &store);
    assert_eq!(query(&mut s), 2, "UR-SEQN does not start over");
}

/// One uplink packet of `bytes` as a data path counts it.
fn packet(bytes: u64) -> Volume {
    let mut v = Volume::default();
    v.count(bytes, true);
    v
}

/// A usage checkpoint read back after a restart: carried into the data path when its URR's
/// UR-SEQN is the one the restored session's next report takes (here into that report);
/// dropped when a report went out after it (a later UR-SEQN in the session's record): the
/// usage in that report must not count twice.
#[test]
fn a_usage_checkpoint_is_carried_only_if_no_report_followed_it() {
    let mut s = tracked();
    let mut store = Store::default();
    let a = s.establish_ok();
    let b = s.establish_ok();
    let query = |s: &mut Smf, seid: u64| {
        let mut m = smf::modification();
        m.query_urrs.push(QueryUrr { urr_id: UrrId(1) });
        let r = s.modify(seid, m);
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        let u = &r.usage_reports[0];
        let v = u.volume_measurement.as_ref().unwrap();
        (
            u.ur_seqn.0,
            v.total_volume.unwrap(),
            v.uplink_packets.unwrap(),
        )
    };
    for seid in [a, b] {
        s.agent
            .datapath_mut()
            .add_usage(Seid(seid), RUrrId(1), 1000, true);
    }
    // The checkpoint: what the data path counted since each URR's last report.
    let usage = [(RUrrId(1), packet(1000))];
    let rec_a = s.agent.usage_record(Seid(a), &usage).unwrap();
    let rec_b = s.agent.usage_record(Seid(b), &usage).unwrap();
    // b's usage is reported after the checkpoint (UR-SEQN 0 goes out, 1 is next).
    assert_eq!(query(&mut s, b), (0, 1000, 1));
    store.save(&mut s);
    restart(&mut s, &store);
    let carried = s.agent.checkpointed_usage(Seid(a), &rec_a);
    assert_eq!(carried, usage);
    assert_eq!(s.agent.checkpointed_usage(Seid(b), &rec_b), []);
    assert_eq!(s.agent.checkpointed_usage(Seid(a), b"not json"), []);
    for (urr, v) in carried {
        s.agent
            .datapath_mut()
            .add_usage(Seid(a), urr, v.uplink_bytes, true);
    }
    // The checkpoint's usage is in a's next report, with what follows; b reports what
    // follows only.
    for seid in [a, b] {
        s.agent
            .datapath_mut()
            .add_usage(Seid(seid), RUrrId(1), 500, true);
    }
    assert_eq!(query(&mut s, a), (0, 1500, 2));
    assert_eq!(query(&mut s, b), (1, 500, 1));
}

/// A driver holds what carries Usage Reports until the store has the UR-SEQN they took:
/// the agent marks them, and their resends (whose bytes only it keeps), and nothing else.
#[test]
fn messages_that_carry_usage_reports_are_marked() {
    let mut s = tracked();
    let a = s.establish_ok();
    let send = |s: &mut Smf, seq: u32, m: Message| {
        let out = s.send_bytes(&smf::encode(Some(a), seq, m));
        assert_eq!(out.len(), 1);
        out[0].usage
    };
    assert!(!send(&mut s, 100, smf::modification().into()), "no usage");
    let mut q = smf::modification();
    q.query_urrs.push(QueryUrr { urr_id: UrrId(1) });
    assert!(send(&mut s, 101, q.clone().into()), "a query's report");
    assert!(send(&mut s, 101, q.into()), "its resend");
    assert!(send(&mut s, 102, SessionDeletionRequest {}.into()));
}

#[test]
fn a_record_that_does_not_read_back_is_lost_alone_and_deleted() {
    let mut s = tracked();
    let mut store = Store::default();
    let a = s.establish_ok();
    let b = s.establish_ok();
    store.save(&mut s);
    store
        .sessions
        .insert(a, b"{\"not\": \"a session\"}".to_vec());
    let r = restart(&mut s, &store);
    assert_eq!(r.sessions, 1);
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    assert!(s.agent.session(upf_rules::Seid(b)).is_some());
    let c = s.agent.take_changes();
    assert_eq!(c.sessions, vec![(a, None)], "the bad record is deleted");
}

#[test]
fn released_associations_and_their_sessions_leave_the_store() {
    let mut s = tracked();
    let mut store = Store::default();
    s.establish_ok();
    s.establish_ok();
    store.save(&mut s);
    assert_eq!((store.associations.len(), store.sessions.len()), (1, 2));
    let r = s.request(
        None,
        AssociationReleaseRequest {
            node_id: s.node.clone(),
        },
    );
    assert!(matches!(r.message, Message::AssociationReleaseResponse(_)));
    store.save(&mut s);
    assert_eq!((store.associations.len(), store.sessions.len()), (0, 0));
}

#[test]
fn a_peer_that_restarted_meanwhile_loses_its_sessions_as_usual() {
    let mut s = tracked();
    let mut store = Store::default();
    s.establish_ok();
    store.save(&mut s);
    restart(&mut s, &store);
    assert_eq!(s.agent.session_count(), 1);
    // The SMF restarted while we were down: its new Recovery Time Stamp releases them.
    s.associate(5678);
    assert_eq!(s.agent.session_count(), 0);
    store.save(&mut s);
    assert!(store.sessions.is_empty());
}

#[test]
fn nothing_is_recorded_unless_tracking() {
    let mut s = Smf::associated();
    s.establish_ok();
    assert!(s.agent.take_changes().is_empty());
}

// ---- the state_records fuzz target's seeds and body ---------------------------------------

fn corpus_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/state_records")
}

/// The fuzz target's framing of a store's records (fuzz/fuzz_targets/state_records.rs).
fn frame(assoc: &[u8], sessions: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let len = |v: &[u8]| u16::try_from(v.len()).unwrap().to_be_bytes();
    out.extend_from_slice(&len(assoc));
    out.extend_from_slice(assoc);
    for (k, v) in sessions {
        out.extend_from_slice(&k.to_be_bytes());
        out.extend_from_slice(&len(v));
        out.extend_from_slice(v);
    }
    out
}

/// The fuzz target's body (keep in step with fuzz/fuzz_targets/state_records.rs): the
/// sessions it restored.
fn drive_records(data: &[u8]) -> BTreeMap<u64, Session> {
    fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (a, b) = data.split_at(n.min(data.len()));
        *data = b;
        a
    }
    fn len(data: &mut &[u8]) -> usize {
        let b = take(data, 2);
        usize::from(u16::from_be_bytes([
            b.first().copied().unwrap_or(0),
            b.get(1).copied().unwrap_or(0),
        ]))
    }
    let mut data = data;
    let n = len(&mut data);
    let assoc = take(&mut data, n).to_vec();
    let mut sessions = Vec::new();
    while !data.is_empty() {
        let mut key = [0u8; 8];
        let k = take(&mut data, 8);
        key[..k.len()].copy_from_slice(k);
        let n = len(&mut data);
        sessions.push((u64::from_be_bytes(key), take(&mut data, n).to_vec()));
    }
    let given = sessions.len();
    let now = std::time::Instant::now();
    let mut agent = Agent::new(
        upf_n4::Config::new(harness::UPF_IP.into()),
        MemDatapath::default(),
        now,
        3_900_000_000,
    )
    .unwrap();
    agent.track_changes();
    let key = upf_n4::node_key(&NodeId::Ipv4(SMF_IP));
    let r = agent.restore(now, 3_800_000_000, [(key, assoc)], sessions);
    assert_eq!(agent.session_count(), r.sessions);
    assert!(
        r.sessions + r.failed.len() >= given,
        "a session neither restored nor failed"
    );
    assert_eq!(agent.recovery_time_stamp(), 3_800_000_000);
    let restored = self::sessions(&agent);
    let _ = agent.take_changes();
    let hb = smf::encode(
        None,
        7,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1),
            source_ip_address: None,
        },
    );
    agent.handle_datagram(now, std::net::SocketAddr::new(SMF_IP.into(), 8805), &hb);
    assert!(
        agent.poll_transmit().is_some(),
        "no heartbeat response after a restore"
    );
    restored
}

/// Real records of a store: the association, three sessions (one with a Monitoring Time, a
/// QER Correlation ID and an inactivity timer).
fn real_records() -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
    let mut s = tracked();
    let mut store = Store::default();
    s.establish_ok();
    rich(&mut s, Ipv4Addr::new(10, 45, 0, 9));
    s.establish_ok();
    store.save(&mut s);
    let assoc = store.associations.values().next().unwrap().clone();
    (assoc, store.sessions.into_iter().collect())
}

/// Writes fuzz/corpus/state_records/: `cargo test -p upf-n4 --test persist -- --ignored`.
#[test]
#[ignore = "writes the fuzz corpus"]
fn write_state_records_corpus() {
    let (assoc, sessions) = real_records();
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let mut bad = sessions.clone();
    let half = bad[0].1.len() / 2;
    bad[0].1.truncate(half);
    let mut wrong_key = sessions.clone();
    wrong_key[1].0 ^= 1;
    let seeds = [
        ("three_sessions", frame(&assoc, &sessions)),
        ("one_session", frame(&assoc, &sessions[..1])),
        ("a_bad_record", frame(&assoc, &bad)),
        ("a_wrong_key", frame(&assoc, &wrong_key)),
        ("no_association", frame(b"", &sessions)),
    ];
    for (name, data) in seeds {
        std::fs::write(dir.join(name), data).unwrap();
    }
}

/// Every committed input of the fuzz corpus, through the target's body; the real records
/// restore whole.
#[test]
fn the_state_records_corpus_replays() {
    let (assoc, sessions) = real_records();
    assert_eq!(drive_records(&frame(&assoc, &sessions)).len(), 3);
    let mut n = 0;
    for e in std::fs::read_dir(corpus_dir()).unwrap() {
        drive_records(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 10, "the seed corpus is missing");
}

/// The records of `seed`, restored: each session by its CP SEID, with its own SEID (random
/// per run) taken out and its Monitoring Times at one instant (each restore's clock is
/// its own).
fn restored_seed(seed: &str, at: std::time::Instant) -> BTreeMap<u64, Session> {
    drive_records(&std::fs::read(corpus_dir().join(seed)).unwrap())
        .into_values()
        .map(|mut s| {
            s.seid = Seid(0);
            for u in &mut s.urrs {
                if let Some(t) = u.extra_mut().monitoring_time.as_mut() {
                    *t = at;
                }
            }
            (s.cp_seid.0, s)
        })
        .collect()
}

/// The committed seeds pin both formats: `three_sessions` (postcard, written by this build's
/// `write_state_records_corpus`) and `json_three_sessions` (JSON, by the build before it) are
/// the same three sessions and restore alike, a PDI's network instance included. A change to
/// a rule type that changes the postcard layout fails here: raise `FORMAT` and go on reading
/// the old layout rather than rewrite the seed.
#[test]
fn records_of_both_formats_restore_alike() {
    let at = std::time::Instant::now();
    let now = restored_seed("three_sessions", at);
    let json = restored_seed("json_three_sessions", at);
    assert_eq!(now.len(), 3);
    assert_eq!(now, json);
    for s in now.values() {
        for p in &s.pdrs {
            assert_eq!(p.pdi.network_instance(), Some("internet"), "{p:?}");
        }
    }
}
