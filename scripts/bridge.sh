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
