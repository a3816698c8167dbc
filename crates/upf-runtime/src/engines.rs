//! The engines a session runs on: the user-space workers, which hold every session, and the
//! in-kernel XDP engine (`upf_xdp`), which runs the sessions it can in front of them.
//!
//! Every session is installed on the workers; one the XDP engine can run is installed there
//! as well, and its packets then never reach the workers, except those the program punts
//! (no next hop yet, GTP-U signalling), which the workers handle with the same rules. So a
//! session moves between engines by adding or removing its keys in the kernel's maps, and
//! no packet finds it in neither. The XDP engine's URR counters are never reset: what it
//! counted since a URR's last report (`reported`, the baseline) goes into the report the
//! workers make, and into the workers' own measurement when the session leaves it
//! (`Workers::carry_usage`), so that every packet is in exactly one report. A session's MBR
//! buckets move with it: the engine it leaves gives the backlog of each (QER, direction) at
//! that moment, and the one it enters goes on from it at its own clock (`MbrBacklog`); so
//! does each URR's Volume Quota use, as an absolute count since the grant, reported or not
//! (`QuotaUse`, in the same `Carried`; the usage carried as it leaves is not added to it). A
//! volume threshold reached or a quota exhausted in the kernel is announced by the program
//! (`Engine::crossings`): the workers make that URR's report with its trigger
//! (`Workers::report_usage`), the kernel's count added as to every report, and after any
//! report of a URR the kernel's threshold counts from there (`Engine::rearm`).

use crate::workers::{SessionsCarried, Workers};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tracing::warn;
use upf_rules::{
    Carried, Datapath, DatapathError, DatapathEvent, InstallFlags, Installed, MbrBacklog, Seid,
    Session, UrrId, UsageReport, Volume, VolumeLimit,
};
use upf_xdp::{Crossing, Detached, Engine, InstallError, QosState, Stats};

/// Sessions taken out of the kernel whose counters are read after one grace period.
const DETACHED_BATCH: usize = 2000;
/// Sessions moving into the kernel whose MBR backlogs and quota use are asked of the workers
/// at once (one message a worker, not one a session).
const BACKLOG_BATCH: usize = 64;

/// Which engine runs the sessions (`engine` in upf.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineMode {
    /// The user-space workers only: no XDP program.
    #[default]
    User,
    /// The XDP engine runs every session it can; a full XDP engine refuses a session (cause
    /// "No resources available").
    Xdp,
    /// As `Xdp`, but a session that finds the XDP engine full runs in user space.
    Auto,
}

impl EngineMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Xdp => "xdp",
            Self::Auto => "auto",
        }
    }
}

/// Where a session runs, and why not in the XDP engine when it could have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs {
    /// In the XDP engine (its punted packets in user space).
    Xdp,
    /// In user space; `Some(why)` when the XDP engine is on and did not take it.
    User(Option<String>),
}

impl fmt::Display for Runs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Xdp => f.write_str("xdp"),
            Self::User(_) => f.write_str("user"),
        }
    }
}

/// The XDP engine and the sessions it runs.
#[derive(Debug)]
struct Kernel {
    engine: Engine,
    /// `Xdp`: a full engine refuses a session; `Auto`: the workers take it; `User`: the
    /// engine takes none (set at run time, [`Engines::set_mode`]).
    mode: EngineMode,
    /// Sessions still to move to the engine of `mode` (a swap under way).
    moving: VecDeque<Seid>,
    /// Sessions out of the kernel, their counters to read after a grace period.
    detached: Vec<Detached>,
    /// The swap under way, or the last one.
    swap: Option<Swap>,
    /// Per session it runs: the usage of each URR already reported, of its never-reset
    /// counters.
    reported: HashMap<Seid, Vec<(UrrId, Volume)>>,
    /// Why the sessions it does not run were not taken.
    refused: HashMap<Seid, String>,
    /// Reports raised in the kernel that the ring buffer had no room for, found by `tick`.
    missed: Vec<Crossing>,
    /// Reports of crossings made, for `poll_event`.
    made: VecDeque<UsageReport>,
}

/// The data path of `upf run`: the workers, with the XDP engine in front when one is on.
#[derive(Debug)]
pub struct Engines {
    workers: Workers,
    kernel: Option<Kernel>,
}

impl Engines {
    /// The workers alone ([`EngineMode::User`]).
    pub fn user(workers: Workers) -> Self {
        Self {
            workers,
            kernel: None,
        }
    }

    /// The workers behind the loaded and attached XDP engine `engine`, in `mode` (`User`
    /// leaves the engine idle, every packet punted, until [`Engines::set_mode`]).
    pub fn with_xdp(workers: Workers, engine: Engine, mode: EngineMode) -> Self {
        Self {
            workers,
            kernel: Some(Kernel {
                engine,
                mode,
                moving: VecDeque::new(),
                detached: Vec::new(),
                swap: None,
                reported: HashMap::new(),
                refused: HashMap::new(),
                missed: Vec::new(),
                made: VecDeque::new(),
            }),
        }
    }

    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// The XDP engine, when it is on.
    pub fn xdp(&self) -> Option<&Engine> {
        self.kernel.as_ref().map(|k| &k.engine)
    }

    /// The XDP engine's counters, when it is on.
    pub fn xdp_stats(&self) -> Option<std::io::Result<Stats>> {
        self.kernel.as_ref().map(|k| k.engine.stats())
    }

    /// Sessions the XDP engine runs (0 when it is off).
    pub fn xdp_sessions(&self) -> usize {
        self.kernel.as_ref().map_or(0, |k| k.reported.len())
    }

    /// Where session `seid` runs.
    pub fn runs(&self, seid: Seid) -> Runs {
        match &self.kernel {
            None => Runs::User(None),
            Some(k) if k.reported.contains_key(&seid) => Runs::Xdp,
            Some(k) => Runs::User(k.refused.get(&seid).cloned()),
        }
    }
}

/// A change of engine under way ([`Engines::set_mode`]), or the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swap {
    pub to: EngineMode,
    /// Sessions it had to look at, and those it moved.
    pub sessions: usize,
    pub moved: usize,
    pub started: Instant,
    /// When the last session was moved (None: under way).
    pub took: Option<Duration>,
}

/// Where the sessions run, and the swap under way or the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineStatus {
    /// None: no XDP engine loaded (`engine = "user"` at start).
    pub mode: Option<EngineMode>,
    pub on_xdp: usize,
    pub on_user: usize,
    pub swap: Option<Swap>,
}

impl Engines {
    /// Moves every session to the engine of `mode` (`User`: out of the kernel; `Xdp` or
    /// `Auto`: into it, each one it can run) without any PFCP exchange: URR usage carried
    /// exactly and MBR buckets' backlogs as on any move.
    /// The move is done by [`Engines::move_some`], a bounded number of sessions at a time,
    /// so that the caller keeps answering PFCP meanwhile.
    pub fn set_mode(&mut self, now: Instant, mode: EngineMode) -> Result<(), &'static str> {
        let Some(k) = &mut self.kernel else {
            return Err("no XDP engine is loaded: start with engine = \"xdp\" or \"auto\"");
        };
        k.mode = mode;
        k.moving = match mode {
            EngineMode::User => k.reported.keys().copied().collect(),
            _ => (self.workers.seids().into_iter())
                .filter(|s| !k.reported.contains_key(s))
                .collect(),
        };
        k.swap = Some(Swap {
            to: mode,
            sessions: k.moving.len(),
            moved: 0,
            started: now,
            took: None,
        });
        Ok(())
    }

    /// Upkeep of the XDP engine's maps (keys back into their direct entries), and the
    /// reports it raised that its ring buffer had no room for: call it every few tens of
    /// milliseconds.
    pub fn tick(&mut self) {
        if let Some(k) = &mut self.kernel {
            k.engine.settle();
            match k.engine.missed_crossings() {
                Ok(c) => k.missed.extend(c),
                Err(e) => warn!(target: "upf::xdp", "reports raised: {e}"),
            }
        }
    }

    /// Makes the reports the XDP engine raised (volume thresholds and quotas): each the
    /// workers' report of the URR with its trigger, with the kernel's count added, queued
    /// for `poll_event`.
    fn report_crossed(&mut self) {
        let Some(k) = &mut self.kernel else { return };
        let mut due = k.engine.crossings();
        due.append(&mut k.missed);
        for c in due {
            if !k.reported.contains_key(&c.seid) {
                continue;
            }
            let mut reports = match self.workers.report_usage(c.seid, &[c.urr], c.trigger) {
                Ok(r) => r,
                Err(e) => {
                    warn!(target: "upf::xdp", "{} {:?} {:?}: {e}", c.seid, c.urr, c.trigger);
                    continue;
                }
            };
            let d = k.take_reported(c.seid, &[c.urr]);
            let left = add_to(&mut reports, d);
            if !left.is_empty() {
                carry(&self.workers, c.seid, left, true);
            }
            k.made.extend(reports);
        }
    }

    /// Whether a swap is under way.
    pub fn moving(&self) -> bool {
        (self.kernel.as_ref()).is_some_and(|k| !k.moving.is_empty() || !k.detached.is_empty())
    }

    /// Moves sessions of the swap under way for about `budget` of this thread's time (map
    /// updates), so that a worker sharing its core is not held up for longer. Out of the
    /// kernel, the detached sessions' counters are read in batches of [`DETACHED_BATCH`]
    /// after one grace period (a sleep, not work).
    pub fn move_some(&mut self, budget: Duration) {
        let Some(k) = &mut self.kernel else { return };
        let start = Instant::now();
        let mut moved = 0;
        // The MBR backlogs and quota use of sessions entering, asked ahead, and of those
        // leaving, given to the workers at the end of the step.
        let mut entering: HashMap<Seid, Carried> = HashMap::new();
        let mut leaving: SessionsCarried = Vec::new();
        while start.elapsed() < budget {
            let Some(seid) = k.moving.pop_front() else {
                break;
            };
            if k.mode == EngineMode::User {
                if let Some(d) = k.engine.detach(seid) {
                    let qos = k.engine.detached_qos(&d);
                    leaving.push((seid, k.carried(seid, qos)));
                    k.detached.push(d);
                }
                continue;
            }
            let Some(s) = self.workers.installed(seid).cloned() else {
                continue;
            };
            if k.reported.contains_key(&seid) {
                continue;
            }
            if carries(&s) && !entering.contains_key(&seid) {
                let next = (k.moving.iter().take(BACKLOG_BATCH - 1))
                    .filter(|x| self.workers.installed(**x).is_some_and(|s| carries(s)));
                let ahead: Vec<Seid> = std::iter::once(seid).chain(next.copied()).collect();
                entering.extend(workers_carried(&self.workers, &ahead));
            }
            let carried = entering.remove(&seid).unwrap_or_default();
            // No barrier: a session the engine can run buffers nothing.
            match k.engine.install_carrying(&s, &carried) {
                Ok(()) => {
                    k.refused.remove(&seid);
                    k.reported.insert(seid, Vec::new());
                    credit(k, &self.workers, seid);
                    moved += 1;
                }
                Err(e) => {
                    k.refused.insert(seid, e.to_string());
                }
            }
        }
        // The workers police the packets of those that left from the state the kernel left
        // (their quotas' use set: the usage carried below is not added to it).
        carry_in(&self.workers, leaving);
        if k.detached.len() >= DETACHED_BATCH || (k.moving.is_empty() && !k.detached.is_empty()) {
            let gone = std::mem::take(&mut k.detached);
            for (seid, last) in k.engine.collect(gone) {
                let left = k.unreported(seid, last);
                k.refused.insert(seid, "engine set to user".into());
                carry(&self.workers, seid, left, false);
                moved += 1;
            }
        }
        if let Some(w) = &mut k.swap {
            w.moved += moved;
            if k.moving.is_empty() && k.detached.is_empty() && w.took.is_none() {
                w.took = Some(w.started.elapsed());
            }
        }
    }

    pub fn status(&self) -> EngineStatus {
        let total = self.workers.session_count();
        match &self.kernel {
            None => EngineStatus {
                mode: None,
                on_xdp: 0,
                on_user: total,
                swap: None,
            },
            Some(k) => EngineStatus {
                mode: Some(k.mode),
                on_xdp: k.reported.len(),
                on_user: total.saturating_sub(k.reported.len()),
                swap: k.swap.clone(),
            },
        }
    }
}

impl Kernel {
    /// What the engine counted for session `seid`'s URRs `urrs` (all when empty) since
    /// their last report; marked reported.
    fn take_unreported(&mut self, seid: Seid, urrs: &[UrrId]) -> Vec<(UrrId, Volume)> {
        let Some(base) = self.reported.get_mut(&seid) else {
            return Vec::new();
        };
        let now = match self.engine.usage(seid) {
            Ok(u) => u,
            Err(e) => {
                warn!(target: "upf::xdp", "usage of {seid}: {e}");
                return Vec::new();
            }
        };
        let mut delta = Vec::with_capacity(now.len());
        for (urr, total) in now {
            if !urrs.is_empty() && !urrs.contains(&urr) {
                continue;
            }
            match base.iter_mut().find(|(u, _)| *u == urr) {
                Some((_, before)) => {
                    delta.push((urr, total.since(before)));
                    *before = total;
                }
                None => {
                    delta.push((urr, total));
                    base.push((urr, total));
                }
            }
        }
        delta
    }

    /// The backlog now of session `seid`'s MBR buckets in the kernel, and its quotas' use
    /// (`qos`, as the program left them), for the workers to continue from.
    fn carried(&self, seid: Seid, qos: std::io::Result<QosState>) -> Carried {
        let now = self.engine.clock();
        match qos {
            Ok(q) => Carried {
                backlogs: (q.buckets.into_iter())
                    .map(|b| MbrBacklog {
                        qer: b.qer,
                        uplink: b.uplink,
                        ticks: upf_dataplane::Fill::resume(b.backlog, b.last).remaining(now),
                    })
                    .collect(),
                quotas: q.quotas,
            },
            Err(e) => {
                warn!(target: "upf::xdp", "{seid}: MBR buckets and quotas not carried to the workers: {e}");
                Carried::default()
            }
        }
    }

    /// As [`Kernel::take_unreported`], for a report of those URRs: their thresholds in the
    /// kernel count from now.
    fn take_reported(&mut self, seid: Seid, urrs: &[UrrId]) -> Vec<(UrrId, Volume)> {
        let d = self.take_unreported(seid, urrs);
        if let Err(e) = self.engine.rearm(seid, urrs) {
            warn!(target: "upf::xdp", "re-arming the URRs of {seid}: {e}");
        }
        d
    }

    /// Takes session `seid` off the engine; returns what it counted since the last reports
    /// (but for a packet being processed as it goes: `Engine::remove`).
    fn take_off(&mut self, seid: Seid) -> Vec<(UrrId, Volume)> {
        let last = self.engine.remove(seid);
        self.unreported(seid, last)
    }

    /// The final counts `last` of a session taken off, less what was reported of them.
    fn unreported(
        &mut self,
        seid: Seid,
        last: std::io::Result<Vec<(UrrId, Volume)>>,
    ) -> Vec<(UrrId, Volume)> {
        let base = self.reported.remove(&seid).unwrap_or_default();
        let last = last.unwrap_or_else(|e| {
            warn!(target: "upf::xdp", "final usage of {seid}: {e}");
            Vec::new()
        });
        last.into_iter()
            .map(|(urr, total)| {
                let before = base.iter().find(|(u, _)| *u == urr).map(|(_, v)| *v);
                (urr, total.since(&before.unwrap_or_default()))
            })
            .collect()
    }
}

/// Adds each URR's `usage` to the first of `reports` for that URR; returns what found none.
fn add_to(reports: &mut [UsageReport], usage: Vec<(UrrId, Volume)>) -> Vec<(UrrId, Volume)> {
    let mut left = Vec::new();
    for (urr, v) in usage {
        match reports.iter_mut().find(|r| r.urr == urr) {
            Some(r) => r.volume.add(&v),
            None if v.total_packets > 0 => left.push((urr, v)),
            None => {}
        }
    }
    left
}

/// Puts what the XDP engine counted into the workers' measurement of session `seid`, and
/// with `quota` into their quotas' use (without: the session left the kernel, which gave its
/// quotas' whole use, `carry_in`).
fn carry(workers: &Workers, seid: Seid, usage: Vec<(UrrId, Volume)>, quota: bool) {
    let usage: Vec<_> = usage
        .into_iter()
        .filter(|(_, v)| v.total_packets > 0)
        .collect();
    if usage.is_empty() {
        return;
    }
    if let Err(e) = workers.carry_usage(seid, usage, quota) {
        warn!(target: "upf::xdp", "{seid}: usage counted in the XDP engine lost: {e}");
    }
}

/// Whether session `s` has an MBR bucket or a Volume Quota (whose backlog or use moves with
/// it).
fn carries(s: &Session) -> bool {
    s.qers.iter().any(|q| q.mbr.is_some())
        || (s.urrs.iter()).any(|u| {
            let later = u.extra.as_ref().and_then(|x| x.subsequent_volume_quota);
            u.volume_quota.is_some() || later.is_some()
        })
}

/// URR `urr`'s Volume Quota in session `s`.
fn quota_of(s: &Session, urr: UrrId) -> Option<VolumeLimit> {
    s.urrs.iter().find(|u| u.id == urr)?.volume_quota
}

/// The backlogs now of the workers' MBR buckets of sessions `seids`, and their quotas' use,
/// for the kernel to continue from.
fn workers_carried(workers: &Workers, seids: &[Seid]) -> SessionsCarried {
    workers.carried(seids).unwrap_or_else(|e| {
        let n = seids.len();
        warn!(target: "upf::xdp", "MBR buckets and quotas of {n} sessions not carried to the kernel: {e}");
        Vec::new()
    })
}

/// The sessions' MBR buckets and quotas in the workers continue from the kernel's
/// `carried`.
fn carry_in(workers: &Workers, mut carried: SessionsCarried) {
    carried.retain(|(_, c)| !c.is_empty());
    if carried.is_empty() {
        return;
    }
    let n = carried.len();
    if let Err(e) = workers.carry_in(carried) {
        warn!(target: "upf::xdp", "MBR buckets and quotas of {n} sessions not carried to the workers: {e}");
    }
}

/// Session `seid` has entered the kernel: its thresholds there count what the workers
/// measured since the last report too.
fn credit(k: &mut Kernel, workers: &Workers, seid: Seid) {
    if !k.engine.has_thresholds(seid) {
        return;
    }
    let done = (workers.unreported(seid).map_err(|e| e.to_string()))
        .and_then(|u| k.engine.credit(seid, &u).map_err(|e| e.to_string()));
    if let Err(e) = done {
        warn!(target: "upf::xdp", "{seid}: thresholds count from now: {e}");
    }
}

/// One entry per URR, the volumes of its entries summed.
fn merge(usage: Vec<(UrrId, Volume)>) -> Vec<(UrrId, Volume)> {
    let mut out: Vec<(UrrId, Volume)> = Vec::new();
    for (urr, v) in usage {
        match out.iter_mut().find(|(u, _)| *u == urr) {
            Some((_, t)) => t.add(&v),
            None => out.push((urr, v)),
        }
    }
    out
}

impl Datapath for Engines {
    /// The workers' overlapped installs without the XDP engine; with it, one by one (each
    /// install also decides the session's engine).
    fn install_new(
        &mut self,
        now: Instant,
        sessions: Vec<Arc<Session>>,
    ) -> Vec<Result<Installed, DatapathError>> {
        if self.kernel.is_some() {
            let flags = InstallFlags::default();
            return sessions
                .into_iter()
                .map(|s| self.install(now, s, flags))
                .collect();
        }
        self.report_crossed();
        self.workers.install_new(now, sessions)
    }

    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        // A report raised before the change is made with the rules it was raised under.
        self.report_crossed();
        let Some(k) = &mut self.kernel else {
            return self.workers.install(now, session, flags);
        };
        let seid = session.seid;
        let take = match k.engine.check(&session) {
            _ if k.mode == EngineMode::User => Err("engine set to user".to_string()),
            Ok(()) => Ok(()),
            Err(InstallError::Full(_) | InstallError::Shapes(_)) if k.mode == EngineMode::Xdp => {
                return Err(DatapathError::NoResources("the XDP engine's maps are full"));
            }
            Err(e) => Err(e.to_string()),
        };
        let was_on = k.reported.contains_key(&seid);
        // The kernel's quotas are of the rules before the change.
        let before_rules = self.workers.installed(seid).cloned();
        // What the engine counted so far belongs to the URRs as they were.
        let before = k.take_unreported(seid, &[]);
        let mut installed = match self.workers.install(now, session.clone(), flags) {
            Ok(i) => i,
            Err(e) => {
                // Nothing changed; what was read goes with the next reports.
                if let Some(base) = k.reported.get_mut(&seid) {
                    for (urr, d) in &before {
                        if let Some((_, v)) = base.iter_mut().find(|(u, _)| u == urr) {
                            *v = v.since(d);
                        }
                    }
                }
                return Err(e);
            }
        };
        let kept: Vec<UrrId> = session.urrs.iter().map(|u| u.id).collect();
        let (stays, gone): (Vec<_>, Vec<_>) =
            before.into_iter().partition(|(u, _)| kept.contains(u));
        for (urr, v) in add_to(&mut installed.removed_urr_usage, gone) {
            warn!(target: "upf::xdp", "{seid}: usage of removed {urr:?} without a report: {v:?}");
        }
        let taken = match take {
            Ok(()) => {
                if !was_on {
                    // Packets the workers held for it (a FAR that stopped buffering) leave
                    // before the program forwards new ones.
                    self.workers.barrier(seid);
                }
                // Entering: its buckets and quotas go on from the workers'; staying: from the
                // kernel's.
                let carried = if was_on || !carries(&session) {
                    Carried::default()
                } else {
                    let c = workers_carried(&self.workers, &[seid]);
                    c.into_iter().next().map(|(_, c)| c).unwrap_or_default()
                };
                (k.engine.install_carrying(&session, &carried)).map_err(|e| e.to_string())
            }
            Err(why) => Err(why),
        };
        match taken {
            Ok(()) => {
                k.refused.remove(&seid);
                if !was_on {
                    credit(k, &self.workers, seid);
                }
                let base = k.reported.entry(seid).or_default();
                base.retain(|(u, _)| kept.contains(u));
                // The engine's counters since the read above were not reported yet.
                if !stays.is_empty() {
                    carry(&self.workers, seid, stays, true);
                }
            }
            Err(why) => {
                let mut carried = stays;
                if was_on {
                    // Read as it leaves: what the program takes from them between this read
                    // and its keys' removal (microseconds) is not carried.
                    let mut c = k.carried(seid, k.engine.qos(seid));
                    // A changed quota is a new grant in the workers (UrrState::update).
                    (c.quotas).retain(|u| {
                        let was = before_rules.as_deref().and_then(|b| quota_of(b, u.urr));
                        was.is_some() && was == quota_of(&session, u.urr)
                    });
                    carry_in(&self.workers, vec![(seid, c)]);
                    carried.extend(k.take_off(seid));
                }
                if !carried.is_empty() {
                    // Not into the quotas' use when it left: set from the kernel's above.
                    carry(&self.workers, seid, merge(carried), !was_on);
                }
                k.refused.insert(seid, why);
            }
        }
        Ok(installed)
    }

    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        let Some(k) = &mut self.kernel else {
            return self.workers.remove(now, seid);
        };
        k.refused.remove(&seid);
        let last = if k.reported.contains_key(&seid) {
            k.take_off(seid)
        } else {
            Vec::new()
        };
        let mut reports = self.workers.remove(now, seid)?;
        add_to(&mut reports, last);
        Ok(reports)
    }

    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        // A threshold crossed before the query is reported before it.
        self.report_crossed();
        let mut reports = self.workers.query_usage(now, seid, urrs)?;
        if let Some(k) = &mut self.kernel {
            let d = k.take_reported(seid, urrs);
            let left = add_to(&mut reports, d);
            if !left.is_empty() {
                carry(&self.workers, seid, left, true);
            }
        }
        Ok(reports)
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        self.report_crossed();
        if let Some(r) = self.kernel.as_mut().and_then(|k| k.made.pop_front()) {
            return Some(DatapathEvent::Usage(r));
        }
        let mut e = self.workers.poll_event()?;
        if let (Some(k), DatapathEvent::Usage(r)) = (&mut self.kernel, &mut e) {
            if k.reported.contains_key(&r.seid) {
                let d = k.take_reported(r.seid, &[r.urr]);
                let _ = add_to(std::slice::from_mut(r), d);
            }
        }
        Some(e)
    }
}
