//! Buffering Action Rules and downlink data reporting: Create / Update / Remove BAR, the
//! buffering parameters, and the Downlink Data Report (TS 29.244 §5.2.4, §7.5.2.6, §7.5.4.11,
//! §7.5.4.12, §7.5.8.2, §7.5.9.2).

use crate::codec::ie_flags;
use crate::codec::{ie_group, ie_uint, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{BarId, PdrId};
use crate::tlv::Reader;

ie_group! {
    /// TS 29.244 §7.5.2.6 Create BAR (Table 7.5.2.6-1).
    pub struct CreateBar {
        bar_id: M BarId = 88,
        downlink_data_notification_delay: O DownlinkDataNotificationDelay = 46,
        suggested_buffering_packets_count: O SuggestedBufferingPacketsCount = 140,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.11 Update BAR within the PFCP Session Modification Request
    /// (Table 7.5.4.11-1).
    pub struct UpdateBarSessionModification {
        bar_id: M BarId = 88,
        downlink_data_notification_delay: O DownlinkDataNotificationDelay = 46,
        suggested_buffering_packets_count: O SuggestedBufferingPacketsCount = 140,
    }
}

ie_group! {
    /// TS 29.244 §7.5.9.2 Update BAR within the PFCP Session Report Response (Table 7.5.9.2-1).
    pub struct UpdateBarSessionReportResponse {
        bar_id: M BarId = 88,
        downlink_data_notification_delay: O DownlinkDataNotificationDelay = 46,
        dl_buffering_duration: O DlBufferingDuration = 47,
        dl_buffering_suggested_packet_count: O DlBufferingSuggestedPacketCount = 48,
        suggested_buffering_packets_count: O SuggestedBufferingPacketsCount = 140,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.12 Remove BAR (Table 7.5.4.12-1).
    pub struct RemoveBar {
        bar_id: M BarId = 88,
    }
}

ie_group! {
    /// TS 29.244 §7.5.8.2 Downlink Data Report (Table 7.5.8.2-1), in a Session Report Request.
    pub struct DownlinkDataReport {
        /// The PDRs that matched the buffered downlink packets.
        pdr_ids: N PdrId = 56,
        downlink_data_service_information: N DownlinkDataServiceInformation = 45,
    }
}

ie_uint!(
    /// TS 29.244 §8.2.28 Downlink Data Notification Delay, in units of 50 ms (0 clears it).
    DownlinkDataNotificationDelay(u8)
);

impl DownlinkDataNotificationDelay {
    pub fn as_millis(self) -> u32 {
        u32::from(self.0) * 50
    }
}

ie_uint!(
    /// TS 29.244 §8.2.100 Suggested Buffering Packets Count.
    SuggestedBufferingPacketsCount(u8)
);

/// TS 29.244 §8.2.29 DL Buffering Duration: a timer unit (3 bits) and value (5 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct DlBufferingDuration {
    #[cfg_attr(test, proptest(strategy = "0u8..8"))]
    pub unit: u8,
    #[cfg_attr(test, proptest(strategy = "0u8..32"))]
    pub value: u8,
}

impl DlBufferingDuration {
    pub const UNIT_2_SECONDS: u8 = 0;
    pub const UNIT_1_MINUTE: u8 = 1;
    pub const UNIT_10_MINUTES: u8 = 2;
    pub const UNIT_1_HOUR: u8 = 3;
    pub const UNIT_10_HOURS: u8 = 4;
    pub const UNIT_INFINITE: u8 = 7;

    /// The duration in seconds; `None` when infinite. Unit and value both zero (timer stopped)
    /// give `Some(0)`.
    pub fn as_secs(self) -> Option<u64> {
        let step = match self.unit {
            Self::UNIT_2_SECONDS => 2,
            Self::UNIT_10_MINUTES => 600,
            Self::UNIT_1_HOUR => 3600,
            Self::UNIT_10_HOURS => 36_000,
            Self::UNIT_INFINITE => return None,
            // §8.2.29: other units (1, 5, 6) are read as 1 minute.
            _ => 60,
        };
        Some(step * u64::from(self.value))
    }
}

impl IeValue for DlBufferingDuration {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let o = Reader::new(value).u8()?;
        Ok(Self {
            unit: o >> 5,
            value: o & 0x1f,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push((self.unit & 0x07) << 5 | self.value & 0x1f);
    }
}

/// TS 29.244 §8.2.30 DL Buffering Suggested Packet Count: an integer of 1 or 2 octets (the IE
/// length says which). Encoded in 1 octet when it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct DlBufferingSuggestedPacketCount(pub u16);

impl IeValue for DlBufferingSuggestedPacketCount {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        match *value {
            [] => Err(DecodeError::invalid_length("packet count without octets")),
            [a] => Ok(Self(a.into())),
            [a, b, ..] => Ok(Self(u16::from_be_bytes([a, b]))),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        match u8::try_from(self.0) {
            Ok(a) => out.push(a),
            Err(_) => out.extend_from_slice(&self.0.to_be_bytes()),
        }
    }
}

/// TS 29.244 §8.2.27 Downlink Data Service Information: what the buffered downlink packet
/// carried, for paging differentiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct DownlinkDataServiceInformation {
    /// 6 bits: the DSCP of the packet (PPI flag).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(0u8..64)"))]
    pub paging_policy_indication: Option<u8>,
    /// 6 bits: the QoS flow of the packet (QFII flag).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(0u8..64)"))]
    pub qfi: Option<u8>,
}

const PPI: u8 = 0x01;
const QFII: u8 = 0x02;

impl IeValue for DownlinkDataServiceInformation {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(value);
        let flags = r.u8()?;
        // §8.2.27: each value sits in its own octet, after the flags, when its flag is set.
        let paging_policy_indication = r.u8_if(flags & PPI != 0)?.map(|v| v & 0x3f);
        let qfi = r.u8_if(flags & QFII != 0)?.map(|v| v & 0x3f);
        Ok(Self {
            paging_policy_indication,
            qfi,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        let flag = |v: Option<u8>, bit| if v.is_some() { bit } else { 0 };
        out.push(flag(self.paging_policy_indication, PPI) | flag(self.qfi, QFII));
        out.extend(self.paging_policy_indication.map(|v| v & 0x3f));
        out.extend(self.qfi.map(|v| v & 0x3f));
    }
}

ie_flags!(
    /// TS 29.244 §8.2.32 PFCPSRRsp-Flags.
    PfcpSrRspFlags(u8), octets = 1..=1 {
        /// Drop the packets buffered for this session.
        DROBU = 0x01,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::codec::check::{hex, value_of};
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn grouped_vectors() {
        // scapy 2.8: IE_Create_BAR(IE_list=[IE_BAR_Id(id=1),
        //   IE_DownlinkDataNotificationDelay(delay=4), IE_SuggestedBufferingPacketsCount(count=10)])
        let tlv = hex("0055000f0058000101002e000104008c00010a");
        let b = check::canonical::<CreateBar>(value_of(&tlv, 85));
        assert_eq!(b.bar_id, BarId(1));
        assert_eq!(b.downlink_data_notification_delay.unwrap().as_millis(), 200);
        assert_eq!(
            b.suggested_buffering_packets_count,
            Some(SuggestedBufferingPacketsCount(10))
        );

        // scapy 2.8: IE_Update_BAR_SMR(IE_list=[IE_BAR_Id(id=1),
        //   IE_SuggestedBufferingPacketsCount(count=20)])
        let tlv = hex("0056000a0058000101008c000114");
        let u = check::canonical::<UpdateBarSessionModification>(value_of(&tlv, 86));
        assert_eq!(u.downlink_data_notification_delay, None);
        assert_eq!(
            u.suggested_buffering_packets_count,
            Some(SuggestedBufferingPacketsCount(20))
        );

        // scapy 2.8: IE_UpdateBAR_SRR(IE_list=[IE_BAR_Id(id=1),
        //   IE_DownlinkDataNotificationDelay(delay=2), IE_DLBufferingDuration(timer_unit=1,
        //   timer_value=5), IE_DLBufferingSuggestedPacketCount(count=300),
        //   IE_SuggestedBufferingPacketsCount(count=7)])
        let tlv = hex("000c001a0058000101002e000102002f00012500300002012c008c000107");
        let u = check::canonical::<UpdateBarSessionReportResponse>(value_of(&tlv, 12));
        assert_eq!(u.dl_buffering_duration.unwrap().as_secs(), Some(300));
        assert_eq!(
            u.dl_buffering_suggested_packet_count,
            Some(DlBufferingSuggestedPacketCount(300))
        );

        // scapy 2.8: IE_Remove_BAR(IE_list=[IE_BAR_Id(id=1)])
        let r = check::canonical::<RemoveBar>(value_of(&hex("005700050058000101"), 87));
        assert_eq!(r.bar_id, BarId(1));
        let e = RemoveBar::decode(&[]).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (ErrorKind::MissingMandatory, Some(88))
        );

        // scapy 2.8: IE_DownlinkDataReport(IE_list=[IE_PDR_Id(id=1), IE_PDR_Id(id=2),
        //   IE_DownlinkDataServiceInformation(QFII=1, qfi_val=5)])
        let tlv = hex("00530012003800020001003800020002002d00020205");
        let d = check::canonical::<DownlinkDataReport>(value_of(&tlv, 83));
        assert_eq!(&d.pdr_ids[..], &[PdrId(1), PdrId(2)]);
        assert_eq!(d.downlink_data_service_information[0].qfi, Some(5));
    }

    #[test]
    fn buffering_parameter_vectors() {
        // scapy 2.8: IE_DownlinkDataNotificationDelay(delay=3)
        let d = check::canonical::<DownlinkDataNotificationDelay>(value_of(&hex("002e000103"), 46));
        assert_eq!(d.as_millis(), 150);
        // scapy 2.8: IE_SuggestedBufferingPacketsCount(count=42)
        let s =
            check::canonical::<SuggestedBufferingPacketsCount>(value_of(&hex("008c00012a"), 140));
        assert_eq!(s.0, 42);
        // scapy 2.8: IE_DLBufferingDuration(timer_unit=3, timer_value=2): 2 hours.
        let b = check::canonical::<DlBufferingDuration>(value_of(&hex("002f000162"), 47));
        assert_eq!((b.unit, b.value, b.as_secs()), (3, 2, Some(7200)));
        // scapy 2.8: IE_DLBufferingDuration(timer_unit=7, timer_value=0): infinite.
        let b = check::canonical::<DlBufferingDuration>(value_of(&hex("002f0001e0"), 47));
        assert_eq!(b.as_secs(), None);
        // Units 5 and 6 count in minutes; all zeros means stopped.
        let b = DlBufferingDuration { unit: 5, value: 3 };
        assert_eq!(b.as_secs(), Some(180));
        assert_eq!(DlBufferingDuration::default().as_secs(), Some(0));
        assert_eq!(
            DlBufferingDuration { unit: 2, value: 31 }.as_secs(),
            Some(18_600)
        );
        assert!(DlBufferingDuration::decode(&[]).is_err());
    }

    #[test]
    fn suggested_packet_count_one_or_two_octets() {
        // scapy 2.8: IE_DLBufferingSuggestedPacketCount(count=100) and (count=1000)
        let c =
            check::canonical::<DlBufferingSuggestedPacketCount>(value_of(&hex("0030000164"), 48));
        assert_eq!(c.0, 100);
        let c =
            check::canonical::<DlBufferingSuggestedPacketCount>(value_of(&hex("0030000203e8"), 48));
        assert_eq!(c.0, 1000);
        // Leniency: a small count sent in 2 octets; re-encoded in one.
        let c = DlBufferingSuggestedPacketCount::decode(&[0x00, 0x64]).unwrap();
        assert_eq!(c.0, 100);
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(out, [0x64]);
        assert!(DlBufferingSuggestedPacketCount::decode(&[]).is_err());
    }

    #[test]
    fn downlink_data_service_information_vectors() {
        // scapy 2.8: IE_DownlinkDataServiceInformation(PPI=1, QFII=1, ppi_val=0x2e, qfi_val=9)
        let d = check::canonical::<DownlinkDataServiceInformation>(value_of(
            &hex("002d0003032e09"),
            45,
        ));
        assert_eq!((d.paging_policy_indication, d.qfi), (Some(0x2e), Some(9)));
        // scapy 2.8: IE_DownlinkDataServiceInformation(QFII=1, qfi_val=5)
        let d =
            check::canonical::<DownlinkDataServiceInformation>(value_of(&hex("002d00020205"), 45));
        assert_eq!((d.paging_policy_indication, d.qfi), (None, Some(5)));
        // Flags promise a value that is absent.
        let e = DownlinkDataServiceInformation::decode(&[0x03, 0x2e]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidLength);
        // Spare bits are accepted and dropped.
        let d = DownlinkDataServiceInformation::decode(&[0xfe, 0xc5]).unwrap();
        assert_eq!((d.paging_policy_indication, d.qfi), (None, Some(5)));
    }

    #[test]
    fn sr_rsp_flags() {
        // scapy 2.8: IE_PFCPSRRspFlags(DROBU=1)
        let f = check::canonical::<PfcpSrRspFlags>(value_of(&hex("0032000101"), 50));
        assert!(f.contains(PfcpSrRspFlags::DROBU));
        assert_eq!(f.names().collect::<Vec<_>>(), ["DROBU"]);
        assert_eq!(
            PfcpSrRspFlags::decode(&[0xfe]).unwrap(),
            PfcpSrRspFlags::empty()
        );
    }

    proptest! {
        #[test]
        fn roundtrip_groups(a: CreateBar, b: UpdateBarSessionModification,
                            c: UpdateBarSessionReportResponse, d: RemoveBar,
                            e: DownlinkDataReport) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
            check::roundtrip(&d); check::roundtrip(&e);
        }

        #[test]
        fn roundtrip_ies(a: DownlinkDataNotificationDelay, b: DlBufferingDuration,
                         c: DlBufferingSuggestedPacketCount, d: SuggestedBufferingPacketsCount,
                         e: DownlinkDataServiceInformation, f: PfcpSrRspFlags) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
            check::roundtrip(&d); check::roundtrip(&e); check::roundtrip(&f);
        }

        #[test]
        fn garbage_never_panics(v: Vec<u8>) {
            let _ = CreateBar::decode(&v); let _ = UpdateBarSessionModification::decode(&v);
            let _ = UpdateBarSessionReportResponse::decode(&v); let _ = RemoveBar::decode(&v);
            let _ = DownlinkDataReport::decode(&v);
            let _ = DownlinkDataNotificationDelay::decode(&v);
            let _ = DlBufferingDuration::decode(&v);
            let _ = DlBufferingSuggestedPacketCount::decode(&v);
            let _ = SuggestedBufferingPacketsCount::decode(&v);
            let _ = DownlinkDataServiceInformation::decode(&v);
            let _ = PfcpSrRspFlags::decode(&v);
        }
    }
}
