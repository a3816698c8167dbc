//! The worker threads and the control path to them.

use crate::priority::{
    Classes, GroupQueues, GroupStatus, Mode, PriorityConfig, Scheduler, MAX_GROUPS,
};
use crate::reports::{Piece, Reports, Step};
use crate::steer;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use upf_dataplane::budgets::SessionBudgets;
use upf_dataplane::paths::{tunnel_peers, PathChange, Tunnels};
use upf_dataplane::{Counters, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_io::wake::Waker;
use upf_io::{IoStats, PacketIo, Pool};
use upf_rules::{
    Carried, Datapath, DatapathError, DatapathEvent, InstallFlags, Installed, Seid, Session, UrrId,
    UsageReport, UsageTrigger, Volume,
};

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub workers: usize,
    /// Cores to pin worker i to (`cores[i % len]`); empty: worker i on core i when the host
    /// has a core per worker, unpinned otherwise.
    pub cores: Vec<usize>,
    pub pipeline: PipelineConfig,
    /// Packets per batch a worker takes from its queue.
    pub batch: usize,
    /// Peak-rate UEs (seed 004): their sessions live on every worker (rates and URR limits
    /// drawn from budgets the workers share) and their packets are steered per flow.
    pub spread_ues: Vec<std::net::IpAddr>,
    /// How long an idle worker keeps polling its queues before it sleeps on them; `None`:
    /// it never sleeps (busy polling: a core at 100 %, no wake-up latency).
    pub idle_poll: Option<Duration>,
    /// Queue groups and how a worker takes from them (seed 001); FIFO by default.
    pub priority: crate::priority::PriorityConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            workers: 1,
            cores: Vec::new(),
            pipeline: PipelineConfig::default(),
            batch: 256,
            spread_ues: Vec::new(),
            idle_poll: Some(IDLE_POLL),
            priority: crate::priority::PriorityConfig::default(),
        }
    }
}

type Reply<T> = SyncSender<Result<T, DatapathError>>;

/// Per session, the backlogs of its MBR buckets and the use of its quotas (one engine's,
/// for another to go on from).
pub type SessionsCarried = Vec<(Seid, Carried)>;

/// Per session, the usage of each URR since its last report.
pub type SessionsUsage = Vec<upf_dataplane::SessionUsage>;

/// Sessions a worker reads for a usage checkpoint between two batches of packets: at 100%
/// of them with traffic, ~1.5 ms of the worker's time (37 ms for 100k, measured by
/// upf-dataplane's `usage_checkpoint` example).
const CHECKPOINT_SLOTS: usize = 4096;

enum Control {
    Install(
        Arc<Session>,
        InstallFlags,
        Option<Arc<SessionBudgets>>,
        Reply<Installed>,
    ),
    /// New sessions of this worker alone, each installed as by `Install` (default flags,
    /// no budgets), one result each in order: one round trip for many (a restore).
    InstallNew(
        Vec<Arc<Session>>,
        SyncSender<Vec<Result<Installed, DatapathError>>>,
    ),
    Remove(Seid, Reply<Vec<UsageReport>>),
    Query(Seid, Vec<UrrId>, UsageTrigger, Reply<Vec<UsageReport>>),
    /// Usage another engine measured for the session's URRs, and whether against their
    /// quotas (`Pipeline::carry_usage`).
    Carry(Seid, Vec<(UrrId, Volume)>, bool, Reply<()>),
    /// The sessions' MBR backlogs and quota use (`Pipeline::carried`; sessions it does not
    /// hold left out), and those another engine left (`Pipeline::carry_in`).
    Carried(Vec<Seid>, Reply<SessionsCarried>),
    CarryIn(SessionsCarried),
    Unreported(Seid, Reply<Vec<(UrrId, Volume)>>),
    /// `Pipeline::unreported_changed`: the sessions that counted since the last one.
    /// From slot `.0`, at most [`CHECKPOINT_SLOTS`]; with the slot to go on from.
    UnreportedChanged(usize, Reply<(SessionsUsage, Option<usize>)>),
    Session(Seid, SyncSender<Option<Arc<Session>>>),
    Counters(SyncSender<Counters>),
    Stats(SyncSender<WorkerStats>),
    /// A new MAX_RBS (priority modes strict and load-aware).
    MaxRbs(usize),
    /// A GTP-U peer to probe or to stop probing (to [`PATH_OWNER`] only).
    Path(PathChange),
}

/// Sessions a worker installs in one [`Control::InstallNew`]: ~2 ms of its time.
const INSTALL_BATCH: usize = 256;

/// An [`Control::InstallNew`] sent: the worker, the sessions (by their index in the
/// caller's list) and where its answer comes.
type Asked = (
    usize,
    Vec<(usize, Arc<Session>)>,
    Receiver<Vec<Result<Installed, DatapathError>>>,
);

/// The worker that owns GTP-U path management: every backend steers GTP-U messages other
/// than G-PDUs (the Echo Responses among them) to worker 0, as does the software hand-off.
pub const PATH_OWNER: usize = 0;

/// One worker's queue on one interface.
#[derive(Debug)]
pub struct PortQueue {
    pub port: Port,
    /// On N6: the id of its network instance (`upf_dataplane::NetworkInstances`; 0: the
    /// default one), given to the packets it receives and choosing it for those sent.
    pub instance: u8,
    pub io: Box<dyn PacketIo>,
}

/// The queues a worker owns. `steered`: the backend delivers only this worker's UEs (fanout,
/// XDP); otherwise the worker hands packets of other workers' UEs to them (one hand-off).
#[derive(Debug, Default)]
pub struct WorkerQueues {
    pub queues: Vec<PortQueue>,
    pub steered: bool,
}

/// What a worker reports when asked (off the fast path: between two batches).
#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    pub counters: Counters,
    pub sessions: usize,
    /// Per queue: its port, what it is, its counters.
    pub io: Vec<(Port, String, IoStats)>,
    /// Packets this worker received and handed to their owning worker …
    pub handed_off: u64,
    /// … and those it dropped instead, the owner's backlog being full.
    pub hand_off_dropped: u64,
    /// Packets the pipeline sent by a port this worker has no queue for.
    pub no_queue: u64,
    pub batch: BatchStats,
    /// Per queue group, highest first (empty in FIFO mode): what it holds, its counters.
    pub groups: Vec<GroupStatus>,
    /// The worker's utilisation, per mille (`None` in FIFO mode, which does not track it).
    pub utilisation_permille: Option<u32>,
}

/// How long an idle worker keeps polling its queues before it sleeps on them, by default (a
/// woken worker costs about what polling for this long does with a socket backend).
pub const IDLE_POLL: Duration = Duration::from_micros(20);
/// The longest an idle worker sleeps (its timers are checked at least this often; packets and
/// control messages wake it at once).
const IDLE_SLEEP: Duration = Duration::from_millis(10);

/// Packets handed to a worker and not yet taken by it, at most (give or take a batch from each
/// other worker): a worker that cannot keep up with what the others receive for its UEs (one
/// UE flooded) would otherwise queue them without bound. Twice a large NIC ring.
pub const HAND_OFF_BACKLOG: usize = 8192;

/// Packets handed to each worker and not yet taken.
#[derive(Debug, Default)]
struct Backlog(Vec<AtomicUsize>);

impl Backlog {
    fn new(workers: usize) -> Self {
        Self((0..workers).map(|_| AtomicUsize::new(0)).collect())
    }

    /// Whether `n` more packets may be handed to worker `w` (and counts them if so).
    fn try_add(&self, w: usize, n: usize) -> bool {
        let Some(b) = self.0.get(w) else {
            return false;
        };
        if b.load(Ordering::Relaxed) + n > HAND_OFF_BACKLOG {
            return false;
        }
        b.fetch_add(n, Ordering::Relaxed);
        true
    }

    /// Worker `w` took `n` packets.
    fn taken(&self, w: usize, n: usize) {
        if let Some(b) = self.0.get(w) {
            let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
        }
    }
}

/// Buckets of [`BatchStats::time`]: < 1 µs, < 2 µs, … < 2^14 µs (16 ms), longer.
pub const BATCH_TIME_BUCKETS: usize = 16;

/// What a worker counts per batch for metrics: plain integers, a few instructions a batch
/// (`cargo bench -p upf-runtime --bench metrics`, docs/benchmarks/daemon.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Batches processed, and the packets in them (mean batch size = packets / batches).
    pub batches: u64,
    pub packets: u64,
    /// Time from a batch's start to its last packet handed to a queue, as a histogram:
    /// `time[i]` counts batches that took less than `2^i` µs (the last: any longer).
    pub time: [u64; BATCH_TIME_BUCKETS],
    pub time_ns_sum: u64,
}

impl BatchStats {
    #[inline]
    pub fn record(&mut self, packets: usize, ns: u64) {
        self.batches += 1;
        self.packets += packets as u64;
        self.time_ns_sum += ns;
        let bucket = (64 - (ns / 1000).leading_zeros()) as usize;
        self.time[bucket.min(BATCH_TIME_BUCKETS - 1)] += 1;
    }
}

enum Input {
    Packets(Vec<Packet>),
    Control(Control),
    Stop,
}

/// Handles to the running workers.
#[derive(Debug)]
pub struct Workers {
    inputs: Vec<Sender<Input>>,
    /// Each worker's wake-up line (I/O mode: a sleeping worker polls it beside its queues).
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
    /// Events, each with the index of the worker that sent it.
    events: Receiver<(usize, DatapathEvent)>,
    /// Usage held back of sessions on several workers ([`crate::reports`]).
    reports: Reports,
    /// Merged reports after the one [`Datapath::poll_event`] returned (BEF, AFT).
    merged: VecDeque<DatapathEvent>,
    /// Packets the workers sent, each with its egress port.
    output: Receiver<Vec<Packet>>,
    /// Where each session is installed, and what.
    placement: upf_dataplane::FastMap<Seid, Placed>,
    steering: steer::Steering,
    /// Every session's live tunnels per GTP-U peer, when path management is on: a peer's
    /// first and last go to [`PATH_OWNER`], which probes it.
    tunnels: Option<Tunnels>,
    /// The priority mode the workers started with.
    priority: Mode,
}

/// The workers a session is installed on and the session they hold: what a failed install
/// puts back on the workers it had already reached.
#[derive(Debug, Clone)]
struct Placed {
    workers: Vec<usize>,
    session: Arc<Session>,
    /// The buckets its workers share, when it lives on several.
    budgets: Option<Arc<SessionBudgets>>,
}

struct Worker {
    index: usize,
    pipeline: Pipeline,
    input: Receiver<Input>,
    events: Sender<(usize, DatapathEvent)>,
    output: Sender<Vec<Packet>>,
    /// Real I/O: this worker's queues (empty: packets come and go over channels).
    queues: WorkerQueues,
    /// Every worker's input, for handing off packets (I/O mode, unsteered backends), and the
    /// wakers that end their sleep.
    peers: Vec<Sender<Input>>,
    wakers: Vec<Arc<Waker>>,
    waker: Arc<Waker>,
    backlog: Arc<Backlog>,
    steering: steer::Steering,
    batch: usize,
    idle_poll: Option<Duration>,
    stats: WorkerStats,
    /// Queue groups and their scheduler; `None` in FIFO mode (the loop as before).
    priority: Option<Box<Prio>>,
}

/// The scratch space of hand-offs to other workers, so that no vector reallocates.
struct HandOff {
    keep: Vec<Packet>,
    away: Vec<Vec<Packet>>,
}

/// The loop's buffers, lent to a step of it.
struct Io<'a> {
    rx: &'a mut Vec<Packet>,
    handing: &'a mut HandOff,
    out: &'a mut Output,
    pool: &'a mut Pool,
    tx: &'a mut [Vec<Packet>],
}

/// A worker's queue groups (seed 001): packets classified as they are received, taken by
/// the scheduler, each group's take processed and sent before the next group's.
struct Prio {
    classes: Classes,
    gbr_first: bool,
    queues: GroupQueues<Packet>,
    scheduler: Scheduler,
}

impl Prio {
    fn new(cfg: &PriorityConfig, batch: usize, now: Instant) -> Option<Box<Self>> {
        if cfg.mode == Mode::Fifo {
            return None;
        }
        let groups = cfg.classes.groups();
        Some(Box::new(Self {
            classes: cfg.classes.clone(),
            gbr_first: cfg.gbr_first,
            queues: GroupQueues::new(groups, cfg.queue_packets, cfg.queue_bytes),
            scheduler: Scheduler::new(cfg.mode.clone(), groups, batch, now),
        }))
    }

    /// Moves `rx` into the group queues, a GBR flow's packets (as `pipeline` classifies
    /// them) one group above their class's; what a full queue refuses goes back to the pool
    /// (counted per group).
    fn enqueue(&mut self, rx: &mut Vec<Packet>, pool: &mut Pool, pipeline: &Pipeline) {
        let gbr = self.gbr_first && pipeline.has_gbr();
        for p in rx.drain(..) {
            let mut g = self.classes.group_of(&p);
            if gbr && g > 0 && pipeline.gbr_flow(&p) {
                g -= 1;
            }
            if let Err(p) = self.queues.push(g, p) {
                pool.put(p);
            }
        }
    }
}

impl Worker {
    fn run(self) {
        if self.queues.queues.is_empty() {
            self.run_channels();
        } else {
            self.run_io();
        }
    }

    /// The loop on real interfaces: take a batch from every queue, run it, send what it
    /// produced by its egress port's queue; sleep on the queues' descriptors when idle.
    fn run_io(mut self) {
        let mut out = Output::default();
        let mut pool = Pool::new(4 * self.batch.max(256));
        let mut rx: Vec<Packet> = Vec::with_capacity(self.batch);
        let mut handing = HandOff {
            keep: Vec::with_capacity(self.batch),
            away: (0..self.peers.len()).map(|_| Vec::new()).collect(),
        };
        let mut tx: Vec<Vec<Packet>> = (0..self.queues.queues.len()).map(|_| Vec::new()).collect();
        let mut last_busy = Instant::now();
        // Busy polling: whether the queues were flushed since the last packet.
        let mut flushed = true;
        // What the last look before sleeping took off the input channel.
        let mut stashed: Option<Input> = None;
        loop {
            // Control messages and packets handed over by other workers.
            loop {
                let next = match stashed.take() {
                    Some(i) => Ok(i),
                    None => self.input.try_recv(),
                };
                match next {
                    Ok(Input::Packets(mut b)) => {
                        self.backlog.taken(self.index, b.len());
                        match self.priority.as_mut() {
                            None => self.process_io(&mut b, &mut out, &mut pool, &mut tx),
                            Some(p) => p.enqueue(&mut b, &mut pool, &self.pipeline),
                        }
                    }
                    Ok(Input::Control(c)) => {
                        self.control(c);
                        // A FAR that stopped buffering released its packets (or a tunnel
                        // change made End Markers): out now, not with the next packet.
                        if self.pipeline.has_queued() {
                            rx.clear();
                            self.process_io(&mut rx, &mut out, &mut pool, &mut tx);
                        }
                    }
                    Ok(Input::Stop) | Err(mpsc::TryRecvError::Disconnected) => {
                        self.flush_all();
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            // Priority modes: when this poll started (the busy time it reports).
            let poll_start = self.priority.is_some().then(Instant::now);
            let mut io = Io {
                rx: &mut rx,
                handing: &mut handing,
                out: &mut out,
                pool: &mut pool,
                tx: &mut tx,
            };
            let mut got = self.receive(&mut io, self.batch);
            if let Some(t0) = poll_start {
                got += self.poll_groups(t0, &mut io);
            }
            let now = Instant::now();
            self.pipeline.handle_timeout(now);
            while let Some(e) = self.pipeline.poll_event() {
                let _ = self.events.send((self.index, e));
            }
            // Echo Requests the timers made: out now, not with the next packet.
            if self.pipeline.has_queued() {
                rx.clear();
                self.process_io(&mut rx, &mut out, &mut pool, &mut tx);
            }
            if got > 0 {
                last_busy = now;
                flushed = false;
                continue;
            }
            // Idle: keep polling for a few tens of microseconds (packets come in bursts; each
            // empty round of a socket backend is a system call), then sleep on the queues,
            // waking at least every millisecond for control messages and hand-offs.
            if self
                .idle_poll
                .is_some_and(|d| now.saturating_duration_since(last_busy) > d)
            {
                self.flush_all();
                // Say so before the last look at the inputs: whatever a peer queues after it
                // also writes the waker, so the sleep below ends at once.
                self.waker.going_to_sleep();
                match self.input.try_recv() {
                    Ok(i) => stashed = Some(i),
                    Err(_) => {
                        let wait = self
                            .pipeline
                            .poll_timeout()
                            .map_or(IDLE_SLEEP, |t| t.saturating_duration_since(now))
                            .min(IDLE_SLEEP);
                        let fds: Vec<_> = (self.queues.queues.iter())
                            .flat_map(|q| (0..q.io.rx_groups()).filter_map(|g| q.io.group_fd(g)))
                            .chain([self.waker.fd()])
                            .collect();
                        let _ = upf_io::wait_readable(&fds, wait);
                    }
                }
                self.waker.woke();
            } else {
                if !flushed {
                    self.flush_all();
                    flushed = true;
                }
                std::hint::spin_loop();
            }
        }
    }

    /// Up to `max` packets from each of the worker's queues: processed (FIFO), or put into
    /// the queue groups (priority modes). A queue with a receive queue per group (classified
    /// by the backend's BPF program) is read group by group, highest first over all queues,
    /// and a group's receive queue only as far as its software queue has room: under
    /// overload a lower group's backlog waits, and is dropped, where the backend keeps it,
    /// not where a higher group's packets are. While GBR flows go first, every receive queue
    /// is read whole instead: the BPF programs do not know which flows have a GBR, so a GBR
    /// flow's packets in a lower group's ring must be read to be moved up (the lower groups'
    /// software queues then drop). How many packets came.
    fn receive(&mut self, io: &mut Io<'_>, max: usize) -> usize {
        let groups = self.priority.as_ref().map_or(1, |p| p.queues.groups());
        let greedy =
            (self.priority.as_ref()).is_some_and(|p| p.gbr_first) && self.pipeline.has_gbr();
        let mut got = 0;
        for g in 0..groups {
            for qi in 0..self.queues.queues.len() {
                io.rx.clear();
                let q = &mut self.queues.queues[qi];
                let (split, room) = match &self.priority {
                    Some(_) if q.io.rx_groups() > 1 && greedy => (true, max),
                    Some(p) if q.io.rx_groups() > 1 => (true, p.queues.room(g).min(max)),
                    _ => (false, max),
                };
                // Errors are counted by the backend; a queue that keeps failing stays idle.
                let n = match (split, g) {
                    (true, _) if room > 0 => q.io.rx_group(g, io.pool, io.rx, room),
                    (false, 0) => q.io.rx_batch(io.pool, io.rx, max),
                    _ => Ok(0),
                }
                .unwrap_or(0);
                if n == 0 {
                    continue;
                }
                // The N6 of a named network instance: its packets say so (before a hand-off).
                if q.instance != 0 {
                    for p in io.rx.iter_mut() {
                        p.set_instance(q.instance);
                    }
                }
                got += n;
                if !self.queues.steered && self.peers.len() > 1 {
                    self.hand_off(io.rx, &mut io.handing.keep, &mut io.handing.away, io.pool);
                }
                match self.priority.as_mut() {
                    None => self.process_io(io.rx, io.out, io.pool, io.tx),
                    Some(p) => p.enqueue(io.rx, io.pool, &self.pipeline),
                }
            }
        }
        got
    }

    /// Moves the packets of other workers' UEs out of `rx` to their owners (`keep` is
    /// scratch space, so that neither vector reallocates).
    fn hand_off(
        &mut self,
        rx: &mut Vec<Packet>,
        keep: &mut Vec<Packet>,
        away: &mut [Vec<Packet>],
        pool: &mut Pool,
    ) {
        for p in rx.drain(..) {
            match self.steering.worker(&p) {
                w if w == self.index => keep.push(p),
                w => away[w].push(p),
            }
        }
        std::mem::swap(rx, keep);
        for (w, b) in away.iter_mut().enumerate() {
            if b.is_empty() {
                continue;
            }
            if !self.backlog.try_add(w, b.len()) {
                self.stats.hand_off_dropped += b.len() as u64;
                pool.put_all(b.drain(..));
                continue;
            }
            self.stats.handed_off += b.len() as u64;
            let _ = self.peers[w].send(Input::Packets(std::mem::take(b)));
            self.wakers[w].wake();
        }
    }

    /// The queue groups' turn in a poll: as many packets as a FIFO poll takes (a batch a
    /// queue), in the scheduler's takes. Each take's groups are processed highest first and
    /// its output sent in one batch a port, higher groups' packets first (high priority
    /// first on transmit too; one send a take rather than one a group measured 5 % more
    /// low-priority throughput at MAX_RBS 8, the high p99 unchanged). After a take that
    /// served lower groups the queues are read again (see [`Worker::receive`]), so that a
    /// high-priority packet that came meanwhile waits behind at most MAX_RBS of them, while
    /// lower groups alone still get a FIFO poll's worth (work-conserving: MAX_RBS bounds
    /// what they take between two reads, not in a poll). The time since `t0` is reported as
    /// busy. How many packets it processed.
    fn poll_groups(&mut self, t0: Instant, io: &mut Io<'_>) -> usize {
        let budget = self.batch * self.queues.queues.len().max(1);
        let mut done = 0;
        while done < budget {
            let Some(p) = self.priority.as_mut() else {
                return done;
            };
            if p.queues.is_empty() {
                break;
            }
            // One clock read a take (a few µs): the plan's, the pipeline's and the batch's.
            let now = Instant::now();
            let plan = p.scheduler.plan(now, &p.queues.depths());
            let before = done;
            for (g, &n) in plan.iter().enumerate().take(MAX_GROUPS) {
                let mut left = n;
                while left > 0 {
                    io.rx.clear();
                    let Some(p) = self.priority.as_mut() else {
                        return done;
                    };
                    let took = p.queues.take(g, left.min(self.batch), io.rx);
                    if took == 0 {
                        break;
                    }
                    left -= took;
                    done += took;
                    self.process(now, io.rx, io.out, io.pool, io.tx);
                }
            }
            // One send for the plan's takes, each egress queue's higher groups first.
            self.send(io.tx, io.pool);
            if done == before {
                break;
            }
            let ns = u64::try_from(now.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.stats.batch.record(done - before, ns);
            if plan[1..].iter().any(|&n| n > 0) {
                self.receive(io, self.batch);
            }
        }
        if let Some(p) = self.priority.as_mut() {
            let now = Instant::now();
            p.scheduler
                .record_busy(now, now.saturating_duration_since(t0));
        }
        done
    }

    /// Runs `rx` through the pipeline and sends what it produced.
    fn process_io(
        &mut self,
        rx: &mut Vec<Packet>,
        out: &mut Output,
        pool: &mut Pool,
        tx: &mut [Vec<Packet>],
    ) {
        let packets = rx.len();
        let t0 = Instant::now();
        self.process(t0, rx, out, pool, tx);
        self.send(tx, pool);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.batch.record(packets, ns);
    }

    /// Runs `rx` through the pipeline at `now` and appends what it produced to `tx` by
    /// egress queue, for the caller to send.
    fn process(
        &mut self,
        now: Instant,
        rx: &mut Vec<Packet>,
        out: &mut Output,
        pool: &mut Pool,
        tx: &mut [Vec<Packet>],
    ) {
        self.pipeline.process(now, rx, out);
        pool.put_all(out.free.drain(..));
        for p in out.tx.drain(..) {
            match self.queue_for(p.port(), p.instance()) {
                Some(q) => tx[q].push(p),
                None => {
                    self.stats.no_queue += 1;
                    pool.put(p);
                }
            }
        }
    }

    fn send(&mut self, tx: &mut [Vec<Packet>], pool: &mut Pool) {
        for (q, b) in tx.iter_mut().enumerate() {
            if !b.is_empty() {
                // Send errors are counted by the backend as tx_dropped.
                let _ = self.queues.queues[q].io.tx_batch(b, pool);
                b.clear();
            }
        }
    }

    /// The queue a packet leaving by `port` (on N6: of network instance `instance`) goes
    /// to: N9 shares N3's interface unless it has its own.
    fn queue_for(&self, port: Port, instance: u8) -> Option<usize> {
        let find = |p: Port| {
            (self.queues.queues.iter()).position(|q| q.port == p && q.instance == instance)
        };
        find(port).or_else(|| (port == Port::N9).then(|| find(Port::N3)).flatten())
    }

    fn flush_all(&mut self) {
        for q in &mut self.queues.queues {
            let _ = q.io.flush();
        }
    }

    fn run_channels(mut self) {
        let mut out = Output::default();
        loop {
            let now = Instant::now();
            let wait = self
                .pipeline
                .poll_timeout()
                .map_or(Duration::from_millis(100), |t| {
                    t.saturating_duration_since(now)
                })
                .min(Duration::from_millis(100));
            match self.input.recv_timeout(wait) {
                Ok(Input::Packets(mut rx)) => {
                    self.pipeline.process(Instant::now(), &mut rx, &mut out);
                    if !out.tx.is_empty() && self.output.send(std::mem::take(&mut out.tx)).is_err()
                    {
                        return;
                    }
                    out.free.clear();
                }
                Ok(Input::Control(c)) => {
                    self.control(c);
                    if self.pipeline.has_queued() {
                        self.pipeline
                            .process(Instant::now(), &mut Vec::new(), &mut out);
                        if !out.tx.is_empty()
                            && self.output.send(std::mem::take(&mut out.tx)).is_err()
                        {
                            return;
                        }
                        out.free.clear();
                    }
                }
                Ok(Input::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            self.pipeline.handle_timeout(Instant::now());
            while let Some(e) = self.pipeline.poll_event() {
                let _ = self.events.send((self.index, e));
            }
            if self.pipeline.has_queued() {
                self.pipeline
                    .process(Instant::now(), &mut Vec::new(), &mut out);
                if !out.tx.is_empty() && self.output.send(std::mem::take(&mut out.tx)).is_err() {
                    return;
                }
                out.free.clear();
            }
        }
    }

    fn control(&mut self, c: Control) {
        let now = Instant::now();
        // A reply that cannot be delivered means the caller gave up; nothing to do.
        match c {
            Control::Install(s, f, budgets, r) => {
                let _ = r.send(self.pipeline.install_shared(now, s, f, budgets.as_deref()));
            }
            Control::InstallNew(sessions, r) => {
                let flags = InstallFlags::default();
                let installed = (sessions.into_iter())
                    .map(|s| self.pipeline.install_shared(now, s, flags, None))
                    .collect();
                let _ = r.send(installed);
            }
            Control::Remove(seid, r) => {
                let _ = r.send(self.pipeline.remove_session(now, seid));
            }
            Control::Query(seid, urrs, trigger, r) => {
                let _ = r.send(self.pipeline.report_now(now, seid, &urrs, trigger));
            }
            Control::Unreported(seid, r) => {
                let _ = r.send(self.pipeline.unreported(seid));
            }
            Control::UnreportedChanged(from, r) => {
                let read = self
                    .pipeline
                    .unreported_changed_from(from, CHECKPOINT_SLOTS);
                let _ = r.send(Ok(read));
            }
            Control::Carry(seid, usage, quota, r) => {
                let _ = r.send(self.pipeline.carry_usage(now, seid, &usage, quota));
            }
            Control::Carried(seids, r) => {
                let carried = (seids.into_iter())
                    .filter_map(|seid| Some((seid, self.pipeline.carried(now, seid).ok()?)))
                    .collect();
                let _ = r.send(Ok(carried));
            }
            Control::CarryIn(carried) => {
                for (seid, c) in carried {
                    // A session removed since: nothing to carry into.
                    let _ = self.pipeline.carry_in(now, seid, &c);
                }
            }
            Control::Session(seid, r) => {
                let _ = r.send(self.pipeline.session(seid).cloned());
            }
            Control::Counters(r) => {
                let _ = r.send(self.pipeline.counters().clone());
            }
            Control::Path(c) => self.pipeline.path_change(now, c),
            Control::MaxRbs(n) => {
                if let Some(p) = self.priority.as_mut() {
                    p.scheduler.set_max_rbs(n);
                }
            }
            Control::Stats(r) => {
                let mut s = self.stats.clone();
                if let Some(p) = self.priority.as_mut() {
                    // The idle time since its last poll counts.
                    p.scheduler.record_busy(now, Duration::ZERO);
                    s.groups = p.queues.status();
                    s.utilisation_permille = Some(p.scheduler.utilisation());
                }
                s.counters = self.pipeline.counters().clone();
                s.sessions = self.pipeline.sessions();
                for q in &mut self.queues.queues {
                    q.io.refresh_stats();
                }
                s.io = self
                    .queues
                    .queues
                    .iter()
                    .map(|q| (q.port, q.io.describe(), q.io.stats()))
                    .collect();
                let _ = r.send(s);
            }
        }
    }
}

/// The UE addresses a session's packets are steered by.
fn session_ue(s: &Session) -> Option<std::net::IpAddr> {
    s.pdrs.iter().find_map(|p| {
        let ue = p.pdi.ue_ip?;
        ue.ipv4
            .map(std::net::IpAddr::V4)
            .or(ue.ipv6.map(|(a, _)| std::net::IpAddr::V6(a)))
    })
}

/// Why the workers could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("workers must be at least 1")]
    NoWorkers,
    #[error("{workers} workers but queues for {queues}")]
    QueuesPerWorker { workers: usize, queues: usize },
    #[error("eventfd for the workers: {0}")]
    Waker(std::io::Error),
    #[error("starting worker {0}: {1}")]
    Thread(usize, std::io::Error),
}

impl Workers {
    /// Workers fed over channels ([`Workers::steer`], [`Workers::deliver`]) whose output is
    /// read with [`Workers::collect`]: the in-memory data path.
    pub fn start(cfg: &RuntimeConfig) -> Result<Self, StartError> {
        Self::start_io(cfg, Vec::new())
    }

    /// Workers on real interfaces: worker i owns `queues[i]` (one entry per worker), or none
    /// at all (channels only) when `queues` is empty.
    pub fn start_io(cfg: &RuntimeConfig, queues: Vec<WorkerQueues>) -> Result<Self, StartError> {
        if cfg.workers == 0 {
            return Err(StartError::NoWorkers);
        }
        if !queues.is_empty() && queues.len() != cfg.workers {
            return Err(StartError::QueuesPerWorker {
                workers: cfg.workers,
                queues: queues.len(),
            });
        }
        let mut queues = queues.into_iter();
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let (ev_tx, events) = mpsc::channel();
        let (out_tx, output) = mpsc::channel();
        let (inputs, receivers): (Vec<_>, Vec<_>) =
            (0..cfg.workers).map(|_| mpsc::channel()).unzip();
        let steering = steer::Steering::new(cfg.workers, cfg.spread_ues.iter().copied());
        let wakers = (0..cfg.workers)
            .map(|_| Waker::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StartError::Waker)?;
        let backlog = Arc::new(Backlog::new(cfg.workers));
        let mut threads = Vec::new();
        for (i, rx) in receivers.into_iter().enumerate() {
            let own = queues.next().unwrap_or_default();
            // A poll takes up to a batch from each of the worker's queues, as in FIFO.
            let per_poll = cfg.batch.max(1) * own.queues.len().max(1);
            let w = Worker {
                index: i,
                pipeline: Pipeline::new(Instant::now(), cfg.pipeline.clone()),
                input: rx,
                events: ev_tx.clone(),
                output: out_tx.clone(),
                queues: own,
                peers: inputs.clone(),
                wakers: wakers.clone(),
                waker: wakers[i].clone(),
                backlog: backlog.clone(),
                steering: steering.clone(),
                batch: cfg.batch.max(1),
                idle_poll: cfg.idle_poll,
                stats: WorkerStats::default(),
                priority: Prio::new(&cfg.priority, per_poll, Instant::now()),
            };
            let core = if cfg.cores.is_empty() {
                (cfg.workers <= cores.len()).then(|| cores[i])
            } else {
                let c = cfg.cores[i % cfg.cores.len()];
                cores.iter().find(|id| id.id == c).copied()
            };
            let t = std::thread::Builder::new()
                .name(format!("upf-worker-{i}"))
                .spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    w.run();
                })
                .map_err(|e| StartError::Thread(i, e))?;
            threads.push(t);
        }
        Ok(Self {
            inputs,
            wakers,
            threads,
            events,
            reports: Reports::default(),
            merged: VecDeque::new(),
            output,
            placement: Default::default(),
            steering,
            tunnels: (!cfg.pipeline.echo.interval.is_zero()).then(Tunnels::default),
            priority: cfg.priority.mode.clone(),
        })
    }

    pub fn steering(&self) -> &steer::Steering {
        &self.steering
    }

    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Software steering: hands each packet to the worker owning its UE, in batches, keeping
    /// the order of each UE's packets.
    pub fn steer(&self, packets: Vec<Packet>) {
        let n = self.inputs.len();
        let mut per: Vec<Vec<Packet>> = (0..n).map(|_| Vec::new()).collect();
        for p in packets {
            per[self.steering.worker(&p)].push(p);
        }
        for (i, b) in per.into_iter().enumerate() {
            if !b.is_empty() {
                self.send(i, Input::Packets(b));
            }
        }
    }

    /// Hands a batch straight to worker `i` (for backends that steer themselves).
    pub fn deliver(&self, i: usize, packets: Vec<Packet>) {
        if i < self.inputs.len() {
            self.send(i, Input::Packets(packets));
        }
    }

    /// Sent packets, as the workers produced them; waits up to `timeout` for the first batch.
    pub fn collect(&self, timeout: Duration) -> Vec<Packet> {
        let mut v = Vec::new();
        if let Ok(b) = self.output.recv_timeout(timeout) {
            v.extend(b);
        }
        while let Ok(b) = self.output.try_recv() {
            v.extend(b);
        }
        v
    }

    /// The session `seid` as the data path holds it (what the last successful install gave
    /// it), if installed.
    pub fn installed(&self, seid: Seid) -> Option<&Arc<Session>> {
        self.placement.get(&seid).map(|p| &p.session)
    }

    /// The session `seid` as worker `i` holds it, asked of the worker (read-back for tests).
    /// Sessions installed.
    pub fn session_count(&self) -> usize {
        self.placement.len()
    }

    /// The SEIDs of every installed session.
    pub fn seids(&self) -> Vec<Seid> {
        self.placement.keys().copied().collect()
    }

    pub fn session_on(&self, i: usize, seid: Seid) -> Option<Arc<Session>> {
        let (tx, rx) = mpsc::sync_channel(1);
        if i >= self.inputs.len() || !self.send(i, Input::Control(Control::Session(seid, tx))) {
            return None;
        }
        rx.recv().ok().flatten()
    }

    /// Puts the workers in `done`, which took the new version of session `seid` before a
    /// later worker refused it, back to what they held before: the old session where there
    /// was one (drawing on its old shared buckets), none elsewhere.
    ///
    /// Putting back cannot be refused: the old session's keys were its own on that worker, and
    /// nothing else was installed there since. A worker that does not answer has stopped and
    /// holds nothing. What cannot be put back is the usage of URRs the new version removed,
    /// counted on these workers before the swap: those URRs start again from zero.
    fn roll_back(&self, seid: Seid, done: &[usize], old: Option<&Placed>) {
        for &i in done {
            match old.filter(|o| o.workers.contains(&i)) {
                Some(o) => {
                    // Its shared buckets back at its rates (the new version set its own).
                    let budgets = o.budgets.as_deref().map(|b| {
                        Arc::new(SessionBudgets::new(Instant::now(), &o.session, Some(b)))
                    });
                    let s = o.session.clone();
                    let flags = InstallFlags::default();
                    let _ = self.ask(i, |tx| Control::Install(s, flags, budgets, tx));
                }
                None => {
                    let _ = self.ask(i, |tx| Control::Remove(seid, tx));
                }
            }
        }
    }

    /// Every worker's counters, in worker order.
    pub fn counters(&self) -> Vec<Counters> {
        (0..self.inputs.len())
            .filter_map(|w| {
                let (tx, rx) = mpsc::sync_channel(1);
                self.send(w, Input::Control(Control::Counters(tx)))
                    .then_some(())?;
                rx.recv().ok()
            })
            .collect()
    }

    /// Every worker's statistics (counters, sessions, queues), in worker order.
    pub fn stats(&self) -> Vec<WorkerStats> {
        (0..self.inputs.len())
            .filter_map(|w| {
                let (tx, rx) = mpsc::sync_channel(1);
                self.send(w, Input::Control(Control::Stats(tx)))
                    .then_some(())?;
                rx.recv_timeout(Duration::from_secs(2)).ok()
            })
            .collect()
    }

    /// Sets MAX_RBS (at least 1) on every worker, between two of their polls, not waited
    /// for; refused in the priority modes without one (fifo, weighted).
    pub fn set_max_rbs(&self, max_rbs: usize) -> Result<(), &'static str> {
        if !matches!(self.priority, Mode::Strict { .. } | Mode::LoadAware { .. }) {
            return Err("MAX_RBS: the priority mode is neither strict nor load-aware");
        }
        for i in 0..self.inputs.len() {
            self.send(i, Input::Control(Control::MaxRbs(max_rbs)));
        }
        Ok(())
    }

    /// Queues `input` for worker `i` and wakes it if it sleeps; false if it has stopped.
    fn send(&self, i: usize, input: Input) -> bool {
        let ok = self.inputs[i].send(input).is_ok();
        self.wakers[i].wake();
        ok
    }

    /// A session's live tunnels are now `peers`: the path owner is told of each peer that
    /// gained its first or lost its last (no reply awaited: it applies them in order, between
    /// two batches, and nothing waits on them).
    fn tunnels_changed(&mut self, seid: Seid, peers: Vec<upf_dataplane::paths::Peer>) {
        let Some(t) = self.tunnels.as_mut() else {
            return;
        };
        let mut changes = Vec::new();
        t.set(seid, peers, &mut changes);
        for c in changes {
            self.send(PATH_OWNER, Input::Control(Control::Path(c)));
        }
    }

    /// Adds usage another engine measured for session `seid`'s URRs since their last report
    /// to what its first worker counted: in their next reports, against their thresholds
    /// and, with `quota`, their quotas (without: the quotas' use is set from that engine's,
    /// [`Workers::carry_in`]). (A session on several workers draws its shared URR limits
    /// only from what the workers count.)
    pub fn carry_usage(
        &self,
        seid: Seid,
        usage: Vec<(UrrId, Volume)>,
        quota: bool,
    ) -> Result<(), DatapathError> {
        let i = self.first_worker(seid)?;
        self.ask(i, |tx| Control::Carry(seid, usage, quota, tx))
    }

    /// The backlogs of sessions `seids`' MBR buckets and the use of their quotas now, asked
    /// of each one's first worker (as [`Workers::carry_usage`]: a session on several workers
    /// draws on buckets and quotas they share, which are not carried), one message a worker;
    /// sessions not installed left out.
    pub fn carried(&self, seids: &[Seid]) -> Result<SessionsCarried, DatapathError> {
        let mut out = Vec::new();
        for (i, seids) in self.by_first_worker(seids.iter().map(|&s| (s, s))) {
            out.extend(self.ask(i, |tx| Control::Carried(seids, tx))?);
        }
        Ok(out)
    }

    /// Each session's MBR buckets and quotas continue from `carried` (another engine's) on
    /// its first worker, one message a worker; not waited for (a worker applies its control
    /// messages in order, between two batches).
    pub fn carry_in(&self, carried: SessionsCarried) -> Result<(), DatapathError> {
        for (i, b) in self.by_first_worker(carried.into_iter().map(|b| (b.0, b))) {
            if !self.send(i, Input::Control(Control::CarryIn(b))) {
                return Err(DatapathError::Internal(format!("worker {i} stopped")));
            }
        }
        Ok(())
    }

    /// `items` of installed sessions by their first worker.
    fn by_first_worker<T>(
        &self,
        items: impl IntoIterator<Item = (Seid, T)>,
    ) -> Vec<(usize, Vec<T>)> {
        let mut per: Vec<(usize, Vec<T>)> = Vec::new();
        for (seid, t) in items {
            let Ok(i) = self.first_worker(seid) else {
                continue;
            };
            match per.iter_mut().find(|(w, _)| *w == i) {
                Some((_, v)) => v.push(t),
                None => per.push((i, vec![t])),
            }
        }
        per
    }

    fn first_worker(&self, seid: Seid) -> Result<usize, DatapathError> {
        self.placement
            .get(&seid)
            .and_then(|p| p.workers.first().copied())
            .ok_or(DatapathError::UnknownSession(seid))
    }

    /// The usage each of session `seid`'s URRs measured since its last report, over its
    /// workers (not restarted; for a session on several workers, pieces of a report held
    /// back to be merged are not in it).
    pub fn unreported(&self, seid: Seid) -> Result<Vec<(UrrId, Volume)>, DatapathError> {
        let owners = (self.placement.get(&seid))
            .map(|p| p.workers.clone())
            .ok_or(DatapathError::UnknownSession(seid))?;
        let mut all: Vec<(UrrId, Volume)> = Vec::new();
        for i in owners {
            for (urr, v) in self.ask(i, |tx| Control::Unreported(seid, tx))? {
                match all.iter_mut().find(|(u, _)| *u == urr) {
                    Some((_, t)) => t.add(&v),
                    None => all.push((urr, v)),
                }
            }
        }
        Ok(all)
    }

    /// For a usage checkpoint: [`Workers::unreported`] of every session that counted, or
    /// reported, since the last call (sessions that never counted left out), one message a
    /// worker, all asked before any answer is awaited. A session on several workers is
    /// read whole from all of them when one of them counted.
    pub fn unreported_changed(&self) -> Result<SessionsUsage, DatapathError> {
        let mut out = Vec::new();
        let mut spread = Vec::new();
        // Each worker reads its sessions a part at a time (CHECKPOINT_SLOTS), the workers
        // in parallel, each part asked once the last is answered.
        let mut next: Vec<(usize, usize)> = (0..self.inputs.len()).map(|i| (i, 0)).collect();
        while !next.is_empty() {
            let mut asked = Vec::with_capacity(next.len());
            for (i, from) in next.drain(..) {
                let (tx, rx) = mpsc::sync_channel(1);
                if !self.send(i, Input::Control(Control::UnreportedChanged(from, tx))) {
                    return Err(DatapathError::Internal(format!("worker {i} stopped")));
                }
                asked.push((i, rx));
            }
            for (i, rx) in asked {
                let (answer, more) = rx
                    .recv()
                    .map_err(|_| DatapathError::Internal(format!("worker {i} stopped")))??;
                next.extend(more.map(|from| (i, from)));
                for (seid, usage) in answer {
                    match self.placement.get(&seid).map(|p| p.workers.len()) {
                        Some(1) => out.push((seid, usage)),
                        Some(_) => spread.push(seid),
                        // Removed since it answered: nothing to keep.
                        None => {}
                    }
                }
            }
        }
        spread.sort_unstable();
        spread.dedup();
        for seid in spread {
            if let Ok(u) = self.unreported(seid) {
                out.push((seid, u));
            }
        }
        Ok(out)
    }

    /// Reports of `trigger` of session `seid`'s URRs `urrs` (all when empty): their usage
    /// since their last report, restarting their measurement, as a query does
    /// (`Datapath::query_usage` is this with IMMER). For a trigger another engine found
    /// fired (the XDP engine's volume thresholds and quotas).
    pub fn report_usage(
        &mut self,
        seid: Seid,
        urrs: &[UrrId],
        trigger: UsageTrigger,
    ) -> Result<Vec<UsageReport>, DatapathError> {
        let (owners, budgets) = self
            .placement
            .get(&seid)
            .map(|p| (p.workers.clone(), p.budgets.clone()))
            .ok_or(DatapathError::UnknownSession(seid))?;
        let mut all = Vec::new();
        for i in owners {
            let u = urrs.to_vec();
            match self.ask(i, |tx| Control::Query(seid, u, trigger, tx)) {
                Ok(r) => all.extend(pieces(i, r)),
                Err(e) => {
                    // What the workers before it restarted goes with the next reports.
                    all.into_iter().for_each(|p| self.reports.keep(p));
                    return Err(e);
                }
            }
        }
        // Every worker restarted its measurement: so do the shared thresholds.
        if let Some(b) = budgets {
            b.restart_thresholds(urrs);
        }
        Ok(self.reports.queried(seid, urrs, all))
    }

    /// Returns once every worker of session `seid` has sent what its last control message
    /// released (buffered packets of a FAR that stopped buffering): what another engine
    /// forwards for the session from now on leaves after them.
    pub fn barrier(&self, seid: Seid) {
        let owners = self
            .placement
            .get(&seid)
            .map(|p| p.workers.clone())
            .unwrap_or_default();
        for i in owners {
            let (tx, rx) = mpsc::sync_channel(1);
            if self.send(i, Input::Control(Control::Session(seid, tx))) {
                let _ = rx.recv();
            }
        }
    }

    /// Session `session` is now installed on `owners`: its tunnels counted, its place kept.
    /// Sends worker `i` the new sessions of `part` to install ([`Control::InstallNew`]); the
    /// answer is read later from `asked`. A worker gone fails them at once.
    fn ask_install(
        &mut self,
        i: usize,
        part: Vec<(usize, Arc<Session>)>,
        asked: &mut Vec<Asked>,
        out: &mut [Option<Result<Installed, DatapathError>>],
    ) {
        if part.is_empty() {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let c = Control::InstallNew(part.iter().map(|(_, s)| s.clone()).collect(), tx);
        if self.send(i, Input::Control(c)) {
            asked.push((i, part, rx));
        } else {
            for (k, _) in part {
                out[k] = Some(Err(DatapathError::Internal(format!("worker {i} stopped"))));
            }
        }
    }

    fn placed(
        &mut self,
        session: Arc<Session>,
        owners: Vec<usize>,
        budgets: Option<Arc<SessionBudgets>>,
    ) {
        if self.tunnels.is_some() {
            self.tunnels_changed(session.seid, tunnel_peers(&session));
        }
        self.placement.insert(
            session.seid,
            Placed {
                workers: owners,
                session,
                budgets,
            },
        );
    }

    fn ask<T>(&self, i: usize, make: impl FnOnce(Reply<T>) -> Control) -> Result<T, DatapathError> {
        let (tx, rx) = mpsc::sync_channel(1);
        if !self.send(i, Input::Control(make(tx))) {
            return Err(DatapathError::Internal(format!("worker {i} stopped")));
        }
        rx.recv()
            .map_err(|_| DatapathError::Internal(format!("worker {i} did not answer")))?
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for i in 0..self.inputs.len() {
            self.send(i, Input::Stop);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Datapath for Workers {
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        // The owner by UE address; a session without one cannot be steered to a single worker
        // and, like a peak-rate UE's, is installed on all, its rates drawn from buckets they
        // share (those of its previous version, at the new rates).
        let seid = session.seid;
        let owners = self.steering.owners(session_ue(&session));
        let old = self.placement.get(&seid).cloned();
        let budgets = (owners.len() > 1).then(|| {
            let old = old.as_ref().and_then(|o| o.budgets.as_deref());
            Arc::new(SessionBudgets::new(now, &session, old))
        });
        // The final usage of the URRs the new version no longer has, per worker.
        let mut removed = Vec::new();
        // All or none: a worker refuses before it changes anything, so when worker k refuses,
        // the workers before it are put back and the data path holds the old session alone.
        for (k, &i) in owners.iter().enumerate() {
            let (s, b) = (session.clone(), budgets.clone());
            match self.ask(i, |tx| Control::Install(s, flags, b, tx)) {
                Ok(r) => removed.extend(pieces(i, r.removed_urr_usage)),
                Err(e) => {
                    self.roll_back(seid, &owners[..k], old.as_ref());
                    // The URRs the new version removed are back, counting from zero: what
                    // they had measured goes with their next reports.
                    for p in removed {
                        self.reports.keep(p);
                    }
                    return Err(e);
                }
            }
        }
        let kept: Vec<UrrId> = session.urrs.iter().map(|u| u.id).collect();
        // A UE address change moves the session: remove it where it no longer belongs. What
        // those workers measured goes with the next reports of its URRs.
        let was_on = old.map(|o| o.workers).unwrap_or_default();
        let moved = was_on != owners;
        for i in was_on.into_iter().filter(|i| !owners.contains(i)) {
            let left = self.ask(i, |tx| Control::Remove(seid, tx));
            for p in pieces(i, left.unwrap_or_default()) {
                if kept.contains(&p.report.urr) {
                    self.reports.keep(p);
                } else {
                    removed.push(p);
                }
            }
        }
        let installed = Installed {
            removed_urr_usage: self.reports.reinstalled(seid, &kept, moved, removed),
        };
        self.placed(session, owners, budgets);
        Ok(installed)
    }

    fn install_new(
        &mut self,
        now: Instant,
        sessions: Vec<Arc<Session>>,
    ) -> Vec<Result<Installed, DatapathError>> {
        // The sessions of one worker go to it in batches, all sent before any answer is
        // read: a round trip per session cost two context switches when the caller shares
        // the worker's CPU (~0.3 s of a 100k restore), and ~0.2 ms when the worker sleeps.
        // A batch keeps the worker from its packets for ~2 ms at most. The rest (on every
        // worker, or installed already) go through `install`, all or none.
        let mut out: Vec<Option<Result<Installed, DatapathError>>> =
            sessions.iter().map(|_| None).collect();
        let mut batches: Vec<Vec<(usize, Arc<Session>)>> = vec![Vec::new(); self.inputs.len()];
        let mut asked = Vec::new();
        for (k, s) in sessions.into_iter().enumerate() {
            match *self.steering.owners(session_ue(&s)).as_slice() {
                [i] if !self.placement.contains_key(&s.seid) => {
                    batches[i].push((k, s));
                    if batches[i].len() == INSTALL_BATCH {
                        let part = std::mem::take(&mut batches[i]);
                        self.ask_install(i, part, &mut asked, &mut out);
                    }
                }
                _ => {
                    // In order: what was batched before it is installed first.
                    for (i, part) in batches.iter_mut().enumerate() {
                        let part = std::mem::take(part);
                        self.ask_install(i, part, &mut asked, &mut out);
                    }
                    out[k] = Some(self.install(now, s, InstallFlags::default()));
                }
            }
        }
        for (i, part) in batches.into_iter().enumerate() {
            self.ask_install(i, part, &mut asked, &mut out);
        }
        for (i, part, rx) in asked {
            let mut results = rx.recv().unwrap_or_default().into_iter();
            for (k, s) in part {
                let r = results.next().unwrap_or_else(|| {
                    Err(DatapathError::Internal(format!(
                        "worker {i} did not answer"
                    )))
                });
                if r.is_ok() {
                    self.placed(s, vec![i], None);
                }
                out[k] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(DatapathError::Internal("not installed".into()))))
            .collect()
    }

    fn remove(&mut self, _now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        let placed = self
            .placement
            .remove(&seid)
            .ok_or(DatapathError::UnknownSession(seid))?;
        // The tunnels go with the session, whatever its workers answer.
        self.tunnels_changed(seid, Vec::new());
        // A removal cannot be undone (each worker's final usage is read out as it goes), so
        // it goes to every worker even past one that fails: none keeps a session the caller
        // no longer has. The first failure is returned.
        let mut all = Vec::new();
        let mut failed = None;
        for i in placed.workers {
            match self.ask(i, |tx| Control::Remove(seid, tx)) {
                Ok(u) => all.extend(pieces(i, u)),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        let reports = self.reports.removed(seid, all);
        match failed {
            Some(e) => Err(e),
            None => Ok(reports),
        }
    }

    fn query_usage(
        &mut self,
        _now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        self.report_usage(seid, urrs, UsageTrigger::IMMER)
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        if let Some(e) = self.merged.pop_front() {
            return Some(e);
        }
        loop {
            let (w, e) = self.events.try_recv().ok()?;
            let DatapathEvent::Usage(r) = e else {
                return Some(e);
            };
            let Some(placed) = self.placement.get(&r.seid) else {
                return Some(DatapathEvent::Usage(r));
            };
            // A session on one worker with nothing held back: as it comes (the fast route).
            if placed.workers.len() == 1 && !self.reports.holds(r.seid) {
                return Some(DatapathEvent::Usage(r));
            }
            let budgets = placed.budgets.clone();
            let m = match self.reports.event(w, &placed.workers, r) {
                Step::Emit(r) => return Some(DatapathEvent::Usage(r)),
                Step::Hold => continue,
                Step::Merge(m) => m,
            };
            let (seid, urr) = (m.seid(), m.urr());
            let mut queried = Vec::new();
            for &i in &m.query {
                // A worker that does not answer has stopped: it holds nothing more.
                let q = |tx| Control::Query(seid, vec![urr], UsageTrigger::IMMER, tx);
                if let Ok(u) = self.ask(i, q) {
                    queried.extend(pieces(i, u));
                }
            }
            // The URR's measurement restarted on every worker, as for a query of it: so do
            // its shared thresholds. After a threshold report this is not a second restart:
            // what the workers counted since the reporting one restarted them is in this
            // report.
            if let Some(b) = budgets {
                b.restart_thresholds(&[urr]);
            }
            let mut out = (self.reports.merged(m, queried).into_iter()).map(DatapathEvent::Usage);
            let first = out.next();
            self.merged.extend(out);
            if first.is_some() {
                return first;
            }
        }
    }
}

/// Worker `worker`'s reports.
fn pieces(worker: usize, reports: Vec<UsageReport>) -> impl Iterator<Item = Piece> {
    reports
        .into_iter()
        .map(move |report| Piece { worker, report })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_off_backlog_bounded_per_worker() {
        let b = Backlog::new(2);
        assert!(b.try_add(1, HAND_OFF_BACKLOG - 10));
        assert!(!b.try_add(1, 11), "past the bound");
        assert!(b.try_add(0, 64), "another worker's backlog is its own");
        assert!(b.try_add(1, 10));
        b.taken(1, 100);
        assert!(b.try_add(1, 100));
        assert!(!b.try_add(1, 1));
        b.taken(1, usize::MAX);
        assert_eq!(b.0[1].load(Ordering::Relaxed), 0);
        assert!(!b.try_add(2, 1), "no such worker");
    }
}
