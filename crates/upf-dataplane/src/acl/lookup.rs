//! What a check reads: compiled rules, hash tables of them, and the tables of each pair of
//! IP versions.

use super::{AclAction, AclStats};
use crate::flow::Flow;

/// What a rule reads of a packet besides its addresses.
#[derive(Debug, Clone, Copy)]
pub(super) struct L4 {
    pub(super) proto: u8,
    pub(super) src_port: u16,
    pub(super) dst_port: u16,
}

impl L4 {
    #[inline(always)]
    pub(super) fn of(f: &Flow) -> Self {
        Self {
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
        }
    }
}

/// Protocol and ports in one word, the layout of a table's `meta_mask`.
#[inline(always)]
pub(super) fn meta(proto: u8, src_port: u16, dst_port: u16) -> u64 {
    u64::from(proto) | u64::from(src_port) << 8 | u64::from(dst_port) << 24
}
pub(super) const META_PROTO: u64 = 0xff;
pub(super) const META_SPORT: u64 = 0xffff << 8;
pub(super) const META_DPORT: u64 = 0xffff << 24;

/// Address bits at a table's width: tables for IPv4-to-IPv4 flows keep 32 bits (32-byte
/// entries), tables with an IPv6 side keep 128 (80-byte entries).
pub(super) trait Word:
    Copy
    + Eq
    + core::ops::BitAnd<Output = Self>
    + core::ops::BitOr<Output = Self>
    + core::ops::BitXor<Output = Self>
    + core::fmt::Debug
{
    const NARROW: bool;
    fn of(bits: u128) -> Self;
    /// The mask of a `len`-bit prefix of an address `width` bits wide, in [`Addr`]'s layout.
    fn prefix(len: u8, width: u32) -> Self;
    /// Source and destination in one word for the hash.
    fn fold(src: Self, dst: Self) -> u64;
    /// Zero exactly when `self` is.
    fn any_bits(self) -> u64;
    /// The top 16 bits of an IPv4 address (0 for wide words, which have no reach map).
    fn top16(self) -> usize;
}

impl Word for u32 {
    const NARROW: bool = true;
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // IPv4 lives in the low 32 bits
    fn of(bits: u128) -> Self {
        bits as u32
    }
    #[inline(always)]
    fn prefix(len: u8, _: u32) -> Self {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }
    /// Without loss.
    #[inline(always)]
    fn fold(src: Self, dst: Self) -> u64 {
        u64::from(src) | u64::from(dst) << 32
    }
    #[inline(always)]
    fn any_bits(self) -> u64 {
        u64::from(self)
    }
    #[inline(always)]
    fn top16(self) -> usize {
        (self >> 16) as usize
    }
}

impl Word for u128 {
    const NARROW: bool = false;
    #[inline(always)]
    fn of(bits: u128) -> Self {
        bits
    }
    #[inline(always)]
    fn prefix(len: u8, width: u32) -> Self {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0) >> (128 - width)
    }
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // folding on purpose
    fn fold(src: Self, dst: Self) -> u64 {
        let f = |a: u128| (a as u64) ^ ((a >> 64) as u64).rotate_left(17);
        f(src) ^ f(dst).rotate_left(32)
    }
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // both halves kept
    fn any_bits(self) -> u64 {
        (self as u64) | (self >> 64) as u64
    }
    fn top16(self) -> usize {
        0
    }
}

/// Hashes a folded, masked key: the 64×64→128 multiply folded onto itself spreads every input
/// bit into the top bits, which pick the slot.
#[inline(always)]
pub(super) fn key_hash(x: u64, meta: u64) -> u64 {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let p = u128::from(x ^ K0) * u128::from(meta ^ K1);
    #[allow(clippy::cast_possible_truncation)]
    let h = (p as u64) ^ ((p >> 64) as u64);
    h
}

pub(super) const DENY: u8 = 1;
/// The last rule of its slot's list.
pub(super) const LAST: u8 = 2;

/// The index of no rule: it never beats a match.
pub(super) const NEVER: u32 = u32::MAX;

/// A compiled rule: 32 bytes for IPv4 (two per cache line), 80 with IPv6.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<W> {
    pub(super) src_net: W,
    pub(super) src_mask: W,
    pub(super) dst_net: W,
    pub(super) dst_mask: W,
    /// Index in the rule list: lower wins.
    pub(super) idx: u32,
    pub(super) sport_lo: u16,
    pub(super) sport_span: u16,
    pub(super) dport_lo: u16,
    pub(super) dport_span: u16,
    pub(super) proto: u8,
    pub(super) proto_mask: u8,
    pub(super) flags: u8,
}

impl<W: Word> Entry<W> {
    /// Every field compared without a branch: the differences are or-ed into one word
    /// (comparisons joined with `&` still become a branch each, and whether a packet
    /// matches a candidate is what a predictor cannot learn).
    #[inline(always)]
    pub(super) fn matches(&self, src: W, dst: W, l4: L4) -> bool {
        let addr = ((src & self.src_mask) ^ self.src_net) | ((dst & self.dst_mask) ^ self.dst_net);
        let proto = (l4.proto & self.proto_mask) ^ self.proto;
        let sport = l4.src_port.wrapping_sub(self.sport_lo) > self.sport_span;
        let dport = l4.dst_port.wrapping_sub(self.dport_lo) > self.dport_span;
        addr.any_bits() | u64::from(proto) | u64::from(sport) | u64::from(dport) == 0
    }
}

/// One hash table: the key is the flow's fields under the masks. A slot names the first rule
/// of its list in `entries`; the list runs to the rule flagged [`LAST`], in rule order.
/// Several keys that land in one slot share its list. Entry 0 matches nothing and serves every
/// empty slot.
#[derive(Debug, Clone)]
pub(super) struct Table<W> {
    /// The lowest rule index in the table: nothing here can beat a match below it.
    pub(super) min: u32,
    pub(super) src_mask: W,
    pub(super) dst_mask: W,
    pub(super) meta_mask: u64,
    /// 64 − log2(slots); at least 33, so a slot number fits 31 bits.
    pub(super) shift: u32,
    pub(super) slots: Box<[u32]>,
    pub(super) entries: Box<[Entry<W>]>,
}

impl<W: Word> Table<W> {
    /// Where the list of the flow's key starts (0 if there is none).
    #[inline(always)]
    pub(super) fn probe(&self, src: W, dst: W, meta: u64) -> usize {
        let h = key_hash(
            W::fold(src & self.src_mask, dst & self.dst_mask),
            meta & self.meta_mask,
        );
        #[allow(clippy::cast_possible_truncation)] // `shift` ≥ 33
        let slot = (h >> self.shift) as usize;
        self.slots.get(slot).map_or(0, |&i| i as usize)
    }

    pub(super) fn bytes(&self) -> usize {
        size_of_val(&*self.slots) + size_of_val(&*self.entries) + size_of::<Self>()
    }

    /// The longest list.
    pub(super) fn longest(&self) -> usize {
        let lists = self.entries.split_inclusive(|e| e.flags & LAST != 0);
        lists.map(<[_]>::len).max().unwrap_or(0)
    }
}

/// The tables for one pair of (source, destination) IP versions, by ascending `min`.
#[derive(Debug, Clone)]
pub(super) struct Family<W> {
    pub(super) tables: Box<[Table<W>]>,
    /// IPv4 only: bit b set when some rule's destination reaches into the /16 `b`, so that
    /// a packet to a /16 no rule names skips the tables (an ACL of the operator's own
    /// prefixes passes most traffic this way); empty when every /16 is reached.
    pub(super) reach: Box<[u64]>,
}

impl<W: Word> Family<W> {
    #[inline(always)]
    pub(super) fn lookup(&self, src: W, dst: W, l4: L4, default: AclAction) -> AclAction {
        if !self.reach.is_empty() {
            let b = dst.top16();
            if self
                .reach
                .get(b / 64)
                .is_some_and(|w| w >> (b % 64) & 1 == 0)
            {
                return default;
            }
        }
        let m = meta(l4.proto, l4.src_port, l4.dst_port);
        let mut best = NEVER;
        let mut flags = 0;
        for t in self.tables.iter() {
            // Tables are sorted by `min`: none from here on holds a rule before `best`.
            if t.min >= best {
                break;
            }
            let start = t.probe(src, dst, m);
            let Some(e) = t.entries.get(start) else {
                continue;
            };
            // The first rule of the list without a branch: most lists have one, and the
            // outcome of each check is what a predictor cannot learn.
            let hit = e.matches(src, dst, l4) & (e.idx < best);
            best = if hit { e.idx } else { best };
            flags = if hit { e.flags } else { flags };
            if hit | (e.flags & LAST != 0) {
                continue;
            }
            for e in t.entries.get(start + 1..).unwrap_or_default() {
                // A list is in rule order: past `best`, nothing in it can win.
                if e.idx >= best {
                    break;
                }
                if e.matches(src, dst, l4) {
                    best = e.idx;
                    flags = e.flags;
                    break;
                }
                if e.flags & LAST != 0 {
                    break;
                }
            }
        }
        if best == NEVER {
            default
        } else if flags & DENY != 0 {
            AclAction::Deny
        } else {
            AclAction::Permit
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The /16s the rules' destinations reach ([`Family::reach`]), for IPv4 destinations.
    pub(super) fn with_reach(mut self) -> Self {
        if !W::NARROW {
            return self;
        }
        let mut reach = vec![0u64; 1 << 10];
        let mut set = |b: usize| {
            if let Some(w) = reach.get_mut(b / 64) {
                *w |= 1 << (b % 64);
            }
        };
        // Entry 0 of each table matches nothing.
        for e in self.tables.iter().flat_map(|t| t.entries.iter().skip(1)) {
            let (net, mask) = (e.dst_net.top16(), e.dst_mask.top16());
            let free = !mask & 0xffff;
            if (free + 1).is_power_of_two() {
                // A prefix: the /16s from its network to its last address.
                (net & mask..=(net & mask) | free).for_each(&mut set);
            } else {
                (0..1 << 16).for_each(&mut set);
            }
        }
        self.reach = if reach.iter().all(|&w| w == u64::MAX) {
            Box::default()
        } else {
            reach.into_boxed_slice()
        };
        self
    }

    pub(super) fn add_stats(&self, s: &mut AclStats) {
        s.tables += self.tables.len();
        s.max_tables = s.max_tables.max(self.tables.len());
        for t in self.tables.iter() {
            s.entries += t.entries.len() - 1;
            s.bytes += t.bytes();
            s.max_bucket = s.max_bucket.max(t.longest());
        }
    }
}

/// Tables by the IP versions of (source, destination): an `any` address is in both.
#[derive(Debug, Clone)]
pub(super) struct Families {
    pub(super) v4: Family<u32>,
    pub(super) v6: Family<u128>,
    pub(super) v4_v6: Family<u128>,
    pub(super) v6_v4: Family<u128>,
}
