#!/usr/bin/env bash
# Usage: scripts/mpi.sh [-np N] [--over deposit|tcp|vader] [--pml cm|ob1] [--bridge | --hosts]
#                      [--mtu M] [--gso-segs N] [--provider DIR] [--ipv6]
#                      [--check | --probes | --fi-peek | --compare [ROUNDS]] [-- PROGRAM_ARGS...]
# Builds mpi/ddmpi.c (the project's MPI benchmark and check: ping-pong latency,
# streaming and multi-pair bandwidth, MPI_Allreduce, MPI_Alltoall and a halo exchange
# checked for correctness; it does not know which network carries it) with mpicc, and
# runs it with Open MPI:
#   --over deposit  the deposit provider (scripts/fabric.sh builds it) under Open MPI's
#                   libfabric MTL: --mca pml cm --mca mtl ofi --mca
#                   mtl_ofi_provider_include deposit (--pml cm, the default: MPI
#                   matching is the provider's tagged receives and probes); or with
#                   --pml ob1 under its libfabric BTL: --mca pml ob1 --mca btl self,ofi
#                   --mca btl_ofi_provider_include deposit --mca btl_ofi_mode 2 (ob1
#                   matches; the BTL sends untagged messages and, for large ones, RMA
#                   reads and writes; its default mode 0 is one-sided only, no path
#                   between ranks). Each rank's port is DEPOSIT_FI_DEV with the rank
#                   substituted: memif between 2 ranks, and with more ranks (or
#                   --bridge) af_packet on one veth per rank whose peers are ports of a
#                   Linux bridge, all in the root namespace so that mpirun's own channel
#                   works (root; removed at the end);
#   --over tcp      kernel TCP, --mca pml ob1 --mca btl self,tcp (the default);
#   --over vader    shared memory, the on-node reference.
# `--probes` builds and runs mpi/probes.c instead: MPI matching checked (MPI_Iprobe,
# MPI_Probe, MPI_Improbe/MPI_Mprobe + MPI_Mrecv, wildcards and non-overtaking order,
# expected and unexpected messages, truncation, MPI_Cancel of receives; 0 bytes to
# 384 KiB); over pml cm without MPI_Mrecv of MPI_Issend messages, which Open MPI 4.1's
# ofi MTL never acknowledges (--no-ssend-mrecv, see mpi/probes.c).
# `--fi-peek` builds and runs mpi/fi_peek.c on 2 ranks: the provider's FI_PEEK,
# FI_CLAIM, FI_DISCARD and fi_cancel checked through libfabric itself (the completion
# entries, discarding, 1 MiB messages still arriving); MPI (--over tcp or vader) only
# starts the ranks and carries their endpoint names; they open the deposit provider
# themselves, joined by memif.
# `--hosts` (root) makes every rank a "host" of its own: a network namespace ddmh<r>
# whose veth ddmv<r> (10.89.0.<r+1>) is a port of the bridge, the daemons started in
# them by scripts/netns-rsh as mpirun's remote shell and reached over the bridge, so
# that kernel TCP between ranks crosses the same bridge as deposit's af_packet (without
# it TCP between ranks goes over loopback). `--mtu M` sets the bridge's and the veths'
# MTU (af_packet sizes its frames from it). `--static-macs` (bridge, not --hosts) gives
# every rank the others' veth MACs in a node table (DEPOSIT_FI_NODES): no ARP between
# the ranks. `--gso-segs N` (with --hosts) caps the
# segments of one kernel send on every veth and the bridge (`gso_max_segs`): with 1,
# kernel TCP puts one MTU-sized frame at a time on the wire, as deposit's af_packet port
# does, instead of 64 KiB super-frames the veths never split (a frame-rate comparison).
# `--ipv6` (--over deposit) puts the ranks on IPv6: DEPOSIT_FI_IP=fd77::1:%r/64 (rank r
# at fd77::1:r, the rank's decimal digits read as hex: up to 9999 ranks), so the
# provider's endpoint names, the mailboxes' hellos and every frame are IPv6 (MACs by
# neighbour discovery on a bridge, derived ones on memif).
# `--provider DIR` runs the provider built in DIR (its libdeposit-fi.so, found by
# FI_PROVIDER_PATH) instead of building this tree's: another version, for an A/B
# comparison with rounds interleaved.
# `--check` runs ddmpi's checks only; DDMPI_PROG=PROGRAM runs another MPI program
# instead (with PROGRAM_ARGS).
# `--compare [ROUNDS]` (2 ranks, memif) measures where MPI users look, rounds
# interleaved (default 3): ddmpi's bandwidth (windows of 64) and latency at 1 MiB and
# 4 MiB over deposit, beside `ddperf write_bw` at the same sizes on the same kind of
# port (two processes over memif), Open MPI TCP (loopback) and shared memory (vader);
# prints every round and the medians, with deposit's ratio to ddperf.
# As root, mpirun gets --allow-run-as-root; more ranks than cores are oversubscribed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
np=2
over=tcp
pml=
prog=ddmpi
check=0
bridge=0
static_macs=0
hosts=
mtu=1500
gso_segs=
provider=
args=()
compare=0
ipv6=0
while (($#)); do
    case $1 in
        --compare)
            compare=3
            [[ ${2:-} =~ ^[0-9]+$ ]] && { compare=$2; shift; }
            shift
            ;;
        -np) np=${2:?}; shift 2 ;;
        --over) over=${2:?}; shift 2 ;;
        --pml) pml=${2:?}; shift 2 ;;
        --check) check=1; shift ;;
        --probes) prog=probes; shift ;;
        --fi-peek) prog=fi_peek; shift ;;
        --bridge) bridge=1; shift ;;
        --hosts) bridge=1; hosts=hosts; shift ;;
        --static-macs) static_macs=1; shift ;;
        --mtu) mtu=${2:?}; shift 2 ;;
        --gso-segs) gso_segs=${2:?}; shift 2 ;;
        --provider) provider=$(realpath "${2:?}"); shift 2 ;;
        --ipv6) ipv6=1; shift ;;
        --) shift; args+=("$@"); break ;;
        *)
            echo "usage: $0 [-np N] [--over deposit|tcp|vader] [--pml cm|ob1] [--bridge | --hosts] [--mtu M]" \
                "[--gso-segs N] [--provider DIR] [--static-macs] [--ipv6] [--check | --probes | --fi-peek | --compare [ROUNDS]] [-- PROGRAM_ARGS...]" >&2
            exit 2
            ;;
    esac
done
if ((compare)); then
    # Each round: ddperf write_bw over memif at both sizes, then ddmpi over deposit, tcp
    # and vader; one table at the end.
    scripts/deps.sh
    cargo build --release -q -p ddperf
    dir=$(mktemp -d /tmp/deposit-mpicmp.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    for ((r = 1; r <= compare; r++)); do
        for size in 1048576 4194304; do
            s=$dir/memif.sock
            rm -f "$s"
            timeout 120 target/release/ddperf write_bw --server --dev "memif:$s:server" -s "$size" -n 2000 \
                >/dev/null 2>&1 &
            pid=$!
            for _ in $(seq 100); do [[ -S $s ]] && break; sleep 0.05; done
            timeout 120 target/release/ddperf write_bw --dev "memif:$s:client" -s "$size" -n 2000 --json \
                10.0.0.1 2>/dev/null | sed "s/^/round $r ddperf /" >>"$dir/out" || true
            wait "$pid" || true
        done
        for o in deposit tcp vader; do
            "$0" -np 2 --over "$o" -- -n 200 -m 4194304 2>/dev/null | sed "s/^/round $r $o /" >>"$dir/out" ||
                echo "mpi: round $r over $o failed" >&2
        done
    done
    python3 - "$dir/out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, r, what, rest = line.split(" ", 3)
    if what == "ddperf":
        j = json.loads(rest)
        rows.setdefault((what, "bw", j["bytes"]), []).append(j["bw_avg_mib_s"] * 1.048576)
        continue
    f = rest.split()
    if rest.startswith("# bandwidth"):
        rows["_mode"] = what + " bw"
    elif rest.startswith("# latency"):
        rows["_mode"] = what + " lat"
    elif rest.startswith("# multi-pair") or rest.startswith("check"):
        rows["_mode"] = None
    elif len(f) >= 2 and f[0].isdigit() and (rows.get("_mode") or "").startswith(what):
        kind = rows["_mode"].split()[1]
        if int(f[0]) in (0, 8, 1048576, 4194304):
            rows.setdefault((what, kind, int(f[0])), []).append(float(f[1]))
med = lambda k: statistics.median(rows[k]) if k in rows else float("nan")
print("# MPI ping-pong over memif (2 ranks) beside ddperf write_bw, %d rounds interleaved (medians)" % len([k for k in rows.get(("ddperf", "bw", 1048576), [])]))
print("# %-10s %14s %14s %8s %14s %14s" % ("bytes", "deposit MB/s", "ddperf MB/s", "ratio", "tcp MB/s", "vader MB/s"))
for size in (1048576, 4194304):
    d, p = med(("deposit", "bw", size)), med(("ddperf", "bw", size))
    print("  %-10d %14.0f %14.0f %8.2f %14.0f %14.0f" % (size, d, p, d / p, med(("tcp", "bw", size)), med(("vader", "bw", size))))
print("# latency RTT/2 [us]: %s" % ", ".join("%s %s B %.2f" % (o, s, med((o, "lat", s))) for o in ("deposit", "tcp", "vader") for s in (0, 1048576)))
for k in sorted(k for k in rows if k != "_mode"):
    print("#   rounds %s %s %s: %s" % (k[0], k[1], k[2], " ".join("%.1f" % v for v in rows[k])))
PY
    exit 0
fi
scripts/deps.sh
out=target/mpi
mkdir -p "$out"
((check)) && [[ $prog != ddmpi ]] && { echo "mpi: --check is ddmpi's" >&2; exit 2; }
((check)) && args=(--no-bench "${args[@]}")
run=(mpirun -np "$np" --oversubscribe)
sock=
case $over in
    tcp | vader | deposit) ;;
    *) echo "mpi: --over deposit, tcp or vader" >&2; exit 2 ;;
esac
case $over/$pml in
    deposit/ | deposit/cm) pml=cm ;;
    deposit/ob1 | tcp/ | tcp/ob1 | vader/ | vader/ob1) pml=ob1 ;;
    deposit/*) echo "mpi: --pml cm or ob1" >&2; exit 2 ;;
    *) echo "mpi: --pml: --over $over runs pml ob1 only" >&2; exit 2 ;;
esac
((ipv6)) && [[ $over != deposit ]] && { echo "mpi: --ipv6 is for --over deposit" >&2; exit 2; }
libs=()
if [[ $prog == fi_peek ]]; then
    [[ $over != deposit && -z $hosts ]] && ((np == 2 && !bridge)) ||
        { echo "mpi: --fi-peek: 2 ranks, MPI over tcp or vader (the ranks open deposit themselves)" >&2; exit 2; }
    libs=(-lfabric)
fi
mpicc -std=c11 -O2 -Wall -Wextra -Werror "mpi/$prog.c" "${libs[@]}" -o "$out/$prog"
[[ $prog == probes && $pml == cm ]] && args=(--no-ssend-mrecv "${args[@]}")
[[ -n $hosts && $over == vader ]] && { echo "mpi: vader is shared memory: not between --hosts" >&2; exit 2; }
if [[ -n $hosts ]] || { [[ $over == deposit ]] && ((np > 2 || bridge)); }; then
    (($(id -u) == 0)) || { echo "mpi: a bridge of veths needs root" >&2; exit 2; }
    # shellcheck source=scripts/bridge.sh
    . scripts/bridge.sh
    bridge_up "$np" "$mtu" "$hosts"
    if [[ -n $gso_segs ]]; then
        [[ -n $hosts ]] || { echo "mpi: --gso-segs is for --hosts" >&2; exit 2; }
        for ((r = 0; r < np; r++)); do
            ip -n "ddmh$r" link set "ddmv$r" gso_max_segs "$gso_segs"
            ip link set "ddmb$r" gso_max_segs "$gso_segs"
        done
        ip link set ddmpi0 gso_max_segs "$gso_segs"
        echo "mpi: gso_max_segs $gso_segs on the veths and the bridge"
    fi
    if [[ -n $hosts ]]; then
        hostfile=$out/hosts
        for ((r = 0; r < np; r++)); do echo "10.89.0.$((r + 1)) slots=1"; done >"$hostfile"
        # One rank per host; each host's daemon would bind its rank to the same
        # core 0 of this one machine, so no binding, and no hwloc runtime control:
        # its daemons' shared topology map, placed at an address chosen per daemon,
        # crashed one daemon now and then (hwloc_shmem_topology_write, SIGSEGV).
        run+=(--hostfile "$hostfile" --bind-to none --mca rtc ^hwloc --mca plm_rsh_agent "$PWD/scripts/netns-rsh"
            --mca oob_tcp_if_include 10.89.0.0/24 --mca btl_tcp_if_include 10.89.0.0/24)
        # The daemons share this machine's /tmp: keep PMIx's data in each one's memory.
        export PMIX_MCA_gds=hash
        echo "mpi: $np hosts (namespaces ddmh0..) on bridge ddmpi0, MTU $mtu"
    else
        echo "mpi: $np veths (ddmv0..) on bridge ddmpi0, MTU $mtu, af_packet on each"
    fi
fi
case $over in
    tcp | vader) run+=(--mca pml ob1 --mca btl "self,$over") ;;
    deposit)
        if [[ $pml == cm ]]; then
            run+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include deposit)
        else
            run+=(--mca pml ob1 --mca btl self,ofi --mca btl_ofi_provider_include deposit --mca btl_ofi_mode 2)
        fi
        ;;
esac
if [[ $over == deposit || $prog == fi_peek ]]; then
    if [[ -n $provider ]]; then
        [[ -f $provider/libdeposit-fi.so ]] || { echo "mpi: no libdeposit-fi.so in $provider" >&2; exit 2; }
        export FI_PROVIDER_PATH=$provider
    else
        scripts/fabric.sh --build
        export FI_PROVIDER_PATH=$PWD/target/release
    fi
    if ((np > 2 || bridge)); then
        export DEPOSIT_FI_DEV=af_packet:ddmv%r
    else
        sock=$(mktemp -u /tmp/deposit-mpi.XXXXXX)
        export DEPOSIT_FI_DEV=memif:$sock:%r
    fi
    run+=(-x FI_PROVIDER_PATH -x DEPOSIT_FI_DEV)
    if ((ipv6)); then
        export DEPOSIT_FI_IP=fd77::1:%r/64
        run+=(-x DEPOSIT_FI_IP)
        echo "mpi: the ranks on IPv6, DEPOSIT_FI_IP=$DEPOSIT_FI_IP"
    fi
    if ((${static_macs:-0})) && [[ $DEPOSIT_FI_DEV == af_packet:* && -z $hosts ]]; then
        # Every rank's veth MAC in a node table (static entries: no ARP between the
        # ranks), as a launcher that knows its hosts' addresses would hand them out.
        nodes=$out/nodes
        for ((r = 0; r < np; r++)); do
            mac=$(ip -o link show "ddmv$r" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
            if ((ipv6)); then
                echo "fd77::1:$r $mac 18515"
            else
                echo "10.77.$(((r + 1) >> 8)).$(((r + 1) & 255)) $mac 18515"
            fi
        done >"$nodes"
        export DEPOSIT_FI_NODES=$nodes
        run+=(-x DEPOSIT_FI_NODES)
        echo "mpi: static MACs of the $np ranks in $nodes (DEPOSIT_FI_NODES)"
    fi
    # DPDK's own log, when asked for (DEPOSIT_EAL_ARGS=--log-level=*:info).
    [[ -n ${DEPOSIT_EAL_ARGS:-} ]] && run+=(-x DEPOSIT_EAL_ARGS)
fi
(($(id -u) == 0)) && run+=(--allow-run-as-root)
prog=${DDMPI_PROG:-$out/$prog}
echo "== ${run[*]} $prog ${args[*]}"
rc=0
timeout 600 "${run[@]}" "$prog" "${args[@]}" || rc=$?
[[ -n $sock ]] && rm -f "$sock"
exit "$rc"
