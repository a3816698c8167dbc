//! Identity IEs: FQ-CSID, User ID, APN/DNN, S-NSSAI, and the SMF set, session retention and
//! UE IP address pool IEs of the association messages.

use super::{bit, decode_fqdn, put_addrs, put_len16, put_len8, IpVersion, A_V4, A_V6};
use crate::codec::{ie_group, IeValue, Multi};
use crate::error::DecodeError;
#[cfg(test)]
use crate::ie::common::dns_name_strategy;
use crate::ie::common::{decode_dns_name, encode_dns_name, NetworkInstance};
use crate::tlv::Reader;
use compact_str::CompactString;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The node address of an FQ-CSID (§8.2.43 Node-ID Type 0, 1 or 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FqCsidNodeAddress {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// Four octets: MCC * 1000 + MNC in the upper 20 bits, an operator-assigned 12-bit value
    /// in the lower ones.
    MccMncBased(u32),
}

impl Default for FqCsidNodeAddress {
    fn default() -> Self {
        Self::Ipv4(Ipv4Addr::UNSPECIFIED)
    }
}

/// TS 29.244 §8.2.43 FQ-CSID: a node and the PDN connection set identifiers it assigned.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FqCsid {
    pub node_address: FqCsidNodeAddress,
    /// At most 15 (the count is 4 bits); encoding drops any beyond.
    pub csids: Multi<u16>,
}

impl IeValue for FqCsid {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let o = r.u8()?;
        let node_address = match o >> 4 {
            0 => FqCsidNodeAddress::Ipv4(r.ipv4()?),
            1 => FqCsidNodeAddress::Ipv6(r.ipv6()?),
            2 => FqCsidNodeAddress::MccMncBased(r.u32()?),
            _ => return Err(DecodeError::incorrect("unknown FQ-CSID Node-ID type")),
        };
        let csids = (0..o & 0x0f).map(|_| r.u16()).collect::<Result<_, _>>()?;
        Ok(Self {
            node_address,
            csids,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        let n = self.csids.len().min(15);
        let (t, addr) = match self.node_address {
            FqCsidNodeAddress::Ipv4(a) => (0u8, a.octets().to_vec()),
            FqCsidNodeAddress::Ipv6(a) => (1, a.octets().to_vec()),
            FqCsidNodeAddress::MccMncBased(v) => (2, v.to_be_bytes().to_vec()),
        };
        out.push(t << 4 | u8::try_from(n).unwrap_or(15));
        out.extend_from_slice(&addr);
        for c in self.csids.iter().take(n) {
            out.extend_from_slice(&c.to_be_bytes());
        }
    }
}

/// TBCD (TS 29.274 §8.3, TS 24.008 §10.5.1.4): digits, low nibble first, 0xF as filler.
fn decode_tbcd(v: &[u8]) -> String {
    let digit = |n: u8| match n {
        0..=9 => Some(char::from(b'0' + n)),
        0xa => Some('*'),
        0xb => Some('#'),
        0xc => Some('a'),
        0xd => Some('b'),
        0xe => Some('c'),
        _ => None,
    };
    v.iter()
        .flat_map(|b| [b & 0x0f, b >> 4])
        .filter_map(digit)
        .collect()
}

/// Encodes a TBCD digit string; characters that have no TBCD code are skipped.
fn encode_tbcd(s: &str) -> Vec<u8> {
    let nibble = |c: char| match c {
        '*' => Some(0xa),
        '#' => Some(0xb),
        'a' => Some(0xc),
        'b' => Some(0xd),
        'c' => Some(0xe),
        _ => c.to_digit(10).and_then(|d| u8::try_from(d).ok()),
    };
    let nibbles: Vec<u8> = s.chars().filter_map(nibble).collect();
    nibbles
        .chunks(2)
        .map(|p| match *p {
            [lo, hi] => hi << 4 | lo,
            [lo] => 0xf0 | lo,
            _ => 0xff,
        })
        .collect()
}

/// TS 29.244 §8.2.101 User ID: the subscriber and device identities of a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct UserId {
    /// IMSI digits (TBCD on the wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[0-9]{1,15}\")"))]
    pub imsi: Option<String>,
    /// IMEI or IMEISV digits (TBCD on the wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[0-9]{1,16}\")"))]
    pub imei: Option<String>,
    /// MSISDN digits (TBCD on the wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[0-9]{1,15}\")"))]
    pub msisdn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::option::of(\"[a-z0-9@.]{0,30}\")")
    )]
    pub nai: Option<String>,
    /// SUPI in its TS 29.571 string form (e.g. `imsi-001010000000001`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[a-z0-9-]{0,30}\")"))]
    pub supi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[a-z0-9-]{0,30}\")"))]
    pub gpsi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(\"[a-z0-9-]{0,30}\")"))]
    pub pei: Option<String>,
}

const UID_IMSIF: u8 = 0x01;
const UID_IMEIF: u8 = 0x02;
const UID_MSISDNF: u8 = 0x04;
const UID_NAIF: u8 = 0x08;
const UID_SUPIF: u8 = 0x10;
const UID_GPSIF: u8 = 0x20;
const UID_PEIF: u8 = 0x40;

impl IeValue for UserId {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        // Each present field is a one-octet length and its value, in flag order.
        let mut field = |flag: u8| -> Result<Option<&[u8]>, DecodeError> {
            if f & flag == 0 {
                return Ok(None);
            }
            let n = r.u8()?;
            r.bytes(usize::from(n)).map(Some)
        };
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        Ok(Self {
            imsi: field(UID_IMSIF)?.map(decode_tbcd),
            imei: field(UID_IMEIF)?.map(decode_tbcd),
            msisdn: field(UID_MSISDNF)?.map(decode_tbcd),
            nai: field(UID_NAIF)?.map(text),
            supi: field(UID_SUPIF)?.map(text),
            gpsi: field(UID_GPSIF)?.map(text),
            pei: field(UID_PEIF)?.map(text),
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let fields: [(u8, &Option<String>, bool); 7] = [
            (UID_IMSIF, &self.imsi, true),
            (UID_IMEIF, &self.imei, true),
            (UID_MSISDNF, &self.msisdn, true),
            (UID_NAIF, &self.nai, false),
            (UID_SUPIF, &self.supi, false),
            (UID_GPSIF, &self.gpsi, false),
            (UID_PEIF, &self.pei, false),
        ];
        out.push(
            fields
                .iter()
                .fold(0, |acc, (flag, v, _)| acc | bit(v.is_some(), *flag)),
        );
        for (_, v, tbcd) in fields {
            if let Some(s) = v {
                if tbcd {
                    put_len8(out, &encode_tbcd(s));
                } else {
                    put_len8(out, s.as_bytes());
                }
            }
        }
    }
}

/// TS 29.244 §8.2.117 APN/DNN, a full APN (network and operator identifier) as DNS labels
/// (TS 23.003 §9.1); plain text is accepted too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct ApnDnn(#[cfg_attr(test, proptest(strategy = "dns_name_strategy()"))] pub CompactString);

impl IeValue for ApnDnn {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        decode_dns_name(value).map(Self)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        encode_dns_name(&self.0, out);
    }
}

/// TS 29.244 §8.2.176 S-NSSAI: Slice/Service Type and Slice Differentiator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct SNssai {
    pub sst: u8,
    /// 24 bits; `SNssai::NO_SD` (0xFFFFFF) means no SD (TS 23.003 §28.4.2).
    #[cfg_attr(test, proptest(strategy = "0u32..0x100_0000"))]
    pub sd: u32,
}

impl SNssai {
    pub const NO_SD: u32 = 0x00ff_ffff;
}

impl IeValue for SNssai {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let sst = r.u8()?;
        // The IE always carries the SD; a lone SST (seen from some peers) means "no SD".
        let sd = if r.is_empty() { Self::NO_SD } else { r.u24()? };
        Ok(Self { sst, sd })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.sst);
        crate::tlv::put_u24(out, self.sd);
    }
}

// ---------------------------------------------------------------------------------------------
// SMF sets, session retention, UE IP address pools
// ---------------------------------------------------------------------------------------------

/// TS 29.244 §8.2.135 CP PFCP Entity IP Address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct CpPfcpEntityIpAddress {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
}

impl IeValue for CpPfcpEntityIpAddress {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let ipv4 = r.ipv4_if(f & A_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & A_V6 != 0)?;
        Ok(Self { ipv4, ipv6 })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(bit(self.ipv4.is_some(), A_V4) | bit(self.ipv6.is_some(), A_V6));
        put_addrs(out, self.ipv4, self.ipv6);
    }
}

ie_group! {
    /// TS 29.244 Table 7.4.4.1-2 PFCP Session Retention Information.
    pub struct PfcpSessionRetentionInformation {
        cp_pfcp_entity_ip_addresses: N CpPfcpEntityIpAddress = 185,
    }
}

/// TS 29.244 §8.2.129 Alternative SMF IP Address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct AlternativeSmfIpAddress {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    /// PPE: the address is of a preferred PFCP entity.
    pub preferred_pfcp_entity: bool,
}

const ASIA_PPE: u8 = 0x04;

impl IeValue for AlternativeSmfIpAddress {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let ipv4 = r.ipv4_if(f & A_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & A_V6 != 0)?;
        Ok(Self {
            ipv4,
            ipv6,
            preferred_pfcp_entity: f & ASIA_PPE != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(
            bit(self.ipv4.is_some(), A_V4)
                | bit(self.ipv6.is_some(), A_V6)
                | bit(self.preferred_pfcp_entity, ASIA_PPE),
        );
        put_addrs(out, self.ipv4, self.ipv6);
    }
}

/// TS 29.244 §8.2.131 SMF Set ID: a spare octet, then the set's FQDN as DNS labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct SmfSetId(
    #[cfg_attr(test, proptest(strategy = "dns_name_strategy()"))] pub CompactString,
);

impl IeValue for SmfSetId {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        r.u8()?;
        decode_fqdn(r.rest()).map(Self)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(0);
        encode_dns_name(&self.0, out);
    }
}

/// TS 29.244 §8.2.128 UE IP address Pool Identity: a two-octet length and the pool name
/// (an OctetString; shown as text, invalid UTF-8 replaced).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct UeIpAddressPoolIdentity(
    #[cfg_attr(test, proptest(strategy = "\"[a-zA-Z0-9_-]{0,20}\""))] pub String,
);

impl IeValue for UeIpAddressPoolIdentity {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let n = r.u16()?;
        let v = r.bytes(usize::from(n))?;
        Ok(Self(String::from_utf8_lossy(v).into_owned()))
    }
    fn encode(&self, out: &mut Vec<u8>) {
        put_len16(out, |o| o.extend_from_slice(self.0.as_bytes()));
    }
}

ie_group! {
    /// TS 29.244 Table 7.4.4.1-3 UE IP address Pool Information.
    pub struct UeIpAddressPoolInformation {
        ue_ip_address_pool_identities: N UeIpAddressPoolIdentity = 177,
        network_instance: O NetworkInstance = 22,
        s_nssais: N SNssai = 257,
        ip_version: O IpVersion = 258,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::error::ErrorKind;
    use crate::ie::node::{hex, kind};
    use proptest::prelude::*;

    #[test]
    fn fq_csid() {
        // scapy 2.8: IE_FqCSID(node_id_type=0, ipv4="10.0.0.5", csids=[1, 2])
        let f = check::canonical::<FqCsid>(&hex("020a00000500010002"));
        assert_eq!(
            f.node_address,
            FqCsidNodeAddress::Ipv4(Ipv4Addr::new(10, 0, 0, 5))
        );
        assert_eq!(&f.csids[..], &[1, 2]);
        // scapy 2.8: IE_FqCSID(node_id_type=1, ipv6="2001:db8::5", csids=[0x1234])
        let f = check::canonical::<FqCsid>(&hex("1120010db80000000000000000000000051234"));
        assert_eq!(&f.csids[..], &[0x1234]);
        // scapy 2.8: IE_FqCSID(node_id_type=2, mcc_mnc=1001, extra_id=0x123, csids=[7])
        let f = check::canonical::<FqCsid>(&hex("21003e91230007"));
        assert_eq!(
            f.node_address,
            FqCsidNodeAddress::MccMncBased(1001 << 12 | 0x123)
        );
        assert_eq!(
            kind::<FqCsid>(&hex("020a0000050001")),
            ErrorKind::InvalidLength
        );
        assert_eq!(
            kind::<FqCsid>(&hex("300a000005")),
            ErrorKind::IncorrectValue
        );
        // More than 15 CSIDs cannot be encoded: the first 15 are kept.
        let mut out = Vec::new();
        FqCsid {
            node_address: FqCsidNodeAddress::Ipv4(Ipv4Addr::LOCALHOST),
            csids: (0..20).collect(),
        }
        .encode(&mut out);
        assert_eq!(FqCsid::decode(&out).unwrap().csids.len(), 15);
    }

    #[test]
    fn user_id() {
        // scapy 2.8: IE_UserId(IMSIF=1, imsi=<TBCD of 001010000000001>, MSISDNF=1,
        // msisdn=<TBCD of 1234567890>, NAIF=1, nai=b"user@example.org"); scapy takes the
        // field octets as given (it has no TBCD coding of its own).
        let u = check::canonical::<UserId>(&hex(
            "0d0800010100000000f10521436587091075736572406578616d706c652e6f7267",
        ));
        assert_eq!(u.imsi.as_deref(), Some("001010000000001"));
        assert_eq!(u.msisdn.as_deref(), Some("1234567890"));
        assert_eq!(u.nai.as_deref(), Some("user@example.org"));
        assert_eq!(u.imei, None);
        // Hand-built per §8.2.101: SUPIF, PEIF.
        let u = check::canonical::<UserId>(b"\x50\x0aimsi-00101\x05imei-");
        assert_eq!(u.supi.as_deref(), Some("imsi-00101"));
        assert_eq!(u.pei.as_deref(), Some("imei-"));
        assert_eq!(
            kind::<UserId>(&hex("010500101000")),
            ErrorKind::InvalidLength
        );
        assert_eq!(encode_tbcd("12345"), [0x21, 0x43, 0xf5]);
        assert_eq!(decode_tbcd(&[0x21, 0xfb]), "12#");
    }

    #[test]
    fn names_and_ids() {
        // scapy 2.8: IE_APN_DNN(apn_dnn="internet.mnc001.mcc001.gprs")
        let a = check::canonical::<ApnDnn>(&hex(
            "08696e7465726e6574066d6e63303031066d63633030310467707273",
        ));
        assert_eq!(a.0, "internet.mnc001.mcc001.gprs");
        assert_eq!(ApnDnn::decode(b"internet").unwrap().0, "internet");
        // Hand-built per §8.2.131: spare octet, "set1.smfset.example" as labels.
        let s = check::canonical::<SmfSetId>(b"\x00\x04set1\x06smfset\x07example");
        assert_eq!(s.0, "set1.smfset.example");
        assert_eq!(
            SmfSetId::decode(b"\x00set1.smfset").unwrap().0,
            "set1.smfset"
        );
        assert!(SmfSetId::decode(&[]).is_err());
        // Hand-built per §8.2.176: SST 1, SD 0x010203; a lone SST means no SD.
        let n = check::canonical::<SNssai>(&hex("01010203"));
        assert_eq!((n.sst, n.sd), (1, 0x01_0203));
        assert_eq!(SNssai::decode(&[1]).unwrap().sd, SNssai::NO_SD);
        assert_eq!(kind::<SNssai>(&[1, 2]), ErrorKind::InvalidLength);
        // Hand-built per §8.2.128.
        let p = check::canonical::<UeIpAddressPoolIdentity>(b"\x00\x05pool1");
        assert_eq!(p.0, "pool1");
        assert_eq!(
            kind::<UeIpAddressPoolIdentity>(b"\x00\x06pool1"),
            ErrorKind::InvalidLength
        );
    }

    #[test]
    fn smf_set_and_retention() {
        // Hand-built per §8.2.135 / §8.2.129 (V6 bit 1, V4 bit 2, PPE bit 3).
        let c = check::canonical::<CpPfcpEntityIpAddress>(&hex("020a000009"));
        assert_eq!(c.ipv4, Some(Ipv4Addr::new(10, 0, 0, 9)));
        let a = check::canonical::<AlternativeSmfIpAddress>(&hex("060a00000a"));
        assert!(a.preferred_pfcp_entity);
        assert_eq!(a.ipv4, Some(Ipv4Addr::new(10, 0, 0, 10)));
        let r = check::canonical::<PfcpSessionRetentionInformation>(&hex("00b90005020a000009"));
        assert_eq!(r.cp_pfcp_entity_ip_addresses[0], c);
        // UE IP address Pool Information: pool "pool1", NI "internet", S-NSSAI 1/0x010203,
        // IPv4 only.
        let i = check::canonical::<UeIpAddressPoolInformation>(&hex("00b1000700057030306c31\
             001600090869\
             6e7465726e6574\
             01010004010102030102000101"));
        assert_eq!(i.ue_ip_address_pool_identities[0].0, "p00l1");
        assert_eq!(i.s_nssais[0].sd, 0x01_0203);
        assert_eq!(
            i.ip_version,
            Some(IpVersion {
                v4: true,
                v6: false
            })
        );
    }

    proptest! {
        #[test]
        fn roundtrip(a: FqCsid, b: UserId, c: ApnDnn, i: CpPfcpEntityIpAddress,
                     j: PfcpSessionRetentionInformation, k: AlternativeSmfIpAddress, l: SmfSetId,
                     m: SNssai, n: UeIpAddressPoolIdentity, p: UeIpAddressPoolInformation) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&i);
            check::roundtrip(&j); check::roundtrip(&k); check::roundtrip(&l); check::roundtrip(&m);
            check::roundtrip(&n); check::roundtrip(&p);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = FqCsid::decode(&b); let _ = UserId::decode(&b); let _ = ApnDnn::decode(&b);
            let _ = CpPfcpEntityIpAddress::decode(&b);
            let _ = PfcpSessionRetentionInformation::decode(&b);
            let _ = AlternativeSmfIpAddress::decode(&b); let _ = SmfSetId::decode(&b);
            let _ = SNssai::decode(&b); let _ = UeIpAddressPoolIdentity::decode(&b);
            let _ = UeIpAddressPoolInformation::decode(&b);
        }

        #[test]
        fn truncated_user_id_never_panics(u: UserId) {
            let mut bytes = Vec::new();
            u.encode(&mut bytes);
            for n in 0..bytes.len() {
                let _ = UserId::decode(&bytes[..n]);
            }
        }
    }
}
