#!/bin/bash
# run.sh BINARY OUTDIR: S0 at 64 B through null forward, the pipeline and the floor model
# (crates/upf-bench/src/floor.rs), in the same run, 5 one-second points each, at 1k, 100k
# and 1M sessions, uplink 42.5 % (the mix) and each direction alone at 1k.
set -e
bin=$1; out=${2:-.}
for n in 1000 100000 1000000; do
  "$bin" memory --profile s0 --sessions "$n" --sizes 64,64,64,64,64 --seconds 1 --floor \
    > "$out/s0-$n.json" 2> "$out/s0-$n.txt"
done
for up in 100 0; do
  "$bin" memory --profile s0 --sessions 1000 --sizes 64,64,64,64,64 --seconds 1 --floor \
    --uplink-percent "$up" > "$out/s0-1000-up$up.json" 2> "$out/s0-1000-up$up.txt"
done
