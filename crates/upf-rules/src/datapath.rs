//! The interface between the N4 agent and a data path. It speaks only the abstract model:
//! whole sessions go in, usage and events come out. Calls are synchronous from the agent's
//! point of view; a threaded back-end returns once its workers have acknowledged.

use crate::ids::{PdrId, Qfi, Seid, Teid, UrrId};
use crate::session::{RuleRef, Session};
use crate::urr::UsageReport;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// Per-installation requests of a Session Modification (TS 29.244 §8.2.31 PFCPSMReq-Flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstallFlags {
    /// SNDEM: send GTP-U End Marker on the old downlink tunnel of each FAR whose outer header
    /// creation changes (TS 29.281 §7.3.2, handover).
    pub send_end_marker: bool,
    /// DROBU: drop the packets buffered for this session.
    pub drop_buffered: bool,
}

/// What installing a session gave back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Installed {
    /// Final usage of the URRs the new session no longer has (trigger TERMR), which the agent
    /// returns in the Session Modification Response (TS 29.244 §7.5.5).
    pub removed_urr_usage: Vec<UsageReport>,
}

/// Why a data path refused an operation; the agent maps each to a PFCP cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatapathError {
    /// Out of table space, buffers or similar (cause "No resources available").
    NoResources(&'static str),
    /// The session uses something this back-end cannot do (cause "Service not supported").
    Unsupported(&'static str),
    /// No such session installed.
    UnknownSession(Seid),
    /// The rule names a Network Instance this data path has no N6 for (cause "Rule
    /// creation/modification Failure", the rule and its Network Instance IE offending).
    UnknownNetworkInstance(RuleRef),
    /// Anything else (cause "System failure"); logged.
    Internal(String),
}

impl core::fmt::Display for DatapathError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoResources(w) => write!(f, "no resources: {w}"),
            Self::Unsupported(w) => write!(f, "unsupported: {w}"),
            Self::UnknownSession(s) => write!(f, "unknown session {s}"),
            Self::UnknownNetworkInstance(r) => write!(f, "unknown network instance in {r:?}"),
            Self::Internal(w) => write!(f, "internal error: {w}"),
        }
    }
}

/// Something the data path tells the agent of its own accord.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatapathEvent {
    /// A URR's trigger fired (threshold, quota, period, start/stop of traffic, …).
    Usage(UsageReport),
    /// The first downlink packet was buffered for a FAR with NOCP (TS 29.244 §5.2.4.1.1).
    DownlinkData {
        seid: Seid,
        pdr: PdrId,
        qfi: Option<Qfi>,
        ppi: Option<u8>,
    },
    /// A GTP-U peer sent Error Indication for a tunnel of this session (TS 29.244 §5.12).
    ErrorIndication {
        seid: Seid,
        teid: Teid,
        peer: IpAddr,
    },
    /// No packet for the session's User Plane Inactivity Timer (TS 29.244 §5.11.3).
    Inactive {
        seid: Seid,
    },
    /// A GTP-U peer stopped (or resumed) answering Echo Requests (TS 29.281 §7.2.1).
    PeerUnreachable {
        peer: IpAddr,
    },
    PeerRestored {
        peer: IpAddr,
    },
}

/// A data path as the N4 agent sees it.
pub trait Datapath {
    /// Installs `session`, or replaces the installed session with the same SEID, atomically:
    /// packets are processed by the old rules or the new ones, never a mix. On error nothing
    /// changes.
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError>;

    /// Installs sessions whose SEIDs it does not hold yet (a restart restoring its state), as
    /// `install` would one by one; the results in the same order. A data path whose install
    /// is a round trip to another thread overlaps them.
    fn install_new(
        &mut self,
        now: Instant,
        sessions: Vec<Arc<Session>>,
    ) -> Vec<Result<Installed, DatapathError>> {
        sessions
            .into_iter()
            .map(|s| self.install(now, s, InstallFlags::default()))
            .collect()
    }

    /// Removes a session; returns the final usage of each of its URRs (trigger TERMR).
    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError>;

    /// Reports and restarts the measurement of the given URRs (Query URR: trigger IMMER).
    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError>;

    /// The next event, if any.
    fn poll_event(&mut self) -> Option<DatapathEvent>;
}
