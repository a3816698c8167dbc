//! Scenario tests: SMF → agent → compiled tables → pipeline → packets out. Here: outer
//! header removal and creation (GTP-U over IPv4 and IPv6, PDU Session Container, transport
//! level marking, N9 relay), TTL, and an IPv6 UE.

mod common;
use common::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use upf_dataplane::{DropReason, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_smf as smf;
use upf_wire::encap::decapsulate;
use upf_wire::ext::{PduSessionContainer, PduType};

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 5);

#[test]
fn uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb() {
    let mut r = Rig::new();
    let (_seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);

    let inner = udp4(UE, DN, 4000, 53, 100, 0);
    let out = r.send1(gpdu(teid, Some(9), &inner));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N6);
    let mut expect = inner.clone();
    assert!(upf_dataplane::flow_of(&expect).is_some());
    expect[8] -= 1; // TTL
    let c = u16::from_be_bytes([expect[10], expect[11]]) + 0x100;
    expect[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(out[0].data(), &expect[..]);

    let down = udp4(DN, UE, 53, 4000, 200, 0);
    let out = r.send1(n6(&down));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    let d = decapsulate(out[0].data()).unwrap();
    assert_eq!(d.gtpu.teid, 0xabcd);
    assert_eq!(d.outer_dst, ip("192.0.2.100"));
    assert_eq!(d.outer_src, ip("192.0.2.1"));
    assert_eq!(d.gtpu.ext.psc.unwrap().qfi, 9);
    assert_eq!(out[0].data()[d.inner.clone()].len(), down.len());

    let c = r.dp().counters().clone();
    assert!(c.balanced(), "{c:?}");
    assert_eq!(c.sent(), 2);
}

#[test]
fn unknown_teid_gets_error_indication_and_counts() {
    let mut r = Rig::new();
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    let out = r.send1(gpdu(0xdead, None, &inner));
    assert_eq!(out.len(), 1, "Error Indication expected");
    let d = decapsulate(out[0].data()).unwrap();
    assert_eq!(d.outer_dst, ip("192.0.2.100"));
    let c = r.dp().counters().clone();
    assert_eq!(c.dropped(DropReason::UnknownTeid), 1);
    assert!(c.balanced(), "{c:?}");
}

// ---- outer header removal and creation ------------------------------------------------

const GNB6: &str = "2001:db8:100::1";
const PSA: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

fn down(n: u16) -> Vec<u8> {
    udp4(DN, UE, 10_000 + n, 4000, 200, 0)
}

fn up(n: u16) -> Vec<u8> {
    udp4(UE, DN, 10_000 + n, 53, 100, 0)
}

/// The outer IPv4 header's DSCP, ECN and TTL.
fn outer_v4(p: &upf_dataplane::Packet) -> (u8, u8, u8) {
    let d = p.data();
    assert_eq!(d[0] >> 4, 4);
    (d[1] >> 2, d[1] & 3, d[8])
}

#[test]
fn downlink_gtpu_ipv4_to_the_gnb_exactly() {
    let mut r = Rig::new();
    r.establish(simple_session(UE, 0xabcd));
    let out = r.send1(n6(&down(1)));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    let (d, inner) = open(&out[0]);
    assert_eq!((d.outer_src, d.outer_dst), (ip("192.0.2.1"), GNB.into()));
    assert_eq!((d.src_port, d.dst_port), (2152, 2152));
    assert_eq!(d.gtpu.teid, 0xabcd);
    assert_eq!(d.gtpu.ext.psc, Some(PduSessionContainer::dl(9)));
    assert_eq!(outer_v4(&out[0]), (0, 0, 64));
    assert_eq!(inner, routed(&down(1)));
    assert_balanced(&mut r);
}

#[test]
fn downlink_gtpu_ipv6_peer_from_the_n3_ipv6_address() {
    let mut r = Rig::new();
    let gnb6: Ipv6Addr = GNB6.parse().unwrap();
    let req = with_far(simple_session(UE, 0xabcd), 2, |f| {
        f.forwarding_parameters = Some(smf::forwarding(
            DestinationInterface::ACCESS,
            Some(OuterHeaderCreation::gtpu_ipv6(0x1234, gnb6)),
        ));
    });
    r.establish(req);
    let out = r.send1(n6(&down(1)));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    let (d, inner) = open(&out[0]);
    assert_eq!(out[0].data()[0] >> 4, 6);
    assert_eq!(out[0].data()[7], 64, "outer hop limit");
    assert_eq!((d.outer_src, d.outer_dst), (ip(UPF6), IpAddr::V6(gnb6)));
    assert_eq!(d.gtpu.teid, 0x1234);
    assert_eq!(d.gtpu.ext.psc.map(|p| p.qfi), Some(9));
    assert_eq!(inner, routed(&down(1)));
    assert_balanced(&mut r);
}

#[test]
fn downlink_psc_carries_the_qers_qfi_rqi_and_ppi() {
    let mut r = Rig::new();
    let mut req = simple_session(UE, 0xabcd);
    let mut q = smf::create_qer(1, None, Some(5));
    q.rqi = Some(Rqi(true));
    q.paging_policy_indicator = Some(PagingPolicyIndicator(3));
    req.create_qers = [q].into_iter().collect();
    let (_, resp) = r.establish(req);
    let out = r.send1(n6(&down(1)));
    let (d, _) = open(&out[0]);
    let psc = d.gtpu.ext.psc.expect("a PDU Session Container");
    assert_eq!(
        (psc.pdu_type, psc.qfi, psc.rqi, psc.ppi),
        (PduType::Dl, 5, true, Some(3))
    );
    // Uplink to N6: the container goes with the outer header.
    let out = r.send1(gpdu(local_teid(&resp), Some(5), &up(2)));
    assert_eq!(out[0].data(), &routed(&up(2))[..]);
    assert_balanced(&mut r);
}

#[test]
fn transport_level_marking_sets_the_outer_dscp_and_ecn_is_copied() {
    let mut r = Rig::new();
    let req = with_far(simple_session(UE, 0xabcd), 2, |f| {
        let fw = f.forwarding_parameters.as_mut().unwrap();
        fw.transport_level_marking = Some(TransportLevelMarking {
            tos_traffic_class: 0xb8, // DSCP 46 (EF)
            mask: 0xfc,
        });
    });
    r.establish(req);
    // Inner DSCP 10 with ECT(1).
    let inner = with_tos(down(1), (10 << 2) | 1);
    let out = r.send1(n6(&inner));
    assert_eq!(outer_v4(&out[0]), (46, 1, 64));
    let (_, got) = open(&out[0]);
    assert_eq!(got, routed(&inner), "the inner ToS is left alone");
    // Without marking, the outer DSCP is 0 (the ECN still follows the inner).
    let mut r = Rig::new();
    r.establish(simple_session(UE, 0xabcd));
    let out = r.send1(n6(&with_tos(down(1), (10 << 2) | 2)));
    assert_eq!(outer_v4(&out[0]), (0, 2, 64));
}

/// The session of an intermediate UPF: uplink from the gNB relayed on N9 to the PSA,
/// downlink from the PSA on N9 relayed to the gNB; both with Outer Header Removal.
fn n9_relay() -> SessionEstablishmentRequest {
    let mut req = with_far(simple_session(UE, 0xabcd), 1, |f| {
        f.forwarding_parameters = Some(smf::forwarding(
            DestinationInterface::CORE,
            Some(OuterHeaderCreation::gtpu_ipv4(0x9999, PSA)),
        ));
    });
    let mut dl = req
        .create_pdrs
        .iter()
        .find(|p| p.pdr_id.0 == 2)
        .unwrap()
        .clone();
    dl.pdi.local_f_teid = Some(smf::choose_teid(2));
    dl.outer_header_removal = Some(OuterHeaderRemoval {
        outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV4,
        gtpu_extension_header_deletion: None,
    });
    req.create_pdrs = [req.create_pdrs[0].clone(), dl].into_iter().collect();
    req
}

#[test]
fn n9_uplink_is_reencapsulated_with_the_inner_untouched() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(n9_relay());
    let teid = local_teid(&resp);
    // TTL 1 is no obstacle: the relay is no routed hop.
    for ttl in [64, 1] {
        let inner = with_ttl(up(1), ttl);
        let out = r.send1(gpdu(teid, Some(9), &inner));
        assert_eq!(out.len(), 1, "TTL {ttl}");
        assert_eq!(out[0].port(), Port::N9);
        let (d, got) = open(&out[0]);
        assert_eq!((d.outer_src, d.outer_dst), (ip("192.0.2.1"), PSA.into()));
        assert_eq!(d.gtpu.teid, 0x9999);
        assert_eq!(d.gtpu.ext.psc, Some(PduSessionContainer::ul(9)));
        assert_eq!(got, inner, "the inner packet is relayed as it came");
    }
    assert_balanced(&mut r);
}

#[test]
fn n9_downlink_is_reencapsulated_to_the_gnb() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(n9_relay());
    let n9_teid = resp
        .created_pdrs
        .iter()
        .find(|c| c.pdr_id.0 == 2)
        .and_then(|c| match c.local_f_teid {
            Some(FTeid::Assigned { teid, .. }) => Some(teid),
            _ => None,
        })
        .expect("the N9 F-TEID");
    let inner = down(1);
    let pkt = gpdu_over(
        Port::N9,
        PSA.into(),
        ip("192.0.2.1"),
        n9_teid,
        Some(PduSessionContainer::dl(9)),
        &inner,
    );
    let out = r.send1(pkt);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    let (d, got) = open(&out[0]);
    assert_eq!((d.outer_dst, d.gtpu.teid), (GNB.into(), 0xabcd));
    assert_eq!(got, inner);
    assert_balanced(&mut r);
}

#[test]
fn ttl_is_decremented_entering_and_leaving_n6_and_expires_at_one() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let out = r.send(vec![
        gpdu(teid, Some(9), &with_ttl(up(1), 2)),
        n6(&with_ttl(down(2), 2)),
    ]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].data()[8], 1);
    assert_eq!(out[0].data(), &routed(&with_ttl(up(1), 2))[..]);
    assert_eq!(open(&out[1]).1, routed(&with_ttl(down(2), 2)));
    let out = r.send(vec![
        gpdu(teid, Some(9), &with_ttl(up(3), 1)),
        n6(&with_ttl(down(4), 1)),
        gpdu(teid, Some(9), &with_ttl(up(5), 0)),
    ]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.dp().counters().dropped(DropReason::TtlExpired), 3);
    assert_balanced(&mut r);
}

// ---- IPv6 UE -----------------------------------------------------------------------------

const UE6_PREFIX: &str = "2001:db8:77:1::";
const DN6: &str = "2001:db8:ffff:53::53";

fn ue6_addr(iid: u16) -> Ipv6Addr {
    let mut o = UE6_PREFIX.parse::<Ipv6Addr>().unwrap().octets();
    o[14..16].copy_from_slice(&iid.to_be_bytes());
    o.into()
}

/// A PDU session of type IPv6: a /64 for the UE, N3 over IPv6 both ways.
fn ipv6_session() -> SessionEstablishmentRequest {
    let ue = |is_destination| UeIpAddress {
        ipv6: Some(UE6_PREFIX.parse().unwrap()),
        ipv6_prefix_length: Some(64),
        is_destination,
        ..Default::default()
    };
    let mut req = simple_session(UE, 0xabcd);
    let mut pdrs: Vec<CreatePdr> = req.create_pdrs.iter().cloned().collect();
    pdrs[0].pdi.ue_ip_addresses = [ue(false)].into_iter().collect();
    pdrs[0].pdi.local_f_teid = Some(FTeid::Choose {
        ipv4: false,
        ipv6: true,
        choose_id: Some(1),
    });
    pdrs[0].outer_header_removal = Some(OuterHeaderRemoval {
        outer_header_removal_description: OuterHeaderRemoval::GTPU_UDP_IPV6,
        gtpu_extension_header_deletion: None,
    });
    pdrs[1].pdi.ue_ip_addresses = [ue(true)].into_iter().collect();
    req.create_pdrs = pdrs.into_iter().collect();
    let gnb6: Ipv6Addr = GNB6.parse().unwrap();
    req = with_far(req, 2, |f| {
        f.forwarding_parameters = Some(smf::forwarding(
            DestinationInterface::ACCESS,
            Some(OuterHeaderCreation::gtpu_ipv6(0xabcd, gnb6)),
        ));
    });
    req.pdn_type = Some(PdnType::IPV6);
    req
}

#[test]
fn ipv6_ue_uplink_and_downlink() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(ipv6_session());
    let (teid, f_teid6) = resp
        .created_pdrs
        .iter()
        .find_map(|c| match c.local_f_teid {
            Some(FTeid::Assigned { teid, ipv6, .. }) => Some((teid, ipv6)),
            _ => None,
        })
        .unwrap();
    assert_eq!(f_teid6, Some(UPF6.parse().unwrap()));
    let gnb6: IpAddr = ip(GNB6);
    let dn6: Ipv6Addr = DN6.parse().unwrap();

    // Uplink over IPv6 N3, from two addresses of the UE's /64.
    for iid in [5, 0xbeef] {
        let inner = udp6(ue6_addr(iid), dn6, 40_000, 53, 64);
        let pkt = gpdu_over(
            Port::N3,
            gnb6,
            ip(UPF6),
            teid,
            Some(PduSessionContainer::ul(9)),
            &inner,
        );
        let out = r.send1(pkt);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].port(), Port::N6);
        assert_eq!(
            out[0].data(),
            &routed(&inner)[..],
            "hop limit 63, else as sent"
        );
    }
    // Downlink to any address of the /64.
    for iid in [1, 0xabcd] {
        let inner = udp6(dn6, ue6_addr(iid), 53, 40_000, 300);
        let out = r.send1(n6(&inner));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].port(), Port::N3);
        let (d, got) = open(&out[0]);
        assert_eq!((d.outer_src, d.outer_dst), (ip(UPF6), gnb6));
        assert_eq!(d.gtpu.teid, 0xabcd);
        assert_eq!(got, routed(&inner));
    }
    // Outside the prefix, and Hop Limit 1.
    let other: Ipv6Addr = "2001:db8:77:2::1".parse().unwrap();
    let out = r.send(vec![
        gpdu_over(
            Port::N3,
            gnb6,
            ip(UPF6),
            teid,
            Some(PduSessionContainer::ul(9)),
            &udp6(other, dn6, 1, 53, 10),
        ),
        n6(&udp6(dn6, other, 53, 1, 10)),
        n6(&with_ttl(udp6(dn6, ue6_addr(1), 53, 1, 10), 1)),
    ]);
    assert!(out.is_empty(), "{out:?}");
    let c = r.dp().counters().clone();
    assert_eq!(c.dropped(DropReason::NoMatchingPdr), 1);
    assert_eq!(c.dropped(DropReason::UnknownUe), 1);
    assert_eq!(c.dropped(DropReason::TtlExpired), 1);
    assert_balanced(&mut r);
}

#[test]
fn uplink_acl_denies_before_the_rules_apply() {
    let acl = upf_dataplane::Acl::load(
        "# block DNS to anything but our resolver, and a bogon range\n\
         permit in udp from any to 198.51.100.53 53\n\
         deny in udp from any to any 53\n\
         deny in ip from any to 192.0.2.128/25\n",
    )
    .unwrap();
    let mut r = Rig::with(|c| c.uplink_acl = std::sync::Arc::new(acl));
    let (seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let ok_dns = udp4(UE, "198.51.100.53".parse().unwrap(), 4000, 53, 10, 0);
    let bad_dns = udp4(UE, DN, 4000, 53, 10, 0);
    let bogon = udp4(UE, "192.0.2.200".parse().unwrap(), 4000, 80, 10, 0);
    let web = udp4(UE, DN, 4000, 443, 10, 0);
    let out = r.send(
        [&ok_dns, &bad_dns, &bogon, &web]
            .iter()
            .map(|i| gpdu(teid, Some(9), i))
            .collect(),
    );
    assert_eq!(out.len(), 2);
    assert_eq!(r.dp().counters().dropped(DropReason::AclDenied), 2);
    // Downlink is not validated.
    assert_eq!(r.send1(n6(&udp4(DN, UE, 53, 4000, 10, 0))).len(), 1);
    // Denied packets are not charged: the deletion report counts the two forwarded uplink
    // packets and the downlink one.
    let del = r.delete(seid);
    let v = del.usage_reports[0].volume_measurement.unwrap();
    assert_eq!(v.uplink_packets, Some(2));
    assert!(r.dp().counters().balanced());
}

/// The UPF's own N9 address, apart from N3's.
const UPF_N9: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);

/// 3GPP Interface Types (§8.2.118) choose the GTP-U side: a PSA behind an I-UPF receives
/// uplink on Access over N9 (its F-TEID gets the N9 address) and sends downlink on Access
/// over N9; a type naming N3 puts it back.
#[test]
fn interface_types_choose_the_n9_side() {
    let mut r = Rig::configured(
        |a| {
            a.n9 = Some(upf_n4::TunnelAddrs {
                ipv4: Some(UPF_N9),
                ipv6: None,
            })
        },
        |p| p.n9.v4 = Some(UPF_N9),
    );
    let mut req = simple_session(UE, 0xabcd);
    let n9 = InterfaceType3gpp::N9;
    req.create_pdrs[0].pdi.source_interface_type = Some(n9);
    let fw = req.create_fars[1].forwarding_parameters.as_mut().unwrap();
    fw.destination_interface_type = Some(n9);
    let (seid, resp) = r.establish(req);
    let f_teid = resp.created_pdrs[0].local_f_teid;
    assert!(
        matches!(f_teid, Some(FTeid::Assigned { ipv4: Some(a), .. }) if a == UPF_N9),
        "{f_teid:?}"
    );
    let down = |r: &mut Rig| {
        let out = r.send1(n6(&udp4(DN, UE, 53, 4000, 100, 0)));
        assert_eq!(out.len(), 1, "{out:?}");
        let d = decapsulate(out[0].data()).unwrap();
        (out[0].port(), d.outer_src)
    };
    assert_eq!(down(&mut r), (Port::N9, IpAddr::V4(UPF_N9)));
    let m = SessionModificationRequest {
        update_fars: [UpdateFar {
            far_id: FarId(2),
            update_forwarding_parameters: Some(UpdateForwardingParameters {
                destination_interface_type: Some(InterfaceType3gpp::N3_3GPP_ACCESS),
                ..Default::default()
            }),
            ..Default::default()
        }]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, upf_pfcp::Cause::REQUEST_ACCEPTED);
    assert_eq!(down(&mut r), (Port::N3, IpAddr::V4(UPF)));
    assert_balanced(&mut r);
}
