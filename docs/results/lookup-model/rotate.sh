#!/bin/bash
# rotate.sh SESSIONS BIN... : each build's upf-bench measures S0 at 64 B, 8 one-second points
# per install, 3 installs, builds rotated; prints ns a packet per install.
n=$1; shift
for r in 1 2 3; do
  for b in "$@"; do
    echo "== $r $b"
    "$b" memory --profile s0 --sessions "$n" --sizes 64,64,64,64,64,64,64,64 --seconds 1 \
      --uplink-percent 42.5 2>&1 | grep "64 B" | sed 's/.*( *\([0-9.]*\) ns.*/\1/' | tr '\n' ' '
    echo
  done
done
