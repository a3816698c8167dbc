//! `upf-bench ab`: the same profile against two builds in one sitting. Every point is
//! measured by A's and B's `upf-bench memory` in turn, N rounds, the order swapped each round
//! (A B, B A, …) so drift in the machine's load hits both; medians per point and metric, and
//! B/A.

use crate::harness::{self, RunArgs};
use crate::spec::{self, Point};
use anyhow::bail;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct AbArgs {
    /// Build A's upf-bench binary (the baseline).
    #[arg(long)]
    pub a: PathBuf,
    /// Build B's upf-bench binary.
    #[arg(long)]
    pub b: PathBuf,
    /// Rounds (each measures every point with A and with B).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Metrics compared (keys of a `memory` size row).
pub const METRICS: [&str; 5] = [
    "mpps_per_core",
    "gbps_per_core",
    "ns_per_packet",
    "null_forward_mpps_per_core",
    "ratio_to_null",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    pub metric: String,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub median_a: f64,
    pub median_b: f64,
    /// median B / median A.
    pub ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbPoint {
    pub point: Point,
    pub args: Vec<String>,
    pub metrics: Vec<Compared>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbResults {
    pub schema: u32,
    pub a: PathBuf,
    pub b: PathBuf,
    pub rounds: usize,
    pub profile: String,
    pub machine: harness::Machine,
    pub points: Vec<AbPoint>,
}

/// Median (mean of the middle two for an even count); NaN for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Medians and B/A of one metric over the rounds.
pub fn compare(metric: &str, a: Vec<f64>, b: Vec<f64>) -> Compared {
    let (ma, mb) = (median(&a), median(&b));
    Compared {
        metric: metric.into(),
        ratio: if ma == 0.0 { f64::NAN } else { mb / ma },
        median_a: ma,
        median_b: mb,
        a,
        b,
    }
}

/// A metric from a `memory` JSON line (its first size row).
pub fn metric(line: &serde_json::Value, key: &str) -> f64 {
    line["sizes"][0][key].as_f64().unwrap_or(f64::NAN)
}

/// The comparison table (Markdown).
pub fn table(r: &AbResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "A = {}, B = {}; profile {}, {} rounds (order alternated), medians; load average {:.2} at the start\n",
        r.a.display(),
        r.b.display(),
        r.profile,
        r.rounds,
        r.machine.load_before[0]
    );
    s.push_str(
        "| point | metric | A | B | B/A | A runs | B runs |\n|---|---|---:|---:|---:|---|---|\n",
    );
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for p in &r.points {
        for m in &p.metrics {
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.2} | {:.3} | {} | {} |",
                p.point.label,
                m.metric,
                m.median_a,
                m.median_b,
                m.ratio,
                list(&m.a),
                list(&m.b)
            );
        }
    }
    s
}

pub fn run(a: &AbArgs) -> anyhow::Result<AbResults> {
    if a.rounds == 0 {
        bail!("--rounds must be positive");
    }
    let name = match a.run.profile.as_slice() {
        [one] => one.clone(),
        _ => bail!("ab: give exactly one --profile"),
    };
    let (file_profile, origin) = spec::load(&name)?;
    let p = harness::effective(&a.run, &file_profile)?;
    let points = p.sweep(a.run.sweep)?;
    // A shipped profile goes by name, so that builds from before profile files (which know
    // `--profile s0` only) can be compared too.
    let parg = if spec::shipped().any(|n| n == name) {
        name.clone()
    } else {
        harness::profile_arg(&p, &origin)
    };
    let machine = harness::machine();
    let mut lines: Vec<(Vec<serde_json::Value>, Vec<serde_json::Value>)> =
        vec![(Vec::new(), Vec::new()); points.len()];
    for round in 0..a.rounds {
        for (i, pt) in points.iter().enumerate() {
            let args = pt.memory_args(&parg);
            let order: [bool; 2] = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for is_b in order {
                let bin = if is_b { &a.b } else { &a.a };
                eprintln!(
                    "round {}/{} [{}] {}: {}",
                    round + 1,
                    a.rounds,
                    pt.label,
                    if is_b { "B" } else { "A" },
                    bin.display()
                );
                let line = harness::measure_with(bin, &args)?;
                if is_b {
                    lines[i].1.push(line);
                } else {
                    lines[i].0.push(line);
                }
            }
        }
    }
    let points = points
        .into_iter()
        .zip(lines)
        .map(|(pt, (la, lb))| AbPoint {
            args: pt.memory_args(&parg),
            point: pt,
            metrics: METRICS
                .iter()
                .map(|m| {
                    compare(
                        m,
                        la.iter().map(|l| metric(l, m)).collect(),
                        lb.iter().map(|l| metric(l, m)).collect(),
                    )
                })
                .collect(),
        })
        .collect();
    let mut machine = machine;
    machine.load_after = harness::loadavg();
    Ok(AbResults {
        schema: harness::SCHEMA,
        a: a.a.clone(),
        b: a.b.clone(),
        rounds: a.rounds,
        profile: name,
        machine,
        points,
    })
}
