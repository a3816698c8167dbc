//! The demo's network: three namespaces joined by veths, and `upf demo --clean`.

use super::{
    traffic, Demo, DN, DN_NS, GNB, NAMESPACES, SMF, UE_NS, UE_POOL, UPF_N3, UPF_N4, UPF_N6, UPF_NS,
};
use anyhow::Context;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use upf_netns::ip;
use upf_netns::{in_netns, veth_pair};

pub(super) fn ns_exists(name: &str) -> bool {
    upf_netns::netns_path(name).exists()
}

/// Writes /proc/sys/KEY inside namespace `ns` (net sysctls are per namespace).
fn sysctl(ns: &str, key: &str, value: &str) -> anyhow::Result<()> {
    let path = format!("/proc/sys/{key}");
    in_netns(ns, || std::fs::write(&path, value))?
        .with_context(|| format!("{ns}: {path} = {value}"))
}

pub(super) fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn process_gone(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// `upf demo --clean`: stops what runs in the demo's namespaces and deletes them.
pub(super) fn clean() -> anyhow::Result<()> {
    let mut removed = Vec::new();
    for ns in NAMESPACES {
        if !ns_exists(ns) {
            continue;
        }
        let pids: Vec<u32> = ip(&["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        for &p in &pids {
            signal(p, "TERM");
        }
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && !pids.iter().all(|&p| process_gone(p)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        for &p in pids.iter().filter(|&&p| !process_gone(p)) {
            signal(p, "KILL");
        }
        ip(&["netns", "del", ns])?;
        removed.push(if pids.is_empty() {
            ns.to_string()
        } else {
            format!("{ns} (stopped pid {})", join(&pids))
        });
    }
    if removed.is_empty() {
        say!("upf demo --clean: nothing to clean (no upfdemo-* namespace)");
    } else {
        say!("upf demo --clean: removed {}", removed.join(", "));
    }
    Ok(())
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

impl Demo {
    /// The three namespaces and their links (scripts/e2e-topology.sh's layout, without the
    /// UE TUN: the demo's gNB makes the UEs' packets itself).
    pub(super) fn topology(&mut self, forward: bool) -> anyhow::Result<()> {
        for ns in NAMESPACES {
            ip(&["netns", "add", ns])?;
            self.namespaces.push(ns);
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for (k, v) in [
                ("net/ipv4/conf/all/rp_filter", "0"),
                ("net/ipv4/conf/default/rp_filter", "0"),
                // No IPv6 on the links: router solicitations and MLD reports would reach the
                // UPF's N6 as packets for no UE.
                ("net/ipv6/conf/all/disable_ipv6", "1"),
                ("net/ipv6/conf/default/disable_ipv6", "1"),
            ] {
                sysctl(ns, k, v)?;
            }
        }
        // The kernel forwards between N6 and the TUN for udp-tun; with raw sockets the UPF
        // does, and the kernel must not forward copies.
        sysctl(
            UPF_NS,
            "net/ipv4/ip_forward",
            if forward { "1" } else { "0" },
        )?;
        for (a, da, aa, b, db, ab) in [
            (
                UE_NS,
                "n3-gnb",
                "192.168.3.2/24",
                UPF_NS,
                "n3-upf",
                "192.168.3.1/24",
            ),
            (
                UE_NS,
                "n4-smf",
                "192.168.4.2/24",
                UPF_NS,
                "n4-upf",
                "192.168.4.1/24",
            ),
            (
                UPF_NS,
                "n6-upf",
                "192.168.6.1/24",
                DN_NS,
                "n6-dn",
                "192.168.6.2/24",
            ),
        ] {
            veth_pair((a, da, aa), (b, db, ab))?;
        }
        ip(&["-n", DN_NS, "route", "add", UE_POOL, "via", "192.168.6.1"])?;
        // The UPF has the kernel confirm its next hops (the gNB, the DN) with an empty datagram
        // to their discard port. Someone listening there keeps those kernels from answering
        // with ICMP port unreachable, which the raw-socket backends would see as packets for
        // no session and count as drops.
        for (ns, at) in [(UE_NS, GNB), (DN_NS, DN)] {
            let s = in_netns(ns, || std::net::UdpSocket::bind((at, 9)))?
                .with_context(|| format!("{ns}: UDP {at}:9"))?;
            self.discard.push(s);
        }
        warm_neighbours();
        say!(
            "upf demo: network namespaces\n  {UE_NS:<12} gNB {GNB} (N3), SMF {SMF} (N4)\n  \
             {UPF_NS:<12} the UPF: N3 {UPF_N3}, N4 {UPF_N4}, N6 {UPF_N6}\n  \
             {DN_NS:<12} data network {DN}: a UDP reflector on port {}, {UE_POOL} via the UPF",
            traffic::REFLECTOR_PORT
        );
        Ok(())
    }
}

/// Makes each namespace's kernel resolve its neighbours before the UPF needs them (the UPF
/// resolves next hops through the kernel, so the first packets would otherwise wait or drop).
fn warm_neighbours() {
    for (ns, peers) in [
        (UPF_NS, &[GNB, DN][..]),
        (UE_NS, &[UPF_N3][..]),
        (DN_NS, &[UPF_N6][..]),
    ] {
        let _ = in_netns(ns, || {
            if let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") {
                for p in peers {
                    // The discard port: answered at most by an ICMP port unreachable.
                    let _ = s.send_to(&[], (*p, 9));
                }
            }
        });
    }
    let until = Instant::now() + Duration::from_secs(2);
    for (ns, p) in [
        (UPF_NS, GNB),
        (UPF_NS, DN),
        (UE_NS, UPF_N3),
        (DN_NS, UPF_N6),
    ] {
        let p = p.to_string();
        while Instant::now() < until {
            let out = ip(&["-n", ns, "neigh", "show", &p]).unwrap_or_default();
            if out.contains("lladdr") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
