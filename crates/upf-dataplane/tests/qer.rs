//! QERs through the real agent: gates per direction, MBR policing measured over 10 s of
//! virtual time, a session AMBR (one QER shared by two QoS flows), and packet rates (on the
//! hot path and the general one); an MBR bucket's backlog carried to another engine.

mod common;
use common::*;
use std::net::Ipv4Addr;
use std::time::Duration;
use upf_dataplane::{DropReason, Packet, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_smf as smf;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 11);
/// Inner packets of 1000 octets: 8000 bits each.
const SIZE: usize = 1000;
const STEP: Duration = Duration::from_millis(10);

fn up(dport: u16) -> Vec<u8> {
    udp4(UE, DN, 4000, dport, SIZE - 28, 0)
}

fn down(sport: u16) -> Vec<u8> {
    udp4(DN, UE, sport, 4000, SIZE - 28, 0)
}

#[test]
fn closed_gates_drop_per_direction() {
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let mut q = smf::create_qer(1, None, Some(9));
    q.gate_status = GateStatus {
        uplink: Gate::Closed,
        downlink: Gate::Open,
    };
    req.create_qers = [q].into_iter().collect();
    let (seid, resp) = r.establish(req);
    let teid = local_teid(&resp);
    let out = r.send(vec![gpdu(teid, Some(9), &up(53)), n6(&down(53))]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    assert_eq!(r.dp().counters().dropped(DropReason::GateClosed), 1);

    let m = SessionModificationRequest {
        update_qers: [UpdateQer {
            qer_id: QerId(1),
            gate_status: Some(GateStatus {
                uplink: Gate::Open,
                downlink: Gate::Closed,
            }),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
    let out = r.send(vec![gpdu(teid, Some(9), &up(53)), n6(&down(53))]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N6);
    assert_eq!(r.dp().counters().dropped(DropReason::GateClosed), 2);
    assert_balanced(&mut r);
}

/// Runs `batches` batches `STEP` apart; `make(k)` gives batch k. Returns, per class that
/// `class` gives each packet out, the bits forwarded before `from` and from `from` on.
fn offer(
    r: &mut Rig,
    batches: u32,
    from: Duration,
    mut make: impl FnMut(u32) -> Vec<Packet>,
    class: impl Fn(&Packet) -> usize,
) -> Vec<(u64, u64)> {
    let mut bits = vec![(0u64, 0u64); 4];
    let t0 = r.now;
    for k in 0..batches {
        let late = r.now - t0 >= from;
        for p in r.send(make(k)) {
            let b = &mut bits[class(&p)];
            let inner = match p.port() {
                Port::N6 => p.len(),
                _ => open(&p).1.len(),
            };
            assert_eq!(inner, SIZE);
            if late {
                b.1 += SIZE as u64 * 8;
            } else {
                b.0 += SIZE as u64 * 8;
            }
        }
        r.now += STEP;
    }
    bits
}

fn within_5_percent(bits: u64, secs: f64, kbps: u64) {
    let rate = bits as f64 / secs;
    let want = kbps as f64 * 1000.0;
    assert!(
        (rate - want).abs() <= want * 0.05,
        "{rate} bit/s, want {want} ± 5 %"
    );
}

#[test]
fn mbr_holds_each_direction_to_its_rate_after_the_burst() {
    let (ul_kbps, dl_kbps) = (2_000, 4_000);
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    req.create_qers = [smf::create_qer(1, Some((ul_kbps, dl_kbps)), Some(9))]
        .into_iter()
        .collect();
    let (_, resp) = r.establish(req);
    let teid = local_teid(&resp);
    // Twice the MBR: 5 (uplink) and 10 (downlink) packets of 8000 bits every 10 ms, for
    // 12.5 s; the bucket (2 s of MBR) is empty after 2 s, measured from 2.5 s on.
    let bits = offer(
        &mut r,
        1250,
        Duration::from_millis(2500),
        |_| {
            let mut v: Vec<Packet> = (0..5).map(|_| gpdu(teid, Some(9), &up(53))).collect();
            v.extend((0..10).map(|_| n6(&down(53))));
            v
        },
        |p| usize::from(p.port() == Port::N3),
    );
    let (ul, dl) = (bits[0], bits[1]);
    within_5_percent(ul.1, 10.0, ul_kbps);
    within_5_percent(dl.1, 10.0, dl_kbps);
    // The first 2.5 s: one averaging window of burst (2 s of MBR) on top of 2.5 s at the
    // MBR, i.e. 4.5 s worth of MBR in 2.5 s.
    within_5_percent(ul.0, 2.5, ul_kbps * 9 / 5);
    let c = r.dp().counters().clone();
    assert!(c.dropped(DropReason::MbrExceeded) > 0);
    assert!(c.balanced(), "{c:?}");
}

#[test]
fn session_ambr_shared_by_two_qos_flows_holds_their_sum() {
    let ambr_kbps = 4_000;
    let flow = "permit out 17 from 198.51.100.0/24 1000-2000 to assigned";
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let mut pdrs: Vec<CreatePdr> = req.create_pdrs.iter().cloned().collect();
    // PDR 2 (QoS flow 9) and PDR 4 (QoS flow 5, the filter): each its flow QER and QER 1.
    pdrs[1].qer_ids = [QerId(2), QerId(1)].into_iter().collect();
    pdrs[1].precedence = Precedence(200);
    let mut dl5 = pdrs[1].clone();
    dl5.pdr_id = PdrId(4);
    dl5.precedence = Precedence(100);
    dl5.pdi.sdf_filters = [SdfFilter {
        flow_description: Some(flow.into()),
        ..Default::default()
    }]
    .into_iter()
    .collect();
    dl5.qer_ids = [QerId(3), QerId(1)].into_iter().collect();
    pdrs.push(dl5);
    req.create_pdrs = pdrs.into_iter().collect();
    req.create_qers = [
        smf::create_qer(1, Some((ambr_kbps, ambr_kbps)), None),
        smf::create_qer(2, None, Some(9)),
        smf::create_qer(3, None, Some(5)),
    ]
    .into_iter()
    .collect();
    r.establish(req);
    // Each flow offered at the AMBR: twice the AMBR in all.
    let bits = offer(
        &mut r,
        1250,
        Duration::from_millis(2500),
        |_| (0..10).map(|i| n6(&down(1500 + i % 2 * 1000))).collect(),
        |p| usize::from(open(p).0.gtpu.ext.psc.map(|c| c.qfi) == Some(5)),
    );
    let (q9, q5) = (bits[0].1, bits[1].1);
    within_5_percent(q9 + q5, 10.0, ambr_kbps);
    // Offered alike, shared alike.
    let share = q5 as f64 / (q5 + q9) as f64;
    assert!((0.4..=0.6).contains(&share), "flow 5 got {share}");
    assert_balanced(&mut r);
}

// ---- Packet Rate (TS 29.244 §8.2.68) ---------------------------------------------------------

/// A Packet Rate of `n` packets per `unit` (a §8.2.68 time unit: 0 minute, 1 six minutes…)
/// in each direction given.
fn packet_rate(ul: Option<(u16, u8)>, dl: Option<(u16, u8)>) -> PacketRate {
    let limit = |(max_packets, time_unit)| PacketRateLimit {
        time_unit,
        max_packets,
    };
    PacketRate {
        uplink: ul.map(limit),
        downlink: dl.map(limit),
        ..Default::default()
    }
}

const MINUTE: u8 = PacketRateLimit::TIME_UNIT_MINUTE;
const SIX_MINUTES: u8 = PacketRateLimit::TIME_UNIT_6_MINUTES;

/// A rig whose session has QER 1 (on both PDRs) with `rate`, on the hot path or, with
/// `hot` false, the general one; returns it with the session's SEID and uplink TEID.
fn rated(hot: bool, rate: PacketRate) -> (Rig, u64, u32) {
    let mut r = Rig::new();
    r.dp().set_hot_records(hot);
    let mut req = simple_session(UE, 0xabcd);
    let mut q = smf::create_qer(1, None, Some(9));
    q.packet_rate = Some(rate);
    req.create_qers = [q].into_iter().collect();
    let (seid, resp) = r.establish(req);
    assert_eq!(r.dp().cold_sessions(), usize::from(!hot));
    let teid = local_teid(&resp);
    (r, seid, teid)
}

/// Offers `n` uplink packets now; returns how many were forwarded.
fn ul(r: &mut Rig, teid: u32, n: usize) -> usize {
    r.send((0..n).map(|_| gpdu(teid, Some(9), &up(53))).collect())
        .len()
}

/// Offers `n` downlink packets now; returns how many were forwarded.
fn dl(r: &mut Rig, n: usize) -> usize {
    r.send((0..n).map(|_| n6(&down(53))).collect()).len()
}

fn rate_drops(r: &mut Rig) -> u64 {
    r.dp().counters().dropped(DropReason::PacketRateExceeded)
}

#[test]
fn packet_rate_passes_n_then_drops_and_refills() {
    for hot in [true, false] {
        // 6 uplink packets a minute: 6 at once, then one each 10 s, never more than 6 held.
        let (mut r, _, teid) = rated(hot, packet_rate(Some((6, MINUTE)), None));
        assert_eq!(ul(&mut r, teid, 10), 6, "hot {hot}");
        assert_eq!(rate_drops(&mut r), 4);
        r.now += Duration::from_millis(9_999);
        assert_eq!(ul(&mut r, teid, 3), 0, "hot {hot}: early");
        r.now += Duration::from_millis(1);
        assert_eq!(ul(&mut r, teid, 3), 1, "hot {hot}: one after 10 s");
        r.now += Duration::from_secs(600);
        assert_eq!(ul(&mut r, teid, 10), 6, "hot {hot}: full, not over-full");
        // At 6 a minute offered one each 5 s for 10 minutes: half pass (and the bucket's
        // 6 to begin with, spent above, do not come back).
        let mut sent = 0;
        for _ in 0..120 {
            r.now += Duration::from_secs(5);
            sent += ul(&mut r, teid, 1);
        }
        assert_eq!(sent, 60, "hot {hot}");
        assert_eq!(rate_drops(&mut r), 4 + 3 + 2 + 4 + 60);
        // Dropped packets were not counted in usage: the URR saw what was forwarded.
        assert_balanced(&mut r);
    }
}

#[test]
fn packet_rates_of_uplink_and_downlink_are_independent() {
    for hot in [true, false] {
        // 3 a minute uplink, 5 every 6 minutes downlink.
        let (mut r, _, teid) = rated(hot, packet_rate(Some((3, MINUTE)), Some((5, SIX_MINUTES))));
        assert_eq!(ul(&mut r, teid, 5), 3, "hot {hot}");
        // The uplink's bucket is empty; the downlink's is full.
        assert_eq!(dl(&mut r, 7), 5, "hot {hot}");
        assert_eq!(ul(&mut r, teid, 1), 0, "hot {hot}");
        // 20 s: one uplink packet back; a downlink one needs 72 s.
        r.now += Duration::from_secs(20);
        assert_eq!((ul(&mut r, teid, 2), dl(&mut r, 2)), (1, 0), "hot {hot}");
        r.now += Duration::from_secs(52);
        assert_eq!((ul(&mut r, teid, 5), dl(&mut r, 2)), (2, 1), "hot {hot}");
        assert_balanced(&mut r);

        // A rate in one direction only leaves the other alone.
        let (mut r, _, teid) = rated(hot, packet_rate(Some((2, MINUTE)), None));
        assert_eq!((ul(&mut r, teid, 4), dl(&mut r, 50)), (2, 50), "hot {hot}");
        let (mut r, _, teid) = rated(hot, packet_rate(None, Some((2, MINUTE))));
        assert_eq!((ul(&mut r, teid, 50), dl(&mut r, 4)), (50, 2), "hot {hot}");
        assert_eq!(rate_drops(&mut r), 2);
    }
}

#[test]
fn a_packet_dropped_by_one_qer_takes_nothing_from_the_others() {
    for hot in [true, false] {
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let mut req = simple_session(UE, 0xabcd);
        let mut pdrs: Vec<CreatePdr> = req.create_pdrs.iter().cloned().collect();
        // PDR 1 (QoS flow 9): the session's QER 1 and the flow's QER 2; PDR 3 (QoS flow 5,
        // on the same F-TEID): QER 1 only.
        pdrs[0].qer_ids = [QerId(1), QerId(2)].into_iter().collect();
        let mut flow5 = pdrs[0].clone();
        flow5.pdr_id = PdrId(3);
        flow5.precedence = Precedence(50);
        flow5.pdi.qfis = [Qfi(5)].into_iter().collect();
        flow5.qer_ids = [QerId(1)].into_iter().collect();
        pdrs.push(flow5);
        req.create_pdrs = pdrs.into_iter().collect();
        // QER 1: 4 a minute. QER 2: 2 a minute, and an MBR whose bucket holds 1.5 packets
        // of 1000 octets and refills in 12 ms.
        let mut q1 = smf::create_qer(1, None, Some(9));
        q1.packet_rate = Some(packet_rate(Some((4, MINUTE)), None));
        let mut q2 = smf::create_qer(2, Some((1_000, 1_000)), None);
        q2.packet_rate = Some(packet_rate(Some((2, MINUTE)), None));
        q2.averaging_window = Some(AveragingWindow(0));
        req.create_qers = [q1, q2].into_iter().collect();
        let (_, resp) = r.establish(req);
        assert_eq!(r.dp().cold_sessions(), usize::from(!hot));
        let teid = local_teid(&resp);
        let flow = |r: &mut Rig, qfi: u8, n: usize| {
            r.send((0..n).map(|_| gpdu(teid, Some(qfi), &up(53))).collect())
                .len()
        };
        // One passes, one is dropped for the MBR: it takes no packet from either rate.
        assert_eq!(flow(&mut r, 9, 2), 1, "hot {hot}");
        assert_eq!(r.dp().counters().dropped(DropReason::MbrExceeded), 1);
        r.now += Duration::from_millis(20);
        assert_eq!(flow(&mut r, 9, 1), 1, "hot {hot}: QER 2's second packet");
        // QER 2 has none left; the packet it drops takes none from QER 1 ...
        r.now += Duration::from_millis(20);
        assert_eq!(flow(&mut r, 9, 1), 0, "hot {hot}");
        assert_eq!(rate_drops(&mut r), 1);
        // ... whose 2 left pass on flow 5.
        r.now += Duration::from_millis(20);
        assert_eq!(flow(&mut r, 5, 3), 2, "hot {hot}");
        assert_eq!(rate_drops(&mut r), 2);
        assert_balanced(&mut r);
    }
}

#[test]
fn an_update_qer_changes_the_packet_rate_keeping_what_is_left() {
    let update = |rate: PacketRate| SessionModificationRequest {
        update_qers: [UpdateQer {
            qer_id: QerId(1),
            packet_rate: Some(rate),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    for hot in [true, false] {
        let (mut r, seid, teid) = rated(hot, packet_rate(Some((10, MINUTE)), None));
        assert_eq!(ul(&mut r, teid, 4), 4, "hot {hot}");
        // 100 a minute: the 6 left are still there, and refill at the new rate.
        let m = update(packet_rate(Some((100, MINUTE)), None));
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(r.dp().cold_sessions(), usize::from(!hot));
        assert_eq!(ul(&mut r, teid, 10), 6, "hot {hot}");
        r.now += Duration::from_millis(600);
        assert_eq!(ul(&mut r, teid, 3), 1, "hot {hot}: one each 0.6 s");
        // 2 a minute: the bucket holds 2, however long it waited.
        let m = update(packet_rate(Some((2, MINUTE)), None));
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        r.now += Duration::from_secs(3600);
        assert_eq!(ul(&mut r, teid, 10), 2, "hot {hot}");
        // A packet rate given to the downlink by an update applies at once.
        assert_eq!(dl(&mut r, 10), 10, "hot {hot}");
        let m = update(packet_rate(Some((2, MINUTE)), Some((3, MINUTE))));
        assert_eq!(r.modify(seid, m).cause, Cause::REQUEST_ACCEPTED);
        assert_eq!(dl(&mut r, 10), 3, "hot {hot}");
        assert_eq!(
            ul(&mut r, teid, 1),
            0,
            "hot {hot}: the uplink kept its state"
        );
        assert_balanced(&mut r);
    }
}

/// An MBR bucket's backlog read from one pipeline and carried to another (another engine,
/// on its own clock): the tokens spent on the first stay spent on the second, hot record
/// or general path.
#[test]
fn an_mbr_backlog_carried_to_another_engine_keeps_the_tokens_spent() {
    // 1,000 kbit/s, the 2 s window: 2 Mbit, 250 packets of 8000 bits.
    let establish = |r: &mut Rig| {
        let mut req = simple_session(UE, 0xabcd);
        req.create_qers = [smf::create_qer(1, Some((1000, 1000)), Some(9))]
            .into_iter()
            .collect();
        let (seid, resp) = r.establish(req);
        (upf_rules::Seid(seid), local_teid(&resp))
    };
    let burst = |teid, n| (0..n).map(|_| gpdu(teid, Some(9), &up(53))).collect();
    let mut a = Rig::new();
    let (seid, teid) = establish(&mut a);
    assert_eq!(a.send(burst(teid, 200)).len(), 200);
    let now = a.now;
    let carried = a.dp().carried(now, seid).unwrap();
    assert_eq!(
        carried.backlogs.len(),
        2,
        "uplink and downlink: {carried:?}"
    );
    for hot in [true, false] {
        let mut b = Rig::new();
        b.now += Duration::from_secs(100);
        b.dp().set_hot_records(hot);
        let (seid, teid) = establish(&mut b);
        assert_eq!(b.dp().cold_sessions(), usize::from(!hot));
        let now = b.now;
        b.dp().carry_in(now, seid, &carried).unwrap();
        assert_eq!(b.send(burst(teid, 100)).len(), 50, "hot: {hot}");
        assert_eq!(b.dp().counters().dropped(DropReason::MbrExceeded), 50);
        // From there it refills on its own clock: 1 s, 125 packets.
        b.now += Duration::from_secs(1);
        assert_eq!(b.send(burst(teid, 200)).len(), 125, "hot: {hot}");
    }
}

// ---- GBR flows, found before processing (issue #28) ------------------------------------------

/// A session with two QoS flows each way, the second (QFI 5 uplink; UDP from 198.51.100.0/24
/// downlink) under a GBR QER: `gbr_flow` names exactly the second flow's packets, as
/// processing classifies them, and nothing once the session is gone.
#[test]
fn gbr_flows_are_named_before_processing() {
    let mut r = Rig::new();
    assert!(!r.dp().has_gbr());
    let mut req = simple_session(UE, 0xabcd);
    let mut pdrs: Vec<CreatePdr> = req.create_pdrs.iter().cloned().collect();
    let mut ul5 = pdrs[0].clone();
    ul5.pdr_id = PdrId(3);
    ul5.precedence = Precedence(50);
    ul5.pdi.qfis = [Qfi(5)].into_iter().collect();
    ul5.qer_ids = [QerId(2)].into_iter().collect();
    let mut dl5 = pdrs[1].clone();
    dl5.pdr_id = PdrId(4);
    dl5.precedence = Precedence(50);
    dl5.pdi.sdf_filters = [SdfFilter {
        flow_description: Some("permit out 17 from 198.51.100.0/24 to assigned".into()),
        ..Default::default()
    }]
    .into_iter()
    .collect();
    dl5.qer_ids = [QerId(2)].into_iter().collect();
    pdrs.extend([ul5, dl5]);
    req.create_pdrs = pdrs.into_iter().collect();
    req.create_qers = [
        smf::create_qer(1, None, Some(9)),
        CreateQer {
            gbr: Some(Gbr {
                uplink_kbps: 64,
                downlink_kbps: 64,
            }),
            ..smf::create_qer(2, None, Some(5))
        },
    ]
    .into_iter()
    .collect();
    let (seid, resp) = r.establish(req);
    let teid = local_teid(&resp);
    assert!(r.dp().has_gbr());
    let up = udp4(UE, DN, 4000, 5000, 100, 0);
    let from = |a: [u8; 4]| udp4(Ipv4Addr::from(a), UE, 5000, 4000, 100, 0);
    let cases = [
        (gpdu(teid, Some(5), &up), true),
        (gpdu(teid, Some(9), &up), false),
        (gpdu(teid, None, &up), false),
        (gpdu(teid ^ 1, Some(5), &up), false),
        (n6(&from([198, 51, 100, 7])), true),
        (n6(&from([203, 0, 113, 7])), false),
        (
            n6(&udp4(DN, Ipv4Addr::new(10, 60, 0, 99), 5000, 4000, 100, 0)),
            false,
        ),
    ];
    for (i, (p, want)) in cases.iter().enumerate() {
        assert_eq!(r.dp().gbr_flow(p), *want, "case {i}");
    }
    // The same packets, processed: the GBR flow's leave with QFI 5.
    let out = r.send(vec![n6(&from([198, 51, 100, 7]))]);
    assert_eq!(open(&out[0]).0.gtpu.ext.psc.map(|c| c.qfi), Some(5));
    r.delete(seid);
    assert!(!r.dp().has_gbr());
    assert!(!r.dp().gbr_flow(&cases[0].0));
}
