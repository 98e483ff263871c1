//! Frame and cell formats (docs/design.md §4): typed views over byte buffers with
//! `parse`/`emit`, and the checksums that guard them.
//!
//! This module holds no state, never allocates, and never panics on input from the wire:
//! every view is built with a length check (`new_checked`) and every decoder returns a
//! [`WireError`] naming the field and value that was wrong. Each format is two types, in
//! the style of smoltcp: a zero-copy view `XxxPacket<T: AsRef<[u8]>>` with one accessor
//! per field (offsets written once, in a private `field` module), and a plain `XxxRepr`
//! with `parse` and `emit`. All multi-byte fields are big endian (network byte order).
//!
//! # A frame
//!
//! ```text
//!  offset  size
//!       0    14  Ethernet II: dst MAC, src MAC, ethertype 0x0800          } underlay.rs
//!      14    20  IPv4: no options, DF, TTL 64, proto 17, header checksum   } (UNDERLAY_LEN
//!      34     8  UDP: src port (RSS), dst port 18515, length, checksum 0   }  = 42)
//!      42    32  transport header                                          header.rs
//!      74  48*N  N cells                                                   cell.rs
//!   74+48N    4  CRC32C over transport header + cells, big endian          frame.rs
//! ```
//!
//! A header with the `MORE` flag is followed, after its cells, by another transport
//! header and its cells (a **section**, usually of another connection to the same
//! peer), all before the one CRC32C: the layout of [`frame`].
//!
//! `FRAME_OVERHEAD` = 42 + 32 + 4 = 78 bytes, so a frame of N cells is `78 + 48*N` bytes
//! ([`frame_len`]); Ethernet padding after the IPv4 total length is ignored. The UDP
//! checksum is sent as zero because the CRC32C covers everything above UDP; a received
//! non-zero UDP checksum is verified (RFC 768).
//!
//! # Transport header (32 bytes)
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+---------------+-------------------------------+
//! |    version    |     flags     |          cell count           |  0
//! +---------------+---------------+-------------------------------+
//! |                    destination connection                     |  4
//! +---------------------------------------------------------------+
//! |                        connection key                         |  8
//! |                           (64 bit)                            | 12
//! +---------------------------------------------------------------+
//! |        sequence number (of the first message in the frame)    | 16
//! +---------------------------------------------------------------+
//! |   acknowledgement (next sequence number expected; flag ACK)   | 20
//! +-------------------------------+-------------------------------+
//! |            credits            |     reserved (zero on emit)   | 24
//! +-------------------------------+-------------------------------+
//! |                      source connection                        | 28
//! +---------------------------------------------------------------+
//! ```
//!
//! Header flags are in [`hflags`]: `ACK` (the acknowledgement field is valid), `CM`
//! (connection management, destination connection 0), `ACK_REQ` (a liveness probe) and
//! `MORE` (another section follows). A frame with no cells and `ACK`
//! set is an ack-only frame. Each message in a frame takes the next sequence number.
//!
//! # Cell (48 bytes) = control part (16) + data block (32)
//!
//! ```text
//!  0               1               2               3
//! +---------------+---------------+---------------+---------------+
//! |    opcode     |  word mask    |     flags     |  check byte   |  0
//! +---------------+---------------+---------------+---------------+
//! |                            operand                            |  4
//! +---------------------------------------------------------------+
//! |      ra       |      rb       |      rc       |      rd       |  8
//! +---------------------------------------------------------------+
//! |          length (payload bytes after the control part)        | 12
//! +---------------------------------------------------------------+
//! |                       data block (32 bytes)                   | 16
//! +---------------------------------------------------------------+
//! ```
//!
//! The check byte is the CRC32C of the 16 control bytes with the check byte taken as
//! zero, folded to 8 bits by XOR of its four bytes ([`check8`]), so a decoder can trust
//! the control fields before the frame's CRC32C is known.
//!
//! A **message** is a control part followed by `length` payload bytes: they fill the
//! control cell's data block, then as many pure data cells (48 bytes of payload, no
//! control part) as needed ([`cells_for`]). The payload is therefore contiguous in the
//! frame. Padding after the payload up to the end of the message's last cell is zero
//! on emit and ignored on parse.
//!
//! Control flags ([`flags`]): `LAST` (last message of a work request: one arrival),
//! `COMPOUND` (the payload starts with the 8-byte compound descriptor of
//! [`compound`]: two register operations, a conditional and their order), `REPLY` (the
//! reply to a read or atomic: `index` names the request's sequence number), address
//! mode in bits 3..4 ([`cell::AddrMode`]: direct, indirect, indexed, indirect
//! post-increment) and `REG_TARGET` (an atomic on register `ra`, not memory),
//! `COMPOUND_REPEAT` and `SEGMENT` (a later segment of a plain direct write: `index` is
//! its segment number, so the receiver may place it on arrival ahead of a gap). The index
//! field names four registers, one byte each: `ra` (address generation), `rb` and `rc`
//! (destinations of register operations 1 and 2), `rd` (conditional); a name below 128
//! is in the connection's register window, 128 and up a global register of the
//! endpoint. Operations and payload layouts: [`op`] and `crate::message`.
//!
//! Any change to this layout bumps [`VERSION`] (2: compound operations, reads,
//! atomics and replies; 3: selective acknowledgement cells, [`op::SACK`], the
//! `ACK_REQ` header flag, the cumulative acknowledgement in disconnect requests; 4:
//! instruction pointers, [`op::INVOKE`], and payload tokens, [`op::TOKEN_WRITE`]; 5:
//! later segments of a write in any address mode, placed relative to the address its
//! first segment generated, [`flags::SEGMENT`] with mode indexed; 6: the acknowledged
//! echo in the transport header, bytes 26..28, which makes NAKs of refused messages
//! reliable; 7: several sections in one frame, [`hflags::MORE`]; 8: a NAK's index
//! carries the receiver's refusal reason in its second byte, `crate::status::Nak`;
//! 9: private data in connect requests and replies; 10: connect cookies and the
//! `CHALLENGE` message; 11: sealed sections, [`hflags::SEALED`] and the seal cell of
//! `crate::secure`, public keys in connect requests and replies; 12: a frame whose
//! every section is sealed ends with a zero trailer, not its CRC32C; 13: the Noise IK
//! handshake in connect requests and replies, the listener's identity key in the
//! challenge, authenticated REJECT and DISCONNECT messages, `crate::handshake`; 14:
//! read tokens, [`op::TOKEN_READ`], and the ECN echo, [`hflags::ECE`]; 15: credits
//! count bytes in units of [`CREDIT_UNIT`], not frames, so that a receiver can grant
//! less than a frame to each of many senders; 16: the receiver's hold, [`op::HOLD`], in
//! acknowledgement sections).
//!
//! # Neighbour traffic
//!
//! Beside deposit frames a port receives ARP and ICMP, which a node answers itself so
//! that peers (and `ping`) can reach it without a kernel stack: [`arp`] (requests,
//! replies and gratuitous announcements of RFC 826 over Ethernet/IPv4), [`icmp`] (echo
//! requests in, echo replies out, RFC 792) and [`classify`], which sorts a received
//! frame by its ethertype (and IPv4 protocol) before any of the decoders looks at it.
//! Their IPv6 counterpart is [`ndp`]: neighbour solicitations and advertisements of
//! RFC 4861 (IPv6's ARP) and ICMPv6 echo, over the IPv6 header of [`ipv6`].
//! They share the rules above: views with length checks, `parse`/`emit`, no panics.

use core::ops::Range;

pub mod arp;
pub mod cell;
mod checksum;
pub mod cm;
pub mod compound;
mod crc;
pub mod frame;
pub mod header;
pub mod icmp;
pub mod ipv6;
pub mod kind;
pub mod ndp;
pub mod underlay;
pub mod vlan;

pub use crc::{crc32c, crc32c_append, crc32c_words};

pub use cell::{cells_for, check8, flags, op, ControlPacket, ControlRepr};
pub use compound::{
    CompoundError, CompoundPacket, CompoundRepr, Cond, CondRepr, OpSource, Order, RegOp, RegOpRepr,
    COMPOUND_LEN,
};
pub use frame::{
    frame_len, max_cells, trailer, write_trailer, FrameView, FrameWriter, Message, Messages,
};
pub use header::{hflags, TransportPacket, TransportRepr};
pub use kind::{classify, FrameKind};
pub use underlay::{UnderlayPacket, UnderlayRepr};

/// Transport protocol version carried in byte 0 of the transport header.
pub const VERSION: u8 = 16;
/// Least hold ([`op::HOLD`]) a receiver reports: a shorter one is noise beside any
/// delay target (and costs the acknowledgement a cell for nothing).
pub const HOLD_MIN_NS: u32 = 1_000;
/// Bytes per credit (the transport header's `credits`): a receiver grants the
/// receiver of its frame `credits × CREDIT_UNIT` bytes of bulk data unacknowledged on
/// the connection (at most 4 MiB; 0: no grant said).
pub const CREDIT_UNIT: u64 = 64;
/// UDP destination port of every deposit frame.
pub const UDP_PORT: u16 = 18515;
/// Ethernet II (14) + IPv4 without options (20) + UDP (8).
pub const UNDERLAY_LEN: usize = 42;
/// Length of the Ethernet II header: where the IP header starts.
pub const ETH_HEADER_LEN: usize = 14;
/// Length of the transport header.
pub const HEADER_LEN: usize = 32;
/// Length of the control part of a cell.
pub const CONTROL_LEN: usize = 16;
/// Length of the data block of a control cell.
pub const BLOCK_LEN: usize = 32;
/// Length of a cell (control part + data block, or a pure data cell).
pub const CELL_LEN: usize = CONTROL_LEN + BLOCK_LEN;
/// Length of the CRC32C trailer.
pub const CRC_LEN: usize = 4;
/// Bytes of a frame that are not cells: underlay + transport header + CRC32C.
pub const FRAME_OVERHEAD: usize = UNDERLAY_LEN + HEADER_LEN + CRC_LEN;
/// Most cells one frame can carry: the IPv4 total length is 16 bits.
pub const MAX_CELLS: usize =
    (u16::MAX as usize - (UNDERLAY_LEN - 14) - HEADER_LEN - CRC_LEN) / CELL_LEN;

/// What was wrong with a buffer given to a decoder (or to the frame writer), and with
/// which value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer (or the part of it a length field points at) is too short.
    #[error("truncated: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A buffer handed to the frame writer cannot hold even an empty frame.
    #[error("buffer of {got} bytes is too small for a frame (needs at least {needed})")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The Ethernet type is not IPv4.
    #[error("ethertype {0:#06x} is not IPv4 (0x0800)")]
    BadEthertype(u16),
    /// The IP version nibble is not 4.
    #[error("IP version {0} is not 4")]
    BadIpVersion(u8),
    /// The IPv4 header length is not 5 words (options are not supported).
    #[error("IPv4 header length {0} words is not 5 (options are not supported)")]
    BadIpHeaderLen(u8),
    /// The IPv4 protocol is not UDP.
    #[error("IP protocol {0} is not UDP (17)")]
    BadIpProtocol(u8),
    /// The IPv4 packet is a fragment (more-fragments set or non-zero offset).
    #[error("IPv4 packet is a fragment (flags and offset {0:#06x})")]
    IpFragment(u16),
    /// The IPv4 header checksum does not match the header.
    #[error("IPv4 header checksum {got:#06x}, expected {expected:#06x}")]
    BadIpChecksum {
        /// Checksum computed over the header.
        expected: u16,
        /// Checksum in the header.
        got: u16,
    },
    /// The IPv4 total length is smaller than the headers it must hold.
    #[error("IPv4 total length {total} is below the minimum {min}")]
    BadIpLength {
        /// Total length in the IPv4 header.
        total: u16,
        /// Smallest acceptable total length.
        min: u16,
    },
    /// The UDP length disagrees with the IPv4 total length.
    #[error("UDP length {udp} does not match the IPv4 total length (expected {expected})")]
    BadUdpLength {
        /// Length in the UDP header.
        udp: u16,
        /// IPv4 total length minus the IPv4 header.
        expected: u16,
    },
    /// The UDP destination port is not [`UDP_PORT`].
    #[error("UDP destination port {0} is not {port}", port = UDP_PORT)]
    BadUdpPort(u16),
    /// A non-zero UDP checksum does not match the datagram.
    #[error("UDP checksum {got:#06x}, expected {expected:#06x}")]
    BadUdpChecksum {
        /// Checksum computed over the datagram.
        expected: u16,
        /// Checksum in the UDP header.
        got: u16,
    },
    /// The transport version is not [`VERSION`].
    #[error("transport version {0} is not {version}", version = VERSION)]
    BadVersion(u8),
    /// The header's cell count disagrees with the bytes between header and CRC.
    #[error("cell count {cells} does not match {bytes} bytes of cells")]
    BadCellCount {
        /// Cell count in the transport header.
        cells: u16,
        /// Bytes between the transport header and the CRC32C.
        bytes: usize,
    },
    /// The CRC32C over transport header and cells does not match the trailer.
    #[error("CRC32C {got:#010x}, expected {expected:#010x}")]
    BadCrc {
        /// CRC32C computed over header and cells.
        expected: u32,
        /// CRC32C in the trailer.
        got: u32,
    },
    /// A control part's check byte does not match its fields.
    #[error("control check byte {got:#04x}, expected {expected:#04x}")]
    BadCheck {
        /// Check byte computed over the control fields.
        expected: u8,
        /// Check byte in the control part.
        got: u8,
    },
    /// A payload handed to the frame writer is not `control.length` bytes long.
    #[error("payload of {payload} bytes does not match control length {length}")]
    BadLength {
        /// `length` in the control part.
        length: u32,
        /// Bytes of payload given.
        payload: usize,
    },
    /// A message does not fit in the cells left in the frame.
    #[error("message needs {needed} cells, only {room} left in the frame")]
    NoRoom {
        /// Cells the message needs.
        needed: usize,
        /// Cells still free.
        room: usize,
    },
    /// An ARP frame ([`arp`]) that is not an Ethernet/IPv4 request or reply from a
    /// unicast sender; the reason names the field that was wrong and what it must be.
    #[error("bad ARP frame: {0}")]
    BadArp(&'static str),
    /// The IPv4 protocol of an ICMP frame ([`icmp`]) is not ICMP, or the next header
    /// of an ICMPv6 one ([`ndp`]) not ICMPv6.
    #[error("IP protocol {0} is not ICMP (1 over IPv4, 58 over IPv6)")]
    NotIcmp(u8),
    /// The ICMP checksum does not match the ICMP message.
    #[error("ICMP checksum {got:#06x}, expected {expected:#06x}")]
    BadIcmpChecksum {
        /// Checksum computed over the ICMP message.
        expected: u16,
        /// Checksum in the ICMP header.
        got: u16,
    },
    /// Echo data handed to [`icmp::emit_echo_reply`] (or [`ndp::emit_echo_reply6`]) is
    /// too long for one IP packet.
    #[error("echo data of {0} bytes does not fit one IP packet (at most {max} over IPv4, {max6} over IPv6)", max = icmp::ECHO_DATA_MAX, max6 = ndp::ECHO6_DATA_MAX)]
    EchoTooLong(usize),
    /// A neighbour solicitation or advertisement ([`ndp`]) that fails a validity check
    /// of RFC 4861 §7.1 (hop limit, code, length, target, options, duplicate address
    /// detection, multicast advertisements), or that an `ndp` emit would write so;
    /// the reason names the check.
    #[error("bad neighbour discovery message: {0}")]
    BadNdp(&'static str),
}

/// A named byte range inside a format.
pub(crate) type Field = Range<usize>;

/// Fixed-size copy of `data[f]`; callers pass ranges of length `N` inside a buffer whose
/// length their view has checked.
#[inline]
pub(crate) fn array<const N: usize>(data: &[u8], f: Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&data[f]);
    out
}

#[inline]
fn get_u16(data: &[u8], f: Field) -> u16 {
    u16::from_be_bytes(array(data, f))
}

#[inline]
fn get_u32(data: &[u8], f: Field) -> u32 {
    u32::from_be_bytes(array(data, f))
}

#[inline]
fn get_u64(data: &[u8], f: Field) -> u64 {
    u64::from_be_bytes(array(data, f))
}

#[inline]
fn set_u16(data: &mut [u8], f: Field, v: u16) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
fn set_u32(data: &mut [u8], f: Field, v: u32) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
fn set_u64(data: &mut [u8], f: Field, v: u64) {
    data[f].copy_from_slice(&v.to_be_bytes());
}

/// Checks that `data` holds at least `needed` bytes.
#[inline]
fn check_len(data: &[u8], needed: usize) -> Result<(), WireError> {
    if data.len() < needed {
        Err(WireError::Truncated {
            needed,
            got: data.len(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_agree_with_the_layout() {
        assert_eq!(UNDERLAY_LEN, 42);
        assert_eq!(CELL_LEN, 48);
        assert_eq!(FRAME_OVERHEAD, 78);
        assert_eq!(MAX_CELLS, 1363);
        // The largest frame's IPv4 total length still fits in 16 bits.
        assert!(frame_len(MAX_CELLS) - 14 <= u16::MAX as usize);
        assert!(frame_len(MAX_CELLS + 1) - 14 > u16::MAX as usize);
    }

    #[test]
    fn errors_say_which_value_was_wrong() {
        let e = WireError::BadUdpPort(80);
        assert_eq!(e.to_string(), "UDP destination port 80 is not 18515");
        let e = WireError::BadVersion(6);
        assert_eq!(e.to_string(), "transport version 6 is not 16");
    }
}
