//! The adaptor: a session of `upf-rules` compiled into what `bpf/engine.bpf.c` holds per TEID
//! and per UE address, or the reason it is punted (left to the user-space engine). What
//! `compile` accepts, the program does exactly as `upf_dataplane::Pipeline` does; every rule
//! form it has not been held to is punted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;
use upf_rules::sdf::{Action as SdfAction, Address, Direction, Endpoint};
use upf_rules::{
    ApplyAction, Far, Gate, Interface, MeasurementInfo, MeasurementMethod, OuterHeaderCreation,
    OuterHeaderRemoval, Pdr, PdrId, QerId, ReportingTriggers, Seid, Session, UrrId, VolumeLimit,
};

/// PDRs one TEID or one UE address leads to (the program's loop bound).
pub const MAX_PDRS: usize = 4;
/// URRs one PDR counts in.
pub const MAX_PDR_URRS: usize = 2;
/// SDF filters of one PDR.
pub const MAX_SDF: usize = 4;
/// URRs of one session (its counter slots).
pub const URR_SLOTS: usize = 4;
/// MBR buckets one PDR draws from.
pub const MAX_PDR_MBRS: usize = 4;
/// MBR buckets of one session (a QER's, one a direction).
pub const QOS_BUCKETS: usize = 8;
/// Local TEIDs of one session.
pub const MAX_TEIDS: usize = 2;
/// UE IPv4 addresses of one session.
pub const MAX_UES: usize = 2;
/// Framed Routes of one PDR (`MAX_ROUTES` in bpf/engine.bpf.c).
pub const MAX_ROUTES: usize = 4;

/// Why a session is left to the user-space engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Punt {
    #[error("IPv6 ({0})")]
    Ipv6(&'static str),
    #[error("framed routes ({0})")]
    FramedRoutes(&'static str),
    #[error("application ID")]
    ApplicationId,
    #[error("a PDR of a form the engine does not run ({0})")]
    PdrForm(&'static str),
    #[error("buffering or notifying the CP")]
    Buffering,
    #[error("duplication")]
    Duplication,
    #[error("apply action {0:?}")]
    ApplyAction(ApplyAction),
    #[error("a forwarding target the engine does not run ({0})")]
    Target(&'static str),
    #[error("QoS the engine does not enforce ({0})")]
    Qos(&'static str),
    #[error("a URR the engine does not count ({0})")]
    Urr(&'static str),
    #[error("user plane inactivity timer")]
    InactivityTimer,
    #[error("more {0} than the maps hold")]
    TooMany(&'static str),
    #[error("rules that refer to missing rules")]
    Dangling,
}

/// The Ethernet addresses of an egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NextHop {
    pub dst: [u8; 6],
    pub src: [u8; 6],
}

/// What compiling needs besides the session: the egress next hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hops {
    /// Towards the gNBs (N3).
    pub n3: NextHop,
    /// Towards the data network (N6).
    pub n6: NextHop,
}

/// Which of our GTP-U interfaces have an IPv6 address (the engine's [`crate::Config`]): a
/// tunnel to an IPv6 peer leaves from its side's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ipv6Locals {
    pub n3: bool,
    pub n9: bool,
}

/// What a matched PDR's FAR does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `far_drop`: no FAR, or a FAR without FORW.
    Drop,
    /// `no_forwarding_target`: FORW to the access side without a tunnel yet.
    NoTarget,
    /// Uplink: outer headers stripped, the inner packet routed to N6.
    ToN6,
    /// Into the GTP-U/UDP/IP tunnel `teid` to `peer` on N3 (N9 shares it): a packet from
    /// N6, or one from a tunnel with its outer headers stripped. `tos` is the outer DSCP <<
    /// 2 (Transport Level Marking); `qfi` and `rqi` the QERs' marks; `to_access`: a tunnel
    /// to the access side (DL container, the QERs' QFI first), else to the core (N9: UL
    /// container, the arriving QFI first); `on_n9`: from our N9 address.
    Encap {
        peer: IpAddr,
        teid: u32,
        tos: u8,
        qfi: Option<u8>,
        rqi: bool,
        to_access: bool,
        on_n9: bool,
    },
}

/// The UE IP a PDR matches: an IPv4 packet's UE address must be `v4`, an IPv6 packet's in
/// the /64 `v6` (either absent: no packet of that version matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUe {
    pub v4: Option<Ipv4Addr>,
    /// The prefix's first 64 bits (the rest zero).
    pub v6: Option<Ipv6Addr>,
    /// The address is the packet's destination (else its source).
    pub dst: bool,
}

/// One PDR as the program holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CPdr {
    pub id: PdrId,
    /// Bit q: QFI q matches; 0: any.
    pub qfis: u64,
    /// The UE IP to match.
    pub ue: Option<CUe>,
    /// Framed Routes (network, prefix length): their addresses match as the UE's.
    pub routes: Vec<(Ipv4Addr, u8)>,
    /// The PDR's packets come from the UE (gates and URRs count uplink).
    pub uplink: bool,
    /// A QER's gate is closed in the PDR's direction.
    pub gate_shut: bool,
    pub action: Action,
    pub urrs: Vec<UrrId>,
    pub hop: NextHop,
    /// SDF filters (none: any packet), for IPv4 packets and for IPv6 ones.
    pub sdf: Vec<CSdf>,
    pub sdf6: Vec<CSdf6>,
    /// The MBR buckets its packets must conform to (indices in [`Compiled::buckets`]).
    pub mbrs: Vec<u8>,
    /// A URR of the PDR has a Volume Quota or a reported Volume Threshold (the program
    /// counts the PDR's packets under the session's lock).
    pub quota: bool,
}

/// A QER's MBR in one direction as `upf_dataplane::meter::TokenBucket::new` sets it up (that
/// crate is above this one: the arithmetic is repeated here, and the differential test holds
/// the two equal): in ticks of 2^-24 ns, the time one bit takes and a full bucket's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CBucket {
    pub qer: QerId,
    pub uplink: bool,
    pub cost: u64,
    pub depth: u64,
}

/// Averaging window when the QER gives none (TS 23.501 §5.7.3.6), as the reference.
const DEFAULT_WINDOW: Duration = Duration::from_millis(2000);
const TICK_FRAC: u32 = 24;
const NS_PER_S: u128 = 1_000_000_000;

impl CBucket {
    fn new(qer: QerId, uplink: bool, bits_per_s: u64, window: Duration) -> Self {
        // Rounded up: the bucket never passes more than the rate.
        let cost = u64::try_from((NS_PER_S << TICK_FRAC).div_ceil(u128::from(bits_per_s.max(1))))
            .unwrap_or(u64::MAX);
        // At least one full-size packet.
        let bits =
            (u128::from(bits_per_s).saturating_mul(window.as_nanos()) / NS_PER_S).max(12_000);
        let depth = if bits_per_s == 0 {
            0
        } else {
            u64::try_from(bits.saturating_mul(cost.into())).unwrap_or(u64::MAX)
        };
        Self {
            qer,
            uplink,
            cost,
            depth,
        }
    }

    /// `old`'s fill (its backlog) carried to this rate, as `TokenBucket::set_rate_from` keeps
    /// a modified QER's tokens.
    pub fn carry(&self, old: &CBucket, backlog: u64) -> u64 {
        let tokens = (old.depth - backlog.min(old.depth))
            .checked_div(old.cost)
            .unwrap_or(u64::MAX);
        let depth_bits = self.depth.checked_div(self.cost).unwrap_or(u64::MAX);
        self.depth
            .saturating_sub(tokens.min(depth_bits).saturating_mul(self.cost))
    }
}

/// An address of an SDF filter's side for IPv4 packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CAddr {
    /// `addr & mask == net` (mask 0: any).
    Net { net: Ipv4Addr, mask: u32 },
    /// `assigned`: the PDR's UE address (the engine fills it in per session, so that
    /// sessions of one policy share their PDRs).
    Ue,
    /// No IPv4 address (an IPv6 prefix).
    None,
}

/// One side of an SDF filter: address (negated or not) and port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CSide {
    pub addr: CAddr,
    pub negated: bool,
    pub ports: (u16, u16),
}

/// An SDF filter as `upf_rules::SdfFilter::matches` decides it for the IPv4 packets the
/// program classifies, with the PDR's UE address resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CSdf {
    /// Deny or a flow label: matches none of them.
    pub never: bool,
    pub proto: Option<u8>,
    /// The SPI an ESP packet must have (no other packet has one).
    pub spi: Option<u32>,
    /// (value & mask, mask) of the ToS octet.
    pub tos: (u8, u8),
    /// The UE's side and the remote side.
    pub ue: CSide,
    pub remote: CSide,
}

/// An end of a Flow Description for IPv6 packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CAddr6 {
    Any,
    /// `assigned`: the packet's address at the UE IP's end.
    Assigned,
    /// A prefix: network (host bits zero), length.
    Prefix(Ipv6Addr, u8),
    /// Holds no IPv6 address (an IPv4 prefix, or an impossible length).
    None,
}

/// One end of a Flow Description for IPv6 packets: address (negated or not), port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CEnd6 {
    pub addr: CAddr6,
    pub negated: bool,
    pub ports: (u16, u16),
}

/// A Flow Description for IPv6 packets: which end is the UE's is decided per packet, as
/// `upf_rules::FlowDescription::matches` does (a /64 holds many addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CFlow6 {
    pub permit: bool,
    /// Direction out: with neither end the UE's, `to` is.
    pub out: bool,
    pub proto: Option<u8>,
    pub from: CEnd6,
    pub to: CEnd6,
}

/// An SDF filter as `upf_rules::SdfFilter::matches` decides it for IPv6 packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CSdf6 {
    pub flow: Option<CFlow6>,
    /// (value & mask, mask) of the Traffic Class.
    pub tos: (u8, u8),
    pub spi: Option<u32>,
    pub flow_label: Option<u32>,
}

/// A session as the program holds it: its PDRs in precedence order under each key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub seid: Seid,
    /// Local TEID → the PDRs of that TEID.
    pub uplink: Vec<(u32, Vec<CPdr>)>,
    /// UE address → the session's PDRs without an F-TEID (the same list for each address).
    pub downlink: Vec<(Ipv4Addr, Vec<CPdr>)>,
    /// The /64 of its UE IPv6 prefix (at most one) → the same PDRs.
    pub downlink6: Vec<(Ipv6Addr, Vec<CPdr>)>,
    /// Framed Routes of its PDRs (network, prefix length): downlink packets to an address
    /// no session has as its own are found by the longest, with the same PDRs, under the
    /// session's UE address (at most one, then).
    pub routes: Vec<((Ipv4Addr, u8), Vec<CPdr>)>,
    /// The session's URRs (at most [`URR_SLOTS`]).
    pub urrs: Vec<UrrId>,
    /// The MBR buckets of its QERs (at most [`QOS_BUCKETS`]).
    pub buckets: Vec<CBucket>,
    /// The Volume Quotas of its URRs.
    pub quotas: Vec<(UrrId, VolumeLimit)>,
    /// The Volume Thresholds of its URRs that VOLTH reports.
    pub thresholds: Vec<(UrrId, VolumeLimit)>,
    /// Its URRs whose quota's exhaustion VOLQU reports.
    pub volqu: Vec<UrrId>,
}

/// Compiles `s` for the XDP engine (`v6`: our interfaces with an IPv6 address), or says why
/// it is punted.
pub fn compile(s: &Session, hops: &Hops, v6: Ipv6Locals) -> Result<Compiled, Punt> {
    if s.inactivity_timer_s.is_some() {
        return Err(Punt::InactivityTimer);
    }
    if s.urrs.len() > URR_SLOTS {
        return Err(Punt::TooMany("URRs"));
    }
    for u in &s.urrs {
        urr_form(u)?;
    }
    // TS 29.244 §5.2.1: the lowest precedence value wins; equal ones keep rule order (the
    // session's PDRs are sorted by ID), as the reference sorts them (stably).
    let mut pdrs: Vec<&Pdr> = s.pdrs.iter().collect();
    pdrs.sort_by_key(|p| p.precedence);
    let mut uplink: Vec<(u32, Vec<CPdr>)> = Vec::new();
    let mut ip = Vec::new();
    let mut ues: Vec<Ipv4Addr> = Vec::new();
    let mut ues6: Vec<Ipv6Addr> = Vec::new();
    let mut routes: Vec<(Ipv4Addr, u8)> = Vec::new();
    let mut buckets = Vec::new();
    for p in pdrs {
        let c = compile_pdr(s, p, (hops, v6), &mut buckets)?;
        if let Some(a) = c.ue.and_then(|u| u.v4).filter(|a| !ues.contains(a)) {
            ues.push(a);
        }
        if let Some(a) = c.ue.and_then(|u| u.v6).filter(|a| !ues6.contains(a)) {
            ues6.push(a);
        }
        for r in &c.routes {
            if !routes.contains(r) {
                routes.push(*r);
            }
        }
        match p.pdi.local_f_teid {
            Some(ft) => match uplink.iter_mut().find(|(t, _)| *t == ft.teid.0) {
                Some((_, v)) => v.push(c),
                None => uplink.push((ft.teid.0, vec![c])),
            },
            None => ip.push(c),
        }
    }
    if uplink.len() > MAX_TEIDS {
        return Err(Punt::TooMany("TEIDs"));
    }
    if ues.len() > MAX_UES {
        return Err(Punt::TooMany("UE addresses"));
    }
    // The program checks an IPv6 packet's UE address against the session's one /64.
    if ues6.len() > 1 {
        return Err(Punt::Ipv6("two UE prefixes"));
    }
    // Under a route, the session's PDRs are matched with its one UE address.
    if !routes.is_empty() && ues.len() > 1 {
        return Err(Punt::FramedRoutes("two UE addresses"));
    }
    if ip.len() > MAX_PDRS || uplink.iter().any(|(_, v)| v.len() > MAX_PDRS) {
        return Err(Punt::TooMany("PDRs"));
    }
    Ok(Compiled {
        seid: s.seid,
        uplink,
        routes: routes.into_iter().map(|r| (r, ip.clone())).collect(),
        downlink: ues.into_iter().map(|a| (a, ip.clone())).collect(),
        downlink6: ues6.into_iter().map(|a| (a, ip.clone())).collect(),
        urrs: s.urrs.iter().map(|u| u.id).collect(),
        buckets,
        quotas: s
            .urrs
            .iter()
            .filter_map(|u| Some((u.id, u.volume_quota?)))
            .collect(),
        thresholds: (s.urrs.iter())
            .filter_map(|u| Some((u.id, threshold(u)?)))
            .collect(),
        volqu: (s.urrs.iter())
            .filter(|u| u.volume_quota.is_some() && u.triggers.contains(ReportingTriggers::VOLQU))
            .map(|u| u.id)
            .collect(),
    })
}

/// The Volume Threshold `u` reports (UrrState::update: only when VOLTH asks for it).
fn threshold(u: &upf_rules::Urr) -> Option<VolumeLimit> {
    u.volume_threshold
        .filter(|_| u.triggers.contains(ReportingTriggers::VOLTH))
}

/// A URR the program counts exactly: volume only, nothing measured on drops; what fires on
/// a packet is a Volume Threshold reached (VOLTH) or a Volume Quota exhausted (VOLQU; the
/// quota is enforced either way), which the program announces for the caller to report.
fn urr_form(u: &upf_rules::Urr) -> Result<(), Punt> {
    if u.method != MeasurementMethod::VOLUM {
        return Err(Punt::Urr("measurement other than volume"));
    }
    let volume = ReportingTriggers::PERIO | ReportingTriggers::VOLTH | ReportingTriggers::VOLQU;
    if !(u.triggers & !volume).is_empty() {
        return Err(Punt::Urr(
            "reporting triggers other than periodic or volume",
        ));
    }
    if u.info != MeasurementInfo::empty() {
        return Err(Punt::Urr("measurement information"));
    }
    if u.time_threshold_s.is_some()
        || u.time_quota_s.is_some()
        || u.quota_holding_time_s.is_some()
        || u.inactivity_detection_time_s.is_some()
        || u.extra.is_some()
    {
        return Err(Punt::Urr("time thresholds, time quotas or times"));
    }
    Ok(())
}

/// One PDR; the MBR buckets of its QERs are added to the session's `buckets`.
fn compile_pdr(
    s: &Session,
    p: &Pdr,
    (hops, v6): (&Hops, Ipv6Locals),
    buckets: &mut Vec<CBucket>,
) -> Result<CPdr, Punt> {
    let pdi = &p.pdi;
    let routes = framed_routes(pdi)?;
    if pdi.sdf_filters.len() > MAX_SDF {
        return Err(Punt::TooMany("SDF filters"));
    }
    if pdi.extra.get().is_some_and(|e| e.application_id.is_some()) {
        return Err(Punt::ApplicationId);
    }
    let ue = match pdi.ue_ip {
        None => None,
        Some(u) => {
            let v6 = match u.ipv6 {
                None => None,
                Some((a, 64)) => Some(Ipv6Addr::from(u128::from(a) & !u128::from(u64::MAX))),
                Some(_) => return Err(Punt::Ipv6("a UE prefix other than a /64")),
            };
            // The reference matches an IPv4 packet in a Framed Route without the address.
            if u.ipv4.is_none() && !routes.is_empty() {
                return Err(Punt::FramedRoutes("a UE IP without an IPv4 address"));
            }
            Some(CUe {
                v4: u.ipv4,
                v6,
                dst: u.is_destination,
            })
        }
    };
    let uplink = pdi.packets_leave_ue();
    let ue_addr = ue.and_then(|u| u.v4);
    let sdf = pdi
        .sdf_filters
        .iter()
        .map(|f| compile_sdf(f, ue_addr))
        .collect::<Result<Vec<_>, _>>()?;
    let sdf6 = pdi.sdf_filters.iter().map(compile_sdf6).collect();
    let gtp = pdi.local_f_teid.is_some();
    // Packets from the UE come by a tunnel; packets found by their address come from N6.
    if uplink && !gtp {
        return Err(Punt::PdrForm("packets from the UE without an F-TEID"));
    }
    let strips = match p.outer_header_removal {
        None => false,
        Some(OuterHeaderRemoval::GtpuUdpIp { .. }) if gtp => true,
        Some(_) => return Err(Punt::PdrForm("outer header removal")),
    };
    let mut qfis = 0u64;
    for q in &pdi.qfis {
        qfis |= 1u64 << (q.0 & 63);
    }
    if p.urrs.len() > MAX_PDR_URRS {
        return Err(Punt::TooMany("URRs of a PDR"));
    }
    if p.qers.len() > MAX_PDR_MBRS {
        return Err(Punt::TooMany("QERs of a PDR"));
    }
    if p.urrs.iter().any(|&u| s.urr(u).is_none()) {
        return Err(Punt::Dangling);
    }
    let quota = p.urrs.iter().any(|&u| {
        s.urr(u)
            .is_some_and(|u| u.volume_quota.is_some() || threshold(u).is_some())
    });
    // QERs: gates and MBRs in the PDR's direction, the first QFI and any RQI (the
    // reference's marks).
    let mut gate_shut = false;
    let mut qfi = None;
    let mut rqi = false;
    let mut mbrs = Vec::new();
    for &q in &p.qers {
        let q = s.qer(q).ok_or(Punt::Dangling)?;
        let kbps = q.mbr.map_or(0, |m| {
            if uplink {
                m.uplink_kbps
            } else {
                m.downlink_kbps
            }
        });
        // No rate that way: no bucket (the reference's `QerState::new`).
        if kbps > 0 {
            let i = match buckets
                .iter()
                .position(|b| b.qer == q.id && b.uplink == uplink)
            {
                Some(i) => i,
                None => {
                    let window = q
                        .averaging_window_ms
                        .map_or(DEFAULT_WINDOW, |ms| Duration::from_millis(ms.into()));
                    buckets.push(CBucket::new(
                        q.id,
                        uplink,
                        kbps.saturating_mul(1000),
                        window,
                    ));
                    buckets.len() - 1
                }
            };
            match u8::try_from(i) {
                Ok(i) if usize::from(i) < QOS_BUCKETS => mbrs.push(i),
                _ => return Err(Punt::TooMany("MBR buckets")),
            }
        }
        if q.gbr.is_some() {
            return Err(Punt::Qos("GBR"));
        }
        if q.packet_rate.is_some() {
            return Err(Punt::Qos("packet rate"));
        }
        if q.correlation_id.is_some() || q.aggregate.is_some() {
            return Err(Punt::Qos("shared rates"));
        }
        if q.ppi.is_some() {
            return Err(Punt::Qos("paging policy indicator"));
        }
        let gate = if uplink {
            q.gate_uplink
        } else {
            q.gate_downlink
        };
        gate_shut |= gate == Gate::Closed;
        qfi = qfi.or(q.qfi);
        rqi |= q.rqi;
    }
    let far = match p.far {
        None => None,
        Some(id) => Some(s.far(id).ok_or(Punt::Dangling)?),
    };
    let (action, hop) = match far {
        None => (Action::Drop, NextHop::default()),
        Some(f) => far_action(f, uplink, gtp, strips, (qfi.map(|q| q.0), rqi), (hops, v6))?,
    };
    let c = CPdr {
        id: p.id,
        qfis,
        ue,
        routes,
        uplink,
        gate_shut,
        action,
        urrs: p.urrs.to_vec(),
        hop,
        sdf,
        sdf6,
        mbrs,
        quota,
    };
    Ok(c)
}

/// A PDR's Framed Routes, IPv4 and at most [`MAX_ROUTES`]. The reference matches an address
/// in one as the UE's own: its SDF filters are read with that address (which end is the
/// UE's, `assigned`); the program reads them as compiled for the UE address, so each prefix
/// of a filter must hold the UE address exactly when it holds every routed address (and
/// none of them otherwise), and `assigned` may be only the UE's end.
fn framed_routes(pdi: &upf_rules::Pdi) -> Result<Vec<(Ipv4Addr, u8)>, Punt> {
    let mut routes = Vec::new();
    for r in pdi.framed_routes.iter() {
        let IpAddr::V4(net) = r.network else {
            return Err(Punt::Ipv6("framed route"));
        };
        let len = r.prefix_len.min(32);
        routes.push((Ipv4Addr::from(u32::from(net) & prefix_mask(len)), len));
    }
    if routes.len() > MAX_ROUTES {
        return Err(Punt::TooMany("framed routes of a PDR"));
    }
    let ue = pdi.ue_ip.and_then(|u| u.ipv4);
    if routes.is_empty() || ue.is_none() {
        return Ok(routes);
    }
    for fd in pdi.sdf_filters.iter().filter_map(|f| f.flow.as_ref()) {
        // Which end is the UE's (`FlowDescription::matches`) turns on the prefixes that hold
        // the address.
        for e in [&fd.from, &fd.to] {
            let Address::Prefix(IpAddr::V4(n), len) = e.address else {
                continue;
            };
            let (pn, pl) = (u32::from(n) & prefix_mask(len), len.min(32));
            let alike = routes.iter().all(|&(r, rl)| {
                let common = prefix_mask(pl.min(rl));
                let inside = rl >= pl && u32::from(r) & prefix_mask(pl) == pn;
                let apart = u32::from(r) & common != pn & common;
                if is_ue(e, ue) {
                    inside
                } else {
                    e.negated || apart
                }
            });
            if !alike {
                return Err(Punt::FramedRoutes(
                    "an SDF prefix that tells the UE address from a routed one",
                ));
            }
        }
        // `assigned` at the remote end: the reference compares it with the routed address.
        if matches!(fd.from.address, Address::Assigned) && is_ue(&fd.to, ue) {
            return Err(Punt::FramedRoutes("`assigned` at the remote end"));
        }
    }
    Ok(routes)
}

/// Whether `e` is the UE's end of a flow description for UE address `ue`
/// (`FlowDescription::matches`: `assigned`, or a prefix holding the address, not negated).
fn is_ue(e: &Endpoint, ue: Option<Ipv4Addr>) -> bool {
    match e.address {
        Address::Assigned => true,
        Address::Prefix(net, len) => !e.negated && ue.is_some_and(|a| in_prefix(net, len, a)),
        Address::Any => false,
    }
}

/// The mask of a `len`-bit IPv4 prefix.
pub(crate) fn prefix_mask(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0)
}

/// An SDF filter for IPv4 packets of a PDR whose UE address is `ue` (the packet's,
/// when the PDI names one: it has been checked before the filters).
fn compile_sdf(f: &upf_rules::SdfFilter, ue: Option<Ipv4Addr>) -> Result<CSdf, Punt> {
    let any = CSide {
        addr: CAddr::Net {
            net: Ipv4Addr::UNSPECIFIED,
            mask: 0,
        },
        negated: false,
        ports: (0, u16::MAX),
    };
    let mut c = CSdf {
        // Only IPv6 packets have a flow label.
        never: f.flow_label.is_some(),
        proto: None,
        spi: f.spi,
        tos: f.tos.map_or((0, 0), |(v, m)| (v & m, m)),
        ue: any,
        remote: any,
    };
    let Some(fd) = &f.flow else {
        return Ok(c);
    };
    c.never |= fd.action == SdfAction::Deny;
    c.proto = fd.protocol;
    let ue_is_to = if is_ue(&fd.to, ue) {
        true
    } else if is_ue(&fd.from, ue) {
        false
    } else {
        fd.direction == Direction::Out
    };
    let (ue_side, remote) = if ue_is_to {
        (&fd.to, &fd.from)
    } else {
        (&fd.from, &fd.to)
    };
    c.ue = side(ue_side, ue)?;
    c.remote = side(remote, ue)?;
    // `assigned` as the remote end (rare): the address itself, in this session's PDRs only.
    if let (CAddr::Ue, Some(a)) = (c.remote.addr, ue) {
        c.remote.addr = CAddr::Net {
            net: a,
            mask: u32::MAX,
        };
    }
    Ok(c)
}

/// An SDF filter for IPv6 packets (its port ranges checked by [`compile_sdf`]).
fn compile_sdf6(f: &upf_rules::SdfFilter) -> CSdf6 {
    let end = |e: &Endpoint| CEnd6 {
        addr: match e.address {
            Address::Any => CAddr6::Any,
            Address::Assigned => CAddr6::Assigned,
            Address::Prefix(IpAddr::V6(n), len) if len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                CAddr6::Prefix(Ipv6Addr::from(u128::from(n) & mask), len)
            }
            Address::Prefix(..) => CAddr6::None,
        },
        negated: e.negated,
        ports: e.ports.first().map_or((0, u16::MAX), |r| (r.first, r.last)),
    };
    CSdf6 {
        flow: f.flow.as_ref().map(|fd| CFlow6 {
            permit: fd.action == SdfAction::Permit,
            out: fd.direction == Direction::Out,
            proto: fd.protocol,
            from: end(&fd.from),
            to: end(&fd.to),
        }),
        tos: f.tos.map_or((0, 0), |(v, m)| (v & m, m)),
        spi: f.spi,
        flow_label: f.flow_label,
    }
}

fn side(e: &Endpoint, ue: Option<Ipv4Addr>) -> Result<CSide, Punt> {
    // `assigned` without a UE address in the PDI cannot be checked: any (as the reference).
    let addr = match (e.address, ue) {
        (Address::Any, _) | (Address::Assigned, None) => CAddr::Net {
            net: Ipv4Addr::UNSPECIFIED,
            mask: 0,
        },
        (Address::Assigned, Some(_)) => CAddr::Ue,
        (Address::Prefix(IpAddr::V4(n), len), _) => {
            let mask = prefix_mask(len);
            CAddr::Net {
                net: Ipv4Addr::from(u32::from(n) & mask),
                mask,
            }
        }
        (Address::Prefix(IpAddr::V6(_), _), _) => CAddr::None,
    };
    let ports = match e.ports.as_slice() {
        [] => (0, u16::MAX),
        [r] => (r.first, r.last),
        _ => return Err(Punt::TooMany("port ranges of an SDF filter")),
    };
    Ok(CSide {
        addr,
        negated: e.negated,
        ports,
    })
}

fn in_prefix(net: IpAddr, len: u8, a: Ipv4Addr) -> bool {
    let IpAddr::V4(n) = net else { return false };
    let mask = prefix_mask(len);
    u32::from(n) & mask == u32::from(a) & mask
}

/// What FAR `f` does with a PDR's packets (from the UE if `uplink`; arriving by a tunnel if
/// `tunneled`, stripped if `strips`): uplink ones may go to N6; those from N6 into a tunnel
/// to the access side; stripped ones into a tunnel either side (N3 to N9, N9 to N3), marked
/// with `mark` (the QERs' QFI, RQI); a tunnel to an IPv6 peer only from a side with an IPv6
/// address of ours (`v6`).
fn far_action(
    f: &Far,
    uplink: bool,
    tunneled: bool,
    strips: bool,
    (qfi, rqi): (Option<u8>, bool),
    (hops, v6): (&Hops, Ipv6Locals),
) -> Result<(Action, NextHop), Punt> {
    let a = f.action;
    if a.intersects(ApplyAction::BUFF | ApplyAction::NOCP) {
        return Err(Punt::Buffering);
    }
    if a.contains(ApplyAction::DUPL) {
        return Err(Punt::Duplication);
    }
    if !(a & !(ApplyAction::DROP | ApplyAction::FORW)).is_empty() {
        return Err(Punt::ApplyAction(a));
    }
    if !a.contains(ApplyAction::FORW) {
        return Ok((Action::Drop, NextHop::default()));
    }
    let Some(fw) = &f.forwarding else {
        return Ok((Action::NoTarget, NextHop::default()));
    };
    if let Some(e) = fw.extra.get() {
        if e.forwarding_policy.is_some() || e.redirect.is_some() {
            return Err(Punt::Target("forwarding policy or redirect"));
        }
    }
    match (fw.destination, fw.outer_header_creation, uplink) {
        (Interface::Core | Interface::SgiLan, None, true) if strips => {
            if fw.transport_level_marking.is_some() {
                return Err(Punt::Target("transport level marking on N6"));
            }
            Ok((Action::ToN6, hops.n6))
        }
        (Interface::Access, None, _) => Ok((Action::NoTarget, NextHop::default())),
        // From N6 to the access side, or from a tunnel stripped (a tunnel in a tunnel is
        // the workers'). N9 leaves by N3's interface: the engine runs without an N9 one.
        (
            dest @ (Interface::Access | Interface::Core),
            Some(OuterHeaderCreation::Gtpu { teid, peer }),
            _,
        ) if if tunneled {
            strips
        } else {
            dest == Interface::Access
        } =>
        {
            let on_n9 = fw.tunnels_on_n9();
            if peer.is_ipv6() && !(if on_n9 { v6.n9 } else { v6.n3 }) {
                return Err(Punt::Ipv6("a tunnel from a side without an IPv6 address"));
            }
            let tos = fw.transport_level_marking.map_or(0, |(tos, _)| tos & 0xfc);
            Ok((
                Action::Encap {
                    peer,
                    teid: teid.0,
                    tos,
                    qfi,
                    rqi,
                    to_access: dest == Interface::Access,
                    on_n9,
                },
                hops.n3,
            ))
        }
        _ => Err(Punt::Target(
            "other than to N6 or into a GTP-U tunnel (from N6 to the access side, or stripped)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use upf_rules::*;

    const UE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const GNB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
    const HOPS: Hops = Hops {
        n3: NextHop {
            dst: [2, 0, 0, 0, 0, 3],
            src: [2, 0, 0, 0, 0, 1],
        },
        n6: NextHop {
            dst: [2, 0, 0, 0, 0, 6],
            src: [2, 0, 0, 0, 0, 1],
        },
    };

    /// Our N3 and N9 have IPv6 addresses.
    const V6: Ipv6Locals = Ipv6Locals { n3: true, n9: true };

    fn pdi(uplink: bool, teid: u32) -> Pdi {
        let mut pdi = Pdi::any(if uplink {
            Interface::Access
        } else {
            Interface::Core
        });
        pdi.local_f_teid = uplink.then_some(LocalFTeid {
            teid: Teid(teid),
            ipv4: Some(Ipv4Addr::new(192, 0, 2, 1)),
            ipv6: None,
        });
        pdi.ue_ip = Some(UeIp {
            ipv4: Some(UE),
            ipv6: None,
            is_destination: !uplink,
        });
        pdi
    }

    fn far(id: u32, tunnel: Option<(u32, Ipv4Addr)>) -> Far {
        let mut fw = Forwarding::to(if tunnel.is_some() {
            Interface::Access
        } else {
            Interface::Core
        });
        fw.outer_header_creation = tunnel.map(|(teid, peer)| OuterHeaderCreation::Gtpu {
            teid: Teid(teid),
            peer: IpAddr::V4(peer),
        });
        Far {
            id: FarId(id),
            action: ApplyAction::FORW,
            forwarding: Some(fw),
            duplicating: Box::default(),
            bar: None,
        }
    }

    /// Uplink PDR 1 (TEID 7, OHR) → FAR 1 to N6; downlink PDR 2 → FAR 2 into the gNB's
    /// tunnel; QER 1 (QFI 9) and URR 1 on both.
    fn session() -> Session {
        let mut s = Session::new(Seid(1), Seid(2), "192.0.2.9".parse().unwrap());
        for (id, uplink) in [(1u16, true), (2, false)] {
            s.insert_pdr(Pdr {
                id: PdrId(id),
                precedence: Precedence(100),
                pdi: pdi(uplink, 7),
                outer_header_removal: uplink.then_some(OuterHeaderRemoval::GtpuUdpIp {
                    delete_pdu_session_container: false,
                }),
                far: Some(FarId(u32::from(id))),
                qers: [QerId(1)].into_iter().collect(),
                urrs: [UrrId(1)].into_iter().collect(),
            })
            .unwrap();
        }
        s.insert_far(far(1, None)).unwrap();
        s.insert_far(far(2, Some((0x55, GNB)))).unwrap();
        let mut q = Qer::open(QerId(1));
        q.qfi = Some(Qfi(9));
        s.insert_qer(q).unwrap();
        let mut u = Urr::new(UrrId(1));
        u.method = MeasurementMethod::VOLUM;
        s.insert_urr(u).unwrap();
        s
    }

    #[test]
    fn dual_stack_session_is_found_by_its_slash_64_too() {
        let mut s = session();
        for id in [1, 2] {
            let pdi = &mut s.pdr_mut(PdrId(id)).unwrap().pdi;
            pdi.ue_ip.as_mut().unwrap().ipv6 = Some(("2001:db8:0:7::".parse().unwrap(), 64));
            pdi.sdf_filters = vec![SdfFilter {
                flow: Some(
                    FlowDescription::parse("permit out 17 from 2001:db8::/32 53 to assigned")
                        .unwrap(),
                ),
                ..SdfFilter::default()
            }]
            .into();
        }
        let c = compile(&s, &HOPS, V6).unwrap();
        let prefix: Ipv6Addr = "2001:db8:0:7::".parse().unwrap();
        assert_eq!(c.downlink.len(), 1);
        assert_eq!(c.downlink6.len(), 1);
        assert_eq!(c.downlink6[0].0, prefix);
        let p = &c.downlink6[0].1[0];
        assert_eq!(p.ue.unwrap().v6, Some(prefix));
        let f = p.sdf6[0].flow.unwrap();
        assert_eq!(f.proto, Some(17));
        assert_eq!(
            f.from.addr,
            CAddr6::Prefix("2001:db8::".parse().unwrap(), 32)
        );
        assert_eq!(f.from.ports, (53, 53));
        assert_eq!(f.to.addr, CAddr6::Assigned);
        // For IPv4 packets the IPv6 prefix holds nothing.
        assert_eq!(p.sdf[0].remote.addr, CAddr::None);
    }

    #[test]
    fn plain_session_compiles_to_a_teid_and_a_ue_address() {
        let c = compile(&session(), &HOPS, V6).unwrap();
        assert_eq!(c.uplink.len(), 1);
        let (teid, ul) = &c.uplink[0];
        assert_eq!(*teid, 7);
        assert_eq!(ul[0].action, Action::ToN6);
        assert_eq!(ul[0].hop, HOPS.n6);
        assert_eq!(
            ul[0].ue,
            Some(CUe {
                v4: Some(UE),
                v6: None,
                dst: false
            })
        );
        assert!(ul[0].uplink);
        assert_eq!(c.downlink.len(), 1);
        let (ue, dl) = &c.downlink[0];
        assert_eq!(*ue, UE);
        assert_eq!(
            dl[0].action,
            Action::Encap {
                peer: IpAddr::V4(GNB),
                teid: 0x55,
                tos: 0,
                qfi: Some(9),
                rqi: false,
                to_access: true,
                on_n9: false,
            }
        );
        assert_eq!(dl[0].hop, HOPS.n3);
        assert_eq!(c.urrs, vec![UrrId(1)]);
    }

    #[test]
    fn marks_gates_and_precedence_are_compiled() {
        let mut s = session();
        let q = s.qer_mut(QerId(1)).unwrap();
        q.rqi = true;
        q.gate_downlink = Gate::Closed;
        s.far_mut(FarId(2))
            .unwrap()
            .forwarding
            .as_mut()
            .unwrap()
            .transport_level_marking = Some((0xb9, 0xff));
        let mut p3 = s.pdr(PdrId(1)).unwrap().clone();
        p3.id = PdrId(3);
        p3.precedence = Precedence(50);
        p3.pdi.qfis = [Qfi(5)].into_iter().collect();
        p3.far = None;
        s.insert_pdr(p3).unwrap();
        let c = compile(&s, &HOPS, V6).unwrap();
        let ul = &c.uplink[0].1;
        assert_eq!(ul.iter().map(|p| p.id.0).collect::<Vec<_>>(), [3, 1]);
        assert_eq!(ul[0].qfis, 1 << 5);
        assert_eq!(ul[0].action, Action::Drop);
        assert!(!ul[1].gate_shut, "the uplink gate is open");
        let dl = &c.downlink[0].1[0];
        assert!(dl.gate_shut);
        assert_eq!(
            dl.action,
            Action::Encap {
                peer: IpAddr::V4(GNB),
                teid: 0x55,
                tos: 0xb8,
                qfi: Some(9),
                rqi: true,
                to_access: true,
                on_n9: false,
            }
        );
    }

    #[test]
    fn sdf_filters_are_seen_from_the_ue() {
        let mut s = session();
        let flow = |t: &str| SdfFilter {
            flow: Some(FlowDescription::parse(t).unwrap()),
            ..SdfFilter::default()
        };
        s.pdr_mut(PdrId(2)).unwrap().pdi.sdf_filters = vec![
            flow("permit out 17 from 198.51.100.0/24 53 to assigned"),
            flow("permit out ip from any to !10.0.0.0/8 1000-2000"),
            flow("deny out ip from any to any"),
            SdfFilter {
                tos: Some((0xb9, 0xfc)),
                spi: Some(7),
                ..SdfFilter::default()
            },
        ]
        .into();
        let c = compile(&s, &HOPS, V6).unwrap();
        let f = &c.downlink[0].1[0].sdf;
        let any = CAddr::Net {
            net: Ipv4Addr::UNSPECIFIED,
            mask: 0,
        };
        assert_eq!(f[0].proto, Some(17));
        assert_eq!(
            f[0].ue,
            CSide {
                addr: CAddr::Ue,
                negated: false,
                ports: (0, u16::MAX)
            }
        );
        assert_eq!(
            f[0].remote,
            CSide {
                addr: CAddr::Net {
                    net: Ipv4Addr::new(198, 51, 100, 0),
                    mask: 0xffff_ff00
                },
                negated: false,
                ports: (53, 53)
            }
        );
        // Neither end is the UE's: `out` makes the `to` end the UE's.
        assert_eq!(
            f[1].ue.addr,
            CAddr::Net {
                net: Ipv4Addr::new(10, 0, 0, 0),
                mask: 0xff00_0000
            }
        );
        assert!(f[1].ue.negated);
        assert_eq!(f[1].ue.ports, (1000, 2000));
        assert_eq!(f[1].remote.addr, any);
        assert!(f[2].never);
        assert_eq!(f[3].tos, (0xb8, 0xfc));
        // An SPI matches ESP packets; a flow label, no IPv4 packet.
        assert_eq!((f[3].spi, f[3].never), (Some(7), false));
        s.pdr_mut(PdrId(2)).unwrap().pdi.sdf_filters = vec![SdfFilter {
            flow_label: Some(1),
            ..SdfFilter::default()
        }]
        .into();
        let c = compile(&s, &HOPS, V6).unwrap();
        assert!(c.downlink[0].1[0].sdf[0].never);
    }

    #[test]
    fn mbrs_are_buckets_per_qer_and_direction_shared_by_the_pdrs() {
        let mut s = session();
        // QER 1 on both PDRs: 8 kbit/s up, none down; QER 2 (as a session AMBR) on both:
        // 1 Mbit/s down, 100 ms window.
        s.qer_mut(QerId(1)).unwrap().mbr = Some(Bitrate {
            uplink_kbps: 8,
            downlink_kbps: 0,
        });
        let mut ambr = Qer::open(QerId(2));
        ambr.mbr = Some(Bitrate {
            uplink_kbps: 0,
            downlink_kbps: 1000,
        });
        ambr.averaging_window_ms = Some(100);
        s.insert_qer(ambr).unwrap();
        let mut p3 = s.pdr(PdrId(2)).unwrap().clone();
        p3.id = PdrId(3);
        p3.precedence = Precedence(200);
        s.insert_pdr(p3).unwrap();
        for id in [1, 2, 3] {
            s.pdr_mut(PdrId(id)).unwrap().qers = [QerId(1), QerId(2)].into_iter().collect();
        }
        let c = compile(&s, &HOPS, V6).unwrap();
        let tick = 1u64 << 24;
        assert_eq!(
            c.buckets,
            vec![
                // 2 s of 8 kbit/s is 16,000 bits; a bit takes 125 µs.
                CBucket {
                    qer: QerId(1),
                    uplink: true,
                    cost: 125_000 * tick,
                    depth: 16_000 * 125_000 * tick
                },
                // 100 ms of 1 Mbit/s is 100,000 bits.
                CBucket {
                    qer: QerId(2),
                    uplink: false,
                    cost: 1000 * tick,
                    depth: 100_000 * 1000 * tick
                },
            ]
        );
        assert_eq!(c.uplink[0].1[0].mbrs, vec![0]);
        let dl = &c.downlink[0].1;
        assert_eq!((dl[0].mbrs.clone(), dl[1].mbrs.clone()), (vec![1], vec![1]));
        // A tiny rate still holds one full-size packet (12,000 bits).
        s.qer_mut(QerId(1)).unwrap().mbr = Some(Bitrate {
            uplink_kbps: 1,
            downlink_kbps: 0,
        });
        let b = compile(&s, &HOPS, V6).unwrap().buckets[0];
        assert_eq!(b.depth, 12_000 * b.cost);
        // A modified rate keeps the tokens left: half of 16,000 bits at 8 kbit/s is half
        // of the 12,000-bit bucket at 1 kbit/s, 4,000 bits short of full.
        let old = c.buckets[0];
        assert_eq!(b.carry(&old, old.depth / 2), 4000 * b.cost);
    }

    #[test]
    fn volume_quotas_are_enforced_on_the_pdrs_that_count_in_them() {
        let mut s = session();
        let q = VolumeLimit {
            total: None,
            uplink: Some(1000),
            downlink: Some(0),
        };
        s.urr_mut(UrrId(1)).unwrap().volume_quota = Some(q);
        let mut u2 = Urr::new(UrrId(2));
        u2.method = MeasurementMethod::VOLUM;
        s.insert_urr(u2).unwrap();
        s.pdr_mut(PdrId(2)).unwrap().urrs = [UrrId(2)].into_iter().collect();
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(c.quotas, vec![(UrrId(1), q)]);
        assert!(c.uplink[0].1[0].quota);
        assert!(!c.downlink[0].1[0].quota, "URR 2 has none");
        assert!(c.volqu.is_empty(), "no VOLQU: enforced, not reported");
    }

    #[test]
    fn volume_thresholds_and_quotas_are_reported_when_their_triggers_ask() {
        let mut s = session();
        let t = VolumeLimit {
            total: Some(3000),
            uplink: None,
            downlink: Some(100),
        };
        let u = s.urr_mut(UrrId(1)).unwrap();
        u.volume_threshold = Some(t);
        // Without VOLTH the threshold is not reported (UrrState::update): nothing counted
        // under the lock.
        let c = compile(&s, &HOPS, V6).unwrap();
        assert!(c.thresholds.is_empty());
        assert!(!c.uplink[0].1[0].quota && !c.downlink[0].1[0].quota);
        let u = s.urr_mut(UrrId(1)).unwrap();
        u.triggers = ReportingTriggers::VOLTH | ReportingTriggers::VOLQU;
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(c.thresholds, vec![(UrrId(1), t)]);
        assert!(c.volqu.is_empty(), "VOLQU without a quota reports nothing");
        assert!(c.uplink[0].1[0].quota && c.downlink[0].1[0].quota);
        s.urr_mut(UrrId(1)).unwrap().volume_quota = Some(t);
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(c.volqu, vec![UrrId(1)]);
    }

    #[test]
    fn forwarding_to_access_without_a_tunnel_has_no_target() {
        let mut s = session();
        s.far_mut(FarId(2))
            .unwrap()
            .forwarding
            .as_mut()
            .unwrap()
            .outer_header_creation = None;
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(c.downlink[0].1[0].action, Action::NoTarget);
        s.far_mut(FarId(2)).unwrap().action = ApplyAction::DROP;
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(c.downlink[0].1[0].action, Action::Drop);
    }

    #[test]
    fn ipv6_peers_are_tunnels_from_our_ipv6_address_on_their_side() {
        let gnb6: IpAddr = "2001:db8::100".parse().unwrap();
        let upf6: IpAddr = "2001:db8:9::1".parse().unwrap();
        let mut s = session();
        let fw = s.far_mut(FarId(2)).unwrap().forwarding.as_mut().unwrap();
        fw.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
            teid: Teid(0x55),
            peer: gnb6,
        });
        // Uplink into another UPF's tunnel (N9) instead of to N6.
        let mut n9 = Forwarding::to(Interface::Core);
        n9.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
            teid: Teid(0x66),
            peer: upf6,
        });
        s.far_mut(FarId(1)).unwrap().forwarding = Some(n9);
        let c = compile(&s, &HOPS, V6).unwrap();
        assert_eq!(
            c.downlink[0].1[0].action,
            Action::Encap {
                peer: gnb6,
                teid: 0x55,
                tos: 0,
                qfi: Some(9),
                rqi: false,
                to_access: true,
                on_n9: false,
            }
        );
        assert!(matches!(
            c.uplink[0].1[0].action,
            Action::Encap { peer, on_n9: true, to_access: false, .. } if peer == upf6
        ));
        // Without our IPv6 address on a tunnel's side, the session is the workers'.
        let why = Err(Punt::Ipv6("a tunnel from a side without an IPv6 address"));
        let n3_only = Ipv6Locals {
            n3: true,
            n9: false,
        };
        assert_eq!(compile(&s, &HOPS, n3_only), why);
        s.far_mut(FarId(1)).unwrap().forwarding = Some(Forwarding::to(Interface::Core));
        assert!(compile(&s, &HOPS, n3_only).is_ok());
        let n9_only = Ipv6Locals {
            n3: false,
            n9: true,
        };
        assert_eq!(compile(&s, &HOPS, n9_only), why);
    }

    #[test]
    fn what_the_program_does_not_run_is_punted() {
        type Change = fn(&mut Session);
        let cases: &[(Change, Punt)] = &[
            (
                |s| s.far_mut(FarId(2)).unwrap().action = ApplyAction::BUFF | ApplyAction::NOCP,
                Punt::Buffering,
            ),
            (
                |s| s.far_mut(FarId(2)).unwrap().action = ApplyAction::FORW | ApplyAction::DUPL,
                Punt::Duplication,
            ),
            (
                |s| {
                    s.qer_mut(QerId(1)).unwrap().gbr = Some(Bitrate {
                        uplink_kbps: 1,
                        downlink_kbps: 1,
                    })
                },
                Punt::Qos("GBR"),
            ),
            (
                |s| {
                    s.pdr_mut(PdrId(2)).unwrap().pdi.ue_ip = Some(UeIp {
                        ipv4: None,
                        ipv6: Some(("2001:db8::".parse().unwrap(), 56)),
                        is_destination: true,
                    })
                },
                Punt::Ipv6("a UE prefix other than a /64"),
            ),
            (
                |s| {
                    for (id, p) in [(1, "2001:db8:0:1::"), (2, "2001:db8:0:2::")] {
                        let u = s.pdr_mut(PdrId(id)).unwrap().pdi.ue_ip.as_mut().unwrap();
                        u.ipv6 = Some((p.parse().unwrap(), 64));
                    }
                },
                Punt::Ipv6("two UE prefixes"),
            ),
            (
                |s| {
                    let p = &mut s.pdr_mut(PdrId(2)).unwrap().pdi;
                    p.ue_ip = Some(UeIp {
                        ipv4: None,
                        ipv6: Some(("2001:db8::".parse().unwrap(), 64)),
                        is_destination: true,
                    });
                    p.framed_routes = vec![FramedRoute::parse("10.9.0.0/16").unwrap()].into();
                },
                Punt::FramedRoutes("a UE IP without an IPv4 address"),
            ),
            (
                |s| {
                    s.pdr_mut(PdrId(2)).unwrap().pdi.framed_routes =
                        vec![FramedRoute::parse("2001:db8::/48").unwrap()].into()
                },
                Punt::Ipv6("framed route"),
            ),
            (
                |s| {
                    let p = &mut s.pdr_mut(PdrId(2)).unwrap().pdi;
                    p.framed_routes = vec![FramedRoute::parse("10.9.0.0/16").unwrap()].into();
                    // Holds the UE address (10.0.0.1), not the routed ones.
                    p.sdf_filters = vec![SdfFilter {
                        flow: Some(
                            FlowDescription::parse("permit out ip from any to 10.0.0.0/24")
                                .unwrap(),
                        ),
                        ..SdfFilter::default()
                    }]
                    .into();
                },
                Punt::FramedRoutes("an SDF prefix that tells the UE address from a routed one"),
            ),
            (
                |s| {
                    s.pdr_mut(PdrId(1)).unwrap().pdi.sdf_filters =
                        vec![SdfFilter::default(); 5].into()
                },
                Punt::TooMany("SDF filters"),
            ),
            (
                |s| {
                    s.far_mut(FarId(2))
                        .unwrap()
                        .forwarding
                        .as_mut()
                        .unwrap()
                        .outer_header_creation = Some(OuterHeaderCreation::Gtpu {
                        teid: Teid(1),
                        peer: "2001:db8::1".parse().unwrap(),
                    })
                },
                Punt::Ipv6("a tunnel from a side without an IPv6 address"),
            ),
            (
                |s| s.urr_mut(UrrId(1)).unwrap().triggers = ReportingTriggers::START,
                Punt::Urr("reporting triggers other than periodic or volume"),
            ),
            (
                |s| {
                    let u = s.urr_mut(UrrId(1)).unwrap();
                    u.triggers = ReportingTriggers::VOLTH | ReportingTriggers::TIMTH;
                    u.time_threshold_s = Some(10);
                },
                Punt::Urr("reporting triggers other than periodic or volume"),
            ),
            (
                |s| s.urr_mut(UrrId(1)).unwrap().time_threshold_s = Some(10),
                Punt::Urr("time thresholds, time quotas or times"),
            ),
            (
                |s| s.urr_mut(UrrId(1)).unwrap().time_quota_s = Some(10),
                Punt::Urr("time thresholds, time quotas or times"),
            ),
            (
                |s| s.pdr_mut(PdrId(1)).unwrap().outer_header_removal = None,
                Punt::Target(
                    "other than to N6 or into a GTP-U tunnel (from N6 to the access side, or stripped)",
                ),
            ),
            (|s| s.inactivity_timer_s = Some(10), Punt::InactivityTimer),
            (
                |s| {
                    for id in 3..=6 {
                        let mut p = s.pdr(PdrId(2)).unwrap().clone();
                        p.id = PdrId(id);
                        s.insert_pdr(p).unwrap();
                    }
                },
                Punt::TooMany("PDRs"),
            ),
            (
                |s| {
                    for id in 3..=4 {
                        let mut p = s.pdr(PdrId(1)).unwrap().clone();
                        p.id = PdrId(id);
                        p.pdi.local_f_teid.as_mut().unwrap().teid = Teid(u32::from(id));
                        s.insert_pdr(p).unwrap();
                    }
                },
                Punt::TooMany("TEIDs"),
            ),
        ];
        for (i, (change, why)) in cases.iter().enumerate() {
            let mut s = session();
            change(&mut s);
            let none = Ipv6Locals::default();
            assert_eq!(compile(&s, &HOPS, none), Err(*why), "case {i}");
        }
    }
}
