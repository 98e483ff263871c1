//! Cells: a 16-byte control part followed by a 32-byte data block; a message is a
//! control part and `length` payload bytes spread over its data block and pure data
//! cells (layout in the [module doc](super)).
//!
//! ```text
//!  0: opcode | 1: word mask | 2: flags | 3: check (CRC32C of the 16 bytes with this one zero, XOR-folded to 8 bits)
//!  4..8    operand
//!  8..12   index: register names ra | rb | rc | rd, one byte each
//! 12..16   length (payload bytes after the control part)
//! 16..48   data block
//! ```
//!
//! The check byte lets a decoder trust the control fields before the frame's CRC32C has
//! been verified; it never vouches for the payload.
//!
//! The flags byte ([`flags`]):
//!
//! ```text
//!  bit 0  LAST        last message of a work request
//!  bit 1  COMPOUND    payload starts with an 8-byte compound descriptor (`compound`)
//!  bit 2  REPLY       a read or atomic reply (the worker's, never the operation logic's)
//!  3..4   address mode: 0 direct, 1 indirect, 2 indexed, 3 indirect post-increment
//!  bit 5  REG_TARGET  the atomic acts on register ra instead of memory (INVOKE:
//!                     INVOKE_REGS, the payload starts with register names)
//!  6..7   reserved (zero on emit)
//! ```

use super::{check_len, get_u32, set_u32, WireError, BLOCK_LEN, CELL_LEN, CONTROL_LEN};

mod field {
    use super::super::Field;

    pub const OPCODE: usize = 0;
    pub const MASK: usize = 1;
    pub const FLAGS: usize = 2;
    pub const CHECK: usize = 3;
    pub const OPERAND: Field = 4..8;
    pub const INDEX: Field = 8..12;
    pub const LENGTH: Field = 12..16;
}

/// Operation codes carried in byte 0 of the control part.
pub mod op {
    /// No operation (padding).
    pub const NOP: u8 = 0x00;
    /// Write one 32-byte block under the 8-bit word mask: word i (4 bytes at
    /// `operand + 4*i`) is written when mask bit i is set.
    pub const WRITE_MASKED: u8 = 0x01;
    /// Write the payload (after the compound descriptor, if any) at the effective
    /// address (multi-cell when the payload exceeds 32 bytes).
    pub const WRITE: u8 = 0x02;
    /// Read: the payload (after the descriptor) is the 16-byte control part of the reply
    /// write the receiver sends back; its `length` is the number of bytes to read at the
    /// effective address.
    pub const READ: u8 = 0x03;
    /// Fetch-and-add on the 8-byte endpoint word at the effective address (or on
    /// register `ra` with [`flags::REG_TARGET`](super::flags::REG_TARGET)); the payload
    /// (after the descriptor) is the add value, u64 big endian. The old value is
    /// returned.
    pub const FETCH_ADD: u8 = 0x04;
    /// Compare-and-swap on the 8-byte endpoint word (or register `ra`); the payload
    /// (after the descriptor) is the compare value then the swap value, u64 big endian
    /// each. The old value is returned.
    pub const CMP_SWAP: u8 = 0x05;
    /// Register operations and/or a conditional only: no memory access.
    pub const REG_OP: u8 = 0x06;
    /// Software exception: always an event at the receiver (a sender-forced interrupt).
    pub const EXCEPTION: u8 = 0x07;
    /// Instruction pointer: `index` is the pointer (bit 31: a global instruction), not
    /// register names; with [`INVOKE_REGS`](super::flags::INVOKE_REGS) the payload
    /// starts with the message's register names (8 bytes, `oplogic::sequence`). The
    /// operand, mask, register names and data are the message's operands, which the
    /// instruction takes or ignores.
    pub const INVOKE: u8 = 0x08;
    /// Deposit with a payload token: the payload starts with the token (u64 big
    /// endian); the rest is stored in the buffer the token names, once.
    pub const TOKEN_WRITE: u8 = 0x09;
    /// Read with a read token (wire version 14): the payload is exactly 32 bytes, the
    /// control cell's data block — the token (u64 big endian), the offset in the
    /// token's range (u64 big endian), then the 16-byte control part of the reply
    /// write, as [`READ`] carries it (its `length`: the bytes to read). Flags `LAST`
    /// only; operand, index and mask are not used (zero on emit). Answered exactly as a
    /// `READ` of those bytes of the token's endpoint.
    ///
    /// ```text
    ///  0..8    token: index << 32 | key
    ///  8..16   offset in the token's range
    /// 16..32   control part of the reply write (opcode WRITE, flags REPLY, length)
    /// ```
    pub const TOKEN_READ: u8 = 0x0A;
    /// Connection management on connection 0 (see `cm`): connect request.
    pub const CM_CONNECT_REQ: u8 = 0xE0;
    /// Connection management: connect reply (accept).
    pub const CM_CONNECT_REP: u8 = 0xE1;
    /// Connection management: reject of a connect request.
    pub const CM_REJECT: u8 = 0xE2;
    /// Connection management: disconnect request.
    pub const CM_DISCONNECT_REQ: u8 = 0xE3;
    /// Connection management: disconnect reply.
    pub const CM_DISCONNECT_REP: u8 = 0xE4;
    /// Connection management: a listener's challenge to a connect request (a cookie
    /// the requester must echo, proving it receives at the address it claims).
    pub const CM_CHALLENGE: u8 = 0xE5;
    /// Negative acknowledgement in an ACK frame: `operand` = message sequence number,
    /// `index` = remote status code (byte 0) and the receiver's refusal reason (byte 1,
    /// `DropReason` as its counter index; 0xff: none given), `crate::status::Nak`.
    pub const NAK: u8 = 0xF0;
    /// Selective acknowledgement in an ACK frame: `operand` = word number w, `index` =
    /// 32 bits: bit i set when message `ack + 1 + 32w + i` arrived (ack = the frame
    /// header's cumulative acknowledgement).
    pub const SACK: u8 = 0xF1;
    /// The receiver's hold in an ACK section (wire version 16): `operand` = how long,
    /// in nanoseconds (saturating at `u32::MAX`), the acknowledgement was held after
    /// the frames it newly acknowledges were taken from the wire (a receive burst
    /// delivered, the node's own data sent, before the acknowledgements left). Sent
    /// only when at least [`HOLD_MIN_NS`](super::super::HOLD_MIN_NS); the sender takes
    /// it off its round-trip samples before congestion control reads them as queueing.
    pub const HOLD: u8 = 0xF2;
}

/// Flags in byte 2 of the control part.
pub mod flags {
    /// Last message (segment) of a work request: counts as one arrival.
    pub const LAST: u8 = 0x01;
    /// The payload starts with an 8-byte compound descriptor (`wire::compound`).
    pub const COMPOUND: u8 = 0x02;
    /// A read or atomic reply: handled by the worker, never by the operation logic.
    pub const REPLY: u8 = 0x04;
    /// Shift of the address-generation mode ([`AddrMode`](super::AddrMode)).
    pub const ADDR_SHIFT: u8 = 3;
    /// Mask of the address-generation mode (bits 3..4).
    pub const ADDR_MASK: u8 = 0x18;
    /// The atomic (`FETCH_ADD`, `CMP_SWAP`) acts on register `ra` instead of memory.
    pub const REG_TARGET: u8 = 0x20;
    /// The message runs the compound descriptor of the latest message before it in the
    /// same frame that carried one, and carries none itself: a train of identical
    /// compound operations pays for the descriptor once per frame.
    pub const COMPOUND_REPEAT: u8 = 0x40;
    /// `INVOKE` only (the bit of [`REG_TARGET`], which `INVOKE` never carries; not
    /// `COMPOUND`'s, which the frame decoder reads on every message): the payload
    /// starts with the message's register names, ra rb rc rd and 4 zero bytes.
    pub const INVOKE_REGS: u8 = 0x20;
    /// `INVOKE` only (the low bit of the address mode, which `INVOKE` never carries):
    /// the sender waits for a value — the instruction (or chain) must return one, an
    /// atomic's old value; without it, it must return none.
    pub const INVOKE_RETURNS: u8 = 0x08;
    /// A later segment of a multi-segment write (no compound descriptor): `index` is its
    /// segment number (1..) in the work request, not register names. With address mode
    /// direct, `operand` is its absolute address; with mode indexed, its offset in the
    /// request, placed relative to the effective address the request's first segment
    /// generated (whatever that segment's mode: the address, and a post-increment, are
    /// generated once per work request); other modes are refused. The receiver may
    /// place it on arrival ahead of a gap when the gap holds only earlier segments of
    /// the same request and, relative, the first segment ran (PCI-DDC's out-of-order
    /// placement): no copy, no reordering buffer.
    pub const SEGMENT: u8 = 0x80;
}

/// How the effective address of a message is generated (control flags bits 3..4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddrMode {
    /// `ea = operand`.
    #[default]
    Direct,
    /// `ea = <ra>`.
    Indirect,
    /// `ea = <ra> + operand`.
    Indexed,
    /// `ea = <ra>; ra += <ra + 1>` (the stride register follows `ra` in its window).
    PostIncrement,
}

impl AddrMode {
    /// The mode in a control part's flags byte (every value is a mode).
    #[inline]
    pub const fn from_flags(flags: u8) -> AddrMode {
        match (flags & flags::ADDR_MASK) >> flags::ADDR_SHIFT {
            0 => AddrMode::Direct,
            1 => AddrMode::Indirect,
            2 => AddrMode::Indexed,
            _ => AddrMode::PostIncrement,
        }
    }

    /// The mode's bits, to OR into a flags byte.
    #[inline]
    pub const fn to_flags(self) -> u8 {
        (self as u8) << flags::ADDR_SHIFT
    }
}

/// The four register names of an index field, `[ra, rb, rc, rd]` (big-endian byte
/// order: `ra` is bits 31..24). `ra` is the address (or atomic target) register, `rb`
/// and `rc` the destinations of register operations 1 and 2, `rd` the conditional's
/// register. A name `n < 128` is register `n` of the connection's window; `n >= 128` is
/// global register `n - 128` of the target endpoint.
#[inline]
pub const fn regs_of(index: u32) -> [u8; 4] {
    index.to_be_bytes()
}

/// The index field naming registers `[ra, rb, rc, rd]` (inverse of [`regs_of`]).
#[inline]
pub const fn index_of(regs: [u8; 4]) -> u32 {
    u32::from_be_bytes(regs)
}

/// Cells a message with `length` payload bytes occupies: its control cell (whose data
/// block takes the first 32 bytes) plus one pure data cell per further 48 bytes.
#[inline]
pub const fn cells_for(length: u32) -> usize {
    if length as usize <= BLOCK_LEN {
        1
    } else {
        // u64 so that a hostile u32::MAX cannot overflow on 32-bit targets either.
        (1 + (length as u64 - BLOCK_LEN as u64).div_ceil(CELL_LEN as u64)) as usize
    }
}

/// The check byte of a control part: CRC32C (the hardware instruction, as for the frame
/// trailer) over the 16 bytes with the check byte itself taken as zero, folded to 8
/// bits by XOR of its four bytes. A table-driven CRC-8 cost a quarter of the per-message
/// CPU time on the latency path; this is a handful of instructions.
#[inline]
pub fn check8(control: &[u8; CONTROL_LEN]) -> u8 {
    let mut b = *control;
    b[field::CHECK] = 0;
    let c = crate::wire::crc32c(&b);
    (c ^ (c >> 8) ^ (c >> 16) ^ (c >> 24)) as u8
}

/// A view of a control part (the buffer may extend past its 16 bytes, e.g. into the
/// cell's data block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ControlPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`CONTROL_LEN`]. Use [`ControlPacket::new_checked`] for input from the wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ControlPacket { buffer }
    }

    /// Wraps a buffer that holds at least [`CONTROL_LEN`] bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), CONTROL_LEN)?;
        Ok(ControlPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Operation code ([`op`]) or instruction pointer.
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    /// 8-bit word mask.
    #[inline]
    pub fn mask(&self) -> u8 {
        self.buffer.as_ref()[field::MASK]
    }

    /// Control flags ([`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Check byte as carried.
    #[inline]
    pub fn check(&self) -> u8 {
        self.buffer.as_ref()[field::CHECK]
    }

    /// 32-bit operand.
    #[inline]
    pub fn operand(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::OPERAND)
    }

    /// Index field: four register names ([`regs_of`]).
    #[inline]
    pub fn index(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::INDEX)
    }

    /// Payload bytes that follow the control part.
    #[inline]
    pub fn length(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::LENGTH)
    }

    /// The check byte the control fields call for.
    #[inline]
    pub fn compute_check(&self) -> u8 {
        let data = self.buffer.as_ref();
        let mut b = [0u8; CONTROL_LEN];
        b.copy_from_slice(&data[..CONTROL_LEN]);
        check8(&b)
    }

    /// Whether the check byte matches the control fields.
    #[inline]
    pub fn check_ok(&self) -> bool {
        self.compute_check() == self.check()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ControlPacket<T> {
    /// Sets the operation code.
    #[inline]
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPCODE] = v;
    }

    /// Sets the word mask.
    #[inline]
    pub fn set_mask(&mut self, v: u8) {
        self.buffer.as_mut()[field::MASK] = v;
    }

    /// Sets the control flags.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the check byte as given (see [`ControlPacket::fill_check`]).
    #[inline]
    pub fn set_check(&mut self, v: u8) {
        self.buffer.as_mut()[field::CHECK] = v;
    }

    /// Sets the operand.
    #[inline]
    pub fn set_operand(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::OPERAND, v);
    }

    /// Sets the index field.
    #[inline]
    pub fn set_index(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::INDEX, v);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_length(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Computes the check byte from the control fields and stores it.
    #[inline]
    pub fn fill_check(&mut self) {
        let c = self.compute_check();
        self.set_check(c);
    }
}

/// The control part of a cell, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ControlRepr {
    /// Operation code ([`op`]) or instruction pointer.
    pub opcode: u8,
    /// 8-bit word mask.
    pub mask: u8,
    /// Control flags ([`flags`]).
    pub flags: u8,
    /// 32-bit operand.
    pub operand: u32,
    /// Index field: four register names ([`regs_of`]).
    pub index: u32,
    /// Bytes of payload that follow the control part (in its data block and the pure
    /// data cells after it).
    pub length: u32,
}

impl ControlRepr {
    /// Decodes a control part; fails with [`WireError::BadCheck`] when the check byte
    /// does not match the fields.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &ControlPacket<T>) -> Result<Self, WireError> {
        check_len(packet.buffer.as_ref(), CONTROL_LEN)?;
        let expected = packet.compute_check();
        if expected != packet.check() {
            return Err(WireError::BadCheck {
                expected,
                got: packet.check(),
            });
        }
        Ok(ControlRepr {
            opcode: packet.opcode(),
            mask: packet.mask(),
            flags: packet.flags(),
            operand: packet.operand(),
            index: packet.index(),
            length: packet.length(),
        })
    }

    /// Writes the control part and its check byte. The packet must hold
    /// [`CONTROL_LEN`] bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ControlPacket<T>) {
        // Two whole-word stores, the check byte computed from the fields in registers:
        // storing the fields byte by byte and reading them back for the check stalled
        // store-to-load forwarding on every message.
        let [w0, w1] = self.wire_words();
        let b = &mut packet.buffer.as_mut()[..CONTROL_LEN];
        b[..8].copy_from_slice(&w0.to_le_bytes());
        b[8..].copy_from_slice(&w1.to_le_bytes());
    }

    /// The 16 control bytes as [`ControlRepr::emit`] writes them, as two
    /// little-endian words (check byte included), for a caller that stores them itself.
    #[inline]
    pub fn wire_words(&self) -> [u64; 2] {
        let [w0, w1] = self.words();
        [w0 | u64::from(self.check_byte()) << 24, w1]
    }

    /// The 16 control bytes as two little-endian words, the check byte zero.
    #[inline]
    fn words(&self) -> [u64; 2] {
        // Multi-byte fields are big endian on the wire: byte-swapping each and placing
        // it at its offset gives the little-endian reading of the wire bytes.
        let w0 = u64::from(self.opcode)
            | u64::from(self.mask) << 8
            | u64::from(self.flags) << 16
            | u64::from(self.operand.swap_bytes()) << 32;
        let w1 = u64::from(self.index.swap_bytes()) | u64::from(self.length.swap_bytes()) << 32;
        [w0, w1]
    }

    /// The check byte of these control fields (what [`check8`] computes over their
    /// bytes).
    #[inline]
    pub fn check_byte(&self) -> u8 {
        let c = super::crc32c_words(0, &self.words());
        (c ^ (c >> 8) ^ (c >> 16) ^ (c >> 24)) as u8
    }

    /// Cells the message this control part starts occupies ([`cells_for`]).
    #[inline]
    pub const fn cells(&self) -> usize {
        cells_for(self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time CRC32C (Castagnoli, reflected), the definition `check8` folds.
    fn crc32c_reference(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    fn check_reference(bytes: &[u8]) -> u8 {
        let mut b = bytes[..16].to_vec();
        b[3] = 0;
        let c = crc32c_reference(&b);
        (c ^ (c >> 8) ^ (c >> 16) ^ (c >> 24)) as u8
    }

    #[rustfmt::skip]
    const BYTES: [u8; 16] = [
        0x02, 0xff, 0x01, 0x4e,  // WRITE, mask, LAST, check
        0x00, 0x00, 0x10, 0x00,  // operand 4096
        0x00, 0x01, 0x02, 0x03,  // index
        0x00, 0x00, 0x00, 0x64,  // length 100
    ];

    fn repr() -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE,
            mask: 0xff,
            flags: flags::LAST,
            operand: 4096,
            index: 0x0001_0203,
            length: 100,
        }
    }

    #[test]
    fn check_byte_matches_the_bitwise_definition() {
        assert_eq!(crc32c_reference(b"123456789"), 0xE306_9283);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..1000 {
            let mut b = [0u8; 16];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
            assert_eq!(check8(&b), check_reference(&b));
        }
    }

    #[test]
    fn hand_built_control_part_parses_and_emits_the_same_bytes() {
        assert_eq!(check_reference(&BYTES), BYTES[3]);

        let packet = ControlPacket::new_checked(&BYTES[..]).unwrap();
        assert!(packet.check_ok());
        assert_eq!(ControlRepr::parse(&packet), Ok(repr()));
        let mut out = [0u8; 16];
        repr().emit(&mut ControlPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn check_byte_from_fields_equals_check_over_bytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = ControlRepr {
                opcode: x as u8,
                mask: (x >> 8) as u8,
                flags: (x >> 16) as u8,
                operand: (x >> 24) as u32,
                index: x.rotate_left(17) as u32,
                length: x.rotate_left(41) as u32,
            };
            let mut b = [0u8; 16];
            r.emit(&mut ControlPacket::new_unchecked(&mut b[..]));
            assert_eq!(b[3], check8(&b));
            assert_eq!(
                ControlRepr::parse(&ControlPacket::new_unchecked(&b[..])),
                Ok(r)
            );
        }
    }

    #[test]
    fn check_byte_mismatch_is_rejected_with_both_values() {
        let mut bytes = BYTES;
        bytes[3] ^= 0x10;
        assert_eq!(
            ControlRepr::parse(&ControlPacket::new_unchecked(&bytes[..])),
            Err(WireError::BadCheck {
                expected: 0x4e,
                got: 0x5e
            })
        );
    }

    #[test]
    fn every_single_bit_flip_in_the_control_part_breaks_the_check() {
        for bit in 0..CONTROL_LEN * 8 {
            let mut bytes = BYTES;
            bytes[bit / 8] ^= 1 << (bit % 8);
            let packet = ControlPacket::new_unchecked(&bytes[..]);
            assert!(!packet.check_ok(), "bit {bit}");
            assert!(matches!(
                ControlRepr::parse(&packet),
                Err(WireError::BadCheck { .. })
            ));
        }
    }

    #[test]
    fn short_control_part_is_truncated() {
        for len in 0..CONTROL_LEN {
            assert_eq!(
                ControlPacket::new_checked(&BYTES[..len]).err(),
                Some(WireError::Truncated {
                    needed: 16,
                    got: len
                })
            );
            assert!(ControlRepr::parse(&ControlPacket::new_unchecked(&BYTES[..len])).is_err());
        }
    }

    #[test]
    fn cells_for_counts_the_control_block_then_whole_data_cells() {
        assert_eq!(cells_for(0), 1);
        assert_eq!(cells_for(1), 1);
        assert_eq!(cells_for(32), 1);
        assert_eq!(cells_for(33), 2);
        assert_eq!(cells_for(80), 2);
        assert_eq!(cells_for(81), 3);
        assert_eq!(cells_for(100), 3);
        assert_eq!(
            cells_for(u32::MAX),
            1 + (u32::MAX as usize - 32).div_ceil(48)
        );
        assert_eq!(repr().cells(), 3);
        // The payload of n cells ends exactly at the last cell's end.
        for n in 1..100usize {
            let max = (n * CELL_LEN - CONTROL_LEN) as u32;
            assert_eq!(cells_for(max), n);
            assert_eq!(cells_for(max + 1), n + 1);
        }
    }

    #[test]
    fn address_mode_lives_in_flag_bits_3_and_4() {
        let modes = [
            (0x00, AddrMode::Direct),
            (0x08, AddrMode::Indirect),
            (0x10, AddrMode::Indexed),
            (0x18, AddrMode::PostIncrement),
        ];
        for (bits, mode) in modes {
            assert_eq!(AddrMode::from_flags(bits), mode);
            assert_eq!(mode.to_flags(), bits);
            // Other flag bits do not disturb the mode.
            assert_eq!(AddrMode::from_flags(bits | !flags::ADDR_MASK), mode);
        }
        assert_eq!(AddrMode::default(), AddrMode::Direct);
        let all = flags::LAST | flags::COMPOUND | flags::REPLY | flags::ADDR_MASK;
        assert_eq!(all | flags::REG_TARGET, 0x3f);
    }

    #[test]
    fn index_names_four_registers_big_endian() {
        let index = 0x8001_7fffu32;
        assert_eq!(regs_of(index), [0x80, 0x01, 0x7f, 0xff]);
        assert_eq!(index_of([0x80, 0x01, 0x7f, 0xff]), index);
        let mut bytes = BYTES;
        bytes[8..12].copy_from_slice(&[9, 8, 7, 6]);
        let packet = ControlPacket::new_unchecked(&bytes[..]);
        assert_eq!(regs_of(packet.index()), [9, 8, 7, 6]);
    }
}
