//! `upf-dataplane`: the packet pipeline of the UPF.
//!
//! Sessions of the abstract model (`upf-rules`) are compiled into per-worker tables (uplink by
//! TEID, downlink by UE IP, every entry carrying its resolved FAR/QER/URR slots) and batches of
//! packets run through them to completion: parse → classify → PDR → FAR → QER → URR →
//! encapsulate/forward. No I/O, no threads, no clock: `now` is a parameter.
//!
//! [`Pipeline`] is one worker's share; it also implements [`upf_rules::Datapath`], so a single
//! worker is a complete data path for the agent.
#![forbid(unsafe_code)]

mod acl;
pub mod budgets;
mod counters;
mod fast;
mod filter;
mod flow;
mod hot;
mod install;
mod intmap;
mod meter;
mod netinst;
mod overflow;
mod parse;
pub mod paths;
mod pipeline;
mod prefetch;
mod session;
mod shapes;
mod tables;
#[cfg(test)]
mod test_rules;
mod usage;

pub use acl::{Acl, AclAction, AclLoadError, AclParseError, AclRule, AclStats, Tuning};
pub use acl::{AclEntry4, AclTable4, AclTables4};
pub use acl::{ANY_PORT, MAX_TABLES};
pub use counters::{Counters, DropReason};
pub use flow::{Addr, Flow, Flow4, Prefix};
pub use install::SessionUsage;
pub use meter::Fill;
pub use netinst::{NetworkInstances, TooManyInstances, DEFAULT_INSTANCE};
pub use parse::flow_of;
pub use pipeline::{null_forward, Output, Pipeline, GTPU_PORT};
pub use tables::{FastMap, FoldHasher};
pub use upf_packet::{Packet, Port, BUF_LEN, HEADROOM};

/// What the stage benchmarks (`benches/pipeline.rs`) time one at a time: the G-PDU fast
/// path, the IPv4 GTP-U header template, an MBR token bucket. Not an API: nothing else
/// uses these, and they change with the pipeline.
#[doc(hidden)]
pub mod stages {
    pub use crate::fast::{gpdu_v4, Template};
    pub use crate::meter::TokenBucket;
}

use std::net::{Ipv4Addr, Ipv6Addr};

/// This UPF's GTP-U addresses on one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalAddrs {
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
}

/// What every worker's pipeline is configured with.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub n3: LocalAddrs,
    pub n9: LocalAddrs,
    /// Packets one FAR may buffer (a BAR's Suggested Buffering Packets Count may lower it).
    pub buffer_packets_per_far: usize,
    /// Octets one worker may hold in buffers in all.
    pub buffer_bytes: usize,
    /// Error Indications per second one worker may send for unknown TEIDs; Supported
    /// Extension Headers Notifications have a budget of their own at the same rate.
    pub error_indications_per_s: u32,
    /// TEIDs (first, last) whose G-PDUs get no Error Indication while unknown: the ranges
    /// of the other shards of a cluster (#29). Their tunnels reach this instance when their
    /// addresses move here, before it has taken their sessions over; an Error Indication
    /// then would have the gNB release them.
    pub silent_teids: Vec<(u32, u32)>,
    /// Tunnels leave from the address of the session's own F-TEID on their side rather
    /// than from `n3`/`n9`: a cluster's instance serving several shards (#29), each
    /// session from its shard's address. Off, as the XDP engine does.
    pub tunnel_source_per_session: bool,
    /// GTP-U path management (Echo Requests to the peers of live tunnels).
    pub echo: paths::EchoConfig,
    /// TTL / Hop Limit of the outer headers we write.
    pub outer_ttl: u8,
    /// Uplink traffic validation: checked on every packet from a UE (shared, read-only).
    pub uplink_acl: std::sync::Arc<Acl>,
    /// Sessions to size the tables for up front (0: grow as needed). Tables that double
    /// while a session is installed stall the worker's packets for the copy (tens of ms at
    /// 100k sessions); sized up front they only take address space until used.
    pub expected_sessions: usize,
    /// The named network instances of the N6 interfaces: a rule's Network Instance is
    /// resolved to its id when a session is installed.
    pub network_instances: NetworkInstances,
    /// The QER Correlation IDs' aggregates, shared by every pipeline made from this config
    /// (its clones).
    pub aggregates: std::sync::Arc<budgets::Aggregates>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            n3: LocalAddrs::default(),
            n9: LocalAddrs::default(),
            buffer_packets_per_far: 64,
            buffer_bytes: 16 << 20,
            error_indications_per_s: 100,
            silent_teids: Vec::new(),
            tunnel_source_per_session: false,
            echo: paths::EchoConfig::default(),
            outer_ttl: 64,
            uplink_acl: Default::default(),
            expected_sessions: 0,
            network_instances: NetworkInstances::default(),
            aggregates: Default::default(),
        }
    }
}
