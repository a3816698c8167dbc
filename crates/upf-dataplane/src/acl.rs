//! The uplink ACL: an ordered list of permit/deny rules applied to every uplink packet (the
//! inner, decapsulated one), compiled once into hash tables so that a lookup costs a few hash
//! probes whatever the number of rules.
//!
//! # Rules
//!
//! Operators write rules as IPFilterRule lines (RFC 6733 §4.3.1, the text SMFs put in SDF
//! filters), parsed by [`FlowDescription::parse`] and narrowed to what an ACL can check:
//! `deny in udp from any to 192.0.2.0/24 53`. `from` is the packet's source (the UE side),
//! `to` its destination. Refused: `out` (the ACL only sees uplink packets), `assigned`,
//! negated addresses (`!10.0.0.0/8`), trailing options (`frag`, `established`, …: they would
//! be ignored and the rule would match more than it says), and a source and destination of
//! different IP versions. A list of port ranges (`to any 53,5353,8000-8100`) is one rule for
//! [`AclRule::parse`] (an error) but is expanded by [`parse_rules`] / [`Acl::load`] into one
//! rule per (source range, destination range) pair, adjacent and with the same action, which
//! is exactly the listed rule under first-match order (at most [`MAX_EXPANSION`] per line).
//!
//! # Lookup: tuple merge
//!
//! The first matching rule wins, so a lookup looks for the matching rule of lowest index.
//! Tuple space search groups rules by their exact shape (source length, destination length,
//! protocol and port shape) and probes one hash table per group; a 10,000-rule list with
//! /8–/32 prefix pairs has hundreds of shapes, and a packet that matches nothing probes them
//! all. Here a table's key may be *coarser* than its rules (TupleMerge, Daly & Torng 2017): a
//! table keyed on (src/s, dst/d, protocol?, source port?, destination port?) takes any rule at
//! least that specific, and a slot of the table lists the candidate rules of its key, in rule
//! order, each then checked in full. As candidates are checked anyway, tables store no keys:
//! keys that hash to the same slot share its list.
//!
//! Compilation is greedy: among key shapes drawn from the rules' own prefix lengths, take the
//! one that holds the most remaining rules with at most [`Tuning::bucket`] per key, again and
//! again while a new table takes a fair share of the rules ([`Tuning::min_share`]); the rest
//! go where their key's list is shortest, and at most [`Tuning::max_tables`] tables are made.
//! On the benchmark mix, 10,000 rules give 4 tables for IPv4 (docs/benchmarks.md). A lookup
//! probes the tables in order of their lowest rule index and stops when no table left can hold
//! a better rule; a list stops at its first match.
//!
//! Why it is fast enough: a probe is one multiply-fold hash of the masked fields and one read
//! of a 4-byte slot; an empty slot points at a shared rule that matches nothing, so a key that
//! is absent costs no other memory access. The rule check has no branch per field (the
//! differences are or-ed into one word): at 10,000 rules a lookup checks ~7 candidates, and
//! mispredicted branches on them, not instructions, were where the time went (a check with
//! `&&` measured ~40 ns against ~27 ns; with 100–1,000 rules it was 1.5–4.5 ns faster, as the
//! predictor learns the few lists of the benchmark's 4,096 flows, which live traffic with
//! more flows would not let it do). IPv4-only tables keep 32-bit addresses, so a rule takes
//! 32 bytes (IPv6: 80).
//!
//! Rules are split first by the IP versions of source and destination (four lists; an `any`
//! address goes into both of its versions), and two exact reductions are applied per list:
//! rules after one that matches everything are dropped, and so is a tail of rules whose action
//! is the default. An ACL left with no rule returns the default after one branch.
//!
//! What this does not do well: rules that differ only in port *ranges* (not single ports), or
//! only in address bits beyond their table's key, share one list, which is scanned; nothing
//! bounds a list's length when rules crowd onto one key (the benchmark's longest has 16).

use crate::flow::{Addr, Flow, Flow4, Prefix};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use upf_rules::sdf::{Action, Address, Direction, Endpoint, FlowDescription, FlowParseError};

/// What the ACL decides for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AclAction {
    Permit,
    Deny,
}

/// Every port, the range of a rule that names none.
pub const ANY_PORT: (u16, u16) = (0, u16::MAX);

/// The most rules one line may expand into (source ranges × destination ranges).
pub const MAX_EXPANSION: usize = 64;

/// One ACL rule; every field must match. Port ranges are inclusive; a range with `first >
/// last` matches nothing. Ports are those of [`Flow`]: 0 for protocols without ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AclRule {
    pub action: AclAction,
    /// `None`: any protocol (`ip`).
    pub proto: Option<u8>,
    /// `None`: any address, of either IP version.
    pub src: Option<Prefix>,
    pub dst: Option<Prefix>,
    pub src_ports: (u16, u16),
    pub dst_ports: (u16, u16),
}

/// Why a rule line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclParseError {
    /// Not an IPFilterRule at all.
    Syntax(FlowParseError),
    /// `out`: the ACL only sees uplink packets; write the rule with `in`.
    Out,
    /// `assigned`: the ACL is not per UE.
    Assigned,
    /// `!address`.
    Negated,
    /// Options after the destination (`frag`, `established`, `tcpflags`, …).
    Options,
    /// An IPv4 source with an IPv6 destination or the reverse: it could never match.
    MixedVersions,
    /// Several port ranges on one side, given to [`AclRule::parse`]; [`parse_rules`] expands them.
    PortList,
    /// A line whose port lists expand into more than [`MAX_EXPANSION`] rules.
    TooManyRanges,
}

impl core::fmt::Display for AclParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Syntax(e) => write!(f, "not an IPFilterRule: {e}"),
            Self::Out => {
                f.write_str("direction `out`: the ACL applies to uplink packets, write `in`")
            }
            Self::Assigned => f.write_str("`assigned` is not supported in an ACL"),
            Self::Negated => f.write_str("negated addresses (`!`) are not supported in an ACL"),
            Self::Options => {
                f.write_str("options after the destination are not supported in an ACL")
            }
            Self::MixedVersions => f.write_str("source and destination of different IP versions"),
            Self::PortList => f.write_str("several port ranges make several rules"),
            Self::TooManyRanges => {
                write!(f, "port lists expand into more than {MAX_EXPANSION} rules")
            }
        }
    }
}

impl std::error::Error for AclParseError {}

/// A refused line of an ACL file; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclLoadError {
    pub line: usize,
    pub error: AclParseError,
}

impl core::fmt::Display for AclLoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ACL line {}: {}", self.line, self.error)
    }
}

impl std::error::Error for AclLoadError {}

/// A parsed line before its port lists are expanded.
struct Parsed {
    rule: AclRule,
    src_ports: Vec<(u16, u16)>,
    dst_ports: Vec<(u16, u16)>,
}

fn endpoint(e: &Endpoint) -> Result<Option<Prefix>, AclParseError> {
    if e.negated {
        return Err(AclParseError::Negated);
    }
    match e.address {
        Address::Any => Ok(None),
        Address::Assigned => Err(AclParseError::Assigned),
        Address::Prefix(ip, len) => Prefix::new(ip, len)
            .map(Some)
            .ok_or(AclParseError::Syntax(FlowParseError("bad address"))),
    }
}

fn ranges(e: &Endpoint) -> Vec<(u16, u16)> {
    if e.ports.is_empty() {
        vec![ANY_PORT]
    } else {
        e.ports.iter().map(|r| (r.first, r.last)).collect()
    }
}

impl AclRule {
    /// A rule of any protocol, address and port: [`AclRule::matches`] every packet.
    pub const fn any(action: AclAction) -> Self {
        Self {
            action,
            proto: None,
            src: None,
            dst: None,
            src_ports: ANY_PORT,
            dst_ports: ANY_PORT,
        }
    }

    /// One IPFilterRule line as one rule; port lists are refused ([`AclParseError::PortList`]).
    pub fn parse(line: &str) -> Result<Self, AclParseError> {
        let p = Self::parse_parts(line)?;
        match (p.src_ports.as_slice(), p.dst_ports.as_slice()) {
            (&[src_ports], &[dst_ports]) => Ok(Self {
                src_ports,
                dst_ports,
                ..p.rule
            }),
            _ => Err(AclParseError::PortList),
        }
    }

    /// One IPFilterRule line as the rules it means, one per pair of port ranges, in order.
    pub fn parse_expanded(line: &str) -> Result<Vec<Self>, AclParseError> {
        let p = Self::parse_parts(line)?;
        if p.src_ports.len() * p.dst_ports.len() > MAX_EXPANSION {
            return Err(AclParseError::TooManyRanges);
        }
        let mut out = Vec::with_capacity(p.src_ports.len() * p.dst_ports.len());
        for &src_ports in &p.src_ports {
            for &dst_ports in &p.dst_ports {
                out.push(Self {
                    src_ports,
                    dst_ports,
                    ..p.rule
                });
            }
        }
        Ok(out)
    }

    fn parse_parts(line: &str) -> Result<Parsed, AclParseError> {
        let fd = FlowDescription::parse(line).map_err(AclParseError::Syntax)?;
        if fd.direction == Direction::Out {
            return Err(AclParseError::Out);
        }
        // `FlowDescription::parse` accepts and drops options; count the words to see them:
        // action, direction, protocol, `from`, address, [ports], `to`, address, [ports].
        let words =
            7 + usize::from(!fd.from.ports.is_empty()) + usize::from(!fd.to.ports.is_empty());
        if line.split_ascii_whitespace().count() > words {
            return Err(AclParseError::Options);
        }
        let (src, dst) = (endpoint(&fd.from)?, endpoint(&fd.to)?);
        if let (Some(s), Some(d)) = (src, dst) {
            if s.v6 != d.v6 {
                return Err(AclParseError::MixedVersions);
            }
        }
        let action = match fd.action {
            Action::Permit => AclAction::Permit,
            Action::Deny => AclAction::Deny,
        };
        Ok(Parsed {
            rule: Self {
                action,
                proto: fd.protocol,
                src,
                dst,
                src_ports: ANY_PORT,
                dst_ports: ANY_PORT,
            },
            src_ports: ranges(&fd.from),
            dst_ports: ranges(&fd.to),
        })
    }

    /// Whether the rule matches the packet: the reference that [`Acl::check`] must agree with.
    pub fn matches(&self, f: &Flow) -> bool {
        self.proto.is_none_or(|p| p == f.proto)
            && self.src.is_none_or(|p| p.contains(f.src))
            && self.dst.is_none_or(|p| p.contains(f.dst))
            && (self.src_ports.0..=self.src_ports.1).contains(&f.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&f.dst_port)
    }
}

/// Writes the rule back as an IPFilterRule. What the syntax cannot say does not parse back:
/// a mask that is not a prefix (printed by its leading ones; [`Prefix::new`] never makes one)
/// and an empty port range.
impl core::fmt::Display for AclRule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        fn side(
            f: &mut core::fmt::Formatter<'_>,
            p: Option<Prefix>,
            ports: (u16, u16),
        ) -> core::fmt::Result {
            match p {
                None => f.write_str("any")?,
                Some(p) => {
                    let ip = Addr {
                        v6: p.v6,
                        bits: p.net,
                    }
                    .to_ip();
                    write!(f, "{ip}/{}", lead_len(p.mask, p.v6))?;
                }
            }
            match ports {
                ANY_PORT => Ok(()),
                (a, b) if a == b => write!(f, " {a}"),
                (a, b) => write!(f, " {a}-{b}"),
            }
        }
        let action = match self.action {
            AclAction::Permit => "permit",
            AclAction::Deny => "deny",
        };
        write!(f, "{action} in ")?;
        match self.proto {
            None => f.write_str("ip")?,
            Some(p) => write!(f, "{p}")?,
        }
        f.write_str(" from ")?;
        side(f, self.src, self.src_ports)?;
        f.write_str(" to ")?;
        side(f, self.dst, self.dst_ports)
    }
}

/// An ACL file: one rule per line, `#` starts a comment, blank lines are skipped; port lists
/// are expanded ([`AclRule::parse_expanded`]).
pub fn parse_rules(text: &str) -> Result<Vec<AclRule>, AclLoadError> {
    let mut rules = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let more =
            AclRule::parse_expanded(line).map_err(|error| AclLoadError { line: n + 1, error })?;
        rules.extend(more);
    }
    Ok(rules)
}

/// Leading ones of a mask within its version's width: the longest prefix mask it contains.
fn lead_len(mask: u128, v6: bool) -> u32 {
    if v6 {
        mask.leading_ones()
    } else {
        (mask << 96).leading_ones()
    }
}

/// What a rule reads of a packet besides its addresses.
#[derive(Debug, Clone, Copy)]
struct L4 {
    proto: u8,
    src_port: u16,
    dst_port: u16,
}

impl L4 {
    #[inline(always)]
    fn of(f: &Flow) -> Self {
        Self {
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
        }
    }
}

/// Protocol and ports in one word, the layout of a table's `meta_mask`.
#[inline(always)]
fn meta(proto: u8, src_port: u16, dst_port: u16) -> u64 {
    u64::from(proto) | u64::from(src_port) << 8 | u64::from(dst_port) << 24
}
const META_PROTO: u64 = 0xff;
const META_SPORT: u64 = 0xffff << 8;
const META_DPORT: u64 = 0xffff << 24;

/// Address bits at a table's width: tables for IPv4-to-IPv4 flows keep 32 bits (32-byte
/// entries), tables with an IPv6 side keep 128 (80-byte entries).
trait Word:
    Copy
    + Eq
    + core::ops::BitAnd<Output = Self>
    + core::ops::BitOr<Output = Self>
    + core::ops::BitXor<Output = Self>
    + core::fmt::Debug
{
    const NARROW: bool;
    fn of(bits: u128) -> Self;
    /// The mask of a `len`-bit prefix of an address `width` bits wide, in [`Addr`]'s layout.
    fn prefix(len: u8, width: u32) -> Self;
    /// Source and destination in one word for the hash.
    fn fold(src: Self, dst: Self) -> u64;
    /// Zero exactly when `self` is.
    fn any_bits(self) -> u64;
    /// The top 16 bits of an IPv4 address (0 for wide words, which have no reach map).
    fn top16(self) -> usize;
}

impl Word for u32 {
    const NARROW: bool = true;
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // IPv4 lives in the low 32 bits
    fn of(bits: u128) -> Self {
        bits as u32
    }
    #[inline(always)]
    fn prefix(len: u8, _: u32) -> Self {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }
    /// Without loss.
    #[inline(always)]
    fn fold(src: Self, dst: Self) -> u64 {
        u64::from(src) | u64::from(dst) << 32
    }
    #[inline(always)]
    fn any_bits(self) -> u64 {
        u64::from(self)
    }
    #[inline(always)]
    fn top16(self) -> usize {
        (self >> 16) as usize
    }
}

impl Word for u128 {
    const NARROW: bool = false;
    #[inline(always)]
    fn of(bits: u128) -> Self {
        bits
    }
    #[inline(always)]
    fn prefix(len: u8, width: u32) -> Self {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0) >> (128 - width)
    }
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // folding on purpose
    fn fold(src: Self, dst: Self) -> u64 {
        let f = |a: u128| (a as u64) ^ ((a >> 64) as u64).rotate_left(17);
        f(src) ^ f(dst).rotate_left(32)
    }
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // both halves kept
    fn any_bits(self) -> u64 {
        (self as u64) | (self >> 64) as u64
    }
    fn top16(self) -> usize {
        0
    }
}

/// Hashes a folded, masked key: the 64×64→128 multiply folded onto itself spreads every input
/// bit into the top bits, which pick the slot.
#[inline(always)]
fn key_hash(x: u64, meta: u64) -> u64 {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let p = u128::from(x ^ K0) * u128::from(meta ^ K1);
    #[allow(clippy::cast_possible_truncation)]
    let h = (p as u64) ^ ((p >> 64) as u64);
    h
}

const DENY: u8 = 1;
/// The last rule of its slot's list.
const LAST: u8 = 2;

/// The index of no rule: it never beats a match.
const NEVER: u32 = u32::MAX;

/// A compiled rule: 32 bytes for IPv4 (two per cache line), 80 with IPv6.
#[derive(Debug, Clone, Copy)]
struct Entry<W> {
    src_net: W,
    src_mask: W,
    dst_net: W,
    dst_mask: W,
    /// Index in the rule list: lower wins.
    idx: u32,
    sport_lo: u16,
    sport_span: u16,
    dport_lo: u16,
    dport_span: u16,
    proto: u8,
    proto_mask: u8,
    flags: u8,
}

impl<W: Word> Entry<W> {
    /// Every field compared without a branch: the differences are or-ed into one word
    /// (comparisons joined with `&` still become a branch each, and whether a packet
    /// matches a candidate is what a predictor cannot learn).
    #[inline(always)]
    fn matches(&self, src: W, dst: W, l4: L4) -> bool {
        let addr = ((src & self.src_mask) ^ self.src_net) | ((dst & self.dst_mask) ^ self.dst_net);
        let proto = (l4.proto & self.proto_mask) ^ self.proto;
        let sport = l4.src_port.wrapping_sub(self.sport_lo) > self.sport_span;
        let dport = l4.dst_port.wrapping_sub(self.dport_lo) > self.dport_span;
        addr.any_bits() | u64::from(proto) | u64::from(sport) | u64::from(dport) == 0
    }
}

/// One hash table: the key is the flow's fields under the masks. A slot names the first rule
/// of its list in `entries`; the list runs to the rule flagged [`LAST`], in rule order.
/// Several keys that land in one slot share its list. Entry 0 matches nothing and serves every
/// empty slot.
#[derive(Debug, Clone)]
struct Table<W> {
    /// The lowest rule index in the table: nothing here can beat a match below it.
    min: u32,
    src_mask: W,
    dst_mask: W,
    meta_mask: u64,
    /// 64 − log2(slots); at least 33, so a slot number fits 31 bits.
    shift: u32,
    slots: Box<[u32]>,
    entries: Box<[Entry<W>]>,
}

impl<W: Word> Table<W> {
    /// Where the list of the flow's key starts (0 if there is none).
    #[inline(always)]
    fn probe(&self, src: W, dst: W, meta: u64) -> usize {
        let h = key_hash(
            W::fold(src & self.src_mask, dst & self.dst_mask),
            meta & self.meta_mask,
        );
        #[allow(clippy::cast_possible_truncation)] // `shift` ≥ 33
        let slot = (h >> self.shift) as usize;
        self.slots.get(slot).map_or(0, |&i| i as usize)
    }

    fn bytes(&self) -> usize {
        size_of_val(&*self.slots) + size_of_val(&*self.entries) + size_of::<Self>()
    }

    /// The longest list.
    fn longest(&self) -> usize {
        let lists = self.entries.split_inclusive(|e| e.flags & LAST != 0);
        lists.map(<[_]>::len).max().unwrap_or(0)
    }
}

/// The tables for one pair of (source, destination) IP versions, by ascending `min`.
#[derive(Debug, Clone)]
struct Family<W> {
    tables: Box<[Table<W>]>,
    /// IPv4 only: bit b set when some rule's destination reaches into the /16 `b`, so that
    /// a packet to a /16 no rule names skips the tables (an ACL of the operator's own
    /// prefixes passes most traffic this way); empty when every /16 is reached.
    reach: Box<[u64]>,
}

impl<W: Word> Family<W> {
    #[inline(always)]
    fn lookup(&self, src: W, dst: W, l4: L4, default: AclAction) -> AclAction {
        if !self.reach.is_empty() {
            let b = dst.top16();
            if self
                .reach
                .get(b / 64)
                .is_some_and(|w| w >> (b % 64) & 1 == 0)
            {
                return default;
            }
        }
        let m = meta(l4.proto, l4.src_port, l4.dst_port);
        let mut best = NEVER;
        let mut flags = 0;
        for t in self.tables.iter() {
            // Tables are sorted by `min`: none from here on holds a rule before `best`.
            if t.min >= best {
                break;
            }
            let start = t.probe(src, dst, m);
            let Some(e) = t.entries.get(start) else {
                continue;
            };
            // The first rule of the list without a branch: most lists have one, and the
            // outcome of each check is what a predictor cannot learn.
            let hit = e.matches(src, dst, l4) & (e.idx < best);
            best = if hit { e.idx } else { best };
            flags = if hit { e.flags } else { flags };
            if hit | (e.flags & LAST != 0) {
                continue;
            }
            for e in t.entries.get(start + 1..).unwrap_or_default() {
                // A list is in rule order: past `best`, nothing in it can win.
                if e.idx >= best {
                    break;
                }
                if e.matches(src, dst, l4) {
                    best = e.idx;
                    flags = e.flags;
                    break;
                }
                if e.flags & LAST != 0 {
                    break;
                }
            }
        }
        if best == NEVER {
            default
        } else if flags & DENY != 0 {
            AclAction::Deny
        } else {
            AclAction::Permit
        }
    }

    fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The /16s the rules' destinations reach ([`Family::reach`]), for IPv4 destinations.
    fn with_reach(mut self) -> Self {
        if !W::NARROW {
            return self;
        }
        let mut reach = vec![0u64; 1 << 10];
        let mut set = |b: usize| {
            if let Some(w) = reach.get_mut(b / 64) {
                *w |= 1 << (b % 64);
            }
        };
        // Entry 0 of each table matches nothing.
        for e in self.tables.iter().flat_map(|t| t.entries.iter().skip(1)) {
            let (net, mask) = (e.dst_net.top16(), e.dst_mask.top16());
            let free = !mask & 0xffff;
            if (free + 1).is_power_of_two() {
                // A prefix: the /16s from its network to its last address.
                (net & mask..=(net & mask) | free).for_each(&mut set);
            } else {
                (0..1 << 16).for_each(&mut set);
            }
        }
        self.reach = if reach.iter().all(|&w| w == u64::MAX) {
            Box::default()
        } else {
            reach.into_boxed_slice()
        };
        self
    }

    fn add_stats(&self, s: &mut AclStats) {
        s.tables += self.tables.len();
        s.max_tables = s.max_tables.max(self.tables.len());
        for t in self.tables.iter() {
            s.entries += t.entries.len() - 1;
            s.bytes += t.bytes();
            s.max_bucket = s.max_bucket.max(t.longest());
        }
    }
}

/// Tables by the IP versions of (source, destination): an `any` address is in both.
#[derive(Debug, Clone)]
struct Families {
    v4: Family<u32>,
    v6: Family<u128>,
    v4_v6: Family<u128>,
    v6_v4: Family<u128>,
}

/// The most tables per IP-version pair [`Tuning::max_tables`] may ask for.
pub const MAX_TABLES: usize = 16;

/// How the compiler trades table count against list length.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// The most rules one key may hold while tables are being chosen.
    pub bucket: usize,
    /// The most tables per IP-version pair, at most [`MAX_TABLES`].
    pub max_tables: usize,
    /// A table after the first must take at least this many per mille of the pair's rules
    /// (a table costs every packet a probe); rules left over join the table, among those whose
    /// key they fit, where their key has the fewest rules, up to twice `bucket`.
    pub min_share: usize,
    /// Hash slots per key (rounded up to a power of two; a slot is 4 bytes): more slots, fewer
    /// keys sharing a list.
    pub slots_per_key: usize,
}

impl Tuning {
    /// Measured on the benchmark mix (docs/benchmarks.md).
    pub const DEFAULT: Self = Self {
        bucket: 8,
        max_tables: 8,
        min_share: 30,
        slots_per_key: 4,
    };
}

/// The shape of a compiled ACL, for tuning and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AclStats {
    /// Hash tables over the four IP-version pairs.
    pub tables: usize,
    /// The most tables of one pair: what a non-matching packet probes.
    pub max_tables: usize,
    /// Compiled rules (a rule with `any` addresses counts once per version it covers).
    pub entries: usize,
    /// The longest list of rules in one slot.
    pub max_bucket: usize,
    /// Heap bytes of the tables.
    pub bytes: usize,
}

/// A compiled ACL: [`Acl::check`] returns the action of the first rule that matches, or the
/// default.
#[derive(Clone)]
pub struct Acl {
    default: AclAction,
    len: usize,
    /// `None` when no rule can change the outcome.
    families: Option<Box<Families>>,
}

impl core::fmt::Debug for Acl {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Acl")
            .field("default", &self.default)
            .field("len", &self.len)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Acl {
    /// No rule, everything permitted.
    fn default() -> Self {
        Self::compile(&[], AclAction::Permit)
    }
}

impl Acl {
    /// Compiles `rules` (first match wins, in list order; `default` when none matches).
    pub fn compile(rules: &[AclRule], default: AclAction) -> Self {
        Self::compile_tuned(rules, default, Tuning::DEFAULT)
    }

    /// [`Acl::compile`] with another trade-off; any tuning gives the same answers.
    pub fn compile_tuned(rules: &[AclRule], default: AclAction, tuning: Tuning) -> Self {
        let tuning = Tuning {
            bucket: tuning.bucket.max(1),
            max_tables: tuning.max_tables.clamp(1, MAX_TABLES),
            min_share: tuning.min_share,
            slots_per_key: tuning.slots_per_key.clamp(1, 1024).next_power_of_two(),
        };
        let families = Families {
            v4: compile_family(rules, default, false, false, tuning).with_reach(),
            v6: compile_family(rules, default, true, true, tuning),
            v4_v6: compile_family(rules, default, false, true, tuning),
            v6_v4: compile_family(rules, default, true, false, tuning),
        };
        let live = !families.v4.is_empty()
            || !families.v6.is_empty()
            || !families.v4_v6.is_empty()
            || !families.v6_v4.is_empty();
        Self {
            default,
            len: rules.len(),
            families: live.then(|| Box::new(families)),
        }
    }

    /// Parses an ACL file ([`parse_rules`]) and compiles it with default [`AclAction::Permit`]
    /// (a list of what to refuse; end it with `deny in ip from any to any` to permit only what
    /// it lists). For another default, `Acl::compile(&parse_rules(text)?, default)`.
    pub fn load(text: &str) -> Result<Self, AclLoadError> {
        Ok(Self::compile(&parse_rules(text)?, AclAction::Permit))
    }

    /// The number of rules compiled (after port-list expansion).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn default_action(&self) -> AclAction {
        self.default
    }

    /// The action for an uplink packet: that of the first rule that matches it
    /// ([`AclRule::matches`]), else the default. IPv4 addresses are expected as `Addr::v4`
    /// builds them (the higher 96 bits zero): tables for IPv4 flows read the low 32 bits only.
    #[inline(always)]
    pub fn check(&self, f: &Flow) -> AclAction {
        match &self.families {
            None => self.default,
            // IPv4 both ways inline (the common case); the other families out of line.
            Some(fam) if !f.src.v6 && !f.dst.v6 => fam.v4.lookup(
                u32::of(f.src.bits),
                u32::of(f.dst.bits),
                L4::of(f),
                self.default,
            ),
            Some(families) => Self::lookup(families, f, self.default),
        }
    }

    /// [`Acl::check`] of the IPv4 key (the same answer, without a 96-octet [`Flow`]).
    #[inline(always)]
    pub fn check4(&self, f: &Flow4) -> AclAction {
        match &self.families {
            None => self.default,
            Some(fam) => {
                let l4 = L4 {
                    proto: f.proto,
                    src_port: f.src_port,
                    dst_port: f.dst_port,
                };
                fam.v4.lookup(f.src, f.dst, l4, self.default)
            }
        }
    }

    #[inline(never)]
    fn lookup(fam: &Families, f: &Flow, default: AclAction) -> AclAction {
        let (s, d, l4) = (f.src.bits, f.dst.bits, L4::of(f));
        match (f.src.v6, f.dst.v6) {
            (false, false) => fam.v4.lookup(u32::of(s), u32::of(d), l4, default),
            (true, true) => fam.v6.lookup(s, d, l4, default),
            (false, true) => fam.v4_v6.lookup(s, d, l4, default),
            (true, false) => fam.v6_v4.lookup(s, d, l4, default),
        }
    }

    pub fn stats(&self) -> AclStats {
        let mut s = AclStats::default();
        if let Some(f) = &self.families {
            f.v4.add_stats(&mut s);
            f.v6.add_stats(&mut s);
            f.v4_v6.add_stats(&mut s);
            f.v6_v4.add_stats(&mut s);
        }
        s
    }
}

/// A rule on its way into a family's tables.
#[derive(Debug, Clone, Copy)]
struct Cand<W> {
    entry: Entry<W>,
    /// The longest prefixes within the source and destination masks.
    src_len: u8,
    dst_len: u8,
    /// Bit 0: protocol given; bit 1: one source port; bit 2: one destination port.
    shape: u8,
    meta: u64,
}

/// A table's key: prefix lengths and which of protocol / source port / destination port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    s: u8,
    d: u8,
    shape: u8,
}

impl Spec {
    /// Whether the key's masks lie within the rule's: then a flow the rule matches has the
    /// rule's key.
    fn fits<W>(&self, c: &Cand<W>) -> bool {
        c.src_len >= self.s && c.dst_len >= self.d && c.shape & self.shape == self.shape
    }

    /// The finest key that every rule of `cs` fits.
    fn common<W>(cs: &[Cand<W>]) -> Self {
        Self {
            s: cs.iter().map(|c| c.src_len).min().unwrap_or(0),
            d: cs.iter().map(|c| c.dst_len).min().unwrap_or(0),
            shape: cs.iter().fold(7, |a, c| a & c.shape),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Masks<W> {
    src: W,
    dst: W,
    meta: u64,
}

fn masks<W: Word>(spec: Spec, widths: (u32, u32)) -> Masks<W> {
    let bit = |b: u8, m: u64| if spec.shape & b != 0 { m } else { 0 };
    Masks {
        src: W::prefix(spec.s, widths.0),
        dst: W::prefix(spec.d, widths.1),
        meta: bit(1, META_PROTO) | bit(2, META_SPORT) | bit(4, META_DPORT),
    }
}

/// A rule's key under a table's masks: what a matching flow's fields hash to, given
/// `Spec::fits`.
fn cand_key<W: Word>(c: &Cand<W>, m: &Masks<W>) -> u64 {
    key_hash(
        W::fold(c.entry.src_net & m.src, c.entry.dst_net & m.dst),
        c.meta & m.meta,
    )
}

/// The u64 keys are hashes already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Counts = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

/// The rules that can match flows of this version pair, in order, up to one that matches all
/// of them and without a tail of default-action rules (both exact).
fn candidates<W: Word>(rules: &[AclRule], default: AclAction, widths: (u32, u32)) -> Vec<Cand<W>> {
    let mut cands: Vec<Cand<W>> = Vec::new();
    let (src_v6, dst_v6) = (widths.0 == 128, widths.1 == 128);
    // An address side in this family's layout, or `None` when the rule cannot match it.
    let side = |p: Option<Prefix>, v6: bool| -> Option<(u128, u128)> {
        match p {
            None => Some((0, 0)),
            Some(p) if p.v6 != v6 => None,
            // A narrow table reads IPv4 from the low 32 bits: a network with higher bits
            // matches no such address, and higher mask bits only test zeros.
            Some(p) if W::NARROW && p.net >> 32 != 0 => None,
            Some(p) if W::NARROW => Some((p.net, p.mask & u128::from(u32::MAX))),
            Some(p) => Some((p.net, p.mask)),
        }
    };
    for (i, r) in rules.iter().enumerate() {
        if r.src_ports.0 > r.src_ports.1 || r.dst_ports.0 > r.dst_ports.1 {
            continue; // an empty range matches nothing
        }
        let (Some((src_net, src_mask)), Some((dst_net, dst_mask))) =
            (side(r.src, src_v6), side(r.dst, dst_v6))
        else {
            continue;
        };
        let entry = Entry {
            src_net: W::of(src_net),
            src_mask: W::of(src_mask),
            dst_net: W::of(dst_net),
            dst_mask: W::of(dst_mask),
            idx: u32::try_from(i).expect("fewer than 2^32 rules"),
            sport_lo: r.src_ports.0,
            sport_span: r.src_ports.1 - r.src_ports.0,
            dport_lo: r.dst_ports.0,
            dport_span: r.dst_ports.1 - r.dst_ports.0,
            proto: r.proto.unwrap_or(0),
            proto_mask: if r.proto.is_some() { 0xff } else { 0 },
            flags: if r.action == AclAction::Deny { DENY } else { 0 },
        };
        let shape = u8::from(r.proto.is_some())
            | u8::from(r.src_ports.0 == r.src_ports.1) << 1
            | u8::from(r.dst_ports.0 == r.dst_ports.1) << 2;
        // Leading ones: the longest prefix mask within the rule's, whatever the rest.
        let len = |mask: u128, v6: bool| u8::try_from(lead_len(mask, v6)).unwrap_or(0);
        cands.push(Cand {
            entry,
            src_len: len(src_mask, src_v6),
            dst_len: len(dst_mask, dst_v6),
            shape,
            meta: meta(entry.proto, entry.sport_lo, entry.dport_lo),
        });
        let all = src_mask == 0
            && dst_mask == 0
            && r.proto.is_none()
            && r.src_ports == ANY_PORT
            && r.dst_ports == ANY_PORT;
        if all {
            break; // nothing after it is ever reached
        }
    }
    // A tail of default-action rules decides nothing that the default does not.
    while cands
        .last()
        .is_some_and(|c| (c.entry.flags & DENY != 0) == (default == AclAction::Deny))
    {
        cands.pop();
    }
    cands
}

/// A table being filled: its key, and how many rules each key value holds.
struct Group<W> {
    spec: Spec,
    masks: Masks<W>,
    cands: Vec<Cand<W>>,
    counts: Counts,
}

impl<W: Word> Group<W> {
    fn new(spec: Spec, widths: (u32, u32)) -> Self {
        Self {
            spec,
            masks: masks(spec, widths),
            cands: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// Moves into the group the rules of `rest` that fit it, at most `cap` per key value.
    fn take(&mut self, rest: &mut Vec<Cand<W>>, cap: usize) {
        rest.retain(|c| {
            if self.spec.fits(c) {
                let n = self.counts.entry(cand_key(c, &self.masks)).or_insert(0);
                if (*n as usize) < cap {
                    *n += 1;
                    self.cands.push(*c);
                    return false;
                }
            }
            true
        });
    }
}

/// Moves each rule of `rest` into the group, among those whose key it fits, where its key
/// value has the fewest rules, if fewer than `cap`.
fn place<W: Word>(groups: &mut [Group<W>], rest: &mut Vec<Cand<W>>, cap: usize) {
    rest.retain(|c| {
        let best = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.spec.fits(c))
            .map(|(i, g)| {
                let n = g.counts.get(&cand_key(c, &g.masks)).copied().unwrap_or(0);
                (n, i)
            })
            .min();
        match best {
            Some((n, i)) if (n as usize) < cap => {
                let g = &mut groups[i];
                *g.counts.entry(cand_key(c, &g.masks)).or_insert(0) += 1;
                g.cands.push(*c);
                false
            }
            _ => true,
        }
    });
}

fn compile_family<W: Word>(
    rules: &[AclRule],
    default: AclAction,
    src_v6: bool,
    dst_v6: bool,
    tuning: Tuning,
) -> Family<W> {
    let widths = (if src_v6 { 128 } else { 32 }, if dst_v6 { 128 } else { 32 });
    let mut rest = candidates::<W>(rules, default, widths);
    let total = rest.len();
    let mut groups: Vec<Group<W>> = Vec::new();
    // Greedy: the key that holds the most rules (at most `bucket` per key value), again and
    // again, while a table is worth its probe; then the rest where lists stay short.
    while !rest.is_empty() {
        if groups.len() + 1 >= tuning.max_tables {
            place(&mut groups, &mut rest, usize::MAX);
            break;
        }
        let used: Vec<Spec> = groups.iter().map(|g| g.spec).collect();
        let Some((spec, held)) = best_spec(&rest, widths, tuning.bucket, &used) else {
            place(&mut groups, &mut rest, usize::MAX);
            break;
        };
        if groups.is_empty() || held * 1000 >= total * tuning.min_share {
            let mut g = Group::new(spec, widths);
            g.take(&mut rest, tuning.bucket);
            groups.push(g);
            continue;
        }
        let before = rest.len();
        place(&mut groups, &mut rest, 2 * tuning.bucket);
        if rest.len() == before {
            let mut g = Group::new(spec, widths);
            g.take(&mut rest, tuning.bucket);
            groups.push(g);
        }
    }
    // What fits no table: one more, with the finest key all of it fits.
    if !rest.is_empty() {
        let mut g = Group::new(Spec::common(&rest), widths);
        g.take(&mut rest, usize::MAX);
        groups.push(g);
    }
    let mut tables: Vec<Table<W>> = groups
        .into_iter()
        .map(|mut g| {
            g.cands.sort_by_key(|c| c.entry.idx);
            build_table(&g.cands, g.masks, tuning.slots_per_key)
        })
        .collect();
    tables.sort_by_key(|t| t.min);
    Family {
        tables: tables.into_boxed_slice(),
        reach: Box::default(),
    }
}

/// The key shape not in `used` that holds the most of `rest` with at most `bucket` rules per
/// key value, and how many. Shapes are tried by how many rules fit them at all, most first,
/// and the search stops when that bound cannot beat the best found.
fn best_spec<W: Word>(
    rest: &[Cand<W>],
    widths: (u32, u32),
    bucket: usize,
    used: &[Spec],
) -> Option<(Spec, usize)> {
    // How many rules have each exact (src_len, dst_len, shape): the bounds come from these.
    let mut groups: HashMap<(u8, u8, u8), usize> = HashMap::new();
    for c in rest {
        *groups.entry((c.src_len, c.dst_len, c.shape)).or_insert(0) += 1;
    }
    let lens = |width: u32, f: fn(&(u8, u8, u8)) -> u8| {
        let mut l: Vec<u8> = groups.keys().map(f).collect();
        l.sort_unstable();
        l.dedup();
        // Beyond 9 lengths, keep the longest length below each step of a grid (and the
        // shortest, which every rule fits): the search stays within ~9 × 9 × 8 shapes.
        if l.len() > 9 {
            let step = if width == 128 { 16 } else { 4 };
            let mut q: Vec<u8> = (0..=8u8)
                .filter_map(|g| l.iter().copied().filter(|&x| x <= g * step).max())
                .collect();
            q.push(l[0]);
            q.sort_unstable();
            q.dedup();
            l = q;
        }
        l
    };
    let (ss, ds) = (lens(widths.0, |g| g.0), lens(widths.1, |g| g.1));
    let mut specs = Vec::new();
    for &s in &ss {
        for &d in &ds {
            for shape in 0..8u8 {
                let spec = Spec { s, d, shape };
                if used.contains(&spec) {
                    continue;
                }
                let bound: usize = groups
                    .iter()
                    .filter(|((gs, gd, gsh), _)| *gs >= s && *gd >= d && gsh & shape == shape)
                    .map(|(_, n)| n)
                    .sum();
                if bound > 0 {
                    specs.push((bound, spec));
                }
            }
        }
    }
    // Most rules first; among equals, the finer key (shorter lists).
    specs.sort_by_key(|(bound, spec)| {
        (
            core::cmp::Reverse(*bound),
            core::cmp::Reverse(
                u32::from(spec.s) + u32::from(spec.d) + 32 * spec.shape.count_ones(),
            ),
        )
    });
    let mut best: Option<(Spec, usize)> = None;
    let mut counts = Counts::default();
    for (bound, spec) in specs {
        if best.is_some_and(|(_, held)| bound <= held) {
            break;
        }
        let m = masks::<W>(spec, widths);
        counts.clear();
        let mut held = 0;
        for c in rest.iter().filter(|c| spec.fits(c)) {
            let n = counts.entry(cand_key(c, &m)).or_insert(0);
            if (*n as usize) < bucket {
                *n += 1;
                held += 1;
            }
        }
        if best.is_none_or(|(_, h)| held > h) {
            best = Some((spec, held));
        }
    }
    best
}

/// `cs` in rule order, non-empty.
fn build_table<W: Word>(cs: &[Cand<W>], m: Masks<W>, slots_per_key: usize) -> Table<W> {
    let hashes: Vec<u64> = cs.iter().map(|c| cand_key(c, &m)).collect();
    let mut keys = hashes.clone();
    keys.sort_unstable();
    keys.dedup();
    let bits = (slots_per_key * keys.len())
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, 31);
    let shift = 64 - bits;
    #[allow(clippy::cast_possible_truncation)] // shift ≥ 33
    let slot_of = |h: u64| (h >> shift) as usize;
    // Rules by slot, each slot in rule order (the sort is stable).
    let mut order: Vec<(usize, &Cand<W>)> = hashes.iter().map(|&h| slot_of(h)).zip(cs).collect();
    order.sort_by_key(|(slot, _)| *slot);
    let mut slots = vec![0; 1usize << bits];
    // Entry 0: the list of every empty slot, matching nothing.
    let mut entries = vec![Entry {
        idx: NEVER,
        flags: LAST,
        ..cs[0].entry
    }];
    for run in order.chunk_by(|a, b| a.0 == b.0) {
        slots[run[0].0] = u32::try_from(entries.len()).expect("fewer than 2^32 rules");
        entries.extend(run.iter().map(|(_, c)| c.entry));
        if let Some(last) = entries.last_mut() {
            last.flags |= LAST;
        }
    }
    Table {
        min: cs[0].entry.idx,
        src_mask: m.src,
        dst_mask: m.dst,
        meta_mask: m.meta,
        shift,
        slots: slots.into_boxed_slice(),
        entries: entries.into_boxed_slice(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn p(s: &str) -> Prefix {
        let (a, l) = s.split_once('/').unwrap_or((s, ""));
        let a: IpAddr = a.parse().unwrap();
        let l = l.parse().unwrap_or(if a.is_ipv4() { 32 } else { 128 });
        Prefix::new(a, l).unwrap()
    }

    fn flow(src: &str, sp: u16, dst: &str, dp: u16, proto: u8) -> Flow {
        Flow {
            src: Addr::from_ip(src.parse().unwrap()),
            dst: Addr::from_ip(dst.parse().unwrap()),
            proto,
            src_port: sp,
            dst_port: dp,
            ..Flow::default()
        }
    }

    /// The IPv4 key of `f`, when both its addresses are IPv4.
    fn flow4(f: &Flow) -> Option<Flow4> {
        (!f.src.v6 && !f.dst.v6).then(|| Flow4 {
            src: f.src.low32(),
            dst: f.dst.low32(),
            src_port: f.src_port,
            dst_port: f.dst_port,
            proto: f.proto,
            tos: f.tos,
        })
    }

    fn rule(s: &str) -> AclRule {
        AclRule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_acl_lines() {
        assert_eq!(
            rule("deny in udp from any to 192.0.2.0/24 53"),
            AclRule {
                action: AclAction::Deny,
                proto: Some(17),
                src: None,
                dst: Some(p("192.0.2.0/24")),
                src_ports: ANY_PORT,
                dst_ports: (53, 53),
            }
        );
        assert_eq!(
            rule("permit in ip from 10.60.0.0/16 to any"),
            AclRule {
                src: Some(p("10.60.0.0/16")),
                ..AclRule::any(AclAction::Permit)
            }
        );
        assert_eq!(
            rule("  deny in tcp from any 1000-2000 to 2001:db8::/32 80 "),
            AclRule {
                action: AclAction::Deny,
                proto: Some(6),
                src: None,
                dst: Some(p("2001:db8::/32")),
                src_ports: (1000, 2000),
                dst_ports: (80, 80),
            }
        );
        // A host address is a /32 (/128), host bits of a prefix are cleared, dotted masks and
        // protocol numbers are IPFilterRule too.
        assert_eq!(
            rule("deny in 50 from 10.1.2.3 to 10.9.9.9/255.255.0.0"),
            AclRule {
                proto: Some(50),
                src: Some(p("10.1.2.3/32")),
                dst: Some(p("10.9.0.0/16")),
                ..AclRule::any(AclAction::Deny)
            }
        );
    }

    #[test]
    fn refuses_what_an_acl_cannot_check() {
        use AclParseError::*;
        for (line, err) in [
            ("deny out ip from any to any", Out),
            ("permit in ip from assigned to any", Assigned),
            ("deny in ip from any to !10.0.0.0/8", Negated),
            ("deny in tcp from any to any 80 established", Options),
            ("deny in ip from any to any frag", Options),
            ("deny in ip from 10.0.0.0/8 to 2001:db8::/32", MixedVersions),
            ("deny in udp from any to any 53,5353", PortList),
            ("deny in udp from any 1-2,3 to any", PortList),
        ] {
            assert_eq!(AclRule::parse(line), Err(err), "{line}");
        }
        for line in [
            "",
            "allow in ip from any to any",
            "deny in ip from 10.0.0.0/33 to any",
            "deny in tcp from any to any 80-70",
            "deny in ip from any",
        ] {
            assert!(matches!(AclRule::parse(line), Err(Syntax(_))), "{line}");
        }
        let many = "deny in udp from any 1,2,3,4,5,6,7,8,9 to any 1,2,3,4,5,6,7,8";
        assert_eq!(AclRule::parse_expanded(many), Err(TooManyRanges));
        assert!(Options.to_string().contains("options"));
    }

    #[test]
    fn port_lists_expand_in_order() {
        let rules = AclRule::parse_expanded("deny in udp from any 1-2,7 to any 53,5353").unwrap();
        let pairs: Vec<_> = rules.iter().map(|r| (r.src_ports, r.dst_ports)).collect();
        assert_eq!(
            pairs,
            [
                ((1, 2), (53, 53)),
                ((1, 2), (5353, 5353)),
                ((7, 7), (53, 53)),
                ((7, 7), (5353, 5353))
            ]
        );
        assert!(rules
            .iter()
            .all(|r| r.action == AclAction::Deny && r.proto == Some(17)));
    }

    #[test]
    fn display_parses_back() {
        for line in [
            "deny in 17 from any to 192.0.2.0/24 53",
            "permit in ip from 10.60.0.0/16 to any",
            "deny in 6 from any 1000-2000 to 2001:db8::/32 80",
            "deny in 58 from ::/0 to 2001:db8::1/128",
        ] {
            let r = rule(line);
            assert_eq!(r.to_string(), line);
            assert_eq!(rule(&r.to_string()), r);
        }
    }

    #[test]
    fn loads_files_and_names_bad_lines() {
        let text = "# uplink ACL\n\n deny in tcp from any to 192.0.2.0/24 25,465 # no SMTP\npermit in ip from any to any\n";
        let acl = Acl::load(text).unwrap();
        assert_eq!(acl.len(), 3);
        assert!(!acl.is_empty());
        assert_eq!(acl.default_action(), AclAction::Permit);
        let f = flow("10.60.0.1", 40000, "192.0.2.9", 465, 6);
        assert_eq!(acl.check(&f), AclAction::Deny);
        assert_eq!(acl.check(&Flow { dst_port: 443, ..f }), AclAction::Permit);

        let err = Acl::load("# fine\ndeny in ip from any to any\ndeny out ip from any to any\n")
            .unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.error, AclParseError::Out);
        assert!(err.to_string().starts_with("ACL line 3: "), "{err}");
    }

    #[test]
    fn destinations_no_rule_names_skip_the_tables() {
        let rules = [
            rule("deny in ip from any to 100.64.0.0/10"),
            rule("deny in udp from any to 198.51.100.0/24 53"),
        ];
        let acl = Acl::compile(&rules, AclAction::Permit);
        let reach = &acl.families.as_ref().unwrap().v4.reach;
        // 100.64/10 is 64 /16s, 198.51.100/24 lies in one.
        assert_eq!(reach.iter().map(|w| w.count_ones()).sum::<u32>(), 65);
        let check = |d, port, proto| acl.check(&flow("10.60.0.1", 4000, d, port, proto));
        assert_eq!(check("100.127.255.1", 80, 6), AclAction::Deny);
        assert_eq!(check("100.128.0.1", 80, 6), AclAction::Permit);
        assert_eq!(check("198.51.100.7", 53, 17), AclAction::Deny);
        assert_eq!(check("198.51.100.7", 54, 17), AclAction::Permit);
        assert_eq!(check("198.51.101.7", 53, 17), AclAction::Permit);
        // A rule for any destination reaches every /16: no map then.
        let mut all = rules.to_vec();
        all.push(rule("deny in tcp from any to any 25"));
        let acl = Acl::compile(&all, AclAction::Permit);
        assert!(acl.families.as_ref().unwrap().v4.reach.is_empty());
        assert_eq!(
            acl.check(&flow("10.60.0.1", 4000, "203.0.113.1", 25, 6)),
            AclAction::Deny
        );
    }

    #[test]
    fn first_match_wins() {
        let rules = [
            rule("permit in tcp from 10.60.0.0/16 to 192.0.2.0/24 443"),
            rule("deny in ip from any to 192.0.2.0/24"),
            rule("permit in ip from any to 192.0.2.7"),
        ];
        let acl = Acl::compile(&rules, AclAction::Permit);
        let ok = flow("10.60.1.1", 5000, "192.0.2.7", 443, 6);
        assert_eq!(acl.check(&ok), AclAction::Permit);
        // Not from the pool, or not 443: the deny comes before the later permit.
        assert_eq!(
            acl.check(&flow("10.61.1.1", 5000, "192.0.2.7", 443, 6)),
            AclAction::Deny
        );
        assert_eq!(
            acl.check(&flow("10.60.1.1", 5000, "192.0.2.7", 80, 6)),
            AclAction::Deny
        );
        assert_eq!(
            acl.check(&flow("10.60.1.1", 5000, "198.51.100.1", 80, 6)),
            AclAction::Permit
        );
        // The same rules the other way round.
        let rev: Vec<_> = rules.iter().rev().copied().collect();
        let acl = Acl::compile(&rev, AclAction::Deny);
        assert_eq!(
            acl.check(&flow("10.61.1.1", 5000, "192.0.2.7", 443, 6)),
            AclAction::Permit
        );
        assert_eq!(
            acl.check(&flow("10.61.1.1", 5000, "192.0.2.8", 443, 6)),
            AclAction::Deny
        );
        assert_eq!(
            acl.check(&flow("10.61.1.1", 5000, "192.0.3.8", 443, 6)),
            AclAction::Deny
        );
    }

    #[test]
    fn both_versions_and_any() {
        let acl = Acl::compile(
            &[
                rule("deny in ip from 2001:db8::/32 to 2001:db8:ffff::/48"),
                rule("deny in udp from any to any 53"),
                rule("permit in ip from 10.0.0.0/8 to any"),
                rule("deny in ip from any to any"),
            ],
            AclAction::Permit,
        );
        let d = AclAction::Deny;
        let ok = AclAction::Permit;
        assert_eq!(
            acl.check(&flow("2001:db8::1", 1, "2001:db8:ffff::1", 2, 6)),
            d
        );
        assert_eq!(
            acl.check(&flow("2001:db8::1", 1, "2001:db8:fffe::1", 2, 6)),
            d
        );
        assert_eq!(acl.check(&flow("10.1.1.1", 1, "8.8.8.8", 53, 17)), d);
        assert_eq!(
            acl.check(&flow("2001:db9::1", 1, "2001:4860::8888", 53, 17)),
            d
        );
        assert_eq!(acl.check(&flow("10.1.1.1", 1, "8.8.8.8", 53, 6)), ok);
        assert_eq!(acl.check(&flow("11.1.1.1", 1, "8.8.8.8", 53, 6)), d);
        // An IPv4-mapped IPv6 address is IPv6: 10.0.0.0/8 does not hold it.
        assert_eq!(
            acl.check(&flow("::ffff:10.1.1.1", 1, "2001:4860::1", 80, 6)),
            d
        );
        // Source and destination of different versions (no such packet, still exact).
        assert_eq!(acl.check(&flow("10.1.1.1", 1, "2001:4860::1", 80, 6)), ok);
        assert_eq!(acl.check(&flow("2001:db8::1", 1, "8.8.8.8", 80, 6)), d);
    }

    #[test]
    fn ports_and_protocols() {
        let acl = Acl::compile(
            &[
                rule("deny in tcp from any 1024-2047 to any 8000-8100"),
                rule("deny in 132 from any to any"),
                rule("deny in ip from any to any 0"),
            ],
            AclAction::Permit,
        );
        let d = AclAction::Deny;
        let ok = AclAction::Permit;
        for (sp, dp, want) in [
            (1024, 8000, d),
            (2047, 8100, d),
            (1023, 8000, ok),
            (2048, 8050, ok),
            (1500, 7999, ok),
            (1500, 8101, ok),
        ] {
            assert_eq!(
                acl.check(&flow("10.0.0.1", sp, "1.1.1.1", dp, 6)),
                want,
                "{sp} {dp}"
            );
        }
        // UDP does not match the TCP rule; SCTP matches the protocol-only rule.
        assert_eq!(acl.check(&flow("10.0.0.1", 1500, "1.1.1.1", 8000, 17)), ok);
        assert_eq!(acl.check(&flow("10.0.0.1", 1500, "1.1.1.1", 8000, 132)), d);
        // Ports are those of `Flow`: 0 when the protocol has none (GRE here).
        assert_eq!(acl.check(&flow("10.0.0.1", 0, "1.1.1.1", 0, 47)), d);
    }

    #[test]
    fn nothing_to_check() {
        let acl = Acl::default();
        assert!(acl.is_empty());
        assert_eq!(acl.len(), 0);
        assert_eq!(acl.stats(), AclStats::default());
        assert_eq!(acl.check(&Flow::default()), AclAction::Permit);
        // Only rules that give the default anyway: nothing is compiled.
        let same = [
            rule("deny in ip from any to 192.0.2.0/24"),
            rule("deny in ip from any to any"),
        ];
        let acl = Acl::compile(&same, AclAction::Deny);
        assert_eq!(acl.len(), 2);
        assert_eq!(acl.stats().tables, 0);
        assert_eq!(
            acl.check(&flow("10.0.0.1", 1, "192.0.2.1", 2, 6)),
            AclAction::Deny
        );
        // Rules behind a rule that matches everything are never reached.
        let shadowed = [
            rule("permit in ip from any to any"),
            rule("deny in ip from any to 192.0.2.0/24"),
        ];
        let acl = Acl::compile(&shadowed, AclAction::Deny);
        assert_eq!(
            acl.check(&flow("10.0.0.1", 1, "192.0.2.1", 2, 6)),
            AclAction::Permit
        );
        assert_eq!(
            acl.stats().entries,
            4,
            "the catch-all, once per version pair"
        );
    }

    #[test]
    fn hand_built_rules_are_exact_too() {
        // A mask that is not a prefix (only hand-built `Prefix` values have one), an empty port
        // range, and a network with bits outside its mask (matches nothing).
        let odd = Prefix {
            v6: false,
            net: 0x0a00_0001,
            mask: 0xff00_00ff,
        };
        let rules = [
            AclRule {
                src_ports: (10, 9),
                ..AclRule::any(AclAction::Deny)
            },
            AclRule {
                dst: Some(Prefix {
                    v6: false,
                    net: 0x0a00_0001,
                    mask: 0xff00_0000,
                }),
                ..AclRule::any(AclAction::Deny)
            },
            AclRule {
                dst: Some(odd),
                ..AclRule::any(AclAction::Deny)
            },
        ];
        let acl = Acl::compile(&rules, AclAction::Permit);
        for (dst, want) in [("10.7.7.1", true), ("10.7.7.2", false), ("11.7.7.1", false)] {
            let f = flow("1.1.1.1", 10, dst, 1, 6);
            let expect = rules
                .iter()
                .find(|r| r.matches(&f))
                .map_or(AclAction::Permit, |r| r.action);
            assert_eq!(expect == AclAction::Deny, want, "{dst}");
            assert_eq!(acl.check(&f), expect, "{dst}");
        }
    }

    #[test]
    fn every_tuning_gives_the_same_answers() {
        let rules: Vec<AclRule> = (0..200u32)
            .map(|i| AclRule {
                action: if i % 3 == 0 {
                    AclAction::Permit
                } else {
                    AclAction::Deny
                },
                proto: (i % 4 != 0).then_some([6, 17, 1][(i % 3) as usize]),
                src: (i % 5 != 0).then(|| p(&format!("10.{}.0.0/{}", i % 7, 8 + i % 17))),
                dst: Some(p(&format!("192.0.{}.0/{}", i % 11, 16 + i % 17))),
                src_ports: ANY_PORT,
                dst_ports: if i % 2 == 0 {
                    (53, 53)
                } else {
                    (1000, 1000 + u16::try_from(i).unwrap())
                },
            })
            .collect();
        let flows: Vec<Flow> = (0..500u32)
            .map(|i| {
                let src = format!("10.{}.{}.{}", i % 8, i % 3, i % 5);
                let dst = format!("192.0.{}.{}", i % 12, i % 256);
                flow(
                    &src,
                    1,
                    &dst,
                    [53, 1000, 1100, 80][(i % 4) as usize],
                    [6, 17, 1, 47][(i % 4) as usize],
                )
            })
            .collect();
        for tuning in [
            Tuning::DEFAULT,
            Tuning {
                bucket: 1,
                ..Tuning::DEFAULT
            },
            Tuning {
                max_tables: 1,
                ..Tuning::DEFAULT
            },
            Tuning {
                max_tables: 2,
                min_share: 0,
                ..Tuning::DEFAULT
            },
            Tuning {
                min_share: 1000,
                slots_per_key: 1,
                ..Tuning::DEFAULT
            },
            Tuning {
                bucket: 100,
                max_tables: MAX_TABLES,
                min_share: 0,
                slots_per_key: 64,
            },
        ] {
            let acl = Acl::compile_tuned(&rules, AclAction::Permit, tuning);
            assert!(
                acl.stats().max_tables <= tuning.max_tables.max(1),
                "{tuning:?}"
            );
            for f in &flows {
                let want = rules
                    .iter()
                    .find(|r| r.matches(f))
                    .map_or(AclAction::Permit, |r| r.action);
                assert_eq!(acl.check(f), want, "{tuning:?} {f:?}");
                if let Some(f4) = flow4(f) {
                    assert_eq!(acl.check4(&f4), want, "{tuning:?} {f:?}");
                }
            }
        }
    }
}
