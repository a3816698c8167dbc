//! The veth topology: three network namespaces, the real `upf` binary in the middle, a
//! BPF_PROG_RUN live-frames generator on one side and an XDP counting sink on the other.
//!
//! ```text
//!  netns vbPID-ue                  netns vbPID-upf                          netns vbPID-dn
//!  n3-gnb 192.168.3.2 ── veth ── n3-upf 192.168.3.1  upf run  n6-upf 192.168.6.1 ── veth ── n6-dn 192.168.6.2
//!                                 N4 and the SMF emulator on 127.0.0.1
//! ```
//!
//! Uplink: the generator XDP_TXes G-PDUs out of `n3-gnb`, the counter on `n6-dn` counts the
//! inner packets; downlink: plain packets to the UEs out of `n6-dn`, counted as G-PDUs on
//! `n3-gnb`. In one
//! run, each on the same namespaces and CPUs:
//! 1. the generator's ceiling: the same frames into an XDP program on the UPF's ingress veth
//!    that counts and drops them;
//! 2. the baseline: Linux forwarding the same inner packets through the upf namespace (UPF not
//!    running, `ip_forward=1`, an XDP_PASS program on the ingress veth so it accepts the
//!    generator's redirected frames), GTP-less both ways;
//! 3. the UPF: `upf run` on its cores with a generated config, N sessions established by
//!    upf-loadgen's SMF emulator; delivered rate, loss, and the UPF's CPU time per delivered
//!    packet (its threads' schedstat), meaningful even when the generator is the limit.
//!
//! Namespaces are named after this process and removed on exit, on error and on panic (the
//! XDP programs are BPF links owned by this process: they go with it, and with the veths).

use anyhow::{bail, Context as _};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_loadgen::smf::{HighPriority, Qos, Session, SessionSpec, Smf, SmfConfig, UeAddr};
use upf_loadgen::xdpgen::{self, Count, Counter, Fixed, GenStats, Generator, Template};
use upf_loadgen::xdpgen::{LatencyConfig, Mark};
use upf_netns::{in_netns, ip};
// The admin endpoint, on the upf namespace's loopback (`upf show`, `upf engine set`).
use crate::control::ADMIN;

pub(crate) mod churn;
mod swap;

use upf_netns::topology::{Layout, Topology, DN, N3_GNB, N3_UPF, N6_DN, N6_UPF};
pub(crate) use upf_netns::topology::{GNB, UPF_N3};
/// UE i is UE_BASE + i (up to 8M sessions inside the pool).
const UE_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
const UE_POOL: &str = "10.128.0.0/9";
const UL_TEID_BASE: u32 = 0x0000_1000;
const DL_TEID_BASE: u32 = 0x0100_0001;
const QFI: u8 = 9;
/// The high-priority QoS flow: QFI uplink (and downlink, marked by its QER), DSCP downlink.
const QFI_HIGH: u8 = 1;
const DSCP_HIGH: u8 = 46;
const COUNTED_PORTS: [u16; 2] = [xdpgen::GTPU_PORT, xdpgen::DST_PORT];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    AfPacket,
    AfXdp,
}

/// The UPF's engine (`engine` in its config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The worker threads.
    User,
    /// The XDP engine in front of the workers (needs the af-xdp backend).
    Xdp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Uplink,
    Downlink,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The profile the point comes from (recorded in the JSON line only: the veth topology
    /// establishes default sessions: UL + DL PDR/FAR, a QER without MBR, a URR).
    #[arg(long, default_value = "s0")]
    pub profile: String,
    /// Sessions (UEs); frames go round them in order.
    #[arg(long, default_value_t = 1000)]
    pub sessions: u32,
    /// Inner IP packet size, octets.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Seconds measured (baseline and UPF each).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of the generator's ceiling measurement (default: min(seconds, 2)).
    #[arg(long)]
    pub ceiling_seconds: Option<f64>,
    #[arg(long, value_enum, default_value = "af-xdp")]
    pub backend: Backend,
    /// The UPF's engine.
    #[arg(long, value_enum, default_value = "user")]
    pub engine: Engine,
    /// UPF worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Uplink ACL rules the UPF loads (the profiles' kind: denies no packet of the bench, so
    /// every uplink packet is checked against all of them).
    #[arg(long, default_value_t = 0)]
    pub acl_rules: usize,
    /// The ACL rules' destinations in the DN's /8 (none holding the DN): every uplink
    /// packet probes the tables instead of passing by the /16s no rule reaches.
    #[arg(long)]
    pub acl_near_dn: bool,
    #[arg(long, value_enum, default_value = "uplink")]
    pub direction: Direction,
    /// Offered packets/s (0: as fast as the generator goes).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    #[command(flatten)]
    pub rig: RigArgs,
    /// Skip the Linux forwarding baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Zero-loss throughput: an RFC 2544-style binary search over the offered rate, for the
    /// UPF and for the Linux baseline, between 0 and the generator's ceiling.
    #[arg(long)]
    pub search: bool,
    /// Seconds of one search trial.
    #[arg(long, default_value_t = 2.0)]
    pub trial_seconds: f64,
    /// The search's upper bound, pps (default: the generator's ceiling measured first).
    #[arg(long)]
    pub search_top: Option<u64>,
    /// Most trials of one search.
    #[arg(long, default_value_t = 10)]
    pub max_trials: u32,
    /// A search stops when its bracket is narrower than this fraction of its top.
    #[arg(long, default_value_t = 0.02)]
    pub resolution: f64,
    /// Latency and jitter per class at --latency-loads.
    #[arg(long)]
    pub latency: bool,
    /// Loads of the latency runs, % of the zero-loss rate (with --search) or of --rate.
    #[arg(long, value_delimiter = ',', default_value = "10,50,80,95")]
    pub latency_loads: Vec<f64>,
    /// Seconds of one latency run (default: --trial-seconds).
    #[arg(long)]
    pub latency_seconds: Option<f64>,
    /// Share of the UPF's frames that are high priority (uplink QFI 1, downlink DSCP 46; the
    /// rest QFI 9 / DSCP 0); 0: one QoS flow per session.
    #[arg(long, default_value_t = 0.1)]
    pub high_share: f64,
    /// The UPF's workers never sleep (`workers.busy_poll`): no wake-up latency at low load.
    #[arg(long)]
    pub busy_poll: bool,
    /// The workers' priority mode (`[priority] mode`: fifo, strict, weighted, load-aware);
    /// with --latency, one JSON line per load as well (issue #28's fields).
    #[arg(long)]
    pub priority: Option<String>,
    /// `[priority] max_rbs` (strict, load-aware).
    #[arg(long, default_value_t = 32)]
    pub max_rbs: usize,
    /// Downlink only: this share of the sessions has its downlink FAR set to buffer
    /// (BUFF|NOCP, by the SMF emulator's Session Modification) while the generator keeps
    /// sending to every session; measures the other sessions' delivered packets per second
    /// of UPF CPU with them buffering and with none buffering, alternated in one run
    /// (no ceiling, baseline, search or latency); one JSON line with `ratio`.
    #[arg(long)]
    pub buffering_share: Option<f64>,
    /// With --buffering-share: rounds of each (alternated); the figures are medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Online engine swaps (needs --engine xdp and --rate): after the sessions and the
    /// warm-up, --seconds of traffic at --rate without swaps, then --seconds (longer if the
    /// swaps take it) during which the bench moves every session to the other engine this
    /// many times (user, xdp, user, …: `upf engine set` on the UPF's admin endpoint, each
    /// awaited until done); per window the frames lost and the longest gap between two
    /// arrivals at the sink; one JSON line (no ceiling, baseline, search or latency).
    #[arg(long)]
    pub swaps: Option<u32>,
}

/// Where the rig's parts run: what `veth` and `control` both take.
#[derive(clap::Args, Debug, Clone, Default, serde::Serialize)]
pub struct RigArgs {
    /// The generator's CPU (`control`: also the SMF emulator's in the procedures).
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: usize,
    /// Nice value of the generator thread and the UPF (0: inherited). On a shared machine a
    /// negative one keeps other jobs from taking the generator's and the UPF's CPUs.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub nice: i32,
    /// The UPF's CPUs, comma-separated (default: every CPU but the generator's).
    #[arg(long, value_delimiter = ',')]
    pub upf_cores: Vec<usize>,
    /// The `upf` binary (default: `upf` next to this executable).
    #[arg(long)]
    pub upf: Option<PathBuf>,
}

impl RigArgs {
    /// The UPF's CPUs: `upf_cores` if given, else every CPU but the generator's (or the
    /// generator's own on a one-CPU host).
    pub fn upf_cpus(&self) -> Vec<usize> {
        if !self.upf_cores.is_empty() {
            return self.upf_cores.clone();
        }
        let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let v: Vec<usize> = (0..ncpu).filter(|c| *c != self.gen_cpu).collect();
        if v.is_empty() {
            vec![self.gen_cpu]
        } else {
            v
        }
    }

    /// The `upf` binary to run.
    pub fn upf_exe(&self) -> anyhow::Result<PathBuf> {
        let p = match &self.upf {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name("upf"),
        };
        if !p.exists() {
            bail!(
                "{}: no upf binary (build it: cargo build --release -p upf; or give --upf PATH)",
                p.display()
            );
        }
        Ok(p)
    }
}

fn mac(ns: &str, dev: &str) -> anyhow::Result<[u8; 6]> {
    let out = ip(&["-n", ns, "-o", "link", "show", dev])?;
    let s = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .with_context(|| format!("{ns}/{dev}: no MAC address in `ip link`"))?;
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(s.split(':')) {
        *d = u8::from_str_radix(p, 16).with_context(|| format!("{ns}/{dev}: MAC {s}"))?;
    }
    Ok(m)
}

/// Total CPU time of every thread of `pid` (schedstat: nanoseconds on a CPU), by thread name.
fn task_cpu(pid: u32) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let dir = format!("/proc/{pid}/task");
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = e.path();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let comm = std::fs::read_to_string(p.join("comm"))
            .map_or_else(|_| "?".into(), |s| s.trim().to_string());
        *m.entry(comm).or_insert(0) += ns;
    }
    m
}

fn cpu_delta(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*before.get(k).unwrap_or(&0))))
        .collect()
}

/// Softirq time of every CPU in /proc/stat, nanoseconds (USER_HZ ticks: 10 ms resolution).
fn softirq_ns() -> u64 {
    let hz = 100u64;
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("cpu "))?;
            l.split_whitespace().nth(7)?.parse::<u64>().ok()
        })
        .map_or(0, |t| t * 1_000_000_000 / hz)
}

/// The namespaces, the UPF process and the programs; undone on drop (also on panic).
struct Rig {
    prefix: String,
    /// Deleted (with their veths) on drop, after the UPF has stopped.
    topo: Option<Topology>,
    upf: Option<Child>,
    dir: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop_upf();
        self.topo = None;
        // The UPF's config and log (an error has quoted the log's tail already).
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Rig {
    fn topo(&self) -> &Topology {
        self.topo
            .as_ref()
            .expect("the topology lives as long as the rig")
    }

    /// The generator's side of N3 (the gNB), the UPF's, and the sink's side of N6 (the DN).
    fn gen_ns(&self) -> String {
        self.topo().ue().name().to_string()
    }

    fn upf_ns(&self) -> String {
        self.topo().upf().name().to_string()
    }

    fn sink_ns(&self) -> String {
        self.topo().dn().name().to_string()
    }

    /// upf_netns::topology's layout without the N4 link (the SMF emulator talks to the UPF on
    /// the upf namespace's loopback) and without kernel forwarding.
    fn build() -> anyhow::Result<Rig> {
        let prefix = format!("vb{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("upf-bench-veth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let mut l = Layout::new(&prefix);
        l.ue_pool = UE_POOL.to_string();
        l.n4_link = false;
        Ok(Rig {
            prefix,
            topo: Some(Topology::up(&l)?),
            upf: None,
            dir,
        })
    }

    /// Has each kernel resolve the neighbours of the upf namespace (both ways).
    fn warm_neighbours(&self) {
        self.topo().warm_neighbours();
    }

    fn config(&self, a: &Args, cores: &[usize]) -> String {
        let b = match a.backend {
            Backend::AfPacket => "af_packet",
            Backend::AfXdp => "af_xdp",
        };
        let cores: Vec<String> = cores.iter().map(ToString::to_string).collect();
        let engine = match a.engine {
            Engine::User => "user",
            Engine::Xdp => "xdp",
        };
        let acl = if a.acl_rules > 0 {
            format!(
                "[acl]\nuplink_file = \"{}\"\n\n",
                self.dir.join("acl.rules").display()
            )
        } else {
            String::new()
        };
        let priority = match &a.priority {
            Some(mode) => format!("[priority]\nmode = \"{mode}\"\nmax_rbs = {}\n\n", a.max_rbs),
            None => String::new(),
        };
        format!(
            "# Written by `upf-bench veth`.\nengine = \"{engine}\"\n\n[n4]\naddress = \"127.0.0.1\"\nheartbeat_interval_s = 3600\n\n\
             [n3]\nbackend = \"{b}\"\ninterface = \"{N3_UPF}\"\naddresses = [\"{UPF_N3}\"]\n\n\
             [n6]\nbackend = \"{b}\"\ninterface = \"{N6_UPF}\"\n\n\
             [workers]\ncount = {}\ncores = [{}]\nbusy_poll = {}\n\n[[ue_pool]]\nipv4 = \"{UE_POOL}\"\n\n\
             {acl}{priority}[admin]\naddress = \"{ADMIN}\"\n",
            a.workers,
            cores.join(", "),
            a.busy_poll
        )
    }

    fn start_upf(&mut self, a: &Args, exe: &PathBuf, cores: &[usize]) -> anyhow::Result<u32> {
        let cfg = self.dir.join("upf.toml");
        if a.acl_rules > 0 {
            let rules = self.dir.join("acl.rules");
            std::fs::write(
                &rules,
                crate::profile::acl_rules_near(a.acl_rules, a.acl_near_dn.then_some(DN)),
            )
            .with_context(|| rules.display().to_string())?;
        }
        std::fs::write(&cfg, self.config(a, cores)).with_context(|| cfg.display().to_string())?;
        let log_path = self.dir.join("upf.log");
        let log =
            std::fs::File::create(&log_path).with_context(|| log_path.display().to_string())?;
        let mask: Vec<String> = cores.iter().map(ToString::to_string).collect();
        let nice = a.rig.nice.to_string();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.upf_ns(),
                "nice",
                "-n",
                &nice,
                "taskset",
                "-c",
                &mask.join(","),
            ])
            .arg(exe)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} run", exe.display()))?;
        let pid = child.id();
        self.upf = Some(child);
        Ok(pid)
    }

    fn upf_alive(&mut self) -> anyhow::Result<()> {
        upf_alive(&mut self.upf, &self.dir.join("upf.log"))
    }

    fn stop_upf(&mut self) {
        stop_upf(&mut self.upf);
    }

    /// Associates (retrying until the UPF listens) and establishes `n` sessions.
    fn establish(
        &mut self,
        n: u32,
        high: bool,
        stop: &AtomicBool,
    ) -> anyhow::Result<(Smf, Vec<Session>, f64)> {
        let upf = self.upf_ns();
        let mut smf = in_netns(&upf, || {
            let mut c = SmfConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 8805)));
            c.bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            c.t1 = Duration::from_millis(500);
            c.n1 = 3;
            c.window = 128;
            Smf::new(c)
        })?
        .context("SMF emulator")?;
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            self.upf_alive()?;
            match smf.associate() {
                Ok(_) => break,
                Err(e) if Instant::now() > until => {
                    bail!("PFCP association within 20 s: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
        }
        let specs: Vec<SessionSpec> = (0..n)
            .map(|i| {
                let ue = Ipv4Addr::from(u32::from(UE_BASE) + i);
                let mut s = SessionSpec::new(UeAddr::Static(ue), DL_TEID_BASE + i, GNB);
                s.ul_f_teid = Some((UL_TEID_BASE + i, UPF_N3));
                s.qfi = QFI;
                s.qos = Some(Qos::default());
                s.high_priority = high.then_some(HighPriority {
                    qfi: QFI_HIGH,
                    dscp: DSCP_HIGH,
                });
                s
            })
            .collect();
        let start = Instant::now();
        let mut sessions = Vec::with_capacity(specs.len());
        for chunk in specs.chunks(1000) {
            for r in smf.establish_many(chunk) {
                sessions.push(r.with_context(|| format!("session {}", sessions.len() + 1))?);
            }
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
        }
        Ok((smf, sessions, start.elapsed().as_secs_f64()))
    }
}

/// Where the generator sends and where the counter counts.
struct Sides {
    /// Generator: namespace, interface; its peer in the upf namespace.
    gen_ns: String,
    gen_dev: &'static str,
    peer_dev: &'static str,
    /// Counter: namespace, interface.
    sink_ns: String,
    sink_dev: &'static str,
}

fn sides(rig: &Rig, d: Direction) -> Sides {
    match d {
        Direction::Uplink => Sides {
            gen_ns: rig.gen_ns(),
            gen_dev: N3_GNB,
            peer_dev: N3_UPF,
            sink_ns: rig.sink_ns(),
            sink_dev: N6_DN,
        },
        Direction::Downlink => Sides {
            gen_ns: rig.sink_ns(),
            gen_dev: N6_DN,
            peer_dev: N6_UPF,
            sink_ns: rig.gen_ns(),
            sink_dev: N3_GNB,
        },
    }
}

/// One measured phase.
#[derive(Debug, Default, Clone, Copy)]
struct Phase {
    gen: GenStats,
    delivered: Count,
    softirq_ns: u64,
    /// Wall time from the first counter read to the last (the generator's time plus the drain).
    window: Duration,
}

impl Phase {
    fn offered_mpps(&self) -> f64 {
        self.gen.mpps()
    }
    fn delivered_mpps(&self) -> f64 {
        self.delivered.packets as f64 / self.gen.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
    fn loss(&self) -> f64 {
        if self.gen.frames == 0 {
            return 0.0;
        }
        (1.0 - self.delivered.packets as f64 / self.gen.frames as f64).max(0.0)
    }
    fn per_packet(&self, ns: u64) -> Option<f64> {
        (self.delivered.packets > 0).then(|| ns as f64 / self.delivered.packets as f64)
    }
}

/// The counter once the packets in flight have arrived: at least 50 ms after the generator
/// stopped, then until two reads 20 ms apart agree (at most 1 s).
fn drained(counter: &Counter) -> anyhow::Result<Count> {
    std::thread::sleep(Duration::from_millis(50));
    let until = Instant::now() + Duration::from_secs(1);
    let mut last = counter.read()?;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = counter.read()?;
        if now == last || Instant::now() > until {
            return Ok(now);
        }
        last = now;
    }
}

/// Warm-up, then `seconds` of generator against `counter`, then the drain.
#[allow(clippy::too_many_arguments)]
fn measure(
    g: &Generator,
    s: &Sides,
    counter: &Counter,
    cpu: (usize, i32),
    seconds: f64,
    rate: u64,
    warmup: bool,
    stop: &AtomicBool,
) -> anyhow::Result<Phase> {
    if warmup {
        let r = if rate == 0 { 200_000 } else { rate };
        xdpgen::run_in(g, &s.gen_ns, Some(cpu.0), cpu.1, s.gen_dev, 0.2, r, stop)?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let c0 = counter.read()?;
    let t0 = Instant::now();
    let sirq0 = softirq_ns();
    let gen = xdpgen::run_in(
        g,
        &s.gen_ns,
        Some(cpu.0),
        cpu.1,
        s.gen_dev,
        seconds,
        rate,
        stop,
    )?;
    let c1 = drained(counter)?;
    Ok(Phase {
        gen,
        delivered: c1.since(&c0),
        softirq_ns: softirq_ns().saturating_sub(sirq0),
        window: t0.elapsed(),
    })
}

/// Loss below which a trial counts for the "< 10 ppm" rate.
const LOW_LOSS: f64 = 10e-6;

/// One trial of a search: the rate asked for, what the generator ran and what arrived.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Trial {
    pub requested_pps: u64,
    pub offered_pps: f64,
    pub frames: u64,
    pub delivered: u64,
    pub loss: f64,
    pub seconds: f64,
}

impl Trial {
    fn of(requested_pps: u64, p: &Phase) -> Trial {
        Trial {
            requested_pps,
            offered_pps: p.offered_mpps() * 1e6,
            frames: p.gen.frames,
            delivered: p.delivered.packets,
            loss: p.loss(),
            seconds: p.gen.elapsed.as_secs_f64(),
        }
    }
}

/// An RFC 2544-style search: the highest offered rates with zero loss and with loss below
/// 10 ppm, each bracketed by trials, and every trial.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Search {
    /// The offered rate of the best trial without loss (`None`: every trial lost packets).
    pub zero_loss_pps: Option<f64>,
    pub below_10ppm_pps: Option<f64>,
    /// The lowest requested rate that lost packets (resp. ≥ 10 ppm): the brackets' tops.
    pub zero_loss_upper_pps: Option<u64>,
    pub below_10ppm_upper_pps: Option<u64>,
    /// The first trial, at the generator's ceiling, lost nothing: the rig, not the path, is
    /// the limit.
    pub ceiling_limited: bool,
    pub top_pps: u64,
    pub resolution: f64,
    pub trial_seconds: f64,
    pub trials: Vec<Trial>,
}

/// Binary search between 0 and `top` pps: each trial's loss moves the brackets of both
/// criteria (zero loss, < 10 ppm); the next trial halves the zero-loss bracket until it is
/// narrower than `resolution` of its top, then the 10 ppm one; at most `max_trials`.
pub fn search(
    top: u64,
    resolution: f64,
    max_trials: u32,
    trial_seconds: f64,
    mut trial: impl FnMut(u64) -> anyhow::Result<Trial>,
) -> anyhow::Result<Search> {
    let top = top.max(1);
    // Highest rate known good, lowest known bad (top + 1: none yet).
    let (mut lo0, mut hi0) = (0u64, top + 1);
    let (mut lo10, mut hi10) = (0u64, top + 1);
    let narrow = |lo: u64, hi: u64| hi <= lo || (hi - lo) as f64 <= resolution * hi as f64;
    let mut trials = Vec::new();
    while trials.len() < max_trials as usize {
        let rate = if trials.is_empty() {
            top
        } else if !narrow(lo0, hi0.min(top)) {
            lo0 + (hi0.min(top) - lo0) / 2
        } else if !narrow(lo10, hi10.min(top)) {
            lo10 + (hi10.min(top) - lo10) / 2
        } else {
            break;
        };
        let t = trial(rate.max(1))?;
        if t.loss == 0.0 {
            lo0 = lo0.max(rate);
            lo10 = lo10.max(rate);
        } else if t.loss < LOW_LOSS {
            hi0 = hi0.min(rate);
            lo10 = lo10.max(rate);
        } else {
            hi0 = hi0.min(rate);
            hi10 = hi10.min(rate);
        }
        // A noisy rig can contradict itself: zero loss never above the 10 ppm limit.
        hi0 = hi0.min(hi10);
        trials.push(t);
        if trials.len() == 1 && t.loss == 0.0 {
            break;
        }
    }
    let best = |ok: &dyn Fn(&Trial) -> bool| {
        trials
            .iter()
            .filter(|t| ok(t))
            .map(|t| t.offered_pps)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    Ok(Search {
        zero_loss_pps: best(&|t| t.loss == 0.0),
        below_10ppm_pps: best(&|t| t.loss < LOW_LOSS),
        zero_loss_upper_pps: (hi0 <= top).then_some(hi0),
        below_10ppm_upper_pps: (hi10 <= top).then_some(hi10),
        ceiling_limited: trials.first().is_some_and(|t| t.loss == 0.0),
        top_pps: top,
        resolution,
        trial_seconds,
        trials,
    })
}

/// Searches the zero-loss rate of whatever forwards `g`'s frames to `counter`, from the
/// generator's ceiling down.
fn run_search(
    a: &Args,
    g: &Generator,
    s: &Sides,
    counter: &Counter,
    ceiling: &Phase,
    stop: &AtomicBool,
) -> anyhow::Result<Search> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let top = a
        .search_top
        .unwrap_or((ceiling.offered_mpps() * 1e6) as u64);
    let found = search(top, a.resolution, a.max_trials, a.trial_seconds, |rate| {
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let p = measure(
            g,
            s,
            counter,
            (a.rig.gen_cpu, a.rig.nice),
            a.trial_seconds,
            rate,
            false,
            stop,
        )?;
        let t = Trial::of(rate, &p);
        eprintln!(
            "    trial at {:.3} Mpps: {:.3} Mpps offered, {} of {} delivered, loss {:.2e}",
            rate as f64 / 1e6,
            t.offered_pps / 1e6,
            t.delivered,
            t.frames,
            t.loss
        );
        Ok(t)
    })?;
    let m = |v: Option<f64>| v.map_or("none".into(), |p| format!("{:.3}", p / 1e6));
    eprintln!(
        "  zero loss: {} Mpps, < 10 ppm: {} Mpps ({} trials{})",
        m(found.zero_loss_pps),
        m(found.below_10ppm_pps),
        found.trials.len(),
        if found.ceiling_limited {
            "; no loss at the generator's ceiling"
        } else {
            ""
        }
    );
    Ok(found)
}

/// Latency of one class at one load.
fn class_json(
    c: &xdpgen::ClassLatency,
    j: &xdpgen::JitterSummary,
    name: &str,
) -> serde_json::Value {
    let us = |v: Option<u64>| v.map(|n| n as f64 / 1e3);
    json!({
        "class": name,
        "packets": c.count,
        "mean_us": c.mean_ns().map(|n| n / 1e3),
        "p50_us": us(c.quantile(0.5)),
        "p99_us": us(c.quantile(0.99)),
        "p999_us": us(c.quantile(0.999)),
        "max_us": (c.count > 0).then(|| c.max_ns as f64 / 1e3),
        "qfi_mismatch": c.qfi_mismatch,
        "jitter_flows": j.flows,
        "jitter_mean_us": (j.flows > 0).then(|| j.mean_ns / 1e3),
        "jitter_max_us": (j.flows > 0).then(|| j.max_ns / 1e3),
        "histogram": c.buckets.iter().enumerate().filter(|(_, n)| **n > 0)
            .map(|(b, n)| json!([xdpgen::bucket_bounds(b).0, n])).collect::<Vec<_>>(),
    })
}

/// A latency run at `rate` pps: histograms and jitter reset, `seconds` of traffic, drain.
#[allow(clippy::too_many_arguments)]
fn latency_run(
    g: &Generator,
    s: &Sides,
    counter: &Counter,
    cpu: (usize, i32),
    seconds: f64,
    rate: u64,
    load: f64,
    stop: &AtomicBool,
) -> anyhow::Result<serde_json::Value> {
    counter.reset_latency()?;
    let p = measure(g, s, counter, cpu, seconds, rate, false, stop)?;
    let lat = counter.latency()?.context("the sink measures no latency")?;
    let jit = counter.jitter()?;
    let [lo, hi] = &lat.classes;
    eprintln!(
        "  latency at {load} % ({:.3} Mpps offered, loss {:.4} %): low p50/p99/p99.9/max {} µs, high {} µs, jitter (mean over flows) {:.1} / {:.1} µs",
        p.offered_mpps(),
        p.loss() * 100.0,
        quantiles(lo),
        quantiles(hi),
        jit[0].mean_ns / 1e3,
        jit[1].mean_ns / 1e3,
    );
    Ok(json!({
        "load_percent": load,
        "rate_pps": rate,
        "offered_mpps": p.offered_mpps(),
        "delivered_mpps": p.delivered_mpps(),
        "frames": p.gen.frames,
        "delivered": p.delivered.packets,
        "loss": p.loss(),
        "stamped_delivered": lo.count + hi.count,
        "negative_transit": lat.negative,
        "classes": [class_json(lo, &jit[0], "low"), class_json(hi, &jit[1], "high")],
    }))
}

/// One load of a priority sitting as issue #28 reports it: the classes' p99 and jitter, the
/// low class's delivered rate (its stamped packets over the run).
fn priority_point(a: &Args, mode: &str, run: &serde_json::Value, seconds: f64) -> String {
    let class = |i: usize, k: &str| run["classes"][i][k].clone();
    let low_packets = run["classes"][0]["packets"].as_f64().unwrap_or(0.0);
    json!({
        "mode": mode,
        "max_rbs": a.max_rbs,
        "profile": a.profile,
        "direction": a.direction,
        "sessions": a.sessions,
        "size": a.size,
        "high_share": a.high_share,
        "load_percent": run["load_percent"],
        "offered_mpps": run["offered_mpps"],
        "loss": run["loss"],
        "high_p50_us": class(1, "p50_us"),
        "high_p99_us": class(1, "p99_us"),
        "high_p999_us": class(1, "p999_us"),
        "low_p50_us": class(0, "p50_us"),
        "low_p99_us": class(0, "p99_us"),
        "low_p999_us": class(0, "p999_us"),
        "high_jitter_us": class(1, "jitter_mean_us"),
        "low_jitter_us": class(0, "jitter_mean_us"),
        "low_mpps": low_packets / seconds / 1e6,
    })
    .to_string()
}

fn quantiles(c: &xdpgen::ClassLatency) -> String {
    let f = |v: Option<u64>| v.map_or("–".into(), |n| format!("{:.1}", n as f64 / 1e3));
    format!(
        "{}/{}/{}/{}",
        f(c.quantile(0.5)),
        f(c.quantile(0.99)),
        f(c.quantile(0.999)),
        f((c.count > 0).then_some(c.max_ns))
    )
}

fn search_json(s: &Search) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["zero_loss_mpps"] = json!(s.zero_loss_pps.map(|p| p / 1e6));
    v["below_10ppm_mpps"] = json!(s.below_10ppm_pps.map(|p| p / 1e6));
    v
}

fn templates(a: &Args, rig: &Rig, s: &Sides) -> anyhow::Result<(Template, Template)> {
    let macs = (mac(&rig.upf_ns(), s.peer_dev)?, mac(&s.gen_ns, s.gen_dev)?);
    Ok(match a.direction {
        Direction::Uplink => (
            Template::uplink_gtpu(
                macs,
                GNB,
                UPF_N3,
                UL_TEID_BASE,
                QFI,
                UE_BASE,
                DN,
                a.size,
                a.sessions,
            )
            .and_then(|t| t.with_high_priority(a.high_share, Mark::Qfi(QFI_HIGH)))?,
            Template::plain(macs, UE_BASE, DN, false, a.size, a.sessions)?,
        ),
        Direction::Downlink => {
            let t = Template::plain(macs, UE_BASE, DN, true, a.size, a.sessions)?;
            (
                t.clone()
                    .with_high_priority(a.high_share, Mark::Dscp(DSCP_HIGH))?,
                t,
            )
        }
    })
}

/// An error with the tail of its log if the `upf` process `child` has exited (then forgotten).
pub(crate) fn upf_alive(child: &mut Option<Child>, log: &std::path::Path) -> anyhow::Result<()> {
    if let Some(st) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
        *child = None;
        let log = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        bail!(
            "the UPF exited ({st}); its log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// Stops the `upf` process `child`: SIGTERM (it releases its associations and cleans up),
/// SIGKILL after 5 s.
pub(crate) fn stop_upf(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// Set by SIGINT or SIGTERM: runs stop cleanly (namespaces removed).
pub(crate) fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    stop
}

/// The nice value of this process's autogroup, restored on drop. With autogroup scheduling a
/// nice value counts only inside the session's group; the group's own weight is what other
/// sessions' jobs compete with. The group is the whole session's (the shell that started us
/// too): hence the restore.
struct Autogroup(Option<String>);

impl Autogroup {
    const FILE: &'static str = "/proc/self/autogroup";

    fn renice(nice: i32) -> anyhow::Result<Autogroup> {
        let Ok(old) = std::fs::read_to_string(Self::FILE) else {
            return Ok(Autogroup(None)); // no autogroup scheduling
        };
        // "/autogroup-24 nice 0"
        let old = old.split_whitespace().last().unwrap_or("0").to_string();
        std::fs::write(Self::FILE, nice.to_string()).context(Self::FILE)?;
        Ok(Autogroup(Some(old)))
    }
}

impl Drop for Autogroup {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(Self::FILE, old);
        }
    }
}

/// `upf-bench veth`: measures and prints one JSON line.
pub fn run(a: &Args) -> anyhow::Result<()> {
    match (a.buffering_share, a.swaps) {
        (Some(_), Some(_)) => bail!("--buffering-share and --swaps are separate runs"),
        (Some(share), None) => println!("{}", buffering_point(a, share)?),
        (None, Some(n)) => println!("{}", swap::run(a, n)?),
        (None, None) => println!("{}", measure_point(a)?),
    }
    Ok(())
}

/// `--buffering-share`: the other sessions' delivered packets per second of UPF CPU (all
/// its threads), with `share` of the sessions buffering and with none, alternated round by
/// round on one UPF; the JSON line.
fn buffering_point(a: &Args, share: f64) -> anyhow::Result<serde_json::Value> {
    if a.direction != Direction::Downlink {
        bail!("--buffering-share: buffering holds downlink; give --direction downlink");
    }
    if !(0.0..1.0).contains(&share) || a.sessions == 0 || a.workers == 0 || a.seconds <= 0.0 {
        bail!("--buffering-share in [0, 1); --sessions, --workers, --seconds positive");
    }
    let exe = a.rig.upf_exe()?;
    let cores = a.rig.upf_cpus();
    let _autogroup = if a.rig.nice == 0 {
        None
    } else {
        Some(Autogroup::renice(a.rig.nice)?)
    };
    let stop = stop_flag();
    let stop = &*stop;
    let load_before = crate::harness::loadavg();
    let mut rig = Rig::build()?;
    let s = sides(&rig, a.direction);
    let (upf_t, _) = templates(a, &rig, &s)?;
    let upf_gen = Generator::new(upf_t)?;
    let counter = Counter::attach_in(&s.sink_ns, s.sink_dev, &COUNTED_PORTS)?;
    rig.warm_neighbours();
    let pid = rig.start_upf(a, &exe, &cores)?;
    let (mut smf, sessions, _) = rig.establish(a.sessions, a.high_share > 0.0, stop)?;
    let picked = crate::buffering::pick(sessions.len(), share);
    let idle: Vec<Session> = sessions
        .iter()
        .zip(&picked)
        .filter(|(_, &b)| b)
        .map(|(s, _)| *s)
        .collect();
    // The generator goes round the sessions in order: this share of its frames is theirs.
    let others = 1.0 - idle.len() as f64 / sessions.len() as f64;
    eprintln!(
        "upf-bench veth: downlink, {} sessions ({} buffering), {} B, {} worker(s) (CPUs {cores:?}), UPF pid {pid}, {} rounds of {} s each way",
        sessions.len(),
        idle.len(),
        a.size,
        a.workers,
        a.rounds,
        a.seconds
    );
    let set = |smf: &mut Smf, mode: upf_loadgen::smf::Downlink| -> anyhow::Result<()> {
        for r in smf.set_downlink_many(&idle, mode) {
            r.context("switching the downlink FARs")?;
        }
        // Answers the Downlink Data Reports of the first packets.
        smf.serve(Duration::from_millis(100))?;
        Ok(())
    };
    let mut phase = |smf: &mut Smf, buffering: bool| -> anyhow::Result<serde_json::Value> {
        let mode = if buffering {
            upf_loadgen::smf::Downlink::Buffer { notify: true }
        } else {
            upf_loadgen::smf::Downlink::Forward
        };
        set(smf, mode)?;
        // Warm-up: the buffers fill, the released packets of the last switch drain.
        let r = if a.rate == 0 { 200_000 } else { a.rate };
        xdpgen::run_in(
            &upf_gen,
            &s.gen_ns,
            Some(a.rig.gen_cpu),
            a.rig.nice,
            s.gen_dev,
            0.3,
            r,
            stop,
        )?;
        smf.serve(Duration::from_millis(100))?;
        let cpu0 = task_cpu(pid);
        let p = measure(
            &upf_gen,
            &s,
            &counter,
            (a.rig.gen_cpu, a.rig.nice),
            a.seconds,
            a.rate,
            false,
            stop,
        )?;
        let upf_ns: u64 = cpu_delta(&task_cpu(pid), &cpu0).values().sum();
        rig.upf_alive()?;
        // With none buffering, the buffering sessions' packets are delivered too.
        let delivered_others = if buffering {
            p.delivered.packets as f64
        } else {
            p.delivered.packets as f64 * others
        };
        let mpps_per_core = delivered_others / (upf_ns as f64 / 1e9).max(1e-9) / 1e6;
        eprintln!(
            "  {}: {:.2} Mpps offered, {:.2} Mpps delivered, other sessions {mpps_per_core:.2} Mpps per UPF core",
            if buffering { "buffering" } else { "none buffering" },
            p.offered_mpps(),
            p.delivered_mpps()
        );
        Ok(json!({
            "buffering": buffering,
            "mpps_per_core": mpps_per_core,
            "offered_mpps": p.offered_mpps(),
            "delivered_mpps": p.delivered_mpps(),
            "other_delivered_mpps": delivered_others / p.gen.elapsed.as_secs_f64().max(1e-9) / 1e6,
            "loss": p.loss(),
            "upf_cpu_ns": upf_ns,
            "seconds": p.gen.elapsed.as_secs_f64(),
        }))
    };
    let mut none = Vec::new();
    let mut buff = Vec::new();
    for r in 0..a.rounds.max(1) {
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        // Alternated order: neither always follows the other.
        for buffering in [r % 2 == 1, r % 2 == 0] {
            let v = phase(&mut smf, buffering)?;
            if buffering { &mut buff } else { &mut none }.push(v);
        }
    }
    let upf_counters = smf.stats();
    drop(smf);
    rig.stop_upf();
    let rates = |v: &[serde_json::Value]| -> Vec<f64> {
        v.iter()
            .map(|x| x["mpps_per_core"].as_f64().unwrap_or(f64::NAN))
            .collect()
    };
    let (rn, rb) = (rates(&none), rates(&buff));
    let (mn, mb) = (crate::ab::median(&rn), crate::ab::median(&rb));
    eprintln!(
        "  other sessions: {mb:.2} Mpps per UPF core with {:.0} % buffering, {mn:.2} with none: ratio {:.3}",
        share * 100.0,
        mb / mn
    );
    Ok(json!({
        "topology": "veth",
        "commit": env!("UPF_BENCH_COMMIT"),
        "profile": a.profile,
        "direction": a.direction,
        "backend": a.backend,
        "engine": a.engine,
        "workers": a.workers,
        "busy_poll": a.busy_poll,
        "sessions": a.sessions,
        "size": a.size,
        "seconds": a.seconds,
        "rounds": a.rounds.max(1),
        "rate_limit_pps": a.rate,
        "buffering_share": share,
        "buffering_sessions": idle.len(),
        "figure": "other sessions' delivered packets per second of UPF CPU time (all its threads), Mpps",
        "mpps_per_core_buffering": mb,
        "mpps_per_core_none": mn,
        "ratio": mb / mn,
        "none": none,
        "buffering": buff,
        "smf_session_reports": upf_counters.session_reports,
        "load_before": load_before,
        "load_after": crate::harness::loadavg(),
    }))
}

pub fn measure_point(a: &Args) -> anyhow::Result<serde_json::Value> {
    if a.sessions == 0 || a.workers == 0 || a.seconds <= 0.0 || a.trial_seconds <= 0.0 {
        bail!("--sessions, --workers, --seconds and --trial-seconds must be positive");
    }
    if a.engine == Engine::Xdp && a.backend != Backend::AfXdp {
        bail!("--engine xdp: the XDP engine runs in front of the af-xdp backend");
    }
    if let Some(m) = &a.priority {
        if !["fifo", "strict", "weighted", "load-aware"].contains(&m.as_str()) {
            bail!("--priority {m:?}: fifo, strict, weighted or load-aware");
        }
    }
    if a.latency {
        if !a.search && a.rate == 0 {
            bail!("--latency: loads are % of the zero-loss rate (--search) or of --rate");
        }
        if a.size < 28 + xdpgen::STAMP_LEN {
            bail!(
                "--latency: a {} B packet has no room for the stamp (28 + {} octets)",
                a.size,
                xdpgen::STAMP_LEN
            );
        }
        if a.latency_loads.iter().any(|l| !(*l > 0.0 && *l <= 100.0)) {
            bail!("--latency-loads: percentages in (0, 100]");
        }
    }
    let exe = a.rig.upf_exe()?;
    let cores = a.rig.upf_cpus();
    let _autogroup = if a.rig.nice == 0 {
        None
    } else {
        Some(Autogroup::renice(a.rig.nice)?)
    };
    let stop = stop_flag();
    let stop = &*stop;
    let load_before = crate::harness::loadavg();
    let mut rig = Rig::build()?;
    let s = sides(&rig, a.direction);
    let (upf_t, plain_t) = templates(a, &rig, &s)?;
    let upf_gen = Generator::new(upf_t)?;
    let lat_cfg = LatencyConfig {
        ue_base: UE_BASE,
        sessions: a.sessions,
        ue_is_dst: a.direction == Direction::Downlink,
        // Downlink: the UPF marks the G-PDUs with the QFI of the PDR's QER.
        qfi: (a.direction == Direction::Downlink).then_some((QFI, QFI_HIGH)),
    };
    // The latency sink costs ~100 ns a packet in the same softirq as the forwarding it
    // measures: only when latency is asked for.
    let counter = if a.latency {
        Counter::attach_in_with(
            &s.sink_ns,
            s.sink_dev,
            &COUNTED_PORTS,
            xdpgen::Measures {
                latency: Some(lat_cfg),
                gap: false,
            },
        )?
    } else {
        Counter::attach_in(&s.sink_ns, s.sink_dev, &COUNTED_PORTS)?
    };
    rig.warm_neighbours();
    eprintln!(
        "upf-bench veth: {:?}, {} sessions, {} B, {} on {} worker(s) (CPUs {cores:?}), generator on CPU {}, {}",
        a.direction,
        a.sessions,
        a.size,
        match a.backend {
            Backend::AfPacket => "af_packet",
            Backend::AfXdp => "af_xdp",
        },
        a.workers,
        a.rig.gen_cpu,
        if a.rate == 0 { "flat out".to_string() } else { format!("{} pps", a.rate) }
    );

    // 1. The generator's ceiling: its frames into a counting XDP_DROP on the UPF's veth.
    let ceiling = {
        let c = Counter::attach_in(&rig.upf_ns(), s.peer_dev, &COUNTED_PORTS)?;
        let secs = a.ceiling_seconds.unwrap_or(a.seconds.min(2.0));
        let p = measure(
            &upf_gen,
            &s,
            &c,
            (a.rig.gen_cpu, a.rig.nice),
            secs,
            0,
            false,
            stop,
        )?;
        eprintln!(
            "  generator ceiling: {:.2} Mpps offered, {:.2} Mpps received by XDP_DROP at the peer",
            p.offered_mpps(),
            p.delivered_mpps()
        );
        p
    };

    // 2. Linux forwarding of the inner packets through the upf namespace.
    let baseline = if a.no_baseline {
        None
    } else {
        let upf = rig.upf_ns();
        let _pass = Fixed::attach_in(&upf, s.peer_dev, xdpgen::XDP_PASS)?;
        rig.topo().upf().sysctl("net/ipv4/ip_forward", "1")?;
        if a.direction == Direction::Downlink {
            ip(&["-n", &upf, "route", "add", UE_POOL, "via", &GNB.to_string()])?;
        }
        rig.warm_neighbours();
        let g = Generator::new(plain_t)?;
        let r = measure(
            &g,
            &s,
            &counter,
            (a.rig.gen_cpu, a.rig.nice),
            a.seconds,
            a.rate,
            true,
            stop,
        )
        .and_then(|p| {
            let found = if a.search {
                eprintln!("  searching the Linux forwarding's zero-loss rate");
                Some(run_search(a, &g, &s, &counter, &ceiling, stop)?)
            } else {
                None
            };
            Ok((p, found))
        });
        rig.topo().upf().sysctl("net/ipv4/ip_forward", "0")?;
        if a.direction == Direction::Downlink {
            ip(&["-n", &upf, "route", "del", UE_POOL])?;
        }
        let (p, found) = r?;
        eprintln!(
            "  Linux forwarding: {:.2} Mpps offered, {:.2} Mpps delivered, softirq {:.0} ns/packet",
            p.offered_mpps(),
            p.delivered_mpps(),
            p.per_packet(p.softirq_ns).unwrap_or(0.0)
        );
        Some((p, found))
    };
    let (baseline, baseline_search) = match baseline {
        Some((p, f)) => (Some(p), f),
        None => (None, None),
    };
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted");
    }

    // 3. The UPF.
    let _pass = match a.backend {
        // AF_PACKET: the veth must accept redirected frames (the UPF attaches nothing).
        Backend::AfPacket => Some(Fixed::attach_in(
            &rig.upf_ns(),
            s.peer_dev,
            xdpgen::XDP_PASS,
        )?),
        Backend::AfXdp => None,
    };
    let pid = rig.start_upf(a, &exe, &cores)?;
    let (smf, sessions, est_s) = rig.establish(a.sessions, a.high_share > 0.0, stop)?;
    eprintln!(
        "  UPF pid {pid}: {} sessions established in {est_s:.2} s",
        sessions.len()
    );
    rig.warm_neighbours();
    upf_gen.reset()?;
    // Warm-up outside the window (neighbours, first-packet paths).
    let r = if a.rate == 0 { 200_000 } else { a.rate };
    xdpgen::run_in(
        &upf_gen,
        &s.gen_ns,
        Some(a.rig.gen_cpu),
        a.rig.nice,
        s.gen_dev,
        0.3,
        r,
        stop,
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let cpu0 = task_cpu(pid);
    let phase = measure(
        &upf_gen,
        &s,
        &counter,
        (a.rig.gen_cpu, a.rig.nice),
        a.seconds,
        a.rate,
        false,
        stop,
    )?;
    let cpu1 = task_cpu(pid);
    rig.upf_alive()?;
    let threads = cpu_delta(&cpu1, &cpu0);
    let upf_ns: u64 = threads.values().sum();
    let upf_search = if a.search {
        eprintln!("  searching the UPF's zero-loss rate");
        Some(run_search(a, &upf_gen, &s, &counter, &ceiling, stop)?)
    } else {
        None
    };
    let latency = if a.latency {
        let (base, what) = match &upf_search {
            Some(f) => (f.zero_loss_pps, "zero-loss rate"),
            None => (Some(a.rate as f64), "--rate"),
        };
        let mut runs = Vec::new();
        if let Some(base) = base {
            for &load in &a.latency_loads {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let rate = (base * load / 100.0).round().max(1.0) as u64;
                let seconds = a.latency_seconds.unwrap_or(a.trial_seconds);
                let run = latency_run(
                    &upf_gen,
                    &s,
                    &counter,
                    (a.rig.gen_cpu, a.rig.nice),
                    seconds,
                    rate,
                    load,
                    stop,
                )?;
                if let Some(mode) = &a.priority {
                    println!("{}", priority_point(a, mode, &run, seconds));
                }
                runs.push(run);
                rig.upf_alive()?;
            }
        }
        Some(json!({
            "base_pps": base,
            "base": what,
            "high_share": a.high_share,
            "high_mark": match a.direction {
                Direction::Uplink => format!("QFI {QFI_HIGH} in the PDU Session Container (low: QFI {QFI})"),
                Direction::Downlink => format!("DSCP {DSCP_HIGH} (low: DSCP 0)"),
            },
            "loads": runs,
        }))
    } else {
        None
    };
    drop(smf);
    rig.stop_upf();
    let load_after = crate::harness::loadavg();

    let upf_ns_pp = phase.per_packet(upf_ns);
    // What forwarding a packet costs the box, the generator's own work aside: the UPF's
    // threads and every CPU's softirq time (where the XDP engine, the veths' NAPI and the
    // sink run), against the softirq time of Linux forwarding the same packets.
    let whole_ns_pp = phase.per_packet(upf_ns + phase.softirq_ns);
    let linux_ns_pp = baseline.as_ref().and_then(|p| p.per_packet(p.softirq_ns));
    eprintln!(
        "  UPF: {:.2} Mpps offered, {:.2} Mpps delivered (loss {:.2} %), UPF CPU {} ns/packet ({:.0} % of a core), softirq {:.0} ns/packet",
        phase.offered_mpps(),
        phase.delivered_mpps(),
        phase.loss() * 100.0,
        upf_ns_pp.map_or("–".into(), |v| format!("{v:.0}")),
        upf_ns as f64 / phase.window.as_secs_f64() / 1e7,
        phase.per_packet(phase.softirq_ns).unwrap_or(0.0)
    );
    let phase_json = |p: &Phase| {
        json!({
            "offered_mpps": p.offered_mpps(),
            "delivered_mpps": p.delivered_mpps(),
            "loss": p.loss(),
            "frames": p.gen.frames,
            "delivered": p.delivered.packets,
            "seconds": p.gen.elapsed.as_secs_f64(),
            "generator_cpu_ns_per_frame": p.gen.cpu.as_nanos() as f64 / p.gen.frames.max(1) as f64,
            "softirq_ns_per_packet": p.per_packet(p.softirq_ns),
        })
    };
    let delivered = phase.delivered_mpps();
    let base_mpps = baseline.as_ref().map(Phase::delivered_mpps);
    let ratio = |d: f64| (d > 0.0).then(|| delivered / d);
    Ok(json!({
        "topology": "veth",
        "netns_prefix": rig.prefix,
        "profile": a.profile,
        "direction": a.direction,
        "backend": a.backend,
        "workers": a.workers,
        "priority": a.priority,
        "max_rbs": a.priority.as_ref().map(|_| a.max_rbs),
        "acl_rules": a.acl_rules,
        "acl_near_dn": a.acl_near_dn,
        "busy_poll": a.busy_poll,
        "sessions": a.sessions,
        "size": a.size,
        "seconds": a.seconds,
        "rate_limit_pps": a.rate,
        "gen_cpu": a.rig.gen_cpu,
        "nice": a.rig.nice,
        "upf_cores": cores,
        "offered_mpps": phase.offered_mpps(),
        "delivered_mpps": delivered,
        "delivered_gbps": phase.delivered.packets as f64 * a.size as f64 * 8.0
            / phase.gen.elapsed.as_secs_f64().max(1e-9) / 1e9,
        "loss": phase.loss(),
        "upf_cpu_ns_per_packet": upf_ns_pp,
        "upf_ns_per_packet": whole_ns_pp,
        "linux_ns_per_packet": linux_ns_pp,
        "ratio_ns_to_linux": whole_ns_pp.zip(linux_ns_pp).map(|(u, l)| u / l),
        "upf_cpu_cores": upf_ns as f64 / phase.window.as_secs_f64() / 1e9,
        "upf_threads_cpu_ns": threads,
        "softirq_ns_per_packet": phase.per_packet(phase.softirq_ns),
        "generator_cpu_ns_per_frame": phase.gen.cpu.as_nanos() as f64 / phase.gen.frames.max(1) as f64,
        "sessions_established_per_s": sessions.len() as f64 / est_s.max(1e-9),
        "generator_ceiling_mpps": ceiling.delivered_mpps(),
        "generator_ceiling": phase_json(&ceiling),
        "baseline": baseline.as_ref().map(phase_json),
        "zero_loss_mpps": upf_search.as_ref().and_then(|f| f.zero_loss_pps).map(|p| p / 1e6),
        "below_10ppm_mpps": upf_search.as_ref().and_then(|f| f.below_10ppm_pps).map(|p| p / 1e6),
        "baseline_zero_loss_mpps": baseline_search.as_ref().and_then(|f| f.zero_loss_pps).map(|p| p / 1e6),
        "zero_loss_ratio_to_baseline": match (
            upf_search.as_ref().and_then(|f| f.zero_loss_pps),
            baseline_search.as_ref().and_then(|f| f.zero_loss_pps),
        ) {
            (Some(u), Some(b)) if b > 0.0 => Some(u / b),
            _ => None,
        },
        "search": upf_search.as_ref().map(search_json),
        "baseline_search": baseline_search.as_ref().map(search_json),
        "latency": latency,
        "ratio_to_baseline": base_mpps.and_then(ratio),
        "ratio_to_ceiling": ratio(ceiling.delivered_mpps()),
        "load_before": load_before,
        "load_after": load_after,
        "notes": [
            "counted at the receiver (an XDP program on the far veth); offered = frames the generator's program ran on",
            "UPF CPU = every thread of the upf process (schedstat) over the window / packets delivered; workers poll for 50 µs before sleeping, so below saturation it includes some idle polling",
            "upf_ns_per_packet = (UPF CPU + softirq) / packets delivered: the XDP engine runs in softirq, not in the UPF's threads; linux_ns_per_packet = the baseline's softirq / packets delivered; both include the veth hop into the sink and its counting program",
            "veth NAPI runs on the sending CPU: receiving into the UPF's veth (XDP / skb building, AF_XDP copy) is paid on the generator's CPU, and the veth into the sink on the UPF's; softirq = all CPUs' softirq time from /proc/stat (10 ms ticks) / packets delivered",
            "baseline = Linux IP forwarding of the same inner packets (no GTP-U) through the upf namespace, UPF stopped, ip_forward=1, XDP_PASS on the ingress veth",
            "search: RFC 2544-style binary search over the generator's paced rate (100 µs bursts), from the generator's ceiling down; a trial = trial_seconds of traffic, then the sink drained; zero loss = delivered == frames the generator ran; the rates are the best passing trials' offered rates",
            "latency: the generator stamps CLOCK_MONOTONIC (bpf_ktime_get_ns) into the inner payload as it builds the frame (frames leave in batches of 64 after their programs ran: up to ~64 program runs of wait included); the sink's XDP program takes now - stamp on arrival; histogram buckets 1.6-3.1 % wide, quantiles are bucket middles; jitter = RFC 3550 A.8 per flow (session x class), mean and max over flows with >= 2 packets; no priority queues in the data path: classes are measured, not treated differently",
        ],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rig that loses nothing up to `good` pps, < 10 ppm up to `fair`, more above.
    fn rig(good: u64, fair: u64) -> impl FnMut(u64) -> anyhow::Result<Trial> {
        move |rate| {
            let frames = rate * 2;
            let lost = if rate <= good {
                0
            } else if rate <= fair {
                frames / 200_000
            } else {
                frames / 100
            };
            Ok(Trial {
                requested_pps: rate,
                offered_pps: rate as f64,
                frames,
                delivered: frames - lost,
                loss: lost as f64 / frames as f64,
                seconds: 2.0,
            })
        }
    }

    #[test]
    fn search_brackets_both_criteria() {
        let s = search(1_000_000, 0.02, 20, 2.0, rig(613_000, 700_000)).unwrap();
        let z = s.zero_loss_pps.unwrap();
        let l = s.below_10ppm_pps.unwrap();
        assert!((613_000.0 * 0.98..=613_000.0).contains(&z), "{z}");
        assert!((700_000.0 * 0.98..=700_000.0).contains(&l), "{l}");
        let up = s.zero_loss_upper_pps.unwrap();
        assert!(
            up > 613_000 && (up as f64 - z) <= 0.02 * up as f64,
            "{up} {z}"
        );
        assert!(!s.ceiling_limited);
        assert!(
            s.trials.len() < 20,
            "stops at the resolution: {}",
            s.trials.len()
        );
        // The rate is the best passing trial's.
        assert!(s.trials.iter().any(|t| t.offered_pps == z && t.loss == 0.0));
    }

    #[test]
    fn search_stops_at_a_clean_ceiling_and_counts_trials() {
        let s = search(500_000, 0.02, 20, 2.0, rig(600_000, 600_000)).unwrap();
        assert!(s.ceiling_limited);
        assert_eq!(s.trials.len(), 1);
        assert_eq!(s.zero_loss_pps, Some(500_000.0));
        let s = search(1_000_000, 0.001, 4, 2.0, rig(100, 100)).unwrap();
        assert_eq!(s.trials.len(), 4);
        assert_eq!(s.zero_loss_pps, None, "every trial lost");
        assert_eq!(s.zero_loss_upper_pps, Some(125_000));
    }
}
