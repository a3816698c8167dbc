//! Traffic profiles as data: the schema of `profiles/*.toml` (documented in
//! `profiles/README.md`), loading by name or path, the `[quick]` overrides, validation that
//! names the offending key, and the expansion of a profile into the points of a sweep.

use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The shipped profiles, compiled in so that a binary run from anywhere (an A/B build, CI)
/// still knows them; a file of the same name in the profiles directory takes precedence.
const BUILT_IN: &[(&str, &str)] = &[
    ("s0", include_str!("../../../profiles/s0.toml")),
    ("s1", include_str!("../../../profiles/s1.toml")),
    ("s3", include_str!("../../../profiles/s3.toml")),
    ("s4", include_str!("../../../profiles/s4.toml")),
];

/// Names of the shipped profiles, in order.
pub fn shipped() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|(n, _)| *n)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name (`s0`); what `--profile` looks up.
    pub name: String,
    /// One line: who published it and when.
    pub title: String,
    /// Where its numbers come from (BRIEF.md section, seed and table).
    pub source: String,
    pub sessions: Sessions,
    /// QoS flows of every session, highest precedence first; the last one is the default
    /// bearer and must catch everything (no SDF filters, no DSCP).
    pub bearers: Vec<Bearer>,
    pub traffic: Traffic,
    /// Packet mixes: each one a point measured on its own (instead of sizes × splits).
    #[serde(default)]
    pub mixes: Vec<Mix>,
    /// One subscriber far above the rest (seed 004), beside the background sessions.
    #[serde(default)]
    pub peak_ue: Option<PeakUe>,
    #[serde(default)]
    pub run: RunSettings,
    #[serde(default)]
    pub sweeps: Sweeps,
    /// Overrides for the quick variant (CI smoke runs).
    #[serde(default)]
    pub quick: Quick,
    /// What the source states that no topology here reproduces (printed with the results).
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sessions {
    /// PDU sessions (one UE each).
    pub count: u32,
    /// gNBs the downlink is tunnelled to (UE i's gNB is i mod gnbs).
    #[serde(default = "default_gnbs")]
    pub gnbs: u32,
    /// Session AMBR: a QER on every PDR policing the session's bit rate (MBR token bucket on
    /// every packet). Must be above what the in-memory loop offers per UE: a drop fails the run.
    pub ambr_kbps: Option<u64>,
    /// A volume URR on every PDR (charging/usage metering on every packet).
    #[serde(default = "yes")]
    pub urr: bool,
    /// Uplink ACL rules checked on every uplink packet (none matches the profile's traffic).
    #[serde(default)]
    pub acl_rules: usize,
}

fn default_gnbs() -> u32 {
    160
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bearer {
    pub name: String,
    /// QoS Flow Identifier: the uplink PSC carries it and the uplink PDR matches it (all
    /// bearers but the default); the QER marks the downlink PSC with it.
    pub qfi: u8,
    /// Flows (distinct 5-tuples) per session on this bearer.
    #[serde(default = "one")]
    pub flows: u16,
    /// Whether the bearer's PDRs list its flows as SDF filters (5-tuple match).
    #[serde(default)]
    pub sdf_filters: bool,
    /// Downlink packets carry this DSCP and the downlink PDR matches it (ToS SDF filter).
    pub dscp: Option<u8>,
    /// GBR of the bearer's QER (accounted, not enforced).
    pub gbr_kbps: Option<u64>,
    /// MBR of the bearer's QER (policed on every packet).
    pub mbr_kbps: Option<u64>,
}

fn one() -> u16 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    /// Inner (N6) IP packet sizes, octets; each one a point, with every split.
    #[serde(default)]
    pub sizes: Vec<usize>,
    /// Uplink share, percent; each one a point (with every size).
    #[serde(default)]
    pub uplink_percent: Vec<f64>,
    /// What `uplink_percent` is a share of: "throughput" (bits) or "packets". With one
    /// packet size per point they are the same share.
    #[serde(default = "throughput")]
    pub split_by: SplitBy,
}

fn throughput() -> SplitBy {
    SplitBy::Throughput
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitBy {
    Throughput,
    Packets,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    pub name: String,
    /// What it reproduces (table, profile number).
    #[serde(default)]
    pub about: String,
    /// Kinds of packet with their relative packet counts.
    pub packets: Vec<MixEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    pub dir: Dir,
    /// Inner (N6) IP packet size, octets.
    pub size: usize,
    /// Relative number of packets (any unit: the table's packet counts, per mille…).
    pub weight: f64,
    /// Bearer name; absent: flows drawn over all bearers.
    pub bearer: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Ul,
    Dl,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakUe {
    /// Flows of the peak subscriber's one bearer.
    pub flows: u16,
    /// Share of all packets that are the peak subscriber's, percent.
    pub packet_percent: f64,
    /// Its session AMBR / MBR.
    pub mbr_kbps: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Seconds measured per point and loop (null forward, then the pipeline).
    pub seconds: f64,
    pub workers: usize,
    pub batch: usize,
    /// Packet buffers per worker (a NIC ring's worth).
    pub pool: usize,
    /// Length of each worker's pre-drawn UE sequence.
    pub ue_sequence: usize,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            seconds: 2.0,
            workers: 1,
            batch: 256,
            pool: 4096,
            ue_sequence: 1 << 20,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweeps {
    #[serde(default)]
    pub sessions: Vec<u32>,
    #[serde(default)]
    pub acl_rules: Vec<usize>,
    #[serde(default)]
    pub workers: Vec<usize>,
    /// SDF filters per PDR of the first bearer that has them.
    #[serde(default)]
    pub sdf_filters: Vec<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quick {
    pub sessions: Option<u32>,
    pub seconds: Option<f64>,
    pub sizes: Option<Vec<usize>>,
    pub uplink_percent: Option<Vec<f64>>,
    /// Names of the mixes to keep.
    pub mixes: Option<Vec<String>>,
    pub pool: Option<usize>,
    pub ue_sequence: Option<usize>,
    pub acl_rules: Option<usize>,
    /// Sweeps of the quick variant; absent: the first two values of each full sweep.
    pub sweeps: Option<Sweeps>,
}

/// Where a profile came from: a file (its path) or the copy compiled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    File(PathBuf),
    BuiltIn,
}

/// Directories searched for `NAME.toml`: `$UPF_BENCH_PROFILES`, `./profiles`, and the
/// repository's `profiles/` as of the build.
fn search_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(d) = std::env::var_os("UPF_BENCH_PROFILES") {
        v.push(PathBuf::from(d));
    }
    v.push(PathBuf::from("profiles"));
    v.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles"));
    v
}

/// Loads a profile by name (`s0`: `profiles/s0.toml`, else the built-in copy) or by path.
pub fn load(name_or_path: &str) -> anyhow::Result<(Profile, Origin)> {
    let p = Path::new(name_or_path);
    if name_or_path.ends_with(".toml") || p.components().count() > 1 {
        let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
        let prof = parse(&text).with_context(|| p.display().to_string())?;
        return Ok((prof, Origin::File(p.to_path_buf())));
    }
    for d in search_dirs() {
        let f = d.join(format!("{name_or_path}.toml"));
        if let Ok(text) = std::fs::read_to_string(&f) {
            let prof = parse(&text).with_context(|| f.display().to_string())?;
            let f = std::fs::canonicalize(&f).unwrap_or(f);
            return Ok((prof, Origin::File(f)));
        }
    }
    match BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
        Some((_, text)) => Ok((parse(text)?, Origin::BuiltIn)),
        None => Err(anyhow!(
            "unknown profile {name_or_path:?} (shipped: {}; or give a path to a .toml file)",
            shipped().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Parses and validates a profile; every error names the key.
pub fn parse(text: &str) -> anyhow::Result<Profile> {
    let p: Profile =
        toml::from_str(text).map_err(|e| anyhow!(e.to_string().trim_end().to_string()))?;
    p.validate()?;
    Ok(p)
}

impl Profile {
    pub fn validate(&self) -> anyhow::Result<()> {
        let err = |key: &str, what: &str| Err(anyhow!("key `{key}`: {what}"));
        if self.sessions.count == 0 {
            return err("sessions.count", "must be positive");
        }
        if self.sessions.gnbs == 0 || self.sessions.gnbs > 250 {
            return err("sessions.gnbs", "must be 1..=250");
        }
        let Some(last) = self.bearers.last() else {
            return err("bearers", "at least one bearer (the default one) is needed");
        };
        if last.sdf_filters || last.dscp.is_some() {
            return err(
                "bearers",
                "the last bearer is the default one: no sdf_filters, no dscp",
            );
        }
        for (i, b) in self.bearers.iter().enumerate() {
            if b.qfi == 0 || b.qfi > 63 {
                return err(&format!("bearers[{i}].qfi"), "must be 1..=63");
            }
            if b.flows == 0 || b.flows > 200 {
                return err(&format!("bearers[{i}].flows"), "must be 1..=200");
            }
            if b.dscp.is_some_and(|d| d > 63) {
                return err(&format!("bearers[{i}].dscp"), "must be 0..=63");
            }
            if i + 1 < self.bearers.len() && !b.sdf_filters && b.dscp.is_none() {
                return err(
                    &format!("bearers[{i}]"),
                    "a bearer other than the default needs sdf_filters or dscp (else no downlink packet can reach it)",
                );
            }
        }
        if self.mixes.is_empty() {
            if self.traffic.sizes.is_empty() {
                return err("traffic.sizes", "give sizes (or [[mixes]])");
            }
            if self.traffic.uplink_percent.is_empty() {
                return err("traffic.uplink_percent", "give at least one split");
            }
        }
        if let Some(s) = self
            .traffic
            .sizes
            .iter()
            .find(|s| !(28..=1500).contains(*s))
        {
            return err("traffic.sizes", &format!("{s} is outside 28..=1500"));
        }
        if let Some(u) = self
            .traffic
            .uplink_percent
            .iter()
            .find(|u| !(0.0..=100.0).contains(*u))
        {
            return err("traffic.uplink_percent", &format!("{u} is outside 0..=100"));
        }
        for (m, mix) in self.mixes.iter().enumerate() {
            if mix.packets.is_empty() {
                return err(&format!("mixes[{m}].packets"), "empty");
            }
            for (k, e) in mix.packets.iter().enumerate() {
                let key = format!("mixes[{m}].packets[{k}]");
                if !(28..=1500).contains(&e.size) {
                    return err(&format!("{key}.size"), "must be 28..=1500");
                }
                if !(e.weight.is_finite() && e.weight >= 0.0) {
                    return err(&format!("{key}.weight"), "must be ≥ 0");
                }
                if let Some(b) = &e.bearer {
                    if !self.bearers.iter().any(|x| &x.name == b) {
                        return err(&format!("{key}.bearer"), &format!("no bearer named {b:?}"));
                    }
                }
            }
            if mix.packets.iter().all(|e| e.weight == 0.0) {
                return err(&format!("mixes[{m}].packets"), "all weights are zero");
            }
        }
        if let Some(p) = &self.peak_ue {
            if p.flows == 0 || p.flows > 200 {
                return err("peak_ue.flows", "must be 1..=200");
            }
            if !(0.0..100.0).contains(&p.packet_percent) {
                return err("peak_ue.packet_percent", "must be 0..100");
            }
        }
        let r = &self.run;
        if r.seconds <= 0.0 || r.workers == 0 || r.batch == 0 || r.pool == 0 {
            return err("run", "seconds, workers, batch and pool must be positive");
        }
        if let Some(names) = &self.quick.mixes {
            if let Some(n) = names
                .iter()
                .find(|n| !self.mixes.iter().any(|m| &m.name == *n))
            {
                return err("quick.mixes", &format!("no mix named {n:?}"));
            }
        }
        Ok(())
    }

    /// The quick variant: `[quick]` applied.
    pub fn quick(&self) -> Profile {
        let mut p = self.clone();
        let q = &self.quick;
        if let Some(v) = q.sessions {
            p.sessions.count = v;
        }
        if let Some(v) = q.seconds {
            p.run.seconds = v;
        }
        if let Some(v) = &q.sizes {
            p.traffic.sizes.clone_from(v);
        }
        if let Some(v) = &q.uplink_percent {
            p.traffic.uplink_percent.clone_from(v);
        }
        if let Some(names) = &q.mixes {
            p.mixes.retain(|m| names.contains(&m.name));
        }
        if let Some(v) = q.pool {
            p.run.pool = v;
        }
        if let Some(v) = q.ue_sequence {
            p.run.ue_sequence = v;
        }
        if let Some(v) = q.acl_rules {
            p.sessions.acl_rules = v;
        }
        p.sweeps = match &q.sweeps {
            Some(s) => s.clone(),
            None => {
                let two = |v: &[u32]| v.iter().take(2).copied().collect();
                Sweeps {
                    sessions: two(&self.sweeps.sessions),
                    acl_rules: self.sweeps.acl_rules.iter().take(2).copied().collect(),
                    workers: self.sweeps.workers.iter().take(2).copied().collect(),
                    sdf_filters: self.sweeps.sdf_filters.iter().take(2).copied().collect(),
                }
            }
        };
        p
    }
}

/// Mean size and direction ratios of a mix, as the seeds state them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MixFacts {
    pub mean_size: f64,
    pub uplink_packet_percent: f64,
    pub dl_to_ul_packets: f64,
    pub dl_to_ul_bytes: f64,
}

impl Mix {
    pub fn facts(&self) -> MixFacts {
        let (mut n, mut bytes, mut ul_n, mut ul_b) = (0.0, 0.0, 0.0, 0.0);
        for e in &self.packets {
            n += e.weight;
            bytes += e.weight * e.size as f64;
            if e.dir == Dir::Ul {
                ul_n += e.weight;
                ul_b += e.weight * e.size as f64;
            }
        }
        MixFacts {
            mean_size: bytes / n,
            uplink_packet_percent: 100.0 * ul_n / n,
            dl_to_ul_packets: (n - ul_n) / ul_n,
            dl_to_ul_bytes: (bytes - ul_b) / ul_b,
        }
    }
}

/// Which variable a run sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Sweep {
    /// The profile's own points: sizes × splits, or its mixes.
    Points,
    /// Sessions (at the first point).
    Sessions,
    /// Uplink ACL rules (at the first point).
    Acl,
    /// Worker threads (at the first point).
    Workers,
    /// SDF filters per PDR of the first bearer that has them (at the first point).
    SdfFilters,
}

/// One measurement: everything the topology needs, as plain values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Human label: "64 B, UL 42.5 %", "profile1", "100000 sessions".
    pub label: String,
    /// The swept variable's value (size, sessions, ACL rules, workers, filters).
    pub x: f64,
    /// Series the point belongs to in a plot (the split, "mixes", the profile).
    pub series: String,
    pub sessions: u32,
    pub workers: usize,
    pub acl_rules: usize,
    /// Fixed size (0 for a mix).
    pub size: usize,
    /// Uplink share of the packets, percent (fixed-size points).
    pub uplink_packet_percent: f64,
    pub mix: Option<String>,
    /// SDF filters per PDR of the first bearer with filters, when swept.
    pub sdf_filters: Option<u16>,
    pub seconds: f64,
    pub batch: usize,
    pub pool: usize,
    pub ue_sequence: usize,
}

impl Point {
    /// The arguments of `upf-bench memory` that measure this point.
    pub fn memory_args(&self, profile_arg: &str) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "memory".into(),
            "--profile".into(),
            profile_arg.into(),
            "--sessions".into(),
            self.sessions.to_string(),
            "--workers".into(),
            self.workers.to_string(),
            "--seconds".into(),
            self.seconds.to_string(),
            "--batch".into(),
            self.batch.to_string(),
            "--pool".into(),
            self.pool.to_string(),
            "--acl-rules".into(),
            self.acl_rules.to_string(),
            "--ue-sequence".into(),
            self.ue_sequence.to_string(),
        ];
        match &self.mix {
            Some(m) => v.extend(["--mix".into(), m.clone()]),
            None => v.extend([
                "--sizes".into(),
                self.size.to_string(),
                "--uplink-percent".into(),
                self.uplink_packet_percent.to_string(),
            ]),
        }
        if let Some(f) = self.sdf_filters {
            v.extend(["--sdf-filters".into(), f.to_string()]);
        }
        v
    }
}

impl Profile {
    /// Uplink share of packets for an uplink share of throughput `pct` when uplink packets
    /// are `ul_size` and downlink ones `dl_size` octets.
    pub fn packet_share(&self, pct: f64, ul_size: usize, dl_size: usize) -> f64 {
        match self.traffic.split_by {
            SplitBy::Packets => pct,
            SplitBy::Throughput => {
                let (u, d) = (pct / ul_size as f64, (100.0 - pct) / dl_size as f64);
                if u + d == 0.0 {
                    0.0
                } else {
                    100.0 * u / (u + d)
                }
            }
        }
    }

    fn base_point(&self) -> Point {
        Point {
            label: String::new(),
            x: 0.0,
            series: self.name.clone(),
            sessions: self.sessions.count,
            workers: self.run.workers,
            acl_rules: self.sessions.acl_rules,
            size: 0,
            uplink_packet_percent: 0.0,
            mix: None,
            sdf_filters: None,
            seconds: self.run.seconds,
            batch: self.run.batch,
            pool: self.run.pool,
            ue_sequence: self.run.ue_sequence,
        }
    }

    /// The profile's own points: one per mix, else sizes × splits (split-major).
    pub fn points(&self) -> Vec<Point> {
        let base = self.base_point();
        if !self.mixes.is_empty() {
            return self
                .mixes
                .iter()
                .map(|m| Point {
                    label: m.name.clone(),
                    x: m.facts().mean_size,
                    series: "mixes".into(),
                    mix: Some(m.name.clone()),
                    ..base.clone()
                })
                .collect();
        }
        let mut v = Vec::new();
        for &u in &self.traffic.uplink_percent {
            for &s in &self.traffic.sizes {
                let ul = self.packet_share(u, s, s);
                v.push(Point {
                    label: format!("{s} B, UL:DL {u}:{}", 100.0 - u),
                    x: s as f64,
                    series: format!("UL:DL {u}:{}", 100.0 - u),
                    size: s,
                    uplink_packet_percent: ul,
                    ..base.clone()
                });
            }
        }
        v
    }

    /// The points of a sweep (variables other than the profile's points are swept at its
    /// first point).
    pub fn sweep(&self, sweep: Sweep) -> anyhow::Result<Vec<Point>> {
        let first = self
            .points()
            .into_iter()
            .next()
            .context("the profile has no points")?;
        let s = &self.sweeps;
        let none = |key: &str| anyhow!("the profile has no `sweeps.{key}` values");
        let v: Vec<Point> = match sweep {
            Sweep::Points => return Ok(self.points()),
            Sweep::Sessions => {
                if s.sessions.is_empty() {
                    return Err(none("sessions"));
                }
                s.sessions
                    .iter()
                    .map(|&n| Point {
                        label: format!("{n} sessions"),
                        x: f64::from(n),
                        sessions: n,
                        ..first.clone()
                    })
                    .collect()
            }
            Sweep::Acl => {
                if s.acl_rules.is_empty() {
                    return Err(none("acl_rules"));
                }
                s.acl_rules
                    .iter()
                    .map(|&n| Point {
                        label: format!("{n} ACL rules"),
                        x: n as f64,
                        acl_rules: n,
                        ..first.clone()
                    })
                    .collect()
            }
            Sweep::Workers => {
                if s.workers.is_empty() {
                    return Err(none("workers"));
                }
                s.workers
                    .iter()
                    .map(|&n| Point {
                        label: format!("{n} workers"),
                        x: n as f64,
                        workers: n,
                        ..first.clone()
                    })
                    .collect()
            }
            Sweep::SdfFilters => {
                if s.sdf_filters.is_empty() {
                    return Err(none("sdf_filters"));
                }
                if !self.bearers.iter().any(|b| b.sdf_filters) {
                    bail!("no bearer of the profile has sdf_filters");
                }
                s.sdf_filters
                    .iter()
                    .map(|&n| Point {
                        label: format!("{n} SDF filters/PDR"),
                        x: f64::from(n),
                        sdf_filters: Some(n),
                        ..first.clone()
                    })
                    .collect()
            }
        };
        Ok(v.into_iter()
            .map(|p| Point {
                series: format!("{} ({})", self.name, first.label),
                ..p
            })
            .collect())
    }

    /// What the in-memory topology does not reproduce of this profile.
    pub fn memory_notes(&self) -> Vec<String> {
        let mut v = self.notes.clone();
        v.push(
            "in memory: no I/O, no NIC steering or queues; rates are the pipeline's per-core \
             ceiling at 100 % CPU, not a zero-loss rate at a given offered load"
                .into(),
        );
        v.push(
            "in memory: MBR/AMBR QERs police every packet, but their rates must stay above what \
             the loop offers per UE (any drop fails the run), so no packet is policed away"
                .into(),
        );
        if self.bearers.iter().any(|b| b.dscp.is_some())
            || self
                .mixes
                .iter()
                .any(|m| m.packets.iter().any(|e| e.bearer.is_some()))
        {
            v.push(
                "in memory: priority classes are marked (QFI uplink, DSCP downlink) and matched \
                 by their PDRs, but there are no priority queues (MAX_RBS) and no per-packet \
                 latency: latency and jitter per class need the veth topology"
                    .into(),
            );
        }
        if let Some(p) = &self.peak_ue {
            v.push(format!(
                "in memory: the peak UE's session is installed on every worker and draws {} % of \
                 each worker's packets (flow-level spreading emulated); its {} flows differ by \
                 port only, which changes nothing without SDF filters",
                p.packet_percent, p.flows
            ));
        }
        if self.traffic.split_by == SplitBy::Throughput && self.mixes.is_empty() {
            v.push(
                "UL:DL splits are by throughput; with one packet size per point the packet share \
                 is the same"
                    .into(),
            );
        }
        v
    }
}
