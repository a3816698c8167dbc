//! `upf`: the 5G User Plane Function. Subcommands: `demo` (the UPF between an emulated gNB, SMF
//! and data network, with traffic), `run` (the UPF), `show` (its state), `decode` (captures and
//! hex to JSON).
#![forbid(unsafe_code)]

use anyhow::bail;
use clap::{Parser, Subcommand};

/// Large allocations (session tables, hot records) on transparent huge pages: fewer page walks
/// per packet with many sessions (docs/benchmarks/datapath-memory.md).
#[global_allocator]
static ALLOC: upf_io::hugepages::HugePageAlloc = upf_io::hugepages::HugePageAlloc;
use std::process::ExitCode;
#[cfg(feature = "demo")]
use upf::demo;
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
    /// The UPF on this machine in one command (root): three network namespaces (gNB + SMF,
    /// UPF, data network), `upf run` in the middle, sessions through the built-in SMF
    /// emulator, GTP-U traffic both ways with live rates, drops and round-trip times, a
    /// summary, and everything removed again (also on Ctrl-C).
    #[cfg(feature = "demo")]
    Demo(demo::Args),
    /// Not in this build: it was built without the `demo` feature (--no-default-features).
    #[cfg(not(feature = "demo"))]
    Demo(NoDemo),
    /// Decode PFCP (UDP 8805) and GTP-U (UDP 2152) from a pcap/pcapng file, or one message
    /// given as hex, and print one JSON object per packet.
    Decode(decode::Args),
    /// Run the UPF: the N4 (PFCP) agent, the workers on the configured interfaces, the
    /// metrics/admin endpoint. `upf run` alone: N4 on 127.0.0.1:8805, N3 on UDP
    /// 127.0.0.1:2152, N6 on a TUN device (when root).
    Run(Box<run::Args>),
    /// Ask a running UPF (its admin endpoint) for its state.
    Show(ShowArgs),
    /// Move every session of a running UPF to another engine, while traffic flows:
    /// `upf engine set xdp|auto|user` (it must have started with engine = "xdp" or "auto").
    Engine(EngineArgs),
    /// Change a running UPF's priority settings: `upf priority max-rbs N` (the most
    /// lower-priority packets a worker takes between two reads; modes strict, load-aware).
    Priority(PriorityArgs),
}

#[derive(Debug, clap::Args)]
struct PriorityArgs {
    /// max-rbs
    setting: String,
    /// Packets, at least 1.
    value: usize,
    /// The UPF's admin address (admin.address in its config).
    #[arg(long, default_value = "127.0.0.1:9464")]
    admin: std::net::SocketAddr,
}

fn priority(a: &PriorityArgs) -> anyhow::Result<String> {
    if a.setting != "max-rbs" {
        bail!("priority {:?}: expected `priority max-rbs N`", a.setting);
    }
    if a.value == 0 {
        bail!("priority max-rbs 0: at least 1");
    }
    upf::admin::post(a.admin, &format!("/api/priority/max_rbs/{}", a.value))
}

#[derive(Debug, clap::Args)]
struct EngineArgs {
    /// set
    action: String,
    /// xdp, auto or user
    mode: String,
    /// The UPF's admin address (admin.address in its config).
    #[arg(long, default_value = "127.0.0.1:9464")]
    admin: std::net::SocketAddr,
}

fn engine(a: &EngineArgs) -> anyhow::Result<String> {
    if a.action != "set" {
        bail!("engine {:?}: expected `engine set xdp|auto|user`", a.action);
    }
    if !matches!(a.mode.as_str(), "xdp" | "auto" | "user") {
        bail!("engine set {:?}: expected xdp, auto or user", a.mode);
    }
    upf::admin::post(a.admin, &format!("/api/engine/{}", a.mode))
}

/// Whatever `upf demo` was given, in a build without it.
#[cfg(not(feature = "demo"))]
#[derive(Debug, clap::Args)]
struct NoDemo {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// sessions | session SEID | associations | workers | drops | counters | engine | metrics
    what: String,
    /// The SEID, for `show session` (decimal or 0x-hex).
    seid: Option<String>,
    /// The UPF's admin address (admin.address in its config).
    #[arg(long, default_value = "127.0.0.1:9464")]
    admin: std::net::SocketAddr,
}

fn show(a: &ShowArgs) -> anyhow::Result<String> {
    let path = match (a.what.as_str(), &a.seid) {
        ("session", Some(s)) => format!("/api/session/{s}"),
        ("session", None) => bail!("show session SEID"),
        ("metrics", _) => "/metrics".into(),
        (w @ ("sessions" | "associations" | "workers" | "drops" | "counters" | "engine"), _) => format!("/api/{w}"),
        (w, _) => bail!("show {w:?}: expected sessions, session SEID, associations, workers, drops, counters, engine or metrics"),
    };
    upf::admin::get(a.admin, &path)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        #[cfg(not(feature = "demo"))]
        Command::Demo(_) => {
            eprintln!(
                "upf demo: this upf was built without the `demo` feature (the load generator); \
                 build it with it: cargo build --release -p upf (the feature is on by default)"
            );
            ExitCode::FAILURE
        }
        #[cfg(feature = "demo")]
        Command::Demo(args) => match demo::run(&args) {
            Ok(demo::Outcome::Completed) => ExitCode::SUCCESS,
            Ok(demo::Outcome::Interrupted) => ExitCode::from(130),
            Err(e) => {
                eprintln!("upf demo: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Show(a) => match show(&a) {
            Ok(body) => {
                print!("{body}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("upf show: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Priority(a) => match priority(&a) {
            Ok(body) => {
                print!("{body}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("upf priority: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Engine(a) => match engine(&a) {
            Ok(body) => {
                print!("{body}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("upf engine: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => match run::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("upf: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
