//! The connection table and what a connection shares with the application.
//!
//! A connection entry holds what docs/design.md §3 lists: the endpoint incoming operations
//! act on, the state, the peer's node, connection number and key, and the
//! send/receive sequence state. The application side sees only [`ConnShared`]: the
//! send queue it posts work requests into (single producer, lock free), the arrival
//! counter it may poll (MINI's PDU count) and the state.
//!
//! Connection numbers, keys and initial sequence numbers come from the OS random
//! source, never from counters (ReDMArk).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

mod refusals;

pub use refusals::{echoed_base, Refusals, MAX_REFUSALS};

use crate::oplogic::{DropReason, Nak, RemoteStatus};
use crate::submit::SubmitRing;
use crate::tables::{EndpointId, NodeId};

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

/// A completion queue shared between the worker (producer) and the application.
///
/// No completion is ever dropped for lack of room: a signaled request reserves its slot
/// when it is posted ([`CqShared::reserve_n`]; posting fails with a clear error when the
/// queue has no room left), and a completion that finds the queue full (those of failed
/// unsignaled requests reserve nothing, and take slots signaled ones were promised)
/// waits in its connection until the application polls ([`ConnContext::unreported`]),
/// or, once the connection is gone, in its node (`Node::stranded`).
pub struct CqShared {
    queue: ArrayQueue<Completion>,
    /// Slots promised to signaled requests posted and not yet polled. Written by the
    /// application's threads only: on a line of its own, so that those writes do not
    /// take from the worker the line of the queue it pushes into.
    reserved: crossbeam::utils::CachePadded<AtomicUsize>,
    /// Completions that found the queue full and waited for room (each one counted,
    /// also those that queued behind one already waiting).
    pub waits: AtomicU64,
    /// Completions dropped because nothing could poll them any more: they waited for
    /// room after their connection was gone, and every handle of the queue went too.
    /// (While the application holds the queue, none is dropped.)
    pub overflows: AtomicU64,
    /// Where the application sleeps while the queue is empty ([`CqShared::wait_pop`]).
    wake: crate::wake::Wake,
    /// The device's wait fd, signalled at a push when armed ([`CqShared::with_wait_fd`]).
    wait_fd: Option<Arc<crate::wake::WaitFd>>,
}

impl CqShared {
    pub fn new(depth: usize) -> Arc<CqShared> {
        Arc::new(CqShared {
            queue: ArrayQueue::new(depth.max(1)),
            reserved: crossbeam::utils::CachePadded::new(AtomicUsize::new(0)),
            waits: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            wake: crate::wake::Wake::new(),
            wait_fd: None,
        })
    }

    /// [`CqShared::new`] for a queue whose pushes signal `fd` when it is armed (and
    /// which `fd` watches: [`crate::wake::WaitFd`]).
    pub fn with_wait_fd(depth: usize, fd: &Arc<crate::wake::WaitFd>) -> Arc<CqShared> {
        let mut cq = CqShared::new(depth);
        Arc::get_mut(&mut cq).expect("a new queue").wait_fd = Some(fd.clone());
        fd.watch(&cq);
        cq
    }

    /// Entries the queue holds.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Reserves the completion slots of `n` signaled requests, all or none; `false`
    /// when too few are left unpromised (the application must poll first).
    #[inline]
    pub fn reserve_n(&self, n: usize) -> bool {
        let before = self.reserved.fetch_add(n, Ordering::AcqRel);
        if before + n > self.queue.capacity() {
            self.reserved.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Slots promised to signaled requests posted and not yet polled.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }

    /// Gives back `n` slots [`CqShared::reserve_n`] took for requests not posted.
    #[inline]
    pub fn unreserve_n(&self, n: usize) {
        self.reserved.fetch_sub(n, Ordering::AcqRel);
    }

    /// The worker's side: queues a completion, or hands it back when the queue is full.
    #[inline]
    pub fn push(&self, c: Completion) -> Result<(), Completion> {
        self.queue.push(c)?;
        self.wake.notify();
        if let Some(fd) = &self.wait_fd {
            fd.notify();
        }
        Ok(())
    }

    /// Whether no completion is queued (two plain loads, no fence).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The application's side: sleeps until a completion comes (the worker wakes it)
    /// or `deadline` passes. Only with a worker that runs on its own (a dedicated
    /// thread): nothing else would produce one meanwhile.
    pub fn wait_pop(&self, deadline: std::time::Instant) -> Option<Completion> {
        self.wake.wait_until(deadline, || self.pop())
    }

    /// The application's side: takes the oldest completion, freeing its slot.
    #[inline]
    pub fn pop(&self) -> Option<Completion> {
        let c = self.queue.pop()?;
        if c.signaled {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
        }
        Some(c)
    }
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

/// Connection states (docs/design.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    Connecting = 0,
    Normal = 1,
    Error = 2,
    Closed = 3,
    /// Connection attempt refused or timed out.
    Failed = 4,
    /// A fault the host must repair holds a message; later ones wait
    /// (`deposit::Connection::resume` after the repair).
    Exceptioned = 5,
}

impl ConnState {
    fn from_u8(v: u8) -> ConnState {
        match v {
            0 => ConnState::Connecting,
            1 => ConnState::Normal,
            2 => ConnState::Error,
            3 => ConnState::Closed,
            5 => ConnState::Exceptioned,
            _ => ConnState::Failed,
        }
    }
}

/// What the application shares with the worker for one connection.
pub struct ConnShared {
    /// Local connection number.
    pub number: u32,
    /// The connection's slot in the node's table (set when it is entered there).
    pub(crate) slot: AtomicU32,
    /// Requests ever posted (`submit`; the application's threads write it). At most
    /// `depth` of them are not yet `taken` (wrapping counters).
    pub(crate) posted: AtomicU32,
    pub(crate) depth: u32,
    /// The node's submission ring, where posts go (`submit`).
    pub(crate) ring: Arc<SubmitRing>,
    pub cq: Arc<CqShared>,
    /// Messages (work requests) that arrived complete on this connection.
    pub arrivals: AtomicU64,
    state: AtomicU8,
    /// Why a connect failed (a `cm::RejectReason` code, 0 = timeout).
    pub fail_reason: AtomicU8,
    /// Whether the connection's frames are sealed (`crate::secure`), set before it
    /// turns Normal.
    pub secure: std::sync::atomic::AtomicBool,
    /// A frame of the peer's on this connection, not a probe, passed its checks here:
    /// on the connecting side, the listener has answered the client's first frame, so
    /// the listener's application sees the connection.
    pub heard: std::sync::atomic::AtomicBool,
    /// Peer's connection number, valid once Normal.
    pub peer_conn: AtomicU64,
    /// The peer's identity key as the handshake proved it, and whether it was known
    /// beforehand (pinned; accepting: always) rather than taken from the listener's
    /// challenge (on first use, or unverified); set before the connection turns
    /// Normal. On a connect that failed with `RejectReason::PeerKey`: the key the
    /// listener named instead of the pinned one.
    pub peer_identity: std::sync::OnceLock<Box<(crate::identity::IdentityKey, bool)>>,
    /// The key peers must present on this connection (set at creation).
    pub key: AtomicU64,
    /// Messages from the peer refused here (sticky: never reset).
    pub dropped: AtomicU64,
    /// Requests the worker took into flight or flushed (the worker alone writes it:
    /// a store, not a read-modify-write, once per batch it takes).
    pub(crate) taken: AtomicU32,
}

impl ConnShared {
    pub fn new(
        number: u32,
        sq_depth: usize,
        cq: Arc<CqShared>,
        ring: Arc<SubmitRing>,
    ) -> Arc<ConnShared> {
        Arc::new(ConnShared {
            number,
            slot: AtomicU32::new(u32::MAX),
            posted: AtomicU32::new(0),
            depth: sq_depth.clamp(1, u32::MAX as usize / 2) as u32,
            ring,
            cq,
            arrivals: AtomicU64::new(0),
            state: AtomicU8::new(ConnState::Connecting as u8),
            fail_reason: AtomicU8::new(0),
            secure: std::sync::atomic::AtomicBool::new(false),
            heard: std::sync::atomic::AtomicBool::new(false),
            peer_conn: AtomicU64::new(0),
            peer_identity: std::sync::OnceLock::new(),
            key: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            taken: AtomicU32::new(0),
        })
    }
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Acquire))
    }
    pub fn set_state(&self, s: ConnState) {
        self.state.store(s as u8, Ordering::Release);
    }
}

/// A posted work request in flight: its messages take sequence numbers
/// `first_seq .. first_seq + segments`.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub wr: Wqe,
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
        !self.wr.opcode.wants_reply() || self.replied || self.status != WcStatus::Success
    }
}

pub use crate::reliability::seq_lt;

/// Where a multi-segment work request of the peer's landed: the sequence number of its
/// first segment and the effective address that segment generated (once, whatever the
/// address mode: a post-increment moved its register once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBase {
    pub first_seq: u32,
    pub ea: u64,
}

/// A message kept by a fault until the host repairs it and resumes the connection.
#[derive(Debug, Clone)]
pub struct Held {
    pub seq: u32,
    pub control: crate::wire::ControlRepr,
    pub payload: Vec<u8>,
    pub trap: crate::oplogic::Trap,
}

/// A message kept because it arrived ahead of a gap in the sequence.
#[derive(Debug, Clone)]
pub struct Stored {
    pub control: crate::wire::ControlRepr,
    pub payload: Vec<u8>,
    /// The frame's compound descriptor, for a `COMPOUND_REPEAT` message.
    pub frame_desc: Option<[u8; 8]>,
    /// Already placed on arrival (a `SEGMENT`, no payload kept): when the gap fills it
    /// only moves the sequence on.
    pub placed: bool,
}

// Read replies not yet acknowledged, which later stores must not overtake: the rule is
// the operation logic's.
pub use crate::oplogic::ReadReplies;

/// Most receiver-not-ready NAKs remembered between two acknowledgement frames (they
/// need no record: the sender's timer covers their loss; refusals are in
/// [`Refusals`]). One is queued when a message is held and again when later messages
/// meet the held connection: a few slots are plenty (each costs every connection 8 B).
pub const MAX_PENDING_NAKS: usize = 4;

/// The worker's entry for one connection.
pub struct ConnContext {
    pub number: u32,
    pub key: u64,
    /// Endpoint that incoming operations act on.
    pub endpoint: EndpointId,
    pub peer: NodeId,
    pub peer_conn: u32,
    pub peer_key: u64,
    pub state: ConnState,
    pub shared: Arc<ConnShared>,
    /// Largest payload of one message (so one message fits one frame).
    pub segment_max: u32,
    /// Send priority.
    pub priority: Priority,
    /// The register window the peer's messages name (0..len).
    pub regs: crate::tables::RegWindow,
    /// Whether the peer may force interrupts (cond ALWAYS, software exceptions).
    pub allow_forced_interrupts: bool,
    /// Whether refused messages are also reported on the endpoint's event queue.
    pub report_traps: bool,
    /// The instruction window the peer's instruction pointers name.
    pub instructions: crate::tables::RegWindow,
    /// Isolation mode: every message that is not an instruction pointer or a payload
    /// token's write or read is refused (`Trap::Isolated`).
    pub isolated: bool,
    /// The message a fault keeps (state Exceptioned).
    pub held: Option<Box<Held>>,
    /// A register window allocated for this connection alone (freed with it).
    pub owned_regs: Option<crate::tables::RegWindow>,
    /// A secure connection's sealing state (`crate::secure`): every section it sends
    /// is sealed, every one it takes must open.
    pub secure: Option<Box<crate::secure::Session>>,

    // Receive side.
    /// Sequence state of what the peer sends (cumulative + kept ahead of a gap).
    pub rx: crate::reliability::Receiver,
    /// Messages received ahead of a gap, run when it fills (copies: the loss path).
    pub reorder: std::collections::BTreeMap<u32, Stored>,
    /// Read replies not yet acknowledged, which later stores must not overtake.
    pub read_replies: ReadReplies,
    /// Completions that found the completion queue full, oldest first: they go out,
    /// in order, as the application polls room free (never dropped).
    pub unreported: VecDeque<Completion>,
    /// The work request of the peer's whose first segment ran last, while its later
    /// segments are still to come: they are placed relative to its address.
    pub rx_request: Option<RequestBase>,
    pub ack_pending: bool,
    /// TSC of the last valid frame from the peer, and of our last liveness probe.
    pub last_rx: u64,
    pub last_probe: u64,
    /// Probes sent since the peer was last heard.
    pub probes_unanswered: u32,
    pub naks: [(u32, Nak); MAX_PENDING_NAKS],
    pub nnaks: usize,
    /// Messages refused here whose NAK the peer has not confirmed seeing.
    pub refusals: Refusals,

    // Send side.
    /// Sequence state of what we send (selective repeat, retransmission timer).
    pub tx: crate::reliability::Sender,
    /// Our initial sequence number (repeated in connect replies).
    pub isn: u32,
    /// One past the highest sequence number ever sent (below it: retransmissions).
    pub tx_sent_high: u32,
    /// Posted work requests the worker took off the submission ring and has not yet
    /// taken into flight (the window was full), oldest first.
    pub sendq: VecDeque<Wqe>,
    /// On the node's list of connections with something to send (`Node::ready`).
    pub ready: bool,
    /// A frame of the peer's on this connection passed its checks (mirrored once in
    /// [`ConnShared::heard`]).
    pub heard: bool,
    pub inflight: VecDeque<Pending>,
    /// Most messages in flight (unacknowledged).
    pub window: u32,
    /// Receiver-not-ready: no sending before this TSC.
    pub rnr_until: u64,
    pub rnr_retries: u32,
    pub rnr_retry_limit: u32,
    /// First RNR back-off, in TSC ticks.
    pub rnr_timeout: u64,

    /// The earliest time the node's timer queue holds for this connection
    /// (`u64::MAX`: none).
    pub timer_armed: u64,
    /// A later entry the queue still holds for this connection (the one `timer_armed`
    /// superseded), adopted instead of arming anew when it comes no later than the
    /// next deadline (`u64::MAX`: none).
    pub timer_spare: u64,
}

/// Where a connection's frames go: the peer node and the shard there that owns the
/// peer's connection (the low byte of its number, [`shard_of_conn`]). Sections of one
/// frame go to one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub node: NodeId,
    pub shard: u8,
}

/// The shard that owns connection `number` on a node of `shards` shards: its low byte
/// (numbers are drawn so, [`ConnContext`] numbers of shard k end in k).
#[inline]
pub fn shard_of_conn(number: u32) -> u8 {
    number as u8
}

impl ConnContext {
    /// The peer node and shard this connection's frames go to.
    #[inline]
    pub fn dest(&self) -> Dest {
        Dest {
            node: self.peer,
            shard: shard_of_conn(self.peer_conn),
        }
    }

    /// Messages needed for a work request of `len` bytes.
    #[inline]
    pub fn segments_for(&self, len: u32) -> u32 {
        len.div_ceil(self.segment_max).max(1)
    }

    /// Whether the connection may send now: it is up and the peer is not backing it
    /// off (receiver not ready).
    #[inline]
    pub fn may_send(&self, now: u64) -> bool {
        matches!(self.state, ConnState::Normal | ConnState::Exceptioned) && now >= self.rnr_until
    }

    /// Whether a posted request may go into flight now: the connection may send and
    /// its window has room.
    #[inline]
    pub fn may_admit(&self, now: u64) -> bool {
        self.may_send(now) && self.tx.in_flight() < self.window
    }

    /// Index in `inflight` and segment within it of sequence number `seq`.
    ///
    /// O(1) while every request before it is one message (request `i` then starts at
    /// the front's number plus `i`), else a binary search: the requests' first numbers
    /// grow along the deque, and a frame is filled from here on every send, so a scan
    /// from the front would cost the whole window per frame.
    pub fn locate(&self, seq: u32) -> Option<(usize, u32)> {
        locate_in(&self.inflight, seq)
    }

    /// The cumulative acknowledgement a frame that carries no NAK cell may give: up to
    /// the first refusal the peer may not know of.
    #[inline]
    pub fn ack_point(&self) -> u32 {
        if self.refusals.is_empty() {
            self.rx.expected()
        } else {
            self.refusals.ack_point(self.rx.expected(), 0)
        }
    }

    /// Queues a receiver-not-ready NAK for the next acknowledgement frame.
    pub fn push_nak(&mut self, seq: u32, nak: Nak) -> bool {
        if self.nnaks == MAX_PENDING_NAKS {
            return false;
        }
        self.naks[self.nnaks] = (seq, nak);
        self.nnaks += 1;
        true
    }
}

/// The index from connection number to slot: open addressing with linear probing,
/// the home bucket taken straight from the number's bits above its low byte (the
/// shard's). Numbers are random, and chosen where their home bucket is free
/// ([`ConnTable::unused_number`]), so a lookup is almost always one load — one whose
/// address is known from the number alone, so the receive path can prefetch it for
/// a frame's later sections (a hash map's two arrays and hidden layout could not be).
/// A peer cannot add entries, so it cannot build collisions.
#[derive(Clone)]
struct ConnIndex {
    /// (number, slot + 1); slot 0 marks an empty bucket. A power of two long, at most
    /// half full.
    buckets: Box<[(u32, u32)]>,
    len: usize,
}

impl Default for ConnIndex {
    fn default() -> Self {
        ConnIndex::with_capacity(0)
    }
}

impl ConnIndex {
    /// An index for `n` numbers before it grows.
    fn with_capacity(n: usize) -> Self {
        let size = (n.max(32) * 2).next_power_of_two();
        ConnIndex {
            buckets: vec![(0, 0); size].into_boxed_slice(),
            len: 0,
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The home bucket of `number`.
    #[inline]
    fn home(&self, number: u32) -> usize {
        (number >> 8) as usize & self.mask()
    }

    /// The bucket holding `number`, if any.
    #[inline]
    fn find(&self, number: u32) -> Option<usize> {
        let mut i = self.home(number);
        loop {
            let (n, s) = self.buckets[i];
            if s == 0 {
                return None;
            }
            if n == number {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    #[inline]
    fn get(&self, number: u32) -> Option<usize> {
        self.find(number).map(|i| self.buckets[i].1 as usize - 1)
    }

    /// Whether `number`'s home bucket is free (a new number should land there).
    fn home_free(&self, number: u32) -> bool {
        self.buckets[self.home(number)].1 == 0
    }

    /// The address of `number`'s home bucket (for a prefetch).
    #[inline]
    fn home_addr(&self, number: u32) -> *const u8 {
        (&self.buckets[self.home(number)] as *const (u32, u32)).cast()
    }

    /// Adds `number` (not present) at `slot`.
    fn insert(&mut self, number: u32, slot: usize) {
        if (self.len + 1) * 2 > self.buckets.len() {
            let mut bigger = ConnIndex::with_capacity(self.buckets.len());
            for &(n, s) in self.buckets.iter().filter(|b| b.1 != 0) {
                bigger.place(n, s);
            }
            bigger.len = self.len;
            *self = bigger;
        }
        self.place(number, slot as u32 + 1);
        self.len += 1;
    }

    /// Puts (number, stored slot) in the first free bucket from its home.
    fn place(&mut self, number: u32, stored: u32) {
        let mut i = self.home(number);
        while self.buckets[i].1 != 0 {
            i = (i + 1) & self.mask();
        }
        self.buckets[i] = (number, stored);
    }

    /// Removes `number`, returning its slot; later entries of its probe run move back
    /// into the gap (no tombstones).
    fn remove(&mut self, number: u32) -> Option<usize> {
        let mut gap = self.find(number)?;
        let slot = self.buckets[gap].1 as usize - 1;
        self.len -= 1;
        let mask = self.mask();
        let mut i = gap;
        loop {
            self.buckets[gap] = (0, 0);
            loop {
                i = (i + 1) & mask;
                let (n, s) = self.buckets[i];
                if s == 0 {
                    return Some(slot);
                }
                // The entry at i may move to the gap unless its home lies cyclically
                // in (gap, i].
                let home = self.home(n);
                let stays = if gap <= i {
                    gap < home && home <= i
                } else {
                    gap < home || home <= i
                };
                if !stays {
                    self.buckets[gap] = (n, s);
                    gap = i;
                    break;
                }
            }
        }
    }
}

/// Connection table: slots plus an index from the (random) connection number.
#[derive(Default)]
pub struct ConnTable {
    slots: Vec<Option<ConnContext>>,
    by_number: ConnIndex,
    free: Vec<usize>,
    /// Slots of high-priority connections (served first, checked between frames).
    high: Vec<usize>,
}

impl ConnTable {
    pub fn new() -> Self {
        Self::default()
    }
    /// A table whose index holds `n` connections before it grows.
    pub fn with_capacity(n: usize) -> Self {
        ConnTable {
            by_number: ConnIndex::with_capacity(n),
            ..Self::default()
        }
    }
    pub fn len(&self) -> usize {
        self.by_number.len
    }
    pub fn is_empty(&self) -> bool {
        self.by_number.len == 0
    }
    pub fn contains(&self, number: u32) -> bool {
        self.by_number.find(number).is_some()
    }
    /// A connection number not in use: random (from the OS source) but for its low
    /// byte, `low` (the shard's), and nonzero, its home bucket in the index free.
    pub fn unused_number(&self, low: u8) -> u32 {
        loop {
            let n = (random_u32() & !0xff) | u32::from(low);
            if n != 0 && self.by_number.home_free(n) {
                return n;
            }
        }
    }
    pub fn insert(&mut self, c: ConnContext) -> usize {
        let n = c.number;
        let high = c.priority == Priority::High;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(c);
                s
            }
            None => {
                self.slots.push(Some(c));
                self.slots.len() - 1
            }
        };
        self.by_number.insert(n, slot);
        if let Some(c) = &self.slots[slot] {
            c.shared.slot.store(slot as u32, Ordering::Relaxed);
        }
        if high {
            self.high.push(slot);
        }
        slot
    }
    #[inline]
    pub fn slot_of(&self, number: u32) -> Option<usize> {
        self.by_number.get(number)
    }
    /// Starts loading the index bucket where connection `number` is (a hint, as
    /// [`ConnTable::prefetch`], one step earlier: the bucket's address needs no load).
    #[inline]
    pub fn prefetch_index(&self, number: u32) {
        crate::prefetch::prefetch(self.by_number.home_addr(number));
    }
    /// Starts loading the state of connection `number` into the cache, if it is one
    /// of ours (a hint: the receive path asks for the next section's connection while
    /// it works on the current one, so that frames of many connections do not miss on
    /// each in turn).
    #[inline]
    pub fn prefetch(&self, number: u32) {
        if let Some(slot) = self.slot_of(number) {
            self.prefetch_slot(slot);
        }
    }
    /// [`ConnTable::prefetch`] by slot.
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        if let Some(Some(c)) = self.slots.get(slot) {
            let lines = std::mem::size_of::<ConnContext>().div_ceil(64);
            crate::prefetch::prefetch_lines((c as *const ConnContext).cast(), lines, true);
        }
    }
    #[inline]
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut ConnContext> {
        self.slots.get_mut(slot).and_then(|s| s.as_mut())
    }
    pub fn get(&self, slot: usize) -> Option<&ConnContext> {
        self.slots.get(slot).and_then(|s| s.as_ref())
    }
    pub fn remove(&mut self, number: u32) -> Option<ConnContext> {
        let slot = self.by_number.remove(number)?;
        self.free.push(slot);
        self.high.retain(|s| *s != slot);
        self.slots[slot].take()
    }
    /// Slots of the high-priority connections.
    pub fn high_slots(&self) -> &[usize] {
        &self.high
    }
    /// Number of slots (live or free) — iterate 0..slots() with get_mut.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &ConnContext> {
        self.slots.iter().flatten()
    }
}

/// A random nonzero u32 from the OS random source.
pub fn random_u32() -> u32 {
    loop {
        let mut b = [0u8; 4];
        getrandom::getrandom(&mut b).expect("OS random source");
        let v = u32::from_ne_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

/// A random nonzero u64 from the OS random source.
pub fn random_u64() -> u64 {
    loop {
        let mut b = [0u8; 8];
        getrandom::getrandom(&mut b).expect("OS random source");
        let v = u64::from_ne_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

/// [`ConnContext::locate`] on a deque of requests.
fn locate_in(inflight: &VecDeque<Pending>, seq: u32) -> Option<(usize, u32)> {
    let base = inflight.front()?.first_seq;
    let off = seq.wrapping_sub(base);
    let len = inflight.len();
    let guess = (off as usize).min(len - 1);
    let idx = if inflight[guess].first_seq.wrapping_sub(base) <= off {
        // Segments are at least one each, so no later request starts at or before it.
        guess
    } else {
        inflight.partition_point(|p| p.first_seq.wrapping_sub(base) <= off) - 1
    };
    let p = &inflight[idx];
    let within = seq.wrapping_sub(p.first_seq);
    (within < p.segments).then_some((idx, within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_every_number_through_collisions_removals_and_growth() {
        // Numbers of one shard (low byte 3) whose home buckets collide in runs, some
        // removed as they go (backward shift), past several growths; checked against a
        // map after every step.
        let mut ix = ConnIndex::with_capacity(4);
        let mut model = std::collections::HashMap::new();
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        for step in 0..5000usize {
            let r = next();
            if r % 3 == 0 && !model.is_empty() {
                let victim = *model.keys().nth(r as usize % model.len()).unwrap();
                assert_eq!(ix.remove(victim), model.remove(&victim));
            } else {
                // Few distinct home buckets at first: long probe runs that wrap.
                let n = ((r % 97) << 8 | (next() & 0xff_0000) << 8) | 3;
                if n != 3 && !model.contains_key(&n) {
                    ix.insert(n, step);
                    model.insert(n, step);
                }
            }
            assert_eq!(ix.len, model.len());
            if step % 97 == 0 {
                for (&n, &slot) in &model {
                    assert_eq!(ix.get(n), Some(slot), "step {step}");
                }
                assert_eq!(ix.get(0xdead_0003), model.get(&0xdead_0003).copied());
            }
        }
        assert!(ix.buckets.len() >= 2 * ix.len);
        for (&n, &slot) in &model {
            assert_eq!(ix.get(n), Some(slot));
        }
    }

    /// `locate_in` against a scan from the front, with one- and many-message requests
    /// and sequence numbers that wrap.
    #[test]
    fn locate_finds_every_message_of_the_window() {
        for (base, multi_every) in [
            (0u32, 0usize),
            (u32::MAX - 40, 0),
            (100, 7),
            (u32::MAX - 3, 3),
        ] {
            let mut q = VecDeque::new();
            let mut seq = base;
            for i in 0..200usize {
                let segments = if multi_every > 0 && i % multi_every == 1 {
                    1 + (i % 5) as u32
                } else {
                    1
                };
                q.push_back(Pending {
                    wr: Wqe::write(i as u64, Source::None, 0, 0),
                    first_seq: seq,
                    segments,
                    seg_max: 1,
                    status: WcStatus::Success,
                    reason: None,
                    replied: false,
                });
                seq = seq.wrapping_add(segments);
            }
            let scan = |s: u32| {
                let mut off = s.wrapping_sub(base);
                for (i, p) in q.iter().enumerate() {
                    if off < p.segments {
                        return Some((i, off));
                    }
                    off -= p.segments;
                }
                None
            };
            let end = seq;
            let mut s = base.wrapping_sub(10);
            while s != end.wrapping_add(10) {
                assert_eq!(locate_in(&q, s), scan(s), "base {base} seq {s}");
                s = s.wrapping_add(1);
            }
            for _ in 0..3 {
                q.pop_front();
            }
            let front = q.front().unwrap().first_seq;
            assert_eq!(locate_in(&q, front), Some((0, 0)));
            assert_eq!(locate_in(&q, front.wrapping_sub(1)), None);
        }
        assert_eq!(locate_in(&VecDeque::new(), 5), None);
    }

    #[test]
    fn sequence_comparison_wraps() {
        assert!(seq_lt(1, 2));
        assert!(!seq_lt(2, 2));
        assert!(seq_lt(u32::MAX, 0));
        assert!(!seq_lt(0, u32::MAX));
    }

    #[test]
    fn random_numbers_are_not_sequential() {
        let a = random_u32();
        let b = random_u32();
        assert_ne!(a.wrapping_add(1), b);
        assert_ne!(random_u64(), 0);
    }

    #[test]
    fn an_idle_connection_is_small() {
        // What every connection costs before it sends anything, all told (issue 11: at
        // most 1 KiB): its slot in the node's table, the state it shares with the
        // application (behind an `Arc`: two counters more), its entry in the number
        // map and in the timer heap. Queues, in-flight lists, refusal records and held
        // messages are allocated when used and given back when the connection goes
        // quiet; a secure connection's keys are behind one pointer.
        let slot = std::mem::size_of::<Option<ConnContext>>();
        let shared = std::mem::size_of::<ConnShared>() + 16;
        let map = std::mem::size_of::<(u32, usize)>() + 1;
        let timer = std::mem::size_of::<(u64, u32)>();
        let total = slot + shared + map + timer;
        assert!(slot <= 720, "Connection is {slot} B");
        // (864: the peer's identity key, version 13, is behind a pointer.)
        assert!(total <= 864, "an idle connection costs {total} B");
    }
}
