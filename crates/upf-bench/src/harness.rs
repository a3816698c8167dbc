//! `upf-bench run`: a profile's sweep, each point measured by a child `upf-bench memory`
//! (a fresh process per point, so RSS per session is the point's own), written to
//! `results.json` with the machine, kernel, commit and compiler, printed as a Markdown table
//! and drawn as PNG plots.
//!
//! Topologies: each point is a list of arguments for one topology subcommand of this binary:
//! `memory` (the pipeline in memory) or `veth` (the `upf` binary in network namespaces; each
//! profile point becomes one point per direction, the UL:DL split having no meaning for a
//! one-way generator).

use crate::report;
use crate::spec::{self, MixFacts, Origin, Point, Profile, Sweep};
use crate::veth;
use anyhow::{bail, Context as _};
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
    /// veth: the directions measured for each point (default: both).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub directions: Vec<veth::Direction>,
    /// veth: the UPF's backend.
    #[arg(long, value_enum, default_value = "af-xdp")]
    pub backend: veth::Backend,
    /// veth: offered packets/s (0: flat out).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// veth: the `upf` binary (default: next to the measuring binary).
    #[arg(long)]
    pub upf: Option<PathBuf>,
    /// veth: each point's zero-loss rate by binary search (UPF and Linux baseline), then
    /// latency per class at --latency-loads of it.
    #[arg(long)]
    pub search: bool,
    /// veth: latency per class at --latency-loads (% of the zero-loss rate with --search,
    /// else of --rate).
    #[arg(long)]
    pub latency: bool,
    /// veth: seconds of a search trial and of a latency run (default: veth's).
    #[arg(long)]
    pub trial_seconds: Option<f64>,
    /// veth: most trials of one search (default: veth's).
    #[arg(long)]
    pub max_trials: Option<u32>,
    /// veth: loads of the latency runs, % (default: veth's, 10,50,80,95).
    #[arg(long, value_delimiter = ',')]
    pub latency_loads: Vec<f64>,
    /// veth: nice value of the generator and the UPF (0: inherited).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub nice: i32,
    /// veth: the UPF's workers busy-poll (never sleep).
    #[arg(long)]
    pub busy_poll: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Pre-built batches through the real pipeline and workers, no I/O.
    Memory,
    /// veth pairs and network namespaces: the `upf` binary, an XDP generator, a counting sink.
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
    ) -> anyhow::Result<Self> {
        let row = raw["sizes"]
            .get(0)
            .context("the JSON line has no sizes[0]")?
            .clone();
        let f = |k: &str| {
            row[k]
                .as_f64()
                .with_context(|| format!("the JSON line has no sizes[0].{k}"))
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

impl Measured {
    /// From the JSON line of `upf-bench veth`. Mpps/core and ns/packet are the UPF's CPU cost
    /// (what one fully busy core would forward at it); "null forward" is the Linux forwarding
    /// baseline's delivered Mpps and the ratio delivered / baseline.
    pub fn from_veth_line(
        point: Point,
        args: Vec<String>,
        raw: serde_json::Value,
    ) -> anyhow::Result<Self> {
        let f = |k: &str| raw[k].as_f64();
        f("delivered_mpps").context("the JSON line has no delivered_mpps")?;
        let ns = f("upf_cpu_ns_per_packet").unwrap_or(0.0);
        let per_core = if ns > 0.0 { 1e3 / ns } else { 0.0 };
        Ok(Measured {
            mpps_per_core: per_core,
            gbps_per_core: per_core * point.size as f64 * 8.0 / 1e3,
            ns_per_packet: ns,
            null_forward_mpps_per_core: raw["baseline"]["delivered_mpps"].as_f64().unwrap_or(0.0),
            ratio_to_null: f("ratio_to_baseline").unwrap_or(0.0),
            memory_per_session_bytes: 0.0,
            point,
            args,
            raw,
        })
    }
}

/// Each profile point once per direction (the UL:DL split is dropped: the generator sends one
/// way), without repeats.
fn veth_points(a: &RunArgs, points: Vec<Point>) -> anyhow::Result<Vec<Point>> {
    let dirs = if a.directions.is_empty() {
        vec![veth::Direction::Uplink, veth::Direction::Downlink]
    } else {
        a.directions.clone()
    };
    let mut out: Vec<Point> = Vec::new();
    for p in points {
        if p.mix.is_some() {
            bail!(
                "topology veth: point {} is a packet mix; veth sends fixed sizes only",
                p.label
            );
        }
        for d in &dirs {
            let (name, ul) = match d {
                veth::Direction::Uplink => ("uplink", 100.0),
                veth::Direction::Downlink => ("downlink", 0.0),
            };
            let mut q = p.clone();
            q.uplink_packet_percent = ul;
            q.series = format!("{name}, {:?}", a.backend).to_lowercase();
            q.label = format!("{} B, {name}, {} sessions", q.size, q.sessions);
            if !out
                .iter()
                .any(|o| o.label == q.label && o.workers == q.workers && o.acl_rules == q.acl_rules)
            {
                out.push(q);
            }
        }
    }
    Ok(out)
}

fn veth_args(a: &RunArgs, p: &Point, parg: &str) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "veth".into(),
        "--profile".into(),
        parg.into(),
        "--sessions".into(),
        p.sessions.to_string(),
        "--size".into(),
        p.size.to_string(),
        "--workers".into(),
        p.workers.to_string(),
        "--seconds".into(),
        p.seconds.max(1.0).to_string(),
        "--direction".into(),
        if p.uplink_packet_percent > 50.0 {
            "uplink".into()
        } else {
            "downlink".into()
        },
        "--backend".into(),
        match a.backend {
            veth::Backend::AfPacket => "af-packet".into(),
            veth::Backend::AfXdp => "af-xdp".into(),
        },
        "--rate".into(),
        a.rate.to_string(),
    ];
    if let Some(u) = &a.upf {
        v.extend(["--upf".into(), u.display().to_string()]);
    }
    if a.search {
        v.push("--search".into());
    }
    if a.nice != 0 {
        v.push(format!("--nice={}", a.nice));
    }
    if a.busy_poll {
        v.push("--busy-poll".into());
    }
    if a.search || a.latency {
        v.push("--latency".into());
    }
    if let Some(t) = a.trial_seconds {
        v.extend(["--trial-seconds".into(), t.to_string()]);
    }
    if let Some(n) = a.max_trials {
        v.extend(["--max-trials".into(), n.to_string()]);
    }
    if !a.latency_loads.is_empty() {
        let l: Vec<String> = a.latency_loads.iter().map(ToString::to_string).collect();
        v.extend(["--latency-loads".into(), l.join(",")]);
    }
    v
}

fn veth_notes(p: &Profile) -> Vec<String> {
    let mut v = p.notes.clone();
    v.push(
        "veth: the real upf binary in network namespaces; sessions are default ones (UL + DL \
         PDR/FAR, a QER without MBR, a URR), not the profile's bearers, ACL or SDF filters; \
         one direction per point, fixed sizes, frames round-robin over the sessions"
            .into(),
    );
    v.push(
        "veth: Mpps/core and ns/packet are the UPF's CPU time (all its threads) per delivered \
         packet; 'null forward' is Linux IP forwarding of the same inner packets through the \
         same namespace (the baseline) and the ratio delivered / baseline; the raw JSON has \
         offered, delivered, loss and the generator's ceiling"
            .into(),
    );
    v
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
pub fn measure_with(bin: &Path, args: &[String]) -> anyhow::Result<serde_json::Value> {
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| bin.display().to_string())?;
    if !out.status.success() {
        bail!(
            "{} {} exited with {}",
            bin.display(),
            args.join(" "),
            out.status
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("{} printed no JSON line", bin.display()))?;
    serde_json::from_str(line).with_context(|| format!("{}: its JSON line", bin.display()))
}

/// The profile as this run uses it: quick variant and overrides applied.
pub fn effective(a: &RunArgs, p: &Profile) -> anyhow::Result<Profile> {
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
            bail!("--sizes: none of them is a size of profile {}", p.name);
        }
    }
    if !a.uplink_percent.is_empty() {
        p.traffic
            .uplink_percent
            .retain(|u| a.uplink_percent.iter().any(|x| (x - u).abs() < 1e-9));
        if p.traffic.uplink_percent.is_empty() && p.mixes.is_empty() {
            bail!(
                "--uplink-percent: none of them is a split of profile {}",
                p.name
            );
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
) -> anyhow::Result<Results> {
    let (file_profile, origin) = spec::load(name)?;
    let p = effective(a, &file_profile)?;
    let points = p.sweep(a.sweep)?;
    let points = match a.topology {
        Topology::Memory => points,
        Topology::Veth => veth_points(a, points)?,
    };
    let bin = match &a.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
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
        let args = match a.topology {
            Topology::Memory => pt.memory_args(&parg),
            Topology::Veth => veth_args(a, &pt, &parg),
        };
        eprintln!("[{}] {}", pt.label, args.join(" "));
        let raw = measure_with(&bin, &args)?;
        runs.push(match a.topology {
            Topology::Memory => Measured::from_line(pt, args, raw)?,
            Topology::Veth => Measured::from_veth_line(pt, args, raw)?,
        });
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
        notes: match a.topology {
            Topology::Memory => p.memory_notes(),
            Topology::Veth => veth_notes(&p),
        },
        profile: p,
        profile_origin: origin,
        runs,
    };
    write_results(&res, out)?;
    Ok(res)
}

/// Writes results.json, table.md and the plots into `out`.
pub fn write_results(res: &Results, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let json = serde_json::to_string_pretty(res)?;
    let f = out.join("results.json");
    std::fs::write(&f, json + "\n").with_context(|| f.display().to_string())?;
    report::render(res, out)?;
    Ok(())
}

pub fn read_results(path: &Path) -> anyhow::Result<Results> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

fn stamp() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    s.to_string()
}

pub fn run(a: &RunArgs, command: &[String]) -> anyhow::Result<Vec<Results>> {
    let mut names: Vec<String> = a.profile.clone();
    if a.all {
        names.extend(spec::shipped().map(String::from));
    }
    if names.is_empty() {
        bail!("give --profile NAME (or --all)");
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
            directions: Vec::new(),
            backend: veth::Backend::AfXdp,
            rate: 0,
            upf: None,
            search: false,
            latency: false,
            trial_seconds: None,
            max_trials: None,
            latency_loads: Vec::new(),
            nice: 0,
            busy_poll: false,
        }
    }
}
