//! Ethernet interfaces and next hops, for the backends that write frames themselves
//! (AF_PACKET, AF_XDP): the interface's own MAC, index and MTU, and the MAC address of the
//! next hop of a packet, taken from the kernel's routing and neighbour tables (never
//! configured by hand).

use crate::netlink;
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{Duration, Instant};

/// An Ethernet interface of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub ifindex: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
}

impl Link {
    /// Looks `name` up in the network namespace of the calling thread (rtnetlink, not /sys,
    /// which shows the namespace it was mounted in); a NotFound error when there is no such
    /// interface.
    pub fn by_name(name: &str) -> io::Result<Link> {
        if name.is_empty() || name.len() >= 16 || name.contains('\0') {
            return Err(invalid(format!("interface name {name:?}")));
        }
        let l = netlink::Socket::open()
            .and_then(|mut nl| nl.link(name))
            .map_err(|e| {
                // ENODEV says "no such interface": NotFound, like a missing file.
                let kind = if e.raw_os_error() == Some(libc::ENODEV) {
                    io::ErrorKind::NotFound
                } else {
                    e.kind()
                };
                io::Error::new(kind, format!("interface {name:?}: {e}"))
            })?;
        Ok(Link {
            name: name.to_string(),
            ifindex: l.ifindex,
            // Devices without a link-layer address (loopback's is zeros, TUN has none).
            mac: l.mac.unwrap_or_default(),
            mtu: l.mtu,
        })
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(m)
}

/// Next-hop MAC addresses out of one interface, cached and refreshed from the kernel.
///
/// A lookup asks the kernel over rtnetlink: RTM_GETROUTE for the destination out of this
/// interface (gateway, or on-link), then RTM_GETNEIGH for that next hop on the interface.
/// When the neighbour is unknown (or INCOMPLETE/FAILED) the kernel is made to resolve it by
/// sending an empty UDP datagram to the next hop's discard port (9) from a socket bound to the
/// interface (SO_BINDTODEVICE): the kernel's own ARP/ND runs, and a later call finds the entry.
/// Resolved entries are used for `ttl`; failed lookups are not repeated for `retry`, so a dead
/// next hop costs a few system calls per `retry`, not per packet. A cache hit touches only the
/// HashMap.
#[derive(Debug)]
pub struct NextHops {
    link: Link,
    cache: HashMap<IpAddr, ([u8; 6], Instant)>,
    /// Destinations whose lookup failed recently, and when.
    misses: HashMap<IpAddr, Instant>,
    /// How long a resolved entry is used before it is looked up again.
    ttl: Duration,
    /// How long after a failed lookup the next one is tried.
    retry: Duration,
    nl: Option<netlink::Socket>,
    /// UDP sockets bound to the interface that trigger resolution (IPv4, IPv6).
    kick4: Option<Socket>,
    kick6: Option<Socket>,
    /// Resolutions asked of the kernel so far (for tests and the log).
    pub kicks: u64,
}

/// Destinations cached at most; beyond, the cache starts over (N6 egress has one entry per
/// remote destination, and the table must stay bounded).
const MAX_CACHED: usize = 65_536;

impl NextHops {
    pub fn new(link: Link) -> Self {
        let link_name = link.name.clone();
        Self {
            link,
            cache: HashMap::new(),
            misses: HashMap::new(),
            ttl: Duration::from_secs(5),
            retry: Duration::from_millis(20),
            // Opened now, so that they live in the network namespace of the interface (the
            // caller's), whichever thread looks up later.
            nl: netlink::Socket::open().ok(),
            kick4: bound_udp(Domain::IPV4, &link_name).ok(),
            kick6: bound_udp(Domain::IPV6, &link_name).ok(),
            kicks: 0,
        }
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The MAC to send a packet for `dst` to, or `None` while it is not resolved (the caller
    /// drops the packet and counts it; resolution is asked of the kernel meanwhile).
    pub fn mac_for(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if let Some(&(mac, t)) = self.cache.get(&dst) {
            if now.saturating_duration_since(t) < self.ttl {
                return Some(mac);
            }
        }
        self.mac_for_slow(dst, now)
    }

    #[cold]
    fn mac_for_slow(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if let Some(&t) = self.misses.get(&dst) {
            if now.saturating_duration_since(t) < self.retry {
                return None;
            }
        }
        match self.lookup(dst) {
            Some(mac) => {
                if self.cache.len() >= MAX_CACHED {
                    self.cache.clear();
                }
                self.cache.insert(dst, (mac, now));
                self.misses.remove(&dst);
                Some(mac)
            }
            None => {
                self.cache.remove(&dst);
                if self.misses.len() >= MAX_CACHED {
                    self.misses.clear();
                }
                self.misses.insert(dst, now);
                None
            }
        }
    }

    /// Route, then neighbour; asks the kernel to resolve a missing or stale neighbour.
    fn lookup(&mut self, dst: IpAddr) -> Option<[u8; 6]> {
        let ifindex = self.link.ifindex;
        if self.nl.is_none() {
            self.nl = netlink::Socket::open().ok();
        }
        let nl = self.nl.as_mut()?;
        let route = nl.route(dst, ifindex).ok()?;
        if route.kind != netlink_packet_route::route::RouteType::Unicast
            || route.oif.is_some_and(|o| o != ifindex)
        {
            return None;
        }
        let hop = route.gateway.unwrap_or(dst);
        let neigh = nl.neigh(hop, ifindex).ok()?;
        let mac = neigh.and_then(|n| n.usable_mac());
        // Unknown, INCOMPLETE or FAILED: resolve. STALE: used, but make the kernel confirm it
        // (it never sees our traffic, so it would not otherwise).
        if mac.is_none() || neigh.is_some_and(|n| n.is_stale()) {
            self.kick(hop);
        }
        mac
    }

    /// Makes the kernel resolve `hop` on this interface: an empty UDP datagram to its discard
    /// port from a socket bound to the interface queues behind the kernel's ARP/ND.
    fn kick(&mut self, hop: IpAddr) {
        self.kicks += 1;
        let (slot, fam) = match hop {
            IpAddr::V4(_) => (&mut self.kick4, Domain::IPV4),
            IpAddr::V6(_) => (&mut self.kick6, Domain::IPV6),
        };
        if slot.is_none() {
            *slot = bound_udp(fam, &self.link.name).ok();
        }
        let Some(sock) = slot.as_ref() else { return };
        let to = match hop {
            IpAddr::V4(a) => SocketAddr::V4(SocketAddrV4::new(a, 9)),
            IpAddr::V6(a) => SocketAddr::V6(SocketAddrV6::new(a, 9, 0, self.link.ifindex)),
        };
        let _ = sock.send_to(&[], &to.into());
    }
}

/// A non-blocking UDP socket bound to interface `name` (SO_BINDTODEVICE needs CAP_NET_RAW,
/// which an AF_PACKET backend has anyway).
fn bound_udp(fam: Domain, name: &str) -> io::Result<Socket> {
    let s = Socket::new(fam, Type::DGRAM.nonblocking().cloexec(), None)?;
    s.bind_device(Some(name.as_bytes()))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_and_loopback() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a"), None);
        let lo = Link::by_name("lo").unwrap();
        assert_eq!(lo.mac, [0; 6]);
        assert!(Link::by_name("no-such-if0").is_err());
    }
}
