# Sourced by scripts/mpi.sh and scripts/fabric.sh (root): N "hosts" on one L2 switch in
# the root namespace, so that mpirun's own channel works. `bridge_up N` makes bridge
# ddmpi0 and N veth pairs: ddmv<r> (the port rank r opens with af_packet) and ddmb<r>
# (its bridge port); `bridge_down` removes them (bridge_up arms it on EXIT).
#
# Interface indexes 0x100000 + (r << 10): DPDK 22.11's af_packet joins each socket to
# PACKET_FANOUT group (pid ^ ifindex) & 0xffff, and a group is one interface's, so two
# processes whose pid ^ ifindex agree cannot both open their port (about one 4-rank run
# in ten failed so with the kernel's consecutive indexes and mpirun's consecutive
# pids). Indexes 1024 apart collide only for pids differing in the same way.
bridge_n=0
bridge_down() {
    local r
    for ((r = 0; r < bridge_n; r++)); do ip link del "ddmv$r" 2>/dev/null || true; done
    ip link del ddmpi0 2>/dev/null || true
}
bridge_up() {
    local r i
    bridge_n=$1
    (($(id -u) == 0)) || { echo "bridge: a bridge of veths needs root" >&2; exit 2; }
    trap bridge_down EXIT
    trap 'exit 143' INT TERM # a signal still removes them (through EXIT)
    bridge_down
    ip link add ddmpi0 type bridge
    ip link set ddmpi0 up
    for ((r = 0; r < bridge_n; r++)); do
        ip link add "ddmv$r" index $((0x100000 + (r << 10))) type veth peer name "ddmb$r"
        for i in "ddmv$r" "ddmb$r"; do
            sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1"
        done
        ip link set "ddmb$r" master ddmpi0
        ip link set "ddmb$r" up
        ip link set "ddmv$r" up
    done
    # Up before the ranks open them (bounded).
    for ((r = 0; r < bridge_n; r++)); do
        for _ in $(seq 100); do
            [[ $(cat "/sys/class/net/ddmv$r/operstate") == up ]] && break
            sleep 0.05
        done
    done
}

# Two "hosts" in network namespaces on one bridge (sourced by scripts/fabric.sh --bridge
# and scripts/bench.sh --netns; root). `ns_pair_up P MTU NET` makes bridge ${P}br,
# namespaces ${P}a and ${P}b, and in each a veth ${P}v0 / ${P}v1 (address NET.1 / NET.2,
# MTU MTU) whose peer ${P}p0 / ${P}p1 is a port of the bridge; `ns_pair_down P` removes
# them and waits until the kernel has (a namespace's veths go with it, asynchronously:
# made again at once, they would exist still).
ns_pair_down() {
    local p=$1 i
    ip netns del "${p}a" 2>/dev/null || true
    ip netns del "${p}b" 2>/dev/null || true
    ip link del "${p}br" 2>/dev/null || true
    for i in 0 1; do
        ip link del "${p}p$i" 2>/dev/null || true
        for _ in $(seq 50); do ip link show "${p}p$i" >/dev/null 2>&1 || break; sleep 0.1; done
    done
}
ns_pair_up() {
    local p=$1 mtu=$2 net=$3 i ns
    (($(id -u) == 0)) || { echo "bridge: namespaces and a bridge need root" >&2; exit 2; }
    ns_pair_down "$p"
    ip link add "${p}br" type bridge
    ip link set "${p}br" mtu "$mtu" up
    for i in 0 1; do
        ns=${p}$([[ $i == 0 ]] && echo a || echo b)
        ip netns add "$ns"
        ip link add "${p}v$i" mtu "$mtu" type veth peer name "${p}p$i" mtu "$mtu"
        ip link set "${p}v$i" netns "$ns"
        ip link set "${p}p$i" master "${p}br" up
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        ip -n "$ns" addr add "$net.$((i + 1))/24" dev "${p}v$i"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "${p}v$i" up
    done
    sleep 1
}
