//! Work requests and their completions: what the application posts ([`Wqe`]: opcode,
//! remote operands, source, result range) and what comes back ([`Completion`],
//! [`WcStatus`]), with the record of a request in flight ([`Pending`]).
//!
//! Plain data, below everything that moves it: the connection's shared state
//! (`crate::connection`) posts these, the node (`crate::node`) sends and completes
//! them, the operation logic (`crate::oplogic`) builds replies from them.

use crate::status::{DropReason, RemoteStatus};
use crate::tables::EndpointId;
use crate::wire::{CELL_LEN, CONTROL_LEN};

/// Status of a completed work request (verbs names where the idea is the same).
///
/// A request that fails always completes, signaled or not (as in verbs): an unsignaled
/// request completes only when it fails, and its completion is never dropped — one
/// that finds the completion queue full waits (in its connection, or in the node once
/// the connection is gone) until polling makes room.
///
/// When a connection closes (this side's close, or the peer's) or fails, every
/// request still outstanding on it completes: those the peer had acknowledged (and,
/// for reads and atomics, answered) as usual, and those it had refused with their
/// error; on a failure, the oldest one with the failure's status (`RetryExceeded`,
/// `RnrRetryExceeded`); every other one `Unacknowledged` when it was transmitted and
/// `Flushed` when it never was.
///
/// The `u8` value of each status is its code in the C ABI (`DD_WC_*`); a new status
/// takes the next value, existing ones never move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WcStatus {
    Success = 0,
    /// A local range (the source of a write, the result range of a read or atomic)
    /// lies outside its endpoint. Nothing was sent.
    LocalProtectionError = 1,
    /// Bounds or rights violation at the receiver.
    RemoteAccessError = 2,
    /// The receiver could not execute the operation (unknown opcode, bad length, bad
    /// check byte).
    RemoteOperationError = 3,
    /// The receiver refused the request as malformed.
    RemoteInvalidRequest = 4,
    /// The receiver hit a fault its host must repair (page not present).
    RemotePageFault = 5,
    /// No acknowledgement after the configured number of retransmissions (the oldest
    /// outstanding request of a connection that failed so; its peer may or may not
    /// have run it). Also a connection whose peer left its liveness probes unanswered.
    RetryExceeded = 6,
    /// The request certainly did not run at the peer: no message of it was ever
    /// transmitted. The connection closed or failed first, or the post raced the close
    /// (the worker took it after the connection was gone). Posting it again on a new
    /// connection runs it once.
    Flushed = 7,
    /// The request does not fit in what one message of the connection carries, and it
    /// must travel as one message: a write with register operations or a conditional
    /// (its compound descriptor, 8 bytes, goes in its first message), an
    /// instruction-pointer invoke or a payload-token deposit whose data, with the 8
    /// bytes of register names or token ahead of it, is longer than one message of the
    /// connection (the device's `segment_max`, less 48 bytes on a secure connection,
    /// less again when the peer's frames are smaller). Nothing was sent. (Plain writes
    /// and sends, in any address mode, and reads of any length are split into as many
    /// messages as they need.)
    LocalLengthError = 8,
    /// The receiver stayed not ready (exceptioned) past the RNR retry limit (the oldest
    /// outstanding request of the connection, which failed so).
    RnrRetryExceeded = 9,
    /// The request was transmitted, but the connection closed or failed before its
    /// completion came (the peer's acknowledgement and, for a read or an atomic, its
    /// answer): it may have run at the peer — wholly or, a request of several messages,
    /// in part — or not; a read's or atomic's result range may hold all, part or none
    /// of the answer. verbs' flush error leaves this unknown; this status says so,
    /// where `Flushed` says the request never left. Find out from the peer's memory,
    /// or make the request idempotent, before posting it again.
    Unacknowledged = 10,
}

impl WcStatus {
    /// The completion status for a remote status code from a NAK.
    pub fn from_remote(s: RemoteStatus) -> WcStatus {
        match s {
            RemoteStatus::Ok => WcStatus::Success,
            RemoteStatus::RemoteAccessError => WcStatus::RemoteAccessError,
            RemoteStatus::RemoteOperationError => WcStatus::RemoteOperationError,
            RemoteStatus::PageFault => WcStatus::RemotePageFault,
            _ => WcStatus::RemoteInvalidRequest,
        }
    }
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}

/// Work request operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOpcode {
    /// Write `len` bytes at the remote effective address.
    Write,
    /// Write the inline 32-byte block under an 8-bit word mask.
    WriteMasked { mask: u8 },
    /// Read `len` bytes at the remote effective address into the local result range.
    Read,
    /// Add to the 8-byte remote word (or register); the old value lands in the local
    /// result range.
    FetchAdd { add: u64 },
    /// Compare-and-swap on the 8-byte remote word (or register); the old value lands
    /// in the local result range.
    CmpSwap { compare: u64, swap: u64 },
    /// Register operations and/or a conditional only; no memory access.
    RegOp,
    /// Software exception: always an event at the receiver.
    Exception,
    /// Instruction pointer `ip` (global when `tables::GLOBAL_IP` is set) with the
    /// message operands of `remote` (operand, register names), `mask`, and `len` bytes
    /// of data from the source; `returns`: the chain returns a value (an atomic's old
    /// value, 8 bytes) for the local result range.
    Invoke { ip: u32, mask: u8, returns: bool },
    /// Deposit `len` bytes from the source into the buffer payload token `token` names.
    TokenWrite { token: u64 },
    /// Read `len` bytes at `offset` of the range read token `token` names into the
    /// local result range (one request message, `op::TOKEN_READ`; the answer comes as a
    /// `Read`'s does, in as many messages as it needs).
    TokenRead { token: u64, offset: u64 },
    /// Internal: the reply to a peer's read or atomic (never posted by applications).
    Reply {
        /// The peer's request sequence number.
        request: u32,
    },
}

impl WrOpcode {
    /// Whether the request waits for a reply (read data or an old value).
    pub fn wants_reply(self) -> bool {
        matches!(
            self,
            WrOpcode::Read
                | WrOpcode::TokenRead { .. }
                | WrOpcode::FetchAdd { .. }
                | WrOpcode::CmpSwap { .. }
                | WrOpcode::Invoke { returns: true, .. }
        )
    }
}

/// Where a work request's data comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// No data (reads, atomics, register operations).
    None,
    /// Up to 32 bytes carried in the work request itself.
    Inline([u8; 32]),
    /// A range of a local endpoint (like a verbs local memory region); it must stay
    /// unchanged until the request completes, since retransmission reads it again.
    Endpoint { id: EndpointId, offset: u64 },
}

/// Work request flag: generate a completion on success (errors always complete).
pub const WR_SIGNALED: u8 = 0x01;

/// How the receiver finds the operation's target and what else it runs: the seed's
/// send registers beyond opcode and size (operand, index, mode), in wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Remote {
    /// The operand: the effective address in direct mode, the offset in indexed mode,
    /// the immediate of register operations and conditionals.
    pub operand: u32,
    /// Control-part flag bits for the address mode and register target
    /// (`wire::cell::flags::ADDR_MASK`, `REG_TARGET`).
    pub mode_flags: u8,
    /// Register names ra, rb, rc, rd (`wire` index field).
    pub regs: [u8; 4],
    /// The 8-byte compound descriptor, when the request carries register operations or
    /// a conditional.
    pub compound: Option<[u8; 8]>,
}

/// A work request: the seed's send registers, posted by the "go".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wqe {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub flags: u8,
    pub remote: Remote,
    /// Bytes to write or read (8 for atomics, 0 for register operations).
    pub len: u32,
    pub source: Source,
    /// Where reads and atomics put their result: (local endpoint, offset).
    pub result: Option<(EndpointId, u64)>,
}

impl Wqe {
    /// The reply to the peer's request `request`: `len` bytes from `source`.
    pub fn reply(request: u32, source: Source, len: u32) -> Wqe {
        Wqe {
            opcode: WrOpcode::Reply { request },
            ..Wqe::write(0, source, len, 0)
        }
    }

    /// A direct write of `len` bytes from `source` at remote offset `remote_offset`.
    pub fn write(wr_id: u64, source: Source, len: u32, remote_offset: u32) -> Wqe {
        Wqe {
            wr_id,
            opcode: WrOpcode::Write,
            flags: 0,
            remote: Remote {
                operand: remote_offset,
                ..Remote::default()
            },
            len,
            source,
            result: None,
        }
    }
}

/// A completion, as polled from a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WrOpcode,
    pub byte_len: u32,
    /// Local number of the connection the request was posted on.
    pub conn: u32,
    /// The peer's number for that connection: the `conn` of the events and completions
    /// the request causes there ([`crate::events::Event::conn`]).
    pub peer_conn: u32,
    /// Whether the request asked for its completion (an unsignaled one completes only
    /// when it fails).
    pub signaled: bool,
    /// Why the peer refused the request, when it did and said so (with a status
    /// `Remote*`): the receiver's own refusal reason — `RegisterProtection`, `Isolated`,
    /// `OutOfBounds`... — as its counters record it (verbs' `vendor_err`, typed).
    pub remote_reason: Option<DropReason>,
}

impl Completion {
    /// A placeholder, to size poll buffers with.
    pub const EMPTY: Completion = Completion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WrOpcode::Write,
        byte_len: 0,
        conn: 0,
        peer_conn: 0,
        signaled: false,
        remote_reason: None,
    };
}

/// Send priority of a connection (MINI's two send queues per worker): the worker
/// serves every high-priority connection before any low-priority one, and between two
/// low-priority frames it checks for high-priority work, so a small high-priority
/// message overtakes a bulk transfer at the next frame boundary. Messages of one
/// connection stay in order whatever its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Bulk traffic (the default), served round-robin with a bounded burst per
    /// connection and turn so that no connection starves another.
    #[default]
    Low,
    /// Latency-sensitive traffic.
    High,
}

/// What a cell-sized request is, beside its wire cell: how its completion reads and
/// where its local ranges are ([`WorkCell`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CellKind {
    /// A write whose data is in the cell (inline, or none).
    Write,
    /// A write of endpoint memory: the data block holds the source range until the
    /// frame is built, when the data replaces it.
    WriteFrom,
    /// A masked write of the inline block.
    WriteMasked,
    /// A read; the result range follows the reply control part in the data block.
    Read,
    /// A fetch-and-add; the result range follows the add value's place.
    FetchAdd,
    /// A compare-and-swap; the result range follows the two values.
    CmpSwap,
}

impl CellKind {
    /// Whether the request waits for a reply (read data or an old value), and so has a
    /// result range.
    #[inline]
    pub fn wants_reply(self) -> bool {
        matches!(
            self,
            CellKind::Read | CellKind::FetchAdd | CellKind::CmpSwap
        )
    }
}

/// A one-message work request as the message it sends (issue 36): the 48-byte cell —
/// control part with its check byte, data block — already in the wire layout, built
/// when the request is posted (`crate::message::work`), so that the worker copies it
/// into a frame with no per-message decoding; and what the sender keeps beside it
/// (request id, flags, length, kind). 64 bytes, one cache line's worth.
///
/// The cell is kept as six words, each the little-endian reading of eight of its wire
/// bytes (built in registers and stored once). Where the message has no bytes of its
/// own, the data block carries local names, never sent (a frame takes the cell's
/// first `16 + length` bytes and zeros the rest): a [`CellKind::WriteFrom`]'s source in
/// block words 0–1, a read's or atomic's result range in block words 2–3 (endpoint id
/// in the first word, offset in the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCell {
    pub(crate) words: [u64; CELL_LEN / 8],
    pub(crate) wr_id: u64,
    pub(crate) len: u32,
    pub(crate) kind: CellKind,
    pub(crate) flags: u8,
    _pad: [u8; 2],
}

impl WorkCell {
    /// Block word of a [`CellKind::WriteFrom`]'s source range.
    pub(crate) const SOURCE_AT: usize = 0;
    /// Block word of a read's or atomic's result range: after the 16 bytes such a
    /// message sends.
    pub(crate) const RESULT_AT: usize = 2;

    pub(crate) fn new(
        words: [u64; CELL_LEN / 8],
        wr_id: u64,
        len: u32,
        kind: CellKind,
        flags: u8,
    ) -> Self {
        WorkCell {
            words,
            wr_id,
            len,
            kind,
            flags,
            _pad: [0; 2],
        }
    }

    /// The message's payload length (the control part's `length`).
    #[inline]
    pub fn length(&self) -> u32 {
        ((self.words[1] >> 32) as u32).swap_bytes()
    }

    /// The local range (endpoint id, offset) kept at block word `at`.
    #[inline]
    fn range_at(&self, at: usize) -> (EndpointId, u64) {
        let w = CONTROL_LEN / 8 + at;
        (EndpointId(self.words[w] as u32), self.words[w + 1])
    }

    /// Block words `at`, `at + 1` keeping local range (`id`, `offset`).
    pub(crate) fn range_words(id: EndpointId, offset: u64) -> [u64; 2] {
        [u64::from(id.0), offset]
    }

    /// The source range of a [`CellKind::WriteFrom`].
    #[inline]
    pub fn source(&self) -> Option<(EndpointId, u64)> {
        (self.kind == CellKind::WriteFrom).then(|| self.range_at(Self::SOURCE_AT))
    }

    /// The result range of a read or an atomic.
    #[inline]
    pub fn result(&self) -> Option<(EndpointId, u64)> {
        self.kind
            .wants_reply()
            .then(|| self.range_at(Self::RESULT_AT))
    }

    /// The operation, as the application posted it (for its completion).
    pub fn opcode(&self) -> WrOpcode {
        // Block words hold big-endian values read as little-endian.
        let value = |i: usize| u64::from_be_bytes(self.words[CONTROL_LEN / 8 + i].to_le_bytes());
        match self.kind {
            CellKind::Write | CellKind::WriteFrom => WrOpcode::Write,
            CellKind::WriteMasked => WrOpcode::WriteMasked {
                mask: (self.words[0] >> 8) as u8,
            },
            CellKind::Read => WrOpcode::Read,
            CellKind::FetchAdd => WrOpcode::FetchAdd { add: value(0) },
            CellKind::CmpSwap => WrOpcode::CmpSwap {
                compare: value(0),
                swap: value(1),
            },
        }
    }
}

/// A posted request as it waits and flies: a one-message write, read or atomic as its
/// cell ([`WorkCell`]), any other request whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Cell(WorkCell),
    Wr(Wqe),
}

impl Work {
    #[inline]
    pub fn wr_id(&self) -> u64 {
        match self {
            Work::Cell(c) => c.wr_id,
            Work::Wr(w) => w.wr_id,
        }
    }

    #[inline]
    pub fn flags(&self) -> u8 {
        match self {
            Work::Cell(c) => c.flags,
            Work::Wr(w) => w.flags,
        }
    }

    /// Bytes written, read or operated on (a completion's `byte_len`).
    #[inline]
    #[allow(clippy::len_without_is_empty)] // a request's byte count, not a container
    pub fn len(&self) -> u32 {
        match self {
            Work::Cell(c) => c.len,
            Work::Wr(w) => w.len,
        }
    }

    #[inline]
    pub fn opcode(&self) -> WrOpcode {
        match self {
            Work::Cell(c) => c.opcode(),
            Work::Wr(w) => w.opcode,
        }
    }

    /// Where a read or atomic puts its result.
    #[inline]
    pub fn result(&self) -> Option<(EndpointId, u64)> {
        match self {
            Work::Cell(c) => c.result(),
            Work::Wr(w) => w.result,
        }
    }

    /// Whether the request waits for a reply (read data or an old value).
    #[inline]
    pub fn wants_reply(&self) -> bool {
        match self {
            Work::Cell(c) => c.kind.wants_reply(),
            Work::Wr(w) => w.opcode.wants_reply(),
        }
    }

    /// Whether it is an internal reply (never completed to the application).
    #[inline]
    pub fn is_reply(&self) -> bool {
        matches!(
            self,
            Work::Wr(Wqe {
                opcode: WrOpcode::Reply { .. },
                ..
            })
        )
    }

    /// The local source range (endpoint, offset), if the data comes from an endpoint.
    #[inline]
    pub fn source_range(&self) -> Option<(EndpointId, u64)> {
        match self {
            Work::Cell(c) => c.source(),
            Work::Wr(Wqe {
                source: Source::Endpoint { id, offset },
                ..
            }) => Some((*id, *offset)),
            Work::Wr(_) => None,
        }
    }
}

/// A posted work request in flight: its messages take sequence numbers
/// `first_seq .. first_seq + segments`.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub work: Work,
    pub first_seq: u32,
    pub segments: u32,
    /// Payload bytes per segment (fixed at admission: smaller for bulk writes while
    /// high-priority connections share the worker).
    pub seg_max: u32,
    /// First error a NAK reported for one of its messages.
    pub status: WcStatus,
    /// Why the peer refused it, when its NAK said ([`Completion::remote_reason`]).
    pub reason: Option<DropReason>,
    /// Reads and atomics: the last reply message arrived.
    pub replied: bool,
}

impl Pending {
    /// Whether it may complete once acknowledged (a read or atomic also needs its
    /// reply, unless the request itself was refused).
    pub fn ready(&self) -> bool {
        !self.work.wants_reply() || self.replied || self.status != WcStatus::Success
    }
}
