//! GTP-U path management over the workers (on the real clock, short timers): one worker
//! probes every peer that some session on any worker has a live tunnel to; a silent peer is
//! reported once, an answer steered to that worker restores it, and a peer whose last
//! tunnel goes is no longer probed. (The timing itself is tested on a virtual clock in
//! upf-dataplane's tests/paths.rs.)

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::paths::EchoConfig;
use upf_dataplane::{LocalAddrs, Packet, PipelineConfig, Port};
use upf_rules::{
    ApplyAction, Datapath, DatapathEvent, Far, FarId, Forwarding, InstallFlags, Interface,
    OuterHeaderCreation, Seid, Session, Teid,
};
mod common;

use common::{ue, UPF};
use upf_runtime::{steer, RuntimeConfig, Workers, PATH_OWNER};
use upf_wire::gtpu_msg::{self, Message};
use upf_wire::{checksum, ip_proto};

const GNB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const GNB2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);

/// UE `i`'s session (common::session) with a downlink FAR 2 into a tunnel to `gnb`.
fn session(i: u32, gnb: Ipv4Addr) -> Arc<Session> {
    let mut s = (*common::session(i)).clone();
    let mut dl = Forwarding::to(Interface::Access);
    dl.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
        teid: Teid(0x1000 + i),
        peer: IpAddr::V4(gnb),
    });
    s.fars.push(Far {
        id: FarId(2),
        action: ApplyAction::FORW,
        forwarding: Some(dl),
        duplicating: Box::default(),
        bar: None,
    });
    Arc::new(s)
}

/// The destination and sequence number of an Echo Request the workers sent.
fn echo_request(p: &Packet) -> Option<(Ipv4Addr, u16)> {
    let d = p.data();
    let (r, m) = Message::parse(d.get(28..)?).ok()?;
    assert_eq!(p.port(), Port::N3);
    (m == Message::EchoRequest).then(|| {
        assert_eq!(d[12..16], UPF.octets());
        (
            Ipv4Addr::new(d[16], d[17], d[18], d[19]),
            r.seq_number.unwrap(),
        )
    })
}

fn echo_response(from: Ipv4Addr, seq: u16) -> Packet {
    let mut g = [0u8; 16];
    let n = gtpu_msg::emit_echo_response(0, seq, &mut g).unwrap();
    let total = 28 + n;
    let mut ip = vec![0u8; total];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&u16::try_from(total).unwrap().to_be_bytes());
    ip[8] = 64;
    ip[9] = ip_proto::UDP;
    ip[12..16].copy_from_slice(&from.octets());
    ip[16..20].copy_from_slice(&UPF.octets());
    let c = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20..22].copy_from_slice(&2152u16.to_be_bytes());
    ip[22..24].copy_from_slice(&2152u16.to_be_bytes());
    ip[24..26].copy_from_slice(&u16::try_from(8 + n).unwrap().to_be_bytes());
    ip[28..].copy_from_slice(&g[..n]);
    Packet::from_bytes(Port::N3, &ip).unwrap()
}

fn events(w: &mut Workers) -> Vec<DatapathEvent> {
    std::iter::from_fn(|| w.poll_event()).collect()
}

#[test]
fn one_worker_probes_the_peers_of_every_workers_sessions() {
    let cfg = RuntimeConfig {
        workers: 2,
        pipeline: PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            echo: EchoConfig {
                interval: Duration::from_millis(300),
                timeout: Duration::from_millis(20),
                retries: 2,
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let mut w = Workers::start(&cfg).unwrap();
    // Sessions to GNB on both workers; the one to GNB2 on the worker that does not probe.
    let owners: Vec<usize> = (0..8)
        .map(|i| steer::worker_of(steer::ue_hash(ue(i).into()), 2))
        .collect();
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    for i in 0..8 {
        w.install(Instant::now(), session(i, GNB), InstallFlags::default())
            .unwrap();
    }
    let other = (8..100)
        .find(|&i| steer::worker_of(steer::ue_hash(ue(i).into()), 2) != PATH_OWNER)
        .unwrap();
    w.install(
        Instant::now(),
        session(other, GNB2),
        InstallFlags::default(),
    )
    .unwrap();

    // Nobody answers: both peers probed, then each reported unreachable, once.
    let mut probed = HashSet::new();
    let mut down = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while down.len() < 2 && Instant::now() < deadline {
        probed.extend(
            w.collect(Duration::from_millis(20))
                .iter()
                .filter_map(echo_request)
                .map(|(a, _)| a),
        );
        down.extend(events(&mut w));
    }
    assert_eq!(probed, HashSet::from([GNB, GNB2]));
    std::thread::sleep(Duration::from_millis(700));
    down.extend(events(&mut w));
    down.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        down,
        [
            DatapathEvent::PeerUnreachable { peer: GNB.into() },
            DatapathEvent::PeerUnreachable { peer: GNB2.into() },
        ]
    );
    let c = w.counters();
    assert!(c[PATH_OWNER].echo_requests >= 4, "{c:?}");
    assert_eq!(
        (
            c[PATH_OWNER].gtpu_peers,
            c[PATH_OWNER].gtpu_peers_unreachable
        ),
        (2, 2)
    );
    let c1 = &c[1 - PATH_OWNER];
    assert_eq!((c1.echo_requests, c1.gtpu_peers), (0, 0), "{c1:?}");

    // GNB answers its requests (steered to the path owner like any signalling).
    let mut up = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while up.is_empty() && Instant::now() < deadline {
        let answers: Vec<Packet> = (w.collect(Duration::from_millis(20)).iter())
            .filter_map(echo_request)
            .filter(|(a, _)| *a == GNB)
            .map(|(_, seq)| echo_response(GNB, seq))
            .collect();
        w.steer(answers);
        up.extend(events(&mut w));
    }
    assert_eq!(up, [DatapathEvent::PeerRestored { peer: GNB.into() }]);
    assert!(w.counters()[PATH_OWNER].echo_responses >= 1);

    // GNB's sessions go: only GNB2 is probed from then on.
    for i in 0..8u64 {
        w.remove(Instant::now(), Seid(i + 1)).unwrap();
    }
    // Every worker has applied what was sent before this; drain what it sent meanwhile.
    let c = w.counters();
    assert_eq!(
        (
            c[PATH_OWNER].gtpu_peers,
            c[PATH_OWNER].gtpu_peers_unreachable
        ),
        (1, 1)
    );
    w.collect(Duration::from_millis(10));
    let mut probed = HashSet::new();
    let deadline = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < deadline {
        probed.extend(
            w.collect(Duration::from_millis(20))
                .iter()
                .filter_map(echo_request)
                .map(|(a, _)| a),
        );
    }
    assert_eq!(probed, HashSet::from([GNB2]));
    assert!(events(&mut w).is_empty());
    for c in w.counters() {
        assert!(c.balanced(), "{c:?}");
    }
}
