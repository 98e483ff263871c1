#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [--seed] [--cmin] [--no-sanitizer] [TARGET|all] [RUNS]
# Fuzzes the DPDK-free core (fuzz/README.md): runs cargo-fuzz target TARGET (all six by
# default) for RUNS executions (default 10000000) on the nightly toolchain, at nice 19,
# installing cargo-fuzz first if it is missing, and prints each run's executions, time
# and corpus. --seed first writes the hand-made seeds into fuzz/corpus; --cmin minimizes
# each corpus afterwards (cargo fuzz cmin); --no-sanitizer builds without AddressSanitizer
# (about three times the executions a second). A crash leaves its input in
# fuzz/artifacts/TARGET/ and the script exits non-zero. The corpora are replayed without
# nightly by `cargo test --test fuzz_corpora` (scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seed=0
cmin=0
sanitizer=()
args=()
for a in "$@"; do
    case $a in
        --seed) seed=1 ;;
        --cmin) cmin=1 ;;
        --no-sanitizer) sanitizer=(-s none) ;;
        -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
        -*) echo "fuzz: unknown option '$a'" >&2; exit 2 ;;
        *) args+=("$a") ;;
    esac
done
target=${args[0]:-all}
runs=${args[1]:-10000000}
all=(frame cell compound cm plan node)
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
    echo "=== $t: $runs runs ($(find "fuzz/corpus/$t" -type f | wc -l) inputs in fuzz/corpus/$t)"
    start=$SECONDS
    set +e
    nice -n 19 cargo +nightly fuzz run "${sanitizer[@]}" "$t" -- -runs="$runs" \
        -print_final_stats=1 2>&1 | tee "$log" | grep -E '^#[0-9]+.*(pulse|DONE)|^Done|panicked|SUMMARY'
    rc=${PIPESTATUS[0]}
    set -e
    secs=$((SECONDS - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if ((rc != 0)); then
        echo "fuzz: $t failed (exit $rc); its input is in fuzz/artifacts/$t/, the log in $log" >&2
        exit "$rc"
    fi
    if ((cmin)); then
        nice -n 19 cargo +nightly fuzz cmin "${sanitizer[@]}" "$t" >>"$log" 2>&1
    fi
    files=$(find "fuzz/corpus/$t" -type f | wc -l)
    size=$(($(du -sb "fuzz/corpus/$t" | cut -f1) / 1024))
    summary+=("$(printf '%-9s %12s executions %7ss %6s inputs %6s KiB' "$t" "${execs:-?}" "$secs" "$files" "$size")")
    rm -f "$log"
done
echo
printf '%s\n' "${summary[@]}"
