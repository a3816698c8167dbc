//! What the workers a session lives on share when it lives on several (a spread UE, a
//! session without a UE address): its QERs' bit and packet rates, one bucket each that every
//! worker draws from ([`upf_rules::budget`]), so that the session gets its rates however its
//! packets fall on the workers; its URRs' volume thresholds and quotas (total, uplink and
//! downlink), so that each is reached once over all of them. A session on one worker has none and polices and counts
//! on its own.

use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use upf_rules::budget::{bit_rate, Aggregate, AggregateRates, Draw, SharedRate, SharedVolume};
use upf_rules::{AggregateKey, Qer, QerId, ReportingTriggers, Session, Urr, UrrId};

/// The aggregates of QER Correlation IDs ([`AggregateKey`]) of the pipelines made from one
/// [`crate::PipelineConfig`], every worker's: one set of buckets per key while an installed
/// session's QER holds it, whichever worker it is on. Locked only to install.
#[derive(Debug, Default)]
pub struct Aggregates {
    map: Mutex<AggregateMap>,
}

#[derive(Debug, Default)]
struct AggregateMap {
    live: HashMap<AggregateKey, Weak<AggregateRates>>,
    /// The size at which entries no session holds any more are swept out.
    sweep_at: usize,
}

impl Aggregates {
    /// The buckets of `q`'s aggregate, if it has one: those sessions hold, or new ones at
    /// its MBR. An existing aggregate's rate is left to [`Aggregates::set_rates`], once the
    /// install that names it can no longer fail.
    pub(crate) fn get(&self, now: Instant, q: &Qer) -> Option<Aggregate> {
        let (key, mbr) = (q.aggregate?, q.mbr?);
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = m.live.get(&key).and_then(Weak::upgrade) {
            return Some(Aggregate(a));
        }
        let a = Aggregate::new(
            now,
            q.correlation_id.unwrap_or(0),
            mbr,
            q.averaging_window(),
        );
        m.live.insert(key, Arc::downgrade(&a.0));
        if m.live.len() > m.sweep_at {
            m.live.retain(|_, w| w.strong_count() > 0);
            m.sweep_at = (2 * m.live.len()).max(64);
        }
        Some(a)
    }

    /// The rates (bits a second, uplink and downlink) of `key`'s aggregate while a session
    /// holds it.
    pub fn rates(&self, key: AggregateKey) -> Option<(u64, u64)> {
        let m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let a = m.live.get(&key)?.upgrade()?;
        Some((a.uplink.rate().0, a.downlink.rate().0))
    }

    /// Sets the aggregates of `s`'s QERs to their MBRs: the last session installed with an
    /// aggregate gives it its rate.
    pub(crate) fn set_rates(&self, s: &Session) {
        let m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for q in &s.qers {
            let (Some(key), Some(mbr)) = (q.aggregate, q.mbr) else {
                continue;
            };
            if let Some(a) = m.live.get(&key).and_then(Weak::upgrade) {
                Aggregate(a).set_rate(mbr, q.averaging_window());
            }
        }
    }
}

/// The shared buckets of one session's QERs; made by whoever places the session on several
/// workers and handed to each with the install.
#[derive(Debug, Default)]
pub struct SessionBudgets {
    qers: Vec<(QerId, QerBudget)>,
    urrs: Vec<(UrrId, UrrBudget)>,
}

/// One QER's shared buckets, per direction (0 downlink, 1 uplink).
#[derive(Debug, Default)]
pub(crate) struct QerBudget {
    pub bits: [Option<Arc<SharedRate>>; 2],
    pub packets: [Option<Arc<SharedRate>>; 2],
}

impl SessionBudgets {
    /// The buckets of `s`'s QERs; those of `old` (the session's previous version) are kept
    /// for the QERs still there, at their new rates.
    pub fn new(now: Instant, s: &Session, old: Option<&SessionBudgets>) -> Self {
        let qers = s
            .qers
            .iter()
            .map(|q| {
                let old = old.and_then(|o| o.qer(q.id));
                (q.id, QerBudget::new(now, q, old))
            })
            .collect();
        let urrs = s
            .urrs
            .iter()
            .map(|u| {
                let old = old.and_then(|o| o.urr(u.id));
                (u.id, UrrBudget::new(u, old))
            })
            .filter(|(_, b)| b.threshold.iter().chain(&b.quota).any(Option::is_some))
            .collect();
        Self { qers, urrs }
    }

    pub(crate) fn qer(&self, id: QerId) -> Option<&QerBudget> {
        self.qers.iter().find(|(q, _)| *q == id).map(|(_, b)| b)
    }

    /// The session's measurement restarted on every worker (a usage query): its URRs'
    /// thresholds count from zero again. What a worker leased before and has not counted
    /// is left to it: the next threshold is found at most a chunk a worker late.
    pub fn restart_thresholds(&self, urrs: &[UrrId]) {
        for (id, b) in &self.urrs {
            if urrs.is_empty() || urrs.contains(id) {
                for (v, _) in b.threshold.iter().flatten() {
                    v.restart();
                }
            }
        }
    }

    pub(crate) fn urr(&self, id: UrrId) -> Option<&UrrBudget> {
        self.urrs.iter().find(|(u, _)| *u == id).map(|(_, b)| b)
    }
}

impl QerBudget {
    fn new(now: Instant, q: &Qer, old: Option<&QerBudget>) -> Self {
        let window = q.averaging_window();
        let rate = |old: Option<&Arc<SharedRate>>, (units, per, depth): (u64, Duration, u64)| {
            Some(match old {
                Some(o) => {
                    o.set_rate(units, per, depth);
                    o.clone()
                }
                None => Arc::new(SharedRate::new(now, units, per, depth)),
            })
        };
        let mut b = QerBudget::default();
        let olds = |k: usize, packets: bool| {
            old.and_then(|o| {
                if packets {
                    o.packets[k].as_ref()
                } else {
                    o.bits[k].as_ref()
                }
            })
        };
        if let Some(m) = q.mbr {
            for (k, kbps) in [(0, m.downlink_kbps), (1, m.uplink_kbps)] {
                if kbps > 0 {
                    b.bits[k] = rate(olds(k, false), bit_rate(kbps, window));
                }
            }
        }
        if let Some(r) = q.packet_rate {
            for (k, r) in [(0, r.downlink), (1, r.uplink)] {
                if let Some((n, per_s)) = r {
                    let per = Duration::from_secs(per_s.max(1).into());
                    b.packets[k] = rate(olds(k, true), (n.into(), per, n.into()));
                }
            }
        }
        b
    }
}

/// What one worker's copy of a QER draws from shared buckets, per direction (0 downlink, 1
/// uplink): the session's spread rates (instead of buckets of its own) and its Correlation
/// ID's aggregate.
#[derive(Debug, Clone, Default)]
pub(crate) struct Draws {
    pub bits: [SmallVec<[Draw; 2]>; 2],
    pub packets: [Option<Draw>; 2],
    /// The Correlation ID's aggregate drawn on: held, so that [`Aggregates`] keeps it for
    /// the next session that names it.
    pub aggregate: Option<Aggregate>,
}

impl Draws {
    /// Every bit draw of the direction has `bits` at hand (leasing as needed).
    #[inline]
    pub fn conforms(&mut self, clock: u64, uplink: bool, bits: u64) -> bool {
        self.bits[usize::from(uplink)]
            .iter_mut()
            .all(|d| d.conforms(clock, bits))
    }

    #[inline]
    pub fn take(&mut self, uplink: bool, bits: u64) {
        for d in &mut self.bits[usize::from(uplink)] {
            d.take(bits);
        }
    }

    /// Whether it draws on a shared bucket in the direction.
    pub fn any(&self, uplink: bool) -> bool {
        let k = usize::from(uplink);
        !self.bits[k].is_empty() || self.packets[k].is_some()
    }

    /// The packet draw of the direction, if any.
    #[inline]
    pub fn packets(&mut self, uplink: bool) -> Option<&mut Draw> {
        self.packets[usize::from(uplink)].as_mut()
    }

    /// Keeps the credit of `old`'s draws on the same buckets.
    pub fn carry(&mut self, old: &Draws) {
        for k in 0..2 {
            for d in &mut self.bits[k] {
                for o in &old.bits[k] {
                    d.carry(o);
                }
            }
            if let (Some(d), Some(o)) = (&mut self.packets[k], &old.packets[k]) {
                d.carry(o);
            }
        }
    }
}

/// A shared volume and its limit (octets).
type Limit = Option<(Arc<SharedVolume>, u64)>;

/// One URR's shared volumes: its threshold and quota (octets), each total, uplink and
/// downlink ([`volumes`]'s order), counted over the workers.
#[derive(Debug, Default)]
pub(crate) struct UrrBudget {
    pub threshold: [Limit; 3],
    pub quota: [Limit; 3],
}

/// A volume's octets as the limits count them: total, uplink, downlink.
pub(crate) fn volumes(v: &upf_rules::Volume) -> [u64; 3] {
    [v.total_bytes, v.uplink_bytes, v.downlink_bytes]
}

fn limits(l: Option<upf_rules::VolumeLimit>) -> [Option<u64>; 3] {
    l.map_or([None; 3], |l| [l.total, l.uplink, l.downlink])
}

impl UrrBudget {
    fn new(u: &Urr, old: Option<&UrrBudget>) -> Self {
        // The same limit keeps its volume (a modification that does not touch it); a new
        // quota is a new grant, counted from zero.
        let volume = |limit: Option<u64>, old: &Limit| {
            let limit = limit?;
            Some(match old {
                Some((v, l)) if *l == limit => (v.clone(), limit),
                _ => (Arc::new(SharedVolume::default()), limit),
            })
        };
        let none = Self::default();
        let old = old.unwrap_or(&none);
        let threshold = limits(
            u.volume_threshold
                .filter(|_| u.triggers.contains(ReportingTriggers::VOLTH)),
        );
        let quota = limits(u.volume_quota);
        Self {
            threshold: std::array::from_fn(|k| volume(threshold[k], &old.threshold[k])),
            quota: std::array::from_fn(|k| volume(quota[k], &old.quota[k])),
        }
    }

    /// A worker's draw on these volumes, nothing leased yet.
    pub fn draw(&self) -> UrrDraw {
        let draw = |v: &Limit| {
            v.as_ref().map(|(v, limit)| VolumeDraw {
                shared: v.clone(),
                limit: *limit,
                local: 0,
            })
        };
        UrrDraw {
            threshold: self.threshold.each_ref().map(draw),
            quota: self.quota.each_ref().map(draw),
        }
    }
}

/// One worker's draws on a URR's shared volumes (total, uplink, downlink).
#[derive(Debug, Clone, Default)]
pub(crate) struct UrrDraw {
    pub threshold: [Option<VolumeDraw>; 3],
    pub quota: [Option<VolumeDraw>; 3],
}

impl UrrDraw {
    /// Keeps what `old` (the worker's previous draw) leased of the same volumes.
    pub fn carry(&mut self, old: Option<&UrrDraw>) {
        let Some(old) = old else { return };
        let new = self.threshold.iter_mut().chain(&mut self.quota);
        for (new, old) in new.zip(old.threshold.iter().chain(&old.quota)) {
            if let (Some(n), Some(o)) = (new.as_mut(), old) {
                if Arc::ptr_eq(&n.shared, &o.shared) {
                    n.local = o.local;
                }
            }
        }
    }
}

/// What one worker leased of a shared volume: it counts up to `local` octets (of its own
/// count) without asking, then leases a chunk more (1/256 of the limit, or what the packet
/// needs). The volume is all leased when it is spent on some worker, so the units leased
/// but not yet counted are at most a chunk a worker: the limit is found reached at most
/// (workers - 1) chunks early, and never passed by more than the packet that reaches it
/// on each worker.
#[derive(Debug, Clone)]
pub(crate) struct VolumeDraw {
    shared: Arc<SharedVolume>,
    limit: u64,
    local: u64,
}

impl VolumeDraw {
    /// Whether `counted` (this worker's count) reaches the limit over all workers: what it
    /// leased is spent and no more is left to lease.
    #[inline]
    pub fn reached(&mut self, counted: u64) -> bool {
        counted >= self.local && self.lease(counted)
    }

    #[cold]
    fn lease(&mut self, counted: u64) -> bool {
        let need = counted + 1 - self.local;
        self.local += self.shared.lease(self.limit, need.max(self.limit / 256));
        counted >= self.local
    }

    /// The one report of a quota reached: true for the first worker to find it.
    pub fn claim(&self) -> bool {
        self.shared.claim()
    }

    /// A threshold found reached at `counted`: true for the one worker that reports it,
    /// which starts the count over all workers anew; the others lease on from there.
    pub fn rearm(&mut self, counted: u64) -> bool {
        for _ in 0..4 {
            if self.shared.rearm(self.limit) {
                return true;
            }
            if !self.reached(counted) {
                return false;
            }
        }
        false
    }

    /// This worker's count restarts (a report): what it leased and did not count is kept.
    pub fn restart(&mut self, counted: u64) {
        self.local = self.local.saturating_sub(counted);
    }
}
