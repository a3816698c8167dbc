//! GTP-U extension headers (TS 29.281 §5.2) and the PDU Session Container
//! (TS 38.415 §5.5.2).
//!
//! Each extension is `length (1 octet, in 4-octet units, TS 29.281 §5.2.1) |
//! content (4·length − 2 octets) | next extension header type (1 octet)`.

use crate::bytes::{set_u16, set_u8, u32_at, u8_at};
use crate::{Error, Result};

/// Extension header type values (TS 29.281 §5.2.1, Figure 5.2.1-3).
pub mod ext_type {
    /// No more extension headers.
    pub const NO_MORE: u8 = 0x00;
    /// Long PDCP PDU Number, Rel-16 code point (TS 29.281 §5.2.2.2A).
    pub const LONG_PDCP_PDU_NUMBER: u8 = 0x03;
    /// Service Class Indicator (TS 29.281 §5.2.2.3).
    pub const SERVICE_CLASS_INDICATOR: u8 = 0x20;
    /// UDP Port (TS 29.281 §5.2.2.1).
    pub const UDP_PORT: u8 = 0x40;
    /// RAN Container (TS 29.281 §5.2.2.4).
    pub const RAN_CONTAINER: u8 = 0x81;
    /// Long PDCP PDU Number, pre-Rel-16 code point (TS 29.281 §5.2.2.2A).
    pub const LONG_PDCP_PDU_NUMBER_OLD: u8 = 0x82;
    /// Xw RAN Container (TS 29.281 §5.2.2.5).
    pub const XW_RAN_CONTAINER: u8 = 0x83;
    /// NR RAN Container (TS 29.281 §5.2.2.6).
    pub const NR_RAN_CONTAINER: u8 = 0x84;
    /// PDU Session Container (TS 29.281 §5.2.2.7, content in TS 38.415).
    pub const PDU_SESSION_CONTAINER: u8 = 0x85;
    /// PDCP PDU Number (TS 29.281 §5.2.2.2).
    pub const PDCP_PDU_NUMBER: u8 = 0xc0;
}

/// The extension types this crate recognises, ascending: what a Supported
/// Extension Headers Notification lists (TS 29.281 §7.2.3, §8.5). Keep in
/// step with [`is_known`].
pub const SUPPORTED: [u8; 9] = [
    ext_type::LONG_PDCP_PDU_NUMBER,
    ext_type::SERVICE_CLASS_INDICATOR,
    ext_type::UDP_PORT,
    ext_type::RAN_CONTAINER,
    ext_type::LONG_PDCP_PDU_NUMBER_OLD,
    ext_type::XW_RAN_CONTAINER,
    ext_type::NR_RAN_CONTAINER,
    ext_type::PDU_SESSION_CONTAINER,
    ext_type::PDCP_PDU_NUMBER,
];

/// True for the extension types this crate recognises (it need not
/// interpret their content to forward or skip them).
pub const fn is_known(t: u8) -> bool {
    matches!(
        t,
        ext_type::LONG_PDCP_PDU_NUMBER
            | ext_type::SERVICE_CLASS_INDICATOR
            | ext_type::UDP_PORT
            | ext_type::RAN_CONTAINER
            | ext_type::LONG_PDCP_PDU_NUMBER_OLD
            | ext_type::XW_RAN_CONTAINER
            | ext_type::NR_RAN_CONTAINER
            | ext_type::PDU_SESSION_CONTAINER
            | ext_type::PDCP_PDU_NUMBER
    )
}

/// Bits 8-7 of the extension header type (TS 29.281 §5.2.1, Figure 5.2.1-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comprehension {
    /// `00`: not required; an intermediate node forwards it.
    NotRequired,
    /// `01`: not required; an intermediate node discards the content and does not forward it.
    NotRequiredDiscard,
    /// `10`: required by the receiving endpoint, not by intermediate nodes.
    RequiredByEndpoint,
    /// `11`: required by every recipient.
    Required,
}

impl Comprehension {
    /// Classify an extension header type.
    pub const fn of(ext_type: u8) -> Self {
        match ext_type >> 6 {
            0 => Comprehension::NotRequired,
            1 => Comprehension::NotRequiredDiscard,
            2 => Comprehension::RequiredByEndpoint,
            _ => Comprehension::Required,
        }
    }

    /// Whether a GTP-U endpoint (the UPF terminating the tunnel) must
    /// understand it: `10` and `11`.
    pub const fn required_by_endpoint(self) -> bool {
        matches!(
            self,
            Comprehension::RequiredByEndpoint | Comprehension::Required
        )
    }
}

/// One extension header in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<'a> {
    /// Type of this extension (from the previous next-type field).
    pub ext_type: u8,
    /// Content between the length octet and the next-type octet (padding included).
    pub content: &'a [u8],
    /// Next Extension Header Type (0 ends the chain).
    pub next_type: u8,
}

/// Walks any extension chain by its length octets, bounded by the buffer.
/// Yields each header; on a malformed chain yields one `Err` and then ends.
/// Every step consumes at least 4 octets, so it terminates within len/4 steps.
#[derive(Debug, Clone)]
pub struct ExtIter<'a> {
    buf: &'a [u8],
    offset: usize,
    next: u8,
    failed: bool,
}

impl<'a> ExtIter<'a> {
    /// Start at `offset` in `buf` (which must end where the GTP-U message
    /// ends), with `first` taken from the header's Next Extension Header Type.
    pub const fn new(buf: &'a [u8], offset: usize, first: u8) -> Self {
        ExtIter {
            buf,
            offset,
            next: first,
            failed: false,
        }
    }

    /// Offset just past the headers consumed so far: the payload offset once
    /// the iterator has returned `None` without an error.
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

impl<'a> Iterator for ExtIter<'a> {
    type Item = Result<ExtHeader<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next == ext_type::NO_MORE {
            return None;
        }
        match next_ext(self.buf, self.offset, self.next) {
            Ok((h, end)) => {
                self.offset = end;
                self.next = h.next_type;
                Some(Ok(h))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Decode one extension at `off`; returns it and the offset after it.
#[inline(always)]
fn next_ext(buf: &[u8], off: usize, ext_type: u8) -> Result<(ExtHeader<'_>, usize)> {
    let units = match buf.get(off) {
        Some(&u) => usize::from(u),
        None => return Err(Error::BadExtensionChain),
    };
    // TS 29.281 §5.2.1: length 0 is invalid (it would also never advance).
    if units == 0 {
        return Err(Error::BadExtensionChain);
    }
    let end = off + units * 4;
    match buf.get(off + 1..end) {
        Some([content @ .., next_type]) => Ok((
            ExtHeader {
                ext_type,
                content,
                next_type: *next_type,
            },
            end,
        )),
        _ => Err(Error::BadExtensionChain),
    }
}

/// The extension headers a UPF endpoint interprets, extracted from a chain.
/// Other known types are skipped; unknown ones are skipped unless their
/// comprehension is required (see [`Extensions::parse`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Extensions {
    /// PDU Session Container (N3/N9 G-PDUs, TS 29.281 §5.2.2.7).
    pub psc: Option<PduSessionContainer>,
    /// UDP Port (Error Indication, TS 29.281 §5.2.2.1).
    pub udp_port: Option<u16>,
    /// PDCP PDU Number (TS 29.281 §5.2.2.2).
    pub pdcp_pdu_number: Option<u16>,
}

impl Extensions {
    /// Walk the chain in `buf[offset..]` starting with type `first`, as a
    /// receiving endpoint (TS 29.281 §5.2.1): interpret PSC / UDP Port / PDCP
    /// PDU Number, skip other known types and unknown not-required ones, and
    /// fail with [`Error::UnknownComprehensionRequired`] on an unknown type
    /// with bits 8-7 = `1x`. When a type repeats, the last one wins.
    /// Returns the extensions and the payload offset.
    #[inline(always)] // hot path: keeps the result in registers
    pub fn parse(buf: &[u8], offset: usize, first: u8) -> Result<(Extensions, usize)> {
        let mut ext = Extensions::default();
        let mut off = offset;
        let mut t = first;
        while t != ext_type::NO_MORE {
            let (h, end) = next_ext(buf, off, t)?;
            match t {
                ext_type::PDU_SESSION_CONTAINER => {
                    ext.psc = Some(PduSessionContainer::parse(h.content)?);
                }
                ext_type::UDP_PORT => ext.udp_port = Some(two_octets(h.content)?),
                ext_type::PDCP_PDU_NUMBER => ext.pdcp_pdu_number = Some(two_octets(h.content)?),
                _ if is_known(t) => {}
                _ if Comprehension::of(t).required_by_endpoint() => {
                    return Err(Error::UnknownComprehensionRequired(t));
                }
                _ => {}
            }
            off = end;
            t = h.next_type;
        }
        Ok((ext, off))
    }

    /// True if no extension would be emitted.
    pub const fn is_empty(&self) -> bool {
        self.psc.is_none() && self.udp_port.is_none() && self.pdcp_pdu_number.is_none()
    }

    /// Octets [`Extensions::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        let mut n = 0;
        if self.udp_port.is_some() {
            n += 4;
        }
        if self.pdcp_pdu_number.is_some() {
            n += 4;
        }
        if let Some(p) = &self.psc {
            n += p.ext_len();
        }
        n
    }

    /// First extension type to put in the GTP-U header (0 if none).
    pub const fn first_type(&self) -> u8 {
        if self.udp_port.is_some() {
            ext_type::UDP_PORT
        } else if self.pdcp_pdu_number.is_some() {
            ext_type::PDCP_PDU_NUMBER
        } else if self.psc.is_some() {
            ext_type::PDU_SESSION_CONTAINER
        } else {
            ext_type::NO_MORE
        }
    }

    /// Write the chain (UDP Port, PDCP PDU Number, PSC — in that order) at
    /// the start of `buf`; returns the octets written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < self.buffer_len() {
            return Err(Error::BufferTooSmall);
        }
        let mut off = 0;
        let after_udp = if self.pdcp_pdu_number.is_some() {
            ext_type::PDCP_PDU_NUMBER
        } else if self.psc.is_some() {
            ext_type::PDU_SESSION_CONTAINER
        } else {
            ext_type::NO_MORE
        };
        if let Some(port) = self.udp_port {
            emit_two_octets(buf, off, port, after_udp);
            off += 4;
        }
        let after_pdcp = if self.psc.is_some() {
            ext_type::PDU_SESSION_CONTAINER
        } else {
            ext_type::NO_MORE
        };
        if let Some(n) = self.pdcp_pdu_number {
            emit_two_octets(buf, off, n, after_pdcp);
            off += 4;
        }
        if let Some(p) = &self.psc {
            off += p.emit_ext(buf.get_mut(off..).unwrap_or(&mut []), ext_type::NO_MORE)?;
        }
        Ok(off)
    }
}

/// Content of the fixed 2-octet extensions (UDP Port, PDCP PDU Number): a
/// length-1 extension whose content is exactly the value.
fn two_octets(content: &[u8]) -> Result<u16> {
    match content {
        [a, b] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(Error::BadExtensionContent),
    }
}

fn emit_two_octets(buf: &mut [u8], off: usize, v: u16, next: u8) {
    set_u8(buf, off, 1);
    set_u16(buf, off + 1, v);
    set_u8(buf, off + 3, next);
}

/// PDU Type of the PDU Session Container (TS 38.415 §5.5.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PduType {
    /// 0: DL PDU SESSION INFORMATION (TS 38.415 §5.5.2.1).
    Dl = 0,
    /// 1: UL PDU SESSION INFORMATION (TS 38.415 §5.5.2.2).
    Ul = 1,
}

/// The PDU Session Container fields the UPF acts on (TS 38.415 §5.5.2).
/// Other fields (QMP time stamps, sequence numbers, delay results) are read
/// through [`PduSessionInfo`] and not re-emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PduSessionContainer {
    /// DL or UL PDU SESSION INFORMATION.
    pub pdu_type: PduType,
    /// QoS Flow Identifier, 6 bits (TS 38.415 §5.5.3.3).
    pub qfi: u8,
    /// Paging Policy Indicator, 3 bits; DL only, present iff PPP = 1 (TS 38.415 §5.5.3.7).
    pub ppi: Option<u8>,
    /// Reflective QoS Indicator; DL only (TS 38.415 §5.5.3.4).
    pub rqi: bool,
}

impl PduSessionContainer {
    /// UL PDU SESSION INFORMATION with this QFI.
    pub const fn ul(qfi: u8) -> Self {
        PduSessionContainer {
            pdu_type: PduType::Ul,
            qfi,
            ppi: None,
            rqi: false,
        }
    }

    /// DL PDU SESSION INFORMATION with this QFI, no PPI, RQI off.
    pub const fn dl(qfi: u8) -> Self {
        PduSessionContainer {
            pdu_type: PduType::Dl,
            qfi,
            ppi: None,
            rqi: false,
        }
    }

    /// Parse the extension content (between length and next-type octets).
    /// Lenient: flags and optional fields beyond QFI/PPI/RQI are ignored.
    #[inline(always)]
    pub fn parse(content: &[u8]) -> Result<Self> {
        let info = PduSessionInfo::new(content)?;
        match info.pdu_type() {
            0 => {
                let ppi = if info.ppp() {
                    Some(info.ppi().ok_or(Error::BadExtensionContent)?)
                } else {
                    None
                };
                Ok(PduSessionContainer {
                    pdu_type: PduType::Dl,
                    qfi: info.qfi(),
                    ppi,
                    rqi: info.rqi(),
                })
            }
            1 => Ok(PduSessionContainer::ul(info.qfi())),
            t => Err(Error::BadPduType(t)),
        }
    }

    /// Content octets emitted: 2, or 3 with PPI.
    pub const fn content_len(&self) -> usize {
        if self.ppi.is_some() {
            3
        } else {
            2
        }
    }

    /// Whole extension length in octets, padded to 4: 4 (length 1) without
    /// PPI, 8 (length 2) with PPI (TS 38.415 §5.5.2.1: PPI adds an octet).
    pub const fn ext_len(&self) -> usize {
        if self.ppi.is_some() {
            8
        } else {
            4
        }
    }

    /// Field ranges: QFI <= 63, PPI <= 7, PPI and RQI only on DL.
    pub fn validate(&self) -> Result<()> {
        let bad_ppi = match self.ppi {
            Some(p) => p > 7 || matches!(self.pdu_type, PduType::Ul),
            None => false,
        };
        let bad_rqi = self.rqi && matches!(self.pdu_type, PduType::Ul);
        if self.qfi > 0x3f || bad_ppi || bad_rqi {
            return Err(Error::BadParameter);
        }
        Ok(())
    }

    /// Write the whole extension (length octet, content, zero padding, next
    /// type) at the start of `buf`; returns the octets written.
    pub fn emit_ext(&self, buf: &mut [u8], next_type: u8) -> Result<usize> {
        self.validate()?;
        let n = self.ext_len();
        let Some(out) = buf.get_mut(..n) else {
            return Err(Error::BufferTooSmall);
        };
        out.fill(0);
        set_u8(out, 0, u8::try_from(n / 4).unwrap_or(1));
        match self.pdu_type {
            PduType::Ul => {
                set_u8(out, 1, 0x10);
                set_u8(out, 2, self.qfi);
            }
            PduType::Dl => {
                let ppp = if self.ppi.is_some() { 0x80 } else { 0 };
                let rqi = if self.rqi { 0x40 } else { 0 };
                set_u8(out, 2, ppp | rqi | self.qfi);
                if let Some(ppi) = self.ppi {
                    set_u8(out, 3, ppi << 5);
                }
            }
        }
        set_u8(out, n - 1, next_type);
        Ok(n)
    }
}

/// Lenient read-only view of PDU Session Container content (TS 38.415
/// §5.5.2.1 DL, §5.5.2.2 UL), for the optional fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduSessionInfo<'a> {
    content: &'a [u8],
}

impl<'a> PduSessionInfo<'a> {
    /// Needs at least the two mandatory octets.
    pub fn new(content: &'a [u8]) -> Result<Self> {
        if content.len() < 2 {
            return Err(Error::BadExtensionContent);
        }
        Ok(PduSessionInfo { content })
    }

    fn o1(&self) -> u8 {
        u8_at(self.content, 0)
    }

    fn o2(&self) -> u8 {
        u8_at(self.content, 1)
    }

    fn is_dl(&self) -> bool {
        self.pdu_type() == 0
    }

    /// PDU Type (high nibble of octet 1).
    pub fn pdu_type(&self) -> u8 {
        self.o1() >> 4
    }

    /// QoS Monitoring Packet flag (octet 1 bit 4, DL and UL).
    pub fn qmp(&self) -> bool {
        self.o1() & 0x08 != 0
    }

    /// QFI Sequence Number present: DL octet 1 bit 3, UL octet 1 bit 1.
    pub fn snp(&self) -> bool {
        let bit = if self.is_dl() { 0x04 } else { 0x01 };
        self.o1() & bit != 0
    }

    /// UL: DL Delay Ind (octet 1 bit 3).
    pub fn dl_delay_ind(&self) -> bool {
        !self.is_dl() && self.o1() & 0x04 != 0
    }

    /// UL: UL Delay Ind (octet 1 bit 2).
    pub fn ul_delay_ind(&self) -> bool {
        !self.is_dl() && self.o1() & 0x02 != 0
    }

    /// DL: Paging Policy Presence (octet 2 bit 8).
    pub fn ppp(&self) -> bool {
        self.is_dl() && self.o2() & 0x80 != 0
    }

    /// DL: Reflective QoS Indicator (octet 2 bit 7).
    pub fn rqi(&self) -> bool {
        self.is_dl() && self.o2() & 0x40 != 0
    }

    /// UL: N3/N9 Delay Ind (octet 2 bit 8).
    pub fn n3n9_delay_ind(&self) -> bool {
        !self.is_dl() && self.o2() & 0x80 != 0
    }

    /// QoS Flow Identifier (octet 2, 6 bits), both PDU types.
    pub fn qfi(&self) -> u8 {
        self.o2() & 0x3f
    }

    /// DL: PPI (octet 3 bits 8-6) when PPP is set and the octet is present.
    pub fn ppi(&self) -> Option<u8> {
        if !self.ppp() {
            return None;
        }
        self.content.get(2).map(|o| o >> 5)
    }

    /// DL: DL Sending Time Stamp (NTP format, 8 octets) when QMP is set
    /// and present; follows the PPI octet when PPP is set.
    pub fn dl_sending_timestamp(&self) -> Option<u64> {
        if !self.is_dl() || !self.qmp() {
            return None;
        }
        let off = if self.ppp() { 3 } else { 2 };
        let end = off + 8;
        if self.content.len() < end {
            return None;
        }
        Some(
            (u64::from(u32_at(self.content, off)) << 32) | u64::from(u32_at(self.content, off + 4)),
        )
    }

    /// Raw content (padding included), for fields not decoded here.
    pub fn content(&self) -> &'a [u8] {
        self.content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_is_exactly_the_known_types() {
        let listed: Vec<u8> = (0..=255u8).filter(|&t| is_known(t)).collect();
        assert_eq!(listed, SUPPORTED);
    }

    #[test]
    fn comprehension_bits() {
        assert_eq!(
            Comprehension::of(ext_type::UDP_PORT),
            Comprehension::NotRequiredDiscard
        );
        assert_eq!(
            Comprehension::of(ext_type::SERVICE_CLASS_INDICATOR),
            Comprehension::NotRequired
        );
        assert_eq!(
            Comprehension::of(ext_type::PDU_SESSION_CONTAINER),
            Comprehension::RequiredByEndpoint
        );
        assert_eq!(
            Comprehension::of(ext_type::PDCP_PDU_NUMBER),
            Comprehension::Required
        );
        assert!(!Comprehension::of(0x7f).required_by_endpoint());
        assert!(Comprehension::of(0x86).required_by_endpoint());
    }

    /// scapy 2.8 `GTPPDUSessionContainer(type=1,QFI=9)` → `01 10 09 00`.
    #[test]
    fn psc_ul_vector() {
        let b = [0x01, 0x10, 0x09, 0x00];
        let (e, off) = Extensions::parse(&b, 0, ext_type::PDU_SESSION_CONTAINER).unwrap();
        assert_eq!(off, 4);
        assert_eq!(e.psc, Some(PduSessionContainer::ul(9)));
        let mut out = [0xffu8; 4];
        assert_eq!(PduSessionContainer::ul(9).emit_ext(&mut out, 0), Ok(4));
        assert_eq!(out, b);
    }

    /// scapy 2.8 `GTPPDUSessionContainer(type=0,PPP=1,PPI=5,RQI=1,QFI=5)` →
    /// `02 00 c5 a0 00 00 00 00` (length 2: PPI octet plus padding).
    #[test]
    fn psc_dl_ppi_vector() {
        let b = [0x02, 0x00, 0xc5, 0xa0, 0x00, 0x00, 0x00, 0x00];
        let (e, off) = Extensions::parse(&b, 0, ext_type::PDU_SESSION_CONTAINER).unwrap();
        assert_eq!(off, 8);
        let psc = PduSessionContainer {
            pdu_type: PduType::Dl,
            qfi: 5,
            ppi: Some(5),
            rqi: true,
        };
        assert_eq!(e.psc, Some(psc));
        let mut out = [0xffu8; 8];
        assert_eq!(psc.emit_ext(&mut out, 0), Ok(8));
        assert_eq!(out, b);
        // DL without PPI: `01 00 45 00` (RQI, QFI 5).
        let mut out = [0u8; 4];
        let dl = PduSessionContainer {
            rqi: true,
            ..PduSessionContainer::dl(5)
        };
        assert_eq!(dl.emit_ext(&mut out, 0), Ok(4));
        assert_eq!(out, [0x01, 0x00, 0x45, 0x00]);
    }

    /// TS 38.415 §5.5.2.1 with QMP: DL Sending Time Stamp follows octet 2
    /// (no PPI); the extra octets are parsed leniently.
    #[test]
    fn psc_dl_qmp_lenient() {
        let content = [0x08, 0x07, 1, 2, 3, 4, 5, 6, 7, 8];
        let info = PduSessionInfo::new(&content).unwrap();
        assert!(info.qmp());
        assert_eq!(info.dl_sending_timestamp(), Some(0x0102_0304_0506_0708));
        assert_eq!(
            PduSessionContainer::parse(&content),
            Ok(PduSessionContainer::dl(7))
        );
        // UL with QMP, DL/UL delay ind and SNP set: QFI still read.
        let ul = [0x1f, 0x80 | 0x21, 0, 0];
        assert_eq!(
            PduSessionContainer::parse(&ul),
            Ok(PduSessionContainer::ul(0x21))
        );
        let info = PduSessionInfo::new(&ul).unwrap();
        assert!(info.dl_delay_ind() && info.ul_delay_ind() && info.snp() && info.n3n9_delay_ind());
    }

    #[test]
    fn psc_errors() {
        assert_eq!(
            PduSessionContainer::parse(&[0x20, 0x01]),
            Err(Error::BadPduType(2))
        );
        // PPP set but the PPI octet is missing.
        assert_eq!(
            PduSessionContainer::parse(&[0x00, 0x81]),
            Err(Error::BadExtensionContent)
        );
        assert_eq!(
            PduSessionContainer::parse(&[0x00]),
            Err(Error::BadExtensionContent)
        );
        let mut out = [0u8; 8];
        assert_eq!(
            PduSessionContainer::ul(64).emit_ext(&mut out, 0),
            Err(Error::BadParameter)
        );
        let bad = PduSessionContainer {
            ppi: Some(1),
            ..PduSessionContainer::ul(1)
        };
        assert_eq!(bad.emit_ext(&mut out, 0), Err(Error::BadParameter));
        assert_eq!(
            PduSessionContainer::ul(1).emit_ext(&mut out[..3], 0),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn chain_policy() {
        // UDP Port (0x40) → unknown not-required 0x3f → NR RAN container (known) → PSC.
        let b = [
            0x01, 0x08, 0x68, 0x3f, // UDP Port 2152, next 0x3f
            0x02, 9, 9, 9, 9, 9, 9, 0x84, // unknown 0x3f (skipped), next 0x84
            0x01, 0xaa, 0xbb, 0x85, // NR RAN container (known, skipped), next PSC
            0x01, 0x10, 0x01, 0x00, // PSC UL QFI 1
        ];
        let (e, off) = Extensions::parse(&b, 0, ext_type::UDP_PORT).unwrap();
        assert_eq!(off, b.len());
        assert_eq!(e.udp_port, Some(2152));
        assert_eq!(e.psc, Some(PduSessionContainer::ul(1)));
        let walked: Vec<u8> = ExtIter::new(&b, 0, 0x40)
            .map(|h| h.unwrap().ext_type)
            .collect();
        assert_eq!(walked, [0x40, 0x3f, 0x84, 0x85]);
        // Unknown comprehension-required 0x86 is reported; the iterator walks it.
        let b = [0x01, 0, 0, 0];
        assert_eq!(
            Extensions::parse(&b, 0, 0x86),
            Err(Error::UnknownComprehensionRequired(0x86))
        );
        assert_eq!(ExtIter::new(&b, 0, 0x86).count(), 1);
        // Zero length unit and overrun.
        assert_eq!(
            Extensions::parse(&[0, 0, 0, 0], 0, 0x85),
            Err(Error::BadExtensionChain)
        );
        assert_eq!(
            Extensions::parse(&[2, 0x10, 1, 0], 0, 0x85),
            Err(Error::BadExtensionChain)
        );
        assert_eq!(
            Extensions::parse(&[], 0, 0x85),
            Err(Error::BadExtensionChain)
        );
        let mut it = ExtIter::new(&[0, 0, 0, 0], 0, 0x85);
        assert_eq!(it.next(), Some(Err(Error::BadExtensionChain)));
        assert_eq!(it.next(), None);
        // UDP Port with the wrong size.
        assert_eq!(
            Extensions::parse(&[2, 0, 0, 0, 0, 0, 0, 0], 0, 0x40),
            Err(Error::BadExtensionContent)
        );
    }

    #[test]
    fn emit_roundtrip() {
        let e = Extensions {
            psc: Some(PduSessionContainer {
                ppi: Some(3),
                ..PduSessionContainer::dl(9)
            }),
            udp_port: Some(40000),
            pdcp_pdu_number: Some(77),
        };
        let mut out = [0u8; 16];
        assert_eq!(e.emit(&mut out), Ok(16));
        assert_eq!(Extensions::parse(&out, 0, e.first_type()), Ok((e, 16)));
        assert_eq!(e.emit(&mut out[..15]), Err(Error::BufferTooSmall));
    }
}
