#!/usr/bin/env bash
# Usage: scripts/bench.sh [ROUNDS]
# The foundation benchmarks with their raw-DPDK baselines from the same run, rounds
# interleaved (the machine is shared and noisy), medians reported:
#   * 32 B write message rate (write_bw) vs raw_bw frame rate, ring loopback;
#   * write_lat vs raw_lat, ring loopback (t_typical, RTT/2);
#   * write_lat vs raw_lat, two processes over memif.
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

declare -a wbw rbw wl rl ml mr
for i in $(seq "$rounds"); do
    wbw+=("$(loop write_bw msg_rate_mpps -s 32 -n 1000000)")
    rbw+=("$(loop raw_bw msg_rate_mpps -s 32 -n 1000000)")
    wl+=("$(loop write_lat t_typical_us -s 32 -n 100000)")
    rl+=("$(loop raw_lat t_typical_us -s 32 -n 100000)")
    ml+=("$(memif write_lat t_typical_us -s 32 -n 50000)")
    mr+=("$(memif raw_lat t_typical_us -s 32 -n 50000)")
done
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
printf '%-44s %-10s %-10s %s\n' "benchmark (median of $rounds)" deposit raw ratio
a=$(median "${wbw[@]}"); b=$(median "${rbw[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B msg rate [Mpps] (write_bw/raw_bw)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${wl[@]}"); b=$(median "${rl[@]}")
printf '%-44s %-10s %-10s %s\n' "ring: 32 B t_typical [us] (write_lat/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
a=$(median "${ml[@]}"); b=$(median "${mr[@]}")
printf '%-44s %-10s %-10s %s\n' "memif: 32 B t_typical [us] (write/raw_lat)" "$a" "$b" "$(ratio "$a" "$b")"
echo "samples: write_bw ${wbw[*]} | raw_bw ${rbw[*]}"
echo "         write_lat ${wl[*]} | raw_lat ${rl[*]}"
echo "         memif write_lat ${ml[*]} | memif raw_lat ${mr[*]}"
