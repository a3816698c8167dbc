//! The in-memory topology: each worker thread owns the sessions of its UEs and a pool of
//! pre-built packets for them, and runs them through its pipeline batch after batch for a
//! fixed time. After each batch the packets are put back as they were (range, TTL and
//! checksum: a few stores) so the next round sees the same input; the null-forward loop pays
//! the same restore, so the ratio is fair.

use crate::profile;
use anyhow::{anyhow, bail};
use rand::rngs::SmallRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{null_forward, Acl, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_rules::InstallFlags;
use upf_wire::encap::{EncapV4, GtpuTunnel};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Traffic profile: a name (`profiles/NAME.toml`, else the built-in copy) or a path.
    /// Its sessions' shape (bearers, flows, QERs, URR, peak UE) and its mixes come from the
    /// file; the counts and rates below are taken as given.
    #[arg(long, default_value = "s0")]
    pub(crate) profile: String,
    /// Measure this packet mix of the profile (`[[mixes]]`) instead of `--sizes` and
    /// `--uplink-percent`.
    #[arg(long)]
    pub(crate) mix: Option<String>,
    /// SDF filters per PDR on the profile's first bearer that has them.
    #[arg(long)]
    pub(crate) sdf_filters: Option<u16>,
    /// Sessions (UEs) in all, spread over the workers.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) sessions: u32,
    /// Worker threads, each pinned to its own core when there are enough.
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Seconds measured per packet size and loop.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) seconds: f64,
    /// Packets per batch.
    #[arg(long, default_value_t = 256)]
    pub(crate) batch: usize,
    /// Inner packet sizes, octets.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,128,256,512,1024,1400"
    )]
    pub(crate) sizes: Vec<usize>,
    /// Uplink share of the packets, percent (S0 splits are by throughput; with one size per
    /// run that is the same as by packets).
    #[arg(long, default_value_t = 42.5)]
    pub(crate) uplink_percent: f64,
    /// Packet buffers in each worker's pool: like a NIC ring, small enough to stay in cache
    /// (as DDIO keeps received frames in the LLC); the UEs they carry change every round.
    #[arg(long, default_value_t = 4096)]
    pub(crate) pool: usize,
    /// Uplink ACL rules checked on every uplink packet (none of them matches the traffic).
    #[arg(long, default_value_t = 1000)]
    pub(crate) acl_rules: usize,
    /// Length of each worker's pre-drawn sequence of UEs (spread over all its sessions).
    #[arg(long, default_value_t = 1 << 20)]
    pub(crate) ue_sequence: usize,
    /// Every session on the general path (no hot records): an A/B switch within one binary.
    #[arg(long)]
    pub(crate) cold: bool,
    /// Large allocations (tables, hot records) on ordinary 4 KiB pages instead of transparent
    /// huge pages: an A/B switch within one binary.
    #[arg(long)]
    pub(crate) no_huge_pages: bool,
    /// Each session's AMBR a value of its own (the profile's plus the session's index, in
    /// kbit/s), so that no two sessions share a shape: the worst case for shared shapes.
    #[arg(long)]
    pub(crate) own_ambr: bool,
    /// Tables grown as sessions come instead of sized for them up front (what
    /// `PipelineConfig::expected_sessions` avoids): an A/B switch for the slowest install.
    #[arg(long)]
    pub(crate) no_presize: bool,
    /// Share of each worker's sessions whose downlink FAR buffers (BUFF|NOCP with a BAR, as
    /// an SMF sets it for an idle UE), their downlink arriving all the time: measures the
    /// other sessions' rate with them buffering and with none buffering, alternated in one
    /// run (only the first of --sizes, or the mix); one JSON line with `ratio`.
    #[arg(long)]
    pub(crate) buffering_share: Option<f64>,
    /// With --buffering-share: rounds of each (alternated); the figures are medians.
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: usize,
}

/// Where each pooled packet must be put back to.
#[derive(Clone, Copy)]
pub(crate) struct Orig {
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Offset (in the buffer) of the inner IPv4 header and its TTL/checksum octets.
    pub(crate) ip: usize,
    pub(crate) ttl_csum: [u8; 3],
    /// Uplink: offset of the GTP-U TEID, and the inner source address is the UE's;
    /// downlink: the inner destination address is.
    pub(crate) uplink: bool,
}

impl Orig {
    /// Where `p`, as the workload built it, is put back to.
    pub(crate) fn of(p: &Packet, uplink: bool) -> Orig {
        // Uplink: outer IPv4 (20), UDP (8), GTP-U with a PDU Session Container (16).
        let ip = if uplink { p.start() + 44 } else { p.start() };
        let d = p.data();
        let off = ip - p.start();
        Orig {
            start: p.start(),
            end: p.start() + p.len(),
            ip,
            ttl_csum: [d[off + 8], d[off + 10], d[off + 11]],
            uplink,
        }
    }
}

struct Worker {
    pipeline: Pipeline,
    batches: Vec<Vec<Packet>>,
    origs: Vec<Vec<Orig>>,
    /// UE indices, drawn at random; each round the pool carries the next stretch of them.
    ues: Vec<u32>,
    next_ue: usize,
    slowest_install: Duration,
}

pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A number in 0..n (0 when n is 0).
pub(crate) fn below(rng: &mut SmallRng, n: u64) -> u64 {
    rng.random_range(0..n.max(1))
}

/// One worker's result: sessions, null forward, pipeline, RSS, slowest install.
type Measured = (usize, Drive, Drive, u64, Duration);

/// What a measurement loop runs its batches through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loop {
    Null,
    Pipeline,
}

/// The UEs whose sessions worker `w` holds.
pub(crate) fn worker_ues(a: &Args, w: usize) -> impl Iterator<Item = u32> + '_ {
    (0..a.sessions).filter(move |i| *i as usize % a.workers == w)
}

fn build_worker(
    a: &Args,
    t: &profile::Workload,
    w: usize,
    size: usize,
    now: Instant,
    acl: &Arc<Acl>,
) -> anyhow::Result<Worker> {
    let ues: Vec<u32> = worker_ues(a, w).collect();
    let (pipeline, slowest) = build_pipeline(a, t, w, &ues, now, acl, |i| t.session(i))?;
    // Seeded, so every run offers the same packets; drawn here, before any timing.
    let mut rng = SmallRng::seed_from_u64(0x9e37_79b9 + w as u64);
    let (batches, origs) = build_pool(a, t, &ues, size, &mut rng);
    let seq = (0..a.ue_sequence.max(1))
        .map(|_| t.draw_ue(&mut |n| below(&mut rng, n), &ues))
        .collect();
    Ok(Worker {
        pipeline,
        batches,
        origs,
        ues: seq,
        next_ue: 0,
        slowest_install: slowest,
    })
}

/// A pipeline holding worker `w`'s sessions `ues` (each as `session` builds it) and the
/// peak UE's; returns it and the slowest install.
pub(crate) fn build_pipeline(
    a: &Args,
    t: &profile::Workload,
    w: usize,
    ues: &[u32],
    now: Instant,
    acl: &Arc<Acl>,
    session: impl Fn(u32) -> Arc<upf_rules::Session>,
) -> anyhow::Result<(Pipeline, Duration)> {
    let cfg = PipelineConfig {
        n3: upf_dataplane::LocalAddrs {
            v4: Some(profile::UPF_N3),
            v6: None,
        },
        uplink_acl: acl.clone(),
        expected_sessions: if a.no_presize {
            0
        } else {
            (a.sessions as usize).div_ceil(a.workers)
        },
        ..Default::default()
    };
    let mut pipeline = Pipeline::new(now, cfg);
    // A peak-rate UE is spread over every worker (each polices it on its own here; the
    // runtime has them share its rates).
    if let Some((i, s)) = t.peak() {
        pipeline
            .install_shared(now, s, InstallFlags::default(), None)
            .map_err(|e| anyhow!("installing the peak session {i}: {e}"))?;
    }
    // The slowest install: a worker forwards nothing meanwhile.
    let mut slowest = Duration::ZERO;
    for &i in ues {
        let s = session(i);
        let t0 = Instant::now();
        pipeline
            .install_shared(now, s, InstallFlags::default(), None)
            .map_err(|e| anyhow!("installing session {i}: {e}"))?;
        slowest = slowest.max(t0.elapsed());
    }
    if a.cold {
        pipeline.set_hot_records(false);
    }
    if pipeline.cold_sessions() > 0 {
        eprintln!(
            "  worker {w}: {} of {} sessions on the general path",
            pipeline.cold_sessions(),
            pipeline.sessions()
        );
    }
    Ok((pipeline, slowest))
}

/// The pool of packets of `ues` in batches, and where each is put back to.
pub(crate) fn build_pool(
    a: &Args,
    t: &profile::Workload,
    ues: &[u32],
    size: usize,
    rng: &mut SmallRng,
) -> (Vec<Vec<Packet>>, Vec<Vec<Orig>>) {
    let mut batches = Vec::new();
    let mut origs = Vec::new();
    let n = a.pool.div_ceil(a.batch).max(1);
    for _ in 0..n {
        let mut b = Vec::with_capacity(a.batch);
        let mut o = Vec::with_capacity(a.batch);
        for _ in 0..a.batch {
            let ue = ues[rng.random_range(0..ues.len())];
            let (p, uplink) = t.packet(&mut |n| below(rng, n), ue, size, a.uplink_percent);
            o.push(Orig::of(&p, uplink));
            b.push(p);
        }
        batches.push(b);
        origs.push(o);
    }
    (batches, origs)
}

/// Puts a packet back as built, carrying UE `ue` now: the range, port, TTL; the UE address
/// (and the TEID uplink) rewritten with the inner checksum kept right (RFC 1624).
pub(crate) fn restore(p: &mut Packet, o: &Orig, port: Port, ue: u32) {
    p.set_range(o.start, o.end);
    p.set_port(port);
    let addr = u32::from(profile::ue_addr(ue));
    let b = p.buffer_mut();
    let a = if o.uplink { o.ip + 12 } else { o.ip + 16 };
    let old = u32::from_be_bytes([b[a], b[a + 1], b[a + 2], b[a + 3]]);
    let sum = upf_wire::checksum::update_u32(
        u16::from_be_bytes(o.ttl_csum[1..3].try_into().unwrap_or([0; 2])),
        old,
        addr,
    );
    b[a..a + 4].copy_from_slice(&addr.to_be_bytes());
    b[o.ip + 8] = o.ttl_csum[0];
    b[o.ip + 10..o.ip + 12].copy_from_slice(&sum.to_be_bytes());
    if o.uplink {
        // Outer IPv4 (20) + UDP (8) + 4 octets of GTP-U header: the TEID.
        b[o.start + 32..o.start + 36].copy_from_slice(&profile::ue_teid(ue).to_be_bytes());
    }
}

/// This thread's CPU time so far (`/proc/thread-self/schedstat`), if the kernel tells.
pub(crate) fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        s.split_whitespace().next()?.parse().ok()?,
    ))
}

/// What one loop measured.
#[derive(Debug, Clone, Copy)]
struct Drive {
    packets: u64,
    /// Octets of inner IP.
    octets: u64,
    /// Time inside the pipeline's (or null forward's) calls: what the rates divide by. The
    /// loop's own work between calls (restoring the forwarded packets as the next batch,
    /// which a NIC does by DMA) is not the data path's cost.
    busy: Duration,
    /// The whole loop, and the CPU time the thread got in it (less than `wall` when it was
    /// preempted: then the rates are low by about that share).
    wall: Duration,
    cpu: Option<Duration>,
}

/// Runs the worker's pool for `secs`.
fn drive(w: &mut Worker, secs: f64, what: Loop) -> anyhow::Result<Drive> {
    let tunnel = EncapV4 {
        src: profile::UPF_N3,
        dst: profile::gnb_addr(0),
        ident: 0,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid: 1,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(upf_wire::ext::PduSessionContainer::dl(9)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    let ports: Vec<Vec<Port>> = w
        .batches
        .iter()
        .map(|b| b.iter().map(|p| p.port()).collect())
        .collect();
    let octets_per_round: u64 = w
        .origs
        .iter()
        .flatten()
        .map(|o| (o.end - o.ip) as u64)
        .sum();
    let mut out = Output::default();
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let (mut packets, mut rounds, mut busy) = (0u64, 0u64, Duration::ZERO);
    loop {
        for (i, batch) in w.batches.iter_mut().enumerate() {
            let n = batch.len();
            let t0 = Instant::now();
            match what {
                Loop::Null => null_forward(batch, &mut out, &tunnel),
                Loop::Pipeline => w.pipeline.process(t0, batch, &mut out),
            }
            busy += t0.elapsed();
            if out.tx.len() != n || !out.free.is_empty() {
                bail!(
                    "batch of {n}: {} forwarded, {} dropped ({:?})",
                    out.tx.len(),
                    out.free.len(),
                    w.pipeline.counters()
                );
            }
            for ((p, o), port) in out.tx.iter_mut().zip(&mut w.origs[i]).zip(&ports[i]) {
                let ue = w.ues[w.next_ue];
                w.next_ue = if w.next_ue + 1 == w.ues.len() {
                    0
                } else {
                    w.next_ue + 1
                };
                restore(p, o, *port, ue);
                // The checksum octets now belong to the new address.
                let b = p.data();
                let off = o.ip - o.start;
                o.ttl_csum = [b[off + 8], b[off + 10], b[off + 11]];
            }
            std::mem::swap(batch, &mut out.tx);
            packets += n as u64;
        }
        rounds += 1;
        if Instant::now() >= deadline {
            break;
        }
    }
    let wall = start.elapsed();
    Ok(Drive {
        packets,
        octets: octets_per_round * rounds,
        busy,
        wall,
        cpu: thread_cpu().zip(cpu0).map(|(b, a)| b.saturating_sub(a)),
    })
}

/// `upf-bench memory`: measures and prints one JSON line.
pub fn run(a: &Args) -> anyhow::Result<()> {
    upf_io::hugepages::set_enabled(!a.no_huge_pages);
    match a.buffering_share {
        Some(share) => println!("{}", crate::buffering::measure(a, share)?),
        None => println!("{}", measure(a)?),
    }
    Ok(())
}

/// Measures every size (or the mix) of `a`; returns the summary `memory` prints.
pub fn measure(a: &Args) -> anyhow::Result<serde_json::Value> {
    let (prof, _) = crate::spec::load(&a.profile)?;
    let t = &profile::Workload::new(&prof, a.mix.as_deref(), a.sessions, a.sdf_filters)?
        .own_ambr(a.own_ambr);
    let mix = t.mix().map(|(n, mean)| (n.to_string(), mean));
    let sizes = if mix.is_some() {
        vec![0]
    } else {
        a.sizes.clone()
    };
    if a.workers == 0 || a.sessions == 0 || a.batch == 0 {
        bail!("--workers, --sessions and --batch must be positive");
    }
    let acl = Arc::new(Acl::load(&profile::acl_rules(a.acl_rules))?);
    let acl = &acl;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let now = Instant::now();
    eprintln!(
        "upf-bench memory: profile {} with {} sessions on {} worker(s), {} ACL rules, batches of {}, {} s per measurement",
        a.profile, a.sessions, a.workers, a.acl_rules, a.batch, a.seconds
    );
    let mut rows = Vec::new();
    let mut memory_per_session = 0.0;
    let mut slowest_install = Duration::ZERO;
    for (k, &size) in sizes.iter().enumerate() {
        let rss0 = rss_bytes();
        let results = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..a.workers)
                .map(|w| {
                    let core = (a.workers <= cores.len()).then(|| cores[w]);
                    sc.spawn(move || -> anyhow::Result<_> {
                        if let Some(c) = core {
                            core_affinity::set_for_current(c);
                        }
                        let mut wk = build_worker(a, t, w, size, now, acl)?;
                        let sessions = wk.pipeline.sessions();
                        let null = drive(&mut wk, a.seconds, Loop::Null)?;
                        let full = drive(&mut wk, a.seconds, Loop::Pipeline)?;
                        let rss = rss_bytes();
                        Ok((sessions, null, full, rss, wk.slowest_install))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| anyhow!("worker panicked"))?)
                .collect::<anyhow::Result<Vec<_>>>()
        })?;
        if k == 0 {
            let peak = results.iter().map(|r| r.3).max().unwrap_or(0);
            memory_per_session = peak.saturating_sub(rss0) as f64 / f64::from(a.sessions);
            slowest_install = results.iter().map(|r| r.4).max().unwrap_or_default();
        }
        let rate = |sel: fn(&Measured) -> Drive| {
            // Sum of per-worker rates (each worker's own busy time).
            results.iter().map(sel).fold((0.0, 0.0), |(pps, bps), d| {
                let s = d.busy.as_secs_f64();
                (pps + d.packets as f64 / s, bps + d.octets as f64 * 8.0 / s)
            })
        };
        let (null_pps, _) = rate(|r| r.1);
        let (pps, bps) = rate(|r| r.2);
        // Packets each loop processed (all workers): per-packet figures from a whole-run
        // profile (callgrind, cachegrind) divide by these.
        let null_packets: u64 = results.iter().map(|r| r.1.packets).sum();
        let packets: u64 = results.iter().map(|r| r.2.packets).sum();
        // The least share of a core any worker's pipeline loop got (1.0: never preempted).
        let cpu_share = results
            .iter()
            .filter_map(|r| Some(r.2.cpu?.as_secs_f64() / r.2.wall.as_secs_f64()))
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let per_core = pps / a.workers as f64 / 1e6;
        let null_per_core = null_pps / a.workers as f64 / 1e6;
        let row = json!({
            "size": mix.as_ref().map_or(size as f64, |m| m.1),
            "mix": mix.as_ref().map(|m| m.0.clone()),
            "mpps_per_core": per_core,
            "gbps_per_core": bps / a.workers as f64 / 1e9,
            "ns_per_packet": 1e3 / per_core,
            "null_forward_mpps_per_core": null_per_core,
            "ratio_to_null": per_core / null_per_core,
            "packets": packets,
            "null_forward_packets": null_packets,
            "cpu_share": cpu_share,
        });
        eprintln!(
            "  {:>5}: {per_core:6.2} Mpps/core ({:5.1} ns/packet, {:6.2} Gbit/s/core), null forward {null_per_core:6.2} Mpps/core, ratio {:.2}{}",
            mix.as_ref().map_or(format!("{size} B"), |m| m.0.clone()),
            1e3 / per_core,
            bps / a.workers as f64 / 1e9,
            per_core / null_per_core,
            cpu_share
                .filter(|&c| c < 0.95)
                .map_or(String::new(), |c| format!(" (preempted: {:.0} % of a core)", c * 100.0))
        );
        rows.push(row);
    }
    let min = |k: &str| {
        rows.iter()
            .filter_map(|r| r[k].as_f64())
            .fold(f64::INFINITY, f64::min)
    };
    let summary = json!({
        "profile": prof.name,
        "topology": "memory",
        "mix": mix.as_ref().map(|m| m.0.clone()),
        "sdf_filters": a.sdf_filters,
        "peak_ue": t.peak().map(|p| p.0),
        "sessions": a.sessions,
        "workers": a.workers,
        "batch": a.batch,
        "uplink_percent": a.uplink_percent,
        "acl_rules": a.acl_rules,
        "huge_pages": !a.no_huge_pages,
        "mpps_per_core": min("mpps_per_core"),
        "null_forward_mpps_per_core": min("null_forward_mpps_per_core"),
        "memory_per_session_bytes": memory_per_session.round(),
        "tables_presized": !a.no_presize,
        "own_ambr": a.own_ambr,
        "slowest_install_us": slowest_install.as_secs_f64() * 1e6,
        "sizes": rows,
        "notes": prof.memory_notes(),
    });
    Ok(summary)
}
