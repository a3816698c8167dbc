//! Reading the inner packet: the classification key, and the TTL/Hop Limit of a routed hop.

use crate::flow::{Addr, Flow};
use upf_wire::flow::FiveTuple;
use upf_wire::{checksum, ip_proto, ipv4, ipv6};

/// The classification key of an IP packet; `None` if it is not a well-formed IP packet.
#[inline]
pub fn flow_of(ip: &[u8]) -> Option<Flow> {
    crate::fast::flow_v4(ip)
        .map(Flow::from)
        .or_else(|| flow_of_general(ip))
}

/// [`flow_of`] by the general codec, for every form.
pub(crate) fn flow_of_general(ip: &[u8]) -> Option<Flow> {
    match ip.first()? >> 4 {
        4 => {
            let t = FiveTuple::parse_v4(ip).ok()?;
            let p = ipv4::Packet::new_unchecked(ip);
            let spi = (t.proto == ip_proto::ESP && p.frag_offset() == 0)
                .then(|| {
                    p.payload()
                        .get(..4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                })
                .flatten();
            Some(Flow {
                src: Addr::from_ip(t.src),
                dst: Addr::from_ip(t.dst),
                proto: t.proto,
                src_port: t.src_port,
                dst_port: t.dst_port,
                tos: p.dscp() << 2 | p.ecn(),
                spi,
                flow_label: None,
            })
        }
        6 => {
            let t = FiveTuple::parse_v6(ip).ok()?;
            let p = ipv6::Packet::new_unchecked(ip);
            let spi = if t.proto == ip_proto::ESP {
                p.upper_layer()
                    .ok()
                    .and_then(|ul| ip.get(ul.offset..ul.offset + 4))
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            } else {
                None
            };
            Some(Flow {
                src: Addr::from_ip(t.src),
                dst: Addr::from_ip(t.dst),
                proto: t.proto,
                src_port: t.src_port,
                dst_port: t.dst_port,
                tos: p.traffic_class(),
                spi,
                flow_label: Some(p.flow_label()),
            })
        }
        _ => None,
    }
}

/// One routed hop: decrements the IPv4 TTL (updating the checksum, RFC 1624) or the IPv6
/// Hop Limit. False when it would reach zero (the packet must be dropped).
#[inline(always)]
pub fn route_hop(ip: &mut [u8]) -> bool {
    match ip.first().map(|v| v >> 4) {
        Some(4) if ip.len() >= ipv4::HEADER_LEN => {
            let ttl = ip[8];
            if ttl <= 1 {
                return false;
            }
            let old = u16::from_be_bytes([ttl, ip[9]]);
            let new = u16::from_be_bytes([ttl - 1, ip[9]]);
            let sum = u16::from_be_bytes([ip[10], ip[11]]);
            let sum = checksum::update_u16(sum, old, new);
            ip[8] = ttl - 1;
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            true
        }
        Some(6) if ip.len() >= ipv6::HEADER_LEN => {
            if ip[7] <= 1 {
                return false;
            }
            ip[7] -= 1;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut ip = [
            0x45, 0, 0, 20, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(route_hop(&mut ip));
        assert_eq!(ip[8], 63);
        assert!(ipv4::Packet::new_checked(&ip[..])
            .unwrap()
            .verify_checksum());
        ip[8] = 1;
        assert!(!route_hop(&mut ip));
    }
}
