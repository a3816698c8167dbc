//! The UDP socket backend: N3/N9 without privileges. A UDP socket bound to the local GTP-U
//! address receives GTP-U payloads; each is given a synthesized outer IPv4/IPv6 + UDP header
//! (source = the peer, destination = the local address the datagram was sent to, learnt from
//! `IP_PKTINFO`/`IPV6_PKTINFO`), so the pipeline sees what it would see on a raw interface.
//! On send, each packet's outer IP + UDP header is read and dropped, and its UDP payload is
//! sent to the outer destination address and port. Source *ports* are always the socket's.
//!
//! Batches cross the kernel in one `recvmmsg` / `sendmmsg` call. Optionally:
//! - `UDP_GRO` on receive: the kernel may hand over several datagrams of one flow coalesced
//!   into one buffer; they are split again by the segment size it reports;
//! - `UDP_SEGMENT` on send: consecutive packets from the same source to the same destination
//!   with the same TOS and size (the last one may be shorter) go as one message that the
//!   kernel (or the NIC) segments.
//!
//! Several workers may each own a socket on the same address with `SO_REUSEPORT`
//! ([`UdpConfig::reuse_port`]); the kernel spreads peers over them by flow hash.
//!
//! Byte counters count packets as the pipeline sees them (synthesized headers included).
//! IPv6 extension headers in front of the UDP header of a sent packet are not followed (such
//! packets are dropped); neither are IPv4 fragments.

use crate::sys::{self, Ctrl};
use crate::{IoStats, PacketIo, Pool};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use upf_packet::{Packet, Port, BUF_LEN, HEADROOM};
use upf_wire::checksum;

pub use upf_wire::gtpu::PORT as GTPU_PORT;

/// Length of the synthesized IPv4 + UDP header.
const V4_HDR: usize = 20 + 8;
/// Length of the synthesized IPv6 + UDP header.
const V6_HDR: usize = 40 + 8;
/// TTL / hop limit written when the kernel did not report the received one.
const DEFAULT_TTL: u8 = 64;
/// At most this many segments per `UDP_SEGMENT` send (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGS: usize = 64;
/// At most this many payload octets per `UDP_SEGMENT` send (below the 64 KiB UDP limit).
const GSO_MAX_BYTES: usize = 60_000;
/// Requested socket receive and send buffer, octets.
const SOCKET_BUFFER: libc::c_int = 8 << 20;

/// Asks for `bytes` of receive and send buffer on socket `fd`: beyond net.core.{r,w}mem_max
/// with CAP_NET_ADMIN (the *FORCE options), else whatever the kernel allows. Best effort.
pub fn set_socket_buffers(fd: RawFd, bytes: libc::c_int) {
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if sys::setsockopt_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
            let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes);
        }
    }
}
/// Size of a receive buffer in GRO mode (a coalesced message is at most 64 KiB).
const GRO_BUF: usize = 65_536;
/// Receive buffers in GRO mode (each may hold up to 64 datagrams).
const GRO_BUFS: usize = 8;

/// How to open a [`UdpIo`].
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Local address (usually the N3/N9 address, port [`GTPU_PORT`]); an unspecified address
    /// receives on every local address and sends from the one each packet names.
    pub bind: SocketAddr,
    /// The port received packets are marked with.
    pub port: Port,
    /// Set `SO_REUSEPORT`, so that one socket per worker can share `bind`.
    pub reuse_port: bool,
    /// Ask for `UDP_GRO` (coalesced receive); silently off if the kernel refuses it.
    pub gro: bool,
    /// Use `UDP_SEGMENT` for runs of same-size packets to one destination.
    pub gso: bool,
    /// Most datagrams per system call.
    pub batch: usize,
}

impl UdpConfig {
    /// `bind` for `port`, without SO_REUSEPORT, GRO or GSO, 64 datagrams per call.
    pub fn new(bind: SocketAddr, port: Port) -> Self {
        Self {
            bind,
            port,
            reuse_port: false,
            gro: false,
            gso: false,
            batch: 64,
        }
    }
}

/// Per-call scratch of `recvmmsg`/`sendmmsg`: message headers and what they point to. The
/// pointers are written and used within one call of [`UdpIo`] only.
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    ctrls: Vec<Ctrl>,
}

// SAFETY: the raw pointers inside `hdrs` and `iovs` are only set and dereferenced (by the
// kernel) during one `&mut self` call of UdpIo and point to memory that call holds; between
// calls they are dangling values that are never read, so moving the scratch to another thread
// is sound.
unsafe impl Send for Scratch {}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scratch({} messages)", self.hdrs.len())
    }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is integers and raw pointers (plus padding on some libcs); all-zero is
    // a valid value (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

fn empty_iov() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}

impl Scratch {
    fn new() -> Self {
        Self {
            hdrs: Vec::new(),
            iovs: Vec::new(),
            names: Vec::new(),
            ctrls: Vec::new(),
        }
    }

    /// Makes room for `msgs` messages and `iovs` buffers (done before any pointer is taken).
    fn reserve(&mut self, msgs: usize, iovs: usize) {
        if self.hdrs.len() < msgs {
            self.hdrs.resize_with(msgs, zeroed_mmsghdr);
            self.names.resize_with(msgs, sys::zeroed_storage);
            self.ctrls.resize_with(msgs, Ctrl::default);
        }
        if self.iovs.len() < iovs {
            self.iovs.resize_with(iovs, empty_iov);
        }
    }
}

/// What a received datagram's control messages said.
#[derive(Debug, Default, Clone, Copy)]
struct RxMeta {
    dst: Option<IpAddr>,
    tos: u8,
    ttl: Option<u8>,
    gro_size: Option<usize>,
}

fn parse_meta(ctrl: &[u8]) -> RxMeta {
    let mut m = RxMeta::default();
    for (level, ty, data) in sys::cmsgs(ctrl) {
        match (level, ty) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => m.dst = sys::pktinfo_v4(data),
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => m.dst = sys::pktinfo_v6(data),
            (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                m.tos = sys::cmsg_int(data)
                    .and_then(|v| u8::try_from(v).ok())
                    .unwrap_or(0)
            }
            (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                m.ttl = sys::cmsg_int(data).and_then(|v| u8::try_from(v).ok())
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                m.gro_size = sys::cmsg_int(data)
                    .and_then(|v| usize::try_from(v).ok())
                    .filter(|&v| v > 0)
            }
            _ => {}
        }
    }
    m
}

/// Writes an IPv4 + UDP header for a UDP payload of `len` octets in front of it.
/// The IPv4 checksum is computed, the UDP checksum is 0 (none).
fn write_v4_header(
    h: &mut [u8; V4_HDR],
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    tos: u8,
    ttl: u8,
    len: usize,
) -> bool {
    let (Ok(total), Ok(udp_len)) = (u16::try_from(V4_HDR + len), u16::try_from(8 + len)) else {
        return false;
    };
    h[0] = 0x45;
    h[1] = tos;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&[0, 0]); // identification
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, no fragment offset
    h[8] = ttl;
    h[9] = 17;
    h[10..12].copy_from_slice(&[0, 0]);
    h[12..16].copy_from_slice(&src.0.octets());
    h[16..20].copy_from_slice(&dst.0.octets());
    let c = checksum::checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h[20..22].copy_from_slice(&src.1.to_be_bytes());
    h[22..24].copy_from_slice(&dst.1.to_be_bytes());
    h[24..26].copy_from_slice(&udp_len.to_be_bytes());
    h[26..28].copy_from_slice(&[0, 0]);
    true
}

/// Writes an IPv6 + UDP header in front of `payload` (mandatory UDP checksum computed).
fn write_v6_header(
    h: &mut [u8; V6_HDR],
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    tclass: u8,
    hop_limit: u8,
    payload: &[u8],
) -> bool {
    let Ok(udp_len) = u16::try_from(8 + payload.len()) else {
        return false;
    };
    let first = (6u32 << 28) | (u32::from(tclass) << 20);
    h[0..4].copy_from_slice(&first.to_be_bytes());
    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h[6] = 17;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src.0.octets());
    h[24..40].copy_from_slice(&dst.0.octets());
    h[40..42].copy_from_slice(&src.1.to_be_bytes());
    h[42..44].copy_from_slice(&dst.1.to_be_bytes());
    h[44..46].copy_from_slice(&udp_len.to_be_bytes());
    h[46..48].copy_from_slice(&[0, 0]);
    let sum = checksum::combine(&[
        checksum::pseudo_header_v6(&src.0, &dst.0, 17, u32::from(udp_len)),
        checksum::sum(&h[40..48]),
        checksum::sum(payload),
    ]);
    let c = match !sum {
        0 => 0xffff,
        c => c,
    };
    h[46..48].copy_from_slice(&c.to_be_bytes());
    true
}

/// Where a packet handed to `tx_batch` goes: read from its outer IP + UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outer {
    src: IpAddr,
    dst: SocketAddr,
    tos: u8,
    /// The UDP payload, as offsets into the packet.
    payload: (usize, usize),
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    d.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// Reads the outer IPv4/IPv6 + UDP header of `d`; `None` if it is not a well-formed,
/// unfragmented UDP datagram (IPv6 extension headers are not followed).
fn parse_outer(d: &[u8]) -> Option<Outer> {
    match d.first()? >> 4 {
        4 => {
            let ihl = usize::from(d.first()? & 0x0f) * 4;
            let total = usize::from(be16(d, 2)?);
            if ihl < 20 || total < ihl + 8 || total > d.len() || *d.get(9)? != 17 {
                return None;
            }
            if be16(d, 6)? & 0x3fff != 0 {
                return None; // a fragment (MF set or an offset)
            }
            let src: [u8; 4] = d.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = d.get(16..20)?.try_into().ok()?;
            let udp_len = usize::from(be16(d, ihl + 4)?);
            if udp_len < 8 || ihl + udp_len > total {
                return None;
            }
            Some(Outer {
                src: IpAddr::V4(src.into()),
                dst: SocketAddr::new(IpAddr::V4(dst.into()), be16(d, ihl + 2)?),
                tos: *d.get(1)?,
                payload: (ihl + 8, ihl + udp_len),
            })
        }
        6 => {
            let plen = usize::from(be16(d, 4)?);
            if *d.get(6)? != 17 || 40 + plen > d.len() {
                return None;
            }
            let src: [u8; 16] = d.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = d.get(24..40)?.try_into().ok()?;
            let udp_len = usize::from(be16(d, 44)?);
            if udp_len < 8 || udp_len > plen {
                return None;
            }
            let tclass = u16::to_be_bytes(be16(d, 0)? >> 4)[1];
            Some(Outer {
                src: IpAddr::V6(src.into()),
                dst: SocketAddr::new(IpAddr::V6(dst.into()), be16(d, 42)?),
                tos: tclass,
                payload: (48, 40 + udp_len),
            })
        }
        _ => None,
    }
}

/// One message of a `sendmmsg` batch: a run of packets (one unless segmented).
#[derive(Debug, Clone, Copy)]
struct TxMsg {
    src: IpAddr,
    dst: SocketAddr,
    tos: u8,
    /// The message's buffers: `iovs[first..first + count]`.
    first: usize,
    count: usize,
    /// Payload octets of the first segment, and of all.
    seg: usize,
    bytes: usize,
    /// Octets of the packets as handed over (counted in `tx_bytes`).
    pkt_bytes: usize,
    /// A shorter segment ended the run.
    closed: bool,
}

/// A UDP socket as the N3 or N9 interface of one worker.
#[derive(Debug)]
pub struct UdpIo {
    fd: OwnedFd,
    local: SocketAddr,
    port: Port,
    gro: bool,
    gso: bool,
    reuse_port: bool,
    batch: usize,
    stats: IoStats,
    scratch: Scratch,
    rx_pkts: Vec<Packet>,
    /// Segments of coalesced (GRO) datagrams beyond the `max` of the call that received them.
    pending: VecDeque<Packet>,
    gro_bufs: Vec<Box<[u8]>>,
    tx_msgs: Vec<TxMsg>,
    /// `UDP_SEGMENT` messages sent and coalesced (GRO) messages received, of two or more
    /// segments each.
    gso_sends: u64,
    gro_receives: u64,
}

impl UdpIo {
    /// Opens and binds the socket (non-blocking). Binding a port below 1024 needs
    /// `CAP_NET_BIND_SERVICE`; the error says so.
    pub fn open(cfg: &UdpConfig) -> io::Result<UdpIo> {
        let v6 = cfg.bind.is_ipv6();
        let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: plain system call with constant arguments; the result is checked.
        let raw = sys::cvt(unsafe {
            libc::socket(
                family,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `raw` is a descriptor we just created and own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let on = 1;
        if cfg.reuse_port {
            sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_REUSEPORT, on)?;
        }
        if v6 {
            sys::setsockopt_int(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, on)?;
            sys::setsockopt_int(s, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, on)?;
            sys::setsockopt_int(s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, on)?;
            sys::setsockopt_int(s, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, on)?;
        } else {
            sys::setsockopt_int(s, libc::IPPROTO_IP, libc::IP_PKTINFO, on)?;
            sys::setsockopt_int(s, libc::IPPROTO_IP, libc::IP_RECVTOS, on)?;
            sys::setsockopt_int(s, libc::IPPROTO_IP, libc::IP_RECVTTL, on)?;
        }
        let gro = cfg.gro && sys::setsockopt_int(s, libc::SOL_UDP, libc::UDP_GRO, on).is_ok();
        // Socket buffers that ride out a worker's scheduling hiccup at line rate (the default
        // ~200 KiB holds ~150 full-size datagrams).
        set_socket_buffers(s, SOCKET_BUFFER);
        let (ss, len) = sys::to_raw(&cfg.bind);
        // SAFETY: `ss` holds a socket address of `len` octets and lives across the call.
        if let Err(e) = sys::cvt(unsafe { libc::bind(s, (&raw const ss).cast(), len) }) {
            let hint = match e.kind() {
                io::ErrorKind::PermissionDenied => " (ports below 1024 need CAP_NET_BIND_SERVICE)",
                io::ErrorKind::AddrInUse => " (another socket without SO_REUSEPORT holds it)",
                io::ErrorKind::AddrNotAvailable => " (not an address of this host)",
                _ => "",
            };
            return Err(io::Error::new(
                e.kind(),
                format!("bind UDP {}: {e}{hint}", cfg.bind),
            ));
        }
        let local = sys::local_addr(s)?;
        Ok(UdpIo {
            fd,
            local,
            port: cfg.port,
            gro,
            gso: cfg.gso,
            reuse_port: cfg.reuse_port,
            batch: cfg.batch.max(1),
            stats: IoStats::default(),
            scratch: Scratch::new(),
            rx_pkts: Vec::new(),
            pending: VecDeque::new(),
            gro_bufs: Vec::new(),
            tx_msgs: Vec::new(),
            gso_sends: 0,
            gro_receives: 0,
        })
    }

    /// The bound address (with the port the kernel chose if `bind` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether UDP_GRO is on (asked for and accepted by the kernel).
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// How many `UDP_SEGMENT` messages (of two or more segments) were sent.
    pub fn gso_sends(&self) -> u64 {
        self.gso_sends
    }

    /// How many coalesced messages of two or more datagrams were received (UDP_GRO).
    pub fn gro_receives(&self) -> u64 {
        self.gro_receives
    }

    fn hdr_len(&self) -> usize {
        if self.local.is_ipv6() {
            V6_HDR
        } else {
            V4_HDR
        }
    }

    /// Writes the outer header for a payload already at `HEADROOM + hdr_len` and sets the
    /// packet's range; false if the addresses do not fit the socket's family.
    fn finish_rx(&self, p: &mut Packet, peer: SocketAddr, meta: &RxMeta, len: usize) -> bool {
        let hdr = self.hdr_len();
        let dst_ip = meta.dst.unwrap_or(self.local.ip());
        let dport = self.local.port();
        let ttl = meta.ttl.unwrap_or(DEFAULT_TTL);
        let buf = p.buffer_mut();
        let ok = match (peer, dst_ip) {
            (SocketAddr::V4(src), IpAddr::V4(dst)) => buf
                .get_mut(HEADROOM..)
                .and_then(|b| b.first_chunk_mut::<V4_HDR>())
                .is_some_and(|h| {
                    write_v4_header(h, (*src.ip(), src.port()), (dst, dport), meta.tos, ttl, len)
                }),
            (SocketAddr::V6(src), IpAddr::V6(dst)) => {
                let Some((h, rest)) = buf
                    .get_mut(HEADROOM..)
                    .and_then(|b| b.split_first_chunk_mut::<V6_HDR>())
                else {
                    return false;
                };
                let Some(payload) = rest.get(..len) else {
                    return false;
                };
                write_v6_header(
                    h,
                    (*src.ip(), src.port()),
                    (dst, dport),
                    meta.tos,
                    ttl,
                    payload,
                )
            }
            _ => false,
        };
        if ok {
            p.set_range(HEADROOM, HEADROOM + hdr + len);
        }
        ok
    }

    /// Receives straight into packet buffers, one datagram each.
    fn rx_direct(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        want: usize,
    ) -> io::Result<usize> {
        let hdr = self.hdr_len();
        self.rx_pkts.clear();
        for _ in 0..want {
            self.rx_pkts.push(pool.get(self.port));
        }
        self.scratch.reserve(want, want);
        let sc = &mut self.scratch;
        for (i, p) in self.rx_pkts.iter_mut().enumerate() {
            let room = p.buffer_mut().get_mut(HEADROOM + hdr..).unwrap_or(&mut []);
            sc.iovs[i] = libc::iovec {
                iov_base: room.as_mut_ptr().cast(),
                iov_len: room.len(),
            };
        }
        for i in 0..want {
            let h = &mut sc.hdrs[i];
            *h = zeroed_mmsghdr();
            h.msg_hdr.msg_name = (&raw mut sc.names[i]).cast();
            h.msg_hdr.msg_namelen = sys::socklen_of::<libc::sockaddr_storage>();
            h.msg_hdr.msg_iov = &raw mut sc.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = sc.ctrls[i].0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = sys::CTRL_LEN as _;
        }
        let r = self.recv(want);
        let got = match r {
            Ok(n) => n,
            Err(e) => {
                pool.put_all(self.rx_pkts.drain(..));
                return Err(e);
            }
        };
        let mut n = 0;
        let mut pkts = std::mem::take(&mut self.rx_pkts);
        for (i, mut p) in pkts.drain(..).enumerate() {
            if i >= got {
                pool.put(p);
                continue;
            }
            let (peer, meta, len, flags) = self.msg_result(i);
            match peer {
                Some(peer)
                    if flags & libc::MSG_TRUNC == 0 && self.finish_rx(&mut p, peer, &meta, len) =>
                {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += p.len() as u64;
                    batch.push(p);
                    n += 1;
                }
                _ => {
                    self.stats.rx_discarded += 1;
                    pool.put(p);
                }
            }
        }
        self.rx_pkts = pkts;
        Ok(n)
    }

    /// Peer, control data, length and flags of received message `i`.
    #[allow(clippy::unnecessary_cast)] // msg_controllen is size_t on glibc, socklen_t on musl
    fn msg_result(&self, i: usize) -> (Option<SocketAddr>, RxMeta, usize, libc::c_int) {
        let sc = &self.scratch;
        let h = &sc.hdrs[i];
        let peer = sys::from_raw(&sc.names[i], h.msg_hdr.msg_namelen);
        let clen = (h.msg_hdr.msg_controllen as usize).min(sys::CTRL_LEN);
        let meta = parse_meta(sc.ctrls[i].0.get(..clen).unwrap_or(&[]));
        (peer, meta, h.msg_len as usize, h.msg_hdr.msg_flags)
    }

    /// `recvmmsg` of up to `want` messages prepared in the scratch; 0 when none wait.
    fn recv(&mut self, want: usize) -> io::Result<usize> {
        let vlen = libc::c_uint::try_from(want).unwrap_or(libc::c_uint::MAX);
        loop {
            // SAFETY: the first `want` headers of the scratch were just filled in; each points
            // to a name, control buffer and iovec of the scratch and the iovec to a buffer
            // (packet or GRO buffer) that stays alive and unaliased until this call returns.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    self.scratch.hdrs.as_mut_ptr(),
                    vlen,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                return Ok(usize::try_from(r).unwrap_or(0));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }

    /// Receives into the GRO buffers and splits coalesced datagrams into packets.
    fn rx_gro(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            batch.push(p);
            n += 1;
        }
        if n == max {
            return Ok(n);
        }
        let want = (max - n).min(GRO_BUFS).min(self.batch);
        while self.gro_bufs.len() < want {
            self.gro_bufs.push(vec![0u8; GRO_BUF].into_boxed_slice());
        }
        self.scratch.reserve(want, want);
        let sc = &mut self.scratch;
        for i in 0..want {
            sc.iovs[i] = libc::iovec {
                iov_base: self.gro_bufs[i].as_mut_ptr().cast(),
                iov_len: self.gro_bufs[i].len(),
            };
            let h = &mut sc.hdrs[i];
            *h = zeroed_mmsghdr();
            h.msg_hdr.msg_name = (&raw mut sc.names[i]).cast();
            h.msg_hdr.msg_namelen = sys::socklen_of::<libc::sockaddr_storage>();
            h.msg_hdr.msg_iov = &raw mut sc.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = sc.ctrls[i].0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = sys::CTRL_LEN as _;
        }
        let got = self.recv(want)?;
        let hdr = self.hdr_len();
        let room = BUF_LEN - HEADROOM - hdr;
        let bufs = std::mem::take(&mut self.gro_bufs);
        for (i, buf) in bufs.iter().enumerate().take(got) {
            let (peer, meta, len, flags) = self.msg_result(i);
            let data = buf.get(..len).unwrap_or(&[]);
            let (Some(peer), 0) = (peer, flags & libc::MSG_TRUNC) else {
                self.stats.rx_discarded += 1;
                continue;
            };
            let seg = meta.gro_size.unwrap_or(len.max(1));
            if len > seg {
                self.gro_receives += 1;
            }
            for chunk in data.chunks(seg.max(1)) {
                let mut p = pool.get(self.port);
                let fits = chunk.len() <= room
                    && p.buffer_mut()
                        .get_mut(HEADROOM + hdr..HEADROOM + hdr + chunk.len())
                        .map(|d| d.copy_from_slice(chunk))
                        .is_some();
                if fits && self.finish_rx(&mut p, peer, &meta, chunk.len()) {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += p.len() as u64;
                    if n < max {
                        batch.push(p);
                        n += 1;
                    } else {
                        self.pending.push_back(p);
                    }
                } else {
                    self.stats.rx_discarded += 1;
                    pool.put(p);
                }
            }
            if data.is_empty() {
                // A zero-length datagram: a header with no payload (chunks() yields nothing).
                let mut p = pool.get(self.port);
                if self.finish_rx(&mut p, peer, &meta, 0) {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += p.len() as u64;
                    if n < max {
                        batch.push(p);
                        n += 1;
                    } else {
                        self.pending.push_back(p);
                    }
                }
            }
        }
        self.gro_bufs = bufs;
        Ok(n)
    }

    /// Whether this socket can send a datagram with source address `src`.
    fn can_send_from(&self, src: IpAddr) -> bool {
        let local = self.local.ip();
        src.is_ipv6() == local.is_ipv6()
            && (local.is_unspecified() || src == local || src.is_unspecified())
    }

    /// Fills the control buffer of message `m` (source address, TOS, segment size).
    fn fill_ctrl(&mut self, m: usize, msg: &TxMsg, gso: Option<u16>) -> usize {
        let need_src = self.local.ip().is_unspecified() && !msg.src.is_unspecified();
        let ctrl = &mut self.scratch.ctrls[m];
        let mut used = 0;
        match msg.src {
            IpAddr::V4(s) => {
                if need_src {
                    let b = sys::pktinfo_v4_bytes(s);
                    sys::put_cmsg(ctrl, &mut used, libc::IPPROTO_IP, libc::IP_PKTINFO, &b);
                }
                if msg.tos != 0 {
                    let t = libc::c_int::from(msg.tos).to_ne_bytes();
                    sys::put_cmsg(ctrl, &mut used, libc::IPPROTO_IP, libc::IP_TOS, &t);
                }
            }
            IpAddr::V6(s) => {
                if need_src {
                    let b = sys::pktinfo_v6_bytes(s);
                    sys::put_cmsg(ctrl, &mut used, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &b);
                }
                if msg.tos != 0 {
                    let t = libc::c_int::from(msg.tos).to_ne_bytes();
                    sys::put_cmsg(ctrl, &mut used, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &t);
                }
            }
        }
        if let Some(g) = gso {
            sys::put_cmsg(
                ctrl,
                &mut used,
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                &g.to_ne_bytes(),
            );
        }
        used
    }

    /// Points message header `m` at its name, buffers and control data.
    fn fill_msg(&mut self, m: usize, msg: &TxMsg, gso: Option<u16>) {
        let (ss, len) = sys::to_raw(&msg.dst);
        self.scratch.names[m] = ss;
        let used = self.fill_ctrl(m, msg, gso);
        let sc = &mut self.scratch;
        let h = &mut sc.hdrs[m];
        *h = zeroed_mmsghdr();
        h.msg_hdr.msg_name = (&raw mut sc.names[m]).cast();
        h.msg_hdr.msg_namelen = len;
        h.msg_hdr.msg_iov = sc.iovs[msg.first..].as_mut_ptr();
        h.msg_hdr.msg_iovlen = msg.count as _;
        if used > 0 {
            h.msg_hdr.msg_control = sc.ctrls[m].0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = used as _;
        }
    }

    /// `sendmmsg` of `msgs` prepared messages starting at `from`: how many went, or the error
    /// of the first that did not.
    fn send(&mut self, from: usize, msgs: usize) -> io::Result<usize> {
        let vlen = libc::c_uint::try_from(msgs).unwrap_or(libc::c_uint::MAX);
        loop {
            // SAFETY: headers `from..from + msgs` of the scratch were filled by fill_msg; their
            // names, control buffers and iovecs live in the scratch, and the iovecs point into
            // packets of the batch, which the caller keeps alive until this call returns; the
            // kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.scratch.hdrs[from..].as_mut_ptr(),
                    vlen,
                    libc::MSG_DONTWAIT,
                )
            };
            if r >= 0 {
                return Ok(usize::try_from(r).unwrap_or(0));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Resends a segmented message that the kernel refused as separate datagrams.
    fn send_unsegmented(&mut self, msg: TxMsg) -> usize {
        let mut sent = 0;
        for k in 0..msg.count {
            let one = TxMsg {
                first: msg.first + k,
                count: 1,
                ..msg
            };
            self.fill_msg(0, &one, None);
            if matches!(self.send(0, 1), Ok(1)) {
                sent += 1;
            }
        }
        sent
    }
}

/// Whether an error of one `sendmmsg` message concerns that message only (its destination,
/// source or size), so the rest of the batch is still worth sending.
fn per_message_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EINVAL
                | libc::EMSGSIZE
                | libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::EACCES
                | libc::EPERM
                | libc::EADDRNOTAVAIL
                | libc::ECONNREFUSED
                | libc::EIO
                | libc::EAFNOSUPPORT
        )
    )
}

impl PacketIo for UdpIo {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        if self.gro {
            self.rx_gro(pool, batch, max)
        } else {
            self.rx_direct(pool, batch, max.min(self.batch))
        }
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        // Plan: one message per packet, or per run of packets for UDP_SEGMENT.
        self.tx_msgs.clear();
        self.scratch.reserve(batch.len(), batch.len());
        let mut iov = 0;
        for p in batch.iter() {
            let d = p.data();
            let out = parse_outer(d).filter(|o| self.can_send_from(o.src));
            let Some(o) = out else {
                self.stats.tx_dropped += 1;
                continue;
            };
            let payload = d.get(o.payload.0..o.payload.1).unwrap_or(&[]);
            self.scratch.iovs[iov] = libc::iovec {
                iov_base: payload.as_ptr().cast_mut().cast(),
                iov_len: payload.len(),
            };
            let len = payload.len();
            let joins = self.gso
                && self.tx_msgs.last().is_some_and(|m| {
                    !m.closed
                        && m.src == o.src
                        && m.dst == o.dst
                        && m.tos == o.tos
                        && len <= m.seg
                        && len > 0
                        && m.count < GSO_MAX_SEGS
                        && m.bytes + len <= GSO_MAX_BYTES
                });
            match self.tx_msgs.last_mut() {
                Some(m) if joins => {
                    m.count += 1;
                    m.bytes += len;
                    m.pkt_bytes += d.len();
                    m.closed = len < m.seg;
                }
                _ => self.tx_msgs.push(TxMsg {
                    src: o.src,
                    dst: o.dst,
                    tos: o.tos,
                    first: iov,
                    count: 1,
                    seg: len,
                    bytes: len,
                    pkt_bytes: d.len(),
                    closed: false,
                }),
            }
            iov += 1;
        }
        let msgs = std::mem::take(&mut self.tx_msgs);
        for (m, msg) in msgs.iter().enumerate() {
            let gso = (msg.count > 1).then(|| u16::try_from(msg.seg).unwrap_or(u16::MAX));
            self.fill_msg(m, msg, gso);
        }
        // Send; a message the kernel refuses is dropped and the rest still go.
        let mut sent = 0;
        let mut done = 0;
        let mut result = Ok(());
        while done < msgs.len() {
            match self.send(done, msgs.len() - done) {
                Ok(k) if k > 0 => {
                    let k = k.min(msgs.len() - done);
                    for m in &msgs[done..done + k] {
                        sent += m.count;
                        self.stats.tx_packets += m.count as u64;
                        self.stats.tx_bytes += m.pkt_bytes as u64;
                        if m.count > 1 {
                            self.gso_sends += 1;
                        }
                    }
                    done += k;
                }
                Ok(_) => {
                    self.stats.tx_dropped += msgs[done].count as u64;
                    done += 1;
                }
                Err(e) if per_message_error(&e) => {
                    let m = msgs[done];
                    let ok = if m.count > 1 {
                        // e.g. a segment larger than the path MTU, or no GSO support.
                        self.send_unsegmented(m)
                    } else {
                        0
                    };
                    sent += ok;
                    self.stats.tx_packets += ok as u64;
                    self.stats.tx_dropped += (m.count - ok) as u64;
                    if ok > 0 {
                        let per = m.pkt_bytes / m.count;
                        self.stats.tx_bytes += (per * ok) as u64;
                    }
                    // (send_unsegmented reused slot 0 of the scratch, which is at or behind
                    // this message, so the headers still to send are intact.)
                    done += 1;
                }
                Err(e) => {
                    // Socket buffer full (EAGAIN, ENOBUFS) or a broken socket: drop the rest.
                    let rest: usize = msgs[done..].iter().map(|m| m.count).sum();
                    self.stats.tx_dropped += rest as u64;
                    if !matches!(e.kind(), io::ErrorKind::WouldBlock)
                        && e.raw_os_error() != Some(libc::ENOBUFS)
                    {
                        result = Err(e);
                    }
                    break;
                }
            }
        }
        self.tx_msgs = msgs;
        pool.put_all(batch.drain(..));
        result.map(|()| sent)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn stats(&self) -> IoStats {
        self.stats
    }

    fn describe(&self) -> String {
        let mut opts = Vec::new();
        if self.reuse_port {
            opts.push("reuseport");
        }
        if self.gro {
            opts.push("gro");
        }
        if self.gso {
            opts.push("gso");
        }
        format!(
            "{}: udp {} [{}]",
            self.port.name(),
            self.local,
            opts.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    /// Receives until `n` packets arrived or a second passed.
    fn rx_wait(io: &mut UdpIo, pool: &mut Pool, n: usize, max: usize) -> Vec<Packet> {
        let mut b = Vec::new();
        let t = Instant::now();
        while b.len() < n && t.elapsed() < Duration::from_secs(1) {
            if io.rx_batch(pool, &mut b, max).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        b
    }

    /// A packet as the pipeline would hand it over: outer IPv4 + UDP + `payload`.
    fn v4_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Packet {
        assert!(src.is_ipv4(), "not IPv4");
        outer_packet(src, dst, 0, payload)
    }

    fn v6_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Packet {
        assert!(src.is_ipv6(), "not IPv6");
        outer_packet(src, dst, 0, payload)
    }

    /// Outer IPv4/IPv6 (of `src`'s family) + UDP + `payload`, with TOS / traffic class `tos`.
    fn outer_packet(src: SocketAddr, dst: SocketAddr, tos: u8, payload: &[u8]) -> Packet {
        let bytes = match (src, dst) {
            (SocketAddr::V4(s), SocketAddr::V4(d)) => {
                let mut h = [0u8; V4_HDR];
                assert!(write_v4_header(
                    &mut h,
                    (*s.ip(), s.port()),
                    (*d.ip(), d.port()),
                    tos,
                    64,
                    payload.len()
                ));
                [&h[..], payload].concat()
            }
            (SocketAddr::V6(s), SocketAddr::V6(d)) => {
                let mut h = [0u8; V6_HDR];
                assert!(write_v6_header(
                    &mut h,
                    (*s.ip(), s.port()),
                    (*d.ip(), d.port()),
                    tos,
                    64,
                    payload
                ));
                [&h[..], payload].concat()
            }
            _ => panic!("mixed families"),
        };
        Packet::from_bytes(Port::N3, &bytes).unwrap()
    }

    /// A GTP-U echo request (TS 29.281 §7.2.1), as a payload.
    const GTPU_ECHO: [u8; 12] = [0x32, 1, 0, 4, 0, 0, 0, 0, 0x12, 0x34, 0, 0];

    fn open(bind: &str) -> UdpIo {
        UdpIo::open(&UdpConfig::new(bind.parse().unwrap(), Port::N3)).unwrap()
    }

    #[test]
    fn udp_v4_rx_synthesizes_header_and_tx_sends_payload() {
        let mut io = open("127.0.0.1:0");
        let mut pool = Pool::new(64);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer_addr = peer.local_addr().unwrap();
        let local = io.local_addr();
        assert_ne!(local.port(), 0);
        assert_eq!(io.fd().map(|f| f.as_raw_fd()), Some(io.fd.as_raw_fd()));
        assert!(io.describe().starts_with("n3: udp 127.0.0.1:"));

        let mut empty = Vec::new();
        assert_eq!(io.rx_batch(&mut pool, &mut empty, 8).unwrap(), 0);

        peer.send_to(&GTPU_ECHO, local).unwrap();
        let mut got = rx_wait(&mut io, &mut pool, 1, 8);
        assert_eq!(got.len(), 1);
        let p = &got[0];
        assert_eq!(p.port(), Port::N3);
        assert_eq!(p.start(), HEADROOM);
        let d = p.data();
        assert_eq!(d.len(), 20 + 8 + GTPU_ECHO.len());
        assert_eq!(d[0], 0x45, "version 4, IHL 5");
        assert_eq!(d[1], 0, "TOS");
        assert_eq!(u16::from_be_bytes([d[2], d[3]]), 40, "total length");
        assert_eq!(&d[6..8], &[0x40, 0], "DF, offset 0");
        assert_eq!(d[8], 64, "TTL of loopback traffic");
        assert_eq!(d[9], 17, "protocol UDP");
        assert_eq!(&d[12..16], &[127, 0, 0, 1], "source = peer");
        assert_eq!(&d[16..20], &[127, 0, 0, 1], "destination = local");
        assert_eq!(
            checksum::checksum(&d[..20]),
            0,
            "IPv4 header checksum valid"
        );
        assert_ne!(&d[10..12], &[0, 0]);
        assert_eq!(
            u16::from_be_bytes([d[20], d[21]]),
            peer_addr.port(),
            "source port"
        );
        assert_eq!(
            u16::from_be_bytes([d[22], d[23]]),
            local.port(),
            "destination port"
        );
        assert_eq!(u16::from_be_bytes([d[24], d[25]]), 8 + 12, "UDP length");
        assert_eq!(&d[26..28], &[0, 0], "no UDP checksum on IPv4");
        assert_eq!(&d[28..], &GTPU_ECHO);
        let s = io.stats();
        assert_eq!((s.rx_packets, s.rx_bytes), (1, 40));

        // Back: swap the addresses, as an echo response would.
        let mut reply = vec![v4_packet(local, peer_addr, b"pong")];
        got.clear();
        assert_eq!(io.tx_batch(&mut reply, &mut pool).unwrap(), 1);
        assert!(reply.is_empty());
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = peer.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"pong");
        assert_eq!(from, local);
        let s = io.stats();
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_dropped), (1, 32, 0));
    }

    #[test]
    fn udp_v6_rx_synthesizes_header_and_tx_sends_payload() {
        let Ok(peer) = UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback");
            return;
        };
        let mut io = open("[::1]:0");
        let mut pool = Pool::new(64);
        let peer_addr = peer.local_addr().unwrap();
        let local = io.local_addr();
        peer.send_to(&GTPU_ECHO[..11], local).unwrap(); // odd length: checksum padding
        let got = rx_wait(&mut io, &mut pool, 1, 8);
        assert_eq!(got.len(), 1);
        let d = got[0].data();
        assert_eq!(d.len(), 40 + 8 + 11);
        assert_eq!(d[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([d[4], d[5]]), 19, "payload length");
        assert_eq!(d[6], 17, "next header UDP");
        assert_eq!(d[7], 64, "hop limit of loopback traffic");
        assert_eq!(&d[8..24], &Ipv6Addr::LOCALHOST.octets());
        assert_eq!(&d[24..40], &Ipv6Addr::LOCALHOST.octets());
        assert_eq!(u16::from_be_bytes([d[40], d[41]]), peer_addr.port());
        assert_eq!(u16::from_be_bytes([d[42], d[43]]), local.port());
        assert_eq!(u16::from_be_bytes([d[44], d[45]]), 19);
        assert_ne!(&d[46..48], &[0, 0], "UDP checksum is mandatory on IPv6");
        let verify = checksum::combine(&[
            checksum::pseudo_header_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST, 17, 19),
            checksum::sum(&d[40..]),
        ]);
        assert_eq!(verify, 0xffff, "UDP checksum valid");
        assert_eq!(&d[48..], &GTPU_ECHO[..11]);

        let mut reply = vec![v6_packet(local, peer_addr, b"pong6")];
        assert_eq!(io.tx_batch(&mut reply, &mut pool).unwrap(), 1);
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = peer.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"pong6"[..], local));
    }

    #[test]
    fn udp_tx_drops_what_it_cannot_send() {
        let mut io = open("127.0.0.1:0");
        let mut pool = Pool::new(64);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (local, to) = (io.local_addr(), peer.local_addr().unwrap());
        // ICMP echo request: not UDP.
        let mut icmp = v4_packet(local, to, &[8, 0, 0, 0, 0, 0, 0, 0])
            .data()
            .to_vec();
        icmp[9] = 1;
        let mut batch = vec![
            Packet::from_bytes(Port::N3, &icmp).unwrap(),
            // IPv6 on an IPv4 socket.
            v6_packet("[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap(), b"x"),
            // A source address this socket cannot send from.
            v4_packet("10.9.9.9:2152".parse().unwrap(), to, b"spoof"),
            // Truncated and garbage.
            Packet::from_bytes(Port::N3, &[0x45, 0, 0]).unwrap(),
            Packet::from_bytes(Port::N3, &[]).unwrap(),
            // Good one, in the middle.
            v4_packet(local, to, b"ok"),
            // Destination port 0: refused by the kernel, dropped, the rest still go.
            v4_packet(local, SocketAddr::new(to.ip(), 0), b"port0"),
            v4_packet(local, to, b"ok2"),
        ];
        assert_eq!(io.tx_batch(&mut batch, &mut pool).unwrap(), 2);
        assert!(batch.is_empty());
        let s = io.stats();
        assert_eq!((s.tx_packets, s.tx_dropped), (2, 6));
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        let n = peer.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ok");
        let n = peer.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ok2");
    }

    #[test]
    fn udp_wildcard_bind_learns_destination_and_sends_from_named_source() {
        let mut io = open("0.0.0.0:0");
        let mut pool = Pool::new(64);
        let port = io.local_addr().port();
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer_addr = peer.local_addr().unwrap();
        // 127.0.0.0/8 is local: send to 127.0.0.3 and see it as the destination.
        peer.send_to(b"to-3", ("127.0.0.3", port)).unwrap();
        let got = rx_wait(&mut io, &mut pool, 1, 8);
        assert_eq!(&got[0].data()[16..20], &[127, 0, 0, 3]);
        assert_eq!(checksum::checksum(&got[0].data()[..20]), 0);
        // Send from 127.0.0.2: the peer sees that source.
        let from: SocketAddr = SocketAddr::new("127.0.0.2".parse().unwrap(), 2152);
        let mut b = vec![v4_packet(from, peer_addr, b"from-2")];
        assert_eq!(io.tx_batch(&mut b, &mut pool).unwrap(), 1);
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 64];
        let (n, src) = peer.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"from-2");
        assert_eq!(
            src,
            SocketAddr::new(from.ip(), port),
            "address chosen, port the socket's"
        );
        // A source that is not local: refused by the kernel, counted.
        let mut b = vec![v4_packet(
            "192.0.2.1:2152".parse().unwrap(),
            peer_addr,
            b"x",
        )];
        assert_eq!(io.tx_batch(&mut b, &mut pool).unwrap(), 0);
        assert_eq!(io.stats().tx_dropped, 1);
    }

    #[test]
    fn udp_reuse_port_shares_an_address() {
        let mut cfg = UdpConfig::new("127.0.0.1:0".parse().unwrap(), Port::N9);
        cfg.reuse_port = true;
        let a = UdpIo::open(&cfg).unwrap();
        cfg.bind = a.local_addr();
        let b = UdpIo::open(&cfg).unwrap();
        assert_eq!(a.local_addr(), b.local_addr());
        assert!(b.describe().contains("reuseport"));
        cfg.reuse_port = false;
        let e = UdpIo::open(&cfg).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("SO_REUSEPORT"), "{e}");
    }

    #[test]
    fn udp_gso_send_and_gro_receive() {
        let mut rcfg = UdpConfig::new("127.0.0.1:0".parse().unwrap(), Port::N3);
        rcfg.gro = true;
        let mut rx = UdpIo::open(&rcfg).unwrap();
        if !rx.gro() {
            eprintln!("skipped: kernel without UDP_GRO");
            return;
        }
        let mut tcfg = UdpConfig::new("127.0.0.1:0".parse().unwrap(), Port::N3);
        tcfg.gso = true;
        let mut tx = UdpIo::open(&tcfg).unwrap();
        let mut pool = Pool::new(256);
        let (from, to) = (tx.local_addr(), rx.local_addr());
        // 10 × 1000 octets and a shorter tail: one segmented message; then another size.
        let mut batch: Vec<Packet> = (0..10u8)
            .map(|i| v4_packet(from, to, &[i; 1000]))
            .chain([
                v4_packet(from, to, &[10; 300]),
                v4_packet(from, to, &[11; 1000]),
            ])
            .collect();
        assert_eq!(tx.tx_batch(&mut batch, &mut pool).unwrap(), 12);
        assert_eq!(tx.gso_sends(), 1);
        assert_eq!(tx.stats().tx_packets, 12);
        // Receive four at a time: segments beyond `max` wait for the next call.
        let mut got = Vec::new();
        let t = Instant::now();
        while got.len() < 12 && t.elapsed() < Duration::from_secs(1) {
            let before = got.len();
            let n = rx.rx_batch(&mut pool, &mut got, 4).unwrap();
            assert!(n <= 4);
            assert_eq!(got.len(), before + n);
        }
        assert_eq!(got.len(), 12);
        for (i, p) in got.iter().enumerate() {
            let d = p.data();
            let len = if i == 10 { 300 } else { 1000 };
            assert_eq!(d.len(), 28 + len, "packet {i}");
            assert_eq!(u16::from_be_bytes([d[2], d[3]]) as usize, 28 + len);
            assert_eq!(checksum::checksum(&d[..20]), 0);
            assert!(d[28..].iter().all(|&b| usize::from(b) == i), "packet {i}");
            assert_eq!(u16::from_be_bytes([d[20], d[21]]), from.port());
        }
        assert_eq!(rx.stats().rx_packets, 12);
        assert!(rx.gro_receives() >= 1, "a coalesced message was split");
    }

    #[test]
    fn udp_gso_to_plain_socket_arrives_segmented() {
        let mut cfg = UdpConfig::new("127.0.0.1:0".parse().unwrap(), Port::N3);
        cfg.gso = true;
        let mut io = UdpIo::open(&cfg).unwrap();
        let mut pool = Pool::new(64);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = peer.local_addr().unwrap();
        let mut batch: Vec<Packet> = (0..5u8)
            .map(|i| v4_packet(io.local_addr(), to, &[i; 500]))
            .collect();
        assert_eq!(io.tx_batch(&mut batch, &mut pool).unwrap(), 5);
        peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 2048];
        for i in 0..5u8 {
            let n = peer.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 500][..]);
        }
    }

    #[test]
    fn udp_tos_crosses_the_socket_both_ways() {
        // DSCP 46 (EF) and ECN ECT(1): the FAR's Transport Level Marking on send, the
        // outer DSCP the pipeline sees on receive.
        const TOS: u8 = (46 << 2) | 0b01;
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let cfg = UdpConfig::new(bind.parse().unwrap(), Port::N3);
            let (Ok(mut tx), Ok(mut rx)) = (UdpIo::open(&cfg), UdpIo::open(&cfg)) else {
                eprintln!("skipped {bind}: no loopback of that family");
                continue;
            };
            let mut pool = Pool::new(64);
            let mut b = vec![outer_packet(tx.local_addr(), rx.local_addr(), TOS, b"ef")];
            assert_eq!(tx.tx_batch(&mut b, &mut pool).unwrap(), 1);
            let got = rx_wait(&mut rx, &mut pool, 1, 8);
            assert_eq!(got.len(), 1, "{bind}");
            let d = got[0].data();
            let tos = match d[0] >> 4 {
                4 => d[1],
                _ => (d[0] << 4) | (d[1] >> 4),
            };
            assert_eq!(tos & 0b11, TOS & 0b11, "{bind}: ECN bits");
            assert_eq!(tos >> 2, TOS >> 2, "{bind}: DSCP");
            assert_eq!(&d[d.len() - 2..], b"ef");
        }
    }

    #[test]
    fn udp_refused_message_leaves_gso_and_ecn_on() {
        // A message the kernel refuses with EINVAL (here: a multicast source) is
        // that message's failure; later runs are still segmented and still carry ECN.
        let mut cfg = UdpConfig::new("0.0.0.0:0".parse().unwrap(), Port::N3);
        cfg.gso = true;
        let mut tx = UdpIo::open(&cfg).unwrap();
        let mut rx = open("127.0.0.1:0");
        let mut pool = Pool::new(64);
        let to = rx.local_addr();
        let mut b = vec![v4_packet("224.0.0.1:2152".parse().unwrap(), to, b"x")];
        assert_eq!(tx.tx_batch(&mut b, &mut pool).unwrap(), 0);
        let from = SocketAddr::new("127.0.0.1".parse().unwrap(), tx.local_addr().port());
        let mut b: Vec<Packet> = (0..4u8)
            .map(|i| outer_packet(from, to, 0b01, &[i; 500]))
            .collect();
        assert_eq!(tx.tx_batch(&mut b, &mut pool).unwrap(), 4);
        let got = rx_wait(&mut rx, &mut pool, 4, 8);
        let ecn: Vec<u8> = got.iter().map(|p| p.data()[1] & 0b11).collect();
        assert_eq!(
            (tx.gso_sends(), ecn),
            (1, vec![0b01; 4]),
            "(segmented messages, ECN bits received)"
        );
    }

    #[test]
    fn udp_rx_reports_the_received_ttl() {
        let mut io = open("127.0.0.1:0");
        let mut pool = Pool::new(64);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_ttl(7).unwrap();
        peer.send_to(b"ttl", io.local_addr()).unwrap();
        let got = rx_wait(&mut io, &mut pool, 1, 8);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data()[8], 7, "TTL as received");
        assert_eq!(checksum::checksum(&got[0].data()[..20]), 0);
    }

    #[test]
    fn udp_rx_discards_truncated_datagrams() {
        let mut io = open("127.0.0.1:0");
        let mut pool = Pool::new(64);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let room = BUF_LEN - HEADROOM - V4_HDR;
        peer.send_to(&vec![1; room + 40], io.local_addr()).unwrap();
        peer.send_to(&vec![2; room - 1], io.local_addr()).unwrap();
        peer.send_to(b"ok", io.local_addr()).unwrap();
        let got = rx_wait(&mut io, &mut pool, 2, 8);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].data().len(), V4_HDR + room - 1);
        assert_eq!(&got[1].data()[V4_HDR..], b"ok");
        assert_eq!(io.stats().rx_discarded, 1, "the truncated one");
    }

    #[test]
    fn parse_outer_accepts_udp_and_refuses_the_rest() {
        let a: SocketAddr = "10.0.0.1:2152".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:2153".parse().unwrap();
        let p = v4_packet(a, b, b"hello");
        let o = parse_outer(p.data()).unwrap();
        assert_eq!((o.src, o.dst, o.payload), (a.ip(), b, (28, 33)));
        // Trailing octets after the IP total length are not payload.
        let mut long = p.data().to_vec();
        long.extend_from_slice(b"pad");
        assert_eq!(parse_outer(&long).unwrap().payload, (28, 33));
        // Every truncation is refused, and no prefix panics.
        for n in 0..p.len() {
            assert_eq!(parse_outer(&p.data()[..n]), None, "{n}");
        }
        let mut frag = p.data().to_vec();
        frag[6] |= 0x20; // MF
        assert_eq!(parse_outer(&frag), None);
        let mut bad_udp_len = p.data().to_vec();
        bad_udp_len[24..26].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(parse_outer(&bad_udp_len), None);
        let p6 = v6_packet(
            "[2001:db8::1]:1".parse().unwrap(),
            "[2001:db8::2]:2".parse().unwrap(),
            b"x",
        );
        for n in 0..p6.len() {
            assert_eq!(parse_outer(&p6.data()[..n]), None, "{n}");
        }
        assert_eq!(parse_outer(p6.data()).unwrap().payload, (48, 49));
        // Pseudo-random garbage never panics.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut d = x.to_le_bytes().repeat(8);
            d[0] = if x & 1 == 0 { 0x45 } else { 0x60 };
            let _ = parse_outer(&d[..(x >> 58) as usize]);
        }
    }
}
