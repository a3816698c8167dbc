//! What the UPF asks of the kernel's routing tables over rtnetlink (NETLINK_ROUTE): the route
//! and the neighbour entry of a next hop, for the backends that write frames themselves; and
//! the set-up of the N6 TUN device (link up, no IPv6 link-local address, routes to the UE
//! pools). Messages are netlink-packet-route's, the socket is netlink-sys's; what the kernel
//! answers is decoded without panicking, whatever it holds.

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute, LinkFlags, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

/// What the kernel said about a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub kind: RouteType,
    pub oif: Option<u32>,
    /// The gateway; `None` when the destination is on-link.
    pub gateway: Option<IpAddr>,
}

/// What the kernel said about a network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub ifindex: u32,
    pub mtu: u32,
    /// The link-layer address, when it is an Ethernet one.
    pub mac: Option<[u8; 6]>,
}

/// What the kernel said about a neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neigh {
    pub ifindex: u32,
    pub state: NeighbourState,
    pub lladdr: Option<[u8; 6]>,
}

impl Neigh {
    /// The MAC, if the entry is usable (resolved, or stale but still the best guess).
    pub fn usable_mac(&self) -> Option<[u8; 6]> {
        let valid = matches!(
            self.state,
            NeighbourState::Reachable
                | NeighbourState::Stale
                | NeighbourState::Delay
                | NeighbourState::Probe
                | NeighbourState::Permanent
                | NeighbourState::Noarp
        );
        self.lladdr.filter(|m| valid && *m != [0; 6])
    }

    /// The kernel should confirm this entry: it never sees our traffic, so it would not
    /// otherwise.
    pub fn is_stale(&self) -> bool {
        self.state == NeighbourState::Stale
    }
}

fn family(a: IpAddr) -> AddressFamily {
    match a {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn full_prefix(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// RTM_GETROUTE for `dst` out of interface `oif` (`ip route get DST oif OIF`).
pub fn route_request(dst: IpAddr, oif: u32) -> RouteNetlinkMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(dst);
    m.header.destination_prefix_length = full_prefix(dst);
    m.attributes = vec![
        RouteAttribute::Destination(dst.into()),
        RouteAttribute::Oif(oif),
    ];
    RouteNetlinkMessage::GetRoute(m)
}

/// RTM_GETNEIGH for `addr` on interface `ifindex`.
pub fn neigh_request(addr: IpAddr, ifindex: u32) -> RouteNetlinkMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = family(addr);
    m.header.ifindex = ifindex;
    let dst = match addr {
        IpAddr::V4(v) => NeighbourAddress::Inet(v),
        IpAddr::V6(v) => NeighbourAddress::Inet6(v),
    };
    m.attributes = vec![NeighbourAttribute::Destination(dst)];
    RouteNetlinkMessage::GetNeighbour(m)
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

pub fn decode_route(m: &RouteMessage) -> Route {
    let mut r = Route {
        kind: m.header.kind,
        oif: None,
        gateway: None,
    };
    for a in &m.attributes {
        match a {
            RouteAttribute::Oif(i) => r.oif = Some(*i),
            RouteAttribute::Gateway(g) => r.gateway = route_ip(g),
            // An IPv6 gateway of an IPv4 route.
            RouteAttribute::Via(RouteVia::Inet(v)) => r.gateway = Some(IpAddr::V4(*v)),
            RouteAttribute::Via(RouteVia::Inet6(v)) => r.gateway = Some(IpAddr::V6(*v)),
            _ => {}
        }
    }
    r
}

pub fn decode_neigh(m: &NeighbourMessage) -> Neigh {
    let lladdr = m.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(b) => <[u8; 6]>::try_from(b.as_slice()).ok(),
        _ => None,
    });
    Neigh {
        ifindex: m.header.ifindex,
        state: m.header.state,
        lladdr,
    }
}

/// RTM_GETLINK for the interface called `name`.
pub fn link_request(name: &str) -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.attributes = vec![LinkAttribute::IfName(name.to_string())];
    RouteNetlinkMessage::GetLink(m)
}

pub fn decode_link(m: &LinkMessage) -> LinkInfo {
    let mut l = LinkInfo {
        ifindex: m.header.index,
        mtu: 0,
        mac: None,
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::Mtu(v) => l.mtu = *v,
            LinkAttribute::Address(b) => l.mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
            _ => {}
        }
    }
    l
}

/// What the kernel answered a request with sequence number `seq`.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Message(RouteNetlinkMessage),
    Ack,
    /// The kernel's error (a positive errno).
    Error(i32),
}

/// The answer to request `seq` in a datagram of netlink messages, if it holds one.
pub fn find_reply(mut buf: &[u8], seq: u32) -> Option<Reply> {
    while !buf.is_empty() {
        let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(buf).ok()?;
        let len = usize::try_from(m.header.length).ok()?;
        // NLMSG_ALIGN: messages are padded to 4 octets; a zero length would loop forever.
        let next = len.checked_add(3)? & !3;
        if len == 0 {
            return None;
        }
        if m.header.sequence_number == seq {
            return match m.payload {
                NetlinkPayload::InnerMessage(r) => Some(Reply::Message(r)),
                NetlinkPayload::Error(e) => Some(match e.code {
                    None => Reply::Ack,
                    Some(c) => Reply::Error(c.get().saturating_neg()),
                }),
                _ => None,
            };
        }
        buf = buf.get(next..)?;
    }
    None
}

/// A NETLINK_ROUTE socket for request/answer exchanges.
#[derive(Debug)]
pub struct Socket {
    sock: netlink_sys::Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    pub fn open() -> io::Result<Socket> {
        let mut sock = netlink_sys::Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        // Answers come within microseconds; the timeout only guards against a lost one.
        socket2::SockRef::from(&sock).set_read_timeout(Some(Duration::from_millis(500)))?;
        Ok(Socket {
            sock,
            seq: std::process::id().wrapping_mul(0x10000),
            buf: vec![0; 32 * 1024],
        })
    }

    /// Sends `msg` and returns the kernel's answer to it.
    fn exchange(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<Reply> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        m.finalize();
        let mut req = vec![0; m.buffer_len()];
        m.serialize(&mut req);
        self.sock.send(&req, 0)?;
        // Answers to earlier requests that timed out may still be queued: skip them.
        for _ in 0..16 {
            let n = self.sock.recv(&mut &mut self.buf[..], 0)?;
            if let Some(r) = find_reply(self.buf.get(..n).unwrap_or(&[]), self.seq) {
                return match r {
                    Reply::Error(e) => Err(io::Error::from_raw_os_error(e)),
                    r => Ok(r),
                };
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no netlink answer"))
    }

    /// Sends `msg` and waits for the kernel's acknowledgement.
    fn command(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        match self.exchange(msg, NLM_F_ACK | flags)? {
            Reply::Ack => Ok(()),
            r => Err(io::Error::other(format!(
                "netlink: {r:?} where an ACK was due"
            ))),
        }
    }

    pub fn route(&mut self, dst: IpAddr, oif: u32) -> io::Result<Route> {
        match self.exchange(route_request(dst, oif), 0)? {
            Reply::Message(RouteNetlinkMessage::NewRoute(m)) => Ok(decode_route(&m)),
            r => Err(io::Error::other(format!("RTM_GETROUTE answered {r:?}"))),
        }
    }

    /// The neighbour entry; `Ok(None)` when there is none.
    pub fn neigh(&mut self, addr: IpAddr, ifindex: u32) -> io::Result<Option<Neigh>> {
        match self.exchange(neigh_request(addr, ifindex), 0) {
            Ok(Reply::Message(RouteNetlinkMessage::NewNeighbour(m))) => Ok(Some(decode_neigh(&m))),
            Ok(r) => Err(io::Error::other(format!("RTM_GETNEIGH answered {r:?}"))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The interface called `name` (ENODEV when there is none).
    pub fn link(&mut self, name: &str) -> io::Result<LinkInfo> {
        match self.exchange(link_request(name), 0)? {
            Reply::Message(RouteNetlinkMessage::NewLink(m)) => Ok(decode_link(&m)),
            r => Err(io::Error::other(format!("RTM_GETLINK answered {r:?}"))),
        }
    }

    /// `ip link set dev IFINDEX up`.
    pub fn set_link_up(&mut self, ifindex: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        self.command(RouteNetlinkMessage::SetLink(m), 0)
    }

    /// `ip link set dev IFINDEX addrgenmode none`: no IPv6 link-local address, so the kernel
    /// sends nothing of its own (router solicitations, DAD) into the device.
    pub fn disable_ipv6_addr_gen(&mut self, ifindex: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        m.attributes = vec![LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )])];
        self.command(RouteNetlinkMessage::SetLink(m), 0)
    }

    /// `ip route replace PREFIX/LEN dev IFINDEX` in the main table.
    pub fn replace_route(&mut self, prefix: IpAddr, len: u8, ifindex: u32) -> io::Result<()> {
        let m = device_route(prefix, len, ifindex);
        self.command(
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// `ip route del PREFIX/LEN dev IFINDEX`.
    pub fn delete_route(&mut self, prefix: IpAddr, len: u8, ifindex: u32) -> io::Result<()> {
        let m = device_route(prefix, len, ifindex);
        self.command(RouteNetlinkMessage::DelRoute(m), 0)
    }
}

/// A route of PREFIX/LEN into the device IFINDEX, in the main table.
fn device_route(prefix: IpAddr, len: u8, ifindex: u32) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(prefix);
    m.header.destination_prefix_length = len.min(full_prefix(prefix));
    m.header.table = libc::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = RouteScope::Link;
    m.header.kind = RouteType::Unicast;
    m.attributes = vec![
        RouteAttribute::Destination(prefix.into()),
        RouteAttribute::Oif(ifindex),
    ];
    m
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

    fn push_attr(b: &mut Vec<u8>, ty: u16, data: &[u8]) {
        b.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(data);
        b.resize(b.len().next_multiple_of(4), 0);
    }

    fn bytes(msg: RouteNetlinkMessage, seq: u32) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        m.finalize();
        let mut b = vec![0; m.buffer_len()];
        m.serialize(&mut b);
        b
    }

    const RTM_NEWROUTE: u16 = 24;
    const RTM_GETROUTE: u16 = 26;
    const RTM_NEWNEIGH: u16 = 28;
    const RTM_GETNEIGH: u16 = 30;
    const NLMSG_ERROR: u16 = 2;

    #[test]
    fn route_request_v4_bytes() {
        // What `ip route get 10.1.2.3 oif 7` sends (iproute2 adds flags we do not need).
        let r = bytes(route_request("10.1.2.3".parse().unwrap(), 7), 9);
        let mut want = hdr(44, RTM_GETROUTE, 1, 9);
        want.extend_from_slice(&[2, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        push_attr(&mut want, 1, &[10, 1, 2, 3]);
        push_attr(&mut want, 4, &7u32.to_ne_bytes());
        assert_eq!(r, want);
    }

    #[test]
    fn neigh_request_v6_bytes() {
        let r = bytes(neigh_request("fd00::2".parse().unwrap(), 5), 3);
        let mut want = hdr(48, RTM_GETNEIGH, 1, 3);
        want.extend_from_slice(&[10, 0, 0, 0]);
        want.extend_from_slice(&5u32.to_ne_bytes());
        want.extend_from_slice(&[0, 0, 0, 0]);
        push_attr(
            &mut want,
            1,
            &[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        assert_eq!(r, want);
    }

    /// An RTM_NEWROUTE as the kernel sends it for `ip route get 10.99.1.1` via 10.77.0.2
    /// dev 7 (table, dst, oif, prefsrc, gateway, uid, cache info: the decoder skips the rest).
    fn route_reply(seq: u32, gw: Option<[u8; 4]>) -> Vec<u8> {
        let mut body = vec![2, 32, 0, 0, 254, 0, 0, 1, 0, 2, 0, 0];
        push_attr(&mut body, 15, &254u32.to_ne_bytes()); // RTA_TABLE
        push_attr(&mut body, 1, &[10, 99, 1, 1]); // RTA_DST
        push_attr(&mut body, 4, &7u32.to_ne_bytes()); // RTA_OIF
        push_attr(&mut body, 7, &[10, 77, 0, 1]); // RTA_PREFSRC
        if let Some(g) = gw {
            push_attr(&mut body, 5, &g); // RTA_GATEWAY
        }
        push_attr(&mut body, 25, &0u32.to_ne_bytes()); // RTA_UID
        push_attr(&mut body, 12, &[0; 32]); // RTA_CACHEINFO
        let len = u32::try_from(16 + body.len()).unwrap();
        let mut m = hdr(len, RTM_NEWROUTE, 0, seq);
        m.extend_from_slice(&body);
        m
    }

    fn route_of(r: Option<Reply>) -> Option<Route> {
        match r? {
            Reply::Message(RouteNetlinkMessage::NewRoute(m)) => Some(decode_route(&m)),
            _ => None,
        }
    }

    #[test]
    fn decode_route_reply() {
        let m = route_reply(11, Some([10, 77, 0, 2]));
        assert_eq!(
            route_of(find_reply(&m, 11)),
            Some(Route {
                kind: RouteType::Unicast,
                oif: Some(7),
                gateway: Some("10.77.0.2".parse().unwrap()),
            })
        );
        // On-link: no gateway.
        let m = route_reply(12, None);
        assert_eq!(route_of(find_reply(&m, 12)).unwrap().gateway, None);
        // Other sequence numbers are not ours.
        assert_eq!(find_reply(&m, 13), None);
        // Every truncation decodes to something or nothing, never panics.
        for n in 0..m.len() {
            let _ = route_of(find_reply(&m[..n], 12));
        }
    }

    #[test]
    fn decode_route_via() {
        // An IPv4 route with an IPv6 gateway (RTA_VIA: family, address).
        let mut body = vec![2, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0];
        let mut via = 10u16.to_ne_bytes().to_vec();
        via.extend_from_slice(&"fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        push_attr(&mut body, 18, &via);
        let mut m = hdr(u32::try_from(16 + body.len()).unwrap(), RTM_NEWROUTE, 0, 1);
        m.extend_from_slice(&body);
        assert_eq!(
            route_of(find_reply(&m, 1)).unwrap().gateway,
            Some("fe80::1".parse().unwrap())
        );
    }

    #[test]
    fn decode_error_and_neigh() {
        // NLMSG_ERROR -ENOENT for request 5: error code then the request's header.
        let mut m = hdr(36, NLMSG_ERROR, 0, 5);
        m.extend_from_slice(&(-2i32).to_ne_bytes());
        m.extend_from_slice(&hdr(48, RTM_GETNEIGH, 1, 5));
        assert_eq!(find_reply(&m, 5), Some(Reply::Error(2)));
        // An ACK: error code 0.
        let mut m = hdr(36, NLMSG_ERROR, 0, 4);
        m.extend_from_slice(&0i32.to_ne_bytes());
        m.extend_from_slice(&hdr(32, 19, 5, 4));
        assert_eq!(find_reply(&m, 4), Some(Reply::Ack));

        // RTM_NEWNEIGH for 10.77.0.2 on dev 7, REACHABLE, lladdr 02:00:00:00:00:02.
        let mut body = vec![2, 0, 0, 0];
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&0x02u16.to_ne_bytes());
        body.extend_from_slice(&[0, 1]); // flags, type RTN_UNICAST
        push_attr(&mut body, 1, &[10, 77, 0, 2]); // NDA_DST
        push_attr(&mut body, 2, &[2, 0, 0, 0, 0, 2]); // NDA_LLADDR
        push_attr(&mut body, 4, &1u32.to_ne_bytes()); // NDA_PROBES
        let mut m = hdr(u32::try_from(16 + body.len()).unwrap(), RTM_NEWNEIGH, 0, 6);
        m.extend_from_slice(&body);
        let Some(Reply::Message(RouteNetlinkMessage::NewNeighbour(nm))) = find_reply(&m, 6) else {
            panic!("no RTM_NEWNEIGH decoded");
        };
        let n = decode_neigh(&nm);
        assert_eq!(n.ifindex, 7);
        assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, 2]));
        assert!(!n.is_stale());
        // INCOMPLETE / FAILED entries are not usable even with an address.
        for s in [
            NeighbourState::Incomplete,
            NeighbourState::Failed,
            NeighbourState::None,
        ] {
            assert_eq!(Neigh { state: s, ..n }.usable_mac(), None);
        }
        let stale = Neigh {
            state: NeighbourState::Stale,
            ..n
        };
        assert_eq!(stale.usable_mac(), Some([2, 0, 0, 0, 0, 2]));
        assert!(stale.is_stale());
        for k in 0..m.len() {
            let _ = find_reply(&m[..k], 6);
        }
        // A zero-length message must not loop forever.
        assert_eq!(find_reply(&[0; 32], 0), None);
    }
}
