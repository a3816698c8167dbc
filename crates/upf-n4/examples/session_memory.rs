//! Heap bytes per PFCP session held by the agent and `MemDatapath::default()`, measured with a
//! counting global allocator (live bytes as requested from the allocator: malloc's own
//! per-allocation overhead comes on top, see the live allocation count).
//!
//! `cargo run --release -p upf-n4 --example session_memory -- 100000 1000000`
//!
//! Each session is `smf::establishment` (4 PDRs, 4 FARs, 2 QERs, 2 URRs, BAR; CHOOSE F-TEID,
//! CHV4 UE address from a /8 pool). Fixed costs (the UE pool bitmap, empty tables) are measured
//! after association and subtracted; the response cache (up to 65,536 responses) is reported
//! separately, then expired.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_n4::alloc::UePoolConfig;
use upf_n4::{Agent, Config};
use upf_pfcp::ie::NodeId;
use upf_rules::mem::MemDatapath;
use upf_rules::{Bar, Far, Pdr, Qer, SdfFilter, Seid, Session, Urr};
use upf_smf::{self as smf, UeAddr};

#[path = "../tests/counting/mod.rs"]
mod counting;
use counting::live;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn per(bytes: usize, n: usize) -> f64 {
    bytes as f64 / n as f64
}

/// Heap bytes of one installed session's rules, by part: the `Arc` block, the rule vectors at
/// their capacities, and the PDIs' framed routes (the only other heap of its own the rules of
/// a session can have; checked against the deletion figure). SDF filter lists are shared
/// between sessions (one copy per distinct list), so they are in no session's part.
fn rules_heap(s: &Session) -> Vec<(&'static str, usize)> {
    use std::mem::size_of;
    let routes: usize = s
        .pdrs
        .iter()
        .map(|p| p.pdi.framed_routes.len() * size_of::<upf_rules::FramedRoute>())
        .sum();
    vec![
        ("Arc<Session>", 16 + size_of::<Session>()),
        ("pdrs", s.pdrs.capacity() * size_of::<Pdr>()),
        ("fars", s.fars.capacity() * size_of::<Far>()),
        ("qers", s.qers.capacity() * size_of::<Qer>()),
        ("urrs", s.urrs.capacity() * size_of::<Urr>()),
        ("pdi.framed_routes", routes),
    ]
}

fn measure(n: usize) {
    let peer = SocketAddr::new(IpAddr::V4(SMF_IP), 8805);
    let mut cfg = Config::new(Ipv4Addr::new(127, 0, 0, 1).into());
    cfg.ue_pools = vec![UePoolConfig {
        name: None,
        dnn: None,
        network_instance: None,
        ipv4: Some((Ipv4Addr::new(10, 0, 0, 0), 8)),
        ipv6: None,
    }];
    cfg.limits.sessions = cfg.limits.sessions.max(n);
    let mut now = Instant::now();
    let mut a = Agent::new(cfg, MemDatapath::default(), now, 3_900_000_000).unwrap();
    let setup = smf::encode(None, 1, smf::association_setup(NodeId::Ipv4(SMF_IP), 1));
    a.handle_datagram(now, peer, &setup);
    while a.poll_transmit().is_some() {}
    while a.poll_event().is_some() {}
    let (base, base_allocs) = live();

    let t0 = Instant::now();
    let mut first = None;
    for i in 0..n {
        let k = u32::try_from(i + 2).unwrap();
        let req = smf::establishment(NodeId::Ipv4(SMF_IP), u64::from(k), SMF_IP, UeAddr::Choose);
        let bytes = smf::encode(Some(0), k & 0xff_ffff, req);
        a.handle_datagram(now, peer, &bytes);
        let rsp = a.poll_transmit().expect("a response");
        if first.is_none() {
            // Only the first response is decoded: the others would count in the timing.
            first = match upf_pfcp::Pdu::decode(&rsp.payload).map(|p| p.0.message) {
                Ok(upf_pfcp::Message::SessionEstablishmentResponse(m)) => {
                    m.up_f_seid.map(|f| Seid(f.seid))
                }
                _ => None,
            };
        }
        while a.poll_event().is_some() {}
    }
    let first = first.expect("the first establishment accepted");
    let took = t0.elapsed();
    assert_eq!(a.session_count(), n, "every establishment accepted");
    let (with_cache, _) = live();

    // Expire the response cache ((N1 + 1) x T1 = 12 s) and drain what the timers sent (a heartbeat).
    now += Duration::from_secs(61);
    a.handle_timeout(now);
    while a.poll_transmit().is_some() {}
    while a.poll_event().is_some() {}
    let (total, allocs) = live();
    let total = total - base;
    let allocs = allocs - base_allocs;

    let parts = rules_heap(a.session(first).unwrap());
    let rules: usize = parts.iter().map(|p| p.1).sum();
    let caps = {
        let s = a.session(first).unwrap();
        format!(
            "capacities: pdrs {}/{} fars {}/{} qers {}/{} urrs {}/{}; sdf_filters {} (shared)",
            s.pdrs.len(),
            s.pdrs.capacity(),
            s.fars.len(),
            s.fars.capacity(),
            s.qers.len(),
            s.qers.capacity(),
            s.urrs.len(),
            s.urrs.capacity(),
            s.pdrs[0].pdi.sdf_filters.len(),
        )
    };
    // The data path's tables (sessions, meters); the rules it shares with the agent stay.
    let before_dp = live().0;
    drop(std::mem::take(a.datapath_mut()));
    let dp = before_dp - live().0;
    let agent_rest = total as f64 - dp as f64 - (rules * n) as f64;

    // Delete every session: what that frees is per-session allocations; what stays is table
    // capacity (hash tables do not shrink) and the allocators' free lists.
    // UP SEIDs are random: the agent says which it handed out (the list is counted in both
    // figures below, so not in their difference).
    let seids: Vec<Seid> = a.sessions().map(|s| s.seid).collect();
    let (before_del, allocs_before_del) = live();
    for (i, &Seid(seid)) in seids.iter().enumerate() {
        let seq = u32::try_from(i % 0xff_0000 + 2).unwrap();
        let bytes = smf::encode(
            Some(seid),
            seq,
            upf_pfcp::messages::SessionDeletionRequest {},
        );
        now += Duration::from_micros(100);
        a.handle_datagram(now, peer, &bytes);
        a.poll_transmit().expect("a response");
        while a.poll_event().is_some() {}
    }
    assert_eq!(a.session_count(), 0, "every deletion accepted");
    now += Duration::from_secs(61);
    a.handle_timeout(now);
    while a.poll_transmit().is_some() {}
    let (after_del, allocs_after_del) = live();
    drop(seids);

    println!(
        "N = {n} sessions (established in {took:.2?}, {:.0}/s)",
        n as f64 / took.as_secs_f64()
    );
    println!("  fixed before the first session: {base} B");
    println!(
        "  per session, response cache included: {:.0} B",
        per(with_cache - base, n)
    );
    println!(
        "  per session: {:.0} B in {:.1} live allocations",
        per(total, n),
        per(allocs, n)
    );
    println!("    rules: {rules} B = {parts:?} ({caps})");
    println!(
        "    MemDatapath tables (sessions; meters once used): {:.0} B",
        per(dp, n)
    );
    println!(
        "    agent tables (session contexts, by_cp, TEID set, allocators): {:.0} B",
        agent_rest / n as f64
    );
    println!(
        "  deleting them all frees {:.0} B/session in {:.1} allocations; {:.0} B/session stays \
         (table capacity, free lists)",
        per(before_del - after_del, n),
        per(allocs_before_del - allocs_after_del, n),
        (after_del as f64 - base as f64) / n as f64
    );
}

fn main() {
    println!(
        "size_of: Session {} Pdr {} Far {} Qer {} Urr {} Bar {} SdfFilter {} NodeId {} SocketAddr {}",
        std::mem::size_of::<Session>(),
        std::mem::size_of::<Pdr>(),
        std::mem::size_of::<Far>(),
        std::mem::size_of::<Qer>(),
        std::mem::size_of::<Urr>(),
        std::mem::size_of::<Bar>(),
        std::mem::size_of::<SdfFilter>(),
        std::mem::size_of::<NodeId>(),
        std::mem::size_of::<SocketAddr>(),
    );
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a session count"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000]
    } else {
        sizes
    };
    for n in sizes {
        measure(n);
    }
}
