#!/usr/bin/env bash
# The whole test suite, as CI runs it: format, lints, unit/property/scenario tests,
# cross-checks against scapy, tshark and go-pfcp (the N4 agent run as `upf run --n4`), and a
# short fuzz run of every target, and the benchmark harness's smoke run.
# FUZZ_SECONDS (default 20) bounds each fuzz target's run.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check
step "docs/compliance.md is current"
python3 scripts/compliance.py --check
step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo test"
cargo test --workspace --quiet 2>&1 | tee target/cargo-test.log
step "bench smoke"
# Every profile's quick variant in memory through the harness (run, results.json, table,
# plots) and, as root, a small control-plane run against the `upf` binary (its counts are
# checked, not its speed); written under target/, nothing recorded in the repository.
cargo build --quiet --bin upf
cargo run --quiet -p upf-bench -- --quick --out target/bench-smoke > target/bench-smoke.log
tail -1 target/bench-smoke.log
step "interop: scapy, tshark and go-pfcp (codecs; the N4 agent as \`upf run\`)"
cargo build --quiet --bin upf
python3 interop/run.py --upf target/debug/upf
step "fuzz smoke"
scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-20}"
# One closing line that sums up every runner above.
passed=$(grep -o 'test result: ok. [0-9]* passed' target/cargo-test.log | awk '{s+=$4} END {print s+0}')
interop=$(cat target/interop-passed 2>/dev/null || echo 0)
printf '\nall: %d passed, 0 failed\n' "$((passed + interop))"
