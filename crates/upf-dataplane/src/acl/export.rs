//! The IPv4 tables of a compiled ACL as plain data, for an engine that runs the same lookup
//! elsewhere (the XDP engine copies them into its maps): the tables, their slots and rules
//! exactly as [`Acl::check4`] probes them, so that both engines answer alike.

use super::lookup::{Entry, Family, DENY, LAST};
use super::{Acl, AclAction};

/// A compiled rule ([`AclTable4::entries`]): the packet matches when `(src & src_mask) ==
/// src_net`, likewise for the destination, `(proto & proto_mask) == proto`, and each port
/// minus its `lo` (wrapping) is at most its `span`. Addresses in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry4 {
    pub src_net: u32,
    pub src_mask: u32,
    pub dst_net: u32,
    pub dst_mask: u32,
    /// Index in the rule list: the lowest matching one decides.
    pub idx: u32,
    pub sport_lo: u16,
    pub sport_span: u16,
    pub dport_lo: u16,
    pub dport_span: u16,
    pub proto: u8,
    pub proto_mask: u8,
    pub deny: bool,
    /// The last rule of its slot's list.
    pub last: bool,
}

/// One hash table. A flow's slot is `key_hash(src & src_mask | (dst & dst_mask) << 32,
/// meta & meta_mask) >> shift`, where `meta = proto | src_port << 8 | dst_port << 24` and
/// `key_hash(x, m)` folds the 128-bit product `(x ^ 0x9e37_79b9_7f4a_7c15) × (m ^
/// 0xc2b2_ae3d_27d4_eb4f)` onto itself (low ^ high 64 bits). A slot is the index in `entries`
/// where its list starts; the list runs to the entry flagged `last`. Entry 0 matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclTable4 {
    /// The lowest rule index in the table: probing stops at a table whose `min` is not below
    /// the best match so far (tables come in ascending `min`).
    pub min: u32,
    pub src_mask: u32,
    pub dst_mask: u32,
    pub meta_mask: u64,
    pub shift: u32,
    pub slots: Vec<u32>,
    pub entries: Vec<AclEntry4>,
}

/// What [`Acl::check4`] reads: `default` when `reach` (if not empty) has no bit for the
/// destination's /16 (bit `b % 64` of word `b / 64`) or no rule matches, else the action of
/// the lowest-indexed matching rule. A list is in rule order: a walk stops at its first
/// match or at a rule not below the best so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclTables4 {
    pub default: AclAction,
    pub reach: Vec<u64>,
    pub tables: Vec<AclTable4>,
}

impl AclTables4 {
    /// The longest list of one slot: what a walk may have to read.
    pub fn longest(&self) -> usize {
        let lists = self
            .tables
            .iter()
            .flat_map(|t| t.entries.split_inclusive(|e| e.last));
        lists.map(<[_]>::len).max().unwrap_or(0)
    }
}

impl Acl {
    /// The tables [`Acl::check4`] probes, as plain data.
    pub fn tables4(&self) -> AclTables4 {
        let Some(f) = &self.families else {
            return AclTables4 {
                default: self.default,
                reach: Vec::new(),
                tables: Vec::new(),
            };
        };
        AclTables4 {
            default: self.default,
            reach: f.v4.reach.to_vec(),
            tables: tables(&f.v4),
        }
    }
}

fn tables(f: &Family<u32>) -> Vec<AclTable4> {
    let entry = |e: &Entry<u32>| AclEntry4 {
        src_net: e.src_net,
        src_mask: e.src_mask,
        dst_net: e.dst_net,
        dst_mask: e.dst_mask,
        idx: e.idx,
        sport_lo: e.sport_lo,
        sport_span: e.sport_span,
        dport_lo: e.dport_lo,
        dport_span: e.dport_span,
        proto: e.proto,
        proto_mask: e.proto_mask,
        deny: e.flags & DENY != 0,
        last: e.flags & LAST != 0,
    };
    f.tables
        .iter()
        .map(|t| AclTable4 {
            min: t.min,
            src_mask: t.src_mask,
            dst_mask: t.dst_mask,
            meta_mask: t.meta_mask,
            shift: t.shift,
            slots: t.slots.to_vec(),
            entries: t.entries.iter().map(entry).collect(),
        })
        .collect()
}
