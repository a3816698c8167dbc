//! Network namespaces and veth pairs: the topology of the tests that need real interfaces, of
//! `upf demo` and of the benchmarks. Made with iproute2's `ip` (set-up work, never on a packet
//! path), deleted when the value is dropped (also when a test fails), and entered with
//! setns(2) by a thread of their own, so the caller's namespace is never touched.
#![forbid(unsafe_code)]

pub mod etcd;
pub mod topology;

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where `ip netns` keeps its namespaces.
pub const NETNS_DIR: &str = "/var/run/netns";

/// Whether this process runs as root (namespaces, veths and raw sockets need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs `ip ARGS`; its standard output, or an error quoting the command and its complaint.
pub fn ip(args: &[&str]) -> io::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running `ip {}`: {e}", args.join(" "))))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "`ip {}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The file of a network namespace: `NAME` under /var/run/netns, or a path as given (such as
/// /proc/PID/ns/net).
pub fn netns_path(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from(NETNS_DIR).join(name)
    }
}

/// Runs `f` on a new thread that first entered network namespace `name` (a name under
/// /var/run/netns, or a path) and returns what it returned. Sockets and devices `f` creates
/// stay in that namespace for their whole life, whichever thread uses them afterwards.
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
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| io::Error::other(format!("setns {}: {e}", path.display())))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A network namespace with its loopback up, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// A namespace called `name`; one left over by an earlier run is deleted first.
    pub fn named(name: &str) -> io::Result<Netns> {
        if netns_path(name).exists() {
            ip(&["netns", "del", name])?;
        }
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A namespace of a name no other process or call uses: `PREFIX-PID-N`.
    pub fn unique(prefix: &str) -> io::Result<Netns> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Netns::named(&format!("{prefix}-{}-{n}", std::process::id()))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> io::Result<String> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `f` on a thread inside this namespace (see [`in_netns`]).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        in_netns(&self.name, f)
    }

    /// Writes /proc/sys/KEY inside this namespace (net sysctls are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{key}");
        self.run(|| std::fs::write(&path, value))?
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {path} = {value}: {e}", self.name)))
    }

    /// Leaves the namespace in place when the value goes.
    pub fn keep(self) {
        std::mem::forget(self);
    }

    /// `program` to be run inside this namespace (`ip netns exec NAME PROGRAM`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes the interfaces in it, veth peers included.
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A veth pair `a_dev` (in namespace `a`, address `a_addr`) ↔ `b_dev` (in `b`, `b_addr`), both
/// up; an empty address adds none. Checksum offload is turned off where ethtool exists:
/// raw-socket receivers want whole checksums (best effort).
pub fn veth_pair(a: (&str, &str, &str), b: (&str, &str, &str)) -> io::Result<()> {
    veth_pair_with_queues(a, b, 1)
}

/// [`veth_pair`] with `queues` RX and TX queues on each end.
pub fn veth_pair_with_queues(
    (a, a_dev, a_addr): (&str, &str, &str),
    (b, b_dev, b_addr): (&str, &str, &str),
    queues: u32,
) -> io::Result<()> {
    let q = queues.to_string();
    let mut args = vec!["link", "add", a_dev, "netns", a];
    let per_end = ["numtxqueues", &q, "numrxqueues", &q];
    if queues > 1 {
        args.extend_from_slice(&per_end);
    }
    args.extend_from_slice(&["type", "veth", "peer", "name", b_dev, "netns", b]);
    if queues > 1 {
        args.extend_from_slice(&per_end);
    }
    ip(&args)?;
    for (ns, dev, addr) in [(a, a_dev, a_addr), (b, b_dev, b_addr)] {
        if !addr.is_empty() {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        }
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        let _ = Command::new("ip")
            .args([
                "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", "rx", "off",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(netns_path("a"), PathBuf::from("/var/run/netns/a"));
        assert_eq!(
            netns_path("/proc/1/ns/net"),
            PathBuf::from("/proc/1/ns/net")
        );
        assert!(in_netns("no-such-netns-here", || ()).is_err());
    }

    #[test]
    #[ignore = "needs root"]
    fn namespaces_and_veths_come_and_go() {
        assert!(is_root(), "needs root");
        let (a, b) = (
            Netns::unique("upfns-a").unwrap(),
            Netns::unique("upfns-b").unwrap(),
        );
        let name = a.name().to_string();
        veth_pair(
            (a.name(), "nsa0", "10.251.0.1/24"),
            (b.name(), "nsb0", "10.251.0.2/24"),
        )
        .unwrap();
        // Each end is in its own namespace, and the caller's namespace has neither.
        assert!(a.ip(&["link", "show", "nsa0"]).is_ok());
        assert!(b.ip(&["link", "show", "nsb0"]).is_ok());
        assert!(ip(&["link", "show", "nsa0"]).is_err());
        // A thread inside `a` reaches `b` over the pair.
        let sent = a
            .run(|| {
                let s = std::net::UdpSocket::bind("10.251.0.1:0")?;
                s.send_to(b"x", "10.251.0.2:9")
            })
            .unwrap();
        assert_eq!(sent.unwrap(), 1);
        assert_eq!(a.command("true").status().unwrap().code(), Some(0));
        drop(a);
        assert!(!netns_path(&name).exists(), "deleted on drop");
        // The kernel tears a namespace down in the background: the peer goes soon after.
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            b.ip(&["link", "show", "nsb0"]).is_err()
        });
        assert!(gone, "the peer went with it");
    }
}
