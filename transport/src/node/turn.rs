//! One turn of a node: what a driver calls, over and over — the DPDK worker on a port,
//! `sim` on a simulated link. The order of a turn is the node's, not the driver's:
//!
//! ```text
//! turn():  [posts first: data a post made ready] -> [high-priority sends]
//!          -> receive (the high-priority queue first; a burst of bulk frames,
//!             acknowledging mid-burst when due, cut short by an urgent frame)
//!          -> frames other shards forwarded -> sending (high only, after an
//!             urgent frame) -> timers -> control frames (acks, NAKs, probes, CM)
//!          -> both transmit queues to the wire
//! ```
//!
//! The driver supplies its queues through [`Io`] (the receive side, beside
//! [`Link`], the transmit side) and its clock through [`Clock`].

use super::{Link, Node};
use crate::status::DropReason;

/// Frames of one receive burst at most.
pub const RX_BURST: usize = 32;

/// A received frame.
pub trait RxFrame {
    /// Its bytes, and whether they are the whole frame (a frame split over buffers is
    /// refused as truncated).
    fn frame(&self) -> (&[u8], bool);
}

impl RxFrame for Vec<u8> {
    fn frame(&self) -> (&[u8], bool) {
        (self, true)
    }
}

/// The receive side of a driver, beside its transmit side ([`Link`]): the queues a
/// [`Node::turn`] takes frames from.
///
/// A port has a bulk receive queue and may have a high-priority one (frames of
/// high-priority connections; `port::HIGH_QUEUE`). On a device of several shards
/// (design §6), frames another shard owns are forwarded to it, and frames forwarded
/// to this one come from its inbox.
pub trait Io: Link {
    type Rx: RxFrame;

    /// Receives a bulk burst of at most [`RX_BURST`] frames into the driver's batch,
    /// unless the last one still holds frames (a burst cut short for an urgent frame
    /// goes on where it stopped). Returns the frames to take (1 for the rest of a
    /// burst: the turn has work).
    fn rx_bulk(&mut self) -> usize;
    /// The next frame of the bulk batch.
    fn next_bulk(&mut self) -> Option<Self::Rx>;

    /// Whether the port has a high-priority receive queue.
    fn has_high(&self) -> bool {
        false
    }
    /// Whether frames arrived on the high-priority queue since the port opened (it is
    /// then polled every turn; before, every 64th).
    fn high_active(&self) -> bool {
        false
    }
    /// Receives a burst of the high-priority queue into the driver's batch; the frames
    /// it took.
    fn rx_high(&mut self) -> usize {
        0
    }
    /// Whether the high-priority batch holds frames not yet taken (one load: asked
    /// every turn).
    fn high_pending(&self) -> bool {
        false
    }
    /// The next frame of the high-priority batch.
    fn next_high(&mut self) -> Option<Self::Rx> {
        None
    }

    /// Whether this node is one shard of several (frames may belong to another).
    fn sharded(&self) -> bool {
        false
    }
    /// Hands a frame shard `owner` owns to it; the frame back when its inbox is full.
    fn forward(&mut self, owner: u8, frame: Self::Rx) -> Result<(), Self::Rx> {
        let _ = owner;
        Err(frame)
    }
    /// Wakes the shards frames were forwarded to this turn.
    fn wake_forwarded(&mut self) {}
    /// The next frame another shard forwarded to this one.
    fn inbox(&mut self) -> Option<Self::Rx> {
        None
    }
    /// Puts on the wire what shards without a queue pair of their own sent through
    /// this one.
    fn relay(&mut self) {}

    /// Hands both transmit queues to the wire, the high-priority one first. Returns
    /// the frames sent and whether a queue kept frames back (the wire took fewer than
    /// were queued).
    fn transmit(&mut self) -> (usize, bool);
}

/// The driver's clock, and its count of turns (the driver's: kept beside what the
/// driver touches every turn, not in the node's colder state).
pub trait Clock {
    /// Whether reading it costs nothing worth saving: a turn then reads it every time.
    /// (Reading the TSC costs as much as an idle turn on a virtual machine: the
    /// worker's clock is read when frames arrive and every 64th turn otherwise; timers
    /// are micro- to milliseconds.)
    const CHEAP: bool;
    /// The time now, in the node's ticks.
    fn now(&mut self) -> u64;
    /// The time now, read again once the turn's work is done, as its acknowledgements
    /// go to the wire: their hold (`wire::op::HOLD`) is measured to it. The same clock
    /// as [`Clock::now`] (a simulation places it where its host's frames of the turn
    /// leave).
    fn now_sending(&mut self) -> u64 {
        self.now()
    }
    /// Turns taken with this clock.
    fn turns(&mut self) -> &mut u64;
}

impl Node {
    /// One turn: sends what the application posted, takes what arrived, runs the
    /// timers due and puts everything owed on the wire (the module documentation has
    /// the order). Returns how much work it found (frames in + frames out).
    #[inline]
    pub fn turn<C: Clock, I: Io>(&mut self, clock: &mut C, io: &mut I) -> usize {
        // The high-priority queue is polled every turn once high-priority traffic was
        // seen on it or is sent from here, and every 64th turn until then: a port with
        // no high-priority connection pays (almost) nothing for it.
        let hi = io.has_high()
            && (io.high_active() || *clock.turns() & 63 == 0 || self.has_high_priority());
        let mut n = 0;
        if !hi && !self.submit_ring().is_empty() {
            // Posts first: what the application posted since the last turn leaves
            // before this turn's receiving (an inline ping-pong posts its answer and
            // drives the next turn at once).
            self.now = clock.now();
            self.transmit_data(self.now, io);
            io.flush(false);
        }
        if hi {
            // High-priority work first: what the application posted since the last
            // turn leaves before any bulk frame is processed, and urgent frames are
            // taken before the bulk ones that arrived with them.
            self.transmit_high(self.now, io);
            n += io.rx_high();
        }
        n += io.rx_bulk();
        let turns = clock.turns();
        *turns = turns.wrapping_add(1);
        let ticked = C::CHEAP || n > 0 || *turns & 63 == 0;
        if ticked {
            self.now = clock.now();
        }
        let mut now = self.now;
        let mut urgent = self.take_high(io, now);
        // Bulk frames wait for the next turn when urgent ones came first: the
        // application sees those at once.
        while !urgent {
            let Some(m) = io.next_bulk() else {
                break;
            };
            self.deliver(io, m, now);
            self.ack_if_due(io);
            if hi && io.rx_high() > 0 {
                // An urgent frame came in meanwhile: take it now and end the turn's
                // receiving here, so that the application sees it at once.
                urgent = self.take_high(io, now);
                break;
            }
        }
        if io.sharded() {
            n += self.exchange(io, now, (!ticked).then_some(&mut *clock));
            now = self.now;
        }
        let sent_before = self.stats.frames_tx;
        if urgent {
            // No bulk sending in a turn that took an urgent frame: its answer may be
            // posted as soon as this turn ends.
            self.transmit_high(now, io);
        } else {
            self.transmit_data(now, io);
            // Bulk sending stops when an urgent frame arrives: take it now.
            self.take_high(io, now);
        }
        // Timers fall due only as the clock moves (acknowledgements owed go out with
        // `transmit_control` below, every turn).
        if ticked && now >= self.next_timer() {
            self.handle_timeout(now);
        }
        // Acknowledgements go now: how long they were held (a burst delivered, this
        // node's own frames sent, a turn waited for a reply to carry them) goes with
        // them, so that their sender does not read it as queueing. The clock is read
        // again for it only after work that takes time — frames taken, or sent, in
        // this turn — not in the turns of a ping-pong (a frame, or none, and nothing
        // sent), where the hold is the rest of a turn and the clock read would be
        // most of what the turn costs: the hold is then counted to the turn's first
        // read (shorter than it was, never longer).
        if C::CHEAP || self.flushes_acks() && (n > 1 || self.stats.frames_tx != sent_before) {
            self.acks_leave = clock.now_sending();
        }
        self.transmit_control(io);
        let (sent, stalled) = io.transmit();
        self.stats.tx_stalls += u64::from(stalled);
        n + sent
    }

    /// A sharded device: wakes the shards frames were forwarded to, takes this
    /// shard's inbox (up to a burst) and relays the other shards' frames. Returns the
    /// frames taken. With `clock` (the turn did not read it: no frame of its own came)
    /// the time is read when a forwarded frame is there, so that what it starts (its
    /// acknowledgement's hold, timers) counts from now, not from a turn long past.
    #[inline(never)]
    fn exchange<I: Io, C: Clock>(
        &mut self,
        io: &mut I,
        mut now: u64,
        mut clock: Option<&mut C>,
    ) -> usize {
        io.wake_forwarded();
        let mut n = 0;
        while n < RX_BURST {
            let Some(m) = io.inbox() else {
                break;
            };
            if let Some(c) = clock.take() {
                now = c.now();
                self.now = now;
            }
            self.take(&m, now);
            self.ack_if_due(io);
            n += 1;
        }
        io.relay();
        n
    }

    /// Sends the acknowledgements a long burst made due before the turn ends
    /// ([`Node::acks_due`]), on the wire at once.
    #[inline]
    fn ack_if_due<I: Io>(&mut self, io: &mut I) {
        if self.acks_due() {
            self.send_acks(io);
            io.flush(true);
            io.flush(false);
        }
    }

    /// Hands the frames of the high-priority batch to the node; whether there were any.
    /// (Asked every turn: an empty batch costs a load, not a call.)
    #[inline(always)]
    fn take_high<I: Io>(&mut self, io: &mut I, now: u64) -> bool {
        io.high_pending() && self.take_high_frames(io, now)
    }

    #[inline(never)]
    fn take_high_frames<I: Io>(&mut self, io: &mut I, now: u64) -> bool {
        let mut any = false;
        while let Some(m) = io.next_high() {
            self.stats.frames_rx_high += 1;
            self.deliver(io, m, now);
            any = true;
        }
        any
    }

    /// A received frame to this node, or — one shard of several — to the shard that
    /// owns it.
    #[inline]
    fn deliver<I: Io>(&mut self, io: &mut I, m: I::Rx, now: u64) {
        if io.sharded() {
            if let Some(owner) = self.route(m.frame().0) {
                match io.forward(owner, m) {
                    Ok(()) => self.stats.frames_forwarded += 1,
                    Err(m) => {
                        drop(m);
                        self.stats.drop_for(DropReason::NoBuffer);
                    }
                }
                return;
            }
        }
        self.take(&m, now);
    }

    /// A received frame into the node (a frame split over segments is refused).
    #[inline]
    fn take<R: RxFrame>(&mut self, m: &R, now: u64) {
        match m.frame() {
            (data, true) => self.handle_frame(data, now),
            (_, false) => self.stats.drop_for(DropReason::Truncated),
        }
    }
}
