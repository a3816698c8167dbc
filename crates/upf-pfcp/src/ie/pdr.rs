//! Packet Detection Rules (TS 29.244 §7.5.2.2, §7.5.3.2, §7.5.4.2, §7.5.4.6, §7.5.5.5), the IEs
//! only they carry (SDF Filter, Outer Header Removal, ...) and the PFD management groups (§7.4.3).

use crate::codec::{ie_group, ie_uint, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{
    FTeid, FarId, InterfaceType3gpp, NetworkInstance, PdrId, Precedence, QerId, Qfi,
    SourceInterface, UeIpAddress, UrrId,
};
use crate::tlv::{put_u24, Reader};

ie_group! {
    /// TS 29.244 §7.5.2.2 Create PDR (Table 7.5.2.2-1).
    pub struct CreatePdr {
        pdr_id: M PdrId = 56,
        precedence: M Precedence = 29,
        pdi: M Pdi = 2,
        outer_header_removal: O OuterHeaderRemoval = 95,
        far_id: O FarId = 108,
        urr_ids: N UrrId = 81,
        qer_ids: N QerId = 109,
        activate_predefined_rules: V ActivatePredefinedRules = 106,
        activation_time: O ActivationTime = 163,
        deactivation_time: O DeactivationTime = 164,
    }
}

ie_group! {
    /// TS 29.244 §7.5.2.2 PDI, Packet Detection Information (Table 7.5.2.2-2).
    pub struct Pdi {
        source_interface: M SourceInterface = 20,
        local_f_teid: O FTeid = 21,
        network_instance: O NetworkInstance = 22,
        ue_ip_addresses: N UeIpAddress = 93,
        sdf_filters: N SdfFilter = 23,
        application_id: O ApplicationId = 24,
        ethernet_pdu_session_information: O EthernetPduSessionInformation = 142,
        qfis: N Qfi = 124,
        framed_routes: V FramedRoute = 153,
        framed_routing: O FramedRouting = 154,
        framed_ipv6_routes: V FramedIpv6Route = 155,
        source_interface_type: O InterfaceType3gpp = 160,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.2 Update PDR (Table 7.5.4.2-1).
    pub struct UpdatePdr {
        pdr_id: M PdrId = 56,
        outer_header_removal: O OuterHeaderRemoval = 95,
        precedence: O Precedence = 29,
        pdi: O Pdi = 2,
        far_id: O FarId = 108,
        urr_ids: N UrrId = 81,
        qer_ids: N QerId = 109,
        activate_predefined_rules: V ActivatePredefinedRules = 106,
        deactivate_predefined_rules: V DeactivatePredefinedRules = 107,
        activation_time: O ActivationTime = 163,
        deactivation_time: O DeactivationTime = 164,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.6 Remove PDR (Table 7.5.4.6-1).
    pub struct RemovePdr {
        pdr_id: M PdrId = 56,
    }
}

ie_group! {
    /// TS 29.244 §7.5.3.2 Created PDR (Table 7.5.3.2-1): what the UP function chose for a
    /// CHOOSE F-TEID or UE IP address.
    pub struct CreatedPdr {
        pdr_id: M PdrId = 56,
        local_f_teid: O FTeid = 21,
        ue_ip_addresses: N UeIpAddress = 93,
    }
}

ie_group! {
    /// TS 29.244 §7.5.5.5 Updated PDR (Table 7.5.5.5-1).
    pub struct UpdatedPdr {
        pdr_id: M PdrId = 56,
        local_f_teid: O FTeid = 21,
        ue_ip_addresses: N UeIpAddress = 93,
    }
}

ie_group! {
    /// TS 29.244 §7.4.3.1 Application ID's PFDs (Table 7.4.3.1-2).
    pub struct ApplicationIdsPfds {
        application_id: M ApplicationId = 24,
        pfd_contexts: V PfdContext = 59,
    }
}

ie_group! {
    /// TS 29.244 §7.4.3.1 PFD context (Table 7.4.3.1-3).
    pub struct PfdContext {
        pfd_contents: V PfdContents = 61,
    }
}

ie_uint!(
    /// TS 29.244 §8.2.110 Framed-Routing (RFC 2865 Framed-Routing value).
    FramedRouting(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.121 Activation Time: NTP seconds (RFC 5905) at which the PDR becomes active.
    ActivationTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.122 Deactivation Time: NTP seconds (RFC 5905) at which the PDR stops.
    DeactivationTime(u32)
);

/// Text for property tests: any printable characters, multi-byte UTF-8 included.
#[cfg(test)]
fn text() -> impl proptest::strategy::Strategy<Value = String> {
    "\\PC{0,24}"
}

/// A value that is the whole IE as text.
fn utf8(v: &[u8], what: &'static str) -> Result<String, DecodeError> {
    core::str::from_utf8(v)
        .map(str::to_owned)
        .map_err(|_| DecodeError::incorrect(what))
}

/// Reads a field preceded by its 2-octet length.
fn lv<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let n = r.u16()?;
    r.bytes(usize::from(n))
}

/// Writes a field preceded by its 2-octet length; a field over 65535 octets is cut (never sent
/// by us: a PFCP message fits one UDP datagram).
fn put_lv(out: &mut Vec<u8>, v: &[u8]) {
    let n = u16::try_from(v.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(v.get(..usize::from(n)).unwrap_or(v));
}

/// Defines an IE whose whole value is UTF-8 text.
macro_rules! ie_text {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        #[serde(transparent)]
        pub struct $name(#[cfg_attr(test, proptest(strategy = "text()"))] pub String);

        impl IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, DecodeError> {
                utf8(value, concat!(stringify!($name), " is not UTF-8")).map(Self)
            }
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(self.0.as_bytes());
            }
        }
    };
}

ie_text!(
    /// TS 29.244 §8.2.6 Application ID (an application detection filter in the UP function).
    ApplicationId
);
ie_text!(
    /// TS 29.244 §8.2.72 Activate Predefined Rules: the name of predefined rules to activate.
    ActivatePredefinedRules
);
ie_text!(
    /// TS 29.244 §8.2.73 Deactivate Predefined Rules: the name of predefined rules to deactivate.
    DeactivatePredefinedRules
);
ie_text!(
    /// TS 29.244 §8.2.109 Framed-Route (RFC 2865 Framed-Route value, e.g. "10.1.0.0/16 0.0.0.0 1").
    FramedRoute
);
ie_text!(
    /// TS 29.244 §8.2.111 Framed-IPv6-Route (RFC 3162 Framed-IPv6-Route value).
    FramedIpv6Route
);

/// TS 29.244 §8.2.5 SDF Filter. Every field is optional; a filter with no field at all is legal.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct SdfFilter {
    /// IPFilterRule text (TS 29.212 §5.4.2), e.g. "permit out ip from any to assigned".
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(text())"))]
    pub flow_description: Option<String>,
    /// Type of Service / Traffic Class (high octet) and its mask (low octet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tos_traffic_class: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_parameter_index: Option<u32>,
    /// IPv6 flow label, 24 bits on the wire.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(0u32..1 << 24)"))]
    pub flow_label: Option<u32>,
    /// Identifies the filter for later modification (BID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sdf_filter_id: Option<u32>,
}

const SDF_FD: u8 = 0x01;
const SDF_TTC: u8 = 0x02;
const SDF_SPI: u8 = 0x04;
const SDF_FL: u8 = 0x08;
const SDF_BID: u8 = 0x10;

impl IeValue for SdfFilter {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let [flags, _spare] = r.array()?;
        let has = |bit| flags & bit != 0;
        // §8.2.5: the fields follow in flag order (FD, TTC, SPI, FL, BID), each only if flagged.
        let flow_description = if has(SDF_FD) {
            Some(utf8(lv(&mut r)?, "flow description is not UTF-8")?)
        } else {
            None
        };
        Ok(Self {
            flow_description,
            tos_traffic_class: r.u16_if(has(SDF_TTC))?,
            security_parameter_index: r.u32_if(has(SDF_SPI))?,
            flow_label: has(SDF_FL).then(|| r.u24()).transpose()?,
            sdf_filter_id: r.u32_if(has(SDF_BID))?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        out.push(
            bit(self.flow_description.is_some(), SDF_FD)
                | bit(self.tos_traffic_class.is_some(), SDF_TTC)
                | bit(self.security_parameter_index.is_some(), SDF_SPI)
                | bit(self.flow_label.is_some(), SDF_FL)
                | bit(self.sdf_filter_id.is_some(), SDF_BID),
        );
        out.push(0);
        if let Some(fd) = &self.flow_description {
            put_lv(out, fd.as_bytes());
        }
        if let Some(v) = self.tos_traffic_class {
            out.extend_from_slice(&v.to_be_bytes());
        }
        if let Some(v) = self.security_parameter_index {
            out.extend_from_slice(&v.to_be_bytes());
        }
        if let Some(v) = self.flow_label {
            put_u24(out, v);
        }
        if let Some(v) = self.sdf_filter_id {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// TS 29.244 §8.2.64 Outer Header Removal. The description is kept raw (Table 8.2.64-1 says
/// values 9..=255 are to be read as 1, which is the rule engine's business, not the codec's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct OuterHeaderRemoval {
    pub outer_header_removal_description: u8,
    /// Octet 6, present only when extension headers are to be deleted (and absent in the
    /// one-octet form free5GC and Open5GS send); see [`Self::PDU_SESSION_CONTAINER`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gtpu_extension_header_deletion: Option<u8>,
}

impl OuterHeaderRemoval {
    pub const GTPU_UDP_IPV4: u8 = 0;
    pub const GTPU_UDP_IPV6: u8 = 1;
    pub const UDP_IPV4: u8 = 2;
    pub const UDP_IPV6: u8 = 3;
    pub const IPV4: u8 = 4;
    pub const IPV6: u8 = 5;
    /// GTP-U/UDP/IP: whichever IP version the packet has.
    pub const GTPU_UDP_IP: u8 = 6;
    pub const VLAN_S_TAG: u8 = 7;
    pub const S_TAG_AND_C_TAG: u8 = 8;
    /// GTP-U Extension Header Deletion bit 1: delete the PDU Session Container.
    pub const PDU_SESSION_CONTAINER: u8 = 0x01;
}

impl IeValue for OuterHeaderRemoval {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let outer_header_removal_description = r.u8()?;
        let has_octet_6 = !r.is_empty();
        Ok(Self {
            outer_header_removal_description,
            gtpu_extension_header_deletion: r.u8_if(has_octet_6)?,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.outer_header_removal_description);
        out.extend(self.gtpu_extension_header_deletion);
    }
}

/// TS 29.244 §8.2.102 Ethernet PDU Session Information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct EthernetPduSessionInformation {
    /// ETHI: the PDI identifies all the (DL) Ethernet packets of an Ethernet PDU session.
    pub ethi: bool,
}

impl IeValue for EthernetPduSessionInformation {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        Ok(Self {
            ethi: Reader::new(value).u8()? & 0x01 != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.ethi));
    }
}

/// One entry of the Additional Domain Name and Domain Name Protocol field (§8.2.39).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct DomainNameAndProtocol {
    #[cfg_attr(test, proptest(strategy = "text()"))]
    pub domain_name: String,
    #[cfg_attr(test, proptest(strategy = "text()"))]
    pub domain_name_protocol: String,
}

/// TS 29.244 §8.2.39 PFD Contents: one Packet Flow Description of an application.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct PfdContents {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(text())"))]
    pub flow_description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(text())"))]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(text())"))]
    pub domain_name: Option<String>,
    /// Custom PFD Content: opaque, its format is left to the operator.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        test,
        proptest(
            strategy = "proptest::option::of(proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..8))"
        )
    )]
    pub custom_pfd_content: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(text())"))]
    pub domain_name_protocol: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "proptest::collection::vec(text(), 0..3)"))]
    pub additional_flow_descriptions: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "proptest::collection::vec(text(), 0..3)"))]
    pub additional_urls: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        test,
        proptest(
            strategy = "proptest::collection::vec(proptest::arbitrary::any::<DomainNameAndProtocol>(), 0..3)"
        )
    )]
    pub additional_domain_names_and_protocols: Vec<DomainNameAndProtocol>,
}

// Octet 5 of PFD Contents (§8.2.39), bit 1 first; the fields follow in this order.
const PFD_FD: u8 = 0x01;
const PFD_URL: u8 = 0x02;
const PFD_DN: u8 = 0x04;
const PFD_CP: u8 = 0x08;
const PFD_DNP: u8 = 0x10;
const PFD_AFD: u8 = 0x20;
const PFD_AURL: u8 = 0x40;
const PFD_ADNP: u8 = 0x80;

/// Decodes a length-prefixed text field if `flag` is set.
fn lv_text_if(
    r: &mut Reader<'_>,
    flag: bool,
    what: &'static str,
) -> Result<Option<String>, DecodeError> {
    flag.then(|| utf8(lv(r)?, what)).transpose()
}

/// §8.2.39: each Additional field is one length-prefixed field holding a sequence of
/// length-prefixed subfields. A flag with an empty field yields an empty list.
fn lv_list<T>(
    r: &mut Reader<'_>,
    flag: bool,
    mut item: impl FnMut(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let mut out = Vec::new();
    if flag {
        let mut inner = Reader::new(lv(r)?);
        while !inner.is_empty() {
            out.push(item(&mut inner)?);
        }
    }
    Ok(out)
}

/// Writes a length-prefixed field holding the subfields `write` produces.
fn put_lv_nested(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    put_lv(out, &inner);
}

impl IeValue for PfdContents {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let [flags, _spare] = r.array()?;
        let has = |bit| flags & bit != 0;
        let r = &mut r;
        let text = |r: &mut Reader<'_>| utf8(lv(r)?, "PFD subfield is not UTF-8");
        Ok(Self {
            flow_description: lv_text_if(r, has(PFD_FD), "flow description is not UTF-8")?,
            url: lv_text_if(r, has(PFD_URL), "URL is not UTF-8")?,
            domain_name: lv_text_if(r, has(PFD_DN), "domain name is not UTF-8")?,
            custom_pfd_content: has(PFD_CP).then(|| lv(r).map(<[u8]>::to_vec)).transpose()?,
            domain_name_protocol: lv_text_if(r, has(PFD_DNP), "domain name protocol not UTF-8")?,
            additional_flow_descriptions: lv_list(r, has(PFD_AFD), text)?,
            additional_urls: lv_list(r, has(PFD_AURL), text)?,
            additional_domain_names_and_protocols: lv_list(r, has(PFD_ADNP), |r| {
                Ok(DomainNameAndProtocol {
                    domain_name: text(r)?,
                    domain_name_protocol: text(r)?,
                })
            })?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        out.push(
            bit(self.flow_description.is_some(), PFD_FD)
                | bit(self.url.is_some(), PFD_URL)
                | bit(self.domain_name.is_some(), PFD_DN)
                | bit(self.custom_pfd_content.is_some(), PFD_CP)
                | bit(self.domain_name_protocol.is_some(), PFD_DNP)
                | bit(!self.additional_flow_descriptions.is_empty(), PFD_AFD)
                | bit(!self.additional_urls.is_empty(), PFD_AURL)
                | bit(
                    !self.additional_domain_names_and_protocols.is_empty(),
                    PFD_ADNP,
                ),
        );
        out.push(0);
        for s in [&self.flow_description, &self.url, &self.domain_name]
            .into_iter()
            .flatten()
        {
            put_lv(out, s.as_bytes());
        }
        if let Some(c) = &self.custom_pfd_content {
            put_lv(out, c);
        }
        if let Some(s) = &self.domain_name_protocol {
            put_lv(out, s.as_bytes());
        }
        for list in [&self.additional_flow_descriptions, &self.additional_urls] {
            if !list.is_empty() {
                put_lv_nested(out, |o| list.iter().for_each(|s| put_lv(o, s.as_bytes())));
            }
        }
        if !self.additional_domain_names_and_protocols.is_empty() {
            put_lv_nested(out, |o| {
                for d in &self.additional_domain_names_and_protocols {
                    put_lv(o, d.domain_name.as_bytes());
                    put_lv(o, d.domain_name_protocol.as_bytes());
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::codec::check::hex;
    use crate::tlv::{put_ie, TlvIter};
    use crate::ErrorKind;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// Hex to octets (test vectors are pasted from scapy's `.hex()`).

    #[test]
    fn create_pdr_free5gc_uplink() {
        // An uplink Create PDR shaped as free5GC's SMF sends it, built with scapy 2.8:
        //   IE_CreatePDR(IE_list=[IE_PDR_Id(id=1), IE_Precedence(precedence=255),
        //     IE_PDI(IE_list=[IE_SourceInterface(interface="Access"),
        //       IE_FTEID(CH=1, CHID=1, V4=1, choose_id=1), IE_NetworkInstance(instance="internet"),
        //       IE_UE_IP_Address(V4=1, ipv4="10.60.0.1"),
        //       IE_SDF_Filter(FD=1, flow_description="permit out ip from any to assigned")]),
        //     IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1), IE_URR_Id(id=1),
        //     IE_QER_Id(id=1), IE_QER_Id(id=2)])
        // The IEs are listed in our encoding order (that of Table 7.5.2.2-1, which free5GC also
        // follows) and scapy's encodings of each IE are already canonical for us (1-octet Outer
        // Header Removal, Network Instance as DNS labels), so no adjustment is needed for the
        // re-encoding to be byte-identical.
        let wire = hex(concat!(
            "00010082003800020001001d0004000000ff0002004b0014000100001500020d010016000908696e74",
            "65726e6574005d0005020a3c000100170026010000227065726d6974206f75742069702066726f6d20",
            "616e7920746f2061737369676e6564005f000100006c0004000000010051000400000001006d000400",
            "000001006d000400000002"
        ));
        let mut ies = TlvIter::new(&wire);
        let ie = ies.next().unwrap().unwrap();
        assert!(ies.next().is_none());
        assert_eq!(ie.ie_type, 1);
        let pdr = CreatePdr::decode(ie.value).unwrap();

        assert_eq!(pdr.pdr_id, PdrId(1));
        assert_eq!(pdr.precedence, Precedence(255));
        let pdi = &pdr.pdi;
        assert_eq!(pdi.source_interface, SourceInterface::ACCESS);
        assert_eq!(
            pdi.local_f_teid,
            Some(FTeid::Choose {
                ipv4: true,
                ipv6: false,
                choose_id: Some(1)
            })
        );
        assert_eq!(pdi.network_instance.as_ref().unwrap().0, "internet");
        assert_eq!(pdi.ue_ip_addresses.len(), 1);
        let ue = &pdi.ue_ip_addresses[0];
        assert_eq!(ue.ipv4, Some(Ipv4Addr::new(10, 60, 0, 1)));
        assert!(!ue.is_destination, "uplink: the UE address is the source");
        assert_eq!(
            &pdi.sdf_filters[..],
            &[SdfFilter {
                flow_description: Some("permit out ip from any to assigned".into()),
                ..SdfFilter::default()
            }]
        );
        assert!(pdi.application_id.is_none() && pdi.qfis.is_empty());
        assert_eq!(
            pdr.outer_header_removal,
            Some(OuterHeaderRemoval {
                outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV4,
                gtpu_extension_header_deletion: None
            })
        );
        assert_eq!(pdr.far_id, Some(FarId(1)));
        assert_eq!(&pdr.urr_ids[..], &[UrrId(1)]);
        assert_eq!(&pdr.qer_ids[..], &[QerId(1), QerId(2)]);
        assert!(pdr.activate_predefined_rules.is_empty());
        assert!(pdr.activation_time.is_none() && pdr.deactivation_time.is_none());

        let mut out = Vec::new();
        put_ie(&mut out, 1, |o| pdr.encode(o));
        assert_eq!(out, wire);
    }

    #[test]
    fn sdf_filter_vectors() {
        // scapy 2.8: IE_SDF_Filter(FD=1, flow_description="permit out ip from any to assigned")
        let f = check::canonical::<SdfFilter>(&hex(
            "010000227065726d6974206f75742069702066726f6d20616e7920746f2061737369676e6564",
        ));
        assert_eq!(
            f.flow_description.as_deref(),
            Some("permit out ip from any to assigned")
        );
        // scapy 2.8: IE_SDF_Filter() -- no field at all is a legal (match-all) filter.
        assert_eq!(check::canonical::<SdfFilter>(&[0, 0]), SdfFilter::default());
        // scapy 2.8: IE_SDF_Filter(TTC=1, tos_traffic_class=0x2e, tos_traffic_mask=0xfc, SPI=1,
        //   security_parameter_index=0x01020304, FL=1, flow_label=0x0abcde)
        let f = check::canonical::<SdfFilter>(&hex("0e002efc010203040abcde"));
        assert_eq!(
            f,
            SdfFilter {
                flow_description: None,
                tos_traffic_class: Some(0x2efc),
                security_parameter_index: Some(0x0102_0304),
                flow_label: Some(0x0a_bcde),
                sdf_filter_id: None,
            }
        );
        // scapy 2.8: IE_SDF_Filter(FD=1, flow_description="permit out 17 from 10.0.0.1 to any",
        //   TTC=1, tos_traffic_class=1, tos_traffic_mask=2, BID=1, sdf_filter_id=7)
        let f = check::canonical::<SdfFilter>(&hex(concat!(
            "130000227065726d6974206f75742031372066726f6d2031302e302e302e3120746f20616e79",
            "010200000007"
        )));
        assert_eq!(f.tos_traffic_class, Some(0x0102));
        assert_eq!(f.sdf_filter_id, Some(7));
    }

    #[test]
    fn sdf_filter_leniency_and_errors() {
        // Only ToS / only SPI / only flow label.
        assert_eq!(
            check::canonical::<SdfFilter>(&[0x02, 0, 0x2e, 0xfc]).tos_traffic_class,
            Some(0x2efc)
        );
        assert_eq!(
            check::canonical::<SdfFilter>(&[0x04, 0, 0, 0, 1, 0]).security_parameter_index,
            Some(256)
        );
        assert_eq!(
            check::canonical::<SdfFilter>(&[0x08, 0, 0x0f, 0xff, 0xff]).flow_label,
            Some(0xf_ffff)
        );
        // Spare bits set and trailing octets are ignored (§7.6.2 / §8.1.1).
        let f = SdfFilter::decode(&[0xe4, 0xff, 0, 0, 0, 9, 0xaa]).unwrap();
        assert_eq!(f.security_parameter_index, Some(9));
        // Flow description that is not UTF-8.
        let e = SdfFilter::decode(&[0x01, 0, 0, 2, 0xff, 0xfe]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::IncorrectValue);
        // Flow description length past the end; flag set without its field; no spare octet.
        for bad in [&[0x01, 0, 0, 9, b'p'][..], &[0x08, 0, 1, 2], &[0x00]] {
            assert_eq!(
                SdfFilter::decode(bad).unwrap_err().kind(),
                ErrorKind::InvalidLength
            );
        }
    }

    #[test]
    fn outer_header_removal_forms() {
        // scapy 2.8: IE_OuterHeaderRemoval(header=0) -- the 1-octet form free5GC and Open5GS send.
        let o = check::canonical::<OuterHeaderRemoval>(&[0x00]);
        assert_eq!(o.outer_header_removal_description, 0);
        assert_eq!(o.gtpu_extension_header_deletion, None);
        // scapy 2.8: IE_OuterHeaderRemoval(header=6) -- GTP-U/UDP/IP, either IP version.
        let o = check::canonical::<OuterHeaderRemoval>(&[0x06]);
        assert_eq!(
            o.outer_header_removal_description,
            OuterHeaderRemoval::GTPU_UDP_IP
        );
        // scapy 2.8: IE_OuterHeaderRemoval(header=0, length=2, pdu_session_container=1)
        let o = check::canonical::<OuterHeaderRemoval>(&[0x00, 0x01]);
        assert_eq!(
            o.gtpu_extension_header_deletion,
            Some(OuterHeaderRemoval::PDU_SESSION_CONTAINER)
        );
        // Octets beyond octet 6 are ignored; an empty value is an error.
        assert_eq!(
            OuterHeaderRemoval::decode(&[1, 0, 7])
                .unwrap()
                .outer_header_removal_description,
            1
        );
        assert!(OuterHeaderRemoval::decode(&[]).is_err());
    }

    #[test]
    fn small_ie_vectors() {
        // scapy 2.8: IE_EthernetPDUSessionInformation(ETHI=1)
        assert!(check::canonical::<EthernetPduSessionInformation>(&[0x01]).ethi);
        assert!(!EthernetPduSessionInformation::decode(&[0xfe]).unwrap().ethi);
        // scapy 2.8: IE_ApplicationId(id="app1"), IE_ActivatePredefinedRules(name="rule-a"),
        // IE_DeactivatePredefinedRules(name="rule-a")
        assert_eq!(check::canonical::<ApplicationId>(b"app1").0, "app1");
        assert_eq!(
            check::canonical::<ActivatePredefinedRules>(b"rule-a").0,
            "rule-a"
        );
        assert_eq!(
            check::canonical::<DeactivatePredefinedRules>(b"rule-a").0,
            "rule-a"
        );
        assert_eq!(
            ApplicationId::decode(&[0xc3]).unwrap_err().kind(),
            ErrorKind::IncorrectValue
        );
        // scapy 2.8: IE_FramedRoute(framed_route="10.1.0.0/16 10.0.0.1 1"),
        // IE_FramedIPv6Route(framed_ipv6_route="2001:db8::/32")
        assert_eq!(
            check::canonical::<FramedRoute>(b"10.1.0.0/16 10.0.0.1 1").0,
            "10.1.0.0/16 10.0.0.1 1"
        );
        assert_eq!(
            check::canonical::<FramedIpv6Route>(b"2001:db8::/32").0,
            "2001:db8::/32"
        );
        // scapy 2.8 models Framed-Routing as a string; IE_FramedRouting(framed_routing=b"\0\0\0\3")
        // gives the 4-octet integer of §8.2.110.
        assert_eq!(
            check::canonical::<FramedRouting>(&[0, 0, 0, 3]),
            FramedRouting(3)
        );
        // Activation/Deactivation Time: scapy 2.8 lacks them; hand-built per §8.2.121/§8.2.122
        // (NTP seconds 0xe8000000 = 2023-05-13).
        assert_eq!(
            check::canonical::<ActivationTime>(&[0xe8, 0, 0, 0]),
            ActivationTime(0xe800_0000)
        );
        assert_eq!(
            check::canonical::<DeactivationTime>(&[0xe8, 0, 0, 1]),
            DeactivationTime(0xe800_0001)
        );
        assert!(ActivationTime::decode(&[1, 2, 3]).is_err());
    }

    #[test]
    fn pfd_contents_vectors() {
        // scapy 2.8: IE_PFDContents(FD=1, flow="permit out ip from 192.0.2.1 80 to assigned",
        //   URL=1, url="http://example.com/a")
        let p = check::canonical::<PfdContents>(&hex(concat!(
            "0300002b7065726d6974206f75742069702066726f6d203139322e302e322e3120383020746f2061",
            "737369676e65640014687474703a2f2f6578616d706c652e636f6d2f61"
        )));
        assert_eq!(
            p.flow_description.as_deref(),
            Some("permit out ip from 192.0.2.1 80 to assigned")
        );
        assert_eq!(p.url.as_deref(), Some("http://example.com/a"));
        // scapy 2.8: IE_PFDContents(DN=1, domain="example.com", DNP=1, dnp="tls_sni", CP=1,
        //   custom=b"\x01\x02") -- wire order DN, CP, DNP although DNP is the higher bit.
        let p = check::canonical::<PfdContents>(&hex(
            "1c00000b6578616d706c652e636f6d000201020007746c735f736e69",
        ));
        assert_eq!(p.domain_name.as_deref(), Some("example.com"));
        assert_eq!(p.custom_pfd_content.as_deref(), Some(&[1u8, 2][..]));
        assert_eq!(p.domain_name_protocol.as_deref(), Some("tls_sni"));
        // scapy 2.8 carries the Additional fields as opaque strings; given the §8.2.39 subfield
        // layout: IE_PFDContents(AFD=1, additional_flow=b"\0\3abc\0\2de", AURL=1,
        //   additional_url=b"\0\1u", ADNP=1, additional_dn_dnp=b"\0\1d\0\1p")
        let p = check::canonical::<PfdContents>(&hex(
            "e000000900036162630002646500030001750006000164000170",
        ));
        assert_eq!(p.additional_flow_descriptions, ["abc", "de"]);
        assert_eq!(p.additional_urls, ["u"]);
        assert_eq!(
            p.additional_domain_names_and_protocols,
            [DomainNameAndProtocol {
                domain_name: "d".into(),
                domain_name_protocol: "p".into()
            }]
        );
        // A flagged but empty Additional field decodes as an empty list.
        assert_eq!(
            PfdContents::decode(&[0x20, 0, 0, 0]).unwrap(),
            PfdContents::default()
        );
        // A subfield running past its field, an ADNP entry without its protocol, bad UTF-8.
        for bad in [
            &hex("200000030005ab")[..],
            &hex("80000003000164")[..],
            &hex("01000001ff")[..],
        ] {
            assert!(PfdContents::decode(bad).is_err(), "{bad:02x?}");
        }
    }

    #[test]
    fn small_groups_vectors() {
        // scapy 2.8: IE_RemovePDR(IE_list=[IE_PDR_Id(id=3)])
        assert_eq!(
            check::canonical::<RemovePdr>(&hex("003800020003")).pdr_id,
            PdrId(3)
        );
        // scapy 2.8: IE_CreatedPDR(IE_list=[IE_PDR_Id(id=1),
        //   IE_FTEID(V4=1, TEID=0x100, ipv4="192.0.2.10")])
        let c = check::canonical::<CreatedPdr>(&hex("003800020001001500090100000100c000020a"));
        assert_eq!(
            c.local_f_teid,
            Some(FTeid::Assigned {
                teid: 0x100,
                ipv4: Some(Ipv4Addr::new(192, 0, 2, 10)),
                ipv6: None
            })
        );
        // Updated PDR (type 256) has the same body; scapy 2.8 has no class for it.
        assert_eq!(
            check::canonical::<UpdatedPdr>(&hex("003800020001001500090100000100c000020a")).pdr_id,
            PdrId(1)
        );
        // scapy 2.8: IE_ApplicationID_PFDs(IE_list=[IE_ApplicationId(id="app1"),
        //   IE_PFDContext(IE_list=[IE_PFDContents(FD=1,
        //     flow="permit out ip from 192.0.2.1 to assigned")])])
        let a = check::canonical::<ApplicationIdsPfds>(&hex(concat!(
            "0018000461707031003b0030003d002c010000287065726d6974206f75742069702066726f6d2031",
            "39322e302e322e3120746f2061737369676e6564"
        )));
        assert_eq!(a.application_id.0, "app1");
        assert_eq!(
            a.pfd_contexts[0].pfd_contents[0]
                .flow_description
                .as_deref(),
            Some("permit out ip from 192.0.2.1 to assigned")
        );
    }

    #[test]
    fn group_errors_name_the_ie() {
        // Create PDR without PDI: mandatory IE missing, named.
        let e = CreatePdr::decode(&hex("003800020001001d0004000000ff")).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::MissingMandatory, Some(2))
        );
        // A bad SDF filter inside the PDI: the SDF Filter is the offending IE, the PDI its parent.
        let e = CreatePdr::decode(&hex(
            "003800020001001d0004000000ff0002000c001400010000170003010000",
        ))
        .unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::InvalidLength, Some(23))
        );
        assert_eq!(e.path(), &[2]);
        // Update PDR needs only the PDR ID.
        let u = check::canonical::<UpdatePdr>(&hex("003800020007"));
        assert!(u.pdi.is_none() && u.precedence.is_none());
    }

    proptest! {
        #[test]
        fn leaf_roundtrip(
            s: SdfFilter, o: OuterHeaderRemoval, e: EthernetPduSessionInformation, p: PfdContents,
            a: ApplicationId, b: ActivatePredefinedRules, c: DeactivatePredefinedRules,
            d: FramedRoute, f: FramedIpv6Route, g: FramedRouting, h: ActivationTime,
            i: DeactivationTime,
        ) {
            check::roundtrip(&s); check::roundtrip(&o); check::roundtrip(&e); check::roundtrip(&p);
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
            check::roundtrip(&f); check::roundtrip(&g); check::roundtrip(&h); check::roundtrip(&i);
        }

        #[test]
        fn group_roundtrip(
            c: CreatePdr, pdi: Pdi, u: UpdatePdr, r: RemovePdr, cd: CreatedPdr,
            ud: UpdatedPdr, a: ApplicationIdsPfds, x: PfdContext,
        ) {
            check::roundtrip(&c); check::roundtrip(&pdi); check::roundtrip(&u);
            check::roundtrip(&r); check::roundtrip(&cd); check::roundtrip(&ud);
            check::roundtrip(&a); check::roundtrip(&x);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = SdfFilter::decode(&b); let _ = OuterHeaderRemoval::decode(&b);
            let _ = EthernetPduSessionInformation::decode(&b); let _ = PfdContents::decode(&b);
            let _ = ApplicationId::decode(&b); let _ = ActivatePredefinedRules::decode(&b);
            let _ = DeactivatePredefinedRules::decode(&b); let _ = FramedRoute::decode(&b);
            let _ = FramedIpv6Route::decode(&b); let _ = FramedRouting::decode(&b);
            let _ = ActivationTime::decode(&b); let _ = DeactivationTime::decode(&b);
            let _ = CreatePdr::decode(&b); let _ = Pdi::decode(&b); let _ = UpdatePdr::decode(&b);
            let _ = RemovePdr::decode(&b); let _ = CreatedPdr::decode(&b);
            let _ = UpdatedPdr::decode(&b); let _ = ApplicationIdsPfds::decode(&b);
            let _ = PfdContext::decode(&b);
        }

        /// Every truncation of a valid encoding decodes or fails cleanly.
        #[test]
        fn truncations_never_panic(s: SdfFilter, p: PfdContents, c: CreatePdr) {
            let mut bufs = [Vec::new(), Vec::new(), Vec::new()];
            s.encode(&mut bufs[0]); p.encode(&mut bufs[1]); c.encode(&mut bufs[2]);
            for (k, buf) in bufs.iter().enumerate() {
                for n in 0..buf.len() {
                    let cut = &buf[..n];
                    match k {
                        0 => { let _ = SdfFilter::decode(cut); }
                        1 => { let _ = PfdContents::decode(cut); }
                        _ => { let _ = CreatePdr::decode(cut); }
                    }
                }
            }
        }
    }
}
