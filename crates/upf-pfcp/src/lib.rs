//! PFCP (TS 29.244) messages and information elements: typed, complete, lenient on input,
//! canonical on output, and unable to panic on anything the network sends.
//!
//! Layers, bottom up: [`tlv`] (IE framing), [`codec`] (the `IeValue` trait and the macros that
//! define IEs), [`ie`] (every IE, one module per family), [`messages`] (message bodies),
//! [`header`] and [`message`] (whole messages).
#![forbid(unsafe_code)]

pub mod cause;
pub mod codec;
pub mod error;
pub mod header;
pub mod ie;
pub mod message;
pub mod messages;
pub mod tlv;

pub use cause::Cause;
pub use codec::{IeValue, List, Multi};
pub use error::{DecodeError, ErrorKind};
pub use header::Header;
pub use message::{decode_all, is_request_type, message_name, Message, MessageError, Pdu};
