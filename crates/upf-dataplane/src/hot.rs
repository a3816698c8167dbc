//! The hot record of a session: what processing a packet reads and writes, in a fixed layout
//! of 64-octet lines of plain integers, one record per session slot in a plain `Vec`, so that
//! the lines a packet will touch are known from its slot alone and prefetched in one step.
//!
//! A record has two halves, one per PDR list (GTP-U PDRs found by TEID, IP PDRs found by UE
//! address), and after them the URR lines both index: a packet reads its list's half (the
//! head line with the PDRs' match keys, the SDF filter lines, its FAR's line with the header
//! template if it has a tunnel, one line per (QER, direction) with the token bucket) and its
//! URRs' lines (the volume counted both ways since the last sync). URRs are the record's,
//! not a half's, because SMFs give the PDRs of both directions the same URRs: a smaller
//! record (1,152 octets instead of 1,280), and at 1M sessions the record's size is much of
//! what a packet costs (docs/benchmarks.md).
//!
//! A half whose SDF filters do not fit its filter lines keeps them in a run of lines of the
//! pipeline's overflow arena ([`crate::overflow`]), found by slot beside the record; its
//! head then tells the inline classification to look there (out of line).
//!
//! Sessions that do not fit the layout (more rules than the lines hold, more filters than a
//! run holds, slow SDF filters, IPv6 UE prefixes, framed routes, buffering or duplicating
//! FARs, IPv6 tunnels, PPI) are marked cold and take the general path over [`Compiled`].
//!
//! Where the state lives: the compiled session is the source of truth. While a session is
//! hot, its QER buckets are *owned* by the hot record (copied back by [`Hot::sync`]) and the
//! URR volumes counted since the last sync are *pending* in the hot record (added to the
//! URR by [`Hot::sync`], which zeroes them). Every reader of the compiled state (usage
//! reports, queries, timers, modification) syncs first, and the hot record is rebuilt from
//! the compiled session afterwards ([`Hot::build`]). A URR line also holds a *budget*: the
//! octets it may count before some threshold, quota or START trigger could fire; the packet
//! that exhausts it takes the exact check of [`UrrState`] after a sync.

use crate::fast::Template;
use crate::filter::FastFilter;
use crate::flow::{Flow, Flow4};
use crate::meter::TokenBucket;
use crate::overflow::{Line, MAX_RUN_LINES};
use crate::packet::Port;
use crate::session::{CPdr, Compiled, Strip};
use std::time::{Duration, Instant};
use upf_rules::ApplyAction;

/// An absent slot (FAR, QER, URR) in a line.
pub(crate) const NONE: u8 = u8::MAX;
/// A PDR without a QFI condition.
const QFI_ANY: u8 = u8::MAX;

/// PDRs per list held in the head line.
pub(crate) const PDRS: usize = 3;
/// SDF filter lines per half (two filters a line).
pub(crate) const FILTER_LINES: usize = 2;
pub(crate) const FARS: usize = 2;
/// (QER, direction) lines per half.
pub(crate) const QERS: usize = 3;
/// URR lines per record.
pub(crate) const URRS: usize = 2;

// HotPdr.flags
const HAS_TEID: u8 = 1;
const HAS_UE: u8 = 2;
const UE_IS_DST: u8 = 4;
pub(crate) const FROM_UE: u8 = 8;
pub(crate) const STRIP: u8 = 16;
/// A QER of the PDR has its gate closed in the PDR's direction (resolved when built).
pub(crate) const GATE_SHUT: u8 = 32;
/// The PDR's first QER polices an MBR in its direction; `MBR0 << 1`: its second.
pub(crate) const MBR0: u8 = 64;

/// One PDR's match keys and rule slots (slots index the lines of its half).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct HotPdr {
    teid: u32,
    ue_v4: u32,
    qfi: u8,
    pub flags: u8,
    pub far: u8,
    /// First filter (high nibble) and number of filters (low nibble) on the inline lines;
    /// in a half whose filters are in a run, the number of lines its filters take there
    /// (each PDR's from the line after the previous PDR's). None: any packet.
    filters: u8,
    pub qers: [u8; 2],
    pub urrs: [u8; 2],
}

const _: () = assert!(size_of::<HotPdr>() == 16);

/// A packet's match key: the general [`Flow`], or the 12-octet [`Flow4`] of the common
/// IPv4 form that the hot path classifies on.
pub(crate) trait Key {
    /// The source (or destination) address if it is IPv4.
    fn v4(&self, dst: bool) -> Option<u32>;
    /// Whether `filter` matches (`from_ue`: the packet travels from the UE).
    fn matched_by(&self, filter: &FastFilter, from_ue: bool) -> bool;
}

impl Key for Flow {
    #[inline(always)]
    fn v4(&self, dst: bool) -> Option<u32> {
        let a = if dst { self.dst } else { self.src };
        u32::try_from(a.bits).ok().filter(|_| !a.v6)
    }

    #[inline(always)]
    fn matched_by(&self, filter: &FastFilter, from_ue: bool) -> bool {
        filter.matches(self, from_ue)
    }
}

impl Key for Flow4 {
    #[inline(always)]
    fn v4(&self, dst: bool) -> Option<u32> {
        Some(if dst { self.dst } else { self.src })
    }

    #[inline(always)]
    fn matched_by(&self, filter: &FastFilter, from_ue: bool) -> bool {
        filter.matches4(self, from_ue)
    }
}

impl HotPdr {
    /// The PDR's keys other than its filters.
    #[inline(always)]
    fn keys(&self, teid: u32, qfi: Option<u8>, f: &impl Key) -> bool {
        if self.flags & HAS_TEID != 0 && self.teid != teid {
            return false;
        }
        if self.qfi != QFI_ANY && qfi != Some(self.qfi) {
            return false;
        }
        self.flags & HAS_UE == 0 || f.v4(self.flags & UE_IS_DST != 0) == Some(self.ue_v4)
    }

    #[inline(always)]
    fn matches(
        &self,
        filters: &[[FastFilter; 2]; FILTER_LINES],
        teid: u32,
        qfi: Option<u8>,
        f: &impl Key,
    ) -> bool {
        if !self.keys(teid, qfi, f) {
            return false;
        }
        let from_ue = self.flags & FROM_UE != 0;
        let (first, n) = (
            usize::from(self.filters >> 4),
            usize::from(self.filters & 15),
        );
        if n == 0 {
            return true;
        }
        for k in first..first + n {
            if let Some(l) = filters.get(k / 2) {
                if f.matched_by(&l[k % 2], from_ue) {
                    return true;
                }
            }
        }
        false
    }
}

impl HotPdr {
    /// Whether a packet matches this PDR of a half whose filters are in a run; `lines`: its
    /// lines there (an odd list's last filter is there twice, so no count is checked).
    #[inline(always)]
    fn matches_run4(&self, lines: &[Line], teid: u32, qfi: Option<u8>, f: &Flow4) -> bool {
        if !self.keys(teid, qfi, f) {
            return false;
        }
        // The key turned round once, UE side first, rather than at every filter.
        let g = if self.flags & FROM_UE != 0 {
            *f
        } else {
            Flow4 {
                src: f.dst,
                dst: f.src,
                src_port: f.dst_port,
                dst_port: f.src_port,
                ..*f
            }
        };
        lines.is_empty()
            || lines
                .iter()
                .any(|l| l.0[0].matches4(&g, true) || l.0[1].matches4(&g, true))
    }

    /// [`HotPdr::matches_run4`] on the general key.
    #[inline(always)]
    fn matches_run(&self, lines: &[Line], teid: u32, qfi: Option<u8>, f: &Flow) -> bool {
        let from_ue = self.flags & FROM_UE != 0;
        self.keys(teid, qfi, f)
            && (lines.is_empty()
                || lines
                    .iter()
                    .any(|l| l.0[0].matches(f, from_ue) || l.0[1].matches(f, from_ue)))
    }

    /// This PDR's lines at the start of `run` (its half's run from this PDR's first line on),
    /// and the lines after them.
    #[inline(always)]
    fn split_run<'a>(&self, run: &'a [Line]) -> (&'a [Line], &'a [Line]) {
        run.split_at_checked(usize::from(self.filters))
            .unwrap_or((run, &[]))
    }
}

/// The head line of a half: the PDRs of its list, by precedence.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Head {
    /// The pipeline's clock + 1 at the last packet since the last sync; 0: none.
    pub last: u64,
    pub pdrs: [HotPdr; PDRS],
    /// The number of PDRs matched on the inline filter lines (bits 0-1), or of those whose
    /// filters are in an overflow run (bits 2-3: then the inline loop sees none, and a
    /// packet it matched to no PDR looks at the run), and [`SERVES`] when this half serves
    /// packets (the session is hot).
    state: u8,
    /// Each FAR's flags and egress port, so that a FAR without a tunnel needs no line of
    /// its own.
    pub far_flags: [u8; FARS],
    pub far_port: [Port; FARS],
    /// Each PDR's marks from its QERs, resolved when built: [`MARK_QFI`] and the QFI of the
    /// first QER that has one, [`MARK_RQI`] if any QER sets RQI.
    pub marks: [u8; PDRS],
}

/// In [`Head::state`].
const SERVES: u8 = 0x80;
const INLINE_PDRS: u8 = 3;
const RUN_PDRS_SHIFT: u8 = 2;
pub(crate) const MARK_QFI: u8 = 0x80;
pub(crate) const MARK_RQI: u8 = 0x40;

impl Head {
    /// Whether this half serves packets (the session is hot).
    #[inline(always)]
    pub fn hot(&self) -> bool {
        self.state & SERVES != 0
    }

    pub fn set_hot(&mut self, on: bool) {
        self.state = if on {
            self.state | SERVES
        } else {
            self.state & !SERVES
        };
    }

    #[inline(always)]
    fn npdrs(&self) -> usize {
        usize::from(self.state & INLINE_PDRS)
    }

    /// The PDRs of a half whose filters are in a run (none otherwise).
    #[inline(always)]
    fn run_pdrs(&self) -> usize {
        usize::from((self.state >> RUN_PDRS_SHIFT) & INLINE_PDRS)
    }

    /// Whether this half's filters are in an overflow run.
    #[inline(always)]
    pub fn overflows(&self) -> bool {
        self.run_pdrs() != 0
    }
}

/// A FAR that forwards to one target (plain, or an IPv4 GTP-U tunnel by header template), or
/// drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct HotFar {
    /// The tunnel's header with a PDU Session Container ([`Template::without_psc`] gives the
    /// one without).
    pub template: Template,
    pub port: Port,
    pub flags: u8,
}

pub(crate) const FAR_FORW: u8 = 1;
pub(crate) const FAR_TARGET: u8 = 2;
pub(crate) const FAR_ENCAP: u8 = 4;
pub(crate) const FAR_TO_ACCESS: u8 = 8;

impl Default for Head {
    fn default() -> Self {
        Self {
            last: 0,
            state: 0,
            far_flags: [0; FARS],
            pdrs: [HotPdr::default(); PDRS],
            far_port: [Port::N6; FARS],
            marks: [0; PDRS],
        }
    }
}

impl Default for HotFar {
    fn default() -> Self {
        Self {
            template: Template::EMPTY,
            port: Port::N6,
            flags: 0,
        }
    }
}

/// One direction of one QER: its gate, its MBR bucket (owned here while hot), the octets
/// accounted against its GBR since the last sync, and its marks.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct HotQer {
    pub bucket: TokenBucket,
    pub gbr_pending: u64,
    /// Index in the compiled session's QERs.
    pub qer: u8,
    pub flags: u8,
    pub qfi: u8,
}

pub(crate) const QER_OPEN: u8 = 1;
pub(crate) const QER_MBR: u8 = 2;
pub(crate) const QER_GBR: u8 = 4;
pub(crate) const QER_RQI: u8 = 8;
const QER_UPLINK: u8 = 16;

impl Default for HotQer {
    fn default() -> Self {
        Self {
            bucket: TokenBucket::new(0, 0, Duration::ZERO),
            gbr_pending: 0,
            qer: NONE,
            flags: 0,
            qfi: NONE,
        }
    }
}

/// One URR as one half counts it: the volume since the last sync, and how much more may be
/// counted before its exact check must run.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct HotUrr {
    pub ul_bytes: u64,
    pub dl_bytes: u64,
    pub ul_packets: u64,
    pub dl_packets: u64,
    /// The pipeline's clock + 1 at the first and last packet since the last sync; 0: none.
    pub first: u64,
    pub last: u64,
    pub budget: u64,
    /// Index in the compiled session's URRs.
    pub urr: u8,
    pub exhausted: bool,
}

impl HotUrr {
    /// Counts one packet; `false` when its budget is spent and the exact check must run.
    #[inline(always)]
    pub fn count(&mut self, clock1: u64, bytes: u64, uplink: bool) -> bool {
        if uplink {
            self.ul_bytes += bytes;
            self.ul_packets += 1;
        } else {
            self.dl_bytes += bytes;
            self.dl_packets += 1;
        }
        if self.first == 0 {
            self.first = clock1;
        }
        self.last = clock1;
        if bytes < self.budget {
            self.budget -= bytes;
            true
        } else {
            false
        }
    }
}

const _: () = assert!(size_of::<Head>() == 64);
const _: () = assert!(size_of::<HotFar>() == 64);
const _: () = assert!(size_of::<HotQer>() == 64);
const _: () = assert!(size_of::<HotUrr>() == 64);

/// The lines of one PDR list's own (its URRs' lines are the record's).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Half {
    pub head: Head,
    pub filters: [[FastFilter; 2]; FILTER_LINES],
    pub fars: [HotFar; FARS],
    pub qers: [HotQer; QERS],
}

impl Half {
    /// The index of the first PDR (by precedence) that matches.
    #[inline(always)]
    pub fn classify(&self, teid: u32, qfi: Option<u8>, f: &impl Key) -> Option<usize> {
        // A plain loop: `position` with a closure stayed an out-of-line call.
        let n = self.head.npdrs();
        for (i, p) in self.head.pdrs[..n].iter().enumerate() {
            if p.matches(&self.filters, teid, qfi, f) {
                return Some(i);
            }
        }
        None
    }

    /// The first PDR of a half whose filters are in `run` (none if they are inline) that
    /// `matches` with its lines of the run.
    #[inline(always)]
    fn first_in_run(
        &self,
        mut run: &[Line],
        matches: impl Fn(&HotPdr, &[Line]) -> bool,
    ) -> Option<usize> {
        for (i, p) in self.head.pdrs[..self.head.run_pdrs()].iter().enumerate() {
            let (lines, rest) = p.split_run(run);
            if matches(p, lines) {
                return Some(i);
            }
            run = rest;
        }
        None
    }

    /// [`Half::classify`] of a half whose filters are in `run` (none if they are inline).
    #[inline(always)]
    pub fn classify_run(
        &self,
        run: &[Line],
        teid: u32,
        qfi: Option<u8>,
        f: &Flow,
    ) -> Option<usize> {
        self.first_in_run(run, |p, lines| p.matches_run(lines, teid, qfi, f))
    }

    /// [`Half::classify_run`] on the IPv4 key.
    #[inline(always)]
    pub fn classify_run4(
        &self,
        run: &[Line],
        teid: u32,
        qfi: Option<u8>,
        f: &Flow4,
    ) -> Option<usize> {
        self.first_in_run(run, |p, lines| p.matches_run4(lines, teid, qfi, f))
    }
}

/// The hot record of one session slot: half 0 for its GTP-U PDRs, half 1 for its IP PDRs,
/// then the URR lines both index (SMFs give a session's PDRs of both directions the same
/// URRs: one line counts both ways). Between the halves, they measured faster at 1M
/// sessions but slower at 1k and 100k (the halves then are no array: docs/benchmarks.md).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Hot {
    pub halves: [Half; 2],
    pub urrs: [HotUrr; URRS],
}

const _: () = assert!(size_of::<Hot>() == 1152);

impl Hot {
    /// Prefetches every line `half`'s packets may read, into L2: into L1, each of the ~50
    /// lines in flight would hold one of its few miss buffers until it arrives, and the
    /// prefetches themselves stalled. Every line, not only those in use: a line prefetched
    /// and not read measured free, while reading which lines are in use cost a line of its
    /// own a packet (a per-slot array) and ~35 instructions (docs/benchmarks.md).
    #[inline(always)]
    pub fn prefetch(&self, half: usize) {
        use upf_prefetch::l2;
        // Not the head line: `Pipeline::process` prefetched it when it looked the slot up.
        let h = &self.halves[half];
        for k in 0..FILTER_LINES {
            l2(h.filters.as_slice(), k);
        }
        for k in 0..FARS {
            l2(h.fars.as_slice(), k);
        }
        for k in 0..QERS {
            l2(h.qers.as_slice(), k);
        }
        for k in 0..URRS {
            l2(self.urrs.as_slice(), k);
        }
    }
}

/// What a slot's half is, per slot and half in `Pipeline::kinds`: read only when some
/// session is cold or some half's filters are in an overflow run.
pub(crate) type Kind = u8;
/// An empty slot.
pub(crate) const EMPTY: Kind = 0;
/// A cold session: it takes the general path, prefetched by reference.
pub(crate) const COLD: Kind = 1;
/// A hot half.
pub(crate) const HOT: Kind = 2;
/// A hot half whose filters are in an overflow run (none inline).
pub(crate) const HOT_RUN: Kind = 3;

/// A built half.
struct Built {
    half: Half,
    /// The (QER slot, uplink) pairs whose buckets it owns.
    qers: Vec<(u16, bool)>,
    /// The record's URRs (by slot in the compiled session) so far.
    urrs: Vec<u16>,
    kind: Kind,
    /// The lines of its overflow run (none: its filters are inline).
    run: Vec<Line>,
}

/// Builds one half from a PDR list; `None` if it does not fit.
struct HalfBuilder {
    half: Half,
    /// FARs that act alike are one (SMFs such as free5GC give every PDR a FAR of its own,
    /// the same for every PDR of a tunnel).
    fars: Vec<HotFar>,
    /// (QER slot, uplink)
    qers: Vec<(u16, bool)>,
    /// The record's, from the halves built before on.
    urrs: Vec<u16>,
}

impl HalfBuilder {
    /// A builder taking the record's URRs as the halves before left them.
    fn new(urrs: Vec<u16>) -> Self {
        Self {
            half: Half::default(),
            fars: Vec::new(),
            qers: Vec::new(),
            urrs,
        }
    }

    fn slot<T: PartialEq + Copy>(v: &mut Vec<T>, x: T, cap: usize) -> Option<u8> {
        let i = match v.iter().position(|&y| y == x) {
            Some(i) => i,
            None => {
                v.push(x);
                v.len() - 1
            }
        };
        (i < cap).then(|| u8::try_from(i).ok()).flatten()
    }

    fn pdr(&mut self, p: &CPdr, s: &Compiled) -> Option<HotPdr> {
        if !p.fast_form() {
            return None;
        }
        let qfi = match p.qfis().count_ones() {
            0 => QFI_ANY,
            1 => u8::try_from(p.qfis().trailing_zeros()).ok()?,
            _ => return None,
        };
        let mut flags = 0;
        let (ue_v4, teid) = (p.ue_v4(), p.teid);
        if teid.is_some() {
            flags |= HAS_TEID;
        }
        if ue_v4.is_some() {
            flags |= HAS_UE;
        }
        if p.ue_is_destination() {
            flags |= UE_IS_DST;
        }
        if p.from_ue {
            flags |= FROM_UE;
        }
        if p.strip == Strip::Gtpu {
            flags |= STRIP;
        }
        let far = match p.far {
            Some(f) => Self::slot(&mut self.fars, hot_far(s.fars.get(usize::from(f))?)?, FARS)?,
            None => NONE,
        };
        let mut qers = [NONE; 2];
        if p.qers.len() > 2 || p.urrs.len() > 2 {
            return None;
        }
        for (k, &q) in p.qers.iter().enumerate() {
            qers[k] = Self::slot(&mut self.qers, (q, p.from_ue), QERS)?;
        }
        let mut urrs = [NONE; 2];
        for (k, &u) in p.urrs.iter().enumerate() {
            urrs[k] = Self::slot(&mut self.urrs, u, URRS)?;
        }
        Some(HotPdr {
            teid: teid.unwrap_or(0),
            ue_v4: ue_v4.unwrap_or(0),
            qfi,
            flags,
            far,
            filters: 0,
            qers,
            urrs,
        })
    }

    /// Lays the PDRs' filters out on the inline lines; `false` if they do not fit.
    fn inline_filters(&mut self, pdrs: &[CPdr]) -> bool {
        let mut all: Vec<FastFilter> = Vec::new();
        for (hp, p) in self.half.head.pdrs.iter_mut().zip(pdrs) {
            let fast = p.fast_filters();
            if fast.is_empty() {
                continue;
            }
            // Sessions often give a bearer's uplink and downlink PDRs the same filters.
            let start = match all.windows(fast.len()).position(|w| w == fast) {
                Some(i) => i,
                None => {
                    all.extend_from_slice(fast);
                    all.len() - fast.len()
                }
            };
            if all.len() > 2 * FILTER_LINES || fast.len() > 15 {
                return false;
            }
            let Ok(b) = u8::try_from((start << 4) | fast.len()) else {
                return false;
            };
            hp.filters = b;
        }
        for (k, f) in all.iter().enumerate() {
            self.half.filters[k / 2][k % 2] = *f;
        }
        true
    }

    /// Lays the PDRs' filters out for an overflow run: each PDR's from a line of its own
    /// on, after the previous PDR's (not shared: then a PDR needs only its number of lines,
    /// which fits its byte), an odd list's last filter twice; `None` past what a run holds.
    fn run_filters(&mut self, pdrs: &[CPdr]) -> Option<Vec<Line>> {
        let mut run = Vec::new();
        for (hp, p) in self.half.head.pdrs.iter_mut().zip(pdrs) {
            let fast = p.fast_filters();
            let lines = fast.chunks(2).map(|c| Line([c[0], c[c.len() - 1]]));
            run.extend(lines);
            hp.filters = u8::try_from(fast.len().div_ceil(2)).ok()?;
        }
        (run.len() <= MAX_RUN_LINES).then_some(run)
    }

    fn build(mut self, pdrs: &[CPdr], s: &Compiled) -> Option<Built> {
        if pdrs.len() > PDRS {
            return None;
        }
        for (k, p) in pdrs.iter().enumerate() {
            self.half.head.pdrs[k] = self.pdr(p, s)?;
        }
        let n = u8::try_from(pdrs.len()).ok()?;
        let run = if self.inline_filters(pdrs) {
            self.half.head.state = n | SERVES;
            Vec::new()
        } else {
            self.half.head.state = (n << RUN_PDRS_SHIFT) | SERVES;
            self.run_filters(pdrs)?
        };
        for (k, &far) in self.fars.iter().enumerate() {
            self.half.head.far_flags[k] = far.flags;
            self.half.head.far_port[k] = far.port;
            self.half.fars[k] = far;
        }
        for (k, &(q, uplink)) in self.qers.iter().enumerate() {
            let c = s.qers.get(usize::from(q))?;
            if c.ppi.is_some() {
                return None;
            }
            let (gate, mbr) = if uplink {
                (c.gate_ul, c.mbr_ul)
            } else {
                (c.gate_dl, c.mbr_dl)
            };
            let mut flags = if uplink { QER_UPLINK } else { 0 };
            flags |= if gate { QER_OPEN } else { 0 };
            flags |= if mbr.is_some() { QER_MBR } else { 0 };
            flags |= if c.gbr.is_some() { QER_GBR } else { 0 };
            flags |= if c.rqi { QER_RQI } else { 0 };
            self.half.qers[k] = HotQer {
                bucket: mbr.unwrap_or(HotQer::default().bucket),
                gbr_pending: 0,
                qer: u8::try_from(q).ok()?,
                flags,
                qfi: c.qfi.unwrap_or(NONE),
            };
        }
        // What the QERs decide for every packet of a PDR alike, resolved once here.
        let head = &mut self.half.head;
        for (pdr, mark) in head.pdrs.iter_mut().zip(&mut head.marks) {
            for (j, &q) in pdr.qers.iter().enumerate() {
                let Some(line) = self.half.qers.get(usize::from(q)) else {
                    continue;
                };
                if line.flags & QER_OPEN == 0 {
                    pdr.flags |= GATE_SHUT;
                }
                if line.flags & QER_MBR != 0 {
                    pdr.flags |= MBR0 << j;
                }
                if *mark & MARK_QFI == 0 && line.qfi != NONE {
                    *mark |= MARK_QFI | (line.qfi & 0x3f);
                }
                if line.flags & QER_RQI != 0 {
                    *mark |= MARK_RQI;
                }
            }
        }
        Some(Built {
            half: self.half,
            qers: self.qers,
            urrs: self.urrs,
            kind: if run.is_empty() { HOT } else { HOT_RUN },
            run,
        })
    }
}

/// A FAR that the hot path can apply, or `None`.
fn hot_far(f: &crate::session::CFar) -> Option<HotFar> {
    let forw = f.action.contains(ApplyAction::FORW);
    if !f.dup.is_empty() || f.action.contains(ApplyAction::DUPL) {
        return None;
    }
    if !forw {
        // Buffering (and notifying) stays on the general path.
        return (!f.action.contains(ApplyAction::BUFF)).then(HotFar::default);
    }
    let Some(t) = &f.target else {
        return Some(HotFar {
            flags: FAR_FORW,
            ..HotFar::default()
        });
    };
    let mut flags = FAR_FORW | FAR_TARGET;
    if t.to_access {
        flags |= FAR_TO_ACCESS;
    }
    let template = match (&t.encap, &t.templates) {
        (None, _) => Template::EMPTY,
        (Some(_), Some([plain, with_psc])) => {
            // The plain header is the first part of the one with a container; checked here
            // so the hot path needs to hold only one.
            if with_psc.without_psc() != *plain {
                return None;
            }
            flags |= FAR_ENCAP;
            *with_psc
        }
        (Some(_), None) => return None,
    };
    Some(HotFar {
        template,
        port: t.port,
        flags,
    })
}

impl Hot {
    /// The hot record of `s` (state copied from it), the kind of each half and the lines of
    /// each half's overflow run (empty: none), or a cold record.
    pub fn build(s: &Compiled) -> (Hot, [Kind; 2], [Vec<Line>; 2]) {
        let cold = (Hot::default(), [COLD; 2], Default::default());
        let Some(gtp) = HalfBuilder::new(Vec::new()).build(&s.gtp_pdrs, s) else {
            return cold;
        };
        let Some(ip) = HalfBuilder::new(gtp.urrs).build(&s.ip_pdrs, s) else {
            return cold;
        };
        // A bucket is owned by one line only.
        if gtp.qers.iter().any(|q| ip.qers.contains(q)) {
            return cold;
        }
        let mut h = Hot {
            halves: [gtp.half, ip.half],
            ..Hot::default()
        };
        for (k, line) in h.urrs.iter_mut().enumerate() {
            line.urr = match ip.urrs.get(k).map(|&u| u8::try_from(u)) {
                Some(Ok(u)) if u != NONE => u,
                Some(_) => return cold,
                // No URR: nothing to sync into.
                None => NONE,
            };
        }
        h.set_urr_limits(s);
        (h, [gtp.kind, ip.kind], [gtp.run, ip.run])
    }

    /// Budgets and quota flags of every URR line from the compiled URRs (pending volumes zero).
    pub fn set_urr_limits(&mut self, s: &Compiled) {
        for u in &mut self.urrs {
            if let Some(c) = s.urrs.get(usize::from(u.urr)) {
                // One line counts both halves' packets: it may count all that is left.
                u.budget = c.budget();
                u.exhausted = c.exhausted;
            }
        }
    }

    /// Moves the state the hot record owns into the compiled session: the URR volumes
    /// pending, the GBR accounting, the buckets, the last packet time. Pending values are
    /// zeroed, so syncing twice adds nothing.
    pub fn sync(&mut self, s: &mut Compiled, epoch: Instant) {
        if !self.halves[0].head.hot() {
            return;
        }
        let at = |c: u64| epoch + Duration::from_nanos(c - 1);
        let mut last = 0;
        for half in &mut self.halves {
            last = last.max(std::mem::take(&mut half.head.last));
            for q in &mut half.qers {
                let Some(c) = s.qers.get_mut(usize::from(q.qer)) else {
                    continue;
                };
                c.gbr_bytes += std::mem::take(&mut q.gbr_pending);
                if q.flags & QER_MBR != 0 {
                    if q.flags & QER_UPLINK != 0 {
                        c.mbr_ul = Some(q.bucket);
                    } else {
                        c.mbr_dl = Some(q.bucket);
                    }
                }
            }
        }
        for u in &mut self.urrs {
            let Some(c) = s.urrs.get_mut(usize::from(u.urr)) else {
                continue;
            };
            if u.first != 0 {
                c.add_pending(
                    (u.ul_bytes, u.ul_packets),
                    (u.dl_bytes, u.dl_packets),
                    at(u.first),
                    at(u.last),
                );
            }
            *u = HotUrr {
                urr: u.urr,
                budget: u.budget,
                exhausted: u.exhausted,
                ..HotUrr::default()
            };
        }
        if last != 0 {
            let t = at(last);
            if t > s.last_packet {
                s.last_packet = t;
            }
            s.inactive_reported = false;
        }
    }

    /// After a URR's budget ran out: the exact check of URR `urr` (an index in the compiled
    /// session's URRs) on everything counted, then fresh budgets for every line.
    pub fn check_urr(
        &mut self,
        s: &mut Compiled,
        epoch: Instant,
        urr: u8,
    ) -> Option<upf_rules::UsageTrigger> {
        self.sync(s, epoch);
        let t = s.urrs.get_mut(usize::from(urr))?.check();
        self.set_urr_limits(s);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Pipeline, PipelineConfig};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use upf_rules::*;

    /// A session as SMFs like free5GC give it: a FAR of its own for every PDR (the two
    /// downlink ones alike: the same gNB tunnel), one URR on every PDR.
    fn far_per_pdr() -> Arc<Session> {
        let mut s = Session::new(Seid(1), Seid(1), IpAddr::V4(Ipv4Addr::LOCALHOST));
        for (id, uplink, qfi) in [(1, true, 1), (2, true, 9), (3, false, 1), (4, false, 9)] {
            let mut pdi = Pdi::any(if uplink {
                Interface::Access
            } else {
                Interface::Core
            });
            pdi.local_f_teid = uplink.then_some(LocalFTeid {
                teid: Teid(7),
                ipv4: Some(Ipv4Addr::new(192, 0, 2, 1)),
                ipv6: None,
            });
            pdi.ue_ip = Some(UeIp {
                ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
                ipv6: None,
                is_destination: !uplink,
            });
            if uplink {
                pdi.qfis = [Qfi(qfi)].into_iter().collect();
            }
            s.insert_pdr(Pdr {
                id: PdrId(id),
                precedence: Precedence(u32::from(id)),
                pdi,
                outer_header_removal: uplink.then_some(OuterHeaderRemoval::GtpuUdpIp {
                    delete_pdu_session_container: false,
                }),
                far: Some(FarId(id.into())),
                qers: Default::default(),
                urrs: [UrrId(1)].into_iter().collect(),
            })
            .unwrap();
            let mut fw = Forwarding::to(if uplink {
                Interface::Core
            } else {
                Interface::Access
            });
            if !uplink {
                fw.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
                    teid: Teid(0x100),
                    peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 200)),
                });
            }
            s.insert_far(Far {
                id: FarId(id.into()),
                action: ApplyAction::FORW,
                forwarding: Some(fw),
                duplicating: Box::default(),
                bar: None,
            })
            .unwrap();
        }
        s.insert_urr(Urr::new(UrrId(1))).unwrap();
        Arc::new(s)
    }

    #[test]
    fn fars_alike_take_one_line_and_both_halves_count_in_one_urr_line() {
        let now = std::time::Instant::now();
        let cfg = PipelineConfig {
            n3: crate::LocalAddrs {
                v4: Some(Ipv4Addr::new(192, 0, 2, 1)),
                v6: None,
            },
            ..Default::default()
        };
        let mut p = Pipeline::new(now, cfg);
        p.install(now, far_per_pdr(), InstallFlags::default())
            .unwrap();
        assert_eq!(p.cold_sessions(), 0);
        let slot = p.by_seid[&Seid(1)] as usize;
        let r = &p.hot[slot];
        for half in 0..2 {
            let pdrs = &r.halves[half].head.pdrs;
            assert_eq!((pdrs[0].far, pdrs[1].far), (0, 0), "half {half}");
            assert_eq!((pdrs[0].urrs[0], pdrs[1].urrs[0]), (0, 0), "half {half}");
            // The uplink FAR has no tunnel, the downlink one has (in the one line).
            let encap = r.halves[half].head.far_flags.map(|f| f & FAR_ENCAP != 0);
            assert_eq!(encap, [half == 1, false], "half {half}");
        }
        assert_eq!(r.urrs.map(|u| u.urr), [0, NONE]);
    }
}
