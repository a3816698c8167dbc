//! The agent: state, the datagram dispatcher, timers and the node procedures (association,
//! heartbeat, node report; TS 29.244 §6.2). Session procedures are in `session.rs`, reports
//! to the SMF in `report.rs`.

use crate::alloc::{SeidAllocator, TeidAllocator, UeIpPools};
use crate::config::{AllowedPeer, Config, ConfigError};
use crate::reject::Reject;
use crate::reliability::{CacheStats, Outstanding, ResponseCache};
use crate::session::SessionCtx;
use crate::trust::Refusal;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use upf_pfcp::header::RawMessage;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, ErrorKind, Header, Message, MessageError, Pdu};
use upf_rules::{Datapath, ForwardingExtra, Interner, PdiExtra, SdfFilter, Seid};

/// Messages of one datagram (the first and its follow-ons, §7.2.2.1) handled; the rest are
/// dropped. Every response of a datagram is queued before any is sent, and 64 KiB holds
/// thousands of small requests with large responses (a Query of 256 URRs answers with 26 KB):
/// this keeps what one datagram can make the agent hold to 16 of the largest responses.
pub const MESSAGES_PER_DATAGRAM: usize = 16;

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub dest: SocketAddr,
    pub payload: Vec<u8>,
    /// It may carry Usage Reports, each numbered by a UR-SEQN the session's record holds: a
    /// driver that restores usage checkpoints sends it only once that record is durable
    /// (else a restart would count the reported usage again). Resends are marked by their
    /// message type, whether or not the first carried any.
    pub usage: bool,
}

/// Whether `m` carries Usage Reports (TS 29.244 §7.5.5.2, §7.5.7.2, §7.5.8.2).
fn carries_usage(m: &Message) -> bool {
    match m {
        Message::SessionReportRequest(r) => !r.usage_reports.is_empty(),
        Message::SessionModificationResponse(r) => !r.usage_reports.is_empty(),
        Message::SessionDeletionResponse(r) => !r.usage_reports.is_empty(),
        _ => false,
    }
}

/// Whether a message of type `t` may carry Usage Reports (for resends, whose bytes only
/// are kept).
fn may_carry_usage(t: u8) -> bool {
    // Session Modification Response, Session Deletion Response, Session Report Request.
    matches!(t, 53 | 55 | 56)
}

/// Something worth logging or counting that happened inside the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    AssociationUp {
        node: NodeId,
        peer: SocketAddr,
    },
    AssociationDown {
        node: NodeId,
        reason: &'static str,
    },
    /// The peer's Recovery Time Stamp changed: it restarted and its sessions were released.
    PeerRestarted {
        node: NodeId,
        sessions_released: usize,
    },
    SessionEstablished {
        seid: Seid,
    },
    SessionDeleted {
        seid: Seid,
        reason: &'static str,
    },
    /// A request was refused at the trust boundary (the sender may not do this).
    Refused {
        message_type: u8,
        peer: SocketAddr,
        reason: Refusal,
    },
    /// A request was refused (the response carries the reason too).
    Rejected {
        message_type: u8,
        peer: SocketAddr,
        reject: Reject,
    },
    /// A request of ours went unanswered after N1 retransmissions.
    RequestGivenUp {
        message_type: u8,
        peer: SocketAddr,
    },
    /// Something arrived that is dropped without an answer (a response nobody waited for,
    /// an unknown message type, bytes that are not PFCP).
    Dropped {
        peer: SocketAddr,
        why: &'static str,
    },
}

/// Counters for metrics; the agent only ever increments them.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Messages received, by message type.
    pub received: [u64; 64],
    /// Responses sent, by cause value.
    pub causes_sent: [u64; 256],
    pub retransmissions_answered: u64,
    pub retransmissions_sent: u64,
    pub requests_given_up: u64,
    pub dropped: u64,
    /// Requests of ours not sent: `limits.pending_requests` reached (`reports_dropped`), or
    /// `limits.pending_request_bytes` (`reports_dropped_bytes`).
    pub reports_dropped: u64,
    pub reports_dropped_bytes: u64,
    pub internal_errors: u64,
    /// Events not queued: the driver had 4096 unpolled.
    pub events_dropped: u64,
    /// Requests refused at the trust boundary, by `Refusal::index`.
    pub refused: [u64; Refusal::ALL.len()],
}

impl Stats {
    /// Adds `o`'s counts (the agents of several shards, one figure).
    pub fn add(&mut self, o: &Stats) {
        let sum = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        sum(&mut self.received, &o.received);
        sum(&mut self.causes_sent, &o.causes_sent);
        sum(&mut self.refused, &o.refused);
        self.retransmissions_answered += o.retransmissions_answered;
        self.retransmissions_sent += o.retransmissions_sent;
        self.requests_given_up += o.requests_given_up;
        self.dropped += o.dropped;
        self.reports_dropped += o.reports_dropped;
        self.reports_dropped_bytes += o.reports_dropped_bytes;
        self.internal_errors += o.internal_errors;
        self.events_dropped += o.events_dropped;
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            received: [0; 64],
            causes_sent: [0; 256],
            retransmissions_answered: 0,
            retransmissions_sent: 0,
            requests_given_up: 0,
            dropped: 0,
            reports_dropped: 0,
            reports_dropped_bytes: 0,
            internal_errors: 0,
            events_dropped: 0,
            refused: [0; Refusal::ALL.len()],
        }
    }
}

/// Our SEID by the CP F-SEID (CP address, CP SEID) and the association that established it: a
/// CP F-SEID is unique only within its CP function, and one association's establishment never
/// replaces another's session. Most CP SEIDs are unique on their own and key `first` (16 B an
/// entry; the owner and address are checked in the session); one already there for another
/// owner or address keys `more`, with both.
#[derive(Debug, Default)]
pub(crate) struct ByCpSeid {
    first: HashMap<u64, Seid>,
    more: HashMap<(NodeId, IpAddr, u64), Seid>,
}

impl ByCpSeid {
    /// `owner_of` gives the owning node and CP address of one of our sessions.
    pub fn get<'a>(
        &self,
        node: &NodeId,
        addr: IpAddr,
        cp_seid: u64,
        owner_of: impl Fn(Seid) -> Option<(&'a NodeId, IpAddr)>,
    ) -> Option<Seid> {
        match self.first.get(&cp_seid) {
            Some(&s) if owner_of(s) == Some((node, addr)) => Some(s),
            _ if self.more.is_empty() => None,
            _ => self.more.get(&(node.clone(), addr, cp_seid)).copied(),
        }
    }

    /// Adds a session; none may be there for the same owner, address and CP SEID.
    pub fn insert(&mut self, node: &NodeId, addr: IpAddr, cp_seid: u64, seid: Seid) {
        match self.first.entry(cp_seid) {
            Entry::Vacant(e) => {
                e.insert(seid);
            }
            Entry::Occupied(_) => {
                self.more.insert((node.clone(), addr, cp_seid), seid);
            }
        }
    }

    pub fn remove(&mut self, node: &NodeId, addr: IpAddr, cp_seid: u64, seid: Seid) {
        if self.first.get(&cp_seid) == Some(&seid) {
            self.first.remove(&cp_seid);
        } else if !self.more.is_empty() {
            self.more.remove(&(node.clone(), addr, cp_seid));
        }
    }
}

/// A CP function as its sessions know it: shared by the sessions established through one
/// association, rather than a copy each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpPeer {
    pub node: NodeId,
    /// Where the session's requests came from, and its reports go.
    pub addr: SocketAddr,
}

/// An established PFCP association with a CP function.
#[derive(Debug, Clone)]
pub(crate) struct Association {
    /// Where the peer's messages come from, and ours go.
    pub addr: SocketAddr,
    /// The node and `addr`, for the sessions established from there.
    pub cp: Arc<CpPeer>,
    pub recovery: u32,
    pub next_heartbeat: Instant,
    pub heartbeat_pending: bool,
    /// Sessions it established (bounded by `limits.sessions_per_association`).
    pub sessions: usize,
}

/// The context of a request this node sent, for when its response (or silence) comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pending {
    Heartbeat(NodeId),
    AssociationSetup(SocketAddr),
    SessionReport(Seid),
    NodeReport,
    AssociationUpdate,
}

impl Pending {
    fn message_type(&self) -> u8 {
        match self {
            Self::Heartbeat(_) => 1,
            Self::AssociationSetup(_) => 5,
            Self::SessionReport(_) => 56,
            Self::NodeReport => 12,
            Self::AssociationUpdate => 7,
        }
    }
}

/// The N4 agent. See the crate documentation.
#[derive(Debug)]
pub struct Agent<D: Datapath> {
    pub(crate) cfg: Config,
    pub(crate) dp: D,
    /// `now` at construction and the NTP time (seconds) it corresponds to.
    epoch: (Instant, u32),
    /// Our Recovery Time Stamp: when this node started, or the one a restored state kept.
    pub(crate) recovery: u32,
    /// What procedures changed, for the store (`persist.rs`); `None`: nobody stores it.
    pub(crate) dirty: Option<crate::persist::Dirty>,
    pub(crate) assocs: HashMap<NodeId, Association>,
    /// Boxed: a hash table holds up to twice its entries' size in empty slots.
    pub(crate) sessions: HashMap<Seid, Box<SessionCtx>>,
    /// (CP address, CP SEID) → our SEID, to spot a re-sent establishment (§6.3.2.x).
    pub(crate) by_cp: ByCpSeid,
    pub(crate) seids: SeidAllocator,
    pub(crate) teids: TeidAllocator,
    pub(crate) ue_ips: UeIpPools,
    /// One copy of each distinct SDF filter list, shared by every PDR that has it.
    pub(crate) sdf_filters: Interner<[SdfFilter]>,
    /// Likewise the network instances (and rarer parts) of FARs' forwarding parameters.
    pub(crate) forwarding_extras: Interner<ForwardingExtra>,
    /// And those of PDIs.
    pub(crate) pdi_extras: Interner<PdiExtra>,
    /// The aggregate of each (CP node, QER Correlation ID) that sessions use.
    pub(crate) aggregates: crate::aggregates::Aggregates,
    cache: ResponseCache,
    pub(crate) outstanding: Outstanding<Pending>,
    /// UP-initiated setup: when to (re)try each configured SMF not yet associated.
    pub(crate) setup_due: Vec<(SocketAddr, Option<Instant>)>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    pub stats: Stats,
}

impl<D: Datapath> Agent<D> {
    /// A new agent. `now` and `ntp_now` (NTP seconds, RFC 5905, of the same instant) anchor
    /// every timestamp it sends; `ntp_now` is also our Recovery Time Stamp.
    pub fn new(cfg: Config, dp: D, now: Instant, ntp_now: u32) -> Result<Self, ConfigError> {
        let ue_ips = UeIpPools::new(cfg.ue_pools.clone())?;
        let (first, last) = cfg.teid_range;
        if first == 0 || first > last {
            return Err(ConfigError::TeidRange);
        }
        Ok(Self {
            teids: TeidAllocator::new(first, last, cfg.teid_reuse_after),
            ue_ips,
            seids: SeidAllocator::new()?,
            sdf_filters: Interner::default(),
            forwarding_extras: Interner::default(),
            pdi_extras: Interner::default(),
            aggregates: Default::default(),
            cache: ResponseCache::new(cfg.response_cache()),
            outstanding: Outstanding::new(cfg.t1, cfg.n1),
            setup_due: cfg.smfs.iter().map(|&a| (a, Some(now))).collect(),
            epoch: (now, ntp_now),
            recovery: ntp_now,
            dirty: None,
            assocs: HashMap::new(),
            sessions: HashMap::new(),
            by_cp: ByCpSeid::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            cfg,
            dp,
        })
    }

    pub fn datapath(&self) -> &D {
        &self.dp
    }
    pub fn datapath_mut(&mut self) -> &mut D {
        &mut self.dp
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
    pub fn association_count(&self) -> usize {
        self.assocs.len()
    }
    /// The rules of a session, as installed.
    pub fn session(&self, seid: Seid) -> Option<&upf_rules::Session> {
        self.sessions.get(&seid).map(|s| &*s.rules)
    }
    /// Every session's rules, in no particular order.
    pub fn sessions(&self) -> impl Iterator<Item = &upf_rules::Session> {
        self.sessions.values().map(|s| &*s.rules)
    }
    /// Our Recovery Time Stamp.
    pub fn recovery_time_stamp(&self) -> u32 {
        self.recovery
    }
    /// Every associated peer's Node ID.
    pub fn associations(&self) -> impl Iterator<Item = (&NodeId, SocketAddr)> {
        self.assocs.iter().map(|(n, a)| (n, a.addr))
    }

    /// The instant of NTP seconds `ntp`: within 68 years of our epoch either way (the
    /// inverse of [`Agent::ntp`]); one too early for an Instant is the earliest we know.
    pub(crate) fn instant(&self, ntp: u32) -> Instant {
        let (i0, n0) = self.epoch;
        let d = i64::from(ntp.wrapping_sub(n0).cast_signed());
        let secs = std::time::Duration::from_secs(d.unsigned_abs());
        if d >= 0 {
            i0 + secs
        } else {
            i0.checked_sub(secs).unwrap_or(i0)
        }
    }

    /// NTP seconds at `t`.
    pub(crate) fn ntp(&self, t: Instant) -> u32 {
        let (i0, n0) = self.epoch;
        let secs = if t >= i0 {
            i64::try_from(t.duration_since(i0).as_secs()).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(i0.duration_since(t).as_secs()).unwrap_or(i64::MAX)
        };
        // NTP era wrap-around is the arithmetic's business (RFC 5905 §6).
        u32::try_from(i64::from(n0).wrapping_add(secs).rem_euclid(1 << 32)).unwrap_or(0)
    }

    // ---- output ----------------------------------------------------------------------

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(crate) fn event(&mut self, e: Event) {
        // Bounded: a driver that never polls events must not make memory grow.
        if self.events.len() < 4096 {
            self.events.push_back(e);
        } else {
            self.stats.events_dropped += 1;
        }
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hb = self
            .assocs
            .values()
            .filter(|a| !a.heartbeat_pending)
            .map(|a| a.next_heartbeat);
        let setup = self.setup_due.iter().filter_map(|(_, t)| *t);
        [self.outstanding.next_timeout(), self.cache.next_expiry()]
            .into_iter()
            .flatten()
            .chain(hb)
            .chain(setup)
            .min()
    }

    /// Runs the timers due at `now`: retransmissions, heartbeats, UP-initiated association
    /// setup, response-cache expiry; and drains the data path's events into reports.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.cache.expire(now);
        let mut resend = Vec::new();
        let given_up = self.outstanding.handle_timeout(now, |peer, bytes| {
            resend.push(Transmit {
                dest: peer,
                payload: bytes.to_vec(),
                usage: bytes.get(1).is_some_and(|&t| may_carry_usage(t)),
            })
        });
        self.stats.retransmissions_sent += resend.len() as u64;
        self.transmits.extend(resend);
        for (peer, _seq, ctx) in given_up {
            self.stats.requests_given_up += 1;
            self.event(Event::RequestGivenUp {
                message_type: ctx.message_type(),
                peer,
            });
            self.request_given_up(now, ctx);
        }
        let due: Vec<NodeId> = self
            .assocs
            .iter()
            .filter(|(_, a)| !a.heartbeat_pending && a.next_heartbeat <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            self.send_heartbeat(now, node);
        }
        for i in 0..self.setup_due.len() {
            if let (smf, Some(t)) = self.setup_due[i] {
                if t <= now {
                    self.setup_due[i].1 = None;
                    self.send_association_setup(now, smf);
                }
            }
        }
        self.handle_datapath_events(now);
    }

    fn request_given_up(&mut self, now: Instant, ctx: Pending) {
        match ctx {
            // TS 29.244 §6.2.6.1 / TS 23.527: a peer that stops answering heartbeats is lost;
            // its association and sessions go, with every allocation they held.
            Pending::Heartbeat(node) => {
                self.release_association(now, &node, "heartbeat lost");
            }
            Pending::AssociationSetup(smf) => {
                let retry = now + self.cfg.heartbeat_interval;
                if let Some(e) = self.setup_due.iter_mut().find(|(a, _)| *a == smf) {
                    e.1 = Some(retry);
                }
            }
            Pending::SessionReport(_) | Pending::NodeReport | Pending::AssociationUpdate => {}
        }
    }

    // ---- input -----------------------------------------------------------------------

    /// Handles one datagram from `peer`: every PFCP message in it, in order.
    pub fn handle_datagram(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8]) {
        let mut rest = bytes;
        for _ in 0..MESSAGES_PER_DATAGRAM {
            if rest.is_empty() {
                return;
            }
            // §6.4: a retransmitted request is answered with the response sent before,
            // without executing it again.
            if let Ok((raw, tail)) = RawMessage::split(rest) {
                if upf_pfcp::is_request_type(raw.message_type) {
                    if let Some(resp) = self.cache.get(now, peer, raw.header.sequence) {
                        let payload = resp.to_vec();
                        self.stats.retransmissions_answered += 1;
                        self.transmits.push_back(Transmit {
                            dest: peer,
                            payload,
                            // The response's type is the request's plus one.
                            usage: may_carry_usage(raw.message_type.wrapping_add(1)),
                        });
                        rest = tail;
                        continue;
                    }
                }
            }
            match Pdu::decode(rest) {
                Ok((pdu, tail)) => {
                    rest = tail;
                    self.stats.received[usize::from(pdu.message.message_type() & 63)] += 1;
                    self.handle_pdu(now, peer, pdu);
                }
                Err(e) => {
                    self.handle_malformed(now, peer, rest, e);
                    return; // the position of anything after it is unknown
                }
            }
        }
        if !rest.is_empty() {
            self.stats.dropped += 1;
            self.event(Event::Dropped {
                peer,
                why: "more messages in one datagram than are answered",
            });
        }
    }

    fn handle_pdu(&mut self, now: Instant, peer: SocketAddr, pdu: Pdu) {
        let Pdu { header, message } = pdu;
        let seq = header.sequence;
        if !message.is_request() {
            return self.handle_response(now, peer, header, message);
        }
        // §6.2.6.1: every request but these two needs an association, and the sender must
        // speak for one; which association may do what is checked per procedure.
        let opens = matches!(
            &message,
            Message::HeartbeatRequest(_) | Message::AssociationSetupRequest(_)
        );
        if !opens && !self.is_associated(peer) {
            let t = message.message_type();
            self.refuse(t, peer, Refusal::NotAssociated);
            let cp_seid = match &message {
                Message::SessionEstablishmentRequest(m) => m.cp_f_seid.seid,
                _ => 0,
            };
            let r = Reject::new(
                Cause::NO_ESTABLISHED_PFCP_ASSOCIATION,
                "sender not associated",
            );
            if let Some((seid, m)) = self.reject_response(t, cp_seid, r) {
                self.respond(now, peer, seq, seid, m);
            }
            return;
        }
        let (seid, response) = match message {
            Message::HeartbeatRequest(m) => (None, self.heartbeat_request(now, peer, m).into()),
            Message::AssociationSetupRequest(m) => {
                (None, self.association_setup_request(now, peer, m))
            }
            Message::AssociationUpdateRequest(m) => {
                (None, self.association_update_request(peer, m))
            }
            Message::AssociationReleaseRequest(m) => {
                (None, self.association_release_request(now, peer, m))
            }
            Message::PfdManagementRequest(_) => (
                None,
                // PFDM is not advertised: the SMF should not send this (§6.2.5).
                PfdManagementResponse {
                    cause: Cause::SERVICE_NOT_SUPPORTED,
                    offending_ie: None,
                    node_id: Some(self.cfg.node_id.clone()),
                }
                .into(),
            ),
            Message::NodeReportRequest(_) => (
                None,
                // Node reports are sent by UP functions; a CP function's is not understood.
                NodeReportResponse {
                    node_id: self.cfg.node_id.clone(),
                    cause: Cause::SERVICE_NOT_SUPPORTED,
                    offending_ie: None,
                }
                .into(),
            ),
            Message::SessionSetDeletionRequest(m) => {
                (None, self.session_set_deletion(now, peer, m))
            }
            Message::SessionEstablishmentRequest(m) => {
                let (cp, resp) = self.session_establishment(now, peer, header, m);
                (Some(cp), resp)
            }
            Message::SessionModificationRequest(m) => {
                let (cp, resp) = self.session_modification(now, peer, header, m);
                (Some(cp), resp)
            }
            Message::SessionDeletionRequest(_) => {
                let (cp, resp) = self.session_deletion(now, peer, header);
                (Some(cp), resp)
            }
            Message::SessionReportRequest(_) => (
                Some(header.seid.unwrap_or(0)),
                // Sent by UP functions only.
                SessionReportResponse {
                    cause: Cause::SERVICE_NOT_SUPPORTED,
                    ..Default::default()
                }
                .into(),
            ),
            _ => {
                self.stats.dropped += 1;
                return self.event(Event::Dropped {
                    peer,
                    why: "unexpected message",
                });
            }
        };
        self.respond(now, peer, seq, seid, response);
    }

    /// Sends a response and keeps it for retransmitted requests.
    pub(crate) fn respond(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        seq: u32,
        seid: Option<u64>,
        message: Message,
    ) {
        if let Some(c) = response_cause(&message) {
            self.stats.causes_sent[usize::from(c.0)] += 1;
        }
        // A refusal to a sender without an association changed nothing: executing its
        // retransmission again costs less than keeping it, and an unassociated sender can
        // then not fill the cache at all.
        let keep =
            self.is_associated(peer) || response_cause(&message).is_some_and(|c| c.is_accepted());
        let usage = carries_usage(&message);
        let payload = Pdu::new(seid, seq, message).to_bytes();
        if keep {
            self.cache.insert(now, peer, seq, payload.clone());
        }
        self.transmits.push_back(Transmit {
            dest: peer,
            payload,
            usage,
        });
    }

    /// Sends a request of ours and tracks it for retransmission.
    pub(crate) fn request(
        &mut self,
        now: Instant,
        dest: SocketAddr,
        seid: Option<u64>,
        message: Message,
        ctx: Pending,
    ) {
        if self.outstanding.len() >= self.cfg.limits.pending_requests {
            self.stats.reports_dropped += 1;
            return;
        }
        let seq = self.outstanding.next_sequence();
        let usage = carries_usage(&message);
        let payload = Pdu::new(seid, seq, message).to_bytes();
        if self.outstanding.bytes() + payload.len() > self.cfg.limits.pending_request_bytes {
            self.stats.reports_dropped_bytes += 1;
            return;
        }
        self.outstanding.sent(now, dest, seq, payload.clone(), ctx);
        self.transmits.push_back(Transmit {
            dest,
            payload,
            usage,
        });
    }

    /// A datagram that did not decode: a request still gets a response with the cause
    /// (TS 29.244 §7.6); anything else is dropped and counted.
    fn handle_malformed(&mut self, now: Instant, peer: SocketAddr, bytes: &[u8], e: MessageError) {
        // §7.6.3: a request whose datagram disagrees with its Length field is still answered
        // (Invalid Length) when its fixed header is whole.
        let header = e.header.or_else(|| raw_header(bytes));
        let (Some(t), Some(header)) = (e.message_type, header) else {
            self.stats.dropped += 1;
            return self.event(Event::Dropped {
                peer,
                why: "not a PFCP message",
            });
        };
        if e.error.kind() == ErrorKind::UnsupportedVersion {
            // §7.4.4.7: header only, with the request's sequence number.
            let m = Message::VersionNotSupportedResponse(VersionNotSupportedResponse {});
            return self.respond(now, peer, header.sequence, None, m);
        }
        let reject = Reject::from(e.error);
        self.event(Event::Rejected {
            message_type: t,
            peer,
            reject,
        });
        // The CP SEID of a session request, told only to the session's own association.
        let cp_seid = match t {
            50 => RawMessage::split(bytes)
                .ok()
                .and_then(|(raw, _)| find_ie::<FSeid>(raw.body, 57))
                .map_or(0, |f| f.seid),
            56 => header.seid.unwrap_or(0),
            _ => header
                .seid
                .and_then(|s| self.owned_session(peer, Seid(s)).ok())
                .map_or(0, |s| s.rules.cp_seid.0),
        };
        let Some((seid, m)) = self.reject_response(t, cp_seid, reject) else {
            // A malformed response, or a message type nobody knows (§7.6: ignore).
            self.stats.dropped += 1;
            return self.event(Event::Dropped {
                peer,
                why: "malformed response or unknown message",
            });
        };
        self.respond(now, peer, header.sequence, seid, m);
    }

    /// The response refusing a request of type `t` (None for a type that is not a request
    /// the UPF answers); `cp_seid` goes in the header of a session response.
    fn reject_response(
        &self,
        t: u8,
        cp_seid: u64,
        reject: Reject,
    ) -> Option<(Option<u64>, Message)> {
        let node_id = self.cfg.node_id.clone();
        let offending_ie = reject.offending_ie.map(OffendingIe);
        Some(match t {
            1 => (None, self.heartbeat_response().into()),
            5 => (None, self.association_setup_response(reject.cause).into()),
            7 => (
                None,
                AssociationUpdateResponse {
                    node_id,
                    cause: reject.cause,
                    ..Default::default()
                }
                .into(),
            ),
            9 => (
                None,
                AssociationReleaseResponse {
                    node_id,
                    cause: reject.cause,
                }
                .into(),
            ),
            3 => (
                None,
                PfdManagementResponse {
                    cause: reject.cause,
                    offending_ie,
                    node_id: Some(node_id),
                }
                .into(),
            ),
            12 => (
                None,
                NodeReportResponse {
                    node_id,
                    cause: reject.cause,
                    offending_ie,
                }
                .into(),
            ),
            14 => (
                None,
                SessionSetDeletionResponse {
                    node_id,
                    cause: reject.cause,
                    offending_ie,
                }
                .into(),
            ),
            50 => (
                Some(cp_seid),
                crate::session::establishment_reject(node_id, reject).into(),
            ),
            52 => (
                Some(cp_seid),
                crate::session::modification_reject(reject).into(),
            ),
            54 => (
                Some(cp_seid),
                crate::session::deletion_reject(reject).into(),
            ),
            56 => (
                Some(cp_seid),
                SessionReportResponse {
                    cause: reject.cause,
                    offending_ie,
                    ..Default::default()
                }
                .into(),
            ),
            _ => return None,
        })
    }

    fn handle_response(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        header: Header,
        message: Message,
    ) {
        let Some(ctx) = self.outstanding.answered(peer, header.sequence) else {
            self.stats.dropped += 1;
            return self.event(Event::Dropped {
                peer,
                why: "response to no outstanding request",
            });
        };
        match (ctx, message) {
            (Pending::Heartbeat(node), Message::HeartbeatResponse(m)) => {
                self.heartbeat_answered(now, &node, m.recovery_time_stamp.0);
            }
            (Pending::AssociationSetup(smf), Message::AssociationSetupResponse(m)) => {
                let elsewhere = self
                    .assocs
                    .get(&m.node_id)
                    .is_some_and(|a| !a.speaks_from(smf.ip()));
                if elsewhere {
                    self.refuse(6, peer, Refusal::NodeAssociatedElsewhere);
                }
                if m.cause.is_accepted() && !elsewhere {
                    self.associate(now, m.node_id, smf, m.recovery_time_stamp.0);
                } else if let Some(e) = self.setup_due.iter_mut().find(|(a, _)| *a == smf) {
                    e.1 = Some(now + self.cfg.heartbeat_interval);
                }
            }
            (Pending::SessionReport(seid), Message::SessionReportResponse(m)) => {
                self.session_report_answered(now, seid, m);
            }
            (Pending::NodeReport, Message::NodeReportResponse(_))
            | (Pending::AssociationUpdate, Message::AssociationUpdateResponse(_)) => {}
            _ => {
                self.stats.dropped += 1;
                self.event(Event::Dropped {
                    peer,
                    why: "response of the wrong type",
                });
            }
        }
    }

    // ---- node procedures, TS 29.244 §6.2 ------------------------------------------------

    fn heartbeat_response(&self) -> HeartbeatResponse {
        HeartbeatResponse {
            recovery_time_stamp: RecoveryTimeStamp(self.recovery),
        }
    }

    /// §6.2.2: answered for anyone; from an associated peer, a changed Recovery Time Stamp
    /// means it restarted.
    fn heartbeat_request(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        m: HeartbeatRequest,
    ) -> HeartbeatResponse {
        let node = self
            .assocs
            .iter()
            .find(|(_, a)| a.addr == peer)
            .map(|(n, _)| n.clone());
        if let Some(node) = node {
            self.heartbeat_answered(now, &node, m.recovery_time_stamp.0);
        }
        self.heartbeat_response()
    }

    fn heartbeat_answered(&mut self, now: Instant, node: &NodeId, recovery: u32) {
        let interval = self.cfg.heartbeat_interval;
        let Some(a) = self.assocs.get_mut(node) else {
            return;
        };
        a.heartbeat_pending = false;
        a.next_heartbeat = now + interval;
        if a.recovery != recovery {
            a.recovery = recovery;
            self.association_changed(node);
            self.peer_restarted(now, node);
        }
    }

    fn send_heartbeat(&mut self, now: Instant, node: NodeId) {
        let Some(a) = self.assocs.get_mut(&node) else {
            return;
        };
        a.heartbeat_pending = true;
        let dest = a.addr;
        let m = HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(self.recovery),
            source_ip_address: None,
        };
        self.request(now, dest, None, m.into(), Pending::Heartbeat(node));
    }

    /// Before stopping: asks every associated CP function to release its association (TS
    /// 29.244 §6.2.7: an Association Update Request carrying the PFCP Association Release
    /// Request IE with SARR, and URSS so that the usage of its sessions is reported first).
    pub fn release_all(&mut self, now: Instant) {
        let m = AssociationUpdateRequest {
            node_id: self.cfg.node_id.clone(),
            pfcp_association_release_request: Some(AssociationReleaseFlags {
                sarr: true,
                urss: true,
            }),
            ..Default::default()
        };
        let dests: Vec<SocketAddr> = self.assocs.values().map(|a| a.addr).collect();
        for d in dests {
            self.request(now, d, None, m.clone().into(), Pending::AssociationUpdate);
        }
    }

    /// The response cache's contents and evictions.
    pub fn response_cache(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Requests of ours still waiting for their response.
    pub fn has_pending_requests(&self) -> bool {
        !self.outstanding.is_empty()
    }

    fn allowed(&self, node: &NodeId, peer: SocketAddr) -> bool {
        self.cfg.allowed_peers.is_empty()
            || self.cfg.allowed_peers.iter().any(|a| match a {
                AllowedPeer::Node(n) => n == node,
                AllowedPeer::Addr(ip) => *ip == peer.ip(),
            })
    }

    fn association_setup_response(&self, cause: Cause) -> AssociationSetupResponse {
        AssociationSetupResponse {
            node_id: self.cfg.node_id.clone(),
            cause,
            recovery_time_stamp: RecoveryTimeStamp(self.recovery),
            up_function_features: Some(crate::support::features()),
            ..Default::default()
        }
    }

    /// §6.2.6.3 (CP-initiated setup). A setup from a node already associated replaces the
    /// association; with a new Recovery Time Stamp the peer restarted (§6.2.6.2.2 / TS 23.527
    /// §4.3): its old sessions are released.
    fn association_setup_request(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        m: AssociationSetupRequest,
    ) -> Message {
        let node = m.node_id;
        if !self.allowed(&node, peer) {
            self.refuse(5, peer, Refusal::NotAllowed);
            return self
                .association_setup_response(Cause::REQUEST_REJECTED)
                .into();
        }
        // A setup naming an associated node replaces its association (a restart, with a new
        // Recovery Time Stamp, releases its sessions): only the node itself may do that.
        if self
            .assocs
            .get(&node)
            .is_some_and(|a| !a.speaks_from(peer.ip()))
        {
            self.refuse(5, peer, Refusal::NodeAssociatedElsewhere);
            return self
                .association_setup_response(Cause::REQUEST_REJECTED)
                .into();
        }
        if !self.assocs.contains_key(&node) && self.assocs.len() >= self.cfg.limits.associations {
            let r = Reject::new(Cause::NO_RESOURCES_AVAILABLE, "association limit reached");
            self.event(Event::Rejected {
                message_type: 5,
                peer,
                reject: r,
            });
            return self.association_setup_response(r.cause).into();
        }
        self.associate(now, node, peer, m.recovery_time_stamp.0);
        self.association_setup_response(Cause::REQUEST_ACCEPTED)
            .into()
    }

    fn associate(&mut self, now: Instant, node: NodeId, peer: SocketAddr, recovery: u32) {
        let next_heartbeat = now + self.cfg.heartbeat_interval;
        let sessions = self.assocs.get(&node).map_or(0, |a| a.sessions);
        let previous = self.assocs.insert(
            node.clone(),
            Association {
                addr: peer,
                cp: Arc::new(CpPeer {
                    node: node.clone(),
                    addr: peer,
                }),
                recovery,
                next_heartbeat,
                heartbeat_pending: false,
                sessions,
            },
        );
        if let Some(e) = self.setup_due.iter_mut().find(|(a, _)| *a == peer) {
            e.1 = None;
        }
        self.association_changed(&node);
        match previous {
            Some(old) if old.recovery != recovery => self.peer_restarted(now, &node),
            Some(_) => {}
            None => self.event(Event::AssociationUp { node, peer }),
        }
    }

    fn peer_restarted(&mut self, now: Instant, node: &NodeId) {
        let n = self.release_sessions_of(now, node, "peer restarted");
        self.event(Event::PeerRestarted {
            node: node.clone(),
            sessions_released: n,
        });
    }

    fn association_update_request(
        &mut self,
        peer: SocketAddr,
        m: AssociationUpdateRequest,
    ) -> Message {
        let cause = if self.speaks_for(peer, &m.node_id) {
            Cause::REQUEST_ACCEPTED
        } else {
            self.refuse(7, peer, Refusal::NodeIdOfAnother);
            Cause::NO_ESTABLISHED_PFCP_ASSOCIATION
        };
        AssociationUpdateResponse {
            node_id: self.cfg.node_id.clone(),
            cause,
            up_function_features: Some(crate::support::features()),
            ..Default::default()
        }
        .into()
    }

    /// §6.2.8: the CP function releases the association; every session of it goes.
    fn association_release_request(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        m: AssociationReleaseRequest,
    ) -> Message {
        let cause = if !self.speaks_for(peer, &m.node_id) {
            self.refuse(9, peer, Refusal::NodeIdOfAnother);
            Cause::NO_ESTABLISHED_PFCP_ASSOCIATION
        } else if self.release_association(now, &m.node_id, "released by peer") {
            Cause::REQUEST_ACCEPTED
        } else {
            Cause::NO_ESTABLISHED_PFCP_ASSOCIATION
        };
        AssociationReleaseResponse {
            node_id: self.cfg.node_id.clone(),
            cause,
        }
        .into()
    }

    /// Drops an association and its sessions; false if there was none.
    pub(crate) fn release_association(
        &mut self,
        now: Instant,
        node: &NodeId,
        reason: &'static str,
    ) -> bool {
        let Some(a) = self.assocs.remove(node) else {
            return false;
        };
        self.association_changed(node);
        self.release_sessions_of(now, node, reason);
        self.cache.forget_peer(a.addr);
        for (_, ctx) in self.outstanding.cancel_peer(a.addr) {
            if let Pending::AssociationSetup(smf) = ctx {
                if let Some(e) = self.setup_due.iter_mut().find(|(x, _)| *x == smf) {
                    e.1 = Some(now);
                }
            }
        }
        // An SMF we associate with ourselves is asked again.
        if let Some(e) = self.setup_due.iter_mut().find(|(x, _)| *x == a.addr) {
            e.1 = Some(now + self.cfg.heartbeat_interval);
        }
        self.event(Event::AssociationDown {
            node: node.clone(),
            reason,
        });
        true
    }

    fn send_association_setup(&mut self, now: Instant, smf: SocketAddr) {
        let m = AssociationSetupRequest {
            node_id: self.cfg.node_id.clone(),
            recovery_time_stamp: RecoveryTimeStamp(self.recovery),
            up_function_features: Some(crate::support::features()),
            ..Default::default()
        };
        self.request(now, smf, None, m.into(), Pending::AssociationSetup(smf));
    }

    /// §6.2.9.2 Node Report: user-plane path failure or recovery towards GTP-U peers, sent
    /// to every associated CP function.
    pub(crate) fn node_report(&mut self, now: Instant, peer: IpAddr, failed: bool) {
        let remote = RemoteGtpuPeer {
            ipv4: match peer {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            },
            ipv6: match peer {
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => None,
            },
            destination_interface: None,
            network_instance: None,
        };
        let peers: upf_pfcp::Multi<RemoteGtpuPeer> = [remote].into_iter().collect();
        let m = NodeReportRequest {
            node_id: self.cfg.node_id.clone(),
            node_report_type: if failed {
                NodeReportType::UPFR
            } else {
                NodeReportType::UPRR
            },
            user_plane_path_failure_report: failed.then(|| UserPlanePathFailureReport {
                remote_gtpu_peers: peers.clone(),
            }),
            user_plane_path_recovery_report: (!failed).then(|| UserPlanePathRecoveryReport {
                remote_gtpu_peers: peers,
            }),
        };
        let dests: Vec<SocketAddr> = self.assocs.values().map(|a| a.addr).collect();
        for d in dests {
            self.request(now, d, None, m.clone().into(), Pending::NodeReport);
        }
    }
}

/// The Cause of a response message.
fn response_cause(m: &Message) -> Option<Cause> {
    Some(match m {
        Message::PfdManagementResponse(m) => m.cause,
        Message::AssociationSetupResponse(m) => m.cause,
        Message::AssociationUpdateResponse(m) => m.cause,
        Message::AssociationReleaseResponse(m) => m.cause,
        Message::NodeReportResponse(m) => m.cause,
        Message::SessionSetDeletionResponse(m) => m.cause,
        Message::SessionEstablishmentResponse(m) => m.cause,
        Message::SessionModificationResponse(m) => m.cause,
        Message::SessionDeletionResponse(m) => m.cause,
        Message::SessionReportResponse(m) => m.cause,
        _ => return None,
    })
}

/// The header fields of a message whose length is inconsistent (§7.2.2.1 layout), if the
/// fixed part is there.
fn raw_header(b: &[u8]) -> Option<Header> {
    let s = b.first()? & 0x01 != 0;
    let (seid, at) = if s {
        (Some(u64::from_be_bytes(b.get(4..12)?.try_into().ok()?)), 12)
    } else {
        (None, 4)
    };
    let q = b.get(at..at + 4)?; // sequence number and the spare/priority octet
    Some(Header {
        follow_on: false,
        seid,
        sequence: u32::from_be_bytes([0, q[0], q[1], q[2]]),
        priority: None,
    })
}

/// The first top-level IE of `ie_type` in a message body, if it decodes.
fn find_ie<T: upf_pfcp::IeValue>(body: &[u8], ie_type: u16) -> Option<T> {
    upf_pfcp::tlv::TlvIter::new(body)
        .map_while(Result::ok)
        .find(|ie| ie.ie_type == ie_type && ie.enterprise_id.is_none())
        .and_then(|ie| T::decode(ie.value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_cp_seid_tells_equal_cp_seids_of_two_owners_apart() {
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let (x, y) = (NodeId::Fqdn("x".into()), NodeId::Fqdn("y".into()));
        // Our sessions, all CP SEID 7: 10 from x at a, 11 from x at b, 12 from y at a.
        let owners = [(x.clone(), a), (x.clone(), b), (y.clone(), a)];
        let owner_of = |s: Seid| {
            owners
                .get(usize::try_from(s.0).ok()?.checked_sub(10)?)
                .map(|(n, ip)| (n, *ip))
        };
        let mut m = ByCpSeid::default();
        m.insert(&x, a, 7, Seid(10));
        m.insert(&x, b, 7, Seid(11));
        m.insert(&y, a, 7, Seid(12));
        assert_eq!(m.get(&x, a, 7, owner_of), Some(Seid(10)));
        assert_eq!(m.get(&x, b, 7, owner_of), Some(Seid(11)));
        assert_eq!(
            m.get(&y, a, 7, owner_of),
            Some(Seid(12)),
            "another node's CP F-SEID"
        );
        assert_eq!(m.get(&y, b, 7, owner_of), None);
        assert_eq!(m.get(&x, b, 8, owner_of), None);
        m.remove(&x, a, 7, Seid(10));
        assert_eq!(m.get(&x, a, 7, owner_of), None);
        assert_eq!(m.get(&x, b, 7, owner_of), Some(Seid(11)));
        assert_eq!(m.get(&y, a, 7, owner_of), Some(Seid(12)));
        m.insert(&x, a, 7, Seid(10)); // now the first for CP SEID 7
        assert_eq!(m.get(&x, a, 7, owner_of), Some(Seid(10)));
        m.remove(&x, b, 7, Seid(11));
        m.remove(&y, a, 7, Seid(12));
        m.remove(&x, a, 7, Seid(10));
        assert!(m.first.is_empty() && m.more.is_empty());
    }
}
