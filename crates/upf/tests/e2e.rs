//! End-to-end tests of `upf run` on real interfaces, as root: for each set of backends a
//! topology of three network namespaces (upf_netns::topology: ue / upf / dn) is built
//! with unique names, the daemon binary runs in the upf namespace with a generated config,
//! the loadgen's SMF (PFCP on N4) and gNB emulator (GTP-U on N3, the UEs behind a TUN) run
//! in-process in the ue namespace, and traffic goes from UE sockets through the UPF to the
//! DN namespace and back.
//!
//! Backend sets: `udp_tun` (N3 UDP socket, N6 TUN, 2 workers), `af_packet` (N3 and N6 on the
//! veths through AF_PACKET, 2 workers), `af_xdp` (both through AF_XDP, 2 workers on veths
//! made with 2 queues). Tests: ping both ways, numbered UDP both ways, iperf3 TCP both ways
//! (figures printed, not asserted), MBR on real traffic, buffering for an idle UE, 200
//! UEs over 2 workers, Echo Requests reaching the gNB (GTP-U path management), and (af_packet)
//! two data networks with their own N6s sharing the UE pool.
//!
//! Every test needs root (`#[ignore = "needs root"]`: `cargo test -- --ignored` as root, as
//! scripts/test.sh does). Needs iproute2, iputils-ping and
//! iperf3 (ethtool optional). `scripts/e2e.sh` runs them in release and tabulates iperf3.
//! Tests run one at a time (a lock), whatever `--test-threads` says: each takes the VM.

use serde_json::Value;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use upf_loadgen::gnb::{Gnb, GnbConfig, SessionTable, UeSession};
use upf_loadgen::smf::{
    ue_pool, Downlink, HighPriority, Qos, Session, SessionSpec, Smf, SmfConfig, UeAddr, UpfEvent,
};
use upf_netns::in_netns;
use upf_netns::topology::{Layout, Topology, DN, GNB as GNB_N3, UPF_N3, UPF_N4, UPF_N6};

const UE_NET: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 0);
/// The DN's UDP port the `acl` test's uplink ACL denies.
const DENIED_PORT: u16 = 40_002;
const TUN: &str = "uetun";

/// One test at a time: they share the machine's CPUs, and rates mean nothing in parallel.
static LOCK: Mutex<()> = Mutex::new(());
/// Makes namespace names unique within the process.
static TOPOLOGY_SEQ: AtomicUsize = AtomicUsize::new(0);

// ---------------------------------------------------------------------------------------
// The backend sets

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backends {
    /// N3: UDP socket on 192.168.3.1:2152; N6: TUN upf0 with the UE pool routed into it.
    UdpTun,
    /// N3 and N6: AF_PACKET on n3-upf / n6-upf, workers in a fanout group.
    AfPacket,
    /// N3 and N6: AF_XDP on n3-upf / n6-upf, a socket per queue.
    AfXdp,
    /// As `AfXdp`, with the XDP engine in front (`engine = "xdp"`): the sessions run in the
    /// kernel, the workers get what it punts.
    XdpEngine,
}

impl Backends {
    fn name(self) -> &'static str {
        match self {
            Self::UdpTun => "udp_tun",
            Self::AfPacket => "af_packet",
            Self::AfXdp => "af_xdp",
            Self::XdpEngine => "xdp_engine",
        }
    }

    /// Two workers everywhere: AF_XDP gets veths with two queues (one per worker).
    fn workers(self) -> usize {
        2
    }

    fn veth_queues(self) -> u32 {
        match self {
            Self::AfXdp | Self::XdpEngine => 2,
            _ => 1,
        }
    }

    /// The daemon's configuration for `test`.
    fn config(self, test: &str) -> String {
        let interfaces = match self {
            Self::UdpTun => format!(
                "[n3]\nbackend = \"udp\"\naddresses = [\"{UPF_N3}\"]\n\n\
                 [n6]\nbackend = \"tun\"\ninterface = \"upf0\"\n"
            ),
            Self::AfPacket | Self::AfXdp if test == "two_dns" => {
                let b = self.name();
                format!(
                    "[n3]\nbackend = \"{b}\"\ninterface = \"n3-upf\"\naddresses = [\"{UPF_N3}\"]\n\n\
                     [[n6]]\nbackend = \"{b}\"\ninterface = \"n6-upf\"\nnetwork_instance = \"dn-a\"\n\n\
                     [[n6]]\nbackend = \"{b}\"\ninterface = \"{N6B_UPF}\"\nnetwork_instance = \"dn-b\"\n"
                )
            }
            Self::AfPacket | Self::AfXdp | Self::XdpEngine => {
                let b = match self {
                    Self::AfPacket => "af_packet",
                    _ => "af_xdp",
                };
                format!(
                    "[n3]\nbackend = \"{b}\"\ninterface = \"n3-upf\"\naddresses = [\"{UPF_N3}\"]\n\n\
                     [n6]\nbackend = \"{b}\"\ninterface = \"n6-upf\"\n"
                )
            }
        };
        // Two data networks: each its pool, the same addresses.
        let pools = if test == "two_dns" {
            format!(
                "[[ue_pool]]\nnetwork_instance = \"dn-a\"\nipv4 = \"{UE_NET}/16\"\n\n\
                 [[ue_pool]]\nnetwork_instance = \"dn-b\"\nipv4 = \"{UE_NET}/16\"\n"
            )
        } else {
            format!("[[ue_pool]]\nipv4 = \"{UE_NET}/16\"\n")
        };
        // GTP-U path management fast where it is the test, otherwise at its default (60 s:
        // never within a test).
        let gtpu = if test == "gtpu_echo" {
            "[gtpu]\necho_interval_s = 1\necho_timeout_ms = 200\necho_retries = 3\n\n"
        } else {
            ""
        };
        // Priority: strict, a small MAX_RBS.
        let priority = if test == "priority" || test == "gbr" {
            "[priority]\nmode = \"strict\"\nmax_rbs = 8\n\n"
        } else {
            ""
        };
        let acl = if test == "acl" {
            format!("[acl]\nuplink_rules = [\"deny in udp from any to {DN} {DENIED_PORT}\"]\n\n")
        } else {
            String::new()
        };
        // Heartbeats every hour: the test's SMF answers only while it is asked something.
        // The XDP engine's maps are sized by limits.sessions (2M by default): creating them
        // took ~11 s of every xdp_engine test's start. The tests need thousands.
        let engine = if self == Self::XdpEngine {
            "engine = \"xdp\"\n\n[limits]\nsessions = 20000\n\n"
        } else {
            ""
        };
        format!(
            "# generated by crates/upf/tests/e2e.rs ({})\n\
             {engine}\
             [n4]\naddress = \"{UPF_N4}\"\nheartbeat_interval_s = 3600\n\n\
             {interfaces}\n\
             {gtpu}\
             {acl}\
             {priority}\
             [workers]\ncount = {}\n\n\
             {pools}\n\
             [admin]\naddress = \"127.0.0.1:9464\"\n",
            self.name(),
            // GBR under overload: one worker, which the test can overload alone.
            if test == "gbr" { 1 } else { self.workers() }
        )
    }
}

/// Runs `f` on a fresh topology and daemon for `b`.
fn e2e(b: Backends, test: &str, f: fn(&mut Harness)) {
    let name = format!("{}::{test}", b.name());
    assert!(
        upf_netns::is_root(),
        "e2e {name}: needs root (network namespaces, TUN, AF_PACKET/AF_XDP)"
    );
    for tool in ["ip", "ping", "iperf3", "kill"] {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
        assert!(
            found,
            "e2e {name}: `{tool}` not found; install iproute2, iputils-ping, iperf3, procps"
        );
    }
    let _serial = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    println!("=== e2e {name}");
    let mut h = Harness::start(b, test);
    f(&mut h);
    if b == Backends::XdpEngine && test != "gtpu_echo" {
        // The traffic went through the kernel, not only through the punt.
        let forwarded = h.metric("upf_xdp_packets_forwarded_total");
        println!("e2e: {name}: the XDP engine forwarded {forwarded} packets");
        assert!(
            forwarded > 0,
            "the XDP engine forwarded nothing\n{}",
            h.state()
        );
    }
    drop(h);
    println!(
        "=== e2e {name}: ok in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// Processes and commands

/// A child process killed (SIGTERM, then SIGKILL after a grace period) when dropped.
struct Proc {
    what: String,
    child: Child,
}

impl Proc {
    fn spawn(what: &str, cmd: &mut Command) -> Self {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
        Self {
            what: what.into(),
            child,
        }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("e2e: {} ignored SIGTERM; killing it", self.what);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command to completion or until `timeout` (then kills it); its output.
fn run_for(cmd: &mut Command, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    // Pipes are drained by threads so that a chatty command cannot block on them.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let until = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let st = child.wait().expect("wait");
            eprintln!("e2e: {desc} killed after {timeout:?}");
            break st;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn in_ns(ns: &str, prog: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, prog]);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------
// Topology

/// The three namespaces of upf_netns::topology under unique names, a UE TUN in the ue
/// namespace; removed when dropped.
fn topology(b: Backends, test: &str) -> Topology {
    let n = TOPOLOGY_SEQ.fetch_add(1, Ordering::Relaxed);
    let mut l = Layout::new(&format!("e2e{}{n}", std::process::id()));
    l.ue_pool = format!("{UE_NET}/16");
    l.ue_tun = Some(TUN.to_string());
    l.veth_queues = if test == "gbr" { 1 } else { b.veth_queues() };
    // With raw sockets the UPF owns the interfaces; the kernel must not forward (or ICMP) the
    // DN's packets to the UEs next to it. With a TUN N6 the kernel routes into the TUN.
    l.ip_forward = b == Backends::UdpTun;
    l.peer_gro = b == Backends::XdpEngine;
    Topology::up(&l).expect("topology up")
}

// ---------------------------------------------------------------------------------------
// The harness: topology, daemon, SMF, gNB

struct Harness {
    b: Backends,
    // Dropped in this order: the emulator and helpers, the SMF, the daemon, the namespaces.
    gnb: Option<Gnb>,
    helpers: Vec<Proc>,
    smf: Smf,
    sessions: Vec<Session>,
    daemon: Proc,
    /// `failover`: shard b's instance, its namespace and etcd, stopped after shard a's.
    cluster: Option<ClusterRig>,
    /// The second data network's namespace (`two_dns`), deleted after the daemon stops.
    dn_b: Option<upf_netns::Netns>,
    log: PathBuf,
    dir: PathBuf,
    topo: Topology,
}

impl Harness {
    fn start(b: Backends, test: &str) -> Self {
        let topo = topology(b, test);
        let dn_b = (test == "two_dns").then(|| second_dn(&topo));
        let dir = std::env::temp_dir().join(format!("{}-{}", topo.upf().name(), b.name()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let conf = dir.join("upf.toml");
        let mut config = b.config(test);
        if test == "warm_restart" {
            let store = dir.join("state.redb");
            config.push_str(&format!(
                "\n[state]\npath = \"{}\"\nusage_checkpoint_ms = {}\n",
                store.display(),
                CHECKPOINT.as_millis()
            ));
        }
        let mut instance = Vec::new();
        if test == "failover" {
            config = cluster_config(b);
            instance = vec!["--instance", "a"];
        }
        std::fs::write(&conf, config).expect("write config");
        let log = dir.join("upf.log");
        let cluster = (test == "failover").then(|| ClusterRig::start(&topo, &conf, &dir));
        let mut daemon = spawn_daemon_in(topo.upf().name(), &conf, &log, &instance);
        wait_ready(&mut daemon, &log, &topo);
        let mut cfg = SmfConfig::new(SocketAddr::new(IpAddr::V4(UPF_N4), 8805));
        cfg.t1 = Duration::from_secs(2);
        cfg.n1 = 3;
        let mut smf = in_netns(topo.ue().name(), || Smf::new(cfg))
            .expect("netns")
            .expect("SMF socket");
        let a = smf.associate().expect("PFCP association");
        // What the daemon made of its interfaces (its start-up report).
        for l in std::fs::read_to_string(&log).unwrap_or_default().lines() {
            if let Some((_, what)) = l.split_once(" upf: ") {
                println!("e2e: upf: {what}");
            }
        }
        println!(
            "e2e: {} daemon up (pid {}), associated with {:?}",
            b.name(),
            daemon.child.id(),
            a.upf_node
        );
        Self {
            b,
            gnb: None,
            helpers: Vec::new(),
            smf,
            sessions: Vec::new(),
            daemon,
            cluster,
            dn_b,
            log,
            dir,
            topo,
        }
    }

    /// `kill -9` of the daemon, then `upf run` again with the same configuration (and
    /// store); how long from the new process's start until it answered `upf show`.
    fn kill_and_restart(&mut self) -> Duration {
        let pid = self.daemon.child.id().to_string();
        let killed = Command::new("kill").args(["-KILL", &pid]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {pid}");
        let until = Instant::now() + Duration::from_secs(10);
        while self.daemon.exited().is_none() {
            assert!(Instant::now() < until, "upf run {pid} survived kill -9");
            std::thread::sleep(Duration::from_millis(10));
        }
        let t0 = Instant::now();
        let conf = self.dir.join("upf.toml");
        self.daemon = spawn_daemon(&self.topo, &conf, &self.log);
        wait_ready(&mut self.daemon, &self.log, &self.topo);
        t0.elapsed()
    }

    /// The value of the sample `name` (without labels) of `upf show metrics`; 0 if absent.
    fn metric(&self, name: &str) -> u64 {
        let out = run_for(
            in_ns(self.topo.upf().name(), env!("CARGO_BIN_EXE_upf")).args(["show", "metrics"]),
            Duration::from_secs(15),
        );
        text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }

    /// Packets dropped for `reason`, by the workers and the XDP engine.
    fn dropped(&self, reason: &str) -> u64 {
        let workers = self.show("drops")[reason].as_u64().unwrap_or(0);
        let xdp = format!("upf_xdp_packets_dropped_total{{reason=\"{reason}\"}}");
        workers + self.metric(&xdp)
    }

    /// `upf engine set MODE`, then waits until the swap is done; how long it took (ms).
    fn swap_engine(&self, mode: &str) -> f64 {
        let out = run_for(
            in_ns(self.topo.upf().name(), env!("CARGO_BIN_EXE_upf")).args(["engine", "set", mode]),
            Duration::from_secs(15),
        );
        assert!(
            out.status.success(),
            "upf engine set {mode}: {}",
            text(&out.stderr)
        );
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let e = self.show("engine");
            if e["swap"]["done"] == true {
                assert_eq!(e["engine"], mode, "{e}");
                let left = if mode == "user" {
                    "sessions_on_xdp"
                } else {
                    "sessions_on_user"
                };
                assert_eq!(e[left], 0, "every session moved: {e}");
                return e["swap"]["took_ms"].as_f64().unwrap_or(0.0);
            }
            assert!(Instant::now() < until, "swap to {mode} not done: {e}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// With the XDP engine: every session runs there (`upf show sessions`).
    fn assert_on_xdp_engine(&self) {
        if self.b != Backends::XdpEngine {
            return;
        }
        let v = self.show("sessions");
        for s in v.as_array().into_iter().flatten() {
            assert_eq!(s["engine"], "xdp", "session not on the XDP engine: {s}");
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    fn try_show(&self, what: &str) -> Option<Value> {
        try_show(&self.topo, what)
    }

    /// `upf show WHAT` as JSON.
    fn show(&self, what: &str) -> Value {
        self.try_show(what)
            .unwrap_or_else(|| panic!("upf show {what} failed:\n{}", self.log_tail(30)))
    }

    /// The session of UE `i` (10.60.0.(i+1)), downlink TEID 0x100 + i at the gNB.
    fn spec(i: u32) -> SessionSpec {
        let ue = ue_pool(UE_NET, 16, i, 1).expect("pool")[0];
        SessionSpec::new(UeAddr::Static(ue), 0x100 + i, GNB_N3)
    }

    /// Establishes the sessions and starts the gNB emulator with them (the UE addresses on
    /// the TUN).
    fn connect(&mut self, specs: &[SessionSpec]) {
        let mut sessions = Vec::new();
        for r in self.smf.establish_many(specs) {
            sessions.push(r.unwrap_or_else(|e| panic!("establishment: {e}")));
        }
        let table = SessionTable::new(sessions.iter().map(UeSession::from).collect())
            .expect("session table");
        let cfg = GnbConfig::new(TUN, SocketAddr::new(IpAddr::V4(GNB_N3), 2152));
        let gnb = in_netns(self.topo.ue().name(), || Gnb::start(&cfg, table))
            .expect("netns")
            .expect("gNB emulator");
        let mut batch = String::new();
        for s in &sessions {
            batch.push_str(&format!("addr replace {}/32 dev {TUN}\n", s.ue));
        }
        let mut child = Command::new("ip")
            .args(["-n", self.topo.ue().name(), "-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("ip -batch");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(batch.as_bytes())
            .expect("ip -batch");
        assert!(child.wait().expect("ip").success(), "adding UE addresses");
        self.gnb = Some(gnb);
        self.sessions = sessions;
        self.assert_on_xdp_engine();
    }

    fn ue(&self, i: usize) -> Ipv4Addr {
        self.sessions[i].ue
    }

    /// Pings DN from UE `i` until it answers (neighbour resolution on the UPF's interfaces,
    /// a daemon still settling): up to 30 s.
    fn wait_path(&self, i: usize) {
        let ue = self.ue(i).to_string();
        let until = Instant::now() + Duration::from_secs(30);
        let mut tries = 0;
        loop {
            tries += 1;
            let out = run_for(
                in_ns(self.topo.ue().name(), "ping")
                    .args(["-n", "-c", "1", "-W", "1", "-I", &ue])
                    .arg(DN.to_string()),
                Duration::from_secs(5),
            );
            if out.status.success() {
                if tries > 1 {
                    println!("e2e: path UE {ue} → DN up after {tries} pings");
                }
                return;
            }
            if Instant::now() >= until {
                panic!(
                    "no path UE {ue} → DN after {tries} pings\n{}\nlog:\n{}",
                    self.state(),
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn udp(&self, ns: &str, addr: SocketAddr) -> UdpSocket {
        in_netns(ns, || UdpSocket::bind(addr))
            .expect("netns")
            .unwrap_or_else(|e| panic!("bind {addr} in {ns}: {e}"))
    }

    /// What the UPF and the gNB say, for failure messages.
    fn state(&self) -> String {
        format!(
            "gNB: {:?}\ncounters: {}\ndrops: {}\n{}",
            self.gnb.as_ref().map(Gnb::counters),
            self.try_show("counters").unwrap_or(Value::Null),
            self.try_show("drops").unwrap_or(Value::Null),
            self.xdp_metrics(),
        )
    }

    /// The XDP engine's non-zero samples of `upf show metrics` (empty without it).
    fn xdp_metrics(&self) -> String {
        if self.b != Backends::XdpEngine {
            return String::new();
        }
        let out = run_for(
            in_ns(self.topo.upf().name(), env!("CARGO_BIN_EXE_upf")).args(["show", "metrics"]),
            Duration::from_secs(15),
        );
        text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("upf_xdp_") && !l.ends_with(" 0"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn log_tail(log: &Path, lines: usize) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// `upf show WHAT` in the upf namespace, as JSON; `None` if it fails.
fn try_show(topo: &Topology, what: &str) -> Option<Value> {
    try_show_in(topo.upf().name(), what)
}

/// `upf show WHAT` of the daemon in namespace `ns`, as JSON.
fn try_show_in(ns: &str, what: &str) -> Option<Value> {
    let out = run_for(
        in_ns(ns, env!("CARGO_BIN_EXE_upf")).args(["show", what]),
        Duration::from_secs(15),
    );
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// `upf run --config CONF` in the upf namespace, its output appended to `log`.
fn spawn_daemon(topo: &Topology, conf: &Path, log: &Path) -> Proc {
    spawn_daemon_in(topo.upf().name(), conf, log, &[])
}

/// `upf run --config CONF ARGS` in namespace `ns`, its output appended to `log`.
fn spawn_daemon_in(ns: &str, conf: &Path, log: &Path, args: &[&str]) -> Proc {
    let logf = File::options()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    Proc::spawn(
        "upf run",
        in_ns(ns, env!("CARGO_BIN_EXE_upf"))
            .arg("run")
            .arg("--config")
            .arg(conf)
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("log file"))
            .stderr(logf),
    )
}

/// Until `upf show counters` answers (the admin endpoint starts after the interfaces).
fn wait_ready(daemon: &mut Proc, log: &Path, topo: &Topology) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = daemon.exited() {
            panic!("upf run exited ({st}) at start:\n{}", log_tail(log, 60));
        }
        if try_show(topo, "counters").is_some() {
            return;
        }
        assert!(
            Instant::now() < until,
            "upf run not answering after 30 s:\n{}",
            log_tail(log, 60)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let daemon = match self.daemon.exited() {
                Some(st) => format!("the daemon exited ({st})"),
                None => "the daemon is running".into(),
            };
            eprintln!(
                "e2e {}: failed; {daemon}; {}\nlast lines of {}:\n{}",
                self.b.name(),
                self.state(),
                self.log.display(),
                self.log_tail(40)
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        self.gnb.take();
        self.helpers.clear();
    }
}

// ---------------------------------------------------------------------------------------
// Numbered UDP datagrams

const MAGIC: &[u8; 4] = b"E2E1";

/// A datagram: magic, stream id, sequence number, padding to `size` octets.
fn datagram(stream: u32, seq: u32, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size.max(12));
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.resize(size.max(12), 0x5a);
    v
}

fn parse_datagram(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() < 12 || &b[..4] != MAGIC {
        return None;
    }
    let n = |r: std::ops::Range<usize>| u32::from_be_bytes(b[r].try_into().unwrap_or([0; 4]));
    Some((n(4..8), n(8..12)))
}

/// A datagram as received: when, from where, stream, sequence number, UDP payload length.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: Instant,
    from: SocketAddr,
    stream: u32,
    seq: u32,
    len: usize,
}

/// Receives numbered datagrams on `sock` on a thread until `stop` (or 60 s).
struct Receiver {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Arrival>>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start(sock: UdpSocket) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (s, g) = (stop.clone(), got.clone());
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let until = Instant::now() + Duration::from_secs(60);
            while !s.load(Ordering::Relaxed) && Instant::now() < until {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let at = Instant::now();
                    if let Some((stream, seq)) = parse_datagram(&buf[..n]) {
                        lock(&g).push(Arrival {
                            at,
                            from,
                            stream,
                            seq,
                            len: n,
                        });
                    }
                }
            }
        });
        Self {
            stop,
            got,
            thread: Some(thread),
        }
    }

    fn count(&self) -> usize {
        lock(&self.got).len()
    }

    /// Waits until `n` datagrams arrived or `timeout` passed; how many arrived.
    fn wait_for(&self, n: usize, timeout: Duration) -> usize {
        let until = Instant::now() + timeout;
        while self.count() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.count()
    }

    fn take(&self) -> Vec<Arrival> {
        std::mem::take(&mut *lock(&self.got))
    }

    fn finish(mut self) -> Vec<Arrival> {
        self.halt();
        self.take()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.halt();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends `n` numbered datagrams of `size` octets of stream `stream`, `gap` apart on average
/// (late sends catch up, so the mean rate holds on a busy machine).
fn send_paced(sock: &UdpSocket, to: SocketAddr, stream: u32, n: u32, size: usize, gap: Duration) {
    let start = Instant::now();
    for seq in 0..n {
        let due = start + gap * seq;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        send_one(sock, to, &datagram(stream, seq, size));
    }
}

/// GBR first (seed 001): a GBR flow gets its GBR ±5 % while its worker is offered up to
/// twice what it forwards (at least a quarter more). One worker; G-PDUs go straight from the test to N3 (the gNB
/// emulator would be the bottleneck). UE B's non-GBR flow first finds what the worker
/// forwards (C, offered as fast as the test sends); then UE A's flow, under a QER whose GBR
/// is a tenth of C, is offered at its GBR while B's is offered at 2 C. Both carry the
/// session's QFI, of the low group: GBR first moves A's up.
fn gbr(h: &mut Harness) {
    const IP_LEN: u64 = GBR_PAYLOAD as u64 + 28;
    let upf = SocketAddr::new(UPF_N3.into(), 2152);
    let gnb = h.udp(h.topo.ue().name(), SocketAddr::new(GNB_N3.into(), 2152));
    let dn = |port| h.udp(h.topo.dn().name(), SocketAddr::new(DN.into(), port));
    let (dn_a, dn_b) = (dn(40_040), dn(40_041));
    let establish = |h: &mut Harness, spec: SessionSpec, to: &UdpSocket, stream: u32| {
        let s = (h.smf.establish_many(&[spec]).remove(0))
            .unwrap_or_else(|e| panic!("establishment: {e}"));
        let at = to.local_addr().expect("addr");
        let p = g_pdu(
            s.ul_teid,
            s.qfi,
            s.ue,
            at,
            &datagram(stream, 0, GBR_PAYLOAD),
        );
        // Until its packets reach the DN (the UPF resolves its next hop via the kernel).
        let rx = Receiver::start(to.try_clone().expect("clone"));
        let until = Instant::now() + Duration::from_secs(20);
        while rx.count() == 0 && Instant::now() < until {
            gnb.send_to(&p, upf).expect("send");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !rx.finish().is_empty(),
            "no path for UE {}\n{}",
            s.ue,
            h.state()
        );
        p
    };
    let flow_b = establish(h, Harness::spec(1), &dn_b, 2);
    // C: the most the worker forwards of B's flow, offered at twice the best so far,
    // starting from what it forwards sent as fast as the test goes (flooded, reading and
    // dropping take some of its time), until the offer is half again what it forwards.
    let forwarded = |rates| {
        let rx = Receiver::start(dn_b.try_clone().expect("clone"));
        let (sent, secs) = blast(&gnb, upf, Duration::from_secs(1), None, &flow_b, rates);
        std::thread::sleep(Duration::from_millis(300));
        (rx.finish().len() as f64 / secs, f64::from(sent.1) / secs)
    };
    let (flooded, _) = forwarded(None);
    let mut c = flooded;
    for _ in 0..4 {
        let (f, offered) = forwarded(Some((0.0, 2.0 * c)));
        println!("e2e: gbr: the worker forwards {f:.0} pps of {offered:.0} offered");
        c = c.max(f);
        if offered > 1.5 * f {
            break;
        }
    }
    println!("e2e: gbr: C = {c:.0} pps ({flooded:.0} flooded)");
    // A: a GBR of a tenth of C, offered at its GBR; B at 2 C (or as fast as the test goes).
    let g = c / 10.0;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let g_kbps = (g * (IP_LEN * 8) as f64 / 1000.0).round() as u64;
    let mut spec = Harness::spec(0);
    spec.qos = Some(Qos {
        gbr_kbps: Some((g_kbps, g_kbps)),
        ..Qos::default()
    });
    let flow_a = establish(h, spec, &dn_a, 1);
    let rx_a = Receiver::start(dn_a.try_clone().expect("clone"));
    let rx_b = Receiver::start(dn_b.try_clone().expect("clone"));
    let start = Instant::now();
    let rates = Some((g, 2.0 * c));
    let (sent, secs) = blast(
        &gnb,
        upf,
        Duration::from_secs(3),
        Some(&flow_a),
        &flow_b,
        rates,
    );
    std::thread::sleep(Duration::from_millis(300));
    let (got_a, got_b) = (rx_a.finish(), rx_b.finish());
    // From 1 s to 2.5 s: the queues have filled, the test still sends.
    let (from, to) = (
        start + Duration::from_secs(1),
        start + Duration::from_millis(2500),
    );
    let window =
        |got: &[Arrival]| got.iter().filter(|x| x.at >= from && x.at < to).count() as f64 / 1.5;
    let (rate_a, rate_b) = (window(&got_a), window(&got_b));
    let offered_b = f64::from(sent.1) / secs;
    let dev = (rate_a / g - 1.0) * 100.0;
    println!(
        "E2E-GBR backend={} gbr_pps={g:.0} gbr_kbps={g_kbps} received_pps={rate_a:.0} deviation_pct={dev:+.1} background_offered_pps={offered_b:.0} background_received_pps={rate_b:.0} worker_pps={c:.0}",
        h.b.name(),
    );
    // Overloaded: B offered a quarter more than the worker forwards, and a fifth of it lost.
    // On af_xdp the test's own sends also run the veth peer's XDP redirect and UMEM copy, and
    // reached only 1.36-1.42 C on these VMs (the worker 100-119 kpps, debug build): 1.5 C
    // failed there in two runs of three, with A within 0.5 % of its GBR.
    assert!(
        offered_b > 1.25 * c && rate_b < 0.8 * offered_b,
        "the worker was not overloaded: B offered {offered_b:.0} pps, {rate_b:.0} came, C {c:.0}"
    );
    assert!(
        dev.abs() <= 5.0,
        "GBR flow: {rate_a:.0} pps for a GBR of {g:.0} ({dev:+.1} %)\n{}",
        h.state()
    );
}

/// UDP payload of the GBR test's datagrams.
const GBR_PAYLOAD: usize = 172;

/// Sends copies of `b` (and of `a`) numbered in their datagram's sequence field for `d`: at
/// `rates` (A's, B's pps), or B's alone as fast as it goes. (A's, B's) sent, and seconds.
fn blast(
    sock: &UdpSocket,
    to: SocketAddr,
    d: Duration,
    a: Option<&[u8]>,
    b: &[u8],
    rates: Option<(f64, f64)>,
) -> ((u32, u32), f64) {
    // The sequence number: 4 octets after the magic and stream of the datagram at the end.
    let seq_at = |p: &[u8]| p.len() - GBR_PAYLOAD + 8;
    let (mut a, mut b) = (a.map(<[u8]>::to_vec), b.to_vec());
    let start = Instant::now();
    let (mut na, mut nb) = (0u32, 0u32);
    loop {
        let t = start.elapsed();
        if t >= d {
            break;
        }
        let secs = t.as_secs_f64();
        let (due_a, due_b) = match rates {
            Some((ra, rb)) => (f64::from(na) < secs * ra, f64::from(nb) < secs * rb),
            None => (false, true),
        };
        if let Some(p) = a.as_mut().filter(|_| due_a) {
            let o = seq_at(p);
            p[o..o + 4].copy_from_slice(&na.to_be_bytes());
            let _ = sock.send_to(p, to);
            na += 1;
        } else if due_b {
            let o = seq_at(&b);
            b[o..o + 4].copy_from_slice(&nb.to_be_bytes());
            let _ = sock.send_to(&b, to);
            nb += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    ((na, nb), start.elapsed().as_secs_f64())
}

fn send_one(sock: &UdpSocket, to: SocketAddr, d: &[u8]) {
    // ENOBUFS/EAGAIN from a full queue: try again shortly (the test counts what arrives).
    for _ in 0..100 {
        match sock.send_to(d, to) {
            Ok(_) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    panic!("send to {to} keeps failing");
}

/// The UEs (stream i is UE `ues[i]`) whose datagrams did not all arrive, `per_ue` each,
/// once and in order: "UE address: the sequence numbers that came".
fn out_of_order(got: &[Arrival], ues: &[Ipv4Addr], per_ue: u32) -> Vec<String> {
    let mut seen: HashMap<u32, Vec<u32>> = HashMap::new();
    for a in got {
        seen.entry(a.stream).or_default().push(a.seq);
    }
    let want: Vec<u32> = (0..per_ue).collect();
    (0u32..)
        .zip(ues)
        .filter(|(i, _)| seen.get(i) != Some(&want))
        .map(|(i, ue)| format!("UE {ue}: {:?}", seen.get(&i)))
        .collect()
}

fn seqs(a: &[Arrival]) -> Vec<u32> {
    a.iter().map(|x| x.seq).collect()
}

// ---------------------------------------------------------------------------------------
// 1. ping both ways

fn ping_count(out: &Output) -> (u32, u32) {
    // "5 packets transmitted, 5 received, 0% packet loss, time 804ms"
    let s = text(&out.stdout);
    let line = s
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_default();
    let num = |key: &str| -> u32 {
        line.split(',')
            .find(|p| p.contains(key))
            .and_then(|p| p.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (num("transmitted"), num("received"))
}

fn ping(h: &mut Harness) {
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let ue = h.ue(0).to_string();
    let up = run_for(
        in_ns(h.topo.ue().name(), "ping")
            .args(["-n", "-c", "5", "-i", "0.2", "-W", "3", "-I", &ue])
            .arg(DN.to_string()),
        Duration::from_secs(20),
    );
    let (tx, rx) = ping_count(&up);
    println!("e2e: ping UE {ue} → DN {DN}: {rx}/{tx} answered");
    assert!(
        tx == 5 && rx == 5,
        "ping UE → DN:\n{}\n{}",
        text(&up.stdout),
        h.state()
    );
    // The DN reaches the UE: the gNB emulator has the session, the UE's stack answers.
    let down = run_for(
        in_ns(h.topo.dn().name(), "ping").args(["-n", "-c", "5", "-i", "0.2", "-W", "3", &ue]),
        Duration::from_secs(20),
    );
    let (tx, rx) = ping_count(&down);
    println!("e2e: ping DN {DN} → UE {ue}: {rx}/{tx} answered");
    assert!(
        tx == 5 && rx == 5,
        "ping DN → UE:\n{}\n{}",
        text(&down.stdout),
        h.state()
    );
}

// ---------------------------------------------------------------------------------------
// 2. numbered UDP both ways

fn udp(h: &mut Harness) {
    const N: u32 = 500;
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let ue_addr = SocketAddr::new(IpAddr::V4(h.ue(0)), 40_000);
    let dn_addr = SocketAddr::new(IpAddr::V4(DN), 40_001);
    let ue_sock = h.udp(h.topo.ue().name(), ue_addr);
    let dn_sock = h.udp(h.topo.dn().name(), dn_addr);
    // The pings of wait_path reported: the URR counts only the datagrams from here.
    let s = h.sessions[0];
    h.smf.query_usage(&s).expect("Query URR");
    for (dir, from, to, rx_sock) in [
        ("UE → DN", &ue_sock, dn_addr, &dn_sock),
        ("DN → UE", &dn_sock, ue_addr, &ue_sock),
    ] {
        let rx = Receiver::start(rx_sock.try_clone().expect("clone"));
        // 1000 datagrams/s: the in-process gNB emulator and the receiving sockets (default
        // buffers, ~200 datagrams) must keep up on a loaded 2-vCPU VM, in a debug build.
        send_paced(from, to, 1, N, 200, Duration::from_millis(1));
        let n = rx.wait_for(N as usize, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(200)); // late duplicates, if any
        let got = rx.finish();
        println!("e2e: UDP {dir}: {n}/{N} datagrams");
        let want: Vec<u32> = (0..N).collect();
        assert_eq!(
            seqs(&got),
            want,
            "UDP {dir}: all, once, in order\n{}",
            h.state()
        );
    }
    // Every datagram in the final usage, once (with the XDP engine: counted in the kernel).
    let u = h.smf.delete(&s).expect("deletion");
    h.sessions.clear();
    println!("e2e: UDP usage at deletion: {u:?}");
    assert_eq!(
        (u.uplink_packets, u.downlink_packets),
        (u64::from(N), u64::from(N)),
        "URR packets at deletion: {u:?}"
    );
}

/// Priority (issue #28), workers in strict mode: a UE with two QoS flows (QFI 1 / DSCP 46
/// high, QFI 9 / DSCP 0 low; the gNB marks by DSCP) sends and receives both at once: each
/// flow arrives whole and in order both ways, the workers classified each into its group (by
/// the QFI on N3, the DSCP on N6), and MAX_RBS changes at run time.
fn priority(h: &mut Harness) {
    const N: u32 = 300;
    const HIGH: u32 = 1;
    const LOW: u32 = 2;
    let mut spec = Harness::spec(0);
    spec.high_priority = Some(HighPriority { qfi: 1, dscp: 46 });
    h.connect(&[spec]);
    h.wait_path(0);
    let groups_before = queued_per_group(&h.show("workers"));
    let (ue, dn) = (IpAddr::V4(h.ue(0)), IpAddr::V4(DN));
    let socks = |ns: &str, ip: IpAddr, base: u16| {
        let hi = h.udp(ns, SocketAddr::new(ip, base));
        socket2::SockRef::from(&hi)
            .set_tos_v4(46 << 2)
            .expect("IP_TOS");
        let lo = h.udp(ns, SocketAddr::new(ip, base + 1));
        (hi, lo)
    };
    let (ue_hi, ue_lo) = socks(h.topo.ue().name(), ue, 40_020);
    let (dn_hi, dn_lo) = socks(h.topo.dn().name(), dn, 40_030);
    for (dir, (from_hi, from_lo), (to_hi, to_lo)) in [
        ("UE → DN", (&ue_hi, &ue_lo), (&dn_hi, &dn_lo)),
        ("DN → UE", (&dn_hi, &dn_lo), (&ue_hi, &ue_lo)),
    ] {
        let rx_hi = Receiver::start(to_hi.try_clone().expect("clone"));
        let rx_lo = Receiver::start(to_lo.try_clone().expect("clone"));
        let (at_hi, at_lo) = (
            to_hi.local_addr().expect("addr"),
            to_lo.local_addr().expect("addr"),
        );
        for seq in 0..N {
            send_one(from_lo, at_lo, &datagram(LOW, seq, 200));
            send_one(from_hi, at_hi, &datagram(HIGH, seq, 200));
            std::thread::sleep(Duration::from_micros(1500));
        }
        rx_hi.wait_for(N as usize, Duration::from_secs(10));
        rx_lo.wait_for(N as usize, Duration::from_secs(10));
        let (hi, lo) = (rx_hi.finish(), rx_lo.finish());
        let want: Vec<u32> = (0..N).collect();
        assert_eq!(seqs(&hi), want, "{dir}, high: all, in order\n{}", h.state());
        assert_eq!(seqs(&lo), want, "{dir}, low: all, in order\n{}", h.state());
        println!(
            "e2e: priority {dir}: {}/{N} high, {}/{N} low",
            hi.len(),
            lo.len()
        );
    }
    // Each flow went through its group, both ways (the pings before in the low one).
    let groups = queued_per_group(&h.show("workers"));
    let more: Vec<u64> = groups
        .iter()
        .zip(&groups_before)
        .map(|(a, b)| a - b)
        .collect();
    println!("e2e: priority: queued per group {more:?}");
    assert_eq!(more.len(), 2, "two groups: {more:?}");
    assert!(more[0] >= u64::from(2 * N), "high group: {more:?}");
    assert!(more[1] >= u64::from(2 * N), "low group: {more:?}");
    // AF_XDP and AF_PACKET classify before queueing: a socket per group on every queue.
    let log = std::fs::read_to_string(&h.log).unwrap_or_default();
    let ethernet = |l: &&str| l.contains(": AF_XDP ") || l.contains(": AF_PACKET ");
    for line in log.lines().filter(ethernet) {
        assert!(line.contains("2 queue groups"), "{line}");
    }
    // MAX_RBS at run time, by the command line.
    let out = run_for(
        in_ns(h.topo.upf().name(), env!("CARGO_BIN_EXE_upf")).args(["priority", "max-rbs", "4"]),
        Duration::from_secs(15),
    );
    let answer: Option<Value> = serde_json::from_slice(&out.stdout).ok();
    assert!(
        out.status.success() && answer.is_some_and(|a| a["max_rbs"] == 4),
        "upf priority max-rbs 4: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Packets each queue group took in, summed over the workers.
fn queued_per_group(workers: &Value) -> Vec<u64> {
    let mut sum: Vec<u64> = Vec::new();
    for w in workers.as_array().expect("workers") {
        for (g, q) in w["groups"].as_array().expect("groups").iter().enumerate() {
            if sum.len() <= g {
                sum.resize(g + 1, 0);
            }
            sum[g] += q["queued"].as_u64().expect("queued");
        }
    }
    sum
}

/// The uplink ACL: of two flows from the UE to the DN, the one to a port it denies is
/// dropped (`acl_denied`, in the kernel with the XDP engine), the other arrives whole.
fn acl(h: &mut Harness) {
    const N: u32 = 100;
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let ue_sock = h.udp(
        h.topo.ue().name(),
        SocketAddr::new(IpAddr::V4(h.ue(0)), 40_000),
    );
    let open = SocketAddr::new(IpAddr::V4(DN), 40_001);
    let closed = SocketAddr::new(IpAddr::V4(DN), DENIED_PORT);
    let open_rx = Receiver::start(h.udp(h.topo.dn().name(), open));
    let closed_rx = Receiver::start(h.udp(h.topo.dn().name(), closed));
    let denied_before = h.dropped("acl_denied");
    send_paced(&ue_sock, closed, 1, N, 200, Duration::from_millis(1));
    send_paced(&ue_sock, open, 2, N, 200, Duration::from_millis(1));
    let n = open_rx.wait_for(N as usize, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let (open_got, closed_got) = (open_rx.finish(), closed_rx.finish());
    let denied = h.dropped("acl_denied") - denied_before;
    println!(
        "e2e: ACL: {n}/{N} permitted arrived, {} denied arrived, {denied} acl_denied",
        closed_got.len()
    );
    assert_eq!(
        seqs(&open_got),
        (0..N).collect::<Vec<_>>(),
        "permitted flow\n{}",
        h.state()
    );
    assert!(
        closed_got.is_empty(),
        "{} denied datagrams arrived",
        closed_got.len()
    );
    assert_eq!(denied, u64::from(N), "acl_denied drops\n{}", h.state());
    if h.b == Backends::XdpEngine {
        let kernel = h.metric("upf_xdp_packets_dropped_total{reason=\"acl_denied\"}");
        assert_eq!(kernel, u64::from(N), "denied in the kernel\n{}", h.state());
    }
}

// ---------------------------------------------------------------------------------------
// 3. iperf3 TCP both ways

/// Runs the iperf3 client in the UE namespace (retrying while the server is not listening);
/// returns (bits/s received, octets received, retransmits).
fn iperf3_client(h: &Harness, reverse: bool, secs: u32) -> (f64, u64, u64) {
    let ue = h.ue(0).to_string();
    let mut last = String::new();
    for _ in 0..10 {
        let mut c = in_ns(h.topo.ue().name(), "iperf3");
        c.args(["-c", &DN.to_string(), "-B", &ue, "-p", "5201", "-J"])
            .args(["-t", &secs.to_string(), "--connect-timeout", "3000"]);
        if reverse {
            c.arg("-R");
        }
        let out = run_for(&mut c, Duration::from_secs(u64::from(secs) + 30));
        let j: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(e) = j.get("error").and_then(Value::as_str) {
            last = e.to_string();
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let end = &j["end"];
        let bps = end["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0);
        let bytes = end["sum_received"]["bytes"].as_u64().unwrap_or(0);
        let retr = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
        if bytes == 0 && j.is_null() {
            last = format!("no JSON: {}{}", text(&out.stdout), text(&out.stderr));
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        return (bps, bytes, retr);
    }
    panic!("iperf3 client: {last}\n{}", h.state());
}

fn iperf3(h: &mut Harness) {
    const SECS: u32 = 4;
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let server = Proc::spawn(
        "iperf3 -s",
        in_ns(h.topo.dn().name(), "iperf3")
            .args(["-s", "-B", &DN.to_string(), "-p", "5201"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    h.helpers.push(server);
    for (reverse, dir) in [(false, "uplink UE→DN"), (true, "downlink DN→UE (-R)")] {
        let (bps, bytes, retr) = iperf3_client(h, reverse, SECS);
        // One line per figure, for scripts/e2e.sh.
        println!(
            "E2E-IPERF3 backend={} direction={} gbit_s={:.3} bytes={bytes} retransmits={retr} seconds={SECS}",
            h.b.name(),
            if reverse { "downlink" } else { "uplink" },
            bps / 1e9
        );
        println!("e2e: iperf3 {dir}: {:.3} Gbit/s", bps / 1e9);
        assert!(
            bytes > 0,
            "iperf3 {dir}: nothing transferred\n{}",
            h.state()
        );
    }
}

// ---------------------------------------------------------------------------------------
// 4. MBR on real traffic

/// The session's MBR both ways, kbit/s.
const MBR_KBPS: u64 = 10_000;

fn mbr(h: &mut Harness) {
    // The meter counts the inner IP packet (header included; pipeline.rs: `len = inner.1 -
    // inner.0`, octets × 8 against the bucket), so the receiver counts IP octets: UDP
    // payload + 8 + 20.
    const PAYLOAD: usize = 1200;
    const IP_LEN: usize = PAYLOAD + 28;
    // The bucket starts full with MBR × the default averaging window (2 s, TS 23.501
    // §5.7.3.6): at 3 × MBR it drains in 1 s. The rate is measured over [2 s, 6 s].
    const SEND: Duration = Duration::from_millis(6300);
    const FROM: Duration = Duration::from_secs(2);
    const TO: Duration = Duration::from_secs(6);
    let mut spec = Harness::spec(0);
    spec.qos = Some(Qos {
        mbr_kbps: Some((MBR_KBPS, MBR_KBPS)),
        ..Qos::default()
    });
    h.connect(&[spec]);
    h.wait_path(0);
    let ue_addr = SocketAddr::new(IpAddr::V4(h.ue(0)), 40_010);
    let dn_addr = SocketAddr::new(IpAddr::V4(DN), 40_011);
    let ue_sock = h.udp(h.topo.ue().name(), ue_addr);
    let dn_sock = h.udp(h.topo.dn().name(), dn_addr);
    let mbr_bps = MBR_KBPS as f64 * 1000.0;
    let gap = Duration::from_secs_f64((IP_LEN * 8) as f64 / (3.0 * mbr_bps));
    let n = u32::try_from(SEND.as_nanos() / gap.as_nanos()).unwrap_or(u32::MAX);
    for (dir, from, to, rx_sock) in [
        ("downlink DN → UE", &dn_sock, ue_addr, &ue_sock),
        ("uplink UE → DN", &ue_sock, dn_addr, &dn_sock),
    ] {
        let drops_before = h.dropped("mbr_exceeded");
        let counters_before = h.show("counters");
        let rx = Receiver::start(rx_sock.try_clone().expect("clone"));
        let start = Instant::now();
        send_paced(from, to, 4, n, PAYLOAD, gap);
        let sent_for = start.elapsed();
        std::thread::sleep(Duration::from_millis(300));
        let got = rx.finish();
        let window: u64 = got
            .iter()
            .filter(|a| a.at >= start + FROM && a.at < start + TO)
            .map(|a| (a.len + 28) as u64)
            .sum();
        let rate = window as f64 * 8.0 / (TO - FROM).as_secs_f64();
        let offered = f64::from(n) * (IP_LEN * 8) as f64 / sent_for.as_secs_f64();
        let drops = h.dropped("mbr_exceeded") - drops_before;
        let dev = (rate / mbr_bps - 1.0) * 100.0;
        // Where the packets went: into the UPF (its ingress port), out of it (egress).
        let counters = h.show("counters");
        let (ingress, egress) = if to == ue_addr {
            ("n6", "n3")
        } else {
            ("n3", "n6")
        };
        let delta = |key: &str, port: &str| {
            counters[key][port].as_u64().unwrap_or(0)
                - counters_before[key][port].as_u64().unwrap_or(0)
        };
        let (upf_rx, upf_tx) = (delta("rx_packets", ingress), delta("tx_packets", egress));
        println!(
            "E2E-MBR backend={} direction={dir:?} mbr_mbit_s={:.3} offered_mbit_s={:.2} received_mbit_s={:.3} deviation_pct={dev:+.1} received={}/{n} upf_rx={upf_rx} upf_tx={upf_tx} mbr_exceeded_drops={drops}",
            h.b.name(),
            mbr_bps / 1e6,
            offered / 1e6,
            rate / 1e6,
            got.len()
        );
        assert!(
            offered > 2.5 * mbr_bps,
            "{dir}: offered only {:.2} Mbit/s (the test machine is too slow to test)",
            offered / 1e6
        );
        assert!(
            dev.abs() <= 10.0,
            "{dir}: received {:.3} Mbit/s over [{FROM:?}, {TO:?}], MBR {:.3} Mbit/s; the UPF \
             sent {upf_tx}, the receiver got {} (a difference is lost after the UPF)\n{}",
            rate / 1e6,
            mbr_bps / 1e6,
            got.len(),
            h.state()
        );
        assert!(drops > 0, "{dir}: no mbr_exceeded drops counted");
    }
}

// ---------------------------------------------------------------------------------------
// 5. An idle UE: downlink buffered, then delivered

fn idle_buffering(h: &mut Harness) {
    const K: u32 = 32; // within the 64 packets a FAR buffers
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let s = h.sessions[0];
    let ue_addr = SocketAddr::new(IpAddr::V4(s.ue), 40_020);
    let dn_addr = SocketAddr::new(IpAddr::V4(DN), 40_021);
    let ue_sock = h.udp(h.topo.ue().name(), ue_addr);
    let dn_sock = h.udp(h.topo.dn().name(), dn_addr);
    let buffered = |h: &Harness| h.show("counters")["buffered"].as_u64().unwrap_or(u64::MAX);
    assert_eq!(buffered(h), 0);
    h.smf
        .set_downlink(&s, Downlink::Buffer { notify: true })
        .expect("downlink FAR to BUFF+NOCP");
    let _ = h.smf.take_events();
    let rx = Receiver::start(ue_sock);
    send_paced(&dn_sock, ue_addr, 5, K, 100, Duration::from_millis(2));
    // The UPF reports the first packet (NOCP); answer it and wait for the buffer to fill.
    let until = Instant::now() + Duration::from_secs(10);
    let mut report = false;
    while Instant::now() < until && !(report && buffered(h) == u64::from(K)) {
        h.smf.serve(Duration::from_millis(200)).expect("serve");
        report |= h
            .smf
            .take_events()
            .iter()
            .any(|e| matches!(e, UpfEvent::DownlinkData { cp_seid } if *cp_seid == s.cp_seid));
    }
    let b = buffered(h);
    println!(
        "e2e: idle UE {}: {} delivered while buffering, {b} buffered, Downlink Data Report {}",
        s.ue,
        rx.count(),
        if report { "received" } else { "missing" }
    );
    assert_eq!(rx.count(), 0, "packets reached an idle UE\n{}", h.state());
    assert_eq!(
        b,
        u64::from(K),
        "upf show counters: buffered\n{}",
        h.state()
    );
    assert!(report, "no Downlink Data Report for a BUFF+NOCP FAR");
    // The UE is back: FORW, and the buffer goes out first, in order.
    h.smf
        .set_downlink(&s, Downlink::Forward)
        .expect("downlink FAR to FORW");
    let n = rx.wait_for(K as usize, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let got = rx.finish();
    println!("e2e: idle UE {}: {n}/{K} delivered after FORW", s.ue);
    // Buffering ran in the workers; forwarding is back in the kernel.
    h.assert_on_xdp_engine();
    assert_eq!(seqs(&got), (0..K).collect::<Vec<_>>(), "{}", h.state());
    assert_eq!(buffered(h), 0, "buffer not emptied");
}

// ---------------------------------------------------------------------------------------
// 6. Many UEs over two workers

fn many_sessions(h: &mut Harness) {
    const UES: u32 = 200;
    const PER_UE: u32 = 5;
    let specs: Vec<SessionSpec> = (0..UES).map(Harness::spec).collect();
    h.connect(&specs);
    h.wait_path(0);
    let dn_addr = SocketAddr::new(IpAddr::V4(DN), 40_031);
    let dn_sock = h.udp(h.topo.dn().name(), dn_addr);
    let ues: Vec<Ipv4Addr> = h.sessions.iter().map(|s| s.ue).collect();
    let socks: Vec<UdpSocket> = in_netns(h.topo.ue().name(), || {
        ues.iter()
            .map(|&ue| UdpSocket::bind(SocketAddr::new(IpAddr::V4(ue), 40_030)))
            .collect::<std::io::Result<Vec<_>>>()
    })
    .expect("netns")
    .expect("UE sockets");
    let rx = Receiver::start(dn_sock);
    // Warm-up: one datagram per UE, so that each worker's next hops are resolved before
    // the numbered round.
    for (i, s) in (0..).zip(&socks) {
        send_one(s, dn_addr, &datagram(1000 + i, 0, 64));
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let warm = rx.wait_for(UES as usize, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let _ = rx.take();
    println!("e2e: warm-up: {warm}/{UES} UEs reached the DN");
    // Interleaved: sequence 0 of every UE, then 1, ...
    let mut k = 0;
    for seq in 0..PER_UE {
        for (i, s) in (0..).zip(&socks) {
            send_one(s, dn_addr, &datagram(i, seq, 100));
            k += 1;
            if k % 10 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    let total = (UES * PER_UE) as usize;
    let n = rx.wait_for(total, Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(200));
    let got = rx.finish();
    println!("e2e: {UES} UEs × {PER_UE}: {n}/{total} datagrams at the DN");
    for a in &got {
        let ue = usize::try_from(a.stream).ok().and_then(|i| ues.get(i));
        assert_eq!(
            Some(&a.from.ip()),
            ue.map(|u| IpAddr::V4(*u)).as_ref(),
            "stream {} from {}",
            a.stream,
            a.from
        );
    }
    let bad = out_of_order(&got, &ues, PER_UE);
    assert!(
        bad.is_empty(),
        "{} UEs lost or reordered datagrams, e.g. {:?}\n{}",
        bad.len(),
        &bad[..bad.len().min(5)],
        h.state()
    );
    let workers = h.show("workers");
    let ws = workers.as_array().expect("workers array");
    let summary: Vec<String> = ws
        .iter()
        .map(|w| {
            let rx: u64 = w["rx_packets"]
                .as_object()
                .map(|o| o.values().filter_map(Value::as_u64).sum())
                .unwrap_or(0);
            format!(
                "worker {}: {} sessions, {rx} packets received, {} handed off",
                w["worker"], w["sessions"], w["handed_off"]
            )
        })
        .collect();
    println!("e2e: upf show workers: {}", summary.join("; "));
    assert_eq!(ws.len(), h.b.workers(), "workers");
    if h.b == Backends::XdpEngine {
        // The kernel forwarded them; the workers see only what it punts.
        return;
    }
    for w in ws {
        let rx: u64 = w["rx_packets"]
            .as_object()
            .map(|o| o.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0);
        assert!(
            w["sessions"].as_u64().unwrap_or(0) > 0 && rx > 0,
            "every worker owns sessions and sees packets: {workers:#}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 7. GTP-U path management: the gNB is sent Echo Requests (every second here) and answers

fn gtpu_echo(h: &mut Harness) {
    h.connect(&[Harness::spec(0)]);
    h.wait_path(0);
    let gnb = h.gnb.as_ref().expect("gNB");
    let before = gnb.counters().echo_requests;
    std::thread::sleep(Duration::from_millis(3500));
    let got = gnb.counters().echo_requests - before;
    let c = h.show("counters");
    println!("e2e: gNB received {got} Echo Requests in 3.5 s; UPF: {c}");
    assert!((2..=5).contains(&got), "{got} Echo Requests\n{}", h.state());
    assert_eq!(c["gtpu_peers"], 1, "{c}");
    assert_eq!(c["gtpu_peers_unreachable"], 0, "{c}");
    assert!(c["echo_responses"].as_u64() >= Some(2), "{c}");
}

// ---------------------------------------------------------------------------------------
// 8. Two data networks sharing the UE pool (issue #26 §5): one UE address in each, each DN
//    behind its own N6; downlink from each reaches its own session's tunnel, uplink leaves
//    by its session's N6

/// The second DN: namespace PREFIX-dnb, N6 link n6b-upf 192.168.7.1/24 ↔ n6-dn 192.168.7.2/24,
/// the UE pool routed through the UPF.
const N6B_UPF: &str = "n6b-upf";
const UPF_N6B: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 1);
const DN_B: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 2);

fn second_dn(topo: &Topology) -> upf_netns::Netns {
    let name = format!("{}b", topo.dn().name());
    let ns = upf_netns::Netns::named(&name).expect("netns");
    ns.sysctl("net/ipv4/conf/all/rp_filter", "0")
        .expect("sysctl");
    ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")
        .expect("sysctl");
    upf_netns::veth_pair(
        (topo.upf().name(), N6B_UPF, &format!("{UPF_N6B}/24")),
        (ns.name(), "n6-dn", &format!("{DN_B}/24")),
    )
    .expect("veth to the second DN");
    ns.ip(&[
        "route",
        "add",
        &format!("{UE_NET}/16"),
        "via",
        &UPF_N6B.to_string(),
    ])
    .expect("route");
    ns
}

/// A G-PDU's payload (GTP-U header with an UL PDU Session Container, QFI `qfi`, and the
/// inner IPv4/UDP packet `src:5000 → dst`) as a gNB's UDP socket sends it.
fn g_pdu(teid: u32, qfi: u8, src: Ipv4Addr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
    let IpAddr::V4(dst_ip) = dst.ip() else {
        panic!("IPv4 only")
    };
    let len = 28 + payload.len();
    let mut ip = vec![0u8; len];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst_ip.octets());
    let c = upf_wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20..22].copy_from_slice(&5000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&dst.port().to_be_bytes());
    ip[24..26].copy_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    ip[28..].copy_from_slice(payload);
    let mut buf = vec![0u8; 256 + len];
    buf[256..].copy_from_slice(&ip);
    let e = EncapV4 {
        src: GNB_N3,
        dst: UPF_N3,
        ident: 0,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(upf_wire::ext::PduSessionContainer::ul(qfi)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    let start = encapsulate_gtpu_v4(&mut buf, 256, len, &e).expect("encapsulate");
    // The outer IPv4 and UDP headers are the socket's.
    buf[start + 28..].to_vec()
}

fn two_dns(h: &mut Harness) {
    let mut a = Harness::spec(0);
    a.network_instance = "dn-a".into();
    let mut b = Harness::spec(0);
    b.network_instance = "dn-b".into();
    b.dl_teid = 0x200;
    let sessions: Vec<Session> = (h.smf.establish_many(&[a, b]).into_iter())
        .map(|r| r.unwrap_or_else(|e| panic!("establishment: {e}")))
        .collect();
    assert_eq!(sessions[0].ue, sessions[1].ue, "one address in both DNs");
    let ue = sessions[0].ue;
    let dn_b = h.dn_b.as_ref().expect("second DN").name().to_string();
    let gnb = h.udp(h.topo.ue().name(), SocketAddr::new(GNB_N3.into(), 2152));
    let from_a = h.udp(h.topo.dn().name(), SocketAddr::new(DN.into(), 0));
    let from_b = h.udp(&dn_b, SocketAddr::new(DN_B.into(), 0));
    for s in [&gnb, &from_a, &from_b] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
    }
    let mut buf = [0u8; 2048];
    // Downlink: each DN sends to the one UE address until the gNB has seen both (the UPF
    // resolves its next hops through the kernel: the first may be lost).
    let mut teids: HashMap<&str, Vec<u32>> = HashMap::new();
    let until = Instant::now() + Duration::from_secs(20);
    while teids.len() < 2 && Instant::now() < until {
        from_a.send_to(b"dl-from-dn-a", (ue, 5000)).expect("send");
        from_b.send_to(b"dl-from-dn-b", (ue, 5000)).expect("send");
        while let Ok((n, _)) = gnb.recv_from(&mut buf) {
            let d = &buf[..n];
            let teid = u32::from_be_bytes(d[4..8].try_into().expect("GTP-U header"));
            for tag in ["dl-from-dn-a", "dl-from-dn-b"] {
                if d.ends_with(tag.as_bytes()) {
                    teids.entry(tag).or_default().push(teid);
                }
            }
        }
    }
    println!("e2e: downlink TEIDs by DN: {teids:?}");
    let got = |tag: &str| teids.get(tag).cloned().unwrap_or_default();
    assert!(
        !got("dl-from-dn-a").is_empty() && got("dl-from-dn-a").iter().all(|&t| t == 0x100),
        "from DN A: {:?}\n{}",
        got("dl-from-dn-a"),
        h.state()
    );
    assert!(
        !got("dl-from-dn-b").is_empty() && got("dl-from-dn-b").iter().all(|&t| t == 0x200),
        "from DN B: {:?}\n{}",
        got("dl-from-dn-b"),
        h.state()
    );
    // Uplink: each session's packets leave by its own DN's N6.
    let to_a = from_a.local_addr().expect("addr");
    let to_b = from_b.local_addr().expect("addr");
    let (mut at_a, mut at_b) = (false, false);
    let until = Instant::now() + Duration::from_secs(20);
    while !(at_a && at_b) && Instant::now() < until {
        let upf = SocketAddr::new(UPF_N3.into(), 2152);
        let qfi = sessions[0].qfi;
        gnb.send_to(&g_pdu(sessions[0].ul_teid, qfi, ue, to_a, b"ul-a"), upf)
            .expect("send");
        gnb.send_to(&g_pdu(sessions[1].ul_teid, qfi, ue, to_b, b"ul-b"), upf)
            .expect("send");
        at_a |= matches!(from_a.recv_from(&mut buf), Ok((n, _)) if &buf[..n] == b"ul-a");
        at_b |= matches!(from_b.recv_from(&mut buf), Ok((n, _)) if &buf[..n] == b"ul-b");
    }
    assert!(
        at_a && at_b,
        "uplink at DN A {at_a}, at DN B {at_b}\n{}",
        h.state()
    );
    let c = h.show("counters");
    println!("e2e: two DNs: {c}");
}

// ---------------------------------------------------------------------------------------
// 9. Hot swap (XDP engine): every session moved between the engines ten times while
//    numbered datagrams flow both ways; none lost or reordered, the URRs count them all

fn hot_swap(h: &mut Harness) {
    const UES: u32 = 1000;
    const PER_UE: u32 = 6;
    const SWAPS: usize = 10;
    let specs: Vec<SessionSpec> = (0..UES).map(Harness::spec).collect();
    h.connect(&specs);
    h.wait_path(0);
    let dn_addr = SocketAddr::new(IpAddr::V4(DN), 40_041);
    let dn_sock = h.udp(h.topo.dn().name(), dn_addr);
    // Every UE's downlink arrives at one socket on the UEs' TUN.
    let ue_rx = h.udp(
        h.topo.ue().name(),
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 40_042),
    );
    let ues: Vec<Ipv4Addr> = h.sessions.iter().map(|s| s.ue).collect();
    let socks: Vec<UdpSocket> = in_netns(h.topo.ue().name(), || {
        ues.iter()
            .map(|&ue| UdpSocket::bind(SocketAddr::new(IpAddr::V4(ue), 40_040)))
            .collect::<std::io::Result<Vec<_>>>()
    })
    .expect("netns")
    .expect("UE sockets");
    // Warm-up both ways (next hops), then every URR restarted.
    let up = Receiver::start(dn_sock.try_clone().expect("clone"));
    let down = Receiver::start(ue_rx);
    for (i, s) in (0..).zip(&socks) {
        send_one(s, dn_addr, &datagram(i, 1000, 64));
        let to = SocketAddr::new(IpAddr::V4(ues[i as usize]), 40_042);
        send_one(&dn_sock, to, &datagram(i, 1000, 64));
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    up.wait_for(UES as usize, Duration::from_secs(10));
    down.wait_for(UES as usize, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    println!(
        "e2e: warm-up: {}/{UES} up, {}/{UES} down",
        up.take().len(),
        down.take().len()
    );
    for s in h.sessions.clone() {
        h.smf.query_usage(&s).expect("Query URR");
    }
    // Sequence 0 of every UE both ways, then 1, ...: 2,000 datagrams/s a way.
    let sender = {
        let dn = dn_sock.try_clone().expect("clone");
        let ues = ues.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut k = 0u32;
            for seq in 0..PER_UE {
                for (i, s) in (0..).zip(&socks) {
                    send_one(s, dn_addr, &datagram(i, seq, 100));
                    let to = SocketAddr::new(IpAddr::V4(ues[i as usize]), 40_042);
                    send_one(&dn, to, &datagram(i, seq, 100));
                    k += 1;
                    if k.is_multiple_of(20) {
                        let due = start + Duration::from_millis(u64::from(k / 2));
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    }
                }
            }
        })
    };
    let mut took = Vec::new();
    for i in 0..SWAPS {
        let to = if i % 2 == 0 { "user" } else { "xdp" };
        took.push(h.swap_engine(to));
    }
    sender.join().expect("sender");
    let total = (UES * PER_UE) as usize;
    let n_up = up.wait_for(total, Duration::from_secs(15));
    let n_down = down.wait_for(total, Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(300));
    let (up, down) = (up.finish(), down.finish());
    println!(
        "e2e: hot swap: {SWAPS} swaps of {UES} sessions (ms: {took:?}) under traffic: \
         {n_up}/{total} up, {n_down}/{total} down"
    );
    for (dir, got) in [("uplink", &up), ("downlink", &down)] {
        let bad = out_of_order(got, &ues, PER_UE);
        assert!(
            bad.is_empty(),
            "{dir}: {} UEs lost or reordered datagrams, e.g. {:?}\n{}",
            bad.len(),
            &bad[..bad.len().min(5)],
            h.state()
        );
    }
    h.assert_on_xdp_engine();
    // What the URRs counted (in both engines, across the moves) is what the sinks got.
    let sessions = std::mem::take(&mut h.sessions);
    let (mut ul, mut dl) = (0, 0);
    for r in h.smf.delete_many(&sessions) {
        let u = r.expect("deletion");
        ul += u.uplink_packets;
        dl += u.downlink_packets;
    }
    println!("e2e: hot swap: URRs counted {ul} up, {dl} down");
    assert_eq!((ul, dl), (up.len() as u64, down.len() as u64));
}

// ---------------------------------------------------------------------------------------
// Warm restart (#29): the sessions in the store come back after `kill -9`

/// `[state] usage_checkpoint_ms` of warm_restart: shorter than the time its traffic runs
/// before the kill, so that losing more than one interval of usage shows.
const CHECKPOINT: Duration = Duration::from_millis(100);

/// 1,000 sessions with traffic both ways (a datagram from each UE, echoed by the DN), and a
/// flow of 1 datagram a millisecond from UE 0 throughout; `kill -9` of the daemon and `upf
/// run` again with the same store: every session forwards again both ways, the SMF sees the
/// same Recovery Time Stamp and is asked nothing. The flow's longest gap is the outage.
/// The usage each session reports at its deletion holds the traffic from before the kill
/// (restored from the usage checkpoints) but for at most one checkpoint interval, and never
/// more than was sent.
fn warm_restart(h: &mut Harness) {
    const UES: u32 = 1000;
    let (recovery, echo, echo_addr, ues) = echoing_sessions(h, UES, "restart");

    let flow_addr = SocketAddr::new(IpAddr::V4(DN), 40_043);
    let rx = Receiver::start(h.udp(h.topo.dn().name(), flow_addr));
    let (stop, flow) = flow_of_one_ms(h, ues[0], flow_addr);
    std::thread::sleep(Duration::from_millis(300));
    let asked = h.smf.stats().upf_requests;
    let killed_at = Instant::now();
    let ready = h.kill_and_restart();
    println!(
        "e2e: kill -9 and `upf run` again: admin endpoint up {} ms after the start",
        ready.as_millis()
    );
    let lines = std::fs::read_to_string(&h.log).unwrap_or_default();
    if let Some(l) = lines.lines().find(|l| l.contains("restored")) {
        println!(
            "e2e: upf: {}",
            l.split_once("upf::state: ").map_or(l, |x| x.1)
        );
    }
    let missing = round_trips(h, &ues, echo_addr, 1);
    assert!(
        missing.is_empty(),
        "after the restart, no echo for UEs {missing:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let sent = flow.join().expect("flow");
    let got = rx.finish();
    let after: Vec<&Arrival> = got.iter().filter(|a| a.at > killed_at).collect();
    let gap = got
        .windows(2)
        .map(|w| w[1].at.saturating_duration_since(w[0].at))
        .max()
        .unwrap_or_default();
    println!(
        "e2e: UE 0's flow: {} of {sent} datagrams arrived, {} after the kill; longest gap {} ms",
        got.len(),
        after.len(),
        gap.as_millis()
    );
    assert!(
        !after.is_empty(),
        "UE 0's flow did not resume\n{}",
        h.state()
    );
    drop(echo);

    assert_eq!(
        h.smf.heartbeat().expect("heartbeat after the restart"),
        recovery,
        "the Recovery Time Stamp is kept: the SMF sees no restart"
    );
    assert_eq!(
        h.smf.stats().upf_requests,
        asked,
        "the restarted UPF asked the SMF nothing (no association setup, no report)"
    );
    let sessions = h.show("sessions");
    assert_eq!(
        sessions.as_array().map_or(0, Vec::len),
        UES as usize,
        "every session is back"
    );
    // The SMF goes on with them: each is deleted as usual, with its usage.
    let sessions = std::mem::take(&mut h.sessions);
    let usage: Vec<_> = (h.smf.delete_many(&sessions).into_iter())
        .map(|r| r.expect("deletion of a restored session"))
        .collect();
    // UE 0: its flow's datagrams the DN counted, and at most 5 echo requests a round (two
    // rounds); at 1 datagram a ms, one interval (and the commit after it) loses at most
    // ~CHECKPOINT ms of them.
    let lost_at_most = u64::try_from(CHECKPOINT.as_millis()).unwrap_or(0) + 50;
    let (counted, sent) = (got.len() as u64, u64::from(sent));
    let u0 = usage[0];
    println!(
        "e2e: UE 0's usage at deletion: {} uplink packets; the DN counted {counted} of its flow's {sent} (checkpoints every {} ms)",
        u0.uplink_packets,
        CHECKPOINT.as_millis()
    );
    assert!(
        u0.uplink_packets + lost_at_most >= counted + 2,
        "UE 0 reported {} uplink packets, the DN counted {counted}: more than one checkpoint interval lost\n{}",
        u0.uplink_packets,
        h.state()
    );
    assert!(
        u0.uplink_packets <= sent + 10,
        "UE 0 reported {} uplink packets of {sent} sent (and at most 10 echo requests): counted twice",
        u0.uplink_packets
    );
    // Every other UE: one echo before the kill (counted in a checkpoint long before it) and
    // one after, of at most 5 attempts each.
    for (k, u) in usage.iter().enumerate().skip(1) {
        assert!(
            (2..=10).contains(&u.uplink_packets) && (2..=10).contains(&u.downlink_packets),
            "UE {k}: {u:?}: the echo before the kill lost, or something counted twice"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Failover (#29): two instances of a cluster and etcd

/// Shard b's addresses; shard a's are the topology's UPF_N3, UPF_N4 and UPF_N6.
const B_N3: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 11);
const B_N4: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 11);
const B_N6: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 11);
/// etcd's address, on the N4 link.
const ETCD: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 5);

/// The cluster's file: shard a (the topology's UPF addresses, the first half of the UE
/// pool) and shard b (its own addresses, the second half); etcd on N4.
fn cluster_config(b: Backends) -> String {
    assert_eq!(b, Backends::UdpTun, "failover: udp and TUN only");
    format!(
        "# generated by crates/upf/tests/e2e.rs (failover)\n\
         [n4]\nheartbeat_interval_s = 3600\n\n\
         [n3]\nbackend = \"udp\"\n\n\
         [n6]\nbackend = \"tun\"\ninterface = \"upf0\"\n\n\
         [workers]\ncount = 1\n\n\
         [admin]\naddress = \"127.0.0.1:9464\"\n\n\
         [cluster]\netcd = [\"http://{ETCD}:2379\"]\nlease_ttl_s = 2\n\n\
         [cluster.shards.a]\nn4 = \"{UPF_N4}\"\nn3 = [\"{UPF_N3}\"]\n\
         ue_pool = [{{ ipv4 = \"{UE_NET}/17\" }}]\nteid_range = [1, 0x7fffffff]\n\n\
         [cluster.shards.b]\nn4 = \"{B_N4}\"\nn3 = [\"{B_N3}\"]\n\
         ue_pool = [{{ ipv4 = \"10.60.128.0/17\" }}]\nteid_range = [0x80000000, 0xffffffff]\n"
    )
}

/// Shard b's instance in a namespace of its own, on the same N3, N4 and N6 links as the
/// topology's UPF (the gNB's, SMF's and DN's ends become bridges), and etcd on N4 in a
/// namespace of its own.
struct ClusterRig {
    // Held to be dropped in this order: b's daemon, etcd, the namespaces.
    _daemon_b: Proc,
    log_b: PathBuf,
    _etcd: upf_netns::etcd::Etcd,
    upf_b: upf_netns::Netns,
    etcd_ns: upf_netns::Netns,
}

impl ClusterRig {
    fn start(topo: &Topology, conf: &Path, dir: &Path) -> Self {
        let (ue, dn) = (topo.ue().name(), topo.dn().name());
        let ip = |args: &[&str]| {
            upf_netns::ip(args).unwrap_or_else(|e| panic!("failover topology: {e}"));
        };
        // The gNB's, SMF's and DN's ends of N3, N4, N6 become bridges, their addresses on them.
        for (ns, br, dev, addr) in [
            (ue, "br3", "n3-gnb", "192.168.3.2/24"),
            (ue, "br4", "n4-smf", "192.168.4.2/24"),
            (dn, "br6", "n6-dn", "192.168.6.2/24"),
        ] {
            ip(&["-n", ns, "link", "add", br, "type", "bridge"]);
            ip(&["-n", ns, "addr", "del", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "master", br]);
            ip(&["-n", ns, "addr", "add", addr, "dev", br]);
            ip(&["-n", ns, "link", "set", br, "up"]);
        }
        let upf_b = upf_netns::Netns::named(&format!("{}b", topo.upf().name())).expect("netns");
        let etcd_ns = upf_netns::Netns::named(&format!("{}e", topo.upf().name())).expect("netns");
        for key in [
            "net/ipv4/conf/all/rp_filter",
            "net/ipv4/conf/default/rp_filter",
        ] {
            upf_b.sysctl(key, "0").expect("sysctl");
        }
        upf_b.sysctl("net/ipv4/ip_forward", "1").expect("sysctl");
        let cidr = |a: Ipv4Addr| format!("{a}/24");
        for (dev, addr, peer_ns, peer, br) in [
            ("n3-upf", B_N3, ue, "n3b-gnb", "br3"),
            ("n4-upf", B_N4, ue, "n4b-smf", "br4"),
            ("n6-upf", B_N6, dn, "n6b-dn", "br6"),
        ] {
            upf_netns::veth_pair_with_queues(
                (upf_b.name(), dev, &cidr(addr)),
                (peer_ns, peer, ""),
                1,
            )
            .expect("veth");
            ip(&["-n", peer_ns, "link", "set", peer, "master", br]);
        }
        upf_netns::veth_pair_with_queues(
            (etcd_ns.name(), "etcd0", &cidr(ETCD)),
            (ue, "n4e-smf", ""),
            1,
        )
        .expect("veth");
        ip(&["-n", ue, "link", "set", "n4e-smf", "master", "br4"]);
        for ns in [upf_b.name(), etcd_ns.name()] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // Each shard's half of the pool through its instance's N6 address.
        ip(&[
            "-n",
            dn,
            "route",
            "replace",
            &format!("{UE_NET}/17"),
            "via",
            &UPF_N6.to_string(),
        ]);
        ip(&[
            "-n",
            dn,
            "route",
            "replace",
            "10.60.128.0/17",
            "via",
            &B_N6.to_string(),
        ]);
        let etcd = upf_netns::etcd::Etcd::start(Some(&etcd_ns), IpAddr::V4(ETCD), 2379)
            .expect("etcd in its namespace");
        let log_b = dir.join("upf-b.log");
        let mut daemon_b = spawn_daemon_in(upf_b.name(), conf, &log_b, &["--instance", "b"]);
        let until = Instant::now() + Duration::from_secs(30);
        while try_show_in(upf_b.name(), "counters").is_none() {
            if let Some(st) = daemon_b.exited() {
                panic!("shard b's upf run exited ({st}):\n{}", log_tail(&log_b, 40));
            }
            assert!(
                Instant::now() < until,
                "shard b's upf run not up:\n{}",
                log_tail(&log_b, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            _daemon_b: daemon_b,
            log_b,
            _etcd: etcd,
            upf_b,
            etcd_ns,
        }
    }

    /// What keepalived or a Kubernetes service does when shard a's host dies: its links go
    /// (the dead host answers nothing), its N3, N4 and N6 addresses go up on b's interfaces,
    /// and the neighbours learn where they are now (gratuitous ARP).
    fn move_shard_a(&self, topo: &Topology) {
        for dev in ["n3-upf", "n4-upf", "n6-upf"] {
            topo.upf()
                .ip(&["link", "set", dev, "down"])
                .expect("link down");
        }
        for (dev, addr) in [("n3-upf", UPF_N3), ("n4-upf", UPF_N4), ("n6-upf", UPF_N6)] {
            self.upf_b
                .ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])
                .expect("address moved");
        }
        for ns in [topo.ue(), topo.dn(), &self.etcd_ns] {
            ns.ip(&["neigh", "flush", "all"]).expect("neigh flush");
        }
    }

    /// The value of the sample `name` (labels included, as `upf show metrics` prints it)
    /// of shard b's instance; 0 if absent.
    fn metric(&self, name: &str) -> f64 {
        let out = run_for(
            in_ns(self.upf_b.name(), env!("CARGO_BIN_EXE_upf")).args(["show", "metrics"]),
            Duration::from_secs(15),
        );
        text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }
}

/// 1,000 sessions on shard a with traffic both ways and a flow of 1 datagram a
/// millisecond from UE 0; `kill -9` of shard a's instance and its addresses moved to shard
/// b's: b takes a over from etcd, every session forwards again both ways, the SMF sees a's
/// Recovery Time Stamp and is asked nothing, and deletes every session through b.
fn failover(h: &mut Harness) {
    const UES: u32 = 1000;
    let (recovery, echo, echo_addr, ues) = echoing_sessions(h, UES, "failover");
    // Every session in etcd before the kill (what a crash can lose is what was not yet
    // written: operations.md).
    let until = Instant::now() + Duration::from_secs(20);
    while h.metric("upf_state_pending_writes") > 0 || h.metric("upf_state_writes_total") < 1000 {
        assert!(Instant::now() < until, "shard a's records not in etcd");
        std::thread::sleep(Duration::from_millis(50));
    }

    let flow_addr = SocketAddr::new(IpAddr::V4(DN), 40_043);
    let rx = Receiver::start(h.udp(h.topo.dn().name(), flow_addr));
    let (stop, flow) = flow_of_one_ms(h, ues[0], flow_addr);
    std::thread::sleep(Duration::from_millis(300));
    let asked = h.smf.stats().upf_requests;
    let pid = h.daemon.child.id().to_string();
    let killed_at = Instant::now();
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .is_ok_and(|s| s.success()));
    let rig = h.cluster.as_ref().expect("failover rig");
    rig.move_shard_a(&h.topo);
    // Until b has taken a over and UE 0's flow reached the DN after that. A hot standby
    // forwards a's sessions as soon as the addresses move, before the takeover: the outage
    // is the longest gap in the flow from the kill on, however short.
    let until = Instant::now() + Duration::from_secs(15);
    let mut got: Vec<Arrival> = Vec::new();
    let taken = loop {
        got.extend(rx.take());
        let log = std::fs::read_to_string(&rig.log_b).unwrap_or_default();
        if let Some(t) = log.contains("took over shard a").then(Instant::now) {
            std::thread::sleep(Duration::from_millis(50));
            got.extend(rx.take());
            if got.last().is_some_and(|a| a.at > t) {
                break t.duration_since(killed_at);
            }
        }
        assert!(
            Instant::now() < until,
            "UE 0's flow did not resume after the failover\nb's log:\n{}",
            log_tail(&rig.log_b, 30)
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let after: Vec<Instant> = std::iter::once(killed_at)
        .chain(got.iter().map(|a| a.at).filter(|&t| t > killed_at))
        .collect();
    let (gap, resumed) = after
        .windows(2)
        .map(|w| (w[1].duration_since(w[0]), w[1].duration_since(killed_at)))
        .max()
        .unwrap_or_default();
    println!(
        "e2e: failover: UE 0's flow at the DN again {} ms after kill -9 (longest gap {} ms); b had taken a over {} ms after",
        resumed.as_millis(),
        gap.as_millis(),
        taken.as_millis()
    );
    let missing = round_trips(h, &ues, echo_addr, 1);
    assert!(
        missing.is_empty(),
        "after the failover, no echo for UEs {missing:?}\nb's log:\n{}",
        log_tail(&rig.log_b, 30)
    );
    for l in std::fs::read_to_string(&rig.log_b)
        .unwrap_or_default()
        .lines()
    {
        if let Some((_, what)) = l.split_once("upf::cluster: took over") {
            println!("e2e: upf b: took over{what}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = flow.join();
    drop(rx);
    drop(echo);
    assert_eq!(
        h.smf.heartbeat().expect("heartbeat after the failover"),
        recovery,
        "shard a's Recovery Time Stamp: the SMF sees no restart"
    );
    assert_eq!(
        h.smf.stats().upf_requests,
        asked,
        "the survivor asked the SMF nothing"
    );
    assert_eq!(
        rig.metric("upf_cluster_shard_sessions{shard=\"a\"}"),
        f64::from(UES),
        "every session of shard a is on b"
    );
    let sessions = std::mem::take(&mut h.sessions);
    for r in h.smf.delete_many(&sessions) {
        r.expect("deletion of a session taken over");
    }
    assert_eq!(rig.metric("upf_cluster_shard_sessions{shard=\"a\"}"), 0.0);
}

/// `n` sessions, the DN echoing UDP on port 40,041, and a datagram of every UE echoed back
/// (round 0; `before` names what comes next in the failure message): the UPF's Recovery
/// Time Stamp as the SMF sees it, the echo, its address, the UEs.
fn echoing_sessions(
    h: &mut Harness,
    n: u32,
    before: &str,
) -> (u32, Echo, SocketAddr, Vec<Ipv4Addr>) {
    let specs: Vec<SessionSpec> = (0..n).map(Harness::spec).collect();
    h.connect(&specs);
    h.wait_path(0);
    let recovery = h.smf.heartbeat().expect("heartbeat");
    let echo_addr = SocketAddr::new(IpAddr::V4(DN), 40_041);
    let echo = Echo::start(h.udp(h.topo.dn().name(), echo_addr));
    let ues: Vec<Ipv4Addr> = h.sessions.iter().map(|s| s.ue).collect();
    let missing = round_trips(h, &ues, echo_addr, 0);
    assert!(
        missing.is_empty(),
        "before the {before}, no echo for UEs {missing:?}"
    );
    (recovery, echo, echo_addr, ues)
}

/// A datagram a millisecond from UE `ue` to `to` (stream 7), on a thread, until `stop` (or
/// 60,000): the flow whose gap measures an outage; it returns how many it sent.
fn flow_of_one_ms(h: &Harness, ue: Ipv4Addr, to: SocketAddr) -> (Arc<AtomicBool>, JoinHandle<u32>) {
    let sock = h.udp(h.topo.ue().name(), SocketAddr::new(IpAddr::V4(ue), 40_042));
    let stop = Arc::new(AtomicBool::new(false));
    let flow = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) && seq < 60_000 {
                send_one(&sock, to, &datagram(7, seq, 100));
                seq += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            seq
        })
    };
    (stop, flow)
}

/// UDP datagrams echoed to their sender, on a thread, until dropped.
struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(sock: UdpSocket) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends a datagram from each UE (port 40,040) to the echo and waits for it to come back,
/// 200 UEs at a time (a socket each), up to 5 tries a UE; the UEs whose echo never came.
fn round_trips(h: &Harness, ues: &[Ipv4Addr], echo: SocketAddr, round: u32) -> Vec<Ipv4Addr> {
    let mut missing = Vec::new();
    for chunk in ues.chunks(200) {
        let socks: Vec<UdpSocket> = in_netns(h.topo.ue().name(), || {
            chunk
                .iter()
                .map(|&ue| UdpSocket::bind(SocketAddr::new(IpAddr::V4(ue), 40_040)))
                .collect::<std::io::Result<Vec<_>>>()
        })
        .expect("netns")
        .expect("UE sockets");
        let mut waiting: Vec<usize> = (0..chunk.len()).collect();
        for attempt in 0..5 {
            for (k, &i) in waiting.iter().enumerate() {
                let stream = u32::try_from(i).unwrap_or(u32::MAX);
                send_one(&socks[i], echo, &datagram(stream, round * 8 + attempt, 64));
                if k % 20 == 19 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            std::thread::sleep(Duration::from_millis(300));
            waiting.retain(|&i| {
                let s = &socks[i];
                s.set_nonblocking(true).expect("nonblocking");
                let mut buf = [0u8; 2048];
                let mut back = false;
                while let Ok(n) = s.recv(&mut buf) {
                    back |= parse_datagram(&buf[..n]).is_some_and(|(_, seq)| seq / 8 == round);
                }
                !back
            });
            if waiting.is_empty() {
                break;
            }
        }
        missing.extend(waiting.iter().map(|&i| chunk[i]));
    }
    missing
}

// ---------------------------------------------------------------------------------------
// The tests, per backend set// ---------------------------------------------------------------------------------------
// The tests, per backend set

macro_rules! e2e_tests {
    ($module:ident, $backends:expr, [$($test:ident),* $(,)?]) => {
        mod $module {
            $(
                #[test]
                #[ignore = "needs root"]
                fn $test() {
                    super::e2e($backends, stringify!($test), super::$test);
                }
            )*
        }
    };
}

e2e_tests!(
    udp_tun,
    crate::Backends::UdpTun,
    [
        failover,
        ping,
        acl,
        udp,
        iperf3,
        mbr,
        idle_buffering,
        many_sessions,
        gtpu_echo,
        priority,
        gbr,
        warm_restart
    ]
);
e2e_tests!(
    af_packet,
    crate::Backends::AfPacket,
    [
        ping,
        udp,
        iperf3,
        mbr,
        idle_buffering,
        many_sessions,
        gtpu_echo,
        two_dns,
        priority,
        gbr
    ]
);
e2e_tests!(
    af_xdp,
    crate::Backends::AfXdp,
    [
        ping,
        acl,
        udp,
        iperf3,
        mbr,
        idle_buffering,
        many_sessions,
        gtpu_echo,
        priority,
        gbr,
        warm_restart
    ]
);
e2e_tests!(
    xdp_engine,
    crate::Backends::XdpEngine,
    [
        ping,
        acl,
        udp,
        iperf3,
        mbr,
        idle_buffering,
        many_sessions,
        gtpu_echo,
        hot_swap
    ]
);
