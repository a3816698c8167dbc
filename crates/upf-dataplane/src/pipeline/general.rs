//! The general path: the rules of a compiled session, whatever they hold.

use super::steps::{duplicate, emit, Mark};
use super::{drop_to, Output, Pipeline};
use crate::counters::DropReason;
use crate::parse::route_hop;
use crate::session::Strip;
use std::time::Instant;
use upf_packet::{Packet, Port};
use upf_rules::{ApplyAction, DatapathEvent, Qfi};

impl Pipeline {
    /// FAR, QER and URR of the matched PDR, then out.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn apply(
        &mut self,
        now: Instant,
        slot: u32,
        gtp: bool,
        pdr_index: usize,
        mut p: Packet,
        inner: (usize, usize),
        qfi_in: Option<u8>,
        out: &mut Output,
    ) -> Option<Packet> {
        let Self {
            slots,
            counters,
            events,
            buffered_bytes,
            cfg,
            ident,
            clock_ns,
            ..
        } = self;
        let clock = *clock_ns;
        let Some(s) = slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return drop_to(out, counters, p, DropReason::UnknownUe);
        };
        s.last_packet = now;
        // A packet ends a reported silence, so the next one is reported too (the timer
        // may only look after that next silence has begun).
        s.inactive_reported = false;
        let pdr = if gtp {
            &s.gtp_pdrs[pdr_index]
        } else {
            &s.ip_pdrs[pdr_index]
        };
        let Some(far) = pdr.far.and_then(|f| s.fars.get_mut(usize::from(f))) else {
            return drop_to(out, counters, p, DropReason::FarDrop);
        };
        let action = far.action;
        if !action.contains(ApplyAction::FORW) {
            let q = pdr.qers.iter().find_map(|&q| s.qers[usize::from(q)].qfi);
            let ppi = pdr.qers.iter().find_map(|&q| s.qers[usize::from(q)].ppi);
            // DUPL applies whatever else the FAR does with the packet (e.g. DROP|DUPL for
            // lawful interception of a blocked flow).
            if action.contains(ApplyAction::DUPL) && !far.dup.is_empty() {
                let (ds, de) = if pdr.strip == Strip::Gtpu {
                    inner
                } else {
                    (p.start(), p.start() + p.len())
                };
                let mark = Mark {
                    qfi: q.or(qfi_in),
                    rqi: false,
                    ppi: None,
                };
                duplicate(
                    out,
                    counters,
                    p.data_at(ds, de),
                    &far.dup,
                    &mark,
                    cfg.outer_ttl,
                    ident,
                );
            }
            if action.contains(ApplyAction::BUFF) {
                // The CP hears of downlink data even when nothing can be buffered for it
                // (a Suggested Buffering Packets Count of 0, a full buffer).
                if action.contains(ApplyAction::NOCP) && !far.notified {
                    far.notified = true;
                    events.push_back(DatapathEvent::DownlinkData {
                        seid: s.seid,
                        pdr: pdr.id,
                        qfi: q.map(Qfi),
                        ppi,
                    });
                }
                if far.buffer.len() >= far.max_buffered
                    || *buffered_bytes + p.len() > cfg.buffer_bytes
                {
                    return drop_to(out, counters, p, DropReason::BufferFull);
                }
                counters.buffered += 1;
                *buffered_bytes += p.len();
                far.buffer.push_back(p);
                return None;
            }
            return drop_to(out, counters, p, DropReason::FarDrop);
        }
        // Where it goes and the routed hop come before QER and URR: a packet dropped for
        // want of a target or for its TTL must neither take MBR tokens nor be charged.
        let Some(target) = far.target.as_ref() else {
            return drop_to(out, counters, p, DropReason::NoForwardingTarget);
        };
        let strip = pdr.strip == Strip::Gtpu;
        let (ds, de) = if strip {
            inner
        } else {
            (p.start(), p.start() + p.len())
        };
        // A routed hop when the packet enters or leaves N6.
        if (target.port == Port::N6 || p.port() == Port::N6)
            && !route_hop(p.buffer_mut().get_mut(ds..de).unwrap_or(&mut []))
        {
            return drop_to(out, counters, p, DropReason::TtlExpired);
        }
        let len = inner.1 - inner.0;
        let uplink = pdr.from_ue;
        // QER: every QER of the PDR must let the packet through before any is charged.
        let bits = len as u64 * 8;
        let mut mark_qfi = None;
        let (mut rqi, mut ppi) = (false, None);
        // Slices once: each SmallVec access otherwise re-checks where its items live.
        let (pdr_qers, pdr_urrs) = (&pdr.qers[..], &pdr.urrs[..]);
        let (qers, urrs) = (&mut s.qers[..], &mut s.urrs[..]);
        // Every gate before any MBR: a closed gate drops the packet whatever the rates.
        let shut = |q: &crate::session::QerState| if uplink { !q.gate_ul } else { !q.gate_dl };
        if pdr_qers
            .iter()
            .any(|&q| qers.get(usize::from(q)).is_some_and(shut))
        {
            return drop_to(out, counters, p, DropReason::GateClosed);
        }
        for &q in pdr_qers {
            let Some(q) = qers.get_mut(usize::from(q)) else {
                continue;
            };
            let mbr = if uplink { &mut q.mbr_ul } else { &mut q.mbr_dl };
            if let Some(b) = mbr {
                if !b.conforms(clock, bits) {
                    return drop_to(out, counters, p, DropReason::MbrExceeded);
                }
            }
            mark_qfi = mark_qfi.or(q.qfi);
            rqi |= q.rqi;
            ppi = ppi.or(q.ppi);
        }
        if pdr_urrs
            .iter()
            .any(|&u| urrs.get(usize::from(u)).is_some_and(|u| u.exhausted))
        {
            return drop_to(out, counters, p, DropReason::QuotaExhausted);
        }
        for &q in pdr_qers {
            let Some(q) = qers.get_mut(usize::from(q)) else {
                continue;
            };
            let mbr = if uplink { &mut q.mbr_ul } else { &mut q.mbr_dl };
            if let Some(b) = mbr {
                b.take(bits);
            }
            if q.gbr.is_some() {
                q.gbr_bytes += len as u64;
            }
        }
        for &u in pdr_urrs {
            let Some(u) = urrs.get_mut(usize::from(u)) else {
                continue;
            };
            if let Some(t) = u.count(now, len as u64, uplink) {
                events.push_back(DatapathEvent::Usage(u.report(now, s.seid, t)));
            }
        }
        let qfi = if target.to_access {
            mark_qfi.or(qfi_in)
        } else {
            qfi_in.or(mark_qfi)
        };
        let mark = Mark { qfi, rqi, ppi };
        duplicate(
            out,
            counters,
            p.buffer_mut().get(ds..de).unwrap_or(&[]),
            &far.dup,
            &mark,
            cfg.outer_ttl,
            ident,
        );
        if !emit(&mut p, ds, de, target, &mark, cfg.outer_ttl, ident) {
            return drop_to(out, counters, p, DropReason::EncapFailed);
        }
        counters.tx(p.port(), p.len());
        Some(p)
    }
}
