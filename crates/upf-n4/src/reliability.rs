//! TS 29.244 §6.4 reliable delivery: response cache and retransmission of our requests.
//!
//! PFCP runs over UDP; a request is retransmitted by its sender every T1 up to N1 times, and a
//! receiver answers a retransmitted request (same peer, same sequence number, §7.2.2.1) with
//! the response it gave the first time rather than executing it again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Largest PFCP sequence number: the field is 24 bits (§7.2.2.1).
pub const MAX_SEQUENCE: u32 = 0x00FF_FFFF;

/// A request's (or response's) peer and sequence number.
type Key = (SocketAddr, u32);

#[derive(Debug, Clone)]
struct Cached {
    /// Insertion number: orders entries by age, globally and per peer.
    id: u64,
    inserted: Instant,
    response: Vec<u8>,
}

/// What an entry costs besides its payload's capacity: its slot in the map, in the age order
/// and in its peer's age order, each counted twice for the empty slots of a hash table (at
/// most 7/8 full, doubling) and of half-full B-tree nodes. 290 bytes on 64-bit targets.
pub const CACHE_ENTRY_OVERHEAD: usize = 2
    * (std::mem::size_of::<(Key, Cached)>()
        + 1
        + std::mem::size_of::<(u64, Key)>()
        + std::mem::size_of::<u64>());

/// Why an entry left the response cache before it expired (index into
/// [`CacheStats::evicted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The count bound (`CacheBounds::entries`): the oldest entry of any peer.
    Entries = 0,
    /// The total bytes bound: the oldest entry of any peer.
    Bytes = 1,
    /// The per-peer bytes bound: that peer's oldest entry.
    PeerBytes = 2,
}

impl Eviction {
    pub const ALL: [Eviction; 3] = [Self::Entries, Self::Bytes, Self::PeerBytes];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Entries => "entries",
            Self::Bytes => "bytes",
            Self::PeerBytes => "peer_bytes",
        }
    }
}

/// Bounds of the response cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBounds {
    /// Responses held at most.
    pub entries: usize,
    /// Bytes held at most (payload capacity plus [`CACHE_ENTRY_OVERHEAD`] per entry) …
    pub bytes: usize,
    /// … and by the responses to one peer IP address (whatever its ports).
    pub bytes_per_peer: usize,
    /// How long a response is kept: the peer's retransmission window.
    pub ttl: Duration,
}

/// What the response cache holds and what it let go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    /// Entries dropped before expiry to stay within a bound, by [`Eviction`].
    pub evicted: [u64; 3],
    /// Entries dropped because their time was up.
    pub expired: u64,
}

impl CacheStats {
    /// Adds `o`'s (the caches of several shards' agents, one figure).
    pub fn add(&mut self, o: &CacheStats) {
        self.entries += o.entries;
        self.bytes += o.bytes;
        self.evicted
            .iter_mut()
            .zip(o.evicted)
            .for_each(|(x, y)| *x += y);
        self.expired += o.expired;
    }
}

/// One peer address's share of the cache.
#[derive(Debug, Clone, Default)]
struct PeerShare {
    bytes: usize,
    /// Its entries' insertion numbers, oldest first.
    ids: BTreeSet<u64>,
}

/// Responses we sent, kept so that a retransmitted request (same peer, same sequence number) is
/// answered with the same bytes without being executed again (§6.4). Each is kept for `ttl`;
/// the cache holds at most `entries` responses and `bytes` bytes, and the responses to one peer
/// address at most `bytes_per_peer`. Past a peer's bound its own oldest response goes; past the
/// total bounds the oldest of anyone's: so a peer flooding it evicts only itself until the
/// total is reached.
///
/// Since `ttl` is constant, insertion order is expiry order: `order` (by insertion number) is
/// both the eviction and the expiry queue.
#[derive(Debug, Clone)]
pub struct ResponseCache {
    bounds: CacheBounds,
    map: HashMap<Key, Cached>,
    order: BTreeMap<u64, Key>,
    peers: HashMap<IpAddr, PeerShare>,
    next_id: u64,
    stats: CacheStats,
}

/// What an entry whose payload has this capacity costs.
fn footprint(capacity: usize) -> usize {
    capacity.saturating_add(CACHE_ENTRY_OVERHEAD)
}

impl ResponseCache {
    pub fn new(bounds: CacheBounds) -> Self {
        Self {
            bounds,
            map: HashMap::new(),
            order: BTreeMap::new(),
            peers: HashMap::new(),
            next_id: 0,
            stats: CacheStats::default(),
        }
    }

    fn expired(&self, now: Instant, inserted: Instant) -> bool {
        now.saturating_duration_since(inserted) >= self.bounds.ttl
    }

    fn remove(&mut self, key: Key) -> Option<Cached> {
        let c = self.map.remove(&key)?;
        self.order.remove(&c.id);
        let size = footprint(c.response.capacity());
        self.stats.bytes -= size;
        let ip = key.0.ip();
        if let Some(p) = self.peers.get_mut(&ip) {
            p.bytes -= size;
            p.ids.remove(&c.id);
            if p.ids.is_empty() {
                self.peers.remove(&ip);
            }
        }
        Some(c)
    }

    /// The response given to request `seq` from `peer`, if still cached.
    pub fn get(&mut self, now: Instant, peer: SocketAddr, seq: u32) -> Option<&[u8]> {
        let inserted = self.map.get(&(peer, seq))?.inserted;
        if self.expired(now, inserted) {
            self.remove((peer, seq));
            self.stats.expired += 1;
            return None;
        }
        self.map.get(&(peer, seq)).map(|c| c.response.as_slice())
    }

    /// Caches the response to request `seq` from `peer`, replacing an earlier one; then evicts
    /// the peer's oldest entries beyond its bound, and the oldest of all beyond the total
    /// bounds (which may be this one, if it alone exceeds a bound).
    pub fn insert(&mut self, now: Instant, peer: SocketAddr, seq: u32, response: Vec<u8>) {
        self.expire(now);
        if self.bounds.entries == 0 {
            return;
        }
        self.remove((peer, seq));
        let size = footprint(response.capacity());
        let id = self.next_id;
        self.next_id += 1;
        self.map.insert(
            (peer, seq),
            Cached {
                id,
                inserted: now,
                response,
            },
        );
        self.order.insert(id, (peer, seq));
        let share = self.peers.entry(peer.ip()).or_default();
        share.bytes += size;
        share.ids.insert(id);
        self.stats.bytes += size;

        let ip = peer.ip();
        while let Some(p) = self.peers.get(&ip) {
            if p.bytes <= self.bounds.bytes_per_peer {
                break;
            }
            let Some(key) = p.ids.first().and_then(|i| self.order.get(i)).copied() else {
                break;
            };
            self.remove(key);
            self.stats.evicted[Eviction::PeerBytes as usize] += 1;
        }
        loop {
            let reason = if self.stats.bytes > self.bounds.bytes {
                Eviction::Bytes
            } else if self.map.len() > self.bounds.entries {
                Eviction::Entries
            } else {
                break;
            };
            let Some((_, &key)) = self.order.first_key_value() else {
                break;
            };
            self.remove(key);
            self.stats.evicted[reason as usize] += 1;
        }
    }

    /// Drops expired entries (called from the agent's timeout handling, and before each
    /// insert). O(log n) per entry dropped.
    pub fn expire(&mut self, now: Instant) {
        while let Some((_, &key)) = self.order.first_key_value() {
            match self.map.get(&key) {
                Some(c) if !self.expired(now, c.inserted) => break,
                _ => {
                    self.remove(key);
                    self.stats.expired += 1;
                }
            }
        }
        // A burst leaves the hash tables at their peak size; give that back once they are
        // mostly empty (shrinking to twice the entries keeps this amortised O(1)).
        if self.map.capacity() > 4 * self.map.len() + 64 {
            self.map.shrink_to(2 * self.map.len());
        }
        if self.peers.capacity() > 4 * self.peers.len() + 64 {
            self.peers.shrink_to(2 * self.peers.len());
        }
    }

    /// When the oldest entry expires (None if empty, or if that instant is not representable).
    pub fn next_expiry(&self) -> Option<Instant> {
        let (_, key) = self.order.first_key_value()?;
        self.map.get(key)?.inserted.checked_add(self.bounds.ttl)
    }

    /// Number of cached responses (some may have expired but not yet been dropped).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// What it holds (entries, bytes) and has let go.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.map.len(),
            ..self.stats
        }
    }

    /// Drops every entry of a peer (association released); not counted as evictions.
    pub fn forget_peer(&mut self, peer: SocketAddr) {
        let Some(p) = self.peers.get(&peer.ip()) else {
            return;
        };
        let keys: Vec<Key> = p
            .ids
            .iter()
            .filter_map(|i| self.order.get(i))
            .filter(|k| k.0 == peer)
            .copied()
            .collect();
        for k in keys {
            self.remove(k);
        }
    }
}

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
    /// The requests' payload bytes (capacity), for the caller's bound.
    bytes: usize,
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
            bytes: 0,
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
        self.bytes -= r.bytes.capacity();
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
        self.bytes += bytes.capacity();
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

    /// Payload bytes of the outstanding requests.
    pub fn bytes(&self) -> usize {
        self.bytes
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
    /// A cache bounded by count only.
    fn counted(entries: usize, ttl: Duration) -> ResponseCache {
        ResponseCache::new(CacheBounds {
            entries,
            bytes: usize::MAX,
            bytes_per_peer: usize::MAX,
            ttl,
        })
    }

    #[test]
    fn cache_hit_same_bytes_only_same_peer_and_seq() {
        let t0 = Instant::now();
        let mut c = counted(10, s(30));
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
        let mut c = counted(10, s(30));
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
        let mut c = counted(10_000, s(30));
        for seq in 0..5000 {
            c.insert(t0, peer(1), seq, vec![0]);
        }
        c.insert(t0 + s(20), peer(1), 9999, vec![1]);
        c.expire(t0 + s(30));
        assert_eq!(c.len(), 1);
        assert!(c.map.capacity() < 100 && c.peers.capacity() < 100);
        assert_eq!(c.get(t0 + s(31), peer(1), 9999), Some(&[1u8][..]));
    }

    #[test]
    fn cache_capacity_evicts_oldest() {
        let t0 = Instant::now();
        let mut c = counted(2, s(30));
        c.insert(t0, peer(1), 1, vec![1]);
        c.insert(t0, peer(1), 2, vec![2]);
        c.insert(t0, peer(1), 3, vec![3]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(t0, peer(1), 1), None);
        assert_eq!(c.get(t0, peer(1), 3), Some(&[3u8][..]));
        let mut z = counted(0, s(30));
        z.insert(t0, peer(1), 1, vec![1]);
        assert!(z.is_empty());
    }

    #[test]
    fn cache_reinsert_replaces_and_restarts_ttl() {
        let t0 = Instant::now();
        let mut c = counted(2, s(30));
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
        let mut c = counted(10, s(30));
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
        let mut c = counted(4, s(30));
        for _ in 0..10_000 {
            c.insert(t0, peer(1), 1, vec![1]);
        }
        assert_eq!(c.len(), 1);
        assert_eq!(c.order.len(), 1);
        assert_eq!(c.stats().bytes, 1 + CACHE_ENTRY_OVERHEAD);
    }

    fn at(ip: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, ip], port))
    }
    /// A payload whose entry costs exactly `n` bytes (n ≥ the overhead).
    fn costing(n: usize) -> Vec<u8> {
        vec![0; n - CACHE_ENTRY_OVERHEAD]
    }
    fn bounded(entries: usize, bytes: usize, bytes_per_peer: usize) -> ResponseCache {
        ResponseCache::new(CacheBounds {
            entries,
            bytes,
            bytes_per_peer,
            ttl: s(30),
        })
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn cache_entry_overhead_is_what_the_docs_say() {
        assert_eq!(CACHE_ENTRY_OVERHEAD, 290);
    }

    #[test]
    fn cache_peer_bound_evicts_that_peers_oldest_whatever_its_port() {
        let t0 = Instant::now();
        let mut c = bounded(100, 10_000, 2_000);
        c.insert(t0, at(2, 8805), 1, costing(1_000));
        c.insert(t0, at(1, 1000), 1, costing(1_000));
        c.insert(t0, at(1, 2000), 1, costing(1_000));
        assert_eq!(c.stats().evicted, [0, 0, 0]);
        // Peer 1's third entry (another port, same address) evicts its own oldest.
        c.insert(t0, at(1, 3000), 1, costing(1_000));
        assert_eq!(c.stats().evicted, [0, 0, 1]);
        assert_eq!(c.get(t0, at(1, 1000), 1), None);
        assert!(c.get(t0, at(1, 2000), 1).is_some());
        assert!(
            c.get(t0, at(2, 8805), 1).is_some(),
            "the other peer's oldest stays"
        );
        assert_eq!(
            c.stats(),
            CacheStats {
                entries: 3,
                bytes: 3_000,
                evicted: [0, 0, 1],
                expired: 0
            }
        );
    }

    #[test]
    fn cache_total_bounds_evict_the_oldest_of_anyone() {
        let t0 = Instant::now();
        let mut c = bounded(100, 3_000, 2_000);
        c.insert(t0, at(2, 8805), 1, costing(1_000));
        c.insert(t0, at(1, 8805), 1, costing(1_000));
        c.insert(t0, at(1, 8805), 2, costing(1_000));
        c.insert(t0, at(3, 8805), 1, costing(1_000));
        assert_eq!(c.stats().evicted, [0, 1, 0]);
        assert_eq!(c.get(t0, at(2, 8805), 1), None);
        assert_eq!(c.stats().bytes, 3_000);

        let mut c = bounded(2, usize::MAX, usize::MAX);
        for ip in 1..=3u8 {
            c.insert(t0, at(ip, 8805), 0, vec![1]);
        }
        assert_eq!(c.stats().evicted, [1, 0, 0]);
        assert_eq!(c.get(t0, at(1, 8805), 0), None);
        assert!(c.get(t0, at(2, 8805), 0).is_some());
    }

    #[test]
    fn cache_keeps_no_entry_larger_than_a_bound() {
        let t0 = Instant::now();
        let mut c = bounded(100, 10_000, 2_000);
        c.insert(t0, at(1, 8805), 1, costing(1_000));
        c.insert(t0, at(1, 8805), 2, costing(2_001));
        assert_eq!(
            c.stats().evicted,
            [0, 0, 2],
            "its own older entry went first"
        );
        assert!(c.is_empty());
        assert_eq!(c.stats().bytes, 0);
        assert!(c.peers.is_empty());
    }

    #[test]
    fn cache_counts_expiries_in_get_and_expire() {
        let t0 = Instant::now();
        let mut c = bounded(100, 10_000, 10_000);
        c.insert(t0, at(1, 8805), 1, vec![1]);
        c.insert(t0, at(1, 8805), 2, vec![1]);
        assert_eq!(c.get(t0 + s(30), at(1, 8805), 1), None);
        c.expire(t0 + s(30));
        assert_eq!(c.stats().expired, 2);
        assert_eq!((c.stats().entries, c.stats().bytes), (0, 0));
        // Forgetting a peer is neither.
        c.insert(t0 + s(31), at(1, 8805), 3, vec![1]);
        c.insert(t0 + s(31), at(1, 9999), 3, vec![1]);
        c.forget_peer(at(1, 8805));
        assert_eq!(c.len(), 1);
        assert_eq!(c.stats().expired, 2);
        assert_eq!(c.stats().evicted, [0, 0, 0]);
    }

    /// The sums the cache keeps agree with its contents, and every index has each entry once.
    fn check_accounting(c: &ResponseCache) -> Result<(), TestCaseError> {
        let mut per_peer: HashMap<IpAddr, (usize, usize)> = HashMap::new();
        let mut total = 0;
        for (k, e) in &c.map {
            let f = e.response.capacity() + CACHE_ENTRY_OVERHEAD;
            total += f;
            let p = per_peer.entry(k.0.ip()).or_default();
            p.0 += f;
            p.1 += 1;
            prop_assert_eq!(c.order.get(&e.id), Some(k));
            prop_assert!(c.peers[&k.0.ip()].ids.contains(&e.id));
        }
        prop_assert_eq!(c.stats().bytes, total);
        prop_assert_eq!(c.stats().entries, c.map.len());
        prop_assert_eq!(c.order.len(), c.map.len());
        prop_assert_eq!(c.peers.len(), per_peer.len());
        for (ip, (bytes, n)) in per_peer {
            prop_assert_eq!(c.peers[&ip].bytes, bytes);
            prop_assert_eq!(c.peers[&ip].ids.len(), n);
        }
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert {
            ip: u8,
            port: u16,
            seq: u32,
            len: usize,
        },
        Get {
            ip: u8,
            port: u16,
            seq: u32,
        },
        Expire,
        Forget {
            ip: u8,
            port: u16,
        },
    }

    fn op() -> impl Strategy<Value = (Op, u64)> {
        let ip = 1u8..4;
        let port = 1u16..3;
        let seq = 0u32..6;
        (
            prop_oneof![
                6 => (ip.clone(), port.clone(), seq.clone(), 0usize..3_000)
                    .prop_map(|(ip, port, seq, len)| Op::Insert { ip, port, seq, len }),
                2 => (ip.clone(), port.clone(), seq).prop_map(|(ip, port, seq)| Op::Get { ip, port, seq }),
                1 => Just(Op::Expire),
                1 => (ip, port).prop_map(|(ip, port)| Op::Forget { ip, port }),
            ],
            0u64..40,
        )
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
        o.sent(t0 + s(1), peer(2), 1, vec![3, 4], 'c');
        assert_eq!((o.len(), o.bytes()), (2, 3));
        assert_eq!(o.answered(peer(2), 1), Some('c'));
        assert_eq!(o.len(), 1);
        assert_eq!(o.next_timeout(), Some(t0 + s(4)));
        assert_eq!(o.answered(peer(1), 1), Some('b'));
        assert_eq!(o.bytes(), 0);
        assert_eq!(o.next_timeout(), None);
        assert!(o.seqs.is_empty());
    }

    proptest! {
        /// Whatever the inserts, gets, expiries and forgetting: the bounds hold, the sums agree
        /// with the contents, and an insert that hits only its peer's bound evicts nothing of
        /// another peer's.
        #[test]
        fn cache_bounded_in_bytes_per_peer(
            entries in 0usize..12,
            bytes in 0usize..12_000,
            bytes_per_peer in 0usize..6_000,
            ops in prop::collection::vec(op(), 0..150),
        ) {
            let t0 = Instant::now();
            let mut c = ResponseCache::new(CacheBounds { entries, bytes, bytes_per_peer, ttl: s(20) });
            let mut now = t0;
            for (op, dt) in ops {
                now += Duration::from_millis(dt * 100);
                match op {
                    Op::Insert { ip, port, seq, len } => {
                        let before = c.stats();
                        // Others' entries that are not due to expire by now.
                        let others: Vec<Key> = c
                            .map
                            .iter()
                            .filter(|(k, e)| k.0.ip() != at(ip, port).ip() && now < e.inserted + s(20))
                            .map(|(k, _)| *k)
                            .collect();
                        c.insert(now, at(ip, port), seq, vec![ip; len]);
                        let after = c.stats();
                        if after.evicted[0] == before.evicted[0] && after.evicted[1] == before.evicted[1] {
                            for k in others {
                                prop_assert!(c.map.contains_key(&k), "{:?} evicted by another peer's insert", k);
                            }
                        }
                        let fits = len + CACHE_ENTRY_OVERHEAD <= bytes.min(bytes_per_peer) && entries > 0;
                        if fits {
                            prop_assert_eq!(c.get(now, at(ip, port), seq), Some(&vec![ip; len][..]));
                        }
                    }
                    Op::Get { ip, port, seq } => {
                        if let Some(r) = c.get(now, at(ip, port), seq) {
                            prop_assert!(r.iter().all(|&b| b == ip));
                        }
                    }
                    Op::Expire => {
                        c.expire(now);
                        if let Some(e) = c.next_expiry() {
                            prop_assert!(e > now);
                        }
                    }
                    Op::Forget { ip, port } => {
                        c.forget_peer(at(ip, port));
                        prop_assert!(c.map.keys().all(|k| k.0 != at(ip, port)));
                    }
                }
                let st = c.stats();
                prop_assert!(st.bytes <= bytes);
                prop_assert!(st.entries <= entries);
                for p in c.peers.values() {
                    prop_assert!(p.bytes <= bytes_per_peer);
                }
                check_accounting(&c)?;
            }
        }

        /// One peer floods the cache with large responses: while the total is not reached, the
        /// other peers' responses all stay, and the flooder stays within its own bound.
        #[test]
        fn cache_flood_evicts_only_the_flooder(
            flood in prop::collection::vec(0usize..30_000, 1..200),
            others in 1usize..20,
        ) {
            let t0 = Instant::now();
            let per_peer = 100_000;
            let mut c = ResponseCache::new(CacheBounds {
                entries: 1_000,
                bytes: per_peer + others * (100 + CACHE_ENTRY_OVERHEAD),
                bytes_per_peer: per_peer,
                ttl: s(20),
            });
            for i in 0..others {
                c.insert(t0, at(2, 8805), u32::try_from(i).unwrap(), vec![2; 100]);
            }
            for (i, len) in flood.into_iter().enumerate() {
                let port = 1000 + u16::try_from(i % 7).unwrap();
                c.insert(t0 + s(1), at(1, port), u32::try_from(i).unwrap(), vec![1; len]);
            }
            for i in 0..others {
                prop_assert!(c.get(t0 + s(2), at(2, 8805), u32::try_from(i).unwrap()).is_some());
            }
            prop_assert_eq!(&c.stats().evicted[..2], &[0, 0][..]);
            prop_assert!(c.peers[&at(1, 1000).ip()].bytes <= per_peer);
            check_accounting(&c)?;
        }

        /// The cache never exceeds its capacity and always serves the latest response of a
        /// live key.
        #[test]
        fn cache_bounded(cap in 0usize..6, ops in prop::collection::vec((0u8..3, 0u32..8, 0u64..50), 0..200)) {
            let t0 = Instant::now();
            let mut c = counted(cap, s(20));
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
                o.sent(t0, peer(u8::try_from(i).unwrap()), seq, vec![0; i], i);
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
            prop_assert_eq!(o.bytes(), 0);
        }
    }
}
