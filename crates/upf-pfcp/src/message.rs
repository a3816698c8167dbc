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
    /// Whether this is a request (Table 7.3-1: node requests have odd types, except Version
    /// Not Supported Response (11); session requests have even ones).
    pub fn is_request(&self) -> bool {
        is_request_type(self.message_type())
    }
}

/// Whether a message type is a request's, TS 29.244 Table 7.3-1: odd up to 10 (Heartbeat …
/// Association Release), then even after Version Not Supported Response (11): Node Report 12,
/// Session Set Deletion 14, Session Set Modification 16, and the session messages from 50.
pub fn is_request_type(t: u8) -> bool {
    match t {
        1..=10 => t % 2 == 1,
        11 => false,
        _ => t.is_multiple_of(2),
    }
}

/// One PFCP message as carried on N4: header and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pdu {
    pub header: Header,
    pub message: Message,
}

impl Pdu {
    /// A single message (no follow-on, no priority): node messages have no SEID, session
    /// messages `Some` (0 in an Establishment Request).
    pub fn new(seid: Option<u64>, sequence: u32, message: impl Into<Message>) -> Self {
        Self {
            header: Header {
                follow_on: false,
                seid,
                sequence,
                priority: None,
            },
            message: message.into(),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::check::hex;
    use crate::ie::*;
    use crate::{Cause, List};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    #[test]
    fn request_types_per_table_7_3_1() {
        let requests: Vec<u8> = (0..=255)
            .filter(|&t| is_request_type(t))
            .filter(|&t| message_name(t) != "Unknown message")
            .collect();
        assert_eq!(requests, [1, 3, 5, 7, 9, 12, 14, 50, 52, 54, 56]);
    }

    #[test]
    fn heartbeat_request_from_scapy() {
        // scapy 2.8: PFCP(seq=5)/PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=3900000000)])
        // (scapy sets S=1 with SEID 0 on node messages by default; decoding keeps what was sent.)
        let b = hex("2101001400000000000000000000050000600004e8754700");
        let (pdu, rest) = Pdu::decode(&b).unwrap();
        assert!(rest.is_empty());
        assert_eq!(pdu.header.sequence, 5);
        assert_eq!(pdu.header.seid, Some(0));
        let Message::HeartbeatRequest(m) = &pdu.message else {
            panic!("{pdu:?}")
        };
        assert_eq!(m.recovery_time_stamp, RecoveryTimeStamp(3_900_000_000));
        assert_eq!(pdu.to_bytes(), b);
    }

    #[test]
    fn association_setup_response_canonical() {
        let m = AssociationSetupResponse {
            node_id: NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 2)),
            cause: Cause::REQUEST_ACCEPTED,
            recovery_time_stamp: RecoveryTimeStamp(1),
            up_function_features: Some(UpFunctionFeatures::FTUP),
            cp_function_features: None,
            user_plane_ip_resource_information: List::new(),
            alternative_smf_ip_addresses: List::new(),
            smf_set_id: None,
            pfcpasrsp_flags: None,
            ue_ip_address_pool_information: List::new(),
        };
        let pdu = Pdu {
            header: Header {
                sequence: 0x0001_0203,
                ..Header::default()
            },
            message: m.into(),
        };
        let b = pdu.to_bytes();
        // Header: version 1, S=0, type 6, length, seq 010203, spare; Node ID IPv4, Cause 1,
        // Recovery Time Stamp 1, UP Function Features with FTUP (octet 5 bit 5), 2 octets.
        let expect = "2006002001020300003c0005000a000002001300010100600004000000010\
                      02b00021000";
        assert_eq!(b, hex(&expect.replace(' ', "")));
        assert_eq!(Pdu::decode(&b).unwrap().0, pdu);
    }

    #[test]
    fn follow_on_datagram_yields_every_message() {
        let a = Pdu {
            header: Header {
                follow_on: true,
                sequence: 1,
                ..Header::default()
            },
            message: HeartbeatRequest {
                recovery_time_stamp: RecoveryTimeStamp(7),
                source_ip_address: None,
            }
            .into(),
        };
        let b = Pdu {
            header: Header {
                seid: Some(9),
                sequence: 2,
                priority: Some(3),
                ..Header::default()
            },
            message: SessionDeletionRequest {}.into(),
        };
        let mut buf = a.to_bytes();
        b.encode(&mut buf);
        let all: Vec<_> = decode_all(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(all, vec![a, b]);
    }

    #[test]
    fn header_errors_keep_what_the_agent_needs() {
        // Version 2: the agent answers Version Not Supported with the request's sequence number.
        let e = Pdu::decode(&hex("4001000c0000070000600004e8754700")).unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::UnsupportedVersion);
        assert_eq!(e.header.map(|h| h.sequence), Some(7));
        // Length field past the datagram: invalid length, no header.
        let e = Pdu::decode(&hex("200100ff000007")).unwrap_err();
        assert_eq!(e.error.cause(), Cause::INVALID_LENGTH);
        // Unknown message type: header kept, service not supported.
        let e = Pdu::decode(&hex("20630004000008 00".replace(' ', "").as_str())).unwrap_err();
        assert_eq!(
            (e.message_type, e.error.kind()),
            (Some(0x63), ErrorKind::UnknownMessage)
        );
        // A session message missing its mandatory F-SEID names IE 57.
        let e =
            Pdu::decode(&hex("21320015000000000000000100000100003c0005000a000001")).unwrap_err();
        assert_eq!(
            (e.error.cause(), e.error.offending_ie()),
            (Cause::MANDATORY_IE_MISSING, Some(57))
        );
        for n in 0..8 {
            assert!(Pdu::decode(&hex("2001000c000001000060000400000001")[..n]).is_err());
        }
    }

    /// Runs `f` on a thread with a large stack: generated session messages nest deeply.
    fn with_big_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn every_message_roundtrips() {
        with_big_stack(|| {
            let mut runner =
                proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(256));
            runner
                .run(&(any::<Header>(), any::<Message>()), |(header, message)| {
                    let pdu = Pdu { header, message };
                    let bytes = pdu.to_bytes();
                    let (back, rest) =
                        Pdu::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(rest.is_empty());
                    prop_assert_eq!(&back, &pdu);
                    prop_assert_eq!(back.to_bytes(), bytes);
                    Ok(())
                })
                .unwrap();
        });
    }

    #[test]
    fn garbage_and_truncations_never_panic() {
        with_big_stack(|| {
            let mut runner =
                proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(256));
            runner
                .run(
                    &(any::<Message>(), any::<Vec<u8>>()),
                    |(message, garbage)| {
                        for _ in decode_all(&garbage) {}
                        let bytes = Pdu {
                            header: Header::default(),
                            message,
                        }
                        .to_bytes();
                        for n in 0..bytes.len() {
                            for _ in decode_all(&bytes[..n]) {}
                        }
                        Ok(())
                    },
                )
                .unwrap();
        });
    }
}
