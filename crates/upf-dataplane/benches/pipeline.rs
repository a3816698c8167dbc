//! Micro-benchmarks of the pipeline's stages, and of whole batches (uplink, downlink) through
//! one worker with 1 and 10,000 sessions. The per-core figures of the seed profiles come from
//! `upf-bench memory`; these say where the time goes.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use upf_dataplane::stages::{gpdu_v4, Template, TokenBucket};
use upf_dataplane::{flow_of, Output, Packet, Port};
use upf_wire::encap::{decapsulate, encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;

mod support;
use support::*;

fn stages(c: &mut Criterion) {
    let inner = udp4(ue(0), Ipv4Addr::new(198, 51, 100, 1), 40000, 5001, 64);
    let g = gpdu(100, &inner);
    let mut grp = c.benchmark_group("stage");
    grp.bench_function("decap/fast", |b| b.iter(|| gpdu_v4(black_box(g.data()))));
    grp.bench_function("decap/general", |b| {
        b.iter(|| decapsulate(black_box(g.data())))
    });
    grp.bench_function("inner_flow", |b| b.iter(|| flow_of(black_box(&inner))));
    let mut bucket = TokenBucket::new(0, 1_000_000_000_000, Duration::from_millis(100));
    let mut t = 0u64;
    grp.bench_function("mbr_bucket", |b| {
        b.iter(|| {
            t += 50;
            if bucket.conforms(t, 512) {
                bucket.take(512);
            }
        })
    });
    let tmpl = Template::v4(UPF, Ipv4Addr::new(192, 0, 2, 100), 7, 0, 64, Some(true)).unwrap();
    let mut buf = vec![0u8; 256];
    grp.bench_function("encap/template", |b| {
        b.iter(|| tmpl.write(black_box(&mut buf), 128, 192, 1, 0, 9, None))
    });
    let e = EncapV4 {
        src: UPF,
        dst: Ipv4Addr::new(192, 0, 2, 100),
        ident: 1,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid: 7,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(PduSessionContainer::dl(9)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    grp.bench_function("encap/general", |b| {
        b.iter(|| encapsulate_gtpu_v4(black_box(&mut buf), 128, 64, &e))
    });
    grp.finish();
}

fn batches(c: &mut Criterion) {
    let mut grp = c.benchmark_group("batch256");
    grp.throughput(Throughput::Elements(256));
    for sessions in [1u32, 10_000] {
        let mut dp = pipeline(sessions);
        let ul: Vec<Packet> = (0..256u32)
            .map(|k| {
                let i = k.wrapping_mul(2_654_435_761) % sessions;
                let dport = if k % 2 == 0 { 5001 } else { 443 };
                gpdu(
                    100 + i,
                    &udp4(ue(i), Ipv4Addr::new(198, 51, 100, 1), 40000, dport, 64),
                )
            })
            .collect();
        let dl: Vec<Packet> = (0..256u32)
            .map(|k| {
                let i = k.wrapping_mul(2_654_435_761) % sessions;
                let sport = if k % 2 == 0 { 5001 } else { 443 };
                Packet::from_bytes(
                    Port::N6,
                    &udp4(Ipv4Addr::new(198, 51, 100, 1), ue(i), sport, 40000, 64),
                )
                .unwrap()
            })
            .collect();
        let mut out = Output::default();
        for (name, pkts) in [("uplink", &ul), ("downlink", &dl)] {
            grp.bench_function(format!("{name}/{sessions}_sessions"), |b| {
                b.iter_batched_ref(
                    || pkts.clone(),
                    |rx| {
                        dp.process(Instant::now(), rx, &mut out);
                        out.tx.clear();
                        out.free.clear();
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    grp.finish();
}

criterion_group!(benches, stages, batches);
criterion_main!(benches);
