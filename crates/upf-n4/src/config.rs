//! What the agent is told at start: who it is, where its tunnels end, how to allocate, its
//! timers and its limits.

use crate::alloc::UePoolConfig;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use upf_pfcp::ie::{NodeId, UpFunctionFeatures};

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
    /// Per rule type (PDRs, FARs, QERs, URRs) in one session.
    pub rules_per_session: usize,
    pub sdf_filters_per_pdr: usize,
    /// UP-initiated requests awaiting a response (reports beyond it are dropped and counted).
    pub pending_requests: usize,
    /// Responses kept for retransmitted requests.
    pub response_cache: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            associations: 64,
            sessions: 2_000_000,
            rules_per_session: 256,
            sdf_filters_per_pdr: 64,
            pending_requests: 16_384,
            response_cache: 65_536,
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
    /// 60 s: far past a gNB's release of its tunnel and the packets still in flight, and as
    /// long as `response_ttl`, so no response kept for a retransmission names a TEID that
    /// another session holds.
    pub teid_reuse_after: Duration,
    /// UP Function Features advertised (TS 29.244 §8.2.25): exactly what is implemented.
    pub features: UpFunctionFeatures,
    /// Heartbeat period towards each associated peer, and how many unanswered retransmissions
    /// (T1 apart) declare it lost.
    pub heartbeat_interval: Duration,
    /// TS 29.244 §6.4: T1 (retransmission timer) and N1 (retransmissions) of our requests.
    pub t1: Duration,
    pub n1: u32,
    /// How long a response is kept to answer a retransmitted request (> the SMF's T1 × N1).
    pub response_ttl: Duration,
    /// SMFs to which this UPF sets up associations itself (UP-initiated, TS 29.244 §6.2.6.2).
    pub smfs: Vec<SocketAddr>,
    /// If not empty, only these peers (by Node ID or source address) may associate.
    pub allowed_peers: Vec<AllowedPeer>,
    pub limits: Limits,
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
            features: UpFunctionFeatures::FTUP.with(UpFunctionFeatures::UEIP),
            heartbeat_interval: Duration::from_secs(10),
            t1: Duration::from_secs(3),
            n1: 3,
            response_ttl: Duration::from_secs(60),
            smfs: Vec::new(),
            allowed_peers: Vec::new(),
            limits: Limits::default(),
        }
    }
}
