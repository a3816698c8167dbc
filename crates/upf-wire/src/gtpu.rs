//! GTP-U v1 header (TS 29.281 §5.1).
//!
//! ```text
//!  octet 1    | Version(3)=1 | PT=1 | spare | E | S | PN |
//!  octet 2    | Message Type                            |
//!  octets 3-4 | Length (octets after the first 8)       |
//!  octets 5-8 | TEID                                    |
//!  octets 9-12, present iff any of E/S/PN:
//!             | Sequence Number (2) | N-PDU Number | Next Extension Header Type |
//! ```

use crate::bytes::{set_u16, set_u32, set_u8, sub, u16_at, u32_at, u8_at};
use crate::ext::{ExtIter, Extensions};
use crate::{Error, Result};

/// Registered UDP port of GTP-U (TS 29.281 §4.4.2.0).
pub const PORT: u16 = 2152;
/// Mandatory header length.
pub const HEADER_LEN: usize = 8;
/// Header length with the optional Sequence Number / N-PDU / Next Type octets.
pub const HEADER_LEN_OPT: usize = 12;

const FLAG_PT: u8 = 0x10;
const FLAG_E: u8 = 0x04;
const FLAG_S: u8 = 0x02;
const FLAG_PN: u8 = 0x01;

mod field {
    pub const FLAGS: usize = 0;
    pub const MSG_TYPE: usize = 1;
    pub const LENGTH: usize = 2;
    pub const TEID: usize = 4;
    pub const SEQ: usize = 8;
    pub const NPDU: usize = 10;
    pub const NEXT_EXT: usize = 11;
}

/// GTP-U message types (TS 29.281 §6.1, Table 6.1-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// 1: Echo Request (§7.2.1).
    EchoRequest,
    /// 2: Echo Response (§7.2.2).
    EchoResponse,
    /// 26: Error Indication (§7.3.1).
    ErrorIndication,
    /// 31: Supported Extension Headers Notification (§7.2.3).
    SupportedExtHeadersNotification,
    /// 254: End Marker (§7.3.2).
    EndMarker,
    /// 255: G-PDU, carrying a T-PDU.
    GPdu,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for MessageType {
    fn from(v: u8) -> Self {
        match v {
            1 => MessageType::EchoRequest,
            2 => MessageType::EchoResponse,
            26 => MessageType::ErrorIndication,
            31 => MessageType::SupportedExtHeadersNotification,
            254 => MessageType::EndMarker,
            255 => MessageType::GPdu,
            o => MessageType::Unknown(o),
        }
    }
}

impl From<MessageType> for u8 {
    fn from(v: MessageType) -> u8 {
        match v {
            MessageType::EchoRequest => 1,
            MessageType::EchoResponse => 2,
            MessageType::ErrorIndication => 26,
            MessageType::SupportedExtHeadersNotification => 31,
            MessageType::EndMarker => 254,
            MessageType::GPdu => 255,
            MessageType::Unknown(o) => o,
        }
    }
}

/// Zero-copy view of a GTP-U message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without validation (accessors stay panic-free).
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap and validate: version 1, PT 1, Length covers the optional octets
    /// when E/S/PN is set, 8 + Length <= buffer (bytes past it are ignored).
    /// The extension chain is validated by [`Repr::parse`] / [`Packet::payload_offset`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The validation done by [`Packet::new_checked`].
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 1 {
            return Err(Error::BadVersion);
        }
        if !self.protocol_type() {
            return Err(Error::BadProtocolType);
        }
        if self.has_optional_fields() && usize::from(self.length()) < HEADER_LEN_OPT - HEADER_LEN {
            return Err(Error::BadLength);
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

    /// Raw first octet.
    pub fn flags(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::FLAGS)
    }

    /// Version (1 for GTPv1).
    pub fn version(&self) -> u8 {
        self.flags() >> 5
    }

    /// Protocol Type: true for GTP, false for GTP'.
    pub fn protocol_type(&self) -> bool {
        self.flags() & FLAG_PT != 0
    }

    /// E: an extension header chain follows (TS 29.281 §5.1).
    pub fn e_flag(&self) -> bool {
        self.flags() & FLAG_E != 0
    }

    /// S: the Sequence Number is meaningful.
    pub fn s_flag(&self) -> bool {
        self.flags() & FLAG_S != 0
    }

    /// PN: the N-PDU Number is meaningful.
    pub fn pn_flag(&self) -> bool {
        self.flags() & FLAG_PN != 0
    }

    /// Octets 9-12 are present (any of E, S, PN set).
    pub fn has_optional_fields(&self) -> bool {
        self.flags() & (FLAG_E | FLAG_S | FLAG_PN) != 0
    }

    /// Message type.
    pub fn msg_type(&self) -> MessageType {
        MessageType::from(self.raw_msg_type())
    }

    /// Message type octet.
    pub fn raw_msg_type(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::MSG_TYPE)
    }

    /// Length field: octets after the mandatory 8.
    pub fn length(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// 8 + Length: the whole message.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.length())
    }

    /// Tunnel Endpoint Identifier.
    pub fn teid(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::TEID)
    }

    /// Sequence Number, if S is set.
    pub fn seq_number(&self) -> Option<u16> {
        self.s_flag()
            .then(|| u16_at(self.buffer.as_ref(), field::SEQ))
    }

    /// N-PDU Number, if PN is set.
    pub fn npdu_number(&self) -> Option<u8> {
        self.pn_flag()
            .then(|| u8_at(self.buffer.as_ref(), field::NPDU))
    }

    /// Next Extension Header Type, or 0 when E is clear (the field, if
    /// present, is then not to be interpreted: TS 29.281 §5.1).
    pub fn next_ext_type(&self) -> u8 {
        if self.e_flag() {
            u8_at(self.buffer.as_ref(), field::NEXT_EXT)
        } else {
            0
        }
    }

    /// 8 or 12: the fixed part, before any extension header.
    pub fn header_len(&self) -> usize {
        if self.has_optional_fields() {
            HEADER_LEN_OPT
        } else {
            HEADER_LEN
        }
    }

    /// The message bytes (0 .. 8 + Length).
    pub fn message(&self) -> &[u8] {
        sub(self.buffer.as_ref(), 0, self.total_len())
    }

    /// Iterator over the extension header chain (any types), bounded by the message.
    pub fn extensions(&self) -> ExtIter<'_> {
        ExtIter::new(self.message(), HEADER_LEN_OPT, self.next_ext_type())
    }

    /// Offset of the payload (T-PDU or IEs) after walking the chain by
    /// length only (no comprehension policy; see [`Repr::parse`] for that).
    pub fn payload_offset(&self) -> Result<usize> {
        let mut it = self.extensions();
        for h in it.by_ref() {
            h?;
        }
        Ok(if self.e_flag() {
            it.offset()
        } else {
            self.header_len()
        })
    }

    /// Payload after header and extension chain.
    pub fn payload(&self) -> Result<&[u8]> {
        let off = self.payload_offset()?;
        Ok(sub(self.message(), off, self.total_len()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the first octet: version 1, PT 1, and the E/S/PN flags.
    pub fn set_flags(&mut self, e: bool, s: bool, pn: bool) {
        let mut f = 0x20 | FLAG_PT;
        if e {
            f |= FLAG_E;
        }
        if s {
            f |= FLAG_S;
        }
        if pn {
            f |= FLAG_PN;
        }
        set_u8(self.buffer.as_mut(), field::FLAGS, f);
    }

    /// Set Message Type.
    pub fn set_msg_type(&mut self, t: MessageType) {
        set_u8(self.buffer.as_mut(), field::MSG_TYPE, u8::from(t));
    }

    /// Set Length.
    pub fn set_length(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Set TEID.
    pub fn set_teid(&mut self, teid: u32) {
        set_u32(self.buffer.as_mut(), field::TEID, teid);
    }

    /// Set the Sequence Number octets (flag unchanged).
    pub fn set_seq_number(&mut self, seq: u16) {
        set_u16(self.buffer.as_mut(), field::SEQ, seq);
    }

    /// Set the N-PDU Number octet (flag unchanged).
    pub fn set_npdu_number(&mut self, n: u8) {
        set_u8(self.buffer.as_mut(), field::NPDU, n);
    }

    /// Set the Next Extension Header Type octet (flag unchanged).
    pub fn set_next_ext_type(&mut self, t: u8) {
        set_u8(self.buffer.as_mut(), field::NEXT_EXT, t);
    }
}

/// High-level GTP-U header: fixed fields plus the interpreted extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Message type.
    pub msg_type: MessageType,
    /// TEID.
    pub teid: u32,
    /// Sequence Number (S flag).
    pub seq_number: Option<u16>,
    /// N-PDU Number (PN flag).
    pub npdu_number: Option<u8>,
    /// Interpreted extension headers (E flag iff non-empty on emit).
    pub ext: Extensions,
    /// Octets after header and extensions (T-PDU or IEs).
    pub payload_len: usize,
}

impl Repr {
    /// Parse, applying the endpoint extension policy of [`Extensions::parse`].
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        Self::parse_with_offset(p).map(|(r, _)| r)
    }

    /// [`Repr::parse`] that also returns the payload offset, from the same
    /// single walk of the chain (the data path needs both).
    #[inline]
    pub fn parse_with_offset<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<(Repr, usize)> {
        p.check_len()?;
        Self::parse_checked(p)
    }

    /// Body of [`Repr::parse_with_offset`] for a view already checked.
    #[inline(always)]
    fn parse_checked<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<(Repr, usize)> {
        let msg = p.message();
        let (ext, off) = if p.e_flag() {
            Extensions::parse(msg, HEADER_LEN_OPT, p.next_ext_type())?
        } else {
            (Extensions::default(), p.header_len())
        };
        let repr = Repr {
            msg_type: p.msg_type(),
            teid: p.teid(),
            seq_number: p.seq_number(),
            npdu_number: p.npdu_number(),
            ext,
            payload_len: msg.len().saturating_sub(off),
        };
        Ok((repr, off))
    }

    fn has_optional_fields(&self) -> bool {
        self.seq_number.is_some() || self.npdu_number.is_some() || !self.ext.is_empty()
    }

    /// Header length [`Repr::emit`] writes: 8, or 12 plus extensions.
    pub fn header_len(&self) -> usize {
        if self.has_optional_fields() {
            HEADER_LEN_OPT + self.ext.buffer_len()
        } else {
            HEADER_LEN
        }
    }

    /// Header plus payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len().saturating_add(self.payload_len)
    }

    /// Write header and extension chain; the payload goes at `header_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<()> {
        let hl = self.header_len();
        let length = (hl - HEADER_LEN)
            .checked_add(self.payload_len)
            .and_then(|l| u16::try_from(l).ok())
            .ok_or(Error::BufferTooSmall)?;
        if p.buffer.as_ref().len() < hl {
            return Err(Error::BufferTooSmall);
        }
        p.set_flags(
            !self.ext.is_empty(),
            self.seq_number.is_some(),
            self.npdu_number.is_some(),
        );
        p.set_msg_type(self.msg_type);
        p.set_length(length);
        p.set_teid(self.teid);
        if self.has_optional_fields() {
            p.set_seq_number(self.seq_number.unwrap_or(0));
            p.set_npdu_number(self.npdu_number.unwrap_or(0));
            p.set_next_ext_type(self.ext.first_type());
            let rest = p
                .buffer
                .as_mut()
                .get_mut(HEADER_LEN_OPT..)
                .unwrap_or(&mut []);
            self.ext.emit(rest)?;
        }
        Ok(())
    }
}

/// Parse a GTP-U message in one call: header, extension chain (endpoint
/// policy) and payload slice. The data-path entry point.
#[inline(always)]
pub fn decode(buf: &[u8]) -> Result<(Repr, &[u8])> {
    let p = Packet::new_checked(buf)?;
    let (r, off) = Repr::parse_checked(&p)?;
    Ok((r, sub(buf, off, p.total_len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::{PduSessionContainer, PduType};
    use crate::test_util::hex;

    /// scapy 2.8: UDP payload of `IP(src="192.168.1.10",dst="192.168.1.20")/UDP(sport=2152,dport=2152)
    /// /GTP_U_Header(teid=0x11223344,next_ex=0x85)/GTPPDUSessionContainer(type=1,QFI=9)
    /// /IP(src="10.45.0.2",dst="8.8.8.8")/ICMP(id=0x1234,seq=7)`
    const GPDU_PSC_UL: &str =
        "34ff00241122334400000085011009004500001c00010000400160a20a2d0002080808080800e5c412340007";

    /// scapy 2.8: `GTP_U_Header(teid=0x55667788,next_ex=0x85)/GTPPDUSessionContainer(type=0,PPP=1,PPI=5,RQI=1,QFI=5)
    /// /IP(src="8.8.8.8",dst="10.45.0.2")/UDP(sport=53,dport=40000)/b"abcd"`
    const GPDU_PSC_DL: &str = "34ff002c55667788000000850200c5a00000000045000020000100004011608e080808080a2d000200359c40000c845b61626364";

    #[test]
    fn gpdu_psc_ul_vector() {
        let b = hex(GPDU_PSC_UL);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 1);
        assert!(p.protocol_type() && p.e_flag() && !p.s_flag() && !p.pn_flag());
        assert_eq!(p.msg_type(), MessageType::GPdu);
        assert_eq!(p.length(), 36);
        assert_eq!(p.teid(), 0x1122_3344);
        assert_eq!(p.seq_number(), None);
        assert_eq!(p.next_ext_type(), 0x85);
        assert_eq!(p.payload_offset(), Ok(16));
        let (r, off) = Repr::parse_with_offset(&p).unwrap();
        assert_eq!(off, 16);
        assert_eq!(r.ext.psc, Some(PduSessionContainer::ul(9)));
        assert_eq!(r.payload_len, 28);
        let (r2, payload) = decode(&b).unwrap();
        assert_eq!(r2, r);
        assert_eq!(payload[0], 0x45);
        // Re-emit gives the same header bytes.
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        out[16..].copy_from_slice(&b[16..]);
        assert_eq!(out, b);
    }

    #[test]
    fn gpdu_psc_dl_vector() {
        let b = hex(GPDU_PSC_DL);
        let (r, payload) = decode(&b).unwrap();
        let psc = r.ext.psc.unwrap();
        assert_eq!(psc.pdu_type, PduType::Dl);
        assert_eq!((psc.qfi, psc.ppi, psc.rqi), (5, Some(5), true));
        assert_eq!(r.teid, 0x5566_7788);
        assert_eq!(payload.len(), 32);
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        out[20..].copy_from_slice(payload);
        assert_eq!(out, b);
    }

    /// scapy 2.8: `GTPHeader(version=1,PT=1,S=1,gtp_type=1,teid=0,seq=0x1234)/GTPEchoRequest()`
    /// and `GTP_U_Header(gtp_type=254,teid=0x0a0b0c0d)` (End Marker).
    #[test]
    fn echo_and_end_marker_headers() {
        let b = hex("320100040000000012340000");
        let (r, payload) = decode(&b).unwrap();
        assert_eq!(r.msg_type, MessageType::EchoRequest);
        assert_eq!(r.seq_number, Some(0x1234));
        assert!(payload.is_empty());
        let b = hex("30fe00000a0b0c0d");
        let (r, _) = decode(&b).unwrap();
        assert_eq!(r.msg_type, MessageType::EndMarker);
        assert_eq!(r.teid, 0x0a0b_0c0d);
        assert_eq!(r.header_len(), 8);
    }

    #[test]
    fn rejects() {
        let b = hex(GPDU_PSC_UL);
        assert_eq!(Packet::new_checked(&b[..7]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&b[..43]).unwrap_err(), Error::Truncated);
        let mut v = b.clone();
        v[0] = 0x54; // version 2
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadVersion);
        v[0] = 0x24; // PT = 0: GTP'
        assert_eq!(
            Packet::new_checked(&v[..]).unwrap_err(),
            Error::BadProtocolType
        );
        let v = hex("3201000200000000");
        assert_eq!(Packet::new_checked(&v[..]).unwrap_err(), Error::BadLength);
        // E set, chain says PSC but length unit 0.
        let mut v = b.clone();
        v[12] = 0;
        assert_eq!(decode(&v).unwrap_err(), Error::BadExtensionChain);
        // Unknown comprehension-required extension type 0xa0.
        let mut v = b.clone();
        v[11] = 0xa0;
        assert_eq!(
            decode(&v).unwrap_err(),
            Error::UnknownComprehensionRequired(0xa0)
        );
        // ... but an unknown not-required one (0x21) is skipped.
        v[11] = 0x21;
        assert_eq!(decode(&v).unwrap().0.ext.psc, None);
        // A payload that cannot fit the 16-bit Length is refused, not wrapped.
        let huge = Repr {
            payload_len: usize::MAX,
            ..decode(&b).unwrap().0
        };
        assert_eq!(huge.buffer_len(), usize::MAX);
        let mut out = [0u8; 64];
        assert_eq!(
            huge.emit(&mut Packet::new_unchecked(&mut out[..])),
            Err(Error::BufferTooSmall)
        );
        // Trailing bytes past Length are ignored.
        let mut v = b.clone();
        v.extend_from_slice(&[0xee; 6]);
        assert_eq!(decode(&v).unwrap().1.len(), 28);
    }

    #[test]
    fn flags_without_e() {
        // S and PN set, E clear: next type octet present but ignored.
        let b = hex("33ff0005000000010007098541");
        let (r, payload) = decode(&b).unwrap();
        assert_eq!((r.seq_number, r.npdu_number), (Some(7), Some(9)));
        assert_eq!(r.ext, Extensions::default());
        assert_eq!(payload, [0x41]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.next_ext_type(), 0);
        assert_eq!(p.extensions().count(), 0);
    }
}
