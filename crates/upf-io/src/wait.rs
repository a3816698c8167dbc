//! Sleeping until a queue has packets: what an idle worker does instead of spinning.

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes; true if one is readable.
/// Interrupted waits return false (the caller loops anyway).
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<bool> {
    let mut p: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let t = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    match poll(&mut p, Some(&t)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn wakes_on_data_and_times_out() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = std::time::Instant::now();
        assert!(!wait_readable(&[a.as_fd()], Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(15));
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert!(wait_readable(&[a.as_fd()], Duration::from_secs(5)).unwrap());
        assert!(!wait_readable(&[], Duration::from_millis(1)).unwrap());
    }
}
