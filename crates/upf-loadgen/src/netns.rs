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
