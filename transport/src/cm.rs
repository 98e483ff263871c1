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
//! ```text
//! host / node                         Cm                              peer
//! connect(conn, ..)  ───────────────▶ pending connect ── CONNECT_REQ ─▶ (retried)
//!                                     ◀─ CHALLENGE (cookie) ────────────
//!                                     ── CONNECT_REQ (cookie) ────────▶
//!                                     ◀─ CONNECT_REP / REJECT ──────────
//! Action::Established / Failed ◀───── (or the timeout)
//!                                     ◀─ CONNECT_REQ ───────────────────
//!                                     ── CHALLENGE (nothing kept) ────▶
//!                                     ◀─ CONNECT_REQ (cookie checks) ───
//! Action::Incoming ◀────────────────  (a repeat is answered alone)
//! accepted(..) / refuse(..) ────────▶ ── CONNECT_REP / REJECT ────────▶
//! close(conn, ..) ──────────────────▶ pending close ── DISCONNECT_REQ ▶ (retried)
//! Action::Closed ◀─────────────────── ◀─ DISCONNECT_REP (or the timeout)
//! Action::PeerClosed ◀─────────────── ◀─ DISCONNECT_REQ (key checked), answered
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hasher;
use std::sync::Arc;

use siphasher::sip::SipHasher24;

use crate::connection::Priority;
use crate::reliability::SACK_BITS;
use crate::tables::{NodeAddr, RegWindow};

pub use crate::wire::cm::{CmMessage, CmWireError, Confirm, PublicKey, RejectReason};

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
    pub registers: Registers,
    /// Whether the peer may force interrupts (cond ALWAYS, software exceptions).
    pub allow_forced_interrupts: bool,
    /// Whether refused messages are also reported on the endpoint's event queue.
    pub report_traps: bool,
    /// The instruction window the peer's instruction pointers name (from
    /// `Node::instructions`; empty: none).
    pub instructions: RegWindow,
    /// Isolation mode: only instruction-pointer messages are taken from the peer.
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
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            sq_depth: 4096,
            priority: Priority::Low,
            registers: Registers::None,
            allow_forced_interrupts: true,
            report_traps: false,
            instructions: RegWindow::EMPTY,
            isolated: false,
            receive_window: SACK_BITS,
            private_data: None,
            require_private_data: None,
            secure: Security::Off,
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
    /// The peer's X25519 public key: a secure connection (`crate::secure`).
    pub public: Option<PublicKey>,
    /// A listener's key confirmation (in a reply of a secure connection; zero
    /// otherwise).
    pub confirm: Confirm,
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
    },
    /// Our request was accepted: connection `conn` is up.
    Established { conn: u32, peer: PeerParams },
    /// Our request was refused, or went unanswered until the timeout.
    Failed { conn: u32, reason: RejectReason },
    /// The peer closed `conn`: what ran at the peer (before `ack`) completes, the rest
    /// is flushed, the entry goes.
    PeerClosed { conn: u32, ack: u32 },
    /// Our close of `conn` is over (answered, or the timeout): the entry goes.
    Closed { conn: u32 },
}

/// Why a message was ignored (the node counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// A disconnect request with the wrong key.
    WrongKey,
    /// A connect request whose cookie did not check: challenged anew.
    BadCookie,
    /// A connect request over its source's rate, or a first request over the node's
    /// rate of challenges: unanswered.
    RateLimited,
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
    /// What is repeated until answered, with its private data.
    msg: CmMessage,
    private: PrivateData,
    next_retry: u64,
    deadline: u64,
}

/// What the machine knows of a connection of the node's: its key (a disconnect request
/// must name it) and, for one it accepted, the request that made it.
#[derive(Debug, Clone, Copy)]
struct Known {
    key: u64,
    accepted_from: Option<([u8; 4], u32)>,
}

/// The connection-management machine of one node.
pub struct Cm {
    local_mac: [u8; 6],
    max_frame: u32,
    timing: CmTiming,
    /// The cookies' key (random per node), and their period.
    secret: (u64, u64),
    period: u64,
    per_source: Rate,
    challenge_rate: Rate,
    sources: Box<[u64; SOURCE_BUCKETS]>,
    challenge_tat: u64,
    challenges: u64,
    known: HashMap<u32, Known>,
    /// Our requests waiting for answers (connects and closes), by our connection.
    pending: HashMap<u32, Pending>,
    /// (peer ip, peer connection) -> our connection and the reply that accepted it.
    accepted: HashMap<([u8; 4], u32), (u32, CmMessage, PrivateData)>,
    /// Retry and give-up times, earliest first (stale entries are skipped).
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    out: VecDeque<(NodeAddr, CmMessage, PrivateData)>,
    actions: VecDeque<Action>,
}

impl Cm {
    /// The machine of a node whose frames come from `local_mac` and are at most
    /// `max_frame` bytes, with the default limits on a clock of 1 MHz (the node uses
    /// [`Cm::with_limits`] with its own).
    pub fn new(local_mac: [u8; 6], max_frame: u32, timing: CmTiming) -> Cm {
        Cm::with_limits(
            local_mac,
            max_frame,
            timing,
            &CmLimits::default(),
            1_000_000,
        )
    }

    /// [`Cm::new`] with `limits` on a clock of `hz` ticks per second.
    pub fn with_limits(
        local_mac: [u8; 6],
        max_frame: u32,
        timing: CmTiming,
        limits: &CmLimits,
        hz: u64,
    ) -> Cm {
        Cm {
            local_mac,
            max_frame,
            timing,
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
            pending: HashMap::new(),
            accepted: HashMap::new(),
            timers: BinaryHeap::new(),
            out: VecDeque::new(),
            actions: VecDeque::new(),
        }
    }

    /// Starts connecting our connection `conn` (key, initial sequence number) to
    /// `service` at `to`, with `private` data for the peer.
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
        private: PrivateData,
        public: Option<PublicKey>,
    ) {
        let msg = CmMessage::ConnectReq {
            request,
            service,
            conn,
            key,
            isn,
            max_frame: self.max_frame,
            mac: self.local_mac,
            cookie: 0,
            public,
        };
        self.known.insert(
            conn,
            Known {
                key,
                accepted_from: None,
            },
        );
        self.request(conn, to, msg, private, now);
    }

    /// Starts closing our connection `conn`, known to the peer at `to` as
    /// `peer_conn`/`peer_key`; `ack` is our cumulative acknowledgement.
    pub fn close(
        &mut self,
        conn: u32,
        to: NodeAddr,
        peer_conn: u32,
        peer_key: u64,
        ack: u32,
        now: u64,
    ) {
        let msg = CmMessage::DisconnectReq {
            target: peer_conn,
            key: peer_key,
            sender: conn,
            ack,
        };
        // A repeat of the request that made it is still answered from memory until
        // the entry goes (a new connection for it would be a ghost).
        self.request(conn, to, msg, None, now);
    }

    fn request(&mut self, conn: u32, to: NodeAddr, msg: CmMessage, private: PrivateData, now: u64) {
        let (next_retry, deadline) = (now + self.timing.first_retry, now + self.timing.timeout);
        self.out.push_back((to, msg, private.clone()));
        self.pending.insert(
            conn,
            Pending {
                to,
                msg,
                private,
                next_retry,
                deadline,
            },
        );
        self.timers.push(Reverse((next_retry.min(deadline), conn)));
    }

    /// The node accepted the request of [`Action::Incoming`] as our connection `conn`,
    /// answering with `private` data (and, for a secure connection, our public key and
    /// key confirmation).
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
        secure: Option<(PublicKey, Confirm)>,
    ) {
        let rep = CmMessage::ConnectRep {
            request,
            conn,
            key,
            isn,
            max_frame: self.max_frame,
            client_conn: peer_conn,
            secure,
        };
        let at = (from.ip, peer_conn);
        self.accepted.insert(at, (conn, rep, private.clone()));
        self.known.insert(
            conn,
            Known {
                key,
                accepted_from: Some(at),
            },
        );
        self.out.push_back((from, rep, private));
    }

    /// The node refuses the request of [`Action::Incoming`].
    pub fn refuse(&mut self, from: NodeAddr, request: u32, peer_conn: u32, reason: RejectReason) {
        let msg = CmMessage::Reject {
            request,
            reason,
            client_conn: peer_conn,
        };
        self.out.push_back((from, msg, None));
    }

    /// A secure connection `conn`'s peer closes it with `close_key`
    /// (`crate::secure::Session::own_close_key`), not with the connection key, which
    /// every header shows.
    pub fn set_close_key(&mut self, conn: u32, close_key: u64) {
        if let Some(k) = self.known.get_mut(&conn) {
            k.key = close_key;
        }
    }

    /// The node removed connection `conn`: nothing more is said of it.
    pub fn forget(&mut self, conn: u32) {
        self.forget_accepted(conn);
        self.known.remove(&conn);
        self.pending.remove(&conn);
    }

    fn forget_accepted(&mut self, conn: u32) {
        if let Some(at) = self
            .known
            .get_mut(&conn)
            .and_then(|k| k.accepted_from.take())
        {
            self.accepted.remove(&at);
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
            CmMessage::ConnectReq { .. } => return self.connect_request(from, msg, private, now),
            CmMessage::Challenge {
                request,
                client_conn,
                cookie,
            } => self.challenged(client_conn, request, cookie, now),
            CmMessage::ConnectRep {
                request,
                conn,
                key,
                isn,
                max_frame,
                client_conn,
                secure,
            } => {
                let peer = PeerParams {
                    conn,
                    key,
                    isn,
                    max_frame,
                    private: private_data(private),
                    public: secure.map(|s| s.0),
                    confirm: secure.map(|s| s.1).unwrap_or_default(),
                };
                self.connect_answer(client_conn, request, Ok(peer));
            }
            CmMessage::Reject {
                request,
                reason,
                client_conn,
            } => self.connect_answer(client_conn, request, Err(reason)),
            CmMessage::DisconnectReq {
                target,
                key,
                sender,
                ack,
            } => return self.disconnect_request(from, target, key, sender, ack),
            CmMessage::DisconnectRep { sender } => self.disconnect_answer(sender),
        }
        Ok(())
    }

    /// The cookie of request `msg` from `from` with `private` data in period `epoch`
    /// (never 0): over the request as it travels, its cookie cleared, so every field of
    /// it and its private data count.
    fn cookie(&self, from: &NodeAddr, msg: &CmMessage, private: &[u8], epoch: u64) -> u64 {
        let mut bytes = [0u8; crate::wire::cm::CM_PAYLOAD_MAX];
        let (c, len) = msg.without_cookie().emit(private, &mut bytes);
        let mut h = SipHasher24::new_with_keys(self.secret.0, self.secret.1);
        h.write_u64(epoch);
        h.write(&from.ip);
        h.write_u32(c.operand);
        h.write_u32(c.index);
        h.write(&bytes[..len]);
        h.finish().max(1)
    }

    /// A peer's connect request: over its source's rate it goes unanswered; a repeat
    /// of one accepted is answered the same way (the answer may have been lost); one
    /// that echoes its cookie goes to the node; any other is challenged (if the node's
    /// rate of challenges allows) and forgotten.
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
            public,
        } = msg
        else {
            return Ok(());
        };
        // The payload's MAC, which the frame's CRC covers.
        let from = NodeAddr { mac, ..from };
        let mut h = SipHasher24::new_with_keys(self.secret.1, self.secret.0);
        h.write(&from.ip);
        let bucket = &mut self.sources[h.finish() as usize % SOURCE_BUCKETS];
        if !self.per_source.admit(bucket, now) {
            return Err(Ignored::RateLimited);
        }
        if let Some((_, rep, data)) = self.accepted.get(&(from.ip, conn)) {
            self.out.push_back((from, *rep, data.clone()));
            return Ok(());
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
            };
            self.out.push_back((from, challenge, None));
            self.challenges += 1;
            return if cookie == 0 {
                Ok(())
            } else {
                Err(Ignored::BadCookie)
            };
        }
        let peer = PeerParams {
            conn,
            key,
            isn,
            max_frame,
            private: private_data(private),
            public,
            confirm: Confirm::default(),
        };
        self.actions.push_back(Action::Incoming {
            from,
            request,
            service,
            peer,
        });
        Ok(())
    }

    /// The listener's challenge to our pending connect `conn`: the request goes again
    /// at once with the cookie (and so do its retries, the next one a retry period
    /// from now: the link is up, and the answer a round trip away again). One for no
    /// pending request of ours changes nothing.
    fn challenged(&mut self, conn: u32, request: u32, cookie: u64, now: u64) {
        if !self.answers(conn, request) {
            return;
        }
        let Some(p) = self.pending.get_mut(&conn) else {
            return;
        };
        if let CmMessage::ConnectReq { cookie: c, .. } = &mut p.msg {
            *c = cookie;
        }
        self.out.push_back((p.to, p.msg, p.private.clone()));
        p.next_retry = now + self.timing.retry;
        self.timers
            .push(Reverse((p.next_retry.min(p.deadline), conn)));
    }

    /// Challenges sent so far.
    pub fn challenges_sent(&self) -> u64 {
        self.challenges
    }

    /// The answer to our connect request for `conn`: accepted or refused. Duplicate
    /// and stale answers change nothing.
    fn connect_answer(
        &mut self,
        conn: u32,
        request: u32,
        answer: Result<PeerParams, RejectReason>,
    ) {
        if !self.answers(conn, request) {
            return;
        }
        match answer {
            Ok(peer) => {
                self.pending.remove(&conn);
                self.actions.push_back(Action::Established { conn, peer });
            }
            Err(reason) => {
                self.forget(conn);
                self.actions.push_back(Action::Failed { conn, reason });
            }
        }
    }

    /// The peer closes our connection `target`: with the right key it goes; answered
    /// either way (a repeat finds it gone).
    fn disconnect_request(
        &mut self,
        from: NodeAddr,
        target: u32,
        key: u64,
        sender: u32,
        ack: u32,
    ) -> Result<(), Ignored> {
        if let Some(k) = self.known.get(&target) {
            if k.key != key {
                return Err(Ignored::WrongKey);
            }
            self.forget(target);
            self.actions
                .push_back(Action::PeerClosed { conn: target, ack });
        }
        self.out
            .push_back((from, CmMessage::DisconnectRep { sender }, None));
        Ok(())
    }

    /// The answer to our close of `conn`.
    fn disconnect_answer(&mut self, conn: u32) {
        let closing = self
            .pending
            .get(&conn)
            .is_some_and(|p| matches!(p.msg, CmMessage::DisconnectReq { .. }));
        if closing {
            self.forget(conn);
            self.actions.push_back(Action::Closed { conn });
        }
    }

    /// Whether a connect answer for `conn` answers its pending request (not a
    /// duplicate, not a stale one).
    fn answers(&self, conn: u32, request: u32) -> bool {
        self.pending.get(&conn).is_some_and(
            |p| matches!(p.msg, CmMessage::ConnectReq { request: r, .. } if r == request),
        )
    }

    /// When [`Cm::handle_timeout`] is next due (`u64::MAX`: nothing pending).
    pub fn next_timeout(&self) -> u64 {
        self.timers.peek().map_or(u64::MAX, |t| t.0 .0)
    }

    /// Retries the requests due and gives up on those past their deadline.
    pub fn handle_timeout(&mut self, now: u64) {
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
                let closing = matches!(p.msg, CmMessage::DisconnectReq { .. });
                self.forget(conn);
                self.actions.push_back(if closing {
                    Action::Closed { conn }
                } else {
                    Action::Failed {
                        conn,
                        reason: RejectReason::Timeout,
                    }
                });
                continue;
            }
            p.next_retry = now + self.timing.retry;
            let (to, msg, t) = (p.to, p.msg, p.next_retry.min(p.deadline));
            self.out.push_back((to, msg, p.private.clone()));
            self.timers.push(Reverse((t, conn)));
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
        self.out.pop_front()
    }

    /// Puts back a message the link could not take (it goes first next time).
    pub fn unpoll(&mut self, to: NodeAddr, msg: CmMessage, private: PrivateData) {
        self.out.push_front((to, msg, private));
    }

    /// Connections with a request under way.
    pub fn pending(&self) -> usize {
        self.pending.len()
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

    /// The client's pending request through the server's challenge: the request that
    /// carries the cookie (the server keeps nothing meanwhile).
    fn challenged(client: &mut Cm, server: &mut Cm, c: NodeAddr, s: NodeAddr) -> CmMessage {
        let req = sent(client)[0];
        server.handle(c, req, &[], 0).unwrap();
        assert_eq!(server.poll_action(), None);
        let ch = sent(server)[0];
        client.handle(s, ch, &[], 0).unwrap();
        sent(client)[0]
    }

    #[test]
    fn a_connect_is_retried_then_established_once() {
        let (mut client, mut server) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 9014, T));
        client.connect(7, 0xaa, 100, 55, addr(1), 18, 0, None, None);
        let req = sent(&mut client);
        assert_eq!(req.len(), 1);
        client.handle_timeout(10);
        client.handle_timeout(110);
        assert_eq!(
            sent(&mut client),
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
                ..
            }]
        ));
        client.handle(addr(1), ch[0], &[], 0).unwrap();
        let req = sent(&mut client);
        assert!(
            matches!(req[..], [CmMessage::ConnectReq { cookie, .. }] if cookie != 0),
            "sent again at once, with the cookie"
        );
        // Three copies with the cookie reach the server: one Incoming, three identical
        // replies.
        server.handle(addr(2), req[0], &[], 0).unwrap();
        let Some(Action::Incoming {
            from,
            request,
            peer,
            ..
        }) = server.poll_action()
        else {
            panic!("no incoming");
        };
        assert_eq!(from.mac, [2; 6], "learned from the request's payload");
        server.accepted(from, request, peer.conn, 9, 0xbb, 200, None, None);
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
            public: None,
            confirm: Confirm::default(),
        };
        assert_eq!(
            client.poll_action(),
            Some(Action::Established {
                conn: 7,
                peer: want
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
    fn an_unanswered_connect_fails_at_its_deadline_and_a_reject_fails_at_once() {
        let mut c = Cm::new([2; 6], 1514, T);
        c.connect(1, 1, 1, 1, addr(1), 5, 0, None, None);
        c.connect(2, 2, 2, 2, addr(1), 6, 0, None, None);
        c.handle(
            addr(1),
            CmMessage::Reject {
                request: 2,
                reason: RejectReason::NoListener,
                client_conn: 2,
            },
            &[],
            0,
        )
        .unwrap();
        assert_eq!(
            c.poll_action(),
            Some(Action::Failed {
                conn: 2,
                reason: RejectReason::NoListener
            })
        );
        let mut t = 0;
        while c.next_timeout() != u64::MAX {
            t = c.next_timeout();
            c.handle_timeout(t);
        }
        assert_eq!(t, 1000);
        assert_eq!(
            c.poll_action(),
            Some(Action::Failed {
                conn: 1,
                reason: RejectReason::Timeout
            })
        );
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn a_late_repeat_of_an_accepted_request_makes_no_second_connection() {
        let (mut a, mut b) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        a.connect(70, 0x5e, 1, 9, addr(2), 4, 0, None, None);
        let req = challenged(&mut a, &mut b, addr(1), addr(2));
        b.handle(addr(1), req, &[], 0).unwrap();
        let Some(Action::Incoming {
            from,
            request,
            peer,
            ..
        }) = b.poll_action()
        else {
            panic!("no incoming");
        };
        b.accepted(from, request, peer.conn, 80, 0x77, 0, None, None);
        let rep = sent(&mut b);
        // The server closes at once; the client's request arrives again meanwhile.
        b.close(80, from, 70, 0x5e, 0, 0);
        sent(&mut b);
        b.handle(addr(1), req, &[], 0).unwrap();
        assert_eq!(b.poll_action(), None, "no second Incoming while closing");
        assert_eq!(sent(&mut b), rep, "answered from memory");
    }

    #[test]
    fn a_close_checks_the_key_and_is_answered_even_when_unknown() {
        let (mut a, mut b) = (Cm::new([2; 6], 1514, T), Cm::new([3; 6], 1514, T));
        // b accepted a's connection 70 as its 80 (key 0x5e).
        b.accepted(addr(1), 1, 70, 80, 0x5e, 0, None, None);
        sent(&mut b);
        a.close(70, addr(2), 80, 0x66, 33, 0);
        let bad = sent(&mut a)[0];
        assert_eq!(b.handle(addr(1), bad, &[], 0), Err(Ignored::WrongKey));
        assert_eq!(b.poll_action(), None);
        assert!(sent(&mut b).is_empty());
        a.close(70, addr(2), 80, 0x5e, 33, 0);
        let good = sent(&mut a)[0];
        b.handle(addr(1), good, &[], 0).unwrap();
        assert_eq!(
            b.poll_action(),
            Some(Action::PeerClosed { conn: 80, ack: 33 })
        );
        let rep = sent(&mut b);
        assert_eq!(rep, vec![CmMessage::DisconnectRep { sender: 70 }]);
        // A repeat (the answer was lost) is answered again; nothing else happens.
        b.handle(addr(1), good, &[], 0).unwrap();
        assert_eq!(b.poll_action(), None);
        assert_eq!(sent(&mut b), rep);
        a.handle(addr(2), rep[0], &[], 0).unwrap();
        assert_eq!(a.poll_action(), Some(Action::Closed { conn: 70 }));
        assert_eq!(a.next_timeout(), 10, "a stale timer entry is left");
        a.handle_timeout(2000);
        assert_eq!(a.poll_action(), None, "and skipped");
        assert!(sent(&mut a).is_empty());
    }

    /// Request `m` with its cookie, and its service if given, replaced.
    fn req_with(m: CmMessage, cookie: u64, service: Option<u32>) -> CmMessage {
        let mut m = m.without_cookie();
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
        a.connect(70, 0x5e, 1, 9, addr(2), 4, 0, None, None);
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
        // Good for the rest of its period and the next; not after.
        b.handle(addr(1), good, &[], 2 * T.timeout - 1).unwrap();
        assert!(matches!(b.poll_action(), Some(Action::Incoming { .. })));
        let mut c = Cm::new([3; 6], 1514, T);
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
        };
        // A clock of 1 MHz: 100 challenges at once, then one per 1000 ticks.
        let mut s = Cm::with_limits([3; 6], 1514, T, &limits, 1_000_000);
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
                public: None,
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
        let mut t = Cm::with_limits([3; 6], 1514, T, &limits, 1_000_000);
        let mut c = Cm::new([2; 6], 1514, T);
        c.connect(1, 1, 1, 1, addr(3), 4, 0, None, None);
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
