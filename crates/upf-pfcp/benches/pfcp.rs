//! PFCP codec benches: decode and encode of a Session Establishment Request with 4 PDRs,
//! 4 FARs, 2 QERs, 2 URRs and a BAR (testdata/pfcp/bench-establishment.hex, built by scapy),
//! and of a Heartbeat Request.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use upf_pfcp::Pdu;

fn hex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn codec(c: &mut Criterion) {
    let est = hex(include_str!(
        "../../../testdata/pfcp/bench-establishment.hex"
    ));
    let hb = hex("2001000c000001000060000400000001");
    let (pdu, _) = Pdu::decode(&est).unwrap();
    let mut g = c.benchmark_group("pfcp");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode/session_establishment_4pdr", |b| {
        b.iter(|| Pdu::decode(black_box(&est)).unwrap())
    });
    g.bench_function("encode/session_establishment_4pdr", |b| {
        let mut out = Vec::with_capacity(2048);
        b.iter(|| {
            out.clear();
            black_box(&pdu).encode(&mut out);
            black_box(out.len())
        })
    });
    g.bench_function("decode/heartbeat_request", |b| {
        b.iter(|| Pdu::decode(black_box(&hb)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
