//! GTP-U path management through the pipeline and the agent, on a virtual clock: Echo
//! Requests every interval to the peers that live tunnels lead to, a silent peer reported to
//! the SMF once (Node Report, User Plane Path Failure Report), an answer reported as a Path
//! Recovery Report.

mod common;
use common::*;
use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use upf_dataplane::{DropReason, Packet, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message as Pfcp};
use upf_smf as smf;
use upf_wire::gtpu;
use upf_wire::gtpu_msg::{self, Message};

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 21);
const UE2: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 22);
const GNB2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);
const MIN: Duration = Duration::from_secs(60);
const T3: Duration = Duration::from_secs(3);

/// The GTP-U message of a packet the pipeline sent (IPv4), and its UDP ports.
fn gtp(p: &Packet) -> (gtpu::Repr, Message<'_>, (u16, u16)) {
    let d = p.data();
    let ports = (
        u16::from_be_bytes([d[20], d[21]]),
        u16::from_be_bytes([d[22], d[23]]),
    );
    let (r, m) = Message::parse(&d[28..]).expect("a GTP-U message");
    (r, m, ports)
}

/// Moves the clock by `d` and returns what the pipeline sent meanwhile; the SMF answers
/// what the agent sent (heartbeats too: the association must live), and the Node Reports
/// among it are kept for [`node_reports`].
fn tick(r: &mut Rig, d: Duration) -> Vec<Packet> {
    r.now += d;
    let now = r.now;
    r.dp().handle_timeout(now);
    r.agent.handle_datapath_events(now);
    r.agent.handle_timeout(now);
    let out = r.send(Vec::new());
    collect_node_reports(r);
    out
}

thread_local! {
    static NODE_REPORTS: RefCell<Vec<(bool, Option<Ipv4Addr>)>> = const { RefCell::new(Vec::new()) };
}

/// The Echo Requests among `out`: (destination, sequence number).
fn echo_requests(out: &[Packet]) -> Vec<(IpAddr, u16)> {
    out.iter()
        .filter_map(|p| {
            let (r, m, ports) = gtp(p);
            (m == Message::EchoRequest).then(|| {
                assert_eq!(p.port(), Port::N3);
                assert_eq!(ports, (2152, 2152));
                assert_eq!(r.teid, 0);
                let (d, _) = open(p);
                assert_eq!(d.outer_src, IpAddr::V4(UPF));
                (d.outer_dst, r.seq_number.expect("S = 1"))
            })
        })
        .collect()
}

fn echo_response(from: Ipv4Addr, seq: u16) -> Packet {
    let mut b = [0u8; 16];
    let n = gtpu_msg::emit_echo_response(0, seq, &mut b).unwrap();
    Packet::from_bytes(Port::N3, &udp4_with(from, UPF, 2152, 2152, &b[..n])).unwrap()
}

/// The Node Reports the agent sent since the last look: (failure?, the peer).
fn node_reports(r: &mut Rig) -> Vec<(bool, Option<Ipv4Addr>)> {
    collect_node_reports(r);
    NODE_REPORTS.with_borrow_mut(std::mem::take)
}

/// Answers what the agent sent (Node Reports too, so that they are not retransmitted) and
/// keeps the Node Reports.
fn collect_node_reports(r: &mut Rig) {
    for p in r.smf_inbox() {
        let Pfcp::NodeReportRequest(m) = p.message else {
            continue;
        };
        let a = NodeReportResponse {
            node_id: NodeId::Ipv4(SMF),
            cause: Cause::REQUEST_ACCEPTED,
            offending_ie: None,
        };
        let now = r.now;
        let smf = r.smf;
        r.agent
            .handle_datagram(now, smf, &smf::encode(None, p.header.sequence, a));
        let (failed, peers) = match (
            m.user_plane_path_failure_report,
            m.user_plane_path_recovery_report,
        ) {
            (Some(f), None) => {
                assert_eq!(m.node_report_type, NodeReportType::UPFR);
                (true, f.remote_gtpu_peers)
            }
            (None, Some(rr)) => {
                assert_eq!(m.node_report_type, NodeReportType::UPRR);
                (false, rr.remote_gtpu_peers)
            }
            o => panic!("{o:?}"),
        };
        assert_eq!(peers.len(), 1);
        NODE_REPORTS.with_borrow_mut(|v| v.push((failed, peers[0].ipv4)));
    }
}

#[test]
fn echo_requests_go_every_interval_only_to_peers_with_live_tunnels() {
    let mut r = Rig::new();
    let (_, _) = r.establish(simple_session(UE, 0xabcd));
    // A session whose downlink FAR buffers (the UE is idle): no live tunnel to GNB2.
    let idle = with_far(simple_session(UE2, 0xbeef), 2, |f| {
        f.apply_action = actions(&[ApplyAction::BUFF, ApplyAction::NOCP]);
        f.forwarding_parameters
            .as_mut()
            .unwrap()
            .outer_header_creation = Some(OuterHeaderCreation::gtpu_ipv4(0xbeef, GNB2));
    });
    let (idle_seid, _) = r.establish(idle);
    assert!(tick(&mut r, MIN - Duration::from_millis(1)).is_empty());
    let out = tick(&mut r, Duration::from_millis(1));
    let sent = echo_requests(&out);
    assert_eq!(out.len(), 1);
    assert_eq!(sent[0].0, IpAddr::V4(GNB));
    // Answered: nothing more until the next interval, nothing to report.
    assert!(r.send1(echo_response(GNB, sent[0].1)).is_empty());
    for _ in 0..11 {
        assert!(tick(&mut r, Duration::from_secs(5)).is_empty());
    }
    let out = tick(&mut r, Duration::from_secs(5));
    let again = echo_requests(&out);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, IpAddr::V4(GNB));
    assert_ne!(again[0].1, sent[0].1, "a new round, a new sequence number");
    assert!(r.send1(echo_response(GNB, again[0].1)).is_empty());

    // The idle UE is paged and its tunnel comes alive: GNB2 is probed an interval later.
    let m = r.modify(
        idle_seid,
        SessionModificationRequest {
            update_fars: [set_action(2, ApplyAction::FORW)].into_iter().collect(),
            ..Default::default()
        },
    );
    assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
    let out = tick(&mut r, MIN);
    let mut to: Vec<IpAddr> = echo_requests(&out).into_iter().map(|(a, _)| a).collect();
    to.sort();
    assert_eq!(to, [IpAddr::V4(GNB), IpAddr::V4(GNB2)]);
    let c = r.dp().counters().clone();
    assert_eq!((c.echo_requests, c.echo_responses), (4, 2));
    assert_eq!((c.gtpu_peers, c.gtpu_peers_unreachable), (2, 0));
    assert_eq!(
        c.dropped(DropReason::Signalling),
        2,
        "the answers, consumed"
    );
    assert!(node_reports(&mut r).is_empty());
    assert_balanced(&mut r);
}

#[test]
fn a_silent_peer_is_reported_once_and_its_answer_restores_it() {
    let mut r = Rig::new();
    r.establish(simple_session(UE, 0xabcd));
    let out = tick(&mut r, MIN);
    let first = echo_requests(&out);
    assert_eq!(first.len(), 1);
    // Retransmitted T3 apart with the same sequence number, then given up on.
    for _ in 0..2 {
        assert!(node_reports(&mut r).is_empty());
        let out = tick(&mut r, T3);
        assert_eq!(echo_requests(&out), first);
    }
    assert!(tick(&mut r, T3 - Duration::from_millis(1)).is_empty());
    assert!(node_reports(&mut r).is_empty());
    assert!(tick(&mut r, Duration::from_millis(1)).is_empty());
    assert_eq!(node_reports(&mut r), [(true, Some(GNB))]);
    assert_eq!(r.dp().counters().gtpu_peers_unreachable, 1);

    // Still probed every interval; another silent round is not reported again.
    let out = tick(&mut r, MIN - T3 * 3);
    let second = echo_requests(&out);
    assert_eq!(second.len(), 1);
    for _ in 0..3 {
        tick(&mut r, T3);
    }
    assert!(node_reports(&mut r).is_empty());
    // Then it answers (late, to the round that failed): a Path Recovery Report, once.
    assert!(r.send1(echo_response(GNB, second[0].1)).is_empty());
    assert!(r.send1(echo_response(GNB, second[0].1)).is_empty());
    tick(&mut r, Duration::from_millis(1));
    assert_eq!(node_reports(&mut r), [(false, Some(GNB))]);
    let c = r.dp().counters().clone();
    assert_eq!(
        (c.echo_requests, c.echo_responses, c.gtpu_peers_unreachable),
        (6, 1, 0)
    );
    assert_balanced(&mut r);
}

#[test]
fn a_peer_whose_last_tunnel_goes_is_no_longer_probed() {
    let mut r = Rig::new();
    let (a, _) = r.establish(simple_session(UE, 0xabcd));
    let (b, _) = r.establish(simple_session(UE2, 0xabce));
    assert_eq!(r.dp().counters().gtpu_peers, 1);
    // One of the two sessions goes: GNB still has a live tunnel.
    r.delete(a);
    let out = tick(&mut r, MIN);
    assert_eq!(echo_requests(&out).len(), 1);
    // The other hands over to GNB2 (a new downlink tunnel): GNB is left alone, and its
    // unanswered request is not held against it.
    let m = r.modify(
        b,
        SessionModificationRequest {
            update_fars: [UpdateFar {
                far_id: FarId(2),
                update_forwarding_parameters: Some(UpdateForwardingParameters {
                    outer_header_creation: Some(OuterHeaderCreation::gtpu_ipv4(0x77, GNB2)),
                    ..Default::default()
                }),
                ..Default::default()
            }]
            .into_iter()
            .collect(),
            ..Default::default()
        },
    );
    assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
    let mut to = Vec::new();
    for _ in 0..40 {
        to.extend(echo_requests(&tick(&mut r, T3)));
    }
    assert!(to.iter().all(|(a, _)| *a == IpAddr::V4(GNB2)), "{to:?}");
    assert!(!to.is_empty());
    assert_eq!(node_reports(&mut r), [(true, Some(GNB2))]);
    // The last session goes: nothing is probed, nothing reported.
    r.delete(b);
    let c = r.dp().counters().clone();
    assert_eq!((c.gtpu_peers, c.gtpu_peers_unreachable), (0, 0));
    for _ in 0..5 {
        assert!(tick(&mut r, MIN).is_empty());
    }
    assert!(node_reports(&mut r).is_empty());
    assert_balanced(&mut r);
}

#[test]
fn echo_interval_zero_sends_nothing() {
    let mut r = Rig::with(|c| c.echo.interval = Duration::ZERO);
    r.establish(simple_session(UE, 0xabcd));
    for _ in 0..5 {
        assert!(tick(&mut r, MIN).is_empty());
    }
    assert_eq!(r.dp().counters().gtpu_peers, 0);
}
