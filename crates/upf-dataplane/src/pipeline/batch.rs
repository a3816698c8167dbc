//! A batch: every packet's session looked up first, in loops of independent lookups, the
//! lines each packet will read prefetched ahead of it, then each packet handled in turn.

use super::{Output, Pipeline};
use crate::flow::Addr;
use crate::hot::HOT_RUN;
use std::time::{Duration, Instant};
use upf_packet::{Packet, Port};
use upf_prefetch::l1 as prefetch_index;

/// No session found by [`Pipeline::slot_hint`].
pub(super) const NO_HINT: u32 = u32::MAX;

/// In a batch's lookup keys ([`lookup_key`]): the key is an N6 packet's IPv4 destination,
/// not a TEID (its network instance in bits [`KEY_INSTANCE`]…+8).
const KEY_UE: u64 = 1 << 32;
const KEY_INSTANCE: u32 = 40;
/// No key at fixed offsets: the packet is looked up in full when processed.
const NO_KEY: u64 = 1 << 33;

/// Set in a hint for a packet looked up by UE address (the IP PDRs' half of a hot record).
const HINT_IP: u32 = 1 << 31;
/// Set in a hint, while some session is cold, for a packet of a cold session: what the
/// processing loop prefetches ahead for it, known without reading per-slot state there.
const HINT_COLD: u32 = 1 << 30;
/// The slot in a hint.
const HINT_SLOT: u32 = HINT_COLD - 1;

/// How many packets ahead the lines of a hot record are prefetched.
const HOT_AHEAD: usize = 8;

/// How many packets ahead the first lines of an overflow run are prefetched: the run's place
/// is read from the record's shape (its keys line was prefetched with the batch's lookups).
const RUN_AHEAD: usize = 4;

/// Shapes up to which they stay in cache (~960 octets each) without being prefetched;
/// past them, a packet's shape lines are prefetched with its record's.
const SHARED_SHAPES: usize = 64;

/// The lines of an overflow run prefetched: a half of 16 filters scans no more.
const RUN_PREFETCH_LINES: usize = 8;

/// A packet's lookup key from fixed offsets (an outer IPv4 header without options): the
/// TEID of a GTP-U packet, or with [`KEY_UE`] the destination of an IPv4 N6 packet and its
/// N6's network instance; [`NO_KEY`] for anything else, which the full parse looks up.
#[inline(always)]
fn lookup_key(port: Port, instance: u8, d: &[u8]) -> u64 {
    match port {
        Port::N3 | Port::N9 => match d.get(..36) {
            Some(h) if h[0] == 0x45 => u64::from(u32::from_be_bytes([h[32], h[33], h[34], h[35]])),
            _ => NO_KEY,
        },
        Port::N6 => match d.get(..20) {
            Some(h) if h[0] >> 4 == 4 => {
                KEY_UE
                    | (u64::from(instance) << KEY_INSTANCE)
                    | u64::from(u32::from_be_bytes([h[16], h[17], h[18], h[19]]))
            }
            _ => NO_KEY,
        },
    }
}

/// What a batch prefetches besides hot records: shapes' lines (when too many to stay in
/// cache), overflow runs, cold sessions (when the batch has packets of any).
#[derive(Clone, Copy)]
struct Extra {
    shapes: bool,
    runs: bool,
    cold: bool,
}

/// The TEID or address of a lookup key.
#[allow(clippy::cast_possible_truncation)] // the low 32 bits are the value
const fn key_value(k: u64) -> u32 {
    k as u32
}

/// The network instance of a [`KEY_UE`] lookup key.
#[allow(clippy::cast_possible_truncation)] // its 8 bits
const fn key_instance(k: u64) -> u8 {
    (k >> KEY_INSTANCE) as u8
}

impl Pipeline {
    /// Runs `rx` to completion; forwarded packets go to `out.tx` with their egress port set.
    pub fn process(&mut self, now: Instant, rx: &mut Vec<Packet>, out: &mut Output) {
        self.clock_ns = self.clock(now);
        self.hot_ok = self.epoch.checked_add(Duration::from_nanos(self.clock_ns)) == Some(now);
        for p in self.pending.drain(..) {
            // Counted as created when sent, not when queued: in between, an End Marker is
            // neither sent nor buffered and `balanced()` would not hold.
            self.counters.created += 1;
            self.counters.tx(p.port(), p.len());
            out.tx.push(p);
        }
        while let Some(p) = self.requeue.pop_front() {
            self.counters.buffered -= 1;
            self.buffered_bytes -= p.len();
            if let Some(p) = self.handle(now, p, NO_HINT, out) {
                out.tx.push(p);
            }
        }
        self.budget_room();
        // Every packet's session is looked up first, in loops of independent lookups whose
        // cache misses overlap; the sessions' rules are left to the processing loop (loaded
        // the same way, they cost more than the overlap saves). First the table line of every
        // packet of the batch, then the lookups: at 1M sessions those lines (4 MiB a table)
        // come from DRAM, further off than a prefetch a few packets ahead reaches. Into L2
        // only, here and below: into L1, a batch of misses would queue on its few miss
        // buffers, a cost even when the records stay in cache.
        // Each packet's key is read once, here, where its octets are already being loaded;
        // the lookups below read only the keys. Received packets are counted here too.
        // (Both passes `extend` from the batch's exact length: one capacity check a batch.)
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend(rx.iter().map(|p| {
            let (port, d) = (p.port(), p.data());
            self.counters.rx(port, d.len());
            let k = lookup_key(port, p.instance(), d);
            if k & KEY_UE != 0 {
                self.ue.prefetch_v4(key_instance(k), key_value(k));
            } else if k != NO_KEY {
                self.teids.prefetch(key_value(k));
            }
            k
        }));
        // What this batch prefetches besides hot records, fixed for the batch: packets do
        // not install sessions or shapes.
        let mut extra = Extra {
            shapes: self.shapes.live() > SHARED_SHAPES,
            runs: self.arena.live() != 0,
            cold: self.cold != 0,
        };
        let mut cold_packets = 0usize;
        let mut hints = std::mem::take(&mut self.hints);
        hints.clear();
        hints.extend(keys.iter().map(|&k| {
            let mut h = self.slot_hint(k);
            if h != NO_HINT {
                let slot = (h & HINT_SLOT) as usize;
                if extra.runs {
                    upf_prefetch::l2(&self.kinds, slot);
                }
                if extra.cold
                    && self
                        .cold_bits
                        .get(slot / 64)
                        .is_some_and(|w| w & (1 << (slot % 64)) != 0)
                {
                    h |= HINT_COLD;
                    cold_packets += 1;
                }
                // The record's first line now, where its page walk (a TLB miss per packet
                // at 1M sessions, nested under the hypervisor's) overlaps those of the
                // neighbouring lookups; issued HOT_AHEAD packets ahead in the processing
                // loop, each walk would stall that loop on its own.
                if let Some(r) = self.hot.get(slot) {
                    upf_prefetch::l2_ref(&r.keys);
                }
            }
            h
        }));
        self.keys = keys;
        // Whether a packet of this batch is of a cold session, not whether any session is:
        // one idle UE's buffering FAR that no packet has reached would otherwise make every
        // packet look ahead for cold ones, which cost the others 7 % at 100k sessions.
        extra.cold = cold_packets != 0;
        // Shapes too many to stay in cache: each packet's shape head now, its page walk
        // overlapped with the others' as the records' were (from the keys lines prefetched
        // above, a batch ago for the first of them); issued HOT_AHEAD packets ahead, each walk
        // would stall the loop on its own.
        if extra.shapes {
            for &h in hints.iter().filter(|&&h| h != NO_HINT) {
                if let Some(r) = self
                    .hot
                    .get((h & HINT_SLOT) as usize)
                    .filter(|r| r.keys.serves)
                {
                    let half = usize::from(h & HINT_IP != 0);
                    upf_prefetch::l2_ref(&self.shapes.get(r.keys.shape).halves[half].head);
                }
            }
        }
        // The first packets' lines (the loop below prefetches HOT_AHEAD packets on).
        for h in hints.iter().take(HOT_AHEAD) {
            self.prefetch_hot(*h, extra.shapes);
        }
        for (i, p) in rx.drain(..).enumerate() {
            self.prefetch_ahead(&hints, i, extra);
            // The packet comes back in registers and is stored once into `out.tx` here: a
            // push inside `handle` would read it back from the stack whole, right after it
            // was written there field by field, and stall on the store forwarding.
            if let Some(p) = self.handle(now, p, hints[i], out) {
                out.tx.push(p);
            }
        }
        self.hints = hints;
        while let Some(slot) = self.rehot.pop() {
            self.sync_slot(slot);
            self.build_hot(slot);
        }
        if self.over_budget.len() > self.slots.len() {
            self.over_budget.sort_unstable();
            self.over_budget.dedup();
        }
    }

    /// When the buffer budget is back at its low-water mark (7/8), FARs refused for it take
    /// the general path again and buffer. Below the budget rather than at it: otherwise
    /// every freed packet would rebuild them all, to be refused again by the next packet.
    fn budget_room(&mut self) {
        let low_water = self.cfg.buffer_bytes - self.cfg.buffer_bytes / 8;
        if self.over_budget.is_empty() || self.buffered_bytes > low_water {
            return;
        }
        for slot in std::mem::take(&mut self.over_budget) {
            let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let mut refused = false;
            for f in s.fars.iter_mut().filter(|f| f.over_budget) {
                f.over_budget = false;
                refused = true;
            }
            if refused {
                self.sync_slot(slot);
                self.build_hot(slot);
            }
        }
    }

    /// Prefetches the lines of a hot record that the packet with hint `h` will read.
    #[inline(always)]
    fn prefetch_hot(&self, h: u32, shapes: bool) {
        let slot = (h & HINT_SLOT) as usize;
        let half = usize::from(h & HINT_IP != 0);
        // Whatever the slot holds: a cold or empty slot's lines are prefetched for nothing,
        // which costs less than reading for every packet what the slot holds.
        if let Some(r) = self.hot.get(slot) {
            r.prefetch(half);
            // The keys line, read here, was prefetched when the batch was looked up.
            if shapes && r.keys.serves {
                self.shapes.get(r.keys.shape).halves[half].prefetch();
            }
        }
    }

    /// Whether `half` of `slot` keeps its filters in an overflow run.
    #[inline(always)]
    fn has_run(&self, slot: usize, half: usize) -> bool {
        self.kinds.get(slot).is_some_and(|k| k[half] == HOT_RUN)
    }

    /// Prefetches the first lines of the overflow run (if any) that the packet with hint `h`
    /// will read.
    #[inline(always)]
    fn prefetch_run(&self, h: u32) {
        let half = usize::from(h & HINT_IP != 0);
        if self.has_run((h & HINT_SLOT) as usize, half) {
            let run = self.run(h & HINT_SLOT, half);
            for k in 0..run.len().min(RUN_PREFETCH_LINES) {
                upf_prefetch::l2(run, k);
            }
        }
    }

    /// The session a packet with lookup key `k` probably belongs to, as a hint: its slot,
    /// with [`HINT_IP`] when found by UE address; [`NO_HINT`] if none.
    #[inline(always)]
    fn slot_hint(&self, k: u64) -> u32 {
        let slot = if k & KEY_UE != 0 {
            self.ue
                .lookup(key_instance(k), Addr::v4(key_value(k).into()))
                .filter(|&s| s <= HINT_SLOT)
                .map(|s| s | HINT_IP)
        } else if k != NO_KEY {
            self.teids.get(key_value(k)).filter(|&s| s <= HINT_SLOT)
        } else {
            None
        };
        slot.unwrap_or(NO_HINT)
    }

    /// Prefetches (not loads: a load would stall retirement) what the packets after the `i`th
    /// will read. A hot session's lines are known from its slot: they are prefetched in one
    /// step, [`HOT_AHEAD`] packets ahead. A cold session's are reached one pointer level per
    /// step, each step's addresses known from lines the previous step fetched: the session
    /// record 16 ahead; its rule lists 12 ahead; the fields of its rules 8 ahead; its SDF
    /// filters and FAR targets 4 ahead. (Not further: the lines would start to leave L1
    /// before use.)
    #[inline(always)]
    fn prefetch_ahead(&self, hints: &[u32], i: usize, extra: Extra) {
        if let Some(&h) = hints.get(i + HOT_AHEAD) {
            self.prefetch_hot(h, extra.shapes);
        }
        if extra.runs {
            if let Some(&h) = hints.get(i + RUN_AHEAD) {
                self.prefetch_run(h);
            }
        }
        if !extra.cold {
            return;
        }
        let cold = |h: u32| h != NO_HINT && h & HINT_COLD != 0;
        if let Some(&h) = hints.get(i + 16).filter(|&&h| cold(h)) {
            prefetch_index(&self.slots, (h & HINT_SLOT) as usize);
        }
        for (ahead, step) in [(12, 2u8), (8, 3), (4, 4)] {
            if let Some(Some(s)) = hints
                .get(i + ahead)
                .filter(|&&h| cold(h))
                .and_then(|&h| self.slots.get((h & HINT_SLOT) as usize))
            {
                match step {
                    2 => s.prefetch_lists(),
                    3 => s.prefetch_rules(),
                    _ => s.prefetch_filters(),
                }
            }
        }
    }

    /// `hint`: the slot [`Pipeline::slot_hint`] found, or [`NO_HINT`]. Returns the packet
    /// to send (counted as sent), if any.
    fn handle(&mut self, now: Instant, p: Packet, hint: u32, out: &mut Output) -> Option<Packet> {
        let hint = if hint == NO_HINT {
            hint
        } else {
            hint & HINT_SLOT
        };
        match p.port() {
            Port::N3 | Port::N9 => self.gtp(now, p, hint, out),
            Port::N6 => self.n6(now, p, hint, out),
        }
    }
}
