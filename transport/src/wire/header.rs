//! The transport header: 32 bytes after the UDP header (layout in the [module
//! doc](super)).
//!
//! ```text
//!  0: version | 1: flags | 2..4: cell count
//!  4..8   destination connection      16..20 sequence number     24..26 credits
//!  8..16  connection key              20..24 acknowledgement     26..28 acknowledged (echo)
//!                                                                28..32 source connection
//! ```
//!
//! The acknowledged echo (version 6) is the low 16 bits of how far the sender of the
//! frame has been acknowledged (its send base): an "ack of ack" that tells the receiver
//! of the frame which of its acknowledgements arrived, so that it can stop repeating the
//! NAKs of messages it refused (a refusal must never be lost behind a later cumulative
//! acknowledgement).

use super::{
    check_len, get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, WireError, HEADER_LEN, VERSION,
};

mod field {
    use super::super::Field;

    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const CELLS: Field = 2..4;
    pub const DST_CONN: Field = 4..8;
    pub const KEY: Field = 8..16;
    pub const SEQ: Field = 16..20;
    pub const ACK: Field = 20..24;
    pub const CREDITS: Field = 24..26;
    pub const ACKED: Field = 26..28;
    pub const SRC_CONN: Field = 28..32;
}

/// Flags in byte 1 of the transport header.
pub mod hflags {
    /// The acknowledgement field is valid. A frame with no cells and this flag is an
    /// ack-only frame.
    pub const ACK: u8 = 0x01;
    /// Connection-management frame (destination connection 0).
    pub const CM: u8 = 0x02;
    /// The receiver owes an acknowledgement even if the frame carries no message: a
    /// liveness probe of an idle connection (keepalive).
    pub const ACK_REQ: u8 = 0x04;
    /// Another section (a transport header and its cells, usually of another
    /// connection to the same peer) follows this one's cells in the frame (version 7).
    pub const MORE: u8 = 0x08;
    /// The section's cells are sealed (version 11): encrypted, and followed by one
    /// seal cell (packet number, key generation, tag; `crate::secure`) that the cell
    /// count does not include.
    pub const SEALED: u8 = 0x10;
    /// ECN echo (version 14, ignored by receivers that predate it): the last data
    /// frame of this connection the sender of this acknowledgement received was
    /// marked CE (DCTCP's echo of the receiver's CE state).
    pub const ECE: u8 = 0x20;
}

/// A view of a transport header (the buffer may extend past its 32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TransportPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`HEADER_LEN`]. Use [`TransportPacket::new_checked`] for input from the wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TransportPacket { buffer }
    }

    /// Wraps a buffer that holds at least [`HEADER_LEN`] bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), HEADER_LEN)?;
        Ok(TransportPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Protocol version.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// Header flags ([`hflags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Number of cells in the frame.
    #[inline]
    pub fn cell_count(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CELLS)
    }

    /// Destination connection number (0: connection management).
    #[inline]
    pub fn dst_conn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::DST_CONN)
    }

    /// Connection key.
    #[inline]
    pub fn key(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::KEY)
    }

    /// Sequence number of the first message in the frame.
    #[inline]
    pub fn seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::SEQ)
    }

    /// Cumulative acknowledgement: the next sequence number the sender expects.
    #[inline]
    pub fn ack(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ACK)
    }

    /// Credits granted to the receiver of this frame.
    #[inline]
    pub fn credits(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CREDITS)
    }

    /// Low 16 bits of the sender's send base: everything it sent before it is
    /// acknowledged (the "ack of ack").
    #[inline]
    pub fn acked(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ACKED)
    }

    /// Source connection number.
    #[inline]
    pub fn src_conn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::SRC_CONN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TransportPacket<T> {
    /// Sets the protocol version.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }

    /// Sets the header flags.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the cell count.
    #[inline]
    pub fn set_cell_count(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CELLS, v);
    }

    /// Sets the destination connection number.
    #[inline]
    pub fn set_dst_conn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::DST_CONN, v);
    }

    /// Sets the connection key.
    #[inline]
    pub fn set_key(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::KEY, v);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::SEQ, v);
    }

    /// Sets the acknowledgement.
    #[inline]
    pub fn set_ack(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ACK, v);
    }

    /// Sets the credits.
    #[inline]
    pub fn set_credits(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CREDITS, v);
    }

    /// Sets the acknowledged echo.
    #[inline]
    pub fn set_acked(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::ACKED, v);
    }

    /// Sets the source connection number.
    #[inline]
    pub fn set_src_conn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::SRC_CONN, v);
    }
}

/// A transport header, decoded (the version is implied: [`VERSION`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TransportRepr {
    /// Header flags ([`hflags`]).
    pub flags: u8,
    /// Number of cells in this section of the frame.
    pub cells: u16,
    /// Destination connection number (0: connection management).
    pub dst_conn: u32,
    /// Connection key.
    pub key: u64,
    /// Sequence number of the first message in the frame.
    pub seq: u32,
    /// Cumulative acknowledgement (valid when `flags` has [`hflags::ACK`]).
    pub ack: u32,
    /// Credits granted to the receiver of this frame, in units of
    /// [`super::CREDIT_UNIT`] bytes.
    pub credits: u16,
    /// Low 16 bits of the sender's send base (see the module doc).
    pub acked: u16,
    /// Source connection number.
    pub src_conn: u32,
}

impl TransportRepr {
    /// Decodes a header; fails with [`WireError::BadVersion`] unless the version is
    /// [`VERSION`].
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &TransportPacket<T>) -> Result<Self, WireError> {
        check_len(packet.buffer.as_ref(), HEADER_LEN)?;
        if packet.version() != VERSION {
            return Err(WireError::BadVersion(packet.version()));
        }
        Ok(TransportRepr {
            flags: packet.flags(),
            cells: packet.cell_count(),
            dst_conn: packet.dst_conn(),
            key: packet.key(),
            seq: packet.seq(),
            ack: packet.ack(),
            credits: packet.credits(),
            acked: packet.acked(),
            src_conn: packet.src_conn(),
        })
    }

    /// Writes the header, with version [`VERSION`]. The
    /// packet must hold [`HEADER_LEN`] bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut TransportPacket<T>) {
        packet.set_version(VERSION);
        packet.set_flags(self.flags);
        packet.set_cell_count(self.cells);
        packet.set_dst_conn(self.dst_conn);
        packet.set_key(self.key);
        packet.set_seq(self.seq);
        packet.set_ack(self.ack);
        packet.set_credits(self.credits);
        packet.set_acked(self.acked);
        packet.set_src_conn(self.src_conn);
    }

    /// Whether the acknowledgement field is valid.
    #[inline]
    pub const fn has_ack(&self) -> bool {
        self.flags & hflags::ACK != 0
    }

    /// Whether this is an ack-only frame: no cells, acknowledgement valid.
    #[inline]
    pub const fn is_ack_only(&self) -> bool {
        self.cells == 0 && self.has_ack()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const BYTES: [u8; 32] = [
        0x10, 0x01, 0x00, 0x03,                         // version 16, ACK, 3 cells
        0x00, 0x00, 0x01, 0x02,                         // dst conn 258
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, // key
        0x00, 0x00, 0x00, 0x2a,                         // seq 42
        0xff, 0xff, 0xff, 0xfe,                         // ack 0xfffffffe
        0x00, 0x40, 0xbe, 0xef,                         // credits 64, acked 0xbeef
        0x80, 0x00, 0x00, 0x07,                         // src conn
    ];

    fn repr() -> TransportRepr {
        TransportRepr {
            flags: hflags::ACK,
            cells: 3,
            dst_conn: 258,
            key: 0x0123_4567_89ab_cdef,
            seq: 42,
            ack: 0xffff_fffe,
            credits: 64,
            acked: 0xbeef,
            src_conn: 0x8000_0007,
        }
    }

    #[test]
    fn hand_built_header_parses_and_emits_the_same_bytes() {
        let packet = TransportPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(TransportRepr::parse(&packet), Ok(repr()));
        let mut out = [0xffu8; 32];
        repr().emit(&mut TransportPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn acked_echo_is_bytes_26_and_27_big_endian() {
        let mut bytes = BYTES;
        bytes[26] = 0xde;
        bytes[27] = 0xad;
        let packet = TransportPacket::new_unchecked(&bytes[..]);
        assert_eq!(packet.acked(), 0xdead);
        let r = TransportRepr::parse(&packet).unwrap();
        assert_eq!(r.acked, 0xdead);
        assert_eq!(r.ack, 0xffff_fffe, "the neighbours are untouched");
        assert_eq!(r.credits, 64);
    }

    #[test]
    fn other_version_is_rejected_with_its_number() {
        let mut bytes = BYTES;
        bytes[0] = 1;
        assert_eq!(
            TransportRepr::parse(&TransportPacket::new_unchecked(&bytes[..])),
            Err(WireError::BadVersion(1))
        );
    }

    #[test]
    fn short_header_is_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                TransportPacket::new_checked(&BYTES[..len]).err(),
                Some(WireError::Truncated {
                    needed: 32,
                    got: len
                })
            );
            assert!(TransportRepr::parse(&TransportPacket::new_unchecked(&BYTES[..len])).is_err());
        }
    }

    #[test]
    fn ack_only_means_no_cells_and_ack_valid() {
        let mut r = repr();
        assert!(!r.is_ack_only());
        r.cells = 0;
        assert!(r.is_ack_only());
        r.flags = hflags::CM;
        assert!(!r.is_ack_only());
    }
}
