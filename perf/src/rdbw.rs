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
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::report::{BwStats, PeakRate, Reporter};
use crate::setup::EMPTY_WC;
use crate::verify;
use crate::{Params, Span, Test};

/// Runs read_bw or atomic_bw in this process's role.
pub fn run(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: layout(p),
            serve: crate::rdlat::serve,
            dial: harness::dial_plain,
            server: harness::passive_server,
            client,
            server_prints: true,
        },
    )
}

/// The endpoint layout: `--verify` needs slot regions (see [`crate::verify`]).
fn layout(p: &Params) -> Layout {
    let max = p.max_size();
    if p.verify {
        Layout::verified(max, verify::region_len(max))
    } else {
        Layout::for_max_size(max)
    }
}

fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let atomic = p.test == Test::AtomicBw;
    let mut k = 0u64;
    let mut region = Vec::new();
    for (round, &size) in p.sizes.iter().enumerate() {
        let base = k;
        // --verify: request i uses slot (i-1) mod slots (reads: `stride` apart on both
        // sides; atomics: 8-byte result slots), cleared before the round, not timed.
        let (slots, stride) = match (p.verify, atomic) {
            (false, _) => (1, 0),
            (true, false) => (verify::slots(size, s.lay.send), verify::stride(size)),
            (true, true) => (verify::MAX_SLOTS, 8),
        };
        if p.verify {
            let clear = if atomic { 0xFF } else { 0 };
            s.ep.write(0, &vec![clear; slots * stride])?;
        }
        let stats = stream(side, p, size, None, &mut |id| {
            let off = ((id - 1) % slots as u64) * stride as u64;
            let remote = if atomic { 0 } else { off as u32 };
            Ok(crate::rdlat::request(
                p,
                side,
                size,
                base + id - 1,
                off,
                remote,
            ))
        })?;
        k += stats.iterations;
        let mut checked = verify::Outcome::default();
        if p.verify {
            let n = stats.iterations;
            verify::read_region(&s.ep, 0, slots * stride, &mut region)?;
            if atomic {
                let results: Vec<u64> = region
                    .chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                verify::check_atomic_slots(&results, base, n, &mut checked);
            } else {
                let seed = crate::rdlat::read_seed();
                verify::check_read_slots(&region, size, slots, n, seed, &mut checked);
            }
        }
        // Before the marker: the server closes the connection after the last one.
        if atomic {
            let word = read_counter(side, p)?;
            if p.verify {
                verify::check_word(word, k, "the server's word", &mut checked);
            } else if word == k {
                eprintln!(
                    "ddperf: final counter {word}: OK ({k} atomics, {})",
                    p.atomic.name()
                );
            } else {
                eprintln!(
                    "ddperf: warning: final counter {word}, expected {k} ({})",
                    p.atomic.name()
                );
            }
        }
        let mut end = RoundEnd::new(stats.iterations, stats.elapsed, stats.peak_rate);
        if p.verify {
            end.verdict = Some(verify::marker_verdict(&checked));
            rep.outcome().merge(checked);
        }
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        rep.bw(&stats);
    }
    Ok(())
}

/// Reads the server's word (offset 0) with one RDMA read into offset 8 here.
pub fn read_counter(side: &Side, p: &Params) -> Result<u64> {
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
                return Err(PerfError::Failed(format!(
                    "the read of the final atomic counter completed with {:?}",
                    wc.status
                )));
            }
            break;
        }
        wait.tick()?;
    }
    Ok(s.ep.load_u64(AT as usize)?)
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
    make: &mut dyn FnMut(u64) -> Result<WorkRequest>,
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
            let mut req = make(id)?;
            req.set_wr_id(id);
            // The lap test only with laps: a 64-bit division per message is not free.
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
