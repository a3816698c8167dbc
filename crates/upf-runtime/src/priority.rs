//! Priority-aware processing (seed 001, issue #28), sans-IO: packets classified into 2 to 4
//! queue groups as they arrive ([`Classes`]: the QFI of a G-PDU's PDU Session Container on
//! N3/N9, the DSCP of an N6 packet), bounded per-group queues for backends that classify in
//! software ([`GroupQueues`]), and the [`Scheduler`] that decides how many packets of each
//! group a worker takes in one poll. Group 0 is the highest priority (the seed's RQP 0).
//!
//! A worker processes what one poll took group by group, highest first, and sends each
//! group's output before it processes the next: high priority first on transmit too.
//! Within a group packets keep their arrival order, so a UE's packets of one class stay in
//! order (UEs are pinned to their worker as before).

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use upf_packet::{Packet, Port};

/// Queue groups at most.
pub const MAX_GROUPS: usize = 4;
/// QFI and DSCP values: both 6 bits.
pub const CODES: usize = 64;

/// Which queue group each QFI (uplink and N9, from the PDU Session Container) and each DSCP
/// (N6) goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    groups: u8,
    qfi: [u8; CODES],
    dscp: [u8; CODES],
}

/// The default high-priority QFIs: a QFI is usually given the value of its standardized 5QI
/// (TS 23.501 Table 5.7.4-1), and 5QIs 1 to 4 are the GBR real-time services
/// (conversational voice, conversational video, real-time gaming, non-conversational
/// video; priority levels 20 to 50) and 5QI 5 is IMS signalling (priority level 10).
/// Non-GBR 6 to 9 (buffered video, TCP, the default bearer) are low. 5QIs above 63 (mission
/// critical, delay-critical GBR) do not fit a QFI: an operator maps the QFIs it gives them.
pub const DEFAULT_HIGH_QFI: [u8; 5] = [1, 2, 3, 4, 5];

/// The default high-priority DSCPs, by the service classes of RFC 4594 (Figure 3): EF 46
/// (telephony), VOICE-ADMIT 44 (RFC 5865), CS5 40 (signalling), CS4 32 (real-time
/// interactive), AF41-43 34/36/38 (multimedia conferencing), CS6 48 (network control) and
/// CS7 56. The rest (streaming, data, CS0 best effort, CS1 low priority) is low.
pub const DEFAULT_HIGH_DSCP: [u8; 9] = [46, 44, 40, 32, 34, 36, 38, 48, 56];

/// Why a [`Classes`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassesError {
    #[error("groups: {0} is not within 2..=4")]
    Groups(usize),
    #[error("{kind}: {lists} lists for {groups} groups")]
    Lists {
        kind: &'static str,
        lists: usize,
        groups: usize,
    },
    #[error("{kind}[{group}]: {value} is not within 0..=63")]
    Range {
        kind: &'static str,
        group: usize,
        value: u8,
    },
    #[error("{kind}[{group}]: {value} is already in group {first}")]
    Twice {
        kind: &'static str,
        group: usize,
        value: u8,
        first: usize,
    },
}

impl Default for Classes {
    fn default() -> Self {
        Self::new(
            2,
            &[DEFAULT_HIGH_QFI.to_vec()],
            &[DEFAULT_HIGH_DSCP.to_vec()],
        )
        .expect("the defaults are valid")
    }
}

impl Classes {
    /// `groups` queue groups; `qfi[g]` and `dscp[g]` list the values of group `g`, and values
    /// no list has go to the lowest group (`groups - 1`). A value listed twice is refused.
    pub fn new(groups: usize, qfi: &[Vec<u8>], dscp: &[Vec<u8>]) -> Result<Self, ClassesError> {
        if !(2..=MAX_GROUPS).contains(&groups) {
            return Err(ClassesError::Groups(groups));
        }
        let lowest = u8::try_from(groups - 1).map_err(|_| ClassesError::Groups(groups))?;
        let table = |kind: &'static str, lists: &[Vec<u8>]| {
            if lists.len() > groups {
                return Err(ClassesError::Lists {
                    kind,
                    lists: lists.len(),
                    groups,
                });
            }
            let mut t = [lowest; CODES];
            let mut seen: [Option<usize>; CODES] = [None; CODES];
            for (group, list) in (0u8..).zip(lists) {
                let group_index = usize::from(group);
                for &value in list {
                    let v = usize::from(value);
                    if v >= CODES {
                        return Err(ClassesError::Range {
                            kind,
                            group: group_index,
                            value,
                        });
                    }
                    if let Some(first) = seen[v] {
                        return Err(ClassesError::Twice {
                            kind,
                            group: group_index,
                            value,
                            first,
                        });
                    }
                    seen[v] = Some(group_index);
                    t[v] = group;
                }
            }
            Ok(t)
        };
        Ok(Self {
            groups: lowest + 1,
            qfi: table("qfi", qfi)?,
            dscp: table("dscp", dscp)?,
        })
    }

    pub fn groups(&self) -> usize {
        usize::from(self.groups)
    }

    /// The lowest-priority group: unlisted values, malformed packets and G-PDUs without a
    /// PDU Session Container.
    pub fn lowest(&self) -> u8 {
        self.groups - 1
    }

    pub fn of_qfi(&self, qfi: u8) -> u8 {
        self.qfi[usize::from(qfi & 0x3f)]
    }

    pub fn of_dscp(&self, dscp: u8) -> u8 {
        self.dscp[usize::from(dscp & 0x3f)]
    }

    /// The group of a packet as it arrives on `port()`, read at fixed offsets without a
    /// full parse: N3/N9 by the QFI of its PDU Session Container, N6 by the DSCP of its IP
    /// header. A G-PDU without a container, and anything malformed or short, goes to the
    /// lowest group (the UE sets its own inner DSCP: trusting it would let a UE raise its
    /// uplink). GTP-U messages other than G-PDUs (Echo, Error Indication) go to the highest:
    /// path supervision must survive an overload, and they are few.
    pub fn group_of(&self, p: &Packet) -> u8 {
        let d = p.data();
        let g = match p.port() {
            Port::N3 | Port::N9 => self.gtpu_group(d),
            Port::N6 => dscp(d).map(|c| self.of_dscp(c)),
        };
        g.unwrap_or(self.lowest())
    }

    fn gtpu_group(&self, d: &[u8]) -> Option<u8> {
        match gtpu_qfi(d)? {
            Gtpu::Signalling => Some(0),
            Gtpu::Qfi(q) => Some(self.of_qfi(q)),
        }
    }
}

/// What classification reads of a GTP-U packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gtpu {
    /// A GTP-U message other than a G-PDU.
    Signalling,
    /// A G-PDU's QFI.
    Qfi(u8),
}

/// Extension headers walked, at most, before the PDU Session Container is given up on.
const MAX_EXTENSIONS: usize = 4;

/// The QFI of a G-PDU behind an outer IPv4 (any IHL) or IPv6 (no extension header) and UDP
/// header; `None` when malformed or without a PDU Session Container.
fn gtpu_qfi(d: &[u8]) -> Option<Gtpu> {
    let udp = match d.first()? >> 4 {
        4 => {
            let ihl = usize::from(d[0] & 0x0f) * 4;
            (ihl >= 20 && *d.get(9)? == 17).then_some(ihl)?
        }
        6 => (*d.get(6)? == 17).then_some(40)?,
        _ => return None,
    };
    let g = d.get(udp + 8..)?;
    // Version 1, protocol type GTP.
    if g.len() < 8 || g[0] & 0xf0 != 0x30 {
        return None;
    }
    if g[1] != 0xff {
        return Some(Gtpu::Signalling);
    }
    if g[0] & 0x04 == 0 {
        return None;
    }
    let mut next = *g.get(11)?;
    let mut at = 12;
    for _ in 0..MAX_EXTENSIONS {
        if next == 0 {
            return None;
        }
        // Length in words, the last octet the next extension's type.
        let len = usize::from(*g.get(at)?) * 4;
        let ext = g.get(at..at + len)?;
        if len == 0 {
            return None;
        }
        if next == 0x85 {
            // Octet 1: PDU type; octet 2: QFI in its low 6 bits, DL and UL alike (TS 38.415).
            return Some(Gtpu::Qfi(*ext.get(2)? & 0x3f));
        }
        next = ext[len - 1];
        at += len;
    }
    None
}

/// The DSCP of an IPv4 or IPv6 header.
fn dscp(d: &[u8]) -> Option<u8> {
    match d.first()? >> 4 {
        4 if d.len() >= 20 => Some(d[1] >> 2),
        6 if d.len() >= 40 => Some((((d[0] & 0x0f) << 4) | (d[1] >> 4)) >> 2),
        _ => None,
    }
}

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
