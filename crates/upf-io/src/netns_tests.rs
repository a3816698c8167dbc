//! Root tests on a veth pair between two network namespaces this test process creates (names
//! unique per process and test, deleted by a Drop guard even when a test fails). Each test
//! is `#[ignore = "needs root"]` and fails when run without it.

use crate::af_packet::{AfPacketConfig, AfPacketIo, Fanout, FanoutMode};
use crate::fanout::tests::{eth, gpdu_qfi, gtpu, inner_packet, ipv4, ipv6, udp, Rng};
use crate::link::{Link, NextHops};
use crate::{PacketIo, Pool};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use upf_netns::Netns;
use upf_packet::classes::Classes;
use upf_packet::{Packet, Port};

/// Two namespaces joined by a veth pair: `a_if` in `a`, `b_if` in `b`. Dropping it deletes
/// the namespaces, and with them the pair.
struct Veth {
    a: Netns,
    b: Netns,
    a_if: String,
    b_if: String,
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

impl Veth {
    fn new() -> Veth {
        let k = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}x{k}", std::process::id());
        let v = Veth {
            a: Netns::unique("upfio-a").expect("netns"),
            b: Netns::unique("upfio-b").expect("netns"),
            a_if: format!("ua{id}"),
            b_if: format!("ub{id}"),
        };
        upf_netns::veth_pair((v.a.name(), &v.a_if, ""), (v.b.name(), &v.b_if, ""))
            .expect("veth pair");
        v
    }

    /// 10.200.0.1/24 and fd00:200::1/64 on `a_if`, .2 and ::2 on `b_if`, and routes in `a` to
    /// 10.201.0.0/24 and fd01:201::/64 via `b`.
    fn addresses(&self) {
        let (a, b) = (&self.a, &self.b);
        for (ns, args) in [
            (a, ["addr", "add", "10.200.0.1/24", "dev", &self.a_if, ""]),
            (b, ["addr", "add", "10.200.0.2/24", "dev", &self.b_if, ""]),
            (
                a,
                ["addr", "add", "fd00:200::1/64", "dev", &self.a_if, "nodad"],
            ),
            (
                b,
                ["addr", "add", "fd00:200::2/64", "dev", &self.b_if, "nodad"],
            ),
            (
                a,
                ["route", "add", "10.201.0.0/24", "via", "10.200.0.2", ""],
            ),
            (
                a,
                ["route", "add", "fd01:201::/64", "via", "fd00:200::2", ""],
            ),
        ] {
            let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
            ns.ip(&args).unwrap();
        }
    }
}

/// Runs `f` on a thread inside `ns` (sockets made there stay there).
fn in_ns<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> T {
    ns.run(f).expect("setns")
}

/// A plain AF_PACKET socket on the peer's end.
struct RawSock {
    fd: OwnedFd,
}

impl RawSock {
    fn open(dev: &str) -> RawSock {
        let link = Link::by_name(dev).unwrap();
        // SAFETY: plain socket(2), checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                i32::from(0x0003u16.to_be()),
            )
        };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed sockaddr_ll is valid; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = u16::try_from(libc::AF_PACKET).unwrap();
        sll.sll_protocol = 0x0003u16.to_be();
        sll.sll_ifindex = i32::try_from(link.ifindex).unwrap();
        // SAFETY: valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                crate::sys::socklen_of::<libc::sockaddr_ll>(),
            )
        };
        assert_eq!(r, 0);
        RawSock { fd }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: frame is valid for reads of its length.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(
            usize::try_from(r).ok(),
            Some(frame.len()),
            "{}",
            std::io::Error::last_os_error()
        );
    }

    /// Frames received within `wait` (until `done` says so).
    fn recv_until(&self, wait: Duration, mut done: impl FnMut(&[u8]) -> bool) -> bool {
        let t = Instant::now();
        let mut buf = [0u8; 2048];
        while t.elapsed() < wait {
            // SAFETY: buf is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let Some(n) = usize::try_from(n).ok().filter(|&n| n > 0) else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            if done(&buf[..n]) {
                return true;
            }
        }
        false
    }
}

fn small(dev: &str, port: Port) -> AfPacketConfig {
    AfPacketConfig {
        block_size: 64 * 1024,
        block_count: 4,
        ..AfPacketConfig::new(dev, port)
    }
}

/// Receives from `io` until `want` packets matched `keep` or 3 s passed.
fn collect(
    io: &mut AfPacketIo,
    pool: &mut Pool,
    want: usize,
    keep: impl Fn(&[u8]) -> bool,
) -> Vec<Packet> {
    let t = Instant::now();
    let mut got = Vec::new();
    let mut b = Vec::new();
    while got.len() < want && t.elapsed() < Duration::from_secs(3) {
        io.rx_batch(pool, &mut b, 64).unwrap();
        if b.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
        for p in b.drain(..) {
            if keep(p.data()) {
                got.push(p);
            }
        }
    }
    got
}

const MARK: &[u8] = b"upf-io-test";

fn marked(d: &[u8]) -> bool {
    d.windows(MARK.len()).any(|w| w == MARK)
}

#[test]
#[ignore = "needs root"]
fn rx_strips_ethernet_and_discards_non_ip() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    let peer = in_ns(&v.b, || RawSock::open(&v.b_if));
    let (mut io, a_mac) = in_ns(&v.a, || {
        let io = AfPacketIo::open(small(&v.a_if, Port::N6)).unwrap();
        (io, Link::by_name(&v.a_if).unwrap().mac)
    });
    assert!(io.describe().contains("AF_PACKET"), "{}", io.describe());
    let with_mac = |mut f: Vec<u8>, dst: [u8; 6]| {
        f[..6].copy_from_slice(&dst);
        f
    };
    let mut sent = Vec::new();
    for i in 0..20u8 {
        let mut pl = MARK.to_vec();
        pl.push(i);
        let ip = ipv4([10, 0, 0, i], [10, 1, 0, 1], 17, &udp(1000, 2000, &pl));
        let mut f = eth(0x0800, i == 5);
        f.extend_from_slice(&ip);
        if i == 7 {
            f.extend_from_slice(&[0; 30]); // padding after the IP packet
        }
        peer.send(&with_mac(f, a_mac));
        sent.push(ip);
    }
    let ip6 = ipv6([0xfd; 16], [0xfe; 16], 17, &udp(1, 2, MARK));
    let mut f = eth(0x86dd, false);
    f.extend_from_slice(&ip6);
    peer.send(&with_mac(f, a_mac));
    sent.push(ip6);
    // Not IP (ARP), and IP for another host: discarded.
    let mut arp = eth(0x0806, false);
    arp.extend_from_slice(&[0; 28]);
    peer.send(&with_mac(arp, [0xff; 6]));
    let mut other = eth(0x0800, false);
    other.extend_from_slice(&sent[0]);
    peer.send(&with_mac(other, [2, 0, 0, 0, 0, 0x99]));

    let mut pool = Pool::new(64);
    let got = collect(&mut io, &mut pool, sent.len(), marked);
    assert_eq!(got.len(), sent.len(), "received {got:?}");
    for (p, want) in got.iter().zip(&sent) {
        assert_eq!(p.data(), &want[..]);
        assert_eq!(p.port(), Port::N6);
        assert_eq!(p.start(), upf_packet::HEADROOM);
    }
    // The two discarded frames may sit in a ring block not yet handed over when the marked
    // ones were all read (a loaded machine): read on until they are counted.
    let t = Instant::now();
    while io.stats().rx_discarded < 2 && t.elapsed() < Duration::from_secs(2) {
        let mut b = Vec::new();
        io.rx_batch(&mut pool, &mut b, 64).unwrap();
        pool.put_all(b.drain(..));
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = io.stats();
    assert!(s.rx_discarded >= 2, "{s:?}");
    assert!(s.rx_packets >= sent.len() as u64);
    assert_eq!(io.ring_drops(), 0);
}

#[test]
#[ignore = "needs root"]
fn tx_resolves_next_hops_through_the_kernel() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    v.addresses();
    let peer = in_ns(&v.b, || RawSock::open(&v.b_if));
    let b_mac = in_ns(&v.b, || Link::by_name(&v.b_if).unwrap().mac);
    let mut io = in_ns(&v.a, || AfPacketIo::open(small(&v.a_if, Port::N6)).unwrap());
    let a_mac = io.next_hops().link().mac;
    let mut pool = Pool::new(64);
    let cases: [(&str, &str); 4] = [
        ("10.200.0.1", "10.200.0.2"),   // on-link
        ("10.200.0.1", "10.201.0.7"),   // via 10.200.0.2
        ("fd00:200::1", "fd00:200::2"), // on-link
        ("fd00:200::1", "fd01:201::7"), // via fd00:200::2
    ];
    for (i, (src, dst)) in cases.iter().enumerate() {
        let (src, dst): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut pl = MARK.to_vec();
        pl.push(u8::try_from(i).unwrap());
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => ipv4(s.octets(), d.octets(), 17, &udp(9, 9, &pl)),
            (IpAddr::V6(s), IpAddr::V6(d)) => ipv6(s.octets(), d.octets(), 17, &udp(9, 9, &pl)),
            _ => unreachable!(),
        };
        let before = io.stats();
        let mut ok = false;
        let mut tries = 0;
        // The first sends are dropped while the kernel resolves the next hop.
        while !ok && tries < 100 {
            tries += 1;
            let mut b = vec![Packet::from_bytes(Port::N6, &ip).unwrap()];
            io.tx_batch(&mut b, &mut pool).unwrap();
            assert!(b.is_empty());
            ok = peer.recv_until(Duration::from_millis(20), |f| {
                if f.get(14..) != Some(&ip[..]) {
                    return false;
                }
                assert_eq!(&f[..6], &b_mac, "destination MAC of {dst}");
                assert_eq!(&f[6..12], &a_mac);
                let et = if dst.is_ipv4() { [8, 0] } else { [0x86, 0xdd] };
                assert_eq!(&f[12..14], &et);
                true
            });
        }
        assert!(ok, "{dst}: nothing arrived after {tries} sends");
        let s = io.stats();
        assert_eq!(
            (s.tx_packets - before.tx_packets) + (s.tx_dropped - before.tx_dropped),
            tries
        );
        assert!(s.tx_packets > before.tx_packets);
    }
    // Once resolved, a send goes out at once (cache).
    let ip = ipv4([10, 200, 0, 1], [10, 200, 0, 2], 17, &udp(9, 9, MARK));
    let mut b = vec![Packet::from_bytes(Port::N6, &ip).unwrap()];
    assert_eq!(io.tx_batch(&mut b, &mut pool).unwrap(), 1);
    // A next hop nobody answers for stays unresolved (and is not asked every packet).
    let mut hops = in_ns(&v.a, || NextHops::new(Link::by_name(&v.a_if).unwrap()));
    let t = Instant::now();
    let gone: IpAddr = "10.200.0.99".parse().unwrap();
    for _ in 0..1000 {
        assert_eq!(hops.mac_for(gone, Instant::now()), None);
    }
    assert!(hops.kicks >= 1 && hops.kicks < 100, "{}", hops.kicks);
    assert!(t.elapsed() < Duration::from_secs(2));
    // No route out of this interface.
    assert_eq!(
        hops.mac_for("192.0.2.1".parse().unwrap(), Instant::now()),
        None
    );
}

/// Two N3 workers' AF_PACKET queues on `v.a` in one fanout group (its id unique by `salt`),
/// joined in worker order (with `classes`, each opens its groups' sockets in group order),
/// and the interface's MAC.
fn two_workers(v: &Veth, salt: u16, classes: Option<Classes>) -> (AfPacketIo, AfPacketIo, [u8; 6]) {
    let group = u16::try_from(std::process::id() & 0x7fff).unwrap()
        ^ salt
        ^ u16::try_from(SEQ.load(Ordering::Relaxed) & 0xfff).unwrap();
    in_ns(&v.a, || {
        let open = |worker| {
            AfPacketIo::open(AfPacketConfig {
                fanout: Some(Fanout {
                    group,
                    worker,
                    workers: 2,
                }),
                classes: classes.clone(),
                ..small(&v.a_if, Port::N3)
            })
            .unwrap()
        };
        let w0 = open(0);
        let w1 = open(1);
        (w0, w1, Link::by_name(&v.a_if).unwrap().mac)
    })
}

#[test]
#[ignore = "needs root"]
fn fanout_pins_ues_to_their_worker() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    let peer = in_ns(&v.b, || RawSock::open(&v.b_if));
    let (mut w0, mut w1, a_mac) = two_workers(&v, 0x4000, None);
    assert_eq!(*w0.fanout_mode(), FanoutMode::Ebpf, "{}", w0.describe());
    assert!(w1.describe().contains("eBPF"), "{}", w1.describe());
    let mut rng = Rng::new(42);
    let mut ues = Vec::new();
    for i in 0..96u32 {
        let ue: IpAddr = if i % 4 == 3 {
            format!("2001:db8:{:x}:{:x}::1", i, i * 7).parse().unwrap()
        } else {
            format!("10.45.{}.{}", i / 7, i * 3 % 256).parse().unwrap()
        };
        let exts: Vec<u8> = if i % 2 == 0 { vec![1] } else { vec![] };
        let g = gtpu(0x1000 + i, 0, &exts, &inner_packet(ue, &mut rng));
        let mut f = eth(0x0800, false);
        f[..6].copy_from_slice(&a_mac);
        f.extend_from_slice(&ipv4(
            [192, 168, 9, 2],
            [192, 168, 9, 1],
            17,
            &udp(2152, 2152, &g),
        ));
        peer.send(&f);
        ues.push(ue);
    }
    let teid_of = |d: &[u8]| -> Option<u32> {
        // Outer IPv4 (20) + UDP (8): TEID at 4..8 of the GTP-U header.
        let udp_ok = d.len() > 36 && d[9] == 17 && d[22..24] == [0x08, 0x68];
        udp_ok.then(|| u32::from_be_bytes([d[32], d[33], d[34], d[35]]) - 0x1000)
    };
    let mut pool = Pool::new(256);
    let t = Instant::now();
    let mut seen = vec![None; ues.len()];
    let mut b = Vec::new();
    while seen.iter().any(Option::is_none) && t.elapsed() < Duration::from_secs(3) {
        for (w, io) in [&mut w0, &mut w1].into_iter().enumerate() {
            io.rx_batch(&mut pool, &mut b, 64).unwrap();
            for p in b.drain(..) {
                if let Some(i) = teid_of(p.data()) {
                    if let Some(s) = seen.get_mut(i as usize) {
                        assert!(s.is_none(), "UE {i} twice");
                        *s = Some(w);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut per = [0; 2];
    for (ue, w) in ues.iter().zip(&seen) {
        let want = upf_packet::steer::worker_of(upf_packet::steer::ue_hash(*ue), 2);
        assert_eq!(*w, Some(want), "UE {ue}");
        per[want] += 1;
    }
    assert!(per[0] > 10 && per[1] > 10, "{per:?}");
}

/// Queue groups: 2 workers × 2 groups, so 4 members in one fanout group; G-PDUs of QFI 1
/// (high) and QFI 9 (low) from several UEs each arrive on their UE's worker's socket of
/// their group, each group in order, and a worker's rx_batch reads its groups highest first.
#[test]
#[ignore = "needs root"]
fn fanout_queue_groups_have_a_socket_each() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    let peer = in_ns(&v.b, || RawSock::open(&v.b_if));
    let (mut w0, mut w1, a_mac) = two_workers(&v, 0x2000, Some(Classes::default()));
    for io in [&w0, &w1] {
        assert_eq!(*io.fanout_mode(), FanoutMode::Ebpf, "{}", io.describe());
        assert_eq!(io.rx_groups(), 2);
        assert!(
            io.describe().contains("2 queue groups"),
            "{}",
            io.describe()
        );
        assert!(io.group_fd(1).is_some() && io.group_fd(2).is_none());
    }
    // The memory of one ring, split: 2 rings of 4 blocks of 32 KiB.
    assert!(w0.describe().contains("4x32 KiB"), "{}", w0.describe());
    let mut rng = Rng::new(43);
    let ues: Vec<IpAddr> = (0..12u32)
        .map(|i| {
            if i % 4 == 3 {
                format!("2001:db8:{i:x}::1").parse().unwrap()
            } else {
                format!("10.46.{i}.{}", i * 5).parse().unwrap()
            }
        })
        .collect();
    // Where each packet must land: (worker, group) → its numbers, in order.
    let mut want = vec![vec![Vec::new(); 2]; 2];
    for i in 0..120u32 {
        let ue = ues[usize::try_from(i).unwrap() % ues.len()];
        let high = i % 3 == 0;
        let g = gpdu_qfi(
            0x1000 + i,
            if high { 1 } else { 9 },
            &inner_packet(ue, &mut rng),
        );
        let mut f = eth(0x0800, false);
        f[..6].copy_from_slice(&a_mac);
        f.extend_from_slice(&ipv4(
            [192, 168, 9, 2],
            [192, 168, 9, 1],
            17,
            &udp(2152, 2152, &g),
        ));
        peer.send(&f);
        let w = upf_packet::steer::worker_of(upf_packet::steer::ue_hash(ue), 2);
        want[w][usize::from(!high)].push(i);
    }
    let teid_of = |d: &[u8]| -> Option<u32> {
        let udp_ok = d.len() > 36 && d[9] == 17 && d[22..24] == [0x08, 0x68];
        udp_ok.then(|| u32::from_be_bytes([d[32], d[33], d[34], d[35]]) - 0x1000)
    };
    let mut pool = Pool::new(256);
    let t = Instant::now();
    let mut got = vec![vec![Vec::new(); 2]; 2];
    let mut b = Vec::new();
    let total = |got: &Vec<Vec<Vec<u32>>>| got.iter().flatten().map(Vec::len).sum::<usize>();
    while total(&got) < 120 && t.elapsed() < Duration::from_secs(3) {
        for (w, io) in [&mut w0, &mut w1].into_iter().enumerate() {
            for (g, seq) in got[w].iter_mut().enumerate() {
                io.rx_group(g, &mut pool, &mut b, 64).unwrap();
                seq.extend(b.iter().filter_map(|p| teid_of(p.data())));
                pool.put_all(b.drain(..));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(got, want, "per worker and group, in order");
    assert!(want.iter().flatten().all(|s| !s.is_empty()), "{want:?}");
    assert_eq!(w0.ring_drops() + w1.ring_drops(), 0);
    // rx_batch: every group, the highest first. Two low packets then two high ones of one
    // UE; once both rings have a block for user space, a call reads group 0's before group
    // 1's. (A stray frame, such as the peer's IPv6 router solicitation, can make a ring
    // readable before the test's packets are in it: rounds until one call holds both.)
    let w = upf_packet::steer::worker_of(upf_packet::steer::ue_hash(ues[0]), 2);
    let io = if w == 0 { &mut w0 } else { &mut w1 };
    let mut mixed = false;
    for round in 0..10u32 {
        let first = 200 + round * 4;
        for i in first..first + 4 {
            let qfi = if i < first + 2 { 9 } else { 1 };
            let g = gpdu_qfi(0x1000 + i, qfi, &inner_packet(ues[0], &mut rng));
            let mut f = eth(0x0800, false);
            f[..6].copy_from_slice(&a_mac);
            f.extend_from_slice(&ipv4(
                [192, 168, 9, 2],
                [192, 168, 9, 1],
                17,
                &udp(2152, 2152, &g),
            ));
            peer.send(&f);
        }
        let t = Instant::now();
        for g in 0..2 {
            let fd = io.group_fd(g).unwrap();
            while !crate::wait_readable(&[fd], Duration::from_millis(50)).unwrap() {
                assert!(
                    t.elapsed() < Duration::from_secs(3),
                    "group {g} never readable"
                );
            }
        }
        let mut calls = Vec::new();
        while calls.iter().map(Vec::len).sum::<usize>() < 4 && t.elapsed() < Duration::from_secs(3)
        {
            io.rx_batch(&mut pool, &mut b, 64).unwrap();
            let seq: Vec<u32> = b.iter().filter_map(|p| teid_of(p.data())).collect();
            pool.put_all(b.drain(..));
            if !seq.is_empty() {
                calls.push(seq);
            }
        }
        let high = |i: &u32| *i >= first + 2;
        for c in &calls {
            assert!(c.is_sorted_by_key(|i| !high(i)), "group 0 first: {calls:?}");
            mixed |= c.iter().any(high) && !c.iter().all(high);
        }
        assert_eq!(calls.concat().len(), 4, "{calls:?}");
        if mixed {
            break;
        }
    }
    assert!(mixed, "no read found both groups' packets waiting");
}

/// Rough rates on this machine (not a benchmark harness): `cargo test -p upf-io --release --
/// --ignored --nocapture measure_rates`. Receive is bounded by the generator (a plain AF_PACKET
/// socket sending 64-frame sendmmsg batches on the other CPU); transmit is sendmmsg of
/// 256-packet batches to a resolved neighbour, the peer's kernel dropping them.
#[test]
#[ignore]
fn measure_rates() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    v.addresses();
    let gen = in_ns(&v.b, || RawSock::open(&v.b_if));
    let mut io = in_ns(&v.a, || {
        AfPacketIo::open(AfPacketConfig::new(&v.a_if, Port::N6)).unwrap()
    });
    let a_mac = io.next_hops().link().mac;
    let ip = ipv4([10, 200, 0, 2], [10, 200, 0, 1], 17, &udp(9, 9, &[0; 18]));
    let mut frame = eth(0x0800, false);
    frame[..6].copy_from_slice(&a_mac);
    frame.extend_from_slice(&ip);
    let secs = 2.0;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sent = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut iov = vec![
                libc::iovec {
                    iov_base: frame.as_ptr() as *mut _,
                    iov_len: frame.len()
                };
                64
            ];
            // SAFETY: zeroed mmsghdr is valid; fields set below.
            let mut msgs: Vec<libc::mmsghdr> =
                (0..64).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: msgs point at iov, which points at frame; all outlive the call.
                let r = unsafe { libc::sendmmsg(gen.fd.as_raw_fd(), msgs.as_mut_ptr(), 64, 0) };
                n += u64::try_from(r).unwrap_or(0);
            }
            n
        });
        let mut pool = Pool::new(1024);
        let mut b = Vec::with_capacity(256);
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < secs {
            io.rx_batch(&mut pool, &mut b, 256).unwrap();
            pool.put_all(b.drain(..));
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap()
    });
    let s = io.stats();
    eprintln!(
        "rx: {:.3} Mpps received, generator sent {:.3} Mpps, ring drops {}",
        s.rx_packets as f64 / secs / 1e6,
        sent as f64 / secs / 1e6,
        io.ring_drops()
    );
    // TX to the resolved peer.
    let out = ipv4([10, 200, 0, 1], [10, 200, 0, 2], 17, &udp(9, 9, &[0; 18]));
    let mut pool = Pool::new(1024);
    for _ in 0..100 {
        let mut b = vec![Packet::from_bytes(Port::N6, &out).unwrap()];
        if io.tx_batch(&mut b, &mut pool).unwrap() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = io.stats();
    let t = Instant::now();
    let mut b = Vec::with_capacity(256);
    while t.elapsed().as_secs_f64() < secs {
        for _ in 0..256 {
            let mut p = pool.get(Port::N6);
            p.load(Port::N6, &out);
            b.push(p);
        }
        io.tx_batch(&mut b, &mut pool).unwrap();
    }
    let s = io.stats();
    eprintln!(
        "tx: {:.3} Mpps sent, {} dropped",
        (s.tx_packets - before.tx_packets) as f64 / secs / 1e6,
        s.tx_dropped - before.tx_dropped
    );
}

/// The N6 device's set-up commands over rtnetlink, against the kernel in a namespace of the
/// test's own.
#[test]
#[ignore = "needs root"]
fn netlink_sets_links_up_and_replaces_routes() {
    assert!(upf_netns::is_root(), "needs root");
    let v = Veth::new();
    in_ns(&v.a, || {
        let mut nl = crate::netlink::Socket::open().unwrap();
        let link = Link::by_name(&v.a_if).unwrap();
        // A veth: an Ethernet address of its own and the default MTU.
        assert_ne!(link.mac, [0; 6]);
        assert_eq!(link.mtu, 1500);
        let dev = link.ifindex;
        let missing = Link::by_name("upf-none0").unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound, "{missing}");
        nl.disable_ipv6_addr_gen(dev).unwrap();
        nl.set_link_up(dev).unwrap();
        let pool: IpAddr = "10.45.0.0".parse().unwrap();
        nl.replace_route(pool, 16, dev).unwrap();
        // Replacing is idempotent.
        nl.replace_route(pool, 16, dev).unwrap();
        let r = nl.route("10.45.3.4".parse().unwrap(), dev).unwrap();
        assert_eq!((r.oif, r.gateway), (Some(dev), None));
        nl.delete_route(pool, 16, dev).unwrap();
        assert!(nl.delete_route(pool, 16, dev).is_err(), "deleted twice");
        // An interface that does not exist: the kernel's error, not a hang.
        assert!(nl.set_link_up(999_999).is_err());
    });
}
