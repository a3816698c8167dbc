use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use upf_packet::Port;
use upf_wire::encap::{encapsulate_gtpu_v4, encapsulate_gtpu_v6, EncapV4, EncapV6, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

/// A deterministic generator (xorshift64*), so that the simulations repeat.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `p` per mille.
    fn chance(&mut self, p: u64) -> bool {
        self.next() % 1000 < p
    }
}

const INNER: [u8; 28] = [
    0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 8, 8, 8, 8, 0x30, 0x39, 0, 53, 0, 8, 0,
    0,
];

fn tunnel(psc: Option<PduSessionContainer>) -> GtpuTunnel {
    GtpuTunnel {
        teid: 0x1234,
        src_port: 2152,
        dst_port: 2152,
        psc,
        ttl: 64,
        dscp: 0,
        ecn: 0,
    }
}

/// A G-PDU as the encoder writes it, outer IPv4 or IPv6.
fn gpdu(v6: bool, psc: Option<PduSessionContainer>, port: Port) -> Packet {
    let mut buf = [0u8; 256];
    let at = 128;
    buf[at..at + INNER.len()].copy_from_slice(&INNER);
    let start = if v6 {
        let p = EncapV6 {
            src: Ipv6Addr::LOCALHOST,
            dst: "2001:db8::1".parse().unwrap(),
            flow_label: 0,
            tunnel: tunnel(psc),
        };
        encapsulate_gtpu_v6(&mut buf, at, INNER.len(), &p).unwrap()
    } else {
        let p = EncapV4 {
            src: Ipv4Addr::LOCALHOST,
            dst: Ipv4Addr::new(192, 0, 2, 1),
            ident: 0,
            dont_frag: false,
            tunnel: tunnel(psc),
        };
        encapsulate_gtpu_v4(&mut buf, at, INNER.len(), &p).unwrap()
    };
    Packet::from_bytes(port, &buf[start..at + INNER.len()]).unwrap()
}

fn n6_v4(dscp: u8) -> Packet {
    let mut b = INNER;
    b[1] = dscp << 2 | 1;
    Packet::from_bytes(Port::N6, &b).unwrap()
}

fn n6_v6(dscp: u8) -> Packet {
    let tc = dscp << 2 | 2;
    let mut b = vec![0x60 | (tc >> 4), (tc & 0x0f) << 4, 0, 0, 0, 8, 17, 64];
    b.extend_from_slice(&[0; 32]);
    b.extend_from_slice(&[0, 53, 0x30, 0x39, 0, 8, 0, 0]);
    Packet::from_bytes(Port::N6, &b).unwrap()
}

#[test]
fn uplink_by_qfi_downlink_by_dscp_with_the_documented_defaults() {
    let c = Classes::default();
    assert_eq!(c.groups(), 2);
    for v6 in [false, true] {
        for qfi in 0..64u8 {
            let want = u8::from(!DEFAULT_HIGH_QFI.contains(&qfi));
            let ul = gpdu(v6, Some(PduSessionContainer::ul(qfi)), Port::N3);
            assert_eq!(c.group_of(&ul), want, "N3 QFI {qfi} v6 {v6}");
            let dl = gpdu(v6, Some(PduSessionContainer::dl(qfi)), Port::N9);
            assert_eq!(c.group_of(&dl), want, "N9 QFI {qfi} v6 {v6}");
        }
        // Without a container: the lowest, whatever the inner DSCP says.
        assert_eq!(c.group_of(&gpdu(v6, None, Port::N3)), 1);
    }
    for dscp in 0..64u8 {
        let want = u8::from(!DEFAULT_HIGH_DSCP.contains(&dscp));
        assert_eq!(c.group_of(&n6_v4(dscp)), want, "IPv4 DSCP {dscp}");
        assert_eq!(c.group_of(&n6_v6(dscp)), want, "IPv6 DSCP {dscp}");
    }
}

#[test]
fn a_downlink_container_with_ppi_and_an_extension_before_it() {
    let c = Classes::default();
    let mut psc = PduSessionContainer::dl(2);
    psc.ppi = Some(3);
    assert_eq!(c.group_of(&gpdu(false, Some(psc), Port::N9)), 0);
    // UDP Port extension (0x40, one word) then the container: hand-built.
    let mut b = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
    ];
    b.extend_from_slice(&[8, 104, 8, 104, 0, 0, 0, 0]);
    b.extend_from_slice(&[0x34, 0xff, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0x40]);
    b.extend_from_slice(&[1, 0x08, 0x68, 0x85]);
    b.extend_from_slice(&[1, 0x10, 3, 0]);
    b.extend_from_slice(&INNER);
    let p = Packet::from_bytes(Port::N3, &b).unwrap();
    assert_eq!(c.group_of(&p), 0);
    // The same, the container's QFI 9: low.
    let mut low = b.clone();
    low[46] = 9;
    assert_eq!(c.group_of(&Packet::from_bytes(Port::N3, &low).unwrap()), 1);
    // The extension chain ends (next type 0) before a container: low.
    let mut none = b.clone();
    none[43] = 0;
    assert_eq!(c.group_of(&Packet::from_bytes(Port::N3, &none).unwrap()), 1);
}

#[test]
fn gtpu_signalling_goes_to_the_highest_group() {
    let c = Classes::default();
    let mut b = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
    ];
    b.extend_from_slice(&[8, 104, 8, 104, 0, 0, 0, 0]);
    // Echo Request with a sequence number.
    b.extend_from_slice(&[0x32, 1, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(c.group_of(&Packet::from_bytes(Port::N3, &b).unwrap()), 0);
}

#[test]
fn malformed_and_short_packets_go_to_the_lowest_group_without_panicking() {
    let c = Classes::new(3, &[vec![1], vec![2]], &[vec![46], vec![0]]).unwrap();
    let whole = [
        gpdu(false, Some(PduSessionContainer::ul(1)), Port::N3),
        gpdu(true, Some(PduSessionContainer::dl(2)), Port::N9),
        n6_v4(46),
        n6_v6(46),
    ];
    for p in &whole {
        assert!(c.group_of(p) < 2, "{p:?} is classified");
        for len in 0..p.len() {
            let mut cut = p.clone();
            cut.set_range(p.start(), p.start() + len);
            assert!(c.group_of(&cut) < 3);
        }
    }
    // Every truncation that cuts into the container (or the IP header) is the lowest.
    let ul = &whole[0];
    for len in 0..44 {
        let mut cut = ul.clone();
        cut.set_range(ul.start(), ul.start() + len);
        assert_eq!(c.group_of(&cut), 2, "N3 cut at {len}");
    }
    for len in 0..20 {
        let mut cut = whole[2].clone();
        cut.set_range(whole[2].start(), whole[2].start() + len);
        assert_eq!(c.group_of(&cut), 2, "N6 cut at {len}");
    }
    // Random bytes, random lengths, every port.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..20_000 {
        let len = (rng.next() % 120) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next().to_le_bytes()[0]).collect();
        if i % 2 == 0 && len > 40 {
            // Plausible headers, so that the walk gets deep.
            b[0] = if i % 4 == 0 { 0x45 } else { 0x60 };
            b[9] = 17;
            b[6] = 17;
            b[28] = 0x34;
            b[29] = 0xff;
        }
        for port in Port::ALL {
            let p = Packet::from_bytes(port, &b).unwrap();
            assert!(c.group_of(&p) < 3);
        }
    }
}

#[test]
fn classes_refuse_what_cannot_be_mapped() {
    assert_eq!(
        Classes::new(5, &[], &[]).unwrap_err(),
        ClassesError::Groups(5)
    );
    assert_eq!(
        Classes::new(1, &[], &[]).unwrap_err(),
        ClassesError::Groups(1)
    );
    let e = Classes::new(2, &[vec![1, 64]], &[]).unwrap_err();
    assert_eq!(e.to_string(), "qfi[0]: 64 is not within 0..=63");
    let e = Classes::new(3, &[vec![1], vec![2, 1]], &[]).unwrap_err();
    assert_eq!(e.to_string(), "qfi[1]: 1 is already in group 0");
    let e = Classes::new(2, &[], &[vec![1], vec![2], vec![3]]).unwrap_err();
    assert_eq!(e.to_string(), "dscp: 3 lists for 2 groups");
    let c = Classes::new(4, &[vec![1], vec![2], vec![3]], &[vec![46]]).unwrap();
    assert_eq!(
        (0..5).map(|q| c.of_qfi(q)).collect::<Vec<_>>(),
        [3, 0, 1, 2, 3]
    );
    assert_eq!((c.of_dscp(46), c.of_dscp(0)), (0, 3));
}

#[derive(Debug, Clone, Copy)]
struct Item {
    group: u8,
    ue: u8,
    seq: u64,
    /// What `processed_below[group]` was when it arrived.
    below_at_arrival: u64,
    octets: usize,
}

impl Octets for Item {
    fn octets(&self) -> usize {
        self.octets
    }
}

#[test]
fn queues_are_bounded_in_packets_and_bytes_and_count_their_drops() {
    let item = |group, octets| Item {
        group,
        ue: 0,
        seq: 0,
        below_at_arrival: 0,
        octets,
    };
    let mut q: GroupQueues<Item> = GroupQueues::new(2, 3, 1000);
    for _ in 0..3 {
        assert!(q.push(0, item(0, 10)).is_ok());
    }
    assert!(q.push(0, item(0, 10)).is_err(), "past 3 packets");
    assert!(q.push(1, item(1, 900)).is_ok());
    assert!(q.push(1, item(1, 101)).is_err(), "past 1000 bytes");
    assert!(q.push(1, item(1, 100)).is_ok());
    // A group that does not exist is the lowest.
    assert!(q.push(7, item(1, 1)).is_err());
    assert_eq!(q.depths(), [3, 2, 0, 0]);
    assert_eq!(q.bytes(1), 1000);
    let s = q.stats();
    assert_eq!((s[0].queued, s[0].dropped, s[0].dropped_bytes), (3, 1, 10));
    assert_eq!((s[1].queued, s[1].dropped, s[1].dropped_bytes), (2, 2, 102));
    let mut out = Vec::new();
    assert_eq!(q.take(1, 1, &mut out), 1);
    assert_eq!(out[0].octets, 900);
    assert!(q.push(1, item(1, 800)).is_ok(), "room again");
    assert_eq!(q.take(3, 5, &mut out), 0);
    out.clear();
    assert_eq!(q.take(0, 10, &mut out) + q.take(1, 10, &mut out), 5);
    assert!(q.is_empty());
    assert_eq!(q.bytes(1), 0);
}

/// What a simulated run saw: per group, the most packets of lower groups processed between
/// one of its packets' arrival and its processing, and packets processed.
#[derive(Debug, Default)]
struct Seen {
    worst_wait_behind_lower: [u64; MAX_GROUPS],
    processed: [u64; MAX_GROUPS],
    dropped: [u64; MAX_GROUPS],
}

/// A worker on a virtual clock: one time unit a packet; in each unit, group g gets a packet
/// with probability `offered[g]` per mille (from one of 8 UEs); the queues hold `bound`
/// packets a group. Checks that each (group, UE) comes out in arrival order.
fn simulate(mode: Mode, groups: usize, offered: &[u64], units: u64, bound: usize) -> Seen {
    let t0 = Instant::now();
    let clock = |t: u64| t0 + Duration::from_nanos(t * 100);
    let fifo = mode == Mode::Fifo;
    let mut s = Scheduler::new(mode, groups, 256, clock(0));
    let mut q: GroupQueues<Item> = GroupQueues::new(s.groups(), bound, usize::MAX);
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut seen = Seen::default();
    // processed_below[g]: packets of groups below g processed so far.
    let mut processed_below = [0u64; MAX_GROUPS];
    let mut next_seq = [[0u64; 8]; MAX_GROUPS];
    let mut last_seq = [[None::<u64>; 8]; MAX_GROUPS];
    let mut t = 0;
    let mut taken = Vec::new();
    let mut arrive = |q: &mut GroupQueues<Item>, processed_below: &[u64; 4], seen: &mut Seen| {
        for (group, &p) in (0u8..).zip(offered) {
            let g = usize::from(group);
            if rng.chance(p) {
                let ue = (rng.next() % 8) as u8;
                let item = Item {
                    group,
                    ue,
                    seq: next_seq[g][usize::from(ue)],
                    below_at_arrival: processed_below[g],
                    octets: 100,
                };
                next_seq[g][usize::from(ue)] += 1;
                // FIFO: one queue for every class.
                let into = if fifo { 0 } else { group };
                if q.push(into, item).is_err() {
                    seen.dropped[g] += 1;
                }
            }
        }
    };
    while t < units {
        let plan = s.plan(clock(t), &q.depths());
        taken.clear();
        for (g, &n) in plan.iter().enumerate() {
            assert_eq!(q.take(g, n, &mut taken), n);
        }
        if taken.is_empty() {
            t += 1;
            arrive(&mut q, &processed_below, &mut seen);
            continue;
        }
        let busy_from = t;
        for it in &taken {
            let g = usize::from(it.group);
            let wait = processed_below[g] - it.below_at_arrival;
            seen.worst_wait_behind_lower[g] = seen.worst_wait_behind_lower[g].max(wait);
            seen.processed[g] += 1;
            let last = &mut last_seq[g][usize::from(it.ue)];
            assert!(
                last.is_none_or(|l| l < it.seq),
                "group {g} UE {} reordered",
                it.ue
            );
            *last = Some(it.seq);
            for b in processed_below.iter_mut().take(g) {
                *b += 1;
            }
            t += 1;
            arrive(&mut q, &processed_below, &mut seen);
        }
        s.record_busy(clock(t), Duration::from_nanos((t - busy_from) * 100));
    }
    seen
}

#[test]
fn strict_a_packet_never_waits_behind_more_than_max_rbs_lower_packets() {
    // Offered 1.6 packets a unit against 1 served: overloaded.
    for max_rbs in [1, 8, 32] {
        let seen = simulate(Mode::Strict { max_rbs }, 2, &[300, 700, 600], 200_000, 512);
        assert!(
            seen.worst_wait_behind_lower[0] <= max_rbs as u64,
            "max_rbs {max_rbs}: {seen:?}"
        );
        // The lower group waited too, but only behind the lowest.
        assert!(seen.processed[1] > 0);
        assert_eq!(seen.dropped[0], 0, "high is never dropped: {seen:?}");
        let seen = simulate(Mode::Strict { max_rbs }, 3, &[300, 400, 900], 200_000, 512);
        assert!(
            seen.worst_wait_behind_lower[0] <= max_rbs as u64,
            "{seen:?}"
        );
        assert!(
            seen.worst_wait_behind_lower[1] <= max_rbs as u64,
            "{seen:?}"
        );
        assert_eq!(seen.dropped[0], 0);
    }
    // The same load in FIFO: high waits behind whole queues of low (the test can fail).
    let seen = simulate(Mode::Fifo, 1, &[300, 1300], 200_000, 512);
    assert!(seen.worst_wait_behind_lower[0] > 256, "{seen:?}");
    assert!(seen.dropped[0] > 0, "{seen:?}");
}

#[test]
fn strict_takes_the_highest_group_first_and_bounds_the_rest() {
    let now = Instant::now();
    let mut s = Scheduler::new(Mode::Strict { max_rbs: 32 }, 3, 256, now);
    assert_eq!(s.plan(now, &[10, 100, 100, 0]), [10, 32, 0, 0]);
    assert_eq!(s.plan(now, &[300, 100, 100, 0]), [256, 0, 0, 0]);
    assert_eq!(s.plan(now, &[0, 20, 100, 0]), [0, 20, 12, 0]);
    assert_eq!(s.plan(now, &[240, 20, 100, 0]), [240, 16, 0, 0]);
    // MAX_RBS at run time.
    assert!(s.set_max_rbs(4));
    assert_eq!(s.plan(now, &[10, 100, 100, 0]), [10, 4, 0, 0]);
    assert!(s.set_max_rbs(0));
    assert_eq!(s.max_rbs_now(), Some(1));
    let mut w = Scheduler::new(Mode::Weighted { weights: [1; 4] }, 2, 256, now);
    assert!(!w.set_max_rbs(4));
    assert_eq!(w.max_rbs_now(), None);
}

#[test]
fn fifo_keeps_arrival_order_and_takes_a_batch() {
    let now = Instant::now();
    let mut s = Scheduler::new(Mode::Fifo, 4, 64, now);
    assert_eq!(s.groups(), 1);
    let mut q: GroupQueues<Item> = GroupQueues::new(s.groups(), 1024, usize::MAX);
    for seq in 0..200 {
        let item = Item {
            group: (seq % 3) as u8,
            ue: 0,
            seq,
            below_at_arrival: 0,
            octets: 1,
        };
        // Classes are ignored: one queue.
        assert!(q.push(0, item).is_ok());
    }
    let mut out = Vec::new();
    while !q.is_empty() {
        let plan = s.plan(now, &q.depths());
        assert!(plan[0] <= 64 && plan[1..] == [0, 0, 0]);
        q.take(0, plan[0], &mut out);
    }
    assert!(out.iter().map(|i| i.seq).eq(0..200));
    // Per-UE order is also checked by every simulation (`simulate`).
    simulate(Mode::Fifo, 1, &[500, 600], 50_000, 256);
}

#[test]
fn weights_hold_over_long_runs() {
    // Every group always backlogged (each offered more than the whole worker serves).
    for (weights, groups) in [([3, 1, 0, 0], 2), ([5, 2, 1, 0], 3), ([8, 4, 2, 1], 4)] {
        let offered = [1000; 4];
        let seen = simulate(
            Mode::Weighted { weights },
            groups,
            &offered[..groups],
            400_000,
            1024,
        );
        let total: u64 = seen.processed.iter().sum();
        let wsum: u32 = weights.iter().sum();
        for g in 0..groups {
            let share = seen.processed[g] as f64 / total as f64;
            let want = f64::from(weights[g]) / f64::from(wsum);
            // Tolerance: 1 % of the whole (rounding of each quantum to whole packets).
            assert!(
                (share - want).abs() < 0.01,
                "weights {weights:?}: group {g} got {share:.4}, wants {want:.4}: {seen:?}"
            );
        }
    }
    // Work-conserving: an idle group's share goes to the others.
    let now = Instant::now();
    let mut s = Scheduler::new(
        Mode::Weighted {
            weights: [3, 1, 0, 0],
        },
        2,
        256,
        now,
    );
    assert_eq!(s.plan(now, &[0, 1000, 0, 0]), [0, 256, 0, 0]);
    assert_eq!(s.plan(now, &[1000, 0, 0, 0]), [256, 0, 0, 0]);
    assert_eq!(s.plan(now, &[10, 1000, 0, 0]), [10, 246, 0, 0]);
    assert_eq!(s.plan(now, &[1000, 1000, 0, 0]), [192, 64, 0, 0]);
}

#[test]
fn utilisation_follows_reported_busy_time_on_a_virtual_clock() {
    let t0 = Instant::now();
    let mut l = Load::new(t0);
    let mut t = t0;
    // 60 % busy, reported every 100 µs, for 20 ms.
    for _ in 0..200 {
        t += Duration::from_micros(100);
        l.record(t, Duration::from_micros(60));
    }
    assert!((590..=610).contains(&l.permille()), "{}", l.permille());
    // Fully busy.
    for _ in 0..200 {
        t += Duration::from_micros(100);
        l.record(t, Duration::from_micros(100));
    }
    assert_eq!(l.permille(), 1000);
    // Asleep for 50 ms: nothing reported, the next look sees it.
    t += Duration::from_millis(50);
    l.advance(t);
    assert_eq!(l.permille(), 0);
}

#[test]
fn load_aware_shifts_the_poll_to_higher_groups_as_utilisation_rises() {
    let t0 = Instant::now();
    let mode = Mode::LoadAware {
        max_rbs: 16,
        idle_rbs: 192,
    };
    let mut s = Scheduler::new(mode, 2, 256, t0);
    let mut t = t0;
    let mut at = |s: &mut Scheduler, busy_permille: u64| {
        for _ in 0..100 {
            t += Duration::from_micros(100);
            s.record_busy(t, Duration::from_nanos(busy_permille * 100));
        }
        (s.utilisation(), s.plan(t, &[64, 1000, 0, 0]))
    };
    let mut lower = Vec::new();
    for busy in [200, 500, 600, 700, 800, 900, 990] {
        let (u, plan) = at(&mut s, busy);
        assert_eq!(plan[0], 64, "the highest group is taken whole");
        lower.push((u, plan[1]));
    }
    assert_eq!(lower[0].1, 192, "idle: {lower:?}");
    assert_eq!(lower.last().unwrap().1, 16, "loaded: {lower:?}");
    // 70 %: halfway between the knees.
    assert!((100..=108).contains(&lower[3].1), "{lower:?}");
    assert!(
        lower.windows(2).all(|w| w[1].1 <= w[0].1),
        "never more to lower groups as the load rises: {lower:?}"
    );
    // The run-time setter moves the loaded bound.
    assert!(s.set_max_rbs(8));
    assert_eq!(at(&mut s, 1000).1, [64, 8, 0, 0]);
    // And the bound holds in an overloaded run.
    let seen = simulate(mode_of(16, 192), 2, &[300, 1000], 200_000, 512);
    assert!(seen.worst_wait_behind_lower[0] <= 192, "{seen:?}");
}

fn mode_of(max_rbs: usize, idle_rbs: usize) -> Mode {
    Mode::LoadAware { max_rbs, idle_rbs }
}
