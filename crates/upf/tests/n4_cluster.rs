//! Failover across instances (`[cluster]`, issue #29) as an operator meets it, on loopback
//! (no root: every 127.0.0.0/8 address is already on this host, so a shard's N4 address
//! "moves" as soon as the process holding it dies). Needs etcd (scripts/setup.sh).

mod common;

use common::{Peer, Upf};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use upf_netns::etcd::Etcd;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

const SMF: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn etcd() -> Etcd {
    Etcd::on_loopback().expect("etcd")
}

fn free_udp(ip: Ipv4Addr) -> SocketAddr {
    std::net::UdpSocket::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The cluster's file: shards a and b, each its N4 address, N3 address, pool, TEIDs.
fn config(etcd: &Etcd, a: SocketAddr, b: SocketAddr) -> PathBuf {
    let path = std::env::temp_dir().join(format!("upf-cluster-{}-{a}.toml", std::process::id()));
    let text = format!(
        r#"
[cluster]
etcd = ["{}"]
prefix = "/test-{}-{}"
lease_ttl_s = 2
[cluster.shards.a]
n4 = "{a}"
n3 = ["{}"]
ue_pool = [{{ ipv4 = "10.61.0.0/17" }}]
teid_range = [1, 0x7fffffff]
[cluster.shards.b]
n4 = "{b}"
n3 = ["{}"]
ue_pool = [{{ ipv4 = "10.61.128.0/17" }}]
teid_range = [0x80000000, 0xffffffff]
"#,
        etcd.endpoint(),
        std::process::id(),
        a.port(),
        a.ip(),
        b.ip(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The first answer to a heartbeat on `to` (any instance's), and how long it took.
fn answered(to: SocketAddr, within: Duration) -> (u32, Duration) {
    let probe = std::net::UdpSocket::bind("127.0.0.3:0").unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t0 = Instant::now();
    for seq in 1.. {
        assert!(t0.elapsed() < within, "nobody answers on {to}");
        let hb = HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(3_913_056_000),
            source_ip_address: None,
        };
        probe.send_to(&smf::encode(None, seq, hb), to).unwrap();
        let mut buf = [0u8; 256];
        if let Ok((n, _)) = probe.recv_from(&mut buf) {
            if let Ok((p, _)) = upf_pfcp::Pdu::decode(&buf[..n]) {
                if let Message::HeartbeatResponse(h) = p.message {
                    return (h.recovery_time_stamp.0, t0.elapsed());
                }
            }
        }
    }
    unreachable!()
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn a_survivor_takes_over_a_killed_instances_shard_without_the_smf() {
    let e = etcd();
    let (na, nb) = (
        free_udp(Ipv4Addr::new(127, 0, 0, 11)),
        free_udp(Ipv4Addr::new(127, 0, 0, 12)),
    );
    let cfg = config(&e, na, nb);
    let mut a = Upf::cluster(&cfg, "a", na);
    let b = Upf::cluster(&cfg, "b", nb);
    let mut smf = Peer::new(SMF, &a);
    assert_eq!(smf.associate(3_913_000_000), Cause::REQUEST_ACCEPTED);
    let seids = [smf.establish(), smf.establish(), smf.establish()];
    let recovery = smf.heartbeat();
    // The association, three sessions and the Recovery Time Stamp, in etcd.
    a.written(5.0);
    // b keeps them installed (hot standby), and follows what a changes: a fourth session
    // established and deleted, the first one modified.
    let until = Instant::now() + Duration::from_secs(5);
    while !b.log().contains("standing by for shard a") {
        assert!(Instant::now() < until, "{}", b.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let fourth = smf.establish();
    assert_eq!(smf.delete(fourth), Cause::REQUEST_ACCEPTED);
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x98, Ipv4Addr::new(192, 0, 2, 9)));
    assert_eq!(smf.modify(seids[0], m), Cause::REQUEST_ACCEPTED);
    a.written(8.0);
    assert_eq!(
        a.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        Some(3.0)
    );

    a.kill9();
    // b takes a over: the lease expires (2 s), b's next look sees it, loads a's records,
    // installs them and binds a's N4 address.
    let (rts, took) = answered(na, Duration::from_secs(10));
    assert_eq!(
        rts, recovery,
        "a's Recovery Time Stamp: the SMF sees no restart"
    );
    eprintln!("a's N4 answered again {took:?} after kill -9");
    assert!(took < Duration::from_secs(5), "took over in {took:?}");
    assert!(
        b.log()
            .contains("took over shard a (Node ID 127.0.0.11) from instance a, 3 sessions"),
        "{}",
        b.log()
    );
    assert!(
        b.log().contains("hot standby: installed already"),
        "{}",
        b.log()
    );
    let first = b.api(&format!("session/{}", seids[0])).to_string();
    assert!(
        first.contains("192.0.2.9"),
        "the modification made before the kill: {first}"
    );
    assert_eq!(
        b.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        Some(3.0)
    );
    assert_eq!(
        b.metric("upf_cluster_shard_sessions", &[("shard", "b")]),
        Some(0.0)
    );
    let listed = b.api("sessions");
    let of_a: Vec<&serde_json::Value> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["shard"] == "a")
        .collect();
    assert_eq!(of_a.len(), 3, "upf show sessions on b: {listed}");
    assert_eq!(b.api("associations")[0]["shard"], "a");
    // The SMF goes on with a's sessions where they were: a modification, a deletion, a
    // new session from a's TEIDs and pool.
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x99, Ipv4Addr::new(192, 0, 2, 7)));
    assert_eq!(smf.modify(seids[0], m), Cause::REQUEST_ACCEPTED);
    assert_eq!(smf.delete(seids[1]), Cause::REQUEST_ACCEPTED);
    let r = smf.try_establish(smf.node.clone());
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.node_id, NodeId::Ipv4(Ipv4Addr::new(127, 0, 0, 11)));
    for p in &r.created_pdrs {
        if let Some(FTeid::Assigned { teid, ipv4, .. }) = p.local_f_teid {
            assert!(teid < 0x8000_0000, "a's TEID range: {teid:#x}");
            assert_eq!(ipv4, Some(Ipv4Addr::new(127, 0, 0, 11)));
        }
    }
    assert_eq!(
        b.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        Some(3.0)
    );
    // b's own shard is untouched on its own address.
    let (_, _) = answered(nb, Duration::from_secs(1));
    eprintln!("{}", b.log());
    let _ = std::fs::remove_file(&cfg);
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn etcd_down_keeps_pfcp_going_and_writes_waiting() {
    let mut e = etcd();
    let (na, nb) = (
        free_udp(Ipv4Addr::new(127, 0, 0, 13)),
        free_udp(Ipv4Addr::new(127, 0, 0, 14)),
    );
    let cfg = config(&e, na, nb);
    let a = Upf::cluster(&cfg, "a", na);
    let mut smf = Peer::new(Ipv4Addr::new(127, 0, 0, 4), &a);
    assert_eq!(smf.associate(3_913_000_000), Cause::REQUEST_ACCEPTED);
    smf.establish();
    a.written(3.0);

    e.kill();
    let until = Instant::now() + Duration::from_secs(10);
    while a.metric("upf_cluster_etcd_reachable", &[]) != Some(0.0) {
        assert!(Instant::now() < until, "not said: {}", a.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.log().contains("etcd unreachable"), "{}", a.log());
    // PFCP goes on; what it changes waits, in memory.
    let more = [smf.establish(), smf.establish()];
    let until = Instant::now() + Duration::from_secs(5);
    while a.metric("upf_state_failing", &[]) != Some(1.0) {
        assert!(Instant::now() < until, "writes not failing: {}", a.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.metric("upf_state_pending_writes", &[]).unwrap() >= 2.0);
    assert_eq!(
        a.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        Some(3.0)
    );

    // Back: what waited lands, and the shard is still a's.
    e.restart().unwrap();
    a.written(5.0);
    let until = Instant::now() + Duration::from_secs(10);
    while a.metric("upf_cluster_etcd_reachable", &[]) != Some(1.0) {
        assert!(Instant::now() < until, "not said: {}", a.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.log().contains("etcd reachable again"), "{}", a.log());
    assert_eq!(a.metric("upf_state_writes_dropped_total", &[]), Some(0.0));
    assert_eq!(smf.delete(more[0]), Cause::REQUEST_ACCEPTED);
    let _ = std::fs::remove_file(&cfg);
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn a_restarted_instance_gets_its_shard_back() {
    let e = etcd();
    let (na, nb) = (
        free_udp(Ipv4Addr::new(127, 0, 0, 15)),
        free_udp(Ipv4Addr::new(127, 0, 0, 16)),
    );
    let cfg = config(&e, na, nb);
    let mut a = Upf::cluster(&cfg, "a", na);
    let b = Upf::cluster(&cfg, "b", nb);
    let mut smf = Peer::new(Ipv4Addr::new(127, 0, 0, 5), &a);
    assert_eq!(smf.associate(3_913_000_000), Cause::REQUEST_ACCEPTED);
    let seids = [smf.establish(), smf.establish()];
    let recovery = smf.heartbeat();
    a.written(4.0);
    a.kill9();
    answered(na, Duration::from_secs(10));
    assert_eq!(
        b.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        Some(2.0)
    );

    // a runs again: it waits while b serves its shard, b hands it back, a takes it.
    let a = Upf::cluster(&cfg, "a", na);
    let until = Instant::now() + Duration::from_secs(15);
    while a.metric("upf_cluster_shard_sessions", &[("shard", "a")]) != Some(2.0) {
        assert!(Instant::now() < until, "a: {}\nb: {}", a.log(), b.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        b.log()
            .contains("handed shard a back to instance a (its own), 2 sessions"),
        "{}",
        b.log()
    );
    assert_eq!(
        b.metric("upf_cluster_shard_sessions", &[("shard", "a")]),
        None
    );
    assert_eq!(smf.heartbeat(), recovery, "the SMF sees no restart");
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(2, 0x99, Ipv4Addr::new(192, 0, 2, 8)));
    assert_eq!(smf.modify(seids[0], m), Cause::REQUEST_ACCEPTED);
    assert!(
        a.log().contains("from instance b, 2 sessions"),
        "{}",
        a.log()
    );
    let _ = std::fs::remove_file(&cfg);
}
