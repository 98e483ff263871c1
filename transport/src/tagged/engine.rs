//! The tagged layer's protocol: eager messages through a receive ring, rendezvous by
//! a read straight into the posted buffer, credits read from the receiver's memory.
//!
//! # The receive ring
//!
//! Every engine owns one endpoint: a ring of `slots` slots of `slot` bytes, staging
//! slots for what it sends, and a table of credit words. Its listener accepts isolated
//! connections (design §3): a peer can only invoke the ring's one instruction, "write
//! the message at r0, advance r0 by the stride, wrap it, and tell the host" — it names
//! no state of ours. All peers append to the one ring and the worker serialises them;
//! each message posts an event on the endpoint's event queue (a condition the receiver
//! set, not one the sender forces) naming the connection it came on, where it landed
//! and its length. So the engine learns of arrivals from one queue however many peers
//! there are, in slot order, and knows each slot's sender from the transport, not from
//! what the sender wrote.
//!
//! # Messages
//!
//! A message of at most `eager_max` bytes (by default whole slots carrying at least
//! 16 KiB) goes eager: after a 64-byte header ([`super::wire`]) in its first slot, and in
//! whole slots after that (no header: a sender's slots reach the ring in its order, and
//! each takes a credit), copied once at the sender into staging slots, deposited by the
//! transport into the receiver's ring, copied once into the posted buffer (or, when no
//! receive is posted yet, into the unexpected list). A multi-slot message is matched at
//! its first slot: a receive posted then gets every slot straight from the ring; if
//! none is, the message is gathered and waits whole in the unexpected list (a receive
//! posted meanwhile takes it when whole). A longer message is announced by
//! an RTS carrying a read token over the sender's buffer (registered for the time of
//! the send); the receiver, once a receive takes it, reads it with that token straight
//! into the posted buffer — the only copy at the receiving host is the transport's own
//! deposit — then sends a FIN, and the sender's send completes. The receiver drives the
//! whole transfer; the sender's application need not call in meanwhile (its worker
//! answers the read).
//!
//! # Credits
//!
//! A peer may have at most as many slots outstanding (sent, not yet consumed) as the
//! receiver granted. The receiver writes, per accepted connection, the total number of
//! slots that connection may have sent (consumed + grant) into its credit word, which
//! every peer may read through a read token named in the listener's reply; a sender
//! reads its word (8 bytes, one round trip, no work for the receiver's application)
//! when it runs low. No credit ever travels in the ring, so no credit message can be
//! stuck behind the credits it returns. A receiver shares its ring among the peers
//! that connected: each gets up to `burst` slots while the ring has room, and a peer
//! gets at least one slot as soon as one is consumed. Per peer the engine keeps a few
//! hundred bytes and two connections; there is no limit on peers but the ring's slots
//! (a peer that holds a credit keeps it).
//!
//! # Trust
//!
//! The connections are the transport's (authenticated, and sealed when secure), and a
//! slot's sender is the connection its event names. A connected peer can still write
//! garbage into its slots: headers are checked ([`super::wire::Header::decode`]), and
//! a slot whose sequence does not follow that peer's count, or that it sent beyond its
//! credit, is refused and counted, never acted on. A peer that ignores its credits can
//! still overwrite slots not yet consumed (other peers' messages) — the ring is shared,
//! as a verbs shared receive queue is — but it is caught doing so (`bad_sequence`).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::ids::{IdMap, IdSet};

use super::matching::{Matcher, MsgId, MsgInfo, PeerId, Posted, Selector};
use super::wire::{self, Header, Kind, HEADER};
use crate::connection::ConnState;
use crate::tables::{EndpointId, Rights, StoredInstruction};
use crate::wire::cell::{op, AddrMode};
use crate::wire::compound::{CompoundRepr, Cond, CondRepr, OpSource, RegOp, RegOpRepr};
use crate::wr::WR_SIGNALED;
use crate::wr::{Completion, Remote, Source, WcStatus, Wqe, WrOpcode};

mod regs;
mod rma;
pub use rma::{RegionKey, RmaOp};

/// A tagged endpoint's address: its node (IPv4 or IPv6, the device's family) and its
/// service number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PeerAddr {
    pub ip: IpAddr,
    pub service: u32,
}

impl PeerAddr {
    /// `ip`'s IPv4-mapped IPv6 form (`::ffff:a.b.c.d`) as the IPv4 address it names, so
    /// that one endpoint has one address however the caller spelt it.
    pub fn new(ip: impl Into<IpAddr>, service: u32) -> PeerAddr {
        PeerAddr {
            ip: ip.into().to_canonical(),
            service,
        }
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.service),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.service),
        }
    }
}

/// The hello a connecting engine sends (its connect request's private data): who it
/// is, so that the listener numbers the connection as the peer it sends to. Little
/// endian; the family by the magic:
///
/// ```text
///  IPv4 (12 bytes)              IPv6 (24 bytes)
///  0  magic   u32  "ddtg"       0  magic   u32  "ddt6"
///  4  ip      [4]               4  ip      [16]
///  8  service u32              20  service u32
/// ```
///
/// The IPv4 form is the only one engines before IPv6 sent and read: they still reach
/// us, and an IPv4 engine's hello still reaches them.
fn hello(local: PeerAddr) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    match local.ip {
        IpAddr::V4(a) => {
            h.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
            h.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            h.extend_from_slice(&HELLO6_MAGIC.to_le_bytes());
            h.extend_from_slice(&a.octets());
        }
    }
    h.extend_from_slice(&local.service.to_le_bytes());
    h
}

/// The address a hello names; `None`: not a hello (refused, counted as `bad_hello`).
/// Bytes past the form's length are ignored (room for later fields).
fn parse_hello(h: &[u8]) -> Option<PeerAddr> {
    let magic = u32::from_le_bytes(h.get(..4)?.try_into().ok()?);
    let (ip, rest): (IpAddr, &[u8]) = match magic {
        HELLO_MAGIC => {
            let ip: [u8; 4] = h.get(4..8)?.try_into().ok()?;
            (ip.into(), &h[8..])
        }
        HELLO6_MAGIC => {
            let ip: [u8; 16] = h.get(4..20)?.try_into().ok()?;
            (ip.into(), &h[20..])
        }
        _ => return None,
    };
    let service = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
    Some(PeerAddr::new(ip, service))
}

/// The ring's shape and the engine's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bytes per ring slot: a power of two, at least 128, at most what one message of
    /// the device carries.
    pub slot: u32,
    /// Ring slots: a power of two.
    pub slots: u32,
    /// Staging slots for what this engine sends (eager messages and RTS until
    /// acknowledged, FINs, credit reads).
    pub stage: u32,
    /// Most slots one peer holds at once.
    pub burst: u32,
    /// Messages up to this many bytes go eager (through the ring: `slot` - 64 bytes in
    /// the first slot, whole slots after it, at most [`MAX_EAGER_SLOTS`]); longer ones
    /// by rendezvous. A sender uses the smaller of its own and the receiver's.
    pub eager_max: u32,
    /// Buckets of the credit table (a power of two; 4 entries of 16 bytes each). A
    /// peer's entry is found from its connection's number; with half as many buckets
    /// as the device has connections a bucket is full (the peer is refused, counted)
    /// about never.
    pub credit_buckets: u32,
}

impl Config {
    /// Slots of `slot` bytes (eager up to `slot` - 64), `slots` of them, 256 staging
    /// slots, 32 slots per peer at most, a credit table for a device of
    /// `max_connections` connections.
    pub fn new(slot: u32, slots: u32, max_connections: u32) -> Config {
        Config {
            slot,
            slots,
            stage: 256,
            burst: 32,
            eager_max: default_eager_max(slot),
            credit_buckets: (max_connections / 2).next_power_of_two().max(64),
        }
    }

    fn check(&self) -> Result<(), String> {
        if !self.slot.is_power_of_two() || self.slot < 128 {
            return Err(format!(
                "slot of {} bytes: a power of two >= 128",
                self.slot
            ));
        }
        if !self.slots.is_power_of_two() || self.slots < 2 {
            return Err(format!("{} ring slots: a power of two >= 2", self.slots));
        }
        if self.stage == 0 || self.burst == 0 || !self.credit_buckets.is_power_of_two() {
            return Err("no staging slots, burst or connections".into());
        }
        if u64::from(self.eager_max) > eager_room(self.slot, MAX_EAGER_SLOTS) {
            return Err(format!(
                "eager messages of {} bytes do not fit {MAX_EAGER_SLOTS} slots of {}",
                self.eager_max, self.slot
            ));
        }
        Ok(())
    }

    fn ring_len(&self) -> u64 {
        u64::from(self.slots) * u64::from(self.slot)
    }

    fn stage_off(&self, s: u32) -> u64 {
        self.ring_len() + u64::from(s) * u64::from(self.slot)
    }

    fn credits_off(&self) -> u64 {
        self.stage_off(self.stage)
    }

    /// Bytes of the engine's endpoint.
    pub fn endpoint_len(&self) -> u64 {
        self.credits_off() + self.credits_len()
    }

    fn credits_len(&self) -> u64 {
        u64::from(self.credit_buckets) * CREDIT_BUCKET as u64
    }

    /// The credit table's bucket for connection `number` (its offset in the table).
    fn bucket(&self, number: u32) -> u64 {
        let h = number.wrapping_mul(0x9e37_79b9) >> 8;
        u64::from(h & (self.credit_buckets - 1)) * CREDIT_BUCKET as u64
    }
}

/// Most ring slots one eager message takes.
pub const MAX_EAGER_SLOTS: u32 = 64;
/// Eager messages take at least this many bytes by default (whole slots).
const EAGER_DEFAULT: u64 = 16 * 1024;

/// Bytes `k` slots of `slot` bytes carry as one eager message (the first holds the
/// header).
fn eager_room(slot: u32, k: u32) -> u64 {
    u64::from(slot) * u64::from(k) - HEADER as u64
}

/// The default eager limit: whole slots carrying at least [`EAGER_DEFAULT`] bytes.
fn default_eager_max(slot: u32) -> u32 {
    let k = (1..MAX_EAGER_SLOTS)
        .find(|&k| eager_room(slot, k) >= EAGER_DEFAULT)
        .unwrap_or(MAX_EAGER_SLOTS);
    eager_room(slot, k).min(u64::from(u32::MAX)) as u32
}

/// Slots an eager message of `len` bytes takes.
fn eager_slots(slot: u32, len: u64) -> u32 {
    (len + HEADER as u64).div_ceil(u64::from(slot)).max(1) as u32
}

/// Copies `bytes` to `at` of receive `r`'s buffer, as much as fits.
fn copy_into(r: &Recv, at: u64, bytes: &[u8]) {
    let n = (bytes.len() as u64).min(r.len.saturating_sub(at)) as usize;
    if n > 0 {
        // SAFETY: the receive's contract: `r.len` bytes at `r.buf` are ours until it
        // completes; `at + n <= r.len`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.buf.add(at as usize), n) };
    }
}

/// A message that arrived in the ring: the event its instruction posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Our number for the connection it came on.
    pub conn: u32,
    /// Where it landed: its offset in the engine's endpoint.
    pub ea: u64,
    /// Its length.
    pub len: u32,
}

/// A connection the engine's listener accepted.
#[derive(Debug)]
pub struct Accepted<C> {
    pub conn: C,
    /// The connect request's private data.
    pub hello: Vec<u8>,
    /// Our number for the connection (its credit word's index).
    pub number: u32,
}

/// What the engine needs of a device: the `deposit` crate's `Device`, or a `sim` host.
///
/// Every endpoint and connection it makes must be served by the same worker (shard) as
/// the engine's endpoint, since tokens and read results are that worker's.
pub trait Fabric {
    /// A connection (dropping it closes it).
    type Conn;
    /// A registered buffer (dropping it without [`Fabric::deregister`] leaks nothing
    /// but the registration).
    type Mem;
    /// Why a control call failed.
    type Error: std::fmt::Display;

    /// Makes the engine's endpoint of `len` bytes (zeroed; rights to remote writes, for
    /// the ring instruction, and reads, for the credit table's read token — its only
    /// connections are isolated, so nothing else reaches it; an event queue of at
    /// least `2 * slots` entries), a window of
    /// three registers set to [`ring_registers`] and the [`ring_instruction`] in an
    /// instruction window of one. Returns the endpoint, the memory's first byte and the
    /// instruction pointer.
    fn open(
        &mut self,
        len: u64,
        slot: u32,
        slots: u32,
    ) -> Result<(Self::Mem, *mut u8, u32), Self::Error>;
    /// Listens on `service` into the engine's endpoint: isolated connections whose
    /// only entry point is the ring instruction, answered with `reply`.
    fn listen(&mut self, service: u32, reply: &[u8]) -> Result<(), Self::Error>;
    /// The next connection the listener accepted.
    fn accept(&mut self) -> Option<Accepted<Self::Conn>>;
    /// Starts connecting to `to` from the engine's endpoint with `hello` as the
    /// request's private data (it may return before the peer answered).
    fn connect(&mut self, to: PeerAddr, hello: &[u8]) -> Result<Self::Conn, Self::Error>;
    fn state(&self, c: &Self::Conn) -> ConnState;
    /// The listener's reply private data (once `Normal`: the connection is then made
    /// usable for [`Fabric::post`]).
    fn reply(&mut self, c: &mut Self::Conn) -> Vec<u8>;
    /// The peer's number for the connection.
    fn remote_number(&self, c: &Self::Conn) -> u32;
    /// The next event of the engine's endpoint, as an arrival (events of other kinds
    /// are skipped).
    fn arrival(&mut self) -> Option<Arrival>;
    /// Posts a work request (sources and results in the engine's endpoint or in
    /// buffers it registered); `false`: no room now, nothing posted.
    fn post(&mut self, c: &Self::Conn, wr: &Wqe) -> bool;
    /// Completions of the engine's connections.
    fn poll(&mut self, out: &mut Vec<Completion>);
    /// Registers `len` bytes at `ptr` (for a read token over it, or as a read's
    /// result).
    ///
    /// # Safety
    /// The bytes stay valid until [`Fabric::deregister`].
    unsafe fn register(&mut self, ptr: *mut u8, len: usize) -> Result<Self::Mem, Self::Error>;
    fn mem_id(&self, m: &Self::Mem) -> EndpointId;
    fn deregister(&mut self, m: Self::Mem);
    /// A read token over `len` bytes at `offset` of `m`.
    fn read_token(&mut self, m: &Self::Mem, offset: u64, len: u64) -> Result<u64, Self::Error>;
    fn cancel_token(&mut self, token: u64);
    /// Nanoseconds of a clock that only moves forward.
    fn now(&self) -> u64;
    /// Drives the device when progress is the application's (nothing otherwise).
    fn drive(&mut self) {}

    /// A region exposed to peers (dropping it closes its listener and the connections
    /// it accepted, and deregisters it).
    type Region;
    /// Registers `len` bytes at `ptr` as an endpoint with `rights` behind a listener
    /// on `service` that admits only connect requests whose private data is `secret`,
    /// answered with `reply` (one-sided operations: [`Engine::expose`]).
    ///
    /// # Safety
    /// The bytes stay valid until the region is dropped.
    unsafe fn expose(
        &mut self,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
        service: u32,
        secret: &[u8],
        reply: &[u8],
    ) -> Result<Self::Region, Self::Error>;
    /// Takes the connections a region's listener accepted (they work before; this
    /// keeps them, and lets go of those that closed).
    fn serve(&mut self, region: &mut Self::Region);
    /// Starts connecting to a peer's region with `secret` as the request's private
    /// data, from an endpoint with no rights (the region's owner reaches nothing of
    /// ours); as [`Fabric::connect`] otherwise.
    fn connect_region(&mut self, to: PeerAddr, secret: &[u8]) -> Result<Self::Conn, Self::Error>;
}

/// The ring's one instruction, as every [`Fabric`] programs it (slot 0 of a window of
/// one, an entry point): write the message at r0, then r0 += r1 (the stride) and
/// r0 &= r2 (the ring's length less one), and post an event (r0 >= 0: a condition of
/// the receiver's that always holds), with r0..r2 a window of three registers the
/// listener's connections share, holding 0, `slot` and `slot * slots - 1`.
pub fn ring_instruction() -> StoredInstruction {
    let compound = CompoundRepr {
        op1: RegOpRepr {
            op: RegOp::And,
            src: OpSource::Reg(2),
        },
        cond: CondRepr {
            cond: Cond::Ge,
            rhs: OpSource::Operand,
        },
        ..CompoundRepr::NONE
    };
    StoredInstruction {
        opcode: op::WRITE,
        flags: AddrMode::PostIncrement.to_flags(),
        regs: [0, 0, 0, 0],
        compound: Some(compound.to_bytes()),
        entry: true,
        ..StoredInstruction::default()
    }
}

/// The ring's registers r0..r2: its write pointer, stride and wrap mask.
pub fn ring_registers(slot: u32, slots: u32) -> [u64; 3] {
    [0, u64::from(slot), u64::from(slot) * u64::from(slots) - 1]
}

/// How a send or a receive ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TagStatus {
    /// Done: the whole message.
    Success,
    /// The message was longer than the receive's buffer: its first bytes landed
    /// (`len`), `olen` says how long it was.
    Truncated,
    /// The receive was cancelled before any message took it.
    Cancelled,
    /// The peer could not be reached (its connection failed or was refused).
    Unreachable,
    /// The transport failed the transfer with this status.
    Transport(WcStatus),
    /// The receiver refused the message (its read failed).
    Refused,
}

/// What a completion is of.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TagOp {
    Send,
    Recv,
    /// One-sided operations (`rma` of the engine or the mailbox).
    Write,
    Read,
    Atomic,
}

/// A send's or a receive's completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TagCompletion {
    /// The caller's context of the send or receive.
    pub context: u64,
    pub op: TagOp,
    /// A tagged message (else untagged: `FI_MSG`).
    pub tagged: bool,
    pub status: TagStatus,
    /// Bytes sent, or placed in the receive's buffer.
    pub len: u64,
    /// Receives: the message's length (more than `len` when truncated).
    pub olen: u64,
    pub tag: u64,
    /// The sender's immediate data, when it sent some.
    pub data: Option<u64>,
    /// Receives: the sender.
    pub src: Option<PeerId>,
}

/// Why a call was refused at once.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum TagError {
    /// An unknown peer, claim or argument.
    Invalid(String),
    /// The device refused a control call.
    Fabric(String),
}

impl std::fmt::Display for TagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagError::Invalid(s) => write!(f, "invalid: {s}"),
            TagError::Fabric(s) => write!(f, "device: {s}"),
        }
    }
}

impl std::error::Error for TagError {}

/// Counters of what the engine refused or met.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TagStats {
    /// Ring slots consumed.
    pub slots: u64,
    /// Eager messages and RTS received.
    pub eager_rx: u64,
    pub rndv_rx: u64,
    /// Slots refused: a bad header, an unknown source or a sequence that does not
    /// follow (forged or misattributed).
    pub bad_header: u64,
    pub bad_source: u64,
    pub bad_sequence: u64,
    /// A FIN naming no send of ours to that peer.
    pub bad_fin: u64,
    /// Connect requests to our listener refused (no or malformed hello).
    pub bad_hello: u64,
    /// Peers refused because their credit-table bucket was full.
    pub credit_table_full: u64,
    /// Credit reads posted, and how many found no new credit.
    pub credit_reads: u64,
    pub credit_stalls: u64,
    /// Times a send found its peer's grant used up and waited for credit (a credit
    /// read, or the grant carried by the peer's own slots).
    pub credit_waits: u64,
    /// Buffers registered (rendezvous, one-sided operations), and uses that found a
    /// cached registration covering the buffer instead.
    pub registrations: u64,
    pub registrations_reused: u64,
}

/// The hellos' magic numbers ([`hello`]), and the listener's reply's.
const HELLO_MAGIC: u32 = 0x6464_7467; // "ddtg"
const HELLO6_MAGIC: u32 = 0x6464_7436; // "ddt6"
/// Bytes of a credit-table bucket: 4 entries of (connection number u32, zero u32,
/// total granted u64).
const CREDIT_BUCKET: usize = 64;
const WR_STAGE: u64 = 1 << 56;
const WR_READ: u64 = 2 << 56;
const WR_CREDIT: u64 = 3 << 56;
const WR_KIND: u64 = 0xff << 56;
/// Credit reads that found nothing new are retried after this, doubling up to
/// [`CREDIT_BACKOFF_MAX`].
const CREDIT_BACKOFF_MIN: u64 = 1_000;
const CREDIT_BACKOFF_MAX: u64 = 200_000;

/// A receive: where the message goes.
#[derive(Clone, Copy, Debug)]
struct Recv {
    context: u64,
    buf: *mut u8,
    len: u64,
}

/// An unexpected message: its bytes, or where to read them.
#[derive(Debug)]
enum Parked {
    Eager(Vec<u8>),
    Rts { token: u64, cookie: u64 },
}

struct Send {
    context: u64,
    dest: PeerId,
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    buf: *const u8,
    len: u64,
    /// An injected message's own copy.
    owned: Option<Vec<u8>>,
    /// Rendezvous: the registration and token, once made.
    rndv: Option<(u64, usize)>,
    /// Slots it takes (1 but for a multi-slot eager message, known at its first), has
    /// posted, and has in flight; the first failure of one.
    slots: u32,
    posted: u32,
    inflight: u32,
    failed: Option<WcStatus>,
}

/// A multi-slot eager message coming in: where its bytes go, and how many came.
struct Assembly {
    info: MsgInfo,
    tagged: bool,
    /// A receive that matched it at its first slot, or its bytes until it is whole.
    into: Result<Recv, Vec<u8>>,
    got: u64,
}

/// What a staging slot holds until its request completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Free,
    Eager(u64),
    Rts(u64),
    Fin,
    Credit(PeerId),
}

/// A rendezvous read in flight (or waiting for the connection).
struct Read {
    peer: PeerId,
    recv: Recv,
    info: MsgInfo,
    tagged: bool,
    token: u64,
    cookie: u64,
    /// Bytes read: min(message, buffer).
    n: u64,
    /// Its buffer's registration and offset in it.
    mem: Option<(usize, u64)>,
}

/// What waits for a peer's credit, in sending order.
#[derive(Clone, Copy, Debug)]
enum Tx {
    Send(u64),
    Fin { cookie: u64, status: u64, took: u64 },
}

struct Peer<C> {
    addr: PeerAddr,
    /// Our connection to its ring, and what its listener told us.
    out: Option<C>,
    ready: bool,
    failed: bool,
    /// Why it cannot be reached, when the device said.
    error: Option<String>,
    ring_ip: u32,
    /// The most it takes eager (its listener's reply).
    eager_max: u32,
    credit_token: u64,
    /// Its number for our connection (our entry in its credit table).
    credit_number: u32,
    /// Slots we sent it, and the total its credit word allowed when last read.
    sent: u64,
    limit: u64,
    /// Where the credit word is read again before the grant runs out (half of the
    /// last grant sent), so that a steady sender never waits for a credit read.
    read_ahead: u64,
    credit_inflight: bool,
    /// Its grant is used up and a send of ours waits for more (counted once).
    waiting: bool,
    credit_at: u64,
    credit_backoff: u64,
    txq: VecDeque<Tx>,
    /// Reads waiting for `out`.
    reads: Vec<u64>,
    /// Its connection to our ring: our number for it, slots consumed, total granted.
    inbound: Option<C>,
    in_number: u32,
    /// Its entry in our credit table (offset in the endpoint).
    credit_entry: u64,
    consumed: u64,
    granted: u64,
    /// The multi-slot eager message it is in the middle of.
    assembly: Option<Box<Assembly>>,
}

/// One tagged endpoint: sends, receives, probes and cancels over a [`Fabric`].
pub struct Engine<F: Fabric> {
    fab: F,
    cfg: Config,
    local: PeerAddr,
    ep: EndpointId,
    base: *mut u8,
    /// The endpoint (kept: dropping it would free the ring).
    _ring: F::Mem,
    peers: Vec<Peer<F::Conn>>,
    by_addr: HashMap<PeerAddr, PeerId>,
    /// Peers with something queued, connecting or waiting for credit.
    busy: IdSet<PeerId>,
    /// Peers by our number for their connection to our ring.
    inbound: IdMap<u32, PeerId>,
    tagged: Matcher<Recv, Parked>,
    untagged: Matcher<Recv, Parked>,
    /// Claimed messages by the claimer's context (`FI_CLAIM`).
    claims: IdMap<u64, (bool, MsgId)>,
    consumed: u64,
    /// Slots granted and not consumed, over all peers.
    outstanding: u64,
    starving: VecDeque<PeerId>,
    stage: Vec<Stage>,
    stage_free: Vec<u32>,
    sends: IdMap<u64, Send>,
    next_send: u64,
    reads: IdMap<u64, Read>,
    next_read: u64,
    /// Registrations of the application's buffers ([`regs`]): in use, or cached.
    mems: Vec<Option<regs::Reg<F::Mem>>>,
    mems_free: Vec<usize>,
    reg_cached: Vec<usize>,
    reg_clock: u64,
    done: VecDeque<TagCompletion>,
    wcs: Vec<Completion>,
    /// `progress`'s copy of `busy`.
    scratch: Vec<PeerId>,
    stats: TagStats,
    rma: rma::Rmas<F::Conn, F::Region>,
    /// Peers with rendezvous sends of ours not yet ended (their buffers registered),
    /// and how many: watched, so that a peer that goes fails them.
    rndv_peers: IdMap<PeerId, u32>,
    /// Peers that started a multi-slot message (and may have finished it since):
    /// watched, so that a receive such a message matched fails if its sender goes. A
    /// set: a peer that starts many messages between two looks is in it once.
    assembling: IdSet<PeerId>,
}

impl<F: Fabric> std::fmt::Debug for Engine<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("local", &self.local)
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish()
    }
}

fn fabric<E: std::fmt::Display>(e: E) -> TagError {
    TagError::Fabric(e.to_string())
}

impl<F: Fabric> Engine<F> {
    /// Opens a tagged endpoint at `local` (the node's address and a service number
    /// nothing else listens on).
    pub fn new(mut fab: F, cfg: Config, local: PeerAddr) -> Result<Engine<F>, TagError> {
        cfg.check().map_err(TagError::Invalid)?;
        let local = PeerAddr::new(local.ip, local.service);
        let (ring, base, ip) = fab
            .open(cfg.endpoint_len(), cfg.slot, cfg.slots)
            .map_err(fabric)?;
        let ep = fab.mem_id(&ring);
        let credits = fab
            .read_token(&ring, cfg.credits_off(), cfg.credits_len())
            .map_err(fabric)?;
        let mut reply = Vec::with_capacity(20);
        reply.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
        reply.extend_from_slice(&ip.to_le_bytes());
        reply.extend_from_slice(&cfg.slot.to_le_bytes());
        reply.extend_from_slice(&credits.to_le_bytes());
        reply.extend_from_slice(&cfg.eager_max.to_le_bytes());
        fab.listen(local.service, &reply).map_err(fabric)?;
        Ok(Engine {
            fab,
            cfg,
            local,
            ep,
            base,
            _ring: ring,
            peers: Vec::new(),
            by_addr: HashMap::new(),
            busy: IdSet::default(),
            inbound: IdMap::default(),
            tagged: Matcher::new(),
            untagged: Matcher::new(),
            claims: IdMap::default(),
            consumed: 0,
            outstanding: 0,
            starving: VecDeque::new(),
            stage: vec![Stage::Free; cfg.stage as usize],
            stage_free: (0..cfg.stage).rev().collect(),
            sends: IdMap::default(),
            next_send: 1,
            reads: IdMap::default(),
            next_read: 1,
            mems: Vec::new(),
            mems_free: Vec::new(),
            reg_cached: Vec::new(),
            reg_clock: 0,
            done: VecDeque::new(),
            wcs: Vec::new(),
            scratch: Vec::new(),
            stats: TagStats::default(),
            rma: rma::Rmas::default(),
            rndv_peers: IdMap::default(),
            assembling: IdSet::default(),
        })
    }

    /// This endpoint's address.
    pub fn local(&self) -> PeerAddr {
        self.local
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> TagStats {
        self.stats
    }

    pub fn fabric(&self) -> &F {
        &self.fab
    }

    pub fn fabric_mut(&mut self) -> &mut F {
        &mut self.fab
    }

    /// Peers known (inserted or heard from).
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// Receives posted and messages waiting (tagged and untagged together).
    pub fn queued(&self) -> (usize, usize) {
        (
            self.tagged.posted() + self.untagged.posted(),
            self.tagged.unexpected() + self.untagged.unexpected(),
        )
    }

    /// The peer at `addr` (entered on first use; connections are made when needed).
    /// An IPv4-mapped IPv6 address names the IPv4 peer ([`PeerAddr::new`]).
    pub fn peer(&mut self, addr: PeerAddr) -> PeerId {
        let addr = PeerAddr::new(addr.ip, addr.service);
        if let Some(&p) = self.by_addr.get(&addr) {
            return p;
        }
        let id = PeerId(self.peers.len() as u32);
        self.peers.push(Peer {
            addr,
            out: None,
            ready: false,
            failed: false,
            error: None,
            ring_ip: 0,
            eager_max: 0,
            credit_token: 0,
            credit_number: 0,
            sent: 0,
            limit: 0,
            read_ahead: u64::MAX,
            credit_inflight: false,
            waiting: false,
            credit_at: 0,
            credit_backoff: CREDIT_BACKOFF_MIN,
            txq: VecDeque::new(),
            reads: Vec::new(),
            inbound: None,
            in_number: 0,
            credit_entry: 0,
            consumed: 0,
            granted: 0,
            assembly: None,
        });
        self.by_addr.insert(addr, id);
        id
    }

    /// The address of a peer.
    pub fn peer_addr(&self, p: PeerId) -> Option<PeerAddr> {
        self.peers.get(p.0 as usize).map(|p| p.addr)
    }

    /// Why a peer cannot be reached (its sends complete `Unreachable`): `None` while it
    /// can, or when the device gave no reason.
    pub fn peer_error(&self, p: PeerId) -> Option<&str> {
        self.peers.get(p.0 as usize)?.error.as_deref()
    }

    /// Sends `len` bytes at `buf` to `dest`, tagged (`Some(tag)`) or not, with the
    /// sender's immediate `data` if any; `context` names it in its completion.
    /// `inject`: the bytes are copied before this returns (the buffer is free at once).
    ///
    /// # Safety
    /// Without `inject`, the `len` bytes at `buf` stay valid and unchanged until the
    /// send completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send(
        &mut self,
        dest: PeerId,
        tag: Option<u64>,
        data: Option<u64>,
        buf: *const u8,
        len: u64,
        context: u64,
        inject: bool,
    ) -> Result<(), TagError> {
        if dest.0 as usize >= self.peers.len() {
            return Err(TagError::Invalid(format!("no peer {}", dest.0)));
        }
        if len > u64::from(u32::MAX) {
            return Err(TagError::Invalid(format!("a message of {len} bytes")));
        }
        if self.peers[dest.0 as usize].failed {
            return Err(TagError::Fabric(format!(
                "{} cannot be reached",
                self.peers[dest.0 as usize].addr
            )));
        }
        let owned = inject.then(|| {
            // SAFETY: the caller's contract: `len` bytes at `buf`.
            unsafe { std::slice::from_raw_parts(buf, len as usize) }.to_vec()
        });
        let id = self.next_send;
        self.next_send += 1;
        self.sends.insert(
            id,
            Send {
                context,
                dest,
                tagged: tag.is_some(),
                tag: tag.unwrap_or(0),
                data,
                buf,
                len,
                owned,
                rndv: None,
                slots: 1,
                posted: 0,
                inflight: 0,
                failed: None,
            },
        );
        self.peers[dest.0 as usize].txq.push_back(Tx::Send(id));
        self.busy.insert(dest);
        self.push(dest);
        Ok(())
    }

    /// Posts a receive of at most `len` bytes into `buf` for what `sel` selects,
    /// tagged or untagged; it takes a waiting message at once if one is selected.
    ///
    /// # Safety
    /// The `len` bytes at `buf` stay valid, and are not read or written by the caller,
    /// until the receive completes.
    pub unsafe fn recv(
        &mut self,
        sel: Selector,
        tagged: bool,
        buf: *mut u8,
        len: u64,
        context: u64,
    ) -> Result<(), TagError> {
        let r = Recv { context, buf, len };
        let m = self.matcher(tagged);
        if let Posted::Matched(m) = m.post(sel, r) {
            self.deliver(m.recv, m.info, tagged, m.msg);
        }
        Ok(())
    }

    /// The first waiting message `sel` selects, left waiting (`FI_PEEK`,
    /// `MPI_Iprobe`).
    pub fn peek(&self, sel: &Selector, tagged: bool) -> Option<MsgInfo> {
        let m = if tagged { &self.tagged } else { &self.untagged };
        m.peek(sel).map(|(_, info, _)| *info)
    }

    /// The first waiting message `sel` selects, claimed for `context`: only
    /// [`Engine::recv_claimed`] or [`Engine::discard`] with that context take it
    /// (`FI_PEEK | FI_CLAIM`, `MPI_Improbe`).
    pub fn claim(&mut self, sel: &Selector, tagged: bool, context: u64) -> Option<MsgInfo> {
        if self.claims.contains_key(&context) {
            return None;
        }
        let m = self.matcher(tagged);
        let (id, info) = m.claim(sel)?;
        self.claims.insert(context, (tagged, id));
        Some(info)
    }

    /// Receives the message claimed for `context` into `buf` (`FI_CLAIM`,
    /// `MPI_Mrecv`); its completion carries `context`.
    ///
    /// # Safety
    /// As [`Engine::recv`].
    pub unsafe fn recv_claimed(
        &mut self,
        context: u64,
        buf: *mut u8,
        len: u64,
    ) -> Result<(), TagError> {
        let (tagged, id) = self
            .claims
            .remove(&context)
            .ok_or_else(|| TagError::Invalid("no message claimed with that context".into()))?;
        let m = self.matcher(tagged);
        let (info, msg) = m.take_claimed(id).expect("claimed");
        self.deliver(Recv { context, buf, len }, info, tagged, msg);
        Ok(())
    }

    /// Drops the message claimed for `context` (`FI_CLAIM | FI_DISCARD`): its sender's
    /// send completes as if it had been received. Returns its header.
    pub fn discard(&mut self, context: u64) -> Result<MsgInfo, TagError> {
        let (tagged, id) = self
            .claims
            .remove(&context)
            .ok_or_else(|| TagError::Invalid("no message claimed with that context".into()))?;
        let m = self.matcher(tagged);
        let (info, msg) = m.take_claimed(id).expect("claimed");
        if let Parked::Rts { cookie, .. } = msg {
            self.queue_fin(info.src, cookie, 0, 0);
        }
        Ok(info)
    }

    /// Cancels the posted receive with `context`: it completes `Cancelled`. False when
    /// no posted receive has that context (it matched already, or never was).
    pub fn cancel(&mut self, context: u64) -> bool {
        for tagged in [true, false] {
            let m = self.matcher(tagged);
            if let Some(r) = m.cancel_where(|r| r.context == context) {
                self.done.push_back(TagCompletion {
                    context: r.context,
                    op: TagOp::Recv,
                    tagged,
                    status: TagStatus::Cancelled,
                    len: 0,
                    olen: 0,
                    tag: 0,
                    data: None,
                    src: None,
                });
                return true;
            }
        }
        false
    }

    /// The tagged or the untagged messages' matcher.
    fn matcher(&mut self, tagged: bool) -> &mut Matcher<Recv, Parked> {
        if tagged {
            &mut self.tagged
        } else {
            &mut self.untagged
        }
    }

    /// Takes up to `out.len()` completions (after a turn of progress).
    pub fn poll(&mut self, out: &mut [TagCompletion]) -> usize {
        self.progress();
        let n = out.len().min(self.done.len());
        for (o, c) in out.iter_mut().zip(self.done.drain(..n)) {
            *o = c;
        }
        n
    }

    /// The oldest completion waiting, without a turn of progress.
    pub fn take(&mut self) -> Option<TagCompletion> {
        self.done.pop_front()
    }

    /// Completions waiting to be polled.
    pub fn ready(&self) -> usize {
        self.done.len()
    }

    /// Nothing of ours is in flight or owed: every send and one-sided operation
    /// completed, no rendezvous read is under way, nothing waits for a peer (a FIN, a
    /// credit), and every staging slot's request was acknowledged. Completions may
    /// still wait to be polled.
    pub fn idle(&self) -> bool {
        self.sends.is_empty()
            && self.reads.is_empty()
            && self.busy.is_empty()
            && self.rma.ops.is_empty()
            && self.stage_free.len() == self.stage.len()
    }

    /// One turn: new connections, the ring, the device's completions, queued sends.
    pub fn progress(&mut self) {
        self.fab.drive();
        self.accept_all();
        self.consume_ring();
        self.completions();
        // The busy set changes as peers are pushed: walk a copy, kept between turns
        // (no allocation a turn).
        let mut busy = std::mem::take(&mut self.scratch);
        busy.extend(self.busy.iter().copied());
        for &p in &busy {
            self.push(p);
        }
        busy.clear();
        self.scratch = busy;
        self.rma_progress();
        self.watch_peers();
    }

    /// A peer that holds rendezvous messages of ours and whose connection went (it
    /// closed, or died) fails them: their FINs will never come.
    fn watch_peers(&mut self) {
        if !self.assembling.is_empty() {
            self.watch_assemblies();
        }
        if self.rndv_peers.is_empty() {
            return;
        }
        let gone: Vec<PeerId> = self
            .rndv_peers
            .keys()
            .copied()
            .filter(|&p| {
                let peer = &self.peers[p.0 as usize];
                peer.ready
                    && peer
                        .out
                        .as_ref()
                        .is_some_and(|c| !self.fab.state(c).is_up())
            })
            .collect();
        for p in gone {
            let peer = &mut self.peers[p.0 as usize];
            peer.ready = false;
            peer.failed = true;
            peer.error = Some(format!("{}: its connection closed", peer.addr));
            self.fail_peer(p);
        }
    }

    /// A peer whose connection to our ring went in the middle of a multi-slot message
    /// will not send the rest: a receive the message matched fails (`Unreachable`),
    /// and what came of an unmatched one is dropped (it was never visible).
    fn watch_assemblies(&mut self) {
        let ended: Vec<PeerId> = self
            .assembling
            .iter()
            .copied()
            .filter(|p| {
                let peer = &self.peers[p.0 as usize];
                !(peer.assembly.is_some()
                    && peer
                        .inbound
                        .as_ref()
                        .is_some_and(|c| self.fab.state(c).is_up()))
            })
            .collect();
        for p in ended {
            self.assembling.remove(&p);
            if let Some(a) = self.peers[p.0 as usize].assembly.take() {
                if let Ok(r) = a.into {
                    self.complete_recv(r, a.info, a.tagged, 0, TagStatus::Unreachable);
                }
            }
        }
    }

    // ---- receiving --------------------------------------------------------------

    fn accept_all(&mut self) {
        while let Some(a) = self.fab.accept() {
            let Some(addr) = parse_hello(&a.hello) else {
                self.stats.bad_hello += 1;
                continue;
            };
            // Its entry in the credit table: a free one of its bucket.
            let bucket = self.cfg.credits_off() + self.cfg.bucket(a.number);
            let Some(entry) = (0..4)
                .map(|i| bucket + 16 * i)
                .find(|&e| self.load_u64(e) == 0)
            else {
                self.stats.credit_table_full += 1;
                continue;
            };
            let p = self.peer(addr);
            // A peer that connects again starts over (it restarted): what the old
            // connection held is given back.
            if self.peers[p.0 as usize].inbound.is_some() {
                let old = &self.peers[p.0 as usize];
                let (held, number, at) =
                    (old.granted - old.consumed, old.in_number, old.credit_entry);
                self.outstanding -= held;
                self.inbound.remove(&number);
                self.store_u64(at, 0);
                self.store_u64(at + 8, 0);
            }
            let peer = &mut self.peers[p.0 as usize];
            self.inbound.insert(a.number, p);
            peer.inbound = Some(a.conn);
            peer.in_number = a.number;
            peer.credit_entry = entry;
            peer.consumed = 0;
            peer.granted = 0;
            if let Some(old) = peer.assembly.take() {
                // It restarted in the middle of a message: a receive that message
                // matched fails.
                if let Ok(r) = old.into {
                    self.complete_recv(r, old.info, old.tagged, 0, TagStatus::Unreachable);
                }
            }
            self.store_u64(entry + 8, 0);
            self.store_u64(entry, u64::from(a.number));
            self.grant(p);
        }
    }

    /// Slots each connected peer may hold: the ring shared out, at least one.
    fn share(&self) -> u64 {
        let n = self.inbound.len().max(1) as u64;
        (u64::from(self.cfg.slots) / n).clamp(1, u64::from(self.cfg.burst))
    }

    /// Tops up `p`'s grant to its share while the ring has room; else it waits in line.
    fn grant(&mut self, p: PeerId) {
        let share = self.share();
        let room = u64::from(self.cfg.slots) - self.outstanding;
        let peer = &mut self.peers[p.0 as usize];
        let held = peer.granted - peer.consumed;
        if held >= share {
            return;
        }
        let give = (share - held).min(room);
        if give == 0 {
            if held == 0 && !self.starving.contains(&p) {
                self.starving.push_back(p);
            }
            return;
        }
        peer.granted += give;
        self.outstanding += give;
        self.write_credit(p);
    }

    fn write_credit(&mut self, p: PeerId) {
        let peer = &self.peers[p.0 as usize];
        self.store_u64(peer.credit_entry + 8, peer.granted);
    }

    /// The 8-byte word at `at` of the engine's endpoint (8-aligned, inside it).
    fn load_u64(&self, at: u64) -> u64 {
        debug_assert!(at % 8 == 0 && at + 8 <= self.cfg.endpoint_len());
        // SAFETY: an aligned word inside the engine's endpoint (callers pass offsets of
        // the credit table); the worker only reads it, whole.
        unsafe {
            (*(self.base.add(at as usize) as *const std::sync::atomic::AtomicU64))
                .load(std::sync::atomic::Ordering::Acquire)
        }
    }

    fn store_u64(&self, at: u64, v: u64) {
        debug_assert!(at % 8 == 0 && at + 8 <= self.cfg.endpoint_len());
        // SAFETY: as `load_u64`; an aligned store a peer's read sees whole.
        unsafe {
            (*(self.base.add(at as usize) as *const std::sync::atomic::AtomicU64))
                .store(v, std::sync::atomic::Ordering::Release)
        }
    }

    fn consume_ring(&mut self) {
        let (ring, stride) = (self.cfg.ring_len(), u64::from(self.cfg.slot));
        while let Some(a) = self.fab.arrival() {
            self.consumed += 1;
            self.stats.slots += 1;
            if a.ea >= ring || a.ea % stride != 0 || u64::from(a.len) > stride {
                // Not the ring instruction's doing: nothing to read.
                self.stats.bad_header += 1;
                continue;
            }
            let p = match self.inbound.get(&a.conn) {
                Some(&p) => p,
                None => {
                    // Accepted since our last look.
                    self.accept_all();
                    match self.inbound.get(&a.conn) {
                        Some(&p) => p,
                        None => {
                            self.stats.bad_source += 1;
                            continue;
                        }
                    }
                }
            };
            // SAFETY: a slot inside the engine's endpoint; its message completed (its
            // event came after the store) and nobody writes it until it is granted
            // again, after this.
            let slot =
                unsafe { std::slice::from_raw_parts(self.base.add(a.ea as usize), a.len as usize) };
            self.consume_slot(p, slot);
        }
    }

    fn consume_slot(&mut self, p: PeerId, slot: &[u8]) {
        if self.peers[p.0 as usize].assembly.is_some() {
            self.continue_assembly(p, slot);
            self.regrant(p);
            return;
        }
        let stride = self.cfg.slot as usize;
        let eager_max = u64::from(self.cfg.eager_max);
        let h = match Header::decode(slot, eager_max) {
            // A one-slot eager message fills its slot to its length; a longer one fills
            // its first slot, and whole slots follow.
            Ok(h)
                if h.kind != Kind::Eager
                    || HEADER as u64 + h.len == slot.len() as u64
                    || (HEADER as u64 + h.len > stride as u64 && slot.len() == stride) =>
            {
                h
            }
            _ => {
                self.stats.bad_header += 1;
                return;
            }
        };
        let peer = &mut self.peers[p.0 as usize];
        if h.seq != peer.consumed as u32 || peer.consumed >= peer.granted {
            self.stats.bad_sequence += 1;
            return;
        }
        peer.consumed += 1;
        self.outstanding -= 1;
        if h.credit != 0 {
            self.take_credit(p, h.credit);
        }
        let tagged = h.flags & wire::TAGGED != 0;
        let info = MsgInfo {
            src: p,
            tag: if tagged { h.tag } else { 0 },
            len: h.len,
            data: (h.flags & wire::DATA != 0).then_some(h.data),
        };
        match h.kind {
            Kind::Eager if HEADER as u64 + h.len > stride as u64 => {
                // The first slot of several: matched now (a sender's slots come in
                // order, so nothing of its overtakes it), its bytes straight into the
                // receive, or kept until whole.
                self.stats.eager_rx += 1;
                let first = &slot[HEADER..];
                let into = match self.matcher(tagged).take_posted(&info) {
                    Some(r) => {
                        copy_into(&r, 0, first);
                        Ok(r)
                    }
                    None => {
                        let mut v = Vec::with_capacity(h.len as usize);
                        v.extend_from_slice(first);
                        Err(v)
                    }
                };
                self.assembling.insert(p);
                self.peers[p.0 as usize].assembly = Some(Box::new(Assembly {
                    info,
                    tagged,
                    into,
                    got: first.len() as u64,
                }));
            }
            Kind::Eager => {
                self.stats.eager_rx += 1;
                let payload = &slot[HEADER..HEADER + h.len as usize];
                let m = self.matcher(tagged);
                match m.take_posted(&info) {
                    Some(r) => self.place_eager(r, info, tagged, payload),
                    None => {
                        m.park(info, Parked::Eager(payload.to_vec()));
                    }
                }
            }
            Kind::Rts => {
                self.stats.rndv_rx += 1;
                let msg = Parked::Rts {
                    token: h.token,
                    cookie: h.cookie,
                };
                let m = self.matcher(tagged);
                match m.take_posted(&info) {
                    Some(r) => self.deliver(r, info, tagged, msg),
                    None => {
                        m.park(info, msg);
                    }
                }
            }
            Kind::Fin => self.fin(p, h.cookie, h.token),
        }
        self.regrant(p);
    }

    /// A later slot of `p`'s multi-slot eager message: its bytes, and the message done
    /// when whole. A slot that does not fit (only a peer writing garbage sends one)
    /// ends the message: a receive it matched completes `Truncated` with what came.
    fn continue_assembly(&mut self, p: PeerId, slot: &[u8]) {
        let peer = &mut self.peers[p.0 as usize];
        if peer.consumed >= peer.granted {
            self.stats.bad_sequence += 1;
            return;
        }
        peer.consumed += 1;
        self.outstanding -= 1;
        let a = peer.assembly.as_mut().expect("assembling");
        let left = a.info.len - a.got;
        let want = left.min(u64::from(self.cfg.slot));
        if slot.len() as u64 != want {
            self.stats.bad_header += 1;
            let a = self.peers[p.0 as usize]
                .assembly
                .take()
                .expect("assembling");
            if let Ok(r) = a.into {
                let n = a.got.min(r.len);
                self.complete_recv(r, a.info, a.tagged, n, TagStatus::Truncated);
            }
            return;
        }
        match &mut a.into {
            Ok(r) => copy_into(r, a.got, slot),
            Err(v) => v.extend_from_slice(slot),
        }
        a.got += want;
        if a.got < a.info.len {
            return;
        }
        let a = *self.peers[p.0 as usize]
            .assembly
            .take()
            .expect("assembling");
        match a.into {
            Ok(r) => {
                let n = a.info.len.min(r.len);
                let st = if n < a.info.len {
                    TagStatus::Truncated
                } else {
                    TagStatus::Success
                };
                self.complete_recv(r, a.info, a.tagged, n, st);
            }
            // A receive posted while it came takes it now, else it waits.
            Err(v) => {
                let m = self.matcher(a.tagged);
                match m.take_posted(&a.info) {
                    Some(r) => self.place_eager(r, a.info, a.tagged, &v),
                    None => {
                        m.park(a.info, Parked::Eager(v));
                    }
                }
            }
        }
    }

    /// A slot of `p`'s is read: the peer may use it again (or one waiting in line).
    fn regrant(&mut self, p: PeerId) {
        while let Some(&q) = self.starving.front() {
            if self.outstanding >= u64::from(self.cfg.slots) {
                break;
            }
            self.starving.pop_front();
            self.grant(q);
        }
        self.grant(p);
    }

    /// A receive takes a message: copies an eager one, reads a rendezvous one.
    fn deliver(&mut self, r: Recv, info: MsgInfo, tagged: bool, msg: Parked) {
        match msg {
            Parked::Eager(bytes) => {
                self.place_eager(r, info, tagged, &bytes);
            }
            Parked::Rts { token, cookie } => {
                let id = self.next_read;
                self.next_read += 1;
                let n = info.len.min(r.len);
                self.reads.insert(
                    id,
                    Read {
                        peer: info.src,
                        recv: r,
                        info,
                        tagged,
                        token,
                        cookie,
                        n,
                        mem: None,
                    },
                );
                if n == 0 {
                    self.read_done(id, WcStatus::Success);
                    return;
                }
                self.peers[info.src.0 as usize].reads.push(id);
                self.busy.insert(info.src);
                self.push(info.src);
            }
        }
    }

    fn place_eager(&mut self, r: Recv, info: MsgInfo, tagged: bool, payload: &[u8]) {
        let n = (payload.len() as u64).min(r.len);
        copy_into(&r, 0, &payload[..n as usize]);
        let st = if n < info.len {
            TagStatus::Truncated
        } else {
            TagStatus::Success
        };
        self.complete_recv(r, info, tagged, n, st);
    }

    /// Receive `r` completes with `n` bytes of the message `info` in its buffer.
    fn complete_recv(&mut self, r: Recv, info: MsgInfo, tagged: bool, n: u64, status: TagStatus) {
        self.done.push_back(TagCompletion {
            context: r.context,
            op: TagOp::Recv,
            tagged,
            status,
            len: n,
            olen: info.len,
            tag: info.tag,
            data: info.data,
            src: Some(info.src),
        });
    }

    fn read_done(&mut self, id: u64, status: WcStatus) {
        let Some(rd) = self.reads.remove(&id) else {
            return;
        };
        if let Some((m, _)) = rd.mem {
            self.unpin(m);
        }
        let ok = status == WcStatus::Success;
        self.done.push_back(TagCompletion {
            context: rd.recv.context,
            op: TagOp::Recv,
            tagged: rd.tagged,
            status: match status {
                WcStatus::Success if rd.n < rd.info.len => TagStatus::Truncated,
                WcStatus::Success => TagStatus::Success,
                s => TagStatus::Transport(s),
            },
            len: if ok { rd.n } else { 0 },
            olen: rd.info.len,
            tag: rd.info.tag,
            data: rd.info.data,
            src: Some(rd.peer),
        });
        self.queue_fin(rd.peer, rd.cookie, u64::from(!ok), rd.n);
    }

    fn queue_fin(&mut self, p: PeerId, cookie: u64, status: u64, took: u64) {
        // A FIN goes ahead of queued sends: it frees the peer's buffer.
        self.peers[p.0 as usize].txq.push_front(Tx::Fin {
            cookie,
            status,
            took,
        });
        self.busy.insert(p);
        self.push(p);
    }

    /// A FIN from `p` for our send `cookie`.
    fn fin(&mut self, p: PeerId, cookie: u64, status: u64) {
        let ok = self
            .sends
            .get(&cookie)
            .is_some_and(|s| s.dest == p && s.rndv.is_some());
        if !ok {
            self.stats.bad_fin += 1;
            return;
        }
        let s = self.sends.remove(&cookie).expect("checked");
        self.end_rndv(&s);
        let status = if status == 0 {
            TagStatus::Success
        } else {
            TagStatus::Refused
        };
        self.complete_send(&s, status);
    }

    /// A rendezvous send is over: its token is cancelled, its buffer deregistered.
    fn end_rndv(&mut self, s: &Send) {
        if let Some((token, mem)) = s.rndv {
            if let Some(n) = self.rndv_peers.get_mut(&s.dest) {
                *n -= 1;
                if *n == 0 {
                    self.rndv_peers.remove(&s.dest);
                }
            }
            self.fab.cancel_token(token);
            self.unpin(mem);
        }
    }

    fn complete_send(&mut self, s: &Send, status: TagStatus) {
        self.done.push_back(TagCompletion {
            context: s.context,
            op: TagOp::Send,
            tagged: s.tagged,
            status,
            len: if status == TagStatus::Success {
                s.len
            } else {
                0
            },
            olen: s.len,
            tag: s.tag,
            data: s.data,
            src: None,
        });
    }

    // ---- the device's completions ---------------------------------------------

    fn completions(&mut self) {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        self.fab.poll(&mut wcs);
        for wc in &wcs {
            let v = wc.wr_id & !WR_KIND;
            match wc.wr_id & WR_KIND {
                WR_STAGE => self.stage_done(v as u32, wc.status),
                WR_CREDIT => self.credit_done(v as u32, wc.status),
                WR_READ => self.read_done(v, wc.status),
                rma::WR_RMA => self.rma_done(v, wc.status),
                _ => {}
            }
        }
        self.wcs = wcs;
    }

    fn stage_done(&mut self, s: u32, status: WcStatus) {
        let Some(&what) = self.stage.get(s as usize) else {
            return;
        };
        self.stage[s as usize] = Stage::Free;
        self.stage_free.push(s);
        match what {
            Stage::Eager(id) => {
                let Some(send) = self.sends.get_mut(&id) else {
                    return;
                };
                send.inflight -= 1;
                if status != WcStatus::Success {
                    send.failed.get_or_insert(status);
                }
                if send.inflight > 0 || send.posted < send.slots {
                    return; // more of a multi-slot message to come
                }
                let send = self.sends.remove(&id).expect("there");
                let st = match send.failed {
                    None => TagStatus::Success,
                    Some(s) => TagStatus::Transport(s),
                };
                self.complete_send(&send, st);
            }
            Stage::Rts(id) if status != WcStatus::Success => {
                if let Some(send) = self.sends.remove(&id) {
                    self.end_rndv(&send);
                    self.complete_send(&send, TagStatus::Transport(status));
                }
            }
            _ => {}
        }
    }

    fn credit_done(&mut self, s: u32, status: WcStatus) {
        let Some(&Stage::Credit(p)) = self.stage.get(s as usize) else {
            return;
        };
        let off = self.cfg.stage_off(s);
        // Our entry of the bucket read: the one with our connection's number.
        let number = u64::from(self.peers[p.0 as usize].credit_number);
        let v = (0..4)
            .map(|i| off + 16 * i)
            .find(|&e| self.load_u64(e) == number)
            .map_or(0, |e| self.load_u64(e + 8));
        self.stage[s as usize] = Stage::Free;
        self.stage_free.push(s);
        let now = self.fab.now();
        self.peers[p.0 as usize].credit_inflight = false;
        let took = status == WcStatus::Success && self.take_credit(p, v);
        let peer = &mut self.peers[p.0 as usize];
        if took {
            peer.credit_backoff = CREDIT_BACKOFF_MIN;
        } else if status == WcStatus::Success && peer.sent < peer.limit {
            // A read ahead found nothing new yet: read again when the grant runs out.
            peer.read_ahead = peer.limit;
        } else {
            self.stats.credit_stalls += 1;
            peer.credit_at = now + peer.credit_backoff;
            peer.credit_backoff = (peer.credit_backoff * 2).min(CREDIT_BACKOFF_MAX);
        }
        self.busy.insert(p);
    }

    /// `p` grants us `v` slots of its ring in all (its credit word, read or carried
    /// by a slot of its): taken if it says more than we knew and never more than a ring
    /// ahead of what we sent. Whether it was taken.
    fn take_credit(&mut self, p: PeerId, v: u64) -> bool {
        let slots = u64::from(self.cfg.slots);
        let peer = &mut self.peers[p.0 as usize];
        if v <= peer.limit || v > peer.sent + slots {
            return false;
        }
        peer.limit = v;
        peer.waiting = false;
        peer.read_ahead = peer.sent + (v - peer.sent).div_ceil(2);
        if !peer.txq.is_empty() {
            self.busy.insert(p);
        }
        true
    }

    // ---- sending ------------------------------------------------------------------

    /// Moves what `p` has queued as far as its connection, credits and our staging
    /// slots allow.
    fn push(&mut self, p: PeerId) {
        if !self.connect(p) {
            return;
        }
        self.post_reads(p);
        while let Some(&tx) = self.peers[p.0 as usize].txq.front() {
            let peer = &self.peers[p.0 as usize];
            if peer.sent >= peer.limit {
                if !peer.waiting {
                    self.stats.credit_waits += 1;
                    self.peers[p.0 as usize].waiting = true;
                }
                self.read_credit(p);
                return;
            }
            let Some(s) = self.stage_free.pop() else {
                return;
            };
            if !self.post_slot(p, s, tx) {
                self.stage_free.push(s);
                return;
            }
            // A multi-slot eager message stays first in line until its last slot.
            let whole = match tx {
                Tx::Send(id) => self.sends.get(&id).is_none_or(|s| s.posted >= s.slots),
                Tx::Fin { .. } => true,
            };
            let peer = &mut self.peers[p.0 as usize];
            if whole {
                peer.txq.pop_front();
            }
            peer.sent += 1;
            if peer.sent >= peer.read_ahead && peer.sent < peer.limit {
                // Half the grant is used: read the credit word while the rest goes.
                self.read_credit(p);
            }
        }
        let peer = &self.peers[p.0 as usize];
        if peer.txq.is_empty() && peer.reads.is_empty() {
            self.busy.remove(&p);
        }
    }

    /// Whether `p`'s connection is usable; starts it, or notes its failure.
    fn connect(&mut self, p: PeerId) -> bool {
        let i = p.0 as usize;
        if self.peers[i].ready {
            return true;
        }
        if self.peers[i].failed {
            self.fail_peer(p);
            return false;
        }
        if self.peers[i].out.is_none() {
            match self.fab.connect(self.peers[i].addr, &hello(self.local)) {
                Ok(c) => self.peers[i].out = Some(c),
                Err(e) => {
                    self.peers[i].error = Some(e.to_string());
                    self.peers[i].failed = true;
                    self.fail_peer(p);
                    return false;
                }
            }
        }
        let c = self.peers[i].out.as_mut().expect("made");
        match self.fab.state(c) {
            ConnState::Normal => {}
            ConnState::Connecting => return false,
            _ => {
                self.peers[i].failed = true;
                self.fail_peer(p);
                return false;
            }
        }
        let reply = self.fab.reply(c);
        let remote = self.fab.remote_number(c);
        if reply.len() < 24 || reply[..4] != HELLO_MAGIC.to_le_bytes() {
            self.peers[i].failed = true;
            self.fail_peer(p);
            return false;
        }
        let u32_at = |a: usize| u32::from_le_bytes(reply[a..a + 4].try_into().expect("4"));
        let peer = &mut self.peers[i];
        peer.ring_ip = u32_at(4);
        let slot = u32_at(8);
        peer.credit_token = u64::from_le_bytes(reply[12..20].try_into().expect("8"));
        peer.eager_max = u32_at(20);
        peer.credit_number = remote;
        if slot < self.cfg.slot {
            // Its slots are smaller than ours: we cannot send it eager messages of our
            // size. Every engine of a job uses one configuration; refuse the peer.
            peer.failed = true;
            self.fail_peer(p);
            return false;
        }
        peer.ready = true;
        true
    }

    /// Everything queued for an unreachable peer fails.
    fn fail_peer(&mut self, p: PeerId) {
        let peer = &mut self.peers[p.0 as usize];
        peer.txq.clear();
        let reads: Vec<u64> = std::mem::take(&mut peer.reads);
        // Its sends, queued or waiting for their FIN, fail (a rendezvous message may
        // have been read meanwhile: its receiver could not tell us).
        let mut ids: Vec<u64> = self
            .sends
            .iter()
            .filter(|(_, s)| s.dest == p)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable(); // in sending order
        for id in ids {
            let s = self.sends.remove(&id).expect("there");
            self.end_rndv(&s);
            self.complete_send(&s, TagStatus::Unreachable);
        }
        for id in reads {
            if let Some(rd) = self.reads.remove(&id) {
                self.done.push_back(TagCompletion {
                    context: rd.recv.context,
                    op: TagOp::Recv,
                    tagged: rd.tagged,
                    status: TagStatus::Unreachable,
                    len: 0,
                    olen: rd.info.len,
                    tag: rd.info.tag,
                    data: None,
                    src: Some(rd.peer),
                });
            }
        }
        self.busy.remove(&p);
    }

    /// Reads `p`'s credit word (unless a read is in flight or backing off).
    fn read_credit(&mut self, p: PeerId) {
        let now = self.fab.now();
        let peer = &self.peers[p.0 as usize];
        if peer.credit_inflight || now < peer.credit_at {
            return;
        }
        let Some(s) = self.stage_free.pop() else {
            return;
        };
        let wr = Wqe {
            wr_id: WR_CREDIT | u64::from(s),
            opcode: WrOpcode::TokenRead {
                token: peer.credit_token,
                offset: self.cfg.bucket(peer.credit_number),
            },
            flags: WR_SIGNALED,
            remote: Remote::default(),
            len: CREDIT_BUCKET as u32,
            source: Source::None,
            result: Some((self.ep, self.cfg.stage_off(s))),
        };
        let c = peer.out.as_ref().expect("ready");
        if !self.fab.post(c, &wr) {
            self.stage_free.push(s);
            return;
        }
        self.stage[s as usize] = Stage::Credit(p);
        self.peers[p.0 as usize].credit_inflight = true;
        self.stats.credit_reads += 1;
    }

    /// Posts the rendezvous reads waiting for `p`'s connection.
    fn post_reads(&mut self, p: PeerId) {
        let ids = std::mem::take(&mut self.peers[p.0 as usize].reads);
        let mut left = Vec::new();
        for id in ids {
            if !self.post_read(p, id) {
                left.push(id);
            }
        }
        self.peers[p.0 as usize].reads = left;
    }

    fn post_read(&mut self, p: PeerId, id: u64) -> bool {
        let Some(rd) = self.reads.get(&id) else {
            return true;
        };
        let (buf, n, token) = (rd.recv.buf, rd.n, rd.token);
        let (m, off) = match rd.mem {
            Some(m) => m,
            None => {
                // SAFETY: the receive's contract: its buffer is ours until it completes,
                // and the registration's use ends before that (read_done).
                match unsafe { self.pin(buf, n as usize) } {
                    Ok(m) => {
                        self.reads.get_mut(&id).expect("there").mem = Some(m);
                        m
                    }
                    Err(()) => {
                        self.read_done(id, WcStatus::LocalProtectionError);
                        return true;
                    }
                }
            }
        };
        let local = self.fab.mem_id(self.reg(m));
        let wr = Wqe {
            wr_id: WR_READ | id,
            opcode: WrOpcode::TokenRead { token, offset: 0 },
            flags: WR_SIGNALED,
            remote: Remote::default(),
            len: n as u32,
            source: Source::None,
            result: Some((local, off)),
        };
        let c = self.peers[p.0 as usize].out.as_ref().expect("ready");
        self.fab.post(c, &wr)
    }

    /// Fills staging slot `s` with `tx` and posts it to `p`'s ring.
    fn post_slot(&mut self, p: PeerId, s: u32, tx: Tx) -> bool {
        let peer = &self.peers[p.0 as usize];
        let seq = peer.sent as u32;
        // What we grant it rides along: traffic both ways needs no credit reads.
        let credit = if peer.inbound.is_some() {
            peer.granted
        } else {
            0
        };
        let mut h = Header {
            kind: Kind::Fin,
            flags: 0,
            service: self.local.service,
            seq,
            tag: 0,
            data: 0,
            len: 0,
            token: 0,
            cookie: 0,
            credit,
        };
        let mut payload: Option<(*const u8, usize)> = None;
        let stage = match tx {
            Tx::Fin {
                cookie,
                status,
                took,
            } => {
                h.cookie = cookie;
                h.token = status;
                h.len = took;
                Stage::Fin
            }
            Tx::Send(id) => {
                let eager_max = self.cfg.eager_max.min(self.peers[p.0 as usize].eager_max);
                let slot = self.cfg.slot;
                let send = self.sends.get_mut(&id).expect("queued");
                h.flags = if send.tagged { wire::TAGGED } else { 0 }
                    | if send.data.is_some() { wire::DATA } else { 0 };
                h.tag = send.tag;
                h.data = send.data.unwrap_or(0);
                h.len = send.len;
                let src = send.owned.as_ref().map_or(send.buf, |v| v.as_ptr());
                if send.posted > 0 {
                    // A later slot of a multi-slot eager message: whole slots of its
                    // bytes, no header.
                    let at = u64::from(slot) * u64::from(send.posted) - HEADER as u64;
                    let n = (send.len - at).min(u64::from(slot));
                    // SAFETY: `at + n <= len`: inside the send's bytes.
                    payload = Some((unsafe { src.add(at as usize) }, n as usize));
                    let ok = self.post_stage(p, s, None, payload, Stage::Eager(id));
                    if ok {
                        self.slot_posted(id);
                    }
                    return ok;
                }
                if send.len <= u64::from(eager_max) {
                    h.kind = Kind::Eager;
                    send.slots = eager_slots(slot, send.len);
                    let first = (u64::from(slot) - HEADER as u64).min(send.len);
                    payload = Some((src, first as usize));
                    Stage::Eager(id)
                } else {
                    h.kind = Kind::Rts;
                    h.cookie = id;
                    if send.rndv.is_none() {
                        let (buf, len) = (
                            send.owned.as_ref().map_or(send.buf, |v| v.as_ptr()),
                            send.len,
                        );
                        // SAFETY: the send's contract: its bytes stay until it
                        // completes, and the registration's use ends before that.
                        let (m, off) = match unsafe { self.pin(buf as *mut u8, len as usize) } {
                            Ok(m) => m,
                            Err(()) => return self.fail_send(p, id),
                        };
                        // (Not `self.reg(m)`: `read_token` borrows the fabric mutably.)
                        let mem = &self.mems[m].as_ref().expect("pinned").mem;
                        let token = match self.fab.read_token(mem, off, len) {
                            Ok(t) => t,
                            Err(_) => {
                                self.unpin(m);
                                return self.fail_send(p, id);
                            }
                        };
                        self.sends.get_mut(&id).expect("queued").rndv = Some((token, m));
                        *self.rndv_peers.entry(p).or_default() += 1;
                    }
                    h.token = self.sends[&id].rndv.expect("made").0;
                    Stage::Rts(id)
                }
            }
        };
        let ok = self.post_stage(p, s, Some(h), payload, stage);
        if let (true, Tx::Send(id)) = (ok, tx) {
            self.slot_posted(id);
        }
        ok
    }

    /// A slot of send `id` went out.
    fn slot_posted(&mut self, id: u64) {
        let send = self.sends.get_mut(&id).expect("queued");
        send.posted += 1;
        send.inflight += 1;
    }

    /// Fills staging slot `s` with the header `h` (if any) and `payload` and posts it to
    /// `p`'s ring; it holds `stage` until its request completes.
    fn post_stage(
        &mut self,
        p: PeerId,
        s: u32,
        h: Option<Header>,
        payload: Option<(*const u8, usize)>,
        stage: Stage,
    ) -> bool {
        let off = self.cfg.stage_off(s) as usize;
        // SAFETY: the staging slot lies inside the engine's endpoint and is ours until
        // its request completes; the header and payload fill at most `slot` bytes.
        let slot =
            unsafe { std::slice::from_raw_parts_mut(self.base.add(off), self.cfg.slot as usize) };
        let mut len = 0;
        if let Some(h) = h {
            h.encode(slot);
            len = HEADER;
        }
        if let Some((src, n)) = payload {
            if n > 0 {
                // SAFETY: the send's bytes (its contract, or our own copy).
                unsafe { std::ptr::copy_nonoverlapping(src, slot[len..].as_mut_ptr(), n) };
            }
            len += n;
        }
        let peer = &self.peers[p.0 as usize];
        let wr = Wqe {
            wr_id: WR_STAGE | u64::from(s),
            opcode: WrOpcode::Invoke {
                ip: peer.ring_ip,
                mask: 0,
                returns: false,
            },
            flags: WR_SIGNALED,
            remote: Remote::default(),
            len: len as u32,
            source: Source::Endpoint {
                id: self.ep,
                offset: off as u64,
            },
            result: None,
        };
        let c = peer.out.as_ref().expect("ready");
        if !self.fab.post(c, &wr) {
            return false;
        }
        self.stage[s as usize] = stage;
        true
    }

    /// A send that cannot start (its buffer cannot be registered): it fails, and the
    /// slot it would have taken is not used. Returns false (nothing posted) after
    /// taking it off the queue.
    fn fail_send(&mut self, p: PeerId, id: u64) -> bool {
        let peer = &mut self.peers[p.0 as usize];
        if let Some(at) = peer
            .txq
            .iter()
            .position(|t| matches!(t, Tx::Send(i) if *i == id))
        {
            peer.txq.remove(at);
        }
        if let Some(s) = self.sends.remove(&id) {
            self.complete_send(&s, TagStatus::Transport(WcStatus::LocalProtectionError));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_hello_is_the_12_bytes_engines_before_ipv6_sent() {
        let a = PeerAddr::new([10, 0, 0, 3], 999);
        let mut old = Vec::new();
        old.extend_from_slice(&0x6464_7467u32.to_le_bytes());
        old.extend_from_slice(&[10, 0, 0, 3]);
        old.extend_from_slice(&999u32.to_le_bytes());
        assert_eq!(hello(a), old);
        assert_eq!(parse_hello(&old), Some(a));
        // An IPv4-mapped address is the IPv4 endpoint, in its hello too.
        let mapped = PeerAddr::new("::ffff:10.0.0.3".parse::<IpAddr>().unwrap(), 999);
        assert_eq!(mapped, a);
        assert_eq!(hello(mapped), old);
    }

    #[test]
    fn an_ipv6_hello_carries_the_whole_address() {
        let a = PeerAddr::new("fd77::1:2".parse::<IpAddr>().unwrap(), 18700);
        let h = hello(a);
        assert_eq!(h.len(), 24);
        assert_eq!(&h[..4], b"6tdd");
        assert_eq!(
            &h[4..20],
            &[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2]
        );
        assert_eq!(&h[20..], &18700u32.to_le_bytes());
        assert_eq!(parse_hello(&h), Some(a));
        assert_eq!(a.to_string(), "[fd77::1:2]:18700");
        assert_eq!(PeerAddr::new([10, 0, 0, 3], 7).to_string(), "10.0.0.3:7");
        // Later fields after it are ignored.
        let mut longer = h.clone();
        longer.extend_from_slice(&[1, 2, 3]);
        assert_eq!(parse_hello(&longer), Some(a));
    }

    #[test]
    fn what_is_not_a_hello_names_no_peer() {
        let v4 = hello(PeerAddr::new([10, 0, 0, 3], 999));
        let v6 = hello(PeerAddr::new("fd77::1".parse::<IpAddr>().unwrap(), 999));
        assert_eq!(parse_hello(&[]), None);
        assert_eq!(parse_hello(&v4[..11]), None, "short");
        assert_eq!(parse_hello(&v6[..23]), None, "short");
        assert_eq!(
            parse_hello(&v6[..12]),
            None,
            "an IPv6 hello cut to IPv4's length"
        );
        let mut bad = v4.clone();
        bad[0] ^= 1;
        assert_eq!(parse_hello(&bad), None, "no magic");
        assert_eq!(parse_hello(&[0xee; 64]), None);
    }

    #[test]
    fn a_peer_costs_a_few_hundred_bytes_beside_its_connections() {
        type C = std::sync::Arc<crate::connection::ConnShared>;
        let peer = std::mem::size_of::<Peer<C>>();
        // Its entry in the address map and the inbound map, with hash-map overhead.
        let maps = 2 * (std::mem::size_of::<(PeerAddr, PeerId)>() + 8);
        println!("a peer costs {peer} + {maps} B");
        assert!(peer + maps <= 320, "a peer costs {peer} + {maps} B");
    }
}
