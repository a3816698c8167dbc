//! Installing, replacing and removing sessions in a worker's tables, usage queries and the
//! time-based triggers. A replacement happens between two batches in one step, so no packet
//! sees half a session; state of surviving rules (meters, counters, buffers) carries over.

use crate::budgets::SessionBudgets;
use crate::counters::DropReason;
use crate::pipeline::Pipeline;
use crate::session::{CompileEnv, Compiled};
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Instant;
use upf_packet::{Packet, HEADROOM};
use upf_rules::{
    ApplyAction, Carried, Datapath, DatapathError, DatapathEvent, InstallFlags, Installed,
    MbrBacklog, Seid, Session, UrrId, UsageReport, UsageTrigger, Volume,
};

/// A session's unreported usage, by URR ([`Pipeline::unreported_changed`]).
pub type SessionUsage = (Seid, Vec<(UrrId, Volume)>);

impl Pipeline {
    /// Installs `session` (or replaces the one with its SEID). `budgets`: the buckets it
    /// shares with the other workers it lives on, if several; its QERs' rates are drawn
    /// from them.
    pub fn install_shared(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
        budgets: Option<&SessionBudgets>,
    ) -> Result<Installed, DatapathError> {
        let env = CompileEnv {
            n3: &self.cfg.n3,
            n9: &self.cfg.n9,
            tunnel_source_per_session: self.cfg.tunnel_source_per_session,
            buffer_packets: self.cfg.buffer_packets_per_far,
            budgets,
            outer_ttl: self.cfg.outer_ttl,
            instances: &self.cfg.network_instances,
            aggregates: &self.cfg.aggregates,
            clock: self.clock(now),
            epoch: self.epoch,
        };
        let mut new = Compiled::compile(now, session, &env)?;
        let old_slot = self.by_seid.get(&new.seid).copied();
        // Every key must be free or already ours: checked before anything changes.
        for t in new.teids() {
            if self.teids.get(t).is_some_and(|s| Some(s) != old_slot) {
                return Err(DatapathError::NoResources(
                    "local TEID used by another session",
                ));
            }
        }
        let prefixes = new.ue_prefixes();
        for (i, p) in &prefixes {
            if self.ue.owner(*i, p).is_some_and(|s| Some(s) != old_slot) {
                return Err(DatapathError::NoResources(
                    "UE address used by another session",
                ));
            }
        }
        // Nothing fails from here on: the session's aggregates take its rates.
        self.cfg.aggregates.set_rates(&new.rules);
        let mut installed = Installed::default();
        let slot = match old_slot {
            Some(slot) => {
                // What the hot record counted belongs to the old session's state first.
                self.sync_slot(slot);
                let mut old = self.slots[slot as usize]
                    .take()
                    .ok_or(DatapathError::Internal("session slot empty".into()))?;
                self.unindex(slot, &old);
                let (gone, orphans) = new.carry_from(now, &mut old);
                for mut u in gone {
                    installed.removed_urr_usage.extend(u.reports(
                        now,
                        new.seid,
                        UsageTrigger::TERMR,
                    ));
                }
                for p in orphans {
                    self.discard(p, DropReason::BufferDiscarded);
                }
                if flags.send_end_marker {
                    self.end_markers(&old, &new);
                }
                slot
            }
            None => match self.free_slots.pop() {
                Some(s) => s,
                None => {
                    self.slots.push(None);
                    self.hot.push(crate::hot::Hot::default());
                    self.kinds.push([crate::hot::EMPTY; 2]);
                    if self.kinds.len() > self.cold_bits.len() * 64 {
                        self.cold_bits.push(0);
                    }
                    self.generations.push(0);
                    u32::try_from(self.slots.len() - 1)
                        .map_err(|_| DatapathError::NoResources("sessions"))?
                }
            },
        };
        for i in 0..new.fars.len() {
            let far = &mut new.fars[i];
            let release = if flags.drop_buffered || far.action.contains(ApplyAction::DROP) {
                Some(false)
            } else if far.action.contains(ApplyAction::FORW) {
                Some(true)
            } else {
                None
            };
            match release {
                Some(true) => self.requeue.extend(far.buffer.drain(..).map(|(_, p)| p)),
                Some(false) => {
                    // Discarding the buffer (DROBU) ends the buffering period: the next
                    // packet buffered is reported anew, or a UE whose paging failed would
                    // never be paged again.
                    far.notified = false;
                    let dropped = std::mem::take(&mut far.buffer);
                    let octets: SmallVec<[u64; 4]> =
                        dropped.iter().map(|(_, p)| p.len() as u64).collect();
                    new.dropped_buffered(i, &octets, now, &mut self.events);
                    for (_, p) in dropped {
                        self.discard(p, DropReason::BufferDiscarded);
                    }
                }
                None => {}
            }
        }
        self.index(slot, &new, &prefixes);
        let was_gbr = (self.slots[slot as usize].as_ref()).is_some_and(Compiled::has_gbr);
        self.gbr_sessions = self.gbr_sessions + usize::from(new.has_gbr()) - usize::from(was_gbr);
        self.slots[slot as usize] = Some(new);
        self.build_hot(slot);
        self.generations[slot as usize] = self.generations[slot as usize].wrapping_add(1);
        self.schedule(now, slot);
        Ok(installed)
    }

    fn index(&mut self, slot: u32, s: &Compiled, prefixes: &[(u8, crate::flow::Prefix)]) {
        self.by_seid.insert(s.seid, slot);
        for t in s.teids() {
            self.teids.insert(t, slot);
        }
        for (i, p) in prefixes {
            self.ue.insert(*i, *p, slot);
        }
        for k in s.remote_tunnels() {
            self.remote.insert(k, slot);
        }
    }

    fn unindex(&mut self, slot: u32, s: &Compiled) {
        self.by_seid.remove(&s.seid);
        for t in s.teids() {
            if self.teids.get(t) == Some(slot) {
                self.teids.remove(t);
            }
        }
        for (i, p) in s.ue_prefixes() {
            self.ue.remove(i, &p, slot);
        }
        for k in s.remote_tunnels() {
            if self.remote.get(&k) == Some(&slot) {
                self.remote.remove(&k);
            }
        }
    }

    fn discard(&mut self, p: Packet, why: DropReason) {
        self.counters.buffered -= 1;
        self.buffered_bytes -= p.len();
        self.counters.drop(why);
    }

    /// TS 29.281 §7.3.2 / TS 23.501 §5.8.2.9: when a FAR's tunnel changes (handover), an
    /// End Marker goes down the old tunnel after the last packet sent into it.
    fn end_markers(&mut self, old: &Compiled, new: &Compiled) {
        for o in &old.fars {
            let Some(ot) = o.target.as_ref().and_then(|t| t.encap.map(|e| (t.port, e))) else {
                continue;
            };
            let changed = new
                .fars
                .iter()
                .find(|n| n.id == o.id)
                .is_none_or(|n| n.target.as_ref().and_then(|t| t.encap) != Some(ot.1));
            if !changed {
                continue;
            }
            let (port, tun) = ot;
            let mut p = Packet::new(port);
            let start = HEADROOM;
            let Some(buf) = p.buffer_mut().get_mut(start..) else {
                continue;
            };
            let Ok(n) = upf_wire::gtpu_msg::emit_end_marker(tun.teid, buf) else {
                continue;
            };
            if crate::pipeline::wrap_for_peer(
                &mut p,
                start,
                n,
                tun.src,
                tun.dst,
                self.cfg.outer_ttl,
            )
            .is_some()
            {
                p.set_port(port);
                self.pending.push(p);
            }
        }
    }

    /// The slot of session `seid`, its hot record's counts synced into it.
    fn synced_slot(&mut self, seid: Seid) -> Result<u32, DatapathError> {
        let slot = *self
            .by_seid
            .get(&seid)
            .ok_or(DatapathError::UnknownSession(seid))?;
        self.sync_slot(slot);
        Ok(slot)
    }

    /// Removes a session; the final usage of each URR (TERMR) and its buffered packets
    /// discarded.
    pub fn remove_session(
        &mut self,
        now: Instant,
        seid: Seid,
    ) -> Result<Vec<UsageReport>, DatapathError> {
        let slot = self.synced_slot(seid)?;
        let mut s = self.slots[slot as usize]
            .take()
            .ok_or(DatapathError::UnknownSession(seid))?;
        self.gbr_sessions -= usize::from(s.has_gbr());
        self.build_hot(slot);
        self.unindex(slot, &s);
        self.generations[slot as usize] = self.generations[slot as usize].wrapping_add(1);
        self.free_slots.push(slot);
        for f in &mut s.fars {
            for (_, p) in std::mem::take(&mut f.buffer) {
                self.discard(p, DropReason::BufferDiscarded);
            }
        }
        Ok(s.urrs
            .iter_mut()
            .flat_map(|u| u.reports(now, seid, UsageTrigger::TERMR))
            .collect())
    }

    /// Usage of `urrs` (all when empty) since their last report, restarting the measurement.
    pub fn query(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        self.report_now(now, seid, urrs, UsageTrigger::IMMER)
    }

    /// As [`Pipeline::query`], reports of `trigger`: one another engine found fired for
    /// these URRs (the XDP engine's volume thresholds and quotas), the usage since their last
    /// report in them.
    pub fn report_now(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
        trigger: UsageTrigger,
    ) -> Result<Vec<UsageReport>, DatapathError> {
        let slot = self.synced_slot(seid)?;
        let s = self.slots[slot as usize]
            .as_mut()
            .ok_or(DatapathError::UnknownSession(seid))?;
        let reports = s
            .urrs
            .iter_mut()
            .filter(|u| urrs.is_empty() || urrs.contains(&u.id))
            .flat_map(|u| u.reports(now, seid, trigger))
            .collect();
        self.build_hot(slot);
        Ok(reports)
    }

    /// The usage each of session `seid`'s URRs measured since its last report (not
    /// restarted): what another engine taking the session over counts its thresholds from.
    pub fn unreported(&mut self, seid: Seid) -> Result<Vec<(UrrId, Volume)>, DatapathError> {
        let slot = self.synced_slot(seid)?;
        let s = self.slots[slot as usize]
            .as_ref()
            .ok_or(DatapathError::UnknownSession(seid))?;
        Ok(s.urrs.iter().map(|u| (u.id, u.unreported())).collect())
    }

    /// For a usage checkpoint: the unreported usage ([`Pipeline::unreported`]) of each
    /// session whose URRs counted, or reported, since the last call; sessions that have
    /// counted nothing since their last report and did not before are left out. The
    /// caller's writes are then bounded by the sessions with traffic, not by all sessions.
    pub fn unreported_changed(&mut self) -> Vec<SessionUsage> {
        self.unreported_changed_from(0, usize::MAX).0
    }

    /// [`Pipeline::unreported_changed`] over at most `max` slots from slot `from`, and the
    /// slot to go on from (None: the last was read). A worker reads its sessions a part at
    /// a time, forwarding packets in between: read whole, 100k sessions that all counted
    /// held its packets ~37 ms.
    pub fn unreported_changed_from(
        &mut self,
        from: usize,
        max: usize,
    ) -> (Vec<SessionUsage>, Option<usize>) {
        let mut out = Vec::new();
        let end = from.saturating_add(max).min(self.slots.len());
        for slot in from..end {
            let Ok(index) = u32::try_from(slot) else {
                break;
            };
            if self.slots[slot].as_ref().is_none_or(|s| s.urrs.is_empty()) {
                continue;
            }
            self.sync_slot(index);
            let Some(s) = self.slots[slot].as_mut() else {
                continue;
            };
            let mark = usage_mark(&s.urrs);
            if mark != s.usage_mark {
                s.usage_mark = mark;
                out.push((
                    s.seid,
                    s.urrs.iter().map(|u| (u.id, u.unreported())).collect(),
                ));
            }
        }
        (out, (end < self.slots.len()).then_some(end))
    }

    /// Adds to session `seid`'s URRs usage another engine measured for them (`usage`, per
    /// URR, since their last report; its packets taken at `now`), as if this pipeline had
    /// counted it: in their next reports, against their thresholds and, with `quota`, their
    /// quotas (which may fire now: their reports are events). Without `quota`: the quotas'
    /// use is that engine's whole count, set by [`Pipeline::carry_in`].
    pub fn carry_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        usage: &[(UrrId, Volume)],
        quota: bool,
    ) -> Result<(), DatapathError> {
        let slot = self.synced_slot(seid)?;
        let s = self.slots[slot as usize]
            .as_mut()
            .ok_or(DatapathError::UnknownSession(seid))?;
        let mut fired = crate::usage::Fired::new();
        for (i, u) in s.urrs.iter_mut().enumerate() {
            let Some((_, v)) = usage
                .iter()
                .find(|(id, v)| *id == u.id && v.total_packets > 0)
            else {
                continue;
            };
            u.add_usage(
                (v.uplink_bytes, v.uplink_packets),
                (v.downlink_bytes, v.downlink_packets),
                (now, now),
                quota,
            );
            if let Some(t) = u.check() {
                fired.push((i, t));
            }
        }
        if !fired.is_empty() {
            crate::usage::report_fired(&mut s.urrs, &fired, now, seid, &mut self.events);
        }
        self.build_hot(slot);
        self.schedule(now, slot);
        Ok(())
    }

    /// The backlog of session `seid`'s MBR buckets at `now`, per QER and direction, and the
    /// use of its URRs' Volume Quotas, for another engine to continue from. (Buckets and
    /// quotas shared with other workers are not the session's: none of theirs.)
    pub fn carried(&mut self, now: Instant, seid: Seid) -> Result<Carried, DatapathError> {
        let slot = self.synced_slot(seid)?;
        let clock = self.clock(now);
        let s = self.slots[slot as usize]
            .as_ref()
            .ok_or(DatapathError::UnknownSession(seid))?;
        let mut out = Carried::default();
        for q in &s.qers {
            for (uplink, b) in [(true, &q.mbr_ul), (false, &q.mbr_dl)] {
                if let Some(b) = b {
                    out.backlogs.push(MbrBacklog {
                        qer: q.id,
                        uplink,
                        ticks: b.fill.remaining(clock),
                    });
                }
            }
        }
        out.quotas = s.urrs.iter().filter_map(|u| u.quota_use()).collect();
        Ok(out)
    }

    /// Session `seid`'s MBR buckets continue at `now` from the backlogs another engine's
    /// left, and its URRs' quotas from the use it counted ([`Pipeline::carried`] there);
    /// buckets and quotas not named keep their state.
    pub fn carry_in(
        &mut self,
        now: Instant,
        seid: Seid,
        carried: &Carried,
    ) -> Result<(), DatapathError> {
        let slot = self.synced_slot(seid)?;
        let clock = self.clock(now);
        let s = self.slots[slot as usize]
            .as_mut()
            .ok_or(DatapathError::UnknownSession(seid))?;
        for b in &carried.backlogs {
            let Some(q) = s.qers.iter_mut().find(|q| q.id == b.qer) else {
                continue;
            };
            if let Some(m) = q.mbr(b.uplink) {
                m.resume(b.ticks, clock);
            }
        }
        for used in &carried.quotas {
            if let Some(u) = s.urrs.iter_mut().find(|u| u.id == used.urr) {
                u.set_quota_use(used);
            }
        }
        if !carried.quotas.is_empty() {
            // The hot record's room before a URR's next check is the quota left.
            self.build_hot(slot);
        } else if let Some(h) = self.hot.get_mut(slot as usize) {
            h.take_fills(&self.shapes, s);
        }
        Ok(())
    }

    fn schedule(&mut self, now: Instant, slot: u32) {
        let Some(s) = self.slots[slot as usize].as_ref() else {
            return;
        };
        let urr = s
            .urrs
            .iter()
            .filter_map(|u| u.deadline(now))
            .chain(s.urrs.iter().filter_map(|u| u.stopt_poll(now)))
            .chain(s.delayed_report.as_ref().map(|(at, _, _)| *at))
            .chain(s.buffer_for.and_then(|d| {
                s.fars
                    .iter()
                    .filter_map(|f| f.buffer.front().map(|(at, _)| *at + d))
                    .min()
            }))
            .min();
        // Once reported, the idle deadline lies in the past: arming it again would make
        // handle_timeout fire it forever (handle_timeout re-checks every period instead).
        let idle = s
            .inactivity
            .filter(|_| !s.inactive_reported)
            .map(|t| s.last_packet + t);
        let at = match (urr, idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = at {
            self.timers
                .push(Reverse((at, slot, self.generations[slot as usize])));
        }
        // Every install leaves its predecessor's entry behind until that deadline passes,
        // which a Measurement Period or timer of days puts far off: an SMF modifying a session
        // over and over would grow the heap for as long. A slot has at most two current
        // entries, so once stale ones dominate they are dropped (amortised O(1) per push).
        if self.timers.len() > 4 * self.slots.len() + 64 {
            let generations = &self.generations;
            self.timers
                .retain(|Reverse((_, s, g))| generations.get(*s as usize) == Some(g));
        }
    }

    /// Whether packets wait for the next [`Pipeline::process`] call (buffered packets a FAR
    /// change released, End Markers): a driver with nothing received calls it with an empty
    /// batch so that they go out now, not with the next received packet.
    pub fn has_queued(&self) -> bool {
        !self.requeue.is_empty() || !self.pending.is_empty()
    }

    /// When [`Pipeline::handle_timeout`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let urr = self.timers.peek().map(|Reverse((at, _, _))| *at);
        match (urr, self.paths.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the time-based URR triggers and inactivity detection that are due, and the
    /// GTP-U path management steps (Echo Requests go out with the next
    /// [`Pipeline::process`], see [`Pipeline::has_queued`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.probe_paths(now);
        while let Some(&Reverse((at, slot, generation))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.generations.get(slot as usize) != Some(&generation) {
                continue;
            }
            self.sync_slot(slot);
            let Some(s) = self.slots[slot as usize].as_mut() else {
                continue;
            };
            let seid = s.seid;
            let fired: crate::usage::Fired = s
                .urrs
                .iter_mut()
                .enumerate()
                .filter_map(|(i, u)| u.due(now).map(|t| (i, t)))
                .collect();
            if !fired.is_empty() {
                crate::usage::report_fired(&mut s.urrs, &fired, now, seid, &mut self.events);
            }
            let mut expired = Vec::new();
            if let Some(d) = s.buffer_for {
                for i in 0..s.fars.len() {
                    let f = &mut s.fars[i];
                    let from = expired.len();
                    while f.buffer.front().is_some_and(|(at, _)| *at + d <= now) {
                        expired.extend(f.buffer.pop_front().map(|(_, p)| p));
                    }
                    // What expired is room for this FAR's next packets, budget or not.
                    f.over_budget &= expired.len() == from;
                    let octets: SmallVec<[u64; 4]> =
                        expired[from..].iter().map(|p| p.len() as u64).collect();
                    s.dropped_buffered(i, &octets, now, &mut self.events);
                }
            }
            if s.delayed_report
                .as_ref()
                .is_some_and(|(at, _, _)| *at <= now)
            {
                if let Some((_, far, report)) = s.delayed_report.take() {
                    let notify = ApplyAction::BUFF | ApplyAction::NOCP;
                    if s.fars
                        .iter()
                        .any(|f| f.id == far && f.notified && f.action.contains(notify))
                    {
                        self.events.push_back(report);
                    }
                }
            }
            if let Some(t) = s.inactivity {
                if now >= s.last_packet + t && !s.inactive_reported {
                    s.inactive_reported = true;
                    self.events.push_back(DatapathEvent::Inactive { seid });
                } else if now < s.last_packet + t {
                    s.inactive_reported = false;
                }
            }
            // Lazy: an entry may fire early (traffic moved a deadline); reschedule.
            self.generations[slot as usize] = generation.wrapping_add(1);
            let inactive = s.inactive_reported.then_some(s.inactivity).flatten();
            for p in expired {
                self.discard(p, DropReason::BufferExpired);
            }
            self.build_hot(slot);
            self.schedule(now, slot);
            if let Some(t) = inactive {
                let g = self.generations[slot as usize];
                self.timers.push(Reverse((now + t, slot, g)));
            }
        }
    }

    pub fn poll_event(&mut self) -> Option<DatapathEvent> {
        self.events.pop_front()
    }

    /// A pipeline that is the whole data path counts its own sessions' tunnels per peer.
    fn tunnels_changed(&mut self, now: Instant, seid: Seid, peers: Vec<crate::paths::Peer>) {
        let mut changes = Vec::new();
        self.tunnels.set(seid, peers, &mut changes);
        for c in changes {
            self.path_change(now, c);
        }
    }

    /// Packets waiting in this worker's buffers.
    pub fn buffered(&self) -> usize {
        self.slots.iter().flatten().map(Compiled::buffered).sum()
    }
}

/// A single worker as a complete data path (tests, and one-core deployments).
impl Datapath for Pipeline {
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        let seid = session.seid;
        let peers = self
            .paths
            .enabled()
            .then(|| crate::paths::tunnel_peers(&session));
        let r = self.install_shared(now, session, flags, None)?;
        if let Some(peers) = peers {
            self.tunnels_changed(now, seid, peers);
        }
        Ok(r)
    }

    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        let r = self.remove_session(now, seid)?;
        self.tunnels_changed(now, seid, Vec::new());
        Ok(r)
    }

    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        self.query(now, seid, urrs)
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        Pipeline::poll_event(self)
    }
}

/// A digest of what `urrs` measured since their last reports, and since when: a report
/// changes it even when the same usage follows. 0 when nothing was measured.
fn usage_mark(urrs: &[crate::usage::UrrState]) -> u64 {
    use std::hash::{Hash, Hasher};
    if urrs.iter().all(|u| u.unreported().total_packets == 0) {
        return 0;
    }
    let mut h = std::hash::DefaultHasher::new();
    for u in urrs {
        (u.id.0, u.measuring_since(), u.unreported()).hash(&mut h);
    }
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use crate::test_rules::{far, pdi};
    use crate::{Pipeline, PipelineConfig};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use std::time::Instant;
    use upf_rules::*;

    /// One uplink PDR counted by a URR with a day's Measurement Period.
    fn periodic(seid: u64) -> Arc<Session> {
        let mut s = Session::new(Seid(seid), Seid(seid), IpAddr::V4(Ipv4Addr::LOCALHOST));
        let ue = Ipv4Addr::from(0x0a00_0000 + u32::try_from(seid).unwrap());
        s.insert_pdr(Pdr {
            id: PdrId(1),
            precedence: Precedence(1),
            pdi: pdi(true, u32::try_from(seid).unwrap(), ue),
            outer_header_removal: None,
            far: Some(FarId(1)),
            qers: Default::default(),
            urrs: [UrrId(1)].into_iter().collect(),
        })
        .unwrap();
        s.insert_far(far(1, None)).unwrap();
        let mut u = Urr::new(UrrId(1));
        u.triggers = ReportingTriggers::PERIO;
        u.measurement_period_s = Some(86_400);
        s.insert_urr(u).unwrap();
        Arc::new(s)
    }

    /// Modifications of sessions with far-off deadlines leave no more timer entries than a
    /// few per session, however many there were.
    #[test]
    fn reinstalls_do_not_grow_the_timer_heap() {
        let now = Instant::now();
        let mut p = Pipeline::new(now, PipelineConfig::default());
        for i in 0..10_000u64 {
            p.install(now, periodic(1 + i % 3), InstallFlags::default())
                .unwrap();
        }
        assert!(
            p.timers.len() <= 4 * p.slots.len() + 65,
            "{}",
            p.timers.len()
        );
        // The current deadlines are all still there.
        for seid in 1..=3 {
            let slot = p.by_seid[&Seid(seid)];
            let g = p.generations[slot as usize];
            assert!(p.timers.iter().any(|r| r.0 .1 == slot && r.0 .2 == g));
        }
    }
}
