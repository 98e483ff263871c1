//! Untimed warm-up iterations before a latency round.
//!
//! A freshly connected pair of processes is slow for a while on a small shared machine
//! (seen here over memif: about 5 us per round trip for the first ~10 ms, raw DPDK and
//! deposit alike, then 0.6 us), which perftest's default 1000 iterations would report
//! as the latency. The client therefore runs ping-pongs for `--warmup-ms` (default 50,
//! at most [`MAX_ITERS`]) before it keeps samples. They are real iterations of the
//! protocol — the server answers and counts them — only their samples are dropped, so
//! round-end counts include them ([`Warmup::done`]).

use std::time::{Duration, Instant};

use crate::lat::DURATION_SAMPLES;
use crate::{Params, Span};

/// Most warm-up iterations per round, whatever the time.
pub const MAX_ITERS: u64 = 100_000;

/// The warm-up state of one round.
#[derive(Debug, Clone, Copy)]
pub struct Warmup {
    until: Option<Instant>,
    done: u64,
}

impl Warmup {
    /// Starts the warm-up of a round now (none when `span` is zero).
    pub fn start(span: Duration) -> Warmup {
        Warmup {
            until: (!span.is_zero()).then(|| Instant::now() + span),
            done: 0,
        }
    }

    /// Whether the iteration that ended at `t` was a warm-up one (drop its sample).
    #[inline]
    pub fn absorb(&mut self, t: Instant) -> bool {
        match self.until {
            Some(u) if t < u && self.done < MAX_ITERS => {
                self.done += 1;
                true
            }
            Some(_) => {
                self.until = None;
                false
            }
            None => false,
        }
    }

    /// Warm-up iterations run so far.
    pub fn done(&self) -> u64 {
        self.done
    }
}

/// One latency round's sampling: the warm-up, then timed iterations until `-n` of them
/// or the `-D` time is up (counted from the end of the warm-up, about).
pub struct LatRound {
    warm: Warmup,
    deadline: Option<Instant>,
    limit: u64,
    timed: u64,
}

impl LatRound {
    /// Most samples one round keeps (`-n`, or [`DURATION_SAMPLES`] with `-D`).
    pub fn capacity(p: &Params) -> usize {
        match p.span {
            Span::Iters(n) => n as usize,
            Span::Duration(_) => DURATION_SAMPLES,
        }
    }

    /// Starts a round now.
    pub fn start(p: &Params) -> LatRound {
        let (limit, deadline) = match p.span {
            Span::Iters(n) => (n, None),
            Span::Duration(d) => (DURATION_SAMPLES as u64, Some(Instant::now() + p.warmup + d)),
        };
        LatRound {
            warm: Warmup::start(p.warmup),
            deadline,
            limit,
            timed: 0,
        }
    }

    /// Whether another iteration is due.
    #[inline]
    pub fn more(&self) -> bool {
        self.timed < self.limit
    }

    /// The iteration that ran `t0..t1`: its round trip goes into `rtts` unless it was a
    /// warm-up one. Returns whether the round is over (the `-D` time is up).
    #[inline]
    pub fn sample(&mut self, rtts: &mut Vec<u64>, t0: Instant, t1: Instant) -> bool {
        if self.warm.absorb(t1) {
            return false;
        }
        rtts.push(t1.duration_since(t0).as_nanos() as u64);
        self.timed += 1;
        self.deadline.is_some_and(|d| t1 >= d)
    }

    /// Iterations run, warm-up included (what the peer counted).
    pub fn iterations(&self) -> u64 {
        self.timed + self.warm.done()
    }

    /// Says so when a `-D` round ran out of sample room before its time.
    pub fn report_cut(&self, size: u64) {
        if self.deadline.is_some() && self.timed == self.limit {
            eprintln!(
                "ddperf: {size} B: stopped at {} samples before the -D time was up",
                self.limit
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorbs_until_the_time_is_up_then_never_again() {
        let mut w = Warmup::start(Duration::from_millis(20));
        let t0 = Instant::now();
        assert!(w.absorb(t0));
        assert!(w.absorb(t0));
        assert!(!w.absorb(t0 + Duration::from_millis(30)));
        assert!(!w.absorb(t0), "over once it is over");
        assert_eq!(w.done(), 2);
    }

    #[test]
    fn zero_span_is_no_warmup() {
        let mut w = Warmup::start(Duration::ZERO);
        assert!(!w.absorb(Instant::now()));
        assert_eq!(w.done(), 0);
    }
}
