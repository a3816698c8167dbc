//! What the agent is told at start: who it is, where its tunnels end, how to allocate, its
//! timers and its limits.

use crate::alloc::UePoolConfig;
use crate::reliability::CacheBounds;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use thiserror::Error;
use upf_pfcp::ie::NodeId;

/// Addresses of one user-plane interface, handed out in chosen F-TEIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TunnelAddrs {
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

impl TunnelAddrs {
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(a) => Self {
                ipv4: Some(a),
                ipv6: None,
            },
            IpAddr::V6(a) => Self {
                ipv4: None,
                ipv6: Some(a),
            },
        }
    }
}

/// Caps that keep any peer from making memory grow without bound (each refusal carries the
/// cause given in docs/compliance.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub associations: usize,
    pub sessions: usize,
    /// Sessions one association may hold (several SMFs sharing the UPF: none takes all).
    pub sessions_per_association: usize,
    /// Per rule type (PDRs, FARs, QERs, URRs) in one session.
    pub rules_per_session: usize,
    pub sdf_filters_per_pdr: usize,
    /// UP-initiated requests awaiting a response, and their bytes (requests beyond either
    /// are not sent, and counted).
    pub pending_requests: usize,
    pub pending_request_bytes: usize,
    /// Responses kept for retransmitted requests (§6.4): how many, their bytes (payload and
    /// `reliability::CACHE_ENTRY_OVERHEAD` each), and the bytes of those to one peer address.
    pub response_cache: usize,
    pub response_cache_bytes: usize,
    pub response_cache_bytes_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            associations: 64,
            sessions: 2_000_000,
            sessions_per_association: 2_000_000,
            rules_per_session: 256,
            sdf_filters_per_pdr: 64,
            pending_requests: 16_384,
            // A usage Session Report is 125 B, so the count bound binds first (~2 MB); this
            // one holds if reports grow (several Usage Reports, node reports with many peers).
            pending_request_bytes: 16 << 20,
            // The bytes bind first (at least 290 B an entry): the count is a backstop.
            response_cache: 1 << 20,
            // A response costs ~400 B with its overhead, so a peer's 64 MiB hold its whole
            // 12 s window up to ~14,000 procedures/s, and 4 s (T1 = 1 s, N1 = 3) at the
            // rate one SMF can drive this UPF to (docs/benchmarks/control-plane.md); a
            // smaller bound evicts responses that retransmissions still need. The total lets
            // four such peers keep theirs whole.
            response_cache_bytes: 256 << 20,
            response_cache_bytes_per_peer: 64 << 20,
        }
    }
}

/// Agent configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Our Node ID, sent in every node message.
    pub node_id: NodeId,
    /// Our N4 address, sent in our F-SEIDs.
    pub n4_addr: IpAddr,
    /// F-TEID addresses for PDRs whose source interface is Access (N3) …
    pub n3: TunnelAddrs,
    /// … and Core (N9); `None`: same as N3.
    pub n9: Option<TunnelAddrs>,
    pub ue_pools: Vec<UePoolConfig>,
    /// TEIDs allocated from this inclusive range.
    pub teid_range: (u32, u32),
    /// How long a released TEID is held before it may be allocated again (docs/operations.md).
    /// 60 s: far past a gNB's release of its tunnel and the packets still in flight, and
    /// longer than a response is kept for retransmissions ((N1 + 1) × T1 of the SMF, 12 s),
    /// so no cached response names a TEID that another session holds.
    pub teid_reuse_after: Duration,
    /// Heartbeat period towards each associated peer, and how many unanswered retransmissions
    /// (T1 apart) declare it lost.
    pub heartbeat_interval: Duration,
    /// TS 29.244 §6.4: T1 (retransmission timer) and N1 (retransmissions) of our requests.
    pub t1: Duration,
    pub n1: u32,
    /// The SMFs' T1 and N1 (TS 29.244 §6.4): how long their retransmissions of a request can
    /// come, so how long its response is kept (see `response_cache`).
    pub smf_t1: Duration,
    pub smf_n1: u32,
    /// SMFs to which this UPF sets up associations itself (UP-initiated, TS 29.244 §6.2.6.2).
    pub smfs: Vec<SocketAddr>,
    /// If not empty, only these peers (by Node ID or source address) may associate.
    pub allowed_peers: Vec<AllowedPeer>,
    pub limits: Limits,
}

impl Config {
    /// The response cache's bounds. An SMF retransmits a request T1 after each transmission,
    /// N1 times, and waits T1 after the last for the response: past (N1 + 1) × T1 from its
    /// first transmission it uses no answer. A response is kept that long from when the first
    /// transmission arrived (no earlier than it was sent), so every retransmission the SMF can
    /// still use an answer to finds it; the extra T1 over N1 × T1 is the margin for the
    /// retransmission's network delay and its wait in our socket's queue.
    pub fn response_cache(&self) -> CacheBounds {
        CacheBounds {
            entries: self.limits.response_cache,
            bytes: self.limits.response_cache_bytes,
            bytes_per_peer: self.limits.response_cache_bytes_per_peer,
            ttl: self.smf_t1.saturating_mul(self.smf_n1.saturating_add(1)),
        }
    }
}

/// An entry of the association allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedPeer {
    Node(NodeId),
    Addr(IpAddr),
}

impl Config {
    /// A UPF whose node id, N4 and N3 addresses are all `n4_ip`, with one default UE pool.
    pub fn new(n4_ip: IpAddr) -> Self {
        Self {
            node_id: match n4_ip {
                IpAddr::V4(a) => NodeId::Ipv4(a),
                IpAddr::V6(a) => NodeId::Ipv6(a),
            },
            n4_addr: n4_ip,
            n3: TunnelAddrs::from_ip(n4_ip),
            n9: None,
            ue_pools: vec![UePoolConfig {
                name: None,
                dnn: None,
                network_instance: None,
                ipv4: Some((Ipv4Addr::new(10, 60, 0, 0), 16)),
                ipv6: Some((
                    "2001:db8:60::".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
                    48,
                    64,
                )),
            }],
            teid_range: (1, u32::MAX),
            teid_reuse_after: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(10),
            t1: Duration::from_secs(3),
            n1: 3,
            smf_t1: Duration::from_secs(3),
            smf_n1: 3,
            smfs: Vec::new(),
            allowed_peers: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// Why the agent cannot start with a configuration.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("UE pool {pool}: IPv4 prefix length {len} outside 8..=30")]
    Ipv4PoolLength { pool: String, len: u8 },
    #[error("UE pool {pool}: IPv6 prefix /{len} with UE prefixes /{ue_len}")]
    Ipv6PoolLengths { pool: String, len: u8, ue_len: u8 },
    #[error("UE pool {0}: neither IPv4 nor IPv6 range")]
    EmptyPool(String),
    #[error("UE pool {pool} overlaps pool {other}")]
    OverlappingPools { pool: String, other: String },
    #[error("teid range must be non-empty and exclude 0")]
    TeidRange,
    #[error("seeding the SEID generator from the OS: {0}")]
    Entropy(String),
}
