//! IPv6 (RFC 8200) as the underlay's second network layer: the Ethernet and IPv6
//! headers of a frame, no extension headers, read and written here for the underlay
//! (UDP, [`super::underlay`]) and for neighbour discovery and echo ([`super::ndp`]).
//!
//! ```text
//!  0..6   destination MAC          14..18 version 6 | traffic class | flow label
//!  6..12  source MAC               18..20 payload length (what follows the header)
//! 12..14  ethertype 0x86dd         20     next header (17 UDP, 58 ICMPv6)
//!                                  21     hop limit (64; 255 for neighbour discovery)
//!                                  22..38 source address
//!                                  38..54 destination address
//!                                  54..   payload: for the underlay, the UDP header
//!                                         (54..62) and the transport's bytes (62..)
//! ```
//!
//! A deposit frame over IPv6 is 20 bytes longer than over IPv4 (a 62-byte underlay,
//! [`IPV6_UNDERLAY_LEN`]); everything after the UDP header is the same. Its UDP
//! checksum is 0 (RFC 6935/6936 allow it for a tunnel-like protocol whose payload has
//! its own check, as RoCEv2 does: the transport's CRC32C or seal covers every byte
//! after the UDP header); a non-zero one is verified. The flow label carries the
//! frame's entropy (its UDP ports, [`flow_label`]), so that a router hashing on the
//! IPv6 3-tuple spreads connections as one hashing on the UDP 5-tuple does.

use super::checksum::{fold, sum_words};
use super::ETH_HEADER_LEN;
use super::{check_len, get_u16, set_u16, WireError};

/// Ethernet type of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Length of the IPv6 header (no extension headers).
pub const IPV6_HEADER_LEN: usize = 40;
/// Ethernet + IPv6 headers: where an IPv6 packet's payload starts in a frame.
pub const IPV6_HEADERS_LEN: usize = ETH_HEADER_LEN + IPV6_HEADER_LEN;
/// Ethernet + IPv6 + UDP: the underlay of a deposit frame over IPv6.
pub const IPV6_UNDERLAY_LEN: usize = IPV6_HEADERS_LEN + 8;
/// Bytes an IPv6 underlay takes beyond an IPv4 one.
pub const IPV6_EXTRA: usize = IPV6_UNDERLAY_LEN - super::UNDERLAY_LEN;
/// Hop limit of the underlay's packets (as IPv4's TTL).
pub const IPV6_HOP_LIMIT: u8 = 64;
/// IPv6 next-header number of UDP.
pub const NEXT_UDP: u8 = 17;
/// IPv6 next-header number of ICMPv6.
pub const NEXT_ICMPV6: u8 = 58;

/// Offsets of the IPv6 header's fields, and of the UDP header after it.
pub(super) mod field {
    use super::super::Field;

    pub const VER_TC_FLOW: Field = 14..18;
    pub const PAYLOAD_LEN: Field = 18..20;
    pub const NEXT_HEADER: usize = 20;
    pub const HOP_LIMIT: usize = 21;
    pub const SRC_IP: Field = 22..38;
    pub const DST_IP: Field = 38..54;

    pub const SRC_PORT: Field = 54..56;
    pub const DST_PORT: Field = 56..58;
    pub const UDP_LEN: Field = 58..60;
    pub const UDP_CHECKSUM: Field = 60..62;
}

/// The fields of an IPv6 header that passed [`check_ipv6_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Header {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address.
    pub dst_mac: [u8; 6],
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Next header (no extension headers are followed: their number is this).
    pub next: u8,
    /// Hop limit as received.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Payload length: the bytes after the 40-byte header, all in the buffer.
    pub payload_len: u16,
}

/// The checks every IPv6 frame we read passes, in this order: at least the Ethernet
/// and IPv6 headers, ethertype IPv6, version 6, the payload length within the buffer
/// (Ethernet padding after it is allowed). What follows (the next header, the
/// payload) is the caller's.
pub fn check_ipv6_header(frame: &[u8]) -> Result<Ipv6Header, WireError> {
    check_len(frame, IPV6_HEADERS_LEN)?;
    let ethertype = get_u16(frame, 12..14);
    if ethertype != ETHERTYPE_IPV6 {
        return Err(WireError::BadEthertype(ethertype));
    }
    let version = frame[14] >> 4;
    if version != 6 {
        return Err(WireError::BadIpVersion(version));
    }
    let payload_len = get_u16(frame, field::PAYLOAD_LEN);
    check_len(frame, IPV6_HEADERS_LEN + usize::from(payload_len))?;
    Ok(Ipv6Header {
        src_mac: super::array(frame, 6..12),
        dst_mac: super::array(frame, 0..6),
        src: super::array(frame, field::SRC_IP),
        dst: super::array(frame, field::DST_IP),
        next: frame[field::NEXT_HEADER],
        hop_limit: frame[field::HOP_LIMIT],
        traffic_class: (frame[14] << 4) | (frame[15] >> 4),
        payload_len,
    })
}

/// Writes the Ethernet header (`(dst, src)` MACs, IPv6) and the IPv6 header (traffic
/// class `tc`, `flow` label, `next` header, `hop_limit`, `(src, dst)` addresses) at the
/// front of `data`, which holds at least [`IPV6_HEADERS_LEN`] bytes; the payload length
/// is the caller's ([`set_payload_len`]).
#[inline]
pub(super) fn put_ipv6_header(
    data: &mut [u8],
    (dst_mac, src_mac): ([u8; 6], [u8; 6]),
    (src, dst): ([u8; 16], [u8; 16]),
    (next, hop_limit): (u8, u8),
    (tc, flow): (u8, u32),
) {
    data[0..6].copy_from_slice(&dst_mac);
    data[6..12].copy_from_slice(&src_mac);
    set_u16(data, 12..14, ETHERTYPE_IPV6);
    let vtf = 6u32 << 28 | u32::from(tc) << 20 | flow & 0xf_ffff;
    data[field::VER_TC_FLOW].copy_from_slice(&vtf.to_be_bytes());
    data[field::NEXT_HEADER] = next;
    data[field::HOP_LIMIT] = hop_limit;
    data[field::SRC_IP].copy_from_slice(&src);
    data[field::DST_IP].copy_from_slice(&dst);
}

/// Sets the IPv6 payload length (the bytes after the 40-byte header).
#[inline]
pub(super) fn set_payload_len(data: &mut [u8], len: u16) {
    set_u16(data, field::PAYLOAD_LEN, len);
}

/// The one's complement sum of the IPv6 pseudo header (RFC 8200 §8.1) of a packet of
/// `frame`'s addresses carrying `len` bytes of upper-layer protocol `next`, not yet
/// folded: what UDP and ICMPv6 checksums start from.
#[inline]
pub(super) fn pseudo_sum(frame: &[u8], len: usize, next: u8) -> u64 {
    sum_words(&frame[field::SRC_IP.start..field::DST_IP.end]) + len as u64 + u64::from(next)
}

/// The upper-layer checksum over `frame`'s pseudo header and the `len` bytes of
/// protocol `next` at `start`, skipping the checksum field at `start + at`: `None`
/// when the buffer does not hold them.
pub(super) fn upper_checksum(
    frame: &[u8],
    start: usize,
    len: usize,
    next: u8,
    at: usize,
) -> Option<u16> {
    let data = frame.get(start..start.checked_add(len)?)?;
    if len < at + 2 {
        return None;
    }
    let sum = pseudo_sum(frame, len, next) + sum_words(&data[..at]) + sum_words(&data[at + 2..]);
    Some(!fold(sum))
}

/// The flow label of a frame between UDP ports `src` and `dst`: a 20-bit mix of both
/// (never 0, which means "no label"), so that the label spreads as the ports do.
#[inline]
pub fn flow_label(src: u16, dst: u16) -> u32 {
    let x = (u32::from(src) << 16 | u32::from(dst)).wrapping_mul(0x9e37_79b1);
    (x >> 12).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2];

    #[test]
    fn a_written_header_reads_back() {
        let mut f = [0u8; 64];
        put_ipv6_header(
            &mut f,
            ([1; 6], [2; 6]),
            (SRC, DST),
            (NEXT_UDP, IPV6_HOP_LIMIT),
            (0xb8, 0x12345),
        );
        set_payload_len(&mut f, 10);
        assert_eq!(&f[14..18], &[0x6b, 0x81, 0x23, 0x45]);
        let h = check_ipv6_header(&f).unwrap();
        assert_eq!(h.src, SRC);
        assert_eq!(h.dst, DST);
        assert_eq!((h.next, h.hop_limit, h.payload_len), (17, 64, 10));
        assert_eq!(h.traffic_class, 0xb8);
        assert_eq!((h.src_mac, h.dst_mac), ([2; 6], [1; 6]));
    }

    #[test]
    fn bad_headers_say_what_is_wrong() {
        let mut f = [0u8; 64];
        put_ipv6_header(&mut f, ([1; 6], [2; 6]), (SRC, DST), (17, 64), (0, 1));
        set_payload_len(&mut f, 11);
        assert!(matches!(
            check_ipv6_header(&f),
            Err(WireError::Truncated { needed: 65, .. })
        ));
        set_payload_len(&mut f, 0);
        assert!(matches!(
            check_ipv6_header(&f[..53]),
            Err(WireError::Truncated { .. })
        ));
        f[14] = 0x45;
        assert!(matches!(
            check_ipv6_header(&f),
            Err(WireError::BadIpVersion(4))
        ));
        f[12] = 8;
        f[13] = 0;
        assert!(matches!(
            check_ipv6_header(&f),
            Err(WireError::BadEthertype(0x0800))
        ));
    }

    #[test]
    fn flow_labels_are_20_bits_never_zero_and_spread() {
        let labels: std::collections::HashSet<u32> =
            (49152..49152 + 256).map(|p| flow_label(p, 18515)).collect();
        assert!(labels.len() > 250);
        assert!(labels.iter().all(|&l| l != 0 && l < 1 << 20));
    }
}
