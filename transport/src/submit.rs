//! How posted work reaches the worker: one submission ring per node, not a send queue
//! per connection.
//!
//! A post puts `(connection slot, work request)` on the node's ring — a bounded
//! multi-producer queue, so any application thread may post — and the worker moves
//! each entry into its connection's own queue (`Connection::sendq`, worker-owned, a
//! deque that grows with what is actually waiting and is given back when the
//! connection goes quiet). That gives three things a per-connection ring of `sq_depth`
//! preallocated entries did not:
//!
//! - **Memory follows use.** A connection that posts nothing owns no queue memory; the
//!   ring is one per node (`DEFAULT_RING` entries). Preallocated, 100 000 connections
//!   with the default depth of 4096 would need 50 GiB of send queues.
//! - **The ring is the doorbell.** The worker learns which connections have work from
//!   the entries themselves and keeps a list of those (`Node::ready`); it never scans
//!   idle connections, so a turn costs the same with 10 or 100 000 of them.
//! - **A sleeping worker wakes on a post**: the ring has a [`Wake`], the dedicated
//!   worker blocks on it when idle, and a post signals it (one load of a read-mostly
//!   line when nobody sleeps).
//!
//! `sq_depth` stays a per-connection bound, as in verbs: each connection counts what
//! it has posted and the worker has not yet taken into its window
//! (`ConnShared::queued`), and a post past the depth fails with nothing queued.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam::queue::ArrayQueue;

use crate::connection::{ConnShared, WorkRequest, WR_SIGNALED};
use crate::wake::Wake;

/// Entries of a node's submission ring unless configured: about one turn's worth of
/// posts of a busy application many times over (a dedicated worker drains it every
/// turn; an inline application drains it when it finds it full).
pub const DEFAULT_RING: usize = 8192;

/// A posted work request on its way to the worker.
#[derive(Debug, Clone, Copy)]
pub struct Submission {
    /// The connection's slot in the node's table and its number (a slot reused by a
    /// later connection is told apart by the number).
    pub slot: u32,
    pub number: u32,
    pub wr: WorkRequest,
}

/// The node's submission ring.
#[derive(Debug)]
pub struct SubmitRing {
    ring: ArrayQueue<Submission>,
    /// Where the dedicated worker sleeps when it has nothing to do.
    wake: Wake,
    /// Something other than a submission needs the worker (`nudge`).
    nudged: AtomicBool,
}

/// Why a post was refused (nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The connection already has `depth` requests waiting for the worker.
    QueueFull { depth: usize },
    /// Every slot of the completion queue is promised to outstanding signaled requests.
    CompletionQueueFull { depth: usize },
    /// The node's submission ring is full: the worker is behind (inline progress: the
    /// application did not drive it).
    RingFull { capacity: usize },
}

impl SubmitRing {
    pub fn new(capacity: usize) -> SubmitRing {
        SubmitRing {
            ring: ArrayQueue::new(capacity.max(1)),
            wake: Wake::new(),
            nudged: AtomicBool::new(false),
        }
    }

    /// The worker's side: the oldest submission (an empty ring costs two plain loads).
    #[inline]
    pub fn pop(&self) -> Option<Submission> {
        if self.ring.is_empty() {
            return None;
        }
        self.ring.pop()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Room for `n` more submissions now (exact while this thread is the only
    /// producer: the worker only takes entries out).
    pub fn has_room(&self, n: usize) -> bool {
        self.ring.capacity() - self.ring.len() >= n
    }

    /// The worker's side: sleeps until a submission comes or `deadline` passes (a
    /// frame arriving meanwhile is noticed at the deadline: the caller keeps naps
    /// short where frames can come).
    pub fn sleep_until(&self, deadline: Instant) {
        self.wake.wait_until(deadline, || {
            (!self.ring.is_empty() || self.nudged.swap(false, Ordering::AcqRel)).then_some(())
        });
    }

    /// Wakes a worker asleep in [`SubmitRing::sleep_until`] (anything the worker must
    /// notice that is not a submission: a control call, a stop).
    pub fn nudge(&self) {
        self.nudged.store(true, Ordering::SeqCst);
        self.wake.notify();
    }

    /// Queues a submission and wakes a sleeping worker; false when full.
    #[inline]
    fn push(&self, s: Submission) -> bool {
        if self.ring.push(s).is_err() {
            return false;
        }
        self.wake.notify();
        true
    }
}

impl ConnShared {
    /// Posts a work request: reserves its place in the connection's send queue and,
    /// when signaled, its completion-queue slot, then hands it to the worker. Fails
    /// with nothing queued.
    #[inline]
    pub fn post(&self, wr: WorkRequest) -> Result<(), PostError> {
        let signaled = wr.flags & WR_SIGNALED != 0;
        self.reserve(signaled)?;
        self.submit(wr).inspect_err(|_| self.unreserve(signaled))
    }

    /// Takes a place in the send queue and, for a signaled request, a completion-queue
    /// slot — both or neither.
    #[inline]
    pub fn reserve(&self, signaled: bool) -> Result<(), PostError> {
        let before = self.posted.fetch_add(1, Ordering::AcqRel);
        // `taken` is read after the increment: a stale value only undercounts room.
        if before.wrapping_sub(self.taken.load(Ordering::Acquire)) >= self.depth {
            self.posted.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull {
                depth: self.depth as usize,
            });
        }
        if signaled && !self.cq.reserve() {
            self.posted.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::CompletionQueueFull {
                depth: self.cq.capacity(),
            });
        }
        Ok(())
    }

    /// Gives back what [`ConnShared::reserve`] took (a post that failed later).
    #[inline]
    pub fn unreserve(&self, signaled: bool) {
        self.posted.fetch_sub(1, Ordering::AcqRel);
        if signaled {
            self.cq.unreserve();
        }
    }

    /// The worker took `n` requests into flight (or flushed them): their places in
    /// the send queue are free. (The worker is the only writer: no read-modify-write.)
    #[inline]
    pub(crate) fn dequeued(&self, n: u32) {
        let t = self.taken.load(Ordering::Relaxed);
        self.taken.store(t.wrapping_add(n), Ordering::Release);
    }

    /// Hands a request whose places are reserved to the worker.
    #[inline]
    pub fn submit(&self, wr: WorkRequest) -> Result<(), PostError> {
        let s = Submission {
            slot: self.slot.load(Ordering::Relaxed),
            number: self.number,
            wr,
        };
        if self.ring.push(s) {
            Ok(())
        } else {
            Err(PostError::RingFull {
                capacity: self.ring.capacity(),
            })
        }
    }

    /// Room on the node's submission ring for `n` more posts (see
    /// [`SubmitRing::has_room`]).
    pub fn ring_has_room(&self, n: usize) -> bool {
        self.ring.has_room(n)
    }

    pub fn ring_capacity(&self) -> usize {
        self.ring.capacity()
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
