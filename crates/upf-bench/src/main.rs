//! `upf-bench`: the benchmark harness. `memory` runs a profile's pre-built packets through the
//! real pipeline on N workers with no I/O (the per-core ceiling) beside a null-forward loop in
//! the same run, and ends with one JSON line.

mod memory;
mod profile;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "UPF benchmark harness")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// In-memory topology: pre-built batches through the real pipeline, no I/O.
    Memory(memory::Args),
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Memory(a) => memory::run(&a),
    };
    if let Err(e) = r {
        eprintln!("upf-bench: {e}");
        std::process::exit(1);
    }
}
