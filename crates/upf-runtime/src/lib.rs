//! `upf-runtime`: N worker threads, each owning the sessions of the UEs that hash to it, fed
//! packets in batches and rule updates as messages.
//!
//! A session lives in exactly one worker (chosen by its UE address), so per-packet state needs
//! no locks. Backends that cannot steer hand packets to [`steer::owner`]'s worker (one hand-off
//! per packet); backends that can (RSS, fanout, XDP) deliver straight to it with the same hash.
//! [`Workers`] implements `upf_rules::Datapath`: an install returns once the owning worker has
//! applied it, between two of its batches, so no packet sees half a session. A session on
//! several workers (no UE address, a peak-rate UE) is installed on all of them or on none: a
//! worker that refuses it has the workers before it put back to what they held, and its usage
//! reports are merged over them per URR ([`reports`]).
#![forbid(unsafe_code)]

mod engines;
pub mod priority;
pub mod reports;
pub mod steer;
mod workers;

pub use engines::{EngineMode, EngineStatus, Engines, Runs, Swap};
pub use workers::{
    BatchStats, PortQueue, RuntimeConfig, SessionsUsage, StartError, WorkerQueues, WorkerStats,
    Workers, BATCH_TIME_BUCKETS, IDLE_POLL, PATH_OWNER,
};
