//! Forwarding Action Rules: Create / Update / Remove FAR, Forwarding and Duplicating
//! Parameters, and the IEs they carry (TS 29.244 §7.5.2.3, §7.5.4.3, §7.5.4.7).

use crate::codec::{ie_flags, ie_group, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{BarId, DestinationInterface, FarId, InterfaceType3gpp, NetworkInstance};
use crate::tlv::Reader;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Implements `Arbitrary` from a strategy expression, for types whose fields constrain each other.
#[cfg(test)]
macro_rules! arbitrary_from {
    ($ty:ty, $strategy:expr) => {
        impl proptest::arbitrary::Arbitrary for $ty {
            type Parameters = ();
            type Strategy = proptest::strategy::BoxedStrategy<Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                proptest::strategy::Strategy::boxed($strategy)
            }
        }
    };
}

ie_group! {
    /// TS 29.244 §7.5.2.3 Create FAR (Table 7.5.2.3-1).
    pub struct CreateFar {
        far_id: M FarId = 108,
        apply_action: M ApplyAction = 44,
        /// Present when the action is to forward (FORW).
        forwarding_parameters: O ForwardingParameters = 4,
        /// One per duplication destination (DUPL).
        duplicating_parameters: V DuplicatingParameters = 5,
        /// The BAR used when the action is to buffer (BUFF).
        bar_id: O BarId = 88,
    }
}

ie_group! {
    /// TS 29.244 §7.5.2.3 Forwarding Parameters (Table 7.5.2.3-2).
    pub struct ForwardingParameters {
        destination_interface: M DestinationInterface = 42,
        network_instance: O NetworkInstance = 22,
        redirect_information: O RedirectInformation = 38,
        outer_header_creation: O OuterHeaderCreation = 84,
        transport_level_marking: O TransportLevelMarking = 30,
        forwarding_policy: O ForwardingPolicy = 41,
        header_enrichment: V HeaderEnrichment = 98,
        proxying: O Proxying = 137,
        destination_interface_type: O InterfaceType3gpp = 160,
    }
}

ie_group! {
    /// TS 29.244 §7.5.2.3 Duplicating Parameters (Table 7.5.2.3-3).
    pub struct DuplicatingParameters {
        destination_interface: M DestinationInterface = 42,
        outer_header_creation: O OuterHeaderCreation = 84,
        transport_level_marking: O TransportLevelMarking = 30,
        forwarding_policy: O ForwardingPolicy = 41,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.3 Update FAR (Table 7.5.4.3-1).
    pub struct UpdateFar {
        far_id: M FarId = 108,
        apply_action: O ApplyAction = 44,
        update_forwarding_parameters: O UpdateForwardingParameters = 11,
        update_duplicating_parameters: V UpdateDuplicatingParameters = 105,
        bar_id: O BarId = 88,
        /// Not in Table 7.5.4.3-1: OMEC's SMF sends Forwarding Parameters here instead of
        /// Update Forwarding Parameters; the agent reads them as those.
        forwarding_parameters: O ForwardingParameters = 4,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.3 Update Forwarding Parameters (Table 7.5.4.3-2).
    pub struct UpdateForwardingParameters {
        destination_interface: O DestinationInterface = 42,
        network_instance: O NetworkInstance = 22,
        redirect_information: O RedirectInformation = 38,
        outer_header_creation: O OuterHeaderCreation = 84,
        transport_level_marking: O TransportLevelMarking = 30,
        forwarding_policy: O ForwardingPolicy = 41,
        header_enrichment: V HeaderEnrichment = 98,
        /// SNDEM: send End Marker packets on the old path when the OHC changes.
        pfcpsm_req_flags: O PfcpSmReqFlags = 49,
        destination_interface_type: O InterfaceType3gpp = 160,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.3 Update Duplicating Parameters (Table 7.5.4.3-3).
    pub struct UpdateDuplicatingParameters {
        destination_interface: O DestinationInterface = 42,
        outer_header_creation: O OuterHeaderCreation = 84,
        transport_level_marking: O TransportLevelMarking = 30,
        forwarding_policy: O ForwardingPolicy = 41,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.7 Remove FAR (Table 7.5.4.7-1).
    pub struct RemoveFar {
        far_id: M FarId = 108,
    }
}

ie_flags!(
    /// TS 29.244 §8.2.26 Apply Action. The low byte is octet 5, the high byte octet 6.
    ApplyAction(u16), octets = 1..=2 {
        /// Drop the packets.
        DROP = 0x0001,
        /// Forward the packets.
        FORW = 0x0002,
        /// Buffer the packets.
        BUFF = 0x0004,
        /// Notify the CP function of the first buffered downlink packet.
        NOCP = 0x0008,
        /// Duplicate the packets.
        DUPL = 0x0010,
        /// Accept UE requests to join an IP multicast group.
        IPMA = 0x0020,
        /// Deny UE requests to join an IP multicast group.
        IPMD = 0x0040,
        /// Duplicate for redundant transmission.
        DFRT = 0x0080,
        /// Eliminate duplicate packets of redundant transmission.
        EDRT = 0x0100,
        /// Buffered Downlink Packet Notification.
        BDPN = 0x0200,
        /// Discarded Downlink Packet Notification.
        DDPN = 0x0400,
        /// Forward to the 5GC as an SSM (MBS).
        FSSM = 0x0800,
        /// Forward and replicate MBS data using unicast transport.
        MBSU = 0x1000,
    }
);

/// TS 29.244 §8.2.56 Outer Header Creation. `description` is the 2-octet Outer Header Creation
/// Description read big-endian (octet 5 is the high byte, as Wireshark and free5GC show it), kept
/// raw so that bits of later releases pass through. A field is present exactly when a bit of the
/// description needs it; `encode` writes the fields the description calls for (zero if unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct OuterHeaderCreation {
    pub description: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_number: Option<u16>,
    /// C-TAG as in the C-TAG IE, §8.2.94 (flags octet, then PCP/DEI/VID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_tag: Option<[u8; 3]>,
    /// S-TAG as in the S-TAG IE, §8.2.95.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s_tag: Option<[u8; 3]>,
}

impl OuterHeaderCreation {
    pub const GTPU_UDP_IPV4: u16 = 0x0100;
    pub const GTPU_UDP_IPV6: u16 = 0x0200;
    pub const UDP_IPV4: u16 = 0x0400;
    pub const UDP_IPV6: u16 = 0x0800;
    pub const IPV4: u16 = 0x1000;
    pub const IPV6: u16 = 0x2000;
    pub const C_TAG: u16 = 0x4000;
    pub const S_TAG: u16 = 0x8000;
    pub const N19_INDICATION: u16 = 0x0001;
    pub const N6_INDICATION: u16 = 0x0002;

    // §8.2.56: which description bits call for which field.
    const NEEDS_TEID: u16 = Self::GTPU_UDP_IPV4 | Self::GTPU_UDP_IPV6;
    const NEEDS_IPV4: u16 = Self::GTPU_UDP_IPV4 | Self::UDP_IPV4 | Self::IPV4;
    const NEEDS_IPV6: u16 = Self::GTPU_UDP_IPV6 | Self::UDP_IPV6 | Self::IPV6;
    const NEEDS_PORT: u16 = Self::UDP_IPV4 | Self::UDP_IPV6;

    /// GTP-U/UDP/IPv4 towards `addr` with `teid` (a downlink FAR towards a gNB, an N9 FAR).
    pub fn gtpu_ipv4(teid: u32, addr: Ipv4Addr) -> Self {
        Self {
            teid: Some(teid),
            ipv4: Some(addr),
            ..Self::empty(Self::GTPU_UDP_IPV4)
        }
    }

    /// GTP-U/UDP/IPv6 towards `addr` with `teid`.
    pub fn gtpu_ipv6(teid: u32, addr: Ipv6Addr) -> Self {
        Self {
            teid: Some(teid),
            ipv6: Some(addr),
            ..Self::empty(Self::GTPU_UDP_IPV6)
        }
    }

    /// `description` with no fields filled in.
    pub const fn empty(description: u16) -> Self {
        Self {
            description,
            teid: None,
            ipv4: None,
            ipv6: None,
            port_number: None,
            c_tag: None,
            s_tag: None,
        }
    }

    /// Some description bit in `bits` is set.
    pub const fn has(&self, bits: u16) -> bool {
        self.description & bits != 0
    }
}

impl IeValue for OuterHeaderCreation {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let o = Self::empty(r.u16()?);
        // §8.2.56: the fields follow in this order, each present when a header needing it is
        // requested; a missing one is an invalid length.
        Ok(Self {
            teid: r.u32_if(o.has(Self::NEEDS_TEID))?,
            ipv4: r.ipv4_if(o.has(Self::NEEDS_IPV4))?,
            ipv6: r.ipv6_if(o.has(Self::NEEDS_IPV6))?,
            port_number: r.u16_if(o.has(Self::NEEDS_PORT))?,
            c_tag: o.has(Self::C_TAG).then(|| r.array()).transpose()?,
            s_tag: o.has(Self::S_TAG).then(|| r.array()).transpose()?,
            ..o
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.description.to_be_bytes());
        if self.has(Self::NEEDS_TEID) {
            out.extend_from_slice(&self.teid.unwrap_or(0).to_be_bytes());
        }
        if self.has(Self::NEEDS_IPV4) {
            out.extend_from_slice(&self.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
        }
        if self.has(Self::NEEDS_IPV6) {
            out.extend_from_slice(&self.ipv6.unwrap_or(Ipv6Addr::UNSPECIFIED).octets());
        }
        if self.has(Self::NEEDS_PORT) {
            out.extend_from_slice(&self.port_number.unwrap_or(0).to_be_bytes());
        }
        if self.has(Self::C_TAG) {
            out.extend_from_slice(&self.c_tag.unwrap_or_default());
        }
        if self.has(Self::S_TAG) {
            out.extend_from_slice(&self.s_tag.unwrap_or_default());
        }
    }
}

/// Consistent values: each field is present exactly when the description calls for it.
#[cfg(test)]
fn outer_header_creation_strategy() -> impl proptest::strategy::Strategy<Value = OuterHeaderCreation>
{
    use proptest::prelude::*;
    type F = OuterHeaderCreation;
    (
        any::<u16>(),
        any::<u32>(),
        any::<Ipv4Addr>(),
        any::<Ipv6Addr>(),
        any::<u16>(),
        any::<[u8; 3]>(),
        any::<[u8; 3]>(),
    )
        .prop_map(|(d, teid, v4, v6, port, c, s)| {
            let o = F::empty(d);
            F {
                teid: o.has(F::NEEDS_TEID).then_some(teid),
                ipv4: o.has(F::NEEDS_IPV4).then_some(v4),
                ipv6: o.has(F::NEEDS_IPV6).then_some(v6),
                port_number: o.has(F::NEEDS_PORT).then_some(port),
                c_tag: o.has(F::C_TAG).then_some(c),
                s_tag: o.has(F::S_TAG).then_some(s),
                ..o
            }
        })
}
#[cfg(test)]
arbitrary_from!(OuterHeaderCreation, outer_header_creation_strategy());

/// TS 29.244 §8.2.12 Transport Level Marking: the ToS (IPv4) / Traffic Class (IPv6) value and its
/// mask, as the ToS-Traffic-Class AVP of TS 29.212 §5.3.15.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct TransportLevelMarking {
    pub tos_traffic_class: u8,
    pub mask: u8,
}

impl IeValue for TransportLevelMarking {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let [tos_traffic_class, mask] = Reader::new(value).array()?;
        Ok(Self {
            tos_traffic_class,
            mask,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.tos_traffic_class, self.mask]);
    }
}

/// Text for proptest strings, including multi-octet characters.
#[cfg(test)]
fn text() -> &'static str {
    "\\PC{0,20}"
}

/// The longest prefix of `s` of at most `max` octets that ends on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// A string after a one-octet length (cut at 255 octets: never sent by us).
fn put_str8(out: &mut Vec<u8>, s: &str) {
    let s = clip(s, usize::from(u8::MAX));
    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(s.as_bytes());
}

/// A string after a two-octet length.
fn put_str16(out: &mut Vec<u8>, s: &str) {
    let s = clip(s, usize::from(u16::MAX));
    out.extend_from_slice(&u16::try_from(s.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// An OctetString shown as text. Such fields name things configured as text in the UP function
/// (policies, HTTP headers), so invalid UTF-8 is kept visible as U+FFFD rather than rejected.
fn octet_string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// TS 29.244 §8.2.23 Forwarding Policy: the identifier of a policy preconfigured in the UP function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct ForwardingPolicy {
    #[cfg_attr(test, proptest(strategy = "text()"))]
    pub identifier: String,
}

impl IeValue for ForwardingPolicy {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let len = r.u8()?;
        let identifier = octet_string(r.bytes(usize::from(len))?);
        Ok(Self { identifier })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        put_str8(out, &self.identifier);
    }
}

/// TS 29.244 §8.2.20 Redirect Information. `redirect_address_type` is kept raw (4 bits) with
/// named values. Rel-16 adds the Other Redirect Server Address (type 4), Rel-17 the Redirect Port
/// (types 5 to 8, feature RATP).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct RedirectInformation {
    pub redirect_address_type: u8,
    /// UTF8String; empty for type Port, which carries no address.
    pub redirect_server_address: String,
    /// The IPv6 address when the type is "IPv4 and IPv6 addresses" (with or without port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_redirect_server_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_port: Option<u16>,
}

impl RedirectInformation {
    pub const IPV4_ADDRESS: u8 = 0;
    pub const IPV6_ADDRESS: u8 = 1;
    pub const URL: u8 = 2;
    pub const SIP_URI: u8 = 3;
    pub const IPV4_AND_IPV6_ADDRESSES: u8 = 4;
    pub const PORT: u8 = 5;
    pub const IPV4_ADDRESS_AND_PORT: u8 = 6;
    pub const IPV6_ADDRESS_AND_PORT: u8 = 7;
    pub const IPV4_AND_IPV6_ADDRESSES_AND_PORT: u8 = 8;

    fn has_port(t: u8) -> bool {
        (Self::PORT..=Self::IPV4_AND_IPV6_ADDRESSES_AND_PORT).contains(&t)
    }
}

fn utf8(b: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::incorrect("address is not UTF-8"))
}

fn read_str16(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let len = r.u16()?;
    utf8(r.bytes(usize::from(len))?)
}

impl IeValue for RedirectInformation {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        type R = RedirectInformation;
        let mut r = Reader::new(value);
        let t = r.u8()? & 0x0f;
        // §8.2.20: with type Port the server address (and, as Wireshark reads it, its length)
        // is absent.
        let redirect_server_address = if t == R::PORT {
            String::new()
        } else {
            read_str16(&mut r)?
        };
        let other_redirect_server_address = match t {
            R::IPV4_AND_IPV6_ADDRESSES_AND_PORT => Some(read_str16(&mut r)?),
            // Rel-15 senders used type 4 with one address only: accept its absence.
            R::IPV4_AND_IPV6_ADDRESSES if r.remaining() >= 2 => Some(read_str16(&mut r)?),
            _ => None,
        };
        let redirect_port = r.u16_if(R::has_port(t))?;
        Ok(Self {
            redirect_address_type: t,
            redirect_server_address,
            other_redirect_server_address,
            redirect_port,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let t = self.redirect_address_type & 0x0f;
        out.push(t);
        if t != Self::PORT {
            put_str16(out, &self.redirect_server_address);
        }
        match (t, &self.other_redirect_server_address) {
            (Self::IPV4_AND_IPV6_ADDRESSES, Some(o)) => put_str16(out, o),
            (Self::IPV4_AND_IPV6_ADDRESSES_AND_PORT, o) => {
                put_str16(out, o.as_deref().unwrap_or(""))
            }
            _ => {}
        }
        if Self::has_port(t) {
            out.extend_from_slice(&self.redirect_port.unwrap_or(0).to_be_bytes());
        }
    }
}

/// Consistent values: address, other address and port present as the type requires.
#[cfg(test)]
fn redirect_information_strategy() -> impl proptest::strategy::Strategy<Value = RedirectInformation>
{
    use proptest::prelude::*;
    type R = RedirectInformation;
    (0u8..16, text(), text(), any::<bool>(), any::<u16>()).prop_map(|(t, a, o, with_o, port)| R {
        redirect_address_type: t,
        redirect_server_address: if t == R::PORT { String::new() } else { a },
        other_redirect_server_address: match t {
            R::IPV4_AND_IPV6_ADDRESSES => with_o.then_some(o),
            R::IPV4_AND_IPV6_ADDRESSES_AND_PORT => Some(o),
            _ => None,
        },
        redirect_port: R::has_port(t).then_some(port),
    })
}
#[cfg(test)]
arbitrary_from!(RedirectInformation, redirect_information_strategy());

/// TS 29.244 §8.2.67 Header Enrichment: a header field to add to uplink traffic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct HeaderEnrichment {
    /// 5 bits; 0 = HTTP, the only value defined.
    #[cfg_attr(test, proptest(strategy = "0u8..32"))]
    pub header_type: u8,
    #[cfg_attr(test, proptest(strategy = "text()"))]
    pub name: String,
    #[cfg_attr(test, proptest(strategy = "text()"))]
    pub value: String,
}

impl HeaderEnrichment {
    pub const HTTP: u8 = 0;
}

impl IeValue for HeaderEnrichment {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let header_type = r.u8()? & 0x1f;
        let name_len = r.u8()?;
        let name = octet_string(r.bytes(usize::from(name_len))?);
        let value_len = r.u8()?;
        let value = octet_string(r.bytes(usize::from(value_len))?);
        Ok(Self {
            header_type,
            name,
            value,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.header_type & 0x1f);
        put_str8(out, &self.name);
        put_str8(out, &self.value);
    }
}

/// TS 29.244 §8.2.97 Proxying: the UPF answers ARP / IPv6 Neighbour Solicitation itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Proxying {
    pub arp: bool,
    pub ins: bool,
}

impl IeValue for Proxying {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let f = Reader::new(value).u8()?;
        Ok(Self {
            arp: f & 0x01 != 0,
            ins: f & 0x02 != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.arp) | u8::from(self.ins) << 1);
    }
}

ie_flags!(
    /// TS 29.244 §8.2.31 PFCPSMReq-Flags.
    PfcpSmReqFlags(u8), octets = 1..=1 {
        /// Drop the packets buffered for this session.
        DROBU = 0x01,
        /// Send End Marker packets.
        SNDEM = 0x02,
        /// Query all URRs.
        QAURR = 0x04,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check::{hex, value_of};
    use crate::codec::{check, Multi};
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn create_far_downlink_as_an_smf_sends_it() {
        // scapy 2.8: bytes(IE_CreateFAR(IE_list=[IE_FAR_Id(id=1),
        //   IE_ApplyAction(FORW=1, extra_data=b'\x00'),
        //   IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface="Access"),
        //     IE_NetworkInstance(instance="internet"),
        //     IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=1, ipv4="192.168.10.20")])]))
        // (extra_data gives the 2-octet Apply Action, so that the bytes are canonical.)
        let tlv = hex(
            "00030032006c000400000001002c0002020000040020002a0001000016000908696e7465726e6574\
             0054000a010000000001c0a80a14",
        );
        let far = check::canonical::<CreateFar>(value_of(&tlv, 3));
        assert_eq!(far.far_id, FarId(1));
        assert_eq!(far.apply_action, ApplyAction::FORW);
        let fp = far.forwarding_parameters.unwrap();
        assert_eq!(fp.destination_interface, DestinationInterface::ACCESS);
        assert_eq!(fp.network_instance.unwrap().0, "internet");
        assert_eq!(
            fp.outer_header_creation,
            Some(OuterHeaderCreation::gtpu_ipv4(
                1,
                Ipv4Addr::new(192, 168, 10, 20)
            ))
        );
        assert!(far.duplicating_parameters.is_empty());
        assert_eq!(far.bar_id, None);
    }

    #[test]
    fn create_far_with_one_octet_apply_action() {
        // scapy 2.8: bytes(IE_CreateFAR(IE_list=[IE_FAR_Id(id=2),
        //   IE_ApplyAction(BUFF=1, NOCP=1), IE_BAR_Id(id=5)])) -- scapy's Apply Action is 1 octet.
        let tlv = hex("00030012006c000400000002002c00010c0058000105");
        let far = CreateFar::decode(value_of(&tlv, 3)).unwrap();
        assert_eq!(far.apply_action, ApplyAction::BUFF | ApplyAction::NOCP);
        assert!(far.apply_action.contains(ApplyAction::BUFF));
        assert!(!far.apply_action.contains(ApplyAction::FORW));
        assert_eq!(far.bar_id, Some(BarId(5)));
        // Re-encoded in the canonical 2-octet form.
        let mut out = Vec::new();
        far.encode(&mut out);
        assert_eq!(out, hex("006c000400000002002c00020c000058000105"));
    }

    #[test]
    fn create_far_without_forwarding_parameters() {
        // scapy 2.8: bytes(IE_CreateFAR(IE_list=[IE_FAR_Id(id=3), IE_ApplyAction(DROP=1)]))
        let tlv = hex("0003000d006c000400000003002c000101");
        let far = CreateFar::decode(value_of(&tlv, 3)).unwrap();
        assert_eq!(
            (far.far_id, far.apply_action),
            (FarId(3), ApplyAction::DROP)
        );
        assert_eq!(far.forwarding_parameters, None);
        // Without Apply Action the FAR is rejected, naming the missing IE.
        let e = CreateFar::decode(&hex("006c000400000003")).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::MissingMandatory, Some(44))
        );
    }

    #[test]
    fn apply_action_forms_and_names() {
        // scapy 2.8: bytes(IE_ApplyAction(BUFF=1, NOCP=1)) = 002c00010c
        assert_eq!(
            ApplyAction::decode(&[0x0c]).unwrap(),
            ApplyAction::BUFF | ApplyAction::NOCP
        );
        // Octet 6 (hand-built per §8.2.26): FORW with BDPN; spare bits of octet 6 are dropped.
        let a = ApplyAction::decode(&[0x02, 0xe2]).unwrap();
        assert_eq!(a, ApplyAction::FORW | ApplyAction::BDPN);
        assert_eq!(check::canonical::<ApplyAction>(&[0x02, 0x02]), a);
        assert_eq!(a.names().collect::<Vec<_>>(), ["FORW", "BDPN"]);
        assert_eq!(
            (ApplyAction::FORW | ApplyAction::NOCP)
                .names()
                .collect::<Vec<_>>(),
            ["FORW", "NOCP"]
        );
        assert!(ApplyAction::decode(&[]).is_err());
    }

    #[test]
    fn outer_header_creation_vectors() {
        // scapy 2.8: IE_OuterHeaderCreation(GTPUUDPIPV6=1, TEID=0x11223344, ipv6="2001:db8::1")
        let o = check::canonical::<OuterHeaderCreation>(value_of(
            &hex("0054001602001122334420010db8000000000000000000000001"),
            84,
        ));
        assert_eq!(
            o,
            OuterHeaderCreation::gtpu_ipv6(0x1122_3344, "2001:db8::1".parse().unwrap())
        );
        // scapy 2.8: IE_OuterHeaderCreation(UDPIPV4=1, ipv4="10.1.2.3", port=2152)
        let o =
            check::canonical::<OuterHeaderCreation>(value_of(&hex("0054000804000a0102030868"), 84));
        assert_eq!(o.description, OuterHeaderCreation::UDP_IPV4);
        assert_eq!(
            (o.teid, o.ipv4, o.port_number),
            (None, Some(Ipv4Addr::new(10, 1, 2, 3)), Some(2152))
        );
        // scapy 2.8: IE_OuterHeaderCreation(GTPUUDPIPV4=1, CTAG=1, STAG=1, TEID=5,
        //   ipv4="10.0.0.1", ctag=0x010203, stag=0x040506)
        let o = check::canonical::<OuterHeaderCreation>(value_of(
            &hex("00540010c100000000050a000001010203040506"),
            84,
        ));
        assert_eq!((o.c_tag, o.s_tag), (Some([1, 2, 3]), Some([4, 5, 6])));
        // Both GTP-U bits: one TEID, then both addresses: 2 + 4 + 4 + 16 octets.
        let both = OuterHeaderCreation {
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            description: OuterHeaderCreation::GTPU_UDP_IPV4 | OuterHeaderCreation::GTPU_UDP_IPV6,
            ..OuterHeaderCreation::gtpu_ipv6(7, Ipv6Addr::LOCALHOST)
        };
        let mut out = Vec::new();
        both.encode(&mut out);
        assert_eq!(out.len(), 26);
        check::roundtrip(&both);
    }

    #[test]
    fn outer_header_creation_missing_fields_are_invalid_length() {
        // GTP-U/UDP/IPv4 with a TEID but no address.
        let e = OuterHeaderCreation::decode(&[0x01, 0x00, 0, 0, 0, 1]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidLength);
        // UDP/IPv6 without the port.
        let mut v = vec![0x08, 0x00];
        v.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        let e = OuterHeaderCreation::decode(&v).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidLength);
        // Inside a FAR the error names the OHC and its parents.
        let tlv = hex("0004000f002a00010000540006010000000001");
        let e = ForwardingParameters::decode(value_of(&tlv, 4)).unwrap_err();
        assert_eq!(e.offending_ie(), Some(84));
        // N6 indication (octet 6) alone needs no field; trailing octets are ignored.
        let o = OuterHeaderCreation::decode(&[0x00, 0x02, 0xff]).unwrap();
        assert_eq!(
            o,
            OuterHeaderCreation::empty(OuterHeaderCreation::N6_INDICATION)
        );
    }

    #[test]
    fn small_ie_vectors() {
        // scapy 2.8: IE_TransportLevelMarking(tos=0xb8, traffic_class=0xfc). scapy names
        // octet 6 "traffic_class"; §8.2.12 / TS 29.212 §5.3.15 make it the mask.
        let t = check::canonical::<TransportLevelMarking>(value_of(&hex("001e0002b8fc"), 30));
        assert_eq!((t.tos_traffic_class, t.mask), (0xb8, 0xfc));
        assert!(TransportLevelMarking::decode(&[0xb8]).is_err());
        // scapy 2.8: IE_ForwardingPolicy(policy_identifier="pol1")
        let f = check::canonical::<ForwardingPolicy>(value_of(&hex("0029000504706f6c31"), 41));
        assert_eq!(f.identifier, "pol1");
        assert!(ForwardingPolicy::decode(&[5, b'p']).is_err());
        // scapy 2.8: IE_HeaderEnrichment(header_type="HTTP", name="X-MSISDN", value="12345")
        let h = check::canonical::<HeaderEnrichment>(value_of(
            &hex("006200100008582d4d534953444e053132333435"),
            98,
        ));
        assert_eq!(
            (h.header_type, h.name.as_str(), h.value.as_str()),
            (HeaderEnrichment::HTTP, "X-MSISDN", "12345")
        );
        // scapy 2.8: IE_Proxying(ARP=1, INS=1) and IE_Proxying(ARP=1)
        let p = check::canonical::<Proxying>(value_of(&hex("0089000103"), 137));
        assert!(p.arp && p.ins);
        let p = check::canonical::<Proxying>(value_of(&hex("0089000101"), 137));
        assert!(p.arp && !p.ins);
        // scapy 2.8: IE_PFCPSMReqFlags(DROBU=1, QUARR=1) (scapy spells QAURR "QUARR")
        let s = check::canonical::<PfcpSmReqFlags>(value_of(&hex("0031000105"), 49));
        assert_eq!(s, PfcpSmReqFlags::DROBU | PfcpSmReqFlags::QAURR);
        assert!(!s.contains(PfcpSmReqFlags::SNDEM));
        // Spare bits set are accepted and dropped.
        assert_eq!(
            PfcpSmReqFlags::decode(&[0xfa]).unwrap(),
            PfcpSmReqFlags::SNDEM
        );
    }

    #[test]
    fn redirect_information_vectors() {
        // scapy 2.8: IE_RedirectInformation(type="URL", address="http://portal.example/")
        let r = check::canonical::<RedirectInformation>(value_of(
            &hex("00260019020016687474703a2f2f706f7274616c2e6578616d706c652f"),
            38,
        ));
        assert_eq!(r.redirect_address_type, RedirectInformation::URL);
        assert_eq!(r.redirect_server_address, "http://portal.example/");
        assert_eq!(
            (r.other_redirect_server_address, r.redirect_port),
            (None, None)
        );
        // scapy 2.8: IE_RedirectInformation(type="IPv4 address", address="10.0.0.9")
        let r = check::canonical::<RedirectInformation>(value_of(
            &hex("0026000b00000831302e302e302e39"),
            38,
        ));
        assert_eq!(r.redirect_server_address, "10.0.0.9");
        // Type 4 (Rel-16; scapy 2.8 lacks it), hand-built per §8.2.20: both addresses.
        let v = b"\x04\x00\x08\x31\x30\x2e\x30\x2e\x30\x2e\x39\x00\x0b2001:db8::9";
        let r = check::canonical::<RedirectInformation>(v);
        assert_eq!(
            r.other_redirect_server_address.as_deref(),
            Some("2001:db8::9")
        );
        // Leniency: type 4 without the other address.
        let r = check::canonical::<RedirectInformation>(&v[..11]);
        assert_eq!(r.other_redirect_server_address, None);
        // Rel-17 type 5 (Port): no address, only the port (layout as Wireshark reads it).
        let r = check::canonical::<RedirectInformation>(&[0x05, 0x1f, 0x90]);
        assert_eq!(
            (r.redirect_server_address.as_str(), r.redirect_port),
            ("", Some(8080))
        );
        // Rel-17 type 8: both addresses, then the port; the port is mandatory.
        let mut v8 = v.to_vec();
        v8[0] = 0x08;
        v8.extend_from_slice(&[0x00, 0x50]);
        let r = check::canonical::<RedirectInformation>(&v8);
        assert_eq!(r.redirect_port, Some(80));
        assert!(RedirectInformation::decode(&v8[..v8.len() - 1]).is_err());
        // Truncated address, and an address that is not UTF-8.
        assert!(RedirectInformation::decode(&[0x02, 0x00, 0x05, b'h']).is_err());
        let e = RedirectInformation::decode(&[0x02, 0x00, 0x01, 0xff]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::IncorrectValue);
    }

    #[test]
    fn grouped_vectors() {
        // scapy 2.8: IE_DuplicatingParameters(IE_list=[IE_DestinationInterface(interface=4),
        //   IE_OuterHeaderCreation(UDPIPV4=1, ipv4="10.9.9.9", port=5000)])
        let tlv = hex("00050011002a0001040054000804000a0909091388");
        let d = check::canonical::<DuplicatingParameters>(value_of(&tlv, 5));
        assert_eq!(d.destination_interface, DestinationInterface::LI_FUNCTION);
        assert_eq!(d.outer_header_creation.unwrap().port_number, Some(5000));

        // scapy 2.8: IE_UpdateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(FORW=1,
        //   extra_data=b'\x00'), IE_UpdateForwardingParameters(IE_list=[
        //   IE_DestinationInterface(interface="Access"), IE_OuterHeaderCreation(GTPUUDPIPV4=1,
        //   TEID=0x99, ipv4="192.168.10.21"), IE_PFCPSMReqFlags(SNDEM=1)])])
        let tlv = hex(
            "000a002a006c000400000001002c00020200000b0018002a0001000054000a010000000099c0a80a15\
             0031000102",
        );
        let u = check::canonical::<UpdateFar>(value_of(&tlv, 10));
        assert_eq!(u.apply_action, Some(ApplyAction::FORW));
        let ufp = u.update_forwarding_parameters.unwrap();
        assert_eq!(
            ufp.destination_interface,
            Some(DestinationInterface::ACCESS)
        );
        assert_eq!(ufp.outer_header_creation.unwrap().teid, Some(0x99));
        assert_eq!(ufp.pfcpsm_req_flags, Some(PfcpSmReqFlags::SNDEM));

        // scapy 2.8: IE_RemoveFAR(IE_list=[IE_FAR_Id(id=7)])
        let r = check::canonical::<RemoveFar>(value_of(&hex("00100008006c000400000007"), 16));
        assert_eq!(r.far_id, FarId(7));

        // scapy 2.8: IE_UpdateDuplicatingParameters(IE_list=[
        //   IE_TransportLevelMarking(tos=0x20, traffic_class=0xff)])
        let tlv = hex("00690006001e000220ff");
        let u = check::canonical::<UpdateDuplicatingParameters>(value_of(&tlv, 105));
        assert_eq!(u.destination_interface, None);
        assert_eq!(u.transport_level_marking.unwrap().mask, 0xff);

        // scapy 2.8: IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface="Core"),
        //   IE_RedirectInformation(type="URL", address="http://a/"),
        //   IE_TransportLevelMarking(tos=1, traffic_class=2), IE_ForwardingPolicy(
        //   policy_identifier="p"), IE_HeaderEnrichment(name="a", value="b"), IE_Proxying(ARP=1),
        //   IE_3GPP_InterfaceType(interface_type=17)])
        let tlv = hex(
            "00040034002a0001010026000c020009687474703a2f2f612f001e00020102002900020170006200\
             050001610162008900010100a0000111",
        );
        let f = check::canonical::<ForwardingParameters>(value_of(&tlv, 4));
        assert_eq!(f.destination_interface, DestinationInterface::CORE);
        assert_eq!(
            f.redirect_information.unwrap().redirect_server_address,
            "http://a/"
        );
        assert_eq!(f.forwarding_policy.unwrap().identifier, "p");
        assert_eq!(f.header_enrichment.len(), 1);
        assert_eq!(
            f.proxying,
            Some(Proxying {
                arp: true,
                ins: false
            })
        );
        assert_eq!(f.destination_interface_type, Some(InterfaceType3gpp::N6));
    }

    #[test]
    fn forwarding_parameters_need_a_destination() {
        // Only a Network Instance: the mandatory Destination Interface is missing.
        let e = ForwardingParameters::decode(&hex("0016000908696e7465726e6574")).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::MissingMandatory, Some(42))
        );
        let far = CreateFar {
            far_id: FarId(1),
            apply_action: ApplyAction::FORW | ApplyAction::DUPL,
            forwarding_parameters: None,
            duplicating_parameters: Multi::from(vec![DuplicatingParameters {
                destination_interface: DestinationInterface::LI_FUNCTION,
                outer_header_creation: None,
                transport_level_marking: None,
                forwarding_policy: None,
            }]),
            bar_id: None,
        };
        check::roundtrip(&far);
    }

    #[test]
    fn long_strings_are_cut_on_a_character_boundary() {
        let f = ForwardingPolicy {
            identifier: "é".repeat(200),
        };
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(out.first(), Some(&254));
        assert_eq!(
            ForwardingPolicy::decode(&out).unwrap().identifier,
            "é".repeat(127)
        );
    }

    proptest! {
        #[test]
        fn roundtrip_groups(a: CreateFar, b: UpdateFar, c: RemoveFar) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
        }

        #[test]
        fn roundtrip_parameters(a: ForwardingParameters, b: UpdateForwardingParameters,
                                c: DuplicatingParameters, d: UpdateDuplicatingParameters) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
        }

        #[test]
        fn roundtrip_ies(a: ApplyAction, o: OuterHeaderCreation, t: TransportLevelMarking,
                         f: ForwardingPolicy, r: RedirectInformation, h: HeaderEnrichment,
                         p: Proxying, s: PfcpSmReqFlags) {
            check::roundtrip(&a); check::roundtrip(&o); check::roundtrip(&t); check::roundtrip(&f);
            check::roundtrip(&r); check::roundtrip(&h); check::roundtrip(&p); check::roundtrip(&s);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = CreateFar::decode(&b); let _ = UpdateFar::decode(&b);
            let _ = RemoveFar::decode(&b); let _ = ForwardingParameters::decode(&b);
            let _ = UpdateForwardingParameters::decode(&b);
            let _ = DuplicatingParameters::decode(&b);
            let _ = UpdateDuplicatingParameters::decode(&b);
            let _ = ApplyAction::decode(&b); let _ = OuterHeaderCreation::decode(&b);
            let _ = TransportLevelMarking::decode(&b); let _ = ForwardingPolicy::decode(&b);
            let _ = RedirectInformation::decode(&b); let _ = HeaderEnrichment::decode(&b);
            let _ = Proxying::decode(&b); let _ = PfcpSmReqFlags::decode(&b);
        }

        #[test]
        fn truncated_ohc_is_an_error(o: OuterHeaderCreation, cut: usize) {
            let mut buf = Vec::new();
            o.encode(&mut buf);
            let cut = cut % buf.len();
            prop_assert!(OuterHeaderCreation::decode(&buf[..cut]).is_err());
        }
    }
}
