//! The UPF's test network: three namespaces joined by veth pairs, the layout of the
//! end-to-end tests, `upf demo`, `upf-bench veth` and `upf-topology` (written once here).
//!
//! ```text
//!  PREFIX-ue                       PREFIX-upf                           PREFIX-dn
//!  n3-gnb 192.168.3.2/24 ── N3 ── n3-upf 192.168.3.1/24
//!  n4-smf 192.168.4.2/24 ── N4 ── n4-upf 192.168.4.1/24   (optional)
//!  [TUN: the UEs, default route]  n6-upf 192.168.6.1/24 ── N6 ── n6-dn 192.168.6.2/24
//!                                                                  UE pool via 192.168.6.1
//! ```
//!
//! N4 has a link of its own so that a UPF that takes over its N3 interface with AF_XDP or
//! AF_PACKET does not swallow PFCP; without it the SMF talks to the UPF on the upf
//! namespace's loopback. Reverse-path filtering is off and IPv6 is disabled everywhere (router
//! solicitations and MLD reports would reach a raw-socket N6 as packets for no UE). The gNB
//! and the DN listen on the discard port, so that the next-hop probes of a UPF get no ICMP
//! port unreachable back (which a raw-socket backend would count as packets for no session).

use crate::{veth_pair_with_queues, Netns};
use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

pub const GNB: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 2);
pub const UPF_N3: Ipv4Addr = Ipv4Addr::new(192, 168, 3, 1);
pub const SMF: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 2);
pub const UPF_N4: Ipv4Addr = Ipv4Addr::new(192, 168, 4, 1);
pub const UPF_N6: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 1);
pub const DN: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 2);
/// Prefix length of every link.
pub const LINK_PREFIX: u8 = 24;

/// The UPF's side of N3, N4 and N6, and the gNB's, SMF's and DN's.
pub const N3_UPF: &str = "n3-upf";
pub const N3_GNB: &str = "n3-gnb";
pub const N4_UPF: &str = "n4-upf";
pub const N4_SMF: &str = "n4-smf";
pub const N6_UPF: &str = "n6-upf";
pub const N6_DN: &str = "n6-dn";

/// UDP port of the discard service the gNB and the DN listen on.
pub const DISCARD_PORT: u16 = 9;

/// The MTU of the UEs' TUN: room for the GTP-U encapsulation (outer IPv4 20, UDP 8, GTP-U 8
/// and PDU Session Container 8: 44 octets, 56 with options) on the 1500-octet N3 link, as the
/// network tells real UEs; the UPF's fast path does not reassemble outer fragments.
pub const UE_TUN_MTU: u32 = 1400;

/// What to build; [`Layout::new`] gives the common case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Namespaces are `PREFIX-ue`, `PREFIX-upf`, `PREFIX-dn`.
    pub prefix: String,
    /// The UE pool (CIDR) the DN routes through the UPF.
    pub ue_pool: String,
    /// A separate N4 link (`n4-smf` ↔ `n4-upf`).
    pub n4_link: bool,
    /// A TUN of this name in the ue namespace, up, MTU [`UE_TUN_MTU`], the default route: a
    /// gNB emulator attaches to it and the UEs' addresses go on it.
    pub ue_tun: Option<String>,
    /// RX/TX queues of every veth (AF_XDP wants one per worker).
    pub veth_queues: u32,
    /// The kernel forwards in the upf namespace (when the UPF's N6 is a TUN, or for a
    /// baseline without the UPF); off when the UPF owns the interfaces.
    pub ip_forward: bool,
    /// GRO on the gNB's and the DN's ends of N3 and N6 (ethtool): an XDP program in the upf
    /// namespace that redirects into N3 or N6 needs the peer's NAPI, which a veth has only
    /// with GRO or an XDP program of its own (a NIC has its own).
    pub peer_gro: bool,
}

impl Layout {
    /// Namespaces under `prefix`, UE pool 10.60.0.0/16, an N4 link, no TUN, one queue per
    /// veth, no kernel forwarding.
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.to_string(),
            ue_pool: "10.60.0.0/16".to_string(),
            n4_link: true,
            ue_tun: None,
            veth_queues: 1,
            ip_forward: false,
            peer_gro: false,
        }
    }

    /// The names of the ue, upf and dn namespaces.
    pub fn namespaces(&self) -> [String; 3] {
        ["ue", "upf", "dn"].map(|role| format!("{}-{role}", self.prefix))
    }
}

/// A built [`Layout`]; the namespaces (and with them the veths and the TUN) are deleted on
/// drop, also when a test panics.
#[derive(Debug)]
pub struct Topology {
    /// The discard listeners; closed before the namespaces go.
    discard: Vec<UdpSocket>,
    ue: Netns,
    upf: Netns,
    dn: Netns,
}

impl Topology {
    /// Builds `layout`, deleting namespaces of the same names left by an earlier run.
    pub fn up(layout: &Layout) -> io::Result<Topology> {
        let [ue, upf, dn] = layout.namespaces();
        // Each value deletes its namespace on drop, so a failure half-way leaves nothing.
        let t = Topology {
            discard: Vec::new(),
            ue: Netns::named(&ue)?,
            upf: Netns::named(&upf)?,
            dn: Netns::named(&dn)?,
        };
        t.build(layout)
    }

    fn build(mut self, layout: &Layout) -> io::Result<Topology> {
        for ns in [&self.ue, &self.upf, &self.dn] {
            for key in [
                "net/ipv4/conf/all/rp_filter",
                "net/ipv4/conf/default/rp_filter",
            ] {
                ns.sysctl(key, "0")?;
            }
            for key in [
                "net/ipv6/conf/all/disable_ipv6",
                "net/ipv6/conf/default/disable_ipv6",
            ] {
                ns.sysctl(key, "1")?;
            }
        }
        self.upf.sysctl(
            "net/ipv4/ip_forward",
            if layout.ip_forward { "1" } else { "0" },
        )?;
        let cidr = |a: Ipv4Addr| format!("{a}/{LINK_PREFIX}");
        let mut links = vec![((&self.ue, N3_GNB, GNB), (&self.upf, N3_UPF, UPF_N3))];
        if layout.n4_link {
            links.push(((&self.ue, N4_SMF, SMF), (&self.upf, N4_UPF, UPF_N4)));
        }
        links.push(((&self.upf, N6_UPF, UPF_N6), (&self.dn, N6_DN, DN)));
        for ((a, a_dev, a_addr), (b, b_dev, b_addr)) in links {
            veth_pair_with_queues(
                (a.name(), a_dev, &cidr(a_addr)),
                (b.name(), b_dev, &cidr(b_addr)),
                layout.veth_queues,
            )?;
        }
        if layout.peer_gro {
            for (ns, dev) in [(&self.ue, N3_GNB), (&self.dn, N6_DN)] {
                crate::ip(&[
                    "netns",
                    "exec",
                    ns.name(),
                    "ethtool",
                    "-K",
                    dev,
                    "gro",
                    "on",
                ])?;
            }
        }
        if let Some(tun) = &layout.ue_tun {
            let mtu = UE_TUN_MTU.to_string();
            self.ue.ip(&["tuntap", "add", "dev", tun, "mode", "tun"])?;
            self.ue.ip(&["link", "set", tun, "mtu", &mtu, "up"])?;
            self.ue.ip(&["route", "add", "default", "dev", tun])?;
        }
        let via = UPF_N6.to_string();
        self.dn
            .ip(&["route", "add", &layout.ue_pool, "via", &via])?;
        for (ns, at) in [(&self.ue, GNB), (&self.dn, DN)] {
            let s = ns.run(|| UdpSocket::bind((at, DISCARD_PORT)))??;
            self.discard.push(s);
        }
        self.warm_neighbours();
        Ok(self)
    }

    pub fn ue(&self) -> &Netns {
        &self.ue
    }

    pub fn upf(&self) -> &Netns {
        &self.upf
    }

    pub fn dn(&self) -> &Netns {
        &self.dn
    }

    /// Leaves the namespaces in place when the value goes (for `upf-topology up`).
    pub fn keep(self) {
        for ns in [self.ue, self.upf, self.dn] {
            ns.keep();
        }
    }

    /// Has each kernel resolve its neighbours on N3 and N6 now (both ways, up to 2 s), so
    /// that a UPF resolving next hops through the kernel does not drop its first packets.
    /// Cheap; call it again after a long pause, entries go stale.
    pub fn warm_neighbours(&self) {
        let probes = [
            (&self.upf, &[GNB, DN][..]),
            (&self.ue, &[UPF_N3][..]),
            (&self.dn, &[UPF_N6][..]),
        ];
        for (ns, peers) in probes {
            let _ = ns.run(|| {
                if let Ok(s) = UdpSocket::bind("0.0.0.0:0") {
                    for p in peers {
                        // Answered at most by an ICMP port unreachable.
                        let _ = s.send_to(&[], (*p, DISCARD_PORT));
                    }
                }
            });
        }
        let until = Instant::now() + Duration::from_secs(2);
        for (ns, peers) in probes {
            for p in peers {
                let p = p.to_string();
                while Instant::now() < until
                    && !ns
                        .ip(&["neigh", "show", &p])
                        .unwrap_or_default()
                        .contains("lladdr")
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// The namespaces of `layout` that exist already (another run of it, or one that was killed
/// before it could clean up).
pub fn existing(layout: &Layout) -> Vec<String> {
    layout
        .namespaces()
        .into_iter()
        .filter(|n| crate::netns_path(n).exists())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::is_root;

    #[test]
    fn namespace_names() {
        assert_eq!(
            Layout::new("t").namespaces(),
            ["t-ue", "t-upf", "t-dn"].map(String::from)
        );
    }

    #[test]
    #[ignore = "needs root"]
    fn the_layout_is_built_and_removed() {
        assert!(is_root(), "needs root");
        let mut l = Layout::new(&format!("topo{}", std::process::id()));
        l.ue_tun = Some("uetun".into());
        l.veth_queues = 2;
        let t = Topology::up(&l).unwrap();
        assert_eq!(existing(&l).len(), 3);
        // Every link is there, with its address, and answers across.
        for (ns, dev, peer) in [
            (t.ue(), N3_GNB, UPF_N3),
            (t.ue(), N4_SMF, UPF_N4),
            (t.dn(), N6_DN, UPF_N6),
        ] {
            assert!(ns.ip(&["-br", "addr", "show", dev]).unwrap().contains("UP"));
            let ok = ns
                .command("ping")
                .args(["-c", "1", "-W", "2", &peer.to_string()])
                .output()
                .unwrap();
            assert!(ok.status.success(), "{} → {peer}", ns.name());
        }
        // Two queues per veth (AF_XDP binds one socket per queue).
        let q = t.upf().ip(&["-d", "link", "show", N3_UPF]).unwrap();
        assert!(q.contains("numrxqueues 2"), "{q}");
        // The UEs' TUN carries the default route; the DN routes the pool to the UPF.
        assert!(t.ue().ip(&["route"]).unwrap().contains("default dev uetun"));
        let r = t.dn().ip(&["route"]).unwrap();
        assert!(r.contains("10.60.0.0/16 via 192.168.6.1"), "{r}");
        drop(t);
        assert!(existing(&l).is_empty(), "deleted on drop");
    }
}
