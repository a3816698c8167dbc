#!/bin/bash
# profile.sh BINARY UPLINK_PERCENT [SESSIONS]: instructions a packet under Pipeline::process
# (callgrind), S0 at 64 B, and where they go by function (by_function.py).
set -e
bin=$1; up=$2; n=${3:-1000}
dir=$(mktemp -d)
valgrind --tool=callgrind --dump-instr=yes --toggle-collect='*Pipeline::process*' \
  --callgrind-out-file="$dir/cg.out" "$bin" memory --profile s0 --sessions "$n" --seconds 1 \
  --sizes 64 --pool 1024 --ue-sequence 4096 --uplink-percent "$up" > "$dir/run.json" 2>/dev/null
packets=$(tail -1 "$dir/run.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sizes"][0]["packets"])')
python3 "$(dirname "$0")/by_function.py" "$dir/cg.out" "$packets" "$bin"
rm -rf "$dir"
