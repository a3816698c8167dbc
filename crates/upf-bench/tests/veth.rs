//! `upf-bench veth` end to end (root only; skipped otherwise): a short rate-limited point with
//! 100 sessions through the real `upf` binary; the JSON line has packets delivered, and
//! nothing is left behind (namespaces, and with them the veths and their XDP programs; the
//! UPF process).

use std::path::PathBuf;
use std::process::Command;

mod common;

#[test]
#[ignore = "needs root"]
fn veth_point_delivers_and_cleans_up() {
    common::assert_rig_ready("the veth topology");
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_upf-bench"));
    let upf = common::upf_binary(&bench);
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

/// Runs `upf-bench veth ARGS` (with the same build's `upf`) and returns its JSON line.
fn veth_json(args: &[&str]) -> serde_json::Value {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_upf-bench"));
    let upf = common::upf_binary(&bench);
    let out = Command::new(&bench)
        .arg("veth")
        .args(args)
        .arg("--upf")
        .arg(&upf)
        .output()
        .expect("upf-bench veth runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "upf-bench veth failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line; stderr:\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

/// A search's fields agree with its trials: at most `max` trials, each loss what its
/// counts say, the zero-loss rate a passing trial's and below the top.
fn check_search(s: &serde_json::Value, top: f64, max: usize) {
    let trials = s["trials"].as_array().expect("trials");
    assert!(!trials.is_empty() && trials.len() <= max, "{s}");
    for t in trials {
        let (f, d) = (
            t["frames"].as_f64().unwrap(),
            t["delivered"].as_f64().unwrap(),
        );
        assert!(f > 0.0, "{t}");
        let loss = t["loss"].as_f64().unwrap();
        assert!((loss - (1.0 - d / f).max(0.0)).abs() < 1e-12, "{t}");
        assert!(t["requested_pps"].as_f64().unwrap() <= top, "{t}");
    }
    if let Some(z) = s["zero_loss_pps"].as_f64() {
        assert!(z <= top * 1.05, "zero-loss {z} above the top {top}");
        assert!(
            trials
                .iter()
                .any(|t| t["offered_pps"].as_f64() == Some(z) && t["loss"].as_f64() == Some(0.0)),
            "{s}"
        );
        assert!(s["below_10ppm_pps"].as_f64().unwrap() >= z, "{s}");
    }
}

/// Every latency run: quantiles in order, one histogram entry per stamped packet delivered,
/// no stamp from the future, jitter kept for flows of both classes; downlink: the UPF marked
/// every G-PDU with its class's QFI.
fn check_latency(v: &serde_json::Value, loads: usize, downlink: bool) {
    let l = v["latency"]["loads"].as_array().expect("latency loads");
    assert_eq!(l.len(), loads, "{}", v["latency"]);
    for run in l {
        let delivered = run["delivered"].as_u64().unwrap();
        assert!(delivered > 0, "{run}");
        assert_eq!(run["stamped_delivered"].as_u64(), Some(delivered), "{run}");
        assert_eq!(run["negative_transit"].as_u64(), Some(0), "{run}");
        let classes = run["classes"].as_array().unwrap();
        let hist: u64 = classes
            .iter()
            .flat_map(|c| c["histogram"].as_array().unwrap().iter())
            .map(|b| b[1].as_u64().unwrap())
            .sum();
        assert_eq!(
            hist, delivered,
            "histogram entries = stamped packets delivered"
        );
        for c in classes {
            assert!(c["packets"].as_u64().unwrap() > 0, "{c}");
            let q = |k: &str| c[k].as_f64().unwrap();
            assert!(q("p50_us") > 0.0, "{c}");
            assert!(
                q("p50_us") <= q("p99_us") && q("p99_us") <= q("p999_us"),
                "{c}"
            );
            assert!(q("p999_us") <= q("max_us"), "{c}");
            assert!(q("max_us") < 1e6, "transit under a second: {c}");
            assert!(c["jitter_flows"].as_u64().unwrap() > 0, "{c}");
            assert!(q("jitter_mean_us") <= q("jitter_max_us"), "{c}");
            if downlink {
                assert_eq!(c["qfi_mismatch"].as_u64(), Some(0), "{c}");
            }
        }
    }
}

/// A short search (small rates, few trials) and latency runs, both directions, through the
/// real `upf` with two QoS flows per session.
#[test]
#[ignore = "needs root"]
fn veth_search_and_latency() {
    common::assert_rig_ready("the veth topology");
    let common = [
        "--sessions",
        "50",
        "--size",
        "64",
        "--seconds",
        "0.5",
        "--ceiling-seconds",
        "0.3",
        "--rate",
        "20000",
        "--search",
        "--search-top",
        "40000",
        "--max-trials",
        "3",
        "--trial-seconds",
        "0.3",
        "--latency",
        "--latency-loads",
        "20,60",
        "--high-share",
        "0.3",
        "--backend",
        "af-xdp",
    ];
    let mut dl: Vec<&str> = common.to_vec();
    dl.extend(["--direction", "downlink"]);
    let v = veth_json(&dl);
    check_search(&v["search"], 40_000.0, 3);
    check_search(&v["baseline_search"], 40_000.0, 3);
    check_latency(&v, 2, true);
    let z = v["zero_loss_mpps"]
        .as_f64()
        .expect("a zero-loss rate at ≤ 40 kpps");
    let top = v["latency"]["base_pps"].as_f64().unwrap();
    assert!(
        (z * 1e6 - top).abs() < 1.0,
        "loads are of the zero-loss rate"
    );
    let mut ul: Vec<&str> = common.to_vec();
    ul.extend(["--direction", "uplink", "--no-baseline"]);
    let v = veth_json(&ul);
    check_search(&v["search"], 40_000.0, 3);
    assert!(v["baseline_search"].is_null());
    check_latency(&v, 2, false);
}
