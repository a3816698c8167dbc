//! A rig for scenario tests: an SMF (PFCP bytes in, decoded responses out) in front of the
//! real agent, whose data path is one real pipeline; packet builders for N3 and N6 traffic.
#![allow(dead_code)]
#![allow(clippy::cast_possible_truncation)] // test packets are small

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_n4::{Agent, Config, Transmit};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_smf as smf;
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::{checksum, ip_proto};

pub const UPF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const SMF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);
pub const GNB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
pub const DN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
pub const UPF6: &str = "2001:db8:ffff::1";

pub struct Rig {
    pub agent: Agent<Pipeline>,
    pub now: Instant,
    pub smf: SocketAddr,
    pub seq: u32,
    pub cp_seid: u64,
    pub out: Output,
    /// What the agent sent besides the responses `request` looked for (reports, heartbeats).
    pub stash: Vec<Transmit>,
}

impl Rig {
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    /// A rig whose pipeline configuration `f` adjusts.
    pub fn with(f: impl FnOnce(&mut PipelineConfig)) -> Self {
        Self::configured(|_| {}, f)
    }

    /// A rig whose agent configuration `a` and pipeline configuration `f` adjust.
    pub fn configured(a: impl FnOnce(&mut Config), f: impl FnOnce(&mut PipelineConfig)) -> Self {
        let now = Instant::now();
        let mut cfg = Config::new(UPF.into());
        cfg.n3.ipv6 = Some(UPF6.parse().unwrap());
        a(&mut cfg);
        let pcfg = PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: Some(UPF6.parse().unwrap()),
            },
            n9: LocalAddrs {
                v4: Some(UPF),
                v6: Some(UPF6.parse().unwrap()),
            },
            ..Default::default()
        };
        let mut pcfg = pcfg;
        f(&mut pcfg);
        let mut r = Self {
            agent: Agent::new(cfg, Pipeline::new(now, pcfg), now, 3_900_000_000).unwrap(),
            now,
            smf: SocketAddr::new(SMF.into(), 8805),
            seq: 0,
            cp_seid: 0x100,
            out: Output::default(),
            stash: Vec::new(),
        };
        let m = smf::association_setup(NodeId::Ipv4(SMF), 1);
        let p = r.request(None, m);
        assert!(matches!(p.message, Message::AssociationSetupResponse(_)));
        r
    }

    pub fn dp(&mut self) -> &mut Pipeline {
        self.agent.datapath_mut()
    }

    pub fn drain(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.agent.poll_transmit()).collect()
    }

    pub fn request(&mut self, seid: Option<u64>, m: impl Into<Message>) -> Pdu {
        self.seq += 1;
        let bytes = smf::encode(seid, self.seq, m);
        self.agent.handle_datagram(self.now, self.smf, &bytes);
        let mut resp = None;
        for t in self.drain() {
            let p = Pdu::decode(&t.payload).unwrap().0;
            if resp.is_none() && !p.message.is_request() && p.header.sequence == self.seq {
                resp = Some(p);
            } else {
                self.stash.push(t);
            }
        }
        resp.expect("a response")
    }

    /// Everything the agent sent unasked since the last call, decoded; Session Report
    /// Requests and heartbeats are answered (accepted) as an SMF would.
    pub fn smf_inbox(&mut self) -> Vec<Pdu> {
        let mut all = std::mem::take(&mut self.stash);
        all.extend(self.drain());
        let mut v = Vec::new();
        for t in all {
            let pdu = Pdu::decode(&t.payload).unwrap().0;
            let answer: Option<Message> = match &pdu.message {
                Message::SessionReportRequest(_) => Some(
                    SessionReportResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        ..Default::default()
                    }
                    .into(),
                ),
                Message::HeartbeatRequest(_) => Some(
                    HeartbeatResponse {
                        recovery_time_stamp: RecoveryTimeStamp(1),
                    }
                    .into(),
                ),
                _ => None,
            };
            if let Some(a) = answer {
                let bytes = smf::encode(pdu.header.seid.map(|_| 0), pdu.header.sequence, a);
                self.agent.handle_datagram(self.now, self.smf, &bytes);
            }
            v.push(pdu);
        }
        v
    }

    /// The Session Report Requests the agent sent since the last call (answered).
    pub fn reports(&mut self) -> Vec<SessionReportRequest> {
        self.smf_inbox()
            .into_iter()
            .filter_map(|p| match p.message {
                Message::SessionReportRequest(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    /// Establishes; returns the UP SEID, asserting acceptance.
    pub fn establish(
        &mut self,
        req: SessionEstablishmentRequest,
    ) -> (u64, SessionEstablishmentResponse) {
        let m = self.try_establish(req);
        assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "{m:?}");
        (m.up_f_seid.as_ref().unwrap().seid, m)
    }

    /// Sends a Session Establishment Request from this SMF; returns the response.
    pub fn try_establish(
        &mut self,
        mut req: SessionEstablishmentRequest,
    ) -> SessionEstablishmentResponse {
        self.cp_seid += 1;
        req.node_id = NodeId::Ipv4(SMF);
        req.cp_f_seid = FSeid {
            seid: self.cp_seid,
            ipv4: Some(SMF),
            ipv6: None,
        };
        match self.request(Some(0), req).message {
            Message::SessionEstablishmentResponse(m) => m,
            m => panic!("{m:?}"),
        }
    }

    pub fn modify(
        &mut self,
        seid: u64,
        m: SessionModificationRequest,
    ) -> SessionModificationResponse {
        match self.request(Some(seid), m).message {
            Message::SessionModificationResponse(m) => m,
            m => panic!("{m:?}"),
        }
    }

    pub fn delete(&mut self, seid: u64) -> SessionDeletionResponse {
        match self.request(Some(seid), SessionDeletionRequest {}).message {
            Message::SessionDeletionResponse(m) => m,
            m => panic!("{m:?}"),
        }
    }

    /// Runs packets through the pipeline; returns what it sent.
    pub fn send(&mut self, pkts: Vec<Packet>) -> Vec<Packet> {
        let mut rx = pkts;
        let now = self.now;
        let mut out = std::mem::take(&mut self.out);
        self.dp().process(now, &mut rx, &mut out);
        self.agent.handle_datapath_events(now);
        let tx = std::mem::take(&mut out.tx);
        out.free.clear();
        self.out = out;
        tx
    }

    pub fn send1(&mut self, p: Packet) -> Vec<Packet> {
        self.send(vec![p])
    }

    /// Moves the clock and runs the data path's and the agent's timers; returns the Session
    /// Report Requests sent meanwhile (answered, as are heartbeats).
    pub fn advance(&mut self, d: Duration) -> Vec<SessionReportRequest> {
        self.now += d;
        let now = self.now;
        self.dp().handle_timeout(now);
        self.agent.handle_datapath_events(now);
        self.agent.handle_timeout(now);
        self.reports()
    }
}

/// IPv4 header + UDP with `payload` zero octets (checksums right).
pub fn udp4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: usize,
    tos: u8,
) -> Vec<u8> {
    let total = 20 + 8 + payload;
    let mut v = vec![0u8; total];
    v[0] = 0x45;
    v[1] = tos;
    v[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    v[8] = 64;
    v[9] = ip_proto::UDP;
    v[12..16].copy_from_slice(&src.octets());
    v[16..20].copy_from_slice(&dst.octets());
    let c = checksum::checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v[20..22].copy_from_slice(&sport.to_be_bytes());
    v[22..24].copy_from_slice(&dport.to_be_bytes());
    v[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    v
}

/// IPv6 + UDP with `payload` zero octets.
pub fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut v = vec![0u8; 40 + 8 + payload];
    v[0] = 0x60;
    v[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    v[6] = ip_proto::UDP;
    v[7] = 64;
    v[8..24].copy_from_slice(&src.octets());
    v[24..40].copy_from_slice(&dst.octets());
    v[40..42].copy_from_slice(&sport.to_be_bytes());
    v[42..44].copy_from_slice(&dport.to_be_bytes());
    v[44..46].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    v
}

/// A G-PDU from the gNB to the UPF carrying `inner`, with an UL PDU Session Container.
pub fn gpdu(teid: u32, qfi: Option<u8>, inner: &[u8]) -> Packet {
    let mut p = Packet::from_bytes(Port::N3, inner).unwrap();
    let (s, l) = (p.start(), p.len());
    let start = encapsulate_gtpu_v4(
        p.buffer_mut(),
        s,
        l,
        &EncapV4 {
            src: GNB,
            dst: UPF,
            ident: 0,
            dont_frag: false,
            tunnel: GtpuTunnel {
                teid,
                src_port: 2152,
                dst_port: 2152,
                psc: qfi.map(PduSessionContainer::ul),
                ttl: 64,
                dscp: 0,
                ecn: 0,
            },
        },
    )
    .unwrap();
    p.set_range(start, s + l);
    p
}

pub fn n6(inner: &[u8]) -> Packet {
    Packet::from_bytes(Port::N6, inner).unwrap()
}

/// The TEID the UPF allocated for a created PDR, if it allocated one.
fn assigned_teid(c: &CreatedPdr) -> Option<u32> {
    match c.local_f_teid {
        Some(FTeid::Assigned { teid, .. }) => Some(teid),
        _ => None,
    }
}

/// The TEID the UPF allocated for the first created PDR with an F-TEID.
pub fn local_teid(r: &SessionEstablishmentResponse) -> u32 {
    r.created_pdrs
        .iter()
        .find_map(assigned_teid)
        .expect("an allocated F-TEID")
}

/// The TEID the UPF allocated for PDR `id`.
pub fn pdr_teid(r: &SessionEstablishmentResponse, id: u16) -> u32 {
    r.created_pdrs
        .iter()
        .filter(|c| c.pdr_id == PdrId(id))
        .find_map(assigned_teid)
        .expect("an allocated F-TEID for the PDR")
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A plain PDU session: one uplink PDR (F-TEID CHOOSE, UE address, OHR) forwarding to N6 and
/// one downlink PDR (UE address) forwarding into the gNB tunnel; QER 1 on both.
pub fn simple_session(ue: Ipv4Addr, gnb_teid: u32) -> SessionEstablishmentRequest {
    let mut ul_pdi = smf::pdi(
        SourceInterface::ACCESS,
        Some(smf::choose_teid(1)),
        Some(smf::ue_ip(smf::UeAddr::Static(ue), false)),
        None,
    );
    ul_pdi.qfis = Default::default();
    let mut dl_pdi = smf::pdi(
        SourceInterface::CORE,
        None,
        Some(smf::ue_ip(smf::UeAddr::Static(ue), true)),
        None,
    );
    dl_pdi.qfis = Default::default();
    SessionEstablishmentRequest {
        create_pdrs: [
            smf::create_pdr(1, 100, ul_pdi, 1, &[1], &[1], true),
            smf::create_pdr(2, 100, dl_pdi, 2, &[1], &[1], false),
        ]
        .into_iter()
        .collect(),
        create_fars: [
            smf::create_far(
                1,
                ApplyAction::FORW,
                Some(smf::forwarding(DestinationInterface::CORE, None)),
                None,
            ),
            smf::create_far(
                2,
                ApplyAction::FORW,
                Some(smf::forwarding(
                    DestinationInterface::ACCESS,
                    Some(OuterHeaderCreation::gtpu_ipv4(gnb_teid, GNB)),
                )),
                None,
            ),
        ]
        .into_iter()
        .collect(),
        create_qers: [smf::create_qer(1, None, Some(9))].into_iter().collect(),
        create_urrs: [smf::create_urr(1, ReportingTriggers::default(), None)]
            .into_iter()
            .collect(),
        pdn_type: Some(PdnType::IPV4),
        ..Default::default()
    }
}

/// IPv4 + TCP (20-octet header, no options) with `payload` zero octets.
pub fn tcp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut v = udp4(src, dst, sport, dport, payload + 12, 0);
    v[9] = ip_proto::TCP;
    v[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&v[..20]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v[24..28].fill(0); // sequence number, not a UDP length
    v[32] = 5 << 4; // data offset
    v
}

/// Sets the IPv4 ToS (checksum fixed) or the IPv6 Traffic Class.
pub fn with_tos(mut ip: Vec<u8>, tos: u8) -> Vec<u8> {
    if ip[0] >> 4 == 4 {
        ip[1] = tos;
        fix_ipv4_checksum(&mut ip);
    } else {
        ip[0] = 0x60 | tos >> 4;
        ip[1] = (tos << 4) | (ip[1] & 0x0f);
    }
    ip
}

/// Sets the IPv4 TTL (checksum fixed) or the IPv6 Hop Limit.
pub fn with_ttl(mut ip: Vec<u8>, ttl: u8) -> Vec<u8> {
    if ip[0] >> 4 == 4 {
        ip[8] = ttl;
        fix_ipv4_checksum(&mut ip);
    } else {
        ip[7] = ttl;
    }
    ip
}

pub fn fix_ipv4_checksum(ip: &mut [u8]) {
    let hl = usize::from(ip[0] & 0x0f) * 4;
    ip[10..12].fill(0);
    let c = checksum::checksum(&ip[..hl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// What a router makes of `ip`: TTL / Hop Limit one less (IPv4 checksum recomputed).
pub fn routed(ip: &[u8]) -> Vec<u8> {
    let mut v = ip.to_vec();
    if v[0] >> 4 == 4 {
        v[8] -= 1;
        fix_ipv4_checksum(&mut v);
    } else {
        v[7] -= 1;
    }
    v
}

/// A G-PDU arriving on `port` from `src` to `dst` (either IP version) carrying `inner`.
pub fn gpdu_over(
    port: Port,
    src: IpAddr,
    dst: IpAddr,
    teid: u32,
    psc: Option<PduSessionContainer>,
    inner: &[u8],
) -> Packet {
    let mut p = Packet::from_bytes(port, inner).unwrap();
    let (s, l) = (p.start(), p.len());
    let tunnel = GtpuTunnel {
        teid,
        src_port: 2152,
        dst_port: 2152,
        psc,
        ttl: 64,
        dscp: 0,
        ecn: 0,
    };
    let start = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => encapsulate_gtpu_v4(
            p.buffer_mut(),
            s,
            l,
            &EncapV4 {
                src,
                dst,
                ident: 0,
                dont_frag: false,
                tunnel,
            },
        ),
        (IpAddr::V6(src), IpAddr::V6(dst)) => upf_wire::encap::encapsulate_gtpu_v6(
            p.buffer_mut(),
            s,
            l,
            &upf_wire::encap::EncapV6 {
                src,
                dst,
                flow_label: 0,
                tunnel,
            },
        ),
        _ => panic!("mixed IP versions"),
    }
    .unwrap();
    p.set_range(start, s + l);
    p
}

/// IPv4 + UDP around `payload` (a GTP-U signalling message, say), checksums right.
pub fn udp4_with(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = udp4(src, dst, sport, dport, payload.len(), 0);
    v[28..].copy_from_slice(payload);
    v
}

/// A GTP-U signalling message from the gNB on N3.
pub fn gtp_from_gnb(msg: &[u8]) -> Packet {
    Packet::from_bytes(Port::N3, &udp4_with(GNB, UPF, 2152, 2152, msg)).unwrap()
}

/// The outer headers of a GTP-U packet the pipeline sent, and its payload.
pub fn open(p: &Packet) -> (upf_wire::encap::Decapsulated, Vec<u8>) {
    let d = upf_wire::encap::decapsulate_verified(p.data()).expect("a GTP-U packet");
    let inner = p.data()[d.inner.clone()].to_vec();
    (d, inner)
}

/// The UDP source port of an IPv4 or IPv6 packet (the tests' sequence numbers).
pub fn sport(ip: &[u8]) -> u16 {
    let off = if ip[0] >> 4 == 4 { 20 } else { 40 };
    u16::from_be_bytes([ip[off], ip[off + 1]])
}

/// Asserts the counter invariant, showing the counters if it does not hold.
pub fn assert_balanced(r: &mut Rig) {
    let c = r.dp().counters().clone();
    assert!(c.balanced(), "unbalanced: {c:?}");
}

/// A session whose FAR `far` (1: uplink, 2: downlink) is changed by `f`.
pub fn with_far(
    mut req: SessionEstablishmentRequest,
    far: u32,
    f: impl FnOnce(&mut CreateFar),
) -> SessionEstablishmentRequest {
    f(req
        .create_fars
        .iter_mut()
        .find(|x| x.far_id.0 == far)
        .unwrap());
    req
}

/// Update FAR setting only the Apply Action.
pub fn set_action(id: u32, action: ApplyAction) -> UpdateFar {
    UpdateFar {
        far_id: FarId(id),
        apply_action: Some(action),
        ..Default::default()
    }
}

pub fn actions(a: &[ApplyAction]) -> ApplyAction {
    a.iter().fold(ApplyAction::empty(), |x, y| x | *y)
}
