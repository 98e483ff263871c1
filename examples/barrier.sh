#!/usr/bin/env bash
# Usage: examples/barrier.sh   (as root)
# Runs the three nodes of examples/barrier.rs, each in a network namespace of its own on
# an af_packet port: one end of a veth pair whose other end is on a Linux bridge in the
# root namespace (hairpin on, so that a node reaches itself through the bridge too).
# Exits 0 when all three pass every round; removes the namespaces, veths and bridge on
# every exit path. Without root or `ip netns` it says so and exits 0 ("skipped").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ((EUID != 0)); then
    echo "barrier.sh: skipped: network namespaces need root (run it with sudo)"
    exit 0
fi
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "barrier.sh: skipped: 'ip netns' is not available (install iproute2)"
    exit 0
fi

cargo build -q -p deposit --example barrier
exe=${CARGO_TARGET_DIR:-target}/debug/examples/barrier

# Names unique to this run (interface names: at most 15 characters).
id=$$
bridge=dpxbr$id
nodes=(0 1 2)
pids=()

cleanup() {
    local pid i
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for i in "${nodes[@]}"; do
        ip link del "dpxh${id}n$i" 2>/dev/null || true
        ip netns del "dpxns${id}n$i" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The bridge, and per node a namespace and a veth pair: dpxh<id>n<i> on the bridge,
# dpxv<id>n<i> (the node's port) in the namespace.
ip link add "$bridge" type bridge
ip link set "$bridge" up
for i in "${nodes[@]}"; do
    ns=dpxns${id}n$i host=dpxh${id}n$i port=dpxv${id}n$i
    ip netns add "$ns"
    ip link add "$host" mtu 1500 type veth peer name "$port"
    ip link set "$port" netns "$ns"
    ip link set "$host" master "$bridge"
    ip link set dev "$host" type bridge_slave hairpin on
    ip link set "$host" up
    ip netns exec "$ns" ip link set "$port" mtu 1500 up
    # Less kernel chatter on the segment (not required).
    ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$port.disable_ipv6=1" 2>/dev/null || true
done

echo "barrier.sh: three nodes in namespaces dpxns${id}n{0,1,2}, bridged by $bridge"
for i in "${nodes[@]}"; do
    ip netns exec "dpxns${id}n$i" timeout 60 "$exe" "$i" "af_packet:dpxv${id}n$i" &
    pids+=($!)
done
failed=0
for i in "${nodes[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    if ((rc != 0)); then
        echo "barrier.sh: node $i exited with status $rc$( ((rc == 124)) && echo ' (timed out after 60 s)')" >&2
        failed=1
    fi
done
pids=()
if ((failed)); then
    echo "barrier.sh: FAILED" >&2
    exit 1
fi
echo "barrier.sh: all three nodes passed every round"
