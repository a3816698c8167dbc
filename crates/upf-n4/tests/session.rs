//! Session procedures (TS 29.244 §6.3), atomicity, causes and interop leniency, against an SMF
//! emulator with a virtual clock and the recording data path.
mod harness;

use harness::*;
use std::net::Ipv4Addr;
use std::time::Duration;
use upf_n4::Config;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, List, Message};
use upf_rules::mem::Op;
use upf_rules::{
    ApplyAction as RA, DatapathError, DatapathEvent, Interface, OuterHeaderCreation as ROhc, Seid,
};
use upf_smf::{self as smf, UeAddr};

fn teid_of(c: &CreatedPdr) -> u32 {
    match c.local_f_teid {
        Some(FTeid::Assigned { teid, .. }) => teid,
        ref x => panic!("{x:?}"),
    }
}

#[test]
fn establishment_allocates_and_installs() {
    let mut s = Smf::associated();
    let (hdr_seid, r) = s.establish(UeAddr::Choose);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(hdr_seid, Some(s.cp_seid), "response carries the CP SEID");
    let up = r.up_f_seid.unwrap();
    assert!(up.seid != 0 && up.ipv4 == Some(UPF_IP));
    // PDRs 1 and 3 chose with CHOOSE ID 1: one TEID; every CHV4 PDR got the same address.
    let created: Vec<&CreatedPdr> = r.created_pdrs.iter().collect();
    assert_eq!(created.len(), 4);
    let c1 = created.iter().find(|c| c.pdr_id == PdrId(1)).unwrap();
    let c3 = created.iter().find(|c| c.pdr_id == PdrId(3)).unwrap();
    assert_eq!(teid_of(c1), teid_of(c3));
    assert!(matches!(c1.local_f_teid, Some(FTeid::Assigned { ipv4: Some(a), .. }) if a == UPF_IP));
    let ue = c1.ue_ip_addresses[0].ipv4.unwrap();
    assert_eq!(ue.octets()[..2], [10, 60]);
    assert!(created
        .iter()
        .all(|c| c.ue_ip_addresses[0].ipv4 == Some(ue)));
    // The data path holds the session with everything resolved.
    let dp = s.agent.datapath().session(Seid(up.seid)).unwrap();
    assert_eq!(
        (dp.pdrs.len(), dp.fars.len(), dp.qers.len(), dp.urrs.len()),
        (4, 4, 2, 2)
    );
    assert_eq!(
        dp.pdr(upf_rules::PdrId(1))
            .unwrap()
            .pdi
            .local_f_teid
            .unwrap()
            .teid
            .0,
        teid_of(c1)
    );
    assert_eq!(
        dp.pdr(upf_rules::PdrId(2)).unwrap().pdi.ue_ip.unwrap().ipv4,
        Some(ue)
    );
    assert!(
        dp.pdr(upf_rules::PdrId(2))
            .unwrap()
            .pdi
            .ue_ip
            .unwrap()
            .is_destination
    );
    // A second session gets another TEID and address.
    let (_, r2) = s.establish(UeAddr::Choose);
    assert_ne!(teid_of(&r2.created_pdrs[0]), teid_of(c1));
    assert_ne!(r2.created_pdrs[0].ue_ip_addresses[0].ipv4, Some(ue));
}

/// Rule vectors live as long as their session: no spare capacity (memory per session).
#[test]
fn established_rules_have_exact_capacities() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let dp = s.agent.datapath().session(Seid(seid)).unwrap().clone();
    assert_eq!(
        (dp.pdrs.capacity(), dp.fars.capacity()),
        (dp.pdrs.len(), dp.fars.len())
    );
    assert_eq!(
        (dp.qers.capacity(), dp.urrs.capacity()),
        (dp.qers.len(), dp.urrs.len())
    );
    // Equal SDF filter lists are one copy, in a session and across sessions.
    let other = s.establish_ok();
    let dp2 = s.agent.datapath().session(Seid(other)).unwrap();
    for (a, b) in dp.pdrs.iter().zip(&dp2.pdrs) {
        assert!(!a.pdi.sdf_filters.is_empty());
        assert!(a.pdi.sdf_filters.ptr_eq(&b.pdi.sdf_filters));
    }
    // So are network instances, of PDIs and of forwarding parameters.
    assert_eq!(dp.pdrs[0].pdi.network_instance(), Some("internet"));
    assert!(dp.pdrs[0].pdi.extra.ptr_eq(&dp2.pdrs[1].pdi.extra));
    let fw = |s: &upf_rules::Session, i: usize| s.fars[i].forwarding.clone().unwrap();
    assert_eq!(fw(&dp, 0).network_instance(), Some("internet"));
    assert!(fw(&dp, 0).extra.ptr_eq(&fw(&dp, 1).extra));
    assert!(fw(&dp, 0).extra.ptr_eq(&fw(dp2, 0).extra));
}

#[test]
fn static_ue_address_and_no_created_pdr_for_it() {
    let mut s = Smf::associated();
    let (_, r) = s.establish(UeAddr::Static(Ipv4Addr::new(10, 45, 0, 7)));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    // Only the F-TEID was chosen.
    assert!(r.created_pdrs.iter().all(|c| c.ue_ip_addresses.is_empty()));
    assert_eq!(r.created_pdrs.len(), 2);
}

#[test]
fn modification_updates_far_then_query_and_delete_report_usage() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let mut m = smf::modification();
    m.update_fars.push(smf::update_far_to_gnb(
        4,
        0x1234,
        Ipv4Addr::new(127, 0, 0, 3),
    ));
    m.pfcpsmreq_flags = Some(PfcpSmReqFlags::SNDEM);
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let far = s
        .agent
        .datapath()
        .session(Seid(seid))
        .unwrap()
        .far(upf_rules::FarId(4))
        .cloned()
        .unwrap();
    assert!(far.action.contains(RA::FORW));
    let fw = far.forwarding.unwrap();
    assert_eq!(fw.destination, Interface::Access);
    assert_eq!(
        fw.outer_header_creation,
        Some(ROhc::Gtpu {
            teid: upf_rules::Teid(0x1234),
            peer: "127.0.0.3".parse().unwrap()
        })
    );
    assert!(
        matches!(s.agent.datapath().log.last(), Some(Op::Install { flags, .. }) if flags.send_end_marker)
    );
    // Query URR: usage measured so far, trigger IMMER, UR-SEQN counting per URR.
    s.agent
        .datapath_mut()
        .add_usage(Seid(seid), upf_rules::UrrId(1), 1500, true);
    s.agent
        .datapath_mut()
        .add_usage(Seid(seid), upf_rules::UrrId(1), 500, false);
    s.now += Duration::from_secs(7);
    let mut q = smf::modification();
    q.query_urrs.push(QueryUrr { urr_id: UrrId(1) });
    let r = s.modify(seid, q.clone());
    let u = &r.usage_reports[0];
    assert_eq!(
        (u.urr_id, u.ur_seqn, u.usage_report_trigger),
        (UrrId(1), UrSeqn(0), UsageReportTrigger::IMMER)
    );
    let v = u.volume_measurement.unwrap();
    assert_eq!(
        (
            v.total_volume,
            v.uplink_volume,
            v.downlink_volume,
            v.total_packets
        ),
        (Some(2000), Some(1500), Some(500), Some(2))
    );
    assert_eq!(u.duration_measurement, Some(DurationMeasurement(7)));
    assert_eq!(u.end_time, Some(EndTime(NTP0 + 7)));
    let r = s.modify(seid, q);
    assert_eq!(r.usage_reports[0].ur_seqn, UrSeqn(1));
    assert_eq!(
        r.usage_reports[0].volume_measurement.unwrap().total_volume,
        Some(0),
        "query restarted the count"
    );
    // Deletion: final usage of both URRs, TERMR.
    s.agent
        .datapath_mut()
        .add_usage(Seid(seid), upf_rules::UrrId(2), 64, true);
    let (hdr, d) = s.delete(seid);
    assert_eq!(d.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(hdr, Some(s.cp_seid));
    assert_eq!(d.usage_reports.len(), 2);
    assert!(d
        .usage_reports
        .iter()
        .all(|u| u.usage_report_trigger == UsageReportTrigger::TERMR));
    assert_eq!(s.agent.session_count(), 0);
    assert!(s.agent.datapath().is_empty());
}

#[test]
fn remove_urr_returns_its_usage() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    s.agent
        .datapath_mut()
        .add_usage(Seid(seid), upf_rules::UrrId(2), 100, false);
    let mut m = smf::modification();
    m.remove_urrs.push(RemoveUrr { urr_id: UrrId(2) });
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(r.usage_reports.len(), 1);
    assert_eq!(r.usage_reports[0].urr_id, UrrId(2));
    assert_eq!(
        r.usage_reports[0].usage_report_trigger,
        UsageReportTrigger::TERMR
    );
    assert_eq!(
        r.usage_reports[0]
            .volume_measurement
            .unwrap()
            .downlink_volume,
        Some(100)
    );
}

/// TS 29.244 §6.3.3.3: removing a FAR, QER, URR or BAR that rules still refer to removes the
/// rule and its ID from those rules; the request is accepted.
#[test]
fn removing_a_referenced_rule_removes_the_references() {
    use upf_rules as ru;
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let mut m = smf::modification();
    // URR 2 is used by PDRs 3 and 4, QER 2 by PDRs 1 and 2, FAR 3 by PDR 3, BAR 1 by FAR 4.
    m.remove_urrs.push(RemoveUrr { urr_id: UrrId(2) });
    m.remove_qers.push(RemoveQer { qer_id: QerId(2) });
    m.remove_fars.push(RemoveFar { far_id: FarId(3) });
    m.remove_bar = Some(RemoveBar { bar_id: BarId(1) });
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(r.usage_reports.len(), 1, "the removed URR's final report");
    let ses = s.agent.datapath().session(Seid(seid)).unwrap().clone();
    assert!(ses.urr(ru::UrrId(2)).is_none() && ses.qer(ru::QerId(2)).is_none());
    assert!(ses.far(ru::FarId(3)).is_none() && ses.bar.is_none());
    for id in [1, 2, 3, 4] {
        let p = ses.pdr(ru::PdrId(id)).unwrap();
        let urrs: &[ru::UrrId] = if id < 3 { &[ru::UrrId(1)] } else { &[] };
        assert_eq!(p.urrs.as_slice(), urrs, "PDR {id}");
        assert_eq!(p.qers.as_slice(), &[ru::QerId(1)], "PDR {id}");
    }
    assert_eq!(
        ses.pdr(ru::PdrId(3)).unwrap().far,
        None,
        "detects and drops"
    );
    assert_eq!(ses.pdr(ru::PdrId(4)).unwrap().far, Some(ru::FarId(4)));
    assert_eq!(ses.far(ru::FarId(4)).unwrap().bar, None);
    // A rule that does not exist is still refused.
    let mut m = smf::modification();
    m.remove_qers.push(RemoveQer { qer_id: QerId(9) });
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
}

#[test]
fn failed_modification_changes_nothing() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let before = s.agent.datapath().session(Seid(seid)).unwrap().clone();
    let teids_before = teid_count(&s);
    let installs = s.agent.datapath().log.len();
    // A valid part (new uplink PDR choosing a new TEID, a FAR update) and a bad part (a PDR
    // naming a FAR that does not exist).
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(4, 0x99, Ipv4Addr::new(127, 0, 0, 9)));
    m.create_pdrs.push(smf::create_pdr(
        7,
        10,
        smf::pdi(
            SourceInterface::ACCESS,
            Some(smf::choose_teid(7)),
            None,
            None,
        ),
        1,
        &[],
        &[],
        true,
    ));
    m.create_pdrs.push(smf::create_pdr(
        8,
        10,
        smf::pdi(SourceInterface::CORE, None, None, None),
        42,
        &[],
        &[],
        false,
    ));
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(PdrId(8))));
    assert_eq!(r.offending_ie, Some(OffendingIe(108)));
    assert_eq!(
        **s.agent.datapath().session(Seid(seid)).unwrap(),
        *before,
        "data path untouched"
    );
    assert_eq!(s.agent.datapath().log.len(), installs, "nothing installed");
    assert_eq!(
        teid_count(&s),
        teids_before,
        "the TEID chosen for PDR 7 went back"
    );
    // The data path refusing: same outcome, with its cause.
    s.agent.datapath_mut().fail_next = Some(DatapathError::NoResources("test"));
    let mut m = smf::modification();
    m.update_fars
        .push(smf::update_far_to_gnb(4, 0x99, Ipv4Addr::new(127, 0, 0, 9)));
    assert_eq!(s.modify(seid, m).cause, Cause::NO_RESOURCES_AVAILABLE);
    assert_eq!(**s.agent.datapath().session(Seid(seid)).unwrap(), *before);
}

fn teid_count(s: &Smf) -> usize {
    // Every chosen TEID so far is unique; a fresh session reveals the next one.
    s.agent
        .datapath()
        .sessions()
        .flat_map(|x| x.pdrs.iter().filter_map(|p| p.pdi.local_f_teid))
        .map(|f| f.teid)
        .collect::<std::collections::HashSet<_>>()
        .len()
}

#[test]
fn failed_establishment_returns_its_allocations() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.ue_pools[0].ipv4 = Some((Ipv4Addr::new(10, 60, 0, 0), 30)); // 2 addresses
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    s.agent.datapath_mut().fail_next = Some(DatapathError::Internal("boom".into()));
    let (_, r) = s.establish(UeAddr::Choose);
    assert_eq!(r.cause, Cause::SYSTEM_FAILURE);
    assert_eq!(s.agent.stats.internal_errors, 1);
    // Both addresses are still there; then the pool is exhausted: cause 79.
    assert_eq!(s.establish(UeAddr::Choose).1.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(s.establish(UeAddr::Choose).1.cause, Cause::REQUEST_ACCEPTED);
    let (_, r) = s.establish(UeAddr::Choose);
    assert_eq!(r.cause, Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED);
    assert_eq!(r.offending_ie, Some(OffendingIe(93)));
    assert!(matches!(r.failed_rule_id, Some(FailedRuleId::Pdr(_))));
    assert_eq!(s.agent.session_count(), 2);
}

#[test]
fn causes_of_refused_session_requests() {
    let mut s = Smf::new();
    // No association.
    assert_eq!(
        s.establish(UeAddr::Choose).1.cause,
        Cause::NO_ESTABLISHED_PFCP_ASSOCIATION
    );
    s.associate(1);
    // Unknown SEID.
    let (hdr, d) = s.delete(0xdead);
    assert_eq!((hdr, d.cause), (Some(0), Cause::SESSION_CONTEXT_NOT_FOUND));
    assert_eq!(
        s.modify(0xdead, smf::modification()).cause,
        Cause::SESSION_CONTEXT_NOT_FOUND
    );
    // No Create FAR at all.
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_fars = List::new();
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.offending_ie),
        (Cause::MANDATORY_IE_MISSING, Some(OffendingIe(3)))
    );
    // A PDR without FAR ID (conditional IE, required without predefined rules).
    let mut req = smf::establishment(s.node.clone(), 2, SMF_IP, UeAddr::Choose);
    req.create_pdrs[0].far_id = None;
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::CONDITIONAL_IE_MISSING,
            Some(FailedRuleId::Pdr(PdrId(1)))
        )
    );
    // A PDR naming a QER that does not exist.
    let mut req = smf::establishment(s.node.clone(), 3, SMF_IP, UeAddr::Choose);
    req.create_pdrs[1].qer_ids.push(QerId(9));
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.failed_rule_id, r.offending_ie),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(PdrId(2))),
            Some(OffendingIe(109))
        )
    );
    // Two FARs with the same id.
    let mut req = smf::establishment(s.node.clone(), 4, SMF_IP, UeAddr::Choose);
    let dup = req.create_fars[0].clone();
    req.create_fars.push(dup);
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Far(FarId(1)))
        )
    );
    // An unreadable flow description.
    let mut req = smf::establishment(s.node.clone(), 5, SMF_IP, UeAddr::Choose);
    req.create_pdrs[0].pdi.sdf_filters[0].flow_description = Some("permit sideways".into());
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.offending_ie),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(OffendingIe(23))
        )
    );
    // An Apply Action with nothing to do.
    let mut req = smf::establishment(s.node.clone(), 6, SMF_IP, UeAddr::Choose);
    req.create_fars[0].apply_action = ApplyAction::empty();
    let (_, r) = s.establish_with(req);
    assert_eq!(
        (r.cause, r.offending_ie, r.failed_rule_id),
        (
            Cause::MANDATORY_IE_INCORRECT,
            Some(OffendingIe(44)),
            Some(FailedRuleId::Far(FarId(1)))
        )
    );
    // CHOOSE an IPv6 F-TEID from a UPF with only IPv4 tunnel addresses.
    let mut req = smf::establishment(s.node.clone(), 7, SMF_IP, UeAddr::Choose);
    req.create_pdrs[0].pdi.local_f_teid = Some(FTeid::Choose {
        ipv4: false,
        ipv6: true,
        choose_id: Some(1),
    });
    assert_eq!(
        s.establish_with(req).1.cause,
        Cause::INVALID_F_TEID_ALLOCATION_OPTION
    );
    assert_eq!(
        s.agent.session_count(),
        0,
        "every refusal left nothing behind"
    );
    assert!(s.agent.datapath().is_empty());
}

#[test]
fn limits_are_enforced_with_causes() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.limits.sessions = 1;
    cfg.limits.rules_per_session = 3;
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    // 4 PDRs > 3 rules per session.
    assert_eq!(
        s.establish(UeAddr::Choose).1.cause,
        Cause::NO_RESOURCES_AVAILABLE
    );
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_pdrs.0.truncate(2);
    req.create_fars.0.truncate(2);
    req.create_fars[1].bar_id = None;
    assert_eq!(
        s.establish_with(req.clone()).1.cause,
        Cause::REQUEST_ACCEPTED
    );
    req.cp_f_seid.seid = 2;
    assert_eq!(
        s.establish_with(req).1.cause,
        Cause::NO_RESOURCES_AVAILABLE,
        "session cap"
    );
}

#[test]
fn retransmitted_request_answered_from_cache_without_reexecution() {
    let mut s = Smf::associated();
    let req = smf::encode(
        Some(0),
        500,
        smf::establishment(s.node.clone(), 77, SMF_IP, UeAddr::Choose),
    );
    let first = s.send_bytes(&req);
    let again = s.send_bytes(&req);
    assert_eq!(first, again, "identical response");
    assert_eq!(s.agent.session_count(), 1, "executed once");
    assert_eq!(s.agent.stats.retransmissions_answered, 1);
    // After the cache TTL a request with that sequence number is new again.
    s.advance(Duration::from_secs(61));
    let third = s.send_bytes(&req);
    assert_eq!(decode(&third[0]).message.message_type(), 51);
    assert_eq!(
        s.agent.session_count(),
        1,
        "same CP F-SEID: the session was replaced, not doubled"
    );
}

#[test]
fn session_reports_from_datapath_events() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let cp = s.cp_seid;
    s.agent
        .datapath_mut()
        .push_event(DatapathEvent::DownlinkData {
            seid: Seid(seid),
            pdr: upf_rules::PdrId(4),
            qfi: Some(upf_rules::Qfi(9)),
            ppi: None,
        });
    let out = s.advance(Duration::from_millis(1));
    assert_eq!(out.len(), 1);
    let p = decode(&out[0]);
    assert_eq!(p.header.seid, Some(cp));
    let Message::SessionReportRequest(m) = &p.message else {
        panic!("{p:?}")
    };
    assert_eq!(m.report_type, ReportType::DLDR);
    let d = m.downlink_data_report.as_ref().unwrap();
    assert_eq!(
        (&d.pdr_ids[..], d.downlink_data_service_information[0].qfi),
        (&[PdrId(4)][..], Some(9))
    );
    // Unanswered: retransmitted N1 times, then given up; the session stays.
    let out = s.run_for(Duration::from_secs(13), Duration::from_millis(500));
    assert_eq!(
        out.iter()
            .filter(|t| decode(t).message.message_type() == 56)
            .count(),
        3
    );
    assert_eq!(s.agent.stats.requests_given_up, 1);
    assert_eq!(s.agent.session_count(), 1);
    // A usage report answered "context not found": the SMF forgot it, so the UPF does too.
    let r = upf_rules::UsageReport {
        seid: Seid(seid),
        urr: upf_rules::UrrId(1),
        trigger: upf_rules::UsageTrigger::VOLTH,
        start: Some(s.now),
        end: s.now,
        volume: Default::default(),
        duration: Duration::ZERO,
        first_packet: None,
        last_packet: None,
        usage_information: Default::default(),
    };
    s.agent.datapath_mut().push_event(DatapathEvent::Usage(r));
    let out = s.advance(Duration::from_millis(1));
    let p = decode(&out[0]);
    let Message::SessionReportRequest(m) = &p.message else {
        panic!()
    };
    assert_eq!(
        (m.report_type, m.usage_reports[0].usage_report_trigger),
        (ReportType::USAR, UsageReportTrigger::VOLTH)
    );
    let resp = SessionReportResponse {
        cause: Cause::SESSION_CONTEXT_NOT_FOUND,
        ..Default::default()
    };
    assert!(s
        .send_bytes(&smf::encode(Some(seid), p.header.sequence, resp))
        .is_empty());
    assert_eq!(s.agent.session_count(), 0);
}

#[test]
fn path_failure_becomes_a_node_report() {
    let mut s = Smf::associated();
    s.agent
        .datapath_mut()
        .push_event(DatapathEvent::PeerUnreachable {
            peer: "192.0.2.9".parse().unwrap(),
        });
    let out = s.advance(Duration::from_millis(1));
    let Message::NodeReportRequest(m) = decode(&out[0]).message else {
        panic!()
    };
    assert_eq!(m.node_report_type, NodeReportType::UPFR);
    assert_eq!(
        m.user_plane_path_failure_report.unwrap().remote_gtpu_peers[0].ipv4,
        Some("192.0.2.9".parse().unwrap())
    );
}

/// Our requests awaiting a response are bounded in bytes too: one more that would pass the
/// bound is not sent, and counted.
#[test]
fn requests_beyond_the_pending_bytes_are_counted_not_sent() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.limits.pending_request_bytes = 100;
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    for _ in 0..4 {
        s.agent
            .datapath_mut()
            .push_event(DatapathEvent::PeerUnreachable {
                peer: "192.0.2.9".parse().unwrap(),
            });
    }
    let out = s.advance(Duration::from_millis(1));
    let len = out[0].payload.len();
    assert!(out.iter().all(|t| t.payload.len() == len));
    let sent = out.len();
    assert!(
        sent * len <= 100 && (sent + 1) * len > 100,
        "{sent} of {len} B"
    );
    assert_eq!(s.agent.stats.reports_dropped_bytes, 4 - sent as u64);
    assert_eq!(s.agent.stats.reports_dropped, 0);
}

/// A response is kept for the SMF's (N1 + 1) x T1, and the cache's bounds and evictions are
/// what the agent reports.
#[test]
fn response_kept_for_the_smfs_retransmission_window() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.smf_t1 = Duration::from_secs(2);
    cfg.smf_n1 = 4;
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    let hb = smf::encode(
        None,
        900,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1),
            source_ip_address: None,
        },
    );
    s.send_bytes(&hb);
    s.advance(Duration::from_millis(9_999));
    s.send_bytes(&hb);
    assert_eq!(s.agent.stats.retransmissions_answered, 1);
    s.advance(Duration::from_millis(1));
    s.send_bytes(&hb);
    assert_eq!(s.agent.stats.retransmissions_answered, 1, "10 s: expired");
    assert!(s.agent.response_cache().expired >= 1);
}

#[test]
fn one_peers_responses_evict_only_its_own() {
    use upf_n4::reliability::CACHE_ENTRY_OVERHEAD;
    let mut cfg = Config::new(UPF_IP.into());
    // Room for three heartbeat responses (16 B) per peer address.
    cfg.limits.response_cache_bytes_per_peer = 3 * (16 + CACHE_ENTRY_OVERHEAD);
    let mut s = Smf::with_config(cfg);
    let hb = |seq| {
        smf::encode(
            None,
            seq,
            HeartbeatRequest {
                recovery_time_stamp: RecoveryTimeStamp(1),
                source_ip_address: None,
            },
        )
    };
    // Both peers associated: responses to senders without an association are not kept.
    let other_ip = Ipv4Addr::new(127, 0, 0, 3);
    let other = std::net::SocketAddr::from((other_ip, 8805));
    let setup = smf::association_setup(NodeId::Ipv4(other_ip), 1);
    s.agent
        .handle_datagram(s.now, other, &smf::encode(None, 99, setup));
    s.drain();
    s.associate(1);
    s.agent.handle_datagram(s.now, other, &hb(1));
    for seq in 101..=110 {
        s.send_bytes(&hb(seq));
    }
    let c = s.agent.response_cache();
    // This peer's association setup response and 10 heartbeat responses: the last 3 kept;
    // the other's two (setup, heartbeat) untouched.
    assert_eq!(c.evicted, [0, 0, 8]);
    assert_eq!(c.entries, 5);
    s.drain();
    s.agent.handle_datagram(s.now, other, &hb(1));
    assert_eq!(
        s.agent.stats.retransmissions_answered, 1,
        "the other peer's stays"
    );
}

#[test]
fn session_set_deletion_by_csid() {
    let mut s = Smf::associated();
    for csid in [1u16, 2, 1] {
        s.cp_seid += 1;
        let mut req = smf::establishment(s.node.clone(), s.cp_seid, SMF_IP, UeAddr::Choose);
        req.fq_csids.push(FqCsid {
            node_address: FqCsidNodeAddress::Ipv4(SMF_IP),
            csids: [csid].into_iter().collect(),
        });
        assert_eq!(s.establish_with(req).1.cause, Cause::REQUEST_ACCEPTED);
    }
    let r = s.request(
        None,
        SessionSetDeletionRequest {
            node_id: s.node.clone(),
            fq_csids: [FqCsid {
                node_address: FqCsidNodeAddress::Ipv4(SMF_IP),
                csids: [1].into_iter().collect(),
            }]
            .into_iter()
            .collect(),
        },
    );
    assert!(
        matches!(r.message, Message::SessionSetDeletionResponse(ref m) if m.cause == Cause::REQUEST_ACCEPTED)
    );
    assert_eq!(s.agent.session_count(), 1);
}

// ---- interop leniency: each a shape seen from SMFs in the field -----------------------------

#[test]
fn leniency_outer_header_removal_6_and_one_octet() {
    let mut s = Smf::associated();
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_pdrs[0].outer_header_removal = Some(OuterHeaderRemoval {
        outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IP,
        gtpu_extension_header_deletion: Some(1),
    });
    req.create_pdrs[2].outer_header_removal = Some(OuterHeaderRemoval {
        outer_header_removal_description: 0,
        gtpu_extension_header_deletion: None,
    });
    let (_, r) = s.establish_with(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let dp = s
        .agent
        .datapath()
        .session(Seid(r.up_f_seid.unwrap().seid))
        .unwrap()
        .clone();
    use upf_rules::OuterHeaderRemoval as O;
    assert_eq!(
        dp.pdr(upf_rules::PdrId(1)).unwrap().outer_header_removal,
        Some(O::GtpuUdpIp {
            delete_pdu_session_container: true
        })
    );
    assert_eq!(
        dp.pdr(upf_rules::PdrId(3)).unwrap().outer_header_removal,
        Some(O::GtpuUdpIp {
            delete_pdu_session_container: false
        })
    );
}

#[test]
fn leniency_one_octet_apply_action_on_the_wire() {
    let mut s = Smf::associated();
    let req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    let mut b = smf::encode(Some(0), 9, req);
    // Rewrite every 2-octet Apply Action (type 44, length 2) as the 1-octet form.
    let mut i = 16;
    while i + 6 <= b.len() {
        if b[i..i + 4] == [0, 44, 0, 2] {
            b[i + 3] = 1;
            b.remove(i + 5);
            fix_lengths(&mut b);
        }
        i += 1;
    }
    let out = s.send_bytes(&b);
    let Message::SessionEstablishmentResponse(r) = decode(&out[0]).message else {
        panic!()
    };
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let dp = s
        .agent
        .datapath()
        .session(Seid(r.up_f_seid.unwrap().seid))
        .unwrap()
        .clone();
    let a = dp.far(upf_rules::FarId(4)).unwrap().action;
    assert!(
        a.contains(RA::BUFF) && a.contains(RA::NOCP),
        "BUFF|NOCP kept"
    );
}

/// Recomputes the message length and each Create FAR's length after an octet was removed
/// inside a FAR (the only edit made here).
fn fix_lengths(b: &mut [u8]) {
    // The edit removed one octet inside a FAR: shrink the enclosing Create FAR and message.
    let msg_len = u16::try_from(b.len() - 4).unwrap();
    b[2..4].copy_from_slice(&msg_len.to_be_bytes());
    let mut i = 16;
    while i + 4 <= b.len() {
        let t = u16::from_be_bytes([b[i], b[i + 1]]);
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        if t == 3 {
            // Create FAR: its true length is the sum of its IEs.
            let mut j = i + 4;
            let mut end = j;
            while j + 4 <= b.len() {
                let tt = u16::from_be_bytes([b[j], b[j + 1]]);
                if !matches!(tt, 108 | 44 | 4 | 88) {
                    break;
                }
                let l = usize::from(u16::from_be_bytes([b[j + 2], b[j + 3]]));
                j += 4 + l;
                end = j;
            }
            let nl = u16::try_from(end - i - 4).unwrap();
            b[i + 2..i + 4].copy_from_slice(&nl.to_be_bytes());
            i = end;
        } else {
            i += 4 + len;
        }
    }
}

#[test]
fn leniency_several_qers_and_urrs_per_pdr_some_without_mbr() {
    let mut s = Smf::associated();
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_qers[1].mbr = None; // a flow QER with only a QFI
    req.create_pdrs[0].urr_ids.push(UrrId(2));
    let (_, r) = s.establish_with(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let dp = s
        .agent
        .datapath()
        .session(Seid(r.up_f_seid.unwrap().seid))
        .unwrap()
        .clone();
    let p = dp.pdr(upf_rules::PdrId(1)).unwrap();
    assert_eq!((p.qers.len(), p.urrs.len()), (2, 2));
}

#[test]
fn leniency_empty_or_absent_sdf_filter_and_both_directions() {
    let mut s = Smf::associated();
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_pdrs[0].pdi.sdf_filters[0] = SdfFilter::default(); // no field at all
    req.create_pdrs[1].pdi.sdf_filters = Default::default(); // absent
    req.create_pdrs[2].pdi.sdf_filters[0].flow_description =
        Some("permit out 17 from assigned to 10.1.0.0/16 1000-2000".into());
    req.create_pdrs[3].pdi.sdf_filters[0].flow_description = Some(String::new());
    assert_eq!(s.establish_with(req).1.cause, Cause::REQUEST_ACCEPTED);
}

#[test]
fn leniency_modification_pdr_without_fteid_or_ue_ip_inherits_them() {
    let mut s = Smf::associated();
    let (_, r) = s.establish(UeAddr::Choose);
    let seid = r.up_f_seid.unwrap().seid;
    let teid = teid_of(&r.created_pdrs[0]);
    let mut m = smf::modification();
    m.create_qers.push(smf::create_qer(5, None, Some(5)));
    m.create_pdrs.push(smf::create_pdr(
        5,
        50,
        smf::pdi(
            SourceInterface::ACCESS,
            None,
            None,
            Some("permit out ip from 10.9.0.0/16 to assigned"),
        ),
        1,
        &[1, 5],
        &[1],
        true,
    ));
    // A PDR referring to a FAR created by the establishment, and a FAR without forwarding
    // parameters created now and used right away.
    m.create_fars
        .push(smf::create_far(6, ApplyAction::DROP, None, None));
    m.create_pdrs.push(smf::create_pdr(
        6,
        60,
        smf::pdi(SourceInterface::CORE, None, None, None),
        6,
        &[],
        &[],
        false,
    ));
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let dp = s.agent.datapath().session(Seid(seid)).unwrap().clone();
    let p5 = dp.pdr(upf_rules::PdrId(5)).unwrap();
    assert_eq!(p5.pdi.local_f_teid.unwrap().teid.0, teid);
    let ue = p5.pdi.ue_ip.unwrap();
    assert!(!ue.is_destination && ue.ipv4.is_some());
    assert!(
        dp.pdr(upf_rules::PdrId(6))
            .unwrap()
            .pdi
            .ue_ip
            .unwrap()
            .is_destination
    );
}

#[test]
fn leniency_forw_nocp_and_buff_nocp() {
    let mut s = Smf::associated();
    let mut req = smf::establishment(s.node.clone(), 1, SMF_IP, UeAddr::Choose);
    req.create_fars[0].apply_action = ApplyAction::FORW | ApplyAction::NOCP;
    assert_eq!(s.establish_with(req).1.cause, Cause::REQUEST_ACCEPTED);
}

#[test]
fn chosen_teids_of_removed_pdrs_are_released() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let mut m = smf::modification();
    m.create_pdrs.push(smf::create_pdr(
        9,
        10,
        smf::pdi(
            SourceInterface::ACCESS,
            Some(smf::choose_teid(9)),
            None,
            None,
        ),
        1,
        &[],
        &[],
        true,
    ));
    let r = s.modify(seid, m);
    let t9 = teid_of(&r.created_pdrs[0]);
    let mut m = smf::modification();
    m.remove_pdrs.push(RemovePdr { pdr_id: PdrId(9) });
    assert_eq!(s.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
    // CHOOSE ID 9 again gets a new TEID (the old one was released, and is not reused at once).
    let mut m = smf::modification();
    m.create_pdrs.push(smf::create_pdr(
        9,
        10,
        smf::pdi(
            SourceInterface::ACCESS,
            Some(smf::choose_teid(9)),
            None,
            None,
        ),
        1,
        &[],
        &[],
        true,
    ));
    let r = s.modify(seid, m);
    assert_ne!(teid_of(&r.created_pdrs[0]), t9);
}

#[test]
fn released_teids_are_held_off_for_teid_reuse_after() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.teid_range = (7, 8);
    cfg.teid_reuse_after = Duration::from_secs(60);
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    let teid = |r: &SessionEstablishmentResponse| teid_of(&r.created_pdrs[0]);
    // A failed establishment's TEID was never announced: back at once.
    s.agent.datapath_mut().fail_next = Some(DatapathError::Internal("boom".into()));
    assert_eq!(s.establish(UeAddr::Choose).1.cause, Cause::SYSTEM_FAILURE);
    let (_, a) = s.establish(UeAddr::Choose);
    let (_, b) = s.establish(UeAddr::Choose);
    assert_eq!((teid(&a), teid(&b)), (8, 7), "the sweep wrapped to 7");
    s.delete(a.up_f_seid.unwrap().seid);
    s.advance(Duration::from_secs(59));
    // TEID 8 is the only one not in use, and it is held: refused rather than reused early.
    let (_, r) = s.establish(UeAddr::Choose);
    assert_eq!(r.cause, Cause::NO_RESOURCES_AVAILABLE);
    s.advance(Duration::from_secs(1));
    let (_, c) = s.establish(UeAddr::Choose);
    assert_eq!((c.cause, teid(&c)), (Cause::REQUEST_ACCEPTED, 8));
}

/// Establishes a session of the harness's current SMF with QER 1 (an MBR of 200 Mbit/s
/// uplink) carrying Correlation ID `id`; returns its SEID and the aggregate the installed
/// QER holds.
fn correlated(s: &mut Smf, id: u32) -> (u64, upf_rules::AggregateKey) {
    s.cp_seid += 1;
    let ip = match s.addr.ip() {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => unreachable!(),
    };
    let mut req = smf::establishment(s.node.clone(), s.cp_seid, ip, UeAddr::Choose);
    // QER 1: the session AMBR, on every PDR.
    let q = req.create_qers.iter_mut().next().unwrap();
    q.qer_correlation_id = Some(QerCorrelationId(id));
    let (_, r) = s.establish_with(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let seid = r.up_f_seid.unwrap().seid;
    let rules = s.agent.datapath().session(Seid(seid)).unwrap();
    (seid, rules.qers[0].aggregate.expect("an aggregate"))
}

/// QERs with one Correlation ID share one aggregate per SMF (TS 29.244 §5.2.2): those of
/// another SMF with the same id do not, and the aggregate goes with the last session using
/// it.
#[test]
fn a_correlation_id_is_one_aggregate_per_smf_while_sessions_use_it() {
    let mut s = Smf::associated();
    let (a, first) = correlated(&mut s, 7);
    let (b, again) = correlated(&mut s, 7);
    assert_eq!(first, again, "one aggregate for the SMF's id 7");
    let (c, other) = correlated(&mut s, 8);
    assert_ne!(first, other, "id 8 is another");

    // Another SMF, the same id: its own aggregate.
    let (addr, node) = (s.addr, s.node.clone());
    let smf2 = Ipv4Addr::new(127, 0, 0, 3);
    s.addr = std::net::SocketAddr::new(smf2.into(), 8805);
    s.node = NodeId::Ipv4(smf2);
    s.associate(99);
    let (_, theirs) = correlated(&mut s, 7);
    assert_ne!(first, theirs, "another SMF's id 7");
    (s.addr, s.node) = (addr, node);

    // An Update QER moves a QER to another id's aggregate; id 8's goes with it.
    let m = SessionModificationRequest {
        update_qers: [UpdateQer {
            qer_id: QerId(1),
            qer_correlation_id: Some(QerCorrelationId(7)),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(s.modify(c, m).cause, Cause::REQUEST_ACCEPTED);
    let moved = s.agent.datapath().session(Seid(c)).unwrap().qers[0].aggregate;
    assert_eq!(moved, Some(first));
    let (d, renewed) = correlated(&mut s, 8);
    assert_ne!(renewed, other, "id 8 was released with its last session");

    // Gone with the last of its sessions: a new session with id 7 gets a new one.
    for seid in [a, b, c, d] {
        assert_eq!(s.delete(seid).1.cause, Cause::REQUEST_ACCEPTED);
    }
    let (_, fresh) = correlated(&mut s, 7);
    assert_ne!(first, fresh);
}
