#!/usr/bin/env bash
# Usage: scripts/hugepages.sh [N] [--require]
# Makes sure at least N (default 1024) 2 MiB hugepages are free, reserving more when run
# as root (or with password-less sudo). DPDK (--in-memory) and endpoint memory
# (MAP_HUGETLB) need no hugetlbfs mount. Without hugepages deposit still runs: DPDK falls
# back to --no-huge and endpoints to ordinary pages (slower, with a warning).
# Exits 0 whatever it got, unless --require is given and fewer than N are free.
set -uo pipefail

want=1024
require=0
for a in "$@"; do
    case $a in
        --require) require=1 ;;
        -h|--help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
        ''|*[!0-9]*) echo "hugepages: bad argument '$a' (usage: $0 [N] [--require])" >&2; exit 2 ;;
        *) want=$a ;;
    esac
done

sys=/sys/kernel/mm/hugepages/hugepages-2048kB
free_pages() {
    if [[ -r $sys/free_hugepages ]]; then
        cat "$sys/free_hugepages"
    else
        awk '/^HugePages_Free:/ {print $2; f=1} END {if (!f) print 0}' /proc/meminfo
    fi
}
total_pages() {
    if [[ -r $sys/nr_hugepages ]]; then
        cat "$sys/nr_hugepages"
    else
        awk '/^HugePages_Total:/ {print $2; f=1} END {if (!f) print 0}' /proc/meminfo
    fi
}

free=$(free_pages)
if ((free < want)); then
    target=$(($(total_pages) + want - free))
    # Never pin more than half of RAM in hugepages.
    cap=$(awk '/^MemTotal:/ {print int($2 / 2048 / 2)}' /proc/meminfo)
    ((target > cap)) && target=$cap
    knob=$sys/nr_hugepages
    [[ -e $knob ]] || knob=/proc/sys/vm/nr_hugepages
    if ((target <= $(total_pages))); then
        :   # at the cap already: never shrink someone else's reservation
    elif [[ $(id -u) -eq 0 ]]; then
        echo "$target" 2>/dev/null >"$knob" || true
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        echo "$target" | sudo -n tee "$knob" >/dev/null 2>&1 || true
    fi
    free=$(free_pages)
fi

echo "hugepages: HugePages_Free = $free x 2 MiB ($((free * 2)) MiB; wanted $want)"
if ((free < want)); then
    if ((free < 128)); then
        echo "hugepages: could not reserve them (need root, or memory is fragmented):" \
            "DPDK will fall back to --no-huge and endpoints to 4 KiB pages (slower)." >&2
    else
        echo "hugepages: fewer than wanted; DPDK still uses hugepages (needs 256 MiB free)," \
            "but large endpoints may fall back to 4 KiB pages." >&2
    fi
    ((require)) && exit 1
fi
exit 0
