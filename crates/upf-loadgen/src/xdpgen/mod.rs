//! A generator fast enough not to be the bottleneck on veth, and a counting sink that
//! measures latency.
//!
//! [`Generator`] ([`generator`]): `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` runs an XDP
//! program on frames made from a [`Template`] ([`template`]), as if they arrived on a veth;
//! the program returns XDP_TX, so the kernel sends each frame out of that veth to its peer.
//! Live frames come from a page pool and are recycled, and the receiver may have changed them
//! (the kernel decrements the TTL when it forwards), so the program rewrites every header
//! octet from the template on every frame, then the per-frame fields from counters kept in an
//! array map: frame k carries session `k mod N`: its IPv4 address (`addr_base + i`, source or
//! destination, with the header checksum recomputed) and its GTP-U TEID (`teid_base + i`). A
//! share of the frames is high priority (see [`Template::with_high_priority`]: QFI in the
//! uplink PDU Session Container, or DSCP in the IPv4 header), chosen by a hash of k so that
//! the classes interleave within every session. When the inner payload has room, its first 12
//! octets are a stamp: `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, 8 octets, host order) and a
//! class word ([`STAMP_MAGIC`] + class, 4 octets). The peer veth needs an XDP program
//! ([`Fixed`], [`verdict`]) or GRO on to accept redirected frames.
//!
//! [`Counter`] ([`sink`]): an XDP program that counts (packets, octets) the IPv4 UDP packets
//! to the ports given, atomically in an array map, and drops them; everything else (ARP,
//! ICMP, …) passes, so the kernel behind it keeps resolving neighbours. Count at the
//! receiver: a sender's own count says nothing about what arrived. With a [`LatencyConfig`]
//! it also reads the stamp of every counted packet (inside a G-PDU with up to one extension
//! header, or a plain IPv4/UDP packet), adds `now − stamp` to its class's log-linear histogram
//! ([`bucket`]) and keeps RFC 3550 §A.8 interarrival jitter per flow (session × class,
//! [`jitter_update`]); [`stats`] reads them. With [`Measures::gap`] it keeps the longest gap
//! between two consecutive counted arrivals, any flow ([`Counter::max_gap_ns`]): how long
//! nothing arrived, say while the UPF moved its sessions between engines.
//!
//! The programs are C (`bpf/gen.bpf.c`, `bpf/sink.bpf.c`, `bpf/verdict.bpf.c`), built by
//! clang and loaded with aya ([`object`]); what varies (the template, the ports, the latency
//! settings) is set at load as read-only globals, so the verifier keeps only the code a
//! template needs. Each is checked against its Rust specification through BPF_PROG_RUN.
#![forbid(unsafe_code)]

pub mod generator;
mod object;
pub mod sink;
pub mod stats;
pub mod template;
#[cfg(test)]
mod testutil;
pub mod verdict;

pub use generator::{run_in, GenStats, Generator, MAX_HEADER, STATE_LEN, WAKE_SIGNAL};
pub use sink::{Counter, LatencyConfig, Measures, MAX_PORTS};
pub use stats::{
    bucket, bucket_bounds, jitter_update, ClassLatency, Count, JitterSummary, Latency, BUCKETS,
};
pub use template::{Mark, Template};
pub use verdict::Fixed;

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;
pub const GTPU_PORT: u16 = 2152;
/// Inner UDP ports of the generated packets.
pub const SRC_PORT: u16 = 5000;
pub const DST_PORT: u16 = 5001;
/// Largest inner packet a live frame holds comfortably (a 4 KiB page less headroom and
/// skb_shared_info).
pub const MAX_INNER: usize = 3000;

/// The class word of a stamp is `STAMP_MAGIC + class` (0 low, 1 high priority): a receiver
/// tells a stamp from whatever a recycled page held before.
pub const STAMP_MAGIC: u32 = 0x5550_4c00;
/// Octets of a stamp: CLOCK_MONOTONIC nanoseconds (8) and the class word (4).
pub const STAMP_LEN: usize = 12;
pub const CLASS_LOW: usize = 0;
pub const CLASS_HIGH: usize = 1;

/// CLOCK_MONOTONIC now, ns: the clock of the stamps (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    crate::sys::monotonic_ns()
}
