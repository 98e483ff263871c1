//! Instruction-pointer messages and the sequencer (DESIGN.md §3, "Instruction-pointer
//! messages"; seed patent Fig. 13).
//!
//! An `INVOKE` message carries, instead of an operation, an instruction pointer into the
//! receiver's instruction memory: through the connection's instruction window, or into
//! the global instructions. Its payload starts with the invoke header:
//!
//! ```text
//!  0..4  instruction pointer (u32 big endian, relative to the window or global index)
//!  4     table: 0 the connection's window, 1 the global instructions
//!  5..8  reserved (zero)
//!  8..   the message data
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
use super::plan::{commit, plan_into, EventInfo, Plan, RegContext, Reply, Store};
use super::Trap;
use crate::tables::{Instruction, InstructionMemory, Operands, RegWindow, RegisterFile};
use crate::tables::{GLOBAL_IP, REG_OPERANDS};
use crate::wire::cell::{flags, op, regs_of};
use crate::wire::ControlRepr;

/// Length of the invoke header.
pub const INVOKE_HEADER: usize = 8;

/// Most instructions one message runs.
pub const MAX_SEQUENCE: usize = 8;

/// Table byte of the invoke header: the connection's instruction window.
pub const TABLE_WINDOW: u8 = 0;
/// Table byte of the invoke header: the global instructions.
pub const TABLE_GLOBAL: u8 = 1;

/// The invoke header for instruction pointer `ip` (global when [`GLOBAL_IP`] is set).
pub fn invoke_header(ip: u32) -> [u8; INVOKE_HEADER] {
    let mut h = [0u8; INVOKE_HEADER];
    h[..4].copy_from_slice(&(ip & !GLOBAL_IP).to_be_bytes());
    h[4] = if ip & GLOBAL_IP != 0 {
        TABLE_GLOBAL
    } else {
        TABLE_WINDOW
    };
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
        event: EventInfo {
            opcode: 0,
            operand: 0,
            ea: 0,
            len: 0,
            regs: [0; 4],
        },
    };

    /// The planned steps.
    pub fn steps(&self) -> &[Plan<'_>] {
        &self.steps[..self.n]
    }

    /// Bytes the chain stores.
    pub fn bytes_stored(&self) -> u64 {
        self.steps()
            .iter()
            .map(|p| p.store.span().map_or(0, |s| u64::from(s.1)))
            .sum()
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
fn step_control(ins: &Instruction, msg: &ControlRepr, body_len: usize) -> ControlRepr {
    let from = ins.from_message;
    let msg_regs = regs_of(msg.index);
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
    let bad_length = Trap::BadLength {
        opcode: control.opcode,
        length: control.length,
    };
    if control.opcode != op::INVOKE {
        return Err(Trap::UnknownOpcode(control.opcode));
    }
    if control.flags & !flags::LAST != 0 {
        return Err(Trap::BadFlags {
            opcode: control.opcode,
            flags: control.flags,
        });
    }
    let payload = payload
        .get(..control.length as usize)
        .ok_or(Trap::PayloadTruncated {
            length: control.length,
            payload: payload.len(),
        })?;
    let (header, data) = payload.split_at_checked(INVOKE_HEADER).ok_or(bad_length)?;
    if header[5..] != [0, 0, 0] {
        return Err(Trap::BadFlags {
            opcode: control.opcode,
            flags: header[5],
        });
    }
    let ip = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let global = match header[4] {
        TABLE_WINDOW => false,
        TABLE_GLOBAL => true,
        other => {
            return Err(Trap::BadFlags {
                opcode: control.opcode,
                flags: other,
            })
        }
    };
    let named = if global { ip | GLOBAL_IP } else { ip };
    *out = SeqPlan::NOTHING;
    let mut writes = [(0u32, 0u64); MAX_SEQUENCE * super::MAX_REG_WRITES];
    let mut n_writes = 0;
    let mut stores = [Store::None; MAX_SEQUENCE];
    let mut last_interrupt = None;
    for k in 0..=MAX_SEQUENCE {
        let at = ip.checked_add(k as u32);
        let ins = if global {
            let at = at
                .filter(|&a| a < code.memory.globals())
                .ok_or(Trap::InstructionOutOfWindow { ip: named })?;
            code.memory
                .get_global(at)
                .ok_or(Trap::InstructionNotLoaded { ip: at | GLOBAL_IP })?
        } else {
            let at = at
                .filter(|&a| a < code.window.len)
                .ok_or(Trap::InstructionOutOfWindow { ip: named })?;
            code.memory
                .get(code.window.base + at)
                .ok_or(Trap::InstructionNotLoaded { ip: at })?
        };
        if k == MAX_SEQUENCE {
            return Err(Trap::SequenceBounds { ip: named });
        }
        if k == 0 && !ins.entry {
            return Err(Trap::NotEntryPoint { ip: named });
        }
        if global && ins.from_message != Operands::ALL {
            return Err(Trap::GlobalOperands { ip: named });
        }
        let body = step_body(ins.opcode, data);
        let c = step_control(ins, control, body.len());
        let mut trusted = [false; 5];
        for (t, bit) in trusted.iter_mut().zip(REG_OPERANDS) {
            *t = !ins.from_message.contains(bit);
        }
        trusted[4] = true; // the descriptor is the instruction's
        let step_ctx = RegContext {
            prior: &writes[..n_writes],
            trusted,
            ..*ctx
        };
        let mut overlay = Overlay {
            mem: &mut *mem,
            stores: &stores[..k],
        };
        let step = &mut out.steps[k];
        plan_into(
            &c,
            body,
            &step_ctx,
            &mut overlay,
            ins.compound.as_ref(),
            step,
        )?;
        for &w in step.reg_writes() {
            writes[n_writes] = w;
            n_writes += 1;
        }
        stores[k] = step.store;
        if step.reply != Reply::None {
            if out.reply != Reply::None {
                return Err(Trap::SequenceBounds { ip: named });
            }
            out.reply = step.reply;
        }
        if step.interrupt {
            out.interrupt = true;
            last_interrupt = Some(k);
        }
        out.n = k + 1;
        if !ins.more {
            break;
        }
    }
    out.event = out.steps[last_interrupt.unwrap_or(out.n - 1)].event;
    out.event.operand = control.operand;
    Ok(())
}

/// Commits every step of a planned chain, in order. Infallible: [`plan_invoke`]
/// checked everything.
pub fn commit_sequence(plan: &SeqPlan<'_>, regs: &mut RegisterFile, mem: &mut impl EndpointAccess) {
    for step in plan.steps() {
        commit(step, regs, mem);
    }
}
