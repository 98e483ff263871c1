//! Instruction memory and payload tokens, the application's side (docs/design.md §3,
//! "Instruction-pointer messages" and "Payload tokens").
//!
//! An [`Instruction`] is built from a [`WorkRequest`] template — the same builder that
//! names the operation, address mode, registers, register operations and conditional
//! of a direct message — plus which operands the message supplies
//! ([`Instruction::from_message`]), whether a sender may name it
//! ([`Instruction::entry`]) and whether the sequencer goes on with the next one
//! ([`Instruction::then`]). [`Device::program`] stores a chain in a connection's
//! instruction window ([`Device::alloc_instructions`], given to
//! [`ConnOptions::instructions`](crate::ConnOptions)) and returns the entry point's
//! [`Ip`], an opaque value to hand to senders, who post [`WorkRequest::invoke`].
//!
//! Tokens: [`Device::create_token`] registers a buffer and returns a [`Token`] (a `u64`
//! any node may carry); [`WorkRequest::write_with_token`] deposits into it once.

use deposit_transport::connection::WrOpcode;
use deposit_transport::tables::{Instruction as Ins, RegWindow, GLOBAL_IP};

pub use deposit_transport::oplogic::MAX_SEQUENCE;
pub use deposit_transport::tables::{Operands, Token};

use crate::{Device, Endpoint, Error, WorkRequest};

/// One instruction: an operation template and its operand sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction(pub(crate) Ins);

impl Instruction {
    /// The instruction `template` describes (opcode, word mask, address mode, operand,
    /// register names, register operations and conditional; its data, length and local
    /// ranges are ignored: the message brings the data). Every operand comes from the
    /// instruction until [`Instruction::from_message`] says otherwise; not an entry
    /// point until [`Instruction::entry`].
    pub fn new(template: &WorkRequest) -> Result<Self, Error> {
        let wr = &template.wr;
        let (opcode, mask) = match wr.opcode {
            WrOpcode::Write => (deposit_transport::wire::cell::op::WRITE, 0),
            WrOpcode::WriteMasked { mask } => {
                (deposit_transport::wire::cell::op::WRITE_MASKED, mask)
            }
            WrOpcode::FetchAdd { .. } => (deposit_transport::wire::cell::op::FETCH_ADD, 0),
            WrOpcode::CmpSwap { .. } => (deposit_transport::wire::cell::op::CMP_SWAP, 0),
            WrOpcode::RegOp => (deposit_transport::wire::cell::op::REG_OP, 0),
            WrOpcode::Exception => (deposit_transport::wire::cell::op::EXCEPTION, 0),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "{other:?} cannot be an instruction"
                )))
            }
        };
        let ins = Ins {
            opcode,
            mask,
            flags: wr.remote.mode_flags,
            operand: wr.remote.operand,
            regs: wr.remote.regs,
            compound: wr.remote.compound,
            ..Ins::default()
        };
        ins.validate(false)?;
        Ok(Instruction(ins))
    }

    /// Takes `operands` from the message instead of the instruction.
    pub fn from_message(mut self, operands: Operands) -> Self {
        self.0.from_message = operands;
        self
    }

    /// Marks it an entry point: senders may name it.
    pub fn entry(mut self) -> Self {
        self.0.entry = true;
        self
    }

    /// The sequencer goes on with the next instruction (set by [`Device::program`] on
    /// every instruction of a chain but the last).
    pub fn then(mut self) -> Self {
        self.0.more = true;
        self
    }
}

/// An instruction window of a connection (allocated from the node's instruction
/// memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstrWindow(pub(crate) RegWindow);

impl InstrWindow {
    /// Slots in the window.
    pub fn len(&self) -> u32 {
        self.0.len
    }
    /// Whether the window has no slot.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

/// An instruction pointer: the value a sender puts in [`WorkRequest::invoke`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ip(pub u32);

impl Ip {
    /// Whether it names a global instruction.
    pub fn is_global(self) -> bool {
        self.0 & GLOBAL_IP != 0
    }
}

impl Device {
    /// Allocates an instruction window of `n` empty slots in shard 0's instruction
    /// memory (for connections of that shard's endpoints; with several workers,
    /// [`Device::alloc_instructions_for`] gives one of an endpoint's shard).
    pub fn alloc_instructions(&self, n: u32) -> Result<InstrWindow, Error> {
        self.alloc_instructions_on(0, n)
    }

    /// [`Device::alloc_instructions`] in the instruction memory of `ep`'s shard.
    pub fn alloc_instructions_for(&self, ep: &Endpoint, n: u32) -> Result<InstrWindow, Error> {
        self.alloc_instructions_on(ep.0.shard, n)
    }

    fn alloc_instructions_on(&self, shard: u8, n: u32) -> Result<InstrWindow, Error> {
        Ok(InstrWindow(
            self.inner
                .call_on(shard, move |w| w.instructions.alloc(n))?,
        ))
    }

    /// Frees an instruction window (connections still naming it find it empty).
    pub fn free_instructions(&self, w: InstrWindow) -> Result<(), Error> {
        let w = w.0;
        Ok(self
            .inner
            .call_for_instructions(w, move |wk| wk.instructions.free(w))?)
    }

    /// Stores `chain` at slot `at` of `w`: the first instruction becomes an entry point,
    /// each but the last continues with the next. Returns the entry point. At most
    /// [`MAX_SEQUENCE`] instructions.
    pub fn program(&self, w: InstrWindow, at: u32, chain: &[Instruction]) -> Result<Ip, Error> {
        check_chain(chain)?;
        let chain: Vec<_> = chained(chain).collect();
        self.inner.call_for_instructions(w.0, move |worker| {
            for (i, ins) in chain.into_iter().enumerate() {
                worker.instructions.set(w.0, at + i as u32, Some(ins))?;
            }
            Ok(Ip(at))
        })
    }

    /// Stores one instruction at slot `at` of `w` as it is (no entry or chaining
    /// added), or clears the slot with `None`.
    pub fn program_slot(
        &self,
        w: InstrWindow,
        at: u32,
        ins: Option<Instruction>,
    ) -> Result<(), Error> {
        let ins = ins.map(|i| i.0);
        Ok(self
            .inner
            .call_for_instructions(w.0, move |wk| wk.instructions.set(w.0, at, ins))?)
    }

    /// Stores `chain` as global instructions from index `at`: usable from every
    /// connection, and they must take every operand from the message
    /// ([`Operands::ALL`]; anything else is refused here).
    pub fn program_global(&self, at: u32, chain: &[Instruction]) -> Result<Ip, Error> {
        check_chain(chain)?;
        let chain: Vec<_> = chained(chain).collect();
        // Every shard holds the global instructions (they take nothing from it).
        self.inner
            .call_all(move |worker| {
                for (i, ins) in chain.iter().enumerate() {
                    worker.instructions.set_global(at + i as u32, Some(*ins))?;
                }
                Ok(Ip(at | GLOBAL_IP))
            })
            .into_iter()
            .next()
            .expect("a device has a shard")
    }

    /// Registers `len` bytes at `offset` of `ep` in the payload table; any node holding
    /// the token may deposit there once (the endpoint must permit remote writes).
    pub fn create_token(&self, ep: &Endpoint, offset: u64, len: u64) -> Result<Token, Error> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > ep.len() as u64)
        {
            return Err(Error::InvalidArgument(format!(
                "token range {offset}+{len} outside endpoint of {} bytes",
                ep.len()
            )));
        }
        let key = deposit_transport::connection::random_u32();
        let id = ep.0.id;
        Ok(self.inner.call_on(ep.0.shard, move |worker| {
            worker.tokens.insert(id, offset, len, key)
        })?)
    }

    /// Cancels a token: it (and every copy) is refused from now on.
    pub fn cancel_token(&self, token: Token) -> Result<(), Error> {
        // The token is in its endpoint's shard's table (the others refuse it).
        let mut r = self
            .inner
            .call_all(move |w| w.tokens.cancel(token).map(|_| ()));
        if r.iter().any(|r| r.is_ok()) {
            return Ok(());
        }
        Ok(r.swap_remove(0)?)
    }
}

fn check_chain(chain: &[Instruction]) -> Result<(), Error> {
    if chain.is_empty() || chain.len() > MAX_SEQUENCE {
        return Err(Error::InvalidArgument(format!(
            "a chain of {} instructions (1 to {MAX_SEQUENCE})",
            chain.len()
        )));
    }
    Ok(())
}

/// The chain's instructions as stored: the first an entry point, all but the last
/// continuing.
fn chained(chain: &[Instruction]) -> impl Iterator<Item = Ins> + '_ {
    let last = chain.len() - 1;
    chain.iter().enumerate().map(move |(i, ins)| Ins {
        entry: ins.0.entry || i == 0,
        more: i < last,
        ..ins.0
    })
}

impl WorkRequest {
    /// Runs the instruction at `ip` on the receiver with message operand `operand` and
    /// inline `data` (at most 32 bytes); register names and mask set with the usual
    /// builder methods are the message's register operands, which the instruction
    /// takes only where it says so.
    pub fn invoke(wr_id: u64, ip: Ip, operand: u32, data: &[u8]) -> Result<Self, Error> {
        Ok(WorkRequest::write_inline(wr_id, data, operand)?.into_invoke(ip, false))
    }

    /// This write (its data and operand) as an invoke of `ip`; `returns`: the sender
    /// waits for a value.
    fn into_invoke(mut self, ip: Ip, returns: bool) -> Self {
        self.wr.opcode = WrOpcode::Invoke {
            ip: ip.0,
            mask: 0,
            returns,
        };
        self
    }

    /// Runs the atomic instruction at `ip` (a fetch-and-add or compare-and-swap, alone or
    /// in a chain) with `values` as its data — the add value, or the compare then the
    /// swap value — and waits for its old value, which lands in `result` at
    /// `result_offset` (8 bytes). An instruction that returns no value refuses the
    /// message (a remote operation error), as an atomic instruction refuses
    /// [`WorkRequest::invoke`].
    pub fn invoke_atomic(
        wr_id: u64,
        ip: Ip,
        operand: u32,
        values: &[u64],
        result: &Endpoint,
        result_offset: u64,
    ) -> Result<Self, Error> {
        if values.is_empty() || values.len() > 2 {
            return Err(Error::InvalidArgument(format!(
                "{} values for an atomic instruction (1: add, 2: compare and swap)",
                values.len()
            )));
        }
        let mut data = [0u8; 16];
        for (chunk, v) in data.chunks_exact_mut(8).zip(values) {
            chunk.copy_from_slice(&v.to_be_bytes());
        }
        let mut w = WorkRequest::write_inline(wr_id, &data[..8 * values.len()], operand)?
            .into_invoke(ip, true);
        w.wr.result = Some((result.0.id, result_offset));
        Ok(w)
    }

    /// [`WorkRequest::invoke`] with `len` bytes of data from `local` at `local_offset`
    /// (one message: at most the device's segment size, less 8 bytes when it names
    /// registers with [`WorkRequest::registers`]).
    pub fn invoke_from(
        wr_id: u64,
        ip: Ip,
        operand: u32,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
    ) -> Self {
        WorkRequest::write(wr_id, local, local_offset, len, operand).into_invoke(ip, false)
    }

    /// Deposits `len` bytes from `local` at `local_offset` into the buffer `token`
    /// names (one message).
    pub fn write_with_token(
        wr_id: u64,
        token: Token,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
    ) -> Self {
        let mut w = WorkRequest::write(wr_id, local, local_offset, len, 0);
        w.wr.opcode = WrOpcode::TokenWrite { token: token.0 };
        w
    }

    /// The message's register names `ra`, `rb`, `rc`, `rd` (operands an instruction
    /// may take from the message).
    pub fn registers(mut self, names: [u8; 4]) -> Self {
        self.wr.remote.regs = names;
        self
    }

    /// [`WorkRequest::write_with_token`] with inline data (at most 32 bytes).
    pub fn write_inline_with_token(wr_id: u64, token: Token, data: &[u8]) -> Result<Self, Error> {
        let mut w = WorkRequest::write_inline(wr_id, data, 0)?;
        w.wr.opcode = WrOpcode::TokenWrite { token: token.0 };
        Ok(w)
    }
}
