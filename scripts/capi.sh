#!/usr/bin/env bash
# Usage: scripts/capi.sh [--check]
# The C ABI (api/capi): builds target/release/libdeposit.so and libdeposit.a, writes
# their pkg-config file (target/release/pkgconfig/deposit.pc), regenerates
# api/capi/include/deposit.h with cbindgen (with --check: fails instead when the
# checked-in header differs from what the source gives), then builds every C example
# of api/capi/examples with gcc — against the shared library through pkg-config, and
# hello.c against the static one too — and runs them (epoll.c sleeps in epoll_wait on
# the devices' wait fds and fails when its idle process uses 5 % of a core or more).
#
# A C program elsewhere:
#   export PKG_CONFIG_PATH=$PWD/target/release/pkgconfig
#   gcc prog.c $(pkg-config --cflags --libs deposit) -o prog
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=0
[[ ${1:-} == --check ]] && check=1
scripts/deps.sh

cargo build --release -q -p deposit-capi
root=$PWD
lib=$root/target/release
mkdir -p "$lib/pkgconfig"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The static library's own needs, as rustc reports them (after DPDK's).
native=$(cargo rustc --release -q -p deposit-capi --crate-type staticlib -- --print native-static-libs 2>&1 |
    sed -n 's/.*native-static-libs: //p' | tail -1)
cat >"$lib/pkgconfig/deposit.pc" <<EOF
prefix=$root
libdir=$lib
includedir=$root/api/capi/include

Name: deposit
Description: software RDMA-style transport over DPDK (the hybrid deposit model), C ABI
Version: $version
Requires.private: libdpdk
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ldeposit
Libs.private: $native
Cflags: -I\${includedir}
EOF
export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

header=api/capi/include/deposit.h
fresh=$(mktemp /tmp/deposit-h.XXXXXX)
trap 'rm -f "$fresh"' EXIT
(cd api/capi && cbindgen -q --config cbindgen.toml --crate deposit-capi --output "$fresh")
if ! cmp -s "$fresh" "$header"; then
    if ((check)); then
        diff -u "$header" "$fresh" | head -40 >&2 || true
        echo "capi: $header differs from what api/capi/src/lib.rs gives: run scripts/capi.sh and commit it" >&2
        exit 1
    fi
    cp "$fresh" "$header"
    echo "capi: $header regenerated"
fi

out=$(mktemp -d /tmp/deposit-capi.XXXXXX)
trap 'rm -f "$fresh"; rm -rf "$out"' EXIT
rc=0
for src in api/capi/examples/*.c; do
    name=$(basename "$src" .c)
    # shellcheck disable=SC2046 # pkg-config's flags are words
    gcc -std=c11 -Wall -Wextra -Werror -O2 "$src" -o "$out/$name" $(pkg-config --cflags --libs deposit)
    echo "--- $name (libdeposit.so)"
    timeout 120 "$out/$name" || { echo "capi: example $name failed" >&2; rc=1; }
done
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Werror -O2 api/capi/examples/hello.c -o "$out/hello-static" \
    $(pkg-config --cflags deposit) "$lib/libdeposit.a" $(pkg-config --libs libdpdk) $native
echo "--- hello (libdeposit.a)"
timeout 120 "$out/hello-static" >/dev/null || { echo "capi: the statically linked hello failed" >&2; rc=1; }
exit "$rc"
