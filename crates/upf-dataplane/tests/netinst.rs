//! Network instances (TS 29.244 §8.2.4, issue #26 §5): two data networks share the UE pool
//! 10.60.0.0/16; each has its own N6, and a rule's Network Instance decides which.

mod common;

use common::*;
use std::net::Ipv4Addr;
use upf_dataplane::{DropReason, NetworkInstances, Packet, Port};
use upf_n4::alloc::UePoolConfig;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message};

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 1);
/// The ids the rig's instances get: their order in the configuration, from 1.
const DN_A: u8 = 1;
const DN_B: u8 = 2;

/// Two data networks, each with an N6 and a UE pool of 10.60.0.0/16.
fn rig() -> Rig {
    Rig::configured(
        |a| {
            let default = a.ue_pools[0].clone();
            a.ue_pools = ["dn-a", "dn-b"]
                .map(|ni| UePoolConfig {
                    name: Some(ni.into()),
                    network_instance: Some(ni.into()),
                    ..default.clone()
                })
                .into();
        },
        |c| {
            c.network_instances = NetworkInstances::new(["dn-a".into(), "dn-b".into()]).unwrap();
        },
    )
}

/// Establishes `req`, which is to be refused: the response.
fn refused(r: &mut Rig, mut req: SessionEstablishmentRequest) -> SessionEstablishmentResponse {
    r.cp_seid += 1;
    req.node_id = NodeId::Ipv4(SMF);
    req.cp_f_seid = FSeid {
        seid: r.cp_seid,
        ipv4: Some(SMF),
        ipv6: None,
    };
    match r.request(Some(0), req).message {
        Message::SessionEstablishmentResponse(m) => m,
        m => panic!("{m:?}"),
    }
}

/// [`simple_session`] with every PDI and FAR naming `ni`, as SMFs name the DNN.
fn session_in(ue: Ipv4Addr, gnb_teid: u32, ni: &str) -> SessionEstablishmentRequest {
    let mut req = simple_session(ue, gnb_teid);
    for p in req.create_pdrs.iter_mut() {
        p.pdi.network_instance = Some(NetworkInstance(ni.into()));
    }
    for f in req.create_fars.iter_mut() {
        if let Some(fw) = &mut f.forwarding_parameters {
            fw.network_instance = Some(NetworkInstance(ni.into()));
        }
    }
    req
}

/// A downlink packet to `ue` from the N6 of instance `instance`.
fn from_dn(instance: u8, ue: Ipv4Addr) -> Packet {
    let mut p = n6(&udp4(DN, ue, 53, 4000, 20, 0));
    p.set_instance(instance);
    p
}

/// The gNB-side TEID a downlink packet was sent into.
fn tunnel_teid(p: &Packet) -> u32 {
    assert_eq!(p.port(), Port::N3);
    open(p).0.gtpu.teid
}

fn two_sessions_on_the_same_address(r: &mut Rig) -> (u32, u32) {
    let (_, a) = r.establish(session_in(UE, 100, "dn-a"));
    let (_, b) = r.establish(session_in(UE, 200, "dn-b"));
    (local_teid(&a), local_teid(&b))
}

#[test]
fn two_dns_share_a_pool_and_downlink_from_each_reaches_its_own_session() {
    for hot in [true, false] {
        let mut r = rig();
        r.dp().set_hot_records(hot);
        two_sessions_on_the_same_address(&mut r);
        assert_eq!(r.dp().sessions(), 2);
        if hot {
            assert_eq!(r.dp().cold_sessions(), 0, "both in hot records");
        }
        let out = r.send(vec![
            from_dn(DN_A, UE),
            from_dn(DN_B, UE),
            from_dn(DN_A, UE),
        ]);
        let teids: Vec<u32> = out.iter().map(tunnel_teid).collect();
        assert_eq!(teids, [100, 200, 100], "hot records {hot}");
        // The default instance has no session on that address.
        assert!(r.send1(from_dn(0, UE)).is_empty());
        assert_eq!(r.dp().counters().dropped(DropReason::UnknownUe), 1);
        assert_balanced(&mut r);
    }
}

#[test]
fn uplink_leaves_by_the_n6_of_its_fars_instance() {
    let mut r = rig();
    let (ta, tb) = two_sessions_on_the_same_address(&mut r);
    let ip = udp4(UE, DN, 4000, 53, 20, 0);
    let out = r.send(vec![gpdu(ta, None, &ip), gpdu(tb, None, &ip)]);
    let egress: Vec<(Port, u8)> = out.iter().map(|p| (p.port(), p.instance())).collect();
    assert_eq!(egress, [(Port::N6, DN_A), (Port::N6, DN_B)]);
    assert_eq!(out[0].data(), routed(&ip));
    assert_balanced(&mut r);
}

#[test]
fn a_pdr_of_another_network_instance_does_not_match() {
    let mut r = rig();
    // The uplink PDR (and so the UE address) in dn-a, the downlink PDR in dn-b.
    let mut req = session_in(UE, 100, "dn-a");
    req.create_pdrs[1].pdi.network_instance = Some(NetworkInstance("dn-b".into()));
    r.establish(req);
    // Reached in two instances: the general path, which tests each PDR's.
    assert_eq!(r.dp().cold_sessions(), 1);
    assert!(r.send1(from_dn(DN_A, UE)).is_empty());
    assert_eq!(r.dp().counters().dropped(DropReason::NoMatchingPdr), 1);
    let out = r.send1(from_dn(DN_B, UE));
    assert_eq!(out.iter().map(tunnel_teid).collect::<Vec<_>>(), [100]);
    assert_balanced(&mut r);
}

#[test]
fn the_same_address_in_the_same_instance_still_collides() {
    let mut r = rig();
    r.establish(session_in(UE, 100, "dn-a"));
    let m = refused(&mut r, session_in(UE, 200, "dn-a"));
    assert_eq!(m.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
    assert_eq!(m.offending_ie, Some(OffendingIe(93)));
    assert_eq!(r.dp().sessions(), 1);
}

#[test]
fn an_unknown_network_instance_is_refused_naming_the_rule_and_the_ie() {
    let mut r = rig();
    let mut req = session_in(UE, 100, "dn-a");
    req.create_pdrs[1].pdi.network_instance = Some(NetworkInstance("dn-c".into()));
    let m = refused(&mut r, req);
    assert_eq!(m.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
    assert_eq!(m.offending_ie, Some(OffendingIe(22)));
    assert_eq!(m.failed_rule_id, Some(FailedRuleId::Pdr(PdrId(2))));

    let mut req = session_in(UE, 100, "dn-a");
    if let Some(fw) = &mut req.create_fars[0].forwarding_parameters {
        fw.network_instance = Some(NetworkInstance("dn-c".into()));
    }
    let m = refused(&mut r, req);
    assert_eq!(m.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
    assert_eq!(m.offending_ie, Some(OffendingIe(22)));
    assert_eq!(m.failed_rule_id, Some(FailedRuleId::Far(FarId(1))));
    assert_eq!(r.dp().sessions(), 0);
}

#[test]
fn a_network_instance_changed_by_update_forwarding_parameters_moves_the_uplink() {
    let mut r = rig();
    let (seid, a) = r.establish(session_in(UE, 100, "dn-a"));
    let teid = local_teid(&a);
    let m = r.modify(
        seid,
        SessionModificationRequest {
            update_fars: [UpdateFar {
                far_id: FarId(1),
                update_forwarding_parameters: Some(UpdateForwardingParameters {
                    network_instance: Some(NetworkInstance("dn-b".into())),
                    ..Default::default()
                }),
                ..Default::default()
            }]
            .into_iter()
            .collect(),
            ..Default::default()
        },
    );
    assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "{m:?}");
    let out = r.send1(gpdu(teid, None, &udp4(UE, DN, 4000, 53, 20, 0)));
    assert_eq!(
        out.iter()
            .map(|p| (p.port(), p.instance()))
            .collect::<Vec<_>>(),
        [(Port::N6, DN_B)]
    );
}

#[test]
fn without_named_instances_every_name_is_the_one_default_n6() {
    let mut r = Rig::new();
    let (_, a) = r.establish(session_in(UE, 100, "internet"));
    let out = r.send(vec![
        gpdu(local_teid(&a), None, &udp4(UE, DN, 4000, 53, 20, 0)),
        from_dn(0, UE),
    ]);
    let egress: Vec<(Port, u8)> = out.iter().map(|p| (p.port(), p.instance())).collect();
    assert_eq!(egress, [(Port::N6, 0), (Port::N3, 0)]);
    // And one address is one session, whatever the rules name.
    let m = refused(&mut r, session_in(UE, 200, "ims"));
    assert_eq!(m.offending_ie, Some(OffendingIe(93)));
}
