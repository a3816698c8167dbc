//! The hot path: sessions served from their hot record and shape ([`crate::hot`]), and
//! the upkeep of those records.

use super::{drop_to, Output, Pipeline};
use crate::acl::AclAction;
use crate::counters::DropReason;
use crate::hot::{Hot, COLD, EMPTY, HOT};
use crate::parse::{flow_of, route_hop};
use std::time::Instant;
use upf_packet::{Packet, Port};
use upf_rules::DatapathEvent;
use upf_wire::ipv6;

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
        if h.head.pdrs[i].flags & crate::hot::FROM_UE != 0
            && self.cfg.uplink_acl.check4(&f) == AclAction::Deny
        {
            return Err(DropReason::AclDenied);
        }
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
        if h.head.pdrs[i].flags & crate::hot::FROM_UE != 0
            && self.cfg.uplink_acl.check(&f) == AclAction::Deny
        {
            return Err(DropReason::AclDenied);
        }
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
        mut p: Packet,
        inner: (usize, usize),
        qfi_in: Option<u8>,
        out: &mut Output,
    ) -> Option<Packet> {
        use crate::hot::*;
        let clock = self.clock_ns;
        let clock1 = clock + 1;
        let Self {
            hot,
            shapes,
            counters,
            ident,
            ..
        } = self;
        let record = &mut hot[slot as usize];
        record.keys.last = clock1;
        let shape = shapes.get(record.keys.shape);
        let h = &shape.halves[half];
        let fills = &mut record.fills[half];
        let pdr = h.head.pdrs[pdr_index];
        let (far_flags, far_port) = (pdr.far_flags, pdr.port);
        if far_flags & FAR_FORW == 0 {
            return drop_to(out, counters, p, DropReason::FarDrop);
        }
        if far_flags & FAR_TARGET == 0 {
            return drop_to(out, counters, p, DropReason::NoForwardingTarget);
        }
        let (ds, de) = if pdr.flags & STRIP != 0 {
            inner
        } else {
            (p.start(), p.start() + p.len())
        };
        if (far_port == Port::N6 || p.port() == Port::N6)
            && !route_hop(p.buffer_mut().get_mut(ds..de).unwrap_or(&mut []))
        {
            return drop_to(out, counters, p, DropReason::TtlExpired);
        }
        let len = (inner.1 - inner.0) as u64;
        let uplink = pdr.flags & FROM_UE != 0;
        let bits = len * 8;
        if pdr.flags & GATE_SHUT != 0 {
            return drop_to(out, counters, p, DropReason::GateClosed);
        }
        // Loops over the few lines a record has, a bit each: unrolled, with constant
        // indices. Every bucket the PDR polices conforms before any is taken.
        let (police, urrs) = (pdr.police, pdr.urrs);
        for q in 0..QERS {
            if police & (1 << q) != 0 && !fills.fills[q].conforms(&h.rates[q], clock, bits) {
                return drop_to(out, counters, p, DropReason::MbrExceeded);
            }
        }
        for u in 0..URRS {
            if urrs & (1 << u) != 0 && record.urrs[u].exhausted {
                return drop_to(out, counters, p, DropReason::QuotaExhausted);
            }
        }
        for q in 0..QERS {
            if police & (1 << q) != 0 {
                fills.fills[q].take(&h.rates[q], bits);
            }
        }
        for g in 0..GBRS {
            if pdr.gbr & (1 << g) != 0 {
                fills.gbr_pending[g] += len;
            }
        }
        let mark = pdr.mark;
        let mark_qfi = (mark & MARK_QFI != 0).then_some(mark & 0x3f);
        let rqi = mark & MARK_RQI != 0;
        // The URR lines whose budget this packet spent, a bit each.
        let mut spent = 0u8;
        for (u, line) in record.urrs.iter_mut().enumerate() {
            if urrs & (1 << u) != 0 && !line.count(clock1, len, uplink) {
                spent |= 1 << u;
            }
        }
        let to_access = far_flags & FAR_TO_ACCESS != 0;
        let qfi = if to_access {
            mark_qfi.or(qfi_in)
        } else {
            qfi_in.or(mark_qfi)
        };
        p.set_port(far_port);
        let encap = h.fars.get(usize::from(pdr.far));
        let sent = if let Some(far) = encap.filter(|_| far_flags & FAR_ENCAP != 0) {
            let tunnel = record.keys.tunnel(far.tunnel);
            let ip = p.data_at(ds, de);
            let ecn = match ip.first().map(|v| v >> 4) {
                Some(4) => ip.get(1).copied().unwrap_or(0) & 3,
                Some(6) => ipv6::Packet::new_unchecked(ip).traffic_class() & 3,
                _ => 0,
            };
            *ident = ident.wrapping_add(1);
            let written = match qfi {
                None => far.template.without_psc().write(
                    p.buffer_mut(),
                    ds,
                    de,
                    *ident,
                    ecn,
                    0,
                    Some(tunnel),
                ),
                Some(q) => {
                    let octet = if to_access {
                        (u8::from(rqi) << 6) | (q & 0x3f)
                    } else {
                        q & 0x3f
                    };
                    far.template
                        .write(p.buffer_mut(), ds, de, *ident, ecn, octet, Some(tunnel))
                }
            };
            written.map(|start| p.set_range(start, de)).is_some()
        } else {
            p.set_range(ds, de);
            true
        };
        let p = if sent {
            counters.tx(p.port(), p.len());
            Some(p)
        } else {
            drop_to(out, counters, p, DropReason::EncapFailed)
        };
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
        for u in 0..crate::hot::URRS {
            if spent & (1 << u) == 0 {
                continue;
            }
            let urr = record.urrs[u].urr;
            if let Some(t) = record.check_urr(shapes, s, *epoch, urr) {
                let seid = s.seid;
                if let Some(c) = s.urrs.get_mut(usize::from(urr)) {
                    events.push_back(DatapathEvent::Usage(c.report(now, seid, t)));
                }
                record.set_urr_limits(s);
            }
        }
    }
}
