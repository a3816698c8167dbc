//! The SMF emulator: a PFCP client over a blocking UDP socket that associates with a UPF,
//! establishes, modifies and deletes sessions of the shape a 5GC SMF uses for one PDU session
//! over N3, and answers what the UPF asks meanwhile (Heartbeat, Session Report, Node Report,
//! Association Release). Messages are built with `upf_smf` and `upf_pfcp`.
//!
//! Every request is retransmitted after T1 up to N1 times (TS 29.244 §6.4) and then fails with
//! [`SmfError::Timeout`]; a response whose Cause is not an acceptance fails with
//! [`SmfError::Rejected`], naming the cause, the offending IE and the failed rule. Several
//! requests can be in flight at once ([`Smf::establish_many`]), which is how a load test
//! establishes thousands of sessions a second.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{decode_all, is_request_type, message_name, Cause, List, Message, Pdu};
use upf_smf as build;

pub use upf_smf::UeAddr;

/// Rule ids of an emulated session (one default QoS flow each way, and the high-priority
/// flow's PDRs and QER when [`SessionSpec::high_priority`] asks for one).
pub mod ids {
    pub const PDR_UL: u16 = 1;
    pub const PDR_DL: u16 = 2;
    pub const PDR_UL_HIGH: u16 = 3;
    pub const PDR_DL_HIGH: u16 = 4;
    pub const FAR_UL: u32 = 1;
    pub const FAR_DL: u32 = 2;
    pub const QER: u32 = 1;
    pub const QER_HIGH: u32 = 2;
    pub const URR: u32 = 1;
    /// CHOOSE ID of the uplink F-TEID.
    pub const CHID: u8 = 1;
}

/// Where and how the emulator talks PFCP.
#[derive(Debug, Clone)]
pub struct SmfConfig {
    /// The UPF's N4 address (port 8805 usually).
    pub upf: SocketAddr,
    /// Local address to bind (`0.0.0.0:0`: any port, the address the route to the UPF uses).
    pub bind: SocketAddr,
    /// Our Node ID and F-SEID address (default: the local address of the socket).
    pub node_ip: Option<Ipv4Addr>,
    /// Retransmission timer T1 and retransmission count N1 (TS 29.244 §6.4).
    pub t1: Duration,
    pub n1: u32,
    /// Requests in flight at once in [`Smf::establish_many`] and friends.
    pub window: usize,
}

impl SmfConfig {
    pub fn new(upf: SocketAddr) -> Self {
        Self {
            upf,
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            node_ip: None,
            t1: Duration::from_millis(1000),
            n1: 3,
            window: 64,
        }
    }
}

/// Why a procedure failed.
#[derive(Debug)]
pub enum SmfError {
    Io(io::Error),
    /// No response after the first transmission and N1 retransmissions.
    Timeout {
        request: &'static str,
        attempts: u32,
    },
    /// The UPF answered with a Cause that is not an acceptance.
    Rejected {
        request: &'static str,
        cause: Cause,
        offending_ie: Option<u16>,
        failed_rule: Option<FailedRuleId>,
    },
    /// The response was not what the procedure needs (wrong type, missing IE, wrong SEID).
    BadResponse {
        request: &'static str,
        why: String,
    },
}

impl fmt::Display for SmfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "N4 socket: {e}"),
            Self::Timeout { request, attempts } => {
                write!(f, "{request}: no response after {attempts} transmissions")
            }
            Self::Rejected {
                request,
                cause,
                offending_ie,
                failed_rule,
            } => {
                write!(
                    f,
                    "{request} rejected: cause {} ({})",
                    cause.0,
                    cause.name()
                )?;
                if let Some(ie) = offending_ie {
                    write!(f, ", offending IE {ie} ({})", type_name(*ie))?;
                }
                if let Some(r) = failed_rule {
                    write!(f, ", failed rule {r:?}")?;
                }
                Ok(())
            }
            Self::BadResponse { request, why } => write!(f, "{request}: bad response: {why}"),
        }
    }
}

impl std::error::Error for SmfError {}

impl From<io::Error> for SmfError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// QoS of a session: one QER (gates open) with an MBR, a GBR and the QFI the UPF marks
/// downlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Qos {
    /// MBR uplink and downlink, kbit/s (None: no MBR).
    pub mbr_kbps: Option<(u64, u64)>,
    /// GBR uplink and downlink, kbit/s (None: a non-GBR flow).
    pub gbr_kbps: Option<(u64, u64)>,
}

/// A second QoS flow: uplink G-PDUs with QFI `qfi` in their PDU Session Container, and
/// downlink packets with DSCP `dscp` (an SDF filter on the ToS octet), the latter sent to the
/// gNB marked with `qfi`. Its PDRs take precedence over the default flow's; it shares the
/// FARs and the URR, and has its own QER (same MBR as the default one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HighPriority {
    pub qfi: u8,
    pub dscp: u8,
}

/// What to establish for one UE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    /// UE IPv4: given by us, or CHV4 (the UPF allocates).
    pub ue: UeAddr,
    /// Uplink F-TEID: `None` asks the UPF to choose (CH, CHOOSE ID 1); `Some((teid, addr))`
    /// gives it (addr: the UPF's N3 address).
    pub ul_f_teid: Option<(u32, Ipv4Addr)>,
    /// Downlink tunnel at the gNB: our TEID and N3 address.
    pub dl_teid: u32,
    pub gnb: Ipv4Addr,
    /// QFI of the default flow: in the uplink PDI, the QER and the PDU Session Container.
    pub qfi: u8,
    /// A QER on both PDRs, if any.
    pub qos: Option<Qos>,
    /// Volume threshold (octets) of the URR; `None`: measure only (reports on query/deletion).
    pub volume_threshold: Option<u64>,
    pub network_instance: String,
    /// Start with the downlink FAR buffering (BUFF + NOCP) instead of forwarding.
    pub buffer_downlink: bool,
    /// A second, high-priority QoS flow.
    pub high_priority: Option<HighPriority>,
}

impl SessionSpec {
    pub fn new(ue: UeAddr, dl_teid: u32, gnb: Ipv4Addr) -> Self {
        Self {
            ue,
            ul_f_teid: None,
            dl_teid,
            gnb,
            qfi: 9,
            qos: None,
            volume_threshold: None,
            network_instance: "internet".into(),
            buffer_downlink: false,
            high_priority: None,
        }
    }
}

/// An established session as both ends see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Session {
    pub cp_seid: u64,
    pub up_seid: u64,
    /// The UPF's N4 address from its F-SEID (where session messages go).
    pub up_addr: Option<Ipv4Addr>,
    pub ue: Ipv4Addr,
    /// Uplink tunnel: TEID and N3 address at the UPF.
    pub ul_teid: u32,
    pub upf_n3: Ipv4Addr,
    /// Downlink tunnel: TEID and N3 address at the gNB.
    pub dl_teid: u32,
    pub gnb: Ipv4Addr,
    pub qfi: u8,
    /// The high-priority QoS flow, if the session has one.
    pub high: Option<HighPriority>,
}

/// What the downlink FAR does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Downlink {
    /// FORW with Outer Header Creation towards the gNB (the UE is connected).
    Forward,
    /// BUFF (+ NOCP if `notify`: the UPF sends a Downlink Data Report on the first packet).
    Buffer { notify: bool },
    /// DROP.
    Drop,
}

/// Volume measured by a URR, summed over the Usage Reports of a response or report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub reports: u32,
    pub total_octets: u64,
    pub uplink_octets: u64,
    pub downlink_octets: u64,
    pub uplink_packets: u64,
    pub downlink_packets: u64,
}

impl Usage {
    pub fn of<'a>(reports: impl IntoIterator<Item = &'a UsageReport>) -> Self {
        let mut u = Usage::default();
        for r in reports {
            u.reports += 1;
            if let Some(v) = r.volume_measurement {
                u.total_octets += v.total_volume.unwrap_or(0);
                u.uplink_octets += v.uplink_volume.unwrap_or(0);
                u.downlink_octets += v.downlink_volume.unwrap_or(0);
                u.uplink_packets += v.uplink_packets.unwrap_or(0);
                u.downlink_packets += v.downlink_packets.unwrap_or(0);
            }
        }
        u
    }
}

/// Something the UPF told us on its own initiative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpfEvent {
    /// Session Report Request with a Downlink Data Report (a packet for a buffering FAR).
    DownlinkData { cp_seid: u64 },
    /// Session Report Request with Usage Reports.
    Usage { cp_seid: u64, usage: Usage },
    /// Session Report Request with an Error Indication Report (the gNB refused a TEID).
    ErrorIndication { cp_seid: u64 },
    /// The UPF released the association (or announced it will).
    AssociationReleased,
    /// The UPF's Recovery Time Stamp changed: it restarted and lost our sessions.
    UpfRestarted { old: u32, new: u32 },
}

/// Counters of the emulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmfStats {
    pub requests_sent: u64,
    pub retransmissions: u64,
    pub responses: u64,
    pub timeouts: u64,
    pub rejected: u64,
    /// Requests from the UPF answered (Heartbeat, Session Report, Node Report, Release).
    pub upf_requests: u64,
    pub session_reports: u64,
    /// Datagrams that did not decode, or responses nobody waited for.
    pub ignored: u64,
}

/// What the Association Setup Response said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Association {
    pub upf_node: NodeId,
    pub recovery_time_stamp: u32,
    pub features: Option<UpFunctionFeatures>,
}

struct Pending {
    index: usize,
    request: &'static str,
    response_type: u8,
    bytes: Vec<u8>,
    deadline: Instant,
    sent: u32,
    /// When the request was first sent (its response time counts from here).
    first_sent: Instant,
}

const MAX_EVENTS: usize = 100_000;

/// See the module documentation.
#[derive(Debug)]
pub struct Smf {
    cfg: SmfConfig,
    sock: UdpSocket,
    node: NodeId,
    node_ip: Ipv4Addr,
    recovery: u32,
    seq: u32,
    next_cp_seid: u64,
    /// CP SEID → UP SEID of every session we hold (to answer Session Report Requests).
    sessions: HashMap<u64, u64>,
    upf_recovery: Option<u32>,
    stats: SmfStats,
    events: VecDeque<UpfEvent>,
    buf: Vec<u8>,
    /// Response time of every answered request, when recording ([`Smf::record_response_times`]).
    response_times: Option<Vec<Duration>>,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pending({} #{})", self.request, self.index)
    }
}

/// NTP seconds now (RFC 5905 era 0).
fn ntp_now() -> u32 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    u32::try_from((unix + 2_208_988_800) & 0xffff_ffff).unwrap_or(0)
}

fn bad(request: &'static str, why: impl Into<String>) -> SmfError {
    SmfError::BadResponse {
        request,
        why: why.into(),
    }
}

fn check_cause(
    request: &'static str,
    cause: Cause,
    offending_ie: Option<OffendingIe>,
    failed_rule: Option<FailedRuleId>,
) -> Result<(), SmfError> {
    if cause.is_accepted() {
        Ok(())
    } else {
        Err(SmfError::Rejected {
            request,
            cause,
            offending_ie: offending_ie.map(|o| o.0),
            failed_rule,
        })
    }
}

impl Smf {
    /// Binds the socket and "connects" it to the UPF (only its datagrams are received).
    pub fn new(cfg: SmfConfig) -> Result<Self, SmfError> {
        let sock = UdpSocket::bind(cfg.bind)?;
        sock.connect(cfg.upf)?;
        let node_ip = match (cfg.node_ip, sock.local_addr()?.ip()) {
            (Some(a), _) => a,
            (None, IpAddr::V4(a)) if !a.is_unspecified() => a,
            _ => Ipv4Addr::LOCALHOST,
        };
        Ok(Self {
            sock,
            node: NodeId::Ipv4(node_ip),
            node_ip,
            recovery: ntp_now(),
            seq: 0,
            next_cp_seid: 1,
            sessions: HashMap::new(),
            upf_recovery: None,
            stats: SmfStats::default(),
            events: VecDeque::new(),
            buf: vec![0; 65_536],
            response_times: None,
            cfg,
        })
    }

    pub fn config(&self) -> &SmfConfig {
        &self.cfg
    }

    pub fn node_ip(&self) -> Ipv4Addr {
        self.node_ip
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub fn stats(&self) -> SmfStats {
        self.stats
    }

    /// Takes what the UPF reported since the last call.
    pub fn take_events(&mut self) -> Vec<UpfEvent> {
        self.events.drain(..).collect()
    }

    /// Starts (or stops) recording the response time of each of our requests: first
    /// transmission to its response, retransmissions included; requests that time out are not
    /// recorded.
    pub fn record_response_times(&mut self, on: bool) {
        self.response_times = on.then(Vec::new);
    }

    /// The response times recorded since the last call, in the order the responses arrived.
    pub fn take_response_times(&mut self) -> Vec<Duration> {
        self.response_times
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Sessions established and not deleted.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// PFCP Association Setup (SMF-initiated, TS 29.244 §6.2.6.1).
    pub fn associate(&mut self) -> Result<Association, SmfError> {
        const REQ: &str = "Association Setup Request";
        let m = build::association_setup(self.node.clone(), self.recovery);
        let pdu = self.request(None, m.into())?;
        let Message::AssociationSetupResponse(r) = pdu.message else {
            return Err(bad(REQ, "not an Association Setup Response"));
        };
        check_cause(REQ, r.cause, None, None)?;
        self.upf_recovery = Some(r.recovery_time_stamp.0);
        Ok(Association {
            upf_node: r.node_id,
            recovery_time_stamp: r.recovery_time_stamp.0,
            features: r.up_function_features,
        })
    }

    /// Heartbeat; returns the UPF's Recovery Time Stamp.
    pub fn heartbeat(&mut self) -> Result<u32, SmfError> {
        let m = HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(self.recovery),
            ..Default::default()
        };
        let pdu = self.request(None, m.into())?;
        let Message::HeartbeatResponse(r) = pdu.message else {
            return Err(bad("Heartbeat Request", "not a Heartbeat Response"));
        };
        self.check_recovery(r.recovery_time_stamp.0);
        Ok(r.recovery_time_stamp.0)
    }

    /// PFCP Association Release (SMF-initiated). Sessions are forgotten on our side too.
    pub fn release(&mut self) -> Result<(), SmfError> {
        const REQ: &str = "Association Release Request";
        let m = AssociationReleaseRequest {
            node_id: self.node.clone(),
        };
        let pdu = self.request(None, m.into())?;
        let Message::AssociationReleaseResponse(r) = pdu.message else {
            return Err(bad(REQ, "not an Association Release Response"));
        };
        check_cause(REQ, r.cause, None, None)?;
        self.sessions.clear();
        Ok(())
    }

    /// The Session Establishment Request for `spec` with our CP SEID `cp_seid`.
    pub fn establishment_request(
        &self,
        cp_seid: u64,
        spec: &SessionSpec,
    ) -> SessionEstablishmentRequest {
        let ni = || Some(NetworkInstance(spec.network_instance.as_str().into()));
        let ul_fteid = match spec.ul_f_teid {
            None => build::choose_teid(ids::CHID),
            Some((teid, addr)) => FTeid::Assigned {
                teid,
                ipv4: Some(addr),
                ipv6: None,
            },
        };
        let mut ul_pdi = build::pdi(
            SourceInterface::ACCESS,
            Some(ul_fteid),
            Some(build::ue_ip(spec.ue, false)),
            None,
        );
        ul_pdi.qfis = [Qfi(spec.qfi)].into_iter().collect();
        ul_pdi.network_instance = ni();
        let mut dl_pdi = build::pdi(
            SourceInterface::CORE,
            None,
            Some(build::ue_ip(spec.ue, true)),
            None,
        );
        dl_pdi.qfis = Default::default();
        dl_pdi.network_instance = ni();
        let qers: &[u32] = if spec.qos.is_some() { &[ids::QER] } else { &[] };
        let mut ul_fwd = build::forwarding(DestinationInterface::CORE, None);
        ul_fwd.network_instance = ni();
        let dl_far = if spec.buffer_downlink {
            build::create_far(
                ids::FAR_DL,
                ApplyAction::BUFF | ApplyAction::NOCP,
                None,
                None,
            )
        } else {
            let mut f = build::forwarding(
                DestinationInterface::ACCESS,
                Some(OuterHeaderCreation::gtpu_ipv4(spec.dl_teid, spec.gnb)),
            );
            f.network_instance = ni();
            build::create_far(ids::FAR_DL, ApplyAction::FORW, Some(f), None)
        };
        let triggers = match spec.volume_threshold {
            Some(_) => ReportingTriggers::VOLTH,
            None => ReportingTriggers::default(),
        };
        let mut urr = build::create_urr(ids::URR, triggers, spec.volume_threshold);
        urr.measurement_method = MeasurementMethod::VOLUM;
        let mut create_pdrs: List<CreatePdr> = [
            build::create_pdr(
                ids::PDR_UL,
                200,
                ul_pdi.clone(),
                ids::FAR_UL,
                qers,
                &[ids::URR],
                true,
            ),
            build::create_pdr(
                ids::PDR_DL,
                200,
                dl_pdi.clone(),
                ids::FAR_DL,
                qers,
                &[ids::URR],
                false,
            ),
        ]
        .into_iter()
        .collect();
        let mut create_qers: List<CreateQer> = spec
            .qos
            .map(|q| {
                let mut qer = build::create_qer(ids::QER, q.mbr_kbps, Some(spec.qfi));
                qer.gbr = q.gbr_kbps.map(|(u, d)| Gbr {
                    uplink_kbps: u,
                    downlink_kbps: d,
                });
                qer
            })
            .into_iter()
            .collect();
        if let Some(h) = spec.high_priority {
            // The same F-TEID (given, or the same CHOOSE ID) and UE address; told apart by
            // the QFI uplink and by the ToS octet (DSCP << 2, mask 0xfc) downlink.
            let mut ul = ul_pdi;
            ul.qfis = [Qfi(h.qfi)].into_iter().collect();
            let mut dl = dl_pdi;
            dl.sdf_filters = [SdfFilter {
                tos_traffic_class: Some(u16::from_be_bytes([h.dscp << 2, 0xfc])),
                ..Default::default()
            }]
            .into_iter()
            .collect();
            let hq: &[u32] = if spec.qos.is_some() {
                &[ids::QER_HIGH]
            } else {
                &[]
            };
            create_pdrs.push(build::create_pdr(
                ids::PDR_UL_HIGH,
                100,
                ul,
                ids::FAR_UL,
                hq,
                &[ids::URR],
                true,
            ));
            create_pdrs.push(build::create_pdr(
                ids::PDR_DL_HIGH,
                100,
                dl,
                ids::FAR_DL,
                hq,
                &[ids::URR],
                false,
            ));
            if let Some(q) = spec.qos {
                create_qers.push(build::create_qer(ids::QER_HIGH, q.mbr_kbps, Some(h.qfi)));
            }
        }
        SessionEstablishmentRequest {
            node_id: self.node.clone(),
            cp_f_seid: FSeid {
                seid: cp_seid,
                ipv4: Some(self.node_ip),
                ipv6: None,
            },
            create_pdrs,
            create_fars: [
                build::create_far(ids::FAR_UL, ApplyAction::FORW, Some(ul_fwd), None),
                dl_far,
            ]
            .into_iter()
            .collect(),
            create_urrs: [urr].into_iter().collect(),
            create_qers,
            pdn_type: Some(PdnType::IPV4),
            ..Default::default()
        }
    }

    /// Establishes one session.
    pub fn establish(&mut self, spec: &SessionSpec) -> Result<Session, SmfError> {
        self.establish_many(std::slice::from_ref(spec))
            .pop()
            .unwrap_or_else(|| Err(bad("Session Establishment Request", "no result")))
    }

    /// Establishes a session per spec, up to `window` requests in flight; one result per spec,
    /// in order.
    pub fn establish_many(&mut self, specs: &[SessionSpec]) -> Vec<Result<Session, SmfError>> {
        const REQ: &str = "Session Establishment Request";
        let first = self.next_cp_seid;
        self.next_cp_seid += specs.len() as u64;
        let reqs = specs
            .iter()
            .zip(first..)
            .map(|(s, seid)| (Some(0), self.establishment_request(seid, s).into()))
            .collect();
        let results = self.transact(reqs);
        let out: Vec<_> = results
            .into_iter()
            .zip(specs.iter().zip(first..))
            .map(|(r, (spec, cp_seid))| {
                let pdu = r?;
                let seid = pdu.header.seid;
                let Message::SessionEstablishmentResponse(m) = pdu.message else {
                    return Err(bad(REQ, "not a Session Establishment Response"));
                };
                let s = Self::established(cp_seid, spec, m)?;
                if seid != Some(cp_seid) {
                    return Err(bad(REQ, format!("header SEID {seid:?}, ours {cp_seid:#x}")));
                }
                Ok(s)
            })
            .collect();
        for s in out.iter().flatten() {
            self.sessions.insert(s.cp_seid, s.up_seid);
        }
        out
    }

    fn established(
        cp_seid: u64,
        spec: &SessionSpec,
        m: SessionEstablishmentResponse,
    ) -> Result<Session, SmfError> {
        const REQ: &str = "Session Establishment Request";
        check_cause(REQ, m.cause, m.offending_ie, m.failed_rule_id)?;
        let f = m.up_f_seid.ok_or_else(|| bad(REQ, "no UP F-SEID"))?;
        let created = |id: u16| m.created_pdrs.iter().find(|c| c.pdr_id == PdrId(id));
        let (ul_teid, upf_n3) = match spec.ul_f_teid {
            Some(t) => t,
            None => match created(ids::PDR_UL).and_then(|c| c.local_f_teid) {
                Some(FTeid::Assigned {
                    teid,
                    ipv4: Some(a),
                    ..
                }) => (teid, a),
                other => {
                    return Err(bad(
                        REQ,
                        format!("no IPv4 F-TEID for uplink PDR 1 in Created PDRs: {other:?}"),
                    ))
                }
            },
        };
        let ue = match spec.ue {
            UeAddr::Static(a) => a,
            UeAddr::Choose => [ids::PDR_UL, ids::PDR_DL]
                .into_iter()
                .filter_map(created)
                .flat_map(|c| c.ue_ip_addresses.iter())
                .find_map(|u| u.ipv4)
                .ok_or_else(|| bad(REQ, "CHV4 asked, no UE IPv4 address in Created PDRs"))?,
        };
        Ok(Session {
            cp_seid,
            up_seid: f.seid,
            up_addr: f.ipv4,
            ue,
            ul_teid,
            upf_n3,
            dl_teid: spec.dl_teid,
            gnb: spec.gnb,
            qfi: spec.qfi,
            high: spec.high_priority,
        })
    }

    /// A Session Modification Request to our session; returns the response.
    pub fn modify(
        &mut self,
        s: &Session,
        m: SessionModificationRequest,
    ) -> Result<SessionModificationResponse, SmfError> {
        self.modify_many(&[(*s, m)])
            .pop()
            .unwrap_or_else(|| Err(bad("Session Modification Request", "no result")))
    }

    /// Session Modification Requests, `window` in flight.
    pub fn modify_many(
        &mut self,
        reqs: &[(Session, SessionModificationRequest)],
    ) -> Vec<Result<SessionModificationResponse, SmfError>> {
        const REQ: &str = "Session Modification Request";
        let msgs = reqs
            .iter()
            .map(|(s, m)| (Some(s.up_seid), m.clone().into()))
            .collect();
        self.transact(msgs)
            .into_iter()
            .zip(reqs)
            .map(|(r, (s, _))| {
                let pdu = r?;
                let seid = pdu.header.seid;
                let Message::SessionModificationResponse(m) = pdu.message else {
                    return Err(bad(REQ, "not a Session Modification Response"));
                };
                check_cause(REQ, m.cause, m.offending_ie, m.failed_rule_id)?;
                if seid != Some(s.cp_seid) {
                    return Err(bad(REQ, format!("header SEID {seid:?}")));
                }
                Ok(m)
            })
            .collect()
    }

    /// The Update FAR that puts the downlink FAR of `s` in `mode`.
    pub fn downlink_far(s: &Session, mode: Downlink) -> UpdateFar {
        match mode {
            Downlink::Forward => build::update_far_to_gnb(ids::FAR_DL, s.dl_teid, s.gnb),
            Downlink::Buffer { notify } => UpdateFar {
                far_id: FarId(ids::FAR_DL),
                apply_action: Some(if notify {
                    ApplyAction::BUFF | ApplyAction::NOCP
                } else {
                    ApplyAction::BUFF
                }),
                ..Default::default()
            },
            Downlink::Drop => UpdateFar {
                far_id: FarId(ids::FAR_DL),
                apply_action: Some(ApplyAction::DROP),
                ..Default::default()
            },
        }
    }

    /// Switches the downlink FAR of each session (idle ↔ connected).
    pub fn set_downlink_many(
        &mut self,
        sessions: &[Session],
        mode: Downlink,
    ) -> Vec<Result<(), SmfError>> {
        let reqs: Vec<_> = sessions
            .iter()
            .map(|s| {
                let mut m = build::modification();
                m.update_fars = [Self::downlink_far(s, mode)].into_iter().collect();
                (*s, m)
            })
            .collect();
        self.modify_many(&reqs)
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect()
    }

    pub fn set_downlink(&mut self, s: &Session, mode: Downlink) -> Result<(), SmfError> {
        let mut m = build::modification();
        m.update_fars = [Self::downlink_far(s, mode)].into_iter().collect();
        self.modify(s, m).map(|_| ())
    }

    /// Query URR: the volume the session's URR measured since the last report.
    pub fn query_usage(&mut self, s: &Session) -> Result<Usage, SmfError> {
        let mut m = build::modification();
        m.query_urrs = [QueryUrr {
            urr_id: UrrId(ids::URR),
        }]
        .into_iter()
        .collect();
        let r = self.modify(s, m)?;
        Ok(Usage::of(r.usage_reports.iter()))
    }

    /// Deletes one session; returns its final usage.
    pub fn delete(&mut self, s: &Session) -> Result<Usage, SmfError> {
        self.delete_many(std::slice::from_ref(s))
            .pop()
            .unwrap_or_else(|| Err(bad("Session Deletion Request", "no result")))
    }

    /// Deletes sessions, `window` in flight; returns each one's final usage.
    pub fn delete_many(&mut self, sessions: &[Session]) -> Vec<Result<Usage, SmfError>> {
        const REQ: &str = "Session Deletion Request";
        let msgs = sessions
            .iter()
            .map(|s| (Some(s.up_seid), SessionDeletionRequest {}.into()))
            .collect();
        let out: Vec<_> = self
            .transact(msgs)
            .into_iter()
            .zip(sessions)
            .map(|(r, s)| {
                let pdu = r?;
                let Message::SessionDeletionResponse(m) = pdu.message else {
                    return Err(bad(REQ, "not a Session Deletion Response"));
                };
                check_cause(REQ, m.cause, m.offending_ie, None)?;
                if pdu.header.seid != Some(s.cp_seid) {
                    return Err(bad(REQ, format!("header SEID {:?}", pdu.header.seid)));
                }
                Ok(Usage::of(m.usage_reports.iter()))
            })
            .collect();
        for (r, s) in out.iter().zip(sessions) {
            // Gone on success; also gone when the UPF does not know it any more.
            let unknown = matches!(r, Err(SmfError::Rejected { cause, .. }) if *cause == Cause::SESSION_CONTEXT_NOT_FOUND);
            if r.is_ok() || unknown {
                self.sessions.remove(&s.cp_seid);
            }
        }
        out
    }

    /// Answers the UPF's requests for `duration` (call it while holding sessions, so that
    /// heartbeats are answered and reports acknowledged).
    pub fn serve(&mut self, duration: Duration) -> Result<(), SmfError> {
        let end = Instant::now() + duration;
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            if let Some(n) = self.recv_until(end)? {
                self.handle_datagram(n, &mut HashMap::new(), &mut []);
            }
        }
    }

    /// One request, retransmitted as needed; the response whatever its Cause.
    fn request(&mut self, seid: Option<u64>, m: Message) -> Result<Pdu, SmfError> {
        self.transact(vec![(seid, m)])
            .pop()
            .unwrap_or_else(|| Err(bad("request", "no result")))
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = (self.seq + 1) & 0x00ff_ffff;
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq
    }

    /// Sends every request with up to `window` in flight, retransmits each after T1 up to N1
    /// times, and returns the responses in request order. Requests from the UPF that arrive
    /// meanwhile are answered.
    fn transact(&mut self, reqs: Vec<(Option<u64>, Message)>) -> Vec<Result<Pdu, SmfError>> {
        let n = reqs.len();
        let mut results: Vec<Option<Result<Pdu, SmfError>>> = (0..n).map(|_| None).collect();
        let mut pending: HashMap<u32, Pending> = HashMap::new();
        let mut queue = reqs.into_iter().enumerate();
        let mut done = 0;
        let window = self.cfg.window.max(1);
        while done < n {
            // Fill the window.
            while pending.len() < window {
                let Some((index, (seid, m))) = queue.next() else {
                    break;
                };
                let seq = self.next_seq();
                let request = message_name(m.message_type());
                let response_type = m.message_type() + 1;
                let bytes = Pdu::new(seid, seq, m).to_bytes();
                let now = Instant::now();
                let p = Pending {
                    index,
                    request,
                    response_type,
                    bytes,
                    deadline: now + self.cfg.t1,
                    sent: 1,
                    first_sent: now,
                };
                self.stats.requests_sent += 1;
                if let Err(e) = self.sock.send(&p.bytes) {
                    results[index] = Some(Err(e.into()));
                    done += 1;
                    continue;
                }
                pending.insert(seq, p);
            }
            let Some(deadline) = pending.values().map(|p| p.deadline).min() else {
                continue;
            };
            match self.recv_until(deadline) {
                Ok(Some(len)) => {
                    done += self.handle_datagram(len, &mut pending, &mut results);
                }
                Ok(None) => {}
                Err(e) => {
                    // A socket error (e.g. ICMP port unreachable): every request in flight
                    // gets it once its retransmissions are spent, so go on retransmitting.
                    if e_is_fatal(&e) {
                        for (_, p) in pending.drain() {
                            results[p.index] =
                                Some(Err(SmfError::Io(io::Error::other(e.to_string()))));
                            done += 1;
                        }
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(1).min(self.cfg.t1));
                }
            }
            let now = Instant::now();
            let expired: Vec<u32> = pending
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(&s, _)| s)
                .collect();
            for seq in expired {
                let Some(p) = pending.get_mut(&seq) else {
                    continue;
                };
                if p.sent > self.cfg.n1 {
                    let attempts = p.sent;
                    let (index, request) = (p.index, p.request);
                    pending.remove(&seq);
                    self.stats.timeouts += 1;
                    results[index] = Some(Err(SmfError::Timeout { request, attempts }));
                    done += 1;
                } else {
                    p.sent += 1;
                    p.deadline = now + self.cfg.t1;
                    self.stats.retransmissions += 1;
                    // A failed send is retried at the next deadline like a lost datagram.
                    let _ = self.sock.send(&p.bytes);
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(bad("request", "no result"))))
            .collect()
    }

    /// Receives one datagram into `self.buf` by `deadline`; `None` on timeout.
    fn recv_until(&mut self, deadline: Instant) -> Result<Option<usize>, io::Error> {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.sock.set_read_timeout(Some(wait))?;
        match self.sock.recv(&mut self.buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Handles a received datagram: responses complete pending requests (returns how many),
    /// requests from the UPF are answered.
    fn handle_datagram(
        &mut self,
        len: usize,
        pending: &mut HashMap<u32, Pending>,
        results: &mut [Option<Result<Pdu, SmfError>>],
    ) -> usize {
        let data = self.buf[..len].to_vec();
        let mut completed = 0;
        for r in decode_all(&data) {
            let Ok(pdu) = r else {
                self.stats.ignored += 1;
                break;
            };
            let t = pdu.message.message_type();
            if is_request_type(t) {
                self.answer(pdu);
                continue;
            }
            match pending.get(&pdu.header.sequence) {
                Some(p) if p.response_type == t => {
                    let p = pending
                        .remove(&pdu.header.sequence)
                        .unwrap_or_else(|| unreachable!());
                    self.stats.responses += 1;
                    if let Some(t) = &mut self.response_times {
                        t.push(p.first_sent.elapsed());
                    }
                    if response_cause(&pdu.message).is_some_and(|c| !c.is_accepted()) {
                        self.stats.rejected += 1;
                    }
                    if let Some(slot) = results.get_mut(p.index) {
                        *slot = Some(Ok(pdu));
                        completed += 1;
                    }
                }
                // A late duplicate of an answered request, or a stranger.
                _ => self.stats.ignored += 1,
            }
        }
        completed
    }

    fn check_recovery(&mut self, ts: u32) {
        match self.upf_recovery {
            Some(old) if old != ts => {
                self.push_event(UpfEvent::UpfRestarted { old, new: ts });
                self.upf_recovery = Some(ts);
            }
            None => self.upf_recovery = Some(ts),
            _ => {}
        }
    }

    fn push_event(&mut self, e: UpfEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// Answers a request the UPF sent (same sequence number, TS 29.244 §7.2.2.1).
    fn answer(&mut self, req: Pdu) {
        self.stats.upf_requests += 1;
        let seq = req.header.sequence;
        let (seid, resp): (Option<u64>, Message) = match req.message {
            Message::HeartbeatRequest(m) => {
                self.check_recovery(m.recovery_time_stamp.0);
                (
                    None,
                    HeartbeatResponse {
                        recovery_time_stamp: RecoveryTimeStamp(self.recovery),
                    }
                    .into(),
                )
            }
            Message::SessionReportRequest(m) => {
                self.stats.session_reports += 1;
                let cp_seid = req.header.seid.unwrap_or(0);
                let up_seid = self.sessions.get(&cp_seid).copied();
                let cause = if up_seid.is_some() {
                    Cause::REQUEST_ACCEPTED
                } else {
                    Cause::SESSION_CONTEXT_NOT_FOUND
                };
                if up_seid.is_some() {
                    if m.report_type.contains(ReportType::DLDR) {
                        self.push_event(UpfEvent::DownlinkData { cp_seid });
                    }
                    if m.report_type.contains(ReportType::ERIR) {
                        self.push_event(UpfEvent::ErrorIndication { cp_seid });
                    }
                    if !m.usage_reports.is_empty() {
                        let usage = Usage::of(m.usage_reports.iter());
                        self.push_event(UpfEvent::Usage { cp_seid, usage });
                    }
                }
                (
                    Some(up_seid.unwrap_or(0)),
                    SessionReportResponse {
                        cause,
                        ..Default::default()
                    }
                    .into(),
                )
            }
            Message::NodeReportRequest(_) => (
                None,
                NodeReportResponse {
                    node_id: self.node.clone(),
                    cause: Cause::REQUEST_ACCEPTED,
                    ..Default::default()
                }
                .into(),
            ),
            Message::AssociationReleaseRequest(_) => {
                self.push_event(UpfEvent::AssociationReleased);
                self.sessions.clear();
                (
                    None,
                    AssociationReleaseResponse {
                        node_id: self.node.clone(),
                        cause: Cause::REQUEST_ACCEPTED,
                    }
                    .into(),
                )
            }
            Message::AssociationUpdateRequest(m) => {
                if m.pfcp_association_release_request.is_some() {
                    self.push_event(UpfEvent::AssociationReleased);
                }
                (
                    None,
                    AssociationUpdateResponse {
                        node_id: self.node.clone(),
                        cause: Cause::REQUEST_ACCEPTED,
                        ..Default::default()
                    }
                    .into(),
                )
            }
            Message::AssociationSetupRequest(m) => {
                // UP-initiated association (`upf run --smf`): accept it.
                self.check_recovery(m.recovery_time_stamp.0);
                (
                    None,
                    AssociationSetupResponse {
                        node_id: self.node.clone(),
                        cause: Cause::REQUEST_ACCEPTED,
                        recovery_time_stamp: RecoveryTimeStamp(self.recovery),
                        ..Default::default()
                    }
                    .into(),
                )
            }
            _ => {
                self.stats.ignored += 1;
                return;
            }
        };
        let bytes = Pdu::new(seid, seq, resp).to_bytes();
        // A lost response is recovered by the UPF's retransmission.
        let _ = self.sock.send(&bytes);
    }
}

/// Whether a receive error means the socket is unusable rather than a passing ICMP error.
fn e_is_fatal(e: &io::Error) -> bool {
    !matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionReset
    )
}

/// The Cause of a response that carries one.
fn response_cause(m: &Message) -> Option<Cause> {
    Some(match m {
        Message::AssociationSetupResponse(r) => r.cause,
        Message::AssociationReleaseResponse(r) => r.cause,
        Message::SessionEstablishmentResponse(r) => r.cause,
        Message::SessionModificationResponse(r) => r.cause,
        Message::SessionDeletionResponse(r) => r.cause,
        _ => return None,
    })
}

/// Why [`ue_pool`] could not give the addresses asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("prefix length {0} > 32")]
    PrefixLength(u8),
    #[error("{0} addresses")]
    TooMany(usize),
    #[error("{count} addresses from offset {offset} do not fit in {net}/{len} ({usable} usable)")]
    DoesNotFit {
        count: usize,
        offset: u32,
        net: Ipv4Addr,
        len: u8,
        usable: u64,
    },
}

/// `count` UE addresses from the pool `net/len`, skipping the network and broadcast
/// addresses of pools shorter than /31, starting at `offset`.
pub fn ue_pool(
    net: Ipv4Addr,
    len: u8,
    offset: u32,
    count: usize,
) -> Result<Vec<Ipv4Addr>, PoolError> {
    if len > 32 {
        return Err(PoolError::PrefixLength(len));
    }
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    let base = u32::from(net) & mask;
    let size = (!mask).wrapping_add(1);
    let (first, usable) = match len {
        32 => (0, 1u64),
        31 => (0, 2),
        _ => (1, u64::from(size) - 2),
    };
    let n = u32::try_from(count).map_err(|_| PoolError::TooMany(count))?;
    if u64::from(offset) + u64::from(n) > usable {
        return Err(PoolError::DoesNotFit {
            count,
            offset,
            net,
            len,
            usable,
        });
    }
    Ok((0..n)
        .map(|i| Ipv4Addr::from(base + first + offset + i))
        .collect())
}

/// A string that is not `A.B.C.D/LEN` (see [`parse_cidr`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected A.B.C.D/LEN")]
pub struct CidrError(pub String);

/// Parses `A.B.C.D/LEN`.
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), CidrError> {
    let bad = || CidrError(s.to_string());
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    if len > 32 {
        return Err(bad());
    }
    Ok((a.parse().map_err(|_| bad())?, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_addresses() {
        let a = ue_pool(Ipv4Addr::new(10, 60, 0, 0), 16, 0, 3).unwrap();
        assert_eq!(a[0], Ipv4Addr::new(10, 60, 0, 1));
        assert_eq!(a[2], Ipv4Addr::new(10, 60, 0, 3));
        let a = ue_pool(Ipv4Addr::new(10, 60, 1, 7), 24, 253, 1).unwrap();
        assert_eq!(a, [Ipv4Addr::new(10, 60, 1, 254)]);
        assert!(ue_pool(Ipv4Addr::new(10, 60, 1, 0), 24, 254, 1).is_err());
        assert_eq!(
            ue_pool(Ipv4Addr::new(10, 0, 0, 9), 32, 0, 1).unwrap(),
            [Ipv4Addr::new(10, 0, 0, 9)]
        );
        assert_eq!(
            parse_cidr("10.60.0.0/16").unwrap(),
            (Ipv4Addr::new(10, 60, 0, 0), 16)
        );
        assert!(parse_cidr("10.60.0.0/33").is_err());
        assert!(parse_cidr("10.60.0.0").is_err());
    }

    #[test]
    fn establishment_request_shape() {
        let smf = Smf::new(SmfConfig::new("127.0.0.1:8805".parse().unwrap())).unwrap();
        let mut spec = SessionSpec::new(UeAddr::Choose, 0x77, Ipv4Addr::new(192, 168, 3, 2));
        spec.qos = Some(Qos {
            mbr_kbps: Some((1000, 2000)),
            ..Qos::default()
        });
        let r = smf.establishment_request(5, &spec);
        // It round-trips through the codec, and has what the brief asks for.
        let bytes = build::encode(Some(0), 1, r.clone());
        let (pdu, rest) = Pdu::decode(&bytes).unwrap();
        assert!(rest.is_empty());
        assert_eq!(pdu.message, Message::SessionEstablishmentRequest(r.clone()));
        assert_eq!(r.create_pdrs.len(), 2);
        let ul = &r.create_pdrs[0];
        assert_eq!(ul.pdi.source_interface, SourceInterface::ACCESS);
        assert!(matches!(
            ul.pdi.local_f_teid,
            Some(FTeid::Choose { ipv4: true, .. })
        ));
        assert!(ul.outer_header_removal.is_some());
        assert!(ul.pdi.ue_ip_addresses[0].choose_ipv4);
        let dl = &r.create_pdrs[1];
        assert!(dl.pdi.ue_ip_addresses[0].is_destination);
        assert_eq!(dl.qer_ids.len(), 1);
        let ohc = r.create_fars[1]
            .forwarding_parameters
            .as_ref()
            .and_then(|f| f.outer_header_creation);
        assert_eq!(
            ohc,
            Some(OuterHeaderCreation::gtpu_ipv4(
                0x77,
                Ipv4Addr::new(192, 168, 3, 2)
            ))
        );
        assert_eq!(r.create_qers[0].qfi, Some(Qfi(9)));
        assert_eq!(r.cp_f_seid.seid, 5);
    }

    #[test]
    fn high_priority_flow_shape() {
        let smf = Smf::new(SmfConfig::new("127.0.0.1:8805".parse().unwrap())).unwrap();
        let mut spec = SessionSpec::new(UeAddr::Choose, 0x77, Ipv4Addr::new(192, 168, 3, 2));
        spec.qos = Some(Qos::default());
        spec.high_priority = Some(HighPriority { qfi: 1, dscp: 46 });
        let r = smf.establishment_request(5, &spec);
        let bytes = build::encode(Some(0), 1, r.clone());
        let (pdu, _) = Pdu::decode(&bytes).unwrap();
        assert_eq!(pdu.message, Message::SessionEstablishmentRequest(r.clone()));
        assert_eq!(r.create_pdrs.len(), 4);
        let ul = &r.create_pdrs[2];
        assert_eq!(ul.pdr_id, PdrId(ids::PDR_UL_HIGH));
        assert!(ul.precedence.0 < r.create_pdrs[0].precedence.0);
        assert_eq!(ul.pdi.qfis.iter().copied().collect::<Vec<_>>(), [Qfi(1)]);
        assert_eq!(ul.pdi.local_f_teid, r.create_pdrs[0].pdi.local_f_teid);
        assert_eq!(
            ul.qer_ids.iter().copied().collect::<Vec<_>>(),
            [QerId(ids::QER_HIGH)]
        );
        let dl = &r.create_pdrs[3];
        assert_eq!(dl.pdi.sdf_filters[0].tos_traffic_class, Some(0xb8fc));
        assert_eq!(dl.far_id, Some(FarId(ids::FAR_DL)));
        assert_eq!(r.create_qers.len(), 2);
        assert_eq!(r.create_qers[1].qfi, Some(Qfi(1)));
        // Without it, the shape of before.
        spec.high_priority = None;
        assert_eq!(smf.establishment_request(5, &spec).create_pdrs.len(), 2);
    }
}
