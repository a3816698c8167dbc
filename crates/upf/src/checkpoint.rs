//! URR usage checkpoints (`[state] usage_checkpoint_ms`, #29): every interval the N4 loop
//! reads, one control message a worker, the usage since its last report of each session that
//! counted since the previous checkpoint, and hands it to the store with each URR's UR-SEQN
//! then. After a restart the usage of each URR not reported since its checkpoint (its UR-SEQN
//! unchanged) is carried into the workers: a restart loses at most one interval of usage.
//!
//! Never twice: a message carrying Usage Reports leaves only once the store has committed
//! everything submitted before it (the session record with the UR-SEQN the reports took).
//! Else a crash after the report and before that record would restore the old UR-SEQN, and
//! with it the checkpoint whose usage the report already carried. Such messages wait here
//! (bounded, counted) while the rest go at once; the loop looks again at the writer's commit
//! cadence.
//!
//! With the XDP engine, what the kernel counts for the sessions it runs is not read (a walk of
//! its maps each interval, by system calls); their checkpoints hold the workers' share only.

use crate::shards::{Shard, ShardPath};
use crate::state::Persist;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use upf_n4::{Agent, Transmit};
use upf_rules::Seid;
use upf_state::Op;

/// Bytes of messages one shard holds for the store at most; a message beyond is dropped
/// and counted (a request is sent again by its retransmission timer, a response when the
/// SMF retransmits its request). At 10 ms commits this is thousands of reports.
const HELD_BYTES: usize = 4 << 20;

/// How soon the loop looks again whether held messages may go: about the writer's commit
/// interval (10 ms), so that a held message waits for its commit and little more.
pub const HELD_POLL: Duration = Duration::from_millis(2);

/// What the checkpoints did, for /metrics (the held messages' counts summed over shards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints taken (bulk reads of the workers).
    pub checkpoints: u64,
    /// Session usage records handed to the store, and their bytes.
    pub records: u64,
    pub record_bytes: u64,
    /// Bulk reads that failed (a worker stopped).
    pub read_errors: u64,
    /// Sessions whose checkpoint was carried into the data path when they were restored
    /// (the others' held nothing, or a report went out after them).
    pub restored: u64,
    /// Messages carrying usage held until the store had their UR-SEQN, ever; held now;
    /// dropped (the held bytes full); the time they waited, in µs, summed.
    pub held: u64,
    pub held_now: u64,
    pub held_dropped: u64,
    pub held_us: u64,
}

/// How far the store's writer is: ops it accepted, ops durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub submitted: u64,
    pub durable: u64,
}

impl Progress {
    pub fn of(persist: &Persist) -> Self {
        let w = persist.writer();
        // Read in this order: what was durable before the mark cannot pass it.
        let submitted = w.submitted();
        Self {
            submitted,
            durable: w.durable(),
        }
    }
}

/// The checkpoint timer of the instance: one read of the workers an interval, each
/// session's record handed to the store of the shard it belongs to.
#[derive(Debug)]
pub struct Checkpoints {
    every: Duration,
    next: Instant,
    stats: CheckpointStats,
}

impl Checkpoints {
    /// Checkpoints every `every_ms` (`usage_checkpoint_ms`); none with 0.
    pub fn new(every_ms: u64, now: Instant) -> Option<Self> {
        let every = Duration::from_millis(every_ms);
        (every_ms > 0).then(|| Self {
            every,
            next: now + every,
            stats: CheckpointStats::default(),
        })
    }

    /// Carries the usage checkpoints a shard's store held into its restored sessions.
    pub fn restore(&mut self, agent: &Agent<ShardPath>, persist: &mut Persist) {
        let rows = persist.take_usage();
        if rows.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let n = rows.len();
        let mut carried = 0;
        for (seid, record) in rows {
            let seid = Seid(seid);
            if agent.session(seid).is_none() {
                // Its session was not restored: the row goes with it.
                persist.writer().submit(Op::DeleteSession(seid.0));
                continue;
            }
            let usage = agent.checkpointed_usage(seid, &record);
            if usage.is_empty() {
                continue;
            }
            let hub = agent.datapath().hub();
            match hub
                .datapath()
                .inner()
                .workers()
                .carry_usage(seid, usage, true)
            {
                Ok(()) => carried += 1,
                Err(e) => {
                    warn!(target: "upf::state", "usage of session {:#x} not restored: {e}", seid.0)
                }
            }
        }
        self.stats.restored += carried;
        info!(
            target: "upf::state",
            "usage checkpoints: {carried} of {n} sessions carried in (the others reported since, or counted nothing) in {} ms",
            t0.elapsed().as_millis()
        );
    }

    /// When the loop must come back for the next checkpoint.
    pub fn deadline(&self) -> Instant {
        self.next
    }

    /// Takes a checkpoint when one is due.
    pub fn tick(&mut self, now: Instant, shards: &[Shard]) {
        if now < self.next {
            return;
        }
        // A loop that fell behind takes one, not every one it missed.
        self.next = (self.next + self.every).max(now);
        self.checkpoint(shards);
    }

    /// Reads the usage of the sessions that counted since the last checkpoint (every
    /// shard's, in one read: the workers keep one mark of what they reported) and hands
    /// each to its shard's store.
    pub fn checkpoint(&mut self, shards: &[Shard]) {
        let Some(first) = shards.first() else { return };
        self.stats.checkpoints += 1;
        let read = {
            let hub = first.agent.datapath().hub();
            hub.datapath().inner().workers().unreported_changed()
        };
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                self.stats.read_errors += 1;
                warn!(target: "upf::state", "usage checkpoint: {e}");
                return;
            }
        };
        for (seid, usage) in read {
            // A session deleted since has no record: its row went with it.
            for s in shards {
                let (Some(p), Some(record)) = (&s.persist, s.agent.usage_record(seid, &usage))
                else {
                    continue;
                };
                self.stats.records += 1;
                self.stats.record_bytes += record.len() as u64;
                p.writer().submit(Op::PutUsage(seid.0, record));
                break;
            }
        }
    }

    /// The counters, with every shard's held messages.
    pub fn stats(&self, shards: &[Shard]) -> CheckpointStats {
        let mut k = self.stats;
        for h in shards.iter().filter_map(|s| s.held.as_ref()) {
            k.held += h.stats.held;
            k.held_now += h.stats.held_now;
            k.held_dropped += h.stats.held_dropped;
            k.held_us += h.stats.held_us;
        }
        k
    }
}

#[derive(Debug)]
struct Waiting {
    /// The writer's [`upf_state::Writer::submitted`] when it was held.
    mark: u64,
    since: Instant,
    t: Transmit,
}

/// A shard's messages that carry Usage Reports, waiting for its store.
#[derive(Debug, Default)]
pub struct Held {
    waiting: VecDeque<Waiting>,
    bytes: usize,
    stats: CheckpointStats,
}

impl Held {
    /// When the loop must look again: soon while messages wait.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        (!self.waiting.is_empty()).then(|| now + HELD_POLL)
    }

    /// `t` if it may go now; else it waits for the store (or is dropped when too much
    /// waits). `writer`: the store's [`Progress`] now.
    pub fn send_or_hold(
        &mut self,
        t: Transmit,
        writer: Progress,
        now: Instant,
    ) -> Option<Transmit> {
        if !t.usage {
            return Some(t);
        }
        if self.waiting.is_empty() && writer.durable >= writer.submitted {
            return Some(t);
        }
        if self.bytes + t.payload.len() > HELD_BYTES {
            self.stats.held_dropped += 1;
            return None;
        }
        self.stats.held += 1;
        self.bytes += t.payload.len();
        self.waiting.push_back(Waiting {
            mark: writer.submitted,
            since: now,
            t,
        });
        self.stats.held_now = self.waiting.len() as u64;
        None
    }

    /// The held messages the store has caught up with (`durable`, its
    /// [`upf_state::Writer::durable`]), in the order they were held.
    pub fn release(&mut self, durable: u64, now: Instant) -> Vec<Transmit> {
        let mut out = Vec::new();
        while self.waiting.front().is_some_and(|h| h.mark <= durable) {
            let Some(h) = self.waiting.pop_front() else {
                break;
            };
            self.bytes -= h.t.payload.len();
            let waited = now.saturating_duration_since(h.since).as_micros();
            self.stats.held_us += u64::try_from(waited).unwrap_or(u64::MAX);
            out.push(h.t);
        }
        self.stats.held_now = self.waiting.len() as u64;
        out
    }

    pub fn stats(&self) -> CheckpointStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoints() -> Held {
        Held::default()
    }

    fn t(usage: bool, tag: u8) -> Transmit {
        Transmit {
            dest: "127.0.0.1:8805".parse().unwrap(),
            payload: vec![tag; 100],
            usage,
        }
    }

    fn at(submitted: u64, durable: u64) -> Progress {
        Progress { submitted, durable }
    }

    /// A message carrying usage goes only once the store has committed what was submitted
    /// before it; others go at once; held ones go in order.
    #[test]
    fn usage_waits_for_the_store_and_nothing_else_does() {
        let now = Instant::now();
        let mut k = checkpoints();
        // Everything durable: it goes.
        assert!(k.send_or_hold(t(true, 1), at(7, 7), now).is_some());
        // The session record (op 8) not yet committed: held, and a second after it.
        assert!(k.send_or_hold(t(true, 2), at(8, 7), now).is_none());
        assert!(k.send_or_hold(t(false, 3), at(8, 7), now).is_some());
        assert!(
            k.send_or_hold(t(true, 4), at(9, 8), now).is_none(),
            "behind one held"
        );
        assert_eq!(k.stats().held_now, 2);
        assert!(
            k.release(7, now).is_empty(),
            "commits failing or slow: nothing goes"
        );
        let out = k.release(8, now + Duration::from_millis(10));
        assert_eq!(out.iter().map(|t| t.payload[0]).collect::<Vec<_>>(), [2]);
        let out = k.release(9, now + Duration::from_millis(20));
        assert_eq!(out.iter().map(|t| t.payload[0]).collect::<Vec<_>>(), [4]);
        let s = k.stats();
        assert_eq!(
            (s.held, s.held_now, s.held_dropped, s.held_us),
            (2, 0, 0, 30_000)
        );
    }

    #[test]
    fn held_messages_are_bounded_in_bytes() {
        let now = Instant::now();
        let mut k = checkpoints();
        let n = HELD_BYTES / 100;
        for _ in 0..n {
            assert!(k.send_or_hold(t(true, 0), at(2, 1), now).is_none());
        }
        assert!(k.send_or_hold(t(true, 0), at(2, 1), now).is_none());
        assert_eq!(k.stats().held_dropped, 1);
        assert_eq!(k.stats().held_now, n as u64);
        assert_eq!(k.release(2, now).len(), n);
        assert_eq!(k.bytes, 0);
    }
}
