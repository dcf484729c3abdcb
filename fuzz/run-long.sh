#!/usr/bin/env bash
# The long fuzzing campaign: every target for a fixed number of
# executions, one after another. A benchmark, not a test: run it by hand
# on a machine that can spare a core for hours.
#
#   fuzz/run-long.sh [EXECUTIONS_PER_TARGET] [TARGET...]
#
# EXECUTIONS_PER_TARGET defaults to 100,000,000; TARGETs default to every
# target (`cargo fuzz list`). Needs the nightly toolchain and cargo-fuzz,
# as fuzz/run-briefly.sh does, and takes FUZZ_SANITIZER the same way.
#
# Each target starts from a scratch corpus seeded with fuzz/seeds/<target>/
# and grows it there, so nothing under fuzz/ changes but for crashes:
# libFuzzer stops a target at its first crash (or timeout, or memory
# blow-up); the input is copied to fuzz/seeds/<target>/ as a regression
# seed (commit it with the fix), and the campaign goes on with the next
# target. At the end one line per target gives the executions, the time,
# the executions per second and the crashes (0 expected); the exit code is
# 1 if any target crashed.
#
# A target that needs more core-hours than one sitting has (the stateful
# ones: device_datagram and node_session run at 4,000-6,000 exec/s on a
# core of their own once their inputs have grown) runs in parts: with FUZZ_CAMPAIGN=<dir> the corpus
# lives in <dir>/<target>/ instead of a scratch directory, so the next
# part starts from everything the last one found, and every part appends
# its executions to <dir>/<target>.parts; the summary line then gives the
# campaign's total. A part asks only for what the campaign still lacks of
# EXECUTIONS_PER_TARGET, and a target whose campaign has them all is
# skipped, so the same command can be run again until every target is
# done (counts from elsewhere, say another machine's, can be added to the
# .parts file as lines of their own). FUZZ_PART_SECONDS=<s> ends each part
# after that many seconds (libFuzzer's -max_total_time) even if the executions asked for
# are not reached. FUZZ_MAX_LEN=<bytes> caps the input length (libFuzzer's
# -max_len; unset, libFuzzer's 4,096 or the longest seed): the stateful
# targets spend their time in protocol work per step, so a cap trades the
# longest step sequences for rate.
#
# To keep measurements quiet, pause the fuzzer with SIGSTOP and SIGCONT,
# but for less than 20 minutes at a time: libFuzzer counts wall time
# against the input it was running (-timeout, 1,200 s) and reports a
# paused input as a timeout (it happened: a 32 ms input of switch_frames,
# after 35 minutes stopped).
set -euo pipefail

runs="${1:-100000000}"
if ! [[ "$runs" =~ ^[0-9]+$ ]] || [ "$runs" -eq 0 ]; then
    echo "usage: $0 [EXECUTIONS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi
shift || true
sanitizer="${FUZZ_SANITIZER:-none}"
campaign="${FUZZ_CAMPAIGN:-}"
part_seconds="${FUZZ_PART_SECONDS:-0}"
if ! [[ "$part_seconds" =~ ^[0-9]+$ ]]; then
    echo "FUZZ_PART_SECONDS must be a whole number of seconds" >&2
    exit 2
fi
length_cap=()
if [ -n "${FUZZ_MAX_LEN:-}" ]; then
    if ! [[ "$FUZZ_MAX_LEN" =~ ^[0-9]+$ ]] || [ "$FUZZ_MAX_LEN" -eq 0 ]; then
        echo "FUZZ_MAX_LEN must be a number of bytes above 0" >&2
        exit 2
    fi
    length_cap=(-max_len="$FUZZ_MAX_LEN")
fi
if [ -n "$campaign" ]; then
    mkdir -p "$campaign"
    campaign="$(cd "$campaign" && pwd)"
fi

cd "$(dirname "$0")"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz on the nightly toolchain is needed: cargo install cargo-fuzz" >&2
    exit 1
fi

echo "== building fuzz targets (nightly, sanitizer $sanitizer)"
cargo +nightly fuzz build --sanitizer "$sanitizer"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# Executions recorded in a campaign's .parts file (0 when it has none).
campaign_total() {
    [ -f "$1" ] || { echo 0; return; }
    awk '$2 ~ /^[0-9]+$/ { sum += $2 } END { print sum + 0 }' "$1"
}

summary=()
crashed_targets=0
for target in "${targets[@]}"; do
    corpus="$scratch/corpus/$target"
    asked="$runs"
    if [ -n "$campaign" ]; then
        corpus="$campaign/$target"
        so_far=$(campaign_total "$campaign/$target.parts")
        if [ "$so_far" -ge "$runs" ]; then
            line="$(printf '%-18s campaign done: %s executions of %s' "$target" "$so_far" "$runs")"
            echo "== $line"
            summary+=("$line")
            continue
        fi
        asked=$((runs - so_far))
    fi
    artifacts="$scratch/artifacts/$target/"
    log="$scratch/$target.log"
    mkdir -p "$corpus" "$artifacts"
    cp seeds/"$target"/* "$corpus"/
    echo "== $target: $asked executions ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
    started=$(date +%s)
    status=0
    # The last -artifact_prefix wins over the one cargo-fuzz passes.
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "$corpus" -- \
        -runs="$asked" -max_total_time="$part_seconds" "${length_cap[@]}" \
        -print_final_stats=1 \
        -artifact_prefix="$artifacts" \
        >"$log" 2>&1 || status=$?
    seconds=$(( $(date +%s) - started ))
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    executions="${executions:-?}"
    crashes=0
    slow=0
    for input in "$artifacts"*; do
        [ -f "$input" ] || continue
        case "$(basename "$input")" in
            # Over 10 s once: worth a look, not a failure (and a pause
            # with SIGSTOP makes them).
            slow-unit-*) slow=$((slow + 1)); continue ;;
        esac
        crashes=$((crashes + 1))
        cp "$input" "seeds/$target/regression-$(basename "$input")"
        echo "   crash input kept as fuzz/seeds/$target/regression-$(basename "$input")"
    done
    if [ "$slow" -gt 0 ]; then
        echo "   $slow input(s) ran over 10 s once (slowest $(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log" | tail -n 1) s); not kept"
    fi
    if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        # Failed without an input to blame (a build or setup problem).
        crashes="failed (exit $status)"
        tail -n 20 "$log" >&2
    fi
    if [ "$crashes" != 0 ]; then
        crashed_targets=$((crashed_targets + 1))
        grep -a -m 5 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" || true
    fi
    rate="?"
    if [[ "$executions" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ]; then
        rate=$((executions / seconds))
    fi
    line="$(printf '%-18s %14s executions %8s s %10s exec/s  crashes: %s' \
        "$target" "$executions" "$seconds" "$rate" "$crashes")"
    if [ -n "$campaign" ]; then
        parts="$campaign/$target.parts"
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $executions $seconds $crashes" >>"$parts"
        total=$(campaign_total "$parts")
        line="$line  (campaign: $total executions in $(wc -l <"$parts") part(s))"
    fi
    echo "   $line"
    summary+=("$line")
done

echo "== summary ($runs executions asked per target${FUZZ_MAX_LEN:+, inputs up to $FUZZ_MAX_LEN bytes})"
printf '%s\n' "${summary[@]}"
if [ "$crashed_targets" -gt 0 ]; then
    echo "== $crashed_targets target(s) crashed; their inputs are in fuzz/seeds/ as regression-*"
    exit 1
fi
echo "== no crashes"
