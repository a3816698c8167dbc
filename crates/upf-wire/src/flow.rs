//! Inner-packet flow keys: 5-tuple for SDF filter matching (TS 29.244
//! §5.2.1A), UE address for session lookup, and a steering hash.

use core::net::IpAddr;

use crate::bytes::u16_at;
use crate::icmp;
use crate::ip_proto;
use crate::{ipv4, ipv6, Error, Result};

/// Direction of the inner packet relative to the UE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the UE (N3/N9 ingress): the UE address is the source.
    Uplink,
    /// To the UE (N6 ingress): the UE address is the destination.
    Downlink,
}

/// The classic 5-tuple of an IP packet.
///
/// Ports are those of TCP, UDP, UDP-Lite and SCTP, which share the layout
/// of the first 4 octets. For ICMPv4/ICMPv6 Echo Request/Reply both ports
/// hold the Echo Identifier, so a ping and its reply map to the same flow
/// (as Linux conntrack does); all other ICMP messages, other protocols and
/// non-first fragments get ports 0 (the transport header is not there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port (see type docs).
    pub src_port: u16,
    /// Destination port (see type docs).
    pub dst_port: u16,
}

/// Ports from an upper-layer header at `l4` (which may be empty or short).
/// A port-carrying protocol without its 4 port octets is malformed:
/// classifying it with ports 0 could match the wrong SDF filter.
#[inline(always)]
fn ports(proto: u8, l4: &[u8], echo: fn(&icmp::Packet<&[u8]>) -> bool) -> Result<(u16, u16)> {
    match proto {
        ip_proto::TCP | ip_proto::UDP | ip_proto::UDPLITE | ip_proto::SCTP => {
            if l4.len() < 4 {
                return Err(Error::Truncated);
            }
            Ok((u16_at(l4, 0), u16_at(l4, 2)))
        }
        ip_proto::ICMP | ip_proto::ICMPV6 => match icmp::Packet::new_checked(l4) {
            Ok(p) if echo(&p) => Ok((p.echo_ident(), p.echo_ident())),
            _ => Ok((0, 0)),
        },
        _ => Ok((0, 0)),
    }
}

impl FiveTuple {
    /// Extract from an IPv4 or IPv6 packet (dispatch on the version nibble).
    // Hot path: inlining lets the caller keep the tuple in registers
    // instead of reloading a returned struct (store-forwarding stalls).
    #[inline(always)]
    pub fn parse(ip: &[u8]) -> Result<FiveTuple> {
        match ip.first().map(|v| v >> 4) {
            Some(4) => Self::parse_v4(ip),
            Some(6) => Self::parse_v6(ip),
            Some(_) => Err(Error::BadVersion),
            None => Err(Error::Truncated),
        }
    }

    /// Extract from an IPv4 packet (RFC 791).
    #[inline(always)]
    pub fn parse_v4(ip: &[u8]) -> Result<FiveTuple> {
        let p = ipv4::Packet::new_checked(ip)?;
        let proto = p.protocol();
        let (src_port, dst_port) = if p.frag_offset() != 0 {
            (0, 0)
        } else {
            let echo = |i: &icmp::Packet<&[u8]>| i.is_echo_v4();
            ports(proto, p.payload(), echo)?
        };
        Ok(FiveTuple {
            src: IpAddr::V4(p.src_addr()),
            dst: IpAddr::V4(p.dst_addr()),
            proto,
            src_port,
            dst_port,
        })
    }

    /// Extract from an IPv6 packet, walking extension headers (RFC 8200 §4).
    #[inline]
    pub fn parse_v6(ip: &[u8]) -> Result<FiveTuple> {
        let p = ipv6::Packet::new_checked(ip)?;
        let ul = p.upper_layer()?;
        let (src_port, dst_port) = if ul.has_transport_header() {
            let l4 = ip.get(ul.offset..p.total_len()).unwrap_or(&[]);
            let echo = |i: &icmp::Packet<&[u8]>| i.is_echo_v6();
            ports(ul.protocol, l4, echo)?
        } else {
            (0, 0)
        };
        Ok(FiveTuple {
            src: IpAddr::V6(p.src_addr()),
            dst: IpAddr::V6(p.dst_addr()),
            proto: ul.protocol,
            src_port,
            dst_port,
        })
    }

    /// The UE address: source on uplink, destination on downlink.
    pub const fn ue_addr(&self, dir: Direction) -> IpAddr {
        match dir {
            Direction::Uplink => self.src,
            Direction::Downlink => self.dst,
        }
    }

    /// Steering hash, see [`flow_hash`].
    pub fn hash32(&self) -> u32 {
        flow_hash(self)
    }
}

/// UE address of an inner packet without the full 5-tuple (header checks
/// only): source for uplink, destination for downlink.
#[inline]
pub fn inner_ue_addr(ip: &[u8], dir: Direction) -> Result<IpAddr> {
    match ip.first().map(|v| v >> 4) {
        Some(4) => {
            let p = ipv4::Packet::new_checked(ip)?;
            Ok(IpAddr::V4(match dir {
                Direction::Uplink => p.src_addr(),
                Direction::Downlink => p.dst_addr(),
            }))
        }
        Some(6) => {
            let p = ipv6::Packet::new_checked(ip)?;
            Ok(IpAddr::V6(match dir {
                Direction::Uplink => p.src_addr(),
                Direction::Downlink => p.dst_addr(),
            }))
        }
        Some(_) => Err(Error::BadVersion),
        None => Err(Error::Truncated),
    }
}

/// Address folded to 64 bits (IPv4 tagged so it cannot collide with a
/// v4-mapped IPv6 fold by construction of the tuple alone).
#[inline(always)]
fn fold_addr(a: &IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u64::from(u32::from(*v)) | (1 << 32),
        IpAddr::V6(v) => {
            let x = u128::from(*v);
            let hi = x >> 64;
            let lo = x & u128::from(u64::MAX);
            u64::try_from(hi ^ lo).unwrap_or(0)
        }
    }
}

/// Fast non-cryptographic steering hash: xor of the fields, then the
/// murmur3 64-bit finaliser (multiply-xorshift). Not DoS-resistant: use it
/// to spread flows over queues/cores, not as a hash-table key against an
/// adversary. Directional (uplink and downlink of a flow differ).
#[inline]
pub fn flow_hash(t: &FiveTuple) -> u32 {
    let mut h = fold_addr(&t.src).rotate_left(23)
        ^ fold_addr(&t.dst)
        ^ (u64::from(t.src_port) << 48 | u64::from(t.dst_port) << 32 | u64::from(t.proto));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    // High half: the best-mixed bits.
    u32::try_from(h >> 32).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: inner packets of the G-PDU vectors and the fragment vectors.
    #[test]
    fn vectors() {
        // IP(src="10.45.0.2", dst="8.8.8.8")/ICMP(id=0x1234, seq=7)
        let icmp = hex("4500001c00010000400160a20a2d0002080808080800e5c412340007");
        let t = FiveTuple::parse(&icmp).unwrap();
        assert_eq!(t.src, "10.45.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((t.proto, t.src_port, t.dst_port), (1, 0x1234, 0x1234));
        assert_eq!(t.ue_addr(Direction::Uplink), t.src);
        assert_eq!(inner_ue_addr(&icmp, Direction::Downlink), Ok(t.dst));
        // IP(src="8.8.8.8",dst="10.45.0.2")/UDP(sport=53,dport=40000)/b"abcd"
        let udp = hex("45000020000100004011608e080808080a2d000200359c40000c845b61626364");
        let t = FiveTuple::parse(&udp).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (17, 53, 40000));
        // IPv6/TCP(sport=443,dport=50000)
        let tcp6 = hex("600000000014064020010db80001000000000000000000052001486000000000000000000000888801bbc350000000000000000050102000ac200000");
        let t = FiveTuple::parse(&tcp6).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (6, 443, 50000));
        assert_eq!(inner_ue_addr(&tcp6, Direction::Uplink), Ok(t.src));
        // IPv4 fragments: first has ports, later ones 0.
        let f0 = hex("450000344242200040110c470a2d0002010101011388177000442298414141414141414141414141414141414141414141414141");
        let f1 = hex("450000344242200440110c430a2d0002010101014141414141414141414141414141414141414141414141414141414141414141");
        assert_eq!(
            FiveTuple::parse(&f0).map(|t| (t.src_port, t.dst_port)),
            Ok((5000, 6000))
        );
        assert_eq!(
            FiveTuple::parse(&f1).map(|t| (t.proto, t.src_port)),
            Ok((17, 0))
        );
        // IPv6 extension chain → UDP 1234 → 5678.
        let ext6 = hex("600000000031004020010db800000000000000000000000a20010db800000000000000000000000b2b000104000000003c0200010000000020010db800000000000000000000000c110001040000000004d2162e0009115478");
        let t = FiveTuple::parse(&ext6).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (17, 1234, 5678));
        // IPv6 non-first fragment.
        let f6 = hex("6000000000102c4020010db800000000000000000000000120010db800000000000000000000000211000010000012344242424242424242");
        assert_eq!(
            FiveTuple::parse(&f6).map(|t| (t.proto, t.src_port)),
            Ok((17, 0))
        );
    }

    #[test]
    fn malformed() {
        assert_eq!(FiveTuple::parse(&[]), Err(Error::Truncated));
        assert_eq!(FiveTuple::parse(&[0x50; 40]), Err(Error::BadVersion));
        // UDP with only 2 payload octets.
        let b = hex("45000016000100004011608e080808080a2d00020035");
        assert_eq!(FiveTuple::parse(&b), Err(Error::Truncated));
        assert_eq!(
            inner_ue_addr(&[0x45; 10], Direction::Uplink),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn hash_spreads() {
        let base = FiveTuple {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            proto: 17,
            src_port: 1000,
            dst_port: 2000,
        };
        let mut buckets = [0u32; 8];
        for p in 0..8000u16 {
            let t = FiveTuple {
                src_port: p,
                ..base
            };
            buckets[usize::try_from(flow_hash(&t) & 7).unwrap()] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
        assert_eq!(flow_hash(&base), base.hash32());
    }
}
