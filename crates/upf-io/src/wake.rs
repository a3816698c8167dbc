//! Waking a worker that sleeps on its queues, when another thread hands it packets or a
//! control message: an eventfd it polls beside its queues' descriptors.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// One worker's wake-up line. `sleeping` keeps the busy path free of system calls: a sender
/// writes the eventfd only while the worker says it is about to sleep.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl Waker {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain system call with constant flags; the result is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: `raw` is a descriptor we just created and own exclusively.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// The descriptor to poll; readable after [`Waker::wake`].
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Called by the worker before its last look at its inputs and the sleep that follows;
    /// a sender that queues something after this sees it and wakes the worker.
    pub fn going_to_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// Called by the worker after waking: empties the counter.
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
        let mut v = 0u64;
        // SAFETY: reads 8 octets into `v`, which is 8 octets long and lives across the call;
        // EAGAIN (nothing to read) is fine and ignored.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8);
        }
    }

    /// Called by a sender after queueing work for the worker.
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let one = 1u64;
            // SAFETY: writes the 8 octets of `one`, which lives across the call; a full
            // counter (EAGAIN) still leaves the descriptor readable, so errors are ignored.
            unsafe {
                libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn wakes_only_a_sleeper() {
        let w = Waker::new().unwrap();
        w.wake(); // not sleeping: no write
        assert!(!crate::wait_readable(&[w.fd()], Duration::from_millis(1)).unwrap());
        w.going_to_sleep();
        w.wake();
        assert!(crate::wait_readable(&[w.fd()], Duration::from_secs(1)).unwrap());
        w.woke();
        assert!(!crate::wait_readable(&[w.fd()], Duration::from_millis(1)).unwrap());
    }
}
