//! URRs through the real agent: exact volumes in the Session Deletion Response, volume
//! threshold and quota reports (and the drops after the quota), periodic reports.

mod common;
use common::*;
use std::net::Ipv4Addr;
use std::time::Duration;
use upf_dataplane::DropReason;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_smf as smf;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 12);

/// An uplink / downlink packet of `size` octets of inner IP.
fn up(size: usize) -> Vec<u8> {
    udp4(UE, DN, 4000, 53, size - 28, 0)
}

fn down(size: usize) -> Vec<u8> {
    udp4(DN, UE, 53, 4000, size - 28, 0)
}

fn with_urr(urr: CreateUrr) -> SessionEstablishmentRequest {
    let mut req = simple_session(UE, 0xabcd);
    req.create_urrs = [urr].into_iter().collect();
    req
}

/// (total, uplink, downlink) octets and packets of a report.
fn volumes(u: &UsageReport) -> ([u64; 3], [u64; 3]) {
    let v = u.volume_measurement.expect("a volume measurement");
    let g = |x: Option<u64>| x.expect("every volume field");
    (
        [g(v.total_volume), g(v.uplink_volume), g(v.downlink_volume)],
        [
            g(v.total_packets),
            g(v.uplink_packets),
            g(v.downlink_packets),
        ],
    )
}

/// The single usage report of a single Session Report Request, with its trigger.
fn one_usage(reps: &[SessionReportRequest], trigger: UsageReportTrigger) -> UsageReport {
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::USAR));
    assert_eq!(reps[0].usage_reports.len(), 1);
    let u = reps[0].usage_reports[0].clone();
    assert_eq!(u.urr_id, UrrId(1));
    assert_eq!(u.usage_report_trigger, trigger);
    u
}

#[test]
fn deletion_reports_exact_volumes_of_what_was_forwarded() {
    let mut r = Rig::new();
    let (seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let (ul, dl) = ([60, 200, 1400], [100, 576]);
    let mut pkts: Vec<_> = ul.iter().map(|&s| gpdu(teid, Some(9), &up(s))).collect();
    pkts.extend(dl.iter().map(|&s| n6(&down(s))));
    assert_eq!(r.send(pkts).len(), 5);
    r.now += Duration::from_secs(7);
    // Not forwarded, so not counted: TTL expiry both ways.
    let out = r.send(vec![
        gpdu(teid, Some(9), &with_ttl(up(300), 1)),
        n6(&with_ttl(down(300), 1)),
    ]);
    assert!(out.is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::TtlExpired), 2);
    assert_balanced(&mut r);

    let del = r.delete(seid);
    assert_eq!(del.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(del.usage_reports.len(), 1);
    let u = &del.usage_reports[0];
    assert_eq!(u.urr_id, UrrId(1));
    assert_eq!(u.usage_report_trigger, UsageReportTrigger::TERMR);
    let (ul_b, dl_b): (u64, u64) = (
        ul.iter().sum::<usize>() as u64,
        dl.iter().sum::<usize>() as u64,
    );
    assert_eq!(volumes(u), ([ul_b + dl_b, ul_b, dl_b], [5, 3, 2]));
    assert_eq!(u.duration_measurement, Some(DurationMeasurement(7)));
    let (first, last) = (
        u.time_of_first_packet.unwrap().0,
        u.time_of_last_packet.unwrap().0,
    );
    assert_eq!(last - first, 0, "every counted packet came at the start");
}

#[test]
fn mbr_and_usage_ignore_packets_dropped_for_ttl() {
    // A packet dropped for its TTL takes no MBR tokens: with room for exactly two packets,
    // two expired ones do not stop two good ones.
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    // 12 kbit/s with a 1 s window: a 12000-bit bucket, a 750-octet packet is 6000 bits.
    let mut q = smf::create_qer(1, Some((12, 12)), Some(9));
    q.averaging_window = Some(AveragingWindow(1000));
    req.create_qers = [q].into_iter().collect();
    let (_, resp) = r.establish(req);
    let teid = local_teid(&resp);
    let out = r.send(vec![
        gpdu(teid, Some(9), &with_ttl(up(750), 1)),
        gpdu(teid, Some(9), &with_ttl(up(750), 1)),
        gpdu(teid, Some(9), &up(750)),
        gpdu(teid, Some(9), &up(750)),
        gpdu(teid, Some(9), &up(750)),
    ]);
    assert_eq!(out.len(), 2, "{out:?}");
    let c = r.dp().counters().clone();
    assert_eq!(c.dropped(DropReason::TtlExpired), 2);
    assert_eq!(c.dropped(DropReason::MbrExceeded), 1);
    assert_balanced(&mut r);
}

#[test]
fn volume_threshold_reports_each_time_it_is_reached() {
    let mut r = Rig::new();
    let urr = smf::create_urr(1, ReportingTriggers::VOLTH, Some(1000));
    let (_, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    for round in 0..2 {
        for i in 0..3 {
            assert_eq!(r.send1(gpdu(teid, Some(9), &up(300))).len(), 1);
            assert!(r.reports().is_empty(), "round {round}, packet {i}: not yet");
        }
        assert_eq!(r.send1(n6(&down(300))).len(), 1);
        let u = one_usage(&r.reports(), UsageReportTrigger::VOLTH);
        assert_eq!(volumes(&u), ([1200, 900, 300], [4, 3, 1]), "round {round}");
    }
    assert_balanced(&mut r);
}

#[test]
fn volume_quota_reports_then_drops_until_a_new_grant() {
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::VOLQU, None);
    urr.volume_quota = Some(Volume {
        total: Some(1000),
        uplink: None,
        downlink: None,
    });
    let (seid, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    // 900 octets: under the quota.
    assert_eq!(
        r.send((0..3).map(|_| gpdu(teid, Some(9), &up(300))).collect())
            .len(),
        3
    );
    assert!(r.reports().is_empty());
    // The packet that reaches the quota goes, and is reported.
    assert_eq!(r.send1(n6(&down(300))).len(), 1);
    let u = one_usage(&r.reports(), UsageReportTrigger::VOLQU);
    assert_eq!(volumes(&u).0, [1200, 900, 300]);
    // Then nothing goes, either way, and nothing more is reported.
    let out = r.send(vec![gpdu(teid, Some(9), &up(300)), n6(&down(300))]);
    assert!(out.is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 2);
    assert!(r.reports().is_empty());
    assert_balanced(&mut r);

    // A new grant.
    let m = SessionModificationRequest {
        update_urrs: [UpdateUrr {
            urr_id: UrrId(1),
            volume_quota: Some(Volume {
                total: Some(5000),
                uplink: None,
                downlink: None,
            }),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
    let out = r.send(vec![gpdu(teid, Some(9), &up(300)), n6(&down(300))]);
    assert_eq!(out.len(), 2);
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 2);
    assert_balanced(&mut r);
}

#[test]
fn periodic_reports_every_measurement_period() {
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::PERIO, None);
    urr.measurement_period = Some(MeasurementPeriod(10));
    let (_, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    assert_eq!(
        r.send(vec![gpdu(teid, Some(9), &up(100)), n6(&down(200))])
            .len(),
        2
    );
    assert!(r.advance(Duration::from_secs(9)).is_empty());
    let u = one_usage(
        &r.advance(Duration::from_secs(1)),
        UsageReportTrigger::PERIO,
    );
    assert_eq!(volumes(&u), ([300, 100, 200], [2, 1, 1]));
    assert_eq!(u.duration_measurement, Some(DurationMeasurement(10)));
    // A quiet period is reported too, empty.
    assert!(r.advance(Duration::from_secs(5)).is_empty());
    let u = one_usage(
        &r.advance(Duration::from_secs(5)),
        UsageReportTrigger::PERIO,
    );
    assert_eq!(volumes(&u), ([0; 3], [0; 3]));
    // And the next one counts only its own traffic.
    r.now += Duration::from_secs(3);
    assert_eq!(r.send1(n6(&down(500))).len(), 1);
    let u = one_usage(
        &r.advance(Duration::from_secs(7)),
        UsageReportTrigger::PERIO,
    );
    assert_eq!(volumes(&u), ([500, 0, 500], [1, 0, 1]));
    assert_balanced(&mut r);
}

#[test]
fn user_plane_inactivity_is_reported_once_per_silence() {
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    req.user_plane_inactivity_timer = Some(UserPlaneInactivityTimer(5));
    let (_, resp) = r.establish(req);
    let teid = local_teid(&resp);
    assert!(r.advance(Duration::from_secs(4)).is_empty());
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    // Five seconds after the last packet, not after the establishment.
    assert!(r.advance(Duration::from_secs(4)).is_empty());
    let reps = r.advance(Duration::from_secs(1));
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::UPIR));
    // Still silent: no second report; traffic, then silence again: one more.
    assert!(r.advance(Duration::from_secs(10)).is_empty());
    assert_eq!(r.send1(n6(&down(100))).len(), 1);
    assert!(r.advance(Duration::from_secs(4)).is_empty());
    let reps = r.advance(Duration::from_secs(2));
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::UPIR));
    assert_balanced(&mut r);
}

#[test]
fn start_of_traffic_and_a_quota_reached_by_the_same_packet_are_both_reported() {
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::START | ReportingTriggers::VOLQU, None);
    urr.volume_quota = Some(Volume {
        total: Some(500),
        uplink: None,
        downlink: None,
    });
    let (_, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(600))).len(), 1);
    let u = one_usage(
        &r.reports(),
        UsageReportTrigger::START | UsageReportTrigger::VOLQU,
    );
    assert_eq!(volumes(&u), ([600, 600, 0], [1, 1, 0]));
    // The quota is used up from that packet on.
    assert!(r.send1(gpdu(teid, Some(9), &up(100))).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 1);
    assert!(r.reports().is_empty());
    assert_balanced(&mut r);
}

#[test]
fn padding_after_the_inner_packet_is_neither_forwarded_nor_counted() {
    let mut r = Rig::new();
    let (seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let ip = up(100);
    let mut padded = ip.clone();
    padded.extend_from_slice(&[0xee; 12]);
    let out = r.send1(gpdu(teid, Some(9), &padded));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data().len(), ip.len());
    let del = r.delete(seid);
    assert_eq!(volumes(&del.usage_reports[0]), ([100, 100, 0], [1, 1, 0]));
    assert_balanced(&mut r);
}

#[test]
fn linked_urrs_with_liusa_report_in_the_same_message() {
    // URR 1 reports at a volume threshold and every 10 s; URR 2 links to it with LIUSA,
    // URR 3 links to URR 2 with LIUSA (so it follows transitively), URR 4 links to URR 1
    // without LIUSA (so it does not). Every URR counts both PDRs' traffic. With two URRs
    // the session fits a hot record; with four it does not.
    for (hot, n) in [(true, 2u32), (false, 2), (true, 4), (false, 4)] {
        let hot_n = (hot, n);
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let mut req = simple_session(UE, 0xabcd);
        let mut u1 = smf::create_urr(
            1,
            ReportingTriggers::VOLTH | ReportingTriggers::PERIO,
            Some(1000),
        );
        u1.measurement_period = Some(MeasurementPeriod(10));
        let mut u2 = smf::create_urr(2, ReportingTriggers::LIUSA, None);
        u2.linked_urr_ids = [LinkedUrrId(1)].into_iter().collect();
        let mut u3 = smf::create_urr(3, ReportingTriggers::LIUSA, None);
        u3.linked_urr_ids = [LinkedUrrId(2)].into_iter().collect();
        let mut u4 = smf::create_urr(4, ReportingTriggers::empty(), None);
        u4.linked_urr_ids = [LinkedUrrId(1)].into_iter().collect();
        req.create_urrs = [u1, u2, u3, u4].into_iter().take(n as usize).collect();
        for p in req.create_pdrs.iter_mut() {
            p.urr_ids = (1..=n).map(UrrId).collect();
        }
        let (seid, resp) = r.establish(req);
        let teid = local_teid(&resp);
        assert_eq!(r.send(vec![gpdu(teid, Some(9), &up(600))]).len(), 1);
        assert!(r.reports().is_empty(), "{hot_n:?}");
        assert_eq!(r.send1(n6(&down(400))).len(), 1);
        let reps = r.reports();
        assert_eq!(reps.len(), 1, "{hot_n:?}: one message {reps:?}");
        let got: Vec<_> = reps[0]
            .usage_reports
            .iter()
            .map(|u| (u.urr_id.0, u.usage_report_trigger, volumes(u)))
            .collect();
        let v = ([1000, 600, 400], [2, 1, 1]);
        let want = [
            (1, UsageReportTrigger::VOLTH, v),
            (2, UsageReportTrigger::LIUSA, v),
            (3, UsageReportTrigger::LIUSA, v),
        ];
        assert_eq!(got, want[..n.min(3) as usize], "{hot_n:?}");
        // A time trigger of URR 1 (its period) carries the linked reports too: 2 and 3
        // restarted their measurement at the last report, 4 did not.
        r.now += Duration::from_secs(3);
        assert_eq!(r.send1(n6(&down(100))).len(), 1);
        let reps = r.advance(Duration::from_secs(7));
        assert_eq!(reps.len(), 1, "{hot_n:?}: {reps:?}");
        let got: Vec<_> = reps[0]
            .usage_reports
            .iter()
            .map(|u| (u.urr_id.0, u.usage_report_trigger, volumes(u).0))
            .collect();
        let want = [
            (1, UsageReportTrigger::PERIO, [100, 0, 100]),
            (2, UsageReportTrigger::LIUSA, [100, 0, 100]),
            (3, UsageReportTrigger::LIUSA, [100, 0, 100]),
        ];
        assert_eq!(got, want[..n.min(3) as usize], "{hot_n:?}");
        // URR 4 reported nothing so far: all its usage is in the deletion.
        let del = r.delete(seid);
        if n == 4 {
            let u4 = del.usage_reports.iter().find(|u| u.urr_id == UrrId(4));
            assert_eq!(volumes(u4.unwrap()).0, [1100, 600, 500], "{hot_n:?}");
        }
        assert_balanced(&mut r);
    }
}

#[test]
fn far_id_for_quota_action_applies_that_far_until_a_new_grant() {
    // URR 1 (on both PDRs) has a 1000-octet quota and FAR 3 for quota action: a tunnel to a
    // redirect server. Once the quota is used up, packets both ways go there instead of
    // being dropped; FAR 3 set to buffer buffers them; a new grant restores the PDRs' FARs.
    const REDIRECT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 200);
    for hot in [true, false] {
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let mut urr = smf::create_urr(1, ReportingTriggers::VOLQU, None);
        urr.volume_quota = Some(Volume {
            total: Some(1000),
            uplink: None,
            downlink: None,
        });
        urr.far_id_for_quota_action = Some(FarId(3));
        let mut req = with_urr(urr);
        req.create_fars.push(smf::create_far(
            3,
            ApplyAction::FORW,
            Some(smf::forwarding(
                DestinationInterface::CORE,
                Some(OuterHeaderCreation::gtpu_ipv4(0x77, REDIRECT)),
            )),
            None,
        ));
        let (seid, resp) = r.establish(req);
        let teid = local_teid(&resp);
        let normal = |r: &mut Rig| {
            let out = r.send(vec![gpdu(teid, Some(9), &up(300)), n6(&down(300))]);
            assert_eq!(out.len(), 2, "hot {hot}");
            assert_eq!(
                out[0].data(),
                &routed(&up(300))[..],
                "hot {hot}: uplink to N6"
            );
            let (d, inner) = open(&out[1]);
            assert_eq!(
                (d.outer_dst, d.gtpu.teid),
                (GNB.into(), 0xabcd),
                "hot {hot}"
            );
            assert_eq!(inner, routed(&down(300)), "hot {hot}");
        };
        normal(&mut r);
        assert_eq!(r.send1(gpdu(teid, Some(9), &up(400))).len(), 1);
        let u = one_usage(&r.reports(), UsageReportTrigger::VOLQU);
        assert_eq!(volumes(&u).0, [1000, 700, 300], "hot {hot}");
        // Exhausted: FAR 3's treatment both ways, nothing dropped, nothing more reported.
        let out = r.send(vec![gpdu(teid, Some(9), &up(300)), n6(&down(200))]);
        assert_eq!(out.len(), 2, "hot {hot}");
        for (p, inner) in out.iter().zip([up(300), routed(&down(200))]) {
            let (d, got) = open(p);
            assert_eq!(
                (d.outer_dst, d.gtpu.teid),
                (REDIRECT.into(), 0x77),
                "hot {hot}"
            );
            assert_eq!(got, inner, "hot {hot}");
        }
        assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 0);
        assert!(r.reports().is_empty(), "hot {hot}");
        // FAR 3 changed to buffer: the packets are buffered.
        let m = SessionModificationRequest {
            update_fars: [set_action(3, ApplyAction::BUFF)].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        assert!(r.send1(n6(&down(200))).is_empty(), "hot {hot}");
        assert_eq!(r.dp().counters().buffered, 1, "hot {hot}");
        assert_eq!(r.dp().counters().dropped_total(), 0, "hot {hot}");
        // A new grant: the PDRs' own FARs again, and the new quota counts from here.
        let m = SessionModificationRequest {
            update_urrs: [UpdateUrr {
                urr_id: UrrId(1),
                volume_quota: Some(Volume {
                    total: Some(5000),
                    uplink: None,
                    downlink: None,
                }),
                ..Default::default()
            }]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        normal(&mut r);
        assert_eq!(r.dp().counters().buffered, 1, "hot {hot}");
        assert_balanced(&mut r);
        // The deletion reports what was counted since the VOLQU report: the redirected
        // packets were not counted against the used-up quota.
        let del = r.delete(seid);
        assert_eq!(
            volumes(&del.usage_reports[0]).0,
            [600, 300, 300],
            "hot {hot}"
        );
    }
}

#[test]
fn number_of_reports_limits_the_reports_of_a_urr() {
    // URR 1 reports at 1000 octets and every 10 s, at most twice; a new Number of Reports
    // in an Update URR allows as many more.
    for hot in [true, false] {
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let mut urr = smf::create_urr(
            1,
            ReportingTriggers::VOLTH | ReportingTriggers::PERIO,
            Some(1000),
        );
        urr.measurement_period = Some(MeasurementPeriod(10));
        urr.number_of_reports = Some(NumberOfReports(2));
        let (seid, resp) = r.establish(with_urr(urr));
        let teid = local_teid(&resp);
        let thousand = |r: &mut Rig| {
            let out = r.send(vec![gpdu(teid, Some(9), &up(600)), n6(&down(400))]);
            assert_eq!(out.len(), 2, "hot {hot}");
        };
        thousand(&mut r);
        one_usage(&r.reports(), UsageReportTrigger::VOLTH);
        let u = one_usage(
            &r.advance(Duration::from_secs(10)),
            UsageReportTrigger::PERIO,
        );
        assert_eq!(volumes(&u).0, [0; 3], "hot {hot}");
        // Out of reports: neither the threshold nor the period reports any more, and the
        // traffic still goes.
        thousand(&mut r);
        thousand(&mut r);
        assert!(r.reports().is_empty(), "hot {hot}");
        assert!(r.advance(Duration::from_secs(30)).is_empty(), "hot {hot}");
        // Query URR still reports what was measured since the last report.
        let m = SessionModificationRequest {
            query_urrs: [QueryUrr { urr_id: UrrId(1) }].into_iter().collect(),
            ..Default::default()
        };
        let resp = r.modify(seid, m);
        assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(
            volumes(&resp.usage_reports[0]).0,
            [2000, 1200, 800],
            "hot {hot}"
        );
        // A new Number of Reports: one more report.
        let m = SessionModificationRequest {
            update_urrs: [UpdateUrr {
                urr_id: UrrId(1),
                number_of_reports: Some(NumberOfReports(1)),
                ..Default::default()
            }]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        thousand(&mut r);
        let u = one_usage(&r.reports(), UsageReportTrigger::VOLTH);
        assert_eq!(volumes(&u).0, [1000, 600, 400], "hot {hot}");
        thousand(&mut r);
        assert!(r.reports().is_empty(), "hot {hot}");
        assert!(r.advance(Duration::from_secs(20)).is_empty(), "hot {hot}");
        assert_balanced(&mut r);
    }
}

#[test]
fn inactivity_detection_time_measures_usage_time_and_stop_of_traffic() {
    // Inactivity Detection Time 5 s, START and STOPT: time counts from each packet to the
    // next, or 5 s when none comes sooner; 5 s of silence is a stop of traffic, and the
    // next packet a start again.
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::START | ReportingTriggers::STOPT, None);
    urr.inactivity_detection_time = Some(InactivityDetectionTime(5));
    let (seid, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    let secs = |u: &UsageReport| u.duration_measurement.map(|d| d.0);
    let at = |r: &mut Rig, t: u64| {
        r.now += Duration::from_secs(t);
    };
    // t = 10: the first packet.
    at(&mut r, 10);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    let u = one_usage(&r.reports(), UsageReportTrigger::START);
    assert_eq!((volumes(&u).0, secs(&u)), ([100, 100, 0], Some(0)));
    // t = 12, 13: more; then silence. Stop of traffic 5 s after the last packet, with
    // 2 + 1 + 5 s of usage time.
    at(&mut r, 2);
    assert_eq!(r.send1(n6(&down(200))).len(), 1);
    at(&mut r, 1);
    assert_eq!(r.send1(n6(&down(300))).len(), 1);
    assert!(r.advance(Duration::from_secs(4)).is_empty());
    let u = one_usage(
        &r.advance(Duration::from_secs(1)),
        UsageReportTrigger::STOPT,
    );
    assert_eq!((volumes(&u).0, secs(&u)), ([500, 0, 500], Some(8)));
    // Once per silence.
    assert!(r.advance(Duration::from_secs(30)).is_empty());
    // t = 48: traffic again is a start of traffic; the silence counted nothing.
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    let u = one_usage(&r.reports(), UsageReportTrigger::START);
    assert_eq!((volumes(&u).0, secs(&u)), ([100, 100, 0], Some(0)));
    // t = 49, then deletion at t = 51: 1 + 2 s.
    at(&mut r, 1);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    at(&mut r, 2);
    let del = r.delete(seid);
    let u = &del.usage_reports[0];
    assert_eq!(u.usage_report_trigger, UsageReportTrigger::TERMR);
    assert_eq!((volumes(u).0, secs(u)), ([100, 100, 0], Some(3)));
    assert_balanced(&mut r);
}

#[test]
fn time_quota_counts_usage_time_under_an_inactivity_detection_time() {
    // Time Quota 10 s, Inactivity Detection Time 5 s: time counts from each packet to the
    // next, or 5 s when none comes sooner (§5.2.2.2.1), so the quota lasts 10 s of usage,
    // not of wall clock.
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::TIMQU, None);
    urr.time_quota = Some(TimeQuota(10));
    urr.inactivity_detection_time = Some(InactivityDetectionTime(5));
    let (seid, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    let secs = |u: &UsageReport| u.duration_measurement.map(|d| d.0);
    // t = 0 and 2: 2 + 5 s of usage time; then silence to t = 20.
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    r.now += Duration::from_secs(2);
    assert_eq!(r.send1(n6(&down(100))).len(), 1);
    for t in 3..=20 {
        assert!(r.advance(Duration::from_secs(1)).is_empty(), "t = {t}");
    }
    // t = 20: traffic again; the quota's last 3 s are used up at t = 23.
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    for t in 21..=22 {
        assert!(r.advance(Duration::from_secs(1)).is_empty(), "t = {t}");
    }
    let u = one_usage(
        &r.advance(Duration::from_secs(1)),
        UsageReportTrigger::TIMQU,
    );
    assert_eq!((volumes(&u).0, secs(&u)), ([300, 200, 100], Some(10)));
    // Used up: traffic is dropped.
    assert!(r.send1(gpdu(teid, Some(9), &up(100))).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 1);
    // A new grant of 6 s at t = 23: a packet (5 s), silence, a packet at t = 40 (1 s more).
    let m = SessionModificationRequest {
        update_urrs: [UpdateUrr {
            urr_id: UrrId(1),
            time_quota: Some(TimeQuota(6)),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    for t in 24..=40 {
        assert!(r.advance(Duration::from_secs(1)).is_empty(), "t = {t}");
    }
    assert_eq!(r.send1(n6(&down(100))).len(), 1);
    let u = one_usage(
        &r.advance(Duration::from_secs(1)),
        UsageReportTrigger::TIMQU,
    );
    assert_eq!((volumes(&u).0, secs(&u)), ([200, 100, 100], Some(6)));
    assert_balanced(&mut r);
}

#[test]
fn time_threshold_counts_usage_time_with_an_inactivity_detection_time_else_the_wall_clock() {
    // Time Threshold 10 s. Without an Inactivity Detection Time it is wall-clock time since
    // the measurement started (the last report); with one of 5 s, usage time.
    for idt in [None, Some(5)] {
        let mut r = Rig::new();
        let mut urr = smf::create_urr(1, ReportingTriggers::TIMTH, None);
        urr.time_threshold = Some(TimeThreshold(10));
        urr.inactivity_detection_time = idt.map(InactivityDetectionTime);
        let (_, resp) = r.establish(with_urr(urr));
        let teid = local_teid(&resp);
        let secs = |u: &UsageReport| u.duration_measurement.map(|d| d.0);
        // t = 0: a packet; then silence.
        assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
        let mut got = Vec::new();
        for t in 1..=40u64 {
            for rep in r.advance(Duration::from_secs(1)) {
                let u = &rep.usage_reports[0];
                assert_eq!(u.usage_report_trigger, UsageReportTrigger::TIMTH);
                got.push((t, volumes(u).0[0], secs(u)));
            }
            // t = 30, 32: packets.
            if t == 30 || t == 32 {
                assert_eq!(r.send1(n6(&down(100))).len(), 1);
            }
        }
        let want = match idt {
            // Every 10 s whatever the traffic.
            None => vec![
                (10, 100, Some(10)),
                (20, 0, Some(10)),
                (30, 0, Some(10)),
                (40, 200, Some(10)),
            ],
            // 5 s after the first packet, then 2 + 3 s from t = 30; the 2 s after (to
            // t = 37) are short of the next.
            Some(_) => vec![(35, 300, Some(10))],
        };
        assert_eq!(got, want, "idt {idt:?}");
        assert_balanced(&mut r);
    }
}

/// NTP seconds of the rig's clock at `t` after its start (the agent's epoch is 3.9e9).
fn ntp_at(t: u64) -> u32 {
    3_900_000_000 + u32::try_from(t).unwrap()
}

/// (trigger, Usage Information, volumes, duration) of each usage report.
type Seen = (
    UsageReportTrigger,
    Option<UsageInformation>,
    [u64; 3],
    Option<u32>,
);

fn seen(reports: &[UsageReport]) -> Vec<Seen> {
    reports
        .iter()
        .map(|u| {
            (
                u.usage_report_trigger,
                u.usage_information,
                volumes(u).0,
                u.duration_measurement.map(|d| d.0),
            )
        })
        .collect()
}

#[test]
fn monitoring_time_splits_the_usage_and_subsequent_limits_take_over() {
    // Volume Threshold 1000 and Volume Quota 3000 until the Monitoring Time (t = 10), then
    // the Subsequent Volume Threshold 500 and Subsequent Volume Quota 800 (a grant from
    // t = 10). Nothing is reported at t = 10; the next report carries the usage before it
    // (BEF) and after it (AFT) as two Usage Reports in one message.
    let mut r = Rig::new();
    let mut urr = smf::create_urr(
        1,
        ReportingTriggers::VOLTH | ReportingTriggers::VOLQU,
        Some(1000),
    );
    urr.volume_quota = Some(Volume {
        total: Some(3000),
        uplink: None,
        downlink: None,
    });
    urr.monitoring_time = Some(MonitoringTime(ntp_at(10)));
    urr.subsequent_volume_threshold = Some(Volume {
        total: Some(500),
        uplink: None,
        downlink: None,
    });
    urr.subsequent_volume_quota = Some(Volume {
        total: Some(800),
        uplink: None,
        downlink: None,
    });
    let (seid, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    r.now += Duration::from_secs(2);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(600))).len(), 1);
    for t in 3..=11 {
        assert!(r.advance(Duration::from_secs(1)).is_empty(), "t = {t}");
    }
    // t = 11: 1000 octets since the start, but 400 since the Monitoring Time.
    assert_eq!(r.send1(n6(&down(400))).len(), 1);
    assert!(r.reports().is_empty());
    r.now += Duration::from_secs(3);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(200))).len(), 1);
    let reps = r.reports();
    assert_eq!(reps.len(), 1, "one message: {reps:?}");
    let (bef, aft) = (Some(UsageInformation::BEF), Some(UsageInformation::AFT));
    let volth = UsageReportTrigger::VOLTH;
    assert_eq!(
        seen(&reps[0].usage_reports),
        [
            (volth, bef, [600, 600, 0], Some(10)),
            (volth, aft, [600, 200, 400], Some(4)),
        ]
    );
    let u = &reps[0].usage_reports;
    assert_eq!(u[0].end_time.unwrap().0, ntp_at(10));
    assert_eq!(u[1].start_time.unwrap().0, ntp_at(10));
    // The subsequent quota: 600 used since t = 10, 200 more use it up.
    assert_eq!(r.send1(n6(&down(200))).len(), 1);
    let reps = r.reports();
    assert_eq!(
        seen(&[one_usage(&reps, UsageReportTrigger::VOLQU)]),
        [(UsageReportTrigger::VOLQU, None, [200, 0, 200], Some(0))]
    );
    assert!(r.send1(n6(&down(100))).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 1);
    // A new Volume Quota from the SMF is a new grant: it takes over from the subsequent one.
    let m = SessionModificationRequest {
        update_urrs: [UpdateUrr {
            urr_id: UrrId(1),
            volume_quota: Some(Volume {
                total: Some(5000),
                uplink: None,
                downlink: None,
            }),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.send1(n6(&down(100))).len(), 1);
    assert_eq!(r.dp().counters().dropped(DropReason::QuotaExhausted), 1);
    assert_balanced(&mut r);
}

#[test]
fn usage_before_and_after_the_monitoring_time_in_a_query_and_the_deletion() {
    let mut r = Rig::new();
    let mut urr = smf::create_urr(1, ReportingTriggers::empty(), None);
    urr.monitoring_time = Some(MonitoringTime(ntp_at(5)));
    let (seid, resp) = r.establish(with_urr(urr));
    let teid = local_teid(&resp);
    assert_eq!(r.send1(gpdu(teid, Some(9), &up(100))).len(), 1);
    // A packet past the Monitoring Time counts after it even before the timer runs.
    r.now += Duration::from_secs(6);
    assert_eq!(r.send1(n6(&down(300))).len(), 1);
    let m = SessionModificationRequest {
        query_urrs: [QueryUrr { urr_id: UrrId(1) }].into_iter().collect(),
        ..Default::default()
    };
    let resp = r.modify(seid, m);
    let immer = UsageReportTrigger::IMMER;
    assert_eq!(
        seen(&resp.usage_reports),
        [
            (immer, Some(UsageInformation::BEF), [100, 100, 0], Some(5)),
            (immer, Some(UsageInformation::AFT), [300, 0, 300], Some(1)),
        ]
    );
    // Once: the deletion reports as ever.
    r.now += Duration::from_secs(2);
    assert_eq!(r.send1(n6(&down(200))).len(), 1);
    let del = r.delete(seid);
    assert_eq!(
        seen(&del.usage_reports),
        [(UsageReportTrigger::TERMR, None, [200, 0, 200], Some(2))]
    );
    assert_balanced(&mut r);
}

/// The session whose downlink FAR buffers at most 2 packets (BAR 1), with URR 1 reporting
/// DROTH at `packets` and/or `bytes` dropped.
fn buffering_with_droth(packets: Option<u64>, bytes: Option<u64>) -> SessionEstablishmentRequest {
    let mut urr = smf::create_urr(1, ReportingTriggers::DROTH, None);
    urr.dropped_dl_traffic_threshold = Some(DroppedDlTrafficThreshold {
        downlink_packets: packets,
        downlink_bytes: bytes,
    });
    let mut req = with_far(with_urr(urr), 2, |f| {
        f.apply_action = ApplyAction::BUFF;
        f.forwarding_parameters = None;
        f.bar_id = Some(BarId(1));
    });
    req.create_bar = Some(CreateBar {
        bar_id: BarId(1),
        downlink_data_notification_delay: None,
        suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(2)),
    });
    req
}

#[test]
fn dropped_dl_traffic_threshold_reports_droth() {
    // The downlink FAR buffers, at most 2 packets (BAR). URR 1 has a Dropped DL Traffic
    // Threshold of 3 packets, or of 600 octets: packets that find the buffer full, and the
    // buffered ones discarded when the FAR is set to drop, count; the third reports DROTH,
    // once per threshold reached (the count restarts with the report).
    let limits = [(Some(3), None), (None, Some(600))];
    for (packets, bytes) in limits {
        let mut r = Rig::new();
        let (seid, resp) = r.establish(buffering_with_droth(packets, bytes));
        let teid = local_teid(&resp);
        // Uplink traffic is not dropped; two buffered, two dropped for a full buffer.
        assert_eq!(r.send1(gpdu(teid, Some(9), &up(300))).len(), 1);
        assert!(r.send((0..4).map(|_| n6(&down(200))).collect()).is_empty());
        assert_eq!(r.dp().counters().dropped(DropReason::BufferFull), 2);
        assert!(r.reports().is_empty(), "{packets:?} {bytes:?}");
        // The FAR set to drop discards the two buffered: the first is the third dropped.
        let m = SessionModificationRequest {
            update_fars: [set_action(2, ApplyAction::DROP)].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(r.dp().counters().dropped(DropReason::BufferDiscarded), 2);
        assert!(r.send(vec![]).is_empty());
        let u = one_usage(&r.reports(), UsageReportTrigger::DROTH);
        assert_eq!(volumes(&u).0, [300, 300, 0], "{packets:?} {bytes:?}");
        // Dropped by the FAR, not while buffering: not counted.
        assert!(r.send((0..4).map(|_| n6(&down(200))).collect()).is_empty());
        assert!(r.reports().is_empty(), "{packets:?} {bytes:?}");
        assert_balanced(&mut r);
    }
}

#[test]
fn mbqe_measures_before_qos_enforcement() {
    // QER 1: 12 kbit/s over 1 s both ways (room for two 750-octet packets), the downlink
    // gate closed. URR 1 measures before QoS enforcement (MBQE) with a 2000-octet
    // threshold; URR 2 after it (the default): only URR 1 counts what the QER drops.
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let mut q = smf::create_qer(1, Some((12, 12)), Some(9));
    q.averaging_window = Some(AveragingWindow(1000));
    q.gate_status = GateStatus {
        uplink: Gate::Open,
        downlink: Gate::Closed,
    };
    req.create_qers = [q].into_iter().collect();
    let mut u1 = smf::create_urr(1, ReportingTriggers::VOLTH, Some(2000));
    u1.measurement_information = Some(MeasurementInformation::MBQE);
    let u2 = smf::create_urr(2, ReportingTriggers::empty(), None);
    req.create_urrs = [u1, u2].into_iter().collect();
    for p in req.create_pdrs.iter_mut() {
        p.urr_ids = [UrrId(1), UrrId(2)].into_iter().collect();
    }
    let (seid, resp) = r.establish(req);
    let teid = local_teid(&resp);
    let out = r.send((0..3).map(|_| gpdu(teid, Some(9), &up(750))).collect());
    assert_eq!(out.len(), 2);
    assert_eq!(r.dp().counters().dropped(DropReason::MbrExceeded), 1);
    // The dropped third packet reaches URR 1's threshold.
    let u = one_usage(&r.reports(), UsageReportTrigger::VOLTH);
    assert_eq!(volumes(&u), ([2250, 2250, 0], [3, 3, 0]));
    assert!(r.send1(n6(&down(300))).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::GateClosed), 1);
    let del = r.delete(seid);
    let got: Vec<_> = del
        .usage_reports
        .iter()
        .map(|u| (u.urr_id.0, volumes(u)))
        .collect();
    assert_eq!(
        got,
        [
            (1, ([300, 0, 300], [1, 0, 1])),
            (2, ([1500, 1500, 0], [2, 2, 0])),
        ]
    );
    assert_balanced(&mut r);
}

#[test]
fn droth_counts_drops_of_a_full_buffer_in_later_batches_too() {
    // A full buffer whose report has gone out drops on the hot path, which counts no
    // DROTH: a session with a Dropped DL Traffic Threshold stays on the general path.
    let mut r = Rig::new();
    r.establish(buffering_with_droth(Some(3), None));
    assert!(r.send((0..4).map(|_| n6(&down(200))).collect()).is_empty());
    assert!(r.reports().is_empty());
    assert!(r.send(vec![n6(&down(200))]).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::BufferFull), 3);
    one_usage(&r.reports(), UsageReportTrigger::DROTH);
    assert_balanced(&mut r);
}

#[test]
fn a_quota_goes_on_from_the_use_another_engine_carried_hot_and_cold() {
    let establish = |r: &mut Rig| {
        let mut urr = smf::create_urr(1, ReportingTriggers::VOLQU, None);
        urr.volume_quota = Some(Volume {
            total: Some(1000),
            uplink: None,
            downlink: None,
        });
        let (seid, resp) = r.establish(with_urr(urr));
        (upf_rules::Seid(seid), local_teid(&resp))
    };
    let burst = |teid, n| (0..n).map(|_| gpdu(teid, Some(9), &up(300))).collect();
    let mut a = Rig::new();
    let (seid, teid) = establish(&mut a);
    assert_eq!(a.send(burst(teid, 2)).len(), 2);
    let now = a.now;
    let carried = a.dp().carried(now, seid).unwrap();
    let used = |total| upf_rules::QuotaUse {
        urr: upf_rules::UrrId(1),
        total,
        uplink: total,
        downlink: 0,
    };
    assert_eq!(carried.quotas, [used(600)]);
    let mut spent = carried.clone();
    spent.quotas = vec![used(1000)];
    for hot in [true, false] {
        let mut b = Rig::new();
        b.dp().set_hot_records(hot);
        let (seid, teid) = establish(&mut b);
        let now = b.now;
        b.dp().carry_in(now, seid, &carried).unwrap();
        // 600 of 1,000 used: the packet that reaches it passes, the next not.
        assert_eq!(b.send(burst(teid, 3)).len(), 2, "hot: {hot}");
        assert_eq!(b.dp().counters().dropped(DropReason::QuotaExhausted), 1);
        let mut c = Rig::new();
        c.dp().set_hot_records(hot);
        let (seid, teid) = establish(&mut c);
        let now = c.now;
        c.dp().carry_in(now, seid, &spent).unwrap();
        assert!(c.send(burst(teid, 1)).is_empty(), "exhausted, hot: {hot}");
    }
}

/// A checkpoint's read of a worker's sessions goes a part at a time (the worker forwards in
/// between): the parts together are the whole read, and each session is read once.
#[test]
fn the_checkpoint_read_in_parts_is_the_whole_read() {
    let mut r = Rig::new();
    let ues: Vec<Ipv4Addr> = (0..5).map(|i| Ipv4Addr::new(10, 60, 1, i + 1)).collect();
    for (i, &ue) in ues.iter().enumerate() {
        let (_, resp) = r.establish(simple_session(ue, 0x500 + u32::try_from(i).unwrap()));
        let teid = local_teid(&resp);
        let out = r.send(vec![gpdu(teid, Some(9), &udp4(ue, DN, 1, 53, 40, 0))]);
        assert_eq!(out.len(), 1);
    }
    let mut from = Some(0);
    let mut parts = 0;
    let mut read = Vec::new();
    while let Some(f) = from {
        let (got, next) = r.dp().unreported_changed_from(f, 2);
        assert!(next.is_none_or(|n| n == f + 2));
        read.extend(got.into_iter().map(|(s, u)| (s, u[0].1.total_packets)));
        from = next;
        parts += 1;
    }
    assert!(parts >= 3, "5 sessions, 2 a part: {parts} parts");
    assert_eq!(read.len(), 5, "{read:?}");
    assert!(read.iter().all(|&(_, n)| n == 1), "{read:?}");
    assert!(r.dp().unreported_changed().is_empty(), "each read once");
}
