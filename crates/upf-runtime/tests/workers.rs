//! Workers: sessions spread by UE, per-UE order kept across workers, counters balanced.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, Packet, PipelineConfig, Port};
use upf_rules::{
    ApplyAction, Datapath, DatapathError, DatapathEvent, InstallFlags, ReportingTriggers, Seid,
    Session, Teid, Urr, UrrId, UsageTrigger, VolumeLimit,
};
mod common;

use common::{gpdu, session, ue, UPF};
use upf_runtime::{RuntimeConfig, Workers};
use upf_wire::{checksum, ip_proto};

/// `workers` workers on channels, receiving GTP-U on [`UPF`].
fn config(workers: usize) -> RuntimeConfig {
    RuntimeConfig {
        workers,
        pipeline: PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A G-PDU from UE `i` whose inner IPv4 Identification carries `seq`.
fn uplink(i: u32, seq: u16) -> Packet {
    uplink_flow(i, seq, 0)
}

/// [`uplink`] from UDP source port `sport` (one flow per port).
fn uplink_flow(i: u32, seq: u16, sport: u16) -> Packet {
    gpdu(100 + i, ue(i), seq, sport)
}

#[test]
fn per_ue_order_is_kept_across_workers() {
    const UES: u32 = 64;
    const PER_UE: u16 = 40;
    let cfg = config(2);
    let mut w = Workers::start(&cfg).unwrap();
    for i in 0..UES {
        w.install(Instant::now(), session(i), InstallFlags::default())
            .unwrap();
    }
    // Interleave UEs within each injected batch, as a NIC queue would.
    for round in 0..PER_UE / 8 {
        let batch = (0..8u16)
            .flat_map(|k| (0..UES).map(move |i| uplink(i, round * 8 + k)))
            .collect();
        w.steer(batch);
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < (UES * u32::from(PER_UE)) as usize && Instant::now() < deadline {
        got.extend(w.collect(Duration::from_millis(200)));
    }
    assert_eq!(got.len(), (UES * u32::from(PER_UE)) as usize);
    let mut seqs: HashMap<[u8; 4], Vec<u16>> = HashMap::new();
    for p in &got {
        assert_eq!(p.port(), Port::N6);
        let d = p.data();
        let src: [u8; 4] = d[12..16].try_into().unwrap();
        seqs.entry(src)
            .or_default()
            .push(u16::from_be_bytes([d[4], d[5]]));
    }
    assert_eq!(seqs.len(), UES as usize);
    for (ue, s) in &seqs {
        assert!(
            s.windows(2).all(|w| w[0] < w[1]),
            "UE {ue:?} reordered: {s:?}"
        );
    }
    let counters = w.counters();
    assert_eq!(counters.len(), 2);
    for c in &counters {
        assert!(c.balanced(), "{c:?}");
        // Both workers own some of the 64 UEs.
        assert!(c.sent() > 0, "{counters:?}");
    }
    // Usage and removal reach the owning worker.
    for i in 0..UES {
        w.remove(Instant::now(), Seid(u64::from(i) + 1)).unwrap();
    }
    assert!(w.remove(Instant::now(), Seid(1)).is_err());
}

#[test]
fn a_peak_rate_ue_is_spread_per_flow_over_both_workers() {
    let cfg = RuntimeConfig {
        spread_ues: vec![IpAddr::V4(ue(0))],
        ..config(2)
    };
    let mut w = Workers::start(&cfg).unwrap();
    w.install(Instant::now(), session(0), InstallFlags::default())
        .unwrap();
    const FLOWS: u16 = 12;
    const PER_FLOW: u16 = 20;
    let batch = (0..PER_FLOW)
        .flat_map(|k| (0..FLOWS).map(move |f| uplink_flow(0, k, 1000 + f)))
        .collect();
    w.steer(batch);
    let total = usize::from(FLOWS * PER_FLOW);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < total && Instant::now() < deadline {
        got.extend(w.collect(Duration::from_millis(200)));
    }
    assert_eq!(got.len(), total);
    let mut per_flow: HashMap<u16, Vec<u16>> = HashMap::new();
    for p in &got {
        let d = p.data();
        per_flow
            .entry(u16::from_be_bytes([d[20], d[21]]))
            .or_default()
            .push(u16::from_be_bytes([d[4], d[5]]));
    }
    for (f, s) in &per_flow {
        assert!(
            s.windows(2).all(|w| w[0] < w[1]),
            "flow {f} reordered: {s:?}"
        );
    }
    let counters = w.counters();
    assert!(
        counters.iter().all(|c| c.sent() > 0 && c.balanced()),
        "both workers carry the UE: {counters:?}"
    );
}

/// Workers on (in-memory) interfaces: everything arrives on worker 0's N3 queue, as from a
/// backend that cannot steer; each packet is handed once to its UE's owner, which sends it by
/// its own N6 queue, in order per UE.
#[test]
fn unsteered_queues_hand_packets_to_the_owner() {
    hand_off_to_owner(Some(upf_runtime::IDLE_POLL));
}

/// The same with busy-polling workers (`workers.busy_poll`: they never sleep, and still
/// flush, take control messages and stop).
#[test]
fn busy_polling_workers_hand_packets_to_the_owner() {
    hand_off_to_owner(None);
}

fn hand_off_to_owner(idle_poll: Option<Duration>) {
    use upf_io::mem;
    use upf_runtime::{PortQueue, WorkerQueues};
    const UES: u32 = 32;
    const PER_UE: u16 = 20;
    let cfg = RuntimeConfig {
        idle_poll,
        ..config(2)
    };
    let mut n3_peers = Vec::new();
    let mut n6_peers = Vec::new();
    let queues = (0..2)
        .map(|_| {
            let (n3, p3) = mem::pair(Port::N3);
            let (n6, p6) = mem::pair(Port::N6);
            n3_peers.push(p3);
            n6_peers.push(p6);
            WorkerQueues {
                queues: vec![
                    PortQueue {
                        port: Port::N3,
                        instance: 0,
                        io: Box::new(n3),
                    },
                    PortQueue {
                        port: Port::N6,
                        instance: 0,
                        io: Box::new(n6),
                    },
                ],
                steered: false,
            }
        })
        .collect();
    let mut w = Workers::start_io(&cfg, queues).unwrap();
    for i in 0..UES {
        w.install(Instant::now(), session(i), InstallFlags::default())
            .unwrap();
    }
    for k in 0..PER_UE {
        for i in 0..UES {
            n3_peers[0].inject(uplink(i, k).data());
        }
    }
    let total = (UES * u32::from(PER_UE)) as usize;
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.iter().map(Vec::len).sum::<usize>() < total && Instant::now() < deadline {
        for (g, p) in got.iter_mut().zip(&n6_peers) {
            g.extend(p.take_sent());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), total);
    let mut seqs: HashMap<[u8; 4], Vec<u16>> = HashMap::new();
    for (worker, g) in got.iter().enumerate() {
        assert!(!g.is_empty(), "worker {worker} sent nothing");
        for d in g {
            let src: [u8; 4] = d[12..16].try_into().unwrap();
            let owner = upf_runtime::steer::worker_of(
                upf_runtime::steer::ue_hash(IpAddr::V4(src.into())),
                2,
            );
            assert_eq!(
                owner, worker,
                "UE {src:?} sent by a worker that does not own it"
            );
            seqs.entry(src)
                .or_default()
                .push(u16::from_be_bytes([d[4], d[5]]));
        }
    }
    for (ue, s) in &seqs {
        assert!(s.windows(2).all(|w| w[0] < w[1]), "UE {ue:?}: {s:?}");
    }
    let stats = w.stats();
    assert_eq!(stats.len(), 2);
    assert!(
        stats[0].handed_off > 0 && stats[1].handed_off == 0,
        "{stats:?}"
    );
    assert_eq!(
        stats[0].handed_off,
        stats[1].counters.received(),
        "what worker 0 handed off is what worker 1 received"
    );
    for s in &stats {
        assert!(s.counters.balanced());
        assert_eq!(s.io.len(), 2);
    }
    assert_eq!(stats[0].io[0].2.rx_packets, total as u64);
}

/// Packets a FAR buffered go out as soon as the FAR forwards again, on a worker that receives
/// nothing more (they used to wait for the next received packet).
#[test]
fn released_buffer_goes_out_without_further_traffic() {
    use upf_io::mem;
    use upf_runtime::{PortQueue, WorkerQueues};
    const K: u16 = 10;
    let cfg = config(1);
    let (n3, p3) = mem::pair(Port::N3);
    let (n6, p6) = mem::pair(Port::N6);
    let queues = vec![WorkerQueues {
        queues: vec![
            PortQueue {
                port: Port::N3,
                instance: 0,
                io: Box::new(n3),
            },
            PortQueue {
                port: Port::N6,
                instance: 0,
                io: Box::new(n6),
            },
        ],
        steered: true,
    }];
    let mut w = Workers::start_io(&cfg, queues).unwrap();
    let forwarding = session(0);
    let mut buffering = (*forwarding).clone();
    buffering.fars[0].action = ApplyAction::BUFF;
    w.install(Instant::now(), Arc::new(buffering), InstallFlags::default())
        .unwrap();
    for k in 0..K {
        p3.inject(uplink(0, k).data());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.counters()[0].buffered < u64::from(K) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(w.counters()[0].buffered, u64::from(K));
    assert!(p6.take_sent().is_empty());
    w.install(Instant::now(), forwarding, InstallFlags::default())
        .unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < usize::from(K) && Instant::now() < deadline {
        got.extend(p6.take_sent());
        std::thread::sleep(Duration::from_millis(5));
    }
    let seqs: Vec<u16> = got
        .iter()
        .map(|d| u16::from_be_bytes([d[4], d[5]]))
        .collect();
    assert_eq!(seqs, (0..K).collect::<Vec<_>>());
    assert_eq!(w.counters()[0].buffered, 0);
    assert!(w.counters()[0].balanced());
}

/// Three workers on channels.
fn three_workers() -> Workers {
    Workers::start(&config(3)).unwrap()
}

/// The first UE (as in [`ue`]) whose sessions and packets worker `worker` owns.
fn ue_on(w: &Workers, worker: usize) -> u32 {
    (0..)
        .find(|&i| w.steering().owners(Some(IpAddr::V4(ue(i)))) == [worker])
        .unwrap()
}

/// Session `seid` without a UE address (installed on every worker), its uplink PDR on `teid`.
fn without_ue(seid: u64, teid: u32) -> Session {
    let mut s = (*session(0)).clone();
    s.seid = Seid(seid);
    s.pdrs[0].pdi.ue_ip = None;
    if let Some(t) = s.pdrs[0].pdi.local_f_teid.as_mut() {
        t.teid = Teid(teid);
    }
    s
}

/// Sends `packets` and returns what the workers forwarded (waiting until `expect` came out,
/// then a little longer for any more).
fn forwarded(w: &Workers, packets: Vec<Packet>, expect: usize) -> Vec<Packet> {
    w.steer(packets);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < expect && Instant::now() < deadline {
        got.extend(w.collect(Duration::from_millis(200)));
    }
    got.extend(w.collect(Duration::from_millis(50)));
    got
}

/// Which session each worker holds under `seid`.
fn held(w: &Workers, seid: Seid) -> Vec<Option<Arc<Session>>> {
    (0..w.len()).map(|i| w.session_on(i, seid)).collect()
}

/// A modification of a session on every worker that the last worker refuses (its TEID belongs
/// to another session there) leaves every worker with the old session: the workers that took
/// the new one are put back, and packets follow the old rules everywhere.
#[test]
fn a_later_workers_refusal_puts_the_old_session_back_on_every_worker() {
    let mut w = three_workers();
    let x = ue_on(&w, 2);
    w.install(Instant::now(), session(x), InstallFlags::default())
        .unwrap();
    const SEID: u64 = 1000;
    const TEID: u32 = 0x5000;
    let old = Arc::new(without_ue(SEID, TEID));
    w.install(Instant::now(), old.clone(), InstallFlags::default())
        .unwrap();
    // The new version drops what the old one forwards, on x's TEID: workers 0 and 1 take it,
    // worker 2 (x's owner) refuses it.
    let mut new = without_ue(SEID, 100 + x);
    new.fars[0].action = ApplyAction::DROP;
    let e = w
        .install(Instant::now(), Arc::new(new), InstallFlags::default())
        .unwrap_err();
    assert!(matches!(e, DatapathError::NoResources(_)), "{e:?}");
    for (i, s) in held(&w, Seid(SEID)).iter().enumerate() {
        let s = s
            .as_ref()
            .unwrap_or_else(|| panic!("worker {i} lost the session"));
        assert!(Arc::ptr_eq(s, &old), "worker {i} holds {s:?}");
    }
    assert!(Arc::ptr_eq(w.installed(Seid(SEID)).unwrap(), &old));
    // The old rules on every worker (a packet steered to each), and x's session untouched.
    let packets: Vec<Packet> = (0..3)
        .map(|k| gpdu(TEID, ue(ue_on(&w, k)), 1, 0))
        .chain([uplink(x, 2)])
        .collect();
    let got = forwarded(&w, packets, 4);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got.iter().all(|p| p.port() == Port::N6));
    let counters = w.counters();
    for (k, c) in counters.iter().enumerate() {
        assert!(c.sent() > 0 && c.dropped_total() == 0, "worker {k}: {c:?}");
        assert!(c.balanced());
    }
    // The session is still whole: a removal reaches every worker.
    w.remove(Instant::now(), Seid(SEID)).unwrap();
    assert!(held(&w, Seid(SEID)).iter().all(Option::is_none));
}

/// A new session the last worker refuses is taken back from the workers that took it, and
/// leaves no key behind: the data path does not know it, and it installs once its TEID is free.
#[test]
fn a_later_workers_refusal_of_a_new_session_leaves_no_trace() {
    let mut w = three_workers();
    let x = ue_on(&w, 2);
    w.install(Instant::now(), session(x), InstallFlags::default())
        .unwrap();
    const SEID: u64 = 1000;
    let e = w
        .install(
            Instant::now(),
            Arc::new(without_ue(SEID, 100 + x)),
            InstallFlags::default(),
        )
        .unwrap_err();
    assert!(matches!(e, DatapathError::NoResources(_)), "{e:?}");
    assert!(held(&w, Seid(SEID)).iter().all(Option::is_none));
    assert!(w.installed(Seid(SEID)).is_none());
    assert!(matches!(
        w.remove(Instant::now(), Seid(SEID)),
        Err(DatapathError::UnknownSession(_))
    ));
    let sessions: Vec<usize> = w.stats().iter().map(|s| s.sessions).collect();
    assert_eq!(sessions, [0, 0, 1]);
    // x's packets still reach x's session.
    let got = forwarded(&w, vec![uplink(x, 1)], 1);
    assert_eq!(got.len(), 1);
    w.remove(Instant::now(), Seid(u64::from(x) + 1)).unwrap();
    w.install(
        Instant::now(),
        Arc::new(without_ue(SEID, 100 + x)),
        InstallFlags::default(),
    )
    .unwrap();
    assert!(held(&w, Seid(SEID)).iter().all(Option::is_some));
}

/// A session whose new version would move it from its UE's worker to every worker (its UE
/// address removed), refused by the last, stays on its worker alone, as it was.
#[test]
fn a_refused_move_to_every_worker_keeps_the_session_where_it_was() {
    let mut w = three_workers();
    let x = ue_on(&w, 2);
    let y = ue_on(&w, 0);
    w.install(Instant::now(), session(x), InstallFlags::default())
        .unwrap();
    let old = session(y);
    w.install(Instant::now(), old.clone(), InstallFlags::default())
        .unwrap();
    let mut new = without_ue(old.seid.0, 100 + x);
    new.fars[0].action = ApplyAction::DROP;
    assert!(w
        .install(Instant::now(), Arc::new(new), InstallFlags::default())
        .is_err());
    let held = held(&w, old.seid);
    assert!(Arc::ptr_eq(held[0].as_ref().unwrap(), &old), "{held:?}");
    assert!(held[1].is_none() && held[2].is_none(), "{held:?}");
    let got = forwarded(&w, vec![uplink(y, 1)], 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].port(), Port::N6);
}

/// A spread UE's packets all arriving on worker 0's queue (a backend that cannot steer, or
/// AF_XDP's queue): handed over per flow, so its flows reach both workers, each flow one
/// worker, in order.
#[test]
fn unsteered_queues_spread_a_peak_rate_ue_per_flow() {
    use upf_io::mem;
    use upf_runtime::{PortQueue, WorkerQueues};
    const FLOWS: u16 = 16;
    const PER_FLOW: u16 = 20;
    let cfg = RuntimeConfig {
        spread_ues: vec![IpAddr::V4(ue(0))],
        ..config(2)
    };
    let mut n3_peers = Vec::new();
    let mut n6_peers = Vec::new();
    let queues = (0..2)
        .map(|_| {
            let (n3, p3) = mem::pair(Port::N3);
            let (n6, p6) = mem::pair(Port::N6);
            n3_peers.push(p3);
            n6_peers.push(p6);
            WorkerQueues {
                queues: vec![
                    PortQueue {
                        port: Port::N3,
                        instance: 0,
                        io: Box::new(n3),
                    },
                    PortQueue {
                        port: Port::N6,
                        instance: 0,
                        io: Box::new(n6),
                    },
                ],
                steered: false,
            }
        })
        .collect();
    let mut w = Workers::start_io(&cfg, queues).unwrap();
    w.install(Instant::now(), session(0), InstallFlags::default())
        .unwrap();
    for k in 0..PER_FLOW {
        for f in 0..FLOWS {
            n3_peers[0].inject(uplink_flow(0, k, 1000 + f).data());
        }
    }
    let total = usize::from(FLOWS * PER_FLOW);
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.iter().map(Vec::len).sum::<usize>() < total && Instant::now() < deadline {
        for (g, p) in got.iter_mut().zip(&n6_peers) {
            g.extend(p.take_sent());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), total);
    let mut flows: HashMap<u16, (usize, Vec<u16>)> = HashMap::new();
    for (worker, g) in got.iter().enumerate() {
        assert!(
            !g.is_empty(),
            "worker {worker} carries none of the UE's flows"
        );
        for d in g {
            let sport = u16::from_be_bytes([d[20], d[21]]);
            let e = flows.entry(sport).or_insert((worker, Vec::new()));
            assert_eq!(e.0, worker, "flow {sport} on both workers");
            e.1.push(u16::from_be_bytes([d[4], d[5]]));
        }
    }
    assert_eq!(flows.len(), usize::from(FLOWS));
    for (f, (_, s)) in &flows {
        assert!(
            s.windows(2).all(|w| w[0] < w[1]),
            "flow {f} reordered: {s:?}"
        );
    }
    let stats = w.stats();
    assert!(stats[0].handed_off > 0, "{stats:?}");
    assert!(stats.iter().all(|s| s.counters.balanced()));
}

/// Two data networks with the same UE address, each with its N6 queue (issue #26 §5): uplink
/// leaves by the queue of its FAR's network instance, and what an N6 queue receives is
/// looked up in that queue's instance.
#[test]
fn each_network_instance_has_its_own_n6_queue() {
    use upf_dataplane::NetworkInstances;
    use upf_io::mem;
    use upf_rules::{Forwarding, OuterHeaderCreation, Pdi, Pdr, PdrId, Precedence, UeIp};
    use upf_runtime::{PortQueue, WorkerQueues};
    let cfg = RuntimeConfig {
        workers: 1,
        pipeline: PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            network_instances: NetworkInstances::new(["dn-a".into(), "dn-b".into()]).unwrap(),
            ..Default::default()
        },
        ..Default::default()
    };
    let (n3, n3_peer) = mem::pair(Port::N3);
    let (a, a_peer) = mem::pair(Port::N6);
    let (b, b_peer) = mem::pair(Port::N6);
    let queues = vec![WorkerQueues {
        queues: vec![
            PortQueue {
                port: Port::N3,
                instance: 0,
                io: Box::new(n3),
            },
            PortQueue {
                port: Port::N6,
                instance: 1,
                io: Box::new(a),
            },
            PortQueue {
                port: Port::N6,
                instance: 2,
                io: Box::new(b),
            },
        ],
        steered: true,
    }];
    let mut w = Workers::start_io(&cfg, queues).unwrap();
    // Sessions 0 (dn-a) and 1 (dn-b), both on UE 0's address; downlink to gNB TEID 500 + k.
    for (k, ni) in [(0u32, "dn-a"), (1, "dn-b")] {
        let mut s = (*session(k)).clone();
        s.pdrs[0].pdi.ue_ip = Some(UeIp {
            ipv4: Some(ue(0)),
            ipv6: None,
            is_destination: false,
        });
        let mut dl = Pdi::any(upf_rules::Interface::Core);
        dl.ue_ip = Some(UeIp {
            ipv4: Some(ue(0)),
            ipv6: None,
            is_destination: true,
        });
        s.pdrs.push(Pdr {
            id: PdrId(2),
            precedence: Precedence(10),
            pdi: dl,
            outer_header_removal: None,
            far: Some(upf_rules::FarId(2)),
            qers: Default::default(),
            urrs: Default::default(),
        });
        let mut far = s.fars[0].clone();
        far.id = upf_rules::FarId(2);
        far.forwarding = Some(Forwarding {
            outer_header_creation: Some(OuterHeaderCreation::Gtpu {
                teid: Teid(500 + k),
                peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)),
            }),
            ..Forwarding::to(upf_rules::Interface::Access)
        });
        s.fars.push(far);
        for p in &mut s.pdrs {
            p.pdi.extra_mut().network_instance = Some(ni.into());
        }
        if let Some(f) = &mut s.fars[0].forwarding {
            f.extra_mut().network_instance = Some(ni.into());
        }
        w.install(Instant::now(), Arc::new(s), InstallFlags::default())
            .unwrap();
    }
    n3_peer.inject(gpdu(100, ue(0), 1, 0).data());
    n3_peer.inject(gpdu(101, ue(0), 2, 0).data());
    let mut reply = vec![0u8; 28];
    reply[0] = 0x45;
    reply[2..4].copy_from_slice(&28u16.to_be_bytes());
    reply[8] = 64;
    reply[9] = ip_proto::UDP;
    reply[12..16].copy_from_slice(&[198, 51, 100, 1]);
    reply[16..20].copy_from_slice(&ue(0).octets());
    let c = checksum::checksum(&reply[..20]);
    reply[10..12].copy_from_slice(&c.to_be_bytes());
    b_peer.inject(&reply);
    let (mut got_a, mut got_b, mut got_n3) = (Vec::new(), Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while (got_a.len(), got_b.len(), got_n3.len()) != (1, 1, 1) && Instant::now() < deadline {
        got_a.extend(a_peer.take_sent());
        got_b.extend(b_peer.take_sent());
        got_n3.extend(n3_peer.take_sent());
        std::thread::sleep(Duration::from_millis(5));
    }
    // The uplink of each session by its own instance's N6 (the Identification says which).
    let ids = |g: &[Vec<u8>]| {
        g.iter()
            .map(|d| u16::from_be_bytes([d[4], d[5]]))
            .collect::<Vec<_>>()
    };
    assert_eq!((ids(&got_a), ids(&got_b)), (vec![1], vec![2]));
    // The downlink from dn-b's N6 into dn-b's session's tunnel.
    assert_eq!(got_n3.len(), 1);
    let d = upf_wire::encap::decapsulate_verified(&got_n3[0]).unwrap();
    assert_eq!(d.gtpu.teid, 501);
}

/// The next event, waiting for the workers to send it (`None`: none came in 10 s).
fn next_event(w: &mut Workers) -> Option<DatapathEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = w.poll_event() {
            return Some(e);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A spread UE's threshold report (TS 29.244 §5.2.2) holds what every worker counted since
/// the previous report, not only what the reporting worker did; the shared threshold then
/// counts anew from that report, as after a query; and the removal reports the rest, so that
/// every octet is reported once.
#[test]
fn a_spread_ues_threshold_report_holds_every_workers_usage() {
    let cfg = RuntimeConfig {
        spread_ues: vec![IpAddr::V4(ue(0))],
        ..config(2)
    };
    let mut w = Workers::start(&cfg).unwrap();
    let flow_on = |w: &Workers, worker: usize| {
        (1000..2000)
            .find(|&f| w.steering().worker(&uplink_flow(0, 0, f)) == worker)
            .unwrap()
    };
    let (f0, f1) = (flow_on(&w, 0), flow_on(&w, 1));
    let mut s = (*session(0)).clone();
    s.pdrs[0].urrs = [UrrId(1)].into_iter().collect();
    s.urrs = vec![Urr::new(UrrId(1))];
    w.install(Instant::now(), Arc::new(s.clone()), InstallFlags::default())
        .unwrap();
    let send = |w: &Workers, flow: u16, n: u16| {
        let p = (0..n).map(|k| uplink_flow(0, k, flow)).collect();
        assert_eq!(forwarded(w, p, n.into()).len(), usize::from(n));
    };
    // The octets a packet counts, by a query.
    send(&w, f0, 1);
    let q = w.query_usage(Instant::now(), s.seid, &[UrrId(1)]).unwrap();
    assert_eq!((q.len(), q[0].volume.total_packets), (1, 1));
    let size = q[0].volume.total_bytes;
    // Reported at the 10th packet, over both workers (a few octets under it: what a worker
    // leased and had not counted when the count restarted, an octet here, is not counted
    // again; budgets.rs).
    s.urrs[0].triggers = ReportingTriggers::VOLTH;
    s.urrs[0].volume_threshold = Some(VolumeLimit {
        total: Some(10 * size - 4),
        ..Default::default()
    });
    w.install(Instant::now(), Arc::new(s.clone()), InstallFlags::default())
        .unwrap();
    send(&w, f0, 4);
    send(&w, f1, 6);
    // Worker 1 found the threshold reached (and restarted the shared count); both count on
    // before the report is read.
    send(&w, f0, 3);
    send(&w, f1, 2);
    let Some(DatapathEvent::Usage(r)) = next_event(&mut w) else {
        panic!("no report")
    };
    assert_eq!(r.trigger, UsageTrigger::VOLTH);
    assert_eq!(
        (r.volume.total_packets, r.volume.total_bytes),
        (15, 15 * size),
        "both workers' packets, up to the report"
    );
    // The threshold counts from that report, over both workers: again at 10 packets, those
    // counted after worker 1 found it reached being in the report.
    send(&w, f0, 9);
    send(&w, f1, 1);
    let Some(DatapathEvent::Usage(r2)) = next_event(&mut w) else {
        panic!("no second report")
    };
    assert_eq!(
        (r2.trigger, r2.volume.total_packets),
        (UsageTrigger::VOLTH, 10)
    );
    send(&w, f1, 3);
    send(&w, f0, 2);
    let last = w.remove(Instant::now(), s.seid).unwrap();
    assert_eq!(last.len(), 1, "one final report of the URR: {last:?}");
    assert_eq!(last[0].volume.total_packets, 5);
    assert!(w.poll_event().is_none(), "no other report");
}

/// A modification that removes a URR and that a later worker refuses loses none of the
/// URR's usage: the workers put back count it from zero, and what they had counted goes
/// into its next report (here the removal's).
#[test]
fn a_refused_modification_keeps_the_usage_of_the_urrs_it_removed() {
    let mut w = three_workers();
    let x = ue_on(&w, 2);
    w.install(Instant::now(), session(x), InstallFlags::default())
        .unwrap();
    const SEID: u64 = 1000;
    const TEID: u32 = 0x5000;
    let mut old = without_ue(SEID, TEID);
    old.pdrs[0].urrs = [UrrId(2)].into_iter().collect();
    old.urrs = vec![Urr::new(UrrId(2))];
    w.install(Instant::now(), Arc::new(old), InstallFlags::default())
        .unwrap();
    // Two packets on each worker, counted by URR 2.
    let ues: Vec<Ipv4Addr> = (0..3).map(|k| ue(ue_on(&w, k))).collect();
    let on_each =
        |seq: u16| -> Vec<Packet> { ues.iter().map(|&u| gpdu(TEID, u, seq, 0)).collect() };
    let packets: Vec<Packet> = on_each(1).into_iter().chain(on_each(2)).collect();
    assert_eq!(forwarded(&w, packets, 6).len(), 6);
    // The new version, without URR 2, on x's TEID: workers 0 and 1 take it and report URR
    // 2's final usage, worker 2 refuses it.
    let new = without_ue(SEID, 100 + x);
    assert!(w
        .install(Instant::now(), Arc::new(new), InstallFlags::default())
        .is_err());
    assert_eq!(forwarded(&w, on_each(3), 3).len(), 3);
    let last = w.remove(Instant::now(), Seid(SEID)).unwrap();
    let urr2: Vec<_> = last.iter().filter(|r| r.urr == UrrId(2)).collect();
    assert_eq!(urr2.len(), 1, "{last:?}");
    assert_eq!(urr2[0].volume.total_packets, 9, "every packet, once");
}

/// A restart's installs in one go (`install_new`): each session lands on its UE's worker (or,
/// without a UE address, on every worker), a session whose TEID another holds is refused
/// alone, and packets of every installed session are forwarded.
#[test]
fn new_sessions_installed_in_one_go_are_each_installed_or_refused_alone() {
    const UES: u32 = 300;
    let mut w = three_workers();
    let mut sessions: Vec<Arc<Session>> = (0..UES).map(session).collect();
    sessions.push(Arc::new(without_ue(5000, 0x5000)));
    // UE 7's TEID again: refused, and nothing else with it.
    sessions.push(Arc::new(without_ue(5001, 100 + 7)));
    let results = w.install_new(Instant::now(), sessions);
    assert_eq!(results.len(), UES as usize + 2);
    let failed: Vec<usize> = (0..)
        .zip(&results)
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed, [UES as usize + 1], "{:?}", results.last());
    assert_eq!(w.session_count(), UES as usize + 1);
    for i in 0..UES {
        let owner = w.steering().owners(Some(IpAddr::V4(ue(i))))[0];
        let seid = Seid(u64::from(i) + 1);
        assert!(
            w.session_on(owner, seid).is_some(),
            "UE {i} on worker {owner}"
        );
    }
    assert!(held(&w, Seid(5000)).iter().all(Option::is_some));
    assert!(held(&w, Seid(5001)).iter().all(Option::is_none));
    let packets: Vec<Packet> = (0..UES).map(|i| uplink(i, 1)).collect();
    let got = forwarded(&w, packets, UES as usize);
    assert_eq!(got.len(), UES as usize);
}

/// A usage checkpoint's bulk read: each session that counted since the last read, with what
/// it counted since its last report; a session that did not count is left out, one that
/// reported since comes back (its usage restarted), and a spread UE's session holds every
/// worker's count.
#[test]
fn the_checkpoint_read_returns_only_sessions_that_counted_since_the_last() {
    let cfg = RuntimeConfig {
        spread_ues: vec![IpAddr::V4(ue(0))],
        ..config(2)
    };
    let mut w = Workers::start(&cfg).unwrap();
    let with_urr = |i: u32| {
        let mut s = (*session(i)).clone();
        s.pdrs[0].urrs = [UrrId(1)].into_iter().collect();
        s.urrs = vec![Urr::new(UrrId(1))];
        Arc::new(s)
    };
    for i in 0..4 {
        w.install(Instant::now(), with_urr(i), InstallFlags::default())
            .unwrap();
    }
    let read = |w: &Workers| {
        let mut r: Vec<(u64, u64)> = (w.unreported_changed().unwrap().into_iter())
            .map(|(s, u)| {
                assert_eq!(u.len(), 1);
                assert_eq!(u[0].0, UrrId(1));
                (s.0, u[0].1.total_packets)
            })
            .collect();
        r.sort_unstable();
        r
    };
    assert_eq!(read(&w), [], "nothing counted yet");
    let flow_on = |w: &Workers, worker: usize| {
        (1000..2000)
            .find(|&f| w.steering().worker(&uplink_flow(0, 0, f)) == worker)
            .unwrap()
    };
    let (f0, f1) = (flow_on(&w, 0), flow_on(&w, 1));
    let send = |w: &Workers, p: Vec<Packet>| {
        let n = p.len();
        assert_eq!(forwarded(w, p, n).len(), n);
    };
    // UE 0 (spread) on both workers, UEs 1 and 2.
    send(&w, vec![uplink_flow(0, 1, f0), uplink_flow(0, 2, f1)]);
    send(&w, vec![uplink(1, 1), uplink(1, 2), uplink(2, 1)]);
    // SEIDs are UE + 1.
    assert_eq!(read(&w), [(1, 2), (2, 2), (3, 1)]);
    assert_eq!(read(&w), [], "nothing counted since");
    // UE 0 on one worker only: still both workers' count; UE 2 counts on.
    send(&w, vec![uplink_flow(0, 3, f1), uplink(2, 2)]);
    assert_eq!(read(&w), [(1, 3), (3, 2)]);
    // A report restarts UE 1's usage: it comes back, with nothing counted.
    let q = w.query_usage(Instant::now(), Seid(2), &[]).unwrap();
    assert_eq!(q[0].volume.total_packets, 2);
    assert_eq!(read(&w), [(2, 0)]);
    assert_eq!(read(&w), []);
    // A removed session is not read.
    w.remove(Instant::now(), Seid(3)).unwrap();
    send(&w, vec![uplink(3, 1)]);
    assert_eq!(read(&w), [(4, 1)]);
}
