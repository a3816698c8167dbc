//! TS 29.244 §6.4 reliable delivery: response cache and retransmission of our requests.
//!
//! PFCP runs over UDP; a request is retransmitted by its sender every T1 up to N1 times, and a
//! receiver answers a retransmitted request (same peer, same sequence number, §7.2.2.1) with
//! the response it gave the first time rather than executing it again.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Largest PFCP sequence number: the field is 24 bits (§7.2.2.1).
pub const MAX_SEQUENCE: u32 = 0x00FF_FFFF;

#[derive(Debug, Clone)]
struct Cached {
    inserted: Instant,
    generation: u64,
    bytes: Vec<u8>,
}

/// Responses we sent, kept so that a retransmitted request (same peer, same sequence number) is
/// answered with the same bytes without being executed again (§6.4). Bounded: at most
/// `capacity` entries (oldest evicted first), each kept for `ttl` (should exceed the peer's
/// T1×N1; default 30 s is the caller's business).
///
/// Since `ttl` is constant, insertion order is expiry order: a `VecDeque` in insertion order is
/// the expiry queue. Entries replaced or forgotten leave stale queue items, recognised by their
/// generation and compacted away once they outnumber the live entries.
#[derive(Debug, Clone)]
pub struct ResponseCache {
    capacity: usize,
    ttl: Duration,
    map: HashMap<(SocketAddr, u32), Cached>,
    order: VecDeque<(Instant, u64, SocketAddr, u32)>,
    generation: u64,
}

impl ResponseCache {
    /// At most `capacity` responses, each kept `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            capacity,
            ttl,
            map: HashMap::new(),
            order: VecDeque::new(),
            generation: 0,
        }
    }

    fn expired(&self, now: Instant, inserted: Instant) -> bool {
        now.saturating_duration_since(inserted) >= self.ttl
    }

    fn is_current(&self, generation: u64, peer: SocketAddr, seq: u32) -> bool {
        self.map
            .get(&(peer, seq))
            .is_some_and(|c| c.generation == generation)
    }

    /// The response given to request `seq` from `peer`, if still cached.
    pub fn get(&mut self, now: Instant, peer: SocketAddr, seq: u32) -> Option<&[u8]> {
        let inserted = self.map.get(&(peer, seq))?.inserted;
        if self.expired(now, inserted) {
            self.map.remove(&(peer, seq));
            return None;
        }
        self.map.get(&(peer, seq)).map(|c| c.bytes.as_slice())
    }

    /// Caches the response to request `seq` from `peer`, replacing an earlier one; evicts the
    /// oldest entries beyond `capacity`.
    pub fn insert(&mut self, now: Instant, peer: SocketAddr, seq: u32, response: Vec<u8>) {
        if self.capacity == 0 {
            return;
        }
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        self.map.insert(
            (peer, seq),
            Cached {
                inserted: now,
                generation,
                bytes: response,
            },
        );
        self.order.push_back((now, generation, peer, seq));
        while self.map.len() > self.capacity {
            match self.order.pop_front() {
                Some((_, g, p, s)) => {
                    if self.is_current(g, p, s) {
                        self.map.remove(&(p, s));
                    }
                }
                None => break,
            }
        }
        self.compact();
    }

    /// Drops queue items of replaced or forgotten entries once they dominate the queue.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 16 {
            let map = &self.map;
            self.order
                .retain(|&(_, g, p, s)| map.get(&(p, s)).is_some_and(|c| c.generation == g));
        }
    }

    /// Drops expired entries (called from the agent's timeout handling). Amortised O(1) per
    /// entry.
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(inserted, g, p, s)) = self.order.front() {
            if !self.is_current(g, p, s) {
                self.order.pop_front();
            } else if self.expired(now, inserted) {
                self.order.pop_front();
                self.map.remove(&(p, s));
            } else {
                break;
            }
        }
        // A burst leaves both tables at its peak size; give that back once they are mostly
        // empty (shrinking to twice the entries keeps this amortised O(1)).
        if self.map.capacity() > 4 * self.map.len() + 64 {
            self.map.shrink_to(2 * self.map.len());
        }
        if self.order.capacity() > 4 * self.order.len() + 64 {
            self.order.shrink_to(2 * self.order.len());
        }
    }

    /// When the oldest entry expires (None if empty, or if that instant is not representable).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.order
            .iter()
            .find(|&&(_, g, p, s)| self.is_current(g, p, s))
            .and_then(|&(inserted, ..)| inserted.checked_add(self.ttl))
    }

    /// Number of cached responses (some may have expired but not yet been dropped).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops every entry of a peer (association released).
    pub fn forget_peer(&mut self, peer: SocketAddr) {
        self.map.retain(|&(p, _), _| p != peer);
        self.order.retain(|&(_, _, p, _)| p != peer);
    }
}

/// An outstanding request: (peer, sequence number).
type Key = (SocketAddr, u32);
/// A deadline, and an insertion counter to break ties.
type TimerKey = (Instant, u64);

#[derive(Debug)]
struct Request<T> {
    bytes: Vec<u8>,
    ctx: T,
    retries_left: u32,
    /// Key in the timer map; None if the deadline is not representable (never times out).
    timer: Option<(Instant, u64)>,
}

/// Requests this node sent (heartbeats, association setup, session reports, node reports),
/// retransmitted every T1 up to N1 times, then given up (§6.4: "T1 and N1"). `T` is the
/// caller's context for each request (what to do on response / give-up).
///
/// After the first transmission (the caller's), a request is retransmitted T1 after each
/// transmission, at most N1 times; T1 after the last retransmission it is given up. With
/// t1 = 3 s, n1 = 3: sent at 0, resent at 3, 6, 9, given up at 12.
#[derive(Debug)]
pub struct Outstanding<T> {
    t1: Duration,
    n1: u32,
    requests: HashMap<(SocketAddr, u32), Request<T>>,
    /// Deadlines in order; the u64 breaks ties (insertion counter).
    timers: BTreeMap<(Instant, u64), (SocketAddr, u32)>,
    /// How many outstanding requests use each sequence number (for `next_sequence`).
    seqs: HashMap<u32, u32>,
    next_seq: u32,
    tie: u64,
}

impl<T> Outstanding<T> {
    /// Retransmission timer T1 and maximum number of retransmissions N1.
    pub fn new(t1: Duration, n1: u32) -> Self {
        Self {
            t1,
            n1,
            requests: HashMap::new(),
            timers: BTreeMap::new(),
            seqs: HashMap::new(),
            next_seq: 1,
            tie: 0,
        }
    }

    /// Sequence numbers are 24 bits (§7.2.2.1): the caller allocates them with
    /// `next_sequence` (wrapping 1..=0xFFFFFF, skipping numbers currently outstanding).
    pub fn next_sequence(&mut self) -> u32 {
        let mut candidate = self.next_seq;
        for _ in 0..MAX_SEQUENCE {
            if !self.seqs.contains_key(&candidate) {
                break;
            }
            candidate = Self::after(candidate);
        }
        self.next_seq = Self::after(candidate);
        candidate
    }

    fn after(seq: u32) -> u32 {
        if seq >= MAX_SEQUENCE {
            1
        } else {
            seq + 1
        }
    }

    fn schedule(&mut self, now: Instant, key: (SocketAddr, u32)) -> Option<(Instant, u64)> {
        let due = now.checked_add(self.t1)?;
        self.tie = self.tie.wrapping_add(1);
        let k = (due, self.tie);
        self.timers.insert(k, key);
        Some(k)
    }

    fn remove(&mut self, key: (SocketAddr, u32)) -> Option<Request<T>> {
        let r = self.requests.remove(&key)?;
        if let Some(t) = r.timer {
            self.timers.remove(&t);
        }
        if let Some(n) = self.seqs.get_mut(&key.1) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.seqs.remove(&key.1);
            }
        }
        Some(r)
    }

    /// Records a request just sent (the first transmission is the caller's job). A request
    /// already outstanding to this peer with this sequence number is replaced.
    pub fn sent(&mut self, now: Instant, peer: SocketAddr, seq: u32, bytes: Vec<u8>, ctx: T) {
        let key = (peer, seq);
        self.remove(key);
        let timer = self.schedule(now, key);
        self.requests.insert(
            key,
            Request {
                bytes,
                ctx,
                retries_left: self.n1,
                timer,
            },
        );
        *self.seqs.entry(seq).or_insert(0) += 1;
    }

    /// A response arrived: removes and returns the context if it matches an outstanding request
    /// from this peer with this sequence number (a response from another address does not
    /// match).
    pub fn answered(&mut self, peer: SocketAddr, seq: u32) -> Option<T> {
        self.remove((peer, seq)).map(|r| r.ctx)
    }

    /// The earliest retransmission or give-up deadline.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.timers.keys().next().map(|&(at, _)| at)
    }

    /// Retransmits what is due: calls `resend(peer, bytes)` for each due request that has
    /// retries left (rescheduling it T1 later), and returns (peer, seq, ctx) of those that
    /// exhausted N1 retransmissions (given up; removed). Each request is handled at most once
    /// per call, so a zero T1 cannot loop.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        mut resend: impl FnMut(SocketAddr, &[u8]),
    ) -> Vec<(SocketAddr, u32, T)> {
        let mut due = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        let mut given_up = Vec::new();
        for key in due {
            let retry = match self.requests.get_mut(&key) {
                Some(r) if r.retries_left > 0 => {
                    r.retries_left -= 1;
                    r.timer = None;
                    resend(key.0, &r.bytes);
                    true
                }
                Some(r) => {
                    r.timer = None;
                    false
                }
                None => continue,
            };
            if retry {
                let timer = self.schedule(now, key);
                if let Some(r) = self.requests.get_mut(&key) {
                    r.timer = timer;
                }
            } else if let Some(r) = self.remove(key) {
                given_up.push((key.0, key.1, r.ctx));
            }
        }
        given_up
    }

    /// Cancels every request to a peer, returning their contexts (in deadline order).
    pub fn cancel_peer(&mut self, peer: SocketAddr) -> Vec<(u32, T)> {
        let mut keys: Vec<(Option<TimerKey>, Key)> = self
            .requests
            .iter()
            .filter(|(k, _)| k.0 == peer)
            .map(|(&k, r)| (r.timer, k))
            .collect();
        keys.sort_by_key(|&(t, k)| (t.is_none(), t, k.1));
        keys.into_iter()
            .filter_map(|(_, k)| self.remove(k).map(|r| (k.1, r.ctx)))
            .collect()
    }

    /// Number of outstanding requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request is outstanding.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, n], 8805))
    }
    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn cache_hit_same_bytes_only_same_peer_and_seq() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(10, s(30));
        assert!(c.is_empty());
        c.insert(t0, peer(1), 7, vec![1, 2, 3]);
        assert_eq!(c.get(t0 + s(1), peer(1), 7), Some(&[1u8, 2, 3][..]));
        assert_eq!(c.get(t0, peer(2), 7), None);
        assert_eq!(c.get(t0, peer(1), 8), None);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn cache_expires_after_ttl() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(10, s(30));
        c.insert(t0, peer(1), 1, vec![1]);
        c.insert(t0 + s(10), peer(1), 2, vec![2]);
        assert_eq!(c.next_expiry(), Some(t0 + s(30)));
        c.expire(t0 + s(29));
        assert_eq!(c.len(), 2);
        c.expire(t0 + s(30));
        assert_eq!(c.len(), 1);
        assert_eq!(c.next_expiry(), Some(t0 + s(40)));
        // get does not return an expired entry even before expire() runs.
        assert_eq!(c.get(t0 + s(40), peer(1), 2), None);
        assert!(c.is_empty());
        c.expire(t0 + s(41));
        assert_eq!(c.next_expiry(), None);
    }

    #[test]
    fn cache_gives_back_its_peak_size_once_expired() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(10_000, s(30));
        for seq in 0..5000 {
            c.insert(t0, peer(1), seq, vec![0]);
        }
        c.insert(t0 + s(20), peer(1), 9999, vec![1]);
        c.expire(t0 + s(30));
        assert_eq!(c.len(), 1);
        assert!(c.map.capacity() < 100 && c.order.capacity() < 100);
        assert_eq!(c.get(t0 + s(31), peer(1), 9999), Some(&[1u8][..]));
    }

    #[test]
    fn cache_capacity_evicts_oldest() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(2, s(30));
        c.insert(t0, peer(1), 1, vec![1]);
        c.insert(t0, peer(1), 2, vec![2]);
        c.insert(t0, peer(1), 3, vec![3]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(t0, peer(1), 1), None);
        assert_eq!(c.get(t0, peer(1), 3), Some(&[3u8][..]));
        let mut z = ResponseCache::new(0, s(30));
        z.insert(t0, peer(1), 1, vec![1]);
        assert!(z.is_empty());
    }

    #[test]
    fn cache_reinsert_replaces_and_restarts_ttl() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(2, s(30));
        c.insert(t0, peer(1), 1, vec![1]);
        c.insert(t0 + s(1), peer(1), 2, vec![2]);
        c.insert(t0 + s(2), peer(1), 1, vec![9]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.next_expiry(), Some(t0 + s(31)));
        c.expire(t0 + s(31));
        assert_eq!(c.get(t0 + s(31), peer(1), 1), Some(&[9u8][..]));
        // Capacity eviction skips the stale item of the replaced entry.
        c.insert(t0 + s(3), peer(1), 3, vec![3]);
        assert_eq!(c.get(t0 + s(3), peer(1), 1), Some(&[9u8][..]));
        assert_eq!(c.get(t0 + s(3), peer(1), 3), Some(&[3u8][..]));
    }

    #[test]
    fn cache_forget_peer() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(10, s(30));
        c.insert(t0, peer(1), 1, vec![1]);
        c.insert(t0, peer(2), 1, vec![2]);
        c.insert(t0, peer(1), 2, vec![3]);
        c.forget_peer(peer(1));
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(t0, peer(2), 1), Some(&[2u8][..]));
        assert_eq!(c.get(t0, peer(1), 1), None);
    }

    #[test]
    fn cache_queue_stays_bounded_under_reinsert() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(4, s(30));
        for _ in 0..10_000 {
            c.insert(t0, peer(1), 1, vec![1]);
        }
        assert_eq!(c.len(), 1);
        assert!(c.order.len() <= 2 * c.len() + 17);
    }

    #[test]
    fn retransmission_schedule_t1_3s_n1_3() {
        let t0 = Instant::now();
        let mut o = Outstanding::new(s(3), 3);
        let seq = o.next_sequence();
        o.sent(t0, peer(1), seq, vec![0xAA], "hb");
        let mut sent_at = Vec::new();
        let mut given_up_at = None;
        for tick in 0..=30u64 {
            let now = t0 + Duration::from_millis(500 * tick);
            if o.next_timeout().is_some_and(|t| t <= now) {
                let g = o.handle_timeout(now, |p, b| {
                    assert_eq!((p, b), (peer(1), &[0xAA][..]));
                    sent_at.push(now - t0);
                });
                if !g.is_empty() {
                    assert_eq!(g, vec![(peer(1), seq, "hb")]);
                    given_up_at = Some(now - t0);
                }
            }
        }
        assert_eq!(sent_at, vec![s(3), s(6), s(9)]);
        assert_eq!(given_up_at, Some(s(12)));
        assert!(o.is_empty());
        assert_eq!(o.next_timeout(), None);
    }

    #[test]
    fn answered_matches_peer_and_seq_only() {
        let t0 = Instant::now();
        let mut o = Outstanding::new(s(3), 3);
        o.sent(t0, peer(1), 5, vec![], 1u32);
        assert_eq!(o.answered(peer(2), 5), None);
        assert_eq!(o.answered(peer(1), 6), None);
        assert_eq!(o.len(), 1);
        assert_eq!(o.answered(peer(1), 5), Some(1));
        assert_eq!(o.answered(peer(1), 5), None);
        assert!(o.is_empty());
        assert!(o
            .handle_timeout(t0 + s(100), |_, _| panic!("nothing to resend"))
            .is_empty());
    }

    #[test]
    fn sequence_wraps_and_skips_outstanding() {
        let t0 = Instant::now();
        let mut o = Outstanding::<()>::new(s(3), 1);
        assert_eq!(o.next_sequence(), 1);
        o.sent(t0, peer(1), 2, vec![], ());
        assert_eq!(o.next_sequence(), 3);
        o.next_seq = MAX_SEQUENCE;
        assert_eq!(o.next_sequence(), MAX_SEQUENCE);
        assert_eq!(o.next_sequence(), 1);
        assert_eq!(o.next_sequence(), 3);
        o.answered(peer(1), 2);
        o.next_seq = 2;
        assert_eq!(o.next_sequence(), 2);
    }

    #[test]
    fn cancel_peer_returns_contexts() {
        let t0 = Instant::now();
        let mut o = Outstanding::new(s(3), 3);
        o.sent(t0, peer(1), 1, vec![], 'a');
        o.sent(t0 + s(1), peer(2), 2, vec![], 'b');
        o.sent(t0 + s(2), peer(1), 3, vec![], 'c');
        assert_eq!(o.cancel_peer(peer(1)), vec![(1, 'a'), (3, 'c')]);
        assert_eq!(o.len(), 1);
        assert_eq!(o.next_timeout(), Some(t0 + s(4)));
        assert!(o.cancel_peer(peer(1)).is_empty());
    }

    #[test]
    fn zero_t1_and_zero_n1() {
        let t0 = Instant::now();
        let mut o = Outstanding::new(Duration::ZERO, 2);
        o.sent(t0, peer(1), 1, vec![1], ());
        let mut n = 0;
        assert!(o.handle_timeout(t0, |_, _| n += 1).is_empty());
        assert_eq!(n, 1);
        assert!(o.handle_timeout(t0, |_, _| n += 1).is_empty());
        assert_eq!(o.handle_timeout(t0, |_, _| n += 1), vec![(peer(1), 1, ())]);
        assert_eq!(n, 2);

        let mut o = Outstanding::new(s(3), 0);
        o.sent(t0, peer(1), 1, vec![1], ());
        assert!(o.handle_timeout(t0 + s(2), |_, _| panic!()).is_empty());
        assert_eq!(o.handle_timeout(t0 + s(3), |_, _| panic!()).len(), 1);
    }

    #[test]
    fn resent_replaces_duplicate_key() {
        let t0 = Instant::now();
        let mut o = Outstanding::new(s(3), 1);
        o.sent(t0, peer(1), 1, vec![1], 'a');
        o.sent(t0 + s(1), peer(1), 1, vec![2], 'b');
        assert_eq!(o.len(), 1);
        assert_eq!(o.next_timeout(), Some(t0 + s(4)));
        assert_eq!(o.answered(peer(1), 1), Some('b'));
        assert_eq!(o.next_timeout(), None);
        assert!(o.seqs.is_empty());
    }

    proptest! {
        /// The cache never exceeds its capacity and always serves the latest response of a
        /// live key.
        #[test]
        fn cache_bounded(cap in 0usize..6, ops in prop::collection::vec((0u8..3, 0u32..8, 0u64..50), 0..200)) {
            let t0 = Instant::now();
            let mut c = ResponseCache::new(cap, s(20));
            let mut now = t0;
            for (p, seq, dt) in ops {
                now += Duration::from_millis(dt * 100);
                let body = vec![p, u8::try_from(seq).unwrap()];
                c.insert(now, peer(p), seq, body.clone());
                prop_assert!(c.len() <= cap);
                if cap > 0 {
                    prop_assert_eq!(c.get(now, peer(p), seq), Some(&body[..]));
                }
                c.expire(now);
                if let Some(e) = c.next_expiry() {
                    prop_assert!(e > now);
                }
            }
        }

        /// Every request is resent exactly N1 times and given up exactly once, whatever the
        /// tick granularity.
        #[test]
        fn outstanding_counts(n1 in 0u32..5, reqs in 1usize..6, step_ms in 1u64..4000) {
            let t0 = Instant::now();
            let mut o = Outstanding::new(s(3), n1);
            for i in 0..reqs {
                let seq = o.next_sequence();
                o.sent(t0, peer(u8::try_from(i).unwrap()), seq, vec![], i);
            }
            let mut resends = 0u32;
            let mut gone = Vec::new();
            let mut now = t0;
            while !o.is_empty() {
                now += Duration::from_millis(step_ms);
                gone.extend(o.handle_timeout(now, |_, _| resends += 1).into_iter().map(|g| g.2));
            }
            gone.sort_unstable();
            prop_assert_eq!(gone, (0..reqs).collect::<Vec<_>>());
            prop_assert_eq!(resends, n1 * u32::try_from(reqs).unwrap());
        }
    }
}
