//! Kernel ABI of AF_XDP (`linux/if_xdp.h`), declared here rather than taken from a binding
//! crate, and thin wrappers that turn errno into `io::Error`s that say what was being done.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const AF_XDP: libc::c_int = 44;
pub const SOL_XDP: libc::c_int = 283;

pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub const XDP_RX_RING: libc::c_int = 2;
pub const XDP_TX_RING: libc::c_int = 3;
pub const XDP_UMEM_REG: libc::c_int = 4;
pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub const XDP_STATISTICS: libc::c_int = 7;

pub const XDP_SHARED_UMEM: u16 = 1;
pub const XDP_COPY: u16 = 1 << 1;
pub const XDP_ZEROCOPY: u16 = 1 << 2;
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
pub const XDP_RING_NEED_WAKEUP: u32 = 1;

pub const XDP_PGOFF_RX_RING: libc::off_t = 0;
pub const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
pub const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
pub const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpRingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpMmapOffsets {
    pub rx: XdpRingOffset,
    pub tx: XdpRingOffset,
    pub fr: XdpRingOffset,
    pub cr: XdpRingOffset,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpUmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// Kernel-side counters of one socket (`XDP_STATISTICS`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for other reasons than an invalid descriptor (e.g. no frame in the fill ring).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// The RX ring was full.
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

impl XdpStatistics {
    pub fn add(&mut self, o: &XdpStatistics) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += o.tx_ring_empty_descs;
    }
}

/// Adds what was being done (and a hint for the common causes) to an OS error.
pub fn context(e: io::Error, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (needs root: CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF)"
        }
        Some(libc::EAFNOSUPPORT) => " (this kernel has no AF_XDP: CONFIG_XDP_SOCKETS)",
        Some(libc::ENODEV) => " (no such interface)",
        Some(libc::EBUSY) => " (another XDP program is attached, or the queue has a socket)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

pub fn setsockopt<T>(fd: &OwnedFd, name: libc::c_int, v: &T, what: &str) -> io::Result<()> {
    // SAFETY: v points to a live T of the length passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            name,
            (v as *const T).cast(),
            socklen::<T>(),
        )
    };
    if r < 0 {
        return Err(context(io::Error::last_os_error(), what));
    }
    Ok(())
}

/// Reads an XDP socket option of type `T` (plain old data: integers only).
pub fn getsockopt<T: Default>(fd: &OwnedFd, name: libc::c_int, what: &str) -> io::Result<T> {
    let mut v = T::default();
    let mut len = socklen::<T>();
    // SAFETY: v is a live, writable T and len its size; the kernel writes at most len octets
    // of integers (any bit pattern is a valid T for the types used here).
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(context(io::Error::last_os_error(), what));
    }
    Ok(v)
}

fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(0)
}

/// An mmap'd region, unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access is synchronised by its
// owner (one worker thread), and the shared ring words are accessed through atomics.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Anonymous private memory (the UMEM), populated.
    pub fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(context(io::Error::last_os_error(), "mmap UMEM"));
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    /// A ring of an XDP socket, shared with the kernel.
    pub fn ring(fd: &OwnedFd, len: usize, pgoff: libc::off_t, what: &str) -> io::Result<Mmap> {
        // SAFETY: maps the socket's ring at the offset the kernel defines for it; the kernel
        // checks the length against the ring it allocated.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(context(io::Error::last_os_error(), what));
        }
        Ok(Mmap { ptr: p.cast(), len })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing refers to the region after
        // its owner is dropped.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// A new AF_XDP socket.
pub fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor returned is owned by nobody else.
    let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(context(io::Error::last_os_error(), "socket(AF_XDP)"));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds `fd` to (ifindex, queue); with `shared`, as another socket of that socket's UMEM
/// (`XDP_SHARED_UMEM`: its fill and completion rings, the mode it was bound in).
pub fn bind_xdp(
    fd: &OwnedFd,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared: Option<&OwnedFd>,
) -> io::Result<()> {
    let (flags, shared_umem_fd) = match shared {
        Some(s) => (XDP_SHARED_UMEM, u32::try_from(s.as_raw_fd()).unwrap_or(0)),
        None => (flags, 0),
    };
    let sa = SockaddrXdp {
        family: u16::try_from(AF_XDP).unwrap_or_default(),
        flags,
        ifindex,
        queue_id: queue,
        shared_umem_fd,
    };
    // SAFETY: sa is a valid sockaddr_xdp of the length passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const SockaddrXdp).cast(),
            socklen::<SockaddrXdp>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
