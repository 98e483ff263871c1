#!/usr/bin/env bash
# Usage: scripts/mpi.sh [-np N] [--btl tcp|vader] [--check] [-- DDMPI_ARGS...]
# Builds mpi/ddmpi.c (the project's MPI benchmark and check: ping-pong latency,
# streaming and multi-pair bandwidth, MPI_Allreduce, MPI_Alltoall and a halo exchange
# checked for correctness; it does not know which network carries it) with mpicc, and
# runs it with Open MPI over the reference transports: `--btl tcp` (kernel TCP,
# `--mca pml ob1 --mca btl self,tcp`, the default) or `--btl vader` (shared memory, the
# on-node reference). `--check` runs the checks only. As root, mpirun gets
# --allow-run-as-root; more ranks than cores are oversubscribed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
np=2
btl=tcp
args=()
while (($#)); do
    case $1 in
        -np) np=${2:?}; shift 2 ;;
        --btl) btl=${2:?}; shift 2 ;;
        --check) args+=(--no-bench); shift ;;
        --) shift; args+=("$@"); break ;;
        *) echo "usage: $0 [-np N] [--btl tcp|vader] [--check] [-- DDMPI_ARGS...]" >&2; exit 2 ;;
    esac
done
case $btl in
    tcp | vader) ;;
    *) echo "mpi: --btl tcp or vader" >&2; exit 2 ;;
esac
scripts/deps.sh
out=target/mpi
mkdir -p "$out"
mpicc -std=c11 -O2 -Wall -Wextra -Werror mpi/ddmpi.c -o "$out/ddmpi"
run=(mpirun -np "$np" --oversubscribe --mca pml ob1 --mca btl "self,$btl")
(($(id -u) == 0)) && run+=(--allow-run-as-root)
echo "== ${run[*]} $out/ddmpi ${args[*]}"
timeout 600 "${run[@]}" "$out/ddmpi" "${args[@]}"
