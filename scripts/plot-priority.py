#!/usr/bin/env python3
"""plot-priority.py DIR — draws DIR/points.jsonl (scripts/priority-sitting.sh) as one SVG per
profile (p99 latency of each class against the load, one colour per mode, high solid, low
dashed, log scale) and writes DIR/summary.md: per profile and mode at 90 % load, the p99 and
jitter ratios of high to low priority, the low-priority throughput against FIFO's at the same
offered load, and how far the high-priority p99 moves from 10 % to 95 % load (issue #28's
targets). Standard library only."""
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

COLOURS = {"fifo": "#777777", "strict": "#d62728", "weighted": "#1f77b4", "load-aware": "#2ca02c"}


def load(path):
    points = defaultdict(list)
    for line in open(path):
        d = json.loads(line)
        points[(d["profile"], d["mode"])].append(d)
    for v in points.values():
        v.sort(key=lambda d: d["load_percent"])
    return points


def svg(profile, series, out):
    w, h, left, right, top, bottom = 640, 400, 60, 130, 30, 40
    ys = [y for s in series.values() for y in s["ys"] if y and y > 0]
    if not ys:
        return
    lo, hi = math.log10(min(ys)), math.log10(max(ys))
    if hi - lo < 1:
        hi = lo + 1
    x = lambda l: left + (l / 100.0) * (w - left - right)
    y = lambda v: top + (hi - math.log10(v)) / (hi - lo) * (h - top - bottom)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="13">{profile}: p99 latency (µs, log) by load (% of FIFO\'s zero-loss rate)</text>',
             f'<line x1="{left}" y1="{h-bottom}" x2="{w-right}" y2="{h-bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h-bottom}" stroke="black"/>']
    for l in (0, 25, 50, 75, 100):
        parts.append(f'<text x="{x(l)}" y="{h-bottom+15}" text-anchor="middle">{l}</text>')
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        if lo <= e <= hi:
            parts.append(f'<text x="{left-5}" y="{y(10**e)+4}" text-anchor="end">{10**e:g}</text>')
            parts.append(f'<line x1="{left}" y1="{y(10**e)}" x2="{w-right}" y2="{y(10**e)}" stroke="#ddd"/>')
    row = 0
    for (mode, cls), s in sorted(series.items()):
        pts = [(x(l), y(v)) for l, v in zip(s["xs"], s["ys"]) if v and v > 0]
        if not pts:
            continue
        dash = "" if cls == "high" else ' stroke-dasharray="5,3"'
        colour = COLOURS.get(mode, "black")
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        ly = top + 14 * row
        parts.append(f'<line x1="{w-right+8}" y1="{ly}" x2="{w-right+30}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{w-right+34}" y="{ly+4}">{mode} {cls}</text>')
        row += 1
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, d=2):
    return "–" if v is None else f"{v:.{d}f}"


def main():
    out = Path(sys.argv[1])
    points = load(out / "points.jsonl")
    profiles = sorted({p for p, _ in points})
    lines = ["| profile | mode | p99 high / low at 90 %, µs | p99 ratio | jitter ratio | low Mpps / FIFO's | high p99 95 % / 10 % |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for profile in profiles:
        series = {}
        fifo90 = next((d for d in points.get((profile, "fifo"), []) if d["load_percent"] == 90), None)
        for (p, mode), ds in sorted(points.items()):
            if p != profile:
                continue
            for cls in ("high", "low"):
                series[(mode, cls)] = {"xs": [d["load_percent"] for d in ds],
                                       "ys": [d.get(f"{cls}_p99_us") for d in ds]}
            at = {d["load_percent"]: d for d in ds}
            d90 = at.get(90)
            if d90 is None:
                continue
            hi, lo = d90.get("high_p99_us"), d90.get("low_p99_us")
            jr = ratio(d90.get("high_jitter_us"), d90.get("low_jitter_us"))
            tr = ratio(d90.get("low_mpps"), fifo90 and fifo90.get("low_mpps"))
            drift = ratio(at.get(95, {}).get("high_p99_us"), at.get(10, {}).get("high_p99_us"))
            lines.append(f"| {profile} | {mode} | {fmt(hi, 1)} / {fmt(lo, 1)} | {fmt(ratio(hi, lo))} | "
                         f"{fmt(jr)} | {fmt(tr)} | {fmt(drift)} |")
        svg(profile, series, out / f"{profile}.svg")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
