#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (seconds, default 20) from its committed corpus.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-20}
if ! rustup toolchain list | grep -q '^nightly' || ! command -v cargo-fuzz >/dev/null; then
  # In CI a missing fuzzer is a failure, not a pass.
  if [[ ${CI:-} == true ]]; then
    echo "fuzz smoke: FAILED (no nightly toolchain or cargo-fuzz, and CI=true)" >&2
    exit 1
  fi
  echo "fuzz smoke: SKIPPED (no nightly toolchain or cargo-fuzz on this machine)"
  exit 0
fi
for t in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$t"
  # Copy the seed corpus so that new inputs found here do not dirty the checkout.
  work=$(mktemp -d)
  cp -r "corpus/$t/." "$work/"
  echo "fuzz $t for ${secs}s"
  cargo +nightly fuzz run "$t" "$work" -- -max_total_time="$secs" -max_len=4096 2>&1 | tail -n 3
  rm -rf "$work"
done
