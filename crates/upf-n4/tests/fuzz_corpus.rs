//! The seed corpus of the `n4_agent` fuzz target (fuzz/fuzz_targets/n4_agent.rs), and a replay
//! of every committed input of that corpus through the same driver, so that a crash the fuzzer
//! found stays fixed once its input is added to fuzz/corpus/n4_agent/.
//!
//! Regenerate the seeds: `cargo test -p upf-n4 --test fuzz_corpus -- --ignored`.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use upf_n4::{Agent, Config};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_rules::mem::MemDatapath;
use upf_smf::{self as smf, UeAddr};

const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const STEPS_MS: [u64; 8] = [0, 10, 100, 1_000, 3_000, 10_000, 60_000, 600_000];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/n4_agent")
}

/// The fuzz target's body (keep in step with fuzz/fuzz_targets/n4_agent.rs).
fn drive(data: &[u8]) -> Vec<Pdu> {
    fn drain(agent: &mut Agent<MemDatapath>, sent: &mut Vec<Pdu>, seids: &mut Vec<u64>) {
        while let Some(t) = agent.poll_transmit() {
            match Pdu::decode(&t.payload) {
                Ok((pdu, rest)) => {
                    assert!(rest.is_empty(), "trailing bytes after our message");
                    if let Message::SessionEstablishmentResponse(m) = &pdu.message {
                        seids.extend(m.up_f_seid.map(|f| f.seid));
                    }
                    sent.push(pdu);
                }
                Err(e) => panic!(
                    "the agent sent a malformed message ({e}): {:02x?}",
                    t.payload
                ),
            }
        }
        while agent.poll_event().is_some() {}
    }
    let peers = [
        SocketAddr::new(SMF_IP.into(), 8805),
        SocketAddr::new(SMF_IP.into(), 40000),
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)), 8805),
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8805),
    ];
    let mut sent = Vec::new();
    let mut seids = Vec::new();
    let mut now = Instant::now();
    let mut agent = Agent::new(
        Config::new(UPF_IP.into()),
        MemDatapath::default(),
        now,
        3_900_000_000,
    )
    .unwrap();
    let setup = smf::encode(None, 1, smf::association_setup(NodeId::Ipv4(SMF_IP), 1234));
    agent.handle_datagram(now, peers[0], &setup);
    assert_eq!(agent.association_count(), 1);
    drain(&mut agent, &mut sent, &mut seids);
    let mut rest = data;
    while let Some((&ctl, tail)) = rest.split_first() {
        let (len, tail) = match tail {
            [a, b, tail @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), tail),
            _ => (tail.len(), &[][..]),
        };
        let (dgram, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        now += Duration::from_millis(STEPS_MS[usize::from((ctl >> 2) & 7)]);
        if ctl & 0x40 == 0 {
            let dgram = smf::with_seids(dgram, &seids);
            agent.handle_datagram(now, peers[usize::from(ctl & 3)], &dgram);
            drain(&mut agent, &mut sent, &mut seids);
        }
        if ctl & 0x20 != 0 {
            agent.handle_timeout(now);
            drain(&mut agent, &mut sent, &mut seids);
        }
    }
    for _ in 0..4 {
        now += Duration::from_secs(30);
        agent.handle_timeout(now);
        drain(&mut agent, &mut sent, &mut seids);
    }
    sent
}

/// One framed datagram: control byte (peer, time step, timers), u16 length, bytes.
fn frame(out: &mut Vec<u8>, peer: u8, step: u8, timers: bool, dgram: &[u8]) {
    out.push(peer | (step << 2) | if timers { 0x20 } else { 0 });
    out.extend_from_slice(&u16::try_from(dgram.len()).unwrap().to_be_bytes());
    out.extend_from_slice(dgram);
}

fn node() -> NodeId {
    NodeId::Ipv4(SMF_IP)
}

fn heartbeat(seq: u32) -> Vec<u8> {
    smf::encode(
        None,
        seq,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1234),
            source_ip_address: None,
        },
    )
}

fn establishment(seq: u32, cp_seid: u64, ue: UeAddr) -> Vec<u8> {
    smf::encode(
        Some(0),
        seq,
        smf::establishment(node(), cp_seid, SMF_IP, ue),
    )
}

fn modification(seq: u32, seid: u64) -> Vec<u8> {
    let mut m = smf::modification();
    m.update_fars = [smf::update_far_to_gnb(
        4,
        0x0200_0002,
        Ipv4Addr::new(10, 0, 1, 2),
    )]
    .into_iter()
    .collect();
    m.remove_pdrs = [RemovePdr { pdr_id: PdrId(4) }].into_iter().collect();
    m.create_pdrs = [smf::create_pdr(
        5,
        50,
        smf::pdi(
            SourceInterface::CORE,
            None,
            Some(smf::ue_ip(UeAddr::Choose, true)),
            Some("permit out 6 from 10.2.0.0/16 80 to assigned"),
        ),
        2,
        &[1],
        &[1],
        false,
    )]
    .into_iter()
    .collect();
    m.query_urrs = [QueryUrr { urr_id: UrrId(1) }].into_iter().collect();
    smf::encode(Some(seid), seq, m)
}

fn deletion(seq: u32, seid: u64) -> Vec<u8> {
    smf::encode(Some(seid), seq, SessionDeletionRequest {})
}

/// Named seeds: each a sequence of framed datagrams.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = Vec::new();
    let one = |d: Vec<u8>| {
        let mut o = Vec::new();
        frame(&mut o, 0, 0, false, &d);
        o
    };
    v.push((
        "association_setup",
        one(smf::encode(None, 2, smf::association_setup(node(), 1234))),
    ));
    v.push((
        "association_setup_restarted_peer",
        one(smf::encode(None, 2, smf::association_setup(node(), 99))),
    ));
    v.push(("heartbeat", one(heartbeat(2))));
    v.push((
        "establishment_choose",
        one(establishment(2, 0x1001, UeAddr::Choose)),
    ));
    v.push((
        "establishment_static_ue",
        one(establishment(
            2,
            0x1001,
            UeAddr::Static(Ipv4Addr::new(10, 60, 0, 9)),
        )),
    ));
    v.push(("modification_unknown_seid", one(modification(2, 77))));
    v.push(("deletion_unknown_seid", one(deletion(2, 77))));
    v.push((
        "association_release",
        one(smf::encode(
            None,
            2,
            AssociationReleaseRequest { node_id: node() },
        )),
    ));
    let mut life = Vec::new();
    frame(
        &mut life,
        0,
        1,
        false,
        &establishment(2, 0x1001, UeAddr::Choose),
    );
    frame(&mut life, 0, 2, false, &modification(3, 1));
    frame(&mut life, 0, 3, true, &heartbeat(4));
    frame(&mut life, 0, 1, false, &deletion(5, 1));
    v.push(("session_lifecycle", life));
    let mut retx = Vec::new();
    let est = establishment(2, 0x1001, UeAddr::Choose);
    frame(&mut retx, 0, 0, false, &est);
    frame(&mut retx, 0, 4, true, &est);
    frame(&mut retx, 1, 0, false, &est);
    frame(
        &mut retx,
        0,
        0,
        false,
        &establishment(3, 0x1001, UeAddr::Choose),
    );
    v.push(("establishment_retransmitted_and_replaced", retx));
    let mut two = Vec::new();
    let mut both = establishment(2, 0x1001, UeAddr::Choose);
    both[0] |= 0x02; // FO: another message follows
    both.extend_from_slice(&establishment(3, 0x1002, UeAddr::Choose));
    frame(&mut two, 0, 0, false, &both);
    frame(&mut two, 0, 0, false, &deletion(4, 2));
    v.push(("two_establishments_one_datagram", two));
    let mut timers = Vec::new();
    frame(
        &mut timers,
        0,
        1,
        false,
        &establishment(2, 0x1001, UeAddr::Choose),
    );
    frame(&mut timers, 2, 5, true, &heartbeat(3));
    frame(&mut timers, 3, 6, true, &heartbeat(4));
    frame(&mut timers, 0, 7, true, &[]);
    v.push(("heartbeats_lost_association_down", timers));
    v
}

#[test]
#[ignore = "writes the seed corpus into fuzz/corpus/n4_agent"]
fn write_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn seeds_are_answered() {
    // Every seed request gets a well-formed answer (the driver checks decoding).
    for (name, bytes) in seeds() {
        let sent = drive(&bytes);
        assert!(sent.len() >= 2, "{name}: {sent:?}");
        // The seeds that build a session must get past decoding and be accepted: that is
        // what makes them good starting points for the fuzzer.
        let accepted = sent
            .iter()
            .filter(|p| {
                matches!(&p.message, Message::SessionEstablishmentResponse(m) if m.cause == Cause::REQUEST_ACCEPTED)
                    || matches!(&p.message, Message::SessionModificationResponse(m) if m.cause == Cause::REQUEST_ACCEPTED)
                    || matches!(&p.message, Message::SessionDeletionResponse(m) if m.cause == Cause::REQUEST_ACCEPTED)
            })
            .count();
        let want = match name {
            "session_lifecycle" => 3,
            "two_establishments_one_datagram" => 3,
            "establishment_retransmitted_and_replaced" => 4,
            "establishment_choose" | "establishment_static_ue" => 1,
            "heartbeats_lost_association_down" => 1,
            _ => 0,
        };
        assert_eq!(accepted, want, "{name}: {sent:#?}");
    }
}

#[test]
fn committed_corpus_replays_without_panic() {
    let Ok(dir) = std::fs::read_dir(corpus_dir()) else {
        return;
    };
    let mut n = 0;
    for e in dir {
        let path = e.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        drive(&bytes);
        n += 1;
    }
    assert!(n > 0);
}
