//! A rig for scenario tests: an SMF (PFCP bytes in, decoded responses out) in front of the
//! real agent, whose data path is one real pipeline; packet builders for N3 and N6 traffic.
#![allow(dead_code)]
#![allow(clippy::cast_possible_truncation)] // test packets are small

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, Output, Packet, Pipeline, PipelineConfig, Port};
use upf_n4::{smf, Agent, Config, Transmit};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
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
}

impl Rig {
    pub fn new() -> Self {
        let now = Instant::now();
        let mut cfg = Config::new(UPF.into());
        cfg.n3.ipv6 = Some(UPF6.parse().unwrap());
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
        let mut r = Self {
            agent: Agent::new(cfg, Pipeline::new(now, pcfg), now, 3_900_000_000).unwrap(),
            now,
            smf: SocketAddr::new(SMF.into(), 8805),
            seq: 0,
            cp_seid: 0x100,
            out: Output::default(),
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
        let out = self.drain();
        let resp = out
            .iter()
            .map(|t| Pdu::decode(&t.payload).unwrap().0)
            .find(|p| p.header.sequence == self.seq)
            .expect("a response");
        resp
    }

    /// Establishes; returns the UP SEID, asserting acceptance.
    pub fn establish(
        &mut self,
        mut req: SessionEstablishmentRequest,
    ) -> (u64, SessionEstablishmentResponse) {
        self.cp_seid += 1;
        req.node_id = NodeId::Ipv4(SMF);
        req.cp_f_seid = FSeid {
            seid: self.cp_seid,
            ipv4: Some(SMF),
            ipv6: None,
        };
        match self.request(Some(0), req).message {
            Message::SessionEstablishmentResponse(m) => {
                assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "{m:?}");
                (m.up_f_seid.as_ref().unwrap().seid, m)
            }
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

    pub fn advance(&mut self, d: Duration) -> Vec<Transmit> {
        self.now += d;
        let now = self.now;
        self.dp().handle_timeout(now);
        self.agent.handle_datapath_events(now);
        self.agent.handle_timeout(now);
        self.drain()
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

/// The TEID the UPF allocated for the first created PDR with an F-TEID.
pub fn local_teid(r: &SessionEstablishmentResponse) -> u32 {
    r.created_pdrs
        .iter()
        .find_map(|c| match c.local_f_teid {
            Some(FTeid::Assigned { teid, .. }) => Some(teid),
            _ => None,
        })
        .expect("an allocated F-TEID")
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
