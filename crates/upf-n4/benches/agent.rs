//! Session establishments per second through the N4 agent and `MemDatapath::default()` (no
//! log): pre-encoded Session Establishment Requests shaped as `smf::establishment` makes them
//! (4 PDRs, 4 FARs, 2 QERs, 2 URRs, BAR; CHOOSE F-TEID, CHV4 UE address from a /8 pool), each
//! with its own CP SEID and sequence number. Decode, allocation, rule conversion and
//! validation, data path install, response encode and the response cache are all inside the
//! timed region; building the requests and the agents is not.
//!
//! - `establish/sequential`: one request handled, its response drained, then the next.
//! - `establish/inflight_64`: 64 requests handled, then the 64 responses drained.
//! - `establish_delete/steady_100k`: establishment + deletion of one session, against an agent
//!   holding 100,000 sessions already (the table does not grow or shrink).
//! - `records/*`: the persisted records (#29). `restore_1000`: a new agent restoring 1,000
//!   sessions' records (read, allocations held, rules installed). `rules_{json,postcard}_
//!   {encode,decode}`: one session's rules, the bulk of its record, in the first record
//!   format (JSON) and the current one (postcard).
//!
//! Each establishment bench runs on a fresh agent per chunk of `CHUNK` establishments, so the
//! session table grows from 0 to `CHUNK` during a chunk.
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_n4::alloc::UePoolConfig;
use upf_n4::{Agent, Config};
use upf_pfcp::ie::NodeId;
use upf_pfcp::messages::SessionDeletionRequest;
use upf_pfcp::{Message, Pdu};
use upf_rules::mem::MemDatapath;
use upf_smf::{self as smf, UeAddr};

const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const CHUNK: usize = 20_000;

fn config() -> Config {
    let mut cfg = Config::new(UPF_IP.into());
    cfg.ue_pools = vec![UePoolConfig {
        name: None,
        dnn: None,
        network_instance: None,
        ipv4: Some((Ipv4Addr::new(10, 0, 0, 0), 8)),
        ipv6: None,
    }];
    cfg
}

fn peer() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(SMF_IP), 8805)
}

/// An agent associated with the SMF, and the clock it runs on.
fn agent() -> (Agent<MemDatapath>, Instant) {
    let now = Instant::now();
    let mut a = Agent::new(config(), MemDatapath::default(), now, 3_900_000_000).unwrap();
    // A sequence number no request below uses (the response cache answers repeats).
    let setup = smf::encode(
        None,
        0xff_fffe,
        smf::association_setup(NodeId::Ipv4(SMF_IP), 1),
    );
    a.handle_datagram(now, peer(), &setup);
    assert_eq!(a.association_count(), 1);
    while a.poll_transmit().is_some() {}
    while a.poll_event().is_some() {}
    (a, now)
}

/// Establishment requests with CP SEIDs and sequence numbers from `first` on.
fn requests(first: u32, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let k = first + u32::try_from(i).unwrap();
            let req =
                smf::establishment(NodeId::Ipv4(SMF_IP), u64::from(k), SMF_IP, UeAddr::Choose);
            smf::encode(Some(0), k & 0xff_ffff, req)
        })
        .collect()
}

/// The UP SEID of an accepted establishment response.
fn accepted_seid(payload: &[u8]) -> u64 {
    match Pdu::decode(payload).unwrap().0.message {
        Message::SessionEstablishmentResponse(m) => {
            assert!(m.cause.is_accepted(), "{m:?}");
            m.up_f_seid.unwrap().seid
        }
        m => panic!("{m:?}"),
    }
}

fn establish(c: &mut Criterion) {
    // Sanity: the requests are accepted, and a /8 pool holds a chunk.
    let (mut a, now) = agent();
    for r in requests(1, 3) {
        a.handle_datagram(now, peer(), &r);
        accepted_seid(&a.poll_transmit().unwrap().payload);
    }

    let mut g = c.benchmark_group("establish");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sequential", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = usize::try_from(iters).unwrap();
            while left > 0 {
                let n = left.min(CHUNK);
                left -= n;
                let reqs = requests(1, n);
                let (mut a, now) = agent();
                let t0 = Instant::now();
                for r in &reqs {
                    a.handle_datagram(now, peer(), r);
                    std::hint::black_box(a.poll_transmit());
                    std::hint::black_box(a.poll_event());
                }
                total += t0.elapsed();
                assert_eq!(a.session_count(), n);
            }
            total
        })
    });
    g.throughput(Throughput::Elements(64));
    g.bench_function("inflight_64", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = usize::try_from(iters).unwrap();
            let per_chunk = CHUNK / 64;
            while left > 0 {
                let batches = left.min(per_chunk);
                left -= batches;
                let reqs = requests(1, batches * 64);
                let (mut a, now) = agent();
                let t0 = Instant::now();
                for batch in reqs.chunks(64) {
                    for r in batch {
                        a.handle_datagram(now, peer(), r);
                    }
                    for _ in 0..64 {
                        std::hint::black_box(a.poll_transmit());
                    }
                    while let Some(e) = a.poll_event() {
                        std::hint::black_box(e);
                    }
                }
                total += t0.elapsed();
                assert_eq!(a.session_count(), batches * 64);
            }
            total
        })
    });
    g.finish();
}

fn establish_delete(c: &mut Criterion) {
    const PRELOAD: usize = 100_000;
    let (mut a, now) = agent();
    for r in requests(1, PRELOAD) {
        a.handle_datagram(now, peer(), &r);
        accepted_seid(&a.poll_transmit().unwrap().payload);
    }
    while a.poll_event().is_some() {}
    // CP SEIDs and sequence numbers above the preloaded ones; the sequence number wraps at
    // 2^24, far beyond the 65,536 responses the cache keeps.
    let template = requests(1 << 24, 1).remove(0);
    let del_template = smf::encode(Some(0), 0, SessionDeletionRequest {});
    let mut k: u32 = u32::try_from(PRELOAD).unwrap() + 1;
    let mut g = c.benchmark_group("establish_delete");
    g.throughput(Throughput::Elements(1));
    g.bench_function("steady_100k", |b| {
        b.iter_batched_ref(
            || {
                // Next CP SEID / sequence number, patched into the pre-encoded request.
                k = k.wrapping_add(2);
                let mut est = template.clone();
                est[12..15].copy_from_slice(&(k & 0xff_ffff).to_be_bytes()[1..]);
                let mut del = del_template.clone();
                del[12..15].copy_from_slice(&((k + 1) & 0xff_ffff).to_be_bytes()[1..]);
                (est, del)
            },
            |(est, del)| {
                a.handle_datagram(now, peer(), est);
                let rsp = a.poll_transmit().unwrap();
                // Our SEID goes into the pre-encoded deletion's header.
                del[4..12].copy_from_slice(&accepted_seid_fast(&rsp.payload).to_be_bytes());
                a.handle_datagram(now, peer(), del);
                std::hint::black_box(a.poll_transmit());
                while a.poll_event().is_some() {}
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    assert_eq!(a.session_count(), PRELOAD);
}

/// The UP SEID from the F-SEID IE (57) of an establishment response, without decoding it all.
fn accepted_seid_fast(p: &[u8]) -> u64 {
    let mut b = &p[16..];
    while b.len() >= 4 {
        let t = u16::from_be_bytes([b[0], b[1]]);
        let n = usize::from(u16::from_be_bytes([b[2], b[3]]));
        if t == 57 {
            return u64::from_be_bytes(b[5..13].try_into().unwrap());
        }
        b = &b[4 + n..];
    }
    panic!("no F-SEID in {p:02x?}");
}

fn records(c: &mut Criterion) {
    const N: usize = 1_000;
    let (mut a, now) = agent();
    a.track_changes();
    // The association again, now that its record is taken.
    let setup = smf::association_setup(NodeId::Ipv4(SMF_IP), 1);
    a.handle_datagram(now, peer(), &smf::encode(None, 0xff_fffd, setup));
    while a.poll_transmit().is_some() {}
    for r in requests(1, N) {
        a.handle_datagram(now, peer(), &r);
        accepted_seid(&a.poll_transmit().unwrap().payload);
    }
    while a.poll_event().is_some() {}
    let changes = a.take_changes();
    assert_eq!(changes.sessions.len(), N);
    let sessions: Vec<(u64, Vec<u8>)> = (changes.sessions.into_iter())
        .map(|(k, v)| (k, v.unwrap()))
        .collect();
    let associations: Vec<(Vec<u8>, Vec<u8>)> = (changes.associations.into_iter())
        .map(|(k, v)| (k, v.unwrap()))
        .collect();
    let rules = a.sessions().next().unwrap().clone();
    let mut g = c.benchmark_group("records");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("restore_1000", |b| {
        b.iter_batched(
            || {
                let a = Agent::new(config(), MemDatapath::default(), now, 3_900_000_001);
                (a.unwrap(), associations.clone(), sessions.clone())
            },
            |(mut a, assocs, sessions)| {
                let r = a.restore(now, 3_900_000_000, assocs, sessions);
                assert_eq!(r.sessions, N, "{:?}", r.failed.first());
                a
            },
            BatchSize::PerIteration,
        )
    });
    g.throughput(Throughput::Elements(1));
    let json = serde_json::to_vec(&rules).unwrap();
    let postcard = postcard::to_allocvec(&rules).unwrap();
    g.bench_function("rules_json_encode", |b| {
        b.iter(|| serde_json::to_vec(std::hint::black_box(&rules)).unwrap())
    });
    g.bench_function("rules_json_decode", |b| {
        b.iter(|| serde_json::from_slice::<upf_rules::Session>(&json).unwrap())
    });
    g.bench_function("rules_postcard_encode", |b| {
        b.iter(|| postcard::to_allocvec(std::hint::black_box(&rules)).unwrap())
    });
    g.bench_function("rules_postcard_decode", |b| {
        b.iter(|| postcard::from_bytes::<upf_rules::Session>(&postcard).unwrap())
    });
    g.finish();
    eprintln!(
        "records: one session's rules are {} octets in JSON, {} in postcard",
        json.len(),
        postcard.len()
    );
}

criterion_group!(benches, establish, establish_delete, records);
criterion_main!(benches);
