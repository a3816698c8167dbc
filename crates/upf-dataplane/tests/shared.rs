//! A session on several workers (a spread UE, a session without a UE address): two
//! pipelines hold it and draw its QERs' rates from buckets they share, so it gets its rates
//! however its packets fall on them (issue #26 §7), measured over virtual time.

mod common;
use common::*;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;
use upf_dataplane::budgets::SessionBudgets;
use upf_dataplane::{DropReason, LocalAddrs, Output, Packet, Pipeline, PipelineConfig};
use upf_pfcp::ie::*;
use upf_pfcp::messages::SessionEstablishmentRequest;
use upf_rules::{Datapath, DatapathEvent, InstallFlags, Seid, Session, UsageTrigger};
use upf_smf as smf;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 12);
/// Inner packets of 1000 octets: 8000 bits each.
const SIZE: usize = 1000;
const STEP: Duration = Duration::from_millis(10);

fn down() -> Vec<u8> {
    udp4(DN, UE, 53, 4000, SIZE - 28, 0)
}

/// A second worker's pipeline, configured as the rig's (its aggregates the same).
fn worker(r: &mut Rig) -> Pipeline {
    let local = LocalAddrs {
        v4: Some(UPF),
        v6: Some(UPF6.parse().unwrap()),
    };
    Pipeline::new(
        r.now,
        PipelineConfig {
            n3: local,
            n9: local,
            aggregates: r.dp().config().aggregates.clone(),
            ..Default::default()
        },
    )
}

/// Establishes `req` through the rig's agent, then installs the session on the rig's
/// pipeline and on a second one, both drawing on one set of shared buckets, as the
/// workers do for a session on two of them.
fn on_two_workers(r: &mut Rig, req: SessionEstablishmentRequest) -> (Pipeline, Arc<Session>) {
    let (seid, _) = r.establish(req);
    let s = r.dp().session(Seid(seid)).unwrap().clone();
    let budgets = SessionBudgets::new(r.now, &s, None);
    let now = r.now;
    let flags = InstallFlags::default();
    r.dp()
        .install_shared(now, s.clone(), flags, Some(&budgets))
        .unwrap();
    let mut b = worker(r);
    b.install_shared(now, s.clone(), flags, Some(&budgets))
        .unwrap();
    (b, s)
}

/// Runs `batches` batches `STEP` apart, `a` and `b` downlink packets to the two pipelines
/// each; returns the packets forwarded from `from` on (both pipelines together).
fn offer(
    r: &mut Rig,
    other: &mut Pipeline,
    batches: u32,
    from: Duration,
    a: usize,
    b: usize,
) -> u64 {
    let (t0, mut sent) = (r.now, 0u64);
    let mut out = Output::default();
    for _ in 0..batches {
        let now = r.now;
        let mut n = r.send((0..a).map(|_| n6(&down())).collect()).len();
        let mut rx: Vec<Packet> = (0..b).map(|_| n6(&down())).collect();
        other.process(now, &mut rx, &mut out);
        n += out.tx.len();
        out.tx.clear();
        out.free.clear();
        if now - t0 >= from {
            sent += n as u64;
        }
        r.now += STEP;
    }
    sent
}

/// On the hot path (the shared bucket taken out of line, as packet rates are) and the
/// general one.
#[test]
fn a_spread_ue_gets_its_mbr_over_uneven_flows() {
    for hot in [true, false] {
        let kbps = 4_000;
        let mut r = Rig::new();
        r.dp().set_hot_records(hot);
        let mut req = simple_session(UE, 0xabcd);
        req.create_qers = [smf::create_qer(1, Some((kbps, kbps)), Some(9))]
            .into_iter()
            .collect();
        let (mut b, _) = on_two_workers(&mut r, req);
        b.set_hot_records(hot);
        let cold = r.dp().cold_sessions() + b.cold_sessions();
        assert_eq!(cold, if hot { 0 } else { 2 });
        // Twice the MBR (10 packets of 8000 bits every 10 ms), 9 of 10 to the first
        // worker, for 12.5 s; the bucket (2 s of MBR) is spent after 2 s, measured from
        // 2.5 s on. Each worker policing half the MBR passed 2 + 0.8 Mbit/s, 70 % of it.
        let sent = offer(&mut r, &mut b, 1250, Duration::from_millis(2500), 9, 1);
        let rate = (sent * SIZE as u64 * 8) as f64 / 10.0;
        let want = kbps as f64 * 1000.0;
        assert!(
            (rate - want).abs() <= want * 0.05,
            "{rate} bit/s, want {want}"
        );
        let drops = r.dp().counters().dropped(DropReason::MbrExceeded)
            + b.counters().dropped(DropReason::MbrExceeded);
        assert!(drops > 0);
        assert!(r.dp().counters().balanced() && b.counters().balanced());
    }
}

#[test]
fn a_spread_ue_gets_its_packet_rate_over_uneven_flows() {
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let mut q = smf::create_qer(1, None, Some(9));
    // 60 a minute each way.
    let limit = PacketRateLimit {
        time_unit: PacketRateLimit::TIME_UNIT_MINUTE,
        max_packets: 60,
    };
    q.packet_rate = Some(PacketRate {
        uplink: Some(limit),
        downlink: Some(limit),
        ..Default::default()
    });
    req.create_qers = [q].into_iter().collect();
    let (mut b, _) = on_two_workers(&mut r, req);
    // One packet each 10 ms (100 a second), 9 of 10 to the first worker, for 2 minutes:
    // the 60 held at the start, then one a second.
    let mut sent = 0;
    let mut out = Output::default();
    for k in 0..12_000u32 {
        let now = r.now;
        let p = vec![n6(&down())];
        sent += if k % 10 == 9 {
            let mut rx = p;
            b.process(now, &mut rx, &mut out);
            std::mem::take(&mut out.tx).len()
        } else {
            r.send(p).len()
        };
        out.free.clear();
        r.now += STEP;
    }
    // 60 + 120, the last possibly not yet refilled.
    assert!((179..=180).contains(&sent), "{sent}");
    let drops = r.dp().counters().dropped(DropReason::PacketRateExceeded)
        + b.counters().dropped(DropReason::PacketRateExceeded);
    assert_eq!(drops, 12_000 - sent as u64);
}

/// Establishes a session for `ue` whose QER 1 has an MBR of `kbps` each way and Correlation
/// ID `id`; returns its SEID.
fn correlated(r: &mut Rig, ue: Ipv4Addr, teid: u32, id: u32, kbps: u64) -> u64 {
    let mut req = simple_session(ue, teid);
    let mut q = smf::create_qer(1, Some((kbps, kbps)), Some(9));
    q.qer_correlation_id = Some(QerCorrelationId(id));
    req.create_qers = [q].into_iter().collect();
    r.establish(req).0
}

/// Two sessions of one SMF whose QERs carry the same Correlation ID, on different workers,
/// are held together to the aggregate (the QERs' MBR, an APN-AMBR) however their traffic
/// is split (TS 29.244 §5.2.2; each alone would pass 4 + 0.8 Mbit/s, 120 %).
#[test]
fn qers_with_one_correlation_id_share_their_aggregate_across_workers() {
    const UE2: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 13);
    let kbps = 4_000;
    let mut r = Rig::new();
    let a = correlated(&mut r, UE, 0xabcd, 7, kbps);
    let second = correlated(&mut r, UE2, 0xabce, 7, kbps);
    // The second session moves to another worker, with its aggregate.
    let s2 = r.dp().session(Seid(second)).unwrap().clone();
    let now = r.now;
    r.dp().remove_session(now, Seid(second)).unwrap();
    let mut b = worker(&mut r);
    b.install(now, s2, InstallFlags::default()).unwrap();
    assert!(r.dp().session(Seid(a)).is_some());
    assert_eq!(r.dp().cold_sessions() + b.cold_sessions(), 0);

    // Twice the aggregate: 9 packets of 10 for the first session, 1 for the second, from
    // 2.5 s on (after the aggregate's burst).
    let down2 = || n6(&udp4(DN, UE2, 53, 4000, SIZE - 28, 0));
    let (t0, mut sent) = (r.now, 0u64);
    let mut out = Output::default();
    for _ in 0..1250 {
        let now = r.now;
        let mut n = r.send((0..9).map(|_| n6(&down())).collect()).len();
        let mut rx = vec![down2()];
        b.process(now, &mut rx, &mut out);
        n += std::mem::take(&mut out.tx).len();
        out.free.clear();
        if now - t0 >= Duration::from_millis(2500) {
            sent += n as u64;
        }
        r.now += STEP;
    }
    let rate = (sent * SIZE as u64 * 8) as f64 / 10.0;
    let want = kbps as f64 * 1000.0;
    assert!(
        (rate - want).abs() <= want * 0.05,
        "{rate} bit/s, want {want}"
    );
}

/// Offers `n` downlink packets, one at a time, every other one to each pipeline; returns
/// how many were forwarded and the triggers of the usage reports both raised.
fn alternate(r: &mut Rig, b: &mut Pipeline, n: u32) -> (u64, Vec<UsageTrigger>) {
    let (mut sent, mut fired) = (0u64, Vec::new());
    let mut out = Output::default();
    for k in 0..n {
        let now = r.now;
        let p = if k % 2 == 0 { r.dp() } else { &mut *b };
        let mut rx = vec![n6(&down())];
        p.process(now, &mut rx, &mut out);
        sent += std::mem::take(&mut out.tx).len() as u64;
        out.free.clear();
        while let Some(e) = p.poll_event() {
            if let DatapathEvent::Usage(u) = e {
                fired.push(u.trigger);
            }
        }
        r.now += Duration::from_millis(1);
    }
    (sent, fired)
}

/// A URR with a total volume `threshold` (VOLTH) and `quota` (VOLQU) on both PDRs of a
/// session on two workers.
fn counted(r: &mut Rig, threshold: Option<u64>, quota: Option<u64>) -> Pipeline {
    let mut req = simple_session(UE, 0xabcd);
    let mut triggers = ReportingTriggers::default();
    if threshold.is_some() {
        triggers = triggers.union(ReportingTriggers::VOLTH);
    }
    if quota.is_some() {
        triggers = triggers.union(ReportingTriggers::VOLQU);
    }
    let mut urr = smf::create_urr(1, triggers, threshold);
    urr.volume_quota = quota.map(|q| Volume {
        total: Some(q),
        uplink: None,
        downlink: None,
    });
    req.create_urrs = [urr].into_iter().collect();
    on_two_workers(r, req).0
}

/// A URR of a session on two workers reaches its volume threshold once over both, not
/// once on each (issue #26 §2): 1.5 MB half on each worker reach a 1 MB threshold once
/// (each alone counted 0.75 MB), 2.5 MB twice.
#[test]
fn a_threshold_is_reached_once_over_the_workers() {
    let mut r = Rig::new();
    let mut b = counted(&mut r, Some(1_000_000), None);
    let (sent, fired) = alternate(&mut r, &mut b, 1500);
    assert_eq!(sent, 1500);
    assert_eq!(fired, [UsageTrigger::VOLTH]);
    let (_, fired) = alternate(&mut r, &mut b, 1000);
    assert_eq!(fired, [UsageTrigger::VOLTH]);
}

/// A volume quota of a session on two workers is exhausted once over both: the traffic
/// passed is the quota and at most one packet more on each worker (the packet that finds
/// it reached goes, as on one worker), and VOLQU is reported once (issue #26 §2).
#[test]
fn a_quota_is_exhausted_once_over_the_workers() {
    let quota = 1_000_000;
    let mut r = Rig::new();
    let mut b = counted(&mut r, None, Some(quota));
    let (sent, fired) = alternate(&mut r, &mut b, 3000);
    let octets = sent * SIZE as u64;
    assert!(
        (quota..=quota + 2 * SIZE as u64).contains(&octets),
        "{octets} octets passed"
    );
    assert_eq!(fired, [UsageTrigger::VOLQU]);
    let drops = r.dp().counters().dropped(DropReason::QuotaExhausted)
        + b.counters().dropped(DropReason::QuotaExhausted);
    assert_eq!(drops, 3000 - sent);
}

/// A usage query restarts the measurement on every worker and the shared threshold with
/// it, as the workers do: 0.75 MB before the query and 0.75 MB after reach no 1 MB threshold.
#[test]
fn a_query_restarts_the_shared_threshold() {
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let urr = smf::create_urr(1, ReportingTriggers::VOLTH, Some(1_000_000));
    req.create_urrs = [urr].into_iter().collect();
    let (seid, _) = r.establish(req);
    let s = r.dp().session(Seid(seid)).unwrap().clone();
    let budgets = SessionBudgets::new(r.now, &s, None);
    let (now, flags) = (r.now, InstallFlags::default());
    r.dp()
        .install_shared(now, s.clone(), flags, Some(&budgets))
        .unwrap();
    let mut b = worker(&mut r);
    b.install_shared(now, s, flags, Some(&budgets)).unwrap();

    let (_, fired) = alternate(&mut r, &mut b, 750);
    assert!(fired.is_empty());
    let now = r.now;
    let q = [
        r.dp().query(now, Seid(seid), &[]),
        b.query(now, Seid(seid), &[]),
    ];
    let counted: u64 = q
        .iter()
        .map(|u| u.as_ref().unwrap()[0].volume.total_bytes)
        .sum();
    assert_eq!(counted, 750_000);
    budgets.restart_thresholds(&[]);
    let (_, fired) = alternate(&mut r, &mut b, 750);
    assert!(fired.is_empty(), "{fired:?}");
    let (_, fired) = alternate(&mut r, &mut b, 300);
    assert_eq!(fired, [UsageTrigger::VOLTH]);
}

/// Downlink-only limits are shared like total ones: a 1 MB downlink threshold is reached
/// once by 1.5 MB half on each worker, and a 1 MB downlink quota is exhausted once, passing
/// at most a packet more on each worker.
#[test]
fn downlink_limits_are_reached_once_over_the_workers() {
    let downlink = |octets| Volume {
        total: None,
        uplink: None,
        downlink: Some(octets),
    };
    for (trigger, threshold) in [
        (ReportingTriggers::VOLTH, true),
        (ReportingTriggers::VOLQU, false),
    ] {
        let mut r = Rig::new();
        let mut req = simple_session(UE, 0xabcd);
        let mut urr = smf::create_urr(1, trigger, None);
        if threshold {
            urr.volume_threshold = Some(downlink(1_000_000));
        } else {
            urr.volume_quota = Some(downlink(1_000_000));
        }
        req.create_urrs = [urr].into_iter().collect();
        let mut b = on_two_workers(&mut r, req).0;
        let (sent, fired) = alternate(&mut r, &mut b, 1500);
        if threshold {
            assert_eq!((sent, &fired[..]), (1500, &[UsageTrigger::VOLTH][..]));
        } else {
            let octets = sent * SIZE as u64;
            assert!(
                (1_000_000..=1_000_000 + 2 * SIZE as u64).contains(&octets),
                "{octets} octets passed"
            );
            assert_eq!(fired, [UsageTrigger::VOLQU]);
        }
    }
}

/// An install the data path refuses changes no aggregate's rate; one it takes gives the
/// aggregate its QER's MBR (the last installed wins).
#[test]
fn a_refused_install_leaves_the_aggregate_rate_as_it_was() {
    const UE2: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 13);
    let mut r = Rig::new();
    let a = correlated(&mut r, UE, 0xabcd, 7, 4_000);
    let s = r.dp().session(Seid(a)).unwrap().clone();
    let key = s.qers[0].aggregate.expect("an aggregate");
    let rates = |r: &mut Rig| r.dp().config().aggregates.rates(key);
    assert_eq!(rates(&mut r), Some((4_000_000, 4_000_000)));
    // Another session with the aggregate at 1 Mbit/s, on a TEID the first one holds.
    let mut clash = (*s).clone();
    clash.seid = Seid(a + 1000);
    clash.qers[0].mbr = Some(upf_rules::Bitrate {
        uplink_kbps: 1_000,
        downlink_kbps: 1_000,
    });
    let now = r.now;
    assert!(r
        .dp()
        .install(now, Arc::new(clash), InstallFlags::default())
        .is_err());
    assert_eq!(rates(&mut r), Some((4_000_000, 4_000_000)), "unchanged");
    correlated(&mut r, UE2, 0xabce, 7, 1_000);
    assert_eq!(
        rates(&mut r),
        Some((1_000_000, 1_000_000)),
        "the last installed"
    );
}
