//! What the workers a session lives on share when it lives on several (a spread UE, a
//! session without a UE address): its QERs' bit and packet rates, one bucket each that every
//! worker draws from ([`upf_rules::budget`]), so that the session gets its rates however its
//! packets fall on the workers. A session on one worker has none and polices with buckets
//! of its own.

use smallvec::SmallVec;
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_rules::budget::{bit_rate, Draw, SharedRate};
use upf_rules::{Qer, QerId, Session};

/// The shared buckets of one session's QERs; made by whoever places the session on several
/// workers and handed to each with the install.
#[derive(Debug, Default)]
pub struct SessionBudgets {
    qers: Vec<(QerId, QerBudget)>,
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
        Self { qers }
    }

    pub(crate) fn qer(&self, id: QerId) -> Option<&QerBudget> {
        self.qers.iter().find(|(q, _)| *q == id).map(|(_, b)| b)
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
