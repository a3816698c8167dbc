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

use crate::config::StateCfg;
use crate::datapath::Observed;
use crate::state::Persist;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use upf_n4::{Agent, Transmit};
use upf_rules::Seid;
use upf_runtime::Engines;
use upf_state::Op;

/// Bytes of messages held for the store at most; a message beyond is dropped and counted
/// (a request is sent again by its retransmission timer, a response when the SMF retransmits
/// its request). At 10 ms commits this is thousands of reports.
const HELD_BYTES: usize = 4 << 20;

/// How soon the loop looks again whether held messages may go: about the writer's commit
/// interval (10 ms), so that a held message waits for its commit and little more.
pub const HELD_POLL: Duration = Duration::from_millis(2);

/// What the checkpoints did, for /metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints taken (bulk reads of the workers).
    pub checkpoints: u64,
    /// Session usage records handed to the store, and their bytes.
    pub records: u64,
    pub record_bytes: u64,
    /// Bulk reads that failed (a worker stopped).
    pub read_errors: u64,
    /// At start: sessions whose checkpoint was carried into the data path (the others'
    /// held nothing, or a report went out after them).
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

#[derive(Debug)]
struct Held {
    /// The writer's [`upf_state::Writer::submitted`] when it was held.
    mark: u64,
    since: Instant,
    t: Transmit,
}

/// The checkpoints of a running UPF, and the messages waiting for the store.
#[derive(Debug)]
pub struct Checkpoints {
    every: Duration,
    next: Instant,
    held: VecDeque<Held>,
    held_bytes: usize,
    stats: CheckpointStats,
}

impl Checkpoints {
    /// With `usage_checkpoint_ms` > 0, carries the usage checkpoints the store held into the
    /// restored sessions and starts taking them; with 0, none (and nothing is held).
    pub fn start(
        c: &StateCfg,
        agent: &mut Agent<Observed<Engines>>,
        persist: &mut Persist,
        now: Instant,
    ) -> Option<Self> {
        let rows = persist.take_usage();
        if c.usage_checkpoint_ms == 0 {
            return None;
        }
        let every = Duration::from_millis(c.usage_checkpoint_ms);
        let mut k = Self {
            every,
            next: now + every,
            held: VecDeque::new(),
            held_bytes: 0,
            stats: CheckpointStats::default(),
        };
        k.restore(agent, persist, rows);
        Some(k)
    }

    fn restore(
        &mut self,
        agent: &mut Agent<Observed<Engines>>,
        persist: &Persist,
        rows: Vec<(u64, Vec<u8>)>,
    ) {
        if rows.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let n = rows.len();
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
            let workers = agent.datapath().inner().workers();
            match workers.carry_usage(seid, usage, true) {
                Ok(()) => self.stats.restored += 1,
                Err(e) => {
                    warn!(target: "upf::state", "usage of session {:#x} not restored: {e}", seid.0)
                }
            }
        }
        info!(
            target: "upf::state",
            "usage checkpoints: {} of {n} sessions carried in (the others reported since, or counted nothing) in {} ms",
            self.stats.restored,
            t0.elapsed().as_millis()
        );
    }

    /// When the loop must come back: the next checkpoint, or soon while messages are held.
    pub fn deadline(&self, now: Instant) -> Instant {
        if self.held.is_empty() {
            self.next
        } else {
            self.next.min(now + HELD_POLL)
        }
    }

    /// Takes a checkpoint when one is due.
    pub fn tick(&mut self, now: Instant, agent: &Agent<Observed<Engines>>, persist: &Persist) {
        if now < self.next {
            return;
        }
        // A loop that fell behind takes one, not every one it missed.
        self.next = (self.next + self.every).max(now);
        self.checkpoint(agent, persist);
    }

    /// Reads the usage of the sessions that counted since the last checkpoint and hands it
    /// to the store.
    pub fn checkpoint(&mut self, agent: &Agent<Observed<Engines>>, persist: &Persist) {
        self.stats.checkpoints += 1;
        let read = match agent.datapath().inner().workers().unreported_changed() {
            Ok(r) => r,
            Err(e) => {
                self.stats.read_errors += 1;
                warn!(target: "upf::state", "usage checkpoint: {e}");
                return;
            }
        };
        for (seid, usage) in read {
            // A session deleted since: its row went with it.
            let Some(record) = agent.usage_record(seid, &usage) else {
                continue;
            };
            self.stats.records += 1;
            self.stats.record_bytes += record.len() as u64;
            persist.writer().submit(Op::PutUsage(seid.0, record));
        }
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
        if self.held.is_empty() && writer.durable >= writer.submitted {
            return Some(t);
        }
        if self.held_bytes + t.payload.len() > HELD_BYTES {
            self.stats.held_dropped += 1;
            return None;
        }
        self.stats.held += 1;
        self.held_bytes += t.payload.len();
        self.held.push_back(Held {
            mark: writer.submitted,
            since: now,
            t,
        });
        self.stats.held_now = self.held.len() as u64;
        None
    }

    /// The held messages the store has caught up with (`durable`, its
    /// [`upf_state::Writer::durable`]), in the order they were held.
    pub fn release(&mut self, durable: u64, now: Instant) -> Vec<Transmit> {
        let mut out = Vec::new();
        while self.held.front().is_some_and(|h| h.mark <= durable) {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            self.held_bytes -= h.t.payload.len();
            let waited = now.saturating_duration_since(h.since).as_micros();
            self.stats.held_us += u64::try_from(waited).unwrap_or(u64::MAX);
            out.push(h.t);
        }
        self.stats.held_now = self.held.len() as u64;
        out
    }

    pub fn stats(&self) -> CheckpointStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoints() -> Checkpoints {
        Checkpoints {
            every: Duration::from_secs(1),
            next: Instant::now(),
            held: VecDeque::new(),
            held_bytes: 0,
            stats: CheckpointStats::default(),
        }
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
        assert_eq!(k.held_bytes, 0);
    }
}
