//! Node procedures (TS 29.244 §6.2) against an SMF emulator with a virtual clock.
mod harness;

use harness::*;
use std::net::SocketAddr;
use std::time::Duration;
use upf_n4::{AllowedPeer, Config, Event};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

#[test]
fn association_setup_advertises_features_and_recovery() {
    let mut s = Smf::new();
    let r = s.associate(1234);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.node_id, NodeId::Ipv4(UPF_IP));
    assert_eq!(r.recovery_time_stamp, RecoveryTimeStamp(NTP0));
    let f = r.up_function_features.unwrap();
    assert!(f.contains(UpFunctionFeatures::FTUP) && f.contains(UpFunctionFeatures::UEIP));
    assert_eq!(s.agent.association_count(), 1);
    // Heartbeat answered with the same Recovery Time Stamp.
    let hb = s.request(
        None,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1234),
            source_ip_address: None,
        },
    );
    assert_eq!(
        hb.message,
        Message::HeartbeatResponse(HeartbeatResponse {
            recovery_time_stamp: RecoveryTimeStamp(NTP0)
        })
    );
}

#[test]
fn heartbeat_answered_without_association() {
    let mut s = Smf::new();
    let r = s.request(
        None,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1),
            source_ip_address: None,
        },
    );
    assert!(matches!(r.message, Message::HeartbeatResponse(_)));
}

#[test]
fn heartbeats_sent_and_peer_loss_releases_sessions() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    assert_eq!(s.agent.datapath().len(), 1);
    // First heartbeat after the interval (10 s), answered: the association stays.
    let out = s.advance(Duration::from_secs(10));
    assert_eq!(out.len(), 1);
    let hb = decode(&out[0]);
    assert!(matches!(hb.message, Message::HeartbeatRequest(_)));
    let resp = smf::encode(
        None,
        hb.header.sequence,
        HeartbeatResponse {
            recovery_time_stamp: RecoveryTimeStamp(1234),
        },
    );
    assert!(s.send_bytes(&resp).is_empty());
    // The next one goes unanswered: sent once, retransmitted N1 = 3 times T1 = 3 s apart,
    // then the peer is lost.
    let out = s.run_for(
        Duration::from_secs(10 + 3 * 4 + 1),
        Duration::from_millis(500),
    );
    let heartbeats = out
        .iter()
        .filter(|t| matches!(decode(t).message, Message::HeartbeatRequest(_)))
        .count();
    assert_eq!(heartbeats, 4, "1 transmission + 3 retransmissions");
    assert_eq!(s.agent.association_count(), 0);
    assert_eq!(s.agent.session_count(), 0);
    assert!(
        s.agent.datapath().is_empty(),
        "sessions removed from the data path"
    );
    assert!(s.agent.session(upf_rules::Seid(seid)).is_none());
    let events: Vec<Event> = std::iter::from_fn(|| s.agent.poll_event()).collect();
    assert!(events.iter().any(|e| matches!(
        e,
        Event::AssociationDown {
            reason: "heartbeat lost",
            ..
        }
    )));
    // Allocations were returned: a new association gets the pool's first address again.
    s.associate(1234);
    let (_, r) = s.establish(smf::UeAddr::Choose);
    assert_eq!(r.created_pdrs[0].ue_ip_addresses.len(), 1);
}

#[test]
fn association_setup_with_new_recovery_is_a_peer_restart() {
    let mut s = Smf::associated();
    s.establish_ok();
    s.establish_ok();
    // Same Recovery Time Stamp: a repeated setup, sessions stay.
    assert_eq!(s.associate(1234).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(s.agent.session_count(), 2);
    // A new one: the SMF restarted; its sessions are gone (TS 23.527 §4.3).
    assert_eq!(s.associate(5678).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(s.agent.session_count(), 0);
    let events: Vec<Event> = std::iter::from_fn(|| s.agent.poll_event()).collect();
    assert!(events.iter().any(|e| matches!(
        e,
        Event::PeerRestarted {
            sessions_released: 2,
            ..
        }
    )));
}

#[test]
fn heartbeat_with_new_recovery_is_a_peer_restart() {
    let mut s = Smf::associated();
    s.establish_ok();
    s.request(
        None,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1234),
            source_ip_address: None,
        },
    );
    assert_eq!(s.agent.session_count(), 1);
    s.request(
        None,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(9999),
            source_ip_address: None,
        },
    );
    assert_eq!(s.agent.session_count(), 0);
}

#[test]
fn association_release_and_update() {
    let mut s = Smf::associated();
    s.establish_ok();
    let u = s.request(
        None,
        AssociationUpdateRequest {
            node_id: s.node.clone(),
            ..Default::default()
        },
    );
    assert!(
        matches!(u.message, Message::AssociationUpdateResponse(ref m) if m.cause == Cause::REQUEST_ACCEPTED)
    );
    let r = s.request(
        None,
        AssociationReleaseRequest {
            node_id: s.node.clone(),
        },
    );
    assert_eq!(
        r.message,
        Message::AssociationReleaseResponse(AssociationReleaseResponse {
            node_id: NodeId::Ipv4(UPF_IP),
            cause: Cause::REQUEST_ACCEPTED
        })
    );
    assert_eq!(
        (s.agent.association_count(), s.agent.session_count()),
        (0, 0)
    );
    // Again: there is no association any more.
    let r = s.request(
        None,
        AssociationReleaseRequest {
            node_id: s.node.clone(),
        },
    );
    assert!(
        matches!(r.message, Message::AssociationReleaseResponse(ref m) if m.cause == Cause::NO_ESTABLISHED_PFCP_ASSOCIATION)
    );
}

#[test]
fn allow_list_and_association_limit() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.allowed_peers = vec![AllowedPeer::Addr("192.0.2.1".parse().unwrap())];
    let mut s = Smf::with_config(cfg);
    assert_eq!(s.associate(1).cause, Cause::REQUEST_REJECTED);
    assert_eq!(s.agent.association_count(), 0);

    let mut cfg = Config::new(UPF_IP.into());
    cfg.limits.associations = 1;
    let mut s = Smf::with_config(cfg);
    assert_eq!(s.associate(1).cause, Cause::REQUEST_ACCEPTED);
    s.node = NodeId::Fqdn("smf2.example".into());
    assert_eq!(s.associate(1).cause, Cause::NO_RESOURCES_AVAILABLE);
}

#[test]
fn version_not_supported() {
    let mut s = Smf::new();
    let mut b = smf::encode(
        None,
        77,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1),
            source_ip_address: None,
        },
    );
    b[0] = (b[0] & 0x1f) | (2 << 5);
    let out = s.send_bytes(&b);
    assert_eq!(out.len(), 1);
    let r = decode(&out[0]);
    assert_eq!((r.message.message_type(), r.header.sequence), (11, 77));
}

#[test]
fn up_initiated_association_retried_then_established() {
    let smf_addr: SocketAddr = "127.0.0.2:8805".parse().unwrap();
    let mut cfg = Config::new(UPF_IP.into());
    cfg.smfs = vec![smf_addr];
    let mut s = Smf::with_config(cfg);
    // Sent at once, retransmitted 3 times, given up, retried after the heartbeat interval.
    let out = s.run_for(Duration::from_secs(13), Duration::from_millis(500));
    let setups: Vec<_> = out
        .iter()
        .map(decode)
        .filter(|p| matches!(p.message, Message::AssociationSetupRequest(_)))
        .collect();
    assert_eq!(setups.len(), 4);
    let out = s.run_for(Duration::from_secs(10), Duration::from_millis(500));
    let retry = out
        .iter()
        .map(decode)
        .find(|p| matches!(p.message, Message::AssociationSetupRequest(_)))
        .expect("retried");
    let resp = AssociationSetupResponse {
        node_id: s.node.clone(),
        cause: Cause::REQUEST_ACCEPTED,
        recovery_time_stamp: RecoveryTimeStamp(42),
        ..Default::default()
    };
    s.send_bytes(&smf::encode(None, retry.header.sequence, resp));
    assert_eq!(s.agent.association_count(), 1);
    // Associated: sessions are accepted, no more setups are sent.
    s.associate(42);
    s.establish_ok();
    let out = s.run_for(Duration::from_secs(5), Duration::from_millis(500));
    assert!(!out
        .iter()
        .map(decode)
        .any(|p| matches!(p.message, Message::AssociationSetupRequest(_))));
}

/// Before stopping, the UPF asks each SMF to release the association (Association Update
/// Request with the PFCP Association Release Request IE, SARR and URSS); the SMF's Association
/// Release Request then releases it, with its sessions.
#[test]
fn release_all_asks_each_smf_to_release() {
    let mut s = Smf::associated();
    let _seid = s.establish_ok();
    s.drain();
    let now = s.now;
    s.agent.release_all(now);
    assert!(s.agent.has_pending_requests());
    let out = s.drain();
    assert_eq!(out.len(), 1);
    let req = decode(&out[0]);
    let Message::AssociationUpdateRequest(m) = &req.message else {
        panic!("{:?}", req.message);
    };
    assert_eq!(
        m.pfcp_association_release_request,
        Some(AssociationReleaseFlags {
            sarr: true,
            urss: true
        })
    );
    // The SMF answers, then releases.
    let rsp = upf_pfcp::Pdu::new(
        None,
        req.header.sequence,
        AssociationUpdateResponse {
            node_id: NodeId::Ipv4(SMF_IP),
            cause: Cause::REQUEST_ACCEPTED,
            ..Default::default()
        },
    );
    s.send_bytes(&rsp.to_bytes());
    assert!(!s.agent.has_pending_requests());
    let r = s.request(
        None,
        AssociationReleaseRequest {
            node_id: NodeId::Ipv4(SMF_IP),
        },
    );
    assert!(
        matches!(r.message, Message::AssociationReleaseResponse(ref m) if m.cause == Cause::REQUEST_ACCEPTED)
    );
    assert_eq!(s.agent.session_count(), 0);
    assert_eq!(s.agent.association_count(), 0);
}

/// Events a driver does not poll are bounded (4096) and the rest counted.
#[test]
fn unpolled_events_are_bounded_and_counted() {
    let mut s = Smf::new();
    for _ in 0..5000 {
        s.send_bytes(&[0xff]);
    }
    assert_eq!(s.agent.stats.dropped, 5000);
    assert_eq!(s.agent.stats.events_dropped, 5000 - 4096);
    assert_eq!(std::iter::from_fn(|| s.agent.poll_event()).count(), 4096);
}

#[test]
fn a_datagram_is_answered_for_its_first_messages_only() {
    let mut s = Smf::associated();
    let n = upf_n4::MESSAGES_PER_DATAGRAM + 4;
    let mut b = Vec::new();
    for i in 0..n {
        let mut m = smf::encode(
            None,
            1000 + u32::try_from(i).unwrap(),
            HeartbeatRequest {
                recovery_time_stamp: RecoveryTimeStamp(1234),
                source_ip_address: None,
            },
        );
        if i + 1 < n {
            m[0] |= 0x02; // FO: another message follows
        }
        b.extend_from_slice(&m);
    }
    let dropped = s.agent.stats.dropped;
    let out = s.send_bytes(&b);
    assert_eq!(out.len(), upf_n4::MESSAGES_PER_DATAGRAM);
    assert_eq!(decode(&out[15]).header.sequence, 1015);
    assert_eq!(s.agent.stats.dropped, dropped + 1);
}
