#!/usr/bin/env bash
# Usage: scripts/fabric.sh [--build | --check] [FI_PINGPONG_ARGS...]
# Builds the libfabric provider "deposit" (api/fabric/deposit_fi.c over the C ABI):
# target/release/libdeposit-fi.so, which libfabric loads from FI_PROVIDER_PATH. Then
# `fi_info -p deposit` must list it, and fi_pingpong runs between two processes over
# memif (FI_EP_RDM): with --check, with data checks (-c) in FI_MSG and FI_TAGGED mode
# over every size (-S all) with few iterations, then RMA and atomics checked byte for
# byte (api/fabric/rma_check.c); otherwise with the given arguments
# (default: fi_pingpong's sizes, 10000 iterations), printing its table. --build only
# builds it.
#
# Elsewhere:  FI_PROVIDER_PATH=$PWD/target/release DEPOSIT_FI_DEV=SPEC DEPOSIT_FI_IP=A.B.C.D \
#             fi_pingpong -p deposit -e rdm [server]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=0
build_only=0
[[ ${1:-} == --check ]] && { check=1; shift; }
[[ ${1:-} == --build ]] && { build_only=1; shift; }
scripts/deps.sh
cargo build --release -q -p deposit-capi
lib=$PWD/target/release
gcc -std=gnu11 -shared -fPIC -O2 -Wall -Wextra -Werror -Wno-strict-prototypes -Wno-old-style-definition \
    -I api/capi/include api/fabric/deposit_fi.c -L "$lib" -ldeposit -Wl,-rpath,"$lib" -lfabric \
    -o "$lib/libdeposit-fi.so"
((build_only)) && exit 0
export FI_PROVIDER_PATH=$lib
fi_info -p deposit | grep -q 'provider: deposit' || { echo "fabric: fi_info does not list the deposit provider" >&2; exit 1; }
echo "fabric: fi_info -p deposit lists it:"
fi_info -p deposit | sed 's/^/  /'

# fi_pingpong between two processes joined by memif.
pingpong() {
    local s rc=0
    s=$(mktemp -u /tmp/deposit-fi.XXXXXX.sock)
    DEPOSIT_FI_DEV=memif:$s:server DEPOSIT_FI_IP=10.77.0.1 timeout 300 fi_pingpong -p deposit -e rdm "$@" \
        >"$s.server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [[ -S $s ]] && break; sleep 0.05; done
    DEPOSIT_FI_DEV=memif:$s:client DEPOSIT_FI_IP=10.77.0.2 timeout 300 fi_pingpong -p deposit -e rdm "$@" \
        localhost || rc=$?
    wait "$pid" || { echo "fabric: the fi_pingpong server failed:" >&2; cat "$s.server.log" >&2; rc=1; }
    rm -f "$s" "$s.server.log"
    return "$rc"
}

if ((check)); then
    echo "== fi_pingpong -p deposit -e rdm -c -S all -I 20 (FI_MSG, every byte checked)"
    pingpong -c -S all -I 20 | tail -4
    echo "== fi_pingpong -p deposit -e rdm -m tagged -c -I 200 (FI_TAGGED)"
    pingpong -m tagged -c -I 200
    # RMA and atomics (api/fabric/rma_check.c): a target and an initiator over memif,
    # every byte of the target's region checked, with virtual addresses and offsets.
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror api/fabric/rma_check.c -lfabric -o "$lib/rma_check"
    for mode in "" --offsets; do
        s=$(mktemp -u /tmp/deposit-rma.XXXXXX.sock)
        echo "== rma_check $mode (fi_write/fi_read/fi_atomic/fi_fetch_atomic/fi_compare_atomic)"
        rc=0
        timeout 120 "$lib/rma_check" "$s" ${mode:+"$mode"} || rc=$?
        rm -f "$s"
        ((rc == 0)) || { echo "fabric: rma_check $mode failed" >&2; exit 1; }
    done
else
    (($#)) || set -- -I 10000
    echo "== fi_pingpong -p deposit -e rdm $* (two processes, memif)"
    pingpong "$@"
fi
