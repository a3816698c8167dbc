//! Packet Detection Rules (TS 29.244 §5.2.1, §7.5.2.2) and the packet facts they match on.

use crate::ids::{FarId, PdrId, Precedence, QerId, Qfi, Teid, UrrId};
use crate::sdf::SdfFilter;
use crate::shared::{Shared, SharedSlice};
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where a packet enters (Source Interface) or leaves (Destination Interface), TS 29.244
/// §8.2.2 / §8.2.24. `Access` is N3 (from the gNB), `Core` is N9 (towards another UPF),
/// `SgiLan` is N6 (the data network), `CpFunction` is the SMF (N4-u).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Interface {
    Access,
    Core,
    SgiLan,
    CpFunction,
    LiFunction,
    VnInternal,
}

impl Interface {
    /// From the 4-bit PFCP value; `None` for spare values.
    pub fn from_pfcp(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Access,
            1 => Self::Core,
            2 => Self::SgiLan,
            3 => Self::CpFunction,
            4 => Self::LiFunction,
            5 => Self::VnInternal,
            _ => return None,
        })
    }

    /// Whether a GTP-U tunnel on this interface uses the UP function's N9 side (its N9
    /// address and interface) rather than N3: what the 3GPP Interface Type (§8.2.118) says
    /// when it names a UPF-to-UPF interface (S5/S8-U, N9, N19) or an access one (S1-U, N3),
    /// else every interface but Access (Core, and the CP and LI functions' GTP-U endpoints).
    /// A PSA receives uplink on Access from an I-UPF over N9, for example.
    pub fn tunnels_on_n9(self, interface_type: Option<u8>) -> bool {
        match interface_type {
            Some(1 | 15 | 18 | 19) => true,
            Some(0 | 11..=14) => false,
            _ => self != Self::Access,
        }
    }
}

/// The UP function's own tunnel endpoint a PDR matches (already chosen: the agent resolves
/// CHOOSE before a session reaches the data path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LocalFTeid {
    pub teid: Teid,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

/// The UE address of a PDI (TS 29.244 §8.2.62), already allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UeIp {
    pub ipv4: Option<Ipv4Addr>,
    /// Address (or prefix) and prefix length; /128 for a single address.
    pub ipv6: Option<(Ipv6Addr, u8)>,
    /// The UE address is the packet's destination (a downlink PDR); otherwise its source.
    pub is_destination: bool,
}

impl UeIp {
    /// Whether `addr` is this UE's (IPv6: within its prefix).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.ipv4 == Some(a),
            IpAddr::V6(a) => self
                .ipv6
                .is_some_and(|(p, len)| prefix_match(&p.octets(), &a.octets(), len)),
        }
    }
}

/// A Framed-Route / Framed-IPv6-Route: a network behind the UE (TS 29.244 §5.2.1, RFC 2865).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FramedRoute {
    pub network: IpAddr,
    pub prefix_len: u8,
}

impl FramedRoute {
    /// Parses the RADIUS text form "`prefix/len [gateway [metrics]]`" (RFC 2865 §5.22, RFC 3162
    /// §2.5); only the prefix matters to the UP function.
    pub fn parse(text: &str) -> Option<Self> {
        let prefix = text.split_ascii_whitespace().next()?;
        let (addr, len) = match prefix.split_once('/') {
            Some((a, l)) => (a.parse::<IpAddr>().ok()?, Some(l.parse::<u8>().ok()?)),
            None => (prefix.parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = len.unwrap_or(max);
        (prefix_len <= max).then_some(Self {
            network: addr,
            prefix_len,
        })
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.network, addr) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                prefix_match(&n.octets(), &a.octets(), self.prefix_len)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                prefix_match(&n.octets(), &a.octets(), self.prefix_len)
            }
            _ => false,
        }
    }
}

/// Whether the first `len` bits of `a` and `b` agree.
pub(crate) fn prefix_match(a: &[u8], b: &[u8], len: u8) -> bool {
    let len = usize::from(len).min(a.len() * 8);
    let (whole, rest) = (len / 8, len % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// Outer Header Removal (TS 29.244 §8.2.64), as the data path must apply it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OuterHeaderRemoval {
    /// GTP-U/UDP/IP of either version (descriptions 0, 1 and 6; see the agent for 0/1 leniency).
    GtpuUdpIp {
        /// Also delete the PDU Session Container extension header (octet 6 bit 1).
        delete_pdu_session_container: bool,
    },
    /// UDP/IP (descriptions 2, 3).
    UdpIp,
    /// IP (descriptions 4, 5).
    Ip,
    /// VLAN S-TAG (7) or S-TAG and C-TAG (8), Ethernet PDU sessions.
    Vlan { c_tag_too: bool },
}

/// Packet Detection Information (TS 29.244 §7.5.2.2-2): every present field must match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pdi {
    pub source: Interface,
    pub local_f_teid: Option<LocalFTeid>,
    pub ue_ip: Option<UeIp>,
    /// Any one filter matching is enough; none means every packet (§5.2.1). Shared: sessions
    /// of one PCC rule carry the same filters, and the agent keeps one copy of each list.
    pub sdf_filters: SharedSlice<SdfFilter>,
    /// Any one QFI matching is enough; none means any QFI.
    pub qfis: SmallVec<[Qfi; 1]>,
    /// Rare; a boxed slice allocates nothing when empty.
    pub framed_routes: Box<[FramedRoute]>,
    /// Network instance and application id: read through the accessors. Shared, as the
    /// PDIs of a UP function name a few network instances.
    pub extra: Shared<PdiExtra>,
}

/// The parts of a [`Pdi`] that many PDIs have alike, or few have at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PdiExtra {
    pub network_instance: Option<CompactString>,
    pub application_id: Option<CompactString>,
    /// Source Interface Type (§8.2.118), the 6-bit value.
    pub interface_type: Option<u8>,
}

impl Pdi {
    /// A PDI matching everything from `source`.
    pub fn any(source: Interface) -> Self {
        Self {
            source,
            local_f_teid: None,
            ue_ip: None,
            sdf_filters: SharedSlice::new(),
            qfis: SmallVec::new(),
            framed_routes: Box::default(),
            extra: Shared::new(),
        }
    }

    pub fn network_instance(&self) -> Option<&str> {
        self.extra.get()?.network_instance.as_deref()
    }

    pub fn application_id(&self) -> Option<&str> {
        self.extra.get()?.application_id.as_deref()
    }

    pub fn interface_type(&self) -> Option<u8> {
        self.extra.get()?.interface_type
    }

    /// The extra parts to change (a copy of their own if they were shared).
    pub fn extra_mut(&mut self) -> &mut PdiExtra {
        self.extra.make_mut()
    }
}

/// A Packet Detection Rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pdr {
    pub id: PdrId,
    pub precedence: Precedence,
    pub pdi: Pdi,
    pub outer_header_removal: Option<OuterHeaderRemoval>,
    /// The FAR applied to matching packets; a PDR without one detects but does not forward
    /// (packets matching it are dropped).
    pub far: Option<FarId>,
    /// All of these QERs apply, in order (e.g. a flow QER and the session-AMBR QER).
    pub qers: SmallVec<[QerId; 2]>,
    /// Every one of these URRs counts matching packets.
    pub urrs: SmallVec<[UrrId; 2]>,
}

/// What the PDR lookup knows about a packet, in the reference matcher [`Pdr::matches`]. A
/// back-end compiles PDRs into something faster; this is the semantics it must agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    pub source: Interface,
    /// The outer destination TEID, for packets that arrived in GTP-U.
    pub teid: Option<Teid>,
    /// The QFI of the PDU Session Container, if any.
    pub qfi: Option<Qfi>,
    /// The inner packet's 5-tuple (ports 0 when the protocol has none).
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// IPv4 ToS / IPv6 Traffic Class.
    pub tos: u8,
    pub spi: Option<u32>,
    pub flow_label: Option<u32>,
}

impl Pdr {
    /// TS 29.244 §5.2.1: whether this PDR's PDI matches the packet.
    pub fn matches(&self, p: &PacketMeta) -> bool {
        let pdi = &self.pdi;
        if pdi.source != p.source {
            return false;
        }
        if let Some(ft) = &pdi.local_f_teid {
            if p.teid != Some(ft.teid) {
                return false;
            }
        }
        if !pdi.qfis.is_empty() && !p.qfi.is_some_and(|q| pdi.qfis.contains(&q)) {
            return false;
        }
        let ue_addr = match pdi.ue_ip {
            Some(ue) => {
                let addr = if ue.is_destination { p.dst } else { p.src };
                let routed = pdi.framed_routes.iter().any(|r| r.contains(addr));
                if !ue.contains(addr) && !routed {
                    return false;
                }
                Some(addr)
            }
            None => None,
        };
        pdi.sdf_filters.is_empty()
            || pdi
                .sdf_filters
                .iter()
                .any(|f| f.matches(p, pdi.packets_leave_ue(), ue_addr))
    }
}

impl Pdi {
    /// Whether matching packets come from the UE (uplink): the UE IP's S/D flag says so, and
    /// without a UE IP the source interface does (Access is uplink).
    pub fn packets_leave_ue(&self) -> bool {
        match self.ue_ip {
            Some(ue) => !ue.is_destination,
            None => self.source == Interface::Access,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_route_parses_radius_forms() {
        let r = FramedRoute::parse("192.0.2.0/24 0.0.0.0 1").unwrap();
        assert!(r.contains("192.0.2.77".parse().unwrap()));
        assert!(!r.contains("192.0.3.1".parse().unwrap()));
        assert!(FramedRoute::parse("2001:db8::/33").is_some());
        assert!(FramedRoute::parse("10.0.0.0/33").is_none());
        assert!(FramedRoute::parse("").is_none());
    }

    #[test]
    fn prefix_match_bits() {
        assert!(prefix_match(&[0b1010_0000], &[0b1011_1111], 3));
        assert!(!prefix_match(&[0b1010_0000], &[0b1011_1111], 4));
        assert!(prefix_match(&[1, 2], &[9, 9], 0));
    }
}
