//! A session compiled for one worker: PDRs split by how packets reach them (GTP-U by TEID, or
//! plain IP by UE address) and sorted by precedence, each carrying the slots of its FAR, QERs
//! and URRs; the FAR/QER/URR state (buffers, meters, counters) lives beside them.

use crate::budgets::{Draws, SessionBudgets};
use crate::fast::Template;
use crate::filter::{FastFilter, Filter};
use crate::flow::{Addr, Flow, Prefix};
use crate::meter::{PacketBucket, TokenBucket, DEFAULT_WINDOW};
use crate::netinst::{NetworkInstances, DEFAULT_INSTANCE};
use crate::usage::UrrState;
use crate::LocalAddrs;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_packet::{Packet, Port};
use upf_rules::{
    ApplyAction, DatapathError, DatapathEvent, Far, FarId, Gate, Interface, OuterHeaderCreation,
    OuterHeaderRemoval, Pdr, PdrId, Qer, QerId, RuleRef, Seid, Session,
};

/// How many header octets a PDR's Outer Header Removal strips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strip {
    None,
    /// Outer IP + UDP + GTP-U (with extensions).
    Gtpu,
}

#[derive(Debug, Clone)]
pub(crate) struct UeMatch {
    v4: Option<u32>,
    v6: Option<Prefix>,
    is_destination: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct CPdr {
    pub id: PdrId,
    pub teid: Option<u32>,
    /// Bit per allowed QFI; 0: any.
    qfis: u64,
    /// Fast form: the PDI's UE address is this IPv4 address (or there is none) and every SDF
    /// filter is a [`FastFilter`]; `slow` is set otherwise and is then what decides.
    ue_v4: Option<u32>,
    ue_is_destination: bool,
    fast: SmallVec<[FastFilter; 4]>,
    /// The full SDF filters, when the fast form cannot express this PDR (IPv6 UE prefixes,
    /// framed routes, IPv6 prefixes, negation, port lists, SPI or flow label in a filter);
    /// matching then also checks `ue` and `framed` in full.
    slow: Option<Box<[Filter]>>,
    /// Packets matching come from the UE (uplink).
    pub from_ue: bool,
    pub strip: Strip,
    pub far: Option<u16>,
    pub qers: SmallVec<[u16; 2]>,
    pub urrs: SmallVec<[u16; 2]>,
    /// One of its QERs has a packet rate, or draws on a shared bucket, in its direction:
    /// the one test the packets of other PDRs pay for both.
    pub packet_rate: bool,
    /// One of its QERs has a Guaranteed Bit Rate: its packets are a GBR QoS flow's, which
    /// priority processing serves ahead of non-GBR traffic of its class (issue #28).
    pub gbr: bool,
    /// The UE addresses and routes: the downlink table's keys, and the slow form's match.
    ue: Option<UeMatch>,
    framed: Vec<Prefix>,
    /// Its PDI's Network Instance, resolved: the instance its UE addresses are keyed in
    /// (none: the default), and, for a PDR matched by UE address (from N6), the only
    /// instance whose packets it matches (none: any).
    pub instance: Option<u8>,
}

impl CPdr {
    /// Whether it has UE addresses or routes to be keyed by.
    fn keyed(&self) -> bool {
        self.ue.is_some() || !self.framed.is_empty()
    }

    /// The network instance its UE addresses are keyed in.
    fn key_instance(&self) -> u8 {
        self.instance.unwrap_or(DEFAULT_INSTANCE)
    }

    /// The fast form decides (no slow filters) and the UE address, if any, is one IPv4 one.
    pub fn fast_form(&self) -> bool {
        self.slow.is_none() && self.framed.is_empty()
    }
    pub fn qfis(&self) -> u64 {
        self.qfis
    }
    pub fn fast_filters(&self) -> &[FastFilter] {
        &self.fast
    }
    pub fn ue_v4(&self) -> Option<u32> {
        self.ue_v4
    }
    pub fn ue_is_destination(&self) -> bool {
        self.ue_is_destination
    }

    #[inline(always)]
    fn prefetch(&self) {
        use crate::prefetch::{line, past};
        line(&self.teid);
        line(&self.qfis);
        line(&self.ue_v4);
        line(&self.slow);
        line(&self.far);
        line(&self.from_ue);
        line(&self.qers);
        past(&self.qers);
        line(&self.urrs);
        past(&self.urrs);
        line(&self.fast);
        past(&self.fast);
    }

    #[inline]
    fn matches(&self, teid: Option<u32>, qfi: Option<u8>, instance: Option<u8>, f: &Flow) -> bool {
        if self.teid.is_some() && self.teid != teid {
            return false;
        }
        if let (Some(want), Some(have)) = (self.instance, instance) {
            if want != have {
                return false;
            }
        }
        if self.qfis != 0 && !qfi.is_some_and(|q| q < 64 && self.qfis & (1 << q) != 0) {
            return false;
        }
        if let Some(filters) = &self.slow {
            return self.matches_slow(filters, f);
        }
        if let Some(ue) = self.ue_v4 {
            let a = if self.ue_is_destination { f.dst } else { f.src };
            if a.v6 || a.bits != u128::from(ue) {
                return false;
            }
        }
        self.fast.is_empty() || self.fast.iter().any(|x| x.matches(f, self.from_ue))
    }

    /// The full matcher, as `upf_rules::Pdr::matches` decides.
    fn matches_slow(&self, filters: &[Filter], f: &Flow) -> bool {
        let ue = match &self.ue {
            Some(ue) => {
                let a = if ue.is_destination { f.dst } else { f.src };
                let own = if a.v6 {
                    ue.v6.is_some_and(|p| p.contains(a))
                } else {
                    ue.v4.is_some_and(|v| u128::from(v) == a.bits)
                };
                if !own && !self.framed.iter().any(|p| p.contains(a)) {
                    return false;
                }
                Some(a)
            }
            None => None,
        };
        filters.is_empty() || filters.iter().any(|x| x.matches(f, self.from_ue, ue))
    }
}

/// Where a FAR (or one of its duplications) sends packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub port: Port,
    /// On N6: the network instance whose N6 it leaves by (0 elsewhere).
    pub instance: u8,
    pub encap: Option<Tunnel>,
    /// For an IPv4 tunnel: its header without and with a PDU Session Container.
    pub templates: Option<[Template; 2]>,
    /// Outer ToS/Traffic Class from Transport Level Marking.
    pub tos: Option<u8>,
    /// The UE side of this target (Access): downlink PSC; otherwise uplink PSC on N9.
    pub to_access: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tunnel {
    pub teid: u32,
    pub src: Addr,
    pub dst: Addr,
}

#[derive(Debug)]
pub(crate) struct CFar {
    pub id: FarId,
    pub action: ApplyAction,
    pub target: Option<Target>,
    pub dup: Vec<Target>,
    /// Packets held while the action is BUFF (TS 29.244 §5.2.4.1), with when each came.
    pub buffer: VecDeque<(Instant, Packet)>,
    pub max_buffered: usize,
    /// A downlink-data event was raised for the current buffering period.
    pub notified: bool,
    /// A packet found the buffer full (and asked for the hot record to be rebuilt, which
    /// drops further ones in O(1)); cleared when a packet is buffered again.
    pub full_seen: bool,
    /// A packet was refused for the worker's buffer budget (`PipelineConfig::buffer_bytes`)
    /// rather than the FAR's own limit: the hot path drops further ones until the budget
    /// falls to its low-water mark (`Pipeline::over_budget`) or the FAR is recompiled.
    pub over_budget: bool,
}

/// A QER's packet-rate buckets, per direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PacketRates {
    pub ul: Option<PacketBucket>,
    pub dl: Option<PacketBucket>,
}

#[derive(Debug, Clone)]
pub(crate) struct QerState {
    pub id: QerId,
    pub gate_ul: bool,
    pub gate_dl: bool,
    pub mbr_ul: Option<TokenBucket>,
    pub mbr_dl: Option<TokenBucket>,
    /// Packet Rate buckets (§8.2.68), boxed: a QER without them keeps 8 octets for them.
    /// Always the compiled session's, also while it is hot: the hot path comes here for the
    /// PDRs that have one.
    pub packet_rates: Option<Box<PacketRates>>,
    /// Octets sent within the guaranteed bit rate (accounting only).
    pub gbr: Option<(u64, u64)>,
    pub gbr_bytes: u64,
    pub qfi: Option<u8>,
    pub rqi: bool,
    pub ppi: Option<u8>,
    /// Buckets shared with other workers or sessions that it draws from: a session on
    /// several workers polices its rates there instead of in its own buckets, and a QER
    /// with a Correlation ID its aggregate too. Boxed: most QERs have none.
    pub draws: Option<Box<Draws>>,
}

impl QerState {
    fn new(now: u64, q: &Qer, env: &CompileEnv) -> Self {
        let window = q
            .averaging_window_ms
            .map_or(DEFAULT_WINDOW, |ms| Duration::from_millis(ms.into()));
        let mut draws = Draws::default();
        let shared = env.budgets.and_then(|b| b.qer(q.id));
        let draw = |r: &Arc<upf_rules::budget::SharedRate>| {
            upf_rules::budget::Draw::new(r.clone(), env.epoch)
        };
        if let Some(b) = shared {
            for k in 0..2 {
                draws.bits[k].extend(b.bits[k].as_ref().map(draw));
                draws.packets[k] = b.packets[k].as_ref().map(draw);
            }
        }
        // The Correlation ID's aggregate, each way it has a rate.
        let at = env.epoch + Duration::from_nanos(env.clock);
        if let Some(a) = env.aggregates.get(at, q) {
            for (k, r) in [(0, &a.0.downlink), (1, &a.0.uplink)] {
                if r.rate().0 > 0 {
                    draws.bits[k].push(draw(r));
                }
            }
            draws.aggregate = Some(a);
        }
        let bucket = |kbps: u64| {
            (kbps > 0 && shared.is_none()).then(|| TokenBucket::new(now, kbps * 1000, window))
        };
        let packets =
            |rate: Option<(u16, u32)>| rate.map(|(n, per_s)| PacketBucket::new(now, n, per_s));
        let packet_rates = q
            .packet_rate
            .filter(|r| (r.uplink.is_some() || r.downlink.is_some()) && shared.is_none())
            .map(|r| {
                Box::new(PacketRates {
                    ul: packets(r.uplink),
                    dl: packets(r.downlink),
                })
            });
        Self {
            id: q.id,
            gate_ul: q.gate_uplink == Gate::Open,
            gate_dl: q.gate_downlink == Gate::Open,
            mbr_ul: q.mbr.and_then(|m| bucket(m.uplink_kbps)),
            mbr_dl: q.mbr.and_then(|m| bucket(m.downlink_kbps)),
            packet_rates,
            gbr: q.gbr.map(|g| (g.uplink_kbps, g.downlink_kbps)),
            gbr_bytes: 0,
            qfi: q.qfi.map(|q| q.0),
            rqi: q.rqi,
            ppi: q.ppi,
            draws: (draws.bits.iter().any(|d| !d.is_empty())
                || draws.packets.iter().any(Option::is_some))
            .then(|| Box::new(draws)),
        }
    }

    /// The MBR bucket of the packet's direction, if the QER has one.
    #[inline(always)]
    pub fn mbr(&mut self, uplink: bool) -> Option<&mut TokenBucket> {
        if uplink {
            self.mbr_ul.as_mut()
        } else {
            self.mbr_dl.as_mut()
        }
    }

    /// The packet-rate bucket of the packet's direction, if the QER has one.
    #[inline(always)]
    pub fn packets(&mut self, uplink: bool) -> Option<&mut PacketBucket> {
        let r = self.packet_rates.as_deref_mut()?;
        if uplink {
            r.ul.as_mut()
        } else {
            r.dl.as_mut()
        }
    }

    /// Keeps the buckets' fill level across a modification.
    fn carry(&mut self, old: &QerState) {
        self.gbr_bytes = old.gbr_bytes;
        if let (Some(new), Some(old)) = (&mut self.draws, &old.draws) {
            new.carry(old);
        }
        if let (Some(new), Some(old)) = (&mut self.packet_rates, &old.packet_rates) {
            for (new, old) in [(&mut new.ul, &old.ul), (&mut new.dl, &old.dl)] {
                if let (Some(n), Some(o)) = (new.as_mut(), old) {
                    let mut keep = *o;
                    keep.set_rate_from(n);
                    *n = keep;
                }
            }
        }
        for (new, old) in [
            (&mut self.mbr_ul, &old.mbr_ul),
            (&mut self.mbr_dl, &old.mbr_dl),
        ] {
            if let (Some(n), Some(o)) = (new.as_mut(), old) {
                let mut keep = *o;
                keep.set_rate_from(n);
                *n = keep;
            }
        }
    }
}

/// One session as one worker holds it.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub seid: Seid,
    pub rules: Arc<Session>,
    // Inline: a typical session's rules and state sit in its slot, one contiguous record,
    // instead of behind five pointers.
    pub gtp_pdrs: SmallVec<[CPdr; 2]>,
    pub ip_pdrs: SmallVec<[CPdr; 2]>,
    pub fars: SmallVec<[CFar; 2]>,
    pub qers: SmallVec<[QerState; 3]>,
    pub urrs: SmallVec<[UrrState; 2]>,
    /// Some URR has a FAR ID for Quota Action (§5.2.2.3.1): such sessions stay cold, and
    /// the general path looks for an exhausted URR's quota FAR before the PDR's FAR.
    pub quota_fars: bool,
    pub inactivity: Option<Duration>,
    pub last_packet: Instant,
    pub inactive_reported: bool,
    /// An Error Indication for one of its tunnels was reported since it was (re)installed:
    /// later ones are not (a peer sending them at line rate would queue a report each).
    pub error_indication_reported: bool,
    /// Every packet that reaches it by UE address passes its IP PDRs' Network Instance
    /// test: its UE addresses are keyed in one instance, and its IP PDRs name that one or
    /// none. The hot path, which does not test it, requires this.
    pub one_instance: bool,
    /// The BAR's Downlink Data Notification Delay (§8.2.28).
    pub notification_delay: Duration,
    /// A Downlink Data Report held for that delay: when it is due, the FAR whose buffering
    /// raised it, and the report. Sent only if that FAR still buffers and notifies then (a
    /// FAR set to forward in the meantime, the UE having answered, cancels it).
    pub delayed_report: Option<(Instant, FarId, DatapathEvent)>,
    /// How long a packet may stay buffered (the BAR's DL Buffering Duration).
    pub buffer_for: Option<Duration>,
    /// A digest of its URRs' unreported usage at the last usage checkpoint read
    /// (`Pipeline::unreported_changed`); 0: never read.
    pub usage_mark: u64,
}

/// What compiling needs to know about this UPF.
#[derive(Debug, Clone)]
pub(crate) struct CompileEnv<'a> {
    pub n3: &'a LocalAddrs,
    pub n9: &'a LocalAddrs,
    /// `PipelineConfig::tunnel_source_per_session`.
    pub tunnel_source_per_session: bool,
    pub buffer_packets: usize,
    /// The buckets shared with the other workers the session lives on, if several.
    pub budgets: Option<&'a SessionBudgets>,
    pub outer_ttl: u8,
    /// The network instances rules' names resolve to.
    pub instances: &'a NetworkInstances,
    /// The QER Correlation IDs' aggregates.
    pub aggregates: &'a crate::budgets::Aggregates,
    /// `now` on the pipeline's clock (nanoseconds since `epoch`), for the meters.
    pub clock: u64,
    pub epoch: Instant,
}

fn unsupported(what: &'static str) -> DatapathError {
    DatapathError::Unsupported(what)
}

impl Compiled {
    pub fn compile(now: Instant, s: Arc<Session>, env: &CompileEnv) -> Result<Self, DatapathError> {
        let (n3, n9) = if env.tunnel_source_per_session {
            (own_addrs(&s, false, env.n3), own_addrs(&s, true, env.n9))
        } else {
            (*env.n3, *env.n9)
        };
        let env = &CompileEnv {
            n3: &n3,
            n9: &n9,
            ..env.clone()
        };
        let slot = |n: usize| u16::try_from(n).map_err(|_| DatapathError::NoResources("rules"));
        let far_slot = |id: FarId| s.fars.iter().position(|f| f.id == id);
        let mut gtp = Vec::new();
        let mut ip = Vec::new();
        for p in &s.pdrs {
            let c = compile_pdr(&s, p, &far_slot, &slot, env.instances)?;
            if c.teid.is_some() {
                gtp.push((p.precedence, c));
            } else {
                ip.push((p.precedence, c));
            }
        }
        // TS 29.244 §5.2.1: the PDR with the highest precedence (lowest value) wins; equal
        // precedences keep rule order (stable sort).
        gtp.sort_by_key(|(p, _)| *p);
        ip.sort_by_key(|(p, _)| *p);
        let buffer_packets = s
            .bar
            .as_ref()
            .and_then(|b| b.suggested_buffering_packets)
            .map_or(env.buffer_packets, |n| {
                usize::from(n).min(env.buffer_packets)
            });
        // Extended buffering may ask for more (or fewer) than the BAR's count, within the
        // UPF's own bound.
        let buffer_packets = s
            .bar
            .as_ref()
            .and_then(|b| b.dl_buffering_packets)
            .map_or(buffer_packets, |n| usize::from(n).min(env.buffer_packets));
        let fars = s
            .fars
            .iter()
            .map(|f| compile_far(f, env, buffer_packets))
            .collect::<Result<SmallVec<_>, _>>()?;
        let qers: SmallVec<[QerState; 3]> = s
            .qers
            .iter()
            .map(|q| QerState::new(env.clock, q, env))
            .collect();
        // A PDR whose QERs draw on shared buckets takes them where it takes packet rates.
        for (_, p) in gtp.iter_mut().chain(ip.iter_mut()) {
            let drawn = |&q: &u16| {
                let d = qers.get(usize::from(q)).and_then(|q| q.draws.as_deref());
                d.is_some_and(|d| d.any(p.from_ue))
            };
            p.packet_rate |= p.qers.iter().any(drawn);
        }
        let mut keyed = gtp.iter().chain(&ip).filter(|(_, c)| c.keyed());
        let key = keyed.next().map(|(_, c)| c.key_instance());
        let one_instance = keyed.all(|(_, c)| Some(c.key_instance()) == key)
            && ip
                .iter()
                .all(|(_, c)| c.instance.is_none() || c.instance == key);
        Ok(Self {
            one_instance,
            seid: s.seid,
            gtp_pdrs: gtp.into_iter().map(|(_, c)| c).collect(),
            ip_pdrs: ip.into_iter().map(|(_, c)| c).collect(),
            fars,
            qers,
            urrs: s
                .urrs
                .iter()
                .map(|u| {
                    let mut c = UrrState::new(now, u);
                    c.shared = env
                        .budgets
                        .and_then(|b| b.urr(u.id))
                        .map(|b| Box::new(b.draw()));
                    c.quota_far = u
                        .far_for_quota_action()
                        .and_then(far_slot)
                        .and_then(|i| u16::try_from(i).ok());
                    c
                })
                .collect(),
            quota_fars: s.urrs.iter().any(|u| u.far_for_quota_action().is_some()),
            inactivity: s
                .inactivity_timer_s
                .filter(|&t| t > 0)
                .map(|t| Duration::from_secs(t.into())),
            last_packet: now,
            inactive_reported: false,
            error_indication_reported: false,
            notification_delay: Duration::from_millis(
                s.bar
                    .as_ref()
                    .map_or(0, |b| u64::from(b.downlink_data_notification_delay_ms)),
            ),
            delayed_report: None,
            buffer_for: s
                .bar
                .as_ref()
                .and_then(|b| b.dl_buffering_duration_s)
                .map(Duration::from_secs),
            usage_mark: 0,
            rules: s,
        })
    }

    /// Moves measurement, policing and buffering state of rules that survive from `old`.
    /// Returns the usage of URRs that disappeared (reported with TERMR by the caller) and the
    /// buffered packets of FARs that disappeared.
    pub fn carry_from(&mut self, now: Instant, old: &mut Compiled) -> (Vec<UrrState>, Vec<Packet>) {
        for q in &mut self.qers {
            if let Some(o) = old.qers.iter().find(|o| o.id == q.id) {
                q.carry(o);
            }
        }
        let mut gone_urrs = Vec::new();
        for o in old.urrs.drain(..) {
            match self.urrs.iter_mut().find(|u| u.id == o.id) {
                Some(u) => {
                    let rule = self.rules.urrs.iter().find(|r| r.id == o.id);
                    // The quota FAR is an index into this session's FARs.
                    let (quota_far, mut shared) = (u.quota_far, u.shared.take());
                    *u = o;
                    u.quota_far = quota_far;
                    if let Some(r) = rule {
                        u.update(now, r);
                    }
                    // What it leased of shared volumes it still draws on comes along.
                    if let Some(d) = &mut shared {
                        d.carry(u.shared.as_deref());
                    }
                    u.shared = shared;
                }
                None => gone_urrs.push(o),
            }
        }
        let mut orphans = Vec::new();
        for o in &mut old.fars {
            match self.fars.iter_mut().find(|f| f.id == o.id) {
                Some(f) => {
                    f.buffer = std::mem::take(&mut o.buffer);
                    // A FAR still buffering keeps its notification state; a changed action
                    // starts a new buffering period.
                    f.notified = o.notified && f.action == o.action;
                }
                None => orphans.extend(o.buffer.drain(..).map(|(_, p)| p)),
            }
        }
        self.last_packet = old.last_packet;
        self.inactive_reported = old.inactive_reported;
        self.delayed_report = old
            .delayed_report
            .take()
            .filter(|(_, far, _)| self.fars.iter().any(|f| f.id == *far && f.notified));
        (gone_urrs, orphans)
    }

    /// Prefetch step 2 of 4 (the record's first line arrived): the rule lists' first lines and
    /// the lines holding their capacity words.
    #[inline(always)]
    pub fn prefetch_lists(&self) {
        use crate::prefetch::{line, past};
        line(&self.gtp_pdrs);
        past(&self.gtp_pdrs);
        line(&self.ip_pdrs);
        past(&self.ip_pdrs);
        line(&self.fars);
        past(&self.fars);
        line(&self.qers);
        past(&self.qers);
        line(&self.urrs);
        past(&self.urrs);
        line(&self.last_packet);
    }

    /// Prefetch step 3 of 4: the fields of the rules that processing reads.
    #[inline(always)]
    pub fn prefetch_rules(&self) {
        use crate::prefetch::{line, past};
        for p in self.gtp_pdrs.iter().chain(self.ip_pdrs.iter()).take(4) {
            p.prefetch();
        }
        for f in self.fars.iter().take(2) {
            line(&f.action);
            line(&f.target);
            past(&f.target);
            line(&f.dup);
        }
        for q in self.qers.iter().take(3) {
            line(&q.gate_ul);
            line(&q.mbr_ul);
            line(&q.mbr_dl);
            line(&q.qfi);
            line(&q.gbr);
        }
        for u in self.urrs.iter().take(2) {
            u.prefetch();
        }
    }

    /// Prefetch step 4 of 4: the SDF filters of the first PDRs and the FARs' targets.
    #[inline(always)]
    pub fn prefetch_filters(&self) {
        use crate::prefetch::line;
        for f in self.fars.iter().take(2) {
            if let Some(t) = &f.target {
                line(&t.encap);
                line(&t.templates);
                line(&t.port);
            }
        }
        for p in self.gtp_pdrs.iter().chain(self.ip_pdrs.iter()).take(4) {
            for k in (0..p.fast.len().min(4)).step_by(2) {
                upf_prefetch::l1(&p.fast, k);
            }
        }
    }

    /// The index of the first PDR (by precedence) in `pdrs` that matches; `instance`: the
    /// network instance of the N6 the packet came in on (none: it came by a tunnel).
    #[inline]
    pub fn classify(
        pdrs: &[CPdr],
        teid: Option<u32>,
        qfi: Option<u8>,
        instance: Option<u8>,
        f: &Flow,
    ) -> Option<usize> {
        pdrs.iter().position(|p| p.matches(teid, qfi, instance, f))
    }

    /// Whether a PDR of it has a GBR QER.
    pub fn has_gbr(&self) -> bool {
        self.gtp_pdrs.iter().chain(&self.ip_pdrs).any(|p| p.gbr)
    }

    /// Local TEIDs this session receives on.
    pub fn teids(&self) -> impl Iterator<Item = u32> + '_ {
        self.gtp_pdrs.iter().filter_map(|p| p.teid)
    }

    /// UE addresses and routed prefixes that downlink packets are looked up by, each in
    /// its PDR's network instance.
    pub fn ue_prefixes(&self) -> Vec<(u8, Prefix)> {
        let mut v = Vec::new();
        for p in self.ip_pdrs.iter().chain(&self.gtp_pdrs) {
            let i = p.key_instance();
            if let Some(ue) = &p.ue {
                if let Some(a) = ue.v4 {
                    let net = a.into();
                    v.push((
                        i,
                        Prefix {
                            v6: false,
                            net,
                            mask: u32::MAX.into(),
                        },
                    ));
                }
                v.extend(ue.v6.map(|p| (i, p)));
            }
            v.extend(p.framed.iter().map(|&p| (i, p)));
        }
        v.sort_by_key(|(i, p)| (*i, p.v6, p.net, p.mask));
        v.dedup();
        v
    }

    /// Remote tunnels this session sends to (for Error Indications received from them).
    pub fn remote_tunnels(&self) -> Vec<(u32, Addr)> {
        let mut v: Vec<_> = self
            .fars
            .iter()
            .flat_map(|f| f.target.iter().chain(&f.dup))
            .filter_map(|t| t.encap.map(|e| (e.teid, e.dst)))
            .collect();
        v.sort_by_key(|(t, a)| (*t, a.v6, a.bits));
        v.dedup();
        v
    }

    pub fn buffered(&self) -> usize {
        self.fars.iter().map(|f| f.buffer.len()).sum()
    }

    /// Downlink packets of `octets` each that FAR `far` (index) buffered were dropped
    /// (buffer full, expired, discarded): counted by the URRs of the downlink PDRs of that
    /// FAR against their Dropped DL Traffic Threshold.
    pub fn dropped_buffered(
        &mut self,
        far: usize,
        octets: &[u64],
        now: Instant,
        events: &mut std::collections::VecDeque<DatapathEvent>,
    ) {
        if octets.is_empty() || self.urrs.iter().all(|u| !u.counts_dropped()) {
            return;
        }
        let mut urrs: SmallVec<[usize; 2]> = SmallVec::new();
        for p in self.gtp_pdrs.iter().chain(&self.ip_pdrs) {
            if !p.from_ue && p.far.map(usize::from) == Some(far) {
                for &u in &p.urrs {
                    if !urrs.contains(&usize::from(u)) {
                        urrs.push(usize::from(u));
                    }
                }
            }
        }
        for &o in octets {
            crate::usage::dropped_dl(&mut self.urrs, &urrs, o, now, self.seid, events);
        }
    }
}

fn compile_pdr(
    s: &Session,
    p: &Pdr,
    far_slot: &impl Fn(FarId) -> Option<usize>,
    slot: &impl Fn(usize) -> Result<u16, DatapathError>,
    instances: &NetworkInstances,
) -> Result<CPdr, DatapathError> {
    let pdi = &p.pdi;
    let instance = match pdi.network_instance() {
        None => None,
        name => Some(
            instances
                .id(name)
                .ok_or(DatapathError::UnknownNetworkInstance(RuleRef::Pdr(p.id)))?,
        ),
    };
    let strip = match p.outer_header_removal {
        None => Strip::None,
        Some(OuterHeaderRemoval::GtpuUdpIp { .. }) => Strip::Gtpu,
        Some(_) => return Err(unsupported("outer header removal other than GTP-U")),
    };
    let mut qfis = 0u64;
    for q in &pdi.qfis {
        qfis |= 1u64 << (q.0 & 63);
    }
    let far = match p.far {
        Some(id) => Some(slot(far_slot(id).ok_or(DatapathError::Internal(
            format!("PDR {} refers to missing FAR {}", p.id.0, id.0),
        ))?)?),
        None => None,
    };
    let rule_slot = |pos: Option<usize>, what: &str| {
        pos.ok_or_else(|| {
            DatapathError::Internal(format!("PDR {} refers to a missing {what}", p.id.0))
        })
        .and_then(slot)
    };
    let qers: SmallVec<[u16; 2]> = p
        .qers
        .iter()
        .map(|id| rule_slot(s.qers.iter().position(|q| q.id == *id), "QER"))
        .collect::<Result<_, _>>()?;
    let from_ue = pdi.packets_leave_ue();
    let packet_rate = qers.iter().any(|&q| {
        let rate = s.qers.get(usize::from(q)).and_then(|q| q.packet_rate);
        rate.is_some_and(|r| {
            if from_ue {
                r.uplink.is_some()
            } else {
                r.downlink.is_some()
            }
        })
    });
    let gbr = (qers.iter()).any(|&q| s.qers.get(usize::from(q)).is_some_and(|q| q.gbr.is_some()));
    let urrs = p
        .urrs
        .iter()
        .map(|id| rule_slot(s.urrs.iter().position(|u| u.id == *id), "URR"))
        .collect::<Result<_, _>>()?;
    let ue = pdi.ue_ip.map(|u| UeMatch {
        v4: u.ipv4.map(|a| u32::from_be_bytes(a.octets())),
        v6: u.ipv6.and_then(|(a, len)| Prefix::new(IpAddr::V6(a), len)),
        is_destination: u.is_destination,
    });
    let framed: Vec<Prefix> = pdi
        .framed_routes
        .iter()
        .filter_map(|r| Prefix::new(r.network, r.prefix_len))
        .collect();
    let filters: Vec<Filter> = pdi.sdf_filters.iter().map(Filter::compile).collect();
    // Fast form: no UE address, or exactly one IPv4 address (a UE IP with neither version
    // matches nothing, which the slow form says).
    let simple_ue =
        framed.is_empty() && ue.as_ref().is_none_or(|u| u.v6.is_none() && u.v4.is_some());
    let ue_v4 = ue.as_ref().and_then(|u| u.v4);
    let fast: Option<SmallVec<[FastFilter; 4]>> = simple_ue
        .then(|| {
            let mut v = SmallVec::new();
            for f in &filters {
                v.extend(f.fast(ue_v4)?);
            }
            Some(v)
        })
        .flatten()
        // A PDR whose every filter is `deny` matches nothing; the slow form says so.
        .filter(|v: &SmallVec<_>| filters.is_empty() || !v.is_empty());
    let slow = fast.is_none().then(|| filters.into_boxed_slice());
    Ok(CPdr {
        id: p.id,
        teid: pdi.local_f_teid.map(|f| f.teid.0),
        qfis,
        ue_v4,
        ue_is_destination: ue.as_ref().is_some_and(|u| u.is_destination),
        fast: fast.unwrap_or_default(),
        slow,
        from_ue,
        strip,
        far,
        qers,
        urrs,
        packet_rate,
        gbr,
        ue,
        framed,
        instance,
    })
}

/// The addresses a session's tunnels on one side (`on_n9`) leave from: those of its own
/// F-TEIDs there (where its peers send to), else the UPF's. They differ when one instance
/// serves the sessions of another's shard after a takeover (#29): each session keeps its
/// shard's addresses.
fn own_addrs(s: &Session, on_n9: bool, upf: &LocalAddrs) -> LocalAddrs {
    let mut own = *upf;
    if let Some(f) = s
        .pdrs
        .iter()
        .filter(|p| p.pdi.source.tunnels_on_n9(p.pdi.interface_type()) == on_n9)
        .find_map(|p| p.pdi.local_f_teid)
    {
        own.v4 = f.ipv4.or(own.v4);
        own.v6 = f.ipv6.or(own.v6);
    }
    own
}

/// Where a FAR (or a duplication) sends: `on_n9`, whether a tunnel leaves by the N9 side
/// ([`Interface::tunnels_on_n9`]).
fn target(
    dest: Interface,
    on_n9: bool,
    ohc: Option<OuterHeaderCreation>,
    tlm: Option<(u8, u8)>,
    instance: u8,
    env: &CompileEnv,
) -> Result<Option<Target>, DatapathError> {
    let to_access = dest == Interface::Access;
    let encap = match ohc {
        None => None,
        Some(OuterHeaderCreation::Gtpu { teid, peer }) => {
            let local = if on_n9 { env.n9 } else { env.n3 };
            let src = match peer {
                IpAddr::V4(_) => local.v4.map(IpAddr::V4),
                IpAddr::V6(_) => local.v6.map(IpAddr::V6),
            }
            .ok_or(unsupported(
                "no local GTP-U address of the peer's IP version",
            ))?;
            Some(Tunnel {
                teid: teid.0,
                src: Addr::from_ip(src),
                dst: Addr::from_ip(peer),
            })
        }
        Some(_) => return Err(unsupported("outer header creation other than GTP-U")),
    };
    let port = match (dest, encap.is_some()) {
        // The CP function's GTP-U endpoint (N4-u: Open5GS's SMF takes IPv6 Router
        // Solicitations this way) and an LI function's too.
        (
            Interface::Access | Interface::Core | Interface::CpFunction | Interface::LiFunction,
            true,
        ) => {
            if on_n9 {
                Port::N9
            } else {
                Port::N3
            }
        }
        (Interface::Core | Interface::SgiLan, false) => Port::N6,
        // Access without a tunnel yet (the gNB's is not known): its packets are dropped,
        // counted as no_forwarding_target, until an Update FAR gives one.
        (Interface::Access, false) => return Ok(None),
        // Rather than accept a FAR whose packets would all be dropped.
        (Interface::CpFunction | Interface::LiFunction, false) => {
            return Err(unsupported(
                "forwarding to the CP or LI function without a tunnel",
            ))
        }
        (Interface::VnInternal, _) => return Err(unsupported("forwarding to VN internal")),
        (Interface::SgiLan, true) => return Err(unsupported("a GTP-U tunnel on N6")),
    };
    let dscp = tlm.map_or(0, |(tos, _)| tos >> 2);
    let templates = encap.filter(|t| !t.dst.v6 && !t.src.v6).and_then(|t| {
        let (src, dst) = (t.src.to_ip4(), t.dst.to_ip4());
        Some([
            Template::v4(src, dst, t.teid, dscp, env.outer_ttl, None)?,
            Template::v4(src, dst, t.teid, dscp, env.outer_ttl, Some(to_access))?,
        ])
    });
    Ok(Some(Target {
        port,
        instance: if port == Port::N6 { instance } else { 0 },
        encap,
        templates,
        tos: tlm.map(|(tos, _mask)| tos),
        to_access,
    }))
}

fn compile_far(f: &Far, env: &CompileEnv, max_buffered: usize) -> Result<CFar, DatapathError> {
    let t = match &f.forwarding {
        Some(fw) => target(
            fw.destination,
            fw.tunnels_on_n9(),
            fw.outer_header_creation,
            fw.transport_level_marking,
            env.instances
                .id(fw.network_instance())
                .ok_or(DatapathError::UnknownNetworkInstance(RuleRef::Far(f.id)))?,
            env,
        )?,
        None => None,
    };
    let mut dup = Vec::new();
    if f.action.contains(ApplyAction::DUPL) {
        for d in &f.duplicating {
            dup.extend(target(
                d.destination,
                d.destination.tunnels_on_n9(None),
                d.outer_header_creation,
                d.transport_level_marking,
                DEFAULT_INSTANCE,
                env,
            )?);
        }
    }
    Ok(CFar {
        id: f.id,
        action: f.action,
        target: t,
        dup,
        buffer: VecDeque::new(),
        max_buffered,
        notified: false,
        full_seen: false,
        over_budget: false,
    })
}

#[cfg(test)]
mod size_tests {
    #[test]
    fn sizes() {
        eprintln!(
            "Compiled {} CPdr {} CFar {} QerState {} UrrState {} Filter {} Target {}",
            size_of::<super::Compiled>(),
            size_of::<super::CPdr>(),
            size_of::<super::CFar>(),
            size_of::<super::QerState>(),
            size_of::<crate::usage::UrrState>(),
            size_of::<crate::filter::Filter>(),
            size_of::<super::Target>()
        );
    }
}
