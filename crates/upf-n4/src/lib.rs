//! The N4 agent: the PFCP procedures of TS 29.244 a UP function owes its SMFs, without I/O.
//! Datagrams go in with `handle_datagram(now, peer, bytes)`, datagrams to send come out of
//! `poll_transmit`, timers are `poll_timeout` / `handle_timeout(now)`, and what happened comes
//! out of `poll_event`. Sessions reach the data path through `upf_rules::Datapath`.
#![forbid(unsafe_code)]

mod agent;
mod aggregates;
pub mod alloc;
mod config;
pub mod convert;
mod persist;
mod reject;
pub mod reliability;
mod report;
mod session;
pub mod support;
mod trust;

pub use agent::{Agent, Event, Stats, Transmit, MESSAGES_PER_DATAGRAM};
pub use config::{AllowedPeer, Config, ConfigError, Limits, TunnelAddrs};
pub use persist::{node_key, Changes, Restored};
pub use reject::Reject;
pub use trust::Refusal;
