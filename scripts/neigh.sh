#!/usr/bin/env bash
# Usage: scripts/neigh.sh [DDPERF]            (root)
# Deposit nodes on real kernel interfaces, with nothing configured but their IPv4
# addresses (docs/design.md §11, `neigh`): every check runs ddperf on af_packet ports
# in network namespaces this script makes and removes.
#   1. kernel MACs: two namespaces on a bridge whose veths keep the MACs the kernel
#      gave them; write_lat and write_bw --verify between them, no MAC anywhere (each
#      node takes its port's MAC and resolves the peer's by ARP); promiscuous mode off
#      on both ports while they run;
#   1c. on a hub (the bridge learning nothing), a third node sees a and b's frames flooded
#      to it and takes none (counted `not_ours`);
#   2. kernel interop: `ping` and `arping` from a kernel host on the same bridge get
#      answers from a deposit node (a ddperf server waiting for its client);
#   4. unresolved: a client whose peer does not exist fails within a second with the
#      error that names the address and the port;
#   5. an attacker on the segment (the kernel host, scripts/arpflood.py) claims the
#      server's address by gratuitous and unsolicited ARP, floods replies for addresses
#      nobody asked for and sends malformed ARP/ICMP, all through a verified transfer:
#      the transfer is not redirected, and the client counts what it refused;
#   7. VLAN: two nodes with --vlan 100 run a verified transfer through the bridge (their
#      frames tagged, checked on the bridge port with a packet socket); a node with
#      --vlan 200 on the same bridge cannot reach the server (no ARP answer on its VLAN);
#   8. IPv6: write_lat and write_bw --verify between a and b at fd77::1/64 and
#      fd77::2/64 (UDP over IPv6, MACs by neighbour discovery), `ping -6` from the
#      kernel host answered, an unresolved IPv6 peer's error;
#   8c. an IPv6 attacker (scripts/ndpflood.py) through a verified IPv6 transfer: it is not
#      redirected, the table stays bounded, what was refused is counted;
#   8b. --tclass: the frames of both families carry the traffic class (read on the
#      bridge port), data frames ECN-capable (ECT(0));
#   3. routed: two subnets joined by a router namespace (kernel forwarding); ddperf
#      between a node on each, with --ip ADDR/24 and --gateway; the same over IPv6;
#   6. the router's MAC changes in the middle of a routed transfer (as when its port is
#      replaced): the client's connection, whose frames the router no longer takes,
#      asks again after its retransmission timeout, probes the new MAC, moves when the
#      server's checked answer comes from it, and the transfer completes verified.
set -euo pipefail
cd "$(dirname "$0")/.."
(($(id -u) == 0)) || { echo "neigh: network namespaces need root" >&2; exit 2; }
if [[ -n ${1:-} ]]; then dd=$1; else cargo build --release -q -p ddperf; dd=target/release/ddperf; fi
command -v arping >/dev/null && command -v ping >/dev/null || scripts/deps.sh

p=dn$$
ns=("${p}a" "${p}b" "${p}k" "${p}r")
down() {
    for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del "${p}br" 2>/dev/null || true
    for i in 0 1 2; do ip link del "${p}h$i" 2>/dev/null || true; done
}
trap down EXIT
trap 'exit 143' INT TERM
fail() { echo "neigh: FAILED: $*" >&2; exit 1; }
ok() { echo "neigh: ok: $*"; }

# A bridge in the root namespace, namespaces a, b (deposit nodes, no kernel address
# on their veth) and k (a kernel host, 10.77.0.9/24).
ip link add "${p}br" type bridge mcast_snooping 0
ip link set "${p}br" up
for i in 0 1 2; do
    n=${ns[$i]}
    ip netns add "$n"
    ip link add "${p}h$i" type veth peer name "${p}v$i"
    ip link set "${p}v$i" netns "$n"
    ip link set "${p}h$i" master "${p}br" up
    ip -n "$n" link set lo up
    ip -n "$n" link set "${p}v$i" up
    ip netns exec "$n" sysctl -qw "net.ipv6.conf.${p}v$i.disable_ipv6=1"
done
ip -n "${ns[2]}" addr add 10.77.0.9/24 dev "${p}v2"
mac_a=$(ip -n "${ns[0]}" -o link show "${p}v0" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
mac_b=$(ip -n "${ns[1]}" -o link show "${p}v1" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
echo "neigh: kernel MACs: a $mac_a, b $mac_b"

server() { # NS PORT ARGS...: a ddperf server in the background
    local n=$1 port=$2
    shift 2
    ip netns exec "$n" timeout 60 "$dd" "$@" --server --dev "af_packet:$port" >"/tmp/$p.server" 2>&1 &
    spid=$!
    sleep 1.5
}
promisc() { ip -n "$1" -d link show "$2" | grep -o 'promiscuity [0-9]*' | cut -d' ' -f2; }
# COUNTER [FILE]: a counter (or a drop reason's count) from ddperf --stats output in
# FILE (default the client's), 0 when not printed (ddperf leaves zeros out).
count() {
    awk -v k="$1" '$1 == "drops" && $2 == k {print $3; f=1} $1 == k {print $2; f=1} END {if (!f) print 0}' \
        "${2:-/tmp/$p.client}" | head -1
}

# 1. kernel MACs, no MAC configured.
for t in write_lat write_bw; do
    server "${ns[0]}" "${p}v0" "$t" --ip 10.77.0.1 -s 4096 -n 2000 --verify
    [[ $(promisc "${ns[0]}" "${p}v0") == 0 ]] || fail "a's port is promiscuous"
    ip netns exec "${ns[1]}" timeout 60 "$dd" "$t" --dev "af_packet:${p}v1" --ip 10.77.0.2 \
        -s 4096 -n 2000 --verify --json --stats 10.77.0.1 >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "$t between kernel MACs"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "$t server"; }
    grep -q 'ddperf: verify: OK' "/tmp/$p.client" ||
        { cat "/tmp/$p.client"; fail "$t: no verification reported"; }
    grep -E '^ *(arp_requests_tx|arp_replies_tx|neigh_resolved) ' "/tmp/$p.client" | tr -s ' ' | paste -sd' ' || true
    ok "$t -s 4096 --verify between kernel-assigned MACs ($mac_a, $mac_b), no MAC configured"
done
echo "neigh: promiscuity while serving: 0 (ip -d link)"

# 1b. two shards a side on af_packet: a socket per shard (qpairs=2), the kernel's fanout
# spreading the connections' flows (PACKET_FANOUT_HASH); a shard forwards what is
# another's. What shard 1's own socket received is its frames less those shard 0
# forwarded to it. The kernel may give every flow to one socket (16 flows: 1 in 32 768)
# or roll a full socket's flows over to the other under load: a second run then.
for try in 1 2; do
    server "${ns[0]}" "${p}v0" write_bw --ip 10.77.0.1 --workers 2 -q 16 -s 4096 -n 20000 --verify --stats
    ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip 10.77.0.2 --workers 2 \
        -q 16 -s 4096 -n 20000 --verify 10.77.0.1 >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "write_bw --workers 2"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "write_bw --workers 2 server"; }
    grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "--workers 2: not verified"; }
    read -r fw0 < <(awk '$1 == "shard" && $2 == "0:" {print $6}' "/tmp/$p.server")
    read -r rx1 < <(awk '$1 == "shard" && $2 == "1:" {print $4}' "/tmp/$p.server")
    own1=$((rx1 - fw0))
    ((own1 > 0)) && break
    echo "neigh: --workers 2 run $try: shard 1's socket received nothing; again"
done
((own1 > 0)) || { cat "/tmp/$p.server"; fail "--workers 2: shard 1 received nothing on a queue of its own"; }
ok "write_bw --workers 2 -q 16 --verify: shard 1's own socket received $own1 frames; server $(grep '^  shard' "/tmp/$p.server" | tr -s ' ' | paste -sd';')"

# 1c. the bridge as a hub (it learns no address: every frame reaches every port): a
# third node, c on k's veth, sees a and b's traffic flooded to it and takes none of it.
for i in 0 1 2; do ip link set dev "${p}h$i" type bridge_slave learning off; done
ip link set dev "${p}br" type bridge ageing_time 0
server "${ns[0]}" "${p}v0" write_bw --ip 10.77.0.1 -s 4096 -D 5 --verify
ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip 10.77.0.2 \
    -s 4096 -D 5 --verify 10.77.0.1 >"/tmp/$p.client" 2>&1 &
cpid=$!
sleep 0.5
ip netns exec "${ns[2]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v2" --ip 10.77.0.3 -n 10 \
    --timeout 4 --stats 10.77.0.99 >"/tmp/$p.other" 2>&1 || true
wait "$cpid" || { cat "/tmp/$p.client" "/tmp/$p.server"; fail "transfer on a hub"; }
wait "$spid" || { cat "/tmp/$p.server"; fail "server on a hub"; }
for i in 0 1 2; do ip link set dev "${p}h$i" type bridge_slave learning on; done
ip link set dev "${p}br" type bridge ageing_time 30000
c_rx=$(count frames_rx "/tmp/$p.other")
c_not=$(count not_ours "/tmp/$p.other")
((c_rx == 0 && c_not > 1000)) || { cat "/tmp/$p.other"; fail "a bystander on a hub: frames_rx $c_rx, not_ours $c_not"; }
ok "hub: a bystander node saw $c_not of a and b's frames (dropped as not_ours), took 0"

# 2. ping and arping from the kernel host, while a server waits.
server "${ns[0]}" "${p}v0" write_lat --ip 10.77.0.1 -n 100
ip netns exec "${ns[2]}" arping -c 3 -w 5 -I "${p}v2" 10.77.0.1 >"/tmp/$p.arping" 2>&1 ||
    { cat "/tmp/$p.arping"; fail "arping got no answer"; }
grep -qi "$mac_a" "/tmp/$p.arping" || { cat "/tmp/$p.arping"; fail "arping answered by another MAC"; }
ok "arping 10.77.0.1: $(grep -c -i "$mac_a" "/tmp/$p.arping") replies from $mac_a"
ip netns exec "${ns[2]}" ping -c 3 -W 2 -s 200 10.77.0.1 >"/tmp/$p.ping" 2>&1 ||
    { cat "/tmp/$p.ping"; fail "ping got no answer"; }
ok "ping -s 200 10.77.0.1: $(grep -o '[0-9]* received' "/tmp/$p.ping")"
ip netns exec "${ns[1]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v1" --ip 10.77.0.2 -n 100 \
    10.77.0.1 >/dev/null 2>&1 || fail "the client after ping"
wait "$spid" || fail "server after ping"

# 4. unresolved: nobody at 10.77.0.50.
start=$(date +%s%N)
if ip netns exec "${ns[1]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v1" --ip 10.77.0.2/24 \
    -n 10 --timeout 10 10.77.0.50 >"/tmp/$p.unres" 2>&1; then
    fail "a connect to nobody succeeded"
fi
ms=$((($(date +%s%N) - start) / 1000000))
grep -q "no ARP reply from 10.77.0.50 on port af_packet:${p}v1 after 8 tries" "/tmp/$p.unres" ||
    { cat "/tmp/$p.unres"; fail "unresolved error"; }
ok "unresolved peer fails in $ms ms: $(grep -o 'no ARP reply.*' "/tmp/$p.unres" | head -1)"

# 5. an attacker (the kernel host k) through a verified transfer: it starts once the
# connection is up (ARP has no authentication: an attacker that answers first can
# misdirect a connect request on a shared segment, as against any ARP-based stack; a
# secure connection's handshake then fails instead of connecting to it).
server "${ns[0]}" "${p}v0" write_bw --ip 10.77.0.1 -s 65536 -D 5 --verify
ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip 10.77.0.2 \
    -s 65536 -D 5 --verify --json --stats 10.77.0.1 >"/tmp/$p.client" 2>&1 &
cpid=$!
sleep 1.5
ip netns exec "${ns[2]}" timeout 20 python3 scripts/arpflood.py "${p}v2" 10.77.0.1 10.77.0.2 "$mac_b" 3 \
    >"/tmp/$p.flood" 2>&1 || { cat "/tmp/$p.flood"; fail "arpflood.py"; }
wait "$cpid" || { cat "/tmp/$p.client" "/tmp/$p.server" "/tmp/$p.flood"; fail "transfer under an ARP attack"; }
wait "$spid" || { cat "/tmp/$p.server"; fail "server under an ARP attack"; }
grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "attack: not verified"; }
uns=$(count unsolicited) bad=$(count bad_neighbour) moved=$(count peer_mac_changes)
((uns > 1000 && bad > 0)) || { cat "/tmp/$p.client"; fail "attack: refusals not counted (unsolicited $uns, bad_neighbour $bad)"; }
((moved == 0)) || { cat "/tmp/$p.client"; fail "attack: the connection moved ($moved)"; }
ok "ARP attack ($(cat "/tmp/$p.flood") forged frames): transfer verified, unsolicited $uns, bad_neighbour $bad, peer_mac_changes 0"

# 7. VLAN 100 between a and b; the kernel host's namespace runs a node on VLAN 200.
server "${ns[0]}" "${p}v0" write_bw --ip 10.77.0.1 --vlan 100 -s 4096 -n 5000 --verify
python3 - "${p}h1" >"/tmp/$p.tags" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(0.5)
# ETH_P_ALL on the bridge port: the kernel hands tagged frames over with the tag in
# the ancillary data; count frames by the TCI the auxiliary data gives.
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
tagged = untagged = 0
end = time.time() + 6
while time.time() < end:
    try:
        data, anc, _, _ = s.recvmsg(2048, socket.CMSG_SPACE(64))
    except socket.timeout:
        continue
    vid = None
    for lvl, typ, val in anc:
        # struct tpacket_auxdata: status, len, snaplen (u32), mac, net, vlan_tci,
        # vlan_tpid (u16).
        if lvl == 263 and typ == 8 and len(val) >= 20:
            status = int.from_bytes(val[0:4], "little")
            if status & (1 << 4):  # TP_STATUS_VLAN_VALID
                vid = int.from_bytes(val[16:18], "little") & 0xfff
    if data[12:14] == b"\x81\x00":
        vid = int.from_bytes(data[14:16], "big") & 0xfff
    if vid == 100:
        tagged += 1
    elif data[12:14] == b"\x08\x00":
        untagged += 1
print(tagged, untagged)
PY
tpid=$!
sleep 0.5
ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip 10.77.0.2 --vlan 100 \
    -s 4096 -n 5000 --verify 10.77.0.1 >"/tmp/$p.client" 2>&1 ||
    { cat "/tmp/$p.client" "/tmp/$p.server"; fail "VLAN 100 transfer"; }
if ip netns exec "${ns[2]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v2" --ip 10.77.0.9 \
    --vlan 200 -n 10 --timeout 5 10.77.0.1 >"/tmp/$p.other" 2>&1; then
    fail "a node on VLAN 200 reached VLAN 100's server"
fi
wait "$spid" || { cat "/tmp/$p.server"; fail "VLAN 100 server"; }
wait "$tpid" || true
read -r tagged untagged <"/tmp/$p.tags"
grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "VLAN: not verified"; }
((tagged > 1000 && untagged == 0)) || fail "VLAN frames on the bridge port: $tagged tagged 100, $untagged untagged IPv4"
grep -q "no ARP reply from 10.77.0.1" "/tmp/$p.other" || { cat "/tmp/$p.other"; fail "VLAN 200: unexpected error"; }
ok "VLAN 100: verified transfer, $tagged frames tagged 100 and $untagged untagged on b's bridge port; VLAN 200's node: $(grep -o 'no ARP reply[^:]*' "/tmp/$p.other" | head -1)"

# 8. IPv6 on the bridge: a at fd77::1, b at fd77::2 (their veths have no kernel IPv6:
# the deposit nodes answer neighbour solicitations themselves), k a kernel host at
# fd77::9.
ip netns exec "${ns[2]}" sysctl -qw "net.ipv6.conf.${p}v2.disable_ipv6=0"
ip -n "${ns[2]}" addr add fd77::9/64 dev "${p}v2" nodad
for t in write_lat write_bw; do
    server "${ns[0]}" "${p}v0" "$t" --ip fd77::1/64 -s 4096 -n 2000 --verify
    ip netns exec "${ns[1]}" timeout 60 "$dd" "$t" --dev "af_packet:${p}v1" --ip fd77::2/64 \
        -s 4096 -n 2000 --verify --json --stats fd77::1 >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "$t over IPv6"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "$t server over IPv6"; }
    grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "$t IPv6: not verified"; }
    (($(count neigh_resolved) >= 1)) || { cat "/tmp/$p.client"; fail "$t IPv6: nothing resolved"; }
    ok "$t -s 4096 --verify over IPv6 (fd77::2 -> fd77::1), MACs by neighbour discovery: $(grep -E '^ *(arp_requests_tx|arp_replies_tx|neigh_resolved) ' "/tmp/$p.client" | tr -s ' ' | paste -sd' ')"
done
server "${ns[0]}" "${p}v0" write_lat --ip fd77::1/64 -n 100
ip netns exec "${ns[2]}" ping -6 -c 3 -W 2 -s 200 fd77::1 >"/tmp/$p.ping" 2>&1 ||
    { cat "/tmp/$p.ping"; fail "ping -6 got no answer"; }
ip -n "${ns[2]}" -6 neigh show fd77::1 | grep -qi "$mac_a" ||
    { ip -n "${ns[2]}" -6 neigh show; fail "the kernel host's neighbour cache has no $mac_a for fd77::1"; }
ok "ping -6 -s 200 fd77::1: $(grep -o '[0-9]* received' "/tmp/$p.ping"), kernel neighbour cache: $(ip -n "${ns[2]}" -6 neigh show fd77::1 | tr -s ' ')"
ip netns exec "${ns[1]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v1" --ip fd77::2/64 -n 100 \
    fd77::1 >/dev/null 2>&1 || fail "the IPv6 client after ping -6"
wait "$spid" || fail "IPv6 server after ping -6"
if ip netns exec "${ns[1]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v1" --ip fd77::2/64 \
    -n 10 --timeout 10 fd77::50 >"/tmp/$p.unres" 2>&1; then
    fail "a connect to nobody over IPv6 succeeded"
fi
grep -q "no neighbour advertisement from fd77::50 on port af_packet:${p}v1 after 8 tries" "/tmp/$p.unres" ||
    { cat "/tmp/$p.unres"; fail "unresolved IPv6 error"; }
ok "unresolved IPv6 peer: $(grep -o 'no neighbour advertisement.*' "/tmp/$p.unres" | head -1)"

# 8c. an IPv6 attacker (the kernel host k, scripts/ndpflood.py) through a verified
# transfer: forged advertisements for the server's address, advertisements nobody asked
# for, solicitations from thousands of sources, malformed neighbour discovery.
server "${ns[0]}" "${p}v0" write_bw --ip fd77::1/64 -s 65536 -D 5 --verify
ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip fd77::2/64 \
    -s 65536 -D 5 --verify --json --stats fd77::1 >"/tmp/$p.client" 2>&1 &
cpid=$!
sleep 1.5
ip netns exec "${ns[2]}" timeout 20 python3 scripts/ndpflood.py "${p}v2" fd77::1 fd77::2 "$mac_b" 3 \
    >"/tmp/$p.flood" 2>&1 || { cat "/tmp/$p.flood"; fail "ndpflood.py"; }
wait "$cpid" || { cat "/tmp/$p.client" "/tmp/$p.server" "/tmp/$p.flood"; fail "transfer under an NDP attack"; }
wait "$spid" || { cat "/tmp/$p.server"; fail "server under an NDP attack"; }
grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "NDP attack: not verified"; }
uns=$(count unsolicited) bad=$(count bad_neighbour) capped=$(count neigh_capped) moved=$(count peer_mac_changes)
((uns > 1000 && bad > 0 && capped > 0)) ||
    { cat "/tmp/$p.client"; fail "NDP attack: refusals not counted (unsolicited $uns, bad_neighbour $bad, neigh_capped $capped)"; }
((moved == 0)) || { cat "/tmp/$p.client"; fail "NDP attack: the connection moved ($moved)"; }
ok "NDP attack ($(cat "/tmp/$p.flood") forged frames): transfer verified, unsolicited $uns, bad_neighbour $bad, neigh_capped $capped, peer_mac_changes 0"

# 8b. the traffic class (--tclass, verbs' traffic_class) on the frames of both
# families, read on b's bridge port: b's frames carry it, ECN bits clear.
for fam in 4 6; do
    if [[ $fam == 4 ]]; then sip=10.77.0.1 cip=10.77.0.2 plen=24 tc=104; else sip=fd77::1 cip=fd77::2 plen=64 tc=184; fi
    server "${ns[0]}" "${p}v0" write_lat --ip "$sip/$plen" --tclass "$tc" -n 2000
    python3 - "${p}h1" "$fam" >"/tmp/$p.tc" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(0.5)
counts, ect = {}, {}
end = time.time() + 4
while time.time() < end:
    try:
        f = s.recv(2048)
    except socket.timeout:
        continue
    if sys.argv[2] == "4" and f[12:14] == b"\x08\x00" and f[23] == 17:
        tc = f[15]
    elif sys.argv[2] == "6" and f[12:14] == b"\x86\xdd" and f[20] == 17:
        tc = ((f[14] & 15) << 4) | (f[15] >> 4)
    else:
        continue
    # By DSCP (the ECN bits are the transport's: ECT(0) on data frames).
    counts[tc & 0xFC] = counts.get(tc & 0xFC, 0) + 1
    ect[tc & 3] = ect.get(tc & 3, 0) + 1
print(" ".join(f"{k}:{v}" for k, v in sorted(counts.items())), "ecn", " ".join(f"{k}:{v}" for k, v in sorted(ect.items())))
PY
    cap=$!
    sleep 0.3
    ip netns exec "${ns[1]}" timeout 30 "$dd" write_lat --dev "af_packet:${p}v1" --ip "$cip/$plen" \
        --tclass "$tc" -n 2000 "$sip" >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "--tclass $tc over IPv$fam"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "--tclass server over IPv$fam"; }
    wait "$cap" || true
    got=$(sed 's/ ecn .*//' "/tmp/$p.tc" | tr ' ' '\n' | awk -F: -v t="$tc" '$1 == t {print $2}')
    ((${got:-0} > 1000)) || { cat "/tmp/$p.tc"; fail "IPv$fam frames with traffic class $tc: ${got:-0}"; }
    ect0=$(sed 's/.* ecn //' "/tmp/$p.tc" | tr ' ' '\n' | awk -F: '$1 == 2 {print $2}')
    ((${ect0:-0} > 500)) || { cat "/tmp/$p.tc"; fail "IPv$fam: ECT(0) data frames: ${ect0:-0}"; }
    ok "--tclass $tc over IPv$fam: UDP frames on b's bridge port by traffic class: $(cat "/tmp/$p.tc")"
done

# 3. routed: a in 10.1.0.0/24, b in 10.2.0.0/24, router r between (kernel forwarding).
for i in 0 1; do ip link set "${p}h$i" nomaster; ip link del "${p}h$i"; done
ip netns add "${ns[3]}"
ip -n "${ns[3]}" link set lo up
ip netns exec "${ns[3]}" sysctl -qw net.ipv4.ip_forward=1
for i in 0 1; do
    n=${ns[$i]}
    ip -n "$n" link del "${p}v$i" 2>/dev/null || true
    ip link add "${p}v$i" netns "$n" type veth peer name "${p}r$i" netns "${ns[3]}"
    ip -n "$n" link set "${p}v$i" up
    ip netns exec "$n" sysctl -qw "net.ipv6.conf.${p}v$i.disable_ipv6=1"
    ip -n "${ns[3]}" addr add "10.$((i + 1)).0.1/24" dev "${p}r$i"
    ip -n "${ns[3]}" link set "${p}r$i" up
done
for t in write_lat write_bw; do
    server "${ns[0]}" "${p}v0" "$t" --ip 10.1.0.2/24 --gateway 10.1.0.1 -s 4096 -n 2000 --verify
    ip netns exec "${ns[1]}" timeout 60 "$dd" "$t" --dev "af_packet:${p}v1" --ip 10.2.0.2/24 \
        --gateway 10.2.0.1 -s 4096 -n 2000 --verify --json 10.1.0.2 >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "routed $t"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "routed $t server"; }
    ok "routed $t -s 4096 --verify: 10.2.0.2/24 -> router -> 10.1.0.2/24 ($(python3 -c "
import json,sys
for l in open('/tmp/$p.client'):
    l=l.strip()
    if l.startswith('{'):
        d=json.loads(l); print(', '.join(f'{k} {d[k]}' for k in ('t_typical_us','bw_avg_mib_s') if k in d)); break
"))"
done
ip -n "${ns[3]}" -s link show "${p}r1" | awk '/RX:/{getline; print "neigh: router port b received " $2 " packets"}'

# 3b. routed over IPv6: a in fd01::/64, b in fd02::/64, the router forwarding IPv6.
ip netns exec "${ns[3]}" sysctl -qw net.ipv6.conf.all.forwarding=1
for i in 0 1; do ip -n "${ns[3]}" addr add "fd0$((i + 1))::1/64" dev "${p}r$i" nodad; done
for t in write_lat write_bw; do
    server "${ns[0]}" "${p}v0" "$t" --ip fd01::2/64 --gateway fd01::1 -s 4096 -n 2000 --verify
    ip netns exec "${ns[1]}" timeout 60 "$dd" "$t" --dev "af_packet:${p}v1" --ip fd02::2/64 \
        --gateway fd02::1 -s 4096 -n 2000 --verify --json fd01::2 >"/tmp/$p.client" 2>&1 ||
        { cat "/tmp/$p.client" "/tmp/$p.server"; fail "routed IPv6 $t"; }
    wait "$spid" || { cat "/tmp/$p.server"; fail "routed IPv6 $t server"; }
    grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "routed IPv6 $t: not verified"; }
    ok "routed IPv6 $t -s 4096 --verify: fd02::2/64 -> router -> fd01::2/64"
done
ip -n "${ns[3]}" -6 neigh show | grep -q "fd01::2" || fail "the router never resolved fd01::2"
echo "neigh: router's IPv6 neighbours: $(ip -n "${ns[3]}" -6 neigh show | grep -E 'fd0[12]::2' | tr -s ' ' | paste -sd';')"

# 6. the router's MAC on b's side changes 2 s into a routed transfer.
server "${ns[0]}" "${p}v0" write_bw --ip 10.1.0.2/24 --gateway 10.1.0.1 -s 4096 -D 6 --verify
ip netns exec "${ns[1]}" timeout 60 "$dd" write_bw --dev "af_packet:${p}v1" --ip 10.2.0.2/24 \
    --gateway 10.2.0.1 -s 4096 -D 6 --verify --json --stats 10.1.0.2 >"/tmp/$p.client" 2>&1 &
cpid=$!
sleep 2
old=$(ip -n "${ns[3]}" -o link show "${p}r1" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
ip -n "${ns[3]}" link set dev "${p}r1" address 02:3e:00:00:00:01
wait "$cpid" || { cat "/tmp/$p.client" "/tmp/$p.server"; fail "transfer across the router's MAC change"; }
wait "$spid" || { cat "/tmp/$p.server"; fail "server across the router's MAC change"; }
grep -q 'ddperf: verify: OK' "/tmp/$p.client" || { cat "/tmp/$p.client"; fail "MAC change: not verified"; }
moved=$(count peer_mac_changes) probes=$(count path_probes)
((moved >= 1)) || { cat "/tmp/$p.client"; fail "MAC change: the connection never moved"; }
ok "router MAC $old -> 02:3e:00:00:00:01 mid-transfer: verified, peer_mac_changes $moved, path_probes $probes, timeouts $(count timeouts)"
rm -f "/tmp/$p".*
echo "neigh: all passed"
