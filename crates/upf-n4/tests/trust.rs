//! The trust boundary's finer points, in process with a virtual clock (the attacks themselves
//! run over UDP against `upf run` in crates/upf/tests/n4_trust.rs).
mod harness;

use harness::*;
use std::net::SocketAddr;
use std::time::Duration;
use upf_n4::{Config, Refusal};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

const STRANGER: &str = "192.0.2.66:8805";
const SECOND_SMF: &str = "127.0.0.3:8805";

fn refused(s: &Smf, r: Refusal) -> u64 {
    s.agent.stats.refused[r.index()]
}

/// Sends `m` from `from` instead of the SMF's own address; returns the response.
fn request_from(
    s: &mut Smf,
    from: &str,
    seid: Option<u64>,
    m: impl Into<Message>,
) -> upf_pfcp::Pdu {
    let own = s.addr;
    s.addr = from.parse().unwrap();
    let r = s.request(seid, m);
    s.addr = own;
    r
}

#[test]
fn sessions_per_association_are_capped_for_each_smf_alone() {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.limits.sessions_per_association = 2;
    let mut s = Smf::with_config(cfg);
    s.associate(1);
    let a = s.establish_ok();
    s.establish_ok();
    let (_, r) = s.establish(smf::UeAddr::Choose);
    assert_eq!(r.cause, Cause::NO_RESOURCES_AVAILABLE);
    // Another SMF is not held back by the first one's sessions.
    let (own_addr, own_node) = (s.addr, s.node.clone());
    s.addr = SECOND_SMF.parse().unwrap();
    s.node = NodeId::Fqdn("smf2.example".into());
    s.associate(1);
    s.establish_ok();
    // A deletion gives the first SMF its room back.
    (s.addr, s.node) = (own_addr, own_node);
    s.delete(a);
    s.establish_ok();
    assert_eq!(s.agent.session_count(), 3);
}

#[test]
fn a_malformed_session_request_learns_the_cp_seid_only_from_its_owner() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let cp_seid = s.cp_seid;
    // A Session Modification whose Update FAR has no FAR ID: it does not decode.
    let mut b = smf::encode(Some(seid), 900, smf::modification());
    let bad = [0x00, 0x0a, 0x00, 0x00]; // Update FAR (10), empty
    b.extend_from_slice(&bad);
    let len = u16::try_from(b.len() - 4).unwrap();
    b[2..4].copy_from_slice(&len.to_be_bytes());
    let answer = |s: &mut Smf| {
        let out = s.send_bytes(&b);
        assert_eq!(out.len(), 1);
        let r = decode(&out[0]);
        assert!(
            matches!(r.message, Message::SessionModificationResponse(ref m) if m.cause != Cause::REQUEST_ACCEPTED)
        );
        r.header.seid
    };
    assert_eq!(answer(&mut s), Some(cp_seid));
    let own = s.addr;
    s.addr = SECOND_SMF.parse().unwrap();
    s.node = NodeId::Fqdn("smf2.example".into());
    s.associate(1);
    assert_eq!(answer(&mut s), Some(0));
    s.addr = STRANGER.parse().unwrap();
    assert_eq!(answer(&mut s), Some(0));
    s.addr = own;
}

#[test]
fn refusals_to_strangers_are_not_kept_for_retransmissions() {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let stranger: SocketAddr = STRANGER.parse().unwrap();
    let b = smf::encode(Some(seid), 77, SessionDeletionRequest {});
    for _ in 0..3 {
        s.agent.handle_datagram(s.now, stranger, &b);
        let out = s.drain();
        assert!(
            matches!(decode(&out[0]).message, Message::SessionDeletionResponse(ref m) if m.cause == Cause::NO_ESTABLISHED_PFCP_ASSOCIATION)
        );
    }
    assert_eq!(
        refused(&s, Refusal::NotAssociated),
        3,
        "each one refused anew"
    );
    assert_eq!(s.agent.stats.retransmissions_answered, 0);
    // The SMF's own retransmission is answered from the cache, not executed twice.
    let b = smf::encode(Some(seid), 78, SessionDeletionRequest {});
    s.send_bytes(&b);
    let again = s.send_bytes(&b);
    assert!(
        matches!(decode(&again[0]).message, Message::SessionDeletionResponse(ref m) if m.cause == Cause::REQUEST_ACCEPTED)
    );
    assert_eq!(s.agent.stats.retransmissions_answered, 1);
}

#[test]
fn a_heartbeat_from_elsewhere_with_a_new_recovery_time_stamp_is_no_restart() {
    let mut s = Smf::associated();
    s.establish_ok();
    for from in [STRANGER, "127.0.0.2:9999"] {
        let r = request_from(
            &mut s,
            from,
            None,
            HeartbeatRequest {
                recovery_time_stamp: RecoveryTimeStamp(9999),
                source_ip_address: None,
            },
        );
        assert!(
            matches!(r.message, Message::HeartbeatResponse(_)),
            "answered all the same"
        );
    }
    assert_eq!(s.agent.session_count(), 1);
}

#[test]
fn pfd_management_and_node_reports_need_an_association() {
    let mut s = Smf::associated();
    let r = request_from(&mut s, STRANGER, None, PfdManagementRequest::default());
    assert!(
        matches!(r.message, Message::PfdManagementResponse(ref m) if m.cause == Cause::NO_ESTABLISHED_PFCP_ASSOCIATION)
    );
    let r = s.request(None, PfdManagementRequest::default());
    assert!(
        matches!(r.message, Message::PfdManagementResponse(ref m) if m.cause == Cause::SERVICE_NOT_SUPPORTED)
    );
    assert_eq!(refused(&s, Refusal::NotAssociated), 1);
}

#[test]
fn an_up_initiated_setup_answered_in_another_nodes_name_is_refused() {
    let smf_addr: SocketAddr = SECOND_SMF.parse().unwrap();
    let mut cfg = Config::new(UPF_IP.into());
    cfg.smfs = vec![smf_addr];
    let mut s = Smf::with_config(cfg);
    // The SMF at 127.0.0.2 associates first; the configured one at .3 then answers our
    // setup with the first one's Node ID.
    s.associate(1);
    let out = s.advance(Duration::ZERO);
    let setup = out
        .iter()
        .find(|t| t.dest == smf_addr)
        .expect("our Association Setup Request");
    let seq = decode(setup).header.sequence;
    let resp = smf::encode(
        None,
        seq,
        AssociationSetupResponse {
            node_id: s.node.clone(),
            cause: Cause::REQUEST_ACCEPTED,
            recovery_time_stamp: RecoveryTimeStamp(5),
            ..Default::default()
        },
    );
    s.agent.handle_datagram(s.now, smf_addr, &resp);
    assert_eq!(refused(&s, Refusal::NodeAssociatedElsewhere), 1);
    let assocs: Vec<_> = s.agent.associations().map(|(_, a)| a).collect();
    assert_eq!(
        assocs,
        [s.addr],
        "the first SMF's association is where it was"
    );
}
