//! The hot path: sessions served from their hot record and shape ([`crate::hot`]), and
//! the upkeep of those records.

use super::steps::{admit, forward, psc_octet, take_packets, write_v4, Is, Mark, Rules, Sink};
use super::{drop_to, Output, Pipeline};
use crate::counters::DropReason;
use crate::hot::{Fills, Half, Hot, HotPdr, HotUrr, Keys, COLD, EMPTY, HOT};
use crate::hot::{FAR_BUFFER_FULL, FAR_ENCAP, FAR_FORW, FAR_TARGET, FAR_TO_ACCESS};
use crate::hot::{FROM_UE, GATE_SHUT, STRIP};
use crate::hot::{GBRS, MARK_QFI, MARK_RQI, NONE, PACKET_RATE, QERS, URRS};
use crate::parse::flow_of;
use crate::session::{Compiled, Target};
use std::time::Instant;
use upf_packet::{Packet, Port};

impl Pipeline {
    /// The PDR of a hot session's `half` that the inner packet `ip` matches, the uplink ACL
    /// applied: by the 12-octet IPv4 key when the packet has the common form, else by the
    /// general one (out of line).
    #[inline(always)]
    pub(super) fn classify_hot(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        ip: &[u8],
    ) -> Result<usize, DropReason> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        let Some(f) = crate::fast::flow_v4(ip) else {
            return self.classify_hot_general(slot, half, teid, qfi, ip);
        };
        let i = match h.classify(half, k, teid, qfi, &f) {
            Some(i) => i,
            // A half whose filters are in a run has no PDR the inline loop sees.
            None => self
                .classify_run4(slot, half, teid, qfi, f)
                .ok_or(DropReason::NoMatchingPdr)?,
        };
        admit(h.head.pdrs[i].flags & FROM_UE != 0, || {
            self.cfg.uplink_acl.check4(&f)
        })?;
        Ok(i)
    }

    /// [`Pipeline::classify_hot`] for packets without the common IPv4 form (IPv6, ICMP,
    /// options, later fragments).
    #[cold]
    #[inline(never)]
    fn classify_hot_general(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        ip: &[u8],
    ) -> Result<usize, DropReason> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        let f = flow_of(ip).ok_or(DropReason::MalformedInner)?;
        let i = if h.head.overflows() {
            h.classify_run(self.run(slot, half), k, teid, qfi, &f)
        } else {
            h.classify(half, k, teid, qfi, &f)
        };
        let i = i.ok_or(DropReason::NoMatchingPdr)?;
        admit(h.head.pdrs[i].flags & FROM_UE != 0, || {
            self.cfg.uplink_acl.check(&f)
        })?;
        Ok(i)
    }

    /// The PDR of a hot half whose filters are in an overflow run (none for other halves):
    /// out of line, so that the inline classification stays as it is.
    #[cold]
    #[inline(never)]
    fn classify_run4(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        f: crate::flow::Flow4,
    ) -> Option<usize> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        if !h.head.overflows() {
            return None;
        }
        h.classify_run4(self.run(slot, half), k, teid, qfi, &f)
    }

    /// The filter lines of a hot half's overflow run.
    pub(super) fn run(&self, slot: u32, half: usize) -> &[crate::overflow::Line] {
        let shape = self.shapes.get(self.hot[slot as usize].keys.shape);
        self.arena.lines(shape.runs[half])
    }

    /// Whether packets of `slot` take the hot path. When this batch's clock is not exact, a
    /// hot session is synced and served cold until the batch ends.
    #[inline(always)]
    pub(super) fn is_hot(&mut self, slot: u32) -> bool {
        let hot = self.hot.get(slot as usize).is_some_and(|h| h.keys.serves);
        if hot && !self.hot_ok {
            self.sync_slot(slot);
            self.hot[slot as usize].keys.serves = false;
            self.rehot.push(slot);
            return false;
        }
        hot
    }

    /// Moves what the hot record of `slot` owns into its compiled session.
    pub(crate) fn sync_slot(&mut self, slot: u32) {
        if let (Some(h), Some(Some(s))) = (
            self.hot.get_mut(slot as usize),
            self.slots.get_mut(slot as usize),
        ) {
            h.sync(&self.shapes, s, self.epoch);
        }
    }

    /// Builds the hot record of `slot` anew from its compiled session (which must be synced),
    /// its shape interned.
    pub(crate) fn build_hot(&mut self, slot: u32) {
        let i = slot as usize;
        let was = self.kinds[i][0];
        let built = match &self.slots[i] {
            Some(s) if self.hot_enabled => Hot::build(s),
            _ => None,
        };
        let interned = built.and_then(|b| {
            let kinds = b.kinds();
            let id = self.shapes.intern(b.halves, b.runs, &mut self.arena)?;
            Some((b.record, kinds, id))
        });
        let (h, kind) = match interned {
            Some((mut h, kind, id)) => {
                h.keys.shape = id;
                (h, kind)
            }
            // It does not fit, or no line index is left in the arena (2^32 lines): cold.
            None if self.slots[i].is_some() => (Hot::default(), [COLD; 2]),
            None => (Hot::default(), [EMPTY; 2]),
        };
        // Released after the new one is interned: a rebuild of the same rules keeps its shape.
        if was >= HOT {
            self.shapes.release(self.hot[i].keys.shape, &mut self.arena);
        }
        self.hot[i] = h;
        self.kinds[i] = kind;
        self.cold = self.cold + usize::from(kind[0] == COLD) - usize::from(was == COLD);
        let bit = 1u64 << (i % 64);
        if kind[0] == COLD {
            self.cold_bits[i / 64] |= bit;
        } else {
            self.cold_bits[i / 64] &= !bit;
        }
    }

    /// The FAR, QER and URR lines of a hot session's matched PDR, then out: what
    /// [`Pipeline::apply`] does for the sessions [`crate::hot`] can hold.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn apply_hot(
        &mut self,
        now: Instant,
        slot: u32,
        half: usize,
        pdr_index: usize,
        p: Packet,
        inner: (usize, usize),
        qfi_in: Option<u8>,
        out: &mut Output,
    ) -> Option<Packet> {
        let clock = self.clock_ns;
        let clock1 = clock + 1;
        let ttl = self.cfg.outer_ttl;
        let Self {
            hot,
            shapes,
            slots,
            counters,
            ident,
            ..
        } = self;
        let record = &mut hot[slot as usize];
        record.keys.last = clock1;
        let h = &shapes.get(record.keys.shape).halves[half];
        let pdr = h.head.pdrs[pdr_index];
        if pdr.far_flags & FAR_FORW == 0 {
            let r = if pdr.far_flags & FAR_BUFFER_FULL == 0 {
                DropReason::FarDrop
            } else {
                DropReason::BufferFull
            };
            return drop_to(out, counters, p, r);
        }
        let Hot { keys, fills, urrs } = record;
        let mut rules = HotRules {
            pdr,
            half: h,
            keys,
            fills: &mut fills[half],
            urrs,
            clock1,
            spent: 0,
            slots,
            slot,
        };
        let sink = Sink {
            out,
            counters,
            ident,
            ttl,
            clock,
        };
        let p = forward(&mut rules, p, inner, qfi_in, sink);
        let spent = rules.spent;
        if spent != 0 {
            self.urrs_spent(now, slot, spent);
        }
        p
    }

    /// The URR lines of `slot`'s record (bits of `spent`) whose budget a packet ran out: the
    /// exact check of each, and its report if one fired (out of line: rare).
    #[cold]
    #[inline(never)]
    fn urrs_spent(&mut self, now: Instant, slot: u32, spent: u8) {
        let Self {
            hot,
            shapes,
            slots,
            events,
            epoch,
            ..
        } = self;
        let (Some(record), Some(Some(s))) =
            (hot.get_mut(slot as usize), slots.get_mut(slot as usize))
        else {
            return;
        };
        // Every spent line is checked before any reports, so that each report (and the
        // linked ones) includes this packet, as on the general path.
        let mut fired = crate::usage::Fired::new();
        for u in 0..crate::hot::URRS {
            if spent & (1 << u) == 0 {
                continue;
            }
            let urr = record.urrs[u].urr;
            if let Some(t) = record.check_urr(shapes, s, *epoch, urr) {
                fired.push((usize::from(urr), t));
            }
        }
        if !fired.is_empty() {
            crate::usage::report_fired(&mut s.urrs, &fired, now, s.seid, events);
            record.set_urr_limits(s);
        }
    }
}

/// The rules of a hot session's matched PDR, for [`forward`]: its line in the shape's half,
/// the record's lines it reads and writes. Loops over the few lines a record has take a bit
/// each: unrolled, with constant indices.
struct HotRules<'a> {
    pdr: HotPdr,
    half: &'a Half,
    keys: &'a Keys,
    fills: &'a mut Fills,
    urrs: &'a mut [HotUrr; URRS],
    /// The pipeline's clock + 1, as the URR lines count it.
    clock1: u64,
    /// The URR lines whose budget this packet spent, a bit each.
    spent: u8,
    /// The compiled sessions, and this one's slot: where its packet-rate buckets are.
    slots: &'a mut [Option<Compiled>],
    slot: u32,
}

impl HotRules<'_> {
    /// [`Rules::take_packet`] of a PDR with a packet rate or a shared bucket: the buckets
    /// of its QERs in the compiled session (out of line).
    #[cold]
    #[inline(never)]
    fn take_packet_slow(&mut self, clock: u64, bits: u64) -> Result<(), DropReason> {
        let Some(Some(s)) = self.slots.get_mut(self.slot as usize) else {
            return Err(DropReason::PacketRateExceeded);
        };
        let mut which = [0u16; 2];
        let mut n = 0;
        for &q in &self.pdr.qers {
            if let Some(line) = self.half.qers.get(usize::from(q)).filter(|_| q != NONE) {
                which[n] = u16::from(line.qer);
                n += 1;
            }
        }
        let uplink = self.pdr.flags & FROM_UE != 0;
        take_packets(&mut s.qers, &which[..n], uplink, clock, bits)
    }
}

impl Rules for HotRules<'_> {
    #[inline(always)]
    fn egress(&self) -> Option<(Port, u8)> {
        (self.pdr.far_flags & FAR_TARGET != 0).then_some((self.pdr.port, self.pdr.instance))
    }

    #[inline(always)]
    fn is(&self, what: Is) -> bool {
        match what {
            Is::ToAccess => self.pdr.far_flags & FAR_TO_ACCESS != 0,
            Is::Stripping => self.pdr.flags & STRIP != 0,
            Is::Uplink => self.pdr.flags & FROM_UE != 0,
        }
    }

    #[inline(always)]
    fn gate_shut(&self) -> bool {
        self.pdr.flags & GATE_SHUT != 0
    }

    #[inline(always)]
    fn conforms(&mut self, clock: u64, bits: u64) -> bool {
        let police = self.pdr.police;
        for q in 0..QERS {
            if police & (1 << q) != 0
                && !self.fills.fills[q].conforms(&self.half.rates[q], clock, bits)
            {
                return false;
            }
        }
        true
    }

    #[inline(always)]
    fn exhausted(&self) -> bool {
        let urrs = self.pdr.urrs;
        // A plain loop: `any` over the range is not inlined.
        for u in 0..URRS {
            if urrs & (1 << u) != 0 && self.urrs[u].exhausted {
                return true;
            }
        }
        false
    }

    #[inline(always)]
    fn take_packet(&mut self, clock: u64, bits: u64) -> Result<(), DropReason> {
        if self.pdr.flags & PACKET_RATE == 0 {
            return Ok(());
        }
        self.take_packet_slow(clock, bits)
    }

    #[inline(always)]
    fn charge(&mut self, bits: u64, octets: u64) {
        let police = self.pdr.police;
        for q in 0..QERS {
            if police & (1 << q) != 0 {
                self.fills.fills[q].take(&self.half.rates[q], bits);
            }
        }
        for g in 0..GBRS {
            if self.pdr.gbr & (1 << g) != 0 {
                self.fills.gbr_pending[g] += octets;
            }
        }
    }

    #[inline(always)]
    fn count(&mut self, octets: u64, uplink: bool) {
        let urrs = self.pdr.urrs;
        for (u, line) in self.urrs.iter_mut().enumerate() {
            if urrs & (1 << u) != 0 && !line.count(self.clock1, octets, uplink) {
                self.spent |= 1 << u;
            }
        }
    }

    #[inline(always)]
    fn marks(&self) -> Mark {
        let mark = self.pdr.mark;
        Mark {
            qfi: (mark & MARK_QFI != 0).then_some(mark & 0x3f),
            rqi: mark & MARK_RQI != 0,
            ppi: None,
        }
    }

    #[inline(always)]
    fn dups(&self) -> &[Target] {
        &[]
    }

    #[inline(always)]
    fn encap(&self, p: &mut Packet, ds: usize, de: usize, m: &Mark, _: u8, id: &mut u16) -> bool {
        let far = self.half.fars.get(usize::from(self.pdr.far));
        let Some(far) = far.filter(|_| self.pdr.far_flags & FAR_ENCAP != 0) else {
            p.set_range(ds, de);
            return true;
        };
        let tunnel = Some(self.keys.tunnel(far.tunnel));
        match m.qfi {
            None => write_v4(p, (ds, de), &far.template.without_psc(), 0, tunnel, id),
            Some(q) => {
                let octet = psc_octet(q, m.rqi, self.is(Is::ToAccess));
                write_v4(p, (ds, de), &far.template, octet, tunnel, id)
            }
        }
    }
}
