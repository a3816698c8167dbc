//! What the runtime's tests share: the UE addresses and the uplink session they install.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use upf_dataplane::{Packet, Port};
use upf_rules::{
    ApplyAction, Far, FarId, Forwarding, Interface, LocalFTeid, OuterHeaderRemoval, Pdi, Pdr,
    PdrId, Precedence, Seid, Session, Teid, UeIp,
};
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::{checksum, ip_proto};

pub const UPF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

pub fn ue(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a3c_0000 + i + 1)
}

/// UE `i`'s session: an uplink PDR on TEID 100 + i, FAR 1 to the core.
pub fn session(i: u32) -> Arc<Session> {
    let mut s = Session::new(Seid(u64::from(i) + 1), Seid(1), IpAddr::V4(UPF));
    let mut pdi = Pdi::any(Interface::Access);
    pdi.local_f_teid = Some(LocalFTeid {
        teid: Teid(100 + i),
        ipv4: Some(UPF),
        ipv6: None,
    });
    pdi.ue_ip = Some(UeIp {
        ipv4: Some(ue(i)),
        ipv6: None,
        is_destination: false,
    });
    s.pdrs = vec![Pdr {
        id: PdrId(1),
        precedence: Precedence(10),
        pdi,
        outer_header_removal: Some(OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: false,
        }),
        far: Some(FarId(1)),
        qers: Default::default(),
        urrs: Default::default(),
    }];
    s.fars = vec![Far {
        id: FarId(1),
        action: ApplyAction::FORW,
        forwarding: Some(Forwarding::to(Interface::Core)),
        duplicating: Box::default(),
        bar: None,
    }];
    Arc::new(s)
}

/// A G-PDU on `teid` whose inner packet comes from `src` (which steers it), UDP from `sport`.
pub fn gpdu(teid: u32, src: Ipv4Addr, seq: u16, sport: u16) -> Packet {
    gpdu_sized(teid, src, seq, sport, 0)
}

/// [`gpdu`] with `payload` octets of UDP payload.
pub fn gpdu_sized(teid: u32, src: Ipv4Addr, seq: u16, sport: u16, payload: usize) -> Packet {
    let total = 28 + payload;
    let mut ip = vec![0u8; total];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&u16::try_from(total).unwrap().to_be_bytes());
    ip[4..6].copy_from_slice(&seq.to_be_bytes());
    ip[8] = 64;
    ip[9] = ip_proto::UDP;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&[198, 51, 100, 1]);
    let c = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20..22].copy_from_slice(&sport.to_be_bytes());
    ip[24..26].copy_from_slice(&u16::try_from(8 + payload).unwrap().to_be_bytes());
    let mut p = Packet::from_bytes(Port::N3, &ip).unwrap();
    let (s, l) = (p.start(), p.len());
    let tunnel = GtpuTunnel {
        teid,
        src_port: 2152,
        dst_port: 2152,
        psc: None,
        ttl: 64,
        dscp: 0,
        ecn: 0,
    };
    let e = EncapV4 {
        src: Ipv4Addr::new(192, 0, 2, 100),
        dst: UPF,
        ident: 0,
        dont_frag: false,
        tunnel,
    };
    let start = encapsulate_gtpu_v4(p.buffer_mut(), s, l, &e).unwrap();
    p.set_range(start, s + l);
    p
}
