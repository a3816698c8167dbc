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
//! On the benchmark mix, 10,000 rules give 4 tables for IPv4 (docs/benchmarks/acl.md). A lookup
//! probes the tables in order of their lowest rule index and stops when no table left can hold
//! a better rule; a list stops at its first match.
//!
//! Why it is fast enough: a probe is one multiply-fold hash of the masked fields and one read
//! of a 4-byte slot; an empty slot points at a shared rule that matches nothing, so a key that
//! is absent costs no other memory access. The rule check has no branch per field (the
//! differences are or-ed into one word): at 10,000 rules a lookup checks ~7 candidates, and
//! whether each matches is what a branch predictor cannot learn on live traffic, so
//! mispredicted branches, not instructions, are the cost (a check joined with `&&` takes
//! about half again as long). IPv4-only tables keep 32-bit addresses, so a rule takes 32
//! bytes (IPv6: 80).
//!
//! Rules are split first by the IP versions of source and destination (four lists; an `any`
//! address goes into both of its versions), and two exact reductions are applied per list:
//! rules after one that matches everything are dropped, and so is a tail of rules whose action
//! is the default. An ACL left with no rule returns the default after one branch.
//!
//! What this does not do well: rules that differ only in port *ranges* (not single ports), or
//! only in address bits beyond their table's key, share one list, which is scanned; nothing
//! bounds a list's length when rules crowd onto one key (the benchmark's longest has 16).

mod build;
mod export;
mod lookup;
mod rules;
#[cfg(test)]
mod tests;

pub use export::{AclEntry4, AclTable4, AclTables4};
pub use rules::{parse_rules, AclLoadError, AclParseError};

use crate::flow::{Flow, Flow4, Prefix};
use build::compile_family;
use lookup::{Families, Word, L4};

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
    /// Measured on the benchmark mix (docs/benchmarks/acl.md).
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

    /// Whether some rule can match an IPv6 packet (both its addresses IPv6); if none can,
    /// [`Acl::check`] gives every such packet the default.
    pub fn judges_ipv6(&self) -> bool {
        self.families.as_ref().is_some_and(|f| !f.v6.is_empty())
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
