//! How posted work reaches the worker: one submission ring per node, not a send queue
//! per connection.
//!
//! A post puts `(connection slot, work request)` on the node's ring — a bounded
//! multi-producer queue, so any application thread may post — and the worker moves
//! each entry into its connection's own queue (`ConnContext::sendq`, worker-owned, a
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

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam::utils::CachePadded;

use crate::wake::Wake;
use crate::wr::{Work, Wqe};

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
    /// The request, as the worker keeps it (`crate::message::work`).
    pub work: Work,
}

/// The node's submission ring: bounded, many producers (any application thread), one
/// consumer (the node's worker, through the [`RingConsumer`] only it holds).
///
/// Each slot carries a stamp saying whose turn it is (D. Vyukov's bounded queue, as
/// crossbeam's `ArrayQueue`): a producer claims position `t` by moving the tail when
/// slot `t` has stamp `t`, writes the submission and stamps it `t + 1`; the consumer
/// takes position `h` when its slot says `h + 1`, and frees it for the next lap with
/// `h + capacity`. Unlike `ArrayQueue`, the consumer reads a submission where it lies
/// (a work request is 128 bytes: `pop` moved it twice), and its position is its own.
pub struct SubmitRing {
    slots: Box<[Slot]>,
    mask: usize,
    /// The next position producers claim.
    tail: CachePadded<AtomicUsize>,
    /// The next position the consumer takes (written by it alone; read for `len`).
    head: CachePadded<AtomicUsize>,
    /// Where the dedicated worker sleeps when it has nothing to do.
    wake: Wake,
    /// Something other than a submission needs the worker (`nudge`).
    nudged: AtomicBool,
}

struct Slot {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<Submission>>,
}

// SAFETY: a slot's value is written only by the producer that claimed its position
// (the tail's compare-exchange gives each position to one producer) before it
// publishes the stamp with release, and read only by the one consumer after it
// acquired that stamp and before it frees the slot with release; `Submission` is
// plain data.
unsafe impl Sync for SubmitRing {}
unsafe impl Send for SubmitRing {}

impl std::fmt::Debug for SubmitRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitRing")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

/// The consumer's side of a [`SubmitRing`]: one per ring (made with it), held by the
/// node, so that no two threads ever take from the same ring.
#[derive(Debug)]
pub struct RingConsumer {
    ring: Arc<SubmitRing>,
    head: usize,
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
    /// Whether nothing is queued (a claimed entry being written counts as queued).
    /// Sequentially consistent, for [`Wake`]'s handshake with a sleeping consumer.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tail.load(Ordering::SeqCst) == self.head.load(Ordering::Acquire)
    }

    fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).wrapping_sub(head)
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The worker's side: sleeps until a submission comes or `deadline` passes (a
    /// frame arriving meanwhile is noticed at the deadline: the caller keeps naps
    /// short where frames can come).
    pub fn sleep_until(&self, deadline: Instant) {
        self.wake.wait_until(deadline, || {
            (!self.is_empty() || self.nudged.swap(false, Ordering::AcqRel)).then_some(())
        });
    }

    /// Sleeps in [`SubmitRing::sleep_until`] that a post, a nudge or a frame doorbell
    /// ended before their deadline.
    pub fn woken(&self) -> u64 {
        self.wake.woken()
    }

    /// Wakes a worker asleep in [`SubmitRing::sleep_until`] (anything the worker must
    /// notice that is not a submission: a control call, a stop).
    pub fn nudge(&self) {
        self.nudged.store(true, Ordering::SeqCst);
        self.wake.notify();
    }

    /// Queues a submission and wakes a sleeping worker; false when full.
    #[cfg(test)]
    fn push(&self, slot: u32, number: u32, wr: &Wqe) -> bool {
        match self.claim(1) {
            Some(c) => {
                c.fill(|_| Submission {
                    slot,
                    number,
                    work: Work::Wr(*wr),
                });
                true
            }
            None => false,
        }
    }

    /// Claims `n` consecutive positions (`n` at least 1), all or none: `None` when the
    /// ring lacks room for all of them now. The consumer stops at the first position
    /// of a claim until the claim is filled (or dropped, which fills it with entries
    /// the worker skips), so a claim is filled at once.
    #[inline]
    pub fn claim(&self, n: usize) -> Option<Claim<'_>> {
        if n == 0 || n > self.slots.len() {
            return None;
        }
        let mut t = self.tail.load(Ordering::Relaxed);
        loop {
            // The consumer frees positions in order: when the claim's last slot is
            // free for this lap, so are the ones before it.
            let last = t.wrapping_add(n - 1);
            let stamp = self.slots[last & self.mask].stamp.load(Ordering::Acquire);
            if stamp == last {
                // Sequentially consistent: see `is_empty`.
                match self.tail.compare_exchange_weak(
                    t,
                    t.wrapping_add(n),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Some(Claim {
                            ring: self,
                            first: t,
                            n,
                        })
                    }
                    Err(now) => t = now,
                }
            } else if (stamp.wrapping_sub(last) as isize) < 0 {
                // That slot still holds the entry of the lap before: no room, unless
                // the consumer freed it meanwhile.
                let now = self.tail.load(Ordering::Relaxed);
                if now == t {
                    return None;
                }
                t = now;
            } else {
                // Another producer took those positions.
                t = self.tail.load(Ordering::Relaxed);
            }
        }
    }
}

/// Positions of a [`SubmitRing`] claimed by one producer ([`SubmitRing::claim`]),
/// to be filled at once.
pub struct Claim<'a> {
    ring: &'a SubmitRing,
    first: usize,
    n: usize,
}

/// The connection slot of a filler entry: the worker skips it (a claim dropped
/// unfilled, e.g. a multicast post that found another ring full).
pub const NO_SLOT: u32 = u32::MAX;

impl Claim<'_> {
    /// Positions claimed.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Never empty (a claim is of at least one position).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the `i`th claimed position with `entry(i)`, for every `i` in order, and
    /// wakes a sleeping worker.
    #[inline]
    pub fn fill(self, mut entry: impl FnMut(usize) -> Submission) {
        let (ring, first, n) = (self.ring, self.first, self.n);
        std::mem::forget(self);
        for i in 0..n {
            let t = first.wrapping_add(i);
            let s = &ring.slots[t & ring.mask];
            // SAFETY: position `t` is this claim's alone until the stamp below hands
            // it to the consumer (see the `Sync` impl).
            unsafe { (*s.value.get()).write(entry(i)) };
            s.stamp.store(t.wrapping_add(1), Ordering::Release);
        }
        ring.wake.notify();
    }
}

impl Drop for Claim<'_> {
    /// An unfilled claim is filled with entries the worker skips ([`NO_SLOT`]).
    fn drop(&mut self) {
        let (ring, first, n) = (self.ring, self.first, self.n);
        Claim { ring, first, n }.fill(|_| Submission {
            slot: NO_SLOT,
            number: 0,
            work: Work::Wr(Wqe::write(0, crate::wr::Source::None, 0, 0)),
        });
    }
}

impl RingConsumer {
    /// A ring of at least `capacity` entries (rounded up to a power of two), and its
    /// consumer.
    pub fn new(capacity: usize) -> RingConsumer {
        let cap = capacity.max(1).next_power_of_two();
        let slots = (0..cap)
            .map(|i| Slot {
                stamp: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        let ring = SubmitRing {
            slots,
            mask: cap - 1,
            tail: CachePadded::new(AtomicUsize::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            wake: Wake::new(),
            nudged: AtomicBool::new(false),
        };
        RingConsumer {
            ring: Arc::new(ring),
            head: 0,
        }
    }

    /// The ring (to hand to producers and wakers).
    pub fn ring(&self) -> &Arc<SubmitRing> {
        &self.ring
    }

    /// Takes the oldest submission, handing it to `f` where it lies; `None` when the
    /// ring is empty (or its oldest entry is still being written).
    #[inline]
    pub fn pop_with<R>(&mut self, f: impl FnOnce(&Submission) -> R) -> Option<R> {
        let h = self.head;
        let s = &self.ring.slots[h & self.ring.mask];
        if s.stamp.load(Ordering::Acquire) != h.wrapping_add(1) {
            return None;
        }
        // SAFETY: the stamp says a producer wrote position `h` and published it; the
        // slot is not written again before the release below.
        let r = f(unsafe { (*s.value.get()).assume_init_ref() });
        s.stamp
            .store(h.wrapping_add(self.ring.slots.len()), Ordering::Release);
        self.head = h.wrapping_add(1);
        self.ring.head.store(self.head, Ordering::Release);
        Some(r)
    }

    /// The connection slot of the submission `k` places after the oldest, if it is
    /// written already (to prefetch that connection's state while earlier ones are
    /// taken).
    #[inline]
    pub fn slot_ahead(&self, k: usize) -> Option<u32> {
        let p = self.head.wrapping_add(k);
        let s = &self.ring.slots[p & self.ring.mask];
        if s.stamp.load(Ordering::Acquire) != p.wrapping_add(1) {
            return None;
        }
        // SAFETY: as in `pop_with`: position `p` is published and, being at or after
        // the head, not freed until this consumer takes it.
        Some(unsafe { (*s.value.get()).assume_init_ref() }.slot)
    }

    /// The oldest submission, copied out.
    pub fn pop(&mut self) -> Option<Submission> {
        self.pop_with(|s| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::Source;

    fn wr(id: u64) -> Wqe {
        Wqe::write(id, Source::None, 0, 0)
    }

    #[test]
    fn fifo_until_full_over_many_laps() {
        let mut rx = RingConsumer::new(6);
        let ring = rx.ring().clone();
        assert_eq!(ring.capacity(), 8, "rounded up to a power of two");
        let mut next = 0u64;
        let mut expect = 0u64;
        for _ in 0..50 {
            // Fill it, check it refuses one more, take some out.
            while ring.push(1, 2, &wr(next)) {
                next += 1;
            }
            assert_eq!(ring.len(), ring.capacity(), "full");
            assert!(!ring.is_empty());
            for _ in 0..5 {
                let s = rx.pop().expect("queued");
                assert_eq!((s.slot, s.number, s.work.wr_id()), (1, 2, expect));
                expect += 1;
            }
            assert_eq!(ring.capacity() - ring.len(), 5, "room for 5 and no more");
        }
        while let Some(s) = rx.pop() {
            assert_eq!(s.work.wr_id(), expect);
            expect += 1;
        }
        assert_eq!(expect, next);
        assert!(ring.is_empty());
    }

    /// Four producers and the consumer at once: nothing lost, nothing twice, each
    /// producer's order kept.
    #[test]
    fn producers_race_the_consumer() {
        const PER: u64 = 200_000;
        let mut rx = RingConsumer::new(64);
        let producers: Vec<_> = (0..4u32)
            .map(|p| {
                let ring = rx.ring().clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        while !ring.push(p, 0, &wr(i)) {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 4];
        let mut taken = 0;
        while taken < 4 * PER {
            match rx.pop_with(|s| (s.slot as usize, s.work.wr_id())) {
                Some((p, id)) => {
                    assert_eq!(id, next[p], "producer {p}");
                    next[p] += 1;
                    taken += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        for t in producers {
            t.join().unwrap();
        }
        assert_eq!(next, [PER; 4]);
        assert!(rx.pop().is_none() && rx.ring().is_empty());
    }

    fn sub(slot: u32, id: u64) -> Submission {
        Submission {
            slot,
            number: 0,
            work: Work::Wr(wr(id)),
        }
    }

    #[test]
    fn a_claim_is_all_or_none_and_a_dropped_one_is_skipped_filler() {
        let mut rx = RingConsumer::new(8);
        let ring = rx.ring().clone();
        assert!(ring.claim(0).is_none() && ring.claim(9).is_none());
        ring.claim(5).unwrap().fill(|i| sub(1, i as u64));
        assert!(ring.claim(4).is_none(), "3 places left");
        assert_eq!(ring.len(), 5, "a refused claim takes nothing");
        // Claimed but not yet filled: the consumer stops there.
        let c = ring.claim(3).unwrap();
        assert_eq!(c.len(), 3);
        for i in 0..5 {
            assert_eq!(rx.pop().map(|s| s.work.wr_id()), Some(i));
        }
        assert!(rx.pop().is_none(), "the claim is not filled yet");
        drop(c);
        for _ in 0..3 {
            assert_eq!(rx.pop().map(|s| s.slot), Some(NO_SLOT));
        }
        assert!(rx.pop().is_none() && ring.is_empty());
        // Wrapping around the ring: a claim spans the end of the slots.
        ring.claim(6).unwrap().fill(|i| sub(2, 10 + i as u64));
        let ids: Vec<u64> = std::iter::from_fn(|| rx.pop())
            .map(|s| s.work.wr_id())
            .collect();
        assert_eq!(ids, (10..16).collect::<Vec<_>>());
    }

    /// Producers posting lists of up to 7 while the consumer takes: every list comes
    /// out whole and in its producer's order, never interleaved with another's.
    #[test]
    fn lists_from_racing_producers_stay_contiguous() {
        const LISTS: u64 = 40_000;
        let mut rx = RingConsumer::new(32);
        let producers: Vec<_> = (0..3u32)
            .map(|p| {
                let ring = rx.ring().clone();
                std::thread::spawn(move || {
                    let mut id = 0u64;
                    for l in 0..LISTS {
                        let n = 1 + (l % 7) as usize;
                        let claim = loop {
                            match ring.claim(n) {
                                Some(c) => break c,
                                None => std::hint::spin_loop(),
                            }
                        };
                        // wr_id: the producer's running count; number: place in the list.
                        claim.fill(|i| Submission {
                            slot: p,
                            number: i as u32,
                            work: Work::Wr(wr(id + i as u64)),
                        });
                        id += n as u64;
                    }
                    id
                })
            })
            .collect();
        let total: u64 = (0..LISTS).map(|l| 1 + l % 7).sum::<u64>() * 3;
        let mut next = [0u64; 3];
        let mut taken = 0;
        let mut current: Option<(usize, u32)> = None; // producer and place of the last
        while taken < total {
            let Some(s) = rx.pop() else {
                std::hint::spin_loop();
                continue;
            };
            let p = s.slot as usize;
            assert_eq!(s.work.wr_id(), next[p], "producer {p}");
            if s.number > 0 {
                assert_eq!(current, Some((p, s.number - 1)), "a list split");
            }
            current = Some((p, s.number));
            next[p] += 1;
            taken += 1;
        }
        let sent: Vec<u64> = producers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(next.to_vec(), sent);
    }
}
