//! The UE steering hash: which of `n` workers owns a UE. The runtime places sessions and
//! steers packets with it; the BPF steering programs (packet fanout, XDP) compute the same
//! from the frame, and their tests compare them with these functions.

use std::collections::HashSet;
use std::net::IpAddr;

/// The steering key of a UE address: an IPv4 address as a number, an IPv6 UE by its /64 (the
/// prefix is the UE's).
pub fn ue_key(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u32::from(v).into(),
        IpAddr::V6(v) => u64::try_from(u128::from(v) >> 64).unwrap_or(0),
    }
}

/// The hash of a steering key: the upper half of a multiplication by 2^64 / φ.
pub fn ue_hash_key(k: u64) -> u32 {
    u32::try_from(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).unwrap_or(0)
}

/// The steering hash of a UE address.
pub fn ue_hash(a: IpAddr) -> u32 {
    ue_hash_key(ue_key(a))
}

/// Maps a hash onto `n` workers (a multiply and shift: no division, no bias worth caring
/// about).
pub fn worker_of(hash: u32, n: usize) -> usize {
    usize::try_from((u64::from(hash) * n as u64) >> 32).unwrap_or(0)
}

/// The flow hash of a spread UE's packet, from what the BPF programs read: the UE's steering
/// key, the peer's address folded to 64 bits (IPv4: the number; IPv6: upper half XOR lower
/// half), the ports as seen from the UE (TCP, UDP and SCTP only, not in a non-first IPv4
/// fragment: 0 otherwise) and the protocol. A murmur3-style finaliser of one word: every
/// packet of a 5-tuple gets the same hash, whichever direction it travels.
pub fn flow_hash_key(ue: u64, peer: u64, ue_port: u16, peer_port: u16, proto: u8) -> u32 {
    let mut h = ue
        ^ peer.rotate_left(23)
        ^ (u64::from(ue_port) << 48 | u64::from(peer_port) << 32 | u64::from(proto));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    u32::try_from(h >> 32).unwrap_or(0)
}

/// Whether a protocol's packets carry ports the flow hash reads (TCP, UDP, SCTP).
pub fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132)
}

/// The peak-rate UEs spread per flow, by steering key: IPv4 addresses, IPv6 /64s (what the
/// BPF programs' maps hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spread {
    pub v4: HashSet<u32>,
    pub v6: HashSet<u64>,
}

impl Spread {
    pub fn new(ues: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut s = Spread::default();
        for a in ues {
            match a {
                IpAddr::V4(v) => s.v4.insert(v.into()),
                IpAddr::V6(_) => s.v6.insert(ue_key(a)),
            };
        }
        s
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Whether the UE with this steering key (IPv4 or IPv6) is spread.
    pub fn contains_key(&self, v4: bool, key: u64) -> bool {
        if v4 {
            u32::try_from(key).is_ok_and(|k| self.v4.contains(&k))
        } else {
            self.v6.contains(&key)
        }
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        self.contains_key(a.is_ipv4(), ue_key(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_spread() {
        assert_eq!(ue_key("10.60.0.7".parse().unwrap()), 0x0a3c_0007);
        assert_eq!(
            ue_key("2001:db8:1:2::5".parse().unwrap()),
            0x2001_0db8_0001_0002
        );
        // The /64 decides, not the interface identifier.
        assert_eq!(
            ue_hash("2001:db8::1".parse().unwrap()),
            ue_hash("2001:db8::ffff".parse().unwrap())
        );
        // 4,096 consecutive addresses land on each of 4 workers about equally.
        let mut n = [0usize; 4];
        for i in 0..4096u32 {
            n[worker_of(ue_hash(IpAddr::V4((0x0a3c_0000 + i).into())), 4)] += 1;
        }
        assert!(n.iter().all(|&c| (900..1150).contains(&c)), "{n:?}");
        assert_eq!(worker_of(u32::MAX, 4), 3);
        assert_eq!(worker_of(0, 4), 0);
    }

    #[test]
    fn spread_set_and_flow_hash() {
        let s = Spread::new([
            "10.60.0.7".parse().unwrap(),
            "2001:db8:1:2::5".parse().unwrap(),
        ]);
        assert!(s.contains("10.60.0.7".parse().unwrap()));
        assert!(!s.contains("10.60.0.8".parse().unwrap()));
        // The /64 is the UE.
        assert!(s.contains("2001:db8:1:2::99".parse().unwrap()));
        assert!(!s.contains_key(true, 0x2001_0db8_0001_0002));
        // 4,096 flows of one UE land on each of 4 workers about equally.
        let mut n = [0usize; 4];
        for p in 0..4096u16 {
            n[worker_of(flow_hash_key(0x0a3c_0007, 0x0808_0808, 1024 + p, 443, 6), 4)] += 1;
        }
        assert!(n.iter().all(|&c| (900..1150).contains(&c)), "{n:?}");
    }
}
