//! Hot-path micro-benchmarks: GTP-U classify fields, encapsulation, checksum.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion};
use upf_wire::encap::{self, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::flow::{flow_hash, FiveTuple};
use upf_wire::{checksum, gtpu, ipv4, udp};

/// 64-byte inner IPv4/UDP packet.
fn inner_packet() -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let r = ipv4::Repr {
        src: Ipv4Addr::new(10, 45, 0, 2),
        dst: Ipv4Addr::new(8, 8, 8, 8),
        protocol: 17,
        payload_len: 44,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    r.emit(&mut ipv4::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    let u = udp::Repr {
        src_port: 40000,
        dst_port: 443,
        payload_len: 36,
    };
    u.emit(&mut udp::Packet::new_unchecked(&mut b[20..]))
        .unwrap();
    b
}

fn tunnel() -> GtpuTunnel {
    GtpuTunnel {
        teid: 0x1122_3344,
        src_port: 2152,
        dst_port: 2152,
        psc: Some(PduSessionContainer::ul(9)),
        ttl: 64,
        dscp: 46,
        ecn: 0,
    }
}

fn params() -> EncapV4 {
    EncapV4 {
        src: Ipv4Addr::new(192, 168, 1, 10),
        dst: Ipv4Addr::new(192, 168, 1, 20),
        ident: 0,
        dont_frag: true,
        tunnel: tunnel(),
    }
}

fn benches(c: &mut Criterion) {
    let inner = inner_packet();
    let hr = encap::MAX_HEADROOM;
    let mut frame = vec![0u8; hr + inner.len()];
    frame[hr..].copy_from_slice(&inner);
    let start = encap::encapsulate_gtpu_v4(&mut frame, hr, inner.len(), &params()).unwrap();
    let outer = frame[start..].to_vec();
    // GTP-U message = outer UDP payload.
    let gtp = outer[28..].to_vec();

    c.bench_function("gtpu_parse_psc_qfi_5tuple", |b| {
        b.iter(|| {
            let (repr, payload) = gtpu::decode(black_box(&gtp)).unwrap();
            let qfi = repr.ext.psc.map(|p| p.qfi);
            let t = FiveTuple::parse(payload).unwrap();
            // By reference: copying the tuple into black_box would measure
            // the harness's store-to-load forwarding stalls, not the parse.
            black_box((repr.teid, qfi));
            black_box(&t);
        })
    });

    c.bench_function("gtpu_parse_psc_qfi_5tuple_hash", |b| {
        b.iter(|| {
            let (repr, payload) = gtpu::decode(black_box(&gtp)).unwrap();
            let qfi = repr.ext.psc.map(|p| p.qfi);
            let t = FiveTuple::parse(payload).unwrap();
            black_box((repr.teid, qfi, flow_hash(&t)))
        })
    });

    c.bench_function("decap_v4_psc_5tuple", |b| {
        b.iter(|| {
            let d = encap::decapsulate(black_box(&outer)).unwrap();
            let t = FiveTuple::parse(&outer[d.inner.clone()]).unwrap();
            black_box((d.gtpu.teid, d.gtpu.ext.psc));
            black_box(&t);
        })
    });

    let p = params();
    let mut buf = frame.clone();
    c.bench_function("encap_gtpu_v4_psc", |b| {
        b.iter(|| {
            black_box(
                encap::encapsulate_gtpu_v4(black_box(&mut buf), hr, 64, black_box(&p)).unwrap(),
            )
        })
    });

    let hdr: [u8; 20] = outer[..20].try_into().unwrap();
    c.bench_function("ipv4_header_checksum", |b| {
        b.iter(|| black_box(checksum::checksum(black_box(&hdr))))
    });

    let pkt1500 = vec![0xa5u8; 1500];
    c.bench_function("checksum_1500B", |b| {
        b.iter(|| black_box(checksum::checksum(black_box(&pkt1500))))
    });
}

criterion_group!(wire, benches);
criterion_main!(wire);
