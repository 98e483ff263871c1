//! What a received frame is, from its ethertype (bytes 12..14) and, for IPv4, its
//! protocol (byte 23), for IPv6 its next header (byte 20) alone: the cheap first look
//! that sends a frame to the deposit decoder ([`super::FrameView`]), to [`super::arp`],
//! [`super::icmp`] or [`super::ndp`]. Nothing is validated here; the decoder a frame
//! goes to checks it.

use super::arp::ETHERTYPE_ARP;
use super::icmp::IP_PROTO_ICMP;
use super::underlay::{ETHERTYPE_IPV4, IP_PROTO_UDP};

pub use super::ipv6::ETHERTYPE_IPV6;
use super::ipv6::{NEXT_ICMPV6, NEXT_UDP};

/// Offset of the IPv6 next-header byte in a frame (Ethernet 14 + 6).
const NEXT_HEADER_AT: usize = 20;
/// Ethernet header + IPv6 header: what [`classify`] needs to read an IPv6 frame's
/// next header.
const IPV6_HEADERS_LEN: usize = super::ipv6::IPV6_HEADERS_LEN;

/// Offset of the IPv4 protocol byte in a frame (Ethernet 14 + 9).
const IP_PROTOCOL_AT: usize = 23;
/// Ethernet header + IPv4 header without options: what [`classify`] needs to read an
/// IPv4 frame's protocol.
const IPV4_HEADERS_LEN: usize = 34;

/// The kind of a received frame, by [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// IPv4 or IPv6 carrying UDP: a deposit frame, if [`super::FrameView::parse`]
    /// agrees.
    Udp,
    /// ARP ([`super::arp`]).
    Arp,
    /// IPv4 carrying ICMP ([`super::icmp`]).
    Icmp,
    /// IPv6 carrying ICMPv6 ([`super::ndp`]: neighbour discovery, echo).
    Icmpv6,
    /// IPv6 of another next header, or shorter than its headers.
    Ipv6,
    /// Anything else, with its ethertype: IPv4 of another protocol or shorter than its
    /// headers (0x0800), another ethertype (a VLAN tag's 0x8100 among them), or 0 for a
    /// frame shorter than an Ethernet header.
    Other(u16),
}

/// Sorts a frame by its ethertype, and an IPv4 frame of at least 34 bytes by its
/// protocol. Reads at most bytes 12, 13 and 23; never panics, whatever the length.
#[inline]
pub fn classify(frame: &[u8]) -> FrameKind {
    let Some(&[hi, lo]) = frame.get(12..14) else {
        return FrameKind::Other(0);
    };
    match u16::from_be_bytes([hi, lo]) {
        ETHERTYPE_IPV4 if frame.len() >= IPV4_HEADERS_LEN => match frame[IP_PROTOCOL_AT] {
            IP_PROTO_UDP => FrameKind::Udp,
            IP_PROTO_ICMP => FrameKind::Icmp,
            _ => FrameKind::Other(ETHERTYPE_IPV4),
        },
        ETHERTYPE_ARP => FrameKind::Arp,
        ETHERTYPE_IPV6 if frame.len() >= IPV6_HEADERS_LEN => match frame[NEXT_HEADER_AT] {
            NEXT_UDP => FrameKind::Udp,
            NEXT_ICMPV6 => FrameKind::Icmpv6,
            _ => FrameKind::Ipv6,
        },
        ETHERTYPE_IPV6 => FrameKind::Ipv6,
        other => FrameKind::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: u16, protocol: u8, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(34)];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[23] = protocol;
        f.truncate(len);
        f
    }

    #[test]
    fn kinds_by_ethertype_and_protocol() {
        assert_eq!(classify(&frame(0x0800, 17, 60)), FrameKind::Udp);
        assert_eq!(classify(&frame(0x0800, 1, 60)), FrameKind::Icmp);
        assert_eq!(classify(&frame(0x0800, 6, 60)), FrameKind::Other(0x0800));
        assert_eq!(classify(&frame(0x0806, 17, 60)), FrameKind::Arp);
        assert_eq!(classify(&frame(0x86dd, 17, 60)), FrameKind::Ipv6);
        assert_eq!(classify(&frame(0x8100, 17, 60)), FrameKind::Other(0x8100));
        assert_eq!(classify(&frame(0x88cc, 0, 60)), FrameKind::Other(0x88cc));
    }

    #[test]
    fn ipv6_kinds_by_next_header() {
        let v6 = |next: u8| {
            let mut f = frame(0x86dd, 0, 60);
            f[20] = next;
            classify(&f)
        };
        assert_eq!(v6(17), FrameKind::Udp);
        assert_eq!(v6(58), FrameKind::Icmpv6);
        assert_eq!(v6(6), FrameKind::Ipv6);
        let mut short = frame(0x86dd, 0, 53);
        short[20] = 17;
        assert_eq!(classify(&short), FrameKind::Ipv6);
    }

    #[test]
    fn a_deposit_frame_is_udp() {
        let mut buf = [0u8; 256];
        let n = crate::wire::FrameWriter::new(
            &mut buf,
            &crate::wire::UnderlayRepr::default(),
            &crate::wire::TransportRepr::default(),
        )
        .expect("room")
        .finish();
        assert_eq!(classify(&buf[..n]), FrameKind::Udp);
    }

    #[test]
    fn short_frames_never_panic() {
        for len in 0..14 {
            assert_eq!(classify(&frame(0x0800, 17, len)), FrameKind::Other(0));
            assert_eq!(classify(&frame(0x0806, 0, len)), FrameKind::Other(0));
        }
        for len in 14..34 {
            assert_eq!(classify(&frame(0x0800, 17, len)), FrameKind::Other(0x0800));
            assert_eq!(classify(&frame(0x0806, 0, len)), FrameKind::Arp);
            assert_eq!(classify(&frame(0x86dd, 0, len)), FrameKind::Ipv6);
        }
        assert_eq!(classify(&frame(0x0800, 17, 34)), FrameKind::Udp);
    }
}
