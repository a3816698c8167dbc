//! Compilation: the rules of one pair of IP versions into the tables a check probes.

use super::lookup::{
    key_hash, meta, Entry, Family, Table, Word, DENY, LAST, META_DPORT, META_PROTO, META_SPORT,
    NEVER,
};
use super::rules::lead_len;
use super::{AclAction, AclRule, Tuning, ANY_PORT};
use crate::flow::Prefix;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A rule on its way into a family's tables.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand<W> {
    entry: Entry<W>,
    /// The longest prefixes within the source and destination masks.
    src_len: u8,
    dst_len: u8,
    /// Bit 0: protocol given; bit 1: one source port; bit 2: one destination port.
    shape: u8,
    meta: u64,
}

/// A table's key: prefix lengths and which of protocol / source port / destination port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spec {
    s: u8,
    d: u8,
    shape: u8,
}

impl Spec {
    /// Whether the key's masks lie within the rule's: then a flow the rule matches has the
    /// rule's key.
    fn fits<W>(&self, c: &Cand<W>) -> bool {
        c.src_len >= self.s && c.dst_len >= self.d && c.shape & self.shape == self.shape
    }

    /// The finest key that every rule of `cs` fits.
    fn common<W>(cs: &[Cand<W>]) -> Self {
        Self {
            s: cs.iter().map(|c| c.src_len).min().unwrap_or(0),
            d: cs.iter().map(|c| c.dst_len).min().unwrap_or(0),
            shape: cs.iter().fold(7, |a, c| a & c.shape),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Masks<W> {
    src: W,
    dst: W,
    meta: u64,
}

pub(super) fn masks<W: Word>(spec: Spec, widths: (u32, u32)) -> Masks<W> {
    let bit = |b: u8, m: u64| if spec.shape & b != 0 { m } else { 0 };
    Masks {
        src: W::prefix(spec.s, widths.0),
        dst: W::prefix(spec.d, widths.1),
        meta: bit(1, META_PROTO) | bit(2, META_SPORT) | bit(4, META_DPORT),
    }
}

/// A rule's key under a table's masks: what a matching flow's fields hash to, given
/// `Spec::fits`.
pub(super) fn cand_key<W: Word>(c: &Cand<W>, m: &Masks<W>) -> u64 {
    key_hash(
        W::fold(c.entry.src_net & m.src, c.entry.dst_net & m.dst),
        c.meta & m.meta,
    )
}

/// The u64 keys are hashes already.
#[derive(Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(super) type Counts = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

/// The rules that can match flows of this version pair, in order, up to one that matches all
/// of them and without a tail of default-action rules (both exact).
pub(super) fn candidates<W: Word>(
    rules: &[AclRule],
    default: AclAction,
    widths: (u32, u32),
) -> Vec<Cand<W>> {
    let mut cands: Vec<Cand<W>> = Vec::new();
    let (src_v6, dst_v6) = (widths.0 == 128, widths.1 == 128);
    // An address side in this family's layout, or `None` when the rule cannot match it.
    let side = |p: Option<Prefix>, v6: bool| -> Option<(u128, u128)> {
        match p {
            None => Some((0, 0)),
            Some(p) if p.v6 != v6 => None,
            // A narrow table reads IPv4 from the low 32 bits: a network with higher bits
            // matches no such address, and higher mask bits only test zeros.
            Some(p) if W::NARROW && p.net >> 32 != 0 => None,
            Some(p) if W::NARROW => Some((p.net, p.mask & u128::from(u32::MAX))),
            Some(p) => Some((p.net, p.mask)),
        }
    };
    for (i, r) in rules.iter().enumerate() {
        if r.src_ports.0 > r.src_ports.1 || r.dst_ports.0 > r.dst_ports.1 {
            continue; // an empty range matches nothing
        }
        let (Some((src_net, src_mask)), Some((dst_net, dst_mask))) =
            (side(r.src, src_v6), side(r.dst, dst_v6))
        else {
            continue;
        };
        let entry = Entry {
            src_net: W::of(src_net),
            src_mask: W::of(src_mask),
            dst_net: W::of(dst_net),
            dst_mask: W::of(dst_mask),
            idx: u32::try_from(i).expect("fewer than 2^32 rules"),
            sport_lo: r.src_ports.0,
            sport_span: r.src_ports.1 - r.src_ports.0,
            dport_lo: r.dst_ports.0,
            dport_span: r.dst_ports.1 - r.dst_ports.0,
            proto: r.proto.unwrap_or(0),
            proto_mask: if r.proto.is_some() { 0xff } else { 0 },
            flags: if r.action == AclAction::Deny { DENY } else { 0 },
        };
        let shape = u8::from(r.proto.is_some())
            | u8::from(r.src_ports.0 == r.src_ports.1) << 1
            | u8::from(r.dst_ports.0 == r.dst_ports.1) << 2;
        // Leading ones: the longest prefix mask within the rule's, whatever the rest.
        let len = |mask: u128, v6: bool| u8::try_from(lead_len(mask, v6)).unwrap_or(0);
        cands.push(Cand {
            entry,
            src_len: len(src_mask, src_v6),
            dst_len: len(dst_mask, dst_v6),
            shape,
            meta: meta(entry.proto, entry.sport_lo, entry.dport_lo),
        });
        let all = src_mask == 0
            && dst_mask == 0
            && r.proto.is_none()
            && r.src_ports == ANY_PORT
            && r.dst_ports == ANY_PORT;
        if all {
            break; // nothing after it is ever reached
        }
    }
    // A tail of default-action rules decides nothing that the default does not.
    while cands
        .last()
        .is_some_and(|c| (c.entry.flags & DENY != 0) == (default == AclAction::Deny))
    {
        cands.pop();
    }
    cands
}

/// A table being filled: its key, and how many rules each key value holds.
pub(super) struct Group<W> {
    spec: Spec,
    masks: Masks<W>,
    cands: Vec<Cand<W>>,
    counts: Counts,
}

impl<W: Word> Group<W> {
    fn new(spec: Spec, widths: (u32, u32)) -> Self {
        Self {
            spec,
            masks: masks(spec, widths),
            cands: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// Moves into the group the rules of `rest` that fit it, at most `cap` per key value.
    fn take(&mut self, rest: &mut Vec<Cand<W>>, cap: usize) {
        rest.retain(|c| {
            if self.spec.fits(c) {
                let n = self.counts.entry(cand_key(c, &self.masks)).or_insert(0);
                if (*n as usize) < cap {
                    *n += 1;
                    self.cands.push(*c);
                    return false;
                }
            }
            true
        });
    }
}

/// Moves each rule of `rest` into the group, among those whose key it fits, where its key
/// value has the fewest rules, if fewer than `cap`.
pub(super) fn place<W: Word>(groups: &mut [Group<W>], rest: &mut Vec<Cand<W>>, cap: usize) {
    rest.retain(|c| {
        let best = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.spec.fits(c))
            .map(|(i, g)| {
                let n = g.counts.get(&cand_key(c, &g.masks)).copied().unwrap_or(0);
                (n, i)
            })
            .min();
        match best {
            Some((n, i)) if (n as usize) < cap => {
                let g = &mut groups[i];
                *g.counts.entry(cand_key(c, &g.masks)).or_insert(0) += 1;
                g.cands.push(*c);
                false
            }
            _ => true,
        }
    });
}

pub(super) fn compile_family<W: Word>(
    rules: &[AclRule],
    default: AclAction,
    src_v6: bool,
    dst_v6: bool,
    tuning: Tuning,
) -> Family<W> {
    let widths = (if src_v6 { 128 } else { 32 }, if dst_v6 { 128 } else { 32 });
    let mut rest = candidates::<W>(rules, default, widths);
    let total = rest.len();
    let mut groups: Vec<Group<W>> = Vec::new();
    // Greedy: the key that holds the most rules (at most `bucket` per key value), again and
    // again, while a table is worth its probe; then the rest where lists stay short.
    while !rest.is_empty() {
        if groups.len() + 1 >= tuning.max_tables {
            place(&mut groups, &mut rest, usize::MAX);
            break;
        }
        let used: Vec<Spec> = groups.iter().map(|g| g.spec).collect();
        let Some((spec, held)) = best_spec(&rest, widths, tuning.bucket, &used) else {
            place(&mut groups, &mut rest, usize::MAX);
            break;
        };
        if groups.is_empty() || held * 1000 >= total * tuning.min_share {
            let mut g = Group::new(spec, widths);
            g.take(&mut rest, tuning.bucket);
            groups.push(g);
            continue;
        }
        let before = rest.len();
        place(&mut groups, &mut rest, 2 * tuning.bucket);
        if rest.len() == before {
            let mut g = Group::new(spec, widths);
            g.take(&mut rest, tuning.bucket);
            groups.push(g);
        }
    }
    // What fits no table: one more, with the finest key all of it fits.
    if !rest.is_empty() {
        let mut g = Group::new(Spec::common(&rest), widths);
        g.take(&mut rest, usize::MAX);
        groups.push(g);
    }
    let mut tables: Vec<Table<W>> = groups
        .into_iter()
        .map(|mut g| {
            g.cands.sort_by_key(|c| c.entry.idx);
            build_table(&g.cands, g.masks, tuning.slots_per_key)
        })
        .collect();
    tables.sort_by_key(|t| t.min);
    Family {
        tables: tables.into_boxed_slice(),
        reach: Box::default(),
    }
}

/// The key shape not in `used` that holds the most of `rest` with at most `bucket` rules per
/// key value, and how many. Shapes are tried by how many rules fit them at all, most first,
/// and the search stops when that bound cannot beat the best found.
pub(super) fn best_spec<W: Word>(
    rest: &[Cand<W>],
    widths: (u32, u32),
    bucket: usize,
    used: &[Spec],
) -> Option<(Spec, usize)> {
    // How many rules have each exact (src_len, dst_len, shape): the bounds come from these.
    let mut groups: HashMap<(u8, u8, u8), usize> = HashMap::new();
    for c in rest {
        *groups.entry((c.src_len, c.dst_len, c.shape)).or_insert(0) += 1;
    }
    let lens = |width: u32, f: fn(&(u8, u8, u8)) -> u8| {
        let mut l: Vec<u8> = groups.keys().map(f).collect();
        l.sort_unstable();
        l.dedup();
        // Beyond 9 lengths, keep the longest length below each step of a grid (and the
        // shortest, which every rule fits): the search stays within ~9 × 9 × 8 shapes.
        if l.len() > 9 {
            let step = if width == 128 { 16 } else { 4 };
            let mut q: Vec<u8> = (0..=8u8)
                .filter_map(|g| l.iter().copied().filter(|&x| x <= g * step).max())
                .collect();
            q.push(l[0]);
            q.sort_unstable();
            q.dedup();
            l = q;
        }
        l
    };
    let (ss, ds) = (lens(widths.0, |g| g.0), lens(widths.1, |g| g.1));
    let mut specs = Vec::new();
    for &s in &ss {
        for &d in &ds {
            for shape in 0..8u8 {
                let spec = Spec { s, d, shape };
                if used.contains(&spec) {
                    continue;
                }
                let bound: usize = groups
                    .iter()
                    .filter(|((gs, gd, gsh), _)| *gs >= s && *gd >= d && gsh & shape == shape)
                    .map(|(_, n)| n)
                    .sum();
                if bound > 0 {
                    specs.push((bound, spec));
                }
            }
        }
    }
    // Most rules first; among equals, the finer key (shorter lists).
    specs.sort_by_key(|(bound, spec)| {
        (
            core::cmp::Reverse(*bound),
            core::cmp::Reverse(
                u32::from(spec.s) + u32::from(spec.d) + 32 * spec.shape.count_ones(),
            ),
        )
    });
    let mut best: Option<(Spec, usize)> = None;
    let mut counts = Counts::default();
    for (bound, spec) in specs {
        if best.is_some_and(|(_, held)| bound <= held) {
            break;
        }
        let m = masks::<W>(spec, widths);
        counts.clear();
        let mut held = 0;
        for c in rest.iter().filter(|c| spec.fits(c)) {
            let n = counts.entry(cand_key(c, &m)).or_insert(0);
            if (*n as usize) < bucket {
                *n += 1;
                held += 1;
            }
        }
        if best.is_none_or(|(_, h)| held > h) {
            best = Some((spec, held));
        }
    }
    best
}

/// `cs` in rule order, non-empty.
pub(super) fn build_table<W: Word>(cs: &[Cand<W>], m: Masks<W>, slots_per_key: usize) -> Table<W> {
    let hashes: Vec<u64> = cs.iter().map(|c| cand_key(c, &m)).collect();
    let mut keys = hashes.clone();
    keys.sort_unstable();
    keys.dedup();
    let bits = (slots_per_key * keys.len())
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, 31);
    let shift = 64 - bits;
    #[allow(clippy::cast_possible_truncation)] // shift ≥ 33
    let slot_of = |h: u64| (h >> shift) as usize;
    // Rules by slot, each slot in rule order (the sort is stable).
    let mut order: Vec<(usize, &Cand<W>)> = hashes.iter().map(|&h| slot_of(h)).zip(cs).collect();
    order.sort_by_key(|(slot, _)| *slot);
    let mut slots = vec![0; 1usize << bits];
    // Entry 0: the list of every empty slot, matching nothing.
    let mut entries = vec![Entry {
        idx: NEVER,
        flags: LAST,
        ..cs[0].entry
    }];
    for run in order.chunk_by(|a, b| a.0 == b.0) {
        slots[run[0].0] = u32::try_from(entries.len()).expect("fewer than 2^32 rules");
        entries.extend(run.iter().map(|(_, c)| c.entry));
        if let Some(last) = entries.last_mut() {
            last.flags |= LAST;
        }
    }
    Table {
        min: cs[0].entry.idx,
        src_mask: m.src,
        dst_mask: m.dst,
        meta_mask: m.meta,
        shift,
        slots: slots.into_boxed_slice(),
        entries: entries.into_boxed_slice(),
    }
}
