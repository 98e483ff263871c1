//! The internet checksum (RFC 1071): IPv4 headers, UDP, ICMP and ICMPv6.

/// One's complement sum of big-endian 16-bit words (an odd last byte is the high half
/// of a word), not yet folded. The internet checksum of RFC 1071 is `!fold(sum)`.
#[inline]
pub(crate) fn sum_words(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    let mut sum: u64 = chunks
        .by_ref()
        .map(|c| u64::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    if let [b] = chunks.remainder() {
        sum += u64::from(*b) << 8;
    }
    sum
}

/// Folds the carries of a one's complement sum into 16 bits.
#[inline]
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}
