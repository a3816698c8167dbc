//! What the UP function tells the SMF unasked: Session Report Requests (TS 29.244 §6.3.5 /
//! §7.5.8) built from data-path events, and Usage Reports in every message that carries them.

use crate::agent::{Agent, Event, Pending};
use crate::session::SessionCtx;
use std::time::Instant;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Multi};
use upf_rules::{Datapath, DatapathEvent, InstallFlags, Seid, UsageReport as Usage, UsageTrigger};

impl<D: Datapath> Agent<D> {
    /// A data-path usage report as a PFCP Usage Report IE (§7.5.8.3), numbered per URR,
    /// carrying what the URR's Measurement Method asks for (§8.2.40: volume, duration). The
    /// URR is looked up in the session's rules, then in `removed` (the rules before a
    /// modification that removed it).
    pub(crate) fn usage_report(
        &self,
        ctx: &mut SessionCtx,
        u: &Usage,
        query_ref: Option<QueryUrrReference>,
        removed: Option<&upf_rules::Session>,
    ) -> UsageReport {
        let method = ctx
            .rules
            .urr(u.urr)
            .or_else(|| removed.and_then(|s| s.urr(u.urr)))
            .map_or(upf_rules::MeasurementMethod::all(), |x| x.method);
        let volume = method.contains(upf_rules::MeasurementMethod::VOLUM);
        let duration = method.contains(upf_rules::MeasurementMethod::DURAT);
        let seqn = match ctx.ur_seqn.iter_mut().find(|(id, _)| *id == u.urr) {
            Some((_, n)) => {
                *n = n.wrapping_add(1);
                *n - 1
            }
            None => {
                ctx.ur_seqn.push((u.urr, 1));
                0
            }
        };
        let v = u.volume;
        UsageReport {
            urr_id: UrrId(u.urr.0),
            ur_seqn: UrSeqn(seqn),
            usage_report_trigger: UsageReportTrigger::from_bits_retain(u.trigger.bits()),
            start_time: u.start.map(|t| StartTime(self.ntp(t))),
            end_time: Some(EndTime(self.ntp(u.end))),
            volume_measurement: volume.then_some(VolumeMeasurement {
                total_volume: Some(v.total_bytes),
                uplink_volume: Some(v.uplink_bytes),
                downlink_volume: Some(v.downlink_bytes),
                total_packets: Some(v.total_packets),
                uplink_packets: Some(v.uplink_packets),
                downlink_packets: Some(v.downlink_packets),
            }),
            duration_measurement: duration.then(|| {
                DurationMeasurement(u32::try_from(u.duration.as_secs()).unwrap_or(u32::MAX))
            }),
            time_of_first_packet: u.first_packet.map(|t| TimeOfFirstPacket(self.ntp(t))),
            time_of_last_packet: u.last_packet.map(|t| TimeOfLastPacket(self.ntp(t))),
            usage_information: (!u.usage_information.is_empty())
                .then(|| UsageInformation::from_bits_retain(u.usage_information.bits())),
            query_urr_reference: query_ref,
            ..Default::default()
        }
    }

    /// Turns every pending data-path event into a report to the SMF (or a Node Report).
    pub fn handle_datapath_events(&mut self, now: Instant) {
        let mut next = self.dp.poll_event();
        while let Some(e) = next {
            next = self.dp.poll_event();
            // The LIUSA reports that follow a URR's report (§5.2.2.4) go in its message, as
            // does the usage after a Monitoring Time that follows the usage before it.
            let mut linked = Vec::new();
            if let DatapathEvent::Usage(u) = &e {
                let (seid, urr) = (u.seid, u.urr);
                let after = upf_rules::UsageInformation::AFT;
                while let Some(DatapathEvent::Usage(l)) = next.take_if(|n| {
                    matches!(n, DatapathEvent::Usage(l)
                        if l.seid == seid && (l.trigger == UsageTrigger::LIUSA
                            || l.urr == urr && l.usage_information == after))
                }) {
                    linked.push(l);
                    next = self.dp.poll_event();
                }
            }
            self.datapath_event(now, e, linked);
        }
    }

    fn datapath_event(&mut self, now: Instant, e: DatapathEvent, linked: Vec<Usage>) {
        let (seid, report_type) = match &e {
            DatapathEvent::PeerUnreachable { peer } => return self.node_report(now, *peer, true),
            DatapathEvent::PeerRestored { peer } => return self.node_report(now, *peer, false),
            DatapathEvent::Usage(u) => (u.seid, ReportType::USAR),
            DatapathEvent::DownlinkData { seid, .. } => (*seid, ReportType::DLDR),
            DatapathEvent::ErrorIndication { seid, .. } => (*seid, ReportType::ERIR),
            DatapathEvent::Inactive { seid } => (*seid, ReportType::UPIR),
        };
        let Some(mut ctx) = self.sessions.remove(&seid) else {
            return;
        };
        let mut m = SessionReportRequest {
            report_type,
            ..Default::default()
        };
        match e {
            DatapathEvent::Usage(u) => {
                for u in std::iter::once(&u).chain(&linked) {
                    let r = self.usage_report(&mut ctx, u, None, None);
                    m.usage_reports.push(r);
                }
            }
            DatapathEvent::DownlinkData { pdr, qfi, ppi, .. } => {
                let info =
                    (qfi.is_some() || ppi.is_some()).then_some(DownlinkDataServiceInformation {
                        paging_policy_indication: ppi,
                        qfi: qfi.map(|q| q.0),
                    });
                m.downlink_data_report = Some(DownlinkDataReport {
                    pdr_ids: [PdrId(pdr.0)].into_iter().collect(),
                    downlink_data_service_information: info.into_iter().collect(),
                });
            }
            DatapathEvent::ErrorIndication { teid, peer, .. } => {
                let (ipv4, ipv6) = match peer {
                    std::net::IpAddr::V4(a) => (Some(a), None),
                    std::net::IpAddr::V6(a) => (None, Some(a)),
                };
                let f: Multi<FTeid> = [FTeid::Assigned {
                    teid: teid.0,
                    ipv4,
                    ipv6,
                }]
                .into_iter()
                .collect();
                m.error_indication_report = Some(ErrorIndicationReport { remote_f_teids: f });
            }
            _ => {}
        }
        let (dest, cp_seid) = (ctx.cp.addr, ctx.rules.cp_seid.0);
        self.sessions.insert(seid, ctx);
        // Its UR-SEQNs moved on: after a restart they go on from there.
        self.session_changed(seid);
        self.request(
            now,
            dest,
            Some(cp_seid),
            m.into(),
            Pending::SessionReport(seid),
        );
    }

    /// §6.3.5: the SMF's answer to a Session Report Request. "Session context not found"
    /// means the SMF has forgotten the session, so it is released here too; Update BAR and
    /// DROBU change the installed session.
    pub(crate) fn session_report_answered(
        &mut self,
        now: Instant,
        seid: Seid,
        m: SessionReportResponse,
    ) {
        if m.cause == Cause::SESSION_CONTEXT_NOT_FOUND {
            self.delete_session(now, seid, "unknown to the SMF");
            return;
        }
        let drobu = m
            .pfcpsrrsp_flags
            .is_some_and(|f| f.contains(PfcpSrRspFlags::DROBU));
        let Some(ctx) = self.sessions.get(&seid) else {
            return;
        };
        if m.update_bar.is_none() && !drobu {
            return;
        }
        let mut s = (*ctx.rules).clone();
        // The Update BAR applies to the BAR it names (the session has at most one).
        let bar = s.bar.as_mut();
        if let Some((u, b)) = m
            .update_bar
            .as_ref()
            .zip(bar)
            .filter(|(u, b)| b.id.0 == u.bar_id.0)
        {
            if let Some(d) = u.downlink_data_notification_delay {
                b.downlink_data_notification_delay_ms = d.as_millis();
            }
            if let Some(c) = u.suggested_buffering_packets_count {
                b.suggested_buffering_packets = Some(c.0);
            }
            // Extended buffering (§5.2.4.1): how long and how many. Infinite, or the timer
            // stopped (zero), leaves no limit of time.
            if let Some(d) = u.dl_buffering_duration {
                b.dl_buffering_duration_s = d.as_secs().filter(|&s| s > 0);
            }
            if let Some(c) = u.dl_buffering_suggested_packet_count {
                b.dl_buffering_packets = Some(c.0);
            }
        }
        let rules = std::sync::Arc::new(s);
        let flags = InstallFlags {
            send_end_marker: false,
            drop_buffered: drobu,
        };
        match self.dp.install(now, rules.clone(), flags) {
            Ok(_) => {
                if let Some(c) = self.sessions.get_mut(&seid) {
                    c.rules = rules;
                }
                self.session_changed(seid);
            }
            Err(_) => {
                self.stats.internal_errors += 1;
                let peer = self.sessions.get(&seid).map(|c| c.cp.addr);
                if let Some(peer) = peer {
                    self.event(Event::Dropped {
                        peer,
                        why: "could not apply the Session Report Response",
                    });
                }
            }
        }
    }
}
