//! What the root-only integration tests share: whether they can run here, and the `upf`
//! binary of the same build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Root and iproute2, or a line saying why `what` is skipped.
pub fn rig_ready(what: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        eprintln!("skipped: {what} needs root");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: no `ip` (iproute2)");
        return false;
    }
    true
}

/// The `upf` binary next to `bench`, built first if missing (not always: `cargo test` holds
/// the build directory's lock while tests run; `--workspace` builds it anyway).
pub fn upf_binary(bench: &Path) -> PathBuf {
    let upf = bench.with_file_name("upf");
    if !upf.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "upf", "--bin", "upf"]);
        if !cfg!(debug_assertions) {
            c.arg("--release");
        }
        let st = c.status().expect("cargo build -p upf");
        assert!(st.success(), "cargo build -p upf failed");
    }
    upf
}
