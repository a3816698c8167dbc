//! GTP-U signalling through the pipeline and the agent: Error Indication for an unknown
//! TEID (its IEs, its egress port, its rate limit), Echo, a received End Marker, a received
//! Error Indication reported to the SMF (ERIR), and the Supported Extension Headers
//! Notification for an extension header we must understand and do not (its rate limit).

mod common;
use common::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;
use upf_dataplane::{DropReason, Packet, Port};
use upf_pfcp::ie::*;
use upf_wire::gtpu::MessageType;
use upf_wire::gtpu_msg::{self, Message};

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 13);
const PSA: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

/// The GTP-U message (header and body) of a packet the pipeline sent.
fn gtp_bytes(p: &Packet) -> &[u8] {
    let d = p.data();
    let ip = if d[0] >> 4 == 4 { 20 } else { 40 };
    &d[ip + 8..]
}

fn udp_ports(p: &Packet) -> (u16, u16) {
    let d = p.data();
    let ip = if d[0] >> 4 == 4 { 20 } else { 40 };
    (
        u16::from_be_bytes([d[ip], d[ip + 1]]),
        u16::from_be_bytes([d[ip + 2], d[ip + 3]]),
    )
}

fn assert_error_indication(p: &Packet, teid: u32, ours: IpAddr, to: IpAddr) {
    let (d, _) = open(p);
    assert_eq!((d.outer_src, d.outer_dst), (ours, to));
    assert_eq!(d.dst_port, 2152);
    let (repr, msg) = Message::parse(gtp_bytes(p)).expect("a GTP-U message");
    assert_eq!(repr.msg_type, MessageType::ErrorIndication);
    assert_eq!(repr.teid, 0, "Error Indication goes with TEID 0");
    assert_eq!(
        msg,
        Message::ErrorIndication {
            teid_data_i: teid,
            peer_addr: ours,
        }
    );
}

#[test]
fn unknown_teid_gets_an_error_indication_with_the_right_ies() {
    let mut r = Rig::new();
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    let out = r.send1(gpdu(0xdead, Some(9), &inner));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    assert_error_indication(&out[0], 0xdead, UPF.into(), GNB.into());
    assert_eq!(udp_ports(&out[0]), (2152, 2152));

    // A sender on another UDP port: told in the UDP Port extension header (TS 29.281
    // §5.2.2.1); the Error Indication still goes to port 2152.
    let mut g = gpdu(0xbeef, None, &inner);
    g.data_mut()[20..22].copy_from_slice(&40_000u16.to_be_bytes());
    g.data_mut()[26..28].fill(0); // no UDP checksum
    let out = r.send1(g);
    assert_eq!(out.len(), 1);
    assert_error_indication(&out[0], 0xbeef, UPF.into(), GNB.into());
    assert_eq!(open(&out[0]).0.gtpu.ext.udp_port, Some(40_000));

    // Over IPv6.
    let gnb6: IpAddr = "2001:db8:100::1".parse::<Ipv6Addr>().unwrap().into();
    let out = r.send1(gpdu_over(Port::N3, gnb6, ip(UPF6), 0xfeed, None, &inner));
    assert_eq!(out.len(), 1);
    assert_error_indication(&out[0], 0xfeed, ip(UPF6), gnb6);

    let c = r.dp().counters().clone();
    assert_eq!((c.dropped(DropReason::UnknownTeid), c.created), (3, 3));
    assert_balanced(&mut r);
}

#[test]
fn the_error_indication_leaves_by_the_port_the_g_pdu_came_in_by() {
    let mut r = Rig::new();
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    // From a peer UPF on N9.
    let out = r.send1(gpdu_over(
        Port::N9,
        PSA.into(),
        UPF.into(),
        0xdead,
        None,
        &inner,
    ));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N9);
    assert_error_indication(&out[0], 0xdead, UPF.into(), PSA.into());
    // After a packet dropped on N6 in the same batch (its buffer is reused).
    let out = r.send(vec![
        n6(&udp4(DN, Ipv4Addr::new(10, 99, 0, 1), 1, 2, 10, 0)),
        gpdu(0xdead, None, &inner),
    ]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    assert_error_indication(&out[0], 0xdead, UPF.into(), GNB.into());
    assert_balanced(&mut r);
}

#[test]
fn error_indications_are_rate_limited() {
    // 100 per second with a burst of 10 (the default configuration).
    let mut r = Rig::new();
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    let burst =
        |r: &mut Rig, n: u32| r.send((0..n).map(|i| gpdu(0x100 + i, None, &inner)).collect());
    assert_eq!(burst(&mut r, 15).len(), 10);
    assert_eq!(r.dp().counters().error_indications_suppressed, 5);
    r.now += Duration::from_millis(50); // 5 more
    assert_eq!(burst(&mut r, 10).len(), 5);
    let c = r.dp().counters().clone();
    assert_eq!(c.error_indications_suppressed, 10);
    assert_eq!(c.dropped(DropReason::UnknownTeid), 25);
    assert_balanced(&mut r);
}

/// A cluster's instance receives the tunnels of another shard once its addresses move
/// here, before it has taken the sessions over: no Error Indication for those TEIDs.
#[test]
fn no_error_indication_for_another_shards_teids() {
    let mut r = Rig::with(|p| p.silent_teids = vec![(0x8000_0000, 0xffff_ffff)]);
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    let out = r.send(vec![
        gpdu(0x8000_0001, None, &inner),
        gpdu(0x7fff_ffff, None, &inner),
    ]);
    assert_eq!(out.len(), 1, "only the TEID of our own range is answered");
    assert_error_indication(&out[0], 0x7fff_ffff, UPF.into(), GNB.into());
    let c = r.dp().counters().clone();
    assert_eq!(c.error_indications_suppressed, 1);
    assert_eq!(c.dropped(DropReason::UnknownTeid), 2);
    assert_balanced(&mut r);
}

fn echo_request(seq: u16) -> Vec<u8> {
    let mut b = [0u8; 64];
    let n = gtpu_msg::emit_echo_request(seq, &mut b).unwrap();
    b[..n].to_vec()
}

#[test]
fn echo_request_is_answered_with_its_sequence_number() {
    let mut r = Rig::new();
    let req = udp4_with(GNB, UPF, 40_001, 2152, &echo_request(0x1234));
    let out = r.send1(Packet::from_bytes(Port::N3, &req).unwrap());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N3);
    let (d, _) = open(&out[0]);
    assert_eq!((d.outer_src, d.outer_dst), (UPF.into(), GNB.into()));
    assert_eq!(udp_ports(&out[0]), (2152, 40_001));
    let (repr, msg) = Message::parse(gtp_bytes(&out[0])).unwrap();
    assert_eq!(repr.seq_number, Some(0x1234));
    assert_eq!(msg, Message::EchoResponse { recovery: 0 });

    // On N9, over IPv6.
    let psa6: Ipv6Addr = "2001:db8:9::9".parse().unwrap();
    let req = udp6(psa6, UPF6.parse().unwrap(), 2152, 2152, 0);
    let mut req = req[..48].to_vec();
    req.extend(echo_request(7));
    let len = u16::try_from(req.len() - 40).unwrap().to_be_bytes();
    req[4..6].copy_from_slice(&len);
    req[44..46].copy_from_slice(&len);
    req[46..48].fill(0);
    let out = r.send1(Packet::from_bytes(Port::N9, &req).unwrap());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port(), Port::N9);
    let (d, _) = open(&out[0]);
    assert_eq!((d.outer_src, d.outer_dst), (ip(UPF6), IpAddr::V6(psa6)));
    let (repr, msg) = Message::parse(gtp_bytes(&out[0])).unwrap();
    assert_eq!(
        (repr.seq_number, msg),
        (Some(7), Message::EchoResponse { recovery: 0 })
    );
    let c = r.dp().counters().clone();
    assert_eq!((c.received(), c.sent(), c.created), (2, 2, 0));
    assert_balanced(&mut r);
}

#[test]
fn a_received_end_marker_is_consumed() {
    let mut r = Rig::new();
    let (_, resp) = r.establish(simple_session(UE, 0xabcd));
    let mut b = [0u8; 16];
    let n = gtpu_msg::emit_end_marker(local_teid(&resp), &mut b).unwrap();
    let out = r.send1(gtp_from_gnb(&b[..n]));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.dp().counters().dropped(DropReason::Signalling), 1);
    assert!(r.reports().is_empty());
    assert_balanced(&mut r);
}

#[test]
fn a_received_error_indication_for_our_tunnel_is_reported_to_the_smf() {
    let mut r = Rig::new();
    let (seid, _) = r.establish(simple_session(UE, 0xabcd));
    let ei = |teid| {
        let mut b = [0u8; 64];
        let n = gtpu_msg::emit_error_indication(teid, GNB.into(), &mut b).unwrap();
        gtp_from_gnb(&b[..n])
    };
    // A tunnel nobody here sends into: consumed, not reported.
    assert!(r.send1(ei(0x9999)).is_empty());
    assert!(r.reports().is_empty());
    // The session's downlink tunnel.
    assert!(r.send1(ei(0xabcd)).is_empty());
    let reps = r.reports();
    assert_eq!(reps.len(), 1, "{reps:?}");
    assert!(reps[0].report_type.contains(ReportType::ERIR));
    let eir = reps[0]
        .error_indication_report
        .as_ref()
        .expect("an Error Indication Report");
    assert_eq!(
        eir.remote_f_teids.iter().copied().collect::<Vec<_>>(),
        [FTeid::Assigned {
            teid: 0xabcd,
            ipv4: Some(GNB),
            ipv6: None
        }]
    );
    assert_eq!(r.dp().counters().dropped(DropReason::Signalling), 2);
    // More of them (a gNB repeating itself, or a flood) are not reported again until the
    // SMF modifies the session: one report queued per session, not one per packet.
    for _ in 0..100 {
        assert!(r.send1(ei(0xabcd)).is_empty());
    }
    assert!(r.reports().is_empty());
    assert_eq!(r.dp().counters().error_indications_repeated, 100);
    let m = upf_pfcp::messages::SessionModificationRequest {
        update_fars: [upf_smf::update_far_to_gnb(2, 0xabcd, GNB)]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    assert_eq!(r.modify(seid, m).cause, upf_pfcp::Cause::REQUEST_ACCEPTED);
    assert!(r.send1(ei(0xabcd)).is_empty());
    assert_eq!(r.reports().len(), 1);
    assert_balanced(&mut r);
}

/// A G-PDU whose (only) extension header is of type `ext`, from UDP port `sport`.
fn gpdu_with_extension(ext: u8, sport: u16) -> Packet {
    let inner = udp4(UE, DN, 1, 2, 10, 0);
    let mut g = gpdu(0xdead, Some(9), &inner);
    let d = g.data_mut();
    assert_eq!(d[39], 0x85, "the PDU Session Container's type");
    d[39] = ext;
    d[20..22].copy_from_slice(&sport.to_be_bytes());
    d[26..28].fill(0); // no UDP checksum
    g
}

#[test]
fn an_unknown_comprehension_required_extension_header_gets_a_notification() {
    let mut r = Rig::new();
    for (ext, sport) in [(0x86, 2152), (0xc7, 40_000)] {
        let out = r.send1(gpdu_with_extension(ext, sport));
        assert_eq!(out.len(), 1, "{ext:#x}");
        assert_eq!(out[0].port(), Port::N3);
        let (d, _) = open(&out[0]);
        assert_eq!(
            (d.outer_src, d.outer_dst),
            (IpAddr::V4(UPF), IpAddr::V4(GNB))
        );
        let (repr, m) = Message::parse(gtp_bytes(&out[0])).unwrap();
        assert_eq!(repr.msg_type, MessageType::SupportedExtHeadersNotification);
        assert_eq!(repr.teid, 0);
        assert_eq!(
            udp_ports(&out[0]),
            (2152, sport),
            "back to the port it came from"
        );
        assert_eq!(
            m,
            Message::SupportedExtHeadersNotification {
                ext_types: &upf_wire::ext::SUPPORTED
            }
        );
    }
    // Unknown but not required (bits 00 and 01): skipped, the G-PDU goes on (to an unknown
    // TEID here, so an Error Indication comes back instead).
    for ext in [0x3f, 0x7e] {
        let out = r.send1(gpdu_with_extension(ext, 2152));
        assert_eq!(out.len(), 1);
        let (repr, _) = Message::parse(gtp_bytes(&out[0])).unwrap();
        assert_eq!(repr.msg_type, MessageType::ErrorIndication);
    }
    let c = r.dp().counters().clone();
    assert_eq!(c.dropped(DropReason::UnknownExtension), 2);
    assert_eq!(c.dropped(DropReason::UnknownTeid), 2);
    assert_balanced(&mut r);
}

#[test]
fn extension_header_notifications_are_rate_limited() {
    // 100 a second with a burst of 10, a budget apart from the Error Indications'.
    let mut r = Rig::new();
    let burst = |r: &mut Rig, n: usize| {
        r.send((0..n).map(|_| gpdu_with_extension(0x86, 2152)).collect())
            .len()
    };
    assert_eq!(burst(&mut r, 15), 10);
    assert_eq!(r.dp().counters().ext_header_notifications_suppressed, 5);
    r.now += Duration::from_millis(50);
    assert_eq!(burst(&mut r, 10), 5);
    let c = r.dp().counters().clone();
    assert_eq!(c.ext_header_notifications_suppressed, 10);
    assert_eq!(c.dropped(DropReason::UnknownExtension), 25);
    assert_eq!(c.error_indications_suppressed, 0);
    assert_balanced(&mut r);
}
