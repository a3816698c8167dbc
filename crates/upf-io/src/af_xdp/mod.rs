//! The AF_XDP backend: one XDP socket per (interface, queue), owned by one worker, behind an
//! XDP program that passes to the kernel what the UPF must not see and redirects the rest into
//! the socket of the queue it arrived on (see [`prog`] for what goes where and how the owning
//! worker is computed).
//!
//! The sockets are raw system calls: the UMEM is an anonymous mapping registered with
//! `XDP_UMEM_REG`, the four rings are mmap'd at the offsets of `XDP_MMAP_OFFSETS`. The program
//! is C (`bpf/xdp.bpf.c`, built by clang), loaded with aya and attached as a BPF link, so it
//! is detached when the last socket of the interface is dropped or the process exits.
//!
//! Frames: the first half of the UMEM's frames belong to the fill/RX rings (with queue groups,
//! a half per group), the second half to TX. Receiving copies the IP packet (Ethernet and one VLAN tag stripped) into a pool buffer
//! and gives the frame straight back to the fill ring; sending writes the Ethernet header
//! (source: the interface's MAC, destination: the next hop of the packet's IP destination, the
//! outer one for GTP-U) and the packet into a free TX frame. Copy mode copies anyway (veth and
//! most virtual NICs have no zero-copy); zero-copy is tried first when asked for.
//!
//! Queue groups (seed 001, [`XdpConfig::classes`]): each queue has a socket per group, the
//! first owning the UMEM and its fill and completion rings, the others bound to it with
//! `XDP_SHARED_UMEM` and an RX ring each ([`PacketIo::rx_group`]). The RX rings together
//! hold no more frames than the fill ring, so a group whose ring is full loses its own
//! packets, never another group's frames.
//!
//! Steering: the kernel only redirects to the socket of the arriving queue. Each socket
//! reports, per received packet, the worker that owns it ([`XskIo::last_workers`], from the
//! metadata the program wrote, recomputed with [`prog::xdp_worker`] when there is none); a
//! runtime with fewer queues than workers hands those packets over in software. With the
//! NIC's RSS spreading flows over as many queues as workers, most packets are already home.

pub mod prog;
mod ring;
mod sys;

#[cfg(test)]
mod tests;

pub use prog::{worker_of_key, xdp_group, xdp_worker, Filter};
pub use sys::XdpStatistics;

use crate::link::{Link, NextHops};
use crate::{IoStats, PacketIo, Pool};
use aya::maps::{MapData, XskMap};
use aya::programs::XdpMode;
use aya::Ebpf;
use ring::{AddrRing, DescRing};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd as _, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use sys::{Mmap, XdpDesc};
use upf_packet::classes::Classes;
use upf_packet::{Packet, Port};

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode if the driver has it, else generic.
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// On the generic path after the skb is built (`XDP_FLAGS_SKB_MODE`).
    Generic,
    /// Loaded, not attached: another XDP program attached to the interface (the XDP engine
    /// of `upf-xdp`) tail-calls it ([`XdpInterface::program_fd`]) for the packets it leaves to
    /// the user-space engine, which then go where they would go without that program.
    TailCalled,
}

/// Options of an AF_XDP interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    pub port: Port,
    /// Workers the program steers over.
    pub workers: u32,
    /// N3/N9: the GTP-U endpoint addresses; N6: the host's own addresses (left to the kernel).
    /// Empty: the interface's addresses.
    pub local: Vec<IpAddr>,
    pub attach: AttachMode,
    /// Try zero-copy first (falling back to copy mode).
    pub zero_copy: bool,
    /// UMEM frames per socket (a power of two, ≥ 64): half for receiving, half for sending
    /// (with queue groups, another half for each group's receiving beyond the first). The
    /// UMEM may be charged to RLIMIT_MEMLOCK (8 MiB on the project's VMs): frames ×
    /// frame_size octets per socket, 2 MiB by default.
    pub frames: u32,
    /// Octets per frame: 2048 or 4096.
    pub frame_size: u32,
    /// Peak-rate UEs the program steers per flow.
    pub spread_ues: Vec<IpAddr>,
    /// Queue groups, a socket each on every queue (`None`: one socket per queue).
    pub classes: Option<Classes>,
}

impl XdpConfig {
    pub fn new(port: Port, workers: u32) -> Self {
        Self {
            port,
            workers,
            local: Vec::new(),
            attach: AttachMode::Auto,
            zero_copy: false,
            frames: 1024,
            frame_size: 2048,
            spread_ues: Vec::new(),
            classes: None,
        }
    }
}

/// What a host and an interface can do, probed (see [`capabilities`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// The kernel has AF_XDP sockets.
    pub af_xdp: bool,
    /// XDP in the driver; `None` when unknown (a program is already attached).
    pub native_xdp: Option<bool>,
    /// AF_XDP zero-copy on queue 0; `None` when unknown (the queue is busy).
    pub zero_copy: Option<bool>,
    /// Receive queues of the interface.
    pub rx_queues: u32,
}

/// Probes `ifname`: attaches a pass-everything program for a moment (native mode) and binds a
/// small socket to queue 0 in zero-copy mode. Errors: no such interface, no permission.
pub fn capabilities(ifname: &str) -> io::Result<Capabilities> {
    let link = Link::by_name(ifname)?;
    let rx_queues = rx_queues(ifname);
    let af_xdp = match sys::xdp_socket() {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => false,
        Err(e) => return Err(e),
    };
    let mut probe = prog::object(&Filter::new(false, Vec::new(), 1), 1)?;
    let prog = prog::load(&mut probe, prog::PROBE)?;
    let native_xdp = match prog.attach_to_if_index(link.ifindex, XdpMode::Driver) {
        Ok(_link) => Some(true),
        Err(e) => match crate::bpf::errno(&e) {
            Some(libc::EBUSY) | Some(libc::EEXIST) => None,
            Some(libc::EPERM) | Some(libc::EACCES) => {
                return Err(crate::bpf::error("attaching XDP", &e))
            }
            _ => Some(false),
        },
    };
    drop(probe);
    let zero_copy = if af_xdp {
        match Umem::new(32, 32, 2048)
            .and_then(|u| Xsk::bind(&u, link.ifindex, 0, sys::XDP_ZEROCOPY, 32))
        {
            Ok(_) => Some(true),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => None,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
                return Err(e)
            }
            Err(_) => Some(false),
        }
    } else {
        Some(false)
    };
    Ok(Capabilities {
        af_xdp,
        native_xdp,
        zero_copy,
        rx_queues,
    })
}

fn rx_queues(ifname: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX))
        .max(1)
}

/// The addresses of `ifname` (getifaddrs).
pub fn interface_addresses(ifname: &str) -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(sys::context(io::Error::last_os_error(), "getifaddrs"));
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() == ifname.as_bytes() && !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr is non-null and points at a sockaddr of its family's size.
            let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if fam == libc::AF_INET {
                // SAFETY: family AF_INET: the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
            } else if fam == libc::AF_INET6 {
                // SAFETY: family AF_INET6: the address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The program attached to one interface (aya keeps the link: dropping the object detaches
/// it) and its XSKMAP.
struct Attached {
    map: Mutex<XskMap<MapData>>,
    ebpf: Ebpf,
    native: bool,
    filter: Filter,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("native", &self.native)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

/// An interface with the UPF's XDP program attached; hands out one socket per queue.
#[derive(Debug, Clone)]
pub struct XdpInterface {
    link: Link,
    cfg: XdpConfig,
    attached: Arc<Attached>,
    queues: u32,
}

impl XdpInterface {
    /// Loads and attaches the program to `ifname`. Errors name the cause: no such interface,
    /// no permission, no AF_XDP/XDP support, another XDP program already attached.
    pub fn open(ifname: &str, cfg: XdpConfig) -> io::Result<Self> {
        let link = Link::by_name(ifname)?;
        let queues = rx_queues(ifname);
        let local = if cfg.local.is_empty() {
            interface_addresses(ifname)?
        } else {
            cfg.local.clone()
        };
        let filter = Filter::new(cfg.port != Port::N6, local, cfg.workers)
            .with_spread(cfg.spread_ues.iter().copied())
            .with_classes(cfg.classes.clone());
        let mut ebpf = prog::object(&filter, queues)?;
        let prog = prog::load(&mut ebpf, prog::PROGRAM)?;
        let what = format!("attach XDP to {ifname}");
        let mut attach = |mode| {
            prog.attach_to_if_index(link.ifindex, mode)
                .map(|_| ())
                .map_err(|e| (crate::bpf::errno(&e), crate::bpf::error(&what, &e)))
        };
        let native = match cfg.attach {
            AttachMode::Native => attach(XdpMode::Driver).map(|()| true),
            AttachMode::Generic => attach(XdpMode::Skb).map(|()| false),
            AttachMode::TailCalled => Ok(false),
            AttachMode::Auto => match attach(XdpMode::Driver) {
                Ok(()) => Ok(true),
                Err((Some(libc::EOPNOTSUPP) | Some(libc::EINVAL), _)) => {
                    attach(XdpMode::Skb).map(|()| false)
                }
                Err(e) => Err(e),
            },
        }
        .map_err(|(_, e)| e)?;
        let map = ebpf
            .take_map(prog::XSK_MAP)
            .ok_or_else(|| io::Error::other("XDP object without its XSKMAP"))?;
        let map = XskMap::try_from(map).map_err(|e| crate::bpf::error("XSKMAP", &e))?;
        Ok(Self {
            link,
            cfg,
            attached: Arc::new(Attached {
                map: Mutex::new(map),
                ebpf,
                native,
                filter,
            }),
            queues,
        })
    }

    pub fn queues(&self) -> u32 {
        self.queues
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// What the program lets through and how it steers.
    pub fn filter(&self) -> &Filter {
        &self.attached.filter
    }

    /// Whether the program runs in the driver (else on the generic path, or tail-called).
    pub fn native(&self) -> bool {
        self.attached.native
    }

    /// A descriptor of the steering program, for the program array of the XDP program that
    /// tail-calls it ([`AttachMode::TailCalled`]). The program lives while this interface or
    /// one of its sockets does (the caller's array entry goes when it is closed).
    pub fn program_fd(&self) -> io::Result<aya::programs::ProgramFd> {
        let prog: &aya::programs::Xdp = self
            .attached
            .ebpf
            .program(prog::PROGRAM)
            .ok_or_else(|| io::Error::other("XDP object without its program"))?
            .try_into()
            .map_err(|e| crate::bpf::error(prog::PROGRAM, &e))?;
        prog.fd()
            .map_err(|e| crate::bpf::error(prog::PROGRAM, &e))?
            .try_clone()
    }

    /// A socket on `queue` (with queue groups: one per group, as one [`XskIo`]), registered
    /// in the program's map.
    pub fn socket(&self, queue: u32) -> io::Result<XskIo> {
        if queue >= self.queues {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: queue {queue} of {}", self.link.name, self.queues),
            ));
        }
        let c = &self.cfg;
        if !c.frames.is_power_of_two() || c.frames < 64 || !matches!(c.frame_size, 2048 | 4096) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_XDP: frames must be a power of two ≥ 64, frame_size 2048 or 4096",
            ));
        }
        // Half the frames for receiving, half for sending; with queue groups, as many
        // receiving frames again per group, so that each group's RX ring is as big as the
        // one socket's would be and the rings together hold no more than the fill ring.
        let groups = self.attached.filter.groups();
        let rx = c.frames / 2;
        let umem = Umem::new(rx * groups, rx, c.frame_size)?;
        let mut flags = if c.zero_copy {
            sys::XDP_ZEROCOPY
        } else {
            sys::XDP_COPY
        };
        let ifindex = self.link.ifindex;
        let xsk = match Xsk::bind(&umem, ifindex, queue, flags, rx) {
            Ok(x) => x,
            Err(_) if c.zero_copy => {
                flags = sys::XDP_COPY;
                Xsk::bind(&umem, ifindex, queue, flags, rx)?
            }
            Err(e) => return Err(e),
        };
        let others = (1..groups)
            .map(|_| GroupRx::bind(&xsk, ifindex, queue, rx))
            .collect::<io::Result<Vec<_>>>()?;
        let mut map =
            (self.attached.map.lock()).map_err(|_| io::Error::other("XSKMAP lock poisoned"))?;
        let fds = std::iter::once(&xsk.fd).chain(others.iter().map(|g| &g.fd));
        for (g, fd) in (0..).zip(fds) {
            map.set(queue * groups + g, fd.as_raw_fd(), 0)
                .map_err(|e| crate::bpf::error("registering the socket in the XSKMAP", &e))?;
        }
        drop(map);
        let mut io = XskIo::new(self, queue, umem, xsk, flags == sys::XDP_ZEROCOPY);
        io.others = others;
        Ok(io)
    }
}

/// The packet memory shared with the kernel.
#[derive(Debug)]
struct Umem {
    area: Mmap,
    /// The first `rx_frames` go to the fill ring (receiving), the rest are for sending.
    rx_frames: u32,
    frames: u32,
    frame_size: u32,
}

impl Umem {
    fn new(rx_frames: u32, tx_frames: u32, frame_size: u32) -> io::Result<Umem> {
        let frames = rx_frames + tx_frames;
        let len = frames as usize * frame_size as usize;
        Ok(Umem {
            area: Mmap::anonymous(len)?,
            rx_frames,
            frames,
            frame_size,
        })
    }

    fn tx_frames(&self) -> u32 {
        self.frames - self.rx_frames
    }

    fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let a = usize::try_from(addr).ok()?;
        if a.checked_add(len)? > self.area.len {
            return None;
        }
        // SAFETY: a + len is inside the area; the frame is ours (the kernel handed it over on
        // a consumer ring and does not write it until it is back on the fill ring).
        Some(unsafe { std::slice::from_raw_parts(self.area.ptr.add(a), len) })
    }

    fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let a = usize::try_from(addr).ok()?;
        if a.checked_add(len)? > self.area.len {
            return None;
        }
        // SAFETY: as frame(); TX frames are ours until posted on the TX ring.
        Some(unsafe { std::slice::from_raw_parts_mut(self.area.ptr.add(a), len) })
    }
}

/// A bound socket and its rings.
#[derive(Debug)]
struct Xsk {
    // Field order: the socket closes before its rings are unmapped.
    fd: OwnedFd,
    fill: AddrRing,
    comp: AddrRing,
    rx: DescRing,
    tx: DescRing,
}

impl Xsk {
    /// Registers `umem`, creates the rings (the RX ring of `rx` descriptors, the fill ring
    /// big enough for the receiving frames, TX and completion rings as many as the sending
    /// frames), fills the fill ring and binds to (ifindex, queue) with `mode`
    /// (copy/zero-copy).
    fn bind(umem: &Umem, ifindex: u32, queue: u32, mode: u16, rx: u32) -> io::Result<Xsk> {
        let fd = sys::xdp_socket()?;
        let reg = sys::XdpUmemReg {
            addr: umem.area.ptr as u64,
            len: umem.area.len as u64,
            chunk_size: umem.frame_size,
            ..Default::default()
        };
        sys::setsockopt(
            &fd,
            sys::XDP_UMEM_REG,
            &reg,
            "XDP_UMEM_REG (UMEM counts against RLIMIT_MEMLOCK)",
        )?;
        let fills = umem.rx_frames.next_power_of_two();
        let sends = umem.tx_frames();
        sys::setsockopt(&fd, sys::XDP_UMEM_FILL_RING, &fills, "XDP_UMEM_FILL_RING")?;
        sys::setsockopt(
            &fd,
            sys::XDP_UMEM_COMPLETION_RING,
            &sends,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        sys::setsockopt(&fd, sys::XDP_RX_RING, &rx, "XDP_RX_RING")?;
        sys::setsockopt(&fd, sys::XDP_TX_RING, &sends, "XDP_TX_RING")?;
        let off: sys::XdpMmapOffsets =
            sys::getsockopt(&fd, sys::XDP_MMAP_OFFSETS, "XDP_MMAP_OFFSETS")?;
        let fill = AddrRing::map(
            &fd,
            &off.fr,
            fills,
            sys::XDP_UMEM_PGOFF_FILL_RING,
            true,
            "mmap fill ring",
        )?;
        let comp = AddrRing::map(
            &fd,
            &off.cr,
            sends,
            sys::XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
            "mmap completion ring",
        )?;
        let rx = map_rx(&fd, &off, rx)?;
        let tx = DescRing::map(
            &fd,
            &off.tx,
            sends,
            sys::XDP_PGOFF_TX_RING,
            true,
            "mmap TX ring",
        )?;
        let mut x = Xsk {
            fd,
            fill,
            comp,
            rx,
            tx,
        };
        for i in 0..umem.rx_frames {
            x.fill.push(u64::from(i) * u64::from(umem.frame_size));
        }
        x.fill.submit();
        sys::bind_xdp(&x.fd, ifindex, queue, mode | sys::XDP_USE_NEED_WAKEUP, None).map_err(
            |e| {
                let m = if mode == sys::XDP_ZEROCOPY {
                    "zero-copy"
                } else {
                    "copy"
                };
                sys::context(
                    e,
                    &format!("bind AF_XDP socket to ifindex {ifindex} queue {queue} ({m} mode)"),
                )
            },
        )?;
        Ok(x)
    }

    /// Asks the kernel to process the TX ring (in copy mode: send up to 32 frames). `Ok(true)`:
    /// progress was made or more may be (EAGAIN after a full batch); `Ok(false)`: the device
    /// is busy or out of buffers, the ring is processed on a later kick.
    fn kick(&self) -> io::Result<bool> {
        // SAFETY: sendto without data on our socket; no buffers are passed.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(true),
            Some(libc::EBUSY) | Some(libc::ENOBUFS) => Ok(false),
            _ => Err(sys::context(e, "AF_XDP TX kick (sendto)")),
        }
    }
}

/// The RX ring of `rx` descriptors of socket `fd`, whose ring offsets are `off`.
fn map_rx(fd: &OwnedFd, off: &sys::XdpMmapOffsets, rx: u32) -> io::Result<DescRing> {
    DescRing::map(
        fd,
        &off.rx,
        rx,
        sys::XDP_PGOFF_RX_RING,
        false,
        "mmap RX ring",
    )
}

/// Another queue group's socket on a queue: its RX ring, on the first socket's UMEM.
#[derive(Debug)]
struct GroupRx {
    fd: OwnedFd,
    rx: DescRing,
}

impl GroupRx {
    fn bind(first: &Xsk, ifindex: u32, queue: u32, rx: u32) -> io::Result<GroupRx> {
        let fd = sys::xdp_socket()?;
        sys::setsockopt(&fd, sys::XDP_RX_RING, &rx, "XDP_RX_RING")?;
        let off: sys::XdpMmapOffsets =
            sys::getsockopt(&fd, sys::XDP_MMAP_OFFSETS, "XDP_MMAP_OFFSETS")?;
        let ring = map_rx(&fd, &off, rx)?;
        sys::bind_xdp(&fd, ifindex, queue, 0, Some(&first.fd)).map_err(|e| {
            sys::context(
                e,
                &format!("bind a queue group's AF_XDP socket to ifindex {ifindex} queue {queue}"),
            )
        })?;
        Ok(GroupRx { fd, rx: ring })
    }
}

/// One AF_XDP socket (with queue groups: one per group): a queue of an interface, owned by
/// one worker.
#[derive(Debug)]
pub struct XskIo {
    // Field order: sockets (and rings) before the UMEM, both before the program.
    /// The sockets of groups 1 and up (group 0's is `xsk`).
    others: Vec<GroupRx>,
    xsk: Xsk,
    umem: Umem,
    _attached: Arc<Attached>,
    filter: Filter,
    port: Port,
    queue: u32,
    link: Link,
    next_hops: NextHops,
    zero_copy: bool,
    native: bool,
    /// TX frames not on the TX ring.
    tx_free: Vec<u64>,
    /// Owning worker of each packet appended by the last `rx_batch`.
    workers: Vec<u32>,
    stats: IoStats,
}

impl XskIo {
    fn new(iface: &XdpInterface, queue: u32, umem: Umem, xsk: Xsk, zero_copy: bool) -> Self {
        let tx_free = (umem.rx_frames..umem.frames)
            .map(|i| u64::from(i) * u64::from(umem.frame_size))
            .collect();
        XskIo {
            others: Vec::new(),
            xsk,
            umem,
            _attached: iface.attached.clone(),
            filter: iface.attached.filter.clone(),
            port: iface.cfg.port,
            queue,
            link: iface.link.clone(),
            next_hops: NextHops::new(iface.link.clone()),
            zero_copy,
            native: iface.attached.native,
            tx_free,
            workers: Vec::new(),
            stats: IoStats::default(),
        }
    }

    /// The worker owning each packet the last [`PacketIo::rx_batch`] appended, in order.
    pub fn last_workers(&self) -> &[u32] {
        &self.workers
    }

    /// The kernel's counters of this socket (drops for a full RX ring or an empty fill ring),
    /// with queue groups summed over their sockets.
    pub fn kernel_stats(&self) -> io::Result<XdpStatistics> {
        let mut sum: XdpStatistics =
            sys::getsockopt(&self.xsk.fd, sys::XDP_STATISTICS, "XDP_STATISTICS")?;
        for o in &self.others {
            let k: XdpStatistics = sys::getsockopt(&o.fd, sys::XDP_STATISTICS, "XDP_STATISTICS")?;
            sum.add(&k);
        }
        Ok(sum)
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Frees TX frames the kernel has sent.
    fn reclaim(&mut self) {
        let n = self.xsk.comp.available();
        for i in 0..n {
            self.tx_free.push(self.xsk.comp.peek(i));
        }
        self.xsk.comp.release(n);
    }

    /// Kicks until the TX ring is drained or the kernel stops taking (bounded).
    fn push_tx(&mut self, posted: usize) -> io::Result<()> {
        // Copy mode sends at most 32 frames per kick.
        for _ in 0..posted / 32 + 4 {
            if self.xsk.tx.free() == self.umem.tx_frames() {
                break;
            }
            // With XDP_USE_NEED_WAKEUP the kernel says when it needs the kick; copy mode
            // always does (it sends from the kick).
            let wanted = self.xsk.tx.needs_wakeup() || !self.zero_copy;
            if !wanted || !self.xsk.kick()? {
                break;
            }
        }
        self.reclaim();
        Ok(())
    }
}

/// Offset of the IP header in an Ethernet frame (one VLAN tag skipped), if the frame is IP.
fn ip_offset(frame: &[u8]) -> Option<usize> {
    let et = |o: usize| Some(u16::from_be_bytes([*frame.get(o)?, *frame.get(o + 1)?]));
    let (t, off) = match et(12)? {
        0x8100 | 0x88a8 => (et(16)?, 18),
        t => (t, 14),
    };
    matches!(t, 0x0800 | 0x86dd).then_some(off)
}

/// The IP packet in `ip`, without Ethernet padding (its own length when readable).
fn ip_trim(ip: &[u8]) -> &[u8] {
    let len = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        Some(6) if ip.len() >= 40 => 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        _ => ip.len(),
    };
    ip.get(..len).unwrap_or(ip)
}

/// The destination of an IP packet.
fn ip_dst(ip: &[u8]) -> Option<IpAddr> {
    match ip.first()? >> 4 {
        4 => {
            let b: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        6 => {
            let b: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        _ => None,
    }
}

impl XskIo {
    /// Up to `max` packets from group `g`'s RX ring into `batch` (their owners appended to
    /// `workers`), each frame given straight back to the fill ring.
    fn rx_ring(&mut self, g: usize, pool: &mut Pool, batch: &mut Vec<Packet>, max: usize) -> usize {
        let XskIo {
            others,
            xsk,
            umem,
            filter,
            port,
            workers,
            stats,
            ..
        } = self;
        let rx = match g {
            0 => &mut xsk.rx,
            _ => match others.get_mut(g - 1) {
                Some(o) => &mut o.rx,
                None => return 0,
            },
        };
        let avail = rx.available().min(u32::try_from(max).unwrap_or(u32::MAX));
        if avail == 0 {
            if xsk.fill.needs_wakeup() {
                // SAFETY: a zero-length non-blocking receive on our socket wakes the driver.
                unsafe {
                    libc::recvfrom(
                        xsk.fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    );
                }
            }
            return 0;
        }
        let mask = !u64::from(umem.frame_size - 1);
        let mut n = 0;
        for i in 0..avail {
            let XdpDesc { addr, len, .. } = rx.peek(i);
            let worker = take_meta(umem, addr, filter.workers);
            let frame = umem.frame(addr, len as usize).unwrap_or(&[]);
            let accepted = ip_offset(frame).and_then(|off| {
                let ip = ip_trim(frame.get(off..)?);
                let mut p = pool.get(*port);
                if p.load(*port, ip) {
                    Some(p)
                } else {
                    pool.put(p);
                    None
                }
            });
            match accepted {
                Some(p) => {
                    stats.rx_packets += 1;
                    stats.rx_bytes += p.len() as u64;
                    let w = worker.or_else(|| xdp_worker(frame, filter)).unwrap_or(0);
                    batch.push(p);
                    workers.push(w);
                    n += 1;
                }
                None => stats.rx_discarded += 1,
            }
            // The fill ring holds every RX frame, so there is always room to give it back.
            xsk.fill.push(addr & mask);
        }
        rx.release(avail);
        xsk.fill.submit();
        n
    }
}

impl PacketIo for XskIo {
    /// Every group's ring, highest first, up to `max` in all.
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        self.workers.clear();
        let mut n = 0;
        for g in 0..=self.others.len() {
            n += self.rx_ring(g, pool, batch, max - n);
        }
        Ok(n)
    }

    fn rx_groups(&self) -> usize {
        1 + self.others.len()
    }

    fn rx_group(
        &mut self,
        group: usize,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        self.workers.clear();
        Ok(self.rx_ring(group, pool, batch, max))
    }

    fn group_fd(&self, group: usize) -> Option<BorrowedFd<'_>> {
        match group {
            0 => Some(self.xsk.fd.as_fd()),
            g => self.others.get(g - 1).map(|o| o.fd.as_fd()),
        }
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        self.reclaim();
        let now = Instant::now();
        let mut posted = 0;
        let fsize = self.umem.frame_size as usize;
        for p in batch.drain(..) {
            let ip = p.data();
            let mac = ip_dst(ip).and_then(|d| self.next_hops.mac_for(d, now));
            let ok = match (mac, ip.first().map(|b| b >> 4)) {
                (Some(mac), Some(v)) if 14 + ip.len() <= fsize && self.xsk.tx.free() > 0 => {
                    match self.tx_free.pop() {
                        Some(addr) => {
                            let len = 14 + ip.len();
                            let src = self.link.mac;
                            if let Some(f) = self.umem.frame_mut(addr, len) {
                                f[0..6].copy_from_slice(&mac);
                                f[6..12].copy_from_slice(&src);
                                f[12..14].copy_from_slice(if v == 6 {
                                    &[0x86, 0xdd]
                                } else {
                                    &[0x08, 0x00]
                                });
                                f[14..].copy_from_slice(ip);
                                self.xsk.tx.push(XdpDesc {
                                    addr,
                                    len: u32::try_from(len).unwrap_or(0),
                                    options: 0,
                                });
                                self.stats.tx_bytes += ip.len() as u64;
                                true
                            } else {
                                self.tx_free.push(addr);
                                false
                            }
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if ok {
                posted += 1;
            } else {
                self.stats.tx_dropped += 1;
            }
            pool.put(p);
        }
        if posted > 0 {
            self.xsk.tx.submit();
            self.stats.tx_packets += posted as u64;
            self.push_tx(posted)?;
        }
        Ok(posted)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.group_fd(0)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push_tx(0)
    }

    fn stats(&self) -> IoStats {
        self.stats
    }

    fn refresh_stats(&mut self) {
        // Cumulative in the kernel for the socket's life.
        if let Ok(k) = self.kernel_stats() {
            self.stats.rx_kernel_dropped = k.rx_dropped + k.rx_ring_full;
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}: AF_XDP {} queue {} ({} XDP, {} mode, {} workers, {} queue groups)",
            self.port.name(),
            self.link.name,
            self.queue,
            if self.native { "native" } else { "generic" },
            if self.zero_copy { "zero-copy" } else { "copy" },
            self.filter.workers,
            self.rx_groups(),
        )
    }
}

/// The worker the program wrote in front of the frame at `addr` (of `workers`), erasing the
/// mark so that a later frame in the same place without metadata is not mistaken for it.
fn take_meta(umem: &mut Umem, addr: u64, workers: u32) -> Option<u32> {
    let m = addr.checked_sub(prog::META_LEN as u64)?;
    // Metadata never crosses into the previous frame.
    if m / u64::from(umem.frame_size) != addr / u64::from(umem.frame_size) {
        return None;
    }
    let b = umem.frame_mut(m, prog::META_LEN)?;
    let magic = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    if magic != prog::META_MAGIC {
        return None;
    }
    b[0..4].fill(0);
    // The group is in the top octet.
    let w = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]) & 0xff_ffff;
    (w < workers).then_some(w)
}
