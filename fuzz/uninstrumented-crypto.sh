#!/usr/bin/env bash
# rustc wrapper (fuzz/.cargo/config.toml): compiles the cryptographic
# primitives without libFuzzer's coverage instrumentation.
#
# They are not what is fuzzed, yet instrumented they cost more than the
# rest of an execution of the stateful targets: a compare trace in every
# field multiplication made X25519 and Ed25519 95 % of `device_datagram`'s
# and 60 % of `mesh_membership`'s time, and their branches are constant
# time, so the coverage they report tells the fuzzer nothing. lz4_flex
# stays instrumented: it parses what a peer sends.
#
# cargo-fuzz passes its flags for every crate; the last
# `-sanitizer-coverage-level` wins, so appending level 0 turns the pass
# off for the crates named here and leaves everything else as it was.
set -euo pipefail

rustc="$1"
shift
uninstrumented=" curve25519_dalek x25519_dalek ed25519_dalek blake2 chacha20 poly1305 ring sha2 "

if [[ " $* " == *" -Cpasses=sancov-module "* ]]; then
    previous=""
    for argument in "$@"; do
        if [ "$previous" = "--crate-name" ] && [[ "$uninstrumented" == *" $argument "* ]]; then
            exec "$rustc" "$@" -Cllvm-args=-sanitizer-coverage-level=0
        fi
        previous="$argument"
    done
fi
exec "$rustc" "$@"
