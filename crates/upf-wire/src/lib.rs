//! `upf-wire`: the hot-path packet codec of the UPF.
//!
//! Zero-copy views in the style of smoltcp: every protocol has a
//! `Packet<T: AsRef<[u8]>>` whose `new_checked` validates all lengths once,
//! after which fixed-offset accessors read the buffer directly, plus a `Repr`
//! with `parse`/`emit` where a high-level form is useful.
//!
//! Guarantees, relied on by the data path and checked by proptests and fuzzing:
//! - no `unsafe` (`forbid`), no heap allocation (the library is `no_std`
//!   without `alloc`), no panics on any input: byte reads go through total
//!   helpers (`bytes.rs`) that return 0 out of range, and every offset derived
//!   from input is bounds-checked with `get`.
//! - every rejection is a precise [`Error`] variant, usable as a drop counter
//!   index via [`Error::index`].
//!
//! Modules: [`gtpu`] (TS 29.281 §5.1 header), [`ext`] (TS 29.281 §5.2
//! extension headers, TS 38.415 §5.5.2 PDU Session Container), [`gtpu_msg`]
//! (TS 29.281 §7/§8 signalling messages and IEs), [`ipv4`], [`ipv6`], [`udp`],
//! [`icmp`], [`checksum`], [`flow`] (5-tuple and steering hash), [`encap`]
//! (in-place GTP-U encapsulation/decapsulation using headroom).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bytes;
pub mod checksum;
pub mod encap;
mod error;
pub mod ext;
pub mod flow;
pub mod gtpu;
pub mod gtpu_msg;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
#[cfg(test)]
mod test_util;
pub mod udp;

pub use error::{Error, Result};

/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers") used here.
pub mod ip_proto {
    /// IPv6 Hop-by-Hop Options (RFC 8200 §4.3).
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP for IPv4 (RFC 792).
    pub const ICMP: u8 = 1;
    /// TCP (RFC 9293).
    pub const TCP: u8 = 6;
    /// UDP (RFC 768).
    pub const UDP: u8 = 17;
    /// IPv6 Routing Header (RFC 8200 §4.4).
    pub const IPV6_ROUTING: u8 = 43;
    /// IPv6 Fragment Header (RFC 8200 §4.5).
    pub const IPV6_FRAGMENT: u8 = 44;
    /// Encapsulating Security Payload (RFC 4303).
    pub const ESP: u8 = 50;
    /// Authentication Header (RFC 4302).
    pub const AH: u8 = 51;
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: u8 = 58;
    /// IPv6 No Next Header (RFC 8200 §4.7).
    pub const IPV6_NO_NEXT: u8 = 59;
    /// IPv6 Destination Options (RFC 8200 §4.6).
    pub const IPV6_DEST_OPTS: u8 = 60;
    /// Mobility Header (RFC 6275).
    pub const MOBILITY: u8 = 135;
    /// SCTP (RFC 9260).
    pub const SCTP: u8 = 132;
    /// UDP-Lite (RFC 3828).
    pub const UDPLITE: u8 = 136;
    /// Host Identity Protocol (RFC 7401).
    pub const HIP: u8 = 139;
    /// Shim6 (RFC 5533).
    pub const SHIM6: u8 = 140;
}
