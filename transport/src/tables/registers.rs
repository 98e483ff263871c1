//! The address-register file (docs/design.md §3, "Address registers").
//!
//! One node-wide file of 64-bit registers, each with protection bits for senders
//! ([`RegProt`]). Connections see a [`RegWindow`] of it; endpoints expose a window of
//! global registers. Windows are ranges handed out by a first-fit allocator
//! ([`RegisterFile::alloc`]); any sub-range of an allocated range is a window too, so
//! windows may nest and overlap and several connections may share registers.
//!
//! A message names registers by a byte relative to a window and the operation logic
//! resolves it with [`RegWindow::resolve`]; nothing here trusts a name from the wire
//! without that bounds check. What this module must never do: hand out a register
//! outside the file (every accessor is bounds-checked and fallible), or allocate after
//! [`RegisterFile::new`] except in [`RegisterFile::free`]'s free list.

use std::ops::{BitAnd, BitOr};

use super::TableError;

/// What a sender may do with a register (the destination itself may do anything).
///
/// A message's use of a register needs: as its address (`ra`: indirect, indexed,
/// post-increment) `INDIRECT`, its stride (`ra + 1`) nothing; as a register
/// operation's destination `WRITE`, as its source `READ`; as a register atomic's target
/// `READ | WRITE`; as a conditional's operand nothing. Names an instruction carries
/// itself (instruction-pointer messages) need nothing; names it takes from the message
/// are checked the same way. The API crate's `deposit::protection` page has the whole
/// table and the seed's priority queue set up with it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
pub struct RegProt(u8);

impl RegProt {
    /// Destination-only: a sender may not touch it (conditionals may still test it).
    pub const NONE: RegProt = RegProt(0);
    /// Its value may be returned to a sender (register atomics) or copied by a register
    /// operation into another register.
    pub const READ: RegProt = RegProt(1);
    /// A sender may set or modify it (register operations, register atomics).
    pub const WRITE: RegProt = RegProt(2);
    /// A sender may use it as an address, and post-increment it, without learning or
    /// setting its value.
    pub const INDIRECT: RegProt = RegProt(4);
    /// Every protection bit.
    pub const ALL: RegProt = RegProt(7);

    /// Whether every bit in `other` is in `self`.
    pub const fn contains(self, other: RegProt) -> bool {
        self.0 & other.0 == other.0
    }

    /// Bits in either.
    pub const fn union(self, other: RegProt) -> RegProt {
        RegProt(self.0 | other.0)
    }

    /// Bits in both.
    pub const fn intersection(self, other: RegProt) -> RegProt {
        RegProt(self.0 & other.0)
    }

    /// The raw bits (read = 1, write = 2, indirect = 4).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Protection from raw bits, ignoring unknown ones.
    pub const fn from_bits_truncate(bits: u8) -> RegProt {
        RegProt(bits & RegProt::ALL.0)
    }
}

impl BitOr for RegProt {
    type Output = RegProt;
    fn bitor(self, rhs: RegProt) -> RegProt {
        self.union(rhs)
    }
}

impl BitAnd for RegProt {
    type Output = RegProt;
    fn bitand(self, rhs: RegProt) -> RegProt {
        self.intersection(rhs)
    }
}

/// A range of the register file: `len` registers from absolute index `base`. Names in
/// messages are relative to a window.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
pub struct RegWindow {
    /// Absolute index of the window's register 0.
    pub base: u32,
    /// Number of registers in the window.
    pub len: u32,
}

impl RegWindow {
    /// The empty window: every name is out of range.
    pub const EMPTY: RegWindow = RegWindow { base: 0, len: 0 };

    /// The `len` registers from `offset` of this window (nesting, sharing), or `None`
    /// when they do not all lie inside it.
    pub const fn sub(self, offset: u32, len: u32) -> Option<RegWindow> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Some(RegWindow {
                base: self.base + offset,
                len,
            }),
            _ => None,
        }
    }

    /// Absolute index of the window's register `n`, or `None` when `n` is outside it.
    #[inline]
    pub const fn resolve(self, n: u8) -> Option<u32> {
        if (n as u32) < self.len {
            self.base.checked_add(n as u32)
        } else {
            None
        }
    }

    /// Whether the window holds no register.
    pub const fn is_empty(self) -> bool {
        self.len == 0
    }

    /// One past the last absolute index (u64: never overflows).
    pub const fn end(self) -> u64 {
        self.base as u64 + self.len as u64
    }
}

/// The node-wide register file: values, protections and an allocator of windows. A
/// shard's file holds its own range of absolute indices (`first..`), so that a window
/// names the shard it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RegisterFile {
    first: u32,
    values: Vec<u64>,
    prots: Vec<RegProt>,
    free: Ranges,
}

/// A first-fit allocator of ranges of `0..capacity` (register windows, instruction
/// windows): the free ranges, sorted by base, never adjacent (coalesced).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Ranges {
    free: Vec<RegWindow>,
}

impl Ranges {
    /// All of `first..first + capacity` free.
    pub(crate) fn new_at(first: u32, capacity: u32) -> Self {
        let free = if capacity == 0 {
            Vec::new()
        } else {
            vec![RegWindow {
                base: first,
                len: capacity,
            }]
        };
        Self { free }
    }

    /// Takes `n` (not 0) consecutive indices, first fit; on failure the largest free
    /// range.
    pub(crate) fn alloc(&mut self, n: u32) -> Result<RegWindow, u32> {
        let Some(i) = self.free.iter().position(|w| w.len >= n) else {
            return Err(self.free.iter().map(|w| w.len).max().unwrap_or(0));
        };
        let f = &mut self.free[i];
        let window = RegWindow {
            base: f.base,
            len: n,
        };
        f.base += n;
        f.len -= n;
        if f.len == 0 {
            self.free.remove(i);
        }
        Ok(window)
    }

    /// Gives `w` (inside the capacity, checked by the caller) back; refuses a range
    /// overlapping free ones (a double free).
    pub(crate) fn free(&mut self, w: RegWindow) -> Result<(), ()> {
        if w.is_empty() {
            return Ok(());
        }
        let i = self.free.partition_point(|f| f.base < w.base);
        let overlaps_prev = i > 0 && self.free[i - 1].end() > u64::from(w.base);
        let overlaps_next = self
            .free
            .get(i)
            .is_some_and(|f| u64::from(f.base) < w.end());
        if overlaps_prev || overlaps_next {
            return Err(());
        }
        self.free.insert(i, w);
        // Coalesce with the next, then with the previous range.
        if i + 1 < self.free.len() && self.free[i].end() == u64::from(self.free[i + 1].base) {
            self.free[i].len += self.free[i + 1].len;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].end() == u64::from(self.free[i].base) {
            self.free[i - 1].len += self.free[i].len;
            self.free.remove(i);
        }
        Ok(())
    }
}

impl RegisterFile {
    /// A file of `capacity` registers, all zero, destination-only ([`RegProt::NONE`]),
    /// all free.
    pub fn new(capacity: u32) -> Self {
        Self::new_at(0, capacity)
    }

    /// A file of the `capacity` registers from absolute index `first` (a shard's).
    pub fn new_at(first: u32, capacity: u32) -> Self {
        Self {
            first,
            values: vec![0; capacity as usize],
            prots: vec![RegProt::NONE; capacity as usize],
            free: Ranges::new_at(first, capacity),
        }
    }

    /// A file of no registers (allocates nothing).
    pub const fn empty() -> Self {
        Self {
            first: 0,
            values: Vec::new(),
            prots: Vec::new(),
            free: Ranges { free: Vec::new() },
        }
    }

    /// Number of registers in the file.
    pub fn capacity(&self) -> u32 {
        self.values.len() as u32
    }

    /// Whether every register of `w` is in this file.
    pub fn holds(&self, w: RegWindow) -> bool {
        w.base >= self.first && w.end() <= u64::from(self.first) + self.values.len() as u64
    }

    /// Index into the vectors of absolute register `abs` (out of range: past them).
    #[inline]
    fn at(&self, abs: u32) -> usize {
        abs.wrapping_sub(self.first) as usize
    }

    /// Allocates `n` consecutive registers (first fit), zeroed and destination-only.
    pub fn alloc(&mut self, n: u32) -> Result<RegWindow, TableError> {
        if n == 0 {
            return Err(TableError::EmptyRegisterWindow);
        }
        let window = self
            .free
            .alloc(n)
            .map_err(|largest| TableError::RegistersExhausted { wanted: n, largest })?;
        let range = self.at(window.base)..self.at(window.base) + window.len as usize;
        self.values[range.clone()].fill(0);
        self.prots[range].fill(RegProt::NONE);
        Ok(window)
    }

    /// Returns a window (all of an allocation, or part of one) to the free list.
    /// Refuses a window outside the file or overlapping free registers (a double free).
    pub fn free(&mut self, w: RegWindow) -> Result<(), TableError> {
        if w.is_empty() {
            return Ok(());
        }
        if !self.holds(w) {
            return Err(TableError::RegisterOutOfRange {
                index: w.base,
                capacity: self.capacity(),
            });
        }
        self.free
            .free(w)
            .map_err(|()| TableError::RegistersNotAllocated { window: w })?;
        Ok(())
    }

    /// Value of register `abs`.
    #[inline]
    pub fn get(&self, abs: u32) -> Option<u64> {
        self.values.get(self.at(abs)).copied()
    }

    /// Sets register `abs` to `v`.
    #[inline]
    pub fn set(&mut self, abs: u32, v: u64) -> Result<(), TableError> {
        let (capacity, i) = (self.capacity(), self.at(abs));
        let r = self
            .values
            .get_mut(i)
            .ok_or(TableError::RegisterOutOfRange {
                index: abs,
                capacity,
            })?;
        *r = v;
        Ok(())
    }

    /// Protection of register `abs`.
    #[inline]
    pub fn prot(&self, abs: u32) -> Option<RegProt> {
        self.prots.get(self.at(abs)).copied()
    }

    /// Sets the protection of register `abs`.
    pub fn set_prot(&mut self, abs: u32, p: RegProt) -> Result<(), TableError> {
        let (capacity, i) = (self.capacity(), self.at(abs));
        let r = self
            .prots
            .get_mut(i)
            .ok_or(TableError::RegisterOutOfRange {
                index: abs,
                capacity,
            })?;
        *r = p;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protections_combine_as_sets() {
        let ri = RegProt::READ | RegProt::INDIRECT;
        assert!(ri.contains(RegProt::READ) && ri.contains(RegProt::INDIRECT));
        assert!(!ri.contains(RegProt::WRITE));
        assert!(!ri.contains(RegProt::READ | RegProt::WRITE));
        assert!(RegProt::ALL.contains(ri) && ri.contains(RegProt::NONE));
        assert_eq!(ri & RegProt::WRITE, RegProt::NONE);
        assert_eq!(ri.bits(), 5);
        assert_eq!(RegProt::from_bits_truncate(0xff), RegProt::ALL);
        assert_eq!(RegProt::default(), RegProt::NONE);
    }

    #[test]
    fn windows_resolve_names_inside_them_only() {
        let w = RegWindow { base: 10, len: 4 };
        assert_eq!(w.resolve(0), Some(10));
        assert_eq!(w.resolve(3), Some(13));
        assert_eq!(w.resolve(4), None);
        assert_eq!(w.resolve(255), None);
        assert_eq!(RegWindow::EMPTY.resolve(0), None);
        // A window at the very top of the index space never wraps.
        let top = RegWindow {
            base: u32::MAX,
            len: 2,
        };
        assert_eq!(top.resolve(0), Some(u32::MAX));
        assert_eq!(top.resolve(1), None);
        assert_eq!(top.end(), u32::MAX as u64 + 2);
    }

    #[test]
    fn sub_windows_nest_inside_their_parent() {
        let w = RegWindow { base: 100, len: 8 };
        assert_eq!(w.sub(2, 3), Some(RegWindow { base: 102, len: 3 }));
        assert_eq!(w.sub(0, 8), Some(w));
        assert_eq!(w.sub(8, 0), Some(RegWindow { base: 108, len: 0 }));
        assert_eq!(w.sub(6, 3), None);
        assert_eq!(w.sub(9, 0), None);
        assert_eq!(w.sub(u32::MAX, 2), None);
        // Nested twice and resolved: the same absolute register.
        let inner = w.sub(2, 4).unwrap().sub(1, 2).unwrap();
        assert_eq!(inner.resolve(0), w.resolve(3));
    }

    #[test]
    fn allocation_is_first_fit_and_zeroes_what_it_hands_out() {
        let mut f = RegisterFile::new(16);
        let a = f.alloc(4).unwrap();
        let b = f.alloc(4).unwrap();
        let c = f.alloc(8).unwrap();
        assert_eq!((a.base, b.base, c.base), (0, 4, 8));
        assert_eq!(
            f.alloc(1),
            Err(TableError::RegistersExhausted {
                wanted: 1,
                largest: 0
            })
        );
        f.set(5, 77).unwrap();
        f.set_prot(5, RegProt::ALL).unwrap();
        f.free(b).unwrap();
        assert_eq!(
            f.alloc(5),
            Err(TableError::RegistersExhausted {
                wanted: 5,
                largest: 4
            })
        );
        let b2 = f.alloc(2).unwrap();
        assert_eq!(b2, RegWindow { base: 4, len: 2 });
        assert_eq!((f.get(5), f.prot(5)), (Some(0), Some(RegProt::NONE)));
        assert_eq!(f.alloc(0), Err(TableError::EmptyRegisterWindow));
    }

    #[test]
    fn freeing_coalesces_and_refuses_double_frees() {
        let mut f = RegisterFile::new(12);
        let w: Vec<_> = (0..4).map(|_| f.alloc(3).unwrap()).collect();
        f.free(w[1]).unwrap();
        f.free(w[3]).unwrap();
        f.free(w[2]).unwrap(); // joins 3..12
        assert_eq!(
            f.free(w[2]),
            Err(TableError::RegistersNotAllocated { window: w[2] })
        );
        assert_eq!(f.alloc(9).unwrap(), RegWindow { base: 3, len: 9 });
        // Partial free of an allocation, then the rest.
        f.free(RegWindow { base: 0, len: 1 }).unwrap();
        f.free(RegWindow { base: 1, len: 2 }).unwrap();
        assert_eq!(
            f.free(RegWindow { base: 2, len: 2 }),
            Err(TableError::RegistersNotAllocated {
                window: RegWindow { base: 2, len: 2 }
            })
        );
        assert_eq!(f.alloc(3).unwrap().base, 0);
        assert_eq!(
            f.free(RegWindow { base: 11, len: 2 }),
            Err(TableError::RegisterOutOfRange {
                index: 11,
                capacity: 12
            })
        );
        assert_eq!(f.free(RegWindow::EMPTY), Ok(()));
    }

    #[test]
    fn accessors_are_bounds_checked() {
        let mut f = RegisterFile::new(2);
        assert_eq!(f.capacity(), 2);
        f.set(1, u64::MAX).unwrap();
        assert_eq!(f.get(1), Some(u64::MAX));
        assert_eq!(f.get(2), None);
        assert_eq!(f.prot(2), None);
        assert!(f.set(2, 1).is_err());
        assert!(f.set_prot(u32::MAX, RegProt::ALL).is_err());
        let e = RegisterFile::empty();
        assert_eq!((e.capacity(), e.get(0)), (0, None));
        assert_eq!(RegisterFile::new(0), RegisterFile::empty());
    }
}
