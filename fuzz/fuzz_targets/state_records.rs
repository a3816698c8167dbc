//! Persisted state read back (#29): arbitrary bytes as the records of a store restored into an
//! agent. Restore must never panic; every session is either restored or listed as failed (and
//! deleted from the store by the next changes taken); the agent answers a heartbeat after.
//!
//! Input framing: u16 BE length + an association record, then until the input ends: u64 BE
//! key (the UP SEID) + u16 BE length + a session record (lengths clamped to what is left).
//! The seed corpus (fuzz/corpus/state_records/) is written by
//! `cargo test -p upf-n4 --test persist -- --ignored` (keep the body in step with
//! `drive_records` there).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;
use upf_n4::{node_key, Agent, Config};
use upf_pfcp::ie::NodeId;
use upf_rules::mem::MemDatapath;
use upf_smf as smf;

const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (a, b) = data.split_at(n.min(data.len()));
    *data = b;
    a
}

fn len(data: &mut &[u8]) -> usize {
    let b = take(data, 2);
    usize::from(u16::from_be_bytes([b.first().copied().unwrap_or(0), b.get(1).copied().unwrap_or(0)]))
}

fuzz_target!(|data: &[u8]| {
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
    let now = Instant::now();
    let mut agent =
        Agent::new(Config::new(UPF_IP.into()), MemDatapath::default(), now, 3_900_000_000)
            .unwrap();
    agent.track_changes();
    let key = node_key(&NodeId::Ipv4(SMF_IP));
    let r = agent.restore(now, 3_800_000_000, [(key, assoc)], sessions);
    assert_eq!(agent.session_count(), r.sessions);
    assert!(r.sessions + r.failed.len() >= given, "a session neither restored nor failed");
    assert_eq!(agent.recovery_time_stamp(), 3_800_000_000);
    let _ = agent.take_changes();
    let hb = smf::encode(None, 7, upf_pfcp::messages::HeartbeatRequest {
        recovery_time_stamp: upf_pfcp::ie::RecoveryTimeStamp(1),
        source_ip_address: None,
    });
    agent.handle_datagram(now, SocketAddr::new(SMF_IP.into(), 8805), &hb);
    assert!(agent.poll_transmit().is_some(), "no heartbeat response after a restore");
});
