//! Uplink ACL lookup with 0, 100, 1,000 and 10,000 rules of a mixed rule set, over 4,096
//! pre-built flows (half built to hit a rule, half random UE traffic), the same lookups by a
//! linear scan for reference, and the compile time of 10,000 rules. The set-up prints each
//! ACL's shape and how many flows match a rule.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng as _, RngExt as _, SeedableRng as _};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use upf_dataplane::{Acl, AclAction, AclRule, ANY_PORT};
use upf_dataplane::{Addr, Flow, Prefix};

const FLOWS: usize = 4096;

/// A seeded SmallRng: the same rules and flows on every run.
struct Rng(SmallRng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SmallRng::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        self.0.random_range(lo..=hi)
    }
    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn u16(&mut self) -> u16 {
        self.0.random()
    }
}

/// UE pools: most rule sources sit in one of these.
const POOLS4: [(u32, u32); 3] = [(0x0a00_0000, 8), (0x6440_0000, 10), (0xac10_0000, 12)];
const POOL6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0000; // 2001:db8::/32
const PORTS: [u16; 12] = [53, 80, 443, 22, 25, 123, 161, 3389, 8080, 5060, 1194, 445];

fn in_pool4(rng: &mut Rng) -> u32 {
    let (net, len) = POOLS4[usize::try_from(rng.below(3)).unwrap()];
    net | (u32::try_from(rng.next() >> 32).unwrap() >> len)
}

/// 64 "service" /16s that many destinations fall into, as real ACLs cluster on a few networks.
fn dst4(rng: &mut Rng) -> u32 {
    if rng.pct(50) {
        let hub = u32::try_from(rng.below(64)).unwrap();
        (0x2000_0000 + hub * 0x0153_0000) & 0xffff_0000 | u32::try_from(rng.below(65536)).unwrap()
    } else {
        u32::try_from(rng.next() >> 32).unwrap()
    }
}

fn pfx4(a: u32, len: u32) -> Prefix {
    Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), u8::try_from(len).unwrap()).unwrap()
}

fn pfx6(a: u128, len: u32) -> Prefix {
    Prefix::new(IpAddr::V6(Ipv6Addr::from(a)), u8::try_from(len).unwrap()).unwrap()
}

/// A /8–/32: 10 % /8–/15, 40 % /16–/23, 50 % /24–/32 (`v6`: /16–/31, /32–/63, /64–/128).
fn plen(rng: &mut Rng, v6: bool) -> u32 {
    let r = rng.below(100);
    let (lo, hi) = match (v6, r) {
        (false, 0..10) => (8, 15),
        (false, 10..50) => (16, 23),
        (false, _) => (24, 32),
        (true, 0..10) => (16, 31),
        (true, 10..50) => (32, 63),
        (true, _) => (64, 128),
    };
    rng.range(lo, hi)
}

/// 90 % IPv4. Source `any` (50 %) or a prefix in a UE pool; destination a prefix (half of
/// them in 64 busy /16s) except 2 % `any` with a protocol and port; prefix lengths from
/// [`plen`]. Protocol any (40 %), TCP, UDP or ICMP; TCP/UDP rules have a destination port
/// (45 %), a port range (20 %) or none, and 10 % a source port range. 80 % deny.
fn rules(n: usize, seed: u64) -> Vec<AclRule> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let v6 = rng.pct(10);
            let (src, dst) = if v6 {
                let s = rng.pct(50).then(|| {
                    let len = plen(&mut rng, true).max(32);
                    pfx6(POOL6 | u128::from(rng.next()) << 32, len)
                });
                let a = 0x2000_u128 << 112
                    | (u128::from(rng.next()) << 64 | u128::from(rng.next())) >> 3;
                (s, Some(pfx6(a, plen(&mut rng, true))))
            } else {
                let s = rng
                    .pct(50)
                    .then(|| pfx4(in_pool4(&mut rng), plen(&mut rng, false)));
                (s, Some(pfx4(dst4(&mut rng), plen(&mut rng, false))))
            };
            let dst_any = rng.pct(2);
            let dst = if dst_any { None } else { dst };
            let proto = match (dst_any, rng.below(100)) {
                (true, r) => Some(if r < 50 { 6 } else { 17 }),
                (false, 0..40) => None,
                (false, 40..70) => Some(6),
                (false, 70..95) => Some(17),
                _ => Some(if v6 { 58 } else { 1 }),
            };
            let (mut src_ports, mut dst_ports) = (ANY_PORT, ANY_PORT);
            if matches!(proto, Some(6 | 17)) {
                match (dst_any, rng.below(100)) {
                    (true, _) | (false, 0..45) => {
                        let p = if rng.pct(70) {
                            PORTS[usize::try_from(rng.below(12)).unwrap()]
                        } else {
                            rng.u16()
                        };
                        dst_ports = (p, p);
                    }
                    (false, 45..65) => {
                        let lo = u16::try_from(rng.range(1024, 60000)).unwrap();
                        dst_ports = (lo, lo + u16::try_from(rng.range(1, 2000)).unwrap());
                    }
                    _ => {}
                }
                if rng.pct(10) {
                    src_ports = (1024, u16::MAX);
                }
            }

            AclRule {
                action: if rng.pct(80) {
                    AclAction::Deny
                } else {
                    AclAction::Permit
                },
                proto,
                src,
                dst,
                src_ports,
                dst_ports,
            }
        })
        .collect()
}

fn inside(rng: &mut Rng, p: Prefix) -> Addr {
    let rnd = if p.v6 {
        u128::from(rng.next()) << 64 | u128::from(rng.next())
    } else {
        u128::from(rng.next() >> 32)
    };
    Addr {
        v6: p.v6,
        bits: p.net
            | rnd
                & !p.mask
                & if p.v6 {
                    u128::MAX
                } else {
                    u128::from(u32::MAX)
                },
    }
}

/// Half built inside a random rule (hits, unless an earlier rule matches first), half random
/// UE traffic (to the same busy /16s half of the time: mostly misses, some hits).
fn flows(rules: &[AclRule], seed: u64) -> Vec<Flow> {
    let mut rng = Rng::new(seed);
    (0..FLOWS)
        .map(|_| {
            let proto = [6, 17, 17, 1][usize::try_from(rng.below(4)).unwrap()];
            let mut f = Flow {
                proto,
                src_port: rng.u16(),
                dst_port: if rng.pct(50) {
                    PORTS[usize::try_from(rng.below(12)).unwrap()]
                } else {
                    rng.u16()
                },
                ..Flow::default()
            };
            let v6 = rng.pct(10);
            if v6 {
                f.src = Addr {
                    v6,
                    bits: POOL6 | u128::from(rng.next()) << 32 | u128::from(rng.next()),
                };
                f.dst = Addr {
                    v6,
                    bits: 0x2000_u128 << 112 | u128::from(rng.next()) << 32,
                };
            } else {
                f.src = Addr {
                    v6,
                    bits: u128::from(in_pool4(&mut rng)),
                };
                f.dst = Addr {
                    v6,
                    bits: u128::from(dst4(&mut rng)),
                };
            }
            if !rules.is_empty() && rng.pct(50) {
                let r = rules[usize::try_from(rng.below(rules.len() as u64)).unwrap()];
                let (sv6, dv6) = (r.src.map(|p| p.v6), r.dst.map(|p| p.v6));
                let v6 = sv6.or(dv6).unwrap_or(f.src.v6);
                let any = |v6: bool| {
                    if v6 {
                        pfx6(POOL6, 32)
                    } else {
                        pfx4(0x0a00_0000, 8)
                    }
                };
                f.src = inside(&mut rng, r.src.unwrap_or(any(v6)));
                f.dst = inside(
                    &mut rng,
                    r.dst.unwrap_or(if v6 {
                        pfx6(0x2000 << 112, 3)
                    } else {
                        pfx4(0, 0)
                    }),
                );
                if let Some(p) = r.proto {
                    f.proto = p;
                }
                f.src_port =
                    u16::try_from(rng.range(r.src_ports.0.into(), r.src_ports.1.into())).unwrap();
                f.dst_port =
                    u16::try_from(rng.range(r.dst_ports.0.into(), r.dst_ports.1.into())).unwrap();
            }
            f
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("acl/check");
    for n in [0, 100, 1_000, 10_000] {
        let rules = rules(n, 0x5eed + n as u64);
        let t = Instant::now();
        let acl = Acl::compile(&rules, AclAction::Permit);
        let took = t.elapsed();
        let flows = flows(&rules, 0xf10e);
        let matched = flows
            .iter()
            .filter(|f| rules.iter().any(|r| r.matches(f)))
            .count();
        eprintln!(
            "{n} rules: compiled in {took:?}, {:?}; {matched}/{FLOWS} flows match a rule",
            acl.stats()
        );
        let mut i = 0;
        g.bench_with_input(BenchmarkId::from_parameter(n), &acl, |b, acl| {
            b.iter(|| {
                i = (i + 1) & (FLOWS - 1);
                acl.check(black_box(&flows[i]))
            })
        });
    }
    g.finish();
    // The reference: the first matching rule by a scan of the list, as `AclRule::matches`.
    let mut g = c.benchmark_group("acl/linear_scan");
    for n in [100, 1_000, 10_000] {
        let rules = rules(n, 0x5eed + n as u64);
        let flows = flows(&rules, 0xf10e);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::from_parameter(n), &rules, |b, rules| {
            b.iter(|| {
                i = (i + 1) & (FLOWS - 1);
                let f = black_box(&flows[i]);
                rules.iter().find(|r| r.matches(f)).map(|r| r.action)
            })
        });
    }
    g.finish();
    let rules = rules(10_000, 0x5eed + 10_000);
    let mut g = c.benchmark_group("acl/compile");
    g.sample_size(10);
    g.bench_function("10000", |b| {
        b.iter(|| Acl::compile(black_box(&rules), AclAction::Permit))
    });
    g.finish();
}

criterion_group!(acl, benches);
criterion_main!(acl);
