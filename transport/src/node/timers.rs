//! Timers from deadlines: no scan of every connection per tick.
//!
//! Each connection arms the node's timer queue (a min-heap of (time, connection)) for
//! the next moment it needs attention — its retransmission deadline from
//! [`crate::reliability::Sender::deadline`], the end of a receiver-not-ready back-off,
//! a keepalive probe when idle, a retry of completions waiting for room. (Connection
//! management keeps its own timers: [`crate::cm::Cm::next_timeout`].) Arming is lazy: a connection keeps at most one live
//! entry (`Connection::timer_armed`, the earliest); later deadlines need no entry until
//! that one fires, and entries made stale by an earlier one are skipped when they come
//! up. A firing entry runs the connection's timer, which arms the next deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::connection::{ConnState, Connection, WcStatus};
use crate::reliability::Timeout;

use super::{fail_connection, send, Node};

/// Pending timers: (when, connection number), earliest first.
pub(crate) type TimerQueue = BinaryHeap<Reverse<(u64, u32)>>;

/// Arms `conn`'s timer for `when` unless an earlier one is armed. The entry it
/// supersedes stays queued as the connection's spare; with none armed (its entry just
/// fired), the spare, if it comes no later than `when`, serves instead of a new entry.
/// A connection whose deadlines move between near (retransmission) and far (keepalive)
/// with every message so keeps one far entry per keepalive period, not one per message.
#[inline]
pub(crate) fn arm(timers: &mut TimerQueue, conn: &mut Connection, when: u64) {
    if conn.timer_armed == u64::MAX && conn.timer_spare <= when {
        conn.timer_armed = conn.timer_spare;
        conn.timer_spare = u64::MAX;
    } else if when < conn.timer_armed {
        if conn.timer_armed != u64::MAX {
            conn.timer_spare = conn.timer_armed;
        }
        conn.timer_armed = when;
        timers.push(Reverse((when, conn.number)));
    }
}

/// When `conn` next needs its timer, as of `now` (`u64::MAX`: not until something
/// else happens to it). `keepalive` and `tick` in clock ticks.
#[inline]
pub(crate) fn deadline(conn: &Connection, now: u64, keepalive: u64, tick: u64) -> u64 {
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
    if let Some(d) = conn.tx.deadline() {
        t = t.min(d.max(conn.rnr_until));
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
        while let Some(&Reverse((when, number))) = self.timers.peek() {
            if when > now {
                break;
            }
            self.timers.pop();
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
                if conn.probes_unanswered >= self.cfg.keepalive_count {
                    self.stats.keepalive_failures += 1;
                    fail_connection(conn, WcStatus::RetryExceeded);
                } else {
                    conn.probes_unanswered += 1;
                    conn.last_probe = now;
                    self.probe_list.push(slot);
                }
            }
        } else if now >= conn.rnr_until {
            match conn.tx.on_timer(now) {
                Timeout::GiveUp => fail_connection(conn, WcStatus::RetryExceeded),
                Timeout::Retransmit => self.stats.timeouts += 1,
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
pub(crate) fn release_idle_memory(conn: &mut Connection) {
    conn.inflight.shrink_to(IDLE_INFLIGHT);
}

/// In-flight entries an idle connection keeps room for.
const IDLE_INFLIGHT: usize = 0;
