//! Just enough rtnetlink (NETLINK_ROUTE) for next-hop resolution: one RTM_GETROUTE for a
//! destination out of an interface, one RTM_GETNEIGH for the next hop on that interface.
//! Encoding and decoding are plain functions over byte slices (tested on byte vectors); the
//! socket is a thin libc wrapper. Decoding never panics on what the kernel (or a test) hands it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
pub const RTM_NEWROUTE: u16 = 24;
pub const RTM_GETROUTE: u16 = 26;
pub const RTM_NEWNEIGH: u16 = 28;
pub const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 1;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_VIA: u16 = 18;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Attribute type bits that are flags (NLA_F_NESTED, NLA_F_NET_BYTEORDER), not the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Route types (`rtm_type`).
pub const RTN_UNICAST: u8 = 1;

/// Neighbour states (`ndm_state`).
#[allow(dead_code)] // named for the tests and the reader
pub const NUD_INCOMPLETE: u16 = 0x01;
pub const NUD_REACHABLE: u16 = 0x02;
pub const NUD_STALE: u16 = 0x04;
pub const NUD_DELAY: u16 = 0x08;
pub const NUD_PROBE: u16 = 0x10;
#[allow(dead_code)]
pub const NUD_FAILED: u16 = 0x20;
pub const NUD_NOARP: u16 = 0x40;
pub const NUD_PERMANENT: u16 = 0x80;
/// States whose link-layer address may be used (the kernel's NUD_VALID).
pub const NUD_VALID: u16 =
    NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

fn family(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

fn addr_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn push_attr(b: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    b.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(data);
    b.resize(align4(b.len()), 0);
}

/// A request: header with the length patched in after the body is written.
fn request(ty: u16, seq: u32, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&[0; 4]); // nlmsg_len, patched below
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
    body(&mut b);
    let len = u32::try_from(b.len()).unwrap_or(u32::MAX).to_ne_bytes();
    b[..4].copy_from_slice(&len);
    b
}

/// RTM_GETROUTE for `dst` leaving by interface `oif` (struct rtmsg + RTA_DST + RTA_OIF): the
/// kernel answers with the resolved route (RTM_NEWROUTE) or an error.
pub fn route_request(seq: u32, dst: IpAddr, oif: u32) -> Vec<u8> {
    request(RTM_GETROUTE, seq, |b| {
        let bits: u8 = if dst.is_ipv4() { 32 } else { 128 };
        // rtm_family, rtm_dst_len, rtm_src_len, rtm_tos, rtm_table, rtm_protocol,
        // rtm_scope, rtm_type, rtm_flags (u32)
        b.extend_from_slice(&[family(dst), bits, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&0u32.to_ne_bytes());
        push_attr(b, RTA_DST, &addr_bytes(&dst));
        push_attr(b, RTA_OIF, &oif.to_ne_bytes());
    })
}

/// RTM_GETNEIGH (a single entry, not a dump) for `addr` on interface `ifindex` (struct ndmsg +
/// NDA_DST).
pub fn neigh_request(seq: u32, addr: IpAddr, ifindex: u32) -> Vec<u8> {
    request(RTM_GETNEIGH, seq, |b| {
        // ndm_family, ndm_pad1, ndm_pad2 (u16), ndm_ifindex (i32), ndm_state (u16),
        // ndm_flags, ndm_type
        b.extend_from_slice(&[family(addr), 0, 0, 0]);
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        push_attr(b, NDA_DST, &addr_bytes(&addr));
    })
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The answer to request `seq` found in a buffer of netlink messages: the payload of the
/// first message of type `want`, or the (positive) errno of an NLMSG_ERROR. `None` when the
/// buffer holds neither (other sequence numbers, or truncated).
pub fn find_reply(buf: &[u8], seq: u32, want: u16) -> Option<Result<&[u8], i32>> {
    let mut at = 0;
    while let Some(len) = u32_at(buf, at) {
        let len = usize::try_from(len).ok()?;
        if len < NLMSG_HDRLEN {
            return None;
        }
        let msg = buf.get(at..at + len)?;
        let ty = u16_at(msg, 4)?;
        let payload = msg.get(NLMSG_HDRLEN..)?;
        if u32_at(msg, 8)? == seq {
            if ty == NLMSG_ERROR {
                // struct nlmsgerr: int error (negative errno; 0 is an ack), then the request.
                let e = i32::from_ne_bytes(payload.get(..4)?.try_into().ok()?);
                return Some(Err(e.checked_neg().unwrap_or(i32::MAX)));
            }
            if ty == want {
                return Some(Ok(payload));
            }
        }
        at += align4(len);
    }
    None
}

/// Attributes (type without flag bits, value) after a fixed header of `skip` octets.
fn attrs(payload: &[u8], skip: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = payload.get(skip..).unwrap_or(&[]);
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(rest, 0)?);
        let ty = u16_at(rest, 2)? & NLA_TYPE_MASK;
        let val = rest.get(4..len)?;
        rest = rest.get(align4(len)..).unwrap_or(&[]);
        Some((ty, val))
    })
}

fn ip_from(fam: u8, b: &[u8]) -> Option<IpAddr> {
    match fam {
        AF_INET => Some(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?).into()),
        AF_INET6 => Some(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?).into()),
        _ => None,
    }
}

/// What the kernel said about a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub rtype: u8,
    pub oif: Option<u32>,
    /// The gateway; `None` when the destination is on-link.
    pub gateway: Option<IpAddr>,
}

const RTMSG_LEN: usize = 12;
const NDMSG_LEN: usize = 12;

/// Decodes the payload of an RTM_NEWROUTE (struct rtmsg + attributes).
pub fn decode_route(p: &[u8]) -> Option<Route> {
    let fam = *p.first()?;
    let rtype = *p.get(7)?;
    let mut r = Route {
        rtype,
        oif: None,
        gateway: None,
    };
    if p.len() < RTMSG_LEN {
        return None;
    }
    for (ty, v) in attrs(p, RTMSG_LEN) {
        match ty {
            RTA_OIF => r.oif = u32_at(v, 0),
            RTA_GATEWAY => r.gateway = ip_from(fam, v),
            // struct rtvia: family (u16), address (an IPv6 gateway of an IPv4 route).
            RTA_VIA => {
                r.gateway = u16_at(v, 0)
                    .and_then(|f| u8::try_from(f).ok())
                    .and_then(|f| ip_from(f, v.get(2..)?))
            }
            _ => {}
        }
    }
    Some(r)
}

/// What the kernel said about a neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neigh {
    pub ifindex: u32,
    pub state: u16,
    pub lladdr: Option<[u8; 6]>,
}

impl Neigh {
    /// The MAC, if the entry is usable (resolved, or stale but still the best guess).
    pub fn usable_mac(&self) -> Option<[u8; 6]> {
        self.lladdr
            .filter(|m| *m != [0; 6] && self.state & NUD_VALID != 0)
    }
}

/// Decodes the payload of an RTM_NEWNEIGH (struct ndmsg + attributes).
pub fn decode_neigh(p: &[u8]) -> Option<Neigh> {
    let ifindex = u32_at(p, 4)?;
    let state = u16_at(p, 8)?;
    if p.len() < NDMSG_LEN {
        return None;
    }
    let lladdr = attrs(p, NDMSG_LEN)
        .find(|(t, _)| *t == NDA_LLADDR)
        .and_then(|(_, v)| <[u8; 6]>::try_from(v).ok());
    Some(Neigh {
        ifindex,
        state,
        lladdr,
    })
}

/// A NETLINK_ROUTE socket for request/answer exchanges.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Socket {
    pub fn open() -> io::Result<Socket> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Answers come within microseconds; the timeout only guards against a lost one.
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 500_000,
        };
        // SAFETY: tv is a valid timeval of the size passed.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                socklen_of::<libc::timeval>(),
            )
        })?;
        Ok(Socket {
            fd,
            seq: std::process::id().wrapping_mul(0x10000),
            buf: vec![0; 32 * 1024],
        })
    }

    /// Sends one request built by `build(seq)` and returns the payload of the answer of
    /// type `want`, or the kernel's error.
    fn exchange(&mut self, want: u16, build: impl FnOnce(u32) -> Vec<u8>) -> io::Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = build(seq);
        // SAFETY: sockaddr_nl is plain data; all-zero is valid, family set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::sa_family_t::try_from(libc::AF_NETLINK).unwrap_or(16);
        // SAFETY: req and sa are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&raw const sa).cast(),
                socklen_of::<libc::sockaddr_nl>(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // Answers to earlier requests that timed out may still be queued: skip them.
        for _ in 0..16 {
            // SAFETY: buf is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
            match find_reply(self.buf.get(..n).unwrap_or(&[]), seq, want) {
                Some(Ok(p)) => return Ok(p.to_vec()),
                Some(Err(e)) => return Err(io::Error::from_raw_os_error(e)),
                None => continue,
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no netlink answer"))
    }

    pub fn route(&mut self, dst: IpAddr, oif: u32) -> io::Result<Route> {
        let p = self.exchange(RTM_NEWROUTE, |s| route_request(s, dst, oif))?;
        decode_route(&p).ok_or_else(|| io::Error::other("malformed RTM_NEWROUTE"))
    }

    /// The neighbour entry; `Ok(None)` when there is none.
    pub fn neigh(&mut self, addr: IpAddr, ifindex: u32) -> io::Result<Option<Neigh>> {
        match self.exchange(RTM_NEWNEIGH, |s| neigh_request(s, addr, ifindex)) {
            Ok(p) => decode_neigh(&p)
                .map(Some)
                .ok_or_else(|| io::Error::other("malformed RTM_NEWNEIGH")),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

pub(crate) fn socklen_of<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(len: u32, ty: u16, flags: u16, seq: u32) -> Vec<u8> {
        let mut b = len.to_ne_bytes().to_vec();
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b
    }

    #[test]
    fn route_request_v4_bytes() {
        // What `ip route get 10.1.2.3 oif 7` sends (iproute2 adds flags we do not need).
        let r = route_request(9, "10.1.2.3".parse().unwrap(), 7);
        let mut want = hdr(44, RTM_GETROUTE, 1, 9);
        want.extend_from_slice(&[2, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&[10, 1, 2, 3]);
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&4u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        assert_eq!(r, want);
    }

    #[test]
    fn neigh_request_v6_bytes() {
        let r = neigh_request(3, "fd00::2".parse().unwrap(), 5);
        let mut want = hdr(48, RTM_GETNEIGH, 1, 3);
        want.extend_from_slice(&[10, 0, 0, 0]);
        want.extend_from_slice(&5u32.to_ne_bytes());
        want.extend_from_slice(&[0, 0, 0, 0]);
        want.extend_from_slice(&20u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(r, want);
    }

    /// An RTM_NEWROUTE as the kernel sends it for `ip route get 10.99.1.1` via 10.77.0.2
    /// dev 7 (table, dst, oif, prefsrc, gateway, uid, cache info: the decoder skips the rest).
    fn route_reply(seq: u32, gw: Option<[u8; 4]>) -> Vec<u8> {
        let mut body = vec![2, 32, 0, 0, 254, 0, 0, RTN_UNICAST, 0, 2, 0, 0];
        push_attr(&mut body, 15, &254u32.to_ne_bytes()); // RTA_TABLE
        push_attr(&mut body, RTA_DST, &[10, 99, 1, 1]);
        push_attr(&mut body, RTA_OIF, &7u32.to_ne_bytes());
        push_attr(&mut body, 7, &[10, 77, 0, 1]); // RTA_PREFSRC
        if let Some(g) = gw {
            push_attr(&mut body, RTA_GATEWAY, &g);
        }
        push_attr(&mut body, 25, &0u32.to_ne_bytes()); // RTA_UID
        push_attr(&mut body, 12, &[0; 32]); // RTA_CACHEINFO
        let mut m = hdr(
            u32::try_from(16 + body.len()).unwrap(),
            RTM_NEWROUTE,
            0,
            seq,
        );
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn decode_route_reply() {
        let m = route_reply(11, Some([10, 77, 0, 2]));
        let p = find_reply(&m, 11, RTM_NEWROUTE).unwrap().unwrap();
        assert_eq!(
            decode_route(p),
            Some(Route {
                rtype: RTN_UNICAST,
                oif: Some(7),
                gateway: Some("10.77.0.2".parse().unwrap()),
            })
        );
        // On-link: no gateway.
        let m = route_reply(12, None);
        let r = decode_route(find_reply(&m, 12, RTM_NEWROUTE).unwrap().unwrap()).unwrap();
        assert_eq!(r.gateway, None);
        // Other sequence numbers are not ours.
        assert_eq!(find_reply(&m, 13, RTM_NEWROUTE), None);
        // Every truncation decodes to something or nothing, never panics.
        for n in 0..m.len() {
            let _ = find_reply(&m[..n], 12, RTM_NEWROUTE).map(|r| r.map(decode_route));
            let _ = decode_route(&m[16..n.max(16)]);
        }
    }

    #[test]
    fn decode_route_via() {
        // An IPv4 route with an IPv6 gateway (RTA_VIA).
        let mut body = vec![2, 32, 0, 0, 254, 0, 0, RTN_UNICAST, 0, 0, 0, 0];
        let mut via = u16::from(AF_INET6).to_ne_bytes().to_vec();
        via.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        push_attr(&mut body, RTA_VIA, &via);
        assert_eq!(
            decode_route(&body).unwrap().gateway,
            Some("fe80::1".parse().unwrap())
        );
    }

    #[test]
    fn decode_error_and_neigh() {
        // NLMSG_ERROR -ENOENT for request 5: error code then the request's header.
        let mut m = hdr(36, NLMSG_ERROR, 0, 5);
        m.extend_from_slice(&(-2i32).to_ne_bytes());
        m.extend_from_slice(&hdr(48, RTM_GETNEIGH, 1, 5));
        assert_eq!(find_reply(&m, 5, RTM_NEWNEIGH), Some(Err(2)));

        // RTM_NEWNEIGH for 10.77.0.2 on dev 7, REACHABLE, lladdr 02:00:00:00:00:02.
        let mut body = vec![2, 0, 0, 0];
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&NUD_REACHABLE.to_ne_bytes());
        body.extend_from_slice(&[0, 1]); // flags, type RTN_UNICAST
        push_attr(&mut body, NDA_DST, &[10, 77, 0, 2]);
        push_attr(&mut body, NDA_LLADDR, &[2, 0, 0, 0, 0, 2]);
        push_attr(&mut body, 4, &1u32.to_ne_bytes()); // NDA_PROBES
        let mut m = hdr(u32::try_from(16 + body.len()).unwrap(), RTM_NEWNEIGH, 0, 6);
        m.extend_from_slice(&body);
        let n = decode_neigh(find_reply(&m, 6, RTM_NEWNEIGH).unwrap().unwrap()).unwrap();
        assert_eq!(n.ifindex, 7);
        assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, 2]));
        // INCOMPLETE / FAILED entries are not usable even with an address.
        for s in [NUD_INCOMPLETE, NUD_FAILED, 0] {
            assert_eq!(Neigh { state: s, ..n }.usable_mac(), None);
        }
        assert_eq!(
            Neigh {
                state: NUD_STALE,
                ..n
            }
            .usable_mac(),
            Some([2, 0, 0, 0, 0, 2])
        );
        for k in 0..m.len() {
            let _ = find_reply(&m[..k], 6, RTM_NEWNEIGH).map(|r| r.map(decode_neigh));
        }
        // A zero-length message must not loop forever.
        assert_eq!(find_reply(&[0; 32], 0, RTM_NEWNEIGH), None);
    }
}
