//! `upf.toml`: everything `upf run` is told, validated up front with messages that name the
//! offending key. Every key has a default, so an empty file (or none) is a UPF on loopback:
//! N4 on 127.0.0.1:8805, N3 as a UDP socket on 127.0.0.1:2152, N6 a TUN device when the
//! process may create one. `upf.toml` at the repository root is the documented sample.

use anyhow::{bail, Context};
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Which engine runs the sessions: user, xdp or auto.
    pub engine: Engine,
    pub n4: N4,
    pub n3: Interface,
    pub n9: Option<Interface>,
    pub n6: N6s,
    pub workers: WorkersCfg,
    pub priority: Priority,
    pub gtpu: Gtpu,
    #[serde(rename = "ue_pool")]
    pub ue_pools: Vec<UePool>,
    pub limits: LimitsCfg,
    pub acl: AclCfg,
    pub admin: Admin,
    pub log: Log,
    /// Persisted state: present, sessions survive a restart; absent, a restart forgets them.
    pub state: Option<StateCfg>,
    /// Several instances sharing their state in etcd, each serving shards (UPF identities)
    /// and taking over those of an instance that died.
    pub cluster: Option<ClusterCfg>,
}

/// `[cluster]`: the instances of one cluster share this file; each is told its name
/// (`--instance`), serves the shard of that name, and takes over any shard whose owner's
/// etcd lease expired.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterCfg {
    /// etcd endpoints, `http://HOST:PORT`.
    pub etcd: Vec<String>,
    /// This instance's name (unique in the cluster: a StatefulSet's pod name); default the
    /// host name.
    pub instance: Option<String>,
    /// The shard it serves from the start; default its instance name.
    pub shard: Option<String>,
    /// Where in etcd the cluster's keys are.
    pub prefix: String,
    /// The TTL of this instance's lease, in seconds: an instance that stops renewing it
    /// loses its shards this long after (etcd's minimum is about 2 s).
    pub lease_ttl_s: u64,
    /// Bytes of writes that may wait while etcd is slow or unreachable; beyond, writes are
    /// dropped and counted.
    pub queue_bytes: usize,
    /// The identities instances serve, by name.
    pub shards: std::collections::BTreeMap<String, ShardCfg>,
    /// As `[state] usage_checkpoint_ms`, for every shard's usage in etcd.
    pub usage_checkpoint_ms: u64,
    /// A shard taken over goes back to its own instance when that runs again (a short
    /// switchover: its sessions are installed there once this instance has let go);
    /// false: it stays where it is until that instance stops.
    pub hand_back: bool,
    /// Every shard another instance serves is kept installed here, followed from etcd,
    /// so that a takeover needs no read and no restore (its cost: each establishment is
    /// installed on every instance).
    pub hot_standby: bool,
}

impl Default for ClusterCfg {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            instance: None,
            shard: None,
            prefix: "/upf".into(),
            lease_ttl_s: 2,
            queue_bytes: 64 << 20,
            shards: Default::default(),
            usage_checkpoint_ms: 1000,
            hand_back: true,
            hot_standby: true,
        }
    }
}

/// One shard: a UPF identity. Whichever instance serves it answers PFCP on its N4 address
/// as its Node ID, with its Recovery Time Stamp, and allocates from its TEID range and UE
/// pools; its addresses move with it (keepalived, a Kubernetes service).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ShardCfg {
    /// IP[:PORT] of its N4 (replaces `n4.address`).
    pub n4: String,
    /// Its Node ID (replaces `n4.node_id`); default its N4 address.
    pub node_id: Option<String>,
    /// Its N3 addresses (replace `n3.addresses`), put in the F-TEIDs it chooses.
    pub n3: Vec<IpAddr>,
    /// Its UE pools (replace `[[ue_pool]]`), disjoint from every other shard's.
    pub ue_pool: Vec<UePool>,
    /// Its TEIDs, first and last, disjoint from every other shard's: the instance serving
    /// two shards tells their tunnels apart by TEID.
    pub teid_range: [u32; 2],
}

impl ClusterCfg {
    /// This instance's name: the key, else the host name.
    pub fn instance(&self) -> String {
        self.instance.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "upf".into())
        })
    }

    /// The shard this instance serves from the start.
    pub fn home_shard(&self) -> String {
        self.shard.clone().unwrap_or_else(|| self.instance())
    }
}

/// `[state]`: the store of the UPF's sessions and associations (upf-state), so that a
/// restarted UPF resumes them without the SMF.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateCfg {
    /// The store's file; default `$XDG_STATE_HOME/upf/state.redb`, else
    /// `~/.local/state/upf/state.redb` (writable without root).
    pub path: Option<PathBuf>,
    /// Bytes of writes the store may have queued (a slow or full disk); beyond, writes are
    /// dropped and counted.
    pub queue_bytes: Option<usize>,
    /// How often the URRs' usage since their last reports is written (ms); a restart
    /// loses at most this much of it. 0: never (a restart loses all of it).
    pub usage_checkpoint_ms: u64,
}

impl Default for StateCfg {
    fn default() -> Self {
        Self {
            path: None,
            queue_bytes: None,
            usage_checkpoint_ms: 1000,
        }
    }
}

impl StateCfg {
    pub fn path(&self) -> PathBuf {
        if let Some(p) = &self.path {
            return p.clone();
        }
        let base = match std::env::var_os("XDG_STATE_HOME") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join(".local/state"),
        };
        base.join("upf/state.redb")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct N4 {
    /// IP[:PORT] the PFCP agent listens on (port 8805 if omitted).
    pub address: String,
    /// Node ID sent to SMFs (an IP address or an FQDN); default: the N4 address.
    pub node_id: Option<String>,
    /// SMFs to set up an association with (UP-initiated), IP[:PORT].
    pub smfs: Vec<String>,
    /// Only these peer addresses may associate; empty: anyone.
    pub allow_peers: Vec<IpAddr>,
    pub heartbeat_interval_s: u64,
    /// Retransmission timer T1 and count N1 for requests this UPF sends.
    pub t1_ms: u64,
    pub n1: u32,
    /// The SMFs' T1 and N1: a response is kept (N1 + 1) x T1 to answer their retransmissions.
    pub smf_t1_ms: u64,
    pub smf_n1: u32,
    /// Seconds a released TEID is held before it may be allocated again (late packets of
    /// the old session must not reach a new one).
    pub teid_reuse_after_s: u64,
    /// The TEIDs this UPF allocates, first and last (a cluster's shards each have theirs).
    pub teid_range: Option<[u32; 2]>,
}

impl Default for N4 {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8805".into(),
            node_id: None,
            smfs: Vec::new(),
            allow_peers: Vec::new(),
            heartbeat_interval_s: 10,
            t1_ms: 3000,
            n1: 3,
            smf_t1_ms: 3000,
            smf_n1: 3,
            teid_reuse_after_s: 60,
            teid_range: None,
        }
    }
}

/// Which engine runs the sessions (`upf_runtime::EngineMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// The user-space workers.
    #[default]
    User,
    /// The XDP engine (N3 and N6 on af_xdp) runs every session it can, the workers the rest
    /// and what it punts; a full XDP engine refuses a session.
    Xdp,
    /// As xdp when N3 and N6 are on af_xdp (else user, said at start-up); a session that
    /// finds the XDP engine full runs in user space.
    Auto,
}

impl Engine {
    pub fn mode(self) -> upf_runtime::EngineMode {
        match self {
            Self::User => upf_runtime::EngineMode::User,
            Self::Xdp => upf_runtime::EngineMode::Xdp,
            Self::Auto => upf_runtime::EngineMode::Auto,
        }
    }
}

/// How packets of one interface are sent and received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// N3/N9: a UDP socket on the GTP-U port (no privileges needed).
    Udp,
    /// N6: a TUN device (the host's IP stack is the data network).
    Tun,
    /// An Ethernet interface through a TPACKET_V3 ring, workers in a fanout group.
    AfPacket,
    /// An Ethernet interface through AF_XDP sockets and an XDP program.
    AfXdp,
    /// N6 only: TUN when the process may create it, otherwise no N6 (said at start-up).
    Auto,
    /// The interface is not used.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Interface {
    /// Default: udp on N3/N9, auto on N6.
    pub backend: Option<Backend>,
    /// Linux interface name: the Ethernet interface (af_packet, af_xdp) or TUN name (tun).
    pub interface: Option<String>,
    /// N3/N9: this UPF's GTP-U addresses (put in F-TEIDs, and where GTP-U is accepted).
    pub addresses: Vec<IpAddr>,
    /// N3/N9 with the udp backend: UDP port (2152 in any real deployment; 0: any free port,
    /// for tests).
    pub port: u16,
    /// N6 on TUN: route every UE pool into the device (so the host's replies reach UEs).
    pub route_ue_pools: bool,
    /// Capture everything this interface receives and sends to this pcap file.
    pub pcap: Option<PathBuf>,
    /// N6 only: the network instance (TS 29.244 §8.2.4, the name SMFs give in rules,
    /// usually the DNN) whose data network this N6 reaches; none: the default instance.
    pub network_instance: Option<String>,
}

/// The N6 interfaces: `[n6]`, one, or `[[n6]]`, one per network instance (each naming its
/// `network_instance`; one may go without: the default instance, for rules that name
/// none). Two data networks may give their UEs the same addresses.
#[derive(Debug, Clone)]
pub struct N6s(pub Vec<Interface>);

impl Default for N6s {
    fn default() -> Self {
        Self(vec![Interface::default()])
    }
}

impl<'de> Deserialize<'de> for N6s {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match toml::Value::deserialize(d)? {
            v @ toml::Value::Array(_) => v.try_into().map(Self).map_err(D::Error::custom),
            v => v
                .try_into()
                .map(|i| Self(vec![i]))
                .map_err(D::Error::custom),
        }
    }
}

impl N6s {
    /// Each N6 with its key in messages: `n6` when there is one, `n6[i]` otherwise.
    pub fn keyed(&self) -> impl Iterator<Item = (String, &Interface)> {
        let one = self.0.len() == 1;
        (self.0.iter().enumerate())
            .map(move |(i, n)| (if one { "n6".into() } else { format!("n6[{i}]") }, n))
    }

    /// The named network instances, in order: their ids in the data path from 1.
    pub fn instance_names(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|n| n.network_instance.clone())
            .collect()
    }
}

impl Default for Interface {
    fn default() -> Self {
        Self {
            backend: None,
            interface: None,
            addresses: Vec::new(),
            port: upf_dataplane::GTPU_PORT,
            route_ue_pools: true,
            pcap: None,
            network_instance: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersCfg {
    pub count: usize,
    /// Cores to pin worker i to (`cores[i % len]`); empty: worker i on core i when there are
    /// enough cores.
    pub cores: Vec<usize>,
    /// Packets a worker takes from a queue at a time.
    pub batch: usize,
    /// Peak-rate UEs whose flows are spread over every worker (seed 004).
    pub spread_ues: Vec<IpAddr>,
    /// Microseconds an idle worker keeps polling its queues before it sleeps on them.
    pub idle_poll_us: u64,
    /// Never sleep: each worker's core stays at 100 %, and no packet waits for a wake-up.
    pub busy_poll: bool,
}

impl Default for WorkersCfg {
    fn default() -> Self {
        Self {
            count: 1,
            cores: Vec::new(),
            batch: 64,
            spread_ues: Vec::new(),
            idle_poll_us: u64::try_from(upf_runtime::IDLE_POLL.as_micros()).unwrap_or(20),
            busy_poll: false,
        }
    }
}

/// GTP-U path management (TS 29.281 §7.2.1): Echo Requests to every peer (gNB, other UPF)
/// that live tunnels lead to; a peer that leaves `echo_retries` requests in a row unanswered,
/// `echo_timeout_ms` apart, is reported to the SMFs (Node Report, User Plane Path Failure
/// Report) and, once it answers again, reported back (Path Recovery Report).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gtpu {
    /// Seconds between two rounds of Echo Requests to a peer (§7.2.1: at least 60 on a real
    /// network); 0 turns path management off.
    pub echo_interval_s: u64,
    /// T3-RESPONSE: how long a request waits for its Echo Response before it is sent again.
    pub echo_timeout_ms: u64,
    /// N3-REQUESTS: requests of a round (the first and its retransmissions) left unanswered
    /// that make the peer unreachable.
    pub echo_retries: u32,
}

impl Default for Gtpu {
    fn default() -> Self {
        let e = upf_dataplane::paths::EchoConfig::default();
        Self {
            echo_interval_s: e.interval.as_secs(),
            echo_timeout_ms: u64::try_from(e.timeout.as_millis()).unwrap_or(3000),
            echo_retries: e.retries,
        }
    }
}

impl Gtpu {
    pub fn echo(&self) -> upf_dataplane::paths::EchoConfig {
        upf_dataplane::paths::EchoConfig {
            interval: std::time::Duration::from_secs(self.echo_interval_s),
            timeout: std::time::Duration::from_millis(self.echo_timeout_ms),
            retries: self.echo_retries,
        }
    }
}

/// How a worker orders what it receives (seed 001): each packet in one of `groups` queue
/// groups by its QFI (N3/N9) or DSCP (N6), group 0 the highest, and a scheduler taking from
/// the groups (`upf_runtime::priority`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Priority {
    pub mode: PriorityMode,
    /// Queue groups, 2 to 4.
    pub groups: usize,
    /// strict, load-aware: packets of lower groups a poll takes at most (under load).
    pub max_rbs: usize,
    /// load-aware: the bound while the worker is at most half busy.
    pub idle_rbs: usize,
    /// weighted: one weight per group; empty: 2^(groups - 1 - g) for group g.
    pub weights: Vec<u32>,
    /// The QFIs of group 0, 1, ...; unlisted QFIs go to the lowest group. Default: 1-5.
    pub qfi: Option<Vec<Vec<u8>>>,
    /// The DSCPs of group 0, 1, ...; unlisted ones go to the lowest group. Default: RFC
    /// 4594's real-time classes.
    pub dscp: Option<Vec<Vec<u8>>>,
    /// Each group's software queue bound (backends that classify in software).
    pub queue_packets: usize,
    pub queue_bytes: usize,
    /// A GBR QoS flow one group above its class (its guaranteed rate served first).
    pub gbr_first: bool,
}

/// `upf_runtime::priority::Mode` by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PriorityMode {
    /// One queue in arrival order: no classification.
    #[default]
    Fifo,
    Strict,
    Weighted,
    LoadAware,
}

impl Default for Priority {
    fn default() -> Self {
        Self {
            mode: PriorityMode::Fifo,
            groups: 2,
            max_rbs: 32,
            idle_rbs: 256,
            weights: Vec::new(),
            qfi: None,
            dscp: None,
            queue_packets: upf_runtime::priority::QUEUE_PACKETS,
            queue_bytes: upf_runtime::priority::QUEUE_BYTES,
            gbr_first: true,
        }
    }
}

impl Priority {
    /// The workers' settings; errors name the key.
    pub fn runtime(&self) -> anyhow::Result<upf_runtime::priority::PriorityConfig> {
        use upf_runtime::priority::{
            Classes, Mode, PriorityConfig, DEFAULT_HIGH_DSCP, DEFAULT_HIGH_QFI, MAX_GROUPS,
        };
        let qfi = (self.qfi.clone()).unwrap_or_else(|| vec![DEFAULT_HIGH_QFI.to_vec()]);
        let dscp = (self.dscp.clone()).unwrap_or_else(|| vec![DEFAULT_HIGH_DSCP.to_vec()]);
        let classes =
            Classes::new(self.groups, &qfi, &dscp).map_err(|e| anyhow::anyhow!("priority.{e}"))?;
        if !(1..=1024).contains(&self.max_rbs) {
            bail!("priority.max_rbs: {} is not within 1..=1024", self.max_rbs);
        }
        if !(self.max_rbs..=1024).contains(&self.idle_rbs) {
            bail!(
                "priority.idle_rbs: {} is not within max_rbs ({})..=1024",
                self.idle_rbs,
                self.max_rbs
            );
        }
        let mut weights = [0u32; MAX_GROUPS];
        if self.weights.is_empty() {
            for (g, w) in weights.iter_mut().enumerate().take(self.groups) {
                *w = 1 << (self.groups - 1 - g);
            }
        } else if self.weights.len() != self.groups {
            bail!(
                "priority.weights: {} weights for {} groups",
                self.weights.len(),
                self.groups
            );
        } else {
            for (i, (&w, to)) in self.weights.iter().zip(&mut weights).enumerate() {
                if !(1..=1000).contains(&w) {
                    bail!("priority.weights[{i}]: {w} is not within 1..=1000");
                }
                *to = w;
            }
        }
        if self.queue_packets == 0 {
            bail!("priority.queue_packets: must be at least 1");
        }
        if self.queue_bytes < 2048 {
            bail!(
                "priority.queue_bytes: {} is below one packet buffer (2048)",
                self.queue_bytes
            );
        }
        let mode = match self.mode {
            PriorityMode::Fifo => Mode::Fifo,
            PriorityMode::Strict => Mode::Strict {
                max_rbs: self.max_rbs,
            },
            PriorityMode::Weighted => Mode::Weighted { weights },
            PriorityMode::LoadAware => Mode::LoadAware {
                max_rbs: self.max_rbs,
                idle_rbs: self.idle_rbs,
            },
        };
        Ok(PriorityConfig {
            mode,
            classes,
            queue_packets: self.queue_packets,
            queue_bytes: self.queue_bytes,
            gbr_first: self.gbr_first,
        })
    }
}

/// A UE address pool the UPF allocates from (CHV4/CHV6), per DNN and network instance.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct UePool {
    pub dnn: Option<String>,
    pub network_instance: Option<String>,
    /// A.B.C.D/LEN
    pub ipv4: Option<String>,
    /// PREFIX/LEN, each UE getting a /64 (or `ipv6_ue_prefix_len`).
    pub ipv6: Option<String>,
    pub ipv6_ue_prefix_len: Option<u8>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsCfg {
    pub sessions: usize,
    pub sessions_per_association: usize,
    pub associations: usize,
    pub buffer_packets_per_far: usize,
    pub buffer_bytes_per_worker: usize,
    pub error_indications_per_s: u32,
    /// Responses kept for retransmitted requests: how many, their bytes, and the bytes of
    /// those to one peer address.
    pub response_cache_entries: usize,
    pub response_cache_bytes: usize,
    pub response_cache_bytes_per_peer: usize,
    /// Requests of this UPF awaiting a response: how many, and their bytes.
    pub pending_requests: usize,
    pub pending_request_bytes: usize,
}

impl Default for LimitsCfg {
    fn default() -> Self {
        let l = upf_n4::Limits::default();
        let p = upf_dataplane::PipelineConfig::default();
        Self {
            sessions: l.sessions,
            sessions_per_association: l.sessions_per_association,
            associations: l.associations,
            buffer_packets_per_far: p.buffer_packets_per_far,
            buffer_bytes_per_worker: p.buffer_bytes,
            error_indications_per_s: p.error_indications_per_s,
            response_cache_entries: l.response_cache,
            response_cache_bytes: l.response_cache_bytes,
            response_cache_bytes_per_peer: l.response_cache_bytes_per_peer,
            pending_requests: l.pending_requests,
            pending_request_bytes: l.pending_request_bytes,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AclCfg {
    /// Uplink traffic validation rules, IPFilterRule text, one per line, first match wins
    /// (`deny out ip from any to 10.0.0.0/8`); unmatched packets pass.
    pub uplink_rules: Vec<String>,
    /// Same, read from a file.
    pub uplink_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Admin {
    /// HTTP address of `/metrics` (Prometheus) and `/api/…` (what `upf show` reads);
    /// empty: off.
    pub address: String,
    /// Connections served at once; more are refused (and counted).
    pub max_connections: usize,
}

impl Default for Admin {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:9464".into(),
            max_connections: 16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub format: LogFormat,
    /// error, warn, info, debug or trace (or a tracing filter such as `upf=debug`).
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

impl Interface {
    pub fn gtpu_backend(&self) -> Backend {
        self.backend.unwrap_or(Backend::Udp)
    }

    pub fn n6_backend(&self) -> Backend {
        self.backend.unwrap_or(Backend::Auto)
    }
}

/// Parses `IP[:PORT]` with a default port.
pub fn socket_addr(s: &str, default_port: u16) -> Option<SocketAddr> {
    s.parse::<SocketAddr>().ok().or_else(|| {
        s.parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, default_port))
    })
}

pub fn ipv4_net(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, l) = s.split_once('/')?;
    let len: u8 = l.parse().ok()?;
    (len <= 32).then_some((a.parse().ok()?, len))
}

pub fn ipv6_net(s: &str) -> Option<(Ipv6Addr, u8)> {
    let (a, l) = s.split_once('/')?;
    let len: u8 = l.parse().ok()?;
    (len <= 128).then_some((a.parse().ok()?, len))
}

impl FileConfig {
    /// Reads and validates a file; errors name the file and the key.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("config {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("config {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let c: FileConfig = toml::from_str(text)?;
        c.validate()?;
        Ok(c)
    }

    /// Checks what types alone cannot; every message starts with the key at fault.
    pub fn validate(&self) -> anyhow::Result<()> {
        socket_addr(&self.n4.address, 8805)
            .with_context(|| format!("n4.address: {:?} is not IP or IP:PORT", self.n4.address))?;
        for (i, s) in self.n4.smfs.iter().enumerate() {
            socket_addr(s, 8805)
                .with_context(|| format!("n4.smfs[{i}]: {s:?} is not IP or IP:PORT"))?;
        }
        if self.n4.heartbeat_interval_s == 0 {
            bail!("n4.heartbeat_interval_s: must be at least 1");
        }
        if self.n4.t1_ms < 10 {
            bail!("n4.t1_ms: must be at least 10");
        }
        if !(10..=60_000).contains(&self.n4.smf_t1_ms) {
            bail!(
                "n4.smf_t1_ms: {} is not within 10..=60000",
                self.n4.smf_t1_ms
            );
        }
        if self.n4.smf_n1 > 32 {
            bail!("n4.smf_n1: {} is above 32", self.n4.smf_n1);
        }
        for (name, i) in [("n3", Some(&self.n3)), ("n9", self.n9.as_ref())] {
            let Some(i) = i else { continue };
            match i.gtpu_backend() {
                Backend::Udp | Backend::AfPacket | Backend::AfXdp => {}
                Backend::None if name == "n9" => {}
                b => {
                    bail!("{name}.backend: {b:?} cannot carry GTP-U (udp, af_packet or af_xdp)")
                }
            }
            if matches!(i.gtpu_backend(), Backend::AfPacket | Backend::AfXdp)
                && i.interface.is_none()
            {
                bail!(
                    "{name}.interface: required by backend {:?}",
                    i.gtpu_backend()
                );
            }
        }
        for (name, i) in [("n3", Some(&self.n3)), ("n9", self.n9.as_ref())] {
            if i.is_some_and(|i| i.network_instance.is_some()) {
                bail!("{name}.network_instance: only an N6 has a network instance");
            }
        }
        self.validate_n6()?;
        if self.engine == Engine::Xdp {
            if let Some(why) = self.xdp_engine_unfit() {
                bail!("engine: xdp: {why}");
            }
        }
        if self.workers.count == 0 || self.workers.count > 256 {
            bail!(
                "workers.count: {} is not within 1..=256",
                self.workers.count
            );
        }
        if self.workers.idle_poll_us > 1_000_000 {
            bail!(
                "workers.idle_poll_us: {} is above 1000000 (use busy_poll = true to never sleep)",
                self.workers.idle_poll_us
            );
        }
        self.priority.runtime()?;
        if !(1..=1024).contains(&self.workers.batch) {
            bail!(
                "workers.batch: {} is not within 1..=1024",
                self.workers.batch
            );
        }
        if self.gtpu.echo_interval_s > 86_400 {
            bail!(
                "gtpu.echo_interval_s: {} is above 86400 (0 turns path management off)",
                self.gtpu.echo_interval_s
            );
        }
        if !(10..=60_000).contains(&self.gtpu.echo_timeout_ms) {
            bail!(
                "gtpu.echo_timeout_ms: {} is not within 10..=60000",
                self.gtpu.echo_timeout_ms
            );
        }
        if !(1..=32).contains(&self.gtpu.echo_retries) {
            bail!(
                "gtpu.echo_retries: {} is not within 1..=32",
                self.gtpu.echo_retries
            );
        }
        for (i, p) in self.ue_pools.iter().enumerate() {
            if p.ipv4.is_none() && p.ipv6.is_none() {
                bail!("ue_pool[{i}]: needs ipv4 or ipv6");
            }
            if let Some(v4) = &p.ipv4 {
                ipv4_net(v4)
                    .with_context(|| format!("ue_pool[{i}].ipv4: {v4:?} is not A.B.C.D/LEN"))?;
            }
            if let Some(v6) = &p.ipv6 {
                ipv6_net(v6)
                    .with_context(|| format!("ue_pool[{i}].ipv6: {v6:?} is not PREFIX/LEN"))?;
            }
            if let Some(l) = p.ipv6_ue_prefix_len {
                if !(1..=128).contains(&l) {
                    bail!("ue_pool[{i}].ipv6_ue_prefix_len: {l} is not within 1..=128");
                }
            }
        }
        if self.limits.sessions == 0 {
            bail!("limits.sessions: must be at least 1");
        }
        if self.limits.response_cache_bytes_per_peer > self.limits.response_cache_bytes {
            bail!(
                "limits.response_cache_bytes_per_peer: {} is above limits.response_cache_bytes ({})",
                self.limits.response_cache_bytes_per_peer, self.limits.response_cache_bytes
            );
        }
        if self.admin.max_connections == 0 {
            bail!("admin.max_connections: must be at least 1");
        }
        if self.limits.sessions_per_association == 0 {
            bail!("limits.sessions_per_association: must be at least 1");
        }
        if !self.admin.address.is_empty() && socket_addr(&self.admin.address, 9464).is_none() {
            bail!(
                "admin.address: {:?} is not IP or IP:PORT",
                self.admin.address
            );
        }
        for (i, r) in self.acl.uplink_rules.iter().enumerate() {
            upf_dataplane::Acl::load(r).with_context(|| format!("acl.uplink_rules[{i}]"))?;
        }
        if let Some(c) = &self.cluster {
            self.validate_cluster(c)?;
        }
        Ok(())
    }

    /// The shards: each one a valid configuration of its own, and no two sharing an
    /// address, a TEID or a UE address (an instance serving both could not tell them apart).
    fn validate_cluster(&self, c: &ClusterCfg) -> anyhow::Result<()> {
        if c.etcd.is_empty() {
            bail!("cluster.etcd: at least one endpoint (http://HOST:PORT)");
        }
        if c.lease_ttl_s < 2 {
            bail!(
                "cluster.lease_ttl_s: {} is below etcd's minimum of 2",
                c.lease_ttl_s
            );
        }
        if !c.prefix.starts_with('/') {
            bail!("cluster.prefix: {:?} must start with /", c.prefix);
        }
        if self.state.is_some() {
            bail!("[state] and [cluster]: a cluster keeps its state in etcd; keep one of them");
        }
        let mut seen: Vec<(&str, FileConfig)> = Vec::new();
        for name in c.shards.keys() {
            let key = format!("cluster.shards.{name}");
            if name.is_empty() || name.contains('/') {
                bail!("{key}: a shard's name is a non-empty etcd key part, without /");
            }
            let s = self.for_shard(name)?;
            s.validate_shard().with_context(|| key.clone())?;
            let sc = &c.shards[name];
            if sc.teid_range[0] == 0 || sc.teid_range[0] > sc.teid_range[1] {
                bail!(
                    "{key}.teid_range: {:?} is not [FIRST, LAST] with 0 < FIRST <= LAST",
                    sc.teid_range
                );
            }
            for (other, o) in &seen {
                let oc = &c.shards[*other];
                if sc.teid_range[0] <= oc.teid_range[1] && oc.teid_range[0] <= sc.teid_range[1] {
                    bail!("{key}.teid_range overlaps cluster.shards.{other}.teid_range");
                }
                if s.n4.address == o.n4.address {
                    bail!("{key}.n4: the N4 address of cluster.shards.{other} too");
                }
                if s.n3_addresses()
                    .iter()
                    .any(|a| o.n3_addresses().contains(a))
                {
                    bail!("{key}.n3: an N3 address of cluster.shards.{other} too");
                }
                for p in &s.ue_pools {
                    for q in &o.ue_pools {
                        if pools_overlap(p, q) {
                            bail!("{key}.ue_pool: overlaps a pool of cluster.shards.{other}");
                        }
                    }
                }
            }
            seen.push((name, s));
        }
        Ok(())
    }

    /// What a shard's own keys must be.
    fn validate_shard(&self) -> anyhow::Result<()> {
        if self.ue_pools.is_empty() {
            bail!("ue_pool: every shard needs its own UE pools");
        }
        if self.n3.addresses.is_empty() {
            bail!("n3: every shard needs its own N3 addresses");
        }
        Ok(())
    }

    /// How often usage is checkpointed (ms; 0: never): `[state]`'s or `[cluster]`'s key.
    pub fn usage_checkpoint_ms(&self) -> u64 {
        match (&self.state, &self.cluster) {
            (Some(s), _) => s.usage_checkpoint_ms,
            (None, Some(c)) => c.usage_checkpoint_ms,
            (None, None) => 0,
        }
    }

    /// This configuration as shard `name` of `[cluster]` serves it: the shard's N4 address,
    /// Node ID, N3 addresses, UE pools and TEID range in place of the file's.
    pub fn for_shard(&self, name: &str) -> anyhow::Result<FileConfig> {
        let Some(s) = self.cluster.as_ref().and_then(|c| c.shards.get(name)) else {
            bail!("cluster.shards: no shard {name:?} (an instance serves the shard of its name: --instance, cluster.instance or cluster.shard)");
        };
        let mut c = self.clone();
        c.n4.address = s.n4.clone();
        c.n4.node_id = s.node_id.clone();
        c.n3.addresses = s.n3.clone();
        c.ue_pools = s.ue_pool.clone();
        c.n4.teid_range = Some(s.teid_range);
        socket_addr(&c.n4.address, 8805).with_context(|| {
            format!("cluster.shards.{name}.n4: {:?} is not IP or IP:PORT", s.n4)
        })?;
        Ok(c)
    }

    /// The N6 interfaces: each one's backend, and that two of them are never one device or
    /// one network instance.
    /// Why the XDP engine cannot run here, if it cannot (an error for `engine = "xdp"`, the
    /// start-up line of `auto`).
    pub fn xdp_engine_unfit(&self) -> Option<String> {
        // Its programs encapsulate from the configured N3 address and answer unknown TEIDs
        // themselves: a shard taken over would tunnel from the wrong address.
        if self.cluster.is_some() {
            return Some("the XDP engine does not serve a [cluster]'s shards yet".into());
        }
        if self.n3.gtpu_backend() != Backend::AfXdp {
            return Some("the XDP engine needs n3.backend = \"af_xdp\"".into());
        }
        if self.n6.0.len() != 1 || self.n6.0[0].n6_backend() != Backend::AfXdp {
            return Some("the XDP engine needs one N6, with backend = \"af_xdp\"".into());
        }
        if self
            .n9
            .as_ref()
            .is_some_and(|n| n.gtpu_backend() != Backend::None)
        {
            return Some("the XDP engine has no N9 interface of its own yet".into());
        }
        if !self.n3_addresses().iter().any(IpAddr::is_ipv4) {
            return Some("the XDP engine needs an IPv4 address in n3.addresses".into());
        }
        None
    }

    fn validate_n6(&self) -> anyhow::Result<()> {
        if self.n6.0.is_empty() {
            bail!("n6: at least one (backend = \"none\" for a UPF without N6)");
        }
        let several = self.n6.0.len() > 1;
        let mut names: Vec<(&str, String)> = Vec::new();
        let mut devices: Vec<(&str, String)> = Vec::new();
        let mut unnamed: Option<String> = None;
        for (key, n) in self.n6.keyed() {
            match n.n6_backend() {
                Backend::Udp => bail!(
                    "{key}.backend: udp carries GTP-U only (tun, af_packet, af_xdp, auto or none)"
                ),
                Backend::AfPacket | Backend::AfXdp if n.interface.is_none() => {
                    bail!("{key}.interface: required by backend {:?}", n.n6_backend())
                }
                // Each TUN device needs a name of its own.
                Backend::Tun | Backend::Auto if several && n.interface.is_none() => {
                    bail!("{key}.interface: required when there is more than one N6")
                }
                _ => {}
            }
            if let Some(d) = n
                .interface
                .as_deref()
                .filter(|_| n.n6_backend() != Backend::None)
            {
                if let Some((_, other)) = devices.iter().find(|(x, _)| *x == d) {
                    bail!("{key}.interface: {d:?} is {other}'s too");
                }
                devices.push((d, key.clone()));
            }
            match n.network_instance.as_deref() {
                Some("") => bail!("{key}.network_instance: empty"),
                Some(ni) => {
                    if let Some((_, other)) = names.iter().find(|(x, _)| *x == ni) {
                        bail!("{key}.network_instance: {ni:?} is {other}'s too");
                    }
                    names.push((ni, key.clone()));
                }
                None => {
                    if let Some(other) = &unnamed {
                        bail!(
                            "{key}.network_instance: missing, as {other}'s is: only one N6 may \
                             go without (the default network instance)"
                        );
                    }
                    unnamed = Some(key.clone());
                }
            }
        }
        upf_dataplane::NetworkInstances::new(self.n6.instance_names()).context("n6")?;
        Ok(())
    }

    /// This UPF's N3 addresses: configured, else the N4 address.
    pub fn n3_addresses(&self) -> Vec<IpAddr> {
        if self.n3.addresses.is_empty() {
            socket_addr(&self.n4.address, 8805)
                .map(|a| vec![a.ip()])
                .unwrap_or_default()
        } else {
            self.n3.addresses.clone()
        }
    }
}

/// Whether two UE pools share an address (IPv4 or IPv6 prefix).
fn pools_overlap(a: &UePool, b: &UePool) -> bool {
    let v4 = |p: &UePool| {
        p.ipv4
            .as_deref()
            .and_then(ipv4_net)
            .map(|(n, l)| (u128::from(u32::from(n)), u32::from(l) + 96))
    };
    let v6 = |p: &UePool| {
        p.ipv6
            .as_deref()
            .and_then(ipv6_net)
            .map(|(n, l)| (u128::from(n), u32::from(l)))
    };
    let overlap = |x: Option<(u128, u32)>, y: Option<(u128, u32)>| match (x, y) {
        (Some((x, lx)), Some((y, ly))) => {
            let l = lx.min(ly);
            let mask = if l == 0 { 0 } else { u128::MAX << (128 - l) };
            x & mask == y & mask
        }
        _ => false,
    };
    overlap(v4(a), v4(b)) || overlap(v6(a), v6(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_sample_is_valid_and_says_the_defaults() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../upf.toml"))
            .unwrap();
        let c = FileConfig::parse(&text).unwrap();
        let d = FileConfig::default();
        assert_eq!(c.n4.address, d.n4.address);
        assert_eq!(c.n3.gtpu_backend(), d.n3.gtpu_backend());
        assert_eq!(c.n6.0.len(), 1);
        assert_eq!(c.n6.0[0].n6_backend(), Backend::Auto);
        assert_eq!(d.n6.0[0].n6_backend(), Backend::Auto);
        assert_eq!(d.n6.0[0].network_instance, None);
        assert_eq!(c.workers.batch, d.workers.batch);
        assert_eq!(c.limits.sessions, d.limits.sessions);
        assert_eq!(c.n4.smf_t1_ms, d.n4.smf_t1_ms);
        assert_eq!(c.n4.smf_n1, d.n4.smf_n1);
        assert_eq!(
            c.limits.response_cache_entries,
            d.limits.response_cache_entries
        );
        assert_eq!(c.limits.response_cache_bytes, d.limits.response_cache_bytes);
        assert_eq!(
            c.limits.response_cache_bytes_per_peer,
            d.limits.response_cache_bytes_per_peer
        );
        assert_eq!(c.limits.pending_requests, d.limits.pending_requests);
        assert_eq!(
            c.limits.pending_request_bytes,
            d.limits.pending_request_bytes
        );
        assert_eq!(c.admin.address, d.admin.address);
        assert_eq!(c.admin.max_connections, d.admin.max_connections);
        assert_eq!(c.n4.teid_reuse_after_s, d.n4.teid_reuse_after_s);
        assert_eq!(c.gtpu.echo(), d.gtpu.echo());
        assert_eq!(d.gtpu.echo(), upf_dataplane::paths::EchoConfig::default());
        assert_eq!(c.priority.runtime().unwrap(), d.priority.runtime().unwrap());
        assert!(FileConfig::parse("").is_ok());
    }

    const CLUSTER: &str = r#"
[cluster]
etcd = ["http://127.0.0.1:2379"]
instance = "a"
[cluster.shards.a]
n4 = "10.0.4.1"
n3 = ["10.0.3.1"]
ue_pool = [{ ipv4 = "10.45.0.0/17" }]
teid_range = [1, 0x7fffffff]
[cluster.shards.b]
n4 = "10.0.4.2"
node_id = "upf-b.example"
n3 = ["10.0.3.2"]
ue_pool = [{ ipv4 = "10.45.128.0/17" }]
teid_range = [0x80000000, 0xffffffff]
"#;

    #[test]
    fn a_shard_serves_with_its_own_identity() {
        let c = FileConfig::parse(CLUSTER).unwrap();
        let b = c.for_shard("b").unwrap();
        assert_eq!(b.n4.address, "10.0.4.2");
        assert_eq!(b.n4.node_id.as_deref(), Some("upf-b.example"));
        assert_eq!(b.n3_addresses(), ["10.0.3.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(b.ue_pools[0].ipv4.as_deref(), Some("10.45.128.0/17"));
        let a = crate::run::agent_config(&b).unwrap();
        assert_eq!(a.teid_range, (0x8000_0000, 0xffff_ffff));
        let e = c.for_shard("c").unwrap_err();
        assert!(format!("{e:#}").contains("no shard \"c\""), "{e:#}");
    }

    #[test]
    fn shards_that_overlap_are_refused() {
        for (from, to, what) in [
            (
                "teid_range = [0x80000000",
                "teid_range = [0x7fffffff",
                "teid_range overlaps",
            ),
            ("10.45.128.0/17", "10.45.0.0/16", "ue_pool: overlaps"),
            (
                "n3 = [\"10.0.3.2\"]",
                "n3 = [\"10.0.3.1\"]",
                "n3: an N3 address",
            ),
            (
                "n4 = \"10.0.4.2\"",
                "n4 = \"10.0.4.1\"",
                "n4: the N4 address",
            ),
            (
                "[cluster.shards.b]",
                "[cluster.shards.\"b/1\"]",
                "without /",
            ),
        ] {
            assert!(CLUSTER.contains(from), "{from}");
            let e = FileConfig::parse(&CLUSTER.replace(from, to)).unwrap_err();
            assert!(format!("{e:#}").contains(what), "{what}: {e:#}");
        }
        let e = FileConfig::parse(&format!("[state]\n{CLUSTER}")).unwrap_err();
        assert!(format!("{e:#}").contains("keep one of them"), "{e:#}");
        let e = FileConfig::parse(&format!("engine = \"xdp\"\n{CLUSTER}")).unwrap_err();
        assert!(
            format!("{e:#}").contains("does not serve a [cluster]"),
            "{e:#}"
        );
    }

    #[test]
    fn teid_hold_off_reaches_the_agent() {
        let c = FileConfig::parse("[n4]\nteid_reuse_after_s = 5").unwrap();
        let a = crate::run::agent_config(&c).unwrap();
        assert_eq!(a.teid_reuse_after, std::time::Duration::from_secs(5));
        let d = crate::run::agent_config(&FileConfig::default()).unwrap();
        assert_eq!(
            d.teid_reuse_after,
            upf_n4::Config::new(a.n4_addr).teid_reuse_after
        );
    }

    #[test]
    fn echo_settings_reach_the_pipeline() {
        let c = FileConfig::parse(
            "[gtpu]\necho_interval_s = 5\necho_timeout_ms = 500\necho_retries = 4",
        )
        .unwrap();
        let e = crate::run::runtime_config(&c).unwrap().pipeline.echo;
        assert_eq!(e.interval, std::time::Duration::from_secs(5));
        assert_eq!(e.timeout, std::time::Duration::from_millis(500));
        assert_eq!(e.retries, 4);
        let off = FileConfig::parse("[gtpu]\necho_interval_s = 0").unwrap();
        assert!(crate::run::runtime_config(&off)
            .unwrap()
            .pipeline
            .echo
            .interval
            .is_zero());
    }

    #[test]
    fn priority_settings_reach_the_workers_and_fifo_is_the_default() {
        use upf_runtime::priority::{Mode, PriorityConfig};
        let d = crate::run::runtime_config(&FileConfig::default()).unwrap();
        assert_eq!(d.priority, PriorityConfig::default());
        assert_eq!(d.priority.mode, Mode::Fifo);
        let c = FileConfig::parse(
            "[priority]\nmode = \"load-aware\"\ngroups = 3\nmax_rbs = 8\nidle_rbs = 128\n\
             qfi = [[1, 2], [5]]\ndscp = [[46], [40, 34]]\nqueue_packets = 100",
        )
        .unwrap();
        let p = crate::run::runtime_config(&c).unwrap().priority;
        assert_eq!(
            p.mode,
            Mode::LoadAware {
                max_rbs: 8,
                idle_rbs: 128
            }
        );
        assert_eq!(p.classes.groups(), 3);
        let qfi: Vec<u8> = (0..7).map(|q| p.classes.of_qfi(q)).collect();
        assert_eq!(qfi, [2, 0, 0, 2, 2, 1, 2]);
        assert_eq!(
            (
                p.classes.of_dscp(46),
                p.classes.of_dscp(34),
                p.classes.of_dscp(0)
            ),
            (0, 1, 2)
        );
        assert_eq!(p.queue_packets, 100);
        // Weights by default halve from one group to the next.
        let w = FileConfig::parse("[priority]\nmode = \"weighted\"\ngroups = 3").unwrap();
        let m = w.priority.runtime().unwrap().mode;
        assert_eq!(
            m,
            Mode::Weighted {
                weights: [4, 2, 1, 0]
            }
        );
        let s = FileConfig::parse("[priority]\nmode = \"strict\"\nmax_rbs = 16").unwrap();
        assert_eq!(
            s.priority.runtime().unwrap().mode,
            Mode::Strict { max_rbs: 16 }
        );
    }

    #[test]
    fn one_n6_per_network_instance() {
        let c = FileConfig::parse(
            "[[n6]]\ninterface = \"dn-a\"\nnetwork_instance = \"dn-a\"\n\
             [[n6]]\nbackend = \"none\"\n\
             [[n6]]\ninterface = \"dn-b\"\nnetwork_instance = \"dn-b\"",
        )
        .unwrap();
        assert_eq!(c.n6.0.len(), 3);
        assert_eq!(c.n6.instance_names(), ["dn-a", "dn-b"]);
        let p = crate::run::runtime_config(&c).unwrap().pipeline;
        assert_eq!(p.network_instances.id(Some("dn-b")), Some(2));
        assert_eq!(p.network_instances.id(Some("internet")), None);
        // One `[n6]` table: the default instance, every name in rules meaning it.
        let one = FileConfig::parse("[n6]\ninterface = \"upf0\"").unwrap();
        let p = crate::run::runtime_config(&one).unwrap().pipeline;
        assert_eq!(p.network_instances.id(Some("internet")), Some(0));
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("[n4]\naddress = \"nowhere\"", "n4.address"),
            ("[n4]\nadress = \"1.2.3.4\"", "adress"),
            ("[n3]\nbackend = \"af_xdp\"", "n3.interface"),
            ("[n3]\nbackend = \"tun\"", "n3.backend"),
            ("[n3]\nbackend = \"carrier-pigeon\"", "backend"),
            ("[n6]\nbackend = \"udp\"", "n6.backend"),
            ("[n6]\nbackend = \"tunnel\"", "backend"),
            ("[[n6]]\nbackend = \"udp\"", "n6.backend"),
            (
                "[[n6]]\ninterface = \"a\"\n[[n6]]\nbackend = \"udp\"",
                "n6[1].backend",
            ),
            (
                "[[n6]]\nnetwork_instance = \"a\"\n[[n6]]\nnetwork_instance = \"b\"",
                "n6[0].interface",
            ),
            (
                "[[n6]]\ninterface = \"a\"\n[[n6]]\ninterface = \"b\"",
                "n6[1].network_instance",
            ),
            (
                "[[n6]]\ninterface = \"a\"\nnetwork_instance = \"x\"\n\
                 [[n6]]\ninterface = \"b\"\nnetwork_instance = \"x\"",
                "n6[1].network_instance",
            ),
            (
                "[[n6]]\ninterface = \"a\"\nnetwork_instance = \"x\"\n\
                 [[n6]]\ninterface = \"a\"\nnetwork_instance = \"y\"",
                "n6[1].interface",
            ),
            ("n6 = []", "n6"),
            ("[n3]\nnetwork_instance = \"x\"", "n3.network_instance"),
            ("[n6]\nbackend = \"tun\"\n[[n6]]\nbackend = \"tun\"", "n6"),
            ("[workers]\ncount = 0", "workers.count"),
            ("[workers]\nbatch = 5000", "workers.batch"),
            ("[workers]\nidle_poll_us = 2000000", "workers.idle_poll_us"),
            ("[priority]\nmode = \"fast\"", "mode"),
            ("[priority]\ngroups = 5", "priority.groups"),
            ("[priority]\nqfi = [[1, 64]]", "priority.qfi[0]"),
            ("[priority]\nqfi = [[1], [1]]", "priority.qfi[1]"),
            ("[priority]\ndscp = [[46], [0], [8]]", "priority.dscp"),
            ("[priority]\nmax_rbs = 0", "priority.max_rbs"),
            (
                "[priority]\nmax_rbs = 64\nidle_rbs = 32",
                "priority.idle_rbs",
            ),
            ("[priority]\nweights = [4, 2, 1]", "priority.weights"),
            ("[priority]\nweights = [4, 0]", "priority.weights[1]"),
            ("[priority]\nqueue_packets = 0", "priority.queue_packets"),
            ("[priority]\nqueue_bytes = 100", "priority.queue_bytes"),
            ("[[ue_pool]]\nipv4 = \"10.0.0.0/33\"", "ue_pool[0].ipv4"),
            ("[[ue_pool]]\ndnn = \"x\"", "ue_pool[0]"),
            (
                "[acl]\nuplink_rules = [\"allow everything\"]",
                "acl.uplink_rules[0]",
            ),
            ("[admin]\naddress = \"x\"", "admin.address"),
            ("[admin]\nmax_connections = 0", "admin.max_connections"),
            ("[n4]\nt1_ms = 1", "n4.t1_ms"),
            ("[n4]\nsmf_t1_ms = 0", "n4.smf_t1_ms"),
            ("[n4]\nsmf_n1 = 100", "n4.smf_n1"),
            ("[gtpu]\necho_timeout_ms = 5", "gtpu.echo_timeout_ms"),
            ("[gtpu]\necho_retries = 0", "gtpu.echo_retries"),
            ("[gtpu]\necho_interval_s = 100000", "gtpu.echo_interval_s"),
            (
                "[limits]\nresponse_cache_bytes = 1000",
                "limits.response_cache_bytes_per_peer",
            ),
            ("[log]\nformat = \"xml\"", "format"),
        ] {
            let e = FileConfig::parse(text).unwrap_err();
            assert!(e.to_string().contains(key), "{text:?}: {e}");
        }
    }
}
