//! Markdown tables and PNG plots from `results.json` (`upf-bench report DIR` re-renders
//! them). Plots use plotters' bitmap backend with an embedded font (Inconsolata, OFL, in
//! `fonts/`), so they need no system font library.

use crate::harness::{read_results, Results};
use crate::spec::Sweep;
use anyhow::{anyhow, bail, Context as _};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../fonts/Inconsolata.otf");
const FAMILY: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is ours and valid; a failure would only lose the labels.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

pub(crate) fn thousands(n: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = n.round().max(0.0) as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn short_commit(c: &str) -> String {
    let dirty = c.ends_with("-dirty");
    format!(
        "{}{}",
        c.get(..12).unwrap_or(c),
        if dirty { "-dirty" } else { "" }
    )
}

fn memory_rows(r: &Results, s: &mut String) {
    s.push_str("| point | sessions | workers | ACL rules | size (B) | UL % of packets | Mpps/core | Gbit/s/core | ns/packet | null forward Mpps | ratio | RSS/session | CPU share |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for x in &r.runs {
        let p = &x.point;
        let size = match &p.mix {
            Some(_) => format!("{:.0} (mix)", p.x),
            None => p.size.to_string(),
        };
        let ul = match &p.mix {
            Some(name) => r
                .mixes
                .iter()
                .find(|m| &m.name == name)
                .map_or("–".into(), |m| {
                    format!("{:.1}", m.facts.uplink_packet_percent)
                }),
            None => format!("{:.1}", p.uplink_packet_percent),
        };
        let rss = if x.memory_per_session_bytes > 0.0 {
            format!("{:.1} kB", x.memory_per_session_bytes / 1000.0)
        } else {
            "–".into()
        };
        // The worker thread's CPU time over the loop's wall time (below ~0.95 the point was
        // preempted and its rate is low by about that share); absent before it was measured.
        let share = x.raw["sizes"][0]["cpu_share"]
            .as_f64()
            .map_or("–".into(), |c| format!("{c:.2}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {} |",
            p.label,
            thousands(f64::from(p.sessions)),
            p.workers,
            thousands(p.acl_rules as f64),
            size,
            ul,
            x.mpps_per_core,
            x.gbps_per_core,
            x.ns_per_packet,
            x.null_forward_mpps_per_core,
            x.ratio_to_null,
            rss,
            share
        );
    }
}

fn veth_rows(r: &Results, s: &mut String) {
    s.push_str("| point | backend | workers | offered Mpps | delivered Mpps | loss | UPF CPU ns/packet | softirq ns/packet | generator ceiling Mpps | Linux forwarding Mpps | ratio to Linux | zero-loss Mpps | < 10 ppm Mpps | Linux zero-loss Mpps | zero-loss ratio |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for x in &r.runs {
        let v = &x.raw;
        let f = |k: &str| v[k].as_f64();
        let opt =
            |x: Option<f64>, prec: usize| x.map_or("–".to_string(), |y| format!("{y:.prec$}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            x.point.label,
            v["backend"].as_str().unwrap_or("?"),
            x.point.workers,
            opt(f("offered_mpps"), 2),
            opt(f("delivered_mpps"), 2),
            opt(f("loss").map(|l| l * 100.0), 1) + " %",
            opt(f("upf_cpu_ns_per_packet"), 0),
            opt(f("softirq_ns_per_packet"), 0),
            opt(f("generator_ceiling_mpps"), 2),
            opt(v["baseline"]["delivered_mpps"].as_f64(), 2),
            opt(f("ratio_to_baseline"), 2),
            opt(f("zero_loss_mpps"), 3)
                + if v["search"]["ceiling_limited"] == true {
                    " (ceiling)"
                } else {
                    ""
                },
            opt(f("below_10ppm_mpps"), 3),
            opt(f("baseline_zero_loss_mpps"), 3),
            opt(f("zero_loss_ratio_to_baseline"), 2),
        );
    }
    latency_rows(r, s);
}

/// The latency runs of every point: one row per load and class.
fn latency_rows(r: &Results, s: &mut String) {
    let with: Vec<_> = r
        .runs
        .iter()
        .filter(|x| {
            x.raw["latency"]["loads"]
                .as_array()
                .is_some_and(|l| !l.is_empty())
        })
        .collect();
    if with.is_empty() {
        return;
    }
    s.push_str("\nLatency (generator stamp to sink, µs) and RFC 3550 jitter per flow (session × class), per class:\n\n");
    s.push_str("| point | load | offered Mpps | loss | class | packets | p50 | p99 | p99.9 | max | jitter mean | jitter max |\n");
    s.push_str("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let opt = |x: Option<f64>, prec: usize| x.map_or("–".to_string(), |y| format!("{y:.prec$}"));
    for x in with {
        for l in x.raw["latency"]["loads"].as_array().into_iter().flatten() {
            for c in l["classes"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    s,
                    "| {} | {} % | {} | {} % | {} | {} | {} | {} | {} | {} | {} | {} |",
                    x.point.label,
                    l["load_percent"],
                    opt(l["offered_mpps"].as_f64(), 3),
                    opt(l["loss"].as_f64().map(|v| v * 100.0), 3),
                    c["class"].as_str().unwrap_or("?"),
                    thousands(c["packets"].as_f64().unwrap_or(0.0)),
                    opt(c["p50_us"].as_f64(), 1),
                    opt(c["p99_us"].as_f64(), 1),
                    opt(c["p999_us"].as_f64(), 1),
                    opt(c["max_us"].as_f64(), 1),
                    opt(c["jitter_mean_us"].as_f64(), 2),
                    opt(c["jitter_max_us"].as_f64(), 2),
                );
            }
        }
    }
}

/// File name of a point's latency plot.
fn latency_file(label: &str) -> String {
    let mut slug = String::new();
    for ch in label.chars() {
        if ch.is_ascii_alphanumeric() {
            slug.push(ch);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    format!("latency-{}.png", slug.trim_end_matches('-'))
}

/// Named series of (x, y) points.
type Series = Vec<(String, Vec<(f64, f64)>)>;

/// Per point with latency runs: (file, title, series of (load %, µs)).
fn latency_plots(r: &Results) -> Vec<(String, String, Series)> {
    let mut out = Vec::new();
    for x in &r.runs {
        let Some(loads) = x.raw["latency"]["loads"].as_array() else {
            continue;
        };
        if loads.is_empty() {
            continue;
        }
        let mut series = Vec::new();
        for (ci, class) in ["low", "high"].iter().enumerate() {
            for (key, name) in [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")] {
                let v: Vec<(f64, f64)> = loads
                    .iter()
                    .filter_map(|l| {
                        Some((l["load_percent"].as_f64()?, l["classes"][ci][key].as_f64()?))
                    })
                    .collect();
                series.push((format!("{class} {name}"), v));
            }
        }
        let base = x.raw["latency"]["base"].as_str().unwrap_or("?");
        out.push((
            latency_file(&x.point.label),
            format!("{}: latency vs load (% of {base})", x.point.label),
            series,
        ));
    }
    out
}

/// The run as a Markdown table (with a header naming the machine, build and load).
pub fn table(r: &Results) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(
        s,
        "### {} — {}{} (sweep: {:?}, topology: {:?})\n",
        r.profile.name,
        r.profile.title,
        if r.quick { ", quick variant" } else { "" },
        r.sweep,
        r.topology
    );
    let _ = writeln!(
        s,
        "Machine: {} × {}, {:.0} GiB, Linux {}; build {} ({}{}); load average {:.2} before, {:.2} after.\n",
        m.cpus,
        m.cpu_model,
        m.memory_bytes as f64 / f64::from(1u32 << 30),
        m.kernel,
        short_commit(&r.build.commit),
        r.build.rustc,
        if r.build.debug_assertions { ", debug build" } else { "" },
        m.load_before[0],
        m.load_after[0],
    );
    if r.topology == crate::harness::Topology::Veth {
        veth_rows(r, &mut s);
    } else {
        memory_rows(r, &mut s);
    }
    if !r.mixes.is_empty() {
        s.push_str("\n| mix | mean size | DL:UL packets | DL:UL bytes | what |\n|---|---:|---:|---:|---|\n");
        for m in &r.mixes {
            let _ = writeln!(
                s,
                "| {} | {:.0} B | {:.2} | {:.2} | {} |",
                m.name,
                m.facts.mean_size,
                m.facts.dl_to_ul_packets,
                m.facts.dl_to_ul_bytes,
                m.about
            );
        }
    }
    if !r.notes.is_empty() {
        s.push_str("\nNotes:\n");
        for n in &r.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    s
}

/// One plot: file name, title, x label, whether x is logarithmic, and the metric.
struct PlotSpec {
    file: String,
    title: String,
    x_label: &'static str,
    log_x: bool,
    gbps: bool,
}

fn plot_specs(sweep: Sweep) -> Vec<PlotSpec> {
    let (stem, title, x_label, log_x) = match sweep {
        Sweep::Points => ("size", "vs packet size", "inner packet size (B)", false),
        Sweep::Sessions => ("sessions", "vs sessions", "sessions", true),
        Sweep::Acl => ("acl", "vs ACL rules", "uplink ACL rules", false),
        Sweep::Workers => ("workers", "vs workers", "worker threads", false),
        Sweep::SdfFilters => (
            "sdf_filters",
            "vs SDF filters per PDR",
            "SDF filters per PDR",
            false,
        ),
    };
    vec![
        PlotSpec {
            file: format!("mpps-{stem}.png"),
            title: format!("Mpps per core {title}"),
            x_label,
            log_x,
            gbps: false,
        },
        PlotSpec {
            file: format!("gbps-{stem}.png"),
            title: format!("Gbit/s per core {title}"),
            x_label,
            log_x,
            gbps: true,
        },
    ]
}

/// Files `render` writes besides results.json.
pub fn plot_names(r: &Results) -> Vec<String> {
    std::iter::once("table.md".to_string())
        .chain(plot_specs(r.sweep).into_iter().map(|p| p.file))
        .chain(latency_plots(r).into_iter().map(|p| p.0))
        .collect()
}

/// Series of a plot: one per point series, plus null forward (Mpps plots only).
pub fn series(r: &Results, gbps: bool) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for x in &r.runs {
        let y = if gbps {
            x.gbps_per_core
        } else {
            x.mpps_per_core
        };
        match out.iter_mut().find(|(n, _)| n == &x.point.series) {
            Some((_, v)) => v.push((x.point.x, y)),
            None => out.push((x.point.series.clone(), vec![(x.point.x, y)])),
        }
    }
    if !gbps {
        let first = r.runs.first().map(|x| x.point.series.clone());
        let null: Vec<(f64, f64)> = r
            .runs
            .iter()
            .filter(|x| Some(&x.point.series) == first.as_ref())
            .map(|x| (x.point.x, x.null_forward_mpps_per_core))
            .collect();
        if !null.is_empty() {
            out.push(("null forward".into(), null));
        }
    }
    for (_, v) in &mut out {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Writes table.md and the plots of `r` into `dir`.
pub fn render(r: &Results, dir: &Path) -> anyhow::Result<()> {
    let t = dir.join("table.md");
    std::fs::write(&t, table(r)).with_context(|| t.display().to_string())?;
    for ps in plot_specs(r.sweep) {
        let title = format!(
            "{} {}: {}",
            r.profile.name,
            if r.quick { "(quick)" } else { "" },
            ps.title
        );
        let y_label = if ps.gbps {
            "Gbit/s per core"
        } else {
            "Mpps per core"
        };
        line_plot(
            &dir.join(&ps.file),
            &title,
            ps.x_label,
            y_label,
            &series(r, ps.gbps),
            ps.log_x,
        )?;
    }
    for (file, title, series) in latency_plots(r) {
        latency_plot(&dir.join(file), &title, &series)?;
    }
    Ok(())
}

/// Latency quantiles against load: linear x (load %), logarithmic y (µs), 900 × 560 PNG.
/// Low priority in solid lines, high priority dashed-looking (thin, hollow points).
pub fn latency_plot(
    path: &Path,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    register_font();
    let e = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", path.display());
    let ys = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.1));
    let (mut y0, mut y1) = (f64::INFINITY, 0.0f64);
    for y in ys.filter(|y| *y > 0.0) {
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !y0.is_finite() {
        (y0, y1) = (1.0, 10.0);
    }
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..100f64, ((y0 / 1.5)..(y1 * 1.5)).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("offered load (% of the base rate)")
        .y_desc("latency (µs)")
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, v)) in series.iter().enumerate() {
        let c = COLOURS[i % 3];
        let high = i >= 3;
        let w = if high { 1 } else { 2 };
        chart
            .draw_series(LineSeries::new(v.iter().copied(), c.stroke_width(w)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(w)));
        chart
            .draw_series(v.iter().map(|&p| {
                if high {
                    Circle::new(p, 4, c.stroke_width(1))
                } else {
                    Circle::new(p, 3, c.filled())
                }
            }))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .position(SeriesLabelPosition::MiddleRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(127, 127, 127),
];

/// A line plot with points and a legend, 900 × 560 PNG.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> anyhow::Result<()> {
    register_font();
    let e = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", path.display());
    let pts = series.iter().flat_map(|(_, v)| v.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if log_x {
        x0 = (x0 / 1.5).max(1e-3);
        x1 *= 1.5;
    } else {
        let pad = ((x1 - x0) * 0.05).max(0.5);
        x0 = (x0 - pad).max(if x0 >= 0.0 { 0.0 } else { x0 - pad });
        x1 += pad;
    }
    let y1 = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .label_style((FAMILY, 14))
                .draw()
                .map_err(|x| e(&x))?;
            for (i, (name, v)) in series.iter().enumerate() {
                let c = COLOURS[i % COLOURS.len()];
                chart
                    .draw_series(LineSeries::new(v.iter().copied(), c.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(v.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|x| e(&x))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font((FAMILY, 14))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(|x| e(&x))?;
        }};
    }
    let mut b = ChartBuilder::on(&root);
    b.caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64);
    if log_x {
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0f64..y1)
            .map_err(|x| e(&x))?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0f64..y1).map_err(|x| e(&x))?);
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// `results.json` files under `path` (the file itself, `path/results.json`, or one level of
/// subdirectories).
pub fn find_results(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let direct = path.join("results.json");
    if direct.is_file() {
        return Ok(vec![direct]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| path.display().to_string())?
        .filter_map(Result::ok)
        .map(|d| d.path().join("results.json"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    if v.is_empty() {
        bail!("{}: no results.json", path.display());
    }
    Ok(v)
}

/// `upf-bench report PATH`: re-renders table and plots next to each results.json.
pub fn report(path: &Path) -> anyhow::Result<()> {
    for f in find_results(path)? {
        if let Some(t) = crate::control::report_file(&f)? {
            println!("{t}");
            continue;
        }
        let r = read_results(&f)?;
        let dir = f.parent().unwrap_or(Path::new("."));
        render(&r, dir)?;
        println!("{}", table(&r));
        println!(
            "rendered into {}: {}",
            dir.display(),
            plot_names(&r).join(", ")
        );
    }
    Ok(())
}
