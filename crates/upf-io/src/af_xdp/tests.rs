//! Tests of the AF_XDP backend. Those that load programs or open sockets need root
//! (`#[ignore = "needs root"]`: scripts/test.sh runs them as root); the veth tests build their
//! own network namespace.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

/// The seeded generator of the fanout tests (SmallRng).
use crate::fanout::tests::Rng;
use upf_packet::classes::Classes;

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !u16::try_from(s & 0xffff).unwrap()
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&u16::try_from(20 + payload.len()).unwrap().to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// A G-PDU with a PDU Session Container (uplink, QFI 9) around `inner`.
fn gpdu_psc(teid: u32, inner: &[u8]) -> Vec<u8> {
    gpdu_qfi(teid, 9, inner)
}

/// A G-PDU with a PDU Session Container (uplink, QFI `qfi`) around `inner`.
fn gpdu_qfi(teid: u32, qfi: u8, inner: &[u8]) -> Vec<u8> {
    let mut g = vec![0x34, 255];
    g.extend_from_slice(&u16::try_from(4 + 4 + inner.len()).unwrap().to_be_bytes());
    g.extend_from_slice(&teid.to_be_bytes());
    g.extend_from_slice(&[0, 0, 0, 0x85]);
    g.extend_from_slice(&[1, 0x10, qfi, 0]);
    g.extend_from_slice(inner);
    g
}

fn eth(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const L4: [u8; 4] = [10, 0, 0, 1];
const L6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// A frame from the families the program distinguishes, often malformed.
fn random_frame(r: &mut Rng) -> Vec<u8> {
    let inner = match r.below(4) {
        0 => ipv4(
            r.bytes(4).try_into().unwrap(),
            [8, 8, 8, 8],
            17,
            0,
            &udp(1, 2, &r.bytes(10)),
        ),
        1 => ipv6(r.bytes(16).try_into().unwrap(), L6, 6, &r.bytes(20)),
        2 => {
            let n = usize::try_from(r.below(30)).unwrap();
            r.bytes(n)
        }
        _ => {
            let n = usize::try_from(r.below(50)).unwrap();
            let mut v = r.bytes(n);
            if let Some(b) = v.first_mut() {
                *b = 0x45;
            }
            v
        }
    };
    // GTP-U header: flags, type, extensions.
    let flags = match r.below(8) {
        0 => r.next().to_le_bytes()[0],
        1 => 0x30,
        2 => 0x32,
        3 => 0x31,
        _ => 0x34,
    };
    let mtype = match r.below(10) {
        0 => 1,
        1 => 26,
        2 => 254,
        _ => 255,
    };
    let mut g = vec![flags, mtype, 0, 0, 0, 0, 0, 1];
    if flags & 7 != 0 {
        let max = if r.chance(10) { 12 } else { 4 };
        let nexts = usize::try_from(r.below(max)).unwrap();
        g.extend_from_slice(&[0, 0, 0, if nexts > 0 { 0x85 } else { 0 }]);
        for i in 0..nexts {
            let l = if r.chance(5) {
                0
            } else {
                1 + usize::try_from(r.below(3)).unwrap()
            };
            let mut e = vec![u8::try_from(l).unwrap()];
            e.extend(r.bytes((4 * l).saturating_sub(2)));
            e.push(if i + 1 == nexts && !r.chance(5) {
                0
            } else {
                0x85
            });
            g.extend(e);
        }
    }
    g.extend_from_slice(&inner);
    let dport = if r.chance(85) { GTPU } else { 2153 };
    let l4 = udp(2152, dport, &g);
    let v4dst = match r.below(6) {
        0 => r.bytes(4).try_into().unwrap(),
        1 => [224, 0, 0, 5],
        2 => [255, 255, 255, 255],
        _ => L4,
    };
    let mut v6dst: [u8; 16] = match r.below(6) {
        0 => r.bytes(16).try_into().unwrap(),
        1 => [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 1],
        2 => [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        _ => L6,
    };
    if r.chance(5) {
        v6dst[0] = 0xfe;
        v6dst[1] = 0xc0;
    }
    let proto = match r.below(10) {
        0 => 6,
        1 => 58,
        _ => 17,
    };
    let (ethertype, l3) = match r.below(10) {
        0 => (0x0806, r.bytes(28)),
        1..=5 => {
            let frag = match r.below(10) {
                0 => 0x2000,
                1 => 0x0010,
                2 => 0x4000,
                _ => 0,
            };
            let mut p = ipv4([192, 0, 2, 1], v4dst, proto, frag, &l4);
            if r.chance(5) {
                p[0] = 0x44 + u8::try_from(r.below(3)).unwrap() * 0x10; // bad IHL or version
            }
            (0x0800, p)
        }
        _ => {
            let payload = if proto == 58 {
                let mut p = vec![128 + u8::try_from(r.below(12)).unwrap()];
                p.extend(r.bytes(20));
                p
            } else {
                l4
            };
            (
                0x86dd,
                ipv6(
                    [0x20, 1, 0xd, 0xb8, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                    v6dst,
                    proto,
                    &payload,
                ),
            )
        }
    };
    // Any DSCP (the checksum is not the program's business).
    let mut l3 = l3;
    if r.chance(50) && l3.len() > 1 {
        l3[1] = r.next().to_le_bytes()[0];
    }
    let vlan = r.chance(20).then_some(100);
    let mut f = eth([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], vlan, ethertype, &l3);
    if r.chance(15) {
        let keep = 14 + usize::try_from(r.below(u64::try_from(f.len() - 13).unwrap())).unwrap();
        f.truncate(keep);
    }
    f
}

const GTPU: u16 = prog::GTPU_PORT;

#[test]
fn reference_steers_like_the_runtime() {
    // steer::worker_of(steer::ue_hash(10.60.0.7), 4), written out.
    let k = u64::from(u32::from(Ipv4Addr::new(10, 60, 0, 7)));
    let h = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32;
    let w = ((u64::from(h) * 4) >> 32) as u32;
    let inner = ipv4([10, 60, 0, 7], [8, 8, 8, 8], 17, 0, &udp(1, 2, b"x"));
    let f = eth(
        [0; 6],
        [0; 6],
        None,
        0x0800,
        &ipv4(
            [192, 0, 2, 1],
            L4,
            17,
            0,
            &udp(1, GTPU, &gpdu_psc(1, &inner)),
        ),
    );
    let filter = Filter::new(true, vec![IpAddr::from(L4)], 4);
    assert_eq!(xdp_worker(&f, &filter), Some(w));
    // Not to a local address, or not GTP-U: the kernel's.
    let other = Filter::new(true, vec![IpAddr::from([10, 0, 0, 2])], 4);
    assert_eq!(xdp_worker(&f, &other), None);
    // IPv6 UE: by the upper 64 bits.
    let a6 = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6);
    let inner6 = ipv6(a6.octets(), L6, 17, &udp(1, 2, b"y"));
    let f6 = eth(
        [0; 6],
        [0; 6],
        Some(7),
        0x0800,
        &ipv4(
            [192, 0, 2, 1],
            L4,
            17,
            0,
            &udp(1, GTPU, &gpdu_psc(1, &inner6)),
        ),
    );
    let k6 = (u128::from(a6) >> 64) as u64;
    assert_eq!(xdp_worker(&f6, &filter), Some(worker_of_key(k6, 4)));
    // N6: by destination; ARP and multicast pass.
    let n6 = Filter::new(false, vec![IpAddr::from(L4)], 3);
    let d = eth(
        [0; 6],
        [0; 6],
        None,
        0x0800,
        &ipv4([8, 8, 8, 8], [10, 60, 0, 7], 17, 0, &udp(1, 2, b"z")),
    );
    assert_eq!(xdp_worker(&d, &n6), Some(worker_of_key(k, 3)));
    assert_eq!(
        xdp_worker(&eth([0; 6], [0; 6], None, 0x0806, &[0; 28]), &n6),
        None
    );
    let m = eth(
        [0; 6],
        [0; 6],
        None,
        0x0800,
        &ipv4([8, 8, 8, 8], [224, 0, 0, 1], 17, 0, &udp(1, 2, b"z")),
    );
    assert_eq!(xdp_worker(&m, &n6), None);
}

#[test]
fn ethernet_framing_helpers() {
    let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 17, 0, &udp(1, 2, b"ab"));
    let mut f = eth([0; 6], [0; 6], Some(5), 0x0800, &ip);
    f.extend_from_slice(&[0; 10]); // padding
    let off = ip_offset(&f).unwrap();
    assert_eq!(off, 18);
    assert_eq!(ip_trim(&f[off..]), &ip[..]);
    assert_eq!(ip_dst(&ip), Some(IpAddr::from([5, 6, 7, 8])));
    assert_eq!(
        ip_offset(&eth([0; 6], [0; 6], None, 0x0806, &[0; 28])),
        None
    );
}

#[test]
fn errors_are_clear() {
    let e = XdpInterface::open("no-such-if0", XdpConfig::new(Port::N3, 1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert!(capabilities("no-such-if0").is_err());
}

/// The tests that bind a socket to lo's queue 0 (the redirect target of the programs under
/// test) take turns.
static LO: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An XDP socket on lo's queue 0, in copy mode. The kernel frees an earlier test's socket
/// there a moment after it is closed: a busy queue is tried again, for up to 5 s.
fn bind_lo(umem: &Umem, lo: &Link) -> Xsk {
    let mut tries = 0;
    loop {
        match Xsk::bind(umem, lo.ifindex, 0, sys::XDP_COPY, 32) {
            Ok(x) => return x,
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
#[ignore = "needs root"]
fn program_agrees_with_reference() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    // The redirect succeeds only into a bound socket: bind one to lo's queue 0 (no program is
    // attached to lo, so its traffic is untouched).
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let lo = Link::by_name("lo").unwrap();
    let umem = Umem::new(32, 32, 2048).unwrap();
    let xsk = bind_lo(&umem, &lo);
    let two = Classes::default();
    let four = Classes::new(
        4,
        &[vec![5, 9], vec![1, 2], vec![3]],
        &[vec![46], vec![0, 10], vec![8, 12, 14]],
    )
    .unwrap();
    let filters = [
        Filter::new(true, vec![IpAddr::from(L4), IpAddr::from(L6)], 2),
        Filter::new(true, vec![IpAddr::from(L4), IpAddr::from([10, 0, 0, 9])], 3),
        Filter::new(false, vec![IpAddr::from(L4), IpAddr::from(L6)], 4),
        Filter::new(false, vec![], 1),
        Filter::new(true, vec![IpAddr::from(L4), IpAddr::from(L6)], 2)
            .with_classes(Some(two.clone())),
        Filter::new(true, vec![IpAddr::from(L4), IpAddr::from(L6)], 3)
            .with_classes(Some(four.clone())),
        Filter::new(false, vec![IpAddr::from(L4), IpAddr::from(L6)], 4).with_classes(Some(two)),
        Filter::new(false, vec![], 2).with_classes(Some(four)),
    ];
    let mut groups_seen = [[false; 4]; 2];
    let mut r = Rng::new(0x5eed_1234_abcd_0001);
    let (mut redirected, mut passed) = (0, 0);
    let mut seen = [false; 4];
    let mut out = vec![0u8; 4096];
    for filter in &filters {
        let mut ebpf = prog::object(filter, 1).unwrap();
        // One socket for every group: what lands where is read from the metadata.
        let mut map = XskMap::try_from(ebpf.map_mut(prog::XSK_MAP).unwrap()).unwrap();
        for g in 0..filter.groups() {
            map.set(g, xsk.fd.as_raw_fd(), 0).unwrap();
        }
        let prog = prog::load(&mut ebpf, prog::PROGRAM).unwrap();
        for _ in 0..1000 {
            let f = random_frame(&mut r);
            let run = crate::bpf::run(&*prog, &f, &mut out, 1, None).unwrap();
            let (ret, out) = (run.retval, &out[..run.out_len]);
            match xdp_worker(&f, filter) {
                None => {
                    assert_eq!(ret, 2, "XDP_PASS expected for {f:02x?} ({filter:?})");
                    assert_eq!(out, &f[..]);
                    passed += 1;
                }
                Some(w) => {
                    assert_eq!(ret, 4, "XDP_REDIRECT expected for {f:02x?} ({filter:?})");
                    assert_eq!(out.len(), f.len() + prog::META_LEN, "metadata");
                    assert_eq!(out[..4], prog::META_MAGIC.to_ne_bytes());
                    let g = xdp_group(&f, filter);
                    assert_eq!(
                        out[4..8],
                        (w | u32::from(g) << 24).to_ne_bytes(),
                        "worker and group of {f:02x?} ({filter:?})"
                    );
                    if filter.classes.is_some() {
                        groups_seen[usize::from(!filter.gtpu)][usize::from(g)] = true;
                    }
                    assert_eq!(out[8..], f[..]);
                    redirected += 1;
                    seen[w as usize] = true;
                }
            }
        }
    }
    println!("program_agrees_with_reference: {redirected} redirected, {passed} passed");
    assert!(redirected > 600 && passed > 600);
    assert!(seen.iter().all(|&s| s), "every worker seen");
    assert_eq!(groups_seen, [[true; 4]; 2], "every group seen, N3 and N6");
}

#[test]
#[ignore = "needs root"]
fn program_loads_for_every_filter_shape() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let many = |n: usize| -> Vec<IpAddr> {
        (0..n)
            .flat_map(|i| {
                let i = u8::try_from(i).unwrap();
                [
                    IpAddr::from([10, 0, 1, i]),
                    IpAddr::from([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]),
                ]
            })
            .collect()
    };
    for gtpu in [true, false] {
        for local in [
            vec![],
            vec![IpAddr::from(L4)],
            vec![IpAddr::from(L6)],
            vec![IpAddr::from(L4), IpAddr::from(L6)],
            many(prog::MAX_LOCAL),
        ] {
            let f = Filter::new(gtpu, local, 5);
            let mut ebpf = prog::object(&f, 4).unwrap();
            if let Err(e) = prog::load(&mut ebpf, prog::PROGRAM) {
                panic!("{f:?}: {e}");
            }
        }
        let f = Filter::new(gtpu, many(prog::MAX_LOCAL + 1), 5);
        let e = prog::object(&f, 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}

fn sh(args: &[&str]) -> String {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run ip");
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A veth pair: `a` in this namespace (the UPF's side), `b` in a namespace of its own (the
/// peer's). Removed on drop, also when the test fails.
struct Veth {
    ns: String,
    a: String,
    b: String,
    net: u8,
}

impl Veth {
    fn new(tag: &str) -> Veth {
        let id = std::process::id();
        let net = (id % 200) as u8 + 20;
        let v = Veth {
            ns: format!("upfx-{tag}-{id}"),
            a: format!("xa{tag}{}", id % 100_000),
            b: format!("xb{tag}{}", id % 100_000),
            net,
        };
        sh(&["ip", "netns", "add", &v.ns]);
        sh(&[
            "ip", "link", "add", &v.a, "type", "veth", "peer", "name", &v.b, "netns", &v.ns,
        ]);
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("10.213.{net}.1/24"),
            "dev",
            &v.a,
        ]);
        sh(&["ip", "link", "set", &v.a, "up"]);
        sh(&[
            "ip",
            "-n",
            &v.ns,
            "addr",
            "add",
            &format!("10.213.{net}.2/24"),
            "dev",
            &v.b,
        ]);
        sh(&["ip", "-n", &v.ns, "link", "set", &v.b, "up"]);
        sh(&["ip", "-n", &v.ns, "link", "set", "lo", "up"]);
        v
    }

    fn peer_mac(&self) -> [u8; 6] {
        let out = sh(&["ip", "-n", &self.ns, "-br", "link", "show", &self.b]);
        let f = out.split_whitespace().nth(2).unwrap_or("");
        crate::link::parse_mac(f).unwrap_or_else(|| panic!("peer MAC in {out:?}"))
    }

    fn ip(&self, host: u8) -> [u8; 4] {
        [10, 213, self.net, host]
    }

    /// An AF_PACKET socket on `b`, opened inside the namespace.
    fn peer_socket(&self) -> OwnedFd {
        let (ns, b) = (self.ns.clone(), self.b.clone());
        std::thread::spawn(move || {
            let nsf = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            // SAFETY: setns on this (short-lived) thread only; the fd is a namespace file.
            let r = unsafe { libc::setns(nsf.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
            let proto = u16::try_from(libc::ETH_P_ALL).unwrap().to_be();
            // SAFETY: plain socket call; we own the result.
            let fd = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    i32::from(proto),
                )
            };
            assert!(fd >= 0, "AF_PACKET: {}", io::Error::last_os_error());
            // SAFETY: fd is fresh and ours.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let name = std::ffi::CString::new(b).unwrap();
            // SAFETY: a NUL-terminated name.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
            assert!(ifindex > 0);
            // SAFETY: sockaddr_ll is plain data; zero is a valid start.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = u16::try_from(libc::AF_PACKET).unwrap();
            sll.sll_protocol = proto;
            sll.sll_ifindex = i32::try_from(ifindex).unwrap();
            // SAFETY: sll is a valid sockaddr_ll of the length passed.
            let r = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sll as *const libc::sockaddr_ll).cast(),
                    crate::sys::socklen_of::<libc::sockaddr_ll>(),
                )
            };
            assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
            fd
        })
        .join()
        .unwrap()
    }

    fn xdp_attached(&self) -> bool {
        let out = sh(&["ip", "link", "show", "dev", &self.a]);
        out.contains("prog/xdp") || out.contains(" xdp")
    }

    /// Whether the program is gone within a second of its link's last descriptor closing:
    /// the kernel may finish releasing the link after `close` returns (seen once in CI).
    fn xdp_detached(&self) -> bool {
        let end = Instant::now() + Duration::from_secs(1);
        loop {
            if !self.xdp_attached() {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.a]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

use std::os::fd::FromRawFd;

fn send_frame(fd: &OwnedFd, f: &[u8]) {
    // SAFETY: f is a live buffer of the length passed.
    let r = unsafe { libc::send(fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
    assert_eq!(
        usize::try_from(r).ok(),
        Some(f.len()),
        "send: {}",
        io::Error::last_os_error()
    );
}

/// Frames arriving on the peer's socket until `done` says so or `limit` passes.
fn recv_frames(fd: &OwnedFd, limit: Duration, mut done: impl FnMut(&[u8]) -> bool) -> bool {
    let end = Instant::now() + limit;
    let mut buf = [0u8; 2048];
    while Instant::now() < end {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } <= 0 {
            continue;
        }
        // SAFETY: buf is writable for its length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 && done(&buf[..usize::try_from(n).unwrap_or(0)]) {
            return true;
        }
    }
    false
}

/// Receives until `want` packets arrived or 3 s passed.
fn rx_until(io: &mut XskIo, pool: &mut Pool, want: usize) -> (Vec<Packet>, Vec<u32>) {
    let end = Instant::now() + Duration::from_secs(3);
    let (mut got, mut workers) = (Vec::new(), Vec::new());
    while got.len() < want && Instant::now() < end {
        let _ = crate::wait_readable(&[io.fd().unwrap()], Duration::from_millis(20));
        io.rx_batch(pool, &mut got, 64).unwrap();
        workers.extend_from_slice(io.last_workers());
    }
    (got, workers)
}

#[test]
#[ignore = "needs root"]
fn veth_n3_gtpu_rx_arp_and_tx() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let v = Veth::new("3");
    let peer = v.peer_socket();
    let pmac = v.peer_mac();
    let (local, remote) = (v.ip(1), v.ip(2));
    let caps = capabilities(&v.a).unwrap();
    println!("capabilities of {}: {caps:?}", v.a);
    let iface = XdpInterface::open(
        &v.a,
        XdpConfig {
            frames: 512,
            ..XdpConfig::new(Port::N3, 2)
        },
    )
    .unwrap();
    assert!(v.xdp_attached());
    let mac = iface.link().mac;
    let mut io = iface.socket(0).unwrap();
    println!("{}", io.describe());
    let mut pool = Pool::new(256);

    // 40 G-PDUs with a PDU Session Container, from 40 UEs; 5 plain UDP datagrams to our
    // address (not GTP-U: the kernel's); an ARP request (the kernel must answer it).
    let mut expect = std::collections::HashMap::new();
    for i in 0..40u8 {
        let ue = [10, 60, 1, i];
        let inner = ipv4(ue, [8, 8, 4, 4], 17, 0, &udp(1000, 53, &[i; 20]));
        let f = eth(
            mac,
            pmac,
            None,
            0x0800,
            &ipv4(
                remote,
                local,
                17,
                0,
                &udp(2152, GTPU, &gpdu_psc(0x100 + u32::from(i), &inner)),
            ),
        );
        expect.insert(i, worker_of_key(u64::from(u32::from_be_bytes(ue)), 2));
        send_frame(&peer, &f);
    }
    for i in 0..5u8 {
        send_frame(
            &peer,
            &eth(
                mac,
                pmac,
                None,
                0x0800,
                &ipv4(remote, local, 17, 0, &udp(1000, 9, &[i; 8])),
            ),
        );
    }
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
    arp.extend_from_slice(&pmac);
    arp.extend_from_slice(&remote);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&local);
    send_frame(&peer, &eth([0xff; 6], pmac, None, 0x0806, &arp));

    let (got, workers) = rx_until(&mut io, &mut pool, 45);
    assert_eq!(got.len(), 40, "only the G-PDUs reach the socket");
    let mut per_worker = [0; 2];
    for (p, w) in got.iter().zip(&workers) {
        assert_eq!(p.port(), Port::N3);
        let d = p.data();
        assert_eq!(
            d.len(),
            20 + 8 + 16 + 20 + 8 + 20,
            "Ethernet stripped, no padding"
        );
        assert_eq!(&d[16..20], &local);
        let ue_last = d[20 + 8 + 16 + 15];
        assert_eq!(Some(w), expect.get(&ue_last), "worker of UE .{ue_last}");
        per_worker[*w as usize] += 1;
    }
    assert!(per_worker[0] > 0 && per_worker[1] > 0, "{per_worker:?}");
    let arp_reply = recv_frames(&peer, Duration::from_secs(2), |f| {
        f.len() >= 42 && f[12..14] == [8, 6] && f[20..22] == [0, 2] && f[28..32] == local
    });
    assert!(
        arp_reply,
        "the kernel answered ARP with the program attached"
    );
    assert_eq!(io.stats().rx_packets, 40);

    // TX: to the peer (neighbour known) and to an unresolved address.
    sh(&[
        "ip",
        "neigh",
        "replace",
        &Ipv4Addr::from(remote).to_string(),
        "lladdr",
        &pmac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        "dev",
        &v.a,
        "nud",
        "permanent",
    ]);
    let mut batch = Vec::new();
    for i in 0..100u8 {
        let payload = [b"upf-xdp-tx".as_slice(), &[i]].concat();
        batch.push(
            Packet::from_bytes(
                Port::N3,
                &ipv4(local, remote, 17, 0, &udp(2152, 7777, &payload)),
            )
            .unwrap(),
        );
    }
    batch.push(
        Packet::from_bytes(
            Port::N3,
            &ipv4(local, v.ip(99), 17, 0, &udp(2152, 7777, b"nobody")),
        )
        .unwrap(),
    );
    let sent = io.tx_batch(&mut batch, &mut pool).unwrap();
    assert_eq!(sent, 100);
    io.flush().unwrap();
    assert_eq!(io.stats().tx_dropped, 1);
    let mut seen = [false; 100];
    recv_frames(&peer, Duration::from_secs(3), |f| {
        if f.len() >= 14 + 20 + 8 + 11
            && f[0..6] == pmac
            && f[6..12] == mac
            && f[12..14] == [8, 0]
            && &f[42..52] == b"upf-xdp-tx"
        {
            seen[usize::from(f[52])] = true;
        }
        seen.iter().all(|&s| s)
    });
    let arrived = seen.iter().filter(|&&s| s).count();
    assert_eq!(arrived, 100, "frames sent by AF_XDP seen at the peer");

    drop(io);
    drop(iface);
    assert!(v.xdp_detached(), "program detached with the last socket");
}

/// Queue groups: the high QFI's G-PDUs arrive on group 0's socket, the others on group 1's,
/// each in order, and each socket's descriptor says when its ring has packets.
#[test]
#[ignore = "needs root"]
fn veth_queue_groups_have_a_socket_each() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let v = Veth::new("g");
    let peer = v.peer_socket();
    let pmac = v.peer_mac();
    let (local, remote) = (v.ip(1), v.ip(2));
    let iface = XdpInterface::open(
        &v.a,
        XdpConfig {
            frames: 512,
            classes: Some(Classes::default()),
            ..XdpConfig::new(Port::N3, 1)
        },
    )
    .unwrap();
    let mac = iface.link().mac;
    let mut io = iface.socket(0).unwrap();
    assert_eq!(io.rx_groups(), 2);
    assert!(
        io.describe().contains("2 queue groups"),
        "{}",
        io.describe()
    );
    let mut pool = Pool::new(256);
    // 60 G-PDUs, every third of QFI 1 (high), the rest QFI 9; the inner UDP payload numbers
    // them.
    for i in 0..60u8 {
        let qfi = if i % 3 == 0 { 1 } else { 9 };
        let inner = ipv4([10, 61, 0, 1], [8, 8, 4, 4], 17, 0, &udp(1000, 53, &[i; 4]));
        let outer = ipv4(
            remote,
            local,
            17,
            0,
            &udp(2152, GTPU, &gpdu_qfi(7, qfi, &inner)),
        );
        send_frame(&peer, &eth(mac, pmac, None, 0x0800, &outer));
    }
    let end = Instant::now() + Duration::from_secs(3);
    let mut got: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    while got[0].len() + got[1].len() < 60 && Instant::now() < end {
        for (g, seq) in got.iter_mut().enumerate() {
            let mut b = Vec::new();
            if crate::wait_readable(&[io.group_fd(g).unwrap()], Duration::from_millis(5)).unwrap() {
                io.rx_group(g, &mut pool, &mut b, 64).unwrap();
            }
            // The last octet of the inner packet: its number.
            seq.extend(b.iter().map(|p| *p.data().last().unwrap()));
            pool.put_all(b.drain(..));
        }
    }
    let high: Vec<u8> = (0..60).filter(|i| i % 3 == 0).collect();
    let low: Vec<u8> = (0..60).filter(|i| i % 3 != 0).collect();
    assert_eq!(got, [high, low], "per group, in order");
    io.refresh_stats();
    assert_eq!(io.stats().rx_kernel_dropped, 0);
}

#[test]
#[ignore = "needs root"]
fn veth_n6_plain_ip_rx() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let v = Veth::new("6");
    let peer = v.peer_socket();
    let pmac = v.peer_mac();
    let local = v.ip(1);
    let iface = XdpInterface::open(
        &v.a,
        XdpConfig {
            frames: 256,
            ..XdpConfig::new(Port::N6, 3)
        },
    )
    .unwrap();
    let mac = iface.link().mac;
    let mut io = iface.socket(0).unwrap();
    let mut pool = Pool::new(256);
    let mut want = Vec::new();
    for i in 0..30u8 {
        let ue = [198, 51, 100, i];
        send_frame(
            &peer,
            &eth(
                mac,
                pmac,
                None,
                0x0800,
                &ipv4([203, 0, 113, 9], ue, 17, 0, &udp(80, 4000, &[i; 5])),
            ),
        );
        want.push(worker_of_key(u64::from(u32::from_be_bytes(ue)), 3));
        let ue6 = Ipv6Addr::new(0x2001, 0xdb8, 0x77, u16::from(i), 0, 0, 0, 1);
        send_frame(
            &peer,
            &eth(
                mac,
                pmac,
                Some(42),
                0x86dd,
                &ipv6(L6, ue6.octets(), 17, &udp(80, 4000, &[i; 5])),
            ),
        );
        want.push(worker_of_key((u128::from(ue6) >> 64) as u64, 3));
    }
    // Addressed to the host: the kernel's.
    send_frame(
        &peer,
        &eth(
            mac,
            pmac,
            None,
            0x0800,
            &ipv4(v.ip(2), local, 17, 0, &udp(80, 9, b"host")),
        ),
    );
    let (got, workers) = rx_until(&mut io, &mut pool, 61);
    assert_eq!(got.len(), 60);
    assert_eq!(workers, want);
    for p in &got {
        assert_eq!(p.port(), Port::N6);
        assert!(matches!(p.data()[0] >> 4, 4 | 6));
    }
    drop(io);
    drop(iface);
    assert!(v.xdp_detached());
}

/// Rough rates on a veth pair (2 vCPUs shared by sender and receiver; noisy):
/// `cargo test --release -p upf-io veth_rates -- --ignored --nocapture`.
#[test]
#[ignore]
fn veth_rates() {
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let v = Veth::new("r");
    let peer = v.peer_socket();
    let pmac = v.peer_mac();
    let (local, remote) = (v.ip(1), v.ip(2));
    let iface = XdpInterface::open(&v.a, XdpConfig::new(Port::N3, 2)).unwrap();
    let mac = iface.link().mac;
    let mut io = iface.socket(0).unwrap();
    let mut pool = Pool::new(1024);
    sh(&[
        "ip",
        "neigh",
        "replace",
        &Ipv4Addr::from(remote).to_string(),
        "lladdr",
        &pmac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        "dev",
        &v.a,
        "nud",
        "permanent",
    ]);

    // TX: 64-packet batches for 1 s.
    let pkt = ipv4(local, remote, 17, 0, &udp(2152, 7777, &[0; 64]));
    let t = Instant::now();
    let mut batch = Vec::with_capacity(64);
    while t.elapsed() < Duration::from_secs(1) {
        for _ in 0..64 {
            let mut p = pool.get(Port::N3);
            p.load(Port::N3, &pkt);
            batch.push(p);
        }
        io.tx_batch(&mut batch, &mut pool).unwrap();
    }
    let s = io.stats();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "AF_XDP TX: {:.0} kpps sent, {} dropped (ring full) in {secs:.2} s",
        s.tx_packets as f64 / secs / 1e3,
        s.tx_dropped
    );

    // RX: the peer sends G-PDUs as fast as AF_PACKET goes, for 1 s.
    let inner = ipv4([10, 60, 0, 1], [8, 8, 8, 8], 17, 0, &udp(1, 2, &[0; 36]));
    let frame = eth(
        mac,
        pmac,
        None,
        0x0800,
        &ipv4(remote, local, 17, 0, &udp(2152, GTPU, &gpdu_psc(7, &inner))),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: frame is a live buffer of the length passed.
            if unsafe { libc::send(peer.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) } > 0 {
                n += 1;
            }
        }
        n
    });
    let t = Instant::now();
    let mut got = Vec::with_capacity(64);
    let mut rx = 0u64;
    while t.elapsed() < Duration::from_secs(1) {
        rx += io.rx_batch(&mut pool, &mut got, 64).unwrap() as u64;
        pool.put_all(got.drain(..));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "AF_XDP RX: {:.0} kpps received of {:.0} kpps sent by AF_PACKET; kernel: {:?}",
        rx as f64 / secs / 1e3,
        sent as f64 / secs / 1e3,
        io.kernel_stats().unwrap()
    );
}

/// The filters of the spread tests: N3 (GTP-U to the fanout tests' 192.168.1.2) and N6.
fn spread_filters(n: u32) -> [Filter; 2] {
    let ues = crate::fanout::tests::spread_ues();
    [
        Filter::new(true, vec![IpAddr::from([192, 168, 1, 2])], n).with_spread(ues.clone()),
        Filter::new(false, vec![], n).with_spread(ues),
    ]
}

#[test]
fn reference_spreads_flows_like_the_fanout_program() {
    use crate::fanout::tests::{flow_frame, random_flow};
    use crate::fanout::{fanout_worker_spread, Ingress};
    let n = 4;
    let [n3, n6] = spread_filters(n);
    let spread = n3.spread.clone();
    let mut r = Rng::new(21);
    let mut seen = [0usize; 4];
    for _ in 0..2000 {
        let flow = random_flow(&mut r);
        let frag = flow.ue.is_ipv4() && r.chance(10);
        let mut workers = Vec::new();
        for up in [true, false, true] {
            let (port, f) = flow_frame(&flow, up, frag, &mut r);
            let filter = if Ingress::of(port) == Ingress::Gtpu {
                &n3
            } else {
                &n6
            };
            let Some(w) = xdp_worker(&f, filter) else {
                // Only neighbour discovery (ICMPv6 133-137 to the UE) is the kernel's.
                assert!(!up && flow.proto == 58 && (133..=137).contains(&(flow.peer_port >> 8)));
                continue;
            };
            assert_eq!(
                w as usize,
                fanout_worker_spread(port, &f, n as usize, &spread)
            );
            workers.push(w);
        }
        assert!(
            workers.windows(2).all(|w| w[0] == w[1]),
            "{flow:?}: {workers:?}"
        );
        seen[workers[0] as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c > 300), "{seen:?}");
}

#[test]
#[ignore = "needs root"]
fn program_agrees_with_reference_on_spread_ues() {
    use crate::fanout::tests::spread_corpus;
    use crate::fanout::Ingress;
    assert!(upf_netns::is_root(), "needs root (BPF and AF_XDP)");
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let lo = Link::by_name("lo").unwrap();
    let umem = Umem::new(32, 32, 2048).unwrap();
    let xsk = bind_lo(&umem, &lo);
    let frames = spread_corpus(600);
    let mut out = vec![0u8; 4096];
    let (mut redirected, mut passed, mut refused) = (0, 0, 0);
    for n in [1, 3, 4] {
        let [n3, n6] = spread_filters(n);
        for filter in [&n3, &n6] {
            let mut ebpf = prog::object(filter, 1).unwrap();
            XskMap::try_from(ebpf.map_mut(prog::XSK_MAP).unwrap())
                .unwrap()
                .set(0, xsk.fd.as_raw_fd(), 0)
                .unwrap();
            let prog = prog::load(&mut ebpf, prog::PROGRAM).unwrap();
            for (port, f) in &frames {
                if (Ingress::of(*port) == Ingress::Gtpu) != filter.gtpu {
                    continue;
                }
                let run = match crate::bpf::run(&*prog, f, &mut out, 1, None) {
                    Ok(run) => run,
                    // Newer kernels refuse to test-run frames shorter than their headers.
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                        refused += 1;
                        continue;
                    }
                    Err(e) => panic!("BPF_PROG_TEST_RUN: {e}"),
                };
                match xdp_worker(f, filter) {
                    None => {
                        assert_eq!(run.retval, 2, "XDP_PASS expected for {f:02x?}");
                        passed += 1;
                    }
                    Some(w) => {
                        assert_eq!(run.retval, 4, "XDP_REDIRECT expected for {f:02x?}");
                        assert_eq!(out[4..8], w.to_ne_bytes(), "worker of {f:02x?} (n={n})");
                        redirected += 1;
                    }
                }
            }
        }
    }
    println!("spread: {redirected} redirected, {passed} passed, {refused} refused");
    assert!(redirected > 5000 && refused < redirected / 10);
}
