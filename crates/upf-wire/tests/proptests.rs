//! Property tests: no parser panics on any input; parse(emit(repr)) == repr;
//! encap → decap returns the inner bytes; incremental checksums equal a
//! full recompute.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
use upf_wire::encap::{self, EncapV4, EncapV6, GtpuTunnel};
use upf_wire::ext::{ExtIter, Extensions, PduSessionContainer, PduSessionInfo, PduType};
use upf_wire::flow::{self, Direction, FiveTuple};
use upf_wire::gtpu::{self, MessageType};
use upf_wire::gtpu_msg::{self, IeIter, Message};
use upf_wire::{checksum, icmp, ipv4, ipv6, udp};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Valid packets (scapy 2.8 vectors from the unit tests) to mutate.
fn seeds() -> Vec<Vec<u8>> {
    [
        "45000048000100004011f735c0a8010ac0a80114086808680034e72834ff00241122334400000085011009004500001c00010000400160a20a2d0002080808080800e5c412340007",
        "45000050000100004011f72dc0a80114c0a8010a08680868003cbb5334ff002c55667788000000850200c5a00000000045000020000100004011608e080808080a2d000200359c40000c845b61626364",
        "600000000054114020010db800000000000000000000000120010db8000000000000000000000002086808680054f4e734ff0044000000070000008501100100600000000014064020010db80001000000000000000000052001486000000000000000000000888801bbc350000000000000000050102000ac200000",
        "600000000031004020010db800000000000000000000000a20010db800000000000000000000000b2b000104000000003c0200010000000020010db800000000000000000000000c110001040000000004d2162e0009115478",
        "321a0010000000000000000010deadbeef8500040a000001",
        "3202000600000000123400000e00",
        "470000260001000040114b9a0102030405060708070704090909090003e807d0000a7ba56869",
    ]
    .iter()
    .map(|s| hex(s))
    .collect()
}

/// Run every parser and every accessor over `b`; only absence of panics matters.
fn exercise(b: &[u8]) {
    if let Ok(p) = ipv4::Packet::new_checked(b) {
        let _ = (
            p.dscp(),
            p.ecn(),
            p.ident(),
            p.frag_offset(),
            p.is_first_fragment(),
        );
        let _ = (p.options().len(), p.payload().len(), p.verify_checksum());
        let _ = ipv4::Repr::parse(&p);
    }
    if let Ok(p) = ipv6::Packet::new_checked(b) {
        let _ = (
            p.traffic_class(),
            p.flow_label(),
            p.payload().len(),
            p.upper_layer(),
        );
        let _ = ipv6::Repr::parse(&p);
    }
    if let Ok(p) = udp::Packet::new_checked(b) {
        let _ = (p.payload().len(), udp::Repr::parse(&p));
        let _ = p.verify_checksum(
            &IpAddr::V4(Ipv4Addr::LOCALHOST),
            &IpAddr::V4(Ipv4Addr::LOCALHOST),
        );
        let _ = p.verify_checksum_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST);
    }
    if let Ok(p) = icmp::Packet::new_checked(b) {
        let _ = (p.echo_ident(), p.data().len(), p.verify_checksum_v4());
    }
    if let Ok(p) = gtpu::Packet::new_checked(b) {
        let _ = (
            p.seq_number(),
            p.npdu_number(),
            p.payload_offset(),
            p.payload(),
        );
        for h in p.extensions().flatten() {
            let _ = PduSessionContainer::parse(h.content);
            if let Ok(i) = PduSessionInfo::new(h.content) {
                let _ = (
                    i.qmp(),
                    i.snp(),
                    i.ppi(),
                    i.dl_sending_timestamp(),
                    i.n3n9_delay_ind(),
                );
            }
        }
        let _ = gtpu::Repr::parse(&p);
    }
    let _ = gtpu::decode(b);
    let _ = Message::parse(b);
    let _ = IeIter::new(b).count();
    let _ = ExtIter::new(b, 0, 0x85).count();
    let _ = Extensions::parse(b, 0, b.first().copied().unwrap_or(0x85));
    let _ = FiveTuple::parse(b).map(|t| flow::flow_hash(&t));
    let _ = flow::inner_ue_addr(b, Direction::Uplink);
    let _ = encap::decapsulate(b);
    let _ = encap::decapsulate_verified(b);
    // Unchecked views must not panic either.
    let g = gtpu::Packet::new_unchecked(b);
    let _ = (
        g.teid(),
        g.seq_number(),
        g.payload_offset(),
        g.extensions().count(),
    );
    let i = ipv4::Packet::new_unchecked(b);
    let _ = (
        i.payload().len(),
        i.options().len(),
        i.verify_checksum(),
        i.src_addr(),
    );
    let i6 = ipv6::Packet::new_unchecked(b);
    let _ = (i6.upper_layer(), i6.payload().len(), i6.dst_addr());
    let _ = gtpu::Repr::parse(&g);
}

fn arb_psc() -> impl Strategy<Value = PduSessionContainer> {
    prop_oneof![
        (0u8..64).prop_map(PduSessionContainer::ul),
        (0u8..64, proptest::option::of(0u8..8), any::<bool>()).prop_map(|(qfi, ppi, rqi)| {
            PduSessionContainer {
                pdu_type: PduType::Dl,
                qfi,
                ppi,
                rqi,
            }
        }),
    ]
}

fn arb_ext() -> impl Strategy<Value = Extensions> {
    (
        proptest::option::of(arb_psc()),
        proptest::option::of(any::<u16>()),
        proptest::option::of(any::<u16>()),
    )
        .prop_map(|(psc, udp_port, pdcp_pdu_number)| Extensions {
            psc,
            udp_port,
            pdcp_pdu_number,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn no_panic_arbitrary(b in vec(any::<u8>(), 0..200)) {
        exercise(&b);
    }

    #[test]
    fn no_panic_mutated(seed in 0usize..7, flips in vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut b = seeds()[seed].clone();
        for (i, v) in flips {
            let n = b.len();
            b[i % n] = v;
        }
        let n = b.len();
        b.truncate(cut % (n + 1));
        exercise(&b);
        // The same bytes at every inner offset (GTP-U/IP parsers see mid-packet data).
        for off in [20, 28, 40, 48] {
            if off < b.len() {
                exercise(&b[off..]);
            }
        }
    }

    #[test]
    fn setters_never_panic(mut b in vec(any::<u8>(), 0..64), v in any::<u16>()) {
        let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
        p.set_dscp(v.to_be_bytes()[0]);
        p.fill_checksum();
        let _ = p.decrement_ttl();
        let mut g = gtpu::Packet::new_unchecked(&mut b[..]);
        g.set_teid(u32::from(v));
        g.set_next_ext_type(0x85);
        let mut u = udp::Packet::new_unchecked(&mut b[..]);
        u.set_len(v);
        u.fill_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
        u.fill_checksum_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST);
        let mut i6 = ipv6::Packet::new_unchecked(&mut b[..]);
        i6.set_payload_len(v);
        let _ = i6.payload_mut().len();
    }

    #[test]
    fn gtpu_roundtrip(t in any::<u8>(), teid in any::<u32>(), seq in proptest::option::of(any::<u16>()),
                      npdu in proptest::option::of(any::<u8>()), ext in arb_ext(), payload_len in 0usize..600) {
        let repr = gtpu::Repr { msg_type: MessageType::from(t), teid, seq_number: seq, npdu_number: npdu, ext, payload_len };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut gtpu::Packet::new_unchecked(&mut buf[..])).unwrap();
        let p = gtpu::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(gtpu::Repr::parse_with_offset(&p), Ok((repr, repr.header_len())));
        prop_assert_eq!(p.payload_offset(), Ok(repr.header_len()));
    }

    #[test]
    fn psc_roundtrip(psc in arb_psc(), next in any::<u8>()) {
        let mut buf = [0u8; 8];
        let n = psc.emit_ext(&mut buf, next).unwrap();
        prop_assert_eq!(n, psc.ext_len());
        prop_assert_eq!(buf[n - 1], next);
        prop_assert_eq!(PduSessionContainer::parse(&buf[1..n - 1]), Ok(psc));
    }

    #[test]
    fn ipv4_roundtrip(src in any::<u32>(), dst in any::<u32>(), protocol in any::<u8>(), payload_len in 0usize..1500,
                      ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4, ident in any::<u16>(), dont_frag in any::<bool>()) {
        let r = ipv4::Repr { src: src.into(), dst: dst.into(), protocol, payload_len, ttl, dscp, ecn, ident, dont_frag };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(ipv4::Repr::parse(&ipv4::Packet::new_checked(&buf[..]).unwrap()), Ok(r));
    }

    #[test]
    fn ipv6_roundtrip(src in any::<u128>(), dst in any::<u128>(), next_header in any::<u8>(), payload_len in 0usize..1500,
                      hop_limit in any::<u8>(), traffic_class in any::<u8>(), flow_label in 0u32..0x10_0000) {
        let r = ipv6::Repr { src: src.into(), dst: dst.into(), next_header, payload_len, hop_limit, traffic_class, flow_label };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..])).unwrap();
        prop_assert_eq!(ipv6::Repr::parse(&ipv6::Packet::new_checked(&buf[..]).unwrap()), Ok(r));
    }

    #[test]
    fn udp_roundtrip_checksum(src_port in any::<u16>(), dst_port in any::<u16>(), payload in vec(any::<u8>(), 0..300),
                              a in any::<u32>(), b in any::<u128>()) {
        let r = udp::Repr { src_port, dst_port, payload_len: payload.len() };
        let mut buf = vec![0u8; r.buffer_len()];
        buf[8..].copy_from_slice(&payload);
        let mut p = udp::Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p).unwrap();
        let (s4, d4) = (Ipv4Addr::from(a), Ipv4Addr::from(!a));
        p.fill_checksum_v4(s4, d4);
        prop_assert!(p.checksum() != 0);
        prop_assert!(p.verify_checksum_v4(s4, d4));
        let (s6, d6) = (Ipv6Addr::from(b), Ipv6Addr::from(!b));
        p.fill_checksum_v6(&s6, &d6);
        prop_assert!(p.verify_checksum_v6(&s6, &d6));
        prop_assert_eq!(udp::Repr::parse(&udp::Packet::new_checked(&buf[..]).unwrap()), Ok(r));
    }

    /// RFC 1624: TTL decrement and DSCP/ECN rewrite patch the checksum to
    /// exactly what a full recompute gives.
    #[test]
    fn ipv4_incremental_checksum(hdr in vec(any::<u8>(), 20), ttl in 2u8.., dscp in 0u8..64, ecn in 0u8..4) {
        let mut b = hdr;
        b[0] = 0x45;
        b[2] = 0;
        b[3] = 20;
        b[8] = ttl;
        let mut p = ipv4::Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        prop_assert_eq!(p.decrement_ttl(), Ok(ttl - 1));
        p.set_dscp(dscp);
        p.set_ecn(ecn);
        let inc = p.checksum();
        p.fill_checksum();
        prop_assert_eq!(inc, p.checksum());
    }

    #[test]
    fn checksum_update_u32_matches(words in vec(any::<u16>(), 4..30), new in any::<u32>()) {
        let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        b[0] |= 0x40;
        let c0 = checksum::checksum(&b);
        let old = u32::from_be_bytes([b[2], b[3], b[4], b[5]]);
        b[2..6].copy_from_slice(&new.to_be_bytes());
        prop_assert_eq!(checksum::update_u32(c0, old, new), checksum::checksum(&b));
    }

    #[test]
    fn encap_decap_v4(payload in vec(any::<u8>(), 0..1400), extra in 0usize..32, psc in proptest::option::of(arb_psc()),
                      teid in any::<u32>(), dscp in 0u8..64, src in any::<u32>(), dst in any::<u32>()) {
        let params = EncapV4 {
            src: src.into(), dst: dst.into(), ident: 0, dont_frag: true,
            tunnel: GtpuTunnel { teid, src_port: 2152, dst_port: 2152, psc, ttl: 64, dscp, ecn: 0 },
        };
        let start0 = encap::headroom_v4(&psc) + extra;
        let mut buf = vec![0u8; start0 + payload.len()];
        buf[start0..].copy_from_slice(&payload);
        let start = encap::encapsulate_gtpu_v4(&mut buf, start0, payload.len(), &params).unwrap();
        prop_assert_eq!(start, extra);
        let d = encap::decapsulate_verified(&buf[start..]).unwrap();
        prop_assert_eq!(&buf[start..][d.inner.clone()], &payload[..]);
        prop_assert_eq!(d.gtpu.teid, teid);
        prop_assert_eq!(d.gtpu.ext.psc, psc);
        prop_assert_eq!(ipv4::Packet::new_checked(&buf[start..]).unwrap().dscp(), dscp);
    }

    #[test]
    fn encap_decap_v6(payload in vec(any::<u8>(), 0..1400), psc in proptest::option::of(arb_psc()),
                      teid in any::<u32>(), src in any::<u128>(), dst in any::<u128>(), fl in 0u32..0x10_0000) {
        let params = EncapV6 {
            src: src.into(), dst: dst.into(), flow_label: fl,
            tunnel: GtpuTunnel { teid, src_port: 40000, dst_port: 2152, psc, ttl: 64, dscp: 10, ecn: 1 },
        };
        let start0 = encap::MAX_HEADROOM;
        let mut buf = vec![0u8; start0 + payload.len()];
        buf[start0..].copy_from_slice(&payload);
        let start = encap::encapsulate_gtpu_v6(&mut buf, start0, payload.len(), &params).unwrap();
        prop_assert_eq!(start, start0 - encap::headroom_v6(&psc));
        let d = encap::decapsulate_verified(&buf[start..]).unwrap();
        prop_assert_eq!(&buf[start..][d.inner.clone()], &payload[..]);
        prop_assert_eq!((d.src_port, d.dst_port), (40000, 2152));
        prop_assert_eq!(d.gtpu.ext.psc, psc);
    }

    #[test]
    fn signalling_roundtrip(teid in any::<u32>(), seq in any::<u16>(), v6 in any::<u128>(), v4 in any::<u32>(),
                            types in vec(any::<u8>(), 0..40), port in any::<u16>()) {
        let mut buf = [0u8; 128];
        let n = gtpu_msg::emit_error_indication(teid, IpAddr::V6(v6.into()), &mut buf).unwrap();
        prop_assert_eq!(Message::parse(&buf[..n]).unwrap().1,
            Message::ErrorIndication { teid_data_i: teid, peer_addr: IpAddr::V6(v6.into()) });
        let n = gtpu_msg::emit_error_indication_with_udp_port(teid, IpAddr::V4(v4.into()), port, &mut buf).unwrap();
        let (r, m) = Message::parse(&buf[..n]).unwrap();
        prop_assert_eq!(r.ext.udp_port, Some(port));
        prop_assert_eq!(m, Message::ErrorIndication { teid_data_i: teid, peer_addr: IpAddr::V4(v4.into()) });
        let n = gtpu_msg::emit_supported_ext_headers_notification(seq, &types, &mut buf).unwrap();
        prop_assert_eq!(Message::parse(&buf[..n]).unwrap().1,
            Message::SupportedExtHeadersNotification { ext_types: &types });
        let n = gtpu_msg::emit_echo_response(0, seq, &mut buf).unwrap();
        let (r, m) = Message::parse(&buf[..n]).unwrap();
        prop_assert_eq!((r.seq_number, m), (Some(seq), Message::EchoResponse { recovery: 0 }));
        let n = gtpu_msg::emit_end_marker(teid, &mut buf).unwrap();
        prop_assert_eq!(Message::parse(&buf[..n]).unwrap().0.teid, teid);
    }
}
