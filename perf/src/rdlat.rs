//! `read_lat` / `atomic_lat`: ib_read_lat's and ib_atomic_lat's loop.
//!
//! The client posts one signaled request and polls its completion queue until the
//! completion comes back; the time from the post to the completion is one sample,
//! reported as the FULL round trip (perftest reports reads and atomics unhalved).
//!
//! * read_lat reads `size` bytes at offset 0 of the server's endpoint (which has
//!   remote-read rights for this test) into the client's receive region.
//! * atomic_lat runs `-A FETCH_AND_ADD` (add 1) or `-A CMP_AND_SWAP` (compare k, swap
//!   k+1: a chain that succeeds when every request executes once and in order) on the
//!   8-byte word at offset 0 of the server's endpoint (remote-atomic rights); the size
//!   is always 8 (`-s` is ignored, like perftest). After each sample, outside the
//!   timed span, the returned old value is checked against the count so far.
//!
//! The server is passive ([`crate::harness::passive_server`]): it only drives its
//! device until the client's end-of-round markers.

use std::time::Instant;

use deposit::{Completion, ConnOptions, Device, Endpoint, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::report::{LatStats, Reporter};
use crate::setup::{self, EMPTY_WC};
use crate::verify;
use crate::warmup::LatRound;
use crate::{AtomicOp, Params, Test};

/// Runs read_lat or atomic_lat in this process's role.
pub fn run(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: exchange::Layout::for_max_size(p.max_size()),
            serve,
            dial: harness::dial_plain,
            server: harness::passive_server,
            client,
            server_prints: false,
        },
    )
}

/// The server of read_* / atomic_*: with `--verify`, read_*'s receive region holds the
/// body of [`read_seed`] (keyed by the absolute offset) before it listens.
pub fn serve(
    dev: Device,
    p: &Params,
    lay: Layout,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<Side> {
    let fill = |ep: &Endpoint| {
        if p.verify && matches!(p.test, Test::ReadLat | Test::ReadBw) {
            verify::fill(ep, 0, lay.send, read_seed())?;
        }
        Ok(())
    };
    let opts = ConnOptions::default();
    let (s, more) = setup::serve_with(dev, p, lay, &opts, fill, ready, 1)?;
    Ok(Side {
        s,
        more,
        regs: None,
        ip: None,
    })
}

/// The seed of the server's receive region in read_* under `--verify`.
pub fn read_seed() -> u64 {
    verify::seed(verify::kind::READ, 0, 0)
}

/// The request of iteration `k` (0-based, counted over the whole run): a read of
/// `size` bytes at `remote_off` of the server into `local_off`, or an atomic on the
/// server's word at 0 returning the old value into `local_off`.
#[inline]
pub fn request(
    p: &Params,
    side: &Side,
    size: u64,
    k: u64,
    local_off: u64,
    remote_off: u32,
) -> WorkRequest {
    let ep = &side.s.ep;
    let result_off = local_off;
    match (p.test, p.atomic) {
        (Test::ReadLat | Test::ReadBw, _) => {
            WorkRequest::read(0, ep, local_off, size as u32, remote_off)
        }
        (_, AtomicOp::FetchAndAdd) => WorkRequest::fetch_add(0, ep, result_off, 0, 1),
        (_, AtomicOp::CmpAndSwap) => WorkRequest::cmp_swap(0, ep, result_off, 0, k, k + 1),
    }
}

/// Waits for the completion of the one outstanding request.
#[inline]
fn wait_one(side: &Side, p: &Params, t0: Instant, wcs: &mut [Completion]) -> Result<Completion> {
    let mut wait = Wait::since(t0, p.timeout, "the completion of a read or atomic");
    loop {
        if side.s.conn.cq().poll(&mut wcs[..1]) == 1 {
            return Ok(wcs[0]);
        }
        if wait.tick()? {
            crate::lat::check_open(&side.s.conn)?;
        }
    }
}

fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let atomic = p.test == Test::AtomicLat;
    let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
    let mut wcs = [EMPTY_WC; 1];
    let mut k = 0u64; // atomics executed so far (the server's word)
    let mut bad = 0u64;
    let (mut want, mut got, mut zeros) = (Vec::new(), Vec::new(), Vec::new());
    for (round, &size) in p.sizes.iter().enumerate() {
        rtts.clear();
        let mut checked = verify::Outcome::default();
        let reads = p.verify && !atomic;
        if reads {
            want = verify::body(read_seed(), size as usize);
            got.resize(size as usize, 0);
            zeros.resize(size as usize, 0);
        }
        let round_start = Instant::now();
        let mut lr = LatRound::start(p);
        let mut n = 0u64; // requests of the round, warm-up included
        while lr.more() {
            n += 1;
            if reads {
                s.ep.write(0, &zeros)?; // not timed: the check needs fresh landing bytes
            }
            let mut req = request(p, side, size, k, 0, 0).signaled();
            req.set_wr_id(n);
            let t0 = Instant::now();
            s.conn.post(&req)?;
            let wc = wait_one(side, p, t0, &mut wcs)?;
            let t1 = Instant::now();
            if !wc.status.is_ok() {
                return Err(PerfError::Failed(format!(
                    "{} {} completed with {:?}",
                    if atomic { "atomic" } else { "read" },
                    wc.wr_id,
                    wc.status
                )));
            }
            if atomic {
                let old = s.ep.load_u64(0)?;
                if old != k {
                    bad += 1;
                }
                if p.verify {
                    verify::check_word(old, k, "atomic's old value", &mut checked);
                }
                k += 1;
            }
            if reads {
                s.ep.read(0, &mut got)?;
                let what = || format!("{size} B: read {n}");
                verify::check_message(&got, &want, what, &mut checked);
            }
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        lr.report_cut(size);
        // Before the marker: the server closes the connection after the last one.
        if p.verify && atomic {
            let word = crate::rdbw::read_counter(side, p)?;
            verify::check_word(word, k, "the server's word", &mut checked);
        }
        let mut end = RoundEnd::new(lr.iterations(), round_start.elapsed(), 0.0);
        if p.verify {
            end.verdict = Some(verify::marker_verdict(&checked));
            rep.outcome().merge(checked);
        }
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        rep.lat(&LatStats::from_full_rtts(size, &mut rtts));
    }
    if bad > 0 && !p.verify {
        eprintln!(
            "ddperf: warning: {bad} of {k} atomics returned an unexpected old value ({})",
            p.atomic.name()
        );
    }
    Ok(())
}
