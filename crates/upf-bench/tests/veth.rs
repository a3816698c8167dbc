//! `upf-bench veth` end to end (root only; skipped otherwise): a short rate-limited point with
//! 100 sessions through the real `upf` binary; the JSON line has packets delivered, and
//! nothing is left behind (namespaces, and with them the veths and their XDP programs; the
//! UPF process).

use std::path::{Path, PathBuf};
use std::process::Command;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// The `upf` binary of the same build (built here if missing).
fn upf_binary(bench: &Path) -> PathBuf {
    let upf = bench.with_file_name("upf");
    if !upf.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "upf"]);
        if !cfg!(debug_assertions) {
            c.arg("--release");
        }
        let st = c.status().expect("cargo build -p upf");
        assert!(st.success(), "cargo build -p upf failed");
    }
    upf
}

#[test]
fn veth_point_delivers_and_cleans_up() {
    if !is_root() {
        eprintln!("skipped: the veth topology needs root");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: no `ip` (iproute2)");
        return;
    }
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_upf-bench"));
    let upf = upf_binary(&bench);
    let child = Command::new(&bench)
        .args([
            "veth",
            "--sessions",
            "100",
            "--size",
            "64",
            "--seconds",
            "1",
            "--ceiling-seconds",
            "0.3",
            "--rate",
            "20000",
            "--backend",
            "af-packet",
            "--upf",
        ])
        .arg(&upf)
        .output()
        .expect("upf-bench veth runs");
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "upf-bench veth failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&child.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("a JSON line");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let delivered = v["delivered_mpps"].as_f64().unwrap();
    assert!(delivered > 0.0, "nothing delivered: {line}");
    assert!(
        v["generator_ceiling_mpps"].as_f64().unwrap() > 0.0,
        "{line}"
    );
    assert!(
        v["baseline"]["delivered_mpps"].as_f64().unwrap() > 0.0,
        "{line}"
    );
    assert!(v["upf_cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{line}");
    // Rate-limited to 20 kpps: the rig keeps up.
    assert!(v["loss"].as_f64().unwrap() < 0.5, "{line}");
    // Nothing left: its namespaces (named after its pid), the UPF.
    let prefix = format!("vb{}-", child_pid(&stderr, &v));
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with(&prefix)),
        "namespaces left behind: {list}"
    );
    let upf_pid = stderr
        .split("UPF pid ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .expect("the UPF's pid on stderr");
    let comm = std::fs::read_to_string(format!("/proc/{upf_pid}/comm")).unwrap_or_default();
    assert_ne!(comm.trim(), "upf", "the UPF (pid {upf_pid}) still runs");
}

/// The measuring process's pid, from its namespaces' prefix in the JSON line.
fn child_pid(stderr: &str, v: &serde_json::Value) -> String {
    v["netns_prefix"]
        .as_str()
        .map(|p| p.trim_start_matches("vb").to_string())
        .unwrap_or_else(|| panic!("no netns_prefix in the JSON line; stderr:\n{stderr}"))
}
