//! ICMPv4 echo (RFC 792) over Ethernet II and IPv4 without options: requests parsed,
//! replies emitted, so that a node answers `ping`.
//!
//! ```text
//!  0..14  Ethernet II, ethertype 0x0800    34     type: 8 echo request, 0 echo reply
//! 14..34  IPv4, IHL 5, protocol 1          35     code 0
//!         (the underlay's layout, with     36..38 checksum over the ICMP message
//!          no UDP after it)                38..40 identifier
//!                                          40..42 sequence number
//!                                          42..   data, to the IPv4 total length
//! ```
//!
//! The ICMP message is the IPv4 payload: IPv4 total length − 20 bytes, at least the
//! 8-byte header; bytes after it (Ethernet padding) are ignored. An echo reply carries
//! the request's identifier, sequence number and data back. [`IcmpPacket`] views a
//! whole frame; the Ethernet and IPv4 fields are read through the underlay's view
//! ([`IcmpPacket::underlay`]), whose first 34 bytes are laid out alike.

use super::arp::MIN_FRAME_LEN;
use super::underlay::{
    field as ip, fold, put_ipv4_header, sum_words, UnderlayPacket, ETH_HEADER_LEN, IP_HEADER_LEN,
};
use super::{check_len, get_u16, set_u16, WireError};

mod field {
    use super::super::Field;

    pub const TYPE: usize = 34;
    pub const CODE: usize = 35;
    pub const CHECKSUM: Field = 36..38;
    pub const IDENT: Field = 38..40;
    pub const SEQ: Field = 40..42;
    /// Where the ICMP message (header + data) starts: after the IPv4 header.
    pub const ICMP_START: usize = 34;
    /// Where the echo data starts.
    pub const DATA_START: usize = 42;
}

/// IPv4 protocol number of ICMP.
pub const IP_PROTO_ICMP: u8 = 1;
/// ICMP type of an echo reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP type of an echo request.
pub const ICMP_ECHO_REQUEST: u8 = 8;
/// Length of the ICMP echo header (type, code, checksum, identifier, sequence number).
pub const ICMP_HEADER_LEN: usize = 8;
/// Ethernet (14) + IPv4 without options (20) + ICMP echo header (8): the shortest ICMP
/// frame this module reads, before Ethernet padding.
pub const ICMP_HEADERS_LEN: usize = ETH_HEADER_LEN + IP_HEADER_LEN + ICMP_HEADER_LEN;
/// Most echo data one IPv4 packet carries (its total length is 16 bits).
pub const ECHO_DATA_MAX: usize = u16::MAX as usize - IP_HEADER_LEN - ICMP_HEADER_LEN;

/// A view of an IPv4 ICMP frame (the buffer may extend past the ICMP message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`ICMP_HEADERS_LEN`]. Use [`IcmpPacket::new_checked`] for input from the
    /// wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        IcmpPacket { buffer }
    }

    /// Wraps a buffer that holds at least the 42 header bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), ICMP_HEADERS_LEN)?;
        Ok(IcmpPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Ethernet and IPv4 fields (MACs, ethertype, version, lengths, protocol,
    /// addresses, the IPv4 header checksum) through the underlay's view; its UDP
    /// accessors read the ICMP header and mean nothing here.
    #[inline]
    pub fn underlay(&self) -> UnderlayPacket<&[u8]> {
        UnderlayPacket::new_unchecked(self.buffer.as_ref())
    }

    /// ICMP type.
    #[inline]
    pub fn icmp_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// ICMP code.
    #[inline]
    pub fn icmp_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// ICMP checksum as carried.
    #[inline]
    pub fn icmp_checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier.
    #[inline]
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Echo sequence number.
    #[inline]
    pub fn seq(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SEQ)
    }

    /// The ICMP message: from the end of the IPv4 header to the IPv4 total length, or
    /// `None` when the buffer is shorter than that or the total length is below the
    /// IPv4 and ICMP headers'.
    #[inline]
    pub fn icmp_message(&self) -> Option<&[u8]> {
        let total = usize::from(self.underlay().ip_total_len());
        if total < IP_HEADER_LEN + ICMP_HEADER_LEN {
            return None;
        }
        self.buffer
            .as_ref()
            .get(field::ICMP_START..ETH_HEADER_LEN + total)
    }

    /// The echo data: the ICMP message after its header (`None` as for
    /// [`IcmpPacket::icmp_message`]).
    #[inline]
    pub fn echo_data(&self) -> Option<&[u8]> {
        self.icmp_message()
            .map(|m| &m[field::DATA_START - field::ICMP_START..])
    }

    /// The ICMP checksum the message should carry (computed with the checksum field
    /// taken as zero); `None` as for [`IcmpPacket::icmp_message`].
    #[inline]
    pub fn compute_icmp_checksum(&self) -> Option<u16> {
        let m = self.icmp_message()?;
        Some(!fold(sum_words(&m[..2]) + sum_words(&m[4..])))
    }

    /// Whether the ICMP checksum is right (the one's complement sum over the message,
    /// checksum included, is all ones); false when the message is not in the buffer.
    #[inline]
    pub fn icmp_checksum_ok(&self) -> bool {
        self.icmp_message()
            .is_some_and(|m| fold(sum_words(m)) == 0xffff)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets the ICMP checksum field.
    #[inline]
    pub fn set_icmp_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}

/// An ICMP echo request, as received: its addresses, identifier, sequence number and
/// data (borrowed from the frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoRequest<'a> {
    /// Ethernet source address (the reply's destination).
    pub src_mac: [u8; 6],
    /// Ethernet destination address (ours, or broadcast/multicast).
    pub dst_mac: [u8; 6],
    /// IPv4 source address (the reply's destination).
    pub src_ip: [u8; 4],
    /// IPv4 destination address; the caller decides whether it is one to answer.
    pub dst_ip: [u8; 4],
    /// Echo identifier, sent back.
    pub ident: u16,
    /// Echo sequence number, sent back.
    pub seq: u16,
    /// Echo data, sent back.
    pub data: &'a [u8],
}

/// A valid ICMP message: an echo request, or the type and code of any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmp<'a> {
    /// An echo request (type 8, code 0), to answer with [`emit_echo_reply`].
    EchoRequest(EchoRequest<'a>),
    /// Any other ICMP message (an echo reply, destination unreachable, an echo request
    /// with a non-zero code...), its checksums right.
    Other {
        /// ICMP type.
        kind: u8,
        /// ICMP code.
        code: u8,
    },
}

/// Decodes and validates an ICMP frame: at least [`ICMP_HEADERS_LEN`] bytes,
/// ethertype IPv4, version 4, header length 5 words, the IPv4 header checksum, not a
/// fragment (DF may be set), protocol ICMP, a total length of at least 28 (IPv4 and
/// ICMP headers) within the buffer (Ethernet padding after it is allowed), and the ICMP
/// checksum over the message (total length − 20 bytes). Checks are made, and refused,
/// in that order; a message that passes them all is an echo request or
/// [`Icmp::Other`].
pub fn parse_echo_request(frame: &[u8]) -> Result<Icmp<'_>, WireError> {
    let packet = IcmpPacket::new_checked(frame)?;
    let u = packet.underlay();
    u.check_ipv4_header()?;
    if u.ip_protocol() != IP_PROTO_ICMP {
        return Err(WireError::NotIcmp(u.ip_protocol()));
    }
    let total = u.ip_total_len();
    let min = (IP_HEADER_LEN + ICMP_HEADER_LEN) as u16;
    if total < min {
        return Err(WireError::BadIpLength { total, min });
    }
    let end = ETH_HEADER_LEN + usize::from(total);
    check_len(frame, end)?;
    if !packet.icmp_checksum_ok() {
        return Err(WireError::BadIcmpChecksum {
            // The lengths were checked above, so the message is in the buffer.
            expected: packet.compute_icmp_checksum().unwrap_or(0),
            got: packet.icmp_checksum(),
        });
    }
    let (kind, code) = (packet.icmp_type(), packet.icmp_code());
    if (kind, code) != (ICMP_ECHO_REQUEST, 0) {
        return Ok(Icmp::Other { kind, code });
    }
    Ok(Icmp::EchoRequest(EchoRequest {
        src_mac: u.src_mac(),
        dst_mac: u.dst_mac(),
        src_ip: u.src_ip(),
        dst_ip: u.dst_ip(),
        ident: packet.ident(),
        seq: packet.seq(),
        data: &frame[field::DATA_START..end],
    }))
}

/// Writes the echo reply to `req` from `src_mac`/`src_ip` into `buf`: to the request's
/// source MAC and IPv4 address, IPv4 without options, DF clear, identification 0, TTL
/// 64, protocol ICMP, type 0 code 0 with the request's identifier, sequence number and
/// data, both checksums; then zeros up to [`MIN_FRAME_LEN`]. Returns the frame's
/// length, `max(42 + data, 60)`. [`WireError::EchoTooLong`] when the data is longer
/// than [`ECHO_DATA_MAX`], [`WireError::BufferTooSmall`] when the frame does not fit
/// `buf`; nothing is written then.
pub fn emit_echo_reply(
    req: &EchoRequest<'_>,
    src_mac: [u8; 6],
    src_ip: [u8; 4],
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if req.data.len() > ECHO_DATA_MAX {
        return Err(WireError::EchoTooLong(req.data.len()));
    }
    let end = ICMP_HEADERS_LEN + req.data.len();
    let len = end.max(MIN_FRAME_LEN);
    if buf.len() < len {
        return Err(WireError::BufferTooSmall {
            needed: len,
            got: buf.len(),
        });
    }
    let data = &mut buf[..len];
    let (macs, ips) = ((req.src_mac, src_mac), (src_ip, req.src_ip));
    put_ipv4_header(data, macs, ips, IP_PROTO_ICMP, 0);
    set_u16(data, ip::TOTAL_LEN, (end - ETH_HEADER_LEN) as u16);
    data[field::TYPE] = ICMP_ECHO_REPLY;
    data[field::CODE] = 0;
    set_u16(data, field::CHECKSUM, 0);
    set_u16(data, field::IDENT, req.ident);
    set_u16(data, field::SEQ, req.seq);
    data[field::DATA_START..end].copy_from_slice(req.data);
    data[end..].fill(0);
    let icmp = !fold(sum_words(&data[field::ICMP_START..end]));
    set_u16(data, field::CHECKSUM, icmp);
    let mut u = UnderlayPacket::new_unchecked(&mut *data);
    let c = u.compute_ip_checksum();
    u.set_ip_checksum(c);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const HOST_IP: [u8; 4] = [192, 168, 122, 1];
    const OUR_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    const OUR_IP: [u8; 4] = [192, 168, 122, 10];

    /// `ping 192.168.122.10` from Linux (iputils, 56 data bytes), the first request, as
    /// the kernel sends it: DF set (path MTU discovery), TTL 64, identification 0x1c46,
    /// identifier 0x0d2a (the ping socket's port), sequence 1; the data is a `struct
    /// timeval` (x86-64, little endian: 1700000000 s, 123456 µs) and then the bytes
    /// 0x10..=0x37 (iputils writes byte i of the data as i).
    ///
    /// Checksums worked out by hand. IPv4: 4500 + 0054 + 1c46 + 4000 + 4001 + c0a8 +
    /// 7a01 + c0a8 + 7a0a = 0x356f6, folded 0x56f9, complement 0xa906. ICMP: 0800 +
    /// 0d2a + 0001 + (00f1 + 5365) + (40e2 + 0100) + (1011 + 1213 + ... + 3637, twenty
    /// words = 10 × 0x4648 = 0x2bed0) = 0x36a33, folded 0x6a36, complement 0x95c9.
    #[rustfmt::skip]
    const LINUX_PING: [u8; 98] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // dst MAC: us
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // src MAC: the host
        0x08, 0x00,                             // IPv4
        0x45, 0x00, 0x00, 0x54,                 // v4 IHL 5, total length 84
        0x1c, 0x46, 0x40, 0x00,                 // identification, DF
        0x40, 0x01, 0xa9, 0x06,                 // TTL 64, ICMP, checksum
        0xc0, 0xa8, 0x7a, 0x01,                 // 192.168.122.1
        0xc0, 0xa8, 0x7a, 0x0a,                 // 192.168.122.10
        0x08, 0x00, 0x95, 0xc9,                 // echo request, code 0, checksum
        0x0d, 0x2a, 0x00, 0x01,                 // identifier, sequence 1
        0x00, 0xf1, 0x53, 0x65, 0x00, 0x00, 0x00, 0x00,     // tv_sec
        0x40, 0xe2, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,     // tv_usec
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
        0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    /// The reply to it, by hand: addresses swapped, identification 0, DF clear. IPv4
    /// checksum: the request's sum less 0x1c46 and 0x4000, 0x1fab2, folded 0xfab2,
    /// complement 0x054d; ICMP: the request's sum less 0x0800 (the type), complement
    /// 0x9dc9.
    fn reply_bytes() -> [u8; 98] {
        let mut r = LINUX_PING;
        r[..6].copy_from_slice(&HOST_MAC);
        r[6..12].copy_from_slice(&OUR_MAC);
        r[18..22].copy_from_slice(&[0, 0, 0, 0]);
        r[24..26].copy_from_slice(&[0x05, 0x4d]);
        r[26..30].copy_from_slice(&OUR_IP);
        r[30..34].copy_from_slice(&HOST_IP);
        r[34] = 0;
        r[36..38].copy_from_slice(&[0x9d, 0xc9]);
        r
    }

    /// The internet checksum of RFC 1071, written plainly (no shared code with the
    /// module): the complement of the folded one's complement sum of 16-bit words, an
    /// odd last byte padded with zero. Over data that carries its checksum it is 0.
    fn rfc1071(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i < bytes.len() {
            let hi = u32::from(bytes[i]) << 8;
            let lo = bytes.get(i + 1).map_or(0, |&b| u32::from(b));
            sum += hi | lo;
            i += 2;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// Both checksums of a frame verify, by [`rfc1071`].
    fn checksums_verify(frame: &[u8]) -> bool {
        let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
        rfc1071(&frame[14..34]) == 0 && rfc1071(&frame[34..14 + total]) == 0
    }

    /// Sets both checksums of a frame, by [`rfc1071`] (the ICMP one over the message
    /// as far as the buffer holds it).
    fn fix_checksums(frame: &mut [u8]) {
        frame[24..26].fill(0);
        let c = rfc1071(&frame[14..34]);
        frame[24..26].copy_from_slice(&c.to_be_bytes());
        let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
        let end = (14 + total).clamp(38, frame.len());
        frame[36..38].fill(0);
        let c = rfc1071(&frame[34..end]);
        frame[36..38].copy_from_slice(&c.to_be_bytes());
    }

    fn linux_request() -> EchoRequest<'static> {
        EchoRequest {
            src_mac: HOST_MAC,
            dst_mac: OUR_MAC,
            src_ip: HOST_IP,
            dst_ip: OUR_IP,
            ident: 0x0d2a,
            seq: 1,
            data: &LINUX_PING[42..],
        }
    }

    #[test]
    fn linux_ping_parses_and_its_checksums_verify() {
        assert!(checksums_verify(&LINUX_PING));
        assert_eq!(
            parse_echo_request(&LINUX_PING),
            Ok(Icmp::EchoRequest(linux_request()))
        );
        let p = IcmpPacket::new_checked(&LINUX_PING[..]).unwrap();
        assert_eq!(p.underlay().compute_ip_checksum(), 0xa906);
        assert_eq!(p.compute_icmp_checksum(), Some(0x95c9));
        assert!(p.icmp_checksum_ok());
        assert_eq!(p.echo_data().map(<[u8]>::len), Some(56));
        assert_eq!((p.icmp_type(), p.icmp_code()), (8, 0));
    }

    #[test]
    fn reply_to_linux_ping_is_the_hand_built_bytes() {
        let mut buf = [0xa5u8; 200];
        let n = emit_echo_reply(&linux_request(), OUR_MAC, OUR_IP, &mut buf).unwrap();
        assert_eq!(n, 98);
        assert_eq!(buf[..98], reply_bytes());
        assert!(checksums_verify(&buf[..n]));
        assert_eq!(buf[98..], [0xa5; 102], "nothing written past the frame");
        // It parses as a valid ICMP message that is not a request.
        assert_eq!(
            parse_echo_request(&buf[..n]),
            Ok(Icmp::Other { kind: 0, code: 0 })
        );
    }

    #[test]
    fn padding_after_the_total_length_is_ignored() {
        // `ping -s 0`: an 8-byte ICMP message, 42 bytes, padded to 60 by the NIC.
        let mut frame = [0u8; 60];
        frame[..42].copy_from_slice(&LINUX_PING[..42]);
        frame[17] = 28;
        frame[50..].fill(0x77); // padding need not be zero
        fix_checksums(&mut frame);
        let Ok(Icmp::EchoRequest(req)) = parse_echo_request(&frame) else {
            panic!("not an echo request");
        };
        assert_eq!(req.data, &[] as &[u8]);
        assert_eq!((req.ident, req.seq), (0x0d2a, 1));
        let mut out = [0xa5u8; 60];
        assert_eq!(emit_echo_reply(&req, OUR_MAC, OUR_IP, &mut out), Ok(60));
        assert!(checksums_verify(&out));
        assert_eq!(u16::from_be_bytes([out[16], out[17]]), 28);
        assert_eq!(out[42..], [0; 18], "padded with zeros");
    }

    #[test]
    fn round_trips_of_every_data_length_odd_and_even() {
        let data: Vec<u8> = (0..1473u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 2, 17, 18, 19, 56, 57, 1471, 1472, 1473] {
            let req = EchoRequest {
                src_mac: HOST_MAC,
                dst_mac: OUR_MAC,
                src_ip: HOST_IP,
                dst_ip: OUR_IP,
                ident: 0xbeef,
                seq: len as u16,
                data: &data[..len],
            };
            let mut buf = vec![0u8; 1600];
            let n = emit_echo_reply(&req, OUR_MAC, OUR_IP, &mut buf).unwrap();
            assert_eq!(n, (42 + len).max(60));
            assert!(checksums_verify(&buf[..n]), "length {len}");
            let p = IcmpPacket::new_checked(&buf[..n]).unwrap();
            let u = p.underlay();
            assert_eq!((u.dst_mac(), u.src_mac()), (HOST_MAC, OUR_MAC));
            assert_eq!((u.dst_ip(), u.src_ip()), (HOST_IP, OUR_IP));
            assert_eq!((u.ip_ttl(), u.ip_ident(), u.ip_flags_frag()), (64, 0, 0));
            assert_eq!((p.icmp_type(), p.icmp_code()), (0, 0));
            assert_eq!((p.ident(), p.seq()), (0xbeef, len as u16));
            assert_eq!(p.echo_data(), Some(&data[..len]));
            // Made a request again (type 8, checksum fixed), it parses to the request
            // with the addresses swapped.
            buf[34] = 8;
            fix_checksums(&mut buf[..n]);
            assert_eq!(
                parse_echo_request(&buf[..n]),
                Ok(Icmp::EchoRequest(EchoRequest {
                    src_mac: OUR_MAC,
                    dst_mac: HOST_MAC,
                    src_ip: OUR_IP,
                    dst_ip: HOST_IP,
                    ..req
                }))
            );
        }
    }

    /// The Linux ping with byte `at` set to `v`, and its checksums fixed if `fix`.
    fn mutated(at: usize, v: u8, fix: bool) -> [u8; 98] {
        let mut buf = LINUX_PING;
        buf[at] = v;
        if fix {
            fix_checksums(&mut buf);
        }
        buf
    }

    #[test]
    fn each_check_names_the_bad_value() {
        assert_eq!(
            parse_echo_request(&mutated(13, 0x06, false)),
            Err(WireError::BadEthertype(0x0806))
        );
        assert_eq!(
            parse_echo_request(&mutated(14, 0x65, true)),
            Err(WireError::BadIpVersion(6))
        );
        assert_eq!(
            parse_echo_request(&mutated(14, 0x46, true)),
            Err(WireError::BadIpHeaderLen(6))
        );
        assert_eq!(
            parse_echo_request(&mutated(22, 63, false)),
            Err(WireError::BadIpChecksum {
                expected: 0xaa06,
                got: 0xa906
            })
        );
        assert_eq!(
            parse_echo_request(&mutated(20, 0x60, true)),
            Err(WireError::IpFragment(0x6000))
        );
        assert_eq!(
            parse_echo_request(&mutated(21, 0x01, true)),
            Err(WireError::IpFragment(0x4001))
        );
        assert!(
            parse_echo_request(&mutated(20, 0x00, true)).is_ok(),
            "DF clear is fine"
        );
        assert_eq!(
            parse_echo_request(&mutated(23, 17, true)),
            Err(WireError::NotIcmp(17))
        );
        assert_eq!(
            parse_echo_request(&mutated(17, 27, false)),
            Err(WireError::BadIpChecksum {
                expected: 0xa93f,
                got: 0xa906
            })
        );
        assert_eq!(
            parse_echo_request(&mutated(17, 27, true)),
            Err(WireError::BadIpLength { total: 27, min: 28 })
        );
        assert_eq!(
            parse_echo_request(&mutated(17, 85, true)),
            Err(WireError::Truncated {
                needed: 99,
                got: 98
            })
        );
        assert_eq!(
            parse_echo_request(&mutated(60, 0, false)),
            Err(WireError::BadIcmpChecksum {
                expected: 0xa7c9,
                got: 0x95c9
            })
        );
        // A shorter total length leaves bytes out of the ICMP checksum: refused unless
        // fixed, then the data is shorter.
        assert!(matches!(
            parse_echo_request(&mutated(17, 0x53, false)),
            Err(WireError::BadIpChecksum { .. })
        ));
        match parse_echo_request(&mutated(17, 0x53, true)) {
            Ok(Icmp::EchoRequest(r)) => assert_eq!(r.data, &LINUX_PING[42..97]),
            other => panic!("{other:?}"),
        }
        // Other valid ICMP messages: their type and code.
        assert_eq!(
            parse_echo_request(&mutated(34, 3, true)),
            Ok(Icmp::Other { kind: 3, code: 0 })
        );
        assert_eq!(
            parse_echo_request(&mutated(35, 1, true)),
            Ok(Icmp::Other { kind: 8, code: 1 })
        );
        assert_eq!(
            parse_echo_request(&mutated(34, 0, true)),
            Ok(Icmp::Other { kind: 0, code: 0 })
        );
        let e = WireError::NotIcmp(6);
        assert_eq!(
            e.to_string(),
            "IP protocol 6 is not ICMP (1 over IPv4, 58 over IPv6)"
        );
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        // Every bit of the IPv4 header and of the ICMP message is covered by one of the
        // two checksums.
        for byte in 14..98 {
            for bit in 0..8 {
                let mut buf = LINUX_PING;
                buf[byte] ^= 1 << bit;
                assert!(
                    parse_echo_request(&buf).is_err(),
                    "bit {bit} of byte {byte} flipped went unnoticed"
                );
            }
        }
    }

    #[test]
    fn short_buffers_are_refused_not_panics() {
        for len in 0..ICMP_HEADERS_LEN {
            assert_eq!(
                parse_echo_request(&LINUX_PING[..len]),
                Err(WireError::Truncated {
                    needed: 42,
                    got: len
                })
            );
            assert!(IcmpPacket::new_checked(&LINUX_PING[..len]).is_err());
        }
        for len in ICMP_HEADERS_LEN..LINUX_PING.len() {
            assert_eq!(
                parse_echo_request(&LINUX_PING[..len]),
                Err(WireError::Truncated {
                    needed: 98,
                    got: len
                })
            );
            let p = IcmpPacket::new_checked(&LINUX_PING[..len]).unwrap();
            assert_eq!(p.icmp_message(), None);
            assert_eq!(p.compute_icmp_checksum(), None);
            assert!(!p.icmp_checksum_ok());
        }
        let req = linux_request();
        for len in 0..98 {
            let mut out = vec![0x5au8; len];
            assert_eq!(
                emit_echo_reply(&req, OUR_MAC, OUR_IP, &mut out),
                Err(WireError::BufferTooSmall {
                    needed: 98,
                    got: len
                })
            );
            assert!(
                out.iter().all(|&b| b == 0x5a),
                "written into a short buffer"
            );
        }
        let empty = EchoRequest { data: &[], ..req };
        assert_eq!(
            emit_echo_reply(&empty, OUR_MAC, OUR_IP, &mut [0u8; 59]),
            Err(WireError::BufferTooSmall {
                needed: 60,
                got: 59
            })
        );
    }

    #[test]
    fn echo_data_longer_than_an_ipv4_packet_is_refused() {
        let big = vec![0u8; ECHO_DATA_MAX + 1];
        let mut buf = vec![0u8; ECHO_DATA_MAX + 64];
        let req = EchoRequest {
            data: &big[..],
            ..linux_request()
        };
        assert_eq!(
            emit_echo_reply(&req, OUR_MAC, OUR_IP, &mut buf),
            Err(WireError::EchoTooLong(ECHO_DATA_MAX + 1))
        );
        let req = EchoRequest {
            data: &big[..ECHO_DATA_MAX],
            ..req
        };
        let n = emit_echo_reply(&req, OUR_MAC, OUR_IP, &mut buf).unwrap();
        assert_eq!(n, 14 + 65535);
        assert!(checksums_verify(&buf[..n]));
        assert!(matches!(
            parse_echo_request(&buf[..n]),
            Ok(Icmp::Other { kind: 0, .. })
        ));
    }
}
