//! Token buckets for QER maximum bit rates (TS 29.244 §5.4.2, TS 23.501 §5.7.2.5) and for
//! rate-limiting what the data path generates. `now` is always a parameter.

use std::time::{Duration, Instant};

/// Averaging window when the QER gives none (TS 23.501 §5.7.3.6: 2000 ms by default).
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2000);

/// A token bucket counting bits. The bucket starts full; its depth is the rate times the
/// averaging window, so a flow may burst for one window and is held to the rate after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    /// Bits per nanosecond.
    rate: f64,
    depth: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(now: Instant, bits_per_s: u64, window: Duration) -> Self {
        let rate = bits_per_s as f64 / 1e9;
        let depth = (bits_per_s as f64 * window.as_secs_f64()).max(12_000.0);
        Self {
            rate,
            depth,
            tokens: depth,
            last: now,
        }
    }

    /// Refills for the time since the last call; never goes back in time.
    #[inline(always)]
    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let ns = now.duration_since(self.last).as_nanos() as f64;
            self.tokens = (self.tokens + ns * self.rate).min(self.depth);
            self.last = now;
        }
    }

    /// Whether `bits` fit now (refilling first); does not take them.
    #[inline(always)]
    pub fn conforms(&mut self, now: Instant, bits: u64) -> bool {
        self.refill(now);
        self.tokens >= bits as f64
    }

    /// Takes `bits` (after [`TokenBucket::conforms`] said they fit).
    #[inline(always)]
    pub fn take(&mut self, bits: u64) {
        self.tokens -= bits as f64;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit(TokenBucket);

impl RateLimit {
    pub fn new(now: Instant, per_s: u32, burst: u32) -> Self {
        let mut b = TokenBucket::new(now, u64::from(per_s), Duration::ZERO);
        b.depth = f64::from(burst.max(1));
        b.tokens = b.depth;
        Self(b)
    }

    /// Whether one more event is allowed now (and counts it).
    pub fn allow(&mut self, now: Instant) -> bool {
        let ok = self.0.conforms(now, 1);
        if ok {
            self.0.take(1);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_holds_rate_after_burst() {
        let t0 = Instant::now();
        // 8 Mbit/s, 100 ms window: 800 kbit of burst.
        let mut b = TokenBucket::new(t0, 8_000_000, Duration::from_millis(100));
        let mut sent = 0u64;
        // Offer 1500-octet packets at 80 Mbit/s for 10 s of virtual time.
        let step = Duration::from_micros(150);
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
