#!/usr/bin/env bash
# Usage: scripts/test.sh [--quick]
# The whole suite: dependencies and hugepages, then rustfmt, clippy (-D warnings), a
# release build of ddperf, every test under cargo-nextest (one process per test: DPDK's
# EAL initialises once per process), the sans-IO layers' tests without DPDK, doctests,
# and a ddperf smoke run whose JSON output is checked. --quick skips rustfmt, clippy and doctests. Runs every step even after a
# failure, prints a summary, and exits non-zero if any step failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
for a in "$@"; do
    case $a in
        --quick) quick=1 ;;
        -h|--help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "test: unknown argument '$a' (usage: $0 [--quick])" >&2; exit 2 ;;
    esac
done

summary=()
failed=0
start_all=$SECONDS

# step NAME CMD...: runs CMD, records PASS/FAIL and the time taken, never exits.
step() {
    local name=$1 rc=0 t0=$SECONDS
    shift
    echo
    echo "=== $name: $*"
    "$@" || rc=$?
    local dt=$((SECONDS - t0))
    if ((rc == 0)); then
        summary+=("$(printf 'PASS  %-28s %5ds' "$name" "$dt")")
    else
        summary+=("$(printf 'FAIL  %-28s %5ds  (exit %d)' "$name" "$dt" "$rc")")
        failed=$((failed + 1))
    fi
}

# Runs one ddperf test on in-process loopback and checks that every line it prints on
# stdout is a JSON object with the keys of its kind (stderr passes through); with
# --verify also `"verify": "ok"`, with --faults the fault counters, with -q N
# `"queues": N`, with --workers N `"workers": N`.
smoke() {
    local test=$1 out rc=0
    shift
    out=$(timeout 120 target/release/ddperf "$test" --loopback --json "$@") || rc=$?
    if ((rc != 0)); then
        printf '%s\n' "$out"
        echo "test: ddperf $test exited with status $rc$( ((rc == 124)) && echo ' (timed out after 120 s)')" >&2
        return "$rc"
    fi
    printf '%s\n' "$out" | python3 -c '
import json, sys
test = sys.argv[1]
lat = ["test", "bytes", "iterations", "t_min_us", "t_typical_us", "t_avg_us",
       "t_p99_us", "t_p999_us", "t_max_us", "queues", "workers"]
bw = ["test", "bytes", "iterations", "bw_avg_mib_s", "msg_rate_mpps", "queues", "workers"]
need = lat if test.endswith("_lat") else bw
args = sys.argv[2].split()
if "--faults" in args:
    need = need + ["faults_dropped", "faults_duplicated", "faults_reordered",
                   "faults_corrupted", "retransmits"]
if "--verify" in args:
    need = need + ["verify"]
rows = 0
for n, line in enumerate(sys.stdin, 1):
    line = line.strip()
    if not line:
        continue
    try:
        row = json.loads(line)
    except ValueError as e:
        sys.exit(f"ddperf {test}: line {n} is not JSON ({e}): {line!r}")
    if not isinstance(row, dict):
        sys.exit(f"ddperf {test}: line {n} is not a JSON object: {line!r}")
    missing = [k for k in need if k not in row]
    if missing:
        sys.exit(f"ddperf {test}: line {n} lacks {missing}: {line!r}")
    if "--verify" in args and row["verify"] != "ok":
        sys.exit(f"ddperf {test}: line {n} says verify {row['verify']!r}: {line!r}")
    if "-q" in args and row["queues"] != int(args[args.index("-q") + 1]):
        sys.exit(f"ddperf {test}: line {n} says queues {row['queues']!r}: {line!r}")
    if "--workers" in args and row["workers"] != int(args[args.index("--workers") + 1]):
        sys.exit(f"ddperf {test}: line {n} says workers {row['workers']!r}: {line!r}")
    if "--secure" in args and row.get("secure") is not True:
        sys.exit(f"ddperf {test}: line {n} is not over secure connections: {line!r}")
    rows += 1
    fmt = ("  {test} {bytes} B x {iterations}: typical {t_typical_us} us, p99 {t_p99_us} us"
           if test.endswith("_lat") else
           "  {test} {bytes} B x {iterations}: {bw_avg_mib_s} MiB/s, {msg_rate_mpps} Mpps")
    print(fmt.format_map(row))
if rows == 0:
    sys.exit(f"ddperf {test}: printed no JSON lines")
' "$test" "$*"
}

# DPDK's own start-up and exit messages ("EAL: No free ... hugepages", a memif driver's
# "Failed to register mp action callback", "EAL: Error: Invalid memory" at exit) looked
# like failures to a new user: quiet by default, shown with -v. Both sides of a memif
# pair (two processes) and a ring loopback.
quiet_dpdk() {
    local d s err
    d=$(mktemp -d /tmp/deposit-quiet.XXXXXX)
    s="$d/memif.sock"
    timeout 60 target/release/ddperf write_lat --server --dev "memif:$s:server" -n 2000 \
        >/dev/null 2>"$d/server" &
    local pid=$!
    for _ in $(seq 100); do [[ -S $s ]] && break; sleep 0.05; done
    err=0
    timeout 60 target/release/ddperf write_lat --dev "memif:$s:client" -n 2000 10.0.0.1 \
        >/dev/null 2>"$d/client" || err=1
    wait "$pid" || err=1
    timeout 60 target/release/ddperf raw_lat --loopback -n 1000 >/dev/null 2>"$d/loop" || err=1
    timeout 60 target/release/ddperf raw_lat --loopback -n 1000 -v >/dev/null 2>"$d/verbose" ||
        err=1
    if ((err)); then
        for f in server client loop verbose; do [[ -f $d/$f ]] && cat "$d/$f" >&2; done
        rm -rf "$d"
        return 1
    fi
    for f in server client loop; do
        if grep -E '^(EAL|MEMIF|rte_|PMD|ETHDEV)|Error' "$d/$f"; then
            echo "test: DPDK printed on stderr ($f side, above)" >&2
            err=1
        fi
    done
    if ! grep -q '^EAL:' "$d/verbose"; then
        echo "test: ddperf -v shows no DPDK log" >&2
        err=1
    fi
    rm -rf "$d"
    return "$err"
}

# DPDK telemetry shows a running `ddperf --server`'s counters: while a client streams
# into it over memif, dpdk-telemetry.py (package dpdk-dev), pointed at the server's
# socket (found by the pid in its greeting), answers /deposit/stats with messages
# received and /deposit/conns with the client's connection.
telemetry_step() {
    local d s err=0
    d=$(mktemp -d /tmp/deposit-telemetry.XXXXXX)
    s="$d/memif.sock"
    timeout 90 target/release/ddperf write_bw --server --dev "memif:$s:server" -s 32 \
        -n 20000000 >/dev/null 2>"$d/server" &
    local server=$!
    for _ in $(seq 100); do [[ -S $s ]] && break; sleep 0.05; done
    timeout 90 target/release/ddperf write_bw --dev "memif:$s:client" -s 32 -n 20000000 \
        10.0.0.1 >/dev/null 2>"$d/client" &
    local client=$!
    # The server process itself (timeout's child): the greeting names its pid.
    local spid=""
    for _ in $(seq 100); do spid=$(pgrep -P "$server" | head -1) && [[ -n $spid ]] && break; sleep 0.05; done
    python3 - "${spid:-0}" <<'PY' || err=1
import glob, json, os, socket, subprocess, sys, time
pid = int(sys.argv[1])
def find():
    for path in glob.glob("/var/run/dpdk/*/dpdk_telemetry.v2*"):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(2)
            s.connect(path)
            hello = json.loads(s.recv(16384))
            s.close()
        except OSError:
            continue
        if hello.get("pid") == pid:
            return path
deadline = time.time() + 30
while time.time() < deadline:
    path = find()
    if path:
        break
    time.sleep(0.1)
else:
    sys.exit("test: no telemetry socket of the ddperf server (pid %d)" % pid)
prefix = os.path.basename(os.path.dirname(path))
name = os.path.basename(path)
instance = int(name.split(":")[1]) if ":" in name else 0
while time.time() < deadline:
    out = subprocess.run(["dpdk-telemetry.py", "-f", prefix, "-i", str(instance)],
                         input="/deposit/stats\n/deposit/conns\n/deposit/drops\n",
                         capture_output=True, text=True, timeout=20).stdout
    answers = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    got = {k: v for a in answers for k, v in a.items()}
    stats, conns = got.get("/deposit/stats", {}), got.get("/deposit/conns", {})
    if stats.get("msgs_rx", 0) > 0 and conns.get("total", 0) >= 1:
        print("telemetry: server pid %d: msgs_rx %d, frames_rx %d, %d connection(s), %d drop reasons"
              % (pid, stats["msgs_rx"], stats["frames_rx"], conns["total"],
                 len(got.get("/deposit/drops", {}))))
        sys.exit(0)
    time.sleep(0.2)
sys.exit("test: dpdk-telemetry.py showed no traffic: " + out)
PY
    wait "$client" || err=1
    wait "$server" || err=1
    if ((err)); then
        cat "$d/server" "$d/client" >&2
    fi
    rm -rf "$d"
    return "$err"
}

# The sans-IO layers of deposit-transport build and test with no DPDK at all (issue
# 10), and so does the deposit API itself on its `sim` driver (in-process segments,
# issue 36): pkg-config is pointed nowhere, dpdk-sys is not in either dependency tree,
# and the test binaries link no rte_ symbol and no librte library.
sans_io() {
    local bins
    bins=$(sans_io_crate deposit-transport) || return 1
    bins+=$'\n'$(sans_io_crate deposit --features sim --lib --tests) || return 1
    [[ -n ${bins//$'\n'/} ]] || { echo "test: no sans-IO test binary" >&2; return 1; }
    for b in $bins; do
        if nm "$b" | grep -q ' rte_' || ldd "$b" | grep -q librte; then
            echo "test: $b links DPDK" >&2
            return 1
        fi
        echo "  $(basename "$b"): no rte_ symbol, no librte library"
    done
}

# sans_io_crate CRATE [--features F] [TARGETS...]: checks that CRATE without its
# default features (and with F) has no dpdk-sys in its tree, runs its tests (TARGETS)
# with pkg-config pointed nowhere, and prints the paths of the test binaries.
sans_io_crate() {
    local crate=$1 features=()
    shift
    if [[ ${1:-} == --features ]]; then
        features=(--features "$2")
        shift 2
    fi
    local nodpdk=(env PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH=/nonexistent)
    local args=(-p "$crate" --no-default-features "${features[@]}")
    if cargo tree "${args[@]}" -e normal --prefix none | grep -q '^dpdk-sys'; then
        echo "test: dpdk-sys is still a dependency of $crate without the dpdk feature" >&2
        return 1
    fi
    "${nodpdk[@]}" cargo test "${args[@]}" "$@" >&2 || return 1
    "${nodpdk[@]}" cargo test "${args[@]}" "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])'
}

# The programs of examples/ a user copies from: each checks its own result and exits
# non-zero on a failure (barrier.sh builds its three-node topology, or says "skipped"
# without root).
examples() {
    local e rc=0
    for e in hello memif priority_queue instruction_pointers tokens; do
        echo "--- example $e"
        timeout 120 cargo run -q -p deposit --example "$e" || {
            echo "test: example $e failed" >&2
            rc=1
        }
    done
    # The simulated incast (issue 38), small: it completes and verifies its data.
    echo "--- example incast (sim fabric, 16:1)"
    timeout 300 cargo run -q --release -p deposit-transport --example incast -- --senders 16 --msg-kib 256 || {
        echo "test: example incast failed" >&2
        rc=1
    }
    echo "--- examples/barrier.sh"
    timeout 120 examples/barrier.sh || {
        echo "test: examples/barrier.sh failed" >&2
        rc=1
    }
    return "$rc"
}

step deps scripts/deps.sh
step hugepages scripts/hugepages.sh
if ((!quick)); then
    step fmt cargo fmt --all -- --check
    step clippy cargo clippy --workspace --all-targets -- -D warnings
fi
# The transport's modules import one another without a cycle (the checker first shows
# that it finds a planted one).
step "module import cycles" sh -c 'python3 scripts/modcycles.py --self-test && python3 scripts/modcycles.py transport/src'
# The API documentation builds without a warning (a broken link is one), links nowhere
# into the transport crate's (every type of the API is deposit's own: its own or
# re-exported at its root), and every file of the repository it names exists.
api_docs() {
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace || return 1
    # Rendered again now that the transport's pages exist, so that a link into them shows.
    touch api/src/lib.rs
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p deposit || return 1
    local bad f
    bad=$(grep -rhoE 'href="[^"]*deposit_transport/[^"]*"' target/doc/deposit | grep -v '/src/' | sort -u || true)
    if [[ -n $bad ]]; then
        echo "test: deposit's documentation links into deposit_transport:" >&2
        echo "$bad" >&2
        return 1
    fi
    for f in $(grep -rhoE '(docs|scripts|examples)/[A-Za-z0-9_./-]+\.(md|sh|rs)' --include=*.rs api transport perf tests README.md | sort -u); do
        [[ -e $f ]] || { echo "test: the documentation names $f, which does not exist" >&2; return 1; }
    done
    if grep -rnE 'DESIGN\.md|\.\./shared' --include=*.rs --include=*.md api transport perf tests docs README.md; then
        echo "test: the documentation names files outside the repository (above)" >&2
        return 1
    fi
}

# ddperf --plot: a latency picture (histogram, CDF, percentiles marked), one of
# percentiles by size, a bandwidth one, and bench.sh's rows; each file must be drawn
# and carry its marks.
plots() {
    local d rc=0
    d=$(mktemp -d /tmp/deposit-plots.XXXXXX)
    timeout 60 target/release/ddperf write_lat --loopback -s 32 -n 5000 --plot "$d/lat.svg" >/dev/null &&
        timeout 60 target/release/ddperf read_lat --loopback -a -n 200 --plot "$d/lat_a.png" >/dev/null &&
        timeout 60 target/release/ddperf write_bw --loopback -a -n 500 --plot "$d/bw.svg" >/dev/null &&
        printf 'ring: 32 B msg rate [Mpps]\t9.1\t41.2\nmemif: BW [MiB/s]\t3100\t3500\n' >"$d/rows.tsv" &&
        target/release/ddperf --plot-bench "$d/rows.tsv" --plot "$d/bench.png" || rc=1
    if ((rc == 0)); then
        grep -q 'p99.9' "$d/lat.svg" || { echo "test: the latency picture marks no p99.9" >&2; rc=1; }
        grep -q 'message rate' "$d/bw.svg" || { echo "test: the bandwidth picture has no message rate" >&2; rc=1; }
        for f in lat_a bench; do
            [[ $(head -c 4 "$d/$f.png" | od -An -c | tr -d ' ') == 211PNG ]] ||
                { echo "test: $f.png is not a PNG" >&2; rc=1; }
        done
    fi
    rm -rf "$d"
    return "$rc"
}

step "build ddperf (release)" cargo build --release -p ddperf
step "nextest" cargo nextest run --workspace --no-fail-fast
# The same tests on devices of two worker shards (ring: a queue pair per shard; memif:
# one shared by software dispatch): endpoints go round-robin over the shards.
step "nextest, 2 workers" env DEPOSIT_WORKERS=2 cargo nextest run --workspace --no-fail-fast
step "sans-IO without DPDK" sans_io
if ((!quick)); then
    step doctests cargo test --doc --workspace
    step "API documentation" api_docs
fi
step "DPDK quiet by default" quiet_dpdk
step "DPDK telemetry" telemetry_step
step examples examples
# The C ABI: libdeposit.so/.a, include/deposit.h as the source gives it, the C examples
# built with gcc (shared and static) and run.
step "C ABI" scripts/capi.sh --check
# The project's MPI program (mpi/ddmpi.c): its correctness checks on 2 and 4 ranks over
# Open MPI's TCP transport, the reference the deposit provider is measured against.
step "MPI checks, 2 ranks (tcp)" scripts/mpi.sh -np 2 --check
step "MPI checks, 4 ranks (tcp)" scripts/mpi.sh -np 4 --check
# MPI matching (mpi/probes.c: probes, matched probes, wildcards, order, truncation,
# cancel) over kernel TCP: the reference that checks the checks.
step "MPI probes, 2 ranks (tcp)" scripts/mpi.sh -np 2 --probes
step "MPI probes, 4 ranks (tcp)" scripts/mpi.sh -np 4 --probes
# The libfabric provider: fi_info lists it, fi_pingpong (FI_MSG and FI_TAGGED, every
# byte checked) between two processes over memif, RMA and atomics (rma_check), wait
# objects, counters and iovecs (wait_check: fi_cq_sread asleep on FI_WAIT_FD, the fd
# in epoll); its probes (FI_PEEK, FI_CLAIM, FI_DISCARD, fi_cancel) through libfabric
# itself; then the MPI program on 2 ranks over
# it: Open MPI's mtl ofi (pml cm: the provider matches and probes), the same checks and
# the MPI matching checks, and ddmpi's checks under pml ob1 (its btl ofi). The provider's
# checks run over IPv6 too (fabric.sh --check's last steps), and so do ddmpi's checks and
# the MPI matching checks on 2 ranks (--ipv6: the ranks at fd77::1:r).
step "libfabric provider" scripts/fabric.sh --check
step "libfabric probes (memif)" scripts/mpi.sh --fi-peek
step "MPI over deposit, 2 ranks (memif)" scripts/mpi.sh -np 2 --over deposit -- -n 200 -m 65536
step "MPI probes over deposit, 2 ranks (memif)" scripts/mpi.sh -np 2 --over deposit --probes
step "MPI over deposit, pml ob1, 2 ranks (memif)" scripts/mpi.sh -np 2 --over deposit --pml ob1 --check
step "MPI over deposit, IPv6, 2 ranks (memif)" scripts/mpi.sh -np 2 --over deposit --ipv6 --check
step "MPI probes over deposit, IPv6, 2 ranks (memif)" scripts/mpi.sh -np 2 --over deposit --ipv6 --probes
# 4 ranks on an L2 switch: one veth per rank on a Linux bridge, af_packet on each (root);
# 64 ranks so (oversubscribed: about a minute on 2 cores), the provider having no limit
# on peers. Then 2 ranks as 2 hosts: each rank in a network namespace of its own on the
# bridge, started by mpirun through scripts/netns-rsh, over deposit and over kernel TCP
# (which then crosses the bridge too).
if (($(id -u) == 0)); then
    step "MPI over deposit, 4 ranks (bridge)" scripts/mpi.sh -np 4 --over deposit -- -n 100 -m 16384
    step "MPI probes over deposit, 4 ranks (bridge)" scripts/mpi.sh -np 4 --over deposit --probes
    # IPv6 on the bridge: MACs by neighbour discovery, every frame UDP over IPv6.
    step "MPI checks over deposit, IPv6, 4 ranks (bridge)" scripts/mpi.sh -np 4 --over deposit --ipv6 --check
    # 64 ranks on 2 cores: each rank gets the others' MACs in a node table (ARP among 64
    # oversubscribed ranks lost connects now and then: issue 37's note); the 4-rank and
    # 2-host steps resolve by ARP.
    step "MPI checks over deposit, 64 ranks (bridge)" scripts/mpi.sh -np 64 --over deposit --check --static-macs
    step "MPI over deposit, 2 hosts (bridge)" scripts/mpi.sh -np 2 --hosts --over deposit -- -n 100 -m 16384
    step "MPI checks, 2 hosts (tcp)" scripts/mpi.sh -np 2 --hosts --check
    # Nodes with nothing configured but their IPs: kernel MACs and ARP on a bridge,
    # ping/arping from a kernel host, an unresolved peer's error, a routed pair.
    step "neighbours: ARP, ping, next hops (namespaces)" scripts/neigh.sh
else
    echo "== SKIPPED: MPI over deposit, 4 and 64 ranks and 2 hosts (bridge): a bridge of veths needs root"
fi
step "ddperf --plot" plots
step "smoke write_lat" smoke write_lat -s 32 -n 2000
step "smoke write_bw" smoke write_bw -s 32 -n 100000
# -q: writes spread round-robin over many connections (issue 11), checked; and far
# more connections than writes in flight.
step "smoke write_bw -q 1000" smoke write_bw -s 32 -n 100000 -q 1000 --verify
step "smoke write_bw -q 20000" smoke write_bw -s 32 -n 100000 -q 20000
step "smoke append_bw -q 20000" smoke append_bw -s 32 -n 100000 -q 20000 --verify
step "smoke write_bw --post-list" smoke write_bw -s 32 -n 100003 -q 5 -l 8 --verify
step "smoke write_bw --post-list 64" smoke write_bw -s 32 -n 100000 -l 64 --verify
step "smoke append_bw --post-list" smoke append_bw -s 32 -n 10001 -q 3 -l 7 --verify
step "smoke write_bw --workers 2" smoke write_bw -s 32 -n 100000 -q 64 --workers 2 --verify
step "smoke write_bw --workers 2 dedicated" smoke write_bw -s 1024 -n 20000 -q 8 --workers 2 --worker dedicated --verify
# Instruction-pointer messages and payload tokens.
step "smoke ip_lat" smoke ip_lat -s 32 -n 2000
step "smoke ip_bw" smoke ip_bw -s 32 -n 100000
step "smoke token_lat" smoke token_lat -s 32 -n 2000
step "smoke raw_bw" smoke raw_bw -s 64 -n 100000
step "smoke bench ipmsg" timeout 120 cargo bench -q -p deposit --bench ipmsg -- 1
# --verify on every transport test, clean and with --faults (issue 4 item 7), and over
# secure connections (issue 14: every frame sealed).
faults=loss=0.05,reorder=0.02,dup=0.02,corrupt=0.001,seed=7
step "verify write_bw faults" smoke write_bw -s 4096 -n 200000 --faults $faults --verify
step "verify atomic_bw faults" smoke atomic_bw -n 200000 --faults $faults --verify
step "verify append_bw faults" smoke append_bw -s 4096 -n 200000 --faults $faults --verify
for t in write_lat write_bw read_lat read_bw atomic_lat atomic_bw send_lat send_bw append_bw \
    ip_lat ip_bw token_lat; do
    case $t in
        atomic_*) size=() ;;
        *) size=(-s 1024) ;;
    esac
    case $t in
        *_lat) n=2000 ;;
        *) n=20000 ;;
    esac
    step "verify $t" smoke $t "${size[@]}" -n $n --verify
    step "verify $t faults" smoke $t "${size[@]}" -n $n --faults $faults --verify
    step "verify $t --workers 2" smoke $t "${size[@]}" -n $n --workers 2 --verify
    step "verify $t --secure" smoke $t "${size[@]}" -n $n --secure --verify
done
step "verify write_bw --secure faults" smoke write_bw -s 4096 -n 100000 --secure --faults $faults --verify
step "verify atomic_bw --secure faults" smoke atomic_bw -n 100000 --secure --faults $faults --verify
step "verify write_bw --secure -q 1000" smoke write_bw -s 32 -n 100000 -q 1000 --secure --verify
step "verify write_bw --secure --workers 2" smoke write_bw -s 1024 -n 20000 -q 8 --workers 2 --secure --verify
step "verify atomic_lat cas" smoke atomic_lat -A CMP_AND_SWAP -n 2000 --faults $faults --verify
step "verify atomic_bw cas" smoke atomic_bw -A CMP_AND_SWAP -n 20000 --faults $faults --verify
step "verify write_bw -a" smoke write_bw -a -n 200 --verify
step "verify ip_bw -a" smoke ip_bw -a -n 200 --verify
step "verify token_lat -a" smoke token_lat -a -n 200 --verify

echo
echo "=== summary ($((SECONDS - start_all)) s$( ((quick)) && echo ', --quick'))"
printf '%s\n' "${summary[@]}"
if ((failed)); then
    echo "$failed step(s) failed"
    exit 1
fi
echo "all steps passed"
