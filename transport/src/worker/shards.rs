//! What the shards of one device share (docs/design.md §6): frames one shard received for
//! another, and — where shards share one queue pair — frames for the wire that a shard
//! without a queue of its own hands to the one that has it.
//!
//! Each queue has one consumer, its shard (or the queue owner, for outboxes); the
//! producers are the other shards. Nothing else is shared: no lock, and no line one
//! shard writes on the per-frame path but these queues' slots.

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use crate::port::Mbuf;
use crate::submit::SubmitRing;

/// Frames an inbox or outbox holds (a few bursts: a shard that falls behind by more
/// loses frames, which the peer retransmits, rather than holding mbufs).
pub const SHARD_QUEUE: usize = 1024;

/// The queues between the shards of one device.
pub struct ShardLinks {
    /// Frames for shard k, received by another.
    inbox: Vec<ArrayQueue<Mbuf>>,
    /// Frames shard k (without a queue pair of its own) sends through shard 0.
    outbox: Vec<ArrayQueue<Mbuf>>,
    /// Each shard's submission ring, to wake it when frames are queued for it.
    wake: Vec<Arc<SubmitRing>>,
}

impl ShardLinks {
    /// Links between shards woken through `rings` (one per shard, in shard order).
    pub fn new(rings: Vec<Arc<SubmitRing>>) -> Arc<ShardLinks> {
        let n = rings.len();
        Arc::new(ShardLinks {
            inbox: (0..n).map(|_| ArrayQueue::new(SHARD_QUEUE)).collect(),
            outbox: (0..n).map(|_| ArrayQueue::new(SHARD_QUEUE)).collect(),
            wake: rings,
        })
    }

    /// Shards.
    pub fn shards(&self) -> usize {
        self.inbox.len()
    }

    /// Queues a frame for shard `to`; gives it back when that inbox is full.
    #[inline]
    pub fn forward(&self, to: usize, m: Mbuf) -> Result<(), Mbuf> {
        self.inbox[to].push(m)
    }

    /// The next frame another shard received for shard `me`.
    #[inline]
    pub fn take(&self, me: usize) -> Option<Mbuf> {
        self.inbox[me].pop()
    }

    /// Whether frames wait for shard `me`.
    #[inline]
    pub fn has_inbox(&self, me: usize) -> bool {
        !self.inbox[me].is_empty()
    }

    /// Queues a frame shard `from` sends through the queue owner.
    #[inline]
    pub fn send(&self, from: usize, m: Mbuf) -> Result<(), Mbuf> {
        self.outbox[from].push(m)
    }

    /// The next frame shard `from` sends through the queue owner.
    #[inline]
    pub fn sent_by(&self, from: usize) -> Option<Mbuf> {
        self.outbox[from].pop()
    }

    /// Wakes shard `k` if it sleeps.
    #[inline]
    pub fn wake(&self, k: usize) {
        self.wake[k].nudge();
    }
}
