//! Opens the configured interfaces: one queue per worker on each of N3, N9 and N6, and says
//! at start-up what each one is. A host that cannot do what the config asks gets an error
//! naming the key and the reason, never a panic.

use crate::config::{Backend, Engine, FileConfig, Interface};
use anyhow::{anyhow, bail, Context};
use aya::programs::{ProgramFd, XdpMode};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use upf_io::af_packet::{AfPacketConfig, AfPacketIo, Fanout, FanoutMode};
use upf_io::af_xdp::{AttachMode, XdpConfig, XdpInterface};
use upf_io::link::Link;
use upf_io::netlink;
use upf_io::pcap::{Capture, Direction};
use upf_io::tun::TunIo;
use upf_io::udp::{UdpConfig, UdpIo};
use upf_io::{PacketIo, Port};
use upf_runtime::priority::{Classes, Mode};
use upf_runtime::{PortQueue, RuntimeConfig, WorkerQueues};

/// What [`open`] made: the workers' queues, a start-up report, and what must live as long
/// as the run (and be undone after it).
#[derive(Debug)]
pub struct Opened {
    pub queues: Vec<WorkerQueues>,
    /// The XDP engine, loaded and attached in front of the af_xdp queues (`engine`).
    pub xdp: Option<upf_xdp::Engine>,
    pub report: Vec<String>,
    pub cleanup: Cleanup,
}

/// Undoes host changes made at start-up (routes), in reverse order, when dropped, and holds
/// what must live as long as the run (sockets that keep the kernel quiet, XDP attachments).
#[derive(Debug, Default)]
pub struct Cleanup {
    /// Routes added: prefix, length, device.
    routes: Vec<(IpAddr, u8, u32)>,
    held: Vec<Box<dyn std::fmt::Debug + Send>>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(mut nl) = netlink::Socket::open() else {
            return;
        };
        for (prefix, len, dev) in self.routes.drain(..).rev() {
            let _ = nl.delete_route(prefix, len, dev);
        }
    }
}

/// "ADDRESS/LENGTH" as an address and a prefix length.
fn prefix(p: &str) -> Option<(IpAddr, u8)> {
    let (a, len) = p.split_once('/')?;
    Some((a.parse().ok()?, len.parse().ok()?))
}

pub fn open(c: &FileConfig, rt: &RuntimeConfig) -> anyhow::Result<Opened> {
    let n = rt.workers;
    let mut queues: Vec<WorkerQueues> = (0..n).map(|_| WorkerQueues::default()).collect();
    let mut report = Vec::new();
    let mut cleanup = Cleanup::default();
    let mut steered = true;
    // With the XDP engine, each af_xdp interface's steering program is tail-called by it
    // instead of attached: (port, interface, steering program).
    let xdp_on = match (c.engine, c.xdp_engine_unfit()) {
        (Engine::User, _) => false,
        (_, None) => true,
        (_, Some(why)) => {
            report.push(format!("engine: user ({why})"));
            false
        }
    };
    let mut punt_to: Option<Vec<(Port, String, ProgramFd)>> = xdp_on.then(Vec::new);
    let classes = (rt.priority.mode != Mode::Fifo).then_some(&rt.priority.classes);
    let classify = Classify {
        spread_ues: &c.workers.spread_ues,
        classes,
    };

    // N3 (and N9 when it has its own interface): GTP-U.
    let n3_addrs = c.n3_addresses();
    for (port, key, iface, addrs) in [
        (Port::N3, "n3", Some(&c.n3), n3_addrs.clone()),
        (
            Port::N9,
            "n9",
            c.n9.as_ref(),
            c.n9.as_ref()
                .map(|i| i.addresses.clone())
                .unwrap_or_default(),
        ),
    ] {
        let Some(iface) = iface else { continue };
        let backend = iface.gtpu_backend();
        if port == Port::N9 && (backend == Backend::None || addrs.is_empty()) {
            continue; // N9 shares N3's queues.
        }
        match backend {
            Backend::Udp => {
                steered = false;
                // A cluster's instance takes over other shards' N3 addresses: it listens on
                // every address of the family (the source of what it sends is then the
                // kernel's choice).
                let ip = match addrs.first() {
                    Some(IpAddr::V6(_)) if c.cluster.is_some() => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                    Some(_) if c.cluster.is_some() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    Some(a) => *a,
                    None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                };
                let bind = SocketAddr::new(ip, iface.port);
                // An ephemeral port (tests) is chosen by the first socket; the others join it.
                let mut bind_at = bind;
                for (i, q) in queues.iter_mut().enumerate() {
                    let mut u = UdpConfig::new(bind_at, port);
                    u.reuse_port = n > 1;
                    u.batch = rt.batch.min(64);
                    let io = UdpIo::open(&u).with_context(|| format!("{key}: udp on {bind}"))?;
                    bind_at = io.local_addr();
                    push(q, i, port, 0, io, iface)?;
                }
            }
            Backend::AfPacket | Backend::AfXdp => {
                let name = iface.interface.as_deref().unwrap_or_default();
                let held = ethernet(
                    &mut queues,
                    (port, 0),
                    key,
                    name,
                    backend,
                    iface,
                    &classify,
                    &mut report,
                    &mut steered,
                    punt_to.as_mut(),
                )?;
                cleanup.held.extend(held);
                // The kernel sees GTP-U too (AF_PACKET gets copies): a socket holding the port
                // keeps it from answering with ICMP port unreachable.
                for a in &addrs {
                    if let Ok(s) = std::net::UdpSocket::bind(SocketAddr::new(*a, iface.port)) {
                        cleanup.held.push(Box::new(s));
                    }
                }
            }
            b => bail!("{key}.backend: {b:?} cannot carry GTP-U"),
        }
    }

    // N6: plain IP, one interface per network instance.
    let instances = upf_dataplane::NetworkInstances::new(c.n6.instance_names()).context("n6")?;
    let several = c.n6.0.len() > 1;
    for (key, n6) in c.n6.keyed() {
        let instance = instances
            .id(n6.network_instance.as_deref())
            .ok_or_else(|| anyhow!("{key}.network_instance: not interned"))?;
        let named = |what: String| match &n6.network_instance {
            Some(ni) => format!("{key} ({ni}): {what}"),
            None => format!("{key}: {what}"),
        };
        let tun_name = n6.interface.clone().unwrap_or_else(|| "upf0".into());
        let mut b6 = n6.n6_backend();
        if b6 == Backend::Auto {
            b6 = match TunIo::open(&tun_name, Port::N6) {
                Ok(_) => Backend::Tun,
                Err(e) => {
                    report.push(named(format!(
                        "no TUN device here ({e}): running without it; set {key}.backend to choose"
                    )));
                    Backend::None
                }
            };
        }
        match b6 {
            Backend::None => report.push(named(
                "none (uplink packets to its data network are dropped)".into(),
            )),
            Backend::Tun => {
                let name = tun_name;
                // The kernel spreads a multi-queue TUN's packets by flow, not by UE.
                if n > 1 {
                    steered = false;
                }
                for (i, q) in queues.iter_mut().enumerate() {
                    let io = TunIo::open(&name, Port::N6)
                        .with_context(|| format!("{key}: tun {name:?}"))?;
                    push(q, i, Port::N6, instance, io, n6)?;
                }
                let mut nl = netlink::Socket::open().context("n6: rtnetlink")?;
                let dev = Link::by_name(&name).context("n6")?.ifindex;
                // No IPv6 link-local address: the host would otherwise send router
                // solicitations and MLD reports into the data path (best effort: older
                // kernels lack it).
                let _ = nl.disable_ipv6_addr_gen(dev);
                nl.set_link_up(dev)
                    .with_context(|| format!("{key}: setting {name} up"))?;
                if n6.route_ue_pools {
                    // With several N6s, each device gets the pools of its own instance.
                    let ni = n6.network_instance.as_deref();
                    for p in &c.ue_pools_of(several.then_some(ni)) {
                        let (addr, len) =
                            prefix(p).ok_or_else(|| anyhow!("{key}.route_ue_pools: pool {p:?}"))?;
                        nl.replace_route(addr, len, dev).with_context(|| {
                            format!("{key}.route_ue_pools: route {p} into {name}")
                        })?;
                        cleanup.routes.push((addr, len, dev));
                        report.push(format!("{key}: route {p} into {name}"));
                    }
                }
            }
            Backend::AfPacket | Backend::AfXdp => {
                let name = n6.interface.as_deref().unwrap_or_default();
                let held = ethernet(
                    &mut queues,
                    (Port::N6, instance),
                    &key,
                    name,
                    b6,
                    n6,
                    &classify,
                    &mut report,
                    &mut steered,
                    punt_to.as_mut(),
                )?;
                cleanup.held.extend(held);
            }
            b => bail!("{key}.backend: {b:?} cannot carry N6"),
        }
    }
    let xdp = match punt_to {
        Some(ports) => Some(xdp_engine(c, rt, &ports, &mut report)?),
        None => None,
    };
    for (i, q) in queues.iter_mut().enumerate() {
        q.steered = steered;
        for pq in &q.queues {
            report.push(format!("worker {i}: {}", pq.io.describe()));
        }
    }
    if !steered && n > 1 {
        report.push("steering: in software (the backend cannot steer by UE): at most one hand-off per packet".into());
    }
    Ok(Opened {
        queues,
        xdp,
        report,
        cleanup,
    })
}

/// How the BPF programs in front of an Ethernet interface's queues sort packets: by UE, by
/// flow for these peak-rate UEs, and into these queue groups (priority modes).
struct Classify<'a> {
    spread_ues: &'a [IpAddr],
    classes: Option<&'a Classes>,
}

/// One queue per worker on an Ethernet interface. AF_PACKET: every worker's socket (with
/// `classes`, one per queue group) joins one fanout group whose eBPF program picks the UE's
/// owner and the group (software hand-off and classification if it cannot load).
/// AF_XDP: one socket per NIC queue, worker i on queue i; the program passes the kernel what
/// is not the UPF's (ARP, ND, PFCP), and packets arriving on another worker's queue are
/// handed over in software.
#[allow(clippy::too_many_arguments)]
fn ethernet(
    queues: &mut [WorkerQueues],
    (port, instance): (Port, u8),
    key: &str,
    name: &str,
    backend: Backend,
    iface: &Interface,
    classify: &Classify<'_>,
    report: &mut Vec<String>,
    steered: &mut bool,
    punt_to: Option<&mut Vec<(Port, String, ProgramFd)>>,
) -> anyhow::Result<Option<Box<dyn std::fmt::Debug + Send>>> {
    let n = queues.len();
    match backend {
        Backend::AfPacket => {
            // Fanout group ids are per network namespace: one per process, port and network
            // instance.
            let pid = u16::try_from(std::process::id() & 0x3fff).unwrap_or(0);
            let group = ((pid << 2) | u16::try_from(port.index()).unwrap_or(0))
                .wrapping_add(u16::from(instance) << 8);
            for (i, q) in queues.iter_mut().enumerate() {
                let mut cfg = AfPacketConfig::new(name, port);
                cfg.spread_ues = classify.spread_ues.to_vec();
                cfg.classes = classify.classes.cloned();
                // Queue groups are fanout members, one worker's too.
                if n > 1 || classify.classes.is_some() {
                    cfg.fanout = Some(Fanout {
                        group,
                        worker: i,
                        workers: n,
                    });
                }
                let io = AfPacketIo::open(cfg)
                    .with_context(|| format!("{key}: af_packet on {name:?}"))?;
                if n > 1 && *io.fanout_mode() != FanoutMode::Ebpf {
                    *steered = false;
                }
                push(q, i, port, instance, io, iface)?;
            }
            Ok(None)
        }
        Backend::AfXdp => {
            let mut cfg = XdpConfig::new(port, u32::try_from(n).unwrap_or(1));
            cfg.spread_ues = classify.spread_ues.to_vec();
            cfg.classes = classify.classes.cloned();
            cfg.local = iface.addresses.clone();
            if punt_to.is_some() {
                cfg.attach = AttachMode::TailCalled;
                cfg.frames = PUNT_FRAMES;
            }
            let xi = XdpInterface::open(name, cfg)
                .with_context(|| format!("{key}: af_xdp on {name:?}"))?;
            let nq = usize::try_from(xi.queues()).unwrap_or(1);
            if nq < n {
                bail!(
                    "{key}: af_xdp on {name:?}: the interface has {nq} queue(s) and workers.count is {n}; \
                     each worker needs a queue of its own (ethtool -L {name} combined {n}; a veth: \
                     numrxqueues/numtxqueues {n} when it is created)"
                );
            }
            match punt_to {
                Some(p) => {
                    let fd = xi
                        .program_fd()
                        .with_context(|| format!("{key}: af_xdp on {name:?}"))?;
                    p.push((port, name.to_string(), fd));
                    report.push(format!(
                        "{key}: AF_XDP steering of {name} behind the XDP engine, {nq} queue(s)"
                    ));
                }
                None => report.push(format!(
                    "{key}: XDP program on {name} ({}), {nq} queue(s)",
                    if xi.native() { "native" } else { "generic" }
                )),
            }
            // Frames on a queue belong to its socket: the owner may be another worker.
            if n > 1 {
                *steered = false;
            }
            for (i, q) in queues.iter_mut().enumerate() {
                let io = xi
                    .socket(u32::try_from(i).unwrap_or(0))
                    .with_context(|| format!("{key}: af_xdp queue {i} of {name:?}"))?;
                push(q, i, port, instance, io, iface)?;
            }
            Ok(Some(Box::new(xi)))
        }
        _ => Ok(None),
    }
}

/// UMEM frames of an AF_XDP socket behind the XDP engine (its RX ring holds half): 10 ms of
/// 200 kpps, the traffic a swap hands to a worker at once, where the default 1,024 held 2.5
/// ms and overflowed while the swap held the worker's core (8 MiB a socket; root is not
/// held to RLIMIT_MEMLOCK for a UMEM).
const PUNT_FRAMES: u32 = 4096;

/// Loads the XDP engine with maps for `limits.sessions` and attaches it to the af_xdp
/// interfaces `ports`, their steering programs getting what it punts. Forwarding is turned on
/// on them (IPv6 forwarding on N3 too when N3 has an IPv6 address): `bpf_fib_lookup` answers
/// only for interfaces that forward.
fn xdp_engine(
    c: &FileConfig,
    rt: &RuntimeConfig,
    ports: &[(Port, String, ProgramFd)],
    report: &mut Vec<String>,
) -> anyhow::Result<upf_xdp::Engine> {
    let n3 = c
        .n3_addresses()
        .into_iter()
        .find_map(|a| match a {
            IpAddr::V4(v) => Some(v),
            IpAddr::V6(_) => None,
        })
        .ok_or_else(|| anyhow!("engine: the XDP engine needs an IPv4 N3 address"))?;
    let sessions = u32::try_from(c.limits.sessions)
        .map_err(|_| anyhow!("limits.sessions: above what the XDP engine's maps hold"))?;
    let mut engine = upf_xdp::Engine::load(upf_xdp::Config {
        sessions,
        n3,
        n9: rt.pipeline.n9.v4.unwrap_or(n3),
        n3_v6: rt.pipeline.n3.v6,
        n9_v6: rt.pipeline.n9.v6,
        outer_ttl: rt.pipeline.outer_ttl,
        hops: None,
        acl: rt.pipeline.uplink_acl.clone(),
    })
    .context("engine: loading the XDP engine")?;
    for (port, name, fd) in ports {
        let key = port.name();
        let path = format!("/proc/sys/net/ipv4/conf/{name}/forwarding");
        std::fs::write(&path, "1").with_context(|| format!("{key}: turning on {path}"))?;
        // IPv6 tunnels leave by N3: their next hops need IPv6 forwarding there.
        if *port == Port::N3 && rt.pipeline.n3.v6.is_some() {
            let path = format!("/proc/sys/net/ipv6/conf/{name}/forwarding");
            std::fs::write(&path, "1").with_context(|| format!("{key}: turning on {path}"))?;
        }
        let native = match engine.attach(*port, name, Some(fd), XdpMode::Driver) {
            Ok(()) => true,
            Err(_) => {
                engine
                    .attach(*port, name, Some(fd), XdpMode::Skb)
                    .with_context(|| format!("{key}: attaching the XDP engine to {name}"))?;
                false
            }
        };
        report.push(format!(
            "{key}: XDP engine on {name} ({}), forwarding on",
            if native { "native" } else { "generic" }
        ));
    }
    report.push(format!(
        "engine: {} (the XDP engine, maps for {sessions} sessions; the workers run what it punts)",
        c.engine.mode().name()
    ));
    Ok(engine)
}

fn push(
    q: &mut WorkerQueues,
    worker: usize,
    port: Port,
    instance: u8,
    io: impl PacketIo + 'static,
    iface: &Interface,
) -> anyhow::Result<()> {
    let io: Box<dyn PacketIo> = match &iface.pcap {
        Some(path) => {
            // One capture per worker queue: NAME.wN.pcap.
            let path = path.with_extension(format!("w{worker}.pcap"));
            let cap = Capture::create(io, &path, Direction::Both)
                .with_context(|| format!("{}.pcap {}", port.name(), path.display()))?;
            Box::new(cap)
        }
        None => Box::new(io),
    };
    q.queues.push(PortQueue { port, instance, io });
    Ok(())
}

impl FileConfig {
    /// The UE pools' IPv4/IPv6 networks as `ip route` prefixes (the agent's default pool when
    /// none is configured).
    pub fn ue_pools_or_default(&self) -> Vec<String> {
        self.ue_pools_of(None)
    }

    /// [`Self::ue_pools_or_default`], or with `Some(ni)` only the pools of network instance
    /// `ni` (`Some(None)`: those of none).
    pub fn ue_pools_of(&self, instance: Option<Option<&str>>) -> Vec<String> {
        if self.ue_pools.is_empty() {
            return match instance {
                None | Some(None) => vec!["10.60.0.0/16".into(), "2001:db8:60::/48".into()],
                Some(Some(_)) => Vec::new(),
            };
        }
        // A cluster's instance routes every shard's pools from the start: the N6 side
        // sends it a shard's downlink only once that shard is moved here, and then its
        // sessions are installed already.
        let all: Vec<&crate::config::UePool> = match &self.cluster {
            Some(c) => c.shards.values().flat_map(|s| &s.ue_pool).collect(),
            None => self.ue_pools.iter().collect(),
        };
        all.into_iter()
            .filter(|p| instance.is_none_or(|ni| p.network_instance.as_deref() == ni))
            .flat_map(|p| p.ipv4.iter().chain(p.ipv6.iter()).cloned())
            .collect()
    }
}
