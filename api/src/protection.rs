//! What a peer may do here: the rules the receiver's node enforces on every message,
//! and the seed's priority queue set up with them (a guide page: this module has no
//! items).
//!
//! A message names receiver state — memory of the connection's endpoint, registers of
//! the connection's window ([`crate::ConnOptions::registers`]) or of the endpoint's
//! global registers ([`crate::global`]) — and the receiver refuses it whole, before
//! anything changes, when a name lacks the right its use needs. The sender's
//! completion then says `RemoteAccessError` (or another `Remote*` status) and
//! [`crate::Completion::remote_reason`] says why, as the receiver's counters do
//! ([`crate::DeviceStats::dropped`]).
//!
//! # Memory: endpoint and page rights ([`crate::Rights`])
//!
//! | operation at the receiver | needs on the bytes it touches |
//! |---|---|
//! | write, masked write, the data of a compound write, a payload-token deposit | `REMOTE_WRITE` |
//! | read, a read with a read token (the bytes read) | `REMOTE_READ` |
//! | fetch-and-add, compare-and-swap on memory | `REMOTE_ATOMIC` |
//! | register operations, conditionals, exceptions (no memory) | nothing |
//!
//! Rights are the endpoint's ([`crate::Device::alloc_endpoint`]) intersected with its
//! pages' ([`crate::Endpoint::set_page_rights`]); a nested endpoint has its own. Only
//! remote access is checked: the **result range of a read or atomic** (where the
//! reply lands, in the requester's own endpoint) needs no right, nor does the source
//! of a write (local memory, read by the local node).
//!
//! # Registers: protection bits ([`crate::RegProt`])
//!
//! Set by the receiver with [`crate::Device::set_register_protection`]; a fresh
//! register has none (`RegProt::NONE`: the sender may not use it at all, except as
//! below).
//!
//! | a message uses a register as | it needs |
//! |---|---|
//! | the address of its operation (`ra`: indirect, indexed, post-increment) | `INDIRECT` — the sender stores through it and moves it without learning or setting its value |
//! | the stride of a post-increment (`ra + 1`) | nothing: the receiver chose it |
//! | the destination of a register operation (`rb`, `rc`) | `WRITE` |
//! | the source of a register operation (another register) | `READ` |
//! | the target of a register atomic (`on_register`) | `READ` and `WRITE` (the old value goes back) |
//! | the register a conditional tests (`rd`) | nothing: the outcome only interrupts the receiver |
//!
//! A conditional `ALWAYS` and a software exception force an interrupt: they need the
//! connection's [`crate::ConnOptions::allow_forced_interrupts`] instead.
//!
//! **Instruction-pointer messages**: the receiver's own instructions name registers the
//! receiver chose, so those names need no protection bit; a register name the
//! instruction takes from the message ([`crate::Operands`]) is checked as above.
//! Memory rights apply to what an instruction touches as to any message. An isolated
//! connection ([`crate::ConnOptions::isolated`]) refuses every message that is not an
//! instruction pointer or a token's write or read.
//!
//! **Tokens** ([`crate::Device::create_token`], [`crate::Device::create_read_token`])
//! name a range of one endpoint; each use is checked against that endpoint's rights and
//! pages as in the table above, and a token is refused for the other kind's operation.
//!
//! # The seed's priority queue
//!
//! Jobs land in a high or a low queue at a pointer the receiver keeps (post-incremented
//! by the slot size); a job interrupts the receiver only when its priority exceeds the
//! receiver's level, and raises the level. The sender names the registers; their
//! protection lets it do exactly that:
//!
//! ```
//! use std::time::Duration;
//! use deposit::*;
//! # fn main() -> Result<(), deposit::Error> {
//! const T: Duration = Duration::from_secs(5);
//! let rx = Device::open(DeviceConfig::new("ring:prioq:a", [10, 0, 0, 1]))?;
//! let tx = Device::open(DeviceConfig::new("ring:prioq:b", [10, 0, 0, 2]))?;
//!
//! // Receiver: r0/r1 the high queue's pointer and slot size, r2 the level, r3/r4 the
//! // low queue's pointer and slot size.
//! let regs = rx.alloc_registers(5)?;
//! for (i, v) in [(0, 1024), (1, 32), (2, 0), (3, 2048), (4, 32)] {
//!     rx.write_register(regs, i, v)?;
//! }
//! rx.set_register_protection(regs, 0, RegProt::INDIRECT)?; // store at it, move it
//! rx.set_register_protection(regs, 3, RegProt::INDIRECT)?;
//! rx.set_register_protection(regs, 2, RegProt::WRITE)?; // or'ed into by senders
//! // r1 and r4 (strides) keep NONE: a post-increment reads them without a right.
//! let queues = rx.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
//! let rcq = rx.create_cq(16);
//! let opts = ConnOptions {
//!     registers: Registers::Window(regs),
//!     ..ConnOptions::default()
//! };
//! let listener = rx.listen_with(1, &queues, &rcq, &opts)?;
//!
//! // Sender: its endpoint needs no rights (it only sends inline data).
//! let ep = tx.alloc_endpoint(4096, Rights::NONE)?;
//! let cq = tx.create_cq(16);
//! let conn = tx.connect([10, 0, 0, 1], 1, &ep, &cq)?;
//! let _accepted = listener.accept(T)?;
//!
//! // `<r_queue> <- data; r_queue += <r_queue + 1>; if prio > <r2> interrupt; r2 |= prio`
//! let enqueue = |id: u64, data: &[u8], queue: u8, prio: u32| {
//!     WorkRequest::write_inline(id, data, 0)
//!         .map(|w| {
//!             w.post_increment(queue)
//!                 .operand(prio)
//!                 .cond(Cond::Lt, Src::Operand, 2) // "<r2> < prio"
//!                 .op1(RegOp::Or, 2, Src::Operand)
//!                 .order(Order::CondFirst)
//!                 .signaled()
//!         })
//! };
//! conn.post(&enqueue(1, b"low, 2", 3, 2)?)?; // 2 > 0: interrupts
//! conn.post(&enqueue(2, b"low, 1", 3, 1)?)?; // 1 > 2 is false: quiet
//! conn.post(&enqueue(3, b"high, 8", 0, 8)?)?; // 8 > 2: interrupts
//! for _ in 0..3 {
//!     assert_eq!(cq.wait_one(T).expect("completion").status, WcStatus::Success);
//! }
//! let events = queues.events();
//! let fired: Vec<u32> = std::iter::from_fn(|| events.poll()).map(|e| e.operand).collect();
//! assert_eq!(fired, [2, 8]);
//! let mut job = [0u8; 7];
//! queues.read(1024, &mut job)?;
//! assert_eq!(&job, b"high, 8");
//! queues.read(2048 + 32, &mut job[..6])?;
//! assert_eq!(&job[..6], b"low, 1");
//! assert_eq!(rx.read_register(regs, 3)?, 2048 + 2 * 32);
//!
//! // What the protection keeps out: setting a queue pointer (needs WRITE, it has
//! // INDIRECT only) is refused whole, and the sender is told why.
//! conn.post(&WorkRequest::reg_op(4).op1(RegOp::Set, 0, Src::Operand).signaled())?;
//! let wc = cq.wait_one(T).expect("completion");
//! assert_eq!(wc.status, WcStatus::RemoteAccessError);
//! assert_eq!(wc.remote_reason, Some(DropReason::RegisterProtection));
//! assert_eq!(rx.read_register(regs, 0)?, 1024 + 32);
//! # Ok(()) }
//! ```
