//! IPv6 fixed header (RFC 8200 §3) and extension header walk (RFC 8200 §4).

use core::net::Ipv6Addr;

use crate::bytes::{
    array_at, set_bytes, set_u16, set_u32, set_u8, sub, sub_mut, u16_at, u32_at, u8_at,
};
use crate::ip_proto;
use crate::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Upper bound on extension headers walked. RFC 8200 §4.1 allows each at most
/// once (Destination Options twice); anything longer is treated as an attack.
pub const MAX_EXT_HEADERS: usize = 8;

mod field {
    pub const VER_TC_FL: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// Zero-copy view of an IPv6 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Fragment Header contents (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Fragment Offset in octets.
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Result of walking the extension header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// Upper-layer protocol (or the header the walk stopped at: ESP, No Next
    /// Header, or the protocol of a non-first fragment).
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub offset: usize,
    /// Fragment Header, if one was crossed.
    pub fragment: Option<FragmentInfo>,
}

impl UpperLayer {
    /// True if the upper-layer header is present here (not a non-first fragment).
    pub fn has_transport_header(&self) -> bool {
        self.fragment.is_none_or(|f| f.offset == 0)
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without validation (accessors stay panic-free).
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate: version 6, 40 + Payload Length <= buffer.
    /// Bytes past that (link padding) are ignored.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The validation done by [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        if self.total_len() > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (6).
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_TC_FL) >> 4
    }

    /// Traffic Class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        let w = u16_at(self.buffer.as_ref(), field::VER_TC_FL);
        (w >> 4).to_be_bytes()[1]
    }

    /// DSCP (upper 6 bits of Traffic Class).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN (lower 2 bits of Traffic Class).
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow Label (20 bits, RFC 6437).
    pub fn flow_label(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VER_TC_FL) & 0x000f_ffff
    }

    /// Payload Length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// 40 + Payload Length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// Next Header of the fixed header.
    pub fn next_header(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::NEXT_HEADER)
    }

    /// Hop Limit.
    pub fn hop_limit(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::HOP_LIMIT)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(array_at::<16>(self.buffer.as_ref(), field::SRC))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(array_at::<16>(self.buffer.as_ref(), field::DST))
    }

    /// Payload after the fixed header (extension headers included).
    pub fn payload(&self) -> &[u8] {
        sub(self.buffer.as_ref(), HEADER_LEN, self.total_len())
    }

    /// Walk Hop-by-Hop, Routing, Fragment, Destination Options (and the other
    /// RFC 8200 §4 / IANA generic-format extension headers: Mobility, HIP,
    /// Shim6; AH per RFC 4302 §2.2) to the upper-layer header, bounded by the
    /// payload and by [`MAX_EXT_HEADERS`]. Stops at ESP / No Next Header, and
    /// right after a Fragment Header with non-zero offset (what follows is
    /// not a header).
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        let b = self.buffer.as_ref();
        let end = self.total_len().min(b.len());
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        let mut fragment = None;
        for _ in 0..=MAX_EXT_HEADERS {
            let len = match nh {
                ip_proto::HOP_BY_HOP
                | ip_proto::IPV6_ROUTING
                | ip_proto::IPV6_DEST_OPTS
                | ip_proto::MOBILITY
                | ip_proto::HIP
                | ip_proto::SHIM6 => (usize::from(u8_at(b, off + 1)) + 1) * 8,
                ip_proto::AH => (usize::from(u8_at(b, off + 1)) + 2) * 4,
                ip_proto::IPV6_FRAGMENT => 8,
                _ => {
                    return Ok(UpperLayer {
                        protocol: nh,
                        offset: off,
                        fragment,
                    })
                }
            };
            // len >= 8 covers the Next Header and length octets read above.
            if off + len > end {
                return Err(Error::BadExtensionChain);
            }
            let next = u8_at(b, off);
            if nh == ip_proto::IPV6_FRAGMENT {
                let w = u16_at(b, off + 2);
                let f = FragmentInfo {
                    offset: w & 0xfff8,
                    more: w & 1 != 0,
                    ident: u32_at(b, off + 4),
                };
                fragment = Some(f);
                if f.offset != 0 {
                    return Ok(UpperLayer {
                        protocol: next,
                        offset: off + 8,
                        fragment,
                    });
                }
            }
            nh = next;
            off += len;
        }
        Err(Error::BadExtensionChain)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set version 6, Traffic Class and Flow Label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        set_u32(self.buffer.as_mut(), field::VER_TC_FL, w);
    }

    /// Set Traffic Class, keeping version and Flow Label (IPv6 has no header checksum).
    pub fn set_traffic_class(&mut self, tc: u8) {
        let fl = self.flow_label();
        self.set_version_tc_flow(tc, fl);
    }

    /// Set Payload Length.
    pub fn set_payload_len(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, len);
    }

    /// Set Next Header.
    pub fn set_next_header(&mut self, nh: u8) {
        set_u8(self.buffer.as_mut(), field::NEXT_HEADER, nh);
    }

    /// Set Hop Limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        set_u8(self.buffer.as_mut(), field::HOP_LIMIT, h);
    }

    /// Decrement Hop Limit; [`Error::TtlExpired`] (untouched) when <= 1 (RFC 8200 §3).
    pub fn decrement_hop_limit(&mut self) -> Result<u8> {
        let h = self.hop_limit();
        if h <= 1 {
            return Err(Error::TtlExpired);
        }
        self.set_hop_limit(h - 1);
        Ok(h - 1)
    }

    /// Set source address.
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        set_bytes(self.buffer.as_mut(), field::SRC, &a.octets());
    }

    /// Set destination address.
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        set_bytes(self.buffer.as_mut(), field::DST, &a.octets());
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let e = self.total_len();
        sub_mut(self.buffer.as_mut(), HEADER_LEN, e)
    }
}

/// High-level IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next Header of the fixed header.
    pub next_header: u8,
    /// Payload Length.
    pub payload_len: usize,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Flow Label (20 bits).
    pub flow_label: u32,
}

impl Repr {
    /// Parse a view (re-validated).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }

    /// Write the 40-octet fixed header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<()> {
        if self.flow_label > 0x000f_ffff {
            return Err(Error::BadParameter);
        }
        let plen = u16::try_from(self.payload_len).map_err(|_| Error::BufferTooSmall)?;
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(plen);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(&self.src);
        p.set_dst_addr(&self.dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `IPv6(src="2001:db8::a",dst="2001:db8::b")/IPv6ExtHdrHopByHop()
    /// /IPv6ExtHdrRouting(addresses=["2001:db8::c"])/IPv6ExtHdrDestOpt()
    /// /UDP(sport=1234,dport=5678)/b"x"`
    const EXT_CHAIN: &str = "600000000031004020010db800000000000000000000000a20010db800000000000000000000000b2b000104000000003c0200010000000020010db800000000000000000000000c110001040000000004d2162e0009115478";

    #[test]
    fn ext_chain_vector() {
        let b = hex(EXT_CHAIN);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload_len(), 0x31);
        assert_eq!(p.next_header(), 0);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::a".parse::<Ipv6Addr>().unwrap());
        let ul = p.upper_layer().unwrap();
        assert_eq!(ul.protocol, 17);
        // 40 + HBH 8 + Routing 24 + DestOpt 8
        assert_eq!(ul.offset, 80);
        assert_eq!(ul.fragment, None);
        assert_eq!(u16_at(&b, ul.offset), 1234);
        // Truncating inside the routing header breaks the chain, not a panic.
        let mut t = b[..60].to_vec();
        t[5] = 20;
        let p = Packet::new_checked(&t[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::BadExtensionChain));
    }

    /// scapy 2.8: `IPv6(src="2001:db8::1",dst="2001:db8::2")/IPv6ExtHdrFragment(id=0x1234,m=1,offset=0,nh=17)
    /// /raw(UDP(sport=7000,dport=8000,len=24)/(b"B"*16))[:16]` and the
    /// second fragment with `m=0, offset=2`.
    #[test]
    fn fragment_vectors() {
        let f0 = hex("6000000000182c4020010db800000000000000000000000120010db800000000000000000000000211000001000012341b581f40001800004242424242424242");
        let f1 = hex("6000000000102c4020010db800000000000000000000000120010db800000000000000000000000211000010000012344242424242424242");
        let u0 = Packet::new_checked(&f0[..]).unwrap().upper_layer().unwrap();
        assert_eq!(u0.protocol, 17);
        assert_eq!(u0.offset, 48);
        assert_eq!(
            u0.fragment,
            Some(FragmentInfo {
                offset: 0,
                more: true,
                ident: 0x1234
            })
        );
        assert!(u0.has_transport_header());
        let u1 = Packet::new_checked(&f1[..]).unwrap().upper_layer().unwrap();
        assert_eq!(u1.fragment.unwrap().offset, 16);
        assert!(!u1.fragment.unwrap().more);
        assert!(!u1.has_transport_header());
    }

    #[test]
    fn chain_bound() {
        // Nine Destination Options headers: one more than allowed.
        let mut b = [0u8; 40 + 9 * 8];
        b[0] = 0x60;
        b[5] = 72;
        b[6] = 60;
        for i in 0..9 {
            b[40 + i * 8] = 60;
        }
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::BadExtensionChain));
    }

    #[test]
    fn rejects_and_roundtrip() {
        let b = hex(EXT_CHAIN);
        assert_eq!(Packet::new_checked(&b[..39]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&b[..80]).unwrap_err(), Error::Truncated);
        let mut v = b.clone();
        v[0] = 0x40;
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadVersion);
        let r = Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: 17,
            payload_len: 0,
            hop_limit: 2,
            traffic_class: 0xb8,
            flow_label: 0xabcde,
        };
        let mut out = [0u8; 40];
        let mut p = Packet::new_unchecked(&mut out[..]);
        r.emit(&mut p).unwrap();
        assert_eq!(p.decrement_hop_limit(), Ok(1));
        assert_eq!(p.decrement_hop_limit(), Err(Error::TtlExpired));
        p.set_hop_limit(2);
        p.set_traffic_class(0xb8);
        assert_eq!(Repr::parse(&Packet::new_checked(&out[..]).unwrap()), Ok(r));
    }
}
