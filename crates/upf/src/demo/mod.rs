//! `upf demo`: the whole UPF on one machine in one command. It builds three network
//! namespaces joined by veth pairs (upf_netns::topology's layout), runs this binary's
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

mod api;
mod progress;
mod sessions;
mod summary;
mod topology;
mod traffic;

use anyhow::{anyhow, bail, Context};
use api::upf_api;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use topology::{clean, ns_exists, signal};
use traffic::Traffic;
use upf_loadgen::smf::{Session, Smf};
use upf_netns::topology::{Topology, DN, GNB, SMF, UPF_N3, UPF_N4, UPF_N6};

/// The demo's namespaces are `upfdemo-ue`, `upfdemo-upf` and `upfdemo-dn` (a test checks the
/// names below are the layout's).
const PREFIX: &str = "upfdemo";
pub const UE_NS: &str = "upfdemo-ue";
pub const UPF_NS: &str = "upfdemo-upf";
pub const DN_NS: &str = "upfdemo-dn";
pub const NAMESPACES: [&str; 3] = [UE_NS, UPF_NS, DN_NS];

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
pub fn run(a: &Args) -> anyhow::Result<Outcome> {
    preflight()?;
    if a.clean {
        clean()?;
        return Ok(Outcome::Completed);
    }
    validate(a)?;
    let left: Vec<&str> = NAMESPACES.into_iter().filter(|n| ns_exists(n)).collect();
    if !left.is_empty() {
        bail!(
            "network namespace(s) {} exist already: another `upf demo` is running, or one was \
             killed before it could clean up. `upf demo --clean` removes them (and stops a UPF \
             still running in them).",
            left.join(", ")
        );
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
fn signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop.clone()))
            .context("signal handler")?;
    }
    Ok(stop)
}

fn preflight() -> anyhow::Result<()> {
    if !upf_netns::is_root() {
        bail!(
            "needs root: it creates network namespaces and veth pairs and runs the UPF \
                    on raw sockets. Run it as `sudo upf demo`."
        );
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(anyhow!(
            "`ip -V` failed ({}): is iproute2 installed?",
            o.status
        )),
        Err(e) => Err(anyhow!(
            "cannot run `ip` ({e}): install iproute2 (apt-get install iproute2) and make sure \
             `ip` is on PATH"
        )),
    }
}

fn validate(a: &Args) -> anyhow::Result<()> {
    if !(1..=65_534).contains(&a.sessions) {
        bail!(
            "--sessions {}: between 1 and 65534 (the UE pool is {UE_POOL})",
            a.sessions
        );
    }
    if a.seconds == 0 {
        bail!("--seconds: at least 1");
    }
    if !(1..=10_000_000).contains(&a.rate) {
        bail!("--rate {}: between 1 and 10000000 pps", a.rate);
    }
    if let Some(w) = a.workers {
        if !(1..=64).contains(&w) {
            bail!("--workers {w}: between 1 and 64");
        }
    }
    if a.mbr_kbps == 0 {
        bail!("--mbr-kbps: at least 1");
    }
    Ok(())
}

/// Everything the demo made, undone by [`Demo::teardown`] (idempotent; also run on drop).
#[derive(Debug)]
struct Demo {
    dir: PathBuf,
    topology: Option<Topology>,
    daemon: Option<Child>,
    smf: Option<Smf>,
    sessions: Vec<Session>,
    traffic: Option<Traffic>,
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
    fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("upf-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        Ok(Self {
            dir,
            topology: None,
            daemon: None,
            smf: None,
            sessions: Vec::new(),
            traffic: None,
            established: 0,
            rate: 0,
            workers: 1,
            backend: DemoBackend::AfPacket,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("upf.log")
    }

    fn run(&mut self, a: &Args, stop: &AtomicBool) -> anyhow::Result<Outcome> {
        self.backend = a.backend;
        self.rate = a.rate;
        self.workers = a.workers.unwrap_or(match a.backend {
            DemoBackend::AfXdp => 1,
            _ => 2,
        });
        let interrupted = || {
            if stop.load(Relaxed) {
                Err(anyhow!("interrupted"))
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

    fn start_upf(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        let cfg = self.dir.join("upf.toml");
        std::fs::write(&cfg, self.config()).with_context(|| format!("{}", cfg.display()))?;
        let log_path = self.log_path();
        let log =
            std::fs::File::create(&log_path).with_context(|| format!("{}", log_path.display()))?;
        let exe = std::env::current_exe().context("this program's path")?;
        let child = Command::new("ip")
            .args(["netns", "exec", UPF_NS])
            .arg(&exe)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: Ctrl-C reaches the demo only, which stops the UPF last.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting `ip netns exec {UPF_NS} upf run`"))?;
        let pid = child.id();
        self.daemon = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.exited() {
                bail!("the UPF exited during start-up ({st})");
            }
            if upf_api("/api/counters").is_ok() {
                break;
            }
            if stop.load(Relaxed) {
                bail!("interrupted");
            }
            if Instant::now() > until {
                bail!("the UPF did not answer on its admin endpoint within 20 s");
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

    /// The UPF's exit status if it has exited (it is then no longer ours to stop).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let st = self.daemon.as_mut()?.try_wait().ok().flatten()?;
        self.daemon = None;
        Some(st)
    }

    fn check_daemon(&mut self) -> anyhow::Result<()> {
        if let Some(st) = self.exited() {
            bail!("the UPF exited ({st})");
        }
        Ok(())
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
        if let Some(t) = self.topology.take() {
            drop(t);
            done.push(format!("namespaces {} removed", NAMESPACES.join(", ")));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
