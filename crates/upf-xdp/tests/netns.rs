//! The engine's two exits on real interfaces (root): a namespace `upf` with veths `n3` and
//! `n6`, their peers in a namespace `peer` (where scapy sends and captures), the engine
//! attached natively to both with a session installed and upf-io's AF_XDP steering program of
//! N3 tail-called for punts. Native XDP redirect into a veth needs its peer's NAPI: GRO is
//! turned on at the peers for that.
//!
//! (a) an uplink G-PDU into N3 leaves N6 decapsulated, Ethernet addresses from the
//! neighbour table; (b) a downlink packet into N6 leaves N3 encapsulated; (c) a G-PDU of an
//! unknown TEID reaches the AF_XDP socket of its queue unchanged; (d) a G-PDU whose next hop
//! has no neighbour entry is punted the same way, counted as `no_neighbour`; (e) so is one
//! whose egress interface does not forward (`forwarding_disabled`). And for an IPv6 UE (in
//! IPv4 tunnels): (f) uplink to N6 with its IPv6 next hop from the neighbour table, Hop
//! Limit - 1; (g) downlink into the tunnel.

use aya::programs::XdpMode;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};
use upf_io::af_xdp::{AttachMode, XdpConfig, XdpInterface};
use upf_io::{PacketIo, Pool, Port};
use upf_netns::Netns;
use upf_rules::*;
use upf_xdp::{Config, Engine, Unrouted};
mod common;

const N3: [u8; 4] = [10, 61, 3, 1];
const GNB: [u8; 4] = [10, 61, 3, 2];
const DN: [u8; 4] = [10, 61, 6, 2];
/// On N6's subnet, with no neighbour entry.
const DN_UNKNOWN: [u8; 4] = [10, 61, 6, 9];
const UE: [u8; 4] = [10, 45, 0, 1];
const TEID_UP: u32 = 0x100;
const TEID_DOWN: u32 = 0x200;

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !u16::try_from(s).unwrap_or(0xffff)
}

fn ipv4(src: [u8; 4], dst: [u8; 4], ttl: u8, payload: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).unwrap();
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, ttl, 17, 0, 0];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).unwrap();
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// A G-PDU without options.
fn gpdu(teid: u32, inner: &[u8]) -> Vec<u8> {
    let mut g = vec![0x30, 0xff];
    g.extend_from_slice(&u16::try_from(inner.len()).unwrap().to_be_bytes());
    g.extend_from_slice(&teid.to_be_bytes());
    g.extend_from_slice(inner);
    g
}

fn eth(dst: [u8; 6], src: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[8, 0]);
    f.extend_from_slice(ip);
    f
}

fn uplink_inner(dst: [u8; 4]) -> Vec<u8> {
    ipv4(UE, dst, 64, &udp(4000, 5000, b"uplink payload"))
}

fn gpdu_frame(to: [u8; 6], from: [u8; 6], teid: u32, inner: &[u8]) -> Vec<u8> {
    eth(
        to,
        from,
        &ipv4(GNB, N3, 64, &udp(2152, 2152, &gpdu(teid, inner))),
    )
}

fn mac(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns.ip(&["-br", "link", "show", dev]).unwrap();
    let f = out.split_whitespace().nth(2).unwrap_or("");
    upf_io::link::parse_mac(f).unwrap_or_else(|| panic!("MAC in {out:?}"))
}

/// Sends `frame` into `send_if` of `ns` and returns the UDP frames captured on `capture_if`
/// (at most `want`, within 3 s), with scapy.
fn send_and_capture(
    ns: &Netns,
    send_if: &str,
    capture_if: &str,
    want: usize,
    frame: &[u8],
) -> Vec<Vec<u8>> {
    const SCRIPT: &str = r#"
import sys, threading
from scapy.all import AsyncSniffer, sendp, conf, Raw, UDP, raw
conf.verb = 0
send_if, capture_if, want, frame = sys.argv[1], sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4])
if want == 0:
    sendp(Raw(load=frame), iface=send_if)
    sys.exit(0)
ready = threading.Event()
s = AsyncSniffer(iface=capture_if, lfilter=lambda p: UDP in p, count=want,
                 started_callback=ready.set)
s.start()
ready.wait(3)
sendp(Raw(load=frame), iface=send_if)
s.join(timeout=3)
results = s.stop() if s.running else s.results
for p in results or []:
    print(raw(p).hex())
"#;
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let out = ns
        .command("python3")
        .args(["-c", SCRIPT, send_if, capture_if, &want.to_string(), &hex])
        .output()
        .expect("python3 with scapy");
    assert!(
        out.status.success(),
        "scapy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            (0..l.len() / 2)
                .map(|i| u8::from_str_radix(&l[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}

/// Uplink TEID `TEID_UP` to N6, downlink to UE into a tunnel to the gNB (`TEID_DOWN`).
fn session() -> Session {
    let gnb = (TEID_DOWN, Ipv4Addr::from(GNB));
    common::forwarding_session(1, Ipv4Addr::from(UE), TEID_UP, gnb)
}

/// Sends `frame` into N3 from the peer and checks that the AF_XDP socket gets it unchanged.
fn assert_punted(peer: &Netns, io: &mut upf_io::af_xdp::XskIo, pool: &mut Pool, frame: &[u8]) {
    send_and_capture(peer, "n3p", "n6p", 0, frame);
    let got = xsk_receive(io, pool, 1);
    assert_eq!(
        got,
        vec![frame[14..].to_vec()],
        "punted unchanged to AF_XDP"
    );
}

/// The IP packets the socket receives within 3 s, until `want` came.
fn xsk_receive(io: &mut upf_io::af_xdp::XskIo, pool: &mut Pool, want: usize) -> Vec<Vec<u8>> {
    let end = Instant::now() + Duration::from_secs(3);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < end {
        let fd = io.fd().expect("socket fd");
        let _ = upf_io::wait_readable(&[fd], Duration::from_millis(20));
        io.rx_batch(pool, &mut got, 16).unwrap();
    }
    got.iter().map(|p| p.data().to_vec()).collect()
}

fn unrouted(e: &Engine, u: Unrouted) -> u64 {
    e.stats()
        .unwrap()
        .unrouted
        .iter()
        .find(|(r, _)| *r == u)
        .map_or(0, |(_, n)| *n)
}

/// The MAC addresses of the rig: N3, N6, the gNB's, the DN's.
struct Macs {
    n3: [u8; 6],
    n6: [u8; 6],
    gnb: [u8; 6],
    dn: [u8; 6],
}

/// The veths between `upf` and `peer`, forwarding on, the gNB and DN in the neighbour table
/// (and with `v6`, their IPv6 addresses too, `GNB_6` on N3 and `DN6` on N6; else IPv6 off).
fn rig(upf: &Netns, peer: &Netns, v6: bool) -> Macs {
    // Without IPv6: no neighbour discovery or MLD, so the punt counts are the test's only.
    for ns in [upf, peer] {
        let off = if v6 { "0" } else { "1" };
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", off)
            .unwrap();
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", off).unwrap();
    }
    for (dev, a, p) in [
        ("n3", "10.61.3.1/24", "10.61.3.2/24"),
        ("n6", "10.61.6.1/24", "10.61.6.2/24"),
    ] {
        let pdev = format!("{dev}p");
        upf_netns::veth_pair((upf.name(), dev, a), (peer.name(), &pdev, p)).unwrap();
        // GRO creates the peer's NAPI, which native XDP redirect into a veth needs.
        let st = peer
            .command("ethtool")
            .args(["-K", &pdev, "gro", "on"])
            .status()
            .unwrap();
        assert!(st.success(), "ethtool -K {pdev} gro on");
    }
    // bpf_fib_lookup answers only for interfaces that forward.
    upf.sysctl("net/ipv4/ip_forward", "1").unwrap();
    let m = Macs {
        n3: mac(upf, "n3"),
        n6: mac(upf, "n6"),
        gnb: mac(peer, "n3p"),
        dn: mac(peer, "n6p"),
    };
    let mut neighbours = vec![
        (IpAddr::from(GNB), m.gnb, "n3"),
        (IpAddr::from(DN), m.dn, "n6"),
    ];
    if v6 {
        upf.sysctl("net/ipv6/conf/all/forwarding", "1").unwrap();
        for (ns, dev, a) in [
            (upf, "n6", "2001:db8:6::1"),
            (peer, "n6p", "2001:db8:6::2"),
            (upf, "n3", N3_6),
            (peer, "n3p", GNB_6),
        ] {
            ns.ip(&["-6", "addr", "add", &format!("{a}/64"), "dev", dev, "nodad"])
                .unwrap();
        }
        neighbours.push((IpAddr::V6(DN6), m.dn, "n6"));
        neighbours.push((IpAddr::V6(GNB_6.parse().unwrap()), m.gnb, "n3"));
    }
    for (addr, lladdr, dev) in neighbours {
        let a = addr.to_string();
        let l = lladdr.map(|b| format!("{b:02x}")).join(":");
        upf.ip(&[
            "neigh",
            "replace",
            &a,
            "lladdr",
            &l,
            "dev",
            dev,
            "nud",
            "permanent",
        ])
        .unwrap();
    }
    m
}

const DN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
/// The UE's /64 and its address in it.
const UE6_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x45, 0, 0, 0, 0, 0);
const UE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x45, 0, 0, 0, 0, 7);

/// An IPv6 packet carrying UDP (checksum 0: nothing on the path checks it).
fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, hops: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    h.extend_from_slice(&[17, hops]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

#[test]
#[ignore = "needs root"]
fn ipv6_ue_exits_on_veths() {
    assert!(upf_netns::is_root(), "needs root (BPF, namespaces)");
    let upf = Netns::unique("xdp6-upf").unwrap();
    let peer = Netns::unique("xdp6-peer").unwrap();
    let m = rig(&upf, &peer, true);
    let mut engine = Engine::load(Config {
        sessions: 4,
        n3: Ipv4Addr::from(N3),
        n9: Ipv4Addr::from(N3),
        n3_v6: None,
        n9_v6: None,
        outer_ttl: 64,
        hops: None,
        acl: Default::default(),
    })
    .unwrap();
    let mut s = session();
    for p in &mut s.pdrs {
        if let Some(u) = &mut p.pdi.ue_ip {
            u.ipv6 = Some((UE6_PREFIX, 64));
        }
    }
    engine.install(&s).unwrap();
    upf.run(|| {
        engine.attach(Port::N3, "n3", None, XdpMode::Driver)?;
        engine.attach(Port::N6, "n6", None, XdpMode::Driver)
    })
    .unwrap()
    .unwrap();

    // (f) uplink: decapsulated, Hop Limit - 1, Ethernet from the IPv6 neighbour table.
    let inner = ipv6(UE6, DN6, 64, &udp(4000, 5000, b"uplink payload"));
    let frame = gpdu_frame(m.n3, m.gnb, TEID_UP, &inner);
    let got = send_and_capture(&peer, "n3p", "n6p", 1, &frame);
    assert_eq!(got.len(), 1, "the uplink packet left N6");
    let mut want = [&m.dn[..], &m.n6[..], &[0x86, 0xdd]].concat();
    want.extend_from_slice(&inner);
    want[14 + 7] -= 1;
    assert_eq!(got[0], want);

    // (g) downlink: into the tunnel to the gNB.
    let dl = ipv6(DN6, UE6, 64, &udp(5000, 4000, b"downlink payload"));
    let mut f = [&m.n6[..], &m.dn[..], &[0x86, 0xdd]].concat();
    f.extend_from_slice(&dl);
    let got = send_and_capture(&peer, "n6p", "n3p", 1, &f);
    assert_eq!(got.len(), 1, "the downlink packet left N3");
    let ip = &got[0][14..];
    assert_eq!(&got[0][..12], &[m.gnb, m.n3].concat()[..]);
    assert_eq!(&ip[32..36], &TEID_DOWN.to_be_bytes(), "the gNB's TEID");
    let mut inner_dl = dl.clone();
    inner_dl[7] -= 1;
    assert_eq!(&ip[36..], &inner_dl[..], "the inner packet, Hop Limit - 1");
    assert_eq!(engine.stats().unwrap().forwarded, 2);
}

#[test]
#[ignore = "needs root"]
fn exits_on_veths() {
    assert!(upf_netns::is_root(), "needs root (BPF, namespaces)");
    let upf = Netns::unique("xdpx-upf").unwrap();
    let peer = Netns::unique("xdpx-peer").unwrap();
    let m = rig(&upf, &peer, false);
    let (n3_mac, n6_mac, gnb_mac, dn_mac) = (m.n3, m.n6, m.gnb, m.dn);

    let mut engine = Engine::load(Config {
        sessions: 4,
        n3: Ipv4Addr::from(N3),
        n9: Ipv4Addr::from(N3),
        n3_v6: None,
        n9_v6: None,
        outer_ttl: 64,
        hops: None,
        acl: Default::default(),
    })
    .unwrap();
    engine.install(&session()).unwrap();
    let (steer, mut io) = upf
        .run(|| {
            let iface = XdpInterface::open(
                "n3",
                XdpConfig {
                    local: vec![IpAddr::V4(Ipv4Addr::from(N3))],
                    attach: AttachMode::TailCalled,
                    frames: 256,
                    ..XdpConfig::new(Port::N3, 1)
                },
            )?;
            let io = iface.socket(0)?;
            let fd = iface.program_fd()?;
            engine.attach(Port::N3, "n3", Some(&fd), XdpMode::Driver)?;
            engine.attach(Port::N6, "n6", None, XdpMode::Driver)?;
            Ok::<_, std::io::Error>((iface, io))
        })
        .unwrap()
        .unwrap();
    let mut pool = Pool::new(64);

    // (a) uplink: decapsulated, TTL - 1, Ethernet from the neighbour table.
    let inner = uplink_inner(DN);
    let got = send_and_capture(
        &peer,
        "n3p",
        "n6p",
        1,
        &gpdu_frame(n3_mac, gnb_mac, TEID_UP, &inner),
    );
    assert_eq!(got.len(), 1, "the uplink packet left N6");
    let mut want = inner.clone();
    want[8] -= 1;
    want[10..12].copy_from_slice(&[0, 0]);
    let c = csum(&want[..20]);
    want[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(got[0], eth(dn_mac, n6_mac, &want));

    // (b) downlink: into the tunnel to the gNB.
    let dl = ipv4(DN, UE, 64, &udp(5000, 4000, b"downlink payload"));
    let got = send_and_capture(&peer, "n6p", "n3p", 1, &eth(n6_mac, dn_mac, &dl));
    assert_eq!(got.len(), 1, "the downlink packet left N3");
    let f = &got[0];
    assert_eq!(
        &f[..12],
        &[gnb_mac, n3_mac].concat()[..],
        "Ethernet addresses"
    );
    let ip = &f[14..];
    assert_eq!(
        (&ip[12..16], &ip[16..20]),
        (&N3[..], &GNB[..]),
        "outer addresses"
    );
    assert_eq!(&ip[20..24], &[8, 104, 8, 104], "UDP 2152 → 2152");
    assert_eq!(&ip[32..36], &TEID_DOWN.to_be_bytes(), "the gNB's TEID");
    let mut inner_dl = dl.clone();
    inner_dl[8] -= 1;
    inner_dl[10..12].copy_from_slice(&[0, 0]);
    let c = csum(&inner_dl[..20]);
    inner_dl[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(&ip[36..], &inner_dl[..], "the inner packet, TTL - 1");
    let forwarded = engine.stats().unwrap().forwarded;
    assert_eq!(forwarded, 2);

    // (c) an unknown TEID: the steering program's socket gets it unchanged.
    let punts = engine.stats().unwrap().punted;
    let unknown = gpdu_frame(n3_mac, gnb_mac, 0x999, &uplink_inner(DN));
    assert_punted(&peer, &mut io, &mut pool, &unknown);
    assert_eq!(engine.stats().unwrap().punted, punts + 1);

    // (d) no neighbour for the next hop: punted unchanged, counted.
    let before = unrouted(&engine, Unrouted::NoNeighbour);
    let frame = gpdu_frame(n3_mac, gnb_mac, TEID_UP, &uplink_inner(DN_UNKNOWN));
    assert_punted(&peer, &mut io, &mut pool, &frame);
    assert_eq!(unrouted(&engine, Unrouted::NoNeighbour), before + 1);
    let s = engine.stats().unwrap();
    assert_eq!((s.punted, s.forwarded), (punts + 2, 2));

    // (e) N6 not forwarding: the FIB answers nothing for it, the packet is punted.
    upf.sysctl("net/ipv4/conf/n6/forwarding", "0").unwrap();
    let frame = gpdu_frame(n3_mac, gnb_mac, TEID_UP, &uplink_inner(DN));
    assert_punted(&peer, &mut io, &mut pool, &frame);
    assert_eq!(unrouted(&engine, Unrouted::ForwardingDisabled), 1);

    drop(io);
    drop(steer);
    drop(engine);
}

/// Our N3 IPv6 address and the gNB's.
const N3_6: &str = "2001:db8:3::1";
const GNB_6: &str = "2001:db8:3::2";

/// An IPv6/UDP packet (checksum right) from `src` to `dst`.
fn ipv6_udp(src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let mut u = udp(2152, 2152, payload);
    upf_wire::udp::Packet::new_unchecked(&mut u[..]).fill_checksum_v6(&src, &dst);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&u16::try_from(u.len()).unwrap().to_be_bytes());
    h.extend_from_slice(&[17, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&u);
    h
}

/// The engine with an IPv6 N3 address on real interfaces (`bpf_fib_lookup` AF_INET6, a
/// permanent neighbour entry for the gNB): (a) a downlink packet into N6 leaves N3 in the
/// gNB's IPv6 tunnel, its UDP checksum right; (b) an uplink G-PDU in IPv6 into N3 leaves N6
/// decapsulated.
#[test]
#[ignore = "needs root"]
fn ipv6_tunnels_on_veths() {
    assert!(upf_netns::is_root(), "needs root (BPF, namespaces)");
    let (n3_6, gnb_6): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
        (N3_6.parse().unwrap(), GNB_6.parse().unwrap());
    let upf = Netns::unique("xdp6-upf").unwrap();
    let peer = Netns::unique("xdp6-peer").unwrap();
    let m = rig(&upf, &peer, true);
    let (n3_mac, n6_mac, gnb_mac, dn_mac) = (m.n3, m.n6, m.gnb, m.dn);
    let mut engine = Engine::load(Config {
        sessions: 4,
        n3: Ipv4Addr::from(N3),
        n9: Ipv4Addr::from(N3),
        n3_v6: Some(n3_6),
        n9_v6: None,
        outer_ttl: 64,
        hops: None,
        acl: Default::default(),
    })
    .unwrap();
    let mut s = session();
    s.far_mut(FarId(2))
        .unwrap()
        .forwarding
        .as_mut()
        .unwrap()
        .outer_header_creation = Some(OuterHeaderCreation::Gtpu {
        teid: Teid(TEID_DOWN),
        peer: IpAddr::V6(gnb_6),
    });
    engine.install(&s).unwrap();
    upf.run(|| {
        engine.attach(Port::N3, "n3", None, XdpMode::Driver)?;
        engine.attach(Port::N6, "n6", None, XdpMode::Driver)
    })
    .unwrap()
    .unwrap();

    // (a) downlink: into the gNB's IPv6 tunnel.
    let dl = ipv4(DN, UE, 64, &udp(5000, 4000, b"downlink payload"));
    let got = send_and_capture(&peer, "n6p", "n3p", 1, &eth(n6_mac, dn_mac, &dl));
    assert_eq!(got.len(), 1, "the downlink packet left N3");
    let f = &got[0];
    assert_eq!(
        &f[..14],
        &[&gnb_mac[..], &n3_mac, &[0x86, 0xdd]].concat()[..]
    );
    let ip = &f[14..];
    assert_eq!(
        (ip[0], ip[6], ip[7]),
        (0x60, 17, 64),
        "IPv6, UDP, hop limit"
    );
    assert_eq!(
        (&ip[8..24], &ip[24..40]),
        (&n3_6.octets()[..], &gnb_6.octets()[..])
    );
    let u = upf_wire::udp::Packet::new_checked(&ip[40..]).unwrap();
    assert!(u.verify_checksum_v6(&n3_6, &gnb_6), "UDP checksum");
    assert_eq!(&ip[40..44], &[8, 104, 8, 104], "UDP 2152 → 2152");
    assert_eq!(&ip[52..56], &TEID_DOWN.to_be_bytes(), "the gNB's TEID");
    let mut inner_dl = dl.clone();
    inner_dl[8] -= 1;
    inner_dl[10..12].copy_from_slice(&[0, 0]);
    let c = csum(&inner_dl[..20]);
    inner_dl[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(&ip[56..], &inner_dl[..], "the inner packet, TTL - 1");

    // (b) uplink: a G-PDU in IPv6, decapsulated.
    let inner = uplink_inner(DN);
    let mut frame = n3_mac.to_vec();
    frame.extend_from_slice(&gnb_mac);
    frame.extend_from_slice(&[0x86, 0xdd]);
    frame.extend_from_slice(&ipv6_udp(gnb_6, n3_6, &gpdu(TEID_UP, &inner)));
    let got = send_and_capture(&peer, "n3p", "n6p", 1, &frame);
    assert_eq!(got.len(), 1, "the uplink packet left N6");
    let mut want = inner.clone();
    want[8] -= 1;
    want[10..12].copy_from_slice(&[0, 0]);
    let c = csum(&want[..20]);
    want[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(got[0], eth(dn_mac, n6_mac, &want));
    assert_eq!(engine.stats().unwrap().forwarded, 2);
    drop(engine);
}
