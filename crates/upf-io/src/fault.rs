//! A decorator for tests: drops, duplicates and reorders received packets with given
//! probabilities, from a seeded PRNG, so a run is reproducible from its seed. Sent packets
//! pass through unchanged.
//!
//! Per received packet, in order: it is dropped with probability `drop`; a kept packet is
//! followed by a copy with probability `duplicate`; then, walking the kept packets of the
//! batch, each is swapped with its successor with probability `reorder` (a swapped pair is not
//! swapped again). Packets beyond the caller's `max` (copies can make a batch longer) wait for
//! the next call, which hands them over before receiving more, so no packet is invented or
//! lost: `delivered + dropped + waiting = received + duplicated` ([`FaultStats`]). A queue
//! with queue groups is presented as one (the worker then classifies in software).

use crate::{IoStats, PacketIo, Pool};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use upf_packet::Packet;

/// Probabilities (each clamped to 0..=1) and the PRNG seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub seed: u64,
}

impl FaultConfig {
    /// No faults, seed `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            seed,
        }
    }
}

/// What the decorator did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets the inner backend received.
    pub received: u64,
    pub dropped: u64,
    /// Copies made.
    pub duplicated: u64,
    /// Adjacent pairs swapped.
    pub reordered: u64,
    /// Packets handed to the caller.
    pub delivered: u64,
}

/// A probability as a threshold for `next_u64() < threshold`; `None` means always.
fn threshold(p: f64) -> Option<u64> {
    if p.is_nan() || p <= 0.0 {
        Some(0)
    } else if p >= 1.0 {
        None
    } else {
        // p · 2^64: in (0, 2^64) since 0 < p < 1, and float-to-int casts saturate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some((p * 18_446_744_073_709_551_616.0) as u64)
    }
}

/// A backend whose received packets are dropped, duplicated and reordered at random.
#[derive(Debug)]
pub struct Faults<T: PacketIo> {
    inner: T,
    cfg: FaultConfig,
    drop: Option<u64>,
    duplicate: Option<u64>,
    reorder: Option<u64>,
    rng: SmallRng,
    stats: FaultStats,
    /// Packets past a call's `max`, handed over first by the next call.
    waiting: VecDeque<Packet>,
    scratch: Vec<Packet>,
}

impl<T: PacketIo> Faults<T> {
    pub fn new(inner: T, cfg: FaultConfig) -> Self {
        Self {
            inner,
            cfg,
            drop: threshold(cfg.drop),
            duplicate: threshold(cfg.duplicate),
            reorder: threshold(cfg.reorder),
            rng: SmallRng::seed_from_u64(cfg.seed),
            stats: FaultStats::default(),
            waiting: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    pub fn fault_stats(&self) -> FaultStats {
        self.stats
    }

    /// Packets waiting for the next `rx_batch` (copies beyond a call's `max`).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// One decision; a draw is taken whatever the probability, so that the sequence of
    /// decisions depends on the seed and the traffic only.
    fn chance(&mut self, t: Option<u64>) -> bool {
        let r = self.rng.next_u64();
        t.is_none_or(|t| r < t)
    }
}

impl<T: PacketIo> PacketIo for Faults<T> {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.waiting.pop_front() else {
                break;
            };
            batch.push(p);
            n += 1;
        }
        if n == max {
            self.stats.delivered += n as u64;
            return Ok(n);
        }
        // Until something is delivered or the inner backend has nothing more (so that
        // Ok(0) still means "nothing waiting" when every packet of a batch was dropped).
        let mut r;
        loop {
            let mut got = std::mem::take(&mut self.scratch);
            got.clear();
            r = self.inner.rx_batch(pool, &mut got, max - n);
            let inner_n = got.len();
            let mut kept = Vec::with_capacity(got.len());
            for p in got.drain(..) {
                self.stats.received += 1;
                if self.chance(self.drop) {
                    self.stats.dropped += 1;
                    pool.put(p);
                    continue;
                }
                let dup = self.chance(self.duplicate);
                if dup {
                    let mut c = pool.get(p.port());
                    if c.load(p.port(), p.data()) {
                        self.stats.duplicated += 1;
                        kept.push(p);
                        kept.push(c);
                        continue;
                    }
                    pool.put(c);
                }
                kept.push(p);
            }
            self.scratch = got;
            let mut i = 0;
            while i + 1 < kept.len() {
                if self.chance(self.reorder) {
                    kept.swap(i, i + 1);
                    self.stats.reordered += 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
            for p in kept {
                if n < max {
                    batch.push(p);
                    n += 1;
                } else {
                    self.waiting.push_back(p);
                }
            }
            if n > 0 || inner_n == 0 || r.is_err() {
                break;
            }
        }
        self.stats.delivered += n as u64;
        match r {
            Err(e) if n == 0 => Err(e),
            _ => Ok(n),
        }
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        self.inner.tx_batch(batch, pool)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.fd()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn stats(&self) -> IoStats {
        self.inner.stats()
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "{} + faults (drop {}, duplicate {}, reorder {}, seed {})",
            self.inner.describe(),
            c.drop,
            c.duplicate,
            c.reorder,
            c.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{self, MemPeer};
    use rand::RngExt;
    use upf_packet::Port;

    /// An "IP packet" carrying sequence number `i`.
    fn pkt(i: u32) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 8];
        p.extend_from_slice(&i.to_be_bytes());
        p
    }

    fn seq(p: &Packet) -> u32 {
        u32::from_be_bytes(p.data()[4..8].try_into().unwrap())
    }

    fn setup(cfg: FaultConfig, n: u32) -> (Faults<mem::MemIo>, MemPeer) {
        let (io, peer) = mem::pair(Port::N3);
        for i in 0..n {
            peer.inject(&pkt(i));
        }
        (Faults::new(io, cfg), peer)
    }

    /// Receives everything (waiting copies included), `max` at a time.
    fn drain(f: &mut Faults<mem::MemIo>, max: usize) -> Vec<u32> {
        let mut pool = Pool::new(64);
        let mut out = Vec::new();
        loop {
            let mut b = Vec::new();
            let n = f.rx_batch(&mut pool, &mut b, max).unwrap();
            assert!(n <= max);
            assert_eq!(n, b.len());
            if n == 0 {
                return out;
            }
            out.extend(b.iter().map(seq));
            pool.put_all(b);
        }
    }

    const CFG: FaultConfig = FaultConfig {
        drop: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        seed: 42,
    };

    #[test]
    fn faults_are_deterministic_for_a_seed() {
        let (mut a, _pa) = setup(CFG, 1000);
        let (mut b, _pb) = setup(CFG, 1000);
        let (sa, sb) = (drain(&mut a, 32), drain(&mut b, 32));
        assert_eq!(sa, sb);
        assert_eq!(a.fault_stats(), b.fault_stats());
        let s = a.fault_stats();
        // The counts of seed 42 (a change here means the PRNG, rand's SmallRng, or the
        // decision order changed).
        assert_eq!(
            (
                s.received,
                s.dropped,
                s.duplicated,
                s.reordered,
                s.delivered
            ),
            (1000, 91, 44, 87, 953)
        );
        let (mut c, _pc) = setup(FaultConfig { seed: 43, ..CFG }, 1000);
        assert_ne!(drain(&mut c, 32), sa, "another seed, other faults");
        assert!(a.describe().contains("seed 42"));
    }

    #[test]
    fn faults_never_invent_or_lose_packets() {
        let mut rng = SmallRng::seed_from_u64(7);
        for round in 0..60u64 {
            let p = |r: &mut SmallRng| f64::from(r.random_range(0..5u8)) / 4.0; // 0, .25 … 1
            let cfg = FaultConfig {
                drop: p(&mut rng),
                duplicate: p(&mut rng),
                reorder: p(&mut rng),
                seed: round,
            };
            let n = 200;
            let max = rng.random_range(1..=40usize);
            let (mut f, _peer) = setup(cfg, n);
            let got = drain(&mut f, max);
            let s = f.fault_stats();
            assert_eq!(f.waiting(), 0);
            assert_eq!(s.received, u64::from(n), "{cfg:?}");
            assert_eq!(
                s.delivered + s.dropped,
                s.received + s.duplicated,
                "{cfg:?}"
            );
            assert_eq!(got.len() as u64, s.delivered);
            // Only injected packets, each at most twice.
            let mut count = vec![0u32; n as usize];
            for &q in &got {
                count[q as usize] += 1;
            }
            assert!(count.iter().all(|&c| c <= 2), "{cfg:?}");
            let missing = count.iter().filter(|&&c| c == 0).count() as u64;
            let doubled = count.iter().filter(|&&c| c == 2).count() as u64;
            assert_eq!((missing, doubled), (s.dropped, s.duplicated), "{cfg:?}");
            if cfg.drop == 1.0 {
                assert!(got.is_empty());
            }
            if cfg.drop == 0.0 && cfg.duplicate == 0.0 && cfg.reorder == 0.0 {
                assert_eq!(got, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn duplicates_beyond_max_wait_and_reorder_swaps_neighbours() {
        let cfg = FaultConfig {
            duplicate: 1.0,
            ..FaultConfig::new(1)
        };
        let (mut f, _peer) = setup(cfg, 5);
        let mut pool = Pool::new(16);
        let mut b = Vec::new();
        assert_eq!(f.rx_batch(&mut pool, &mut b, 3).unwrap(), 3);
        assert_eq!(f.waiting(), 3, "three asked of the inner backend, doubled");
        assert_eq!(b.iter().map(seq).collect::<Vec<_>>(), [0, 0, 1]);
        pool.put_all(b.drain(..));
        assert_eq!(drain(&mut f, 3), [1, 2, 2, 3, 3, 4, 4]);

        let cfg = FaultConfig {
            reorder: 1.0,
            ..FaultConfig::new(1)
        };
        let (mut f, _peer) = setup(cfg, 6);
        assert_eq!(drain(&mut f, 64), [1, 0, 3, 2, 5, 4]);
        assert_eq!(f.fault_stats().reordered, 3);
    }

    #[test]
    fn tx_passes_through() {
        let (io, peer) = mem::pair(Port::N6);
        let mut f = Faults::new(
            io,
            FaultConfig {
                drop: 1.0,
                ..FaultConfig::new(3)
            },
        );
        let mut pool = Pool::new(4);
        let mut b = vec![Packet::from_bytes(Port::N6, &pkt(7)).unwrap()];
        assert_eq!(f.tx_batch(&mut b, &mut pool).unwrap(), 1);
        assert_eq!(peer.take_sent(), vec![pkt(7)]);
        assert_eq!(f.stats().tx_packets, 1);
    }
}
