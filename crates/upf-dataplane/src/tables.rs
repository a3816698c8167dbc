//! The per-worker lookup tables: sessions in a slab, uplink keyed by local TEID, downlink by
//! network instance and UE address (IPv4 exact, IPv6 per prefix length, framed routes
//! longest-prefix first).

use crate::flow::{Addr, Prefix};
use crate::intmap::IntMap;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-fold hash for integer keys: the keys (TEIDs, addresses, SEIDs) are chosen by
/// us or by the SMF, not by packet senders, so flooding resistance buys nothing here, and
/// SipHash would cost more than the rest of the lookup.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldHasher(u64);

impl Hasher for FoldHasher {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    #[inline(always)]
    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        #[allow(clippy::cast_possible_truncation)] // folding the halves
        let folded = (m as u64) ^ ((m >> 64) as u64);
        self.0 = folded;
    }
    #[inline(always)]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v.into());
    }
    #[inline(always)]
    fn write_u128(&mut self, v: u128) {
        let [lo, hi] = [v, v >> 64].map(|h| u64::try_from(h & u128::from(u64::MAX)).unwrap_or(0));
        self.write_u64(lo);
        self.write_u64(hi);
    }
    #[inline(always)]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v.into());
    }
    #[inline(always)]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FoldHasher>>;

/// Downlink lookup by UE address.
#[derive(Debug, Default)]
pub(crate) struct UeTable {
    v4: IntMap,
    /// IPv6 UE prefixes, one map per prefix length, longest first (usually only /64).
    v6: Vec<(u32, u128, FastMap<u128, u32>)>,
    /// Framed routes and other non-host prefixes, longest first.
    routes: Vec<(Prefix, u32)>,
}

impl UeTable {
    /// A table whose IPv4 part holds `n` UEs without growing.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            v4: IntMap::with_capacity(n),
            ..Self::default()
        }
    }

    /// Prefetches what looking up the IPv4 address `a` reads first.
    #[inline(always)]
    pub fn prefetch_v4(&self, a: u32) {
        self.v4.prefetch(a);
    }

    #[inline]
    pub fn lookup(&self, a: Addr) -> Option<u32> {
        let hit = if a.v6 {
            self.v6
                .iter()
                .find_map(|(_, mask, m)| m.get(&(a.bits & mask)).copied())
        } else {
            u32::try_from(a.bits).ok().and_then(|k| self.v4.get(k))
        };
        hit.or_else(|| {
            (!self.routes.is_empty())
                .then(|| self.routes.iter().find(|(p, _)| p.contains(a)).map(|r| r.1))
                .flatten()
        })
    }

    /// The session owning exactly this prefix, if any.
    pub fn owner(&self, p: &Prefix) -> Option<u32> {
        if !p.v6 && p.bits() == 32 {
            return u32::try_from(p.net).ok().and_then(|k| self.v4.get(k));
        }
        if p.v6 && (p.bits() == 64 || p.bits() == 128) {
            return self
                .v6
                .iter()
                .find(|(l, _, _)| *l == p.bits())
                .and_then(|(_, _, m)| m.get(&p.net).copied());
        }
        self.routes.iter().find(|(r, _)| r == p).map(|r| r.1)
    }

    pub fn insert(&mut self, p: Prefix, slot: u32) {
        if !p.v6 && p.bits() == 32 {
            if let Ok(k) = u32::try_from(p.net) {
                self.v4.insert(k, slot);
            }
            return;
        }
        if p.v6 && (p.bits() == 64 || p.bits() == 128) {
            let len = p.bits();
            let i = match self.v6.iter().position(|(l, _, _)| *l == len) {
                Some(i) => i,
                None => {
                    self.v6.push((len, p.mask, FastMap::default()));
                    self.v6.sort_by_key(|e| std::cmp::Reverse(e.0));
                    self.v6.iter().position(|(l, _, _)| *l == len).unwrap_or(0)
                }
            };
            if let Some((_, _, m)) = self.v6.get_mut(i) {
                m.insert(p.net, slot);
            }
            return;
        }
        self.routes.push((p, slot));
        self.routes.sort_by_key(|r| std::cmp::Reverse(r.0.bits()));
    }

    pub fn remove(&mut self, p: &Prefix, slot: u32) {
        if !p.v6 && p.bits() == 32 {
            if let Ok(k) = u32::try_from(p.net) {
                if self.v4.get(k) == Some(slot) {
                    self.v4.remove(k);
                }
            }
            return;
        }
        if p.v6 && (p.bits() == 64 || p.bits() == 128) {
            for (l, _, m) in &mut self.v6 {
                if *l == p.bits() && m.get(&p.net) == Some(&slot) {
                    m.remove(&p.net);
                }
            }
            return;
        }
        self.routes.retain(|(r, s)| !(r == p && *s == slot));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.iter().map(|(_, _, m)| m.len()).sum::<usize>() + self.routes.len()
    }
}

/// Downlink lookup by network instance and UE address: two data networks may give their
/// UEs the same addresses. The default instance's table is the first field, so a UPF
/// without named instances reads what it read before they existed.
#[derive(Debug, Default)]
pub(crate) struct UeTables {
    default: UeTable,
    /// Instance `i` (from 1) at `i - 1`, made when a session first uses it.
    named: Vec<UeTable>,
}

impl UeTables {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            default: UeTable::with_capacity(n),
            named: Vec::new(),
        }
    }

    #[inline(always)]
    pub fn of(&self, instance: u8) -> Option<&UeTable> {
        if instance == 0 {
            Some(&self.default)
        } else {
            self.named.get(usize::from(instance) - 1)
        }
    }

    fn of_mut(&mut self, instance: u8) -> &mut UeTable {
        match usize::from(instance).checked_sub(1) {
            None => &mut self.default,
            Some(i) => {
                if self.named.len() <= i {
                    self.named.resize_with(i + 1, UeTable::default);
                }
                &mut self.named[i]
            }
        }
    }

    #[inline(always)]
    pub fn prefetch_v4(&self, instance: u8, a: u32) {
        if let Some(t) = self.of(instance) {
            t.prefetch_v4(a);
        }
    }

    #[inline]
    pub fn lookup(&self, instance: u8, a: Addr) -> Option<u32> {
        self.of(instance)?.lookup(a)
    }

    pub fn owner(&self, instance: u8, p: &Prefix) -> Option<u32> {
        self.of(instance)?.owner(p)
    }

    pub fn insert(&mut self, instance: u8, p: Prefix, slot: u32) {
        self.of_mut(instance).insert(p, slot);
    }

    pub fn remove(&mut self, instance: u8, p: &Prefix, slot: u32) {
        self.of_mut(instance).remove(p, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pfx(s: &str, len: u8) -> Prefix {
        Prefix::new(s.parse().unwrap(), len).unwrap()
    }

    #[test]
    fn ue_table() {
        let mut t = UeTable::default();
        t.insert(pfx("10.0.0.1", 32), 1);
        t.insert(pfx("2001:db8:1:2::", 64), 2);
        t.insert(pfx("192.168.0.0", 16), 3);
        t.insert(pfx("192.168.7.0", 24), 4);
        let a = |s: &str| Addr::from_ip(s.parse().unwrap());
        assert_eq!(t.lookup(a("10.0.0.1")), Some(1));
        assert_eq!(t.lookup(a("10.0.0.2")), None);
        assert_eq!(t.lookup(a("2001:db8:1:2::99")), Some(2));
        assert_eq!(t.lookup(a("192.168.7.7")), Some(4));
        assert_eq!(t.lookup(a("192.168.8.7")), Some(3));
        assert_eq!(t.owner(&pfx("2001:db8:1:2::", 64)), Some(2));
        t.remove(&pfx("192.168.7.0", 24), 4);
        t.remove(&pfx("10.0.0.1", 32), 9); // not its owner: kept
        assert_eq!(t.lookup(a("192.168.7.7")), Some(3));
        assert_eq!(t.lookup(a("10.0.0.1")), Some(1));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn instances_keep_their_own_addresses() {
        let mut t = UeTables::default();
        let a = Addr::from_ip("10.60.0.1".parse().unwrap());
        t.insert(1, pfx("10.60.0.1", 32), 5);
        t.insert(2, pfx("10.60.0.1", 32), 6);
        assert_eq!(t.lookup(0, a), None);
        assert_eq!(t.lookup(1, a), Some(5));
        assert_eq!(t.lookup(2, a), Some(6));
        assert_eq!(t.lookup(3, a), None);
        t.remove(1, &pfx("10.60.0.1", 32), 5);
        assert_eq!(
            (t.lookup(1, a), t.owner(2, &pfx("10.60.0.1", 32))),
            (None, Some(6))
        );
    }
}
