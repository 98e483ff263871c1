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

use deposit::WorkRequest;

use crate::error::{PerfError, Result, Wait};
use crate::harness::Side;
use crate::report::{BwStats, PeakRate};
use crate::setup::EMPTY_WC;
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
/// messages of the round every posted request must have completed and `wait(lap)`
/// must return before the next post. One connection only.
pub struct Laps<'a> {
    pub slots: u64,
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
    /// side's data connections), with the request to rewrite.
    pub prepare: F,
}

impl<F: FnMut(u64, usize, &mut WorkRequest) -> Result<()>> Stream<'_, F> {
    /// Runs the measured loop over the side's data connections (round-robin; they
    /// share one completion queue).
    pub fn run(self, s: &Side, p: &Params) -> Result<BwStats> {
        let conns = &s.conns;
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
        let lap_n = laps.as_ref().map_or(u64::MAX, |l| l.slots.max(1));
        let mut laps_waited = 0;
        // Requests posted per call (`--post-list`; lists and receive-queue laps do not
        // mix: send_bw posts one at a time).
        let list = if laps.is_some() {
            1
        } else {
            u64::from(p.post_list.max(1)).min(window)
        };
        let mut batch: Vec<WorkRequest> = Vec::with_capacity(list as usize);
        let cq = s.conn().cq();
        let mut wcs = [EMPTY_WC; 64];
        // Per connection: the sequence number of its last completed request.
        let mut done_on = vec![0u64; conns.len()];
        // Requests posted; requests 1..=retired all completed (the window's base);
        // requests completed, in whatever order (the peak's count).
        let mut posted = 0u64;
        let mut retired = 0u64;
        let mut completed = 0u64;
        // Where the next request goes, and where the oldest outstanding one went.
        let mut next = Pos::FIRST;
        let mut old = Pos::FIRST;
        let mut target = target;
        let mut final_posted = false;
        let mut idle = Wait::new(p.timeout, "completions");
        let t0 = Instant::now();
        let deadline = run_for.map(|d| t0 + d);
        let mut peak = PeakRate::new(t0);
        let end = loop {
            while !final_posted {
                // A whole list fits in the window, or none is posted (the last one may
                // be shorter: the target's rest).
                let n = list.min(target - posted);
                if posted + n - retired > window {
                    break;
                }
                if let Some(l) = &laps {
                    let g = posted;
                    if g > 0 && g % lap_n == 0 && laps_waited < g / lap_n {
                        if retired < posted {
                            break;
                        }
                        (l.wait)(g / lap_n)?;
                        laps_waited = g / lap_n;
                    }
                }
                let at = next;
                let mut pos = next;
                batch.clear();
                for k in 0..n {
                    let id = posted + 1 + k;
                    prepare(id, pos.c, &mut req)?;
                    req.set_wr_id(((pos.c as u64) << SEQ_BITS) | pos.j);
                    // The lap test only with laps: a 64-bit division per request is not
                    // free.
                    let lap_end = laps.is_some() && id % lap_n == 0;
                    // Its connection's last request: the next one on it is past the
                    // target.
                    let last = id + pos.gap_to_next_on_conn(q, list) > target;
                    req.set_signaled(last || pos.j % cq_mod == 0 || lap_end);
                    if list > 1 {
                        batch.push(req);
                    }
                    pos.advance(q, list);
                }
                let r = if list > 1 {
                    conns[at.c].post_list(&batch)
                } else {
                    conns[at.c].post(&req)
                };
                match r {
                    Ok(()) => {}
                    Err(deposit::Error::SendQueueFull { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
                posted += n;
                next = pos;
                final_posted = posted == target;
            }
            let n = cq.poll(&mut wcs);
            if n == 0 {
                if idle.tick()? {
                    s.check_open()?;
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
                while retired < posted && done_on[old.c] >= old.j {
                    retired += 1;
                    old.advance(q, list);
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
                // (Lists are whole here: the target was unbounded.)
                target = if cq_mod == 1 && posted > 0 {
                    posted
                } else {
                    posted + q * list
                };
                final_posted = posted == target;
                if final_posted && retired == posted {
                    break now;
                }
            }
        };
        let elapsed = end.duration_since(t0);
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

/// Where a request goes: connection `c` (an index), its sequence number `j` there, its
/// place `k` in its list. Requests go in lists of `list` to one connection, the lists
/// round-robin over the `q` connections (one request per list: plain round-robin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    c: usize,
    j: u64,
    k: u64,
}

impl Pos {
    const FIRST: Pos = Pos { c: 0, j: 1, k: 0 };

    /// The next request's place.
    #[inline]
    fn advance(&mut self, q: u64, list: u64) {
        self.j += 1;
        self.k += 1;
        if self.k == list {
            self.k = 0;
            self.c += 1;
            if self.c as u64 == q {
                self.c = 0;
            } else {
                self.j -= list; // the next connection's list has the same numbers
            }
        }
    }

    /// How many requests on from this one the next on the same connection is.
    #[inline]
    fn gap_to_next_on_conn(&self, q: u64, list: u64) -> u64 {
        if self.k + 1 < list {
            1
        } else {
            (q - 1) * list + 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The place of the `i`th request (from 0), counted out: lists of `list` to one
    /// connection, round-robin over `q`.
    fn place(i: u64, q: u64, list: u64) -> Pos {
        let (u, k) = (i / list, i % list);
        Pos {
            c: (u % q) as usize,
            j: (u / q) * list + k + 1,
            k,
        }
    }

    #[test]
    fn requests_go_in_lists_round_robin_and_know_their_connections_next() {
        for (q, list) in [(1, 1), (3, 1), (1, 8), (4, 3), (5, 8)] {
            let mut pos = Pos::FIRST;
            for i in 0..500 {
                assert_eq!(pos, place(i, q, list), "q {q} list {list} request {i}");
                let d = pos.gap_to_next_on_conn(q, list);
                let nxt = place(i + d, q, list);
                assert_eq!(
                    (nxt.c, nxt.j),
                    (pos.c, pos.j + 1),
                    "q {q} list {list} request {i}"
                );
                pos.advance(q, list);
            }
        }
    }
}
