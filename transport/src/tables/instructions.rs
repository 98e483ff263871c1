//! Instruction memory (docs/design.md §3, "Instruction-pointer messages"; seed patent
//! Fig. 13).
//!
//! A node-wide array of [`StoredInstruction`]s. A connection sees a window of it (base,
//! bounds), handed out by the same first-fit allocator as register windows; a sender
//! names an instruction by its index in the window (an *instruction pointer*), and only
//! instructions marked [`StoredInstruction::entry`] may be named. A separate table of
//! **global instructions** serves every connection; they take every operand from the
//! message ([`Operands::ALL`]), since each connection has other receiver state.
//!
//! An instruction is a control part (opcode, word mask, address mode, operand, four
//! register names) plus an optional compound descriptor, and per operand a bit saying
//! whether it comes from the instruction or from the message. [`StoredInstruction::more`]
//! chains it to the next one: the sequencer runs the chain for one message, atomically
//! (`oplogic::sequence`).

use std::ops::BitOr;

use super::registers::Ranges;
use super::{RegWindow, TableError};
use crate::wire::cell::{flags, op};
use crate::wire::compound::{CompoundPacket, CompoundRepr, COMPOUND_LEN};

/// Which operands of an instruction come from the message (a set bit) rather than from
/// the instruction.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
pub struct Operands(u8);

impl Operands {
    /// Every operand from the instruction.
    pub const NONE: Operands = Operands(0);
    /// The 32-bit operand.
    pub const OPERAND: Operands = Operands(1 << 0);
    /// The word mask (of a masked write).
    pub const MASK: Operands = Operands(1 << 1);
    /// Register name `ra` (address or atomic target).
    pub const RA: Operands = Operands(1 << 2);
    /// Register name `rb` (op1's destination).
    pub const RB: Operands = Operands(1 << 3);
    /// Register name `rc` (op2's destination).
    pub const RC: Operands = Operands(1 << 4);
    /// Register name `rd` (the conditional's register).
    pub const RD: Operands = Operands(1 << 5);
    /// Every operand from the message (what a global instruction must take).
    pub const ALL: Operands = Operands(0x3f);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: Operands) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Operands {
    type Output = Operands;
    fn bitor(self, rhs: Operands) -> Operands {
        Operands(self.0 | rhs.0)
    }
}

/// Register-name bits of [`Operands`], for `ra`, `rb`, `rc`, `rd` in that order.
pub const REG_OPERANDS: [Operands; 4] = [Operands::RA, Operands::RB, Operands::RC, Operands::RD];

/// One instruction of instruction memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
pub struct StoredInstruction {
    /// The operation (`WRITE_MASKED` .. `EXCEPTION` of `wire::cell::op`).
    pub opcode: u8,
    /// Word mask of a masked write.
    pub mask: u8,
    /// Control flags: the address mode and `REG_TARGET` only.
    pub flags: u8,
    /// The operand.
    pub operand: u32,
    /// Register names `ra`, `rb`, `rc`, `rd` (relative to the connection's windows).
    pub regs: [u8; 4],
    /// Register operations and conditional run with the main operation.
    pub compound: Option<[u8; COMPOUND_LEN]>,
    /// Operands taken from the message instead.
    pub from_message: Operands,
    /// Whether a sender may name it (the first of a chain must be).
    pub entry: bool,
    /// Whether the sequencer goes on with the next instruction.
    pub more: bool,
}

/// Largest value a global instruction pointer's index may have; the bit above marks an
/// instruction pointer as global.
pub const GLOBAL_IP: u32 = 1 << 31;

impl StoredInstruction {
    /// Checks the instruction can run: a known executable opcode, flags limited to the
    /// address mode and a register target, a descriptor with known codes, and for a
    /// global instruction every operand from the message.
    pub fn validate(&self, global: bool) -> Result<(), TableError> {
        let bad = |why: &'static str| Err(TableError::BadInstruction { why });
        if !(op::WRITE_MASKED..=op::EXCEPTION).contains(&self.opcode) {
            return bad("opcode is not an executable operation");
        }
        if self.flags & !(flags::ADDR_MASK | flags::REG_TARGET) != 0 {
            return bad("flags other than the address mode and REG_TARGET");
        }
        if let Some(d) = &self.compound {
            if CompoundRepr::parse(&CompoundPacket::new_unchecked(&d[..])).is_err() {
                return bad("compound descriptor with an unknown code");
            }
        }
        if global && self.from_message != Operands::ALL {
            return bad("a global instruction takes every operand from the message");
        }
        Ok(())
    }
}

/// The node's instruction memory and global instructions.
#[derive(Clone, Debug, Default)]
pub struct InstructionMemory {
    /// Absolute index of `slots[0]` (a shard's memory holds its own range, so that a
    /// window names the shard it belongs to).
    first: u32,
    slots: Vec<Option<StoredInstruction>>,
    ranges: Ranges,
    global: Vec<Option<StoredInstruction>>,
}

impl InstructionMemory {
    /// `capacity` instruction slots for connection windows and `globals` global ones,
    /// all empty.
    pub fn new(capacity: u32, globals: u32) -> Self {
        Self::new_at(0, capacity, globals)
    }

    /// [`InstructionMemory::new`] for the window slots from absolute index `first`.
    pub fn new_at(first: u32, capacity: u32, globals: u32) -> Self {
        Self {
            first,
            slots: vec![None; capacity as usize],
            ranges: Ranges::new_at(first, capacity),
            global: vec![None; globals as usize],
        }
    }

    /// Whether every slot of `w` is in this memory.
    pub fn holds(&self, w: RegWindow) -> bool {
        w.base >= self.first && w.end() <= u64::from(self.first) + self.slots.len() as u64
    }

    /// Index into `slots` of absolute slot `abs` (out of range: past them).
    #[inline]
    fn at(&self, abs: u32) -> usize {
        abs.wrapping_sub(self.first) as usize
    }

    /// Instruction slots for windows.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Global instruction slots.
    pub fn globals(&self) -> u32 {
        self.global.len() as u32
    }

    /// Allocates a window of `n` empty slots.
    pub fn alloc(&mut self, n: u32) -> Result<RegWindow, TableError> {
        if n == 0 {
            return Err(TableError::EmptyInstructionWindow);
        }
        let w = self
            .ranges
            .alloc(n)
            .map_err(|largest| TableError::InstructionsExhausted { wanted: n, largest })?;
        let at = self.at(w.base);
        self.slots[at..at + w.len as usize].fill(None);
        Ok(w)
    }

    /// Frees a window (its instructions are dropped).
    pub fn free(&mut self, w: RegWindow) -> Result<(), TableError> {
        if !self.holds(w) {
            return Err(TableError::InstructionOutOfRange { index: w.base });
        }
        self.ranges
            .free(w)
            .map_err(|()| TableError::InstructionsNotAllocated { window: w })?;
        let at = self.at(w.base);
        self.slots[at..at + w.len as usize].fill(None);
        Ok(())
    }

    /// Sets (or clears, with `None`) slot `index` of window `w`, after validating it.
    pub fn set(
        &mut self,
        w: RegWindow,
        index: u32,
        ins: Option<StoredInstruction>,
    ) -> Result<(), TableError> {
        if let Some(i) = &ins {
            i.validate(false)?;
        }
        let abs = (index < w.len)
            .then(|| w.base.checked_add(index))
            .flatten()
            .map(|a| self.at(a))
            .filter(|&a| a < self.slots.len())
            .ok_or(TableError::InstructionOutOfRange { index })?;
        self.slots[abs] = ins;
        Ok(())
    }

    /// Sets (or clears) global instruction `index`, after validating it.
    pub fn set_global(
        &mut self,
        index: u32,
        ins: Option<StoredInstruction>,
    ) -> Result<(), TableError> {
        if let Some(i) = &ins {
            i.validate(true)?;
        }
        let slot = self
            .global
            .get_mut(index as usize)
            .ok_or(TableError::InstructionOutOfRange { index })?;
        *slot = ins;
        Ok(())
    }

    /// Instruction at absolute slot `abs`.
    #[inline]
    pub fn get(&self, abs: u32) -> Option<&StoredInstruction> {
        self.slots.get(self.at(abs))?.as_ref()
    }

    /// Global instruction `index`.
    #[inline]
    pub fn get_global(&self, index: u32) -> Option<&StoredInstruction> {
        self.global.get(index as usize)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_ins() -> StoredInstruction {
        StoredInstruction {
            opcode: op::WRITE,
            from_message: Operands::OPERAND,
            entry: true,
            ..StoredInstruction::default()
        }
    }

    #[test]
    fn windows_are_allocated_freed_and_bounds_checked() {
        let mut m = InstructionMemory::new(16, 4);
        let a = m.alloc(10).unwrap();
        assert_eq!(
            m.alloc(7),
            Err(TableError::InstructionsExhausted {
                wanted: 7,
                largest: 6
            })
        );
        m.set(a, 9, Some(write_ins())).unwrap();
        assert_eq!(m.get(a.base + 9), Some(&write_ins()));
        assert_eq!(
            m.set(a, 10, Some(write_ins())),
            Err(TableError::InstructionOutOfRange { index: 10 })
        );
        m.free(a).unwrap();
        assert_eq!(m.get(a.base + 9), None);
        assert!(matches!(
            m.free(a),
            Err(TableError::InstructionsNotAllocated { .. })
        ));
        assert_eq!(m.alloc(0), Err(TableError::EmptyInstructionWindow));
        assert_eq!(m.alloc(16).unwrap().len, 16);
    }

    #[test]
    fn invalid_instructions_are_refused() {
        let mut m = InstructionMemory::new(4, 4);
        let w = m.alloc(4).unwrap();
        for bad in [
            StoredInstruction {
                opcode: op::NOP,
                ..write_ins()
            },
            StoredInstruction {
                opcode: op::CM_CONNECT_REQ,
                ..write_ins()
            },
            StoredInstruction {
                flags: flags::REPLY,
                ..write_ins()
            },
            StoredInstruction {
                compound: Some([99, 0, 0, 0, 0, 0, 0, 0]),
                ..write_ins()
            },
        ] {
            assert!(matches!(
                m.set(w, 0, Some(bad)),
                Err(TableError::BadInstruction { .. })
            ));
        }
    }

    #[test]
    fn global_instructions_take_every_operand_from_the_message() {
        let mut m = InstructionMemory::new(0, 2);
        assert!(matches!(
            m.set_global(0, Some(write_ins())),
            Err(TableError::BadInstruction { .. })
        ));
        let g = StoredInstruction {
            from_message: Operands::ALL,
            ..write_ins()
        };
        m.set_global(1, Some(g)).unwrap();
        assert_eq!(m.get_global(1), Some(&g));
        assert_eq!(
            m.set_global(2, Some(g)),
            Err(TableError::InstructionOutOfRange { index: 2 })
        );
    }
}
