//! Parse/emit errors. Each variant is a distinct drop reason: the data path
//! keeps one counter per [`Error::index`].

use core::fmt;

/// Why a packet was rejected (or could not be built).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before a header, or before the length a header declares.
    Truncated,
    /// Version field is not the one this view decodes (GTP-U 1, IPv4 4, IPv6 6).
    BadVersion,
    /// GTP-U Protocol Type bit is 0 (GTP', TS 29.281 §5.1).
    BadProtocolType,
    /// A length field is internally inconsistent (e.g. IPv4 IHL < 5, total
    /// length < header length, UDP length < 8, GTP-U length too small for
    /// the optional fields).
    BadLength,
    /// Extension header chain malformed: zero length unit (TS 29.281 §5.2.1),
    /// chain running past the packet, or too many IPv6 extension headers.
    BadExtensionChain,
    /// Unknown GTP-U extension header whose comprehension is required
    /// (TS 29.281 §5.2.1, type bits 8-7 = `1x`). The receiver should send a
    /// Supported Extension Headers Notification (TS 29.281 §7.2.3).
    UnknownComprehensionRequired(u8),
    /// A known extension header has content of the wrong size.
    BadExtensionContent,
    /// PDU Session Container PDU type is neither DL (0) nor UL (1)
    /// (TS 38.415 §5.5.3.1).
    BadPduType(u8),
    /// Checksum verification failed.
    BadChecksum,
    /// A signalling IE is malformed (bad length, unknown TV type whose length
    /// cannot be known, TS 29.281 §8.1).
    BadIe,
    /// A mandatory IE of a signalling message is absent (TS 29.281 §7.3).
    MissingIe,
    /// The GTP-U message type is not the one the operation expects.
    UnexpectedMessageType(u8),
    /// The outer packet is not UDP.
    NotUdp,
    /// The outer IPv4 packet is a fragment: reassemble before decapsulating.
    Fragmented,
    /// IPv4 TTL or IPv6 Hop Limit would reach 0 on forwarding.
    TtlExpired,
    /// Encapsulation: not enough headroom in front of the payload.
    NoHeadroom,
    /// Emit: the output buffer is too small, or the result would not fit the
    /// 16-bit length fields.
    BufferTooSmall,
    /// A parameter passed to an emitter is out of range (e.g. QFI > 63).
    BadParameter,
}

/// Result alias used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;

impl Error {
    /// Number of distinct counter slots ([`Error::index`] is `< COUNT`).
    pub const COUNT: usize = 18;

    /// Dense index for a per-reason drop counter array. Variants carrying a
    /// value share one slot.
    pub const fn index(self) -> usize {
        match self {
            Error::Truncated => 0,
            Error::BadVersion => 1,
            Error::BadProtocolType => 2,
            Error::BadLength => 3,
            Error::BadExtensionChain => 4,
            Error::UnknownComprehensionRequired(_) => 5,
            Error::BadExtensionContent => 6,
            Error::BadPduType(_) => 7,
            Error::BadChecksum => 8,
            Error::BadIe => 9,
            Error::MissingIe => 10,
            Error::UnexpectedMessageType(_) => 11,
            Error::NotUdp => 12,
            Error::Fragmented => 13,
            Error::TtlExpired => 14,
            Error::NoHeadroom => 15,
            Error::BufferTooSmall => 16,
            Error::BadParameter => 17,
        }
    }

    /// Stable snake_case name, for counter labels.
    pub const fn name(self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::BadVersion => "bad_version",
            Error::BadProtocolType => "bad_protocol_type",
            Error::BadLength => "bad_length",
            Error::BadExtensionChain => "bad_extension_chain",
            Error::UnknownComprehensionRequired(_) => "unknown_comprehension_required",
            Error::BadExtensionContent => "bad_extension_content",
            Error::BadPduType(_) => "bad_pdu_type",
            Error::BadChecksum => "bad_checksum",
            Error::BadIe => "bad_ie",
            Error::MissingIe => "missing_ie",
            Error::UnexpectedMessageType(_) => "unexpected_message_type",
            Error::NotUdp => "not_udp",
            Error::Fragmented => "fragmented",
            Error::TtlExpired => "ttl_expired",
            Error::NoHeadroom => "no_headroom",
            Error::BufferTooSmall => "buffer_too_small",
            Error::BadParameter => "bad_parameter",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownComprehensionRequired(t) => {
                write!(
                    f,
                    "unknown comprehension-required extension header 0x{t:02x}"
                )
            }
            Error::BadPduType(t) => write!(f, "bad PDU session container PDU type {t}"),
            Error::UnexpectedMessageType(t) => write!(f, "unexpected GTP-U message type {t}"),
            other => f.write_str(other.name()),
        }
    }
}

impl core::error::Error for Error {}
