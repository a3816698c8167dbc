//! The XDP program in front of the sockets (C: `bpf/xdp.bpf.c`, built by clang, loaded with
//! aya) and [`xdp_worker`], its specification in plain Rust.
//!
//! What goes to the UPF (XDP_REDIRECT into the socket of the arriving queue):
//! - on N3/N9 (`Filter::gtpu`): unfragmented IPv4/IPv6 UDP to port 2152 addressed to one of
//!   the local addresses;
//! - on N6: IPv4/IPv6 not addressed to a local address, except multicast/broadcast
//!   (224.0.0.0/4 and above, ff00::/8), IPv6 link-local destinations and ICMPv6
//!   router/neighbour discovery (types 133–137).
//!
//! Everything else (ARP, ND, PFCP, ping to the host, …) gets XDP_PASS: the kernel keeps
//! working, and neighbour resolution with it. One VLAN tag (802.1Q or 802.1ad) is skipped.
//!
//! Steering: the program computes the worker that owns the packet's UE exactly like
//! `upf_packet::steer::{ue_hash, worker_of}` (key: the IPv4 address, or the upper 64 bits of
//! the IPv6 address; the inner source of a G-PDU, the destination of plain IP), and writes it
//! into the frame's XDP metadata (`[META_MAGIC, worker]`, 8 octets in front of the frame),
//! which AF_XDP copies into the UMEM ahead of the frame. The kernel redirects a frame only to
//! a socket bound to the queue it arrived on, so the program cannot move a frame to another
//! worker's queue; the receiving socket reports each packet's owner and the runtime hands
//! packets of other workers over in software. GTP-U messages that are not G-PDUs (Echo, Error
//! Indication, End Marker) and G-PDUs whose header or inner packet cannot be read go to
//! worker 0, like the software steering. UEs in `Filter::spread` (peak-rate UEs, in the
//! `spread4`/`spread6` maps) are steered by `upf_packet::steer::flow_hash_key` of the flow, as
//! by the fanout program; one whose ports are cut off goes to worker 0.
//!
//! Queue groups (seed 001, `Filter::classes`): each receive queue has a socket per group and
//! the program redirects into the one of the packet's group ([`xdp_group`]: the
//! `upf_packet::classes::Classes` of the packet, with the same tables), so that a worker
//! reads a high-priority packet before the lower groups' backlog, not behind it. The group
//! is also written into the metadata (bits 24–31 of the worker word).

use crate::bpf;
use aya::maps::HashMap;
use aya::{Ebpf, EbpfLoader};
use std::io;
use std::net::IpAddr;
use upf_packet::classes::{Classes, CODES};
use upf_packet::steer::{self, Spread};
use upf_packet::Port;

/// First word of the metadata the program writes in front of a frame.
pub const META_MAGIC: u32 = 0x5550_4658;
/// Octets of metadata: magic, worker.
pub const META_LEN: usize = 8;
pub const GTPU_PORT: u16 = 2152;
/// Extension headers followed at most; a longer chain steers to worker 0.
pub const MAX_EXT: usize = 8;
/// Bound on header offsets (keeps the verifier's ranges finite; beyond it: worker 0).
const MAX_OFF: usize = 1600;
/// Spread UEs of each family the program's maps hold (`MAX_SPREAD` in bpf/steer.h).
pub const MAX_SPREAD: usize = crate::fanout::MAX_SPREAD;
/// Local addresses of each family the program knows at most.
pub const MAX_LOCAL: usize = 16;

/// The object clang built from `bpf/xdp.bpf.c`: the steering program `upf_xdp`, its XSKMAP
/// `xsks`, and `upf_probe` (passes everything).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp.bpf.o"));
pub(crate) const PROGRAM: &str = "upf_xdp";
pub(crate) const PROBE: &str = "upf_probe";
pub(crate) const XSK_MAP: &str = "xsks";

/// What the program lets through to the sockets of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// N3/N9: GTP-U to `local`; otherwise (N6): IP not addressed to `local`.
    pub gtpu: bool,
    /// The interface's own addresses (N3/N9: the GTP-U endpoints).
    pub local: Vec<IpAddr>,
    /// Workers to steer to (at least 1).
    pub workers: u32,
    /// Peak-rate UEs steered per flow (`upf_packet::steer::flow_hash_key`), not by UE.
    pub spread: Spread,
    /// Queue groups, a socket each per receive queue; `None`: one socket per queue.
    pub classes: Option<Classes>,
}

impl Filter {
    pub fn new(gtpu: bool, local: Vec<IpAddr>, workers: u32) -> Self {
        Self {
            gtpu,
            local,
            workers: workers.clamp(1, 1 << 16),
            spread: Spread::default(),
            classes: None,
        }
    }

    /// The same, with a socket per queue group on each queue, chosen by `classes`.
    pub fn with_classes(mut self, classes: Option<Classes>) -> Self {
        self.classes = classes;
        self
    }

    /// Sockets on each receive queue: one per queue group.
    pub fn groups(&self) -> u32 {
        self.classes
            .as_ref()
            .map_or(1, |c| u32::try_from(c.groups()).unwrap_or(1))
    }

    /// The same, spreading these UEs over the workers per flow.
    pub fn with_spread(mut self, ues: impl IntoIterator<Item = IpAddr>) -> Self {
        self.spread = Spread::new(ues);
        self
    }

    fn v4(&self) -> impl Iterator<Item = [u8; 4]> + '_ {
        self.local.iter().filter_map(|a| match a {
            IpAddr::V4(v) => Some(v.octets()),
            IpAddr::V6(_) => None,
        })
    }

    fn v6(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.local.iter().filter_map(|a| match a {
            IpAddr::V6(v) => Some(v.octets()),
            IpAddr::V4(_) => None,
        })
    }
}

/// The worker (of `n`) owning a steering key: [`upf_packet::steer`]'s hash.
pub fn worker_of_key(key: u64, n: u32) -> u32 {
    let w = steer::worker_of(steer::ue_hash_key(key), n.max(1) as usize);
    u32::try_from(w).unwrap_or(0)
}

fn be16(f: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?]))
}

fn key_of(f: &[u8], o: usize, len: usize) -> Option<u64> {
    let b = f.get(o..o + len)?;
    Some(b.iter().fold(0u64, |k, &x| (k << 8) | u64::from(x)))
}

/// The program's decision on an Ethernet frame, in plain Rust: `None` for XDP_PASS, else the
/// worker owning the packet (among `filter.workers`). The loaded program agrees with it on
/// every frame (tested through BPF_PROG_TEST_RUN).
pub fn xdp_worker(frame: &[u8], filter: &Filter) -> Option<u32> {
    let mut et = be16(frame, 12)?;
    let mut l3 = 14;
    if et == 0x8100 || et == 0x88a8 {
        et = be16(frame, 16)?;
        l3 = 18;
    }
    match et {
        0x0800 => {
            let ip = frame.get(l3..l3 + 20)?;
            if ip[0] >> 4 != 4 || ip[0] & 0xf < 5 {
                return None;
            }
            let ihl = usize::from(ip[0] & 0xf) * 4;
            let dst = [ip[16], ip[17], ip[18], ip[19]];
            let local = filter.v4().any(|a| a == dst);
            if filter.gtpu {
                if be16(ip, 6)? & 0x3fff != 0 || !local || ip[9] != 17 {
                    return None;
                }
                udp(frame, l3 + ihl, filter)
            } else {
                if dst[0] >= 224 || local {
                    return None;
                }
                let key = u64::from(u32::from_be_bytes(dst));
                Some(steer_ref(frame, l3, true, false, key, filter).unwrap_or(0))
            }
        }
        0x86dd => {
            let ip = frame.get(l3..l3 + 40)?;
            if ip[0] >> 4 != 6 {
                return None;
            }
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            let local = filter.v6().any(|a| a == dst);
            if filter.gtpu {
                if !local || ip[6] != 17 {
                    return None;
                }
                udp(frame, l3 + 40, filter)
            } else {
                if dst[0] == 0xff || (dst[0] == 0xfe && dst[1] & 0xc0 == 0x80) || local {
                    return None;
                }
                if ip[6] == 58 && frame.get(l3 + 40).is_some_and(|t| (133..=137).contains(t)) {
                    return None;
                }
                let key = key_of(ip, 24, 8)?;
                Some(steer_ref(frame, l3, false, false, key, filter).unwrap_or(0))
            }
        }
        _ => None,
    }
}

/// The queue group the program puts a frame it redirects into (0 without classes): the
/// `Classes` of its IP packet, as arriving on N3 (`Filter::gtpu`) or N6.
pub fn xdp_group(frame: &[u8], filter: &Filter) -> u8 {
    let Some(c) = &filter.classes else {
        return 0;
    };
    let et = be16(frame, 12).unwrap_or(0);
    let l3 = if et == 0x8100 || et == 0x88a8 { 18 } else { 14 };
    let port = if filter.gtpu { Port::N3 } else { Port::N6 };
    c.group_of_ip(port, frame.get(l3..).unwrap_or(&[]))
}

fn udp(frame: &[u8], l4: usize, filter: &Filter) -> Option<u32> {
    if l4 + 8 > frame.len() || be16(frame, l4 + 2)? != GTPU_PORT {
        return None;
    }
    Some(gtp_worker(frame, l4 + 8, filter).unwrap_or(0))
}

/// The worker of a packet whose IP header (checked: 20 or 40 octets) is at `ip` and whose UE
/// has steering key `key` (the source when `up`): by the UE, or for a spread UE by
/// [`steer::flow_hash_key`] (`None`, worker 0, when the ports are cut off).
fn steer_ref(f: &[u8], ip: usize, v4: bool, up: bool, key: u64, filter: &Filter) -> Option<u32> {
    let n = filter.workers;
    if !filter.spread.contains_key(v4, key) {
        return Some(worker_of_key(key, n));
    }
    let (peer, proto, l4) = if v4 {
        let peer = key_of(f, ip + if up { 16 } else { 12 }, 4)?;
        let l4 = (be16(f, ip + 6)? & 0x1fff == 0).then(|| ip + usize::from(f[ip] & 0xf) * 4);
        (peer, f[ip + 9], l4)
    } else {
        let a = ip + if up { 24 } else { 8 };
        (
            key_of(f, a, 8)? ^ key_of(f, a + 8, 8)?,
            f[ip + 6],
            Some(ip + 40),
        )
    };
    let (mut ue_port, mut peer_port) = (0, 0);
    if let Some(l4) = l4.filter(|_| steer::has_ports(proto)) {
        let (s, d) = (be16(f, l4)?, be16(f, l4 + 2)?);
        (ue_port, peer_port) = if up { (s, d) } else { (d, s) };
    }
    let h = steer::flow_hash_key(key, peer, ue_port, peer_port, proto);
    u32::try_from(steer::worker_of(h, n.max(1) as usize)).ok()
}

/// The owner of a GTP-U message at `g`; `None` (worker 0) when it is not a readable G-PDU.
fn gtp_worker(f: &[u8], g: usize, filter: &Filter) -> Option<u32> {
    let len = f.len();
    if g + 8 > len {
        return None;
    }
    let flags = f[g];
    if flags >> 5 != 1 || flags & 0x10 == 0 || f[g + 1] != 255 {
        return None;
    }
    let mut off = g + 8;
    if flags & 7 != 0 {
        if g + 12 > len {
            return None;
        }
        let mut next = f[g + 11];
        off = g + 12;
        if flags & 4 != 0 {
            for _ in 0..MAX_EXT {
                if next == 0 {
                    break;
                }
                let l = usize::from(*f.get(off)?);
                if l == 0 {
                    return None;
                }
                off += 4 * l;
                if off > MAX_OFF || off > len {
                    return None;
                }
                next = f[off - 1];
            }
            if next != 0 {
                return None;
            }
        }
    }
    if off > MAX_OFF {
        return None;
    }
    let (key, v4) = match f.get(off)? >> 4 {
        4 => (key_of(f, off + 12, 4).filter(|_| off + 20 <= len)?, true),
        6 => (key_of(f, off + 8, 8).filter(|_| off + 40 <= len)?, false),
        _ => return None,
    };
    steer_ref(f, off, v4, true, key, filter)
}

/// The object with the program's constants set for `filter` and an XSKMAP of `queues`
/// entries, not yet loaded into the kernel (see [`load`]).
pub(crate) fn object(filter: &Filter, queues: u32) -> io::Result<Ebpf> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let mut local4 = [0u32; MAX_LOCAL];
    let mut n4 = 0usize;
    for a in filter.v4() {
        *local4
            .get_mut(n4)
            .ok_or_else(|| bad(format!("XDP filter: more than {MAX_LOCAL} IPv4 addresses")))? =
            u32::from_ne_bytes(a);
        n4 += 1;
    }
    let mut local6 = [[0u32; 4]; MAX_LOCAL];
    let mut n6 = 0usize;
    for a in filter.v6() {
        let slot = local6
            .get_mut(n6)
            .ok_or_else(|| bad(format!("XDP filter: more than {MAX_LOCAL} IPv6 addresses")))?;
        for (w, c) in slot.iter_mut().zip(a.chunks_exact(4)) {
            *w = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        }
        n6 += 1;
    }
    // Both at most MAX_LOCAL (checked above).
    let (n4, n6) = (
        u32::try_from(n4).unwrap_or(0),
        u32::try_from(n6).unwrap_or(0),
    );
    let gtpu = u32::from(filter.gtpu);
    let sp = &filter.spread;
    if sp.v4.len() > MAX_SPREAD || sp.v6.len() > MAX_SPREAD {
        return Err(bad(format!(
            "XDP filter: more than {MAX_SPREAD} spread UEs of one family"
        )));
    }
    let any = u32::from(!sp.is_empty());
    let (mut qfi, mut dscp) = ([0u8; CODES], [0u8; CODES]);
    if let Some(c) = &filter.classes {
        for (v, (q, d)) in (0u8..).zip(qfi.iter_mut().zip(dscp.iter_mut())) {
            *q = c.of_qfi(v);
            *d = c.of_dscp(v);
        }
    }
    let groups = filter.groups();
    let mut ebpf = EbpfLoader::new()
        .override_global("workers", &filter.workers, true)
        .override_global("gtpu", &gtpu, true)
        .override_global("n_local4", &n4, true)
        .override_global("local4", &local4, true)
        .override_global("n_local6", &n6, true)
        .override_global("local6", &local6, true)
        .override_global("spread", &any, true)
        .override_global("groups", &groups, true)
        .override_global("qfi_group", &qfi, true)
        .override_global("dscp_group", &dscp, true)
        .map_max_entries(XSK_MAP, queues.max(1) * groups)
        .load(OBJECT)
        .map_err(|e| bpf::error("loading the XDP object", &e))?;
    let no_map = |m: &str| io::Error::other(format!("XDP object without its {m} map"));
    {
        let mut m4: HashMap<_, u32, u8> =
            HashMap::try_from(ebpf.map_mut("spread4").ok_or_else(|| no_map("spread4"))?)
                .map_err(|e| bpf::error("spread4 map", &e))?;
        for k in &sp.v4 {
            m4.insert(k, 1, 0)
                .map_err(|e| bpf::error("filling spread4", &e))?;
        }
    }
    {
        let mut m6: HashMap<_, u64, u8> =
            HashMap::try_from(ebpf.map_mut("spread6").ok_or_else(|| no_map("spread6"))?)
                .map_err(|e| bpf::error("spread6 map", &e))?;
        for k in &sp.v6 {
            m6.insert(k, 1, 0)
                .map_err(|e| bpf::error("filling spread6", &e))?;
        }
    }
    Ok(ebpf)
}

/// Loads program `name` of `ebpf` into the kernel.
pub(crate) fn load<'a>(ebpf: &'a mut Ebpf, name: &str) -> io::Result<&'a mut aya::programs::Xdp> {
    let prog: &mut aya::programs::Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| io::Error::other(format!("XDP object without {name}")))?
        .try_into()
        .map_err(|e| bpf::error(name, &e))?;
    prog.load()
        .map_err(|e| bpf::error(&format!("BPF_PROG_LOAD (XDP {name})"), &e))?;
    Ok(prog)
}
