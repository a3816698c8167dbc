//! Waking a worker that sleeps on its queues, when another thread hands it packets or a
//! control message: an eventfd it polls beside its queues' descriptors.

use rustix::event::{eventfd, EventfdFlags};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
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
        Ok(Self {
            fd: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
            sleeping: AtomicBool::new(false),
        })
    }

    /// The descriptor to poll; readable after [`Waker::wake`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Called by the worker before its last look at its inputs and the sleep that follows;
    /// a sender that queues something after this sees it and wakes the worker.
    pub fn going_to_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// Called by the worker after waking: empties the counter.
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
        // EAGAIN (nothing to read) is fine.
        let _ = rustix::io::read(&self.fd, &mut [0u8; 8]);
    }

    /// Called by a sender after queueing work for the worker.
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            // A full counter (EAGAIN) still leaves the descriptor readable.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
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
