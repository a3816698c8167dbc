//! Small wrappers around the system calls the socket and TUN backends share: error
//! conversion, socket options, socket addresses in the C layout and control messages.
//! Control messages are read and written byte-wise (with `libc::cmsghdr`'s layout), so a
//! malformed or truncated control buffer ends the walk instead of reading past it.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// `Ok` for a non-negative return value, else the thread's `errno`.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    let len = socklen_of::<libc::c_int>();
    // SAFETY: `value` lives across the call and `len` is its size; the kernel only reads it.
    let r = unsafe { libc::setsockopt(fd, level, name, (&raw const value).cast(), len) };
    cvt(r).map(drop)
}

/// An all-zero `sockaddr_storage`.
pub(crate) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain integers and byte arrays; all-zero is a valid value
    // (an address of family AF_UNSPEC).
    unsafe { std::mem::zeroed() }
}

/// The address families as `sa_family_t` (the constants are `c_int`s in libc).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
const AF_INET: libc::sa_family_t = libc::AF_INET as libc::sa_family_t;
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
const AF_INET6: libc::sa_family_t = libc::AF_INET6 as libc::sa_family_t;
const _: () =
    assert!(AF_INET as libc::c_int == libc::AF_INET && AF_INET6 as libc::c_int == libc::AF_INET6);

/// `addr` in the C layout, and its length.
pub(crate) fn to_raw(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut ss = zeroed_storage();
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: AF_INET,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is at least as large and as aligned as every socket
            // address type (that is its purpose), so the write stays inside `ss`.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
            (ss, socklen_of::<libc::sockaddr_in>())
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: AF_INET6,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, sockaddr_storage holds any socket address.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
            (ss, socklen_of::<libc::sockaddr_in6>())
        }
    }
}

/// The IPv4 or IPv6 address in `ss` (as filled in by the kernel), if it is one.
pub(crate) fn from_raw(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says `ss` holds a sockaddr_in, which fits inside (and is no
            // more aligned than) sockaddr_storage; every bit pattern is a valid sockaddr_in.
            let sin = unsafe { std::ptr::read((&raw const *ss).cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { std::ptr::read((&raw const *ss).cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The local address a socket is bound to.
pub(crate) fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    let mut ss = zeroed_storage();
    let mut len = socklen_of::<libc::sockaddr_storage>();
    // SAFETY: `ss` and `len` are valid for writes and `len` holds the size of `ss`.
    cvt(unsafe { libc::getsockname(fd, (&raw mut ss).cast(), &raw mut len) })?;
    from_raw(&ss, len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "socket is not IPv4/IPv6"))
}

/// A control-message buffer, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Ctrl(pub [u8; CTRL_LEN]);

/// Room for the control messages one datagram carries here: packet info (IPv6: 20 octets),
/// TOS / traffic class, TTL / hop limit and the GRO/GSO segment size (4 octets each).
pub(crate) const CTRL_LEN: usize = 192;

impl Default for Ctrl {
    fn default() -> Self {
        Ctrl([0; CTRL_LEN])
    }
}

const fn align(len: usize) -> usize {
    (len + size_of::<usize>() - 1) & !(size_of::<usize>() - 1)
}

/// Size of a control-message header including its padding (`CMSG_LEN(0)`).
const CMSG_HDR: usize = align(size_of::<libc::cmsghdr>());

/// Appends one control message to `ctrl` at `*used`; false (and nothing written) if it does
/// not fit.
pub(crate) fn put_cmsg(
    ctrl: &mut Ctrl,
    used: &mut usize,
    level: libc::c_int,
    ty: libc::c_int,
    data: &[u8],
) -> bool {
    let space = CMSG_HDR + align(data.len());
    let Some(dst) = ctrl.0.get_mut(*used..*used + space) else {
        return false;
    };
    dst.fill(0);
    // SAFETY: cmsghdr is plain integers (and, on some libcs, padding); all-zero is valid.
    let mut h: libc::cmsghdr = unsafe { std::mem::zeroed() };
    h.cmsg_len = (CMSG_HDR + data.len()) as _;
    h.cmsg_level = level;
    h.cmsg_type = ty;
    // SAFETY: `dst` is at least CMSG_HDR >= size_of::<cmsghdr>() octets long and
    // write_unaligned has no alignment requirement.
    unsafe { std::ptr::write_unaligned(dst.as_mut_ptr().cast::<libc::cmsghdr>(), h) };
    if let Some(d) = dst.get_mut(CMSG_HDR..CMSG_HDR + data.len()) {
        d.copy_from_slice(data);
    }
    *used += space;
    true
}

/// The control messages in `buf` (the part the kernel filled in): level, type and data.
pub(crate) fn cmsgs(buf: &[u8]) -> impl Iterator<Item = (libc::c_int, libc::c_int, &[u8])> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let hdr = buf.get(off..off.checked_add(size_of::<libc::cmsghdr>())?)?;
        // SAFETY: `hdr` holds size_of::<cmsghdr>() initialised octets; read_unaligned has no
        // alignment requirement and every bit pattern is a valid cmsghdr.
        let h = unsafe { std::ptr::read_unaligned(hdr.as_ptr().cast::<libc::cmsghdr>()) };
        let len = h.cmsg_len as usize;
        let data = buf.get(off.checked_add(CMSG_HDR)?..off.checked_add(len)?)?;
        off = off.checked_add(align(len))?;
        Some((h.cmsg_level, h.cmsg_type, data))
    })
}

/// The first 4 octets of a control message as a native `int` (TOS arrives as one octet).
pub(crate) fn cmsg_int(data: &[u8]) -> Option<i32> {
    match data.len() {
        1 => Some(i32::from(data[0])),
        n if n >= 4 => data.first_chunk::<4>().map(|b| i32::from_ne_bytes(*b)),
        _ => None,
    }
}

/// The destination address of an `IP_PKTINFO` control message (`in_pktinfo.ipi_addr`).
pub(crate) fn pktinfo_v4(data: &[u8]) -> Option<IpAddr> {
    // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
    let a: [u8; 4] = data.get(8..12)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(a)))
}

/// The destination address of an `IPV6_PKTINFO` control message (`in6_pktinfo.ipi6_addr`).
pub(crate) fn pktinfo_v6(data: &[u8]) -> Option<IpAddr> {
    let a: [u8; 16] = data.get(..16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(a)))
}

/// `IP_PKTINFO` data selecting `src` as the source address of a sent datagram.
pub(crate) fn pktinfo_v4_bytes(src: Ipv4Addr) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[4..8].copy_from_slice(&src.octets()); // ipi_spec_dst
    b
}

/// `IPV6_PKTINFO` data selecting `src` as the source address of a sent datagram.
pub(crate) fn pktinfo_v6_bytes(src: Ipv6Addr) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..16].copy_from_slice(&src.octets()); // ipi6_addr; ipi6_ifindex 0
    b
}

/// The size of `T` as a `socklen_t`, for the address and option arguments of socket calls.
pub(crate) fn socklen_of<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in ["127.0.0.1:2152", "[::1]:2152", "[fe80::1%3]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            let (ss, len) = to_raw(&a);
            assert_eq!(from_raw(&ss, len), Some(a));
        }
        assert_eq!(from_raw(&zeroed_storage(), 128), None);
    }

    #[test]
    fn cmsg_round_trip_and_truncation() {
        let mut c = Ctrl::default();
        let mut used = 0;
        assert!(put_cmsg(&mut c, &mut used, 1, 2, &7i32.to_ne_bytes()));
        assert!(put_cmsg(&mut c, &mut used, 3, 4, &[9; 20]));
        let got: Vec<_> = cmsgs(&c.0[..used]).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1, cmsg_int(got[0].2)), (1, 2, Some(7)));
        assert_eq!((got[1].0, got[1].1, got[1].2), (3, 4, &[9u8; 20][..]));
        // A truncated buffer or a bogus length ends the walk.
        // (the second message is 36 octets long, in 40 with padding)
        assert_eq!(cmsgs(&c.0[..used - 4]).count(), 2);
        assert_eq!(cmsgs(&c.0[..used - 5]).count(), 1);
        let mut bad = c;
        bad.0[..8].copy_from_slice(&usize::MAX.to_ne_bytes()[..8]);
        assert_eq!(cmsgs(&bad.0[..used]).count(), 0);
        // Does not fit.
        let mut used = CTRL_LEN - 8;
        assert!(!put_cmsg(&mut c, &mut used, 1, 2, &[0; 4]));
    }
}
