//! Token buckets for QER maximum bit rates (TS 29.244 §5.4.2, TS 23.501 §5.7.2.5) and packet
//! rates (§8.2.68), and for rate-limiting what the data path generates. `now` is always a parameter.

use std::time::{Duration, Instant};

/// Averaging window when the QER gives none (TS 23.501 §5.7.3.6: 2000 ms by default).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2000);

/// A token bucket for bits, kept as the time its spent tokens take to come back (its
/// *backlog*) rather than as tokens: time passing drains the backlog one for one, so the
/// per-packet refill is a subtraction, and the packet's cost (its bits times the time a bit
/// takes at the rate) is a multiplication that does not wait for the bucket's state. (As a
/// count of tokens, the refill was the time since the last packet times the rate, a
/// multiplication in the middle of a chain of dependent steps.) The bucket starts full (no
/// backlog); it holds the
/// rate times the averaging window, so a flow may burst for one window and is held to the
/// rate after it. 32 octets: its [`Rate`] (what sessions with the same QER share) and its
/// [`Fill`] (each session's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    pub rate: Rate,
    pub fill: Fill,
}

/// A bucket's rate and depth, in ticks of 2^-[`TICK_FRAC`] ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rate {
    /// The time one bit takes at the rate, rounded up (never faster than the rate): exact to
    /// 1e-5 at 100 Gbit/s.
    cost: u64,
    /// The time a full bucket's bits take: the most backlog a packet may leave (up to 2^40
    /// ns, ~18 minutes; a longer window is that long).
    depth: u64,
}

/// A bucket's backlog and the time it was last drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fill {
    /// Ticks until the bucket is full again.
    backlog: u64,
    /// The pipeline's clock (nanoseconds since its epoch) at the last drain.
    last: u64,
}

const TICK_FRAC: u32 = 24;
const NS_PER_S: u128 = 1_000_000_000;

impl TokenBucket {
    /// `now`: the pipeline's clock, nanoseconds since its epoch (one subtraction per packet
    /// instead of `Instant` arithmetic).
    pub fn new(now: u64, bits_per_s: u64, window: Duration) -> Self {
        // Rounded up: the bucket never passes more than the configured rate.
        let cost = u64::try_from((NS_PER_S << TICK_FRAC).div_ceil(u128::from(bits_per_s.max(1))))
            .unwrap_or(u64::MAX);
        // At least one full-size packet, so that a tiny rate still passes something; no
        // rate, nothing.
        let bits =
            (u128::from(bits_per_s).saturating_mul(window.as_nanos()) / NS_PER_S).max(12_000);
        let depth = if bits_per_s == 0 {
            0
        } else {
            u64::try_from(bits.saturating_mul(cost.into())).unwrap_or(u64::MAX)
        };
        Self {
            rate: Rate { cost, depth },
            fill: Fill {
                backlog: 0,
                last: now,
            },
        }
    }

    /// Whether `bits` fit now (draining first); does not take them.
    #[inline(always)]
    pub fn conforms(&mut self, now: u64, bits: u64) -> bool {
        self.fill.conforms(&self.rate, now, bits)
    }

    /// Takes `bits` (after [`TokenBucket::conforms`] said they fit).
    #[inline(always)]
    pub fn take(&mut self, bits: u64) {
        self.fill.take(&self.rate, bits);
    }

    /// Continues from `backlog` ticks (another engine's [`Fill::remaining`]) at `now`, at
    /// most the depth.
    pub fn resume(&mut self, backlog: u64, now: u64) {
        self.fill = Fill::resume(backlog.min(self.rate.depth), now);
    }

    /// Takes the rate and depth of `other` (a modified QER), keeping this bucket's tokens so
    /// that a modification does not reset policing.
    pub fn set_rate_from(&mut self, other: &TokenBucket) {
        let old = self.rate;
        self.rate = other.rate;
        // Tokens left, in bits at the old rate, as backlog at the new one.
        let tokens = (old.depth - self.fill.backlog.min(old.depth))
            .checked_div(old.cost)
            .unwrap_or(u64::MAX);
        let depth_bits = self
            .rate
            .depth
            .checked_div(self.rate.cost)
            .unwrap_or(u64::MAX);
        self.fill.backlog = self
            .rate
            .depth
            .saturating_sub(tokens.min(depth_bits).saturating_mul(self.rate.cost));
    }
}

impl Fill {
    /// Drains the backlog by the time since the last call; never goes back in time.
    #[inline(always)]
    fn drain(&mut self, now: u64) {
        let passed = now.saturating_sub(self.last).min(u64::MAX >> TICK_FRAC);
        self.backlog = self.backlog.saturating_sub(passed << TICK_FRAC);
        self.last = self.last.max(now);
    }

    /// The backlog drained to `now`, without draining it: what another engine's bucket
    /// continues from ([`Fill::resume`]), whatever its clock.
    pub fn remaining(&self, now: u64) -> u64 {
        let mut f = *self;
        f.drain(now);
        f.backlog
    }

    /// A fill with `backlog` ticks still to drain at `now` (this bucket's clock): the state
    /// another engine's bucket left ([`Fill::remaining`]).
    pub fn resume(backlog: u64, now: u64) -> Self {
        Self { backlog, last: now }
    }

    /// [`TokenBucket::conforms`] of the bucket of rate `r` and this fill.
    #[inline(always)]
    pub fn conforms(&mut self, r: &Rate, now: u64, bits: u64) -> bool {
        self.drain(now);
        self.backlog.saturating_add(bits.saturating_mul(r.cost)) <= r.depth
    }

    /// [`TokenBucket::take`] of the bucket of rate `r` and this fill: an empty bucket stays
    /// empty (the backlog is at most the depth).
    #[inline(always)]
    pub fn take(&mut self, r: &Rate, bits: u64) {
        self.backlog = self
            .backlog
            .saturating_add(bits.saturating_mul(r.cost))
            .min(r.depth);
    }
}

/// A token bucket for packets, for a QER's Packet Rate (TS 29.244 §8.2.68: at most N packets
/// per minute, 6 minutes, hour, day or week, each direction on its own). Kept as a backlog in
/// time like [`TokenBucket`], but in whole nanoseconds: a week's depth (6e14 ns) is past what
/// that bucket's fine ticks hold, and a packet's cost here (the time unit over N, at least
/// 60 s / 65,535 = 0.9 ms) needs no fraction (rounded up, it is off by less than 1e-6). Full at
/// the start: N packets pass at once, then one each time unit / N, and never more than N are
/// held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketBucket {
    /// Nanoseconds one packet takes at the rate, rounded up (never faster than the rate).
    cost: u64,
    /// The packets it holds times `cost`: the most backlog a packet may leave.
    depth: u64,
    /// Nanoseconds until the bucket is full again.
    backlog: u64,
    /// The pipeline's clock at the last drain.
    last: u64,
}

impl PacketBucket {
    /// `packets` per `per_s` seconds. No packets: nothing passes.
    pub fn new(now: u64, packets: u16, per_s: u32) -> Self {
        let unit = u128::from(per_s.max(1)) * NS_PER_S;
        let (cost, held) = match packets {
            0 => (u64::MAX, 0),
            n => (
                u64::try_from(unit.div_ceil(u128::from(n))).unwrap_or(u64::MAX),
                u64::from(n),
            ),
        };
        Self {
            cost,
            depth: held.saturating_mul(cost),
            backlog: 0,
            last: now,
        }
    }

    /// Whether one more packet fits now (draining first); does not take it.
    #[inline]
    pub fn conforms(&mut self, now: u64) -> bool {
        self.backlog = self.backlog.saturating_sub(now.saturating_sub(self.last));
        self.last = self.last.max(now);
        self.backlog.saturating_add(self.cost) <= self.depth
    }

    /// Takes one packet (after [`PacketBucket::conforms`] said it fits).
    #[inline]
    pub fn take(&mut self) {
        self.backlog = self.backlog.saturating_add(self.cost).min(self.depth);
    }

    /// Takes the rate and depth of `other` (a modified QER), keeping the packets this bucket
    /// has left (with the part of the next one refilled so far), at most the new depth.
    pub fn set_rate_from(&mut self, other: &PacketBucket) {
        let left = u128::from(self.depth - self.backlog.min(self.depth));
        let left = left * u128::from(other.cost) / u128::from(self.cost.max(1));
        let left = u64::try_from(left).unwrap_or(u64::MAX).min(other.depth);
        self.cost = other.cost;
        self.depth = other.depth;
        self.backlog = other.depth - left;
    }
}

/// Events per second with a burst, for Error Indications and similar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    bucket: TokenBucket,
    epoch: Instant,
}

impl RateLimit {
    pub fn new(now: Instant, per_s: u32, burst: u32) -> Self {
        // An event is a "bit"; none a second, none at all.
        let mut b = TokenBucket::new(0, u64::from(per_s), Duration::ZERO);
        if per_s > 0 {
            b.rate.depth = u64::from(burst.max(1)).saturating_mul(b.rate.cost);
        }
        Self {
            bucket: b,
            epoch: now,
        }
    }

    /// Whether one more event is allowed now (and counts it).
    pub fn allow(&mut self, now: Instant) -> bool {
        let ns =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let ok = self.bucket.conforms(ns, 1);
        if ok {
            self.bucket.take(1);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_holds_rate_after_burst() {
        let t0 = 0u64;
        // 8 Mbit/s, 100 ms window: 800 kbit of burst.
        let mut b = TokenBucket::new(t0, 8_000_000, Duration::from_millis(100));
        let mut sent = 0u64;
        // Offer 1500-octet packets at 80 Mbit/s for 10 s of virtual time.
        let step = 150_000u64; // ns
        let mut now = t0;
        for _ in 0..(10_000_000 / 150) {
            if b.conforms(now, 12_000) {
                b.take(12_000);
                sent += 12_000;
            }
            now += step;
        }
        let rate = sent as f64 / 10.0;
        assert!((rate - 8_080_000.0).abs() < 8_000_000.0 * 0.02, "{rate}");
    }

    #[test]
    fn slow_rate_survives_frequent_drains() {
        // 1 kbit/s (PFCP's least) drained every 5 µs, each drain worth 1/200 of a bit: a
        // 1500-octet packet after an empty bucket fits after 12 s, not before.
        let mut b = TokenBucket::new(0, 1000, Duration::ZERO);
        assert!(b.conforms(0, 12_000));
        b.take(12_000);
        let mut now = 0u64;
        while now < 11_990_000_000 {
            now += 5_000;
            assert!(!b.conforms(now, 12_000), "early at {now} ns");
        }
        while now < 12_000_000_000 {
            now += 5_000;
        }
        assert!(b.conforms(now, 12_000));
    }

    #[test]
    fn no_rate_passes_nothing() {
        let mut b = TokenBucket::new(0, 0, Duration::from_secs(1));
        assert!(!b.conforms(1_000_000_000, 8));
    }

    #[test]
    fn a_new_rate_keeps_the_tokens_left() {
        // 1 Mbit/s, 1 s: 1 Mbit of burst; 400 kbit spent, 600 kbit left.
        let mut b = TokenBucket::new(0, 1_000_000, Duration::from_secs(1));
        assert!(b.conforms(0, 400_000));
        b.take(400_000);
        // At 10 Mbit/s the 600 kbit are still there, and no more.
        b.set_rate_from(&TokenBucket::new(0, 10_000_000, Duration::from_secs(1)));
        assert!(b.conforms(0, 600_000));
        assert!(!b.conforms(0, 601_000));
        // At 100 kbit/s (100 kbit deep) the bucket is full, not over-full.
        b.set_rate_from(&TokenBucket::new(0, 100_000, Duration::from_secs(1)));
        assert!(b.conforms(0, 100_000));
        assert!(!b.conforms(0, 101_000));
    }

    #[test]
    fn huge_rates_and_windows_saturate() {
        let mut b = TokenBucket::new(0, u64::MAX, Duration::MAX);
        assert!(b.conforms(0, u64::MAX >> TICK_FRAC));
        assert!(b.conforms(u64::MAX, 12_000));
    }

    #[test]
    fn a_backlog_carried_to_another_clock_keeps_the_tokens_spent() {
        // 1 Mbit/s, 1 s: 1 Mbit deep; 600 kbit spent at 1 s on this clock, 100 ms later
        // 500 kbit are still missing.
        let mut b = TokenBucket::new(1_000_000_000, 1_000_000, Duration::from_secs(1));
        assert!(b.conforms(1_000_000_000, 600_000));
        b.take(600_000);
        let left = b.fill.remaining(1_100_000_000);
        assert_eq!(
            left,
            b.fill.remaining(1_100_000_000),
            "reading drains nothing"
        );
        // On a clock 5 s behind, with a bucket that started full.
        let mut other = TokenBucket::new(0, 1_000_000, Duration::from_secs(1));
        other.resume(left, 0);
        assert!(other.conforms(0, 500_000));
        assert!(!other.conforms(0, 501_000));
        // It drains on its own clock from there: 100 ms later, 100 kbit more.
        assert!(other.conforms(100_000_000, 600_000));
        assert!(!other.conforms(100_000_000, 601_000));
        // A backlog beyond this bucket's depth (a lower rate) leaves it empty, no deeper.
        let mut small = TokenBucket::new(0, 100_000, Duration::from_secs(1));
        small.resume(u64::MAX, 0);
        assert!(!small.conforms(0, 8));
        assert!(small.conforms(1_000_000_000, 100_000));
        // A clock behind the last drain (never back in time): nothing drained.
        assert_eq!(Fill::resume(7, 50).remaining(10), 7);
    }

    proptest::proptest! {
        /// Over any run of packets, a bucket passes at most its depth plus what its rate
        /// earned in the time, and when offered twice its rate in packets of one size it
        /// passes its rate (within one packet and 1 %) once its burst is spent, if it holds
        /// two packets: one barely a packet deep (no window, the 12,000-bit floor) loses
        /// the time a refused packet's tokens wait for the next arrival, whatever its rate.
        #[test]
        fn holds_the_rate(
            kbps in 1u64..100_000_000,
            window_ms in 0u64..3_000,
            size in 40u64..12_000,
            gaps in proptest::collection::vec(0u64..1_000_000, 1..200),
        ) {
            let bps = kbps * 1000;
            let window = Duration::from_millis(window_ms);
            let depth = (u128::from(bps) * u128::from(window_ms) / 1000).max(12_000);
            let mut b = TokenBucket::new(0, bps, window);
            let (mut now, mut sent) = (0u64, 0u128);
            for g in &gaps {
                now += g;
                if b.conforms(now, size) {
                    b.take(size);
                    sent += u128::from(size);
                }
            }
            let earned = (u128::from(bps) * u128::from(now)).div_ceil(1_000_000_000);
            proptest::prop_assert!(sent <= depth + earned + 1, "{sent} > {depth} + {earned}");

            if depth < 2 * u128::from(size) {
                return Ok(());
            }
            // Offered at twice the rate for 200 packet times after the burst is spent.
            let mut b = TokenBucket::new(0, bps, window);
            let gap = (u128::from(size) * 1_000_000_000 / (2 * u128::from(bps))).max(1);
            let gap = u64::try_from(gap).unwrap_or(u64::MAX / 1024);
            let (mut now, mut sent) = (0u64, 0u128);
            b.take(u64::MAX >> TICK_FRAC); // the burst spent
            let start = now;
            for _ in 0..400 {
                now += gap;
                if b.conforms(now, size) {
                    b.take(size);
                    sent += u128::from(size);
                }
            }
            // (Offered less when the gap rounds up to a nanosecond.)
            let want = (u128::from(bps) * u128::from(now - start) / 1_000_000_000)
                .min(400 * u128::from(size));
            let slack = want / 100 + u128::from(size);
            proptest::prop_assert!(sent + slack >= want && sent <= want + slack, "{sent} vs {want}");
        }
    }

    /// Conforms and takes one packet at `now` (ns).
    fn pass(b: &mut PacketBucket, now: u64) -> bool {
        let ok = b.conforms(now);
        if ok {
            b.take();
        }
        ok
    }

    const MINUTE: u64 = 60_000_000_000;

    #[test]
    fn packet_rate_passes_n_then_one_each_unit_over_n() {
        // 6 a minute: 6 at once, then one each 10 s, never more than 6 held.
        let mut b = PacketBucket::new(0, 6, 60);
        assert_eq!((0..10).filter(|_| pass(&mut b, 0)).count(), 6);
        assert!(!pass(&mut b, MINUTE / 6 - 1));
        assert!(pass(&mut b, MINUTE / 6));
        assert!(!pass(&mut b, MINUTE / 6));
        assert_eq!((0..10).filter(|_| pass(&mut b, 100 * MINUTE)).count(), 6);
    }

    #[test]
    fn packet_rate_over_a_week_and_none() {
        // 2 a week: the depth (a week of nanoseconds) fits.
        let week = 604_800 * 1_000_000_000;
        let mut b = PacketBucket::new(0, 2, 604_800);
        assert!(pass(&mut b, 0) && pass(&mut b, 0) && !pass(&mut b, 0));
        assert!(!pass(&mut b, week / 2 - 1));
        assert!(pass(&mut b, week / 2));
        let mut none = PacketBucket::new(0, 0, 60);
        assert!(!pass(&mut none, 0) && !pass(&mut none, u64::MAX));
    }

    #[test]
    fn a_new_packet_rate_keeps_the_packets_left() {
        let mut b = PacketBucket::new(0, 10, 60);
        assert_eq!((0..4).filter(|_| pass(&mut b, 0)).count(), 4);
        // 6 left; at 100 a minute still 6, refilled at the new rate (one each 0.6 s).
        b.set_rate_from(&PacketBucket::new(0, 100, 60));
        assert_eq!((0..10).filter(|_| pass(&mut b, 0)).count(), 6);
        assert!(!pass(&mut b, MINUTE / 100 - 1));
        assert!(pass(&mut b, MINUTE / 100));
        // At 3 a minute the bucket holds 3, not more.
        b.set_rate_from(&PacketBucket::new(0, 3, 60));
        assert_eq!((0..10).filter(|_| pass(&mut b, 10 * MINUTE)).count(), 3);
        // From none to some: empty, refilling at the new rate.
        let mut b = PacketBucket::new(0, 0, 60);
        b.set_rate_from(&PacketBucket::new(0, 2, 60));
        assert!(!pass(&mut b, 0));
        assert!(pass(&mut b, MINUTE / 2));
    }

    proptest::proptest! {
        /// Over any run of packets, a packet bucket passes at most its packets plus what its
        /// rate earned in the time.
        #[test]
        fn packet_rate_holds(
            packets in 1u16..100,
            per_s in proptest::sample::select(vec![60u32, 360, 3600]),
            gaps in proptest::collection::vec(0u64..2_000_000_000, 1..400),
        ) {
            let mut b = PacketBucket::new(0, packets, per_s);
            let (mut now, mut sent) = (0u64, 0u128);
            for g in &gaps {
                now += g;
                if pass(&mut b, now) {
                    sent += 1;
                }
            }
            let unit = u128::from(per_s) * 1_000_000_000;
            let earned = u128::from(now) * u128::from(packets) / unit;
            proptest::prop_assert!(sent <= u128::from(packets) + earned, "{sent}");
        }
    }

    #[test]
    fn rate_limit() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(t0, 10, 3);
        assert_eq!((0..10).filter(|_| r.allow(t0)).count(), 3);
        assert!(r.allow(t0 + Duration::from_millis(100)));
        assert!(!r.allow(t0 + Duration::from_millis(100)));
        let mut none = RateLimit::new(t0, 0, 3);
        assert!(!none.allow(t0 + Duration::from_secs(100)));
    }
}
