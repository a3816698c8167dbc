//! UDP (RFC 768) with IPv4/IPv6 pseudo-header checksum (RFC 768, RFC 8200 §8.1).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{set_u16, sub, sub_mut, u16_at};
use crate::checksum;
use crate::ip_proto;
use crate::{Error, Result};

/// UDP header length.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Zero-copy view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without validation (accessors stay panic-free).
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate: 8 <= Length <= buffer (bytes past Length ignored).
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
        let l = usize::from(self.len());
        if l < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if l > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// True if the Length field says no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Payload (8 .. Length).
    pub fn payload(&self) -> &[u8] {
        sub(self.buffer.as_ref(), HEADER_LEN, usize::from(self.len()))
    }

    fn datagram(&self) -> &[u8] {
        sub(self.buffer.as_ref(), 0, usize::from(self.len()))
    }

    /// Verify over an IPv4 pseudo-header; a zero checksum means "not
    /// computed" and is accepted (RFC 768).
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len());
        checksum::combine(&[ph, checksum::sum(self.datagram())]) == 0xffff
    }

    /// Verify over an IPv6 pseudo-header; zero is invalid (RFC 8200 §8.1).
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len()));
        checksum::combine(&[ph, checksum::sum(self.datagram())]) == 0xffff
    }

    /// Verify with addresses of either family; mixed families fail.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.verify_checksum_v4(*s, *d),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.verify_checksum_v6(s, d),
            _ => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Set destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Set Length.
    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Compute and store the checksum over an IPv4 pseudo-header (payload
    /// must be in place). A computed 0 is sent as 0xffff (RFC 768).
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len());
        let c = !checksum::combine(&[ph, checksum::sum(self.datagram())]);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Compute and store the checksum over an IPv6 pseudo-header.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len()));
        let c = !checksum::combine(&[ph, checksum::sum(self.datagram())]);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let e = usize::from(self.len());
        sub_mut(self.buffer.as_mut(), HEADER_LEN, e)
    }
}

/// High-level UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Parse a view (checksum is the caller's choice: see `verify_checksum_*`).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }

    /// Write the header with checksum 0; call `fill_checksum_*` once the payload is in place.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<()> {
        let len = u16::try_from(self.buffer_len()).map_err(|_| Error::BufferTooSmall)?;
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `IPv6(src="2001:db8::1",dst="2001:db8::2")/UDP(sport=1,dport=2)/b"hello"`
    #[test]
    fn udp6_vector() {
        let b = hex("60000000000d114020010db800000000000000000000000120010db800000000000000000000000200010002000d608a68656c6c6f");
        let (s, d): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let mut u = b[40..].to_vec();
        let p = Packet::new_checked(&u[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (1, 2, 13));
        assert_eq!(p.checksum(), 0x608a);
        assert!(p.verify_checksum_v6(&s, &d));
        assert!(!p.verify_checksum_v6(&d, &d));
        assert_eq!(p.payload(), b"hello");
        let mut p = Packet::new_checked(&mut u[..]).unwrap();
        p.fill_checksum_v6(&s, &d);
        assert_eq!(p.checksum(), 0x608a);
        p.set_checksum(0);
        assert!(!p.verify_checksum(&IpAddr::V6(s), &IpAddr::V6(d)));
    }

    /// scapy 2.8: the UDP part of `IP(src="1.2.3.4",dst="5.6.7.8",options=[IPOption_RR(...)])
    /// /UDP(sport=1000,dport=2000)/b"hi"`: checksum 0x7ba5.
    #[test]
    fn udp4_vector_and_zero() {
        let mut u = hex("03e807d0000a7ba56869");
        let (s, d) = (Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8));
        let mut p = Packet::new_checked(&mut u[..]).unwrap();
        assert!(p.verify_checksum_v4(s, d));
        p.fill_checksum_v4(s, d);
        assert_eq!(p.checksum(), 0x7ba5);
        p.set_checksum(0);
        assert!(
            p.verify_checksum_v4(s, d),
            "zero checksum allowed over IPv4"
        );
        assert_eq!(Repr::parse(&p).unwrap().payload_len, 2);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        let b = [0, 1, 0, 2, 0, 7, 0, 0];
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadLength);
        let b = [0, 1, 0, 2, 0, 9, 0, 0];
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
    }
}
