use super::*;
use rand::rngs::SmallRng;
use rand::{Rng as _, RngExt as _, SeedableRng as _};
use std::net::IpAddr;

/// The tests' seeded generator: the same frames on every run.
pub(crate) struct Rng(SmallRng);
impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(SmallRng::seed_from_u64(seed))
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }
    /// True `pct` times in 100.
    pub(crate) fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.0.fill_bytes(&mut v);
        v
    }
}

pub(crate) fn eth(ethertype: u16, vlan: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).unwrap();
    let mut p = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

pub(crate) fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !u16::try_from(s & 0xffff).unwrap()
}

pub(crate) fn ipv6(src: [u8; 16], dst: [u8; 16], nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    p.extend_from_slice(&[nh, 64]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

pub(crate) fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// A G-PDU: flags (S/PN bits as given), optional extension headers of the given
/// lengths (in 4-octet units), then `inner`.
pub(crate) fn gtpu(teid: u32, sp: u8, exts: &[u8], inner: &[u8]) -> Vec<u8> {
    let e = !exts.is_empty();
    let flags = 0x30 | (sp & 0x03) | if e { 0x04 } else { 0 };
    let mut g = vec![flags, 255, 0, 0];
    g.extend_from_slice(&teid.to_be_bytes());
    if flags & 0x07 != 0 {
        g.extend_from_slice(&[0, 1, 0, if e { 0x85 } else { 0 }]);
    }
    for (i, &len) in exts.iter().enumerate() {
        let mut x = vec![0u8; usize::from(len) * 4];
        x[0] = len;
        let last = x.len() - 1;
        x[last] = if i + 1 < exts.len() { 0x85 } else { 0 };
        g.extend_from_slice(&x);
    }
    g.extend_from_slice(inner);
    let l = u16::try_from(g.len() - 8).unwrap();
    g[2..4].copy_from_slice(&l.to_be_bytes());
    g
}

pub(crate) fn inner_packet(ue: IpAddr, rng: &mut Rng) -> Vec<u8> {
    let len = usize::try_from(rng.below(40)).unwrap();
    let pl = rng.bytes(len);
    match ue {
        IpAddr::V4(a) => ipv4(a.octets(), [8, 8, 8, 8], 17, &udp(1000, 53, &pl)),
        IpAddr::V6(a) => ipv6(
            a.octets(),
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            17,
            &udp(1000, 53, &pl),
        ),
    }
}

pub(crate) fn random_ue(rng: &mut Rng) -> IpAddr {
    if rng.below(2) == 0 {
        let r = rng.next().to_be_bytes();
        IpAddr::from([10, 45, r[0], r[1]])
    } else {
        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0x20, 0x01]);
        a[2..8].copy_from_slice(&rng.bytes(6));
        a[8..].copy_from_slice(&rng.bytes(8));
        IpAddr::from(a)
    }
}

/// A GTP-U frame (IPv4 or IPv6 outer) carrying a packet of `ue`.
pub(crate) fn gtpu_frame(ue: IpAddr, rng: &mut Rng, outer6: bool, vlan: bool) -> Vec<u8> {
    let nexts = usize::try_from(rng.below(4)).unwrap();
    let exts: Vec<u8> = (0..nexts)
        .map(|_| 1 + u8::try_from(rng.below(3)).unwrap())
        .collect();
    let sp = u8::try_from(rng.below(4)).unwrap();
    let inner = inner_packet(ue, rng);
    let g = gtpu((rng.next() >> 32) as u32, sp, &exts, &inner);
    let u = udp(2152, 2152, &g);
    let mut f;
    if outer6 {
        f = eth(0x86dd, vlan);
        let mut s = [0u8; 16];
        s[0] = 0xfd;
        s[15] = 1;
        let mut d = s;
        d[15] = 2;
        f.extend_from_slice(&ipv6(s, d, 17, &u));
    } else {
        f = eth(0x0800, vlan);
        f.extend_from_slice(&ipv4([192, 168, 1, 1], [192, 168, 1, 2], 17, &u));
    }
    f
}

/// A plain IP (N6) frame to `ue`.
pub(crate) fn n6_frame(ue: IpAddr, rng: &mut Rng, vlan: bool) -> Vec<u8> {
    let len = usize::try_from(rng.below(40)).unwrap();
    let pl = rng.bytes(len);
    match ue {
        IpAddr::V4(a) => {
            let mut f = eth(0x0800, vlan);
            f.extend_from_slice(&ipv4([1, 1, 1, 1], a.octets(), 17, &udp(53, 1000, &pl)));
            f
        }
        IpAddr::V6(a) => {
            let mut f = eth(0x86dd, vlan);
            let s = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            f.extend_from_slice(&ipv6(s, a.octets(), 17, &udp(53, 1000, &pl)));
            f
        }
    }
}

/// Well-formed frames with their UE, then malformed variants of them.
pub(crate) fn corpus(count: usize) -> Vec<(Port, Vec<u8>, Option<IpAddr>)> {
    let mut rng = Rng::new(0x5eed);
    let mut out = Vec::new();
    for i in 0..count {
        let ue = random_ue(&mut rng);
        let vlan = i % 7 == 3;
        match i % 3 {
            0 => out.push((Port::N3, gtpu_frame(ue, &mut rng, false, vlan), Some(ue))),
            1 => out.push((Port::N9, gtpu_frame(ue, &mut rng, true, vlan), Some(ue))),
            _ => out.push((Port::N6, n6_frame(ue, &mut rng, vlan), Some(ue))),
        }
    }
    // Malformed: truncations, flipped octets, too many extension headers, wrong port.
    let good: Vec<_> = out.clone();
    for (port, f, _) in &good {
        let cut = 14 + usize::try_from(rng.below(f.len() as u64 - 14)).unwrap();
        out.push((*port, f[..cut].to_vec(), None));
        let mut g = f.clone();
        let at = 12 + usize::try_from(rng.below(70.min(f.len() as u64 - 12))).unwrap();
        g[at] ^= 1 << rng.below(8);
        out.push((*port, g, None));
        // Every frame also on the other kind of port.
        let other = if *port == Port::N6 {
            Port::N3
        } else {
            Port::N6
        };
        out.push((other, f.clone(), None));
    }
    let ue: IpAddr = "10.45.0.9".parse().unwrap();
    let inner = inner_packet(ue, &mut rng);
    for n in [MAX_EXT - 1, MAX_EXT, MAX_EXT + 1] {
        let g = gtpu(1, 0, &vec![1; n], &inner);
        let mut f = eth(0x0800, false);
        f.extend_from_slice(&ipv4(
            [192, 168, 1, 1],
            [192, 168, 1, 2],
            17,
            &udp(2152, 2152, &g),
        ));
        out.push((Port::N3, f, if n <= MAX_EXT { Some(ue) } else { None }));
    }
    let mut f = eth(0x0800, false);
    f.extend_from_slice(&ipv4(
        [192, 168, 1, 1],
        [192, 168, 1, 2],
        17,
        &udp(2152, 2153, &gtpu(1, 0, &[], &inner)),
    ));
    out.push((Port::N3, f, None));
    let mut f = eth(0x0806, false);
    f.extend_from_slice(&[0; 28]);
    out.push((Port::N6, f, None));
    out
}

#[test]
fn reference_agrees_with_runtime_steering() {
    for (port, frame, ue) in corpus(300) {
        let Some(ue) = ue else { continue };
        let want_hash = upf_packet::steer::ue_hash(ue);
        let k = fanout_key(Ingress::of(port), &frame).expect("well-formed frame");
        assert_eq!(ue_hash_key(k), want_hash, "{port:?} {ue}");
        for n in 1..=5 {
            assert_eq!(
                fanout_worker(port, &frame, n),
                upf_packet::steer::worker_of(want_hash, n)
            );
        }
    }
}

#[test]
fn reference_never_panics_on_short_frames() {
    let mut rng = Rng::new(7);
    for (port, f, _) in corpus(60) {
        for n in 0..f.len() {
            let _ = fanout_worker(port, &f[..n], 3);
        }
        let junk = rng.bytes(f.len());
        let _ = fanout_worker(port, &junk, 3);
    }
}

#[test]
#[ignore = "needs root"]
fn bpf_program_agrees_with_reference() {
    assert!(upf_netns::is_root(), "needs root");
    let frames = corpus(300);
    let mut checked = 0;
    let mut refused = 0;
    for n in [1usize, 2, 3, 4, 7] {
        for port in [Port::N3, Port::N6] {
            let prog = Program::fanout(port, n).expect("load fanout program");
            for (p, f, _) in &frames {
                if Ingress::of(*p) != Ingress::of(port) {
                    continue;
                }
                let got = match prog.test_run(f) {
                    Ok(r) => r,
                    // Newer kernels refuse to test-run an IPv4/IPv6 frame shorter than the
                    // fixed header (a harness limit; the receive path has no such check).
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                        let l3 = if f[12..14] == [0x81, 0] { 18 } else { 14 };
                        assert!(f.len() < l3 + 40, "EINVAL on a {}-octet frame", f.len());
                        refused += 1;
                        continue;
                    }
                    Err(e) => panic!("BPF_PROG_TEST_RUN: {e}"),
                };
                let got = usize::try_from(got).unwrap();
                assert_eq!(
                    got,
                    fanout_worker(port, f, n),
                    "n={n} {port:?} frame {f:02x?}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked > 1000 && refused < checked / 10,
        "{checked} {refused}"
    );
}
