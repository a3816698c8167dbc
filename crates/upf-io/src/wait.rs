//! Sleeping until a queue has packets: what an idle worker does instead of spinning.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes; true if one is readable.
/// Interrupted waits return false (the caller loops anyway).
pub fn wait_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let n = libc::nfds_t::try_from(p.len()).unwrap_or(0);
    // SAFETY: `p` is a live, exclusively borrowed array of `n` initialised pollfd structs; poll
    // writes only their `revents` fields and does not keep the pointer past the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), n, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn wakes_on_data_and_times_out() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = std::time::Instant::now();
        assert!(!wait_readable(&[a.as_raw_fd()], Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(15));
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert!(wait_readable(&[a.as_raw_fd()], Duration::from_secs(5)).unwrap());
        assert!(!wait_readable(&[], Duration::from_millis(1)).unwrap());
    }
}
