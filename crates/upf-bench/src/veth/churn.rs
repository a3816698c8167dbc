//! Attach/detach churn during traffic (`upf-bench control`, issue #6): the veth rig of the
//! parent module with `upf run` in the middle and background sessions carrying uplink traffic
//! at a fixed rate; a window without churn, then an identical one while the SMF emulator
//! establishes and deletes other sessions at `rate` per second. Loss of both windows, the
//! churn achieved and its response times.
//!
//! A child of `veth` so that it reuses the rig, the generator set-up and the phase measurement
//! as they are (their private items are visible here) rather than a copy of them.

use super::{
    measure, sides, task_cpu, templates, Autogroup, Backend, Direction, Phase, Rig, COUNTED_PORTS,
    DL_TEID_BASE, GNB, QFI, UE_BASE, UL_TEID_BASE, UPF_N3,
};
use crate::control::{admin_get, counters_delta, drop_counters, latency_json, rss_bytes, s0_spec};
use anyhow::{anyhow, bail};
use clap::Parser;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_loadgen::smf::{Session, Smf, UeAddr};
use upf_loadgen::xdpgen::{self, Counter, Fixed, Generator};

/// Churn sessions take indices `background ..= background + SPAN` round robin (UE address and
/// TEIDs from the index, as the background's): a session lives for one tick, far less than a
/// lap, so an index is free again when it comes round.
const SPAN: u64 = 1_000_000;
/// How often the churn loop attaches what is due and detaches the previous batch.
const TICK: Duration = Duration::from_millis(10);

/// What the churn measurement is told.
#[derive(Debug, Clone)]
pub(crate) struct Churn {
    /// Attach + detach per second.
    pub rate: u64,
    /// Seconds of the window with churn …
    pub seconds: f64,
    /// … and of each window without.
    pub quiet_seconds: f64,
    /// Churn sessions ask the UPF for their uplink TEID (CHOOSE) and UE address (CHV4).
    pub upf_allocates: bool,
    /// Seconds into the churn window after which the UPF's RSS should stay flat.
    pub rss_warmup: f64,
    /// Sessions carrying the traffic, established before the windows.
    pub background: u32,
    /// Offered uplink packets/s, round robin over the background sessions.
    pub traffic_pps: u64,
    pub size: usize,
    pub backend: Backend,
    pub workers: usize,
    pub rig: super::RigArgs,
}

/// The parent's arguments, parsed from a command line so that options added there later take
/// their defaults here.
#[derive(Parser)]
struct VethCli {
    #[command(flatten)]
    a: super::Args,
}

fn veth_args(c: &Churn) -> anyhow::Result<super::Args> {
    let mut v: Vec<String> = [
        "veth",
        "--no-baseline",
        // One QoS flow: the background sessions' shape is not what is measured.
        "--high-share",
        "0",
        "--direction",
        "uplink",
        "--backend",
        match c.backend {
            Backend::AfPacket => "af-packet",
            Backend::AfXdp => "af-xdp",
        },
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    for (k, x) in [
        ("--sessions", c.background.to_string()),
        ("--size", c.size.to_string()),
        ("--seconds", c.seconds.to_string()),
        ("--rate", c.traffic_pps.to_string()),
        ("--workers", c.workers.to_string()),
    ] {
        v.extend([k.to_string(), x]);
    }
    let mut a = VethCli::try_parse_from(v).map(|c| c.a)?;
    a.rig = c.rig.clone();
    Ok(a)
}

/// What the churn loop did inside its window.
#[derive(Debug, Default)]
struct Loop {
    attached: u64,
    detached: u64,
    failed: u64,
    first_error: Option<String>,
    elapsed: Duration,
    establish: Vec<Duration>,
    delete: Vec<Duration>,
    /// The emulator thread's CPU time.
    cpu: Duration,
}

fn fail(l: &mut Loop, e: String) {
    l.failed += 1;
    l.first_error.get_or_insert(e);
}

fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// The spec of churn session `index` (an index past the background's): UE address and uplink
/// TEID from the index, or left to the UPF.
fn churn_spec(index: u32, upf_allocates: bool) -> upf_loadgen::smf::SessionSpec {
    let mut s = s0_spec(
        std::net::Ipv4Addr::from(u32::from(UE_BASE) + index),
        Some((UL_TEID_BASE + index, UPF_N3)),
        DL_TEID_BASE + index,
        GNB,
        QFI,
    );
    if upf_allocates {
        s.ue = UeAddr::Choose;
        s.ul_f_teid = None;
    }
    s
}

/// The UPF's RSS every second until `done`: (seconds since the start, bytes).
fn sample_rss(pid: u32, done: &AtomicBool, stop: &AtomicBool) -> Vec<(f64, u64)> {
    let start = Instant::now();
    let mut v = Vec::new();
    let mut next = start;
    while !done.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
        if let Some(b) = rss_bytes(pid) {
            v.push((start.elapsed().as_secs_f64(), b));
        }
        next += Duration::from_secs(1);
        while Instant::now() < next && !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if let Some(b) = rss_bytes(pid) {
        v.push((start.elapsed().as_secs_f64(), b));
    }
    v
}

/// RSS at the churn's start, after the warm-up, at its end, and its peak.
fn rss_json(v: &[(f64, u64)], warmup: f64) -> Value {
    let at = v.iter().find(|(t, _)| *t >= warmup).copied();
    let end = v.last().copied();
    #[allow(clippy::cast_precision_loss)]
    let ratio = match (at, end) {
        (Some((_, w)), Some((_, e))) if w > 0 => Some(e as f64 / w as f64 - 1.0),
        _ => None,
    };
    json!({
        "warmup_seconds": warmup,
        "start_bytes": v.first().map(|x| x.1),
        "after_warmup_bytes": at.map(|x| x.1),
        "end_bytes": end.map(|x| x.1),
        "end_seconds": end.map(|x| x.0),
        "max_bytes": v.iter().map(|x| x.1).max(),
        "end_vs_warmup": ratio,
        "samples": v.iter().map(|(t, b)| json!([(t * 10.0).round() / 10.0, b])).collect::<Vec<_>>(),
    })
}

/// Every tick: establishes the sessions due at `rate`/s, then deletes the batch of the tick
/// before; until `done`. The last batch is deleted after the window (not counted).
fn churn_loop(smf: &mut Smf, c: &Churn, done: &AtomicBool, stop: &AtomicBool) -> Loop {
    let mut l = Loop::default();
    let cpu0 = thread_cpu();
    smf.record_response_times(true);
    let start = Instant::now();
    let mut prev: Vec<Session> = Vec::new();
    let mut k = 0u64;
    // A stall is not made up by one huge burst: at most 10 ticks' worth a batch.
    let cap = (c.rate / 10).max(1);
    while !done.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let due = (start.elapsed().as_secs_f64() * c.rate as f64) as u64;
        let n = due.saturating_sub(k).min(cap);
        if n == 0 {
            std::thread::sleep(TICK.min(Duration::from_millis(2)));
            continue;
        }
        let specs: Vec<_> = (k..k + n)
            .map(|j| {
                let i = u64::from(c.background) + j % SPAN;
                churn_spec(u32::try_from(i).unwrap_or(u32::MAX), c.upf_allocates)
            })
            .collect();
        k += n;
        let mut new = Vec::with_capacity(specs.len());
        for r in smf.establish_many(&specs) {
            match r {
                Ok(s) => new.push(s),
                Err(e) => fail(&mut l, format!("establishment: {e}")),
            }
        }
        l.attached += new.len() as u64;
        l.establish.extend(smf.take_response_times());
        for r in smf.delete_many(&prev) {
            match r {
                Ok(_) => l.detached += 1,
                Err(e) => fail(&mut l, format!("deletion: {e}")),
            }
        }
        l.delete.extend(smf.take_response_times());
        prev = new;
        // Next tick.
        let next =
            start + TICK.mul_f64((start.elapsed().as_secs_f64() / TICK.as_secs_f64()).ceil());
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    l.elapsed = start.elapsed();
    l.cpu = thread_cpu().saturating_sub(cpu0);
    smf.record_response_times(false);
    for r in smf.delete_many(&prev) {
        if let Err(e) = r {
            fail(&mut l, format!("deletion after the window: {e}"));
        }
    }
    l
}

fn phase_json(p: &Phase, upf_cpu_ns: u64, drops: &BTreeMap<String, u64>) -> Value {
    json!({
        "upf_drops": drops,
        "offered_pps": p.gen.frames as f64 / p.gen.elapsed.as_secs_f64().max(1e-9),
        "delivered_pps": p.delivered.packets as f64 / p.gen.elapsed.as_secs_f64().max(1e-9),
        "frames": p.gen.frames,
        "delivered": p.delivered.packets,
        "lost": p.gen.frames.saturating_sub(p.delivered.packets),
        "loss": p.loss(),
        "seconds": p.gen.elapsed.as_secs_f64(),
        "upf_cpu_cores": upf_cpu_ns as f64 / p.window.as_secs_f64().max(1e-9) / 1e9,
    })
}

/// Measures both windows; one JSON object.
pub(crate) fn run(c: &Churn, stop: &AtomicBool) -> anyhow::Result<Value> {
    if c.rate == 0
        || c.seconds <= 0.0
        || c.quiet_seconds <= 0.0
        || c.background == 0
        || c.traffic_pps == 0
    {
        bail!("churn: --churn, --churn-seconds, --churn-quiet-seconds, --background and --rate must be positive");
    }
    let a = veth_args(c)?;
    let exe = a.rig.upf_exe()?;
    let cores = a.rig.upf_cpus();
    let _autogroup = if a.rig.nice == 0 {
        None
    } else {
        Some(Autogroup::renice(a.rig.nice)?)
    };
    let mut rig = Rig::build()?;
    let s = sides(&rig, Direction::Uplink);
    let (t, _) = templates(&a, &rig, &s)?;
    let g = Generator::new(t)?;
    let counter = Counter::attach_in(&s.sink_ns, s.sink_dev, &COUNTED_PORTS)?;
    rig.warm_neighbours();
    let _pass = match a.backend {
        Backend::AfPacket => Some(Fixed::attach_in(
            &rig.upf_ns(),
            s.peer_dev,
            xdpgen::XDP_PASS,
        )?),
        Backend::AfXdp => None,
    };
    let pid = rig.start_upf(&a, &exe, &cores)?;
    let (mut smf, background, _) = rig.establish(a.sessions, a.high_share > 0.0, stop)?;
    eprintln!(
        "upf-bench control: churn {}/s for {} s beside {} background sessions at {} pps ({} B); UPF pid {pid}",
        c.rate,
        c.seconds,
        background.len(),
        c.traffic_pps,
        c.size
    );
    rig.warm_neighbours();
    g.reset()?;
    xdpgen::run_in(
        &g,
        &s.gen_ns,
        Some(a.rig.gen_cpu),
        a.rig.nice,
        s.gen_dev,
        0.3,
        a.rate,
        stop,
    )?;
    std::thread::sleep(Duration::from_millis(100));

    // Without churn, with, and without again: a difference that is the order's shows.
    let upf_ns = rig.upf_ns();
    let drops = || drop_counters(&admin_get(&upf_ns, "/metrics").unwrap_or_default());
    // One measured window of traffic at the background rate.
    let window = |seconds: f64| {
        measure(
            &g,
            &s,
            &counter,
            (a.rig.gen_cpu, a.rig.nice),
            seconds,
            a.rate,
            false,
            stop,
        )
    };
    let d0 = drops();
    let cpu0 = task_cpu(pid);
    let quiet = window(c.quiet_seconds)?;
    let cpu1 = task_cpu(pid);
    let d1 = drops();
    let done = AtomicBool::new(false);
    let (busy, churn, rss) = std::thread::scope(|sc| {
        let h = sc.spawn(|| churn_loop(&mut smf, c, &done, stop));
        let r = sc.spawn(|| sample_rss(pid, &done, stop));
        let p = window(c.seconds);
        done.store(true, Ordering::Relaxed);
        (p, h.join(), r.join())
    });
    let rss = rss.map_err(|_| anyhow!("the RSS sampler panicked"))?;
    let cpu2 = task_cpu(pid);
    let d2 = drops();
    let busy = busy?;
    let mut l = churn.map_err(|_| anyhow!("the churn thread panicked"))?;
    let cpu3 = task_cpu(pid);
    let d3 = drops();
    let after = window(c.quiet_seconds)?;
    let cpu4 = task_cpu(pid);
    let d4 = drops();
    rig.upf_alive()?;
    let left = smf.session_count();
    drop(smf);
    rig.stop_upf();
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    let sum = |m: &std::collections::BTreeMap<String, u64>| m.values().sum::<u64>();
    let (q_ns, b_ns, a_ns) = (
        sum(&cpu1).saturating_sub(sum(&cpu0)),
        sum(&cpu2).saturating_sub(sum(&cpu1)),
        sum(&cpu4).saturating_sub(sum(&cpu3)),
    );
    let frames = quiet.gen.frames + after.gen.frames;
    let delivered = quiet.delivered.packets + after.delivered.packets;
    #[allow(clippy::cast_precision_loss)]
    let quiet_loss = if frames == 0 {
        0.0
    } else {
        (1.0 - delivered as f64 / frames as f64).max(0.0)
    };
    let secs = l.elapsed.as_secs_f64().max(1e-9);
    let ops = (l.attached + l.detached).max(1) as f64;
    let v = json!({
        "target_per_s": c.rate,
        "seconds": c.seconds,
        "quiet_seconds": c.quiet_seconds,
        "upf_allocates": c.upf_allocates,
        "rss": rss_json(&rss, c.rss_warmup),
        "background_sessions": background.len(),
        "traffic_pps": c.traffic_pps,
        "size": c.size,
        "backend": c.backend,
        "workers": a.workers,
        "gen_cpu": a.rig.gen_cpu,
        "upf_cores": cores,
        "netns_prefix": rig.prefix,
        "without_churn": phase_json(&quiet, q_ns, &counters_delta(&d1, &d0)),
        "with_churn": phase_json(&busy, b_ns, &counters_delta(&d2, &d1)),
        "without_churn_after": phase_json(&after, a_ns, &counters_delta(&d4, &d3)),
        "loss_without_churn": quiet_loss,
        "loss_with_churn": busy.loss(),
        "attached": l.attached,
        "detached": l.detached,
        "failed": l.failed,
        "first_error": l.first_error,
        "attach_per_s": l.attached as f64 / secs,
        "detach_per_s": l.detached as f64 / secs,
        "establish_latency_us": latency_json(&mut l.establish),
        "delete_latency_us": latency_json(&mut l.delete),
        "upf_extra_cpu_us_per_op": (b_ns as f64 - (q_ns + a_ns) as f64 / 2.0) / 1e3 / ops,
        "smf_cpu_us_per_op": l.cpu.as_nanos() as f64 / 1e3 / ops,
        "sessions_left_at_smf": left,
    });
    eprintln!(
        "  loss without churn {:.4} % of {} frames, with churn {:.4} % of {}, without again {:.4} % of {}; \
         {:.0} attach/s, {:.0} detach/s, {} failed",
        quiet.loss() * 100.0,
        quiet.gen.frames,
        busy.loss() * 100.0,
        busy.gen.frames,
        after.loss() * 100.0,
        after.gen.frames,
        l.attached as f64 / secs,
        l.detached as f64 / secs,
        l.failed
    );
    Ok(v)
}
