//! The `u32 → u32` maps of the lookup tables (TEID → slot, IPv4 UE address → slot).
//!
//! TEIDs and UE addresses come in dense runs: allocators, ours and the SMFs', hand them out
//! in sequence from a range or pool. [`IntMap`] gives every block of 4,096 consecutive keys
//! that holds enough of them a page of its own (16 KiB), found through a direct array by the
//! key's high bits and indexed by its low bits: the lines a lookup may read then lie in a
//! few pages instead of the many a hashed table spreads them over, so the TLB holds them and
//! the cache keeps more of them (the lookup's page walk and miss were most of what many
//! sessions cost over few: docs/benchmarks/datapath-memory.md). Keys of sparse blocks stay in a hashed table,
//! [`Probed`].

use crate::tables::FastMap;

/// Keys a page maps: 16 KiB of values.
const PAGE_KEYS: u32 = 4096;
const PAGE_SHIFT: u32 = PAGE_KEYS.trailing_zeros();
/// A block gets a page when it holds this many keys (then a key costs at most 64 octets, as
/// much as 4 hashed ones) …
const PROMOTE: u32 = 256;
/// … and gives it back when it falls below this many (so that churn at the edge does not
/// move a block back and forth).
const DEMOTE: u32 = 64;

/// Where key `k` sits in its block's page: its low bits.
#[inline(always)]
fn in_page(k: u32) -> usize {
    (k & (PAGE_KEYS - 1)) as usize
}

/// The values of one block's keys, inverted (0: vacant), indexed by the key's low bits.
#[derive(Debug, Clone)]
#[repr(C, align(4096))]
struct Page([u32; PAGE_KEYS as usize]);

const EMPTY_PAGE: Page = Page([VACANT; PAGE_KEYS as usize]);

/// A `u32 → u32` map: dense blocks of keys in pages, the rest hashed (module docs). Values
/// must not be `u32::MAX`.
#[derive(Debug, Clone, Default)]
pub(crate) struct IntMap {
    /// Block (key >> 12) → 1 + its index in `pages`, 0: none; empty until a block has a
    /// page, then 2 MiB (a block's entry is read directly: no hashing before the page).
    top: Vec<u16>,
    pages: Vec<Page>,
    free_pages: Vec<usize>,
    /// Keys of the blocks that have no page.
    rest: Probed,
    /// Keys per block that has any (read only when keys come and go).
    counts: FastMap<u32, u32>,
}

impl IntMap {
    /// A map that holds `n` keys without growing its hashed part, and `n` dense keys without
    /// moving its pages (untouched memory: nothing resident until used).
    pub fn with_capacity(n: usize) -> Self {
        let mut pages = Vec::new();
        let _ = pages.try_reserve_exact(n.div_ceil(PAGE_KEYS as usize) + 1);
        Self {
            rest: Probed::with_capacity(n),
            pages,
            ..Self::default()
        }
    }

    /// The page of `block`, if it has one.
    #[inline(always)]
    fn page_of(&self, block: u32) -> Option<usize> {
        match self.top.get(block as usize) {
            Some(&p) if p != 0 => Some(usize::from(p) - 1),
            _ => None,
        }
    }

    #[inline(always)]
    fn page(&self, k: u32) -> Option<&Page> {
        self.pages.get(self.page_of(k >> PAGE_SHIFT)?)
    }

    #[inline(always)]
    pub fn get(&self, k: u32) -> Option<u32> {
        match self.page(k) {
            Some(p) => p.0.get(in_page(k)).filter(|&&v| v != VACANT).map(|&v| !v),
            None => self.rest.get(k),
        }
    }

    /// Prefetches into L2 the line a lookup of `k` will read (the block's entry in `top`,
    /// read here, is one of a few lines that stay in cache).
    #[inline(always)]
    pub fn prefetch(&self, k: u32) {
        match self.page(k) {
            Some(p) => upf_prefetch::l2(p.0.as_slice(), in_page(k)),
            None => self.rest.prefetch(k),
        }
    }

    /// Inserts or replaces; `v` must not be `u32::MAX`.
    pub fn insert(&mut self, k: u32, v: u32) {
        debug_assert!(v != u32::MAX);
        let block = k >> PAGE_SHIFT;
        let new = match self.page_of(block) {
            Some(p) => {
                let e = &mut self.pages[p].0[in_page(k)];
                let new = *e == VACANT;
                *e = !v;
                new
            }
            None => self.rest.insert(k, v),
        };
        if new {
            let c = self.counts.entry(block).or_insert(0);
            *c += 1;
            if *c == PROMOTE && self.page_of(block).is_none() {
                self.promote(block);
            }
        }
    }

    pub fn remove(&mut self, k: u32) -> Option<u32> {
        let block = k >> PAGE_SHIFT;
        let removed = match self.page_of(block) {
            Some(p) => {
                let e = &mut self.pages[p].0[in_page(k)];
                let v = std::mem::replace(e, VACANT);
                (v != VACANT).then_some(!v)
            }
            None => self.rest.remove(k),
        }?;
        if let Some(c) = self.counts.get_mut(&block) {
            *c -= 1;
            let c = *c;
            if c == 0 {
                self.counts.remove(&block);
            }
            if c < DEMOTE {
                self.demote(block);
            }
        }
        Some(removed)
    }

    /// Gives `block` a page and moves its keys there (unless every page index is taken:
    /// then they stay hashed).
    fn promote(&mut self, block: u32) {
        let p = match self.free_pages.pop() {
            Some(p) => p,
            None if self.pages.len() < usize::from(u16::MAX) => {
                self.pages.push(EMPTY_PAGE);
                self.pages.len() - 1
            }
            None => return,
        };
        let first = block << PAGE_SHIFT;
        for i in 0..PAGE_KEYS {
            if let Some(v) = self.rest.remove(first | i) {
                self.pages[p].0[i as usize] = !v;
            }
        }
        if self.top.is_empty() {
            self.top = vec![0; 1 << (32 - PAGE_SHIFT)];
        }
        self.top[block as usize] = u16::try_from(p + 1).unwrap_or(0);
    }

    /// Moves `block`'s keys back to the hashed part and frees its page (if it has one).
    fn demote(&mut self, block: u32) {
        let Some(p) = self.page_of(block) else {
            return;
        };
        self.top[block as usize] = 0;
        let first = block << PAGE_SHIFT;
        let page = &mut self.pages[p].0;
        for (i, e) in (0..PAGE_KEYS).zip(page.iter_mut()) {
            if *e != VACANT {
                self.rest.insert(first | i, !*e);
                *e = VACANT;
            }
        }
        self.free_pages.push(p);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.counts.values().map(|&c| c as usize).sum()
    }

    /// Blocks with a page of their own.
    #[cfg(test)]
    fn pages_in_use(&self) -> usize {
        self.top.iter().filter(|&&p| p != 0).count()
    }
}

/// A `u32 → u32` map by open addressing (linear probing, at most half full) in one array, so
/// that the line a lookup will read is known from the key alone and can be prefetched before
/// the lookup ([`Probed::prefetch`]); a `HashMap` lookup reads a control group and then a
/// bucket, two dependent misses that no prefetch can name.
///
/// Values are stored inverted (`!v`), so that a free bucket is all zeros: a new array comes
/// zeroed from the allocator, untouched until used, and [`Probed::with_capacity`] can size
/// a table for every session up front at no resident cost (a table that doubles while a
/// worker installs a session stalls its packets for the rehash).
#[derive(Debug, Clone, Default)]
pub(crate) struct Probed {
    /// (key, !value); value [`VACANT`]: a free bucket.
    buckets: Vec<(u32, u32)>,
    len: usize,
}

const VACANT: u32 = 0;

impl Probed {
    /// A table that holds `n` keys without growing.
    pub fn with_capacity(n: usize) -> Self {
        let mut m = Self::default();
        if n > 0 {
            m.buckets = vec![(0, VACANT); (n * 2).next_power_of_two().max(16)];
        }
        m
    }

    #[inline(always)]
    fn home(&self, k: u32) -> usize {
        // Fibonacci hashing: consecutive keys (TEIDs, addresses from a pool) spread out.
        let h = u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        usize::try_from(h).unwrap_or(0) & (self.buckets.len().wrapping_sub(1))
    }

    #[inline]
    pub fn get(&self, k: u32) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let mut i = self.home(k);
        loop {
            let &(key, v) = self.buckets.get(i)?;
            if v == VACANT {
                return None;
            }
            if key == k {
                return Some(!v);
            }
            i = (i + 1) & mask;
        }
    }

    /// Prefetches into L2 the bucket a lookup of `k` starts at.
    #[inline(always)]
    pub fn prefetch(&self, k: u32) {
        if !self.buckets.is_empty() {
            upf_prefetch::l2(self.buckets.as_slice(), self.home(k));
        }
    }

    /// Inserts or replaces; `v` must not be `u32::MAX`. Whether `k` is new.
    pub fn insert(&mut self, k: u32, v: u32) -> bool {
        debug_assert!(v != u32::MAX);
        let v = !v;
        if (self.len + 1) * 2 > self.buckets.len() {
            let n = (self.buckets.len() * 2).max(16);
            let old = std::mem::replace(&mut self.buckets, vec![(0, VACANT); n]);
            self.len = 0;
            for (key, val) in old {
                if val != VACANT {
                    self.insert(key, !val);
                }
            }
        }
        let mask = self.buckets.len() - 1;
        let mut i = self.home(k);
        loop {
            let b = &mut self.buckets[i];
            if b.1 == VACANT {
                *b = (k, v);
                self.len += 1;
                return true;
            }
            if b.0 == k {
                b.1 = v;
                return false;
            }
            i = (i + 1) & mask;
        }
    }

    pub fn remove(&mut self, k: u32) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let mut i = self.home(k);
        loop {
            let (key, v) = self.buckets[i];
            if v == VACANT {
                return None;
            }
            if key == k {
                break;
            }
            i = (i + 1) & mask;
        }
        let removed = self.buckets[i].1;
        self.buckets[i].1 = VACANT;
        self.len -= 1;
        // Backward-shift deletion: later entries of the run move into the hole unless their
        // home lies between the hole and where they are.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let (key, v) = self.buckets[j];
            if v == VACANT {
                break;
            }
            let from_home = j.wrapping_sub(self.home(key)) & mask;
            let from_hole = j.wrapping_sub(i) & mask;
            if from_home >= from_hole {
                self.buckets[i] = (key, v);
                self.buckets[j].1 = VACANT;
                i = j;
            }
        }
        Some(!removed)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn probed_agrees_with_hash_map(ops in proptest::collection::vec((0u8..3, 0u32..64, 0u32..1000), 0..400)) {
            // Pre-sized or growing: the same map.
            let mut m = if ops.len() % 2 == 0 { Probed::default() } else { Probed::with_capacity(ops.len()) };
            let mut r = std::collections::HashMap::new();
            for (op, k, v) in ops {
                // Keys spread over a few clusters, so runs form and wrap.
                let k = k.wrapping_mul(0x0100_0001) ^ (k & 3);
                match op {
                    0 => prop_assert_eq!(m.insert(k, v), r.insert(k, v).is_none()),
                    1 => prop_assert_eq!(m.remove(k), r.remove(&k)),
                    _ => prop_assert_eq!(m.get(k), r.get(&k).copied()),
                }
                prop_assert_eq!(m.len(), r.len());
            }
            for (k, v) in &r {
                prop_assert_eq!(m.get(*k), Some(*v));
            }
        }

        /// Keys from three blocks, dense enough that blocks get pages and give them back as
        /// keys come and go.
        #[test]
        fn int_map_agrees_with_hash_map(
            ops in proptest::collection::vec((0u8..4, 0u32..3, 0u32..400, 0u32..1000), 0..3000),
            presized in any::<bool>(),
        ) {
            let mut m = if presized { IntMap::with_capacity(300) } else { IntMap::default() };
            let mut r = std::collections::HashMap::new();
            for (op, block, low, v) in ops {
                // Block 2 is the last of the key space.
                let k = [0x1000_0000, 0x0a00_1000, 0xffff_f000][block as usize] + low * 7;
                match op {
                    0 | 1 => {
                        m.insert(k, v);
                        r.insert(k, v);
                    }
                    2 => prop_assert_eq!(m.remove(k), r.remove(&k)),
                    _ => prop_assert_eq!(m.get(k), r.get(&k).copied()),
                }
                prop_assert_eq!(m.len(), r.len());
            }
            for (k, v) in &r {
                prop_assert_eq!(m.get(*k), Some(*v));
            }
            // Whatever went in and out, a block with a page holds at least DEMOTE keys.
            for b in [0x1000_0000u32, 0x0a00_1000, 0xffff_f000].map(|k| k >> PAGE_SHIFT) {
                let n = r.keys().filter(|&&k| k >> PAGE_SHIFT == b).count();
                if m.page_of(b).is_some() {
                    prop_assert!(n >= DEMOTE as usize, "{n}");
                }
            }
        }
    }

    #[test]
    fn dense_keys_take_pages_and_give_them_back() {
        let mut m = IntMap::with_capacity(16384);
        for i in 0..12000u32 {
            m.insert(0x1000_0000 + i, i);
        }
        assert_eq!(m.pages_in_use(), 3);
        assert_eq!(m.rest.len(), 0);
        // A sparse key beside them is hashed.
        m.insert(7, 70);
        assert_eq!(m.rest.len(), 1);
        assert_eq!(
            (
                m.get(0x1000_0000 + 11999),
                m.get(7),
                m.get(0x1000_0000 + 12000)
            ),
            (Some(11999), Some(70), None)
        );
        for i in 0..12000u32 {
            assert_eq!(m.remove(0x1000_0000 + i), Some(i));
        }
        assert_eq!((m.pages_in_use(), m.free_pages.len(), m.len()), (0, 3, 1));
        // Freed pages are taken again, clean.
        for i in 0..300u32 {
            m.insert(0x2000_0000 + i, i);
        }
        assert_eq!((m.pages_in_use(), m.free_pages.len()), (1, 2));
        assert_eq!(m.get(0x2000_0000 + 300), None);
        assert_eq!(m.get(0x2000_0000 + 299), Some(299));
    }
}
