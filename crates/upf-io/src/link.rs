//! Ethernet interfaces and next hops, for the backends that write frames themselves
//! (AF_PACKET, AF_XDP): the interface's own MAC, index and MTU, and the MAC address of the
//! next hop of a packet, taken from the kernel's routing and neighbour tables (never
//! configured by hand).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
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
    /// Looks `name` up; a clear error when there is no such interface.
    pub fn by_name(name: &str) -> io::Result<Link> {
        let base = format!("/sys/class/net/{name}");
        let read = |f: &str| {
            std::fs::read_to_string(format!("{base}/{f}"))
                .map_err(|e| io::Error::new(e.kind(), format!("interface {name:?}: {f}: {e}")))
        };
        let ifindex = read("ifindex")?.trim().parse().map_err(invalid)?;
        let mtu = read("mtu")?.trim().parse().map_err(invalid)?;
        let mac = parse_mac(read("address")?.trim()).ok_or_else(|| invalid("address"))?;
        Ok(Link {
            name: name.to_string(),
            ifindex,
            mac,
            mtu,
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
#[derive(Debug)]
pub struct NextHops {
    link: Link,
    cache: HashMap<IpAddr, ([u8; 6], Instant)>,
    /// How long a resolved entry is used before it is looked up again.
    ttl: Duration,
}

impl NextHops {
    pub fn new(link: Link) -> Self {
        Self {
            link,
            cache: HashMap::new(),
            ttl: Duration::from_secs(5),
        }
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The MAC to send a packet for `dst` to, or `None` while it is not resolved (the caller
    /// drops the packet and counts it; resolution is asked of the kernel meanwhile).
    pub fn mac_for(&mut self, dst: IpAddr, now: Instant) -> Option<[u8; 6]> {
        if let Some(&(mac, t)) = self.cache.get(&dst) {
            if now.duration_since(t) < self.ttl {
                return Some(mac);
            }
        }
        let mac = self.lookup(dst)?;
        self.cache.insert(dst, (mac, now));
        Some(mac)
    }

    /// First version: IPv4 on-link neighbours from /proc/net/arp.
    fn lookup(&self, dst: IpAddr) -> Option<[u8; 6]> {
        let IpAddr::V4(d) = dst else { return None };
        let arp = std::fs::read_to_string("/proc/net/arp").ok()?;
        arp.lines().skip(1).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ip, mac, dev) = (f.first()?, f.get(3)?, f.get(5)?);
            (ip.parse::<Ipv4Addr>().ok()? == d && *dev == self.link.name)
                .then(|| parse_mac(mac))
                .flatten()
                .filter(|m| *m != [0; 6])
        })
    }
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
