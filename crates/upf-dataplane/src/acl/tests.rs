//! The ACL against its rules read one by one.

use super::*;
use crate::flow::Addr;
use std::net::IpAddr;

fn p(s: &str) -> Prefix {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let a: IpAddr = a.parse().unwrap();
    let l = l.parse().unwrap_or(if a.is_ipv4() { 32 } else { 128 });
    Prefix::new(a, l).unwrap()
}

fn flow(src: &str, sp: u16, dst: &str, dp: u16, proto: u8) -> Flow {
    Flow {
        src: Addr::from_ip(src.parse().unwrap()),
        dst: Addr::from_ip(dst.parse().unwrap()),
        proto,
        src_port: sp,
        dst_port: dp,
        ..Flow::default()
    }
}

/// The IPv4 key of `f`, when both its addresses are IPv4.
fn flow4(f: &Flow) -> Option<Flow4> {
    (!f.src.v6 && !f.dst.v6).then(|| Flow4 {
        src: f.src.low32(),
        dst: f.dst.low32(),
        src_port: f.src_port,
        dst_port: f.dst_port,
        proto: f.proto,
        tos: f.tos,
    })
}

fn rule(s: &str) -> AclRule {
    AclRule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn parses_acl_lines() {
    assert_eq!(
        rule("deny in udp from any to 192.0.2.0/24 53"),
        AclRule {
            action: AclAction::Deny,
            proto: Some(17),
            src: None,
            dst: Some(p("192.0.2.0/24")),
            src_ports: ANY_PORT,
            dst_ports: (53, 53),
        }
    );
    assert_eq!(
        rule("permit in ip from 10.60.0.0/16 to any"),
        AclRule {
            src: Some(p("10.60.0.0/16")),
            ..AclRule::any(AclAction::Permit)
        }
    );
    assert_eq!(
        rule("  deny in tcp from any 1000-2000 to 2001:db8::/32 80 "),
        AclRule {
            action: AclAction::Deny,
            proto: Some(6),
            src: None,
            dst: Some(p("2001:db8::/32")),
            src_ports: (1000, 2000),
            dst_ports: (80, 80),
        }
    );
    // A host address is a /32 (/128), host bits of a prefix are cleared, dotted masks and
    // protocol numbers are IPFilterRule too.
    assert_eq!(
        rule("deny in 50 from 10.1.2.3 to 10.9.9.9/255.255.0.0"),
        AclRule {
            proto: Some(50),
            src: Some(p("10.1.2.3/32")),
            dst: Some(p("10.9.0.0/16")),
            ..AclRule::any(AclAction::Deny)
        }
    );
}

#[test]
fn refuses_what_an_acl_cannot_check() {
    use AclParseError::*;
    for (line, err) in [
        ("deny out ip from any to any", Out),
        ("permit in ip from assigned to any", Assigned),
        ("deny in ip from any to !10.0.0.0/8", Negated),
        ("deny in tcp from any to any 80 established", Options),
        ("deny in ip from any to any frag", Options),
        ("deny in ip from 10.0.0.0/8 to 2001:db8::/32", MixedVersions),
        ("deny in udp from any to any 53,5353", PortList),
        ("deny in udp from any 1-2,3 to any", PortList),
    ] {
        assert_eq!(AclRule::parse(line), Err(err), "{line}");
    }
    for line in [
        "",
        "allow in ip from any to any",
        "deny in ip from 10.0.0.0/33 to any",
        "deny in tcp from any to any 80-70",
        "deny in ip from any",
    ] {
        assert!(matches!(AclRule::parse(line), Err(Syntax(_))), "{line}");
    }
    let many = "deny in udp from any 1,2,3,4,5,6,7,8,9 to any 1,2,3,4,5,6,7,8";
    assert_eq!(AclRule::parse_expanded(many), Err(TooManyRanges));
    assert!(Options.to_string().contains("options"));
}

#[test]
fn port_lists_expand_in_order() {
    let rules = AclRule::parse_expanded("deny in udp from any 1-2,7 to any 53,5353").unwrap();
    let pairs: Vec<_> = rules.iter().map(|r| (r.src_ports, r.dst_ports)).collect();
    assert_eq!(
        pairs,
        [
            ((1, 2), (53, 53)),
            ((1, 2), (5353, 5353)),
            ((7, 7), (53, 53)),
            ((7, 7), (5353, 5353))
        ]
    );
    assert!(rules
        .iter()
        .all(|r| r.action == AclAction::Deny && r.proto == Some(17)));
}

#[test]
fn display_parses_back() {
    for line in [
        "deny in 17 from any to 192.0.2.0/24 53",
        "permit in ip from 10.60.0.0/16 to any",
        "deny in 6 from any 1000-2000 to 2001:db8::/32 80",
        "deny in 58 from ::/0 to 2001:db8::1/128",
    ] {
        let r = rule(line);
        assert_eq!(r.to_string(), line);
        assert_eq!(rule(&r.to_string()), r);
    }
}

#[test]
fn loads_files_and_names_bad_lines() {
    let text = "# uplink ACL\n\n deny in tcp from any to 192.0.2.0/24 25,465 # no SMTP\npermit in ip from any to any\n";
    let acl = Acl::load(text).unwrap();
    assert_eq!(acl.len(), 3);
    assert!(!acl.is_empty());
    assert_eq!(acl.default_action(), AclAction::Permit);
    let f = flow("10.60.0.1", 40000, "192.0.2.9", 465, 6);
    assert_eq!(acl.check(&f), AclAction::Deny);
    assert_eq!(acl.check(&Flow { dst_port: 443, ..f }), AclAction::Permit);

    let err =
        Acl::load("# fine\ndeny in ip from any to any\ndeny out ip from any to any\n").unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(err.error, AclParseError::Out);
    assert!(err.to_string().starts_with("ACL line 3: "), "{err}");
}

#[test]
fn destinations_no_rule_names_skip_the_tables() {
    let rules = [
        rule("deny in ip from any to 100.64.0.0/10"),
        rule("deny in udp from any to 198.51.100.0/24 53"),
    ];
    let acl = Acl::compile(&rules, AclAction::Permit);
    let reach = &acl.families.as_ref().unwrap().v4.reach;
    // 100.64/10 is 64 /16s, 198.51.100/24 lies in one.
    assert_eq!(reach.iter().map(|w| w.count_ones()).sum::<u32>(), 65);
    let check = |d, port, proto| acl.check(&flow("10.60.0.1", 4000, d, port, proto));
    assert_eq!(check("100.127.255.1", 80, 6), AclAction::Deny);
    assert_eq!(check("100.128.0.1", 80, 6), AclAction::Permit);
    assert_eq!(check("198.51.100.7", 53, 17), AclAction::Deny);
    assert_eq!(check("198.51.100.7", 54, 17), AclAction::Permit);
    assert_eq!(check("198.51.101.7", 53, 17), AclAction::Permit);
    // A rule for any destination reaches every /16: no map then.
    let mut all = rules.to_vec();
    all.push(rule("deny in tcp from any to any 25"));
    let acl = Acl::compile(&all, AclAction::Permit);
    assert!(acl.families.as_ref().unwrap().v4.reach.is_empty());
    assert_eq!(
        acl.check(&flow("10.60.0.1", 4000, "203.0.113.1", 25, 6)),
        AclAction::Deny
    );
}

#[test]
fn an_acl_judges_ipv6_packets_when_a_rule_can_match_one() {
    let v4 = Acl::compile(
        &[rule("deny in ip from any to 192.0.2.0/24")],
        AclAction::Deny,
    );
    assert!(!v4.judges_ipv6());
    // Every IPv6 packet gets the default then.
    let v6 = flow("2001:db8::1", 4000, "2001:db8:ffff::9", 80, 6);
    assert_eq!(v4.check(&v6), AclAction::Deny);
    let any = Acl::compile(&[rule("deny in tcp from any to any 25")], AclAction::Permit);
    assert!(any.judges_ipv6());
    let only6 = Acl::compile(
        &[rule("deny in ip from any to 2001:db8:ffff::/48")],
        AclAction::Permit,
    );
    assert!(only6.judges_ipv6());
    assert_eq!(only6.check(&v6), AclAction::Deny);
    assert!(!Acl::default().judges_ipv6());
}

#[test]
fn first_match_wins() {
    let rules = [
        rule("permit in tcp from 10.60.0.0/16 to 192.0.2.0/24 443"),
        rule("deny in ip from any to 192.0.2.0/24"),
        rule("permit in ip from any to 192.0.2.7"),
    ];
    let acl = Acl::compile(&rules, AclAction::Permit);
    let ok = flow("10.60.1.1", 5000, "192.0.2.7", 443, 6);
    assert_eq!(acl.check(&ok), AclAction::Permit);
    // Not from the pool, or not 443: the deny comes before the later permit.
    assert_eq!(
        acl.check(&flow("10.61.1.1", 5000, "192.0.2.7", 443, 6)),
        AclAction::Deny
    );
    assert_eq!(
        acl.check(&flow("10.60.1.1", 5000, "192.0.2.7", 80, 6)),
        AclAction::Deny
    );
    assert_eq!(
        acl.check(&flow("10.60.1.1", 5000, "198.51.100.1", 80, 6)),
        AclAction::Permit
    );
    // The same rules the other way round.
    let rev: Vec<_> = rules.iter().rev().copied().collect();
    let acl = Acl::compile(&rev, AclAction::Deny);
    assert_eq!(
        acl.check(&flow("10.61.1.1", 5000, "192.0.2.7", 443, 6)),
        AclAction::Permit
    );
    assert_eq!(
        acl.check(&flow("10.61.1.1", 5000, "192.0.2.8", 443, 6)),
        AclAction::Deny
    );
    assert_eq!(
        acl.check(&flow("10.61.1.1", 5000, "192.0.3.8", 443, 6)),
        AclAction::Deny
    );
}

#[test]
fn both_versions_and_any() {
    let acl = Acl::compile(
        &[
            rule("deny in ip from 2001:db8::/32 to 2001:db8:ffff::/48"),
            rule("deny in udp from any to any 53"),
            rule("permit in ip from 10.0.0.0/8 to any"),
            rule("deny in ip from any to any"),
        ],
        AclAction::Permit,
    );
    let d = AclAction::Deny;
    let ok = AclAction::Permit;
    assert_eq!(
        acl.check(&flow("2001:db8::1", 1, "2001:db8:ffff::1", 2, 6)),
        d
    );
    assert_eq!(
        acl.check(&flow("2001:db8::1", 1, "2001:db8:fffe::1", 2, 6)),
        d
    );
    assert_eq!(acl.check(&flow("10.1.1.1", 1, "8.8.8.8", 53, 17)), d);
    assert_eq!(
        acl.check(&flow("2001:db9::1", 1, "2001:4860::8888", 53, 17)),
        d
    );
    assert_eq!(acl.check(&flow("10.1.1.1", 1, "8.8.8.8", 53, 6)), ok);
    assert_eq!(acl.check(&flow("11.1.1.1", 1, "8.8.8.8", 53, 6)), d);
    // An IPv4-mapped IPv6 address is IPv6: 10.0.0.0/8 does not hold it.
    assert_eq!(
        acl.check(&flow("::ffff:10.1.1.1", 1, "2001:4860::1", 80, 6)),
        d
    );
    // Source and destination of different versions (no such packet, still exact).
    assert_eq!(acl.check(&flow("10.1.1.1", 1, "2001:4860::1", 80, 6)), ok);
    assert_eq!(acl.check(&flow("2001:db8::1", 1, "8.8.8.8", 80, 6)), d);
}

#[test]
fn ports_and_protocols() {
    let acl = Acl::compile(
        &[
            rule("deny in tcp from any 1024-2047 to any 8000-8100"),
            rule("deny in 132 from any to any"),
            rule("deny in ip from any to any 0"),
        ],
        AclAction::Permit,
    );
    let d = AclAction::Deny;
    let ok = AclAction::Permit;
    for (sp, dp, want) in [
        (1024, 8000, d),
        (2047, 8100, d),
        (1023, 8000, ok),
        (2048, 8050, ok),
        (1500, 7999, ok),
        (1500, 8101, ok),
    ] {
        assert_eq!(
            acl.check(&flow("10.0.0.1", sp, "1.1.1.1", dp, 6)),
            want,
            "{sp} {dp}"
        );
    }
    // UDP does not match the TCP rule; SCTP matches the protocol-only rule.
    assert_eq!(acl.check(&flow("10.0.0.1", 1500, "1.1.1.1", 8000, 17)), ok);
    assert_eq!(acl.check(&flow("10.0.0.1", 1500, "1.1.1.1", 8000, 132)), d);
    // Ports are those of `Flow`: 0 when the protocol has none (GRE here).
    assert_eq!(acl.check(&flow("10.0.0.1", 0, "1.1.1.1", 0, 47)), d);
}

#[test]
fn nothing_to_check() {
    let acl = Acl::default();
    assert!(acl.is_empty());
    assert_eq!(acl.len(), 0);
    assert_eq!(acl.stats(), AclStats::default());
    assert_eq!(acl.check(&Flow::default()), AclAction::Permit);
    // Only rules that give the default anyway: nothing is compiled.
    let same = [
        rule("deny in ip from any to 192.0.2.0/24"),
        rule("deny in ip from any to any"),
    ];
    let acl = Acl::compile(&same, AclAction::Deny);
    assert_eq!(acl.len(), 2);
    assert_eq!(acl.stats().tables, 0);
    assert_eq!(
        acl.check(&flow("10.0.0.1", 1, "192.0.2.1", 2, 6)),
        AclAction::Deny
    );
    // Rules behind a rule that matches everything are never reached.
    let shadowed = [
        rule("permit in ip from any to any"),
        rule("deny in ip from any to 192.0.2.0/24"),
    ];
    let acl = Acl::compile(&shadowed, AclAction::Deny);
    assert_eq!(
        acl.check(&flow("10.0.0.1", 1, "192.0.2.1", 2, 6)),
        AclAction::Permit
    );
    assert_eq!(
        acl.stats().entries,
        4,
        "the catch-all, once per version pair"
    );
}

#[test]
fn hand_built_rules_are_exact_too() {
    // A mask that is not a prefix (only hand-built `Prefix` values have one), an empty port
    // range, and a network with bits outside its mask (matches nothing).
    let odd = Prefix {
        v6: false,
        net: 0x0a00_0001,
        mask: 0xff00_00ff,
    };
    let rules = [
        AclRule {
            src_ports: (10, 9),
            ..AclRule::any(AclAction::Deny)
        },
        AclRule {
            dst: Some(Prefix {
                v6: false,
                net: 0x0a00_0001,
                mask: 0xff00_0000,
            }),
            ..AclRule::any(AclAction::Deny)
        },
        AclRule {
            dst: Some(odd),
            ..AclRule::any(AclAction::Deny)
        },
    ];
    let acl = Acl::compile(&rules, AclAction::Permit);
    for (dst, want) in [("10.7.7.1", true), ("10.7.7.2", false), ("11.7.7.1", false)] {
        let f = flow("1.1.1.1", 10, dst, 1, 6);
        let expect = rules
            .iter()
            .find(|r| r.matches(&f))
            .map_or(AclAction::Permit, |r| r.action);
        assert_eq!(expect == AclAction::Deny, want, "{dst}");
        assert_eq!(acl.check(&f), expect, "{dst}");
    }
}

#[test]
fn every_tuning_gives_the_same_answers() {
    let rules: Vec<AclRule> = (0..200u32)
        .map(|i| AclRule {
            action: if i % 3 == 0 {
                AclAction::Permit
            } else {
                AclAction::Deny
            },
            proto: (i % 4 != 0).then_some([6, 17, 1][(i % 3) as usize]),
            src: (i % 5 != 0).then(|| p(&format!("10.{}.0.0/{}", i % 7, 8 + i % 17))),
            dst: Some(p(&format!("192.0.{}.0/{}", i % 11, 16 + i % 17))),
            src_ports: ANY_PORT,
            dst_ports: if i % 2 == 0 {
                (53, 53)
            } else {
                (1000, 1000 + u16::try_from(i).unwrap())
            },
        })
        .collect();
    let flows: Vec<Flow> = (0..500u32)
        .map(|i| {
            let src = format!("10.{}.{}.{}", i % 8, i % 3, i % 5);
            let dst = format!("192.0.{}.{}", i % 12, i % 256);
            flow(
                &src,
                1,
                &dst,
                [53, 1000, 1100, 80][(i % 4) as usize],
                [6, 17, 1, 47][(i % 4) as usize],
            )
        })
        .collect();
    for tuning in [
        Tuning::DEFAULT,
        Tuning {
            bucket: 1,
            ..Tuning::DEFAULT
        },
        Tuning {
            max_tables: 1,
            ..Tuning::DEFAULT
        },
        Tuning {
            max_tables: 2,
            min_share: 0,
            ..Tuning::DEFAULT
        },
        Tuning {
            min_share: 1000,
            slots_per_key: 1,
            ..Tuning::DEFAULT
        },
        Tuning {
            bucket: 100,
            max_tables: MAX_TABLES,
            min_share: 0,
            slots_per_key: 64,
        },
    ] {
        let acl = Acl::compile_tuned(&rules, AclAction::Permit, tuning);
        assert!(
            acl.stats().max_tables <= tuning.max_tables.max(1),
            "{tuning:?}"
        );
        for f in &flows {
            let want = rules
                .iter()
                .find(|r| r.matches(f))
                .map_or(AclAction::Permit, |r| r.action);
            assert_eq!(acl.check(f), want, "{tuning:?} {f:?}");
            if let Some(f4) = flow4(f) {
                assert_eq!(acl.check4(&f4), want, "{tuning:?} {f:?}");
            }
        }
    }
}
