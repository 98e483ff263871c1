//! Instruction-pointer messages and the sequencer (docs/design.md §3, "Instruction-pointer
//! messages"; seed patent Fig. 13).
//!
//! An `INVOKE` message carries, instead of an operation, an instruction pointer into the
//! receiver's instruction memory: through the connection's instruction window, or into
//! the global instructions. The pointer takes the place of the register names in the
//! control part, so a message that names no receiver register costs no byte more than
//! a plain one:
//!
//! ```text
//!  index      instruction pointer: bits 0..30 the slot (relative to the window, or the
//!             global index), bit 31 set for the global instructions
//!  operand    the message's operand        mask   the message's word mask
//!  flags      LAST; INVOKE_REGS when the payload starts with the message's register
//!             names (8 bytes: ra rb rc rd, then 4 zero bytes); INVOKE_RETURNS when
//!             the sender waits for a value (an atomic's old value), which the
//!             instructions must then return (and must not return without it)
//!  payload    [register names] the message data
//! ```
//!
//! Each instruction of the chain is turned into a control part — its own fields where
//! the instruction supplies them, the message's operand, mask or register names where
//! [`Operands`] says the message does — and planned like any message, with the message
//! data as its payload (none for `REG_OP` and `EXCEPTION`). Steps see the register
//! writes and memory stores of the steps before them, and nothing is committed unless
//! every step plans: the chain is one atomic operation with the exception rules of a
//! plain one. [`plan_invoke`] checks, in order: the header, the window (or table)
//! bound, the entry-point bit of the first instruction, a loaded slot for each step
//! (an empty one is a fault the host repairs), the global operand rule, and the
//! sequencer's bounds ([`MAX_SEQUENCE`] steps, at most one returning a value).

use super::access::{Access, EndpointAccess};
use super::plan::{announced, commit, plan_into, EventInfo, Plan, RegContext, Reply, Store};
use super::Trap;
use crate::tables::{InstructionMemory, Operands, RegWindow, RegisterFile, StoredInstruction};
use crate::tables::{GLOBAL_IP, REG_OPERANDS};
use crate::wire::cell::{flags, op};
use crate::wire::ControlRepr;

/// Length of the register-name prefix of an `INVOKE` message with `INVOKE_REGS`.
pub const INVOKE_REGS_LEN: usize = 8;

/// Most instructions one message runs.
pub const MAX_SEQUENCE: usize = 8;

/// The payload prefix carrying a message's register names `regs` (`INVOKE_REGS`).
pub fn invoke_regs(regs: [u8; 4]) -> [u8; INVOKE_REGS_LEN] {
    let mut h = [0u8; INVOKE_REGS_LEN];
    h[..4].copy_from_slice(&regs);
    h
}

/// The instructions a connection may run: the node's memory and the connection's
/// window of it.
#[derive(Clone, Copy, Debug)]
pub struct Code<'a> {
    /// The node's instruction memory (and global instructions).
    pub memory: &'a InstructionMemory,
    /// The connection's instruction window.
    pub window: RegWindow,
}

/// The plan of a chain: one [`Plan`] per step, and what the message as a whole returns
/// and reports.
#[derive(Clone, Copy, Debug)]
pub struct SeqPlan<'p> {
    /// The steps' plans; the first `n` are meaningful.
    pub steps: [Plan<'p>; MAX_SEQUENCE],
    /// Steps planned.
    pub n: usize,
    /// The reply (of the one step that returns a value, if any).
    pub reply: Reply,
    /// Whether the receiver is interrupted (any step's conditional held).
    pub interrupt: bool,
    /// The event: that of the last step that interrupts (else of the last step), with
    /// the message's operand.
    pub event: EventInfo,
}

impl SeqPlan<'_> {
    /// An empty chain.
    pub const NOTHING: SeqPlan<'static> = SeqPlan {
        steps: [Plan::NOTHING; MAX_SEQUENCE],
        n: 0,
        reply: Reply::None,
        interrupt: false,
        event: Plan::NOTHING.event,
    };

    /// The planned steps.
    pub fn steps(&self) -> &[Plan<'_>] {
        &self.steps[..self.n]
    }

    /// Bytes the chain stores.
    pub fn bytes_stored(&self) -> u64 {
        self.steps().iter().map(Plan::bytes_stored).sum()
    }

    /// Empties the chain's summary (reply, interrupt, event, steps planned) for a new
    /// message. The steps themselves are left: `plan_into` overwrites each step it plans
    /// and only the first `n` count, so clearing all eight (about 1.5 KB, per message)
    /// would be wasted.
    #[inline(always)]
    fn clear_summary(&mut self) {
        self.n = 0;
        self.reply = Reply::None;
        self.interrupt = false;
        self.event = SeqPlan::NOTHING.event;
    }
}

/// Endpoint access for a later step: loads see the stores planned by earlier steps.
struct Overlay<'m, 's, 'p, M> {
    mem: &'m mut M,
    stores: &'s [Store<'p>],
}

impl<M: EndpointAccess> EndpointAccess for Overlay<'_, '_, '_, M> {
    fn len(&self) -> u64 {
        self.mem.len()
    }
    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        self.mem.check(ea, len, access)
    }
    fn store(&mut self, ea: u64, data: &[u8]) {
        self.mem.store(ea, data)
    }
    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        self.mem.load(ea, buf);
        for s in self.stores {
            match *s {
                Store::None => {}
                Store::Bytes { ea: at, data } => patch(buf, ea, at, data),
                Store::Masked {
                    ea: at,
                    block,
                    mask,
                } => {
                    for (i, word) in block.chunks_exact(4).enumerate() {
                        if mask & (1 << i) != 0 {
                            patch(buf, ea, at.wrapping_add(4 * i as u64), word);
                        }
                    }
                }
                Store::Word { ea: at, value } => patch(buf, ea, at, &value.to_ne_bytes()),
            }
        }
    }
}

/// Copies the part of `data` (stored at `at`) that falls in `buf` (loaded from `ea`).
fn patch(buf: &mut [u8], ea: u64, at: u64, data: &[u8]) {
    let (b0, b1) = (ea, ea.saturating_add(buf.len() as u64));
    let (d0, d1) = (at, at.saturating_add(data.len() as u64));
    let (lo, hi) = (b0.max(d0), b1.min(d1));
    if lo < hi {
        let n = (hi - lo) as usize;
        buf[(lo - b0) as usize..][..n].copy_from_slice(&data[(lo - d0) as usize..][..n]);
    }
}

/// Payload of one step: the message data, or nothing for operations that take none.
fn step_body(opcode: u8, data: &[u8]) -> &[u8] {
    match opcode {
        op::REG_OP | op::EXCEPTION => &[],
        _ => data,
    }
}

/// The control part instruction `ins` runs with, given the message's control part.
fn step_control(
    ins: &StoredInstruction,
    msg: &ControlRepr,
    msg_regs: [u8; 4],
    body_len: usize,
) -> ControlRepr {
    let from = ins.from_message;
    let mut regs = ins.regs;
    for (i, bit) in REG_OPERANDS.iter().enumerate() {
        if from.contains(*bit) {
            regs[i] = msg_regs[i];
        }
    }
    let repeat = if ins.compound.is_some() {
        flags::COMPOUND_REPEAT
    } else {
        0
    };
    ControlRepr {
        opcode: ins.opcode,
        mask: if from.contains(Operands::MASK) {
            msg.mask
        } else {
            ins.mask
        },
        flags: ins.flags | flags::LAST | repeat,
        operand: if from.contains(Operands::OPERAND) {
            msg.operand
        } else {
            ins.operand
        },
        index: u32::from_be_bytes(regs),
        length: body_len as u32,
    }
}

/// An `INVOKE` message, checked: the instruction pointer (as named, with [`GLOBAL_IP`]
/// for the global table), the message's register names and its data.
#[derive(Clone, Copy, Debug)]
struct Invoke<'p> {
    ip: u32,
    global: bool,
    regs: [u8; 4],
    data: &'p [u8],
    /// The sender waits for a value.
    returns: bool,
}

impl<'p> Invoke<'p> {
    /// Checks the control part and the register-name prefix of `payload`.
    #[inline]
    fn parse(control: &ControlRepr, payload: &'p [u8]) -> Result<Self, Trap> {
        let bad_flags = |flags: u8| Trap::BadFlags {
            opcode: control.opcode,
            flags,
        };
        if control.opcode != op::INVOKE {
            return Err(Trap::UnknownOpcode(control.opcode));
        }
        if control.flags & !(flags::LAST | flags::INVOKE_REGS | flags::INVOKE_RETURNS) != 0 {
            return Err(bad_flags(control.flags));
        }
        let payload = announced(control, payload)?;
        let (regs, data) = if control.flags & flags::INVOKE_REGS != 0 {
            let (prefix, data) =
                payload
                    .split_at_checked(INVOKE_REGS_LEN)
                    .ok_or(Trap::BadLength {
                        opcode: control.opcode,
                        length: control.length,
                    })?;
            if prefix[4..] != [0, 0, 0, 0] {
                return Err(bad_flags(prefix[4] | prefix[5] | prefix[6] | prefix[7]));
            }
            ([prefix[0], prefix[1], prefix[2], prefix[3]], data)
        } else {
            ([0; 4], payload)
        };
        Ok(Invoke {
            ip: control.index,
            global: control.index & GLOBAL_IP != 0,
            regs,
            data,
            returns: control.flags & flags::INVOKE_RETURNS != 0,
        })
    }

    /// Checks the message's reply against what its sender waits for: a value (an
    /// atomic's old value) exactly when it asked for one. A read's data cannot come back
    /// through an instruction pointer (the sender has no range for it).
    #[inline]
    fn check_reply(&self, control: &ControlRepr, reply: &Reply) -> Result<(), Trap> {
        let fits = match reply {
            Reply::None => !self.returns,
            Reply::Value(_) => self.returns,
            Reply::Read { .. } => false,
        };
        if fits {
            Ok(())
        } else {
            Err(Trap::BadFlags {
                opcode: control.opcode,
                flags: control.flags,
            })
        }
    }

    /// Step `k` of the chain (`k` 0 is the entry point, checked as one): the bound of
    /// the window or table, a loaded slot, the global operand rule.
    #[inline]
    fn step<'c>(&self, code: &Code<'c>, k: u32) -> Result<&'c StoredInstruction, Trap> {
        let at = (self.ip & !GLOBAL_IP).checked_add(k);
        let ins = if self.global {
            let at = at
                .filter(|&a| a < code.memory.globals())
                .ok_or(Trap::InstructionOutOfWindow { ip: self.ip })?;
            code.memory
                .get_global(at)
                .ok_or(Trap::InstructionNotLoaded { ip: at | GLOBAL_IP })?
        } else {
            let at = at
                .filter(|&a| a < code.window.len)
                .ok_or(Trap::InstructionOutOfWindow { ip: self.ip })?;
            code.memory
                .get(code.window.base + at)
                .ok_or(Trap::InstructionNotLoaded { ip: at })?
        };
        if k == 0 && !ins.entry {
            return Err(Trap::NotEntryPoint { ip: self.ip });
        }
        if self.global && ins.from_message != Operands::ALL {
            return Err(Trap::GlobalOperands { ip: self.ip });
        }
        Ok(ins)
    }
}

/// Plans instruction `ins` of message `inv` (control part `msg`) into
/// `out`, seeing the register writes `prior` of earlier steps and memory through `mem`.
#[inline]
fn plan_step<'p>(
    ins: &StoredInstruction,
    msg: &ControlRepr,
    inv: &Invoke<'p>,
    ctx: &RegContext<'_>,
    prior: &[(u32, u64)],
    mem: &mut impl EndpointAccess,
    out: &mut Plan<'p>,
) -> Result<(), Trap> {
    let body = step_body(ins.opcode, inv.data);
    let c = step_control(ins, msg, inv.regs, body.len());
    if ins.compound.is_none() && ins.flags & (flags::ADDR_MASK | flags::REG_TARGET) == 0 {
        // No register is named (direct address, no register operation): the
        // connection's view serves as it is.
        plan_into(&c, body, ctx, mem, None, out)?;
        out.event.operand = msg.operand;
        return Ok(());
    }
    let mut trusted = [false; 5];
    for (t, bit) in trusted.iter_mut().zip(REG_OPERANDS) {
        *t = !ins.from_message.contains(bit);
    }
    trusted[4] = true; // the descriptor is the instruction's
    let step_ctx = RegContext {
        prior,
        trusted,
        ..*ctx
    };
    plan_into(&c, body, &step_ctx, mem, ins.compound.as_ref(), out)?;
    out.event.operand = msg.operand;
    Ok(())
}

/// The common case of an `INVOKE` message: an entry point that is a single
/// instruction, planned into one [`Plan`] (committed with `commit`, like a plain
/// message). Returns `Ok(false)` without planning when the entry point starts a chain:
/// the caller plans it with [`plan_invoke`].
#[inline]
pub fn plan_invoke_one<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    code: &Code<'_>,
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
    out: &mut Plan<'p>,
) -> Result<bool, Trap> {
    let inv = Invoke::parse(control, payload)?;
    let ins = inv.step(code, 0)?;
    if ins.more {
        return Ok(false);
    }
    plan_step(ins, control, &inv, ctx, &[], mem, out)?;
    inv.check_reply(control, &out.reply)?;
    Ok(true)
}

/// Plans an `INVOKE` message: every step of its chain, with no side effect (see the
/// module doc). On a trap `out` holds a partial plan that must not be committed.
pub fn plan_invoke<'p>(
    control: &ControlRepr,
    payload: &'p [u8],
    code: &Code<'_>,
    ctx: &RegContext<'_>,
    mem: &mut impl EndpointAccess,
    out: &mut SeqPlan<'p>,
) -> Result<(), Trap> {
    let inv = Invoke::parse(control, payload)?;
    out.clear_summary();
    let mut chain = Chain::new();
    for k in 0..=MAX_SEQUENCE {
        let ins = inv.step(code, k as u32)?;
        if k == MAX_SEQUENCE {
            return Err(Trap::SequenceBounds { ip: inv.ip });
        }
        let mut overlay = Overlay {
            mem: &mut *mem,
            stores: &chain.stores[..k],
        };
        let step = &mut out.steps[k];
        plan_step(ins, control, &inv, ctx, chain.writes(), &mut overlay, step)?;
        chain.record(k, out, inv.ip)?;
        if !ins.more {
            break;
        }
    }
    out.event = out.steps[chain.last_interrupt.unwrap_or(out.n - 1)].event;
    inv.check_reply(control, &out.reply)
}

/// What the steps of a chain planned so far leave the next ones: their register writes
/// and stores, and which of them was the last to interrupt.
struct Chain<'p> {
    writes: [(u32, u64); MAX_SEQUENCE * super::MAX_REG_WRITES],
    n_writes: usize,
    stores: [Store<'p>; MAX_SEQUENCE],
    last_interrupt: Option<usize>,
}

impl<'p> Chain<'p> {
    #[inline(always)]
    fn new() -> Self {
        Self {
            writes: [(0, 0); MAX_SEQUENCE * super::MAX_REG_WRITES],
            n_writes: 0,
            stores: [Store::None; MAX_SEQUENCE],
            last_interrupt: None,
        }
    }

    /// The register writes of the steps planned so far, in order.
    #[inline(always)]
    fn writes(&self) -> &[(u32, u64)] {
        &self.writes[..self.n_writes]
    }

    /// Adds planned step `k` of `out` to the chain, and its reply and interrupt to
    /// `out`'s summary; a second step returning a value is past the sequencer's bounds.
    #[inline(always)]
    fn record(&mut self, k: usize, out: &mut SeqPlan<'p>, ip: u32) -> Result<(), Trap> {
        let step = &out.steps[k];
        for &w in step.reg_writes() {
            self.writes[self.n_writes] = w;
            self.n_writes += 1;
        }
        self.stores[k] = step.store;
        if step.reply != Reply::None {
            if out.reply != Reply::None {
                return Err(Trap::SequenceBounds { ip });
            }
            out.reply = step.reply;
        }
        if step.interrupt {
            out.interrupt = true;
            self.last_interrupt = Some(k);
        }
        out.n = k + 1;
        Ok(())
    }
}

/// Commits every step of a planned chain, in order. Infallible: [`plan_invoke`]
/// checked everything.
pub fn commit_sequence(plan: &SeqPlan<'_>, regs: &mut RegisterFile, mem: &mut impl EndpointAccess) {
    for step in plan.steps() {
        commit(step, regs, mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oplogic::VecAccess;
    use crate::tables::{RegProt, Rights};
    use crate::wire::compound::{CompoundRepr, OpSource, RegOp, RegOpRepr};

    /// A node with 8 registers (window 0..8) and 16 instruction slots (window 0..16),
    /// 4 global instructions and a 2-page endpoint.
    struct Rig {
        regs: RegisterFile,
        window: RegWindow,
        code: InstructionMemory,
        code_window: RegWindow,
        mem: VecAccess,
    }

    impl Rig {
        fn new() -> Rig {
            let mut regs = RegisterFile::new(8);
            let window = regs.alloc(8).unwrap();
            let mut code = InstructionMemory::new(16, 4);
            let code_window = code.alloc(16).unwrap();
            Rig {
                regs,
                window,
                code,
                code_window,
                mem: VecAccess::new(8192, Rights::ALL),
            }
        }
        fn set(&mut self, at: u32, ins: StoredInstruction) {
            self.code.set(self.code_window, at, Some(ins)).unwrap();
        }
        /// Plans an invoke of `ip` (global with GLOBAL_IP) and commits it on success.
        /// Plans an invoke of `ip` (global with GLOBAL_IP) with the operand, mask and
        /// register names of `msg`, as the worker does (one instruction through
        /// `plan_invoke_one`, a chain through `plan_invoke`), and commits it on success.
        /// Returns the steps run and the reply.
        fn run(&mut self, ip: u32, msg: &ControlRepr, data: &[u8]) -> Result<(usize, Reply), Trap> {
            let named = msg.index != 0;
            let mut payload = Vec::new();
            if named {
                payload.extend_from_slice(&invoke_regs(msg.index.to_be_bytes()));
            }
            payload.extend_from_slice(data);
            let payload: &'static [u8] = Box::leak(payload.into_boxed_slice());
            let control = ControlRepr {
                opcode: op::INVOKE,
                flags: flags::LAST
                    | if named { flags::INVOKE_REGS } else { 0 }
                    | msg.flags & flags::INVOKE_RETURNS,
                index: ip,
                length: payload.len() as u32,
                ..*msg
            };
            let ctx = RegContext {
                window: self.window,
                ..RegContext::none(&self.regs)
            };
            let code = Code {
                memory: &self.code,
                window: self.code_window,
            };
            let mut one = Plan::NOTHING;
            if plan_invoke_one(&control, payload, &code, &ctx, &mut self.mem, &mut one)? {
                commit(&one, &mut self.regs, &mut self.mem);
                return Ok((1, one.reply));
            }
            let mut out = SeqPlan::NOTHING;
            plan_invoke(&control, payload, &code, &ctx, &mut self.mem, &mut out)?;
            commit_sequence(&out, &mut self.regs, &mut self.mem);
            Ok((out.n, out.reply))
        }
        fn reg(&self, i: u32) -> u64 {
            self.regs.get(self.window.base + i).unwrap()
        }
        fn set_reg(&mut self, i: u32, v: u64, p: RegProt) {
            self.regs.set(self.window.base + i, v).unwrap();
            self.regs.set_prot(self.window.base + i, p).unwrap();
        }
    }

    fn msg(operand: u32) -> ControlRepr {
        ControlRepr {
            operand,
            ..ControlRepr::default()
        }
    }

    /// `r[dest] op= operand-or-register`, as a REG_OP instruction.
    fn reg_op(dest: u8, op1: RegOp, src: OpSource) -> StoredInstruction {
        let d = CompoundRepr {
            op1: RegOpRepr { op: op1, src },
            ..CompoundRepr::NONE
        };
        StoredInstruction {
            opcode: op::REG_OP,
            regs: [0, dest, 0, 0],
            compound: Some(d.to_bytes()),
            ..StoredInstruction::default()
        }
    }

    fn write_at(ea: u32) -> StoredInstruction {
        StoredInstruction {
            opcode: op::WRITE,
            operand: ea,
            ..StoredInstruction::default()
        }
    }

    #[test]
    fn operands_come_from_the_instruction_unless_it_says_the_message() {
        let mut r = Rig::new();
        r.set(
            0,
            StoredInstruction {
                entry: true,
                ..write_at(100)
            },
        );
        r.set(
            1,
            StoredInstruction {
                entry: true,
                from_message: Operands::OPERAND,
                ..write_at(100)
            },
        );
        r.run(0, &msg(4000), b"fixed").unwrap();
        r.run(1, &msg(200), b"chosen").unwrap();
        assert_eq!(&r.mem.bytes[100..105], b"fixed");
        assert_eq!(&r.mem.bytes[200..206], b"chosen");
        assert!(r.mem.bytes[4000..4010].iter().all(|&b| b == 0));
    }

    #[test]
    fn protection_applies_to_register_names_the_message_supplies_only() {
        let mut r = Rig::new();
        r.set_reg(2, 10, RegProt::NONE);
        let add = reg_op(2, RegOp::Add, OpSource::Operand);
        r.set(
            0,
            StoredInstruction {
                entry: true,
                from_message: Operands::OPERAND,
                ..add
            },
        );
        r.set(
            1,
            StoredInstruction {
                entry: true,
                from_message: Operands::OPERAND | Operands::RB,
                ..add
            },
        );
        r.run(0, &msg(5), &[]).unwrap();
        assert_eq!(
            r.reg(2),
            15,
            "the receiver's own name needs no protection bit"
        );
        let named = ControlRepr {
            index: u32::from_be_bytes([0, 2, 0, 0]),
            ..msg(5)
        };
        assert_eq!(
            r.run(1, &named, &[]).unwrap_err(),
            Trap::RegisterProtection {
                name: 2,
                need: RegProt::WRITE
            }
        );
        assert_eq!(r.reg(2), 15);
    }

    #[test]
    fn later_steps_see_earlier_register_writes_and_stores() {
        let mut r = Rig::new();
        // r0 += operand; r1 = r0; then a fetch-and-add on the word the first step of a
        // second chain wrote.
        r.set(
            0,
            StoredInstruction {
                entry: true,
                more: true,
                from_message: Operands::OPERAND,
                ..reg_op(0, RegOp::Add, OpSource::Operand)
            },
        );
        r.set(1, reg_op(1, RegOp::Set, OpSource::Reg(0)));
        r.run(0, &msg(7), &[]).unwrap();
        assert_eq!((r.reg(0), r.reg(1)), (7, 7));
        r.set(
            4,
            StoredInstruction {
                entry: true,
                more: true,
                ..write_at(64)
            },
        );
        r.set(
            5,
            StoredInstruction {
                opcode: op::FETCH_ADD,
                operand: 64,
                ..StoredInstruction::default()
            },
        );
        let data = 5u64.to_be_bytes();
        let wants = ControlRepr {
            flags: flags::INVOKE_RETURNS,
            ..msg(0)
        };
        // The sender must wait for the old value (and may not without an atomic).
        assert!(matches!(
            r.run(4, &msg(0), &data),
            Err(Trap::BadFlags { .. })
        ));
        assert!(matches!(r.run(0, &wants, &[]), Err(Trap::BadFlags { .. })));
        let (n, reply) = r.run(4, &wants, &data).unwrap();
        // The add saw the bytes the write stored (read natively), and added 5 to them.
        let old = u64::from_ne_bytes(data);
        assert_eq!(reply, Reply::Value(old));
        assert_eq!(n, 2);
        let word = u64::from_ne_bytes(r.mem.bytes[64..72].try_into().unwrap());
        assert_eq!(word, old.wrapping_add(5));
    }

    #[test]
    fn a_trap_in_any_step_leaves_everything_unchanged() {
        let mut r = Rig::new();
        r.set_reg(0, 1, RegProt::NONE);
        r.set(
            0,
            StoredInstruction {
                entry: true,
                more: true,
                ..write_at(10)
            },
        );
        r.set(
            1,
            StoredInstruction {
                more: true,
                from_message: Operands::OPERAND,
                ..reg_op(0, RegOp::Add, OpSource::Operand)
            },
        );
        // Step 3 writes outside the endpoint.
        r.set(2, write_at(8190));
        let before = (r.mem.clone(), r.regs.clone());
        assert!(matches!(
            r.run(0, &msg(3), b"abcd"),
            Err(Trap::OutOfBounds { .. })
        ));
        assert_eq!((r.mem.clone(), r.regs.clone()), before);
        r.set(2, write_at(20));
        r.run(0, &msg(3), b"abcd").unwrap();
        assert_eq!(
            (&r.mem.bytes[10..14], &r.mem.bytes[20..24]),
            (&b"abcd"[..], &b"abcd"[..])
        );
        assert_eq!(r.reg(0), 4);
    }

    #[test]
    fn refusals_window_entry_loading_sequence_and_globals() {
        let mut r = Rig::new();
        let bump = StoredInstruction {
            from_message: Operands::OPERAND,
            ..reg_op(0, RegOp::Add, OpSource::Operand)
        };
        r.set(0, StoredInstruction { more: true, ..bump });
        assert_eq!(
            r.run(0, &msg(1), &[]).unwrap_err(),
            Trap::NotEntryPoint { ip: 0 }
        );
        assert_eq!(
            r.run(16, &msg(1), &[]).unwrap_err(),
            Trap::InstructionOutOfWindow { ip: 16 }
        );
        assert_eq!(
            r.run(u32::MAX >> 1, &msg(1), &[]).unwrap_err(),
            Trap::InstructionOutOfWindow { ip: u32::MAX >> 1 }
        );
        // An empty slot, first or later in a chain: a fault for the host.
        assert_eq!(
            r.run(5, &msg(1), &[]).unwrap_err(),
            Trap::InstructionNotLoaded { ip: 5 }
        );
        assert!(Trap::InstructionNotLoaded { ip: 5 }.is_fault());
        r.set(
            3,
            StoredInstruction {
                entry: true,
                more: true,
                ..bump
            },
        );
        assert_eq!(
            r.run(3, &msg(1), &[]).unwrap_err(),
            Trap::InstructionNotLoaded { ip: 4 }
        );
        // Nine chained steps: beyond the sequencer; eight run.
        for s in 6..16 {
            r.set(s, StoredInstruction { more: true, ..bump });
        }
        r.set(
            6,
            StoredInstruction {
                entry: true,
                more: true,
                ..bump
            },
        );
        assert_eq!(
            r.run(6, &msg(1), &[]).unwrap_err(),
            Trap::SequenceBounds { ip: 6 }
        );
        r.set(13, bump);
        assert_eq!(r.run(6, &msg(1), &[]).unwrap().0, MAX_SEQUENCE);
        assert_eq!(r.reg(0), MAX_SEQUENCE as u64);
        // A chain running off the window's end.
        r.set(
            14,
            StoredInstruction {
                entry: true,
                more: true,
                ..bump
            },
        );
        r.set(15, StoredInstruction { more: true, ..bump });
        assert_eq!(
            r.run(14, &msg(1), &[]).unwrap_err(),
            Trap::InstructionOutOfWindow { ip: 14 }
        );
        // Two steps returning a value.
        let fa = StoredInstruction {
            opcode: op::FETCH_ADD,
            operand: 0,
            ..StoredInstruction::default()
        };
        r.set(
            1,
            StoredInstruction {
                entry: true,
                more: true,
                ..fa
            },
        );
        r.set(2, fa);
        assert_eq!(
            r.run(1, &msg(0), &[0; 8]).unwrap_err(),
            Trap::SequenceBounds { ip: 1 }
        );
    }

    #[test]
    fn global_instructions_run_on_the_senders_operands_only() {
        let mut r = Rig::new();
        r.set_reg(3, 40, RegProt::READ | RegProt::WRITE);
        let add = StoredInstruction {
            entry: true,
            from_message: Operands::ALL,
            ..reg_op(0, RegOp::Add, OpSource::Operand)
        };
        r.code.set_global(2, Some(add)).unwrap();
        let named = ControlRepr {
            index: u32::from_be_bytes([0, 3, 0, 0]),
            ..msg(2)
        };
        r.run(2 | GLOBAL_IP, &named, &[]).unwrap();
        assert_eq!(r.reg(3), 42);
        assert_eq!(
            r.run(4 | GLOBAL_IP, &named, &[]).unwrap_err(),
            Trap::InstructionOutOfWindow { ip: 4 | GLOBAL_IP }
        );
        assert_eq!(
            r.run(1 | GLOBAL_IP, &named, &[]).unwrap_err(),
            Trap::InstructionNotLoaded { ip: 1 | GLOBAL_IP }
        );
    }

    #[test]
    fn malformed_invoke_headers_are_refused() {
        let r = Rig::new();
        let code = Code {
            memory: &r.code,
            window: r.code_window,
        };
        let ctx = RegContext::none(&r.regs);
        let mut mem = r.mem.clone();
        let mut plan = |flags: u8, payload: &[u8]| {
            let c = ControlRepr {
                opcode: op::INVOKE,
                flags,
                length: payload.len() as u32,
                ..ControlRepr::default()
            };
            let mut out = SeqPlan::NOTHING;
            plan_invoke(&c, payload, &code, &ctx, &mut mem, &mut out).map(|_| ())
        };
        let regs = flags::LAST | flags::INVOKE_REGS;
        assert!(matches!(plan(regs, &[0; 7]), Err(Trap::BadLength { .. })));
        assert!(matches!(
            plan(regs, &[1, 0, 0, 0, 0, 0, 1, 0]),
            Err(Trap::BadFlags { .. })
        ));
        for bad in [
            flags::COMPOUND,
            flags::REPLY,
            flags::SEGMENT,
            flags::COMPOUND_REPEAT,
            0x10,
        ] {
            assert!(matches!(
                plan(flags::LAST | bad, &[0; 8]),
                Err(Trap::BadFlags { .. })
            ));
        }
        let mut out = SeqPlan::NOTHING;
        let mut c = ControlRepr {
            opcode: op::INVOKE,
            flags: flags::LAST,
            length: 20,
            ..ControlRepr::default()
        };
        assert!(matches!(
            plan_invoke(&c, &[0; 8], &code, &ctx, &mut mem, &mut out),
            Err(Trap::PayloadTruncated { .. })
        ));
        c.opcode = op::WRITE;
        assert_eq!(
            plan_invoke(&c, &[0; 20], &code, &ctx, &mut mem, &mut out).unwrap_err(),
            Trap::UnknownOpcode(op::WRITE)
        );
    }
}
