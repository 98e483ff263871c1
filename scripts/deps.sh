#!/usr/bin/env bash
# Installs what deposit needs to build and run, and only what is missing:
#   libdpdk-dev (DPDK 22.11, found with `pkg-config libdpdk`), libclang-dev (bindgen),
#   pkg-config, iproute2, iputils-ping and iputils-arping (the neighbour tests), a C compiler (the dpdk-sys shim), python3 (test.sh's JSON checks)
#   dpdk-dev (its dpdk-telemetry.py reads a running process's counters) and
#   fonts-dejavu-core (the font of ddperf --plot's pictures), for the C ABI (api/capi)
#   cbindgen, which writes include/deposit.h, and for HPC embedding Open MPI
#   (openmpi-bin, libopenmpi-dev: mpirun, mpicc; built with libfabric) and libfabric
#   (libfabric-dev with the provider headers, libfabric-bin: fi_info, fi_pingpong).
# Then checks for cargo and cargo-nextest (installs the latter with cargo if missing).
# Idempotent and silent when everything is already there. Debian/Ubuntu (apt) only.
set -euo pipefail

say() { echo "deps: $*" >&2; }

# package -> command whose presence is enough (empty: ask dpkg)
declare -A probe=(
    [libdpdk-dev]=""
    [libclang-dev]=""
    [pkg-config]="pkg-config"
    [iproute2]="ip"
    [gcc]="cc"
    [libc6-dev]=""
    [python3]="python3"
    [dpdk-dev]="dpdk-telemetry.py"
    [fonts-dejavu-core]=""
    [cbindgen]="cbindgen"
    [openmpi-bin]="mpirun"
    [libopenmpi-dev]="mpicc"
    [libfabric-dev]=""
    [libfabric-bin]="fi_info"
    [iperf3]="iperf3"
    [iputils-ping]="ping"
    [iputils-arping]="arping"
)
order=(libdpdk-dev libclang-dev pkg-config iproute2 gcc libc6-dev python3 dpdk-dev fonts-dejavu-core
    cbindgen openmpi-bin libopenmpi-dev libfabric-dev libfabric-bin iperf3 iputils-ping iputils-arping)

installed() {
    local pkg=$1 cmd=${probe[$1]}
    if [[ -n $cmd ]] && command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'
}

missing=()
for p in "${order[@]}"; do
    installed "$p" || missing+=("$p")
done

if ((${#missing[@]})); then
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing ${missing[*]} and no apt-get: install them by hand"
        exit 1
    fi
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            SUDO=(sudo)
        else
            say "missing ${missing[*]}; not root and no sudo: install them as root"
            exit 1
        fi
    fi
    say "installing ${missing[*]}"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# DPDK must be visible to pkg-config (dpdk-sys's build script uses it).
if ! pkg-config --exists libdpdk; then
    say "pkg-config cannot find libdpdk although libdpdk-dev is installed"
    exit 1
fi

# Rust toolchain (rustup is not installed from here: it needs the network).
if [[ -f $HOME/.cargo/env ]] && ! command -v cargo >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    say "cargo not found: install Rust (https://rustup.rs, rust-version >= 1.80) and re-run"
    exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest (cargo install cargo-nextest --locked)"
    cargo install cargo-nextest --locked
fi
