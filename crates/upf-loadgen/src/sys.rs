//! What std does not wrap: pinning a thread to a CPU, its nice value and the monotonic clock
//! (rustix), interrupting a blocking call of this thread (`pthread_kill`, inside one function
//! that keeps the thread alive while it signals: the only `unsafe` of the crate, each block
//! saying why it is sound), an interface's index (upf-io's rtnetlink). The TUN device is
//! upf-io's ([`upf_io::tun::open`]).
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
