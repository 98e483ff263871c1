//! Connection management (docs/design.md §7; MINI's kernel channel, the patent's boot-time
//! connection) as its own sans-IO machine: messages and the clock in, messages and
//! actions out. It knows nothing of the node's tables, queues or worker; the node
//! creates, establishes, fails and removes connections as the actions say.
//!
//! A small request/response protocol over reserved connection 0 (the messages:
//! [`crate::wire::cm`]). Requests are retried until answered or until the CM timeout;
//! the server answers a repeated request with the same reply (it remembers (peer
//! address, peer connection)), so loss and duplication cannot create two connections.
//! A disconnect request carries the closing side's cumulative acknowledgement (like
//! TCP's FIN with its ACK): the peer's requests that ran before the close complete
//! successfully even when the last acknowledgement frame was lost; only the rest is
//! flushed. Connection numbers, keys and initial sequence numbers are chosen by the
//! node (random); the requester's address is learned from the request.
//!
//! A request costs a listener nothing until the requester has shown that it receives
//! at the address it claims (docs/design.md §10; TCP's SYN cookies, DTLS's
//! HelloVerifyRequest): a request without a valid cookie is answered with a CHALLENGE
//! carrying one — SipHash-2-4 under this node's secret over the requester's address,
//! every field of its request and its private data, and the time (a period of one CM
//! timeout; the current and the previous period's are taken) — and nothing is kept. A
//! request that echoes it is the one that makes the connection. So a spoofed request
//! makes no half-open connection and reaches no accept queue: the only state a flood
//! can touch is the rate limits, per source (a table of buckets hashed under the
//! secret) and for challenges node-wide, over which requests go unanswered and counted.
//!
//! Every connection, sealed or plain, is made by a Noise IK handshake between the two
//! nodes' identity keys (`crate::handshake`, docs/design.md §10): the challenge names
//! the listener's key, the request with the cookie carries IK's first message (the
//! client's key, encrypted), the reply IK's second. What the handshake leaves
//! authenticates everything said of the connection afterwards: a REJECT carries a tag
//! only the listener that read the request can compute, a disconnect request and its
//! answer a MAC under the connection's CM key. So a bystander that sees every frame
//! can neither refuse a connect nor close a connection. How far that reaches depends
//! on how the client knew the listener's key ([`PeerTrust`]): pinned or taken on first
//! use, a REJECT that verifies is final; unverified (a plain connection's default),
//! anyone can answer a challenge with a key of its own, so a REJECT is a hint the
//! connect keeps retrying past until its timeout (it then fails with that reason).
//! What an on-path party can still do to a plain connection: read it, and inject data
//! frames under its connection key (the header shows it); only sealed frames stop that.
//!
//! ```text
//! host / node                         Cm                              peer
//! connect(conn, ..)  ───────────────▶ pending connect ── CONNECT_REQ ─▶ (retried)
//!                                     ◀─ CHALLENGE (cookie, listener key)
//!                                     ── CONNECT_REQ (cookie, IK -> e,es,s,ss,psk) ▶
//!                                     ◀─ CONNECT_REP (IK <- e,ee,se) / REJECT (tag)
//! Action::Established / Failed ◀───── (or the timeout)
//!                                     ◀─ CONNECT_REQ ───────────────────
//!                                     ── CHALLENGE (nothing kept) ────▶
//!                                     ◀─ CONNECT_REQ (cookie checks) ───
//! Action::Incoming ◀────────────────  (a repeat is answered alone)
//! accepted(..) / refuse(..) ────────▶ ── CONNECT_REP / REJECT ────────▶
//! close(conn, ..) ──────────────────▶ pending close ── DISCONNECT_REQ ▶ (retried)
//! Action::Closed ◀─────────────────── ◀─ DISCONNECT_REP (or the timeout)
//! Action::PeerClosed ◀─────────────── ◀─ DISCONNECT_REQ (MAC checked), answered
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hasher;
use std::net::IpAddr;
use std::sync::Arc;

use siphasher::sip::SipHasher24;

use crate::handshake::{HandshakeError, Initiator, Received, Sent, SessionKeys, PROLOGUE_LABEL};
use crate::identity::{Identity, IdentityKey};
use crate::reliability::SACK_BITS;
use crate::tables::{NodeAddr, RegWindow};
use crate::wire::cm::{HandshakeBlock, Tag, HANDSHAKE_LEN};
use crate::wr::Priority;

pub use crate::wire::cm::{CmMessage, CmWireError, PublicKey, RejectReason};

/// Errors of the connection-management calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    #[error("service {0} already has a listener")]
    ServiceInUse(u32),
    /// The endpoint, by its number.
    #[error("endpoint {0} does not exist")]
    NoEndpoint(u32),
    #[error("connection limit reached ({0})")]
    TooManyConnections(usize),
    #[error("connection {0} does not exist")]
    NoConnection(u32),
    #[error("register window: {0}")]
    Registers(#[from] crate::tables::TableError),
    #[error(
        "the {0} window belongs to another shard than the endpoint's (shard {1}): allocate \
         it for the endpoint's shard"
    )]
    OtherShard(&'static str, u8),
    #[error("secure connection: {0}")]
    Secure(#[from] crate::secure::SecureError),
    #[error(
        "a secure connection needs the listener's identity key: pin it (ConnOptions::peer_key, \
         a known-peers file) or ask for trust on first use"
    )]
    NoPeerKey,
    #[error("{0}")]
    NoRoute(#[from] crate::neigh::NeighError),
}

/// The register window a new connection gives its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Registers {
    /// None: messages naming a connection register are refused.
    #[default]
    None,
    /// This window (connections may share or overlap windows).
    Window(RegWindow),
    /// A fresh window of this many registers per connection, released with it.
    PerConnection(u32),
}

/// Options of a new connection (the receiving side's view of its peer).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Depth of the connection's send queue.
    pub sq_depth: usize,
    /// Send priority of what this side posts.
    pub priority: Priority,
    /// The IP traffic class this side's frames leave with, as verbs' `traffic_class`
    /// (perftest's `--tclass`): DSCP in the top six bits (`46 << 2` for expedited
    /// forwarding). Its two ECN bits are the transport's and ignored here. Default 0.
    pub traffic_class: u8,
    pub registers: Registers,
    /// Whether the peer may force interrupts (cond ALWAYS, software exceptions).
    pub allow_forced_interrupts: bool,
    /// Whether refused messages are also reported on the endpoint's event queue.
    pub report_traps: bool,
    /// The instruction window the peer's instruction pointers name (from
    /// `Node::instructions`; empty: none).
    pub instructions: RegWindow,
    /// Isolation mode: only instruction-pointer messages and payload-token writes and
    /// reads are taken from the peer (they name none of this side's registers or
    /// addresses; a token is a capability this node handed out).
    pub isolated: bool,
    /// Messages kept when they arrive ahead of a gap (selective repeat; at most
    /// `reliability::SACK_BITS`; 0: refused, the sender goes back to the gap).
    pub receive_window: u32,
    /// Bytes for the peer: in the connect request (connecting), in every reply
    /// (listening). At most `wire::cm::PRIVATE_DATA_MAX`.
    pub private_data: PrivateData,
    /// Sealed frames (`crate::secure`): connecting, ask for a secure connection;
    /// listening, refuse plain requests (`RejectReason::Insecure`; a secure request is
    /// accepted by any listener).
    pub secure: Security,
    /// Listening: the bytes a request's private data must begin with (a secret the
    /// requester was given, e.g. a key). A request without them is answered as if no
    /// listener were there (`NoListener`, so the service is not revealed) and counted
    /// (`DropReason::WrongKey`); no connection is made. `None`: any request.
    pub require_private_data: PrivateData,
    /// Connecting: how the listener's identity key is known (`crate::handshake`).
    pub peer_key: PeerTrust,
    /// Listening: the identity keys of the clients that may connect (refused with
    /// `RejectReason::Unauthorized` and counted otherwise). `None`: any.
    pub authorized_keys: Option<Arc<[IdentityKey]>>,
}

/// How a client knows the listener's identity key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerTrust {
    /// Not at all: the key the listener's challenge names is used, verified by nothing
    /// (a plain connection's default). The handshake then authenticates the
    /// connection's CM messages towards whoever answered, and a REJECT is only a hint
    /// (the connect retries until its timeout, then fails with the hinted reason).
    #[default]
    Unverified,
    /// Trust on first use: the challenge's key is taken and reported with the
    /// connection (`Action::Established::verified`), for the caller to record it.
    FirstUse,
    /// This key (pinned by an option or a known-peers file): a challenge naming another
    /// is ignored, and a connect that hears only such fails with `RejectReason::PeerKey`.
    Pinned(IdentityKey),
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            sq_depth: 4096,
            priority: Priority::Low,
            traffic_class: 0,
            registers: Registers::None,
            allow_forced_interrupts: true,
            report_traps: false,
            instructions: RegWindow::EMPTY,
            isolated: false,
            receive_window: SACK_BITS,
            private_data: None,
            require_private_data: None,
            secure: Security::Off,
            peer_key: PeerTrust::Unverified,
            authorized_keys: None,
        }
    }
}

/// Whether a connection's frames are sealed (`crate::secure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Security {
    /// Plain frames.
    #[default]
    Off,
    /// An X25519 key agreement in the handshake, every section sealed with AES-256-GCM.
    On,
    /// [`Security::On`] with a pre-shared key mixed into the key derivation: a peer (or
    /// a relay in the middle) without it cannot complete the handshake.
    Psk([u8; crate::secure::PSK_LEN]),
}

impl Security {
    /// Whether frames are sealed.
    pub fn is_on(&self) -> bool {
        !matches!(self, Security::Off)
    }

    /// The pre-shared key, if any.
    pub fn psk(&self) -> Option<&[u8; crate::secure::PSK_LEN]> {
        match self {
            Security::Psk(k) => Some(k),
            _ => None,
        }
    }
}

/// The application's bytes in a connect request or reply (rdma_cm's `private_data`;
/// `None`: none), shared by every copy of the message.
pub type PrivateData = Option<Arc<[u8]>>;

/// `bytes` as private data (none when empty).
pub fn private_data(bytes: &[u8]) -> PrivateData {
    (!bytes.is_empty()).then(|| Arc::from(bytes))
}

/// What the peer told of itself when connecting: its connection, key, initial
/// sequence number, largest frame and private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerParams {
    pub conn: u32,
    pub key: u64,
    pub isn: u32,
    pub max_frame: u32,
    pub private: PrivateData,
    /// Sealed frames asked for (a request) or granted (a reply).
    pub secure: bool,
    /// The peer's identity key, as the handshake proved it (towards whoever answered,
    /// when the listener's key was not known beforehand).
    pub identity: IdentityKey,
}

/// What the node must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A peer asks to connect to `service`: the node creates the connection and calls
    /// [`Cm::accepted`], or calls [`Cm::refuse`].
    Incoming {
        from: NodeAddr,
        request: u32,
        service: u32,
        peer: PeerParams,
        /// The handshake as read: [`Cm::accepted`] and [`Cm::refuse`] answer with it.
        handshake: Box<Received>,
    },
    /// Our request was accepted: connection `conn` is up, with the session's keys;
    /// `verified`: the listener's key was pinned (known before the handshake).
    Established {
        conn: u32,
        peer: PeerParams,
        keys: Box<SessionKeys>,
        verified: bool,
        /// Where the reply came from: the peer's MAC, or its router's (the
        /// connection's next hop from now on).
        mac: [u8; 6],
    },
    /// Our request was refused, or went unanswered until the timeout; `offered`: the
    /// key a listener's challenge named instead of the pinned one
    /// ([`RejectReason::PeerKey`]).
    Failed {
        conn: u32,
        reason: RejectReason,
        offered: Option<IdentityKey>,
    },
    /// The peer closed `conn`: what ran at the peer (before `ack`) completes, the rest
    /// is flushed, the entry goes.
    PeerClosed { conn: u32, ack: u32 },
    /// Our close of `conn` is over (answered, or the timeout): the entry goes.
    Closed { conn: u32 },
}

/// Why a message was ignored (the node counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// A disconnect request for a connection we do not know (or whose handshake is
    /// not over).
    WrongKey,
    /// A handshake, reply, REJECT or disconnect message whose tag or MAC does not
    /// verify.
    Forged,
    /// A challenge naming another listener key than the one pinned.
    PeerKey,
    /// A REJECT that verifies only under a listener key nobody vouched for: a hint.
    Unverified,
    /// A connect request from a source at its cap of unfinished handshakes.
    SourceCap,
    /// A connect request whose cookie did not check: challenged anew.
    BadCookie,
    /// A connect request over its source's rate, or a first request over the node's
    /// rate of challenges: unanswered.
    RateLimited,
    /// A repeat of a connect request whose connection its peer was heard on since: the
    /// peer has the reply (a delayed duplicate, or a replay), so it makes nothing.
    Repeated,
}

/// Rates of connect requests a node answers (a rate of 0: unlimited).
#[derive(Debug, Clone, Copy)]
pub struct CmLimits {
    /// Requests per second from one source address, and the burst above it.
    pub per_source: u32,
    pub per_source_burst: u32,
    /// Challenges per second the node sends (to first requests, from anywhere), and
    /// the burst above it.
    pub challenges: u32,
    pub challenges_burst: u32,
    /// Connections one source address may hold at this node's listeners (0: no cap):
    /// a request over it is refused (`RejectReason::Resources`), counted
    /// `cm_source_cap`.
    pub per_source_connections: u32,
    /// Of those, connections whose handshake the source has not finished (it has
    /// not sent the connection's first frame; 0: no cap): a request over it goes
    /// unanswered (the requester retries), counted `cm_source_cap`.
    pub per_source_unconfirmed: u32,
}

impl Default for CmLimits {
    fn default() -> Self {
        // Generous: a host opening tens of thousands of connections (ddperf -q 65536,
        // an MPI job's ranks) sends two requests each. What they bound is a flood's
        // cost: a SipHash and a 60-byte reply per request, no state.
        CmLimits {
            per_source: 200_000,
            per_source_burst: 8192,
            challenges: 200_000,
            challenges_burst: 8192,
            // A quarter of the default connection limit: one host cannot take them all.
            per_source_connections: 1024,
            // Unconfirmed ones last a round trip unless the source is hostile.
            per_source_unconfirmed: 64,
        }
    }
}

/// Buckets of the per-source limit (sources hashed under the node's secret share one
/// when they collide, so the table never grows).
const SOURCE_BUCKETS: usize = 1024;

/// A token bucket as a generic cell rate algorithm: one time per bucket, the
/// theoretical arrival time of the next request.
#[derive(Debug, Clone, Copy)]
struct Rate {
    /// Ticks per request (0: unlimited), and the burst in ticks.
    interval: u64,
    burst: u64,
}

impl Rate {
    fn new(per_second: u32, burst: u32, hz: u64) -> Rate {
        let interval = if per_second == 0 {
            0
        } else {
            (hz / u64::from(per_second)).max(1)
        };
        Rate {
            interval,
            burst: interval.saturating_mul(u64::from(burst.max(1))),
        }
    }

    /// Whether a request at `now` conforms; if so the bucket `tat` takes it.
    fn admit(&self, tat: &mut u64, now: u64) -> bool {
        if self.interval == 0 {
            return true;
        }
        let t = (*tat).max(now);
        if t - now >= self.burst {
            return false;
        }
        *tat = t + self.interval;
        true
    }
}

/// Timing of requests, in the node's clock ticks.
#[derive(Debug, Clone, Copy)]
pub struct CmTiming {
    /// The first retry (a first frame is the likeliest to meet a link still coming up).
    pub first_retry: u64,
    /// Between later retries.
    pub retry: u64,
    /// Give up after this long.
    pub timeout: u64,
}

/// A request of ours waiting for its answer.
#[derive(Debug, Clone)]
struct Pending {
    to: NodeAddr,
    next_retry: u64,
    deadline: u64,
    /// The request waits in the output queue ([`Cm::out`]: the link has not taken
    /// it yet): a retry then queues it no second time, so a link slower than the
    /// retries does not grow the queue by every pending request per retry period.
    queued: bool,
    /// What is repeated until answered.
    request: Request,
}

/// One message to send ([`Cm::out`]).
#[derive(Debug)]
enum Out {
    /// An answer, whole.
    Answer(Box<(NodeAddr, CmMessage, PrivateData)>),
    /// Our pending request of this connection.
    Request(u32),
}

impl Out {
    fn answer(to: NodeAddr, msg: CmMessage, private: PrivateData) -> Out {
        Out::Answer(Box::new((to, msg, private)))
    }
}

/// What a pending request repeats.
#[derive(Debug, Clone)]
enum Request {
    /// A connect: its request as sent and its side of the handshake.
    Connect(Box<Connecting>),
    /// A close: the disconnect request's fields (signed), in their own size rather
    /// than a [`CmMessage`]'s — a node closing many connections at once keeps one of
    /// these per connection.
    Close {
        target: u32,
        sender: u32,
        ack: u32,
        mac: Tag,
    },
}

impl Pending {
    /// The message repeated, with its private data.
    fn message(&self) -> (CmMessage, PrivateData) {
        match &self.request {
            Request::Connect(c) => (c.msg, c.private.clone()),
            &Request::Close {
                target,
                sender,
                ack,
                mac,
            } => (
                CmMessage::DisconnectReq {
                    target,
                    sender,
                    ack,
                    mac,
                },
                None,
            ),
        }
    }

    fn connect(&self) -> Option<&Connecting> {
        match &self.request {
            Request::Connect(c) => Some(c),
            Request::Close { .. } => None,
        }
    }

    fn connect_mut(&mut self) -> Option<&mut Connecting> {
        match &mut self.request {
            Request::Connect(c) => Some(c),
            Request::Close { .. } => None,
        }
    }

    fn is_close(&self) -> bool {
        matches!(self.request, Request::Close { .. })
    }

    /// Queues the request of connection `conn` (this one's) on `out` to go again,
    /// unless it waits there already.
    fn requeue(&mut self, conn: u32, out: &mut VecDeque<Out>) {
        if !self.queued {
            out.push_back(Out::Request(conn));
            self.queued = true;
        }
    }
}

/// A connect's side of the handshake, from the request to the answer.
#[derive(Debug, Clone)]
struct Connecting {
    /// The request as sent (with the cookie and handshake once challenged), and its
    /// private data.
    msg: CmMessage,
    private: PrivateData,
    initiator: Initiator,
    trust: PeerTrust,
    /// The first message as written to each listener key a challenge named (the
    /// latest last; a few kept, so that the answer to an earlier one still verifies).
    sent: Vec<(Sent, HandshakeBlock)>,
    /// What the failure at the deadline says, when something was heard but nothing
    /// verified: a challenge with another key than the pinned one, a reply that did
    /// not verify, or an unverified REJECT's reason.
    hint: Option<RejectReason>,
    /// The last listener key a challenge named instead of the pinned one.
    offered: Option<IdentityKey>,
}

/// Listener keys whose first messages a connect keeps.
const SENT_KEPT: usize = 4;

/// What the machine knows of a connection of the node's: the keys its CM messages are
/// authenticated with (once the handshake is over) and, for one it accepted, the
/// request that made it.
#[derive(Debug, Clone)]
struct Known {
    keys: Option<CmKeys>,
    accepted_from: Option<(IpAddr, u32)>,
    /// Ours that connected: the tag of the reply that made it (a repeat of that reply
    /// is a duplicate; another reply or a REJECT for it, a forgery).
    reply_tag: Option<Tag>,
}

/// One connection's CM keys: what we send under, what the peer sends under.
#[derive(Clone, PartialEq, Eq)]
struct CmKeys {
    tx: [u8; 32],
    rx: [u8; 32],
}

impl std::fmt::Debug for CmKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CmKeys(..)")
    }
}

impl CmKeys {
    fn of(keys: &SessionKeys, client: bool) -> CmKeys {
        if client {
            CmKeys {
                tx: keys.cm_c2s,
                rx: keys.cm_s2c,
            }
        } else {
            CmKeys {
                tx: keys.cm_s2c,
                rx: keys.cm_c2s,
            }
        }
    }

    /// `msg` with the MAC of our direction.
    fn sign(&self, msg: CmMessage) -> CmMessage {
        msg.authenticated(self.mac(&msg))
    }

    /// The MAC of our direction over `msg`.
    fn mac(&self, msg: &CmMessage) -> Tag {
        crate::handshake::cm_mac(&self.tx, &[&msg.signed(&[])])
    }

    /// Whether `mac` is the peer's direction's MAC of `msg`.
    fn verifies(&self, msg: &CmMessage, mac: &Tag) -> bool {
        let want = crate::handshake::cm_mac(&self.rx, &[&msg.signed(&[])]);
        crate::secure::same(&want, mac)
    }
}

/// A connection the peer closed: its keys kept for one CM timeout, so that a repeat of
/// the peer's disconnect request (our answer lost) is answered.
#[derive(Debug, Clone)]
struct Lingering {
    keys: CmKeys,
    until: u64,
}

/// The connection-management machine of one node.
pub struct Cm {
    local_mac: [u8; 6],
    max_frame: u32,
    timing: CmTiming,
    /// This node's long-term identity (the listener's key of IK, the client's `s`).
    identity: Arc<Identity>,
    /// The cookies' key (random per node), and their period.
    secret: (u64, u64),
    period: u64,
    per_source: Rate,
    challenge_rate: Rate,
    sources: Box<[u64; SOURCE_BUCKETS]>,
    challenge_tat: u64,
    challenges: u64,
    known: HashMap<u32, Known>,
    lingering: HashMap<u32, Lingering>,
    /// Lingering connections in the order they expire.
    linger_queue: VecDeque<(u64, u32)>,
    /// Sources at their cap of unfinished handshakes (the node says): their requests
    /// are ignored before the handshake is read.
    capped: std::collections::HashSet<IpAddr>,
    /// Our requests waiting for answers (connects and closes), by our connection.
    pending: HashMap<u32, Pending>,
    /// (peer ip, peer connection) -> our connection and the reply that accepted it,
    /// until the peer is heard on the connection ([`Cm::heard`]): a repeat of its
    /// request is answered with that reply (the first may have been lost).
    accepted: HashMap<(IpAddr, u32), (u32, CmMessage, PrivateData)>,
    /// The same key for the accepted connections whose peer was heard since: only
    /// the connection's number, so that a later repeat of the request is recognised
    /// (and makes no second connection) without the reply kept for the connection's
    /// life (the reply and its private data are ten times the size of this entry).
    answered: HashMap<(IpAddr, u32), u32>,
    /// Retry and give-up times, earliest first (stale entries are skipped).
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// What to send, in order: answers (replies, challenges, rejects, disconnect
    /// replies) whole, and our pending requests by connection, each message read from
    /// its entry in `pending` when the link takes it (16 bytes an entry: a node
    /// closing many connections at once queues a request for each).
    out: VecDeque<Out>,
    actions: VecDeque<Action>,
}

impl Cm {
    /// The machine of a node whose frames come from `local_mac` and are at most
    /// `max_frame` bytes, with the default limits on a clock of 1 MHz and an identity
    /// of its own (the node uses [`Cm::with_limits`] with its own).
    pub fn new(local_mac: [u8; 6], max_frame: u32, timing: CmTiming) -> Cm {
        let identity = Arc::new(Identity::generate().expect("the OS random source"));
        Cm::with_limits(
            local_mac,
            max_frame,
            timing,
            &CmLimits::default(),
            1_000_000,
            identity,
        )
    }

    /// [`Cm::new`] with `limits` on a clock of `hz` ticks per second, as `identity`.
    pub fn with_limits(
        local_mac: [u8; 6],
        max_frame: u32,
        timing: CmTiming,
        limits: &CmLimits,
        hz: u64,
        identity: Arc<Identity>,
    ) -> Cm {
        Cm {
            local_mac,
            max_frame,
            timing,
            identity,
            secret: (
                crate::connection::random_u64(),
                crate::connection::random_u64(),
            ),
            period: timing.timeout.max(1),
            per_source: Rate::new(limits.per_source, limits.per_source_burst, hz),
            challenge_rate: Rate::new(limits.challenges, limits.challenges_burst, hz),
            sources: Box::new([0; SOURCE_BUCKETS]),
            challenge_tat: 0,
            challenges: 0,
            known: HashMap::new(),
            lingering: HashMap::new(),
            linger_queue: VecDeque::new(),
            capped: std::collections::HashSet::new(),
            pending: HashMap::new(),
            accepted: HashMap::new(),
            answered: HashMap::new(),
            timers: BinaryHeap::new(),
            out: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }

    /// Whether source `ip` is at its cap of unfinished handshakes (the node keeps
    /// the count): its requests with a valid cookie are then ignored, counted
    /// [`Ignored::SourceCap`], before their handshake costs a key agreement.
    pub fn set_capped(&mut self, ip: IpAddr, capped: bool) {
        if capped {
            self.capped.insert(ip);
        } else if self.capped.remove(&ip) {
            shrink_sparse(&mut self.capped);
        }
    }

    /// Its timing (retries, the CM timeout).
    pub fn timing(&self) -> CmTiming {
        self.timing
    }

    /// This node's identity key (what its challenges name).
    pub fn identity(&self) -> IdentityKey {
        self.identity.public()
    }

    /// Starts connecting our connection `conn` (key, initial sequence number) to
    /// `service` at `to`, as `opts` say: its private data, sealed frames and pre-shared
    /// key, and how the listener's identity key is known.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        conn: u32,
        key: u64,
        isn: u32,
        request: u32,
        to: NodeAddr,
        service: u32,
        now: u64,
        opts: &ConnectOptions,
    ) -> Result<(), CmError> {
        if opts.secure.is_on() && opts.peer_key == PeerTrust::Unverified {
            return Err(CmError::NoPeerKey);
        }
        let initiator = Initiator::new(opts.secure.psk().copied())
            .map_err(|_| CmError::Secure(crate::secure::SecureError::Crypto))?;
        let msg = CmMessage::ConnectReq {
            request,
            service,
            conn,
            key,
            isn,
            max_frame: self.max_frame,
            mac: self.local_mac,
            cookie: 0,
            secure: opts.secure.is_on(),
            ephemeral: initiator.ephemeral().0,
            handshake: None,
        };
        self.known.insert(
            conn,
            Known {
                keys: None,
                accepted_from: None,
                reply_tag: None,
            },
        );
        let connecting = Connecting {
            msg,
            private: opts.private_data.clone(),
            initiator,
            trust: opts.peer_key,
            sent: Vec::new(),
            hint: None,
            offered: None,
        };
        self.request(conn, to, Request::Connect(Box::new(connecting)), now);
        Ok(())
    }

    /// Starts closing our connection `conn`, known to the peer at `to` as `peer_conn`;
    /// `ack` is our cumulative acknowledgement. A connection whose handshake never
    /// finished has nothing to authenticate a close with: it just goes.
    pub fn close(&mut self, conn: u32, to: NodeAddr, peer_conn: u32, ack: u32, now: u64) {
        let Some(keys) = self.known.get(&conn).and_then(|k| k.keys.clone()) else {
            self.forget(conn);
            self.actions.push_back(Action::Closed { conn });
            return;
        };
        let mac = keys.mac(&CmMessage::DisconnectReq {
            target: peer_conn,
            sender: conn,
            ack,
            mac: [0; 16],
        });
        let close = Request::Close {
            target: peer_conn,
            sender: conn,
            ack,
            mac,
        };
        // A repeat of the request that made it is still answered from memory until
        // the entry goes (a new connection for it would be a ghost).
        self.request(conn, to, close, now);
    }

    fn request(&mut self, conn: u32, to: NodeAddr, request: Request, now: u64) {
        let (next_retry, deadline) = (now + self.timing.first_retry, now + self.timing.timeout);
        self.out.push_back(Out::Request(conn));
        self.pending.insert(
            conn,
            Pending {
                to,
                next_retry,
                deadline,
                queued: true,
                request,
            },
        );
        self.timers.push(Reverse((next_retry.min(deadline), conn)));
    }

    /// The node accepted the request of [`Action::Incoming`] as our connection `conn`,
    /// answering with `private` data, its frames sealed or not: the reply finishes the
    /// handshake. Returns the session's keys (the traffic secrets of a sealed
    /// connection).
    #[allow(clippy::too_many_arguments)]
    pub fn accepted(
        &mut self,
        from: NodeAddr,
        request: u32,
        peer_conn: u32,
        conn: u32,
        key: u64,
        isn: u32,
        private: PrivateData,
        secure: bool,
        handshake: &Received,
    ) -> Result<SessionKeys, HandshakeError> {
        let mut rep = CmMessage::ConnectRep {
            request,
            conn,
            key,
            isn,
            max_frame: self.max_frame,
            client_conn: peer_conn,
            secure,
            ephemeral: [0; 32],
            tag: [0; 16],
        };
        let data = private.as_deref().unwrap_or(&[]);
        // The reply's fields but its key and tag are bound into the handshake; the
        // ephemeral key is bound by the handshake itself.
        let (e, t, keys) = handshake.write_reply(&[&rep.signed(data)])?;
        if let CmMessage::ConnectRep { ephemeral, .. } = &mut rep {
            *ephemeral = e.0;
        }
        let rep = rep.authenticated(t);
        let at = (from.ip, peer_conn);
        self.accepted.insert(at, (conn, rep, private.clone()));
        self.known.insert(
            conn,
            Known {
                keys: Some(CmKeys::of(&keys, false)),
                accepted_from: Some(at),
                reply_tag: None,
            },
        );
        self.out.push_back(Out::answer(from, rep, private));
        Ok(keys)
    }

    /// The node refuses the request of [`Action::Incoming`] for `reason`, with a tag
    /// that the requester can verify.
    pub fn refuse(
        &mut self,
        from: NodeAddr,
        request: u32,
        peer_conn: u32,
        reason: RejectReason,
        handshake: &Received,
    ) {
        let msg = CmMessage::Reject {
            request,
            reason,
            client_conn: peer_conn,
            tag: [0; 16],
        };
        let tag = handshake.reject_tag(&[&msg.signed(&[])]);
        self.out
            .push_back(Out::answer(from, msg.authenticated(tag), None));
    }

    /// The node removed connection `conn`: nothing more is said of it.
    pub fn forget(&mut self, conn: u32) {
        self.forget_accepted(conn);
        self.known.remove(&conn);
        self.pending.remove(&conn);
        // What a flood of connections grew goes back once they are gone.
        shrink_sparse(&mut self.known);
        shrink_sparse(&mut self.pending);
        shrink_sparse(&mut self.accepted);
        shrink_sparse(&mut self.answered);
    }

    fn forget_accepted(&mut self, conn: u32) {
        if let Some(at) = self
            .known
            .get_mut(&conn)
            .and_then(|k| k.accepted_from.take())
        {
            self.accepted.remove(&at);
            self.answered.remove(&at);
        }
    }

    /// Connection `conn`'s peer was heard on it (a frame of the connection passed its
    /// checks): it has the reply, which is no longer kept; a repeat of its request is
    /// ignored from now on ([`Ignored::Repeated`]).
    pub fn heard(&mut self, conn: u32) {
        let Some(at) = self.known.get(&conn).and_then(|k| k.accepted_from) else {
            return;
        };
        if self.accepted.remove(&at).is_some() {
            self.answered.insert(at, conn);
            shrink_sparse(&mut self.accepted);
        }
    }

    /// A message from `from` (its MAC as the frame's Ethernet header says; a request
    /// names its own), with the private data it carried, at `now`.
    pub fn handle(
        &mut self,
        from: NodeAddr,
        msg: CmMessage,
        private: &[u8],
        now: u64,
    ) -> Result<(), Ignored> {
        match msg {
            CmMessage::ConnectReq { .. } => self.connect_request(from, msg, private, now),
            CmMessage::Challenge {
                request,
                client_conn,
                cookie,
                listener,
            } => self.challenged(client_conn, request, cookie, IdentityKey(listener), now),
            CmMessage::ConnectRep { .. } => self.connect_reply(from.mac, msg, private),
            CmMessage::Reject { .. } => self.rejected(msg),
            CmMessage::DisconnectReq { .. } => self.disconnect_request(from, msg, now),
            CmMessage::DisconnectRep { sender, mac } => self.disconnect_answer(sender, mac, msg),
        }
    }

    /// The cookie of request `msg` from `from` with `private` data in period `epoch`
    /// (never 0): over what the request signs ([`CmMessage::signed`]: every field but
    /// the cookie and the handshake, and its private data).
    fn cookie(&self, from: &NodeAddr, msg: &CmMessage, private: &[u8], epoch: u64) -> u64 {
        let mut h = SipHasher24::new_with_keys(self.secret.0, self.secret.1);
        h.write_u64(epoch);
        h.write(&crate::wire::underlay::v6_octets(from.ip));
        h.write(&msg.signed(private));
        h.finish().max(1)
    }

    /// A peer's connect request: over its source's rate it goes unanswered; a repeat
    /// of one accepted is answered the same way (the answer may have been lost); one
    /// that echoes its cookie has its handshake read and goes to the node; any other
    /// is challenged (if the node's rate of challenges allows) and forgotten.
    fn connect_request(
        &mut self,
        from: NodeAddr,
        msg: CmMessage,
        private: &[u8],
        now: u64,
    ) -> Result<(), Ignored> {
        let CmMessage::ConnectReq {
            request,
            service,
            conn,
            key,
            isn,
            max_frame,
            mac,
            cookie,
            secure,
            ephemeral,
            handshake,
        } = msg
        else {
            return Ok(());
        };
        // The answer goes back where the frame came from: the requester itself on the
        // link, or the router before it (the MAC the request names is the requester's
        // own, which is no next hop when a router is between).
        let _ = mac;
        let mut h = SipHasher24::new_with_keys(self.secret.1, self.secret.0);
        h.write(&crate::wire::underlay::v6_octets(from.ip));
        let bucket = &mut self.sources[h.finish() as usize % SOURCE_BUCKETS];
        if !self.per_source.admit(bucket, now) {
            return Err(Ignored::RateLimited);
        }
        if let Some((_, rep, data)) = self.accepted.get(&(from.ip, conn)) {
            self.out.push_back(Out::answer(from, *rep, data.clone()));
            return Ok(());
        }
        if self.answered.contains_key(&(from.ip, conn)) {
            return Err(Ignored::Repeated);
        }
        let epoch = now / self.period;
        let current = self.cookie(&from, &msg, private, epoch);
        let valid = cookie != 0
            && (cookie == current
                || (epoch > 0 && cookie == self.cookie(&from, &msg, private, epoch - 1)));
        if !valid {
            if !self.challenge_rate.admit(&mut self.challenge_tat, now) {
                return Err(Ignored::RateLimited);
            }
            let challenge = CmMessage::Challenge {
                request,
                client_conn: conn,
                cookie: current,
                listener: self.identity.public().0,
            };
            self.out.push_back(Out::answer(from, challenge, None));
            self.challenges += 1;
            return if cookie == 0 {
                Ok(())
            } else {
                Err(Ignored::BadCookie)
            };
        }
        if self.capped.contains(&from.ip) {
            return Err(Ignored::SourceCap);
        }
        // The cookie proves the address; the handshake proves the client's key.
        let Some(block) = handshake else {
            return Err(Ignored::Forged);
        };
        let received = Received::read(
            &self.identity,
            &[PROLOGUE_LABEL, &msg.signed(private)],
            IdentityKey(ephemeral),
            &block,
        )
        .map_err(|_| Ignored::Forged)?;
        let peer = PeerParams {
            conn,
            key,
            isn,
            max_frame,
            private: private_data(private),
            secure,
            identity: received.client,
        };
        self.actions.push_back(Action::Incoming {
            from,
            request,
            service,
            peer,
            handshake: Box::new(received),
        });
        Ok(())
    }

    /// The listener's challenge to our pending connect `conn`, naming its identity key
    /// `listener`: the request goes again at once with the cookie and IK's first
    /// message to that key (and so do its retries, the next one a retry period from
    /// now: the link is up, and the answer a round trip away again). One naming
    /// another key than the one pinned is ignored (and remembered: the connect fails
    /// saying so if nothing else answers); one for no pending request of ours changes
    /// nothing.
    fn challenged(
        &mut self,
        conn: u32,
        request: u32,
        cookie: u64,
        listener: IdentityKey,
        now: u64,
    ) -> Result<(), Ignored> {
        if !self.answers(conn, request) {
            return Ok(());
        }
        let identity = self.identity.clone();
        let Some(p) = self.pending.get_mut(&conn) else {
            return Ok(());
        };
        let Some(c) = p.connect_mut() else {
            return Ok(());
        };
        if let PeerTrust::Pinned(k) = c.trust {
            if k != listener {
                c.hint.get_or_insert(RejectReason::PeerKey);
                c.offered = Some(listener);
                return Err(Ignored::PeerKey);
            }
        }
        let latest = c.sent.last().map(|(s, _)| s.listener);
        if latest == Some(listener)
            && matches!(c.msg, CmMessage::ConnectReq { cookie: k, .. } if k == cookie)
        {
            // A second challenge to a repeat of the first request (its first retry
            // goes early): the request with this cookie is on its way already.
            return Ok(());
        }
        let block = match c.sent.iter().position(|(s, _)| s.listener == listener) {
            Some(i) => {
                let kept = c.sent.remove(i);
                let block = kept.1;
                c.sent.push(kept);
                block
            }
            None => {
                let private = c.private.as_deref().unwrap_or(&[]);
                let mut block = [0u8; HANDSHAKE_LEN];
                let sent = c
                    .initiator
                    .write_request(
                        &identity,
                        listener,
                        &[PROLOGUE_LABEL, &c.msg.signed(private)],
                        &mut block,
                    )
                    // A listener key no X25519 agreement takes (a low-order point).
                    .map_err(|_| Ignored::Forged)?;
                if c.sent.len() == SENT_KEPT {
                    c.sent.remove(0);
                }
                c.sent.push((sent, block));
                block
            }
        };
        if let CmMessage::ConnectReq {
            cookie: c,
            handshake,
            ..
        } = &mut c.msg
        {
            *c = cookie;
            *handshake = Some(block);
        }
        // The request goes again, with the cookie (if it still waits to go, it goes
        // so: it is read from here when sent).
        p.requeue(conn, &mut self.out);
        p.next_retry = now + self.timing.retry;
        self.timers
            .push(Reverse((p.next_retry.min(p.deadline), conn)));
        Ok(())
    }

    /// Challenges sent so far.
    pub fn challenges_sent(&self) -> u64 {
        self.challenges
    }

    /// A reply to our connect: the connection is up when it verifies under one of the
    /// listener keys our requests went to. One that does not is a forgery (or a
    /// different pre-shared key's): ignored, and the connect waits for another.
    fn connect_reply(
        &mut self,
        from_mac: [u8; 6],
        msg: CmMessage,
        private: &[u8],
    ) -> Result<(), Ignored> {
        let CmMessage::ConnectRep {
            request,
            conn,
            key,
            isn,
            max_frame,
            client_conn,
            secure,
            ephemeral,
            tag,
        } = msg
        else {
            return Ok(());
        };
        if !self.answers(client_conn, request) {
            return self.late_answer(client_conn, Some(tag));
        }
        let identity = self.identity.clone();
        let p = self.pending.get_mut(&client_conn).expect("answers");
        let c = p.connect_mut().expect("a connect");
        let signed = msg.signed(private);
        let e = IdentityKey(ephemeral);
        let verified = c.sent.iter().rev().find_map(|(sent, _)| {
            let keys = c
                .initiator
                .read_reply(&identity, sent, &e, &[&signed], &tag)
                .ok()?;
            Some((sent.listener, keys))
        });
        let Some((listener, keys)) = verified else {
            c.hint = Some(RejectReason::Confirmation);
            return Err(Ignored::Forged);
        };
        let verified = matches!(c.trust, PeerTrust::Pinned(_));
        self.pending.remove(&client_conn);
        if let Some(k) = self.known.get_mut(&client_conn) {
            k.keys = Some(CmKeys::of(&keys, true));
            k.reply_tag = Some(tag);
        }
        let peer = PeerParams {
            conn,
            key,
            isn,
            max_frame,
            private: private_data(private),
            secure,
            identity: listener,
        };
        self.actions.push_back(Action::Established {
            conn: client_conn,
            peer,
            keys: Box::new(keys),
            verified,
            mac: from_mac,
        });
        Ok(())
    }

    /// A REJECT of our connect: final when it verifies under a listener key we trust
    /// (pinned, or taken on first use); otherwise only a hint of why, should nothing
    /// better come before the deadline.
    fn rejected(&mut self, msg: CmMessage) -> Result<(), Ignored> {
        let CmMessage::Reject {
            request,
            reason,
            client_conn,
            tag,
        } = msg
        else {
            return Ok(());
        };
        if !self.answers(client_conn, request) {
            return self.late_answer(client_conn, None);
        }
        let p = self.pending.get_mut(&client_conn).expect("answers");
        let c = p.connect_mut().expect("a connect");
        let signed = msg.signed(&[]);
        let verified = c
            .sent
            .iter()
            .any(|(sent, _)| c.initiator.verify_reject(sent, &[&signed], &tag));
        if !verified || c.trust == PeerTrust::Unverified {
            if c.hint.is_none() || verified {
                c.hint = Some(reason);
            }
            return Err(if verified {
                Ignored::Unverified
            } else {
                Ignored::Forged
            });
        }
        self.forget(client_conn);
        self.actions.push_back(Action::Failed {
            conn: client_conn,
            reason,
            offered: None,
        });
        Ok(())
    }

    /// The peer closes our connection `target`: with a MAC under the connection's CM
    /// key it goes (and is answered, as a repeat of it is for a CM timeout after);
    /// anything else is ignored.
    fn disconnect_request(
        &mut self,
        from: NodeAddr,
        msg: CmMessage,
        now: u64,
    ) -> Result<(), Ignored> {
        let CmMessage::DisconnectReq {
            target,
            sender,
            ack,
            mac,
        } = msg
        else {
            return Ok(());
        };
        let keys = match self.known.get(&target) {
            Some(Known {
                keys: Some(keys), ..
            }) => keys.clone(),
            Some(_) => return Err(Ignored::WrongKey),
            None => match self.lingering.get(&target) {
                Some(l) => l.keys.clone(),
                None => return Err(Ignored::WrongKey),
            },
        };
        if !keys.verifies(&msg, &mac) {
            return Err(Ignored::Forged);
        }
        if self.known.contains_key(&target) {
            self.forget(target);
            let until = now + self.timing.timeout;
            self.lingering.insert(
                target,
                Lingering {
                    keys: keys.clone(),
                    until,
                },
            );
            self.linger_queue.push_back((until, target));
            self.actions
                .push_back(Action::PeerClosed { conn: target, ack });
        }
        let rep = keys.sign(CmMessage::DisconnectRep {
            sender,
            mac: [0; 16],
        });
        self.out.push_back(Out::answer(from, rep, None));
        Ok(())
    }

    /// The answer to our close of `conn`: the close is over when its MAC verifies. One
    /// for a connection of ours that does not verify is a forgery (counted); one for a
    /// connection we no longer know is a late repeat.
    fn disconnect_answer(&mut self, conn: u32, mac: Tag, msg: CmMessage) -> Result<(), Ignored> {
        let Some(Known {
            keys: Some(keys), ..
        }) = self.known.get(&conn)
        else {
            return Ok(());
        };
        if !keys.verifies(&msg, &mac) {
            return Err(Ignored::Forged);
        }
        let closing = self.pending.get(&conn).is_some_and(Pending::is_close);
        if closing {
            self.forget(conn);
            self.actions.push_back(Action::Closed { conn });
        }
        Ok(())
    }

    /// An answer to a connect of ours that is no longer waiting: for one that is up, a
    /// repeat of the reply that made it (`tag`) is a duplicate; any other reply, or a
    /// REJECT (`None`: the listener answers a repeat of a request it accepted with
    /// its reply), is a forgery. For one we no longer know, a stale answer.
    fn late_answer(&self, conn: u32, tag: Option<Tag>) -> Result<(), Ignored> {
        match self.known.get(&conn).and_then(|k| k.reply_tag) {
            Some(t) if tag.is_some_and(|g| crate::secure::same(&g, &t)) => Ok(()),
            Some(_) => Err(Ignored::Forged),
            None => Ok(()),
        }
    }

    /// Whether a connect answer for `conn` answers its pending request (not a
    /// duplicate, not a stale one).
    fn answers(&self, conn: u32, request: u32) -> bool {
        self.pending.get(&conn).is_some_and(|p| {
            p.connect().is_some_and(
                |c| matches!(c.msg, CmMessage::ConnectReq { request: r, .. } if r == request),
            )
        })
    }

    /// When [`Cm::handle_timeout`] is next due (`u64::MAX`: nothing pending).
    pub fn next_timeout(&self) -> u64 {
        let linger = self.linger_queue.front().map_or(u64::MAX, |l| l.0);
        self.timers.peek().map_or(u64::MAX, |t| t.0 .0).min(linger)
    }

    /// Retries the requests due, gives up on those past their deadline, and forgets
    /// closed connections whose linger is over.
    pub fn handle_timeout(&mut self, now: u64) {
        while let Some(&(until, conn)) = self.linger_queue.front() {
            if until > now {
                break;
            }
            self.linger_queue.pop_front();
            if self.lingering.get(&conn).is_some_and(|l| l.until == until) {
                self.lingering.remove(&conn);
            }
        }
        shrink_sparse(&mut self.lingering);
        shrink_sparse(&mut self.linger_queue);
        while let Some(&Reverse((when, conn))) = self.timers.peek() {
            if when > now {
                break;
            }
            self.timers.pop();
            let Some(p) = self.pending.get_mut(&conn) else {
                continue; // answered or forgotten
            };
            if when != p.next_retry.min(p.deadline) {
                continue; // stale
            }
            if now >= p.deadline {
                let closing = p.is_close();
                let reason = p
                    .connect()
                    .and_then(|c| c.hint)
                    .unwrap_or(RejectReason::Timeout);
                let offered = p.connect().and_then(|c| c.offered);
                self.forget(conn);
                self.actions.push_back(if closing {
                    Action::Closed { conn }
                } else {
                    Action::Failed {
                        conn,
                        reason,
                        offered: (reason == RejectReason::PeerKey)
                            .then_some(offered)
                            .flatten(),
                    }
                });
                continue;
            }
            p.next_retry = now + self.timing.retry;
            p.requeue(conn, &mut self.out);
            self.timers
                .push(Reverse((p.next_retry.min(p.deadline), conn)));
        }
    }

    /// The next action for the node.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether messages wait to be sent.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next message to send, where, and its private data.
    pub fn poll_transmit(&mut self) -> Option<(NodeAddr, CmMessage, PrivateData)> {
        while let Some(o) = self.out.pop_front() {
            match o {
                Out::Answer(a) => return Some(*a),
                // A request answered or forgotten since it was queued goes no more.
                Out::Request(conn) => {
                    if let Some(p) = self.pending.get_mut(&conn) {
                        p.queued = false;
                        let (msg, private) = p.message();
                        return Some((p.to, msg, private));
                    }
                }
            }
        }
        None
    }

    /// Connection `conn`'s request now knows where to go (its next hop's MAC was
    /// resolved): it goes there from now on, and its deadline counts from now — the
    /// listener could not answer before the request left.
    pub fn resolved(&mut self, conn: u32, mac: [u8; 6], now: u64) {
        if let Some(p) = self.pending.get_mut(&conn) {
            p.to.mac = mac;
            p.deadline = now + self.timing.timeout;
            self.timers
                .push(Reverse((p.next_retry.min(p.deadline), conn)));
        }
    }

    /// Sends again at once the pending requests whose destination `to_match` picks
    /// (connect requests that waited for their next hop's MAC).
    pub fn requeue_where(&mut self, mut to_match: impl FnMut(&NodeAddr) -> bool) {
        for (&conn, p) in self.pending.iter_mut() {
            if to_match(&p.to) {
                p.requeue(conn, &mut self.out);
            }
        }
    }

    /// The connections whose pending request goes to a destination `to_match` picks.
    pub fn waiting_for(&self, mut to_match: impl FnMut(&NodeAddr) -> bool) -> Vec<u32> {
        self.pending
            .iter()
            .filter(|(_, p)| to_match(&p.to))
            .map(|(&conn, _)| conn)
            .collect()
    }

    /// Connections with a request under way.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// Gives back most of a collection's room once it holds under a quarter of it (a
/// flood's connections gone), keeping a little for the next ones.
pub(crate) fn shrink_sparse(c: &mut impl Room) {
    let (len, capacity) = c.room();
    if capacity > 64 && len < capacity / 4 {
        c.shrink(len * 2);
    }
}

/// What [`shrink_sparse`] needs of a collection.
pub(crate) trait Room {
    /// Its length and capacity.
    fn room(&self) -> (usize, usize);
    fn shrink(&mut self, to: usize);
}

impl<K: std::hash::Hash + Eq, V> Room for HashMap<K, V> {
    fn room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

impl<T: std::hash::Hash + Eq> Room for std::collections::HashSet<T> {
    fn room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

impl<T> Room for VecDeque<T> {
    fn room(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self, to: usize) {
        self.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: CmTiming = CmTiming {
        first_retry: 10,
        retry: 100,
        timeout: 1000,
    };

    fn addr(i: u8) -> NodeAddr {
        NodeAddr::from_ip([10, 0, 0, i], crate::wire::UDP_PORT)
    }

    fn sent(cm: &mut Cm) -> Vec<CmMessage> {
        std::iter::from_fn(|| cm.poll_transmit().map(|(_, m, _)| m)).collect()
    }

    fn opts(trust: PeerTrust) -> ConnectOptions {
        ConnectOptions {
            peer_key: trust,
            ..ConnectOptions::default()
        }
    }

    /// The client's pending request through the server's challenge: the request that
    /// carries the cookie and the handshake (the server keeps nothing meanwhile).
    fn challenged(client: &mut Cm, server: &mut Cm, c: NodeAddr, s: NodeAddr) -> CmMessage {
        let req = sent(client)[0];
        server.handle(c, req, &[], 0).unwrap();
        assert_eq!(server.poll_action(), None);
        let ch = sent(server)[0];
        client.handle(s, ch, &[], 0).unwrap();
        sent(client)[0]
    }

    /// The server's Incoming for `req`, accepted as its connection `conn`.
    /// A client (10.0.0.1, connection 70) whose connect a server (10.0.0.2) challenged
    /// and accepted as its connection 80, the reply not yet delivered: the two
    /// machines, the request with its cookie, and the reply.
    fn accepted_pair() -> (Cm, Cm, CmMessage, CmMessage) {
        let (mut a, mut b) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        a.connect(70, 0x5e, 1, 9, addr(2), 4, 0, &opts(PeerTrust::Unverified))
            .unwrap();
        let req = challenged(&mut a, &mut b, addr(1), addr(2));
        let rep = accept(&mut b, addr(1), req, 80);
        (a, b, req, rep)
    }

    fn accept(server: &mut Cm, from: NodeAddr, req: CmMessage, conn: u32) -> CmMessage {
        server.handle(from, req, &[], 0).unwrap();
        let Some(Action::Incoming {
            from,
            request,
            peer,
            mut handshake,
            ..
        }) = server.poll_action()
        else {
            panic!("no incoming");
        };
        assert!(handshake.check_psk(None));
        server
            .accepted(
                from, request, peer.conn, conn, 0x77, 0, None, false, &handshake,
            )
            .unwrap();
        sent(server)[0]
    }

    #[test]
    fn a_connect_is_retried_then_established_once_and_both_learn_each_others_key() {
        let (mut client, mut server) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 9014, T));
        let pinned = opts(PeerTrust::Pinned(server.identity()));
        client
            .connect(7, 0xaa, 100, 55, addr(1), 18, 0, &pinned)
            .unwrap();
        let req = sent(&mut client);
        assert_eq!(req.len(), 1);
        assert!(matches!(
            req[0],
            CmMessage::ConnectReq {
                handshake: None,
                ..
            }
        ));
        client.handle_timeout(10);
        let mut again = sent(&mut client);
        client.handle_timeout(110);
        again.extend(sent(&mut client));
        assert_eq!(
            again,
            vec![req[0], req[0]],
            "first retry soon, then each period"
        );
        // The first is challenged; nothing is kept.
        server.handle(addr(2), req[0], &[], 0).unwrap();
        assert_eq!(server.poll_action(), None, "a first request makes nothing");
        let ch = sent(&mut server);
        assert!(matches!(
            ch[..],
            [CmMessage::Challenge {
                request: 55,
                client_conn: 7,
                listener,
                ..
            }] if listener == server.identity().0
        ));
        client.handle(addr(1), ch[0], &[], 0).unwrap();
        let req = sent(&mut client);
        assert!(
            matches!(req[..], [CmMessage::ConnectReq { cookie, handshake: Some(_), .. }] if cookie != 0),
            "sent again at once, with the cookie and the handshake"
        );
        // Three copies with the cookie reach the server: one Incoming, three identical
        // replies.
        server.handle(addr(2), req[0], &[], 0).unwrap();
        let Some(Action::Incoming {
            from,
            request,
            peer,
            mut handshake,
            ..
        }) = server.poll_action()
        else {
            panic!("no incoming");
        };
        assert_eq!(
            from.mac,
            addr(2).mac,
            "the frame's source: the next hop back"
        );
        assert_eq!(peer.identity, client.identity(), "the client's key, proven");
        assert!(handshake.check_psk(None));
        let server_keys = server
            .accepted(
                from, request, peer.conn, 9, 0xbb, 200, None, false, &handshake,
            )
            .unwrap();
        server.handle(addr(2), req[0], &[], 0).unwrap();
        server.handle(addr(2), req[0], &[], 0).unwrap();
        assert_eq!(server.poll_action(), None, "repeats are answered alone");
        let reps = sent(&mut server);
        assert_eq!(reps.len(), 3);
        assert!(reps.iter().all(|r| *r == reps[0]));
        for r in &reps {
            client.handle(addr(1), *r, &[], 0).unwrap();
        }
        let want = PeerParams {
            conn: 9,
            key: 0xbb,
            isn: 200,
            max_frame: 9014,
            private: None,
            secure: false,
            identity: server.identity(),
        };
        assert_eq!(
            client.poll_action(),
            Some(Action::Established {
                conn: 7,
                peer: want,
                keys: Box::new(server_keys),
                verified: true,
                mac: addr(1).mac,
            })
        );
        assert_eq!(
            client.poll_action(),
            None,
            "duplicate replies change nothing"
        );
        client.handle_timeout(5000);
        assert_eq!(client.poll_action(), None, "no timeout after the answer");
        assert_eq!(client.next_timeout(), u64::MAX);
    }

    #[test]
    fn a_verified_reject_fails_at_once_an_unverified_one_only_at_the_deadline() {
        for trust in [PeerTrust::FirstUse, PeerTrust::Unverified] {
            let (mut c, mut s) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
            c.connect(1, 1, 1, 1, addr(1), 5, 0, &opts(trust)).unwrap();
            c.connect(2, 2, 2, 2, addr(1), 6, 0, &opts(trust)).unwrap();
            let reqs = sent(&mut c);
            for r in &reqs {
                s.handle(addr(2), *r, &[], 0).unwrap();
            }
            for ch in sent(&mut s) {
                c.handle(addr(1), ch, &[], 0).unwrap();
            }
            let second = sent(&mut c)[1];
            s.handle(addr(2), second, &[], 0).unwrap();
            let Some(Action::Incoming {
                from,
                request,
                peer,
                handshake,
                ..
            }) = s.poll_action()
            else {
                panic!("no incoming");
            };
            s.refuse(
                from,
                request,
                peer.conn,
                RejectReason::NoListener,
                &handshake,
            );
            let reject = sent(&mut s)[0];
            let got = c.handle(addr(1), reject, &[], 0);
            if trust == PeerTrust::FirstUse {
                assert_eq!(got, Ok(()));
                assert_eq!(
                    c.poll_action(),
                    Some(Action::Failed {
                        conn: 2,
                        reason: RejectReason::NoListener,
                        offered: None,
                    })
                );
            } else {
                assert_eq!(got, Err(Ignored::Unverified), "a hint");
                assert_eq!(c.poll_action(), None);
            }
            let mut t = 0;
            while c.next_timeout() != u64::MAX {
                t = c.next_timeout();
                c.handle_timeout(t);
            }
            assert_eq!(t, 1000);
            let mut failed: Vec<_> = std::iter::from_fn(|| c.poll_action()).collect();
            failed.sort_by_key(|a| matches!(a, Action::Failed { conn: 2, .. }));
            let mut want = vec![Action::Failed {
                conn: 1,
                reason: RejectReason::Timeout,
                offered: None,
            }];
            if trust == PeerTrust::Unverified {
                want.push(Action::Failed {
                    conn: 2,
                    reason: RejectReason::NoListener,
                    offered: None,
                });
            }
            assert_eq!(failed, want, "{trust:?}");
            assert_eq!(c.pending(), 0);
        }
    }

    #[test]
    fn a_bystander_can_neither_reject_nor_answer_nor_be_taken_for_a_pinned_listener() {
        let (mut c, mut s) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        let bystander = Cm::new([4; 6], 1514, T);
        c.connect(
            1,
            1,
            1,
            9,
            addr(1),
            5,
            0,
            &opts(PeerTrust::Pinned(s.identity())),
        )
        .unwrap();
        let first = sent(&mut c)[0];
        // A challenge of the bystander's own, naming its key: ignored, remembered.
        let fake = CmMessage::Challenge {
            request: 9,
            client_conn: 1,
            cookie: 77,
            listener: bystander.identity().0,
        };
        assert_eq!(c.handle(addr(4), fake, &[], 0), Err(Ignored::PeerKey));
        assert!(
            sent(&mut c).is_empty(),
            "nothing sent to the bystander's key"
        );
        // The real one goes through; the bystander sees the request and answers first.
        s.handle(addr(2), first, &[], 0).unwrap();
        let ch = sent(&mut s)[0];
        c.handle(addr(1), ch, &[], 0).unwrap();
        let req = sent(&mut c)[0];
        let reject = CmMessage::Reject {
            request: 9,
            reason: RejectReason::NoListener,
            client_conn: 1,
            tag: [0x55; 16],
        };
        assert_eq!(c.handle(addr(1), reject, &[], 0), Err(Ignored::Forged));
        let forged_rep = CmMessage::ConnectRep {
            request: 9,
            conn: 66,
            key: 66,
            isn: 66,
            max_frame: 1514,
            client_conn: 1,
            secure: false,
            ephemeral: bystander.identity().0,
            tag: [0x66; 16],
        };
        assert_eq!(c.handle(addr(1), forged_rep, &[], 0), Err(Ignored::Forged));
        assert_eq!(c.poll_action(), None, "the connect goes on");
        let rep = accept(&mut s, addr(2), req, 80);
        c.handle(addr(1), rep, &[], 0).unwrap();
        assert!(matches!(
            c.poll_action(),
            Some(Action::Established { peer, verified: true, .. }) if peer.conn == 80
        ));
        // Late: a repeat of the real reply is a duplicate; the bystander's reply and
        // REJECT are still forgeries, and counted as such.
        assert_eq!(c.handle(addr(1), rep, &[], 0), Ok(()));
        assert_eq!(c.handle(addr(1), forged_rep, &[], 0), Err(Ignored::Forged));
        assert_eq!(c.handle(addr(1), reject, &[], 0), Err(Ignored::Forged));
        assert_eq!(c.poll_action(), None);
        // Pinned to a key nobody answers with: fails naming that.
        let mut d = Cm::new([2; 6], 1514, T);
        d.connect(
            2,
            1,
            1,
            9,
            addr(1),
            5,
            0,
            &opts(PeerTrust::Pinned(bystander.identity())),
        )
        .unwrap();
        let first = sent(&mut d)[0];
        s.handle(addr(2), first, &[], 0).unwrap();
        let ch = sent(&mut s)[0];
        assert_eq!(d.handle(addr(1), ch, &[], 0), Err(Ignored::PeerKey));
        d.handle_timeout(1000);
        assert_eq!(
            d.poll_action(),
            Some(Action::Failed {
                conn: 2,
                reason: RejectReason::PeerKey,
                offered: Some(s.identity()),
            })
        );
    }

    /// What a node keeps per connection it closes (a pending close and its place in
    /// the output queue): closing 65 536 at once cost 200 + 176 bytes each before.
    /// (64 + 16 until a peer's address could be IPv6: its 17-byte `IpAddr` costs 16.)
    #[test]
    fn a_pending_close_and_its_queue_entry_stay_small() {
        assert!(
            std::mem::size_of::<Pending>() <= 80,
            "{}",
            std::mem::size_of::<Pending>()
        );
        assert_eq!(std::mem::size_of::<Out>(), 16);
    }

    #[test]
    fn a_request_answered_before_the_link_took_it_is_not_sent() {
        let (mut a, _, _, rep) = accepted_pair();
        // The early retry queues the request again; the reply comes before it goes.
        a.handle_timeout(10);
        a.handle(addr(2), rep, &[], 0).unwrap();
        assert!(matches!(a.poll_action(), Some(Action::Established { .. })));
        assert!(sent(&mut a).is_empty(), "the answered request stays unsent");
        assert!(!a.has_output());
    }

    #[test]
    fn a_retry_adds_no_copy_while_the_last_one_waits_for_the_link() {
        let mut c = Cm::new([2; 6], 1514, T);
        for conn in 1..=50 {
            c.connect(conn, 1, 1, 9, addr(1), 5, 0, &opts(PeerTrust::Unverified))
                .unwrap();
        }
        // The link takes nothing for a long while: every retry period fires, yet each
        // request waits once.
        for now in (10..=500).step_by(10) {
            c.handle_timeout(now);
        }
        assert_eq!(c.out.len(), 50, "one copy of each pending request");
        assert_eq!(sent(&mut c).len(), 50);
        // Once the link took them, the next retry (before the deadline) sends each
        // again.
        let due = c.next_timeout();
        assert!(due > 500 && due < 1000, "{due}");
        c.handle_timeout(due - 1);
        assert!(sent(&mut c).is_empty(), "not due yet");
        c.handle_timeout(due);
        assert_eq!(sent(&mut c).len(), 50);
    }

    #[test]
    fn a_second_challenge_with_the_same_cookie_sends_nothing_more() {
        let (mut c, mut s) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        c.connect(1, 1, 1, 9, addr(1), 5, 0, &opts(PeerTrust::Unverified))
            .unwrap();
        let mut reqs = sent(&mut c);
        c.handle_timeout(10); // the early first retry: the request twice
        reqs.extend(sent(&mut c));
        assert_eq!(reqs.len(), 2);
        for r in &reqs {
            s.handle(addr(2), *r, &[], 0).unwrap();
        }
        let chs = sent(&mut s);
        assert_eq!(chs.len(), 2, "each challenged");
        for ch in &chs {
            c.handle(addr(1), *ch, &[], 0).unwrap();
        }
        // One request with the cookie and the handshake, not two (each would cost the
        // listener a key agreement).
        assert_eq!(sent(&mut c).len(), 1);
    }

    #[test]
    fn a_secure_connect_needs_a_listener_key_it_trusts() {
        let mut c = Cm::new([2; 6], 1514, T);
        let o = ConnectOptions {
            secure: Security::On,
            ..ConnectOptions::default()
        };
        assert_eq!(
            c.connect(1, 1, 1, 1, addr(1), 5, 0, &o),
            Err(CmError::NoPeerKey)
        );
        let o = ConnectOptions {
            peer_key: PeerTrust::FirstUse,
            ..o
        };
        assert_eq!(c.connect(1, 1, 1, 1, addr(1), 5, 0, &o), Ok(()));
    }

    #[test]
    fn a_late_repeat_of_an_accepted_request_makes_no_second_connection() {
        let (mut a, mut b, req, rep) = accepted_pair();
        a.handle(addr(2), rep, &[], 0).unwrap();
        assert!(matches!(a.poll_action(), Some(Action::Established { .. })));
        // The server closes at once; the client's request arrives again meanwhile.
        b.close(80, addr(1), 70, 0, 0);
        sent(&mut b);
        b.handle(addr(1), req, &[], 0).unwrap();
        assert_eq!(b.poll_action(), None, "no second Incoming while closing");
        assert_eq!(sent(&mut b), vec![rep], "answered from memory");
    }

    #[test]
    fn a_repeat_after_the_peer_was_heard_is_ignored_and_the_reply_no_longer_kept() {
        let (_, mut b, req, rep) = accepted_pair();
        // Before the client is heard on the connection, a repeat is answered (the
        // reply may have been lost).
        b.handle(addr(1), req, &[], 0).unwrap();
        assert_eq!(sent(&mut b), vec![rep]);
        b.heard(80);
        assert!(b.accepted.is_empty(), "the reply is not kept");
        assert_eq!(b.answered.get(&(addr(1).ip, 70)), Some(&80));
        assert_eq!(b.handle(addr(1), req, &[], 0), Err(Ignored::Repeated));
        assert_eq!(b.poll_action(), None, "no second Incoming");
        assert!(sent(&mut b).is_empty(), "nothing answered");
        // Heard twice, or a connection it never accepted: nothing changes.
        b.heard(80);
        b.heard(12345);
        assert_eq!(b.answered.len(), 1);
        // Once the connection is gone, nothing of it is kept.
        b.forget(80);
        assert!(b.answered.is_empty() && b.known.is_empty());
    }

    #[test]
    fn a_close_needs_the_connections_mac_and_a_repeat_is_answered_while_it_lingers() {
        let (mut a, mut b, _, rep) = accepted_pair();
        a.handle(addr(2), rep, &[], 0).unwrap();
        assert!(matches!(a.poll_action(), Some(Action::Established { .. })));
        a.close(70, addr(2), 80, 33, 0);
        let good = sent(&mut a)[0];
        // A bystander's copies with another MAC, or naming another ack: ignored.
        let CmMessage::DisconnectReq { mac, .. } = good else {
            panic!("{good:?}")
        };
        let forged = [
            CmMessage::DisconnectReq {
                target: 80,
                sender: 70,
                ack: 33,
                mac: [0; 16],
            },
            CmMessage::DisconnectReq {
                target: 80,
                sender: 70,
                ack: 34,
                mac,
            },
        ];
        for f in forged {
            assert_eq!(b.handle(addr(1), f, &[], 0), Err(Ignored::Forged));
        }
        assert_eq!(b.poll_action(), None);
        assert!(sent(&mut b).is_empty());
        b.handle(addr(1), good, &[], 0).unwrap();
        assert_eq!(
            b.poll_action(),
            Some(Action::PeerClosed { conn: 80, ack: 33 })
        );
        let drep = sent(&mut b);
        assert!(matches!(
            drep[..],
            [CmMessage::DisconnectRep { sender: 70, .. }]
        ));
        // A forged answer does not end the close.
        let fake = CmMessage::DisconnectRep {
            sender: 70,
            mac: [1; 16],
        };
        assert_eq!(a.handle(addr(2), fake, &[], 0), Err(Ignored::Forged));
        assert_eq!(a.poll_action(), None);
        // A repeat (the answer was lost) is answered again while the keys linger.
        b.handle(addr(1), good, &[], 500).unwrap();
        assert_eq!(b.poll_action(), None);
        assert_eq!(sent(&mut b), drep);
        a.handle(addr(2), drep[0], &[], 0).unwrap();
        assert_eq!(a.poll_action(), Some(Action::Closed { conn: 70 }));
        // After a CM timeout the keys are gone, and so is the answer.
        b.handle_timeout(1000);
        assert_eq!(b.handle(addr(1), good, &[], 1000), Err(Ignored::WrongKey));
        assert!(sent(&mut b).is_empty());
        assert_eq!(b.next_timeout(), u64::MAX);
        assert!(b.lingering.is_empty() && b.known.is_empty());
    }

    /// Request `m` with its cookie, and its service if given, replaced.
    fn req_with(m: CmMessage, cookie: u64, service: Option<u32>) -> CmMessage {
        let mut m = m;
        if let CmMessage::ConnectReq {
            cookie: c,
            service: s,
            ..
        } = &mut m
        {
            *c = cookie;
            *s = service.unwrap_or(*s);
        }
        m
    }

    #[test]
    fn a_cookie_is_bound_to_the_request_its_address_and_its_time() {
        let (mut a, mut b) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        a.connect(70, 0x5e, 1, 9, addr(2), 4, 0, &opts(PeerTrust::Unverified))
            .unwrap();
        let good = challenged(&mut a, &mut b, addr(1), addr(2));
        let CmMessage::ConnectReq { cookie, .. } = good else {
            panic!("{good:?}")
        };
        // Forged, from another address, for another service, with other private data:
        // each refused and challenged anew, nothing made.
        let forged = req_with(good, cookie ^ 1, None);
        assert_eq!(b.handle(addr(1), forged, &[], 0), Err(Ignored::BadCookie));
        assert_eq!(b.handle(addr(9), good, &[], 0), Err(Ignored::BadCookie));
        assert_eq!(b.handle(addr(1), good, b"x", 0), Err(Ignored::BadCookie));
        let other = req_with(good, cookie, Some(5));
        assert_eq!(b.handle(addr(1), other, &[], 0), Err(Ignored::BadCookie));
        assert_eq!(b.poll_action(), None);
        assert_eq!(sent(&mut b).len(), 4, "each challenged");
        // With the cookie but its handshake changed: refused as forged.
        let mut bent = good;
        if let CmMessage::ConnectReq {
            handshake: Some(h), ..
        } = &mut bent
        {
            h[3] ^= 1;
        }
        assert_eq!(b.handle(addr(1), bent, &[], 0), Err(Ignored::Forged));
        assert_eq!(b.poll_action(), None);
        // Good for the rest of its period and the next; not after.
        b.handle(addr(1), good, &[], 2 * T.timeout - 1).unwrap();
        assert!(matches!(b.poll_action(), Some(Action::Incoming { .. })));
        let mut c = Cm::with_limits(
            [3; 6],
            1514,
            T,
            &CmLimits::default(),
            1_000_000,
            b.identity.clone(),
        );
        c.secret = b.secret;
        assert_eq!(
            c.handle(addr(1), good, &[], 2 * T.timeout),
            Err(Ignored::BadCookie)
        );
        assert_eq!(c.poll_action(), None);
    }

    #[test]
    fn a_flood_of_spoofed_requests_leaves_no_state_and_challenges_at_the_set_rate() {
        let limits = CmLimits {
            per_source: 10,
            per_source_burst: 2,
            challenges: 1000,
            challenges_burst: 100,
            ..CmLimits::default()
        };
        let id = || Arc::new(Identity::generate().unwrap());
        // A clock of 1 MHz: 100 challenges at once, then one per 1000 ticks.
        let mut s = Cm::with_limits([3; 6], 1514, T, &limits, 1_000_000, id());
        let mut refused = 0;
        for i in 0..10_000u32 {
            let from = NodeAddr::from_ip(i.to_be_bytes(), crate::wire::UDP_PORT);
            let req = CmMessage::ConnectReq {
                request: i,
                service: 4,
                conn: i.wrapping_mul(2_654_435_761),
                key: u64::from(i),
                isn: i,
                max_frame: 1514,
                mac: [2, 0, 0, 0, 0, i as u8],
                cookie: u64::from(i) << 20,
                secure: false,
                ephemeral: [i as u8; 32],
                handshake: Some([i as u8; HANDSHAKE_LEN]),
            };
            match s.handle(from, req, &[], u64::from(i)) {
                Err(Ignored::RateLimited) => refused += 1,
                Err(Ignored::BadCookie) | Ok(()) => {}
                Err(e) => panic!("{e:?}"),
            }
            assert_eq!(s.poll_action(), None, "no connection for a spoofed request");
        }
        assert!(s.known.is_empty() && s.accepted.is_empty() && s.pending.is_empty());
        let challenges = sent(&mut s).len() as u64;
        assert_eq!(challenges, s.challenges_sent());
        // 10 000 requests over 10 000 ticks: the burst and ten more.
        assert!((100..=111).contains(&challenges), "{challenges}");
        assert_eq!(refused, 10_000 - challenges);
        // One source over its own rate: two at once, then one per 100 000 ticks.
        let mut t = Cm::with_limits([3; 6], 1514, T, &limits, 1_000_000, id());
        let mut c = Cm::new([2; 6], 1514, T);
        c.connect(1, 1, 1, 1, addr(3), 4, 0, &opts(PeerTrust::Unverified))
            .unwrap();
        let req = sent(&mut c)[0];
        let got: Vec<_> = (0..4).map(|_| t.handle(addr(2), req, &[], 7)).collect();
        assert_eq!(
            got,
            [
                Ok(()),
                Ok(()),
                Err(Ignored::RateLimited),
                Err(Ignored::RateLimited)
            ]
        );
        assert_eq!(t.handle(addr(2), req, &[], 100_007), Ok(()));
    }
}
