//! The TUN backend: N6 on a layer-3 virtual interface. The kernel routes packets for the UE
//! prefixes into the TUN device and the UPF reads them as IP packets (`IFF_TUN | IFF_NO_PI`:
//! no link-layer or packet-information header); what the UPF writes enters the kernel's IP
//! stack as if received on that interface.
//!
//! Every worker opens its own queue of the same device (`IFF_MULTI_QUEUE`): opening a name that
//! does not exist creates the device, opening it again adds a queue (the kernel spreads flows
//! over the queues by hash). The device lives while a queue is open. Bringing it up and giving
//! it addresses, MTU and routes is the operator's (or a test helper's) business.
//!
//! [`open`] is the one TUNSETIFF of the workspace: [`TunIo`]'s queues come from it, and so
//! does the single-queue TUN of upf-loadgen's gNB/UE emulator.

use crate::sys;
use crate::{IoStats, PacketIo, Pool};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use upf_packet::{Packet, Port, BUF_LEN, HEADROOM};

/// The TUN clone device.
pub const TUN_DEVICE: &str = "/dev/net/tun";

/// One queue of a multi-queue TUN device.
#[derive(Debug)]
pub struct TunIo {
    file: File,
    name: String,
    port: Port,
    stats: IoStats,
}

/// Refuses names the kernel would refuse or truncate (or expand: `%d`).
fn check_name(name: &str) -> io::Result<()> {
    let bad = name.is_empty()
        || name.len() >= libc::IFNAMSIZ
        || name == "."
        || name == ".."
        || name
            .bytes()
            .any(|b| b == 0 || b == b'/' || b == b'%' || b.is_ascii_whitespace() || b == b':');
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "TUN name {name:?}: 1 to {} characters without '/', '%', ':', NUL or spaces, \
                 not \".\" or \"..\"",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    Ok(())
}

/// How many descriptors a TUN device may have attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queues {
    /// One (no `IFF_MULTI_QUEUE`): a second attach fails with EBUSY while the first is open.
    One,
    /// Several (`IFF_MULTI_QUEUE`): every attach adds a queue; the kernel spreads flows over
    /// them by hash.
    Multi,
}

/// Opens the TUN clone device and attaches it to the TUN device `name` (`IFF_TUN |
/// IFF_NO_PI`, and `IFF_MULTI_QUEUE` for [`Queues::Multi`]), creating the device if no
/// interface has that name: a non-blocking, close-on-exec descriptor on which every read and
/// write is one bare IP packet. The device lives in the calling thread's network namespace,
/// while a descriptor is attached (unless made persistent by someone else). Needs
/// `CAP_NET_ADMIN` (unless the device is persistent and owned by this user); the error says
/// what is missing.
pub fn open(name: &str, queues: Queues) -> io::Result<File> {
    open_at(Path::new(TUN_DEVICE), name, queues)
}

fn open_at(dev: &Path, name: &str, queues: Queues) -> io::Result<File> {
    check_name(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(dev)
        .map_err(|e| {
            let hint = match e.kind() {
                io::ErrorKind::NotFound => {
                    " (no TUN support: load the module with `modprobe tun`; \
                     in a container, pass the device, e.g. --device /dev/net/tun)"
                }
                io::ErrorKind::PermissionDenied => {
                    " (permission denied: run as root or with CAP_NET_ADMIN)"
                }
                _ => "",
            };
            io::Error::new(e.kind(), format!("open {}: {e}{hint}", dev.display()))
        })?;
    let multi = match queues {
        Queues::One => 0,
        Queues::Multi => libc::IFF_MULTI_QUEUE,
    };
    // SAFETY: ifreq is a C struct of a byte array and a union of integers and pointers;
    // all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = libc::c_char::from_ne_bytes([s]);
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | multi)
        .try_into()
        .unwrap_or(libc::c_short::MAX);
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `ifr` is, alive across the call;
    // the name is NUL-terminated (check_name keeps it below IFNAMSIZ and the rest is 0).
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &raw mut ifr) };
    if let Err(e) = sys::cvt(r) {
        let hint = match (e.raw_os_error(), queues) {
            (Some(libc::EPERM), _) => " (creating or attaching a TUN device needs CAP_NET_ADMIN)",
            (Some(libc::EINVAL), Queues::Multi) => {
                " (an interface of that name exists and is not a multi-queue TUN \
                 without packet information)"
            }
            (Some(libc::EINVAL), Queues::One) => {
                " (an interface of that name exists and is not a single-queue TUN)"
            }
            (Some(libc::EBUSY), Queues::Multi) => " (the device is in use with other flags)",
            (Some(libc::EBUSY), Queues::One) => " (the device already has its one queue)",
            _ => "",
        };
        return Err(io::Error::new(
            e.kind(),
            format!("TUNSETIFF {name:?}: {e}{hint}"),
        ));
    }
    Ok(file)
}

impl TunIo {
    /// Creates the TUN device `name`, or adds a queue to it if it exists; the queue is
    /// non-blocking. Needs `CAP_NET_ADMIN` (unless the device is persistent and owned by this
    /// user); the error says what is missing.
    pub fn open(name: &str, port: Port) -> io::Result<TunIo> {
        Ok(TunIo {
            file: open(name, Queues::Multi)?,
            name: name.to_string(),
            port,
            stats: IoStats::default(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Room for a packet in a buffer; a read that fills it may have been truncated.
const ROOM: usize = BUF_LEN - HEADROOM;

impl PacketIo for TunIo {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let mut p = pool.get(self.port);
            let r = match p.buffer_mut().get_mut(HEADROOM..) {
                Some(room) => self.file.read(room),
                None => Ok(0),
            };
            match r {
                Ok(len) if len > 0 && len < ROOM => {
                    p.set_range(HEADROOM, HEADROOM + len);
                    if matches!(p.data().first().map(|b| b >> 4), Some(4 | 6)) {
                        self.stats.rx_packets += 1;
                        self.stats.rx_bytes += len as u64;
                        p.set_port(self.port);
                        batch.push(p);
                        n += 1;
                    } else {
                        self.stats.rx_discarded += 1;
                        pool.put(p);
                    }
                }
                Ok(0) => {
                    pool.put(p);
                    break;
                }
                Ok(_) => {
                    // Larger than a buffer (the kernel truncated it): discarded.
                    self.stats.rx_discarded += 1;
                    pool.put(p);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => pool.put(p),
                Err(e) => {
                    pool.put(p);
                    if e.kind() == io::ErrorKind::WouldBlock {
                        break;
                    }
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
            }
        }
        Ok(n)
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        let mut sent = 0;
        for p in batch.drain(..) {
            let d = p.data();
            if !matches!(d.first().map(|b| b >> 4), Some(4 | 6)) {
                self.stats.tx_dropped += 1;
                pool.put(p);
                continue;
            }
            let r = loop {
                match self.file.write(d) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            match r {
                Ok(n) if n == d.len() => {
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += n as u64;
                }
                // Queue full (EAGAIN), malformed (EINVAL), device down (EIO): dropped.
                _ => self.stats.tx_dropped += 1,
            }
            pool.put(p);
        }
        Ok(sent)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.file.as_fd())
    }

    fn stats(&self) -> IoStats {
        self.stats
    }

    fn describe(&self) -> String {
        format!("{}: tun {} (multi-queue)", self.port.name(), self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};
    use std::time::{Duration, Instant};
    use upf_netns::Netns;
    use upf_wire::checksum;

    #[test]
    fn names_and_missing_device() {
        for bad in [
            "",
            "a/b",
            "x%d",
            "sixteen-chars-xx",
            "a b",
            "a:1",
            ".",
            "..",
        ] {
            let e = TunIo::open(bad, Port::N6).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            let e = open(bad, Queues::One).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let e = open_at(Path::new("/nonexistent/tun"), "upft0", Queues::Multi).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("modprobe tun"), "{e}");
        if !upf_netns::is_root() && Path::new(TUN_DEVICE).exists() {
            // Without privileges: refused with a hint, not a panic.
            let e = TunIo::open("upfnp0", Port::N6).unwrap_err();
            assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
        }
    }

    /// Fails the test unless it can run: the TUN tests are `#[ignore = "needs root"]`.
    fn assert_can_run() {
        assert!(
            upf_netns::is_root(),
            "needs root (network namespace, CAP_NET_ADMIN)"
        );
        assert!(Path::new(TUN_DEVICE).exists(), "needs {TUN_DEVICE}");
    }

    /// An IPv4 + UDP packet (IPv4 checksum set, UDP checksum 0).
    fn udp4(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
        let total = u16::try_from(28 + payload.len()).unwrap();
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&src.0.octets());
        p.extend_from_slice(&dst.0.octets());
        let c = checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&src.1.to_be_bytes());
        p.extend_from_slice(&dst.1.to_be_bytes());
        p.extend_from_slice(&(total - 20).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    #[ignore = "needs root"]
    fn tun_rx_and_tx_in_a_namespace() {
        assert_can_run();
        let ns = Netns::unique("upfio-tun").expect("netns");
        ns.run(|| {
            let dev = "upft0";
            let mut q0 = TunIo::open(dev, Port::N6).unwrap();
            // A second queue of the same device.
            let mut q1 = TunIo::open(dev, Port::N6).unwrap();
            assert_eq!(q1.name(), dev);
            assert!(q0.describe().contains("tun upft0"));
            assert!(q0.fd().is_some());
            ns.ip(&["link", "set", dev, "up", "mtu", "1400"]).unwrap();
            ns.ip(&["addr", "add", "10.77.0.1/24", "dev", dev]).unwrap();
            ns.ip(&["route", "add", "10.78.0.0/16", "dev", dev])
                .unwrap();
            let mut pool = Pool::new(64);
            let mut b = Vec::new();

            // Into the TUN: a datagram to an address routed there.
            let sock = UdpSocket::bind("10.77.0.1:0").unwrap();
            let sport = sock.local_addr().unwrap().port();
            sock.send_to(b"to-ue", "10.78.1.2:9999").unwrap();
            let t = Instant::now();
            let mut found = None;
            while found.is_none() && t.elapsed() < Duration::from_secs(2) {
                b.clear();
                let n0 = q0.rx_batch(&mut pool, &mut b, 16).unwrap();
                let n1 = q1.rx_batch(&mut pool, &mut b, 16).unwrap();
                assert_eq!(n0 + n1, b.len());
                // Skip anything else the kernel sends (e.g. IPv6 router solicitations).
                found = b.iter().find(|p| {
                    let d = p.data();
                    d.len() == 33 && d[0] == 0x45 && d[9] == 17 && d[16..20] == [10, 78, 1, 2]
                });
                if found.is_none() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let p = found.expect("the datagram came out of the TUN");
            let d = p.data();
            assert_eq!(p.port(), Port::N6);
            assert_eq!(&d[12..16], &[10, 77, 0, 1]);
            assert_eq!(u16::from_be_bytes([d[20], d[21]]), sport);
            assert_eq!(u16::from_be_bytes([d[22], d[23]]), 9999);
            assert_eq!(&d[28..], b"to-ue");
            assert_eq!(checksum::checksum(&d[..20]), 0);
            assert!(q0.stats().rx_packets + q1.stats().rx_packets >= 1);
            let nb = b.len();
            pool.put_all(b.drain(..));
            assert!(pool.len() >= nb.min(64));

            // Out of the TUN: a datagram from a UE address to the socket.
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let pkt = udp4(
                (Ipv4Addr::new(10, 78, 1, 2), 9999),
                (Ipv4Addr::new(10, 77, 0, 1), sport),
                b"from-ue",
            );
            let mut b = vec![
                Packet::from_bytes(Port::N6, &pkt).unwrap(),
                Packet::from_bytes(Port::N6, &[0x00, 1, 2, 3]).unwrap(), // not IP
            ];
            assert_eq!(q1.tx_batch(&mut b, &mut pool).unwrap(), 1);
            assert!(b.is_empty());
            let mut buf = [0u8; 64];
            let (n, from) = sock.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"from-ue");
            assert_eq!(from, "10.78.1.2:9999".parse().unwrap());
            let s = q1.stats();
            assert_eq!((s.tx_packets, s.tx_bytes, s.tx_dropped), (1, 35, 1));
        })
        .expect("setns");
    }

    #[test]
    #[ignore = "needs root"]
    fn single_queue_device() {
        assert_can_run();
        let ns = Netns::unique("upfio-tun1").expect("netns");
        ns.run(|| {
            let f = open("upfs0", Queues::One).unwrap();
            // Non-blocking: nothing to read yet.
            let e = (&f).read(&mut [0u8; 64]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            // One queue only, and not a multi-queue device.
            let e = open("upfs0", Queues::One).unwrap_err();
            assert!(e.to_string().contains("already has its one queue"), "{e}");
            let e = TunIo::open("upfs0", Port::N6).unwrap_err();
            assert!(e.to_string().contains("not a multi-queue TUN"), "{e}");
            // A single queue of a multi-queue device: refused too.
            let q = TunIo::open("upfm0", Port::N6).unwrap();
            let e = open("upfm0", Queues::One).unwrap_err();
            assert!(e.to_string().contains("not a single-queue TUN"), "{e}");
            drop((f, q));
        })
        .expect("setns");
    }

    #[test]
    #[ignore = "needs root"]
    fn tun_attach_to_a_tap_name_fails_clearly() {
        assert_can_run();
        let ns = Netns::unique("upfio-tap").expect("netns");
        // A TAP device (layer 2) of that name.
        ns.ip(&["tuntap", "add", "upfd0", "mode", "tap"]).unwrap();
        let r = ns
            .run(|| TunIo::open("upfd0", Port::N6).map(|_| ()))
            .expect("setns");
        let e = r.unwrap_err();
        assert!(e.to_string().contains("TUNSETIFF \"upfd0\""), "{e}");
        assert!(e.to_string().contains("not a multi-queue TUN"), "{e}");
    }
}
