//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443). Both share the 8-octet layout
//! type / code / checksum / 4 octets (echo: identifier, sequence number);
//! they differ in type numbers and in the ICMPv6 pseudo-header checksum.

use core::net::Ipv6Addr;

use crate::bytes::{set_u16, set_u8, sub, u16_at, u32_at, u8_at};
use crate::checksum;
use crate::ip_proto;
use crate::{Error, Result};

/// Header length (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 message types (RFC 792).
pub mod v4 {
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination Unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter Problem.
    pub const PARAM_PROBLEM: u8 = 12;
}

/// ICMPv6 message types (RFC 4443 §2.1).
pub mod v6 {
    /// Destination Unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet Too Big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter Problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 129;
}

/// Zero-copy view of an ICMPv4 or ICMPv6 message. ICMP has no length field:
/// the message is the whole buffer (pass the IP payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without validation (accessors stay panic-free).
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate: at least the 8-octet header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Type.
    pub fn msg_type(&self) -> u8 {
        u8_at(self.buffer.as_ref(), 0)
    }

    /// Code.
    pub fn code(&self) -> u8 {
        u8_at(self.buffer.as_ref(), 1)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// The 4 type-specific octets after the checksum.
    pub fn rest_of_header(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 4)
    }

    /// Echo Identifier (meaningful for echo request/reply).
    pub fn echo_ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// Echo Sequence Number (meaningful for echo request/reply).
    pub fn echo_seq_no(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }

    /// Data after the 8-octet header.
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        sub(b, HEADER_LEN, b.len())
    }

    /// ICMPv4 echo request or reply.
    pub fn is_echo_v4(&self) -> bool {
        matches!(self.msg_type(), v4::ECHO_REQUEST | v4::ECHO_REPLY)
    }

    /// ICMPv6 echo request or reply.
    pub fn is_echo_v6(&self) -> bool {
        matches!(self.msg_type(), v6::ECHO_REQUEST | v6::ECHO_REPLY)
    }

    /// ICMPv4 checksum: over the message only (RFC 792).
    pub fn verify_checksum_v4(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }

    /// ICMPv6 checksum: over pseudo-header and message (RFC 4443 §2.3).
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, len);
        checksum::combine(&[ph, checksum::sum(b)]) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set Type.
    pub fn set_msg_type(&mut self, v: u8) {
        set_u8(self.buffer.as_mut(), 0, v);
    }

    /// Set Code.
    pub fn set_code(&mut self, v: u8) {
        set_u8(self.buffer.as_mut(), 1, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    /// Set Echo Identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    /// Set Echo Sequence Number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 6, v);
    }

    /// Compute the ICMPv4 checksum.
    pub fn fill_checksum_v4(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Compute the ICMPv6 checksum.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<()> {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let len = u32::try_from(b.len()).map_err(|_| Error::BufferTooSmall)?;
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, len);
        let c = !checksum::combine(&[ph, checksum::sum(b)]);
        self.set_checksum(c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `IPv6(src="2001:db8::1",dst="2001:db8::2")/ICMPv6EchoRequest(id=0x4321,seq=3,data=b"ping")`
    #[test]
    fn icmpv6_echo_vector() {
        let b = hex("60000000000c3a4020010db800000000000000000000000120010db80000000000000000000000028000024f4321000370696e67");
        let (s, d): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let mut m = b[40..].to_vec();
        let p = Packet::new_checked(&m[..]).unwrap();
        assert!(p.is_echo_v6());
        assert_eq!((p.msg_type(), p.code()), (v6::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x4321, 3));
        assert_eq!(p.data(), b"ping");
        assert!(p.verify_checksum_v6(&s, &d));
        let mut p = Packet::new_checked(&mut m[..]).unwrap();
        p.set_checksum(0);
        p.fill_checksum_v6(&s, &d).unwrap();
        assert_eq!(p.checksum(), 0x024f);
    }

    /// scapy 2.8: ICMP part of `IP(src="10.45.0.2", dst="8.8.8.8")/ICMP(id=0x1234, seq=7)`.
    #[test]
    fn icmpv4_echo_vector() {
        let mut m = hex("0800e5c412340007");
        let p = Packet::new_checked(&m[..]).unwrap();
        assert!(p.is_echo_v4() && p.verify_checksum_v4());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 7));
        let mut p = Packet::new_checked(&mut m[..]).unwrap();
        p.set_msg_type(v4::ECHO_REPLY);
        p.fill_checksum_v4();
        assert!(p.verify_checksum_v4());
        assert_eq!(Packet::new_checked(&m[..7]).unwrap_err(), Error::Truncated);
    }
}
