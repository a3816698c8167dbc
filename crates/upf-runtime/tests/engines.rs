//! The engines together (root: the XDP engine is loaded, its program run by
//! BPF_PROG_TEST_RUN, the workers on channels): a session the XDP engine can run is placed
//! there and one it cannot stays with the workers; what the kernel and the workers count
//! for a URR is in its reports once, exactly, also across a move between engines; a full
//! XDP engine refuses a session (`xdp`) or leaves it to the workers (`auto`); the tokens an
//! MBR bucket has spent stay spent across a move either way; a volume threshold reached or a
//! quota spent in the kernel is reported at once, with the exact volume.

use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::Packet;
use upf_rules::{
    Bitrate, Datapath, DatapathError, InstallFlags, MeasurementMethod, Qer, QerId,
    ReportingTriggers, Seid, Session, Urr, UrrId, UsageReport, VolumeLimit,
};
use upf_runtime::{EngineMode, Engines, Runs, Workers};
use upf_xdp::{Config, Engine, Hops, NextHop};
mod common;

use common::{gpdu, session, ue, UPF};

/// XDP_DROP, XDP_PASS (a punt without a steering program) and XDP_TX (forwarded with fixed
/// hops).
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
/// The octets of [`gpdu_of`]'s inner packet (what a URR counts).
const INNER: u64 = 28;

fn engines(sessions: u32, mode: EngineMode) -> Engines {
    let workers = Workers::start(&upf_runtime::RuntimeConfig {
        pipeline: upf_dataplane::PipelineConfig {
            n3: upf_dataplane::LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("workers");
    let none = NextHop::default();
    let engine = Engine::load(Config {
        sessions,
        n3: UPF,
        n9: UPF,
        n3_v6: None,
        n9_v6: None,
        outer_ttl: 64,
        hops: Some(Hops { n3: none, n6: none }),
        acl: Default::default(),
    })
    .expect("the XDP engine loads");
    Engines::with_xdp(workers, engine, mode)
}

/// UE `i`'s uplink session with URR 1 (volume) on its PDR; `threshold`: a time threshold
/// report, which the XDP engine does not run.
fn with_urr(i: u32, threshold: bool) -> Arc<Session> {
    let mut s = (*session(i)).clone();
    let mut u = Urr::new(UrrId(1));
    u.method = MeasurementMethod::VOLUM;
    if threshold {
        u.triggers = ReportingTriggers::TIMTH;
        u.time_threshold_s = Some(3600);
    }
    s.insert_urr(u).unwrap();
    s.pdrs[0].urrs = [UrrId(1)].into_iter().collect();
    Arc::new(s)
}

/// A G-PDU of UE `i` (28 octets inside) on its TEID.
fn gpdu_of(i: u32) -> Packet {
    gpdu(100 + i, ue(i), 0, 0)
}

/// Runs UE `i`'s G-PDU `n` times through the XDP program; the verdicts.
fn through_kernel(e: &Engines, i: u32, n: usize) -> Vec<u32> {
    let mut frame = vec![0u8; 12];
    frame.extend([8, 0]);
    frame.extend_from_slice(gpdu_of(i).data());
    let prog = e.xdp().expect("the XDP engine").program().unwrap();
    let mut out = vec![0u8; 2048];
    (0..n)
        .map(|_| {
            upf_io::bpf::run(prog, &frame, &mut out, 1, None)
                .unwrap()
                .retval
        })
        .collect()
}

/// Sends UE `i`'s G-PDU `n` times through the workers (as punted packets come); waits for
/// them to come out.
fn through_workers(e: &Engines, i: u32, n: usize) {
    let w = e.workers();
    w.steer((0..n).map(|_| gpdu_of(i)).collect());
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < n && Instant::now() < deadline {
        got += w.collect(Duration::from_millis(100)).len();
    }
    assert_eq!(got, n, "the workers forwarded them");
}

fn uplink_packets(reports: &[UsageReport]) -> u64 {
    reports.iter().map(|r| r.volume.uplink_packets).sum()
}

#[test]
#[ignore = "needs root"]
fn usage_counted_by_both_engines_is_reported_once_also_across_a_move() {
    let mut e = engines(4, EngineMode::Xdp);
    let now = Instant::now();
    let flags = InstallFlags::default();
    e.install(now, with_urr(0, false), flags).unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 5), vec![XDP_TX; 5]);
    through_workers(&e, 0, 3);
    let q = e.query_usage(now, Seid(1), &[UrrId(1)]).unwrap();
    assert_eq!(
        uplink_packets(&q),
        8,
        "5 in the kernel, 3 in the workers: {q:?}"
    );
    let q = e.query_usage(now, Seid(1), &[]).unwrap();
    assert_eq!(uplink_packets(&q), 0, "restarted: {q:?}");

    // Counted in the kernel, then a threshold the engine does not run: the session moves to
    // the workers, what the kernel counted with it.
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    e.install(now, with_urr(0, true), flags).unwrap();
    assert!(
        matches!(e.runs(Seid(1)), Runs::User(Some(_))),
        "{:?}",
        e.runs(Seid(1))
    );
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_PASS], "punted now");
    through_workers(&e, 0, 4);
    // And back to the kernel.
    e.install(now, with_urr(0, false), flags).unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 3), vec![XDP_TX; 3]);
    let last = e.remove(now, Seid(1)).unwrap();
    assert_eq!(
        uplink_packets(&last),
        2 + 4 + 3,
        "every packet since the query, once: {last:?}"
    );
    assert_eq!(
        through_kernel(&e, 0, 1),
        vec![XDP_PASS],
        "gone from the kernel"
    );
}

#[test]
#[ignore = "needs root"]
fn a_full_xdp_engine_refuses_in_xdp_mode_and_leaves_it_to_the_workers_in_auto() {
    let now = Instant::now();
    let flags = InstallFlags::default();
    let mut e = engines(1, EngineMode::Xdp);
    e.install(now, with_urr(0, false), flags).unwrap();
    assert!(matches!(
        e.install(now, with_urr(1, false), flags),
        Err(DatapathError::NoResources(_))
    ));
    assert!(
        e.workers().installed(Seid(2)).is_none(),
        "a refused session is nowhere"
    );
    // A session the engine cannot run goes to the workers even when it is full.
    e.install(now, with_urr(2, true), flags).unwrap();
    assert!(matches!(e.runs(Seid(3)), Runs::User(Some(_))));

    let mut e = engines(1, EngineMode::Auto);
    e.install(now, with_urr(0, false), flags).unwrap();
    e.install(now, with_urr(1, false), flags).unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    match e.runs(Seid(2)) {
        Runs::User(Some(why)) => assert!(why.contains("holds its 1 sessions"), "{why}"),
        r => panic!("{r:?}"),
    }
    through_workers(&e, 1, 2);
    assert_eq!(through_kernel(&e, 1, 1), vec![XDP_PASS]);
}

#[test]
#[ignore = "needs root"]
fn a_periodic_report_holds_what_the_kernel_counted() {
    let mut e = engines(4, EngineMode::Xdp);
    let mut s = (*with_urr(0, false)).clone();
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers = ReportingTriggers::PERIO;
    u.measurement_period_s = Some(1);
    e.install(Instant::now(), Arc::new(s), InstallFlags::default())
        .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 4), vec![XDP_TX; 4]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let report = loop {
        if let Some(upf_rules::DatapathEvent::Usage(r)) = e.poll_event() {
            break r;
        }
        assert!(Instant::now() < deadline, "no periodic report");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(report.volume.uplink_packets, 4, "{report:?}");
    assert_eq!(report.volume.uplink_bytes, 4 * 28);
}

/// [`with_urr`] with QER 1 on its PDR: an uplink MBR of 1 kbit/s, PFCP's least, so that
/// the bucket (12,000 bits: one full-size packet, more than the 2 s window's 2,000) holds
/// 53 of the 28-octet G-PDUs and refills one of them in 224 ms.
fn with_mbr(threshold: bool) -> Arc<Session> {
    let mut s = (*with_urr(0, threshold)).clone();
    let mut q = Qer::open(QerId(1));
    q.mbr = Some(Bitrate {
        uplink_kbps: 1,
        downlink_kbps: 1,
    });
    s.insert_qer(q).unwrap();
    s.pdrs[0].qers = [QerId(1)].into_iter().collect();
    Arc::new(s)
}

/// G-PDUs a full bucket of [`with_mbr`] passes; those the tests spend on one engine before
/// the move (a 1,920-bit rest: 8 more pass), and the most the other engine may pass after
/// it: the rest and what refills in 2.7 s, far from a full bucket.
const FULL: usize = 53;
const SPENT: usize = 45;
const AFTER_MOST: usize = 20;

/// Sends UE 0's G-PDU `n` times through the workers; how many they forwarded (the others
/// dropped for the MBR).
fn offered_to_workers(e: &Engines, n: usize) -> usize {
    offered_to_workers_dropping(e, n, upf_dataplane::DropReason::MbrExceeded)
}

/// [`offered_to_workers`], the others dropped for `reason`.
fn offered_to_workers_dropping(e: &Engines, n: usize, reason: upf_dataplane::DropReason) -> usize {
    let w = e.workers();
    let mbr = |w: &Workers| -> u64 {
        (w.counters().iter())
            .map(|c| c.dropped[reason as usize])
            .sum()
    };
    let dropped_before = mbr(w);
    w.steer((0..n).map(|_| gpdu_of(0)).collect());
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        got += w.collect(Duration::from_millis(50)).len();
        let dropped = usize::try_from(mbr(w) - dropped_before).unwrap();
        if got + dropped == n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{got} forwarded, {dropped} dropped of {n}"
        );
    }
}

/// Moves every session to the engine of `mode`.
fn swap(e: &mut Engines, mode: EngineMode) {
    e.set_mode(Instant::now(), mode).unwrap();
    while e.moving() {
        e.move_some(Duration::from_millis(5));
    }
}

fn kernel_mbr_drops(e: &Engines) -> u64 {
    let stats = e.xdp_stats().unwrap().unwrap();
    (stats.dropped.iter())
        .find(|(r, _)| *r == upf_xdp::Reason::MbrExceeded)
        .map_or(0, |(_, n)| *n)
}

#[test]
#[ignore = "needs root"]
fn tokens_spent_on_one_engine_stay_spent_across_a_swap() {
    // Spent on the workers, then swapped into the kernel.
    let mut e = engines(4, EngineMode::User);
    e.install(Instant::now(), with_mbr(false), InstallFlags::default())
        .unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(_)));
    assert_eq!(offered_to_workers(&e, SPENT), SPENT);
    swap(&mut e, EngineMode::Xdp);
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    let verdicts = through_kernel(&e, 0, FULL);
    let passed = verdicts.iter().filter(|&&v| v == XDP_TX).count();
    assert!(
        (FULL - SPENT..AFTER_MOST).contains(&passed),
        "the kernel passed {passed} of {FULL}: {verdicts:?}"
    );
    assert_eq!(
        passed + verdicts.iter().filter(|&&v| v == XDP_DROP).count(),
        FULL
    );
    assert_eq!(kernel_mbr_drops(&e), (FULL - passed) as u64);

    // Spent in the kernel, then swapped out to the workers.
    let mut e = engines(4, EngineMode::Xdp);
    e.install(Instant::now(), with_mbr(false), InstallFlags::default())
        .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, SPENT), vec![XDP_TX; SPENT]);
    swap(&mut e, EngineMode::User);
    assert!(matches!(e.runs(Seid(1)), Runs::User(_)));
    let passed = offered_to_workers(&e, FULL);
    assert!(
        (FULL - SPENT..AFTER_MOST).contains(&passed),
        "the workers passed {passed} of {FULL}"
    );
}

#[test]
#[ignore = "needs root"]
fn tokens_spent_stay_spent_when_a_modification_moves_the_session() {
    let flags = InstallFlags::default();
    let mut e = engines(4, EngineMode::Xdp);
    e.install(Instant::now(), with_mbr(false), flags).unwrap();
    assert_eq!(through_kernel(&e, 0, SPENT), vec![XDP_TX; SPENT]);
    // A threshold the engine does not run: to the workers, the bucket as the kernel left it.
    e.install(Instant::now(), with_mbr(true), flags).unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(Some(_))));
    let passed = offered_to_workers(&e, AFTER_MOST);
    assert!(
        (FULL - SPENT..AFTER_MOST).contains(&passed),
        "the workers passed {passed} of {AFTER_MOST}"
    );
    // And back: into the kernel, the bucket as the workers left it (empty).
    e.install(Instant::now(), with_mbr(false), flags).unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    let passed = through_kernel(&e, 0, FULL)
        .iter()
        .filter(|&&v| v == XDP_TX)
        .count();
    assert!(passed < AFTER_MOST, "the kernel passed {passed} of {FULL}");
}

/// The next usage report `e` gives within a few seconds, or None.
fn next_report(e: &mut Engines) -> Option<UsageReport> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(upf_rules::DatapathEvent::Usage(r)) = e.poll_event() {
            return Some(r);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// UE 0's session with URR 1 `triggers`, a total volume threshold and/or quota of `n`
/// packets' inner octets.
fn with_volume(
    triggers: ReportingTriggers,
    threshold: Option<u64>,
    quota: Option<u64>,
) -> Arc<Session> {
    let mut s = (*with_urr(0, false)).clone();
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers = triggers;
    let limit = |n: Option<u64>| {
        n.map(|n| VolumeLimit {
            total: Some(n * INNER),
            ..Default::default()
        })
    };
    u.volume_threshold = limit(threshold);
    u.volume_quota = limit(quota);
    Arc::new(s)
}

#[test]
#[ignore = "needs root"]
fn a_volume_threshold_reached_in_the_kernel_is_reported_with_the_volume_sent() {
    let mut e = engines(4, EngineMode::Xdp);
    let s = with_volume(ReportingTriggers::VOLTH, Some(3), None);
    e.install(Instant::now(), s, InstallFlags::default())
        .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    assert_eq!(e.poll_event(), None, "below the threshold");
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    let r = next_report(&mut e).expect("a threshold report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLTH, "{r:?}");
    assert_eq!(
        (r.volume.uplink_packets, r.volume.total_bytes),
        (3, 3 * INNER)
    );
    // The next threshold counts from the report.
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    assert_eq!(e.poll_event(), None, "2 of the next 3");
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    let r = next_report(&mut e).expect("a second threshold report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLTH, "{r:?}");
    assert_eq!(r.volume.uplink_packets, 3, "{r:?}");
    // A query restarts the measurement too: the threshold counts from it.
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    let q = e.query_usage(Instant::now(), Seid(1), &[]).unwrap();
    assert_eq!(uplink_packets(&q), 2);
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    assert_eq!(e.poll_event(), None, "2 since the query");
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    let r = next_report(&mut e).expect("a third threshold report");
    assert_eq!(r.volume.uplink_packets, 3, "{r:?}");
    assert_eq!(e.xdp_stats().unwrap().unwrap().crossings_lost, 0);
}

#[test]
#[ignore = "needs root"]
fn a_quota_spent_in_the_kernel_stops_traffic_at_once_and_is_reported() {
    let mut e = engines(4, EngineMode::Xdp);
    let s = with_volume(ReportingTriggers::VOLQU, None, Some(3));
    e.install(Instant::now(), s, InstallFlags::default())
        .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(
        through_kernel(&e, 0, 5),
        vec![XDP_TX, XDP_TX, XDP_TX, XDP_DROP, XDP_DROP],
        "the packet that reaches the quota passes, the next ones not"
    );
    let r = next_report(&mut e).expect("a quota report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLQU, "{r:?}");
    assert_eq!(
        (r.volume.uplink_packets, r.volume.total_bytes),
        (3, 3 * INNER)
    );
    assert_eq!(e.poll_event(), None, "once");
    let last = e.remove(Instant::now(), Seid(1)).unwrap();
    assert_eq!(
        uplink_packets(&last),
        0,
        "all in the quota report: {last:?}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_session_entering_the_kernel_counts_toward_its_threshold_from_the_last_report() {
    let mut e = engines(4, EngineMode::Xdp);
    let now = Instant::now();
    let flags = InstallFlags::default();
    // A time threshold keeps it in the workers, which count 3 packets.
    let mut s = (*with_volume(ReportingTriggers::VOLTH, Some(5), None)).clone();
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers |= ReportingTriggers::TIMTH;
    u.time_threshold_s = Some(3600);
    e.install(now, Arc::new(s), flags).unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(Some(_))));
    through_workers(&e, 0, 3);
    // Without it, into the kernel: 2 more reach the threshold of 5.
    e.install(
        now,
        with_volume(ReportingTriggers::VOLTH, Some(5), None),
        flags,
    )
    .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    assert_eq!(e.poll_event(), None, "4 of 5");
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    let r = next_report(&mut e).expect("a threshold report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLTH, "{r:?}");
    assert_eq!(r.volume.uplink_packets, 5, "{r:?}");
    // Then 5 more in the kernel alone.
    assert_eq!(through_kernel(&e, 0, 4), vec![XDP_TX; 4]);
    assert_eq!(e.poll_event(), None, "4 of 5");
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    let r = next_report(&mut e).expect("a second threshold report");
    assert_eq!(r.volume.uplink_packets, 5, "{r:?}");
}

fn kernel_quota_drops(e: &Engines) -> u64 {
    let stats = e.xdp_stats().unwrap().unwrap();
    (stats.dropped.iter())
        .find(|(r, _)| *r == upf_xdp::Reason::QuotaExhausted)
        .map_or(0, |(_, n)| *n)
}

/// [`offered_to_workers`] of UE 0's G-PDUs, the others dropped for the quota.
fn quota_passed_by_workers(e: &Engines, n: usize) -> usize {
    offered_to_workers_dropping(e, n, upf_dataplane::DropReason::QuotaExhausted)
}

#[test]
#[ignore = "needs root"]
fn a_quota_partly_spent_on_the_workers_is_not_granted_again_in_the_kernel() {
    // A quota of 5 packets, 2 spent on the workers: the kernel passes exactly 3 more.
    let mut e = engines(4, EngineMode::User);
    let s = with_volume(ReportingTriggers::VOLQU, None, Some(5));
    e.install(Instant::now(), s, InstallFlags::default())
        .unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(_)));
    assert_eq!(quota_passed_by_workers(&e, 2), 2);
    swap(&mut e, EngineMode::Xdp);
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(
        through_kernel(&e, 0, 5),
        vec![XDP_TX, XDP_TX, XDP_TX, XDP_DROP, XDP_DROP]
    );
    assert_eq!(kernel_quota_drops(&e), 2);
    let r = next_report(&mut e).expect("a quota report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLQU, "{r:?}");
    assert_eq!(r.volume.uplink_packets, 5, "{r:?}");
}

#[test]
#[ignore = "needs root"]
fn a_quota_spent_in_the_kernel_also_before_a_query_is_not_granted_again_on_the_workers() {
    // A quota of 6 packets: 2 in the kernel, a query (they are reported), 1 more; swapped
    // out, the workers pass exactly the 3 left.
    let mut e = engines(4, EngineMode::Xdp);
    let s = with_volume(ReportingTriggers::VOLQU, None, Some(6));
    e.install(Instant::now(), s, InstallFlags::default())
        .unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_TX; 2]);
    let q = e.query_usage(Instant::now(), Seid(1), &[]).unwrap();
    assert_eq!(uplink_packets(&q), 2);
    assert_eq!(through_kernel(&e, 0, 1), vec![XDP_TX]);
    swap(&mut e, EngineMode::User);
    assert!(matches!(e.runs(Seid(1)), Runs::User(_)));
    assert_eq!(quota_passed_by_workers(&e, 5), 3);
    let r = next_report(&mut e).expect("a quota report");
    assert_eq!(r.trigger, upf_rules::UsageTrigger::VOLQU, "{r:?}");
    assert_eq!(r.volume.uplink_packets, 4, "the 4 since the query: {r:?}");
}

/// [`with_volume`]'s quota of 3 packets, with a time threshold (which the XDP engine does not
/// run) when `workers`.
fn quota_of_3(workers: bool) -> Arc<Session> {
    let mut s = (*with_volume(ReportingTriggers::VOLQU, None, Some(3))).clone();
    if workers {
        let u = s.urr_mut(UrrId(1)).unwrap();
        u.triggers |= ReportingTriggers::TIMTH;
        u.time_threshold_s = Some(3600);
    }
    Arc::new(s)
}

#[test]
#[ignore = "needs root"]
fn a_quota_exhausted_on_one_engine_stays_exhausted_on_the_other() {
    let flags = InstallFlags::default();
    // Exhausted in the kernel; a modification moves it to the workers, and back.
    let mut e = engines(4, EngineMode::Xdp);
    e.install(Instant::now(), quota_of_3(false), flags).unwrap();
    assert_eq!(
        through_kernel(&e, 0, 4),
        vec![XDP_TX, XDP_TX, XDP_TX, XDP_DROP]
    );
    e.install(Instant::now(), quota_of_3(true), flags).unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(Some(_))));
    assert_eq!(quota_passed_by_workers(&e, 2), 0);
    e.install(Instant::now(), quota_of_3(false), flags).unwrap();
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_DROP; 2]);
    // A changed quota is a new grant, on either engine.
    let mut s = (*with_volume(ReportingTriggers::VOLQU, None, Some(1))).clone();
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers |= ReportingTriggers::TIMTH;
    u.time_threshold_s = Some(3600);
    e.install(Instant::now(), Arc::new(s), flags).unwrap();
    assert!(matches!(e.runs(Seid(1)), Runs::User(Some(_))));
    assert_eq!(quota_passed_by_workers(&e, 2), 1);

    // Exhausted on the workers, swapped into the kernel; and out again.
    let mut e = engines(4, EngineMode::User);
    e.install(Instant::now(), quota_of_3(false), flags).unwrap();
    assert_eq!(quota_passed_by_workers(&e, 4), 3);
    swap(&mut e, EngineMode::Xdp);
    assert_eq!(e.runs(Seid(1)), Runs::Xdp);
    assert_eq!(through_kernel(&e, 0, 2), vec![XDP_DROP; 2]);
    swap(&mut e, EngineMode::User);
    assert_eq!(quota_passed_by_workers(&e, 2), 0);
}
