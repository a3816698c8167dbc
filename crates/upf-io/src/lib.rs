//! `upf-io`: where packets enter and leave the UPF. Every backend implements [`PacketIo`]: a
//! worker takes a batch from each of its ports, runs it through its pipeline and hands each
//! sent packet to the port it leaves by. Packets are [`Packet`] buffers (IP header first, with
//! headroom for encapsulation); link-layer framing is the backend's business.
//!
//! Backends: [`mem`] (in-memory queues), [`udp`] (N3/N9 on a UDP socket, no privileges),
//! [`tun`] (N6 on a multi-queue TUN device), [`af_packet`] (TPACKET_V3 ring, a fanout group
//! steered by a BPF program), [`af_xdp`] (UMEM and rings, an XDP program steering to the
//! arriving queue's socket). Decorators: [`pcap::Capture`] (write a pcap file) and
//! [`fault::Faults`] (seeded drop/duplicate/reorder, for tests).
//!
//! Where `unsafe` lives (every block with a `// SAFETY:` comment, each behind functions a
//! caller cannot misuse): the packet paths' system calls that no library wraps as fast
//! (`udp`: recvmmsg/sendmmsg with their control messages; `af_packet`: the mmap'd RX ring
//! and sendmmsg; `tun`: TUNSETIFF), the AF_XDP rings and UMEM (`af_xdp::ring`, `af_xdp::sys`,
//! `af_xdp`), the socket-address conversions of `sys`, and the huge-page allocator
//! (`hugepages`). BPF programs are loaded and run through aya, netlink through
//! netlink-packet-route, eventfd and poll through rustix: no `unsafe` of ours there.

pub mod af_packet;
pub mod af_xdp;
pub mod bpf;
pub mod fanout;
pub mod fault;
pub mod hugepages;
pub mod link;
pub mod mem;
pub mod netlink;
#[cfg(test)]
mod netns_tests;
pub mod pcap;
mod pool;
mod sys;
pub mod tun;
pub mod udp;
mod wait;
pub mod wake;

pub use pool::Pool;
pub use upf_packet::{Packet, Port};
pub use wait::wait_readable;

use std::io;
use std::os::fd::BorrowedFd;

/// Counters every backend keeps (read off the fast path, e.g. on a metrics scrape).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Received frames that were not IP (or too big for a buffer) and were discarded.
    pub rx_discarded: u64,
    /// Frames the kernel dropped before this queue saw them (a full AF_PACKET ring, a full
    /// AF_XDP RX ring or an empty fill ring), as of the last [`PacketIo::refresh_stats`].
    pub rx_kernel_dropped: u64,
    /// Packets handed to `tx_batch` that could not be sent (ring full, no route, no neighbour).
    pub tx_dropped: u64,
}

impl IoStats {
    pub fn add(&mut self, o: &IoStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_discarded += o.rx_discarded;
        self.rx_kernel_dropped += o.rx_kernel_dropped;
        self.tx_dropped += o.tx_dropped;
    }
}

/// One queue of one interface, owned by one worker.
pub trait PacketIo: Send + std::fmt::Debug {
    /// Appends up to `max` received packets to `batch`, each with `port` set to this queue's
    /// port, taking buffers from `pool`. Never blocks; `Ok(0)` when nothing is waiting.
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize>;

    /// Sends every packet of `batch` (draining it) and gives the buffers back to `pool`.
    /// Packets that cannot be sent are counted in [`IoStats::tx_dropped`], not returned.
    /// Returns how many were sent.
    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize>;

    /// A descriptor that becomes readable when packets wait, for an idle worker to sleep on.
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Receive queues this queue has, one per queue group, highest priority first (seed 001:
    /// a backend that classifies before it queues, by a BPF program); 1: one for all, the
    /// worker classifies in software.
    fn rx_groups(&self) -> usize {
        1
    }

    /// Like [`PacketIo::rx_batch`], from the receive queue of group `group` alone.
    fn rx_group(
        &mut self,
        group: usize,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        if group == 0 {
            self.rx_batch(pool, batch, max)
        } else {
            Ok(0)
        }
    }

    /// [`PacketIo::fd`] of group `group`'s receive queue.
    fn group_fd(&self, group: usize) -> Option<BorrowedFd<'_>> {
        if group == 0 {
            self.fd()
        } else {
            None
        }
    }

    /// Pushes out anything queued for transmission (backends that batch TX); called by an idle
    /// worker.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn stats(&self) -> IoStats;

    /// Reads counters the kernel keeps for this queue into [`IoStats`] (a system call: called
    /// between batches when stats are asked for, never per packet).
    fn refresh_stats(&mut self) {}

    /// What this queue is, for the start-up log: backend, interface, queue, mode.
    fn describe(&self) -> String;
}
