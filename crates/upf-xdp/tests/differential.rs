//! The XDP program held to the reference (root): random sessions within the slice, random
//! frames (valid uplink and downlink ones of the session, mutated, truncated, garbage), each
//! through BPF_PROG_TEST_RUN and through a `upf_dataplane::Pipeline` holding the same session.
//! For every frame the program does not punt: the same verdict, the same drop reason, the same
//! output from the IP header on (the outer IPv4 identification, a per-CPU counter in the
//! program and a per-worker one in the pipeline, is compared zeroed, with both checksums
//! checked right), the next hop's Ethernet header; punted frames come back unchanged, and a
//! valid frame of the session is never punted. At the end of each session, the same URR
//! volumes and packet counts. Frames come at advancing virtual times, the program's clock
//! fixed to the pipeline's `now` for each, so that QER MBRs (some sessions made for them) pass
//! and drop the same frames. URRs with volume thresholds (VOLTH) and quotas (VOLQU): after
//! each frame, the program has raised a report for exactly the URRs and triggers the pipeline
//! reported, each with the volume the program counted since the URR's last report; the URRs
//! are then re-armed as `upf_runtime::Engines` does. Both engines have IPv4 and IPv6 N3 and
//! N9 addresses; a third of the tunnels (to gNBs, to other UPFs) and of the uplink G-PDUs
//! are IPv6 (some of the latter to the wrong address, with an extension header, with a wrong
//! or zero UDP checksum, which the reference does not look at).
#![allow(clippy::cast_possible_truncation)] // test frames are small

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use upf_dataplane::{
    Acl, AclAction, AclRule, Output, Packet, Pipeline, PipelineConfig, Port, Prefix, ANY_PORT,
};
use upf_rules::*;
use upf_wire::checksum::checksum;
use upf_xdp::{Config, Engine, Hops, NextHop};

const N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Our N9 address: tunnels on N9 leave from it (by N3's interface).
const N9: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// Our IPv6 N3 and N9 addresses.
const N3_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);
const N9_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1);
/// The gNB's IPv6 address (G-PDUs come from it).
const GNB_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x100);
const HOPS: Hops = Hops {
    n3: NextHop {
        dst: [2, 0, 0, 0, 3, 3],
        src: [2, 0, 0, 0, 3, 1],
    },
    n6: NextHop {
        dst: [2, 0, 0, 0, 6, 6],
        src: [2, 0, 0, 0, 6, 1],
    },
};
/// What the cases covered: frames punted, forwarded up and down, dropped by reason.
static TALLY: Mutex<Tally> = Mutex::new(Tally {
    punted: 0,
    up: 0,
    down: 0,
    drops: Vec::new(),
    usage: 0,
    other_protocols: 0,
    rewrapped: 0,
    routed: 0,
    volth: 0,
    volqu: 0,
    v6_up: 0,
    v6_down: 0,
    up6: 0,
    down6: 0,
});

#[derive(Debug)]
struct Tally {
    punted: u64,
    up: u64,
    down: u64,
    drops: Vec<(&'static str, u64)>,
    /// Cases whose URRs counted something.
    usage: u64,
    /// Frames handled (not punted) whose inner packet is neither TCP nor UDP.
    other_protocols: u64,
    /// Frames from a tunnel forwarded into another (N3 to N9, N9 to N3).
    rewrapped: u64,
    /// Frames forwarded whose UE-side address is not the UE's (in a Framed Route).
    routed: u64,
    /// Reports raised: thresholds reached, quotas exhausted.
    volth: u64,
    volqu: u64,
    /// IPv6 packets forwarded up and down.
    v6_up: u64,
    v6_down: u64,
    /// Frames forwarded that came in an IPv6 tunnel, that left in one.
    up6: u64,
    down6: u64,
}

fn tally(f: impl FnOnce(&mut Tally)) {
    f(&mut TALLY.lock().unwrap())
}

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

/// xorshift64*: the frames and rules of one case from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

/// The remote ends and ports frames use, so that filters hit and miss.
const REMOTES: [Ipv4Addr; 2] = [
    Ipv4Addr::new(198, 51, 100, 7),
    Ipv4Addr::new(203, 0, 113, 9),
];
const PORTS: [u16; 6] = [0, 53, 80, 443, 2000, 2152];

/// A random SDF filter: a Flow Description over the UE's and the remote addresses and ports
/// (sometimes deny, negated, IPv6, a ToS, an SPI or a flow label); IPv6 prefixes around the
/// UE's /64 `ue6` when it has one.
fn sdf(r: &mut Rng, ue: Ipv4Addr, ue6: Option<Ipv6Addr>) -> SdfFilter {
    let endpoint = |r: &mut Rng| {
        let neg = if r.chance(8) { "!" } else { "" };
        let addr = match r.below(6) {
            0 | 1 => "any".to_string(),
            2 => "assigned".to_string(),
            3 | 4 if ue6.is_some() && r.chance(2) => {
                let u = ue6.unwrap_or(Ipv6Addr::UNSPECIFIED);
                let host = Ipv6Addr::from(u128::from(u) | 1);
                let remote = REMOTES6[0];
                match r.below(5) {
                    0 => format!("{u}/64"),
                    1 => format!("{host}/128"),
                    2 => format!("{remote}/128"),
                    3 => "2001:db8:ffff::/48".to_string(),
                    _ => "2001:db8::/32".to_string(),
                }
            }
            3 if r.chance(4) => "2001:db8::/32".to_string(),
            _ => {
                let a = if r.chance(2) { ue } else { r.pick(&REMOTES) };
                format!("{a}/{}", r.pick(&[0u8, 8, 16, 24, 31, 32]))
            }
        };
        let ports = match r.below(3) {
            0 => String::new(),
            1 => format!(" {}", r.pick(&PORTS)),
            _ => {
                let (a, b) = (r.pick(&PORTS), r.pick(&PORTS));
                format!(" {}-{}", a.min(b), a.max(b))
            }
        };
        format!("{neg}{addr}{ports}")
    };
    let text = format!(
        "{} {} {} from {} to {}",
        if r.chance(8) { "deny" } else { "permit" },
        if r.chance(2) { "out" } else { "in" },
        r.pick(&["ip", "ip", "6", "17", "1", "50", "132"]),
        endpoint(r),
        endpoint(r)
    );
    SdfFilter {
        flow: (!r.chance(6)).then(|| FlowDescription::parse(&text).unwrap()),
        tos: r
            .chance(6)
            .then(|| (r.next() as u8, r.pick(&[0xfc, 0xff, 0xe0]))),
        spi: r.chance(12).then(|| r.pick(&[1, 2])),
        flow_label: r.chance(16).then_some(1),
        filter_id: None,
    }
}

/// The remote IPv6 ends frames use.
const REMOTES6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 9),
    Ipv6Addr::new(0x2001, 0xdb9, 0, 0, 0, 0, 0, 1),
];

/// A random session within the slice: UE `ue` (and /64 `ue6`; no IPv4 address if
/// `v6_only`), local TEIDs `teids`. `policing`: QERs with MBRs, more quotas, open gates and
/// forwarding FARs, so that the frames test them.
fn session(
    r: &mut Rng,
    seid: u64,
    (ue, ue6, v6_only): (Ipv4Addr, Option<Ipv6Addr>, bool),
    teids: &[u32],
    policing: bool,
) -> Session {
    let mut s = Session::new(Seid(seid), Seid(1), "192.0.2.9".parse().unwrap());
    let n_qers = if policing { 1 + r.below(3) } else { r.below(4) } as u32;
    for id in 1..=n_qers {
        let mut q = Qer::open(QerId(id));
        // Rates a few frames exceed (1 kbit/s: a bucket of 12,000 bits refilled by one a
        // millisecond; 8 kbit/s: 16,000 bits in 2 s) and ones they do not; 0: none that way.
        if policing || r.chance(2) {
            let kbps = [0, 1, 1, 8, 8, 64, 1000, 100_000];
            q.mbr = Some(Bitrate {
                uplink_kbps: r.pick(&kbps),
                downlink_kbps: r.pick(&kbps),
            });
            q.averaging_window_ms = r.chance(3).then(|| r.pick(&[1, 100, 2000]));
        }
        if !policing && r.chance(4) {
            q.gate_uplink = Gate::Closed;
        }
        if !policing && r.chance(4) {
            q.gate_downlink = Gate::Closed;
        }
        q.qfi = r.chance(2).then(|| Qfi(1 + r.below(9) as u8));
        q.rqi = r.chance(3);
        s.insert_qer(q).unwrap();
    }
    let n_urrs = if policing { 1 + r.below(2) } else { r.below(3) } as u32;
    for id in 1..=n_urrs {
        let mut u = Urr::new(UrrId(id));
        u.method = MeasurementMethod::VOLUM;
        if r.chance(2) {
            u.triggers = ReportingTriggers::PERIO;
            u.measurement_period_s = Some(60);
        }
        // Volume Quotas a few frames reach (0: spent from the start).
        if r.chance(if policing { 2 } else { 4 }) {
            let mut limit = || r.chance(2).then(|| r.pick(&[0, 200, 1000, 3000, 20_000]));
            u.volume_quota = Some(VolumeLimit {
                total: limit(),
                uplink: limit(),
                downlink: limit(),
            });
            if r.chance(2) {
                u.triggers |= ReportingTriggers::VOLQU;
            }
        }
        // Volume Thresholds, reported (VOLTH) or not.
        if r.chance(3) {
            let mut limit = || r.chance(2).then(|| r.pick(&[0, 200, 1000, 3000, 20_000]));
            u.volume_threshold = Some(VolumeLimit {
                total: limit(),
                uplink: limit(),
                downlink: limit(),
            });
            if !r.chance(4) {
                u.triggers |= ReportingTriggers::VOLTH;
            }
        }
        s.insert_urr(u).unwrap();
    }
    let mut far_id = 0u32;
    let n_ul = 1 + r.below(3) as u16;
    let n_dl = 1 + r.below(3) as u16;
    for k in 0..n_ul + n_dl {
        // PDRs with an F-TEID: from the UE (N3), or towards it from another UPF (N9).
        let tunneled = k < n_ul;
        let n9_in = tunneled && r.chance(4);
        let uplink = tunneled && !n9_in;
        let mut pdi = Pdi::any(if uplink {
            Interface::Access
        } else {
            Interface::Core
        });
        if tunneled {
            pdi.local_f_teid = Some(LocalFTeid {
                teid: Teid(r.pick(teids)),
                ipv4: Some(N3),
                ipv6: r.chance(3).then_some(N3_6),
            });
            for _ in 0..r.below(3) {
                let q = Qfi(1 + r.below(4) as u8);
                if !pdi.qfis.contains(&q) {
                    pdi.qfis.push(q);
                }
            }
        }
        if !policing && r.chance(2) {
            pdi.sdf_filters = (0..1 + r.below(4))
                .map(|_| sdf(r, ue, ue6))
                .collect::<Vec<_>>()
                .into();
        }
        // The first downlink PDR names the UE, so that the session is found by it.
        if k == n_ul || r.chance(2) {
            pdi.ue_ip = Some(UeIp {
                ipv4: (!v6_only).then_some(ue),
                ipv6: ue6.map(|a| (a, 64)),
                is_destination: !uplink,
            });
            // Networks behind the UE, some nested, one holding the UE address.
            if r.chance(3) {
                let own = format!("{}/24", Ipv4Addr::from(u32::from(ue) & !0xff));
                pdi.framed_routes = (0..1 + r.below(2))
                    .map(|_| {
                        let t = r.pick(&["172.16.0.0/16", "172.16.5.0/24", "192.0.2.128/25", ""]);
                        FramedRoute::parse(if t.is_empty() { &own } else { t }).unwrap()
                    })
                    .collect::<Vec<_>>()
                    .into();
            }
        }
        let far = match if policing { 3 } else { r.below(6) } {
            0 => None,
            1 => Some((ApplyAction::DROP, None)),
            2 => Some((ApplyAction::FORW, Some(Forwarding::to(Interface::Access)))),
            _ if uplink && !r.chance(3) => {
                Some((ApplyAction::FORW, Some(Forwarding::to(Interface::Core))))
            }
            // Into a tunnel: to the gNB, or from the UE to another UPF (N9).
            _ => {
                let mut fw = Forwarding::to(if uplink {
                    Interface::Core
                } else {
                    Interface::Access
                });
                let k = r.below(3) as u8;
                let peer = if r.chance(3) {
                    IpAddr::V6(Ipv6Addr::new(
                        0x2001,
                        0xdb8,
                        2,
                        0,
                        0,
                        0,
                        0,
                        0x100 + u16::from(k),
                    ))
                } else {
                    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100 + k))
                };
                fw.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(r.next() as u32),
                    peer,
                });
                if r.chance(3) {
                    fw.transport_level_marking = Some((r.next() as u8, 0xff));
                }
                Some((ApplyAction::FORW, Some(fw)))
            }
        };
        let far = far.map(|(action, forwarding)| {
            far_id += 1;
            s.insert_far(Far {
                id: FarId(far_id),
                action,
                forwarding,
                duplicating: Box::default(),
                bar: None,
            })
            .unwrap();
            FarId(far_id)
        });
        let qers = (1..=n_qers).filter(|_| r.chance(2)).map(QerId).collect();
        let urrs = (1..=n_urrs)
            .filter(|_| r.chance(3) || n_urrs == 1)
            .map(UrrId)
            .collect();
        s.insert_pdr(Pdr {
            id: PdrId(k + 1),
            precedence: Precedence(r.below(4) as u32),
            pdi,
            outer_header_removal: tunneled.then_some(OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far,
            qers,
            urrs,
        })
        .unwrap();
    }
    // Framed Routes the engine would leave to the workers (an SDF prefix that tells the UE
    // address from a routed one): none.
    if matches!(
        upf_xdp::compile(&s, &HOPS, V6_LOCALS),
        Err(upf_xdp::Punt::FramedRoutes(_))
    ) {
        for p in &mut s.pdrs {
            p.pdi.framed_routes = Box::default();
        }
    }
    s
}

/// Addresses frames use besides the UE's: in the Framed Routes [`session`] draws.
const ROUTED: [Ipv4Addr; 3] = [
    Ipv4Addr::new(172, 16, 5, 9),
    Ipv4Addr::new(172, 16, 200, 1),
    Ipv4Addr::new(192, 0, 2, 200),
];

/// The addresses session `s` is found by downlink: its UE's, and those of its routes.
fn finds(s: &Session, a: Ipv4Addr) -> bool {
    s.pdrs.iter().any(|p| {
        p.pdi.ue_ip.and_then(|u| u.ipv4) == Some(a)
            || p.pdi
                .framed_routes
                .iter()
                .any(|r| r.contains(IpAddr::V4(a)))
    })
}

/// Whether session `s` is found downlink by the IPv6 address `a` (its UE's /64).
fn finds6(s: &Session, a: Ipv6Addr) -> bool {
    s.pdrs.iter().any(|p| {
        p.pdi
            .ue_ip
            .is_some_and(|u| u.contains(IpAddr::V6(a)) && u.ipv6.is_some())
    })
}

/// IPv6 + a TCP, UDP, SCTP or UDP-Lite header (ports from [`PORTS`]), an ICMPv6 one (echo or
/// not, identifier from [`PORTS`]), an ESP SPI, another protocol, or an extension header,
/// then random octets; and whether the program claims its form (no extension header, 8
/// octets of payload at least).
fn inner6(r: &mut Rng, src: Ipv6Addr, dst: Ipv6Addr) -> (Vec<u8>, bool) {
    let proto = match r.below(10) {
        0..=2 => 6,
        3..=5 => 17,
        6 | 7 => 58,
        _ => r.pick(&[50, 132, 136, 47, 1, 0, 60, 44, 59]),
    };
    let l4 = match proto {
        6 => 20,
        47 | 59 => 0,
        50 => 4,
        _ => 8,
    };
    let payload = l4
        + if r.chance(10) {
            1300 + r.below(100)
        } else {
            r.below(80)
        } as usize;
    let mut v = vec![0u8; 40 + payload];
    for b in &mut v[40..] {
        *b = r.next() as u8;
    }
    let tc = if r.chance(3) {
        r.pick(&[0xb8, 0xb9, 0x00, 0x20])
    } else {
        r.next() as u8
    };
    let label = r.pick(&[0u32, 1, 1, 0x12345]);
    let word = 6 << 28 | u32::from(tc) << 20 | label;
    v[0..4].copy_from_slice(&word.to_be_bytes());
    v[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    v[6] = proto;
    v[7] = r.pick(&[0, 1, 2, 64, 255]);
    v[8..24].copy_from_slice(&src.octets());
    v[24..40].copy_from_slice(&dst.octets());
    match proto {
        58 | 1 if payload >= 8 => {
            v[40] = r.pick(&[128, 129, 129, 1, 3, 135]);
            if !r.chance(8) {
                v[44..46].copy_from_slice(&r.pick(&PORTS).to_be_bytes());
            }
        }
        50 if payload >= 4 => v[40..44].copy_from_slice(&r.pick(&[1u32, 2]).to_be_bytes()),
        6 | 17 | 132 | 136 => {
            for at in [40, 42] {
                if !r.chance(8) && payload >= 4 {
                    v[at..at + 2].copy_from_slice(&r.pick(&PORTS).to_be_bytes());
                }
            }
            if proto == 17 && payload >= 8 {
                v[44..46].copy_from_slice(&(payload as u16).to_be_bytes());
            }
        }
        _ => {}
    }
    let claimed = payload >= 8 && ![0, 60, 44].contains(&proto);
    (v, claimed)
}

/// IPv4 (checksum right) + a TCP, UDP, SCTP or UDP-Lite header (ports from [`PORTS`]), an
/// ICMP one (echo or not, identifier from [`PORTS`]), an ESP SPI (1 or 2), or some other
/// protocol + random octets.
fn inner(r: &mut Rng, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let proto = match r.below(10) {
        0..=2 => 6,
        3..=5 => 17,
        6 | 7 => 1,
        _ => r.pick(&[50, 132, 136, 47]),
    };
    let l4 = match proto {
        6 => 20,
        47 => 0,
        50 => 4,
        _ => 8,
    };
    let total = 20
        + l4
        + if r.chance(10) {
            1300 + r.below(100)
        } else {
            r.below(80)
        } as usize;
    let mut v = vec![0u8; total];
    for b in &mut v[20..] {
        *b = r.next() as u8;
    }
    v[0] = 0x45;
    v[1] = r.next() as u8;
    v[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    v[4..6].copy_from_slice(&(r.next() as u16).to_be_bytes());
    v[6] = if r.chance(8) { 0x20 } else { 0x40 }; // MF, or DF
    v[8] = r.pick(&[0, 1, 2, 64, 255]);
    v[9] = proto;
    v[12..16].copy_from_slice(&src.octets());
    v[16..20].copy_from_slice(&dst.octets());
    match proto {
        1 => {
            v[20] = r.pick(&[0, 8, 8, 3, 11]); // echo reply, request; unreachable, time exceeded
            if !r.chance(8) {
                v[24..26].copy_from_slice(&r.pick(&PORTS).to_be_bytes());
            }
        }
        50 => v[20..24].copy_from_slice(&r.pick(&[1u32, 2]).to_be_bytes()),
        47 => {}
        _ => {
            for at in [20, 22] {
                if !r.chance(8) {
                    v[at..at + 2].copy_from_slice(&r.pick(&PORTS).to_be_bytes());
                }
            }
        }
    }
    if r.chance(3) {
        v[1] = r.pick(&[0xb8, 0xb9, 0x00, 0x20]);
    }
    let c = checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    if proto == 17 {
        v[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    }
    v
}

fn eth(frame: &mut Vec<u8>) {
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00]);
}

fn eth6(frame: &mut Vec<u8>) {
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd]);
}

/// A G-PDU to N3 for `teid` carrying `ip` (PSC with `qfi` if given; `pad` octets after the
/// inner packet inside the G-PDU).
fn gpdu(r: &mut Rng, teid: u32, qfi: Option<u8>, ip: &[u8], pad: usize) -> Vec<u8> {
    let ext = if qfi.is_some() { 8 } else { 0 };
    let total = 36 + ext + ip.len() + pad;
    let mut f = Vec::new();
    eth(&mut f);
    let mut h = vec![0u8; 36 + ext];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&[192, 0, 2, 100]);
    h[16..20].copy_from_slice(&N3.octets());
    h[20..22].copy_from_slice(&(r.next() as u16).to_be_bytes());
    h[22..24].copy_from_slice(&2152u16.to_be_bytes());
    h[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    h[28] = if qfi.is_some() { 0x34 } else { 0x30 };
    h[29] = 0xff;
    h[30..32].copy_from_slice(&((total - 36) as u16).to_be_bytes());
    h[32..36].copy_from_slice(&teid.to_be_bytes());
    if let Some(q) = qfi {
        h[39] = 0x85;
        h[40] = 1;
        h[41] = if r.chance(4) { 0x00 } else { 0x10 }; // DL or UL PDU Session Information
                                                       // The PPP flag of a DL container without its PPI octet: the reference's IPv4 fast
                                                       // path reads the QFI all the same.
        h[42] = q | if h[41] == 0 && r.chance(4) { 0x80 } else { 0 };
    }
    let c = checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&h);
    f.extend_from_slice(ip);
    f.extend(std::iter::repeat_n(0u8, pad));
    f
}

/// An IPv6 address in the /64 `ue6` (hosts 1, 2 or any), or another one.
fn addr6(r: &mut Rng, ue6: Option<Ipv6Addr>) -> Ipv6Addr {
    match ue6 {
        Some(u) if !r.chance(4) => {
            let any = u128::from(r.next());
            let host = r.pick(&[1, 2, any]);
            Ipv6Addr::from(u128::from(u) | host)
        }
        _ => {
            let any = Ipv6Addr::from(u128::from(r.next()) << 64 | u128::from(r.next()));
            r.pick(&[Ipv6Addr::new(0x2001, 0xdb8, 0, 9, 0, 0, 0, 1), any])
        }
    }
}

/// An IPv6 frame: uplink in a G-PDU or downlink, for a session with /64 `ue6`; and whether
/// it is a valid one the program claims (`acl_v6`: the ACL has rules for IPv6 packets, which
/// the program leaves to the workers).
fn frame6(
    r: &mut Rng,
    s: &Session,
    ue6: Option<Ipv6Addr>,
    teids: &[u32],
    acl_v6: bool,
) -> (Vec<u8>, bool) {
    let ue = addr6(r, ue6);
    let remote = r.pick(&REMOTES6);
    if r.chance(2) {
        let teid = if r.chance(8) {
            r.next() as u32
        } else {
            r.pick(teids)
        };
        let (ip, ok) = inner6(r, ue, remote);
        let qfi = r.chance(4).then(|| r.below(6) as u8);
        let pad = if r.chance(6) { 1 + r.below(8) } else { 0 } as usize;
        let claimed = ok && teids.contains(&teid) && !acl_v6;
        // In an IPv4 tunnel, or an IPv6 one.
        if r.chance(3) {
            let (f, outer_ok) = gpdu6(r, teid, qfi, &ip, pad);
            return (f, claimed && outer_ok);
        }
        (gpdu(r, teid, qfi, &ip, pad), claimed)
    } else {
        let (ip, ok) = inner6(r, remote, ue);
        let mut f = Vec::new();
        eth6(&mut f);
        f.extend_from_slice(&ip);
        (f, ok && finds6(s, ue))
    }
}

/// A G-PDU in IPv6 for `teid` carrying `ip` as [`gpdu`], and whether the program claims its
/// outer headers: to our N3 address (else to our N9 one), without extension headers (else a
/// Destination Options header), a DL container without the PPP flag (with it, it asks for a
/// PPI octet the one word has no room for: upf_wire's decoder, the reference's for IPv6,
/// refuses it; its IPv4 fast path reads the QFI); its UDP checksum right, zero or wrong.
fn gpdu6(r: &mut Rng, teid: u32, qfi: Option<u8>, ip: &[u8], pad: usize) -> (Vec<u8>, bool) {
    let ext = if qfi.is_some() { 8 } else { 0 };
    let ulen = 16 + ext + ip.len() + pad;
    let mut u = vec![0u8; 16 + ext];
    u[0..2].copy_from_slice(&(r.next() as u16).to_be_bytes());
    u[2..4].copy_from_slice(&2152u16.to_be_bytes());
    u[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    u[8] = if qfi.is_some() { 0x34 } else { 0x30 };
    u[9] = 0xff;
    u[10..12].copy_from_slice(&((ulen - 16) as u16).to_be_bytes());
    u[12..16].copy_from_slice(&teid.to_be_bytes());
    let mut ppp = false;
    if let Some(q) = qfi {
        u[19] = 0x85;
        u[20] = 1;
        u[21] = if r.chance(4) { 0x00 } else { 0x10 };
        ppp = u[21] == 0 && r.chance(4);
        u[22] = q | if ppp { 0x80 } else { 0 };
    }
    u.extend_from_slice(ip);
    u.extend(std::iter::repeat_n(0u8, pad));
    let ours = !r.chance(8);
    let dst = if ours { N3_6 } else { N9_6 };
    let mut d = upf_wire::udp::Packet::new_unchecked(&mut u[..]);
    d.fill_checksum_v6(&GNB_6, &dst);
    match r.below(6) {
        0 => d.set_checksum(0),
        1 => d.set_checksum(d.checksum() ^ 0x0101),
        _ => {}
    }
    let options = r.chance(10);
    let mut h = vec![0u8; 40];
    h[0] = 0x60 | r.below(16) as u8;
    h[1] = r.next() as u8;
    h[6] = 17;
    h[7] = 64;
    h[8..24].copy_from_slice(&GNB_6.octets());
    h[24..40].copy_from_slice(&dst.octets());
    if options {
        // Destination Options: PadN.
        h[6] = 60;
        h.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    }
    let plen = h.len() - 40 + u.len();
    h[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend_from_slice(&h);
    f.extend_from_slice(&u);
    (f, ours && !options && !ppp)
}

/// A frame and whether it is a valid one the program claims (must not be punted).
fn frame(
    r: &mut Rng,
    s: &Session,
    (ue, ue6): (Ipv4Addr, Option<Ipv6Addr>),
    teids: &[u32],
    acl_v6: bool,
) -> (Vec<u8>, bool) {
    let other = if r.chance(3) {
        // Next to the UE (in its /24: a route may hold it), or behind it.
        let near = Ipv4Addr::from(u32::from(ue) ^ (1 + r.below(254) as u32));
        r.pick(&[near, ROUTED[0], ROUTED[1], ROUTED[2]])
    } else {
        Ipv4Addr::from(r.next() as u32)
    };
    let (mut f, mut claimed) = match r.below(if ue6.is_some() { 8 } else { 6 }) {
        5.. => frame6(r, s, ue6, teids, acl_v6),
        0 | 1 => {
            let teid = if r.chance(8) {
                r.next() as u32
            } else {
                r.pick(teids)
            };
            let src = if r.chance(4) { other } else { ue };
            let remote = r.pick(&REMOTES);
            let ip = inner(r, src, remote);
            let qfi = r.chance(4).then(|| r.below(6) as u8);
            let pad = if r.chance(6) {
                1 + r.below(8) as usize
            } else {
                0
            };
            let claimed = teids.contains(&teid) && ip[6] & 0x1f == 0 && ip.len() >= 24;
            if r.chance(3) {
                let (f, outer) = gpdu6(r, teid, qfi, &ip, pad);
                (f, claimed && outer)
            } else {
                (gpdu(r, teid, qfi, &ip, pad), claimed)
            }
        }
        2 | 3 => {
            let dst = if r.chance(4) { other } else { ue };
            let remote = r.pick(&REMOTES);
            let ip = inner(r, remote, dst);
            let mut f = Vec::new();
            eth(&mut f);
            f.extend_from_slice(&ip);
            let claimed = finds(s, dst) && ip.len() >= 24;
            (f, claimed)
        }
        _ => {
            let mut f = Vec::new();
            eth(&mut f);
            f.extend((0..r.below(100)).map(|_| r.next() as u8));
            (f, false)
        }
    };
    // Ethernet padding to the 60-octet minimum, or more.
    if f.len() < 60 || r.chance(8) {
        let n = 60usize.saturating_sub(f.len()) + r.below(4) as usize;
        f.extend(std::iter::repeat_n(0u8, n));
    }
    if r.chance(4) {
        let i = r.below(f.len() as u64) as usize;
        f[i] ^= 1 + r.below(255) as u8;
        claimed = false;
    }
    if r.chance(10) {
        // BPF_PROG_RUN takes no frame shorter than an Ethernet header.
        f.truncate(14 + r.below(f.len() as u64 - 14) as usize);
        claimed = false;
    }
    (f, claimed)
}

/// The IP packet in a frame, without Ethernet padding (upf_io's af_xdp `ip_trim`).
fn ip_of(f: &[u8]) -> &[u8] {
    let ip = &f[14..];
    let len = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        Some(6) if ip.len() >= 40 => 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        _ => ip.len(),
    };
    ip.get(..len).unwrap_or(ip)
}

/// The reports the pipeline made for the last frame against the reports the program raised
/// for it: the same URRs and triggers, each with the volume the program counted since the
/// URR's last report (`base`, moved on); the URRs are then re-armed, as
/// `upf_runtime::Engines` does after a report.
fn same_reports(
    engine: &mut Engine,
    pipeline: &mut Pipeline,
    seid: Seid,
    base: &mut Vec<(UrrId, Volume)>,
    ctx: &dyn Fn() -> String,
) -> Result<(), TestCaseError> {
    let mut theirs = Vec::new();
    while let Some(e) = pipeline.poll_event() {
        if let DatapathEvent::Usage(r) = e {
            theirs.push(r);
        }
    }
    let key = |(u, t): &(UrrId, UsageTrigger)| (u.0, t.bits());
    let mut want: Vec<_> = theirs.iter().map(|r| (r.urr, r.trigger)).collect();
    let mut got: Vec<_> = (engine.crossings().into_iter())
        .map(|c| (c.urr, c.trigger))
        .collect();
    want.sort_by_key(key);
    got.sort_by_key(key);
    prop_assert_eq!(&got, &want, "reports raised: {}", ctx());
    let usage = engine.usage(seid).unwrap();
    for r in &theirs {
        let total = (usage.iter().find(|(u, _)| *u == r.urr)).map_or(Volume::default(), |u| u.1);
        let b = match base.iter_mut().find(|(u, _)| *u == r.urr) {
            Some((_, b)) => b,
            None => {
                base.push((r.urr, Volume::default()));
                &mut base.last_mut().unwrap().1
            }
        };
        prop_assert_eq!(total.since(b), r.volume, "the report's volume: {}", ctx());
        *b = total;
        engine.rearm(seid, &[r.urr]).unwrap();
        tally(|t| {
            if r.trigger.contains(UsageTrigger::VOLQU) {
                t.volqu += 1;
            } else {
                t.volth += 1;
            }
        });
    }
    Ok(())
}

fn stat_diff(a: &upf_xdp::Stats, b: &upf_xdp::Stats) -> Vec<&'static str> {
    a.dropped
        .iter()
        .zip(&b.dropped)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, _)| x.0.name())
        .collect()
}

/// `n` random uplink ACL rules over the addresses, protocols and ports frames use (UE
/// addresses are in 10.0.0.0/22), so that rules hit and miss; prefixes of every length put
/// them in several tables and lists.
fn acl_rules(r: &mut Rng, n: usize) -> Vec<AclRule> {
    let prefix = |r: &mut Rng, base: Ipv4Addr| {
        let len = r.pick(&[0u8, 8, 12, 16, 20, 22, 24, 28, 30, 32]);
        let a = u32::from(base) ^ (r.below(1 << 12) as u32 * u32::from(r.chance(3)));
        (len > 0).then(|| Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), len).unwrap())
    };
    let ports = |r: &mut Rng| match r.below(4) {
        0 | 1 => ANY_PORT,
        2 => {
            let p = r.pick(&PORTS);
            (p, p)
        }
        _ => {
            let (a, b) = (r.pick(&PORTS), r.pick(&PORTS));
            (a.min(b), a.max(b))
        }
    };
    (0..n)
        .map(|_| {
            let ue = Ipv4Addr::new(10, 0, r.below(4) as u8, 1 + r.below(250) as u8);
            let remote = r.pick(&REMOTES);
            AclRule {
                action: if r.chance(3) {
                    AclAction::Permit
                } else {
                    AclAction::Deny
                },
                proto: r.pick(&[None, Some(6), Some(17), Some(1), Some(50)]),
                src: prefix(r, ue),
                dst: prefix(r, remote),
                src_ports: ports(r),
                dst_ports: ports(r),
            }
        })
        .collect()
}

/// An uplink ACL of `n` random rules from `seed` (none: no ACL), a quarter of them with
/// default deny.
fn random_acl(seed: u64, n: usize) -> Arc<Acl> {
    let mut r = Rng(seed | 1);
    let rules = acl_rules(&mut r, n);
    let default = if n > 0 && r.chance(4) {
        AclAction::Deny
    } else {
        AclAction::Permit
    };
    Arc::new(Acl::compile(&rules, default))
}

/// One case: a session from `seed` and its frames through both engines, judged by the same
/// uplink ACL of `acl` random rules.
fn check(seed: u64, frames: usize, policing: bool, acl: usize) -> Result<(), TestCaseError> {
    let acl = random_acl(seed.rotate_left(17), acl);
    check_on(&mut engine(acl.clone()), acl, seed, frames, policing)
}

/// [`check`] on an engine loaded with `acl`, which it leaves as it found it when it passes.
fn check_on(
    engine: &mut Engine,
    acl: Arc<Acl>,
    seed: u64,
    frames: usize,
    policing: bool,
) -> Result<(), TestCaseError> {
    let mut r = Rng(seed | 1);
    let ue = Ipv4Addr::new(10, 0, r.below(4) as u8, 1 + r.below(250) as u8);
    // Half the sessions dual-stack, some of them IPv6 only.
    let ue6 = r
        .chance(2)
        .then(|| Ipv6Addr::new(0x2001, 0xdb8, 0, r.below(4) as u16, 0, 0, 0, 0));
    let v6_only = ue6.is_some() && r.chance(4);
    let teids: Vec<u32> = (0..1 + r.below(2))
        .map(|_| 1 + r.below(1000) as u32)
        .collect();
    let s = session(&mut r, seed, (ue, ue6, v6_only), &teids, policing);
    let acl_v6 = acl.judges_ipv6();
    // The TEIDs the PDRs took (the others are unknown: punted).
    let teids: Vec<u32> = teids
        .into_iter()
        .filter(|t| {
            s.pdrs
                .iter()
                .any(|p| p.pdi.local_f_teid.is_some_and(|f| f.teid.0 == *t))
        })
        .collect();
    let epoch = Instant::now();
    let mut now = epoch;
    let mut pipeline = Pipeline::new(
        now,
        PipelineConfig {
            n3: upf_dataplane::LocalAddrs {
                v4: Some(N3),
                v6: Some(N3_6),
            },
            n9: upf_dataplane::LocalAddrs {
                v4: Some(N9),
                v6: Some(N9_6),
            },
            uplink_acl: acl,
            ..Default::default()
        },
    );
    pipeline
        .install(now, Arc::new(s.clone()), InstallFlags::default())
        .map_err(|e| TestCaseError::fail(format!("reference refuses: {e:?}")))?;
    engine
        .install(&s)
        .map_err(|e| TestCaseError::fail(format!("engine refuses {s:#?}: {e}")))?;
    let mut out = Output::default();
    let mut buf = vec![0u8; 4096];
    let mut handled = 0;
    // Per URR: what the program had counted at its last report.
    let mut base: Vec<(UrrId, Volume)> = Vec::new();
    for n in 0..frames {
        // Virtual time: bursts, then pauses that refill the MBR buckets a little or fully.
        let steps: &[u64] = if policing {
            &[0, 0, 0, 100, 1000, 10_000, 300_000]
        } else {
            &[0, 0, 0, 0, 100, 10_000, 300_000, 3_000_000]
        };
        now += Duration::from_micros(r.pick(steps));
        engine
            .fix_clock(Some(now.duration_since(epoch).as_nanos() as u64))
            .unwrap();
        let prog = engine.program().unwrap();
        let (f, claimed) = frame(&mut r, &s, (ue, ue6), &teids, acl_v6);
        let before = engine.stats().unwrap();
        let res = upf_io::bpf::run(prog, &f, &mut buf, 1, None).unwrap();
        let after = engine.stats().unwrap();
        let got = &buf[..res.out_len];
        let ctx = || format!("frame {n} {f:02x?}\nsession {s:#?}");
        if res.retval == XDP_PASS {
            prop_assert_eq!(after.punted, before.punted + 1);
            prop_assert_eq!(got, &f[..], "a punted frame is unchanged");
            prop_assert!(
                !claimed,
                "a valid frame of the session was punted: {}",
                ctx()
            );
            tally(|t| t.punted += 1);
            prop_assert_eq!(engine.crossings(), Vec::new(), "{}", ctx());
            continue;
        }
        handled += 1;
        let ip = ip_of(&f);
        // Only G-PDUs to N3 (in IPv4 or IPv6) are claimed from N3; other IPv6 packets are
        // downlink ones.
        let outer6 =
            ip.len() >= 40 && ip[0] >> 4 == 6 && ip[6] == 17 && ip[24..40] == N3_6.octets();
        let port = if outer6
            || ip.len() >= 20 && ip[0] == 0x45 && ip[9] == 17 && ip[16..20] == N3.octets()
        {
            Port::N3
        } else {
            Port::N6
        };
        let inner_at = match port {
            Port::N3 if outer6 && ip.get(48) == Some(&0x34) => 64,
            Port::N3 if outer6 => 56,
            Port::N3 if ip.get(28) == Some(&0x34) => 44,
            Port::N3 => 36,
            _ => 0,
        };
        let v6 = ip.get(inner_at).is_some_and(|b| b >> 4 == 6);
        let proto = ip.get(inner_at + if v6 { 6 } else { 9 });
        if proto.is_some_and(|p| *p != 6 && *p != 17) {
            tally(|t| t.other_protocols += 1);
        }
        let dropped_before = pipeline.counters().dropped;
        let mut rx = vec![Packet::from_bytes(port, ip).unwrap()];
        pipeline.process(now, &mut rx, &mut out);
        let reference_drops: Vec<&str> = upf_dataplane::DropReason::ALL
            .iter()
            .filter(|d| pipeline.counters().dropped[**d as usize] != dropped_before[**d as usize])
            .map(|d| d.name())
            .collect();
        match res.retval {
            XDP_DROP => {
                prop_assert_eq!(out.tx.len(), 0, "the reference forwards: {}", ctx());
                prop_assert_eq!(
                    stat_diff(&before, &after),
                    reference_drops.clone(),
                    "{}",
                    ctx()
                );
                tally(
                    |t| match t.drops.iter_mut().find(|d| d.0 == reference_drops[0]) {
                        Some(d) => d.1 += 1,
                        None => t.drops.push((reference_drops[0], 1)),
                    },
                );
            }
            XDP_TX => {
                prop_assert_eq!(after.forwarded, before.forwarded + 1);
                prop_assert_eq!(
                    out.tx.len(),
                    1,
                    "the reference drops {:?}: {}",
                    reference_drops,
                    ctx()
                );
                let p = out.tx.pop().unwrap();
                // N9 shares N3's interface in the engine.
                let (hop, egress) = match p.port() {
                    Port::N6 => (HOPS.n6, Port::N6),
                    _ => (HOPS.n3, Port::N3),
                };
                prop_assert_eq!(&got[..6], &hop.dst[..], "egress {:?}: {}", p.port(), ctx());
                prop_assert_eq!(&got[6..12], &hop.src[..]);
                let ethertype: &[u8] = if got[14] >> 4 == 6 {
                    &[0x86, 0xdd]
                } else {
                    &[8, 0]
                };
                prop_assert_eq!(&got[12..14], ethertype, "{}", ctx());
                let mut mine = got[14..].to_vec();
                let mut theirs = p.data().to_vec();
                let tunnel6 = egress == Port::N3 && theirs[0] >> 4 == 6;
                if tunnel6 {
                    // No identification: the same octets, the UDP checksum right.
                    let dst: [u8; 16] = mine[24..40].try_into().unwrap();
                    let u = upf_wire::udp::Packet::new_checked(&mine[40..]).unwrap();
                    prop_assert!(
                        u.verify_checksum_v6(&src6(&mine), &Ipv6Addr::from(dst)),
                        "UDP checksum: {}",
                        ctx()
                    );
                } else if egress == Port::N3 {
                    for h in [&mut mine, &mut theirs] {
                        prop_assert_eq!(checksum(&h[..20]), 0, "outer checksum: {}", ctx());
                        h[4..6].fill(0);
                        h[10..12].fill(0);
                    }
                }
                prop_assert_eq!(mine, theirs, "{}", ctx());
                tally(|t| {
                    if egress == Port::N6 {
                        t.up += 1
                    } else {
                        t.down += 1
                    }
                    t.rewrapped += u64::from(port == Port::N3 && egress == Port::N3);
                    t.up6 += u64::from(outer6);
                    t.down6 += u64::from(tunnel6);
                    if v6 {
                        t.v6_up += u64::from(egress == Port::N6);
                        t.v6_down += u64::from(egress == Port::N3);
                        return;
                    }
                    let ue_side = match port {
                        Port::N6 => ip.get(16..20),
                        _ => ip.get(inner_at + 12..inner_at + 16),
                    };
                    t.routed += u64::from(ue_side.is_some_and(|a| a != ue.octets()));
                });
            }
            v => prop_assert!(false, "XDP verdict {}", v),
        }
        out.free.clear();
        same_reports(engine, &mut pipeline, s.seid, &mut base, &ctx)?;
    }
    let ids: Vec<UrrId> = s.urrs.iter().map(|u| u.id).collect();
    let theirs: Vec<(UrrId, Volume)> = pipeline
        .query_usage(now, s.seid, &ids)
        .unwrap()
        .into_iter()
        .map(|u| (u.urr, u.volume))
        .collect();
    // What the program counted since each URR's last report.
    let mine: Vec<(UrrId, Volume)> = (engine.remove(s.seid).unwrap().into_iter())
        .map(|(u, v)| {
            let b = base.iter().find(|(b, _)| *b == u).map(|(_, b)| *b);
            (u, v.since(&b.unwrap_or_default()))
        })
        .collect();
    prop_assert_eq!(&mine, &theirs, "URR usage after {} handled frames", handled);
    if mine.iter().any(|(_, v)| v.total_packets > 0) {
        tally(|t| t.usage += 1);
    }
    Ok(())
}

/// The source address of an IPv6 packet.
fn src6(ip: &[u8]) -> Ipv6Addr {
    let a: [u8; 16] = ip[8..24].try_into().unwrap();
    Ipv6Addr::from(a)
}

/// Both engines' N3 and N9 have IPv6 addresses.
const V6_LOCALS: upf_xdp::Ipv6Locals = upf_xdp::Ipv6Locals { n3: true, n9: true };

fn engine(acl: Arc<Acl>) -> Engine {
    Engine::load(Config {
        sessions: 64,
        n3: N3,
        n9: N9,
        n3_v6: Some(N3_6),
        n9_v6: Some(N9_6),
        outer_ttl: 64,
        hops: Some(HOPS),
        acl,
    })
    .expect("loading the XDP engine (root)")
}

#[test]
#[ignore = "needs root"]
fn xdp_program_does_what_the_pipeline_does() {
    without_acl(300, 40, false);
    // Judged by small uplink ACLs: a few rules, so that they decide often. Each case loads
    // an engine of its own (the verifier: ~3 s a case): 20 of them, where 60 took 3 minutes.
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 20,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&(any::<u64>(), 1..40usize), |(seed, n)| {
            check(seed, 40, false, n)
        })
        .unwrap();
    // Sessions made for MBRs and AMBRs (a QER on several PDRs), with longer runs of frames.
    without_acl(60, 200, true);
    let t = TALLY.lock().unwrap();
    eprintln!("{t:?}");
    // The cases reached every verdict the program claims.
    assert!(t.punted > 0 && t.up > 0 && t.down > 0 && t.usage > 0 && t.other_protocols > 0);
    assert!(t.rewrapped > 0, "no frame from one tunnel into another");
    assert!(t.routed > 0, "no frame to or from a Framed Route");
    assert!(
        t.v6_up > 0 && t.v6_down > 0,
        "no IPv6 packet forwarded both ways"
    );
    assert!(t.up6 > 0, "no frame from an IPv6 tunnel forwarded");
    assert!(t.down6 > 0, "no frame into an IPv6 tunnel");
    assert!(t.volth > 0 && t.volqu > 0, "reports raised");
    for r in upf_xdp::Reason::ALL {
        let seen = t.drops.iter().any(|d| d.0 == r.name());
        assert!(
            seen || r == upf_xdp::Reason::EncapFailed,
            "no {} drop",
            r.name()
        );
    }
}

/// `cases` cases of `frames` frames without an ACL.
fn without_acl(cases: u32, frames: usize, policing: bool) {
    on_one_engine(Arc::new(Acl::default()), cases, frames, policing);
}

/// `cases` cases of `frames` frames judged by `acl`, on one engine (a load runs the
/// verifier: the most time a case would take).
fn on_one_engine(acl: Arc<Acl>, cases: u32, frames: usize, policing: bool) {
    let engine = Mutex::new(engine(acl.clone()));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        // A failed case leaves its session in the engine: report it as it came.
        max_shrink_iters: 0,
        ..ProptestConfig::default()
    });
    runner
        .run(&any::<u64>(), |seed| {
            check_on(
                &mut engine.lock().unwrap(),
                acl.clone(),
                seed,
                frames,
                policing,
            )
        })
        .unwrap();
}

/// The ACL sizes of the benchmark's S0 and S3 (1,000 and 10,000 rules): the program walks
/// their tables as `Acl::check4` does.
#[test]
#[ignore = "needs root"]
fn xdp_program_judges_large_acls_as_the_pipeline() {
    for n in [1_000, 10_000] {
        on_one_engine(random_acl(n as u64, n), 20, 300, false);
    }
    let t = TALLY.lock().unwrap();
    eprintln!("{t:?}");
    let denied = t
        .drops
        .iter()
        .find(|d| d.0 == "acl_denied")
        .map_or(0, |d| d.1);
    assert!(t.up > 0 && denied > 0, "{t:?}");
}
