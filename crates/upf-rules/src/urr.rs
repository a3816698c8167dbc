//! Usage Reporting Rules (TS 29.244 §5.2.2.3, §7.5.2.4) and the usage reports they produce.

use crate::flags::flags;
use crate::ids::{FarId, Seid, UrrId};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::time::{Duration, Instant};

flags!(
    /// Measurement Method (§8.2.40).
    MeasurementMethod(u8) {
        DURAT = 0x01,
        VOLUM = 0x02,
        EVENT = 0x04,
    }
);

flags!(
    /// Reporting Triggers (§8.2.19); octet 5 is the low byte.
    ReportingTriggers(u32) {
        PERIO = 0x00_0001,
        VOLTH = 0x00_0002,
        TIMTH = 0x00_0004,
        QUHTI = 0x00_0008,
        START = 0x00_0010,
        STOPT = 0x00_0020,
        DROTH = 0x00_0040,
        LIUSA = 0x00_0080,
        VOLQU = 0x00_0100,
        TIMQU = 0x00_0200,
        ENVCL = 0x00_0400,
        MACAR = 0x00_0800,
        EVETH = 0x00_1000,
        EVEQU = 0x00_2000,
        IPMJL = 0x00_4000,
        QUVTI = 0x00_8000,
        REEMR = 0x01_0000,
        UPINT = 0x02_0000,
    }
);

flags!(
    /// Usage Report Trigger (§8.2.41): why a report is sent; octet 5 is the low byte.
    UsageTrigger(u32) {
        PERIO = 0x00_0001,
        VOLTH = 0x00_0002,
        TIMTH = 0x00_0004,
        QUHTI = 0x00_0008,
        START = 0x00_0010,
        STOPT = 0x00_0020,
        DROTH = 0x00_0040,
        IMMER = 0x00_0080,
        VOLQU = 0x00_0100,
        TIMQU = 0x00_0200,
        LIUSA = 0x00_0400,
        TERMR = 0x00_0800,
        MONIT = 0x00_1000,
        ENVCL = 0x00_2000,
        MACAR = 0x00_4000,
        EVETH = 0x00_8000,
        EVEQU = 0x01_0000,
        TEBUR = 0x02_0000,
        IPMJL = 0x04_0000,
        QUVTI = 0x08_0000,
        EMRRE = 0x10_0000,
        UPINT = 0x20_0000,
    }
);

flags!(
    /// Measurement Information (§8.2.68).
    MeasurementInfo(u8) {
        MBQE = 0x01,
        INAM = 0x02,
        RADI = 0x04,
        ISTM = 0x08,
        MNOP = 0x10,
    }
);

flags!(
    /// Usage Information (§8.2.59): which side of the Monitoring Time a report's usage lies.
    UsageInformation(u8) {
        BEF = 0x01,
        AFT = 0x02,
    }
);

/// A URR's use of its Volume Quota since the grant, octets each way, as the session moves
/// between engines: the engine it enters goes on from it (not from 0, which would grant the
/// quota again), exhausted when it reaches the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaUse {
    pub urr: UrrId,
    pub total: u64,
    pub uplink: u64,
    pub downlink: u64,
}

/// A volume threshold or quota (§8.2.13 / §8.2.50), bytes; each part optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct VolumeLimit {
    pub total: Option<u64>,
    pub uplink: Option<u64>,
    pub downlink: Option<u64>,
}

impl VolumeLimit {
    /// Whether `used` reaches any part of the limit.
    pub fn reached_by(&self, used: &Volume) -> bool {
        self.total.is_some_and(|t| used.total_bytes >= t)
            || self.uplink.is_some_and(|t| used.uplink_bytes >= t)
            || self.downlink.is_some_and(|t| used.downlink_bytes >= t)
    }
}

/// Measured traffic (§8.2.44 Volume Measurement, with packet counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Volume {
    pub total_bytes: u64,
    pub uplink_bytes: u64,
    pub downlink_bytes: u64,
    pub total_packets: u64,
    pub uplink_packets: u64,
    pub downlink_packets: u64,
}

impl Volume {
    /// Counts one packet of `bytes` in the given direction.
    pub fn count(&mut self, bytes: u64, uplink: bool) {
        self.total_bytes += bytes;
        self.total_packets += 1;
        if uplink {
            self.uplink_bytes += bytes;
            self.uplink_packets += 1;
        } else {
            self.downlink_bytes += bytes;
            self.downlink_packets += 1;
        }
    }

    /// What was counted since `earlier`, a reading of the same counters (field by field,
    /// never below zero).
    pub fn since(&self, earlier: &Volume) -> Volume {
        Volume {
            total_bytes: self.total_bytes.saturating_sub(earlier.total_bytes),
            uplink_bytes: self.uplink_bytes.saturating_sub(earlier.uplink_bytes),
            downlink_bytes: self.downlink_bytes.saturating_sub(earlier.downlink_bytes),
            total_packets: self.total_packets.saturating_sub(earlier.total_packets),
            uplink_packets: self.uplink_packets.saturating_sub(earlier.uplink_packets),
            downlink_packets: self
                .downlink_packets
                .saturating_sub(earlier.downlink_packets),
        }
    }

    pub fn add(&mut self, o: &Volume) {
        self.total_bytes += o.total_bytes;
        self.uplink_bytes += o.uplink_bytes;
        self.downlink_bytes += o.downlink_bytes;
        self.total_packets += o.total_packets;
        self.uplink_packets += o.uplink_packets;
        self.downlink_packets += o.downlink_packets;
    }
}

/// A Usage Reporting Rule. Times are whole seconds as on the wire. What few URRs use lives
/// in [`UrrExtra`], boxed, so that a session's URRs stay small.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Urr {
    pub id: UrrId,
    pub method: MeasurementMethod,
    pub triggers: ReportingTriggers,
    pub info: MeasurementInfo,
    pub measurement_period_s: Option<u32>,
    pub volume_threshold: Option<VolumeLimit>,
    pub volume_quota: Option<VolumeLimit>,
    pub time_threshold_s: Option<u32>,
    pub time_quota_s: Option<u32>,
    pub quota_holding_time_s: Option<u32>,
    pub inactivity_detection_time_s: Option<u32>,
    pub extra: Option<Box<UrrExtra>>,
}

/// The less common parts of a URR.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UrrExtra {
    pub quota_validity_time_s: Option<u32>,
    /// Dropped DL traffic threshold in packets / bytes (§8.2.49).
    pub dropped_dl_threshold: Option<(Option<u64>, Option<u64>)>,
    /// Monitoring Time (§5.2.2.3.1; NTP seconds on the wire) and the thresholds/quotas
    /// that apply after it.
    #[serde(skip)]
    pub monitoring_time: Option<Instant>,
    pub subsequent_volume_threshold: Option<VolumeLimit>,
    pub subsequent_volume_quota: Option<VolumeLimit>,
    pub subsequent_time_threshold_s: Option<u32>,
    pub subsequent_time_quota_s: Option<u32>,
    pub linked_urrs: SmallVec<[UrrId; 1]>,
    /// FAR applied when a quota is exhausted (§5.2.2.3.1), instead of dropping.
    pub far_for_quota_action: Option<FarId>,
    pub number_of_reports: Option<u16>,
}

impl Urr {
    /// A URR measuring volume and duration with no trigger.
    pub fn new(id: UrrId) -> Self {
        Self {
            id,
            method: MeasurementMethod::VOLUM.union(MeasurementMethod::DURAT),
            triggers: ReportingTriggers::default(),
            info: MeasurementInfo::default(),
            measurement_period_s: None,
            volume_threshold: None,
            volume_quota: None,
            time_threshold_s: None,
            time_quota_s: None,
            quota_holding_time_s: None,
            inactivity_detection_time_s: None,
            extra: None,
        }
    }

    /// The extra part, created on first use.
    pub fn extra_mut(&mut self) -> &mut UrrExtra {
        self.extra.get_or_insert_with(Default::default)
    }

    pub fn linked_urrs(&self) -> &[UrrId] {
        self.extra.as_ref().map_or(&[], |e| &e.linked_urrs)
    }

    pub fn far_for_quota_action(&self) -> Option<FarId> {
        self.extra.as_ref().and_then(|e| e.far_for_quota_action)
    }
}

/// Usage measured by one URR since its previous report (TS 29.244 §7.5.8.3), as the data
/// path hands it to the agent. The agent numbers reports (UR-SEQN) and converts times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UsageReport {
    pub seid: Seid,
    pub urr: UrrId,
    pub trigger: UsageTrigger,
    #[serde(skip)]
    pub start: Option<Instant>,
    #[serde(skip)]
    pub end: Instant,
    pub volume: Volume,
    pub duration: Duration,
    #[serde(skip)]
    pub first_packet: Option<Instant>,
    #[serde(skip)]
    pub last_packet: Option<Instant>,
    /// BEF / AFT: the usage before / after a Monitoring Time, in the first report after it.
    pub usage_information: UsageInformation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_limits() {
        let mut v = Volume::default();
        v.count(1000, true);
        v.count(500, false);
        assert_eq!(
            (v.total_bytes, v.uplink_packets, v.downlink_bytes),
            (1500, 1, 500)
        );
        let lim = VolumeLimit {
            downlink: Some(500),
            ..Default::default()
        };
        assert!(lim.reached_by(&v));
        assert!(!VolumeLimit {
            total: Some(1501),
            ..Default::default()
        }
        .reached_by(&v));
        assert!(!VolumeLimit::default().reached_by(&v));
    }
}
