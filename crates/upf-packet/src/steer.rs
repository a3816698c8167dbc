//! The UE steering hash: which of `n` workers owns a UE. The runtime places sessions and
//! steers packets with it; the BPF steering programs (packet fanout, XDP) compute the same
//! from the frame, and their tests compare them with these functions.

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
}
