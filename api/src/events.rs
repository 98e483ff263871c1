//! Event queues: the host's side of "interrupt at end".

use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::events::{Event, EventRing as Queue};

use crate::device::DeviceInner;
use crate::idle::wait_for;

/// An endpoint's event queue: conditional interrupts, software exceptions, and — for
/// connections that ask — refused messages. Poll it, or block on it.
#[derive(Clone)]
pub struct EventQueue {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) q: Arc<Queue>,
}

impl EventQueue {
    /// Takes the next event, if any (drives progress first in inline mode).
    pub fn poll(&self) -> Option<Event> {
        if let Some(e) = self.q.pop() {
            return Some(e);
        }
        self.dev.progress();
        self.q.pop()
    }

    /// Waits up to `timeout` for an event. With a dedicated worker the thread sleeps
    /// until the worker wakes it; inline, the wait drives progress itself.
    pub fn wait(&self, timeout: Duration) -> Option<Event> {
        if self.dev.is_dedicated() {
            return self.q.wait(timeout);
        }
        let deadline = Instant::now() + timeout;
        let q = &self.q;
        wait_for(
            &self.dev,
            deadline,
            || q.pop(),
            |d| q.wait(d.saturating_duration_since(Instant::now())),
        )
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
    /// Events that found the queue full (sticky).
    pub fn overflows(&self) -> u64 {
        self.q.overflows.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl std::fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventQueue")
            .field("len", &self.len())
            .field("overflows", &self.overflows())
            .finish()
    }
}
