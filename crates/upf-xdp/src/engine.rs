//! The engine: the program loaded with aya, its maps filled from compiled sessions, its
//! per-CPU counters summed on read.

use crate::acl;
use crate::compile::{
    compile, Action, CAddr, CAddr6, CBucket, CEnd6, CPdr, CSdf6, CSide, Compiled, Hops, Ipv6Locals,
    NextHop, Punt, MAX_PDRS, MAX_PDR_MBRS, MAX_ROUTES, MAX_SDF, MAX_TEIDS, MAX_UES, QOS_BUCKETS,
};
use crate::keys::{Keys, SessionValue, SESSION_LEN};
use crate::{Reason, Unrouted, URR_SLOTS};
use aya::maps::{
    lpm_trie, Array, DevMap, HashMap as BpfHash, LpmTrie, MapData, PerCpuArray, PerCpuValues,
    ProgramArray, RingBuf,
};
use aya::programs::{ProgramFd, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::Acl;
use upf_io::bpf;
use upf_io::link::Link;
use upf_io::Port;
use upf_rules::{
    Carried, MbrBacklog, QerId, QuotaUse, Seid, Session, UrrId, UsageTrigger, Volume, VolumeLimit,
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/engine.bpf.o"));

const PROGRAM: &str = "xdp_engine";
/// The program for IPv6 inner packets, tail-called by `PROGRAM` (`engine6`).
const PROGRAM6: &str = "xdp_engine6";
/// `struct pdr` and `struct session` of bpf/engine.bpf.c.
const PDR_LEN: usize = 208;
/// Where a PDR's Framed Routes start in `struct pdr`.
const ROUTES_AT: usize = 176;
const SDF_LEN: usize = 32;
/// `struct shape` and `struct session`.
const SHAPE_LEN: usize = 8 + MAX_PDRS * PDR_LEN;
type ShapeValue = [u8; SHAPE_LEN];
/// `struct sdf6` and `struct shape6` (each PDR's SDF filters for IPv6 packets).
const SDF6_LEN: usize = 96;
const SHAPE6_LEN: usize = MAX_PDRS * MAX_SDF * SDF6_LEN;
type Shape6Value = [u8; SHAPE6_LEN];

/// A PDR list as the program holds it: `struct shape`, and the `struct shape6` of its SDF
/// filters when an IPv6 packet can reach a PDR with filters (else such a packet is punted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    pdrs: ShapeValue,
    v6: Option<Box<Shape6Value>>,
}
const _: () = assert!(SESSION_LEN == 16 + 8 * MAX_PDRS);
/// IPv6 tunnel peers of one session (`struct peers6`: one cache line).
pub const V6_PEERS: usize = 4;
/// A session's IPv6 tunnel peers by their index in `struct peers6`.
type Peers6 = [Option<Ipv6Addr>; V6_PEERS];
/// Distinct PDR lists (shapes) the engine holds at most, and per session it is sized for.
const MAX_SHAPES: u32 = 16_384;
/// `struct usage`: uplink octets and packets, downlink octets and packets.
type UsageValue = [u64; 4];
/// `struct qos`: the spin lock and its padding, then per bucket cost, depth, backlog, last,
/// then per URR slot `struct quota` (limits, used, has | exhausted << 32, seen, fired |
/// qfired << 32).
const QUOTAS_AT: usize = 1 + 4 * QOS_BUCKETS;
const QUOTA_LEN: usize = 11;
/// Where `seen` and `fired | qfired << 32` are in a `struct quota`.
const SEEN_AT: usize = 7;
const FIRED_AT: usize = 10;
/// `struct arm`: the threshold's levels of `seen`, has | gen << 32.
type ArmValue = [u64; 4];
/// `struct arm`'s `has` bit: the quota's exhaustion is reported.
const A_VOLQU: u64 = 8;
/// Of each URR slot's `struct quota`: `seen`, `fired`, `qfired`.
type Raised = [([u64; 3], u32, u32); URR_SLOTS];
type QosValue = [u64; QUOTAS_AT + QUOTA_LEN * URR_SLOTS];
/// A URR's Volume Quota.
type Quota = (UrrId, VolumeLimit);
/// `struct clock`: fixed, ns.
type ClockValue = [u64; 2];
/// BPF_F_LOCK: map reads and writes of `struct qos` under its spin lock.
const BPF_F_LOCK: u64 = 4;
/// Counter indices of `stats` after the drop reasons.
#[allow(clippy::cast_possible_truncation)] // 6 reasons
const S_PUNTED: u32 = Reason::ALL.len() as u32;
const S_FORWARDED: u32 = S_PUNTED + 1;
/// The first of the `Unrouted` counters.
const S_UNROUTED: u32 = S_FORWARDED + 1;
/// Reports raised that the ring buffer had no room for.
#[allow(clippy::cast_possible_truncation)] // 11 answers
const S_CROSSINGS_LOST: u32 = S_UNROUTED + Unrouted::ALL.len() as u32;

/// What each URR of a session counted.
pub type Usage = Vec<(UrrId, Volume)>;

/// A report the program raised for a URR and the caller is to make: its Volume Threshold
/// reached (`VOLTH`) and/or its Volume Quota exhausted (`VOLQU`). It is raised again (a
/// `VOLTH` at the next threshold) only once the caller has re-armed the URR
/// ([`Engine::rearm`]), as it does after any report of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub seid: Seid,
    pub urr: UrrId,
    pub trigger: UsageTrigger,
}

/// How long the slot of a removed session stays unused: far longer than a program runs, so
/// a packet found by the session's key just before its removal is never counted for another.
pub const SLOT_QUARANTINE: Duration = Duration::from_millis(100);

/// What the engine is loaded with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Sessions the maps hold; one more is refused ([`InstallError::Full`]).
    pub sessions: u32,
    /// Our N3 GTP-U address: uplink G-PDUs are taken at it, tunnels leave from it.
    pub n3: Ipv4Addr,
    /// Our N9 GTP-U address (`PipelineConfig::n9`; N3's when N9 has none of its own):
    /// tunnels on N9 leave from it, by N3's interface.
    pub n9: Ipv4Addr,
    /// Our N3 IPv6 GTP-U address (`PipelineConfig::n3.v6`): G-PDUs in IPv6 are taken at it,
    /// IPv6 tunnels leave from it. None: both are the workers'.
    pub n3_v6: Option<Ipv6Addr>,
    /// Our N9 IPv6 GTP-U address (`PipelineConfig::n9.v6`): IPv6 tunnels on N9 leave from
    /// it. None: they are the workers'.
    pub n9_v6: Option<Ipv6Addr>,
    /// TTL of the outer headers written (`PipelineConfig::outer_ttl`).
    pub outer_ttl: u8,
    /// `None`: forwarded packets leave by the DEVMAP to their port's interface with the
    /// Ethernet addresses of `bpf_fib_lookup`. `Some`: every forwarded packet gets XDP_TX with
    /// these fixed addresses, for BPF_PROG_TEST_RUN, which cannot redirect to a device (the
    /// differential test compares output bytes with the reference's independently of the
    /// host's routes).
    pub hops: Option<Hops>,
    /// The uplink ACL (`PipelineConfig::uplink_acl`): the program judges by the same tables.
    pub acl: Arc<Acl>,
}

/// Why a session was not installed (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("punted: {0}")]
    Punt(#[from] Punt),
    #[error("the XDP engine holds its {0} sessions")]
    Full(u32),
    #[error("the XDP engine holds its {0} distinct PDR lists")]
    Shapes(u32),
    #[error("{0} belongs to another session")]
    Conflict(String),
    #[error(transparent)]
    Map(#[from] io::Error),
}

/// The program's counters, summed over the CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    pub dropped: Vec<(Reason, u64)>,
    /// All punts, those of `unrouted` included.
    pub punted: u64,
    /// Punted for want of a next hop, by the FIB's answer.
    pub unrouted: Vec<(Unrouted, u64)>,
    pub forwarded: u64,
    /// Reports raised that the ring buffer had no room for (found by
    /// [`Engine::missed_crossings`]).
    pub crossings_lost: u64,
}

/// A session whose keys are out of the maps, its counters not read yet ([`Engine::detach`]).
#[derive(Debug)]
pub struct Detached(Seid, Held);

impl Detached {
    pub fn seid(&self) -> Seid {
        self.0
    }
}

/// One of a session's MBR buckets as the program left it: `backlog` ticks still to drain
/// at `last`, on the engine's clock ([`Engine::clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    pub qer: QerId,
    pub uplink: bool,
    pub backlog: u64,
    pub last: u64,
}

/// A session's `struct qos` as the program left it: its MBR buckets, and the use of its
/// URRs' Volume Quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosState {
    pub buckets: Vec<BucketState>,
    pub quotas: Vec<QuotaUse>,
}

/// Where a session is in the maps.
#[derive(Debug)]
struct Held {
    slot: u32,
    /// The shape of each key, uplink then downlink.
    shapes: Vec<u32>,
    teids: Vec<u32>,
    ues: Vec<Ipv4Addr>,
    /// The /64 of its UE IPv6 prefix.
    ue6: Option<Ipv6Addr>,
    routes: Vec<Route>,
    /// URR counter slots: which URR each counts.
    urrs: [Option<UrrId>; URR_SLOTS],
    /// The MBR buckets, in `struct qos` order.
    buckets: Vec<CBucket>,
    /// The Volume Quotas of its URRs.
    quotas: Vec<Quota>,
    /// Per URR slot: the Volume Threshold VOLTH reports, whether VOLQU reports the quota, the
    /// generation of its `struct arm`, the `seen` of its last report and what was counted
    /// elsewhere since.
    reports: [Reports; URR_SLOTS],
    /// Its IPv6 tunnel peers (`struct peers6`).
    peers6: Peers6,
}

/// What a URR slot reports from the program, and its arming (`struct arm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Reports {
    threshold: Option<VolumeLimit>,
    volqu: bool,
    gen: u32,
    base: [u64; 3],
    /// Octets (total, uplink, downlink) the URR measured in another engine since its last
    /// report ([`Engine::credit`]).
    credit: [u64; 3],
}

impl Reports {
    fn any(&self) -> bool {
        self.threshold.is_some() || self.volqu
    }

    /// `struct arm`.
    fn arm(&self) -> ArmValue {
        let mut v = [0u64; 4];
        if !self.any() {
            return v;
        }
        let mut has = if self.volqu { A_VOLQU } else { 0 };
        if let Some(t) = self.threshold {
            for (k, l) in [t.total, t.uplink, t.downlink].into_iter().enumerate() {
                if let Some(l) = l {
                    v[k] = self.base[k]
                        .saturating_add(l)
                        .saturating_sub(self.credit[k]);
                    has |= 1 << k;
                }
            }
        }
        v[3] = has | u64::from(self.gen) << 32;
        v
    }
}

/// The ring buffer of reports raised (`crossings`).
struct Ring(RingBuf<MapData>);

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ring")
    }
}

/// The XDP engine: its program and maps, and the sessions it holds.
#[derive(Debug)]
pub struct Engine {
    ebpf: Ebpf,
    cfg: Config,
    held: HashMap<Seid, Held>,
    teids: HashMap<u32, Seid>,
    ues: HashMap<Ipv4Addr, Seid>,
    ue6s: HashMap<Ipv6Addr, Seid>,
    routes: HashMap<Route, Seid>,
    /// Session slots (their URR counters and `struct qos`).
    slots: Ids,
    /// Where each key's session value is: uplink TEIDs, downlink UE addresses.
    ul: Keys,
    dl: Keys,
    /// The interned shapes: content → (index, keys using it).
    shapes: HashMap<Shape, (u32, u32)>,
    shape_of: HashMap<u32, Shape>,
    shape_ids: Ids,
    cpus: usize,
    /// The time the `clock` map fixes ([`Engine::fix_clock`]), if it does.
    fixed_clock: Option<u64>,
    /// The reports raised, and the session of each slot.
    ring: Ring,
    slot_seid: HashMap<u32, Seid>,
    /// Slots whose `struct arm`s may be set; `crossings_lost` when last looked at.
    armed: std::collections::HashSet<u32>,
    lost: u64,
}

fn map_err(what: &str) -> impl Fn(aya::maps::MapError) -> io::Error + '_ {
    move |e| bpf::error(what, &e)
}

impl Engine {
    /// Loads the program with maps for `cfg.sessions` sessions (root: CAP_BPF).
    pub fn load(cfg: Config) -> io::Result<Self> {
        let n = cfg.sessions.max(1);
        let entries = |per: usize| {
            u32::try_from(per)
                .ok()
                .and_then(|p| n.checked_mul(p))
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too many sessions"))
        };
        let n3 = u32::from_ne_bytes(cfg.n3.octets());
        let ttl = u32::from(cfg.outer_ttl);
        let fixed = u32::from(cfg.hops.is_some());
        // One entry a session in each direct array: a power of two, so that a key's low
        // bits find it (1 Mi at most: 64 MiB an array).
        let direct = n.next_power_of_two().clamp(16, 1 << 20);
        let direct_mask = direct - 1;
        let acl = acl::lay_out(&cfg.acl.tables4())?;
        let at_least_one = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let mut ebpf = EbpfLoader::new()
            .override_global("acl_tables_used", &acl.tables_used, true)
            .override_global("acl_longest", &acl.longest, true)
            .override_global("acl_default_deny", &acl.default_deny, true)
            .override_global("acl_reach_on", &acl.reach_on, true)
            .override_global("acl_judges_v6", &u32::from(cfg.acl.judges_ipv6()), true)
            .map_max_entries("acl_slots", at_least_one(acl.slots.len()))
            .map_max_entries("acl_entries", at_least_one(acl.entries.len()))
            .override_global("n3_addr", &n3, true)
            .override_global("n9_addr", &u32::from_ne_bytes(cfg.n9.octets()), true)
            .override_global("has_n3_addr6", &u32::from(cfg.n3_v6.is_some()), true)
            .override_global(
                "n3_addr6",
                &cfg.n3_v6.unwrap_or(Ipv6Addr::UNSPECIFIED).octets(),
                true,
            )
            .override_global(
                "n9_addr6",
                &cfg.n9_v6.unwrap_or(Ipv6Addr::UNSPECIFIED).octets(),
                true,
            )
            .override_global("outer_ttl", &ttl, true)
            .override_global("fixed_hops", &fixed, true)
            .override_global("direct_mask", &direct_mask, true)
            .map_max_entries("uplink", entries(MAX_TEIDS)?)
            .map_max_entries("downlink", entries(MAX_UES)?)
            .map_max_entries("urrs", entries(URR_SLOTS)?)
            .map_max_entries("qos", n)
            .map_max_entries("peers6", n)
            .map_max_entries("arms", entries(URR_SLOTS)?)
            .map_max_entries("shapes", shape_capacity(n))
            .map_max_entries("shapes6", shape_capacity(n))
            .map_max_entries("downlink6", n)
            .map_max_entries("ue6", n)
            .map_max_entries("uplink_direct", direct)
            .map_max_entries("downlink_direct", direct)
            .map_max_entries("downlink_routes", entries(MAX_UES)?)
            .load(OBJECT)
            .map_err(|e| bpf::error("loading the XDP engine", &e))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| io::Error::other("XDP engine object without its program"))?
            .try_into()
            .map_err(|e| bpf::error(PROGRAM, &e))?;
        prog.load()
            .map_err(|e| bpf::error("BPF_PROG_LOAD (XDP engine)", &e))?;
        load_ipv6(&mut ebpf)?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        fill(&mut ebpf, "acl_tables", &acl.tables)?;
        fill(&mut ebpf, "acl_slots", &acl.slots)?;
        fill(&mut ebpf, "acl_entries", &acl.entries)?;
        fill(&mut ebpf, "acl_reach", &acl.reach)?;
        let ring = ebpf
            .take_map("crossings")
            .ok_or_else(|| io::Error::other("XDP engine object without its crossings map"))?;
        let ring = Ring(RingBuf::try_from(ring).map_err(map_err("crossings ring buffer"))?);
        Ok(Self {
            ebpf,
            cfg,
            held: HashMap::new(),
            teids: HashMap::new(),
            ues: HashMap::new(),
            ue6s: HashMap::new(),
            routes: HashMap::new(),
            slots: Ids::new(n),
            ul: Keys::new("uplink_direct", "uplink", false, direct),
            dl: Keys::new("downlink_direct", "downlink", true, direct),
            shapes: HashMap::new(),
            shape_of: HashMap::new(),
            shape_ids: Ids::new(shape_capacity(n)),
            cpus,
            fixed_clock: None,
            ring,
            slot_seid: HashMap::new(),
            armed: std::collections::HashSet::new(),
            lost: 0,
        })
    }

    /// The loaded program (to attach, or to run with `upf_io::bpf::run`).
    pub fn program(&self) -> io::Result<&Xdp> {
        self.ebpf
            .program(PROGRAM)
            .ok_or_else(|| io::Error::other("no program"))?
            .try_into()
            .map_err(|e| bpf::error(PROGRAM, &e))
    }

    /// Attaches the program to `ifname` (in the caller's network namespace) as the interface
    /// of `port` (N3 or N6): packets arriving there are run, downlink (N3) or uplink (N6)
    /// packets leave by it. `steering`: the AF_XDP steering program of that interface
    /// (`upf_io::af_xdp::XdpInterface::program_fd`, opened with `AttachMode::TailCalled`),
    /// which gets every punted packet unchanged; `None`: punts get XDP_PASS. The program stays
    /// attached while the engine lives. `bpf_fib_lookup` answers only for an interface that
    /// forwards (`net.ipv4.conf.IF.forwarding`): else every packet out of it is punted
    /// (`Unrouted::ForwardingDisabled`).
    pub fn attach(
        &mut self,
        port: Port,
        ifname: &str,
        steering: Option<&ProgramFd>,
        mode: XdpMode,
    ) -> io::Result<()> {
        let slot: u32 = match port {
            Port::N3 => 0,
            Port::N6 => 1,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the XDP engine has no {other:?} port"),
                ))
            }
        };
        let ifindex = Link::by_name(ifname)?.ifindex;
        {
            let mut m: ProgramArray<&mut MapData> =
                ProgramArray::try_from(self.map("punt_to")?).map_err(map_err("punt_to map"))?;
            match steering {
                Some(fd) => m.set(slot, fd, 0).map_err(map_err("punt_to map"))?,
                None => match m.clear_index(&slot).map_err(map_err("punt_to map")) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        {
            let mut m: DevMap<&mut MapData> =
                DevMap::try_from(self.map("egress")?).map_err(map_err("egress map"))?;
            m.set(slot, ifindex, None, 0)
                .map_err(|e| bpf::error("egress map", &e))?;
        }
        {
            let mut m: Array<&mut MapData, u32> =
                Array::try_from(self.map("egress_ifindex")?).map_err(map_err("egress_ifindex"))?;
            m.set(slot, ifindex, 0).map_err(map_err("egress_ifindex"))?;
        }
        {
            let mut m: BpfHash<&mut MapData, u32, u32> =
                BpfHash::try_from(self.map("ingress_port")?).map_err(map_err("ingress_port"))?;
            m.insert(ifindex, slot, 0)
                .map_err(map_err("ingress_port"))?;
        }
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| io::Error::other("no program"))?
            .try_into()
            .map_err(|e| bpf::error(PROGRAM, &e))?;
        prog.attach_to_if_index(ifindex, mode)
            .map_err(|e| bpf::error(&format!("attach the XDP engine to {ifname}"), &e))?;
        Ok(())
    }

    /// Sessions held.
    pub fn sessions(&self) -> usize {
        self.held.len()
    }

    /// Whether [`Engine::install`] would take `s` (its rules, its keys, room in the maps),
    /// without changing anything: only a map write can fail after this says yes.
    pub fn check(&self, s: &Session) -> Result<(), InstallError> {
        self.admit(s).map(drop)
    }

    /// `s` compiled, its URR slots and its keys' shapes, if the engine can take it.
    fn admit(&self, s: &Session) -> Result<Plan, InstallError> {
        let none = NextHop::default();
        let v6 = Ipv6Locals {
            n3: self.cfg.n3_v6.is_some(),
            n9: self.cfg.n9_v6.is_some(),
        };
        let c = compile(s, &self.cfg.hops.unwrap_or(Hops { n3: none, n6: none }), v6)?;
        for (t, _) in &c.uplink {
            if self.teids.get(t).is_some_and(|o| *o != c.seid) {
                return Err(InstallError::Conflict(format!("TEID {t:#x}")));
            }
        }
        for (a, _) in &c.downlink {
            if self.ues.get(a).is_some_and(|o| *o != c.seid) {
                return Err(InstallError::Conflict(format!("UE address {a}")));
            }
        }
        for (a, _) in &c.downlink6 {
            if self.ue6s.get(a).is_some_and(|o| *o != c.seid) {
                return Err(InstallError::Conflict(format!("UE prefix {a}/64")));
            }
        }
        for ((n, l), _) in &c.routes {
            if self.routes.get(&(*n, *l)).is_some_and(|o| *o != c.seid) {
                return Err(InstallError::Conflict(format!("framed route {n}/{l}")));
            }
        }
        if !self.held.contains_key(&c.seid) && !self.slots.has(1) {
            return Err(InstallError::Full(self.cfg.sessions));
        }
        // URR slots: kept for the URRs that stay, free ones (zeroed) for new ones.
        let old = self.held.get(&c.seid).map(|h| h.urrs);
        let mut urrs: [Option<UrrId>; URR_SLOTS] = [None; URR_SLOTS];
        let mut fresh = Vec::new();
        for &id in &c.urrs {
            if let Some(i) = old.and_then(|o| o.iter().position(|u| *u == Some(id))) {
                urrs[i] = Some(id);
            }
        }
        for &id in &c.urrs {
            if !urrs.contains(&Some(id)) {
                let i = urrs
                    .iter()
                    .position(Option::is_none)
                    .ok_or(Punt::TooMany("URRs"))?;
                urrs[i] = Some(id);
                fresh.push(i);
            }
        }
        let old_peers = self
            .held
            .get(&c.seid)
            .map_or([None; V6_PEERS], |h| h.peers6);
        let peers6 = lay_out_peers(&old_peers, &c)?;
        let mut keys = Vec::new();
        for (t, pdrs) in &c.uplink {
            let ue = pdrs.iter().find_map(|p| p.ue.and_then(|u| u.v4));
            keys.push(keyed(Key::Teid(*t), ue, pdrs, &urrs, &peers6)?);
        }
        for (a, pdrs) in &c.downlink {
            keys.push(keyed(Key::Ue(*a), Some(*a), pdrs, &urrs, &peers6)?);
        }
        let ue = c.downlink.first().map(|(a, _)| *a);
        // IPv6 packets look at no IPv4 address (PDR_NEVER does not apply to them).
        for (a, pdrs) in &c.downlink6 {
            keys.push(keyed(Key::Ue6(*a), ue, pdrs, &urrs, &peers6)?);
        }
        for (r, pdrs) in &c.routes {
            keys.push(keyed(Key::Route(*r), ue, pdrs, &urrs, &peers6)?);
        }
        let new: Vec<&Shape> = keys
            .iter()
            .map(|k| &k.shape)
            .filter(|sh| !self.shapes.contains_key(*sh))
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .collect();
        if !self.shape_ids.has(new.len()) {
            return Err(InstallError::Shapes(self.shape_ids.capacity));
        }
        Ok(Plan {
            c,
            urrs,
            fresh,
            keys,
            peers6: (peers6, old_peers),
        })
    }

    /// Keys whose value is in a hash map rather than in their direct entry (another key's,
    /// or waiting for a changed value's quarantine).
    pub fn hashed_keys(&self) -> usize {
        self.ul.hashed() + self.dl.hashed()
    }

    /// Puts changed keys back into their direct entries once their quarantine is over
    /// (also done by every install and removal).
    pub fn settle(&mut self) {
        self.ul.settle(&mut self.ebpf);
        self.dl.settle(&mut self.ebpf);
    }

    /// Distinct PDR lists (shapes) held: sessions of one policy share theirs.
    pub fn shapes(&self) -> usize {
        self.shapes.len()
    }

    /// Whether the engine holds the session `seid`.
    pub fn holds(&self, seid: Seid) -> bool {
        self.held.contains_key(&seid)
    }

    /// Installs `s`, or replaces the session with its SEID (URR counts of URRs it keeps carry
    /// over). On error nothing changed.
    pub fn install(&mut self, s: &Session) -> Result<(), InstallError> {
        self.install_carrying(s, &Carried::default())
    }

    /// [`Engine::install`], the MBR buckets the session did not have here (it enters from
    /// another engine) continuing from `carried.backlogs` (that engine's, read as it left)
    /// at the engine's clock now, the others full; and the quotas it did not have here from
    /// their use in `carried.quotas`, the others unused.
    pub fn install_carrying(&mut self, s: &Session, carried: &Carried) -> Result<(), InstallError> {
        self.settle();
        let Plan {
            c,
            urrs,
            fresh,
            keys,
            peers6,
        } = self.admit(s)?;
        let old = self.held.get(&c.seid).map(|h| {
            (
                h.slot,
                h.urrs,
                h.teids.clone(),
                h.ues.clone(),
                h.routes.clone(),
                h.ue6,
            )
        });
        let (old_buckets, old_quotas) = self
            .held
            .get(&c.seid)
            .map_or_else(Default::default, |h| (h.buckets.clone(), h.quotas.clone()));
        let old_reports = self.held.get(&c.seid).map(|h| h.reports);
        let slot = match &old {
            Some(h) => h.0,
            None => self
                .slots
                .peek()
                .ok_or(InstallError::Full(self.cfg.sessions))?,
        };
        let cpus = self.cpus;
        {
            let mut m: PerCpuArray<&mut MapData, UsageValue> =
                PerCpuArray::try_from(self.map("urrs")?).map_err(map_err("urrs map"))?;
            for &i in &fresh {
                let zero = PerCpuValues::try_from(vec![[0u64; 4]; cpus])?;
                m.set(urr_index(slot, i), zero, 0)
                    .map_err(map_err("zeroing URR counters"))?;
            }
        }
        // The buckets and quotas before the rules that use them; a QER that stays keeps its
        // tokens, a URR whose quota stays the same keeps its use of it.
        let kept = old.is_some();
        self.write_qos(
            slot,
            kept,
            (&c.buckets, &old_buckets, &carried.backlogs),
            &urrs,
            (&c.quotas, &old_quotas, &carried.quotas),
            &fresh,
        )?;
        // A URR that keeps its slot counts toward its threshold from its last report (its
        // `seen` carried above), a new one from now; each arming is a new generation.
        let mut reports = [Reports::default(); URR_SLOTS];
        for (i, id) in urrs.iter().enumerate() {
            let Some(id) = id else { continue };
            let r = &mut reports[i];
            r.threshold = (c.thresholds.iter()).find_map(|(u, t)| (u == id).then_some(*t));
            r.volqu = c.volqu.contains(id);
            let before = old_reports.filter(|_| !fresh.contains(&i)).map(|o| o[i]);
            r.base = before.map_or([0; 3], |o| o.base);
            r.credit = before.map_or([0; 3], |o| o.credit);
            r.gen = before.map_or(0, |o| o.gen).wrapping_add(1).max(1);
        }
        self.write_arms(slot, &reports)?;
        self.write_peers6(slot, peers6)?;
        if let Some((a, _)) = c.downlink6.first() {
            self.set_ue6(slot, *a)?;
        }
        let old_keys: Option<OldKeys> = old.map(|h| (h.2, h.3, h.4, h.5));
        let mut ids = Vec::with_capacity(keys.len());
        for k in &keys {
            match self.intern(&k.shape) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    ids.into_iter().for_each(|id| self.release(id));
                    return Err(e.into());
                }
            }
        }
        if let Err(e) = self.write(&keys, &ids, slot, old_keys.as_ref()) {
            ids.into_iter().for_each(|id| self.release(id));
            return Err(e.into());
        }
        let old_shapes = self
            .held
            .get(&c.seid)
            .map(|h| h.shapes.clone())
            .unwrap_or_default();
        if let Some((teids, ues, routes, ue6)) = &old_keys {
            // Keys the new rules do not have.
            for t in teids
                .iter()
                .filter(|t| !c.uplink.iter().any(|(n, _)| n == *t))
            {
                self.ul.remove(&mut self.ebpf, *t);
            }
            for a in ues
                .iter()
                .filter(|a| !c.downlink.iter().any(|(n, _)| n == *a))
            {
                self.dl.remove(&mut self.ebpf, ue_key(*a));
            }
            for r in routes
                .iter()
                .filter(|r| !c.routes.iter().any(|(n, _)| n == *r))
            {
                self.unroute(*r);
            }
            for a in ue6
                .iter()
                .filter(|a| !c.downlink6.iter().any(|(n, _)| n == *a))
            {
                self.unkey6(*a);
            }
            for t in teids {
                self.teids.remove(t);
            }
            for a in ues {
                self.ues.remove(a);
            }
            if let Some(a) = ue6 {
                self.ue6s.remove(a);
            }
            for r in routes {
                self.routes.remove(r);
            }
        } else {
            self.slots.commit(slot);
        }
        old_shapes.into_iter().for_each(|id| self.release(id));
        let held = Held {
            slot,
            shapes: ids,
            teids: c.uplink.iter().map(|(t, _)| *t).collect(),
            ues: c.downlink.iter().map(|(a, _)| *a).collect(),
            ue6: c.downlink6.first().map(|(a, _)| *a),
            routes: c.routes.iter().map(|(r, _)| *r).collect(),
            urrs,
            buckets: c.buckets.clone(),
            quotas: c.quotas.clone(),
            reports,
            peers6: peers6.0,
        };
        self.slot_seid.insert(slot, c.seid);
        for &t in &held.teids {
            self.teids.insert(t, c.seid);
        }
        for &a in &held.ues {
            self.ues.insert(a, c.seid);
        }
        if let Some(a) = held.ue6 {
            self.ue6s.insert(a, c.seid);
        }
        for &r in &held.routes {
            self.routes.insert(r, c.seid);
        }
        self.held.insert(c.seid, held);
        Ok(())
    }

    /// Writes slot `slot`'s MBR buckets `buckets.0`: with the tokens left in the bucket of
    /// the same QER and direction in `buckets.1` (the slot's buckets before, `kept`: the slot
    /// was the session's), else from its backlog in `buckets.2` at the clock now, else full;
    /// and the quotas `quotas.0` of the URRs in `urrs`' slots: unchanged from `quotas.1`,
    /// with their use so far (UrrState::update: a changed quota is a new grant), else, the
    /// session entering (not `kept`), from their use in `quotas.2` (another engine's), else
    /// unused; exhausted when that reaches
    /// them; and what the URRs kept in their slots (not `fresh`)
    /// counted toward their thresholds. The read and the write each hold the value's lock;
    /// what the program counts between them is not carried.
    fn write_qos(
        &mut self,
        slot: u32,
        kept: bool,
        buckets: (&[CBucket], &[CBucket], &[MbrBacklog]),
        urrs: &[Option<UrrId>; URR_SLOTS],
        quotas: (&[Quota], &[Quota], &[QuotaUse]),
        fresh: &[usize],
    ) -> io::Result<()> {
        let (new, old, carried) = buckets;
        let now = self.clock();
        let mut m: Array<&mut MapData, QosValue> =
            Array::try_from(self.map("qos")?).map_err(map_err("qos map"))?;
        let before = if kept {
            m.get(&slot, BPF_F_LOCK)
                .map_err(map_err("reading MBR buckets"))?
        } else {
            [0u64; QUOTAS_AT + QUOTA_LEN * URR_SLOTS]
        };
        let mut v = [0u64; QUOTAS_AT + QUOTA_LEN * URR_SLOTS];
        for (i, id) in urrs.iter().enumerate() {
            let Some(id) = id else { continue };
            let o = QUOTAS_AT + QUOTA_LEN * i;
            if kept && !fresh.contains(&i) {
                v[o + SEEN_AT..o + SEEN_AT + 3]
                    .copy_from_slice(&before[o + SEEN_AT..o + SEEN_AT + 3]);
            }
            let Some((_, q)) = quotas.0.iter().find(|(u, _)| u == id) else {
                continue;
            };
            let mut has = 0u64;
            for (k, limit) in [q.total, q.uplink, q.downlink].into_iter().enumerate() {
                if let Some(l) = limit {
                    v[o + k] = l;
                    has |= 1 << k;
                }
            }
            // The URR kept its slot (`install`): its use is there.
            if kept && quotas.1.iter().any(|(u, old)| u == id && old == q) {
                v[o + 3..o + 6].copy_from_slice(&before[o + 3..o + 6]);
            } else if let Some(u) = quotas.2.iter().find(|u| u.urr == *id).filter(|_| !kept) {
                v[o + 3..o + 6].copy_from_slice(&[u.total, u.uplink, u.downlink]);
            }
            let used = Volume {
                total_bytes: v[o + 3],
                uplink_bytes: v[o + 4],
                downlink_bytes: v[o + 5],
                ..Volume::default()
            };
            v[o + 6] = has | u64::from(q.reached_by(&used)) << 32;
        }
        for (i, b) in new.iter().take(QOS_BUCKETS).enumerate() {
            let o = 1 + 4 * i;
            v[o] = b.cost;
            v[o + 1] = b.depth;
            if let Some(k) = old
                .iter()
                .position(|x| x.qer == b.qer && x.uplink == b.uplink)
            {
                let p = 1 + 4 * k;
                v[o + 2] = b.carry(&old[k], before[p + 2]);
                v[o + 3] = before[p + 3];
            } else if let Some(c) = carried
                .iter()
                .find(|c| c.qer == b.qer && c.uplink == b.uplink)
            {
                v[o + 2] = c.ticks.min(b.depth);
                v[o + 3] = now;
            }
        }
        m.set(slot, v, BPF_F_LOCK)
            .map_err(map_err("writing MBR buckets"))
    }

    /// The clock of the MBR buckets now: the fixed time ([`Engine::fix_clock`]), else the
    /// program's bpf_ktime_get_ns, CLOCK_MONOTONIC.
    pub fn clock(&self) -> u64 {
        if let Some(ns) = self.fixed_clock {
            return ns;
        }
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
    }

    /// The MBR buckets and quotas of session `seid` as the program left them (empty for a
    /// session not held).
    pub fn qos(&self, seid: Seid) -> io::Result<QosState> {
        match self.held.get(&seid) {
            Some(h) => self.read_qos(h),
            None => Ok(QosState::default()),
        }
    }

    /// [`Engine::qos`] of a detached session: no key finds it any more, so only a packet
    /// being processed as it was detached may still take from them.
    pub fn detached_qos(&self, d: &Detached) -> io::Result<QosState> {
        self.read_qos(&d.1)
    }

    /// Under the value's lock (BPF_F_LOCK on the lookup).
    fn read_qos(&self, h: &Held) -> io::Result<QosState> {
        if h.buckets.is_empty() && h.quotas.is_empty() {
            return Ok(QosState::default());
        }
        let map = self
            .ebpf
            .map("qos")
            .ok_or_else(|| io::Error::other("no qos map"))?;
        let m: Array<&MapData, QosValue> = Array::try_from(map).map_err(map_err("qos map"))?;
        let v = m
            .get(&h.slot, BPF_F_LOCK)
            .map_err(map_err("reading MBR buckets"))?;
        let buckets = (h.buckets.iter().take(QOS_BUCKETS).enumerate())
            .map(|(i, b)| BucketState {
                qer: b.qer,
                uplink: b.uplink,
                backlog: v[1 + 4 * i + 2],
                last: v[1 + 4 * i + 3],
            })
            .collect();
        let quotas = (h.urrs.iter().enumerate())
            .filter_map(|(i, id)| Some((i, (*id)?)))
            .filter(|(_, id)| h.quotas.iter().any(|(u, _)| u == id))
            .map(|(i, urr)| {
                let o = QUOTAS_AT + QUOTA_LEN * i;
                QuotaUse {
                    urr,
                    total: v[o + 3],
                    uplink: v[o + 4],
                    downlink: v[o + 5],
                }
            })
            .collect();
        Ok(QosState { buckets, quotas })
    }

    /// Writes slot `slot`'s `struct peers6`: the new peers (`peers.0`), and where it has none
    /// at an index, the old one's (`peers.1`), for a packet still on its way with the
    /// session's keys before. Nothing when neither has any (IPv4 tunnels only).
    fn write_peers6(&mut self, slot: u32, peers: (Peers6, Peers6)) -> io::Result<()> {
        let (new, old) = peers;
        if new.iter().chain(&old).all(Option::is_none) {
            return Ok(());
        }
        let mut v = [[0u8; 16]; V6_PEERS];
        for (i, a) in v.iter_mut().enumerate() {
            if let Some(p) = new[i].or(old[i]) {
                *a = p.octets();
            }
        }
        let mut m: Array<&mut MapData, [[u8; 16]; V6_PEERS]> =
            Array::try_from(self.map("peers6")?).map_err(map_err("peers6 map"))?;
        m.set(slot, v, 0)
            .map_err(map_err("writing IPv6 tunnel peers"))
    }

    /// Writes slot `slot`'s `struct arm`s (none when it has no reports and had none).
    fn write_arms(&mut self, slot: u32, reports: &[Reports; URR_SLOTS]) -> io::Result<()> {
        let any = reports.iter().any(Reports::any);
        if !any && !self.armed.contains(&slot) {
            return Ok(());
        }
        self.set_arms(slot, reports.iter().map(Reports::arm).enumerate())?;
        if any {
            self.armed.insert(slot);
        } else {
            self.armed.remove(&slot);
        }
        Ok(())
    }

    /// `struct quota` of each URR slot of session slot `slot`: `seen`, and `fired` and
    /// `qfired`.
    fn read_quotas(&self, slot: u32) -> io::Result<Raised> {
        let map = (self.ebpf.map("qos")).ok_or_else(|| io::Error::other("no qos map"))?;
        let m: Array<&MapData, QosValue> = Array::try_from(map).map_err(map_err("qos map"))?;
        let v = m
            .get(&slot, BPF_F_LOCK)
            .map_err(map_err("reading URR quotas"))?;
        let mut out = [([0u64; 3], 0u32, 0u32); URR_SLOTS];
        for (i, q) in out.iter_mut().enumerate() {
            let o = QUOTAS_AT + QUOTA_LEN * i;
            q.0.copy_from_slice(&v[o + SEEN_AT..o + SEEN_AT + 3]);
            #[allow(clippy::cast_possible_truncation)] // two u32 halves
            {
                q.1 = v[o + FIRED_AT] as u32;
                q.2 = (v[o + FIRED_AT] >> 32) as u32;
            }
        }
        Ok(out)
    }

    /// The reports the program raised since the last call, announced on its ring buffer,
    /// that are still to be made (each URR once, its triggers together).
    pub fn crossings(&mut self) -> Vec<Crossing> {
        let mut due: Vec<(u32, usize)> = Vec::new();
        while let Some(item) = self.ring.0.next() {
            if item.len() < 8 {
                continue;
            }
            let slot = u32::from_ne_bytes([item[0], item[1], item[2], item[3]]);
            let urr = u32::from_ne_bytes([item[4], item[5], item[6], item[7]]) as usize;
            if !due.contains(&(slot, urr)) {
                due.push((slot, urr));
            }
        }
        self.raised(&due)
    }

    /// After the ring buffer had no room for some reports raised (`crossings_lost` rose):
    /// every URR of the sessions with reports that has one still to make. Cheap otherwise
    /// (one counter read): call it every tick.
    pub fn missed_crossings(&mut self) -> io::Result<Vec<Crossing>> {
        let map = (self.ebpf.map("stats")).ok_or_else(|| io::Error::other("no stats map"))?;
        let m: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(map_err("stats map"))?;
        let lost: u64 = (m.get(&S_CROSSINGS_LOST, 0))
            .map_err(map_err("reading stats"))?
            .iter()
            .sum();
        if lost == self.lost {
            return Ok(Vec::new());
        }
        self.lost = lost;
        let due: Vec<(u32, usize)> = (self.held.values())
            .flat_map(|h| {
                (0..URR_SLOTS)
                    .filter(|&i| h.reports[i].any())
                    .map(move |i| (h.slot, i))
            })
            .collect();
        Ok(self.raised(&due))
    }

    /// Of the URR slots `due` (session slot, URR index), those whose report the program
    /// raised for their current arming.
    fn raised(&self, due: &[(u32, usize)]) -> Vec<Crossing> {
        let mut out = Vec::new();
        let mut read: Option<(u32, Raised)> = None;
        for &(slot, i) in due {
            let Some(seid) = self.slot_seid.get(&slot) else {
                continue;
            };
            let Some(h) = self.held.get(seid).filter(|h| h.slot == slot) else {
                continue;
            };
            let (Some(urr), Some(r)) = (h.urrs.get(i).copied().flatten(), h.reports.get(i)) else {
                continue;
            };
            if read.as_ref().is_none_or(|(s, _)| *s != slot) {
                match self.read_quotas(slot) {
                    Ok(q) => read = Some((slot, q)),
                    Err(_) => continue,
                }
            }
            let Some((_, q)) = &read else { continue };
            let (_, fired, qfired) = q[i];
            let mut trigger = UsageTrigger::empty();
            if fired == r.gen && r.threshold.is_some() {
                trigger |= UsageTrigger::VOLTH;
            }
            if qfired == r.gen && r.volqu {
                trigger |= UsageTrigger::VOLQU;
            }
            if !trigger.is_empty() {
                out.push(Crossing {
                    seid: *seid,
                    urr,
                    trigger,
                });
            }
        }
        out
    }

    /// Re-arms session `seid`'s URRs `urrs` (all when empty) after a report of them: their
    /// thresholds count from what the program has counted now, and a report is raised
    /// again. Call it once their usage for the report has been read ([`Engine::usage`]).
    pub fn rearm(&mut self, seid: Seid, urrs: &[UrrId]) -> io::Result<()> {
        let Some(h) = self.held.get(&seid) else {
            return Ok(());
        };
        let which: Vec<usize> = (0..URR_SLOTS)
            .filter(|&i| h.reports[i].any())
            .filter(|&i| h.urrs[i].is_some_and(|u| urrs.is_empty() || urrs.contains(&u)))
            .collect();
        if which.is_empty() {
            return Ok(());
        }
        let slot = h.slot;
        let q = self.read_quotas(slot)?;
        let mut arms = Vec::with_capacity(which.len());
        if let Some(h) = self.held.get_mut(&seid) {
            for &i in &which {
                let r = &mut h.reports[i];
                r.base = q[i].0;
                r.credit = [0; 3];
                r.gen = r.gen.wrapping_add(1).max(1);
                arms.push((i, r.arm()));
            }
        }
        self.set_arms(slot, arms)
    }

    /// Writes the `struct arm`s `arms` (URR index, value) of slot `slot`.
    fn set_arms(
        &mut self,
        slot: u32,
        arms: impl IntoIterator<Item = (usize, ArmValue)>,
    ) -> io::Result<()> {
        let mut m: Array<&mut MapData, ArmValue> =
            Array::try_from(self.map("arms")?).map_err(map_err("arms map"))?;
        for (i, v) in arms {
            m.set(urr_index(slot, i), v, 0)
                .map_err(map_err("writing URR arms"))?;
        }
        Ok(())
    }

    /// Whether session `seid` has a Volume Threshold the program reports.
    pub fn has_thresholds(&self, seid: Seid) -> bool {
        (self.held.get(&seid)).is_some_and(|h| h.reports.iter().any(|r| r.threshold.is_some()))
    }

    /// For a session entering the engine: what its URRs measured in another engine since
    /// their last report (`usage`), which their thresholds here count as well.
    pub fn credit(&mut self, seid: Seid, usage: &[(UrrId, Volume)]) -> io::Result<()> {
        let Some(h) = self.held.get_mut(&seid) else {
            return Ok(());
        };
        let slot = h.slot;
        let mut arms = Vec::new();
        for (i, r) in h.reports.iter_mut().enumerate() {
            let Some(id) = h.urrs[i] else { continue };
            let Some((_, v)) = usage.iter().find(|(u, _)| *u == id) else {
                continue;
            };
            if r.threshold.is_some() {
                r.credit = [v.total_bytes, v.uplink_bytes, v.downlink_bytes];
                arms.push((i, r.arm()));
            }
        }
        self.set_arms(slot, arms)
    }

    /// Fixes the clock of the MBR buckets at `ns` (tests: the reference's virtual clock, in
    /// nanoseconds since its epoch); `None`, the kernel's monotonic clock (as loaded).
    pub fn fix_clock(&mut self, ns: Option<u64>) -> io::Result<()> {
        let mut m: Array<&mut MapData, ClockValue> =
            Array::try_from(self.map("clock")?).map_err(map_err("clock map"))?;
        let v = ns.map_or([0, 0], |ns| [1, ns]);
        m.set(0, v, 0).map_err(map_err("writing the clock"))?;
        self.fixed_clock = ns;
        Ok(())
    }

    /// Writes the session values of `keys` (their shapes `ids`, slot `slot`); on an error
    /// removes those it added (`old`: the keys before).
    fn write(
        &mut self,
        keys: &[KeyPlan],
        ids: &[u32],
        slot: u32,
        old: Option<&OldKeys>,
    ) -> io::Result<()> {
        let mut added = Vec::new();
        let mut r = Ok(());
        for (k, &id) in keys.iter().zip(ids) {
            let v = k.session(slot, id);
            let new = match k.key {
                Key::Teid(t) => !old.is_some_and(|o| o.0.contains(&t)),
                Key::Ue(a) => !old.is_some_and(|o| o.1.contains(&a)),
                Key::Route(x) => !old.is_some_and(|o| o.2.contains(&x)),
                Key::Ue6(a) => old.is_none_or(|o| o.3 != Some(a)),
            };
            r = match k.key {
                Key::Teid(t) => self.ul.set(&mut self.ebpf, t, v),
                Key::Ue(a) => self.dl.set(&mut self.ebpf, ue_key(a), v),
                Key::Route(x) => self.route(x, v),
                Key::Ue6(a) => self.key6(a, v),
            };
            if r.is_err() {
                break;
            }
            if new {
                added.push(k.key);
            }
        }
        if r.is_err() {
            for k in added {
                match k {
                    Key::Teid(t) => self.ul.remove(&mut self.ebpf, t),
                    Key::Ue(a) => self.dl.remove(&mut self.ebpf, ue_key(a)),
                    Key::Route(x) => self.unroute(x),
                    Key::Ue6(a) => self.unkey6(a),
                }
            }
        }
        r
    }

    /// Writes Framed Route `r`'s session value.
    fn route(&mut self, (net, len): Route, v: SessionValue) -> io::Result<()> {
        let mut m: LpmTrie<&mut MapData, u32, SessionValue> =
            LpmTrie::try_from(self.map("downlink_routes")?).map_err(map_err("routes map"))?;
        let key = lpm_trie::Key::new(u32::from(len), ue_key(net));
        m.insert(&key, v, 0)
            .map_err(map_err("writing a framed route"))
    }

    /// Takes Framed Route `r` out (best effort: one the kernel no longer has is gone).
    fn unroute(&mut self, (net, len): Route) {
        if let Ok(map) = self.map("downlink_routes") {
            if let Ok(mut m) = LpmTrie::<&mut MapData, u32, SessionValue>::try_from(map) {
                let _ = m.remove(&lpm_trie::Key::new(u32::from(len), ue_key(net)));
            }
        }
    }

    /// Writes the session value of the UE IPv6 /64 `a`.
    fn key6(&mut self, a: Ipv6Addr, v: SessionValue) -> io::Result<()> {
        let mut m: BpfHash<&mut MapData, u64, SessionValue> =
            BpfHash::try_from(self.map("downlink6")?).map_err(map_err("downlink6 map"))?;
        m.insert(ue6_key(a), v, 0)
            .map_err(map_err("writing a UE prefix"))
    }

    /// Takes the UE IPv6 /64 `a` out (best effort).
    fn unkey6(&mut self, a: Ipv6Addr) {
        if let Ok(map) = self.map("downlink6") {
            if let Ok(mut m) = BpfHash::<&mut MapData, u64, SessionValue>::try_from(map) {
                let _ = m.remove(&ue6_key(a));
            }
        }
    }

    /// Writes slot `slot`'s UE IPv6 /64 (before the keys that lead to it).
    fn set_ue6(&mut self, slot: u32, a: Ipv6Addr) -> io::Result<()> {
        let mut m: Array<&mut MapData, u64> =
            Array::try_from(self.map("ue6")?).map_err(map_err("ue6 map"))?;
        m.set(slot, ue6_key(a), 0)
            .map_err(map_err("writing a UE prefix"))
    }

    /// The index of `shape` in the `shapes` map, written there if it is new; one more key
    /// uses it.
    fn intern(&mut self, shape: &Shape) -> io::Result<u32> {
        if let Some((id, refs)) = self.shapes.get_mut(shape) {
            *refs += 1;
            return Ok(*id);
        }
        let id = self
            .shape_ids
            .take()
            .ok_or_else(|| io::Error::other("no free shape (checked before)"))?;
        if let Err(e) = self.write_shape(id, shape) {
            self.shape_ids.give_back(id);
            return Err(e);
        }
        self.shapes.insert(shape.clone(), (id, 1));
        self.shape_of.insert(id, shape.clone());
        Ok(id)
    }

    /// Writes shape `id`: its IPv6 filters first (or none: a former shape's at that index
    /// go), then its PDRs.
    fn write_shape(&mut self, id: u32, shape: &Shape) -> io::Result<()> {
        {
            let mut m: BpfHash<&mut MapData, u32, Shape6Value> =
                BpfHash::try_from(self.map("shapes6")?).map_err(map_err("shapes6 map"))?;
            match &shape.v6 {
                Some(v6) => m.insert(id, **v6, 0).map_err(map_err("shapes6 map"))?,
                None => {
                    let _ = m.remove(&id);
                }
            }
        }
        let mut m: Array<&mut MapData, ShapeValue> =
            Array::try_from(self.map("shapes")?).map_err(map_err("shapes map"))?;
        m.set(id, shape.pdrs, 0).map_err(map_err("shapes map"))
    }

    /// One key less uses shape `id`; with none left its index is free (after a quarantine:
    /// a packet may still be reading it).
    fn release(&mut self, id: u32) {
        let Some(k) = self.shape_of.get(&id).cloned() else {
            return;
        };
        let Some((_, refs)) = self.shapes.get_mut(&k) else {
            return;
        };
        *refs -= 1;
        if *refs == 0 {
            self.shapes.remove(&k);
            self.shape_of.remove(&id);
            self.shape_ids.retire(id);
        }
    }

    /// Removes a session; returns the final usage of its URRs. Its keys go first, then its
    /// counters are read: only a packet the program is processing at that moment (a few
    /// microseconds) may still be counted after the read. Its slot is reused only after
    /// [`SLOT_QUARANTINE`], so that such a packet is never counted for another session.
    pub fn remove(&mut self, seid: Seid) -> io::Result<Vec<(UrrId, Volume)>> {
        self.settle();
        let Some(h) = self.unkey(seid) else {
            return Ok(Vec::new());
        };
        let usage = self.read_usage(&h);
        self.slots.retire(h.slot);
        usage
    }

    /// Removes sessions exactly: their keys, then a grace period (every program that found
    /// one has returned: `membarrier(MEMBARRIER_CMD_GLOBAL)`, an RCU grace period, ~8 ms
    /// here), then their counters. Their final usage, per session.
    pub fn remove_many(&mut self, seids: &[Seid]) -> Vec<(Seid, io::Result<Usage>)> {
        let gone: Vec<Detached> = seids.iter().filter_map(|&s| self.detach(s)).collect();
        self.collect(gone)
    }

    /// The first half of [`Engine::remove_many`]: takes session `seid`'s keys out; its
    /// counters and slot stay until [`Engine::collect`] (so that many detachments share one
    /// grace period).
    pub fn detach(&mut self, seid: Seid) -> Option<Detached> {
        self.unkey(seid).map(|h| Detached(seid, h))
    }

    /// The second half of [`Engine::remove_many`]: one grace period, then the final usage of
    /// each detached session; their slots are free.
    pub fn collect(&mut self, gone: Vec<Detached>) -> Vec<(Seid, io::Result<Usage>)> {
        if gone.is_empty() {
            return Vec::new();
        }
        if rustix::thread::membarrier(rustix::thread::MembarrierCommand::Global).is_err() {
            // Without it (nohz_full CPUs): programs run for microseconds.
            std::thread::sleep(SLOT_QUARANTINE);
        }
        gone.into_iter()
            .map(|Detached(seid, h)| {
                let u = self.read_usage(&h);
                self.slots.give_back(h.slot);
                (seid, u)
            })
            .collect()
    }

    /// Takes session `seid`'s keys out of the maps and the indices (best effort: a key the
    /// kernel no longer has is gone already).
    fn unkey(&mut self, seid: Seid) -> Option<Held> {
        let h = self.held.remove(&seid)?;
        self.slot_seid.remove(&h.slot);
        for &id in &h.shapes {
            self.release(id);
        }
        for t in &h.teids {
            self.ul.remove(&mut self.ebpf, *t);
        }
        for a in &h.ues {
            self.dl.remove(&mut self.ebpf, ue_key(*a));
        }
        for r in &h.routes {
            self.unroute(*r);
        }
        if let Some(a) = h.ue6 {
            self.unkey6(a);
            self.ue6s.remove(&a);
        }
        for t in &h.teids {
            self.teids.remove(t);
        }
        for a in &h.ues {
            self.ues.remove(a);
        }
        for r in &h.routes {
            self.routes.remove(r);
        }
        Some(h)
    }

    /// The usage each URR of a session has counted (per-CPU counters summed); empty for a
    /// session not held.
    pub fn usage(&self, seid: Seid) -> io::Result<Vec<(UrrId, Volume)>> {
        match self.held.get(&seid) {
            Some(h) => self.read_usage(h),
            None => Ok(Vec::new()),
        }
    }

    fn read_usage(&self, h: &Held) -> io::Result<Vec<(UrrId, Volume)>> {
        let map = self
            .ebpf
            .map("urrs")
            .ok_or_else(|| io::Error::other("no urrs map"))?;
        let m: PerCpuArray<&MapData, UsageValue> =
            PerCpuArray::try_from(map).map_err(map_err("urrs map"))?;
        let mut v = Vec::new();
        for (i, id) in h.urrs.iter().enumerate() {
            let Some(id) = id else { continue };
            let per_cpu = m
                .get(&urr_index(h.slot, i), 0)
                .map_err(map_err("reading URR counters"))?;
            let mut vol = Volume::default();
            for c in per_cpu.iter() {
                vol.uplink_bytes += c[0];
                vol.uplink_packets += c[1];
                vol.downlink_bytes += c[2];
                vol.downlink_packets += c[3];
            }
            vol.total_bytes = vol.uplink_bytes + vol.downlink_bytes;
            vol.total_packets = vol.uplink_packets + vol.downlink_packets;
            v.push((*id, vol));
        }
        Ok(v)
    }

    /// The program's drop, punt and forward counters.
    pub fn stats(&self) -> io::Result<Stats> {
        let map = self
            .ebpf
            .map("stats")
            .ok_or_else(|| io::Error::other("no stats map"))?;
        let m: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(map_err("stats map"))?;
        let sum = |i: u32| -> io::Result<u64> {
            Ok(m.get(&i, 0).map_err(map_err("reading stats"))?.iter().sum())
        };
        let mut dropped = Vec::new();
        for (i, r) in (0u32..).zip(Reason::ALL) {
            dropped.push((r, sum(i)?));
        }
        let mut unrouted = Vec::new();
        for (i, u) in (S_UNROUTED..).zip(Unrouted::ALL) {
            unrouted.push((u, sum(i)?));
        }
        Ok(Stats {
            dropped,
            punted: sum(S_PUNTED)?,
            unrouted,
            forwarded: sum(S_FORWARDED)?,
            crossings_lost: sum(S_CROSSINGS_LOST)?,
        })
    }

    fn map(&mut self, name: &str) -> io::Result<&mut aya::maps::Map> {
        self.ebpf
            .map_mut(name)
            .ok_or_else(|| io::Error::other(format!("XDP engine object without its {name} map")))
    }
}

/// Loads the IPv6 program and puts it where the main program tail-calls it.
fn load_ipv6(ebpf: &mut Ebpf) -> io::Result<()> {
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM6)
        .ok_or_else(|| io::Error::other("XDP engine object without its IPv6 program"))?
        .try_into()
        .map_err(|e| bpf::error(PROGRAM6, &e))?;
    prog.load()
        .map_err(|e| bpf::error("BPF_PROG_LOAD (XDP engine, IPv6)", &e))?;
    let fd = prog
        .fd()
        .map_err(|e| bpf::error(PROGRAM6, &e))?
        .try_clone()?;
    let map = ebpf
        .map_mut("engine6")
        .ok_or_else(|| io::Error::other("XDP engine object without its engine6 map"))?;
    let mut m: ProgramArray<&mut MapData> =
        ProgramArray::try_from(map).map_err(map_err("engine6 map"))?;
    m.set(0, &fd, 0).map_err(map_err("engine6 map"))
}

/// Writes `values` into the array map `name` from index 0.
fn fill<T: aya::Pod>(ebpf: &mut Ebpf, name: &str, values: &[T]) -> io::Result<()> {
    let map = ebpf
        .map_mut(name)
        .ok_or_else(|| io::Error::other(format!("XDP engine object without its {name} map")))?;
    let mut m: Array<&mut MapData, T> = Array::try_from(map).map_err(map_err(name))?;
    for (i, v) in (0u32..).zip(values) {
        m.set(i, v, 0).map_err(map_err(name))?;
    }
    Ok(())
}

#[allow(clippy::cast_possible_truncation)] // i < URR_SLOTS (4)
fn urr_index(slot: u32, i: usize) -> u32 {
    slot * URR_SLOTS as u32 + i as u32
}

/// The downlink key: the address as it is in a header.
fn ue_key(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

/// The IPv6 downlink key: the /64's first 8 octets as in a header.
fn ue6_key(a: Ipv6Addr) -> u64 {
    let o = a.octets();
    u64::from_ne_bytes([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]])
}

/// `struct shape` for `pdrs` (at most MAX_PDRS, as `compile` ensures) under a key whose UE
/// address is `ue`: a PDR of another UE address, matched as the destination, matches
/// nothing there; what is each session's own is left out (`KeyPlan::session`).
#[allow(clippy::cast_possible_truncation)] // counts and indices below MAX_PDRS, URR_SLOTS
fn encode_shape(
    pdrs: &[CPdr],
    ue: Option<Ipv4Addr>,
    urrs: &[Option<UrrId>; URR_SLOTS],
) -> Result<Shape, Punt> {
    let mut v = [0u8; SHAPE_LEN];
    let mut v6 = None;
    let n = pdrs.len().min(MAX_PDRS);
    v[0..4].copy_from_slice(&(n as u32).to_ne_bytes());
    for (k, p) in pdrs.iter().take(MAX_PDRS).enumerate() {
        let b = &mut v[8 + k * PDR_LEN..8 + (k + 1) * PDR_LEN];
        b[0..8].copy_from_slice(&p.qfis.to_ne_bytes());
        let mut flags = 0u8;
        if let Some(u) = p.ue {
            flags |= 1 | if u.dst { 2 } else { 0 };
            match u.v4 {
                Some(a) if Some(a) != ue => {
                    if !u.dst {
                        return Err(Punt::PdrForm("PDRs of one key with different UE addresses"));
                    }
                    flags |= 32;
                }
                Some(_) => {}
                None => b[9] |= P6_NO_V4,
            }
            if u.v6.is_none() {
                b[9] |= P6_NO_V6;
            }
        }
        // IPv6 packets can reach this PDR's filters: the shape has its IPv6 part.
        if !p.sdf6.is_empty() && b[9] & P6_NO_V6 == 0 {
            let s6 = v6.get_or_insert_with(|| Box::new([0u8; SHAPE6_LEN]));
            for (j, f) in p.sdf6.iter().take(MAX_SDF).enumerate() {
                let o = (k * MAX_SDF + j) * SDF6_LEN;
                encode_sdf6(&mut s6[o..o + SDF6_LEN], f);
            }
        }
        if p.gate_shut {
            flags |= 4;
        }
        if p.quota {
            flags |= 16;
        }
        b[21] = match p.action {
            Action::Drop => 0,
            Action::NoTarget => 1,
            Action::ToN6 => 2,
            Action::Encap {
                peer,
                tos,
                qfi,
                rqi,
                to_access,
                on_n9,
                ..
            } => {
                b[22] = tos;
                b[23] = (u8::from(rqi) << 6) | qfi.unwrap_or(0) & 0x3f;
                if qfi.is_some() {
                    flags |= 8;
                }
                if !to_access {
                    flags |= 64;
                }
                if on_n9 {
                    flags |= 128;
                }
                // ACT_ENCAP, ACT_ENCAP6.
                if peer.is_ipv6() {
                    4
                } else {
                    3
                }
            }
        };
        b[20] = flags;
        let ids: Vec<u8> = p
            .urrs
            .iter()
            .filter_map(|id| urrs.iter().position(|u| *u == Some(*id)))
            .map(|i| i as u8)
            .collect();
        b[24] = ids.len() as u8;
        b[25] = u8::from(p.uplink);
        for (j, i) in ids.iter().take(2).enumerate() {
            b[26 + j] = *i;
        }
        b[28..34].copy_from_slice(&p.hop.dst);
        b[34..40].copy_from_slice(&p.hop.src);
        for (j, f) in p.sdf.iter().take(MAX_SDF).enumerate() {
            let o = &mut b[40 + j * SDF_LEN..40 + (j + 1) * SDF_LEN];
            let mut flags = 0u8;
            flags |= side(o, 0, 16, &f.ue, 4, 8);
            if f.ue.addr == CAddr::Ue {
                flags |= 128;
            }
            flags |= side(o, 8, 20, &f.remote, 16, 32);
            if f.never {
                flags |= 1;
            }
            if let Some(proto) = f.proto {
                flags |= 2;
                o[25] = proto;
            }
            o[26] = f.tos.0;
            o[27] = f.tos.1;
            if let Some(spi) = f.spi {
                flags |= 64;
                o[28..32].copy_from_slice(&spi.to_be_bytes());
            }
            o[24] = flags;
        }
        b[40 + MAX_SDF * SDF_LEN] = p.sdf.len().min(MAX_SDF) as u8;
        let m = 41 + MAX_SDF * SDF_LEN;
        b[m] = p.mbrs.len().min(MAX_PDR_MBRS) as u8;
        for (j, i) in p.mbrs.iter().take(MAX_PDR_MBRS).enumerate() {
            b[m + 1 + j] = *i;
        }
        // Framed Routes match only with the UE address (PDR_UE), as the reference's.
        if p.ue.is_some() {
            b[8] = p.routes.len().min(MAX_ROUTES) as u8;
            for (j, (net, len)) in p.routes.iter().take(MAX_ROUTES).enumerate() {
                let o = ROUTES_AT + 8 * j;
                let mask = crate::compile::prefix_mask(*len);
                b[o..o + 4].copy_from_slice(&net.octets());
                b[o + 4..o + 8].copy_from_slice(&mask.to_be_bytes());
            }
        }
    }
    Ok(Shape { pdrs: v, v6 })
}

/// `struct pdr`'s `flags6`: its UE IP has no IPv4 address, no IPv6 prefix.
const P6_NO_V4: u8 = 1;
const P6_NO_V6: u8 = 2;

/// `struct sdf6` `o` of filter `f`.
fn encode_sdf6(o: &mut [u8], f: &CSdf6) {
    let end = |o: &mut [u8], e: &CEnd6| {
        let kind = match e.addr {
            CAddr6::Any => 0,
            CAddr6::Assigned => 1,
            CAddr6::Prefix(net, len) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                o[0..16].copy_from_slice(&net.octets());
                o[16..32].copy_from_slice(&mask.to_be_bytes());
                2
            }
            CAddr6::None => 3,
        };
        o[32..34].copy_from_slice(&e.ports.0.to_ne_bytes());
        o[34..36].copy_from_slice(&e.ports.1.to_ne_bytes());
        o[36] = kind;
        o[37] = u8::from(e.negated);
    };
    let mut flags = 0u8;
    if let Some(fd) = &f.flow {
        flags |= 16;
        if !fd.permit {
            flags |= 1;
        }
        if let Some(p) = fd.proto {
            flags |= 2;
            o[89] = p;
        }
        if fd.out {
            flags |= 32;
        }
        end(&mut o[0..40], &fd.from);
        end(&mut o[40..80], &fd.to);
    }
    if let Some(l) = f.flow_label {
        flags |= 8;
        o[80..84].copy_from_slice(&l.to_ne_bytes());
    }
    if let Some(spi) = f.spi {
        flags |= 4;
        o[84..88].copy_from_slice(&spi.to_be_bytes());
    }
    o[88] = flags;
    o[90] = f.tos.0;
    o[91] = f.tos.1;
}

/// One side of `struct sdf` `o`: net and mask at `a`, port range at `p`; returns its flags
/// (`none`, `neg`).
fn side(o: &mut [u8], a: usize, p: usize, s: &CSide, none: u8, neg: u8) -> u8 {
    let mut flags = if s.negated { neg } else { 0 };
    match s.addr {
        CAddr::Net { net, mask } => {
            o[a..a + 4].copy_from_slice(&net.octets());
            o[a + 4..a + 8].copy_from_slice(&mask.to_be_bytes());
        }
        // `assigned`: the session's UE address, a /32 (SDF_UE_ASSIGNED).
        CAddr::Ue => o[a + 4..a + 8].copy_from_slice(&u32::MAX.to_be_bytes()),
        CAddr::None => flags |= none,
    }
    o[p..p + 2].copy_from_slice(&s.ports.0.to_ne_bytes());
    o[p + 2..p + 4].copy_from_slice(&s.ports.1.to_ne_bytes());
    flags
}

/// A Framed Route: network, prefix length.
type Route = (Ipv4Addr, u8);

/// A key of a session in the program's maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Teid(u32),
    Ue(Ipv4Addr),
    Route(Route),
    /// The /64 of a UE IPv6 prefix.
    Ue6(Ipv6Addr),
}

/// The keys a session had: TEIDs, UE addresses, Framed Routes, the UE IPv6 /64.
type OldKeys = (Vec<u32>, Vec<Ipv4Addr>, Vec<Route>, Option<Ipv6Addr>);

/// A key with what its value holds: the shape of its PDRs and the session's own part.
#[derive(Debug)]
struct KeyPlan {
    key: Key,
    shape: Shape,
    ue: Option<Ipv4Addr>,
    /// Each PDR's tunnel when it forwards into one: its far end (an IPv4 address as in a
    /// header; an IPv6 one's index in `struct peers6`), its TEID.
    tunnels: [([u8; 4], u32); MAX_PDRS],
}

impl KeyPlan {
    /// `struct session`.
    fn session(&self, slot: u32, shape: u32) -> SessionValue {
        let mut v = [0u8; SESSION_LEN];
        v[0..4].copy_from_slice(&slot.to_ne_bytes());
        v[4..8].copy_from_slice(&shape.to_ne_bytes());
        if let Some(a) = self.ue {
            v[8..12].copy_from_slice(&a.octets());
        }
        for (i, (peer, teid)) in self.tunnels.iter().enumerate() {
            v[16 + 4 * i..20 + 4 * i].copy_from_slice(peer);
            let t = 16 + 4 * MAX_PDRS + 4 * i;
            v[t..t + 4].copy_from_slice(&teid.to_be_bytes());
        }
        v
    }
}

/// The plan of `key` (its UE address `ue`) with `pdrs`, the session's IPv6 tunnel peers at
/// their indices in `peers6`.
fn keyed(
    key: Key,
    ue: Option<Ipv4Addr>,
    pdrs: &[CPdr],
    urrs: &[Option<UrrId>; URR_SLOTS],
    peers6: &Peers6,
) -> Result<KeyPlan, Punt> {
    let mut tunnels = [([0; 4], 0); MAX_PDRS];
    for (t, p) in tunnels.iter_mut().zip(pdrs) {
        if let Action::Encap { peer, teid, .. } = p.action {
            let far = match peer {
                IpAddr::V4(a) => a.octets(),
                IpAddr::V6(a) => {
                    let i = (peers6.iter().position(|p| *p == Some(a)))
                        .ok_or(Punt::TooMany("IPv6 tunnel peers"))?;
                    u32::try_from(i).unwrap_or(0).to_ne_bytes()
                }
            };
            *t = (far, teid);
        }
    }
    Ok(KeyPlan {
        key,
        shape: encode_shape(pdrs, ue, urrs)?,
        ue,
        tunnels,
    })
}

/// What `install` does, decided by `admit`.
#[derive(Debug)]
struct Plan {
    c: Compiled,
    urrs: [Option<UrrId>; URR_SLOTS],
    /// URR slots that are new (their counters zeroed).
    fresh: Vec<usize>,
    keys: Vec<KeyPlan>,
    /// The session's IPv6 tunnel peers, and those it had.
    peers6: (Peers6, Peers6),
}

/// The IPv6 tunnel peers of `c` at their indices in `struct peers6`: a peer the session had
/// (`old`) keeps its index, a new one takes one no peer had if there is one (a packet still
/// on its way with the old keys finds the old peer at its index), else any free one.
fn lay_out_peers(old: &Peers6, c: &Compiled) -> Result<Peers6, Punt> {
    let lists = (c.uplink.iter().map(|(_, v)| v))
        .chain(c.downlink.iter().map(|(_, v)| v))
        .chain(c.downlink6.iter().map(|(_, v)| v))
        .chain(c.routes.iter().map(|(_, v)| v));
    let mut want: Vec<Ipv6Addr> = Vec::new();
    for p in lists.flatten() {
        if let Action::Encap {
            peer: IpAddr::V6(a),
            ..
        } = p.action
        {
            if !want.contains(&a) {
                want.push(a);
            }
        }
    }
    let mut new: Peers6 = [None; V6_PEERS];
    for a in &want {
        if let Some(i) = old.iter().position(|o| *o == Some(*a)) {
            new[i] = Some(*a);
        }
    }
    for a in want {
        if new.contains(&Some(a)) {
            continue;
        }
        let free = |i: &usize| new[*i].is_none();
        let i = ((0..V6_PEERS).find(|i| free(i) && old[*i].is_none()))
            .or_else(|| (0..V6_PEERS).find(free))
            .ok_or(Punt::TooMany("IPv6 tunnel peers"))?;
        new[i] = Some(a);
    }
    Ok(new)
}

/// Shapes for `sessions`: two keys each at most, within [`MAX_SHAPES`].
fn shape_capacity(sessions: u32) -> u32 {
    sessions.saturating_mul(2).clamp(1, MAX_SHAPES)
}

/// Indices below a capacity: never used ones, free ones, and freed ones in quarantine.
#[derive(Debug)]
struct Ids {
    capacity: u32,
    next: u32,
    free: Vec<u32>,
    retired: VecDeque<(Instant, u32)>,
}

impl Ids {
    fn new(capacity: u32) -> Self {
        Self {
            capacity,
            next: 0,
            free: Vec::new(),
            retired: VecDeque::new(),
        }
    }

    /// Whether `n` can be taken now.
    fn has(&self, n: usize) -> bool {
        let ready = (self.retired.iter())
            .take_while(|(at, _)| at.elapsed() >= SLOT_QUARANTINE)
            .count();
        let never = (self.capacity - self.next) as usize;
        self.free.len() + ready + never >= n
    }

    fn take(&mut self) -> Option<u32> {
        let id = self.peek()?;
        self.commit(id);
        Some(id)
    }

    /// The index [`Ids::take`] would give, not taken yet ([`Ids::commit`]).
    fn peek(&mut self) -> Option<u32> {
        while let Some(&(at, id)) = self.retired.front() {
            if at.elapsed() < SLOT_QUARANTINE {
                break;
            }
            self.retired.pop_front();
            self.free.push(id);
        }
        match self.free.last() {
            Some(&id) => Some(id),
            None => (self.next < self.capacity).then_some(self.next),
        }
    }

    /// Takes `id`, which [`Ids::peek`] gave.
    fn commit(&mut self, id: u32) {
        if self.free.last() == Some(&id) {
            self.free.pop();
        } else if id == self.next {
            self.next += 1;
        }
    }

    /// Free at once (never in use).
    fn give_back(&mut self, id: u32) {
        self.free.push(id);
    }

    /// Free after the quarantine.
    fn retire(&mut self, id: u32) {
        self.retired.push_back((Instant::now(), id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encap(peer: &str) -> CPdr {
        CPdr {
            id: upf_rules::PdrId(1),
            qfis: 0,
            ue: None,
            routes: Vec::new(),
            uplink: false,
            gate_shut: false,
            action: Action::Encap {
                peer: peer.parse().unwrap(),
                teid: 1,
                tos: 0,
                qfi: None,
                rqi: false,
                to_access: true,
                on_n9: false,
            },
            urrs: Vec::new(),
            hop: NextHop::default(),
            sdf: Vec::new(),
            sdf6: Vec::new(),
            mbrs: Vec::new(),
            quota: false,
        }
    }

    fn compiled(peers: &[&str]) -> Compiled {
        Compiled {
            seid: Seid(1),
            uplink: vec![(7, peers.iter().map(|p| encap(p)).collect())],
            downlink: Vec::new(),
            downlink6: Vec::new(),
            routes: Vec::new(),
            urrs: Vec::new(),
            buckets: Vec::new(),
            quotas: Vec::new(),
            thresholds: Vec::new(),
            volqu: Vec::new(),
        }
    }

    #[test]
    fn ipv6_peers_keep_their_index_and_new_ones_take_unused_ones() {
        let a = |s: &str| Some(s.parse::<Ipv6Addr>().unwrap());
        let none = [None; V6_PEERS];
        let first = lay_out_peers(
            &none,
            &compiled(&["2001:db8::1", "192.0.2.1", "2001:db8::2"]),
        );
        assert_eq!(first, Ok([a("2001:db8::1"), a("2001:db8::2"), None, None]));
        // ::1 goes, ::3 comes: ::2 stays at 1, ::3 takes 2 (not 0, where a packet on its way
        // may still find ::1).
        let second = lay_out_peers(&first.unwrap(), &compiled(&["2001:db8::3", "2001:db8::2"]));
        assert_eq!(second, Ok([None, a("2001:db8::2"), a("2001:db8::3"), None]));
        let five = [
            "2001:db8::1",
            "2001:db8::2",
            "2001:db8::3",
            "2001:db8::4",
            "2001:db8::5",
        ];
        assert_eq!(
            lay_out_peers(&none, &compiled(&five)),
            Err(Punt::TooMany("IPv6 tunnel peers"))
        );
    }
}
