//! Timers from deadlines: no scan of every connection per tick.
//!
//! Each connection arms the node's timer queue for the next moment it needs attention
//! — its retransmission deadline from [`crate::reliability::Sender::deadline`], the
//! end of a receiver-not-ready back-off, a keepalive probe when idle, a retry of
//! completions waiting for room. (Connection management keeps its own timers:
//! [`crate::cm::Cm::next_timeout`].) Arming is lazy: a connection keeps at most one
//! live entry (`ConnContext::timer_armed`, the earliest); later deadlines need no entry
//! until that one fires, and entries made stale by an earlier one are skipped when
//! they come up. A firing entry runs the connection's timer, which arms the next
//! deadline.
//!
//! The queue is a timing wheel ([`TimerQueue`]): with one message outstanding per
//! connection, every message arms and fires a retransmission timer, and a binary heap
//! of ten thousand connections' entries made that a third of a sender's time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::conn::ConnContext;
use crate::connection::ConnState;
use crate::reliability::Timeout;
use crate::wr::WcStatus;

use super::{fail_connection, send, Node};

/// Slots of the wheel: with slots of 2^15-2^17 clock ticks (half the shortest
/// retransmission timeout, rounded down to a power of two) it spans tens of
/// milliseconds; later deadlines (keepalives) wait in a heap.
const SLOTS: usize = 1024;

/// Pending timers, (when, connection number): a hashed timing wheel of [`SLOTS`]
/// slots of 2^`shift` clock ticks for deadlines within its span, a heap for those
/// beyond. Arming is O(1); taking the due entries costs a look at each slot the clock
/// passed (an occupancy bitmap skips empty ones) plus each entry once.
#[derive(Debug)]
pub(crate) struct TimerQueue {
    shift: u32,
    slots: Vec<Vec<(u64, u32)>>,
    /// Bit i: slot i holds entries.
    occupied: [u64; SLOTS / 64],
    /// The first slot-tick (`when >> shift`) not yet fully taken.
    cursor: u64,
    far: BinaryHeap<Reverse<(u64, u32)>>,
    /// No entry is due before this (a lower bound: [`TimerQueue::next`]).
    hint: u64,
}

impl TimerQueue {
    /// A wheel of slots of about `tick` clock ticks (at most).
    pub(crate) fn new(tick: u64) -> TimerQueue {
        TimerQueue {
            shift: 63 - tick.max(1).leading_zeros(),
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; SLOTS / 64],
            cursor: 0,
            far: BinaryHeap::new(),
            hint: u64::MAX,
        }
    }

    /// Queues an entry.
    #[inline]
    pub(crate) fn push(&mut self, when: u64, conn: u32) {
        self.hint = self.hint.min(when);
        let t = (when >> self.shift).max(self.cursor);
        if t - self.cursor < SLOTS as u64 {
            let i = t as usize & (SLOTS - 1);
            self.slots[i].push((when, conn));
            self.occupied[i / 64] |= 1 << (i % 64);
        } else {
            self.far.push(Reverse((when, conn)));
        }
    }

    /// No entry is due before this (`u64::MAX`: none queued). Exact for the slot the
    /// clock is in; the start of its slot for a later entry.
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        self.hint
    }

    /// Moves the entries due at `now` into `due` (in no particular order).
    pub(crate) fn take_due(&mut self, now: u64, due: &mut Vec<(u64, u32)>) {
        while self.far.peek().is_some_and(|e| e.0 .0 <= now) {
            due.push(self.far.pop().expect("peeked").0);
        }
        let end = now >> self.shift;
        if end >= self.cursor + SLOTS as u64 {
            // The clock passed the whole span: everything in the wheel is due.
            for i in 0..SLOTS {
                due.append(&mut self.slots[i]);
            }
            self.occupied = [0; SLOTS / 64];
            self.cursor = end;
        } else {
            let mut from = self.cursor;
            while let Some(t) = self.next_occupied(from, end) {
                let i = t as usize & (SLOTS - 1);
                if t < end {
                    due.append(&mut self.slots[i]);
                } else {
                    // The slot the clock is in: only what is due by now.
                    self.slots[i].retain(|&e| {
                        let fire = e.0 <= now;
                        if fire {
                            due.push(e);
                        }
                        !fire
                    });
                }
                if self.slots[i].is_empty() {
                    self.occupied[i / 64] &= !(1 << (i % 64));
                }
                if t == end {
                    break;
                }
                from = t + 1;
            }
            self.cursor = self.cursor.max(end);
        }
        self.hint = self.earliest();
    }

    /// The first occupied slot-tick from `from` up to `end`, if any.
    fn next_occupied(&self, from: u64, end: u64) -> Option<u64> {
        let mut t = from;
        while t <= end {
            let i = t as usize & (SLOTS - 1);
            let word = self.occupied[i / 64] >> (i % 64);
            if word != 0 {
                let t = t + u64::from(word.trailing_zeros());
                return (t <= end).then_some(t);
            }
            t += 64 - (i % 64) as u64;
        }
        None
    }

    /// A lower bound of the earliest entry: exact in the cursor's slot, else the start
    /// of the first occupied slot; the heap's head.
    fn earliest(&self) -> u64 {
        let far = self.far.peek().map_or(u64::MAX, |e| e.0 .0);
        let wheel = match self.next_occupied(self.cursor, self.cursor + SLOTS as u64 - 1) {
            None => u64::MAX,
            Some(t) if t == self.cursor => {
                let i = t as usize & (SLOTS - 1);
                self.slots[i].iter().map(|e| e.0).min().unwrap_or(u64::MAX)
            }
            Some(t) => t << self.shift,
        };
        far.min(wheel)
    }
}

/// Arms `conn`'s timer for `when` unless an earlier one is armed. The entry it
/// supersedes stays queued as the connection's spare; with none armed (its entry just
/// fired), the spare, if it comes no later than `when`, serves instead of a new entry.
/// A connection whose deadlines move between near (retransmission) and far (keepalive)
/// with every message so keeps one far entry per keepalive period, not one per message.
#[inline]
pub(crate) fn arm(timers: &mut TimerQueue, conn: &mut ConnContext, when: u64) {
    if conn.timer_armed == u64::MAX && conn.timer_spare <= when {
        conn.timer_armed = conn.timer_spare;
        conn.timer_spare = u64::MAX;
    } else if when < conn.timer_armed {
        if conn.timer_armed != u64::MAX {
            conn.timer_spare = conn.timer_armed;
        }
        conn.timer_armed = when;
        timers.push(when, conn.number);
    }
}

/// When the persist timer of `conn` (work waiting, nothing on the wire) fires: a
/// retransmission timeout after it last heard its peer or last fired, doubling while
/// the peer stays silent.
fn persist_at(conn: &ConnContext) -> u64 {
    let backoff = conn.tx.rto().max(1) << conn.probes_unanswered.min(12);
    conn.last_rx.max(conn.last_probe).saturating_add(backoff)
}

/// When `conn` next needs its timer, as of `now` (`u64::MAX`: not until something
/// else happens to it). `keepalive` and `tick` in clock ticks.
#[inline]
pub(crate) fn deadline(conn: &ConnContext, now: u64, keepalive: u64, tick: u64) -> u64 {
    // Completions waiting for room in the completion queue: retried each tick.
    let mut t = if conn.unreported.is_empty() {
        u64::MAX
    } else {
        now + tick
    };
    if conn.state != ConnState::Normal {
        return t;
    }
    if conn.inflight.is_empty() {
        // Idle: a probe once the peer was silent for a keepalive period (and none
        // was sent in the last one).
        return t.min(conn.last_rx.max(conn.last_probe) + keepalive + 1);
    }
    match conn.tx.deadline() {
        Some(d) => t = t.min(d.max(conn.rnr_until)),
        // Work waiting with nothing of its own on the wire: its peer's congestion
        // window or pace holds it. A persist timer (TCP's for a shut window) lets one
        // frame past the gate a retransmission timeout after it last heard the peer,
        // so that it finds out whether the peer is still there (and a window that
        // never opens cannot hold it for ever).
        // (Not before a receiver-not-ready back-off ends.)
        None if conn.tx.has_to_send() => t = t.min(persist_at(conn).max(conn.rnr_until)),
        None => {}
    }
    if conn.rnr_until > now {
        // Sending resumes then: the driver must come back.
        t = t.min(conn.rnr_until);
    }
    t
}

impl Node {
    /// Arms connection `slot`'s timer for its next deadline and lists it as ready
    /// if it has something to send: called after anything that changed it.
    #[inline]
    pub(crate) fn rearm(&mut self, slot: usize) {
        let keepalive = self.keepalive_ticks;
        let (now, tick) = (self.now, self.timer_tick);
        if let Some(conn) = self.conns.get_mut(slot) {
            let d = deadline(conn, now, keepalive, tick).max(now + 1);
            arm(&mut self.timers, conn, d);
            self.schedule(slot);
        }
    }

    /// Runs every connection timer due at `now`.
    pub(super) fn run_timers(&mut self, now: u64) {
        if self.timers.next() > now {
            return;
        }
        let mut due = std::mem::take(&mut self.timers_due);
        self.timers.take_due(now, &mut due);
        for (when, number) in due.drain(..) {
            let Some(slot) = self.conns.slot_of(number) else {
                continue; // the connection went
            };
            let conn = self.conns.get_mut(slot).expect("slot from map");
            if conn.timer_armed != when {
                if conn.timer_spare == when {
                    conn.timer_spare = u64::MAX; // superseded: nothing to run
                }
                continue; // superseded by an earlier entry, which ran
            }
            conn.timer_armed = u64::MAX;
            if self.conn_timer(slot, now) {
                self.rearm(slot);
            }
        }
        self.timers_due = due;
    }

    /// One connection's timer: completions waiting for room, connection management,
    /// keepalive, retransmission. Returns false when the connection went.
    fn conn_timer(&mut self, slot: usize, now: u64) -> bool {
        let keepalive = self.keepalive_ticks;
        let conn = self.conns.get_mut(slot).expect("slot");
        if !conn.unreported.is_empty() {
            send::report_waiting(conn);
        }
        if conn.state != ConnState::Normal {
            return true;
        }
        if conn.inflight.is_empty() {
            // Idle: probe a silent peer once a period; give up on one that left
            // `keepalive_count` probes unanswered.
            let silent = now.saturating_sub(conn.last_rx);
            if silent > keepalive && now.saturating_sub(conn.last_probe) > keepalive {
                // Quiet for a period: the in-flight memory a busy spell grew goes back.
                release_idle_memory(conn);
                if u32::from(conn.probes_unanswered) >= self.cfg.keepalive_count {
                    self.stats.keepalive_failures += 1;
                    let (flight, peer) = (
                        fail_connection(conn, Some(WcStatus::RetryExceeded)),
                        conn.peer,
                    );
                    let number = conn.number;
                    self.cc_forget(peer, flight);
                    if self.unconfirmed.contains_key(&number) {
                        // No application holds it: a secure requester that never
                        // showed it had the keys.
                        self.remove_connection(number);
                        return false;
                    }
                } else {
                    conn.probes_unanswered = conn.probes_unanswered.saturating_add(1);
                    conn.last_probe = now;
                    self.probe_list.push(slot);
                }
            }
        } else if now >= conn.rnr_until {
            if conn.tx.deadline().is_none() && conn.tx.has_to_send() && now >= persist_at(conn) {
                // The persist timer (see `deadline`): one frame past the gate.
                conn.last_probe = now;
                conn.probes_unanswered = conn.probes_unanswered.saturating_add(1);
                if !self.persist.contains(&slot) {
                    self.persist.push(slot);
                }
                self.stats.cc_persists += 1;
                return true;
            }
            let sprayed = self.cc.params.paths > 1;
            let timeout = if sprayed {
                let waits = self.cc.get(conn.peer).map_or(&[][..], |c| &c.waits[..]);
                conn.tx.on_timer_paths(now, waits, &mut self.path_events)
            } else {
                conn.tx.on_timer(now)
            };
            if sprayed && !self.path_events.is_empty() {
                let params = self.cc.params;
                self.path_events
                    .apply(self.cc.peer(conn.peer), &params, now, 0, false);
            }
            match timeout {
                Timeout::GiveUp => {
                    let (flight, peer) = (
                        fail_connection(conn, Some(WcStatus::RetryExceeded)),
                        conn.peer,
                    );
                    self.cc_forget(peer, flight);
                }
                Timeout::Retransmit => {
                    self.stats.timeouts += 1;
                    // As after TCP's timeout, what the connection had out no longer
                    // counts in flight, for the peer's window or its own: a connection
                    // that stalls must not hold the peer's window for the others (and
                    // the late acknowledgements of those frames take nothing off
                    // again). Without congestion control its own cap keeps counting.
                    let (params, peer) = (self.cc.params, conn.peer);
                    if params.enabled {
                        let out = if sprayed {
                            conn.tx.drop_flight_paths(&mut self.path_events)
                        } else {
                            conn.tx.drop_flight()
                        };
                        let cc = self.cc.peer(peer);
                        if sprayed {
                            self.path_events.apply(cc, &params, now, 0, false);
                        }
                        cc.on_timeout(&params);
                        cc.forget(out);
                    }
                    self.unpark(peer, now);
                    self.try_new_path(slot, now);
                }
                // Holes that waited on their paths' round trips: lost now (they go
                // out when the connection is served).
                Timeout::Lost => self.stats.lost_by_time += 1,
                Timeout::Idle => {}
            }
        }
        true
    }
}

/// An idle connection gives back what its busy spells grew (the in-flight list holds
/// as many entries as were outstanding at once: up to the window). Called when a
/// keepalive period passes in silence: at the side that probes, and at the side that
/// answers the probe.
pub(crate) fn release_idle_memory(conn: &mut ConnContext) {
    conn.inflight.shrink_to(IDLE_INFLIGHT);
}

/// In-flight entries an idle connection keeps room for.
const IDLE_INFLIGHT: usize = 0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Against a plain list: every entry is taken exactly once, never before its time
    /// and at the first call at or after it; `next` never says later than the
    /// earliest entry. Deadlines near (within the span), far (beyond it) and already
    /// past, clock steps small and large.
    #[test]
    fn the_wheel_takes_every_entry_once_when_due() {
        let mut rng = Rng::new(11);
        let tick = 50_000; // slots of 32 768
        let mut q = TimerQueue::new(tick);
        let mut pending: Vec<(u64, u32)> = Vec::new();
        let mut now = 1_000_000u64;
        let mut due = Vec::new();
        for round in 0..20_000u32 {
            for _ in 0..rng.below(4) {
                let when = match rng.below(10) {
                    0 => now.saturating_sub(rng.below(100_000)),
                    1 => now + rng.below(200_000_000),
                    _ => now + rng.below(2_000_000),
                };
                q.push(when, round);
                pending.push((when, round));
            }
            let earliest = pending.iter().map(|e| e.0).min().unwrap_or(u64::MAX);
            assert!(
                q.next() <= earliest,
                "next {} > earliest {earliest}",
                q.next()
            );
            now += match rng.below(50) {
                0 => rng.below(100_000_000),
                _ => rng.below(40_000),
            };
            due.clear();
            q.take_due(now, &mut due);
            let mut want: Vec<(u64, u32)> =
                pending.iter().copied().filter(|e| e.0 <= now).collect();
            pending.retain(|e| e.0 > now);
            want.sort_unstable();
            due.sort_unstable();
            assert_eq!(due, want, "round {round} at {now}");
        }
        due.clear();
        q.take_due(u64::MAX, &mut due);
        assert_eq!(due.len(), pending.len());
        assert_eq!(q.next(), u64::MAX, "empty");
    }
}
