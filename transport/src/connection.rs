//! What a connection shares between the application and the worker: [`ConnShared`] —
//! where the application posts work requests (`post`, `post_list`: its place in the
//! node's submission ring, `crate::submit`), the arrival counter it may poll (MINI's PDU
//! count), the state ([`ConnState`]), the peer's proven identity.
//!
//! The rest of a connection is elsewhere, each part below what uses it: work requests
//! and completions in `crate::wr` (re-exported here), completion queues in `crate::cq`
//! (re-exported here), and the node's own entry (sequence state, queues, what the
//! peer may touch: docs/design.md §3) in `crate::node::conn`, which the application
//! never sees.
//!
//! Connection numbers, keys and initial sequence numbers come from the OS random
//! source, never from counters (ReDMArk).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

pub use crate::cq::CqShared;
use crate::submit::{PostError, Submission, SubmitRing};
pub use crate::wr::{
    CellKind, Completion, Pending, Priority, Remote, Source, WcStatus, Work, WorkCell, Wqe,
    WrOpcode, WR_SIGNALED,
};

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
    /// Whether the connection is up: `Normal`, or `Exceptioned` — the receive side's
    /// state (a message of the peer's held for the host), in which it still sends as a
    /// normal one.
    #[inline]
    pub fn is_up(self) -> bool {
        matches!(self, ConnState::Normal | ConnState::Exceptioned)
    }

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

pub use crate::reliability::seq_lt;

/// The shard that owns connection `number` on a node of `shards` shards: its low byte
/// (numbers are drawn so, [`crate::node::conn::ConnContext`] numbers of shard k end in k).
#[inline]
pub fn shard_of_conn(number: u32) -> u8 {
    number as u8
}

/// A random nonzero u32 from the OS random source (from a seeded stream in a
/// simulation that asks for one: `crate::rng::SeededNumbers`).
pub fn random_u32() -> u32 {
    #[cfg(any(test, feature = "sim"))]
    while let Some(v) = crate::rng::seeded_u64() {
        if v as u32 != 0 {
            return v as u32;
        }
    }
    loop {
        let mut b = [0u8; 4];
        getrandom::getrandom(&mut b).expect("OS random source");
        let v = u32::from_ne_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

/// A random nonzero u64 from the OS random source (or a simulation's seeded stream).
pub fn random_u64() -> u64 {
    #[cfg(any(test, feature = "sim"))]
    while let Some(v) = crate::rng::seeded_u64() {
        if v != 0 {
            return v;
        }
    }
    loop {
        let mut b = [0u8; 8];
        getrandom::getrandom(&mut b).expect("OS random source");
        let v = u64::from_ne_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

impl ConnShared {
    /// Posts a work request: reserves its place in the connection's send queue and,
    /// when signaled, its completion-queue slot, then hands it to the worker. Fails
    /// with nothing queued. Returns the connection's requests now waiting for the
    /// worker, this one included (as [`ConnShared::reserve_n`]).
    #[inline]
    pub fn post(&self, wr: &Wqe) -> Result<usize, PostError> {
        self.post_list(std::slice::from_ref(wr).iter())
    }

    /// Posts `wrs` in order, all or none (a verbs list of work requests): one
    /// reservation of their places, of the completion slots of the signaled ones, and
    /// of consecutive places on the node's ring. Returns the connection's requests now
    /// waiting for the worker, these included.
    #[inline]
    pub fn post_list<'w, I>(&self, wrs: I) -> Result<usize, PostError>
    where
        I: ExactSizeIterator<Item = &'w Wqe> + Clone,
    {
        let n = wrs.len();
        if n == 0 {
            return Ok(self.queued());
        }
        let signaled = wrs.clone().filter(|w| w.flags & WR_SIGNALED != 0).count();
        let waiting = self.reserve_n(n, signaled)?;
        let Some(claim) = self.ring.claim(n) else {
            self.unreserve_n(n, signaled);
            return Err(PostError::RingFull {
                capacity: self.ring.capacity(),
            });
        };
        let mut wrs = wrs;
        claim.fill(|_| self.submission(wrs.next().expect("as many requests as places")));
        Ok(waiting)
    }

    /// Takes places in the send queue for `n` requests (at least 1) and completion-queue
    /// slots for the `signaled` of them — all or none. Returns the requests of the
    /// connection waiting for the worker with these (at least that many: a concurrent
    /// post may add to them).
    #[inline]
    pub fn reserve_n(&self, n: usize, signaled: usize) -> Result<usize, PostError> {
        let n32 = n as u32;
        let before = self.posted.fetch_add(n32, Ordering::AcqRel);
        // `taken` is read after the increment: a stale value only undercounts room.
        let waiting = before.wrapping_sub(self.taken.load(Ordering::Acquire));
        if n == 0 || n > self.depth as usize || waiting > self.depth - n32 {
            self.posted.fetch_sub(n32, Ordering::AcqRel);
            return Err(PostError::QueueFull {
                depth: self.depth as usize,
            });
        }
        if signaled > 0 && !self.cq.reserve_n(signaled) {
            self.posted.fetch_sub(n32, Ordering::AcqRel);
            return Err(PostError::CompletionQueueFull {
                depth: self.cq.capacity(),
            });
        }
        Ok((waiting + n32) as usize)
    }

    /// Gives back what [`ConnShared::reserve_n`] took (a post that failed later).
    #[inline]
    pub fn unreserve_n(&self, n: usize, signaled: usize) {
        self.posted.fetch_sub(n as u32, Ordering::AcqRel);
        if signaled > 0 {
            self.cq.unreserve_n(signaled);
        }
    }

    /// The worker took `n` requests into flight (or flushed them): their places in
    /// the send queue are free. (The worker is the only writer: no read-modify-write.)
    #[inline]
    pub(crate) fn dequeued(&self, n: u32) {
        let t = self.taken.load(Ordering::Relaxed);
        self.taken.store(t.wrapping_add(n), Ordering::Release);
    }

    /// The node's submission ring (to claim places on it for several connections at
    /// once: [`ConnShared::submission`]).
    pub fn ring(&self) -> &SubmitRing {
        &self.ring
    }

    /// `wr` as this connection's entry of the ring (for a [`crate::submit::Claim`]).
    #[inline]
    pub fn submission(&self, wr: &Wqe) -> Submission {
        Submission {
            slot: self.slot.load(Ordering::Relaxed),
            number: self.number,
            work: crate::message::work(wr),
        }
    }

    /// Requests posted and not yet taken into flight by the worker.
    pub fn queued(&self) -> usize {
        let taken = self.taken.load(Ordering::Acquire);
        self.posted.load(Ordering::Acquire).wrapping_sub(taken) as usize
    }

    /// The send-queue depth.
    pub fn depth(&self) -> usize {
        self.depth as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
