//! Allocation of TEIDs (F-TEID CHOOSE, TS 29.244 §5.5.3), UE addresses (CHV4/CHV6, §5.21) and
//! local SEIDs. Freed TEIDs and addresses are not handed out again at once, so that a late
//! packet or message of a released session does not reach the next one to get them; what each
//! allocator keeps grows with what is in use (and, for TEIDs, recently released), never with
//! how many were ever handed out.

use crate::config::ConfigError;
use rand::rngs::{StdRng, SysRng};
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};
use upf_rules::{Seid, Teid};

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// Every value of the pool is in use.
    Exhausted,
    /// No pool is configured for this DNN / network instance / address family.
    NoPool,
    /// The static value asked for is in use already, or outside the allocator's range.
    Conflict,
}

/// TEIDs from an inclusive range (never 0, TS 29.281 §5.1), handed out in ascending order by
/// a cursor that sweeps the range cyclically, skipping values in use or held (the data path's
/// TEID table is fastest with dense runs of keys, so TEIDs are not randomised).
///
/// A released TEID is held off for at least `reuse_after` before the sweep may hand it out
/// again, so that late packets of the old session (or a cached response naming it) do not
/// reach the new one. Memory is the live TEIDs plus those released within the hold-off (churn
/// rate × hold-off), not the history: B-trees, whose nodes go as their entries do (a hash
/// table under churn keeps its tombstones and, at a steady count, doubled once more after
/// ~1M releases: 3 MiB at 60k held); about 10 bytes per live TEID and 55 per held one. When
/// every value not in use is still held, allocation fails with `Exhausted` rather than reuse
/// one early.
#[derive(Debug)]
pub struct TeidAllocator {
    first: u32,
    last: u32,
    /// The next value the sweep looks at.
    cursor: u32,
    live: BTreeSet<u32>,
    reuse_after: Duration,
    /// Released TEIDs in order of release, and when; pruned from the front as time passes.
    released: VecDeque<(Instant, u32)>,
    /// The TEIDs of `released` still held, by value, with their latest release (a TEID the
    /// SMF reserved while held and released again has two entries in `released`).
    held: BTreeMap<u32, Instant>,
}

impl TeidAllocator {
    pub fn new(first: u32, last: u32, reuse_after: Duration) -> Self {
        let first = first.max(1);
        Self {
            first,
            last: last.max(first),
            cursor: first,
            live: BTreeSet::new(),
            reuse_after,
            released: VecDeque::new(),
            held: BTreeMap::new(),
        }
    }

    fn size(&self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }

    /// Ends the hold-off of TEIDs released `reuse_after` or longer before `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, t)) = self.released.front() {
            if now.saturating_duration_since(at) < self.reuse_after {
                break;
            }
            self.released.pop_front();
            if self.held.get(&t) == Some(&at) {
                self.held.remove(&t);
            }
        }
        // Give back what a burst of releases left behind, so memory follows the current
        // churn, not its peak (halving at a quarter full: amortised O(1)).
        if self.released.capacity() > 4 * self.released.len() + 1024 {
            self.released.shrink_to(2 * self.released.len());
        }
    }

    pub fn allocate(&mut self, now: Instant) -> Result<Teid, AllocError> {
        self.expire(now);
        // `live` and `held` are disjoint, so this leaves at least one value for the sweep.
        if (self.live.len() + self.held.len()) as u64 >= self.size() {
            return Err(AllocError::Exhausted);
        }
        for _ in 0..self.size() {
            let t = self.cursor;
            self.cursor = if t == self.last { self.first } else { t + 1 };
            if !self.held.contains_key(&t) && self.live.insert(t) {
                return Ok(Teid(t));
            }
        }
        Err(AllocError::Exhausted)
    }

    /// Marks a TEID the SMF chose as in use. One still held is taken all the same: the SMF
    /// decides when its own TEIDs are reused.
    pub fn reserve(&mut self, teid: Teid) -> Result<(), AllocError> {
        if !(self.first..=self.last).contains(&teid.0) || !self.live.insert(teid.0) {
            return Err(AllocError::Conflict);
        }
        self.held.remove(&teid.0);
        Ok(())
    }

    /// Releases a TEID that a session held: it is not handed out again for `reuse_after`.
    pub fn free(&mut self, teid: Teid, now: Instant) -> bool {
        if !self.live.remove(&teid.0) {
            return false;
        }
        self.held.insert(teid.0, now);
        self.released.push_back((now, teid.0));
        self.expire(now);
        true
    }

    /// Returns a TEID that nobody was told of (the request that took it failed): no hold-off.
    pub fn unwind(&mut self, teid: Teid) -> bool {
        self.live.remove(&teid.0)
    }

    pub fn in_use(&self) -> usize {
        self.live.len()
    }

    /// Released TEIDs still held off (as of the last allocation or release).
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// One UE address pool (TS 29.244 §5.21), optionally tied to a DNN and/or Network Instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UePoolConfig {
    pub name: Option<String>,
    pub dnn: Option<String>,
    pub network_instance: Option<String>,
    /// IPv4 network and prefix length; network and broadcast addresses are never handed out.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// IPv6 pool prefix, its length, and the length of each UE's prefix (64, or 128).
    pub ipv6: Option<(Ipv6Addr, u8, u8)>,
}

/// A bitmap over `n` slots with a next-fit cursor.
#[derive(Debug)]
struct Bitmap {
    bits: Vec<u64>,
    n: u64,
    used: u64,
    cursor: u64,
}

impl Bitmap {
    fn new(n: u64) -> Self {
        Self {
            bits: vec![0; usize::try_from(n.div_ceil(64)).unwrap_or(0)],
            n,
            used: 0,
            cursor: 0,
        }
    }
    fn get(&self, i: u64) -> bool {
        let (w, b) = (usize::try_from(i / 64).unwrap_or(usize::MAX), i % 64);
        self.bits.get(w).is_some_and(|x| x & (1 << b) != 0)
    }
    fn set(&mut self, i: u64, on: bool) -> bool {
        let (w, b) = (usize::try_from(i / 64).unwrap_or(usize::MAX), i % 64);
        let Some(x) = self.bits.get_mut(w) else {
            return false;
        };
        let was = *x & (1 << b) != 0;
        if was != on {
            *x ^= 1 << b;
            if on {
                self.used += 1;
            } else {
                self.used -= 1;
            }
        }
        was != on
    }
    /// Next free slot at or after the cursor (wrapping); skips whole full words.
    fn take(&mut self) -> Option<u64> {
        if self.used >= self.n {
            return None;
        }
        let mut i = self.cursor % self.n;
        for _ in 0..=self.n {
            if self.bits[usize::try_from(i / 64).ok()?] == u64::MAX && i.is_multiple_of(64) {
                i = (i + 64) % self.n;
                continue;
            }
            if !self.get(i) {
                self.set(i, true);
                self.cursor = i + 1;
                return Some(i);
            }
            i = (i + 1) % self.n;
        }
        None
    }
}

#[derive(Debug)]
struct V4Pool {
    base: u32,
    /// Slot i is base + 1 + i (the network address is skipped; the broadcast is not a slot).
    map: Bitmap,
}

#[derive(Debug)]
struct V6Pool {
    prefix: u128,
    pool_len: u8,
    ue_len: u8,
    /// Delegated prefixes (index within the pool), capped at 2^24 slots.
    map: Bitmap,
}

#[derive(Debug)]
struct Pool {
    cfg: UePoolConfig,
    v4: Option<V4Pool>,
    v6: Option<V6Pool>,
}

/// UE address pools. An IPv4 /16 costs 8 KiB of bitmap; IPv6 pools index at most 2^24 UE
/// prefixes (2 MiB).
#[derive(Debug)]
pub struct UeIpPools {
    pools: Vec<Pool>,
}

const MAX_V6_SLOTS_LOG2: u8 = 24;

fn mask_v6(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(len)))
    }
}

impl UeIpPools {
    pub fn new(pools: Vec<UePoolConfig>) -> Result<Self, ConfigError> {
        let mut out: Vec<Pool> = Vec::new();
        for cfg in pools {
            let name = cfg.name.clone().unwrap_or_else(|| "default".into());
            let v4 = match cfg.ipv4 {
                Some((net, len)) => {
                    if !(8..=30).contains(&len) {
                        return Err(ConfigError::Ipv4PoolLength { pool: name, len });
                    }
                    let base = u32::from(net) & (u32::MAX << (32 - u32::from(len)));
                    let n = (1u64 << (32 - u32::from(len))) - 2;
                    Some(V4Pool {
                        base,
                        map: Bitmap::new(n),
                    })
                }
                None => None,
            };
            let v6 = match cfg.ipv6 {
                Some((net, len, ue_len)) => {
                    if len > 127 || ue_len > 128 || ue_len <= len {
                        return Err(ConfigError::Ipv6PoolLengths {
                            pool: name,
                            len,
                            ue_len,
                        });
                    }
                    let bits = (ue_len - len).min(MAX_V6_SLOTS_LOG2);
                    Some(V6Pool {
                        prefix: mask_v6(u128::from(net), len),
                        pool_len: len,
                        ue_len,
                        map: Bitmap::new(1u64 << bits),
                    })
                }
                None => None,
            };
            if v4.is_none() && v6.is_none() {
                return Err(ConfigError::EmptyPool(name));
            }
            let p = Pool { cfg, v4, v6 };
            for q in &out {
                // Pools of two network instances may share addresses: they are two
                // data networks (the data path keys UEs by instance and address).
                let apart = matches!((&p.cfg.network_instance, &q.cfg.network_instance),
                    (Some(a), Some(b)) if !a.eq_ignore_ascii_case(b));
                if overlaps(&p, q) && !apart {
                    return Err(ConfigError::OverlappingPools {
                        pool: name,
                        other: q.cfg.name.clone().unwrap_or_else(|| "default".into()),
                    });
                }
            }
            out.push(p);
        }
        Ok(Self { pools: out })
    }

    /// The pool for this DNN / network instance: Network Instance match first, then DNN
    /// (case-insensitive), then a pool bound to neither.
    fn pick(&mut self, dnn: Option<&str>, ni: Option<&str>, v6: bool) -> Option<&mut Pool> {
        let has = |p: &Pool| if v6 { p.v6.is_some() } else { p.v4.is_some() };
        let eq = |a: &Option<String>, b: Option<&str>| matches!((a, b), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b));
        let i = self
            .pools
            .iter()
            .position(|p| has(p) && eq(&p.cfg.network_instance, ni))
            .or_else(|| {
                self.pools
                    .iter()
                    .position(|p| has(p) && eq(&p.cfg.dnn, dnn))
            })
            .or_else(|| {
                self.pools
                    .iter()
                    .position(|p| has(p) && p.cfg.dnn.is_none() && p.cfg.network_instance.is_none())
            })?;
        self.pools.get_mut(i)
    }

    pub fn allocate_v4(
        &mut self,
        dnn: Option<&str>,
        network_instance: Option<&str>,
    ) -> Result<Ipv4Addr, AllocError> {
        let pool = self
            .pick(dnn, network_instance, false)
            .ok_or(AllocError::NoPool)?;
        let v4 = pool.v4.as_mut().ok_or(AllocError::NoPool)?;
        let i = v4.map.take().ok_or(AllocError::Exhausted)?;
        let off = u32::try_from(i + 1).map_err(|_| AllocError::Exhausted)?;
        Ok(Ipv4Addr::from(v4.base + off))
    }

    pub fn allocate_v6(
        &mut self,
        dnn: Option<&str>,
        network_instance: Option<&str>,
    ) -> Result<(Ipv6Addr, u8), AllocError> {
        let pool = self
            .pick(dnn, network_instance, true)
            .ok_or(AllocError::NoPool)?;
        let v6 = pool.v6.as_mut().ok_or(AllocError::NoPool)?;
        let i = v6.map.take().ok_or(AllocError::Exhausted)?;
        let shift = 128 - u32::from(v6.ue_len);
        let addr = v6.prefix | (u128::from(i) << shift);
        // A single address (/128) must not be the all-zero subnet-router anycast one.
        let addr = if v6.ue_len == 128 { addr + 1 } else { addr };
        Ok((Ipv6Addr::from(addr), v6.ue_len))
    }

    /// The pool slot of `addr`: in the pool of network instance `ni` if one holds it (two
    /// instances' pools may overlap), else in the first that does.
    fn slot(&self, addr: IpAddr, ni: Option<&str>) -> Option<(usize, bool, u64)> {
        let of_ni = |p: &Pool| matches!((&p.cfg.network_instance, ni), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b));
        let (ni, rest): (Vec<_>, Vec<_>) =
            self.pools.iter().enumerate().partition(|(_, p)| of_ni(p));
        for (n, p) in ni.into_iter().chain(rest) {
            match addr {
                IpAddr::V4(a) => {
                    if let Some(v4) = &p.v4 {
                        let a = u32::from(a);
                        if a > v4.base && u64::from(a - v4.base) <= v4.map.n {
                            return Some((n, false, u64::from(a - v4.base - 1)));
                        }
                    }
                }
                IpAddr::V6(a) => {
                    if let Some(v6) = &p.v6 {
                        let mut a = u128::from(a);
                        if mask_v6(a, v6.pool_len) == v6.prefix {
                            if v6.ue_len == 128 {
                                a = a.wrapping_sub(1);
                            }
                            let i = (a ^ v6.prefix) >> (128 - u32::from(v6.ue_len));
                            if let Ok(i) = u64::try_from(i) {
                                if i < v6.map.n {
                                    return Some((n, true, i));
                                }
                            }
                        }
                    }
                }
            }
        }
        None
    }

    fn map_mut(&mut self, n: usize, v6: bool) -> Option<&mut Bitmap> {
        let p = self.pools.get_mut(n)?;
        if v6 {
            p.v6.as_mut().map(|x| &mut x.map)
        } else {
            p.v4.as_mut().map(|x| &mut x.map)
        }
    }

    pub fn free(&mut self, addr: IpAddr, network_instance: Option<&str>) -> bool {
        let Some((n, v6, i)) = self.slot(addr, network_instance) else {
            return false;
        };
        self.map_mut(n, v6).is_some_and(|m| m.set(i, false))
    }

    pub fn reserve(
        &mut self,
        addr: IpAddr,
        network_instance: Option<&str>,
    ) -> Result<(), AllocError> {
        let Some((n, v6, i)) = self.slot(addr, network_instance) else {
            return Ok(());
        };
        match self.map_mut(n, v6).map(|m| m.set(i, true)) {
            Some(true) => Ok(()),
            _ => Err(AllocError::Conflict),
        }
    }

    pub fn usage(&self) -> Vec<(String, u64, u64)> {
        self.pools
            .iter()
            .map(|p| {
                let name = p.cfg.name.clone().unwrap_or_else(|| "default".into());
                let maps = [p.v4.as_ref().map(|x| &x.map), p.v6.as_ref().map(|x| &x.map)];
                let used = maps.iter().flatten().map(|m| m.used).sum();
                let cap = maps
                    .iter()
                    .flatten()
                    .fold(0u64, |a, m| a.saturating_add(m.n));
                (name, used, cap)
            })
            .collect()
    }
}

fn overlaps(a: &Pool, b: &Pool) -> bool {
    let v4 = match (&a.v4, &b.v4) {
        (Some(x), Some(y)) => {
            let (xe, ye) = (
                u64::from(x.base) + x.map.n + 1,
                u64::from(y.base) + y.map.n + 1,
            );
            u64::from(x.base) <= ye && u64::from(y.base) <= xe
        }
        _ => false,
    };
    let v6 = match (&a.v6, &b.v6) {
        (Some(x), Some(y)) => {
            let len = x.pool_len.min(y.pool_len);
            mask_v6(x.prefix, len) == mask_v6(y.prefix, len)
        }
        _ => false,
    };
    v4 || v6
}

/// Local (UP) SEIDs, drawn from a cryptographically secure generator (ChaCha12 seeded by the
/// OS) so that a peer cannot guess the SEIDs of another SMF's sessions. Never 0 (what an
/// establishment's header carries); unique because the session table is asked (`in_use`):
/// which SEIDs are in use is its to say, not a set of its own here.
pub struct SeidAllocator {
    rng: StdRng,
}

impl std::fmt::Debug for SeidAllocator {
    // Not the generator's state: whoever reads a debug dump could predict the next SEIDs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SeidAllocator { .. }")
    }
}

impl SeidAllocator {
    pub fn new() -> Result<Self, ConfigError> {
        let rng =
            StdRng::try_from_rng(&mut SysRng).map_err(|e| ConfigError::Entropy(e.to_string()))?;
        Ok(Self { rng })
    }

    /// A random SEID that is not 0 and that `in_use` does not claim.
    pub fn allocate(&mut self, in_use: impl Fn(Seid) -> bool) -> Seid {
        loop {
            let s = Seid(self.rng.next_u64());
            if s.0 != 0 && !in_use(s) {
                return s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    fn pool(dnn: Option<&str>, v4: &str, len: u8) -> UePoolConfig {
        UePoolConfig {
            name: dnn.map(Into::into),
            dnn: dnn.map(Into::into),
            network_instance: None,
            ipv4: Some((v4.parse().unwrap(), len)),
            ipv6: None,
        }
    }

    const HOLD: Duration = Duration::from_secs(60);

    #[test]
    fn teids_ascend_and_are_held_off_after_release() {
        let t0 = Instant::now();
        let mut a = TeidAllocator::new(0, 3, HOLD);
        let got: Vec<u32> = (0..3).map(|_| a.allocate(t0).unwrap().0).collect();
        assert_eq!(got, [1, 2, 3], "ascending from 1, never 0");
        assert_eq!(a.allocate(t0), Err(AllocError::Exhausted));
        assert!(a.free(Teid(2), t0));
        assert!(!a.free(Teid(2), t0));
        // The only value not in use is held: no early reuse, however small the range.
        assert_eq!(a.allocate(t0 + HOLD / 2), Err(AllocError::Exhausted));
        assert_eq!(a.held(), 1);
        assert_eq!(a.allocate(t0 + HOLD), Ok(Teid(2)));
        assert_eq!(a.held(), 0);
        // A TEID nobody was told of comes back at once.
        assert!(a.unwind(Teid(2)));
        assert_eq!(a.allocate(t0 + HOLD), Ok(Teid(2)));

        let mut b = TeidAllocator::new(1, 100, HOLD);
        let t = b.allocate(t0).unwrap();
        b.free(t, t0);
        assert_ne!(b.allocate(t0).unwrap(), t, "a freed TEID waits");
        assert_eq!(b.reserve(Teid(50)), Ok(()));
        assert_eq!(b.reserve(Teid(50)), Err(AllocError::Conflict));
        assert_eq!(b.reserve(Teid(500)), Err(AllocError::Conflict));
        assert!((0..97).all(|_| b.allocate(t0).map(|t| t.0 != 50).unwrap_or(false)));
        assert_eq!(b.allocate(t0), Err(AllocError::Exhausted));
        // The SMF may take one of its own back while it is held …
        assert!(b.free(Teid(50), t0));
        assert_eq!(b.reserve(Teid(50)), Ok(()));
        // … and release it again later: held from the later release, not the first.
        let t1 = t0 + HOLD / 2;
        assert!(b.free(Teid(50), t1));
        assert_eq!(b.allocate(t0 + HOLD), Ok(Teid(1)));
        assert_eq!(b.allocate(t0 + HOLD), Err(AllocError::Exhausted));
        assert_eq!(b.allocate(t1 + HOLD), Ok(Teid(50)));
    }

    #[test]
    fn teid_sweep_wraps_past_live_and_held_values() {
        let t0 = Instant::now();
        let mut a = TeidAllocator::new(10, 19, HOLD);
        let live: Vec<Teid> = (0..10).map(|_| a.allocate(t0).unwrap()).collect();
        for &t in &live[..5] {
            a.free(t, t0); // 10..=14 held from t0
        }
        a.free(live[7], t0 + HOLD / 2); // 17 held from later
        assert_eq!(a.allocate(t0 + HOLD), Ok(Teid(10)));
        assert_eq!(a.allocate(t0 + HOLD), Ok(Teid(11)));
        a.free(Teid(10), t0 + HOLD); // held again
        let rest: Vec<u32> = std::iter::from_fn(|| a.allocate(t0 + HOLD).ok())
            .map(|t| t.0)
            .collect();
        assert_eq!(rest, [12, 13, 14], "17 and 10 still held");
        let t2 = t0 + 2 * HOLD;
        assert_eq!(a.allocate(t2), Ok(Teid(17)), "the sweep goes on from 15");
        assert_eq!(a.allocate(t2), Ok(Teid(10)));
        assert_eq!(a.allocate(t2), Err(AllocError::Exhausted));
    }

    #[test]
    fn teid_memory_follows_live_and_held_not_history() {
        // 1M TEIDs through a range of 2^32 at 1,000 a second: held ones are those of the last
        // minute, and the structures shrink back after a burst.
        let mut now = Instant::now();
        let mut a = TeidAllocator::new(1, u32::MAX, HOLD);
        let mut live = VecDeque::new();
        for _ in 0..200_000 {
            now += Duration::from_millis(1);
            live.push_back(a.allocate(now).unwrap());
            if live.len() > 100 {
                a.free(live.pop_front().unwrap(), now);
            }
        }
        assert_eq!(a.in_use(), 100);
        assert!((59_000..=60_001).contains(&a.held()), "{}", a.held());
        now += HOLD;
        for t in live.drain(..) {
            a.free(t, now);
        }
        now += HOLD;
        let _ = a.allocate(now).unwrap();
        assert_eq!((a.in_use(), a.held()), (1, 0));
        assert!(a.released.capacity() < 4096);
    }

    #[test]
    fn v4_pool_skips_network_and_broadcast_and_exhausts() {
        let mut p = UeIpPools::new(vec![pool(None, "10.0.0.0", 30)]).unwrap();
        assert_eq!(p.allocate_v4(None, None), Ok("10.0.0.1".parse().unwrap()));
        assert_eq!(p.allocate_v4(None, None), Ok("10.0.0.2".parse().unwrap()));
        assert_eq!(p.allocate_v4(None, None), Err(AllocError::Exhausted));
        assert!(p.free("10.0.0.1".parse().unwrap(), None));
        assert!(!p.free("10.0.0.1".parse().unwrap(), None));
        assert_eq!(p.reserve("10.0.0.1".parse().unwrap(), None), Ok(()));
        assert_eq!(
            p.reserve("10.0.0.1".parse().unwrap(), None),
            Err(AllocError::Conflict)
        );
        assert_eq!(
            p.reserve("192.0.2.1".parse().unwrap(), None),
            Ok(()),
            "outside every pool"
        );
        assert_eq!(p.usage(), vec![("default".into(), 2, 2)]);
    }

    #[test]
    fn pools_chosen_by_network_instance_then_dnn_then_default() {
        let mut ims = pool(Some("ims"), "10.1.0.0", 24);
        ims.network_instance = Some("n6-ims".into());
        let mut p = UeIpPools::new(vec![
            pool(None, "10.0.0.0", 24),
            ims,
            pool(Some("internet"), "10.2.0.0", 24),
        ])
        .unwrap();
        assert_eq!(
            p.allocate_v4(Some("Internet"), None).unwrap().octets()[1],
            2
        );
        assert_eq!(p.allocate_v4(None, Some("n6-ims")).unwrap().octets()[1], 1);
        assert_eq!(p.allocate_v4(Some("other"), None).unwrap().octets()[1], 0);
        assert_eq!(p.allocate_v6(None, None), Err(AllocError::NoPool));
        let mut only = UeIpPools::new(vec![pool(Some("internet"), "10.2.0.0", 24)]).unwrap();
        assert_eq!(only.allocate_v4(Some("ims"), None), Err(AllocError::NoPool));
    }

    #[test]
    fn two_network_instances_share_a_range_each_with_its_own_addresses() {
        let mut a = pool(Some("a"), "10.60.0.0", 16);
        a.network_instance = Some("dn-a".into());
        let mut b = pool(Some("b"), "10.60.0.0", 16);
        b.network_instance = Some("dn-b".into());
        let mut p = UeIpPools::new(vec![a.clone(), b]).unwrap();
        let x = p.allocate_v4(None, Some("dn-a")).unwrap();
        assert_eq!(p.allocate_v4(None, Some("dn-b")), Ok(x));
        let ue = "10.60.0.9".parse().unwrap();
        assert_eq!(p.reserve(ue, Some("dn-a")), Ok(()));
        assert_eq!(p.reserve(ue, Some("dn-b")), Ok(()));
        assert_eq!(p.reserve(ue, Some("dn-b")), Err(AllocError::Conflict));
        assert!(p.free(ue, Some("dn-b")));
        assert_eq!(p.reserve(ue, Some("dn-b")), Ok(()));
        // One instance's pools still may not overlap.
        let mut a2 = pool(Some("a2"), "10.60.1.0", 24);
        a2.network_instance = Some("DN-A".into());
        assert!(UeIpPools::new(vec![a, a2]).is_err());
    }

    #[test]
    fn bad_pools_refused() {
        assert!(UeIpPools::new(vec![
            pool(None, "10.0.0.0", 16),
            pool(Some("x"), "10.0.5.0", 24)
        ])
        .is_err());
        assert!(UeIpPools::new(vec![pool(None, "10.0.0.0", 31)]).is_err());
        let v6 = |len, ue| UePoolConfig {
            name: None,
            dnn: None,
            network_instance: None,
            ipv4: None,
            ipv6: Some(("2001:db8::".parse().unwrap(), len, ue)),
        };
        assert!(UeIpPools::new(vec![v6(64, 48)]).is_err());
        assert!(UeIpPools::new(vec![v6(48, 64)]).is_ok());
    }

    #[test]
    fn v6_prefixes() {
        let cfg = UePoolConfig {
            name: None,
            dnn: None,
            network_instance: None,
            ipv4: None,
            ipv6: Some(("2001:db8:60::".parse().unwrap(), 48, 64)),
        };
        let mut p = UeIpPools::new(vec![cfg]).unwrap();
        let (a, len) = p.allocate_v6(None, None).unwrap();
        let (b, _) = p.allocate_v6(None, None).unwrap();
        assert_eq!((a, len), ("2001:db8:60::".parse().unwrap(), 64));
        assert_eq!(b, "2001:db8:60:1::".parse::<Ipv6Addr>().unwrap());
        assert!(p.free(b.into(), None));
        assert_eq!(
            p.reserve("2001:db8:60:1::".parse::<Ipv6Addr>().unwrap().into(), None),
            Ok(())
        );
    }

    #[test]
    fn seids_unique_nonzero_and_not_sequential() {
        let mut s = SeidAllocator::new().unwrap();
        let mut seen = HashSet::new();
        let mut prev = s.allocate(|_| false);
        let mut near = 0;
        for _ in 0..10_000 {
            let x = s.allocate(|x| seen.contains(&x));
            assert_ne!(x.0, 0);
            assert!(seen.insert(x), "{x:?} handed out twice");
            // A counter (or any small stride) lands next to the previous one every time; 64
            // random bits do so with probability 2^-44 per draw.
            if x.0.abs_diff(prev.0) < 1 << 20 {
                near += 1;
            }
            prev = x;
        }
        assert_eq!(near, 0, "SEIDs follow one another");
        // Spread over the whole range: the top bit is set about half the time.
        let high = seen.iter().filter(|x| x.0 >> 63 == 1).count();
        assert!(
            (4_000..6_000).contains(&high),
            "{high} of 10,000 with the top bit"
        );
        // Another allocator (another start of the UPF) does not repeat the same SEIDs.
        let mut t = SeidAllocator::new().unwrap();
        assert!((0..100).all(|_| !seen.contains(&t.allocate(|_| false))));
        assert_eq!(format!("{s:?}"), "SeidAllocator { .. }");
    }

    #[test]
    fn seids_skip_those_in_use() {
        let mut s = SeidAllocator::new().unwrap();
        // Every even SEID claimed: only odd ones come out.
        assert!((0..1000).all(|_| s.allocate(|x| x.0 % 2 == 0).0 % 2 == 1));
    }

    proptest! {
        /// Whatever the sequence of allocations and frees, no address is handed out twice
        /// while in use and the counts agree.
        #[test]
        fn v4_pool_never_double_allocates(ops in proptest::collection::vec(any::<(bool, u8)>(), 0..300)) {
            let mut p = UeIpPools::new(vec![pool(None, "10.0.0.0", 26)]).unwrap();
            let mut live: Vec<Ipv4Addr> = Vec::new();
            for (alloc, k) in ops {
                if alloc || live.is_empty() {
                    match p.allocate_v4(None, None) {
                        Ok(a) => { prop_assert!(!live.contains(&a)); live.push(a); }
                        Err(e) => { prop_assert_eq!(e, AllocError::Exhausted); prop_assert_eq!(live.len(), 62); }
                    }
                } else {
                    let a = live.swap_remove(usize::from(k) % live.len());
                    prop_assert!(p.free(a.into(), None));
                }
                prop_assert_eq!(p.usage()[0].1, live.len() as u64);
            }
        }

        #[test]
        fn teids_never_double_allocate_nor_reuse_early(
            ops in proptest::collection::vec(any::<(u8, u8)>(), 0..300),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut a = TeidAllocator::new(1, 40, HOLD);
            let mut live: Vec<Teid> = Vec::new();
            let mut released: HashMap<Teid, Instant> = HashMap::new();
            for (op, k) in ops {
                now += Duration::from_secs(u64::from(k % 16));
                if op % 4 != 0 || live.is_empty() {
                    let held = released.values().filter(|&&at| now - at < HOLD).count();
                    match a.allocate(now) {
                        Ok(t) => {
                            prop_assert!(t.0 != 0 && !live.contains(&t));
                            prop_assert!(released.get(&t).is_none_or(|&at| now - at >= HOLD));
                            live.push(t);
                        }
                        Err(_) => prop_assert_eq!(live.len() + held, 40),
                    }
                } else {
                    let t = live.swap_remove(usize::from(k) % live.len());
                    prop_assert!(a.free(t, now));
                    released.insert(t, now);
                }
                prop_assert_eq!(a.in_use(), live.len());
            }
        }
    }
}
