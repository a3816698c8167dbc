//! The general path: the rules of a compiled session, whatever they hold.

use super::steps::{duplicate, emit, forward, take_packets, Is, Mark, Rules, Sink};
use super::{drop_to, Output, Pipeline};
use crate::counters::DropReason;
use crate::session::{CFar, QerState, Strip, Target};
use crate::usage::{report_fired, Fired, UrrState};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::time::Instant;
use upf_packet::{Packet, Port};
use upf_rules::{ApplyAction, DatapathEvent, Qfi, Seid, UsageTrigger};

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
        p: Packet,
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
            timers,
            generations,
            rehot,
            over_budget,
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
        // While a URR of the PDR with a FAR ID for Quota Action is exhausted, that FAR
        // applies instead of the PDR's (§5.2.2.3.1), and exhausted URRs neither stop nor
        // count the packet.
        let mut far = pdr.far;
        let mut quota_action = false;
        if s.quota_fars {
            if let Some(f) = pdr.urrs.iter().find_map(|&u| {
                let u = s.urrs.get(usize::from(u))?;
                u.quota_far.filter(|_| u.exhausted)
            }) {
                far = Some(f);
                quota_action = true;
            }
        }
        let Some(far) = far.and_then(|f| s.fars.get_mut(usize::from(f))) else {
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
                    let report = DatapathEvent::DownlinkData {
                        seid: s.seid,
                        pdr: pdr.id,
                        qfi: q.map(Qfi),
                        ppi,
                    };
                    // The BAR's notification delay (§8.2.28) holds the report back.
                    if s.notification_delay.is_zero() {
                        events.push_back(report);
                    } else if s.delayed_report.is_none() {
                        let at = now + s.notification_delay;
                        s.delayed_report = Some((at, far.id, report));
                        let generation = generations[slot as usize];
                        timers.push(std::cmp::Reverse((at, slot, generation)));
                    }
                }
                let full = far.buffer.len() >= far.max_buffered;
                if full || *buffered_bytes + p.len() > cfg.buffer_bytes {
                    // Once, when the FAR has nothing left to do but drop: the session may
                    // go hot after the batch (`hot::hot_far`).
                    if full && !far.full_seen {
                        far.full_seen = true;
                        rehot.push(slot);
                    } else if !full && !far.over_budget {
                        // Refused for the worker's budget: hot until it has room again.
                        far.over_budget = true;
                        rehot.push(slot);
                        over_budget.push(slot);
                    }
                    if !pdr.from_ue {
                        let urrs: SmallVec<[usize; 2]> =
                            pdr.urrs.iter().map(|&u| usize::from(u)).collect();
                        let octets = p.len() as u64;
                        crate::usage::dropped_dl(&mut s.urrs, &urrs, octets, now, s.seid, events);
                    }
                    return drop_to(out, counters, p, DropReason::BufferFull);
                }
                far.full_seen = false;
                far.over_budget = false;
                counters.buffered += 1;
                *buffered_bytes += p.len();
                far.buffer.push_back((now, p));
                return None;
            }
            return drop_to(out, counters, p, DropReason::FarDrop);
        }
        let (pdr_qers, pdr_urrs) = (&pdr.qers[..], &pdr.urrs[..]);
        let mut rules = General {
            // Slices once: each SmallVec access otherwise re-checks where its items live.
            pdr_qers,
            pdr_urrs,
            uplink: pdr.from_ue,
            packet_rate: pdr.packet_rate,
            quota_action,
            strips: pdr.strip == Strip::Gtpu,
            far,
            qers: &mut s.qers[..],
            urrs: &mut s.urrs[..],
            events,
            seid: s.seid,
            now,
        };
        let sink = Sink {
            out,
            counters,
            ident,
            ttl: cfg.outer_ttl,
            clock,
        };
        forward(&mut rules, p, inner, qfi_in, sink)
    }
}

/// The rules of a compiled session's matched PDR, for [`forward`].
struct General<'a> {
    pdr_qers: &'a [u16],
    pdr_urrs: &'a [u16],
    uplink: bool,
    /// [`crate::session::CPdr::packet_rate`]
    packet_rate: bool,
    /// The FAR is an exhausted URR's quota FAR: exhausted URRs neither stop nor count.
    quota_action: bool,
    strips: bool,
    far: &'a CFar,
    qers: &'a mut [QerState],
    urrs: &'a mut [UrrState],
    events: &'a mut VecDeque<DatapathEvent>,
    seid: Seid,
    now: Instant,
}

impl General<'_> {
    /// The PDR's `k`-th URR fired `t` on this packet: the packet is counted in the URRs
    /// after it too before anything is reported, so that each report (and the linked ones)
    /// includes it (out of line: rare).
    #[cold]
    #[inline(never)]
    fn fired(&mut self, k: usize, t: UsageTrigger, octets: u64, uplink: bool) {
        let mut fired: Fired = SmallVec::new();
        fired.push((usize::from(self.pdr_urrs[k]), t));
        for &u in &self.pdr_urrs[k + 1..] {
            if let Some(c) = self.urrs.get_mut(usize::from(u)) {
                if self.quota_action && c.exhausted {
                    continue;
                }
                if let Some(t) = c.count(self.now, octets, uplink) {
                    fired.push((usize::from(u), t));
                }
            }
        }
        report_fired(self.urrs, &fired, self.now, self.seid, self.events);
    }

    /// The PDR's QERs that exist.
    #[inline(always)]
    fn qers(&self) -> impl Iterator<Item = &QerState> {
        self.pdr_qers
            .iter()
            .filter_map(|&q| self.qers.get(usize::from(q)))
    }
}

impl Rules for General<'_> {
    #[inline(always)]
    fn egress(&self) -> Option<(Port, u8)> {
        self.far.target.as_ref().map(|t| (t.port, t.instance))
    }

    #[inline(always)]
    fn is(&self, what: Is) -> bool {
        match what {
            Is::ToAccess => self.far.target.as_ref().is_some_and(|t| t.to_access),
            Is::Stripping => self.strips,
            Is::Uplink => self.uplink,
        }
    }

    #[inline(always)]
    fn gate_shut(&self) -> bool {
        let uplink = self.uplink;
        self.qers()
            .any(|q| if uplink { !q.gate_ul } else { !q.gate_dl })
    }

    #[inline(always)]
    fn conforms(&mut self, clock: u64, bits: u64) -> bool {
        for &q in self.pdr_qers {
            let Some(q) = self.qers.get_mut(usize::from(q)) else {
                continue;
            };
            if let Some(b) = q.mbr(self.uplink) {
                if !b.conforms(clock, bits) {
                    return false;
                }
            }
        }
        true
    }

    #[inline(always)]
    fn exhausted(&self) -> bool {
        !self.quota_action
            && self
                .pdr_urrs
                .iter()
                .any(|&u| self.urrs.get(usize::from(u)).is_some_and(|u| u.exhausted))
    }

    #[inline(always)]
    fn take_packet(&mut self, clock: u64, bits: u64) -> Result<(), DropReason> {
        if !self.packet_rate {
            return Ok(());
        }
        take_packets(self.qers, self.pdr_qers, self.uplink, clock, bits)
    }

    #[inline(always)]
    fn charge(&mut self, bits: u64, octets: u64) {
        for &q in self.pdr_qers {
            let Some(q) = self.qers.get_mut(usize::from(q)) else {
                continue;
            };
            if let Some(b) = q.mbr(self.uplink) {
                b.take(bits);
            }
            if q.gbr.is_some() {
                q.gbr_bytes += octets;
            }
        }
    }

    #[inline(always)]
    fn count(&mut self, octets: u64, uplink: bool) {
        for (k, &u) in self.pdr_urrs.iter().enumerate() {
            let Some(c) = self.urrs.get_mut(usize::from(u)) else {
                continue;
            };
            if self.quota_action && c.exhausted {
                continue;
            }
            if let Some(t) = c.count(self.now, octets, uplink) {
                return self.fired(k, t, octets, uplink);
            }
        }
    }
    /// Out of line: drops only.
    #[cold]
    #[inline(never)]
    fn qos_dropped(&mut self, octets: u64) {
        let mut fired: Fired = SmallVec::new();
        for &u in self.pdr_urrs {
            let Some(c) = self.urrs.get_mut(usize::from(u)) else {
                continue;
            };
            if c.before_qos() && !c.exhausted {
                if let Some(t) = c.count(self.now, octets, self.uplink) {
                    fired.push((usize::from(u), t));
                }
            }
        }
        if !fired.is_empty() {
            report_fired(self.urrs, &fired, self.now, self.seid, self.events);
        }
    }

    #[inline(always)]
    fn marks(&self) -> Mark {
        let mut m = Mark {
            qfi: None,
            rqi: false,
            ppi: None,
        };
        for q in self.qers() {
            m.qfi = m.qfi.or(q.qfi);
            m.rqi |= q.rqi;
            m.ppi = m.ppi.or(q.ppi);
        }
        m
    }

    #[inline(always)]
    fn dups(&self) -> &[Target] {
        &self.far.dup
    }

    #[inline(always)]
    fn encap(&self, p: &mut Packet, ds: usize, de: usize, m: &Mark, ttl: u8, id: &mut u16) -> bool {
        match &self.far.target {
            Some(t) => emit(p, ds, de, t, m, ttl, id),
            None => false,
        }
    }
}
