//! Tests of [`plan`] and [`commit`]: every primitive, protection bit and trap, the
//! seed's worked examples (§3.4–3.5) at the operation level, and a randomized run.

use super::*;
use crate::mem::EndpointMemory;
use crate::oplogic::{TlbAccess, VecAccess};
use crate::tables::{EndpointEntry, EndpointId, Rights, PAGE_SIZE};
use crate::tlb::Tlb;
use crate::wire::compound::Cond;
use crate::wire::ControlPacket;
use std::sync::Arc;

const PAGE: usize = PAGE_SIZE as usize;
const ALL: RegProt = RegProt::ALL;
const NONE: RegProt = RegProt::NONE;
const R: RegProt = RegProt::READ;
const W: RegProt = RegProt::WRITE;
const I: RegProt = RegProt::INDIRECT;
/// Operand as a source.
const OPD: OpSource = OpSource::Operand;

/// A message under construction.
#[derive(Clone, Debug)]
struct Msg {
    control: ControlRepr,
    desc: Option<[u8; 8]>,
    body: Vec<u8>,
}

impl Msg {
    fn new(opcode: u8, operand: u32, body: &[u8]) -> Msg {
        Msg {
            control: ControlRepr {
                opcode,
                flags: flags::LAST,
                operand,
                ..ControlRepr::default()
            },
            desc: None,
            body: body.to_vec(),
        }
    }
    fn write(operand: u32, data: &[u8]) -> Msg {
        Msg::new(op::WRITE, operand, data)
    }
    fn masked(operand: u32, mask: u8, block: &[u8; 32]) -> Msg {
        let mut m = Msg::new(op::WRITE_MASKED, operand, block);
        m.control.mask = mask;
        m
    }
    fn read(operand: u32, len: u32) -> Msg {
        let reply = ControlRepr {
            opcode: op::WRITE,
            flags: flags::REPLY | flags::LAST,
            operand: 0x1234,
            index: 77,
            length: len,
            ..ControlRepr::default()
        };
        let mut b = [0u8; 16];
        reply.emit(&mut ControlPacket::new_unchecked(&mut b[..]));
        Msg::new(op::READ, operand, &b)
    }
    fn fetch_add(operand: u32, add: u64) -> Msg {
        Msg::new(op::FETCH_ADD, operand, &add.to_be_bytes())
    }
    fn cmp_swap(operand: u32, compare: u64, swap: u64) -> Msg {
        let mut b = compare.to_be_bytes().to_vec();
        b.extend_from_slice(&swap.to_be_bytes());
        Msg::new(op::CMP_SWAP, operand, &b)
    }
    fn reg_op(operand: u32) -> Msg {
        Msg::new(op::REG_OP, operand, &[])
    }
    fn exception(operand: u32) -> Msg {
        Msg::new(op::EXCEPTION, operand, &[])
    }
    fn mode(mut self, mode: AddrMode) -> Msg {
        self.control.flags = (self.control.flags & !flags::ADDR_MASK) | mode.to_flags();
        self
    }
    fn regs(mut self, regs: [u8; 4]) -> Msg {
        self.control.index = crate::wire::cell::index_of(regs);
        self
    }
    fn flag(mut self, f: u8) -> Msg {
        self.control.flags |= f;
        self
    }
    fn repr(&self) -> CompoundRepr {
        match self.desc {
            Some(d) => CompoundRepr::parse(&CompoundPacket::new_unchecked(&d[..])).unwrap(),
            None => CompoundRepr::NONE,
        }
    }
    fn with(mut self, f: impl FnOnce(&mut CompoundRepr)) -> Msg {
        let mut d = self.repr();
        f(&mut d);
        self.desc = Some(d.to_bytes());
        self
    }
    fn op1(self, op: RegOp, src: OpSource) -> Msg {
        self.with(|d| d.op1 = RegOpRepr { op, src })
    }
    fn op2(self, op: RegOp, src: OpSource) -> Msg {
        self.with(|d| d.op2 = RegOpRepr { op, src })
    }
    fn cond(self, cond: Cond, rhs: OpSource) -> Msg {
        self.with(|d| d.cond = CondRepr { cond, rhs })
    }
    fn order(self, order: Order) -> Msg {
        self.with(|d| d.order = order)
    }
    fn raw_desc(mut self, d: [u8; 8]) -> Msg {
        self.desc = Some(d);
        self
    }
    /// Control part and payload on the wire.
    fn bytes(&self) -> (ControlRepr, Vec<u8>) {
        let mut c = self.control;
        let mut payload = Vec::new();
        if let Some(d) = self.desc {
            c.flags |= flags::COMPOUND;
            payload.extend_from_slice(&d);
        }
        payload.extend_from_slice(&self.body);
        c.length = payload.len() as u32;
        (c, payload)
    }
}

/// What a committed message did.
#[derive(Debug, PartialEq, Eq)]
struct Done {
    interrupt: bool,
    reply: Reply,
    event: EventInfo,
    span: Option<(u64, u32)>,
}

/// A register file with a window (not at base 0) and global registers, and an endpoint.
#[derive(Clone, Debug)]
struct Rig {
    regs: RegisterFile,
    window: RegWindow,
    globals: RegWindow,
    mem: VecAccess,
    forced: bool,
    /// What the connection knows of the current multi-segment request.
    segment_base: Option<u64>,
}

impl Rig {
    fn new() -> Rig {
        Rig::with(16, 8, 2 * PAGE)
    }
    fn with(window: u32, globals: u32, bytes: usize) -> Rig {
        let mut regs = RegisterFile::new(512);
        let _pad = regs.alloc(4).unwrap();
        let window = regs.alloc(window).unwrap();
        let globals = regs.alloc(globals).unwrap();
        Rig {
            regs,
            window,
            globals,
            mem: VecAccess::new(bytes, Rights::ALL),
            forced: false,
            segment_base: None,
        }
    }
    fn ctx(&self) -> RegContext<'_> {
        RegContext {
            regs: &self.regs,
            window: self.window,
            globals: self.globals,
            allow_forced_interrupts: self.forced,
            prior: &[],
            trusted: [false; 5],
            segment_base: self.segment_base,
        }
    }
    fn abs(&self, name: u8) -> u32 {
        self.ctx()
            .resolve(name)
            .expect("test names a register in the rig")
    }
    fn set(&mut self, name: u8, v: u64, prot: RegProt) {
        let a = self.abs(name);
        self.regs.set(a, v).unwrap();
        self.regs.set_prot(a, prot).unwrap();
    }
    fn get(&self, name: u8) -> u64 {
        self.regs.get(self.abs(name)).unwrap()
    }
    fn word(&self, ea: usize) -> u64 {
        u64::from_ne_bytes(self.mem.bytes[ea..ea + 8].try_into().unwrap())
    }
    fn put_word(&mut self, ea: usize, v: u64) {
        self.mem.bytes[ea..ea + 8].copy_from_slice(&v.to_ne_bytes());
    }
    /// Plans and commits `m`; on a trap, asserts nothing changed.
    fn run(&mut self, m: &Msg) -> Result<Done, Trap> {
        let (c, payload) = m.bytes();
        let before = (self.regs.clone(), self.mem.clone());
        let mut mem = self.mem.clone();
        let planned = plan(&c, &payload, &self.ctx(), &mut mem);
        assert!(
            before.0 == self.regs && before.1 == mem,
            "plan changed state"
        );
        let p = planned?;
        commit(&p, &mut self.regs, &mut self.mem);
        Ok(Done {
            interrupt: p.interrupt,
            reply: p.reply,
            event: p.event,
            span: p.store.span(),
        })
    }
    fn ok(&mut self, m: &Msg) -> Done {
        self.run(m).unwrap_or_else(|t| panic!("{m:?} trapped: {t}"))
    }
    /// Asserts `m` traps with `want` and changes nothing.
    fn traps(&mut self, m: &Msg, want: Trap) {
        let before = (self.regs.clone(), self.mem.clone());
        assert_eq!(self.run(m).err(), Some(want), "{m:?}");
        assert!(before.0 == self.regs && before.1 == self.mem);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

// ---------------------------------------------------------------- address generation

#[test]
fn later_segments_land_relative_to_the_first_segments_address_and_touch_no_register() {
    let mut rig = Rig::new();
    // The first segment post-incremented r0 (4000 -> 4100); its address was 4000.
    rig.set(0, 4100, RegProt::INDIRECT);
    rig.set(1, 100, RegProt::NONE);
    rig.segment_base = Some(4000);
    // index is the segment number, not register names; the operand the offset.
    let m = Msg::write(96, &[9, 8, 7])
        .flag(flags::SEGMENT)
        .mode(AddrMode::Indexed)
        .regs([0, 0, 0, 2]);
    let d = rig.ok(&m);
    assert_eq!(d.span, Some((4096, 3)));
    assert_eq!(&rig.mem.bytes[4095..4100], &[0, 9, 8, 7, 0]);
    assert_eq!((rig.get(0), rig.get(1)), (4100, 100), "no register moved");
    // Bounds still hold for the segment.
    let len = rig.mem.bytes.len() as u64;
    rig.segment_base = Some(len - 2);
    rig.traps(
        &m,
        Trap::OutOfBounds {
            ea: len - 2 + 96,
            len: 3,
            bound: len,
        },
    );
    // No first segment ran: nothing to place it after.
    rig.segment_base = None;
    rig.traps(&m, Trap::OrphanSegment { segment: 2 });
}

#[test]
fn direct_addressing_writes_at_the_operand() {
    let mut rig = Rig::new();
    let d = rig.ok(&Msg::write(100, &[1, 2, 3]));
    assert_eq!(&rig.mem.bytes[99..104], &[0, 1, 2, 3, 0]);
    assert_eq!(d.span, Some((100, 3)));
    assert_eq!(d.event.ea, 100);
    assert_eq!(d.event.regs, [0; 4]);
    assert!(!d.interrupt && d.reply == Reply::None);
}

#[test]
fn indirect_addressing_writes_at_the_register() {
    let mut rig = Rig::new();
    rig.set(3, 200, I);
    let d = rig.ok(&Msg::write(999, &[7; 4])
        .mode(AddrMode::Indirect)
        .regs([3, 0, 0, 0]));
    assert_eq!(&rig.mem.bytes[200..204], &[7; 4]);
    assert_eq!((d.event.ea, rig.get(3)), (200, 200));
    assert_eq!(rig.get(3), 200);
}

#[test]
fn indexed_addressing_adds_the_operand() {
    let mut rig = Rig::new();
    rig.set(129, 4096, I); // a global register
    rig.ok(&Msg::write(8, &[5; 2])
        .mode(AddrMode::Indexed)
        .regs([129, 0, 0, 0]));
    assert_eq!(&rig.mem.bytes[4104..4106], &[5; 2]);
}

#[test]
fn indexed_address_overflow_is_out_of_bounds() {
    let mut rig = Rig::new();
    rig.set(0, u64::MAX - 2, I);
    let m = Msg::write(3, &[1])
        .mode(AddrMode::Indexed)
        .regs([0, 0, 0, 0]);
    rig.traps(
        &m,
        Trap::OutOfBounds {
            ea: u64::MAX - 2,
            len: 3,
            bound: 2 * PAGE as u64,
        },
    );
}

#[test]
fn indirect_postincrement_appends_in_order() {
    let mut rig = Rig::new();
    rig.set(4, 64, I);
    rig.set(5, 3, NONE); // the stride register needs no protection
    let m = |b: u8| {
        Msg::write(0, &[b; 3])
            .mode(AddrMode::PostIncrement)
            .regs([4, 0, 0, 0])
    };
    let d = rig.ok(&m(1));
    assert_eq!((d.event.ea, rig.get(4)), (64, 67));
    rig.ok(&m(2));
    rig.set(5, 5, NONE); // the receiver changes the stride
    rig.ok(&m(3));
    rig.ok(&m(4));
    assert_eq!(&rig.mem.bytes[64..75], &[1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0]);
    assert_eq!(&rig.mem.bytes[75..78], &[4; 3]);
    assert_eq!(rig.get(4), 80);
}

#[test]
fn postincrement_wraps_like_add_and_the_next_address_is_checked() {
    let mut rig = Rig::new();
    rig.set(0, 8, I);
    rig.set(1, (-8i64) as u64, NONE); // a descending queue
    let m = Msg::write(0, &[9; 8])
        .mode(AddrMode::PostIncrement)
        .regs([0, 0, 0, 0]);
    rig.ok(&m);
    rig.ok(&m);
    assert_eq!(rig.get(0), (-8i64) as u64);
    rig.traps(
        &m,
        Trap::OutOfBounds {
            ea: (-8i64) as u64,
            len: 8,
            bound: 2 * PAGE as u64,
        },
    );
    assert_eq!(&rig.mem.bytes[..16], &[9; 16]);
}

#[test]
fn postincrement_past_the_endpoint_traps_and_leaves_the_pointer() {
    let mut rig = Rig::new();
    let bound = 2 * PAGE as u64;
    rig.set(2, bound - 4, I);
    rig.set(3, 8, NONE);
    let m = |len| {
        Msg::write(0, &vec![1; len])
            .mode(AddrMode::PostIncrement)
            .regs([2, 0, 0, 0])
    };
    rig.traps(
        &m(8),
        Trap::OutOfBounds {
            ea: bound - 4,
            len: 8,
            bound,
        },
    );
    assert_eq!(rig.get(2), bound - 4);
    rig.ok(&m(4));
    assert_eq!(rig.get(2), bound + 4);
    // The pointer now lies past the end: even an empty write is refused.
    rig.traps(
        &m(0),
        Trap::OutOfBounds {
            ea: bound + 4,
            len: 0,
            bound,
        },
    );
}

#[test]
fn postincrement_needs_the_stride_register_in_the_same_window() {
    let mut rig = Rig::with(128, 8, PAGE);
    rig.set(127, 0, I);
    rig.set(128, 8, ALL);
    let m = |ra| {
        Msg::write(0, &[1])
            .mode(AddrMode::PostIncrement)
            .regs([ra, 0, 0, 0])
    };
    // 128 is a global register, not the window's register after 127.
    rig.traps(&m(127), Trap::BadRegister { name: 128 });
    rig.set(135, 0, I);
    rig.traps(&m(135), Trap::BadRegister { name: 136 });
    let mut small = Rig::new();
    small.set(15, 0, I);
    small.traps(&m(15), Trap::BadRegister { name: 16 });
    small.set(14, 0, I);
    small.ok(&m(14));
}

#[test]
fn register_only_operations_may_generate_and_postincrement_an_address() {
    // Reserving space in a queue without writing: ea is reported, nothing is stored.
    let mut rig = Rig::new();
    rig.set(0, 1 << 40, I); // far outside the endpoint: no memory is touched
    rig.set(1, 16, NONE);
    let d = rig.ok(&Msg::reg_op(0)
        .mode(AddrMode::PostIncrement)
        .regs([0, 0, 0, 0]));
    assert_eq!((d.event.ea, d.span, d.event.len), (1 << 40, None, 0));
    assert_eq!(rig.get(0), (1 << 40) + 16);
}

// ---------------------------------------------------------------- register operations

#[test]
fn every_register_operation_computes_from_the_operand() {
    const M: u64 = u64::MAX;
    // (op, initial rb, operand, result)
    let cases: &[(RegOp, u64, u32, u64)] = &[
        (RegOp::Set, 5, 0xffff_ffff, 0xffff_ffff),
        (RegOp::Not, 5, 0, M),
        (RegOp::Neg, 5, 1, M),
        (RegOp::Add, M, 1, 0),
        (RegOp::Sub, 0, 1, M),
        (RegOp::And, 0xff, 0x0f, 0x0f),
        (RegOp::Or, 0xf0, 0x0f, 0xff),
        (RegOp::Xor, 0xff, 0x0f, 0xf0),
        (RegOp::Shl, 1, 63, 1 << 63),
        (RegOp::Shl, 1, 64, 1),
        (RegOp::Shl, 1, 100, 1 << 36),
        (RegOp::Shr, 1 << 63, 63, 1),
        (RegOp::Shr, 1 << 63, 64, 1 << 63),
        (RegOp::Shr, M, 0xffff_ffff, 1),
        (RegOp::Min, 5, 0xffff_ffff, 5),
        (RegOp::Max, 5, 0xffff_ffff, 0xffff_ffff),
        (RegOp::MinS, 5, 0xffff_ffff, M),
        (RegOp::MaxS, 5, 0xffff_ffff, 5),
        (RegOp::MaxS, M, 0x8000_0000, M),
        (RegOp::MinS, 0, 0x8000_0000, 0xffff_ffff_8000_0000),
        (RegOp::MaxS, 1 << 63, 0, 0),
        (RegOp::Min, 1 << 63, 0, 0),
    ];
    for &(op, r, operand, want) in cases {
        let mut rig = Rig::new();
        rig.set(6, r, W);
        let d = rig.ok(&Msg::reg_op(operand).regs([0, 6, 0, 0]).op1(op, OPD));
        assert_eq!(rig.get(6), want, "{op:?} {r:#x} {operand:#x}");
        assert!(!d.interrupt);
        // The same through op2 and rc.
        let mut rig = Rig::new();
        rig.set(7, r, W);
        rig.ok(&Msg::reg_op(operand).regs([0, 0, 7, 0]).op2(op, OPD));
        assert_eq!(rig.get(7), want, "op2 {op:?}");
    }
}

#[test]
fn register_sources_are_full_64_bit_values() {
    let mut rig = Rig::new();
    rig.set(1, 10, W);
    rig.set(2, u64::MAX, R); // -1 as a source: no sign question
    let m = |op| Msg::reg_op(0).regs([0, 1, 0, 0]).op1(op, OpSource::Reg(2));
    rig.ok(&m(RegOp::MinS));
    assert_eq!(rig.get(1), u64::MAX);
    rig.set(1, 10, W);
    rig.ok(&m(RegOp::Min));
    assert_eq!(rig.get(1), 10);
    rig.ok(&m(RegOp::Shl)); // shift by 63
    assert_eq!(rig.get(1), 0);
    rig.set(1, 3, W);
    rig.ok(&m(RegOp::Set));
    assert_eq!(rig.get(1), u64::MAX);
}

#[test]
fn op2_sees_the_result_of_op1_and_a_later_write_wins() {
    let mut rig = Rig::new();
    rig.set(0, 100, I | W);
    rig.set(1, 4, NONE);
    // ea = 100; ra += 4 (post-increment); op1: ra += 10; op2: rc ← ra.
    rig.set(2, 0, W);
    rig.set(0, 100, I | W | R);
    let m = Msg::write(0, &[1])
        .mode(AddrMode::PostIncrement)
        .regs([0, 0, 2, 0])
        .op1(RegOp::Add, OPD)
        .op2(RegOp::Set, OpSource::Reg(0));
    let mut c = m.clone();
    c.control.operand = 10;
    let d = rig.ok(&c);
    assert_eq!((rig.get(0), rig.get(2)), (114, 114));
    assert_eq!((rig.mem.bytes[100], d.event.ea), (1, 100));
}

// ---------------------------------------------------------------- conditionals

#[test]
fn every_condition_code_compares_unsigned_or_signed() {
    use Cond::*;
    const M: u64 = u64::MAX;
    // (cond, <rd>, operand, holds)
    let cases: &[(Cond, u64, u32, bool)] = &[
        (Eq, 7, 7, true),
        (Eq, 7, 8, false),
        (Ne, 7, 8, true),
        (Ne, 7, 7, false),
        (Lt, 1, 2, true),
        (Lt, 2, 2, false),
        (Le, 2, 2, true),
        (Le, 3, 2, false),
        (Gt, 3, 2, true),
        (Gt, 2, 2, false),
        (Ge, 2, 2, true),
        (Ge, 1, 2, false),
        // Unsigned: the operand is zero-extended, <rd> = -1 is huge.
        (Eq, M, 0xffff_ffff, false),
        (Gt, M, 0xffff_ffff, true),
        (Lt, 0xffff_ffff, 0xffff_ffff, false),
        // Signed: the operand is sign-extended.
        (EqS, M, 0xffff_ffff, true),
        (NeS, M, 0xffff_ffff, false),
        (LtS, M, 0, true),
        (LtS, 0, 0xffff_ffff, false),
        (LeS, M, 0xffff_ffff, true),
        (GtS, 0, 0xffff_ffff, true),
        (GtS, M, 0, false),
        (GeS, 1 << 63, 0x8000_0000, false),
        (GeS, 0, 0x8000_0000, true),
    ];
    for &(cond, rd, operand, want) in cases {
        let mut rig = Rig::new();
        rig.set(9, rd, NONE);
        let d = rig.ok(&Msg::reg_op(operand).regs([0, 0, 0, 9]).cond(cond, OPD));
        assert_eq!(d.interrupt, want, "{cond:?} {rd:#x} {operand:#x}");
        // The registers go in the event, so they are read only when there is one.
        let reported = if want { [0, 0, 0, rd] } else { [0; 4] };
        assert_eq!(d.event.regs, reported);
        // Register right-hand side: no extension, the full 64 bits.
        let mut rig = Rig::new();
        rig.set(9, rd, NONE);
        let rhs = alu::extend(operand, cond.is_signed());
        rig.set(130, rhs, NONE);
        let d = rig.ok(&Msg::reg_op(0)
            .regs([0, 0, 0, 9])
            .cond(cond, OpSource::Reg(130)));
        assert_eq!(d.interrupt, want, "{cond:?} register rhs");
    }
}

#[test]
fn always_forces_an_interrupt_when_the_connection_allows_it() {
    let mut rig = Rig::new();
    let m = Msg::write(0, &[1])
        .cond(Cond::Always, OPD)
        .regs([0, 0, 0, 200]);
    rig.traps(&m, Trap::ForcedInterruptRefused);
    rig.forced = true;
    let d = rig.ok(&m); // rd (200, no such register) is not used by ALWAYS
    assert!(d.interrupt);
    assert_eq!(d.event.regs, [0; 4]);
    assert_eq!(rig.mem.bytes[0], 1);
}

#[test]
fn exception_is_always_an_event_unless_refused() {
    let mut rig = Rig::new();
    rig.traps(&Msg::exception(5), Trap::ForcedInterruptRefused);
    rig.forced = true;
    let d = rig.ok(&Msg::exception(5));
    assert!(d.interrupt);
    assert_eq!(
        (d.event.opcode, d.event.operand, d.span),
        (op::EXCEPTION, 5, None)
    );
    // With register operations too.
    rig.set(1, 1, W);
    let d = rig.ok(&Msg::exception(5).regs([0, 1, 0, 0]).op1(RegOp::Add, OPD));
    assert!(d.interrupt);
    assert_eq!(rig.get(1), 6);
}

#[test]
fn order_decides_what_the_conditional_sees() {
    // rb = rc = rd = register 1, starting at 0; op1 and op2 each add 1 (from register
    // 2); the conditional tests <r1> == operand.
    let run = |order, operand| {
        let mut rig = Rig::new();
        rig.set(1, 0, W);
        rig.set(2, 1, R);
        let d = rig.ok(&Msg::reg_op(operand)
            .regs([0, 1, 1, 1])
            .op1(RegOp::Add, OpSource::Reg(2))
            .op2(RegOp::Add, OpSource::Reg(2))
            .cond(Cond::Eq, OPD)
            .order(order));
        assert_eq!(rig.get(1), 2);
        d.interrupt
    };
    let fired = |order| [0, 1, 2].map(|v| run(order, v));
    assert_eq!(fired(Order::CondFirst), [true, false, false]);
    assert_eq!(fired(Order::CondAfterOp1), [false, true, false]);
    assert_eq!(fired(Order::CondLast), [false, false, true]);
}

#[test]
fn the_conditional_sees_the_postincrement_and_the_main_operation() {
    let mut rig = Rig::new();
    rig.set(0, 8, I);
    rig.set(1, 8, NONE);
    let d = rig.ok(&Msg::write(16, &[1; 8])
        .mode(AddrMode::PostIncrement)
        .regs([0, 0, 0, 0])
        .cond(Cond::Eq, OPD));
    assert!(d.interrupt, "CondFirst runs after address generation");
    rig.set(3, 5, R | W);
    let d = rig.ok(&Msg::fetch_add(0, 2)
        .flag(flags::REG_TARGET)
        .regs([3, 0, 0, 3])
        .cond(Cond::Eq, OPD));
    assert_eq!(d.reply, Reply::Value(5));
    assert!(!d.interrupt); // <r3> is 7 now
    assert_eq!(rig.get(3), 7);
}

// ---------------------------------------------------------------- main operations

#[test]
fn masked_writes_with_addressing_modes() {
    let mut rig = Rig::new();
    rig.set(0, 64, I);
    let block: [u8; 32] = pattern(32, 3).try_into().unwrap();
    let d = rig.ok(&Msg::masked(4, 0b1000_0010, &block)
        .mode(AddrMode::Indexed)
        .regs([0; 4]));
    assert_eq!(d.span, Some((72, 28)));
    assert_eq!(&rig.mem.bytes[72..76], &block[4..8]);
    assert_eq!(&rig.mem.bytes[96..100], &block[28..32]);
    assert!(rig.mem.bytes[76..96].iter().all(|&b| b == 0));
    assert_eq!(d.event.len, 32);
    // With a descriptor: 40 payload bytes.
    rig.set(1, 0, W);
    let m = Msg::masked(0, 1, &block)
        .regs([0, 1, 0, 0])
        .op1(RegOp::Add, OPD);
    assert_eq!(m.bytes().0.length, 40);
    rig.ok(&m);
    assert_eq!(&rig.mem.bytes[0..4], &block[0..4]);
}

#[test]
fn masked_write_near_u64_max_does_not_overflow() {
    let mut rig = Rig::new();
    rig.set(0, u64::MAX - 8, I);
    let m = Msg::masked(0, 0x80, &[1; 32])
        .mode(AddrMode::Indirect)
        .regs([0; 4]);
    rig.traps(
        &m,
        Trap::OutOfBounds {
            ea: u64::MAX - 8,
            len: 32,
            bound: 2 * PAGE as u64,
        },
    );
}

#[test]
fn reads_are_checked_and_planned_for_the_worker() {
    let mut rig = Rig::new();
    rig.set(0, 4000, I);
    let d = rig.ok(&Msg::read(100, 200).mode(AddrMode::Indexed).regs([0; 4]));
    let Reply::Read {
        ea,
        len,
        reply_control,
    } = d.reply
    else {
        panic!("{:?}", d.reply)
    };
    assert_eq!((ea, len), (4100, 200));
    assert_eq!(
        (
            reply_control.opcode,
            reply_control.operand,
            reply_control.index
        ),
        (op::WRITE, 0x1234, 77)
    );
    assert_eq!(reply_control.length, 200);
    assert_eq!((d.span, d.event.len), (None, 200));
    assert!(rig.mem.bytes.iter().all(|&b| b == 0));
    // Zero bytes at the very end is fine; one more is not.
    rig.ok(&Msg::read(2 * PAGE as u32, 0));
    rig.traps(
        &Msg::read(2 * PAGE as u32 - 1, 2),
        Trap::OutOfBounds {
            ea: 2 * PAGE as u64 - 1,
            len: 2,
            bound: 2 * PAGE as u64,
        },
    );
}

#[test]
fn reading_non_readable_memory_is_denied() {
    let mut rig = Rig::new();
    rig.mem.rights = Rights::REMOTE_WRITE | Rights::REMOTE_ATOMIC;
    let denied = |ea| Trap::AccessDenied {
        ea,
        access: Access::Read,
    };
    rig.traps(&Msg::read(8, 8), denied(8));
    let mut rig = Rig::new();
    rig.mem.page_rights[1] = Rights::REMOTE_WRITE;
    rig.traps(&Msg::read(4000, 200), denied(4096));
    rig.ok(&Msg::read(4000, 96));
}

#[test]
fn fetch_and_add_on_memory_returns_the_old_word() {
    let mut rig = Rig::new();
    rig.put_word(8, 41);
    let d = rig.ok(&Msg::fetch_add(8, 1));
    assert_eq!((d.reply, rig.word(8)), (Reply::Value(41), 42));
    assert_eq!((d.span, d.event.len), (Some((8, 8)), 8));
    rig.ok(&Msg::fetch_add(8, u64::MAX)); // -1, wrapping
    assert_eq!(rig.word(8), 41);
    // The last word of the endpoint.
    let last = 2 * PAGE as u32 - 8;
    rig.ok(&Msg::fetch_add(last, 5));
    assert_eq!(rig.word(last as usize), 5);
}

#[test]
fn atomics_need_alignment_and_the_atomic_right() {
    let mut rig = Rig::new();
    for ea in [1, 4, 7, 12] {
        rig.traps(&Msg::fetch_add(ea, 1), Trap::Misaligned { ea: ea as u64 });
        rig.traps(&Msg::cmp_swap(ea, 0, 1), Trap::Misaligned { ea: ea as u64 });
    }
    rig.traps(
        &Msg::fetch_add(2 * PAGE as u32, 1),
        Trap::OutOfBounds {
            ea: 2 * PAGE as u64,
            len: 8,
            bound: 2 * PAGE as u64,
        },
    );
    rig.mem.rights = Rights::REMOTE_READ | Rights::REMOTE_WRITE;
    let denied = Trap::AccessDenied {
        ea: 0,
        access: Access::Atomic,
    };
    rig.traps(&Msg::fetch_add(0, 1), denied);
    rig.traps(&Msg::cmp_swap(0, 0, 1), denied);
    rig.mem.pages_present[1] = false;
    rig.mem.rights = Rights::ALL;
    rig.traps(
        &Msg::fetch_add(PAGE as u32, 1),
        Trap::PageNotPresent { page: 1 },
    );
}

#[test]
fn compare_and_swap_succeeds_only_on_a_match() {
    let mut rig = Rig::new();
    // A lock word: 0 = free.
    let d = rig.ok(&Msg::cmp_swap(16, 0, 7));
    assert_eq!(
        (d.reply, rig.word(16), d.span),
        (Reply::Value(0), 7, Some((16, 8)))
    );
    let d = rig.ok(&Msg::cmp_swap(16, 0, 9));
    assert_eq!((d.reply, rig.word(16), d.span), (Reply::Value(7), 7, None));
    let d = rig.ok(&Msg::cmp_swap(16, 7, 0));
    assert_eq!((d.reply, rig.word(16)), (Reply::Value(7), 0));
}

#[test]
fn atomics_on_registers_need_read_and_write() {
    let mut rig = Rig::new();
    rig.set(2, 10, R | W);
    let fa = Msg::fetch_add(0, 3)
        .flag(flags::REG_TARGET)
        .regs([2, 0, 0, 0]);
    let d = rig.ok(&fa);
    assert_eq!((d.reply, rig.get(2), d.span), (Reply::Value(10), 13, None));
    let cs = |c, s| {
        Msg::cmp_swap(1, c, s)
            .flag(flags::REG_TARGET)
            .regs([130, 0, 0, 0])
    };
    rig.set(130, 5, R | W);
    assert_eq!(rig.ok(&cs(4, 9)).reply, Reply::Value(5));
    assert_eq!(rig.get(130), 5);
    assert_eq!(rig.ok(&cs(5, 9)).reply, Reply::Value(5));
    assert_eq!(rig.get(130), 9);
    for prot in [R, W, R | I, W | I, NONE] {
        rig.set(2, 10, prot);
        rig.traps(
            &fa,
            Trap::RegisterProtection {
                name: 2,
                need: R | W,
            },
        );
    }
    rig.traps(
        &fa.clone().regs([16, 0, 0, 0]),
        Trap::BadRegister { name: 16 },
    );
}

// ---------------------------------------------------------------- protection

#[test]
fn the_address_register_needs_indirect() {
    for mode in [
        AddrMode::Indirect,
        AddrMode::Indexed,
        AddrMode::PostIncrement,
    ] {
        let mut rig = Rig::new();
        let m = Msg::write(0, &[1]).mode(mode).regs([3, 0, 0, 0]);
        rig.set(3, 0, R | W);
        rig.traps(&m, Trap::RegisterProtection { name: 3, need: I });
        rig.set(3, 0, I);
        rig.ok(&m);
        assert_eq!(rig.mem.bytes[0], 1, "{mode:?}");
    }
}

#[test]
fn a_register_operation_needs_write_on_its_destination_and_read_on_its_source() {
    let mut rig = Rig::new();
    let m = |op, src| Msg::reg_op(1).regs([0, 4, 0, 0]).op1(op, src);
    rig.set(4, 1, R | I);
    rig.traps(
        &m(RegOp::Add, OPD),
        Trap::RegisterProtection { name: 4, need: W },
    );
    rig.set(4, 1, W);
    rig.ok(&m(RegOp::Add, OPD));
    // r ← r + r reads only the destination: WRITE is enough.
    rig.ok(&m(RegOp::Add, OpSource::Reg(4)));
    assert_eq!(rig.get(4), 4);
    // Another register as a source must be readable.
    rig.set(5, 100, W | I);
    rig.traps(
        &m(RegOp::Add, OpSource::Reg(5)),
        Trap::RegisterProtection { name: 5, need: R },
    );
    rig.set(5, 100, R);
    rig.ok(&m(RegOp::Add, OpSource::Reg(5)));
    assert_eq!(rig.get(4), 104);
    // Also through op2 / rc.
    let m2 = Msg::reg_op(1).regs([0, 0, 6, 0]).op2(RegOp::Set, OPD);
    rig.set(6, 0, R);
    rig.traps(&m2, Trap::RegisterProtection { name: 6, need: W });
}

#[test]
fn conditional_registers_need_no_protection() {
    let mut rig = Rig::new();
    rig.set(8, 3, NONE);
    rig.set(9, 3, NONE);
    let d = rig.ok(&Msg::reg_op(0)
        .regs([0, 0, 0, 8])
        .cond(Cond::Eq, OpSource::Reg(9)));
    assert!(d.interrupt);
}

#[test]
fn bad_register_names_trap_in_window_and_globals() {
    let mut rig = Rig::new(); // window 0..16, globals 128..136
    rig.set(0, 0, ALL);
    let cases: Vec<(Msg, u8)> = vec![
        (
            Msg::write(0, &[1])
                .mode(AddrMode::Indirect)
                .regs([16, 0, 0, 0]),
            16,
        ),
        (
            Msg::write(0, &[1])
                .mode(AddrMode::Indexed)
                .regs([136, 0, 0, 0]),
            136,
        ),
        (
            Msg::write(0, &[1])
                .mode(AddrMode::Indirect)
                .regs([127, 0, 0, 0]),
            127,
        ),
        (Msg::reg_op(0).regs([0, 17, 0, 0]).op1(RegOp::Set, OPD), 17),
        (
            Msg::reg_op(0).regs([0, 0, 255, 0]).op2(RegOp::Set, OPD),
            255,
        ),
        (
            Msg::reg_op(0)
                .regs([0, 0, 0, 0])
                .op1(RegOp::Set, OpSource::Reg(16)),
            16,
        ),
        (Msg::reg_op(0).regs([0, 0, 0, 99]).cond(Cond::Eq, OPD), 99),
        (
            Msg::reg_op(0)
                .regs([0, 0, 0, 0])
                .cond(Cond::Eq, OpSource::Reg(140)),
            140,
        ),
        (
            Msg::fetch_add(0, 1)
                .flag(flags::REG_TARGET)
                .regs([144, 0, 0, 0]),
            144,
        ),
    ];
    for (m, name) in cases {
        rig.traps(&m, Trap::BadRegister { name });
    }
    // Names that are not used are not checked.
    rig.ok(&Msg::write(0, &[1]).regs([255; 4]));
}

#[test]
fn a_window_past_the_end_of_the_file_names_nothing() {
    let mut rig = Rig::new();
    rig.window = RegWindow {
        base: rig.regs.capacity() - 2,
        len: 8,
    };
    rig.set(1, 0, W);
    rig.ok(&Msg::reg_op(5).regs([0, 1, 0, 0]).op1(RegOp::Set, OPD));
    rig.traps(
        &Msg::reg_op(5).regs([0, 2, 0, 0]).op1(RegOp::Set, OPD),
        Trap::BadRegister { name: 2 },
    );
    let none = RegisterFile::empty();
    let ctx = RegContext::none(&none);
    assert_eq!((ctx.resolve(0), ctx.resolve(128)), (None, None));
}

#[test]
fn windows_may_share_registers() {
    // Two connections' windows overlap on the queue pointer.
    let mut rig = Rig::new();
    rig.set(2, 500, I);
    rig.set(3, 10, NONE);
    let m = Msg::write(0, &[1; 10]).mode(AddrMode::PostIncrement);
    rig.ok(&m.clone().regs([2, 0, 0, 0]));
    let whole = rig.window;
    rig.window = whole.sub(2, 2).unwrap(); // the other connection's names 0, 1
    rig.ok(&m.clone().regs([0, 0, 0, 0]));
    rig.window = whole;
    assert_eq!(rig.get(2), 520);
    assert_eq!(&rig.mem.bytes[500..520], &[1; 20]);
}

// ---------------------------------------------------------------- malformed messages

#[test]
fn unknown_opcodes_trap() {
    let mut rig = Rig::new();
    for opcode in [op::NOP, 0x08, 0x7e, op::CM_CONNECT_REQ, op::NAK, 0xff] {
        let mut m = Msg::write(0, &[]);
        m.control.opcode = opcode;
        rig.traps(&m, Trap::UnknownOpcode(opcode));
    }
}

#[test]
fn unknown_descriptor_codes_trap() {
    let mut rig = Rig::new();
    let base = CompoundRepr::NONE.to_bytes();
    for (byte, value) in [(0, 15), (2, 0x80), (4, 7), (4, 8), (4, 16), (6, 3), (7, 1)] {
        let mut d = base;
        d[byte] = value;
        rig.traps(
            &Msg::write(0, &[1]).raw_desc(d),
            Trap::BadCompound {
                byte: byte as u8,
                value,
            },
        );
    }
}

#[test]
fn bad_lengths_trap() {
    let mut rig = Rig::new();
    let bad = |m: &Msg| Trap::BadLength {
        opcode: m.control.opcode,
        length: m.bytes().0.length,
    };
    let mut cases = vec![
        Msg::new(op::READ, 0, &[0; 15]),
        Msg::new(op::READ, 0, &[0; 17]),
        Msg::new(op::FETCH_ADD, 0, &[0; 7]),
        Msg::new(op::FETCH_ADD, 0, &[0; 16]),
        Msg::new(op::CMP_SWAP, 0, &[0; 8]),
        Msg::new(op::REG_OP, 0, &[0; 1]),
        Msg::new(op::EXCEPTION, 0, &[0; 8]),
        Msg::new(op::WRITE_MASKED, 0, &[0; 31]),
    ];
    // A descriptor counts in the length.
    cases.push(Msg::new(op::FETCH_ADD, 0, &[0; 8]).raw_desc(CompoundRepr::NONE.to_bytes()));
    cases.last_mut().unwrap().body.truncate(0);
    for m in &cases {
        rig.traps(m, bad(m));
    }
    // A compound write shorter than its descriptor.
    let mut c = ControlRepr {
        opcode: op::WRITE,
        flags: flags::COMPOUND,
        length: 5,
        ..ControlRepr::default()
    };
    let mut mem = rig.mem.clone();
    assert_eq!(
        plan(&c, &[0; 5], &rig.ctx(), &mut mem),
        Err(Trap::BadLength {
            opcode: op::WRITE,
            length: 5
        })
    );
    // Fewer bytes than the length field announces.
    c.flags = 0;
    assert_eq!(
        plan(&c, &[0; 4], &rig.ctx(), &mut mem),
        Err(Trap::PayloadTruncated {
            length: 5,
            payload: 4
        })
    );
}

#[test]
fn flags_an_opcode_does_not_allow_trap() {
    let mut rig = Rig::new();
    rig.set(0, 0, ALL);
    let cases = [
        Msg::write(0, &[1]).flag(flags::REPLY),
        Msg::write(0, &[1]).flag(flags::REG_TARGET),
        // SEGMENT only on plain writes, direct or relative (indexed).
        Msg::write(0, &[1])
            .flag(flags::SEGMENT)
            .mode(AddrMode::Indirect),
        Msg::write(0, &[1])
            .flag(flags::SEGMENT)
            .mode(AddrMode::PostIncrement),
        Msg::read(0, 1).flag(flags::SEGMENT),
        Msg::fetch_add(0, 1).flag(flags::SEGMENT),
        Msg::read(0, 1).flag(flags::REG_TARGET),
        Msg::reg_op(0).flag(flags::REG_TARGET),
        Msg::fetch_add(0, 1)
            .flag(flags::REG_TARGET)
            .mode(AddrMode::Indirect),
    ];
    for m in &cases {
        rig.traps(
            m,
            Trap::BadFlags {
                opcode: m.control.opcode,
                flags: m.bytes().0.flags,
            },
        );
    }
}

#[test]
fn a_page_fault_changes_no_register() {
    let mut rig = Rig::new();
    rig.mem.pages_present[1] = false;
    rig.set(0, PAGE as u64 - 4, I);
    rig.set(1, 8, NONE);
    rig.set(2, 0, W);
    let m = Msg::write(0, &[1; 8])
        .mode(AddrMode::PostIncrement)
        .regs([0, 2, 0, 0])
        .op1(RegOp::Add, OPD);
    let e = rig.run(&m).unwrap_err();
    assert_eq!(e, Trap::PageNotPresent { page: 1 });
    assert!(e.is_fault());
    assert_eq!((rig.get(0), rig.get(2)), (PAGE as u64 - 4, 0));
    // Repaired, the kept message runs exactly once.
    rig.mem.pages_present[1] = true;
    rig.ok(&m);
    assert_eq!((rig.get(0), rig.get(2)), (PAGE as u64 + 4, 0));
    assert_eq!(&rig.mem.bytes[PAGE - 4..PAGE + 4], &[1; 8]);
}

// ---------------------------------------------------------------- the seed's examples

/// Strided deposit, indirect + ADD operand: `<rp> ← MSG; rp ← rp + operand`.
#[test]
fn strided_deposit_with_varying_strides_by_operand() {
    let mut rig = Rig::new();
    rig.set(0, 0, I | W);
    for (i, stride) in [8u32, 16, 4, 12].into_iter().enumerate() {
        rig.ok(&Msg::write(stride, &[i as u8 + 1; 4])
            .mode(AddrMode::Indirect)
            .regs([0, 0, 0, 0])
            .op1(RegOp::Add, OPD));
    }
    for (at, v) in [(0, 1), (8, 2), (24, 3), (28, 4)] {
        assert_eq!(&rig.mem.bytes[at..at + 4], &[v; 4], "at {at}");
    }
    assert_eq!(rig.get(0), 40);
    // `addreg_i ← <addreg_i> + <addreg_i>`: doubling strides.
    rig.set(0, 1, I | W);
    for _ in 0..4 {
        rig.ok(&Msg::write(0, &[9])
            .mode(AddrMode::Indirect)
            .regs([0, 0, 0, 0])
            .op1(RegOp::Add, OpSource::Reg(0)));
    }
    assert_eq!(rig.get(0), 16);
    assert_eq!([1, 2, 4, 8].map(|i| rig.mem.bytes[i]), [9; 4]);
}

/// Strided deposit by post-increment: the receiver sets the stride, the sender only
/// names the pointer (and cannot read or set either).
#[test]
fn strided_deposit_by_postincrement() {
    let mut rig = Rig::new();
    rig.set(6, 1000, I);
    rig.set(7, 32, NONE);
    let m = |b: u8| {
        Msg::write(0, &[b; 32])
            .mode(AddrMode::PostIncrement)
            .regs([6, 0, 0, 0])
    };
    rig.ok(&m(1));
    rig.ok(&m(2));
    rig.set(7, 64, NONE);
    rig.ok(&m(3));
    rig.ok(&m(4));
    assert_eq!(&rig.mem.bytes[1000..1032], &[1; 32]);
    assert_eq!(&rig.mem.bytes[1032..1064], &[2; 32]);
    assert_eq!(&rig.mem.bytes[1064..1096], &[3; 32]);
    assert!(rig.mem.bytes[1096..1128].iter().all(|&b| b == 0));
    assert_eq!(&rig.mem.bytes[1128..1160], &[4; 32]);
}

/// Priority queue (seed §3.4): `<rp> ← MSG; rp += rs; if operand > <ri> interrupt;
/// ri |= operand`.
fn priority_message(priority: u32, data: u8) -> Msg {
    // rp = global 0 (stride global 1), ri = window 3.
    Msg::write(priority, &[data; 16])
        .mode(AddrMode::PostIncrement)
        .regs([128, 3, 0, 3])
        .cond(Cond::Lt, OPD) // <ri> < operand
        .order(Order::CondFirst)
        .op1(RegOp::Or, OPD)
}

#[test]
fn priority_queue_interrupts_on_higher_priority() {
    let mut rig = Rig::new();
    rig.set(128, 256, I); // queue tail
    rig.set(129, 16, NONE); // message size
    rig.set(3, 0, W); // priority level
    let fired: Vec<bool> = [(4, 1), (2, 2), (8, 3), (8, 4), (1, 5)]
        .into_iter()
        .map(|(p, d)| rig.ok(&priority_message(p, d)).interrupt)
        .collect();
    assert_eq!(fired, [true, false, true, false, false]);
    assert_eq!(rig.get(3), 4 | 2 | 8 | 1);
    assert_eq!(rig.get(128), 256 + 5 * 16);
    for i in 0..5 {
        assert_eq!(rig.mem.bytes[256 + 16 * i], i as u8 + 1);
    }
    // The sender cannot overwrite the queue pointer or the message size.
    for name in [128, 129] {
        rig.traps(
            &Msg::reg_op(0).regs([0, name, 0, 0]).op1(RegOp::Set, OPD),
            Trap::RegisterProtection { name, need: W },
        );
    }
}

/// Queues with a bit vector of non-empty queues; the top bit of ri blocks interrupts.
#[test]
fn queue_bit_vector_with_interrupts_blocked_by_the_top_bit() {
    let mut rig = Rig::new();
    // Queue q: pointer window register 2q, size 2q+1; ri = window register 15.
    for q in 0..3u8 {
        rig.set(2 * q, 1024 * q as u64, I);
        rig.set(2 * q + 1, 8, NONE);
    }
    rig.set(15, 1 << 63, W);
    let m = |q: u8| {
        Msg::write(1 << q, &[q + 1; 8])
            .mode(AddrMode::PostIncrement)
            .regs([2 * q, 15, 0, 15])
            .cond(Cond::Lt, OPD)
            .op1(RegOp::Or, OPD)
    };
    for q in [2, 0, 2] {
        assert!(!rig.ok(&m(q)).interrupt);
    }
    assert_eq!(rig.get(15), (1 << 63) | 0b101);
    assert_eq!(rig.get(4), 2048 + 16);
    assert_eq!(&rig.mem.bytes[2048..2064], &[3; 16]);
    // The receiver drains the queues and unblocks: the next arrival interrupts.
    rig.set(15, 0, W);
    assert!(rig.ok(&m(1)).interrupt);
    assert_eq!(rig.get(15), 0b10);
}

#[test]
fn fetch_and_increment_on_memory_and_on_a_register() {
    let mut rig = Rig::new();
    let olds: Vec<Reply> = (0..3)
        .map(|_| rig.ok(&Msg::fetch_add(64, 1)).reply)
        .collect();
    assert_eq!(olds, [Reply::Value(0), Reply::Value(1), Reply::Value(2)]);
    assert_eq!(rig.word(64), 3);
    rig.set(131, 100, R | W);
    let m = Msg::fetch_add(0, 1)
        .flag(flags::REG_TARGET)
        .regs([131, 0, 0, 0]);
    let olds: Vec<Reply> = (0..3).map(|_| rig.ok(&m).reply).collect();
    assert_eq!(
        olds,
        [Reply::Value(100), Reply::Value(101), Reply::Value(102)]
    );
    assert_eq!(rig.get(131), 103);
}

#[test]
fn compare_and_swap_on_a_register_lock() {
    let mut rig = Rig::new();
    rig.set(1, 0, R | W);
    let take = |me| {
        Msg::cmp_swap(0, 0, me)
            .flag(flags::REG_TARGET)
            .regs([1, 0, 0, 0])
    };
    assert_eq!(rig.ok(&take(7)).reply, Reply::Value(0));
    assert_eq!(rig.ok(&take(9)).reply, Reply::Value(7)); // failed: held by 7
    assert_eq!(rig.get(1), 7);
}

/// Barrier: each of three processes toggles its bit; the arrival that completes the set
/// (all bits set, then all cleared) interrupts.
#[test]
fn barrier_bit_toggling_interrupts_when_all_bits_match() {
    let mut rig = Rig::new();
    rig.set(10, 0, W); // the barrier register
    rig.set(11, 0b111, NONE); // all set
    rig.set(12, 0, NONE); // all clear
    let toggle = |k: u32, target: u8| {
        Msg::reg_op(1 << k)
            .regs([0, 10, 0, 10])
            .op1(RegOp::Xor, OPD)
            .cond(Cond::Eq, OpSource::Reg(target))
            .order(Order::CondLast)
    };
    let phase1: Vec<bool> = [1, 0, 2].map(|k| rig.ok(&toggle(k, 11)).interrupt).to_vec();
    assert_eq!(phase1, [false, false, true]);
    assert_eq!(rig.get(10), 0b111);
    let phase2: Vec<bool> = [2, 1, 0].map(|k| rig.ok(&toggle(k, 12)).interrupt).to_vec();
    assert_eq!(phase2, [false, false, true]);
    assert_eq!(rig.get(10), 0);
}

/// A sender may use a queue pointer only indirectly: never read it, never set it.
#[test]
fn a_sender_cannot_read_or_overwrite_an_indirect_only_queue_pointer() {
    let mut rig = Rig::new();
    rig.set(0, 512, I); // the queue pointer
    rig.set(1, 8, NONE); // its stride
    rig.set(2, 0, ALL); // the sender's scratch register
    let refused = [
        // Copy it into a readable register.
        (
            Msg::reg_op(0)
                .regs([0, 2, 0, 0])
                .op1(RegOp::Set, OpSource::Reg(0)),
            Trap::RegisterProtection { name: 0, need: R },
        ),
        // Overwrite or move it.
        (
            Msg::reg_op(0).regs([0, 0, 0, 0]).op1(RegOp::Set, OPD),
            Trap::RegisterProtection { name: 0, need: W },
        ),
        (
            Msg::reg_op(8).regs([0, 0, 0, 0]).op2(RegOp::Add, OPD),
            Trap::RegisterProtection { name: 0, need: W },
        ),
        // Learn it through a register atomic (add 0).
        (
            Msg::fetch_add(0, 0)
                .flag(flags::REG_TARGET)
                .regs([0, 0, 0, 0]),
            Trap::RegisterProtection {
                name: 0,
                need: R | W,
            },
        ),
        // Nor the stride.
        (
            Msg::reg_op(0).regs([0, 1, 0, 0]).op1(RegOp::Set, OPD),
            Trap::RegisterProtection { name: 1, need: W },
        ),
        (
            Msg::reg_op(0)
                .regs([0, 2, 0, 0])
                .op1(RegOp::Add, OpSource::Reg(1)),
            Trap::RegisterProtection { name: 1, need: R },
        ),
    ];
    for (m, want) in &refused {
        rig.traps(m, *want);
    }
    // What it may do: append through it.
    rig.ok(&Msg::write(0, &[5; 8])
        .mode(AddrMode::PostIncrement)
        .regs([0, 0, 0, 0]));
    assert_eq!(&rig.mem.bytes[512..520], &[5; 8]);
    assert_eq!(rig.get(0), 520);
}

// ---------------------------------------------------------------- real memory

#[test]
fn tlb_access_loads_and_stores_atomic_words_in_real_memory() {
    let mem = Arc::new(EndpointMemory::alloc_ordinary(4 * PAGE).unwrap());
    mem.store_u64(PAGE + 3 * PAGE - 8, 40).unwrap();
    let ep = EndpointEntry::new(mem.clone(), PAGE, 3 * PAGE, Rights::ALL).unwrap();
    let mut tlb = Tlb::new();
    let regs = RegisterFile::empty();
    let ctx = RegContext::none(&regs);
    let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
    let (c, payload) = Msg::fetch_add(3 * PAGE as u32 - 8, 2).bytes();
    let p = plan(&c, &payload, &ctx, &mut a).unwrap();
    assert_eq!(p.reply, Reply::Value(40));
    assert_eq!(
        mem.load_u64(4 * PAGE - 8).unwrap(),
        40,
        "plan stored nothing"
    );
    commit(&p, &mut RegisterFile::empty(), &mut a);
    assert_eq!(mem.load_u64(4 * PAGE - 8).unwrap(), 42);
    // A load across a page boundary.
    mem.write(PAGE + PAGE - 3, &[1, 2, 3, 4, 5, 6]).unwrap();
    let mut buf = [0u8; 6];
    a.load(PAGE as u64 - 3, &mut buf);
    assert_eq!(buf, [1, 2, 3, 4, 5, 6]);
}

// ---------------------------------------------------------------- fast path

#[test]
fn the_plain_deposit_fast_path_plans_like_the_decoder() {
    let mut rig = Rig::new();
    rig.mem.page_rights[1] = Rights::REMOTE_READ;
    let bound = 2 * PAGE as u32;
    let payload = pattern(300, 1);
    for operand in [0, 1, 4090, 4096, bound - 10, bound, bound + 1, u32::MAX] {
        for length in [0u32, 1, 10, 200, 301] {
            for f in [0, flags::LAST] {
                let c = ControlRepr {
                    opcode: op::WRITE,
                    flags: f,
                    operand,
                    length,
                    index: 0xffff_ffff,
                    ..ControlRepr::default()
                };
                let ctx = rig.ctx();
                let fast = plan(&c, &payload, &ctx, &mut rig.mem.clone());
                let mut general = Plan::NOTHING;
                let general =
                    plan_general(&c, &payload, &ctx, &mut rig.mem.clone(), None, &mut general)
                        .map(|_| general);
                assert_eq!(fast, general, "{c:?}");
            }
        }
    }
}

// ---------------------------------------------------------------- randomized

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
    fn name(&mut self) -> u8 {
        match self.below(4) {
            0 => self.next() as u8,
            1 => 128 + self.below(10) as u8,
            _ => self.below(18) as u8,
        }
    }
    fn source(&mut self) -> u8 {
        if self.below(2) == 0 {
            0xff
        } else {
            self.name()
        }
    }
}

#[test]
fn random_messages_never_panic_nor_touch_anything_outside_and_traps_change_nothing() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let ep_len = 2 * PAGE + 200;
    // Real memory with canary pages around the endpoint, and a shadow VecAccess.
    let mem = Arc::new(EndpointMemory::alloc_ordinary(5 * PAGE).unwrap());
    mem.fill(0, 5 * PAGE, 0xee).unwrap();
    let mut ep = EndpointEntry::new(mem.clone(), PAGE, ep_len, Rights::ALL).unwrap();
    ep.set_page_rights(1, Rights::REMOTE_READ | Rights::REMOTE_ATOMIC)
        .unwrap();
    let mut tlb = Tlb::new();
    let mut rig = Rig::with(16, 8, ep_len);
    rig.mem.bytes.fill(0xee);
    rig.mem.page_rights[1] = Rights::REMOTE_READ | Rights::REMOTE_ATOMIC;
    let (window, globals) = (rig.window, rig.globals);
    let prots = [NONE, R, W, I, R | W, W | I, ALL, ALL];

    let (mut oks, mut interrupts, mut replies) = (0, 0, 0);
    let mut seen = [false; crate::oplogic::DropReason::COUNT];
    for round in 0..200_000u32 {
        if round % 64 == 0 {
            rig.forced = rng.below(2) == 0;
            for abs in (window.base..window.base + 16).chain(globals.base..globals.base + 8) {
                let v = match rng.below(3) {
                    0 => rng.below(ep_len as u64 + 64),
                    1 => rng.below(64),
                    _ => rng.next(),
                };
                rig.regs.set(abs, v).unwrap();
                let prot = prots[rng.below(prots.len() as u64) as usize];
                rig.regs.set_prot(abs, prot).unwrap();
            }
            ep.set_page_present(2, rng.below(4) != 0).unwrap();
            rig.mem.pages_present[2] = ep.page(2).unwrap().present;
            // A multi-segment request in progress, or none (orphan later segments).
            rig.segment_base = match rng.below(3) {
                0 => None,
                1 => Some(rng.below(ep_len as u64 + 64)),
                _ => Some(rng.next()),
            };
        }
        let opcode = match rng.below(10) {
            0 => rng.next() as u8,
            _ => rng.below(8) as u8,
        };
        let mut f = rng.next() as u8 & !flags::REPLY;
        if rng.below(8) == 0 {
            f &= flags::LAST; // a plain deposit: the fast path
        }
        if rng.below(8) == 0 {
            f |= flags::REPLY;
        }
        if rng.below(2) == 0 {
            f &= !flags::REG_TARGET;
        }
        let operand = match rng.below(4) {
            0 => rng.next() as u32,
            1 => rng.below(64) as u32,
            _ => rng.below(ep_len as u64 + 64) as u32,
        };
        let desc = [
            rng.below(16) as u8,
            rng.source(),
            rng.below(16) as u8,
            rng.source(),
            rng.below(17) as u8,
            rng.source(),
            rng.below(4) as u8,
            (rng.below(16) == 0) as u8,
        ];
        let body_len = match opcode {
            op::WRITE => rng.below(100) as usize,
            op::WRITE_MASKED => 32,
            op::READ => 16,
            op::FETCH_ADD => 8,
            op::CMP_SWAP => 16,
            _ => 0,
        };
        let mut payload = Vec::new();
        if f & flags::COMPOUND != 0 {
            payload.extend_from_slice(&desc);
        }
        payload.extend((0..body_len).map(|_| rng.next() as u8));
        if opcode == op::READ && payload.len() >= 16 {
            let n = payload.len();
            let len = rng.below(300) as u32;
            payload[n - 4..].copy_from_slice(&len.to_be_bytes());
        }
        let mut length = payload.len() as u32;
        if rng.below(16) == 0 {
            length = length.wrapping_add(rng.below(3) as u32).wrapping_sub(1);
        }
        let control = ControlRepr {
            opcode,
            mask: rng.next() as u8,
            flags: f,
            operand,
            index: crate::wire::cell::index_of([rng.name(), rng.name(), rng.name(), rng.name()]),
            length,
        };

        let before = (rig.regs.clone(), rig.mem.clone());
        let mut shadow = rig.mem.clone();
        let planned = plan(&control, &payload, &rig.ctx(), &mut shadow);
        assert!(before.0 == rig.regs && before.1 == shadow);
        let mut general_out = Plan::NOTHING;
        let general = plan_general(
            &control,
            &payload,
            &rig.ctx(),
            &mut shadow,
            None,
            &mut general_out,
        )
        .map(|_| general_out);
        assert_eq!(planned, general);
        let real = plan(
            &control,
            &payload,
            &rig.ctx(),
            &mut TlbAccess::new(EndpointId(3), &ep, &mut tlb),
        );
        assert_eq!(planned, real, "{control:?}");
        let p = match planned {
            Ok(p) => p,
            Err(trap) => {
                seen[trap.reason() as usize] = true;
                continue;
            }
        };
        oks += 1;
        interrupts += p.interrupt as u32;
        replies += (p.reply != Reply::None) as u32;
        if let Some((ea, len)) = p.store.span() {
            assert!(ea + len as u64 <= ep_len as u64, "{control:?}");
        }
        if let Reply::Read { ea, len, .. } = p.reply {
            assert!(ea + len as u64 <= ep_len as u64);
        }
        for &(abs, _) in p.reg_writes() {
            let inside = |w: RegWindow| abs >= w.base && u64::from(abs) < w.end();
            assert!(inside(window) || inside(globals), "{abs} {control:?}");
        }
        assert!(!p.interrupt || f & flags::COMPOUND != 0 || opcode == op::EXCEPTION);
        commit(&p, &mut rig.regs, &mut rig.mem);
        commit(
            &p,
            &mut RegisterFile::empty(),
            &mut TlbAccess::new(EndpointId(3), &ep, &mut tlb),
        );
    }
    assert!(oks > 10_000, "only {oks} messages executed");
    assert!(
        interrupts > 1000 && replies > 2000,
        "{interrupts} {replies}"
    );
    // Every trap the operation logic raises was exercised.
    let traps = seen.iter().filter(|&&s| s).count();
    assert_eq!(traps, 13, "{seen:?}");
    let mut all = vec![0u8; 5 * PAGE];
    mem.read(0, &mut all).unwrap();
    assert!(all[..PAGE].iter().all(|&b| b == 0xee));
    assert!(all[PAGE + ep_len..].iter().all(|&b| b == 0xee));
    assert!(all[PAGE..PAGE + ep_len] == rig.mem.bytes[..]);
}

#[test]
fn a_compound_repeat_runs_the_frames_descriptor_and_needs_one() {
    let mut rig = Rig::new();
    rig.set(0, 64, RegProt::INDIRECT);
    rig.set(1, 16, RegProt::NONE);
    rig.set(2, 0, RegProt::WRITE);
    let full = Msg::write(0, &[5; 16])
        .mode(AddrMode::PostIncrement)
        .regs([0, 2, 0, 0])
        .op1(RegOp::Add, OpSource::Operand);
    let (c, payload) = full.bytes();
    let desc: [u8; 8] = payload[..8].try_into().unwrap();
    rig.ok(&full);
    // The same operation as a repeat: flag instead of descriptor.
    let mut rc = c;
    rc.flags = (rc.flags & !flags::COMPOUND) | flags::COMPOUND_REPEAT;
    rc.length = 16;
    let body = [6u8; 16];
    let mut mem = rig.mem.clone();
    let p = plan_in_frame(&rc, &body, &rig.ctx(), &mut mem, Some(&desc)).unwrap();
    commit(&p, &mut rig.regs, &mut rig.mem);
    assert_eq!(rig.get(0), 96, "post-incremented twice");
    assert_eq!(rig.get(2), 0, "op1 added the operand (0) twice");
    assert_eq!(p.store.span(), Some((80, 16)));
    // Without a descriptor earlier in the frame, or with both flags: refused.
    let before = (rig.regs.clone(), rig.mem.clone());
    let mut mem = rig.mem.clone();
    assert!(matches!(
        plan_in_frame(&rc, &body, &rig.ctx(), &mut mem, None),
        Err(Trap::BadFlags { .. })
    ));
    let mut both = rc;
    both.flags |= flags::COMPOUND;
    assert!(matches!(
        plan_in_frame(&both, &body, &rig.ctx(), &mut mem, Some(&desc)),
        Err(Trap::BadFlags { .. })
    ));
    assert!(before.0 == rig.regs && before.1 == rig.mem);
}
