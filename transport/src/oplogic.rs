//! Operation logic: the one place that knows what an operation means.
//!
//! [`execute`] takes a decoded control part ([`ControlRepr`]), its payload and an
//! [`EndpointAccess`] (the target endpoint as the operation may see it) and returns the
//! [`Effect`] or a [`Trap`]. It is pure: no I/O, no clock, no allocation, and it never
//! panics on values from the wire. Every range an operation touches is checked — bounds
//! with overflow, endpoint and page rights, presence — before a single byte is stored,
//! so a trapped message has written nothing (DESIGN.md §3, Exceptions).
//!
//! This first slice executes direct-addressed writes (`WRITE`, `WRITE_MASKED`). Address
//! registers, compound operations, reads and atomics extend the same shape into the
//! seed's table-driven receive controller (Fig. 10): more opcodes in [`execute`]'s decode
//! table, more [`Trap`] variants (each with a [`RemoteStatus`] and a [`DropReason`]),
//! more [`Effect`]s (reply to send, event to post).
//!
//! [`TlbAccess`] is the real target, through the worker's software TLB; [`VecAccess`] is
//! a plain buffer for tests and fuzzing.

use crate::tables::{EndpointEntry, EndpointId, Rights, PAGE_SHIFT, PAGE_SIZE};
use crate::tlb::{Fault, Tlb};
use crate::wire::cell::op;
use crate::wire::ControlRepr;

/// The kind of access an operation makes to endpoint memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Remote read (needs [`Rights::REMOTE_READ`]).
    Read,
    /// Remote write (needs [`Rights::REMOTE_WRITE`]).
    Write,
    /// Remote atomic (needs [`Rights::REMOTE_ATOMIC`]).
    Atomic,
}

impl Access {
    /// The right this access needs.
    pub fn rights(self) -> Rights {
        match self {
            Access::Read => Rights::REMOTE_READ,
            Access::Write => Rights::REMOTE_WRITE,
            Access::Atomic => Rights::REMOTE_ATOMIC,
        }
    }
}

/// Why a message was not executed. Error traps discard the message; faults
/// ([`Trap::is_fault`]) keep it for the host to repair. Either way nothing was written.
#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trap {
    /// The opcode is not one this receiver executes.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// `[ea, ea + len)` is not inside the endpoint of `bound` bytes (or overflows).
    #[error("{len} bytes at {ea:#x} are outside the endpoint of {bound} bytes")]
    OutOfBounds {
        /// Effective address.
        ea: u64,
        /// Length of the access.
        len: u64,
        /// Length of the endpoint.
        bound: u64,
    },
    /// The endpoint or page at `ea` does not permit `access`.
    #[error("{access:?} access at {ea:#x} denied")]
    AccessDenied {
        /// First address denied.
        ea: u64,
        /// The access attempted.
        access: Access,
    },
    /// Logical page `page` is not present: a fault the host must repair.
    #[error("page {page} not present")]
    PageNotPresent {
        /// The logical page.
        page: u64,
    },
    /// The length field is not valid for the opcode.
    #[error("length {length} not valid for opcode {opcode:#04x}")]
    BadLength {
        /// The opcode.
        opcode: u8,
        /// The length field.
        length: u32,
    },
    /// Fewer payload bytes arrived than the length field announces.
    #[error("length {length} announced but only {payload} payload bytes present")]
    PayloadTruncated {
        /// The length field.
        length: u32,
        /// Payload bytes present.
        payload: usize,
    },
}

impl Trap {
    /// The status returned to the sender in a NAK.
    pub fn status(&self) -> RemoteStatus {
        match self {
            Trap::OutOfBounds { .. } | Trap::AccessDenied { .. } => RemoteStatus::RemoteAccessError,
            Trap::UnknownOpcode(_) | Trap::BadLength { .. } => RemoteStatus::RemoteOperationError,
            Trap::PayloadTruncated { .. } => RemoteStatus::RemoteInvalidRequest,
            Trap::PageNotPresent { .. } => RemoteStatus::PageFault,
        }
    }

    /// The counter this trap moves.
    pub fn reason(&self) -> DropReason {
        match self {
            Trap::UnknownOpcode(_) => DropReason::UnknownOpcode,
            Trap::OutOfBounds { .. } => DropReason::OutOfBounds,
            Trap::AccessDenied { .. } => DropReason::AccessDenied,
            Trap::PageNotPresent { .. } => DropReason::PageNotPresent,
            Trap::BadLength { .. } => DropReason::BadLength,
            Trap::PayloadTruncated { .. } => DropReason::Truncated,
        }
    }

    /// Whether this is a fault the host must repair (the connection enters the
    /// exceptioned state and the message is kept) rather than an error trap (the
    /// message is discarded).
    pub fn is_fault(&self) -> bool {
        matches!(self, Trap::PageNotPresent { .. })
    }
}

/// Status codes that travel back to the sender in a NAK (a `u8` on the wire).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteStatus {
    /// Executed.
    Ok = 0,
    /// Bounds or rights violation.
    RemoteAccessError = 1,
    /// Unknown opcode, bad length, bad check byte.
    RemoteOperationError = 2,
    /// Malformed message (e.g. payload shorter than its length).
    RemoteInvalidRequest = 3,
    /// A fault the receiving host must repair (page not present).
    PageFault = 4,
}

impl RemoteStatus {
    /// The status for a wire code, `None` for codes this version does not know.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            0 => RemoteStatus::Ok,
            1 => RemoteStatus::RemoteAccessError,
            2 => RemoteStatus::RemoteOperationError,
            3 => RemoteStatus::RemoteInvalidRequest,
            4 => RemoteStatus::PageFault,
            _ => return None,
        })
    }
}

/// Reasons a cell or frame is refused, for per-reason counters (also used by the
/// worker for frame-level drops). Use `reason as usize` to index a `[u64; COUNT]`.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Frame CRC32C mismatch.
    BadCrc,
    /// Control-part check byte mismatch.
    BadCheck,
    /// Frame or cell shorter than its headers say.
    Truncated,
    /// Not addressed to this node / not our protocol.
    NotOurs,
    /// Unsupported transport version.
    BadVersion,
    /// No such connection.
    UnknownConnection,
    /// Connection key mismatch.
    WrongKey,
    /// Sequence number outside the receive window.
    OutOfSequence,
    /// Unknown opcode.
    UnknownOpcode,
    /// Outside the endpoint.
    OutOfBounds,
    /// Endpoint or page rights refuse the access.
    AccessDenied,
    /// Page not present.
    PageNotPresent,
    /// Length not valid for the opcode.
    BadLength,
    /// No receive buffer (mbuf) available.
    NoBuffer,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 14;

    /// Every reason, in counter-index order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::BadCrc,
        DropReason::BadCheck,
        DropReason::Truncated,
        DropReason::NotOurs,
        DropReason::BadVersion,
        DropReason::UnknownConnection,
        DropReason::WrongKey,
        DropReason::OutOfSequence,
        DropReason::UnknownOpcode,
        DropReason::OutOfBounds,
        DropReason::AccessDenied,
        DropReason::PageNotPresent,
        DropReason::BadLength,
        DropReason::NoBuffer,
    ];

    /// Counter name (snake case), for stats output.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::BadCrc => "bad_crc",
            DropReason::BadCheck => "bad_check",
            DropReason::Truncated => "truncated",
            DropReason::NotOurs => "not_ours",
            DropReason::BadVersion => "bad_version",
            DropReason::UnknownConnection => "unknown_connection",
            DropReason::WrongKey => "wrong_key",
            DropReason::OutOfSequence => "out_of_sequence",
            DropReason::UnknownOpcode => "unknown_opcode",
            DropReason::OutOfBounds => "out_of_bounds",
            DropReason::AccessDenied => "access_denied",
            DropReason::PageNotPresent => "page_not_present",
            DropReason::BadLength => "bad_length",
            DropReason::NoBuffer => "no_buffer",
        }
    }
}

/// The target endpoint of an operation, as the operation logic may touch it.
pub trait EndpointAccess {
    /// Length of the endpoint in bytes.
    fn len(&self) -> u64;

    /// Whether the endpoint is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks `[ea, ea + len)` is inside the endpoint, permitted for `access` (endpoint
    /// and page rights) and present. No side effects on memory.
    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap>;

    /// Stores `data` at `ea` (already checked), crossing pages as needed, writing the
    /// last byte last (after a Release fence) so a reader spinning on the last byte sees
    /// the whole deposit.
    fn store(&mut self, ea: u64, data: &[u8]);
}

/// The effect of an executed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// Bytes deposited in `[ea, ea + len)` (for a masked write: the span from the lowest
    /// to the highest word written).
    Deposited {
        /// First byte of the span.
        ea: u64,
        /// Length of the span.
        len: u32,
    },
}

/// Bytes of a masked write's block.
const MASKED_BLOCK: u32 = 32;
/// Bytes of one word of a masked write.
const WORD: u64 = 4;

/// Executes one message against `target`: the whole range is checked before any byte is
/// stored, so on a trap nothing was written.
///
/// - `WRITE`: `ea = operand`; the first `length` bytes of `payload` are stored (length 0
///   is a no-op deposit, still bounds- and rights-checked).
/// - `WRITE_MASKED`: `length` must be 32; word `i` of the 32-byte block (4 bytes at
///   `ea + 4i`) is stored when mask bit `i` is set; the checked range spans the lowest to
///   the highest set word; mask 0 stores nothing (checked like a zero-length `WRITE`).
///
/// `payload` may be longer than `length` (padding of the last cell); shorter is a trap.
pub fn execute(
    control: &ControlRepr,
    payload: &[u8],
    target: &mut impl EndpointAccess,
) -> Result<Effect, Trap> {
    match control.opcode {
        op::WRITE => write(control, payload, target),
        op::WRITE_MASKED => write_masked(control, payload, target),
        other => Err(Trap::UnknownOpcode(other)),
    }
}

/// The first `length` bytes of `payload`.
fn payload_of<'p>(control: &ControlRepr, payload: &'p [u8]) -> Result<&'p [u8], Trap> {
    payload
        .get(..control.length as usize)
        .ok_or(Trap::PayloadTruncated {
            length: control.length,
            payload: payload.len(),
        })
}

fn write(
    control: &ControlRepr,
    payload: &[u8],
    target: &mut impl EndpointAccess,
) -> Result<Effect, Trap> {
    let data = payload_of(control, payload)?;
    let ea = u64::from(control.operand);
    target.check(ea, data.len() as u64, Access::Write)?;
    if !data.is_empty() {
        target.store(ea, data);
    }
    Ok(Effect::Deposited {
        ea,
        len: control.length,
    })
}

fn write_masked(
    control: &ControlRepr,
    payload: &[u8],
    target: &mut impl EndpointAccess,
) -> Result<Effect, Trap> {
    if control.length != MASKED_BLOCK {
        return Err(Trap::BadLength {
            opcode: control.opcode,
            length: control.length,
        });
    }
    let block = payload_of(control, payload)?;
    let ea = u64::from(control.operand);
    let mask = control.mask;
    if mask == 0 {
        // Like a zero-length WRITE: nothing stored, but the address and right must hold.
        target.check(ea, 0, Access::Write)?;
        return Ok(Effect::Deposited { ea, len: 0 });
    }
    let lo = u64::from(mask.trailing_zeros());
    let hi = 7 - u64::from(mask.leading_zeros());
    let start = ea + lo * WORD;
    let span = (hi - lo + 1) * WORD;
    target.check(start, span, Access::Write)?;
    for (i, word) in block.chunks_exact(WORD as usize).enumerate() {
        if mask & (1 << i) != 0 {
            target.store(ea + i as u64 * WORD, word);
        }
    }
    Ok(Effect::Deposited {
        ea: start,
        len: span as u32,
    })
}

/// Checks `[ea, ea + len)` against a bound, returning the end.
fn check_bounds(ea: u64, len: u64, bound: u64) -> Result<u64, Trap> {
    match ea.checked_add(len) {
        Some(end) if end <= bound => Ok(end),
        _ => Err(Trap::OutOfBounds { ea, len, bound }),
    }
}

/// Logical pages covering the non-empty range `[ea, end)`.
fn pages_of(ea: u64, end: u64) -> std::ops::RangeInclusive<u64> {
    (ea >> PAGE_SHIFT)..=((end - 1) >> PAGE_SHIFT)
}

/// [`EndpointAccess`] over a real endpoint, through the worker's software TLB.
pub struct TlbAccess<'a> {
    id: EndpointId,
    ep: &'a EndpointEntry,
    tlb: &'a mut Tlb,
}

impl<'a> TlbAccess<'a> {
    /// The endpoint numbered `id`, whose entry is `ep`, translated through `tlb`.
    pub fn new(id: EndpointId, ep: &'a EndpointEntry, tlb: &'a mut Tlb) -> Self {
        Self { id, ep, tlb }
    }

    /// Host address of `ea`, which a successful `check` covered.
    fn host(&mut self, ea: u64) -> Option<*mut u8> {
        let (base, _) = self
            .tlb
            .translate(self.id, self.ep, ea >> PAGE_SHIFT)
            .ok()?;
        Some(base.wrapping_add((ea & (PAGE_SIZE - 1)) as usize))
    }
}

impl EndpointAccess for TlbAccess<'_> {
    fn len(&self) -> u64 {
        self.ep.len()
    }

    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        let end = check_bounds(ea, len, self.ep.len())?;
        if !self.ep.rights().contains(access.rights()) {
            return Err(Trap::AccessDenied { ea, access });
        }
        if len == 0 {
            return Ok(());
        }
        for page in pages_of(ea, end) {
            match self.tlb.translate(self.id, self.ep, page) {
                Ok((_, rights)) if rights.contains(access.rights()) => {}
                Ok(_) => {
                    return Err(Trap::AccessDenied {
                        ea: ea.max(page << PAGE_SHIFT),
                        access,
                    })
                }
                Err(Fault::PageNotPresent { page }) => return Err(Trap::PageNotPresent { page }),
                // Unreachable after the bounds check, but never trust that on this path.
                Err(Fault::OutOfRange { .. }) => {
                    return Err(Trap::OutOfBounds {
                        ea,
                        len,
                        bound: self.ep.len(),
                    })
                }
            }
        }
        Ok(())
    }

    fn store(&mut self, ea: u64, data: &[u8]) {
        let Some((&last, body)) = data.split_last() else {
            return;
        };
        let mut at = ea;
        let mut rest = body;
        while !rest.is_empty() {
            let in_page = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let n = in_page.min(rest.len());
            let Some(dst) = self.host(at) else { return };
            // SAFETY: `check` proved `[ea, ea + data.len())` lies inside the endpoint and
            // is present; the endpoint lies inside its `EndpointMemory` (checked by
            // `EndpointEntry::new`), which `self.ep` keeps alive through its `Arc` and
            // whose page map cannot change while we borrow it. `[dst, dst + n)` stays in
            // one logical page, and `data` is a Rust buffer, never endpoint memory.
            unsafe { crate::mem::copy_bytes(dst, rest.as_ptr(), n) };
            at += n as u64;
            rest = &rest[n..];
        }
        let Some(dst) = self.host(at) else { return };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: as above; `at = ea + data.len() - 1` is the last checked byte.
        unsafe { std::ptr::write_volatile(dst, last) };
    }
}

/// [`EndpointAccess`] over a plain buffer, for tests and fuzzing. Pages whose entry is
/// missing from `pages_present` / `page_rights` count as present / all rights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecAccess {
    /// The endpoint's bytes; its length is the endpoint's.
    pub bytes: Vec<u8>,
    /// Endpoint rights.
    pub rights: Rights,
    /// Present flag per logical page.
    pub pages_present: Vec<bool>,
    /// Rights per logical page (intersected with `rights`).
    pub page_rights: Vec<Rights>,
}

impl VecAccess {
    /// A zeroed endpoint of `len` bytes with `rights`, every page present with all rights.
    pub fn new(len: usize, rights: Rights) -> Self {
        let pages = (len as u64).div_ceil(PAGE_SIZE) as usize;
        Self {
            bytes: vec![0; len],
            rights,
            pages_present: vec![true; pages],
            page_rights: vec![Rights::ALL; pages],
        }
    }
}

impl EndpointAccess for VecAccess {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        let end = check_bounds(ea, len, self.len())?;
        if !self.rights.contains(access.rights()) {
            return Err(Trap::AccessDenied { ea, access });
        }
        if len == 0 {
            return Ok(());
        }
        for page in pages_of(ea, end) {
            let i = page as usize;
            if !self.pages_present.get(i).copied().unwrap_or(true) {
                return Err(Trap::PageNotPresent { page });
            }
            let rights = self.page_rights.get(i).copied().unwrap_or(Rights::ALL);
            if !rights.contains(access.rights()) {
                return Err(Trap::AccessDenied {
                    ea: ea.max(page << PAGE_SHIFT),
                    access,
                });
            }
        }
        Ok(())
    }

    fn store(&mut self, ea: u64, data: &[u8]) {
        let start = ea as usize;
        if let Some(dst) = self.bytes.get_mut(start..start.saturating_add(data.len())) {
            dst.copy_from_slice(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::EndpointMemory;
    use crate::tables::EndpointEntry;
    use crate::wire::cell::flags;
    use std::sync::Arc;

    const PAGE: usize = PAGE_SIZE as usize;

    fn write_op(ea: u32, length: u32) -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE,
            flags: flags::LAST,
            operand: ea,
            length,
            ..ControlRepr::default()
        }
    }

    fn masked_op(ea: u32, mask: u8) -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE_MASKED,
            mask,
            flags: flags::LAST,
            operand: ea,
            length: 32,
            ..ControlRepr::default()
        }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    /// Runs `control` on a fresh 3-page VecAccess modified by `setup`; asserts a trap and
    /// that nothing was written.
    fn assert_traps_unchanged(
        control: ControlRepr,
        payload: &[u8],
        setup: impl FnOnce(&mut VecAccess),
        expected: Trap,
    ) {
        let mut t = VecAccess::new(3 * PAGE, Rights::ALL);
        setup(&mut t);
        let before = t.clone();
        assert_eq!(execute(&control, payload, &mut t), Err(expected));
        assert_eq!(t, before);
    }

    #[test]
    fn writes_are_byte_exact_at_page_boundaries() {
        for &(ea, len) in &[
            (0usize, 1usize),
            (0, 32),
            (4095, 1),
            (4095, 2),
            (4090, 12),
            (4096, 4096),
            (100, 8000),
            (3 * PAGE - 7, 7),
            (0, 3 * PAGE),
        ] {
            let mut t = VecAccess::new(3 * PAGE, Rights::ALL);
            let data = pattern(len, ea as u8);
            let effect = execute(&write_op(ea as u32, len as u32), &data, &mut t).unwrap();
            assert_eq!(
                effect,
                Effect::Deposited {
                    ea: ea as u64,
                    len: len as u32
                }
            );
            let mut expected = vec![0u8; 3 * PAGE];
            expected[ea..ea + len].copy_from_slice(&data);
            assert!(t.bytes == expected, "ea {ea} len {len}");
        }
    }

    #[test]
    fn zero_length_write_is_a_no_op_deposit() {
        let mut t = VecAccess::new(PAGE, Rights::ALL);
        assert_eq!(
            execute(&write_op(4096, 0), &[], &mut t),
            Ok(Effect::Deposited { ea: 4096, len: 0 })
        );
        assert!(t.bytes.iter().all(|&b| b == 0));
    }

    #[test]
    fn payload_padding_is_ignored() {
        let mut t = VecAccess::new(PAGE, Rights::ALL);
        execute(&write_op(10, 3), &[1, 2, 3, 4, 5], &mut t).unwrap();
        assert_eq!(&t.bytes[9..14], &[0, 1, 2, 3, 0]);
    }

    #[test]
    fn masked_writes_store_only_selected_words() {
        let block = pattern(32, 9);
        for mask in [0x01u8, 0x80, 0xff, 0x81, 0x5a, 0x3c, 0x10] {
            let ea = 4096 - 12;
            let mut t = VecAccess::new(2 * PAGE, Rights::ALL);
            let effect = execute(&masked_op(ea as u32, mask), &block, &mut t).unwrap();
            let mut expected = vec![0u8; 2 * PAGE];
            for i in 0..8 {
                if mask & (1 << i) != 0 {
                    expected[ea + 4 * i..ea + 4 * i + 4].copy_from_slice(&block[4 * i..4 * i + 4]);
                }
            }
            assert!(t.bytes == expected, "mask {mask:#x}");
            let lo = mask.trailing_zeros() as u64;
            let hi = 7 - mask.leading_zeros() as u64;
            assert_eq!(
                effect,
                Effect::Deposited {
                    ea: ea as u64 + 4 * lo,
                    len: ((hi - lo + 1) * 4) as u32
                }
            );
        }
    }

    #[test]
    fn masked_write_with_empty_mask_is_a_no_op() {
        let mut t = VecAccess::new(PAGE, Rights::ALL);
        assert_eq!(
            execute(&masked_op(100, 0), &[7; 32], &mut t),
            Ok(Effect::Deposited { ea: 100, len: 0 })
        );
        assert!(t.bytes.iter().all(|&b| b == 0));
        assert_traps_unchanged(
            masked_op(u32::MAX, 0),
            &[7; 32],
            |_| {},
            Trap::OutOfBounds {
                ea: u32::MAX as u64,
                len: 0,
                bound: 3 * PAGE as u64,
            },
        );
    }

    #[test]
    fn masked_write_checks_only_the_span_of_set_words() {
        // Words 0..=1 fit at the end of the endpoint; words beyond would not.
        let mut t = VecAccess::new(PAGE, Rights::ALL);
        execute(&masked_op(4088, 0x03), &[9; 32], &mut t).unwrap();
        assert_eq!(&t.bytes[4088..], &[9; 8]);
        assert_traps_unchanged(
            masked_op(3 * PAGE as u32 - 8, 0x04),
            &[9; 32],
            |_| {},
            Trap::OutOfBounds {
                ea: 3 * PAGE as u64,
                len: 4,
                bound: 3 * PAGE as u64,
            },
        );
    }

    #[test]
    fn out_of_bounds_writes_trap_and_write_nothing() {
        let bound = 3 * PAGE as u64;
        assert_traps_unchanged(
            write_op(3 * PAGE as u32 - 4, 5),
            &[1; 5],
            |_| {},
            Trap::OutOfBounds {
                ea: bound - 4,
                len: 5,
                bound,
            },
        );
        assert_traps_unchanged(
            write_op(u32::MAX, 32),
            &[1; 32],
            |_| {},
            Trap::OutOfBounds {
                ea: u32::MAX as u64,
                len: 32,
                bound,
            },
        );
        assert_traps_unchanged(
            masked_op(u32::MAX, 0xff),
            &[1; 32],
            |_| {},
            Trap::OutOfBounds {
                ea: u32::MAX as u64,
                len: 32,
                bound,
            },
        );
        // An empty range may end exactly at the bound, not start past it.
        let mut t = VecAccess::new(3 * PAGE, Rights::ALL);
        assert!(execute(&write_op(3 * PAGE as u32, 0), &[], &mut t).is_ok());
        assert_traps_unchanged(
            write_op(3 * PAGE as u32 + 1, 0),
            &[],
            |_| {},
            Trap::OutOfBounds {
                ea: bound + 1,
                len: 0,
                bound,
            },
        );
    }

    #[test]
    fn check_handles_overflow_near_u64_max() {
        let mut t = VecAccess::new(PAGE, Rights::ALL);
        assert_eq!(
            t.check(u64::MAX - 3, 8, Access::Write),
            Err(Trap::OutOfBounds {
                ea: u64::MAX - 3,
                len: 8,
                bound: PAGE as u64
            })
        );
        assert!(t.check(u64::MAX, u64::MAX, Access::Read).is_err());
        let mem = Arc::new(EndpointMemory::alloc_ordinary(PAGE).unwrap());
        let ep = EndpointEntry::new(mem, 0, PAGE, Rights::ALL).unwrap();
        let mut tlb = Tlb::new();
        let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
        assert!(matches!(
            a.check(u64::MAX - 1, 2, Access::Write),
            Err(Trap::OutOfBounds { .. })
        ));
        assert!(a.check(1, u64::MAX, Access::Write).is_err());
    }

    #[test]
    fn rights_and_presence_traps_write_nothing() {
        let denied = |ea| Trap::AccessDenied {
            ea,
            access: Access::Write,
        };
        assert_traps_unchanged(
            write_op(10, 4),
            &[1; 4],
            |t| t.rights = Rights::REMOTE_READ | Rights::REMOTE_ATOMIC,
            denied(10),
        );
        // Read-only second page: a write starting in page 0 and spanning it is refused.
        assert_traps_unchanged(
            write_op(4000, 200),
            &[1; 200],
            |t| t.page_rights[1] = Rights::REMOTE_READ,
            denied(4096),
        );
        assert_traps_unchanged(
            masked_op(4096 - 4, 0x03),
            &[1; 32],
            |t| t.page_rights[1] = Rights::REMOTE_READ,
            denied(4096),
        );
        assert_traps_unchanged(
            write_op(8000, 500),
            &[1; 500],
            |t| t.pages_present[2] = false,
            Trap::PageNotPresent { page: 2 },
        );
    }

    #[test]
    fn malformed_messages_trap_and_write_nothing() {
        assert_traps_unchanged(
            ControlRepr {
                opcode: 0x7e,
                ..write_op(0, 4)
            },
            &[1; 4],
            |_| {},
            Trap::UnknownOpcode(0x7e),
        );
        assert_traps_unchanged(
            ControlRepr {
                opcode: op::NOP,
                ..write_op(0, 0)
            },
            &[],
            |_| {},
            Trap::UnknownOpcode(op::NOP),
        );
        for length in [0, 4, 31, 33, 64, u32::MAX] {
            assert_traps_unchanged(
                ControlRepr {
                    length,
                    ..masked_op(0, 0xff)
                },
                &[1; 64],
                |_| {},
                Trap::BadLength {
                    opcode: op::WRITE_MASKED,
                    length,
                },
            );
        }
        assert_traps_unchanged(
            write_op(0, 40),
            &[1; 39],
            |_| {},
            Trap::PayloadTruncated {
                length: 40,
                payload: 39,
            },
        );
        assert_traps_unchanged(
            write_op(0, u32::MAX),
            &[1; 8],
            |_| {},
            Trap::PayloadTruncated {
                length: u32::MAX,
                payload: 8,
            },
        );
    }

    #[test]
    fn traps_map_to_statuses_and_reasons() {
        let cases = [
            (
                Trap::UnknownOpcode(9),
                RemoteStatus::RemoteOperationError,
                DropReason::UnknownOpcode,
            ),
            (
                Trap::OutOfBounds {
                    ea: 0,
                    len: 1,
                    bound: 0,
                },
                RemoteStatus::RemoteAccessError,
                DropReason::OutOfBounds,
            ),
            (
                Trap::AccessDenied {
                    ea: 0,
                    access: Access::Atomic,
                },
                RemoteStatus::RemoteAccessError,
                DropReason::AccessDenied,
            ),
            (
                Trap::PageNotPresent { page: 3 },
                RemoteStatus::PageFault,
                DropReason::PageNotPresent,
            ),
            (
                Trap::BadLength {
                    opcode: 1,
                    length: 2,
                },
                RemoteStatus::RemoteOperationError,
                DropReason::BadLength,
            ),
            (
                Trap::PayloadTruncated {
                    length: 2,
                    payload: 1,
                },
                RemoteStatus::RemoteInvalidRequest,
                DropReason::Truncated,
            ),
        ];
        for (trap, status, reason) in cases {
            assert_eq!(trap.status(), status, "{trap}");
            assert_eq!(trap.reason(), reason, "{trap}");
            assert_eq!(trap.is_fault(), status == RemoteStatus::PageFault);
            assert_eq!(RemoteStatus::from_u8(status as u8), Some(status));
        }
        assert_eq!(RemoteStatus::from_u8(0), Some(RemoteStatus::Ok));
        assert_eq!(RemoteStatus::from_u8(200), None);
    }

    #[test]
    fn drop_reasons_are_indexed_in_order_with_unique_names() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            for other in &DropReason::ALL[..i] {
                assert_ne!(r.name(), other.name());
            }
        }
        assert_eq!(DropReason::NoBuffer as usize, DropReason::COUNT - 1);
    }

    /// Memory of `pages` pages filled with 0xee, and its byte contents.
    fn canary_memory(pages: usize) -> Arc<EndpointMemory> {
        let mem = Arc::new(EndpointMemory::alloc_ordinary(pages * PAGE).unwrap());
        mem.fill(0, pages * PAGE, 0xee).unwrap();
        mem
    }

    fn contents(mem: &EndpointMemory) -> Vec<u8> {
        let mut v = vec![0; mem.len()];
        mem.read(0, &mut v).unwrap();
        v
    }

    #[test]
    fn tlb_access_writes_real_memory_across_pages() {
        let mem = canary_memory(6);
        // Endpoint = pages 1..5 of the memory.
        let ep = EndpointEntry::new(mem.clone(), PAGE, 4 * PAGE, Rights::ALL).unwrap();
        let mut tlb = Tlb::new();
        let data = pattern(2 * PAGE + 10, 3);
        let ea = PAGE - 5;
        let mut a = TlbAccess::new(EndpointId(1), &ep, &mut tlb);
        execute(&write_op(ea as u32, data.len() as u32), &data, &mut a).unwrap();
        execute(&masked_op(8, 0b1000_0001), &[0x11; 32], &mut a).unwrap();
        let mut expected = vec![0xee; 6 * PAGE];
        expected[PAGE + ea..PAGE + ea + data.len()].copy_from_slice(&data);
        expected[PAGE + 8..PAGE + 12].copy_from_slice(&[0x11; 4]);
        expected[PAGE + 36..PAGE + 40].copy_from_slice(&[0x11; 4]);
        assert!(contents(&mem) == expected);
        // Pages 0, 1 come from the direct mappings (hits); 2 and 3 miss in `check` and
        // hit in `store`.
        let s = tlb.stats();
        assert_eq!((s.misses, s.faults), (2, 0));
        assert!(s.hits >= 4);
    }

    #[test]
    fn nested_endpoints_enforce_their_own_rights_and_bounds() {
        let mem = canary_memory(4);
        let whole = EndpointEntry::new(mem.clone(), 0, 4 * PAGE, Rights::ALL).unwrap();
        let inner = EndpointEntry::new(mem.clone(), 2 * PAGE, PAGE, Rights::REMOTE_WRITE).unwrap();
        let read_only =
            EndpointEntry::new(mem.clone(), PAGE, 2 * PAGE, Rights::REMOTE_READ).unwrap();
        let mut tlb = Tlb::new();

        // Writing offset 0 of the inner endpoint lands at 2 * PAGE of the memory, and is
        // visible through the outer one.
        let mut a = TlbAccess::new(EndpointId(1), &inner, &mut tlb);
        execute(&write_op(0, 4), &[1, 2, 3, 4], &mut a).unwrap();
        assert_eq!(
            execute(&write_op(PAGE as u32 - 2, 4), &[9; 4], &mut a),
            Err(Trap::OutOfBounds {
                ea: PAGE as u64 - 2,
                len: 4,
                bound: PAGE as u64
            })
        );
        let mut b = [0u8; 4];
        mem.read(2 * PAGE, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);

        let before = contents(&mem);
        let mut r = TlbAccess::new(EndpointId(2), &read_only, &mut tlb);
        assert_eq!(
            execute(&write_op(PAGE as u32, 4), &[5; 4], &mut r),
            Err(Trap::AccessDenied {
                ea: PAGE as u64,
                access: Access::Write
            })
        );
        assert!(contents(&mem) == before);

        let mut w = TlbAccess::new(EndpointId(0), &whole, &mut tlb);
        execute(&write_op(3 * PAGE as u32 + 1, 2), &[6, 6], &mut w).unwrap();
        assert_eq!(mem.load_u8(3 * PAGE + 2).unwrap(), 6);
    }

    #[test]
    fn tlb_access_sees_page_map_changes() {
        let mem = canary_memory(4);
        let mut ep = EndpointEntry::new(mem.clone(), 0, 4 * PAGE, Rights::ALL).unwrap();
        let mut tlb = Tlb::new();
        let id = EndpointId(0);
        execute(
            &write_op(3 * PAGE as u32, 1),
            &[1],
            &mut TlbAccess::new(id, &ep, &mut tlb),
        )
        .unwrap();
        ep.set_page_present(3, false).unwrap();
        let before = contents(&mem);
        let mut a = TlbAccess::new(id, &ep, &mut tlb);
        assert_eq!(
            execute(
                &write_op(2 * PAGE as u32, PAGE as u32 + 1),
                &[2; PAGE + 1],
                &mut a
            ),
            Err(Trap::PageNotPresent { page: 3 })
        );
        assert!(contents(&mem) == before);
        ep.set_page_present(3, true).unwrap();
        ep.set_page_rights(3, Rights::REMOTE_READ).unwrap();
        let mut a = TlbAccess::new(id, &ep, &mut tlb);
        assert_eq!(
            execute(&write_op(3 * PAGE as u32, 1), &[3], &mut a),
            Err(Trap::AccessDenied {
                ea: 3 * PAGE as u64,
                access: Access::Write
            })
        );
        assert!(contents(&mem) == before);
        assert_eq!(tlb.stats().faults, 1);
    }

    /// xorshift64*, deterministic.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_control(rng: &mut Rng, bound: u64) -> ControlRepr {
        let opcode = match rng.below(4) {
            0 => op::WRITE,
            1 => op::WRITE_MASKED,
            _ => rng.next() as u8,
        };
        let operand = match rng.below(4) {
            0 => rng.next() as u32,
            1 => (bound - rng.below(64).min(bound)) as u32,
            2 => u32::MAX - rng.below(64) as u32,
            _ => rng.below(bound + 64) as u32,
        };
        let length = match rng.below(5) {
            0 => 32,
            1 => rng.next() as u32,
            2 => u32::MAX - rng.below(4) as u32,
            _ => rng.below(3 * PAGE as u64) as u32,
        };
        ControlRepr {
            opcode,
            mask: rng.next() as u8,
            flags: rng.next() as u8,
            operand,
            index: rng.next() as u32,
            length,
        }
    }

    #[test]
    fn random_control_parts_never_panic_nor_write_outside_the_endpoint() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let payload: Vec<u8> = (0..4 * PAGE).map(|_| rng.next() as u8 | 1).collect();

        // Real memory: endpoint = [PAGE, PAGE + 3 pages + 100) of 6 pages, canaries around.
        let mem = canary_memory(6);
        let ep_len = 3 * PAGE + 100;
        let mut ep = EndpointEntry::new(mem.clone(), PAGE, ep_len, Rights::ALL).unwrap();
        ep.set_page_rights(1, Rights::REMOTE_READ).unwrap();
        ep.set_page_present(2, false).unwrap();
        let mut tlb = Tlb::new();

        // Shadow model: a VecAccess with the same page map.
        let mut model = VecAccess::new(ep_len, Rights::ALL);
        model.bytes.fill(0xee);
        model.page_rights[1] = Rights::REMOTE_READ;
        model.pages_present[2] = false;

        let mut deposits = 0;
        for _ in 0..20_000 {
            let control = random_control(&mut rng, ep_len as u64);
            let plen = rng.below(payload.len() as u64 + 1) as usize;
            let data = &payload[..plen];
            let real = execute(
                &control,
                data,
                &mut TlbAccess::new(EndpointId(4), &ep, &mut tlb),
            );
            let shadow = execute(&control, data, &mut model);
            assert_eq!(real, shadow, "{control:?}");
            if let Ok(Effect::Deposited { ea, len }) = real {
                assert!(ea + len as u64 <= ep_len as u64);
                deposits += 1;
            }
        }
        assert!(deposits > 100, "only {deposits} deposits exercised");
        let all = contents(&mem);
        assert!(all[..PAGE].iter().all(|&b| b == 0xee));
        assert!(all[PAGE + ep_len..].iter().all(|&b| b == 0xee));
        assert!(all[PAGE..PAGE + ep_len] == model.bytes[..]);
    }
}
