//! `read_bw` / `atomic_bw`: ib_read_bw's and ib_atomic_bw's stream, and the
//! streaming loop send_bw shares ([`stream`]).
//!
//! The client keeps `--tx-depth` requests outstanding, signals every `--cq-mod`th and
//! the last; completions are in order and carry the request's number, so one retires
//! everything up to it (as write_bw). Reads land in the client's receive region (all
//! at offset 0: the data is not looked at), atomics act on the server's word at offset
//! 0 and return the old value there. The table is write_bw's: MiB/s of the size
//! (8 for atomics), Mpps.
//!
//! atomic_bw checks the run at the end: the server's word must equal the number of
//! atomics executed (FETCH_AND_ADD adds 1 each, CMP_AND_SWAP swaps k for k+1 in
//! order). The client reads it with one RDMA read after each round (outside the
//! timed span, before the round's end marker) and prints a warning on a mismatch.
//!
//! The server is passive ([`crate::harness::passive_server`]) and prints the client's
//! numbers, like write_bw's.

use std::time::Instant;

use deposit::WorkRequest;

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::report::{BwStats, PeakRate, Reporter};
use crate::setup::EMPTY_WC;
use crate::{Params, Span, Test};

/// Runs read_bw or atomic_bw in this process's role.
pub fn run(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: exchange::Layout::for_max_size(p.max_size()),
            serve: harness::serve_plain,
            dial: harness::dial_plain,
            server: harness::passive_server,
            client,
            server_prints: true,
        },
    )
}

fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let mut k = 0u64;
    for (round, &size) in p.sizes.iter().enumerate() {
        let base = k;
        let stats = stream(side, p, size, None, &mut |id| {
            crate::rdlat::request(p, side, size, base + id - 1, 0)
        })?;
        k += stats.iterations;
        // Before the marker: the server closes the connection after the last one.
        if p.test == Test::AtomicBw {
            verify_counter(side, p, k)?;
        }
        let end = RoundEnd {
            count: stats.iterations,
            elapsed: stats.elapsed,
            peak_rate: stats.peak_rate,
            verdict: None,
        };
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        rep.bw(&stats);
    }
    Ok(())
}

/// Reads the server's word with one RDMA read and compares it with `expect`.
fn verify_counter(side: &Side, p: &Params, expect: u64) -> Result<()> {
    let s = &side.s;
    const AT: u64 = 8;
    let req = WorkRequest::read(u64::MAX - 10, &s.ep, AT, 8, 0).signaled();
    s.conn.post(&req)?;
    let mut wait = Wait::new(p.timeout, "the read of the final atomic counter");
    let mut wcs = [EMPTY_WC; 16];
    loop {
        let n = s.conn.cq().poll(&mut wcs);
        if let Some(wc) = wcs[..n].iter().find(|w| w.wr_id == u64::MAX - 10) {
            if !wc.status.is_ok() {
                eprintln!(
                    "ddperf: warning: the read of the final counter failed with {:?}",
                    wc.status
                );
                return Ok(());
            }
            break;
        }
        wait.tick()?;
    }
    let got = s.ep.load_u64(AT as usize)?;
    if got == expect {
        eprintln!(
            "ddperf: final counter {got}: OK ({} atomics, {})",
            expect,
            p.atomic.name()
        );
    } else {
        eprintln!(
            "ddperf: warning: final counter {got}, expected {expect} ({})",
            p.atomic.name()
        );
    }
    Ok(())
}

/// Laps of a receive queue the sender must respect (send_bw): after every `slots`
/// messages (counted over the whole run, `before` of them in earlier rounds) every
/// posted request must have completed and `wait(lap)` must return before the next
/// post (and before the round ends on a lap boundary).
pub struct Laps<'a> {
    pub slots: u64,
    pub before: u64,
    pub wait: &'a dyn Fn(u64) -> Result<()>,
}

/// One size: the measured loop. `make(id)` builds request `id` (1-based); the loop sets
/// its id and signaled flag.
pub fn stream(
    side: &Side,
    p: &Params,
    size: u64,
    laps: Option<Laps<'_>>,
    make: &mut dyn FnMut(u64) -> WorkRequest,
) -> Result<BwStats> {
    let s = &side.s;
    let (target, run_for) = match p.span {
        Span::Iters(n) => (n, None),
        Span::Duration(d) => (u64::MAX, Some(d)),
    };
    let tx_depth = p.tx_depth as u64;
    let cq_mod = p.cq_mod as u64;
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
            let mut req = make(id);
            req.set_wr_id(id);
            req.set_signaled(last || id % cq_mod == 0 || (lap_before + id) % lap_n == 0);
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
