//! ARP over Ethernet for IPv4 (RFC 826): requests, replies and gratuitous announcements.
//!
//! ```text
//!  0..6   destination MAC          14..16 hardware type 1 (Ethernet)
//!  6..12  source MAC               16..18 protocol type 0x0800 (IPv4)
//! 12..14  ethertype 0x0806         18     hardware address length 6
//!                                  19     protocol address length 4
//!                                  20..22 operation: 1 request, 2 reply
//!                                  22..28 sender MAC
//!                                  28..32 sender IPv4 address
//!                                  32..38 target MAC (zero in a request)
//!                                  38..42 target IPv4 address
//! ```
//!
//! An [`ArpPacket`] views a whole Ethernet frame: the 42 bytes above and whatever
//! padding follows them (a frame on the wire is at least 60 bytes, and
//! [`ArpRepr::emit`] pads with zeros to that). An [`ArpRepr`] is the operation and the
//! four addresses; the Ethernet addresses are the caller's (broadcast for a request, the
//! requester for a reply), given to `emit` and not kept by `parse`.
//!
//! A gratuitous ARP is a request whose sender and target IPv4 addresses are the same
//! ([`ArpRepr::gratuitous`]): a host announcing (or defending) its address, which a
//! receiver uses to update its cache and does not answer.

use super::{check_len, get_u16, set_u16, WireError};

mod field {
    use super::super::Field;

    pub const DST_MAC: Field = 0..6;
    pub const SRC_MAC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;

    pub const HTYPE: Field = 14..16;
    pub const PTYPE: Field = 16..18;
    pub const HLEN: usize = 18;
    pub const PLEN: usize = 19;
    pub const OPER: Field = 20..22;
    pub const SENDER_MAC: Field = 22..28;
    pub const SENDER_IP: Field = 28..32;
    pub const TARGET_MAC: Field = 32..38;
    pub const TARGET_IP: Field = 38..42;
}

/// Ethernet type of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethernet header (14) + ARP for Ethernet/IPv4 (28).
pub const ARP_FRAME_LEN: usize = 42;
/// Shortest Ethernet frame (without its FCS): what [`ArpRepr::emit`] writes, the ARP
/// bytes followed by zeros.
pub const MIN_FRAME_LEN: usize = 60;
/// ARP hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// ARP protocol type of IPv4 (its ethertype).
pub const PTYPE_IPV4: u16 = 0x0800;
/// The broadcast MAC address, the destination of a request.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// An ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpOp {
    /// Who has the target IPv4 address? (1)
    Request,
    /// The sender has the sender IPv4 address (2).
    Reply,
}

impl ArpOp {
    /// The operation with wire code `code`, if it is one of the two.
    #[inline]
    pub const fn from_u16(code: u16) -> Option<ArpOp> {
        match code {
            1 => Some(ArpOp::Request),
            2 => Some(ArpOp::Reply),
            _ => None,
        }
    }

    /// The wire code: 1 for a request, 2 for a reply.
    #[inline]
    pub const fn to_u16(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// Whether `mac` may be the sender of an ARP message: not a group (multicast or
/// broadcast, bit 0 of byte 0) address and not all zero.
#[inline]
pub const fn is_unicast_mac(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && !matches!(mac, [0, 0, 0, 0, 0, 0])
}

/// A view of an ARP frame (Ethernet header and ARP message; the buffer may extend past
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`ARP_FRAME_LEN`]. Use [`ArpPacket::new_checked`] for input from the wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps a buffer that holds at least the 42 bytes of an ARP frame.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), ARP_FRAME_LEN)?;
        Ok(ArpPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Ethernet destination MAC address.
    #[inline]
    pub fn dst_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::DST_MAC)
    }

    /// Ethernet source MAC address.
    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::SRC_MAC)
    }

    /// Ethernet type.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// ARP hardware type.
    #[inline]
    pub fn htype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// ARP protocol type.
    #[inline]
    pub fn ptype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PTYPE)
    }

    /// Hardware address length.
    #[inline]
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation code, raw ([`ArpOp::from_u16`]).
    #[inline]
    pub fn op(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::OPER)
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::SENDER_MAC)
    }

    /// Sender IPv4 address.
    #[inline]
    pub fn sender_ip(&self) -> [u8; 4] {
        super::array(self.buffer.as_ref(), field::SENDER_IP)
    }

    /// Target hardware address.
    #[inline]
    pub fn target_mac(&self) -> [u8; 6] {
        super::array(self.buffer.as_ref(), field::TARGET_MAC)
    }

    /// Target IPv4 address.
    #[inline]
    pub fn target_ip(&self) -> [u8; 4] {
        super::array(self.buffer.as_ref(), field::TARGET_IP)
    }
}

/// An ARP message for Ethernet/IPv4: its operation and four addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Hardware address of the sender.
    pub sender_mac: [u8; 6],
    /// IPv4 address of the sender.
    pub sender_ip: [u8; 4],
    /// Hardware address of the target (zero in a request: it is what is asked).
    pub target_mac: [u8; 6],
    /// IPv4 address of the target.
    pub target_ip: [u8; 4],
}

impl ArpRepr {
    /// A request from `sender_mac`/`sender_ip` for the hardware address of `target_ip`
    /// (target MAC zero, as Linux sends it).
    #[inline]
    pub const fn request(sender_mac: [u8; 6], sender_ip: [u8; 4], target_ip: [u8; 4]) -> Self {
        ArpRepr {
            op: ArpOp::Request,
            sender_mac,
            sender_ip,
            target_mac: [0; 6],
            target_ip,
        }
    }

    /// The reply of `our_mac` to this request: sender us with the address asked for
    /// (this request's target IPv4 address), target the requester. The caller decides
    /// whether the address is ours to answer for; send it to the requester's MAC
    /// (`self.sender_mac`).
    #[inline]
    pub const fn reply_to(&self, our_mac: [u8; 6]) -> Self {
        ArpRepr {
            op: ArpOp::Reply,
            sender_mac: our_mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// A gratuitous ARP announcing that `mac` has `ip`: a request whose sender and
    /// target IPv4 addresses are both `ip` (target MAC zero), sent to broadcast.
    #[inline]
    pub const fn gratuitous(mac: [u8; 6], ip: [u8; 4]) -> Self {
        ArpRepr::request(mac, ip, ip)
    }

    /// Whether this is a gratuitous announcement (request or reply): sender and target
    /// IPv4 addresses the same. It updates a cache and is not answered.
    #[inline]
    pub fn is_gratuitous(&self) -> bool {
        self.sender_ip == self.target_ip
    }

    /// Decodes and validates a whole Ethernet frame: at least [`ARP_FRAME_LEN`] bytes
    /// (padding after them is ignored), ethertype ARP, hardware type Ethernet with
    /// 6-byte addresses, protocol type IPv4 with 4-byte addresses, operation request or
    /// reply, and a sender MAC that is unicast and not zero ([`is_unicast_mac`]). Every
    /// refusal but the length is [`WireError::BadArp`].
    pub fn parse(frame: &[u8]) -> Result<ArpRepr, WireError> {
        let packet = ArpPacket::new_checked(frame)?;
        if packet.ethertype() != ETHERTYPE_ARP {
            return Err(WireError::BadArp("ethertype is not ARP (0x0806)"));
        }
        if packet.htype() != HTYPE_ETHERNET {
            return Err(WireError::BadArp("hardware type is not Ethernet (1)"));
        }
        if packet.ptype() != PTYPE_IPV4 {
            return Err(WireError::BadArp("protocol type is not IPv4 (0x0800)"));
        }
        if packet.hlen() != 6 {
            return Err(WireError::BadArp("hardware address length is not 6"));
        }
        if packet.plen() != 4 {
            return Err(WireError::BadArp("protocol address length is not 4"));
        }
        let Some(op) = ArpOp::from_u16(packet.op()) else {
            return Err(WireError::BadArp(
                "operation is neither request (1) nor reply (2)",
            ));
        };
        let sender_mac = packet.sender_mac();
        if sender_mac[0] & 1 != 0 {
            return Err(WireError::BadArp("sender MAC is multicast or broadcast"));
        }
        if sender_mac == [0; 6] {
            return Err(WireError::BadArp("sender MAC is zero"));
        }
        Ok(ArpRepr {
            op,
            sender_mac,
            sender_ip: packet.sender_ip(),
            target_mac: packet.target_mac(),
            target_ip: packet.target_ip(),
        })
    }

    /// Writes the frame: Ethernet from `src_mac` to `dst_mac` (usually
    /// [`BROADCAST_MAC`] for a request, the requester for a reply), ethertype ARP, this
    /// message, then zeros up to [`MIN_FRAME_LEN`]. Returns the frame's length, 60;
    /// [`WireError::BufferTooSmall`] (and nothing written) when `buf` is shorter.
    pub fn emit(
        &self,
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        if buf.len() < MIN_FRAME_LEN {
            return Err(WireError::BufferTooSmall {
                needed: MIN_FRAME_LEN,
                got: buf.len(),
            });
        }
        let data = &mut buf[..MIN_FRAME_LEN];
        data[field::DST_MAC].copy_from_slice(&dst_mac);
        data[field::SRC_MAC].copy_from_slice(&src_mac);
        set_u16(data, field::ETHERTYPE, ETHERTYPE_ARP);
        set_u16(data, field::HTYPE, HTYPE_ETHERNET);
        set_u16(data, field::PTYPE, PTYPE_IPV4);
        data[field::HLEN] = 6;
        data[field::PLEN] = 4;
        set_u16(data, field::OPER, self.op.to_u16());
        data[field::SENDER_MAC].copy_from_slice(&self.sender_mac);
        data[field::SENDER_IP].copy_from_slice(&self.sender_ip);
        data[field::TARGET_MAC].copy_from_slice(&self.target_mac);
        data[field::TARGET_IP].copy_from_slice(&self.target_ip);
        data[ARP_FRAME_LEN..].fill(0);
        Ok(MIN_FRAME_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const HOST_IP: [u8; 4] = [192, 168, 122, 1];
    const OUR_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    const OUR_IP: [u8; 4] = [192, 168, 122, 10];

    /// An ARP request as the Linux kernel sends it (`arp_create`, e.g. for `ping
    /// 192.168.122.10` with an empty neighbour cache): broadcast, target MAC zero, the
    /// 42 bytes it hands the driver (the NIC pads them to 60 on the wire).
    #[rustfmt::skip]
    const LINUX_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff,     // dst MAC: broadcast
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // src MAC
        0x08, 0x06,                             // ARP
        0x00, 0x01, 0x08, 0x00,                 // Ethernet, IPv4
        0x06, 0x04, 0x00, 0x01,                 // hlen 6, plen 4, request
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // sender MAC
        0xc0, 0xa8, 0x7a, 0x01,                 // sender 192.168.122.1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // target MAC: unknown
        0xc0, 0xa8, 0x7a, 0x0a,                 // target 192.168.122.10
    ];

    /// The reply to it, written out by hand: to the requester, padded to 60 bytes.
    #[rustfmt::skip]
    const REPLY: [u8; 60] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // dst MAC: the requester
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // src MAC: us
        0x08, 0x06,
        0x00, 0x01, 0x08, 0x00,
        0x06, 0x04, 0x00, 0x02,                 // reply
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // sender MAC: us
        0xc0, 0xa8, 0x7a, 0x0a,                 // sender 192.168.122.10
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // target MAC: the requester
        0xc0, 0xa8, 0x7a, 0x01,                 // target 192.168.122.1
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   // padding
    ];

    fn padded(frame: &[u8]) -> [u8; 60] {
        let mut buf = [0u8; 60];
        buf[..frame.len()].copy_from_slice(frame);
        buf
    }

    #[test]
    fn linux_request_parses_with_or_without_padding() {
        let want = ArpRepr::request(HOST_MAC, HOST_IP, OUR_IP);
        assert_eq!(ArpRepr::parse(&LINUX_REQUEST), Ok(want));
        assert_eq!(ArpRepr::parse(&padded(&LINUX_REQUEST)), Ok(want));
        // Padding need not be zero, and a longer buffer is fine.
        let mut long = [0xa5u8; 1514];
        long[..42].copy_from_slice(&LINUX_REQUEST);
        assert_eq!(ArpRepr::parse(&long), Ok(want));
        assert!(!want.is_gratuitous());

        let p = ArpPacket::new_checked(&LINUX_REQUEST[..]).unwrap();
        assert_eq!(p.dst_mac(), BROADCAST_MAC);
        assert_eq!(p.src_mac(), HOST_MAC);
        assert_eq!(
            (p.htype(), p.ptype(), p.hlen(), p.plen()),
            (1, 0x0800, 6, 4)
        );
        assert_eq!(p.op(), 1);
    }

    #[test]
    fn request_emits_the_linux_bytes_padded() {
        let mut buf = [0xa5u8; 64];
        let r = ArpRepr::request(HOST_MAC, HOST_IP, OUR_IP);
        assert_eq!(r.emit(BROADCAST_MAC, HOST_MAC, &mut buf), Ok(60));
        assert_eq!(buf[..60], padded(&LINUX_REQUEST));
        assert_eq!(buf[60..], [0xa5; 4], "nothing written past 60 bytes");
    }

    #[test]
    fn reply_to_a_request_and_its_bytes() {
        let req = ArpRepr::parse(&LINUX_REQUEST).unwrap();
        let rep = req.reply_to(OUR_MAC);
        assert_eq!(
            rep,
            ArpRepr {
                op: ArpOp::Reply,
                sender_mac: OUR_MAC,
                sender_ip: OUR_IP,
                target_mac: HOST_MAC,
                target_ip: HOST_IP,
            }
        );
        let mut buf = [0u8; 60];
        assert_eq!(rep.emit(req.sender_mac, OUR_MAC, &mut buf), Ok(60));
        assert_eq!(buf, REPLY);
        assert_eq!(ArpRepr::parse(&REPLY), Ok(rep));
    }

    #[test]
    fn gratuitous_is_a_request_for_its_own_address() {
        let g = ArpRepr::gratuitous(OUR_MAC, OUR_IP);
        assert_eq!(g.op, ArpOp::Request);
        assert_eq!((g.sender_ip, g.target_ip), (OUR_IP, OUR_IP));
        assert_eq!(g.target_mac, [0; 6]);
        assert!(g.is_gratuitous());
        let mut buf = [0u8; 60];
        g.emit(BROADCAST_MAC, OUR_MAC, &mut buf).unwrap();
        assert_eq!(ArpRepr::parse(&buf), Ok(g));
        // A gratuitous reply (some hosts announce so) is one too.
        let r = ArpRepr {
            op: ArpOp::Reply,
            ..g
        };
        assert!(r.is_gratuitous());
    }

    #[test]
    fn round_trips_of_both_operations() {
        for op in [ArpOp::Request, ArpOp::Reply] {
            let r = ArpRepr {
                op,
                sender_mac: [0x02, 1, 2, 3, 4, 5],
                sender_ip: [10, 0, 0, 1],
                target_mac: [0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa],
                target_ip: [10, 0, 0, 2],
            };
            let mut buf = [0u8; 60];
            assert_eq!(r.emit([1; 6], [2; 6], &mut buf), Ok(60));
            assert_eq!(ArpRepr::parse(&buf), Ok(r));
            assert_eq!(ArpOp::from_u16(op.to_u16()), Some(op));
        }
        assert_eq!(ArpOp::from_u16(0), None);
        assert_eq!(ArpOp::from_u16(3), None);
    }

    fn parse_mutated(at: usize, v: u8) -> Result<ArpRepr, WireError> {
        let mut buf = padded(&LINUX_REQUEST);
        buf[at] = v;
        ArpRepr::parse(&buf)
    }

    #[test]
    fn each_check_refuses_with_its_reason() {
        let bad = |r: Result<ArpRepr, WireError>| match r {
            Err(WireError::BadArp(why)) => why,
            other => panic!("expected BadArp, got {other:?}"),
        };
        assert_eq!(
            bad(parse_mutated(13, 0x00)),
            "ethertype is not ARP (0x0806)"
        );
        assert_eq!(
            bad(parse_mutated(15, 6)),
            "hardware type is not Ethernet (1)"
        );
        assert_eq!(
            bad(parse_mutated(14, 1)),
            "hardware type is not Ethernet (1)"
        );
        assert_eq!(
            bad(parse_mutated(16, 0x86)),
            "protocol type is not IPv4 (0x0800)"
        );
        assert_eq!(
            bad(parse_mutated(18, 8)),
            "hardware address length is not 6"
        );
        assert_eq!(
            bad(parse_mutated(19, 16)),
            "protocol address length is not 4"
        );
        for op in [0u8, 3, 4, 0xff] {
            assert_eq!(
                bad(parse_mutated(21, op)),
                "operation is neither request (1) nor reply (2)"
            );
        }
        assert_eq!(
            bad(parse_mutated(20, 1)),
            "operation is neither request (1) nor reply (2)"
        );
        // Broadcast, multicast (IPv4 01:00:5e:..., IPv6 33:33:...), zero senders.
        for first in [0xff, 0x01, 0x33] {
            assert_eq!(
                bad(parse_mutated(22, first)),
                "sender MAC is multicast or broadcast"
            );
        }
        let mut zero = padded(&LINUX_REQUEST);
        zero[22..28].fill(0);
        assert_eq!(bad(ArpRepr::parse(&zero)), "sender MAC is zero");
        // A locally administered unicast sender (02:...) is fine.
        assert!(parse_mutated(22, 0x02).is_ok());
        assert!(is_unicast_mac([0, 0, 0, 0, 0, 1]));
        assert!(!is_unicast_mac([0; 6]));
        assert!(!is_unicast_mac(BROADCAST_MAC));
        let e = WireError::BadArp("sender MAC is zero");
        assert_eq!(e.to_string(), "bad ARP frame: sender MAC is zero");
    }

    #[test]
    fn short_buffers_are_refused_not_panics() {
        let buf = padded(&LINUX_REQUEST);
        for len in 0..ARP_FRAME_LEN {
            assert_eq!(
                ArpRepr::parse(&buf[..len]),
                Err(WireError::Truncated {
                    needed: 42,
                    got: len
                })
            );
            assert!(ArpPacket::new_checked(&buf[..len]).is_err());
        }
        let r = ArpRepr::request(HOST_MAC, HOST_IP, OUR_IP);
        for len in 0..MIN_FRAME_LEN {
            let mut out = vec![0x5au8; len];
            assert_eq!(
                r.emit(BROADCAST_MAC, HOST_MAC, &mut out),
                Err(WireError::BufferTooSmall {
                    needed: 60,
                    got: len
                })
            );
            assert!(
                out.iter().all(|&b| b == 0x5a),
                "written into a short buffer"
            );
        }
    }
}
