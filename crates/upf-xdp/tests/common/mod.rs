//! What the engine's tests share.

use std::net::{IpAddr, Ipv4Addr};
use upf_rules::*;

/// Session `seid` of UE `ue`: an uplink PDR on TEID `teid_up` that strips the tunnel and
/// goes to N6, and a downlink PDR into the gNB's tunnel `(TEID, address)`.
pub fn forwarding_session(seid: u64, ue: Ipv4Addr, teid_up: u32, gnb: (u32, Ipv4Addr)) -> Session {
    let mut s = Session::new(Seid(seid), Seid(1), "192.0.2.9".parse().unwrap());
    let mut ul = Pdi::any(Interface::Access);
    ul.local_f_teid = Some(LocalFTeid {
        teid: Teid(teid_up),
        ipv4: None,
        ipv6: None,
    });
    ul.ue_ip = Some(UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: false,
    });
    let mut dl = Pdi::any(Interface::Core);
    dl.ue_ip = Some(UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: true,
    });
    for (id, pdi, ohr) in [(1u16, ul, true), (2, dl, false)] {
        s.insert_pdr(Pdr {
            id: PdrId(id),
            precedence: Precedence(1),
            pdi,
            outer_header_removal: ohr.then_some(OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(u32::from(id))),
            qers: Default::default(),
            urrs: Default::default(),
        })
        .unwrap();
    }
    let mut to_gnb = Forwarding::to(Interface::Access);
    to_gnb.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
        teid: Teid(gnb.0),
        peer: IpAddr::V4(gnb.1),
    });
    for (id, fw) in [(1, Forwarding::to(Interface::Core)), (2, to_gnb)] {
        s.insert_far(Far {
            id: FarId(id),
            action: ApplyAction::FORW,
            forwarding: Some(fw),
            duplicating: Box::default(),
            bar: None,
        })
        .unwrap();
    }
    s
}
