//! The SMF emulator against the real N4 agent (`upf_n4::Agent` with the in-memory data path)
//! driven over a loopback UDP socket by a thread, as `upf run` drives it. No root needed.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use upf_loadgen::smf::{
    ids, Downlink, Qos, SessionSpec, Smf, SmfConfig, SmfError, UeAddr, UpfEvent,
};
use upf_n4::{Agent, Config};
use upf_pfcp::Cause;
use upf_rules::mem::MemDatapath;
use upf_rules::{ApplyAction, DatapathEvent, FarId, PdrId, Seid, UrrId};

const LO: Ipv4Addr = Ipv4Addr::LOCALHOST;
const GNB: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// The agent on 127.0.0.1:PORT, served by a thread until dropped.
struct Upf {
    agent: Arc<Mutex<Agent<MemDatapath>>>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upf {
    fn start(tweak: impl FnOnce(&mut Config)) -> Self {
        let sock = UdpSocket::bind((LO, 0)).unwrap();
        let addr = sock.local_addr().unwrap();
        let mut cfg = Config::new(IpAddr::V4(LO));
        tweak(&mut cfg);
        let agent = Arc::new(Mutex::new(
            Agent::new(cfg, MemDatapath::default(), Instant::now(), 3_900_000_000).unwrap(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (agent.clone(), stop.clone());
        sock.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !s.load(Ordering::Relaxed) {
                {
                    let mut ag = a.lock().unwrap();
                    let now = Instant::now();
                    ag.handle_datapath_events(now);
                    if ag.poll_timeout().is_some_and(|t| t <= now) {
                        ag.handle_timeout(now);
                    }
                    while let Some(t) = ag.poll_transmit() {
                        let _ = sock.send_to(&t.payload, t.dest);
                    }
                    while ag.poll_event().is_some() {}
                }
                if let Ok((n, peer)) = sock.recv_from(&mut buf) {
                    a.lock()
                        .unwrap()
                        .handle_datagram(Instant::now(), peer, &buf[..n]);
                }
            }
        });
        Self {
            agent,
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn agent(&self) -> MutexGuard<'_, Agent<MemDatapath>> {
        self.agent.lock().unwrap()
    }

    fn smf(&self) -> Smf {
        let mut cfg = SmfConfig::new(self.addr);
        cfg.bind = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0);
        cfg.t1 = Duration::from_millis(500);
        cfg.window = 16;
        Smf::new(cfg).unwrap()
    }
}

impl Drop for Upf {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn specs(n: u32, ue: impl Fn(u32) -> UeAddr) -> Vec<SessionSpec> {
    (0..n)
        .map(|i| {
            let mut s = SessionSpec::new(ue(i), 0x0100_0000 + i, GNB);
            s.qos = Some(Qos {
                mbr_kbps: Some((100_000, 200_000)),
                ..Qos::default()
            });
            s
        })
        .collect()
}

#[test]
fn hundred_sessions_established_modified_deleted() {
    let upf = Upf::start(|_| {});
    let mut smf = upf.smf();
    let a = smf.associate().unwrap();
    assert_eq!(a.upf_node, upf_pfcp::ie::NodeId::Ipv4(LO));
    assert_eq!(smf.heartbeat().unwrap(), a.recovery_time_stamp);

    let specs = specs(100, |i| {
        UeAddr::Static(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 60, 1, 1)) + i))
    });
    // Not recording yet: the association and heartbeat left no times behind.
    assert!(smf.take_response_times().is_empty());
    smf.record_response_times(true);
    let t0 = Instant::now();
    let sessions: Vec<_> = smf
        .establish_many(&specs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // One response time per answered request, none longer than the whole batch.
    let times = smf.take_response_times();
    assert_eq!(times.len(), 100);
    assert!(times.iter().all(|t| *t <= t0.elapsed()));
    assert!(smf.take_response_times().is_empty());
    smf.record_response_times(false);
    assert_eq!(upf.agent().session_count(), 100);
    assert_eq!(smf.session_count(), 100);
    let teids: HashSet<u32> = sessions.iter().map(|s| s.ul_teid).collect();
    assert_eq!(teids.len(), 100, "Created PDR F-TEIDs are distinct");
    assert!(!teids.contains(&0));
    let seids: HashSet<u64> = sessions.iter().map(|s| s.up_seid).collect();
    assert_eq!(seids.len(), 100);
    for (s, spec) in sessions.iter().zip(&specs) {
        assert_eq!(s.upf_n3, LO, "F-TEID address is the UPF's N3");
        assert_eq!(UeAddr::Static(s.ue), spec.ue);
        assert_eq!((s.dl_teid, s.gnb, s.qfi), (spec.dl_teid, GNB, 9));
    }
    // What the UPF installed: uplink PDR with the chosen TEID, downlink FAR towards the gNB.
    {
        let ag = upf.agent();
        let r = ag.datapath().session(Seid(sessions[7].up_seid)).unwrap();
        let ul = r.pdrs.iter().find(|p| p.id == PdrId(ids::PDR_UL)).unwrap();
        assert_eq!(
            ul.pdi.local_f_teid.map(|f| f.teid.0),
            Some(sessions[7].ul_teid)
        );
        let dl = r.fars.iter().find(|f| f.id == FarId(ids::FAR_DL)).unwrap();
        assert!(dl.action.contains(ApplyAction::FORW));
        assert_eq!(r.qers.len(), 1);
        assert_eq!(r.urrs.len(), 1);
    }

    // Idle: every downlink FAR buffers (and notifies), then forwards again.
    for r in smf.set_downlink_many(&sessions, Downlink::Buffer { notify: true }) {
        r.unwrap();
    }
    let far_action = |seid: u64| {
        let ag = upf.agent();
        let r = ag.datapath().session(Seid(seid)).unwrap();
        r.fars
            .iter()
            .find(|f| f.id == FarId(ids::FAR_DL))
            .unwrap()
            .action
    };
    assert!(far_action(sessions[42].up_seid).contains(ApplyAction::BUFF));
    // A downlink packet for the idle UE: the UPF reports it, the emulator acknowledges.
    upf.agent()
        .datapath_mut()
        .push_event(DatapathEvent::DownlinkData {
            seid: Seid(sessions[42].up_seid),
            pdr: PdrId(ids::PDR_DL),
            qfi: None,
            ppi: None,
        });
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut events = Vec::new();
    while events.is_empty() && Instant::now() < deadline {
        smf.serve(Duration::from_millis(50)).unwrap();
        events = smf.take_events();
    }
    assert_eq!(
        events,
        [UpfEvent::DownlinkData {
            cp_seid: sessions[42].cp_seid
        }]
    );
    smf.set_downlink(&sessions[42], Downlink::Forward).unwrap();
    assert!(far_action(sessions[42].up_seid).contains(ApplyAction::FORW));

    // Usage: what the data path counted comes back in Query URR and in the deletion.
    upf.agent()
        .datapath_mut()
        .add_usage(Seid(sessions[3].up_seid), UrrId(ids::URR), 1500, true);
    let u = smf.query_usage(&sessions[3]).unwrap();
    assert_eq!(
        (u.reports, u.uplink_octets, u.total_octets),
        (1, 1500, 1500)
    );
    upf.agent()
        .datapath_mut()
        .add_usage(Seid(sessions[3].up_seid), UrrId(ids::URR), 700, false);

    let usages: Vec<_> = smf
        .delete_many(&sessions)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(usages[3].downlink_octets, 700);
    assert_eq!(upf.agent().session_count(), 0);
    assert_eq!(smf.session_count(), 0);
    // Deleting again: the UPF does not know the session, and the error says so.
    let e = smf.delete(&sessions[0]).unwrap_err();
    assert!(
        matches!(e, SmfError::Rejected { cause, .. } if cause == Cause::SESSION_CONTEXT_NOT_FOUND),
        "{e}"
    );
    assert!(e.to_string().contains("Session context not found"), "{e}");

    smf.release().unwrap();
    assert_eq!(upf.agent().association_count(), 0);
    let st = smf.stats();
    assert_eq!(st.retransmissions, 0);
    assert_eq!(st.timeouts, 0);
}

#[test]
fn chv4_and_given_teids() {
    let upf = Upf::start(|_| {});
    let mut smf = upf.smf();
    smf.associate().unwrap();
    let mut specs = specs(50, |_| UeAddr::Choose);
    for (i, s) in (0u32..).zip(specs.iter_mut()).skip(25) {
        // Given uplink F-TEIDs (the SMF manages them).
        s.ul_f_teid = Some((0x7000_0000 + i, LO));
        s.qos = None;
    }
    let sessions: Vec<_> = smf
        .establish_many(&specs)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let ues: HashSet<Ipv4Addr> = sessions.iter().map(|s| s.ue).collect();
    assert_eq!(ues.len(), 50, "distinct CHV4 addresses");
    assert!(ues.iter().all(|a| a.octets()[..2] == [10, 60]));
    assert_eq!(sessions[30].ul_teid, 0x7000_001e);
    let teids: HashSet<u32> = sessions.iter().map(|s| s.ul_teid).collect();
    assert_eq!(teids.len(), 50);
    for r in smf.delete_many(&sessions) {
        r.unwrap();
    }
    smf.release().unwrap();
}

#[test]
fn rejections_name_the_cause() {
    let upf = Upf::start(|_| {});
    let mut smf = upf.smf();
    let spec = SessionSpec::new(UeAddr::Static(Ipv4Addr::new(10, 60, 0, 1)), 1, GNB);
    let e = smf.establish(&spec).unwrap_err();
    assert!(
        matches!(e, SmfError::Rejected { cause, .. } if cause == Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
        "{e}"
    );
    assert!(e.to_string().contains("cause 72"), "{e}");
    smf.associate().unwrap();
    smf.establish(&spec).unwrap();
    // The same static UE address again: the UPF refuses the rule.
    let e = smf.establish(&spec).unwrap_err();
    let SmfError::Rejected {
        cause, failed_rule, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert!(!cause.is_accepted());
    assert!(failed_rule.is_some(), "{e}");
    assert!(e.to_string().contains("rejected"), "{e}");
    assert_eq!(smf.session_count(), 1);
}

#[test]
fn no_answer_is_retransmitted_then_a_timeout() {
    let silent = UdpSocket::bind((LO, 0)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = silent.local_addr().unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (got.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        let mut b = [0u8; 2048];
        while !s.load(Ordering::Relaxed) {
            if silent.recv_from(&mut b).is_ok() {
                g.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut cfg = SmfConfig::new(addr);
    cfg.t1 = Duration::from_millis(50);
    cfg.n1 = 3;
    let mut smf = Smf::new(cfg).unwrap();
    let start = Instant::now();
    let e = smf.associate().unwrap_err();
    assert!(
        matches!(
            e,
            SmfError::Timeout {
                attempts: 4,
                request: "Association Setup Request"
            }
        ),
        "{e}"
    );
    assert!(start.elapsed() >= Duration::from_millis(200));
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert_eq!(
        got.load(Ordering::Relaxed),
        4,
        "1 transmission + N1 = 3 retransmissions"
    );
    assert_eq!(smf.stats().retransmissions, 3);
}

#[test]
fn upf_heartbeats_are_answered() {
    let upf = Upf::start(|c| {
        c.heartbeat_interval = Duration::from_millis(100);
        c.t1 = Duration::from_millis(50);
        c.n1 = 1;
    });
    let mut smf = upf.smf();
    smf.associate().unwrap();
    smf.serve(Duration::from_millis(700)).unwrap();
    assert!(smf.stats().upf_requests >= 3, "{:?}", smf.stats());
    // Unanswered heartbeats would have released it by now.
    assert_eq!(upf.agent().association_count(), 1);
}
