//! The streaming loop every `*_bw` test times (write_bw, read_bw, atomic_bw, send_bw,
//! ip_bw): one loop, so that the tests compare the transport's operations and not
//! their harnesses.
//!
//! The client keeps `--tx-depth` requests outstanding, signals every `--cq-mod`th and
//! the last; completions are in order and carry the request's number (1-based) as
//! `wr_id`, so one retires every request up to it. The time runs from the first post to
//! the last completion. The loop neither allocates nor makes a syscall; it reads the
//! clock once per completion poll that retired work, not per request. The request is
//! posted as it is, with its id and signaled flag set: a test that needs more per
//! request (`--verify` stamps and slots, an atomic's compare value) rewrites it in
//! [`Stream::prepare`], a generic closure (no indirect call in the loop).

use std::time::Instant;

use deposit::WorkRequest;

use crate::error::{PerfError, Result, Wait};
use crate::report::{BwStats, PeakRate};
use crate::setup::{Session, EMPTY_WC};
use crate::{Params, Span};

/// Laps of a receive queue the sender must respect (send_bw): after every `slots`
/// messages (counted over the whole run, `before` of them in earlier rounds) every
/// posted request must have completed and `wait(lap)` must return before the next
/// post (and before the round ends on a lap boundary).
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
    /// Most requests outstanding, below `--tx-depth` (`--verify`'s slot count); the
    /// completion interval is capped by it too (perftest's rule: a completion before
    /// the window is full).
    pub depth_cap: Option<u64>,
    pub laps: Option<Laps<'a>>,
    /// Called before request `id` is posted, with the request to rewrite.
    pub prepare: F,
}

impl<F: FnMut(u64, &mut WorkRequest) -> Result<()>> Stream<'_, F> {
    /// Runs the measured loop on `s`'s connection.
    pub fn run(self, s: &Session, p: &Params) -> Result<BwStats> {
        let Stream {
            size,
            mut req,
            depth_cap,
            laps,
            mut prepare,
        } = self;
        let (target, run_for) = match p.span {
            Span::Iters(n) => (n, None),
            Span::Duration(d) => (u64::MAX, Some(d)),
        };
        let tx_depth = (p.tx_depth as u64)
            .min(depth_cap.unwrap_or(u64::MAX))
            .max(1);
        let cq_mod = (p.cq_mod as u64).min(tx_depth).max(1);
        let (lap_n, lap_before) = laps
            .as_ref()
            .map(|l| (l.slots.max(1), l.before))
            .unwrap_or((u64::MAX, 0));
        let mut laps_waited = lap_before / lap_n;
        let cq = s.conn.cq();
        let mut wcs = [EMPTY_WC; 64];
        let mut posted = 0u64;
        let mut retired = 0u64;
        let mut final_posted = false;
        let mut stopping = false;
        let mut idle = Wait::new(p.timeout, "completions");
        let t0 = Instant::now();
        let deadline = run_for.map(|d| t0 + d);
        let mut peak = PeakRate::new(t0);
        let end = loop {
            while !final_posted && posted - retired < tx_depth {
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
                let last = id == target || stopping;
                prepare(id, &mut req)?;
                req.set_wr_id(id);
                // The lap test only with laps: a 64-bit division per request is not free.
                let lap_end = laps.is_some() && (lap_before + id) % lap_n == 0;
                req.set_signaled(last || id % cq_mod == 0 || lap_end);
                match s.conn.post(&req) {
                    Ok(()) => {}
                    Err(deposit::Error::SendQueueFull { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
                posted = id;
                final_posted = last;
            }
            let n = cq.poll(&mut wcs);
            if n == 0 {
                if idle.tick()? {
                    crate::lat::check_open(&s.conn)?;
                }
                continue;
            }
            for wc in &wcs[..n] {
                if !wc.status.is_ok() {
                    return Err(PerfError::Failed(format!(
                        "{size} B: request {} completed with {:?}",
                        wc.wr_id, wc.status
                    )));
                }
                retired = wc.wr_id;
            }
            let now = Instant::now();
            peak.record(now, retired);
            idle.progressed();
            if final_posted && retired == posted {
                break now;
            }
            if deadline.is_some_and(|d| now >= d) {
                stopping = true;
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
