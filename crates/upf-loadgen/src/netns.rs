//! Running code inside a named network namespace (`ip netns add NAME` made it, under
//! /var/run/netns): sockets and TUN devices created there stay there, whichever thread uses
//! them afterwards.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::PathBuf;

/// Where `ip netns` keeps its namespaces.
pub const NETNS_DIR: &str = "/var/run/netns";

/// The file of a network namespace: `NAME` under /var/run/netns, or a path as given.
pub fn netns_path(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from(NETNS_DIR).join(name)
    }
}

/// Runs `f` on a new thread that first entered network namespace `name` (a name under
/// /var/run/netns, or a path such as /proc/PID/ns/net), and returns what it returned.
/// Sockets and TUN devices `f` creates belong to that namespace for their whole life, so `f`
/// can set up an emulator whose threads run anywhere afterwards. The calling thread's
/// namespace is untouched. Needs CAP_SYS_ADMIN.
pub fn in_netns<T, F>(name: &str, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let path = netns_path(name);
    let ns = File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("netns {}: {e}", path.display())))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            crate::sys::setns_net(&ns)
                .map_err(|e| io::Error::new(e.kind(), format!("setns {}: {e}", path.display())))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A veth pair `a_dev` (in netns `a`, address `a_addr`) ↔ `b_dev` (in `b`, `b_addr`), both up,
/// checksum offload off where ethtool exists (raw-socket backends want whole checksums; the
/// UPF does not check outer checksums, so this is best effort).
pub fn veth_pair(
    (a, a_dev, a_addr): (&str, &str, &str),
    (b, b_dev, b_addr): (&str, &str, &str),
) -> Result<(), String> {
    use upf_io::link::ip;
    ip(&[
        "link", "add", a_dev, "netns", a, "type", "veth", "peer", "name", b_dev, "netns", b,
    ])?;
    for (ns, dev, addr) in [(a, a_dev, a_addr), (b, b_dev, b_addr)] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        let _ = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", "rx", "off",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    Ok(())
}
