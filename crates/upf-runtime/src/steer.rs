//! Which worker owns a packet: a hash of its UE address (inner source on N3/N9, destination
//! on N6), the same hash that placed the UE's session. UEs configured as peak-rate UEs are
//! spread over every worker by the hash of each flow's 5-tuple instead, which keeps each
//! flow in order. A spread IPv6 UE is its /64, as for the hash and the BPF programs' maps.

use std::net::IpAddr;
use upf_packet::steer::Spread;
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
    spread: Spread,
}

impl Steering {
    pub fn new(workers: usize, spread: impl IntoIterator<Item = IpAddr>) -> Self {
        Self {
            workers: workers.max(1),
            spread: Spread::new(spread),
        }
    }

    pub fn is_spread(&self, ue: IpAddr) -> bool {
        self.spread.contains(ue)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An N6 (`up` false) or bare uplink IPv6 UDP packet between `ue` and `peer`.
    fn v6_udp(ue: IpAddr, peer: IpAddr, ue_port: u16, up: bool) -> Vec<u8> {
        let (IpAddr::V6(u), IpAddr::V6(p)) = (ue, peer) else {
            unreachable!()
        };
        let (s, d, sp, dp) = if up {
            (u, p, ue_port, 443)
        } else {
            (p, u, 443, ue_port)
        };
        let mut b = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        b.extend_from_slice(&s.octets());
        b.extend_from_slice(&d.octets());
        b.extend_from_slice(&sp.to_be_bytes());
        b.extend_from_slice(&dp.to_be_bytes());
        b.extend_from_slice(&[0, 8, 0, 0]);
        b
    }

    #[test]
    fn a_spread_ipv6_ue_is_its_64_and_each_flow_keeps_its_worker() {
        let ue: IpAddr = "2001:db8:7::1".parse().unwrap();
        let other: IpAddr = "2001:db8:7::abcd".parse().unwrap();
        let peer: IpAddr = "2001:db8:ffff::9".parse().unwrap();
        let s = Steering::new(4, [ue]);
        // The UE's other addresses in its /64 are the UE.
        assert!(s.is_spread(other));
        assert_eq!(s.owners(Some(other)), vec![0, 1, 2, 3]);
        assert!(!s.is_spread("2001:db8:8::1".parse().unwrap()));
        let mut by_flow: HashMap<u16, usize> = HashMap::new();
        for port in 1000..1200u16 {
            for _ in 0..3 {
                let mut p = Packet::new(Port::N6);
                assert!(p.load(Port::N6, &v6_udp(other, peer, port, false)));
                let w = s.worker(&p);
                assert_eq!(*by_flow.entry(port).or_insert(w), w, "flow {port}");
            }
        }
        let mut used: Vec<usize> = by_flow.values().copied().collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, vec![0, 1, 2, 3]);
        // A UE not listed steers by its address, whatever the flow.
        let plain: IpAddr = "2001:db8:9::1".parse().unwrap();
        let want = worker_of(ue_hash(plain), 4);
        for port in 1000..1100u16 {
            let mut p = Packet::new(Port::N6);
            assert!(p.load(Port::N6, &v6_udp(plain, peer, port, false)));
            assert_eq!(s.worker(&p), want);
        }
    }
}
