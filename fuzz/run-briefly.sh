#!/usr/bin/env bash
# Builds every fuzz target and runs each for a short while: the CI smoke
# run. Longer runs are benchmarks, not tests.
#
#   fuzz/run-briefly.sh [SECONDS_PER_TARGET]   (default 20)
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# First replays the committed seeds on stable (`cargo test`), then fuzzes
# from those seeds into a scratch corpus, so nothing under fuzz/ changes.
# A crash leaves its input in fuzz/artifacts/<target>/ and fails the run.
#
# FUZZ_SANITIZER (default none) picks cargo-fuzz's sanitizer. fjord's
# crates have no `unsafe` (ring's C and assembly are fuzzed upstream), so
# AddressSanitizer buys little and costs about 4x the executions; debug
# assertions (overflow checks) stay on either way.
set -euo pipefail

seconds="${1:-20}"
sanitizer="${FUZZ_SANITIZER:-none}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
fi

cd "$(dirname "$0")"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz on the nightly toolchain is needed: cargo install cargo-fuzz" >&2
    exit 1
fi

echo "== replaying seeds (stable)"
cargo test --quiet

echo "== building fuzz targets (nightly)"
cargo +nightly fuzz build --sanitizer "$sanitizer"

corpus_root="$(mktemp -d)"
trap 'rm -rf "$corpus_root"' EXIT

for target in $(cargo +nightly fuzz list); do
    echo "== fuzzing $target for ${seconds}s"
    mkdir -p "$corpus_root/$target"
    # libFuzzer adds new inputs to the first directory only.
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "$corpus_root/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1
done
echo "== all fuzz targets ran ${seconds}s without a crash"
