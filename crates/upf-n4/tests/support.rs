//! The enforcement tables of `upf_n4::support` against the codec and the agent: every IE the
//! codec decodes in a rule group, and every flag, has a decision; every enforced one names a
//! test that exists; every refused one is refused with its cause and Offending IE, and the
//! request changes nothing; docs/compliance.md shows the tables as they are.

mod harness;

use harness::Smf;
use std::path::Path;
use upf_n4::support::{self, FlagIe, Group, Support};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_rules::Seid;
use upf_smf as smf;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn every_decoded_ie_and_flag_has_a_decision() {
    let mut missing = Vec::new();
    for g in Group::ALL {
        for &(code, field) in g.ies() {
            if support::lookup(g, code).is_none() {
                missing.push(format!("{g:?}.{field} ({code})"));
            }
        }
    }
    for f in FlagIe::ALL {
        for (name, _) in f.flags() {
            if !support::FLAGS.iter().any(|r| r.ie == f && r.flag == name) {
                missing.push(format!("{f:?} flag {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "no decision for: {missing:?}");
    // And nothing is decided twice, or for an IE the group does not carry.
    for (i, r) in support::IES.iter().enumerate() {
        assert!(
            r.group.ies().iter().any(|&(c, _)| c == r.ie),
            "{:?} does not carry IE {}",
            r.group,
            r.ie
        );
        assert!(
            !support::IES[..i]
                .iter()
                .any(|o| o.group == r.group && o.ie == r.ie),
            "{:?} IE {} twice",
            r.group,
            r.ie
        );
    }
    for (i, r) in support::FLAGS.iter().enumerate() {
        assert!(r.ie.flags().iter().any(|&(n, _)| n == r.flag), "{r:?}");
        assert!(
            !support::FLAGS[..i]
                .iter()
                .any(|o| o.ie == r.ie && o.flag == r.flag),
            "{r:?} twice"
        );
    }
}

/// `path::function`: the file exists and defines the function.
fn test_exists(name: &str) -> Result<(), String> {
    let (path, func) = name
        .rsplit_once("::")
        .ok_or_else(|| format!("{name}: not path::function"))?;
    let text =
        std::fs::read_to_string(root().join(path)).map_err(|e| format!("{name}: {path}: {e}"))?;
    if text.contains(&format!("fn {func}(")) {
        Ok(())
    } else {
        Err(format!("{name}: no fn {func} in {path}"))
    }
}

#[test]
fn every_enforced_ie_names_a_test_that_exists() {
    let named = support::IES
        .iter()
        .map(|r| r.support)
        .chain(support::FLAGS.iter().map(|r| r.support))
        .filter_map(|s| match s {
            Support::Enforced(t) => Some(t),
            _ => None,
        })
        .chain(support::FEATURES.iter().map(|(_, _, t)| *t));
    let bad: Vec<String> = named.filter_map(|t| test_exists(t).err()).collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A response to a Session Report Request cannot be refused.
#[test]
fn nothing_in_a_response_is_refused() {
    for r in support::IES {
        if r.group == Group::UpdateBarSessionReportResponse {
            assert!(!matches!(r.support, Support::Refused(..)), "{r:?}");
        }
    }
}

fn establishment(s: &mut Smf) -> SessionEstablishmentRequest {
    s.cp_seid += 1;
    smf::establishment(
        s.node.clone(),
        s.cp_seid,
        harness::SMF_IP,
        smf::UeAddr::Choose,
    )
}

/// Puts IE `ie` into the request's `group` (Create groups; None for Update groups).
fn in_establishment(r: &mut SessionEstablishmentRequest, g: Group, ie: u16) -> Option<bool> {
    let far = &mut r.create_fars[0];
    Some(match g {
        Group::CreatePdr => r.create_pdrs[0].add_default_ie(ie),
        Group::Pdi => r.create_pdrs[0].pdi.add_default_ie(ie),
        Group::CreateFar => far.add_default_ie(ie),
        Group::ForwardingParameters => far
            .forwarding_parameters
            .as_mut()
            .expect("FAR 1 forwards")
            .add_default_ie(ie),
        Group::DuplicatingParameters => {
            far.apply_action |= ApplyAction::DUPL;
            let mut d = DuplicatingParameters {
                destination_interface: DestinationInterface::CORE,
                ..Default::default()
            };
            let ok = d.add_default_ie(ie);
            far.duplicating_parameters.push(d);
            ok
        }
        Group::CreateQer => r.create_qers[0].add_default_ie(ie),
        Group::CreateUrr => r.create_urrs[0].add_default_ie(ie),
        Group::CreateBar => r.create_bar.as_mut().expect("a BAR").add_default_ie(ie),
        _ => return None,
    })
}

/// A modification of rule 1 of each kind carrying IE `ie` in `group` (Update groups).
fn modification(g: Group, ie: u16) -> Option<SessionModificationRequest> {
    let mut m = smf::modification();
    let ok = match g {
        Group::UpdatePdr => {
            let mut u = UpdatePdr {
                pdr_id: PdrId(1),
                ..Default::default()
            };
            let ok = u.add_default_ie(ie);
            m.update_pdrs.push(u);
            ok
        }
        Group::UpdateFar => {
            let mut u = UpdateFar {
                far_id: FarId(1),
                ..Default::default()
            };
            let ok = u.add_default_ie(ie);
            m.update_fars.push(u);
            ok
        }
        Group::UpdateForwardingParameters | Group::UpdateDuplicatingParameters => {
            let mut u = UpdateFar {
                far_id: FarId(1),
                ..Default::default()
            };
            let ok = if g == Group::UpdateForwardingParameters {
                let mut f = UpdateForwardingParameters {
                    destination_interface: Some(DestinationInterface::CORE),
                    ..Default::default()
                };
                let ok = f.add_default_ie(ie);
                u.update_forwarding_parameters = Some(f);
                ok
            } else {
                let mut d = UpdateDuplicatingParameters {
                    destination_interface: Some(DestinationInterface::CORE),
                    ..Default::default()
                };
                let ok = d.add_default_ie(ie);
                u.update_duplicating_parameters.push(d);
                ok
            };
            m.update_fars.push(u);
            ok
        }
        Group::UpdateQer => {
            let mut u = UpdateQer {
                qer_id: QerId(1),
                ..Default::default()
            };
            let ok = u.add_default_ie(ie);
            m.update_qers.push(u);
            ok
        }
        Group::UpdateUrr => {
            let mut u = UpdateUrr {
                urr_id: UrrId(1),
                ..Default::default()
            };
            let ok = u.add_default_ie(ie);
            m.update_urrs.push(u);
            ok
        }
        Group::UpdateBarSessionModification => {
            let mut u = UpdateBarSessionModification {
                bar_id: BarId(1),
                ..Default::default()
            };
            let ok = u.add_default_ie(ie);
            m.update_bar = Some(u);
            ok
        }
        _ => return None,
    };
    assert!(ok, "{g:?} carries IE {ie}");
    Some(m)
}

/// What the data path holds for a session, to compare before and after a request.
fn installed(s: &Smf, seid: u64) -> String {
    format!("{:?}", s.agent.datapath().session(Seid(seid)))
}

#[test]
fn every_refused_ie_is_refused_and_changes_nothing() {
    let mut checked = 0;
    for r in support::IES {
        let Support::Refused(cause, _) = r.support else {
            continue;
        };
        let mut s = Smf::associated();
        let mut req = establishment(&mut s);
        if let Some(ok) = in_establishment(&mut req, r.group, r.ie) {
            assert!(ok, "{:?} carries IE {}", r.group, r.ie);
            let (_, resp) = s.establish_with(req);
            assert_eq!(
                (resp.cause, resp.offending_ie),
                (cause, Some(OffendingIe(r.ie))),
                "{r:?}"
            );
            assert!(resp.failed_rule_id.is_some(), "{r:?}: Failed Rule ID");
            assert_eq!(s.agent.session_count(), 0, "{r:?}: nothing established");
        } else {
            let seid = s.establish_ok();
            let before = installed(&s, seid);
            let m = modification(r.group, r.ie).expect("an Update group");
            let resp = s.modify(seid, m);
            assert_eq!(
                (resp.cause, resp.offending_ie),
                (cause, Some(OffendingIe(r.ie))),
                "{r:?}"
            );
            assert_eq!(
                installed(&s, seid),
                before,
                "{r:?}: the session is unchanged"
            );
        }
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} refused IEs checked");
}

/// Sets flag `bits` of `ie` in rule 1 of an establishment.
fn with_flag(r: &mut SessionEstablishmentRequest, ie: FlagIe, bits: u32) {
    match ie {
        FlagIe::ApplyAction => {
            let a = &mut r.create_fars[0].apply_action;
            *a = ApplyAction::from_bits_retain(a.bits() | u16::try_from(bits).unwrap());
        }
        FlagIe::ReportingTriggers => {
            let u = &mut r.create_urrs[0];
            let t = &mut u.reporting_triggers;
            *t = ReportingTriggers::from_bits_retain(t.bits() | bits);
            // What STOPT needs (stop_of_traffic_needs_an_inactivity_detection_time).
            if t.contains(ReportingTriggers::STOPT) {
                u.inactivity_detection_time = Some(InactivityDetectionTime(5));
            }
        }
        FlagIe::MeasurementMethod => {
            let m = &mut r.create_urrs[0].measurement_method;
            *m = MeasurementMethod::from_bits_retain(m.bits() | u8::try_from(bits).unwrap());
        }
        FlagIe::MeasurementInformation => {
            let i = r.create_urrs[0]
                .measurement_information
                .get_or_insert_with(MeasurementInformation::empty);
            *i = MeasurementInformation::from_bits_retain(i.bits() | u8::try_from(bits).unwrap());
        }
    }
}

#[test]
fn every_refused_flag_is_refused_and_every_enforced_one_accepted() {
    for f in FlagIe::ALL {
        for (name, bit) in f.flags() {
            let rule = support::FLAGS
                .iter()
                .find(|r| r.ie == f && r.flag == name)
                .expect("decided");
            let mut s = Smf::associated();
            let mut req = establishment(&mut s);
            with_flag(&mut req, f, bit);
            let (_, resp) = s.establish_with(req);
            match rule.support {
                Support::Refused(cause, _) => assert_eq!(
                    (resp.cause, resp.offending_ie),
                    (cause, Some(OffendingIe(f.ie()))),
                    "{rule:?}"
                ),
                // Enforced or pending: the flag alone is no reason to refuse.
                _ => assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{rule:?}: {resp:?}"),
            }
        }
    }
}

#[test]
fn the_features_advertised_are_the_tables() {
    let mut s = Smf::new();
    let r = s.associate(1);
    assert_eq!(r.up_function_features, Some(support::features()));
}

/// docs/compliance.md carries the tables as rendered now (`UPF_BLESS=1` rewrites them).
#[test]
fn compliance_md_shows_the_tables() {
    let path = root().join("docs/compliance.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = ("<!-- enforcement:begin -->\n", "<!-- enforcement:end -->\n");
    let (head, rest) = doc.split_once(begin).expect("enforcement:begin marker");
    let (_, tail) = rest.split_once(end).expect("enforcement:end marker");
    let new = format!("{head}{begin}{}{end}{tail}", support::markdown());
    if std::env::var_os("UPF_BLESS").is_some() {
        std::fs::write(&path, &new).unwrap();
    } else {
        assert!(
            new == doc,
            "docs/compliance.md is stale: UPF_BLESS=1 cargo test -p upf-n4 --test support"
        );
    }
}

/// Every IE of the Update groups reaches the installed session (their effect on packets is
/// the Create IEs' tests'): one modification changes each field of rule 1 of each kind.
#[test]
fn updates_reach_the_installed_session() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let mut m = smf::modification();
    m.update_pdrs.push(UpdatePdr {
        pdr_id: PdrId(1),
        outer_header_removal: Some(OuterHeaderRemoval {
            outer_header_removal_description: 0,
            gtpu_extension_header_deletion: Some(OuterHeaderRemoval::PDU_SESSION_CONTAINER),
        }),
        precedence: Some(Precedence(7)),
        pdi: Some(smf::pdi(
            SourceInterface::ACCESS,
            Some(smf::choose_teid(1)),
            None,
            Some("permit out 6 from any to assigned 80"),
        )),
        far_id: Some(FarId(3)),
        urr_ids: [UrrId(2)].into_iter().collect(),
        qer_ids: [QerId(2)].into_iter().collect(),
        ..Default::default()
    });
    let tlm = TransportLevelMarking {
        tos_traffic_class: 46 << 2,
        mask: 0xfc,
    };
    let ohc = OuterHeaderCreation::gtpu_ipv4(0x0200_0002, std::net::Ipv4Addr::new(10, 0, 2, 2));
    m.update_fars.push(UpdateFar {
        far_id: FarId(2),
        apply_action: Some(ApplyAction::FORW | ApplyAction::DUPL),
        update_forwarding_parameters: Some(UpdateForwardingParameters {
            outer_header_creation: Some(ohc),
            transport_level_marking: Some(tlm),
            ..Default::default()
        }),
        update_duplicating_parameters: [UpdateDuplicatingParameters {
            destination_interface: Some(DestinationInterface::CORE),
            outer_header_creation: Some(ohc),
            transport_level_marking: Some(tlm),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        bar_id: Some(BarId(1)),
        forwarding_parameters: None,
    });
    m.update_qers.push(UpdateQer {
        qer_id: QerId(1),
        mbr: Some(Mbr {
            uplink_kbps: 1_000,
            downlink_kbps: 2_000,
        }),
        qfi: Some(Qfi(5)),
        rqi: Some(Rqi(true)),
        paging_policy_indicator: Some(PagingPolicyIndicator(3)),
        averaging_window: Some(AveragingWindow(500)),
        ..Default::default()
    });
    m.update_urrs.push(UpdateUrr {
        urr_id: UrrId(1),
        reporting_triggers: Some(ReportingTriggers::PERIO | ReportingTriggers::VOLTH),
        measurement_period: Some(MeasurementPeriod(30)),
        volume_threshold: Some(Volume {
            total: Some(5_000),
            ..Default::default()
        }),
        ..Default::default()
    });
    m.update_bar = Some(UpdateBarSessionModification {
        bar_id: BarId(1),
        suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(7)),
        downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(3)),
    });
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let dp = s.agent.datapath();
    let ses = dp.session(Seid(seid)).expect("installed");
    use upf_rules as ru;
    let pdr = ses.pdr(ru::PdrId(1)).unwrap();
    assert_eq!(pdr.precedence, ru::Precedence(7));
    assert_eq!(
        pdr.outer_header_removal,
        Some(ru::OuterHeaderRemoval::GtpuUdpIp {
            delete_pdu_session_container: true
        })
    );
    assert_eq!(pdr.far, Some(ru::FarId(3)));
    assert_eq!(pdr.urrs.as_slice(), &[ru::UrrId(2)]);
    assert_eq!(pdr.qers.as_slice(), &[ru::QerId(2)]);
    assert!(pdr.pdi.ue_ip.is_none(), "the PDI was replaced whole");
    assert_eq!(pdr.pdi.sdf_filters.len(), 1);
    let far = ses.far(ru::FarId(2)).unwrap();
    assert!(far.action.contains(ru::ApplyAction::DUPL));
    let fw = far.forwarding.as_ref().unwrap();
    let ohc_r = ru::OuterHeaderCreation::Gtpu {
        teid: ru::Teid(0x0200_0002),
        peer: std::net::Ipv4Addr::new(10, 0, 2, 2).into(),
    };
    assert_eq!(fw.outer_header_creation, Some(ohc_r));
    assert_eq!(fw.transport_level_marking, Some((46 << 2, 0xfc)));
    assert_eq!(far.duplicating.len(), 1);
    let d = &far.duplicating[0];
    assert_eq!(
        (
            d.destination,
            d.outer_header_creation,
            d.transport_level_marking
        ),
        (ru::Interface::Core, Some(ohc_r), Some((46 << 2, 0xfc)))
    );
    assert_eq!(far.bar, Some(ru::BarId(1)));
    let q = ses.qer(ru::QerId(1)).unwrap();
    assert_eq!(
        (
            q.mbr.map(|m| (m.uplink_kbps, m.downlink_kbps)),
            q.qfi,
            q.rqi,
            q.ppi
        ),
        (Some((1_000, 2_000)), Some(ru::Qfi(5)), true, Some(3))
    );
    assert_eq!(q.averaging_window_ms, Some(500));
    let u = ses.urr(ru::UrrId(1)).unwrap();
    assert!(u.triggers.contains(ru::ReportingTriggers::PERIO));
    assert_eq!(u.measurement_period_s, Some(30));
    assert_eq!(u.volume_threshold.and_then(|v| v.total), Some(5_000));
    let bar = ses.bar.as_ref().unwrap();
    assert_eq!(bar.suggested_buffering_packets, Some(7));
    assert_eq!(bar.downlink_data_notification_delay_ms, 150);
}

/// A usage report carries what the URR's Measurement Method asks for (§8.2.40).
#[test]
fn measurement_method_decides_what_is_reported() {
    let mut s = Smf::associated();
    let mut req = establishment(&mut s);
    req.create_urrs[0].measurement_method = MeasurementMethod::VOLUM;
    req.create_urrs[1].measurement_method = MeasurementMethod::DURAT;
    let (_, r) = s.establish_with(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let seid = r.up_f_seid.unwrap().seid;
    s.agent
        .datapath_mut()
        .add_usage(Seid(seid), upf_rules::UrrId(1), 100, true);
    let (_, d) = s.delete(seid);
    let report = |id| {
        d.usage_reports
            .iter()
            .find(|u| u.urr_id == UrrId(id))
            .unwrap_or_else(|| panic!("URR {id}: {d:?}"))
    };
    let (vol, dur) = (report(1), report(2));
    assert_eq!(
        vol.volume_measurement.and_then(|v| v.uplink_volume),
        Some(100)
    );
    assert!(vol.duration_measurement.is_none(), "{vol:?}");
    assert!(dur.volume_measurement.is_none(), "{dur:?}");
    assert!(dur.duration_measurement.is_some(), "{dur:?}");
}

/// OMEC's SMF puts Forwarding Parameters (IE 4) in an Update FAR where TS 29.244 has Update
/// Forwarding Parameters (IE 11): they are applied as those, not skipped.
#[test]
fn omec_forwarding_parameters_in_an_update_far() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let mut m = smf::modification();
    let gnb = std::net::Ipv4Addr::new(10, 0, 9, 9);
    m.update_fars.push(UpdateFar {
        far_id: FarId(4),
        apply_action: Some(ApplyAction::FORW),
        forwarding_parameters: Some(smf::forwarding(
            DestinationInterface::ACCESS,
            Some(OuterHeaderCreation::gtpu_ipv4(0x77, gnb)),
        )),
        ..Default::default()
    });
    let r = s.modify(seid, m);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let ses = s.agent.datapath().session(Seid(seid)).unwrap().clone();
    let fw = ses
        .far(upf_rules::FarId(4))
        .unwrap()
        .forwarding
        .clone()
        .unwrap();
    assert_eq!(
        fw.outer_header_creation,
        Some(upf_rules::OuterHeaderCreation::Gtpu {
            teid: upf_rules::Teid(0x77),
            peer: gnb.into()
        })
    );
}

/// An Update BAR in a Session Report Response changes the BAR it names, and only that one.
#[test]
fn update_bar_in_a_report_response_applies_to_its_bar() {
    use upf_pfcp::Message;
    use upf_rules::DatapathEvent;
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let bar_count = |s: &Smf| {
        let ses = s.agent.datapath().session(Seid(seid)).unwrap().clone();
        let b = ses.bar.as_ref().unwrap();
        (
            b.suggested_buffering_packets,
            b.downlink_data_notification_delay_ms,
        )
    };
    // The establishment's BAR has a 100 ms delay (2 × 50 ms) and no count.
    for (bar, want) in [(9, (None, 100)), (1, (Some(5), 300))] {
        s.agent
            .datapath_mut()
            .push_event(DatapathEvent::DownlinkData {
                seid: Seid(seid),
                pdr: upf_rules::PdrId(2),
                qfi: None,
                ppi: None,
            });
        let out = s.advance(std::time::Duration::from_millis(1));
        let p = harness::decode(&out[0]);
        assert!(matches!(p.message, Message::SessionReportRequest(_)));
        let resp = SessionReportResponse {
            cause: Cause::REQUEST_ACCEPTED,
            update_bar: Some(UpdateBarSessionReportResponse {
                bar_id: BarId(bar),
                suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(5)),
                downlink_data_notification_delay: Some(DownlinkDataNotificationDelay(6)),
                ..Default::default()
            }),
            ..Default::default()
        };
        s.send_bytes(&smf::encode(Some(seid), p.header.sequence, resp));
        assert_eq!(bar_count(&s), want, "Update BAR of BAR {bar}");
    }
}

/// Packet Rate is enforced, but not its additional rates for exception reports (APRC): a
/// Create or Update QER that carries them is refused with the Packet Rate as Offending IE,
/// and nothing changes; one without them reaches the data path.
#[test]
fn packet_rates_with_additional_rates_for_exception_reports_are_refused() {
    let limit = |max_packets| PacketRateLimit {
        time_unit: PacketRateLimit::TIME_UNIT_HOUR,
        max_packets,
    };
    let plain = PacketRate {
        uplink: Some(limit(10)),
        downlink: Some(limit(20)),
        ..Default::default()
    };
    let aprc = PacketRate {
        additional_uplink: Some(limit(2)),
        additional_downlink: Some(limit(2)),
        ..plain
    };
    let refused = (Cause::SERVICE_NOT_SUPPORTED, Some(OffendingIe(94)));

    let mut s = Smf::associated();
    let mut req = establishment(&mut s);
    req.create_qers[0].packet_rate = Some(aprc);
    let (_, resp) = s.establish_with(req);
    assert_eq!((resp.cause, resp.offending_ie), refused);
    assert_eq!(resp.failed_rule_id, Some(FailedRuleId::Qer(QerId(1))));
    assert_eq!(s.agent.session_count(), 0);

    let mut req = establishment(&mut s);
    req.create_qers[0].packet_rate = Some(plain);
    let (_, resp) = s.establish_with(req);
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
    let seid = resp.up_f_seid.expect("an F-SEID").seid;
    let rate = |s: &Smf| {
        let ses = s.agent.datapath().session(Seid(seid)).expect("installed");
        ses.qer(upf_rules::QerId(1)).unwrap().packet_rate
    };
    let want = upf_rules::PacketRate {
        uplink: Some((10, 3600)),
        downlink: Some((20, 3600)),
    };
    assert_eq!(rate(&s), Some(want));

    let before = installed(&s, seid);
    let mut m = smf::modification();
    m.update_qers.push(UpdateQer {
        qer_id: QerId(1),
        packet_rate: Some(aprc),
        ..Default::default()
    });
    let resp = s.modify(seid, m);
    assert_eq!((resp.cause, resp.offending_ie), refused);
    assert_eq!(installed(&s, seid), before);
}

#[test]
fn stop_of_traffic_needs_an_inactivity_detection_time() {
    // STOPT without an Inactivity Detection Time (or with 0) is refused: nothing would say
    // when traffic stops. With one it is accepted, and an Update URR is judged on the URR
    // it leaves.
    let refused = (Cause::SERVICE_NOT_SUPPORTED, Some(OffendingIe(37)));
    let mut s = Smf::associated();
    for idt in [None, Some(0)] {
        let mut req = establishment(&mut s);
        let u = &mut req.create_urrs[0];
        u.reporting_triggers |= ReportingTriggers::STOPT;
        u.inactivity_detection_time = idt.map(InactivityDetectionTime);
        let urr = u.urr_id;
        let (_, resp) = s.establish_with(req);
        assert_eq!((resp.cause, resp.offending_ie), refused, "{idt:?}");
        assert_eq!(resp.failed_rule_id, Some(FailedRuleId::Urr(urr)));
        assert_eq!(s.agent.session_count(), 0);
    }
    let seid = s.establish_ok();
    let urr = establishment(&mut s).create_urrs[0].urr_id;
    let before = installed(&s, seid);
    let update = |triggers: Option<ReportingTriggers>, idt: Option<u32>| {
        let mut m = smf::modification();
        m.update_urrs.push(UpdateUrr {
            urr_id: urr,
            reporting_triggers: triggers,
            inactivity_detection_time: idt.map(InactivityDetectionTime),
            ..Default::default()
        });
        m
    };
    let resp = s.modify(seid, update(Some(ReportingTriggers::STOPT), None));
    assert_eq!((resp.cause, resp.offending_ie), refused);
    assert_eq!(installed(&s, seid), before, "unchanged");
    let resp = s.modify(seid, update(Some(ReportingTriggers::STOPT), Some(5)));
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
    // The IDT stays with the URR: STOPT may come again alone.
    let resp = s.modify(seid, update(Some(ReportingTriggers::STOPT), None));
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
}
