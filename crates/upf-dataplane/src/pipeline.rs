//! One worker's pipeline: its tables, its sessions' state, and `process`, which runs a batch
//! of packets to completion (decapsulate → classify → PDR → FAR → QER → URR → encapsulate).

use crate::acl::AclAction;
use crate::counters::{Counters, DropReason};
use crate::flow::Addr;
use crate::hot::{Hot, Kind, COLD, EMPTY, HOT, HOT_RUN};
use crate::intmap::IntMap;
use crate::meter::RateLimit;
use crate::overflow::Arena;
use crate::parse::{flow_of, route_hop};
use crate::session::{Compiled, Strip, Target};
use crate::shapes::Shapes;
use crate::tables::{FastMap, UeTable};
use crate::PipelineConfig;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};
use upf_packet::{Packet, Port, HEADROOM};
use upf_prefetch::l1 as prefetch_index;
use upf_rules::{ApplyAction, DatapathEvent, Qfi, Seid, Teid};
use upf_wire::encap::{decapsulate, encapsulate_gtpu_v4, encapsulate_gtpu_v6, EncapV4, EncapV6};
use upf_wire::encap::{Decapsulated, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::gtpu::MessageType;
use upf_wire::{gtpu_msg, ip_proto, ipv4, ipv6, udp};

/// The length an IP header declares for its packet (IPv4 Total Length, IPv6 40 + Payload
/// Length); `flow_of` has checked that it fits the buffer.
#[inline(always)]
fn ip_len(ip: &[u8]) -> usize {
    match *ip {
        [v, _, a, b, ..] if v >> 4 == 4 => usize::from(u16::from_be_bytes([a, b])),
        [v, _, _, _, a, b, ..] if v >> 4 == 6 => 40 + usize::from(u16::from_be_bytes([a, b])),
        _ => ip.len(),
    }
}

/// A vector with room for `n` (a compiled session is ~3 kB: at a million sessions that is
/// gigabytes of address space, which a host with strict overcommit may refuse: then it grows
/// as it goes instead).
fn reserved<T>(n: usize) -> Vec<T> {
    let mut v = Vec::new();
    let _ = v.try_reserve_exact(n);
    v
}

/// No session found by [`Pipeline::slot_hint`].
const NO_HINT: u32 = u32::MAX;

/// In a batch's lookup keys ([`lookup_key`]): the key is an N6 packet's IPv4 destination,
/// not a TEID.
const KEY_UE: u64 = 1 << 32;
/// No key at fixed offsets: the packet is looked up in full when processed.
const NO_KEY: u64 = 1 << 33;

/// Set in a hint for a packet looked up by UE address (the IP PDRs' half of a hot record).
const HINT_IP: u32 = 1 << 31;

/// How many packets ahead the lines of a hot record are prefetched.
const HOT_AHEAD: usize = 8;

/// How many packets ahead the first lines of an overflow run are prefetched: the run's place
/// is read from the record's shape (its keys line was prefetched with the batch's lookups).
const RUN_AHEAD: usize = 4;

/// Shapes up to which they stay in cache (~960 octets each) without being prefetched;
/// past them, a packet's shape lines are prefetched with its record's.
const SHARED_SHAPES: usize = 64;

/// The lines of an overflow run prefetched: a half of 16 filters scans no more.
const RUN_PREFETCH_LINES: usize = 8;

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
    /// `now` of this batch is exactly `epoch + clock_ns`: hot records may count in clock
    /// time (otherwise packets of hot sessions take the general path after a sync).
    pub(crate) hot_ok: bool,
    pub(crate) hot_enabled: bool,
    /// Hot sessions served cold in this batch (see `hot_ok`), made hot again after it.
    pub(crate) rehot: Vec<u32>,
    pub(crate) generations: Vec<u32>,
    pub(crate) free_slots: Vec<u32>,
    pub(crate) by_seid: FastMap<Seid, u32>,
    pub(crate) teids: IntMap,
    pub(crate) ue: UeTable,
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
    pub(crate) ident: u16,
    /// Per-batch scratch: each packet's lookup key ([`lookup_key`]), then its session slot
    /// ([`Pipeline::slot_hint`]).
    pub(crate) keys: Vec<u64>,
    pub(crate) hints: Vec<u32>,
    /// The meters' clock: `now` of the current batch as nanoseconds since `epoch`.
    pub(crate) epoch: Instant,
    pub(crate) clock_ns: u64,
}

/// A packet's lookup key from fixed offsets (an outer IPv4 header without options): the
/// TEID of a GTP-U packet, or with [`KEY_UE`] the destination of an IPv4 N6 packet;
/// [`NO_KEY`] for anything else, which the full parse looks up.
#[inline(always)]
fn lookup_key(port: Port, d: &[u8]) -> u64 {
    match port {
        Port::N3 | Port::N9 => match d.get(..36) {
            Some(h) if h[0] == 0x45 => u64::from(u32::from_be_bytes([h[32], h[33], h[34], h[35]])),
            _ => NO_KEY,
        },
        Port::N6 => match d.get(..20) {
            Some(h) if h[0] >> 4 == 4 => {
                KEY_UE | u64::from(u32::from_be_bytes([h[16], h[17], h[18], h[19]]))
            }
            _ => NO_KEY,
        },
    }
}

/// What a batch prefetches besides hot records: shapes' lines (when too many to stay in
/// cache), overflow runs, cold sessions (when there are any).
#[derive(Clone, Copy)]
struct Extra {
    shapes: bool,
    runs: bool,
    cold: bool,
}

/// The TEID or address of a lookup key.
#[allow(clippy::cast_possible_truncation)] // the low 32 bits are the value
const fn key_value(k: u64) -> u32 {
    k as u32
}

/// Counts the drop and frees the buffer; `None`, so that a stage can return it as "nothing
/// to send".
fn drop_to(out: &mut Output, c: &mut Counters, p: Packet, r: DropReason) -> Option<Packet> {
    c.drop(r);
    out.free.push(p);
    None
}

fn wire_drop(first: Option<&u8>, e: upf_wire::Error) -> DropReason {
    use upf_wire::Error as E;
    let ip_ok = matches!(first.map(|v| v >> 4), Some(4 | 6));
    match e {
        E::Fragmented => DropReason::OuterFragment,
        E::UnknownComprehensionRequired(_) => DropReason::UnknownExtension,
        E::BadVersion | E::BadProtocolType if ip_ok => DropReason::BadGtpVersion,
        _ => DropReason::MalformedOuter,
    }
}

impl Pipeline {
    pub fn new(now: Instant, cfg: PipelineConfig) -> Self {
        let error_indications = RateLimit::new(now, cfg.error_indications_per_s, 10);
        let n = cfg.expected_sessions;
        Self {
            slots: reserved(n),
            hot: reserved(n),
            kinds: reserved(n),
            shapes: Shapes::with_capacity(n),
            arena: Arena::default(),
            cold: 0,
            hot_ok: true,
            hot_enabled: true,
            rehot: Vec::new(),
            generations: reserved(n),
            free_slots: Vec::new(),
            by_seid: FastMap::with_capacity_and_hasher(n, Default::default()),
            // Two uplink TEIDs a session is common (one per QoS flow, or N3 and N9).
            teids: IntMap::with_capacity(2 * n),
            ue: UeTable::with_capacity(n),
            // Downlink tunnels by (TEID, gNB): one a session usually.
            remote: FastMap::with_capacity_and_hasher(n, Default::default()),
            counters: Counters::default(),
            events: VecDeque::new(),
            requeue: VecDeque::new(),
            pending: Vec::new(),
            buffered_bytes: 0,
            timers: BinaryHeap::new(),
            error_indications,
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

    /// Runs `rx` to completion; forwarded packets go to `out.tx` with their egress port set.
    pub fn process(&mut self, now: Instant, rx: &mut Vec<Packet>, out: &mut Output) {
        self.clock_ns = self.clock(now);
        self.hot_ok = self.epoch.checked_add(Duration::from_nanos(self.clock_ns)) == Some(now);
        for p in self.pending.drain(..) {
            // Counted as created when sent, not when queued: in between, an End Marker is
            // neither sent nor buffered and `balanced()` would not hold.
            self.counters.created += 1;
            self.counters.tx(p.port(), p.len());
            out.tx.push(p);
        }
        while let Some(p) = self.requeue.pop_front() {
            self.counters.buffered -= 1;
            self.buffered_bytes -= p.len();
            if let Some(p) = self.handle(now, p, NO_HINT, out) {
                out.tx.push(p);
            }
        }
        // Every packet's session is looked up first, in loops of independent lookups whose
        // cache misses overlap; loading the sessions' rules the same way measured slower
        // (docs/benchmarks.md), so that is left to the processing loop. First the table line
        // of every packet of the batch, then the lookups: at 1M sessions those lines (4 MiB a
        // table) come from DRAM, further off than a prefetch a few packets ahead reached.
        // Into L2 only, here and below: into L1, a batch of misses would queue on its few
        // miss buffers (and at 1k sessions, whose records stay in cache, cost ~13 ns a packet).
        // Each packet's key is read once, here, where its octets are already being loaded;
        // the lookups below read only the keys. Received packets are counted here too.
        // (Both passes `extend` from the batch's exact length: one capacity check a batch.)
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend(rx.iter().map(|p| {
            let (port, d) = (p.port(), p.data());
            self.counters.rx(port, d.len());
            let k = lookup_key(port, d);
            if k & KEY_UE != 0 {
                self.ue.prefetch_v4(key_value(k));
            } else if k != NO_KEY {
                self.teids.prefetch(key_value(k));
            }
            k
        }));
        // What this batch prefetches besides hot records, fixed for the batch: packets do
        // not install sessions or shapes.
        let extra = Extra {
            shapes: self.shapes.live() > SHARED_SHAPES,
            runs: self.arena.live() != 0,
            cold: self.cold != 0,
        };
        let mut hints = std::mem::take(&mut self.hints);
        hints.clear();
        hints.extend(keys.iter().map(|&k| {
            let h = self.slot_hint(k);
            if h != NO_HINT {
                let slot = (h & !HINT_IP) as usize;
                if extra.cold || extra.runs {
                    upf_prefetch::l2(&self.kinds, slot);
                }
                // The record's first line now, where its page walk (a TLB miss per packet
                // at 1M sessions, nested under the hypervisor's) overlaps those of the
                // neighbouring lookups; issued HOT_AHEAD packets ahead in the processing
                // loop, each walk stalled that loop on its own (1M: 210 -> 123 ns a packet).
                if let Some(r) = self.hot.get(slot) {
                    upf_prefetch::l2_ref(&r.keys);
                }
            }
            h
        }));
        self.keys = keys;
        // Shapes too many to stay in cache: each packet's shape head now, its page walk
        // overlapped with the others' as the records' were (from the keys lines prefetched
        // above, a batch ago for the first of them); issued HOT_AHEAD packets ahead, each walk
        // would stall the loop on its own.
        if extra.shapes {
            for &h in hints.iter().filter(|&&h| h != NO_HINT) {
                if let Some(r) = self
                    .hot
                    .get((h & !HINT_IP) as usize)
                    .filter(|r| r.keys.serves)
                {
                    let half = usize::from(h & HINT_IP != 0);
                    upf_prefetch::l2_ref(&self.shapes.get(r.keys.shape).halves[half].head);
                }
            }
        }
        // The first packets' lines (the loop below prefetches HOT_AHEAD packets on).
        for h in hints.iter().take(HOT_AHEAD) {
            self.prefetch_hot(*h, extra.shapes);
        }
        for (i, p) in rx.drain(..).enumerate() {
            self.prefetch_ahead(&hints, i, extra);
            // The packet comes back in registers and is stored once into `out.tx` here: a
            // push inside `handle` read it back from the stack whole, right after it was
            // written there field by field, and stalled on the store forwarding.
            if let Some(p) = self.handle(now, p, hints[i], out) {
                out.tx.push(p);
            }
        }
        self.hints = hints;
        while let Some(slot) = self.rehot.pop() {
            self.sync_slot(slot);
            self.build_hot(slot);
        }
    }

    /// Prefetches the lines of a hot record that the packet with hint `h` will read.
    #[inline(always)]
    fn prefetch_hot(&self, h: u32, shapes: bool) {
        let slot = (h & !HINT_IP) as usize;
        let half = usize::from(h & HINT_IP != 0);
        // Whatever the slot holds: a cold or empty slot's lines are prefetched for nothing,
        // which costs less than reading for every packet what the slot holds.
        if let Some(r) = self.hot.get(slot) {
            r.prefetch(half);
            // The keys line, read here, was prefetched when the batch was looked up.
            if shapes && r.keys.serves {
                self.shapes.get(r.keys.shape).halves[half].prefetch();
            }
        }
    }

    /// Whether `half` of `slot` keeps its filters in an overflow run.
    #[inline(always)]
    fn has_run(&self, slot: usize, half: usize) -> bool {
        self.kinds.get(slot).is_some_and(|k| k[half] == HOT_RUN)
    }

    /// Prefetches the first lines of the overflow run (if any) that the packet with hint `h`
    /// will read.
    #[inline(always)]
    fn prefetch_run(&self, h: u32) {
        let half = usize::from(h & HINT_IP != 0);
        if self.has_run((h & !HINT_IP) as usize, half) {
            let run = self.run(h & !HINT_IP, half);
            for k in 0..run.len().min(RUN_PREFETCH_LINES) {
                upf_prefetch::l2(run, k);
            }
        }
    }

    /// The session a packet with lookup key `k` probably belongs to, as a hint: its slot,
    /// with [`HINT_IP`] when found by UE address; [`NO_HINT`] if none.
    #[inline(always)]
    fn slot_hint(&self, k: u64) -> u32 {
        let slot = if k & KEY_UE != 0 {
            self.ue
                .lookup(Addr::v4(key_value(k).into()))
                .filter(|&s| s < HINT_IP)
                .map(|s| s | HINT_IP)
        } else if k != NO_KEY {
            self.teids.get(key_value(k)).filter(|&s| s < HINT_IP)
        } else {
            None
        };
        slot.unwrap_or(NO_HINT)
    }

    /// Prefetches (not loads: a load would stall retirement) what the packets after the `i`th
    /// will read. A hot session's lines are known from its slot: they are prefetched in one
    /// step, [`HOT_AHEAD`] packets ahead. A cold session's are reached one pointer level per
    /// step, each step's addresses known from lines the previous step fetched: the session
    /// record 16 ahead; its rule lists 12 ahead; the fields of its rules 8 ahead; its SDF
    /// filters and FAR targets 4 ahead. (Longer distances measured no better: the lines start
    /// to leave L1 before use.)
    #[inline(always)]
    fn prefetch_ahead(&self, hints: &[u32], i: usize, extra: Extra) {
        if let Some(&h) = hints.get(i + HOT_AHEAD) {
            self.prefetch_hot(h, extra.shapes);
        }
        if extra.runs {
            if let Some(&h) = hints.get(i + RUN_AHEAD) {
                self.prefetch_run(h);
            }
        }
        if !extra.cold {
            return;
        }
        let cold = |h: u32| {
            let slot = (h & !HINT_IP) as usize;
            self.kinds.get(slot).is_some_and(|s| s[0] == COLD)
        };
        if let Some(&h) = hints.get(i + 16).filter(|&&h| cold(h)) {
            prefetch_index(&self.slots, (h & !HINT_IP) as usize);
        }
        for (ahead, step) in [(12, 2u8), (8, 3), (4, 4)] {
            if let Some(Some(s)) = hints
                .get(i + ahead)
                .filter(|&&h| cold(h))
                .and_then(|&h| self.slots.get((h & !HINT_IP) as usize))
            {
                match step {
                    2 => s.prefetch_lists(),
                    3 => s.prefetch_rules(),
                    _ => s.prefetch_filters(),
                }
            }
        }
    }

    /// `hint`: the slot [`Pipeline::slot_hint`] found, or [`NO_HINT`]. Returns the packet
    /// to send (counted as sent), if any.
    fn handle(&mut self, now: Instant, p: Packet, hint: u32, out: &mut Output) -> Option<Packet> {
        let hint = if hint == NO_HINT {
            hint
        } else {
            hint & !HINT_IP
        };
        match p.port() {
            Port::N3 | Port::N9 => self.gtp(now, p, hint, out),
            Port::N6 => self.n6(now, p, hint, out),
        }
    }

    #[inline(always)]
    fn gtp(&mut self, now: Instant, p: Packet, hint: u32, out: &mut Output) -> Option<Packet> {
        if let Some(g) = crate::fast::gpdu_v4(p.data()) {
            // The hint was read from the same TEID octets.
            let slot = if hint != NO_HINT {
                Some(hint)
            } else {
                self.teids.get(g.teid)
            };
            if let Some(slot) = slot {
                return self.gpdu(now, slot, g.teid, g.qfi, g.inner, p, out);
            }
        }
        self.gtp_general(now, p, out)
    }

    /// What [`Pipeline::gtp`]'s fast path does not take: other encodings, signalling, unknown
    /// TEIDs (out of line, so that the fast path is inlined into the batch loop).
    #[cold]
    #[inline(never)]
    fn gtp_general(&mut self, now: Instant, p: Packet, out: &mut Output) -> Option<Packet> {
        let d = match decapsulate(p.data()) {
            Ok(d) => d,
            Err(e) => {
                let r = wire_drop(p.data().first(), e);
                return drop_to(out, &mut self.counters, p, r);
            }
        };
        match d.gtpu.msg_type {
            MessageType::GPdu => {}
            MessageType::EchoRequest => {
                self.echo(p, &d, out);
                return None;
            }
            MessageType::ErrorIndication => {
                self.error_indication_received(&p, &d);
                return drop_to(out, &mut self.counters, p, DropReason::Signalling);
            }
            MessageType::EchoResponse | MessageType::EndMarker => {
                return drop_to(out, &mut self.counters, p, DropReason::Signalling)
            }
            _ => {
                return drop_to(
                    out,
                    &mut self.counters,
                    p,
                    DropReason::UnsupportedGtpMessage,
                )
            }
        }
        let teid = d.gtpu.teid;
        let Some(slot) = self.teids.get(teid) else {
            self.send_error_indication(now, p.port(), &d, out);
            return drop_to(out, &mut self.counters, p, DropReason::UnknownTeid);
        };
        let qfi = d.gtpu.ext.psc.map(|c| c.qfi);
        self.gpdu(now, slot, teid, qfi, d.inner, p, out)
    }

    /// A G-PDU for a known TEID: classify the inner packet and apply the rules.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn gpdu(
        &mut self,
        now: Instant,
        slot: u32,
        teid: u32,
        qfi: Option<u8>,
        inner: core::ops::Range<usize>,
        p: Packet,
        out: &mut Output,
    ) -> Option<Packet> {
        let Some(ip) = p.data().get(inner.clone()) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        // The inner packet ends where its IP header says (a G-PDU may carry padding after it):
        // that is what is forwarded and what URRs count.
        let end = inner.start + ip_len(ip).min(ip.len());
        let abs = (p.start() + inner.start, p.start() + end);
        if self.is_hot(slot) {
            return match self.classify_hot(slot, 0, teid, qfi, ip) {
                Ok(i) => self.apply_hot(now, slot, 0, i, p, abs, qfi, out),
                Err(r) => drop_to(out, &mut self.counters, p, r),
            };
        }
        let Some(flow) = flow_of(ip) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        let Some(s) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
            return drop_to(out, &mut self.counters, p, DropReason::UnknownTeid);
        };
        let Some(i) = Compiled::classify(&s.gtp_pdrs, Some(teid), qfi, &flow) else {
            return drop_to(out, &mut self.counters, p, DropReason::NoMatchingPdr);
        };
        if s.gtp_pdrs[i].from_ue && self.cfg.uplink_acl.check(&flow) == AclAction::Deny {
            return drop_to(out, &mut self.counters, p, DropReason::AclDenied);
        }
        self.apply(now, slot, true, i, p, abs, qfi, out)
    }

    #[inline]
    fn n6(&mut self, now: Instant, p: Packet, hint: u32, out: &mut Output) -> Option<Packet> {
        // The hint was read from the same destination octets.
        let slot = if hint != NO_HINT {
            hint
        } else {
            let Some(flow) = flow_of(p.data()) else {
                return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
            };
            let Some(slot) = self.ue.lookup(flow.dst) else {
                return drop_to(out, &mut self.counters, p, DropReason::UnknownUe);
            };
            slot
        };
        let inner = (p.start(), p.start() + p.len());
        if self.is_hot(slot) {
            return match self.classify_hot(slot, 1, 0, None, p.data()) {
                Ok(i) => self.apply_hot(now, slot, 1, i, p, inner, None, out),
                Err(r) => drop_to(out, &mut self.counters, p, r),
            };
        }
        let Some(flow) = flow_of(p.data()) else {
            return drop_to(out, &mut self.counters, p, DropReason::MalformedInner);
        };
        let Some(s) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
            return drop_to(out, &mut self.counters, p, DropReason::UnknownUe);
        };
        let Some(i) = Compiled::classify(&s.ip_pdrs, None, None, &flow) else {
            return drop_to(out, &mut self.counters, p, DropReason::NoMatchingPdr);
        };
        self.apply(now, slot, false, i, p, inner, None, out)
    }

    /// The PDR of a hot session's `half` that the inner packet `ip` matches, the uplink ACL
    /// applied: by the 12-octet IPv4 key when the packet has the common form, else by the
    /// general one (out of line).
    #[inline(always)]
    fn classify_hot(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        ip: &[u8],
    ) -> Result<usize, DropReason> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        let Some(f) = crate::fast::flow_v4(ip) else {
            return self.classify_hot_general(slot, half, teid, qfi, ip);
        };
        let i = match h.classify(half, k, teid, qfi, &f) {
            Some(i) => i,
            // A half whose filters are in a run has no PDR the inline loop sees.
            None => self
                .classify_run4(slot, half, teid, qfi, f)
                .ok_or(DropReason::NoMatchingPdr)?,
        };
        if h.head.pdrs[i].flags & crate::hot::FROM_UE != 0
            && self.cfg.uplink_acl.check4(&f) == AclAction::Deny
        {
            return Err(DropReason::AclDenied);
        }
        Ok(i)
    }

    /// [`Pipeline::classify_hot`] for packets without the common IPv4 form (IPv6, ICMP,
    /// options, later fragments).
    #[cold]
    #[inline(never)]
    fn classify_hot_general(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        ip: &[u8],
    ) -> Result<usize, DropReason> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        let f = flow_of(ip).ok_or(DropReason::MalformedInner)?;
        let i = if h.head.overflows() {
            h.classify_run(self.run(slot, half), k, teid, qfi, &f)
        } else {
            h.classify(half, k, teid, qfi, &f)
        };
        let i = i.ok_or(DropReason::NoMatchingPdr)?;
        if h.head.pdrs[i].flags & crate::hot::FROM_UE != 0
            && self.cfg.uplink_acl.check(&f) == AclAction::Deny
        {
            return Err(DropReason::AclDenied);
        }
        Ok(i)
    }

    /// The PDR of a hot half whose filters are in an overflow run (none for other halves):
    /// out of line, so that the inline classification stays as it is.
    #[cold]
    #[inline(never)]
    fn classify_run4(
        &self,
        slot: u32,
        half: usize,
        teid: u32,
        qfi: Option<u8>,
        f: crate::flow::Flow4,
    ) -> Option<usize> {
        let k = &self.hot[slot as usize].keys;
        let h = &self.shapes.get(k.shape).halves[half];
        if !h.head.overflows() {
            return None;
        }
        h.classify_run4(self.run(slot, half), k, teid, qfi, &f)
    }

    /// The filter lines of a hot half's overflow run.
    fn run(&self, slot: u32, half: usize) -> &[crate::overflow::Line] {
        let shape = self.shapes.get(self.hot[slot as usize].keys.shape);
        self.arena.lines(shape.runs[half])
    }

    /// FAR, QER and URR of the matched PDR, then out.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn apply(
        &mut self,
        now: Instant,
        slot: u32,
        gtp: bool,
        pdr_index: usize,
        mut p: Packet,
        inner: (usize, usize),
        qfi_in: Option<u8>,
        out: &mut Output,
    ) -> Option<Packet> {
        let Self {
            slots,
            counters,
            events,
            buffered_bytes,
            cfg,
            ident,
            clock_ns,
            ..
        } = self;
        let clock = *clock_ns;
        let Some(s) = slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return drop_to(out, counters, p, DropReason::UnknownUe);
        };
        s.last_packet = now;
        // A packet ends a reported silence, so the next one is reported too (the timer
        // may only look after that next silence has begun).
        s.inactive_reported = false;
        let pdr = if gtp {
            &s.gtp_pdrs[pdr_index]
        } else {
            &s.ip_pdrs[pdr_index]
        };
        let Some(far) = pdr.far.and_then(|f| s.fars.get_mut(usize::from(f))) else {
            return drop_to(out, counters, p, DropReason::FarDrop);
        };
        let action = far.action;
        if !action.contains(ApplyAction::FORW) {
            let q = pdr.qers.iter().find_map(|&q| s.qers[usize::from(q)].qfi);
            let ppi = pdr.qers.iter().find_map(|&q| s.qers[usize::from(q)].ppi);
            // DUPL applies whatever else the FAR does with the packet (e.g. DROP|DUPL for
            // lawful interception of a blocked flow).
            if action.contains(ApplyAction::DUPL) && !far.dup.is_empty() {
                let (ds, de) = if pdr.strip == Strip::Gtpu {
                    inner
                } else {
                    (p.start(), p.start() + p.len())
                };
                let mark = Mark {
                    qfi: q.or(qfi_in),
                    rqi: false,
                    ppi: None,
                };
                duplicate(
                    out,
                    counters,
                    p.data_at(ds, de),
                    &far.dup,
                    &mark,
                    cfg.outer_ttl,
                    ident,
                );
            }
            if action.contains(ApplyAction::BUFF) {
                // The CP hears of downlink data even when nothing can be buffered for it
                // (a Suggested Buffering Packets Count of 0, a full buffer).
                if action.contains(ApplyAction::NOCP) && !far.notified {
                    far.notified = true;
                    events.push_back(DatapathEvent::DownlinkData {
                        seid: s.seid,
                        pdr: pdr.id,
                        qfi: q.map(Qfi),
                        ppi,
                    });
                }
                if far.buffer.len() >= far.max_buffered
                    || *buffered_bytes + p.len() > cfg.buffer_bytes
                {
                    return drop_to(out, counters, p, DropReason::BufferFull);
                }
                counters.buffered += 1;
                *buffered_bytes += p.len();
                far.buffer.push_back(p);
                return None;
            }
            return drop_to(out, counters, p, DropReason::FarDrop);
        }
        // Where it goes and the routed hop come before QER and URR: a packet dropped for
        // want of a target or for its TTL must neither take MBR tokens nor be charged.
        let Some(target) = far.target.as_ref() else {
            return drop_to(out, counters, p, DropReason::NoForwardingTarget);
        };
        let strip = pdr.strip == Strip::Gtpu;
        let (ds, de) = if strip {
            inner
        } else {
            (p.start(), p.start() + p.len())
        };
        // A routed hop when the packet enters or leaves N6.
        if (target.port == Port::N6 || p.port() == Port::N6)
            && !route_hop(p.buffer_mut().get_mut(ds..de).unwrap_or(&mut []))
        {
            return drop_to(out, counters, p, DropReason::TtlExpired);
        }
        let len = inner.1 - inner.0;
        let uplink = pdr.from_ue;
        // QER: every QER of the PDR must let the packet through before any is charged.
        let bits = len as u64 * 8;
        let mut mark_qfi = None;
        let (mut rqi, mut ppi) = (false, None);
        // Slices once: each SmallVec access otherwise re-checks where its items live.
        let (pdr_qers, pdr_urrs) = (&pdr.qers[..], &pdr.urrs[..]);
        let (qers, urrs) = (&mut s.qers[..], &mut s.urrs[..]);
        // Every gate before any MBR: a closed gate drops the packet whatever the rates.
        let shut = |q: &crate::session::QerState| if uplink { !q.gate_ul } else { !q.gate_dl };
        if pdr_qers
            .iter()
            .any(|&q| qers.get(usize::from(q)).is_some_and(shut))
        {
            return drop_to(out, counters, p, DropReason::GateClosed);
        }
        for &q in pdr_qers {
            let Some(q) = qers.get_mut(usize::from(q)) else {
                continue;
            };
            let mbr = if uplink { &mut q.mbr_ul } else { &mut q.mbr_dl };
            if let Some(b) = mbr {
                if !b.conforms(clock, bits) {
                    return drop_to(out, counters, p, DropReason::MbrExceeded);
                }
            }
            mark_qfi = mark_qfi.or(q.qfi);
            rqi |= q.rqi;
            ppi = ppi.or(q.ppi);
        }
        if pdr_urrs
            .iter()
            .any(|&u| urrs.get(usize::from(u)).is_some_and(|u| u.exhausted))
        {
            return drop_to(out, counters, p, DropReason::QuotaExhausted);
        }
        for &q in pdr_qers {
            let Some(q) = qers.get_mut(usize::from(q)) else {
                continue;
            };
            let mbr = if uplink { &mut q.mbr_ul } else { &mut q.mbr_dl };
            if let Some(b) = mbr {
                b.take(bits);
            }
            if q.gbr.is_some() {
                q.gbr_bytes += len as u64;
            }
        }
        for &u in pdr_urrs {
            let Some(u) = urrs.get_mut(usize::from(u)) else {
                continue;
            };
            if let Some(t) = u.count(now, len as u64, uplink) {
                events.push_back(DatapathEvent::Usage(u.report(now, s.seid, t)));
            }
        }
        let qfi = if target.to_access {
            mark_qfi.or(qfi_in)
        } else {
            qfi_in.or(mark_qfi)
        };
        let mark = Mark { qfi, rqi, ppi };
        duplicate(
            out,
            counters,
            p.buffer_mut().get(ds..de).unwrap_or(&[]),
            &far.dup,
            &mark,
            cfg.outer_ttl,
            ident,
        );
        if !emit(&mut p, ds, de, target, &mark, cfg.outer_ttl, ident) {
            return drop_to(out, counters, p, DropReason::EncapFailed);
        }
        counters.tx(p.port(), p.len());
        Some(p)
    }

    /// Whether packets of `slot` take the hot path. When this batch's clock is not exact, a
    /// hot session is synced and served cold until the batch ends.
    #[inline(always)]
    fn is_hot(&mut self, slot: u32) -> bool {
        let hot = self.hot.get(slot as usize).is_some_and(|h| h.keys.serves);
        if hot && !self.hot_ok {
            self.sync_slot(slot);
            self.hot[slot as usize].keys.serves = false;
            self.rehot.push(slot);
            return false;
        }
        hot
    }

    /// Moves what the hot record of `slot` owns into its compiled session.
    pub(crate) fn sync_slot(&mut self, slot: u32) {
        if let (Some(h), Some(Some(s))) = (
            self.hot.get_mut(slot as usize),
            self.slots.get_mut(slot as usize),
        ) {
            h.sync(&self.shapes, s, self.epoch);
        }
    }

    /// Builds the hot record of `slot` anew from its compiled session (which must be synced),
    /// its shape interned.
    pub(crate) fn build_hot(&mut self, slot: u32) {
        let i = slot as usize;
        let was = self.kinds[i][0];
        let built = match &self.slots[i] {
            Some(s) if self.hot_enabled => Hot::build(s),
            _ => None,
        };
        let interned = built.and_then(|b| {
            let kinds = b.kinds();
            let id = self.shapes.intern(b.halves, b.runs, &mut self.arena)?;
            Some((b.record, kinds, id))
        });
        let (h, kind) = match interned {
            Some((mut h, kind, id)) => {
                h.keys.shape = id;
                (h, kind)
            }
            // It does not fit, or no line index is left in the arena (2^32 lines): cold.
            None if self.slots[i].is_some() => (Hot::default(), [COLD; 2]),
            None => (Hot::default(), [EMPTY; 2]),
        };
        // Released after the new one is interned: a rebuild of the same rules keeps its shape.
        if was >= HOT {
            self.shapes.release(self.hot[i].keys.shape, &mut self.arena);
        }
        self.hot[i] = h;
        self.kinds[i] = kind;
        self.cold = self.cold + usize::from(kind[0] == COLD) - usize::from(was == COLD);
    }

    /// The FAR, QER and URR lines of a hot session's matched PDR, then out: what
    /// [`Pipeline::apply`] does for the sessions [`crate::hot`] can hold.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn apply_hot(
        &mut self,
        now: Instant,
        slot: u32,
        half: usize,
        pdr_index: usize,
        mut p: Packet,
        inner: (usize, usize),
        qfi_in: Option<u8>,
        out: &mut Output,
    ) -> Option<Packet> {
        use crate::hot::*;
        let clock = self.clock_ns;
        let clock1 = clock + 1;
        let Self {
            hot,
            shapes,
            counters,
            ident,
            ..
        } = self;
        let record = &mut hot[slot as usize];
        record.keys.last = clock1;
        let shape = shapes.get(record.keys.shape);
        let h = &shape.halves[half];
        let fills = &mut record.fills[half];
        let pdr = h.head.pdrs[pdr_index];
        let (far_flags, far_port) = (pdr.far_flags, pdr.port);
        if far_flags & FAR_FORW == 0 {
            return drop_to(out, counters, p, DropReason::FarDrop);
        }
        if far_flags & FAR_TARGET == 0 {
            return drop_to(out, counters, p, DropReason::NoForwardingTarget);
        }
        let (ds, de) = if pdr.flags & STRIP != 0 {
            inner
        } else {
            (p.start(), p.start() + p.len())
        };
        if (far_port == Port::N6 || p.port() == Port::N6)
            && !route_hop(p.buffer_mut().get_mut(ds..de).unwrap_or(&mut []))
        {
            return drop_to(out, counters, p, DropReason::TtlExpired);
        }
        let len = (inner.1 - inner.0) as u64;
        let uplink = pdr.flags & FROM_UE != 0;
        let bits = len * 8;
        if pdr.flags & GATE_SHUT != 0 {
            return drop_to(out, counters, p, DropReason::GateClosed);
        }
        // Loops over the few lines a record has, a bit each: unrolled, with constant
        // indices. Every bucket the PDR polices conforms before any is taken.
        let (police, urrs) = (pdr.police, pdr.urrs);
        for q in 0..QERS {
            if police & (1 << q) != 0 && !fills.fills[q].conforms(&h.rates[q], clock, bits) {
                return drop_to(out, counters, p, DropReason::MbrExceeded);
            }
        }
        for u in 0..URRS {
            if urrs & (1 << u) != 0 && record.urrs[u].exhausted {
                return drop_to(out, counters, p, DropReason::QuotaExhausted);
            }
        }
        for q in 0..QERS {
            if police & (1 << q) != 0 {
                fills.fills[q].take(&h.rates[q], bits);
            }
        }
        for g in 0..GBRS {
            if pdr.gbr & (1 << g) != 0 {
                fills.gbr_pending[g] += len;
            }
        }
        let mark = pdr.mark;
        let mark_qfi = (mark & MARK_QFI != 0).then_some(mark & 0x3f);
        let rqi = mark & MARK_RQI != 0;
        // The URR lines whose budget this packet spent, a bit each.
        let mut spent = 0u8;
        for (u, line) in record.urrs.iter_mut().enumerate() {
            if urrs & (1 << u) != 0 && !line.count(clock1, len, uplink) {
                spent |= 1 << u;
            }
        }
        let to_access = far_flags & FAR_TO_ACCESS != 0;
        let qfi = if to_access {
            mark_qfi.or(qfi_in)
        } else {
            qfi_in.or(mark_qfi)
        };
        p.set_port(far_port);
        let encap = h.fars.get(usize::from(pdr.far));
        let sent = if let Some(far) = encap.filter(|_| far_flags & FAR_ENCAP != 0) {
            let tunnel = record.keys.tunnel(far.tunnel);
            let ip = p.data_at(ds, de);
            let ecn = match ip.first().map(|v| v >> 4) {
                Some(4) => ip.get(1).copied().unwrap_or(0) & 3,
                Some(6) => ipv6::Packet::new_unchecked(ip).traffic_class() & 3,
                _ => 0,
            };
            *ident = ident.wrapping_add(1);
            let written = match qfi {
                None => far.template.without_psc().write(
                    p.buffer_mut(),
                    ds,
                    de,
                    *ident,
                    ecn,
                    0,
                    Some(tunnel),
                ),
                Some(q) => {
                    let octet = if to_access {
                        (u8::from(rqi) << 6) | (q & 0x3f)
                    } else {
                        q & 0x3f
                    };
                    far.template
                        .write(p.buffer_mut(), ds, de, *ident, ecn, octet, Some(tunnel))
                }
            };
            written.map(|start| p.set_range(start, de)).is_some()
        } else {
            p.set_range(ds, de);
            true
        };
        let p = if sent {
            counters.tx(p.port(), p.len());
            Some(p)
        } else {
            drop_to(out, counters, p, DropReason::EncapFailed)
        };
        if spent != 0 {
            self.urrs_spent(now, slot, spent);
        }
        p
    }

    /// The URR lines of `slot`'s record (bits of `spent`) whose budget a packet ran out: the
    /// exact check of each, and its report if one fired (out of line: rare).
    #[cold]
    #[inline(never)]
    fn urrs_spent(&mut self, now: Instant, slot: u32, spent: u8) {
        let Self {
            hot,
            shapes,
            slots,
            events,
            epoch,
            ..
        } = self;
        let (Some(record), Some(Some(s))) =
            (hot.get_mut(slot as usize), slots.get_mut(slot as usize))
        else {
            return;
        };
        for u in 0..crate::hot::URRS {
            if spent & (1 << u) == 0 {
                continue;
            }
            let urr = record.urrs[u].urr;
            if let Some(t) = record.check_urr(shapes, s, *epoch, urr) {
                let seid = s.seid;
                if let Some(c) = s.urrs.get_mut(usize::from(urr)) {
                    events.push_back(DatapathEvent::Usage(c.report(now, seid, t)));
                }
                record.set_urr_limits(s);
            }
        }
    }

    fn echo(&mut self, mut p: Packet, d: &Decapsulated, out: &mut Output) {
        // TS 29.281 §7.2.2: the response copies the sequence number; Recovery is 0.
        let seq = d.gtpu.seq_number.unwrap_or(0);
        let start = HEADROOM;
        let n = gtpu_msg::emit_echo_response(
            0,
            seq,
            p.buffer_mut().get_mut(start..).unwrap_or(&mut []),
        );
        let sent = n.ok().and_then(|n| {
            wrap_udp_ip(
                &mut p,
                start,
                n,
                Addr::from_ip(d.outer_dst),
                Addr::from_ip(d.outer_src),
                (d.dst_port, d.src_port),
                self.cfg.outer_ttl,
            )
        });
        match sent {
            Some(()) => {
                self.counters.tx(p.port(), p.len());
                out.tx.push(p);
            }
            None => {
                drop_to(out, &mut self.counters, p, DropReason::MalformedOuter);
            }
        }
    }

    /// TS 29.281 §7.3.1: a G-PDU for an unknown TEID is answered with an Error Indication to
    /// its sender (rate-limited).
    fn send_error_indication(
        &mut self,
        now: Instant,
        port: Port,
        d: &Decapsulated,
        out: &mut Output,
    ) {
        if !self.error_indications.allow(now) {
            self.counters.error_indications_suppressed += 1;
            return;
        }
        let mut e = out.free.pop().unwrap_or_else(|| Packet::new(port));
        // Back by the G-PDU's ingress port (a reused buffer keeps its last port).
        e.set_port(port);
        let start = HEADROOM;
        let buf = e.buffer_mut().get_mut(start..).unwrap_or(&mut []);
        let n = if d.src_port == GTPU_PORT {
            gtpu_msg::emit_error_indication(d.gtpu.teid, d.outer_dst, buf)
        } else {
            gtpu_msg::emit_error_indication_with_udp_port(d.gtpu.teid, d.outer_dst, d.src_port, buf)
        };
        let ok = n.ok().and_then(|n| {
            wrap_udp_ip(
                &mut e,
                start,
                n,
                Addr::from_ip(d.outer_dst),
                Addr::from_ip(d.outer_src),
                (GTPU_PORT, GTPU_PORT),
                self.cfg.outer_ttl,
            )
        });
        if ok.is_some() {
            self.counters.created += 1;
            self.counters.tx(e.port(), e.len());
            out.tx.push(e);
        } else {
            out.free.push(e);
        }
    }

    /// TS 29.281 §7.3.1: a peer tells us it has no context for a tunnel we send into; the
    /// agent reports it to the SMF (TS 29.244 §5.12).
    fn error_indication_received(&mut self, p: &Packet, d: &Decapsulated) {
        let (mut teid, mut peer) = (None, None);
        for ie in gtpu_msg::IeIter::new(p.data().get(d.inner.clone()).unwrap_or(&[])) {
            match ie {
                Ok(gtpu_msg::Ie::TeidDataI(t)) => teid = Some(t),
                Ok(gtpu_msg::Ie::PeerAddress(a)) => peer = Some(a),
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let (Some(teid), Some(peer)) = (teid, peer) else {
            return;
        };
        let owner = self.remote.get(&(teid, Addr::from_ip(peer)));
        if let Some(s) = owner.and_then(|&s| self.slots.get_mut(s as usize)?.as_mut()) {
            if s.error_indication_reported {
                self.counters.error_indications_repeated += 1;
                return;
            }
            s.error_indication_reported = true;
            self.events.push_back(DatapathEvent::ErrorIndication {
                seid: s.seid,
                teid: Teid(teid),
                peer,
            });
        }
    }
}

/// What the outer header marks.
struct Mark {
    qfi: Option<u8>,
    rqi: bool,
    ppi: Option<u8>,
}

/// Sends a copy of `data` (an IP packet) to each duplication target.
fn duplicate(
    out: &mut Output,
    counters: &mut Counters,
    data: &[u8],
    dups: &[Target],
    mark: &Mark,
    ttl: u8,
    ident: &mut u16,
) {
    for d in dups {
        let mut c = out.free.pop().unwrap_or_else(|| Packet::new(d.port));
        if c.load(d.port, data) {
            let (cs, ce) = (c.start(), c.start() + c.len());
            if emit(&mut c, cs, ce, d, mark, ttl, ident) {
                counters.created += 1;
                counters.tx(c.port(), c.len());
                out.tx.push(c);
                continue;
            }
        }
        out.free.push(c);
    }
}

/// Encapsulates `p[ds..de]` for `t` (or just trims to it) and sets the egress port.
#[inline]
fn emit(
    p: &mut Packet,
    ds: usize,
    de: usize,
    t: &Target,
    m: &Mark,
    ttl: u8,
    ident: &mut u16,
) -> bool {
    p.set_port(t.port);
    let Some(tun) = t.encap else {
        p.set_range(ds, de);
        return true;
    };
    // RFC 6040 normal mode: the outer ECN copies the inner.
    let ip = p.data_at(ds, de);
    let ecn = match ip.first().map(|v| v >> 4) {
        Some(4) => ip.get(1).copied().unwrap_or(0) & 3,
        Some(6) => ipv6::Packet::new_unchecked(ip).traffic_class() & 3,
        _ => 0,
    };
    // The common case: an IPv4 tunnel and a one-word container (no PPI).
    if let (Some([plain, with_psc]), None) = (&t.templates, m.ppi) {
        let (tmpl, octet) = match m.qfi {
            None => (plain, 0),
            Some(q) if t.to_access => (with_psc, (u8::from(m.rqi) << 6) | (q & 0x3f)),
            Some(q) => (with_psc, q & 0x3f),
        };
        *ident = ident.wrapping_add(1);
        return match tmpl.write(p.buffer_mut(), ds, de, *ident, ecn, octet, None) {
            Some(start) => {
                p.set_range(start, de);
                true
            }
            None => false,
        };
    }
    let psc = m.qfi.map(|q| {
        if t.to_access {
            PduSessionContainer {
                rqi: m.rqi,
                ppi: m.ppi,
                ..PduSessionContainer::dl(q & 0x3f)
            }
        } else {
            PduSessionContainer::ul(q & 0x3f)
        }
    });
    let tunnel = GtpuTunnel {
        teid: tun.teid,
        src_port: GTPU_PORT,
        dst_port: GTPU_PORT,
        psc,
        ttl,
        dscp: t.tos.map_or(0, |tos| tos >> 2),
        ecn,
    };
    let buf = p.buffer_mut();
    let start = if tun.dst.v6 {
        encapsulate_gtpu_v6(
            buf,
            ds,
            de - ds,
            &EncapV6 {
                src: tun.src.to_ip6(),
                dst: tun.dst.to_ip6(),
                flow_label: 0,
                tunnel,
            },
        )
    } else {
        *ident = ident.wrapping_add(1);
        encapsulate_gtpu_v4(
            buf,
            ds,
            de - ds,
            &EncapV4 {
                src: tun.src.to_ip4(),
                dst: tun.dst.to_ip4(),
                ident: *ident,
                dont_frag: false,
                tunnel,
            },
        )
    };
    match start {
        Ok(s) => {
            p.set_range(s, de);
            true
        }
        Err(_) => false,
    }
}

/// A GTP-U signalling message at `p[start..start+len]` wrapped for the GTP-U port of `dst`.
pub(crate) fn wrap_for_peer(
    p: &mut Packet,
    start: usize,
    len: usize,
    src: Addr,
    dst: Addr,
    ttl: u8,
) -> Option<()> {
    wrap_udp_ip(p, start, len, src, dst, (GTPU_PORT, GTPU_PORT), ttl)
}

/// Puts UDP and IP headers in front of `p[start..start+len]` (a GTP-U signalling message).
fn wrap_udp_ip(
    p: &mut Packet,
    start: usize,
    len: usize,
    src: Addr,
    dst: Addr,
    ports: (u16, u16),
    ttl: u8,
) -> Option<()> {
    let ip_len = if src.v6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let u_start = start.checked_sub(udp::HEADER_LEN)?;
    let ip_start = u_start.checked_sub(ip_len)?;
    let end = start + len;
    let buf = p.buffer_mut();
    let urepr = udp::Repr {
        src_port: ports.0,
        dst_port: ports.1,
        payload_len: len,
    };
    let mut u = udp::Packet::new_unchecked(buf.get_mut(u_start..end)?);
    urepr.emit(&mut u).ok()?;
    if src.v6 {
        u.fill_checksum_v6(&src.to_ip6(), &dst.to_ip6());
        let r = ipv6::Repr {
            src: src.to_ip6(),
            dst: dst.to_ip6(),
            next_header: ip_proto::UDP,
            payload_len: udp::HEADER_LEN + len,
            hop_limit: ttl,
            traffic_class: 0,
            flow_label: 0,
        };
        r.emit(&mut ipv6::Packet::new_unchecked(
            buf.get_mut(ip_start..end)?,
        ))
        .ok()?;
    } else {
        u.fill_checksum_v4(src.to_ip4(), dst.to_ip4());
        let r = ipv4::Repr {
            src: src.to_ip4(),
            dst: dst.to_ip4(),
            protocol: ip_proto::UDP,
            payload_len: udp::HEADER_LEN + len,
            ttl,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
        };
        r.emit(&mut ipv4::Packet::new_unchecked(
            buf.get_mut(ip_start..end)?,
        ))
        .ok()?;
    }
    p.set_range(ip_start, end);
    Some(())
}

/// The ceiling a pipeline is measured against: the same parse and rewrite work per packet,
/// by the same fast paths (GTP-U decapsulation and a routed hop uplink; parse, hop and
/// encapsulation into `tunnel` downlink) with no lookups, no rules and no state.
pub fn null_forward(rx: &mut Vec<Packet>, out: &mut Output, tunnel: &EncapV4) {
    let t = &tunnel.tunnel;
    let template = crate::fast::Template::v4(
        tunnel.src,
        tunnel.dst,
        t.teid,
        t.dscp,
        t.ttl,
        t.psc.map(|c| c.pdu_type == upf_wire::ext::PduType::Dl),
    );
    let qfi = t.psc.map_or(0, |c| c.qfi);
    let mut ident = 0u16;
    for mut p in rx.drain(..) {
        let ok = match p.port() {
            Port::N3 | Port::N9 => {
                let inner = crate::fast::gpdu_v4(p.data())
                    .map(|g| g.inner)
                    .or_else(|| decapsulate(p.data()).ok().map(|d| d.inner));
                match inner {
                    Some(r) => {
                        let (s, e) = (p.start() + r.start, p.start() + r.end);
                        p.set_range(s, e);
                        p.set_port(Port::N6);
                        route_hop(p.data_mut())
                    }
                    None => false,
                }
            }
            Port::N6 => {
                let (s, l) = (p.start(), p.len());
                let ecn = p.data().get(1).copied().unwrap_or(0) & 3;
                ident = ident.wrapping_add(1);
                flow_of(p.data()).is_some()
                    && route_hop(p.data_mut())
                    && match template
                        .and_then(|t| t.write(p.buffer_mut(), s, s + l, ident, ecn, qfi, None))
                    {
                        Some(start) => {
                            p.set_range(start, s + l);
                            p.set_port(Port::N3);
                            true
                        }
                        None => false,
                    }
            }
        };
        if ok {
            out.tx.push(p);
        } else {
            out.free.push(p);
        }
    }
}
