//! The veth topology: three network namespaces, the real `upf` binary in the middle, a
//! BPF_PROG_RUN live-frames generator on one side and an XDP counting sink on the other.
//!
//! ```text
//!  netns vbPID-gen           netns vbPID-upf                       netns vbPID-sink
//!  gnb 192.168.3.2 ── veth ── n3 192.168.3.1   upf run   n6 192.168.6.1 ── veth ── dn 192.168.6.2
//!                            N4 and the SMF emulator on 127.0.0.1
//! ```
//!
//! Uplink: the generator XDP_TXes G-PDUs out of `gnb`, the counter on `dn` counts the inner
//! packets; downlink: plain packets to the UEs out of `dn`, counted as G-PDUs on `gnb`. In one
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

use serde_json::json;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_io::link::ip;
use upf_loadgen::in_netns;
use upf_loadgen::smf::{Qos, Session, SessionSpec, Smf, SmfConfig, UeAddr};
use upf_loadgen::veth_pair;
use upf_loadgen::xdpgen::{self, Count, Counter, Fixed, GenStats, Generator, Template};

pub(crate) mod churn;

const GNB: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 2);
const UPF_N3: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 1);
const UPF_N6: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 1);
const DN: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 2);
/// UE i is UE_BASE + i (up to 8M sessions inside the pool).
const UE_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
const UE_POOL: &str = "10.128.0.0/9";
const UL_TEID_BASE: u32 = 0x0000_1000;
const DL_TEID_BASE: u32 = 0x0100_0001;
const QFI: u8 = 9;
const COUNTED_PORTS: [u16; 2] = [xdpgen::GTPU_PORT, xdpgen::DST_PORT];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    AfPacket,
    AfXdp,
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
    /// UPF worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    #[arg(long, value_enum, default_value = "uplink")]
    pub direction: Direction,
    /// Offered packets/s (0: as fast as the generator goes).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// The generator's CPU.
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: usize,
    /// The UPF's CPUs, comma-separated (default: every CPU but the generator's).
    #[arg(long, value_delimiter = ',')]
    pub upf_cores: Vec<usize>,
    /// The `upf` binary (default: `upf` next to this executable).
    #[arg(long)]
    pub upf: Option<PathBuf>,
    /// Skip the Linux forwarding baseline.
    #[arg(long)]
    pub no_baseline: bool,
}

/// `ip ARGS`, its stderr in the error.
fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/{key}");
    in_netns(ns, || std::fs::write(&path, value))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{ns}: {path} = {value}: {e}"))
}

fn mac(ns: &str, dev: &str) -> Result<[u8; 6], String> {
    let out = ip(&["-n", ns, "-o", "link", "show", dev])?;
    let s = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| format!("{ns}/{dev}: no MAC address in `ip link`"))?;
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(s.split(':')) {
        *d = u8::from_str_radix(p, 16).map_err(|e| format!("{ns}/{dev}: MAC {s}: {e}"))?;
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
    namespaces: Vec<String>,
    upf: Option<Child>,
    dir: PathBuf,
    /// UDP sockets on the discard port of the gNB and the DN: the UPF's next-hop probes get no
    /// ICMP port unreachable back.
    discard: Vec<std::net::UdpSocket>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop_upf();
        self.discard.clear();
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("upf-bench veth: {e}");
            }
        }
    }
}

impl Rig {
    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    fn build() -> Result<Rig, String> {
        let prefix = format!("vb{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("upf-bench-veth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut rig = Rig {
            prefix,
            namespaces: Vec::new(),
            upf: None,
            dir,
            discard: Vec::new(),
        };
        for role in ["gen", "upf", "sink"] {
            let ns = rig.ns(role);
            ip(&["netns", "add", &ns])?;
            rig.namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for (k, v) in [
                ("net/ipv4/conf/all/rp_filter", "0"),
                ("net/ipv4/conf/default/rp_filter", "0"),
                ("net/ipv6/conf/all/disable_ipv6", "1"),
                ("net/ipv6/conf/default/disable_ipv6", "1"),
                ("net/ipv4/ip_forward", "0"),
            ] {
                sysctl(&ns, k, v)?;
            }
        }
        let (gen, upf, sink) = (rig.ns("gen"), rig.ns("upf"), rig.ns("sink"));
        for (a, da, aa, b, db, ab) in [
            (&gen, "gnb", "192.168.3.2/24", &upf, "n3", "192.168.3.1/24"),
            (&upf, "n6", "192.168.6.1/24", &sink, "dn", "192.168.6.2/24"),
        ] {
            veth_pair((a, da, aa), (b, db, ab))?;
        }
        for (ns, at) in [(&gen, GNB), (&sink, DN)] {
            let s = in_netns(ns, || std::net::UdpSocket::bind((at, 9)))
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{ns}: UDP {at}:9: {e}"))?;
            rig.discard.push(s);
        }
        Ok(rig)
    }

    /// Has each kernel resolve the neighbours of the upf namespace (both ways).
    fn warm_neighbours(&self) {
        let upf = self.ns("upf");
        let _ = in_netns(&upf, || {
            if let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") {
                for p in [GNB, DN] {
                    let _ = s.send_to(&[], (p, 9));
                }
            }
        });
        for (ns, p) in [(self.ns("gen"), UPF_N3), (self.ns("sink"), UPF_N6)] {
            let _ = in_netns(&ns, || {
                if let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") {
                    let _ = s.send_to(&[], (p, 9));
                }
            });
        }
        let until = Instant::now() + Duration::from_secs(2);
        for p in [GNB, DN] {
            let p = p.to_string();
            while Instant::now() < until {
                if ip(&["-n", &upf, "neigh", "show", &p])
                    .unwrap_or_default()
                    .contains("lladdr")
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn config(&self, a: &Args, cores: &[usize]) -> String {
        let b = match a.backend {
            Backend::AfPacket => "af_packet",
            Backend::AfXdp => "af_xdp",
        };
        let cores: Vec<String> = cores.iter().map(ToString::to_string).collect();
        format!(
            "# Written by `upf-bench veth`.\n[n4]\naddress = \"127.0.0.1\"\nheartbeat_interval_s = 3600\n\n\
             [n3]\nbackend = \"{b}\"\ninterface = \"n3\"\naddresses = [\"{UPF_N3}\"]\n\n\
             [n6]\nbackend = \"{b}\"\ninterface = \"n6\"\n\n\
             [workers]\ncount = {}\ncores = [{}]\n\n[[ue_pool]]\nipv4 = \"{UE_POOL}\"\n",
            a.workers,
            cores.join(", ")
        )
    }

    fn start_upf(&mut self, a: &Args, exe: &PathBuf, cores: &[usize]) -> Result<u32, String> {
        let cfg = self.dir.join("upf.toml");
        std::fs::write(&cfg, self.config(a, cores))
            .map_err(|e| format!("{}: {e}", cfg.display()))?;
        let log_path = self.dir.join("upf.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mask: Vec<String> = cores.iter().map(ToString::to_string).collect();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns("upf"),
                "taskset",
                "-c",
                &mask.join(","),
            ])
            .arg(exe)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {} run: {e}", exe.display()))?;
        let pid = child.id();
        self.upf = Some(child);
        Ok(pid)
    }

    fn upf_alive(&mut self) -> Result<(), String> {
        if let Some(st) = self.upf.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            self.upf = None;
            let log = std::fs::read_to_string(self.dir.join("upf.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            return Err(format!(
                "the UPF exited ({st}); its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        Ok(())
    }

    fn stop_upf(&mut self) {
        if let Some(mut child) = self.upf.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }

    /// Associates (retrying until the UPF listens) and establishes `n` sessions.
    fn establish(&mut self, n: u32, stop: &AtomicBool) -> Result<(Smf, Vec<Session>, f64), String> {
        let upf = self.ns("upf");
        let mut smf = in_netns(&upf, || {
            let mut c = SmfConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 8805)));
            c.bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
            c.t1 = Duration::from_millis(500);
            c.n1 = 3;
            c.window = 128;
            Smf::new(c)
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("SMF emulator: {e}"))?;
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            self.upf_alive()?;
            match smf.associate() {
                Ok(_) => break,
                Err(e) if Instant::now() > until => {
                    return Err(format!("PFCP association within 20 s: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
            if stop.load(Ordering::Relaxed) {
                return Err("interrupted".into());
            }
        }
        let specs: Vec<SessionSpec> = (0..n)
            .map(|i| {
                let ue = Ipv4Addr::from(u32::from(UE_BASE) + i);
                let mut s = SessionSpec::new(UeAddr::Static(ue), DL_TEID_BASE + i, GNB);
                s.ul_f_teid = Some((UL_TEID_BASE + i, UPF_N3));
                s.qfi = QFI;
                s.qos = Some(Qos { mbr_kbps: None });
                s
            })
            .collect();
        let start = Instant::now();
        let mut sessions = Vec::with_capacity(specs.len());
        for chunk in specs.chunks(1000) {
            for r in smf.establish_many(chunk) {
                sessions.push(r.map_err(|e| format!("session {}: {e}", sessions.len() + 1))?);
            }
            if stop.load(Ordering::Relaxed) {
                return Err("interrupted".into());
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
            gen_ns: rig.ns("gen"),
            gen_dev: "gnb",
            peer_dev: "n3",
            sink_ns: rig.ns("sink"),
            sink_dev: "dn",
        },
        Direction::Downlink => Sides {
            gen_ns: rig.ns("sink"),
            gen_dev: "dn",
            peer_dev: "n6",
            sink_ns: rig.ns("gen"),
            sink_dev: "gnb",
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

/// Warm-up, then `seconds` of generator against `counter`, then a short drain.
#[allow(clippy::too_many_arguments)]
fn measure(
    g: &Generator,
    s: &Sides,
    counter: &Counter,
    cpu: usize,
    seconds: f64,
    rate: u64,
    warmup: bool,
    stop: &AtomicBool,
) -> Result<Phase, String> {
    let io = |e: std::io::Error| e.to_string();
    if warmup {
        let r = if rate == 0 { 200_000 } else { rate };
        xdpgen::run_in(g, &s.gen_ns, Some(cpu), s.gen_dev, 0.2, r, stop).map_err(io)?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let c0 = counter.read().map_err(io)?;
    let t0 = Instant::now();
    let sirq0 = softirq_ns();
    let gen =
        xdpgen::run_in(g, &s.gen_ns, Some(cpu), s.gen_dev, seconds, rate, stop).map_err(io)?;
    std::thread::sleep(Duration::from_millis(100));
    let c1 = counter.read().map_err(io)?;
    Ok(Phase {
        gen,
        delivered: c1.since(&c0),
        softirq_ns: softirq_ns().saturating_sub(sirq0),
        window: t0.elapsed(),
    })
}

fn templates(a: &Args, rig: &Rig, s: &Sides) -> Result<(Template, Template), String> {
    let io = |e: std::io::Error| e.to_string();
    let macs = (mac(&rig.ns("upf"), s.peer_dev)?, mac(&s.gen_ns, s.gen_dev)?);
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
            .map_err(io)?,
            Template::plain(macs, UE_BASE, DN, false, a.size, a.sessions).map_err(io)?,
        ),
        Direction::Downlink => {
            let t = Template::plain(macs, UE_BASE, DN, true, a.size, a.sessions).map_err(io)?;
            (t.clone(), t)
        }
    })
}

fn upf_exe(a: &Args) -> Result<PathBuf, String> {
    let p = match &a.upf {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("upf"),
    };
    if !p.exists() {
        return Err(format!(
            "{}: no upf binary (build it: cargo build --release -p upf; or give --upf PATH)",
            p.display()
        ));
    }
    Ok(p)
}

fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    stop
}

/// `upf-bench veth`: measures and prints one JSON line.
pub fn run(a: &Args) -> Result<(), String> {
    println!("{}", measure_point(a)?);
    Ok(())
}

pub fn measure_point(a: &Args) -> Result<serde_json::Value, String> {
    if a.sessions == 0 || a.workers == 0 || a.seconds <= 0.0 {
        return Err("--sessions, --workers and --seconds must be positive".into());
    }
    let exe = upf_exe(a)?;
    let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let cores: Vec<usize> = if a.upf_cores.is_empty() {
        let v: Vec<usize> = (0..ncpu).filter(|c| *c != a.gen_cpu).collect();
        if v.is_empty() {
            vec![a.gen_cpu]
        } else {
            v
        }
    } else {
        a.upf_cores.clone()
    };
    let stop = stop_flag();
    let stop = &*stop;
    let load_before = crate::harness::loadavg();
    let io = |e: std::io::Error| e.to_string();
    let mut rig = Rig::build()?;
    let s = sides(&rig, a.direction);
    let (upf_t, plain_t) = templates(a, &rig, &s)?;
    let upf_gen = Generator::new(upf_t).map_err(io)?;
    let counter = Counter::attach_in(&s.sink_ns, s.sink_dev, &COUNTED_PORTS).map_err(io)?;
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
        a.gen_cpu,
        if a.rate == 0 { "flat out".to_string() } else { format!("{} pps", a.rate) }
    );

    // 1. The generator's ceiling: its frames into a counting XDP_DROP on the UPF's veth.
    let ceiling = {
        let c = Counter::attach_in(&rig.ns("upf"), s.peer_dev, &COUNTED_PORTS).map_err(io)?;
        let secs = a.ceiling_seconds.unwrap_or(a.seconds.min(2.0));
        let p = measure(&upf_gen, &s, &c, a.gen_cpu, secs, 0, false, stop)?;
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
        let upf = rig.ns("upf");
        let _pass = Fixed::attach_in(&upf, s.peer_dev, xdpgen::XDP_PASS).map_err(io)?;
        sysctl(&upf, "net/ipv4/ip_forward", "1")?;
        if a.direction == Direction::Downlink {
            ip(&["-n", &upf, "route", "add", UE_POOL, "via", &GNB.to_string()])?;
        }
        rig.warm_neighbours();
        let g = Generator::new(plain_t).map_err(io)?;
        let r = measure(&g, &s, &counter, a.gen_cpu, a.seconds, a.rate, true, stop);
        sysctl(&upf, "net/ipv4/ip_forward", "0")?;
        if a.direction == Direction::Downlink {
            ip(&["-n", &upf, "route", "del", UE_POOL])?;
        }
        let p = r?;
        eprintln!(
            "  Linux forwarding: {:.2} Mpps offered, {:.2} Mpps delivered, softirq {:.0} ns/packet",
            p.offered_mpps(),
            p.delivered_mpps(),
            p.per_packet(p.softirq_ns).unwrap_or(0.0)
        );
        Some(p)
    };
    if stop.load(Ordering::Relaxed) {
        return Err("interrupted".into());
    }

    // 3. The UPF.
    let _pass = match a.backend {
        // AF_PACKET: the veth must accept redirected frames (the UPF attaches nothing).
        Backend::AfPacket => {
            Some(Fixed::attach_in(&rig.ns("upf"), s.peer_dev, xdpgen::XDP_PASS).map_err(io)?)
        }
        Backend::AfXdp => None,
    };
    let pid = rig.start_upf(a, &exe, &cores)?;
    let (smf, sessions, est_s) = rig.establish(a.sessions, stop)?;
    eprintln!(
        "  UPF pid {pid}: {} sessions established in {est_s:.2} s",
        sessions.len()
    );
    rig.warm_neighbours();
    upf_gen.reset().map_err(io)?;
    // Warm-up outside the window (neighbours, first-packet paths).
    let r = if a.rate == 0 { 200_000 } else { a.rate };
    xdpgen::run_in(
        &upf_gen,
        &s.gen_ns,
        Some(a.gen_cpu),
        s.gen_dev,
        0.3,
        r,
        stop,
    )
    .map_err(io)?;
    std::thread::sleep(Duration::from_millis(100));
    let cpu0 = task_cpu(pid);
    let phase = measure(
        &upf_gen, &s, &counter, a.gen_cpu, a.seconds, a.rate, false, stop,
    )?;
    let cpu1 = task_cpu(pid);
    rig.upf_alive()?;
    let threads = cpu_delta(&cpu1, &cpu0);
    let upf_ns: u64 = threads.values().sum();
    drop(smf);
    rig.stop_upf();
    let load_after = crate::harness::loadavg();

    let upf_ns_pp = phase.per_packet(upf_ns);
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
        "sessions": a.sessions,
        "size": a.size,
        "seconds": a.seconds,
        "rate_limit_pps": a.rate,
        "gen_cpu": a.gen_cpu,
        "upf_cores": cores,
        "offered_mpps": phase.offered_mpps(),
        "delivered_mpps": delivered,
        "delivered_gbps": phase.delivered.packets as f64 * a.size as f64 * 8.0
            / phase.gen.elapsed.as_secs_f64().max(1e-9) / 1e9,
        "loss": phase.loss(),
        "upf_cpu_ns_per_packet": upf_ns_pp,
        "upf_cpu_cores": upf_ns as f64 / phase.window.as_secs_f64() / 1e9,
        "upf_threads_cpu_ns": threads,
        "softirq_ns_per_packet": phase.per_packet(phase.softirq_ns),
        "generator_cpu_ns_per_frame": phase.gen.cpu.as_nanos() as f64 / phase.gen.frames.max(1) as f64,
        "sessions_established_per_s": sessions.len() as f64 / est_s.max(1e-9),
        "generator_ceiling_mpps": ceiling.delivered_mpps(),
        "generator_ceiling": phase_json(&ceiling),
        "baseline": baseline.as_ref().map(phase_json),
        "ratio_to_baseline": base_mpps.and_then(ratio),
        "ratio_to_ceiling": ratio(ceiling.delivered_mpps()),
        "load_before": load_before,
        "load_after": load_after,
        "notes": [
            "counted at the receiver (an XDP program on the far veth); offered = frames the generator's program ran on",
            "UPF CPU = every thread of the upf process (schedstat) over the window / packets delivered; workers poll for 50 µs before sleeping, so below saturation it includes some idle polling",
            "veth NAPI runs on the sending CPU: receiving into the UPF's veth (XDP / skb building, AF_XDP copy) is paid on the generator's CPU, and the veth into the sink on the UPF's; softirq = all CPUs' softirq time from /proc/stat (10 ms ticks) / packets delivered",
            "baseline = Linux IP forwarding of the same inner packets (no GTP-U) through the upf namespace, UPF stopped, ip_forward=1, XDP_PASS on the ingress veth",
        ],
    }))
}
