//! Waiting without burning a core: how a thread that polls for something (a
//! completion, a connection, an event, the dedicated worker's next frame) behaves when
//! nothing comes.
//!
//! It spins at first — the answer to a request is microseconds away, and a sleep
//! costs more than that to wake from — then naps in short sleeps, and after a long
//! quiet in longer ones. On this project's 2-core VM a timed wake costs 8-10 us of CPU,
//! so short naps alone still use a fifth of a core: the long naps are what makes an
//! idle process cheap, at the price of noticing the first frame after a long quiet up
//! to [`LONG_NAP`] late. (Waking on the event itself — rx interrupts, doorbells — is
//! the way past that trade-off: the submission ring's doorbell and, on ring ports, the
//! frame doorbell wake a sleeping worker at once.) An application thread that waits on
//! a device with a dedicated worker does not nap once spinning is over: it blocks on
//! the queue and the worker's push wakes it (`deposit_transport::wake`).

use std::time::{Duration, Instant};

use crate::device::DeviceInner;

/// How long a quiet is spun through before the first nap: traffic with gaps shorter
/// than this (a request every few milliseconds) is answered at polling speed. Timed,
/// not counted: a poll costs from tens of nanoseconds (a dedicated worker's) to about a
/// microsecond (an inline device's turn).
pub const SPIN_FOR: Duration = Duration::from_millis(50);
/// Idle batches of 64 polls (about 25-100 us of quiet) after which a dedicated worker
/// that still spins yields its core between batches ([`Backoff::spin_or_yield`]).
pub const YIELD_AFTER: u32 = 16;
/// Nap length while the quiet is short.
pub const SHORT_NAP: Duration = Duration::from_micros(50);
/// Quiet after which the naps get long.
pub const LONG_QUIET: Duration = Duration::from_secs(1);
/// Nap length after a long quiet.
pub const LONG_NAP: Duration = Duration::from_millis(2);

/// Longest nap of an inline device's wait-fd helper on a port whose frames ring a
/// doorbell (ring ports): its naps end for a frame or a post at once, so their length
/// only bounds how late a timer (a retransmission, a keepalive) runs.
pub const DOORBELL_NAP: Duration = Duration::from_millis(10);

/// How long an inline device's wait-fd helper naps after `quiet` without a frame
/// while the application sleeps on the fd (`Device::wait_fd`): a quarter of the
/// quiet, from [`SHORT_NAP`] to [`LONG_NAP`] — about 20 naps to reach the longest,
/// then 500 a second — or to [`DOORBELL_NAP`] (100 a second) on a port with
/// `doorbells`. An idle wait so costs a few milliseconds of CPU a second where
/// [`Backoff`]'s second of short naps costs a fifth of a core. A frame on a ring port
/// (its doorbell) or a post ends a nap at once; on other ports a frame waits at most
/// a quarter of the quiet before it (2 ms at most).
pub(crate) fn armed_nap(quiet: Duration, doorbells: bool) -> Duration {
    let longest = if doorbells { DOORBELL_NAP } else { LONG_NAP };
    (quiet / 4).clamp(SHORT_NAP, longest)
}

/// The waiting state of one poll loop.
#[derive(Debug)]
pub(crate) struct Backoff {
    idle_polls: u32,
    /// When the current quiet started (read at its first idle poll).
    quiet_since: Option<Instant>,
    napping: bool,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            idle_polls: 0,
            quiet_since: None,
            napping: false,
        }
    }

    /// Something came: the next quiet starts from the spinning phase again.
    #[inline]
    pub(crate) fn reset(&mut self) {
        self.idle_polls = 0;
        self.quiet_since = None;
        self.napping = false;
    }

    /// Whether the quiet has lasted past spinning (a poll loop then polls once per
    /// wake, not a batch: on a virtual machine the first polls after a sleep are slow).
    #[inline]
    pub(crate) fn napping(&self) -> bool {
        self.napping
    }

    /// [`Backoff::spin`] for a dedicated worker, which calls it once per batch of
    /// polls: past [`YIELD_AFTER`] idle batches it also yields its core (a shard alone
    /// on its core loses a system call per batch; one sharing its core with another
    /// busy thread — more shards and application threads than cores — stops holding
    /// it through a whole scheduler slice while the other has frames waiting).
    #[inline]
    pub(crate) fn spin_or_yield(&mut self) -> bool {
        let spinning = self.spin();
        if spinning && self.idle_polls > YIELD_AFTER {
            std::thread::yield_now();
        }
        spinning
    }

    /// A poll found nothing: waits a little before the next one, longer the longer
    /// nothing came.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        if !self.spin() {
            self.nap();
        }
    }

    /// One step of the spinning phase; false once it is over (the caller naps, or
    /// blocks where something will wake it).
    #[inline]
    pub(crate) fn spin(&mut self) -> bool {
        if self.napping {
            return false;
        }
        self.idle_polls = self.idle_polls.wrapping_add(1);
        // The clock is read on the first idle poll and every 16th after it.
        if self.idle_polls & 15 == 1 {
            let quiet = self.quiet_since.get_or_insert_with(Instant::now).elapsed();
            if quiet >= SPIN_FOR {
                self.napping = true;
                return false;
            }
        }
        std::hint::spin_loop();
        true
    }

    #[cold]
    fn nap(&mut self) {
        std::thread::sleep(self.nap_length());
    }

    /// How long the next nap lasts: short while the quiet is short, long after.
    pub(crate) fn nap_length(&mut self) -> Duration {
        let quiet = self.quiet_since.get_or_insert_with(Instant::now).elapsed();
        if quiet < LONG_QUIET {
            SHORT_NAP
        } else {
            LONG_NAP
        }
    }
}

/// Waits until `take` yields something or `deadline` passes, the way every blocking
/// call of the API does: it polls (driving the device, inline) while the wait is short
/// — a poll that moved frames starts the quiet over — then, with a dedicated worker,
/// `block`s until the worker's push wakes it, and inline naps between polls.
pub(crate) fn wait_for<T>(
    dev: &DeviceInner,
    deadline: Instant,
    mut take: impl FnMut() -> Option<T>,
    block: impl FnOnce(Instant) -> Option<T>,
) -> Option<T> {
    let mut backoff = Backoff::new();
    loop {
        if let Some(t) = take() {
            return Some(t);
        }
        if Instant::now() > deadline {
            return None;
        }
        if dev.progress_waiting() != 0 {
            backoff.reset();
        } else if !backoff.spin() {
            if dev.is_dedicated() {
                return block(deadline);
            }
            backoff.snooze();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_first_then_naps_and_starts_over_after_a_reset() {
        let mut b = Backoff::new();
        let t = Instant::now();
        while !b.napping() {
            b.snooze();
        }
        let spun = t.elapsed();
        assert!(spun >= SPIN_FOR, "spins for {SPIN_FOR:?} first: {spun:?}");
        let t = Instant::now();
        b.snooze();
        assert!(t.elapsed() >= SHORT_NAP, "then it naps");
        b.reset();
        assert!(!b.napping());
        let t = Instant::now();
        b.snooze();
        assert!(t.elapsed() < SHORT_NAP, "a reset spins again");
    }
}
