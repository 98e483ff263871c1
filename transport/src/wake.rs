//! Blocking on a lock-free queue: a consumer that found it empty sleeps on a condition
//! variable, and the producer — the worker — signals it only when someone sleeps, so
//! its fast path stays a lock-free push plus one load of a read-mostly line.
//!
//! The order that makes it race-free: the waiter registers (a sequentially consistent
//! increment), then looks at the queue under the lock, then sleeps (which releases the
//! lock); the producer pushes (a sequentially consistent exchange in crossbeam's
//! queues), then reads the count, and signals under the lock. Either the waiter's look
//! sees the item, or the producer sees the waiter. Sleeps are still bounded (10 ms)
//! so that a missed signal could only ever cost that.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;

/// Longest single sleep of a waiter.
const STEP: Duration = Duration::from_millis(10);

/// The sleeping side of a queue.
#[derive(Debug, Default)]
pub struct Wake {
    /// Consumers asleep (or about to be): on a line of its own, which the producer reads
    /// at every push and the consumers write only when they block.
    waiters: CachePadded<AtomicUsize>,
    /// Waits that a notification ended (not their deadline or step).
    woken: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Wake {
    pub fn new() -> Wake {
        Wake::default()
    }

    /// Waits a notification ended so far (a wait may also end by a spurious wake-up,
    /// rarely).
    pub fn woken(&self) -> u64 {
        self.woken.load(Ordering::Relaxed)
    }

    /// The producer, after a push: wakes the consumers asleep, if any.
    #[inline]
    pub fn notify(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.notify_slow();
        }
    }

    #[cold]
    fn notify_slow(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cond.notify_all();
    }

    /// The consumer: sleeps until `take` returns something or `deadline` passes.
    pub fn wait_until<T>(&self, deadline: Instant, take: impl FnMut() -> Option<T>) -> Option<T> {
        self.wait_in_steps(deadline, STEP, take)
    }

    /// [`Wake::wait_until`], sleeping at most `step` at a time.
    fn wait_in_steps<T>(
        &self,
        deadline: Instant,
        step: Duration,
        mut take: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        if let Some(t) = take() {
            return Some(t);
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let got = loop {
            if let Some(t) = take() {
                break Some(t);
            }
            let now = Instant::now();
            if now >= deadline {
                break None;
            }
            let step = (deadline - now).min(step);
            let (g2, timeout) = self
                .cond
                .wait_timeout(g, step)
                .unwrap_or_else(|e| e.into_inner());
            g = g2;
            if !timeout.timed_out() {
                self.woken.fetch_add(1, Ordering::Relaxed);
            }
        };
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        got
    }
}

/// A bounded lock-free queue a consumer can also block on: what the node hands the
/// application one item at a time (accepted connections, events).
#[derive(Debug)]
pub struct WaitQueue<T> {
    queue: crossbeam::queue::ArrayQueue<T>,
    wake: Wake,
}

impl<T> WaitQueue<T> {
    pub fn new(capacity: usize) -> WaitQueue<T> {
        WaitQueue {
            queue: crossbeam::queue::ArrayQueue::new(capacity.max(1)),
            wake: Wake::new(),
        }
    }
    /// Queues an item and wakes a blocked consumer; gives it back when full.
    pub fn push(&self, t: T) -> Result<(), T> {
        self.queue.push(t)?;
        self.wake.notify();
        Ok(())
    }
    /// Takes the oldest item, if any (an empty queue costs two plain loads: `pop`
    /// on it would also pay a full fence).
    #[inline]
    pub fn pop(&self) -> Option<T> {
        if self.queue.is_empty() {
            return None;
        }
        self.queue.pop()
    }
    /// Sleeps until an item comes or `deadline` passes (something else must produce
    /// meanwhile).
    pub fn wait_pop(&self, deadline: Instant) -> Option<T> {
        self.wake.wait_until(deadline, || self.queue.pop())
    }
    pub fn is_full(&self) -> bool {
        self.queue.is_full()
    }
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
    pub fn len(&self) -> usize {
        self.queue.len()
    }
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam::queue::ArrayQueue;
    use std::sync::Arc;

    #[test]
    fn a_sleeping_consumer_is_woken_by_the_push_not_the_step() {
        let q = Arc::new(ArrayQueue::new(4));
        let w = Arc::new(Wake::new());
        let (q2, w2) = (q.clone(), w.clone());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let sent = Instant::now();
            q2.push(7u32).unwrap();
            w2.notify();
            sent
        });
        // One sleep of up to 5 s (a step as long as the deadline): only the push's
        // notification can end it early, however loaded the machine is.
        let long = Duration::from_secs(5);
        let got = w.wait_in_steps(Instant::now() + long, long, || q.pop());
        let woke = Instant::now();
        let sent = t.join().unwrap();
        assert_eq!(got, Some(7));
        assert!(
            woke.duration_since(sent) < Duration::from_secs(2),
            "woken by the signal, not the deadline"
        );
        assert!(w.woken() >= 1, "a notification ended the wait");
    }

    #[test]
    fn a_wait_ends_at_its_deadline() {
        let q: ArrayQueue<u32> = ArrayQueue::new(1);
        let w = Wake::new();
        let t = Instant::now();
        assert_eq!(
            w.wait_until(t + Duration::from_millis(25), || q.pop()),
            None
        );
        assert!(t.elapsed() >= Duration::from_millis(25));
    }
}
