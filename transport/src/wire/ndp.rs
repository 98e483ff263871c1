//! ICMPv6 (RFC 4443) echo and IPv6 neighbour discovery (RFC 4861: neighbour
//! solicitations and advertisements) over Ethernet II and IPv6 without extension
//! headers: the IPv6 counterpart of [`super::arp`] and [`super::icmp`], so that a node
//! resolves and answers for its IPv6 addresses, and answers `ping -6`, without a kernel
//! stack.
//!
//! ```text
//!  0..14  Ethernet II, ethertype 0x86dd     54     type: 128 echo request, 129 echo reply,
//! 14..54  IPv6 (super::ipv6), next header          135 neighbour solicitation (NS),
//!         58; hop limit 255 for neighbour          136 neighbour advertisement (NA)
//!         discovery, 64 for echo replies    55     code 0
//!                                           56..58 checksum over the pseudo header and
//!                                                  the message (RFC 8200 §8.1)
//!  NS and NA:                               echo:
//! 58      flags: NA router 0x80, solicited  58..60 identifier
//!         0x40, override 0x20; NS reserved  60..62 sequence number
//! 59..62  reserved (zero on emit)           62..   data, to the payload length
//! 62..78  target address
//! 78..    options, to the payload length: type, length in units of 8 bytes (never
//!         0), contents; a link-layer address option (type 1 source, in an NS; type 2
//!         target, in an NA) is 8 bytes: type, 1, the MAC
//! ```
//!
//! The ICMPv6 message is the IPv6 payload (its payload length), at least the 4 bytes
//! of type, code and checksum; bytes after it (Ethernet padding) are ignored. Unlike
//! IPv4's, the ICMPv6 checksum is mandatory and covers the IPv6 addresses (the pseudo
//! header), so a frame whose addresses were damaged is refused by it too.
//!
//! A solicitation asks for the link-layer address of its target: sent to the target's
//! solicited-node multicast address ([`solicited_node`], at its multicast MAC,
//! [`multicast_mac`]) when the asker knows nothing, or unicast to the target to check
//! that an address it has is still right (Linux's unicast probes). One from the
//! unspecified address `::` is duplicate address detection (RFC 4862): a host about to
//! use the target address asking whether anyone has it; it carries no source
//! link-layer address option. An advertisement gives the target's link-layer address:
//! solicited (the S flag) in answer to a solicitation, unicast to the asker, or
//! unsolicited, to all nodes ([`ALL_NODES`]) when a host announces itself (the IPv6
//! gratuitous ARP).
//!
//! [`parse_icmpv6`] makes the validity checks of RFC 4861 §7.1 (hop limit 255, so that
//! the message cannot have come through a router; code 0; length; target not
//! multicast; options well formed; the rules for duplicate address detection and
//! multicast advertisements) and refuses, with [`WireError::BadNdp`] naming the check,
//! what fails one. The `emit_*` functions write only frames it accepts.

use super::arp::MIN_FRAME_LEN;
use super::checksum::{fold, sum_words};
use super::ipv6::{
    check_ipv6_header, pseudo_sum, put_ipv6_header, set_payload_len, upper_checksum,
    IPV6_HEADERS_LEN, IPV6_HOP_LIMIT, NEXT_ICMPV6,
};
use super::{get_u16, set_u16, WireError};

mod field {
    use super::super::Field;

    /// Where the ICMPv6 message starts: after the IPv6 header.
    pub const ICMP_START: usize = 54;
    pub const TYPE: usize = 54;
    pub const CODE: usize = 55;
    pub const CHECKSUM: Field = 56..58;
    /// The checksum's offset in the message.
    pub const CHECKSUM_AT: usize = 2;

    pub const FLAGS: usize = 58;
    pub const RESERVED: Field = 58..62;
    pub const TARGET: Field = 62..78;
    /// Where the options start.
    pub const OPTIONS: usize = 78;

    pub const IDENT: Field = 58..60;
    pub const SEQ: Field = 60..62;
    /// Where the echo data starts.
    pub const DATA_START: usize = 62;
}

/// ICMPv6 type of an echo request.
pub const ICMPV6_ECHO_REQUEST: u8 = 128;
/// ICMPv6 type of an echo reply.
pub const ICMPV6_ECHO_REPLY: u8 = 129;
/// ICMPv6 type of a neighbour solicitation.
pub const NDP_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const NDP_ADVERT: u8 = 136;
/// Hop limit of every neighbour discovery message, sent and required on receipt (RFC
/// 4861 §7.1): a message that crossed a router has a lower one.
pub const NDP_HOP_LIMIT: u8 = 255;
/// Option type of the source link-layer address (in a solicitation).
pub const OPT_SOURCE_LLA: u8 = 1;
/// Option type of the target link-layer address (in an advertisement).
pub const OPT_TARGET_LLA: u8 = 2;
/// Length of a link-layer address option for Ethernet: type, length 1, MAC.
pub const LLA_OPTION_LEN: usize = 8;
/// Length of a solicitation or advertisement without options: type, code, checksum,
/// flags and reserved, target address.
pub const NDP_MESSAGE_LEN: usize = 24;
/// Ethernet + IPv6 + a solicitation or advertisement with one link-layer address
/// option: the frames [`emit_solicit`] and [`emit_advert`] write (86 bytes; a
/// duplicate address detection probe, without the option, is 78).
pub const NDP_FRAME_LEN: usize = IPV6_HEADERS_LEN + NDP_MESSAGE_LEN + LLA_OPTION_LEN;
/// Length of the ICMPv6 echo header (type, code, checksum, identifier, sequence number).
pub const ECHO6_HEADER_LEN: usize = 8;
/// Ethernet + IPv6 + the echo header: the shortest echo frame, before its data.
pub const ECHO6_HEADERS_LEN: usize = IPV6_HEADERS_LEN + ECHO6_HEADER_LEN;
/// Most echo data one IPv6 packet carries (its payload length is 16 bits).
pub const ECHO6_DATA_MAX: usize = u16::MAX as usize - ECHO6_HEADER_LEN;

/// Flags of a neighbour advertisement (byte 58 of the frame).
pub mod na_flags {
    /// The sender is a router.
    pub const ROUTER: u8 = 0x80;
    /// The advertisement answers a solicitation.
    pub const SOLICITED: u8 = 0x40;
    /// The advertisement overrides a cached link-layer address.
    pub const OVERRIDE: u8 = 0x20;
}

/// The unspecified address `::`, the source of a duplicate address detection probe.
pub const UNSPECIFIED: [u8; 16] = [0; 16];
/// The all-nodes multicast address `ff02::1`, the destination of an unsolicited
/// advertisement.
pub const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// The MAC of [`ALL_NODES`], `33:33:00:00:00:01`.
pub const ALL_NODES_MAC: [u8; 6] = multicast_mac(ALL_NODES);

/// The first 13 bytes of every solicited-node multicast address, `ff02::1:ff00:0/104`.
const SOLICITED_NODE_PREFIX: [u8; 13] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff];

/// The solicited-node multicast address of `ip` (RFC 4291 §2.7.1),
/// `ff02::1:ffXX:XXXX` with the last 3 bytes of `ip`: where a solicitation for `ip`
/// goes when the asker has no link-layer address for it.
#[inline]
pub const fn solicited_node(ip: [u8; 16]) -> [u8; 16] {
    let p = SOLICITED_NODE_PREFIX;
    [
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], ip[13],
        ip[14], ip[15],
    ]
}

/// Whether `ip` is a solicited-node multicast address (of any address).
#[inline]
pub fn is_solicited_node(ip: [u8; 16]) -> bool {
    ip[..13] == SOLICITED_NODE_PREFIX
}

/// The Ethernet MAC of IPv6 multicast address `ip` (RFC 2464 §7): `33:33` and the
/// last 4 bytes of `ip`.
#[inline]
pub const fn multicast_mac(ip: [u8; 16]) -> [u8; 6] {
    [0x33, 0x33, ip[12], ip[13], ip[14], ip[15]]
}

/// Whether `ip` is a multicast address (`ff00::/8`).
#[inline]
pub const fn is_multicast(ip: [u8; 16]) -> bool {
    ip[0] == 0xff
}

/// A neighbour solicitation, as received: who asks (Ethernet and IPv6 source, its
/// link-layer address option), for which target address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solicit {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address (the target's multicast MAC, or a unicast one).
    pub dst_mac: [u8; 6],
    /// IPv6 source address; [`UNSPECIFIED`] for duplicate address detection
    /// ([`Solicit::is_dad`]).
    pub src_ip: [u8; 16],
    /// IPv6 destination address: the target's solicited-node multicast address, or
    /// the target itself for a unicast probe.
    pub dst_ip: [u8; 16],
    /// The address whose link-layer address is asked for (never multicast).
    pub target: [u8; 16],
    /// The source link-layer address option: the asker's MAC, where the answer goes
    /// (`None` when there was none; always `None` in duplicate address detection).
    pub sender_mac: Option<[u8; 6]>,
}

impl Solicit {
    /// Whether this is duplicate address detection: from the unspecified address, to a
    /// solicited-node multicast address, no source link-layer address. It is answered,
    /// by the owner of the target, with an unsolicited advertisement to all nodes.
    #[inline]
    pub fn is_dad(&self) -> bool {
        self.src_ip == UNSPECIFIED
    }
}

/// A neighbour advertisement, as received: who sends it, for which target, its flags
/// and target link-layer address option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advert {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address.
    pub dst_mac: [u8; 6],
    /// IPv6 source address.
    pub src_ip: [u8; 16],
    /// IPv6 destination address (the asker, or all nodes).
    pub dst_ip: [u8; 16],
    /// The address advertised (never multicast).
    pub target: [u8; 16],
    /// The R flag: the sender is a router.
    pub router: bool,
    /// The S flag: an answer to a solicitation (never set when `dst_ip` is multicast).
    pub solicited: bool,
    /// The O flag: the link-layer address replaces a cached one.
    pub override_: bool,
    /// The target link-layer address option: the target's MAC (`None` when there was
    /// none).
    pub target_mac: Option<[u8; 6]>,
}

/// An ICMPv6 echo request, as received: its addresses, identifier, sequence number and
/// data (borrowed from the frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoRequest6<'a> {
    /// Ethernet source address (the reply's destination).
    pub src_mac: [u8; 6],
    /// Ethernet destination address (ours, or multicast).
    pub dst_mac: [u8; 6],
    /// IPv6 source address (the reply's destination).
    pub src_ip: [u8; 16],
    /// IPv6 destination address; the caller decides whether it is one to answer.
    pub dst_ip: [u8; 16],
    /// Echo identifier, sent back.
    pub ident: u16,
    /// Echo sequence number, sent back.
    pub seq: u16,
    /// Echo data, sent back.
    pub data: &'a [u8],
}

/// A valid ICMPv6 message: a neighbour solicitation or advertisement, an echo request,
/// or the type and code of any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmpv6<'a> {
    /// A neighbour solicitation (type 135), to answer with [`emit_advert`].
    Solicit(Solicit),
    /// A neighbour advertisement (type 136).
    Advert(Advert),
    /// An echo request (type 128, code 0), to answer with [`emit_echo_reply6`].
    EchoRequest(EchoRequest6<'a>),
    /// Any other ICMPv6 message (an echo reply, a router solicitation, an echo request
    /// with a non-zero code...), its checksum right. Never type 135 or 136: those are
    /// a `Solicit` or an `Advert`, or refused.
    Other {
        /// ICMPv6 type.
        kind: u8,
        /// ICMPv6 code.
        code: u8,
    },
}

/// The ICMPv6 checksum the frame's message should carry (computed with the checksum
/// field taken as zero), the message being the payload its IPv6 payload length gives:
/// `None` when the frame is shorter than the IPv6 header and that payload, or the
/// payload shorter than 4 bytes. Nothing else is checked.
pub fn icmpv6_checksum(frame: &[u8]) -> Option<u16> {
    if frame.len() < IPV6_HEADERS_LEN {
        return None;
    }
    let len = usize::from(get_u16(frame, 18..20));
    upper_checksum(
        frame,
        field::ICMP_START,
        len,
        NEXT_ICMPV6,
        field::CHECKSUM_AT,
    )
}

/// Decodes and validates an ICMPv6 frame. The checks, made and refused in this order:
///
/// 1. the Ethernet and IPv6 headers, [`check_ipv6_header`]: at least 54 bytes,
///    ethertype IPv6, version 6, the payload length within the buffer (Ethernet
///    padding after it is ignored);
/// 2. next header ICMPv6 (58), else [`WireError::NotIcmp`] with the next header (an
///    extension header, such as the hop-by-hop options of an MLD report, is refused
///    so);
/// 3. a payload of at least 4 bytes, else [`WireError::Truncated`] (`needed` 58,
///    `got` 54 + the payload length: bytes of the frame as the payload length
///    delimits it);
/// 4. the ICMPv6 checksum over the pseudo header and the payload (mandatory in IPv6),
///    else [`WireError::BadIcmpChecksum`];
/// 5. by type:
///    * 128 with code 0, an echo request: at least the 8-byte echo header (else
///      `Truncated`, `needed` 62, counted as in 3), [`Icmpv6::EchoRequest`];
///    * 135 and 136, a solicitation and an advertisement: hop limit 255, code 0, at
///      least 24 bytes, a target that is not multicast; options each with a non-zero
///      length and within the payload, every link-layer address option of the kind
///      the message carries (source in a solicitation, target in an advertisement) 8
///      bytes long, the first of them read, other options skipped; then for a
///      solicitation from the unspecified address (duplicate address detection) a
///      solicited-node multicast destination and no source link-layer address option,
///      for an advertisement to a multicast address the solicited flag clear. Each
///      refusal here is [`WireError::BadNdp`], naming the check;
///    * anything else: [`Icmpv6::Other`].
///
/// The reserved bits of a solicitation or advertisement are ignored, as RFC 4861
/// requires; the MACs and the hop limit of other messages are not checked.
pub fn parse_icmpv6(frame: &[u8]) -> Result<Icmpv6<'_>, WireError> {
    let h = check_ipv6_header(frame)?;
    if h.next != NEXT_ICMPV6 {
        return Err(WireError::NotIcmp(h.next));
    }
    let len = usize::from(h.payload_len);
    let end = IPV6_HEADERS_LEN + len;
    if len < 4 {
        return Err(WireError::Truncated {
            needed: field::ICMP_START + 4,
            got: end,
        });
    }
    let message = &frame[field::ICMP_START..end];
    if fold(pseudo_sum(frame, len, NEXT_ICMPV6) + sum_words(message)) != 0xffff {
        return Err(WireError::BadIcmpChecksum {
            // The lengths were checked above, so the message is in the buffer.
            expected: icmpv6_checksum(frame).unwrap_or(0),
            got: get_u16(frame, field::CHECKSUM),
        });
    }
    let (kind, code) = (frame[field::TYPE], frame[field::CODE]);
    match kind {
        ICMPV6_ECHO_REQUEST if code == 0 => {
            if len < ECHO6_HEADER_LEN {
                return Err(WireError::Truncated {
                    needed: ECHO6_HEADERS_LEN,
                    got: end,
                });
            }
            Ok(Icmpv6::EchoRequest(EchoRequest6 {
                src_mac: h.src_mac,
                dst_mac: h.dst_mac,
                src_ip: h.src,
                dst_ip: h.dst,
                ident: get_u16(frame, field::IDENT),
                seq: get_u16(frame, field::SEQ),
                data: &frame[field::DATA_START..end],
            }))
        }
        NDP_SOLICIT | NDP_ADVERT => {
            if h.hop_limit != NDP_HOP_LIMIT {
                return Err(WireError::BadNdp("hop limit is not 255"));
            }
            if code != 0 {
                return Err(WireError::BadNdp("code is not 0"));
            }
            if len < NDP_MESSAGE_LEN {
                return Err(WireError::BadNdp("message is shorter than 24 bytes"));
            }
            let target: [u8; 16] = super::array(frame, field::TARGET);
            if is_multicast(target) {
                return Err(WireError::BadNdp("target address is multicast"));
            }
            let want = if kind == NDP_SOLICIT {
                OPT_SOURCE_LLA
            } else {
                OPT_TARGET_LLA
            };
            let lla = link_layer_option(&frame[field::OPTIONS..end], want)?;
            if kind == NDP_SOLICIT {
                if h.src == UNSPECIFIED {
                    if !is_solicited_node(h.dst) {
                        return Err(WireError::BadNdp(
                            "duplicate address detection is not to a solicited-node address",
                        ));
                    }
                    if lla.is_some() {
                        return Err(WireError::BadNdp(
                            "duplicate address detection carries a source link-layer address",
                        ));
                    }
                }
                return Ok(Icmpv6::Solicit(Solicit {
                    src_mac: h.src_mac,
                    dst_mac: h.dst_mac,
                    src_ip: h.src,
                    dst_ip: h.dst,
                    target,
                    sender_mac: lla,
                }));
            }
            let flags = frame[field::FLAGS];
            let solicited = flags & na_flags::SOLICITED != 0;
            if solicited && is_multicast(h.dst) {
                return Err(WireError::BadNdp(
                    "solicited advertisement to a multicast address",
                ));
            }
            Ok(Icmpv6::Advert(Advert {
                src_mac: h.src_mac,
                dst_mac: h.dst_mac,
                src_ip: h.src,
                dst_ip: h.dst,
                target,
                router: flags & na_flags::ROUTER != 0,
                solicited,
                override_: flags & na_flags::OVERRIDE != 0,
                target_mac: lla,
            }))
        }
        _ => Ok(Icmpv6::Other { kind, code }),
    }
}

/// Walks the options of a solicitation or advertisement (`options`, to the end of the
/// payload): each must have a non-zero length (else the walk would not advance) and
/// lie within `options`; every option of type `want` must be a link-layer address
/// option for Ethernet (8 bytes), and the first one's MAC is returned.
fn link_layer_option(options: &[u8], want: u8) -> Result<Option<[u8; 6]>, WireError> {
    let mut rest = options;
    let mut found = None;
    while let [kind, units, ..] = *rest {
        if units == 0 {
            return Err(WireError::BadNdp("option of length 0"));
        }
        let Some((option, tail)) = rest.split_at_checked(usize::from(units) * 8) else {
            return Err(WireError::BadNdp("option runs past the message"));
        };
        if kind == want {
            if option.len() != LLA_OPTION_LEN {
                return Err(WireError::BadNdp(
                    "link-layer address option is not 8 bytes",
                ));
            }
            found = found.or(Some(super::array(option, 2..8)));
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(WireError::BadNdp("option runs past the message"));
    }
    Ok(found)
}

/// Checks that `buf` holds `len` bytes, for an emit.
#[inline]
fn room(buf: &[u8], len: usize) -> Result<(), WireError> {
    if buf.len() < len {
        return Err(WireError::BufferTooSmall {
            needed: len,
            got: buf.len(),
        });
    }
    Ok(())
}

/// Sets the ICMPv6 checksum of a message written into `data[54..end]` (its checksum
/// field zero), the IPv6 header before it written.
#[inline]
fn fill_checksum(data: &mut [u8], end: usize) {
    let len = end - field::ICMP_START;
    let sum = pseudo_sum(data, len, NEXT_ICMPV6) + sum_words(&data[field::ICMP_START..end]);
    set_u16(data, field::CHECKSUM, !fold(sum));
}

/// Writes a solicitation or an advertisement: headers, type `kind`, `flags` (byte
/// 58), the target, the link-layer address option `lla` (type, MAC) if any, padding,
/// the checksum. Returns the frame's length.
fn put_ndp(
    buf: &mut [u8],
    macs: ([u8; 6], [u8; 6]),
    ips: ([u8; 16], [u8; 16]),
    (kind, flags): (u8, u8),
    target: [u8; 16],
    lla: Option<(u8, [u8; 6])>,
) -> Result<usize, WireError> {
    let end = field::OPTIONS + lla.map_or(0, |_| LLA_OPTION_LEN);
    let len = end.max(MIN_FRAME_LEN);
    room(buf, len)?;
    let data = &mut buf[..len];
    put_ipv6_header(data, macs, ips, (NEXT_ICMPV6, NDP_HOP_LIMIT), (0, 0));
    set_payload_len(data, (end - IPV6_HEADERS_LEN) as u16);
    data[field::TYPE] = kind;
    data[field::CODE] = 0;
    set_u16(data, field::CHECKSUM, 0);
    data[field::RESERVED].fill(0);
    data[field::FLAGS] = flags;
    data[field::TARGET].copy_from_slice(&target);
    if let Some((option, mac)) = lla {
        let at = field::OPTIONS;
        data[at] = option;
        data[at + 1] = (LLA_OPTION_LEN / 8) as u8;
        data[at + 2..at + LLA_OPTION_LEN].copy_from_slice(&mac);
    }
    data[end..].fill(0);
    fill_checksum(data, end);
    Ok(len)
}

/// Writes a neighbour solicitation from `src_mac`/`src_ip` for the link-layer address
/// of `target` into `buf`: hop limit 255, traffic class and flow label 0, the source
/// link-layer address option `src_mac`. With `to_mac` `None` it goes to the target's
/// solicited-node multicast address and its MAC (address resolution); with
/// `Some(mac)`, unicast to `target` at `mac` (a check that a cached address is still
/// right, as Linux's unicast probes). From [`UNSPECIFIED`] it is a duplicate address
/// detection probe: no option (RFC 4861 §4.3), and only to the multicast address.
///
/// Returns the frame's length, 86 (78 for a probe; frames are never below the 60 of
/// [`MIN_FRAME_LEN`], to which they would be padded with zeros). Refused, with nothing
/// written: a multicast `target` or a probe with a `to_mac`, [`WireError::BadNdp`]
/// (they would not parse); a `buf` too short, [`WireError::BufferTooSmall`].
pub fn emit_solicit(
    src_mac: [u8; 6],
    src_ip: [u8; 16],
    target: [u8; 16],
    to_mac: Option<[u8; 6]>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if is_multicast(target) {
        return Err(WireError::BadNdp("target address is multicast"));
    }
    let dad = src_ip == UNSPECIFIED;
    let (dst_mac, dst_ip) = match to_mac {
        None => (
            multicast_mac(solicited_node(target)),
            solicited_node(target),
        ),
        Some(_) if dad => {
            return Err(WireError::BadNdp(
                "duplicate address detection is not to a solicited-node address",
            ))
        }
        Some(mac) => (mac, target),
    };
    let lla = (!dad).then_some((OPT_SOURCE_LLA, src_mac));
    put_ndp(
        buf,
        (dst_mac, src_mac),
        (src_ip, dst_ip),
        (NDP_SOLICIT, 0),
        target,
        lla,
    )
}

/// Writes a neighbour advertisement of our address `src_ip` (the target, and the
/// source) at `src_mac` into `buf`: hop limit 255, traffic class and flow label 0,
/// override set, router clear, the target link-layer address option `src_mac`. With
/// `to` `Some((mac, ip))` it is the answer to a solicitation from `ip` at `mac`
/// (solicited flag set), unicast there; with `None` an unsolicited announcement
/// (solicited flag clear) to [`ALL_NODES`] at [`ALL_NODES_MAC`], as after a change of
/// MAC, or in answer to duplicate address detection for our address (RFC 4861 §7.2.4).
///
/// Returns the frame's length, 86. Refused, with nothing written: a multicast `src_ip`
/// or a `to` address that is multicast (a solicited advertisement must be unicast),
/// [`WireError::BadNdp`]; a `buf` too short, [`WireError::BufferTooSmall`].
pub fn emit_advert(
    src_mac: [u8; 6],
    src_ip: [u8; 16],
    to: Option<([u8; 6], [u8; 16])>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if is_multicast(src_ip) {
        return Err(WireError::BadNdp("target address is multicast"));
    }
    let (flags, (dst_mac, dst_ip)) = match to {
        Some((_, ip)) if is_multicast(ip) => {
            return Err(WireError::BadNdp(
                "solicited advertisement to a multicast address",
            ))
        }
        Some(to) => (na_flags::SOLICITED | na_flags::OVERRIDE, to),
        None => (na_flags::OVERRIDE, (ALL_NODES_MAC, ALL_NODES)),
    };
    put_ndp(
        buf,
        (dst_mac, src_mac),
        (src_ip, dst_ip),
        (NDP_ADVERT, flags),
        src_ip,
        Some((OPT_TARGET_LLA, src_mac)),
    )
}

/// Writes the echo reply to `req` from `src_mac`/`src_ip` into `buf`: to the
/// request's source MAC and IPv6 address, hop limit 64, traffic class and flow label
/// 0, type 129 code 0 with the request's identifier, sequence number and data, the
/// checksum. `src_ip` is the caller's: our unicast address, also when the request
/// went to a multicast one.
///
/// Returns the frame's length, 62 + the data (never below [`MIN_FRAME_LEN`], to which
/// it would be padded with zeros). [`WireError::EchoTooLong`] when the data is longer
/// than [`ECHO6_DATA_MAX`], [`WireError::BufferTooSmall`] when the frame does not fit
/// `buf`; nothing is written then.
pub fn emit_echo_reply6(
    req: &EchoRequest6<'_>,
    src_mac: [u8; 6],
    src_ip: [u8; 16],
    buf: &mut [u8],
) -> Result<usize, WireError> {
    if req.data.len() > ECHO6_DATA_MAX {
        return Err(WireError::EchoTooLong(req.data.len()));
    }
    let end = ECHO6_HEADERS_LEN + req.data.len();
    let len = end.max(MIN_FRAME_LEN);
    room(buf, len)?;
    let data = &mut buf[..len];
    put_ipv6_header(
        data,
        (req.src_mac, src_mac),
        (src_ip, req.src_ip),
        (NEXT_ICMPV6, IPV6_HOP_LIMIT),
        (0, 0),
    );
    set_payload_len(data, (end - IPV6_HEADERS_LEN) as u16);
    data[field::TYPE] = ICMPV6_ECHO_REPLY;
    data[field::CODE] = 0;
    set_u16(data, field::CHECKSUM, 0);
    set_u16(data, field::IDENT, req.ident);
    set_u16(data, field::SEQ, req.seq);
    data[field::DATA_START..end].copy_from_slice(req.data);
    data[end..].fill(0);
    fill_checksum(data, end);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    /// fe80::5054:ff:fe12:3456, the host's link-local address (EUI-64 of its MAC).
    const HOST_IP: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];
    const OUR_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    /// fe80::5054:ff:feab:cdef.
    const OUR_IP: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
    ];
    /// ff02::1:ffab:cdef, our solicited-node address, and its MAC.
    const OUR_SNMA: [u8; 16] = [
        0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xab, 0xcd, 0xef,
    ];
    const OUR_SNMA_MAC: [u8; 6] = [0x33, 0x33, 0xff, 0xab, 0xcd, 0xef];

    // The frames below were captured (AF_PACKET) on a veth pair between two network
    // namespaces of Linux 6.18, the host's end with MAC 52:54:00:12:34:56, ours
    // 52:54:00:ab:cd:ef, both with their EUI-64 link-local addresses, while the host
    // ran `ping -6 -c1 fe80::5054:ff:feab:cdef%va` (-s 56, then -s 3).

    /// The host's solicitation for our address (address resolution before the ping).
    ///
    /// Checksum by hand (words of 16 bits): source fe80 + 5054 + 00ff + fe12 + 3456 =
    /// 0x2823b; destination ff02 + 0001 + ffab + cdef = 0x2cc9d; length 0x0020; next
    /// header 0x003a; the message 8700 + target (fe80 + 5054 + 00ff + feab + cdef =
    /// 0x31c6d) + 0101 + 5254 + 0012 + 3456 = 0x42b2a. In all 0x97a5c, folded 0x7a65,
    /// complement 0x859a.
    #[rustfmt::skip]
    const LINUX_NS: [u8; 86] = [
        0x33, 0x33, 0xff, 0xab, 0xcd, 0xef,     // dst MAC: our solicited-node MAC
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // src MAC: the host
        0x86, 0xdd,                             // IPv6
        0x60, 0x00, 0x00, 0x00,                 // version 6, no class, no flow label
        0x00, 0x20, 0x3a, 0xff,                 // payload 32, ICMPv6, hop limit 255
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // src fe80::5054:ff:fe12:3456
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // dst ff02::1:ffab:cdef
        0x00, 0x00, 0x00, 0x01, 0xff, 0xab, 0xcd, 0xef,
        0x87, 0x00, 0x85, 0x9a,                 // solicitation, code 0, checksum
        0x00, 0x00, 0x00, 0x00,                 // reserved
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // target fe80::5054:ff:feab:cdef
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // source link-layer address
    ];

    /// Our end's (Linux's) answer to it: solicited, override, unicast to the host.
    ///
    /// Checksum by hand: source 0x31c6d, destination 0x2823b (the addresses above),
    /// 0x0020, 0x003a; the message 8800 + 6000 + target 0x31c6d + 0201 + 5254 + 00ab +
    /// cdef = 0x5275c. In all 0xac65e, folded 0xc668, complement 0x3997.
    #[rustfmt::skip]
    const LINUX_NA: [u8; 86] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // dst MAC: the host
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // src MAC: us
        0x86, 0xdd,
        0x60, 0x00, 0x00, 0x00,
        0x00, 0x20, 0x3a, 0xff,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // src: us
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // dst: the host
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0x88, 0x00, 0x39, 0x97,                 // advertisement, code 0, checksum
        0x60, 0x00, 0x00, 0x00,                 // solicited, override
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // target: us
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0x02, 0x01, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // target link-layer address
    ];

    /// Our end's unicast probe of the host after the ping (its neighbour entry, made
    /// STALE by the host's solicitation, checked again): to the host's address and
    /// MAC. Checksum 0x35ca (the NS's sum with the addresses' roles exchanged: the
    /// source and target sums swap, the destination is the host's unicast address).
    #[rustfmt::skip]
    const LINUX_PROBE: [u8; 86] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // dst MAC: the host
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // src MAC: us
        0x86, 0xdd,
        0x60, 0x00, 0x00, 0x00,
        0x00, 0x20, 0x3a, 0xff,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // src: us
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // dst: the host
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0x87, 0x00, 0x35, 0xca,
        0x00, 0x00, 0x00, 0x00,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // target: the host
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0x01, 0x01, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // source link-layer: us
    ];

    /// The host's duplicate address detection for its link-local address, when its
    /// link came up: from ::, to its own solicited-node address, no source link-layer
    /// address, and a nonce option (type 14, RFC 7527) that the parser skips.
    ///
    /// Checksum by hand: source 0; destination ff02 + 0001 + ff12 + 3456 = 0x2326b;
    /// 0x0020, 0x003a; the message 8700 + target 0x2823b + 0e01 + 0c8e + 3f89 + 79ad =
    /// 0x3dd00. In all 0x60fc5, folded 0x0fcb, complement 0xf034.
    #[rustfmt::skip]
    const LINUX_DAD: [u8; 86] = [
        0x33, 0x33, 0xff, 0x12, 0x34, 0x56,
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
        0x86, 0xdd,
        0x60, 0x00, 0x00, 0x00,
        0x00, 0x20, 0x3a, 0xff,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // src ::
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // dst ff02::1:ff12:3456
        0x00, 0x00, 0x00, 0x01, 0xff, 0x12, 0x34, 0x56,
        0x87, 0x00, 0xf0, 0x34,
        0x00, 0x00, 0x00, 0x00,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // target: the host's address
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0x0e, 0x01, 0x0c, 0x8e, 0x3f, 0x89, 0x79, 0xad,     // nonce
    ];

    /// The host's router solicitation (type 133) with its source link-layer address.
    #[rustfmt::skip]
    const LINUX_RS: [u8; 70] = [
        0x33, 0x33, 0x00, 0x00, 0x00, 0x02,
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
        0x86, 0xdd,
        0x60, 0x00, 0x00, 0x00,
        0x00, 0x10, 0x3a, 0xff,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // ff02::2, all routers
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x85, 0x00, 0x71, 0xb5,
        0x00, 0x00, 0x00, 0x00,
        0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// The host's MLDv2 report: ICMPv6 behind a hop-by-hop options header (next
    /// header 0), which this module does not follow.
    #[rustfmt::skip]
    const LINUX_MLD: [u8; 90] = [
        0x33, 0x33, 0x00, 0x00, 0x00, 0x16,
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
        0x86, 0xdd,
        0x60, 0x00, 0x00, 0x00,
        0x00, 0x24, 0x00, 0x01,                 // payload 36, hop-by-hop, hop limit 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x16,
        0x3a, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00,     // hop-by-hop: router alert
        0x8f, 0x00, 0x3b, 0x22, 0x00, 0x00, 0x00, 0x01,
        0x04, 0x00, 0x00, 0x00,
        0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0xff, 0x12, 0x34, 0x56,
    ];

    /// `ping -6` (56 data bytes), the first request: flow label 0x9295c, hop limit 64,
    /// identifier 0x6bf2, sequence 1; the data a `struct timeval` (little endian) and
    /// then the bytes 0x10..=0x37.
    ///
    /// Checksum by hand: source 0x2823b, destination 0x31c6d, length 0x0040, 0x003a;
    /// the message 8000 + 6bf2 + 0001 + (9095 + 0f6b + 3b81 + 0b00) + (1011 + ... +
    /// 3637, twenty words = 0x2bed0) = 0x49144. In all 0xa3066, folded 0x3070,
    /// complement 0xcf8f.
    #[rustfmt::skip]
    const LINUX_PING6: [u8; 118] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,     // dst MAC: us
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,     // src MAC: the host
        0x86, 0xdd,
        0x60, 0x09, 0x29, 0x5c,                 // flow label 0x9295c
        0x00, 0x40, 0x3a, 0x40,                 // payload 64, ICMPv6, hop limit 64
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // src: the host
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // dst: us
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0x80, 0x00, 0xcf, 0x8f,                 // echo request, code 0, checksum
        0x6b, 0xf2, 0x00, 0x01,                 // identifier, sequence 1
        0x90, 0x95, 0x0f, 0x6b, 0x00, 0x00, 0x00, 0x00,     // tv_sec
        0x3b, 0x81, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00,     // tv_usec
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
        0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    /// Linux's reply to it, but for its flow label (0xae368 there; ours are 0): the
    /// addresses swapped, type 129, checksum 0xce8f (the request's less 0x0100).
    fn linux_reply6() -> [u8; 118] {
        let mut r = LINUX_PING6;
        r[..6].copy_from_slice(&HOST_MAC);
        r[6..12].copy_from_slice(&OUR_MAC);
        r[14..18].copy_from_slice(&[0x60, 0, 0, 0]);
        r[22..38].copy_from_slice(&OUR_IP);
        r[38..54].copy_from_slice(&HOST_IP);
        r[54] = 0x81;
        r[56..58].copy_from_slice(&[0xce, 0x8f]);
        r
    }

    /// `ping -6 -s 3`: three data bytes (no timestamp), an odd payload of 11 bytes, a
    /// 65-byte frame. Checksum 0x7317: source and destination as above, 0x000b,
    /// 0x003a, the message 8000 + 6bf3 + 0001 + 0001 + 0200 (the odd byte padded) =
    /// 0xedf5; in all 0x68ce2, folded 0x8ce8, complement 0x7317.
    #[rustfmt::skip]
    const LINUX_PING6_ODD: [u8; 65] = [
        0x52, 0x54, 0x00, 0xab, 0xcd, 0xef,
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
        0x86, 0xdd,
        0x60, 0x09, 0x29, 0x5c,
        0x00, 0x0b, 0x3a, 0x40,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x50, 0x54, 0x00, 0xff, 0xfe, 0xab, 0xcd, 0xef,
        0x80, 0x00, 0x73, 0x17,
        0x6b, 0xf3, 0x00, 0x01,
        0x00, 0x01, 0x02,
    ];

    /// The internet checksum of RFC 1071, written plainly (no shared code with the
    /// module): the complement of the folded one's complement sum of 16-bit words, an
    /// odd last byte padded with zero.
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

    /// The pseudo header of RFC 8200 §8.1 (source, destination, 32-bit upper-layer
    /// length, three zeros, next header 58) followed by the frame's ICMPv6 message, as
    /// far as its payload length says and the buffer holds.
    fn pseudo_and_message(frame: &[u8]) -> Vec<u8> {
        let plen = usize::from(u16::from_be_bytes([frame[18], frame[19]]));
        let msg = &frame[54..(54 + plen).min(frame.len())];
        let mut v = frame[22..54].to_vec();
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(&[0, 0, 0, 58]);
        v.extend_from_slice(msg);
        v
    }

    /// The frame's ICMPv6 checksum verifies, by [`rfc1071`].
    fn checksum_verifies(frame: &[u8]) -> bool {
        rfc1071(&pseudo_and_message(frame)) == 0
    }

    /// Sets the frame's ICMPv6 checksum, by [`rfc1071`].
    fn fix_checksum(frame: &mut [u8]) {
        frame[56..58].fill(0);
        let c = rfc1071(&pseudo_and_message(frame));
        frame[56..58].copy_from_slice(&c.to_be_bytes());
    }

    /// `frame` with byte `at` set to `v`, its checksum fixed if `fix`.
    fn mutated(frame: &[u8], at: usize, v: u8, fix: bool) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[at] = v;
        if fix {
            fix_checksum(&mut f);
        }
        f
    }

    fn bad_ndp(r: Result<Icmpv6<'_>, WireError>) -> &'static str {
        match r {
            Err(WireError::BadNdp(why)) => why,
            other => panic!("expected BadNdp, got {other:?}"),
        }
    }

    fn linux_ns() -> Solicit {
        Solicit {
            src_mac: HOST_MAC,
            dst_mac: OUR_SNMA_MAC,
            src_ip: HOST_IP,
            dst_ip: OUR_SNMA,
            target: OUR_IP,
            sender_mac: Some(HOST_MAC),
        }
    }

    fn linux_na() -> Advert {
        Advert {
            src_mac: OUR_MAC,
            dst_mac: HOST_MAC,
            src_ip: OUR_IP,
            dst_ip: HOST_IP,
            target: OUR_IP,
            router: false,
            solicited: true,
            override_: true,
            target_mac: Some(OUR_MAC),
        }
    }

    fn linux_ping6() -> EchoRequest6<'static> {
        EchoRequest6 {
            src_mac: HOST_MAC,
            dst_mac: OUR_MAC,
            src_ip: HOST_IP,
            dst_ip: OUR_IP,
            ident: 0x6bf2,
            seq: 1,
            data: &LINUX_PING6[62..],
        }
    }

    #[test]
    fn multicast_addresses_and_their_macs() {
        assert_eq!(solicited_node(OUR_IP), OUR_SNMA);
        assert_eq!(multicast_mac(OUR_SNMA), OUR_SNMA_MAC);
        assert_eq!(ALL_NODES_MAC, [0x33, 0x33, 0, 0, 0, 1]);
        assert!(is_multicast(ALL_NODES) && is_multicast(OUR_SNMA));
        assert!(!is_multicast(OUR_IP) && !is_multicast(UNSPECIFIED));
        assert!(is_solicited_node(OUR_SNMA));
        assert!(is_solicited_node(solicited_node(UNSPECIFIED)));
        assert!(!is_solicited_node(ALL_NODES) && !is_solicited_node(OUR_IP));
        // ff02::2:ff.. (another group) is not one.
        let mut other = OUR_SNMA;
        other[11] = 2;
        assert!(!is_solicited_node(other));
        // The hand-worked checksums of the captured frames.
        for (f, c) in [
            (&LINUX_NS[..], 0x859a),
            (&LINUX_NA[..], 0x3997),
            (&LINUX_PROBE[..], 0x35ca),
            (&LINUX_DAD[..], 0xf034),
            (&LINUX_PING6[..], 0xcf8f),
            (&LINUX_PING6_ODD[..], 0x7317),
            (&LINUX_RS[..], 0x71b5),
        ] {
            assert!(checksum_verifies(f));
            assert_eq!(icmpv6_checksum(f), Some(c));
        }
        assert!(checksum_verifies(&linux_reply6()));
        assert_eq!(icmpv6_checksum(&linux_reply6()), Some(0xce8f));
    }

    #[test]
    fn linux_solicitation_parses_and_is_what_we_emit() {
        assert_eq!(parse_icmpv6(&LINUX_NS), Ok(Icmpv6::Solicit(linux_ns())));
        assert!(!linux_ns().is_dad());
        // Bytes after the payload (padding, or a longer buffer) are ignored.
        let mut long = [0xa5u8; 1514];
        long[..86].copy_from_slice(&LINUX_NS);
        assert_eq!(parse_icmpv6(&long), Ok(Icmpv6::Solicit(linux_ns())));

        let mut buf = [0xa5u8; 100];
        assert_eq!(
            emit_solicit(HOST_MAC, HOST_IP, OUR_IP, None, &mut buf),
            Ok(86)
        );
        assert_eq!(buf[..86], LINUX_NS);
        assert_eq!(buf[86..], [0xa5; 14], "nothing written past the frame");
    }

    #[test]
    fn linux_probe_is_our_unicast_solicitation() {
        let want = Solicit {
            src_mac: OUR_MAC,
            dst_mac: HOST_MAC,
            src_ip: OUR_IP,
            dst_ip: HOST_IP,
            target: HOST_IP,
            sender_mac: Some(OUR_MAC),
        };
        assert_eq!(parse_icmpv6(&LINUX_PROBE), Ok(Icmpv6::Solicit(want)));
        let mut buf = [0u8; 86];
        assert_eq!(
            emit_solicit(OUR_MAC, OUR_IP, HOST_IP, Some(HOST_MAC), &mut buf),
            Ok(86)
        );
        assert_eq!(buf, LINUX_PROBE);
    }

    #[test]
    fn linux_advertisement_parses_and_is_our_answer() {
        assert_eq!(parse_icmpv6(&LINUX_NA), Ok(Icmpv6::Advert(linux_na())));
        // The answer to the host's solicitation, as our end gave it.
        let ns = linux_ns();
        let mut buf = [0xa5u8; 90];
        let to = Some((ns.sender_mac.unwrap(), ns.src_ip));
        assert_eq!(emit_advert(OUR_MAC, ns.target, to, &mut buf), Ok(86));
        assert_eq!(buf[..86], LINUX_NA);
        assert_eq!(buf[86..], [0xa5; 4]);
    }

    #[test]
    fn unsolicited_advertisement_to_all_nodes() {
        // By hand: the NA's sum with destination ff02::1 (ff02 + 0001 = 0xff03 for the
        // host's 0x2823b) and flags 0x2000 for 0x6000: 0xac65e - 0x2823b + 0xff03 -
        // 0x4000 = 0x90326, folded 0x032f, complement 0xfcd0.
        let mut buf = [0u8; 86];
        assert_eq!(emit_advert(OUR_MAC, OUR_IP, None, &mut buf), Ok(86));
        let mut want = LINUX_NA;
        want[..6].copy_from_slice(&ALL_NODES_MAC);
        want[38..54].copy_from_slice(&ALL_NODES);
        want[56..58].copy_from_slice(&[0xfc, 0xd0]);
        want[58] = na_flags::OVERRIDE;
        assert_eq!(buf, want);
        assert!(checksum_verifies(&buf));
        assert_eq!(
            parse_icmpv6(&buf),
            Ok(Icmpv6::Advert(Advert {
                dst_mac: ALL_NODES_MAC,
                dst_ip: ALL_NODES,
                solicited: false,
                ..linux_na()
            }))
        );
    }

    #[test]
    fn duplicate_address_detection_in_and_out() {
        let want = Solicit {
            src_mac: HOST_MAC,
            dst_mac: multicast_mac(solicited_node(HOST_IP)),
            src_ip: UNSPECIFIED,
            dst_ip: solicited_node(HOST_IP),
            target: HOST_IP,
            sender_mac: None,
        };
        assert_eq!(parse_icmpv6(&LINUX_DAD), Ok(Icmpv6::Solicit(want)));
        assert!(want.is_dad());
        // Ours: the same without the nonce, 78 bytes. By hand: the capture's sum less
        // the nonce option (0e01 + 0c8e + 3f89 + 79ad = 0xd3c5) and 8 of length:
        // 0x60fc5 - 0xd3c5 - 8 = 0x53bf8, folded 0x3bfd, complement 0xc402.
        let mut buf = [0xa5u8; 80];
        assert_eq!(
            emit_solicit(HOST_MAC, UNSPECIFIED, HOST_IP, None, &mut buf),
            Ok(78)
        );
        let mut ours = LINUX_DAD[..78].to_vec();
        ours[19] = 24;
        ours[56..58].copy_from_slice(&[0xc4, 0x02]);
        assert_eq!(buf[..78], ours[..]);
        assert_eq!(buf[78..], [0xa5; 2]);
        assert!(checksum_verifies(&buf[..78]));
        assert_eq!(parse_icmpv6(&buf[..78]), Ok(Icmpv6::Solicit(want)));
        // Answered by the owner with an unsolicited advertisement.
        let mut out = [0u8; 86];
        emit_advert(HOST_MAC, want.target, None, &mut out).unwrap();
        assert!(matches!(
            parse_icmpv6(&out),
            Ok(Icmpv6::Advert(Advert {
                solicited: false,
                dst_ip: ALL_NODES,
                ..
            }))
        ));
    }

    #[test]
    fn linux_ping6_parses_and_our_reply_is_linuxs() {
        assert_eq!(
            parse_icmpv6(&LINUX_PING6),
            Ok(Icmpv6::EchoRequest(linux_ping6()))
        );
        let mut buf = [0xa5u8; 200];
        let n = emit_echo_reply6(&linux_ping6(), OUR_MAC, OUR_IP, &mut buf).unwrap();
        assert_eq!(n, 118);
        assert_eq!(buf[..118], linux_reply6());
        assert_eq!(buf[118..], [0xa5; 82]);
        assert_eq!(
            parse_icmpv6(&buf[..n]),
            Ok(Icmpv6::Other { kind: 129, code: 0 })
        );
        // The odd one: 3 bytes of data, a 65-byte frame.
        let Ok(Icmpv6::EchoRequest(req)) = parse_icmpv6(&LINUX_PING6_ODD) else {
            panic!("not an echo request");
        };
        assert_eq!(
            (req.ident, req.seq, req.data),
            (0x6bf3, 1, &[0u8, 1, 2][..])
        );
        let n = emit_echo_reply6(&req, OUR_MAC, OUR_IP, &mut buf).unwrap();
        assert_eq!(n, 65);
        assert!(checksum_verifies(&buf[..n]));
        // The request's sum less 0x0100 (the type), complement 0x7217, as Linux sent.
        assert_eq!(buf[56..58], [0x72, 0x17]);
        assert_eq!((buf[21], buf[54]), (64, 129));
    }

    #[test]
    fn other_icmpv6_messages_and_other_next_headers() {
        assert_eq!(
            parse_icmpv6(&LINUX_RS),
            Ok(Icmpv6::Other { kind: 133, code: 0 })
        );
        assert_eq!(parse_icmpv6(&LINUX_MLD), Err(WireError::NotIcmp(0)));
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_PING6, 55, 1, true)),
            Ok(Icmpv6::Other { kind: 128, code: 1 })
        );
        // A message of another type is not held to the neighbour discovery rules.
        let mut f = mutated(&LINUX_NS, 54, 137, true);
        f[21] = 1;
        assert_eq!(parse_icmpv6(&f), Ok(Icmpv6::Other { kind: 137, code: 0 }));
        // An echo request's hop limit is anything.
        assert!(matches!(
            parse_icmpv6(&mutated(&LINUX_PING6, 21, 1, false)),
            Ok(Icmpv6::EchoRequest(_))
        ));
    }

    #[test]
    fn header_refusals_in_order() {
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_NS, 13, 0x00, false)),
            Err(WireError::BadEthertype(0x8600))
        );
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_NS, 14, 0x40, false)),
            Err(WireError::BadIpVersion(4))
        );
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_NS, 19, 0x21, false)),
            Err(WireError::Truncated {
                needed: 87,
                got: 86
            })
        );
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_NS, 20, 17, false)),
            Err(WireError::NotIcmp(17))
        );
        for plen in 0..4u8 {
            assert_eq!(
                parse_icmpv6(&mutated(&LINUX_NS, 19, plen, false)),
                Err(WireError::Truncated {
                    needed: 58,
                    got: 54 + usize::from(plen)
                })
            );
        }
        // The checksum: a flipped target byte (0xef to 0xee) adds 0x0001 to the sum.
        assert_eq!(
            parse_icmpv6(&mutated(&LINUX_NS, 77, 0xee, false)),
            Err(WireError::BadIcmpChecksum {
                expected: 0x859b,
                got: 0x859a
            })
        );
        // It covers the addresses (the pseudo header) too.
        assert!(matches!(
            parse_icmpv6(&mutated(&LINUX_NS, 37, 0x57, false)),
            Err(WireError::BadIcmpChecksum { .. })
        ));
        // An echo request shorter than its 8-byte header.
        let mut short = LINUX_PING6[..60].to_vec();
        short[19] = 6;
        fix_checksum(&mut short);
        assert_eq!(
            parse_icmpv6(&short),
            Err(WireError::Truncated {
                needed: 62,
                got: 60
            })
        );
        // A checksum of 0xffff is the same as 0x0000 (one's complement): find a
        // sequence number that makes the checksum 0, then carry it as 0xffff.
        let mut f = LINUX_PING6.to_vec();
        let seq = (0..=u16::MAX)
            .find(|&s| {
                f[60..62].copy_from_slice(&s.to_be_bytes());
                fix_checksum(&mut f);
                f[56..58] == [0, 0]
            })
            .expect("some sequence number");
        assert!(parse_icmpv6(&f).is_ok());
        f[56..58].copy_from_slice(&[0xff, 0xff]);
        assert!(matches!(
            parse_icmpv6(&f),
            Ok(Icmpv6::EchoRequest(EchoRequest6 { seq: s, .. })) if s == seq
        ));
    }

    #[test]
    fn neighbour_discovery_refusals() {
        // The hop limit is not in the checksum: no fix needed.
        for hop in [0u8, 1, 64, 254] {
            assert_eq!(
                bad_ndp(parse_icmpv6(&mutated(&LINUX_NS, 21, hop, false))),
                "hop limit is not 255"
            );
            assert_eq!(
                bad_ndp(parse_icmpv6(&mutated(&LINUX_NA, 21, hop, false))),
                "hop limit is not 255"
            );
        }
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NS, 55, 1, true))),
            "code is not 0"
        );
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NA, 55, 9, true))),
            "code is not 0"
        );
        // Too short: 20 bytes of message (the target cut), checksum right.
        for len in 4..24u8 {
            let mut f = LINUX_NS[..54 + usize::from(len)].to_vec();
            f[19] = len;
            fix_checksum(&mut f);
            assert_eq!(
                bad_ndp(parse_icmpv6(&f)),
                "message is shorter than 24 bytes"
            );
        }
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NS, 62, 0xff, true))),
            "target address is multicast"
        );
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NA, 62, 0xff, true))),
            "target address is multicast"
        );
        // A zero-length option, first or after another: refused, not looped on.
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NS, 79, 0, true))),
            "option of length 0"
        );
        let mut two = LINUX_NA.to_vec();
        two.extend_from_slice(&[0x0e, 0x00, 0, 0, 0, 0, 0, 0]);
        two[19] = 40;
        fix_checksum(&mut two);
        assert_eq!(bad_ndp(parse_icmpv6(&two)), "option of length 0");
        // Options past the payload: a length of 2 (16 bytes) where 8 are left, and
        // half an option header.
        assert_eq!(
            bad_ndp(parse_icmpv6(&mutated(&LINUX_NS, 79, 2, true))),
            "option runs past the message"
        );
        let mut f = LINUX_NS.to_vec();
        f.push(0x01);
        f[19] = 33;
        fix_checksum(&mut f);
        assert_eq!(bad_ndp(parse_icmpv6(&f)), "option runs past the message");
        // A link-layer address option of another length: 16 bytes.
        let mut f = LINUX_NS.to_vec();
        f[79] = 2;
        f.extend_from_slice(&[0; 8]);
        f[19] = 40;
        fix_checksum(&mut f);
        assert_eq!(
            bad_ndp(parse_icmpv6(&f)),
            "link-layer address option is not 8 bytes"
        );
        // Duplicate address detection with a source link-layer address...
        let mut f = LINUX_NS.to_vec();
        f[22..38].fill(0);
        fix_checksum(&mut f);
        assert_eq!(
            bad_ndp(parse_icmpv6(&f)),
            "duplicate address detection carries a source link-layer address"
        );
        // ...or not to a solicited-node address (all nodes, or unicast).
        for dst in [ALL_NODES, OUR_IP] {
            let mut f = LINUX_DAD.to_vec();
            f[38..54].copy_from_slice(&dst);
            fix_checksum(&mut f);
            assert_eq!(
                bad_ndp(parse_icmpv6(&f)),
                "duplicate address detection is not to a solicited-node address"
            );
        }
        // A solicited advertisement to a multicast address.
        let mut f = LINUX_NA.to_vec();
        f[38..54].copy_from_slice(&ALL_NODES);
        fix_checksum(&mut f);
        assert_eq!(
            bad_ndp(parse_icmpv6(&f)),
            "solicited advertisement to a multicast address"
        );
        f[58] = na_flags::OVERRIDE;
        fix_checksum(&mut f);
        assert!(matches!(parse_icmpv6(&f), Ok(Icmpv6::Advert(_))));
        let e = WireError::BadNdp("hop limit is not 255");
        assert_eq!(
            e.to_string(),
            "bad neighbour discovery message: hop limit is not 255"
        );
    }

    #[test]
    fn options_are_walked_skipped_and_the_first_address_read() {
        // An unknown option (16 bytes) and a target link-layer address (not read in
        // a solicitation) before the source one; a second source one after it.
        let mut f = LINUX_NS[..78].to_vec();
        f.extend_from_slice(&[200, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        f.extend_from_slice(&[2, 1, 9, 9, 9, 9, 9, 9]);
        f.extend_from_slice(&LINUX_NS[78..]);
        f.extend_from_slice(&[1, 1, 7, 7, 7, 7, 7, 7]);
        f[19] = (f.len() - 54) as u8;
        fix_checksum(&mut f);
        assert_eq!(parse_icmpv6(&f), Ok(Icmpv6::Solicit(linux_ns())));
        // A target link-layer address option of another length in a solicitation is
        // not ours to check.
        let mut f = LINUX_NS.to_vec();
        f.extend_from_slice(&[2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        f[19] = (f.len() - 54) as u8;
        fix_checksum(&mut f);
        assert_eq!(parse_icmpv6(&f), Ok(Icmpv6::Solicit(linux_ns())));
        // No options at all: no address.
        let mut f = LINUX_NA[..78].to_vec();
        f[19] = 24;
        fix_checksum(&mut f);
        assert_eq!(
            parse_icmpv6(&f),
            Ok(Icmpv6::Advert(Advert {
                target_mac: None,
                ..linux_na()
            }))
        );
        // Reserved bits are ignored, the router flag read.
        let mut f = LINUX_NA.to_vec();
        f[58] = 0xff;
        f[59..62].fill(0xff);
        fix_checksum(&mut f);
        assert_eq!(
            parse_icmpv6(&f),
            Ok(Icmpv6::Advert(Advert {
                router: true,
                ..linux_na()
            }))
        );
        let f = mutated(&LINUX_NS, 59, 0x42, true);
        assert_eq!(parse_icmpv6(&f), Ok(Icmpv6::Solicit(linux_ns())));
    }

    #[test]
    fn every_single_bit_flip_after_the_flow_label_is_refused() {
        // Payload length, next header, hop limit (neighbour discovery), addresses
        // (pseudo header) and message (checksum): every bit is checked.
        for frame in [
            &LINUX_NS[..],
            &LINUX_NA[..],
            &LINUX_PROBE[..],
            &LINUX_DAD[..],
        ] {
            for byte in 18..frame.len() {
                for bit in 0..8 {
                    let mut f = frame.to_vec();
                    f[byte] ^= 1 << bit;
                    assert!(
                        parse_icmpv6(&f).is_err(),
                        "bit {bit} of byte {byte} flipped went unnoticed"
                    );
                }
            }
        }
        for byte in (18..21).chain(22..LINUX_PING6.len()) {
            for bit in 0..8 {
                let mut f = LINUX_PING6;
                f[byte] ^= 1 << bit;
                assert!(parse_icmpv6(&f).is_err(), "bit {bit} of byte {byte}");
            }
        }
    }

    #[test]
    fn emits_round_trip_and_verify() {
        let macs = [[0x02, 1, 2, 3, 4, 5], HOST_MAC];
        let ips = [
            OUR_IP,
            [
                0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42,
            ],
        ];
        for &mac in &macs {
            for &ip in &ips {
                for &target in &ips {
                    for to in [None, Some([0x0a, 0, 0, 0, 0, 9])] {
                        let mut buf = [0u8; 86];
                        let n = emit_solicit(mac, ip, target, to, &mut buf).unwrap();
                        assert_eq!(n, NDP_FRAME_LEN);
                        assert!(checksum_verifies(&buf));
                        let dst_ip = to.map_or(solicited_node(target), |_| target);
                        assert_eq!(
                            parse_icmpv6(&buf),
                            Ok(Icmpv6::Solicit(Solicit {
                                src_mac: mac,
                                dst_mac: to.unwrap_or(multicast_mac(dst_ip)),
                                src_ip: ip,
                                dst_ip,
                                target,
                                sender_mac: Some(mac),
                            }))
                        );
                    }
                }
                for to in [None, Some((HOST_MAC, HOST_IP))] {
                    let mut buf = [0u8; 86];
                    assert_eq!(emit_advert(mac, ip, to, &mut buf), Ok(NDP_FRAME_LEN));
                    assert!(checksum_verifies(&buf));
                    let (dst_mac, dst_ip) = to.unwrap_or((ALL_NODES_MAC, ALL_NODES));
                    assert_eq!(
                        parse_icmpv6(&buf),
                        Ok(Icmpv6::Advert(Advert {
                            src_mac: mac,
                            dst_mac,
                            src_ip: ip,
                            dst_ip,
                            target: ip,
                            router: false,
                            solicited: to.is_some(),
                            override_: true,
                            target_mac: Some(mac),
                        }))
                    );
                }
            }
        }
        let data: Vec<u8> = (0..1453u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 2, 3, 56, 57, 1452, 1453] {
            let req = EchoRequest6 {
                seq: len as u16,
                data: &data[..len],
                ..linux_ping6()
            };
            let mut buf = vec![0u8; 1600];
            let n = emit_echo_reply6(&req, OUR_MAC, OUR_IP, &mut buf).unwrap();
            assert_eq!(n, 62 + len);
            assert!(checksum_verifies(&buf[..n]), "length {len}");
            assert_eq!(
                parse_icmpv6(&buf[..n]),
                Ok(Icmpv6::Other { kind: 129, code: 0 })
            );
            // Made a request again (type 128, checksum fixed), it parses to the
            // request with the addresses swapped.
            buf[54] = 128;
            fix_checksum(&mut buf[..n]);
            assert_eq!(
                parse_icmpv6(&buf[..n]),
                Ok(Icmpv6::EchoRequest(EchoRequest6 {
                    src_mac: OUR_MAC,
                    dst_mac: HOST_MAC,
                    src_ip: OUR_IP,
                    dst_ip: HOST_IP,
                    ..req
                }))
            );
        }
    }

    #[test]
    fn emits_that_would_not_parse_are_refused() {
        let mut buf = [0x5au8; 100];
        assert_eq!(
            emit_solicit(OUR_MAC, OUR_IP, ALL_NODES, None, &mut buf),
            Err(WireError::BadNdp("target address is multicast"))
        );
        assert_eq!(
            emit_solicit(OUR_MAC, UNSPECIFIED, OUR_IP, Some(HOST_MAC), &mut buf),
            Err(WireError::BadNdp(
                "duplicate address detection is not to a solicited-node address"
            ))
        );
        assert_eq!(
            emit_advert(OUR_MAC, OUR_SNMA, None, &mut buf),
            Err(WireError::BadNdp("target address is multicast"))
        );
        assert_eq!(
            emit_advert(OUR_MAC, OUR_IP, Some((ALL_NODES_MAC, ALL_NODES)), &mut buf),
            Err(WireError::BadNdp(
                "solicited advertisement to a multicast address"
            ))
        );
        assert!(buf.iter().all(|&b| b == 0x5a), "written when refused");
    }

    #[test]
    fn short_buffers_are_refused_not_panics() {
        for frame in [&LINUX_NS[..], &LINUX_PING6[..], &LINUX_DAD[..]] {
            for len in 0..frame.len() {
                let e = parse_icmpv6(&frame[..len]).unwrap_err();
                assert!(matches!(e, WireError::Truncated { .. }), "{len}: {e:?}");
            }
        }
        assert_eq!(icmpv6_checksum(&LINUX_NS[..53]), None);
        assert_eq!(icmpv6_checksum(&LINUX_NS[..85]), None);
        for len in 0..86 {
            let mut out = vec![0x5au8; len];
            assert_eq!(
                emit_solicit(HOST_MAC, HOST_IP, OUR_IP, None, &mut out),
                Err(WireError::BufferTooSmall {
                    needed: 86,
                    got: len
                })
            );
            assert_eq!(
                emit_advert(OUR_MAC, OUR_IP, None, &mut out),
                Err(WireError::BufferTooSmall {
                    needed: 86,
                    got: len
                })
            );
            if len < 78 {
                assert_eq!(
                    emit_solicit(HOST_MAC, UNSPECIFIED, OUR_IP, None, &mut out),
                    Err(WireError::BufferTooSmall {
                        needed: 78,
                        got: len
                    })
                );
            }
            assert!(
                out.iter().all(|&b| b == 0x5a),
                "written into a short buffer"
            );
        }
        let req = linux_ping6();
        for len in 0..118 {
            let mut out = vec![0x5au8; len];
            assert_eq!(
                emit_echo_reply6(&req, OUR_MAC, OUR_IP, &mut out),
                Err(WireError::BufferTooSmall {
                    needed: 118,
                    got: len
                })
            );
            assert!(out.iter().all(|&b| b == 0x5a));
        }
        let empty = EchoRequest6 { data: &[], ..req };
        assert_eq!(
            emit_echo_reply6(&empty, OUR_MAC, OUR_IP, &mut [0u8; 61]),
            Err(WireError::BufferTooSmall {
                needed: 62,
                got: 61
            })
        );
    }

    #[test]
    fn echo_data_longer_than_an_ipv6_payload_is_refused() {
        let big = vec![0x11u8; ECHO6_DATA_MAX + 1];
        let mut buf = vec![0u8; ECHO6_DATA_MAX + 80];
        let req = EchoRequest6 {
            data: &big[..],
            ..linux_ping6()
        };
        assert_eq!(
            emit_echo_reply6(&req, OUR_MAC, OUR_IP, &mut buf),
            Err(WireError::EchoTooLong(ECHO6_DATA_MAX + 1))
        );
        let req = EchoRequest6 {
            data: &big[..ECHO6_DATA_MAX],
            ..req
        };
        let n = emit_echo_reply6(&req, OUR_MAC, OUR_IP, &mut buf).unwrap();
        assert_eq!(n, 54 + 65535);
        assert!(checksum_verifies(&buf[..n]));
        assert_eq!(
            parse_icmpv6(&buf[..n]),
            Ok(Icmpv6::Other { kind: 129, code: 0 })
        );
    }
}
