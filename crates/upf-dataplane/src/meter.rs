//! Token buckets for QER maximum bit rates (TS 29.244 §5.4.2, TS 23.501 §5.7.2.5) and for
//! rate-limiting what the data path generates. `now` is always a parameter.

use std::time::{Duration, Instant};

/// Averaging window when the QER gives none (TS 23.501 §5.7.3.6: 2000 ms by default).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2000);

/// A token bucket counting bits, in fixed point so that the per-packet refill is one
/// 64×64-bit multiplication (no float conversion, no division). The bucket starts full; its
/// depth is the rate times the averaging window, so a flow may burst for one window and is
/// held to the rate after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Bits per nanosecond, fixed point with 40 fraction bits (exact to 1e-4 at 10 bit/s).
    rate: u64,
    depth: u128,
    tokens: u128,
    /// The pipeline's clock (nanoseconds since its epoch) at the last refill.
    last: u64,
}

const ONE: u128 = 1 << 40;

impl TokenBucket {
    /// `now`: the pipeline's clock, nanoseconds since its epoch (one subtraction per packet
    /// instead of `Instant` arithmetic).
    pub fn new(now: u64, bits_per_s: u64, window: Duration) -> Self {
        // Rounded up: a refill is never short of the configured rate.
        let rate = u64::try_from((u128::from(bits_per_s) << 40).div_ceil(1_000_000_000))
            .unwrap_or(u64::MAX);
        // At least one full-size packet, so that a tiny rate still passes something.
        let bits = (u128::from(bits_per_s) * window.as_nanos() / 1_000_000_000).max(12_000);
        let depth = bits.saturating_mul(ONE);
        Self {
            rate,
            depth,
            tokens: depth,
            last: now,
        }
    }

    /// Refills for the time since the last call; never goes back in time.
    #[inline(always)]
    fn refill(&mut self, now: u64) {
        if now > self.last {
            let add = u128::from(now - self.last) * u128::from(self.rate);
            self.tokens = self.tokens.saturating_add(add).min(self.depth);
            self.last = now;
        }
    }

    /// Whether `bits` fit now (refilling first); does not take them.
    #[inline(always)]
    pub fn conforms(&mut self, now: u64, bits: u64) -> bool {
        self.refill(now);
        self.tokens >= u128::from(bits) * ONE
    }

    /// Takes `bits` (after [`TokenBucket::conforms`] said they fit).
    #[inline(always)]
    pub fn take(&mut self, bits: u64) {
        self.tokens = self.tokens.saturating_sub(u128::from(bits) * ONE);
    }

    /// Takes the rate and depth of `other` (a modified QER), keeping this bucket's tokens so
    /// that a modification does not reset policing.
    pub fn set_rate_from(&mut self, other: &TokenBucket) {
        self.rate = other.rate;
        self.depth = other.depth;
        self.tokens = self.tokens.min(self.depth);
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
        let mut b = TokenBucket::new(0, u64::from(per_s), Duration::ZERO);
        b.depth = u128::from(burst.max(1)) * ONE;
        b.tokens = b.depth;
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
    fn rate_limit() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(t0, 10, 3);
        assert_eq!((0..10).filter(|_| r.allow(t0)).count(), 3);
        assert!(r.allow(t0 + Duration::from_millis(100)));
        assert!(!r.allow(t0 + Duration::from_millis(100)));
    }
}
