//! The N4 agent itself, fed arbitrary datagrams: an agent associated with one SMF receives the
//! fuzz input as a sequence of datagrams from a handful of peers, with virtual time advancing
//! and timers run in between. It must never panic, and every datagram it sends (responses,
//! heartbeats, reports, retransmissions) must decode as PFCP.
//!
//! Input framing, repeated until the input ends:
//!   control byte: bits 0-1 peer (0: the associated SMF, 1: same IP other port, 2: another
//!                 IPv4 host, 3: an IPv6 host), bits 2-4 time step (0, 10 ms, 100 ms, 1 s, 3 s,
//!                 10 s, 60 s, 600 s), bit 5 run `handle_timeout` after the datagram,
//!                 bit 6 skip the datagram (timers only);
//!   length:       u16, big-endian (clamped to what is left);
//!   datagram:     `length` bytes; a header SEID k in 1..=n is the k-th UP SEID handed out.
//! The seed corpus (fuzz/corpus/n4_agent/) is written by
//! `cargo test -p upf-n4 --test fuzz_corpus -- --ignored`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_n4::{Agent, Config};
use upf_smf as smf;
use upf_pfcp::ie::NodeId;
use upf_pfcp::{Message, Pdu};
use upf_rules::mem::MemDatapath;

const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const STEPS_MS: [u64; 8] = [0, 10, 100, 1_000, 3_000, 10_000, 60_000, 600_000];

fn drain(agent: &mut Agent<MemDatapath>, seids: &mut Vec<u64>) {
    while let Some(t) = agent.poll_transmit() {
        match Pdu::decode(&t.payload) {
            Ok((pdu, rest)) => {
                assert!(rest.is_empty(), "trailing bytes after our message");
                if let Message::SessionEstablishmentResponse(m) = &pdu.message {
                    seids.extend(m.up_f_seid.map(|f| f.seid));
                }
            }
            Err(e) => panic!(
                "the agent sent a malformed message ({e}): {:02x?}",
                t.payload
            ),
        }
    }
    while agent.poll_event().is_some() {}
}

fuzz_target!(|data: &[u8]| {
    let peers = [
        SocketAddr::new(SMF_IP.into(), 8805),
        SocketAddr::new(SMF_IP.into(), 40000),
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)), 8805),
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8805),
    ];
    let mut now = Instant::now();
    let mut agent = Agent::new(
        Config::new(UPF_IP.into()),
        MemDatapath::default(),
        now,
        3_900_000_000,
    )
    .expect("default config");
    let mut seids = Vec::new();
    let setup = smf::encode(None, 1, smf::association_setup(NodeId::Ipv4(SMF_IP), 1234));
    agent.handle_datagram(now, peers[0], &setup);
    assert_eq!(agent.association_count(), 1);
    drain(&mut agent, &mut seids);

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
            drain(&mut agent, &mut seids);
        }
        if ctl & 0x20 != 0 {
            agent.handle_timeout(now);
            drain(&mut agent, &mut seids);
        }
    }
    // Whatever happened, the clock running on must not trip anything.
    for _ in 0..4 {
        now += Duration::from_secs(30);
        agent.handle_timeout(now);
        drain(&mut agent, &mut seids);
    }
});
