//! What the root-only integration tests share: whether they can run here, and the `upf`
//! binary of the same build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Fails the test unless it has root and iproute2, which `what` needs (the tests are
/// `#[ignore = "needs root"]`: scripts/test.sh runs them as root).
pub fn assert_rig_ready(what: &str) {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    assert!(root, "{what} needs root");
    assert!(
        Command::new("ip").arg("-V").output().is_ok(),
        "{what} needs `ip` (iproute2)"
    );
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
