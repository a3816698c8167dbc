//! The agent's state as records for a store (seed 003, #29): what resumes every session
//! without the SMF after a restart. Sans-IO like the rest of the agent: once the driver calls
//! [`Agent::track_changes`], each procedure marks the sessions and associations it changed,
//! the driver takes their records with [`Agent::take_changes`] (one record per key however
//! often it changed in between) and writes them, and [`Agent::restore`] reads them back
//! before the first datagram.
//!
//! Records are the `upf_rules` types in postcard (a compact binary serde format) after a
//! format octet ([`FORMAT`]). JSON, their first format, took ~12 µs to read a session's rules
//! back, at ~4.6 KB; postcard ~2 µs, at ~420 octets (`cargo bench -p upf-n4 --bench agent --
//! records`). Postcard is not self-describing: a change to a rule type changes the layout,
//! which the committed seed of each format catches (`records_of_both_formats_restore_alike`
//! in tests/persist.rs); the format octet is then raised and the old layout still read. JSON records (first octet `{` or `[`, no format octet) are still
//! read, so that a store written before is restored after the upgrade. What is only
//! meaningful in this process is written as wall-clock time: a URR's Monitoring Time as NTP
//! seconds.

use crate::agent::{Agent, Association, CpPeer};
use crate::session::SessionCtx;
use compact_str::CompactString;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use upf_pfcp::ie::NodeId;
use upf_rules::{Datapath, Seid, Session, Teid, UrrId, Volume};

/// What changed since the last [`Agent::take_changes`]: a record to write, or `None` for a
/// key to delete.
#[derive(Debug, Default)]
pub struct Changes {
    /// By the peer's Node ID ([`node_key`]).
    pub associations: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// By our SEID.
    pub sessions: Vec<(u64, Option<Vec<u8>>)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.associations.is_empty() && self.sessions.is_empty()
    }
}

/// What [`Agent::restore`] brought back.
#[derive(Debug, Default)]
pub struct Restored {
    pub associations: usize,
    pub sessions: usize,
    /// Records that could not be restored: the key and why. Their sessions are lost (and
    /// deleted from the store by the next [`Agent::take_changes`]).
    pub failed: Vec<(String, String)>,
}

/// The keys changed since they were last taken.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    sessions: HashSet<Seid>,
    associations: HashSet<NodeId>,
}

/// The store's key of an association: its Node ID, as JSON (an FQDN that reads as an
/// address stays apart from the address).
pub fn node_key(node: &NodeId) -> Vec<u8> {
    serde_json::to_vec(node).unwrap_or_default()
}

/// The format octet that starts every record this build writes: postcard.
pub const FORMAT: u8 = 2;

/// `v` as a record: [`FORMAT`], then postcard.
fn encode<T: Serialize + ?Sized>(v: &T) -> Option<Vec<u8>> {
    postcard::to_extend(v, vec![FORMAT]).ok()
}

/// A record read back, in the format its first octet names.
fn decode<T: DeserializeOwned>(record: &[u8]) -> Result<T, String> {
    match record.first() {
        Some(&FORMAT) => postcard::from_bytes(&record[1..]).map_err(|e| e.to_string()),
        Some(b'{' | b'[') => from_json(record),
        Some(f) => Err(format!(
            "record format {f} is unknown to this upf (a newer one's?)"
        )),
        None => Err("an empty record".into()),
    }
}

/// A record of the first format (JSON). A PDI's and a forwarding's rarer fields (network
/// instance, ...) were then written among its own; they are moved into `extra`, where the
/// types now hold them.
fn from_json<T: DeserializeOwned>(record: &[u8]) -> Result<T, String> {
    use serde_json::{Map, Value};
    fn nest(v: Option<&mut Value>, fields: &[&str]) {
        let Some(m) = v.and_then(Value::as_object_mut) else {
            return;
        };
        let extra: Map<String, Value> = fields
            .iter()
            .filter_map(|&f| Some((f.to_string(), m.remove(f)?)))
            .collect();
        m.insert("extra".into(), Value::Object(extra));
    }
    let mut v: Value = serde_json::from_slice(record).map_err(|e| e.to_string())?;
    if let Some(Value::Array(pdrs)) = v.pointer_mut("/rules/pdrs") {
        for p in pdrs {
            let fields = ["network_instance", "application_id", "interface_type"];
            nest(p.get_mut("pdi"), &fields);
        }
    }
    if let Some(Value::Array(fars)) = v.pointer_mut("/rules/fars") {
        for f in fars {
            let fields = [
                "network_instance",
                "forwarding_policy",
                "redirect",
                "interface_type",
            ];
            nest(f.get_mut("forwarding"), &fields);
        }
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// A session read back, waiting for its install.
struct Prepared {
    ctx: SessionCtx,
    /// The correlation ids whose aggregates it named (for `Aggregates::settle`).
    touched: Vec<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct AssociationRecord {
    node: NodeId,
    addr: SocketAddr,
    /// The peer's Recovery Time Stamp: a different one after our restart means it restarted
    /// too, and its sessions go (TS 23.527).
    recovery: u32,
}

/// Written with the rules borrowed (`&Session`: no copy of them), read back owned.
#[derive(Debug, Serialize, Deserialize)]
struct SessionRecord<R = Session> {
    cp_node: NodeId,
    /// Where its requests came from and its reports go.
    cp_addr: SocketAddr,
    teids: Vec<(Option<u8>, u32)>,
    ue_v4: Option<Ipv4Addr>,
    ue_v6: Option<(Ipv6Addr, u8)>,
    ue_instance: Option<CompactString>,
    ur_seqn: Vec<(u32, u32)>,
    csids: Vec<u16>,
    /// Each URR's Monitoring Time, NTP seconds: the rules hold it as an instant of this
    /// process.
    monitoring_times: Vec<(u32, u32)>,
    rules: R,
}

impl<D: Datapath> Agent<D> {
    /// From now on, procedures record what they change for [`Agent::take_changes`].
    pub fn track_changes(&mut self) {
        self.dirty.get_or_insert_with(Default::default);
    }

    pub(crate) fn session_changed(&mut self, seid: Seid) {
        if let Some(d) = &mut self.dirty {
            d.sessions.insert(seid);
        }
    }

    pub(crate) fn association_changed(&mut self, node: &NodeId) {
        if let Some(d) = &mut self.dirty {
            d.associations.insert(node.clone());
        }
    }

    /// The records of what changed since the last call (none unless tracking).
    pub fn take_changes(&mut self) -> Changes {
        let Some(d) = self
            .dirty
            .as_mut()
            .filter(|d| !d.sessions.is_empty() || !d.associations.is_empty())
        else {
            return Changes::default();
        };
        let d = std::mem::take(d);
        let associations = d
            .associations
            .into_iter()
            .map(|n| {
                let rec = self.assocs.get(&n).and_then(|a| {
                    encode(&AssociationRecord {
                        node: n.clone(),
                        addr: a.addr,
                        recovery: a.recovery,
                    })
                });
                (node_key(&n), rec)
            })
            .collect();
        let sessions = d
            .sessions
            .into_iter()
            .map(|s| {
                let rec = self.sessions.get(&s).and_then(|c| self.session_record(c));
                (s.0, rec)
            })
            .collect();
        Changes {
            associations,
            sessions,
        }
    }

    fn session_record(&self, c: &SessionCtx) -> Option<Vec<u8>> {
        let monitoring_times = c
            .rules
            .urrs
            .iter()
            .filter_map(|u| {
                let t = u.extra.as_ref()?.monitoring_time?;
                Some((u.id.0, self.ntp(t)))
            })
            .collect();
        encode(&SessionRecord {
            cp_node: c.cp.node.clone(),
            cp_addr: c.cp.addr,
            teids: c.teids.iter().map(|&(ch, t)| (ch, t.0)).collect(),
            ue_v4: c.ue_v4,
            ue_v6: c.ue_v6,
            ue_instance: c.ue_instance.clone(),
            ur_seqn: c.ur_seqn.iter().map(|&(u, n)| (u.0, n)).collect(),
            csids: c.csids.to_vec(),
            monitoring_times,
            rules: &*c.rules,
        })
    }

    /// Brings back the state a store held, before any datagram: our Recovery Time Stamp
    /// (so that the SMF sees no restart), the associations and every session, installed in
    /// the data path. A session whose record does not read back, whose association is
    /// gone, or whose allocations or install fail is left out and listed in `failed`.
    pub fn restore(
        &mut self,
        now: Instant,
        recovery: u32,
        associations: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        sessions: impl IntoIterator<Item = (u64, Vec<u8>)>,
    ) -> Restored {
        self.recovery = recovery;
        let mut out = Restored::default();
        for (key, bytes) in associations {
            match decode::<AssociationRecord>(&bytes) {
                Ok(r) => {
                    self.restore_association(now, r);
                    out.associations += 1;
                }
                Err(e) => {
                    out.failed
                        .push((String::from_utf8_lossy(&key).into_owned(), e));
                    self.key_lost_association(&key);
                }
            }
        }
        // Every session made ready first (read, its allocations taken), then all installed
        // in one go: a data path on threads overlaps the installs.
        let mut ready = Vec::new();
        for (seid, bytes) in sessions {
            let r =
                decode::<SessionRecord>(&bytes).and_then(|r| self.prepare_session(Seid(seid), r));
            match r {
                Ok(p) => ready.push(p),
                Err(why) => self.session_lost(&mut out, Seid(seid), why),
            }
        }
        let rules = ready.iter().map(|p| p.ctx.rules.clone()).collect();
        let results = self.dp.install_new(now, rules);
        // The aggregates of the sessions installed are counted before those of the failed
        // ones are let go: a name two sessions share stays while one of them holds it.
        let (ok, failed): (Vec<_>, Vec<_>) =
            ready.into_iter().zip(results).partition(|(_, r)| r.is_ok());
        for (p, _) in ok {
            self.aggregates
                .settle(&p.ctx.cp.node, &p.touched, None, Some(&p.ctx.rules));
            self.admit(Box::new(p.ctx));
            out.sessions += 1;
        }
        for (p, r) in failed {
            self.aggregates
                .settle(&p.ctx.cp.node, &p.touched, None, None);
            self.unreserve_held(&p.ctx);
            let why = r.err().map_or_else(String::new, |e| e.to_string());
            let seid = p.ctx.rules.seid;
            self.session_lost(&mut out, seid, format!("the data path refused it: {why}"));
        }
        out
    }

    /// A mirror's session deleted or replaced by the instance that serves its shard (#29's
    /// hot standby): removed here, telling nobody, its allocations free at once. A record
    /// of it that follows is restored as any ([`Agent::restore`]).
    pub fn forget_session(&mut self, now: Instant, seid: Seid) {
        self.take_session(now, seid, false);
    }

    /// A mirror's association the serving instance released: removed here, telling nobody.
    pub fn forget_association(&mut self, key: &[u8]) {
        if let Ok(n) = serde_json::from_slice::<NodeId>(key) {
            self.assocs.remove(&n);
        }
    }

    /// An association record that does not read back: deleted from the store, as the
    /// sessions that needed it will be.
    fn key_lost_association(&mut self, key: &[u8]) {
        if let Ok(n) = serde_json::from_slice::<NodeId>(key) {
            self.association_changed(&n);
        }
    }

    fn restore_association(&mut self, now: Instant, r: AssociationRecord) {
        let node = r.node;
        self.assocs.insert(
            node.clone(),
            Association {
                addr: r.addr,
                cp: Arc::new(CpPeer { node, addr: r.addr }),
                recovery: r.recovery,
                next_heartbeat: now + self.cfg.heartbeat_interval,
                heartbeat_pending: false,
                sessions: 0,
            },
        );
        // Associated already: an SMF we set up ourselves is not asked again.
        if let Some(e) = self.setup_due.iter_mut().find(|(a, _)| *a == r.addr) {
            e.1 = None;
        }
    }

    /// A record read back as a session ready to install: its rules shared again, its
    /// allocations taken, its aggregates named.
    fn prepare_session(&mut self, seid: Seid, r: SessionRecord) -> Result<Prepared, String> {
        let node = r.cp_node;
        let Some(assoc) = self.assocs.get(&node) else {
            return Err(format!("its association ({node}) is not in the store"));
        };
        if self.sessions.contains_key(&seid) || r.rules.seid != seid {
            return Err("a second record of its SEID".into());
        }
        let cp = if assoc.cp.addr == r.cp_addr {
            assoc.cp.clone()
        } else {
            Arc::new(CpPeer {
                node: node.clone(),
                addr: r.cp_addr,
            })
        };
        let mut s = r.rules;
        for p in &mut s.pdrs {
            p.pdi.sdf_filters = self.sdf_filters.intern(&p.pdi.sdf_filters);
            self.pdi_extras.share(&mut p.pdi.extra);
        }
        for f in &mut s.fars {
            if let Some(fw) = f.forwarding.as_mut() {
                self.forwarding_extras.share(&mut fw.extra);
            }
        }
        for (urr, ntp) in r.monitoring_times {
            let at = self.instant(ntp);
            if let Some(u) = s.urr_mut(UrrId(urr)) {
                u.extra_mut().monitoring_time = Some(at);
            }
        }
        s.validate().map_err(|e| format!("{e:?}"))?;
        let mut ctx = SessionCtx {
            rules: Arc::new(Session::new(seid, s.cp_seid, s.cp_addr)),
            cp,
            teids: r.teids.iter().map(|&(ch, t)| (ch, Teid(t))).collect(),
            ue_v4: r.ue_v4,
            ue_v6: r.ue_v6,
            ue_instance: r.ue_instance,
            ur_seqn: r.ur_seqn.iter().map(|&(u, n)| (UrrId(u), n)).collect(),
            csids: r.csids.into(),
        };
        self.reserve_held(&ctx)?;
        let touched = self.aggregates.attach(&node, &mut s);
        ctx.rules = Arc::new(s);
        Ok(Prepared { ctx, touched })
    }

    /// A session not restored: said, and deleted from the store.
    fn session_lost(&mut self, out: &mut Restored, seid: Seid, why: String) {
        out.failed.push((format!("session {:#x}", seid.0), why));
        self.session_changed(seid);
    }

    /// Takes the TEIDs and UE addresses a restored session held, all or none.
    fn reserve_held(&mut self, ctx: &SessionCtx) -> Result<(), String> {
        let ni = ctx.ue_instance.as_deref();
        let ues = ctx
            .ue_v4
            .map(Into::into)
            .into_iter()
            .chain(ctx.ue_v6.map(|(a, _)| a.into()));
        let mut teids = Vec::new();
        let mut taken = Vec::new();
        let mut result = Ok(());
        for &(_, t) in &ctx.teids {
            if self.teids.reserve(t).is_err() {
                result = Err(format!("TEID {:#x} is out of range or held twice", t.0));
                break;
            }
            teids.push(t);
        }
        if result.is_ok() {
            for a in ues {
                if self.ue_ips.reserve(a, ni).is_err() {
                    result = Err(format!("UE address {a} is held twice"));
                    break;
                }
                taken.push(a);
            }
        }
        if result.is_err() {
            for t in teids {
                self.teids.unwind(t);
            }
            for a in taken {
                self.ue_ips.free(a, ni);
            }
        }
        result
    }

    /// Returns them again; nobody was told of them, so TEIDs are not held off.
    fn unreserve_held(&mut self, ctx: &SessionCtx) {
        for &(_, t) in &ctx.teids {
            self.teids.unwind(t);
        }
        let ni = ctx.ue_instance.as_deref();
        for a in ctx
            .ue_v4
            .map(Into::into)
            .into_iter()
            .chain(ctx.ue_v6.map(|(a, _)| a.into()))
        {
            self.ue_ips.free(a, ni);
        }
    }
}

/// A session's usage checkpoint as stored (a tuple a URR, ~20 octets each): the URR,
/// its UR-SEQN when the usage was read (the number its next report would take), and the
/// usage since its last report, uplink then downlink octets and packets.
type UsageRow = (u32, u32, u64, u64, u64, u64);

impl<D: Datapath> Agent<D> {
    /// The usage checkpoint record of session `seid`: `usage` (each URR's, since its last
    /// report, as the data path measured it now) with each URR's UR-SEQN now. `None` for a
    /// session no longer held.
    pub fn usage_record(&self, seid: Seid, usage: &[(UrrId, Volume)]) -> Option<Vec<u8>> {
        let c = self.sessions.get(&seid)?;
        let rows: Vec<UsageRow> = usage
            .iter()
            .map(|(u, v)| {
                let (ul, dl) = (v.uplink_bytes, v.downlink_bytes);
                let (ulp, dlp) = (v.uplink_packets, v.downlink_packets);
                (u.0, next_seqn(c, *u), ul, ulp, dl, dlp)
            })
            .collect();
        encode(&rows)
    }

    /// What a usage checkpoint of session `seid` holds that no report has carried since it
    /// was read: the usage of each URR whose UR-SEQN in it is the one the session (as
    /// restored) would give its next report. A URR reported after the checkpoint has a
    /// later one: its checkpoint is dropped (usage under-reported, never counted twice).
    /// Empty for a session not held or a record that does not read back.
    pub fn checkpointed_usage(&self, seid: Seid, record: &[u8]) -> Vec<(UrrId, Volume)> {
        let (Some(c), Ok(rows)) = (self.sessions.get(&seid), decode::<Vec<UsageRow>>(record))
        else {
            return Vec::new();
        };
        rows.into_iter()
            .filter(|&(u, n, ..)| n == next_seqn(c, UrrId(u)) && c.rules.urr(UrrId(u)).is_some())
            .map(|(u, _, ulb, ulp, dlb, dlp)| {
                let v = Volume {
                    total_bytes: ulb.saturating_add(dlb),
                    uplink_bytes: ulb,
                    downlink_bytes: dlb,
                    total_packets: ulp.saturating_add(dlp),
                    uplink_packets: ulp,
                    downlink_packets: dlp,
                };
                (UrrId(u), v)
            })
            .filter(|(_, v)| v.total_packets > 0)
            .collect()
    }
}

/// The UR-SEQN URR `u`'s next report takes (`report.rs`: 0 before its first).
fn next_seqn(c: &SessionCtx, u: UrrId) -> u32 {
    c.ur_seqn
        .iter()
        .find(|(id, _)| *id == u)
        .map_or(0, |&(_, n)| n)
}
