//! The cost of a usage checkpoint (#29) on one worker: `Pipeline::unreported_changed` over
//! 100,000 sessions (one URR each), of which a share counted since the previous read, and the
//! bytes of the records it makes the N4 loop write (the JSON of `upf_n4::persist`, before the
//! store's LZ4). Each worker of the daemon reads its own sessions in parallel.
//!
//! `cargo run --release -p upf-dataplane --example usage_checkpoint`

use std::net::Ipv4Addr;
use std::time::Instant;
use upf_dataplane::{Output, Packet};
use upf_rules::*;

#[path = "../benches/support/mod.rs"]
mod support;
use support::*;

/// The record `upf_n4` writes for one session: per URR, [id, UR-SEQN, UL octets, UL
/// packets, DL octets, DL packets].
fn record_bytes(usage: &[(UrrId, Volume)]) -> usize {
    let rows: Vec<String> = usage
        .iter()
        .map(|(u, v)| {
            format!(
                "[{},{},{},{},{},{}]",
                u.0, 3, v.uplink_bytes, v.uplink_packets, v.downlink_bytes, v.downlink_packets
            )
        })
        .collect();
    rows.join(",").len() + 2
}

fn main() {
    const N: u32 = 100_000;
    let mut p = pipeline(N);
    let inner: Vec<Vec<u8>> = (0..N)
        .map(|i| udp4(ue(i), Ipv4Addr::new(198, 51, 100, 1), 5000, 6000, 200))
        .collect();
    // Every session counted once; the first read returns them all.
    let t = Instant::now();
    let all = p.unreported_changed();
    println!(
        "first read, nothing counted: {} sessions, {:.1} ms",
        all.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    for pct in [0u32, 1, 10, 100] {
        let active = N / 100 * pct;
        let mut out = Output::default();
        for chunk in (0..active).collect::<Vec<_>>().chunks(256) {
            let mut batch: Vec<Packet> = chunk
                .iter()
                .map(|&i| gpdu(100 + i, &inner[i as usize]))
                .collect();
            p.process(Instant::now(), &mut batch, &mut out);
            out.tx.clear();
            out.free.clear();
        }
        let t = Instant::now();
        let got = p.unreported_changed();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let bytes: usize = got.iter().map(|(_, u)| record_bytes(u)).sum();
        println!(
            "{pct:3}% of {N} sessions counted: read {ms:.1} ms, {} records, {bytes} bytes of records ({:.0} B each)",
            got.len(),
            bytes as f64 / got.len().max(1) as f64
        );
    }
}
