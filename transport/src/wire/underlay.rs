//! The underlay: Ethernet II + IPv4 (no options) + UDP, the first 42 bytes of a frame.
//!
//! ```text
//!  0..6   destination MAC          14     version 4 | IHL 5     34..36  UDP source port
//!  6..12  source MAC               15     DSCP/ECN (traffic class)          36..38  UDP dest port 18515
//! 12..14  ethertype 0x0800         16..18 total length          38..40  UDP length
//!                                  18..20 identification (0)    40..42  UDP checksum (0)
//!                                  20..22 DF | fragment offset
//!                                  22     TTL 64
//!                                  23     protocol 17
//!                                  24..26 header checksum
//!                                  26..30 source address
//!                                  30..34 destination address
//! ```
//!
//! An [`UnderlayPacket`] views a whole frame (the UDP payload follows the headers), so
//! that the IPv4 and UDP lengths can be checked against the buffer. It never looks at
//! the UDP payload except to verify a non-zero UDP checksum.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;

pub(super) use super::checksum::{fold, sum_words};
use super::ipv6::{
    self as v6, check_ipv6_header, put_ipv6_header, ETHERTYPE_IPV6, IPV6_HEADERS_LEN,
    IPV6_UNDERLAY_LEN,
};
use super::{check_len, get_u16, set_u16, WireError, UDP_PORT, UNDERLAY_LEN};

/// Offsets of the Ethernet and IPv4 fields (shared with `icmp`, whose frames have the
/// same first 34 bytes) and of the UDP fields.
pub(super) mod field {
    use super::super::Field;

    pub const DST_MAC: Field = 0..6;
    pub const SRC_MAC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;

    pub const VER_IHL: usize = 14;
    pub const DSCP_ECN: usize = 15;
    pub const TOTAL_LEN: Field = 16..18;
    pub const IDENT: Field = 18..20;
    pub const FLAGS_FRAG: Field = 20..22;
    pub const TTL: usize = 22;
    pub const PROTOCOL: usize = 23;
    pub const IP_CHECKSUM: Field = 24..26;
    pub const SRC_IP: Field = 26..30;
    pub const DST_IP: Field = 30..34;
    /// The whole IPv4 header, the range its checksum covers.
    pub const IP_HEADER: Field = 14..34;

    pub const SRC_PORT: Field = 34..36;
    pub const DST_PORT: Field = 36..38;
    pub const UDP_LEN: Field = 38..40;
    pub const UDP_CHECKSUM: Field = 40..42;
    /// Where the UDP datagram (header + payload) starts.
    pub const UDP_START: usize = 34;
}

/// The ECN bits of an IP traffic class (RFC 3168; the low two of the DSCP/ECN byte).
pub const ECN_MASK: u8 = 0b11;
/// Ethernet type of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// IPv4 protocol number of UDP.
pub const IP_PROTO_UDP: u8 = 17;
/// Time to live of emitted packets.
pub const IP_TTL: u8 = 64;
/// Don't-fragment bit of the IPv4 flags/offset field.
pub const IP_DONT_FRAGMENT: u16 = 0x4000;
/// More-fragments bit of the IPv4 flags/offset field.
pub const IP_MORE_FRAGMENTS: u16 = 0x2000;
/// Length of the IPv4 header (no options).
pub const IP_HEADER_LEN: usize = 20;
/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Offset of the IPv4 header in the frame (after Ethernet).
pub use super::ETH_HEADER_LEN;

/// A view of a frame's underlay headers (the buffer may extend past them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnderlayPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UnderlayPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`UNDERLAY_LEN`]. Use [`UnderlayPacket::new_checked`] for input from the wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UnderlayPacket { buffer }
    }

    /// Wraps a buffer that holds at least the 42 header bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), UNDERLAY_LEN)?;
        Ok(UnderlayPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::DST_MAC)
    }

    /// Source MAC address.
    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::SRC_MAC)
    }

    /// Ethernet type.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// IP version (high nibble of byte 14).
    #[inline]
    pub fn ip_version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// IPv4 header length in 32-bit words (low nibble of byte 14).
    #[inline]
    pub fn ip_ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// DSCP and ECN bits.
    #[inline]
    pub fn ip_dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// IPv4 total length (IPv4 header + UDP header + UDP payload).
    #[inline]
    pub fn ip_total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TOTAL_LEN)
    }

    /// IPv4 identification.
    #[inline]
    pub fn ip_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// IPv4 flags and fragment offset, raw.
    #[inline]
    pub fn ip_flags_frag(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }

    /// IPv4 time to live.
    #[inline]
    pub fn ip_ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// IPv4 protocol.
    #[inline]
    pub fn ip_protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// IPv4 header checksum as carried.
    #[inline]
    pub fn ip_checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IP_CHECKSUM)
    }

    /// IPv4 source address.
    #[inline]
    pub fn src_ip(&self) -> [u8; 4] {
        super::array(self.buffer.as_ref(), field::SRC_IP)
    }

    /// IPv4 destination address.
    #[inline]
    pub fn dst_ip(&self) -> [u8; 4] {
        super::array(self.buffer.as_ref(), field::DST_IP)
    }

    /// UDP source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// UDP destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// UDP length (UDP header + payload).
    #[inline]
    pub fn udp_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::UDP_LEN)
    }

    /// UDP checksum as carried (0: none).
    #[inline]
    pub fn udp_checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::UDP_CHECKSUM)
    }

    /// The IPv4 header checksum the header should carry (computed with the checksum
    /// field taken as zero).
    #[inline]
    pub fn compute_ip_checksum(&self) -> u16 {
        let h = &self.buffer.as_ref()[field::IP_HEADER];
        let sum = sum_words(&h[..10]) + sum_words(&h[12..]);
        !fold(sum)
    }

    /// Whether the IPv4 header checksum is right (the one's complement sum over the
    /// header, checksum included, is all ones).
    #[inline]
    pub fn ip_checksum_ok(&self) -> bool {
        fold(sum_words(&self.buffer.as_ref()[field::IP_HEADER])) == 0xffff
    }

    /// The checks of an IPv4 header every frame we take passes, in this order:
    /// ethertype IPv4, version 4, header length 5 words (no options), the header
    /// checksum, not a fragment (DF may be set). What follows (protocol, lengths) is
    /// the caller's. The buffer holds the Ethernet and IPv4 headers.
    #[inline]
    pub(super) fn check_ipv4_header(&self) -> Result<(), WireError> {
        if self.ethertype() != ETHERTYPE_IPV4 {
            return Err(WireError::BadEthertype(self.ethertype()));
        }
        if self.ip_version() != 4 {
            return Err(WireError::BadIpVersion(self.ip_version()));
        }
        if self.ip_ihl() != 5 {
            return Err(WireError::BadIpHeaderLen(self.ip_ihl()));
        }
        if !self.ip_checksum_ok() {
            return Err(WireError::BadIpChecksum {
                expected: self.compute_ip_checksum(),
                got: self.ip_checksum(),
            });
        }
        if self.ip_flags_frag() & !IP_DONT_FRAGMENT != 0 {
            return Err(WireError::IpFragment(self.ip_flags_frag()));
        }
        Ok(())
    }

    /// The UDP checksum the datagram should carry, over the pseudo header and the
    /// `udp_len` bytes of the datagram (checksum field taken as zero). `None` when the
    /// buffer does not hold the whole datagram.
    pub fn compute_udp_checksum(&self) -> Option<u16> {
        let data = self.buffer.as_ref();
        let udp_len = self.udp_len() as usize;
        let end = field::UDP_START.checked_add(udp_len)?;
        let datagram = data.get(field::UDP_START..end)?;
        if udp_len < UDP_HEADER_LEN {
            return None;
        }
        let pseudo = sum_words(&data[field::SRC_IP.start..field::DST_IP.end])
            + u64::from(IP_PROTO_UDP)
            + udp_len as u64;
        let sum = pseudo + sum_words(&datagram[..6]) + sum_words(&datagram[8..]);
        let c = !fold(sum);
        // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
        Some(if c == 0 { 0xffff } else { c })
    }

    /// The UDP payload: the bytes after the UDP header up to the UDP length, or `None`
    /// when the buffer is shorter than that or the length is below the header's.
    #[inline]
    pub fn udp_payload(&self) -> Option<&[u8]> {
        let end = field::UDP_START.checked_add(self.udp_len() as usize)?;
        self.buffer.as_ref().get(UNDERLAY_LEN..end)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UnderlayPacket<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_mac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::DST_MAC].copy_from_slice(&v);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_mac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SRC_MAC].copy_from_slice(&v);
    }

    /// Sets the IPv4 source address.
    #[inline]
    pub fn set_src_ip(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::SRC_IP].copy_from_slice(&v);
    }

    /// Sets the IPv4 destination address.
    #[inline]
    pub fn set_dst_ip(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::DST_IP].copy_from_slice(&v);
    }

    /// Sets the UDP source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets the UDP destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets the IPv4 header checksum field.
    #[inline]
    pub fn set_ip_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::IP_CHECKSUM, v);
    }

    /// Sets the UDP checksum field (0: none).
    #[inline]
    pub fn set_udp_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::UDP_CHECKSUM, v);
    }

    /// Sets the IPv4 total length and UDP length for a UDP payload of `payload_len`
    /// bytes, and recomputes the IPv4 header checksum. `payload_len` must leave the
    /// total length within 16 bits (the frame writer guarantees it).
    #[inline]
    pub fn set_lengths(&mut self, payload_len: usize) {
        let udp = (UDP_HEADER_LEN + payload_len) as u16;
        let total = (IP_HEADER_LEN + UDP_HEADER_LEN + payload_len) as u16;
        let data = self.buffer.as_mut();
        set_u16(data, field::TOTAL_LEN, total);
        set_u16(data, field::UDP_LEN, udp);
        let c = self.compute_ip_checksum();
        self.set_ip_checksum(c);
    }
}

/// The addresses of a frame's underlay; everything else in it is fixed or derived.
/// The destination address's family decides the network layer: IPv4 (a 42-byte
/// underlay) or IPv6 (62 bytes, [`super::ipv6`]); a node's frames have one family
/// (a source of the other is written as its IPv4-mapped form, or 0.0.0.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnderlayRepr {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address.
    pub dst_mac: [u8; 6],
    /// IP source address.
    pub src_ip: IpAddr,
    /// IP destination address.
    pub dst_ip: IpAddr,
    /// UDP source port (chosen per connection so RSS spreads connections over queues).
    pub src_port: u16,
    /// UDP destination port; [`UDP_PORT`] for deposit frames.
    pub dst_port: u16,
    /// The IP traffic class: IPv4's DSCP/ECN byte, IPv6's traffic class (DSCP in the
    /// top six bits, ECN in the low two).
    pub traffic_class: u8,
}

impl Default for UnderlayRepr {
    fn default() -> Self {
        let zero = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        UnderlayRepr {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src_ip: zero,
            dst_ip: zero,
            src_port: 0,
            dst_port: 0,
            traffic_class: 0,
        }
    }
}

/// `ip`'s four bytes: an IPv4 address, or the IPv4 address an IPv6 one maps (0.0.0.0
/// for any other).
#[inline]
pub fn v4_octets(ip: IpAddr) -> [u8; 4] {
    match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
    }
}

/// `ip`'s sixteen bytes: an IPv6 address, or an IPv4 one's mapped form.
#[inline]
pub fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl UnderlayRepr {
    /// Decodes and validates the underlay: ethertype, IPv4 version, header length,
    /// fragmentation, protocol and header checksum, the IPv4 total length against the
    /// buffer, the UDP length against the total length, the UDP destination port, and a
    /// non-zero UDP checksum. Bytes after the IPv4 total length (Ethernet padding) are
    /// allowed. An IPv6 frame is decoded as [`UnderlayRepr::parse_datagram`] does.
    pub fn parse<T: AsRef<[u8]>>(packet: &UnderlayPacket<T>) -> Result<Self, WireError> {
        Self::parse_datagram(packet.buffer.as_ref()).map(|(u, _)| u)
    }

    /// [`UnderlayRepr::parse`] of a frame of either family, with where its UDP payload
    /// lies in it. IPv6: the Ethernet and IPv6 headers ([`super::ipv6::check_ipv6_header`]),
    /// next header UDP (no extension headers), the payload length equal to the UDP
    /// length, the UDP destination port, and a non-zero UDP checksum.
    #[inline(always)]
    pub fn parse_datagram(data: &[u8]) -> Result<(Self, Range<usize>), WireError> {
        if data.get(12..14) == Some(&ETHERTYPE_IPV6.to_be_bytes()) {
            return Self::parse_v6(data);
        }
        let packet = UnderlayPacket::new_checked(data)?;
        packet.check_ipv4_header()?;
        if packet.ip_protocol() != IP_PROTO_UDP {
            return Err(WireError::BadIpProtocol(packet.ip_protocol()));
        }
        let total = packet.ip_total_len();
        let min = (IP_HEADER_LEN + UDP_HEADER_LEN) as u16;
        if total < min {
            return Err(WireError::BadIpLength { total, min });
        }
        check_len(data, ETH_HEADER_LEN + total as usize)?;
        let expected = total - IP_HEADER_LEN as u16;
        if packet.udp_len() != expected {
            return Err(WireError::BadUdpLength {
                udp: packet.udp_len(),
                expected,
            });
        }
        if packet.dst_port() != UDP_PORT {
            return Err(WireError::BadUdpPort(packet.dst_port()));
        }
        let got = packet.udp_checksum();
        if got != 0 {
            // The lengths were checked above, so the datagram is in the buffer.
            let expected = packet.compute_udp_checksum().unwrap_or(0);
            if expected != got {
                return Err(WireError::BadUdpChecksum { expected, got });
            }
        }
        let repr = UnderlayRepr {
            src_mac: packet.src_mac(),
            dst_mac: packet.dst_mac(),
            src_ip: IpAddr::V4(packet.src_ip().into()),
            dst_ip: IpAddr::V4(packet.dst_ip().into()),
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            traffic_class: packet.ip_dscp_ecn(),
        };
        Ok((repr, UNDERLAY_LEN..ETH_HEADER_LEN + total as usize))
    }

    #[cold]
    fn parse_v6(data: &[u8]) -> Result<(Self, Range<usize>), WireError> {
        let h = check_ipv6_header(data)?;
        if h.next != v6::NEXT_UDP {
            return Err(WireError::BadIpProtocol(h.next));
        }
        let min = UDP_HEADER_LEN as u16;
        if h.payload_len < min {
            return Err(WireError::BadIpLength {
                total: h.payload_len,
                min,
            });
        }
        let udp_len = get_u16(data, v6::field::UDP_LEN);
        if udp_len != h.payload_len {
            return Err(WireError::BadUdpLength {
                udp: udp_len,
                expected: h.payload_len,
            });
        }
        let dst_port = get_u16(data, v6::field::DST_PORT);
        if dst_port != UDP_PORT {
            return Err(WireError::BadUdpPort(dst_port));
        }
        let end = IPV6_HEADERS_LEN + usize::from(h.payload_len);
        let got = get_u16(data, v6::field::UDP_CHECKSUM);
        if got != 0 {
            let c = v6::upper_checksum(data, IPV6_HEADERS_LEN, udp_len.into(), v6::NEXT_UDP, 6)
                .unwrap_or(0);
            let expected = if c == 0 { 0xffff } else { c };
            if expected != got {
                return Err(WireError::BadUdpChecksum { expected, got });
            }
        }
        let repr = UnderlayRepr {
            src_mac: h.src_mac,
            dst_mac: h.dst_mac,
            src_ip: IpAddr::V6(h.src.into()),
            dst_ip: IpAddr::V6(h.dst.into()),
            src_port: get_u16(data, v6::field::SRC_PORT),
            dst_port,
            traffic_class: h.traffic_class,
        };
        Ok((repr, IPV6_UNDERLAY_LEN..end))
    }

    /// Whether the frame goes over IPv6 (its destination is an IPv6 address).
    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.dst_ip.is_ipv6()
    }

    /// Bytes of the underlay: [`UNDERLAY_LEN`] over IPv4, [`IPV6_UNDERLAY_LEN`] over
    /// IPv6.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_ipv6() {
            IPV6_UNDERLAY_LEN
        } else {
            UNDERLAY_LEN
        }
    }

    /// Writes the underlay bytes ([`UnderlayRepr::header_len`]) for a UDP payload of
    /// `payload_len` bytes. IPv4: ethertype IPv4, IPv4 without options, the traffic
    /// class as DSCP/ECN, DF set, TTL 64, identification 0, protocol UDP, header
    /// checksum, UDP checksum 0. IPv6: hop limit 64, the traffic class, the flow label
    /// of the ports
    /// ([`super::ipv6::flow_label`]), next header UDP, UDP checksum 0. The packet
    /// must hold that many bytes and `payload_len` must keep the lengths within 16
    /// bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UnderlayPacket<T>,
        payload_len: usize,
    ) {
        let data = packet.buffer.as_mut();
        let macs = (self.dst_mac, self.src_mac);
        if self.is_ipv6() {
            // Sliced to the underlay's length: the field writes need no bounds checks.
            let data = &mut data[..IPV6_UNDERLAY_LEN];
            let ips = (v6_octets(self.src_ip), v6_octets(self.dst_ip));
            let flow = v6::flow_label(self.src_port, self.dst_port);
            put_ipv6_header(
                data,
                macs,
                ips,
                (v6::NEXT_UDP, v6::IPV6_HOP_LIMIT),
                (self.traffic_class, flow),
            );
            set_u16(data, v6::field::SRC_PORT, self.src_port);
            set_u16(data, v6::field::DST_PORT, self.dst_port);
            set_u16(data, v6::field::UDP_CHECKSUM, 0);
            set_lengths_v6(data, payload_len);
        } else {
            let data = &mut data[..UNDERLAY_LEN];
            let ips = (v4_octets(self.src_ip), v4_octets(self.dst_ip));
            put_ipv4_header(data, macs, ips, IP_PROTO_UDP, IP_DONT_FRAGMENT);
            data[field::DSCP_ECN] = self.traffic_class;
            set_u16(data, field::SRC_PORT, self.src_port);
            set_u16(data, field::DST_PORT, self.dst_port);
            set_u16(data, field::UDP_CHECKSUM, 0);
            UnderlayPacket::new_unchecked(data).set_lengths(payload_len);
        }
    }
}

/// Bytes of the underlay at the front of `frame`, by its ethertype alone:
/// [`IPV6_UNDERLAY_LEN`] for IPv6, [`UNDERLAY_LEN`] for anything else (as
/// [`UnderlayRepr::header_len`] of a frame that parses). Nothing is checked.
#[inline]
pub fn header_len_of(frame: &[u8]) -> usize {
    if frame.get(12..14) == Some(&ETHERTYPE_IPV6.to_be_bytes()) {
        IPV6_UNDERLAY_LEN
    } else {
        UNDERLAY_LEN
    }
}

/// Sets the lengths of the underlay at the front of `frame` (either family, by its
/// ethertype) for a UDP payload of `payload_len` bytes, and the IPv4 header checksum.
#[inline]
pub fn set_lengths(frame: &mut [u8], payload_len: usize) {
    if frame[12..14] == ETHERTYPE_IPV6.to_be_bytes() {
        set_lengths_v6(&mut frame[..IPV6_UNDERLAY_LEN], payload_len);
    } else {
        UnderlayPacket::new_unchecked(&mut frame[..UNDERLAY_LEN]).set_lengths(payload_len);
    }
}

/// [`set_lengths`] of an IPv6 underlay (its 62 bytes).
#[inline]
fn set_lengths_v6(underlay: &mut [u8], payload_len: usize) {
    let udp = (UDP_HEADER_LEN + payload_len) as u16;
    v6::set_payload_len(underlay, udp);
    set_u16(underlay, v6::field::UDP_LEN, udp);
}

/// Writes the Ethernet header (`(dst, src)` MACs, IPv4) and the IPv4 header (no
/// options, DSCP/ECN 0, identification 0, `flags_frag`, TTL [`IP_TTL`], `protocol`,
/// `(src, dst)` addresses) at the front of `data`, the checksum zero and the total
/// length left to the caller, which computes the checksum once it is set.
#[inline]
pub(super) fn put_ipv4_header(
    data: &mut [u8],
    (dst_mac, src_mac): ([u8; 6], [u8; 6]),
    (src_ip, dst_ip): ([u8; 4], [u8; 4]),
    protocol: u8,
    flags_frag: u16,
) {
    data[field::DST_MAC].copy_from_slice(&dst_mac);
    data[field::SRC_MAC].copy_from_slice(&src_mac);
    set_u16(data, field::ETHERTYPE, ETHERTYPE_IPV4);
    data[field::VER_IHL] = 0x45;
    data[field::DSCP_ECN] = 0;
    set_u16(data, field::IDENT, 0);
    set_u16(data, field::FLAGS_FRAG, flags_frag);
    data[field::TTL] = IP_TTL;
    data[field::PROTOCOL] = protocol;
    set_u16(data, field::IP_CHECKSUM, 0);
    data[field::SRC_IP].copy_from_slice(&src_ip);
    data[field::DST_IP].copy_from_slice(&dst_ip);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An underlay for a 36-byte UDP payload, written out by hand; the IPv4 checksum was
    /// worked out on paper (one's complement sum of the ten header words).
    #[rustfmt::skip]
    const BYTES: [u8; 42] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02,     // dst MAC
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01,     // src MAC
        0x08, 0x00,                             // IPv4
        0x45, 0x00, 0x00, 0x40,                 // v4 IHL 5, total length 64
        0x00, 0x00, 0x40, 0x00,                 // ident 0, DF
        0x40, 0x11, 0x26, 0xab,                 // TTL 64, UDP, checksum
        0x0a, 0x00, 0x00, 0x01,                 // 10.0.0.1
        0x0a, 0x00, 0x00, 0x02,                 // 10.0.0.2
        0xc0, 0x01, 0x48, 0x53,                 // src port 49153, dst port 18515
        0x00, 0x2c, 0x00, 0x00,                 // UDP length 44, no checksum
    ];

    fn repr() -> UnderlayRepr {
        UnderlayRepr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 0, 2].into(),
            src_port: 49153,
            dst_port: UDP_PORT,
            traffic_class: 0,
        }
    }

    fn frame() -> [u8; 78] {
        let mut buf = [0u8; 78];
        buf[..42].copy_from_slice(&BYTES);
        buf
    }

    #[test]
    fn hand_built_underlay_parses_and_emits_the_same_bytes() {
        let buf = frame();
        let packet = UnderlayPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.ip_total_len(), 64);
        assert_eq!(packet.udp_len(), 44);
        assert_eq!(packet.ip_checksum(), 0x26ab);
        assert_eq!(packet.compute_ip_checksum(), 0x26ab);
        assert_eq!(packet.ip_ttl(), 64);
        assert_eq!(packet.udp_payload().map(<[u8]>::len), Some(36));
        assert_eq!(UnderlayRepr::parse(&packet), Ok(repr()));

        let mut out = [0xaau8; 78];
        repr().emit(&mut UnderlayPacket::new_unchecked(&mut out[..]), 36);
        assert_eq!(out[..42], BYTES);
    }

    #[test]
    fn ethernet_padding_after_ip_total_length_is_allowed() {
        let mut buf = [0u8; 100];
        buf[..42].copy_from_slice(&BYTES);
        assert_eq!(
            UnderlayRepr::parse(&UnderlayPacket::new_unchecked(&buf[..])),
            Ok(repr())
        );
    }

    fn parse_mutated(at: usize, v: u8, fix_checksum: bool) -> Result<UnderlayRepr, WireError> {
        let mut buf = frame();
        buf[at] = v;
        let mut p = UnderlayPacket::new_unchecked(&mut buf[..]);
        if fix_checksum {
            let c = p.compute_ip_checksum();
            p.set_ip_checksum(c);
        }
        UnderlayRepr::parse(&UnderlayPacket::new_unchecked(&buf[..]))
    }

    #[test]
    fn each_underlay_check_names_the_bad_value() {
        assert_eq!(
            parse_mutated(13, 0xdd, false),
            Err(WireError::BadEthertype(0x08dd))
        );
        assert_eq!(
            parse_mutated(14, 0x65, true),
            Err(WireError::BadIpVersion(6))
        );
        assert_eq!(
            parse_mutated(14, 0x46, true),
            Err(WireError::BadIpHeaderLen(6))
        );
        assert_eq!(parse_mutated(23, 6, true), Err(WireError::BadIpProtocol(6)));
        assert_eq!(
            parse_mutated(20, 0x60, true),
            Err(WireError::IpFragment(0x6000))
        );
        assert_eq!(
            parse_mutated(21, 0x01, true),
            Err(WireError::IpFragment(0x4001))
        );
        assert_eq!(
            parse_mutated(22, 63, false),
            Err(WireError::BadIpChecksum {
                expected: 0x27ab,
                got: 0x26ab
            })
        );
        assert_eq!(
            parse_mutated(17, 0x41, true),
            Err(WireError::Truncated {
                needed: 79,
                got: 78
            })
        );
        assert_eq!(
            parse_mutated(17, 27, true),
            Err(WireError::BadIpLength { total: 27, min: 28 })
        );
        assert_eq!(
            parse_mutated(39, 0x2b, false),
            Err(WireError::BadUdpLength {
                udp: 43,
                expected: 44
            })
        );
        assert_eq!(
            parse_mutated(37, 0x54, false),
            Err(WireError::BadUdpPort(0x4854))
        );
    }

    #[test]
    fn nonzero_udp_checksum_is_verified() {
        let mut buf = frame();
        buf[50] = 0x12; // some payload
        let mut p = UnderlayPacket::new_unchecked(&mut buf[..]);
        let c = p.compute_udp_checksum().unwrap();
        p.set_udp_checksum(c);
        assert_eq!(
            UnderlayRepr::parse(&UnderlayPacket::new_unchecked(&buf[..])),
            Ok(repr())
        );
        buf[51] ^= 1;
        assert!(matches!(
            UnderlayRepr::parse(&UnderlayPacket::new_unchecked(&buf[..])),
            Err(WireError::BadUdpChecksum { got, .. }) if got == c
        ));
    }

    #[test]
    fn short_buffers_are_truncated_not_panics() {
        let buf = frame();
        for len in 0..42 {
            assert_eq!(
                UnderlayPacket::new_checked(&buf[..len]).err(),
                Some(WireError::Truncated {
                    needed: 42,
                    got: len
                })
            );
        }
        for len in 42..64 + 14 {
            assert!(
                UnderlayRepr::parse(&UnderlayPacket::new_checked(&buf[..len]).unwrap()).is_err()
            );
        }
    }

    #[test]
    fn the_traffic_class_goes_out_and_comes_back_over_either_family() {
        for (src, dst) in [
            (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])),
            ("fd00::1".parse().unwrap(), "fd00:1::2".parse().unwrap()),
        ] {
            let r = UnderlayRepr {
                src_ip: src,
                dst_ip: dst,
                traffic_class: 26 << 2,
                ..repr()
            };
            let mut buf = [0u8; 62 + 36];
            let n = r.header_len();
            r.emit(&mut UnderlayPacket::new_unchecked(&mut buf[..n]), 36);
            let (back, udp) = UnderlayRepr::parse_datagram(&buf[..n + 36]).unwrap();
            assert_eq!(back, r);
            assert_eq!(udp, n..n + 36);
            if src.is_ipv6() {
                assert_eq!(n, 62);
                assert_eq!(&buf[12..14], &[0x86, 0xdd]);
                assert_eq!(buf[14] & 0xf0, 0x60, "version 6");
                assert_eq!((buf[20], buf[21]), (17, 64), "UDP, hop limit 64");
                assert_eq!(&buf[18..20], &44u16.to_be_bytes(), "payload: UDP 8 + 36");
                let flow = u32::from_be_bytes([0, buf[15] & 0x0f, buf[16], buf[17]]);
                assert_eq!(flow, crate::wire::ipv6::flow_label(49153, UDP_PORT));
            } else {
                assert_eq!(n, 42);
                assert_eq!(buf[15], 104);
                assert!(UnderlayPacket::new_unchecked(&buf[..]).ip_checksum_ok());
            }
        }
    }

    #[test]
    fn a_bad_ipv6_underlay_says_what_is_wrong() {
        let r = UnderlayRepr {
            src_ip: "fd00::1".parse().unwrap(),
            dst_ip: "fd00::2".parse().unwrap(),
            ..repr()
        };
        let mut buf = [0u8; 62 + 36];
        r.emit(&mut UnderlayPacket::new_unchecked(&mut buf[..62]), 36);
        let parse = |b: &[u8]| UnderlayRepr::parse_datagram(b).map(|(u, _)| u);
        assert_eq!(parse(&buf), Ok(r));
        let mut next = buf;
        next[20] = 58;
        assert_eq!(parse(&next), Err(WireError::BadIpProtocol(58)));
        let mut port = buf;
        port[56] = 0;
        assert!(matches!(parse(&port), Err(WireError::BadUdpPort(_))));
        let mut udp = buf;
        udp[59] ^= 1;
        assert!(matches!(parse(&udp), Err(WireError::BadUdpLength { .. })));
        assert!(matches!(
            parse(&buf[..61]),
            Err(WireError::Truncated { .. })
        ));
        // A non-zero UDP checksum is checked (over the IPv6 pseudo header).
        let mut sum = buf;
        sum[60] = 0x12;
        assert!(matches!(parse(&sum), Err(WireError::BadUdpChecksum { .. })));
    }
}
