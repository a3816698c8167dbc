//! `upf-bench state`: what persisted state (#29) costs and buys, on the real `upf` binary.
//!
//! For each `--sessions N`, in the control rig's namespace (N4 and N3 on its loopback, N6 a
//! TUN device, the SMF emulator on its own CPU):
//! 1. establishments/s of N sessions on a fresh UPF without `[state]`, then on one with it
//!    (the same emulator, window and session shape as `upf-bench control`);
//! 2. on the one with the store, once the store has written everything (`upf_state_pending_
//!    writes` 0): `kill -9`, `upf run` again, and a G-PDU of a probe session sent every
//!    millisecond from the new process's start: `restart_resume_ms` is when the first one
//!    comes out of N6 (a socket of the namespace counts it); then one G-PDU of every session,
//!    repeated for those not seen (up to 10 s): `sessions_lost` is N minus the sessions that
//!    forwarded, `restart_all_ms` when the last did.
//!
//! 3. failover (failover.rs): the same N sessions on shard a's instance of a two-instance
//!    cluster on etcd; `kill -9` of it and its address moved to shard b's instance:
//!    `failover_resume_ms` is when a probe session of a's comes out of b's N6,
//!    `failover_sessions_lost` as above.

use crate::control::{self, admin_get, samples, timed, Daemon, Extras};
use crate::veth;
use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use upf_loadgen::gnb::{encap_uplink, UeSession};
use upf_loadgen::smf::{Session, SessionSpec, Smf};
use upf_netns::in_netns;

/// Where uplink packets go: an address of the namespace's loopback, reached through the TUN.
const SINK: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);
const SINK_PORT: u16 = 9000;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Sessions, comma-separated: one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    pub sessions: Vec<u32>,
    /// Requests in flight (the emulator's window).
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// UPF worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    #[command(flatten)]
    pub rig: veth::RigArgs,
}

/// One JSON line per `--sessions`.
pub fn run(a: &Args) -> anyhow::Result<()> {
    if !control::is_root() {
        bail!("state: needs root (a network namespace, a TUN device)");
    }
    let exe = a.rig.upf_exe()?;
    let stop = veth::stop_flag();
    let cores = a.rig.upf_cpus();
    for &n in &a.sessions {
        let v = std::thread::scope(|s| {
            s.spawn(|| {
                let _ = core_affinity::set_for_current(core_affinity::CoreId { id: a.rig.gen_cpu });
                measure(a, n, &exe, &cores, &stop)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))
        })??;
        println!("{v}");
    }
    Ok(())
}

/// `n` sessions whose downlink goes to the gNB at `gnb`.
pub(crate) fn specs(n: u32, gnb: Ipv4Addr) -> Vec<SessionSpec> {
    (0..n)
        .map(|i| {
            let ue = Ipv4Addr::from(u32::from(control::UE_BASE) + i);
            control::s0_spec(ue, None, control::DL_TEID_BASE + i, gnb, control::QFI)
        })
        .collect()
}

/// Establishments/s of `n` sessions on a fresh UPF (with or without the store); the UPF
/// and its sessions.
fn establish(
    a: &Args,
    n: u32,
    exe: &std::path::Path,
    cores: &[usize],
    stop: &AtomicBool,
    state: bool,
) -> anyhow::Result<Established> {
    let x = Extras {
        n6_tun: true,
        state,
    };
    let mut d = Daemon::start_with(exe, cores, a.workers, n, &x)?;
    let mut smf = d.smf(a.window, stop)?;
    let before = thread_cpu_ns(d.pid());
    let (est, sessions) = timed(
        &mut smf,
        d.pid(),
        &specs(n, control::GNB),
        stop,
        Smf::establish_many,
    )?;
    d.alive()?;
    if est.ok != u64::from(n) {
        bail!("{} of {n} establishments succeeded", est.ok);
    }
    // The store's writer goes on after the last response: its share is counted once it
    // has caught up.
    if state {
        wait_store(d.ns.name(), n)?;
    }
    let after = thread_cpu_ns(d.pid());
    let per_est: BTreeMap<String, f64> = after
        .into_iter()
        .map(|(k, v)| {
            let us = v.saturating_sub(*before.get(&k).unwrap_or(&0)) as f64 / 1e3 / f64::from(n);
            (k, us)
        })
        .filter(|(_, us)| *us >= 0.05)
        .collect();
    let rate = est.ok as f64 / est.seconds.max(1e-9);
    eprintln!(
        "  {n} sessions, store {}: {rate:.0} establishments/s; UPF CPU µs a session by thread {per_est:.1?}",
        if state { "on" } else { "off" }
    );
    Ok(Established {
        rate,
        cpu_us: per_est,
        d,
        sessions,
        smf,
    })
}

/// A UPF that established its sessions, and what that cost.
struct Established {
    rate: f64,
    /// The UPF's CPU time per establishment, µs, by thread name (threads of one name summed).
    cpu_us: BTreeMap<String, f64>,
    d: Daemon,
    sessions: Vec<Session>,
    smf: Smf,
}

/// CPU time of each thread of `pid` (schedstat), ns, summed by thread name.
fn thread_cpu_ns(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(e.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        *out.entry(comm.trim().to_string()).or_insert(0) += ns;
    }
    out
}

/// Until the store has written every session (within 60 s).
fn wait_store(ns: &str, n: u32) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(60);
    while metric(ns, "upf_state_pending_writes") != Some(0)
        || metric(ns, "upf_state_writes_total").unwrap_or(0) < u64::from(n)
    {
        if Instant::now() > until {
            bail!("the store did not catch up within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn metric(ns: &str, name: &str) -> Option<u64> {
    let m = admin_get(ns, "/metrics").ok()?;
    samples(&m)
        .into_iter()
        .find_map(|(k, _, v)| (k == name).then_some(v))
}

fn measure(
    a: &Args,
    n: u32,
    exe: &std::path::Path,
    cores: &[usize],
    stop: &AtomicBool,
) -> anyhow::Result<Value> {
    let off = establish(a, n, exe, cores, stop, false)?;
    let (off_rate, off_cpu) = (off.rate, off.cpu_us);
    drop((off.smf, off.d));
    let Established {
        rate: on_rate,
        cpu_us: on_cpu,
        mut d,
        sessions,
        smf,
    } = establish(a, n, exe, cores, stop, true)?;
    let ns = d.ns.name().to_string();
    let ues: Vec<UeSession> = sessions.iter().map(UeSession::from).collect();
    let sink = Sink::start(&ns)?;
    let gnb = in_netns(&ns, || UdpSocket::bind((control::GNB, 0)))?.context("gNB socket")?;
    d.kill9();
    let t0 = Instant::now();
    d.spawn(exe)?;
    // A probe session, sent every millisecond until one comes out.
    let probe = ues.len() / 2;
    let resume = loop {
        if let Some(t) = sink.first_after(t0) {
            break t.duration_since(t0);
        }
        if t0.elapsed() > Duration::from_secs(60) || stop.load(Ordering::Relaxed) {
            bail!(
                "no packet forwarded within 60 s of the restart:\n{}",
                d.log_text()
            );
        }
        send(&gnb, &ues[probe], probe)?;
        std::thread::sleep(Duration::from_millis(1));
    };
    let (all, lost) = sweep(&gnb, &ues, &sink, t0, resume)?;
    // What the restarted UPF said of its store (the first start's lines come before).
    let log = d.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("upf::state") && (l.contains("checked in") || l.contains("restored"))
        })
        .collect();
    let restored: Vec<String> = lines[lines.len().saturating_sub(2)..]
        .iter()
        .map(|l| l.split_once("upf::state: ").map_or(*l, |x| x.1).to_string())
        .collect();
    drop(smf);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "  restart: forwarding again after {:.0} ms, every session after {}, {} lost",
        ms(resume),
        all.map_or("-".into(), |t| format!("{:.0} ms", ms(t))),
        lost
    );
    drop((sink, d));
    let fo = crate::failover::measure(a, n, exe, cores, stop)?;
    Ok(json!({
        "sessions": n,
        "window": a.window,
        "workers": a.workers,
        "est_per_s_store_off": off_rate,
        "est_per_s_store_on": on_rate,
        "est_ratio": on_rate / off_rate.max(1e-9),
        "upf_cpu_us_per_est_store_off": off_cpu,
        "upf_cpu_us_per_est_store_on": on_cpu,
        "restart_resume_ms": ms(resume),
        "restart_all_ms": all.map(ms),
        "sessions_lost": lost,
        "est_per_s_store_etcd": fo.est_per_s,
        "failover_resume_ms": fo.resume_ms,
        "failover_all_ms": fo.all_ms,
        "failover_sessions_lost": fo.lost,
        "failover_pfcp_ms": fo.pfcp_ms,
        "failover_same_recovery": fo.same_recovery,
        "upf_said": restored,
        "survivor_said": fo.said,
        "notes": [
            "restart_resume_ms: from the new `upf run`'s start (after kill -9) to the first G-PDU of a probe session forwarded to N6",
            "restart_all_ms: until a G-PDU of every session was forwarded (sent once each, again for those not seen): includes the sweep's own ~0.7 s at 100k",
            "upf_cpu_us_per_est_*: the UPF's CPU time by thread over the establishments (store on: until the store caught up), per session",
            "est_per_s_store_etcd: the same establishments on a cluster's instance, its store a one-member etcd on the same machine, while the other instance, on the same CPU, installs them too (hot standby)",
            "failover_resume_ms: from kill -9 of shard a's instance (its address moved to b's at once) to the first G-PDU of a probe session of a's forwarded by b (a hot standby forwards them before it has taken a over)",
            "failover_pfcp_ms: from the kill to shard a's N4 answering a Heartbeat again (from b, once it took a over: the lease TTL is 2 s)",
        ],
    }))
}

/// After forwarding resumed (`resume` after `t0`): one G-PDU of every session, again for
/// those not seen (up to 10 s); when the last was seen, and how many never were.
pub(crate) fn sweep(
    gnb: &UdpSocket,
    ues: &[UeSession],
    sink: &Sink,
    t0: Instant,
    resume: Duration,
) -> anyhow::Result<(Option<Duration>, usize)> {
    let mut missing: Vec<usize> = (0..ues.len()).collect();
    let mut all = None;
    while !missing.is_empty() && t0.elapsed() < resume + Duration::from_secs(10) {
        for (k, &i) in missing.iter().enumerate() {
            send(gnb, &ues[i], i)?;
            if k % 64 == 63 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let seen = sink.seen();
        missing.retain(|&i| !seen.get(i).copied().unwrap_or(false));
        if missing.is_empty() {
            all = sink.last().map(|t| t.duration_since(t0));
        }
    }
    Ok((all, missing.len()))
}

/// A G-PDU of session `i` to the UPF's N3: an inner UDP datagram from its UE to the sink
/// carrying `i`.
pub(crate) fn send(sock: &UdpSocket, s: &UeSession, i: usize) -> anyhow::Result<()> {
    const HEAD: usize = 64;
    let mut buf = [0u8; HEAD + 32];
    let ip = &mut buf[HEAD..];
    let len = 32u16;
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&s.ue.octets());
    ip[16..20].copy_from_slice(&SINK.octets());
    let sum = upf_wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip[20..22].copy_from_slice(&5000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&SINK_PORT.to_be_bytes());
    ip[24..26].copy_from_slice(&12u16.to_be_bytes());
    ip[28..32].copy_from_slice(&u32::try_from(i).unwrap_or(u32::MAX).to_be_bytes());
    let at = encap_uplink(&mut buf, HEAD, 32, s).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let _ = sock.send_to(&buf[at..], s.upf_n3);
    Ok(())
}

/// A socket on the namespace's sink address counting which sessions' datagrams arrived.
pub(crate) struct Sink {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<SinkState>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct SinkState {
    seen: Vec<bool>,
    arrivals: Vec<Instant>,
}

impl Sink {
    pub(crate) fn start(ns: &str) -> anyhow::Result<Self> {
        let add = std::process::Command::new("ip")
            .args(["-n", ns, "addr", "add", &format!("{SINK}/32"), "dev", "lo"])
            .status()?;
        if !add.success() {
            bail!("ip addr add {SINK} in {ns}");
        }
        let sock = in_netns(ns, || {
            UdpSocket::bind(SocketAddr::new(IpAddr::V4(SINK), SINK_PORT))
        })?
        .context("sink socket")?;
        sock.set_read_timeout(Some(Duration::from_millis(20)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(SinkState::default()));
        let (s, st) = (stop.clone(), state.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !s.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let at = Instant::now();
                    let Some(i) = buf
                        .get(..4)
                        .filter(|_| n >= 4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    else {
                        continue;
                    };
                    let mut g = st.lock().unwrap_or_else(|e| e.into_inner());
                    if g.seen.len() <= i {
                        g.seen.resize(i + 1, false);
                    }
                    g.seen[i] = true;
                    g.arrivals.push(at);
                }
            }
        });
        Ok(Self {
            stop,
            state,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn first_after(&self, t: Instant) -> Option<Instant> {
        self.lock().arrivals.iter().copied().find(|&a| a > t)
    }

    fn last(&self) -> Option<Instant> {
        self.lock().arrivals.last().copied()
    }

    fn seen(&self) -> Vec<bool> {
        self.lock().seen.clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
