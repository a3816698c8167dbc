//! Usage Reporting Rules (TS 29.244 §5.2.2): Create / Update / Remove / Query URR, the Usage
//! Report the UP function sends back, and the IEs they carry (measurement method, triggers,
//! volumes, times).

use crate::codec::{ie_flags, ie_group, ie_uint, IeValue};
use crate::error::DecodeError;
use crate::ie::common::{FarId, NetworkInstance, UeIpAddress, UrrId};
use crate::tlv::Reader;

ie_group! {
    /// TS 29.244 §7.5.2.4 Create URR (Table 7.5.2.4-1).
    pub struct CreateUrr {
        urr_id: M UrrId = 81,
        measurement_method: M MeasurementMethod = 62,
        reporting_triggers: M ReportingTriggers = 37,
        measurement_period: O MeasurementPeriod = 64,
        volume_threshold: O Volume = 31,
        volume_quota: O Volume = 73,
        time_threshold: O TimeThreshold = 32,
        time_quota: O TimeQuota = 74,
        quota_holding_time: O QuotaHoldingTime = 71,
        dropped_dl_traffic_threshold: O DroppedDlTrafficThreshold = 72,
        quota_validity_time: O QuotaValidityTime = 181,
        monitoring_time: O MonitoringTime = 33,
        subsequent_volume_threshold: O Volume = 34,
        subsequent_time_threshold: O SubsequentTimeThreshold = 35,
        subsequent_volume_quota: O Volume = 121,
        subsequent_time_quota: O SubsequentTimeQuota = 122,
        inactivity_detection_time: O InactivityDetectionTime = 36,
        linked_urr_ids: N LinkedUrrId = 82,
        measurement_information: O MeasurementInformation = 100,
        far_id_for_quota_action: O FarId = 108,
        number_of_reports: O NumberOfReports = 182,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.4 Update URR (Table 7.5.4.4-1): only the IEs that change are present.
    pub struct UpdateUrr {
        urr_id: M UrrId = 81,
        measurement_method: O MeasurementMethod = 62,
        reporting_triggers: O ReportingTriggers = 37,
        measurement_period: O MeasurementPeriod = 64,
        volume_threshold: O Volume = 31,
        volume_quota: O Volume = 73,
        time_threshold: O TimeThreshold = 32,
        time_quota: O TimeQuota = 74,
        quota_holding_time: O QuotaHoldingTime = 71,
        dropped_dl_traffic_threshold: O DroppedDlTrafficThreshold = 72,
        quota_validity_time: O QuotaValidityTime = 181,
        monitoring_time: O MonitoringTime = 33,
        subsequent_volume_threshold: O Volume = 34,
        subsequent_time_threshold: O SubsequentTimeThreshold = 35,
        subsequent_volume_quota: O Volume = 121,
        subsequent_time_quota: O SubsequentTimeQuota = 122,
        inactivity_detection_time: O InactivityDetectionTime = 36,
        linked_urr_ids: N LinkedUrrId = 82,
        measurement_information: O MeasurementInformation = 100,
        far_id_for_quota_action: O FarId = 108,
        number_of_reports: O NumberOfReports = 182,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.8 Remove URR (Table 7.5.4.8-1).
    pub struct RemoveUrr {
        urr_id: M UrrId = 81,
    }
}

ie_group! {
    /// TS 29.244 §7.5.4.10 Query URR (Table 7.5.4.10-1).
    pub struct QueryUrr {
        urr_id: M UrrId = 81,
    }
}

ie_group! {
    /// TS 29.244 Usage Report, one shape carried under three IE types: 78 in a Session
    /// Modification Response (§7.5.5.2), 79 in a Session Deletion Response (§7.5.7.2), 80 in a
    /// Session Report Request (§7.5.8.3, the only one that carries UE IP Address).
    pub struct UsageReport {
        urr_id: M UrrId = 81,
        ur_seqn: M UrSeqn = 104,
        usage_report_trigger: M UsageReportTrigger = 63,
        start_time: O StartTime = 75,
        end_time: O EndTime = 76,
        volume_measurement: O VolumeMeasurement = 66,
        duration_measurement: O DurationMeasurement = 67,
        time_of_first_packet: O TimeOfFirstPacket = 69,
        time_of_last_packet: O TimeOfLastPacket = 70,
        usage_information: O UsageInformation = 90,
        query_urr_reference: O QueryUrrReference = 125,
        ue_ip_address: O UeIpAddress = 93,
        network_instance: O NetworkInstance = 22,
    }
}

ie_flags!(
    /// TS 29.244 §8.2.40 Measurement Method.
    MeasurementMethod(u8), octets = 1..=1 {
        /// Duration.
        DURAT = 0x01,
        /// Volume.
        VOLUM = 0x02,
        /// Events.
        EVENT = 0x04,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.19 Reporting Triggers: what makes the UP function report. Octet 5 is the
    /// low byte, octet 6 the next, octet 7 the next. Rel-15 senders send 2 octets and some send
    /// only 1, so 1 to 3 are accepted; 3 are sent.
    ReportingTriggers(u32), octets = 1..=3 {
        /// Periodic reporting.
        PERIO = 0x00_0001,
        /// Volume threshold reached.
        VOLTH = 0x00_0002,
        /// Time threshold reached.
        TIMTH = 0x00_0004,
        /// No packets for longer than the Quota Holding Time.
        QUHTI = 0x00_0008,
        /// Start of traffic.
        START = 0x00_0010,
        /// Stop of traffic.
        STOPT = 0x00_0020,
        /// Dropped DL traffic threshold reached.
        DROTH = 0x00_0040,
        /// Linked usage reporting.
        LIUSA = 0x00_0080,
        /// Volume quota exhausted.
        VOLQU = 0x00_0100,
        /// Time quota exhausted.
        TIMQU = 0x00_0200,
        /// Envelope closure.
        ENVCL = 0x00_0400,
        /// MAC addresses reporting.
        MACAR = 0x00_0800,
        /// Event threshold reached.
        EVETH = 0x00_1000,
        /// Event quota exhausted.
        EVEQU = 0x00_2000,
        /// IP multicast join/leave.
        IPMJL = 0x00_4000,
        /// Quota validity time expired.
        QUVTI = 0x00_8000,
        /// Report the end marker reception.
        REEMR = 0x01_0000,
        /// User plane inactivity timer expired.
        UPINT = 0x02_0000,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.41 Usage Report Trigger: why a usage report is sent. Octet 5 is the low
    /// byte. Rel-15 defines 2 octets, so 2 or 3 are accepted; 3 are sent.
    UsageReportTrigger(u32), octets = 2..=3 {
        /// Periodic report.
        PERIO = 0x00_0001,
        /// Volume threshold reached.
        VOLTH = 0x00_0002,
        /// Time threshold reached.
        TIMTH = 0x00_0004,
        /// No packets for longer than the Quota Holding Time.
        QUHTI = 0x00_0008,
        /// Start of traffic.
        START = 0x00_0010,
        /// Stop of traffic.
        STOPT = 0x00_0020,
        /// Dropped DL traffic threshold reached.
        DROTH = 0x00_0040,
        /// Immediate report, on CP function demand.
        IMMER = 0x00_0080,
        /// Volume quota exhausted.
        VOLQU = 0x00_0100,
        /// Time quota exhausted.
        TIMQU = 0x00_0200,
        /// Linked usage report.
        LIUSA = 0x00_0400,
        /// Termination report.
        TERMR = 0x00_0800,
        /// Monitoring time reached.
        MONIT = 0x00_1000,
        /// Envelope closure.
        ENVCL = 0x00_2000,
        /// MAC addresses reporting.
        MACAR = 0x00_4000,
        /// Event threshold reached.
        EVETH = 0x00_8000,
        /// Event quota exhausted.
        EVEQU = 0x01_0000,
        /// Termination by UP function report.
        TEBUR = 0x02_0000,
        /// IP multicast join/leave.
        IPMJL = 0x04_0000,
        /// Quota validity time expired.
        QUVTI = 0x08_0000,
        /// End marker reception report.
        EMRRE = 0x10_0000,
        /// User plane inactivity timer expired.
        UPINT = 0x20_0000,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.68 Measurement Information.
    MeasurementInformation(u8), octets = 1..=1 {
        /// Measurement before QoS enforcement.
        MBQE = 0x01,
        /// Inactive measurement.
        INAM = 0x02,
        /// Reduced application detection information.
        RADI = 0x04,
        /// Immediate start time metering.
        ISTM = 0x08,
        /// Measurement of number of packets.
        MNOP = 0x10,
        /// Send start pause of charging.
        SSPOC = 0x20,
        /// Applicable for start pause of charging.
        ASPOC = 0x40,
        /// Control of inactive measurement.
        CIAM = 0x80,
    }
);

ie_flags!(
    /// TS 29.244 §8.2.59 Usage Information: which side of a QoS enforcement or monitoring time
    /// the reported usage lies.
    UsageInformation(u8), octets = 1..=1 {
        /// Usage before the monitoring time.
        BEF = 0x01,
        /// Usage after the monitoring time.
        AFT = 0x02,
        /// Usage after QoS enforcement.
        UAE = 0x04,
        /// Usage before QoS enforcement.
        UBE = 0x08,
    }
);

// ---- Volumes ----

/// Reads the flag octet, then an 8-octet counter for each of the first `N` flag bits set, in
/// bit order (the layout of §8.2.13, §8.2.44 and §8.2.49).
fn read_counters<const N: usize>(value: &[u8]) -> Result<[Option<u64>; N], DecodeError> {
    let mut r = Reader::new(value);
    let flags = r.u8()?;
    let mut out = [None; N];
    let mut bit = 1u8;
    for slot in &mut out {
        *slot = (flags & bit != 0).then(|| r.u64()).transpose()?;
        bit <<= 1;
    }
    Ok(out)
}

/// Writes the flag octet derived from which counters are present, then the counters.
fn write_counters(counters: &[Option<u64>], out: &mut Vec<u8>) {
    let mut flags = 0u8;
    let mut bit = 1u8;
    for c in counters {
        if c.is_some() {
            flags |= bit;
        }
        bit <<= 1;
    }
    out.push(flags);
    for v in counters.iter().flatten() {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// TS 29.244 §8.2.13 Volume Threshold, and the same layout in §8.2.16 Subsequent Volume
/// Threshold, §8.2.50 Volume Quota and §8.2.86 Subsequent Volume Quota: octet counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Volume {
    /// TOVOL: total octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// ULVOL: uplink octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink: Option<u64>,
    /// DLVOL: downlink octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink: Option<u64>,
}

impl IeValue for Volume {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let [total, uplink, downlink] = read_counters(value)?;
        Ok(Self {
            total,
            uplink,
            downlink,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        write_counters(&[self.total, self.uplink, self.downlink], out);
    }
}

/// TS 29.244 §8.2.44 Volume Measurement: octets (TOVOL, ULVOL, DLVOL) and, since Rel-16,
/// packets (TONOP, ULNOP, DLNOP) measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct VolumeMeasurement {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_volume: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink_volume: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink_volume: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink_packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink_packets: Option<u64>,
}

impl IeValue for VolumeMeasurement {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let [total_volume, uplink_volume, downlink_volume, total_packets, uplink_packets, downlink_packets] =
            read_counters(value)?;
        Ok(Self {
            total_volume,
            uplink_volume,
            downlink_volume,
            total_packets,
            uplink_packets,
            downlink_packets,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        write_counters(
            &[
                self.total_volume,
                self.uplink_volume,
                self.downlink_volume,
                self.total_packets,
                self.uplink_packets,
                self.downlink_packets,
            ],
            out,
        );
    }
}

/// TS 29.244 §8.2.49 Dropped DL Traffic Threshold (DLPA: packets, DLBY: octets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct DroppedDlTrafficThreshold {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink_packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downlink_bytes: Option<u64>,
}

impl IeValue for DroppedDlTrafficThreshold {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let [downlink_packets, downlink_bytes] = read_counters(value)?;
        Ok(Self {
            downlink_packets,
            downlink_bytes,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        write_counters(&[self.downlink_packets, self.downlink_bytes], out);
    }
}

// ---- Times and counters ----

ie_uint!(
    /// TS 29.244 §8.2.14 Time Threshold, in seconds.
    TimeThreshold(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.51 Time Quota, in seconds.
    TimeQuota(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.17 Subsequent Time Threshold, in seconds.
    SubsequentTimeThreshold(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.87 Subsequent Time Quota, in seconds.
    SubsequentTimeQuota(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.42 Measurement Period (periodic reporting), in seconds.
    MeasurementPeriod(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.48 Quota Holding Time, in seconds.
    QuotaHoldingTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.18 Inactivity Detection Time, in seconds.
    InactivityDetectionTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.132 Quota Validity Time, in seconds.
    QuotaValidityTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.45 Duration Measurement, in seconds.
    DurationMeasurement(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.15 Monitoring Time: NTP seconds (RFC 5905 timestamp, first 4 octets).
    MonitoringTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.52 Start Time of the reported usage: NTP seconds.
    StartTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.53 End Time of the reported usage: NTP seconds.
    EndTime(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.46 Time of First Packet: NTP seconds.
    TimeOfFirstPacket(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.47 Time of Last Packet: NTP seconds.
    TimeOfLastPacket(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.55 Linked URR ID: a URR whose reports trigger a report of this one.
    LinkedUrrId(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.71 UR-SEQN: sequence number of the usage reports of one URR.
    UrSeqn(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.90 Query URR Reference.
    QueryUrrReference(u32)
);
ie_uint!(
    /// TS 29.244 §8.2.133 Number of Reports (0 is not a valid value, not checked here).
    NumberOfReports(u16)
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check;
    use crate::codec::check::{hex, value_of};
    use proptest::prelude::*;

    fn names<T: IntoIterator<Item = &'static str>>(n: T) -> Vec<&'static str> {
        n.into_iter().collect()
    }

    #[test]
    fn create_urr_as_open5gs_sends_it() {
        // scapy 2.8: IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1, DURAT=1),
        //   IE_ReportingTriggers(volume_threshold=1, time_threshold=1),
        //   IE_VolumeThreshold(TOVOL=1, total=100000000), IE_TimeThreshold(threshold=3600)])
        // Reporting Triggers in the 2-octet form (Rel-15, older Open5GS).
        let two = hex("000600280051000400000001003e000103002500020600001f0009010000000005f5e1000020000400000e10");
        // Same with extra_data=b'\x00' on Reporting Triggers: the 3-octet form (current Open5GS).
        let three = hex("000600290051000400000001003e00010300250003060000001f0009010000000005f5e1000020000400000e10");
        let a = CreateUrr::decode(value_of(&two, 6)).unwrap();
        let b = check::canonical::<CreateUrr>(value_of(&three, 6));
        assert_eq!(a, b);
        assert_eq!(b.urr_id, UrrId(1));
        assert_eq!(
            b.measurement_method,
            MeasurementMethod::VOLUM | MeasurementMethod::DURAT
        );
        assert!(b.measurement_method.contains(MeasurementMethod::VOLUM));
        assert!(!b.measurement_method.contains(MeasurementMethod::EVENT));
        assert_eq!(
            b.reporting_triggers,
            ReportingTriggers::VOLTH | ReportingTriggers::TIMTH
        );
        assert_eq!(
            b.volume_threshold,
            Some(Volume {
                total: Some(100_000_000),
                uplink: None,
                downlink: None
            })
        );
        assert_eq!(b.time_threshold, Some(TimeThreshold(3600)));
        assert_eq!(b.volume_quota, None);
        assert!(b.linked_urr_ids.is_empty());
    }

    #[test]
    fn usage_report_in_session_report_request() {
        // scapy 2.8: IE_UsageReport_SRR(IE_list=[IE_URR_Id(id=1), IE_UR_SEQN(number=3),
        //   IE_UsageReportTrigger(VOLTH=1), IE_StartTime(timestamp=0xe9a1b2c3),
        //   IE_EndTime(timestamp=0xe9a1b2ff), IE_VolumeMeasurement(TOVOL=1, ULVOL=1, DLVOL=1,
        //   total=3000, uplink=1000, downlink=2000), IE_DurationMeasurement(duration=60),
        //   IE_TimeOfFirstPacket(timestamp=0xe9a1b2c4), IE_TimeOfLastPacket(timestamp=0xe9a1b2fe)])
        let tlv = hex("0050005b00510004000000010068000400000003003f00020200004b0004e9a1b2c3004c0004e9a1b2ff00420019070000000000000bb800000000000003e800000000000007d0004300040000003c00450004e9a1b2c400460004e9a1b2fe");
        let u = UsageReport::decode(value_of(&tlv, 80)).unwrap();
        assert_eq!((u.urr_id, u.ur_seqn), (UrrId(1), UrSeqn(3)));
        assert_eq!(u.usage_report_trigger, UsageReportTrigger::VOLTH);
        assert_eq!(u.start_time, Some(StartTime(0xe9a1_b2c3)));
        assert_eq!(u.end_time, Some(EndTime(0xe9a1_b2ff)));
        assert_eq!(
            u.volume_measurement,
            Some(VolumeMeasurement {
                total_volume: Some(3000),
                uplink_volume: Some(1000),
                downlink_volume: Some(2000),
                ..Default::default()
            })
        );
        assert_eq!(u.duration_measurement, Some(DurationMeasurement(60)));
        assert_eq!(u.time_of_first_packet, Some(TimeOfFirstPacket(0xe9a1_b2c4)));
        assert_eq!(u.time_of_last_packet, Some(TimeOfLastPacket(0xe9a1_b2fe)));
        assert_eq!(u.ue_ip_address, None);
        check::roundtrip(&u);
        // UR-SEQN is mandatory.
        let e = UsageReport::decode(&hex("0051000400000001003f00020200")).unwrap_err();
        assert_eq!(e.offending_ie(), Some(104));
    }

    #[test]
    fn update_remove_query_urr() {
        // scapy 2.8: IE_UpdateURR(IE_list=[IE_URR_Id(id=2), IE_TimeQuota(quota=600),
        //   IE_LinkedURR_Id(id=3), IE_LinkedURR_Id(id=4)])
        let tlv = hex("000d00200051000400000002004a00040000025800520004000000030052000400000004");
        let u = check::canonical::<UpdateUrr>(value_of(&tlv, 13));
        assert_eq!(u.time_quota, Some(TimeQuota(600)));
        assert_eq!(&u.linked_urr_ids[..], &[LinkedUrrId(3), LinkedUrrId(4)]);
        assert_eq!(u.reporting_triggers, None);
        // scapy 2.8: IE_RemoveURR(IE_list=[IE_URR_Id(id=2)]), IE_QueryURR(IE_list=[IE_URR_Id(id=2)])
        let r = check::canonical::<RemoveUrr>(value_of(&hex("001100080051000400000002"), 17));
        assert_eq!(r.urr_id, UrrId(2));
        let q = check::canonical::<QueryUrr>(value_of(&hex("004d00080051000400000002"), 77));
        assert_eq!(q.urr_id, UrrId(2));
    }

    #[test]
    fn volume_vectors() {
        // scapy 2.8: IE_VolumeThreshold(TOVOL=1, ULVOL=1, DLVOL=1, total=3, uplink=1, downlink=2)
        let tlv = hex("001f001907000000000000000300000000000000010000000000000002");
        let v = check::canonical::<Volume>(value_of(&tlv, 31));
        assert_eq!((v.total, v.uplink, v.downlink), (Some(3), Some(1), Some(2)));
        // scapy 2.8: IE_VolumeQuota(DLVOL=1, downlink=0x1122334455667788)
        let v = check::canonical::<Volume>(value_of(&hex("00490009041122334455667788"), 73));
        assert_eq!((v.total, v.downlink), (None, Some(0x1122_3344_5566_7788)));
        // scapy 2.8: IE_DroppedDLTrafficThreshold(DLPA=1, DLBY=1, packet_count=10, byte_count=20000)
        let tlv = hex("0048001103000000000000000a0000000000004e20");
        let d = check::canonical::<DroppedDlTrafficThreshold>(value_of(&tlv, 72));
        assert_eq!(
            (d.downlink_packets, d.downlink_bytes),
            (Some(10), Some(20_000))
        );
    }

    #[test]
    fn volume_measurement_with_packet_counts() {
        // Hand-built per Figure 8.2.44-1 (scapy 2.8 lacks TONOP/ULNOP/DLNOP): ULVOL, DLNOP.
        let mut bytes = vec![0x22];
        bytes.extend_from_slice(&500u64.to_be_bytes());
        bytes.extend_from_slice(&7u64.to_be_bytes());
        let v = check::canonical::<VolumeMeasurement>(&bytes);
        assert_eq!(v.uplink_volume, Some(500));
        assert_eq!(v.downlink_packets, Some(7));
        assert_eq!((v.total_volume, v.total_packets), (None, None));
    }

    #[test]
    fn volume_leniency() {
        // Spare flag bits and octets after the known fields are ignored.
        let v = Volume::decode(&[0xf8, 1, 2]).unwrap();
        assert_eq!(v, Volume::default());
        let v = Volume::decode(&[0x01, 0, 0, 0, 0, 0, 0, 0, 5, 0xaa]).unwrap();
        assert_eq!(v.total, Some(5));
        // A flagged counter that is missing is an error.
        assert!(Volume::decode(&[0x02, 0, 0, 0]).is_err());
        assert!(VolumeMeasurement::decode(&[]).is_err());
    }

    #[test]
    fn flag_vectors() {
        // scapy 2.8: IE_ReportingTriggers(periodic_reporting=1, linked_usage_reporting=1,
        //   volume_quota=1, event_quota=1) -> 2-octet form
        let r = ReportingTriggers::decode(value_of(&hex("002500028121"), 37)).unwrap();
        assert_eq!(names(r.names()), ["PERIO", "LIUSA", "VOLQU", "EVEQU"]);
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out, [0x81, 0x21, 0x00]);
        // scapy 2.8: IE_UsageReportTrigger(VOLTH=1, IMMER=1, VOLQU=1, EVETH=1) -> 2-octet form
        let u = UsageReportTrigger::decode(value_of(&hex("003f00028281"), 63)).unwrap();
        assert_eq!(names(u.names()), ["VOLTH", "IMMER", "VOLQU", "EVETH"]);
        // scapy 2.8: IE_MeasurementMethod(EVENT=1)
        let m = check::canonical::<MeasurementMethod>(value_of(&hex("003e000104"), 62));
        assert_eq!(m, MeasurementMethod::EVENT);
        // scapy 2.8: IE_MeasurementInformation(MBQE=1, ISTM=1)
        let m = check::canonical::<MeasurementInformation>(value_of(&hex("0064000109"), 100));
        assert_eq!(
            m,
            MeasurementInformation::MBQE | MeasurementInformation::ISTM
        );
        // scapy 2.8: IE_UsageInformation(BEF=1, UAE=1)
        let i = check::canonical::<UsageInformation>(value_of(&hex("005a000105"), 90));
        assert_eq!(names(i.names()), ["BEF", "UAE"]);
    }

    #[test]
    fn third_octet_flags() {
        // Figure 8.2.19-1 octet 7: REEMR bit 1, UPINT bit 2 (scapy 2.8 stops at octet 6).
        let r = check::canonical::<ReportingTriggers>(&[0x00, 0x80, 0x03]);
        assert_eq!(names(r.names()), ["QUVTI", "REEMR", "UPINT"]);
        // Figure 8.2.41-1 octet 7: EVEQU TEBUR IPMJL QUVTI EMRRE UPINT in bits 1 to 6.
        let u = check::canonical::<UsageReportTrigger>(&[0x00, 0x00, 0x3f]);
        assert_eq!(
            names(u.names()),
            ["EVEQU", "TEBUR", "IPMJL", "QUVTI", "EMRRE", "UPINT"]
        );
    }

    #[test]
    fn flag_leniency() {
        // Reporting Triggers: 1, 2 or 3 octets accepted, none is an error; octet 8 on ignored.
        assert_eq!(
            ReportingTriggers::decode(&[0x02]).unwrap(),
            ReportingTriggers::VOLTH
        );
        assert_eq!(
            ReportingTriggers::decode(&[0x02, 0x01]).unwrap(),
            ReportingTriggers::VOLTH | ReportingTriggers::VOLQU
        );
        assert_eq!(
            ReportingTriggers::decode(&[0x00, 0x00, 0x01, 0xff]).unwrap(),
            ReportingTriggers::REEMR
        );
        assert!(ReportingTriggers::decode(&[]).is_err());
        // Spare bits of octet 7 are ignored.
        assert!(ReportingTriggers::decode(&[0, 0, 0xfc]).unwrap().is_empty());
        // Usage Report Trigger: 2 or 3 octets; 1 is an error.
        assert_eq!(
            UsageReportTrigger::decode(&[0x80, 0x00]).unwrap(),
            UsageReportTrigger::IMMER
        );
        assert!(UsageReportTrigger::decode(&[0x80]).is_err());
        assert!(UsageReportTrigger::decode(&[0, 0, 0xc0])
            .unwrap()
            .is_empty());
        // Spare bits of one-octet sets are ignored; encode sends them as zero.
        let m = MeasurementMethod::decode(&[0xfb]).unwrap();
        assert_eq!(m, MeasurementMethod::DURAT | MeasurementMethod::VOLUM);
        let mut out = Vec::new();
        MeasurementMethod::from_bits_retain(0xff).encode(&mut out);
        assert_eq!(out, [0x07]);
        assert_eq!(
            UsageInformation::decode(&[0xf2]).unwrap(),
            UsageInformation::AFT
        );
    }

    #[test]
    fn small_ie_vectors() {
        // TS 29.244 §8.2.133: Unsigned16; §8.2.71: Unsigned32. Hand-built.
        assert_eq!(
            check::canonical::<NumberOfReports>(&[0, 3]),
            NumberOfReports(3)
        );
        assert_eq!(check::canonical::<UrSeqn>(&[0, 0, 1, 0]), UrSeqn(256));
        assert!(QuotaValidityTime::decode(&[0, 0, 1]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip_create(c: CreateUrr) { check::roundtrip(&c); }

        #[test]
        fn roundtrip_update(u: UpdateUrr) { check::roundtrip(&u); }

        #[test]
        fn roundtrip_usage_report(ur: UsageReport) { check::roundtrip(&ur); }

        #[test]
        fn roundtrip_remove_query(r: RemoveUrr, q: QueryUrr) {
            check::roundtrip(&r); check::roundtrip(&q);
        }

        #[test]
        fn roundtrip_values(
            a: MeasurementMethod, b: ReportingTriggers, c: UsageReportTrigger,
            d: MeasurementInformation, e: UsageInformation, f: Volume, g: VolumeMeasurement,
            h: DroppedDlTrafficThreshold,
        ) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
            check::roundtrip(&d); check::roundtrip(&e); check::roundtrip(&f);
            check::roundtrip(&g); check::roundtrip(&h);
        }

        #[test]
        fn roundtrip_uints(
            a: TimeThreshold, b: TimeQuota, c: SubsequentTimeThreshold, d: SubsequentTimeQuota,
            e: MeasurementPeriod, f: QuotaHoldingTime, g: InactivityDetectionTime,
            h: QuotaValidityTime, i: DurationMeasurement,
        ) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
            check::roundtrip(&d); check::roundtrip(&e); check::roundtrip(&f);
            check::roundtrip(&g); check::roundtrip(&h); check::roundtrip(&i);
        }

        #[test]
        fn roundtrip_stamps(
            a: MonitoringTime, b: StartTime, c: EndTime, d: TimeOfFirstPacket,
            e: TimeOfLastPacket, f: LinkedUrrId, g: UrSeqn, h: QueryUrrReference,
            i: NumberOfReports,
        ) {
            check::roundtrip(&a); check::roundtrip(&b); check::roundtrip(&c);
            check::roundtrip(&d); check::roundtrip(&e); check::roundtrip(&f);
            check::roundtrip(&g); check::roundtrip(&h); check::roundtrip(&i);
        }

        #[test]
        fn garbage_never_panics(v: Vec<u8>) {
            let _ = CreateUrr::decode(&v); let _ = UpdateUrr::decode(&v);
            let _ = RemoveUrr::decode(&v); let _ = QueryUrr::decode(&v);
            let _ = UsageReport::decode(&v); let _ = MeasurementMethod::decode(&v);
            let _ = ReportingTriggers::decode(&v); let _ = UsageReportTrigger::decode(&v);
            let _ = MeasurementInformation::decode(&v); let _ = UsageInformation::decode(&v);
            let _ = Volume::decode(&v); let _ = VolumeMeasurement::decode(&v);
            let _ = DroppedDlTrafficThreshold::decode(&v); let _ = TimeThreshold::decode(&v);
            let _ = NumberOfReports::decode(&v); let _ = StartTime::decode(&v);
        }
    }
}
