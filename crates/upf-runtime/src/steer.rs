//! Which worker owns a packet: a hash of its UE address (inner source on N3/N9, destination
//! on N6), the same for the session at install time.

use std::net::IpAddr;
use upf_dataplane::{Packet, Port};
use upf_wire::encap::decapsulate;
use upf_wire::flow::{inner_ue_addr, Direction};

/// The steering hash of a UE address; IPv6 UEs hash by their /64 (the prefix is the UE's).
pub fn ue_hash(a: IpAddr) -> u32 {
    let k: u64 = match a {
        IpAddr::V4(v) => u32::from(v).into(),
        IpAddr::V6(v) => u64::try_from(u128::from(v) >> 64).unwrap_or(0),
    };
    let m = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    u32::try_from(m >> 32).unwrap_or(0)
}

/// The worker (of `n`) owning the packet's UE; packets without one go to worker 0, which
/// counts them as dropped or answers them (Echo).
pub fn owner(p: &Packet, n: usize) -> usize {
    let ue = match p.port {
        Port::N3 | Port::N9 => decapsulate(p.data())
            .ok()
            .and_then(|d| inner_ue_addr(p.data().get(d.inner)?, Direction::Uplink).ok()),
        Port::N6 => inner_ue_addr(p.data(), Direction::Downlink).ok(),
    };
    ue.map_or(0, |a| worker_of(ue_hash(a), n))
}

/// Maps a hash onto `n` workers without division bias worth caring about.
pub fn worker_of(hash: u32, n: usize) -> usize {
    usize::try_from((u64::from(hash) * n as u64) >> 32).unwrap_or(0)
}
