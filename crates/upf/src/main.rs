//! `upf`: the 5G User Plane Function. Subcommands: `run` (the UPF), `decode` (captures and hex to JSON).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use upf::{decode, run};

#[derive(Debug, Parser)]
#[command(
    name = "upf",
    version,
    about = "5G User Plane Function (3GPP TS 23.501 §6.2.3)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode PFCP (UDP 8805) and GTP-U (UDP 2152) from a pcap/pcapng file, or one message
    /// given as hex, and print one JSON object per packet.
    Decode(decode::Args),
    /// Run the UPF: the N4 (PFCP) agent on --n4, with the in-memory data path.
    Run(run::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Run(args) => match run::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("upf: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
