//! The three system calls std does not wrap: attaching a TUN device (`ioctl(TUNSETIFF)`),
//! entering a network namespace (`setns`) and waiting for a descriptor with a timeout
//! (`poll`). The only module of the crate with `unsafe`; every block says why it is sound.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// `TUNSETIFF` = `_IOW('T', 202, int)` (linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads and writes it: the name, then the flags in the union.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens /dev/net/tun (non-blocking) and attaches it to the TUN device `name` (IFF_TUN | IFF_NO_PI: every
/// read and write is one bare IP packet), creating the device if it does not exist. The
/// device lives in the network namespace of the calling thread. Returns the descriptor and
/// the name the kernel gave (the same unless `name` held a `%d`).
pub fn open_tun(name: &str) -> io::Result<(File, String)> {
    let ok = |c: char| c.is_ascii_graphic() && c != '/';
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || !name.chars().all(ok) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = libc::c_char::try_from(s).unwrap_or(0);
    }
    // SAFETY: the descriptor is open for the duration of the call (borrowed from `file`);
    // TUNSETIFF reads and writes a `struct ifreq`, and `req` is a properly aligned #[repr(C)]
    // value of at least that size (16-octet name + 24-octet union = 40 octets) that outlives
    // the call. The name is NUL-terminated: it is shorter than IFNAMSIZ and zero-filled.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let end = req
        .name
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(req.name.len());
    let given: String = req.name[..end]
        .iter()
        .map(|&c| char::from(u8::try_from(c).unwrap_or(b'?')))
        .collect();
    Ok((file, given))
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity` on thread 0 = this thread).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} out of range"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is a valid empty set (plain bit array).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`, a live local; `cpu` is below CPU_SETSIZE
    // (checked above), so the bit is inside it.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed, read by the kernel only; pid 0
    // is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; if_nametoindex only
    // reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name}: {}", io::Error::last_os_error()),
        ));
    }
    Ok(i)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, which stamps the
/// generator's frames (std's `Instant` does not expose its value).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r < 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Sets the nice value of the calling thread (Linux: per thread; negative needs
/// CAP_SYS_NICE).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: plain system call on the calling thread (who = 0), no memory passed.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread, for [`interrupt`].
pub fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() }
}

/// Sends signal `sig` to thread `t` of this process (to interrupt a blocking system call).
/// The caller keeps `t` alive for the call (a scoped thread joined after it).
pub fn interrupt(t: libc::pthread_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: `t` is a thread of this process that has not been joined (the caller's
    // contract); pthread_kill only queues the signal.
    let r = unsafe { libc::pthread_kill(t, sig) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}
