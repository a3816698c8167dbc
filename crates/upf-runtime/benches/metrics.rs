//! What metrics cost a worker: the per-batch accounting it does on the fast path (a clock read
//! and `BatchStats::record`), and answering a scrape (cloning its counters between batches).
//! Compare with a batch's processing time from `upf-bench memory` (docs/benchmarks/daemon.md).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Instant;
use upf_dataplane::Counters;
use upf_runtime::{BatchStats, WorkerStats};

fn per_batch(c: &mut Criterion) {
    let mut s = BatchStats::default();
    c.bench_function("metrics/per_batch_clock_and_record", |b| {
        b.iter(|| {
            let t0 = Instant::now();
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            s.record(black_box(64), ns);
        })
    });
    let w = WorkerStats {
        counters: Counters::default(),
        ..Default::default()
    };
    c.bench_function("metrics/scrape_clone_worker_stats", |b| {
        b.iter(|| black_box(w.clone()))
    });
}

criterion_group!(benches, per_batch);
criterion_main!(benches);
