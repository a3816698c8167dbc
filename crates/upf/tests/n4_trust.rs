//! The N4 trust boundary, tried as an attacker on the N4 network would, over UDP against
//! `upf run` (issue 24): a stranger that never associated and a second SMF with an association
//! of its own each try to act on the first SMF's sessions and association. Each attempt gets
//! the cause TS 29.244 gives and changes nothing; the owner's sessions and association stay as
//! they were, and every refusal is counted by reason in /metrics.

mod common;

use common::{Peer, Upf};
use std::net::Ipv4Addr;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};
use upf_smf as smf;

const SMF: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ROGUE_SMF: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 66);
const RECOVERY: u32 = 3_913_000_000;

/// The UPF with an SMF associated and two sessions of its own.
fn upf_with_smf(extra: &[&str]) -> (Upf, Peer, [u64; 2]) {
    let upf = Upf::start(extra);
    let mut smf = Peer::new(SMF, &upf);
    assert_eq!(smf.associate(RECOVERY), Cause::REQUEST_ACCEPTED);
    let seids = [smf.establish(), smf.establish()];
    (upf, smf, seids)
}

fn cause(m: &Message) -> Cause {
    match m {
        Message::SessionEstablishmentResponse(m) => m.cause,
        Message::SessionModificationResponse(m) => m.cause,
        Message::SessionDeletionResponse(m) => m.cause,
        Message::SessionSetDeletionResponse(m) => m.cause,
        Message::AssociationSetupResponse(m) => m.cause,
        Message::AssociationUpdateResponse(m) => m.cause,
        Message::AssociationReleaseResponse(m) => m.cause,
        m => panic!("no cause in {m:?}"),
    }
}

fn drop_far_1() -> SessionModificationRequest {
    let mut m = smf::modification();
    m.update_fars.push(UpdateFar {
        far_id: FarId(1),
        apply_action: Some(ApplyAction::DROP),
        ..Default::default()
    });
    m
}

/// Every attack on `victim`'s sessions and association from `attacker`, each refused with
/// `expected` (72 for a sender without an association; 65 for another SMF's SEIDs).
fn attack(upf: &Upf, attacker: &mut Peer, victim: &Peer, seids: [u64; 2], expect_seid: Cause) {
    let before: Vec<_> = seids
        .iter()
        .map(|s| upf.api(&format!("session/{s}")))
        .collect();
    assert!(before.iter().all(|s| s["seid"].is_number()), "{before:?}");
    let own_node = attacker.node.clone();
    let node = victim.node.clone();

    // Session Modification and Deletion of the SMF's sessions, and of a SEID nobody has:
    // the same answer, with SEID 0 in the header (nothing told about the session).
    for seid in [seids[0], seids[1], 0x7777_7777] {
        let r = attacker.request(Some(seid), drop_far_1());
        assert_eq!(cause(&r.message), expect_seid, "modification of {seid:#x}");
        assert_eq!(r.header.seid, Some(0));
        let r = attacker.request(Some(seid), SessionDeletionRequest {});
        assert_eq!(cause(&r.message), expect_seid, "deletion of {seid:#x}");
        assert_eq!(r.header.seid, Some(0));
    }
    // Node-level requests naming the SMF's Node ID.
    let named: [Message; 3] = [
        SessionSetDeletionRequest {
            node_id: node.clone(),
            ..Default::default()
        }
        .into(),
        AssociationUpdateRequest {
            node_id: node.clone(),
            ..Default::default()
        }
        .into(),
        AssociationReleaseRequest {
            node_id: node.clone(),
        }
        .into(),
    ];
    for m in named {
        let r = attacker.request(None, m);
        assert_eq!(cause(&r.message), Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    }
    let r = attacker.try_establish(node.clone());
    assert_eq!(r.cause, Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    assert!(r.up_f_seid.is_none());
    // An establishment in its own name that gives the SMF's CP F-SEID (address and CP SEID
    // of the SMF's first session): a session of its own if it has an association, never a
    // replacement of the SMF's.
    let req = smf::establishment(
        attacker.node.clone(),
        0x1001,
        victim.ip,
        smf::UeAddr::Choose,
    );
    let r = attacker.request(Some(0), req);
    let expect = match expect_seid {
        Cause::SESSION_CONTEXT_NOT_FOUND => Cause::REQUEST_ACCEPTED,
        c => c,
    };
    assert_eq!(cause(&r.message), expect);
    // A "restart" of the SMF: its Node ID with a new Recovery Time Stamp.
    attacker.node = node.clone();
    assert_eq!(attacker.associate(RECOVERY + 1), Cause::REQUEST_REJECTED);
    attacker.node = own_node;

    // Nothing changed: the sessions are as they were, the association is where it was.
    let after: Vec<_> = seids
        .iter()
        .map(|s| upf.api(&format!("session/{s}")))
        .collect();
    assert_eq!(before, after, "the SMF's sessions changed");
    let assocs = upf.api("associations");
    let smf = assocs
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["node_id"] == node.to_string())
        .expect("the SMF's association");
    assert_eq!(
        smf["address"],
        victim.sock.local_addr().unwrap().to_string()
    );
}

/// The owner can still do all it could, which also shows the attacks above were refused for
/// whom they came from, not for what they asked.
fn owner_still_in_charge(upf: &Upf, smf: &mut Peer, seids: [u64; 2]) {
    let before = upf.api(&format!("session/{}", seids[0]));
    let r = smf.request(Some(seids[0]), drop_far_1());
    assert_eq!(cause(&r.message), Cause::REQUEST_ACCEPTED);
    assert_ne!(
        upf.api(&format!("session/{}", seids[0])),
        before,
        "in force"
    );
    let r = smf.request(Some(seids[0]), SessionDeletionRequest {});
    assert_eq!(cause(&r.message), Cause::REQUEST_ACCEPTED);
    smf.establish();
    let count = || upf.api("sessions").as_array().map_or(0, Vec::len);
    let all = count();
    let r = smf.request(
        None,
        SessionSetDeletionRequest {
            node_id: smf.node.clone(),
            ..Default::default()
        },
    );
    assert_eq!(cause(&r.message), Cause::REQUEST_ACCEPTED);
    assert_eq!(count(), all - 2, "its two sessions went, and only they");
    // Its own restart, from its own address, is one: its sessions are released.
    smf.establish();
    assert_eq!(smf.associate(RECOVERY + 7), Cause::REQUEST_ACCEPTED);
    assert_eq!(count(), all - 2);
}

fn refused(upf: &Upf, reason: &str) -> f64 {
    upf.metric("upf_pfcp_requests_refused_total", &[("reason", reason)])
        .unwrap_or_else(|| panic!("no refusal counter {reason}"))
}

#[test]
fn a_stranger_cannot_touch_an_smfs_sessions_or_association() {
    let (upf, mut smf, seids) = upf_with_smf(&[]);
    let mut stranger = Peer::new(STRANGER, &upf);
    attack(
        &upf,
        &mut stranger,
        &smf,
        seids,
        Cause::NO_ESTABLISHED_PFCP_ASSOCIATION,
    );
    // 6 session requests, set deletion, update, release, 2 establishments.
    assert_eq!(refused(&upf, "not_associated"), 11.0);
    assert_eq!(refused(&upf, "node_associated_elsewhere"), 1.0);
    assert!(upf.log().contains("refused"), "{}", upf.log());
    owner_still_in_charge(&upf, &mut smf, seids);
}

#[test]
fn a_stranger_is_refused_with_an_allow_list_naming_the_smf() {
    let (upf, mut smf, seids) = upf_with_smf(&["--allow-peer", "127.0.0.2"]);
    let mut stranger = Peer::new(STRANGER, &upf);
    attack(
        &upf,
        &mut stranger,
        &smf,
        seids,
        Cause::NO_ESTABLISHED_PFCP_ASSOCIATION,
    );
    assert_eq!(refused(&upf, "not_associated"), 11.0);
    assert_eq!(refused(&upf, "not_allowed"), 1.0);
    owner_still_in_charge(&upf, &mut smf, seids);
}

#[test]
fn another_smf_cannot_touch_an_smfs_sessions_or_association() {
    let (upf, mut smf, seids) = upf_with_smf(&[]);
    let mut rogue = Peer::new(ROGUE_SMF, &upf);
    assert_eq!(rogue.associate(RECOVERY), Cause::REQUEST_ACCEPTED);
    let own = rogue.establish();
    attack(
        &upf,
        &mut rogue,
        &smf,
        seids,
        Cause::SESSION_CONTEXT_NOT_FOUND,
    );
    assert_eq!(refused(&upf, "session_of_another"), 4.0);
    assert_eq!(refused(&upf, "unknown_seid"), 2.0);
    assert_eq!(refused(&upf, "node_id_of_another"), 4.0);
    assert_eq!(refused(&upf, "node_associated_elsewhere"), 1.0);
    let r = rogue.request(Some(own), SessionDeletionRequest {});
    assert_eq!(cause(&r.message), Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.api("sessions").as_array().map(Vec::len), Some(3));
    owner_still_in_charge(&upf, &mut smf, seids);
}
