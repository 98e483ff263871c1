//! The compound descriptor: the register operations and the conditional a message runs
//! with its main operation (docs/design.md §3, Operations; seed Figure 2).
//!
//! When the control part's `COMPOUND` flag is set, the payload starts with these 8 bytes
//! and the operation's own payload follows them.
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+---------------+---------------+---------------+
//! |   op1 code    |  op1 source   |   op2 code    |  op2 source   |  0
//! +---------------+---------------+---------------+---------------+
//! |   cond code   |   cond rhs    |     order     | reserved (0)  |  4
//! +---------------+---------------+---------------+---------------+
//! ```
//!
//! - op1 writes register `rb`, op2 register `rc`, the conditional tests register `rd`
//!   (names from the control part's index field, `cell::regs_of`).
//! - A source or right-hand side byte of `0xFF` is the message operand; any other value
//!   is a register name (so global register 127 cannot be a source).
//! - Register operation codes are [`RegOp`], conditional codes [`Cond`], orders [`Order`].
//!
//! Parsing refuses unknown codes and a non-zero reserved byte ([`CompoundError`]), so a
//! [`CompoundRepr`] always holds operations the receiver knows. This module only names
//! the codes; what they compute is the operation logic's (`oplogic`).

use super::{check_len, WireError};

mod field {
    pub const OP1_CODE: usize = 0;
    pub const OP1_SRC: usize = 1;
    pub const OP2_CODE: usize = 2;
    pub const OP2_SRC: usize = 3;
    pub const COND_CODE: usize = 4;
    pub const COND_RHS: usize = 5;
    pub const ORDER: usize = 6;
    pub const RESERVED: usize = 7;
}

/// Length of the compound descriptor.
pub const COMPOUND_LEN: usize = 8;

/// OpSource byte naming the message operand rather than a register.
pub const SOURCE_OPERAND: u8 = 0xFF;

/// Why a compound descriptor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CompoundError {
    /// Fewer than [`COMPOUND_LEN`] bytes.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A register operation code this version does not know.
    #[error("unknown register operation code {code} in descriptor byte {byte}")]
    UnknownRegOp {
        /// Offset of the code in the descriptor (0 or 2).
        byte: u8,
        /// The code.
        code: u8,
    },
    /// A conditional code this version does not know.
    #[error("unknown conditional code {0}")]
    UnknownCond(u8),
    /// An order this version does not know.
    #[error("unknown order {0}")]
    UnknownOrder(u8),
    /// The reserved byte is not zero.
    #[error("reserved descriptor byte is {0:#04x}, not zero")]
    Reserved(u8),
}

impl CompoundError {
    /// Offset of the offending byte in the descriptor and its value (for traps).
    pub fn byte_and_value(&self) -> (u8, u8) {
        match *self {
            CompoundError::Wire(_) => (0, 0),
            CompoundError::UnknownRegOp { byte, code } => (byte, code),
            CompoundError::UnknownCond(c) => (field::COND_CODE as u8, c),
            CompoundError::UnknownOrder(o) => (field::ORDER as u8, o),
            CompoundError::Reserved(r) => (field::RESERVED as u8, r),
        }
    }
}

/// A register operation code. The destination `r` is `rb` (op1) or `rc` (op2); `src` is
/// the operation's source (operand or register).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RegOp {
    /// No operation (code 0).
    #[default]
    None = 0,
    /// `r ← src`.
    Set = 1,
    /// `r ← !src`.
    Not = 2,
    /// `r ← -src` (two's complement).
    Neg = 3,
    /// `r ← r + src` (wrapping).
    Add = 4,
    /// `r ← r - src` (wrapping).
    Sub = 5,
    /// `r ← r & src`.
    And = 6,
    /// `r ← r | src`.
    Or = 7,
    /// `r ← r ^ src`.
    Xor = 8,
    /// `r ← r << (src & 63)`.
    Shl = 9,
    /// `r ← r >> (src & 63)` (logical).
    Shr = 10,
    /// `r ← min(r, src)`, unsigned.
    Min = 11,
    /// `r ← max(r, src)`, unsigned.
    Max = 12,
    /// `r ← min(r, src)`, signed (the operand is sign-extended).
    MinS = 13,
    /// `r ← max(r, src)`, signed (the operand is sign-extended).
    MaxS = 14,
}

impl RegOp {
    /// Every code, indexed by its value.
    pub const ALL: [RegOp; 15] = [
        RegOp::None,
        RegOp::Set,
        RegOp::Not,
        RegOp::Neg,
        RegOp::Add,
        RegOp::Sub,
        RegOp::And,
        RegOp::Or,
        RegOp::Xor,
        RegOp::Shl,
        RegOp::Shr,
        RegOp::Min,
        RegOp::Max,
        RegOp::MinS,
        RegOp::MaxS,
    ];

    /// The operation for a wire code, `None` for codes this version does not know.
    #[inline]
    pub fn from_u8(code: u8) -> Option<RegOp> {
        RegOp::ALL.get(code as usize).copied()
    }

    /// Whether a 32-bit operand source is sign-extended (signed min/max) rather than
    /// zero-extended.
    #[inline]
    pub const fn is_signed(self) -> bool {
        matches!(self, RegOp::MinS | RegOp::MaxS)
    }
}

/// A conditional code: `if <rd> cmp rhs then interrupt at end`. Codes 1..=6 compare
/// unsigned; the same plus 8 compare signed (the operand is sign-extended).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Cond {
    /// No conditional (code 0).
    #[default]
    None = 0,
    /// `<rd> == rhs`.
    Eq = 1,
    /// `<rd> != rhs`.
    Ne = 2,
    /// `<rd> < rhs`, unsigned.
    Lt = 3,
    /// `<rd> <= rhs`, unsigned.
    Le = 4,
    /// `<rd> > rhs`, unsigned.
    Gt = 5,
    /// `<rd> >= rhs`, unsigned.
    Ge = 6,
    /// `<rd> == rhs`, the operand sign-extended.
    EqS = 9,
    /// `<rd> != rhs`, the operand sign-extended.
    NeS = 10,
    /// `<rd> < rhs`, signed.
    LtS = 11,
    /// `<rd> <= rhs`, signed.
    LeS = 12,
    /// `<rd> > rhs`, signed.
    GtS = 13,
    /// `<rd> >= rhs`, signed.
    GeS = 14,
    /// Always interrupt: a sender-forced interrupt (the receiver may refuse it).
    Always = 15,
}

impl Cond {
    /// The conditional for a wire code, `None` for codes this version does not know.
    #[inline]
    pub fn from_u8(code: u8) -> Option<Cond> {
        Some(match code {
            0 => Cond::None,
            1 => Cond::Eq,
            2 => Cond::Ne,
            3 => Cond::Lt,
            4 => Cond::Le,
            5 => Cond::Gt,
            6 => Cond::Ge,
            9 => Cond::EqS,
            10 => Cond::NeS,
            11 => Cond::LtS,
            12 => Cond::LeS,
            13 => Cond::GtS,
            14 => Cond::GeS,
            15 => Cond::Always,
            _ => return None,
        })
    }

    /// Whether the comparison is signed (the operand is sign-extended).
    #[inline]
    pub const fn is_signed(self) -> bool {
        (self as u8) & 8 != 0 && !matches!(self, Cond::Always)
    }

    /// Whether this conditional compares registers (neither `None` nor `Always`).
    #[inline]
    pub const fn compares(self) -> bool {
        !matches!(self, Cond::None | Cond::Always)
    }
}

/// When the conditional is evaluated relative to the register operations. Address
/// generation (with its post-increment) and the main operation always come first.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// Conditional, then op1, then op2.
    #[default]
    CondFirst = 0,
    /// Op1, conditional, op2.
    CondAfterOp1 = 1,
    /// Op1, op2, then the conditional.
    CondLast = 2,
}

impl Order {
    /// The order for a wire code, `None` for codes this version does not know.
    #[inline]
    pub fn from_u8(code: u8) -> Option<Order> {
        Some(match code {
            0 => Order::CondFirst,
            1 => Order::CondAfterOp1,
            2 => Order::CondLast,
            _ => return None,
        })
    }
}

/// Where a register operation's source or a conditional's right-hand side comes from.
///
/// Two-byte aligned: unaligned in a decoded descriptor, the planner read it as one
/// 16-bit load across two narrower stores of the descriptor, a store-to-load
/// forwarding stall on every compound message (fastpath bench: 54 to 51.6 ns a
/// compound write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(align(2))]
pub enum OpSource {
    /// The message operand (wire byte [`SOURCE_OPERAND`]).
    #[default]
    Operand,
    /// A register, by name (window `n < 128`, global `n - 128` otherwise).
    Reg(u8),
}

impl OpSource {
    /// The source for a wire byte.
    #[inline]
    pub const fn from_u8(b: u8) -> OpSource {
        if b == SOURCE_OPERAND {
            OpSource::Operand
        } else {
            OpSource::Reg(b)
        }
    }

    /// The wire byte (`Reg(0xFF)` cannot be expressed and emits as the operand).
    #[inline]
    pub const fn to_u8(self) -> u8 {
        match self {
            OpSource::Operand => SOURCE_OPERAND,
            OpSource::Reg(n) => n,
        }
    }
}

/// One register operation of a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RegOpRepr {
    /// The operation ([`RegOp::None`]: none).
    pub op: RegOp,
    /// Its source.
    pub src: OpSource,
}

/// The conditional of a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CondRepr {
    /// The comparison ([`Cond::None`]: none).
    pub cond: Cond,
    /// Its right-hand side.
    pub rhs: OpSource,
}

/// A view of a compound descriptor (the buffer may extend past its 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompoundPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CompoundPacket<T> {
    /// Wraps a buffer without checking its length; the accessors panic if it is shorter
    /// than [`COMPOUND_LEN`]. Use [`CompoundPacket::new_checked`] for input from the wire.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        CompoundPacket { buffer }
    }

    /// Wraps a buffer that holds at least [`COMPOUND_LEN`] bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(buffer.as_ref(), COMPOUND_LEN)?;
        Ok(CompoundPacket { buffer })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Register operation 1 code.
    #[inline]
    pub fn op1_code(&self) -> u8 {
        self.buffer.as_ref()[field::OP1_CODE]
    }

    /// Register operation 1 source byte.
    #[inline]
    pub fn op1_src(&self) -> u8 {
        self.buffer.as_ref()[field::OP1_SRC]
    }

    /// Register operation 2 code.
    #[inline]
    pub fn op2_code(&self) -> u8 {
        self.buffer.as_ref()[field::OP2_CODE]
    }

    /// Register operation 2 source byte.
    #[inline]
    pub fn op2_src(&self) -> u8 {
        self.buffer.as_ref()[field::OP2_SRC]
    }

    /// Conditional code.
    #[inline]
    pub fn cond_code(&self) -> u8 {
        self.buffer.as_ref()[field::COND_CODE]
    }

    /// Conditional right-hand side byte.
    #[inline]
    pub fn cond_rhs(&self) -> u8 {
        self.buffer.as_ref()[field::COND_RHS]
    }

    /// Order code.
    #[inline]
    pub fn order(&self) -> u8 {
        self.buffer.as_ref()[field::ORDER]
    }

    /// Reserved byte (zero).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CompoundPacket<T> {
    /// Sets register operation 1's code.
    #[inline]
    pub fn set_op1_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP1_CODE] = v;
    }

    /// Sets register operation 1's source byte.
    #[inline]
    pub fn set_op1_src(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP1_SRC] = v;
    }

    /// Sets register operation 2's code.
    #[inline]
    pub fn set_op2_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP2_CODE] = v;
    }

    /// Sets register operation 2's source byte.
    #[inline]
    pub fn set_op2_src(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP2_SRC] = v;
    }

    /// Sets the conditional code.
    #[inline]
    pub fn set_cond_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::COND_CODE] = v;
    }

    /// Sets the conditional right-hand side byte.
    #[inline]
    pub fn set_cond_rhs(&mut self, v: u8) {
        self.buffer.as_mut()[field::COND_RHS] = v;
    }

    /// Sets the order code.
    #[inline]
    pub fn set_order(&mut self, v: u8) {
        self.buffer.as_mut()[field::ORDER] = v;
    }

    /// Sets the reserved byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED] = v;
    }
}

/// A compound descriptor, decoded: up to two register operations and one conditional,
/// and the order they run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CompoundRepr {
    /// Register operation 1 (destination `rb`).
    pub op1: RegOpRepr,
    /// Register operation 2 (destination `rc`).
    pub op2: RegOpRepr,
    /// The conditional (register `rd`).
    pub cond: CondRepr,
    /// When the conditional is evaluated.
    pub order: Order,
}

impl CompoundRepr {
    /// The descriptor of a message without one: no operations, no conditional.
    pub const NONE: CompoundRepr = CompoundRepr {
        op1: RegOpRepr {
            op: RegOp::None,
            src: OpSource::Operand,
        },
        op2: RegOpRepr {
            op: RegOp::None,
            src: OpSource::Operand,
        },
        cond: CondRepr {
            cond: Cond::None,
            rhs: OpSource::Operand,
        },
        order: Order::CondFirst,
    };

    /// Decodes a descriptor, refusing unknown codes and a non-zero reserved byte.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &CompoundPacket<T>) -> Result<Self, CompoundError> {
        check_len(packet.buffer.as_ref(), COMPOUND_LEN)?;
        let op = |byte: usize, code: u8| {
            RegOp::from_u8(code).ok_or(CompoundError::UnknownRegOp {
                byte: byte as u8,
                code,
            })
        };
        let repr = CompoundRepr {
            op1: RegOpRepr {
                op: op(field::OP1_CODE, packet.op1_code())?,
                src: OpSource::from_u8(packet.op1_src()),
            },
            op2: RegOpRepr {
                op: op(field::OP2_CODE, packet.op2_code())?,
                src: OpSource::from_u8(packet.op2_src()),
            },
            cond: CondRepr {
                cond: Cond::from_u8(packet.cond_code())
                    .ok_or(CompoundError::UnknownCond(packet.cond_code()))?,
                rhs: OpSource::from_u8(packet.cond_rhs()),
            },
            order: Order::from_u8(packet.order())
                .ok_or(CompoundError::UnknownOrder(packet.order()))?,
        };
        match packet.reserved() {
            0 => Ok(repr),
            r => Err(CompoundError::Reserved(r)),
        }
    }

    /// Writes the descriptor. The packet must hold [`COMPOUND_LEN`] bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut CompoundPacket<T>) {
        packet.set_op1_code(self.op1.op as u8);
        packet.set_op1_src(self.op1.src.to_u8());
        packet.set_op2_code(self.op2.op as u8);
        packet.set_op2_src(self.op2.src.to_u8());
        packet.set_cond_code(self.cond.cond as u8);
        packet.set_cond_rhs(self.cond.rhs.to_u8());
        packet.set_order(self.order as u8);
        packet.set_reserved(0);
    }

    /// The descriptor's 8 bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; COMPOUND_LEN] {
        let mut b = [0u8; COMPOUND_LEN];
        self.emit(&mut CompoundPacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const BYTES: [u8; 8] = [
        0x04, 0xff,  // op1: ADD operand
        0x07, 0x81,  // op2: OR global register 1
        0x0d, 0x03,  // cond: GTS register 3
        0x02, 0x00,  // order: cond last; reserved
    ];

    fn repr() -> CompoundRepr {
        CompoundRepr {
            op1: RegOpRepr {
                op: RegOp::Add,
                src: OpSource::Operand,
            },
            op2: RegOpRepr {
                op: RegOp::Or,
                src: OpSource::Reg(0x81),
            },
            cond: CondRepr {
                cond: Cond::GtS,
                rhs: OpSource::Reg(3),
            },
            order: Order::CondLast,
        }
    }

    #[test]
    fn hand_built_descriptor_parses_and_emits_the_same_bytes() {
        let packet = CompoundPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (
                packet.op1_code(),
                packet.op1_src(),
                packet.op2_code(),
                packet.op2_src()
            ),
            (4, 0xff, 7, 0x81)
        );
        assert_eq!(
            (
                packet.cond_code(),
                packet.cond_rhs(),
                packet.order(),
                packet.reserved()
            ),
            (13, 3, 2, 0)
        );
        assert_eq!(CompoundRepr::parse(&packet), Ok(repr()));
        let mut out = [0xaau8; 8];
        repr().emit(&mut CompoundPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
        assert_eq!(repr().to_bytes(), BYTES);
    }

    #[test]
    fn the_empty_descriptor_is_all_zero_but_the_operand_sources() {
        assert_eq!(CompoundRepr::NONE, CompoundRepr::default());
        assert_eq!(
            CompoundRepr::NONE.to_bytes(),
            [0, 0xff, 0, 0xff, 0, 0xff, 0, 0]
        );
        let zeros = CompoundPacket::new_unchecked(&[0u8; 8][..]);
        let parsed = CompoundRepr::parse(&zeros).unwrap();
        assert_eq!(
            parsed.op1,
            RegOpRepr {
                op: RegOp::None,
                src: OpSource::Reg(0)
            }
        );
        assert_eq!(parsed.cond.cond, Cond::None);
    }

    #[test]
    fn every_code_round_trips_and_unknown_codes_are_refused() {
        for code in 0..=255u8 {
            match RegOp::from_u8(code) {
                Some(op) => assert_eq!(op as u8, code),
                None => assert!(code >= 15),
            }
            match Cond::from_u8(code) {
                Some(c) => assert_eq!(c as u8, code),
                None => assert!(code == 7 || code == 8 || code >= 16, "{code}"),
            }
            match Order::from_u8(code) {
                Some(o) => assert_eq!(o as u8, code),
                None => assert!(code >= 3),
            }
        }
        let refused = |byte: usize, value: u8| {
            let mut b = BYTES;
            b[byte] = value;
            CompoundRepr::parse(&CompoundPacket::new_unchecked(&b[..])).unwrap_err()
        };
        assert_eq!(
            refused(0, 15),
            CompoundError::UnknownRegOp { byte: 0, code: 15 }
        );
        assert_eq!(
            refused(2, 0xff),
            CompoundError::UnknownRegOp {
                byte: 2,
                code: 0xff
            }
        );
        assert_eq!(refused(4, 7), CompoundError::UnknownCond(7));
        assert_eq!(refused(4, 8), CompoundError::UnknownCond(8));
        assert_eq!(refused(4, 16), CompoundError::UnknownCond(16));
        assert_eq!(refused(6, 3), CompoundError::UnknownOrder(3));
        assert_eq!(refused(7, 1), CompoundError::Reserved(1));
        assert_eq!(refused(7, 1).byte_and_value(), (7, 1));
        assert_eq!(refused(4, 8).byte_and_value(), (4, 8));
        assert_eq!(refused(2, 20).byte_and_value(), (2, 20));
        assert_eq!(refused(6, 9).byte_and_value(), (6, 9));
    }

    #[test]
    fn signedness_and_sources_follow_the_codes() {
        assert!(RegOp::MinS.is_signed() && RegOp::MaxS.is_signed());
        assert!(!RegOp::Min.is_signed() && !RegOp::Shr.is_signed());
        for c in [
            Cond::EqS,
            Cond::NeS,
            Cond::LtS,
            Cond::LeS,
            Cond::GtS,
            Cond::GeS,
        ] {
            assert!(c.is_signed() && c.compares(), "{c:?}");
        }
        for c in [Cond::Eq, Cond::Ne, Cond::Lt, Cond::Le, Cond::Gt, Cond::Ge] {
            assert!(!c.is_signed() && c.compares(), "{c:?}");
        }
        assert!(!Cond::Always.is_signed() && !Cond::Always.compares());
        assert!(!Cond::None.compares());
        assert_eq!(OpSource::from_u8(0xff), OpSource::Operand);
        assert_eq!(OpSource::from_u8(0xfe), OpSource::Reg(0xfe));
        assert_eq!(OpSource::Reg(0x80).to_u8(), 0x80);
    }

    #[test]
    fn short_descriptor_is_truncated() {
        for len in 0..COMPOUND_LEN {
            assert_eq!(
                CompoundPacket::new_checked(&BYTES[..len]).err(),
                Some(WireError::Truncated {
                    needed: 8,
                    got: len
                })
            );
            assert_eq!(
                CompoundRepr::parse(&CompoundPacket::new_unchecked(&BYTES[..len])),
                Err(CompoundError::Wire(WireError::Truncated {
                    needed: 8,
                    got: len
                }))
            );
        }
    }
}
