#!/usr/bin/env bash
# priority-sitting.sh OUT_DIR — issue #28's sitting: seed 001's four test profiles, each in
# the four priority modes, on the veth rig (`upf-bench veth`, af-xdp, 1 busy-polling worker).
#
# Per profile, FIFO's base rate is measured first; every mode is then run at 10, 50, 80, 90
# and 95 % of it, so that the modes are compared at the same offered loads. The base
# (BASE=capacity, the default) is what FIFO delivers when offered OVERLOAD pps, 3 Mpps by
# default: on the project's VMs the zero-loss rate is set by sporadic RX-ring losses while
# the worker is about 30 % busy (docs/results/2026-11-28-priority-first), so "90 % of it"
# would not load the worker. BASE=zero-loss searches FIFO's zero-loss rate (`--search`)
# instead, as issue #28 words it. The per-point JSON lines go to OUT_DIR/points.jsonl, each
# bench run's whole output to OUT_DIR/<profile>-<mode>.log, and scripts/plot-priority.py
# draws OUT_DIR/*.svg and writes OUT_DIR/summary.md. As root; needs a release build of upf
# and upf-bench.
#
# The profiles (seed 001, Table 4): the high-priority packet size and its share of the
# packets; profiles 3 and 4 are mostly downlink (1:9), so they run downlink. Both classes use
# the profile's size (the generator has one frame size).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: priority-sitting.sh OUT_DIR}
bench=${BENCH:-target/release/upf-bench}
sessions=${SESSIONS:-1000}
seconds=${LATENCY_SECONDS:-3}
max_rbs=${MAX_RBS:-8}
loads=${LOADS:-10,50,80,90,95}
base_kind=${BASE:-capacity}
overload=${OVERLOAD:-3000000}
profiles=${PROFILES:-"p1:175:0.09:uplink p2:550:0.10:uplink p3:1400:0.19:downlink p4:780:0.034:downlink"}
modes=${MODES:-"fifo strict weighted load-aware"}
mkdir -p "$out"
: > "$out/points.jsonl"
echo "sitting: $(git rev-parse --short HEAD), $(nproc) CPUs, load:$(uptime | sed 's/.*load average://')" | tee "$out/sitting.txt"
for p in $profiles; do
    IFS=: read -r name size share dir <<<"$p"
    common=(veth --engine user --sessions "$sessions" --size "$size" --direction "$dir"
        --high-share "$share" --busy-poll --no-baseline --profile "s1-$name" --max-rbs "$max_rbs")
    if [ "$base_kind" = zero-loss ]; then
        "$bench" "${common[@]}" --seconds 2 --search --trial-seconds 2 --max-trials 10 \
            --priority fifo > "$out/$name-base.log" 2>&1
        key=zero_loss_mpps
    else
        "$bench" "${common[@]}" --seconds 3 --rate "$overload" --priority fifo \
            > "$out/$name-base.log" 2>&1
        key=delivered_mpps
    fi
    base=$(tail -n 1 "$out/$name-base.log" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()).get(sys.argv[1])
print(int(r * 1e6) if r else 0)' "$key")
    echo "$name: $size B, $share high, $dir: FIFO $base_kind $base pps" | tee -a "$out/sitting.txt"
    if [ "$base" -le 0 ]; then
        echo "$name: no base rate; skipped" | tee -a "$out/sitting.txt"
        continue
    fi
    for mode in $modes; do
        "$bench" "${common[@]}" --seconds 1 --rate "$base" --latency --latency-loads "$loads" \
            --latency-seconds "$seconds" --priority "$mode" > "$out/$name-$mode.log" 2>&1
        python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if isinstance(d, dict) and "load_percent" in d:
        d["base_pps"] = int(sys.argv[2])
        print(json.dumps(d))' "$out/$name-$mode.log" "$base" >> "$out/points.jsonl"
    done
done
echo "sitting: load after:$(uptime | sed 's/.*load average://')" | tee -a "$out/sitting.txt"
python3 scripts/plot-priority.py "$out"
