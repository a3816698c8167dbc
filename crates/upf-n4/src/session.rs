//! Session procedures (TS 29.244 §6.3): establishment, modification, deletion and set
//! deletion. Every request is applied to a copy of the session and installed whole; if any
//! part fails nothing changes — the data path keeps the old session, allocations made for
//! the request are returned — and the response names the cause, Offending IE and Failed Rule.

use crate::agent::{Agent, CpPeer, Event};
use crate::alloc::AllocError;
use crate::convert::{
    self, PdiAsks, IE_F_TEID, IE_NETWORK_INSTANCE, IE_SDF_FILTER, IE_UE_IP_ADDRESS,
};
use crate::reject::Reject;
use crate::trust::Refusal;
use compact_str::CompactString;
use smallvec::SmallVec;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Header, List, Message};
use upf_rules::{Datapath, UrrId as RUrrId};
use upf_rules::{
    DatapathError, InstallFlags, Interface, RuleRef, Seid, Session, Teid, UsageReport as Usage,
};

/// What the agent keeps per session besides its rules.
#[derive(Debug, Clone)]
pub(crate) struct SessionCtx {
    pub rules: Arc<Session>,
    /// The CP function's node, and where Session Report Requests go (the address the SMF's
    /// requests come from).
    pub cp: Arc<CpPeer>,
    /// TEIDs this session holds, with the CHOOSE ID that chose them (None: no CHID / static).
    pub teids: SmallVec<[(Option<u8>, Teid); 2]>,
    /// UE addresses this session holds (allocated or reserved in a pool).
    pub ue_v4: Option<Ipv4Addr>,
    pub ue_v6: Option<(Ipv6Addr, u8)>,
    /// The Network Instance they were taken for: two instances' pools may share addresses.
    pub ue_instance: Option<CompactString>,
    /// Next UR-SEQN per URR (§8.2.77).
    pub ur_seqn: SmallVec<[(RUrrId, u32); 2]>,
    /// CSIDs of the CP function (FQ-CSID) for Session Set Deletion.
    pub csids: Box<[u16]>,
}

/// Allocations made while handling one request: returned if the request fails.
#[derive(Debug)]
struct Txn {
    /// When the request is handled (TEIDs are allocated as of then).
    now: Instant,
    teids: SmallVec<[Teid; 2]>,
    ue: SmallVec<[(IpAddr, Option<CompactString>); 2]>,
}

impl Txn {
    fn new(now: Instant) -> Self {
        Self {
            now,
            teids: SmallVec::new(),
            ue: SmallVec::new(),
        }
    }
}

pub(crate) fn establishment_reject(node_id: NodeId, r: Reject) -> SessionEstablishmentResponse {
    SessionEstablishmentResponse {
        node_id,
        cause: r.cause,
        offending_ie: r.offending_ie.map(OffendingIe),
        failed_rule_id: r.failed_rule_id(),
        ..Default::default()
    }
}

pub(crate) fn modification_reject(r: Reject) -> SessionModificationResponse {
    SessionModificationResponse {
        cause: r.cause,
        offending_ie: r.offending_ie.map(OffendingIe),
        failed_rule_id: r.failed_rule_id(),
        ..Default::default()
    }
}

pub(crate) fn deletion_reject(r: Reject) -> SessionDeletionResponse {
    SessionDeletionResponse {
        cause: r.cause,
        offending_ie: r.offending_ie.map(OffendingIe),
        ..Default::default()
    }
}

/// For a SEID the sender does not own, whether it exists or not (§6.3: cause 65).
fn unknown_seid() -> Reject {
    Reject::new(Cause::SESSION_CONTEXT_NOT_FOUND, "unknown SEID")
}

fn datapath_reject(e: &DatapathError) -> Reject {
    match e {
        DatapathError::NoResources(_) => {
            Reject::new(Cause::NO_RESOURCES_AVAILABLE, "data path out of resources")
        }
        DatapathError::Unsupported(_) => {
            Reject::new(Cause::SERVICE_NOT_SUPPORTED, "data path cannot do this")
        }
        DatapathError::UnknownSession(_) => Reject::new(
            Cause::SESSION_CONTEXT_NOT_FOUND,
            "data path lost the session",
        ),
        // §8.2.4: a Network Instance the UP function does not know.
        DatapathError::UnknownNetworkInstance(rule) => Reject::rule(
            *rule,
            IE_NETWORK_INSTANCE,
            "network instance not configured",
        ),
        DatapathError::Internal(_) => {
            Reject::new(Cause::SYSTEM_FAILURE, "data path internal error")
        }
    }
}

impl<D: Datapath> Agent<D> {
    /// §6.3.2 PFCP Session Establishment. Returns the CP SEID for the response header.
    pub(crate) fn session_establishment(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        _header: Header,
        m: SessionEstablishmentRequest,
    ) -> (u64, Message) {
        let cp_seid = m.cp_f_seid.seid;
        let node_id = self.cfg.node_id.clone();
        // §6.3.2: within the sender's own association only.
        if !self.speaks_for(peer, &m.node_id) {
            self.refuse(50, peer, Refusal::NodeIdOfAnother);
            let r = Reject::new(
                Cause::NO_ESTABLISHED_PFCP_ASSOCIATION,
                "not the sender's node",
            );
            return (cp_seid, establishment_reject(node_id, r).into());
        }
        match self.establish(now, peer, &m) {
            Ok(resp) => (cp_seid, resp.into()),
            Err(r) => {
                self.event(Event::Rejected {
                    message_type: 50,
                    peer,
                    reject: r,
                });
                (cp_seid, establishment_reject(node_id, r).into())
            }
        }
    }

    fn establish(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        m: &SessionEstablishmentRequest,
    ) -> Result<SessionEstablishmentResponse, Reject> {
        let Some(assoc) = self.assocs.get(&m.node_id) else {
            return Err(Reject::new(
                Cause::NO_ESTABLISHED_PFCP_ASSOCIATION,
                "node not associated",
            ));
        };
        let cp = if assoc.cp.addr == peer {
            assoc.cp.clone()
        } else {
            Arc::new(CpPeer {
                node: m.node_id.clone(),
                addr: peer,
            })
        };
        // §7.5.2: at least one Create PDR and one Create FAR are mandatory.
        if m.create_pdrs.is_empty() {
            return Err(Reject::new(Cause::MANDATORY_IE_MISSING, "no Create PDR").ie(1));
        }
        if m.create_fars.is_empty() {
            return Err(Reject::new(Cause::MANDATORY_IE_MISSING, "no Create FAR").ie(3));
        }
        let cp_addr: IpAddr = match (m.cp_f_seid.ipv4, m.cp_f_seid.ipv6) {
            (Some(a), _) => a.into(),
            (None, Some(a)) => a.into(),
            (None, None) => {
                return Err(
                    Reject::new(Cause::MANDATORY_IE_INCORRECT, "CP F-SEID without address").ie(57),
                )
            }
        };
        // An establishment for a CP F-SEID this association holds already: the SMF lost our
        // response or restarted the procedure; the old session is replaced.
        let sessions = &self.sessions;
        let owner_of = |s: Seid| sessions.get(&s).map(|c| (&c.cp.node, c.rules.cp_addr));
        if let Some(old) = self
            .by_cp
            .get(&m.node_id, cp_addr, m.cp_f_seid.seid, owner_of)
        {
            self.delete_session(now, old, "replaced by a new establishment");
        }
        if self.sessions.len() >= self.cfg.limits.sessions {
            return Err(Reject::new(
                Cause::NO_RESOURCES_AVAILABLE,
                "session limit reached",
            ));
        }
        let held = self.assocs.get(&m.node_id).map_or(0, |a| a.sessions);
        if held >= self.cfg.limits.sessions_per_association {
            return Err(Reject::new(
                Cause::NO_RESOURCES_AVAILABLE,
                "session limit of the association reached",
            ));
        }
        self.check_counts(
            m.create_pdrs.len(),
            m.create_fars.len(),
            m.create_qers.len(),
            m.create_urrs.len(),
        )?;
        let sessions = &self.sessions;
        let seid = self.seids.allocate(|s| sessions.contains_key(&s));
        let mut s = Session::new(seid, Seid(m.cp_f_seid.seid), cp_addr);
        s.dnn = m.apn_dnn.as_ref().map(|d| d.0.clone());
        s.inactivity_timer_s = m
            .user_plane_inactivity_timer
            .map(|t| t.0)
            .filter(|&t| t > 0);
        let mut ctx = SessionCtx {
            rules: Arc::new(Session::new(seid, s.cp_seid, cp_addr)),
            cp,
            teids: SmallVec::new(),
            ue_v4: None,
            ue_v6: None,
            ue_instance: None,
            ur_seqn: SmallVec::new(),
            csids: m
                .fq_csids
                .iter()
                .flat_map(|f| f.csids.iter().copied())
                .collect(),
        };
        let mut txn = Txn::new(now);
        let mut created = List::new();
        let result = self
            .build_rules(
                &mut s,
                &mut ctx,
                &mut txn,
                &mut created,
                &m.create_fars,
                &m.create_qers,
                &m.create_urrs,
                m.create_bar.as_ref(),
                &m.create_pdrs,
                false,
            )
            .and_then(|()| s.validate().map_err(rule_error))
            .and_then(|()| {
                let touched = self.aggregates.attach(&m.node_id, &mut s);
                let rules = Arc::new(s);
                let installed = self.dp.install(now, rules.clone(), InstallFlags::default());
                let after = installed.is_ok().then_some(&*rules);
                self.aggregates.settle(&m.node_id, &touched, None, after);
                installed.map_err(|e| self.datapath_failed(&e))?;
                Ok(rules)
            });
        match result {
            Ok(rules) => {
                ctx.rules = rules;
                self.admit(Box::new(ctx));
                self.session_changed(seid);
                self.event(Event::SessionEstablished { seid });
                Ok(SessionEstablishmentResponse {
                    node_id: self.cfg.node_id.clone(),
                    cause: Cause::REQUEST_ACCEPTED,
                    up_f_seid: Some(self.f_seid(seid)),
                    created_pdrs: created,
                    ..Default::default()
                })
            }
            Err(r) => {
                self.rollback(txn);
                Err(r)
            }
        }
    }

    /// Holds a session the data path installed: found by its CP F-SEID, counted for the
    /// association that owns it.
    pub(crate) fn admit(&mut self, ctx: Box<SessionCtx>) {
        let seid = ctx.rules.seid;
        let (cp_addr, cp_seid) = (ctx.rules.cp_addr, ctx.rules.cp_seid.0);
        self.by_cp.insert(&ctx.cp.node, cp_addr, cp_seid, seid);
        if let Some(a) = self.assocs.get_mut(&ctx.cp.node) {
            a.sessions += 1;
        }
        self.sessions.insert(seid, ctx);
    }

    fn datapath_failed(&mut self, e: &DatapathError) -> Reject {
        if matches!(e, DatapathError::Internal(_)) {
            self.stats.internal_errors += 1;
        }
        datapath_reject(e)
    }

    fn f_seid(&self, seid: Seid) -> FSeid {
        FSeid {
            seid: seid.0,
            ipv4: match self.cfg.n4_addr {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            },
            ipv6: match self.cfg.n4_addr {
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => None,
            },
        }
    }

    fn check_counts(
        &self,
        pdrs: usize,
        fars: usize,
        qers: usize,
        urrs: usize,
    ) -> Result<(), Reject> {
        let max = self.cfg.limits.rules_per_session;
        if pdrs.max(fars).max(qers).max(urrs) > max {
            return Err(Reject::new(
                Cause::NO_RESOURCES_AVAILABLE,
                "too many rules in one session",
            ));
        }
        Ok(())
    }

    /// Creates the given rules in `s` (FARs, QERs, URRs and the BAR first, so that PDRs may
    /// refer to them), resolving every allocation a PDI asks for.
    #[allow(clippy::too_many_arguments)]
    fn build_rules(
        &mut self,
        s: &mut Session,
        ctx: &mut SessionCtx,
        txn: &mut Txn,
        created: &mut List<CreatedPdr>,
        fars: &[CreateFar],
        qers: &[CreateQer],
        urrs: &[CreateUrr],
        bar: Option<&CreateBar>,
        pdrs: &[CreatePdr],
        modification: bool,
    ) -> Result<(), Reject> {
        // Exact capacities: a session's vectors live as long as it does, and doubling would
        // leave up to half of each unused (an establishment starts from empty ones).
        s.fars.reserve_exact(fars.len());
        s.qers.reserve_exact(qers.len());
        s.urrs.reserve_exact(urrs.len());
        s.pdrs.reserve_exact(pdrs.len());
        for f in fars {
            let mut far = convert::far(f)?;
            if let Some(fw) = far.forwarding.as_mut() {
                self.forwarding_extras.share(&mut fw.extra);
            }
            s.insert_far(far).map_err(rule_error)?;
        }
        for q in qers {
            s.insert_qer(convert::qer(q)?).map_err(rule_error)?;
        }
        for u in urrs {
            let urr = convert::urr(u, |n| self.instant(n))?;
            s.insert_urr(urr).map_err(rule_error)?;
        }
        if let Some(b) = bar {
            if s.bar.is_some() {
                return Err(Reject::rule(
                    RuleRef::Bar(upf_rules::BarId(b.bar_id.0)),
                    85,
                    "a BAR exists already",
                ));
            }
            s.bar = Some(convert::bar(b)?);
        }
        for c in pdrs {
            if c.pdi.sdf_filters.len() > self.cfg.limits.sdf_filters_per_pdr {
                return Err(Reject::rule(
                    RuleRef::Pdr(upf_rules::PdrId(c.pdr_id.0)),
                    IE_SDF_FILTER,
                    "too many SDF filters",
                ));
            }
            let (mut pdr, asks) = convert::pdr(c)?;
            self.share_pdi(&mut pdr.pdi);
            if modification {
                inherit_from_siblings(s, &mut pdr, &asks);
            }
            let dnn = s.dnn.clone();
            if let Some(cp) = self.resolve(ctx, txn, &mut pdr, asks, dnn.as_deref())? {
                created.push(cp);
            }
            s.insert_pdr(pdr).map_err(rule_error)?;
        }
        Ok(())
    }

    /// Replaces the parts of a new PDI that other PDIs may have alike by the shared copies.
    fn share_pdi(&mut self, pdi: &mut upf_rules::Pdi) {
        pdi.sdf_filters = self.sdf_filters.intern(&pdi.sdf_filters);
        self.pdi_extras.share(&mut pdi.extra);
    }

    /// Fills in what a PDI asked the UP function to choose (F-TEID, UE IP) and reserves the
    /// static values it gave; returns the Created PDR to report, if anything was chosen.
    fn resolve(
        &mut self,
        ctx: &mut SessionCtx,
        txn: &mut Txn,
        pdr: &mut upf_rules::Pdr,
        asks: PdiAsks,
        dnn: Option<&str>,
    ) -> Result<Option<CreatedPdr>, Reject> {
        let rule = RuleRef::Pdr(pdr.id);
        let mut chosen = false;
        if let Some((chid, want4, want6)) = asks.teid {
            let addrs = if pdr.pdi.source.tunnels_on_n9(pdr.pdi.interface_type()) {
                self.cfg.n9.unwrap_or(self.cfg.n3)
            } else {
                self.cfg.n3
            };
            let any = !want4 && !want6;
            let ipv4 = addrs.ipv4.filter(|_| want4 || any);
            let ipv6 = addrs.ipv6.filter(|_| want6 || any);
            if ipv4.is_none() && ipv6.is_none() {
                return Err(Reject {
                    cause: Cause::INVALID_F_TEID_ALLOCATION_OPTION,
                    offending_ie: Some(IE_F_TEID),
                    failed_rule: Some(rule),
                    detail: "no tunnel address of the family asked for",
                });
            }
            // §5.5.3: PDRs of one session with the same CHOOSE ID share one F-TEID.
            let existing = chid.and_then(|c| {
                ctx.teids
                    .iter()
                    .find(|(x, _)| *x == Some(c))
                    .map(|&(_, t)| t)
            });
            let teid = match existing {
                Some(t) => t,
                None => {
                    let t = self.teids.allocate(txn.now).map_err(|_| {
                        Reject::new(Cause::NO_RESOURCES_AVAILABLE, "no TEID left").on_rule(rule)
                    })?;
                    txn.teids.push(t);
                    ctx.teids.push((chid, t));
                    t
                }
            };
            pdr.pdi.local_f_teid = Some(upf_rules::LocalFTeid { teid, ipv4, ipv6 });
            chosen = true;
        } else if let Some(ft) = pdr.pdi.local_f_teid {
            if !ctx.teids.iter().any(|&(_, t)| t == ft.teid) {
                match self.teids.reserve(ft.teid) {
                    Ok(()) => {
                        txn.teids.push(ft.teid);
                        ctx.teids.push((None, ft.teid));
                    }
                    // Outside our range: the SMF manages it; inside and taken: a clash.
                    Err(AllocError::Conflict) if self.teid_in_range(ft.teid) => {
                        return Err(Reject::rule(
                            rule,
                            IE_F_TEID,
                            "TEID in use by another session",
                        ))
                    }
                    Err(_) => {}
                }
            }
        }
        if asks.ue_v4 || asks.ue_v6 {
            let extra = pdr.pdi.extra.clone();
            let ni = extra.get().and_then(|e| e.network_instance.as_deref());
            let ue = pdr.pdi.ue_ip.get_or_insert(upf_rules::UeIp {
                ipv4: None,
                ipv6: None,
                is_destination: asks.ue_is_destination,
            });
            if asks.ue_v4 {
                let a = match ctx.ue_v4 {
                    Some(a) => a,
                    None => {
                        let a = self
                            .ue_ips
                            .allocate_v4(dnn, ni)
                            .map_err(|e| ue_reject(e, rule))?;
                        txn.ue.push((a.into(), ni.map(Into::into)));
                        ctx.ue_v4 = Some(a);
                        ctx.ue_instance = ni.map(Into::into);
                        a
                    }
                };
                ue.ipv4 = Some(a);
            }
            if asks.ue_v6 {
                let p = match ctx.ue_v6 {
                    Some(p) => p,
                    None => {
                        let p = self
                            .ue_ips
                            .allocate_v6(dnn, ni)
                            .map_err(|e| ue_reject(e, rule))?;
                        txn.ue.push((p.0.into(), ni.map(Into::into)));
                        ctx.ue_v6 = Some(p);
                        ctx.ue_instance = ni.map(Into::into);
                        p
                    }
                };
                ue.ipv6 = Some(p);
            }
            chosen = true;
        } else if let Some(ue) = pdr.pdi.ue_ip {
            // Static addresses inside a pool are marked used, so the pool never hands them out.
            if let Some(a) = ue.ipv4.filter(|a| ctx.ue_v4 != Some(*a)) {
                let ni = pdr.pdi.network_instance();
                match self.ue_ips.reserve(a.into(), ni) {
                    Ok(()) => {
                        txn.ue.push((a.into(), ni.map(Into::into)));
                        ctx.ue_v4 = Some(a);
                        ctx.ue_instance = ni.map(Into::into);
                    }
                    Err(_) => {
                        return Err(Reject::rule(
                            rule,
                            IE_UE_IP_ADDRESS,
                            "UE address in use by another session",
                        ))
                    }
                }
            }
        }
        if !chosen {
            return Ok(None);
        }
        let ft = pdr.pdi.local_f_teid.filter(|_| asks.teid.is_some());
        Ok(Some(CreatedPdr {
            pdr_id: PdrId(pdr.id.0),
            local_f_teid: ft.map(|f| FTeid::Assigned {
                teid: f.teid.0,
                ipv4: f.ipv4,
                ipv6: f.ipv6,
            }),
            ue_ip_addresses: pdr
                .pdi
                .ue_ip
                .filter(|_| asks.ue_v4 || asks.ue_v6)
                .map(|u| UeIpAddress {
                    ipv4: u.ipv4,
                    ipv6: u.ipv6.map(|p| p.0),
                    is_destination: u.is_destination,
                    choose_ipv4: false,
                    choose_ipv6: false,
                    ipv6_prefix_delegation_bits: None,
                    ipv6_prefix_length: u.ipv6.map(|p| p.1).filter(|&l| l != 64 && l != 128),
                })
                .into_iter()
                .collect(),
        }))
    }

    fn teid_in_range(&self, t: Teid) -> bool {
        (self.cfg.teid_range.0..=self.cfg.teid_range.1).contains(&t.0)
    }

    /// Returns what a failed request took; nobody was told of it, so TEIDs are not held off.
    fn rollback(&mut self, txn: Txn) {
        for t in txn.teids {
            self.teids.unwind(t);
        }
        for (a, ni) in txn.ue {
            self.ue_ips.free(a, ni.as_deref());
        }
    }

    /// §6.3.3 PFCP Session Modification.
    pub(crate) fn session_modification(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        header: Header,
        m: SessionModificationRequest,
    ) -> (u64, Message) {
        let seid = Seid(header.seid.unwrap_or(0));
        let cp_seid = match self.owned_session(peer, seid) {
            Ok(s) => s.rules.cp_seid.0,
            Err(why) => {
                self.refuse(52, peer, why);
                return (0, modification_reject(unknown_seid()).into());
            }
        };
        match self.modify(now, seid, &m) {
            Ok(resp) => (cp_seid, resp.into()),
            Err(r) => {
                self.event(Event::Rejected {
                    message_type: 52,
                    peer,
                    reject: r,
                });
                (cp_seid, modification_reject(r).into())
            }
        }
    }

    fn modify(
        &mut self,
        now: Instant,
        seid: Seid,
        m: &SessionModificationRequest,
    ) -> Result<SessionModificationResponse, Reject> {
        let Some(ctx_ref) = self.sessions.get(&seid) else {
            return Err(Reject::new(
                Cause::SESSION_CONTEXT_NOT_FOUND,
                "unknown SEID",
            ));
        };
        let mut ctx = ctx_ref.clone();
        let mut s: Session = (*ctx.rules).clone();
        let mut txn = Txn::new(now);
        let mut created = List::new();
        let result = self.apply_modification(&mut s, &mut ctx, &mut txn, &mut created, m);
        let flags = m.pfcpsmreq_flags.unwrap_or_default();
        // SNDEM belongs in the Update Forwarding Parameters of the FAR whose tunnel changes
        // (TS 29.244 Table 7.5.4.3-2), where SMFs put it; the data path sends End Markers
        // for every FAR whose tunnel changed, so one FAR asking is enough.
        let sndem = flags.contains(PfcpSmReqFlags::SNDEM)
            || m.update_fars.iter().any(|u| {
                u.update_forwarding_parameters
                    .as_ref()
                    .and_then(|f| f.pfcpsm_req_flags)
                    .is_some_and(|f| f.contains(PfcpSmReqFlags::SNDEM))
            });
        let result = result
            .and_then(|()| s.validate().map_err(rule_error))
            .and_then(|()| {
                let touched = self.aggregates.attach(&ctx.cp.node, &mut s);
                let rules = Arc::new(s);
                let installed = self.dp.install(
                    now,
                    rules.clone(),
                    InstallFlags {
                        send_end_marker: sndem,
                        drop_buffered: flags.contains(PfcpSmReqFlags::DROBU),
                    },
                );
                let after = installed.is_ok().then_some(&*rules);
                self.aggregates
                    .settle(&ctx.cp.node, &touched, Some(&ctx.rules), after);
                let installed = installed.map_err(|e| self.datapath_failed(&e))?;
                Ok((rules, installed))
            });
        let (rules, installed) = match result {
            Ok(x) => x,
            Err(r) => {
                self.rollback(txn);
                return Err(r);
            }
        };
        let before = std::mem::replace(&mut ctx.rules, rules);
        self.release_unused(now, &mut ctx);
        // Usage of removed URRs, then of queried ones (§7.5.5: Usage Report IEs).
        let mut usage: Vec<Usage> = installed.removed_urr_usage;
        let mut queried: Vec<RUrrId> = m.query_urrs.iter().map(|q| RUrrId(q.urr_id.0)).collect();
        if flags.contains(PfcpSmReqFlags::QAURR) {
            queried = ctx.rules.urrs.iter().map(|u| u.id).collect();
        }
        if !queried.is_empty() {
            match self.dp.query_usage(now, seid, &queried) {
                Ok(u) => usage.extend(u),
                Err(e) => {
                    self.datapath_failed(&e);
                }
            }
        }
        let query_ref = m.query_urr_reference.filter(|_| !queried.is_empty());
        let usage_reports = usage
            .iter()
            .map(|u| self.usage_report(&mut ctx, u, query_ref, Some(&before)))
            .collect();
        self.sessions.insert(seid, ctx);
        self.session_changed(seid);
        Ok(SessionModificationResponse {
            cause: Cause::REQUEST_ACCEPTED,
            created_pdrs: created,
            usage_reports,
            ..Default::default()
        })
    }

    /// Remove, then create, then update (so that an update may refer to a rule created in the
    /// same request, and a removed id may be created anew).
    fn apply_modification(
        &mut self,
        s: &mut Session,
        ctx: &mut SessionCtx,
        txn: &mut Txn,
        created: &mut List<CreatedPdr>,
        m: &SessionModificationRequest,
    ) -> Result<(), Reject> {
        use upf_rules::{BarId, FarId, PdrId, QerId, UrrId};
        // §6.3.3.3: a removed rule's ID goes from the rules that refer to it as well.
        for x in m.remove_pdrs.iter() {
            s.remove_pdr(PdrId(x.pdr_id.0)).map_err(rule_error)?;
        }
        for x in m.remove_fars.iter() {
            let id = FarId(x.far_id.0);
            s.remove_far(id).map_err(rule_error)?;
            s.drop_references(RuleRef::Far(id));
        }
        for x in m.remove_qers.iter() {
            let id = QerId(x.qer_id.0);
            s.remove_qer(id).map_err(rule_error)?;
            s.drop_references(RuleRef::Qer(id));
        }
        for x in m.remove_urrs.iter() {
            let id = UrrId(x.urr_id.0);
            s.remove_urr(id).map_err(rule_error)?;
            s.drop_references(RuleRef::Urr(id));
        }
        if let Some(b) = &m.remove_bar {
            let id = BarId(b.bar_id.0);
            if s.bar.is_none_or(|x| x.id != id) {
                return Err(Reject::rule(RuleRef::Bar(id), 87, "no such BAR"));
            }
            s.bar = None;
            s.drop_references(RuleRef::Bar(id));
        }
        self.build_rules(
            s,
            ctx,
            txn,
            created,
            &m.create_fars,
            &m.create_qers,
            &m.create_urrs,
            m.create_bar.as_ref(),
            &m.create_pdrs,
            true,
        )?;
        for u in m.update_pdrs.iter() {
            let id = PdrId(u.pdr_id.0);
            let mut pdr = s.pdr(id).cloned().ok_or_else(|| {
                Reject::rule(RuleRef::Pdr(id), 9, "Update PDR for an unknown PDR")
            })?;
            if let Some(asks) = convert::update_pdr(&mut pdr, u)? {
                self.share_pdi(&mut pdr.pdi);
                let dnn = s.dnn.clone();
                if let Some(c) = self.resolve(ctx, txn, &mut pdr, asks, dnn.as_deref())? {
                    created.push(c);
                }
            }
            if let Some(slot) = s.pdr_mut(id) {
                *slot = pdr;
            }
        }
        for u in m.update_fars.iter() {
            let id = FarId(u.far_id.0);
            let far = s.far_mut(id).ok_or_else(|| {
                Reject::rule(RuleRef::Far(id), 10, "Update FAR for an unknown FAR")
            })?;
            convert::update_far(far, u)?;
            if let Some(fw) = far.forwarding.as_mut() {
                self.forwarding_extras.share(&mut fw.extra);
            }
        }
        for u in m.update_qers.iter() {
            let id = QerId(u.qer_id.0);
            let q = s.qer_mut(id).ok_or_else(|| {
                Reject::rule(RuleRef::Qer(id), 14, "Update QER for an unknown QER")
            })?;
            convert::update_qer(q, u)?;
        }
        for u in m.update_urrs.iter() {
            let id = UrrId(u.urr_id.0);
            let x = s.urr_mut(id).ok_or_else(|| {
                Reject::rule(RuleRef::Urr(id), 13, "Update URR for an unknown URR")
            })?;
            convert::update_urr(x, u, |n| self.instant(n))?;
        }
        if let Some(u) = &m.update_bar {
            match s.bar.as_mut().filter(|b| b.id.0 == u.bar_id.0) {
                Some(b) => convert::update_bar(b, u)?,
                None => {
                    return Err(Reject::rule(
                        RuleRef::Bar(upf_rules::BarId(u.bar_id.0)),
                        86,
                        "Update BAR for an unknown BAR",
                    ))
                }
            }
        }
        if let Some(t) = m.user_plane_inactivity_timer {
            s.inactivity_timer_s = Some(t.0).filter(|&t| t > 0);
        }
        self.check_counts(s.pdrs.len(), s.fars.len(), s.qers.len(), s.urrs.len())
    }

    /// After a successful modification: TEIDs no PDR uses any more go back to the pool.
    fn release_unused(&mut self, now: Instant, ctx: &mut SessionCtx) {
        let rules = ctx.rules.clone();
        let used = |t: Teid| {
            rules
                .pdrs
                .iter()
                .any(|p| p.pdi.local_f_teid.is_some_and(|f| f.teid == t))
        };
        let teids = &mut self.teids;
        ctx.teids.retain(|&mut (_, t)| {
            let keep = used(t);
            if !keep {
                teids.free(t, now);
            }
            keep
        });
    }

    /// §6.3.4 PFCP Session Deletion.
    pub(crate) fn session_deletion(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        header: Header,
    ) -> (u64, Message) {
        let seid = Seid(header.seid.unwrap_or(0));
        if let Err(why) = self.owned_session(peer, seid) {
            self.refuse(54, peer, why);
            return (0, deletion_reject(unknown_seid()).into());
        }
        let (usage, Some(mut ctx)) = self.delete_session(now, seid, "deleted by the SMF") else {
            return (0, deletion_reject(unknown_seid()).into());
        };
        let cp_seid = ctx.rules.cp_seid.0;
        let usage_reports = usage
            .iter()
            .map(|u| self.usage_report(&mut ctx, u, None, None))
            .collect();
        (
            cp_seid,
            SessionDeletionResponse {
                cause: Cause::REQUEST_ACCEPTED,
                usage_reports,
                ..Default::default()
            }
            .into(),
        )
    }

    /// Removes a session from the data path and returns everything it held; its final usage
    /// comes back for the response (or is lost, when nobody can be told).
    pub(crate) fn delete_session(
        &mut self,
        now: Instant,
        seid: Seid,
        reason: &'static str,
    ) -> (Vec<Usage>, Option<Box<SessionCtx>>) {
        let out = self.take_session(now, seid, true);
        if out.1.is_some() {
            self.event(Event::SessionDeleted { seid, reason });
        }
        out
    }

    /// Removes session `seid` from the data path and from the agent, its allocations
    /// returned: its TEIDs held off (`hold_off`: late packets of it must not reach a new
    /// session) or free at once (nobody was sent them from here: a mirror's).
    pub(crate) fn take_session(
        &mut self,
        now: Instant,
        seid: Seid,
        hold_off: bool,
    ) -> (Vec<Usage>, Option<Box<SessionCtx>>) {
        let Some(ctx) = self.sessions.remove(&seid) else {
            return (Vec::new(), None);
        };
        self.session_changed(seid);
        let usage = match self.dp.remove(now, seid) {
            Ok(u) => u,
            Err(e) => {
                self.datapath_failed(&e);
                Vec::new()
            }
        };
        self.aggregates.release(&ctx.cp.node, &ctx.rules);
        for &(_, t) in &ctx.teids {
            if hold_off {
                self.teids.free(t, now);
            } else {
                self.teids.unwind(t);
            }
        }
        let ni = ctx.ue_instance.as_deref();
        if let Some(a) = ctx.ue_v4 {
            self.ue_ips.free(a.into(), ni);
        }
        if let Some((a, _)) = ctx.ue_v6 {
            self.ue_ips.free(a.into(), ni);
        }
        self.by_cp
            .remove(&ctx.cp.node, ctx.rules.cp_addr, ctx.rules.cp_seid.0, seid);
        if let Some(a) = self.assocs.get_mut(&ctx.cp.node) {
            a.sessions = a.sessions.saturating_sub(1);
        }
        (usage, Some(ctx))
    }

    /// Releases every session of a node; returns how many.
    pub(crate) fn release_sessions_of(
        &mut self,
        now: Instant,
        node: &NodeId,
        reason: &'static str,
    ) -> usize {
        let seids: Vec<Seid> = self
            .sessions
            .iter()
            .filter(|(_, c)| &c.cp.node == node)
            .map(|(s, _)| *s)
            .collect();
        for s in &seids {
            self.delete_session(now, *s, reason);
        }
        seids.len()
    }

    /// §6.2.? / §7.4.6 Session Set Deletion: the sessions of a failed CP node (by FQ-CSID),
    /// among those of the sender's own association.
    pub(crate) fn session_set_deletion(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        m: SessionSetDeletionRequest,
    ) -> Message {
        let own = self.speaks_for(peer, &m.node_id);
        if !own {
            self.refuse(14, peer, Refusal::NodeIdOfAnother);
        }
        let cause = if own {
            let csids: Vec<u16> = m
                .fq_csids
                .iter()
                .flat_map(|f| f.csids.iter().copied())
                .collect();
            let seids: Vec<Seid> = self
                .sessions
                .iter()
                .filter(|(_, c)| {
                    c.cp.node == m.node_id
                        && (csids.is_empty() || c.csids.iter().any(|x| csids.contains(x)))
                })
                .map(|(s, _)| *s)
                .collect();
            for s in seids {
                self.delete_session(now, s, "session set deletion");
            }
            Cause::REQUEST_ACCEPTED
        } else {
            Cause::NO_ESTABLISHED_PFCP_ASSOCIATION
        };
        SessionSetDeletionResponse {
            node_id: self.cfg.node_id.clone(),
            cause,
            offending_ie: None,
        }
        .into()
    }
}

/// The leniency for a Create PDR in a modification that names neither F-TEID nor UE IP (an
/// extra QoS flow's PDR from some SMFs): it shares the tunnel and UE address of its siblings.
fn inherit_from_siblings(s: &Session, pdr: &mut upf_rules::Pdr, asks: &PdiAsks) {
    let pdi = &mut pdr.pdi;
    if pdi.local_f_teid.is_some()
        || pdi.ue_ip.is_some()
        || asks.teid.is_some()
        || asks.ue_v4
        || asks.ue_v6
    {
        return;
    }
    if matches!(pdi.source, Interface::Access | Interface::Core) {
        pdi.local_f_teid = s
            .pdrs
            .iter()
            .filter(|p| p.pdi.source == pdi.source)
            .find_map(|p| p.pdi.local_f_teid);
    }
    pdi.ue_ip = s
        .pdrs
        .iter()
        .find_map(|p| p.pdi.ue_ip)
        .map(|u| upf_rules::UeIp {
            is_destination: pdi.source != Interface::Access,
            ..u
        });
}

fn ue_reject(e: AllocError, rule: RuleRef) -> Reject {
    match e {
        AllocError::Exhausted => Reject {
            cause: Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED,
            offending_ie: Some(IE_UE_IP_ADDRESS),
            failed_rule: Some(rule),
            detail: "UE address pool exhausted",
        },
        AllocError::NoPool => Reject::rule(
            rule,
            IE_UE_IP_ADDRESS,
            "no UE address pool for this DNN / network instance",
        ),
        AllocError::Conflict => Reject::rule(rule, IE_UE_IP_ADDRESS, "UE address in use"),
    }
}

/// A broken rule reference or a duplicate id → cause 73 with the Failed Rule ID.
fn rule_error(e: upf_rules::RuleError) -> Reject {
    use upf_rules::RuleErrorKind as K;
    let (ie, detail) = match e.kind {
        K::Duplicate => (rule_ie(e.rule), "a rule with this id exists already"),
        K::NotFound => (rule_ie(e.rule), "no rule with this id"),
        K::UnknownFar(_) => (108, "refers to a FAR that does not exist"),
        K::UnknownQer(_) => (109, "refers to a QER that does not exist"),
        K::UnknownUrr(_) => (81, "refers to a URR that does not exist"),
        K::UnknownBar(_) => (88, "refers to a BAR that does not exist"),
    };
    Reject::rule(e.rule, ie, detail)
}

/// The id IE type of a rule (PDR ID 56, FAR ID 108, …).
fn rule_ie(r: RuleRef) -> u16 {
    match r {
        RuleRef::Pdr(_) => 56,
        RuleRef::Far(_) => 108,
        RuleRef::Qer(_) => 109,
        RuleRef::Urr(_) => 81,
        RuleRef::Bar(_) => 88,
    }
}
