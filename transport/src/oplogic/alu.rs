//! What register operation and conditional codes compute: the one place that gives
//! [`RegOp`] and [`Cond`] (named in `wire::compound`) their meaning. Pure functions on
//! 64-bit values; no protection, no names — [`super::plan`] does that.

use crate::wire::compound::{Cond, RegOp};

/// The 64-bit value of the 32-bit message operand: sign-extended for signed operations
/// and comparisons, zero-extended otherwise.
#[inline]
pub(crate) fn extend(operand: u32, signed: bool) -> u64 {
    if signed {
        operand as i32 as i64 as u64
    } else {
        u64::from(operand)
    }
}

/// The new value of the destination `r` of `op` with source value `src`.
/// [`RegOp::None`] leaves `r` unchanged.
#[inline]
pub(crate) fn apply(op: RegOp, r: u64, src: u64) -> u64 {
    match op {
        RegOp::None => r,
        RegOp::Set => src,
        RegOp::Not => !src,
        RegOp::Neg => src.wrapping_neg(),
        RegOp::Add => r.wrapping_add(src),
        RegOp::Sub => r.wrapping_sub(src),
        RegOp::And => r & src,
        RegOp::Or => r | src,
        RegOp::Xor => r ^ src,
        RegOp::Shl => r << (src & 63),
        RegOp::Shr => r >> (src & 63),
        RegOp::Min => r.min(src),
        RegOp::Max => r.max(src),
        RegOp::MinS => (r as i64).min(src as i64) as u64,
        RegOp::MaxS => (r as i64).max(src as i64) as u64,
    }
}

/// Whether `<rd> cond rhs` holds. [`Cond::None`] never holds, [`Cond::Always`] always.
#[inline]
pub(crate) fn holds(cond: Cond, rd: u64, rhs: u64) -> bool {
    let (l, r) = (rd as i64, rhs as i64);
    match cond {
        Cond::None => false,
        Cond::Always => true,
        Cond::Eq | Cond::EqS => rd == rhs,
        Cond::Ne | Cond::NeS => rd != rhs,
        Cond::Lt => rd < rhs,
        Cond::Le => rd <= rhs,
        Cond::Gt => rd > rhs,
        Cond::Ge => rd >= rhs,
        Cond::LtS => l < r,
        Cond::LeS => l <= r,
        Cond::GtS => l > r,
        Cond::GeS => l >= r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEG1: u64 = u64::MAX;
    const MIN: u64 = 1 << 63;

    #[test]
    fn operand_extension_follows_signedness() {
        assert_eq!(extend(0xffff_ffff, false), 0xffff_ffff);
        assert_eq!(extend(0xffff_ffff, true), NEG1);
        assert_eq!(extend(0x8000_0000, true), 0xffff_ffff_8000_0000);
        assert_eq!(extend(0x7fff_ffff, true), 0x7fff_ffff);
        assert_eq!(extend(0, true), 0);
    }

    #[test]
    fn register_operations_compute_on_64_bits() {
        use RegOp::*;
        let cases: &[(RegOp, u64, u64, u64)] = &[
            (None, 5, 9, 5),
            (Set, 5, 9, 9),
            (Not, 5, 0, NEG1),
            (Not, 5, NEG1, 0),
            (Neg, 5, 1, NEG1),
            (Neg, 5, MIN, MIN),
            (Neg, 5, 0, 0),
            (Add, NEG1, 2, 1),
            (Add, 1 << 32, 1 << 32, 1 << 33),
            (Sub, 0, 1, NEG1),
            (Sub, 10, 3, 7),
            (And, 0b1100, 0b1010, 0b1000),
            (Or, 0b1100, 0b1010, 0b1110),
            (Xor, 0b1100, 0b1010, 0b0110),
            (Shl, 1, 63, MIN),
            (Shl, 1, 64, 1),
            (Shl, 1, 65, 2),
            (Shl, 3, NEG1, MIN),
            (Shr, MIN, 63, 1),
            (Shr, MIN, 64, MIN),
            (Shr, NEG1, 4, NEG1 >> 4),
            (Shr, 2, 129, 1),
            (Min, 3, NEG1, 3),
            (Max, 3, NEG1, NEG1),
            (Min, 7, 7, 7),
            (MinS, 3, NEG1, NEG1),
            (MaxS, 3, NEG1, 3),
            (MinS, MIN, 0, MIN),
            (MaxS, MIN, NEG1, NEG1),
            (MaxS, i64::MAX as u64, MIN, i64::MAX as u64),
        ];
        for &(op, r, src, want) in cases {
            assert_eq!(apply(op, r, src), want, "{op:?} {r:#x} {src:#x}");
        }
    }

    #[test]
    fn comparisons_are_unsigned_or_signed_by_code() {
        use Cond::*;
        // (cond, rd, rhs, holds)
        let cases: &[(Cond, u64, u64, bool)] = &[
            (None, 0, 0, false),
            (Always, 1, 2, true),
            (Eq, 4, 4, true),
            (Eq, 4, 5, false),
            (EqS, NEG1, NEG1, true),
            (Ne, 4, 5, true),
            (NeS, 4, 4, false),
            (Lt, 1, NEG1, true),
            (LtS, 1, NEG1, false),
            (Le, 7, 7, true),
            (Le, 8, 7, false),
            (LeS, NEG1, 0, true),
            (LeS, 0, NEG1, false),
            (Gt, NEG1, 1, true),
            (GtS, NEG1, 1, false),
            (GtS, 1, MIN, true),
            (Ge, 7, 7, true),
            (Ge, 6, 7, false),
            (GeS, MIN, MIN, true),
            (GeS, MIN, 0, false),
        ];
        for &(cond, rd, rhs, want) in cases {
            assert_eq!(holds(cond, rd, rhs), want, "{cond:?} {rd:#x} {rhs:#x}");
        }
    }
}
