#!/bin/bash
# run.sh BINARY OUTDIR: the floor model at 1k sessions, 64 B, 42.5 % uplink, whole and with
# each part of the work left out (--floor-without), 5 one-second points each.
set -e
bin=$1; out=${2:-.}
for w in none classify acl qer urr policy; do
  flag=(); [ "$w" != none ] && flag=(--floor-without "$w")
  "$bin" memory --profile s0 --sessions 1000 --sizes 64,64,64,64,64 --seconds 1 --floor \
    "${flag[@]}" > "$out/$w.json" 2> "$out/$w.txt"
done
