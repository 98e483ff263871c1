# Sourced by scripts/mpi.sh and scripts/fabric.sh (root): N "hosts" on one L2 switch.
# `bridge_up N [MTU [hosts]]` makes bridge ddmpi0 and N veth pairs: ddmv<r> (the port
# rank r opens with af_packet) and ddmb<r> (its bridge port), MTU MTU (default 1500);
# `bridge_down` removes them (bridge_up arms it on EXIT).
#   * By default every ddmv<r> is in the root namespace, so that mpirun's own channel
#     works; kernel TCP between the ranks then goes over loopback, not the bridge.
#   * With `hosts`, ddmv<r> is in namespace ddmh<r> (a "host") with address
#     10.89.0.<r+1>/24, and the bridge has 10.89.0.254/24 in the root namespace, so
#     that mpirun reaches the hosts over the bridge (scripts/netns-rsh starts its
#     daemons in them) and kernel TCP between ranks crosses the bridge like ours.
#
# Interface indexes 0x100000 + (r << 10): DPDK 22.11's af_packet joins each socket to
# PACKET_FANOUT group (pid ^ ifindex) & 0xffff, and a group is one interface's, so two
# processes whose pid ^ ifindex agree cannot both open their port (about one 4-rank run
# in ten failed so with the kernel's consecutive indexes and mpirun's consecutive
# pids). Indexes 1024 apart collide only for pids differing in the same way.
bridge_n=0
bridge_down() {
    local r
    for ((r = 0; r < bridge_n; r++)); do
        ip netns del "ddmh$r" 2>/dev/null || true
        ip link del "ddmb$r" 2>/dev/null || true
        ip link del "ddmv$r" 2>/dev/null || true
    done
    ip link del ddmpi0 2>/dev/null || true
    # A namespace's veths go with it asynchronously: wait until they have (bounded).
    for ((r = 0; r < bridge_n; r++)); do
        for _ in $(seq 50); do ip link show "ddmb$r" >/dev/null 2>&1 || break; sleep 0.1; done
    done
}
bridge_up() {
    local r i ns index
    bridge_n=$1
    local mtu=${2:-1500} hosts=${3:-}
    (($(id -u) == 0)) || { echo "bridge: a bridge of veths needs root" >&2; exit 2; }
    trap bridge_down EXIT
    trap 'exit 143' INT TERM # a signal still removes them (through EXIT)
    bridge_down
    ip link add ddmpi0 mtu "$mtu" type bridge
    ip link set ddmpi0 up
    [[ -n $hosts ]] && ip addr add 10.89.0.254/24 dev ddmpi0
    for ((r = 0; r < bridge_n; r++)); do
        # (A fanout group is one namespace's: hosts need no index of ours, and Open
        # MPI's daemon finds no interface of such an index.)
        index=(index $((0x100000 + (r << 10))))
        [[ -n $hosts ]] && index=()
        ip link add "ddmv$r" "${index[@]}" mtu "$mtu" type veth peer name "ddmb$r" mtu "$mtu"
        for i in "ddmv$r" "ddmb$r"; do
            sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1"
        done
        ip link set "ddmb$r" master ddmpi0
        ip link set "ddmb$r" up
        ns=()
        if [[ -n $hosts ]]; then
            ip netns add "ddmh$r"
            ip link set "ddmv$r" netns "ddmh$r"
            ns=(-n "ddmh$r")
            ip "${ns[@]}" addr add "10.89.0.$((r + 1))/24" dev "ddmv$r"
            ip "${ns[@]}" link set lo up
        fi
        ip "${ns[@]}" link set "ddmv$r" up
    done
    # Up before the ranks open them (bounded).
    for ((r = 0; r < bridge_n; r++)); do
        ns=()
        [[ -n $hosts ]] && ns=(ip netns exec "ddmh$r")
        for _ in $(seq 100); do
            [[ $("${ns[@]}" cat "/sys/class/net/ddmv$r/operstate") == up ]] && break
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

# N senders and one receiver on one bridge whose port toward the receiver is shaped
# (sourced by scripts/bench.sh --shaped; root). `shaped_up P N RATE BURST LIMIT` makes
# namespaces ${P}s (the senders: veths ${P}s0 .. ${P}s<N-1>), ${P}r (the receiver:
# veth ${P}r0) and ${P}b, which holds bridge ${P}br and the veths' peers as its ports
# (${P}p<k> for sender k, ${P}pr for the receiver), MTU 1500, IPv6 off, and a `tbf`
# qdisc on ${P}pr's egress: `rate RATE burst BURST limit LIMIT` (tc's units). Kernel
# addresses, for kernel TCP: sender k 10.82.k.1/24 on ${P}s<k>, the receiver
# 10.82.k.100/24 for every k, so that each sender's route is its own veth (and in the
# senders' namespace arp_ignore=1, arp_announce=2: a veth answers ARP for its own
# address only). deposit's addresses (10.83.0.x) are not the kernel's: the kernels drop
# its UDP frames (not theirs, forwarding off) without an ICMP answer, and deposit does
# its own ARP. `shaped_down P` removes them all.
shaped_down() {
    local p=$1 ns
    for ns in "${p}s" "${p}r" "${p}b"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    # A namespace's veths go with it asynchronously (bounded wait).
    for _ in $(seq 50); do
        ip netns list | grep -q "^${p}[srb]\b" || break
        sleep 0.1
    done
}
shaped_up() {
    local p=$1 n=$2 rate=$3 burst=$4 limit=$5 k
    (($(id -u) == 0)) || { echo "bridge: namespaces and a bridge need root" >&2; exit 2; }
    shaped_down "$p"
    for ns in "${p}s" "${p}r" "${p}b"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    done
    ip netns exec "${p}s" sysctl -qw net.ipv4.conf.all.arp_ignore=1
    ip netns exec "${p}s" sysctl -qw net.ipv4.conf.all.arp_announce=2
    ip -n "${p}b" link add "${p}br" type bridge
    ip -n "${p}b" link set "${p}br" mtu 1500 up
    for ((k = 0; k < n; k++)); do
        ip -n "${p}s" link add "${p}s$k" mtu 1500 type veth peer name "${p}p$k" mtu 1500 netns "${p}b"
        ip -n "${p}b" link set "${p}p$k" master "${p}br" up
        ip -n "${p}s" addr add "10.82.$k.1/24" dev "${p}s$k"
        ip -n "${p}s" link set "${p}s$k" up
    done
    ip -n "${p}r" link add "${p}r0" mtu 1500 type veth peer name "${p}pr" mtu 1500 netns "${p}b"
    ip -n "${p}b" link set "${p}pr" master "${p}br" up
    for ((k = 0; k < n; k++)); do
        ip -n "${p}r" addr add "10.82.$k.100/24" dev "${p}r0"
    done
    ip -n "${p}r" link set "${p}r0" up
    tc -n "${p}b" qdisc add dev "${p}pr" root tbf rate "$rate" burst "$burst" limit "$limit"
    # Up, and the bridge's ports forwarding, before anything opens them (bounded).
    for _ in $(seq 100); do
        [[ $(ip netns exec "${p}r" cat "/sys/class/net/${p}r0/operstate") == up ]] && break
        sleep 0.05
    done
    sleep 1
}
