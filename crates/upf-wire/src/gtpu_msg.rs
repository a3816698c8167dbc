//! GTP-U signalling messages (TS 29.281 §7) and their IEs (TS 29.281 §8).
//!
//! IEs with type < 128 are TV with a length fixed by type; those >= 128 are
//! TLV with a 2-octet length (TS 29.281 §8.1), except the Extension Header
//! Type List whose length is 1 octet (TS 29.281 §8.5).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{array_at, set_bytes, set_u16, set_u32, set_u8, u16_at, u32_at, u8_at};
use crate::ext::Extensions;
use crate::gtpu::{self, MessageType, Packet};
use crate::{Error, Result};

/// IE type values (TS 29.281 §8.1, Table 8.1-1).
pub mod ie_type {
    /// Recovery, TV, 1-octet value (§8.2).
    pub const RECOVERY: u8 = 14;
    /// Tunnel Endpoint Identifier Data I, TV, 4-octet value (§8.3).
    pub const TEID_DATA_I: u8 = 16;
    /// GTP-U Peer Address, TLV, 4 or 16 octets (§8.4).
    pub const GTPU_PEER_ADDRESS: u8 = 133;
    /// Extension Header Type List, TLV with 1-octet length (§8.5).
    pub const EXT_HEADER_TYPE_LIST: u8 = 141;
    /// Private Extension, TLV (§8.6).
    pub const PRIVATE_EXTENSION: u8 = 255;
}

/// One decoded IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ie<'a> {
    /// Recovery (restart counter; 0 and ignored in GTP-U Echo Response, §8.2).
    Recovery(u8),
    /// TEID Data I.
    TeidDataI(u32),
    /// GTP-U Peer Address.
    PeerAddress(IpAddr),
    /// Extension Header Type List: the extension types.
    ExtHeaderTypeList(&'a [u8]),
    /// Private Extension: Extension Identifier (IANA enterprise number) and value.
    PrivateExtension {
        /// Extension Identifier.
        enterprise_id: u16,
        /// Extension Value.
        value: &'a [u8],
    },
    /// A TLV IE this crate does not decode.
    Unknown {
        /// IE type (>= 128).
        ie_type: u8,
        /// Value octets.
        value: &'a [u8],
    },
}

/// Iterator over the IEs of a signalling message body. Yields one `Err`
/// (and then ends) on a malformed IE: an overrun, a bad length, or an
/// unknown TV type, whose length cannot be known (TS 29.281 §8.1).
#[derive(Debug, Clone)]
pub struct IeIter<'a> {
    buf: &'a [u8],
    off: usize,
    failed: bool,
}

impl<'a> IeIter<'a> {
    /// Iterate over `buf` (the message payload after the GTP-U header and extensions).
    pub const fn new(buf: &'a [u8]) -> Self {
        IeIter {
            buf,
            off: 0,
            failed: false,
        }
    }

    fn step(&mut self) -> Result<Ie<'a>> {
        let b = self.buf;
        let off = self.off;
        let t = u8_at(b, off);
        let (ie, len) = match t {
            ie_type::RECOVERY => (Ie::Recovery(u8_at(b, off + 1)), 2),
            ie_type::TEID_DATA_I => (Ie::TeidDataI(u32_at(b, off + 1)), 5),
            0..=127 => return Err(Error::BadIe),
            ie_type::EXT_HEADER_TYPE_LIST => {
                let n = usize::from(u8_at(b, off + 1));
                let v = b.get(off + 2..off + 2 + n).ok_or(Error::BadIe)?;
                (Ie::ExtHeaderTypeList(v), 2 + n)
            }
            _ => {
                if off + 3 > b.len() {
                    return Err(Error::BadIe);
                }
                let n = usize::from(u16_at(b, off + 1));
                let v = b.get(off + 3..off + 3 + n).ok_or(Error::BadIe)?;
                let ie = match t {
                    ie_type::GTPU_PEER_ADDRESS => match v.len() {
                        4 => Ie::PeerAddress(IpAddr::V4(Ipv4Addr::from(array_at::<4>(v, 0)))),
                        16 => Ie::PeerAddress(IpAddr::V6(Ipv6Addr::from(array_at::<16>(v, 0)))),
                        _ => return Err(Error::BadIe),
                    },
                    ie_type::PRIVATE_EXTENSION => match v {
                        [a, c, value @ ..] => Ie::PrivateExtension {
                            enterprise_id: u16::from_be_bytes([*a, *c]),
                            value,
                        },
                        _ => return Err(Error::BadIe),
                    },
                    _ => Ie::Unknown {
                        ie_type: t,
                        value: v,
                    },
                };
                (ie, 3 + n)
            }
        };
        if off + len > b.len() {
            return Err(Error::BadIe);
        }
        self.off = off + len;
        Ok(ie)
    }
}

impl<'a> Iterator for IeIter<'a> {
    type Item = Result<Ie<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.off >= self.buf.len() {
            return None;
        }
        let r = self.step();
        self.failed = r.is_err();
        Some(r)
    }
}

/// A decoded GTP-U message body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// Echo Request (§7.2.1); its optional Private Extension is ignored.
    EchoRequest,
    /// Echo Response (§7.2.2). Recovery is mandatory but its value is to be
    /// ignored (§8.2), so an absent one reads as 0 rather than failing.
    EchoResponse {
        /// Recovery value.
        recovery: u8,
    },
    /// Error Indication (§7.3.1): TEID Data I and GTP-U Peer Address are mandatory.
    ErrorIndication {
        /// TEID of the G-PDU that could not be delivered.
        teid_data_i: u32,
        /// Address of the entity that sent it.
        peer_addr: IpAddr,
    },
    /// Supported Extension Headers Notification (§7.2.3).
    SupportedExtHeadersNotification {
        /// Extension header types the peer supports.
        ext_types: &'a [u8],
    },
    /// End Marker (§7.3.2).
    EndMarker,
    /// G-PDU: the T-PDU.
    GPdu {
        /// The T-PDU (inner packet).
        payload: &'a [u8],
    },
}

impl<'a> Message<'a> {
    /// Decode a whole GTP-U message: header (with the endpoint extension
    /// policy) and body. Unknown message types give
    /// [`Error::UnexpectedMessageType`].
    pub fn parse(buf: &'a [u8]) -> Result<(gtpu::Repr, Message<'a>)> {
        let (repr, body) = gtpu::decode(buf)?;
        let ies = || IeIter::new(body);
        let msg = match repr.msg_type {
            MessageType::GPdu => Message::GPdu { payload: body },
            MessageType::EchoRequest => Message::EchoRequest,
            MessageType::EndMarker => Message::EndMarker,
            MessageType::EchoResponse => {
                let mut recovery = 0;
                for ie in ies() {
                    if let Ie::Recovery(r) = ie? {
                        recovery = r;
                    }
                }
                Message::EchoResponse { recovery }
            }
            MessageType::ErrorIndication => {
                let (mut teid, mut peer) = (None, None);
                for ie in ies() {
                    match ie? {
                        Ie::TeidDataI(t) => teid = Some(t),
                        Ie::PeerAddress(a) => peer = Some(a),
                        _ => {}
                    }
                }
                match (teid, peer) {
                    (Some(teid_data_i), Some(peer_addr)) => Message::ErrorIndication {
                        teid_data_i,
                        peer_addr,
                    },
                    _ => return Err(Error::MissingIe),
                }
            }
            MessageType::SupportedExtHeadersNotification => {
                let mut list = None;
                for ie in ies() {
                    if let Ie::ExtHeaderTypeList(l) = ie? {
                        list = Some(l);
                    }
                }
                Message::SupportedExtHeadersNotification {
                    ext_types: list.ok_or(Error::MissingIe)?,
                }
            }
            MessageType::Unknown(t) => return Err(Error::UnexpectedMessageType(t)),
        };
        Ok((repr, msg))
    }
}

/// Emit a header with S = 1 (required for Echo, Error Indication and
/// Supported Extension Headers Notification, TS 29.281 §5.1), TEID 0 unless
/// given, and `body_len` octets of IEs to follow; returns the header length.
fn emit_header(
    buf: &mut [u8],
    msg_type: MessageType,
    teid: u32,
    seq: Option<u16>,
    ext: Extensions,
    body_len: usize,
) -> Result<usize> {
    let repr = gtpu::Repr {
        msg_type,
        teid,
        seq_number: seq,
        npdu_number: None,
        ext,
        payload_len: body_len,
    };
    if buf.len() < repr.buffer_len() {
        return Err(Error::BufferTooSmall);
    }
    repr.emit(&mut Packet::new_unchecked(&mut *buf))?;
    Ok(repr.header_len())
}

/// Echo Request (§7.2.1) with sequence number `seq`; returns the length.
pub fn emit_echo_request(seq: u16, buf: &mut [u8]) -> Result<usize> {
    emit_header(
        buf,
        MessageType::EchoRequest,
        0,
        Some(seq),
        Extensions::default(),
        0,
    )
}

/// Echo Response (§7.2.2): `seq` copied from the request, Recovery IE
/// (TS 29.281 §8.2 says 0). Returns the length.
pub fn emit_echo_response(recovery: u8, seq: u16, buf: &mut [u8]) -> Result<usize> {
    let h = emit_header(
        buf,
        MessageType::EchoResponse,
        0,
        Some(seq),
        Extensions::default(),
        2,
    )?;
    set_u8(buf, h, ie_type::RECOVERY);
    set_u8(buf, h + 1, recovery);
    Ok(h + 2)
}

/// Error Indication (§7.3.1) for a G-PDU received with `teid` that has no
/// context; `peer_addr` is this node's GTP-U address. Header TEID 0.
pub fn emit_error_indication(teid: u32, peer_addr: IpAddr, buf: &mut [u8]) -> Result<usize> {
    error_indication(teid, peer_addr, None, buf)
}

/// [`emit_error_indication`] with the UDP Port extension header carrying
/// the source port of the triggering G-PDU (TS 29.281 §5.2.2.1).
pub fn emit_error_indication_with_udp_port(
    teid: u32,
    peer_addr: IpAddr,
    udp_port: u16,
    buf: &mut [u8],
) -> Result<usize> {
    error_indication(teid, peer_addr, Some(udp_port), buf)
}

fn error_indication(
    teid: u32,
    peer_addr: IpAddr,
    udp_port: Option<u16>,
    buf: &mut [u8],
) -> Result<usize> {
    let octets: &[u8] = match &peer_addr {
        IpAddr::V4(a) => &a.octets(),
        IpAddr::V6(a) => &a.octets(),
    };
    let addr_len = octets.len();
    let body = 5 + 3 + addr_len;
    let ext = Extensions {
        udp_port,
        ..Extensions::default()
    };
    let h = emit_header(buf, MessageType::ErrorIndication, 0, Some(0), ext, body)?;
    set_u8(buf, h, ie_type::TEID_DATA_I);
    set_u32(buf, h + 1, teid);
    set_u8(buf, h + 5, ie_type::GTPU_PEER_ADDRESS);
    set_u16(
        buf,
        h + 6,
        u16::try_from(addr_len).map_err(|_| Error::BadParameter)?,
    );
    set_bytes(buf, h + 8, octets);
    Ok(h + body)
}

/// End Marker (§7.3.2) for the tunnel `teid`: header only.
pub fn emit_end_marker(teid: u32, buf: &mut [u8]) -> Result<usize> {
    emit_header(
        buf,
        MessageType::EndMarker,
        teid,
        None,
        Extensions::default(),
        0,
    )
}

/// Supported Extension Headers Notification (§7.2.3) listing `ext_types`
/// (at most 255, the 1-octet IE length). Returns the length.
pub fn emit_supported_ext_headers_notification(
    seq: u16,
    ext_types: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let n = u8::try_from(ext_types.len()).map_err(|_| Error::BadParameter)?;
    let h = emit_header(
        buf,
        MessageType::SupportedExtHeadersNotification,
        0,
        Some(seq),
        Extensions::default(),
        2 + ext_types.len(),
    )?;
    set_u8(buf, h, ie_type::EXT_HEADER_TYPE_LIST);
    set_u8(buf, h + 1, n);
    set_bytes(buf, h + 2, ext_types);
    Ok(h + 2 + ext_types.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// scapy 2.8: `GTPHeader(version=1,PT=1,S=1,gtp_type=2,teid=0,seq=0x1234)
    /// /GTPEchoResponse(IE_list=[IE_Recovery(restart_counter=0)])`
    #[test]
    fn echo_response_vector() {
        let v = hex("3202000600000000123400000e00");
        let (r, m) = Message::parse(&v).unwrap();
        assert_eq!(r.seq_number, Some(0x1234));
        assert_eq!(m, Message::EchoResponse { recovery: 0 });
        let mut out = [0u8; 32];
        let n = emit_echo_response(0, 0x1234, &mut out).unwrap();
        assert_eq!(&out[..n], &v[..]);
    }

    /// scapy 2.8: `GTPHeader(version=1,PT=1,S=1,gtp_type=1,teid=0,seq=0x1234)/GTPEchoRequest()`
    #[test]
    fn echo_request_vector() {
        let v = hex("320100040000000012340000");
        assert_eq!(Message::parse(&v).unwrap().1, Message::EchoRequest);
        let mut out = [0u8; 12];
        assert_eq!(emit_echo_request(0x1234, &mut out), Ok(12));
        assert_eq!(&out[..], &v[..]);
        assert_eq!(
            emit_echo_request(1, &mut out[..11]),
            Err(Error::BufferTooSmall)
        );
    }

    /// scapy 2.8: `GTPHeader(version=1,PT=1,S=1,gtp_type=26,teid=0,seq=0)/GTPErrorIndication(
    /// IE_list=[IE_TEIDI(TEIDI=0xdeadbeef), IE_GSNAddress(length=4,ipv4_address="10.0.0.1")])`
    /// and the IPv6 variant with `TEIDI=1, ipv6_address="2001:db8::9"`.
    #[test]
    fn error_indication_vectors() {
        let v4 = hex("321a0010000000000000000010deadbeef8500040a000001");
        let peer4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let (r, m) = Message::parse(&v4).unwrap();
        assert_eq!(r.teid, 0);
        assert_eq!(
            m,
            Message::ErrorIndication {
                teid_data_i: 0xdead_beef,
                peer_addr: peer4
            }
        );
        let mut out = [0u8; 64];
        let n = emit_error_indication(0xdead_beef, peer4, &mut out).unwrap();
        assert_eq!(&out[..n], &v4[..]);

        let v6 = hex("321a001c0000000000000000100000000185001020010db8000000000000000000000009");
        let peer6: IpAddr = "2001:db8::9".parse().unwrap();
        assert_eq!(
            Message::parse(&v6).unwrap().1,
            Message::ErrorIndication {
                teid_data_i: 1,
                peer_addr: peer6
            }
        );
        let n = emit_error_indication(1, peer6, &mut out).unwrap();
        assert_eq!(&out[..n], &v6[..]);

        // With the UDP Port extension header.
        let n = emit_error_indication_with_udp_port(7, peer4, 40000, &mut out).unwrap();
        let (r, m) = Message::parse(&out[..n]).unwrap();
        assert_eq!(r.ext.udp_port, Some(40000));
        assert_eq!(
            m,
            Message::ErrorIndication {
                teid_data_i: 7,
                peer_addr: peer4
            }
        );

        // Missing the peer address IE.
        let mut short = v4[..17].to_vec();
        short[3] = 9;
        assert_eq!(Message::parse(&short).unwrap_err(), Error::MissingIe);
        // Peer address with length 5.
        let mut bad = v4.clone();
        bad[19] = 5;
        bad.push(0);
        bad[3] += 1;
        assert_eq!(Message::parse(&bad).unwrap_err(), Error::BadIe);
    }

    /// scapy 2.8: `GTP_U_Header(gtp_type=254,teid=0x0a0b0c0d)`
    #[test]
    fn end_marker_vector() {
        let v = hex("30fe00000a0b0c0d");
        let (r, m) = Message::parse(&v).unwrap();
        assert_eq!((r.teid, m), (0x0a0b_0c0d, Message::EndMarker));
        let mut out = [0u8; 8];
        assert_eq!(emit_end_marker(0x0a0b_0c0d, &mut out), Ok(8));
        assert_eq!(&out[..], &v[..]);
    }

    /// Hand-built per TS 29.281 §7.2.3 / §8.5 (scapy 2.8 encodes this IE
    /// with a 2-octet length, contrary to §8.5): list {0x40, 0x85}.
    #[test]
    fn supported_ext_headers_notification() {
        let v = [
            0x32, 0x1f, 0x00, 0x08, 0, 0, 0, 0, 0x00, 0x05, 0x00, 0x00, 141, 2, 0x40, 0x85,
        ];
        let (r, m) = Message::parse(&v).unwrap();
        assert_eq!(r.seq_number, Some(5));
        assert_eq!(
            m,
            Message::SupportedExtHeadersNotification {
                ext_types: &[0x40, 0x85]
            }
        );
        let mut out = [0u8; 16];
        assert_eq!(
            emit_supported_ext_headers_notification(5, &[0x40, 0x85], &mut out),
            Ok(16)
        );
        assert_eq!(out, v);
        assert_eq!(
            emit_supported_ext_headers_notification(5, &[0u8; 256], &mut [0u8; 300]),
            Err(Error::BadParameter)
        );
    }

    #[test]
    fn ie_iter() {
        let body = [
            14, 3, // Recovery
            16, 0, 0, 0, 9, // TEID Data I
            255, 0, 3, 0x12, 0x34, 0x56, // Private Extension
            200, 0, 1, 0xaa, // unknown TLV
            17, 0, // unknown TV: fatal
            14, 1,
        ];
        let ies: Vec<_> = IeIter::new(&body).collect();
        assert_eq!(
            ies,
            vec![
                Ok(Ie::Recovery(3)),
                Ok(Ie::TeidDataI(9)),
                Ok(Ie::PrivateExtension {
                    enterprise_id: 0x1234,
                    value: &[0x56]
                }),
                Ok(Ie::Unknown {
                    ie_type: 200,
                    value: &[0xaa]
                }),
                Err(Error::BadIe),
            ]
        );
        // Overruns.
        assert_eq!(IeIter::new(&[16, 0, 0]).next(), Some(Err(Error::BadIe)));
        assert_eq!(IeIter::new(&[133, 0]).next(), Some(Err(Error::BadIe)));
        assert_eq!(IeIter::new(&[133, 0, 4, 1]).next(), Some(Err(Error::BadIe)));
        assert_eq!(IeIter::new(&[141, 3, 1]).next(), Some(Err(Error::BadIe)));
        assert_eq!(IeIter::new(&[255, 0, 1, 1]).next(), Some(Err(Error::BadIe)));
    }
}
