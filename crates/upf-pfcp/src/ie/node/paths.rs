//! Timers, load and overload control, and the GTP-U path IEs: User Plane IP Resource
//! Information, Remote GTP-U Peer, path failure / recovery and error indication reports,
//! Source IP Address.

use super::{bit, put_addrs, put_len16, Metric, OciFlags, SequenceNumber, A_V4, A_V6};
use crate::codec::{ie_group, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{DestinationInterface, FTeid, NetworkInstance, SourceInterface};
use crate::tlv::Reader;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Seconds of a GPRS-Timer-like value (TS 24.008 §10.5.7.3): `None` means infinite. Units 5
/// and 6 are undefined and, as that spec says, read as 1 minute.
fn timer_secs(unit: u8, value: u8) -> Option<u64> {
    let per = match unit & 0x07 {
        0 => 2,
        2 => 600,
        3 => 3600,
        4 => 36_000,
        7 => return None,
        _ => 60,
    };
    Some(per * u64::from(value & 0x1f))
}

macro_rules! gprs_timer {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub struct $name {
            /// Timer unit (3 bits), one of the `UNIT_*` constants.
            #[cfg_attr(test, proptest(strategy = "0u8..8"))]
            pub unit: u8,
            /// Timer value (5 bits), a count of units.
            #[cfg_attr(test, proptest(strategy = "0u8..32"))]
            pub value: u8,
        }

        impl $name {
            pub const UNIT_2_SECONDS: u8 = 0;
            pub const UNIT_1_MINUTE: u8 = 1;
            pub const UNIT_10_MINUTES: u8 = 2;
            pub const UNIT_1_HOUR: u8 = 3;
            pub const UNIT_10_HOURS: u8 = 4;
            pub const UNIT_INFINITE: u8 = 7;

            /// The duration in seconds, `None` if infinite.
            pub fn as_secs(&self) -> Option<u64> {
                timer_secs(self.unit, self.value)
            }
        }

        impl IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, DecodeError> {
                let o = Reader::new(value).u8()?;
                Ok(Self { unit: o >> 5, value: o & 0x1f })
            }
            fn encode(&self, out: &mut Vec<u8>) {
                out.push((self.unit & 0x07) << 5 | (self.value & 0x1f));
            }
        }
    };
}

gprs_timer!(
    /// TS 29.244 §8.2.35 Timer (overload control validity), coded like a GPRS Timer.
    Timer
);
gprs_timer!(
    /// TS 29.244 §8.2.78 Graceful Release Period, coded like a GPRS Timer.
    GracefulReleasePeriod
);

// ---------------------------------------------------------------------------------------------
// Load and overload control
// ---------------------------------------------------------------------------------------------

ie_group! {
    /// TS 29.244 §7.5.3.3 (Table 7.5.3.3-1) Load Control Information.
    pub struct LoadControlInformation {
        sequence_number: M SequenceNumber = 52,
        metric: M Metric = 53,
    }
}

ie_group! {
    /// TS 29.244 §7.5.3.4 (Table 7.5.3.4-1) Overload Control Information.
    pub struct OverloadControlInformation {
        sequence_number: M SequenceNumber = 52,
        metric: M Metric = 53,
        timer: M Timer = 55,
        oci_flags: O OciFlags = 110,
    }
}

// ---------------------------------------------------------------------------------------------
// User Plane IP Resource Information, GTP-U peers, node reports
// ---------------------------------------------------------------------------------------------

/// TS 29.244 §8.2.82 User Plane IP Resource Information (Rel-15; removed from the association
/// messages in Rel-16 but still sent by free5GC's and other UPFs): GTP-U addresses and TEID
/// ranges the UP function offers, optionally per Network Instance and Source Interface.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[cfg_attr(
    test,
    proptest(filter = "|u| (u.teid_range_indication == 0) == u.teid_range.is_none()")
)]
pub struct UserPlaneIpResourceInformation {
    /// TEIDRI: how many leading bits of the TEID partition the TEID range (0 = no range).
    #[cfg_attr(test, proptest(strategy = "0u8..8"))]
    pub teid_range_indication: u8,
    /// TEID Range: present when `teid_range_indication` is not 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teid_range: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_instance: Option<NetworkInstance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_interface: Option<SourceInterface>,
}

// §8.2.82 octet 5 (unlike most address IEs, V4 is bit 1 here).
const UPIRI_V4: u8 = 0x01;
const UPIRI_V6: u8 = 0x02;
const UPIRI_ASSONI: u8 = 0x20;
const UPIRI_ASSOSI: u8 = 0x40;

impl IeValue for UserPlaneIpResourceInformation {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let teid_range_indication = (f >> 2) & 0x07;
        let teid_range = r.u8_if(teid_range_indication != 0)?;
        let ipv4 = r.ipv4_if(f & UPIRI_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & UPIRI_V6 != 0)?;
        let assosi = f & UPIRI_ASSOSI != 0;
        // The Network Instance has no length of its own: it runs to the end of the IE, or to
        // the last octet when that octet carries the Source Interface.
        let network_instance = if f & UPIRI_ASSONI != 0 {
            let n = r.remaining().checked_sub(usize::from(assosi)).ok_or(
                DecodeError::invalid_length("no room for the Source Interface"),
            )?;
            Some(NetworkInstance::decode(r.bytes(n)?)?)
        } else {
            None
        };
        let source_interface = if assosi {
            Some(SourceInterface::decode(r.bytes(1)?)?)
        } else {
            None
        };
        Ok(Self {
            teid_range_indication,
            teid_range,
            ipv4,
            ipv6,
            network_instance,
            source_interface,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let teidri = self.teid_range_indication & 0x07;
        out.push(
            bit(self.ipv4.is_some(), UPIRI_V4)
                | bit(self.ipv6.is_some(), UPIRI_V6)
                | teidri << 2
                | bit(self.network_instance.is_some(), UPIRI_ASSONI)
                | bit(self.source_interface.is_some(), UPIRI_ASSOSI),
        );
        if teidri != 0 {
            out.push(self.teid_range.unwrap_or(0));
        }
        put_addrs(out, self.ipv4, self.ipv6);
        if let Some(ni) = &self.network_instance {
            ni.encode(out);
        }
        if let Some(si) = &self.source_interface {
            si.encode(out);
        }
    }
}

/// TS 29.244 §8.2.70 Remote GTP-U Peer: a GTP-U peer address, optionally with the destination
/// interface and network instance it is reached through.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct RemoteGtpuPeer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_interface: Option<DestinationInterface>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_instance: Option<NetworkInstance>,
}

const RGP_DI: u8 = 0x04;
const RGP_NI: u8 = 0x08;

impl IeValue for RemoteGtpuPeer {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let ipv4 = r.ipv4_if(f & A_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & A_V6 != 0)?;
        // DI and NI each follow a two-octet length (§8.2.70, Rel-16 onwards).
        let mut field = |on: bool| -> Result<Option<&[u8]>, DecodeError> {
            if !on {
                return Ok(None);
            }
            let n = r.u16()?;
            r.bytes(usize::from(n)).map(Some)
        };
        let destination_interface = field(f & RGP_DI != 0)?
            .map(DestinationInterface::decode)
            .transpose()?;
        let network_instance = field(f & RGP_NI != 0)?
            .map(NetworkInstance::decode)
            .transpose()?;
        Ok(Self {
            ipv4,
            ipv6,
            destination_interface,
            network_instance,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(
            bit(self.ipv4.is_some(), A_V4)
                | bit(self.ipv6.is_some(), A_V6)
                | bit(self.destination_interface.is_some(), RGP_DI)
                | bit(self.network_instance.is_some(), RGP_NI),
        );
        put_addrs(out, self.ipv4, self.ipv6);
        if let Some(di) = &self.destination_interface {
            put_len16(out, |o| di.encode(o));
        }
        if let Some(ni) = &self.network_instance {
            put_len16(out, |o| ni.encode(o));
        }
    }
}

ie_group! {
    /// TS 29.244 §7.4.5.1 (Table 7.4.5.1.2-1) User Plane Path Failure Report.
    pub struct UserPlanePathFailureReport {
        remote_gtpu_peers: N RemoteGtpuPeer = 103,
    }
}

ie_group! {
    /// TS 29.244 §7.4.5.1 User Plane Path Recovery Report (in a PFCP Node Report Request).
    pub struct UserPlanePathRecoveryReport {
        remote_gtpu_peers: N RemoteGtpuPeer = 103,
    }
}

ie_group! {
    /// TS 29.244 Table 7.5.8.4-1 Error Indication Report: the F-TEIDs a GTP-U Error Indication
    /// named.
    pub struct ErrorIndicationReport {
        remote_f_teids: N FTeid = 21,
    }
}

/// TS 29.244 §8.2.138 Source IP Address (of the N4 messages a node sends, with an optional
/// mask or prefix length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct SourceIpAddress {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_prefix_length: Option<u8>,
}

const SIA_MPL: u8 = 0x04;

impl IeValue for SourceIpAddress {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let f = r.u8()?;
        let ipv4 = r.ipv4_if(f & A_V4 != 0)?;
        let ipv6 = r.ipv6_if(f & A_V6 != 0)?;
        let mask_prefix_length = r.u8_if(f & SIA_MPL != 0)?;
        Ok(Self {
            ipv4,
            ipv6,
            mask_prefix_length,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(
            bit(self.ipv4.is_some(), A_V4)
                | bit(self.ipv6.is_some(), A_V6)
                | bit(self.mask_prefix_length.is_some(), SIA_MPL),
        );
        put_addrs(out, self.ipv4, self.ipv6);
        out.extend(self.mask_prefix_length);
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
    fn timers() {
        // scapy 2.8: IE_Timer(timer_unit=1, timer_value=10): 10 minutes.
        let t = check::canonical::<Timer>(&[0x2a]);
        assert_eq!(
            (t.unit, t.value, t.as_secs()),
            (Timer::UNIT_1_MINUTE, 10, Some(600))
        );
        // scapy 2.8: IE_GracefulReleasePeriod(release_timer_unit=7, release_timer_value=0)
        let g = check::canonical::<GracefulReleasePeriod>(&[0xe0]);
        assert_eq!(g.as_secs(), None);
        assert_eq!(Timer { unit: 0, value: 31 }.as_secs(), Some(62));
        assert_eq!(Timer { unit: 4, value: 31 }.as_secs(), Some(1_116_000));
        // Units 5 and 6 read as 1 minute (TS 24.008 §10.5.7.3).
        assert_eq!(Timer { unit: 5, value: 2 }.as_secs(), Some(120));
    }

    #[test]
    fn load_and_overload_control() {
        // scapy 2.8: IE_LoadControlInformation(IE_list=[IE_SequenceNumber(number=7),
        // IE_Metric(metric=30)])
        let l = check::canonical::<LoadControlInformation>(&hex("0034000400000007003500011e"));
        assert_eq!((l.sequence_number.0, l.metric.0), (7, 30));
        // scapy 2.8: IE_OverloadControlInformation(IE_list=[IE_SequenceNumber(number=8),
        // IE_Metric(metric=80), IE_Timer(timer_unit=0, timer_value=15), IE_OCIFlags(AOCI=1)])
        let o = check::canonical::<OverloadControlInformation>(&hex(
            "00340004000000080035000150003700010f006e000101",
        ));
        assert_eq!(o.timer.as_secs(), Some(30));
        assert_eq!(o.oci_flags, Some(OciFlags { aoci: true }));
        let e = OverloadControlInformation::decode(&hex("0034000400000008")).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::MissingMandatory, Some(53))
        );
    }

    #[test]
    fn user_plane_ip_resource_information() {
        // scapy 2.8: IE_UserPlaneIPResourceInformation(V4=1, TEIDRI=1, teid_range=0,
        // ipv4="10.200.200.101", ASSONI=1, network_instance="internet"); the shape free5GC's
        // UPF sends (upf_n4_build.c: teidri=1, teidRange=0, assoni=1, v4=1).
        let u = check::canonical::<UserPlaneIpResourceInformation>(&hex(
            "25000ac8c86508696e7465726e6574",
        ));
        assert_eq!(
            u,
            UserPlaneIpResourceInformation {
                teid_range_indication: 1,
                teid_range: Some(0),
                ipv4: Some(Ipv4Addr::new(10, 200, 200, 101)),
                ipv6: None,
                network_instance: Some(NetworkInstance("internet".into())),
                source_interface: None,
            }
        );
        // scapy 2.8: (V4=1, V6=1, TEIDRI=2, teid_range=3, ipv4="10.0.0.2",
        // ipv6="2001:db8::3", ASSONI=1, network_instance="ims.mnc001.mcc001.gprs", ASSOSI=1,
        // interface=0): the Network Instance stops one octet before the end.
        let u = check::canonical::<UserPlaneIpResourceInformation>(&hex(
            "6b030a00000220010db800000000000000000000000303696d73066d6e63303031066d6363303031046770727300",
        ));
        assert_eq!(u.teid_range, Some(3));
        assert_eq!(u.network_instance.unwrap().0, "ims.mnc001.mcc001.gprs");
        assert_eq!(u.source_interface, Some(SourceInterface::ACCESS));
        // scapy 2.8: (V4=1, ipv4="10.0.0.3", ASSOSI=1, interface=1)
        let u = check::canonical::<UserPlaneIpResourceInformation>(&hex("410a00000301"));
        assert_eq!(u.source_interface, Some(SourceInterface::CORE));
        assert_eq!(u.network_instance, None);
        // ASSONI and ASSOSI with nothing left for the Source Interface.
        assert_eq!(
            kind::<UserPlaneIpResourceInformation>(&[0x60]),
            ErrorKind::InvalidLength
        );
        assert_eq!(
            kind::<UserPlaneIpResourceInformation>(&hex("250a00")),
            ErrorKind::InvalidLength
        );
    }

    #[test]
    fn remote_gtpu_peer_and_reports() {
        // scapy 2.8: IE_RemoteGTP_U_Peer(V4=1, ipv4="10.0.0.4")
        let p = check::canonical::<RemoteGtpuPeer>(&hex("020a000004"));
        assert_eq!(p.ipv4, Some(Ipv4Addr::new(10, 0, 0, 4)));
        // scapy 2.8: (V4=1, ipv4="10.0.0.4", NI=1, network_instance="internet") with the
        // length corrected: scapy writes 0x0008, the length of the text, not of the 9 octets
        // of labels it emits.
        let p = check::canonical::<RemoteGtpuPeer>(&hex("0a0a000004000908696e7465726e6574"));
        assert_eq!(p.network_instance, Some(NetworkInstance("internet".into())));
        // DI with the two-octet length of §8.2.70 (scapy 2.8 writes a one-octet length).
        let p = check::canonical::<RemoteGtpuPeer>(&hex("060a000004000101"));
        assert_eq!(p.destination_interface, Some(DestinationInterface::CORE));
        assert_eq!(
            kind::<RemoteGtpuPeer>(&hex("060a0000040100")),
            ErrorKind::InvalidLength
        );
        // scapy 2.8: IE_UserPlanePathFailureReport(IE_list=[IE_RemoteGTP_U_Peer(V4=1,
        // ipv4="10.0.0.4")])
        let r = check::canonical::<UserPlanePathFailureReport>(&hex("00670005020a000004"));
        assert_eq!(r.remote_gtpu_peers.len(), 1);
        let r = check::canonical::<UserPlanePathRecoveryReport>(&hex("00670005020a000004"));
        assert_eq!(r.remote_gtpu_peers.len(), 1);
        // scapy 2.8: IE_ErrorIndicationReport(IE_list=[IE_FTEID(V4=1, TEID=0x11223344,
        // ipv4="10.0.0.1")])
        let e = check::canonical::<ErrorIndicationReport>(&hex("0015000901112233440a000001"));
        assert_eq!(
            e.remote_f_teids[0],
            FTeid::Assigned {
                teid: 0x1122_3344,
                ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
                ipv6: None
            }
        );
    }

    #[test]
    fn source_ip_address() {
        // Hand-built per §8.2.138 (V4, MPL): 10.1.0.0/16. Wireshark reads 16 octets for the
        // Mask/Prefix Length; the spec has one.
        let s = check::canonical::<SourceIpAddress>(&hex("060a01000010"));
        assert_eq!(s.ipv4, Some(Ipv4Addr::new(10, 1, 0, 0)));
        assert_eq!(s.mask_prefix_length, Some(16));
        assert_eq!(
            kind::<SourceIpAddress>(&hex("060a010000")),
            ErrorKind::InvalidLength
        );
    }

    proptest! {
        #[test]
        fn roundtrip(a: Timer, b: GracefulReleasePeriod, d: LoadControlInformation,
                     e: OverloadControlInformation, f: UserPlaneIpResourceInformation,
                     g: RemoteGtpuPeer, h: UserPlanePathFailureReport,
                     i: UserPlanePathRecoveryReport, j: ErrorIndicationReport, l: SourceIpAddress) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&d); check::roundtrip(&e);
            check::roundtrip(&f); check::roundtrip(&g); check::roundtrip(&h); check::roundtrip(&i);
            check::roundtrip(&l);
            // An F-TEID with a CHOOSE flag and an address does not roundtrip (see common.rs).
            if j.remote_f_teids.iter().all(|t| matches!(t, FTeid::Assigned { .. })) {
                check::roundtrip(&j);
            }
        }

        #[test]
        fn garbage_never_panics(b: Vec<u8>) {
            let _ = Timer::decode(&b); let _ = GracefulReleasePeriod::decode(&b);
            let _ = LoadControlInformation::decode(&b);
            let _ = OverloadControlInformation::decode(&b);
            let _ = UserPlaneIpResourceInformation::decode(&b); let _ = RemoteGtpuPeer::decode(&b);
            let _ = UserPlanePathFailureReport::decode(&b);
            let _ = UserPlanePathRecoveryReport::decode(&b);
            let _ = ErrorIndicationReport::decode(&b); let _ = SourceIpAddress::decode(&b);
        }

        #[test]
        fn truncations_never_panic(u: UserPlaneIpResourceInformation, r: RemoteGtpuPeer) {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            u.encode(&mut a);
            r.encode(&mut b);
            for bytes in [a, b] {
                for n in 0..bytes.len() {
                    let _ = UserPlaneIpResourceInformation::decode(&bytes[..n]);
                    let _ = RemoteGtpuPeer::decode(&bytes[..n]);
                }
            }
        }
    }
}
