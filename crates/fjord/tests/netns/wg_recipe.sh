#!/usr/bin/env bash
# What a `wg` user does with a userspace WireGuard, step by step, with
# fjord as the implementation (the shape of the netns test that kernel
# WireGuard and wireguard-go run): two fjord processes started in one
# namespace, their interfaces moved into two others, configured with `wg`
# alone; pings and iperf3 over an IPv4 and an IPv6 loopback underlay, at
# the default MTU and at 34,736; then, with one process in each side's
# namespace and a veth between them, a source address removed under the
# tunnel and replies from the address each peer was reached at.
#
#   wg_recipe.sh FJORD [BYTES]     BYTES per iperf3 run (default 1G)
#
# Exits 0 when every step passes; the first failing step is named on
# stderr. Everything created is removed on exit, failed or not. Needs
# root, wg (wireguard-tools), iperf3, ping.
set -euo pipefail

fjord=${1:?usage: wg_recipe.sh FJORD [BYTES]}
bytes=${2:-1G}
prefix="fjwg$$"
# What the fjord daemons print while starting, shown if a step fails.
logdir=$(mktemp -d)
ns0=$prefix-0 ns1=$prefix-1 ns2=$prefix-2
step_name=setup

step() {
    step_name=$*
    printf '==> %s\n' "$*" >&2
}
n0() { ip netns exec "$ns0" "$@"; }
n1() { ip netns exec "$ns1" "$@"; }
n2() { ip netns exec "$ns2" "$@"; }

cleanup() {
    local status=$?
    set +e
    trap - EXIT
    if ((status != 0)); then
        printf 'FAILED at: %s\n' "$step_name" >&2
        tail -n 5 "$logdir"/*.log >&2 2>/dev/null
    fi
    rm -rf "$logdir"
    for ns in "$ns0" "$ns1" "$ns2"; do
        for link in wg1 wg2; do ip -n "$ns" link del "$link" 2>/dev/null; done
    done
    # The fjord processes end when their interface goes; iperf3 servers
    # and anything else left in our namespaces are ours to end.
    sleep 0.2
    for ns in "$ns0" "$ns1" "$ns2"; do
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [[ -n $pids ]] && kill $pids 2>/dev/null
    done
    sleep 0.2
    for ns in "$ns0" "$ns1" "$ns2"; do ip netns del "$ns" 2>/dev/null; done
    exit "$status"
}
trap cleanup EXIT
trap 'printf "failed: line %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# Waits until something listens on TCP port 5201 in namespace $1.
wait_iperf() {
    local tries=0
    until ip netns exec "$1" ss -Htln 'sport = 5201' | grep -q .; do
        ((++tries < 100)) || { echo "iperf3 server did not start" >&2; return 1; }
        sleep 0.05
    done
}

# iperf3 from namespace $1 to $3, served in namespace $2; extra args after.
iperf() {
    local client=$1 server=$2 address=$3
    shift 3
    ip netns exec "$server" iperf3 -s -1 -B "$address" >/dev/null 2>&1 &
    local server_pid=$!
    wait_iperf "$server"
    # A stalled tunnel must fail the step, not hang it for iperf3's own
    # 15-minute give-up.
    ip netns exec "$client" timeout 60 iperf3 -Z -n "$bytes" -c "$address" "$@" >/dev/null
    wait "$server_pid" || true
}

traffic() {
    step "$1: flood pings both ways, IPv4 and IPv6"
    n2 ping -q -c 10 -f -W 1 198.19.241.1 >/dev/null
    n1 ping -q -c 10 -f -W 1 198.19.241.2 >/dev/null
    n2 ping -q -c 10 -f -W 1 fd00::1 >/dev/null
    n1 ping -q -c 10 -f -W 1 fd00::2 >/dev/null
    step "$1: TCP over IPv4"
    iperf "$ns1" "$ns2" 198.19.241.2
    step "$1: TCP over IPv6"
    iperf "$ns2" "$ns1" fd00::1
    step "$1: UDP over IPv4"
    iperf "$ns2" "$ns1" 198.19.241.1 -u -b 0
    step "$1: UDP over IPv6"
    iperf "$ns1" "$ns2" fd00::2 -u -b 0
}

key1=$(wg genkey) key2=$(wg genkey) psk=$(wg genpsk)
pub1=$(wg pubkey <<<"$key1") pub2=$(wg pubkey <<<"$key2")

# Addresses, keys, ports and one peer each; interfaces up.
configure() {
    ip -n "$ns1" addr add 198.19.241.1/24 dev wg1
    ip -n "$ns1" addr add fd00::1/24 dev wg1
    ip -n "$ns2" addr add 198.19.241.2/24 dev wg2
    ip -n "$ns2" addr add fd00::2/24 dev wg2
    n0 wg set wg1 private-key <(echo "$key1") listen-port 10000 \
        peer "$pub2" preshared-key <(echo "$psk") allowed-ips 198.19.241.2/32,fd00::2/128
    n0 wg set wg2 private-key <(echo "$key2") listen-port 20000 \
        peer "$pub1" preshared-key <(echo "$psk") allowed-ips 198.19.241.1/32,fd00::1/128
    ip -n "$ns1" link set wg1 up
    ip -n "$ns2" link set wg2 up
}

endpoint_of() {
    n0 wg show "$1" endpoints | cut -f2
}

step "namespaces and two fjord processes"
for ns in "$ns0" "$ns1" "$ns2"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
n0 "$fjord" wg1 2>"$logdir/wg1.log"
ip -n "$ns0" link set wg1 netns "$ns1"
n0 "$fjord" wg2 2>"$logdir/wg2.log"
ip -n "$ns0" link set wg2 netns "$ns2"
configure

orig_mtu=$(ip -n "$ns1" -o link show wg1 | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
big_mtu=$((34816 - 1500 + orig_mtu))

for underlay in 127.0.0.1 '[::1]'; do
    n0 wg set wg1 peer "$pub2" endpoint "$underlay:20000"
    n0 wg set wg2 peer "$pub1" endpoint "$underlay:10000"
    traffic "underlay $underlay, MTU $orig_mtu"
    ip -n "$ns1" link set wg1 mtu "$big_mtu"
    ip -n "$ns2" link set wg2 mtu "$big_mtu"
    traffic "underlay $underlay, MTU $big_mtu"
    ip -n "$ns1" link set wg1 mtu "$orig_mtu"
    ip -n "$ns2" link set wg2 mtu "$orig_mtu"
done

step "turns without progress through the transfers, MTU changes and floods"
# Each fjord counts turns of its loop that found a source ready and moved
# no data (`fjord show`: "N turns without progress"; absent when none).
# The stall at MTU 34,736 was millions of them a second.
for interface in wg1 wg2; do
    idle=$("$fjord" show "$interface" | sed -n 's/.*worker: \([0-9]*\) turns without progress.*/\1/p')
    idle=${idle:-0}
    printf 'idle_turns %s %s\n' "$interface" "$idle" >&2
    ((idle <= 100))
done

step "roaming: IPv4 loopback address replaced, new listen port"
ip -n "$ns0" -4 addr del 127.0.0.1/8 dev lo
ip -n "$ns0" -4 addr add 127.212.121.99/8 dev lo
n0 wg set wg1 listen-port 9999
n0 wg set wg1 peer "$pub2" endpoint 127.0.0.1:20000
n1 ping -q -W 1 -c 1 fd00::2 >/dev/null
[[ $(endpoint_of wg2) == 127.212.121.99:9999 ]]
step "roaming: IPv6 underlay, new listen port"
n0 wg set wg1 listen-port 9998
n0 wg set wg1 peer "$pub2" endpoint '[::1]:20000'
n1 ping -q -W 1 -c 1 198.19.241.2 >/dev/null
[[ $(endpoint_of wg2) == '[::1]:9998' ]]

ip -n "$ns1" link del wg1
ip -n "$ns2" link del wg2

step "one fjord process in each side's namespace, a veth between them"
# The daemons started in ns0 end with their interfaces.
n1 "$fjord" wg1 2>"$logdir/wg1-second.log"
n2 "$fjord" wg2 2>"$logdir/wg2-second.log"
# `wg` finds a userspace interface by its socket file, whatever the
# namespace: ns0 serves for every `wg` call.
configure
ip -n "$ns1" link add veth1 type veth peer name veth2
ip -n "$ns1" link set veth2 netns "$ns2"
n1 sysctl -qw net.ipv6.conf.veth1.accept_dad=0
n2 sysctl -qw net.ipv6.conf.veth2.accept_dad=0
n1 sysctl -qw net.ipv4.conf.veth1.promote_secondaries=1
ip -n "$ns1" addr add 198.18.0.1/24 dev veth1
ip -n "$ns1" addr add fd00:aa::1/96 dev veth1
ip -n "$ns2" addr add 198.18.0.2/24 dev veth2
ip -n "$ns2" addr add fd00:aa::2/96 dev veth2
ip -n "$ns1" link set veth1 up
ip -n "$ns2" link set veth2 up

step "source address: IPv4 endpoint"
n0 wg set wg1 peer "$pub2" endpoint 198.18.0.2:20000
n1 ping -q -W 1 -c 1 198.19.241.2 >/dev/null
step "source address: the IPv4 address replaced under the tunnel"
ip -n "$ns1" addr add 198.18.0.10/24 dev veth1
ip -n "$ns1" addr del 198.18.0.1/24 dev veth1
n1 ping -q -W 1 -c 1 198.19.241.2 >/dev/null
step "source address: IPv6 endpoint"
n0 wg set wg1 peer "$pub2" endpoint '[fd00:aa::2]:20000'
n1 ping -q -W 1 -c 1 198.19.241.2 >/dev/null
step "source address: the IPv6 address replaced under the tunnel"
ip -n "$ns1" addr add fd00:aa::10/96 dev veth1
ip -n "$ns1" addr del fd00:aa::1/96 dev veth1
n1 ping -q -W 1 -c 1 198.19.241.2 >/dev/null

step "reply to sender: four addresses on one side"
ip -n "$ns1" link set veth1 down
ip -n "$ns2" link set veth2 down
ip -n "$ns1" addr flush dev veth1
ip -n "$ns2" addr flush dev veth2
for address in 198.18.0.1/24 198.18.0.2/24 fd00:aa::1/96 fd00:aa::2/96; do
    ip -n "$ns1" addr add "$address" dev veth1
done
ip -n "$ns2" addr add 198.18.0.3/24 dev veth2
ip -n "$ns2" addr add fd00:aa::3/96 dev veth2
ip -n "$ns1" link set veth1 up
ip -n "$ns2" link set veth2 up
for endpoint in 198.18.0.1:10000 '[fd00:aa::1]:10000' 198.18.0.2:10000 '[fd00:aa::2]:10000'; do
    step "reply to sender: endpoint $endpoint"
    n0 wg set wg2 peer "$pub1" endpoint "$endpoint"
    n2 ping -q -W 1 -c 1 198.19.241.1 >/dev/null
    [[ $(endpoint_of wg2) == "$endpoint" ]]
done
step "done"
