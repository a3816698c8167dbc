#!/usr/bin/env bash
# e2e.sh [FILTER] — the end-to-end suite (crates/upf/tests/e2e.rs) in a release build, then a
# table of its iperf3 and MBR figures per backend set.
#
# As root (network namespaces, TUN, AF_PACKET, AF_XDP); otherwise every test says SKIPPED.
# Needs iproute2, iputils-ping, iperf3, procps (ethtool optional). FILTER selects tests by
# name as `cargo test` does, e.g. `scripts/e2e.sh af_xdp::` or `scripts/e2e.sh iperf3`.
# The whole output is kept in target/e2e.log.
set -uo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
log=$target/e2e.log

echo "e2e: $(uname -srm), $(nproc) CPUs, load:$(uptime | sed 's/.*load average://')"
cargo test --release -p upf --test e2e -- --ignored --nocapture --test-threads 1 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

echo
echo "e2e: load after:$(uptime | sed 's/.*load average://')"
echo
echo "iperf3 TCP through the UPF (one stream, 4 s each way; UE MTU 1400):"
printf '  %-10s %-9s %10s %13s\n' backend direction Gbit/s retransmits
grep '^E2E-IPERF3 ' "$log" | while read -r _ fields; do
    declare -A f=()
    for kv in $fields; do f[${kv%%=*}]=${kv#*=}; done
    printf '  %-10s %-9s %10s %13s\n' "${f[backend]}" "${f[direction]}" "${f[gbit_s]}" "${f[retransmits]}"
done
echo
echo "MBR (QER, both ways) on UDP offered at 3x, received rate over [2 s, 6 s]:"
printf '  %-10s %-9s %8s %9s %9s %7s\n' backend direction MBR offered received dev%
grep '^E2E-MBR ' "$log" | sed 's/direction="\([a-z]*\)[^"]*"/direction=\1/' | while read -r _ fields; do
    declare -A f=()
    for kv in $fields; do f[${kv%%=*}]=${kv#*=}; done
    printf '  %-10s %-9s %8s %9s %9s %7s\n' "${f[backend]}" "${f[direction]}" \
        "${f[mbr_mbit_s]}" "${f[offered_mbit_s]}" "${f[received_mbit_s]}" "${f[deviation_pct]}"
done
echo "  (Mbit/s at the receiver's IP layer)"
echo
grep -E '^test result:|^SKIPPED' "$log" | sort | uniq -c | sed 's/^ *//'
exit "$status"
