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

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
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
    pub fn wait_in_steps<T>(
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
    /// The device's wait fd, signalled at every push when armed
    /// ([`WaitQueue::attach_wait_fd`]).
    wait_fd: OnceLock<Arc<WaitFd>>,
}

impl<T> WaitQueue<T> {
    pub fn new(capacity: usize) -> WaitQueue<T> {
        WaitQueue {
            queue: crossbeam::queue::ArrayQueue::new(capacity.max(1)),
            wake: Wake::new(),
            wait_fd: OnceLock::new(),
        }
    }
    /// Queues an item and wakes a blocked consumer (and the wait fd, when armed);
    /// gives it back when full.
    pub fn push(&self, t: T) -> Result<(), T> {
        self.queue.push(t)?;
        self.wake.notify();
        if let Some(fd) = self.wait_fd.get() {
            fd.notify();
        }
        Ok(())
    }
    /// Makes every later push signal `fd` when it is armed (once: false when the queue
    /// signals a wait fd already). The caller also has `fd` watch the queue
    /// ([`WaitFd::watch`]; [`WaitQueue::signal_to`] does both).
    pub fn attach_wait_fd(&self, fd: &Arc<WaitFd>) -> bool {
        self.wait_fd.set(fd.clone()).is_ok()
    }
    /// [`WaitQueue::attach_wait_fd`], and `fd` watches the queue.
    pub fn signal_to(self: &Arc<Self>, fd: &Arc<WaitFd>)
    where
        T: Send + 'static,
    {
        if self.attach_wait_fd(fd) {
            fd.watch(self);
        }
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

impl<T: Send> Ready for WaitQueue<T> {
    fn is_ready(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// Something a [`WaitFd`] watches: a queue the application drains.
pub trait Ready: Send + Sync {
    /// Whether the queue holds something for the application. Sequentially
    /// consistent (crossbeam's `is_empty` is): [`WaitFd::arm`] relies on it.
    fn is_ready(&self) -> bool;
}

/// A device's wait file descriptor: a Linux `eventfd(2)` that becomes readable when,
/// after the application armed it, a completion, an event or an accepted connection
/// is queued for it — the verbs completion channel's role, for every queue of a
/// device at once, so that an application can sleep on it in its own `epoll`/`poll`
/// loop.
///
/// The protocol (`ibv_req_notify_cq` + `ibv_get_cq_event`, libfabric's `fi_trywait`
/// + `FI_WAIT_FD`):
///
/// - [`WaitFd::arm`] empties the fd (reads its counter away), marks it armed, then
///   looks at every queue it watches: when one holds something already it signals the
///   fd at once (and returns true: drain, do not sleep). Else the first push into any
///   watched queue signals it.
/// - A producer's push checks the armed mark — one load of a line of its own, written
///   only by `arm` and the signal, so the fast path makes no system call and shares no
///   written line while nobody waits — and the one push that takes the mark (a swap)
///   writes the eventfd once. Further pushes see it unarmed: one signal per arm.
/// - Race-free as [`Wake`]: `arm` marks (sequentially consistent) and then looks at the
///   queues; a producer pushes (a sequentially consistent exchange) and then reads the
///   mark. Either the look sees the item or the producer sees the mark.
///
/// The fd stays readable until the next `arm` (or until the application reads the
/// 8-byte counter itself): level-triggered `epoll` reports it until then. A wake may
/// find the queues empty (another thread drained them, or a signal from an earlier arm
/// landed late): drain what there is, arm again, sleep again.
pub struct WaitFd {
    /// Armed and not yet signalled: on a line of its own, which every push reads.
    armed: CachePadded<AtomicBool>,
    fd: OwnedFd,
    /// Signals written to the fd.
    signals: AtomicU64,
    /// The queues that signal this fd, looked at by [`WaitFd::arm`] (dropped ones are
    /// pruned there and as the list grows).
    watched: Mutex<Vec<Weak<dyn Ready>>>,
    /// Where threads that drive progress while the fd is armed wait for the next arm
    /// ([`WaitFd::wait_armed`]).
    arms: Wake,
}

impl std::fmt::Debug for WaitFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitFd")
            .field("fd", &self.fd.as_raw_fd())
            .field("armed", &self.is_armed())
            .field("signals", &self.signals())
            .finish()
    }
}

impl WaitFd {
    /// A new wait fd (non-blocking, close-on-exec), unarmed.
    pub fn new() -> std::io::Result<Arc<WaitFd>> {
        // SAFETY: eventfd takes no pointer; a non-negative result is a new fd we own.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(WaitFd {
            armed: CachePadded::new(AtomicBool::new(false)),
            // SAFETY: `raw` is a fresh fd nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
            signals: AtomicU64::new(0),
            watched: Mutex::new(Vec::new()),
            arms: Wake::new(),
        }))
    }

    /// The file descriptor (readable once signalled, until the next arm).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether it is armed and not yet signalled.
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    /// Signals written to the fd so far.
    pub fn signals(&self) -> u64 {
        self.signals.load(Ordering::Relaxed)
    }

    /// Makes [`WaitFd::arm`] look at `q` (which must also signal this fd at its
    /// pushes).
    pub fn watch<R: Ready + 'static>(&self, q: &Arc<R>) {
        let weak: Weak<dyn Ready> = Arc::downgrade(q) as Weak<dyn Ready>;
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        // Amortised pruning: a program that makes and drops queues without ever
        // arming does not grow the list without bound.
        if w.len() >= 64 && w.len().is_power_of_two() {
            w.retain(|q| q.strong_count() > 0);
        }
        w.push(weak);
    }

    /// The producer, after a push into a watched queue: signals the fd if armed.
    #[inline]
    pub fn notify(&self) {
        if self.armed.load(Ordering::SeqCst) {
            self.signal();
        }
    }

    /// Takes the armed mark and, when this call took it, writes the eventfd.
    #[cold]
    #[inline(never)]
    fn signal(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            // Counted before the write: the thread it wakes may run before this one
            // does again (on the same CPU, at once) and read the count.
            self.signals.fetch_add(1, Ordering::Relaxed);
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our own fd. It cannot block
            // (EFD_NONBLOCK) and fails only if the counter would overflow, which one
            // write per arm never reaches.
            unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }

    /// Empties the fd: reads its counter away (nothing to read is fine).
    fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our own non-blocking fd.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Arms the fd: empties it, marks it armed, then signals it at once when a watched
    /// queue holds something already. True in that case (the fd is readable: drain the
    /// queues instead of sleeping); false when nothing is ready (the first push into a
    /// watched queue will signal it). Wakes the threads waiting in
    /// [`WaitFd::wait_armed`] when it returns false.
    pub fn arm(&self) -> bool {
        self.clear();
        self.armed.store(true, Ordering::SeqCst);
        if self.any_ready() {
            self.signal();
            return true;
        }
        self.arms.notify();
        false
    }

    /// Whether a watched queue holds something (dropped queues are pruned).
    fn any_ready(&self) -> bool {
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let mut ready = false;
        w.retain(|q| match q.upgrade() {
            Some(q) => {
                ready = ready || q.is_ready();
                true
            }
            None => false,
        });
        ready
    }

    /// A thread that drives progress for the sleeping application: blocks until the fd
    /// is armed or `stop` says so ([`WaitFd::wake_waiters`] after setting it).
    pub fn wait_armed(&self, stop: impl Fn() -> bool) {
        while !self.is_armed() && !stop() {
            let far = Instant::now() + Duration::from_secs(3600);
            self.arms.wait_in_steps(far, Duration::from_secs(1), || {
                (self.is_armed() || stop()).then_some(())
            });
        }
    }

    /// Wakes the threads in [`WaitFd::wait_armed`] (to see their stop).
    pub fn wake_waiters(&self) {
        self.arms.notify();
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

    /// Whether `fd` is readable within `ms` milliseconds.
    fn readable(fd: &WaitFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: fd.fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    #[test]
    fn a_wait_fd_is_signalled_once_per_arm_and_at_once_when_something_waits() {
        let fd = WaitFd::new().unwrap();
        let cq = crate::cq::CqShared::with_wait_fd(4, &fd);
        let q = Arc::new(WaitQueue::new(4));
        q.signal_to(&fd);
        // Not armed: pushes leave it alone.
        assert!(cq.push(crate::wr::Completion::EMPTY).is_ok());
        assert!(!readable(&fd, 0));
        assert_eq!(fd.signals(), 0);
        // Armed with a completion queued: signalled at once.
        assert!(fd.arm());
        assert!(readable(&fd, 0));
        assert!(!fd.is_armed());
        assert!(cq.pop().is_some());
        // Drained and armed: empty until a push; one signal for two pushes.
        assert!(!fd.arm());
        assert!(!readable(&fd, 0), "the arm emptied it");
        q.push(1u32).unwrap();
        q.push(2u32).unwrap();
        assert!(readable(&fd, 0));
        assert_eq!(fd.signals(), 2);
        // Readable until the next arm, which (with the queue still holding items)
        // signals again at once.
        assert!(readable(&fd, 0));
        assert!(fd.arm());
        assert_eq!(fd.signals(), 3);
        while q.pop().is_some() {}
        assert!(!fd.arm());
        assert!(!readable(&fd, 0));
        // A dropped queue is forgotten at the next arm.
        drop((cq, q));
        assert!(!fd.arm());
        assert!(fd.watched.lock().unwrap().is_empty());
    }

    /// A consumer that drains, arms and sleeps on the fd misses nothing a producer
    /// pushes meanwhile, however the two interleave.
    #[test]
    fn drain_arm_sleep_misses_no_push() {
        let fd = WaitFd::new().unwrap();
        let q = Arc::new(WaitQueue::new(1024));
        q.signal_to(&fd);
        const N: u32 = 20_000;
        let q2 = q.clone();
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                while q2.push(i).is_err() {
                    std::hint::spin_loop();
                }
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < N {
            while let Some(i) = q.pop() {
                assert_eq!(i, next);
                next += 1;
            }
            if next < N && !fd.arm() {
                assert!(readable(&fd, 5000), "a push was missed at {next}");
            }
        }
        producer.join().unwrap();
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
