#!/usr/bin/env bash
# Usage: scripts/bench.sh [--plot FILE] [ROUNDS]
#        scripts/bench.sh --compare OLD_DDPERF [ROUNDS]
#        scripts/bench.sh --netns [ROUNDS]      (root)
#        scripts/bench.sh --shaped [ROUNDS]     (root)
#        scripts/bench.sh --secure [ROUNDS]
# The foundation benchmarks with their raw-DPDK baselines from the same run, rounds
# interleaved (the machine is shared and noisy), medians reported:
#   * 32 B write message rate (write_bw) vs raw_bw frame rate, ring loopback, at
#     perftest's default tx depth (128, signaled every 100th), at -t 1024, and posted
#     in lists of 16 (-l 16: Connection::post_list, the last of each list signaled);
#   * write_lat vs raw_lat, ring loopback (t_typical, RTT/2);
#   * write_lat vs raw_lat, two processes over memif;
#   * 64 KiB write_bw bandwidth vs raw_bw at the largest frame a memif port allows
#     (--max-frame 9600 on both; raw_bw's default size fills one frame), two processes
#     over memif; target >= 0.8; and the same with the receiver a zero-copy memif client
#     (`memif:SOCK:client:zero-copy`), target >= 0.9;
#   * read_lat and atomic_lat (full RTT, perftest) vs raw_lat's RTT (2 x t_typical),
#     ring loopback;
#   * append_bw (many senders, one queue by post-increment on a global register) with
#     -q 1 and -q 16, 32 B, ring loopback: message rates and their ratio;
#   * 32 B write_bw message rate on 1 connection vs spread round-robin over 10 000
#     (-q 1 vs -q 10000; -t 128 per connection, at most 4096 in flight in all: 128
#     vs 4096 writes in flight, the latter one per connection, each signaled), ring
#     loopback; target: a drop of at most 10 %;
#   * compound vs plain write message rate, 32 B, ring loopback: write_bw --compound
#     (per message: indirect address generation, two register ops, a conditional) over
#     write_bw; target >= 0.67 (a compound op at most 1.5x the cost of a plain write);
#   * under injected loss (ring loopback, --faults loss=P,seed=7): write_bw 4 KiB at
#     0.1 % and 1 % over lossless (goal at 1 %: >= 0.70), write_lat 32 B p99.9 at 0.1 %;
#   * instruction-pointer messages vs the direct form, 32 B, ring loopback: ip_lat over
#     write_lat and write_bw over ip_bw (goal <= 1.2 each); token_lat (a deposit with a
#     payload token plus a fresh token coming back, RTT/2). The same comparison in one
#     process, rounds interleaved more finely, follows from `cargo bench --bench ipmsg`;
#   * server shards: 32 B write_bw -q 8 over memif against one inline client, the
#     server (dedicated) with --workers 2 over --workers 1 (this machine has 2 cores:
#     scaling past them cannot be shown here);
#   * an idle server: `ddperf write_lat --server` on a memif port with no client, with
#     --worker dedicated and --worker inline: CPU use in % of one core (utime + stime
#     of /proc/PID/stat) over 5 s after 2 s of start-up; target < 5 % each;
#   * an idle device: first-write latency after idle gaps and CPU use at rest
#     (`cargo bench --bench wake`);
#   * the per-message cost of the protocol in one shard's node, sender and receiver,
#     with no I/O (`cargo bench --bench node`);
#   * 100 000 idle connections: resident memory per node and per connection, and a
#     write's round trip among them (`cargo bench --bench conns`).
# With --compare, a before/after run instead: the regression set of a change (32 B
# write_bw, write_bw --compound and its ratio to write_bw, write_lat on ring and memif,
# read_lat, atomic_lat, and raw_lat as the baseline) from this tree's ddperf and from
# OLD_DDPERF (a ddperf built from the earlier commit), the two alternating in every
# round (which goes first alternates too), medians of each and the median of the
# per-round new/old ratios.
# Ratios of rows marked "of rounds" are the median of the per-round ratios (each
# round's pair ran back to back); the others are ratios of the medians.
# With --netns, kernel interfaces instead (root): two network namespaces whose veths are
# ports of one Linux bridge, at MTU 1500 and at MTU 9000 (jumbo): 64 KiB write_bw over
# af_packet on the veths next to kernel TCP on the same veths (iperf3, 64 KiB writes,
# one stream), the two alternating in every round; medians in MiB/s. Namespaces and
# bridge are removed at the end.
# With --shaped, issue 38's congestion benchmark on a real bridge instead (root): a
# Linux bridge (in a namespace of its own) whose port toward the receiver is shaped by
# `tbf` (rate SHAPED_RATE, default 1gbit; burst SHAPED_BURST, default 64k; queue
# SHAPED_LIMIT, default 300k bytes), SENDERS (default 4) senders on their own veths in
# one namespace, one receiver in another, MTU 1500; SHAPED_OPTS, ddperf options for
# both sides of every deposit run (e.g. "--min-retry-timeout-us 5000" on a loaded host). Each round, in turn (the order
# rotating per round): `ddperf incast_bw`, one process whose one thread drives a device
# per sender (af_packet), against a receiver process (af_packet) — with congestion
# control's defaults; with a target delay of SHAPED_TARGET_US (default 1000 µs, above
# what this host's scheduling adds to a round trip); with the receiver's line rate set
# to the shaped rate (--line-mbps), alone and with that target; and with --no-cc — and
# kernel TCP: SENDERS iperf3 clients at once,
# each bound to its own sender veth (--bind-dev), 64 KiB writes, to as many iperf3
# servers. Each run streams SHAPED_SECS (default 5) seconds after 1 s untimed.
# Medians: goodput in Mb/s of payload and as a fraction of the shaped rate (target >=
# 0.9), Jain's index over the flows (target >= 0.95) and its least over 100 ms
# windows, retransmitted % (deposit: payload bytes retransmitted of payload bytes sent; TCP:
# retransmitted segments x 1448 B of bytes sent; target < 1), the tbf's drops, and for
# deposit the share of the time its sender's and receiver's threads were on a CPU (from
# /proc/thread-self/schedstat: spinning sides on a shared 2-core machine lose theirs).
# Namespaces, bridge and qdisc are removed at the end.
# With --secure, the cost of secure connections (docs/design.md §10) instead: two
# processes over memif, each test plain and with --secure back to back (which goes first
# alternates), raw_lat as the baseline: 4 KiB write_bw (target: secure/plain >= 0.7),
# 32 B write_lat t_typical (target: secure <= 1.3x plain), 64 KiB write_bw at 9014-byte
# frames; and in one process (ring loopback, both sides on one core) the same 4 KiB
# write_bw. Ratios are the median of the per-round ratios.
# With --plot FILE (.svg or .png), each row of the deposit/raw table is also drawn into
# FILE: deposit's median next to its raw-DPDK baseline's (`ddperf --plot-bench`).
# Needs a release build (scripts/run.sh or `cargo build --release -p ddperf`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
old=
plot=
if [[ ${1:-} == --plot ]]; then
    plot=${2:?usage: $0 --plot FILE [ROUNDS]}
    [[ $plot == /* ]] || plot=$PWD/$plot
    shift 2
fi
if [[ ${1:-} == --compare ]]; then
    old=${2:?usage: $0 --compare OLD_DDPERF [ROUNDS]}
    [[ -x $old ]] || { echo "bench: $old is not an executable" >&2; exit 2; }
    shift 2
fi
if [[ ${1:-} == --netns ]]; then
    netns=1
    shift
fi
if [[ ${1:-} == --shaped ]]; then
    shaped=1
    shift
fi
if [[ ${1:-} == --secure ]]; then
    secure=1
    shift
fi
rounds=${1:-5}
dd=target/release/ddperf
[ -x "$dd" ] || cargo build --release -p ddperf
dir=$(mktemp -d /tmp/deposit-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

loop() { # test field args...  (the binary: $DD, else this tree's)
    local t=$1 f=$2 bin=${DD:-$dd}
    shift 2
    timeout 120 "$bin" "$t" --loopback --json "$@" 2>/dev/null | field "$f"
}

memif() { # test field args...
    local t=$1 f=$2 s="$dir/memif.sock" bin=${DD:-$dd}
    shift 2
    rm -f "$s"
    timeout 120 "$bin" "$t" --server --dev "memif:$s:server" "$@" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.05; done
    timeout 120 "$bin" "$t" --dev "memif:$s:client" --json "$@" 10.0.0.1 2>/dev/null | field "$f"
    wait "$pid" || true
}

# memif whose receiving side (the ddperf server) is the memif client with zero-copy=yes
# (DPDK's memif offers it on the client side): the ddperf client is the memif server and
# starts first. test field args...
memif_zc() {
    local t=$1 f=$2 s="$dir/memif-zc.sock" bin=${DD:-$dd} out="$dir/memif-zc.json"
    shift 2
    rm -f "$s" "$out"
    timeout 120 "$bin" "$t" --dev "memif:$s:server" --json "$@" 10.0.0.1 >"$out" 2>/dev/null &
    local pid=$!
    for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.05; done
    timeout 120 "$bin" "$t" --server --dev "memif:$s:client:zero-copy" "$@" >/dev/null 2>&1 || true
    wait "$pid" || true
    field "$f" <"$out"
}

# memif with options for the server only: test field "server options" client options...
memif_server() {
    local t=$1 f=$2 so=$3 s="$dir/memif.sock" bin=${DD:-$dd}
    shift 3
    rm -f "$s"
    # shellcheck disable=SC2086 # the server's options are words
    timeout 120 "$bin" "$t" --server --dev "memif:$s:server" $so "$@" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.05; done
    timeout 120 "$bin" "$t" --dev "memif:$s:client" --json "$@" 10.0.0.1 2>/dev/null | field "$f"
    wait "$pid" || true
}

# CPU use of an idle `write_lat --server` on a memif port (worker mode $1), in % of one
# core: utime + stime over 5 s, after 2 s of start-up; the server is killed after.
idle_cpu() {
    local mode=$1 s="$dir/idle.sock" bin=${DD:-$dd} pid t0 t1 c0 c1 hz
    hz=$(getconf CLK_TCK)
    rm -f "$s"
    "$bin" write_lat --server --dev "memif:$s:server" --worker "$mode" >/dev/null 2>&1 &
    pid=$!
    # Fields 14 and 15 of /proc/PID/stat, counted after the ")" that ends field 2.
    ticks() { sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}'; }
    sleep 2
    c0=$(ticks) t0=$(date +%s.%N)
    sleep 5
    c1=$(ticks) t1=$(date +%s.%N)
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$s"
    python3 -c "print(f'{100 * ($c1 - $c0) / $hz / ($t1 - $t0):.2f}')"
}

# One round of the regression set with binary $1, appended to the arrays named
# <prefix>_<measure> (prefix $2).
regression_round() {
    local -n bw=$2_bw cbw_=$2_cbw wl_=$2_wl ml_=$2_ml rdl_=$2_rdl atl_=$2_atl rl_=$2_rl
    DD=$1
    bw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000)")
    cbw_+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 --compound)")
    wl_+=("$(loop write_lat t_typical_us -s 32 -n 100000)")
    ml_+=("$(memif write_lat t_typical_us -s 32 -n 50000)")
    rdl_+=("$(loop read_lat t_typical_us -s 32 -n 100000)")
    atl_+=("$(loop atomic_lat t_typical_us -n 100000)")
    rl_+=("$(loop raw_lat t_typical_us -s 32 -n 100000)")
    unset DD
}

if [[ -n $old ]]; then
    declare -a new_bw new_cbw new_wl new_ml new_rdl new_atl new_rl
    declare -a old_bw old_cbw old_wl old_ml old_rdl old_atl old_rl
    for i in $(seq "$rounds"); do
        if ((i % 2)); then
            regression_round "$dd" new
            regression_round "$old" old
        else
            regression_round "$old" old
            regression_round "$dd" new
        fi
    done
    med() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
    rat() { python3 -c "import statistics,sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(f'{statistics.median(float(x)/float(y) for x,y in zip(a,b)):.3f}')" "$1" "$2"; }
    printf '%-40s %-9s %-9s %s\n' "before/after (median of $rounds)" old new "new/old (median of rounds)"
    row() { # label measure better
        local -n o=old_$2 n=new_$2
        printf '%-40s %-9s %-9s %s (%s is better)\n' "$1" "$(med "${o[@]}")" "$(med "${n[@]}")" \
            "$(rat "${n[*]}" "${o[*]}")" "$3"
    }
    row "ring: write_bw 32 B [Mpps]" bw higher
    row "ring: write_bw --compound 32 B [Mpps]" cbw higher
    cr() { python3 -c "import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(' '.join(f'{float(x)/float(y):.4f}' for x,y in zip(a,b)))" "$1" "$2"; }
    read -ra old_cr <<<"$(cr "${old_cbw[*]}" "${old_bw[*]}")"
    read -ra new_cr <<<"$(cr "${new_cbw[*]}" "${new_bw[*]}")"
    row "ring: compound/plain ratio" cr higher
    row "ring: write_lat 32 B t_typical [us]" wl lower
    row "memif: write_lat 32 B t_typical [us]" ml lower
    row "ring: read_lat 32 B RTT [us]" rdl lower
    row "ring: atomic_lat RTT [us]" atl lower
    row "ring: raw_lat 32 B (baseline) [us]" rl lower
    for m in bw cbw wl ml rdl atl rl; do
        o=old_$m[*] n=new_$m[*]
        echo "samples $m: old ${!o} | new ${!n}"
    done
    exit 0
fi

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# --netns: af_packet vs kernel TCP between two namespaces on a bridge.
# shellcheck source=scripts/bridge.sh
. scripts/bridge.sh
ns_write_bw() { # MiB/s of 64 KiB write_bw, af_packet on the veths
    ip netns exec ddbna timeout 120 "$dd" write_bw --server --dev af_packet:ddbnv0 -s 65536 -n 20000 \
        >/dev/null 2>&1 &
    local pid=$!
    sleep 1
    ip netns exec ddbnb timeout 120 "$dd" write_bw --dev af_packet:ddbnv1 -s 65536 -n 20000 --json 10.0.0.1 \
        2>/dev/null | field bw_avg_mib_s | xargs printf '%.1f\n'
    wait "$pid" || true
}
ns_tcp() { # MiB/s of one iperf3 TCP stream, 64 KiB writes, 3 s
    ip netns exec ddbna timeout 60 iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
    local pid=$!
    sleep 0.5
    ip netns exec ddbnb timeout 60 iperf3 -c 10.79.0.1 -p 5299 -l 65536 -t 3 -J 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second'] / 8 / 2**20, 1))"
    wait "$pid" || true
}
if ((${netns:-0})); then
    (($(id -u) == 0)) || { echo "bench: --netns needs root (namespaces, a bridge)" >&2; exit 2; }
    scripts/deps.sh
    trap 'ns_pair_down ddbn; rm -rf "$dir"' EXIT
    trap 'exit 143' INT TERM # a signal still removes them (through EXIT)
    printf '%-6s %-30s %10s\n' MTU "64 KiB stream, MiB/s (median of $rounds)" value
    for mtu in 1500 9000; do
        ns_pair_up ddbn "$mtu" 10.79.0
        declare -a dw=() kt=()
        for i in $(seq "$rounds"); do
            if ((i % 2)); then
                dw+=("$(ns_write_bw)"); kt+=("$(ns_tcp)")
            else
                kt+=("$(ns_tcp)"); dw+=("$(ns_write_bw)")
            fi
        done
        echo "# MTU $mtu rounds: write_bw ${dw[*]}; tcp ${kt[*]}"
        printf '%-6s %-30s %10s\n' "$mtu" "deposit write_bw (af_packet)" "$(median "${dw[@]}")"
        printf '%-6s %-30s %10s\n' "$mtu" "kernel TCP (iperf3)" "$(median "${kt[@]}")"
        ns_pair_down ddbn
    done
    exit 0
fi

# --shaped: N senders into a tbf-shaped bridge port, deposit and kernel TCP.
sh_drops() { # packets the tbf dropped so far
    tc -n ddshb -s qdisc show dev ddshpr | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p'
}
# One deposit run: "goodput jain jain_window_min retransmit_pct tbf_drops
# sender_cpu% receiver_cpu%" (the share of the time each side's thread was on a CPU);
# $1 the server's extra options, $2 the client's.
sh_deposit() {
    local so=$1 co=$2 k pid d0 out="$dir/incast.json" senders=()
    for ((k = 0; k < sh_n; k++)); do
        senders+=(--sender "af_packet:ddshs$k@10.83.0.$((k + 1))")
    done
    d0=$(sh_drops)
    # shellcheck disable=SC2086 # the options are words
    ip netns exec ddshr timeout $((sh_secs + 30)) "$dd" incast_bw --server --dev af_packet:ddshr0 \
        --ip 10.83.0.100 -q "$sh_n" --timeout 10 $so ${SHAPED_OPTS:-} >/dev/null 2>"$dir/incast-server.err" &
    pid=$!
    sleep 1
    # shellcheck disable=SC2086
    ip netns exec ddshs timeout $((sh_secs + 30)) "$dd" incast_bw "${senders[@]}" -D "$sh_secs" \
        --warmup-ms 1000 -t 16 --timeout 10 --json $co ${SHAPED_OPTS:-} 10.83.0.100 >"$out" 2>"$dir/incast-client.err" || true
    wait "$pid" || true
    python3 -c "
import json, sys
try:
    r = json.loads(open(sys.argv[1]).readline())
except Exception:
    print('nan nan nan nan', int(sys.argv[3]) - int(sys.argv[2]), 'nan nan'); sys.exit()
srv = [l for l in open(sys.argv[4]) if 'on a CPU' in l]
cpu = srv[0].split('on a CPU ')[1].split()[0] if srv else 'nan'
print(f\"{r['goodput_mbps']:.1f} {r['jain']:.4f} {r['jain_windows_min']:.4f} {r['retransmit_pct']:.4f}\", int(sys.argv[3]) - int(sys.argv[2]), f\"{r['cpu_pct']:.0f}\", cpu)
" "$out" "$d0" "$(sh_drops)" "$dir/incast-server.err"
}
# One kernel TCP run, the same five numbers: an iperf3 client per sender veth.
sh_tcp() {
    local k pids=() d0
    d0=$(sh_drops)
    for ((k = 0; k < sh_n; k++)); do
        ip netns exec ddshr timeout $((sh_secs + 30)) iperf3 -s -1 -p $((5301 + k)) >/dev/null 2>&1 &
        pids+=($!)
    done
    sleep 0.5
    for ((k = 0; k < sh_n; k++)); do
        ip netns exec ddshs timeout $((sh_secs + 30)) iperf3 -c "10.82.$k.100" -B "10.82.$k.1" \
            --bind-dev "ddshs$k" -p $((5301 + k)) -l 65536 -t "$sh_secs" -O 1 -i 0.1 -J \
            >"$dir/iperf$k.json" 2>/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    python3 -c "
import json, sys
n, d0, d1 = int(sys.argv[1]), int(sys.argv[3]), int(sys.argv[4])
try:
    runs = [json.load(open(f'{sys.argv[2]}/iperf{k}.json')) for k in range(n)]
    rates = [r['end']['sum_received']['bits_per_second'] / 1e6 for r in runs]
    sent = sum(r['end']['sum_sent']['bytes'] for r in runs)
    retx = sum(r['end']['sum_sent']['retransmits'] for r in runs)
    # 100 ms windows after the omitted second, aligned by index (the clients start
    # within milliseconds of each other).
    wins = [[i['sum']['bits_per_second'] for i in r['intervals'] if not i['sum']['omitted']] for r in runs]
    m = min(len(w) for w in wins)
    jain = lambda x: sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if any(x) else 1.0
    wj = min(jain([w[i] for w in wins]) for i in range(m)) if m else float('nan')
    print(f'{sum(rates):.1f} {jain(rates):.4f} {wj:.4f} {100 * retx * 1448 / sent:.4f}', d1 - d0, '- -')
except Exception as e:
    print('nan nan nan nan', d1 - d0, '- -')
" "$sh_n" "$dir" "$d0" "$(sh_drops)"
}
if ((${shaped:-0})); then
    (($(id -u) == 0)) || { echo "bench: --shaped needs root (namespaces, a bridge, tc)" >&2; exit 2; }
    scripts/deps.sh
    sh_n=${SENDERS:-4} sh_secs=${SHAPED_SECS:-5}
    sh_rate=${SHAPED_RATE:-1gbit} sh_burst=${SHAPED_BURST:-64k} sh_limit=${SHAPED_LIMIT:-300k}
    # The shaped rate in Mb/s (tc's rate units: bit, kbit, mbit, gbit).
    sh_mbps=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([kmg]?)bit', sys.argv[1].lower())
if not m: sys.exit('bench: SHAPED_RATE ' + sys.argv[1] + ': give it in bit, kbit, mbit or gbit')
print(int(float(m[1]) * {'': 1e-6, 'k': 1e-3, 'm': 1, 'g': 1e3}[m[2]]))" "$sh_rate")
    trap 'shaped_down ddsh; rm -rf "$dir"' EXIT
    trap 'exit 143' INT TERM # a signal still removes them (through EXIT)
    shaped_up ddsh "$sh_n" "$sh_rate" "$sh_burst" "$sh_limit"
    tgt=${SHAPED_TARGET_US:-1000}
    names=(cc target line linet nocc tcp)
    declare -A label=(
        [cc]="deposit, cc defaults"
        [target]="deposit, cc, --cc-target-us $tgt"
        [line]="deposit, cc, receiver --line-mbps $sh_mbps"
        [linet]="deposit, cc, both: rcv line + target"
        [nocc]="deposit --no-cc"
        [tcp]="kernel TCP (iperf3 x $sh_n)"
    )
    declare -A res=()
    for i in $(seq "$rounds"); do
        for j in $(seq 0 $((${#names[@]} - 1))); do
            c=${names[$(((i + j) % ${#names[@]}))]}
            case $c in
            cc) r=$(sh_deposit "" "") ;;
            target) r=$(sh_deposit "--cc-target-us $tgt" "--cc-target-us $tgt") ;;
            line) r=$(sh_deposit "--line-mbps $sh_mbps" "") ;;
            linet) r=$(sh_deposit "--line-mbps $sh_mbps --cc-target-us $tgt" "--cc-target-us $tgt") ;;
            nocc) r=$(sh_deposit "--no-cc" "--no-cc") ;;
            tcp) r=$(sh_tcp) ;;
            esac
            # (goodput Jain Jain100 retx% drops cpu%; the load average: the machine is shared)
            echo "# round $i ${label[$c]}: $r (load $(cut -d' ' -f1 /proc/loadavg))"
            res[$c]+="$r"$'\n'
        done
    done
    echo "shaped bridge: $sh_n senders -> tbf rate $sh_rate burst $sh_burst limit $sh_limit, ${sh_secs} s per run, median of $rounds${SHAPED_OPTS:+; deposit with $SHAPED_OPTS}"
    printf '%-40s %9s %7s %7s %8s %8s %6s %s\n' "" "Mb/s" "shaped" "Jain" "Jain100" "retx %" drops "cpu % snd/rcv"
    for c in "${names[@]}"; do
        printf '%s' "${res[$c]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda i: statistics.median(float(r[i]) for r in rows)
cpu = lambda i: f'{med(i):.0f}' if rows[0][i] != '-' else '-'
print(f'{sys.argv[1]:<40} {med(0):9.1f} {med(0) / float(sys.argv[2]):7.3f} {med(1):7.4f} {med(2):8.4f} {med(3):8.3f} {med(4):6.0f} {cpu(5)}/{cpu(6)}')
" "${label[$c]}" "$sh_mbps"
    done
    echo "(targets: shaped >= 0.9, Jain >= 0.95, retx < 1 %; Jain100: the least of the 100 ms windows' index)"
    exit 0
fi

# --secure: sealed connections vs plain ones, rounds interleaved.
if ((${secure:-0})); then
    declare -a pbw sbw plat slat pbig sbig plbw slbw raw
    pair() { # plain-array secure-array command...: both, the order alternating per round
        local -n p_=$1 s_=$2
        shift 2
        # One identity file for both sides; the client takes the server's key on
        # first use into a known-peers file of the run's, pinned from then on.
        local keys=(--identity "$dir/identity" --known-peers "$dir/known_peers" --tofu)
        if ((i % 2)); then
            p_+=("$("$@")"); s_+=("$("$@" --secure "${keys[@]}")")
        else
            s_+=("$("$@" --secure "${keys[@]}")"); p_+=("$("$@")")
        fi
    }
    for i in $(seq "$rounds"); do
        pair pbw sbw memif write_bw bw_avg_mib_s -s 4096 -n 300000
        pair plat slat memif write_lat t_typical_us -s 32 -n 50000
        pair pbig sbig memif write_bw bw_avg_mib_s -s 65536 -n 20000
        pair plbw slbw loop write_bw bw_avg_mib_s -s 4096 -n 300000
        raw+=("$(memif raw_lat t_typical_us -s 32 -n 50000)")
    done
    med() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
    rat() { python3 -c "import statistics,sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(f'{statistics.median(float(x)/float(y) for x,y in zip(a,b)):.3f}')" "$1" "$2"; }
    printf '%-42s %-10s %-10s %s\n' "secure vs plain (median of $rounds)" plain secure "secure/plain (median of rounds)"
    srow() { # label plain-array secure-array target
        local -n p_=$2 s_=$3
        printf '%-42s %-10s %-10s %s (%s)\n' "$1" "$(med "${p_[@]}")" "$(med "${s_[@]}")" \
            "$(rat "${s_[*]}" "${p_[*]}")" "$4"
    }
    srow "memif: write_bw 4 KiB [MiB/s]" pbw sbw "target >= 0.7"
    srow "memif: write_lat 32 B t_typical [us]" plat slat "target <= 1.3"
    srow "memif: write_bw 64 KiB [MiB/s]" pbig sbig "9014-byte frames"
    srow "ring: write_bw 4 KiB [MiB/s]" plbw slbw "one process"
    echo "memif: raw_lat 32 B (baseline) [us]: $(med "${raw[@]}")"
    for m in pbw sbw plat slat pbig sbig plbw slbw raw; do
        a=$m[*]
        echo "samples $m: ${!a}"
    done
    exit 0
fi

declare -a wbw wbd wbl rbw wl rl ml mr rdl atl ap1 ap16 cbw l0 l1 l10 lp il ib tl mwb mwz mrb wq idd idi sh1 sh2
for i in $(seq "$rounds"); do
    sh1+=("$(memif_server write_bw msg_rate_mpps "--worker dedicated --workers 1" -s 32 -n 1000000 -q 8)")
    sh2+=("$(memif_server write_bw msg_rate_mpps "--worker dedicated --workers 2" -s 32 -n 1000000 -q 8)")
    rdl+=("$(loop read_lat t_typical_us -s 32 -n 100000)")
    atl+=("$(loop atomic_lat t_typical_us -n 100000)")
    ap1+=("$(loop append_bw msg_rate_mpps -s 32 -n 1000000 -q 1)")
    ap16+=("$(loop append_bw msg_rate_mpps -s 32 -n 1000000 -q 16)")
    cbw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 --compound)")
    wbw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 -q 1)")
    wbd+=("$(loop write_bw msg_rate_mpps -s 32 -n 3000000 -t 1024)")
    wbl+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 -l 16)")
    wq+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 -q 10000)")
    ib+=("$(loop ip_bw msg_rate_mpps -s 32 -n 1000000)")
    rbw+=("$(loop raw_bw msg_rate_mpps -s 32 -n 1000000)")
    wl+=("$(loop write_lat t_typical_us -s 32 -n 100000)")
    il+=("$(loop ip_lat t_typical_us -s 32 -n 100000)")
    tl+=("$(loop token_lat t_typical_us -s 32 -n 100000)")
    rl+=("$(loop raw_lat t_typical_us -s 32 -n 100000)")
    ml+=("$(memif write_lat t_typical_us -s 32 -n 50000)")
    mr+=("$(memif raw_lat t_typical_us -s 32 -n 50000)")
    mwb+=("$(memif write_bw bw_avg_mib_s -s 65536 -n 20000 --max-frame 9600)")
    mwz+=("$(memif_zc write_bw bw_avg_mib_s -s 65536 -n 20000 --max-frame 9600)")
    mrb+=("$(memif raw_bw bw_avg_mib_s -n 200000 --max-frame 9600)")
    idd+=("$(idle_cpu dedicated)")
    idi+=("$(idle_cpu inline)")
    l0+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000)")
    l1+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000 --faults loss=0.001,seed=7)")
    l10+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000 --faults loss=0.01,seed=7)")
    lp+=("$(loop write_lat t_p999_us -s 32 -n 100000 --faults loss=0.001,seed=7)")
done
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
# A row of the deposit/raw table: printed, and kept for --plot (what, deposit, raw).
row() {
    printf '%-44s %-10s %-10s %s\n' "$1" "$2" "$3" "$4"
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$dir/rows.tsv"
}
# Median of the per-round ratios of two sample lists given as "a1 a2 ..." "b1 b2 ...":
# each round's pair ran back to back, so its ratio sees the same machine state.
paired() { python3 -c "import statistics,sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(f'{statistics.median(float(x)/float(y) for x,y in zip(a,b)):.2f}')" "$1" "$2"; }
printf '%-44s %-10s %-10s %s\n' "benchmark (median of $rounds)" deposit raw ratio
a=$(median "${wbw[@]}"); b=$(median "${rbw[@]}")
row "ring: 32 B msg rate [Mpps] (write_bw/raw_bw)" "$a" "$b" "$(ratio "$a" "$b")"
row "ring: same, -t 1024 (write_bw/raw_bw)" "$(median "${wbd[@]}")" "$b" \
    "$(paired "${wbd[*]}" "${rbw[*]}") of rounds (target >= 0.6)"
row "ring: same, -l 16 (write_bw/raw_bw)" "$(median "${wbl[@]}")" "$b" \
    "$(paired "${wbl[*]}" "${rbw[*]}") of rounds"
a=$(median "${wl[@]}"); b=$(median "${rl[@]}")
row "ring: 32 B t_typical [us] (write_lat/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${ml[@]}"); b=$(median "${mr[@]}")
row "memif: 32 B t_typical [us] (write/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
row "memif: BW [MiB/s] (64 KiB write_bw/raw_bw)" "$(median "${mwb[@]}")" \
    "$(median "${mrb[@]}")" "$(paired "${mwb[*]}" "${mrb[*]}") of rounds (target >= 0.8)"
row "memif: same, receiver zero-copy client" "$(median "${mwz[@]}")" \
    "$(median "${mrb[@]}")" "$(paired "${mwz[*]}" "${mrb[*]}") of rounds (target >= 0.9)"
rrtt=$(python3 -c "print(2*$(median "${rl[@]}"))")
a=$(median "${rdl[@]}")
row "ring: 32 B RTT [us] (read_lat/raw_lat RTT)" "$a" "$rrtt" "$(ratio "$a" "$rrtt")"
a=$(median "${atl[@]}")
row "ring: 8 B RTT [us] (atomic_lat/raw_lat RTT)" "$a" "$rrtt" "$(ratio "$a" "$rrtt")"
a=$(median "${ap16[@]}"); b=$(median "${ap1[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B append [Mpps] (-q 16 / -q 1)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${cbw[@]}"); b=$(median "${wbw[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B [Mpps] (compound/plain write)" "$a" "$b" "$(ratio "$a" "$b") (target >= 0.67)"
a=$(median "${l1[@]}"); b=$(median "${l0[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 4 KiB [MiB/s] (0.1 % loss / lossless)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${l10[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 4 KiB [MiB/s] (1 % loss / lossless)" "$a" "$b" "$(ratio "$a" "$b") (goal >= 0.70)"
printf '%-44s %-10s\n' "ring: 32 B write_lat p99.9 at 0.1 % loss [us]" "$(median "${lp[@]}")"
printf '%-44s %-10s %-10s %s\n' "connections (medians; ratio: of rounds)" "-q 10000" "-q 1" ratio
printf '%-44s %-10s %-10s %s\n' "ring: 32 B write_bw msg rate [Mpps]" "$(median "${wq[@]}")" \
    "$(median "${wbw[@]}")" "$(paired "${wq[*]}" "${wbw[*]}") (target >= 0.90)"
printf '%-44s %-10s %-10s %s\n' "server shards, memif (medians; ratio: of rounds)" "2 shards" "1 shard" ratio
printf '%-44s %-10s %-10s %s\n' "32 B write_bw -q 8, inline client [Mpps]" "$(median "${sh2[@]}")" \
    "$(median "${sh1[@]}")" "$(paired "${sh2[*]}" "${sh1[*]}")"
printf '%-44s %-10s %-10s %s\n' "idle server, memif (median)" dedicated inline ""
printf '%-44s %-10s %-10s %s\n' "write_lat --server, no client [% of a core]" "$(median "${idd[@]}")" \
    "$(median "${idi[@]}")" "(target < 5 each)"
printf '%-44s %-10s %-10s %s\n' "ip vs direct (medians; ratio: of rounds)" ip direct ratio
printf '%-44s %-10s %-10s %s\n' "ring: 32 B t_typical [us] (ip_lat/write_lat)" "$(median "${il[@]}")" \
    "$(median "${wl[@]}")" "$(paired "${il[*]}" "${wl[*]}") (goal <= 1.2)"
printf '%-44s %-10s %-10s %s\n' "ring: 32 B msg rate [Mpps] (write_bw/ip_bw)" "$(median "${ib[@]}")" \
    "$(median "${wbw[@]}")" "$(paired "${wbw[*]}" "${ib[*]}") (goal <= 1.2)"
printf '%-44s %-10s\n' "ring: 32 B token_lat t_typical [us]" "$(median "${tl[@]}")"
echo "samples: write_bw ${wbw[*]} | -t 1024 ${wbd[*]} | -l 16 ${wbl[*]} | raw_bw ${rbw[*]}"
echo "         write_lat ${wl[*]} | raw_lat ${rl[*]}"
echo "         memif write_lat ${ml[*]} | memif raw_lat ${mr[*]}"
echo "         memif 64 KiB write_bw MiB/s ${mwb[*]} | zero-copy receiver ${mwz[*]} | memif raw_bw MiB/s ${mrb[*]}"
echo "         write_bw -q 10000 ${wq[*]}"
echo "         memif write_bw -q 8, server of 1 shard ${sh1[*]} | of 2 shards ${sh2[*]}"
echo "         idle server CPU %: dedicated ${idd[*]} | inline ${idi[*]}"
echo "         read_lat ${rdl[*]} | atomic_lat ${atl[*]}"
echo "         append_bw -q 1 ${ap1[*]} | -q 16 ${ap16[*]} | write_bw --compound ${cbw[*]}"
echo "         ip_lat ${il[*]} | ip_bw ${ib[*]} | token_lat ${tl[*]}"
echo "         4 KiB MiB/s lossless ${l0[*]} | 0.1 % ${l1[*]} | 1 % ${l10[*]} | p99.9 at 0.1 % ${lp[*]}"
if [[ -n $plot ]]; then
    "$dd" --plot-bench "$dir/rows.tsv" --plot "$plot"
fi
echo "instruction pointers vs direct writes, one process (cargo bench -p deposit --bench ipmsg):"
cargo bench -q -p deposit --bench ipmsg -- "$rounds" 2>/dev/null
echo "idle and waking (cargo bench -p deposit --bench wake):"
cargo bench -q -p deposit --bench wake 2>/dev/null
echo "per-message cost of the protocol, no I/O (cargo bench -p deposit-transport --bench node):"
cargo bench -q -p deposit-transport --bench node 2>/dev/null
echo "idle connections (cargo bench -p deposit --bench conns):"
cargo bench -q -p deposit --bench conns 2>/dev/null
