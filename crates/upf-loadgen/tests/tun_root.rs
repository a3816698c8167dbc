//! The gNB/UE emulator on a real TUN device in a fresh network namespace (needs root and
//! iproute2: `#[ignore = "needs root"]`). In the namespace: TUN `lgtun0` holding UE
//! 10.60.0.1 with a route to the "DN" 192.168.6.0/24 through it, the gNB's N3 socket on
//! 127.0.0.1:2152 and a UDP socket standing in for the UPF's N3 on 127.0.0.2:2152.
//!
//! Uplink: a UDP socket bound to the UE address sends to the DN; the stand-in UPF must get a
//! G-PDU with the session's uplink TEID, a UL PDU Session Container with its QFI and the
//! datagram inside. Downlink: the stand-in UPF sends a G-PDU with the downlink TEID; the UE
//! socket must receive the datagram inside. Also: an Echo Request is answered, an unknown TEID
//! is counted and not delivered.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;
use upf_loadgen::gnb::{open_tun, Gnb, SessionTable, UeSession};
use upf_netns::Netns;
use upf_wire::ext::{Extensions, PduSessionContainer, PduType};
use upf_wire::gtpu::{self, MessageType};
use upf_wire::gtpu_msg::{self, Message};
use upf_wire::{ip_proto, ipv4, udp};

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 1);
const DN: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 2);
const GNB_N3: &str = "127.0.0.1:2152";
const UPF_N3: &str = "127.0.0.2:2152";
const UL_TEID: u32 = 0x0000_1234;
const DL_TEID: u32 = 0x0100_0001;
const WAIT: Duration = Duration::from_secs(5);

/// IPv4/UDP `src:sport → dst:dport` carrying `payload`, UDP checksum 0.
fn ip_udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, payload: &[u8]) -> Vec<u8> {
    let ulen = udp::HEADER_LEN + payload.len();
    let mut p = vec![0u8; ipv4::HEADER_LEN + ulen];
    ipv4::Repr {
        src,
        dst,
        protocol: ip_proto::UDP,
        payload_len: ulen,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 7,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]))
    .unwrap();
    let u = &mut p[ipv4::HEADER_LEN..];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&u16::try_from(ulen).unwrap().to_be_bytes());
    u[8..].copy_from_slice(payload);
    p
}

fn gpdu(teid: u32, psc: Option<PduSessionContainer>, inner: &[u8]) -> Vec<u8> {
    let h = gtpu::Repr {
        msg_type: MessageType::GPdu,
        teid,
        seq_number: None,
        npdu_number: None,
        ext: Extensions {
            psc,
            ..Extensions::default()
        },
        payload_len: inner.len(),
    };
    let mut b = vec![0u8; h.buffer_len()];
    h.emit(&mut gtpu::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    let hl = h.header_len();
    b[hl..].copy_from_slice(inner);
    b
}

#[test]
#[ignore = "needs root"]
fn tun_to_gtpu_and_back_in_a_netns() {
    assert!(upf_netns::is_root(), "needs root");
    assert!(
        std::path::Path::new("/dev/net/tun").exists(),
        "needs /dev/net/tun"
    );
    let ns = Netns::unique("lgtest").expect("a network namespace (iproute2)");
    let table = SessionTable::new(vec![UeSession {
        ue: UE,
        ul_teid: UL_TEID,
        upf_n3: UPF_N3.parse().unwrap(),
        dl_teid: DL_TEID,
        qfi: 9,
        high: None,
    }])
    .unwrap();
    let (gnb, upf) = ns
        .run(|| {
            let (tun, name) = open_tun("lgtun0").unwrap();
            let upf = UdpSocket::bind(UPF_N3).unwrap();
            let sock = UdpSocket::bind(GNB_N3).unwrap();
            let gnb = Gnb::with_io(tun, name, sock, table, Duration::from_millis(20)).unwrap();
            (gnb, upf)
        })
        .unwrap();
    assert_eq!(gnb.tun_name(), "lgtun0");
    ns.ip(&["addr", "add", "10.60.0.1/32", "dev", "lgtun0"])
        .unwrap();
    ns.ip(&["link", "set", "lgtun0", "up"]).unwrap();
    ns.ip(&["route", "add", "192.168.6.0/24", "dev", "lgtun0"])
        .unwrap();
    upf.set_read_timeout(Some(WAIT)).unwrap();

    // Uplink: UE socket → TUN → G-PDU at the stand-in UPF.
    let ue = ns.run(|| UdpSocket::bind((UE, 4000)).unwrap()).unwrap();
    ue.set_read_timeout(Some(WAIT)).unwrap();
    ue.send_to(b"hello", (DN, 5000)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = upf.recv_from(&mut buf).unwrap();
    assert_eq!(from, GNB_N3.parse::<SocketAddr>().unwrap());
    let (repr, m) = Message::parse(&buf[..n]).unwrap();
    assert_eq!(repr.teid, UL_TEID);
    assert_eq!(repr.ext.psc, Some(PduSessionContainer::ul(9)));
    assert_eq!(repr.ext.psc.map(|p| p.pdu_type), Some(PduType::Ul));
    let Message::GPdu { payload } = m else {
        panic!("{m:?}")
    };
    let ip = ipv4::Packet::new_checked(payload).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (UE, DN));
    assert_eq!(ip.protocol(), ip_proto::UDP);
    let u = udp::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!((u.src_port(), u.dst_port()), (4000, 5000));
    assert_eq!(u.payload(), b"hello");

    // Downlink: G-PDU with the downlink TEID → TUN → UE socket.
    let inner = ip_udp(DN, 5000, UE, 4000, b"world");
    let g = gpdu(DL_TEID, Some(PduSessionContainer::dl(9)), &inner);
    upf.send_to(&g, GNB_N3).unwrap();
    let (n, from) = ue.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"world");
    assert_eq!(from, SocketAddr::from((DN, 5000)));

    // Unknown TEID: counted, not delivered. Echo Request: answered.
    upf.send_to(&gpdu(0xdead, None, &inner), GNB_N3).unwrap();
    let mut e = [0u8; 16];
    let len = gtpu_msg::emit_echo_request(5, &mut e).unwrap();
    upf.send_to(&e[..len], GNB_N3).unwrap();
    let (n, _) = upf.recv_from(&mut buf).unwrap();
    let (repr, m) = Message::parse(&buf[..n]).unwrap();
    assert!(matches!(m, Message::EchoResponse { .. }), "{m:?}");
    assert_eq!(repr.seq_number, Some(5));
    ue.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(ue.recv_from(&mut buf).is_err(), "unknown TEID delivered");

    let c = gnb.stop();
    assert_eq!((c.ul_packets, c.dl_packets), (1, 1), "{c}");
    assert_eq!(c.ul_bytes, 20 + 8 + 5);
    assert_eq!(c.dl_bytes, inner.len() as u64);
    assert_eq!((c.dl_unknown_teid, c.echo_requests), (1, 1), "{c}");
    assert_eq!(
        (c.ul_no_session, c.tun_errors, c.udp_errors),
        (0, 0, 0),
        "{c}"
    );
    drop(ue);
    drop(upf);
    drop(ns);
}
