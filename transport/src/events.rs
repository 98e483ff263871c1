//! Event queues: how the network interface interrupts the host (docs/design.md §3,
//! "Interrupts, events and polling").
//!
//! Each endpoint has one. The worker pushes an [`Event`] when a message's conditional
//! fires ("interrupt at end"), for a software exception, and — when the connection asks
//! for it — for a refused message (its trap, on the same queue, kind [`EventKind::Trap`]).
//! The application polls ([`EventRing::pop`]) or blocks ([`EventRing::wait`]) and is
//! woken, not spinning: the worker signals a condition variable only when a waiter has
//! registered, so the fast path stays a lock-free push.
//!
//! A full queue never drops silently: the worker checks for room before it commits a
//! message that would interrupt, and treats a full queue as a fault the host repairs
//! (the connection is exceptioned until the host drains the queue and resumes it).

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::status::{DropReason, RemoteStatus};
use crate::wake::WaitQueue;

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A conditional fired, or the sender forced an interrupt.
    Interrupt,
    /// A software exception message (always an event).
    Exception,
    /// A refused message, reported on the endpoint (connections that ask for it): the
    /// status its sender's completion gets and why it was refused.
    Trap {
        status: RemoteStatus,
        reason: DropReason,
    },
    /// A deposit with payload token `index` (the entry is used up): `ea` and `len` say
    /// where and how much. With `key_ok` false the key was wrong: the payload was
    /// dropped (`len` 0), the entry stays; only the control part is delivered.
    Token { index: u32, key_ok: bool },
}

/// One event, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// Local number of the connection the message came on.
    pub conn: u32,
    /// The sender's number for that connection: the `conn` of its completion
    /// ([`crate::wr::Completion::conn`]).
    pub peer_conn: u32,
    pub opcode: u8,
    pub operand: u32,
    /// Values of the registers the message named (ra, rb, rc, rd) after it ran (0 for
    /// names it did not use).
    pub regs: [u64; 4],
    /// Effective address of the memory operation.
    pub ea: u64,
    /// Bytes the memory operation touched.
    pub len: u32,
    /// Arrival time, in TSC ticks (`tsc_hz()` per second).
    pub timestamp: u64,
}

/// A bounded event queue shared by the worker (producer) and the host (consumers).
pub struct EventRing {
    queue: WaitQueue<Event>,
    /// Events that could not be queued (full): sticky, never reset.
    pub overflows: AtomicU64,
}

impl EventRing {
    pub fn new(depth: usize) -> EventRing {
        EventRing {
            queue: WaitQueue::new(depth),
            overflows: AtomicU64::new(0),
        }
    }

    /// Whether one more event fits (the worker asks before committing).
    #[inline]
    pub fn has_room(&self) -> bool {
        !self.queue.is_full()
    }

    /// Queues an event and wakes a blocked waiter (and the device's wait fd, when
    /// armed); gives it back when full.
    pub fn push(&self, e: Event) -> Result<(), Event> {
        self.queue.push(e)
    }

    /// Makes every later push signal `fd` when it is armed, and `fd` watch this queue
    /// ([`crate::wake::WaitFd`]).
    pub fn signal_to(self: &std::sync::Arc<Self>, fd: &std::sync::Arc<crate::wake::WaitFd>) {
        if self.queue.attach_wait_fd(fd) {
            fd.watch(self);
        }
    }

    /// Takes the next event, if any.
    #[inline]
    pub fn pop(&self) -> Option<Event> {
        self.queue.pop()
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Blocks until an event arrives or `timeout` passes. The caller must make sure
    /// something produces events meanwhile (a dedicated worker; inline devices poll
    /// instead, see `deposit::EventQueue::wait`).
    pub fn wait(&self, timeout: Duration) -> Option<Event> {
        self.queue.wait_pop(Instant::now() + timeout)
    }
}

impl crate::wake::Ready for EventRing {
    fn is_ready(&self) -> bool {
        !self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ev(operand: u32) -> Event {
        Event {
            kind: EventKind::Interrupt,
            conn: 1,
            peer_conn: 3,
            opcode: 2,
            operand,
            regs: [0; 4],
            ea: 0,
            len: 0,
            timestamp: 0,
        }
    }

    #[test]
    fn full_queue_gives_the_event_back() {
        let q = EventRing::new(2);
        assert!(q.push(ev(1)).is_ok());
        assert!(q.push(ev(2)).is_ok());
        assert!(!q.has_room());
        assert_eq!(q.push(ev(3)), Err(ev(3)));
        assert_eq!(q.pop(), Some(ev(1)));
    }

    #[test]
    fn a_blocked_waiter_is_woken_by_a_push() {
        let q = Arc::new(EventRing::new(4));
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.wait(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        q.push(ev(9)).unwrap();
        assert_eq!(t.join().unwrap(), Some(ev(9)));
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(q.wait(Duration::from_millis(20)), None);
    }
}
