//! `upf run`: the daemon. The N4 agent on a UDP socket (a thin tokio driver around the sans-IO
//! agent), the workers on the configured interfaces, and the admin endpoint (metrics and the
//! API `upf show` reads), until SIGINT/SIGTERM.

use crate::admin;
use crate::backends;
use crate::checkpoint::Checkpoints;
use crate::cluster::{self, Served};
use crate::config::{self, Backend, FileConfig, LogFormat};
use crate::datapath::Observed;
use crate::shards::{Hub, Shard};
use crate::state;
use anyhow::{bail, Context};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{error, info, warn};
use upf_n4::alloc::UePoolConfig;
use upf_n4::{Agent, AllowedPeer, Config, Event, TunnelAddrs};
use upf_runtime::{Engines, RuntimeConfig, Workers};

/// Options of `upf run`. Flags override the file's keys.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML; see upf.toml). Without it every key has its default.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// N4 (PFCP) address to listen on, IP[:PORT] (port 8805 by default). [n4.address]
    #[arg(long)]
    pub n4: Option<String>,
    /// N3 GTP-U address (put in chosen F-TEIDs). [n3.addresses]
    #[arg(long)]
    pub n3: Option<IpAddr>,
    /// UDP port of the N3 udp backend (0: any free port, for tests). [n3.port]
    #[arg(long)]
    pub n3_port: Option<u16>,
    /// N9 address put in chosen F-TEIDs of Core-side PDRs (default: the N3 address).
    #[arg(long)]
    pub n9: Option<IpAddr>,
    /// N6 backend: tun, auto or none. [n6.backend]
    #[arg(long)]
    pub n6: Option<String>,
    /// Worker threads. [workers.count]
    #[arg(long)]
    pub workers: Option<usize>,
    /// Admin/metrics HTTP address; "" turns it off. [admin.address]
    #[arg(long)]
    pub admin: Option<String>,
    /// UE IPv4 pool as [DNN=]A.B.C.D/LEN (repeatable). [[ue_pool]]
    #[arg(long = "ue-pool")]
    pub ue_pools: Vec<String>,
    /// An SMF to set up an association with (UP-initiated), IP[:PORT] (repeatable). [n4.smfs]
    #[arg(long = "smf")]
    pub smfs: Vec<String>,
    /// Only these peer IP addresses may associate (repeatable). [n4.allow_peers]
    #[arg(long = "allow-peer")]
    pub allow_peers: Vec<IpAddr>,
    /// Heartbeat interval in seconds. [n4.heartbeat_interval_s]
    #[arg(long)]
    pub heartbeat_interval: Option<u64>,
    /// Retransmission timer T1 (ms) and count N1. [n4.t1_ms, n4.n1]
    #[arg(long)]
    pub t1_ms: Option<u64>,
    #[arg(long)]
    pub n1: Option<u32>,
    /// Log format: text or json. [log.format]
    #[arg(long)]
    pub log_format: Option<String>,
    /// Persist sessions in this file, as `[state] path` does.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Move the store aside and start without sessions (a store that cannot be used
    /// otherwise stops the UPF: corrupt, a newer schema, another Node ID).
    #[arg(long)]
    pub discard_state: bool,
    /// This instance's name in `[cluster]` (default: the host name); it serves the shard
    /// of that name. [cluster.instance]
    #[arg(long)]
    pub instance: Option<String>,
    /// Validate the configuration, print it as understood, and exit.
    #[arg(long)]
    pub check: bool,
}

/// The file (or defaults) with the flags applied, validated.
pub fn file_config(args: &Args) -> anyhow::Result<FileConfig> {
    let mut c = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    if let Some(a) = &args.n4 {
        c.n4.address = a.clone();
    }
    if let Some(a) = args.n3 {
        c.n3.addresses = vec![a];
    }
    if let Some(p) = args.n3_port {
        c.n3.port = p;
    }
    if let Some(a) = args.n9 {
        let mut n9 = c.n9.take().unwrap_or_else(|| config::Interface {
            backend: Some(Backend::None),
            ..Default::default()
        });
        n9.addresses = vec![a];
        c.n9 = Some(n9);
    }
    if let Some(b) = &args.n6 {
        let backend = Some(match b.as_str() {
            "tun" => Backend::Tun,
            "auto" => Backend::Auto,
            "none" => Backend::None,
            "af_packet" => Backend::AfPacket,
            "af_xdp" => Backend::AfXdp,
            _ => {
                bail!("--n6 {b:?}: expected tun, auto, none, af_packet or af_xdp")
            }
        });
        for n in &mut c.n6.0 {
            n.backend = backend;
        }
    }
    if let Some(n) = args.workers {
        c.workers.count = n;
    }
    if let Some(a) = &args.admin {
        c.admin.address = a.clone();
    }
    if !args.ue_pools.is_empty() {
        c.ue_pools = args
            .ue_pools
            .iter()
            .map(|s| {
                let (dnn, net) = match s.split_once('=') {
                    Some((d, n)) => (Some(d.to_string()), n),
                    None => (None, s.as_str()),
                };
                config::UePool {
                    dnn,
                    ipv4: Some(net.to_string()),
                    ..Default::default()
                }
            })
            .collect();
    }
    c.n4.smfs.extend(args.smfs.iter().cloned());
    c.n4.allow_peers.extend(args.allow_peers.iter().copied());
    if let Some(h) = args.heartbeat_interval {
        c.n4.heartbeat_interval_s = h;
    }
    if let Some(t) = args.t1_ms {
        c.n4.t1_ms = t;
    }
    if let Some(n) = args.n1 {
        c.n4.n1 = n;
    }
    if let Some(p) = &args.state {
        c.state.get_or_insert_with(Default::default).path = Some(p.clone());
    }
    if let Some(i) = &args.instance {
        match c.cluster.as_mut() {
            Some(cl) => cl.instance = Some(i.clone()),
            None => bail!("--instance {i:?}: the configuration has no [cluster]"),
        }
    }
    if let Some(f) = &args.log_format {
        c.log.format = match f.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => bail!("--log-format {f:?}: expected text or json"),
        };
    }
    c.validate()?;
    // The instance serves its own shard from the start: it must be one of them.
    if let Some(cl) = &c.cluster {
        c.for_shard(&cl.home_shard())?;
    }
    Ok(c)
}

/// NTP seconds now (RFC 5905 era 0: seconds since 1900).
pub fn ntp_now() -> u32 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ((unix + 2_208_988_800) & 0xffff_ffff) as u32
}

/// The agent's configuration from the file's.
pub fn agent_config(c: &FileConfig) -> anyhow::Result<Config> {
    let n4 = config::socket_addr(&c.n4.address, 8805).context("n4.address")?;
    let mut cfg = Config::new(n4.ip());
    if let Some(id) = &c.n4.node_id {
        cfg.node_id = match id.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => upf_pfcp::ie::NodeId::Ipv4(a),
            Ok(IpAddr::V6(a)) => upf_pfcp::ie::NodeId::Ipv6(a),
            Err(_) => upf_pfcp::ie::NodeId::Fqdn(id.as_str().into()),
        };
    }
    cfg.n3 = tunnel_addrs(&c.n3_addresses());
    cfg.n9 =
        c.n9.as_ref()
            .filter(|i| !i.addresses.is_empty())
            .map(|i| tunnel_addrs(&i.addresses));
    if !c.ue_pools.is_empty() {
        cfg.ue_pools = c
            .ue_pools
            .iter()
            .map(|p| UePoolConfig {
                name: p.dnn.clone(),
                dnn: p.dnn.clone(),
                network_instance: p.network_instance.clone(),
                ipv4: p.ipv4.as_deref().and_then(config::ipv4_net),
                ipv6: p
                    .ipv6
                    .as_deref()
                    .and_then(config::ipv6_net)
                    .map(|(a, l)| (a, l, p.ipv6_ue_prefix_len.unwrap_or(64))),
            })
            .collect();
    }
    cfg.smfs =
        c.n4.smfs
            .iter()
            .filter_map(|s| config::socket_addr(s, 8805))
            .collect();
    cfg.allowed_peers =
        c.n4.allow_peers
            .iter()
            .map(|&a| AllowedPeer::Addr(a))
            .collect();
    cfg.heartbeat_interval = Duration::from_secs(c.n4.heartbeat_interval_s.max(1));
    cfg.t1 = Duration::from_millis(c.n4.t1_ms.max(10));
    cfg.n1 = c.n4.n1;
    cfg.smf_t1 = Duration::from_millis(c.n4.smf_t1_ms);
    cfg.smf_n1 = c.n4.smf_n1;
    cfg.teid_reuse_after = Duration::from_secs(c.n4.teid_reuse_after_s);
    if let Some([first, last]) = c.n4.teid_range {
        cfg.teid_range = (first, last);
    }
    cfg.limits.sessions = c.limits.sessions;
    cfg.limits.sessions_per_association = c.limits.sessions_per_association;
    cfg.limits.associations = c.limits.associations;
    cfg.limits.response_cache = c.limits.response_cache_entries;
    cfg.limits.response_cache_bytes = c.limits.response_cache_bytes;
    cfg.limits.response_cache_bytes_per_peer = c.limits.response_cache_bytes_per_peer;
    cfg.limits.pending_requests = c.limits.pending_requests;
    cfg.limits.pending_request_bytes = c.limits.pending_request_bytes;
    Ok(cfg)
}

fn tunnel_addrs(a: &[IpAddr]) -> TunnelAddrs {
    let mut t = TunnelAddrs::default();
    for ip in a {
        match ip {
            IpAddr::V4(v) if t.ipv4.is_none() => t.ipv4 = Some(*v),
            IpAddr::V6(v) if t.ipv6.is_none() => t.ipv6 = Some(*v),
            _ => {}
        }
    }
    t
}

/// The workers' configuration from the file's.
pub fn runtime_config(c: &FileConfig) -> anyhow::Result<RuntimeConfig> {
    let mut acl_text = c.acl.uplink_rules.join("\n");
    if let Some(f) = &c.acl.uplink_file {
        let t = std::fs::read_to_string(f)
            .with_context(|| format!("acl.uplink_file {}", f.display()))?;
        acl_text.push('\n');
        acl_text.push_str(&t);
    }
    let acl = upf_dataplane::Acl::load(&acl_text).context("acl")?;
    let local = |a: &[IpAddr]| {
        let t = tunnel_addrs(a);
        upf_dataplane::LocalAddrs {
            v4: t.ipv4,
            v6: t.ipv6,
        }
    };
    let n3 = local(&c.n3_addresses());
    let n9 =
        c.n9.as_ref()
            .filter(|i| !i.addresses.is_empty())
            .map_or(n3, |i| local(&i.addresses));
    Ok(RuntimeConfig {
        workers: c.workers.count,
        cores: c.workers.cores.clone(),
        batch: c.workers.batch,
        spread_ues: c.workers.spread_ues.clone(),
        idle_poll: (!c.workers.busy_poll)
            .then(|| std::time::Duration::from_micros(c.workers.idle_poll_us)),
        priority: c.priority.runtime()?,
        pipeline: upf_dataplane::PipelineConfig {
            n3,
            n9,
            buffer_packets_per_far: c.limits.buffer_packets_per_far,
            buffer_bytes: c.limits.buffer_bytes_per_worker,
            error_indications_per_s: c.limits.error_indications_per_s,
            tunnel_source_per_session: c.cluster.is_some(),
            silent_teids: c.cluster.as_ref().map_or_else(Vec::new, |cl| {
                let home = cl.home_shard();
                (cl.shards.iter())
                    .filter(|(name, _)| **name != home)
                    .map(|(_, s)| (s.teid_range[0], s.teid_range[1]))
                    .collect()
            }),
            echo: c.gtpu.echo(),
            outer_ttl: 64,
            uplink_acl: Arc::new(acl),
            // Each worker's tables sized for its share of the session limit (UEs hash
            // evenly; a quarter more for the imbalance), so that none doubles while packets
            // wait: address space only, memory as sessions come.
            expected_sessions: (c.limits.sessions.div_ceil(c.workers.count.max(1)) * 5 / 4)
                .min(MAX_PRESIZED_SESSIONS),
            network_instances: upf_dataplane::NetworkInstances::new(c.n6.instance_names())
                .context("n6")?,
            aggregates: Default::default(),
        },
    })
}

/// The most sessions a worker's tables are sized for up front (beyond, they grow): ~4.5 GB
/// of address space per worker, touched only as sessions come.
const MAX_PRESIZED_SESSIONS: usize = 1 << 20;

fn init_logging(c: &FileConfig) {
    let filter = tracing_subscriber::EnvFilter::try_new(&c.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A second initialisation (tests) keeps the first.
    let _ = match c.log.format {
        LogFormat::Json => b.json().try_init(),
        LogFormat::Text => b.try_init(),
    };
}

/// Runs until SIGINT/SIGTERM. Errors are start-up errors (bad config, address in use, an
/// interface the host cannot give), each saying what to change.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let file = file_config(args)?;
    if args.check {
        println!("{file:#?}");
        return Ok(());
    }
    init_logging(&file);
    // In a cluster this instance starts as its own shard; it may serve others later.
    let c = match &file.cluster {
        Some(cl) => file.for_shard(&cl.home_shard())?,
        None => file.clone(),
    };
    let agent_cfg = agent_config(&c)?;
    let rt_cfg = runtime_config(&c)?;
    // Before any interface is touched: a store this UPF cannot use stops it here.
    let stored = match &c.state {
        Some(s) => Some(state::open(s, &agent_cfg.node_id, args.discard_state)?),
        None => None,
    };
    let cluster = match &file.cluster {
        Some(_) => Some(cluster::start(&file)?),
        None => None,
    };
    let opened = backends::open(&c, &rt_cfg)?;
    for line in &opened.report {
        info!(target: "upf", "{line}");
    }
    if (1..60).contains(&c.gtpu.echo_interval_s) {
        warn!(
            target: "upf",
            "gtpu.echo_interval_s = {}: TS 29.281 §7.2.1 asks for at least 60 s between Echo Requests on a path",
            c.gtpu.echo_interval_s
        );
    }
    let workers = Workers::start_io(&rt_cfg, opened.queues)?;
    let engines = match opened.xdp {
        Some(x) => Engines::with_xdp(workers, x, c.engine.mode()),
        None => Engines::user(workers),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio")?;
    let start = match cluster {
        Some(cl) => Start::Cluster(Box::new(file), cl),
        None => Start::Alone(Box::new(agent_cfg), stored),
    };
    let result = rt.block_on(serve(&c, start, engines));
    // Routes and devices set up for the run go away with it.
    drop(opened.cleanup);
    result
}

/// What the N4 loop starts with.
#[derive(Debug)]
enum Start {
    /// One UPF: its agent's configuration, and its store with `[state]`.
    Alone(Box<Config>, Option<state::Opened>),
    /// A cluster's instance (the whole file: every shard's keys): it serves the shards the
    /// membership thread gives it.
    Cluster(Box<FileConfig>, upf_state::Cluster),
}

async fn serve(c: &FileConfig, start: Start, engines: Engines) -> anyhow::Result<()> {
    let started = Instant::now();
    let hub = Hub::new(Observed::new(engines));
    let mut served = Served {
        shards: Vec::new(),
        mirrors: Vec::new(),
        checkpoints: Checkpoints::new(c.usage_checkpoint_ms(), started),
        etcd_reachable: true,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("signal")?;
    let (file, cluster) = match start {
        Start::Alone(cfg, stored) => {
            let addr = config::socket_addr(&c.n4.address, 8805).context("n4.address")?;
            let mut agent = Agent::new(*cfg, Hub::attach(&hub), started, ntp_now())?;
            // Sessions forward again before the first PFCP message is read.
            let persist = stored.map(|o| state::resume(&mut agent, o, started));
            let mut s = Shard::new(String::new(), agent, addr, persist);
            s.resume_usage(served.checkpoints.as_mut());
            s.bind()
                .await
                .with_context(|| format!("n4.address {addr}"))?;
            served.shards.push(s);
            (None, None)
        }
        Start::Cluster(file, cl) => (Some(*file), Some(cl)),
    };
    // A cluster's instance serves nothing until etcd gives it a shard (its own, or one
    // that becomes free while it waits as a standby).
    if let (Some(file), Some(cl)) = (&file, &cluster) {
        if !standby(file, cl, &hub, &mut served, &mut term).await? {
            return Ok(());
        }
    }
    let (admin_tx, mut admin_rx) = tokio::sync::mpsc::channel::<admin::Request>(16);
    let admin_refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    if !c.admin.address.is_empty() {
        let a = config::socket_addr(&c.admin.address, 9464).context("admin.address")?;
        let l = tokio::net::TcpListener::bind(a)
            .await
            .with_context(|| format!("admin.address {a}"))?;
        info!(target: "upf", "admin: http://{} (/metrics, /api/…)", l.local_addr().unwrap_or(a));
        tokio::spawn(admin::serve(
            l,
            admin_tx,
            c.admin.max_connections,
            admin_refused.clone(),
        ));
    }
    let mut buf = vec![0u8; 65_536];
    let mut peer_lines = PeerLogLimit::new(PEER_LOG_LINES_PER_S);
    // Which socket is looked at first, turn by turn: no shard's N4 starves another's.
    let mut first = 0usize;
    loop {
        if let (Some(file), Some(cl)) = (&file, &cluster) {
            while let Some(ev) = cl.poll_event() {
                cluster::apply(ev, file, cl, &hub, &mut served).await?;
            }
            if served.shards.is_empty() {
                info!(target: "upf::cluster", "serving no shard now: waiting as a standby");
                if !standby(file, cl, &hub, &mut served, &mut term).await? {
                    return Ok(());
                }
            }
        }
        let now = Instant::now();
        for s in &mut served.shards {
            if let Some(p) = &s.persist {
                p.save(&mut s.agent);
            }
            s.transmit(now).await;
            while let Some(e) = s.agent.poll_event() {
                let by_peer = matches!(
                    e,
                    Event::Refused { .. } | Event::Rejected { .. } | Event::Dropped { .. }
                );
                if !by_peer || peer_lines.allow(Instant::now()) {
                    log_event(&e);
                }
            }
        }
        // A change of engine under way: a bounded step of it between two PFCP messages.
        let moving = {
            let mut h = hub.borrow_mut();
            let engines = h.datapath_mut().inner_mut();
            if engines.moving() {
                engines.move_some(SWAP_STEP);
            }
            engines.moving()
        };
        // Data-path events (usage reports, downlink data) are polled at least every 20 ms
        // (at once while sessions are moving).
        let tick = Instant::now()
            + if moving {
                SWAP_PAUSE
            } else {
                Duration::from_millis(20)
            };
        if let Some(k) = &mut served.checkpoints {
            k.tick(now, &served.shards);
        }
        let deadline = served
            .shards
            .iter()
            .flat_map(|s| {
                [
                    s.agent.poll_timeout(),
                    s.held.as_ref().and_then(|h| h.deadline(now)),
                ]
            })
            .flatten()
            .chain(served.checkpoints.as_ref().map(Checkpoints::deadline))
            .fold(tick, Instant::min);
        first = first.wrapping_add(1);
        let recv = std::future::poll_fn(|cx| {
            let n = served.shards.len();
            for k in 0..n {
                let i = (first + k) % n;
                let Some(sock) = &served.shards[i].sock else {
                    continue;
                };
                let mut rb = tokio::io::ReadBuf::new(&mut buf);
                if let std::task::Poll::Ready(r) = sock.poll_recv_from(cx, &mut rb) {
                    let len = rb.filled().len();
                    return std::task::Poll::Ready((i, r.map(|peer| (len, peer))));
                }
            }
            std::task::Poll::Pending
        });
        tokio::select! {
            (i, r) = recv => match r {
                Ok((n, peer)) => served.shards[i].agent.handle_datagram(Instant::now(), peer, &buf[..n]),
                Err(e) => warn!(target: "upf::n4", "receive{}: {e}", served.shards[i].of()),
            },
            Some(req) = admin_rx.recv() => {
                if let admin::Query::SetEngine(mode) = req.query {
                    let mut h = hub.borrow_mut();
                    let _ = req.reply.send(admin::set_engine(h.datapath_mut().inner_mut(), mode));
                    continue;
                }
                let h = hub.borrow();
                // Every shard's writer, one figure (None without a store).
                let stats = (served.shards.iter())
                    .filter_map(|s| s.persist.as_ref().map(state::Persist::stats))
                    .reduce(|mut t, s| {
                        t.add(&s);
                        t
                    });
                let st = admin::State {
                    agents: served.shards.iter().map(|s| (s.name.as_str(), &s.agent)).collect(),
                    datapath: h.datapath(),
                    uptime_s: started.elapsed().as_secs(),
                    admin_refused: admin_refused.load(std::sync::atomic::Ordering::Relaxed),
                    state: stats,
                    checkpoints: served.checkpoints.as_ref().map(|k| k.stats(&served.shards)),
                    cluster: cluster.as_ref().map(|_| admin::ClusterView {
                        shards: served.shards
                            .iter()
                            .map(|s| (s.name.clone(), s.agent.session_count()))
                            .collect(),
                        etcd_reachable: served.etcd_reachable,
                    }),
                };
                let _ = req.reply.send(admin::answer(req.query, &st));
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                let now = Instant::now();
                for s in &mut served.shards {
                    if let Some(p) = &mut s.persist {
                        p.watch();
                    }
                    s.agent.handle_timeout(now);
                    let addr = s.addr;
                    s.bind().await.with_context(|| format!("n4 address {addr}"))?;
                }
                for m in &mut served.mirrors {
                    m.drain_events();
                }
                hub.borrow_mut().datapath_mut().inner_mut().tick();
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    if served.shards.iter().any(|s| s.persist.is_some()) {
        // Sessions stay, for the next start (or, in a cluster, for the instance that takes
        // the shards over at once when the lease is revoked): nobody is told to release them.
        // The last usage first, then what waited for the store goes once it is durable.
        if let Some(k) = &mut served.checkpoints {
            k.checkpoint(&served.shards);
        }
        for s in &mut served.shards {
            if let Some(p) = &s.persist {
                p.save(&mut s.agent);
                p.writer().flush(Duration::from_secs(5));
            }
            s.transmit(Instant::now()).await;
        }
        for mut s in served.shards {
            info!(
                target: "upf",
                "stopping: {} associations and {} sessions kept in the store{}",
                s.agent.association_count(),
                s.agent.session_count(),
                s.of()
            );
            if let Some(p) = s.persist.take() {
                p.save(&mut s.agent);
                p.close(Duration::from_secs(5));
            }
        }
        if let Some(cl) = cluster {
            cl.stop();
        }
    } else if let Some(s) = served.shards.first_mut() {
        shutdown(s).await;
    }
    Ok(())
}

/// Applies the membership thread's events until this instance serves a shard; false if
/// it was told to stop meanwhile.
async fn standby(
    file: &FileConfig,
    cl: &upf_state::Cluster,
    hub: &std::rc::Rc<std::cell::RefCell<Hub>>,
    served: &mut Served,
    term: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<bool> {
    while served.shards.is_empty() {
        match cl.poll_event() {
            Some(ev) => cluster::apply(ev, file, cl, hub, served).await?,
            None => tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = tokio::signal::ctrl_c() => return Ok(false),
                _ = term.recv() => return Ok(false),
            },
        }
    }
    Ok(true)
}

/// A swap moves sessions for this long between two looks at the N4 socket, then pauses:
/// PFCP is answered during a swap of any size, and a worker sharing this thread's core gets
/// it back before its queues fill (moving 1,000 sessions a step without a pause, a 200 kpps
/// stream lost ~500 packets a swap on the one-core rig).
const SWAP_STEP: Duration = Duration::from_millis(1);
const SWAP_PAUSE: Duration = Duration::from_millis(1);

/// Graceful stop: tell every associated SMF (Association Release), flush what is queued,
/// report the final counters, then the workers stop when `agent` (and with it the data path)
/// is dropped.
async fn shutdown(s: &mut Shard) {
    let agent = &mut s.agent;
    let peers: Vec<SocketAddr> = agent.associations().map(|(_, a)| a).collect();
    info!(
        target: "upf",
        "stopping: {} associations, {} sessions",
        agent.association_count(),
        agent.session_count()
    );
    agent.release_all(Instant::now());
    let until = Instant::now() + Duration::from_millis(500);
    let mut buf = vec![0u8; 65_536];
    // Send our requests and give the peers a moment to answer them (best effort).
    if let Some(sock) = s.sock.clone() {
        while Instant::now() < until {
            while let Some(t) = agent.poll_transmit() {
                let _ = sock.send_to(&t.payload, t.dest).await;
            }
            if !agent.has_pending_requests() {
                break;
            }
            if let Ok(Ok((n, peer))) =
                tokio::time::timeout(Duration::from_millis(50), sock.recv_from(&mut buf)).await
            {
                agent.handle_datagram(Instant::now(), peer, &buf[..n]);
            }
        }
    }
    let mut total = upf_dataplane::Counters::default();
    for w in agent.datapath().hub().datapath().inner().workers().stats() {
        total.add(&w.counters);
    }
    info!(
        target: "upf",
        "stopped; told {} peers; packets received {}, sent {}, dropped {}, buffered {}",
        peers.len(),
        total.received(),
        total.sent(),
        total.dropped_total(),
        total.buffered
    );
}

/// Lines a peer's requests can cause at will (refusals, rejections, drops) logged per second;
/// the rest are counted in /metrics all the same.
const PEER_LOG_LINES_PER_S: u32 = 20;

/// A budget of log lines per second, so that a flood of bad requests cannot flood the log.
#[derive(Debug)]
struct PeerLogLimit {
    per_s: u32,
    window: Option<Instant>,
    /// Lines asked for in the current second, logged or not.
    used: u32,
}

impl PeerLogLimit {
    fn new(per_s: u32) -> Self {
        Self {
            per_s,
            window: None,
            used: 0,
        }
    }

    /// Whether a line may be logged at `now`; says how many were not, once a second.
    fn allow(&mut self, now: Instant) -> bool {
        if self
            .window
            .is_none_or(|w| now.saturating_duration_since(w) >= Duration::from_secs(1))
        {
            if self.suppressed() > 0 {
                warn!(
                    target: "upf::n4",
                    "{} more refused, rejected or dropped PFCP messages not logged (at most {} lines a second; all are counted in /metrics)",
                    self.suppressed(),
                    self.per_s
                );
            }
            self.window = Some(now);
            self.used = 0;
        }
        self.used = self.used.saturating_add(1);
        self.used <= self.per_s
    }

    /// Lines not logged in the current second.
    fn suppressed(&self) -> u32 {
        self.used.saturating_sub(self.per_s)
    }
}

fn log_event(e: &Event) {
    match e {
        Event::Refused {
            message_type,
            peer,
            reason,
        } => warn!(
            target: "upf::n4",
            %peer,
            reason = reason.name(),
            "{} refused: the sender may not do this",
            upf_pfcp::message_name(*message_type)
        ),
        Event::Rejected {
            message_type,
            peer,
            reject,
        } => warn!(
            target: "upf::n4",
            %peer,
            "{} rejected: {reject}",
            upf_pfcp::message_name(*message_type)
        ),
        Event::SessionEstablished { seid } => {
            info!(target: "upf::n4", seid = format!("{:#x}", seid.0), "session established")
        }
        Event::SessionDeleted { seid, reason } => {
            info!(target: "upf::n4", seid = format!("{:#x}", seid.0), reason, "session deleted")
        }
        Event::AssociationUp { node, peer } => {
            info!(target: "upf::n4", %peer, node = %node, "association up")
        }
        Event::AssociationDown { node, reason } => {
            warn!(target: "upf::n4", node = %node, reason, "association down")
        }
        Event::RequestGivenUp { message_type, peer } => error!(
            target: "upf::n4",
            %peer,
            "{} unanswered after N1 retransmissions",
            upf_pfcp::message_name(*message_type)
        ),
        other => info!(target: "upf::n4", "{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_log_lines_are_rationed_per_second() {
        let t0 = Instant::now();
        let mut l = PeerLogLimit::new(3);
        let first: Vec<bool> = (0..5).map(|_| l.allow(t0)).collect();
        assert_eq!(first, [true, true, true, false, false]);
        assert_eq!(l.suppressed(), 2);
        assert!(!l.allow(t0 + Duration::from_millis(999)));
        assert!(l.allow(t0 + Duration::from_secs(1)), "a new second");
        assert_eq!(l.suppressed(), 0);
    }
}
