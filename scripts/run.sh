#!/usr/bin/env bash
# Usage: scripts/run.sh [ddperf options...]      e.g. scripts/run.sh -s 64 -n 10000
# Builds ddperf and runs write_lat, then write_bw, between two separate processes on this
# machine (a server and a client, two "hosts" joined by a DPDK memif port over a Unix
# socket). Installs missing dependencies and reserves hugepages first. Extra options are
# passed to both sides.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== deposit: ddperf write_lat and write_bw between two processes over memif${*:+ (options: $*)}"
scripts/deps.sh
scripts/hugepages.sh

echo "== building ddperf (cargo build --release -p ddperf)"
cargo build --release -p ddperf
DDPERF=target/release/ddperf

DIR=$(mktemp -d /tmp/deposit-run.XXXXXX)
SOCK=$DIR/memif.sock
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run_pair() {
    local test=$1 rc=0 src=0
    shift
    rm -f "$SOCK"
    echo
    echo "== ddperf $test: server and client processes over memif ($SOCK) $*"
    timeout 120 "$DDPERF" "$test" --server --dev "memif:$SOCK:server" "$@" &
    SERVER_PID=$!
    # The memif server creates the socket when its port comes up; give it 20 s.
    for _ in $(seq 200); do
        [[ -S $SOCK ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID" || rc=$?
        SERVER_PID=
        echo "run: ddperf $test server exited early (status $rc)" >&2
        return 1
    fi
    timeout 120 "$DDPERF" "$test" --dev "memif:$SOCK:client" "$@" 10.0.0.1 || rc=$?
    # The server finishes on its own after the run; do not wait on it forever.
    for _ in $(seq 100); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" || src=$?
    SERVER_PID=
    if ((rc != 0)); then
        echo "run: ddperf $test client failed (status $rc$( ((rc == 124)) && echo ', timed out after 120 s'))" >&2
        return "$rc"
    fi
    if ((src != 0 && src != 143)); then
        echo "run: ddperf $test server exited with status $src" >&2
    fi
    return 0
}

run_pair write_lat "$@"
run_pair write_bw "$@"
