//! `upf-bench control` end to end (root only; skipped otherwise): two windows of 300 sessions
//! and a second of churn beside rate-limited traffic through the real `upf` binary. The JSON
//! line's counts agree with what was asked, the output directory has its files, and nothing
//! is left behind (namespaces, the UPF).

use std::path::PathBuf;
use std::process::Command;

mod common;

#[test]
#[ignore = "needs root"]
fn control_counts_agree_and_cleans_up() {
    common::assert_rig_ready("the control bench");
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_upf-bench"));
    let upf = common::upf_binary(&bench);
    let out = tempfile::tempdir().unwrap();
    let child = Command::new(&bench)
        .args([
            "control",
            "--sessions",
            "300",
            "--windows",
            "1,8",
            "--churn",
            "200",
            "--churn-seconds",
            "1",
            "--background",
            "50",
            "--rate",
            "20000",
            "--backend",
            "af-packet",
            "--out",
        ])
        .arg(out.path())
        .arg("--upf")
        .arg(&upf)
        .output()
        .expect("upf-bench control runs");
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success(),
        "upf-bench control failed:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&child.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("a JSON line");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();

    let procs = v["procedures"].as_array().expect("procedures");
    let windows: Vec<u64> = procs
        .iter()
        .map(|p| p["window"].as_u64().unwrap())
        .collect();
    assert_eq!(windows, [1, 8], "{line}");
    for p in procs {
        for k in ["establish", "modify", "delete"] {
            assert_eq!(p[k]["ops"], 300, "{k}: {p}");
            assert_eq!(p[k]["ok"], 300, "{k}: {p}");
            assert_eq!(p[k]["failed"], 0, "{k}: {p}");
            assert_eq!(p[k]["latency_us"]["count"], 300, "{k}: {p}");
            let (p50, p99) = (
                p[k]["latency_us"]["p50"].as_f64().unwrap(),
                p[k]["latency_us"]["p99"].as_f64().unwrap(),
            );
            assert!(p50 > 0.0 && p50 <= p99, "{k}: {p}");
            assert!(p[k]["per_s"].as_f64().unwrap() > 0.0, "{k}: {p}");
            assert!(
                p[k]["upf_cpu_us_per_op"].as_f64().unwrap() > 0.0,
                "{k}: {p}"
            );
        }
        // The daemon's own count agrees with the emulator's.
        assert_eq!(p["upf_sessions_established"], 300, "{p}");
        assert_eq!(p["upf_sessions_after_delete"], 0, "{p}");
        let rss = p["rss_per_session_bytes"].as_f64().unwrap();
        assert!(rss > 0.0 && rss < 1e6, "RSS per session {rss}: {p}");
    }
    assert_eq!(
        v["memory_per_session_bytes"],
        procs[0]["rss_per_session_bytes"]
    );

    let c = &v["churn"];
    assert!(c["attached"].as_u64().unwrap() > 0, "{c}");
    assert!(c["detached"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["failed"], 0, "{c}");
    assert_eq!(
        c["establish_latency_us"]["count"], c["attached"],
        "a response time per attach: {c}"
    );
    assert_eq!(c["sessions_left_at_smf"], 50, "{c}");
    for k in ["without_churn", "with_churn", "without_churn_after"] {
        let w = &c[k];
        let (frames, delivered) = (
            w["frames"].as_u64().unwrap(),
            w["delivered"].as_u64().unwrap(),
        );
        assert!(frames > 0, "{k}: {c}");
        assert_eq!(
            w["lost"].as_u64().unwrap(),
            frames.saturating_sub(delivered),
            "{k}: {c}"
        );
        let loss = w["loss"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&loss), "{k}: {c}");
    }
    let quiet = c["loss_without_churn"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&quiet), "{c}");

    // The output directory.
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(r["kind"], "control");
    assert_eq!(r["result"], v);
    assert!(r["machine"]["kernel"]
        .as_str()
        .is_some_and(|k| !k.is_empty()));
    assert!(r["build"]["commit"].as_str().is_some());
    let table = std::fs::read_to_string(out.path().join("table.md")).unwrap();
    assert!(table.contains("| 8 |"), "{table}");
    assert!(table.contains("with churn"), "{table}");
    for f in ["control-rate.png", "control-latency.png"] {
        let png = std::fs::read(out.path().join(f)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{f}");
    }
    // `report` re-renders a control run.
    std::fs::remove_file(out.path().join("table.md")).unwrap();
    let rep = Command::new(&bench)
        .arg("report")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("table.md")).unwrap(),
        table
    );

    // Nothing left: the namespaces (named after the measuring process), the churn's UPF.
    let pid = v["netns_prefix"]
        .as_str()
        .and_then(|p| p.strip_prefix("cb"))
        .expect("netns_prefix cbPID")
        .to_string();
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for prefix in [format!("cb{pid}"), format!("vb{pid}-")] {
        assert!(
            !list.lines().any(|l| l.starts_with(&prefix)),
            "namespaces left behind: {list}"
        );
    }
    let upf_pid = stderr
        .split("UPF pid ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u32>().ok())
        .expect("the churn UPF's pid on stderr");
    let comm = std::fs::read_to_string(format!("/proc/{upf_pid}/comm")).unwrap_or_default();
    assert_ne!(comm.trim(), "upf", "the UPF (pid {upf_pid}) still runs");
}
