//! Which worker owns a packet: a hash of its UE address (inner source on N3/N9, destination
//! on N6), the same hash that placed the UE's session. UEs configured as peak-rate UEs are
//! spread over every worker by the hash of each flow's 5-tuple instead, which keeps each
//! flow in order.

use std::collections::HashSet;
use std::net::IpAddr;
pub use upf_packet::steer::{ue_hash, worker_of};
use upf_packet::{Packet, Port};
use upf_wire::encap::decapsulate;
use upf_wire::flow::{flow_hash, Direction, FiveTuple};

/// The steering decision, shared by the software stage and (as a specification) by backends
/// that steer in the kernel or the NIC.
#[derive(Debug, Clone, Default)]
pub struct Steering {
    workers: usize,
    /// Peak-rate UEs, spread per flow.
    spread: HashSet<IpAddr>,
}

impl Steering {
    pub fn new(workers: usize, spread: impl IntoIterator<Item = IpAddr>) -> Self {
        Self {
            workers: workers.max(1),
            spread: spread.into_iter().collect(),
        }
    }

    pub fn is_spread(&self, ue: IpAddr) -> bool {
        self.spread.contains(&ue)
    }

    /// The workers a session with this UE address lives on.
    pub fn owners(&self, ue: Option<IpAddr>) -> Vec<usize> {
        match ue {
            Some(a) if !self.is_spread(a) => vec![worker_of(ue_hash(a), self.workers)],
            // Spread UEs, and sessions without a UE address (nothing to steer by).
            _ => (0..self.workers).collect(),
        }
    }

    /// The worker a packet goes to; packets without a readable UE address go to worker 0,
    /// which counts them as dropped or answers them (Echo).
    pub fn worker(&self, p: &Packet) -> usize {
        let (ip, dir) = match p.port() {
            Port::N3 | Port::N9 => match decapsulate(p.data()) {
                Ok(d) => (p.data().get(d.inner).unwrap_or(&[]), Direction::Uplink),
                Err(_) => return 0,
            },
            Port::N6 => (p.data(), Direction::Downlink),
        };
        let Ok(t) = FiveTuple::parse(ip) else {
            return 0;
        };
        let ue = t.ue_addr(dir);
        if self.is_spread(ue) {
            // Both directions of a flow hash alike: the tuple seen from the UE.
            let key = match dir {
                Direction::Uplink => t,
                Direction::Downlink => FiveTuple {
                    src: t.dst,
                    dst: t.src,
                    src_port: t.dst_port,
                    dst_port: t.src_port,
                    ..t
                },
            };
            worker_of(flow_hash(&key), self.workers)
        } else {
            worker_of(ue_hash(ue), self.workers)
        }
    }
}
