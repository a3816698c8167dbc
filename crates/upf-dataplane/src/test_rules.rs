//! Rule builders the unit tests share: the PDI and the forwarding FAR of an uplink or a
//! downlink PDR, as SMFs give them.

use std::net::{IpAddr, Ipv4Addr};
use upf_rules::*;

/// The N3 address the tests' uplink PDRs take their F-TEIDs on.
pub(crate) const N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// An uplink PDI (access side, F-TEID `teid` at [`N3`], UE `ue` the source) or a downlink
/// one (core side, UE `ue` the destination).
pub(crate) fn pdi(uplink: bool, teid: u32, ue: Ipv4Addr) -> Pdi {
    let mut pdi = Pdi::any(if uplink {
        Interface::Access
    } else {
        Interface::Core
    });
    pdi.local_f_teid = uplink.then_some(LocalFTeid {
        teid: Teid(teid),
        ipv4: Some(N3),
        ipv6: None,
    });
    pdi.ue_ip = Some(UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: !uplink,
    });
    pdi
}

/// A FAR that forwards to the core, or to the access side through the GTP-U tunnel
/// `(TEID, peer)` if given.
pub(crate) fn far(id: u32, tunnel: Option<(u32, Ipv4Addr)>) -> Far {
    let mut fw = Forwarding::to(if tunnel.is_some() {
        Interface::Access
    } else {
        Interface::Core
    });
    fw.outer_header_creation = tunnel.map(|(teid, peer)| OuterHeaderCreation::Gtpu {
        teid: Teid(teid),
        peer: IpAddr::V4(peer),
    });
    Far {
        id: FarId(id),
        action: ApplyAction::FORW,
        forwarding: Some(fw),
        duplicating: Box::default(),
        bar: None,
    }
}
