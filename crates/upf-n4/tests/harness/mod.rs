//! An SMF emulator around the agent with a virtual clock: requests go in as PFCP bytes,
//! responses come back decoded.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_n4::{Agent, Config, Transmit};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_rules::mem::MemDatapath;
use upf_smf as smf;

pub const SMF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const UPF_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
pub const NTP0: u32 = 3_900_000_000;

pub struct Smf {
    pub agent: Agent<MemDatapath>,
    pub now: Instant,
    pub addr: SocketAddr,
    pub node: NodeId,
    pub seq: u32,
    pub cp_seid: u64,
}

impl Smf {
    pub fn new() -> Self {
        Self::with_config(Config::new(UPF_IP.into()))
    }

    pub fn with_config(cfg: Config) -> Self {
        let now = Instant::now();
        Self {
            agent: Agent::new(cfg, MemDatapath::recording(), now, NTP0).unwrap(),
            now,
            addr: SocketAddr::new(SMF_IP.into(), 8805),
            node: NodeId::Ipv4(SMF_IP),
            seq: 0,
            cp_seid: 0x1000,
        }
    }

    /// An SMF associated already.
    pub fn associated() -> Self {
        let mut s = Self::new();
        s.associate(1234);
        s
    }

    pub fn associate(&mut self, recovery: u32) -> AssociationSetupResponse {
        let r = self.request(None, smf::association_setup(self.node.clone(), recovery));
        match r.message {
            Message::AssociationSetupResponse(m) => m,
            m => panic!("{m:?}"),
        }
    }

    /// Sends raw bytes from this SMF; returns every datagram the agent sent back.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Vec<Transmit> {
        self.agent.handle_datagram(self.now, self.addr, bytes);
        self.drain()
    }

    pub fn drain(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.agent.poll_transmit()).collect()
    }

    /// Sends a request, expects exactly one response to this SMF with the same sequence number.
    pub fn request(&mut self, seid: Option<u64>, m: impl Into<Message>) -> Pdu {
        self.seq += 1;
        let bytes = smf::encode(seid, self.seq, m);
        let out = self.send_bytes(&bytes);
        assert_eq!(out.len(), 1, "one response expected, got {out:?}");
        assert_eq!(out[0].dest, self.addr);
        let (pdu, rest) = Pdu::decode(&out[0].payload).unwrap();
        assert!(rest.is_empty());
        assert_eq!(pdu.header.sequence, self.seq, "response sequence number");
        pdu
    }

    /// Establishes the standard 4-PDR session; returns (response header SEID, response).
    pub fn establish(&mut self, ue: smf::UeAddr) -> (Option<u64>, SessionEstablishmentResponse) {
        self.cp_seid += 1;
        let req = smf::establishment(self.node.clone(), self.cp_seid, SMF_IP, ue);
        self.establish_with(req)
    }

    pub fn establish_with(
        &mut self,
        req: SessionEstablishmentRequest,
    ) -> (Option<u64>, SessionEstablishmentResponse) {
        let r = self.request(Some(0), req);
        match r.message {
            Message::SessionEstablishmentResponse(m) => (r.header.seid, m),
            m => panic!("{m:?}"),
        }
    }

    /// Establishes and returns our (UP) SEID, asserting success.
    pub fn establish_ok(&mut self) -> u64 {
        let (_, r) = self.establish(smf::UeAddr::Choose);
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
        r.up_f_seid.unwrap().seid
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

    pub fn delete(&mut self, seid: u64) -> (Option<u64>, SessionDeletionResponse) {
        let r = self.request(Some(seid), SessionDeletionRequest {});
        match r.message {
            Message::SessionDeletionResponse(m) => (r.header.seid, m),
            m => panic!("{m:?}"),
        }
    }

    /// Moves the virtual clock and runs the agent's timers; returns what it sent.
    pub fn advance(&mut self, d: Duration) -> Vec<Transmit> {
        self.now += d;
        self.agent.handle_timeout(self.now);
        self.drain()
    }

    /// Runs timers until `d` has passed, in steps of at most `step`.
    pub fn run_for(&mut self, d: Duration, step: Duration) -> Vec<Transmit> {
        let end = self.now + d;
        let mut out = Vec::new();
        while self.now < end {
            let next = self
                .agent
                .poll_timeout()
                .unwrap_or(end)
                .min(self.now + step)
                .min(end)
                .max(self.now);
            let dt = next - self.now;
            out.extend(self.advance(dt));
            if dt.is_zero() {
                out.extend(self.advance(step.min(end - self.now)));
            }
        }
        out
    }
}

pub fn decode(t: &Transmit) -> Pdu {
    Pdu::decode(&t.payload).unwrap().0
}
