//! QERs through the real agent: gates per direction, MBR policing measured over 10 s of
//! virtual time, and a session AMBR (one QER shared by two QoS flows).

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
