//! Scenario tests: SMF → agent → compiled tables → pipeline → packets out.

mod common;
use common::*;
use std::net::Ipv4Addr;
use upf_dataplane::{DropReason, Port};
use upf_wire::encap::decapsulate;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 5);

#[test]
fn uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb() {
    let mut r = Rig::new();
    let (_seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);

    let inner = udp4(UE, DN, 4000, 53, 100, 0);
    let out = r.send1(gpdu(teid, Some(9), &inner));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, Port::N6);
    let mut expect = inner.clone();
    assert!(upf_dataplane::flow_of(&expect).is_some());
    expect[8] -= 1; // TTL
    let c = u16::from_be_bytes([expect[10], expect[11]]) + 0x100;
    expect[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(out[0].data(), &expect[..]);

    let down = udp4(DN, UE, 53, 4000, 200, 0);
    let out = r.send1(n6(&down));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, Port::N3);
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
