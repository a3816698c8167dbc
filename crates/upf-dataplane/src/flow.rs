//! The inner packet's classification key, in one fixed layout for both IP versions so that
//! SDF filters and ACLs compare integers instead of `IpAddr` enums.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 address as 128 bits: IPv4 in the low 32 bits, with `v6` telling which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Addr {
    pub v6: bool,
    pub bits: u128,
}

impl Addr {
    pub const fn v4(a: Ipv4Addr) -> Self {
        Self {
            v6: false,
            bits: u32::from_be_bytes(a.octets()) as u128,
        }
    }
    pub const fn v6(a: Ipv6Addr) -> Self {
        Self {
            v6: true,
            bits: u128::from_be_bytes(a.octets()),
        }
    }
    pub const fn from_ip(a: IpAddr) -> Self {
        match a {
            IpAddr::V4(a) => Self::v4(a),
            IpAddr::V6(a) => Self::v6(a),
        }
    }
    /// The low 32 bits: the IPv4 address when `!v6`.
    #[inline(always)]
    pub const fn low32(self) -> u32 {
        #[allow(clippy::cast_possible_truncation)] // IPv4 lives in the low 32 bits
        let v = self.bits as u32;
        v
    }
    /// The IPv4 address (meaningful when `!v6`).
    pub fn to_ip4(self) -> Ipv4Addr {
        Ipv4Addr::from(self.low32())
    }
    /// The IPv6 address (meaningful when `v6`).
    pub fn to_ip6(self) -> Ipv6Addr {
        Ipv6Addr::from(self.bits)
    }
    pub fn to_ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.bits))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(self.bits).unwrap_or(0)))
        }
    }
}

/// A prefix of either version; `len` counts bits of that version (≤ 32 or ≤ 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub v6: bool,
    pub net: u128,
    pub mask: u128,
}

impl Prefix {
    /// `None` when `len` is longer than the address.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let a = Addr::from_ip(addr);
        let width: u32 = if a.v6 { 128 } else { 32 };
        let len = u32::from(len);
        if len > width {
            return None;
        }
        let full = if a.v6 {
            u128::MAX
        } else {
            u128::from(u32::MAX)
        };
        let mask = if len == 0 {
            0
        } else {
            full & (full << (width - len))
        };
        Some(Self {
            v6: a.v6,
            net: a.bits & mask,
            mask,
        })
    }

    #[inline(always)]
    pub fn contains(&self, a: Addr) -> bool {
        a.v6 == self.v6 && a.bits & self.mask == self.net
    }

    /// Prefix length in bits.
    pub fn bits(&self) -> u32 {
        self.mask.count_ones()
    }
}

/// What classification reads from an inner IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flow {
    pub src: Addr,
    pub dst: Addr,
    pub proto: u8,
    /// TCP/UDP/SCTP ports; ICMP echo identifier in both; 0 otherwise.
    pub src_port: u16,
    pub dst_port: u16,
    /// IPv4 ToS / IPv6 Traffic Class.
    pub tos: u8,
    /// IPsec SPI (ESP), 0 when absent.
    pub spi: Option<u32>,
    /// IPv6 flow label.
    pub flow_label: Option<u32>,
}

/// [`Flow`] of an IPv4 packet without options carrying TCP or UDP: the hot path's key, 12
/// octets that live in registers (a [`Flow`] is 96, stored to the stack and read back).
/// Such a packet has no SPI and no flow label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flow4 {
    pub src: u32,
    pub dst: u32,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: u8,
    pub tos: u8,
}

impl From<Flow4> for Flow {
    fn from(f: Flow4) -> Self {
        let a = |bits: u32| Addr {
            v6: false,
            bits: bits.into(),
        };
        Flow {
            src: a(f.src),
            dst: a(f.dst),
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
            tos: f.tos,
            spi: None,
            flow_label: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p = Prefix::new("10.1.0.0".parse().unwrap(), 16).unwrap();
        assert!(p.contains(Addr::v4(Ipv4Addr::new(10, 1, 200, 3))));
        assert!(!p.contains(Addr::v4(Ipv4Addr::new(10, 2, 0, 1))));
        assert!(!p.contains(Addr::v6("::a01:1".parse().unwrap())));
        let any6 = Prefix::new("::".parse().unwrap(), 0).unwrap();
        assert!(any6.contains(Addr::v6("2001:db8::1".parse().unwrap())));
        assert!(Prefix::new("10.0.0.0".parse().unwrap(), 33).is_none());
        let h = Prefix::new("2001:db8::1".parse().unwrap(), 128).unwrap();
        assert_eq!(h.bits(), 128);
        assert_eq!(
            Addr::v4(Ipv4Addr::new(1, 2, 3, 4)).to_ip().to_string(),
            "1.2.3.4"
        );
    }
}
