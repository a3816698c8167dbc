//! Session modifications while traffic runs: End Markers on the old tunnel (SNDEM), and
//! atomic replacement — every packet by the old rules or the new, none lost, order kept.

mod common;
use common::*;
use std::net::Ipv4Addr;
use upf_dataplane::{Packet, Port};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_smf as smf;
use upf_wire::gtpu::MessageType;
use upf_wire::gtpu_msg::Message;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 14);
const GNB2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);

fn down(n: u16) -> Vec<u8> {
    udp4(DN, UE, n, 4000, 40, 0)
}

fn up(n: u16) -> Vec<u8> {
    udp4(UE, DN, n, 53, 40, 0)
}

fn switch(teid: u32, gnb: Ipv4Addr, flags: Option<PfcpSmReqFlags>) -> SessionModificationRequest {
    SessionModificationRequest {
        update_fars: [smf::update_far_to_gnb(2, teid, gnb)].into_iter().collect(),
        pfcpsmreq_flags: flags,
        ..Default::default()
    }
}

fn accepted(r: &mut Rig, seid: u64, m: SessionModificationRequest) {
    let resp = r.modify(seid, m);
    assert_eq!(resp.cause, Cause::REQUEST_ACCEPTED, "{resp:?}");
}

/// What a packet out is: an End Marker on (TEID, peer), or a G-PDU on (TEID, peer) with the
/// number of its inner packet.
#[derive(Debug, PartialEq, Eq)]
enum Out {
    EndMarker(u32, Ipv4Addr),
    Down(u32, Ipv4Addr, u16),
}

fn what(p: &Packet) -> Out {
    assert_eq!(p.port(), Port::N3);
    let (d, inner) = open(p);
    let peer = match d.outer_dst {
        std::net::IpAddr::V4(a) => a,
        a => panic!("{a}"),
    };
    match d.gtpu.msg_type {
        MessageType::EndMarker => {
            let (repr, msg) = Message::parse(&p.data()[28..]).unwrap();
            assert_eq!(msg, Message::EndMarker);
            assert_eq!(d.outer_src, std::net::IpAddr::from(UPF));
            Out::EndMarker(repr.teid, peer)
        }
        MessageType::GPdu => Out::Down(d.gtpu.teid, peer, sport(&inner)),
        t => panic!("{t:?}"),
    }
}

#[test]
fn sndem_sends_an_end_marker_down_the_old_tunnel_before_the_new_traffic() {
    let mut r = Rig::new();
    let (seid, _) = r.establish(simple_session(UE, 0xabcd));
    assert_eq!(what(&r.send1(n6(&down(0)))[0]), Out::Down(0xabcd, GNB, 0));

    accepted(
        &mut r,
        seid,
        switch(0xbeef, GNB2, Some(PfcpSmReqFlags::SNDEM)),
    );
    assert_balanced(&mut r); // the End Marker waits, counted nowhere yet
    let out: Vec<Out> = r.send(vec![n6(&down(1))]).iter().map(what).collect();
    assert_eq!(
        out,
        [Out::EndMarker(0xabcd, GNB), Out::Down(0xbeef, GNB2, 1)]
    );
    assert_eq!(r.dp().counters().created, 1);
    assert_balanced(&mut r);

    // Without SNDEM, or without a change of tunnel: no End Marker.
    accepted(&mut r, seid, switch(0xabcd, GNB, None));
    accepted(
        &mut r,
        seid,
        switch(0xabcd, GNB, Some(PfcpSmReqFlags::SNDEM)),
    );
    assert!(r.send(vec![]).is_empty());
    let out: Vec<Out> = r.send(vec![n6(&down(2))]).iter().map(what).collect();
    assert_eq!(out, [Out::Down(0xabcd, GNB, 2)]);
    assert_balanced(&mut r);
}

#[test]
fn sndem_in_the_update_forwarding_parameters_is_honoured() {
    // TS 29.244 Table 7.5.4.3-2: SNDEM is asked for in the Update Forwarding Parameters of
    // the FAR whose tunnel changes (free5GC and Open5GS put it there).
    let mut r = Rig::new();
    let (seid, _) = r.establish(simple_session(UE, 0xabcd));
    let mut m = switch(0xbeef, GNB2, None);
    m.update_fars[0]
        .update_forwarding_parameters
        .as_mut()
        .unwrap()
        .pfcpsm_req_flags = Some(PfcpSmReqFlags::SNDEM);
    accepted(&mut r, seid, m);
    let out: Vec<Out> = r.send(vec![]).iter().map(what).collect();
    assert_eq!(out, [Out::EndMarker(0xabcd, GNB)]);
    assert_balanced(&mut r);
}

#[test]
fn a_modification_amid_a_stream_loses_nothing_and_mixes_nothing() {
    let mut r = Rig::new();
    let (seid, resp) = r.establish(simple_session(UE, 0xabcd));
    let teid = local_teid(&resp);
    let mut downs = Vec::new();
    let mut ups = 0;
    let mut n = 0u16;
    for batch in 0..20 {
        match batch {
            // The handover: the new tunnel, with an End Marker down the old one.
            8 => accepted(
                &mut r,
                seid,
                switch(0xbeef, GNB2, Some(PfcpSmReqFlags::SNDEM)),
            ),
            // Buffering for a while (as for a path switch done in two steps) …
            13 => accepted(
                &mut r,
                seid,
                SessionModificationRequest {
                    update_fars: [set_action(2, ApplyAction::BUFF)].into_iter().collect(),
                    ..Default::default()
                },
            ),
            // … and back to forwarding, on the same new tunnel.
            16 => accepted(&mut r, seid, switch(0xbeef, GNB2, None)),
            _ => {}
        }
        let mut rx = Vec::new();
        for _ in 0..5 {
            rx.push(n6(&down(n)));
            rx.push(gpdu(teid, Some(9), &up(n)));
            n += 1;
        }
        for p in r.send(rx) {
            if p.port() == Port::N6 {
                assert_eq!(p.data(), &routed(&up(sport(p.data())))[..]);
                ups += 1;
            } else {
                downs.push((batch, what(&p)));
            }
        }
    }
    assert_eq!(ups, 100, "uplink never stopped");
    // Downlink: 0..40 on the old tunnel, the End Marker, then 40..100 on the new one, in
    // order; 65..80 held while buffering and sent when forwarding resumed.
    let mut want = Vec::new();
    want.extend((0..40).map(|i| Out::Down(0xabcd, GNB, i)));
    want.push(Out::EndMarker(0xabcd, GNB));
    want.extend((40..100).map(|i| Out::Down(0xbeef, GNB2, i)));
    let got: Vec<&Out> = downs.iter().map(|(_, o)| o).collect();
    assert_eq!(got, want.iter().collect::<Vec<_>>());
    assert!(downs
        .iter()
        .all(|(b, o)| !matches!(o, Out::Down(_, _, 65..80)) || *b == 16));
    assert_balanced(&mut r);

    // Every packet counted once, across the three modifications.
    let del = r.delete(seid);
    let v = del.usage_reports[0].volume_measurement.unwrap();
    assert_eq!(
        (v.total_packets, v.uplink_packets, v.downlink_packets),
        (Some(200), Some(100), Some(100))
    );
}
