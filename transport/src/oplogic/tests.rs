//! Plain deposits (`WRITE`, `WRITE_MASKED` with no registers) planned and committed
//! through both endpoint accesses: byte exactness at page boundaries, traps that write
//! nothing, nested endpoints and page-map changes seen through the TLB, and random
//! control parts run against a [`VecAccess`] shadow of real memory.

use super::*;
use crate::mem::EndpointMemory;
use crate::rng::Rng;
use crate::tables::{EndpointEntry, EndpointId, RegisterFile, Rights, PAGE_SIZE};
use crate::tlb::Tlb;
use crate::wire::cell::{flags, op};
use crate::wire::ControlRepr;
use std::sync::Arc;

const PAGE: usize = PAGE_SIZE as usize;

/// What a committed message stored: `len` bytes from `ea` (for a masked write the span
/// of the words written; length 0 at the effective address when nothing was stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Deposited {
    ea: u64,
    len: u32,
}

/// Plans `control` with no registers, then commits it: a trap changed nothing.
fn deposit(
    control: &ControlRepr,
    payload: &[u8],
    target: &mut impl EndpointAccess,
) -> Result<Deposited, Trap> {
    let mut regs = RegisterFile::empty();
    let p = plan(
        control,
        payload,
        &RegContext::none(&RegisterFile::empty()),
        target,
    )?;
    let (ea, len) = p.store.span().unwrap_or((p.event.ea, 0));
    commit(&p, &mut regs, target);
    Ok(Deposited { ea, len })
}

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
    assert_eq!(deposit(&control, payload, &mut t), Err(expected));
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
        let effect = deposit(&write_op(ea as u32, len as u32), &data, &mut t).unwrap();
        assert_eq!(
            effect,
            Deposited {
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
        deposit(&write_op(4096, 0), &[], &mut t),
        Ok(Deposited { ea: 4096, len: 0 })
    );
    assert!(t.bytes.iter().all(|&b| b == 0));
}

#[test]
fn payload_padding_is_ignored() {
    let mut t = VecAccess::new(PAGE, Rights::ALL);
    deposit(&write_op(10, 3), &[1, 2, 3, 4, 5], &mut t).unwrap();
    assert_eq!(&t.bytes[9..14], &[0, 1, 2, 3, 0]);
}

#[test]
fn masked_writes_store_only_selected_words() {
    let block = pattern(32, 9);
    for mask in [0x01u8, 0x80, 0xff, 0x81, 0x5a, 0x3c, 0x10] {
        let ea = 4096 - 12;
        let mut t = VecAccess::new(2 * PAGE, Rights::ALL);
        let effect = deposit(&masked_op(ea as u32, mask), &block, &mut t).unwrap();
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
            Deposited {
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
        deposit(&masked_op(100, 0), &[7; 32], &mut t),
        Ok(Deposited { ea: 100, len: 0 })
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
    deposit(&masked_op(4088, 0x03), &[9; 32], &mut t).unwrap();
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
    assert!(deposit(&write_op(3 * PAGE as u32, 0), &[], &mut t).is_ok());
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
    deposit(&write_op(ea as u32, data.len() as u32), &data, &mut a).unwrap();
    deposit(&masked_op(8, 0b1000_0001), &[0x11; 32], &mut a).unwrap();
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
    let read_only = EndpointEntry::new(mem.clone(), PAGE, 2 * PAGE, Rights::REMOTE_READ).unwrap();
    let mut tlb = Tlb::new();

    // Writing offset 0 of the inner endpoint lands at 2 * PAGE of the memory, and is
    // visible through the outer one.
    let mut a = TlbAccess::new(EndpointId(1), &inner, &mut tlb);
    deposit(&write_op(0, 4), &[1, 2, 3, 4], &mut a).unwrap();
    assert_eq!(
        deposit(&write_op(PAGE as u32 - 2, 4), &[9; 4], &mut a),
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
        deposit(&write_op(PAGE as u32, 4), &[5; 4], &mut r),
        Err(Trap::AccessDenied {
            ea: PAGE as u64,
            access: Access::Write
        })
    );
    assert!(contents(&mem) == before);

    let mut w = TlbAccess::new(EndpointId(0), &whole, &mut tlb);
    deposit(&write_op(3 * PAGE as u32 + 1, 2), &[6, 6], &mut w).unwrap();
    assert_eq!(mem.load_u8(3 * PAGE + 2).unwrap(), 6);
}

#[test]
fn tlb_access_sees_page_map_changes() {
    let mem = canary_memory(4);
    let mut ep = EndpointEntry::new(mem.clone(), 0, 4 * PAGE, Rights::ALL).unwrap();
    let mut tlb = Tlb::new();
    let id = EndpointId(0);
    deposit(
        &write_op(3 * PAGE as u32, 1),
        &[1],
        &mut TlbAccess::new(id, &ep, &mut tlb),
    )
    .unwrap();
    ep.set_page_present(3, false).unwrap();
    let before = contents(&mem);
    let mut a = TlbAccess::new(id, &ep, &mut tlb);
    assert_eq!(
        deposit(
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
        deposit(&write_op(3 * PAGE as u32, 1), &[3], &mut a),
        Err(Trap::AccessDenied {
            ea: 3 * PAGE as u64,
            access: Access::Write
        })
    );
    assert!(contents(&mem) == before);
    assert_eq!(tlb.stats().faults, 1);
}

fn random_control(rng: &mut Rng, bound: u64) -> ControlRepr {
    let opcode = match rng.below(4) {
        0 => op::WRITE,
        1 => op::WRITE_MASKED,
        _ => rng.next_u64() as u8,
    };
    let operand = match rng.below(4) {
        0 => rng.next_u64() as u32,
        1 => (bound - rng.below(64).min(bound)) as u32,
        2 => u32::MAX - rng.below(64) as u32,
        _ => rng.below(bound + 64) as u32,
    };
    let length = match rng.below(5) {
        0 => 32,
        1 => rng.next_u64() as u32,
        2 => u32::MAX - rng.below(4) as u32,
        _ => rng.below(3 * PAGE as u64) as u32,
    };
    ControlRepr {
        opcode,
        mask: rng.next_u64() as u8,
        // Mostly plain deposits; sometimes any flags (address modes, descriptors,
        // register targets: all refused without registers or a valid descriptor).
        flags: if rng.below(4) == 0 {
            rng.next_u64() as u8
        } else {
            rng.next_u64() as u8 & flags::LAST
        },
        operand,
        index: rng.next_u64() as u32,
        length,
    }
}

#[test]
fn random_control_parts_never_panic_nor_write_outside_the_endpoint() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let payload: Vec<u8> = (0..4 * PAGE).map(|_| rng.next_u64() as u8 | 1).collect();

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
        let real = deposit(
            &control,
            data,
            &mut TlbAccess::new(EndpointId(4), &ep, &mut tlb),
        );
        let shadow = deposit(&control, data, &mut model);
        assert_eq!(real, shadow, "{control:?}");
        if let Ok(Deposited { ea, len }) = real {
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
