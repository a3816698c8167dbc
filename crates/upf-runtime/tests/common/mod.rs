//! What the runtime's tests share: the UE addresses and the uplink session they install.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use upf_rules::{
    ApplyAction, Far, FarId, Forwarding, Interface, LocalFTeid, OuterHeaderRemoval, Pdi, Pdr,
    PdrId, Precedence, Seid, Session, Teid, UeIp,
};

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
