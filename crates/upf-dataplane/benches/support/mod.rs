//! What the pipeline's benchmarks and examples build alike: UE addresses, UDP datagrams,
//! G-PDUs, an S0-like session and a pipeline holding N of them. Included by path (a file
//! directly in benches/ would be a bench target of its own).
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;
use upf_dataplane::{LocalAddrs, Packet, Pipeline, PipelineConfig, Port};
use upf_rules::sdf::FlowDescription;
use upf_rules::*;
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

pub const UPF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

pub fn ue(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0001 + i)
}

pub fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, len: usize) -> Vec<u8> {
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

pub fn gpdu(teid: u32, inner: &[u8]) -> Packet {
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
pub fn session(i: u32) -> Arc<Session> {
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

pub fn pipeline(sessions: u32) -> Pipeline {
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
