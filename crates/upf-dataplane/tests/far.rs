//! Every FAR action through the real agent: FORW, DROP, BUFF with and without NOCP (one
//! Downlink Data Report per buffering period), the release of a buffer in order, DROBU, a
//! full buffer, DUPL.

mod common;
use common::*;
use std::net::Ipv4Addr;
use upf_dataplane::{DropReason, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_smf as smf;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 7);
const LI: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 50);

/// Downlink packet number `n` (UDP source port 10000 + n, 100 + n octets of payload).
fn down(n: u16) -> Vec<u8> {
    udp4(DN, UE, 10_000 + n, 4000, 100 + usize::from(n), 0)
}

fn up(n: u16) -> Vec<u8> {
    udp4(UE, DN, 10_000 + n, 53, 50 + usize::from(n), 0)
}

/// The packet numbers of what went to the gNB's tunnel 0xabcd, checking each is exactly the
/// routed original.
fn numbers_to_gnb(out: &[upf_dataplane::Packet]) -> Vec<u16> {
    out.iter()
        .map(|p| {
            assert_eq!(p.port(), Port::N3);
            let (d, inner) = open(p);
            assert_eq!((d.gtpu.teid, d.outer_dst), (0xabcd, GNB.into()));
            let n = sport(&inner) - 10_000;
            assert_eq!(inner, routed(&down(n)), "packet {n} changed");
            n
        })
        .collect()
}

/// The plain session with its downlink FAR buffering (no tunnel yet), with a BAR.
fn buffering(nocp: bool, bar_count: Option<u8>) -> SessionEstablishmentRequest {
    buffering_at(UE, 0xabcd, nocp, bar_count)
}

/// [`buffering`] for UE `ue` whose gNB tunnel will be `teid`.
fn buffering_at(
    ue: Ipv4Addr,
    teid: u32,
    nocp: bool,
    bar_count: Option<u8>,
) -> SessionEstablishmentRequest {
    let mut req = with_far(simple_session(ue, teid), 2, |f| {
        f.apply_action = if nocp {
            ApplyAction::BUFF | ApplyAction::NOCP
        } else {
            ApplyAction::BUFF
        };
        f.forwarding_parameters = None;
        f.bar_id = Some(BarId(1));
    });
    req.create_bar = Some(CreateBar {
        bar_id: BarId(1),
        downlink_data_notification_delay: None,
        suggested_buffering_packets_count: bar_count.map(SuggestedBufferingPacketsCount),
    });
    req
}

fn modification(update_fars: Vec<UpdateFar>) -> SessionModificationRequest {
    SessionModificationRequest {
        update_fars: update_fars.into_iter().collect(),
        ..Default::default()
    }
}

fn accepted(r: &mut Rig, seid: u64, m: SessionModificationRequest) {
    let resp = r.modify(seid, m);
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
}

/// Checks one Downlink Data Report for PDR 2 (QFI 9 from its QER).
fn assert_one_dldr(r: &mut Rig) {
    let reps = r.reports();
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::DLDR));
    let dl = reps[0]
        .downlink_data_report
        .as_ref()
        .expect("DL data report");
    assert_eq!(dl.pdr_ids.iter().map(|p| p.0).collect::<Vec<_>>(), [2]);
    assert_eq!(dl.downlink_data_service_information[0].qfi, Some(9));
}

#[test]
fn forw_both_ways() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let out = r.send(vec![gpdu(teid, Some(9), &up(1)), n6(&down(2))]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].port(), Port::N6);
    assert_eq!(out[0].data(), &routed(&up(1))[..]);
    assert_eq!(numbers_to_gnb(&out[1..]), [2]);
    assert_balanced(&mut r);
}

/// An instance serving another's shard (#29) sends that shard's downlink from the address
/// its F-TEIDs name, not from its own N3 address.
#[test]
fn downlink_leaves_from_the_sessions_own_n3_address() {
    let shard = Ipv4Addr::new(192, 0, 2, 77);
    let mut r = Rig::configured(
        |a| a.n3.ipv4 = Some(shard),
        |p| p.tunnel_source_per_session = true,
    );
    let (_, resp) = r.establish(simple_session(UE, 0xabcd));
    assert!(matches!(
        resp.created_pdrs[0].local_f_teid,
        Some(FTeid::Assigned { ipv4: Some(a), .. }) if a == shard
    ));
    let out = r.send(vec![n6(&down(1))]);
    assert_eq!(numbers_to_gnb(&out), [1]);
    let (d, _) = open(&out[0]);
    assert_eq!(d.outer_src, std::net::IpAddr::V4(shard));
    // Without: from the UPF's own (what the XDP engine does).
    let mut r = Rig::configured(|a| a.n3.ipv4 = Some(shard), |_| {});
    let (_, resp) = r.establish(simple_session(UE, 0xabcd));
    assert!(resp.created_pdrs[0].local_f_teid.is_some());
    let out = r.send(vec![n6(&down(1))]);
    assert_ne!(open(&out[0]).0.outer_src, std::net::IpAddr::V4(shard));
}

#[test]
fn drop_both_ways() {
    let mut r = Rig::new();
    let (seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    accepted(
        &mut r,
        seid,
        modification(vec![
            set_action(1, ApplyAction::DROP),
            set_action(2, ApplyAction::DROP),
        ]),
    );
    let out = r.send(vec![gpdu(teid, Some(9), &up(1)), n6(&down(2))]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.dp().counters().dropped(DropReason::FarDrop), 2);
    assert!(r.reports().is_empty());
    assert_balanced(&mut r);
}

#[test]
fn buff_without_nocp_buffers_silently_and_releases_in_order() {
    let mut r = Rig::new();
    let (seid, _) = r.establish(buffering(false, None));
    let out = r.send((0..3).map(|n| n6(&down(n))).collect());
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.dp().counters().buffered, 3);
    assert_eq!(r.dp().buffered(), 3);
    assert_balanced(&mut r);
    assert!(r.reports().is_empty(), "no NOCP: no report");

    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    let out = r.send(vec![n6(&down(3))]);
    assert_eq!(numbers_to_gnb(&out), [0, 1, 2, 3]);
    assert_eq!(r.dp().counters().buffered, 0);
    assert_balanced(&mut r);
}

#[test]
fn buff_nocp_reports_once_per_buffering_period() {
    let mut r = Rig::new();
    let (seid, _) = r.establish(buffering(true, None));
    assert!(r.send((0..3).map(|n| n6(&down(n))).collect()).is_empty());
    assert_one_dldr(&mut r);
    // Still the same buffering period: no more reports.
    assert!(r.send((3..5).map(|n| n6(&down(n))).collect()).is_empty());
    assert!(r.reports().is_empty());
    assert_eq!(r.dp().counters().buffered, 5);
    assert_balanced(&mut r);

    // FORW: the buffer goes out first, in order, then the packets that came after.
    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_balanced(&mut r);
    let out = r.send(vec![n6(&down(5)), n6(&down(6))]);
    assert_eq!(numbers_to_gnb(&out), [0, 1, 2, 3, 4, 5, 6]);
    assert!(r.reports().is_empty());

    // A new buffering period: one new report.
    accepted(
        &mut r,
        seid,
        modification(vec![set_action(2, ApplyAction::BUFF | ApplyAction::NOCP)]),
    );
    assert!(r.send((7..10).map(|n| n6(&down(n))).collect()).is_empty());
    assert_one_dldr(&mut r);
    accepted(
        &mut r,
        seid,
        modification(vec![set_action(2, ApplyAction::FORW)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [7, 8, 9]);
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped_total(), c.sent()), (0, 0, 10));
    assert_balanced(&mut r);
}

#[test]
fn drobu_discards_the_buffer_and_starts_a_new_period() {
    let mut r = Rig::new();
    let (seid, _) = r.establish(buffering(true, None));
    assert!(r.send((0..3).map(|n| n6(&down(n))).collect()).is_empty());
    assert_one_dldr(&mut r);

    let mut m = modification(vec![]);
    m.pfcpsmreq_flags = Some(PfcpSmReqFlags::DROBU);
    accepted(&mut r, seid, m);
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferDiscarded)), (0, 3));
    assert_eq!(r.dp().buffered(), 0);
    assert_balanced(&mut r);

    // The discarded packets ended the buffering period: the next one is reported anew.
    assert!(r.send(vec![n6(&down(3))]).is_empty());
    assert_one_dldr(&mut r);
    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [3]);
    assert_balanced(&mut r);
}

/// Answers the Session Report Request the agent sent with `answer` (instead of the Rig's
/// plain acceptance).
fn answer_report(r: &mut Rig, answer: SessionReportResponse) {
    let mut all = std::mem::take(&mut r.stash);
    all.extend(r.drain());
    let rep = all
        .iter()
        .map(|t| upf_pfcp::Pdu::decode(&t.payload).unwrap().0)
        .find(|p| matches!(p.message, upf_pfcp::Message::SessionReportRequest(_)))
        .expect("a report");
    let bytes = smf::encode(Some(0), rep.header.sequence, answer);
    let (now, smf_addr) = (r.now, r.smf);
    r.agent.handle_datagram(now, smf_addr, &bytes);
}

/// Answers the pending report with an Update BAR that extends buffering (BAR 1) for
/// `twos` × 2 s, at most `packets` packets.
fn extend_buffering(r: &mut Rig, twos: u8, packets: Option<u16>) {
    let answer = SessionReportResponse {
        cause: Cause::REQUEST_ACCEPTED,
        update_bar: Some(UpdateBarSessionReportResponse {
            bar_id: BarId(1),
            dl_buffering_duration: Some(DlBufferingDuration {
                unit: DlBufferingDuration::UNIT_2_SECONDS,
                value: twos,
            }),
            dl_buffering_suggested_packet_count: packets.map(DlBufferingSuggestedPacketCount),
            ..Default::default()
        }),
        ..Default::default()
    };
    answer_report(r, answer);
}

#[test]
fn drobu_in_the_session_report_response_discards_the_buffer() {
    let mut r = Rig::new();
    let (_, _) = r.establish(buffering(true, None));
    assert!(r.send((0..2).map(|n| n6(&down(n))).collect()).is_empty());
    // Answer the report as an SMF whose paging failed.
    let answer = SessionReportResponse {
        cause: Cause::REQUEST_ACCEPTED,
        pfcpsrrsp_flags: Some(PfcpSrRspFlags::DROBU),
        ..Default::default()
    };
    answer_report(&mut r, answer);
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferDiscarded)), (0, 2));
    assert_balanced(&mut r);
}

#[test]
fn buffer_overflow_is_buffer_full() {
    // The BAR's Suggested Buffering Packets Count caps the FAR's buffer.
    let mut r = Rig::new();
    let (seid, _) = r.establish(buffering(true, Some(4)));
    assert!(r.send((0..6).map(|n| n6(&down(n))).collect()).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (4, 2));
    assert_one_dldr(&mut r);
    assert_balanced(&mut r);
    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [0, 1, 2, 3]);
    assert_balanced(&mut r);

    // The worker's octet budget: 128 + 129 + 130 octets fit in 400, the fourth does not.
    let mut r = Rig::with(|c| c.buffer_bytes = 400);
    r.establish(buffering(false, None));
    assert!(r.send((0..5).map(|n| n6(&down(n))).collect()).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (3, 2));
    assert_balanced(&mut r);
}

fn dupl_to_li(f: &mut CreateFar, teid: u32) {
    f.apply_action = ApplyAction::FORW | ApplyAction::DUPL;
    f.duplicating_parameters = [DuplicatingParameters {
        destination_interface: DestinationInterface::CORE,
        outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(teid, LI)),
        transport_level_marking: None,
        forwarding_policy: None,
    }]
    .into_iter()
    .collect();
}

#[test]
fn dupl_sends_a_copy_to_the_duplication_target() {
    let mut r = Rig::new();
    let req = with_far(simple_session(UE, 0xabcd), 2, |f| dupl_to_li(f, 0x5555));
    let req = with_far(req, 1, |f| dupl_to_li(f, 0x6666));
    let (_, resp) = r.establish(req);
    let teid = local_teid(&resp);

    let out = r.send1(n6(&down(1)));
    assert_eq!(out.len(), 2, "{out:?}");
    let to_gnb: Vec<_> = out
        .iter()
        .filter(|p| p.port() == Port::N3)
        .cloned()
        .collect();
    assert_eq!(numbers_to_gnb(&to_gnb), [1]);
    let copy = out
        .iter()
        .find(|p| p.port() == Port::N9)
        .expect("a copy on N9");
    let (d, inner) = open(copy);
    assert_eq!((d.gtpu.teid, d.outer_dst), (0x5555, LI.into()));
    assert_eq!(inner, routed(&down(1)));

    let out = r.send1(gpdu(teid, Some(9), &up(2)));
    assert_eq!(out.len(), 2, "{out:?}");
    let n6_out = out
        .iter()
        .find(|p| p.port() == Port::N6)
        .expect("the original");
    assert_eq!(n6_out.data(), &routed(&up(2))[..]);
    let copy = out
        .iter()
        .find(|p| p.port() == Port::N9)
        .expect("a copy on N9");
    let (d, inner) = open(copy);
    assert_eq!((d.gtpu.teid, d.outer_dst), (0x6666, LI.into()));
    assert_eq!(inner, routed(&up(2)));

    let c = r.dp().counters().clone();
    assert_eq!((c.created, c.sent(), c.received()), (2, 4, 2));
    assert_balanced(&mut r);
}

#[test]
fn dupl_without_forw_still_duplicates() {
    let mut r = Rig::new();
    let req = with_far(simple_session(UE, 0xabcd), 2, |f| {
        dupl_to_li(f, 0x5555);
        f.apply_action = ApplyAction::DROP | ApplyAction::DUPL;
    });
    r.establish(req);
    let out = r.send1(n6(&down(1)));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].port(), Port::N9);
    assert_balanced(&mut r);
}

#[test]
fn no_buffer_room_still_reports_downlink_data() {
    let mut r = Rig::new();
    // Suggested Buffering Packets Count 0: nothing is held, but the SMF must still page.
    r.establish(buffering(true, Some(0)));
    assert!(r.send(vec![n6(&down(0))]).is_empty());
    assert_one_dldr(&mut r);
    assert_eq!(r.dp().counters().dropped(DropReason::BufferFull), 1);
    assert_balanced(&mut r);
}

/// The BAR's Downlink Data Notification Delay (§8.2.28, units of 50 ms) holds the report
/// back; a FAR set to forward within it (the UE answered) cancels it.
#[test]
fn the_bar_notification_delay_holds_the_report_back() {
    use std::time::Duration;
    let mut r = Rig::new();
    let mut req = buffering(true, None);
    req.create_bar
        .as_mut()
        .unwrap()
        .downlink_data_notification_delay = Some(DownlinkDataNotificationDelay(4));
    let (seid, _) = r.establish(req);
    assert!(r.send(vec![n6(&down(0))]).is_empty());
    assert!(r.reports().is_empty(), "held for 200 ms");
    assert!(r.advance(Duration::from_millis(150)).is_empty());
    assert!(r.send(vec![n6(&down(1))]).is_empty());
    let reps = r.advance(Duration::from_millis(60));
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::DLDR));
    assert!(
        r.advance(Duration::from_secs(1)).is_empty(),
        "once a period"
    );

    // A new period, the FAR set to forward within the delay: nothing is reported.
    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [0, 1]);
    let buff_nocp = ApplyAction::BUFF | ApplyAction::NOCP;
    accepted(&mut r, seid, modification(vec![set_action(2, buff_nocp)]));
    assert!(r.send(vec![n6(&down(2))]).is_empty());
    assert!(r.advance(Duration::from_millis(100)).is_empty());
    accepted(
        &mut r,
        seid,
        modification(vec![set_action(2, ApplyAction::FORW)]),
    );
    assert!(r.advance(Duration::from_millis(200)).is_empty());
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [2]);
}

/// Extended buffering (§5.2.4.1): the DL Buffering Duration and Suggested Packet Count of
/// the Update BAR in a Session Report Response bound how long and how many packets stay
/// buffered; older ones are dropped as buffer_expired.
#[test]
fn extended_buffering_keeps_packets_for_the_dl_buffering_duration() {
    use std::time::Duration;
    let mut r = Rig::new();
    let (_, _) = r.establish(buffering(true, None));
    assert!(r.send((0..2).map(|n| n6(&down(n))).collect()).is_empty());
    // Buffer for 4 s (2 × 2 s), at most 3 packets.
    extend_buffering(&mut r, 2, Some(3));
    r.advance(Duration::from_secs(1));
    assert!(r.send((2..4).map(|n| n6(&down(n))).collect()).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (3, 1));
    r.advance(Duration::from_secs(3));
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferExpired)), (1, 2));
    r.advance(Duration::from_secs(1));
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferExpired)), (0, 3));
    assert_balanced(&mut r);
}

/// The SMF's GTP-U endpoint, where Open5GS has IPv6 Router Solicitations sent.
const SMF_GTPU: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 9);

#[test]
fn forw_to_the_cp_function_tunnels_to_it() {
    let mut r = Rig::new();
    let req = with_far(simple_session(UE, 0xabcd), 1, |f| {
        f.forwarding_parameters = Some(smf::forwarding(
            DestinationInterface::CP_FUNCTION,
            Some(OuterHeaderCreation::gtpu_ipv4(0x7777, SMF_GTPU)),
        ));
    });
    let (_, resp) = r.establish(req);
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
    let out = r.send1(gpdu(local_teid(&resp), Some(9), &up(1)));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].port(), Port::N9);
    let (d, inner) = open(&out[0]);
    assert_eq!((d.gtpu.teid, d.outer_dst), (0x7777, SMF_GTPU.into()));
    assert_eq!(inner, up(1), "not routed: it does not enter or leave N6");
    assert_balanced(&mut r);
}

#[test]
fn forw_nowhere_this_data_path_can_send_is_refused() {
    let cases = [
        (DestinationInterface::CP_FUNCTION, None),
        (DestinationInterface::LI_FUNCTION, None),
        (
            DestinationInterface::VN_INTERNAL,
            Some(OuterHeaderCreation::gtpu_ipv4(0x5555, LI)),
        ),
        (
            DestinationInterface::SGI_LAN,
            Some(OuterHeaderCreation::gtpu_ipv4(0x5555, LI)),
        ),
    ];
    for (dest, ohc) in cases {
        let mut r = Rig::new();
        let req = with_far(simple_session(UE, 0xabcd), 1, |f| {
            f.forwarding_parameters = Some(smf::forwarding(dest, ohc));
        });
        let resp = r.try_establish(req);
        assert_eq!(
            resp.cause,
            Cause::SERVICE_NOT_SUPPORTED,
            "{dest:?}: {resp:?}"
        );
        assert_eq!(r.dp().sessions(), 0);
    }
}

/// A buffering FAR whose buffer is full and whose report has gone out only drops: the
/// session goes to the hot path for that (O(1) a packet, issue #26 §3), and back to the
/// general path when the buffer has room again (expired) or is released.
#[test]
fn a_full_buffer_drops_on_the_hot_path_until_it_has_room() {
    use std::time::Duration;
    let mut r = Rig::new();
    r.establish(buffering(true, Some(2)));
    assert_eq!(r.dp().cold_sessions(), 1, "buffering: the general path");
    assert!(r.send((0..3).map(|n| n6(&down(n))).collect()).is_empty());
    assert_one_dldr(&mut r);
    assert_eq!(r.dp().cold_sessions(), 0, "full and reported: hot");
    assert!(r.send((3..8).map(|n| n6(&down(n))).collect()).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (2, 6));
    assert!(r.reports().is_empty(), "one report a buffering period");
    assert_balanced(&mut r);

    // Extended buffering of 2 s: the buffer expires, has room, and buffers again.
    let mut r = Rig::new();
    let (seid, _) = r.establish(buffering(true, Some(2)));
    assert!(r.send((0..3).map(|n| n6(&down(n))).collect()).is_empty());
    extend_buffering(&mut r, 1, None);
    assert!(r.send(vec![n6(&down(3))]).is_empty());
    assert_eq!(r.dp().cold_sessions(), 0);
    r.advance(Duration::from_secs(3));
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferExpired)), (0, 2));
    assert_eq!(r.dp().cold_sessions(), 1, "room again: the general path");
    assert!(r.send((4..7).map(|n| n6(&down(n))).collect()).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (2, 3));
    assert_eq!(r.dp().cold_sessions(), 0);
    // Released in order when the UE is back; then forwarded.
    accepted(
        &mut r,
        seid,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![n6(&down(9))])), [4, 5, 9]);
    assert_balanced(&mut r);
}

/// Buffering sessions share the worker's buffer budget: once it is full, the FARs it refuses
/// only drop, on the hot path (issue #26 §3), a FAR that never buffered still reporting
/// once; when the budget is back at its low-water mark (a buffer released), they buffer again.
#[test]
fn a_full_buffer_budget_drops_on_the_hot_path_until_it_has_room() {
    const UE2: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 8);
    const UE3: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 9);
    let down_to = |ue, n: u16| n6(&udp4(DN, ue, 10_000 + n, 4000, 100 + usize::from(n), 0));
    let dldrs = |r: &mut Rig| {
        let reps = r.reports();
        assert!(reps
            .iter()
            .all(|m| m.report_type.contains(ReportType::DLDR)));
        reps.len()
    };
    // 128 + 129 + 130 + 131 octets of each UE's packets 0..4: A's four and B's first three
    // fit in 1000, B's fourth and A's fifth do not.
    let mut r = Rig::with(|c| c.buffer_bytes = 1000);
    let (a, _) = r.establish(buffering(true, None));
    r.establish(buffering_at(UE2, 0xabce, true, None));
    assert_eq!(r.dp().cold_sessions(), 2, "buffering: the general path");
    assert!(r.send((0..4).map(|n| n6(&down(n))).collect()).is_empty());
    assert!(r.send((0..4).map(|n| down_to(UE2, n)).collect()).is_empty());
    assert_eq!(r.dp().cold_sessions(), 1, "B refused for the budget: hot");
    assert!(r.send(vec![n6(&down(4))]).is_empty());
    assert_eq!(r.dp().cold_sessions(), 0, "A refused for the budget: hot");
    assert_eq!(dldrs(&mut r), 2);
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (7, 2));
    // A session that comes while the budget is full reports once, then drops on the hot path.
    r.establish(buffering_at(UE3, 0xabcf, true, None));
    assert!(r.send(vec![down_to(UE3, 0)]).is_empty());
    assert_eq!(r.dp().cold_sessions(), 0);
    assert_eq!(dldrs(&mut r), 1);
    let more = [(UE, 5), (UE2, 5), (UE3, 1), (UE, 6), (UE2, 6), (UE3, 2)];
    assert!(r
        .send(more.iter().map(|&(u, n)| down_to(u, n)).collect())
        .is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (7, 9));
    assert_eq!(dldrs(&mut r), 0, "one report a buffering period");
    assert_eq!(r.dp().cold_sessions(), 0);
    assert_balanced(&mut r);

    // A's buffer released: the budget has room, and B (same buffering period, no new report)
    // and C buffer again.
    accepted(
        &mut r,
        a,
        modification(vec![smf::update_far_to_gnb(2, 0xabcd, GNB)]),
    );
    assert_eq!(numbers_to_gnb(&r.send(vec![])), [0, 1, 2, 3]);
    assert_eq!(r.dp().cold_sessions(), 2, "B and C: the general path again");
    assert!(r.send(vec![down_to(UE2, 7), down_to(UE3, 3)]).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (5, 9));
    assert_eq!(dldrs(&mut r), 0, "one report a buffering period");
    assert_balanced(&mut r);
}

/// A FAR refused for the worker's budget whose own buffered packets expire takes the
/// general path again and buffers, though the budget is not back at its low-water mark.
#[test]
fn a_far_refused_for_the_budget_buffers_again_when_its_own_buffer_expires() {
    use std::time::Duration;
    const UE2: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 8);
    let down_to = |ue, n: u16| n6(&udp4(DN, ue, 10_000 + n, 4000, 100 + usize::from(n), 0));
    // A holds 128 octets, B 228 + … + 235 = 1852, of 2000 (low-water mark 1750).
    let mut r = Rig::with(|c| c.buffer_bytes = 2000);
    r.establish(buffering(true, None));
    assert!(r.send(vec![n6(&down(0))]).is_empty());
    extend_buffering(&mut r, 1, None);
    r.establish(buffering_at(UE2, 0xabce, true, None));
    assert!(r
        .send((100..109).map(|n| down_to(UE2, n)).collect())
        .is_empty());
    assert!(r.send(vec![n6(&down(1))]).is_empty());
    assert_eq!(
        r.dp().cold_sessions(),
        0,
        "both refused for the budget: hot"
    );
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (9, 2));
    r.advance(Duration::from_secs(3));
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferExpired)), (8, 1));
    assert_eq!(r.dp().cold_sessions(), 1, "A: the general path again");
    assert!(r.send(vec![n6(&down(2)), down_to(UE2, 109)]).is_empty());
    let c = r.dp().counters().clone();
    assert_eq!((c.buffered, c.dropped(DropReason::BufferFull)), (9, 3));
    assert_balanced(&mut r);
}
