//! UE pinning for AF_PACKET without XDP: a PACKET_FANOUT_EBPF program that returns the index
//! of the worker owning a packet's UE, by the same hash as `upf_packet::steer`:
//!
//! - N3/N9 ([`Ingress::Gtpu`]): a G-PDU on UDP port 2152 over IPv4 or IPv6 hashes the inner
//!   packet's source address (IPv4: the address as a 64-bit number; IPv6: its upper 64 bits).
//!   The GTP-U header is 8 octets, 12 when any of E/S/PN is set; with E the extension headers
//!   are walked (each one's length in 4-octet units in its first octet, the next type in its
//!   last), at most [`MAX_EXT`] of them. Anything else (not UDP/2152, not a G-PDU, a non-first
//!   IPv4 fragment, an IPv6 outer header with extension headers, truncated) goes to worker 0.
//! - N6 ([`Ingress::Ip`]): IPv4/IPv6 hashes the destination address; anything else → 0.
//!
//! `ue_hash(k) = (k * 0x9E3779B97F4A7C15 mod 2^64) >> 32`, `worker = (hash * n) >> 32`.
//!
//! The program is C (`bpf/fanout.bpf.c`, BPF_PROG_TYPE_SOCKET_FILTER), built by clang and
//! loaded with aya. It reads the packet with the legacy LD_ABS/LD_IND loads, which end the
//! program with 0 when a read falls outside the packet: that is exactly "unparsable goes to
//! worker 0", and [`fanout_worker`] (the plain-Rust reference) treats every out-of-range read
//! the same way. The tests run both over generated frames with BPF_PROG_TEST_RUN.
//!
//! On receive the kernel runs the program with the packet starting at the network header and
//! `skb->protocol` the Ethertype (VLAN tags already taken off); BPF_PROG_TEST_RUN starts it after
//! the Ethernet header with a tag still in place, so the program also skips one 802.1Q/802.1ad
//! tag, like the reference.

use crate::bpf;
use crate::Port;
use aya::programs::SocketFilter;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use upf_packet::steer::{ue_hash_key, worker_of};

/// Extension headers walked at most (the chain is unrolled in the program).
pub const MAX_EXT: usize = 8;

/// The GTP-U port.
const GTPU_PORT: u16 = 2152;

/// The object clang built from `bpf/fanout.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fanout.bpf.o"));
const NAME: &str = "upf_fanout";

/// What a fanout group receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// N3/N9: GTP-U, steered by the inner source address.
    Gtpu,
    /// N6: plain IP, steered by the destination address.
    Ip,
}

impl Ingress {
    pub fn of(port: Port) -> Ingress {
        match port {
            Port::N3 | Port::N9 => Ingress::Gtpu,
            Port::N6 => Ingress::Ip,
        }
    }
}

/// The steering key (UE address as a number) of an Ethernet frame, or `None` when it goes to
/// worker 0. Mirrors the eBPF program read for read.
pub fn fanout_key(ingress: Ingress, frame: &[u8]) -> Option<u64> {
    let b = |o: usize| frame.get(o).copied().map(u64::from);
    let h = |o: usize| Some(b(o)? << 8 | b(o + 1)?);
    let w = |o: usize| Some(h(o)? << 16 | h(o + 2)?);
    let mut proto = h(12)?;
    let mut l3 = 14;
    if proto == 0x8100 || proto == 0x88a8 {
        proto = h(l3 + 2)?;
        l3 += 4;
    }
    let v4 = match proto {
        0x0800 => true,
        0x86dd => false,
        _ => return None,
    };
    match ingress {
        Ingress::Ip => {
            if v4 {
                (b(l3)? >> 4 == 4).then_some(())?;
                w(l3 + 16)
            } else {
                (b(l3)? >> 4 == 6).then_some(())?;
                Some(w(l3 + 24)? << 32 | w(l3 + 28)?)
            }
        }
        Ingress::Gtpu => {
            let udp = if v4 {
                let vihl = b(l3)?;
                (vihl >> 4 == 4).then_some(())?;
                let ihl = usize::try_from((vihl & 0xf) << 2).ok()?;
                (ihl >= 20).then_some(())?;
                (b(l3 + 9)? == 17).then_some(())?;
                (h(l3 + 6)? & 0x1fff == 0).then_some(())?;
                l3 + ihl
            } else {
                (b(l3)? >> 4 == 6).then_some(())?;
                (b(l3 + 6)? == 17).then_some(())?;
                l3 + 40
            };
            (h(udp + 2)? == u64::from(GTPU_PORT)).then_some(())?;
            let gtp = udp + 8;
            let flags = b(gtp)?;
            (flags & 0xf0 == 0x30).then_some(())?;
            (b(gtp + 1)? == 255).then_some(())?;
            let inner = if flags & 0x07 == 0 {
                gtp + 8
            } else if flags & 0x04 == 0 {
                gtp + 12
            } else {
                let mut cur = gtp + 12;
                let mut done = false;
                for _ in 0..MAX_EXT {
                    if b(cur - 1)? == 0 {
                        done = true;
                        break;
                    }
                    let len = usize::try_from(b(cur)?).ok()?;
                    (len != 0).then_some(())?;
                    cur += len * 4;
                }
                if !done {
                    (b(cur - 1)? == 0).then_some(())?;
                }
                cur
            };
            match b(inner)? >> 4 {
                4 => w(inner + 12),
                6 => Some(w(inner + 8)? << 32 | w(inner + 12)?),
                _ => None,
            }
        }
    }
}

/// The worker (of `n`) that owns an Ethernet frame arriving on `port`: the plain-Rust
/// reference of the fanout program.
pub fn fanout_worker(port: Port, frame: &[u8], n: usize) -> usize {
    match fanout_key(Ingress::of(port), frame) {
        Some(k) => worker_of(ue_hash_key(k), n),
        None => 0,
    }
}

/// A loaded fanout program.
#[derive(Debug)]
pub struct Program {
    ebpf: Ebpf,
}

impl Program {
    /// The fanout program for packets arriving on `port`, for `n` workers; the error carries
    /// the end of the verifier's log.
    pub fn fanout(port: Port, n: usize) -> io::Result<Program> {
        let workers = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let gtpu = u32::from(Ingress::of(port) == Ingress::Gtpu);
        let mut ebpf = EbpfLoader::new()
            .override_global("workers", &workers, true)
            .override_global("gtpu", &gtpu, true)
            .load(OBJECT)
            .map_err(|e| bpf::error("loading the fanout object", &e))?;
        let prog: &mut SocketFilter = ebpf
            .program_mut(NAME)
            .ok_or_else(|| io::Error::other("fanout object without its program"))?
            .try_into()
            .map_err(|e| bpf::error("fanout program", &e))?;
        prog.load()
            .map_err(|e| bpf::error("BPF_PROG_LOAD (fanout)", &e))?;
        Ok(Program { ebpf })
    }

    /// The fanout program for `port` and `n` workers, loaded once per process and shared by
    /// every socket that asks for the same (loading parses the kernel's BTF: a tenth of a
    /// second; the members of a group all set the same program).
    pub fn shared(port: Port, n: usize) -> io::Result<Arc<Program>> {
        static LOADED: Mutex<Vec<(Ingress, usize, Arc<Program>)>> = Mutex::new(Vec::new());
        let ingress = Ingress::of(port);
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, p)) = loaded.iter().find(|(i, m, _)| *i == ingress && *m == n) {
            return Ok(p.clone());
        }
        let p = Arc::new(Program::fanout(port, n)?);
        loaded.push((ingress, n, p.clone()));
        Ok(p)
    }

    fn prog(&self) -> io::Result<&SocketFilter> {
        self.ebpf
            .program(NAME)
            .ok_or_else(|| io::Error::other("fanout program gone"))?
            .try_into()
            .map_err(|e| bpf::error("fanout program", &e))
    }

    /// The program's descriptor, for PACKET_FANOUT_DATA.
    pub fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        let p = self.prog()?;
        Ok(p.fd()
            .map_err(|e| bpf::error("fanout program", &e))?
            .as_fd())
    }

    /// Runs the program once over `frame` (an Ethernet frame) with BPF_PROG_TEST_RUN and
    /// returns its return value.
    pub fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        Ok(bpf::run(self.prog()?, frame, &mut [], 1, None)?.retval)
    }
}

#[cfg(test)]
pub(crate) mod tests;
