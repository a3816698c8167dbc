//! `upf demo`: the whole UPF on one machine in one command. It builds three network
//! namespaces joined by veth pairs (the layout of scripts/e2e-topology.sh), runs this binary's
//! `upf run` in the middle one, establishes sessions through the SMF emulator of upf-loadgen,
//! pushes GTP-U through the UPF and back from a reflector in the data network, shows rates,
//! drops and round-trip times every second, prints a summary and removes everything again
//! (also on Ctrl-C, on an error, and when dropped).
//!
//! ```text
//!  netns upfdemo-ue                netns upfdemo-upf                 netns upfdemo-dn
//!  gNB  192.168.3.2 ── N3 veth ── n3-upf 192.168.3.1
//!  SMF  192.168.4.2 ── N4 veth ── n4-upf 192.168.4.1   upf run
//!                                  n6-upf 192.168.6.1 ── N6 veth ── 192.168.6.2 reflector
//! ```

mod traffic;

/// `println!` and `eprintln!` that never panic: stdout may be a pipe whose reader has gone
/// (`upf demo | head`), and the demo must still clean up after itself.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! complain {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

use crate::admin;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use traffic::{Plan, Traffic};
use upf_io::link::ip;
use upf_loadgen::gnb::{SessionTable, UeSession};
use upf_loadgen::in_netns;
use upf_loadgen::smf::{ue_pool, Qos, Session, SessionSpec, Smf, SmfConfig, UeAddr, Usage};
use upf_loadgen::veth_pair;

pub const UE_NS: &str = "upfdemo-ue";
pub const UPF_NS: &str = "upfdemo-upf";
pub const DN_NS: &str = "upfdemo-dn";
pub const NAMESPACES: [&str; 3] = [UE_NS, UPF_NS, DN_NS];

const GNB: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 2);
const UPF_N3: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 1);
const SMF: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 2);
const UPF_N4: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 1);
const UPF_N6: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 1);
const DN: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 2);
const UE_POOL: &str = "10.60.0.0/16";
const ADMIN: &str = "127.0.0.1:9464";
const DL_TEID_BASE: u32 = 0x0100_0001;

/// How the demo's UPF meets N3 and N6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoBackend {
    /// N3 a UDP socket on 192.168.3.1:2152, N6 a TUN device routed by the kernel.
    UdpTun,
    /// Both veths through AF_PACKET (TPACKET_V3) rings, workers in a fanout group.
    AfPacket,
    /// Both veths through AF_XDP sockets and an XDP program (one queue: one worker).
    AfXdp,
}

impl DemoBackend {
    fn name(self) -> &'static str {
        match self {
            Self::UdpTun => "udp (N3) + tun (N6)",
            Self::AfPacket => "af_packet",
            Self::AfXdp => "af_xdp",
        }
    }
}

/// Options of `upf demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Sessions (UEs) to establish, each with an uplink and a downlink PDR and FAR, a QER with
    /// an MBR and a URR.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Uplink packets per second over all UEs (each one comes back downlink).
    #[arg(long, default_value_t = 50_000)]
    pub rate: u64,
    /// How the UPF meets N3 and N6.
    #[arg(long, value_enum, default_value_t = DemoBackend::AfPacket)]
    pub backend: DemoBackend,
    /// UPF worker threads (default: 2; 1 with af-xdp, the veths having one queue).
    #[arg(long)]
    pub workers: Option<usize>,
    /// The MBR of each session's QER, kbit/s, each way.
    #[arg(long, default_value_t = 10_000)]
    pub mbr_kbps: u64,
    /// Remove what an interrupted demo left behind (its namespaces, and a UPF still running
    /// in them), then exit.
    #[arg(long)]
    pub clean: bool,
}

/// How a demo that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Interrupted,
}

/// Runs the demo (or `--clean`). Errors say what to do about them.
pub fn run(a: &Args) -> Result<Outcome, String> {
    preflight()?;
    if a.clean {
        clean()?;
        return Ok(Outcome::Completed);
    }
    validate(a)?;
    let left: Vec<&str> = NAMESPACES.into_iter().filter(|n| ns_exists(n)).collect();
    if !left.is_empty() {
        return Err(format!(
            "network namespace(s) {} exist already: another `upf demo` is running, or one was \
             killed before it could clean up. `upf demo --clean` removes them (and stops a UPF \
             still running in them).",
            left.join(", ")
        ));
    }
    let stop = signals()?;
    let mut demo = Demo::new()?;
    let r = match demo.run(a, &stop) {
        // Ctrl-C before the traffic: nothing to sum up.
        Err(_) if stop.load(Relaxed) => {
            say!("upf demo: interrupted");
            Ok(Outcome::Interrupted)
        }
        Err(e) => {
            demo.log_tail();
            Err(e)
        }
        ok => ok,
    };
    demo.teardown();
    r
}

/// The SIGINT/SIGTERM/SIGHUP flag: the first signal asks the demo to wind down (summary and
/// clean-up follow), a second one ends the process at once.
fn signals() -> Result<Arc<AtomicBool>, String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop.clone()))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    Ok(stop)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn preflight() -> Result<(), String> {
    if !is_root() {
        return Err(
            "needs root: it creates network namespaces and veth pairs and runs the UPF \
                    on raw sockets. Run it as `sudo upf demo`."
                .into(),
        );
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`ip -V` failed ({}): is iproute2 installed?",
            o.status
        )),
        Err(e) => Err(format!(
            "cannot run `ip` ({e}): install iproute2 (apt-get install iproute2) and make sure \
             `ip` is on PATH"
        )),
    }
}

fn validate(a: &Args) -> Result<(), String> {
    if !(1..=65_534).contains(&a.sessions) {
        return Err(format!(
            "--sessions {}: between 1 and 65534 (the UE pool is {UE_POOL})",
            a.sessions
        ));
    }
    if a.seconds == 0 {
        return Err("--seconds: at least 1".into());
    }
    if !(1..=10_000_000).contains(&a.rate) {
        return Err(format!("--rate {}: between 1 and 10000000 pps", a.rate));
    }
    if let Some(w) = a.workers {
        if !(1..=64).contains(&w) {
            return Err(format!("--workers {w}: between 1 and 64"));
        }
    }
    if a.mbr_kbps == 0 {
        return Err("--mbr-kbps: at least 1".into());
    }
    Ok(())
}

fn ns_exists(name: &str) -> bool {
    upf_loadgen::netns_path(name).exists()
}

/// Writes /proc/sys/KEY inside namespace `ns` (net sysctls are per namespace).
fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/{key}");
    in_netns(ns, || std::fs::write(&path, value))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{ns}: {path} = {value}: {e}"))
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn process_gone(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// `upf demo --clean`: stops what runs in the demo's namespaces and deletes them.
fn clean() -> Result<(), String> {
    let mut removed = Vec::new();
    for ns in NAMESPACES {
        if !ns_exists(ns) {
            continue;
        }
        let pids: Vec<u32> = ip(&["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        for &p in &pids {
            signal(p, "TERM");
        }
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && !pids.iter().all(|&p| process_gone(p)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        for &p in pids.iter().filter(|&&p| !process_gone(p)) {
            signal(p, "KILL");
        }
        ip(&["netns", "del", ns])?;
        removed.push(if pids.is_empty() {
            ns.to_string()
        } else {
            format!("{ns} (stopped pid {})", join(&pids))
        });
    }
    if removed.is_empty() {
        say!("upf demo --clean: nothing to clean (no upfdemo-* namespace)");
    } else {
        say!("upf demo --clean: removed {}", removed.join(", "));
    }
    Ok(())
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// The UPF's counters as its admin API reports them.
#[derive(Debug, Clone, Default)]
struct UpfCounters {
    rx_packets: [u64; 2],
    rx_bytes: [u64; 2],
    tx_packets: [u64; 2],
    tx_bytes: [u64; 2],
    dropped: u64,
}

const N3: usize = 0;
const N6: usize = 1;

impl UpfCounters {
    fn parse(v: &Value) -> Self {
        let port = |key: &str| {
            let p = |name: &str| v[key][name].as_u64().unwrap_or(0);
            // N9 shares N3's interface in the demo.
            [p("n3") + p("n9"), p("n6")]
        };
        Self {
            rx_packets: port("rx_packets"),
            rx_bytes: port("rx_bytes"),
            tx_packets: port("tx_packets"),
            tx_bytes: port("tx_bytes"),
            dropped: v["dropped"].as_u64().unwrap_or(0),
        }
    }

    fn since(&self, e: &Self) -> Self {
        let d = |a: [u64; 2], b: [u64; 2]| [a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1])];
        Self {
            rx_packets: d(self.rx_packets, e.rx_packets),
            rx_bytes: d(self.rx_bytes, e.rx_bytes),
            tx_packets: d(self.tx_packets, e.tx_packets),
            tx_bytes: d(self.tx_bytes, e.tx_bytes),
            dropped: self.dropped.saturating_sub(e.dropped),
        }
    }
}

/// GET `path` from the UPF's admin endpoint, from inside its namespace.
fn upf_api(path: &str) -> Result<Value, String> {
    let addr: SocketAddr = ADMIN.parse().map_err(|e| format!("{ADMIN}: {e}"))?;
    let body = in_netns(UPF_NS, || admin::show(addr, path)).map_err(|e| e.to_string())??;
    serde_json::from_str(&body).map_err(|e| format!("{path}: {e}"))
}

fn upf_counters() -> Option<UpfCounters> {
    upf_api("/api/counters")
        .ok()
        .map(|v| UpfCounters::parse(&v))
}

fn upf_drops() -> Vec<(String, u64)> {
    match upf_api("/api/drops") {
        Ok(Value::Object(m)) => m
            .into_iter()
            .filter_map(|(k, v)| v.as_u64().map(|n| (k, n)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Packets the UPF's interface queues could not take or send, summed over its workers:
/// (received but discarded, not IP or too big; handed over but not sent, no neighbour or
/// ring full).
fn upf_io_drops() -> Option<(u64, u64)> {
    let v = upf_api("/api/workers").ok()?;
    let mut t = (0, 0);
    for q in v
        .as_array()?
        .iter()
        .flat_map(|w| w["queues"].as_array().into_iter().flatten())
    {
        t.0 += q["rx_discarded"].as_u64().unwrap_or(0);
        t.1 += q["tx_dropped"].as_u64().unwrap_or(0);
    }
    Some(t)
}

/// CPU time (user + system, in seconds) of process `pid` so far.
fn cpu_seconds(pid: u32, ticks_per_s: u64) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state (field 3) … utime (14), stime (15).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_s.max(1) as f64)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// 1234567 → "1,234,567".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration given in nanoseconds, with a unit that suits it.
fn time(ns: u64) -> String {
    let f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=99_999 => format!("{:.1} µs", f / 1e3),
        100_000..=999_999 => format!("{:.0} µs", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", f / 1e6),
        _ => format!("{:.2} s", f / 1e9),
    }
}

fn megabytes(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// The progress table's header and one row.
const HEADER: &str = "   time     UL pps UL Mbit/s     DL pps DL Mbit/s         sent     received    drops   RTT p50   RTT p99";

#[allow(clippy::too_many_arguments)]
fn row(
    elapsed: u64,
    total: u64,
    upf: Option<(&UpfCounters, f64)>,
    sent: u64,
    received: u64,
    drops: Option<u64>,
    p50: Option<u64>,
    p99: Option<u64>,
) -> String {
    let rate = |d: &UpfCounters, secs: f64, i: usize| {
        (
            format!("{:.0}", d.tx_packets[i] as f64 / secs),
            format!("{:.1}", d.tx_bytes[i] as f64 * 8.0 / 1e6 / secs),
        )
    };
    let dash = || ("-".to_string(), "-".to_string());
    // Uplink leaves the UPF on N6, downlink on N3.
    let (ul, dl) = match upf {
        Some((d, secs)) => (rate(d, secs, N6), rate(d, secs, N3)),
        None => (dash(), dash()),
    };
    let opt = |v: Option<u64>, f: fn(u64) -> String| v.map_or_else(|| "-".into(), f);
    format!(
        "{:>7} {:>10} {:>9} {:>10} {:>9} {:>12} {:>12} {:>8} {:>9} {:>9}",
        format!("{elapsed}/{total} s"),
        ul.0,
        ul.1,
        dl.0,
        dl.1,
        thousands(sent),
        thousands(received),
        opt(drops, thousands),
        opt(p50, time),
        opt(p99, time),
    )
}

/// What the traffic phase measured, for the summary.
#[derive(Debug)]
struct Measured {
    seconds: f64,
    sent: u64,
    sent_bytes: u64,
    send_errors: u64,
    dn_received: u64,
    dn_echoed: u64,
    received: u64,
    received_bytes: u64,
    other: u64,
    rtt: traffic::Counts,
    rtt_max: u64,
    upf: Option<UpfCounters>,
    drops: Vec<(String, u64)>,
    /// The UPF's interface queues: discarded on receive, dropped on send.
    io_drops: Option<(u64, u64)>,
    cpu_s: Option<f64>,
}

/// Everything the demo made, undone by [`Demo::teardown`] (idempotent; also run on drop).
#[derive(Debug)]
struct Demo {
    dir: PathBuf,
    namespaces: Vec<&'static str>,
    daemon: Option<Child>,
    smf: Option<Smf>,
    sessions: Vec<Session>,
    traffic: Option<Traffic>,
    /// UDP sockets on the discard port of the gNB and the DN (see [`Demo::topology`]).
    discard: Vec<std::net::UdpSocket>,
    /// Sessions established (kept after they are deleted, for the summary).
    established: usize,
    /// --rate, for the summary.
    rate: u64,
    workers: usize,
    backend: DemoBackend,
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.teardown();
    }
}

impl Demo {
    fn new() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("upf-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self {
            dir,
            namespaces: Vec::new(),
            daemon: None,
            smf: None,
            sessions: Vec::new(),
            traffic: None,
            discard: Vec::new(),
            established: 0,
            rate: 0,
            workers: 1,
            backend: DemoBackend::AfPacket,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("upf.log")
    }

    fn run(&mut self, a: &Args, stop: &AtomicBool) -> Result<Outcome, String> {
        self.backend = a.backend;
        self.rate = a.rate;
        self.workers = a.workers.unwrap_or(match a.backend {
            DemoBackend::AfXdp => 1,
            _ => 2,
        });
        let interrupted = || {
            if stop.load(Relaxed) {
                Err("interrupted".to_string())
            } else {
                Ok(())
            }
        };
        self.topology(a.backend == DemoBackend::UdpTun)?;
        interrupted()?;
        self.start_upf(stop)?;
        interrupted()?;
        self.establish(a, stop)?;
        interrupted()?;
        let m = self.traffic(a, stop)?;
        let usage = self.delete_sessions();
        self.summary(&m, usage.as_ref());
        Ok(if stop.load(Relaxed) {
            Outcome::Interrupted
        } else {
            Outcome::Completed
        })
    }

    /// The three namespaces and their links (scripts/e2e-topology.sh's layout, without the
    /// UE TUN: the demo's gNB makes the UEs' packets itself).
    fn topology(&mut self, forward: bool) -> Result<(), String> {
        for ns in NAMESPACES {
            ip(&["netns", "add", ns])?;
            self.namespaces.push(ns);
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for (k, v) in [
                ("net/ipv4/conf/all/rp_filter", "0"),
                ("net/ipv4/conf/default/rp_filter", "0"),
                // No IPv6 on the links: router solicitations and MLD reports would reach the
                // UPF's N6 as packets for no UE.
                ("net/ipv6/conf/all/disable_ipv6", "1"),
                ("net/ipv6/conf/default/disable_ipv6", "1"),
            ] {
                sysctl(ns, k, v)?;
            }
        }
        // The kernel forwards between N6 and the TUN for udp-tun; with raw sockets the UPF
        // does, and the kernel must not forward copies.
        sysctl(
            UPF_NS,
            "net/ipv4/ip_forward",
            if forward { "1" } else { "0" },
        )?;
        for (a, da, aa, b, db, ab) in [
            (
                UE_NS,
                "n3-gnb",
                "192.168.3.2/24",
                UPF_NS,
                "n3-upf",
                "192.168.3.1/24",
            ),
            (
                UE_NS,
                "n4-smf",
                "192.168.4.2/24",
                UPF_NS,
                "n4-upf",
                "192.168.4.1/24",
            ),
            (
                UPF_NS,
                "n6-upf",
                "192.168.6.1/24",
                DN_NS,
                "n6-dn",
                "192.168.6.2/24",
            ),
        ] {
            veth_pair((a, da, aa), (b, db, ab)).map_err(|e| e.to_string())?;
        }
        ip(&["-n", DN_NS, "route", "add", UE_POOL, "via", "192.168.6.1"])?;
        // The UPF has the kernel confirm its next hops (the gNB, the DN) with an empty datagram
        // to their discard port. Someone listening there keeps those kernels from answering
        // with ICMP port unreachable, which the raw-socket backends would see as packets for
        // no session and count as drops.
        for (ns, at) in [(UE_NS, GNB), (DN_NS, DN)] {
            let s = in_netns(ns, || std::net::UdpSocket::bind((at, 9)))
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{ns}: UDP {at}:9: {e}"))?;
            self.discard.push(s);
        }
        warm_neighbours();
        say!(
            "upf demo: network namespaces\n  {UE_NS:<12} gNB {GNB} (N3), SMF {SMF} (N4)\n  \
             {UPF_NS:<12} the UPF: N3 {UPF_N3}, N4 {UPF_N4}, N6 {UPF_N6}\n  \
             {DN_NS:<12} data network {DN}: a UDP reflector on port {}, {UE_POOL} via the UPF",
            traffic::REFLECTOR_PORT
        );
        Ok(())
    }

    fn config(&self) -> String {
        let (n3, n6) = match self.backend {
            DemoBackend::UdpTun => (
                "backend = \"udp\"".to_string(),
                "backend = \"tun\"\ninterface = \"upf0\"".to_string(),
            ),
            b => {
                let name = if b == DemoBackend::AfXdp {
                    "af_xdp"
                } else {
                    "af_packet"
                };
                (
                    format!("backend = \"{name}\"\ninterface = \"n3-upf\""),
                    format!("backend = \"{name}\"\ninterface = \"n6-upf\""),
                )
            }
        };
        format!(
            "# Written by `upf demo`.\n[n4]\naddress = \"{UPF_N4}\"\n\n[n3]\n{n3}\n\
             addresses = [\"{UPF_N3}\"]\n\n[n6]\n{n6}\n\n[workers]\ncount = {}\n\n\
             [[ue_pool]]\nipv4 = \"{UE_POOL}\"\n\n[admin]\naddress = \"{ADMIN}\"\n",
            self.workers
        )
    }

    fn start_upf(&mut self, stop: &AtomicBool) -> Result<(), String> {
        let cfg = self.dir.join("upf.toml");
        std::fs::write(&cfg, self.config()).map_err(|e| format!("{}: {e}", cfg.display()))?;
        let log_path = self.log_path();
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", UPF_NS])
            .arg(&exe)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            // Its own process group: Ctrl-C reaches the demo only, which stops the UPF last.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting `ip netns exec {UPF_NS} upf run`: {e}"))?;
        let pid = child.id();
        self.daemon = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self
                .daemon
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.daemon = None;
                return Err(format!("the UPF exited during start-up ({st})"));
            }
            if upf_api("/api/counters").is_ok() {
                break;
            }
            if stop.load(Relaxed) {
                return Err("interrupted".into());
            }
            if Instant::now() > until {
                return Err("the UPF did not answer on its admin endpoint within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        say!(
            "upf demo: UPF running (pid {pid}): {} on N3 and N6, {} worker{}\n  \
             {} run --config {}\n  log: {}",
            self.backend.name(),
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            exe.display(),
            cfg.display(),
            log_path.display()
        );
        Ok(())
    }

    fn establish(&mut self, a: &Args, stop: &AtomicBool) -> Result<(), String> {
        let smf = in_netns(UE_NS, || {
            let mut c = SmfConfig::new(SocketAddr::from((UPF_N4, 8805)));
            c.bind = SocketAddr::from((SMF, 0));
            c.t1 = Duration::from_millis(1000);
            c.n1 = 3;
            c.window = 64;
            Smf::new(c)
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("SMF emulator: {e}"))?;
        let smf = self.smf.insert(smf);
        let assoc = smf
            .associate()
            .map_err(|e| format!("PFCP association: {e}"))?;
        let ues = ue_pool(Ipv4Addr::new(10, 60, 0, 0), 16, 0, a.sessions)?;
        let specs: Vec<SessionSpec> = ues
            .into_iter()
            .zip(0u32..)
            .map(|(ue, i)| {
                let mut s = SessionSpec::new(UeAddr::Static(ue), DL_TEID_BASE + i, GNB);
                s.qos = Some(Qos {
                    mbr_kbps: Some((a.mbr_kbps, a.mbr_kbps)),
                });
                s
            })
            .collect();
        let start = Instant::now();
        for chunk in specs.chunks(250) {
            for r in smf.establish_many(chunk) {
                match r {
                    Ok(s) => self.sessions.push(s),
                    Err(e) => {
                        return Err(format!("session {}: {e}", self.sessions.len() + 1));
                    }
                }
            }
            if stop.load(Relaxed) {
                return Err("interrupted".into());
            }
        }
        self.established = self.sessions.len();
        let t = start.elapsed().as_secs_f64();
        say!(
            "upf demo: associated with the UPF ({}), {} sessions established in {t:.2} s \
             ({:.0}/s), each: UL + DL PDR and FAR, QER (MBR {} kbit/s each way), URR",
            assoc.upf_node,
            thousands(self.sessions.len() as u64),
            self.sessions.len() as f64 / t.max(1e-6),
            thousands(a.mbr_kbps)
        );
        Ok(())
    }

    fn check_daemon(&mut self) -> Result<(), String> {
        if let Some(st) = self
            .daemon
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            self.daemon = None;
            return Err(format!("the UPF exited ({st})"));
        }
        Ok(())
    }

    fn traffic(&mut self, a: &Args, stop: &AtomicBool) -> Result<Measured, String> {
        let table = SessionTable::new(self.sessions.iter().map(UeSession::from).collect())?;
        let plan = Plan {
            table,
            upf_n3: SocketAddr::from((UPF_N3, upf_loadgen::gnb::GTPU_PORT)),
            dn: SocketAddrV4::new(DN, traffic::REFLECTOR_PORT),
            rate: a.rate,
        };
        let gnb_sock = in_netns(UE_NS, || traffic::gnb_socket(GNB))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("gNB socket: {e}"))?;
        let dn_sock = in_netns(DN_NS, traffic::reflector_socket)
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("reflector socket: {e}"))?;
        let pid = self.daemon.as_ref().map(Child::id);
        let ticks = clock_ticks();
        let cpu = || pid.and_then(|p| cpu_seconds(p, ticks));
        let base = upf_counters();
        let base_drops = upf_drops();
        let base_io = upf_io_drops();
        let cpu0 = cpu();
        let traffic = self
            .traffic
            .insert(Traffic::start(plan, gnb_sock, dn_sock).map_err(|e| format!("traffic: {e}"))?);
        let stats = traffic.stats.clone();
        say!(
            "upf demo: {} s of traffic at {} pps: UDP from every UE to {DN}:{} (64/576/1400-octet \
             packets, 7:4:1) as GTP-U from the gNB, echoed back by the DN; Ctrl-C stops early",
            a.seconds,
            thousands(a.rate),
            traffic::REFLECTOR_PORT
        );
        let tty = std::io::stdout().is_terminal();
        let mut out = std::io::stdout();
        if tty {
            let _ = writeln!(out, "\x1b[1m{HEADER}\x1b[0m");
        } else {
            let _ = writeln!(out, "{HEADER}");
        }
        let start = Instant::now();
        let mut last = (start, base.clone(), stats.rtt.snapshot());
        let mut tick = 0;
        let mut result = Ok(());
        // A row printed on a terminal without its newline (it is rewritten in place).
        let mut open = false;
        while tick < a.seconds && !stop.load(Relaxed) {
            let next = start + Duration::from_secs(tick + 1);
            // Answer the UPF meanwhile (heartbeats), in slices so that Ctrl-C is seen.
            while !stop.load(Relaxed) {
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                if let Some(smf) = self.smf.as_mut() {
                    if smf.serve(left.min(Duration::from_millis(100))).is_err() {
                        std::thread::sleep(left.min(Duration::from_millis(100)));
                    }
                    let _ = smf.take_events();
                } else {
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
            }
            if let Err(e) = self.check_daemon() {
                result = Err(e);
                break;
            }
            if stop.load(Relaxed) {
                if open {
                    let _ = writeln!(out);
                    open = false;
                }
                let _ = writeln!(
                    out,
                    "upf demo: interrupted after {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                break;
            }
            tick += 1;
            let now = Instant::now();
            let c = upf_counters();
            let rtt = stats.rtt.snapshot();
            let d = rtt.since(&last.2);
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-3);
            let delta = match (&c, &last.1) {
                (Some(c), Some(l)) => Some(c.since(l)),
                _ => None,
            };
            let line = row(
                tick,
                a.seconds,
                delta.as_ref().map(|d| (d, secs)),
                stats.ul_sent.load(Relaxed),
                stats.dl_received.load(Relaxed),
                match (&c, &base) {
                    (Some(c), Some(b)) => Some(c.dropped.saturating_sub(b.dropped)),
                    _ => None,
                },
                d.quantile(0.5),
                d.quantile(0.99),
            );
            if tty {
                let _ = write!(out, "\r\x1b[2K{line}");
                open = true;
            } else {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            last = (now, c, rtt);
        }
        if open {
            let _ = writeln!(out);
        }
        let traffic = self.traffic.as_mut().ok_or("traffic vanished")?;
        traffic.stop_sending();
        let seconds = start.elapsed().as_secs_f64();
        // Let what is in flight come back: until every packet has, or none has for 300 ms.
        let mut seen = (stats.dl_received.load(Relaxed), Instant::now());
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && result.is_ok() {
            let r = stats.dl_received.load(Relaxed);
            if r >= stats.ul_sent.load(Relaxed) {
                break;
            }
            if r != seen.0 {
                seen = (r, Instant::now());
            } else if seen.1.elapsed() > Duration::from_millis(300) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        traffic.stop();
        result?;
        let upf = match (upf_counters(), &base) {
            (Some(c), Some(b)) => Some(c.since(b)),
            _ => None,
        };
        let io_drops = match (upf_io_drops(), base_io) {
            (Some(e), Some(b)) => Some((e.0.saturating_sub(b.0), e.1.saturating_sub(b.1))),
            _ => None,
        };
        let drops = upf_drops()
            .into_iter()
            .map(|(k, v)| {
                let b = base_drops
                    .iter()
                    .find(|(bk, _)| *bk == k)
                    .map_or(0, |(_, n)| *n);
                (k, v.saturating_sub(b))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let cpu_s = match (cpu0, cpu()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Ok(Measured {
            seconds,
            sent: stats.ul_sent.load(Relaxed),
            sent_bytes: stats.ul_sent_bytes.load(Relaxed),
            send_errors: stats.send_errors.load(Relaxed),
            dn_received: stats.dn_received.load(Relaxed),
            dn_echoed: stats.dn_echoed.load(Relaxed),
            received: stats.dl_received.load(Relaxed),
            received_bytes: stats.dl_received_bytes.load(Relaxed),
            other: stats.dl_other.load(Relaxed),
            rtt: stats.rtt.snapshot(),
            rtt_max: stats.rtt.max(),
            upf,
            drops,
            io_drops,
            cpu_s,
        })
    }

    /// Deletes the sessions (their URRs' final usage comes back) and releases the association.
    fn delete_sessions(&mut self) -> Option<Usage> {
        let mut smf = self.smf.take()?;
        let sessions = std::mem::take(&mut self.sessions);
        let alive = self.check_daemon().is_ok() && self.daemon.is_some();
        if !alive {
            return None;
        }
        let start = Instant::now();
        let mut usage = Usage::default();
        let mut failed = Vec::new();
        for r in smf.delete_many(&sessions) {
            match r {
                Ok(u) => {
                    usage.reports += u.reports;
                    usage.total_octets += u.total_octets;
                    usage.uplink_octets += u.uplink_octets;
                    usage.downlink_octets += u.downlink_octets;
                    usage.uplink_packets += u.uplink_packets;
                    usage.downlink_packets += u.downlink_packets;
                }
                Err(e) => failed.push(e),
            }
        }
        let released = smf.release();
        say!(
            "upf demo: {} sessions deleted in {:.2} s{}; association {}",
            thousands((sessions.len() - failed.len()) as u64),
            start.elapsed().as_secs_f64(),
            failed
                .first()
                .map(|e| format!(" ({} failed, the first: {e})", failed.len()))
                .unwrap_or_default(),
            match released {
                Ok(()) => "released".to_string(),
                Err(e) => format!("release failed: {e}"),
            }
        );
        Some(usage)
    }

    fn summary(&self, m: &Measured, usage: Option<&Usage>) {
        let pct = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 * 100.0 / whole as f64
            }
        };
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "\nSummary: {} sessions, {:.1} s of traffic, UPF {} with {} worker{}",
            thousands(self.established as u64),
            m.seconds,
            self.backend.name(),
            self.workers,
            if self.workers == 1 { "" } else { "s" }
        ));
        let upf = m.upf.as_ref();
        let port = |f: fn(&UpfCounters) -> [u64; 2], i: usize| {
            upf.map_or_else(|| "-".to_string(), |c| thousands(f(c)[i]))
        };
        line(format!(
            "  uplink     gNB sent      {:>12} G-PDUs ({} inner){}",
            thousands(m.sent),
            megabytes(m.sent_bytes),
            if m.send_errors > 0 {
                format!(", {} send errors", thousands(m.send_errors))
            } else {
                String::new()
            }
        ));
        line(format!(
            "             UPF N3 in     {:>12}, N6 out {}",
            port(|c| c.rx_packets, N3),
            port(|c| c.tx_packets, N6)
        ));
        line(format!(
            "             DN received   {:>12}",
            thousands(m.dn_received)
        ));
        line(format!(
            "  downlink   DN echoed     {:>12}",
            thousands(m.dn_echoed)
        ));
        line(format!(
            "             UPF N6 in     {:>12}, N3 out {}",
            port(|c| c.rx_packets, N6),
            port(|c| c.tx_packets, N3)
        ));
        line(format!(
            "             gNB received  {:>12} ({} inner){}",
            thousands(m.received),
            megabytes(m.received_bytes),
            if m.other > 0 {
                format!(", {} other datagrams", thousands(m.other))
            } else {
                String::new()
            }
        ));
        let lost = m.sent.saturating_sub(m.received);
        line(format!(
            "  loss       {} of {} round trips ({:.3} %)",
            thousands(lost),
            thousands(m.sent),
            pct(lost, m.sent),
        ));
        if let Some(w) = upf.map(|c| where_lost(m, c)).filter(|w| !w.is_empty()) {
            line(format!("             {w}"));
        }
        let pipeline = if m.drops.is_empty() {
            "none in the pipeline".to_string()
        } else {
            let total: u64 = m.drops.iter().map(|(_, n)| n).sum();
            format!(
                "{} in the pipeline ({})",
                thousands(total),
                m.drops
                    .iter()
                    .map(|(k, n)| format!("{k} {}", thousands(*n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        // Frames discarded on receive are the links' ARP and the like, not user traffic.
        let io = match m.io_drops {
            Some((_, tx)) if tx > 0 => format!(
                "; {} not sent by its interface queues (no neighbour, ring full)",
                thousands(tx)
            ),
            _ => String::new(),
        };
        line(format!("  UPF drops  {pipeline}{io}"));
        let q = |p: f64| m.rtt.quantile(p).map_or_else(|| "-".into(), time);
        line(format!(
            "  latency    round trip p50 {}, p99 {}, max {} ({} samples)",
            q(0.5),
            q(0.99),
            if m.rtt.total() > 0 {
                time(m.rtt_max)
            } else {
                "-".into()
            },
            thousands(m.rtt.total())
        ));
        if let Some(u) = usage {
            line(format!(
                "  URR        usage reported at deletion: uplink {} packets ({}), downlink {} \
                 packets ({})",
                thousands(u.uplink_packets),
                megabytes(u.uplink_octets),
                thousands(u.downlink_packets),
                megabytes(u.downlink_octets)
            ));
        }
        if let (Some(cpu), Some(c)) = (m.cpu_s, upf) {
            let handled = c.rx_packets[N3] + c.rx_packets[N6];
            line(format!(
                "  UPF CPU    {cpu:.2} s user+system in {:.1} s ({:.0} % of one core){}",
                m.seconds,
                pct_f(cpu, m.seconds),
                if handled > 0 {
                    format!(
                        ", {} per packet ({} packets in)",
                        time(ns_of(cpu / handled as f64)),
                        thousands(handled)
                    )
                } else {
                    String::new()
                }
            ));
        }
        if pct(lost, m.sent) > 1.0 {
            line(format!(
                "upf demo: {:.1} % of the round trips were lost: this machine (its CPUs are \
                 shared by the UPF, the gNB, the reflector and the kernel's veths) or this \
                 backend did not keep up with {} packets/s; try a lower --rate",
                pct(lost, m.sent),
                thousands(self.rate)
            ));
        }
        let mut out = std::io::stdout();
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    }

    /// After an error: the end of the UPF's log, if it says anything.
    fn log_tail(&self) {
        let Ok(log) = std::fs::read_to_string(self.log_path()) else {
            return;
        };
        let lines: Vec<&str> = log.lines().collect();
        if lines.is_empty() {
            return;
        }
        complain!(
            "upf demo: the last lines of the UPF's log ({}):",
            self.log_path().display()
        );
        for l in &lines[lines.len().saturating_sub(15)..] {
            complain!("  {l}");
        }
    }

    /// Stops and removes everything made so far, in reverse order. Idempotent.
    fn teardown(&mut self) {
        if let Some(mut t) = self.traffic.take() {
            t.stop();
        }
        self.discard.clear();
        if self.smf.is_some() {
            let _ = self.delete_sessions();
        }
        let mut done = Vec::new();
        if let Some(mut child) = self.daemon.take() {
            let pid = child.id();
            signal(pid, "TERM");
            let until = Instant::now() + Duration::from_secs(5);
            let status = loop {
                match child.try_wait() {
                    Ok(Some(st)) => break Some(st),
                    Ok(None) if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        break child.wait().ok();
                    }
                }
            };
            done.push(match status {
                Some(st) if st.success() => "UPF stopped".to_string(),
                Some(st) => format!("UPF stopped ({st})"),
                None => "UPF killed".to_string(),
            });
        }
        let mut removed = Vec::new();
        for ns in self.namespaces.drain(..).rev() {
            match ip(&["netns", "del", ns]) {
                Ok(_) => removed.push(ns),
                Err(e) => complain!("upf demo: {e}"),
            }
        }
        if !removed.is_empty() {
            removed.reverse();
            done.push(format!("namespaces {} removed", removed.join(", ")));
        }
        if !done.is_empty() {
            say!(
                "upf demo: {}; the UPF's log is {}",
                done.join(", "),
                self.log_path().display()
            );
        }
    }
}

/// Where the lost packets went missing, hop by hop ("12 between the gNB and the UPF's N3, …").
fn where_lost(m: &Measured, c: &UpfCounters) -> String {
    let hops = [
        (m.sent, c.rx_packets[N3], "between the gNB and the UPF's N3"),
        (c.rx_packets[N3], c.tx_packets[N6], "in the UPF uplink"),
        (
            c.tx_packets[N6],
            m.dn_received,
            "between the UPF's N6 and the DN",
        ),
        (m.dn_received, m.dn_echoed, "in the reflector"),
        (
            m.dn_echoed,
            c.rx_packets[N6],
            "between the DN and the UPF's N6",
        ),
        (c.rx_packets[N6], c.tx_packets[N3], "in the UPF downlink"),
        (
            c.tx_packets[N3],
            m.received,
            "between the UPF's N3 and the gNB",
        ),
    ];
    let parts: Vec<String> = hops
        .iter()
        .filter(|(a, b, _)| a > b)
        .map(|(a, b, w)| format!("{} {w}", thousands(a - b)))
        .collect();
    parts.join(", ")
}

fn pct_f(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part * 100.0 / whole
    } else {
        0.0
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // non-negative, small
fn ns_of(seconds: f64) -> u64 {
    (seconds * 1e9).max(0.0) as u64
}

/// Makes each namespace's kernel resolve its neighbours before the UPF needs them (the UPF
/// resolves next hops through the kernel, so the first packets would otherwise wait or drop).
fn warm_neighbours() {
    for (ns, peers) in [
        (UPF_NS, &[GNB, DN][..]),
        (UE_NS, &[UPF_N3][..]),
        (DN_NS, &[UPF_N6][..]),
    ] {
        let _ = in_netns(ns, || {
            if let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") {
                for p in peers {
                    // The discard port: answered at most by an ICMP port unreachable.
                    let _ = s.send_to(&[], (*p, 9));
                }
            }
        });
    }
    let until = Instant::now() + Duration::from_secs(2);
    for (ns, p) in [
        (UPF_NS, GNB),
        (UPF_NS, DN),
        (UE_NS, UPF_N3),
        (DN_NS, UPF_N6),
    ] {
        let p = p.to_string();
        while Instant::now() < until {
            let out = ip(&["-n", ns, "neigh", "show", &p]).unwrap_or_default();
            if out.contains("lladdr") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_times() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(time(850), "850 ns");
        assert_eq!(time(12_340), "12.3 µs");
        assert_eq!(time(212_000), "212 µs");
        assert_eq!(time(1_300_000), "1.30 ms");
        assert_eq!(time(2_500_000_000), "2.50 s");
    }

    #[test]
    fn configs_parse() {
        for b in [
            DemoBackend::UdpTun,
            DemoBackend::AfPacket,
            DemoBackend::AfXdp,
        ] {
            let mut d = Demo::new().unwrap();
            d.backend = b;
            d.workers = 2;
            let c = crate::config::FileConfig::parse(&d.config()).unwrap();
            assert_eq!(c.workers.count, 2);
            assert_eq!(c.n3.addresses, vec![std::net::IpAddr::V4(UPF_N3)]);
            let _ = std::fs::remove_dir_all(&d.dir);
        }
    }

    #[test]
    fn row_fits_the_header() {
        let c = UpfCounters {
            tx_packets: [50_000, 50_000],
            tx_bytes: [17_000_000, 17_000_000],
            ..Default::default()
        };
        let r = row(
            20,
            20,
            Some((&c, 1.0)),
            1_000_000,
            999_999,
            Some(12),
            Some(212_000),
            Some(1_300_000),
        );
        assert_eq!(r.chars().count(), HEADER.chars().count(), "{r}\n{HEADER}");
    }
}
