//! Instruction memory and payload tokens, the application's side (docs/design.md §3,
//! "Instruction-pointer messages" and "Payload tokens").
//!
//! An [`Instruction`] is built like a [`WorkRequest`] — an operation, then the same
//! builder methods for the address mode, registers, register operations and
//! conditional of a direct message — plus which operands the message supplies
//! ([`Instruction::from_message`]), whether a sender may name it
//! ([`Instruction::entry`]) and whether the sequencer goes on with the next one
//! ([`Instruction::then`]). [`Device::program`] stores a chain in a connection's
//! instruction window ([`Device::alloc_instructions`], given to
//! [`ConnOptions::instructions`](crate::ConnOptions)) and returns the entry point's
//! [`InstrPtr`], an opaque value to hand to senders, who post [`WorkRequest::invoke`].
//!
//! Tokens: [`Device::create_token`] registers a buffer and returns a [`Token`] (a `u64`
//! any node may carry); [`WorkRequest::write_with_token`] deposits into it once.
//! [`Device::create_read_token`] returns a read token over a range, which any node
//! holding it reads with [`WorkRequest::read_with_token`], as often as it likes, until
//! [`Device::cancel_token`] (verbs' rkey, or a memory window, over one range).

use deposit_transport::connection::{Remote, WrOpcode};
use deposit_transport::tables::{RegWindow, StoredInstruction as Ins, GLOBAL_IP};
use deposit_transport::wire::cell::{flags, op, AddrMode};
use deposit_transport::wire::compound::{CompoundRepr, CondRepr, RegOpRepr};

pub use deposit_transport::oplogic::MAX_SEQUENCE;
pub use deposit_transport::tables::{Operands, Token};

use crate::wr::addressing_builder;
use crate::{Cond, Device, Endpoint, Error, Order, RegOp, Src, WorkRequest};

/// One instruction of instruction memory: an operation, its address mode, register
/// operations and conditional — the builder methods a [`WorkRequest`] has — and which
/// operands the message supplies ([`Instruction::from_message`]).
///
/// ```
/// use deposit::{Instruction, Operands, RegOp, Src};
/// // Deposit the message's data at the queue pointer in register 0 (its stride in
/// // register 1) and count the deposit in register 2.
/// let ins = Instruction::write(0)
///     .post_increment(0)
///     .op1(RegOp::Add, 2, Src::Operand)
///     .from_message(Operands::OPERAND);
/// # let _ = ins;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    /// Opcode, mask, operand sources and chaining; the addressing fields are `remote`'s.
    ins: Ins,
    remote: Remote,
    compound: Option<CompoundRepr>,
}

impl Instruction {
    fn op(opcode: u8, mask: u8, operand: u32) -> Self {
        Instruction {
            ins: Ins {
                opcode,
                mask,
                ..Ins::default()
            },
            remote: Remote {
                operand,
                ..Remote::default()
            },
            compound: None,
        }
    }

    /// Write the message's data at `remote_offset` (the operand, in direct mode).
    pub fn write(remote_offset: u32) -> Self {
        Instruction::op(op::WRITE, 0, remote_offset)
    }
    /// Write words of the message's 32-byte block under `mask` (word i when bit i is
    /// set) at `remote_offset`.
    pub fn masked(mask: u8, remote_offset: u32) -> Self {
        Instruction::op(op::WRITE_MASKED, mask, remote_offset)
    }
    /// Fetch-and-add on the 8-byte word at `remote_offset`, adding the value the
    /// message carries ([`WorkRequest::invoke_atomic`]) and returning the old one.
    pub fn fetch_add(remote_offset: u32) -> Self {
        Instruction::op(op::FETCH_ADD, 0, remote_offset)
    }
    /// Compare-and-swap on the 8-byte word at `remote_offset`, with the compare and swap
    /// values the message carries, returning the old value.
    pub fn cmp_swap(remote_offset: u32) -> Self {
        Instruction::op(op::CMP_SWAP, 0, remote_offset)
    }
    /// Register operations and/or a conditional only, no memory access.
    pub fn reg_op() -> Self {
        Instruction::op(op::REG_OP, 0, 0)
    }
    /// A software exception with `operand`: always an event at the receiver.
    pub fn exception(operand: u32) -> Self {
        Instruction::op(op::EXCEPTION, 0, operand)
    }

    addressing_builder!();

    fn addressing(&mut self) -> (&mut Remote, &mut Option<CompoundRepr>) {
        (&mut self.remote, &mut self.compound)
    }

    /// Takes `operands` from the message instead of the instruction (every operand
    /// comes from the instruction until this says otherwise).
    pub fn from_message(mut self, operands: Operands) -> Self {
        self.ins.from_message = operands;
        self
    }

    /// Marks it an entry point: senders may name it (the first of a chain is one).
    pub fn entry(mut self) -> Self {
        self.ins.entry = true;
        self
    }

    /// The sequencer goes on with the next instruction (set by [`Device::program`] on
    /// every instruction of a chain but the last).
    pub fn then(mut self) -> Self {
        self.ins.more = true;
        self
    }

    /// The instruction as instruction memory holds it.
    fn stored(&self) -> Ins {
        Ins {
            flags: self.remote.mode_flags,
            operand: self.remote.operand,
            regs: self.remote.regs,
            compound: self.remote.compound,
            ..self.ins
        }
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
pub struct InstrPtr(pub u32);

impl InstrPtr {
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
                .call_on(shard, move |w| w.alloc_instructions(n))?,
        ))
    }

    /// Frees an instruction window (connections still naming it find it empty).
    pub fn free_instructions(&self, w: InstrWindow) -> Result<(), Error> {
        let w = w.0;
        Ok(self
            .inner
            .call_for_instructions(w, move |wk| wk.free_instructions(w))?)
    }

    /// Stores `chain` at slot `at` of `w`: the first instruction becomes an entry point,
    /// each but the last continues with the next. Returns the entry point. At most
    /// [`MAX_SEQUENCE`] instructions.
    pub fn program(
        &self,
        w: InstrWindow,
        at: u32,
        chain: &[Instruction],
    ) -> Result<InstrPtr, Error> {
        check_chain(chain)?;
        let chain: Vec<_> = chained(chain).collect();
        self.inner.call_for_instructions(w.0, move |worker| {
            for (i, ins) in chain.into_iter().enumerate() {
                worker.set_instruction(w.0, at + i as u32, Some(ins))?;
            }
            Ok(InstrPtr(at))
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
        let ins = ins.map(|i| i.stored());
        Ok(self
            .inner
            .call_for_instructions(w.0, move |wk| wk.set_instruction(w.0, at, ins))?)
    }

    /// Stores `ins`, as instruction memory holds it, at slot `at` of `w`.
    pub(crate) fn program_stored(
        &self,
        w: InstrWindow,
        at: u32,
        ins: deposit_transport::tables::StoredInstruction,
    ) -> Result<(), Error> {
        Ok(self
            .inner
            .call_for_instructions(w.0, move |wk| wk.set_instruction(w.0, at, Some(ins)))?)
    }

    /// Stores `chain` as global instructions from index `at`: usable from every
    /// connection, and they must take every operand from the message
    /// ([`Operands::ALL`]; anything else is refused here).
    pub fn program_global(&self, at: u32, chain: &[Instruction]) -> Result<InstrPtr, Error> {
        check_chain(chain)?;
        let chain: Vec<_> = chained(chain).collect();
        // Every shard holds the global instructions (they take nothing from it).
        self.inner
            .call_all(move |worker| {
                for (i, ins) in chain.iter().enumerate() {
                    worker.set_global_instruction(at + i as u32, Some(*ins))?;
                }
                Ok(InstrPtr(at | GLOBAL_IP))
            })
            .into_iter()
            .next()
            .expect("a device has a shard")
    }

    /// Registers `len` bytes at `offset` of `ep` in the payload table; any node holding
    /// the token may deposit there once (the endpoint must permit remote writes).
    pub fn create_token(&self, ep: &Endpoint, offset: u64, len: u64) -> Result<Token, Error> {
        if offset.checked_add(len).is_none_or(|end| end > ep.len()) {
            return Err(Error::InvalidArgument(format!(
                "token range {offset}+{len} outside endpoint of {} bytes",
                ep.len()
            )));
        }
        let key = deposit_transport::connection::random_u32();
        let id = ep.0.id;
        Ok(self.inner.call_on(ep.0.shard, move |worker| {
            worker.insert_token(id, offset, len, key)
        })?)
    }

    /// Registers `len` bytes at `offset` of `ep` as a **read token**: any node that
    /// holds the returned [`Token`] may read any part of the range
    /// ([`WorkRequest::read_with_token`]), over any of its connections to this device
    /// whose endpoint is on `ep`'s shard (with one worker, every connection), isolated
    /// ones ([`crate::ConnOptions::isolated`]) included, any number of times, until
    /// [`Device::cancel_token`]. Reads are checked as plain reads are: inside the range
    /// and `ep`, against `ep`'s remote-read right and page map (a page not present is a
    /// fault the host repairs) — so `ep` should permit remote reads
    /// ([`crate::Rights::REMOTE_READ`]); the token grants no write. Nothing is told
    /// to this side of the reads (no event); a forged key or a cancelled token reads
    /// nothing, is counted (`token_key`, `bad_token`) and completes with
    /// `WcStatus::RemoteAccessError` at the reader.
    ///
    /// The token shares its shard's payload table (4096 entries) with write tokens
    /// ([`Device::create_token`]) and, like them, goes when `ep` is released. The
    /// range should not change while a read may run: a read that ran is answered from
    /// memory as it is when the answer is sent (as a plain read).
    ///
    /// The zero-copy rendezvous: the sender registers its buffer as an endpoint
    /// ([`Device::register_endpoint`]), creates a read token over it and sends the token
    /// in a small message; the receiver reads the whole message with it straight into
    /// its own buffer, then tells the sender, who cancels the token.
    pub fn create_read_token(&self, ep: &Endpoint, offset: u64, len: u64) -> Result<Token, Error> {
        if offset.checked_add(len).is_none_or(|end| end > ep.len()) {
            return Err(Error::InvalidArgument(format!(
                "read token range {offset}+{len} outside endpoint of {} bytes",
                ep.len()
            )));
        }
        let key = deposit_transport::connection::random_u32();
        let id = ep.0.id;
        Ok(self.inner.call_on(ep.0.shard, move |worker| {
            worker.insert_read_token(id, offset, len, key)
        })?)
    }

    /// Cancels a token, a write or a read one: it (and every copy) is refused from now
    /// on (a read that already ran is still answered).
    pub fn cancel_token(&self, token: Token) -> Result<(), Error> {
        // The token is in its endpoint's shard's table (the others refuse it).
        let mut r = self.inner.call_all(move |w| w.cancel_token(token));
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
        entry: ins.ins.entry || i == 0,
        more: i < last,
        ..ins.stored()
    })
}

impl WorkRequest {
    /// Runs the instruction at `ip` on the receiver with message operand `operand` and
    /// inline `data` (at most 32 bytes); register names and mask set with the usual
    /// builder methods are the message's register operands, which the instruction
    /// takes only where it says so.
    pub fn invoke(wr_id: u64, ip: InstrPtr, operand: u32, data: &[u8]) -> Result<Self, Error> {
        Ok(WorkRequest::write_inline(wr_id, data, operand)?.into_invoke(ip, false))
    }

    /// This write (its data and operand) as an invoke of `ip`; `returns`: the sender
    /// waits for a value.
    fn into_invoke(mut self, ip: InstrPtr, returns: bool) -> Self {
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
        ip: InstrPtr,
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
        Ok(w.names(result))
    }

    /// [`WorkRequest::invoke`] with `len` bytes of data from `local` at `local_offset`
    /// (one message: at most the device's segment size, less 8 bytes when it names
    /// registers with [`WorkRequest::registers`]).
    pub fn invoke_from(
        wr_id: u64,
        ip: InstrPtr,
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

    /// Reads `len` bytes at `remote_offset` of the range read token `token` names
    /// ([`Device::create_read_token`] at the peer) into `local` at `local_offset`. One
    /// request message whatever `len` (the token, the 64-bit offset and the reply's
    /// control part fill its one cell); the answer comes in as many messages as it
    /// needs and lands in `local` directly, as a [`WorkRequest::read`]'s, and the
    /// request completes when all of it arrived. A token that is not the peer's
    /// outstanding read token (forged key, cancelled, a write token), or bytes outside
    /// its range, complete with `WcStatus::RemoteAccessError` and
    /// [`Completion::remote_reason`](crate::Completion) `TokenKey`, `BadToken`,
    /// `TokenKind` or `OutOfBounds`; nothing is written to `local`.
    pub fn read_with_token(
        wr_id: u64,
        token: Token,
        remote_offset: u64,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
    ) -> Self {
        let mut w = WorkRequest::read(wr_id, local, local_offset, len, 0);
        w.wr.opcode = WrOpcode::TokenRead {
            token: token.0,
            offset: remote_offset,
        };
        w
    }

    /// [`WorkRequest::write_with_token`] with inline data (at most 32 bytes).
    pub fn write_inline_with_token(wr_id: u64, token: Token, data: &[u8]) -> Result<Self, Error> {
        let mut w = WorkRequest::write_inline(wr_id, data, 0)?;
        w.wr.opcode = WrOpcode::TokenWrite { token: token.0 };
        Ok(w)
    }
}
