//! The AF_PACKET backend: one socket on one interface (with queue groups, one per group),
//! owned by one worker.
//!
//! - **Receive**: a TPACKET_V3 ring mapped into the process (`block_count` blocks of
//!   `block_size` octets, 32 × 128 KiB by default). A block handed to user space is walked packet
//!   by packet and given back to the kernel once consumed (a batch may end in the middle of a
//!   block; the next one continues there). Each frame loses its Ethernet header (and one
//!   802.1Q/802.1ad tag), non-IP frames and frames for other hosts are discarded
//!   (`rx_discarded`), and the IP packet (trimmed to its own length: Ethernet pads short
//!   frames) is copied into a [`Pool`] buffer after its headroom.
//! - **Transmit**: each packet gets an Ethernet header in its headroom (source: the link's
//!   MAC; destination: [`NextHops::mac_for`] its IP destination, which for N3/N9 is the outer
//!   destination, the gNB or peer UPF) and the batch leaves in one `sendmmsg(2)`. Packets
//!   without a resolved next hop are counted in `tx_dropped`. Why `sendmmsg` rather than a
//!   TPACKET_V2 TX ring: see [`AfPacketIo::tx_batch`].
//! - **Fanout**: several workers open a socket each on the same interface and join one
//!   PACKET_FANOUT group, **in worker order** (the kernel numbers group members in join order,
//!   and the eBPF program returns a member index). The program ([`crate::fanout`]) returns the
//!   owning worker by the steering hash of `upf_packet::steer` (with queue groups, that
//!   worker's socket of the packet's group); when it cannot be loaded or attached, the group
//!   is PACKET_FANOUT_HASH (flow hash: no UE pinning, software steering needed) and
//!   [`PacketIo::describe`] says so. If a member socket closes, the kernel moves
//!   the last member into its slot: restart every worker of the group together.
//! - **Queue groups** (seed 001, [`AfPacketConfig::classes`]): each worker opens a socket and
//!   ring per queue group, group 0 (the highest) first, so member `w × groups + g` of the
//!   fanout group (at most 256 members) is worker w's socket of group g, and the program
//!   returns that member: the
//!   packet's group by the QFI of its PDU Session Container (N3/N9) or its DSCP (N6), as
//!   `upf_packet::classes::Classes` has it ([`crate::fanout::fanout_member`]). A worker reads
//!   a group's ring alone ([`PacketIo::rx_group`]) or all of them, highest first; it sends on
//!   group 0's socket. The worker's ring memory is split, not multiplied: each group's ring has
//!   `block_count` blocks of `block_size / groups` (at least a page), so each rides out the
//!   same stall in milliseconds at moderate rates (a block is handed over after
//!   `block_timeout_ms` however full) and the worker's rings hold as many octets as one did. A
//!   full group loses its own packets, not another group's. Without the eBPF program there
//!   are no groups: one socket per worker in a HASH group, the worker classifies in software.
//! - Outgoing frames are not seen (PACKET_IGNORE_OUTGOING, and the fanout group's
//!   IGNORE_OUTGOING flag); IP fragments are not reassembled (no FANOUT_FLAG_DEFRAG).

use crate::fanout::Program;
use crate::link::{Link, NextHops};
use crate::{IoStats, PacketIo, Pool};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;
use upf_packet::classes::Classes;
use upf_packet::HEADROOM;
use upf_packet::{Packet, Port};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_EBPF: u32 = 7;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_HLEN: usize = 14;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const PACKET_OTHERHOST: u8 = 3;
const PACKET_OUTGOING: u8 = 4;
/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`: where the sockaddr_ll follows the header.
const TPACKET3_HDRLEN: usize = 48;
/// Messages per `sendmmsg` call at most (the kernel's UIO_MAXIOV).
const MAX_MMSG: usize = 1024;

/// Where a worker's socket sits in a fanout group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// The group id (one per interface and port, shared by the workers).
    pub group: u16,
    /// This socket's worker; sockets must be opened in worker order, 0 first.
    pub worker: usize,
    /// Workers in the group.
    pub workers: usize,
}

/// How an [`AfPacketIo`] is opened.
#[derive(Debug, Clone)]
pub struct AfPacketConfig {
    pub interface: String,
    pub port: Port,
    /// RX ring block size, a multiple of the page size.
    pub block_size: u32,
    pub block_count: u32,
    /// How long the kernel fills a block before handing it over anyway (ms): the latency at
    /// low rates.
    pub block_timeout_ms: u32,
    pub fanout: Option<Fanout>,
    /// Peak-rate UEs the fanout program spreads over the workers per flow.
    pub spread_ues: Vec<std::net::IpAddr>,
    /// Queue groups, a socket and ring each, chosen by the fanout program (needs `fanout`,
    /// one worker too); `None`: one socket.
    pub classes: Option<Classes>,
}

impl AfPacketConfig {
    pub fn new(interface: &str, port: Port) -> Self {
        Self {
            interface: interface.to_string(),
            port,
            // 4 MiB in all, as 32 blocks rather than 4 × 1 MiB: a block is handed over when
            // full or after `block_timeout_ms`, so at moderate rates each block holds only about
            // a millisecond of traffic, and the ring rides out a stall of the worker of about
            // `block_count` milliseconds whatever the block size (docs/benchmarks/daemon.md).
            block_size: 128 << 10,
            block_count: 32,
            block_timeout_ms: 1,
            fanout: None,
            spread_ues: Vec::new(),
            classes: None,
        }
    }
}

/// How the fanout group of a socket distributes packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanoutMode {
    None,
    /// UE pinning by the eBPF program.
    Ebpf,
    /// Flow hash, with the reason the eBPF program is not in use.
    Hash(String),
}

/// The mapped RX ring.
#[derive(Debug)]
struct Ring {
    base: *mut u8,
    len: usize,
    block_size: usize,
    blocks: usize,
}

// SAFETY: the mapping is owned by its Ring alone (unmapped on drop) and only touched through
// `&mut self` of the owning AfPacketIo, so moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly the mapping made in `open`, unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl Ring {
    /// The status word of block `i` (block_desc.hdr.bh1.block_status, offset 8).
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: i < blocks, so the word lies within the mapping; it is 4-aligned (blocks are
        // page-aligned); the kernel accesses it concurrently, hence atomically here.
        unsafe { AtomicU32::from_ptr(self.base.add(i * self.block_size + 8).cast()) }
    }

    /// Block `i` as bytes. Only called while the block belongs to user space
    /// (TP_STATUS_USER observed with Acquire): the kernel does not write it then.
    fn block(&self, i: usize) -> &[u8] {
        // SAFETY: the block lies within the mapping (i < blocks) and is not written by the
        // kernel until we store TP_STATUS_KERNEL, after the last use of this slice.
        unsafe { std::slice::from_raw_parts(self.base.add(i * self.block_size), self.block_size) }
    }
}

/// Scratch space for `sendmmsg`; holds raw pointers only during one `tx_batch` call.
struct TxScratch {
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Per packet of the batch: which sockaddr (0: IPv4, 1: IPv6), or None if dropped.
    kinds: Vec<Option<usize>>,
}

// SAFETY: the pointers in iovs/msgs are written and used within one `tx_batch` call (on the
// calling thread) and never dereferenced afterwards; between calls they are stale data.
unsafe impl Send for TxScratch {}

impl std::fmt::Debug for TxScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TxScratch({} slots)", self.msgs.capacity())
    }
}

/// A TPACKET_V3 socket bound to the interface, its RX ring, and where reading it stands.
#[derive(Debug)]
struct RxSocket {
    fd: OwnedFd,
    ring: Ring,
    /// Block being read, the offset of its next packet, packets left in it.
    cur: usize,
    pkt_off: usize,
    pkts_left: u32,
    in_block: bool,
    /// Frames the kernel dropped for a full ring, so far.
    drops: u64,
}

/// An AF_PACKET socket on one interface for one worker (with queue groups: one per group).
#[derive(Debug)]
pub struct AfPacketIo {
    /// By queue group, the highest first; group 0's also sends.
    socks: Vec<RxSocket>,
    /// Each ring's block size.
    block_size: u32,
    port: Port,
    hops: NextHops,
    /// sockaddr_ll for IPv4 and IPv6 frames (protocol and interface of a send).
    sll: [libc::sockaddr_ll; 2],
    tx: TxScratch,
    stats: IoStats,
    mode: FanoutMode,
    cfg: AfPacketConfig,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v is a valid T of the size passed; the kernel copies it during the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(v).cast(),
            crate::sys::socklen_of::<T>(),
        )
    })
    .map(drop)
}

fn ctx(what: &str) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("AF_PACKET {what}: {e}"))
}

/// struct tpacket_req3.
#[repr(C)]
#[derive(Debug)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

fn sockaddr_ll(protocol: u16, ifindex: u32) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::c_ushort::try_from(libc::AF_PACKET).unwrap_or(17);
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = libc::c_int::try_from(ifindex).unwrap_or(0);
    sll.sll_halen = 6;
    sll
}

impl RxSocket {
    /// A socket with a ring of `block_count` blocks of `block_size`, bound to `ifindex`.
    fn open(ifindex: u32, block_size: u32, cfg: &AfPacketConfig) -> io::Result<RxSocket> {
        // Protocol 0: nothing is received before the ring exists and the socket is bound.
        // SAFETY: plain socket(2); the result is checked.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })
        .map_err(ctx("socket (needs CAP_NET_RAW)"))?;
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V3).map_err(ctx("TPACKET_V3"))?;
        let frame_size = 2048u32;
        let req = TpacketReq3 {
            block_size,
            block_nr: cfg.block_count,
            frame_size,
            frame_nr: block_size / frame_size * cfg.block_count,
            retire_blk_tov: cfg.block_timeout_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req).map_err(ctx("PACKET_RX_RING"))?;
        let block_size = usize::try_from(block_size).map_err(io::Error::other)?;
        let blocks = usize::try_from(cfg.block_count).map_err(io::Error::other)?;
        let len = block_size * blocks;
        // SAFETY: maps the ring the kernel just allocated for this socket; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(ctx("mmap")(io::Error::last_os_error()));
        }
        let ring = Ring {
            base: base.cast(),
            len,
            block_size,
            blocks,
        };
        setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)
            .map_err(ctx("PACKET_IGNORE_OUTGOING"))?;
        let sll = sockaddr_ll(ETH_P_ALL, ifindex);
        // SAFETY: sll is a valid sockaddr_ll of the size passed.
        cvt(unsafe {
            libc::bind(
                raw,
                (&raw const sll).cast(),
                crate::sys::socklen_of::<libc::sockaddr_ll>(),
            )
        })
        .map_err(ctx("bind"))?;
        Ok(RxSocket {
            fd,
            ring,
            cur: 0,
            pkt_off: 0,
            pkts_left: 0,
            in_block: false,
            drops: 0,
        })
    }

    /// Frames the kernel dropped because the ring was full, so far (PACKET_STATISTICS).
    fn drops(&mut self) -> u64 {
        let mut st = [0u32; 3];
        let mut len = crate::sys::socklen_of::<[u32; 3]>();
        // SAFETY: st is valid for writes of len octets; len is updated by the kernel.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        if r == 0 {
            // The kernel resets its counters on each read.
            self.drops += u64::from(st[1]);
        }
        self.drops
    }

    /// Up to `max` packets from the ring into `batch`, counted in `stats`.
    fn rx(
        &mut self,
        port: Port,
        stats: &mut IoStats,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> usize {
        let mut n = 0;
        // Blocks visited at most per call, so a call is bounded even at line rate.
        let mut blocks_left = self.ring.blocks;
        while n < max {
            if !self.in_block {
                if blocks_left == 0 {
                    break;
                }
                let st = self.ring.status(self.cur).load(Ordering::Acquire);
                if st & TP_STATUS_USER == 0 {
                    break;
                }
                blocks_left -= 1;
                let b = self.ring.block(self.cur);
                let rd = |o: usize| {
                    b.get(o..o + 4)
                        .and_then(|s| s.try_into().ok())
                        .map(u32::from_ne_bytes)
                };
                // tpacket_hdr_v1: num_pkts at 12, offset_to_first_pkt at 16.
                self.pkts_left = rd(12).unwrap_or(0);
                self.pkt_off = rd(16).and_then(|o| usize::try_from(o).ok()).unwrap_or(0);
                self.in_block = true;
            }
            if self.pkts_left == 0 || self.pkt_off == 0 {
                self.release_block();
                continue;
            }
            let b = self.ring.block(self.cur);
            let h = b.get(self.pkt_off..).unwrap_or(&[]);
            let r32 = |o: usize| {
                h.get(o..o + 4)
                    .and_then(|s| s.try_into().ok())
                    .map(u32::from_ne_bytes)
            };
            let (Some(next), Some(snap), Some(len), Some(mac)) = (
                r32(0),
                r32(12),
                r32(16),
                h.get(24..26)
                    .map(|s| usize::from(u16::from_ne_bytes([s[0], s[1]]))),
            ) else {
                // A header outside the block: the block is unusable from here.
                self.release_block();
                continue;
            };
            let pkttype = h.get(TPACKET3_HDRLEN + 10).copied().unwrap_or(0);
            let snap = usize::try_from(snap).unwrap_or(usize::MAX);
            let frame = h.get(mac..mac.saturating_add(snap));
            let ip = match frame {
                Some(f) if snap == usize::try_from(len).unwrap_or(0) => ip_of_frame(f),
                _ => None, // truncated by the ring
            };
            match ip {
                Some(ip) if pkttype != PACKET_OTHERHOST && pkttype != PACKET_OUTGOING => {
                    let mut p = pool.get(port);
                    if p.load(port, ip) {
                        stats.rx_packets += 1;
                        stats.rx_bytes += ip.len() as u64;
                        batch.push(p);
                        n += 1;
                    } else {
                        stats.rx_discarded += 1;
                        pool.put(p);
                    }
                }
                _ => stats.rx_discarded += 1,
            }
            self.pkts_left -= 1;
            let next = usize::try_from(next).unwrap_or(0);
            if self.pkts_left == 0 || next == 0 {
                self.release_block();
            } else {
                self.pkt_off += next;
            }
        }
        n
    }

    /// Gives the current block back to the kernel and moves to the next.
    fn release_block(&mut self) {
        self.ring
            .status(self.cur)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.ring.blocks;
        self.in_block = false;
    }
}

impl AfPacketIo {
    /// Opens the socket (with queue groups: one per group, group 0 first), maps its ring,
    /// binds it to the interface and joins the fanout group. With fanout, call this for
    /// worker 0, 1, … in order.
    pub fn open(cfg: AfPacketConfig) -> io::Result<AfPacketIo> {
        let link = Link::by_name(&cfg.interface)?;
        let page = 4096u32;
        if cfg.block_size < page || !cfg.block_size.is_multiple_of(page) || cfg.block_count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_PACKET ring: block size must be a multiple of 4096, block count > 0",
            ));
        }
        let groups = cfg.classes.as_ref().map_or(1, Classes::groups);
        if groups > 1 && cfg.fanout.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_PACKET queue groups need a fanout group (one worker too)",
            ));
        }
        // The worker's ring memory split over its groups (module docs).
        let group_count = u32::try_from(groups).unwrap_or(1);
        let block_size = (cfg.block_size / group_count / page).max(1) * page;
        let first = RxSocket::open(link.ifindex, block_size, &cfg)?;
        let join = |fd: RawFd, f: Fanout| {
            join_fanout(fd, cfg.port, f, &cfg.spread_ues, cfg.classes.as_ref())
        };
        let mode = match cfg.fanout {
            None => FanoutMode::None,
            Some(f) => join(first.fd.as_raw_fd(), f)?,
        };
        let mut socks = vec![first];
        // Without the program there are no groups: one socket per worker, which classifies
        // in software.
        if let (FanoutMode::Ebpf, Some(f)) = (&mode, cfg.fanout) {
            for _ in 1..groups {
                let s = RxSocket::open(link.ifindex, block_size, &cfg)?;
                let m = join(s.fd.as_raw_fd(), f)?;
                if m != FanoutMode::Ebpf {
                    return Err(io::Error::other(format!(
                        "AF_PACKET: a queue group's socket could not join the eBPF fanout \
                         group: {m:?}"
                    )));
                }
                socks.push(s);
            }
        }
        let sll = [
            sockaddr_ll(ETH_P_IP, link.ifindex),
            sockaddr_ll(ETH_P_IPV6, link.ifindex),
        ];
        Ok(AfPacketIo {
            socks,
            block_size,
            port: cfg.port,
            hops: NextHops::new(link),
            sll,
            tx: TxScratch {
                iovs: Vec::new(),
                msgs: Vec::new(),
                kinds: Vec::new(),
            },
            stats: IoStats::default(),
            mode,
            cfg,
        })
    }

    pub fn fanout_mode(&self) -> &FanoutMode {
        &self.mode
    }

    pub fn next_hops(&mut self) -> &mut NextHops {
        &mut self.hops
    }

    /// Frames the kernel dropped because a ring was full, so far, summed over the queue
    /// groups' rings (PACKET_STATISTICS; read off the fast path).
    pub fn ring_drops(&mut self) -> u64 {
        self.socks.iter_mut().map(RxSocket::drops).sum()
    }

    /// Group 0's socket: the one that sends.
    fn tx_fd(&self) -> RawFd {
        self.socks.first().map_or(-1, |s| s.fd.as_raw_fd())
    }
}

fn join_fanout(
    fd: RawFd,
    port: Port,
    f: Fanout,
    spread: &[std::net::IpAddr],
    classes: Option<&Classes>,
) -> io::Result<FanoutMode> {
    let arg = |ty: u32| u32::from(f.group) | ((ty | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16);
    let spread = upf_packet::steer::Spread::new(spread.iter().copied());
    let why = match Program::shared(port, f.workers, &spread, classes) {
        Ok(prog) => match setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &arg(PACKET_FANOUT_EBPF)) {
            Ok(()) => {
                // Every member sets the (same) program; the group keeps the last one.
                let pfd: i32 = prog.fd()?.as_raw_fd();
                setsockopt(fd, SOL_PACKET, PACKET_FANOUT_DATA, &pfd)
                    .map_err(ctx("PACKET_FANOUT_DATA (attaching the eBPF program)"))?;
                return Ok(FanoutMode::Ebpf);
            }
            Err(e) => format!("joining an eBPF fanout group failed: {e}"),
        },
        Err(e) => format!("fanout program not loaded: {e}"),
    };
    setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &arg(PACKET_FANOUT_HASH))
        .map_err(ctx("PACKET_FANOUT"))?;
    Ok(FanoutMode::Hash(why))
}

/// The IP packet inside an Ethernet frame (one VLAN tag skipped), trimmed to the IP header's
/// own length; `None` for anything else (non-IP, wrong version, truncated).
pub fn ip_of_frame(frame: &[u8]) -> Option<&[u8]> {
    let et = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
    let mut ethertype = et(12)?;
    let mut off = ETH_HLEN;
    if ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = et(16)?;
        off += 4;
    }
    let ip = frame.get(off..)?;
    let ver = ip.first()? >> 4;
    let len = match (ethertype, ver) {
        (ETH_P_IP, 4) => usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
        (ETH_P_IPV6, 6) => 40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
        _ => return None,
    };
    if len < 20 {
        return None;
    }
    ip.get(..len)
}

/// An IP packet's destination and the Ethertype to send it with.
fn ip_dst(p: &[u8]) -> Option<(IpAddr, usize)> {
    match p.first()? >> 4 {
        4 => {
            let a: [u8; 4] = p.get(16..20)?.try_into().ok()?;
            Some((Ipv4Addr::from(a).into(), 0))
        }
        6 => {
            let a: [u8; 16] = p.get(24..40)?.try_into().ok()?;
            Some((Ipv6Addr::from(a).into(), 1))
        }
        _ => None,
    }
}

impl PacketIo for AfPacketIo {
    /// Every group's ring, highest first, up to `max` in all.
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        for s in &mut self.socks {
            n += s.rx(self.port, &mut self.stats, pool, batch, max - n);
        }
        Ok(n)
    }

    fn rx_groups(&self) -> usize {
        self.socks.len()
    }

    fn rx_group(
        &mut self,
        group: usize,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        Ok(match self.socks.get_mut(group) {
            Some(s) => s.rx(self.port, &mut self.stats, pool, batch, max),
            None => 0,
        })
    }

    fn group_fd(&self, group: usize) -> Option<BorrowedFd<'_>> {
        self.socks.get(group).map(|s| s.fd.as_fd())
    }

    /// One `sendmmsg(2)` per batch (up to 1024 frames). A TPACKET_V2 TX ring would save the
    /// per-message msghdr/iovec handling and the copy from user memory is the same (the
    /// kernel builds an skb per frame either way, and copies it: veth and most drivers get no
    /// zero-copy from AF_PACKET); it would however need a second socket (a socket has one
    /// TPACKET version and this one is V3), a second mapping of several MiB per worker and
    /// port, and a copy of each packet into the ring instead of sending it from its buffer.
    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        let now = Instant::now();
        let tx_fd = self.tx_fd();
        let src = self.hops.link().mac;
        let tx = &mut self.tx;
        tx.iovs.clear();
        tx.msgs.clear();
        tx.kinds.clear();
        for p in batch.iter_mut() {
            let Some((dst, kind)) = ip_dst(p.data()) else {
                tx.kinds.push(None);
                continue;
            };
            let Some(mac) = self.hops.mac_for(dst, now) else {
                tx.kinds.push(None);
                continue;
            };
            let (start, len) = (p.start(), p.len());
            if start < ETH_HLEN {
                // Not enough headroom (cannot happen with the pipeline's encapsulations):
                // move the packet back.
                let to = HEADROOM.max(ETH_HLEN);
                if to + len > p.buffer_mut().len() {
                    tx.kinds.push(None);
                    continue;
                }
                p.buffer_mut().copy_within(start..start + len, to);
                p.set_range(to, to + len);
            }
            let start = p.start();
            let ethertype = if kind == 0 { ETH_P_IP } else { ETH_P_IPV6 };
            let buf = p.buffer_mut();
            let Some(hdr) = buf.get_mut(start - ETH_HLEN..start) else {
                tx.kinds.push(None);
                continue;
            };
            hdr[..6].copy_from_slice(&mac);
            hdr[6..12].copy_from_slice(&src);
            hdr[12..].copy_from_slice(&ethertype.to_be_bytes());
            tx.iovs.push(libc::iovec {
                // SAFETY: start - ETH_HLEN is within the buffer (checked by get_mut above).
                iov_base: unsafe { buf.as_mut_ptr().add(start - ETH_HLEN) }.cast(),
                iov_len: len + ETH_HLEN,
            });
            tx.kinds.push(Some(kind));
        }
        // The iovecs are final now (no more pushes): point the messages at them.
        for (iv, k) in tx.kinds.iter().flatten().enumerate() {
            // SAFETY: mmsghdr is plain data; all-zero is valid before the fields are set.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (&raw mut self.sll[*k]).cast();
            m.msg_hdr.msg_namelen = crate::sys::socklen_of::<libc::sockaddr_ll>();
            m.msg_hdr.msg_iov = &raw mut tx.iovs[iv];
            m.msg_hdr.msg_iovlen = 1;
            tx.msgs.push(m);
        }
        let total = tx.msgs.len();
        let mut sent = 0;
        let mut at = 0;
        while at < total {
            let chunk = (total - at).min(MAX_MMSG);
            // SAFETY: msgs[at..at+chunk] are valid mmsghdrs whose names, iovecs and buffers
            // (the packets of `batch`, not moved or freed until after this loop) are valid.
            let r = unsafe {
                libc::sendmmsg(
                    tx_fd,
                    tx.msgs.as_mut_ptr().add(at),
                    u32::try_from(chunk).unwrap_or(0),
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                let r = usize::try_from(r).unwrap_or(0);
                for m in &tx.msgs[at..at + r] {
                    self.stats.tx_bytes += u64::from(m.msg_len).saturating_sub(ETH_HLEN as u64);
                }
                sent += r;
                at += r;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // Queue full: the rest of the batch is lost.
                Some(libc::EAGAIN | libc::ENOBUFS) => break,
                Some(libc::EINTR) => continue,
                // This one frame is refused (too big, interface down…): skip it.
                _ => at += 1,
            }
        }
        self.stats.tx_packets += sent as u64;
        self.stats.tx_dropped += (batch.len() - sent) as u64;
        tx.msgs.clear();
        tx.iovs.clear();
        pool.put_all(batch.drain(..));
        Ok(sent)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.group_fd(0)
    }

    fn stats(&self) -> IoStats {
        self.stats
    }

    fn refresh_stats(&mut self) {
        self.stats.rx_kernel_dropped = self.ring_drops();
    }

    fn describe(&self) -> String {
        let l = self.hops.link();
        let fanout = match (&self.mode, self.cfg.fanout) {
            (FanoutMode::None, _) | (_, None) => String::new(),
            (FanoutMode::Ebpf, Some(f)) => format!(
                ", fanout group {} eBPF (UE pinning), worker {} of {}",
                f.group, f.worker, f.workers
            ),
            (FanoutMode::Hash(why), Some(f)) => format!(
                ", fanout group {} HASH, worker {} of {}; WARNING: no UE pinning ({why}): \
                 packets need software steering",
                f.group, f.worker, f.workers
            ),
        };
        let groups = match (self.socks.len(), &self.cfg.classes) {
            (1, Some(c)) => format!(", 1 queue group (not {}: no eBPF)", c.groups()),
            (1, None) => String::new(),
            (g, _) => format!(", {g} queue groups (a ring each)"),
        };
        format!(
            "{}: AF_PACKET {} (ifindex {}, mtu {}), rx TPACKET_V3 {}x{} KiB{}, tx sendmmsg{}",
            self.port.name(),
            l.name,
            l.ifindex,
            l.mtu,
            self.cfg.block_count,
            self.block_size / 1024,
            groups,
            fanout
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::tests::{eth, ipv4, ipv6, udp};

    #[test]
    fn frames_to_ip() {
        let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 17, &udp(1, 2, b"hello"));
        let mut f = eth(0x0800, false);
        f.extend_from_slice(&ip);
        assert_eq!(ip_of_frame(&f), Some(&ip[..]));
        // Ethernet padding is trimmed.
        f.extend_from_slice(&[0; 20]);
        assert_eq!(ip_of_frame(&f), Some(&ip[..]));
        // One VLAN tag.
        let mut f = eth(0x0800, true);
        f.extend_from_slice(&ip);
        assert_eq!(ip_of_frame(&f), Some(&ip[..]));
        // IPv6.
        let ip6 = ipv6([0xfd; 16], [0xfe; 16], 17, &udp(1, 2, b"x"));
        let mut f = eth(0x86dd, false);
        f.extend_from_slice(&ip6);
        assert_eq!(ip_of_frame(&f), Some(&ip6[..]));
        // Version disagreeing with the Ethertype, ARP, truncation.
        let mut f = eth(0x86dd, false);
        f.extend_from_slice(&ip);
        assert_eq!(ip_of_frame(&f), None);
        let mut f = eth(0x0806, false);
        f.extend_from_slice(&[0; 28]);
        assert_eq!(ip_of_frame(&f), None);
        let mut f = eth(0x0800, false);
        f.extend_from_slice(&ip[..ip.len() - 1]);
        assert_eq!(ip_of_frame(&f), None);
        for n in 0..f.len() {
            let _ = ip_of_frame(&f[..n]);
        }
    }

    #[test]
    fn destinations() {
        let ip = ipv4([1, 2, 3, 4], [5, 6, 7, 8], 17, &[]);
        assert_eq!(ip_dst(&ip), Some(("5.6.7.8".parse().unwrap(), 0)));
        let ip6 = ipv6([0xfd; 16], [0xfe; 16], 17, &[]);
        assert_eq!(ip_dst(&ip6).map(|d| d.1), Some(1));
        assert_eq!(ip_dst(&[0x45, 0]), None);
        assert_eq!(ip_dst(&[]), None);
    }
}
