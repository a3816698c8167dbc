//! Budgets that several workers draw from: a rate (a QER's MBR or packet rate of a session
//! spread over workers, or the aggregate of QERs of several sessions that share a QER
//! Correlation ID) and a volume (a URR's threshold or quota of a session on several workers).
//!
//! A worker does not touch the shared state for each packet: it *leases* a small chunk into
//! state of its own ([`Draw`]) and spends it packet by packet, leasing again when it runs
//! out. The shared state is one atomic word per budget, updated by compare-and-swap: no
//! locks, and a session that lives on one worker never comes here.

use crate::qer::Bitrate;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Fraction bits of a [`SharedRate`]'s clock: it counts in 1/256 ns, so that a lease of one
/// 1500-octet packet at 100 Gbit/s (120 ns) is exact to 1e-4, and a u64 holds 2^56 ns
/// (834 days) since the bucket was made.
const TICK_FRAC: u32 = 8;

/// A token bucket several workers draw from, kept as a GCRA: the one atomic word is the
/// time the bucket will be full again (its *theoretical arrival time*); a lease of `n` units
/// moves it on by the time `n` units take at the rate, if the bucket then holds no more
/// backlog than its depth. Units are whatever the caller polices (bits, packets).
#[derive(Debug)]
pub struct SharedRate {
    epoch: Instant,
    /// When the bucket is full again, in ticks since `epoch`.
    full_at: AtomicU64,
    /// The rate: `units` every `per` ticks.
    units: AtomicU64,
    per: AtomicU64,
    /// The most backlog, in ticks (the bucket's depth in units times the time one takes).
    depth: AtomicU64,
    /// Units a lease asks for beyond what the packet needs (about a millisecond's worth).
    chunk: AtomicU64,
}

impl SharedRate {
    /// `units` every `per`, holding `depth` units (at least one unit); starts full. No
    /// units: nothing passes.
    pub fn new(now: Instant, units: u64, per: Duration, depth: u64) -> Self {
        let r = Self {
            epoch: now,
            full_at: AtomicU64::new(0),
            units: AtomicU64::new(0),
            per: AtomicU64::new(0),
            depth: AtomicU64::new(0),
            chunk: AtomicU64::new(0),
        };
        r.set_rate(units, per, depth);
        r
    }

    /// A new rate and depth (a modified QER); the backlog stays as it is, in time.
    pub fn set_rate(&self, units: u64, per: Duration, depth: u64) {
        let per = u64::try_from(per.as_nanos() << TICK_FRAC).unwrap_or(u64::MAX);
        let depth = depth.max(1);
        let cost = |n: u64| cost(n, units, per);
        // A millisecond's worth, and at most an eighth of the depth: what one worker holds
        // back from the others.
        let ms =
            u64::try_from(u128::from(units) * (1_000_000 << TICK_FRAC) / u128::from(per.max(1)))
                .unwrap_or(u64::MAX);
        self.units.store(units, Ordering::Relaxed);
        self.per.store(per, Ordering::Relaxed);
        self.depth.store(cost(depth), Ordering::Relaxed);
        self.chunk.store(ms.min(depth / 8), Ordering::Relaxed);
    }

    /// The rate as `(units, per)` and the depth in units, as last set.
    pub fn rate(&self) -> (u64, Duration, u64) {
        let (units, per) = (
            self.units.load(Ordering::Relaxed),
            self.per.load(Ordering::Relaxed),
        );
        let depth = u128::from(self.depth.load(Ordering::Relaxed)) * u128::from(units)
            / u128::from(per.max(1));
        (
            units,
            Duration::from_nanos(per >> TICK_FRAC),
            u64::try_from(depth).unwrap_or(u64::MAX),
        )
    }

    /// Nanoseconds from this bucket's clock's start to `epoch`, negative when `epoch` is
    /// earlier: what a clock counting from `epoch` adds to be this bucket's.
    pub fn offset(&self, epoch: Instant) -> i128 {
        match epoch.checked_duration_since(self.epoch) {
            Some(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
            None => -i128::try_from((self.epoch - epoch).as_nanos()).unwrap_or(i128::MAX),
        }
    }

    /// Takes between `need` and `want` units if at least `need` fit now: as many as fit, at
    /// most `want`. Returns how many were taken (0: fewer than `need` fit, none taken).
    pub fn lease(&self, now: Instant, need: u64, want: u64) -> u64 {
        let ns = now.saturating_duration_since(self.epoch).as_nanos();
        self.lease_at(u64::try_from(ns).unwrap_or(u64::MAX), need, want)
    }

    /// [`SharedRate::lease`] at `now` nanoseconds since the bucket was made.
    pub fn lease_at(&self, now: u64, need: u64, want: u64) -> u64 {
        let now = now.saturating_mul(1 << TICK_FRAC);
        let (units, per) = (
            self.units.load(Ordering::Relaxed),
            self.per.load(Ordering::Relaxed),
        );
        let depth = self.depth.load(Ordering::Relaxed);
        if units == 0 {
            return 0;
        }
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let base = full_at.max(now);
            let room = depth.saturating_sub(base - now);
            let fit = u128::from(room) * u128::from(units) / u128::from(per.max(1));
            let grant = u64::try_from(fit).unwrap_or(u64::MAX).min(want.max(need));
            if grant < need || grant == 0 {
                return 0;
            }
            let next = base.saturating_add(cost(grant, units, per));
            match self.full_at.compare_exchange_weak(
                full_at,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(seen) => full_at = seen,
            }
        }
    }

    /// The units a lease asks for beyond the packet's: about a millisecond of the rate.
    pub fn chunk(&self) -> u64 {
        self.chunk.load(Ordering::Relaxed)
    }
}

/// Ticks `n` units take at `units` every `per` ticks, rounded up (never faster than the
/// rate).
fn cost(n: u64, units: u64, per: u64) -> u64 {
    if units == 0 {
        return u64::MAX;
    }
    u64::try_from((u128::from(n) * u128::from(per)).div_ceil(u128::from(units))).unwrap_or(u64::MAX)
}

/// One worker's draw on a [`SharedRate`]: units leased and not yet spent. What a worker
/// holds is at most one chunk and one packet beyond what it spends, so the units leased but
/// unused at any time are at most that per worker: the error of the shared rate against one
/// bucket, at ~1 ms of the rate per worker.
#[derive(Debug, Clone)]
pub struct Draw {
    pub shared: Arc<SharedRate>,
    credit: u64,
    /// What the drawing worker's clock adds to be the shared bucket's.
    offset: i128,
}

impl Draw {
    /// A draw for a worker whose clock counts nanoseconds since `epoch`.
    pub fn new(shared: Arc<SharedRate>, epoch: Instant) -> Self {
        let offset = shared.offset(epoch);
        Self {
            shared,
            credit: 0,
            offset,
        }
    }

    /// Whether `n` units are at hand at `clock` (the worker's), leasing what is missing
    /// (and a chunk more); does not spend them.
    #[inline]
    pub fn conforms(&mut self, clock: u64, n: u64) -> bool {
        if self.credit >= n {
            return true;
        }
        self.refill(clock, n - self.credit)
    }

    #[cold]
    fn refill(&mut self, clock: u64, need: u64) -> bool {
        let want = need.saturating_add(self.shared.chunk());
        let now = (i128::from(clock) + self.offset).clamp(0, u64::MAX.into());
        let now = u64::try_from(now).unwrap_or(u64::MAX);
        // A lease is all of `need` or nothing.
        let got = self.shared.lease_at(now, need, want);
        self.credit += got;
        got > 0
    }

    /// Spends `n` units (after [`Draw::conforms`] said they are at hand).
    #[inline]
    pub fn take(&mut self, n: u64) {
        self.credit = self.credit.saturating_sub(n);
    }

    /// Keeps `old`'s credit when it draws on the same budget (a reinstalled session).
    pub fn carry(&mut self, old: &Draw) {
        if Arc::ptr_eq(&self.shared, &old.shared) {
            self.credit = old.credit;
        }
    }
}

/// The aggregate rate of the QERs of one CP node's sessions that carry the same QER
/// Correlation ID (TS 29.244 §5.2.2, §8.2.10: an APN/DNN-AMBR), one bucket each way, in
/// bits; every worker and session holding it draws from the same buckets. Equal when it is
/// the same aggregate.
#[derive(Debug, Clone)]
pub struct Aggregate(pub Arc<AggregateRates>);

/// The buckets of an [`Aggregate`], in bits.
#[derive(Debug)]
pub struct AggregateRates {
    pub correlation_id: u32,
    pub uplink: Arc<SharedRate>,
    pub downlink: Arc<SharedRate>,
}

impl Aggregate {
    /// The aggregate of `correlation_id` at `mbr` over `window`; starts full.
    pub fn new(now: Instant, correlation_id: u32, mbr: Bitrate, window: Duration) -> Self {
        let rate = |kbps| {
            let (units, per, depth) = bit_rate(kbps, window);
            Arc::new(SharedRate::new(now, units, per, depth))
        };
        Self(Arc::new(AggregateRates {
            correlation_id,
            uplink: rate(mbr.uplink_kbps),
            downlink: rate(mbr.downlink_kbps),
        }))
    }

    /// A new rate (the MBR of the QER last installed with it); the backlog is kept.
    pub fn set_rate(&self, mbr: Bitrate, window: Duration) {
        for (r, kbps) in [
            (&self.0.uplink, mbr.uplink_kbps),
            (&self.0.downlink, mbr.downlink_kbps),
        ] {
            let (units, per, depth) = bit_rate(kbps, window);
            r.set_rate(units, per, depth);
        }
    }
}

/// A bit rate of `kbps` averaged over `window` as a [`SharedRate`]'s `(units, per, depth)`:
/// bits a second, as deep as the window's bits and at least one full-size packet (12,000
/// bits), as a worker's own bucket.
pub fn bit_rate(kbps: u64, window: Duration) -> (u64, Duration, u64) {
    let bps = kbps.saturating_mul(1000);
    let depth = u128::from(bps) * window.as_nanos() / 1_000_000_000;
    (
        bps,
        Duration::from_secs(1),
        u64::try_from(depth).unwrap_or(u64::MAX).max(12_000),
    )
}

impl PartialEq for Aggregate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Aggregate {}

/// A volume several workers count into, for a URR's threshold or quota (octets): the
/// running total, and whether the limit was reported, so that it is reported exactly once
/// whichever worker's packet crosses it.
#[derive(Debug, Default)]
pub struct SharedVolume {
    total: AtomicU64,
    reported: AtomicBool,
}

impl SharedVolume {
    /// The total so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Claims the one report of the limit: true for the first caller only.
    pub fn claim(&self) -> bool {
        !self.reported.swap(true, Ordering::Relaxed)
    }

    /// Starts counting anew (a measurement restarted on every worker).
    pub fn restart(&self) {
        self.total.store(0, Ordering::Relaxed);
    }

    /// Starts counting anew if all of `limit` was leased: true for the one caller that did
    /// (a threshold reached, reported by that caller).
    pub fn rearm(&self, limit: u64) -> bool {
        self.total
            .compare_exchange(limit, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes up to `want` of the octets left below `limit`: a chunk of a quota for one
    /// worker to count locally. Returns how many it got (0: the quota is spent).
    pub fn lease(&self, limit: u64, want: u64) -> u64 {
        let mut seen = self.total.load(Ordering::Relaxed);
        loop {
            let grant = want.min(limit.saturating_sub(seen));
            if grant == 0 {
                return 0;
            }
            match self.total.compare_exchange_weak(
                seen,
                seen + grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(s) => seen = s,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn lease_takes_what_fits_then_the_rate() {
        let t0 = Instant::now();
        // 1000 units a second, 100 deep: full at the start.
        let r = SharedRate::new(t0, 1000, S, 100);
        assert_eq!(r.lease(t0, 10, 60), 60);
        assert_eq!(r.lease(t0, 10, 60), 40, "what is left of the depth");
        assert_eq!(r.lease(t0, 1, 1), 0, "empty");
        // 5 ms later 5 units came back.
        let t = t0 + Duration::from_millis(5);
        assert_eq!(r.lease(t, 6, 6), 0, "6 do not fit yet");
        assert_eq!(r.lease(t, 5, 100), 5);
        // After a long pause, no more than the depth.
        assert_eq!(r.lease(t0 + 100 * S, 1, 1000), 100);
    }

    #[test]
    fn no_units_nothing_passes() {
        let t0 = Instant::now();
        let r = SharedRate::new(t0, 0, S, 100);
        assert_eq!(r.lease(t0 + 10 * S, 1, 1), 0);
    }

    #[test]
    fn a_new_rate_refills_at_it() {
        let t0 = Instant::now();
        let r = SharedRate::new(t0, 1000, S, 100);
        assert_eq!(r.lease(t0, 100, 100), 100);
        r.set_rate(10_000, S, 1000);
        assert_eq!(r.lease(t0 + Duration::from_millis(10), 1, 1000), 100);
        assert_eq!(r.rate(), (10_000, S, 1000));
    }

    /// Draws of several workers together get the rate, however unevenly they are offered
    /// it, and each holds back at most a chunk.
    #[test]
    fn draws_share_one_rate() {
        let t0 = Instant::now();
        // 10 Mbit/s, 20 ms deep; packets of 12,000 bits.
        let shared = Arc::new(SharedRate::new(t0, 10_000_000, S, 200_000));
        assert_eq!(shared.chunk(), 10_000);
        // The second worker's clock started 3 ms later.
        let mut draws = [
            Draw::new(shared.clone(), t0),
            Draw::new(shared, t0 + Duration::from_millis(3)),
        ];
        let mut sent = 0u64;
        // Offered 20 Mbit/s for 10 s (a packet each 0.6 ms), 9 packets of 10 to the first
        // worker.
        let gap = Duration::from_nanos(600_000);
        for k in 0..16_666u32 {
            let now = u64::try_from((gap * k).as_nanos()).unwrap();
            let (d, clock) = if k % 10 == 9 {
                (&mut draws[1], now.saturating_sub(3_000_000))
            } else {
                (&mut draws[0], now)
            };
            if d.conforms(clock, 12_000) {
                d.take(12_000);
                sent += 12_000;
            }
        }
        let want = 10_000_000 * 10 + 200_000;
        assert!(sent <= want, "{sent} > {want}");
        assert!(
            sent + 2 * (10_000 + 12_000) >= want - 12_000,
            "{sent} < {want}"
        );
    }

    #[test]
    fn a_draw_with_some_credit_still_needs_the_rest() {
        let t0 = Instant::now();
        // 1000 units a second, 10 deep (the chunk: 1).
        let r = Arc::new(SharedRate::new(t0, 1000, S, 10));
        let mut d = Draw::new(r.clone(), t0);
        // 6 and a chunk leased, 1 spent: 6 held, 3 left in the bucket, which go.
        assert!(d.conforms(0, 6));
        d.take(1);
        assert_eq!(r.lease(t0, 3, 3), 3);
        assert!(
            !d.conforms(0, 10),
            "6 held and none of the other 4 to lease"
        );
        assert!(d.conforms(4_000_000, 10), "4 more came");
    }

    #[test]
    fn volume_reported_once_and_quota_leased_to_its_end() {
        let v = SharedVolume::default();
        assert_eq!(v.lease(1000, 600), 600);
        assert_eq!(v.lease(1000, 600), 400);
        assert_eq!(v.lease(1000, 1), 0);
        assert_eq!(v.total(), 1000);
        assert!(v.claim());
        assert!(!v.claim());
        assert!(v.rearm(1000));
        assert!(!v.rearm(1000), "once");
        assert_eq!(v.lease(1000, 600), 600);
        assert_eq!(v.total(), 600);
    }
}
