//! Micro-benchmarks of the pipeline's stages, and of whole batches (uplink, downlink) through
//! one worker with 1 and 10,000 sessions. The per-core figures of the seed profiles come from
//! `upf-bench memory`; these say where the time goes.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::stages::{gpdu_v4, Template, TokenBucket};
use upf_dataplane::{flow_of, LocalAddrs, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::*;
use upf_wire::encap::{decapsulate, encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

const UPF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn ue(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0001 + i)
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[0] = 0x45;
    v[2..4].copy_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
    v[8] = 64;
    v[9] = 17;
    v[12..16].copy_from_slice(&src.octets());
    v[16..20].copy_from_slice(&dst.octets());
    let c = upf_wire::checksum::checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v[20..22].copy_from_slice(&sport.to_be_bytes());
    v[22..24].copy_from_slice(&dport.to_be_bytes());
    v[24..26].copy_from_slice(&u16::try_from(len - 20).unwrap().to_be_bytes());
    v
}

fn gpdu(teid: u32, inner: &[u8]) -> Packet {
    let mut p = Packet::from_bytes(Port::N3, inner).unwrap();
    let (s, l) = (p.start(), p.len());
    let e = EncapV4 {
        src: Ipv4Addr::new(192, 0, 2, 100),
        dst: UPF,
        ident: 0,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(PduSessionContainer::ul(9)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    let start = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &e).unwrap();
    p.set_range(start, s + l);
    p
}

/// A session like S0's default bearer plus one SDF-filtered flow each way.
fn session(i: u32) -> Arc<Session> {
    let mut s = Session::new(Seid(u64::from(i) + 1), Seid(1), IpAddr::V4(UPF));
    let ue_ip = |dst| UeIp {
        ipv4: Some(ue(i)),
        ipv6: None,
        is_destination: dst,
    };
    let filter: SharedSlice<SdfFilter> = vec![SdfFilter {
        flow: Some(
            FlowDescription::parse("permit out 17 from 198.51.100.0/24 5000-5003 to assigned")
                .unwrap(),
        ),
        ..Default::default()
    }]
    .into();
    let mut pdrs = Vec::new();
    for (id, prec, access, filtered) in [
        (1, 10, true, true),
        (2, 255, true, false),
        (3, 10, false, true),
        (4, 255, false, false),
    ] {
        let mut pdi = Pdi::any(if access {
            Interface::Access
        } else {
            Interface::Core
        });
        if access {
            pdi.local_f_teid = Some(LocalFTeid {
                teid: Teid(100 + i),
                ipv4: Some(UPF),
                ipv6: None,
            });
        }
        pdi.ue_ip = Some(ue_ip(!access));
        if filtered {
            pdi.sdf_filters = filter.clone();
        }
        pdrs.push(Pdr {
            id: PdrId(id),
            precedence: Precedence(prec),
            pdi,
            outer_header_removal: access.then_some(OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(if access { 1 } else { 2 })),
            qers: [QerId(1)].into_iter().collect(),
            urrs: [UrrId(1)].into_iter().collect(),
        });
    }
    s.pdrs = pdrs;
    s.fars = vec![
        Far {
            id: FarId(1),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding::to(Interface::Core)),
            duplicating: Box::default(),
            bar: None,
        },
        Far {
            id: FarId(2),
            action: ApplyAction::FORW,
            forwarding: Some(Forwarding {
                outer_header_creation: Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(7),
                    peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)),
                }),
                ..Forwarding::to(Interface::Access)
            }),
            duplicating: Box::default(),
            bar: None,
        },
    ];
    let mut q = Qer::open(QerId(1));
    q.mbr = Some(Bitrate {
        uplink_kbps: 100_000_000,
        downlink_kbps: 100_000_000,
    });
    q.qfi = Some(Qfi(9));
    s.qers = vec![q];
    s.urrs = vec![Urr::new(UrrId(1))];
    Arc::new(s)
}

fn pipeline(sessions: u32) -> Pipeline {
    let now = Instant::now();
    let mut p = Pipeline::new(
        now,
        PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            ..Default::default()
        },
    );
    for i in 0..sessions {
        p.install(now, session(i), InstallFlags::default()).unwrap();
    }
    p
}

fn stages(c: &mut Criterion) {
    let inner = udp4(ue(0), Ipv4Addr::new(198, 51, 100, 1), 40000, 5001, 64);
    let g = gpdu(100, &inner);
    let mut grp = c.benchmark_group("stage");
    grp.bench_function("decap/fast", |b| b.iter(|| gpdu_v4(black_box(g.data()))));
    grp.bench_function("decap/general", |b| {
        b.iter(|| decapsulate(black_box(g.data())))
    });
    grp.bench_function("inner_flow", |b| b.iter(|| flow_of(black_box(&inner))));
    let mut bucket = TokenBucket::new(0, 1_000_000_000_000, Duration::from_millis(100));
    let mut t = 0u64;
    grp.bench_function("mbr_bucket", |b| {
        b.iter(|| {
            t += 50;
            if bucket.conforms(t, 512) {
                bucket.take(512);
            }
        })
    });
    let tmpl = Template::v4(UPF, Ipv4Addr::new(192, 0, 2, 100), 7, 0, 64, Some(true)).unwrap();
    let mut buf = vec![0u8; 256];
    grp.bench_function("encap/template", |b| {
        b.iter(|| tmpl.write(black_box(&mut buf), 128, 192, 1, 0, 9, None))
    });
    let e = EncapV4 {
        src: UPF,
        dst: Ipv4Addr::new(192, 0, 2, 100),
        ident: 1,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid: 7,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(PduSessionContainer::dl(9)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    grp.bench_function("encap/general", |b| {
        b.iter(|| encapsulate_gtpu_v4(black_box(&mut buf), 128, 64, &e))
    });
    grp.finish();
}

fn batches(c: &mut Criterion) {
    let mut grp = c.benchmark_group("batch256");
    grp.throughput(Throughput::Elements(256));
    for sessions in [1u32, 10_000] {
        let mut dp = pipeline(sessions);
        let ul: Vec<Packet> = (0..256u32)
            .map(|k| {
                let i = k.wrapping_mul(2_654_435_761) % sessions;
                let dport = if k % 2 == 0 { 5001 } else { 443 };
                gpdu(
                    100 + i,
                    &udp4(ue(i), Ipv4Addr::new(198, 51, 100, 1), 40000, dport, 64),
                )
            })
            .collect();
        let dl: Vec<Packet> = (0..256u32)
            .map(|k| {
                let i = k.wrapping_mul(2_654_435_761) % sessions;
                let sport = if k % 2 == 0 { 5001 } else { 443 };
                Packet::from_bytes(
                    Port::N6,
                    &udp4(Ipv4Addr::new(198, 51, 100, 1), ue(i), sport, 40000, 64),
                )
                .unwrap()
            })
            .collect();
        let mut out = Output::default();
        for (name, pkts) in [("uplink", &ul), ("downlink", &dl)] {
            grp.bench_function(format!("{name}/{sessions}_sessions"), |b| {
                b.iter_batched_ref(
                    || pkts.clone(),
                    |rx| {
                        dp.process(Instant::now(), rx, &mut out);
                        out.tx.clear();
                        out.free.clear();
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    grp.finish();
}

criterion_group!(benches, stages, batches);
criterion_main!(benches);
