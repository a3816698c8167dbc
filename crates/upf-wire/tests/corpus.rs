//! The GTP-U corpus: messages this crate emits (G-PDUs encapsulated in place with and without
//! a PDU Session Container, echo, Error Indication, End Marker, Supported Extension Headers
//! Notification), kept as hex in testdata/gtpu/corpus/ for interop/gtpu.py to check against
//! scapy and tshark. The test fails if a file is stale; UPDATE_CORPUS=1 rewrites them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use upf_wire::encap::{encapsulate_gtpu_v4, headroom_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::gtpu_msg;

/// A 28-octet inner IPv4/UDP packet from the UE (10.60.0.1:4000 → 8.8.8.8:5001), 4-octet payload.
const INNER: [u8; 32] = [
    0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0x0e, 0x6d, 10, 60, 0, 1, 8, 8, 8, 8, 0x0f, 0xa0, 0x13,
    0x89, 0, 12, 0, 0, b'p', b'i', b'n', b'g',
];

/// A G-PDU as the UPF sends it: the UDP payload of the outer packet (outer IPv4 + UDP stripped).
fn gpdu(psc: Option<PduSessionContainer>) -> Vec<u8> {
    let head = headroom_v4(&psc);
    let mut buf = vec![0u8; head + INNER.len()];
    buf[head..].copy_from_slice(&INNER);
    let p = EncapV4 {
        src: Ipv4Addr::new(10, 100, 0, 2),
        dst: Ipv4Addr::new(10, 200, 0, 10),
        ident: 0,
        dont_frag: true,
        tunnel: GtpuTunnel {
            teid: 0x0100_0001,
            src_port: 2152,
            dst_port: 2152,
            psc,
            ttl: 64,
            dscp: 46,
            ecn: 0,
        },
    };
    let start = encapsulate_gtpu_v4(&mut buf, head, INNER.len(), &p).unwrap();
    buf[start + 28..].to_vec()
}

fn emitted(f: impl FnOnce(&mut [u8]) -> upf_wire::Result<usize>) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let n = f(&mut buf).unwrap();
    buf[..n].to_vec()
}

fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let dl = PduSessionContainer {
        ppi: Some(3),
        rqi: true,
        ..PduSessionContainer::dl(9)
    };
    vec![
        ("gpdu_plain", gpdu(None)),
        ("gpdu_psc_dl", gpdu(Some(PduSessionContainer::dl(9)))),
        ("gpdu_psc_dl_ppi_rqi", gpdu(Some(dl))),
        ("gpdu_psc_ul", gpdu(Some(PduSessionContainer::ul(5)))),
        (
            "echo_request",
            emitted(|b| gtpu_msg::emit_echo_request(7, b)),
        ),
        (
            "echo_response",
            emitted(|b| gtpu_msg::emit_echo_response(0, 7, b)),
        ),
        (
            "error_indication",
            emitted(|b| {
                gtpu_msg::emit_error_indication(0x0bad, IpAddr::V4(Ipv4Addr::new(10, 100, 0, 2)), b)
            }),
        ),
        (
            "end_marker",
            emitted(|b| gtpu_msg::emit_end_marker(0x0100_0001, b)),
        ),
        (
            "supported_ext_headers",
            emitted(|b| gtpu_msg::emit_supported_ext_headers_notification(3, &[0x85, 0x40], b)),
        ),
    ]
}

#[test]
fn corpus_is_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/gtpu/corpus");
    let update = std::env::var_os("UPDATE_CORPUS").is_some();
    for (name, bytes) in corpus() {
        let path = dir.join(format!("{name}.hex"));
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n";
        if update {
            std::fs::write(&path, &hex).unwrap();
        } else {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(
                on_disk,
                hex,
                "{} is stale: rerun with UPDATE_CORPUS=1",
                path.display()
            );
        }
        // Every entry decodes with our own parser too.
        gtpu_msg::Message::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
