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
//! Spread (peak-rate) UEs, whose key is in the `spread4`/`spread6` maps filled at load, go by
//! the flow instead: `flow_hash_key(key, peer, ue_port, peer_port, proto)` of
//! `upf_packet::steer` (see [`fanout_worker_spread`]); the lookup is skipped when none is.
//!
//! Queue groups (seed 001, [`Program::fanout_groups`] with `upf_packet::classes::Classes`):
//! each worker has a socket per group, and the program returns the member `worker × groups +
//! group` ([`fanout_member`]), the group being `Classes::group_of_ip` of the packet (the QFI
//! of a G-PDU's PDU Session Container on N3/N9, the DSCP on N6) with the same tables, so a
//! worker can read high-priority packets before the lower groups' backlog. Without classes
//! the member is the worker.
//!
//! The program is C (`bpf/fanout.bpf.c`, BPF_PROG_TYPE_SOCKET_FILTER), built by clang and
//! loaded with aya. It reads the packet with the legacy LD_ABS/LD_IND loads, each checked
//! against the packet's length first: a read outside the packet makes the worker 0 (and the
//! group part, computed apart, the lowest group, as `Classes` has it), and [`fanout_worker`]
//! (the plain-Rust reference) treats every out-of-range read the same way. (Unchecked, such a
//! load would end the program with 0: worker 0, but also group 0, the highest.) The tests run
//! program and reference over generated frames with BPF_PROG_TEST_RUN.
//!
//! On receive the kernel runs the program with the packet starting at the network header and
//! `skb->protocol` the Ethertype (VLAN tags already taken off); BPF_PROG_TEST_RUN starts it after
//! the Ethernet header with a tag still in place, so the program also skips one 802.1Q/802.1ad
//! tag, like the reference.

use crate::bpf;
use crate::Port;
use aya::maps::HashMap;
use aya::programs::SocketFilter;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use upf_packet::classes::{Classes, CODES};
use upf_packet::steer::{flow_hash_key, has_ports, ue_hash_key, worker_of, Spread};

/// Extension headers walked at most (the chain is unrolled in the program).
pub const MAX_EXT: usize = 8;

/// Spread UEs of each family the program's maps hold (`MAX_SPREAD` in bpf/steer.h).
pub const MAX_SPREAD: usize = 1024;

fn no_map(name: &str) -> io::Error {
    io::Error::other(format!("fanout object without its {name} map"))
}

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
    fanout_ue(ingress, frame).map(|u| u.key)
}

/// Where a frame's UE was found.
struct Ue {
    key: u64,
    /// Offset of the IP header that holds the UE address.
    ip: usize,
    v4: bool,
}

fn fanout_ue(ingress: Ingress, frame: &[u8]) -> Option<Ue> {
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
            let key = if v4 {
                (b(l3)? >> 4 == 4).then_some(())?;
                w(l3 + 16)?
            } else {
                (b(l3)? >> 4 == 6).then_some(())?;
                w(l3 + 24)? << 32 | w(l3 + 28)?
            };
            Some(Ue { key, ip: l3, v4 })
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
            let (key, v4) = match b(inner)? >> 4 {
                4 => (w(inner + 12)?, true),
                6 => (w(inner + 8)? << 32 | w(inner + 12)?, false),
                _ => return None,
            };
            Some(Ue { key, ip: inner, v4 })
        }
    }
}

/// The worker (of `n`) that owns an Ethernet frame arriving on `port`: the plain-Rust
/// reference of the fanout program without spread UEs.
pub fn fanout_worker(port: Port, frame: &[u8], n: usize) -> usize {
    fanout_worker_spread(port, frame, n, &Spread::default())
}

/// The worker (of `n`) an Ethernet frame arriving on `port` goes to: the plain-Rust reference
/// of the fanout program. A spread UE's packets go by [`flow_hash_key`] of the UE's key, the
/// peer address, the ports seen from the UE (TCP/UDP/SCTP, not in a non-first IPv4 fragment)
/// and the protocol; a read past the end sends the frame to worker 0 there too.
pub fn fanout_worker_spread(port: Port, frame: &[u8], n: usize, spread: &Spread) -> usize {
    let ingress = Ingress::of(port);
    let Some(ue) = fanout_ue(ingress, frame) else {
        return 0;
    };
    if !spread.contains_key(ue.v4, ue.key) {
        return worker_of(ue_hash_key(ue.key), n);
    }
    spread_hash(frame, &ue, ingress == Ingress::Gtpu).map_or(0, |h| worker_of(h, n))
}

/// The fanout member an Ethernet frame arriving on `port` goes to, of `n` workers with a
/// member per queue group of `classes` each (worker-major): `worker × groups + group`, where
/// the worker is [`fanout_worker_spread`]'s and the group `Classes::group_of_ip` of what
/// follows the Ethernet header (and one VLAN tag). Without classes, the worker. The plain-Rust
/// reference of the fanout program.
pub fn fanout_member(
    port: Port,
    frame: &[u8],
    n: usize,
    spread: &Spread,
    classes: Option<&Classes>,
) -> usize {
    let w = fanout_worker_spread(port, frame, n, spread);
    let Some(c) = classes else {
        return w;
    };
    let tagged = matches!(frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
    let l3 = if tagged { 18 } else { 14 };
    let g = c.group_of_ip(port, frame.get(l3..).unwrap_or(&[]));
    w * c.groups() + usize::from(g)
}

/// The flow hash of a spread UE's packet, read as the program reads it (`None`: a read past
/// the end).
fn spread_hash(frame: &[u8], ue: &Ue, up: bool) -> Option<u32> {
    let b = |o: usize| frame.get(o).copied().map(u64::from);
    let h = |o: usize| Some(b(o)? << 8 | b(o + 1)?);
    let w = |o: usize| Some(h(o)? << 16 | h(o + 2)?);
    let ip = ue.ip;
    let (peer, proto, l4) = if ue.v4 {
        let peer = w(ip + if up { 16 } else { 12 })?;
        let proto = b(ip + 9)?;
        let l4 = if h(ip + 6)? & 0x1fff == 0 {
            Some(ip + usize::try_from((b(ip)? & 0xf) << 2).ok()?)
        } else {
            None
        };
        (peer, proto, l4)
    } else {
        let o = ip + if up { 24 } else { 8 };
        let peer = (w(o)? << 32 | w(o + 4)?) ^ (w(o + 8)? << 32 | w(o + 12)?);
        (peer, b(ip + 6)?, Some(ip + 40))
    };
    let proto = u8::try_from(proto).ok()?;
    let (mut up_port, mut peer_port) = (0, 0);
    if let Some(l4) = l4.filter(|_| has_ports(proto)) {
        let (s, d) = (h(l4)?, h(l4 + 2)?);
        let (u, p) = if up { (s, d) } else { (d, s) };
        up_port = u16::try_from(u).ok()?;
        peer_port = u16::try_from(p).ok()?;
    }
    Some(flow_hash_key(ue.key, peer, up_port, peer_port, proto))
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
        Self::fanout_spread(port, n, &Spread::default())
    }

    /// The fanout program for `port` and `n` workers that spreads the UEs of `spread` over
    /// the workers per flow (at most [`MAX_SPREAD`] of each family).
    pub fn fanout_spread(port: Port, n: usize, spread: &Spread) -> io::Result<Program> {
        Self::fanout_groups(port, n, spread, None)
    }

    /// The same with, when `classes` are given, a member per queue group for each worker:
    /// the program returns `worker × groups + group` ([`fanout_member`]).
    pub fn fanout_groups(
        port: Port,
        n: usize,
        spread: &Spread,
        classes: Option<&Classes>,
    ) -> io::Result<Program> {
        if spread.v4.len() > MAX_SPREAD || spread.v6.len() > MAX_SPREAD {
            return Err(io::Error::other(format!(
                "more than {MAX_SPREAD} spread UEs of one family"
            )));
        }
        let workers = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let gtpu = u32::from(Ingress::of(port) == Ingress::Gtpu);
        let any = u32::from(!spread.is_empty());
        let (mut qfi, mut dscp) = ([0u8; CODES], [0u8; CODES]);
        let mut groups = 1u32;
        if let Some(c) = classes {
            for (v, (q, d)) in (0u8..).zip(qfi.iter_mut().zip(dscp.iter_mut())) {
                *q = c.of_qfi(v);
                *d = c.of_dscp(v);
            }
            groups = u32::try_from(c.groups()).unwrap_or(1);
        }
        let mut ebpf = EbpfLoader::new()
            .override_global("workers", &workers, true)
            .override_global("gtpu", &gtpu, true)
            .override_global("spread", &any, true)
            .override_global("groups", &groups, true)
            .override_global("qfi_group", &qfi, true)
            .override_global("dscp_group", &dscp, true)
            .load(OBJECT)
            .map_err(|e| bpf::error("loading the fanout object", &e))?;
        {
            let mut m4: HashMap<_, u32, u8> =
                HashMap::try_from(ebpf.map_mut("spread4").ok_or_else(|| no_map("spread4"))?)
                    .map_err(|e| bpf::error("spread4 map", &e))?;
            for k in &spread.v4 {
                m4.insert(k, 1, 0)
                    .map_err(|e| bpf::error("filling spread4", &e))?;
            }
        }
        {
            let mut m6: HashMap<_, u64, u8> =
                HashMap::try_from(ebpf.map_mut("spread6").ok_or_else(|| no_map("spread6"))?)
                    .map_err(|e| bpf::error("spread6 map", &e))?;
            for k in &spread.v6 {
                m6.insert(k, 1, 0)
                    .map_err(|e| bpf::error("filling spread6", &e))?;
            }
        }
        let prog: &mut SocketFilter = ebpf
            .program_mut(NAME)
            .ok_or_else(|| io::Error::other("fanout object without its program"))?
            .try_into()
            .map_err(|e| bpf::error("fanout program", &e))?;
        prog.load()
            .map_err(|e| bpf::error("BPF_PROG_LOAD (fanout)", &e))?;
        Ok(Program { ebpf })
    }

    /// The fanout program for `port`, `n` workers and the queue groups of `classes`, loaded
    /// once per process and shared by every socket that asks for the same (loading parses the
    /// kernel's BTF: a tenth of a second; the members of a group all set the same program).
    pub fn shared(
        port: Port,
        n: usize,
        spread: &Spread,
        classes: Option<&Classes>,
    ) -> io::Result<Arc<Program>> {
        type Loaded = Vec<(Ingress, usize, Spread, Option<Classes>, Arc<Program>)>;
        static LOADED: Mutex<Loaded> = Mutex::new(Vec::new());
        let ingress = Ingress::of(port);
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((.., p)) = loaded.iter().find(|(i, m, s, c, _)| {
            *i == ingress && *m == n && s == spread && c.as_ref() == classes
        }) {
            return Ok(p.clone());
        }
        let p = Arc::new(Program::fanout_groups(port, n, spread, classes)?);
        loaded.push((ingress, n, spread.clone(), classes.cloned(), p.clone()));
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
