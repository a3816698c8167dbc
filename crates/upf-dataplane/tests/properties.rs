//! Properties of the pipeline:
//! - on random sessions and random packets, the PDR the compiled tables choose is the one
//!   the reference matcher (`upf_rules::Session::classify`) chooses;
//! - random bytes and random mutations of valid packets never panic and keep the counters
//!   balanced.

mod common;
use common::*;
use proptest::prelude::*;
use proptest::sample::select;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{DropReason, LocalAddrs, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::*;
use upf_wire::ext::PduSessionContainer;
use upf_wire::gtpu::MessageType;

const UE4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const UE6: &str = "2001:db8:1:2::";
const PEER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// PDR `id` forwards into tunnel `TAG + id`.
const TAG: u32 = 1000;

/// `cases` cases from a fixed seed, the same every run; PROPTEST_RNG_SEED=<number> explores
/// elsewhere.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::with_cases(cases);
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = proptest::test_runner::RngSeed::Fixed(0x5eed_0f0f);
    }
    c
}

fn pipeline(now: Instant) -> Pipeline {
    let upf6: Ipv6Addr = UPF6.parse().unwrap();
    let local = LocalAddrs {
        v4: Some(UPF),
        v6: Some(upf6),
    };
    Pipeline::new(
        now,
        PipelineConfig {
            n3: local,
            n9: local,
            buffer_packets_per_far: 2,
            buffer_bytes: 4096,
            ..Default::default()
        },
    )
}

// ---- generated sessions ------------------------------------------------------------------

#[derive(Debug, Clone)]
struct GenPdr {
    /// Some: an uplink PDR (source Access) on this local TEID; None: source Core.
    teid: Option<u32>,
    /// (IPv4 address, IPv6 prefix length, the UE is the destination)
    ue: Option<(bool, Option<u8>, bool)>,
    framed: bool,
    filters: Vec<SdfFilter>,
    qfis: Vec<u8>,
    precedence: u32,
}

fn endpoint() -> impl Strategy<Value = String> {
    (
        prop::bool::weighted(0.15),
        select(vec![
            "any",
            "any",
            "any",
            "assigned",
            "assigned",
            "10.0.0.0/8",
            "10.0.0.1",
            "198.51.100.0/24",
            "192.168.0.0/16",
            "0.0.0.0/0",
            "2001:db8::/32",
            "2001:db8:1:2::/64",
            "::/0",
        ]),
        select(vec![
            "",
            "",
            "53",
            "1000-2000",
            "1-100,40000-50000",
            "0-65535",
        ]),
    )
        .prop_map(|(neg, a, ports)| format!("{}{a} {ports}", if neg { "!" } else { "" }))
}

/// A remote endpoint of the fast form: IPv4 or any, no negation, one port range (a port
/// list, now and then, makes two fast filters of one).
fn fast_remote() -> impl Strategy<Value = String> {
    fast_endpoint(vec![
        "any",
        "any",
        "10.0.0.0/8",
        "198.51.100.0/24",
        "198.51.100.7",
        "198.51.100.200",
        "192.168.0.0/16",
        "172.16.0.1",
        "0.0.0.0/0",
    ])
}

/// The UE's endpoint, of the fast form.
fn fast_ue() -> impl Strategy<Value = String> {
    fast_endpoint(vec![
        "assigned",
        "assigned",
        "any",
        "10.0.0.1",
        "10.0.0.0/8",
    ])
}

fn fast_endpoint(addrs: Vec<&'static str>) -> impl Strategy<Value = String> {
    (
        select(addrs),
        select(vec![
            "",
            "",
            "53",
            "99",
            "1000-2000",
            "2001",
            "40000",
            "1-100,40000-50000",
        ]),
    )
        .prop_map(|(a, ports)| format!("{a} {ports}"))
}

fn flow_text_of(
    from: impl Strategy<Value = String>,
    to: impl Strategy<Value = String>,
) -> impl Strategy<Value = String> {
    (
        select(vec![
            "permit", "permit", "permit", "permit", "permit", "deny",
        ]),
        select(vec!["in", "out"]),
        select(vec!["ip", "17", "6", "47"]),
        from,
        to,
    )
        .prop_map(|(a, d, p, f, t)| format!("{a} {d} {p} from {f} to {t}"))
}

fn flow_text() -> impl Strategy<Value = String> {
    flow_text_of(endpoint(), endpoint())
}

fn sdf_filter() -> impl Strategy<Value = SdfFilter> {
    sdf_filter_of(
        flow_text(),
        prop::option::weighted(0.1, select(vec![0u32, 0x12345])),
    )
}

/// Filters for long lists: a hot record holds a PDR with many filters only if every one has
/// the fast form (one in ~50 does not: that session is cold).
fn fast_sdf_filter() -> impl Strategy<Value = SdfFilter> {
    prop_oneof![
        49 => sdf_filter_of(flow_text_of(fast_remote(), fast_ue()), Just(None)),
        1 => sdf_filter(),
    ]
}

/// A filter of `flow` with a flow label from `label` (a label is not of the fast form).
fn sdf_filter_of(
    flow: impl Strategy<Value = String>,
    label: impl Strategy<Value = Option<u32>>,
) -> impl Strategy<Value = SdfFilter> {
    (
        prop::option::weighted(0.85, flow),
        prop::option::weighted(0.2, select(vec![(0xb8u8, 0xfcu8), (0, 0xfc), (1, 3)])),
        label,
    )
        .prop_map(|(flow, tos, flow_label)| SdfFilter {
            flow: flow.map(|t| FlowDescription::parse(&t).unwrap_or_else(|e| panic!("{t}: {e}"))),
            tos,
            spi: None,
            flow_label,
            filter_id: None,
        })
}

fn gen_pdr() -> impl Strategy<Value = GenPdr> {
    (
        prop::option::of(select(vec![1u32, 1, 1, 2, 3])),
        prop::option::weighted(
            0.8,
            (
                prop::bool::weighted(0.8),
                prop::option::weighted(0.8, select(vec![64u8, 64, 64, 56, 128])),
                // Mostly the usual way round: the UE is the source of uplink PDRs.
                prop::bool::weighted(0.2),
            ),
        ),
        prop::bool::weighted(0.2),
        prop_oneof![
            2 => Just(Vec::new()),
            3 => prop::collection::vec(sdf_filter(), 1..3),
            // More than the inline lines of a hot record hold (its overflow run).
            2 => prop::collection::vec(fast_sdf_filter(), 5..=20),
        ],
        prop::collection::vec(1u8..=3, 0..2),
        0u32..4,
    )
        .prop_map(|(teid, ue, framed, filters, qfis, precedence)| GenPdr {
            teid,
            ue: ue.map(|(v4, v6, odd)| (v4, v6, teid.is_none() != odd)),
            framed,
            filters,
            qfis,
            precedence,
        })
}

fn session(pdrs: &[GenPdr]) -> Session {
    let mut s = Session::new(Seid(1), Seid(2), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)));
    for (i, g) in pdrs.iter().enumerate() {
        let id = u16::try_from(i + 1).unwrap();
        let source = if g.teid.is_some() {
            Interface::Access
        } else {
            Interface::Core
        };
        let mut pdi = Pdi::any(source);
        pdi.local_f_teid = g.teid.map(|t| LocalFTeid {
            teid: Teid(t),
            ipv4: Some(UPF),
            ipv6: None,
        });
        pdi.ue_ip = g.ue.map(|(v4, v6, is_destination)| UeIp {
            ipv4: v4.then_some(UE4),
            ipv6: v6.map(|len| (UE6.parse().unwrap(), len)),
            is_destination,
        });
        if g.framed {
            pdi.framed_routes = vec![
                FramedRoute::parse("192.168.0.0/16").unwrap(),
                FramedRoute::parse("2001:db8:1:3::/64").unwrap(),
            ]
            .into();
        }
        pdi.sdf_filters = g.filters.clone().into();
        pdi.qfis = g.qfis.iter().map(|&q| Qfi(q)).collect();
        s.insert_pdr(Pdr {
            id: PdrId(id),
            precedence: Precedence(g.precedence),
            pdi,
            outer_header_removal: g.teid.map(|_| OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(id.into())),
            qers: Default::default(),
            urrs: Default::default(),
        })
        .unwrap();
        let mut fw = Forwarding::to(Interface::Core);
        fw.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
            teid: Teid(TAG + u32::from(id)),
            peer: PEER.into(),
        });
        s.insert_far(Far {
            id: FarId(id.into()),
            action: ApplyAction::FORW,
            forwarding: Some(fw),
            duplicating: Box::default(),
            bar: None,
        })
        .unwrap();
    }
    s
}

// ---- generated packets -------------------------------------------------------------------

#[derive(Debug, Clone)]
struct GenInner {
    v6: bool,
    src: usize,
    dst: usize,
    proto: u8,
    sport: u16,
    dport: u16,
    tos: u8,
    flow_label: u32,
}

#[derive(Debug, Clone)]
enum GenPkt {
    Gtp {
        teid: u32,
        qfi: Option<u8>,
        inner: GenInner,
    },
    N6(GenInner),
}

/// Addresses packets use: the UE's first (index 6 is the UE's again for IPv4), one in a
/// framed route, others nobody's. IPv6: in the UE's /64, the UE's /128, in the /56, …
const V4: [Ipv4Addr; 6] = [
    UE4,
    Ipv4Addr::new(10, 0, 0, 2),
    Ipv4Addr::new(198, 51, 100, 7),
    Ipv4Addr::new(198, 51, 100, 200),
    Ipv4Addr::new(192, 168, 3, 4),
    Ipv4Addr::new(172, 16, 0, 1),
];
const V6: [&str; 7] = [
    "2001:db8:1:2::5",
    "2001:db8:1:2::",
    "2001:db8:1:2::abcd",
    "2001:db8::9",
    "2001:db8:1:3::1",
    "2001:db8:ffff::1",
    "fd00::1",
];

fn gen_inner() -> impl Strategy<Value = GenInner> {
    let port = || select(vec![53u16, 99, 1000, 1500, 2000, 2001, 40_000]);
    // Addresses: the UE's (index 0) about half the time.
    let addr = || select(vec![0usize, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6]);
    (
        any::<bool>(),
        addr(),
        addr(),
        select(vec![17u8, 17, 17, 6, 47]),
        port(),
        port(),
        select(vec![0u8, 0xb8, 0xb9, 0x01, 0x04]),
        select(vec![0u32, 0x12345]),
    )
        .prop_map(
            |(v6, src, dst, proto, sport, dport, tos, flow_label)| GenInner {
                v6,
                src,
                dst,
                proto,
                sport,
                dport,
                tos,
                flow_label,
            },
        )
}

fn gen_pkt() -> impl Strategy<Value = GenPkt> {
    prop_oneof![
        (
            select(vec![1u32, 1, 1, 2, 3, 4]),
            prop::option::weighted(0.7, 1u8..=3),
            gen_inner()
        )
            .prop_map(|(teid, qfi, inner)| GenPkt::Gtp { teid, qfi, inner }),
        gen_inner().prop_map(GenPkt::N6),
    ]
}

impl GenInner {
    fn addrs(&self) -> (IpAddr, IpAddr) {
        if self.v6 {
            let a = |i: usize| IpAddr::V6(V6[i].parse().unwrap());
            (a(self.src), a(self.dst))
        } else {
            let a = |i: usize| IpAddr::V4(V4[i % V4.len()]);
            (a(self.src), a(self.dst))
        }
    }

    fn ports(&self) -> (u16, u16) {
        match self.proto {
            6 | 17 => (self.sport, self.dport),
            _ => (0, 0),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut ip = match self.addrs() {
            (IpAddr::V4(s), IpAddr::V4(d)) => udp4(s, d, self.sport, self.dport, 24, 0),
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut v = udp6(s, d, self.sport, self.dport, 24);
                v[1] |= u8::try_from(self.flow_label >> 16).unwrap();
                v[2..4].copy_from_slice(
                    &u16::try_from(self.flow_label & 0xffff)
                        .unwrap()
                        .to_be_bytes(),
                );
                v
            }
            _ => unreachable!(),
        };
        if self.v6 {
            ip[6] = self.proto;
        } else {
            ip[9] = self.proto;
            fix_ipv4_checksum(&mut ip);
        }
        with_tos(ip, self.tos)
    }

    fn meta(&self, source: Interface, teid: Option<u32>, qfi: Option<u8>) -> PacketMeta {
        let (src, dst) = self.addrs();
        let (src_port, dst_port) = self.ports();
        PacketMeta {
            source,
            teid: teid.map(Teid),
            qfi: qfi.map(Qfi),
            src,
            dst,
            protocol: self.proto,
            src_port,
            dst_port,
            tos: self.tos,
            spi: None,
            flow_label: self.v6.then_some(self.flow_label),
        }
    }
}

/// The PDR a packet went out by (`None`: no G-PDU came out).
fn chosen(out: &[Packet]) -> Option<u16> {
    let mut pdrs = out.iter().filter_map(|p| {
        let (d, _) = open(p);
        (d.gtpu.msg_type == MessageType::GPdu).then(|| {
            assert_eq!(p.port(), Port::N9);
            u16::try_from(d.gtpu.teid - TAG).unwrap()
        })
    });
    let first = pdrs.next();
    assert!(pdrs.next().is_none(), "one packet in, one out");
    first
}

/// Whether the UE table holds `dst` (the only way an N6 packet finds its session).
fn owned(s: &Session, dst: IpAddr) -> bool {
    s.pdrs.iter().any(|p| {
        p.pdi.ue_ip.is_some_and(|u| u.contains(dst))
            || p.pdi.framed_routes.iter().any(|r| r.contains(dst))
    })
}

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn the_pipeline_chooses_the_pdr_the_reference_chooses(
        pdrs in prop::collection::vec(gen_pdr(), 1..7),
        pkts in prop::collection::vec(gen_pkt(), 1..24),
    ) {
        let now = Instant::now();
        let s = session(&pdrs);
        let mut p = pipeline(now);
        p.install(now, Arc::new(s.clone()), InstallFlags::default()).unwrap();
        let mut out = Output::default();
        for g in &pkts {
            let (pkt, meta) = match g {
                GenPkt::Gtp { teid, qfi, inner } => (
                    gpdu(*teid, *qfi, &inner.bytes()),
                    inner.meta(Interface::Access, Some(*teid), *qfi),
                ),
                GenPkt::N6(inner) => (n6(&inner.bytes()), inner.meta(Interface::Core, None, None)),
            };
            let want = if matches!(g, GenPkt::N6(_)) && !owned(&s, meta.dst) {
                None
            } else {
                s.classify(&meta).map(|pdr| pdr.id.0)
            };
            p.process(now, &mut vec![pkt], &mut out);
            let got = chosen(&out.tx);
            out.tx.clear();
            prop_assert_eq!(got, want, "packet {:?}\nmeta {:?}", g, meta);
        }
        prop_assert!(p.counters().balanced(), "{:?}", p.counters());
    }
}

// ---- robustness --------------------------------------------------------------------------

/// A session with a bit of everything: uplink on TEID 1 (to N6) and 2 (to N9, duplicated),
/// downlink to the UE forwarded with a tight MBR and counted, downlink from one source
/// buffered.
fn busy_session() -> Session {
    let mut s = Session::new(Seid(1), Seid(2), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)));
    let ue = |is_destination| UeIp {
        ipv4: Some(UE4),
        ipv6: Some((UE6.parse().unwrap(), 64)),
        is_destination,
    };
    let tunnel = |teid: u32| OuterHeaderCreation::Gtpu {
        teid: Teid(teid),
        peer: PEER.into(),
    };
    let mut pdr = |id: u16, prec: u32, teid: Option<u32>, dest: bool, sdf: Option<&str>| {
        let mut pdi = Pdi::any(if teid.is_some() {
            Interface::Access
        } else {
            Interface::Core
        });
        pdi.local_f_teid = teid.map(|t| LocalFTeid {
            teid: Teid(t),
            ipv4: Some(UPF),
            ipv6: None,
        });
        pdi.ue_ip = Some(ue(dest));
        pdi.sdf_filters = sdf
            .map(|t| SdfFilter {
                flow: Some(FlowDescription::parse(t).unwrap()),
                ..Default::default()
            })
            .into_iter()
            .collect();
        s.insert_pdr(Pdr {
            id: PdrId(id),
            precedence: Precedence(prec),
            pdi,
            outer_header_removal: teid.map(|_| OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(id.into())),
            qers: [QerId(1)].into_iter().collect(),
            urrs: [UrrId(1)].into_iter().collect(),
        })
        .unwrap();
    };
    pdr(1, 10, Some(1), false, None);
    pdr(2, 10, Some(2), false, None);
    pdr(3, 20, None, true, None);
    pdr(
        4,
        10,
        None,
        true,
        Some("permit out 17 from 198.51.100.0/24 to assigned"),
    );
    let far = |id: u32, action, fw: Option<Forwarding>, dup: Vec<Duplicating>| Far {
        id: FarId(id),
        action,
        forwarding: fw,
        duplicating: dup.into(),
        bar: None,
    };
    let mut to_n9 = Forwarding::to(Interface::Core);
    to_n9.outer_header_creation = Some(tunnel(0x99));
    let mut to_gnb = Forwarding::to(Interface::Access);
    to_gnb.outer_header_creation = Some(tunnel(0xab));
    to_gnb.transport_level_marking = Some((0xb8, 0xfc));
    let dup = Duplicating {
        destination: Interface::Access,
        outer_header_creation: Some(tunnel(0x77)),
        transport_level_marking: None,
        forwarding_policy: None,
    };
    s.insert_far(far(
        1,
        ApplyAction::FORW,
        Some(Forwarding::to(Interface::Core)),
        vec![],
    ))
    .unwrap();
    s.insert_far(far(
        2,
        ApplyAction::FORW.union(ApplyAction::DUPL),
        Some(to_n9),
        vec![dup],
    ))
    .unwrap();
    s.insert_far(far(3, ApplyAction::FORW, Some(to_gnb), vec![]))
        .unwrap();
    s.insert_far(far(
        4,
        ApplyAction::BUFF.union(ApplyAction::NOCP),
        None,
        vec![],
    ))
    .unwrap();
    let mut q = Qer::open(QerId(1));
    q.qfi = Some(Qfi(9));
    // A 12000-bit bucket (the least there is), refilled at 8 kbit/s: soon exceeded.
    q.mbr = Some(Bitrate {
        uplink_kbps: 8,
        downlink_kbps: 8,
    });
    q.averaging_window_ms = Some(100);
    s.insert_qer(q).unwrap();
    let mut u = Urr::new(UrrId(1));
    u.triggers = ReportingTriggers::VOLTH.union(ReportingTriggers::PERIO);
    u.volume_threshold = Some(VolumeLimit {
        total: Some(2000),
        ..Default::default()
    });
    u.measurement_period_s = Some(1);
    s.insert_urr(u).unwrap();
    // Time-based triggers and inactivity: the timers run between batches.
    let mut u = Urr::new(UrrId(2));
    u.triggers = ReportingTriggers::TIMTH.union(ReportingTriggers::TIMQU);
    u.time_threshold_s = Some(1);
    u.time_quota_s = Some(2);
    s.insert_urr(u).unwrap();
    if let Some(p) = s.pdr_mut(PdrId(1)) {
        p.urrs.push(UrrId(2));
    }
    s.inactivity_timer_s = Some(1);
    s
}

/// Valid packets of every kind the pipeline handles, to be mutated.
fn seeds() -> Vec<(Port, Vec<u8>)> {
    let ue6: Ipv6Addr = "2001:db8:1:2::5".parse().unwrap();
    let dn6: Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let up4 = udp4(UE4, dn, 4000, 53, 40, 0);
    let up6 = udp6(ue6, dn6, 4000, 53, 40);
    let g = |teid, inner: &[u8]| gpdu(teid, Some(9), inner).data().to_vec();
    let g6 = gpdu_over(
        Port::N3,
        "2001:db8:100::1".parse().unwrap(),
        UPF6.parse().unwrap(),
        1,
        Some(PduSessionContainer::ul(9)),
        &up6,
    )
    .data()
    .to_vec();
    let msg = |f: &dyn Fn(&mut [u8]) -> usize| {
        let mut b = [0u8; 64];
        let n = f(&mut b);
        udp4_with(GNB, UPF, 2152, 2152, &b[..n])
    };
    use upf_wire::gtpu_msg as m;
    vec![
        (Port::N3, g(1, &up4)),
        (Port::N3, g(2, &up6)),
        (Port::N3, g(7, &up4)),
        (Port::N3, g6),
        (Port::N9, g(2, &up4)),
        (Port::N6, udp4(dn, UE4, 53, 4000, 60, 0)),
        (
            Port::N6,
            udp4(Ipv4Addr::new(192, 0, 2, 7), UE4, 53, 4000, 60, 0),
        ),
        (Port::N6, udp6(dn6, ue6, 53, 4000, 60)),
        (Port::N6, tcp4(dn, UE4, 80, 4000, 20)),
        (Port::N3, msg(&|b| m::emit_echo_request(5, b).unwrap())),
        (
            Port::N3,
            msg(&|b| m::emit_error_indication(0xab, PEER.into(), b).unwrap()),
        ),
        (Port::N3, msg(&|b| m::emit_end_marker(1, b).unwrap())),
        // Large ones, for the MBR.
        (Port::N3, g(1, &udp4(UE4, dn, 4000, 53, 1200, 0))),
        (Port::N6, udp6(dn6, ue6, 53, 4000, 1200)),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => (0usize..120, any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (0usize..120).prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
    ]
}

fn mutate(mut v: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        match m {
            Mutation::Set(i, b) => {
                if let Some(x) = v.get_mut(*i) {
                    *x = *b;
                }
            }
            Mutation::Truncate(n) => v.truncate(*n),
            Mutation::Extend(b) => v.extend_from_slice(b),
        }
    }
    v
}

#[derive(Debug, Clone)]
enum Input {
    Random(Port, Vec<u8>),
    Mutated(usize, Vec<Mutation>),
}

fn input() -> impl Strategy<Value = Input> {
    let port = select(vec![Port::N3, Port::N9, Port::N6]);
    prop_oneof![
        1 => (port, prop::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(p, b)| Input::Random(p, b)),
        4 => (0usize..14, prop::collection::vec(mutation(), 0..4))
            .prop_map(|(i, m)| Input::Mutated(i, m)),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn random_and_mutated_packets_never_panic_and_keep_the_counters_balanced(
        batches in prop::collection::vec(prop::collection::vec(input(), 1..12), 1..6),
        release_at in prop::option::of(0usize..6),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut p = pipeline(now);
        let mut s = busy_session();
        p.install(now, Arc::new(s.clone()), InstallFlags::default()).unwrap();
        let seeds = seeds();
        let mut out = Output::default();
        for (k, batch) in batches.iter().enumerate() {
            if release_at == Some(k) {
                // Forward what was buffered, with an End Marker for the changed tunnel.
                let mut fw = Forwarding::to(Interface::Access);
                fw.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(0xcd),
                    peer: PEER.into(),
                });
                let f = s.far_mut(FarId(4)).unwrap();
                f.action = ApplyAction::FORW;
                f.forwarding = Some(fw);
                let flags = InstallFlags { send_end_marker: true, drop_buffered: false };
                p.install(now, Arc::new(s.clone()), flags).unwrap();
            }
            let mut rx: Vec<Packet> = batch
                .iter()
                .filter_map(|i| match i {
                    Input::Random(port, b) => Packet::from_bytes(*port, b),
                    Input::Mutated(n, ms) => {
                        let (port, v) = &seeds[*n];
                        Packet::from_bytes(*port, &mutate(v.clone(), ms))
                    }
                })
                .collect();
            let n = rx.len();
            let before = p.counters().received();
            p.process(now, &mut rx, &mut out);
            prop_assert_eq!(p.counters().received(), before + n as u64);
            prop_assert!(p.counters().balanced(), "{:?}", p.counters());
            for o in &out.tx {
                prop_assert!(!o.is_empty());
            }
            // Buffers go back to the free list, as a driver would give them back.
            out.free.append(&mut out.tx);
            now += Duration::from_millis(300);
            p.handle_timeout(now);
            while p.poll_event().is_some() {}
        }
        // A silence: inactivity and the time-based triggers fire, once each.
        for _ in 0..4 {
            now += Duration::from_millis(700);
            p.handle_timeout(now);
            while p.poll_event().is_some() {}
        }
        p.remove_session(now, Seid(1)).unwrap();
        p.process(now, &mut Vec::new(), &mut out);
        let c = p.counters();
        prop_assert!(c.balanced(), "{:?}", c);
        prop_assert_eq!(c.buffered, 0);
    }
}

// ---- hot records against the general path --------------------------------------------------

/// [`pipeline`] with an uplink ACL that denies some of the generated flows (UDP to port 53,
/// TCP from port 1000), so that both paths' ACL step decides.
fn pipeline_with_acl(now: Instant) -> Pipeline {
    let mut cfg = pipeline(now).config().clone();
    let rules = "deny in 17 from any to any 53\ndeny in 6 from any 1000 to any\n";
    cfg.uplink_acl = Arc::new(upf_dataplane::Acl::load(rules).unwrap());
    Pipeline::new(now, cfg)
}

/// `session(pdrs)` with policing and charging: a session QER with a tight MBR on every PDR
/// (and `packets` a minute each way, if some), a per-PDR QER (gate closed on PDR 3, QFI
/// marking, on PDR 2 half the packets uplink only) and URRs with low thresholds, a quota and
/// START, so that the hot records' budgets run out and their exact checks fire.
fn charged_session(pdrs: &[GenPdr], mbr_kbps: u64, quota: u64, packets: Option<u16>) -> Session {
    let mut s = session(pdrs);
    let mut ambr = Qer::open(QerId(100));
    ambr.mbr = Some(Bitrate {
        uplink_kbps: mbr_kbps,
        downlink_kbps: mbr_kbps,
    });
    ambr.packet_rate = packets.map(|n| PacketRate {
        uplink: Some((n, 60)),
        downlink: Some((n, 60)),
    });
    s.qers.push(ambr);
    let mut u1 = Urr::new(UrrId(1));
    u1.triggers = ReportingTriggers::VOLTH
        .union(ReportingTriggers::VOLQU)
        .union(ReportingTriggers::START);
    u1.volume_threshold = Some(VolumeLimit {
        total: Some(700),
        ..Default::default()
    });
    u1.volume_quota = Some(VolumeLimit {
        uplink: Some(quota),
        ..Default::default()
    });
    let mut u2 = Urr::new(UrrId(2));
    u2.triggers = ReportingTriggers::VOLTH;
    u2.volume_threshold = Some(VolumeLimit {
        downlink: Some(300),
        ..Default::default()
    });
    s.urrs.push(u1);
    s.urrs.push(u2);
    for (i, p) in s.pdrs.iter_mut().enumerate() {
        let id = u32::try_from(i + 1).unwrap();
        let mut q = Qer::open(QerId(id));
        q.qfi = Some(Qfi(u8::try_from(id).unwrap()));
        q.rqi = id % 2 == 0;
        if id == 3 {
            q.gate_uplink = Gate::Closed;
        }
        if id == 2 {
            q.packet_rate = packets.map(|n| PacketRate {
                uplink: Some((n / 2, 60)),
                downlink: None,
            });
        }
        q.gbr = Some(Bitrate {
            uplink_kbps: 1,
            downlink_kbps: 1,
        });
        s.qers.push(q);
        p.qers = [QerId(100), QerId(id)].into_iter().collect();
        p.urrs = if id % 2 == 0 {
            [UrrId(1), UrrId(2)].into_iter().collect()
        } else {
            [UrrId(1)].into_iter().collect()
        };
    }
    s
}

#[test]
fn a_plain_session_gets_a_hot_record() {
    let t0 = Instant::now();
    let pdr = |teid: Option<u32>, dst: bool| GenPdr {
        teid,
        ue: Some((true, None, dst)),
        framed: false,
        filters: vec![],
        qfis: vec![],
        precedence: 10,
    };
    let s = charged_session(&[pdr(Some(1), false), pdr(None, true)], 64, 2000, Some(5));
    let mut p = pipeline(t0);
    p.install(t0, Arc::new(s), InstallFlags::default()).unwrap();
    assert_eq!(p.cold_sessions(), 0);
    p.set_hot_records(false);
    assert_eq!(p.cold_sessions(), 1);
    p.set_hot_records(true);
    assert_eq!(p.cold_sessions(), 0);
}

/// `n` filters from flow `from` on: flow k is of any protocol (k a multiple of 3) or UDP
/// between the UE and 198.51.100.(10 + k % 200) port 5000 + k.
fn flows(from: u16, n: u16) -> Vec<SdfFilter> {
    (from..from + n)
        .map(|k| {
            let proto = if k % 3 == 0 { "ip" } else { "17" };
            let text = format!(
                "permit out {proto} from 198.51.100.{} {} to assigned",
                10 + k % 200,
                5000 + k
            );
            SdfFilter {
                flow: Some(FlowDescription::parse(&text).unwrap()),
                ..Default::default()
            }
        })
        .collect()
}

/// Per list: a PDR with `a` flows from flow 8 on (precedence 20), one with `b` flows from
/// flow 0 on (precedence 10, listed second). Uplink PDRs are 1-2, downlink ones 3-4 (a
/// hot half holds two FARs: a catch-all of its own would make the session cold).
fn many_filters_session(a: u16, b: u16) -> Session {
    let pdr = |teid: Option<u32>, filters, precedence| GenPdr {
        teid,
        ue: Some((true, None, teid.is_none())),
        framed: false,
        filters,
        qfis: vec![],
        precedence,
    };
    let mut pdrs = Vec::new();
    for teid in [Some(1), None] {
        pdrs.push(pdr(teid, flows(8, a), 20));
        pdrs.push(pdr(teid, flows(0, b), 10));
    }
    session(&pdrs)
}

/// Uplink and downlink packets of flows 0..32 (UDP, TCP, and GRE, which the hot path
/// classifies by the general key), and the PDR that the reference matcher picks for each.
fn flow_packets(s: &Session) -> Vec<(Packet, Option<u16>)> {
    let mut v = Vec::new();
    for k in 0..32u16 {
        let dn = Ipv4Addr::new(198, 51, 100, u8::try_from(10 + k).unwrap());
        for proto in [17u8, 6, 47] {
            for up in [true, false] {
                let (src, dst, sport, dport) = if up {
                    (UE4, dn, 4000, 5000 + k)
                } else {
                    (dn, UE4, 5000 + k, 4000)
                };
                let mut ip = udp4(src, dst, sport, dport, 24, 0);
                ip[9] = proto;
                fix_ipv4_checksum(&mut ip);
                let (source, teid) = if up {
                    (Interface::Access, Some(1))
                } else {
                    (Interface::Core, None)
                };
                let ports = proto != 47;
                let meta = PacketMeta {
                    source,
                    teid: teid.map(Teid),
                    qfi: None,
                    src: src.into(),
                    dst: dst.into(),
                    protocol: proto,
                    src_port: if ports { sport } else { 0 },
                    dst_port: if ports { dport } else { 0 },
                    tos: 0,
                    spi: None,
                    flow_label: None,
                };
                let pkt = if up { gpdu(1, None, &ip) } else { n6(&ip) };
                v.push((pkt, s.classify(&meta).map(|p| p.id.0)));
            }
        }
    }
    v
}

#[test]
fn sixteen_filters_a_pdr_stay_hot_and_match_as_the_general_path_does() {
    let t0 = Instant::now();
    let s = many_filters_session(16, 16);
    let (mut hot, mut cold) = (pipeline(t0), pipeline(t0));
    cold.set_hot_records(false);
    hot.install(t0, Arc::new(s.clone()), InstallFlags::default())
        .unwrap();
    cold.install(t0, Arc::new(s.clone()), InstallFlags::default())
        .unwrap();
    assert_eq!(hot.cold_sessions(), 0);
    let mut seen = std::collections::BTreeSet::new();
    for (pkt, want) in flow_packets(&s) {
        let (mut oh, mut oc) = (Output::default(), Output::default());
        hot.process(t0, &mut vec![pkt.clone()], &mut oh);
        cold.process(t0, &mut vec![pkt], &mut oc);
        let got = chosen(&oh.tx);
        assert_eq!(got, want);
        assert_eq!(chosen(&oc.tx), want);
        let sent = |o: &Output| o.tx.iter().map(|p| p.data().to_vec()).collect::<Vec<_>>();
        assert_eq!(sent(&oh), sent(&oc));
        seen.insert(got);
    }
    // Every PDR took some (flows 8-15 are in both of a list: precedence), and some none.
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(
        format!("{:?}", hot.counters()),
        format!("{:?}", cold.counters())
    );
}

#[test]
fn a_pdr_or_a_list_past_the_caps_stays_cold_and_matches() {
    let t0 = Instant::now();
    // A list's run holds 128 lines, each PDR's filters from a line of their own on.
    for (a, b, hot) in [
        (256, 0, true),
        (254, 2, true),
        (255, 1, false),
        (257, 0, false),
        (200, 100, false),
    ] {
        let s = many_filters_session(a, b);
        let mut p = pipeline(t0);
        p.install(t0, Arc::new(s.clone()), InstallFlags::default())
            .unwrap();
        assert_eq!(p.cold_sessions(), usize::from(!hot), "{a} + {b} filters");
        for (pkt, want) in flow_packets(&s) {
            let mut o = Output::default();
            p.process(t0, &mut vec![pkt], &mut o);
            assert_eq!(chosen(&o.tx), want, "{a} + {b} filters");
        }
    }
}

/// A PDR whose packets come from the UE is checked against the uplink ACL on either list
/// (found by TEID, or by UE address on N6), hot or not: the ACL step is one for both paths.
#[test]
fn packets_from_the_ue_pass_the_acl_on_either_list_hot_or_not() {
    let t0 = Instant::now();
    let pdr = |teid: Option<u32>| GenPdr {
        teid,
        // The UE is the source on both lists: both PDRs' packets come from the UE.
        ue: Some((true, None, false)),
        framed: false,
        filters: vec![],
        qfis: vec![],
        precedence: 10,
    };
    let s = Arc::new(session(&[pdr(Some(1)), pdr(None)]));
    for hot in [true, false] {
        let mut p = pipeline_with_acl(t0);
        p.set_hot_records(hot);
        p.install(t0, s.clone(), InstallFlags::default()).unwrap();
        assert_eq!(p.cold_sessions(), usize::from(!hot));
        let mut got = Vec::new();
        for dport in [53, 54] {
            // From the UE to the UE's own address, so that N6 finds the session by it.
            let ip = udp4(UE4, UE4, 4000, dport, 24, 0);
            for pkt in [gpdu(1, None, &ip), n6(&ip)] {
                let mut o = Output::default();
                p.process(t0, &mut vec![pkt], &mut o);
                got.push(chosen(&o.tx));
            }
        }
        assert_eq!(got, [None, None, Some(1), Some(2)], "hot {hot}");
        assert_eq!(p.counters().dropped(DropReason::AclDenied), 2, "hot {hot}");
    }
}

/// A PDR of the shapes a hot record holds, most of the time (IPv4 UE address or none, no
/// framed routes, at most one QFI; the filters may still need the general matcher).
fn gen_hot_pdr() -> impl Strategy<Value = GenPdr> {
    (gen_pdr(), prop::bool::weighted(0.8)).prop_map(|(mut g, simple)| {
        if simple {
            if let Some(u) = &mut g.ue {
                u.0 = true;
                u.1 = None;
            }
            g.framed = false;
            g.qfis.truncate(1);
        }
        g
    })
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn hot_records_answer_as_the_general_path_does(
        pdrs in prop::collection::vec(gen_hot_pdr(), 1..5),
        pkts in prop::collection::vec((gen_pkt(), 0u64..3_000_000), 1..40),
        mbr_kbps in select(vec![8u64, 64, 1_000_000]),
        quota in select(vec![200u64, 2_000, 1 << 40]),
        packets in select(vec![None, Some(0u16), Some(3), Some(20)]),
        query_at in 0usize..40,
        // Once, 25 s pass: a packet rate of 3 a minute gives one packet back.
        jump_at in 0usize..60,
    ) {
        let t0 = Instant::now();
        let s = Arc::new(charged_session(&pdrs, mbr_kbps, quota, packets));
        let mut hot = pipeline_with_acl(t0);
        let mut cold = pipeline_with_acl(t0);
        cold.set_hot_records(false);
        hot.install(t0, s.clone(), InstallFlags::default()).unwrap();
        cold.install(t0, s, InstallFlags::default()).unwrap();
        prop_assert_eq!(cold.cold_sessions(), 1);
        let (mut oh, mut oc) = (Output::default(), Output::default());
        let mut now = t0;
        let events = |p: &mut Pipeline| {
            std::iter::from_fn(|| p.poll_event()).map(|e| format!("{e:?}")).collect::<Vec<_>>()
        };
        for (k, (g, dt)) in pkts.iter().enumerate() {
            now += Duration::from_nanos(*dt);
            if k == jump_at {
                now += Duration::from_secs(25);
            }
            let pkt = match g {
                GenPkt::Gtp { teid, qfi, inner } => gpdu(*teid, *qfi, &inner.bytes()),
                GenPkt::N6(inner) => n6(&inner.bytes()),
            };
            hot.process(now, &mut vec![pkt.clone()], &mut oh);
            cold.process(now, &mut vec![pkt], &mut oc);
            let sent = |o: &Output| o.tx.iter().map(|p| (p.port(), p.data().to_vec())).collect::<Vec<_>>();
            prop_assert_eq!(sent(&oh), sent(&oc), "packet {}: {:?}", k, g);
            prop_assert_eq!(oh.free.len(), oc.free.len());
            oh.tx.clear();
            oc.tx.clear();
            oh.free.clear();
            oc.free.clear();
            prop_assert_eq!(format!("{:?}", hot.counters()), format!("{:?}", cold.counters()));
            prop_assert_eq!(events(&mut hot), events(&mut cold), "packet {}", k);
            if k == query_at {
                let q = |p: &mut Pipeline| format!("{:?}", p.query(now, Seid(1), &[]));
                prop_assert_eq!(q(&mut hot), q(&mut cold));
            }
        }
        now += Duration::from_secs(1);
        let end = |p: &mut Pipeline| format!("{:?}", p.remove(now, Seid(1)));
        prop_assert_eq!(end(&mut hot), end(&mut cold));
    }
}
