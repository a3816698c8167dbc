//! Whole PFCP messages: the `Message` enum over every message body, and `Pdu` (header +
//! message) with decode/encode. TS 29.244 §7.

use crate::error::{DecodeError, ErrorKind};
use crate::header::{Header, RawMessage};
use crate::messages::*;
use serde::Serialize;

/// Why a datagram could not be decoded, with as much of the header as was readable so that the
/// agent can still answer (the sequence number, SEID and message type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MessageError {
    pub message_type: Option<u8>,
    pub header: Option<Header>,
    pub error: DecodeError,
}

impl core::fmt::Display for MessageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.message_type {
            Some(t) => write!(f, "{} ({t}): {}", message_name(t), self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for MessageError {}

macro_rules! messages {
    ($( $(#[$meta:meta])* $name:ident = $code:literal, $text:literal; )*) => {
        /// Every PFCP message body this codec knows, TS 29.244 §7.3 Table 7.3-1.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        #[allow(clippy::large_enum_variant)]
        pub enum Message {
            $( $(#[$meta])* $name($name), )*
        }

        impl Message {
            /// The message type octet.
            pub fn message_type(&self) -> u8 {
                match self { $( Self::$name(_) => $code, )* }
            }

            /// Decodes a body of the given message type.
            pub fn decode_body(message_type: u8, body: &[u8]) -> Result<Self, DecodeError> {
                match message_type {
                    $( $code => <$name as crate::codec::IeValue>::decode(body).map(Self::$name), )*
                    _ => Err(DecodeError::new(ErrorKind::UnknownMessage, "unknown message type")),
                }
            }

            /// Appends the IEs of the body.
            pub fn encode_body(&self, out: &mut Vec<u8>) {
                match self { $( Self::$name(m) => crate::codec::IeValue::encode(m, out), )* }
            }
        }

        $( impl From<$name> for Message {
            fn from(m: $name) -> Self { Self::$name(m) }
        } )*

        /// The specification's name of a message type.
        pub fn message_name(message_type: u8) -> &'static str {
            match message_type { $( $code => $text, )* _ => "Unknown message" }
        }
    };
}

messages! {
    HeartbeatRequest = 1, "Heartbeat Request";
    HeartbeatResponse = 2, "Heartbeat Response";
    PfdManagementRequest = 3, "PFD Management Request";
    PfdManagementResponse = 4, "PFD Management Response";
    AssociationSetupRequest = 5, "Association Setup Request";
    AssociationSetupResponse = 6, "Association Setup Response";
    AssociationUpdateRequest = 7, "Association Update Request";
    AssociationUpdateResponse = 8, "Association Update Response";
    AssociationReleaseRequest = 9, "Association Release Request";
    AssociationReleaseResponse = 10, "Association Release Response";
    VersionNotSupportedResponse = 11, "Version Not Supported Response";
    NodeReportRequest = 12, "Node Report Request";
    NodeReportResponse = 13, "Node Report Response";
    SessionSetDeletionRequest = 14, "Session Set Deletion Request";
    SessionSetDeletionResponse = 15, "Session Set Deletion Response";
    SessionEstablishmentRequest = 50, "Session Establishment Request";
    SessionEstablishmentResponse = 51, "Session Establishment Response";
    SessionModificationRequest = 52, "Session Modification Request";
    SessionModificationResponse = 53, "Session Modification Response";
    SessionDeletionRequest = 54, "Session Deletion Request";
    SessionDeletionResponse = 55, "Session Deletion Response";
    SessionReportRequest = 56, "Session Report Request";
    SessionReportResponse = 57, "Session Report Response";
}

impl Message {
    /// Session-related messages carry a SEID in their header (S = 1, TS 29.244 §7.2.2.1).
    pub fn is_session_message(&self) -> bool {
        self.message_type() >= 50
    }
    /// Requests have odd message types, except Version Not Supported Response (11).
    pub fn is_request(&self) -> bool {
        let t = self.message_type();
        t % 2 == 1 && t != 11
    }
}

/// One PFCP message as carried on N4: header and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pdu {
    pub header: Header,
    pub message: Message,
}

impl Pdu {
    /// Decodes the first message in `buf` and returns it with the octets that follow it.
    /// A datagram may hold several messages (FO flag, TS 29.244 §7.2.2.1): use `decode_all`.
    pub fn decode(buf: &[u8]) -> Result<(Self, &[u8]), MessageError> {
        let (raw, rest) = RawMessage::split(buf).map_err(|error| MessageError {
            message_type: buf.get(1).copied(),
            header: None,
            error,
        })?;
        let fail = |error| MessageError {
            message_type: Some(raw.message_type),
            header: Some(raw.header),
            error,
        };
        raw.check_version().map_err(fail)?;
        let message = Message::decode_body(raw.message_type, raw.body).map_err(fail)?;
        Ok((
            Self {
                header: raw.header,
                message,
            },
            rest,
        ))
    }

    /// Encodes header and body; the message type, length and S flag follow from the fields.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = self.header.encode_start(self.message.message_type(), out);
        self.message.encode_body(out);
        crate::tlv::patch_len(out, start + 2);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.encode(&mut out);
        out
    }
}

/// Decodes every message of a datagram in order. Stops after the first error, since the
/// position of anything after a malformed header is unknown.
pub fn decode_all(buf: &[u8]) -> impl Iterator<Item = Result<Pdu, MessageError>> + '_ {
    let mut rest = buf;
    core::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match Pdu::decode(rest) {
            Ok((pdu, tail)) => {
                rest = tail;
                Some(Ok(pdu))
            }
            Err(e) => {
                rest = &[];
                Some(Err(e))
            }
        }
    })
}
