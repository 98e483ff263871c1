//! The messages of a work request: which control part and which payload bytes each of
//! its sequence numbers carries. Pure: the worker calls it for first transmissions and
//! retransmissions alike, so a message is always rebuilt identically.
//!
//! A work request of `len` bytes takes `ceil(len / segment_max)` messages (at least
//! one); only writes without a compound descriptor and read replies may take more than
//! one. The receiver generates a write's address once, from its first segment (any
//! address mode; a post-increment moves its register once per work request); every
//! later segment carries `SEGMENT` and its segment number in `index`, and either its
//! absolute address (direct mode) or its offset in the request, placed relative to the
//! first segment's address (every other mode, sent as indexed). Payload of one message:
//!
//! ```text
//! [compound descriptor, 8 B, when the request has register ops or a conditional]
//! WRITE         data bytes of this segment
//! WRITE_MASKED  the 32-byte block
//! READ          the control part (16 B) of the reply write the receiver sends back
//! TOKEN_READ    the read token (8 B, BE), the offset in its range (8 B, BE), then the
//!               reply write's control part as READ's (16 B): one cell in all
//! FETCH_ADD     add value (u64, BE)
//! CMP_SWAP      compare (u64, BE), swap (u64, BE)
//! REG_OP, EXCEPTION  nothing more
//! reply         the read data segment, or the old value of an atomic (8 B, LE)
//! ```
//! A reply's control part is the one the requester sent (READ, TOKEN_READ) or a WRITE of 8 bytes
//! (atomics), with the REPLY flag, `index` = the request's sequence number and
//! `operand` = the byte offset of this segment within the result.

use crate::tables::{EndpointId, EndpointTable};
use crate::wire::cell::{flags, op};
use crate::wire::{self, ControlPacket, ControlRepr};
use crate::wr::{CellKind, Source, Work, WorkCell, Wqe, WrOpcode};

/// Bytes of the compound descriptor.
pub const COMPOUND_LEN: u32 = 8;

/// Messages a work request of `wr` takes with messages of at most `segment_max` bytes.
pub fn segments_for(wr: &Wqe, segment_max: u32) -> u32 {
    match wr.opcode {
        // One message without a division (tens of cycles), the small requests' case.
        WrOpcode::Write | WrOpcode::Reply { .. } if wr.remote.compound.is_none() => {
            if wr.len <= segment_max {
                1
            } else {
                wr.len.div_ceil(segment_max.max(1))
            }
        }
        _ => 1,
    }
}

/// Largest payload a request may have when it must fit one message.
pub fn single_message_fits(wr: &Wqe, segment_max: u32) -> bool {
    body_len(wr, wr.len) + descriptor_len(wr, false) <= segment_max
}

fn descriptor_len(wr: &Wqe, repeat: bool) -> u32 {
    if wr.remote.compound.is_some() && !repeat {
        COMPOUND_LEN
    } else {
        0
    }
}

fn body_len(wr: &Wqe, seg_len: u32) -> u32 {
    match wr.opcode {
        WrOpcode::Write | WrOpcode::Reply { .. } => seg_len,
        WrOpcode::WriteMasked { .. } => wire::BLOCK_LEN as u32,
        WrOpcode::Read => wire::CONTROL_LEN as u32,
        WrOpcode::FetchAdd { .. } => 8,
        WrOpcode::CmpSwap { .. } => 16,
        WrOpcode::RegOp | WrOpcode::Exception => 0,
        WrOpcode::Invoke { .. } if invoke_names_registers(wr) => PREFIX_LEN + seg_len,
        WrOpcode::Invoke { .. } => seg_len,
        WrOpcode::TokenWrite { .. } => PREFIX_LEN + seg_len,
        WrOpcode::TokenRead { .. } => crate::oplogic::TOKEN_READ_LEN as u32,
    }
}

/// Bytes of the register names or payload token ahead of an `INVOKE` (with
/// `INVOKE_REGS`) or `TOKEN_WRITE` message's data.
const PREFIX_LEN: u32 = 8;

/// Whether an invoke request supplies register names (sent ahead of its data).
fn invoke_names_registers(wr: &Wqe) -> bool {
    wr.remote.regs != [0; 4]
}

/// The control part of message `seg` (0-based) of `segments`, and the byte offset of
/// its data within the request. `repeat`: the frame already carries this request's
/// compound descriptor in an earlier message, so this one refers to it
/// (`COMPOUND_REPEAT`) instead of carrying it.
#[inline(always)]
pub fn control_for(
    wr: &Wqe,
    seg: u32,
    segments: u32,
    segment_max: u32,
    repeat: bool,
) -> (ControlRepr, u32) {
    let seg_off = seg.saturating_mul(segment_max);
    let last = seg + 1 == segments;
    let seg_len = segment_len(wr, seg_off, segment_max);
    let mut c = ControlRepr {
        opcode: 0,
        mask: 0,
        flags: wr.remote.mode_flags | last_flag(last),
        operand: wr.remote.operand.wrapping_add(seg_off),
        index: u32::from_be_bytes(wr.remote.regs),
        length: descriptor_len(wr, repeat) + body_len(wr, seg_len),
    };
    if wr.remote.compound.is_some() {
        c.flags |= if repeat {
            flags::COMPOUND_REPEAT
        } else {
            flags::COMPOUND
        };
    } else if seg > 0 && wr.opcode == WrOpcode::Write {
        address_later_segment(&mut c, wr, seg, seg_off);
    }
    set_opcode(&mut c, wr, last, seg_off);
    (c, seg_off)
}

/// `LAST` on the last message of a request.
fn last_flag(last: bool) -> u8 {
    if last {
        flags::LAST
    } else {
        0
    }
}

/// Data bytes of the segment at `seg_off`: a share of a write or reply, else the whole
/// request.
fn segment_len(wr: &Wqe, seg_off: u32, segment_max: u32) -> u32 {
    match wr.opcode {
        WrOpcode::Write | WrOpcode::Reply { .. } => wr.len.saturating_sub(seg_off).min(segment_max),
        _ => wr.len,
    }
}

/// Addresses a later segment `seg` of a write, which names no register: its address is
/// the request's. Direct: the absolute address (placeable on arrival whatever came
/// before). Any other mode: the offset in the request, placed relative to the address
/// the first segment generated — once per work request, so a post-increment moves its
/// register once.
fn address_later_segment(c: &mut ControlRepr, wr: &Wqe, seg: u32, seg_off: u32) {
    c.flags |= flags::SEGMENT;
    c.index = seg;
    if wr.remote.mode_flags & flags::ADDR_MASK != 0 {
        c.flags = (c.flags & !flags::ADDR_MASK) | crate::wire::cell::AddrMode::Indexed.to_flags();
        c.operand = seg_off;
    }
}

/// Sets the opcode of `c`, and the fields the opcode decides: the mask of a masked
/// write, the fields of an invoke, a token write's flags, a reply's flags, offset and
/// request.
fn set_opcode(c: &mut ControlRepr, wr: &Wqe, last: bool, seg_off: u32) {
    c.opcode = match wr.opcode {
        WrOpcode::Write => op::WRITE,
        WrOpcode::WriteMasked { mask } => {
            c.mask = mask;
            op::WRITE_MASKED
        }
        WrOpcode::Read => op::READ,
        WrOpcode::FetchAdd { .. } => op::FETCH_ADD,
        WrOpcode::CmpSwap { .. } => op::CMP_SWAP,
        WrOpcode::RegOp => op::REG_OP,
        WrOpcode::Exception => op::EXCEPTION,
        WrOpcode::Invoke { ip, mask, returns } => {
            set_invoke(c, wr, ip, mask, returns);
            op::INVOKE
        }
        WrOpcode::TokenWrite { .. } => {
            c.flags = flags::LAST;
            op::TOKEN_WRITE
        }
        WrOpcode::TokenRead { .. } => {
            // The token, offset and reply control part travel in the payload; nothing
            // else of the control part is used.
            c.flags = flags::LAST;
            c.operand = 0;
            c.index = 0;
            op::TOKEN_READ
        }
        WrOpcode::Reply { request } => {
            c.flags = flags::REPLY | last_flag(last);
            c.operand = seg_off;
            c.index = request;
            op::WRITE
        }
    };
}

/// The fields of an `INVOKE`: the instruction pointer in `index`, the mask, and flags
/// saying whether the sender waits for a value and names registers.
fn set_invoke(c: &mut ControlRepr, wr: &Wqe, ip: u32, mask: u8, returns: bool) {
    c.mask = mask;
    c.flags = flags::LAST;
    if returns {
        c.flags |= flags::INVOKE_RETURNS;
    }
    if invoke_names_registers(wr) {
        c.flags |= flags::INVOKE_REGS;
    }
    c.index = ip;
}

/// Copies the request's data (from offset `seg_off` of its source) into `body`.
#[inline]
fn fill_data(wr: &Wqe, seg_off: u32, body: &mut [u8], endpoints: &EndpointTable) {
    match wr.source {
        Source::Inline(data) => {
            let n = body.len().min(32);
            body[..n].copy_from_slice(&data[..n]);
            body[n..].fill(0);
        }
        Source::Endpoint { id, offset } => {
            read_endpoint(endpoints, id, offset.checked_add(u64::from(seg_off)), body)
        }
        Source::None => body.fill(0),
    }
}

/// Copies `dst.len()` bytes of endpoint `id` from `offset` into `dst`; zeros when the
/// range is not there (the endpoint went, the offset overflowed, the range leaves its
/// memory).
#[inline]
fn read_endpoint(endpoints: &EndpointTable, id: EndpointId, offset: Option<u64>, dst: &mut [u8]) {
    let ok = endpoints.get(id).is_some_and(|e| {
        offset
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| e.offset().checked_add(o))
            .is_some_and(|at| e.memory().read(at, &mut *dst).is_ok())
    });
    if !ok {
        dst.fill(0);
    }
}

/// Where the payload of the segment at `seg_off` of `wr` lies in endpoint memory, when
/// it is nothing but a copy of it: a write (masked or not) or a read's reply from an
/// endpoint, with no compound descriptor in front (`repeat` as for [`control_for`]).
/// A frame can then take it by reference ([`crate::node::External`]) instead of
/// [`fill_payload`] copying it; the range is checked when that is made.
pub fn payload_memory<'e>(
    wr: &Wqe,
    seg_off: u32,
    endpoints: &'e EndpointTable,
    repeat: bool,
) -> Option<(&'e std::sync::Arc<crate::mem::EndpointMemory>, usize)> {
    let plain = matches!(
        wr.opcode,
        WrOpcode::Write | WrOpcode::WriteMasked { .. } | WrOpcode::Reply { .. }
    );
    if !plain || (wr.remote.compound.is_some() && !repeat) {
        return None;
    }
    let Source::Endpoint { id, offset } = wr.source else {
        return None;
    };
    let e = endpoints.get(id)?;
    let off = usize::try_from(offset.checked_add(u64::from(seg_off))?).ok()?;
    Some((e.memory(), e.offset().checked_add(off)?))
}

/// `wr` as the worker will keep it: a one-message write (no compound descriptor, at
/// most one data block), read or atomic as its [`WorkCell`], built here — the message's
/// control part and payload, by [`control_for`] and [`fill_payload`] as for any other
/// message — so that sending it is a copy; anything else whole.
#[inline]
pub fn work(wr: &Wqe) -> Work {
    match work_cell(wr) {
        Some(c) => Work::Cell(c),
        None => Work::Wr(*wr),
    }
}

/// The cell of a one-message request, built in registers (six words stored once: the
/// bytes [`control_for`] and [`fill_payload`] give, as `cells_are_the_messages_they_send`
/// checks for every kind).
#[inline]
fn work_cell(wr: &Wqe) -> Option<WorkCell> {
    if wr.remote.compound.is_some() {
        return None;
    }
    let small = wr.len as usize <= wire::BLOCK_LEN;
    let kind = match (wr.opcode, wr.source) {
        (WrOpcode::Write, Source::Endpoint { .. }) if small => CellKind::WriteFrom,
        (WrOpcode::Write, _) if small => CellKind::Write,
        (WrOpcode::WriteMasked { .. }, Source::Inline(_) | Source::None) => CellKind::WriteMasked,
        (WrOpcode::Read, _) => CellKind::Read,
        (WrOpcode::FetchAdd { .. }, _) => CellKind::FetchAdd,
        (WrOpcode::CmpSwap { .. }, _) => CellKind::CmpSwap,
        _ => return None,
    };
    let (control, _) = control_for(wr, 0, 1, u32::MAX, false);
    let [c0, c1] = control.wire_words();
    // A big-endian value on the wire, read as a little-endian word.
    let be = |v: u64| u64::from_le_bytes(v.to_be_bytes());
    let mut b = [0u64; 4];
    match (wr.opcode, wr.source) {
        (_, Source::Endpoint { id, offset }) if kind == CellKind::WriteFrom => {
            [b[0], b[1]] = WorkCell::range_words(id, offset);
        }
        (WrOpcode::Write | WrOpcode::WriteMasked { .. }, Source::Inline(d)) => {
            let len = control.length as usize;
            for (k, w) in b.iter_mut().enumerate() {
                let word = u64::from_le_bytes(d[8 * k..8 * k + 8].try_into().expect("8 bytes"));
                let keep = len.saturating_sub(8 * k).min(8);
                *w = if keep == 8 {
                    word
                } else {
                    word & ((1u64 << (8 * keep)) - 1)
                };
            }
        }
        (WrOpcode::Read, _) => [b[0], b[1]] = read_reply_control(wr.len).wire_words(),
        (WrOpcode::FetchAdd { add }, _) => b[0] = be(add),
        (WrOpcode::CmpSwap { compare, swap }, _) => [b[0], b[1]] = [be(compare), be(swap)],
        _ => {} // a write of nothing, or of zeros
    }
    if kind.wants_reply() {
        // A read or atomic without a result range completes in error at the worker.
        let (id, offset) = wr.result?;
        [b[2], b[3]] = WorkCell::range_words(id, offset);
    }
    let words = [c0, c1, b[0], b[1], b[2], b[3]];
    Some(WorkCell::new(words, wr.wr_id, wr.len, kind, wr.flags))
}

/// Puts the message of `cell` into `dst` (its one cell in a frame): the control part
/// and data block as built, a [`CellKind::WriteFrom`]'s data read from its endpoint
/// (zeros if the range is not there any more, as [`fill_payload`] does), and zeros
/// past the payload, where the cell keeps local names.
#[inline]
pub fn put_cell(cell: &WorkCell, dst: &mut [u8; wire::CELL_LEN], endpoints: &EndpointTable) {
    let len = cell.length() as usize;
    let source = cell.source();
    // Words of control part and payload (the payload of anything but a `WriteFrom` is
    // zero-padded in its last word); a `WriteFrom`'s data comes from memory.
    let sent = if source.is_some() {
        wire::CONTROL_LEN / 8
    } else {
        (wire::CONTROL_LEN + len).div_ceil(8)
    };
    for (k, w) in cell.words.iter().enumerate() {
        let v = if k < sent { *w } else { 0 };
        dst[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes());
    }
    if let Some((id, offset)) = source {
        let block = &mut dst[wire::CONTROL_LEN..wire::CONTROL_LEN + len];
        read_endpoint(endpoints, id, Some(offset), block);
    }
}

/// The control part a READ request asks the receiver to reply with.
pub fn read_reply_control(len: u32) -> ControlRepr {
    ControlRepr {
        opcode: op::WRITE,
        flags: flags::REPLY,
        length: len,
        ..ControlRepr::default()
    }
}

/// Fills the payload of a message (exactly `dst.len()` bytes, the control's length;
/// `repeat` as for [`control_for`]).
pub fn fill_payload(
    wr: &Wqe,
    seg_off: u32,
    dst: &mut [u8],
    endpoints: &EndpointTable,
    repeat: bool,
) {
    let mut body = dst;
    if let (Some(d), false) = (wr.remote.compound, repeat) {
        let (head, rest) = body.split_at_mut(COMPOUND_LEN as usize);
        head.copy_from_slice(&d);
        body = rest;
    }
    match wr.opcode {
        WrOpcode::Write | WrOpcode::WriteMasked { .. } | WrOpcode::Reply { .. } => {
            fill_data(wr, seg_off, body, endpoints)
        }
        WrOpcode::Invoke { .. } if invoke_names_registers(wr) => {
            let (head, data) = body.split_at_mut(PREFIX_LEN as usize);
            head.copy_from_slice(&crate::oplogic::invoke_regs(wr.remote.regs));
            fill_data(wr, seg_off, data, endpoints);
        }
        WrOpcode::Invoke { .. } => fill_data(wr, seg_off, body, endpoints),
        WrOpcode::TokenWrite { token } => {
            let (head, data) = body.split_at_mut(PREFIX_LEN as usize);
            head.copy_from_slice(&token.to_be_bytes());
            fill_data(wr, seg_off, data, endpoints);
        }
        WrOpcode::Read => {
            let mut p = ControlPacket::new_unchecked(&mut body[..wire::CONTROL_LEN]);
            read_reply_control(wr.len).emit(&mut p);
        }
        WrOpcode::TokenRead { token, offset } => {
            body[..8].copy_from_slice(&token.to_be_bytes());
            body[8..16].copy_from_slice(&offset.to_be_bytes());
            let mut p = ControlPacket::new_unchecked(&mut body[16..16 + wire::CONTROL_LEN]);
            read_reply_control(wr.len).emit(&mut p);
        }
        WrOpcode::FetchAdd { add } => body[..8].copy_from_slice(&add.to_be_bytes()),
        WrOpcode::CmpSwap { compare, swap } => {
            body[..8].copy_from_slice(&compare.to_be_bytes());
            body[8..16].copy_from_slice(&swap.to_be_bytes());
        }
        WrOpcode::RegOp | WrOpcode::Exception => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::Remote;

    fn wr(opcode: WrOpcode, len: u32) -> Wqe {
        Wqe {
            wr_id: 1,
            opcode,
            flags: 0,
            remote: Remote {
                operand: 1000,
                ..Remote::default()
            },
            len,
            source: Source::Inline([7; 32]),
            result: None,
        }
    }

    /// A cell sends exactly the bytes the general path builds for the same request
    /// ([`control_for`], [`fill_payload`]), every kind, and keeps its local names out.
    #[test]
    fn cells_are_the_messages_they_send() {
        use crate::mem::EndpointMemory;
        use crate::tables::{EndpointEntry, EndpointId, Rights};
        let mem = std::sync::Arc::new(EndpointMemory::alloc_ordinary(4096).unwrap());
        mem.write(100, &[0xa5; 32]).unwrap();
        let mut t = EndpointTable::new();
        let id = t.insert(EndpointEntry::new(mem, 0, 4096, Rights::NONE).unwrap());
        let mut inline = [0u8; 32];
        for (i, b) in inline.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let mut cases = vec![];
        for len in [0, 1, 7, 8, 9, 16, 31, 32] {
            cases.push(Wqe {
                source: Source::Inline(inline),
                ..wr(WrOpcode::Write, len)
            });
            cases.push(Wqe {
                source: Source::Endpoint { id, offset: 100 },
                ..wr(WrOpcode::Write, len)
            });
            cases.push(Wqe {
                source: Source::None,
                ..wr(WrOpcode::Write, len)
            });
        }
        cases.push(Wqe {
            source: Source::Inline(inline),
            ..wr(WrOpcode::WriteMasked { mask: 0x5a }, 32)
        });
        for op in [
            WrOpcode::Read,
            WrOpcode::FetchAdd {
                add: 0x0102_0304_0506_0708,
            },
            WrOpcode::CmpSwap {
                compare: 0x1122_3344_5566_7788,
                swap: 0x99aa_bbcc_ddee_ff00,
            },
        ] {
            cases.push(Wqe {
                result: Some((EndpointId(7), 0x1234_5678_9abc)),
                ..wr(op, if op == WrOpcode::Read { 4000 } else { 8 })
            });
        }
        for mut w in cases {
            w.remote.mode_flags = crate::wire::cell::AddrMode::Indexed.to_flags();
            w.remote.regs = [1, 2, 3, 4];
            w.flags = crate::wr::WR_SIGNALED;
            let Work::Cell(cell) = work(&w) else {
                panic!("{w:?} is a cell")
            };
            let (control, _) = control_for(&w, 0, 1, 1024, false);
            let mut want = [0u8; wire::CELL_LEN];
            control.emit(&mut ControlPacket::new_unchecked(&mut want[..16]));
            let n = control.length as usize;
            fill_payload(&w, 0, &mut want[16..16 + n], &t, false);
            let mut got = [0xffu8; wire::CELL_LEN];
            put_cell(&cell, &mut got, &t);
            assert_eq!(got, want, "{w:?}");
            let kept = Work::Cell(cell);
            assert_eq!(
                (
                    kept.wr_id(),
                    kept.flags(),
                    kept.len(),
                    kept.opcode(),
                    kept.result()
                ),
                (w.wr_id, w.flags, w.len, w.opcode, w.result),
                "{w:?}"
            );
            let source = match w.source {
                Source::Endpoint { id, offset } => Some((id, offset)),
                _ => None,
            };
            assert_eq!(kept.source_range(), source);
        }
        // Not cells: longer writes, compound descriptors, reads without a result range.
        let long = wr(WrOpcode::Write, 33);
        let mut compound = wr(WrOpcode::Write, 4);
        compound.remote.compound = Some([1; 8]);
        let no_result = wr(WrOpcode::Read, 8);
        for w in [long, compound, no_result, wr(WrOpcode::RegOp, 0)] {
            assert_eq!(work(&w), Work::Wr(w));
        }
    }

    #[test]
    fn large_writes_split_into_segments_with_advancing_operands() {
        let w = wr(WrOpcode::Write, 250);
        assert_eq!(segments_for(&w, 100), 3);
        let (c0, o0) = control_for(&w, 0, 3, 100, false);
        let (c2, o2) = control_for(&w, 2, 3, 100, false);
        assert_eq!(
            (c0.operand, c0.length, c0.flags & flags::LAST, o0),
            (1000, 100, 0, 0)
        );
        assert_eq!(
            (c2.operand, c2.length, c2.flags & flags::LAST, o2),
            (1200, 50, flags::LAST, 200)
        );
    }

    #[test]
    fn atomics_and_reads_carry_their_operands() {
        let a = wr(
            WrOpcode::CmpSwap {
                compare: 5,
                swap: 9,
            },
            8,
        );
        let (c, _) = control_for(&a, 0, 1, 100, false);
        assert_eq!((c.opcode, c.length), (op::CMP_SWAP, 16));
        let mut buf = [0u8; 16];
        fill_payload(&a, 0, &mut buf, &EndpointTable::new(), false);
        assert_eq!(&buf[..8], &5u64.to_be_bytes());
        assert_eq!(&buf[8..], &9u64.to_be_bytes());

        let r = wr(WrOpcode::Read, 4096);
        assert_eq!(segments_for(&r, 100), 1);
        let (c, _) = control_for(&r, 0, 1, 100, false);
        assert_eq!((c.opcode, c.length), (op::READ, 16));
        let mut buf = [0u8; 16];
        fill_payload(&r, 0, &mut buf, &EndpointTable::new(), false);
        let reply = ControlRepr::parse(&ControlPacket::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(reply, read_reply_control(4096));
    }

    #[test]
    fn compound_descriptor_leads_the_payload() {
        let mut w = wr(WrOpcode::Write, 4);
        w.remote.compound = Some([1, 2, 3, 4, 5, 6, 7, 0]);
        assert_eq!(segments_for(&w, 100), 1);
        let (c, _) = control_for(&w, 0, 1, 100, false);
        assert_eq!(c.length, 12);
        assert_ne!(c.flags & flags::COMPOUND, 0);
        let mut buf = [0u8; 12];
        fill_payload(&w, 0, &mut buf, &EndpointTable::new(), false);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 0, 7, 7, 7, 7]);
        // Repeated in the same frame: the flag instead of the descriptor.
        let (c, _) = control_for(&w, 0, 1, 100, true);
        assert_eq!(c.length, 4);
        assert_eq!(
            c.flags & (flags::COMPOUND | flags::COMPOUND_REPEAT),
            flags::COMPOUND_REPEAT
        );
        let mut buf = [0u8; 4];
        fill_payload(&w, 0, &mut buf, &EndpointTable::new(), true);
        assert_eq!(buf, [7; 4]);
    }

    #[test]
    fn replies_name_the_request_and_the_offset() {
        let mut w = wr(WrOpcode::Reply { request: 77 }, 150);
        w.remote.operand = 0;
        let (c, off) = control_for(&w, 1, 2, 100, false);
        assert_eq!(
            (c.opcode, c.index, c.operand, c.length, off),
            (op::WRITE, 77, 100, 50, 100)
        );
        assert_eq!(c.flags, flags::REPLY | flags::LAST);
    }
}
