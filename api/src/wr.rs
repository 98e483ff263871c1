//! Work requests: the seed's send registers (opcode, operand, index, size, mode) as a
//! builder. Start from an operation, add the addressing mode, register operations and
//! a conditional, then post it on a connection.
//!
//! ```
//! use deposit::{Cond, Order, RegOp, Src, WorkRequest};
//! // The seed's priority queue: deposit at the queue pointer (register 0, its stride
//! // in register 1), interrupt if the priority beats the level in register 2
//! // (`<r2> < priority`), and or the priority into the level.
//! let priority = 4;
//! let wr = WorkRequest::write_inline(1, b"job", 0).unwrap()
//!     .post_increment(0)
//!     .operand(priority)
//!     .cond(Cond::Lt, Src::Operand, 2)
//!     .op1(RegOp::Or, 2, Src::Operand)
//!     .order(Order::CondFirst);
//! # let _ = wr;
//! ```
//!
//! Register names: `0..=127` are the connection's register window at the receiver,
//! [`global`]`(n)` (`128 + n`, `n` from 0 to 127) the target endpoint's global
//! register `n`.
//!
//! Byte order: the values a work request carries — operands, the addend and the
//! compare and swap values of atomics, register values — are plain integers of the
//! poster's (the wire carries them big-endian; nothing to convert). An atomic acts on
//! the 8-byte word in the target endpoint as the target's CPU reads it (its native
//! order, little-endian on x86-64 and arm64), and the old value it returns lands in the
//! result range as 8 little-endian bytes: on those hosts, a native `u64`
//! ([`Endpoint::load_u64`](crate::Endpoint::load_u64) reads it).

use deposit_transport::connection::{Remote, Source, Wqe as Wr, WrOpcode, WR_SIGNALED};
use deposit_transport::wire::cell::{flags, AddrMode};
use deposit_transport::wire::compound::{CompoundRepr, CondRepr, OpSource, RegOpRepr};

pub use deposit_transport::wire::compound::{Cond, Order, RegOp};

use crate::{Endpoint, Error};

/// The name of global register `n` of the target endpoint: `128 + n`, for `n` from 0
/// to 127 (the names 128 to 255; which of them exist is the window
/// [`Endpoint::set_global_registers`](crate::Endpoint::set_global_registers) gave).
/// Panics for `n` > 127 (a compile error in a constant).
///
/// ```
/// assert_eq!(deposit::global(0), 128);
/// assert_eq!(deposit::global(127), 255);
/// ```
///
/// ```should_panic
/// let n = std::hint::black_box(128);
/// deposit::global(n); // no such name
/// ```
pub const fn global(n: u8) -> u8 {
    assert!(n < 128, "global register names reach registers 0 to 127");
    128 + n
}

/// The source of a register operation or the right-hand side of a conditional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    /// The message operand (zero-extended; sign-extended for signed operations).
    Operand,
    /// A register, by name.
    Reg(u8),
}

impl Src {
    pub(crate) fn wire(self) -> OpSource {
        match self {
            Src::Operand => OpSource::Operand,
            Src::Reg(n) => OpSource::Reg(n),
        }
    }
}

/// The builder methods a work request and an [`Instruction`](crate::Instruction)
/// share — address mode, operand, register names, register operations, conditional —
/// over the type's `addressing()`: its wire-form remote part and compound descriptor.
macro_rules! addressing_builder {
    () => {
        fn mode(mut self, mode: AddrMode, ra: u8) -> Self {
            let (r, _) = self.addressing();
            r.mode_flags = (r.mode_flags & !flags::ADDR_MASK) | mode.to_flags();
            r.regs[0] = ra;
            self
        }

        /// Indirect addressing: the effective address is the value of register `ra`.
        pub fn indirect(self, ra: u8) -> Self {
            self.mode(AddrMode::Indirect, ra)
        }
        /// Indexed addressing: register `ra` plus the operand.
        pub fn indexed(self, ra: u8, offset: u32) -> Self {
            self.mode(AddrMode::Indexed, ra).operand(offset)
        }
        /// Indirect with post-increment: `ea = <ra>; ra += <ra+1>`. In every address
        /// mode the address is generated once per work request, however many messages
        /// it takes (the register moves by the stride once, not by the length).
        pub fn post_increment(self, ra: u8) -> Self {
            self.mode(AddrMode::PostIncrement, ra)
        }
        /// Atomics only: act on register `ra` instead of endpoint memory.
        pub fn on_register(self, ra: u8) -> Self {
            let mut s = self.mode(AddrMode::Direct, ra);
            s.addressing().0.mode_flags |= flags::REG_TARGET;
            s
        }
        /// The operand (the remote offset in direct mode).
        pub fn operand(mut self, v: u32) -> Self {
            self.addressing().0.operand = v;
            self
        }
        /// The register names `ra`, `rb`, `rc`, `rd` as they are (the address mode and
        /// register operations set the ones they use; an instruction may take them
        /// from the message instead).
        pub fn registers(mut self, names: [u8; 4]) -> Self {
            self.addressing().0.regs = names;
            self
        }

        fn compound_op(mut self, reg: usize, name: u8, f: impl FnOnce(&mut CompoundRepr)) -> Self {
            let (r, c) = self.addressing();
            let c = c.get_or_insert(CompoundRepr::NONE);
            f(c);
            if reg < 4 {
                r.regs[reg] = name;
            }
            r.compound = Some(c.to_bytes());
            self
        }
        /// Register operation 1: `dst ← dst op src` (or `dst ← op(src)` for
        /// SET/NOT/NEG).
        pub fn op1(self, op: RegOp, dst: u8, src: Src) -> Self {
            self.compound_op(1, dst, |c| {
                c.op1 = RegOpRepr {
                    op,
                    src: src.wire(),
                }
            })
        }
        /// Register operation 2 (destination `rc`).
        pub fn op2(self, op: RegOp, dst: u8, src: Src) -> Self {
            self.compound_op(2, dst, |c| {
                c.op2 = RegOpRepr {
                    op,
                    src: src.wire(),
                }
            })
        }
        /// The conditional: interrupt the receiver at the end if `<reg> cond rhs`.
        pub fn cond(self, cond: Cond, rhs: Src, reg: u8) -> Self {
            self.compound_op(3, reg, |c| {
                c.cond = CondRepr {
                    cond,
                    rhs: rhs.wire(),
                }
            })
        }
        /// When the conditional is evaluated relative to the register operations.
        pub fn order(self, order: Order) -> Self {
            self.compound_op(4, 0, |c| c.order = order)
        }
    };
}
pub(crate) use addressing_builder;

/// A work request, ready to post with [`crate::Connection::post`].
#[derive(Debug, Clone, Copy)]
pub struct WorkRequest {
    pub(crate) wr: Wr,
    compound: Option<CompoundRepr>,
    /// The shard of the local endpoints the request names (source, result):
    /// [`NO_LOCAL`] when none, [`MIXED_LOCAL`] when they are on different shards. A
    /// connection takes only requests whose endpoints are its own shard's
    /// (`queue::check_local`): an endpoint number means nothing on another shard.
    pub(crate) local_shard: u16,
}

/// [`WorkRequest::local_shard`]: no local endpoint named.
pub(crate) const NO_LOCAL: u16 = u16::MAX;
/// [`WorkRequest::local_shard`]: local endpoints of different shards named.
pub(crate) const MIXED_LOCAL: u16 = u16::MAX - 1;

impl WorkRequest {
    /// A work request the transport's own layers built (the tagged layer's).
    pub(crate) fn from_wqe(wr: Wr) -> WorkRequest {
        WorkRequest {
            wr,
            compound: None,
            local_shard: NO_LOCAL,
        }
    }

    /// Notes that the request names local endpoint `ep` (its source or result range).
    pub(crate) fn names(mut self, ep: &Endpoint) -> WorkRequest {
        let s = u16::from(ep.0.shard);
        self.local_shard = match self.local_shard {
            NO_LOCAL => s,
            x if x == s => s,
            _ => MIXED_LOCAL,
        };
        self
    }
}

fn endpoint_source(ep: &Endpoint, offset: u64) -> Source {
    Source::Endpoint {
        id: ep.0.id,
        offset,
    }
}

impl WorkRequest {
    fn new(wr_id: u64, opcode: WrOpcode, len: u32, source: Source) -> WorkRequest {
        WorkRequest {
            wr: Wr {
                opcode,
                ..Wr::write(wr_id, source, len, 0)
            },
            compound: None,
            local_shard: NO_LOCAL,
        }
    }

    /// Write `len` bytes from `local` at `local_offset` to the remote endpoint at
    /// `remote_offset`. The local range must not change until the request completes.
    pub fn write(
        wr_id: u64,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
        remote_offset: u32,
    ) -> Self {
        WorkRequest::new(
            wr_id,
            WrOpcode::Write,
            len,
            endpoint_source(local, local_offset),
        )
        .operand(remote_offset)
        .names(local)
    }

    /// Write up to 32 bytes carried in the request itself.
    pub fn write_inline(wr_id: u64, data: &[u8], remote_offset: u32) -> Result<Self, Error> {
        if data.len() > 32 {
            return Err(Error::InvalidArgument(format!(
                "inline data of {} bytes (at most 32)",
                data.len()
            )));
        }
        let mut block = [0u8; 32];
        block[..data.len()].copy_from_slice(data);
        Ok(WorkRequest::new(
            wr_id,
            WrOpcode::Write,
            data.len() as u32,
            Source::Inline(block),
        )
        .operand(remote_offset))
    }

    /// Write words of one 32-byte block under an 8-bit mask: word i (4 bytes at
    /// `remote_offset + 4*i`) is written when bit i of `mask` is set.
    pub fn masked(wr_id: u64, block: [u8; 32], mask: u8, remote_offset: u32) -> Self {
        WorkRequest::new(
            wr_id,
            WrOpcode::WriteMasked { mask },
            32,
            Source::Inline(block),
        )
        .operand(remote_offset)
    }

    /// Read `len` bytes of the remote endpoint at `remote_offset` into `local` at
    /// `local_offset`. The receiver needs remote-read rights.
    pub fn read(
        wr_id: u64,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
        remote_offset: u32,
    ) -> Self {
        let mut w =
            WorkRequest::new(wr_id, WrOpcode::Read, len, Source::None).operand(remote_offset);
        w.wr.result = Some((local.0.id, local_offset));
        w.names(local)
    }

    /// Fetch-and-add on the 8-byte remote word at `remote_offset` (8-aligned, remote
    /// atomic rights), wrapping; the old value lands in `result` at `result_offset`
    /// (8 bytes, little-endian: a native `u64` on x86-64 and arm64; byte order in
    /// the module documentation).
    pub fn fetch_add(
        wr_id: u64,
        result: &Endpoint,
        result_offset: u64,
        remote_offset: u32,
        add: u64,
    ) -> Self {
        let mut w = WorkRequest::new(wr_id, WrOpcode::FetchAdd { add }, 8, Source::None)
            .operand(remote_offset);
        w.wr.result = Some((result.0.id, result_offset));
        w.names(result)
    }

    /// Compare-and-swap on the 8-byte remote word at `remote_offset` (8-aligned,
    /// remote atomic rights): stores `swap` if it holds `compare`; the old value lands
    /// in `result` at `result_offset` (8 bytes, little-endian, as
    /// [`WorkRequest::fetch_add`]'s).
    pub fn cmp_swap(
        wr_id: u64,
        result: &Endpoint,
        result_offset: u64,
        remote_offset: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        let mut w = WorkRequest::new(wr_id, WrOpcode::CmpSwap { compare, swap }, 8, Source::None)
            .operand(remote_offset);
        w.wr.result = Some((result.0.id, result_offset));
        w.names(result)
    }

    /// Register operations and/or a conditional only, no memory access.
    pub fn reg_op(wr_id: u64) -> Self {
        WorkRequest::new(wr_id, WrOpcode::RegOp, 0, Source::None)
    }

    /// A software exception: always an event at the receiver (if the connection allows
    /// sender-forced interrupts).
    pub fn exception(wr_id: u64, operand: u32) -> Self {
        WorkRequest::new(wr_id, WrOpcode::Exception, 0, Source::None).operand(operand)
    }

    /// verbs SEND as the degenerate case of the model: a write of `len` bytes at the
    /// receiver's queue pointer (register `queue`, its stride in `queue + 1`), which it
    /// post-increments. The receiver decides where the data lands; the sender names no
    /// address. Any length: a send longer than one message
    /// ([`crate::Device::segment_max`]) takes its address, and moves the queue pointer
    /// by the stride, once; its later messages land after its first, in order.
    pub fn send(wr_id: u64, local: &Endpoint, local_offset: u64, len: u32, queue: u8) -> Self {
        WorkRequest::write(wr_id, local, local_offset, len, 0).post_increment(queue)
    }

    /// [`WorkRequest::send`] with up to 32 bytes carried inline.
    pub fn send_inline(wr_id: u64, data: &[u8], queue: u8) -> Result<Self, Error> {
        Ok(WorkRequest::write_inline(wr_id, data, 0)?.post_increment(queue))
    }

    addressing_builder!();

    fn addressing(&mut self) -> (&mut Remote, &mut Option<CompoundRepr>) {
        (&mut self.wr.remote, &mut self.compound)
    }

    /// Ask for a completion on success too. A request that fails always completes,
    /// signaled or not (as in verbs), also when its connection closes or fails before
    /// it completed ([`WcStatus::Flushed`](crate::WcStatus),
    /// [`WcStatus::Unacknowledged`](crate::WcStatus)); an unsignaled one reserves no
    /// room in the completion queue, and its completion waits for room there if it
    /// must ([`CompletionQueue::waits`](crate::CompletionQueue::waits)).
    pub fn signaled(mut self) -> Self {
        self.wr.flags |= WR_SIGNALED;
        self
    }
    /// Sets or clears the signaled flag.
    pub fn set_signaled(&mut self, on: bool) {
        if on {
            self.wr.flags |= WR_SIGNALED;
        } else {
            self.wr.flags &= !WR_SIGNALED;
        }
    }
    /// Changes the request id.
    pub fn set_wr_id(&mut self, id: u64) {
        self.wr.wr_id = id;
    }
    /// Changes the operand (the remote offset in direct mode).
    pub fn set_remote_offset(&mut self, off: u32) {
        self.wr.remote.operand = off;
    }
}
