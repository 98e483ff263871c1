//! Completion queues: where the worker puts the [`Completion`]s of a connection's
//! requests and the application polls them (or sleeps for them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use crate::wr::Completion;

/// A completion queue shared between the worker (producer) and the application.
///
/// No completion is ever dropped for lack of room: a signaled request reserves its slot
/// when it is posted ([`CqShared::reserve_n`]; posting fails with a clear error when the
/// queue has no room left), and a completion that finds the queue full (those of failed
/// unsignaled requests reserve nothing, and take slots signaled ones were promised)
/// waits in its connection until the application polls ([`crate::node::conn::ConnContext::unreported`]),
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

impl crate::wake::Ready for CqShared {
    fn is_ready(&self) -> bool {
        !self.is_empty()
    }
}
