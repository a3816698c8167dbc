//! One worker's pipeline: its tables, its sessions' state, and `process`, which runs a batch
//! of packets to completion (decapsulate → classify → PDR → FAR → QER → URR → encapsulate).

mod batch;
mod gbr;
mod general;
mod gtpu;
mod hot_path;
mod n6;
mod null;
mod signalling;
mod steps;

pub use null::null_forward;
pub(crate) use signalling::wrap_for_peer;

use crate::counters::{Counters, DropReason};
use crate::flow::Addr;
use crate::hot::{Hot, Kind};
use crate::intmap::IntMap;
use crate::meter::RateLimit;
use crate::overflow::Arena;
use crate::paths::{Paths, Tunnels};
use crate::session::Compiled;
use crate::shapes::Shapes;
use crate::tables::{FastMap, UeTables};
use crate::PipelineConfig;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use upf_packet::Packet;
use upf_rules::{DatapathEvent, Seid, Session};

/// A vector with room for `n` (a compiled session is ~3 kB: at a million sessions that is
/// gigabytes of address space, which a host with strict overcommit may refuse: then it grows
/// as it goes instead).
fn reserved<T>(n: usize) -> Vec<T> {
    let mut v = Vec::new();
    let _ = v.try_reserve_exact(n);
    v
}

/// GTP-U's UDP port (TS 29.281 §4.4.2).
pub const GTPU_PORT: u16 = 2152;

/// What a batch produced besides events: packets to send (each with its egress port) and
/// buffers to reuse.
#[derive(Debug, Default)]
pub struct Output {
    pub tx: Vec<Packet>,
    pub free: Vec<Packet>,
}

/// One worker's share of the data path.
#[derive(Debug)]
pub struct Pipeline {
    pub(crate) cfg: PipelineConfig,
    pub(crate) slots: Vec<Option<Compiled>>,
    /// Per slot: the hot record ([`crate::hot`]), and what each of its halves is.
    pub(crate) hot: Vec<Hot>,
    pub(crate) kinds: Vec<[Kind; 2]>,
    /// The hot records' shapes, and the overflow runs of those with [`HOT_RUN`] halves.
    pub(crate) shapes: Shapes,
    pub(crate) arena: Arena,
    /// Sessions installed cold (prefetched by reference, in steps).
    pub(crate) cold: usize,
    /// One bit per slot, set while its session is cold: read for every packet of a batch
    /// while any session is, so dense (1M slots in 128 KiB) where `kinds` is 2 octets a slot.
    pub(crate) cold_bits: Vec<u64>,
    /// `now` of this batch is exactly `epoch + clock_ns`: hot records may count in clock
    /// time (otherwise packets of hot sessions take the general path after a sync).
    pub(crate) hot_ok: bool,
    pub(crate) hot_enabled: bool,
    /// Hot sessions served cold in this batch (see `hot_ok`), made hot again after it.
    pub(crate) rehot: Vec<u32>,
    /// Sessions made hot because a FAR of theirs was refused for the buffer budget
    /// (`CFar::over_budget`): rebuilt all at once when the budget falls to its low-water
    /// mark, not on every freed packet. Deduplicated when longer than `slots`.
    pub(crate) over_budget: Vec<u32>,
    pub(crate) generations: Vec<u32>,
    pub(crate) free_slots: Vec<u32>,
    /// Sessions with a GBR QER ([`Pipeline::gbr_flow`] looks at nothing while there is none).
    pub(crate) gbr_sessions: usize,
    pub(crate) by_seid: FastMap<Seid, u32>,
    pub(crate) teids: IntMap,
    pub(crate) ue: UeTables,
    pub(crate) remote: FastMap<(u32, Addr), u32>,
    pub(crate) counters: Counters,
    pub(crate) events: VecDeque<DatapathEvent>,
    /// Released buffered packets, processed before the next batch to keep their order.
    pub(crate) requeue: VecDeque<Packet>,
    /// Packets made outside `process` (End Markers), sent with the next batch.
    pub(crate) pending: Vec<Packet>,
    pub(crate) buffered_bytes: usize,
    pub(crate) timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    pub(crate) error_indications: RateLimit,
    pub(crate) ext_notifications: RateLimit,
    /// GTP-U path management: the peers this pipeline probes ([`crate::paths`]), and, when
    /// it is a data path on its own (`impl Datapath`), its sessions' tunnels per peer.
    pub(crate) paths: Paths,
    pub(crate) tunnels: Tunnels,
    pub(crate) ident: u16,
    /// Per-batch scratch: each packet's lookup key ([`lookup_key`]), then its session slot
    /// ([`Pipeline::slot_hint`]).
    pub(crate) keys: Vec<u64>,
    pub(crate) hints: Vec<u32>,
    /// The meters' clock: `now` of the current batch as nanoseconds since `epoch`.
    pub(crate) epoch: Instant,
    pub(crate) clock_ns: u64,
}

/// Counts the drop and frees the buffer; `None`, so that a stage can return it as "nothing
/// to send".
fn drop_to(out: &mut Output, c: &mut Counters, p: Packet, r: DropReason) -> Option<Packet> {
    c.drop(r);
    out.free.push(p);
    None
}

impl Pipeline {
    pub fn new(now: Instant, cfg: PipelineConfig) -> Self {
        let error_indications = RateLimit::new(now, cfg.error_indications_per_s, 10);
        let ext_notifications = RateLimit::new(now, cfg.error_indications_per_s, 10);
        let n = cfg.expected_sessions;
        Self {
            slots: reserved(n),
            hot: reserved(n),
            kinds: reserved(n),
            shapes: Shapes::with_capacity(n),
            arena: Arena::default(),
            cold: 0,
            cold_bits: Vec::new(),
            hot_ok: true,
            hot_enabled: true,
            rehot: Vec::new(),
            over_budget: Vec::new(),
            generations: reserved(n),
            free_slots: Vec::new(),
            gbr_sessions: 0,
            by_seid: FastMap::with_capacity_and_hasher(n, Default::default()),
            // Two uplink TEIDs a session is common (one per QoS flow, or N3 and N9).
            teids: IntMap::with_capacity(2 * n),
            ue: UeTables::with_capacity(n),
            // Downlink tunnels by (TEID, gNB): one a session usually.
            remote: FastMap::with_capacity_and_hasher(n, Default::default()),
            counters: Counters::default(),
            events: VecDeque::new(),
            requeue: VecDeque::new(),
            pending: Vec::new(),
            buffered_bytes: 0,
            timers: BinaryHeap::new(),
            error_indications,
            ext_notifications,
            paths: Paths::new(cfg.echo),
            tunnels: Tunnels::default(),
            ident: 0,
            keys: Vec::new(),
            hints: Vec::new(),
            epoch: now,
            clock_ns: 0,
            cfg,
        }
    }

    /// `now` as nanoseconds since this pipeline's epoch (the meters count in these).
    pub(crate) fn clock(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn sessions(&self) -> usize {
        self.by_seid.len()
    }

    /// The rules of the installed session `seid`, as they were installed: what the packet
    /// path applies, read back (tests; `upf_runtime::Workers::session_on`).
    pub fn session(&self, seid: Seid) -> Option<&Arc<Session>> {
        let slot = *self.by_seid.get(&seid)?;
        self.slots.get(slot as usize)?.as_ref().map(|c| &c.rules)
    }

    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// Sessions installed in the general (cold) form only: their rules do not fit a hot
    /// record ([`crate::hot`]).
    pub fn cold_sessions(&self) -> usize {
        self.cold
    }

    /// Whether sessions get hot records (on by default). Off, every session takes the general
    /// path: for tests that hold the two paths to the same answers, and for A/B measurements.
    pub fn set_hot_records(&mut self, on: bool) {
        self.hot_enabled = on;
        for slot in 0..self.slots.len() {
            let slot = u32::try_from(slot).unwrap_or(u32::MAX);
            self.sync_slot(slot);
            self.build_hot(slot);
        }
    }
}
