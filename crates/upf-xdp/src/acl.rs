//! The uplink ACL in the program's maps: the IPv4 tables `upf_dataplane::Acl` compiled
//! (`Acl::tables4`), copied as they are, so that the program's lookup (`acl_denies` in
//! bpf/engine.bpf.c) answers as `Acl::check4` does.

use std::io;
use upf_dataplane::{AclAction, AclTables4};

/// `ACL_TABLES` of bpf/engine.bpf.c: the most tables the program probes (lists of any
/// length are walked).
pub const ACL_TABLES: usize = 8;
const ACL_DENY: u8 = 1;
const ACL_LAST: u8 = 2;

/// `struct acl_table`, `struct acl_entry`.
pub(crate) type TableValue = [u8; 32];
pub(crate) type EntryValue = [u8; 32];

/// The ACL as the program's maps hold it.
pub(crate) struct Loaded {
    /// `acl_tables_used`, `acl_longest`, `acl_default_deny`, `acl_reach_on`.
    pub tables_used: u32,
    pub longest: u32,
    pub default_deny: u32,
    pub reach_on: u32,
    pub tables: Vec<TableValue>,
    /// Every table's slots, one after the other: the index in `entries` of the list.
    pub slots: Vec<u32>,
    pub entries: Vec<EntryValue>,
    /// 1,024 words (one bit a /16), or none.
    pub reach: Vec<u64>,
}

/// Lays the tables out for the maps; an error if the program could not walk them (more
/// tables than it is built for).
pub(crate) fn lay_out(acl: &AclTables4) -> io::Result<Loaded> {
    let unfit = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the XDP engine cannot run this uplink ACL: {what}"),
        )
    };
    if acl.tables.len() > ACL_TABLES {
        return Err(unfit(format!(
            "{} IPv4 tables, it walks {ACL_TABLES}",
            acl.tables.len()
        )));
    }
    if !acl.reach.is_empty() && acl.reach.len() != 1 << 10 {
        return Err(unfit(format!("{} words of /16 reach", acl.reach.len())));
    }
    let index = |n: usize| u32::try_from(n).map_err(|_| unfit("too many rules".into()));
    let mut l = Loaded {
        tables_used: index(acl.tables.len())?,
        longest: index(acl.longest())?,
        default_deny: u32::from(acl.default == AclAction::Deny),
        reach_on: u32::from(!acl.reach.is_empty()),
        tables: Vec::new(),
        slots: Vec::new(),
        entries: Vec::new(),
        reach: acl.reach.clone(),
    };
    for t in &acl.tables {
        let mut v = [0u8; 32];
        v[0..8].copy_from_slice(&t.meta_mask.to_ne_bytes());
        let words = [
            t.min,
            t.src_mask,
            t.dst_mask,
            t.shift,
            index(l.slots.len())?,
            index(t.slots.len())?,
        ];
        for (i, w) in words.iter().enumerate() {
            v[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_ne_bytes());
        }
        l.tables.push(v);
        let base = index(l.entries.len())?;
        for &s in &t.slots {
            l.slots.push(base + s);
        }
        for e in &t.entries {
            let mut v = [0u8; 32];
            let words = [e.src_net, e.src_mask, e.dst_net, e.dst_mask, e.idx];
            for (i, w) in words.iter().enumerate() {
                v[4 * i..4 + 4 * i].copy_from_slice(&w.to_ne_bytes());
            }
            let halves = [e.sport_lo, e.sport_span, e.dport_lo, e.dport_span];
            for (i, h) in halves.iter().enumerate() {
                v[20 + 2 * i..22 + 2 * i].copy_from_slice(&h.to_ne_bytes());
            }
            v[28] = e.proto;
            v[29] = e.proto_mask;
            v[30] = if e.deny { ACL_DENY } else { 0 } | if e.last { ACL_LAST } else { 0 };
            l.entries.push(v);
        }
    }
    Ok(l)
}
