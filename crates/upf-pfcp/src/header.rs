//! The PFCP message header, TS 29.244 §7.2.2.

use crate::error::{DecodeError, ErrorKind};
use crate::tlv::Reader;
use serde::Serialize;

/// The only PFCP version (TS 29.244 §7.2.2.1).
pub const PFCP_VERSION: u8 = 1;

/// Header fields other than the message type and length, which follow from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Header {
    /// FO: another PFCP message follows in the same datagram (Rel-15).
    pub follow_on: bool,
    /// Present (S = 1) for session-related messages.
    pub seid: Option<u64>,
    /// 24-bit sequence number; the upper 8 bits are not sent.
    #[cfg_attr(test, proptest(strategy = "0u32..1 << 24"))]
    pub sequence: u32,
    /// MP = 1: message priority, 0 (highest) ..= 15, in the upper nibble of the last octet.
    #[cfg_attr(test, proptest(strategy = "proptest::option::of(0u8..16)"))]
    pub priority: Option<u8>,
}

/// The parsed fixed part of a message: its header, type and the octets of its IEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMessage<'a> {
    pub version: u8,
    pub message_type: u8,
    pub header: Header,
    pub body: &'a [u8],
}

impl<'a> RawMessage<'a> {
    /// Splits the first message off `buf`; returns it and what follows it (the next message of
    /// a follow-on datagram, or trailing octets the caller must not ignore silently).
    pub fn split(buf: &'a [u8]) -> Result<(Self, &'a [u8]), DecodeError> {
        let mut r = Reader::new(buf);
        let flags = r
            .u8()
            .map_err(|_| DecodeError::invalid_length("PFCP header truncated"))?;
        let message_type = r
            .u8()
            .map_err(|_| DecodeError::invalid_length("PFCP header truncated"))?;
        let length = usize::from(
            r.u16()
                .map_err(|_| DecodeError::invalid_length("PFCP header truncated"))?,
        );
        let version = flags >> 5;
        let follow_on = flags & 0x04 != 0;
        let mp = flags & 0x02 != 0;
        let s = flags & 0x01 != 0;
        let fixed = if s { 12 } else { 4 };
        if length < fixed {
            return Err(DecodeError::invalid_length(
                "PFCP message length shorter than its header",
            ));
        }
        let mut m = Reader::new(r.bytes(length).map_err(|_| {
            DecodeError::invalid_length("PFCP message length exceeds the datagram")
        })?);
        let rest = r.rest();
        let seid = m.u64_if(s)?;
        let sequence = m.u24()?;
        let last = m.u8()?;
        let priority = mp.then_some(last >> 4);
        let header = Header {
            follow_on,
            seid,
            sequence,
            priority,
        };
        Ok((
            Self {
                version,
                message_type,
                header,
                body: m.rest(),
            },
            rest,
        ))
    }
}

impl Header {
    /// Writes the header with a zero length; `finish` patches it once the body is written.
    pub(crate) fn encode_start(&self, message_type: u8, out: &mut Vec<u8>) -> usize {
        let flags = (PFCP_VERSION << 5)
            | (u8::from(self.follow_on) << 2)
            | (u8::from(self.priority.is_some()) << 1)
            | u8::from(self.seid.is_some());
        let start = out.len();
        out.extend_from_slice(&[flags, message_type, 0, 0]);
        if let Some(seid) = self.seid {
            out.extend_from_slice(&seid.to_be_bytes());
        }
        crate::tlv::put_u24(out, self.sequence);
        out.push(self.priority.map_or(0, |p| (p & 0x0f) << 4));
        start
    }
}

impl Reader<'_> {
    fn u64_if(&mut self, flag: bool) -> Result<Option<u64>, DecodeError> {
        flag.then(|| self.u64()).transpose()
    }
}

impl RawMessage<'_> {
    /// Checks the version; a message of another version gets Version Not Supported.
    pub fn check_version(&self) -> Result<(), DecodeError> {
        if self.version == PFCP_VERSION {
            Ok(())
        } else {
            Err(DecodeError::new(
                ErrorKind::UnsupportedVersion,
                "PFCP version is not 1",
            ))
        }
    }
}
