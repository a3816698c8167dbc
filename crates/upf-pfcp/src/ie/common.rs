//! IEs shared by several families: rule identifiers, interfaces, Network Instance, F-TEID,
//! UE IP Address.

use crate::codec::{ie_uint, IeValue};
use crate::error::DecodeError;
use crate::tlv::Reader;
use compact_str::CompactString;
use std::net::{Ipv4Addr, Ipv6Addr};

ie_uint!(
    /// TS 29.244 §8.2.36 PDR ID (rule id, 16 bits).
    PdrId(u16)
);
ie_uint!(
    /// TS 29.244 §8.2.74 FAR ID; bit 32 set means a predefined FAR.
    FarId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.75 QER ID; bit 32 set means a predefined QER.
    QerId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.54 URR ID; bit 32 set means a predefined URR.
    UrrId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.90 BAR ID (8 bits).
    BarId(u8)
);
ie_uint!(
    /// TS 29.244 §8.2.11 Precedence: lower value, higher precedence.
    Precedence(u32)
);

/// TS 29.244 §8.2.89 QFI: a 6-bit QoS Flow Identifier in the low bits of one octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct Qfi(#[cfg_attr(test, proptest(strategy = "0u8..64"))] pub u8);

impl IeValue for Qfi {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        Ok(Self(Reader::new(value).u8()? & 0x3f))
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.0 & 0x3f);
    }
}

/// Defines a one-octet enumerated IE kept as its raw value (so that values from later releases
/// pass through), with named constants for the values the specification defines.
macro_rules! ie_enum_u8 {
    ($(#[$meta:meta])* $name:ident, mask = $mask:literal { $($(#[$cm:meta])* $c:ident = $v:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(pub u8);

        #[cfg(test)]
        impl proptest::arbitrary::Arbitrary for $name {
            type Parameters = ();
            type Strategy = proptest::strategy::Map<core::ops::RangeInclusive<u8>, fn(u8) -> Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                proptest::strategy::Strategy::prop_map(0..=$mask, Self as fn(u8) -> Self)
            }
        }

        impl $name {
            $($(#[$cm])* pub const $c: Self = Self($v);)*
        }

        impl IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, DecodeError> {
                Ok(Self(Reader::new(value).u8()? & $mask))
            }
            fn encode(&self, out: &mut Vec<u8>) {
                out.push(self.0 & $mask);
            }
        }
    };
}
pub(crate) use ie_enum_u8;

ie_enum_u8!(
    /// TS 29.244 §8.2.2 Source Interface (4 bits).
    SourceInterface, mask = 0x0f {
        ACCESS = 0,
        CORE = 1,
        /// SGi-LAN / N6-LAN
        SGI_LAN = 2,
        CP_FUNCTION = 3,
        VN_INTERNAL = 4,
    }
);

ie_enum_u8!(
    /// TS 29.244 §8.2.24 Destination Interface (4 bits).
    DestinationInterface, mask = 0x0f {
        ACCESS = 0,
        CORE = 1,
        /// SGi-LAN / N6-LAN
        SGI_LAN = 2,
        CP_FUNCTION = 3,
        LI_FUNCTION = 4,
        VN_INTERNAL = 5,
    }
);

ie_enum_u8!(
    /// TS 29.244 §8.2.118 3GPP Interface Type (6 bits).
    InterfaceType3gpp, mask = 0x3f {
        S1_U = 0,
        S5_S8_U = 1,
        S4_U = 2,
        S11_U = 3,
        S12_U = 4,
        GN_GP_U = 5,
        S2A_U = 6,
        S2B_U = 7,
        ENODEB_DL_DATA_FORWARDING = 8,
        ENODEB_UL_DATA_FORWARDING = 9,
        SGW_UPF_DL_DATA_FORWARDING = 10,
        N3_3GPP_ACCESS = 11,
        N3_TRUSTED_NON_3GPP_ACCESS = 12,
        N3_UNTRUSTED_NON_3GPP_ACCESS = 13,
        N3_DATA_FORWARDING = 14,
        N9 = 15,
        SGI = 16,
        N6 = 17,
        N19 = 18,
        S8_U = 19,
        GP_U = 20,
    }
);

/// A name carried as DNS labels (TS 23.003 §9.1, APN / FQDN encoding), as a dotted string.
/// Several SMFs send the plain text instead; a value that does not parse as labels is taken as
/// text, so both forms decode to the same string.
pub(crate) fn decode_dns_name(v: &[u8]) -> Result<CompactString, DecodeError> {
    if let Some(name) = dns_labels(v) {
        return Ok(name);
    }
    match core::str::from_utf8(v) {
        Ok(s) if !s.chars().any(char::is_control) => Ok(s.into()),
        _ => Err(DecodeError::incorrect(
            "name is neither DNS labels nor printable UTF-8 text",
        )),
    }
}

/// `v` read as a non-empty sequence of DNS labels, dotted; `None` if it is not one.
/// The dotted name is `v` without its first length octet and with every other length octet
/// replaced by a dot, so it is built by one copy, with no per-label string pushes.
fn dns_labels(v: &[u8]) -> Option<CompactString> {
    let (&first, dotted) = v.split_first()?;
    let mut rest = v;
    while let [len, tail @ ..] = rest {
        let (label, tail) = tail.split_at_checked(usize::from(*len))?;
        if !is_label(label) {
            return None;
        }
        rest = tail;
    }
    let dot = |out: &mut [u8]| {
        let mut at = usize::from(first);
        while let Some(len) = out.get_mut(at) {
            let n = usize::from(*len);
            *len = b'.';
            at += 1 + n;
        }
    };
    // Labels are printable ASCII, so the UTF-8 checks below cannot fail.
    const INLINE: usize = core::mem::size_of::<CompactString>();
    if dotted.len() <= INLINE {
        let mut buf = [0u8; INLINE];
        let out = &mut buf[..dotted.len()];
        out.copy_from_slice(dotted);
        dot(out);
        core::str::from_utf8(out).ok().map(CompactString::new)
    } else {
        let mut out = dotted.to_vec();
        dot(&mut out);
        String::from_utf8(out).ok().map(CompactString::from)
    }
}

/// A DNS label (RFC 1035 §2.3.4: 1..=63 octets), restricted to printable ASCII without dots.
fn is_label(label: &[u8]) -> bool {
    (1..=63).contains(&label.len()) && label.iter().all(|b| b.is_ascii_graphic() && *b != b'.')
}

/// Encodes a dotted name as DNS labels; a name that labels cannot carry (empty labels, spaces,
/// non-ASCII, labels over 63 octets — possible only if it was received as text) goes back out
/// as the text it came in as.
pub(crate) fn encode_dns_name(name: &str, out: &mut Vec<u8>) {
    if !name.is_empty() && name.split('.').all(|l| is_label(l.as_bytes())) {
        for label in name.split('.') {
            out.push(u8::try_from(label.len()).unwrap_or(63));
            out.extend_from_slice(label.as_bytes());
        }
    } else {
        out.extend_from_slice(name.as_bytes());
    }
}

#[cfg(test)]
pub(crate) fn dns_name_strategy() -> impl proptest::strategy::Strategy<Value = CompactString> {
    use proptest::strategy::Strategy;
    "[a-z0-9][a-z0-9-]{0,9}(\\.[a-z0-9][a-z0-9-]{0,9}){0,3}".prop_map(CompactString::from)
}

/// TS 29.244 §8.2.4 Network Instance (a DNN/APN or an operator-chosen name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct NetworkInstance(
    #[cfg_attr(test, proptest(strategy = "dns_name_strategy()"))] pub CompactString,
);

impl IeValue for NetworkInstance {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        decode_dns_name(value).map(Self)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        encode_dns_name(&self.0, out);
    }
}

/// TS 29.244 §8.2.3 F-TEID: an assigned TEID with its address(es), or a request that the UP
/// function choose one (CH), optionally shared by PDRs with the same CHOOSE ID (CHID).
/// The default asks for an IPv4 TEID to be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FTeid {
    Assigned {
        teid: u32,
        ipv4: Option<Ipv4Addr>,
        ipv6: Option<Ipv6Addr>,
    },
    Choose {
        ipv4: bool,
        ipv6: bool,
        choose_id: Option<u8>,
    },
}

impl Default for FTeid {
    fn default() -> Self {
        Self::Choose {
            ipv4: true,
            ipv6: false,
            choose_id: None,
        }
    }
}

const V4: u8 = 0x01;
const V6: u8 = 0x02;
const CH: u8 = 0x04;
const CHID: u8 = 0x08;

impl IeValue for FTeid {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let flags = r.u8()?;
        if flags & CH != 0 {
            // §8.2.3: with CH set, TEID and addresses are absent; V4/V6 ask for an address family.
            let choose_id = r.u8_if(flags & CHID != 0)?;
            return Ok(Self::Choose {
                ipv4: flags & V4 != 0,
                ipv6: flags & V6 != 0,
                choose_id,
            });
        }
        if flags & CHID != 0 {
            return Err(DecodeError::incorrect("CHID set without CH"));
        }
        let teid = r.u32()?;
        let ipv4 = r.ipv4_if(flags & V4 != 0)?;
        let ipv6 = r.ipv6_if(flags & V6 != 0)?;
        Ok(Self::Assigned { teid, ipv4, ipv6 })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Assigned { teid, ipv4, ipv6 } => {
                out.push(if ipv4.is_some() { V4 } else { 0 } | if ipv6.is_some() { V6 } else { 0 });
                out.extend_from_slice(&teid.to_be_bytes());
                if let Some(a) = ipv4 {
                    out.extend_from_slice(&a.octets());
                }
                if let Some(a) = ipv6 {
                    out.extend_from_slice(&a.octets());
                }
            }
            Self::Choose {
                ipv4,
                ipv6,
                choose_id,
            } => {
                let flags = CH | if ipv4 { V4 } else { 0 } | if ipv6 { V6 } else { 0 };
                out.push(flags | if choose_id.is_some() { CHID } else { 0 });
                out.extend(choose_id);
            }
        }
    }
}

/// TS 29.244 §8.2.62 UE IP Address: an address (source or destination of the PDR's packets),
/// or a request that the UP function allocate one (CHV4 / CHV6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct UeIpAddress {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    /// S/D: the address is the destination (downlink PDRs) rather than the source.
    pub is_destination: bool,
    /// CHV4: the UP function shall assign an IPv4 address.
    pub choose_ipv4: bool,
    /// CHV6: the UP function shall assign an IPv6 address (or prefix).
    pub choose_ipv6: bool,
    /// IPv6D: number of bits of prefix delegation (present when a prefix other than /64 is meant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix_delegation_bits: Option<u8>,
    /// IP6PL: IPv6 prefix length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix_length: Option<u8>,
}

/// Generated values are legal ones: a choose flag never comes with an address of its family.
#[cfg(test)]
impl proptest::arbitrary::Arbitrary for UeIpAddress {
    type Parameters = ();
    type Strategy = proptest::strategy::BoxedStrategy<Self>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        use proptest::prelude::*;
        (
            any::<(Option<Ipv4Addr>, Option<Ipv6Addr>, bool, bool, bool)>(),
            any::<(Option<u8>, Option<u8>)>(),
        )
            .prop_map(|((ipv4, ipv6, sd, c4, c6), (pd, pl))| Self {
                ipv4,
                ipv6,
                is_destination: sd,
                choose_ipv4: c4 && ipv4.is_none(),
                choose_ipv6: c6 && ipv6.is_none(),
                ipv6_prefix_delegation_bits: pd,
                ipv6_prefix_length: pl,
            })
            .boxed()
    }
}

const UE_V6: u8 = 0x01;
const UE_V4: u8 = 0x02;
const UE_SD: u8 = 0x04;
const UE_IPV6D: u8 = 0x08;
const UE_CHV4: u8 = 0x10;
const UE_CHV6: u8 = 0x20;
const UE_IP6PL: u8 = 0x40;

impl IeValue for UeIpAddress {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let has = |bit| f & bit != 0;
        // §8.2.62: an address is present when its V flag is set and its CH flag is not.
        let ipv4 = r.ipv4_if(has(UE_V4) && !has(UE_CHV4))?;
        let ipv6 = r.ipv6_if(has(UE_V6) && !has(UE_CHV6))?;
        Ok(Self {
            ipv4,
            ipv6,
            is_destination: has(UE_SD),
            choose_ipv4: has(UE_CHV4),
            choose_ipv6: has(UE_CHV6),
            ipv6_prefix_delegation_bits: r.u8_if(has(UE_IPV6D))?,
            ipv6_prefix_length: r.u8_if(has(UE_IP6PL))?,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        // A choose flag and an address of the same family cannot both be sent: the address wins.
        let chv4 = self.choose_ipv4 && self.ipv4.is_none();
        let chv6 = self.choose_ipv6 && self.ipv6.is_none();
        out.push(
            bit(self.ipv4.is_some(), UE_V4)
                | bit(self.ipv6.is_some(), UE_V6)
                | bit(self.is_destination, UE_SD)
                | bit(chv4, UE_CHV4)
                | bit(chv6, UE_CHV6)
                | bit(self.ipv6_prefix_delegation_bits.is_some(), UE_IPV6D)
                | bit(self.ipv6_prefix_length.is_some(), UE_IP6PL),
        );
        if let Some(a) = self.ipv4 {
            out.extend_from_slice(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            out.extend_from_slice(&a.octets());
        }
        out.extend(self.ipv6_prefix_delegation_bits);
        out.extend(self.ipv6_prefix_length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use proptest::prelude::*;

    #[test]
    fn vectors() {
        // Values as scapy 2.8 IE_PDR_ID / IE_FAR_Id / IE_QFI encode them.
        assert_eq!(check::canonical::<PdrId>(&[0x00, 0x01]), PdrId(1));
        assert_eq!(check::canonical::<FarId>(&[0, 0, 0, 7]), FarId(7));
        assert_eq!(check::canonical::<Qfi>(&[9]), Qfi(9));
        assert!(PdrId::decode(&[1]).is_err());
    }

    #[test]
    fn f_teid_and_ue_ip_vectors() {
        // scapy 2.8: bytes(IE_FTEID(V4=1, TEID=0x11223344, ipv4="10.0.0.1"))[4:]
        let f = check::canonical::<FTeid>(&[0x01, 0x11, 0x22, 0x33, 0x44, 10, 0, 0, 1]);
        assert_eq!(
            f,
            FTeid::Assigned {
                teid: 0x1122_3344,
                ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
                ipv6: None
            }
        );
        // scapy 2.8: bytes(IE_FTEID(CH=1, CHID=1, V4=1, choose_id=7))[4:]
        let f = check::canonical::<FTeid>(&[0x0d, 7]);
        assert_eq!(
            f,
            FTeid::Choose {
                ipv4: true,
                ipv6: false,
                choose_id: Some(7)
            }
        );
        assert!(FTeid::decode(&[0x01, 0, 0, 0, 1, 10]).is_err());
        // scapy 2.8: bytes(IE_UE_IP_Address(V4=1, SD=1, ipv4="10.60.0.1"))[4:]
        let u = check::canonical::<UeIpAddress>(&[0x06, 10, 60, 0, 1]);
        assert_eq!(u.ipv4, Some(Ipv4Addr::new(10, 60, 0, 1)));
        assert!(u.is_destination);
        // CHV4 with V4: allocation request, no address octets follow.
        let u = UeIpAddress::decode(&[0x12]).unwrap();
        assert!(u.choose_ipv4 && u.ipv4.is_none());
    }

    #[test]
    fn network_instance_accepts_labels_and_text() {
        assert_eq!(
            check::canonical::<NetworkInstance>(b"\x08internet").0,
            "internet"
        );
        assert_eq!(NetworkInstance::decode(b"internet").unwrap().0, "internet");
        assert_eq!(
            check::canonical::<NetworkInstance>(b"\x03ims\x03mnc").0,
            "ims.mnc"
        );
        assert!(NetworkInstance::decode(&[0xff, 0xfe]).is_err());
        // Found by fuzz/pfcp_roundtrip: text that labels cannot carry goes back out as text,
        // and control characters are refused rather than passed on.
        assert_eq!(check::canonical::<NetworkInstance>(b" out 6 ").0, " out 6 ");
        assert!(NetworkInstance::decode(b"\x09\x07 out 6 ").is_err());
        let long = [&[64u8][..], &[b'a'; 64]].concat();
        // A 64-octet "label" is no label (RFC 1035: at most 63): the octets are taken as text.
        assert_eq!(check::canonical::<NetworkInstance>(&long).0.len(), 65);
    }

    /// The label walk as first written (a string pushed label by label): the reference the
    /// one-copy `dns_labels` is checked against.
    fn dns_name_reference(v: &[u8]) -> Result<CompactString, DecodeError> {
        let as_labels = || -> Option<CompactString> {
            let mut out = CompactString::default();
            let mut rest = v;
            while let [len, tail @ ..] = rest {
                let (label, tail) = tail.split_at_checked(usize::from(*len))?;
                if !is_label(label) {
                    return None;
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(core::str::from_utf8(label).ok()?);
                rest = tail;
            }
            Some(out)
        };
        match as_labels() {
            Some(s) if !v.is_empty() => Ok(s),
            _ => match core::str::from_utf8(v) {
                Ok(s) if !s.chars().any(char::is_control) => Ok(s.into()),
                _ => Err(DecodeError::incorrect(
                    "name is neither DNS labels nor printable UTF-8 text",
                )),
            },
        }
    }

    #[test]
    fn dns_names_short_and_long() {
        for name in [
            "a",
            "internet",
            "ims.mnc001.mcc001.gprs",
            "a.b.c.d.e.f.g.h.i.j.k.l",
            "x",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([("l".repeat(63) + ".").repeat(3) + "end"])
        {
            let mut wire = Vec::new();
            encode_dns_name(&name, &mut wire);
            assert_eq!(decode_dns_name(&wire).unwrap(), name.as_str());
            assert_eq!(decode_dns_name(&wire), dns_name_reference(&wire));
        }
    }

    proptest! {
        #[test]
        fn dns_name_decode_matches_reference(b: Vec<u8>) {
            prop_assert_eq!(decode_dns_name(&b), dns_name_reference(&b));
        }

        #[test]
        fn dns_name_labels_match_reference(
            labels in proptest::collection::vec("[!-~]{0,64}", 0..6),
        ) {
            let mut b = Vec::new();
            for l in &labels {
                b.push(u8::try_from(l.len()).unwrap());
                b.extend_from_slice(l.as_bytes());
            }
            prop_assert_eq!(decode_dns_name(&b), dns_name_reference(&b));
        }

        #[test]
        fn shared_roundtrip(n: NetworkInstance, f: FTeid, u: UeIpAddress, s: SourceInterface, d: DestinationInterface, t: InterfaceType3gpp) {
            check::roundtrip(&n); check::roundtrip(&f); check::roundtrip(&s); check::roundtrip(&d); check::roundtrip(&t);
            check::roundtrip(&u);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = FTeid::decode(&b); let _ = UeIpAddress::decode(&b); let _ = NetworkInstance::decode(&b);
        }

        #[test]
        fn roundtrip(a: PdrId, b: FarId, c: QerId, d: UrrId, e: BarId, f: Precedence, q: Qfi) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
            check::roundtrip(&e); check::roundtrip(&f); check::roundtrip(&q);
        }
    }
}
