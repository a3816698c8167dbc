//! `upf-bench memory --buffering-share S` (issue #26 §3): what sessions whose downlink is
//! buffered cost the others. Each worker holds two pipelines with the same sessions: in one
//! every FAR forwards, in the other the downlink FAR of a share of the sessions buffers
//! (BUFF|NOCP with a BAR, as an SMF sets it for an idle UE). Both take the same packets,
//! alternated round by round: the buffering sessions' downlink among them all the time (an
//! idle UE sends no uplink), and the figure is the rate of the other sessions' packets per
//! second of the pipeline's time.
//!
//! A pipeline keeps the packets it buffers, so the input cannot recycle what comes back
//! alone: [`Input`] loads each slot's packet afresh into a buffer the pipeline gave back
//! (sent or dropped), or a new one in place of each it kept, so every batch is full.

use crate::memory::{self, Args, Orig};
use crate::profile;
use anyhow::{anyhow, bail};
use rand::rngs::SmallRng;
use rand::SeedableRng as _;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{Acl, DropReason, Output, Packet, Pipeline};
use upf_rules::{ApplyAction, Bar, BarId, Interface, Session};

/// Which of `n` sessions buffer: `round(n × share)` of them, spread evenly over the `n`.
pub(crate) fn pick(n: usize, share: f64) -> Vec<bool> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let count = (n as f64 * share.clamp(0.0, 1.0)).round() as usize;
    (0..n)
        .map(|k| (k + 1) * count / n != k * count / n)
        .collect()
}

/// Session `s` of an idle UE: its downlink FARs (to the access side) buffer and notify the
/// CP (BUFF|NOCP) under a BAR that leaves the packet count to the UPF.
pub(crate) fn buffering_session(s: &Session) -> Arc<Session> {
    let mut s = s.clone();
    let bar = BarId(1);
    for f in &mut s.fars {
        if f.forwarding
            .as_ref()
            .is_some_and(|w| w.destination == Interface::Access)
        {
            f.action = ApplyAction::BUFF | ApplyAction::NOCP;
            f.bar = Some(bar);
        }
    }
    s.bar = Some(Bar {
        id: bar,
        downlink_data_notification_delay_ms: 0,
        suggested_buffering_packets: None,
        dl_buffering_duration_s: None,
        dl_buffering_packets: None,
    });
    Arc::new(s)
}

/// One worker's input: each slot's packet as built, loaded for each batch into a buffer the
/// pipeline gave back, or a new one for each it kept.
pub(crate) struct Input {
    templates: Vec<Packet>,
    origs: Vec<Orig>,
    batch: usize,
    next: usize,
    spare: Vec<Packet>,
    /// New buffers made in place of packets the pipeline kept.
    pub(crate) allocated: u64,
}

impl Input {
    pub(crate) fn new(batches: Vec<Vec<Packet>>, origs: Vec<Vec<Orig>>, batch: usize) -> Input {
        let templates: Vec<Packet> = batches.into_iter().flatten().collect();
        // The first round's buffers: copies, as a NIC ring starts full.
        let spare = templates.clone();
        Input {
            templates,
            origs: origs.into_iter().flatten().collect(),
            batch: batch.max(1),
            next: 0,
            spare,
            allocated: 0,
        }
    }

    /// Batches in one pass over the slots.
    pub(crate) fn batches(&self) -> usize {
        self.templates.len().div_ceil(self.batch)
    }

    /// Loads the next batch of slots into `rx` (empty), each carrying the UE `ue(uplink)`
    /// draws; returns how many carry a UE that is `counted`.
    pub(crate) fn fill(
        &mut self,
        rx: &mut Vec<Packet>,
        mut ue: impl FnMut(bool) -> u32,
        counted: impl Fn(u32) -> bool,
    ) -> u64 {
        let end = (self.next + self.batch).min(self.templates.len());
        let mut n = 0;
        for (t, o) in self.templates[self.next..end]
            .iter()
            .zip(&self.origs[self.next..end])
        {
            let mut p = self.spare.pop().unwrap_or_else(|| {
                self.allocated += 1;
                Packet::new(t.port())
            });
            p.buffer_mut()[o.start..o.end].copy_from_slice(t.data());
            let u = ue(o.uplink);
            memory::restore(&mut p, o, t.port(), u);
            n += u64::from(counted(u));
            rx.push(p);
        }
        self.next = if end == self.templates.len() { 0 } else { end };
        n
    }

    /// Takes back what the pipeline sent and dropped.
    pub(crate) fn recycle(&mut self, out: &mut Output) {
        self.spare.append(&mut out.tx);
        self.spare.append(&mut out.free);
    }
}

/// Pre-drawn UEs: downlink ones over all the worker's sessions, uplink ones over those not
/// buffering (an idle UE sends nothing).
struct Sequences {
    dl: Vec<u32>,
    ul: Vec<u32>,
    next_dl: usize,
    next_ul: usize,
}

impl Sequences {
    fn next(&mut self, uplink: bool) -> u32 {
        let (v, i) = if uplink {
            (&self.ul, &mut self.next_ul)
        } else {
            (&self.dl, &mut self.next_dl)
        };
        let u = v[*i];
        *i = if *i + 1 == v.len() { 0 } else { *i + 1 };
        u
    }
}

/// What one loop measured.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    /// Packets of the sessions that do not buffer, and all packets.
    others: u64,
    packets: u64,
    busy: Duration,
    wall: Duration,
    cpu: Option<Duration>,
    events: u64,
}

impl Run {
    /// The other sessions' packets per second of the pipeline's CPU time: its calls' time
    /// less the share of the loop the thread was preempted (a shared machine's load would
    /// otherwise count as the pipeline's cost).
    fn mpps(&self) -> f64 {
        let share = self.cpu.map_or(1.0, |c| {
            (c.as_secs_f64() / self.wall.as_secs_f64()).min(1.0)
        });
        self.others as f64 / (self.busy.as_secs_f64() * share) / 1e6
    }
}

/// Runs `input` through `pipeline` for `secs`; `buffering[ue]`: UE `ue` is one of the
/// buffering sessions (whose packets `expect_kept` says the pipeline must not send).
fn drive(
    pipeline: &mut Pipeline,
    input: &mut Input,
    seq: &mut Sequences,
    buffering: &[bool],
    expect_kept: bool,
    secs: f64,
) -> anyhow::Result<Run> {
    let mut rx = Vec::with_capacity(input.batch);
    let mut out = Output::default();
    let mut r = Run::default();
    let cpu0 = memory::thread_cpu();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    loop {
        for _ in 0..input.batches() {
            let others = input.fill(
                &mut rx,
                |up| seq.next(up),
                |u| !buffering.get(u as usize).copied().unwrap_or(false),
            );
            let n = rx.len() as u64;
            let t0 = Instant::now();
            pipeline.process(t0, &mut rx, &mut out);
            // What the worker does after a batch: hand events on, fire timers.
            while pipeline.poll_event().is_some() {
                r.events += 1;
            }
            if pipeline.poll_timeout().is_some_and(|t| t <= t0) {
                pipeline.handle_timeout(t0);
            }
            r.busy += t0.elapsed();
            let want = if expect_kept { others } else { n };
            if out.tx.len() as u64 != want {
                bail!(
                    "batch of {n} ({others} of sessions not buffering): {} forwarded ({:?})",
                    out.tx.len(),
                    pipeline.counters()
                );
            }
            input.recycle(&mut out);
            r.others += others;
            r.packets += n;
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    r.wall = start.elapsed();
    r.cpu = memory::thread_cpu()
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a));
    Ok(r)
}

/// [`drive`] of the pipeline where none buffers, and of the one where some do: apart, so
/// that a profile (callgrind's inclusive costs, perf's callers) tells the two apart.
#[inline(never)]
fn drive_none(
    pipeline: &mut Pipeline,
    input: &mut Input,
    seq: &mut Sequences,
    buffering: &[bool],
    secs: f64,
) -> anyhow::Result<Run> {
    drive(pipeline, input, seq, buffering, false, secs)
}

#[inline(never)]
fn drive_buffering(
    pipeline: &mut Pipeline,
    input: &mut Input,
    seq: &mut Sequences,
    buffering: &[bool],
    secs: f64,
) -> anyhow::Result<Run> {
    drive(pipeline, input, seq, buffering, true, secs)
}

/// One worker's rounds: (none buffering, buffering) each, and the buffering pipeline's
/// state at the end.
struct WorkerResult {
    rounds: Vec<(Run, Run)>,
    buffering_sessions: usize,
    held: usize,
    buffer_full: u64,
    allocated: u64,
    cold: usize,
    cold_at_end: usize,
}

fn worker(
    a: &Args,
    t: &profile::Workload,
    w: usize,
    size: usize,
    share: f64,
    acl: &Arc<Acl>,
) -> anyhow::Result<WorkerResult> {
    let now = Instant::now();
    let ues: Vec<u32> = memory::worker_ues(a, w).collect();
    let picked = pick(ues.len(), share);
    // Indexed by UE (the peak UE, past the background ones, never buffers).
    let mut buffering = vec![false; a.sessions as usize + 1];
    for (&u, &b) in ues.iter().zip(&picked) {
        buffering[u as usize] = b;
    }
    let others: Vec<u32> = ues
        .iter()
        .copied()
        .filter(|&u| !buffering[u as usize])
        .collect();
    if others.is_empty() {
        bail!("--buffering-share {share}: no session of worker {w} is left not buffering");
    }
    let (mut none, _) = memory::build_pipeline(a, t, w, &ues, now, acl, |i| t.session(i))?;
    let (mut buff, _) = memory::build_pipeline(a, t, w, &ues, now, acl, |i| {
        let s = t.session(i);
        if buffering[i as usize] {
            buffering_session(&s)
        } else {
            s
        }
    })?;
    let cold = buff.cold_sessions();
    let mut rng = SmallRng::seed_from_u64(0x9e37_79b9 + w as u64);
    let (batches, origs) = memory::build_pool(a, t, &ues, size, &mut rng);
    let mut input = Input::new(batches, origs, a.batch);
    let len = a.ue_sequence.max(1);
    let dl = (0..len)
        .map(|_| t.draw_ue(&mut |n| memory::below(&mut rng, n), &ues))
        .collect();
    let ul = (0..len)
        .map(|_| t.draw_ue(&mut |n| memory::below(&mut rng, n), &others))
        .collect();
    let mut seq = Sequences {
        dl,
        ul,
        next_dl: 0,
        next_ul: 0,
    };
    // Warm-up: the buffers fill (and the input's refills are made) before any timing.
    let warm = a.seconds.min(1.0);
    drive_none(&mut none, &mut input, &mut seq, &buffering, warm)?;
    drive_buffering(&mut buff, &mut input, &mut seq, &buffering, warm)?;
    let mut rounds = Vec::new();
    for r in 0..a.rounds.max(1) {
        // Alternated order: neither always goes first after the other.
        let (n, b) = if r % 2 == 0 {
            let n = drive_none(&mut none, &mut input, &mut seq, &buffering, a.seconds)?;
            let b = drive_buffering(&mut buff, &mut input, &mut seq, &buffering, a.seconds)?;
            (n, b)
        } else {
            let b = drive_buffering(&mut buff, &mut input, &mut seq, &buffering, a.seconds)?;
            let n = drive_none(&mut none, &mut input, &mut seq, &buffering, a.seconds)?;
            (n, b)
        };
        rounds.push((n, b));
    }
    Ok(WorkerResult {
        rounds,
        buffering_sessions: picked.iter().filter(|&&b| b).count(),
        held: buff.buffered(),
        cold_at_end: buff.cold_sessions(),
        buffer_full: buff.counters().dropped(DropReason::BufferFull),
        allocated: input.allocated,
        cold,
    })
}

/// Measures the first of `a.sizes` (or the mix) with and without `share` of the sessions
/// buffering; returns the JSON line.
pub fn measure(a: &Args, share: f64) -> anyhow::Result<serde_json::Value> {
    if !(0.0..1.0).contains(&share) {
        bail!("--buffering-share must be in [0, 1)");
    }
    if a.workers == 0 || a.sessions == 0 || a.batch == 0 {
        bail!("--workers, --sessions and --batch must be positive");
    }
    let (prof, _) = crate::spec::load(&a.profile)?;
    let t = &profile::Workload::new(&prof, a.mix.as_deref(), a.sessions, a.sdf_filters)?
        .own_ambr(a.own_ambr);
    let mix = t.mix().map(|(n, mean)| (n.to_string(), mean));
    let size = if mix.is_some() {
        0
    } else {
        *a.sizes.first().ok_or_else(|| anyhow!("give --sizes"))?
    };
    let acl = &Arc::new(Acl::load(&profile::acl_rules(a.acl_rules))?);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    eprintln!(
        "upf-bench memory: profile {} with {} sessions on {} worker(s), {} % of them buffering, {} rounds of {} s each way",
        a.profile,
        a.sessions,
        a.workers,
        share * 100.0,
        a.rounds,
        a.seconds
    );
    let results = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.workers)
            .map(|w| {
                let core = (a.workers <= cores.len()).then(|| cores[w]);
                sc.spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    worker(a, t, w, size, share, acl)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("worker panicked"))?)
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let rounds = a.rounds.max(1);
    // Per round: the sum of the workers' rates, per core.
    let per_round = |sel: fn(&(Run, Run)) -> Run| -> Vec<f64> {
        (0..rounds)
            .map(|r| {
                results
                    .iter()
                    .map(|w| sel(&w.rounds[r]).mpps())
                    .sum::<f64>()
                    / a.workers as f64
            })
            .collect()
    };
    let none = per_round(|r| r.0);
    let buff = per_round(|r| r.1);
    let ratios: Vec<f64> = buff.iter().zip(&none).map(|(b, n)| b / n).collect();
    let (m_none, m_buff) = (crate::ab::median(&none), crate::ab::median(&buff));
    let sum = |f: fn(&Run) -> u64| -> u64 {
        results
            .iter()
            .flat_map(|w| &w.rounds)
            .map(|r| f(&r.1))
            .sum()
    };
    let cpu_share = results
        .iter()
        .flat_map(|w| &w.rounds)
        .flat_map(|(n, b)| [n, b])
        .filter_map(|r| Some(r.cpu?.as_secs_f64() / r.wall.as_secs_f64()))
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let line = json!({
        "profile": prof.name,
        "topology": "memory",
        "commit": env!("UPF_BENCH_COMMIT"),
        "sessions": a.sessions,
        "workers": a.workers,
        "size": mix.as_ref().map_or(size as f64, |m| m.1),
        "mix": mix.as_ref().map(|m| m.0.clone()),
        "uplink_percent": a.uplink_percent,
        "acl_rules": a.acl_rules,
        "batch": a.batch,
        "seconds": a.seconds,
        "rounds": rounds,
        "buffering_share": share,
        "buffering_sessions": results.iter().map(|w| w.buffering_sessions).sum::<usize>(),
        "mpps_per_core_buffering": m_buff,
        "mpps_per_core_none": m_none,
        "ratio": m_buff / m_none,
        "ratio_median_of_rounds": crate::ab::median(&ratios),
        "mpps_per_core_buffering_rounds": buff,
        "mpps_per_core_none_rounds": none,
        "other_packet_share": sum(|r| r.others) as f64 / sum(|r| r.packets) as f64,
        "buffered_held": results.iter().map(|w| w.held).sum::<usize>(),
        "buffer_full_drops": results.iter().map(|w| w.buffer_full).sum::<u64>(),
        "downlink_data_events": sum(|r| r.events),
        "input_buffers_allocated": results.iter().map(|w| w.allocated).sum::<u64>(),
        "sessions_on_general_path": results.iter().map(|w| w.cold).sum::<usize>(),
        "sessions_on_general_path_at_end": results.iter().map(|w| w.cold_at_end).sum::<usize>(),
        "cpu_share": cpu_share,
    });
    eprintln!(
        "  other sessions: {m_buff:.2} Mpps/core with {:.0} % buffering, {m_none:.2} with none: ratio {:.3}",
        share * 100.0,
        m_buff / m_none
    );
    Ok(line)
}
