//! Node-level IEs: the ones carried by heartbeat, association, node report and load/overload
//! control procedures (TS 29.244 §7.4), plus the session-level identity IEs they share
//! (F-SEID, FQ-CSID, User ID, APN/DNN, S-NSSAI). Split into submodules by theme; everything is
//! re-exported here.

mod features;
mod identity;
mod paths;

pub use features::*;
pub use identity::*;
pub use paths::*;

#[cfg(test)]
use super::common::dns_name_strategy;
use super::common::{
    decode_dns_name, encode_dns_name, ie_enum_u8, BarId, FarId, PdrId, QerId, UrrId,
};
use crate::cause::Cause;
use crate::codec::{ie_flags, ie_uint, IeValue};
use crate::error::DecodeError;
use crate::tlv::Reader;
use compact_str::CompactString;
use std::net::{Ipv4Addr, Ipv6Addr};

/// TS 29.244 §8.2.1 Cause (one octet).
impl IeValue for Cause {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        Reader::new(value).u8().map(Cause)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
}

/// Appends an address pair in the order every PFCP address IE uses: IPv4, then IPv6.
fn put_addrs(out: &mut Vec<u8>, ipv4: Option<Ipv4Addr>, ipv6: Option<Ipv6Addr>) {
    if let Some(a) = ipv4 {
        out.extend_from_slice(&a.octets());
    }
    if let Some(a) = ipv6 {
        out.extend_from_slice(&a.octets());
    }
}

const fn bit(on: bool, b: u8) -> u8 {
    if on {
        b
    } else {
        0
    }
}

/// An FQDN encoded as in a DNS message (RFC 1035 §3.1) without the trailing zero octet
/// (§8.2.38 NOTE); a trailing zero some peers send anyway is dropped, plain text is accepted.
fn decode_fqdn(v: &[u8]) -> Result<CompactString, DecodeError> {
    decode_dns_name(v.strip_suffix(&[0]).unwrap_or(v))
}

/// A field preceded by a one-octet length (User ID); longer values are cut at 255 octets.
fn put_len8(out: &mut Vec<u8>, v: &[u8]) {
    let n = u8::try_from(v.len()).unwrap_or(u8::MAX);
    out.push(n);
    out.extend_from_slice(v.get(..usize::from(n)).unwrap_or(v));
}

/// Appends a two-octet length, runs `value`, then back-patches the length.
fn put_len16(out: &mut Vec<u8>, value: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    value(out);
    crate::tlv::patch_len(out, at);
}

// ---------------------------------------------------------------------------------------------
// Node ID, F-SEID, simple integers
// ---------------------------------------------------------------------------------------------

/// TS 29.244 §8.2.38 Node ID: the identity of a CP or UP function (an IP address or an FQDN).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum NodeId {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    Fqdn(#[cfg_attr(test, proptest(strategy = "dns_name_strategy()"))] CompactString),
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ipv4(a) => a.fmt(f),
            Self::Ipv6(a) => a.fmt(f),
            Self::Fqdn(n) => f.write_str(n),
        }
    }
}

/// The unspecified IPv4 address: the state of a message's Node ID before it is decoded.
impl Default for NodeId {
    fn default() -> Self {
        Self::Ipv4(Ipv4Addr::UNSPECIFIED)
    }
}

impl IeValue for NodeId {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        // Octet 5: spare (high nibble, ignored) and Node ID Type (low nibble).
        match r.u8()? & 0x0f {
            0 => r.ipv4().map(Self::Ipv4),
            1 => r.ipv6().map(Self::Ipv6),
            2 => match decode_fqdn(r.rest())? {
                n if n.is_empty() => Err(DecodeError::incorrect("empty Node ID FQDN")),
                n => Ok(Self::Fqdn(n)),
            },
            _ => Err(DecodeError::incorrect("unknown Node ID type")),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Ipv4(a) => {
                out.push(0);
                out.extend_from_slice(&a.octets());
            }
            Self::Ipv6(a) => {
                out.push(1);
                out.extend_from_slice(&a.octets());
            }
            Self::Fqdn(n) => {
                out.push(2);
                encode_dns_name(n, out);
            }
        }
    }
}

/// TS 29.244 §8.2.37 F-SEID: a session endpoint identifier with the address(es) of its node.
/// The spec requires at least one address; one without is accepted (the session layer decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct FSeid {
    pub seid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
}

// Flag bits of the address IEs that put V6 in bit 1 and V4 in bit 2 (F-SEID, Remote GTP-U
// Peer, Source IP Address, CP PFCP Entity IP Address, Alternative SMF IP Address).
const A_V6: u8 = 0x01;
const A_V4: u8 = 0x02;

impl IeValue for FSeid {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let seid = r.u64()?;
        let ipv4 = r.ipv4_if(f & A_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & A_V6 != 0)?;
        Ok(Self { seid, ipv4, ipv6 })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(bit(self.ipv4.is_some(), A_V4) | bit(self.ipv6.is_some(), A_V6));
        out.extend_from_slice(&self.seid.to_be_bytes());
        put_addrs(out, self.ipv4, self.ipv6);
    }
}

ie_uint!(
    /// TS 29.244 §8.2.65 Recovery Time Stamp: when the node last started, in NTP seconds
    /// (RFC 5905, era 0).
    RecoveryTimeStamp(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.22 Offending IE: the type of the IE that made a request fail.
    OffendingIe(u16)
);
ie_uint!(
    /// TS 29.244 §8.2.83 User Plane Inactivity Timer, in seconds (0 stops detection).
    UserPlaneInactivityTimer(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.33 Sequence Number (of load / overload control information).
    SequenceNumber(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.34 Metric: load or overload reduction, 0..=100.
    Metric(u8)
);

// ---------------------------------------------------------------------------------------------
// One-octet flag and enumerated IEs
// ---------------------------------------------------------------------------------------------

ie_flags!(
    /// TS 29.244 §8.2.21 Report Type (of a PFCP Session Report Request).
    ReportType(u8), octets = 1..=1 {
        DLDR = 0x01,
        USAR = 0x02,
        ERIR = 0x04,
        UPIR = 0x08,
        TMIR = 0x10,
        SESR = 0x20,
        UISR = 0x40,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.69 Node Report Type.
    NodeReportType(u8), octets = 1..=1 {
        UPFR = 0x01,
        UPRR = 0x02,
        CKDR = 0x04,
        GPQR = 0x08,
        PURR = 0x10,
        VSR = 0x20,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.119 PFCPSRReq-Flags.
    PfcpSrReqFlags(u8), octets = 1..=1 {
        PSDBU = 0x01,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.120 PFCPAUReq-Flags.
    PfcpAuReqFlags(u8), octets = 1..=1 {
        PARPS = 0x01,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.134 PFCPASRsp-Flags.
    PfcpAsRspFlags(u8), octets = 1..=1 {
        PSREI = 0x01,
        UUPSI = 0x02,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.136 PFCPSEReq-Flags.
    PfcpSeReqFlags(u8), octets = 1..=1 {
        RESTI = 0x01,
        SUMPC = 0x02,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.178 PFCPASReq-Flags.
    PfcpAsReqFlags(u8), octets = 1..=1 {
        UUPSI = 0x01,
    }
);

ie_enum_u8!(
    /// TS 29.244 §8.2.79 PDN Type (3 bits).
    PdnType, mask = 0x07 {
        IPV4 = 1,
        IPV6 = 2,
        IPV4V6 = 3,
        NON_IP = 4,
        ETHERNET = 5,
    }
);

/// TS 29.244 §8.2.76 OCI Flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct OciFlags {
    /// AOCI: the Overload Control Information is associated with the node, not the session.
    pub aoci: bool,
}

impl IeValue for OciFlags {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let f = Reader::new(value).u8()?;
        Ok(Self {
            aoci: f & 0x01 != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(bit(self.aoci, 0x01));
    }
}

/// TS 29.244 §8.2.177 IP Version (of a UE IP address pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct IpVersion {
    pub v4: bool,
    pub v6: bool,
}

impl IeValue for IpVersion {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let f = Reader::new(value).u8()?;
        Ok(Self {
            v4: f & 0x01 != 0,
            v6: f & 0x02 != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(bit(self.v4, 0x01) | bit(self.v6, 0x02));
    }
}

// ---------------------------------------------------------------------------------------------
// Failed Rule ID
// ---------------------------------------------------------------------------------------------

/// TS 29.244 §8.2.80 Failed Rule ID: the rule a session request could not create or modify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum FailedRuleId {
    Pdr(PdrId),
    Far(FarId),
    Qer(QerId),
    Urr(UrrId),
    Bar(BarId),
    Mar(u16),
    Srr(u8),
}

impl Default for FailedRuleId {
    fn default() -> Self {
        Self::Pdr(PdrId(0))
    }
}

impl IeValue for FailedRuleId {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let t = r.u8()? & 0x1f;
        let v = r.rest();
        Ok(match t {
            0 => Self::Pdr(PdrId::decode(v)?),
            2 => Self::Qer(QerId::decode(v)?),
            3 => Self::Urr(UrrId::decode(v)?),
            4 => Self::Bar(BarId::decode(v)?),
            5 => Self::Mar(Reader::new(v).u16()?),
            6 => Self::Srr(Reader::new(v).u8()?),
            // §8.2.80: reserved Rule ID Types shall be interpreted as 1 (FAR).
            _ => Self::Far(FarId::decode(v)?),
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Pdr(id) => {
                out.push(0);
                id.encode(out);
            }
            Self::Far(id) => {
                out.push(1);
                id.encode(out);
            }
            Self::Qer(id) => {
                out.push(2);
                id.encode(out);
            }
            Self::Urr(id) => {
                out.push(3);
                id.encode(out);
            }
            Self::Bar(id) => {
                out.push(4);
                id.encode(out);
            }
            Self::Mar(id) => {
                out.push(5);
                out.extend_from_slice(&id.to_be_bytes());
            }
            Self::Srr(id) => {
                out.push(6);
                out.push(*id);
            }
        }
    }
}

#[cfg(test)]
use crate::codec::check::hex;

/// The kind of error decoding `b` as `T` gives.
#[cfg(test)]
fn kind<T: IeValue + core::fmt::Debug>(b: &[u8]) -> crate::error::ErrorKind {
    T::decode(b).unwrap_err().kind()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::error::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn cause_recovery_offending() {
        // scapy 2.8: IE_Cause(cause=1), IE_RecoveryTimeStamp(timestamp=3900000000),
        // IE_OffendingIE(type=60), value octets.
        assert_eq!(check::canonical::<Cause>(&[0x01]), Cause::REQUEST_ACCEPTED);
        assert_eq!(
            check::canonical::<RecoveryTimeStamp>(&hex("e8754700")),
            RecoveryTimeStamp(3_900_000_000)
        );
        assert_eq!(
            check::canonical::<OffendingIe>(&hex("003c")),
            OffendingIe(60)
        );
        assert!(Cause::decode(&[]).is_err());
        assert!(RecoveryTimeStamp::decode(&[1, 2, 3]).is_err());
    }

    #[test]
    fn node_id_vectors() {
        // scapy 2.8: IE_NodeId(id_type=0, ipv4="10.0.0.1")
        assert_eq!(
            check::canonical::<NodeId>(&hex("000a000001")),
            NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1))
        );
        // scapy 2.8: IE_NodeId(id_type=1, ipv6="2001:db8::1")
        assert_eq!(
            check::canonical::<NodeId>(&hex("0120010db8000000000000000000000001")),
            NodeId::Ipv6("2001:db8::1".parse().unwrap())
        );
        // scapy 2.8: IE_NodeId(id_type=2, id="upf.example.org")
        assert_eq!(
            check::canonical::<NodeId>(&hex("0203757066076578616d706c65036f7267")),
            NodeId::Fqdn("upf.example.org".into())
        );
    }

    #[test]
    fn node_id_leniency() {
        let fqdn = NodeId::Fqdn("upf.example.org".into());
        // FQDN as dotted text instead of labels.
        assert_eq!(NodeId::decode(b"\x02upf.example.org").unwrap(), fqdn);
        // FQDN with the DNS root label's zero octet.
        assert_eq!(
            NodeId::decode(&hex("0203757066076578616d706c65036f726700")).unwrap(),
            fqdn
        );
        // Spare bits set, trailing octets after an address.
        assert_eq!(
            NodeId::decode(&hex("f00a000001ffff")).unwrap(),
            NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1))
        );
        assert_eq!(
            kind::<NodeId>(&[0x03, 1, 2, 3, 4]),
            ErrorKind::IncorrectValue
        );
        assert_eq!(kind::<NodeId>(&[0x02]), ErrorKind::IncorrectValue);
        assert_eq!(kind::<NodeId>(&[0x00, 10, 0, 0]), ErrorKind::InvalidLength);
        assert_eq!(kind::<NodeId>(&[]), ErrorKind::InvalidLength);
    }

    #[test]
    fn f_seid_vectors() {
        // scapy 2.8: IE_FSEID(v4=1, seid=0x1122334455667788, ipv4="192.168.1.1")
        assert_eq!(
            check::canonical::<FSeid>(&hex("021122334455667788c0a80101")),
            FSeid {
                seid: 0x1122_3344_5566_7788,
                ipv4: Some(Ipv4Addr::new(192, 168, 1, 1)),
                ipv6: None
            }
        );
        // scapy 2.8: IE_FSEID(v6=1, seid=1, ipv6="2001:db8::2")
        assert_eq!(
            check::canonical::<FSeid>(&hex("01000000000000000120010db8000000000000000000000002")),
            FSeid {
                seid: 1,
                ipv4: None,
                ipv6: Some("2001:db8::2".parse().unwrap())
            }
        );
        // scapy 2.8: IE_FSEID(v4=1, v6=1, seid=0xdeadbeef, ipv4="10.1.2.3", ipv6="fe80::1")
        let both = check::canonical::<FSeid>(&hex(
            "0300000000deadbeef0a010203fe800000000000000000000000000001",
        ));
        assert_eq!(both.ipv4, Some(Ipv4Addr::new(10, 1, 2, 3)));
        assert_eq!(both.ipv6, Some("fe80::1".parse().unwrap()));
        // Spare bits ignored; missing address octets rejected.
        assert_eq!(FSeid::decode(&hex("fc0000000000000001")).unwrap().seid, 1);
        assert_eq!(
            kind::<FSeid>(&hex("020000000000000001c0a801")),
            ErrorKind::InvalidLength
        );
    }

    #[test]
    fn failed_rule_id() {
        // scapy 2.8: IE_FailedRuleId(type=0, pdr_id=5)
        assert_eq!(
            check::canonical::<FailedRuleId>(&hex("000005")),
            FailedRuleId::Pdr(PdrId(5))
        );
        // scapy 2.8: IE_FailedRuleId(type=1, far_id=0x80000001) (a predefined FAR)
        assert_eq!(
            check::canonical::<FailedRuleId>(&hex("0180000001")),
            FailedRuleId::Far(FarId(0x8000_0001))
        );
        // scapy 2.8: IE_FailedRuleId(type=4, bar_id=3)
        assert_eq!(
            check::canonical::<FailedRuleId>(&hex("0403")),
            FailedRuleId::Bar(BarId(3))
        );
        // MAR (2 octets) and SRR (1 octet) per §8.2.123 / §8.2.151; scapy 2.8 predates them
        // and writes 4 octets for every type above 4.
        assert_eq!(
            check::canonical::<FailedRuleId>(&hex("050007")),
            FailedRuleId::Mar(7)
        );
        assert_eq!(
            check::canonical::<FailedRuleId>(&hex("0609")),
            FailedRuleId::Srr(9)
        );
        // A reserved type is read as FAR (§8.2.80); spare bits are ignored.
        assert_eq!(
            FailedRuleId::decode(&hex("1f00000002")).unwrap(),
            FailedRuleId::Far(FarId(2))
        );
        assert_eq!(
            FailedRuleId::decode(&hex("e2000000030000")).unwrap(),
            FailedRuleId::Qer(QerId(3))
        );
        assert_eq!(kind::<FailedRuleId>(&hex("0300")), ErrorKind::InvalidLength);
    }

    #[test]
    fn flags_and_enums() {
        // scapy 2.8: IE_ReportType(USAR=1), IE_ReportType(DLDR=1, UPIR=1)
        assert_eq!(check::canonical::<ReportType>(&[0x02]), ReportType::USAR);
        let r = check::canonical::<ReportType>(&[0x09]);
        assert!(r.contains(ReportType::DLDR) && r.contains(ReportType::UPIR));
        assert!(!r.contains(ReportType::USAR));
        // scapy 2.8: IE_NodeReportType(UPFR=1)
        assert_eq!(
            check::canonical::<NodeReportType>(&[0x01]),
            NodeReportType::UPFR
        );
        // scapy 2.8: IE_OCIFlags(AOCI=1)
        assert!(check::canonical::<OciFlags>(&[0x01]).aoci);
        // scapy 2.8: IE_PDNType(pdn_type=1). scapy names 1 "IPv6" (its table is off by one);
        // §8.2.79 defines 1 as IPv4.
        assert_eq!(check::canonical::<PdnType>(&[0x01]), PdnType::IPV4);
        // Spare bits set are accepted and cleared.
        assert_eq!(ReportType::decode(&[0x82]).unwrap(), ReportType::USAR);
        assert_eq!(PdnType::decode(&[0xf3]).unwrap(), PdnType::IPV4V6);
        assert_eq!(
            PfcpAsRspFlags::decode(&[0xff]).unwrap(),
            PfcpAsRspFlags::PSREI.union(PfcpAsRspFlags::UUPSI)
        );
        assert_eq!(
            check::canonical::<IpVersion>(&[0x03]),
            IpVersion { v4: true, v6: true }
        );
        assert_eq!(
            check::canonical::<PfcpSeReqFlags>(&[0x01]),
            PfcpSeReqFlags::RESTI
        );
        assert!(PfcpSrReqFlags::decode(&[]).is_err());
        // scapy 2.8: IE_UserPlaneInactivityTimer(timer=300), IE_SequenceNumber(number=42),
        // IE_Metric(metric=50)
        assert_eq!(
            check::canonical::<UserPlaneInactivityTimer>(&hex("0000012c")).0,
            300
        );
        assert_eq!(check::canonical::<SequenceNumber>(&hex("0000002a")).0, 42);
        assert_eq!(check::canonical::<Metric>(&[0x32]).0, 50);
    }

    proptest! {
        #[test]
        fn roundtrip(a: Cause, b: NodeId, c: FSeid, d: RecoveryTimeStamp, g: OffendingIe,
                     h: FailedRuleId, i: ReportType, j: UserPlaneInactivityTimer, k: SequenceNumber,
                     l: Metric, m: PdnType, n: NodeReportType, o: OciFlags, p: IpVersion) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
            check::roundtrip(&g); check::roundtrip(&h); check::roundtrip(&i); check::roundtrip(&j);
            check::roundtrip(&k); check::roundtrip(&l); check::roundtrip(&m); check::roundtrip(&n);
            check::roundtrip(&o); check::roundtrip(&p);
        }

        #[test]
        fn roundtrip_flags(a: PfcpSrReqFlags, b: PfcpAuReqFlags, c: PfcpAsRspFlags,
                           d: PfcpSeReqFlags, e: PfcpAsReqFlags) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c); check::roundtrip(&d);
            check::roundtrip(&e);
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = Cause::decode(&b); let _ = NodeId::decode(&b); let _ = FSeid::decode(&b);
            let _ = FailedRuleId::decode(&b); let _ = ReportType::decode(&b);
            let _ = OciFlags::decode(&b); let _ = NodeReportType::decode(&b);
            let _ = PdnType::decode(&b); let _ = IpVersion::decode(&b);
            let _ = PfcpAsRspFlags::decode(&b); let _ = UserPlaneInactivityTimer::decode(&b);
        }

        #[test]
        fn truncated_f_seid_is_an_error(f: FSeid) {
            let mut bytes = Vec::new();
            f.encode(&mut bytes);
            for n in 0..bytes.len() {
                prop_assert!(FSeid::decode(&bytes[..n]).is_err());
            }
        }
    }
}
