//! Records the commit and compiler a binary was built from (results.json names them).
use std::process::Command;

fn out(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = out(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=UPF_BENCH_RUSTC={version}");
    let commit = out("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = out("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=UPF_BENCH_COMMIT={commit}{suffix}");
    // Rebuild the stamp when HEAD moves or a source changes.
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = out("git", &["rev-parse", "--git-path", p]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(r) = out("git", &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = out("git", &["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../../profiles");
}
