//! The engine loaded in the kernel (root): the verifier takes the program, a full map refuses
//! a session, a Framed Route finds its session while it has it, a replaced session keeps the
//! counts of the URRs and the tokens of the MBRs it keeps, the drop reasons are named as the
//! reference names them.
#![allow(clippy::cast_possible_truncation)] // test frames are small

use std::net::Ipv4Addr;
use upf_rules::*;
use upf_xdp::{Config, Engine, Hops, InstallError, NextHop, Reason};
mod common;

fn config(sessions: u32) -> Config {
    Config {
        sessions,
        n3: Ipv4Addr::new(192, 0, 2, 1),
        n9: Ipv4Addr::new(192, 0, 2, 1),
        n3_v6: None,
        n9_v6: None,
        outer_ttl: 64,
        hops: Some(Hops {
            n3: NextHop::default(),
            n6: NextHop::default(),
        }),
        acl: Default::default(),
    }
}

/// A session with an uplink PDR (TEID `n`) to N6 and a downlink PDR (UE 10.0.x.y) to a gNB.
fn session(n: u32) -> Session {
    let ue = Ipv4Addr::from(0x0a00_0000 + n);
    let gnb = (7, Ipv4Addr::new(192, 0, 2, 100));
    common::forwarding_session(u64::from(n), ue, n, gnb)
}

#[test]
#[ignore = "needs root"]
fn the_program_loads_and_a_full_map_refuses() {
    let mut e = Engine::load(config(2)).expect("the verifier takes the program");
    e.install(&session(1)).unwrap();
    e.install(&session(2)).unwrap();
    e.install(&session(2)).expect("a replacement needs no room");
    assert!(matches!(e.install(&session(3)), Err(InstallError::Full(2))));
    let mut other = session(3);
    other.seid = Seid(1);
    other.pdrs[1].pdi.ue_ip.as_mut().unwrap().ipv4 = Some(Ipv4Addr::new(10, 0, 0, 2));
    assert!(
        matches!(e.install(&other), Err(InstallError::Conflict(_))),
        "the UE address of session 2"
    );
    e.remove(Seid(1)).unwrap();
    assert!(
        matches!(e.install(&session(3)), Err(InstallError::Full(2))),
        "the removed session's slot is in quarantine"
    );
    std::thread::sleep(upf_xdp::SLOT_QUARANTINE);
    e.install(&session(3)).expect("room again");
    e.remove_many(&[Seid(2)]);
    e.install(&session(4))
        .expect("an exact removal frees its slot at once");
    assert_eq!(e.sessions(), 2);
}

#[test]
#[ignore = "needs root"]
fn maps_for_a_million_sessions_are_created() {
    // The session maps allocate as sessions come; the URR counters are preallocated.
    let e = Engine::load(config(1_000_000)).expect("maps for 1M sessions");
    assert_eq!(e.sessions(), 0);
}

/// Ethernet + IPv4/UDP (28 + `payload` octets, TTL 64) from `src` to `dst`.
fn ip_frame(src: Ipv4Addr, dst: Ipv4Addr, payload: usize) -> Vec<u8> {
    let total = 28 + payload;
    let mut f = vec![0u8; 14];
    f[12] = 8;
    let mut ip = vec![0u8; total];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    ip[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    let c = upf_wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f
}

/// `ip_frame`'s IP packet in a G-PDU for `teid` to our N3 address.
fn gpdu_frame(teid: u32, inner: &[u8]) -> Vec<u8> {
    let total = 36 + inner.len();
    let mut f = ip_frame(Ipv4Addr::new(192, 0, 2, 100), config(1).n3, total - 28);
    let h = &mut f[14..];
    h[20..22].copy_from_slice(&2152u16.to_be_bytes());
    h[22..24].copy_from_slice(&2152u16.to_be_bytes());
    h[28] = 0x30;
    h[29] = 0xff;
    h[30..32].copy_from_slice(&(inner.len() as u16).to_be_bytes());
    h[32..36].copy_from_slice(&teid.to_be_bytes());
    h[36..].copy_from_slice(inner);
    f
}

fn run(e: &Engine, frame: &[u8]) -> u32 {
    let mut out = vec![0u8; 2048];
    upf_io::bpf::run(e.program().unwrap(), frame, &mut out, 1, None)
        .unwrap()
        .retval
}

fn with_urrs(n: u32, ul: &[u32], dl: &[u32]) -> Session {
    let mut s = session(n);
    for &id in ul.iter().chain(dl) {
        if s.urr(UrrId(id)).is_none() {
            let mut u = Urr::new(UrrId(id));
            u.method = MeasurementMethod::VOLUM;
            s.insert_urr(u).unwrap();
        }
    }
    s.pdr_mut(PdrId(1)).unwrap().urrs = ul.iter().map(|&u| UrrId(u)).collect();
    s.pdr_mut(PdrId(2)).unwrap().urrs = dl.iter().map(|&u| UrrId(u)).collect();
    s
}

#[test]
#[ignore = "needs root"]
fn a_replaced_session_keeps_the_counts_of_the_urrs_it_keeps() {
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let down = ip_frame(dn, ue, 72); // 100 octets of IP
    let up = gpdu_frame(1, &ip_frame(ue, dn, 22)[14..]); // 50
    e.install(&with_urrs(1, &[1], &[1])).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    let vol = |e: &Engine| -> Vec<(u32, u64, u64)> {
        e.usage(Seid(1))
            .unwrap()
            .into_iter()
            .map(|(id, v)| (id.0, v.uplink_bytes, v.downlink_bytes))
            .collect()
    };
    assert_eq!(vol(&e), [(1, 50, 0)]);
    // URR 1 stays, URR 2 comes: counted from zero.
    e.install(&with_urrs(1, &[1], &[1, 2])).unwrap();
    assert_eq!(run(&e, &down), XDP_TX);
    assert_eq!(vol(&e), [(1, 50, 100), (2, 0, 100)]);
    // URR 1 goes, URR 3 takes its counters' slot: from zero, not URR 1's counts.
    e.install(&with_urrs(1, &[3], &[2])).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    let mut v = vol(&e);
    v.sort();
    assert_eq!(v, [(2, 0, 100), (3, 50, 0)]);
    assert_eq!(e.remove(Seid(1)).unwrap().len(), 2, "the final usage");
    assert_eq!(run(&e, &up), 2, "XDP_PASS: the TEID is gone");
    let st = e.stats().unwrap();
    assert_eq!((st.forwarded, st.punted), (3, 1));
}

#[test]
fn drop_reasons_are_named_as_the_reference_names_them() {
    let names: Vec<&str> = upf_dataplane::DropReason::ALL
        .iter()
        .map(|r| r.name())
        .collect();
    for r in Reason::ALL {
        assert!(names.contains(&r.name()), "{}", r.name());
    }
}

/// Session `n` with QER `qer` on its uplink PDR: `kbps` uplink MBR.
fn with_mbr(n: u32, qer: u32, kbps: u64) -> Session {
    let mut s = session(n);
    let mut q = Qer::open(QerId(qer));
    q.mbr = Some(Bitrate {
        uplink_kbps: kbps,
        downlink_kbps: 0,
    });
    s.insert_qer(q).unwrap();
    s.pdr_mut(PdrId(1)).unwrap().qers = [QerId(qer)].into_iter().collect();
    s
}

#[test]
#[ignore = "needs root"]
fn a_replaced_session_keeps_the_tokens_of_the_qers_it_keeps() {
    const XDP_DROP: u32 = 1;
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    e.fix_clock(Some(0)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    // 1,000 octets: 8,000 bits of a 1 kbit/s bucket's 12,000.
    let up = gpdu_frame(1, &ip_frame(ue, dn, 972)[14..]);
    e.install(&with_mbr(1, 1, 1)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    assert_eq!(run(&e, &up), XDP_DROP, "4,000 bits left");
    // The same QER at 2 kbit/s (a 12,000-bit bucket too): its 4,000 bits stay.
    e.install(&with_mbr(1, 1, 2)).unwrap();
    assert_eq!(run(&e, &up), XDP_DROP);
    // 2 s at 2 kbit/s refill 4,000 bits: 8,000 fit.
    e.fix_clock(Some(2_000_000_000)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    // Another QER: a full bucket.
    e.install(&with_mbr(1, 2, 2)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    assert_eq!(run(&e, &up), XDP_DROP);
    let st = e.stats().unwrap();
    let mbr = st
        .dropped
        .iter()
        .find(|d| d.0 == Reason::MbrExceeded)
        .unwrap();
    assert_eq!(mbr.1, 3);
}

#[test]
#[ignore = "needs root"]
fn a_bucket_read_as_it_leaves_goes_on_from_its_backlog_when_it_enters() {
    const XDP_DROP: u32 = 1;
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    e.fix_clock(Some(5_000_000_000)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    // 1,000 octets: 8,000 bits of a 1 kbit/s bucket's 12,000.
    let up = gpdu_frame(1, &ip_frame(ue, dn, 972)[14..]);
    e.install(&with_mbr(1, 1, 1)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    let b = e.qos(Seid(1)).unwrap().buckets;
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].qer, b[0].uplink, b[0].last),
        (QerId(1), true, 5_000_000_000)
    );
    assert_eq!(e.clock(), 5_000_000_000);
    // 8,000 bits at 1 ms a bit: 8 s to refill, in ticks of 2^-24 ns.
    let spent = 8_000_000_000u64 << 24;
    assert!(
        b[0].backlog >= spent && b[0].backlog < spent + (1 << 24),
        "{b:?}"
    );
    e.remove(Seid(1)).unwrap();
    // Back at another time on the clock, 1 s of the backlog drained elsewhere: 5,000 bits
    // are left, and they go on draining from the clock's now.
    e.fix_clock(Some(100_000_000_000)).unwrap();
    let carried = MbrBacklog {
        qer: QerId(1),
        uplink: true,
        ticks: 7_000_000_000 << 24,
    };
    let other = MbrBacklog {
        qer: QerId(2),
        ..carried
    };
    let backlogs = vec![other, carried];
    e.install_carrying(
        &with_mbr(1, 1, 1),
        &Carried {
            backlogs,
            ..Carried::default()
        },
    )
    .unwrap();
    assert_eq!(run(&e, &up), XDP_DROP, "5,000 bits left");
    e.fix_clock(Some(102_999_000_000)).unwrap();
    assert_eq!(run(&e, &up), XDP_DROP, "7,999");
    e.fix_clock(Some(103_000_000_000)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX, "8,000");
    // Not carried: full.
    let backlogs = vec![other];
    (e.install_carrying(
        &with_mbr(2, 1, 1),
        &Carried {
            backlogs,
            ..Carried::default()
        },
    ))
    .unwrap();
    let up2 = gpdu_frame(2, &ip_frame(Ipv4Addr::new(10, 0, 0, 2), dn, 972)[14..]);
    assert_eq!(run(&e, &up2), XDP_TX);
}

/// Session `n` whose uplink PDR counts in URR 1 with an uplink Volume Quota of `octets`.
fn with_quota(n: u32, octets: u64) -> Session {
    let mut s = with_urrs(n, &[1], &[]);
    s.urr_mut(UrrId(1)).unwrap().volume_quota = Some(VolumeLimit {
        total: None,
        uplink: Some(octets),
        downlink: None,
    });
    s
}

#[test]
#[ignore = "needs root"]
fn a_quota_passes_the_packet_that_reaches_it_and_a_new_grant_counts_anew() {
    const XDP_DROP: u32 = 1;
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let up = gpdu_frame(1, &ip_frame(ue, dn, 572)[14..]); // 600 octets of IP
    e.install(&with_quota(1, 1000)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    assert_eq!(run(&e, &up), XDP_TX, "1,200 octets: it reaches the quota");
    assert_eq!(run(&e, &up), XDP_DROP);
    // The same quota: still spent. A changed one: a new grant.
    e.install(&with_quota(1, 1000)).unwrap();
    assert_eq!(run(&e, &up), XDP_DROP);
    e.install(&with_quota(1, 600)).unwrap();
    assert_eq!(run(&e, &up), XDP_TX);
    assert_eq!(run(&e, &up), XDP_DROP);
    let st = e.stats().unwrap();
    let spent = st
        .dropped
        .iter()
        .find(|d| d.0 == Reason::QuotaExhausted)
        .unwrap();
    assert_eq!(spent.1, 3);
    // The URR counted what passed.
    assert_eq!(e.usage(Seid(1)).unwrap()[0].1.uplink_bytes, 1800);
}

#[test]
#[ignore = "needs root"]
fn a_quota_goes_on_from_the_use_carried_in_and_its_use_is_read_as_it_leaves() {
    const XDP_DROP: u32 = 1;
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    let ue = |n: u8| Ipv4Addr::new(10, 0, 0, n);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let up = |n: u8| gpdu_frame(u32::from(n), &ip_frame(ue(n), dn, 572)[14..]); // 600 octets
    let used = |uplink| Carried {
        quotas: vec![QuotaUse {
            urr: UrrId(1),
            total: uplink,
            uplink,
            downlink: 0,
        }],
        ..Carried::default()
    };
    // 600 of 1,000 used elsewhere: one packet more reaches it.
    e.install_carrying(&with_quota(1, 1000), &used(600))
        .unwrap();
    assert_eq!(run(&e, &up(1)), XDP_TX);
    assert_eq!(run(&e, &up(1)), XDP_DROP);
    // Spent elsewhere: exhausted at once.
    e.install_carrying(&with_quota(2, 1000), &used(1000))
        .unwrap();
    assert_eq!(run(&e, &up(2)), XDP_DROP);
    // Read as it leaves: the whole use since the grant.
    assert_eq!(e.qos(Seid(1)).unwrap().quotas, used(1200).quotas);
    let d = e.detach(Seid(2)).unwrap();
    assert_eq!(e.detached_qos(&d).unwrap().quotas, used(1000).quotas);
    e.collect(vec![d]);
    // A changed quota is a new grant, whatever is carried.
    e.install_carrying(&with_quota(1, 600), &used(1000))
        .unwrap();
    assert_eq!(run(&e, &up(1)), XDP_TX);
}

#[test]
#[ignore = "needs root"]
fn sessions_of_one_policy_share_its_pdrs_and_keep_their_own_tunnels() {
    let mut e = Engine::load(config(8)).unwrap();
    let gnb = |n: u8| (0x700 + u32::from(n), Ipv4Addr::new(192, 0, 2, 100 + n));
    let ue = |n: u8| Ipv4Addr::new(10, 0, 0, n);
    for n in 1..=3u8 {
        let s = common::forwarding_session(u64::from(n), ue(n), u32::from(n), gnb(n));
        e.install(&s).unwrap();
    }
    assert_eq!(
        e.shapes(),
        2,
        "one uplink and one downlink PDR list for the three"
    );
    for n in 1..=3u8 {
        // Downlink: into this session's own tunnel.
        let f = ip_frame(Ipv4Addr::new(198, 51, 100, 7), ue(n), 20);
        let mut out = vec![0u8; 2048];
        let r = upf_io::bpf::run(e.program().unwrap(), &f, &mut out, 1, None).unwrap();
        assert_eq!(r.retval, 3, "XDP_TX");
        let h = &out[14..r.out_len];
        assert_eq!(&h[16..20], &gnb(n).1.octets(), "the tunnel's far end");
        assert_eq!(&h[32..36], &gnb(n).0.to_be_bytes(), "its TEID");
        // Uplink on its TEID, from its UE.
        let up = gpdu_frame(
            u32::from(n),
            &ip_frame(ue(n), Ipv4Addr::new(198, 51, 100, 7), 20)[14..],
        );
        assert_eq!(run(&e, &up), 3);
    }
    e.remove_many(&[Seid(1), Seid(2), Seid(3)]);
    assert_eq!(e.shapes(), 0);
}

#[test]
#[ignore = "needs root"]
fn keys_that_share_a_direct_entry_or_change_go_through_the_hash_map() {
    // 8 sessions: direct arrays of 16 entries; TEIDs 1 and 17 (and UEs .1 and .17) share
    // their entries.
    let mut e = Engine::load(config(8)).unwrap();
    let gnb = (7, Ipv4Addr::new(192, 0, 2, 100));
    let ue = |n: u32| Ipv4Addr::new(10, 0, 0, n as u8);
    let remote = Ipv4Addr::new(198, 51, 100, 7);
    for n in [1u32, 17] {
        e.install(&common::forwarding_session(u64::from(n), ue(n), n, gnb))
            .unwrap();
    }
    assert_eq!(e.hashed_keys(), 2, "TEID 17 and UE .17 in the hash maps");
    let forwards = |e: &Engine, n: u32| {
        let up = gpdu_frame(n, &ip_frame(ue(n), remote, 20)[14..]);
        let down = ip_frame(remote, ue(n), 20);
        (run(e, &up), run(e, &down))
    };
    assert_eq!(forwards(&e, 1), (3, 3));
    assert_eq!(forwards(&e, 17), (3, 3));
    // A changed session: its keys through the hash maps, back in their entries later.
    let mut s = common::forwarding_session(1, ue(1), 1, (8, Ipv4Addr::new(192, 0, 2, 101)));
    e.install(&s).unwrap();
    assert_eq!(e.hashed_keys(), 4);
    let mut out = vec![0u8; 2048];
    let dl = |e: &Engine, out: &mut Vec<u8>| {
        let r = upf_io::bpf::run(
            e.program().unwrap(),
            &ip_frame(remote, ue(1), 20),
            out,
            1,
            None,
        )
        .unwrap();
        (r.retval, out[14 + 16..14 + 20].to_vec())
    };
    assert_eq!(
        dl(&e, &mut out),
        (3, vec![192, 0, 2, 101]),
        "the new tunnel at once"
    );
    std::thread::sleep(upf_xdp::ENTRY_QUARANTINE);
    e.settle();
    assert_eq!(e.hashed_keys(), 2, "session 1's keys back in their entries");
    assert_eq!(dl(&e, &mut out), (3, vec![192, 0, 2, 101]));
    // Removed: gone from both.
    s.seid = Seid(1);
    e.remove(Seid(1)).unwrap();
    assert_eq!(forwards(&e, 1), (2, 2), "punted");
    assert_eq!(forwards(&e, 17), (3, 3));
}

/// Session `n` whose uplink PDR counts in URR 1 with an uplink Volume Threshold of `octets`
/// that VOLTH reports.
fn with_threshold(n: u32, octets: u64) -> Session {
    let mut s = with_urrs(n, &[1], &[]);
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers = ReportingTriggers::VOLTH;
    u.volume_threshold = Some(VolumeLimit {
        total: None,
        uplink: Some(octets),
        downlink: None,
    });
    s
}

#[test]
#[ignore = "needs root"]
fn a_replaced_session_counts_toward_its_threshold_from_the_last_report() {
    let mut e = Engine::load(config(4)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let up = gpdu_frame(1, &ip_frame(ue, Ipv4Addr::new(198, 51, 100, 7), 572)[14..]);
    let volth = vec![upf_xdp::Crossing {
        seid: Seid(1),
        urr: UrrId(1),
        trigger: UsageTrigger::VOLTH,
    }];
    e.install(&with_threshold(1, 1000)).unwrap();
    run(&e, &up);
    assert_eq!(e.crossings(), vec![]);
    // The same threshold, then a higher one: the 600 octets so far count toward them.
    e.install(&with_threshold(1, 1000)).unwrap();
    run(&e, &up);
    assert_eq!(e.crossings(), volth, "1,200 octets");
    assert_eq!(e.crossings(), vec![], "announced once");
    e.rearm(Seid(1), &[]).unwrap();
    e.install(&with_threshold(1, 1500)).unwrap();
    run(&e, &up);
    run(&e, &up);
    assert_eq!(e.crossings(), vec![], "1,200 since the report");
    run(&e, &up);
    assert_eq!(e.crossings(), volth, "1,800 since the report");
}

#[test]
#[ignore = "needs root"]
fn a_report_the_full_ring_buffer_had_no_room_for_is_found_in_the_slots() {
    let mut e = Engine::load(config(4)).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let up = gpdu_frame(1, &ip_frame(ue, Ipv4Addr::new(198, 51, 100, 7), 0)[14..]);
    // Every packet reaches the threshold; re-armed each time, the ring never drained.
    e.install(&with_threshold(1, 1)).unwrap();
    let mut sent = 0;
    while e.stats().unwrap().crossings_lost == 0 {
        e.rearm(Seid(1), &[]).unwrap();
        run(&e, &up);
        sent += 1;
        assert!(sent <= 8192, "the ring buffer holds 64 KiB");
    }
    assert!(sent > 4000, "{sent} reports in 64 KiB");
    let missed = e.missed_crossings().unwrap();
    assert_eq!(
        missed,
        vec![upf_xdp::Crossing {
            seid: Seid(1),
            urr: UrrId(1),
            trigger: UsageTrigger::VOLTH,
        }]
    );
    assert_eq!(
        e.missed_crossings().unwrap(),
        vec![],
        "until another is lost"
    );
    e.rearm(Seid(1), &[]).unwrap();
    assert_eq!(
        e.crossings(),
        vec![],
        "the records on the ring are all reported"
    );
    run(&e, &up);
    assert_eq!(e.crossings().len(), 1, "room again");
}

/// [`session`] `n` with Framed Route `route` on its downlink PDR.
fn routed(n: u32, route: &str) -> Session {
    let mut s = session(n);
    s.pdr_mut(PdrId(2)).unwrap().pdi.framed_routes =
        vec![FramedRoute::parse(route).unwrap()].into();
    s
}

#[test]
#[ignore = "needs root"]
fn a_framed_route_finds_its_session_until_it_goes_and_is_held_by_one() {
    const XDP_PASS: u32 = 2;
    const XDP_TX: u32 = 3;
    let mut e = Engine::load(config(4)).unwrap();
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let behind = |a: [u8; 4]| ip_frame(dn, Ipv4Addr::from(a), 72);
    e.install(&routed(1, "172.16.0.0/16")).unwrap();
    assert_eq!(run(&e, &behind([172, 16, 9, 9])), XDP_TX);
    assert_eq!(
        run(&e, &behind([172, 17, 9, 9])),
        XDP_PASS,
        "outside the route"
    );
    assert!(
        matches!(
            e.install(&routed(2, "172.16.0.0/16")),
            Err(InstallError::Conflict(_))
        ),
        "the route of session 1"
    );
    // A longer route of another session takes its addresses.
    e.install(&routed(2, "172.16.5.0/24")).unwrap();
    assert_eq!(run(&e, &behind([172, 16, 5, 1])), XDP_TX);
    // A modification without the route takes it out; a removal too.
    e.install(&session(2)).unwrap();
    assert_eq!(
        run(&e, &behind([172, 16, 5, 1])),
        XDP_TX,
        "session 1's /16 again"
    );
    e.remove(Seid(1)).unwrap();
    assert_eq!(run(&e, &behind([172, 16, 5, 1])), XDP_PASS);
    assert_eq!(run(&e, &behind([172, 16, 9, 9])), XDP_PASS);
}

#[test]
#[ignore = "needs root"]
fn a_packet_punted_for_want_of_a_next_hop_is_neither_policed_nor_counted() {
    const XDP_PASS: u32 = 2;
    // The FIB's next hops: the engine is attached nowhere, so none.
    let mut e = Engine::load(Config {
        hops: None,
        ..config(4)
    })
    .unwrap();
    let mut s = with_urrs(1, &[1], &[1]);
    let u = s.urr_mut(UrrId(1)).unwrap();
    u.triggers = ReportingTriggers::VOLTH;
    u.volume_threshold = Some(VolumeLimit {
        total: Some(1),
        ..Default::default()
    });
    u.volume_quota = Some(VolumeLimit {
        total: Some(1),
        ..Default::default()
    });
    e.install(&s).unwrap();
    let ue = Ipv4Addr::new(10, 0, 0, 1);
    let dn = Ipv4Addr::new(198, 51, 100, 7);
    let up = gpdu_frame(1, &ip_frame(ue, dn, 22)[14..]);
    for _ in 0..3 {
        assert_eq!(run(&e, &up), XDP_PASS);
    }
    assert!(e.crossings().is_empty(), "a threshold or quota reached");
    let usage = e.remove(Seid(1)).unwrap();
    assert!(usage.iter().all(|(_, v)| v.total_packets == 0), "{usage:?}");
}
