//! What the sink's maps say, in numbers: counts, latency histograms and their quantiles,
//! interarrival jitter ([`bucket`] and [`jitter_update`] are the specifications of the sink
//! program's).

/// Packets and octets counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    pub packets: u64,
    pub octets: u64,
}

impl Count {
    pub fn since(&self, earlier: &Count) -> Count {
        Count {
            packets: self.packets.saturating_sub(earlier.packets),
            octets: self.octets.saturating_sub(earlier.octets),
        }
    }
}

/// Histogram buckets per class: 0..32 ns one each, then 32 per power of two up to 2^37 ns
/// (~137 s; the last bucket takes everything above): a bucket is 1.6–3.1 % of its values
/// wide.
pub const BUCKETS: usize = 1056;
const SUB_BITS: u32 = 5;
const MAX_EXP: u32 = 36;

/// The histogram bucket of a transit time of `v` ns (the specification of the sink's).
pub fn bucket(v: u64) -> usize {
    if v < 32 {
        return usize::try_from(v).unwrap_or(0);
    }
    let e = 63 - v.leading_zeros();
    if e > MAX_EXP {
        return BUCKETS - 1;
    }
    usize::try_from(u64::from((e - SUB_BITS) * 32) + (v >> (e - SUB_BITS))).unwrap_or(0)
}

/// The values of bucket `b`: `lo..hi` ns (the last one is open above).
pub fn bucket_bounds(b: usize) -> (u64, u64) {
    let b64 = b as u64;
    if b < 32 {
        return (b64, b64 + 1);
    }
    let e = b64 / 32 + 4;
    let m = b64 % 32 + 32;
    let hi = if b + 1 >= BUCKETS {
        u64::MAX
    } else {
        (m + 1) << (e - 5)
    };
    (m << (e - 5), hi)
}

/// RFC 3550 §A.8: the interarrival jitter (times 16, ns) after a packet of transit `transit`
/// following one of transit `last`: J += (|D| − J)/16 in fixed point.
pub fn jitter_update(j16: u64, last: u64, transit: u64) -> u64 {
    let d = transit.abs_diff(last);
    j16.wrapping_add(d).wrapping_sub((j16 + 8) >> 4)
}

/// One class's latency since the last reset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassLatency {
    /// Stamped packets of the class.
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    /// Downlink G-PDUs whose QFI is not the class's.
    pub qfi_mismatch: u64,
    pub buckets: Vec<u64>,
}

impl ClassLatency {
    /// The `p` quantile (0..=1): the middle of the bucket that holds it (capped at the
    /// maximum), `None` without packets.
    pub fn quantile(&self, p: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let total: u64 = self.buckets.iter().sum();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((p * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut cum = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            cum += n;
            if cum >= rank {
                let (lo, hi) = bucket_bounds(b);
                let mid = if hi == u64::MAX {
                    lo
                } else {
                    lo + (hi - lo) / 2
                };
                return Some(mid.min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }
}

/// What the sink measured since the last reset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Latency {
    pub classes: [ClassLatency; 2],
    /// Stamps later than the sink's clock (should not happen: one clock).
    pub negative: u64,
}

/// Interarrival jitter of one class over its flows (those with two packets or more).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JitterSummary {
    pub flows: u64,
    pub mean_ns: f64,
    pub max_ns: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_line_finely() {
        let mut prev_hi = 0;
        for b in 0..BUCKETS {
            let (lo, hi) = bucket_bounds(b);
            assert_eq!(
                lo,
                prev_hi,
                "bucket {b} starts where {} ended",
                b.max(1) - 1
            );
            assert_eq!(bucket(lo), b);
            if hi != u64::MAX {
                assert_eq!(bucket(hi - 1), b);
                if lo >= 32 {
                    assert!(
                        (hi - lo) as f64 / lo as f64 <= 1.0 / 32.0 + 1e-12,
                        "bucket {b}"
                    );
                }
            }
            prev_hi = hi;
        }
        assert_eq!(prev_hi, u64::MAX);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(
            (bucket(992), bucket(1_007), bucket(1_008)),
            (bucket(1_000), bucket(1_000), bucket(1_000) + 1)
        );
        assert!(
            bucket(100_000_000) < BUCKETS - 1,
            "100 ms is inside the range"
        );
    }

    #[test]
    fn jitter_follows_rfc3550() {
        // Constant transit: no jitter.
        assert_eq!(jitter_update(0, 5000, 5000), 0);
        // Alternating ±1 µs converges to ~1 µs (J×16 → 16,000).
        let (mut j, mut last) = (0u64, 10_000u64);
        for i in 0..400 {
            let t = if i % 2 == 0 { 11_000 } else { 10_000 };
            j = jitter_update(j, last, t);
            last = t;
        }
        assert!((15_900..=16_100).contains(&j), "{j}");
        // One step of 1,600 ns from zero: J = 100 ns.
        assert_eq!(jitter_update(0, 1000, 2600), 1600);
    }

    #[test]
    fn quantiles_from_buckets() {
        let mut c = ClassLatency {
            buckets: vec![0; BUCKETS],
            ..Default::default()
        };
        for v in (1..=1000u64).map(|i| i * 1000) {
            c.buckets[bucket(v)] += 1;
            c.count += 1;
            c.sum_ns += v;
            c.max_ns = c.max_ns.max(v);
        }
        for (p, want) in [(0.5, 500_000.0), (0.99, 990_000.0), (0.999, 999_000.0)] {
            let q = c.quantile(p).unwrap() as f64;
            assert!((q - want).abs() / want < 0.02, "p{p}: {q} vs {want}");
        }
        assert_eq!(c.quantile(1.0), Some(1_000_000));
        assert_eq!(ClassLatency::default().quantile(0.5), None);
    }
}
