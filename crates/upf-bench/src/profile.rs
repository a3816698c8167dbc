//! Traffic profiles as the seeds describe them, built into sessions and packets.
//!
//! S0 (SKT/Intel 2018, seed 000): every UE has two bearers, a GBR dedicated one and an MBR
//! default one, with four flows each; ACL, QoS and charging apply to every packet; sizes from
//! 64 to 1400 octets; four UL:DL throughput splits.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use upf_dataplane::{Packet, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::{
    ApplyAction, Bitrate, Far, FarId, Forwarding, Interface, LocalFTeid, OuterHeaderCreation,
    OuterHeaderRemoval, Pdi, Pdr, PdrId, Precedence, Qer, QerId, Qfi, ReportingTriggers, SdfFilter,
    Seid, Session, Teid, UeIp, Urr, UrrId, VolumeLimit,
};
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::{checksum, ip_proto};

pub const UPF_N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const FLOWS_PER_BEARER: u16 = 4;

fn low8(v: u32) -> u8 {
    u8::try_from(v & 0xff).unwrap_or(0)
}

/// The i-th UE's address: 10.0.0.0/8 (room for 16M UEs).
pub fn ue_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i + 1))
}

/// The i-th UE's uplink TEID.
pub fn ue_teid(i: u32) -> u32 {
    0x1000_0000 + i
}

/// One of 160 gNBs (seed 003's count), by UE.
pub fn gnb_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 100 + low8(i % 160))
}

/// Server side of flow `f` of a bearer: GBR flows go to 198.51.100.0/24 ports 5000+,
/// default-bearer traffic anywhere.
pub fn server(gbr: bool, f: u16) -> (Ipv4Addr, u16) {
    if gbr {
        (Ipv4Addr::new(198, 51, 100, 10 + low8(f.into())), 5000 + f)
    } else {
        (Ipv4Addr::new(203, 0, 113, 10 + low8(f.into())), 443)
    }
}

fn sdf(text: &str) -> SdfFilter {
    SdfFilter {
        flow: Some(FlowDescription::parse(text).expect("valid profile filter")),
        ..Default::default()
    }
}

fn pdr(id: u16, prec: u32, pdi: Pdi, far: u32, qers: &[u32], urr: u32, ohr: bool) -> Pdr {
    Pdr {
        id: PdrId(id),
        precedence: Precedence(prec),
        pdi,
        outer_header_removal: ohr.then_some(OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: false,
        }),
        far: Some(FarId(far)),
        qers: qers.iter().map(|&q| QerId(q)).collect(),
        urrs: [UrrId(urr)].into_iter().collect(),
    }
}

/// The S0 session of UE `i`: 4 PDRs (GBR and default bearer, each way; the GBR PDRs carry
/// the bearer's 4 flows as SDF filters), 2 FARs, 3 QERs (session AMBR, GBR flow, default
/// flow), 1 URR (volume, with a threshold no test run reaches).
pub fn s0_session(i: u32) -> Arc<Session> {
    let ue = ue_addr(i);
    let mut s = Session::new(
        Seid(u64::from(i) + 1),
        Seid(u64::from(i) + 1),
        IpAddr::V4(UPF_N3),
    );
    let fteid = LocalFTeid {
        teid: Teid(ue_teid(i)),
        ipv4: Some(UPF_N3),
        ipv6: None,
    };
    let ue_ip = |dst| UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: dst,
    };
    let gbr_filters: Vec<SdfFilter> = (0..FLOWS_PER_BEARER)
        .map(|f| {
            let (a, port) = server(true, f);
            sdf(&format!("permit out 17 from {a} {port} to assigned"))
        })
        .collect();
    let mut ul_gbr = Pdi::any(Interface::Access);
    ul_gbr.local_f_teid = Some(fteid);
    ul_gbr.ue_ip = Some(ue_ip(false));
    ul_gbr.qfis = [Qfi(1)].into_iter().collect();
    ul_gbr.sdf_filters = gbr_filters.clone().into_iter().collect();
    let mut ul_def = Pdi::any(Interface::Access);
    ul_def.local_f_teid = Some(fteid);
    ul_def.ue_ip = Some(ue_ip(false));
    let mut dl_gbr = Pdi::any(Interface::Core);
    dl_gbr.ue_ip = Some(ue_ip(true));
    dl_gbr.sdf_filters = gbr_filters.into_iter().collect();
    let mut dl_def = Pdi::any(Interface::Core);
    dl_def.ue_ip = Some(ue_ip(true));
    s.pdrs = vec![
        pdr(1, 10, ul_gbr, 1, &[1, 2], 1, true),
        pdr(2, 255, ul_def, 1, &[1, 3], 1, true),
        pdr(3, 10, dl_gbr, 2, &[1, 2], 1, false),
        pdr(4, 255, dl_def, 2, &[1, 3], 1, false),
    ];
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
                    teid: Teid(0x2000_0000 + i),
                    peer: IpAddr::V4(gnb_addr(i)),
                }),
                ..Forwarding::to(Interface::Access)
            }),
            duplicating: Box::default(),
            bar: None,
        },
    ];
    // Rates high enough that the benchmark measures the work, not the policing.
    let rate = |kbps| Bitrate {
        uplink_kbps: kbps,
        downlink_kbps: kbps,
    };
    let mut ambr = Qer::open(QerId(1));
    ambr.mbr = Some(rate(100_000_000));
    let mut gbr = Qer::open(QerId(2));
    gbr.qfi = Some(Qfi(1));
    gbr.gbr = Some(rate(10_000));
    gbr.mbr = Some(rate(100_000_000));
    let mut def = Qer::open(QerId(3));
    def.qfi = Some(Qfi(9));
    def.mbr = Some(rate(100_000_000));
    s.qers = vec![ambr, gbr, def];
    let mut urr = Urr::new(UrrId(1));
    urr.triggers = ReportingTriggers::VOLTH;
    urr.volume_threshold = Some(VolumeLimit {
        total: Some(u64::MAX / 2),
        ..Default::default()
    });
    s.urrs = vec![urr];
    Arc::new(s)
}

/// IPv4/UDP packet of `size` octets in all.
pub fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, size: usize) -> Vec<u8> {
    let size = size.max(28);
    let mut v = vec![0u8; size];
    v[0] = 0x45;
    v[2..4].copy_from_slice(&u16::try_from(size).unwrap_or(u16::MAX).to_be_bytes());
    v[8] = 64;
    v[9] = ip_proto::UDP;
    v[12..16].copy_from_slice(&src.octets());
    v[16..20].copy_from_slice(&dst.octets());
    let c = checksum::checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v[20..22].copy_from_slice(&sport.to_be_bytes());
    v[22..24].copy_from_slice(&dport.to_be_bytes());
    v[24..26].copy_from_slice(&u16::try_from(size - 20).unwrap_or(u16::MAX).to_be_bytes());
    v
}

/// An S0 packet of UE `i`, flow `f` (0..8: the first 4 on the GBR bearer), `size` octets of
/// inner IP: a G-PDU on N3 for uplink, plain IP on N6 for downlink.
pub fn s0_packet(i: u32, f: u16, uplink: bool, size: usize) -> Packet {
    let gbr = f < FLOWS_PER_BEARER;
    let (srv, sport) = server(gbr, f % FLOWS_PER_BEARER);
    let ue = ue_addr(i);
    let ue_port = 40000 + f;
    if !uplink {
        return Packet::from_bytes(Port::N6, &udp4(srv, ue, sport, ue_port, size)).expect("fits");
    }
    let inner = udp4(ue, srv, ue_port, sport, size);
    let mut p = Packet::from_bytes(Port::N3, &inner).expect("fits");
    let (s, l) = (p.start(), p.len());
    let tunnel = GtpuTunnel {
        teid: ue_teid(i),
        src_port: 2152,
        dst_port: 2152,
        psc: Some(PduSessionContainer::ul(if gbr { 1 } else { 9 })),
        ttl: 64,
        dscp: 0,
        ecn: 0,
    };
    let params = EncapV4 {
        src: gnb_addr(i),
        dst: UPF_N3,
        ident: 0,
        dont_frag: false,
        tunnel,
    };
    let start = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &params).expect("headroom");
    p.set_range(start, s + l);
    p
}

/// `n` uplink-validation rules in the IPFilterRule form operators write: deny rules for
/// destinations in 100.64.0.0/10 (never the profile's servers), with prefix lengths from /16
/// to /32 and a third of them for one protocol and port, so that every packet is checked
/// against all of them and passes.
pub fn acl_rules(n: usize) -> String {
    let mut text = String::new();
    let mut x: u32 = 0x2545_f491;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let len = 16 + x % 17;
        let net = (0x6440_0000 | (x >> 10) & 0x003f_ffff) & (u32::MAX << (32 - len));
        let a = Ipv4Addr::from(net);
        let line = match i % 3 {
            0 => format!(
                "deny in udp from any to {a}/{len} {}\n",
                1024 + (x >> 4) % 60000
            ),
            1 => format!("deny in tcp from any to {a}/{len}\n"),
            _ => format!("deny in ip from any to {a}/{len}\n"),
        };
        text.push_str(&line);
    }
    text
}
