//! What software prefetching can do on this machine when every line is addressable: 100k
//! records of 48 cache lines in random order, 6 lines read per record in a dependent chain,
//! each prefetched `d` records ahead. The pipeline's per-session state is measured against
//! this (docs/benchmarks/datapath-memory.md).
//!
//! `cargo run --release -p upf-dataplane --example prefetch_ceiling`

use std::time::Instant;
use upf_prefetch::l1 as prefetch_index;

#[derive(Clone)]
#[repr(C, align(64))]
struct Line([u64; 8]);

#[derive(Clone)]
struct Record {
    lines: [Line; 48],
}

fn main() {
    let n = 100_000usize;
    let records = vec![
        Record {
            lines: std::array::from_fn(|i| Line([i as u64; 8])),
        };
        n
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let order: Vec<usize> = (0..4_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            usize::try_from(x % n as u64).unwrap_or(0)
        })
        .collect();
    let touched = [0usize, 5, 11, 17, 23, 30];
    for d in [0usize, 4, 8, 16] {
        let t = Instant::now();
        let mut s = 0u64;
        for i in 0..order.len() {
            if d > 0 {
                if let Some(&j) = order.get(i + d) {
                    for &l in &touched {
                        prefetch_index(&records[j].lines, l);
                    }
                }
            }
            let r = &records[order[i]];
            for &l in &touched {
                // The next read depends on this one, as a packet's rule reads do.
                s = s.wrapping_add(r.lines[l].0[usize::try_from(s & 7).unwrap_or(0)]);
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / order.len() as f64;
        println!("prefetch distance {d:2}: {ns:6.1} ns per record (checksum {s})");
    }
}
