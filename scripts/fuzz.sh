#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [--seed] [--cmin] [--no-sanitizer] [--time SECS] [TARGET|all] [RUNS]
# Fuzzes the DPDK-free core (fuzz/README.md): runs cargo-fuzz target TARGET (all seven by
# default) for RUNS executions (default 10000000; --time: for SECS seconds instead) on
# the nightly toolchain, at nice 19, installing cargo-fuzz first if it is missing, and
# prints each run's executions, time, slowest input, memory and corpus. --seed first
# writes the hand-made seeds into fuzz/corpus; --cmin minimizes each corpus afterwards
# (cargo fuzz cmin); --no-sanitizer builds without AddressSanitizer (several times the
# executions a second). A crash leaves its input in fuzz/artifacts/TARGET/ and the
# script exits non-zero. The corpora are replayed without nightly by
# `cargo test --test fuzz_corpora` (scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seed=0
cmin=0
sanitizer=()
time=""
args=()
while (($#)); do
    a=$1
    shift
    case $a in
        --time)
            time=${1:-}
            shift || true
            [[ $time =~ ^[0-9]+$ ]] || { echo "fuzz: --time needs seconds" >&2; exit 2; }
            ;;
        --seed) seed=1 ;;
        --cmin) cmin=1 ;;
        --no-sanitizer) sanitizer=(-s none) ;;
        -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
        -*) echo "fuzz: unknown option '$a'" >&2; exit 2 ;;
        *) args+=("$a") ;;
    esac
done
target=${args[0]:-all}
runs=${args[1]:-10000000}
all=(frame cell compound cm plan node neigh_wire)
if [[ $target == all ]]; then
    targets=("${all[@]}")
elif [[ " ${all[*]} " == *" $target "* ]]; then
    targets=("$target")
else
    echo "fuzz: no target '$target' (targets: ${all[*]})" >&2
    exit 2
fi
[[ $runs =~ ^[0-9]+$ ]] || { echo "fuzz: RUNS must be a number, not '$runs'" >&2; exit 2; }

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz
fi
if ((seed)); then
    cargo run -q -p deposit-transport --no-default-features --example fuzz_seeds -- fuzz/corpus
fi

summary=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log=$(mktemp "/tmp/deposit-fuzz-$t.XXXXXX")
    if [[ -n $time ]]; then
        limit=(-max_total_time="$time")
        what="$time s"
    else
        limit=(-runs="$runs")
        what="$runs runs"
    fi
    echo "=== $t: $what ($(find "fuzz/corpus/$t" -type f | wc -l) inputs in fuzz/corpus/$t)"
    start=$SECONDS
    set +e
    nice -n 19 cargo +nightly fuzz run "${sanitizer[@]}" "$t" -- "${limit[@]}" \
        -print_final_stats=1 2>&1 | tee "$log" |
        grep --line-buffered -E '^#[0-9]+.*(pulse|DONE)|^Done|panicked|SUMMARY'
    rc=${PIPESTATUS[0]}
    set -e
    secs=$((SECONDS - start))
    final_stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    execs=$(final_stat number_of_executed_units)
    slowest=$(final_stat slowest_unit_time_sec)
    rss=$(final_stat peak_rss_mb)
    if ((rc != 0)); then
        echo "fuzz: $t failed (exit $rc); its input is in fuzz/artifacts/$t/, the log in $log" >&2
        exit "$rc"
    fi
    if ((cmin)); then
        nice -n 19 cargo +nightly fuzz cmin "${sanitizer[@]}" "$t" >>"$log" 2>&1
    fi
    files=$(find "fuzz/corpus/$t" -type f | wc -l)
    size=$(($(du -sb "fuzz/corpus/$t" | cut -f1) / 1024))
    summary+=("$(printf '%-9s %12s executions %6ss  slowest %3ss  rss %5s MB  %6s inputs %6s KiB' \
        "$t" "${execs:-?}" "$secs" "${slowest:-?}" "${rss:-?}" "$files" "$size")")
    rm -f "$log"
done
echo
printf '%s\n' "${summary[@]}"
