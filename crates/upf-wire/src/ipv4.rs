//! IPv4 header (RFC 791 §3.1), checksum (RFC 1071), TTL/DSCP rewrite with
//! incremental checksum update (RFC 1624), fragment recognition.

use core::net::Ipv4Addr;

use crate::bytes::{array_at, set_bytes, set_u16, set_u8, sub, sub_mut, u16_at, u8_at};
use crate::checksum;
use crate::{Error, Result};

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// Zero-copy view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without validation: accessors stay panic-free but may return 0
    /// for fields beyond the buffer. Use for emitting into a fresh buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate: version 4, 5 <= IHL, IHL*4 <= total length <= buffer.
    /// Options are allowed; bytes past the total length (link padding) are ignored.
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
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadLength);
        }
        let tl = usize::from(self.total_len());
        if tl < hl {
            return Err(Error::BadLength);
        }
        if tl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The underlying bytes (whole buffer, including any trailing padding).
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Version field (4).
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_IHL) >> 4
    }

    /// Header length in octets (IHL × 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(u8_at(self.buffer.as_ref(), field::VER_IHL) & 0x0f) * 4
    }

    /// Differentiated Services Code Point (RFC 2474), 6 bits.
    pub fn dscp(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) >> 2
    }

    /// Explicit Congestion Notification (RFC 3168), 2 bits.
    pub fn ecn(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) & 0x03
    }

    /// Total Length: header plus payload, in octets.
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment Offset in octets (the field counts 8-octet units).
    pub fn frag_offset(&self) -> u16 {
        (u16_at(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// A fragment of a larger datagram: MF set or offset non-zero (RFC 791 §3.2).
    pub fn is_fragment(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// The first fragment (offset 0, MF set): it alone carries the transport header.
    pub fn is_first_fragment(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) == FLAG_MF
    }

    /// Time To Live.
    pub fn ttl(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::TTL)
    }

    /// Protocol (IANA protocol number of the payload).
    pub fn protocol(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::PROTOCOL)
    }

    /// Header Checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(array_at::<4>(self.buffer.as_ref(), field::SRC))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(array_at::<4>(self.buffer.as_ref(), field::DST))
    }

    /// True if the header checksum is valid (RFC 791: sum over the header is 0xffff).
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(sub(self.buffer.as_ref(), 0, self.header_len())) == 0
    }

    /// Option bytes (between the fixed header and IHL × 4).
    pub fn options(&self) -> &[u8] {
        sub(self.buffer.as_ref(), HEADER_LEN, self.header_len())
    }

    /// Payload: from the end of the header to Total Length.
    pub fn payload(&self) -> &[u8] {
        sub(
            self.buffer.as_ref(),
            self.header_len(),
            usize::from(self.total_len()),
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set version (4) and header length in octets (multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        let ihl = u8::try_from(header_len / 4).unwrap_or(5) & 0x0f;
        set_u8(self.buffer.as_mut(), field::VER_IHL, 0x40 | ihl);
    }

    /// Set DSCP and ECN without touching the checksum.
    pub fn set_dscp_ecn_raw(&mut self, dscp: u8, ecn: u8) {
        set_u8(
            self.buffer.as_mut(),
            field::DSCP_ECN,
            (dscp << 2) | (ecn & 0x03),
        );
    }

    /// Set the DSCP (6 bits), keeping ECN, updating the checksum (RFC 1624).
    pub fn set_dscp(&mut self, dscp: u8) {
        let tos = (dscp << 2) | self.ecn();
        self.set_word0_low(tos);
    }

    /// Set the ECN (2 bits), keeping DSCP, updating the checksum (RFC 1624).
    pub fn set_ecn(&mut self, ecn: u8) {
        let tos = (self.dscp() << 2) | (ecn & 0x03);
        self.set_word0_low(tos);
    }

    fn set_word0_low(&mut self, tos: u8) {
        let b = self.buffer.as_ref();
        let old = u16_at(b, 0);
        let new = (old & 0xff00) | u16::from(tos);
        let c = checksum::update_u16(self.checksum(), old, new);
        set_u16(self.buffer.as_mut(), 0, new);
        self.set_checksum(c);
    }

    /// Set Total Length.
    pub fn set_total_len(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Set Identification.
    pub fn set_ident(&mut self, ident: u16) {
        set_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    /// Set flags and fragment offset (offset in octets, multiple of 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = (offset >> 3) & OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        set_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    /// Set TTL without touching the checksum.
    pub fn set_ttl(&mut self, ttl: u8) {
        set_u8(self.buffer.as_mut(), field::TTL, ttl);
    }

    /// Set Protocol.
    pub fn set_protocol(&mut self, proto: u8) {
        set_u8(self.buffer.as_mut(), field::PROTOCOL, proto);
    }

    /// Set the Header Checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    /// Set source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), field::SRC, &a.octets());
    }

    /// Set destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        set_bytes(self.buffer.as_mut(), field::DST, &a.octets());
    }

    /// Recompute the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(sub(self.buffer.as_ref(), 0, self.header_len()));
        self.set_checksum(c);
    }

    /// Forwarding step: decrement TTL and patch the checksum incrementally
    /// (RFC 1624). Returns the new TTL, or [`Error::TtlExpired`] (packet left
    /// untouched) when TTL <= 1, where the router must drop (RFC 1812 §5.3.1).
    pub fn decrement_ttl(&mut self) -> Result<u8> {
        // TTL and Protocol share one 16-bit checksum word.
        let old = u16_at(self.buffer.as_ref(), field::TTL);
        let ttl = old.to_be_bytes()[0];
        if ttl <= 1 {
            return Err(Error::TtlExpired);
        }
        let new = old - 0x0100;
        let c = checksum::update_u16(self.checksum(), old, new);
        set_u16(self.buffer.as_mut(), field::TTL, new);
        self.set_checksum(c);
        Ok(ttl - 1)
    }

    /// Mutable payload (header end .. Total Length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.header_len(), usize::from(self.total_len()));
        sub_mut(self.buffer.as_mut(), s, e)
    }
}

/// High-level IPv4 header (options and fragmentation state are not
/// represented: check [`Packet::is_fragment`] on the view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length in octets.
    pub payload_len: usize,
    /// Time To Live.
    pub ttl: u8,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Repr {
    /// Parse a checked view, verifying the header checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
            ttl: p.ttl(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Bytes [`Repr::emit`] writes (no options).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }

    /// Write a 20-octet header with a correct checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<()> {
        if self.dscp > 0x3f || self.ecn > 3 {
            return Err(Error::BadParameter);
        }
        let total = u16::try_from(self.buffer_len()).map_err(|_| Error::BufferTooSmall)?;
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        p.set_version_and_header_len(HEADER_LEN);
        p.set_dscp_ecn_raw(self.dscp, self.ecn);
        p.set_total_len(total);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, false, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `IP(src="1.2.3.4",dst="5.6.7.8",options=[IPOption_RR(routers=["9.9.9.9"])])
    /// /UDP(sport=1000,dport=2000)/b"hi"`
    const WITH_OPTIONS: &str =
        "470000260001000040114b9a0102030405060708070704090909090003e807d0000a7ba56869";

    #[test]
    fn options_vector() {
        let b = hex(WITH_OPTIONS);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.options(), &hex("0707040909090900")[..]);
        assert_eq!(p.total_len(), 38);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src_addr(), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(5, 6, 7, 8));
        assert!(p.verify_checksum());
        assert!(!p.is_fragment());
        assert_eq!(p.payload().len(), 10);
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 10);
        assert_eq!(r.ttl, 64);
    }

    /// scapy 2.8: `fragment(IP(src="10.45.0.2",dst="1.1.1.1",id=0x4242)
    /// /UDP(sport=5000,dport=6000)/(b"A"*60), fragsize=32)` → 3 fragments.
    #[test]
    fn fragments_vector() {
        let f0 = hex("450000344242200040110c470a2d0002010101011388177000442298414141414141414141414141414141414141414141414141");
        let f1 = hex("450000344242200440110c430a2d0002010101014141414141414141414141414141414141414141414141414141414141414141");
        let f2 = hex("450000184242000840112c5b0a2d00020101010141414141");
        let p0 = Packet::new_checked(&f0[..]).unwrap();
        let p1 = Packet::new_checked(&f1[..]).unwrap();
        let p2 = Packet::new_checked(&f2[..]).unwrap();
        assert!(p0.is_fragment() && p0.is_first_fragment() && p0.more_frags());
        assert!(p1.is_fragment() && !p1.is_first_fragment());
        assert_eq!(p1.frag_offset(), 32);
        assert!(p2.is_fragment() && !p2.is_first_fragment() && !p2.more_frags());
        assert_eq!(p2.frag_offset(), 64);
        for p in [p0, p1, p2] {
            assert!(p.verify_checksum());
        }
    }

    #[test]
    fn rejects() {
        let b = hex(WITH_OPTIONS);
        assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&b[..37]).unwrap_err(), Error::Truncated);
        let mut v = b.clone();
        v[0] = 0x67;
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadVersion);
        v[0] = 0x44;
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadLength);
        let mut v = b.clone();
        v[3] = 20; // total 20 < header 28
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadLength);
        let mut v = b;
        v[10] ^= 1;
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::BadChecksum);
    }

    #[test]
    fn ttl_and_dscp_incremental() {
        let mut b = hex(WITH_OPTIONS);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.decrement_ttl(), Ok(63));
        assert!(p.verify_checksum());
        p.set_dscp(46);
        assert_eq!(p.dscp(), 46);
        assert!(p.verify_checksum());
        p.set_ecn(1);
        assert_eq!((p.dscp(), p.ecn()), (46, 1));
        assert!(p.verify_checksum());
        p.set_ttl(1);
        p.fill_checksum();
        assert_eq!(p.decrement_ttl(), Err(Error::TtlExpired));
        assert_eq!(p.ttl(), 1);
    }

    #[test]
    fn emit_parse() {
        let r = Repr {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 7),
            protocol: 17,
            payload_len: 12,
            ttl: 64,
            dscp: 10,
            ecn: 2,
            ident: 0xbeef,
            dont_frag: true,
        };
        let mut b = [0u8; 32];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(r));
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut b[..10])),
            Err(Error::BufferTooSmall)
        );
    }
}
