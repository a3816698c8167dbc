#!/usr/bin/env bash
# The whole test suite, as CI runs it: format, lints, unit/property/scenario tests,
# cross-checks against scapy, tshark and go-pfcp (the N4 agent run as `upf run --n4`), and a
# short fuzz run of every target, and the benchmark harness's smoke run.
# FUZZ_SECONDS (default 10) bounds each fuzz target's run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says how long the one before it took: CI must stay under 20 minutes.
# They also say the disk space left: a CI run once ended with "No space left on device".
step_name="" step_start=$SECONDS
step() {
  [[ -n $step_name ]] && printf '(%s: %d s, %s free)\n' "$step_name" $((SECONDS - step_start)) \
    "$(df -h --output=avail . | tail -n 1 | tr -d ' ')"
  step_name="$*" step_start=$SECONDS
  printf '\n=== %s\n' "$*"
}

# Debug builds keep line tables only (backtraces keep file:line) and CI builds nothing
# incrementally: full debug info and incremental caches tripled the target directory.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_PROFILE_TEST_DEBUG=line-tables-only
[[ ${CI:-} == true ]] && export CARGO_INCREMENTAL=0

step "cargo fmt --check"
cargo fmt --all -- --check
step "docs/compliance.md is current"
python3 scripts/compliance.py --check
step "layering: crates depend only downward (ARCHITECTURE.md's table)"
python3 scripts/layering.py --self-test
python3 scripts/layering.py
step "docs: links resolve, every results folder is indexed"
python3 scripts/check-docs.py
step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "the upf binary without the demo (cargo build -p upf --no-default-features)"
cargo build --quiet -p upf --no-default-features
cargo clippy -p upf --no-default-features --all-targets --quiet -- -D warnings
step "cargo test"
cargo test --workspace --quiet 2>&1 | tee target/cargo-test.log
if [[ $(id -u) -eq 0 ]]; then
  step "cargo test: the tests that need root"
  # They are #[ignore = "needs root"], so that a run without root does not count them as
  # passed. --ignored runs every ignored test: the others are skipped by name (the seed
  # corpus writer, the 1M-session churn meant for release builds, two rate printouts);
  # --tests leaves out doc tests, whose `ignore` means "not a test" rather than root.
  cargo test --workspace --tests --quiet -- --ignored --skip write_seed_corpus --skip churn_1m \
    --skip measure_rates --skip veth_rates 2>&1 | tee -a target/cargo-test.log
else
  step "cargo test: not root: the tests that need root did not run and are not counted"
fi
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
step "deploy/kubernetes renders, validates, and its upf.toml passes upf run --check"
python3 scripts/check-k8s.py --upf target/debug/upf
step "fuzz smoke"
scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-10}"
# One closing line that sums up every runner above.
passed=$(grep -o 'test result: ok. [0-9]* passed' target/cargo-test.log | awk '{s+=$4} END {print s+0}')
interop=$(cat target/interop-passed 2>/dev/null || echo 0)
step "done in $SECONDS s"
printf '\nall: %d passed, 0 failed\n' "$((passed + interop))"
