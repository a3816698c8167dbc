//! `upf-bench`: the benchmark harness.
//!
//! - `memory` runs a profile's pre-built packets through the real pipeline on N workers with
//!   no I/O (the per-core ceiling) beside a null-forward loop in the same run, and ends with
//!   one JSON line.
//! - `veth` runs one point through the real `upf` binary in network namespaces (a BPF
//!   live-frames generator, a counting XDP sink, the Linux forwarding baseline and the
//!   generator's own ceiling in the same run), and ends with one JSON line.
//! - `control` measures the control plane of the real `upf` binary: PFCP establishments,
//!   modifications and deletions per second and their response times for each number of
//!   requests in flight, memory per session, and attach/detach churn during traffic on the
//!   veth topology (loss with and without churn in the same run); one JSON line, and with
//!   `--out` results.json, table.md and PNG plots.
//! - `run` measures a profile's sweep (each point a `memory` child), writes `results.json`,
//!   `table.md` and PNG plots; `report` re-renders them; `ab` compares two builds in one
//!   sitting; `--quick` runs every profile's quick variant and, as root, a small `control`
//!   run (CI's smoke test).

// serde_json's `json!` of the veth line (one object of ~60 keys) needs more than 128.
#![recursion_limit = "256"]

mod ab;
mod buffering;
mod control;
mod failover;
mod harness;
mod memory;
mod profile;
mod report;
mod spec;
mod state;
mod veth;

#[cfg(test)]
mod tests;

use anyhow::{anyhow, Context as _};
use clap::{Parser, Subcommand};

/// Large allocations on transparent huge pages, as in the `upf` binary (switch: `memory
/// --no-huge-pages`).
#[global_allocator]
static ALLOC: upf_io::hugepages::HugePageAlloc = upf_io::hugepages::HugePageAlloc;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    about = "UPF benchmark harness",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Every profile's quick variant in memory (a few seconds) and, as root, a small control
    /// run; exits 0 if the harness works.
    #[arg(long)]
    quick: bool,
    /// With --quick: where its results go (default: a directory under the system's temp dir).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// In-memory topology: pre-built batches through the real pipeline, no I/O; one JSON line.
    Memory(memory::Args),
    /// veth topology: namespaces, the `upf` binary, an XDP live-frames generator, a counting
    /// sink, Linux forwarding as the baseline; one JSON line.
    Veth(veth::Args),
    /// Control plane of the `upf` binary: PFCP procedures/s and response times per window,
    /// memory per session, attach/detach churn during traffic; one JSON line.
    Control(control::Args),
    /// Persisted state (#29) on the `upf` binary: establishments/s with the store on and
    /// off, forwarding again after kill -9 and a restart, sessions lost; one JSON line per
    /// --sessions.
    State(state::Args),
    /// A profile's sweep: results.json, table.md and PNG plots.
    Run(harness::RunArgs),
    /// Re-render table.md and plots from results.json (a file, or a directory of them).
    Report {
        /// results.json, its directory, or a directory of such directories.
        path: PathBuf,
    },
    /// Two builds, same profile, alternated in one sitting: medians and B/A.
    Ab(ab::AbArgs),
}

fn quick_all(out: Option<PathBuf>, command: &[String]) -> anyhow::Result<()> {
    let out = out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("upf-bench-quick-{}", std::process::id()))
    });
    let args = harness::RunArgs::parse_quick(out.clone());
    let all = harness::run(&args, command)?;
    let runs: usize = all.iter().map(|r| r.runs.len()).sum();
    // The control plane needs namespaces (root): checked for consistent counts, not speed.
    let control = if control::is_root() {
        let a = control::quick_args(out.join("control"));
        let v = control::run(&a, command)?;
        control::check(&a, &v)?;
        "1 control run"
    } else {
        eprintln!("bench smoke: control run skipped (needs root)");
        "control skipped (not root)"
    };
    println!(
        "bench smoke: {} profiles, {runs} points measured, {control}, 0 failed",
        all.len()
    );
    Ok(())
}

fn main() {
    let command: Vec<String> = std::env::args().collect();
    let cli = Cli::parse();
    let r = match cli.cmd {
        None if cli.quick => quick_all(cli.out, &command),
        None => Err(anyhow!(
            "give a subcommand (memory, veth, control, run, report, ab) or --quick; see --help"
        )),
        Some(Cmd::Memory(a)) => memory::run(&a),
        Some(Cmd::Veth(a)) => veth::run(&a),
        Some(Cmd::Control(a)) => control::run(&a, &command).map(|_| ()),
        Some(Cmd::State(a)) => state::run(&a),
        Some(Cmd::Run(a)) => harness::run(&a, &command).map(|_| ()),
        Some(Cmd::Report { path }) => report::report(&path),
        Some(Cmd::Ab(a)) => ab::run(&a).and_then(|r| {
            println!("{}", ab::table(&r));
            if let Some(dir) = &a.run.out {
                std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
                let f = dir.join("ab.json");
                let json = serde_json::to_string_pretty(&r)?;
                std::fs::write(&f, json).with_context(|| f.display().to_string())?;
                std::fs::write(dir.join("ab.md"), ab::table(&r))
                    .with_context(|| dir.display().to_string())?;
                println!("written: {}", f.display());
            }
            Ok(())
        }),
    };
    if let Err(e) = r {
        eprintln!("upf-bench: {e:#}");
        std::process::exit(1);
    }
}
