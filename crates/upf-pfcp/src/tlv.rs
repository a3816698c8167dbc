//! The IE TLV layer, TS 29.244 §8.1.1: a cursor over IEs that cannot panic, a reader for the
//! fixed fields inside an IE, and writers that back-patch lengths.

use crate::error::DecodeError;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IE types with bit 16 set are vendor-specific and carry a 2-octet Enterprise ID (§8.1.1).
pub const VENDOR_SPECIFIC_BIT: u16 = 0x8000;

/// One IE as found on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawIe<'a> {
    pub ie_type: u16,
    pub enterprise_id: Option<u16>,
    pub value: &'a [u8],
}

/// Iterates the IEs of a message body or grouped IE. Yields an error (then stops) if an IE
/// header or value runs past the end of the buffer.
#[derive(Debug, Clone)]
pub struct TlvIter<'a> {
    rest: &'a [u8],
}

impl<'a> TlvIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }
    /// The octets not iterated yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<RawIe<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = split_ie(self.rest);
        match item {
            Ok((ie, rest)) => {
                self.rest = rest;
                Some(Ok(ie))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

fn split_ie(buf: &[u8]) -> Result<(RawIe<'_>, &[u8]), DecodeError> {
    let [t0, t1, l0, l1, ref rest @ ..] = *buf else {
        return Err(DecodeError::invalid_length("IE header truncated"));
    };
    let ie_type = u16::from_be_bytes([t0, t1]);
    let len = usize::from(u16::from_be_bytes([l0, l1]));
    let bad_len =
        |_| DecodeError::invalid_length("IE length runs past its container").within(ie_type);
    let (value, rest) = rest.split_at_checked(len).ok_or(()).map_err(bad_len)?;
    if ie_type & VENDOR_SPECIFIC_BIT != 0 {
        let [e0, e1, ref value @ ..] = *value else {
            return Err(
                DecodeError::invalid_length("vendor IE without Enterprise ID").within(ie_type),
            );
        };
        let enterprise_id = Some(u16::from_be_bytes([e0, e1]));
        return Ok((
            RawIe {
                ie_type,
                enterprise_id,
                value,
            },
            rest,
        ));
    }
    Ok((
        RawIe {
            ie_type,
            enterprise_id: None,
            value,
        },
        rest,
    ))
}

/// Calls `f` with the type of each IE of `buf` whose header and value are complete, up to the
/// first that is not: a walk over the IE headers alone, for counting (vendor-specific types
/// have bit 16 set, so they never equal a type of the specification).
#[inline]
pub(crate) fn for_each_type(buf: &[u8], mut f: impl FnMut(u16)) {
    let mut rest = buf;
    while let [t0, t1, l0, l1, ref tail @ ..] = *rest {
        let Some((_, tail)) = tail.split_at_checked(usize::from(u16::from_be_bytes([l0, l1])))
        else {
            break;
        };
        f(u16::from_be_bytes([t0, t1]));
        rest = tail;
    }
}

/// How many well-formed, non-vendor IEs of type `ie_type` lead `buf` (stops at a malformed one).
pub fn count(buf: &[u8], ie_type: u16) -> usize {
    TlvIter::new(buf)
        .map_while(Result::ok)
        .filter(|ie| ie.ie_type == ie_type && ie.enterprise_id.is_none())
        .count()
}

/// Reads the fixed fields of one IE value front to back; every read checks the length.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

const SHORT: DecodeError = DecodeError::invalid_length("IE value shorter than its fields");

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let (head, tail) = self.buf.split_at_checked(n).ok_or(SHORT)?;
        self.buf = tail;
        Ok(head)
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, tail) = self.buf.split_first_chunk::<N>().ok_or(SHORT)?;
        self.buf = tail;
        Ok(*head)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_be_bytes)
    }
    pub fn u24(&mut self) -> Result<u32, DecodeError> {
        let [a, b, c] = self.array()?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }
    /// A 40-bit unsigned integer (e.g. bit rates in kbps, TS 29.244 §8.2.8).
    pub fn u40(&mut self) -> Result<u64, DecodeError> {
        let [a, b, c, d, e] = self.array()?;
        Ok(u64::from_be_bytes([0, 0, 0, a, b, c, d, e]))
    }
    pub fn ipv4(&mut self) -> Result<Ipv4Addr, DecodeError> {
        self.array::<4>().map(Ipv4Addr::from)
    }
    pub fn ipv6(&mut self) -> Result<Ipv6Addr, DecodeError> {
        self.array::<16>().map(Ipv6Addr::from)
    }
    /// A field of `len` octets that is present only when `flag` is set.
    pub fn u8_if(&mut self, flag: bool) -> Result<Option<u8>, DecodeError> {
        flag.then(|| self.u8()).transpose()
    }
    pub fn u16_if(&mut self, flag: bool) -> Result<Option<u16>, DecodeError> {
        flag.then(|| self.u16()).transpose()
    }
    pub fn u32_if(&mut self, flag: bool) -> Result<Option<u32>, DecodeError> {
        flag.then(|| self.u32()).transpose()
    }
    pub fn ipv4_if(&mut self, flag: bool) -> Result<Option<Ipv4Addr>, DecodeError> {
        flag.then(|| self.ipv4()).transpose()
    }
    pub fn ipv6_if(&mut self, flag: bool) -> Result<Option<Ipv6Addr>, DecodeError> {
        flag.then(|| self.ipv6()).transpose()
    }
}

/// Appends one IE: type, a length back-patched once `value` has written the value.
pub fn put_ie(out: &mut Vec<u8>, ie_type: u16, value: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(&ie_type.to_be_bytes());
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    value(out);
    patch_len(out, len_at);
}

/// Writes into `out[at..at+2]` the number of octets that follow it.
pub(crate) fn patch_len(out: &mut [u8], at: usize) {
    // A PFCP message is carried in one UDP datagram, so lengths fit 16 bits; saturate rather
    // than panic if a caller builds something larger (the peer will reject it).
    let len = u16::try_from(out.len() - at - 2).unwrap_or(u16::MAX);
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
}

/// A 40-bit big-endian integer; the upper bits of `v` are dropped.
pub fn put_u40(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes()[3..]);
}

/// A 24-bit big-endian integer; the upper bits of `v` are dropped.
pub fn put_u24(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes()[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_and_skips_vendor_ies() {
        // Source: hand-built per TS 29.244 §8.1.1 (vendor IE 0x8001, Enterprise ID 10415).
        let buf = [
            0x00, 0x38, 0x00, 0x02, 0x00, 0x01, 0x80, 0x01, 0x00, 0x03, 0x28, 0xaf, 0x07,
        ];
        let ies: Vec<_> = TlvIter::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(ies.len(), 2);
        assert_eq!(
            ies[0],
            RawIe {
                ie_type: 56,
                enterprise_id: None,
                value: &[0, 1]
            }
        );
        assert_eq!(ies[1].enterprise_id, Some(10415));
        assert_eq!(ies[1].value, &[7]);
    }

    #[test]
    fn overlong_length_is_an_error_not_a_panic() {
        let buf = [0x00, 0x38, 0x00, 0x09, 0x00];
        let e = TlvIter::new(&buf).next().unwrap().unwrap_err();
        assert_eq!(e.offending_ie(), Some(56));
        assert!(TlvIter::new(&[0x00, 0x38, 0x00]).next().unwrap().is_err());
    }

    #[test]
    fn reader_checks_every_read() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0102);
        assert!(r.u16().is_err());
        assert_eq!(r.u8().unwrap(), 3);
        assert!(r.u8().is_err());
    }
}
