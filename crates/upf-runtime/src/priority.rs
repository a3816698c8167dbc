//! Priority-aware processing (seed 001, issue #28), sans-IO: packets classified into 2 to 4
//! queue groups as they arrive ([`Classes`], from `upf_packet::classes`), bounded per-group queues for backends that classify in
//! software ([`GroupQueues`]), and the [`Scheduler`] that decides how many packets of each
//! group a worker takes in one poll. Group 0 is the highest priority (the seed's RQP 0).
//!
//! A worker processes what one take of the scheduler's plan holds group by group, highest
//! first, and sends it in one batch a port, the higher groups' packets first: high priority
//! first on transmit too.
//! Within a group packets keep their arrival order, so a UE's packets of one class stay in
//! order (UEs are pinned to their worker as before).

use std::collections::VecDeque;
use std::time::{Duration, Instant};
pub use upf_packet::classes::{
    Classes, ClassesError, CODES, DEFAULT_HIGH_DSCP, DEFAULT_HIGH_QFI, MAX_GROUPS,
};
use upf_packet::Packet;

/// What a queued item weighs against a queue's byte bound.
pub trait Octets {
    fn octets(&self) -> usize;
}

impl Octets for Packet {
    fn octets(&self) -> usize {
        self.len()
    }
}

/// One group's queue counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Packets queued, and those refused (the queue at its packet or byte bound).
    pub queued: u64,
    pub dropped: u64,
    pub dropped_bytes: u64,
}

/// Per-group queues, each bounded in packets and in bytes, with drop counters: where a
/// backend that classifies in software (UDP, TUN) puts what it received until the scheduler
/// takes it.
#[derive(Debug)]
pub struct GroupQueues<T> {
    queues: Vec<VecDeque<T>>,
    bytes: Vec<usize>,
    stats: Vec<GroupStats>,
    max_packets: usize,
    max_bytes: usize,
}

impl<T: Octets> GroupQueues<T> {
    pub fn new(groups: usize, max_packets: usize, max_bytes: usize) -> Self {
        let groups = groups.clamp(1, MAX_GROUPS);
        Self {
            queues: (0..groups)
                .map(|_| VecDeque::with_capacity(max_packets.min(4096)))
                .collect(),
            bytes: vec![0; groups],
            stats: vec![GroupStats::default(); groups],
            max_packets,
            max_bytes,
        }
    }

    pub fn groups(&self) -> usize {
        self.queues.len()
    }

    /// Queues `item` in group `group` (the lowest if there is no such group); gives it back,
    /// counted as dropped, when that queue is full.
    pub fn push(&mut self, group: u8, item: T) -> Result<(), T> {
        let g = usize::from(group).min(self.queues.len() - 1);
        let n = item.octets();
        if self.queues[g].len() >= self.max_packets || self.bytes[g] + n > self.max_bytes {
            self.stats[g].dropped += 1;
            self.stats[g].dropped_bytes += n as u64;
            return Err(item);
        }
        self.bytes[g] += n;
        self.stats[g].queued += 1;
        self.queues[g].push_back(item);
        Ok(())
    }

    /// Moves up to `n` of group `group`'s oldest items to `out`, in order; how many.
    pub fn take(&mut self, group: usize, n: usize, out: &mut Vec<T>) -> usize {
        let Some(q) = self.queues.get_mut(group) else {
            return 0;
        };
        let n = n.min(q.len());
        for item in q.drain(..n) {
            self.bytes[group] -= item.octets();
            out.push(item);
        }
        n
    }

    /// Packets group `group` takes before it is full by count (0 past the last group): what a
    /// worker reads of that group's receive queue, leaving the rest where the backend keeps
    /// it.
    pub fn room(&self, group: usize) -> usize {
        let len = self
            .queues
            .get(group)
            .map_or(self.max_packets, VecDeque::len);
        self.max_packets.saturating_sub(len)
    }

    /// Each group's depth in packets (0 past the last group).
    pub fn depths(&self) -> [usize; MAX_GROUPS] {
        let mut d = [0; MAX_GROUPS];
        for (d, q) in d.iter_mut().zip(&self.queues) {
            *d = q.len();
        }
        d
    }

    pub fn bytes(&self, group: usize) -> usize {
        self.bytes.get(group).copied().unwrap_or(0)
    }

    pub fn stats(&self) -> &[GroupStats] {
        &self.stats
    }

    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }
}

/// One group's state as a worker reports it (metrics, `upf show workers`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStatus {
    /// Packets and bytes queued now.
    pub depth: usize,
    pub bytes: usize,
    pub stats: GroupStats,
}

impl<T: Octets> GroupQueues<T> {
    /// Each group's depth and counters.
    pub fn status(&self) -> Vec<GroupStatus> {
        (self.queues.iter().zip(&self.bytes).zip(&self.stats))
            .map(|((q, &bytes), &stats)| GroupStatus {
                depth: q.len(),
                bytes,
                stats,
            })
            .collect()
    }
}

/// How a worker takes from its queue groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One queue, arrival order: today's behaviour, no classification.
    Fifo,
    /// Highest group first, every poll: the highest group up to a batch, the lower groups
    /// together at most `max_rbs` (the seed's maximum read burst size), each only once every
    /// group above it is empty. A packet never waits behind more than `max_rbs` packets of
    /// lower groups; lower groups starve while the highest fills every batch.
    Strict { max_rbs: usize },
    /// Deficit round robin: each backlogged group gets a share of the packets taken
    /// proportional to its weight; an empty group's share goes to the others.
    Weighted { weights: [u32; MAX_GROUPS] },
    /// Strict, with the bound on lower groups relaxed while the worker is lightly loaded:
    /// `idle_rbs` at a utilisation up to [`LOAD_RELAXED`], `max_rbs` from [`LOAD_STRICT`]
    /// on, in proportion between (the seed's "flexible MAX_RBS": the busier the worker,
    /// the more of each poll goes to higher groups).
    LoadAware { max_rbs: usize, idle_rbs: usize },
}

/// Utilisation (per mille) up to which [`Mode::LoadAware`] takes `idle_rbs`.
pub const LOAD_RELAXED: u32 = 500;
/// Utilisation (per mille) from which [`Mode::LoadAware`] takes `max_rbs`.
pub const LOAD_STRICT: u32 = 900;

/// The window over which a worker's utilisation is measured; the figure is smoothed over
/// about four of them.
pub const LOAD_WINDOW: Duration = Duration::from_millis(1);

/// A worker's utilisation: the share of time it spent busy, from the busy time it reports
/// with `now` (sans-IO), per [`LOAD_WINDOW`], smoothed (a window weighs 1/4).
#[derive(Debug, Clone)]
pub struct Load {
    since: Instant,
    busy: Duration,
    permille: u32,
}

impl Load {
    pub fn new(now: Instant) -> Self {
        Self {
            since: now,
            busy: Duration::ZERO,
            permille: 0,
        }
    }

    /// The worker was busy for `busy` (processing, since its last report) up to `now`.
    pub fn record(&mut self, now: Instant, busy: Duration) {
        self.busy += busy;
        self.advance(now);
    }

    /// Closes the windows that `now` ended (idle time counts as it passes).
    pub fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed < LOAD_WINDOW {
            return;
        }
        let u = (self.busy.as_nanos() * 1000 / elapsed.as_nanos()).min(1000) as u32;
        // The same mean over each of the windows that passed: each moves the figure 1/4
        // of the way (a long idle spell brings it down to 0).
        let windows = (elapsed.as_nanos() / LOAD_WINDOW.as_nanos()).min(32);
        for _ in 0..windows {
            // A quarter of the way, rounded towards `u` so that it gets there.
            self.permille = if u >= self.permille {
                self.permille + (u - self.permille).div_ceil(4)
            } else {
                self.permille - (self.permille - u).div_ceil(4)
            };
        }
        self.since = now;
        self.busy = Duration::ZERO;
    }

    /// Per mille of the time busy.
    pub fn permille(&self) -> u32 {
        self.permille
    }
}

/// Bound of each group's software queue, in packets, by default.
pub const QUEUE_PACKETS: usize = 4096;
/// Bound of each group's software queue, in bytes, by default (2,048 full-size packets).
pub const QUEUE_BYTES: usize = 4 << 20;

/// A worker's priority settings (`RuntimeConfig::priority`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityConfig {
    pub mode: Mode,
    pub classes: Classes,
    /// Each group's software queue bound, in packets and in bytes.
    pub queue_packets: usize,
    pub queue_bytes: usize,
    /// A GBR QoS flow's packets go one group above their class's (`Pipeline::gbr_flow`):
    /// under overload its guaranteed rate is served before non-GBR traffic of its class.
    pub gbr_first: bool,
}

impl Default for PriorityConfig {
    /// FIFO: no classification, today's loop.
    fn default() -> Self {
        Self {
            mode: Mode::Fifo,
            classes: Classes::default(),
            queue_packets: QUEUE_PACKETS,
            queue_bytes: QUEUE_BYTES,
            gbr_first: true,
        }
    }
}

/// How many packets a poll takes from each group (0 past the last group), to be processed
/// in group order.
pub type Plan = [usize; MAX_GROUPS];

/// One worker's scheduler: how many packets of each group it takes per poll.
#[derive(Debug, Clone)]
pub struct Scheduler {
    mode: Mode,
    groups: usize,
    batch: usize,
    /// Weighted: each group's quantum per round and what it may still take.
    quantum: [usize; MAX_GROUPS],
    deficit: [usize; MAX_GROUPS],
    /// Weighted: whose turn it is, and whether its quantum was granted for this turn.
    turn: usize,
    granted: bool,
    load: Load,
}

impl Scheduler {
    /// `groups` (1 for [`Mode::Fifo`]), at most `batch` packets a poll.
    pub fn new(mode: Mode, groups: usize, batch: usize, now: Instant) -> Self {
        let groups = if mode == Mode::Fifo {
            1
        } else {
            groups.clamp(1, MAX_GROUPS)
        };
        let mut s = Self {
            mode,
            groups,
            batch: batch.max(1),
            quantum: [0; MAX_GROUPS],
            deficit: [0; MAX_GROUPS],
            turn: 0,
            granted: false,
            load: Load::new(now),
        };
        s.set_quanta();
        s
    }

    fn set_quanta(&mut self) {
        if let Mode::Weighted { weights } = &self.mode {
            let total: u64 = weights[..self.groups].iter().map(|&w| u64::from(w)).sum();
            for (g, &w) in weights.iter().enumerate().take(self.groups) {
                let q = self.batch as u64 * u64::from(w) / total.max(1);
                self.quantum[g] = usize::try_from(q).unwrap_or(self.batch).max(1);
            }
        }
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Sets MAX_RBS (at run time); false if the mode has none. At least 1.
    pub fn set_max_rbs(&mut self, n: usize) -> bool {
        match &mut self.mode {
            Mode::Strict { max_rbs } | Mode::LoadAware { max_rbs, .. } => {
                *max_rbs = n.max(1);
                true
            }
            Mode::Fifo | Mode::Weighted { .. } => false,
        }
    }

    /// The worker was busy for `busy` up to `now`.
    pub fn record_busy(&mut self, now: Instant, busy: Duration) {
        self.load.record(now, busy);
    }

    /// The worker's utilisation, per mille.
    pub fn utilisation(&self) -> u32 {
        self.load.permille()
    }

    /// The bound on lower groups' packets a poll takes now (strict and load-aware).
    pub fn max_rbs_now(&self) -> Option<usize> {
        match self.mode {
            Mode::Strict { max_rbs } => Some(max_rbs),
            Mode::LoadAware { max_rbs, idle_rbs } => {
                let u = self.load.permille();
                let relaxed = idle_rbs.max(max_rbs);
                Some(if u <= LOAD_RELAXED {
                    relaxed
                } else if u >= LOAD_STRICT {
                    max_rbs
                } else {
                    let span = (relaxed - max_rbs) as u64;
                    let over = u64::from(u - LOAD_RELAXED);
                    let less = span * over / u64::from(LOAD_STRICT - LOAD_RELAXED);
                    relaxed - usize::try_from(less).unwrap_or(0)
                })
            }
            Mode::Fifo | Mode::Weighted { .. } => None,
        }
    }

    /// How many packets to take from each group in this poll, given their depths.
    pub fn plan(&mut self, now: Instant, depths: &[usize; MAX_GROUPS]) -> Plan {
        self.load.advance(now);
        let mut take = [0; MAX_GROUPS];
        match self.mode {
            Mode::Fifo => take[0] = depths[0].min(self.batch),
            Mode::Strict { .. } | Mode::LoadAware { .. } => {
                let lower = self.max_rbs_now().unwrap_or(self.batch);
                take[0] = depths[0].min(self.batch);
                let mut left = (self.batch - take[0]).min(lower);
                for g in 1..self.groups {
                    take[g] = depths[g].min(left);
                    left -= take[g];
                }
            }
            Mode::Weighted { .. } => self.weighted(depths, &mut take),
        }
        take
    }

    /// Deficit round robin (Shreedhar and Varghese): a group's turn grants its quantum and
    /// lasts until that credit or its queue runs out; a poll that ends mid-turn resumes it.
    fn weighted(&mut self, depths: &[usize; MAX_GROUPS], take: &mut Plan) {
        let mut left = self.batch;
        // Groups passed in a row with nothing queued: all of them ends the poll.
        let mut empty = 0;
        while left > 0 && empty < self.groups {
            let g = self.turn;
            let queued = depths[g] - take[g];
            if queued == 0 {
                // An empty queue keeps no credit (it would burst later).
                self.deficit[g] = 0;
                self.next_turn();
                empty += 1;
                continue;
            }
            empty = 0;
            if !self.granted {
                self.deficit[g] += self.quantum[g];
                self.granted = true;
            }
            let n = queued.min(self.deficit[g]).min(left);
            take[g] += n;
            self.deficit[g] -= n;
            left -= n;
            if take[g] == depths[g] {
                self.deficit[g] = 0;
            }
            if self.deficit[g] == 0 {
                self.next_turn();
            }
        }
    }

    fn next_turn(&mut self) {
        self.turn = (self.turn + 1) % self.groups;
        self.granted = false;
    }
}

#[cfg(test)]
mod tests;
