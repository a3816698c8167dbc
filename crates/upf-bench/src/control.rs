//! `upf-bench control`: the control plane of the real `upf` binary (issue #6).
//!
//! 1. Procedures: for each window (PFCP requests in flight), a fresh `upf run` in a private
//!    network namespace (`cbPID`: N4 and N3 on the UDP backend on its loopback, no N6, so no
//!    port or device clashes with anything on the host), pinned with `taskset`; upf-loadgen's
//!    SMF emulator (on its own CPU) associates, then establishes `--sessions` S0-like sessions
//!    (uplink and downlink PDR and FAR, uplink F-TEID chosen by the UPF, a QER with an MBR, a
//!    volume URR), moves every session's downlink tunnel to another gNB (a handover: Update FAR
//!    with a new TEID and address) and deletes them all. Per procedure: rate, response time
//!    p50/p99/p99.9 (first transmission to response), the UPF's CPU per request (all its
//!    threads, schedstat) and the emulator's. Memory per session: the UPF's VmRSS after the
//!    establishments minus before, over the sessions (the daemon reports no memory of its own;
//!    its `upf_pfcp_sessions` gauge is read to check the count).
//! 2. Churn during traffic (`veth::churn`): the veth rig, uplink traffic at `--rate` on
//!    background sessions, a window without and one with `--churn` attach+detach per second;
//!    loss of both, the churn achieved, its response times.
//!
//! One JSON line on stdout; with `--out DIR` also `results.json`, `table.md` and PNG plots
//! (`upf-bench report DIR` re-renders them).

use crate::harness::{loadavg, machine, Build, Machine};
use crate::report::{line_plot, thousands};
use crate::veth::{self, churn};
use anyhow::{anyhow, bail, Context as _};
use clap::Parser;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_loadgen::smf::{Downlink, Qos, Session, SessionSpec, Smf, SmfConfig, SmfError, UeAddr};
use upf_netns::{in_netns, Netns};

pub const SCHEMA: u32 = 1;
/// Marks a control run's results.json (`report` tells it from a profile's).
pub const KIND: &str = "control";

pub(crate) const UE_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
pub(crate) const GNB: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Where the handover moves every session's downlink tunnel.
const GNB2: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
pub(crate) const DL_TEID_BASE: u32 = 0x0100_0001;
pub(crate) const QFI: u8 = 9;
/// S0's MBR (profiles/s0.toml): policing on every packet, never limiting.
const MBR_KBPS: u64 = 100_000_000;
/// Requests handed to the emulator at a time: the window drains at the end of a chunk and
/// the next starts with a burst of a whole window, so chunks are large (an interruption is
/// noticed between them).
const CHUNK: usize = 100_000;
/// The UPF's admin endpoint in its namespace (the rigs write it into its config).
pub(crate) const ADMIN: &str = "127.0.0.1:9464";

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct Args {
    /// Sessions established, modified and deleted per window.
    #[arg(long, default_value_t = 100_000)]
    pub sessions: u32,
    /// Requests in flight (the emulator's window), comma-separated; one fresh UPF each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub windows: Vec<usize>,
    /// Churn: attach + detach per second during traffic.
    #[arg(long, default_value_t = 1000)]
    pub churn: u64,
    /// Seconds of each traffic window (without churn, then with).
    #[arg(long, default_value_t = 10.0)]
    pub churn_seconds: f64,
    /// Seconds of the windows without churn, if not `--churn-seconds` (a long soak need not
    /// be bracketed by windows as long).
    #[arg(long)]
    pub churn_quiet_seconds: Option<f64>,
    /// Churn sessions whose uplink TEID (F-TEID CHOOSE) and UE address (CHV4) the UPF
    /// allocates, instead of SMF-given ones: exercises the UPF's allocators.
    #[arg(long)]
    pub upf_allocates: bool,
    /// The UPF's RSS is sampled every second of the churn window; its growth is reported from
    /// this many seconds in (past the 60 s TEID hold-off and the response cache's 12 s).
    #[arg(long, default_value_t = 120.0)]
    pub rss_warmup_seconds: f64,
    /// Sessions carrying the traffic during the churn windows.
    #[arg(long, default_value_t = 1000)]
    pub background: u32,
    /// Offered uplink packets/s during the churn windows (a rate the UPF forwards without
    /// loss on the machine, so that loss from churn shows).
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Inner packet size of the traffic, octets.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Data-path backend of the churn's UPF.
    #[arg(long, value_enum, default_value = "af-xdp")]
    pub backend: veth::Backend,
    /// UPF worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    #[command(flatten)]
    #[serde(flatten)]
    pub rig: veth::RigArgs,
    /// Skip the procedures (establish/modify/delete per window).
    #[arg(long)]
    pub skip_procedures: bool,
    /// Skip the churn during traffic.
    #[arg(long)]
    pub skip_churn: bool,
    /// Also write results.json, table.md and plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `--quick`'s control run: ~10 s, small numbers, af_packet (no AF_XDP needed).
pub fn quick_args(out: PathBuf) -> Args {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }
    let mut a = Cli::parse_from([
        "control",
        "--sessions",
        "200",
        "--windows",
        "1,16",
        "--churn",
        "200",
        "--churn-seconds",
        "0.5",
        "--background",
        "100",
        "--rate",
        "20000",
        "--backend",
        "af-packet",
    ])
    .a;
    a.out = Some(out);
    a
}

/// An S0-like session: UL + DL PDR and FAR, a QER with an MBR, a volume URR.
pub(crate) fn s0_spec(
    ue: Ipv4Addr,
    ul_f_teid: Option<(u32, Ipv4Addr)>,
    dl_teid: u32,
    gnb: Ipv4Addr,
    qfi: u8,
) -> SessionSpec {
    let mut s = SessionSpec::new(UeAddr::Static(ue), dl_teid, gnb);
    s.ul_f_teid = ul_f_teid;
    s.qfi = qfi;
    s.qos = Some(Qos {
        mbr_kbps: Some((MBR_KBPS, MBR_KBPS)),
        ..Qos::default()
    });
    s
}

/// Count and percentiles (nearest rank) of response times, in µs.
pub(crate) fn latency_json(v: &mut [Duration]) -> Value {
    v.sort_unstable();
    let us = |d: &Duration| d.as_nanos() as f64 / 1e3;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let p = |q: f64| {
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1;
        v.get(i).map(us)
    };
    json!({
        "count": v.len(),
        "p50": p(0.5),
        "p99": p(0.99),
        "p999": p(0.999),
        "max": v.last().map(us),
    })
}

pub use upf_netns::is_root;

pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// CPU time of every thread of `pid` (schedstat), nanoseconds.
fn process_cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let s = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// `upf run` with N4 and N3 on the loopback of its own namespace; stopped and the namespace
/// removed on drop (also on error and panic).
pub(crate) struct Daemon {
    /// Deleted (with what is in it) after the UPF stopped.
    pub ns: Netns,
    child: Option<Child>,
    /// The config and the log, removed with the namespace.
    pub dir: PathBuf,
    log: PathBuf,
    cfg: PathBuf,
    cores: Vec<usize>,
}

/// What a [`Daemon`] has beside N4 and N3.
#[derive(Debug, Default)]
pub(crate) struct Extras {
    /// N6 a TUN device (upf0), so that uplink packets reach sockets of the namespace.
    pub n6_tun: bool,
    /// `[state]` with the store in the daemon's directory.
    pub state: bool,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Daemon {
    fn start(exe: &Path, cores: &[usize], workers: usize, sessions: u32) -> anyhow::Result<Self> {
        Self::start_with(exe, cores, workers, sessions, &Extras::default())
    }

    pub(crate) fn start_with(
        exe: &Path,
        cores: &[usize],
        workers: usize,
        sessions: u32,
        x: &Extras,
    ) -> anyhow::Result<Self> {
        let ns = Netns::named(&format!("cb{}", std::process::id()))?;
        let dir = std::env::temp_dir().join(format!("upf-bench-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut d = Daemon {
            ns,
            child: None,
            log: dir.join("upf.log"),
            cfg: dir.join("upf.toml"),
            dir: dir.clone(),
            cores: cores.to_vec(),
        };
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let list: Vec<String> = cores.iter().map(ToString::to_string).collect();
        let n6 = if x.n6_tun {
            "[n6]\nbackend = \"tun\"\ninterface = \"upf0\"\n"
        } else {
            "[n6]\nbackend = \"none\"\n"
        };
        let state = if x.state {
            format!(
                "\n[state]\npath = \"{}\"\n",
                dir.join("state.redb").display()
            )
        } else {
            String::new()
        };
        let text = format!(
            "# Written by `upf-bench control`.\n[n4]\naddress = \"127.0.0.1\"\nheartbeat_interval_s = 3600\n\n\
             [n3]\nbackend = \"udp\"\naddresses = [\"127.0.0.1\"]\n\n{n6}\n\
             [workers]\ncount = {workers}\ncores = [{}]\n\n[limits]\nsessions = {}\n\n\
             [[ue_pool]]\nipv4 = \"10.128.0.0/9\"\n\n[admin]\naddress = \"{ADMIN}\"\n{state}",
            list.join(", "),
            u64::from(sessions).max(2_000_000),
        );
        std::fs::write(&d.cfg, text).with_context(|| d.cfg.display().to_string())?;
        d.spawn(exe)?;
        Ok(d)
    }

    /// `upf run` (again), its output appended to the log.
    pub(crate) fn spawn(&mut self, exe: &Path) -> anyhow::Result<()> {
        let list: Vec<String> = self.cores.iter().map(ToString::to_string).collect();
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| self.log.display().to_string())?;
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                self.ns.name(),
                "taskset",
                "-c",
                &list.join(","),
            ])
            .arg(exe)
            .arg("run")
            .arg("--config")
            .arg(&self.cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} run", exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, and waits for the process to be gone.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub(crate) fn alive(&mut self) -> anyhow::Result<()> {
        veth::upf_alive(&mut self.child, &self.log)
    }

    fn stop(&mut self) {
        veth::stop_upf(&mut self.child);
    }

    /// An emulator in the namespace, associated (retrying until the UPF listens).
    pub(crate) fn smf(&mut self, window: usize, stop: &AtomicBool) -> anyhow::Result<Smf> {
        let mut smf = in_netns(self.ns.name(), || {
            let mut c = SmfConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 8805)));
            c.bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            // A full window of 256 queues for well under a second even on a loaded VM; the
            // first association attempt may be retransmitted while the UPF starts.
            c.t1 = Duration::from_secs(1);
            c.n1 = 3;
            c.window = window;
            Smf::new(c)
        })?
        .context("SMF emulator")?;
        let until = Instant::now() + Duration::from_secs(20);
        // A request sent before the UPF listens waits for T1 (1 s) to be sent again.
        while !n4_bound(self.ns.name()) && Instant::now() < until {
            self.alive()?;
            std::thread::sleep(Duration::from_millis(10));
        }
        loop {
            self.alive()?;
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            match smf.associate() {
                Ok(_) => return Ok(smf),
                Err(e) if Instant::now() > until => {
                    bail!("PFCP association within 20 s: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The daemon's own session count (its `upf_pfcp_sessions` gauge).
    pub(crate) fn sessions_gauge(&self) -> Option<u64> {
        let m = admin_get(self.ns.name(), "/metrics").ok()?;
        samples(&m)
            .into_iter()
            .find_map(|(name, _, v)| (name == "upf_pfcp_sessions").then_some(v))
    }
}

/// `GET path` on the admin endpoint of the UPF in namespace `ns`: the body (of a 200).
pub(crate) fn admin_get(ns: &str, path: &str) -> anyhow::Result<String> {
    admin_request(ns, path, false)
}

/// `POST path` (an empty body) on the admin endpoint of the UPF in namespace `ns`: the body
/// (of a 200).
pub(crate) fn admin_post(ns: &str, path: &str) -> anyhow::Result<String> {
    admin_request(ns, path, true)
}

fn admin_request(ns: &str, path: &str, post: bool) -> anyhow::Result<String> {
    let url = format!("http://{ADMIN}{path}");
    // The connection is made from a thread inside the namespace, where ADMIN is the UPF's.
    in_netns(ns, || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let answer = if post {
            agent.post(&url).send_empty()
        } else {
            agent.get(&url).call()
        };
        answer
            .and_then(|mut r| r.body_mut().with_config().limit(u64::MAX).read_to_string())
            .with_context(|| format!("admin {url}"))
    })?
}

/// The samples of a `/metrics` text (prometheus-parse): name, labels, value as the integer
/// every UPF counter and gauge is (histograms left out).
pub(crate) fn samples(metrics: &str) -> Vec<(String, prometheus_parse::Labels, u64)> {
    use prometheus_parse::Value;
    let Ok(scrape) = prometheus_parse::Scrape::parse(metrics.lines().map(|l| Ok(l.to_owned())))
    else {
        return Vec::new();
    };
    scrape
        .samples
        .into_iter()
        .filter_map(|s| match s.value {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole, ≥ 0
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                Some((s.metric, s.labels, v as u64))
            }
            _ => None,
        })
        .collect()
}

/// Where the UPF lost packets, summed over workers and queues from its `/metrics`:
/// `dropped:REASON` (the pipeline's drop reasons), `rx_kernel_dropped` (the kernel could not
/// hand frames to a queue: ring full) and `tx_dropped`.
pub(crate) fn drop_counters(metrics: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (name, labels, v) in samples(metrics) {
        let k = match name.as_str() {
            "upf_packets_dropped_total" => match labels.get("reason") {
                Some(r) => format!("dropped:{r}"),
                None => continue,
            },
            "upf_io_rx_kernel_dropped_total" => "rx_kernel_dropped".into(),
            "upf_io_tx_dropped_total" => "tx_dropped".into(),
            _ => continue,
        };
        *m.entry(k).or_insert(0) += v;
    }
    m
}

/// `after − before`, the keys that grew only.
pub(crate) fn counters_delta(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*before.get(k).unwrap_or(&0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Whether a UDP socket of namespace `ns` is bound to the PFCP port (the UPF's N4).
fn n4_bound(ns: &str) -> bool {
    in_netns(ns, || std::fs::read_to_string("/proc/thread-self/net/udp"))
        .ok()
        .and_then(Result::ok)
        .is_some_and(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(":2265"))
            })
        })
}

/// Datagrams the kernel dropped at the UDP sockets of namespace `ns` (receive buffer full),
/// from the `drops` column of /proc/net/udp: the UPF's N4 socket (port 8805), and the others
/// (the emulator's). What turns into retransmissions and timeouts.
fn udp_drops(ns: &str) -> Option<(u64, u64)> {
    let t = in_netns(ns, || std::fs::read_to_string("/proc/thread-self/net/udp"))
        .ok()?
        .ok()?;
    let (mut upf, mut other) = (0, 0);
    for l in t.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(local), Some(drops)) = (f.get(1), f.last().and_then(|d| d.parse::<u64>().ok()))
        else {
            continue;
        };
        if local.ends_with(":2265") {
            upf += drops;
        } else {
            other += drops;
        }
    }
    Some((upf, other))
}

/// One procedure over many sessions.
#[derive(Debug, Default)]
pub(crate) struct Proc {
    ops: u64,
    pub ok: u64,
    failed: u64,
    first_error: Option<String>,
    pub seconds: f64,
    times: Vec<Duration>,
    upf_cpu_ns: u64,
    smf_cpu_ns: u64,
}

impl Proc {
    pub(crate) fn json(&mut self) -> Value {
        let n = self.ops.max(1) as f64;
        json!({
            "ops": self.ops,
            "ok": self.ok,
            "failed": self.failed,
            "first_error": self.first_error,
            "seconds": self.seconds,
            "per_s": self.ok as f64 / self.seconds.max(1e-9),
            "latency_us": latency_json(&mut self.times),
            "upf_cpu_us_per_op": self.upf_cpu_ns as f64 / 1e3 / n,
            "smf_cpu_us_per_op": self.smf_cpu_ns as f64 / 1e3 / n,
        })
    }
}

/// Runs `call` over `items` a chunk at a time; the successes, and what it took.
pub(crate) fn timed<T, R>(
    smf: &mut Smf,
    upf_pid: u32,
    items: &[T],
    stop: &AtomicBool,
    mut call: impl FnMut(&mut Smf, &[T]) -> Vec<Result<R, SmfError>>,
) -> anyhow::Result<(Proc, Vec<R>)> {
    let mut p = Proc::default();
    let mut out = Vec::with_capacity(items.len());
    smf.record_response_times(true);
    let (cpu0, me0, t0) = (process_cpu_ns(upf_pid), thread_cpu_ns(), Instant::now());
    for chunk in items.chunks(CHUNK) {
        for r in call(smf, chunk) {
            p.ops += 1;
            match r {
                Ok(x) => {
                    p.ok += 1;
                    out.push(x);
                }
                Err(e) => {
                    p.failed += 1;
                    p.first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
    }
    p.seconds = t0.elapsed().as_secs_f64();
    p.upf_cpu_ns = process_cpu_ns(upf_pid).saturating_sub(cpu0);
    p.smf_cpu_ns = thread_cpu_ns().saturating_sub(me0);
    p.times = smf.take_response_times();
    smf.record_response_times(false);
    Ok((p, out))
}

/// Establish, hand over and delete `a.sessions` sessions with `window` requests in flight,
/// on a fresh UPF.
fn procedures(
    a: &Args,
    window: usize,
    exe: &Path,
    cores: &[usize],
    stop: &AtomicBool,
) -> anyhow::Result<Value> {
    let mut d = Daemon::start(exe, cores, a.workers, a.sessions)?;
    let mut smf = d.smf(window, stop)?;
    let pid = d.pid();
    let rss0 = rss_bytes(pid);
    let specs: Vec<SessionSpec> = (0..a.sessions)
        .map(|i| {
            let ue = Ipv4Addr::from(u32::from(UE_BASE) + i);
            s0_spec(ue, None, DL_TEID_BASE + i, GNB, QFI)
        })
        .collect();
    let (mut est, sessions) = timed(&mut smf, pid, &specs, stop, Smf::establish_many)?;
    d.alive()?;
    let rss1 = rss_bytes(pid);
    let gauge_established = d.sessions_gauge();
    // The handover: every downlink tunnel to another gNB with a new TEID.
    let moved: Vec<Session> = sessions
        .iter()
        .map(|s| Session {
            dl_teid: s.dl_teid ^ 0x0080_0000,
            gnb: GNB2,
            ..*s
        })
        .collect();
    let (mut modi, _) = timed(&mut smf, pid, &moved, stop, |smf, c| {
        smf.set_downlink_many(c, Downlink::Forward)
    })?;
    let (mut del, _) = timed(&mut smf, pid, &moved, stop, Smf::delete_many)?;
    d.alive()?;
    let rss2 = rss_bytes(pid);
    let gauge_deleted = d.sessions_gauge();
    let st = smf.stats();
    // Both sockets were made for this window: their counts are its own.
    let drops = udp_drops(d.ns.name());
    drop(smf);
    d.stop();
    let per_session = match (rss0, rss1) {
        (Some(b), Some(e)) if est.ok > 0 => Some((e as f64 - b as f64) / est.ok as f64),
        _ => None,
    };
    eprintln!(
        "  window {window:>4}: {:>8.0} establishments/s, {:>8.0} modifications/s, {:>8.0} deletions/s; \
         p99 {:.0}/{:.0}/{:.0} µs; RSS {} B/session",
        est.ok as f64 / est.seconds.max(1e-9),
        modi.ok as f64 / modi.seconds.max(1e-9),
        del.ok as f64 / del.seconds.max(1e-9),
        p99(&est.times),
        p99(&modi.times),
        p99(&del.times),
        per_session.map_or("?".into(), |v| format!("{v:.0}")),
    );
    Ok(json!({
        "window": window,
        "sessions": a.sessions,
        "establish": est.json(),
        "modify": modi.json(),
        "delete": del.json(),
        "rss_before_bytes": rss0,
        "rss_established_bytes": rss1,
        "rss_deleted_bytes": rss2,
        "rss_per_session_bytes": per_session,
        "upf_sessions_established": gauge_established,
        "upf_sessions_after_delete": gauge_deleted,
        "smf_retransmissions": st.retransmissions,
        "smf_timeouts": st.timeouts,
        "upf_n4_socket_drops": drops.map(|d| d.0),
        "smf_socket_drops": drops.map(|d| d.1),
    }))
}

fn p99(v: &[Duration]) -> f64 {
    let mut v = v.to_vec();
    latency_json(&mut v)["p99"].as_f64().unwrap_or(0.0)
}

/// Both parts; one JSON object.
pub fn measure(a: &Args) -> anyhow::Result<Value> {
    if !is_root() {
        bail!("control: needs root (network namespaces, and BPF for the churn)");
    }
    if a.workers == 0 || (!a.skip_procedures && (a.sessions == 0 || a.windows.is_empty())) {
        bail!("control: --workers, --sessions and --windows must be given");
    }
    let exe = a.rig.upf_exe()?;
    let stop = veth::stop_flag();
    let stop = &*stop;
    let cores = a.rig.upf_cpus();
    let load_before = loadavg();
    let mut procs = Vec::new();
    if !a.skip_procedures {
        eprintln!(
            "upf-bench control: {} sessions per window, windows {:?}, UPF on CPUs {cores:?}, emulator on CPU {}",
            a.sessions, a.windows, a.rig.gen_cpu
        );
        // The emulator on its own CPU, the UPF on the others.
        procs = std::thread::scope(|s| {
            s.spawn(|| {
                let _ = core_affinity::set_for_current(core_affinity::CoreId { id: a.rig.gen_cpu });
                a.windows
                    .iter()
                    .map(|&w| procedures(a, w, &exe, &cores, stop))
                    .collect::<Result<Vec<_>, _>>()
            })
            .join()
            .map_err(|_| anyhow!("the procedures' thread panicked"))
        })??;
    }
    let churn = if a.skip_churn {
        None
    } else {
        Some(churn::run(
            &churn::Churn {
                rate: a.churn,
                seconds: a.churn_seconds,
                quiet_seconds: a.churn_quiet_seconds.unwrap_or(a.churn_seconds),
                upf_allocates: a.upf_allocates,
                rss_warmup: a.rss_warmup_seconds,
                background: a.background,
                traffic_pps: a.rate,
                size: a.size,
                backend: a.backend,
                workers: a.workers,
                // The same binary: `upf_exe` resolves the same `--upf` (or its default).
                rig: a.rig.clone(),
            },
            stop,
        )?)
    };
    let memory = procs
        .first()
        .and_then(|p| p["rss_per_session_bytes"].as_f64());
    Ok(json!({
        "topology": "control",
        "netns_prefix": format!("cb{}", std::process::id()),
        "sessions": a.sessions,
        "windows": if a.skip_procedures { Vec::new() } else { a.windows.clone() },
        "session_shape": "S0-like: UL + DL PDR and FAR (UL F-TEID chosen by the UPF, static UE IPv4), one QER with MBR 100 Gbit/s each way on both PDRs, one volume URR",
        "modification": "handover: Update FAR (downlink) with a new TEID and gNB address",
        "upf_cores": cores,
        "smf_cpu": a.rig.gen_cpu,
        "workers": a.workers,
        "procedures": procs,
        "memory_per_session_bytes": memory,
        "churn": churn,
        "load_before": load_before,
        "load_after": loadavg(),
        "notes": [
            "procedures: a fresh `upf run` per window in its own namespace, N4 and N3 (UDP backend) on its loopback, no N6; the SMF emulator (one thread, blocking UDP) pinned to smf_cpu",
            "response time: first transmission to response at the emulator; with a window of W in flight it includes queueing behind the W-1 others, and a retransmission (T1 = 1 s) when a datagram was dropped (upf_n4_socket_drops, smf_socket_drops: a receive buffer was full)",
            "memory per session: VmRSS after the establishments minus before, over sessions established (first window's UPF); the daemon exposes no memory figure of its own",
            "churn: veth topology (see `veth`), uplink traffic on background sessions; windows without churn, with, and without again; each tick (10 ms) establishes what is due and deletes the previous tick's batch; loss_without_churn is over both windows without",
            "churn.upf_allocates: the churn sessions' uplink TEID (F-TEID CHOOSE) and UE address (CHV4) are the UPF's to allocate; otherwise given by the emulator",
            "churn.rss: the UPF's VmRSS every second of the window with churn; end_vs_warmup = RSS at the end / RSS at warmup_seconds - 1",
        ],
    }))
}

/// `upf-bench control`: one JSON line; with `--out`, results.json, table.md and plots.
pub fn run(a: &Args, command: &[String]) -> anyhow::Result<Value> {
    let mut m = machine();
    let v = measure(a)?;
    println!("{v}");
    if let Some(dir) = &a.out {
        m.load_after = loadavg();
        write(dir, a, command, &m, &v)?;
    }
    Ok(v)
}

#[derive(Serialize)]
struct Results<'a> {
    schema: u32,
    kind: &'static str,
    created_unix: u64,
    command: &'a [String],
    machine: &'a Machine,
    build: Build,
    config: &'a Args,
    result: &'a Value,
}

fn write(dir: &Path, a: &Args, command: &[String], m: &Machine, v: &Value) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let r = Results {
        schema: SCHEMA,
        kind: KIND,
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command,
        machine: m,
        build: Build::this(),
        config: a,
        result: v,
    };
    let r = serde_json::to_value(&r)?;
    let f = dir.join("results.json");
    let text = serde_json::to_string_pretty(&r)?;
    std::fs::write(&f, text).with_context(|| f.display().to_string())?;
    render(&r, dir)?;
    let plots = if a.skip_procedures {
        String::new()
    } else {
        format!(", {}", PLOTS.join(", "))
    };
    eprintln!("written: {} (+ table.md{plots})", f.display());
    Ok(())
}

/// Whether `results` is a control run's.
pub fn is_control(results: &Value) -> bool {
    results["kind"] == KIND
}

const PLOTS: [&str; 2] = ["control-rate.png", "control-latency.png"];

/// table.md and the plots from a results.json value.
pub fn render(r: &Value, dir: &Path) -> anyhow::Result<()> {
    let t = table(r);
    std::fs::write(dir.join("table.md"), &t).with_context(|| dir.display().to_string())?;
    let procs = r["result"]["procedures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if procs.is_empty() {
        return Ok(());
    }
    let names = [
        ("establish", "establishment"),
        ("modify", "modification"),
        ("delete", "deletion"),
    ];
    let series =
        |f: &dyn Fn(&Value) -> Option<f64>, suffix: &str| -> Vec<(String, Vec<(f64, f64)>)> {
            names
                .iter()
                .map(|(k, name)| {
                    let pts = procs
                        .iter()
                        .filter_map(|p| Some((p["window"].as_f64()?, f(&p[*k])?)))
                        .collect();
                    (format!("{name}{suffix}"), pts)
                })
                .collect()
        };
    let n = r["result"]["sessions"].as_u64().unwrap_or(0);
    line_plot(
        &dir.join(PLOTS[0]),
        &format!(
            "PFCP procedures/s vs requests in flight ({} sessions)",
            thousands(n as f64)
        ),
        "requests in flight (window)",
        "procedures per second",
        &series(&|p| p["per_s"].as_f64(), "s/s"),
        true,
    )?;
    let mut lat = series(&|p| Some(p["latency_us"]["p50"].as_f64()? / 1e3), " p50");
    lat.extend(series(
        &|p| Some(p["latency_us"]["p99"].as_f64()? / 1e3),
        " p99",
    ));
    line_plot(
        &dir.join(PLOTS[1]),
        "PFCP response time vs requests in flight",
        "requests in flight (window)",
        "response time, ms",
        &lat,
        true,
    )
}

fn f(v: &Value, digits: usize) -> String {
    v.as_f64().map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// The Markdown table of a control run.
pub fn table(r: &Value) -> String {
    let mut s = String::new();
    let (m, b, v) = (&r["machine"], &r["build"], &r["result"]);
    let load = |k: &str| f(&m[k][0], 2);
    let _ = writeln!(
        s,
        "### Control plane: `upf run` over N4 (upf-bench control)\n\n\
         Machine: {} × {}, Linux {}; build {}; load average {} before, {} after.\n",
        m["cpu_model"].as_str().unwrap_or("?"),
        m["cpus"],
        m["kernel"].as_str().unwrap_or("?"),
        b["commit"]
            .as_str()
            .map_or("?".into(), |c| c.chars().take(12).collect::<String>()),
        load("load_before"),
        load("load_after"),
    );
    let procs = v["procedures"].as_array().cloned().unwrap_or_default();
    if !procs.is_empty() {
        let _ = writeln!(
            s,
            "{} sessions per window ({}); {}; UPF on CPUs {}, emulator on CPU {}.\n",
            thousands(v["sessions"].as_f64().unwrap_or(0.0)),
            v["session_shape"].as_str().unwrap_or(""),
            v["modification"].as_str().unwrap_or(""),
            v["upf_cores"],
            v["smf_cpu"],
        );
        s.push_str(
            "| window | establish/s | p50 / p99 ms | modify/s | p50 / p99 ms | delete/s | p50 / p99 ms | UPF CPU µs per est. / mod. / del. | RSS/session | retransmitted (UPF N4 socket drops) | failed |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in &procs {
            let rate = |k: &str| thousands(p[k]["per_s"].as_f64().unwrap_or(0.0));
            let lat = |k: &str| {
                let ms = |q: &str| {
                    p[k]["latency_us"][q]
                        .as_f64()
                        .map_or("–".into(), |x| format!("{:.2}", x / 1e3))
                };
                format!("{} / {}", ms("p50"), ms("p99"))
            };
            let failed: u64 = ["establish", "modify", "delete"]
                .iter()
                .map(|k| p[*k]["failed"].as_u64().unwrap_or(0))
                .sum();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {} ({}) | {failed} |",
                p["window"],
                rate("establish"),
                lat("establish"),
                rate("modify"),
                lat("modify"),
                rate("delete"),
                lat("delete"),
                f(&p["establish"]["upf_cpu_us_per_op"], 1),
                f(&p["modify"]["upf_cpu_us_per_op"], 1),
                f(&p["delete"]["upf_cpu_us_per_op"], 1),
                p["rss_per_session_bytes"]
                    .as_f64()
                    .map_or("–".into(), |x| format!("{:.1} kB", x / 1e3)),
                p["smf_retransmissions"],
                p["upf_n4_socket_drops"],
            );
        }
        s.push('\n');
    }
    let c = &v["churn"];
    if c.is_object() {
        let _ = writeln!(
            s,
            "Churn: {}/s attach + detach for {} s beside {} background sessions carrying {} pps of {} B uplink ({}, {} worker(s)).\n\n\
             | window | offered pps | delivered pps | lost | loss | UPF CPU (cores) | where the UPF counted losses |\n|---|---:|---:|---:|---:|---:|---|",
            c["target_per_s"],
            c["seconds"],
            c["background_sessions"],
            thousands(c["traffic_pps"].as_f64().unwrap_or(0.0)),
            c["size"],
            c["backend"].as_str().unwrap_or("?"),
            c["workers"],
        );
        for (name, k) in [
            ("without churn", "without_churn"),
            ("with churn", "with_churn"),
            ("without churn, after", "without_churn_after"),
        ] {
            let w = &c[k];
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {:.4} % | {} | {} |",
                thousands(w["offered_pps"].as_f64().unwrap_or(0.0)),
                thousands(w["delivered_pps"].as_f64().unwrap_or(0.0)),
                w["lost"],
                w["loss"].as_f64().unwrap_or(0.0) * 100.0,
                f(&w["upf_cpu_cores"], 2),
                w["upf_drops"]
                    .as_object()
                    .filter(|m| !m.is_empty())
                    .map_or("none".into(), |m| m
                        .iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")),
            );
        }
        let ms = |k: &str, q: &str| {
            c[k][q]
                .as_f64()
                .map_or("–".into(), |x| format!("{:.2}", x / 1e3))
        };
        let _ = writeln!(
            s,
            "\nAchieved: {} attach/s, {} detach/s, {} failed; establishment p50 / p99 {} / {} ms, \
             deletion {} / {} ms; UPF CPU {} µs and emulator {} µs per churn procedure.\n",
            f(&c["attach_per_s"], 0),
            f(&c["detach_per_s"], 0),
            c["failed"],
            ms("establish_latency_us", "p50"),
            ms("establish_latency_us", "p99"),
            ms("delete_latency_us", "p50"),
            ms("delete_latency_us", "p99"),
            f(&c["upf_extra_cpu_us_per_op"], 1),
            f(&c["smf_cpu_us_per_op"], 1),
        );
        if c["upf_allocates"].as_bool() == Some(true) {
            s.push_str("Churn sessions' uplink TEIDs (CHOOSE) and UE addresses (CHV4) allocated by the UPF.\n\n");
        }
        let r = &c["rss"];
        let mb = |k: &str| {
            r[k].as_f64()
                .map_or("–".into(), |x| format!("{:.1}", x / 1e6))
        };
        if r.is_object() {
            let _ = writeln!(
                s,
                "UPF RSS during the churn: {} MB at its start, {} MB after {} s of warm-up, {} MB at \
                 the end ({} s), at most {} MB; end vs. after warm-up {}.\n",
                mb("start_bytes"),
                mb("after_warmup_bytes"),
                r["warmup_seconds"],
                mb("end_bytes"),
                f(&r["end_seconds"], 0),
                mb("max_bytes"),
                r["end_vs_warmup"]
                    .as_f64()
                    .map_or("–".into(), |x| format!("{:+.2} %", x * 100.0)),
            );
        }
    }
    s
}

/// `upf-bench report` for a control run's results.json.
pub fn report_file(path: &Path) -> anyhow::Result<Option<String>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let v: Value = serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    if !is_control(&v) {
        return Ok(None);
    }
    render(&v, path.parent().unwrap_or(Path::new(".")))?;
    Ok(Some(table(&v)))
}

/// The counts a run must agree with whatever the machine's speed (`--quick` and the tests).
pub fn check(a: &Args, v: &Value) -> anyhow::Result<()> {
    let mut bad = Vec::new();
    for p in v["procedures"].as_array().into_iter().flatten() {
        let w = &p["window"];
        for k in ["establish", "modify", "delete"] {
            if p[k]["ok"].as_u64() != Some(u64::from(a.sessions)) {
                bad.push(format!(
                    "window {w}: {k}: {} of {} ({})",
                    p[k]["ok"], a.sessions, p[k]["first_error"]
                ));
            }
            if p[k]["latency_us"]["count"].as_u64() != p[k]["ops"].as_u64() {
                bad.push(format!(
                    "window {w}: {k}: response times {} for {} requests",
                    p[k]["latency_us"]["count"], p[k]["ops"]
                ));
            }
        }
        if p["upf_sessions_established"].as_u64() != Some(u64::from(a.sessions)) {
            bad.push(format!(
                "window {w}: the UPF says {} sessions",
                p["upf_sessions_established"]
            ));
        }
        if p["upf_sessions_after_delete"].as_u64() != Some(0) {
            bad.push(format!(
                "window {w}: the UPF says {} sessions after deletion",
                p["upf_sessions_after_delete"]
            ));
        }
    }
    let c = &v["churn"];
    if c.is_object() {
        for k in ["attached", "detached"] {
            if c[k].as_u64().unwrap_or(0) == 0 {
                bad.push(format!("churn: nothing {k}"));
            }
        }
        if c["failed"].as_u64() != Some(0) {
            bad.push(format!(
                "churn: {} failed ({})",
                c["failed"], c["first_error"]
            ));
        }
        for k in ["without_churn", "with_churn", "without_churn_after"] {
            if c[k]["frames"].as_u64().unwrap_or(0) == 0 || !c[k]["loss"].is_f64() {
                bad.push(format!("churn: {k}: no traffic measured"));
            }
        }
        if c["sessions_left_at_smf"].as_u64() != c["background_sessions"].as_u64() {
            bad.push(format!(
                "churn: {} sessions left, {} background",
                c["sessions_left_at_smf"], c["background_sessions"]
            ));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("control: {}", bad.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<Duration> = (1..=1000).rev().map(Duration::from_micros).collect();
        let j = latency_json(&mut v);
        assert_eq!(j["count"], 1000);
        assert_eq!(j["p50"].as_f64(), Some(500.0));
        assert_eq!(j["p99"].as_f64(), Some(990.0));
        assert_eq!(j["p999"].as_f64(), Some(999.0));
        assert_eq!(j["max"].as_f64(), Some(1000.0));
        let j = latency_json(&mut [Duration::from_micros(7)]);
        assert_eq!(
            (j["p50"].as_f64(), j["p99"].as_f64()),
            (Some(7.0), Some(7.0))
        );
        assert!(latency_json(&mut []).get("p50").is_some_and(Value::is_null));
    }

    fn proc_json(ok: u64) -> Value {
        json!({"ops": 10, "ok": ok, "failed": 10 - ok, "first_error": null,
               "latency_us": {"count": 10}})
    }

    #[test]
    fn check_catches_inconsistent_counts() {
        let mut a = quick_args(PathBuf::from("/nonexistent"));
        a.sessions = 10;
        let good = json!({
            "procedures": [{"window": 1, "establish": proc_json(10), "modify": proc_json(10),
                            "delete": proc_json(10), "upf_sessions_established": 10,
                            "upf_sessions_after_delete": 0}],
            "churn": {"attached": 5, "detached": 4, "failed": 0, "background_sessions": 3,
                      "sessions_left_at_smf": 3,
                      "without_churn": {"frames": 9, "loss": 0.0},
                      "with_churn": {"frames": 9, "loss": 0.5},
                      "without_churn_after": {"frames": 9, "loss": 0.0}},
        });
        check(&a, &good).unwrap();
        let mut bad = good.clone();
        bad["procedures"][0]["modify"] = proc_json(9);
        assert!(check(&a, &bad).unwrap_err().to_string().contains("modify"));
        let mut bad = good.clone();
        bad["procedures"][0]["upf_sessions_after_delete"] = json!(1);
        assert!(check(&a, &bad).is_err());
        let mut bad = good.clone();
        bad["churn"]["detached"] = json!(0);
        assert!(check(&a, &bad)
            .unwrap_err()
            .to_string()
            .contains("detached"));
        let mut bad = good;
        bad["churn"]["with_churn"]["frames"] = json!(0);
        assert!(check(&a, &bad).is_err());
    }

    #[test]
    fn drops_from_metrics() {
        // As the UPF writes it (prometheus-client): counter families named without `_total`.
        let m = "# HELP upf_packets_dropped x\n\
                 # TYPE upf_packets_dropped counter\n\
                 upf_packets_dropped_total{worker=\"0\",reason=\"no_pdr\"} 3\n\
                 upf_packets_dropped_total{worker=\"1\",reason=\"no_pdr\"} 4\n\
                 upf_packets_dropped_total{worker=\"0\",reason=\"qer_gate\"} 0\n\
                 upf_io_rx_kernel_dropped_total{worker=\"0\",port=\"n3\",queue=\"0\"} 10\n\
                 upf_io_tx_dropped_total{worker=\"0\"} 1\n\
                 upf_pfcp_sessions 5\n";
        let before = drop_counters(m);
        assert_eq!(before["dropped:no_pdr"], 7);
        assert_eq!(before["rx_kernel_dropped"], 10);
        assert_eq!(before["tx_dropped"], 1);
        assert!(!before.contains_key("upf_pfcp_sessions"));
        let after = drop_counters(&m.replace("} 10", "} 15"));
        let d = counters_delta(&after, &before);
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            [("rx_kernel_dropped".to_string(), 5)]
        );
    }

    #[test]
    fn table_of_a_run() {
        let r = json!({
            "kind": KIND,
            "machine": {"cpu_model": "CPU", "cpus": 2, "kernel": "6.1", "load_before": [0.5, 0.0, 0.0],
                        "load_after": [0.75, 0.0, 0.0]},
            "build": {"commit": "0123456789abcdef"},
            "result": {"sessions": 100000, "session_shape": "S", "modification": "M",
                       "upf_cores": [1], "smf_cpu": 0,
                       "procedures": [{"window": 16, "rss_per_session_bytes": 6500.0,
                           "smf_retransmissions": 3, "upf_n4_socket_drops": 2,
                           "establish": {"per_s": 20000.0, "failed": 0,
                                         "latency_us": {"p50": 500.0, "p99": 1500.0},
                                         "upf_cpu_us_per_op": 30.0},
                           "modify": {"per_s": 30000.0, "failed": 1, "latency_us": {}},
                           "delete": {"per_s": 40000.0, "failed": 0, "latency_us": {}}}]}
        });
        assert!(is_control(&r));
        let t = table(&r);
        assert!(t.contains("load average 0.50 before, 0.75 after"), "{t}");
        assert!(
            t.contains("| 16 | 20,000 | 0.50 / 1.50 | 30,000 | – / – | 40,000 |"),
            "{t}"
        );
        assert!(t.contains("| 6.5 kB | 3 (2) | 1 |"), "{t}");
        assert!(!t.contains("Churn"), "{t}");
    }
}
