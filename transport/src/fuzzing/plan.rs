//! Operation logic ([`crate::oplogic`]) planned against a model memory.
//!
//! The input builds a register file (a connection window and an endpoint's global
//! registers anywhere in it, each register's protection and value), an endpoint (its
//! length, place in a larger memory, rights, pages present and their rights) and one
//! message, then plans it one of six ways: [`oplogic::plan`],
//! [`oplogic::plan_in_frame`] and [`oplogic::plan_into`] (with a frame's descriptor),
//! an instruction pointer ([`oplogic::plan_invoke`] and [`oplogic::plan_invoke_one`]
//! against instructions the input loads), a payload-token deposit
//! ([`oplogic::plan_token`]) or a read with a read token ([`oplogic::plan_token_read`]),
//! against a payload table of both kinds of token the input fills.
//!
//! Properties, whatever the message:
//!
//! * Planning changes nothing (no store, no register), and planning again gives the
//!   same plan or trap.
//! * Every store and load, planning or committing, lies inside a range an earlier
//!   `check` of the right kind allowed (`ModelMem` panics otherwise).
//! * Committed, the plan changed no byte of the memory outside the endpoint nor of a
//!   page that does not allow writing (or atomics), and no register outside the
//!   connection's window and the endpoint's globals; for a message (not an
//!   instruction, whose own register names are trusted) none without `WRITE` or
//!   `INDIRECT` protection.
//! * A plain message (the first three ways) is accepted exactly when a reference model
//!   written from the documentation (`wire::cell`, `wire::compound`, `oplogic::plan`)
//!   accepts it, and then leaves memory, registers, reply and interrupt as the model
//!   says. A single-instruction `INVOKE` plans the same with both entry points; a token
//!   deposit lands in its buffer, once, or not at all; a token read is accepted exactly
//!   when the model says (a read token, its key, its range, the endpoint's bounds,
//!   rights and pages as for a read), answers the bytes the model says, stores nothing
//!   and leaves its token outstanding. A token of the wrong kind is refused for it.

use super::Input;
use crate::oplogic::{self, Access, EndpointAccess, Plan, RegContext, Reply, SeqPlan, Trap};
use crate::tables::{
    EndpointId, InstructionMemory, Operands, PayloadTable, RegProt, RegWindow, RegisterFile,
    Rights, StoredInstruction, TokenKind, TokenMatch, GLOBAL_IP, PAGE_SIZE,
};
use crate::wire::cell::{flags, op, regs_of, AddrMode};
use crate::wire::compound::{
    CompoundPacket, CompoundRepr, Cond, CondRepr, OpSource, Order, RegOp, RegOpRepr, COMPOUND_LEN,
};
use crate::wire::ControlRepr;

/// Registers in the file.
const FILE: u32 = 32;
/// Most logical pages of the endpoint.
const PAGES: usize = 3;

/// An endpoint inside a larger memory, with rights per page, that checks every access
/// against the `check`s made before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelMem {
    /// The memory: `before` bytes, the endpoint, a tail.
    pub bytes: Vec<u8>,
    /// Where the endpoint starts in `bytes`.
    pub before: usize,
    /// The endpoint's length.
    pub len: u64,
    /// The endpoint's rights.
    pub rights: Rights,
    /// Per logical page: present, and its rights (intersected with `rights`).
    pub pages: Vec<(bool, Rights)>,
    /// Ranges `check` allowed so far, `[start, end)` and the access.
    pub allowed: Vec<(u64, u64, Access)>,
    /// Stores made so far.
    pub stores: usize,
}

impl ModelMem {
    /// A memory of `before + len + 64` bytes of a pattern, the endpoint at `before`.
    pub fn new(before: usize, len: u64, rights: Rights, pages: Vec<(bool, Rights)>) -> Self {
        let total = before + len as usize + 64;
        ModelMem {
            bytes: (0..total)
                .map(|i| (i as u8).wrapping_mul(151) ^ 0x5a)
                .collect(),
            before,
            len,
            rights,
            pages,
            allowed: Vec::new(),
            stores: 0,
        }
    }

    fn page(&self, page: u64) -> (bool, Rights) {
        self.pages
            .get(page as usize)
            .copied()
            .unwrap_or((true, Rights::ALL))
    }

    /// Whether `access` to `[ea, ea + len)` is allowed, as [`EndpointAccess::check`]
    /// documents it (bounds, endpoint rights, then each page present and permitted).
    pub fn allows(&self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        let end = match ea.checked_add(len) {
            Some(end) if end <= self.len => end,
            _ => {
                return Err(Trap::OutOfBounds {
                    ea,
                    len,
                    bound: self.len,
                })
            }
        };
        if !self.rights.contains(access.rights()) {
            return Err(Trap::AccessDenied { ea, access });
        }
        if len == 0 {
            return Ok(());
        }
        let shift = PAGE_SIZE.trailing_zeros();
        for page in ea >> shift..=(end - 1) >> shift {
            let (present, rights) = self.page(page);
            if !present {
                return Err(Trap::PageNotPresent { page });
            }
            if !rights.contains(access.rights()) {
                return Err(Trap::AccessDenied {
                    ea: ea.max(page << shift),
                    access,
                });
            }
        }
        Ok(())
    }

    /// Whether byte `ea` of the endpoint may be changed by a store that checked.
    fn writable(&self, ea: u64) -> bool {
        let (present, rights) = self.page(ea / PAGE_SIZE);
        let r = rights.intersection(self.rights);
        present && (r.contains(Rights::REMOTE_WRITE) || r.contains(Rights::REMOTE_ATOMIC))
    }

    /// Panics unless `[ea, ea + n)` lies in one range allowed for an access `ok` takes.
    fn covered(&self, what: &str, ea: u64, n: usize, ok: impl Fn(Access) -> bool) {
        let end = ea.checked_add(n as u64);
        let inside = end.is_some_and(|end| {
            self.allowed
                .iter()
                .any(|&(s, e, a)| ok(a) && s <= ea && end <= e)
        });
        assert!(
            inside,
            "{what} of {n} bytes at {ea:#x} that no check allowed"
        );
    }

    /// The endpoint's bytes.
    pub fn endpoint(&self) -> &[u8] {
        &self.bytes[self.before..self.before + self.len as usize]
    }

    /// Asserts that what changed since `old` is inside the endpoint, on pages that allow
    /// it, and (when given) inside `[start, end)` of the endpoint.
    pub fn assert_changes(&self, old: &ModelMem, within: Option<(u64, u64)>) {
        let (lo, hi) = (self.before, self.before + self.len as usize);
        assert_eq!(
            self.bytes[..lo],
            old.bytes[..lo],
            "memory before the endpoint"
        );
        assert_eq!(
            self.bytes[hi..],
            old.bytes[hi..],
            "memory after the endpoint"
        );
        for (i, (a, b)) in self.endpoint().iter().zip(old.endpoint()).enumerate() {
            if a != b {
                let ea = i as u64;
                assert!(
                    self.writable(ea),
                    "byte {ea:#x} changed on a page without the right"
                );
                if let Some((s, e)) = within {
                    assert!(
                        s <= ea && ea < e,
                        "byte {ea:#x} changed outside [{s:#x}, {e:#x})"
                    );
                }
            }
        }
    }
}

impl EndpointAccess for ModelMem {
    fn len(&self) -> u64 {
        self.len
    }

    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        self.allows(ea, len, access)?;
        if len > 0 {
            self.allowed.push((ea, ea + len, access));
        }
        Ok(())
    }

    fn store(&mut self, ea: u64, data: &[u8]) {
        if data.is_empty() {
            return; // nothing stored (a token deposit of no data)
        }
        self.covered("store", ea, data.len(), |a| a != Access::Read);
        self.stores += 1;
        let at = self.before + ea as usize;
        self.bytes[at..at + data.len()].copy_from_slice(data);
    }

    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        self.covered("load", ea, buf.len(), |_| true);
        let at = self.before + ea as usize;
        buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
    }
}

/// A `ModelMem` by reference (what `plan_token`'s target hands out).
struct Borrowed<'a>(&'a mut ModelMem);

impl EndpointAccess for Borrowed<'_> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        self.0.check(ea, len, access)
    }
    fn store(&mut self, ea: u64, data: &[u8]) {
        self.0.store(ea, data)
    }
    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        self.0.load(ea, buf)
    }
}

/// A register value from the input: mostly small multiples of 8 (addresses in the
/// endpoint), sometimes large, near the top, or any.
fn value(input: &mut Input<'_>) -> u64 {
    let b = input.u8();
    match b >> 5 {
        0..=3 => u64::from(b) * 8,
        4 => u64::from(b & 31) * 4096 + 4088,
        5 => u64::MAX - u64::from(b & 31),
        6 => u64::from(u32::MAX) - u64::from(b & 31),
        _ => input.u64(),
    }
}

/// A 32-bit operand from the input, in the same spirit.
fn operand(input: &mut Input<'_>) -> u32 {
    let b = input.u8();
    match b >> 6 {
        0 | 1 => u32::from(b) * 8,
        2 => u32::from(b & 63) * 512 + u32::from(input.u8()),
        _ => input.u32(),
    }
}

/// The registers and endpoint a message runs against.
#[derive(Clone, Debug)]
pub struct Rig {
    pub regs: RegisterFile,
    pub window: RegWindow,
    pub globals: RegWindow,
    pub forced: bool,
    pub segment_base: Option<u64>,
    pub mem: ModelMem,
}

impl Rig {
    /// A rig as the input describes it.
    pub fn from_input(input: &mut Input<'_>) -> Rig {
        let window = RegWindow {
            base: u32::from(input.u8()) % FILE,
            len: u32::from(input.u8()) % 20,
        };
        let globals = RegWindow {
            base: u32::from(input.u8()) % FILE,
            len: u32::from(input.u8()) % 12,
        };
        let mut regs = RegisterFile::new(FILE);
        for abs in 0..FILE {
            regs.set(abs, value(input)).expect("in the file");
        }
        for pair in 0..FILE / 2 {
            let b = input.u8();
            for (k, bits) in [b & 7, (b >> 4) & 7].into_iter().enumerate() {
                let abs = pair * 2 + k as u32;
                regs.set_prot(abs, RegProt::from_bits_truncate(bits))
                    .expect("in the file");
            }
        }
        let flags = input.u8();
        let before = usize::from(input.u8()) * 16;
        let len = 1 + u64::from(input.u16()) % (PAGES as u64 * PAGE_SIZE);
        let rights = Rights::from_bits_truncate(input.u8());
        let pages = (0..PAGES)
            .map(|_| {
                let b = input.u8();
                (b & 0x80 == 0, Rights::from_bits_truncate(b))
            })
            .collect();
        let segment_base = (flags & 2 != 0).then(|| value(input));
        Rig {
            regs,
            window,
            globals,
            forced: flags & 1 != 0,
            segment_base,
            mem: ModelMem::new(before, len, rights, pages),
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

    /// Absolute index of register `name`, as the documentation of `RegContext` says.
    fn resolve(&self, name: u8) -> Option<u32> {
        let (w, n) = if name < 128 {
            (self.window, name)
        } else {
            (self.globals, name - 128)
        };
        let abs = (u32::from(n) < w.len).then(|| w.base.checked_add(u32::from(n)))??;
        (abs < FILE).then_some(abs)
    }

    fn values(&self) -> Vec<u64> {
        (0..FILE)
            .map(|a| self.regs.get(a).expect("in the file"))
            .collect()
    }

    /// Asserts the registers changed since `old` are inside the window or the globals,
    /// and with `protected` only ones a sender may write (`WRITE` or `INDIRECT`).
    fn assert_register_changes(&self, old: &[u64], protected: bool) {
        for (abs, (&now, &was)) in self.values().iter().zip(old).enumerate() {
            if now == was {
                continue;
            }
            let abs = abs as u32;
            let inside = |w: RegWindow| abs >= w.base && u64::from(abs) < w.end();
            assert!(
                inside(self.window) || inside(self.globals),
                "register {abs} changed outside the window and the globals"
            );
            if protected {
                let p = self.regs.prot(abs).expect("in the file");
                assert!(
                    p.contains(RegProt::WRITE) || p.contains(RegProt::INDIRECT),
                    "register {abs} of protection {p:?} changed"
                );
            }
        }
    }
}

/// Fuzz target: a rig, a way to plan, a message. See the module doc.
pub fn plan(data: &[u8]) {
    let mut input = Input::new(data);
    let rig = Rig::from_input(&mut input);
    match input.u8() % 6 {
        way @ 0..=2 => {
            let frame_desc = input.bool().then(|| input.array());
            let (control, payload) = message(&mut input);
            check_message(&rig, &control, &payload, frame_desc.as_ref(), way);
        }
        3 => invoke(rig, &mut input),
        4 => token(rig, &mut input),
        _ => token_read(rig, &mut input),
    }
}

/// The operation codes a message picks from (most of the time).
const OPCODES: [u8; 8] = [
    op::WRITE,
    op::WRITE_MASKED,
    op::READ,
    op::FETCH_ADD,
    op::CMP_SWAP,
    op::REG_OP,
    op::EXCEPTION,
    op::WRITE,
];

/// A message from the input: control part and payload, the length mostly true.
fn message(input: &mut Input<'_>) -> (ControlRepr, Vec<u8>) {
    let pick = input.u8();
    let opcode = if pick < 0xf0 {
        OPCODES[usize::from(pick) % OPCODES.len()]
    } else {
        input.u8()
    };
    let mut control = ControlRepr {
        opcode,
        mask: input.u8(),
        flags: input.u8(),
        operand: operand(input),
        index: input.u32(),
        length: 0,
    };
    let shape = input.u8();
    let mut payload = Vec::new();
    if shape & 1 != 0 {
        control.flags |= flags::COMPOUND;
        payload.extend_from_slice(&input.array::<COMPOUND_LEN>());
    }
    let body = match (shape >> 1) & 3 {
        0 => match opcode {
            op::WRITE_MASKED => 32,
            op::READ | op::CMP_SWAP => 16,
            op::FETCH_ADD => 8,
            op::REG_OP | op::EXCEPTION => 0,
            _ => usize::from(input.u8()),
        },
        1 => usize::from(input.u8()),
        2 => usize::from(input.u16()) % (PAGES * PAGE_SIZE as usize + 64),
        _ => usize::from(input.u8() % 40),
    };
    if opcode == op::READ && (shape >> 1) & 3 == 0 {
        // The reply's control part: its length is what is read.
        let reply = ControlRepr {
            opcode: op::WRITE,
            flags: flags::REPLY | flags::LAST,
            length: u32::from(input.u16()) % (PAGES as u32 * PAGE_SIZE as u32 + 8),
            ..ControlRepr::default()
        };
        let mut b = [0u8; 16];
        reply.emit(&mut crate::wire::ControlPacket::new_unchecked(&mut b[..]));
        payload.extend_from_slice(&b);
    } else {
        let data = input.bytes(body);
        payload.extend_from_slice(data);
        payload.resize(payload.len() + body - data.len(), 0x11);
    }
    control.length = match shape >> 6 {
        0 | 1 => payload.len() as u32,
        2 => (payload.len() as u32).saturating_sub(u32::from(input.u8() % 9)),
        _ => payload.len() as u32 + u32::from(input.u8() % 9),
    };
    // Padding of the last cell, never part of the message.
    payload.extend_from_slice(&[0xee; 5]);
    (control, payload)
}

/// What a message left, by the reference model.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    regs: Vec<u64>,
    mem: Vec<u8>,
    reply: Reply,
    interrupt: bool,
}

/// The compound descriptor of `compound` run as a `REG_OP` message, with the rest of
/// the input for a rig, register names and the operand (the `super::compound`
/// target's semantic half).
pub fn reg_op_message(desc: &[u8; COMPOUND_LEN], input: &mut Input<'_>) {
    let rig = Rig::from_input(input);
    let control = ControlRepr {
        opcode: if input.bool() {
            op::REG_OP
        } else {
            op::EXCEPTION
        },
        flags: flags::LAST | flags::COMPOUND,
        operand: operand(input),
        index: input.u32(),
        length: COMPOUND_LEN as u32,
        ..ControlRepr::default()
    };
    check_message(&rig, &control, desc, None, 0);
}

/// Plans a message one of three ways (`plan`, `plan_in_frame`, `plan_into`), commits
/// it, and holds the result against the reference model and the invariants.
fn check_message(
    rig: &Rig,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
    way: u8,
) {
    let frame_desc = if way == 0 { None } else { frame_desc };
    let run = |mem: &mut ModelMem| -> Result<Plan<'_>, Trap> {
        let ctx = rig.ctx();
        match way {
            0 => oplogic::plan(control, payload, &ctx, mem),
            1 => oplogic::plan_in_frame(control, payload, &ctx, mem, frame_desc),
            _ => {
                let mut out = Plan::NOTHING;
                oplogic::plan_into(control, payload, &ctx, mem, frame_desc, &mut out).map(|()| out)
            }
        }
    };
    let mut mem = rig.mem.clone();
    let planned = run(&mut mem);
    assert_eq!(mem.stores, 0, "planning stored");
    assert_eq!(mem.bytes, rig.mem.bytes, "planning changed memory");
    let mut again = rig.mem.clone();
    assert_eq!(run(&mut again), planned, "planned twice, two results");
    let expected = model(rig, control, payload, frame_desc);
    let p = match (planned, expected) {
        (Ok(p), Some(e)) => (p, e),
        (Err(_), None) => return,
        (got, want) => panic!(
            "{control:?}: planned {got:?}, the model {}",
            if want.is_some() {
                "accepts it"
            } else {
                "refuses it"
            }
        ),
    };
    let (p, want) = p;
    let mut regs = rig.regs.clone();
    oplogic::commit(&p, &mut regs, &mut mem);
    let after = Rig {
        regs,
        mem,
        ..rig.clone()
    };
    after
        .mem
        .assert_changes(&rig.mem, p.store.span().map(|(s, n)| (s, s + u64::from(n))));
    after.assert_register_changes(&rig.values(), true);
    let got = Outcome {
        regs: after.values(),
        mem: after.mem.endpoint().to_vec(),
        reply: p.reply,
        interrupt: p.interrupt,
    };
    if got != want {
        let regs: Vec<_> = (0..FILE as usize)
            .filter(|&i| got.regs[i] != want.regs[i])
            .map(|i| (i, got.regs[i], want.regs[i]))
            .collect();
        let byte = got.mem.iter().zip(&want.mem).position(|(a, b)| a != b);
        panic!(
            "{control:?} (plan {p:?}) differs from the model: registers (abs, got, model) \
             {regs:?}, first byte {byte:?}, reply {:?} vs {:?}, interrupt {} vs {}",
            got.reply, want.reply, got.interrupt, want.interrupt
        );
    }
}

/// The 64-bit value of the message operand (`wire::compound`: sign-extended for the
/// signed operations and comparisons).
fn extend(operand: u32, signed: bool) -> u64 {
    if signed {
        i64::from(operand as i32) as u64
    } else {
        u64::from(operand)
    }
}

/// What a register operation leaves in `r` (the doc of each [`RegOp`]).
fn apply(op: RegOp, r: u64, src: u64) -> u64 {
    let (sr, ss) = (r as i64, src as i64);
    match op {
        RegOp::None => r,
        RegOp::Set => src,
        RegOp::Not => !src,
        RegOp::Neg => 0u64.wrapping_sub(src),
        RegOp::Add => r.wrapping_add(src),
        RegOp::Sub => r.wrapping_sub(src),
        RegOp::And => r & src,
        RegOp::Or => r | src,
        RegOp::Xor => r ^ src,
        RegOp::Shl => r.wrapping_shl((src % 64) as u32),
        RegOp::Shr => r.wrapping_shr((src % 64) as u32),
        RegOp::Min => std::cmp::min(r, src),
        RegOp::Max => std::cmp::max(r, src),
        RegOp::MinS => std::cmp::min(sr, ss) as u64,
        RegOp::MaxS => std::cmp::max(sr, ss) as u64,
    }
}

/// Whether `rd cond rhs` holds (the doc of each [`Cond`]).
fn holds(cond: Cond, rd: u64, rhs: u64) -> bool {
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

/// The reference model of one message (not an instruction pointer, not a token): what
/// the documentation says it leaves, or `None` when it must be refused.
fn model(
    rig: &Rig,
    c: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
) -> Option<Outcome> {
    let f = c.flags;
    let mode = AddrMode::from_flags(f);
    let carried = f & flags::COMPOUND != 0;
    let repeat = f & flags::COMPOUND_REPEAT != 0;
    let reg_target = f & flags::REG_TARGET != 0;
    let segment = f & flags::SEGMENT != 0;
    let atomic = matches!(c.opcode, op::FETCH_ADD | op::CMP_SWAP);
    // The opcode, the flags it may carry, the length its operation needs.
    let body_len = match c.opcode {
        op::WRITE => None,
        op::WRITE_MASKED => Some(32),
        op::READ | op::CMP_SWAP => Some(16),
        op::FETCH_ADD => Some(8),
        op::REG_OP | op::EXCEPTION => Some(0),
        _ => return None,
    };
    if f & flags::REPLY != 0
        || (carried && repeat)
        || (repeat && frame_desc.is_none())
        || (segment
            && (c.opcode != op::WRITE
                || !matches!(mode, AddrMode::Direct | AddrMode::Indexed)
                || carried
                || repeat
                || reg_target))
        || (reg_target && (!atomic || mode != AddrMode::Direct))
    {
        return None;
    }
    let desc_len = if carried { COMPOUND_LEN } else { 0 };
    if body_len.is_some_and(|n| c.length as usize != n + desc_len) {
        return None;
    }
    let p = payload.get(..c.length as usize)?;
    let (desc, body) = if carried {
        let (d, body) = p.split_at_checked(COMPOUND_LEN)?;
        (Some(d), body)
    } else {
        (repeat.then(|| &frame_desc.expect("checked")[..]), p)
    };
    let desc = match desc {
        Some(d) => Some(CompoundRepr::parse(&CompoundPacket::new_unchecked(d)).ok()?),
        None => None,
    };
    let mut regs = rig.values();
    let mut mem = rig.mem.endpoint().to_vec();
    let prot = |abs: u32| rig.regs.prot(abs).expect("in the file");
    let [ra, rb, rc, rd] = regs_of(c.index);
    let mut reply = Reply::None;
    let mut interrupt = false;
    // 1. Address generation.
    let ea = match mode {
        AddrMode::Direct => u64::from(c.operand),
        _ if segment => rig.segment_base?.checked_add(u64::from(c.operand))?,
        _ => {
            let a = rig.resolve(ra)?;
            if !prot(a).contains(RegProt::INDIRECT) {
                return None;
            }
            let base = regs[a as usize];
            match mode {
                AddrMode::Indexed => base.checked_add(u64::from(c.operand))?,
                AddrMode::PostIncrement => {
                    if ra == 127 || ra == 255 {
                        return None;
                    }
                    let stride = rig.resolve(ra + 1)?;
                    regs[a as usize] = base.wrapping_add(regs[stride as usize]);
                    base
                }
                _ => base,
            }
        }
    };
    let m = &rig.mem;
    // 2. The main operation.
    match c.opcode {
        op::WRITE => {
            m.allows(ea, body.len() as u64, Access::Write).ok()?;
            mem[ea as usize..][..body.len()].copy_from_slice(body);
        }
        op::WRITE_MASKED => {
            if c.mask == 0 {
                m.allows(ea, 0, Access::Write).ok()?;
            } else {
                let lo = u64::from(c.mask.trailing_zeros());
                let hi = 7 - u64::from(c.mask.leading_zeros());
                let start = ea.checked_add(4 * lo)?;
                m.allows(start, 4 * (hi - lo + 1), Access::Write).ok()?;
                for i in 0..8 {
                    if c.mask & (1 << i) != 0 {
                        let at = (ea + 4 * i as u64) as usize;
                        mem[at..at + 4].copy_from_slice(&body[4 * i..4 * i + 4]);
                    }
                }
            }
        }
        op::READ => {
            let b = |i: usize| u32::from_be_bytes(body[i..i + 4].try_into().expect("4"));
            let rc = ControlRepr {
                opcode: body[0],
                mask: body[1],
                flags: body[2],
                operand: b(4),
                index: b(8),
                length: b(12),
            };
            m.allows(ea, u64::from(rc.length), Access::Read).ok()?;
            reply = Reply::Read {
                ea,
                len: rc.length,
                reply_control: rc,
            };
        }
        op::FETCH_ADD | op::CMP_SWAP => {
            let be = |i: usize| u64::from_be_bytes(body[i..i + 8].try_into().expect("8"));
            let new = |old: u64| match c.opcode {
                op::FETCH_ADD => Some(old.wrapping_add(be(0))),
                _ => (old == be(0)).then(|| be(8)),
            };
            let old = if reg_target {
                let t = rig.resolve(ra)?;
                if !prot(t).contains(RegProt::READ | RegProt::WRITE) {
                    return None;
                }
                let old = regs[t as usize];
                if let Some(v) = new(old) {
                    regs[t as usize] = v;
                }
                old
            } else {
                if ea % 8 != 0 {
                    return None;
                }
                m.allows(ea, 8, Access::Atomic).ok()?;
                let at = ea as usize;
                let old = u64::from_ne_bytes(mem[at..at + 8].try_into().expect("8"));
                if let Some(v) = new(old) {
                    mem[at..at + 8].copy_from_slice(&v.to_ne_bytes());
                }
                old
            };
            reply = Reply::Value(old);
        }
        op::REG_OP => {}
        _ => {
            // EXCEPTION: a sender-forced interrupt.
            if !rig.forced {
                return None;
            }
            interrupt = true;
        }
    }
    // 3. The register operations and the conditional, in the descriptor's order.
    if let Some(d) = desc {
        let cond = |regs: &[u64], interrupt: &mut bool, cd: CondRepr| -> Option<()> {
            match cd.cond {
                Cond::None => {}
                Cond::Always => {
                    if !rig.forced {
                        return None;
                    }
                    *interrupt = true;
                }
                cmp => {
                    let d = rig.resolve(rd)?;
                    let rhs = match cd.rhs {
                        OpSource::Operand => extend(c.operand, cmp.is_signed()),
                        OpSource::Reg(n) => regs[rig.resolve(n)? as usize],
                    };
                    *interrupt |= holds(cmp, regs[d as usize], rhs);
                }
            }
            Some(())
        };
        let reg_op = |regs: &mut [u64], r: RegOpRepr, dest: u8| -> Option<()> {
            if r.op == RegOp::None {
                return Some(());
            }
            let d = rig.resolve(dest)?;
            if !prot(d).contains(RegProt::WRITE) {
                return None;
            }
            let src = match r.src {
                OpSource::Operand => extend(c.operand, r.op.is_signed()),
                OpSource::Reg(n) => {
                    let s = rig.resolve(n)?;
                    if s != d && !prot(s).contains(RegProt::READ) {
                        return None;
                    }
                    regs[s as usize]
                }
            };
            regs[d as usize] = apply(r.op, regs[d as usize], src);
            Some(())
        };
        if d.order == Order::CondFirst {
            cond(&regs, &mut interrupt, d.cond)?;
        }
        reg_op(&mut regs, d.op1, rb)?;
        if d.order == Order::CondAfterOp1 {
            cond(&regs, &mut interrupt, d.cond)?;
        }
        reg_op(&mut regs, d.op2, rc)?;
        if d.order == Order::CondLast {
            cond(&regs, &mut interrupt, d.cond)?;
        }
    }
    Some(Outcome {
        regs,
        mem,
        reply,
        interrupt,
    })
}

/// The operand-source bits an instruction takes from the message, from one byte.
fn operands(b: u8) -> Operands {
    let all = [
        Operands::OPERAND,
        Operands::MASK,
        Operands::RA,
        Operands::RB,
        Operands::RC,
        Operands::RD,
    ];
    all.iter()
        .enumerate()
        .filter(|(i, _)| b & (1 << i) != 0)
        .fold(Operands::NONE, |acc, (_, &o)| acc | o)
}

/// An instruction from the input (validated when loaded; a bad one is not loaded).
fn instruction(input: &mut Input<'_>) -> StoredInstruction {
    let shape = input.u8();
    StoredInstruction {
        opcode: 1 + input.below(7),
        mask: input.u8(),
        flags: input.u8() & if shape & 0x80 != 0 { 0xff } else { 0x38 },
        operand: operand(input),
        regs: input.array(),
        compound: (shape & 1 != 0).then(|| input.array()),
        from_message: operands(input.u8()),
        entry: shape & 2 != 0,
        more: shape & 4 != 0,
    }
}

/// An instruction-pointer message against instructions the input loads.
fn invoke(rig: Rig, input: &mut Input<'_>) {
    let mut code = InstructionMemory::new(16, 4);
    let window = code.alloc(8).expect("room for a window");
    for _ in 0..input.below(9) {
        let slot = u32::from(input.below(10));
        let _ = code.set(window, slot, Some(instruction(input)));
    }
    for _ in 0..input.below(3) {
        let slot = u32::from(input.below(5));
        let _ = code.set_global(slot, Some(instruction(input)));
    }
    let view = match input.below(4) {
        0 => RegWindow::EMPTY,
        1 => window.sub(2, 4).expect("inside"),
        _ => window,
    };
    let f = input.u8();
    let mut payload = Vec::new();
    let mut fl = flags::LAST & f;
    if f & 2 != 0 {
        fl |= flags::INVOKE_REGS;
        let mut regs = oplogic::invoke_regs(input.array());
        if f & 4 != 0 {
            regs[7] = input.u8();
        }
        payload.extend_from_slice(&regs);
    }
    if f & 8 != 0 {
        fl |= flags::INVOKE_RETURNS;
    }
    if f & 0x80 != 0 {
        fl = input.u8();
    }
    let ip = u32::from(input.below(12)) | if f & 0x10 != 0 { GLOBAL_IP } else { 0 };
    let data_len = usize::from(input.u8() % 48);
    let data = input.bytes(data_len);
    payload.extend_from_slice(data);
    let control = ControlRepr {
        opcode: op::INVOKE,
        mask: input.u8(),
        flags: fl,
        operand: operand(input),
        index: if f & 0x20 != 0 { input.u32() } else { ip },
        length: payload.len() as u32,
    };
    payload.extend_from_slice(&[0xee; 3]);
    let code = oplogic::Code {
        memory: &code,
        window: view,
    };
    let ctx = rig.ctx();
    let mut mem = rig.mem.clone();
    let mut seq = SeqPlan::NOTHING;
    let chain = oplogic::plan_invoke(&control, &payload, &code, &ctx, &mut mem, &mut seq);
    assert_eq!(mem.stores, 0, "planning a chain stored");
    assert_eq!(mem.bytes, rig.mem.bytes, "planning a chain changed memory");
    let mut one = Plan::NOTHING;
    let mut mem1 = rig.mem.clone();
    let single = oplogic::plan_invoke_one(&control, &payload, &code, &ctx, &mut mem1, &mut one);
    assert_eq!(mem1.stores, 0, "planning an instruction stored");
    match (&single, &chain) {
        (Ok(true), Ok(())) => {
            assert_eq!(
                seq.n, 1,
                "a single instruction planned as a chain of {}",
                seq.n
            );
            assert_eq!(seq.steps()[0], one, "one instruction, two plans");
            assert_eq!((seq.reply, seq.interrupt), (one.reply, one.interrupt));
        }
        (Ok(false), _) => {
            if chain.is_ok() {
                assert!(seq.n >= 2, "a chain of {} planned", seq.n);
            }
        }
        (Err(a), Err(b)) if a == b => {}
        (Err(a), _) => panic!("one instruction refused with {a:?}, the chain {chain:?}"),
        (Ok(true), Err(t)) => panic!("one instruction planned, the chain refused {t:?}"),
    }
    let mut again = rig.mem.clone();
    let mut seq2 = SeqPlan::NOTHING;
    let chain2 = oplogic::plan_invoke(&control, &payload, &code, &ctx, &mut again, &mut seq2);
    assert_eq!(chain2, chain, "planned twice, two results");
    if chain.is_err() {
        return;
    }
    assert_eq!(seq2.steps(), seq.steps(), "planned twice, two plans");
    let mut regs = rig.regs.clone();
    oplogic::commit_sequence(&seq, &mut regs, &mut mem);
    let after = Rig {
        regs,
        mem,
        ..rig.clone()
    };
    after.mem.assert_changes(&rig.mem, None);
    after.assert_register_changes(&rig.values(), false);
}

/// A payload table of up to three entries of either kind the input describes, and the
/// tokens issued.
fn token_table(input: &mut Input<'_>) -> (PayloadTable, Vec<crate::tables::Token>) {
    let mut tokens = PayloadTable::new(4);
    let mut issued = Vec::new();
    for _ in 0..1 + input.below(3) {
        let b = input.u8();
        let kind = if b & 0x40 != 0 {
            TokenKind::Read
        } else {
            TokenKind::Write
        };
        let endpoint = EndpointId(u32::from(b & 0x3f) % 3);
        let offset = u64::from(operand(input));
        let len = u64::from(input.u16());
        if let Ok(t) = tokens.insert_kind(kind, endpoint, offset, len, input.u32()) {
            issued.push(t);
        }
    }
    (tokens, issued)
}

/// A token from the input: one issued, one issued with its key or index changed, or
/// any value.
fn pick_token(input: &mut Input<'_>, issued: &[crate::tables::Token]) -> u64 {
    let pick = input.u8();
    match issued.get(usize::from(pick % 4)) {
        Some(t) if pick & 0x80 == 0 => t.0,
        Some(t) => t.0 ^ u64::from(input.u32()),
        None => input.u64(),
    }
}

/// A payload-token deposit against a table the input fills.
fn token(rig: Rig, input: &mut Input<'_>) {
    let (mut tokens, issued) = token_table(input);
    let token = pick_token(input, &issued);
    let flags_byte = if input.bool() {
        input.u8()
    } else {
        flags::LAST
    };
    let mut payload = token.to_be_bytes().to_vec();
    let n = usize::from(input.u16() % 600);
    let data = input.bytes(n);
    payload.extend_from_slice(data);
    let cut = usize::from(input.below(10));
    let control = ControlRepr {
        opcode: op::TOKEN_WRITE,
        flags: flags_byte,
        length: payload.len().saturating_sub(cut) as u32,
        ..ControlRepr::default()
    };
    let data = &payload[COMPOUND_LEN.min(control.length as usize)..control.length as usize];
    let found = tokens.lookup(crate::tables::Token(token));
    let mut mem = rig.mem.clone();
    let planned = oplogic::plan_token(&control, &payload, &tokens, |id| {
        (id == EndpointId(0)).then_some(Borrowed(&mut mem))
    });
    // The reference: a valid write token into endpoint 0 whose buffer holds the data,
    // on pages that allow it, with flags LAST at most and the token in the payload.
    let expect = match found {
        TokenMatch::Valid(e)
            if e.kind == TokenKind::Write
                && control.flags & !flags::LAST == 0
                && control.length as usize >= COMPOUND_LEN
                && e.endpoint == EndpointId(0)
                && data.len() as u64 <= e.len
                && rig
                    .mem
                    .allows(e.offset, data.len() as u64, Access::Write)
                    .is_ok() =>
        {
            Some(e)
        }
        _ => None,
    };
    match (planned, expect) {
        (Ok((p, mut access)), Some(e)) => {
            assert_eq!((p.ea, p.data, p.endpoint), (e.offset, data, e.endpoint));
            assert_eq!(access.0.stores, 0, "planning a token deposit stored");
            oplogic::commit_token(&p, &mut tokens, &mut access);
            let end = e.offset + data.len() as u64;
            mem.assert_changes(&rig.mem, Some((e.offset, end)));
            let at = rig.mem.before + e.offset as usize;
            assert_eq!(&mem.bytes[at..at + data.len()], data, "the deposit");
            assert_eq!(
                tokens.lookup(p.token),
                TokenMatch::None,
                "a token used twice"
            );
        }
        (Err(t), None) => {
            assert_eq!(mem.bytes, rig.mem.bytes, "a refused token deposit wrote");
            // Only a wrong key on a write token's index tells the buffer's owner.
            let owed = matches!(found, TokenMatch::WrongKey(e) if e.kind == TokenKind::Write);
            if t.trap == Trap::TokenKey {
                assert!(matches!(found, TokenMatch::WrongKey(_)));
                assert_eq!(t.event.is_some(), owed, "the event of a wrong key");
            } else {
                assert!(t.event.is_none(), "an event with {:?}", t.trap);
            }
            if t.trap == Trap::TokenKind {
                assert!(
                    matches!(found, TokenMatch::Valid(e) if e.kind == TokenKind::Read),
                    "{found:?} refused for its kind"
                );
            }
            assert_eq!(
                tokens.lookup(crate::tables::Token(token)),
                found,
                "refused, used"
            );
        }
        (got, want) => panic!(
            "token {token:#x} ({found:?}), {control:?}: planned {:?}, the model {want:?}",
            got.map(|(p, _)| p)
        ),
    }
}

/// A read with a read token against a table the input fills: the message mostly as a
/// sender builds it (token, offset, reply control part), sometimes of another shape.
fn token_read(rig: Rig, input: &mut Input<'_>) {
    let (tokens, issued) = token_table(input);
    let token = pick_token(input, &issued);
    let shape = input.u8();
    let flags_byte = if shape & 1 != 0 {
        input.u8()
    } else {
        flags::LAST
    };
    let offset = match (shape >> 1) & 3 {
        0 => input.u64(),
        _ => u64::from(input.u16()),
    };
    let len = u32::from(input.u16()) % (PAGES as u32 * PAGE_SIZE as u32 + 8);
    let reply = ControlRepr {
        opcode: op::WRITE,
        flags: flags::REPLY,
        length: len,
        ..ControlRepr::default()
    };
    let mut payload = token.to_be_bytes().to_vec();
    payload.extend_from_slice(&offset.to_be_bytes());
    let mut rc = [0u8; 16];
    reply.emit(&mut crate::wire::ControlPacket::new_unchecked(&mut rc[..]));
    payload.extend_from_slice(&rc);
    // Another length than the payload's, or a payload cut short.
    let length = match shape >> 6 {
        0 | 1 => payload.len() as u32,
        2 => (payload.len() as u32)
            .wrapping_add(u32::from(input.u8() % 9))
            .wrapping_sub(4),
        _ => {
            payload.truncate(usize::from(input.below(33)));
            32
        }
    };
    let control = ControlRepr {
        opcode: op::TOKEN_READ,
        flags: flags_byte,
        length,
        ..ControlRepr::default()
    };
    payload.extend_from_slice(&[0xee; 5]); // padding of the cell
    let mut mem = rig.mem.clone();
    let planned = oplogic::plan_token_read(&control, &payload, &tokens, |id| {
        (id == EndpointId(0)).then_some(Borrowed(&mut mem))
    });
    // The reference, from the layout of `op::TOKEN_READ`: flags LAST at most, 32 bytes
    // announced and present — the token (0..8), the offset (8..16) and the reply's
    // control part (16..32, its length at 28..32), all big endian — then a valid read
    // token into endpoint 0 whose range holds the bytes asked for, which the endpoint
    // lets be read.
    let shaped = control.flags & !flags::LAST == 0 && control.length == 32 && payload.len() >= 32;
    let be = |r: std::ops::Range<usize>| {
        payload
            .get(r)
            .map_or(0, |b| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let (token, offset, len) = (be(0..8), be(8..16), be(28..32) as u32);
    let reply = ControlRepr {
        opcode: be(16..17) as u8,
        mask: be(17..18) as u8,
        flags: be(18..19) as u8,
        operand: be(20..24) as u32,
        index: be(24..28) as u32,
        length: len,
    };
    let found = tokens.lookup(crate::tables::Token(token));
    let expect = match found {
        TokenMatch::Valid(e)
            if shaped
                && e.kind == TokenKind::Read
                && e.endpoint == EndpointId(0)
                && offset
                    .checked_add(u64::from(len))
                    .is_some_and(|end| end <= e.len)
                && rig
                    .mem
                    .allows(e.offset + offset, u64::from(len), Access::Read)
                    .is_ok() =>
        {
            Some(e)
        }
        _ => None,
    };
    assert_eq!(mem.stores, 0, "planning a token read stored");
    assert_eq!(
        mem.bytes, rig.mem.bytes,
        "planning a token read changed memory"
    );
    assert_eq!(
        tokens.lookup(crate::tables::Token(token)),
        found,
        "planning a token read changed its token"
    );
    match (planned, expect) {
        (Ok(p), Some(e)) => {
            let Reply::Read {
                ea,
                len: n,
                reply_control,
            } = p.reply
            else {
                panic!("a token read planned {:?}", p.reply)
            };
            assert_eq!(
                (p.endpoint, p.token.0, ea, n, reply_control),
                (e.endpoint, token, e.offset + offset, len, reply)
            );
            // The bytes it will answer were checked readable.
            if len > 0 {
                mem.covered("the answer", ea, len as usize, |a| a == Access::Read);
            }
        }
        (Err(t), None) => {
            if shaped {
                let why = match found {
                    TokenMatch::None => Some(Trap::BadToken),
                    TokenMatch::WrongKey(_) => Some(Trap::TokenKey),
                    TokenMatch::Valid(e) if e.kind == TokenKind::Write => Some(Trap::TokenKind),
                    TokenMatch::Valid(e) if e.endpoint != EndpointId(0) => Some(Trap::BadToken),
                    TokenMatch::Valid(_) => None,
                };
                if let Some(why) = why {
                    assert_eq!(t, why, "token {token:#x} ({found:?})");
                }
            } else {
                assert!(
                    matches!(
                        t,
                        Trap::BadFlags { .. } | Trap::BadLength { .. } | Trap::PayloadTruncated { .. }
                    ),
                    "{control:?} refused with {t:?}"
                );
            }
        }
        (got, want) => panic!(
            "token read {token:#x} ({found:?}) at {offset:#x} of {len}, {control:?}: planned {got:?}, the model {want:?}"
        ),
    }
}
