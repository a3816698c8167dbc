//! The hot form of a session: what processing a packet reads and writes, in fixed layouts of
//! 64-octet lines of plain integers, split in two:
//!
//! - its **record** ([`Hot`], one per session slot in a plain `Vec`, 320 octets): what is the
//!   session's own, the TEIDs and UE address its PDRs match, its tunnels' peers and TEIDs,
//!   its buckets' fills, its URRs' counts; a packet reads the keys line, its direction's
//!   fills line and its URRs' lines, all known from the slot and prefetched in one step;
//! - its **shape** ([`Shape`], interned in [`crate::shapes`]): everything else, the PDRs'
//!   match keys and slots, the SDF filters, the FARs' header templates without peer and
//!   TEID, the QERs' rates and flags. Sessions an SMF builds from the same policy (the same
//!   PCC rules, QoS and charging) share one, which stays in cache however many sessions
//!   there are.
//!
//! With many sessions a packet's cost over few is mostly the page walk and misses of its
//! record, so the record is small: a quarter of the pages and of the host page-table entries
//! a walk misses on, against a record holding everything (docs/benchmarks/datapath-memory.md).
//!
//! A shape has two halves, one per PDR list (GTP-U PDRs found by TEID, IP PDRs found by UE
//! address): the head line with the PDRs, the SDF filter lines, the FARs, the QERs of the
//! list's direction. URRs are the record's, not a half's, because SMFs give the PDRs of both
//! directions the same URRs.
//!
//! A half whose SDF filters do not fit its filter lines keeps them in a run of lines of the
//! pipeline's overflow arena ([`crate::overflow`]), held by the shape; its head then tells
//! the inline classification to look there (out of line).
//!
//! Sessions that do not fit the layout (more rules than the lines hold, more filters than a
//! run holds, slow SDF filters, IPv6 UE prefixes, framed routes, buffering or duplicating
//! FARs, IPv6 tunnels, PPI, URR volumes shared with other workers) are marked cold and take
//! the general path over [`Compiled`].
//!
//! Where the state lives: the compiled session is the source of truth. While a session is
//! hot, its QER buckets' fills are *owned* by the record (copied back by [`Hot::sync`], and
//! taken from the compiled session by [`Hot::take_fills`] when another engine's are set) and
//! the URR volumes counted since the last sync are *pending* in the record (added to the
//! URR by [`Hot::sync`], which zeroes them). Every reader of the compiled state (usage
//! reports, queries, timers, modification) syncs first, and the record is rebuilt from the
//! compiled session afterwards ([`Hot::build`]). QER packet-rate buckets are never the
//! record's: a PDR whose QERs have one ([`PACKET_RATE`]) takes them in the compiled session,
//! out of line (a packet rate passes at most 65,535 packets a minute, so those are few), and
//! so does a PDR whose QERs draw on buckets shared with other workers or sessions. A
//! URR line also holds a *budget*: the octets it may count before some threshold, quota or
//! START trigger could fire; the packet that exhausts it takes the exact check of
//! [`UrrState`] after a sync.
//!
//! [`UrrState`]: crate::usage::UrrState

use crate::fast::{Template, Tunnel};
use crate::filter::FastFilter;
use crate::flow::{Flow, Flow4};
use crate::meter::{Fill, Rate, TokenBucket};
use crate::overflow::{Line, Run, MAX_RUN_LINES};
use crate::session::{CPdr, Compiled, Strip};
use crate::shapes::Shapes;
use std::time::{Duration, Instant};
use upf_packet::Port;
use upf_rules::ApplyAction;

/// An absent slot (FAR, QER, URR, GBR count) in a line.
pub(crate) const NONE: u8 = u8::MAX;
/// A PDR without a QFI condition.
const QFI_ANY: u8 = u8::MAX;

/// PDRs per list held in the head line.
pub(crate) const PDRS: usize = 3;
/// SDF filter lines per half (two filters a line).
pub(crate) const FILTER_LINES: usize = 2;
pub(crate) const FARS: usize = 2;
/// (QER, direction) pairs per half.
pub(crate) const QERS: usize = 3;
/// Of those, the ones that account a GBR.
pub(crate) const GBRS: usize = 2;
/// URR lines per record.
pub(crate) const URRS: usize = 2;
/// GTP-U tunnels (FARs that encapsulate) per record.
const TUNNELS: usize = 4;
/// Distinct F-TEIDs of the GTP-U PDRs per record (a 4G session's bearers each have one).
const TEIDS: usize = 2;

// HotPdr.flags
const HAS_TEID: u8 = 1;
const HAS_UE: u8 = 2;
const UE_IS_DST: u8 = 4;
pub(crate) const FROM_UE: u8 = 8;
pub(crate) const STRIP: u8 = 16;
/// A QER of the PDR has its gate closed in the PDR's direction (resolved when built).
pub(crate) const GATE_SHUT: u8 = 32;
/// A QER of the PDR has a packet rate in the PDR's direction (resolved when built): its
/// packets take that QER's bucket in the compiled session, out of line.
pub(crate) const PACKET_RATE: u8 = 64;

/// One PDR's match conditions and rule slots (slots index the lines of its half), and what
/// its FAR and QERs decide for every packet alike, resolved when built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub(crate) struct HotPdr {
    /// Its F-TEID's index in the record's [`Keys::teids`] (with [`HAS_TEID`]).
    teid: u8,
    qfi: u8,
    pub flags: u8,
    pub far: u8,
    /// First filter (high nibble) and number of filters (low nibble) on the inline lines;
    /// in a half whose filters are in a run, the number of lines its filters take there
    /// (each PDR's from the line after the previous PDR's). None: any packet.
    filters: u8,
    pub qers: [u8; 2],
    /// Its URRs' lines in the record, a bit each.
    pub urrs: u8,
    /// The buckets it polices in its direction (the record's fills, the half's rates), a
    /// bit each; resolved when built, as are `gbr` and the fields below.
    pub police: u8,
    /// The record's GBR counts its packets add to, a bit each.
    pub gbr: u8,
    /// Its FAR's flags (none without a FAR: dropped), egress port and network instance, so
    /// that a FAR without a tunnel needs no line of its own.
    pub far_flags: u8,
    pub port: Port,
    pub instance: u8,
    /// [`MARK_QFI`] and the QFI of the first of its QERs that has one, [`MARK_RQI`] if any
    /// sets RQI.
    pub mark: u8,
}

impl Default for HotPdr {
    fn default() -> Self {
        Self {
            teid: 0,
            qfi: QFI_ANY,
            flags: 0,
            far: NONE,
            filters: 0,
            qers: [NONE; 2],
            urrs: 0,
            police: 0,
            gbr: 0,
            far_flags: 0,
            port: Port::N6,
            instance: 0,
            mark: 0,
        }
    }
}

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
    /// The PDR's conditions other than its filters, against the record's keys `k`.
    #[inline(always)]
    fn keys(&self, k: &Keys, teid: u32, qfi: Option<u8>, f: &impl Key) -> bool {
        if self.flags & HAS_TEID != 0 && k.teids[usize::from(self.teid) % TEIDS] != teid {
            return false;
        }
        if self.qfi != QFI_ANY && qfi != Some(self.qfi) {
            return false;
        }
        self.flags & HAS_UE == 0 || f.v4(self.flags & UE_IS_DST != 0) == Some(k.ue_v4)
    }

    /// `ue_src`: the orientation its half's inline filters are laid out for
    /// ([`ue_is_source`]), whatever the PDR's own.
    #[inline(always)]
    fn matches(
        &self,
        filters: &[[FastFilter; 2]; FILTER_LINES],
        k: &Keys,
        teid: u32,
        qfi: Option<u8>,
        f: &impl Key,
        ue_src: bool,
    ) -> bool {
        if !self.keys(k, teid, qfi, f) {
            return false;
        }
        let (first, n) = (
            usize::from(self.filters >> 4),
            usize::from(self.filters & 15),
        );
        if n == 0 {
            return true;
        }
        for x in filters.as_flattened().get(first..first + n).unwrap_or(&[]) {
            if f.matched_by(x, ue_src) {
                return true;
            }
        }
        false
    }

    /// Whether a packet matches this PDR of a half whose filters are in a run; `lines`: its
    /// lines there (an odd list's last filter is there twice, so no count is checked).
    #[inline(always)]
    fn matches_run4(
        &self,
        lines: &[Line],
        k: &Keys,
        teid: u32,
        qfi: Option<u8>,
        f: &Flow4,
    ) -> bool {
        if !self.keys(k, teid, qfi, f) {
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
    fn matches_run(&self, lines: &[Line], k: &Keys, teid: u32, qfi: Option<u8>, f: &Flow) -> bool {
        let from_ue = self.flags & FROM_UE != 0;
        self.keys(k, teid, qfi, f)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub(crate) struct Head {
    pub pdrs: [HotPdr; PDRS],
    /// The number of PDRs matched on the inline filter lines (bits 0-1), or of those whose
    /// filters are in an overflow run (bits 2-3: then the inline loop sees none, and a
    /// packet it matched to no PDR looks at the run).
    state: u8,
}

/// In [`Head::state`].
const INLINE_PDRS: u8 = 3;
const RUN_PDRS_SHIFT: u8 = 2;
pub(crate) const MARK_QFI: u8 = 0x80;
pub(crate) const MARK_RQI: u8 = 0x40;

impl Head {
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

impl Default for Head {
    fn default() -> Self {
        Self {
            state: 0,
            pdrs: [HotPdr::default(); PDRS],
        }
    }
}

/// A FAR that forwards to one target (plain, or an IPv4 GTP-U tunnel by header template), or
/// drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub(crate) struct HotFar {
    /// The tunnel's header with a PDU Session Container ([`Template::without_psc`] gives the
    /// one without); in a shape, [`Template::generic`], the record's [`Keys::tunnels`] at
    /// `tunnel` holding its peer and TEID.
    pub template: Template,
    pub port: Port,
    pub instance: u8,
    pub flags: u8,
    pub tunnel: u8,
}

pub(crate) const FAR_FORW: u8 = 1;
pub(crate) const FAR_TARGET: u8 = 2;
pub(crate) const FAR_ENCAP: u8 = 4;
pub(crate) const FAR_TO_ACCESS: u8 = 8;
/// A buffering FAR whose buffer is full and that has nothing left to report: its packets
/// are dropped as `buffer_full`, O(1), as the general path would.
pub(crate) const FAR_BUFFER_FULL: u8 = 16;

impl Default for HotFar {
    fn default() -> Self {
        Self {
            template: Template::EMPTY,
            port: Port::N6,
            instance: 0,
            flags: 0,
            tunnel: NONE,
        }
    }
}

/// One direction of one QER: its gate, where the record counts its GBR octets, its marks
/// (its MBR bucket's rate is in [`Half::rates`], its fill in the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct HotQer {
    /// Index in the compiled session's QERs.
    pub qer: u8,
    pub flags: u8,
    pub qfi: u8,
    /// Index in the record's [`Fills::gbr_pending`] (with [`QER_GBR`]).
    pub gbr: u8,
}

pub(crate) const QER_OPEN: u8 = 1;
pub(crate) const QER_MBR: u8 = 2;
pub(crate) const QER_GBR: u8 = 4;
pub(crate) const QER_RQI: u8 = 8;
const QER_UPLINK: u8 = 16;
/// It has a packet rate in its direction (the bucket is the compiled session's).
const QER_PACKETS: u8 = 32;

impl Default for HotQer {
    fn default() -> Self {
        Self {
            qer: NONE,
            flags: 0,
            qfi: NONE,
            gbr: NONE,
        }
    }
}

/// One URR as the record counts it: the volume since the last sync, and how much more may
/// be counted before its exact check must run.
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

/// The first line of a record: what its shape's PDRs and FARs refer to, and its shape.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Keys {
    /// The pipeline's clock + 1 at the last packet since the last sync; 0: none.
    pub last: u64,
    /// The shape's index in the pipeline's [`crate::shapes::Shapes`].
    pub shape: u32,
    /// The UE's IPv4 address the PDRs with [`HAS_UE`] match.
    pub ue_v4: u32,
    pub teids: [u32; TEIDS],
    pub tunnels: [Tunnel; TUNNELS],
    /// The session is hot: its packets take the hot path.
    pub serves: bool,
}

impl Keys {
    /// The peer and TEID of the tunnel FAR whose [`HotFar::tunnel`] is `i`.
    #[inline(always)]
    pub fn tunnel(&self, i: u8) -> &Tunnel {
        &self.tunnels[usize::from(i) % TUNNELS]
    }
}

/// A half's (QER, direction) buckets' fills and GBR octets since the last sync: one line,
/// so that both buckets a packet polices (session AMBR and flow MBR) come in one.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Fills {
    pub fills: [Fill; QERS],
    pub gbr_pending: [u64; GBRS],
}

const _: () = assert!(size_of::<Head>() == 64);
const _: () = assert!(size_of::<HotFar>() == 64);
const _: () = assert!(size_of::<HotUrr>() == 64);
const _: () = assert!(size_of::<Keys>() == 64);
const _: () = assert!(size_of::<Fills>() == 64);

/// The shared part of one PDR list's half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub(crate) struct Half {
    pub head: Head,
    pub filters: [[FastFilter; 2]; FILTER_LINES],
    pub fars: [HotFar; FARS],
    pub qers: [HotQer; QERS],
    /// The MBR buckets' rates, by the same index as `qers` and the record's fills (apart
    /// from `qers`, so that one offset finds a bucket's rate and its fill).
    pub rates: [Rate; QERS],
}

impl Half {
    /// The index of the first PDR (by precedence) that matches; `half`: which half this is.
    #[inline(always)]
    pub fn classify(
        &self,
        half: usize,
        k: &Keys,
        teid: u32,
        qfi: Option<u8>,
        f: &impl Key,
    ) -> Option<usize> {
        // A plain loop: `position` with a closure stayed an out-of-line call.
        let n = self.head.npdrs();
        let ue_src = ue_is_source(half);
        for (i, p) in self.head.pdrs[..n].iter().enumerate() {
            if p.matches(&self.filters, k, teid, qfi, f, ue_src) {
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
        k: &Keys,
        teid: u32,
        qfi: Option<u8>,
        f: &Flow,
    ) -> Option<usize> {
        self.first_in_run(run, |p, lines| p.matches_run(lines, k, teid, qfi, f))
    }

    /// [`Half::classify_run`] on the IPv4 key.
    #[inline(always)]
    pub fn classify_run4(
        &self,
        run: &[Line],
        k: &Keys,
        teid: u32,
        qfi: Option<u8>,
        f: &Flow4,
    ) -> Option<usize> {
        self.first_in_run(run, |p, lines| p.matches_run4(lines, k, teid, qfi, f))
    }

    /// Prefetches this half's lines into L2 (for shapes too many to stay in cache).
    #[inline(always)]
    pub fn prefetch(&self) {
        use upf_prefetch::{l2, l2_ref};
        l2_ref(&self.head);
        for k in 0..FILTER_LINES {
            l2(self.filters.as_slice(), k);
        }
        for k in 0..FARS {
            l2(self.fars.as_slice(), k);
        }
        l2(self.qers.as_slice(), 0);
        l2(self.rates.as_slice(), 0);
        l2(self.rates.as_slice(), QERS - 1);
    }
}

/// What sessions alike share: the halves, and the overflow runs of the halves whose
/// filters are in one (in the pipeline's arena; owned by the shape).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Shape {
    pub halves: [Half; 2],
    pub runs: [Run; 2],
}

/// The record of one session slot: its keys line, one line of bucket fills per half (0:
/// the GTP-U PDRs', 1: the IP PDRs'), then the URR lines both halves index (SMFs give a
/// session's PDRs of both directions the same URRs: one line counts both ways).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Hot {
    pub keys: Keys,
    pub fills: [Fills; 2],
    pub urrs: [HotUrr; URRS],
}

const _: () = assert!(size_of::<Hot>() == 320);

impl Hot {
    /// Prefetches every line of the record `half`'s packets may read, into L2 (into L1,
    /// each of the lines in flight would hold one of its few miss buffers until it arrives,
    /// and the prefetches themselves stalled), all of them whether in use or not: a line
    /// prefetched and not read costs nothing (docs/benchmarks/datapath-memory.md). Not the keys line:
    /// `Pipeline::process` prefetched it when it looked the slot up.
    #[inline(always)]
    pub fn prefetch(&self, half: usize) {
        use upf_prefetch::l2;
        l2(self.fills.as_slice(), half);
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

/// A session's hot form as [`Hot::build`] gives it: the record (its shape not yet
/// interned), the shape's halves and the lines of each half's overflow run (empty: none).
pub(crate) struct Built {
    pub record: Hot,
    pub halves: [Half; 2],
    pub runs: [Vec<Line>; 2],
}

impl Built {
    /// Each half's kind: [`HOT_RUN`] if its filters are in a run, else [`HOT`].
    pub fn kinds(&self) -> [Kind; 2] {
        self.runs
            .each_ref()
            .map(|r| if r.is_empty() { HOT } else { HOT_RUN })
    }
}

/// What the halves of one record share while they are built: the record's keys (by slot),
/// URRs (by slot in the compiled session) and tunnels, so far.
#[derive(Default)]
struct Record {
    teids: Vec<u32>,
    ue_v4: Option<u32>,
    urrs: Vec<u16>,
    tunnels: Vec<Tunnel>,
}

/// One half as built: its shared part, its fills, its overflow run.
struct BuiltHalf {
    half: Half,
    fills: Fills,
    /// The (QER slot, uplink) pairs whose buckets it owns.
    qers: Vec<(u16, bool)>,
    run: Vec<Line>,
}

/// Builds one half from a PDR list; `None` if it does not fit.
struct HalfBuilder<'r> {
    /// [`ue_is_source`] of the half built.
    ue_src: bool,
    half: Half,
    /// FARs that act alike are one (SMFs such as free5GC give every PDR a FAR of its own,
    /// the same for every PDR of a tunnel).
    fars: Vec<HotFar>,
    /// (QER slot, uplink)
    qers: Vec<(u16, bool)>,
    record: &'r mut Record,
}

/// The index of `x` in `v` (pushed if new), if it is below `cap`.
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

/// Whether the inline filters of half `half` are laid out for keys with the UE side first
/// as the packet's source (the GTP-U half's packets mostly come from UEs) or as its
/// destination (the N6 half's go to them). A PDR of the other direction has its filters
/// [`FastFilter::flipped`], so a packet's key is put together one way only.
#[inline(always)]
pub(crate) const fn ue_is_source(half: usize) -> bool {
    half == 0
}

/// `mask` with bit `i` set; `None` if it was set already (a PDR that lists a rule twice,
/// which the general path applies twice, is left to it).
fn bit(mask: u8, i: u8) -> Option<u8> {
    let b = 1u8.checked_shl(u32::from(i))?;
    (mask & b == 0).then_some(mask | b)
}

impl<'r> HalfBuilder<'r> {
    fn new(record: &'r mut Record, ue_src: bool) -> Self {
        Self {
            ue_src,
            half: Half::default(),
            fars: Vec::new(),
            qers: Vec::new(),
            record,
        }
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
        let mut teid = 0;
        if let Some(t) = p.teid {
            flags |= HAS_TEID;
            teid = slot(&mut self.record.teids, t, TEIDS)?;
        }
        if let Some(ue) = p.ue_v4() {
            // One UE address a record.
            if *self.record.ue_v4.get_or_insert(ue) != ue {
                return None;
            }
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
            Some(f) => slot(&mut self.fars, hot_far(s.fars.get(usize::from(f))?)?, FARS)?,
            None => NONE,
        };
        let mut qers = [NONE; 2];
        if p.qers.len() > 2 || p.urrs.len() > 2 {
            return None;
        }
        for (k, &q) in p.qers.iter().enumerate() {
            qers[k] = slot(&mut self.qers, (q, p.from_ue), QERS)?;
        }
        let mut urrs = 0;
        for &u in &p.urrs {
            urrs = bit(urrs, slot(&mut self.record.urrs, u, URRS)?)?;
        }
        Some(HotPdr {
            teid,
            qfi,
            flags,
            far,
            filters: 0,
            qers,
            urrs,
            // Resolved once the half's FARs and QERs are.
            ..HotPdr::default()
        })
    }

    /// Lays the PDRs' filters out on the inline lines; `false` if they do not fit.
    fn inline_filters(&mut self, pdrs: &[CPdr]) -> bool {
        let mut all: Vec<FastFilter> = Vec::new();
        for (hp, p) in self.half.head.pdrs.iter_mut().zip(pdrs) {
            let mut fast = shared_filters(p);
            if p.from_ue != self.ue_src {
                fast.iter_mut().for_each(|f| *f = f.flipped());
            }
            let fast = &fast;
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
            let fast = shared_filters(p);
            let lines = fast.chunks(2).map(|c| Line([c[0], c[c.len() - 1]]));
            run.extend(lines);
            hp.filters = u8::try_from(fast.len().div_ceil(2)).ok()?;
        }
        (run.len() <= MAX_RUN_LINES).then_some(run)
    }

    fn build(mut self, pdrs: &[CPdr], s: &Compiled) -> Option<BuiltHalf> {
        if pdrs.len() > PDRS {
            return None;
        }
        for (k, p) in pdrs.iter().enumerate() {
            self.half.head.pdrs[k] = self.pdr(p, s)?;
        }
        let n = u8::try_from(pdrs.len()).ok()?;
        let run = if self.inline_filters(pdrs) {
            self.half.head.state = n;
            Vec::new()
        } else {
            self.half.head.state = n << RUN_PDRS_SHIFT;
            self.run_filters(pdrs)?
        };
        for (k, &far) in self.fars.iter().enumerate() {
            let mut far = far;
            if far.flags & FAR_ENCAP != 0 {
                // The peer and TEID are the record's; the rest of the header the shape's.
                let (template, tunnel) = far.template.generic()?;
                far.template = template;
                far.tunnel = slot(&mut self.record.tunnels, tunnel, TUNNELS)?;
            }
            self.half.fars[k] = far;
        }
        let mut fills = Fills::default();
        let mut gbrs = 0;
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
            flags |= if c.rqi { QER_RQI } else { 0 };
            // Packet rates and shared buckets are the compiled session's, out of line.
            let packets = c.packet_rates.as_ref().is_some_and(|r| {
                if uplink {
                    r.ul.is_some()
                } else {
                    r.dl.is_some()
                }
            }) || c.draws.as_ref().is_some_and(|d| d.any(uplink));
            flags |= if packets { QER_PACKETS } else { 0 };
            let mut gbr = NONE;
            if c.gbr.is_some() {
                if gbrs == GBRS {
                    return None;
                }
                flags |= QER_GBR;
                gbr = u8::try_from(gbrs).ok()?;
                gbrs += 1;
            }
            let mbr = mbr.unwrap_or(TokenBucket::new(0, 0, Duration::ZERO));
            fills.fills[k] = mbr.fill;
            self.half.rates[k] = mbr.rate;
            self.half.qers[k] = HotQer {
                qer: u8::try_from(q).ok()?,
                flags,
                qfi: c.qfi.unwrap_or(NONE),
                gbr,
            };
        }
        // What the QERs decide for every packet of a PDR alike, resolved once here.
        for pdr in &mut self.half.head.pdrs {
            if let Some(far) = self.half.fars.get(usize::from(pdr.far)) {
                (pdr.far_flags, pdr.port, pdr.instance) = (far.flags, far.port, far.instance);
            }
            for &q in &pdr.qers {
                let Some(line) = self.half.qers.get(usize::from(q)) else {
                    continue;
                };
                if line.flags & QER_OPEN == 0 {
                    pdr.flags |= GATE_SHUT;
                }
                if line.flags & QER_PACKETS != 0 {
                    pdr.flags |= PACKET_RATE;
                }
                if line.flags & QER_MBR != 0 {
                    pdr.police = bit(pdr.police, q)?;
                }
                if line.flags & QER_GBR != 0 {
                    pdr.gbr = bit(pdr.gbr, line.gbr)?;
                }
                if pdr.mark & MARK_QFI == 0 && line.qfi != NONE {
                    pdr.mark |= MARK_QFI | (line.qfi & 0x3f);
                }
                if line.flags & QER_RQI != 0 {
                    pdr.mark |= MARK_RQI;
                }
            }
        }
        Some(BuiltHalf {
            half: self.half,
            fills,
            qers: self.qers,
            run,
        })
    }
}

/// `p`'s fast filters as its shape holds them: a PDR that matches its UE address on the
/// side its filters take for the UE's (as SMFs give them) needs no UE-side prefix that
/// holds that address, so sessions whose filters name their own address instead of
/// `assigned` share a shape.
fn shared_filters(p: &CPdr) -> Vec<FastFilter> {
    let fast = p.fast_filters().iter();
    match p.ue_v4() {
        Some(ue) if p.ue_is_destination() != p.from_ue => fast.map(|f| f.given_ue(ue)).collect(),
        _ => fast.copied().collect(),
    }
}

/// A FAR that the hot path can apply, or `None`.
fn hot_far(f: &crate::session::CFar) -> Option<HotFar> {
    let forw = f.action.contains(ApplyAction::FORW);
    if !f.dup.is_empty() || f.action.contains(ApplyAction::DUPL) {
        return None;
    }
    if !forw {
        if !f.action.contains(ApplyAction::BUFF) {
            return Some(HotFar::default());
        }
        // Buffering (and notifying) stays on the general path until the buffer (or the
        // worker's budget) is full and the CP has heard: then each further packet is a drop,
        // which the hot path does (a buffer that expires or is released, or a budget back at
        // its low-water mark, rebuilds the record).
        let reported = f.notified || !f.action.contains(ApplyAction::NOCP);
        let full = f.buffer.len() >= f.max_buffered || f.over_budget;
        return (full && reported).then(|| HotFar {
            flags: FAR_BUFFER_FULL,
            ..HotFar::default()
        });
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
        instance: t.instance,
        flags,
        tunnel: NONE,
    })
}

impl Hot {
    /// The hot form of `s` (state copied from it), or `None`: the session is cold.
    pub fn build(s: &Compiled) -> Option<Built> {
        // Quota FARs, usage time under an Inactivity Detection Time, the split at a
        // Monitoring Time and measurement before QoS enforcement (MBQE) are the general
        // path's (a hot record keeps only the first and last packet's times, and counts
        // only what it forwards; DROTH counts what a full buffer drops), as are volumes
        // shared with other workers. So is a session reached in more than one network
        // instance (the hot path does not test a PDR's).
        if s.quota_fars
            || !s.one_instance
            || s.urrs.iter().any(|u| u.shared.is_some())
            || s.rules.urrs.iter().any(|u| {
                u.inactivity_detection_time_s.is_some()
                    || u.info.contains(upf_rules::MeasurementInfo::MBQE)
                    || u.extra.as_ref().is_some_and(|x| {
                        x.monitoring_time.is_some() || x.dropped_dl_threshold.is_some()
                    })
            })
        {
            return None;
        }
        let mut r = Record::default();
        let gtp = HalfBuilder::new(&mut r, ue_is_source(0)).build(&s.gtp_pdrs, s)?;
        let ip = HalfBuilder::new(&mut r, ue_is_source(1)).build(&s.ip_pdrs, s)?;
        // A bucket is owned by one line only.
        if gtp.qers.iter().any(|q| ip.qers.contains(q)) {
            return None;
        }
        let mut h = Hot {
            fills: [gtp.fills, ip.fills],
            ..Hot::default()
        };
        let k = &mut h.keys;
        k.serves = true;
        k.ue_v4 = r.ue_v4.unwrap_or(0);
        for (d, t) in k.teids.iter_mut().zip(&r.teids) {
            *d = *t;
        }
        for (d, t) in k.tunnels.iter_mut().zip(&r.tunnels) {
            *d = *t;
        }
        for (k, line) in h.urrs.iter_mut().enumerate() {
            line.urr = match r.urrs.get(k).map(|&u| u8::try_from(u)) {
                Some(Ok(u)) if u != NONE => u,
                Some(_) => return None,
                // No URR: nothing to sync into.
                None => NONE,
            };
        }
        h.set_urr_limits(s);
        Some(Built {
            record: h,
            halves: [gtp.half, ip.half],
            runs: [gtp.run, ip.run],
        })
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

    /// Moves the state the record owns into the compiled session (its shape is in
    /// `shapes`): the URR volumes pending, the GBR accounting, the buckets' fills, the last
    /// packet time. Pending values are zeroed, so syncing twice adds nothing. A record that
    /// does not serve owns nothing (and has no shape).
    pub fn sync(&mut self, shapes: &Shapes, s: &mut Compiled, epoch: Instant) {
        if !self.keys.serves {
            return;
        }
        let shape = shapes.get(self.keys.shape);
        let at = |c: u64| epoch + Duration::from_nanos(c - 1);
        for (half, fills) in shape.halves.iter().zip(&mut self.fills) {
            for ((q, &rate), fill) in half.qers.iter().zip(&half.rates).zip(fills.fills) {
                let Some(c) = s.qers.get_mut(usize::from(q.qer)) else {
                    continue;
                };
                if let Some(g) = fills.gbr_pending.get_mut(usize::from(q.gbr)) {
                    c.gbr_bytes += std::mem::take(g);
                }
                if q.flags & QER_MBR != 0 {
                    let b = Some(TokenBucket { rate, fill });
                    if q.flags & QER_UPLINK != 0 {
                        c.mbr_ul = b;
                    } else {
                        c.mbr_dl = b;
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
        let last = std::mem::take(&mut self.keys.last);
        if last != 0 {
            let t = at(last);
            if t > s.last_packet {
                s.last_packet = t;
            }
            s.inactive_reported = false;
        }
    }

    /// Takes the MBR buckets' fills back from the compiled session `s` (set there since the
    /// last [`Hot::sync`]), so that the record needs no rebuild for them.
    pub fn take_fills(&mut self, shapes: &Shapes, s: &Compiled) {
        if !self.keys.serves {
            return;
        }
        let shape = shapes.get(self.keys.shape);
        for (half, fills) in shape.halves.iter().zip(&mut self.fills) {
            for (q, fill) in half.qers.iter().zip(&mut fills.fills) {
                let Some(c) = s.qers.get(usize::from(q.qer)) else {
                    continue;
                };
                let mbr = if q.flags & QER_UPLINK != 0 {
                    c.mbr_ul
                } else {
                    c.mbr_dl
                };
                if let Some(b) = mbr.filter(|_| q.flags & QER_MBR != 0) {
                    *fill = b.fill;
                }
            }
        }
    }

    /// After a URR's budget ran out: the exact check of URR `urr` (an index in the compiled
    /// session's URRs) on everything counted, then fresh budgets for every line.
    pub fn check_urr(
        &mut self,
        shapes: &Shapes,
        s: &mut Compiled,
        epoch: Instant,
        urr: u8,
    ) -> Option<upf_rules::UsageTrigger> {
        self.sync(shapes, s, epoch);
        let t = s.urrs.get_mut(usize::from(urr))?.check();
        self.set_urr_limits(s);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rules::{far, pdi, N3};
    use crate::{Pipeline, PipelineConfig};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use upf_rules::*;

    /// A session as SMFs like free5GC give it: a FAR of its own for every PDR (the two
    /// downlink ones alike: the same gNB tunnel), one URR on every PDR.
    fn far_per_pdr() -> Arc<Session> {
        let mut s = Session::new(Seid(1), Seid(1), IpAddr::V4(Ipv4Addr::LOCALHOST));
        for (id, uplink, qfi) in [(1, true, 1), (2, true, 9), (3, false, 1), (4, false, 9)] {
            let mut pdi = pdi(uplink, 7, Ipv4Addr::new(10, 0, 0, 1));
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
            let tunnel = (!uplink).then_some((0x100, Ipv4Addr::new(192, 0, 2, 200)));
            s.insert_far(far(id.into(), tunnel)).unwrap();
        }
        s.insert_urr(Urr::new(UrrId(1))).unwrap();
        Arc::new(s)
    }

    /// A session of one uplink PDR policed by the QERs `qers` (each an MBR, the second also
    /// a GBR) and counted by one URR.
    fn policed(qers: &[u32]) -> Arc<Session> {
        let mut s = Session::new(Seid(1), Seid(1), IpAddr::V4(Ipv4Addr::LOCALHOST));
        s.insert_pdr(Pdr {
            id: PdrId(1),
            precedence: Precedence(1),
            pdi: pdi(true, 7, Ipv4Addr::new(10, 0, 0, 1)),
            outer_header_removal: Some(OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(1)),
            qers: qers.iter().map(|&q| QerId(q)).collect(),
            urrs: [UrrId(1)].into_iter().collect(),
        })
        .unwrap();
        s.insert_far(far(1, None)).unwrap();
        let rate = Bitrate {
            uplink_kbps: 1000,
            downlink_kbps: 1000,
        };
        for q in [1, 2] {
            let mut qer = Qer::open(QerId(q));
            qer.mbr = Some(rate);
            qer.gbr = (q == 2).then_some(rate);
            s.insert_qer(qer).unwrap();
        }
        s.insert_urr(Urr::new(UrrId(1))).unwrap();
        Arc::new(s)
    }

    #[test]
    fn a_pdr_polices_and_counts_by_bit_masks_and_one_listing_a_rule_twice_is_cold() {
        let now = std::time::Instant::now();
        let mut p = Pipeline::new(now, PipelineConfig::default());
        p.install(now, policed(&[1, 2]), InstallFlags::default())
            .unwrap();
        assert_eq!(p.cold_sessions(), 0);
        let r = &p.hot[p.by_seid[&Seid(1)] as usize];
        let pdr = p.shapes.get(r.keys.shape).halves[0].head.pdrs[0];
        assert_eq!((pdr.police, pdr.gbr, pdr.urrs), (0b11, 0b1, 0b1));
        // Listed twice, a QER would be taken twice a packet by the general path.
        p.remove_session(now, Seid(1)).unwrap();
        p.install(now, policed(&[1, 1]), InstallFlags::default())
            .unwrap();
        assert_eq!(p.cold_sessions(), 1);
    }

    #[test]
    fn fars_alike_take_one_line_and_both_halves_count_in_one_urr_line() {
        let now = std::time::Instant::now();
        let cfg = PipelineConfig {
            n3: crate::LocalAddrs {
                v4: Some(N3),
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
        let shape = p.shapes.get(r.keys.shape);
        for half in 0..2 {
            let pdrs = &shape.halves[half].head.pdrs;
            assert_eq!((pdrs[0].far, pdrs[1].far), (0, 0), "half {half}");
            // Both count on the record's first URR line.
            assert_eq!((pdrs[0].urrs, pdrs[1].urrs), (1, 1), "half {half}");
            // The uplink FAR has no tunnel, the downlink one has (in the one line).
            let encap = pdrs.map(|p| p.far_flags & FAR_ENCAP != 0);
            assert_eq!(encap[..2], [half == 1; 2], "half {half}");
            assert_eq!(shape.halves[half].fars[1].flags, 0, "half {half}");
        }
        assert_eq!(r.urrs.map(|u| u.urr), [0, NONE]);
    }
}
