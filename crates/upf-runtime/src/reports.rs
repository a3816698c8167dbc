//! The usage reports of a session installed on several workers, made one per URR as TS
//! 29.244 §5.2.2 has them: a report carries the URR's usage since its previous report, over
//! every worker, and the measurement restarts after it. Sans-IO: the caller asks the workers
//! (a query of one URR, a removal) and hands the answers here.
//!
//! Each worker measures its copy of the session and reports on its own. A report of a
//! trigger (an event) is sent merged with the owners' usage of that URR since, which the
//! caller reads by querying them ([`Step::Merge`]); a report that only a worker's own clock
//! raised on a worker other than the session's lead (its first owner) is not sent, its usage
//! held back for the next report of the URR (event, query or removal). Which triggers are
//! which, per flag:
//! - VOLTH, VOLQU: the volume shared over the workers (`upf_dataplane::budgets`) is found
//!   reached by one worker, which reports: sent from any worker.
//! - DROTH, and the triggers this data path does not raise (EVETH, EVEQU, MACAR, ENVCL,
//!   IPMJL, TEBUR, EMRRE, UPINT, and IMMER/TERMR, which are answers, not events): something
//!   one worker saw in its own traffic, that the others may never see: sent from any worker.
//! - PERIO, TIMTH, TIMQU, QUHTI, QUVTI, MONIT: each worker's own clock, every worker raising
//!   the same one (the merge restarts every owner's measurement, so their clocks stay
//!   aligned with the lead's): sent from the lead only.
//! - START, STOPT: traffic starts on the session when it starts on its first worker and
//!   stops when it has stopped on every worker: sent when the set of workers with traffic
//!   becomes non-empty (START) or empty (STOPT).
//! - LIUSA: follows the report it is linked to, which the same worker sent just before.

use smallvec::SmallVec;
use std::time::Duration;
use upf_dataplane::FastMap;
use upf_rules::{Seid, UrrId, UsageInformation, UsageReport, UsageTrigger};

/// One worker's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub worker: usize,
    pub report: UsageReport,
}

/// What to do with a worker's report event.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send it as it is (no other worker holds usage of it).
    Emit(UsageReport),
    /// Nothing to send: its usage is held back for the next report of its URR.
    Hold,
    /// Query `query` for the URR and hand the answers to [`Reports::merged`].
    Merge(Merging),
}

/// A report to send once the other owners' usage of its URR is in.
#[derive(Debug, PartialEq, Eq)]
pub struct Merging {
    event: Piece,
    /// The workers to query for the URR: every owner, the reporting one too (what it
    /// counted since it reported goes in, so that the report is the URR's usage up to the
    /// moment the query restarts it everywhere, shared thresholds included).
    pub query: SmallVec<[usize; 4]>,
}

impl Merging {
    pub fn seid(&self) -> Seid {
        self.event.report.seid
    }

    pub fn urr(&self) -> UrrId {
        self.event.report.urr
    }
}

/// What is kept for one URR of a session on several workers.
#[derive(Debug, Default)]
struct UrrHeld {
    urr: UrrId,
    /// Usage not yet reported: at most one piece per worker and Usage Information.
    pieces: Vec<Piece>,
    /// The workers on which traffic started and did not stop (START / STOPT).
    active: SmallVec<[usize; 2]>,
}

/// The held-back usage and traffic state of the sessions on several workers: one entry per
/// (session, URR) that has some, dropped with the session or the URR.
#[derive(Debug, Default)]
pub struct Reports {
    sessions: FastMap<Seid, Vec<UrrHeld>>,
    /// Per worker, its last report event's session and whether it was sent (for LIUSA).
    last: Vec<Option<(Seid, bool)>>,
}

/// Triggers sent from any worker (see the module's documentation).
const ANY_WORKER: UsageTrigger = UsageTrigger::VOLTH
    .union(UsageTrigger::VOLQU)
    .union(UsageTrigger::DROTH)
    .union(UsageTrigger::IMMER)
    .union(UsageTrigger::TERMR)
    .union(UsageTrigger::ENVCL)
    .union(UsageTrigger::MACAR)
    .union(UsageTrigger::EVETH)
    .union(UsageTrigger::EVEQU)
    .union(UsageTrigger::TEBUR)
    .union(UsageTrigger::IPMJL)
    .union(UsageTrigger::EMRRE)
    .union(UsageTrigger::UPINT);
/// Triggers of the traffic on the session as a whole.
const TRAFFIC: UsageTrigger = UsageTrigger::START.union(UsageTrigger::STOPT);

impl Reports {
    /// Whether anything is held for session `seid` (a session on one worker without any
    /// takes the fast route: its reports go out as they come).
    pub fn holds(&self, seid: Seid) -> bool {
        self.sessions.contains_key(&seid)
    }

    fn urr_mut(&mut self, seid: Seid, urr: UrrId) -> &mut UrrHeld {
        let urrs = self.sessions.entry(seid).or_default();
        let i = match urrs.iter().position(|u| u.urr == urr) {
            Some(i) => i,
            None => {
                urrs.push(UrrHeld {
                    urr,
                    ..Default::default()
                });
                urrs.len() - 1
            }
        };
        &mut urrs[i]
    }

    /// Drops the entries of session `seid` with nothing left in them.
    fn tidy(&mut self, seid: Seid) {
        if let Some(urrs) = self.sessions.get_mut(&seid) {
            urrs.retain(|u| !u.pieces.is_empty() || !u.active.is_empty());
            if urrs.is_empty() {
                self.sessions.remove(&seid);
            }
        }
    }

    /// Holds `p` back: added to the piece of the same worker and Usage Information.
    fn hold(&mut self, p: Piece) {
        let u = self.urr_mut(p.report.seid, p.report.urr);
        let same = |q: &&mut Piece| {
            q.worker == p.worker && q.report.usage_information == p.report.usage_information
        };
        match u.pieces.iter_mut().find(same) {
            Some(q) => {
                add(&mut q.report, &p.report);
                q.report.duration += p.report.duration;
            }
            None => u.pieces.push(p),
        }
    }

    /// Takes the held pieces of session `seid`'s URRs `urrs` (empty: all of them).
    fn take(&mut self, seid: Seid, urrs: &[UrrId]) -> Vec<Piece> {
        let mut out = Vec::new();
        if let Some(held) = self.sessions.get_mut(&seid) {
            for u in held
                .iter_mut()
                .filter(|u| urrs.is_empty() || urrs.contains(&u.urr))
            {
                out.append(&mut u.pieces);
            }
        }
        self.tidy(seid);
        out
    }

    /// A report event of worker `worker`, of a session installed on `owners` (the first
    /// the lead).
    pub fn event(&mut self, worker: usize, owners: &[usize], report: UsageReport) -> Step {
        let (seid, urr) = (report.seid, report.urr);
        let piece = Piece { worker, report };
        // The usage before a Monitoring Time comes just before that after it, in the same
        // report: it waits for it, and goes with it.
        if report.usage_information == UsageInformation::BEF {
            self.hold(piece);
            return Step::Hold;
        }
        let mut trigger = report.trigger;
        let mut send = trigger.intersects(ANY_WORKER);
        if trigger.intersects(TRAFFIC) && owners.len() > 1 {
            let u = self.urr_mut(seid, urr);
            let was = !u.active.is_empty();
            if trigger.contains(UsageTrigger::START) && !u.active.contains(&worker) {
                u.active.push(worker);
            }
            if trigger.contains(UsageTrigger::STOPT) {
                u.active.retain(|w| *w != worker);
            }
            let is = !u.active.is_empty();
            // Only the session's own start and stop of traffic are reported as such.
            if was || !is {
                trigger.remove(UsageTrigger::START);
            }
            if !was || is {
                trigger.remove(UsageTrigger::STOPT);
            }
            send |= trigger.intersects(TRAFFIC);
        }
        let lead = owners.first() == Some(&worker);
        let liusa = trigger.contains(UsageTrigger::LIUSA);
        if liusa && !send {
            // The same worker sent the report this one is linked to just before.
            send = match self.last.get(worker).copied().flatten() {
                Some((s, sent)) if s == seid => sent,
                _ => lead,
            };
        }
        // Clock triggers (and any other): the lead's.
        send |= lead && !trigger.is_empty();
        if !liusa {
            if self.last.len() <= worker {
                self.last.resize(worker + 1, None);
            }
            self.last[worker] = Some((seid, send));
        }
        if !send {
            self.hold(piece);
            self.tidy(seid);
            return Step::Hold;
        }
        let piece = Piece {
            worker,
            report: UsageReport { trigger, ..report },
        };
        if owners.len() <= 1 {
            if !self.holds(seid) {
                return Step::Emit(piece.report);
            }
            return Step::Merge(Merging {
                event: piece,
                query: SmallVec::new(),
            });
        }
        Step::Merge(Merging {
            event: piece,
            query: owners.iter().copied().collect(),
        })
    }

    /// The report of `m` with the other owners' usage of its URR (`queried`: their answers
    /// to a query of it) and what was held back: one report, or two (before and after a
    /// Monitoring Time).
    pub fn merged(&mut self, m: Merging, queried: Vec<Piece>) -> Vec<UsageReport> {
        let (seid, urr) = (m.seid(), m.urr());
        let mut pieces = vec![m.event];
        pieces.extend(queried);
        pieces.extend(self.take(seid, &[urr]));
        merge(pieces)
    }

    /// The answers to a query of session `seid`'s URRs `urrs` (empty: all), with what was
    /// held back of them.
    pub fn queried(&mut self, seid: Seid, urrs: &[UrrId], answers: Vec<Piece>) -> Vec<UsageReport> {
        let mut pieces = answers;
        pieces.extend(self.take(seid, urrs));
        merge(pieces)
    }

    /// The final reports of session `seid`, removed (`answers`: its workers' final
    /// reports), with what was held back; forgets the session.
    pub fn removed(&mut self, seid: Seid, answers: Vec<Piece>) -> Vec<UsageReport> {
        let mut pieces = answers;
        pieces.extend(self.take(seid, &[]));
        self.sessions.remove(&seid);
        merge(pieces)
    }

    /// Session `seid` is now installed with the URRs `kept` (its workers changed when
    /// `moved`): `answers`, its workers' final reports of the URRs it no longer has, with
    /// what was held back of those, are their final reports. Their state goes; so does the
    /// traffic state of a session that moved (its new workers start afresh).
    pub fn reinstalled(
        &mut self,
        seid: Seid,
        kept: &[UrrId],
        moved: bool,
        answers: Vec<Piece>,
    ) -> Vec<UsageReport> {
        let mut pieces = answers;
        if let Some(held) = self.sessions.get_mut(&seid) {
            for u in held.iter_mut() {
                if !kept.contains(&u.urr) {
                    pieces.append(&mut u.pieces);
                    u.active.clear();
                }
                if moved {
                    u.active.clear();
                }
            }
        }
        self.tidy(seid);
        merge(pieces)
    }

    /// Holds `p` back for the next report of its URR (the usage of a worker the session left).
    pub fn keep(&mut self, p: Piece) {
        self.hold(p);
    }
}

/// Adds `o`'s usage to `r` (not the duration: see [`merge`]).
fn add(r: &mut UsageReport, o: &UsageReport) {
    r.volume.add(&o.volume);
    r.first_packet = match (r.first_packet, o.first_packet) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    r.last_packet = r.last_packet.max(o.last_packet);
    r.start = match (r.start, o.start) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    r.end = r.end.max(o.end);
}

/// Sums the pieces of reports per URR and Usage Information, each URR's in the order BEF,
/// AFT, none, URRs in order of their first piece, each with the trigger of its URR's first
/// piece. A piece without Usage Information of a URR whose usage is split at a Monitoring
/// Time goes with the side it ended on (a worker's report without it, before the split, or
/// after it once that worker reported the split).
///
/// Duration: the pieces of one worker follow each other (a report restarts its
/// measurement), so they add up; over workers, the longest. Every worker measures the wall
/// clock since the same report, give or take the time to query them, so the longest is that
/// time; with an Inactivity Detection Time each measures the usage time of its own traffic,
/// and the session was in use at least as long as its most used worker (the sum would count
/// time used on two workers at once twice).
pub fn merge(pieces: Vec<Piece>) -> Vec<UsageReport> {
    struct Group {
        r: UsageReport,
        per_worker: SmallVec<[(usize, Duration); 4]>,
    }
    let split = |urr: UrrId| {
        (pieces.iter())
            .find(|p| p.report.urr == urr && p.report.usage_information == UsageInformation::BEF)
            .map(|p| p.report.end)
    };
    let mut urrs: SmallVec<[(UrrId, UsageTrigger); 4]> = SmallVec::new();
    let mut groups: Vec<Group> = Vec::with_capacity(pieces.len());
    for p in &pieces {
        let mut r = p.report;
        if !urrs.iter().any(|(u, _)| *u == r.urr) {
            urrs.push((r.urr, r.trigger));
        }
        if r.usage_information.is_empty() {
            if let Some(at) = split(r.urr) {
                r.usage_information = if r.end <= at {
                    UsageInformation::BEF
                } else {
                    UsageInformation::AFT
                };
            }
        }
        let same =
            |g: &&mut Group| g.r.urr == r.urr && g.r.usage_information == r.usage_information;
        match groups.iter_mut().find(same) {
            Some(g) => {
                add(&mut g.r, &r);
                match g.per_worker.iter_mut().find(|(w, _)| *w == p.worker) {
                    Some((_, d)) => *d += r.duration,
                    None => g.per_worker.push((p.worker, r.duration)),
                }
            }
            None => groups.push(Group {
                r,
                per_worker: smallvec::smallvec![(p.worker, r.duration)],
            }),
        }
    }
    let side = |i: UsageInformation| match i {
        UsageInformation::BEF => 0,
        UsageInformation::AFT => 1,
        _ => 2,
    };
    let rank = |urr: UrrId| urrs.iter().position(|(u, _)| *u == urr).unwrap_or(0);
    groups.sort_by_key(|g| (rank(g.r.urr), side(g.r.usage_information)));
    groups
        .into_iter()
        .map(|g| {
            let mut r = g.r;
            r.trigger = urrs[rank(r.urr)].1;
            r.duration = g
                .per_worker
                .iter()
                .map(|(_, d)| *d)
                .max()
                .unwrap_or_default();
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use upf_rules::Volume;

    const S: Seid = Seid(7);
    const U: UrrId = UrrId(1);

    fn bytes(n: u64) -> Volume {
        Volume {
            total_bytes: n,
            uplink_bytes: n,
            downlink_bytes: 0,
            total_packets: 1,
            uplink_packets: 1,
            downlink_packets: 0,
        }
    }

    /// A report of `n` octets measured from `t0 + from` s to `t0 + to` s.
    fn rep(t0: Instant, trigger: UsageTrigger, n: u64, from: u64, to: u64) -> UsageReport {
        let at = |s| t0 + Duration::from_secs(s);
        UsageReport {
            seid: S,
            urr: U,
            trigger,
            start: Some(at(from)),
            end: at(to),
            volume: bytes(n),
            duration: Duration::from_secs(to - from),
            first_packet: Some(at(from)),
            last_packet: Some(at(to)),
            usage_information: UsageInformation::empty(),
        }
    }

    fn piece(worker: usize, report: UsageReport) -> Piece {
        Piece { worker, report }
    }

    /// What the caller does with a step, the workers answering the query with `answers`.
    fn run(r: &mut Reports, step: Step, answers: &[Piece]) -> Vec<UsageReport> {
        match step {
            Step::Emit(e) => vec![e],
            Step::Hold => Vec::new(),
            Step::Merge(m) => {
                let q: Vec<Piece> = (answers.iter())
                    .filter(|a| m.query.contains(&a.worker) && a.report.urr == m.urr())
                    .copied()
                    .collect();
                r.merged(m, q)
            }
        }
    }

    fn total(rs: &[UsageReport]) -> u64 {
        rs.iter().map(|r| r.volume.total_bytes).sum()
    }

    #[test]
    fn a_threshold_report_holds_every_workers_volume() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        // Worker 1 (not the lead) finds the shared threshold reached; worker 0 counted too.
        let step = r.event(1, &[0, 1], rep(t0, UsageTrigger::VOLTH, 600, 0, 5));
        let Step::Merge(m) = &step else {
            panic!("{step:?}")
        };
        assert_eq!(&m.query[..], [0, 1]);
        let answer = piece(0, rep(t0, UsageTrigger::IMMER, 400, 0, 5));
        let out = run(&mut r, step, &[answer]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].trigger, UsageTrigger::VOLTH);
        assert_eq!(out[0].volume.total_bytes, 1000);
        assert_eq!(out[0].volume.total_packets, 2);
        assert_eq!(
            out[0].duration,
            Duration::from_secs(5),
            "the longest, not the sum"
        );
        assert!(!r.holds(S));
    }

    #[test]
    fn a_period_is_reported_once_with_everything() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1];
        // The non-lead's period ends first: held, not sent.
        let early = r.event(1, &owners, rep(t0, UsageTrigger::PERIO, 300, 0, 10));
        assert_eq!(early, Step::Hold);
        assert!(r.holds(S));
        // The lead's: sent with worker 1's usage since (queried) and what it held.
        let step = r.event(0, &owners, rep(t0, UsageTrigger::PERIO, 500, 0, 10));
        let out = run(
            &mut r,
            step,
            &[piece(1, rep(t0, UsageTrigger::IMMER, 20, 10, 10))],
        );
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].trigger, UsageTrigger::PERIO);
        assert_eq!(total(&out), 820);
        assert_eq!(out[0].duration, Duration::from_secs(10));
        assert!(!r.holds(S), "nothing left behind");
        // Next period: the lead first; worker 1's own (restarted by the query) comes later
        // with what it counted since and is held for the period after.
        let step = r.event(0, &owners, rep(t0, UsageTrigger::PERIO, 50, 10, 20));
        let out = run(
            &mut r,
            step,
            &[piece(1, rep(t0, UsageTrigger::IMMER, 70, 10, 20))],
        );
        assert_eq!((out.len(), total(&out)), (1, 120));
        assert_eq!(
            r.event(1, &owners, rep(t0, UsageTrigger::PERIO, 0, 20, 20)),
            Step::Hold
        );
    }

    #[test]
    fn held_usage_goes_into_the_next_query_and_the_removal() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1, 2];
        assert_eq!(
            r.event(2, &owners, rep(t0, UsageTrigger::TIMTH, 100, 0, 4)),
            Step::Hold
        );
        assert_eq!(
            r.event(1, &owners, rep(t0, UsageTrigger::QUHTI, 10, 0, 4)),
            Step::Hold
        );
        let answers = vec![
            piece(0, rep(t0, UsageTrigger::IMMER, 1, 0, 6)),
            piece(1, rep(t0, UsageTrigger::IMMER, 2, 4, 6)),
            piece(2, rep(t0, UsageTrigger::IMMER, 3, 4, 6)),
        ];
        let out = r.queried(S, &[U], answers);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].trigger, UsageTrigger::IMMER);
        assert_eq!(total(&out), 116);
        assert_eq!(out[0].duration, Duration::from_secs(6));
        assert!(!r.holds(S));
        // Held again, then the session goes: its final report has it, and nothing stays.
        assert_eq!(
            r.event(1, &owners, rep(t0, UsageTrigger::PERIO, 40, 6, 9)),
            Step::Hold
        );
        let out = r.removed(
            S,
            vec![
                piece(0, rep(t0, UsageTrigger::TERMR, 5, 6, 10)),
                piece(1, rep(t0, UsageTrigger::TERMR, 6, 9, 10)),
            ],
        );
        assert_eq!((out.len(), total(&out)), (1, 51));
        assert_eq!(out[0].trigger, UsageTrigger::TERMR);
        assert!(!r.holds(S));
    }

    #[test]
    fn held_usage_of_a_removed_urr_goes_into_its_final_report() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        assert_eq!(
            r.event(1, &[0, 1], rep(t0, UsageTrigger::PERIO, 40, 0, 9)),
            Step::Hold
        );
        // A modification that keeps the URR keeps what is held.
        assert!(r.reinstalled(S, &[U], false, Vec::new()).is_empty());
        assert!(r.holds(S));
        let answers = vec![piece(0, rep(t0, UsageTrigger::TERMR, 5, 0, 10))];
        let out = r.reinstalled(S, &[UrrId(2)], false, answers);
        assert_eq!((out.len(), total(&out)), (1, 45));
        assert!(!r.holds(S));
    }

    #[test]
    fn before_and_after_a_monitoring_time_stay_apart() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1];
        let split = |w: usize, trigger, before: u64, after: u64| {
            let mut b = rep(t0, trigger, before, 0, 10);
            let mut a = rep(t0, trigger, after, 10, 12);
            b.usage_information = UsageInformation::BEF;
            a.usage_information = UsageInformation::AFT;
            [piece(w, b), piece(w, a)]
        };
        // Worker 1 held a period before the monitoring time (at 10 s).
        assert_eq!(
            r.event(1, &owners, rep(t0, UsageTrigger::PERIO, 7, 0, 8)),
            Step::Hold
        );
        // Worker 0's threshold report, split at it: BEF comes first and waits for AFT.
        let [b, a] = split(0, UsageTrigger::VOLTH, 100, 20);
        assert_eq!(r.event(0, &owners, b.report), Step::Hold);
        let step = r.event(0, &owners, a.report);
        // Worker 1 answers the query split too (usage 8 s..10 s before, after).
        let [mut qb, qa] = split(1, UsageTrigger::IMMER, 1000, 3);
        qb.report.start = Some(t0 + Duration::from_secs(8));
        qb.report.duration = Duration::from_secs(2);
        let out = run(&mut r, step, &[qb, qa]);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].usage_information, UsageInformation::BEF);
        assert_eq!(out[1].usage_information, UsageInformation::AFT);
        assert_eq!(out[0].volume.total_bytes, 100 + 1000 + 7);
        assert_eq!(out[1].volume.total_bytes, 20 + 3);
        assert!(out.iter().all(|o| o.trigger == UsageTrigger::VOLTH));
        // Worker 1's two pieces before the split add up (8 s + 2 s), worker 0's took 10 s.
        assert_eq!(out[0].duration, Duration::from_secs(10));
        // One worker's two reports of one URR are not summed into one by a query either.
        let out = merge(split(0, UsageTrigger::IMMER, 5, 6).to_vec());
        assert_eq!(out.len(), 2);
        assert!(!r.holds(S));
    }

    #[test]
    fn traffic_starts_on_the_first_worker_and_stops_on_the_last() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1];
        let ev = |r: &mut Reports, w, t, n| r.event(w, &owners, rep(t0, t, n, 0, 1));
        // Traffic on worker 1 only: its START is the session's.
        let step = ev(&mut r, 1, UsageTrigger::START, 1);
        let out = run(
            &mut r,
            step,
            &[piece(0, rep(t0, UsageTrigger::IMMER, 0, 0, 1))],
        );
        assert_eq!(out[0].trigger, UsageTrigger::START);
        assert_eq!(ev(&mut r, 0, UsageTrigger::START, 2), Step::Hold);
        // Its START with a threshold reached: the threshold only.
        let step = ev(&mut r, 1, UsageTrigger::START | UsageTrigger::VOLTH, 0);
        assert_eq!(run(&mut r, step, &[])[0].trigger, UsageTrigger::VOLTH);
        assert_eq!(ev(&mut r, 1, UsageTrigger::STOPT, 4), Step::Hold);
        let step = ev(&mut r, 0, UsageTrigger::STOPT, 8);
        let out = run(&mut r, step, &[]);
        assert_eq!(out[0].trigger, UsageTrigger::STOPT);
        assert_eq!(total(&out), 12, "with what the held STOPT measured");
        assert!(!r.holds(S), "no traffic, nothing held: no entry");
    }

    #[test]
    fn linked_usage_follows_the_report_it_is_linked_to() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1];
        let linked = |n| {
            let mut l = rep(t0, UsageTrigger::LIUSA, n, 0, 1);
            l.urr = UrrId(2);
            l
        };
        assert_eq!(
            r.event(1, &owners, rep(t0, UsageTrigger::PERIO, 1, 0, 1)),
            Step::Hold
        );
        assert_eq!(r.event(1, &owners, linked(2)), Step::Hold);
        let step = r.event(1, &owners, rep(t0, UsageTrigger::VOLQU, 1, 0, 1));
        assert!(matches!(step, Step::Merge(_)));
        let step = r.event(1, &owners, linked(3));
        let out = run(&mut r, step, &[]);
        assert_eq!(
            (out[0].urr, out[0].trigger),
            (UrrId(2), UsageTrigger::LIUSA)
        );
        assert_eq!(total(&out), 5);
    }

    #[test]
    fn one_worker_goes_out_as_it_comes() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let e = rep(t0, UsageTrigger::PERIO, 9, 0, 1);
        assert_eq!(r.event(3, &[3], e), Step::Emit(e));
        // A session that moved to one worker still sends what was held with its next report.
        r.keep(piece(0, rep(t0, UsageTrigger::TERMR, 1, 0, 1)));
        let step = r.event(3, &[3], e);
        assert_eq!(total(&run(&mut r, step, &[])), 10);
        assert!(!r.holds(S));
    }

    /// Whatever order the workers' reports come in and whichever are held, every octet a
    /// worker counted is sent once.
    #[test]
    fn nothing_is_lost_or_counted_twice() {
        let t0 = Instant::now();
        let mut r = Reports::default();
        let owners = [0, 1, 2];
        let triggers = [
            UsageTrigger::PERIO,
            UsageTrigger::VOLTH,
            UsageTrigger::TIMTH,
            UsageTrigger::START,
            UsageTrigger::STOPT,
            UsageTrigger::QUHTI,
            UsageTrigger::DROTH,
        ];
        // Each worker's usage since its last report.
        let mut pending = [0u64; 3];
        let (mut counted, mut sent) = (0u64, 0u64);
        let mut x: u64 = 12345;
        for step in 0..500u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let w = (x >> 33) as usize % 3;
            let n = (x >> 40) % 1000;
            for p in &mut pending {
                *p += n;
                counted += n;
            }
            let t = triggers[(x >> 20) as usize % triggers.len()];
            let e = rep(t0, t, std::mem::take(&mut pending[w]), step, step + 1);
            let out = match r.event(w, &owners, e) {
                Step::Emit(e) => vec![e],
                Step::Hold => Vec::new(),
                Step::Merge(m) => {
                    let q = (m.query.iter())
                        .map(|&o| {
                            piece(
                                o,
                                rep(
                                    t0,
                                    UsageTrigger::IMMER,
                                    std::mem::take(&mut pending[o]),
                                    step,
                                    step + 1,
                                ),
                            )
                        })
                        .collect();
                    r.merged(m, q)
                }
            };
            sent += total(&out);
        }
        let last = (0..3)
            .map(|w| piece(w, rep(t0, UsageTrigger::TERMR, pending[w], 500, 501)))
            .collect();
        sent += total(&r.removed(S, last));
        assert_eq!(sent, counted);
        assert!(!r.holds(S));
    }
}
