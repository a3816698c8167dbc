//! Packets from N6: found by network instance and UE address, classified on the IP PDRs.

use super::batch::NO_HINT;
use super::steps::admit;
use super::{drop_to, Output, Pipeline};
use crate::counters::DropReason;
use crate::parse::flow_of;
use crate::session::Compiled;
use std::time::Instant;
use upf_packet::Packet;

impl Pipeline {
    #[inline]
    pub(super) fn n6(
        &mut self,
        now: Instant,
        p: Packet,
        hint: u32,
        out: &mut Output,
    ) -> Option<Packet> {
        // The hint was read from the same destination octets.
        let slot = if hint != NO_HINT {
            hint
        } else {
            let Some(flow) = flow_of(p.data()) else {
                return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
            };
            let Some(slot) = self.ue.lookup(p.instance(), flow.dst) else {
                return drop_to(out, &mut self.counters, p, DropReason::UnknownUe);
            };
            slot
        };
        let inner = (p.start(), p.start() + p.len());
        if self.is_hot(slot) {
            return match self.classify_hot(slot, 1, 0, None, p.data()) {
                Ok(i) => self.apply_hot(now, slot, 1, i, p, inner, None, out),
                Err(r) => drop_to(out, &mut self.counters, p, r),
            };
        }
        let Some(flow) = flow_of(p.data()) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        let Some(s) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
            return drop_to(out, &mut self.counters, p, DropReason::UnknownUe);
        };
        let Some(i) = Compiled::classify(&s.ip_pdrs, None, None, Some(p.instance()), &flow) else {
            return drop_to(out, &mut self.counters, p, DropReason::NoMatchingPdr);
        };
        if let Err(r) = admit(s.ip_pdrs[i].from_ue, || self.cfg.uplink_acl.check(&flow)) {
            return drop_to(out, &mut self.counters, p, r);
        }
        self.apply(now, slot, false, i, p, inner, None, out)
    }
}
