//! The cluster store against a real etcd on loopback (Debian's etcd-server; scripts/setup.sh
//! installs it): shards taken and handed over under leases, records written by the owner
//! and read by the instance that takes over, writes of an instance that lost its shard
//! fenced off.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use upf_netns::etcd::Etcd;
use upf_state::{Cluster, ClusterEvent, EtcdOptions, Op, Record, WriterOptions};

fn etcd() -> Etcd {
    Etcd::on_loopback().expect("etcd")
}

fn instance(e: &Etcd, name: &str, shards: &[&str]) -> Cluster {
    Cluster::start(options(e, name, shards)).unwrap()
}

fn options(e: &Etcd, name: &str, shards: &[&str]) -> EtcdOptions {
    let mut o = EtcdOptions::new(
        vec![e.endpoint()],
        name,
        shards.iter().map(|s| s.to_string()).collect(),
    );
    o.prefix = "/t".into();
    // The cold takeover (records read at the takeover); the hot one has its own test.
    o.hot_standby = false;
    o
}

/// The next event that is not about reachability, within `within`.
fn next(c: &Cluster, within: Duration) -> ClusterEvent {
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match c.wait_event(left) {
            Some(ClusterEvent::Reachable | ClusterEvent::Unreachable(_)) => continue,
            Some(e) => return e,
            None => panic!("no event within {within:?}"),
        }
    }
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn a_dead_instances_shard_is_taken_over_with_its_records() {
    let e = etcd();
    let a = instance(&e, "A", &["a", "b"]);
    let ClusterEvent::Acquired {
        shard, from, state, ..
    } = next(&a, Duration::from_secs(5))
    else {
        panic!("A gets its own shard first")
    };
    assert_eq!((shard.as_str(), from), ("a", None));
    assert_eq!(state.recovery, None, "a shard never served");
    let w = a.writer("a", WriterOptions::default());
    w.submit(Op::SetRecovery(3_900_000_123));
    w.submit(Op::PutAssociation(b"smf".to_vec(), b"assoc".to_vec()));
    for s in 1..=300u64 {
        w.submit(Op::PutSession(s, format!("session {s}").into_bytes()));
    }
    w.submit(Op::PutUsage(7, b"usage 7".to_vec()));
    w.submit(Op::DeleteSession(300));
    assert!(w.flush(Duration::from_secs(10)), "{:?}", w.last_error());

    let b = instance(&e, "B", &["b", "a"]);
    let ClusterEvent::Acquired { shard, .. } = next(&b, Duration::from_secs(5)) else {
        panic!("B gets its own shard")
    };
    assert_eq!(shard, "b");
    // A crashes: its lease expires after its TTL (2 s), and B takes "a" over.
    let killed = Instant::now();
    a.abandon();
    let ClusterEvent::Acquired {
        shard, from, state, ..
    } = next(&b, Duration::from_secs(8))
    else {
        panic!("B takes a over")
    };
    let took = killed.elapsed();
    assert_eq!((shard.as_str(), from.as_deref()), ("a", Some("A")));
    assert!(
        took >= Duration::from_secs(1),
        "not before the lease expired: {took:?}"
    );
    assert_eq!(state.recovery, Some(3_900_000_123));
    assert_eq!(
        state.associations,
        vec![(b"smf".to_vec(), b"assoc".to_vec())]
    );
    assert_eq!(state.sessions.len(), 299, "300 deleted");
    assert!(state
        .sessions
        .iter()
        .all(|(s, r)| *r == format!("session {s}").into_bytes()));
    assert_eq!(state.usage, vec![(7, b"usage 7".to_vec())]);

    // A's writer, still running, is fenced off: B's records stay B's.
    w.submit(Op::PutSession(1, b"stale".to_vec()));
    assert!(!w.flush(Duration::from_secs(5)));
    assert!(w.stats().fenced);
    let w2 = b.writer("a", WriterOptions::default());
    w2.submit(Op::PutSession(2, b"by B".to_vec()));
    assert!(w2.flush(Duration::from_secs(5)));
    drop(w);

    // B stops cleanly: its lease is revoked, and a new instance takes both shards at once.
    b.stop();
    let mut o = options(&e, "C", &["c", "a", "b"]);
    o.orphan_grace = Duration::from_secs(3);
    let c = Cluster::start(o).unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < 3 {
        if let ClusterEvent::Acquired { shard, state, .. } = next(&c, Duration::from_secs(30)) {
            if shard == "a" {
                assert!(state.sessions.contains(&(2, b"by B".to_vec())));
                assert!(state.sessions.contains(&(1, b"session 1".to_vec())));
            }
            got.push(shard);
        }
    }
    assert_eq!(got[0], "c", "its own first");
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    // B's shards were never seen held by C: they are orphans, taken after the grace.
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn writes_wait_while_etcd_is_down_and_land_when_it_is_back() {
    let mut e = etcd();
    let a = instance(&e, "A", &["a"]);
    assert!(matches!(
        next(&a, Duration::from_secs(5)),
        ClusterEvent::Acquired { .. }
    ));
    let opts = WriterOptions {
        queue_bytes: 4096,
        ..WriterOptions::default()
    };
    let w = a.writer("a", opts);
    e.kill();
    assert!(w.submit(Op::PutSession(1, vec![1; 100])));
    // Reported unreachable; writes wait, bounded.
    let until = Instant::now() + Duration::from_secs(5);
    while !matches!(
        a.wait_event(Duration::from_millis(500)),
        Some(ClusterEvent::Unreachable(_))
    ) {
        assert!(Instant::now() < until, "no Unreachable event");
    }
    assert!(!w.flush(Duration::from_millis(1500)));
    assert!(w.stats().failing);
    assert!(
        !w.submit(Op::PutSession(2, vec![2; 8192])),
        "over queue_bytes"
    );
    assert_eq!(w.stats().dropped_ops, 1);
    // Back within the lease's TTL of the last renewal or not, A still holds "a" (nobody
    // else wanted it): what waited lands.
    e.restart().unwrap();
    assert!(w.flush(Duration::from_secs(10)), "{:?}", w.last_error());
    assert!(!w.stats().failing);
    let until = Instant::now() + Duration::from_secs(5);
    while !matches!(
        a.wait_event(Duration::from_millis(500)),
        Some(ClusterEvent::Reachable)
    ) {
        assert!(Instant::now() < until, "no Reachable event");
    }
    let b = instance(&e, "B", &["b", "a"]);
    let ClusterEvent::Acquired { shard, .. } = next(&b, Duration::from_secs(5)) else {
        panic!()
    };
    assert_eq!(shard, "b", "\"a\" stays A's");
    a.abandon();
    let ClusterEvent::Acquired { shard, state, .. } = next(&b, Duration::from_secs(8)) else {
        panic!()
    };
    assert_eq!(shard, "a");
    assert_eq!(state.sessions, vec![(1, vec![1; 100])]);
}

#[test]
#[ignore = "needs etcd (scripts/setup.sh)"]
fn a_hot_standby_follows_the_records_and_takes_over_without_reading_them() {
    let e = etcd();
    let a = instance(&e, "A", &["a"]);
    assert!(matches!(
        next(&a, Duration::from_secs(5)),
        ClusterEvent::Acquired { .. }
    ));
    let w = a.writer("a", WriterOptions::default());
    w.submit(Op::SetRecovery(7));
    w.submit(Op::PutSession(1, b"one".to_vec()));
    w.submit(Op::PutSession(2, b"two".to_vec()));
    assert!(w.flush(Duration::from_secs(5)));

    let mut o = options(&e, "B", &["b", "a"]);
    o.hot_standby = true;
    let b = Cluster::start(o).unwrap();
    let mut mirror: Option<BTreeMap<u64, Vec<u8>>> = None;
    let until = Instant::now() + Duration::from_secs(5);
    while mirror.is_none() {
        assert!(Instant::now() < until, "no Mirror of a");
        if let ClusterEvent::Mirror { shard, state } = next(&b, Duration::from_secs(5)) {
            assert_eq!(shard, "a");
            assert_eq!(state.recovery, Some(7));
            mirror = Some(state.sessions.into_iter().collect());
        }
    }
    let mut mirror = mirror.unwrap();
    assert_eq!(mirror.len(), 2);
    // A goes on, then dies right after its last write: B follows every change, and takes
    // a over with nothing left to read.
    w.submit(Op::PutSession(3, b"three".to_vec()));
    w.submit(Op::DeleteSession(1));
    w.submit(Op::PutSession(2, b"two, modified".to_vec()));
    assert!(w.flush(Duration::from_secs(5)));
    a.abandon();
    loop {
        match next(&b, Duration::from_secs(8)) {
            ClusterEvent::MirrorChanges { shard, changes } => {
                assert_eq!(shard, "a");
                for c in changes {
                    match c {
                        Record::Session(s, Some(v)) => {
                            mirror.insert(s, v);
                        }
                        Record::Session(s, None) => {
                            mirror.remove(&s);
                        }
                        _ => {}
                    }
                }
            }
            ClusterEvent::Acquired { shard, .. } if shard == "b" => {}
            ClusterEvent::Acquired {
                shard,
                from,
                state,
                mirrored,
            } => {
                assert_eq!((shard.as_str(), from.as_deref()), ("a", Some("A")));
                assert!(mirrored, "a hot takeover");
                assert_eq!(state, upf_state::Loaded::default(), "nothing read");
                break;
            }
            ClusterEvent::Unmirror { shard } => panic!("mirror of {shard} dropped"),
            _ => {}
        }
    }
    let expect: BTreeMap<u64, Vec<u8>> = [(2, b"two, modified".to_vec()), (3, b"three".to_vec())]
        .into_iter()
        .collect();
    assert_eq!(mirror, expect);
}
