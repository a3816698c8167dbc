//! The compiled ACL against the definition: the first rule of the list that matches, by a
//! linear scan. Rules and flows are drawn from a few networks and ports so that rules overlap
//! and flows hit them; every tuning of the compiler must give the same answers.

use proptest::prelude::*;
use proptest::sample::select;
use std::net::IpAddr;
use upf_dataplane::{Acl, AclAction, AclRule, Tuning, ANY_PORT, MAX_TABLES};
use upf_dataplane::{Addr, Flow, Flow4, Prefix};

const V4: [u32; 4] = [0x0a00_0000, 0x0a01_0000, 0xc000_0200, 0xc633_6400];
const V6: [u128; 3] = [
    0x2001_0db8 << 96,
    0x2001_0db8 << 96 | 1 << 80,
    0xfe80 << 112,
];

/// An address near one of the networks: it keeps their first `keep` bits.
fn addr(v6: bool) -> BoxedStrategy<Addr> {
    if v6 {
        (0..V6.len(), any::<u128>(), 0u32..=128)
            .prop_map(|(b, r, keep)| Addr {
                v6: true,
                bits: V6[b] ^ r.checked_shr(keep).unwrap_or(0),
            })
            .boxed()
    } else {
        (0..V4.len(), any::<u32>(), 0u32..=32)
            .prop_map(|(b, r, keep)| Addr {
                v6: false,
                bits: u128::from(V4[b] ^ r.checked_shr(keep).unwrap_or(0)),
            })
            .boxed()
    }
}

fn prefix() -> impl Strategy<Value = Option<Prefix>> {
    let len4 = prop_oneof![select(vec![0u8, 8, 15, 16, 23, 24, 30, 32]), 0u8..=32];
    let len6 = prop_oneof![select(vec![0u8, 32, 48, 64, 127, 128]), 0u8..=128];
    let mk = |(a, len): (Addr, u8)| Prefix::new(a.to_ip(), len);
    prop_oneof![
        3 => Just(None),
        6 => (addr(false), len4).prop_map(mk),
        2 => (addr(true), len6).prop_map(mk),
    ]
}

fn ports() -> impl Strategy<Value = (u16, u16)> {
    prop_oneof![
        4 => Just(ANY_PORT),
        3 => select(vec![0u16, 53, 80, 443, 1000]).prop_map(|p| (p, p)),
        2 => (select(vec![0u16, 50, 1000, 65000]), select(vec![1u16, 10, 535, 1000]))
            .prop_map(|(lo, w)| (lo, lo.saturating_add(w))),
        // Any range, empty ones (first > last) included: they match nothing.
        1 => (any::<u16>(), any::<u16>()),
    ]
}

fn rule() -> impl Strategy<Value = AclRule> {
    let action = prop_oneof![Just(AclAction::Permit), Just(AclAction::Deny)];
    let proto = prop_oneof![4 => Just(None), 6 => select(vec![1u8, 6, 17, 58]).prop_map(Some)];
    (action, proto, prefix(), prefix(), ports(), ports()).prop_map(
        |(action, proto, src, dst, src_ports, dst_ports)| AclRule {
            action,
            proto,
            src,
            dst,
            src_ports,
            dst_ports,
        },
    )
}

fn port() -> impl Strategy<Value = u16> {
    prop_oneof![
        select(vec![
            0u16, 1, 50, 53, 60, 80, 443, 1000, 1005, 1535, 2000, 65000, 65535
        ]),
        any::<u16>(),
    ]
}

fn flow() -> impl Strategy<Value = Flow> {
    // Mostly one version on both sides; mixed pairs never come off the wire but must be exact.
    let versions = prop_oneof![
        8 => Just((false, false)),
        4 => Just((true, true)),
        1 => Just((false, true)),
        1 => Just((true, false)),
    ];
    versions.prop_flat_map(|(s6, d6)| {
        let proto = select(vec![1u8, 6, 17, 58, 47]);
        (addr(s6), addr(d6), proto, port(), port()).prop_map(|(src, dst, proto, sp, dp)| Flow {
            src,
            dst,
            proto,
            src_port: sp,
            dst_port: dp,
            ..Flow::default()
        })
    })
}

/// A flow inside `r` (unless its port ranges are empty), from random bits.
fn inside(r: &AclRule, bits: (u128, u128), ports: (u16, u16)) -> Flow {
    let pick = |p: Option<Prefix>, other: Option<Prefix>, r: u128| {
        let v6 = p.or(other).is_some_and(|p| p.v6);
        let width = if v6 { u128::MAX } else { u128::from(u32::MAX) };
        let p = p.unwrap_or_else(|| Prefix::new(Addr { v6, bits: 0 }.to_ip(), 0).unwrap());
        Addr {
            v6,
            bits: p.net | (r & !p.mask & width),
        }
    };
    let within = |(lo, hi): (u16, u16), x: u16| {
        let span = u32::from(hi.saturating_sub(lo)) + 1;
        lo + u16::try_from(u32::from(x) % span).unwrap()
    };
    Flow {
        src: pick(r.src, r.dst, bits.0),
        dst: pick(r.dst, r.src, bits.1),
        proto: r.proto.unwrap_or(6),
        src_port: within(r.src_ports, ports.0),
        dst_port: within(r.dst_ports, ports.1),
        ..Flow::default()
    }
}

fn tuning() -> impl Strategy<Value = Tuning> {
    select(vec![
        Tuning::DEFAULT,
        Tuning {
            bucket: 1,
            ..Tuning::DEFAULT
        },
        Tuning {
            bucket: 2,
            max_tables: 3,
            min_share: 0,
            slots_per_key: 1,
        },
        Tuning {
            max_tables: 1,
            ..Tuning::DEFAULT
        },
        Tuning {
            bucket: 1,
            max_tables: MAX_TABLES,
            min_share: 0,
            slots_per_key: 16,
        },
        Tuning {
            min_share: 1000,
            ..Tuning::DEFAULT
        },
    ])
}

fn linear(rules: &[AclRule], default: AclAction, f: &Flow) -> AclAction {
    rules
        .iter()
        .find(|r| r.matches(f))
        .map_or(default, |r| r.action)
}

proptest! {
    #[test]
    fn compiled_acl_is_the_linear_scan(
        rules in prop::collection::vec(rule(), 0..300),
        flows in prop::collection::vec(flow(), 64),
        hits in prop::collection::vec((any::<prop::sample::Index>(), any::<(u128, u128)>(), any::<(u16, u16)>()), 64),
        default in prop_oneof![Just(AclAction::Permit), Just(AclAction::Deny)],
        tuning in tuning(),
    ) {
        let acl = Acl::compile_tuned(&rules, default, tuning);
        prop_assert_eq!(acl.len(), rules.len());
        prop_assert!(acl.stats().max_tables <= tuning.max_tables);
        let aimed = if rules.is_empty() {
            Vec::new()
        } else {
            hits.iter().map(|(i, bits, ports)| inside(i.get(&rules), *bits, *ports)).collect()
        };
        for f in flows.iter().chain(&aimed) {
            prop_assert_eq!(acl.check(f), linear(&rules, default, f), "{:?}", f);
            if !f.src.v6 && !f.dst.v6 {
                let f4 = Flow4 {
                    src: f.src.low32(),
                    dst: f.dst.low32(),
                    src_port: f.src_port,
                    dst_port: f.dst_port,
                    proto: f.proto,
                    tos: f.tos,
                };
                prop_assert_eq!(acl.check4(&f4), linear(&rules, default, f), "{:?}", f);
            }
        }
    }

    /// Whatever the line, parsing returns, and a rule it accepts prints back as itself.
    #[test]
    fn parse_print_parse(words in prop::collection::vec(select(vec![
        "permit", "deny", "in", "out", "ip", "tcp", "17", "from", "to", "any", "assigned",
        "!10.0.0.0/8", "10.0.0.0/8", "10.1.2.3", "2001:db8::/32", "::1", "53", "1-2,3",
        "0-65535", "frag", "#",
    ]), 0..10)) {
        let line = words.join(" ");
        if let Ok(r) = AclRule::parse(&line) {
            prop_assert_eq!(AclRule::parse(&r.to_string()), Ok(r));
        }
        if let Ok(rs) = AclRule::parse_expanded(&line) {
            prop_assert!(!rs.is_empty());
        }
    }
}

/// A bigger list than the proptest draws, in one deterministic run.
#[test]
fn three_thousand_rules() {
    let mut x = 0x1234_5678_9abc_def0_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let v4 = |next: &mut dyn FnMut() -> u64| {
        let base = V4[usize::try_from(next() % 4).unwrap()];
        let keep = u32::try_from(next() % 33).unwrap();
        base ^ u32::try_from(next() >> 32)
            .unwrap()
            .checked_shr(keep)
            .unwrap_or(0)
    };
    let mut rules = Vec::new();
    for _ in 0..3000 {
        let pfx = |next: &mut dyn FnMut() -> u64| {
            (!next().is_multiple_of(4)).then(|| {
                let a = IpAddr::from(v4(next).to_be_bytes());
                Prefix::new(a, u8::try_from(8 + next() % 25).unwrap()).unwrap()
            })
        };
        let (src, dst) = (pfx(&mut next), pfx(&mut next));
        let proto = [None, Some(6), Some(17)][usize::try_from(next() % 3).unwrap()];
        let dst_ports = match next() % 3 {
            0 => ANY_PORT,
            1 => (443, 443),
            _ => (1000, 1000 + u16::try_from(next() % 500).unwrap()),
        };
        rules.push(AclRule {
            action: if next() % 4 == 0 {
                AclAction::Permit
            } else {
                AclAction::Deny
            },
            proto,
            src,
            dst,
            src_ports: ANY_PORT,
            dst_ports,
        });
    }
    let acl = Acl::compile(&rules, AclAction::Permit);
    let mut hits = 0;
    for i in 0..3000 {
        let f = if i % 2 == 0 {
            let r = &rules[usize::try_from(next() % 3000).unwrap()];
            inside(r, (u128::from(next()), u128::from(next())), (0, 0))
        } else {
            Flow {
                src: Addr {
                    v6: false,
                    bits: u128::from(v4(&mut next)),
                },
                dst: Addr {
                    v6: false,
                    bits: u128::from(v4(&mut next)),
                },
                proto: 6,
                src_port: 1,
                dst_port: [443, 1200, 80][i % 3],
                ..Flow::default()
            }
        };
        let want = linear(&rules, AclAction::Permit, &f);
        hits += usize::from(rules.iter().any(|r| r.matches(&f)));
        assert_eq!(acl.check(&f), want, "{f:?}");
    }
    assert!(hits > 1000, "{hits}");
}
