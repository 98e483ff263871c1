//! The streaming loop every `*_bw` test times (write_bw, read_bw, atomic_bw, send_bw,
//! ip_bw, append_bw): one loop, so that the tests compare the transport's operations
//! and not their harnesses.
//!
//! The client posts requests numbered 1, 2, ... round-robin over its connections
//! (request `id` on connection `(id - 1) mod q`, `-q` of write_bw and append_bw; one
//! connection for the others) and keeps a **window** of them outstanding: request `id`
//! is posted only once every request up to `id - window` has completed, whichever
//! connection it went on. The window is perftest's `--tx-depth` per connection, with
//! the client's total capped at [`MAX_OUTSTANDING`]: `min(tx_depth x q, 4096)` (and a
//! test's own cap, `--verify`'s slot count), so that neither the completion queue nor
//! any per-request buffer grows with `-q` (at `-q 65536` that is 4096 in flight, at
//! most one per connection). One connection: `--tx-depth`, as it always was.
//!
//! Every connection signals every `--cq-mod`th of its requests (capped at its share of
//! the window, `window / q`, so that a full window always holds a signaled request on
//! the connection of its oldest one; with more connections than the window, every
//! request) and its last. Completions of one connection are in order and carry
//! `(connection << 40) | its sequence number` as `wr_id` (the request number itself
//! with one connection), so one retires every request of its connection up to it. The
//! time runs from the first post to the last completion. The loop neither allocates
//! nor makes a syscall; it reads the clock once per completion poll that retired work,
//! not per request. The request is posted as it is, with its id and signaled flag set:
//! a test that needs more per request (`--verify` stamps and slots, an atomic's
//! compare value, an append's record) rewrites it in [`Stream::prepare`], a generic
//! closure (no indirect call in the loop).

use std::time::Instant;

use deposit::{Connection, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::report::{BwStats, PeakRate};
use crate::setup::{Session, EMPTY_WC};
use crate::{Params, Span};

/// Most requests a client keeps outstanding over all its connections together (the
/// largest `--tx-depth`): what bounds the completion queue and the source slots
/// whatever `-q` is.
pub const MAX_OUTSTANDING: u64 = 4096;
/// Bits of a work request id holding the per-connection sequence number (the
/// connection's index is above them).
pub const SEQ_BITS: u32 = 40;

/// The client's window over `conns` connections (see the module doc), before a
/// test's own cap.
pub fn window(p: &Params, conns: usize) -> u64 {
    (u64::from(p.tx_depth) * conns.max(1) as u64).clamp(1, MAX_OUTSTANDING)
}

/// Laps of a receive queue the sender must respect (send_bw): after every `slots`
/// messages (counted over the whole run, `before` of them in earlier rounds) every
/// posted request must have completed and `wait(lap)` must return before the next
/// post (and before the round ends on a lap boundary). One connection only.
pub struct Laps<'a> {
    pub slots: u64,
    pub before: u64,
    pub wait: &'a dyn Fn(u64) -> Result<()>,
}

/// One size's stream.
pub struct Stream<'a, F> {
    pub size: u64,
    /// The request posted (its id and signaled flag are the loop's).
    pub req: WorkRequest,
    /// Most requests outstanding, below the window (`--verify`'s slot count); the
    /// completion interval is capped by it too (perftest's rule: a completion before
    /// the window is full).
    pub depth_cap: Option<u64>,
    pub laps: Option<Laps<'a>>,
    /// Called before request `id` is posted on connection `conn` (an index into the
    /// connections of [`Stream::run_on`]), with the request to rewrite.
    pub prepare: F,
}

impl<F: FnMut(u64, usize, &mut WorkRequest) -> Result<()>> Stream<'_, F> {
    /// Runs the measured loop on `s`'s connection.
    pub fn run(self, s: &Session, p: &Params) -> Result<BwStats> {
        self.run_on(s, &[&s.conn], p)
    }

    /// Runs the measured loop over `conns` (round-robin; they share `s`'s completion
    /// queue).
    pub fn run_on(self, s: &Session, conns: &[&Connection], p: &Params) -> Result<BwStats> {
        let Stream {
            size,
            mut req,
            depth_cap,
            laps,
            mut prepare,
        } = self;
        assert!(!conns.is_empty(), "a stream needs a connection");
        debug_assert!(
            laps.is_none() || conns.len() == 1,
            "laps need one connection"
        );
        let q = conns.len() as u64;
        let (target, run_for) = match p.span {
            Span::Iters(n) => (n, None),
            Span::Duration(d) => (u64::MAX, Some(d)),
        };
        let window = window(p, conns.len())
            .min(depth_cap.unwrap_or(u64::MAX))
            .max(1);
        let cq_mod = (p.cq_mod as u64).min(window / q).max(1);
        let (lap_n, lap_before) = laps
            .as_ref()
            .map(|l| (l.slots.max(1), l.before))
            .unwrap_or((u64::MAX, 0));
        let mut laps_waited = lap_before / lap_n;
        let cq = s.conn.cq();
        let mut wcs = [EMPTY_WC; 64];
        // Per connection: the sequence number of its last completed request.
        let mut done_on = vec![0u64; conns.len()];
        // Requests posted; requests 1..=retired all completed (the window's base);
        // requests completed, in whatever order (the peak's count).
        let mut posted = 0u64;
        let mut retired = 0u64;
        let mut completed = 0u64;
        // Where the next request goes, and where the oldest outstanding one went:
        // (connection, its sequence number), advanced without a division.
        let (mut next_c, mut next_j) = (0usize, 1u64);
        let (mut old_c, mut old_j) = (0usize, 1u64);
        // Requests with an id above this are their connection's last.
        let mut last_lap = target.saturating_sub(q);
        let mut target = target;
        let mut final_posted = false;
        let mut idle = Wait::new(p.timeout, "completions");
        let t0 = Instant::now();
        let deadline = run_for.map(|d| t0 + d);
        let mut peak = PeakRate::new(t0);
        let end = loop {
            while !final_posted && posted - retired < window {
                if let Some(l) = &laps {
                    let g = lap_before + posted;
                    if g > 0 && g % lap_n == 0 && laps_waited < g / lap_n {
                        if retired < posted {
                            break;
                        }
                        (l.wait)(g / lap_n)?;
                        laps_waited = g / lap_n;
                    }
                }
                let id = posted + 1;
                prepare(id, next_c, &mut req)?;
                req.set_wr_id(((next_c as u64) << SEQ_BITS) | next_j);
                // The lap test only with laps: a 64-bit division per request is not free.
                let lap_end = laps.is_some() && (lap_before + id) % lap_n == 0;
                req.set_signaled(id > last_lap || next_j % cq_mod == 0 || lap_end);
                match conns[next_c].post(&req) {
                    Ok(()) => {}
                    Err(deposit::Error::SendQueueFull { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
                posted = id;
                final_posted = id == target;
                next_c += 1;
                if next_c == conns.len() {
                    next_c = 0;
                    next_j += 1;
                }
            }
            let n = cq.poll(&mut wcs);
            if n == 0 {
                if idle.tick()? {
                    crate::lat::check_open(&s.conn)?;
                }
                continue;
            }
            for wc in &wcs[..n] {
                let (c, j) = (
                    (wc.wr_id >> SEQ_BITS) as usize,
                    wc.wr_id & ((1 << SEQ_BITS) - 1),
                );
                if !wc.status.is_ok() {
                    return Err(PerfError::Failed(format!(
                        "{size} B: request {j} on connection {c} completed with {:?}",
                        wc.status
                    )));
                }
                if let Some(d) = done_on.get_mut(c) {
                    completed += j.saturating_sub(*d);
                    *d = j;
                }
            }
            if q == 1 {
                retired = done_on[0];
            } else {
                while retired < posted && done_on[old_c] >= old_j {
                    retired += 1;
                    old_c += 1;
                    if old_c == conns.len() {
                        old_c = 0;
                        old_j += 1;
                    }
                }
            }
            let now = Instant::now();
            peak.record(now, completed);
            idle.progressed();
            if final_posted && retired == posted {
                break now;
            }
            if !final_posted && target == u64::MAX && deadline.is_some_and(|d| now >= d) {
                // -D is over: one more lap, so that every connection's last request is
                // signaled (none needed when every request is).
                target = if cq_mod == 1 && posted > 0 {
                    posted
                } else {
                    posted + q
                };
                last_lap = target.saturating_sub(q);
                final_posted = posted == target;
                if final_posted && retired == posted {
                    break now;
                }
            }
        };
        let elapsed = end.duration_since(t0);
        if let Some(l) = &laps {
            let g = lap_before + posted;
            if g % lap_n == 0 && laps_waited < g / lap_n {
                (l.wait)(g / lap_n)?;
            }
        }
        let mut stats = BwStats {
            bytes: size,
            iterations: retired,
            timed: retired,
            elapsed,
            peak_rate: 0.0,
        };
        stats.peak_rate = peak.peak(stats.rate());
        Ok(stats)
    }
}
