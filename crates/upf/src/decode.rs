//! `upf decode`: every field of every PFCP and GTP-U packet as one JSON object per line.
//! Malformed input gives a JSON object with an "error" member, never a panic.

use crate::pcap;
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;

pub const PFCP_PORT: u16 = 8805;
pub const GTPU_PORT: u16 = 2152;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A pcap/pcapng file, or a hex string (whitespace and colons ignored).
    input: String,
    /// Treat hex input as a PFCP message (the default is to guess from the first octet).
    #[arg(long, conflicts_with = "gtpu")]
    pfcp: bool,
    /// Treat hex input as a GTP-U packet.
    #[arg(long)]
    gtpu: bool,
    /// Pretty-print each object over several lines.
    #[arg(long)]
    pretty: bool,
}

pub fn run(args: &Args) -> ExitCode {
    let objects = match std::fs::read(&args.input) {
        Ok(file) => match pcap::read(&file) {
            Ok(frames) => frames
                .iter()
                .enumerate()
                .map(|(i, f)| decode_frame(i + 1, f))
                .collect(),
            Err(e) => vec![json!({ "error": format!("{}: {e}", args.input) })],
        },
        Err(_) => match parse_hex(&args.input) {
            Some(bytes) => {
                let gtpu = args.gtpu || (!args.pfcp && bytes.first().is_some_and(|b| b >> 5 != 1));
                vec![if gtpu {
                    gtpu_json(&bytes)
                } else {
                    pfcp_json(&bytes)
                }]
            }
            None => {
                vec![json!({ "error": format!("{}: neither a readable file nor hex", args.input) })]
            }
        },
    };
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for o in &objects {
        failed |= o.get("error").is_some();
        let line = if args.pretty {
            serde_json::to_string_pretty(o)
        } else {
            serde_json::to_string(o)
        };
        if writeln!(out, "{}", line.unwrap_or_default()).is_err() {
            return ExitCode::FAILURE;
        }
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b':')
        .collect();
    let digits = digits.strip_prefix(b"0x").unwrap_or(&digits);
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

/// One frame of a capture: addresses and ports, then the PFCP or GTP-U payload decoded.
fn decode_frame(number: usize, frame: &pcap::Frame<'_>) -> Value {
    let mut o = json!({ "frame": number, "time": frame.time });
    let Some(ip) = pcap::ip_payload(frame.link_type, frame.data) else {
        o["error"] = json!("not an IP packet (or unsupported link type)");
        return o;
    };
    match crate::decode::udp_of(ip) {
        Some(u) => {
            o["src"] = json!(format!("{}", std::net::SocketAddr::new(u.src, u.src_port)));
            o["dst"] = json!(format!("{}", std::net::SocketAddr::new(u.dst, u.dst_port)));
            let body = if u.dst_port == PFCP_PORT || u.src_port == PFCP_PORT {
                pfcp_json(u.payload)
            } else if u.dst_port == GTPU_PORT || u.src_port == GTPU_PORT {
                gtpu_json(u.payload)
            } else {
                json!({ "protocol": "udp", "skipped": "not PFCP or GTP-U port" })
            };
            merge(&mut o, body);
        }
        None => o["error"] = json!("not a UDP datagram (or truncated IP/UDP header)"),
    }
    o
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// Every message of a PFCP datagram (several when the FO flag is used).
pub fn pfcp_json(bytes: &[u8]) -> Value {
    let mut messages = Vec::new();
    let mut error = None;
    for m in upf_pfcp::decode_all(bytes) {
        match m {
            Ok(pdu) => messages.push(json!({
                "message_type": pdu.message.message_type(),
                "message_name": upf_pfcp::message_name(pdu.message.message_type()),
                "header": pdu.header,
                "ies": pdu.message,
            })),
            Err(e) => {
                error = Some(json!({
                    "message": e.to_string(),
                    "cause": e.error.cause().0,
                    "cause_name": e.error.cause().name(),
                    "offending_ie": e.error.offending_ie(),
                    "header": e.header,
                }));
                break;
            }
        }
    }
    let mut o = json!({ "protocol": "pfcp", "messages": messages });
    if let Some(e) = error {
        o["error"] = e;
    }
    o
}

/// The UDP datagram inside an IP packet, for the decode tool.
#[derive(Debug)]
pub struct Udp<'a> {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: &'a [u8],
}

/// Finds the UDP datagram in an IPv4 or IPv6 packet (IPv6 extension headers are not walked).
pub fn udp_of(ip: &[u8]) -> Option<Udp<'_>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let (src, dst, udp) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if *ip.get(9)? != 17 {
                return None;
            }
            let s: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (
                IpAddr::V4(Ipv4Addr::from(s)),
                IpAddr::V4(Ipv4Addr::from(d)),
                ip.get(ihl..)?,
            )
        }
        6 => {
            if *ip.get(6)? != 17 {
                return None;
            }
            let s: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                ip.get(40..)?,
            )
        }
        _ => return None,
    };
    let port = |at: usize| Some(u16::from_be_bytes(udp.get(at..at + 2)?.try_into().ok()?));
    let len = usize::from(port(4)?);
    let payload = udp.get(8..len.max(8).min(udp.len()))?;
    Some(Udp {
        src,
        dst,
        src_port: port(0)?,
        dst_port: port(2)?,
        payload,
    })
}

/// A GTP-U packet: header, every extension header (the PDU Session Container decoded), and the
/// body: the inner packet's 5-tuple for a G-PDU, the IEs of a signalling message.
pub fn gtpu_json(bytes: &[u8]) -> Value {
    use upf_wire::{ext, flow::FiveTuple, gtpu, gtpu_msg::Message};
    let mut o = json!({ "protocol": "gtpu" });
    let p = match gtpu::Packet::new_checked(bytes) {
        Ok(p) => p,
        Err(e) => {
            o["error"] = json!(format!("GTP-U header: {e}"));
            return o;
        }
    };
    let mut extensions = Vec::new();
    for h in p.extensions() {
        match h {
            Ok(h) => {
                let mut x = json!({
                    "type": h.ext_type,
                    "comprehension": format!("{:?}", ext::Comprehension::of(h.ext_type)),
                    "length_octets": h.content.len() + 2,
                });
                if h.ext_type == ext::ext_type::PDU_SESSION_CONTAINER {
                    x["pdu_session_container"] = match ext::PduSessionContainer::parse(h.content) {
                        Ok(c) => {
                            json!({ "pdu_type": format!("{:?}", c.pdu_type), "qfi": c.qfi, "ppi": c.ppi, "rqi": c.rqi })
                        }
                        Err(e) => json!({ "error": e.to_string() }),
                    };
                }
                extensions.push(x);
            }
            Err(e) => extensions.push(json!({ "error": e.to_string() })),
        }
    }
    o["header"] = json!({
        "version": p.version(),
        "pt": p.protocol_type(),
        "e": p.e_flag(), "s": p.s_flag(), "pn": p.pn_flag(),
        "message_type": p.raw_msg_type(),
        "message_name": format!("{:?}", p.msg_type()),
        "length": p.length(),
        "teid": p.teid(),
        "sequence": p.seq_number(),
        "npdu_number": p.npdu_number(),
        "extensions": extensions,
    });
    match Message::parse(bytes) {
        Ok((_, Message::GPdu { payload })) => {
            o["inner"] = match FiveTuple::parse(payload) {
                Ok(t) => json!({
                    "length": payload.len(), "src": t.src.to_string(), "dst": t.dst.to_string(),
                    "protocol": t.proto, "src_port": t.src_port, "dst_port": t.dst_port,
                }),
                Err(e) => json!({ "length": payload.len(), "error": e.to_string() }),
            }
        }
        Ok((_, Message::EchoRequest)) => o["ies"] = json!({}),
        Ok((_, Message::EchoResponse { recovery })) => o["ies"] = json!({ "recovery": recovery }),
        Ok((
            _,
            Message::ErrorIndication {
                teid_data_i,
                peer_addr,
            },
        )) => {
            o["ies"] =
                json!({ "teid_data_i": teid_data_i, "gtpu_peer_address": peer_addr.to_string() })
        }
        Ok((_, Message::SupportedExtHeadersNotification { ext_types })) => {
            o["ies"] = json!({ "extension_header_types": ext_types })
        }
        Ok((_, Message::EndMarker)) => o["ies"] = json!({}),
        Err(e) => o["error"] = json!(e.to_string()),
    }
    o
}
