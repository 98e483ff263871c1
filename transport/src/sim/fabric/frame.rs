//! What a switch of the fabric reads in a frame and writes back into it: the flow's
//! 5-tuple it hashes to choose among equal-cost next hops (ECMP), and the ECN field
//! it marks when its queue is long.
//!
//! A switch looks past one 802.1Q tag, as real ones do, and reads only headers: it
//! never checks a checksum (the receiving node does). Marking rewrites the ECN bits
//! in place — IPv4's DSCP/ECN byte (offset 15 untagged) with its header checksum
//! updated incrementally (RFC 1624), or the low two bits of IPv6's traffic class
//! (bits 5..4 of byte 15; IPv6 has no header checksum, and the UDP checksum's
//! pseudo-header does not cover the traffic class) — so the frame stays one the
//! receiver accepts.
//!
//! ```text
//! IPv4  14 version|IHL   15 DSCP(6)|ECN(2)   23 protocol   26..34 addresses   34.. ports
//! IPv6  14 version(4)|class high(4)   15 class low(4: DSCP 2, ECN 2)|flow label(4)
//!       20 next header   22..54 addresses   54.. ports
//! ```

use crate::wire::ipv6::ETHERTYPE_IPV6;
use crate::wire::underlay::{ECN_MASK, ETHERTYPE_IPV4};
use crate::wire::vlan::{ETHERTYPE_VLAN, VLAN_LEN};
use crate::wire::ETH_HEADER_LEN;

/// ECN codepoint: not ECN-capable (RFC 3168). Such frames are never marked, only
/// dropped when the queue is full.
pub const NOT_ECT: u8 = 0b00;
/// ECN codepoint: ECN-capable transport (1), L4S's codepoint.
pub const ECT1: u8 = 0b01;
/// ECN codepoint: ECN-capable transport (0), the classic one.
pub const ECT0: u8 = 0b10;
/// ECN codepoint: congestion experienced, what a switch writes over ECT(0) or ECT(1).
pub const CE: u8 = 0b11;

/// IP protocol numbers whose first four payload bytes are the two ports.
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The network layer of a frame: its ethertype and where its header starts, past one
/// 802.1Q tag.
fn network(frame: &[u8]) -> Option<(u16, usize)> {
    let ty = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    if ty == ETHERTYPE_VLAN {
        let inner = u16::from_be_bytes(frame.get(16..18)?.try_into().ok()?);
        return Some((inner, ETH_HEADER_LEN + VLAN_LEN));
    }
    Some((ty, ETH_HEADER_LEN))
}

/// The fields of a frame a switch hashes to choose its path: IP source, destination
/// and protocol, and the UDP (or TCP) ports. An IPv4 address takes the first four of
/// the sixteen bytes. A frame that is not IP (an ARP answer) is hashed on its MACs
/// and its ethertype (as `proto`), its ports zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// IP source address (or the source MAC).
    pub src: [u8; 16],
    /// IP destination address (or the destination MAC).
    pub dst: [u8; 16],
    /// IP protocol (IPv6: next header); the ethertype's low byte for non-IP.
    pub proto: u8,
    /// UDP or TCP source port, 0 for other protocols.
    pub src_port: u16,
    /// UDP or TCP destination port, 0 for other protocols.
    pub dst_port: u16,
}

impl FiveTuple {
    /// The 5-tuple of `frame`: never fails, a truncated header reads as zeros.
    pub fn of(frame: &[u8]) -> FiveTuple {
        let mut t = FiveTuple {
            src: [0; 16],
            dst: [0; 16],
            proto: 0,
            src_port: 0,
            dst_port: 0,
        };
        let copy = |to: &mut [u8], r: std::ops::Range<usize>| {
            if let Some(b) = frame.get(r) {
                to[..b.len()].copy_from_slice(b);
            }
        };
        let (ports_at, proto) = match network(frame) {
            Some((ETHERTYPE_IPV4, l3)) => {
                copy(&mut t.src, l3 + 12..l3 + 16);
                copy(&mut t.dst, l3 + 16..l3 + 20);
                let ihl = frame.get(l3).map_or(5, |b| usize::from(b & 0x0f));
                (l3 + 4 * ihl, frame.get(l3 + 9).copied().unwrap_or(0))
            }
            Some((ETHERTYPE_IPV6, l3)) => {
                copy(&mut t.src, l3 + 8..l3 + 24);
                copy(&mut t.dst, l3 + 24..l3 + 40);
                (l3 + 40, frame.get(l3 + 6).copied().unwrap_or(0))
            }
            other => {
                copy(&mut t.src, 6..12);
                copy(&mut t.dst, 0..6);
                t.proto = other.map_or(0, |(ty, _)| ty as u8);
                return t;
            }
        };
        t.proto = proto;
        if proto == PROTO_UDP || proto == PROTO_TCP {
            if let Some(p) = frame.get(ports_at..ports_at + 4) {
                t.src_port = u16::from_be_bytes([p[0], p[1]]);
                t.dst_port = u16::from_be_bytes([p[2], p[3]]);
            }
        }
        t
    }

    /// A fixed hash of the tuple under `seed` (splitmix64's finaliser over its
    /// words): the same on every run and machine, so that a seed names the paths
    /// flows take, and different for each switch's seed (no polarisation).
    pub fn hash(&self, seed: u64) -> u64 {
        let w = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
        let words = [
            w(&self.src[..8]),
            w(&self.src[8..]),
            w(&self.dst[..8]),
            w(&self.dst[8..]),
            (u64::from(self.proto) << 32)
                | (u64::from(self.src_port) << 16)
                | u64::from(self.dst_port),
        ];
        words.iter().fold(mix(seed), |h, &x| mix(h ^ x))
    }
}

/// splitmix64's finaliser: every input bit moves about half the output bits.
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The ECN codepoint of an IP frame (`None` for a frame that is not IP).
pub fn ecn(frame: &[u8]) -> Option<u8> {
    match network(frame)? {
        (ETHERTYPE_IPV4, l3) => Some(frame.get(l3 + 1)? & ECN_MASK),
        (ETHERTYPE_IPV6, l3) => Some((frame.get(l3 + 1)? >> 4) & ECN_MASK),
        _ => None,
    }
}

/// Rewrites the ECN codepoint of an IP frame to `codepoint` (its two low bits),
/// keeping an IPv4 header checksum right; false (nothing written) for a frame that
/// is not IP or is too short.
pub fn set_ecn(frame: &mut [u8], codepoint: u8) -> bool {
    let codepoint = codepoint & ECN_MASK;
    match network(frame) {
        Some((ETHERTYPE_IPV4, l3)) if frame.len() >= l3 + 20 => {
            let old = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
            frame[l3 + 1] = (frame[l3 + 1] & !ECN_MASK) | codepoint;
            let new = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
            let sum = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
            let sum = checksum_update(sum, old, new);
            frame[l3 + 10..l3 + 12].copy_from_slice(&sum.to_be_bytes());
            true
        }
        Some((ETHERTYPE_IPV6, l3)) if frame.len() >= l3 + 40 => {
            frame[l3 + 1] = (frame[l3 + 1] & !(ECN_MASK << 4)) | (codepoint << 4);
            true
        }
        _ => false,
    }
}

/// RFC 1624's incremental update of an internet checksum `sum` when one 16-bit word
/// of what it covers changes from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
fn checksum_update(sum: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!sum) + u32::from(!old) + u32::from(new);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::underlay::{UnderlayPacket, UnderlayRepr};
    use std::net::IpAddr;

    /// A deposit-shaped IPv4 frame from 10.0.0.1:`sport` to 10.0.0.2 (traffic class
    /// `tc`), written by the underlay's own writer so that its checksum is real.
    fn v4_frame(sport: u16, tc: u8) -> Vec<u8> {
        let mut f = vec![0u8; 100];
        let u = UnderlayRepr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: IpAddr::from([10, 0, 0, 1]),
            dst_ip: IpAddr::from([10, 0, 0, 2]),
            src_port: sport,
            dst_port: crate::wire::UDP_PORT,
            traffic_class: tc,
        };
        u.emit(
            &mut UnderlayPacket::new_unchecked(&mut f[..]),
            100 - crate::wire::UNDERLAY_LEN,
        );
        f
    }

    #[test]
    fn marking_an_ipv4_frame_keeps_its_header_checksum_right() {
        for tc in [0xb8 | ECT0, ECT1, 0x04 | ECT0, 0xfc | ECT1] {
            let mut f = v4_frame(49152, tc);
            assert!(UnderlayPacket::new_unchecked(&f[..]).ip_checksum_ok());
            assert!(set_ecn(&mut f, CE));
            assert_eq!(ecn(&f), Some(CE));
            assert_eq!(f[15] >> 2, tc >> 2, "the DSCP stays");
            let p = UnderlayPacket::new_unchecked(&f[..]);
            assert!(p.ip_checksum_ok(), "tc {tc:#x}");
            assert_eq!(p.ip_checksum(), p.compute_ip_checksum());
            UnderlayRepr::parse(&p).expect("still a frame the node takes");
        }
    }

    #[test]
    fn the_five_tuple_reads_ip_and_ports_past_a_vlan_tag() {
        let f = v4_frame(49152 | 0x300, 0);
        let t = FiveTuple::of(&f);
        assert_eq!(&t.src[..4], &[10, 0, 0, 1]);
        assert_eq!(&t.dst[..4], &[10, 0, 0, 2]);
        assert_eq!((t.proto, t.src_port, t.dst_port), (17, 0xc300, 18515));
        let mut tagged = f.clone();
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        assert_eq!(FiveTuple::of(&tagged), t);
        assert!(set_ecn(&mut tagged, ECT0));
        assert_eq!(ecn(&tagged), Some(ECT0));
        assert_ne!(
            t.hash(1),
            FiveTuple::of(&v4_frame(49152, 0)).hash(1),
            "another source port, another hash"
        );
        assert_ne!(t.hash(1), t.hash(2), "another seed, another hash");
    }

    #[test]
    fn ipv6_ecn_is_the_low_bits_of_the_traffic_class() {
        let mut f = vec![0u8; 80];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        // Version 6, traffic class 0xb9 (DSCP 46, ECT(1)), flow label 0x12345.
        f[14..18].copy_from_slice(&(6u32 << 28 | 0xb9 << 20 | 0x12345).to_be_bytes());
        f[20] = 17;
        assert_eq!(ecn(&f), Some(ECT1));
        assert!(set_ecn(&mut f, CE));
        let w = u32::from_be_bytes(f[14..18].try_into().unwrap());
        assert_eq!(w, 6u32 << 28 | 0xbb << 20 | 0x12345);
        let arp = [0u8; 60];
        assert_eq!(ecn(&arp), None, "not IP");
        assert!(!set_ecn(&mut arp.clone(), CE));
    }
}
