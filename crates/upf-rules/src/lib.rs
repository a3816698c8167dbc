//! The abstract forwarding model (TS 29.244 §5.2): a session is a set of PDRs, FARs, QERs,
//! URRs and at most one BAR, in types that know nothing of the PFCP wire format nor of any
//! data-path backend. The N4 agent builds these from PFCP; back-ends compile them into their
//! own tables through [`Datapath`].
//!
//! Flag types keep the bit positions of the corresponding PFCP IEs, so converting is a copy,
//! but nothing here depends on the codec.
#![forbid(unsafe_code)]

pub mod budget;
mod datapath;
mod far;
mod flags;
mod ids;
pub mod mem;
mod pdr;
mod qer;
pub mod sdf;
mod session;
mod shared;
mod urr;

pub use datapath::{Datapath, DatapathError, DatapathEvent, InstallFlags, Installed};
pub use far::{
    ApplyAction, Bar, Duplicating, Far, Forwarding, ForwardingExtra, OuterHeaderCreation, Redirect,
};
pub use ids::{BarId, FarId, PdrId, Precedence, QerId, Qfi, Seid, Teid, UrrId};
pub use pdr::{
    FramedRoute, Interface, LocalFTeid, OuterHeaderRemoval, PacketMeta, Pdi, PdiExtra, Pdr, UeIp,
};
pub use qer::{AggregateKey, Bitrate, Carried, Gate, MbrBacklog, PacketRate, Qer};
pub use sdf::{FlowDescription, SdfFilter};
pub use session::{RuleError, RuleErrorKind, RuleRef, Session};
pub use shared::{Interner, Shared, SharedSlice};
pub use urr::{
    MeasurementInfo, MeasurementMethod, QuotaUse, ReportingTriggers, Urr, UrrExtra,
    UsageInformation, UsageReport, UsageTrigger, Volume, VolumeLimit,
};
