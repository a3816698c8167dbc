//! Online engine swaps under traffic (`upf-bench veth --swaps N`): the veth rig with `upf run`
//! started on the XDP engine and N sessions; the generator at `--rate` for a window without
//! swaps, then for one during which the bench moves every session to the other engine N times
//! (user, xdp, user, …: `POST /api/engine/MODE` on the UPF's admin endpoint, what `upf engine
//! set` does, each awaited until `swap.done` in `GET /api/engine`). Per window: frames offered
//! minus delivered, and the longest gap between two consecutive arrivals at the sink (any
//! flow, [`Measures::gap`]).
//!
//! A child of `veth` so that it reuses the rig, the generator set-up and the phase measurement
//! as they are.

use super::{
    drained, measure, sides, softirq_ns, stop_flag, templates, Args, Autogroup, Backend, Engine,
    Phase, Rig, Sides, COUNTED_PORTS,
};
use crate::control::{admin_get, admin_post};
use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upf_loadgen::xdpgen::{self, Counter, Generator, Measures};

/// Longest a swap may take before the run fails.
const SWAP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a swap's status is asked for.
const POLL: Duration = Duration::from_millis(5);

/// Both windows; one JSON object.
pub(crate) fn run(a: &Args, swaps: u32) -> anyhow::Result<Value> {
    if a.engine != Engine::Xdp || a.backend != Backend::AfXdp {
        bail!("--swaps: give --engine xdp (with the af-xdp backend): the UPF must start with the XDP engine loaded");
    }
    if a.rate == 0 {
        bail!("--swaps: give --rate, the offered packets/s of both windows");
    }
    if swaps == 0 || a.sessions == 0 || a.workers == 0 || a.seconds <= 0.0 {
        bail!("--swaps, --sessions, --workers and --seconds must be positive");
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
    let (t, _) = templates(a, &rig, &s)?;
    let g = Generator::new(t)?;
    let gap = Measures {
        latency: None,
        gap: true,
    };
    let counter = Counter::attach_in_with(&s.sink_ns, s.sink_dev, &COUNTED_PORTS, gap)?;
    rig.warm_neighbours();
    let pid = rig.start_upf(a, &exe, &cores)?;
    let (smf, sessions, _) = rig.establish(a.sessions, a.high_share > 0.0, stop)?;
    let upf_ns = rig.upf_ns();
    eprintln!(
        "upf-bench veth: {:?}, {} sessions on the XDP engine, {} B, {} pps; UPF pid {pid}; {} s without swaps, then {swaps} swaps in {} s",
        a.direction,
        sessions.len(),
        a.size,
        a.rate,
        a.seconds,
        a.seconds
    );
    rig.warm_neighbours();
    g.reset()?;
    let cpu = (a.rig.gen_cpu, a.rig.nice);
    // Warm-up outside the windows (neighbours, first-packet paths).
    xdpgen::run_in(
        &g,
        &s.gen_ns,
        Some(cpu.0),
        cpu.1,
        s.gen_dev,
        0.3,
        a.rate,
        stop,
    )?;
    std::thread::sleep(Duration::from_millis(100));

    counter.reset_gap()?;
    let quiet = measure(&g, &s, &counter, cpu, a.seconds, a.rate, false, stop)?;
    let gap_quiet = counter.max_gap_ns()?.unwrap_or(0);
    rig.upf_alive()?;
    counter.reset_gap()?;
    let w = Window {
        g: &g,
        s: &s,
        counter: &counter,
        cpu,
        seconds: a.seconds,
        rate: a.rate,
        upf_ns: &upf_ns,
    };
    let (swapped, took) = w.run(swaps, stop)?;
    let gap_swapped = counter.max_gap_ns()?.unwrap_or(0);
    rig.upf_alive()?;
    let status: Value = serde_json::from_str(&admin_get(&upf_ns, "/api/engine")?)?;
    // Where packets were dropped: every non-zero drop and I/O loss counter of the UPF.
    let drops: Vec<String> = admin_get(&upf_ns, "/metrics")?
        .lines()
        .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
        .filter(|l| l.contains("dropped") || l.contains("unrouted") || l.contains("_errors"))
        .map(str::to_string)
        .collect();
    drop(smf);
    rig.stop_upf();

    let lost = |p: &Phase| p.gen.frames.saturating_sub(p.delivered.packets);
    let us = |ns: u64| ns as f64 / 1e3;
    eprintln!(
        "  without swaps: {} of {} frames lost, longest gap {:.0} µs; with {swaps} swaps ({took:.1?} ms): {} of {} lost, longest gap {:.0} µs",
        lost(&quiet),
        quiet.gen.frames,
        us(gap_quiet),
        lost(&swapped),
        swapped.gen.frames,
        us(gap_swapped)
    );
    let window = |p: &Phase| {
        json!({
            "frames": p.gen.frames,
            "delivered": p.delivered.packets,
            "offered_pps": p.offered_mpps() * 1e6,
            "seconds": p.gen.elapsed.as_secs_f64(),
        })
    };
    Ok(json!({
        "topology": "veth",
        "commit": env!("UPF_BENCH_COMMIT"),
        "measure": "engine swaps",
        "engine": a.engine,
        "backend": a.backend,
        "workers": a.workers,
        "busy_poll": a.busy_poll,
        "sessions": a.sessions,
        "direction": a.direction,
        "size": a.size,
        "rate_pps": a.rate,
        "swaps": swaps,
        "swap_ms": took,
        "lost": lost(&swapped),
        "lost_no_swap": lost(&quiet),
        "max_gap_us": us(gap_swapped),
        "max_gap_us_no_swap": us(gap_quiet),
        "window": window(&swapped),
        "window_no_swap": window(&quiet),
        "engine_after": status,
        "upf_drops": drops,
        "gen_cpu": a.rig.gen_cpu,
        "upf_cores": cores,
        "load_before": load_before,
        "load_after": crate::harness::loadavg(),
        "notes": [
            "lost = frames the generator ran minus packets counted at the sink, after the drain",
            "swaps alternate user, xdp, user, ...; swap i starts at (i + 1) / (swaps + 1) of the window or when swap i - 1 is done, each awaited until the UPF reports it done (swap_ms: its took_ms); the window lasts --seconds or until the last swap is done",
            "max_gap = the longest time between two consecutive packets counted at the sink, any flow (the sink's clock on arrival)",
        ],
    }))
}

/// One window of traffic with swaps, and what it runs on.
struct Window<'a> {
    g: &'a Generator,
    s: &'a Sides,
    counter: &'a Counter,
    cpu: (usize, i32),
    seconds: f64,
    rate: u64,
    upf_ns: &'a str,
}

impl Window<'_> {
    /// `seconds` of traffic at `rate`, longer if the swaps take it, with `n` swaps; the phase
    /// and each swap's took_ms.
    fn run(&self, n: u32, stop: &AtomicBool) -> anyhow::Result<(Phase, Vec<f64>)> {
        // Ends the generator: the window is over, or the swaps failed, or `stop`.
        let end = AtomicBool::new(false);
        let length = Duration::from_secs_f64(self.seconds);
        let c0 = self.counter.read()?;
        let sirq0 = softirq_ns();
        let t0 = Instant::now();
        let (gen, took) = std::thread::scope(|sc| {
            let gen = sc.spawn(|| {
                xdpgen::run_in(
                    self.g,
                    &self.s.gen_ns,
                    Some(self.cpu.0),
                    self.cpu.1,
                    self.s.gen_dev,
                    // The swaps' time out bounds it.
                    self.seconds + (SWAP_TIMEOUT * n).as_secs_f64(),
                    self.rate,
                    &end,
                )
            });
            let took = self.swaps(n, t0, stop);
            while took.is_ok() && t0.elapsed() < length && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(POLL);
            }
            end.store(true, Ordering::Relaxed);
            (gen.join(), took)
        });
        let gen = gen.unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        let took = took?;
        let c1 = drained(self.counter)?;
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok((
            Phase {
                gen,
                delivered: c1.since(&c0),
                softirq_ns: softirq_ns().saturating_sub(sirq0),
                window: t0.elapsed(),
            },
            took,
        ))
    }

    /// Swap i to user (even i) or xdp (odd), started at (i + 1) / (n + 1) of the window or
    /// when swap i - 1 is done.
    fn swaps(&self, n: u32, t0: Instant, stop: &AtomicBool) -> anyhow::Result<Vec<f64>> {
        let mut took = Vec::new();
        for i in 0..n {
            let due =
                t0 + Duration::from_secs_f64(self.seconds * f64::from(i + 1) / f64::from(n + 1));
            while Instant::now() < due {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                std::thread::sleep(POLL.min(due.saturating_duration_since(Instant::now())));
            }
            let mode = if i % 2 == 0 { "user" } else { "xdp" };
            took.push(
                swap(self.upf_ns, mode, stop)
                    .with_context(|| format!("swap {} to {mode}", i + 1))?,
            );
        }
        Ok(took)
    }
}

/// Moves every session of the UPF in namespace `ns` to engine `mode`; its took_ms once the
/// UPF reports the swap done.
fn swap(ns: &str, mode: &str, stop: &AtomicBool) -> anyhow::Result<f64> {
    admin_post(ns, &format!("/api/engine/{mode}"))?;
    let until = Instant::now() + SWAP_TIMEOUT;
    loop {
        let v: Value = serde_json::from_str(&admin_get(ns, "/api/engine")?)?;
        let w = &v["swap"];
        if w["to"] == mode && w["done"] == true {
            return w["took_ms"].as_f64().context("swap done without took_ms");
        }
        if Instant::now() > until {
            bail!("not done within {SWAP_TIMEOUT:?}: {v}");
        }
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        std::thread::sleep(POLL);
    }
}
