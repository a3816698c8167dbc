//! The demo's network: three namespaces joined by veths, and `upf demo --clean`.

use super::{
    traffic, Demo, DN, DN_NS, GNB, NAMESPACES, PREFIX, SMF, UE_NS, UE_POOL, UPF_N3, UPF_N4, UPF_N6,
    UPF_NS,
};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use upf_netns::ip;
use upf_netns::topology::{Layout, Topology};

pub(super) fn ns_exists(name: &str) -> bool {
    upf_netns::netns_path(name).exists()
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
    /// The three namespaces and their links (upf_netns::topology's layout, without the UE
    /// TUN: the demo's gNB makes the UEs' packets itself). `forward`: the kernel forwards
    /// between N6 and the TUN for udp-tun; with raw sockets the UPF does, and the kernel must
    /// not forward copies.
    pub(super) fn topology(&mut self, forward: bool) -> anyhow::Result<()> {
        let mut l = Layout::new(PREFIX);
        l.ue_pool = UE_POOL.to_string();
        l.ip_forward = forward;
        self.topology = Some(Topology::up(&l)?);
        say!(
            "upf demo: network namespaces\n  {UE_NS:<12} gNB {GNB} (N3), SMF {SMF} (N4)\n  \
             {UPF_NS:<12} the UPF: N3 {UPF_N3}, N4 {UPF_N4}, N6 {UPF_N6}\n  \
             {DN_NS:<12} data network {DN}: a UDP reflector on port {}, {UE_POOL} via the UPF",
            traffic::REFLECTOR_PORT
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_the_layouts() {
        assert_eq!(
            Layout::new(PREFIX).namespaces(),
            NAMESPACES.map(String::from)
        );
    }
}
