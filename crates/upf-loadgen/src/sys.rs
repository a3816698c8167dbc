//! What std does not wrap: attaching a TUN device (`ioctl(TUNSETIFF)`, the only `unsafe` of
//! the crate, its block saying why it is sound), pinning a thread to a CPU, its nice value and the
//! monotonic clock (rustix), interrupting a blocking call of this thread (`pthread_kill`,
//! inside one function that keeps the thread alive while it signals), an interface's index (upf-io's rtnetlink).
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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

/// Pins the calling thread to CPU `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} out of range"),
        ));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    upf_io::link::Link::by_name(name).map(|l| l.ifindex)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, which stamps the
/// generator's frames (std's `Instant` does not expose its value).
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Sets the nice value of the calling thread (Linux: setpriority on pid 0 is per thread;
/// negative needs CAP_SYS_NICE).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    rustix::process::setpriority_process(None, nice)?;
    Ok(())
}

/// Runs `work` on the calling thread while a watcher thread sends that thread `signal` every
/// 5 ms once `stop()` says so, which ends a blocking system call of `work` with EINTR;
/// returns what `work` returned, once the watcher has been joined.
pub fn with_interrupts<T>(
    signal: libc::c_int,
    stop: impl Fn() -> bool + Sync,
    work: impl FnOnce() -> T,
) -> T {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let me = unsafe { libc::pthread_self() };
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if stop() {
                    // SAFETY: `me` runs this scope, which joins the watcher before it ends, so
                    // the thread is alive; pthread_kill only queues the signal. Again every
                    // 5 ms: the signal may come between two calls.
                    unsafe { libc::pthread_kill(me, signal) };
                    std::thread::sleep(Duration::from_millis(5));
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let r = work();
        done.store(true, Ordering::Release);
        r
    })
}
