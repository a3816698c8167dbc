//! `upf`: the 5G User Plane Function. Subcommands: `decode` (captures and hex to JSON).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use upf::decode;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
    }
}
