//! Token buckets for QER maximum bit rates (TS 29.244 §5.4.2, TS 23.501 §5.7.2.5) and for
//! rate-limiting what the data path generates. `now` is always a parameter.

use std::time::{Duration, Instant};

/// Averaging window when the QER gives none (TS 23.501 §5.7.3.6: 2000 ms by default).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2000);

/// A token bucket counting bits, in fixed point so that the per-packet refill is one
/// 64×64-bit multiplication (no float conversion, no division). The bucket starts full; its
/// depth is the rate times the averaging window, so a flow may burst for one window and is
/// held to the rate after it. 32 octets: its [`Rate`] (what sessions with the same QER share)
/// and its [`Fill`] (each session's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    pub rate: Rate,
    pub fill: Fill,
}

/// A bucket's rate and depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rate {
    /// Bits per nanosecond, fixed point with [`RATE_FRAC`] fraction bits (exact to 1e-4 at
    /// 10 bit/s).
    rate: u64,
    /// Bits, fixed point with [`TOKEN_FRAC`] fraction bits: up to 2^40 bits (1.1 Tbit) of
    /// burst; a deeper bucket is that deep.
    depth: u64,
}

/// A bucket's tokens and the time of its last refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fill {
    tokens: u64,
    /// The pipeline's clock (nanoseconds since its epoch) at the last refill.
    last: u64,
}

const RATE_FRAC: u32 = 40;
const TOKEN_FRAC: u32 = 24;
const ONE: u64 = 1 << TOKEN_FRAC;

impl TokenBucket {
    /// `now`: the pipeline's clock, nanoseconds since its epoch (one subtraction per packet
    /// instead of `Instant` arithmetic).
    pub fn new(now: u64, bits_per_s: u64, window: Duration) -> Self {
        // Rounded up: a refill is never short of the configured rate.
        let rate = u64::try_from((u128::from(bits_per_s) << RATE_FRAC).div_ceil(1_000_000_000))
            .unwrap_or(u64::MAX);
        // At least one full-size packet, so that a tiny rate still passes something.
        let bits =
            (u128::from(bits_per_s).saturating_mul(window.as_nanos()) / 1_000_000_000).max(12_000);
        let depth = u64::try_from(bits.saturating_mul(ONE.into())).unwrap_or(u64::MAX);
        Self {
            rate: Rate { rate, depth },
            fill: Fill {
                tokens: depth,
                last: now,
            },
        }
    }

    /// Whether `bits` fit now (refilling first); does not take them.
    #[inline(always)]
    pub fn conforms(&mut self, now: u64, bits: u64) -> bool {
        self.fill.conforms(&self.rate, now, bits)
    }

    /// Takes `bits` (after [`TokenBucket::conforms`] said they fit).
    #[inline(always)]
    pub fn take(&mut self, bits: u64) {
        self.fill.take(bits);
    }

    /// Takes the rate and depth of `other` (a modified QER), keeping this bucket's tokens so
    /// that a modification does not reset policing.
    pub fn set_rate_from(&mut self, other: &TokenBucket) {
        self.rate = other.rate;
        self.fill.tokens = self.fill.tokens.min(self.rate.depth);
    }
}

impl Fill {
    /// Refills at `r` for the time since the last call; never goes back in time. The time
    /// of a refill worth less than a token's fraction is kept for the next (at a tiny rate
    /// and a high packet rate every refill would round to nothing).
    #[inline(always)]
    fn refill(&mut self, r: &Rate, now: u64) {
        if now > self.last {
            let add =
                (u128::from(now - self.last) * u128::from(r.rate)) >> (RATE_FRAC - TOKEN_FRAC);
            if add != 0 {
                let add = u64::try_from(add).unwrap_or(u64::MAX);
                self.tokens = self.tokens.saturating_add(add).min(r.depth);
                self.last = now;
            }
        }
    }

    /// [`TokenBucket::conforms`] of the bucket of rate `r` and this fill.
    #[inline(always)]
    pub fn conforms(&mut self, r: &Rate, now: u64, bits: u64) -> bool {
        self.refill(r, now);
        self.tokens >= bits.saturating_mul(ONE)
    }

    /// [`TokenBucket::take`].
    #[inline(always)]
    pub fn take(&mut self, bits: u64) {
        self.tokens = self.tokens.saturating_sub(bits.saturating_mul(ONE));
    }
}

const EVENT: u64 = 1 << 10;

/// Events per second with a burst, for Error Indications and similar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    bucket: TokenBucket,
    epoch: Instant,
}

impl RateLimit {
    pub fn new(now: Instant, per_s: u32, burst: u32) -> Self {
        // An event is EVENT "bits", so that a low rate checked often loses little to the
        // truncation of each refill.
        let mut b = TokenBucket::new(0, u64::from(per_s) * EVENT, Duration::ZERO);
        b.rate.depth = u64::from(burst.max(1)).saturating_mul(EVENT * ONE);
        b.fill.tokens = b.rate.depth;
        Self {
            bucket: b,
            epoch: now,
        }
    }

    /// Whether one more event is allowed now (and counts it).
    pub fn allow(&mut self, now: Instant) -> bool {
        let ns =
            u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let ok = self.bucket.conforms(ns, EVENT);
        if ok {
            self.bucket.take(EVENT);
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
    fn tiny_rate_survives_frequent_refills() {
        // 1 bit/s refilled every 50 ns: each refill is worth ~2^-24.6 of a bit, less than a
        // token's fraction; the time is kept until it is worth one.
        let mut b = TokenBucket::new(0, 1, Duration::ZERO);
        b.take(u64::MAX >> TOKEN_FRAC);
        let mut now = 0u64;
        while now < 200_000_000 {
            now += 50;
            b.conforms(now, 0);
        }
        // 0.2 bit earned; each refill that adds truncates less than one fraction, up to
        // 40 % here (the smallest PFCP rate, 1 kbit/s, loses at most 0.06 % so).
        let want = ONE / 5;
        assert!(
            (want / 2..=want).contains(&b.fill.tokens),
            "{} vs {want}",
            b.fill.tokens
        );
    }

    #[test]
    fn huge_rates_and_windows_saturate() {
        let mut b = TokenBucket::new(0, u64::MAX, Duration::MAX);
        assert!(b.conforms(0, u64::MAX >> TOKEN_FRAC));
        assert!(b.conforms(u64::MAX, 12_000));
    }

    proptest::proptest! {
        /// Over any run of packets, a bucket passes at most its depth plus what its rate
        /// earned in the time, and when offered twice its rate in packets of one size it
        /// passes its rate (within one packet and 1 %) once its burst is spent.
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

            // Offered at twice the rate for 200 packet times after the burst is spent.
            let mut b = TokenBucket::new(0, bps, window);
            let gap = (u128::from(size) * 1_000_000_000 / (2 * u128::from(bps))).max(1);
            let gap = u64::try_from(gap).unwrap_or(u64::MAX / 1024);
            let (mut now, mut sent) = (0u64, 0u128);
            b.take(u64::MAX >> TOKEN_FRAC); // the burst spent
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

    #[test]
    fn rate_limit() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(t0, 10, 3);
        assert_eq!((0..10).filter(|_| r.allow(t0)).count(), 3);
        assert!(r.allow(t0 + Duration::from_millis(100)));
        assert!(!r.allow(t0 + Duration::from_millis(100)));
    }
}
