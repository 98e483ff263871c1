#!/usr/bin/env bash
# Usage: scripts/fabric.sh [--build | --check | --bridge] [FI_PINGPONG_ARGS...]
# Builds the libfabric provider "deposit" (api/fabric/dfi_*.c over the C ABI; dfi.h
# says which file is which): target/release/libdeposit-fi.so, which libfabric loads
# from FI_PROVIDER_PATH. Then `fi_info -p deposit` must list it, and fi_pingpong runs
# between two processes over memif (FI_EP_RDM): with --check, with data checks (-c)
# in FI_MSG and FI_TAGGED mode over every size (-S all) with few iterations, the same
# over connected endpoints (FI_EP_MSG: passive endpoint, connect, accept), connection
# management's events checked (api/fabric/cm_check.c: reject, accept, private data,
# fi_getpeer, shutdown), then RMA
# and atomics checked byte for byte (api/fabric/rma_check.c), then wait objects,
# counters and iovecs (api/fabric/wait_check.c: fi_cq_sread asleep on FI_WAIT_FD,
# the FI_GETWAIT fd in epoll with fi_trywait, fi_cntr, fi_sendv/fi_recvv), then over
# congestion control from the environment (DEPOSIT_FI_CC_PATHS=4 shows in the peer line
# DEPOSIT_FI_STATS prints, DEPOSIT_FI_CC=off makes no peer context, a bad DEPOSIT_FI_CC
# fails the open), then over
# IPv6 (DEPOSIT_FI_IP fd77::1/64 and fd77::2/64: FI_TAGGED every size checked, FI_EP_MSG,
# connection management and the wait checks, whose names and fi_av_straddr it checks);
# otherwise with the given arguments
# (default: fi_pingpong's sizes, 10000 iterations), printing its table. --build only
# builds it. --bridge (root) runs fi_pingpong between two network namespaces whose
# veths are ports of one Linux bridge, for -p deposit (af_packet on the veth), -p tcp
# and -p udp (the kernel's stack on the same veths), one table each.
#
# Elsewhere:  FI_PROVIDER_PATH=$PWD/target/release DEPOSIT_FI_DEV=SPEC DEPOSIT_FI_IP=A.B.C.D \
#             fi_pingpong -p deposit -e rdm [server]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=0
build_only=0
bridge=0
[[ ${1:-} == --check ]] && { check=1; shift; }
[[ ${1:-} == --bridge ]] && { bridge=1; shift; }
[[ ${1:-} == --build ]] && { build_only=1; shift; }
scripts/deps.sh
cargo build --release -q -p deposit-capi
lib=$PWD/target/release
gcc -std=gnu11 -shared -fPIC -O2 -Wall -Wextra -Werror -Wno-strict-prototypes -Wno-old-style-definition \
    -I api/capi/include api/fabric/dfi_*.c -L "$lib" -ldeposit -Wl,-rpath,"$lib" -lfabric -lpthread \
    -o "$lib/libdeposit-fi.so"
((build_only)) && exit 0
export FI_PROVIDER_PATH=$lib
fi_info -p deposit | grep -q 'provider: deposit' || { echo "fabric: fi_info does not list the deposit provider" >&2; exit 1; }
echo "fabric: fi_info -p deposit lists it:"
fi_info -p deposit | sed 's/^/  /'

# fi_pingpong between two processes joined by memif, the server at ${ips[0]}, the
# client at ${ips[1]}.
ips=(10.77.0.1 10.77.0.2)
pingpong() {
    local s rc=0
    s=$(mktemp -u /tmp/deposit-fi.XXXXXX.sock)
    DEPOSIT_FI_DEV=memif:$s:server DEPOSIT_FI_IP=${ips[0]} timeout 300 fi_pingpong -p deposit -e rdm "$@" \
        >"$s.server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [[ -S $s ]] && break; sleep 0.05; done
    DEPOSIT_FI_DEV=memif:$s:client DEPOSIT_FI_IP=${ips[1]} timeout 300 fi_pingpong -p deposit -e rdm "$@" \
        localhost || rc=$?
    wait "$pid" || { echo "fabric: the fi_pingpong server failed:" >&2; cat "$s.server.log" >&2; rc=1; }
    rm -f "$s" "$s.server.log"
    return "$rc"
}

# Builds and runs api/fabric/NAME.c (it forks into two processes joined by memif).
check_prog() {
    local name=$1 what=$2 s rc=0
    shift 2
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror "api/fabric/$name.c" -lfabric -o "$lib/$name"
    s=$(mktemp -u "/tmp/deposit-$name.XXXXXX.sock")
    echo "== $name${*:+ $*} $what"
    timeout 120 "$lib/$name" "$s" "$@" || rc=$?
    rm -f "$s"
    ((rc == 0)) || { echo "fabric: $name $* failed" >&2; exit 1; }
}

# fi_pingpong -p PROV between namespaces ddfa (server) and ddfb over bridge ddfbr.
bridged() {
    local prov=$1 rc=0 log
    shift
    log=$(mktemp /tmp/deposit-fi-bridge.XXXXXX)
    ip netns exec ddfa env DEPOSIT_FI_DEV=af_packet:ddfv0 DEPOSIT_FI_IP=10.77.0.1 \
        timeout 300 fi_pingpong -p "$prov" -e rdm "$@" >"$log" 2>&1 &
    local pid=$!
    sleep 1
    ip netns exec ddfb env DEPOSIT_FI_DEV=af_packet:ddfv1 DEPOSIT_FI_IP=10.77.0.2 \
        timeout 300 fi_pingpong -p "$prov" -e rdm "$@" 10.78.0.1 || rc=$?
    wait "$pid" || { echo "fabric: the fi_pingpong -p $prov server failed:" >&2; cat "$log" >&2; rc=1; }
    rm -f "$log"
    return "$rc"
}
if ((bridge)); then
    (($(id -u) == 0)) || { echo "fabric: --bridge needs root (namespaces, a bridge)" >&2; exit 2; }
    # shellcheck source=scripts/bridge.sh
    . scripts/bridge.sh
    trap 'ns_pair_down ddf' EXIT
    trap 'exit 143' INT TERM # a signal still removes them (through EXIT)
    ns_pair_up ddf 1500 10.78.0
    if (($#)); then
        for prov in deposit tcp udp; do
            echo "== fi_pingpong -p $prov -e rdm $* (namespaces ddfa -> ddfb, veths on bridge ddfbr)"
            bridged "$prov" "$@"
        done
    else
        # One size at a time, the three providers in turn (the machine is shared:
        # interleaved, not one provider's whole sweep after another's).
        echo "== fi_pingpong -e rdm -I 2000 -S SIZE, namespaces ddfa -> ddfb over bridge ddfbr (veth MTU $(ip netns exec ddfa cat /sys/class/net/ddfv0/mtu))"
        printf '%-8s %8s %10s %10s\n' provider bytes usec/xfer MB/sec
        for size in 64 1024 4096 65536 1048576; do
            for prov in deposit tcp udp; do
                bridged "$prov" -I 2000 -S "$size" | awk -v p="$prov" '$1 ~ /^[0-9]/ {printf "%-8s %8s %10s %10s\n", p, $1, $7, $6}'
            done
        done
    fi
elif ((check)); then
    echo "== fi_pingpong -p deposit -e rdm -c -S all -I 20 (FI_MSG, every byte checked)"
    pingpong -c -S all -I 20 | tail -4
    echo "== fi_pingpong -p deposit -e rdm -m tagged -c -I 200 (FI_TAGGED)"
    pingpong -m tagged -c -I 200
    # A later -e wins: connected endpoints (passive endpoint, FI_CONNREQ, fi_accept,
    # FI_CONNECTED, fi_shutdown).
    echo "== fi_pingpong -p deposit -e msg -c -S all -I 20 (FI_EP_MSG, every byte checked)"
    pingpong -e msg -c -S all -I 20 | tail -4
    echo "== fi_pingpong -p deposit -e msg -m tagged -c -I 200 (FI_EP_MSG, FI_TAGGED)"
    pingpong -e msg -m tagged -c -I 200
    # RMA and atomics (api/fabric/rma_check.c): a target and an initiator over memif,
    # every byte of the target's region checked, with virtual addresses and offsets;
    # connection management (cm_check.c); wait objects, counters, iovecs (wait_check.c).
    check_prog rma_check "(fi_write/fi_read/fi_atomic/fi_fetch_atomic/fi_compare_atomic)"
    check_prog rma_check "(the same, FI_MR_VIRT_ADDR off)" --offsets
    check_prog cm_check "(FI_EP_MSG: FI_CONNREQ, fi_reject, fi_accept, FI_CONNECTED, fi_getpeer, fi_shutdown)"
    check_prog wait_check "(FI_WAIT_FD: fi_cq_sread, epoll + fi_trywait; fi_cntr; iovecs)"
    # Congestion control from the environment: the client's peer line (DEPOSIT_FI_STATS,
    # at the close) shows the 4 spray paths asked for; with DEPOSIT_FI_CC=off there is
    # no peer context; a value that is none of the words fails the open, naming it.
    echo "== fi_pingpong -p deposit -e rdm -m tagged -c -I 200, DEPOSIT_FI_CC_PATHS=4 DEPOSIT_FI_CC_TARGET_US=20"
    out=$(DEPOSIT_FI_STATS=1 DEPOSIT_FI_CC_PATHS=4 DEPOSIT_FI_CC_TARGET_US=20 pingpong -m tagged -c -I 200 2>&1) ||
        { printf '%s\n' "$out" >&2; exit 1; }
    peer=$(printf '%s\n' "$out" | grep -E "deposit-fi: rank 0 peer ${ips[0]} .* paths 4 \([2-4] in use\)") ||
        { printf '%s\n' "$out" >&2; echo "fabric: no peer line with 4 paths for ${ips[0]}" >&2; exit 1; }
    echo "  $peer"
    echo "== the same with DEPOSIT_FI_CC=off: no peer context"
    out=$(DEPOSIT_FI_STATS=1 DEPOSIT_FI_CC=off pingpong -m tagged -c -I 200 2>&1) ||
        { printf '%s\n' "$out" >&2; exit 1; }
    if printf '%s\n' "$out" | grep -q "deposit-fi: rank 0 peer "; then
        printf '%s\n' "$out" >&2
        echo "fabric: DEPOSIT_FI_CC=off still made a peer context" >&2
        exit 1
    fi
    printf '%s\n' "$out" | grep -q "deposit-fi: rank 0 frames_tx" ||
        { printf '%s\n' "$out" >&2; echo "fabric: DEPOSIT_FI_STATS printed no counters" >&2; exit 1; }
    echo "  no peer line, counters printed"
    echo "== DEPOSIT_FI_CC=bogus: the open fails and names it"
    # (wait_check, built above, opens its domain at once; fi_pingpong's server would
    # wait for its client first.)
    s=$(mktemp -u /tmp/deposit-fi.XXXXXX.sock)
    if out=$(DEPOSIT_FI_CC=on,bogus timeout 60 "$lib/wait_check" "$s" 2>&1); then
        printf '%s\n' "$out" >&2
        echo "fabric: DEPOSIT_FI_CC=on,bogus was accepted" >&2
        exit 1
    fi
    rm -f "$s"
    printf '%s\n' "$out" | grep "DEPOSIT_FI_CC on,bogus: 'bogus' is none of" ||
        { printf '%s\n' "$out" >&2; echo "fabric: no message naming DEPOSIT_FI_CC" >&2; exit 1; }
    # IPv6: the nodes at fd77::1 and fd77::2 (endpoint names carry 16-byte addresses).
    ips=(fd77::1/64 fd77::2/64)
    echo "== fi_pingpong -p deposit -e rdm -m tagged -c -S all -I 20 over IPv6 (DEPOSIT_FI_IP ${ips[*]})"
    pingpong -m tagged -c -S all -I 20 | tail -4
    echo "== fi_pingpong -p deposit -e msg -m tagged -c -I 200 over IPv6"
    pingpong -e msg -m tagged -c -I 200
    export DFI_CHECK_IPV6=1
    check_prog cm_check "over IPv6 (fd77::1, fd77::2)"
    check_prog wait_check "over IPv6 (fd77::1, fd77::2: names, fi_av_straddr)"
    unset DFI_CHECK_IPV6
else
    (($#)) || set -- -I 10000
    echo "== fi_pingpong -p deposit -e rdm $* (two processes, memif)"
    pingpong "$@"
fi
