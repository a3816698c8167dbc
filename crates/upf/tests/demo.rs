//! `upf demo` end to end (root only: `#[ignore = "needs root"]`): a short run with few sessions at a
//! low rate must exit 0, report packets received at both ends (the DN for uplink, the gNB for
//! downlink), and leave no `upfdemo-*` namespace behind. Only in a build with the `demo`
//! feature (the default).
#![cfg(feature = "demo")]

use std::process::Command;

fn demo_namespaces() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("upfdemo-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The first number after `label` on the summary line that has it ("1,234" → 1234).
fn number_after(out: &str, label: &str) -> Option<u64> {
    let line = out.lines().find(|l| l.contains(label))?;
    let rest = &line[line.find(label)? + label.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[test]
#[ignore = "needs root"]
fn demo_runs_traffic_both_ways_and_cleans_up() {
    assert!(upf_netns::is_root(), "`upf demo` needs root");
    assert!(
        Command::new("ip").arg("-V").output().is_ok(),
        "`upf demo` needs `ip` (iproute2)"
    );
    assert!(
        demo_namespaces().is_empty(),
        "upfdemo-* namespaces exist before the test (another demo running?): {:?}",
        demo_namespaces()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_upf"))
        .args([
            "demo",
            "--sessions",
            "50",
            "--seconds",
            "3",
            "--rate",
            "2000",
        ])
        .output()
        .expect("run upf demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let left = demo_namespaces();
    assert!(
        out.status.success(),
        "upf demo: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    assert!(stdout.contains("Summary: 50 sessions"), "{stdout}");
    let sent = number_after(&stdout, "gNB sent").unwrap_or(0);
    let uplink = number_after(&stdout, "DN received").unwrap_or(0);
    let downlink = number_after(&stdout, "gNB received").unwrap_or(0);
    // 3 s at 2000 pps: about 6000 each way; most of them must make it.
    assert!(sent > 3000, "gNB sent {sent}\n{stdout}");
    assert!(
        uplink > sent / 2,
        "DN received {uplink} of {sent}\n{stdout}"
    );
    assert!(
        downlink > sent / 2,
        "gNB received {downlink} of {sent}\n{stdout}"
    );
    assert!(stdout.contains("latency    round trip p50"), "{stdout}");
}
