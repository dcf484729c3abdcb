#!/usr/bin/env bash
# Instructions per packet of the per-packet paths (the `instructions`
# benchmark under callgrind): for each direction, cipher and payload size,
# the node's path, the raw AEAD's, and the difference, the node's own work.
# The same binary counts the same every run, whatever else the machine
# does, so two builds compare to the instruction; see the benchmark's
# module documentation for what a count does not tell.
#
#   crates/mesh/benches/count-instructions.sh [PACKETS]   (default 2000)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

packets=${1:-2000}
if ! [[ $packets =~ ^[1-9][0-9]*$ ]]; then
    echo "count-instructions.sh: PACKETS must be a positive number, got '$packets'" >&2
    exit 2
fi
if ! command -v valgrind >/dev/null 2>&1; then
    echo "count-instructions.sh: needs valgrind (Debian: apt-get install valgrind)" >&2
    exit 1
fi

binary=$(cargo bench -p fjord-mesh --bench instructions --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*instructions[^"]*"' | tail -n 1 | cut -d '"' -f 4)
if [[ -z $binary || ! -x $binary ]]; then
    echo "count-instructions.sh: building the instructions benchmark failed; run" >&2
    echo "  cargo bench -p fjord-mesh --bench instructions --no-run" >&2
    exit 1
fi

firewall=$(cargo bench -p fjord-mesh --bench firewall --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*firewall[^"]*"' | tail -n 1 | cut -d '"' -f 4)
if [[ -z $firewall || ! -x $firewall ]]; then
    echo "count-instructions.sh: building the firewall benchmark failed; run" >&2
    echo "  cargo bench -p fjord-mesh --bench firewall --no-run" >&2
    exit 1
fi

# Instructions callgrind counted inside the case's own function, per packet
# (the instructions benchmark's unless a binary is given).
count() {
    local case=$1 function=$2 program=${3:-$binary} collected
    collected=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        --toggle-collect="*${function}*" \
        "$program" "$case" "$packets" 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    if [[ -z $collected ]]; then
        echo "count-instructions.sh: callgrind counted nothing for $case" >&2
        exit 1
    fi
    echo $((collected / packets))
}

printf '%-9s %-7s %7s %12s %12s %12s\n' direction cipher payload "node Ir/pkt" "raw Ir/pkt" "node's own"
for direction in open seal; do
    for cipher in chacha aes; do
        for payload in 64 1420; do
            node=$(count "$direction/node/$cipher/$payload" "pair::${direction}_node")
            raw=$(count "$direction/raw/$cipher/$payload" "pair::${direction}_raw")
            printf '%-9s %-7s %7s %12s %12s %12s\n' "$direction" "$cipher" "$payload" "$node" "$raw" $((node - raw))
        done
    done
done

# What a network policy in force adds (the firewall benchmark): per
# packet of a tracked flow, and per packet opening a flow under 100 rules.
echo
printf '%-34s %12s\n' "network policy" "Ir/pkt"
printf '%-34s %12s\n' "packet of a tracked flow" "$(count tracked firewall::admit_tracked "$firewall")"
printf '%-34s %12s\n' "packet opening a flow (100 rules)" "$(count opening firewall::admit_opening "$firewall")"
