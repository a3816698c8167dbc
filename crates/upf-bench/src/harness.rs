//! `upf-bench run`: a profile's sweep, each point measured by a child `upf-bench memory`
//! (a fresh process per point, so RSS per session is the point's own), written to
//! `results.json` with the machine, kernel, commit and compiler, printed as a Markdown table
//! and drawn as PNG plots.
//!
//! Topologies: each point is a list of arguments for one topology subcommand of this binary;
//! `memory` exists, `veth` (namespaces and real sockets) is the next one: a `Topology::Veth`
//! arm building its own arguments and a subcommand printing the same JSON line is all it
//! needs here.

use crate::report;
use crate::spec::{self, MixFacts, Origin, Point, Profile, Sweep};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const SCHEMA: u32 = 1;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Profile name (`profiles/NAME.toml`) or path; repeat for several.
    #[arg(long)]
    pub profile: Vec<String>,
    /// Every shipped profile.
    #[arg(long)]
    pub all: bool,
    /// The profiles' quick variants (`[quick]`).
    #[arg(long)]
    pub quick: bool,
    /// What to sweep.
    #[arg(long, value_enum, default_value = "points")]
    pub sweep: Sweep,
    /// Where results.json, table.md and the plots go (default results/PROFILE-SWEEP-TIME;
    /// with several profiles, one subdirectory each).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override the profile's seconds per loop and point.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Override the profile's session count.
    #[arg(long)]
    pub sessions: Option<u32>,
    /// Keep only these fixed sizes of the profile (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Keep only these UL shares of the profile (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub uplink_percent: Vec<f64>,
    /// The topology.
    #[arg(long, value_enum, default_value = "memory")]
    pub topology: Topology,
    /// Binary that measures each point (default: this one).
    #[arg(long)]
    pub bin: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Pre-built batches through the real pipeline and workers, no I/O.
    Memory,
    /// veth pairs and network namespaces, real sockets (not built yet).
    Veth,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    pub kernel: String,
    pub hostname: String,
    /// /proc/loadavg (1, 5, 15 min) before the first and after the last point.
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Build {
    /// Commit of the measuring binary (`-dirty`: uncommitted changes), from its build.
    pub commit: String,
    pub rustc: String,
    pub debug_assertions: bool,
}

impl Build {
    pub fn this() -> Build {
        Build {
            commit: env!("UPF_BENCH_COMMIT").into(),
            rustc: env!("UPF_BENCH_RUSTC").into(),
            debug_assertions: cfg!(debug_assertions),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixInfo {
    pub name: String,
    pub about: String,
    pub facts: MixFacts,
}

/// One point measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub point: Point,
    /// The command that measured it (arguments of the binary).
    pub args: Vec<String>,
    pub mpps_per_core: f64,
    pub gbps_per_core: f64,
    pub ns_per_packet: f64,
    pub null_forward_mpps_per_core: f64,
    pub ratio_to_null: f64,
    pub memory_per_session_bytes: f64,
    /// The topology's own JSON line, as printed.
    pub raw: serde_json::Value,
}

impl Measured {
    /// From the JSON line of `upf-bench memory` (its first size row).
    pub fn from_line(
        point: Point,
        args: Vec<String>,
        raw: serde_json::Value,
    ) -> Result<Self, String> {
        let row = raw["sizes"]
            .get(0)
            .ok_or("the JSON line has no sizes[0]")?
            .clone();
        let f = |k: &str| {
            row[k]
                .as_f64()
                .ok_or_else(|| format!("the JSON line has no sizes[0].{k}"))
        };
        Ok(Measured {
            point,
            args,
            mpps_per_core: f("mpps_per_core")?,
            gbps_per_core: f("gbps_per_core")?,
            ns_per_packet: f("ns_per_packet")?,
            null_forward_mpps_per_core: f("null_forward_mpps_per_core")?,
            ratio_to_null: f("ratio_to_null")?,
            memory_per_session_bytes: raw["memory_per_session_bytes"].as_f64().unwrap_or(0.0),
            raw,
        })
    }
}

/// Everything a run wrote: `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: u32,
    pub created_unix: u64,
    pub command: Vec<String>,
    pub machine: Machine,
    pub build: Build,
    pub topology: Topology,
    pub sweep: Sweep,
    pub quick: bool,
    pub profile: Profile,
    pub profile_origin: Origin,
    pub mixes: Vec<MixInfo>,
    /// What the topology does not reproduce of the profile.
    pub notes: Vec<String>,
    pub runs: Vec<Measured>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn loadavg() -> [f64; 3] {
    let s = read("/proc/loadavg");
    let mut it = s.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
}

pub fn machine() -> Machine {
    let lscpu = Command::new("lscpu")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let field = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let cpu_model = field(&lscpu, "Model name")
        .or_else(|| field(&read("/proc/cpuinfo"), "model name"))
        .unwrap_or_else(|| "unknown".into());
    let memory_bytes = field(&read("/proc/meminfo"), "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    Machine {
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        memory_bytes,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
        load_before: loadavg(),
        load_after: [0.0; 3],
    }
}

/// The profile's argument for a child: its file, or its name when built in.
pub fn profile_arg(p: &Profile, origin: &Origin) -> String {
    match origin {
        Origin::File(f) => f.display().to_string(),
        Origin::BuiltIn => p.name.clone(),
    }
}

/// Runs `bin` with `args`; returns its last stdout line parsed as JSON. Its stderr (progress)
/// goes to ours.
pub fn measure_with(bin: &Path, args: &[String]) -> Result<serde_json::Value, String> {
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {} exited with {}",
            bin.display(),
            args.join(" "),
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("{} printed no JSON line", bin.display()))?;
    serde_json::from_str(line).map_err(|e| format!("{}: its JSON line: {e}", bin.display()))
}

/// The profile as this run uses it: quick variant and overrides applied.
pub fn effective(a: &RunArgs, p: &Profile) -> Result<Profile, String> {
    let mut p = if a.quick { p.quick() } else { p.clone() };
    if let Some(s) = a.seconds {
        p.run.seconds = s;
    }
    if let Some(n) = a.sessions {
        p.sessions.count = n;
    }
    if !a.sizes.is_empty() {
        p.traffic.sizes.retain(|s| a.sizes.contains(s));
        if p.traffic.sizes.is_empty() && p.mixes.is_empty() {
            return Err(format!(
                "--sizes: none of them is a size of profile {}",
                p.name
            ));
        }
    }
    if !a.uplink_percent.is_empty() {
        p.traffic
            .uplink_percent
            .retain(|u| a.uplink_percent.iter().any(|x| (x - u).abs() < 1e-9));
        if p.traffic.uplink_percent.is_empty() && p.mixes.is_empty() {
            return Err(format!(
                "--uplink-percent: none of them is a split of profile {}",
                p.name
            ));
        }
    }
    Ok(p)
}

/// Runs one profile's sweep into `out`.
pub fn run_profile(
    a: &RunArgs,
    name: &str,
    out: &Path,
    command: &[String],
) -> Result<Results, String> {
    let (file_profile, origin) = spec::load(name)?;
    let p = effective(a, &file_profile)?;
    let points = p.sweep(a.sweep)?;
    if a.topology == Topology::Veth {
        return Err(
            "topology veth: not built yet (next: veth pairs and namespaces; the in-memory \
             topology is `--topology memory`)"
                .into(),
        );
    }
    let bin = match &a.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let parg = profile_arg(&p, &origin);
    let mut machine = machine();
    eprintln!(
        "upf-bench run: profile {} ({}), sweep {:?}, {} point(s), load average {:?}",
        p.name,
        if a.quick { "quick" } else { "full" },
        a.sweep,
        points.len(),
        machine.load_before
    );
    let mut runs = Vec::new();
    for pt in points {
        let args = pt.memory_args(&parg);
        eprintln!("[{}] {}", pt.label, args.join(" "));
        let raw = measure_with(&bin, &args)?;
        runs.push(Measured::from_line(pt, args, raw)?);
    }
    machine.load_after = loadavg();
    let res = Results {
        schema: SCHEMA,
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command: command.to_vec(),
        machine,
        build: Build::this(),
        topology: a.topology,
        sweep: a.sweep,
        quick: a.quick,
        mixes: p
            .mixes
            .iter()
            .map(|m| MixInfo {
                name: m.name.clone(),
                about: m.about.clone(),
                facts: m.facts(),
            })
            .collect(),
        notes: p.memory_notes(),
        profile: p,
        profile_origin: origin,
        runs,
    };
    write_results(&res, out)?;
    Ok(res)
}

/// Writes results.json, table.md and the plots into `out`.
pub fn write_results(res: &Results, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let json = serde_json::to_string_pretty(res).map_err(|e| e.to_string())?;
    let f = out.join("results.json");
    std::fs::write(&f, json + "\n").map_err(|e| format!("{}: {e}", f.display()))?;
    report::render(res, out)?;
    Ok(())
}

pub fn read_results(path: &Path) -> Result<Results, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn stamp() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    s.to_string()
}

pub fn run(a: &RunArgs, command: &[String]) -> Result<Vec<Results>, String> {
    let mut names: Vec<String> = a.profile.clone();
    if a.all {
        names.extend(spec::shipped().map(String::from));
    }
    if names.is_empty() {
        return Err("give --profile NAME (or --all)".into());
    }
    let sweep = format!("{:?}", a.sweep).to_lowercase();
    let base = a.out.clone().unwrap_or_else(|| {
        let who = if names.len() == 1 {
            names[0].as_str()
        } else {
            "all"
        };
        let who = Path::new(who)
            .file_stem()
            .map_or("profile".into(), |s| s.to_string_lossy().into_owned());
        let q = if a.quick { "-quick" } else { "" };
        PathBuf::from("results").join(format!("{who}{q}-{sweep}-{}", stamp()))
    });
    let mut all = Vec::new();
    for n in &names {
        let out = if names.len() == 1 {
            base.clone()
        } else {
            let stem = Path::new(n)
                .file_stem()
                .map_or("profile".into(), |s| s.to_string_lossy().into_owned());
            base.join(stem)
        };
        let res = run_profile(a, n, &out, command)?;
        println!("{}", report::table(&res));
        println!(
            "results: {} (plots: {})",
            out.join("results.json").display(),
            report::plot_names(&res).join(", ")
        );
        all.push(res);
    }
    Ok(all)
}

impl RunArgs {
    /// `run --all --quick --out OUT`.
    pub fn parse_quick(out: PathBuf) -> RunArgs {
        RunArgs {
            profile: Vec::new(),
            all: true,
            quick: true,
            sweep: Sweep::Points,
            out: Some(out),
            seconds: None,
            sessions: None,
            sizes: Vec::new(),
            uplink_percent: Vec::new(),
            topology: Topology::Memory,
            bin: None,
        }
    }
}
