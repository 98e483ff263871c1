#!/usr/bin/env bash
# Usage: scripts/mpi.sh [-np N] [--over deposit|tcp|vader] [--bridge] [--check] [-- DDMPI_ARGS...]
# Builds mpi/ddmpi.c (the project's MPI benchmark and check: ping-pong latency,
# streaming and multi-pair bandwidth, MPI_Allreduce, MPI_Alltoall and a halo exchange
# checked for correctness; it does not know which network carries it) with mpicc, and
# runs it with Open MPI:
#   --over deposit  Open MPI's libfabric MTL on the deposit provider (scripts/fabric.sh
#                   builds it): --mca pml cm --mca mtl ofi --mca
#                   mtl_ofi_provider_include deposit; each rank's port is
#                   DEPOSIT_FI_DEV with the rank substituted: memif between 2 ranks,
#                   and with more ranks (or --bridge) af_packet on one veth per rank
#                   whose peers are ports of a Linux bridge, all in the root namespace
#                   so that mpirun's own channel works (root; removed at the end);
#   --over tcp      kernel TCP, --mca pml ob1 --mca btl self,tcp (the default);
#   --over vader    shared memory, the on-node reference.
# `--check` runs the checks only. As root, mpirun gets --allow-run-as-root; more ranks
# than cores are oversubscribed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
np=2
over=tcp
bridge=0
args=()
while (($#)); do
    case $1 in
        -np) np=${2:?}; shift 2 ;;
        --over) over=${2:?}; shift 2 ;;
        --check) args+=(--no-bench); shift ;;
        --bridge) bridge=1; shift ;;
        --) shift; args+=("$@"); break ;;
        *) echo "usage: $0 [-np N] [--over deposit|tcp|vader] [--bridge] [--check] [-- DDMPI_ARGS...]" >&2; exit 2 ;;
    esac
done
scripts/deps.sh
out=target/mpi
mkdir -p "$out"
mpicc -std=c11 -O2 -Wall -Wextra -Werror mpi/ddmpi.c -o "$out/ddmpi"
run=(mpirun -np "$np" --oversubscribe)
sock=
case $over in
    tcp | vader) run+=(--mca pml ob1 --mca btl "self,$over") ;;
    deposit)
        scripts/fabric.sh --build
        export FI_PROVIDER_PATH=$PWD/target/release
        if ((np > 2 || bridge)); then
            (($(id -u) == 0)) || { echo "mpi: a bridge of veths needs root" >&2; exit 2; }
            # shellcheck source=scripts/bridge.sh
            . scripts/bridge.sh
            bridge_up "$np"
            export DEPOSIT_FI_DEV=af_packet:ddmv%r
            echo "mpi: $np veths (ddmv0..) on bridge ddmpi0, af_packet on each"
        else
            sock=$(mktemp -u /tmp/deposit-mpi.XXXXXX)
            export DEPOSIT_FI_DEV=memif:$sock:%r
        fi
        run+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include deposit
            -x FI_PROVIDER_PATH -x DEPOSIT_FI_DEV)
        # DPDK's own log, when asked for (DEPOSIT_EAL_ARGS=--log-level=*:info).
        [[ -n ${DEPOSIT_EAL_ARGS:-} ]] && run+=(-x DEPOSIT_EAL_ARGS)
        ;;
    *) echo "mpi: --over deposit, tcp or vader" >&2; exit 2 ;;
esac
(($(id -u) == 0)) && run+=(--allow-run-as-root)
echo "== ${run[*]} $out/ddmpi ${args[*]}"
rc=0
timeout 600 "${run[@]}" "$out/ddmpi" "${args[@]}" || rc=$?
[[ -n $sock ]] && rm -f "$sock"
exit "$rc"
