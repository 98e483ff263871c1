//! `read_bw` / `atomic_bw`: ib_read_bw's and ib_atomic_bw's stream.
//!
//! The client streams requests in the loop every streaming test shares
//! ([`crate::stream`]). Reads land in the client's receive region (all
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

use deposit::WorkRequest;

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::report::Reporter;
use crate::setup::EMPTY_WC;
use crate::stream::Stream;
use crate::verify;
use crate::{Params, Test};

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
        let stats = Stream {
            size,
            req: crate::rdlat::request(p, side, size, base, 0, 0),
            depth_cap: None,
            laps: None,
            prepare: |id, _conn, req: &mut WorkRequest| {
                let off = ((id - 1) % slots as u64) * stride as u64;
                let remote = if atomic { 0 } else { off as u32 };
                *req = crate::rdlat::request(p, side, size, base + id - 1, off, remote);
                Ok(())
            },
        }
        .run(&side.s, p)?;
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
    Ok(s.ep.load_u64(AT)?)
}
