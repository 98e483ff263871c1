//! The compound operation of one message, planned then committed (seed Fig. 10's
//! table-driven receive controller).
//!
//! [`plan`] decodes a message through the opcode table [`OPS`], generates the effective
//! address, checks every register name, protection, bound and right, and computes every
//! new register value and the bytes to store — without changing anything: it sees the
//! register file through `&` and endpoint memory only through `check` and `load`. The
//! result, a [`Plan`], is applied by [`commit`], which cannot fail. So a trapped message
//! (error or fault) has changed nothing, and a kept (faulted) message can be planned
//! again once the host has repaired it.
//!
//! One message runs, in this order:
//!
//! 1. address generation ([`AddrMode`]), including the post-increment of `ra`;
//! 2. the main operation (write, masked write, read, atomic on memory or on `ra`,
//!    nothing, or a software exception), at the address from step 1;
//! 3. register operation 1 (destination `rb`) and 2 (destination `rc`), with the
//!    conditional on `rd` before, between or after them ([`Order`]).
//!
//! Each step sees the register values the earlier steps produced. In the code,
//! `plan_general` runs `decode_message` (opcode, flags, length and descriptor: checked
//! before any register or memory is looked at), then the `Planner` steps `address`,
//! `main_operation` and `register_steps`, one function per step above.

use super::alu;
use super::{Access, EndpointAccess, Trap};
use crate::tables::{RegProt, RegWindow, RegisterFile};
use crate::wire::cell::{flags, op, regs_of, AddrMode};
use crate::wire::compound::{
    CompoundPacket, CompoundRepr, Cond, CondRepr, OpSource, Order, RegOp, RegOpRepr, COMPOUND_LEN,
};
use crate::wire::{ControlPacket, ControlRepr, BLOCK_LEN, CONTROL_LEN};

/// What a message may do with registers: the register file, the connection's window and
/// the target endpoint's global registers, and whether the connection accepts
/// sender-forced interrupts.
#[derive(Clone, Copy, Debug)]
pub struct RegContext<'a> {
    /// The node's register file.
    pub regs: &'a RegisterFile,
    /// The connection's window (names 0..=127).
    pub window: RegWindow,
    /// The target endpoint's global registers (names 128..=255).
    pub globals: RegWindow,
    /// Whether conditional `ALWAYS` and `EXCEPTION` may interrupt the receiver.
    pub allow_forced_interrupts: bool,
    /// Register writes planned by earlier steps of the same message (the sequencer's
    /// chain), `(absolute index, value)` in order: the message sees them as the
    /// register values.
    pub prior: &'a [(u32, u64)],
    /// Register names the receiver supplied (an instruction's own `ra`, `rb`, `rc`,
    /// `rd`, and the sources of its descriptor as the last entry): protection bits are
    /// for senders, so these are only bounds-checked.
    pub trusted: [bool; 5],
    /// The effective address the first segment of the message's work request generated,
    /// when the message is a later segment of it (`SEGMENT` in indexed mode: placed
    /// relative to that address) and the first segment ran here.
    pub segment_base: Option<u64>,
}

impl<'a> RegContext<'a> {
    /// No registers, no forced interrupts: what a plain deposit needs.
    pub fn none(regs: &'a RegisterFile) -> Self {
        Self {
            regs,
            window: RegWindow::EMPTY,
            globals: RegWindow::EMPTY,
            allow_forced_interrupts: false,
            prior: &[],
            trusted: [false; 5],
            segment_base: None,
        }
    }

    /// Absolute index of register `name` (window below 128, global from 128), when the
    /// name is inside its window and the window inside the file.
    #[inline]
    pub fn resolve(&self, name: u8) -> Option<u32> {
        let abs = if name < 128 {
            self.window.resolve(name)
        } else {
            self.globals.resolve(name - 128)
        }?;
        self.regs.get(abs).map(|_| abs)
    }

    /// Absolute index of the register after `name` in the same window (the stride of a
    /// post-increment).
    #[inline]
    fn resolve_next(&self, name: u8) -> Option<u32> {
        if name == 127 || name == 255 {
            return None;
        }
        self.resolve(name + 1)
    }
}

/// Bytes a message stores in endpoint memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Store<'p> {
    /// Nothing.
    #[default]
    None,
    /// `data` at `ea`.
    Bytes {
        /// Effective address.
        ea: u64,
        /// The bytes (part of the message payload).
        data: &'p [u8],
    },
    /// Word `i` of `block` (4 bytes at `ea + 4i`) where mask bit `i` is set.
    Masked {
        /// Effective address of word 0.
        ea: u64,
        /// The 32-byte block (part of the message payload).
        block: &'p [u8; BLOCK_LEN],
        /// The word mask.
        mask: u8,
    },
    /// The native-endian 8-byte word `value` at `ea` (an atomic's new value).
    Word {
        /// Effective address (a multiple of 8).
        ea: u64,
        /// The new value.
        value: u64,
    },
}

impl Store<'_> {
    /// The bytes the store touches, `(first byte, length)`; for a masked write the span
    /// from the lowest to the highest word stored (length 0 for mask 0).
    pub fn span(&self) -> Option<(u64, u32)> {
        match *self {
            Store::None => None,
            Store::Bytes { ea, data } => Some((ea, data.len() as u32)),
            Store::Masked { ea, mask: 0, .. } => Some((ea, 0)),
            Store::Masked { ea, mask, .. } => {
                let (start, span) = masked_span(ea, mask);
                Some((start.unwrap_or(ea), span as u32))
            }
            Store::Word { ea, .. } => Some((ea, 8)),
        }
    }
}

/// What a message returns to its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reply {
    /// Nothing.
    #[default]
    None,
    /// A read: the worker sends `len` bytes at `ea` (checked readable by the plan) back
    /// in writes built from `reply_control`.
    Read {
        /// Effective address.
        ea: u64,
        /// Bytes to read (`reply_control.length`).
        len: u32,
        /// The control part of the reply write, as the requester sent it.
        reply_control: ControlRepr,
    },
    /// The old value of an atomic.
    Value(u64),
}

/// What the receiver's event queue would be told of the message, should it interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EventInfo {
    /// The opcode.
    pub opcode: u8,
    /// The operand.
    pub operand: u32,
    /// The effective address (the operand in direct mode).
    pub ea: u64,
    /// Bytes the main operation touches (data written, bytes to read, 8 for an atomic,
    /// 32 for a masked write, 0 without a memory operation).
    pub len: u32,
    /// Values of `ra`, `rb`, `rc`, `rd` after the operation; 0 for those it did not use.
    /// Read only when the plan interrupts (all 0 otherwise): nothing else reports them.
    pub regs: [u64; 4],
}

/// Register writes a plan can hold: post-increment or register atomic, op1, op2.
pub const MAX_REG_WRITES: usize = 3;

/// Everything a message would change, computed with no side effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan<'p> {
    /// Register writes `(absolute index, value)` in order; a later write to the same
    /// register wins. Only the first `n_reg_writes` are meaningful.
    pub reg_writes: [(u32, u64); MAX_REG_WRITES],
    /// Number of register writes.
    pub n_reg_writes: usize,
    /// Bytes to store.
    pub store: Store<'p>,
    /// What to return to the sender.
    pub reply: Reply,
    /// Whether the receiver is interrupted at the end (a conditional held, `ALWAYS`, or
    /// a software exception).
    pub interrupt: bool,
    /// What the event would report.
    pub event: EventInfo,
}

impl Plan<'_> {
    /// A plan that changes nothing (the start of every plan).
    pub const NOTHING: Plan<'static> = Plan {
        reg_writes: [(0, 0); MAX_REG_WRITES],
        n_reg_writes: 0,
        store: Store::None,
        reply: Reply::None,
        interrupt: false,
        event: EventInfo {
            opcode: 0,
            operand: 0,
            ea: 0,
            len: 0,
            regs: [0; 4],
        },
    };

    /// The register writes, in order.
    #[inline]
    pub fn reg_writes(&self) -> &[(u32, u64)] {
        &self.reg_writes[..self.n_reg_writes.min(MAX_REG_WRITES)]
    }

    /// Bytes the plan stores (the span of its store).
    #[inline]
    pub fn bytes_stored(&self) -> u64 {
        self.store.span().map_or(0, |s| u64::from(s.1))
    }
}

/// The main operation of an opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Main {
    /// Not executable here.
    Unknown,
    Write,
    WriteMasked,
    Read,
    FetchAdd,
    CmpSwap,
    /// Register operations and a conditional only.
    Registers,
    /// Software exception.
    Exception,
}

/// One row of the receive controller's decode table.
#[derive(Clone, Copy, Debug)]
struct OpInfo {
    main: Main,
    /// The memory access (of a memory target).
    access: Option<Access>,
    /// Payload bytes after the descriptor; `None`: any number.
    body: Option<usize>,
    /// Whether a value (read data, old value) goes back to the sender.
    returns: bool,
    /// Whether the opcode may carry a compound descriptor.
    compound: bool,
}

const fn row(
    main: Main,
    access: Option<Access>,
    body: Option<usize>,
    returns: bool,
    compound: bool,
) -> OpInfo {
    OpInfo {
        main,
        access,
        body,
        returns,
        compound,
    }
}

/// The decode table, indexed by opcode; opcodes past its end are unknown.
#[rustfmt::skip]
const OPS: [OpInfo; 8] = [
    /* NOP          */ row(Main::Unknown, None, Some(0), false, false),
    /* WRITE_MASKED */ row(Main::WriteMasked, Some(Access::Write), Some(BLOCK_LEN), false, true),
    /* WRITE        */ row(Main::Write, Some(Access::Write), None, false, true),
    /* READ         */ row(Main::Read, Some(Access::Read), Some(CONTROL_LEN), true, true),
    /* FETCH_ADD    */ row(Main::FetchAdd, Some(Access::Atomic), Some(8), true, true),
    /* CMP_SWAP     */ row(Main::CmpSwap, Some(Access::Atomic), Some(16), true, true),
    /* REG_OP       */ row(Main::Registers, None, Some(0), false, true),
    /* EXCEPTION    */ row(Main::Exception, None, Some(0), false, true),
];

const _: () = {
    assert!(op::WRITE_MASKED == 1 && op::WRITE == 2 && op::READ == 3);
    assert!(op::FETCH_ADD == 4 && op::CMP_SWAP == 5 && op::REG_OP == 6 && op::EXCEPTION == 7);
};

/// Bytes of one word of a masked write.
const WORD: u64 = 4;

/// The plan under construction: register values seen through the writes planned so far.
struct Planner<'c, 'o, 'p> {
    ctx: &'c RegContext<'c>,
    operand: u32,
    /// Written in place (a plan is ~200 bytes: moving it out cost a memmove per message).
    plan: &'o mut Plan<'p>,
    /// Absolute indices of `ra`, `rb`, `rc`, `rd` where the message used them (their
    /// values go in the event).
    named: [Option<u32>; 4],
}

impl<'p> Planner<'_, '_, 'p> {
    /// Current value of register `abs` (resolved): the last planned write, else the file.
    #[inline]
    fn value(&self, abs: u32) -> u64 {
        for w in self.plan.reg_writes().iter().rev() {
            if w.0 == abs {
                return w.1;
            }
        }
        for w in self.ctx.prior.iter().rev() {
            if w.0 == abs {
                return w.1;
            }
        }
        self.ctx.regs.get(abs).unwrap_or(0)
    }

    #[inline]
    fn write(&mut self, abs: u32, v: u64) {
        if let Some(slot) = self.plan.reg_writes.get_mut(self.plan.n_reg_writes) {
            *slot = (abs, v);
            self.plan.n_reg_writes += 1;
        }
    }

    /// Register `name`, which the sender needs `need` on.
    #[inline]
    fn register(&self, name: u8, need: RegProt, slot: usize) -> Result<u32, Trap> {
        let abs = self.ctx.resolve(name).ok_or(Trap::BadRegister { name })?;
        if self.ctx.trusted[slot] {
            return Ok(abs);
        }
        let prot = self.ctx.regs.prot(abs).unwrap_or(RegProt::NONE);
        if prot.contains(need) {
            Ok(abs)
        } else {
            Err(Trap::RegisterProtection { name, need })
        }
    }

    fn forced_interrupt(&mut self) -> Result<(), Trap> {
        if !self.ctx.allow_forced_interrupts {
            return Err(Trap::ForcedInterruptRefused);
        }
        self.plan.interrupt = true;
        Ok(())
    }

    /// `<dest> ← op(<dest>, src)`; returns the destination's absolute index.
    #[inline(always)]
    fn reg_op(&mut self, r: RegOpRepr, dest: u8, slot: usize) -> Result<Option<u32>, Trap> {
        if r.op == RegOp::None {
            return Ok(None);
        }
        let d = self.register(dest, RegProt::WRITE, slot)?;
        let src = match r.src {
            OpSource::Operand => alu::extend(self.operand, r.op.is_signed()),
            OpSource::Reg(name) => {
                let s = self.ctx.resolve(name).ok_or(Trap::BadRegister { name })?;
                if s != d {
                    self.register(name, RegProt::READ, 4)?;
                }
                self.value(s)
            }
        };
        let v = alu::apply(r.op, self.value(d), src);
        self.write(d, v);
        Ok(Some(d))
    }

    /// Evaluates the conditional; returns the absolute index of `rd` when it was tested.
    /// Inlined, as [`Planner::reg_op`]: called out of line, each returned its result
    /// through memory, read back wider than written (a forwarding stall a message).
    #[inline(always)]
    fn cond(&mut self, c: CondRepr, rd: u8) -> Result<Option<u32>, Trap> {
        if !c.cond.compares() {
            if c.cond == Cond::Always {
                self.forced_interrupt()?;
            }
            return Ok(None);
        }
        // Conditional registers need no protection: the result only interrupts the
        // receiver, nothing is returned or changed.
        let d = self.ctx.resolve(rd).ok_or(Trap::BadRegister { name: rd })?;
        let rhs = match c.rhs {
            OpSource::Operand => alu::extend(self.operand, c.cond.is_signed()),
            OpSource::Reg(name) => {
                let s = self.ctx.resolve(name).ok_or(Trap::BadRegister { name })?;
                self.value(s)
            }
        };
        if alu::holds(c.cond, self.value(d), rhs) {
            self.plan.interrupt = true;
        }
        Ok(Some(d))
    }
}

/// Whether a message is a plain deposit: a direct `WRITE` with no flag but `LAST` or
/// `SEGMENT` (no descriptor, no register named). Most small messages are these.
#[inline(always)]
pub fn is_plain_deposit(control: &ControlRepr) -> bool {
    control.opcode == op::WRITE && control.flags & !(flags::LAST | flags::SEGMENT) == 0
}

/// A plain deposit's address and bytes, checked — the announced length, then bounds
/// and the write right at the effective address (the operand): the one definition
/// [`plan`] and the worker's deposit without a plan both run.
#[inline(always)]
pub fn plain_deposit<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    mem: &mut impl EndpointAccess,
) -> Result<(u64, &'p [u8]), Trap> {
    let data = announced(control, payload)?;
    let ea = u64::from(control.operand);
    mem.check(ea, data.len() as u64, Access::Write)?;
    Ok((ea, data))
}

/// Whether a message is a plain read request: a direct `READ` with no flag but `LAST`
/// (no descriptor, no register named).
#[inline(always)]
pub fn is_plain_read(control: &ControlRepr) -> bool {
    control.opcode == op::READ && control.flags == flags::LAST
}

/// A plain read request's reply, checked as the general planner checks any `READ`
/// (the decode table's shape checks, then `read_reply` at the operand): what the
/// worker runs for one without building a plan.
#[inline]
pub fn plain_read(
    control: &ControlRepr,
    payload: &[u8],
    mem: &mut impl EndpointAccess,
) -> Result<Reply, Trap> {
    let msg = decode_message(control, payload, None)?;
    read_reply(control, u64::from(control.operand), msg.body, mem)
}

/// The reply a `READ` at `ea` with `body` (the reply's control part) asks for, after
/// checking the range readable.
#[inline(always)]
fn read_reply(
    control: &ControlRepr,
    ea: u64,
    body: &[u8],
    mem: &mut impl EndpointAccess,
) -> Result<Reply, Trap> {
    let rc = reply_control(body).ok_or_else(|| bad_length(control))?;
    mem.check(ea, u64::from(rc.length), Access::Read)?;
    Ok(Reply::Read {
        ea,
        len: rc.length,
        reply_control: rc,
    })
}

/// The `length` bytes of `payload` the control part announces (the rest is padding of
/// the last cell); fewer is a trap.
#[inline]
pub fn announced<'p>(control: &ControlRepr, payload: &'p [u8]) -> Result<&'p [u8], Trap> {
    payload
        .get(..control.length as usize)
        .ok_or(Trap::PayloadTruncated {
            length: control.length,
            payload: payload.len(),
        })
}

/// The decode-table row of `opcode`.
#[inline]
fn decode(opcode: u8) -> Result<&'static OpInfo, Trap> {
    match OPS.get(opcode as usize) {
        Some(info) if info.main != Main::Unknown => Ok(info),
        _ => Err(Trap::UnknownOpcode(opcode)),
    }
}

/// Plans one message: decodes it, checks everything and computes every change, with no
/// side effect: registers are only read, memory only `check`ed and `load`ed. `payload`
/// may be longer than the length field (padding of the last cell); shorter is a trap.
///
/// Steps, each seeing the register values of the ones before: (1) address generation
/// with the post-increment of `ra`; (2) the main operation at that address (an atomic
/// with `REG_TARGET` acts on `ra`); (3) op1 on `rb`, op2 on `rc` and the conditional on
/// `rd`, in the descriptor's [`Order`]. Protection: `ra` as an address needs
/// [`RegProt::INDIRECT`] (its stride register `ra + 1` nothing); a register operation's
/// destination needs [`RegProt::WRITE`] and another register as its source
/// [`RegProt::READ`]; a register atomic needs both on `ra`; conditional registers need
/// nothing; `ALWAYS` and `EXCEPTION` need [`RegContext::allow_forced_interrupts`].
///
/// Payload (after the 8-byte compound descriptor when `COMPOUND` is set): `WRITE` any
/// number of bytes; `WRITE_MASKED` the 32-byte block; `READ` the reply's 16-byte control
/// part; `FETCH_ADD` the add value and `CMP_SWAP` compare then swap value, u64 big
/// endian; `REG_OP`, `EXCEPTION` nothing.
///
/// A plain deposit (a direct `WRITE` with no flag but `LAST`) takes an inlined fast path
/// that computes the same plan as the general decoder, without its table walk.
#[inline]
pub fn plan<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
) -> Result<Plan<'p>, Trap> {
    if is_plain_deposit(control) {
        let (ea, data) = plain_deposit(control, payload, mem)?;
        return Ok(Plan {
            store: Store::Bytes { ea, data },
            event: EventInfo {
                opcode: op::WRITE,
                operand: control.operand,
                ea,
                len: control.length,
                regs: [0; 4],
            },
            ..Plan::NOTHING
        });
    }
    let mut out = Plan::NOTHING;
    plan_general(control, payload, ctx, mem, None, &mut out)?;
    Ok(out)
}

/// [`plan`] for a message inside a frame: `frame_descriptor` is the compound descriptor
/// of the latest message before it in the frame that carried one, which a message
/// flagged `COMPOUND_REPEAT` runs (without one, such a message is refused).
#[inline]
pub fn plan_in_frame<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
    frame_descriptor: Option<&[u8; COMPOUND_LEN]>,
) -> Result<Plan<'p>, Trap> {
    if control.flags & flags::COMPOUND_REPEAT == 0 {
        return plan(control, payload, ctx, mem);
    }
    let mut out = Plan::NOTHING;
    plan_general(control, payload, ctx, mem, frame_descriptor, &mut out)?;
    Ok(out)
}

/// [`plan_in_frame`] writing the plan into `out` (the worker's per-message path: no
/// move of the plan). On a trap `out` holds a partial plan that must not be committed.
#[inline]
pub fn plan_into<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
    frame_descriptor: Option<&[u8; COMPOUND_LEN]>,
    out: &mut Plan<'p>,
) -> Result<(), Trap> {
    if is_plain_deposit(control) {
        *out = plan(control, payload, ctx, mem)?;
        return Ok(());
    }
    plan_general(control, payload, ctx, mem, frame_descriptor, out)
}

/// `base + operand` (indexed addressing, and a later segment placed after its
/// request's first); out of bounds of an endpoint of `bound` bytes when it overflows.
#[inline]
fn offset_address(base: u64, operand: u32, bound: u64) -> Result<u64, Trap> {
    base.checked_add(u64::from(operand))
        .ok_or(Trap::OutOfBounds {
            ea: base,
            len: u64::from(operand),
            bound,
        })
}

/// [`plan`] through the decode table: every opcode, flag and descriptor. The steps of
/// the module doc in order, each seeing the register values the ones before planned.
///
/// The steps are `#[inline(always)]`: each has this one caller, and the compiler must
/// see them as one body (with plain `#[inline]` it outlined three of them, and the
/// fastpath bench's compound write went from 64 to 76 ns).
#[inline(never)]
fn plan_general<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
    frame_descriptor: Option<&[u8; COMPOUND_LEN]>,
    out: &mut Plan<'p>,
) -> Result<(), Trap> {
    let msg = decode_message(control, payload, frame_descriptor)?;
    *out = Plan {
        event: EventInfo {
            opcode: control.opcode,
            operand: control.operand,
            ..EventInfo::default()
        },
        ..Plan::NOTHING
    };
    let mut p = Planner {
        ctx,
        operand: control.operand,
        plan: out,
        named: [None; 4],
    };
    let [ra, rb, rc, rd] = regs_of(control.index);
    let ea = p.address(control.index, msg.flags, ra, mem)?;
    p.main_operation(control, &msg, ea, ra, mem)?;
    // A plain deposit has no descriptor and skips the lot.
    if let Some(desc) = &msg.desc {
        p.register_steps(desc, rb, rc, rd)?;
    }
    // The register values are the event's: read only when there will be one.
    if p.plan.interrupt {
        p.report_registers();
    }
    Ok(())
}

/// The flags of a message, taken apart (checked by [`check_flags`]).
#[derive(Clone, Copy, Debug)]
struct MessageFlags {
    mode: AddrMode,
    /// `COMPOUND_REPEAT`: the message runs the frame's latest descriptor.
    repeat: bool,
    /// A compound descriptor applies, carried (`COMPOUND`) or repeated.
    compound: bool,
    /// `REG_TARGET`: an atomic on `ra` instead of memory.
    reg_target: bool,
    /// `SEGMENT`: a later segment of a plain write.
    segment: bool,
}

impl MessageFlags {
    #[inline(always)]
    fn of(f: u8) -> Self {
        let repeat = f & flags::COMPOUND_REPEAT != 0;
        Self {
            mode: AddrMode::from_flags(f),
            repeat,
            compound: f & flags::COMPOUND != 0 || repeat,
            reg_target: f & flags::REG_TARGET != 0,
            segment: f & flags::SEGMENT != 0,
        }
    }
}

/// A message whose shape (opcode, flags, length, descriptor) holds: what the planning
/// steps work from.
#[derive(Clone, Copy, Debug)]
struct Decoded<'p> {
    info: &'static OpInfo,
    flags: MessageFlags,
    /// The compound descriptor that applies (carried or the frame's), if any.
    desc: Option<CompoundRepr>,
    /// The payload after the descriptor, cut to the announced length.
    body: &'p [u8],
}

fn bad_flags(control: &ControlRepr) -> Trap {
    Trap::BadFlags {
        opcode: control.opcode,
        flags: control.flags,
    }
}

fn bad_length(control: &ControlRepr) -> Trap {
    Trap::BadLength {
        opcode: control.opcode,
        length: control.length,
    }
}

/// Decodes a message and checks its shape from the control part and payload alone:
/// no register is read, no memory checked.
#[inline(always)]
fn decode_message<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    frame_descriptor: Option<&[u8; COMPOUND_LEN]>,
) -> Result<Decoded<'p>, Trap> {
    let info = decode(control.opcode)?;
    let f = MessageFlags::of(control.flags);
    check_flags(control, info, f, frame_descriptor.is_some())?;
    let desc_len = if f.compound && !f.repeat {
        COMPOUND_LEN
    } else {
        0
    };
    if info
        .body
        .is_some_and(|n| control.length as usize != n + desc_len)
    {
        return Err(bad_length(control));
    }
    let payload = announced(control, payload)?;
    let (desc, body) = if f.compound {
        let (desc, body) = split_descriptor(control, payload, f.repeat, frame_descriptor)?;
        (Some(desc), body)
    } else {
        (None, payload)
    };
    Ok(Decoded {
        info,
        flags: f,
        desc,
        body,
    })
}

/// Refuses a flag the opcode does not take, or a combination of flags that means
/// nothing.
#[inline(always)]
fn check_flags(
    control: &ControlRepr,
    info: &OpInfo,
    f: MessageFlags,
    frame_has_descriptor: bool,
) -> Result<(), Trap> {
    // SEGMENT belongs to plain writes only, direct (an absolute address) or indexed
    // (relative to the request's first segment; see `wire::cell::flags`).
    let bad_segment = f.segment
        && (control.opcode != op::WRITE
            || !matches!(f.mode, AddrMode::Direct | AddrMode::Indexed)
            || f.compound
            || f.reg_target);
    let bad_reg_target =
        f.reg_target && (info.access != Some(Access::Atomic) || f.mode != AddrMode::Direct);
    if control.flags & flags::REPLY != 0
        || bad_segment
        || (control.flags & flags::COMPOUND != 0 && f.repeat)
        || (f.repeat && !frame_has_descriptor)
        || (f.compound && !info.compound)
        || bad_reg_target
    {
        return Err(bad_flags(control));
    }
    Ok(())
}

/// The compound descriptor of a message and the body after it: the frame's with
/// `repeat`, else the head of `payload`.
#[inline(always)]
fn split_descriptor<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    repeat: bool,
    frame_descriptor: Option<&[u8; COMPOUND_LEN]>,
) -> Result<(CompoundRepr, &'p [u8]), Trap> {
    let (d, body) = match frame_descriptor {
        Some(d) if repeat => (&d[..], payload),
        _ => payload
            .split_at_checked(COMPOUND_LEN)
            .ok_or_else(|| bad_length(control))?,
    };
    let desc = CompoundRepr::parse(&CompoundPacket::new_unchecked(d)).map_err(|e| {
        let (byte, value) = e.byte_and_value();
        Trap::BadCompound { byte, value }
    })?;
    Ok((desc, body))
}

/// The steps of [`plan_general`], after decoding.
impl<'p> Planner<'_, '_, 'p> {
    /// Step 1, address generation: the effective address (also the event's), and the
    /// post-increment of `ra`.
    #[inline(always)]
    fn address(
        &mut self,
        index: u32,
        f: MessageFlags,
        ra: u8,
        mem: &impl EndpointAccess,
    ) -> Result<u64, Trap> {
        let ea = match f.mode {
            AddrMode::Direct => u64::from(self.operand),
            _ if f.segment => self.segment_address(index, mem)?,
            mode => self.register_address(mode, ra, mem)?,
        };
        self.plan.event.ea = ea;
        Ok(ea)
    }

    /// A later segment's address: the one its request's first segment generated, plus
    /// its offset in the request. The registers were used (and post-incremented) once,
    /// by the first segment.
    #[inline(always)]
    fn segment_address(&self, segment: u32, mem: &impl EndpointAccess) -> Result<u64, Trap> {
        let base = self
            .ctx
            .segment_base
            .ok_or(Trap::OrphanSegment { segment })?;
        offset_address(base, self.operand, mem.len())
    }

    /// An address from `ra` (indirect, indexed, post-increment).
    #[inline(always)]
    fn register_address(
        &mut self,
        mode: AddrMode,
        ra: u8,
        mem: &impl EndpointAccess,
    ) -> Result<u64, Trap> {
        let a = self.register(ra, RegProt::INDIRECT, 0)?;
        self.named[0] = Some(a);
        let base = self.value(a);
        match mode {
            AddrMode::Indexed => offset_address(base, self.operand, mem.len()),
            AddrMode::PostIncrement => {
                let s = self.ctx.resolve_next(ra).ok_or(Trap::BadRegister {
                    name: ra.wrapping_add(1),
                })?;
                // Wrapping, like ADD: the next message's address is checked then.
                self.write(a, base.wrapping_add(self.value(s)));
                Ok(base)
            }
            _ => Ok(base),
        }
    }

    /// Step 2, the main operation at `ea`: its store or reply, and the event's length.
    #[inline(always)]
    fn main_operation(
        &mut self,
        control: &ControlRepr,
        msg: &Decoded<'p>,
        ea: u64,
        ra: u8,
        mem: &mut impl EndpointAccess,
    ) -> Result<(), Trap> {
        let body = msg.body;
        match msg.info.main {
            Main::Write => self.main_write(ea, body, mem)?,
            Main::WriteMasked => self.main_write_masked(control, ea, body, mem)?,
            Main::Read => self.main_read(control, ea, body, mem)?,
            main @ (Main::FetchAdd | Main::CmpSwap) => {
                let op = AtomicOp::parse(main, body).ok_or_else(|| bad_length(control))?;
                let target = msg.flags.reg_target.then_some(ra);
                self.main_atomic(op, ea, target, mem)?;
            }
            Main::Registers => {}
            Main::Exception => self.forced_interrupt()?,
            Main::Unknown => return Err(Trap::UnknownOpcode(control.opcode)),
        }
        debug_assert_eq!(msg.info.returns, self.plan.reply != Reply::None);
        Ok(())
    }

    #[inline(always)]
    fn main_write(
        &mut self,
        ea: u64,
        body: &'p [u8],
        mem: &mut impl EndpointAccess,
    ) -> Result<(), Trap> {
        mem.check(ea, body.len() as u64, Access::Write)?;
        self.plan.store = Store::Bytes { ea, data: body };
        self.plan.event.len = body.len() as u32;
        Ok(())
    }

    #[inline(always)]
    fn main_write_masked(
        &mut self,
        control: &ControlRepr,
        ea: u64,
        body: &'p [u8],
        mem: &mut impl EndpointAccess,
    ) -> Result<(), Trap> {
        let block: &'p [u8; BLOCK_LEN] = body.try_into().map_err(|_| bad_length(control))?;
        let mask = control.mask;
        if mask == 0 {
            // Like a zero-length WRITE: nothing stored, the address and right must hold.
            mem.check(ea, 0, Access::Write)?;
        } else {
            let (start, span) = masked_span(ea, mask);
            let start = start.ok_or(Trap::OutOfBounds {
                ea,
                len: BLOCK_LEN as u64,
                bound: mem.len(),
            })?;
            mem.check(start, span, Access::Write)?;
        }
        self.plan.store = Store::Masked { ea, block, mask };
        self.plan.event.len = BLOCK_LEN as u32;
        Ok(())
    }

    #[inline(always)]
    fn main_read(
        &mut self,
        control: &ControlRepr,
        ea: u64,
        body: &[u8],
        mem: &mut impl EndpointAccess,
    ) -> Result<(), Trap> {
        let reply = read_reply(control, ea, body, mem)?;
        if let Reply::Read { len, .. } = reply {
            self.plan.event.len = len;
        }
        self.plan.reply = reply;
        Ok(())
    }

    /// An atomic on the word at `ea`, or with `REG_TARGET` on register `ra`
    /// (`target`); the old value goes back to the sender.
    #[inline(always)]
    fn main_atomic(
        &mut self,
        op: AtomicOp,
        ea: u64,
        target: Option<u8>,
        mem: &mut impl EndpointAccess,
    ) -> Result<(), Trap> {
        let old = match target {
            Some(ra) => self.atomic_on_register(op, ra)?,
            None => self.atomic_on_memory(op, ea, mem)?,
        };
        self.plan.reply = Reply::Value(old);
        self.plan.event.len = 8;
        Ok(())
    }

    #[inline(always)]
    fn atomic_on_register(&mut self, op: AtomicOp, ra: u8) -> Result<u64, Trap> {
        let t = self.register(ra, RegProt::READ | RegProt::WRITE, 0)?;
        self.named[0] = Some(t);
        let old = self.value(t);
        if let Some(v) = op.new_value(old) {
            self.write(t, v);
        }
        Ok(old)
    }

    #[inline(always)]
    fn atomic_on_memory(
        &mut self,
        op: AtomicOp,
        ea: u64,
        mem: &mut impl EndpointAccess,
    ) -> Result<u64, Trap> {
        if ea % 8 != 0 {
            return Err(Trap::Misaligned { ea });
        }
        mem.check(ea, 8, Access::Atomic)?;
        let mut b = [0u8; 8];
        mem.load(ea, &mut b);
        let old = u64::from_ne_bytes(b);
        if let Some(value) = op.new_value(old) {
            self.plan.store = Store::Word { ea, value };
        }
        Ok(old)
    }

    /// Step 3: op1 on `rb`, op2 on `rc` and the conditional on `rd`, in the
    /// descriptor's [`Order`].
    #[inline(always)]
    fn register_steps(&mut self, desc: &CompoundRepr, rb: u8, rc: u8, rd: u8) -> Result<(), Trap> {
        let mut tested = None;
        if desc.order == Order::CondFirst {
            tested = self.cond(desc.cond, rd)?;
        }
        self.named[1] = self.reg_op(desc.op1, rb, 1)?;
        if desc.order == Order::CondAfterOp1 {
            tested = self.cond(desc.cond, rd)?;
        }
        self.named[2] = self.reg_op(desc.op2, rc, 2)?;
        if desc.order == Order::CondLast {
            tested = self.cond(desc.cond, rd)?;
        }
        self.named[3] = tested;
        Ok(())
    }

    /// The event's register values: those of `ra`..`rd` the message used, as the plan
    /// leaves them.
    #[inline(always)]
    fn report_registers(&mut self) {
        let mut regs = [0u64; 4];
        for (v, abs) in regs.iter_mut().zip(self.named) {
            if let Some(abs) = abs {
                *v = self.value(abs);
            }
        }
        self.plan.event.regs = regs;
    }
}

/// The operands of an atomic (from its body, big endian).
#[derive(Clone, Copy, Debug)]
struct AtomicOp {
    /// `FETCH_ADD` or `CMP_SWAP`.
    main: Main,
    /// The add value, or the compare value.
    first: u64,
    /// The swap value.
    second: Option<u64>,
}

impl AtomicOp {
    /// The operands of `main` in `body`; `None` when it is too short.
    #[inline(always)]
    fn parse(main: Main, body: &[u8]) -> Option<Self> {
        Some(Self {
            main,
            first: u64_be(body, 0)?,
            second: u64_be(body, 8),
        })
    }

    /// The value the atomic leaves for `old`; `None`: unchanged (a failed compare).
    #[inline(always)]
    fn new_value(self, old: u64) -> Option<u64> {
        match (self.main, self.second) {
            (Main::FetchAdd, _) => Some(old.wrapping_add(self.first)),
            (_, Some(swap)) if old == self.first => Some(swap),
            _ => None,
        }
    }
}

/// The first byte and length of the words a masked write at `ea` stores (`mask` not
/// 0); `None` when the start overflows.
#[inline]
fn masked_span(ea: u64, mask: u8) -> (Option<u64>, u64) {
    let lo = u64::from(mask.trailing_zeros());
    let hi = 7 - u64::from(mask.leading_zeros());
    (ea.checked_add(lo * WORD), (hi - lo + 1) * WORD)
}

/// The reply control part carried by a READ (or a `TOKEN_READ`; its check byte is not
/// verified: the frame CRC covers the payload).
#[inline]
pub(super) fn reply_control(body: &[u8]) -> Option<ControlRepr> {
    let c = ControlPacket::new_checked(body).ok()?;
    Some(ControlRepr {
        opcode: c.opcode(),
        mask: c.mask(),
        flags: c.flags(),
        operand: c.operand(),
        index: c.index(),
        length: c.length(),
    })
}

/// The big-endian u64 at `at` of `body`.
#[inline]
fn u64_be(body: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = body.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

/// Applies a plan: register writes, then the store (its last byte last). Infallible:
/// [`plan`] checked everything.
#[inline]
pub fn commit(plan: &Plan<'_>, regs: &mut RegisterFile, mem: &mut impl EndpointAccess) {
    // Memory first, registers after: a host that polls a queue pointer sees it advance
    // only once the data it points past is there.
    match plan.store {
        Store::None => {}
        Store::Bytes { ea, data } => {
            if !data.is_empty() {
                mem.store(ea, data);
            }
        }
        Store::Masked { ea, block, mask } => {
            for (i, word) in block.chunks_exact(WORD as usize).enumerate() {
                if mask & (1 << i) != 0 {
                    mem.store(ea.wrapping_add(i as u64 * WORD), word);
                }
            }
        }
        Store::Word { ea, value } => mem.store_word(ea, value),
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    for &(abs, v) in plan.reg_writes() {
        // `plan` resolved `abs` inside the file; a file shrunk since is ignored.
        let _ = regs.set(abs, v);
    }
}

#[cfg(test)]
mod tests;
