#!/usr/bin/env bash
# Usage: scripts/bench.sh [ROUNDS]
# The foundation benchmarks with their raw-DPDK baselines from the same run, rounds
# interleaved (the machine is shared and noisy), medians reported:
#   * 32 B write message rate (write_bw) vs raw_bw frame rate, ring loopback;
#   * write_lat vs raw_lat, ring loopback (t_typical, RTT/2);
#   * write_lat vs raw_lat, two processes over memif;
#   * read_lat and atomic_lat (full RTT, perftest) vs raw_lat's RTT (2 x t_typical),
#     ring loopback;
#   * append_bw (many senders, one queue by post-increment on a global register) with
#     -q 1 and -q 16, 32 B, ring loopback: message rates and their ratio;
#   * compound vs plain write message rate, 32 B, ring loopback: write_bw --compound
#     (per message: indirect address generation, two register ops, a conditional) over
#     write_bw; target >= 0.67 (a compound op at most 1.5x the cost of a plain write);
#   * under injected loss (ring loopback, --faults loss=P,seed=7): write_bw 4 KiB at
#     0.1 % and 1 % over lossless (goal at 1 %: >= 0.70), write_lat 32 B p99.9 at 0.1 %;
#   * instruction-pointer messages vs the direct form, 32 B, ring loopback: ip_lat over
#     write_lat and write_bw over ip_bw (goal <= 1.2 each); token_lat (a deposit with a
#     payload token plus a fresh token coming back, RTT/2). The same comparison in one
#     process, rounds interleaved more finely, follows from `cargo bench --bench ipmsg`.
# Needs a release build (scripts/run.sh or `cargo build --release -p ddperf`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-5}
dd=target/release/ddperf
[ -x "$dd" ] || cargo build --release -p ddperf
dir=$(mktemp -d /tmp/deposit-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

loop() { # test field args...
    local t=$1 f=$2
    shift 2
    timeout 120 "$dd" "$t" --loopback --json "$@" 2>/dev/null | field "$f"
}

memif() { # test field args...
    local t=$1 f=$2 s="$dir/memif.sock"
    shift 2
    rm -f "$s"
    timeout 120 "$dd" "$t" --server --dev "memif:$s:server" "$@" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.05; done
    timeout 120 "$dd" "$t" --dev "memif:$s:client" --json "$@" 10.0.0.1 2>/dev/null | field "$f"
    wait "$pid" || true
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -a wbw rbw wl rl ml mr rdl atl ap1 ap16 cbw l0 l1 l10 lp il ib tl
for i in $(seq "$rounds"); do
    rdl+=("$(loop read_lat t_typical_us -s 32 -n 100000)")
    atl+=("$(loop atomic_lat t_typical_us -n 100000)")
    ap1+=("$(loop append_bw msg_rate_mpps -s 32 -n 1000000 -q 1)")
    ap16+=("$(loop append_bw msg_rate_mpps -s 32 -n 1000000 -q 16)")
    cbw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000 --compound)")
    wbw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000)")
    ib+=("$(loop ip_bw msg_rate_mpps -s 32 -n 1000000)")
    rbw+=("$(loop raw_bw msg_rate_mpps -s 32 -n 1000000)")
    wl+=("$(loop write_lat t_typical_us -s 32 -n 100000)")
    il+=("$(loop ip_lat t_typical_us -s 32 -n 100000)")
    tl+=("$(loop token_lat t_typical_us -s 32 -n 100000)")
    rl+=("$(loop raw_lat t_typical_us -s 32 -n 100000)")
    ml+=("$(memif write_lat t_typical_us -s 32 -n 50000)")
    mr+=("$(memif raw_lat t_typical_us -s 32 -n 50000)")
    l0+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000)")
    l1+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000 --faults loss=0.001,seed=7)")
    l10+=("$(loop write_bw bw_avg_mib_s -s 4096 -n 200000 --faults loss=0.01,seed=7)")
    lp+=("$(loop write_lat t_p999_us -s 32 -n 100000 --faults loss=0.001,seed=7)")
done
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
# Median of the per-round ratios of two sample lists given as "a1 a2 ..." "b1 b2 ...":
# each round's pair ran back to back, so its ratio sees the same machine state.
paired() { python3 -c "import statistics,sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(f'{statistics.median(float(x)/float(y) for x,y in zip(a,b)):.2f}')" "$1" "$2"; }
printf '%-44s %-10s %-10s %s\n' "benchmark (median of $rounds)" deposit raw ratio
a=$(median "${wbw[@]}"); b=$(median "${rbw[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B msg rate [Mpps] (write_bw/raw_bw)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${wl[@]}"); b=$(median "${rl[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B t_typical [us] (write_lat/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${ml[@]}"); b=$(median "${mr[@]}")
printf '%-44s %-10s %-10s %s\n' "memif: 32 B t_typical [us] (write/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
rrtt=$(python3 -c "print(2*$(median "${rl[@]}"))")
a=$(median "${rdl[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B RTT [us] (read_lat/raw_lat RTT)" "$a" "$rrtt" "$(ratio "$a" "$rrtt")"
a=$(median "${atl[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 8 B RTT [us] (atomic_lat/raw_lat RTT)" "$a" "$rrtt" "$(ratio "$a" "$rrtt")"
a=$(median "${ap16[@]}"); b=$(median "${ap1[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B append [Mpps] (-q 16 / -q 1)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${cbw[@]}"); b=$(median "${wbw[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B [Mpps] (compound/plain write)" "$a" "$b" "$(ratio "$a" "$b") (target >= 0.67)"
a=$(median "${l1[@]}"); b=$(median "${l0[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 4 KiB [MiB/s] (0.1 % loss / lossless)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${l10[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 4 KiB [MiB/s] (1 % loss / lossless)" "$a" "$b" "$(ratio "$a" "$b") (goal >= 0.70)"
printf '%-44s %-10s\n' "ring: 32 B write_lat p99.9 at 0.1 % loss [us]" "$(median "${lp[@]}")"
printf '%-44s %-10s %-10s %s\n' "ip vs direct (medians; ratio: of rounds)" ip direct ratio
printf '%-44s %-10s %-10s %s\n' "ring: 32 B t_typical [us] (ip_lat/write_lat)" "$(median "${il[@]}")" \
    "$(median "${wl[@]}")" "$(paired "${il[*]}" "${wl[*]}") (goal <= 1.2)"
printf '%-44s %-10s %-10s %s\n' "ring: 32 B msg rate [Mpps] (write_bw/ip_bw)" "$(median "${ib[@]}")" \
    "$(median "${wbw[@]}")" "$(paired "${wbw[*]}" "${ib[*]}") (goal <= 1.2)"
printf '%-44s %-10s\n' "ring: 32 B token_lat t_typical [us]" "$(median "${tl[@]}")"
echo "samples: write_bw ${wbw[*]} | raw_bw ${rbw[*]}"
echo "         write_lat ${wl[*]} | raw_lat ${rl[*]}"
echo "         memif write_lat ${ml[*]} | memif raw_lat ${mr[*]}"
echo "         read_lat ${rdl[*]} | atomic_lat ${atl[*]}"
echo "         append_bw -q 1 ${ap1[*]} | -q 16 ${ap16[*]} | write_bw --compound ${cbw[*]}"
echo "         ip_lat ${il[*]} | ip_bw ${ib[*]} | token_lat ${tl[*]}"
echo "         4 KiB MiB/s lossless ${l0[*]} | 0.1 % ${l1[*]} | 1 % ${l10[*]} | p99.9 at 0.1 % ${lp[*]}"
echo "instruction pointers vs direct writes, one process (cargo bench -p deposit --bench ipmsg):"
cargo bench -q -p deposit --bench ipmsg -- "$rounds" 2>/dev/null
