//! Packets from N3 and N9: G-PDUs classified on the GTP-U PDRs, signalling answered.

use super::batch::NO_HINT;
use super::steps::admit;
use super::{drop_to, Output, Pipeline};
use crate::counters::DropReason;
use crate::parse::flow_of;
use crate::session::Compiled;
use std::time::Instant;
use upf_packet::Packet;
use upf_wire::encap::decapsulate;
use upf_wire::gtpu::MessageType;

/// The length an IP header declares for its packet (IPv4 Total Length, IPv6 40 + Payload
/// Length); `flow_of` has checked that it fits the buffer.
#[inline(always)]
fn ip_len(ip: &[u8]) -> usize {
    match *ip {
        [v, _, a, b, ..] if v >> 4 == 4 => usize::from(u16::from_be_bytes([a, b])),
        [v, _, _, _, a, b, ..] if v >> 4 == 6 => 40 + usize::from(u16::from_be_bytes([a, b])),
        _ => ip.len(),
    }
}

fn wire_drop(first: Option<&u8>, e: upf_wire::Error) -> DropReason {
    use upf_wire::Error as E;
    let ip_ok = matches!(first.map(|v| v >> 4), Some(4 | 6));
    match e {
        E::Fragmented => DropReason::OuterFragment,
        E::UnknownComprehensionRequired(_) => DropReason::UnknownExtension,
        E::BadVersion | E::BadProtocolType if ip_ok => DropReason::BadGtpVersion,
        _ => DropReason::MalformedOuter,
    }
}

impl Pipeline {
    #[inline(always)]
    pub(super) fn gtp(
        &mut self,
        now: Instant,
        p: Packet,
        hint: u32,
        out: &mut Output,
    ) -> Option<Packet> {
        if let Some(g) = crate::fast::gpdu_v4(p.data()) {
            // The hint was read from the same TEID octets.
            let slot = if hint != NO_HINT {
                Some(hint)
            } else {
                self.teids.get(g.teid)
            };
            if let Some(slot) = slot {
                return self.gpdu(now, slot, g.teid, g.qfi, g.inner, p, out);
            }
        }
        self.gtp_general(now, p, out)
    }

    /// What [`Pipeline::gtp`]'s fast path does not take: other encodings, signalling, unknown
    /// TEIDs (out of line, so that the fast path is inlined into the batch loop).
    #[cold]
    #[inline(never)]
    fn gtp_general(&mut self, now: Instant, p: Packet, out: &mut Output) -> Option<Packet> {
        let d = match decapsulate(p.data()) {
            Ok(d) => d,
            Err(e) => {
                if let upf_wire::Error::UnknownComprehensionRequired(_) = e {
                    self.send_ext_notification(now, &p, out);
                }
                let r = wire_drop(p.data().first(), e);
                return drop_to(out, &mut self.counters, p, r);
            }
        };
        match d.gtpu.msg_type {
            MessageType::GPdu => {}
            MessageType::EchoRequest => {
                self.echo(p, &d, out);
                return None;
            }
            MessageType::ErrorIndication => {
                self.error_indication_received(&p, &d);
                return drop_to(out, &mut self.counters, p, DropReason::Signalling);
            }
            MessageType::EchoResponse => {
                self.echo_response(&d);
                return drop_to(out, &mut self.counters, p, DropReason::Signalling);
            }
            MessageType::EndMarker => {
                return drop_to(out, &mut self.counters, p, DropReason::Signalling)
            }
            _ => {
                return drop_to(
                    out,
                    &mut self.counters,
                    p,
                    DropReason::UnsupportedGtpMessage,
                )
            }
        }
        let teid = d.gtpu.teid;
        let Some(slot) = self.teids.get(teid) else {
            self.send_error_indication(now, p.port(), &d, out);
            return drop_to(out, &mut self.counters, p, DropReason::UnknownTeid);
        };
        let qfi = d.gtpu.ext.psc.map(|c| c.qfi);
        self.gpdu(now, slot, teid, qfi, d.inner, p, out)
    }

    /// A G-PDU for a known TEID: classify the inner packet and apply the rules.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn gpdu(
        &mut self,
        now: Instant,
        slot: u32,
        teid: u32,
        qfi: Option<u8>,
        inner: core::ops::Range<usize>,
        p: Packet,
        out: &mut Output,
    ) -> Option<Packet> {
        let Some(ip) = p.data().get(inner.clone()) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        // The inner packet ends where its IP header says (a G-PDU may carry padding after it):
        // that is what is forwarded and what URRs count.
        let end = inner.start + ip_len(ip).min(ip.len());
        let abs = (p.start() + inner.start, p.start() + end);
        if self.is_hot(slot) {
            return match self.classify_hot(slot, 0, teid, qfi, ip) {
                Ok(i) => self.apply_hot(now, slot, 0, i, p, abs, qfi, out),
                Err(r) => drop_to(out, &mut self.counters, p, r),
            };
        }
        let Some(flow) = flow_of(ip) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        let Some(s) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
            return drop_to(out, &mut self.counters, p, DropReason::UnknownTeid);
        };
        let Some(i) = Compiled::classify(&s.gtp_pdrs, Some(teid), qfi, None, &flow) else {
            return drop_to(out, &mut self.counters, p, DropReason::NoMatchingPdr);
        };
        if let Err(r) = admit(s.gtp_pdrs[i].from_ue, || self.cfg.uplink_acl.check(&flow)) {
            return drop_to(out, &mut self.counters, p, r);
        }
        self.apply(now, slot, true, i, p, abs, qfi, out)
    }
}
