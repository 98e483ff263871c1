//! Operation logic: the one place that knows what an operation means.
//!
//! A message runs one *compound operation* (docs/design.md §3, Operations; seed Figure 2):
//! address generation, a main operation, up to two register operations and one
//! conditional. [`plan`] decodes it through a table indexed by opcode (the seed's
//! table-driven receive controller, Fig. 10) and computes everything it would change —
//! register writes, the bytes to store, the reply, whether to interrupt and what the
//! event says — with no side effect; [`commit`] applies a [`Plan`] and cannot fail. So a
//! message that traps ([`Trap`]: an error, or a fault the host repairs) has changed
//! neither memory nor registers (docs/design.md §3, Exceptions).
//!
//! Everything here is pure: no I/O, no clock, no lock, no allocation (but for the ring
//! of [`ReadReplies`], which grows to the most read answers owed at once), and it never
//! panics on values from the wire. The worker is the driver: it looks up the
//! connection's register window and the endpoint, calls [`plan`], checks it has room for
//! the event and the reply, then [`commit`]s, posts the event and sends the reply.
//!
//! Three operations keep their own plan and commit: a deposit with a payload token
//! ([`plan_token`], [`commit_token`]: the target is the buffer the token names, not the
//! connection's endpoint), a read with a read token ([`plan_token_read`]: checked as a
//! read of the token's endpoint, answered as one; nothing to commit), and a reply to one of our reads or atomics ([`plan_reply`],
//! [`commit_reply`]: placed in the request's result range). What a committed read or
//! atomic sends back is [`reply_request`]; a read's answer is built from endpoint
//! memory when sent, so later stores into its range wait ([`ReadReplies`]) until the
//! requester acknowledges it.
//!
//! Submodules: `plan` (the decode table, [`plan`], [`commit`]), `alu` (what register
//! operation and conditional codes compute), `access` (the target endpoint:
//! [`EndpointAccess`], [`TlbAccess`] over the software TLB, [`VecAccess`] for tests),
//! `trap` ([`Trap`], [`RemoteStatus`], [`DropReason`]), `sequence` (instruction-pointer
//! messages: [`plan_invoke`] runs a chain of instructions as one atomic operation),
//! `token` (payload-token deposits), `reply` (read and atomic replies, both sides).

mod access;
mod alu;
mod plan;
mod reply;
mod sequence;
mod token;
mod trap;

pub use access::{Access, EndpointAccess, TlbAccess, VecAccess};
pub use plan::{
    announced, commit, is_plain_deposit, is_plain_read, plain_deposit, plain_read, plan,
    plan_in_frame, plan_into, EventInfo, Plan, RegContext, Reply, Store, MAX_REG_WRITES,
};
pub use reply::{commit_reply, plan_reply, reply_request, Placement, ReadReplies};
pub use sequence::{
    commit_sequence, invoke_regs, plan_invoke, plan_invoke_one, Code, SeqPlan, INVOKE_REGS_LEN,
    MAX_SEQUENCE,
};
pub use token::{
    commit_token, plan_token, plan_token_read, TokenEvent, TokenPlan, TokenReadPlan, TokenTrap,
    TOKEN_LEN, TOKEN_READ_LEN,
};
pub use trap::{DropReason, Nak, RemoteStatus, Trap};

#[cfg(test)]
mod tests;
