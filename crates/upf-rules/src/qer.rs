//! QoS Enforcement Rules (TS 29.244 §5.2.2, §7.5.2.5).

use crate::ids::{QerId, Qfi};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Gate status of one direction (§8.2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Gate {
    #[default]
    Open,
    Closed,
}

/// A bit rate pair, uplink and downlink, in kbit/s (§8.2.8 MBR, §8.2.9 GBR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Bitrate {
    pub uplink_kbps: u64,
    pub downlink_kbps: u64,
}

/// Packet Rate (§8.2.70): maximum packets per time unit, each direction optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PacketRate {
    /// (packets, per this many seconds)
    pub uplink: Option<(u16, u32)>,
    pub downlink: Option<(u16, u32)>,
}

/// The state of a session's MBR bucket for QER `qer` in one direction as it moves between
/// engines that run on different clocks: its *backlog* (the time its spent tokens take to
/// come back, in ticks of 2^-24 ns) at the moment it was read. The engine it enters
/// continues from it at its own `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbrBacklog {
    pub qer: QerId,
    pub uplink: bool,
    pub ticks: u64,
}

/// What of a session's state moves with it between engines, read from the one it leaves:
/// its MBR buckets' backlogs, and its URRs' use of their Volume Quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carried {
    pub backlogs: Vec<MbrBacklog>,
    pub quotas: Vec<crate::QuotaUse>,
}

impl Carried {
    pub fn is_empty(&self) -> bool {
        self.backlogs.is_empty() && self.quotas.is_empty()
    }
}

/// A QoS Enforcement Rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qer {
    pub id: QerId,
    /// QERs sharing a correlation id across sessions police one aggregate (APN-AMBR, §5.2.2).
    pub correlation_id: Option<u32>,
    pub gate_uplink: Gate,
    pub gate_downlink: Gate,
    pub mbr: Option<Bitrate>,
    pub gbr: Option<Bitrate>,
    pub packet_rate: Option<PacketRate>,
    /// QFI to put in the downlink PDU Session Container.
    pub qfi: Option<Qfi>,
    /// Reflective QoS Indication for the downlink PDU Session Container.
    pub rqi: bool,
    /// Paging Policy Indicator for the downlink PDU Session Container.
    pub ppi: Option<u8>,
    /// Averaging window for MBR/GBR (TS 23.501 §5.7.3.6), milliseconds; `None`: 2000 ms.
    pub averaging_window_ms: Option<u32>,
    /// The aggregate its `correlation_id` shares with the QERs of the same CP node's other
    /// sessions, policed at its MBR besides the QER's own: set by the agent, which names
    /// one per (CP node, correlation id).
    pub aggregate: Option<AggregateKey>,
}

/// The name of an aggregate rate: the QERs of one CP node's sessions that carry the same
/// Correlation ID (TS 29.244 §5.2.2, an APN/DNN-AMBR), while any session uses it. Its
/// rate is the MBR of the QER last installed with it; its buckets are each engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AggregateKey(pub u64);

impl Qer {
    /// An open gate with no limits.
    pub fn open(id: QerId) -> Self {
        Self {
            id,
            correlation_id: None,
            gate_uplink: Gate::Open,
            gate_downlink: Gate::Open,
            mbr: None,
            gbr: None,
            packet_rate: None,
            qfi: None,
            rqi: false,
            ppi: None,
            averaging_window_ms: None,
            aggregate: None,
        }
    }

    /// The averaging window of its bit rates (TS 23.501 §5.7.3.6: 2000 ms by default).
    pub fn averaging_window(&self) -> Duration {
        Duration::from_millis(self.averaging_window_ms.unwrap_or(2000).into())
    }
}
