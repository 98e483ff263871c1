//! `append_bw`: many senders appending to ONE receiver queue by post-increment — a
//! test only this model has (docs/design.md §9).
//!
//! The client opens `-q N` connections (default 16) to the server; the server gives
//! its endpoint two **global registers** (`Endpoint::set_global_registers`): the
//! queue pointer `global(0)` (protection `INDIRECT`, starting at the queue's base) and
//! its stride `global(1)` (the size rounded up to 64). Every connection into the
//! endpoint sees them, so each message — a write with post-increment on `global(0)`,
//! i.e. [`deposit::WorkRequest::send`] naming `global(0)` — takes the next slot,
//! whichever connection it came on, with no coordination between the senders: the
//! receiver's interface serialises them.
//!
//! The client posts the `-n` messages of a round round-robin over its connections
//! (message k on connection k mod N; with `--post-list L`, lists of L: message k on
//! connection (k / L) mod N) in the loop every streaming test shares
//! ([`crate::stream`]): each connection keeps at most `--tx-depth` outstanding and
//! signals every `--cq-mod`th and its last, and all of them together at most 4096
//! (`-q` goes up to 65536); one completion queue serves them all. Each message carries
//! a 16-byte record: connection (u32), round + 1 (u16), the list length L (u16), k
//! (u64), from a ring of
//! source slots as long as the window of outstanding messages. The table is
//! write_bw's, for the aggregate: messages of all connections over the time from the
//! first post to the last completion.
//!
//! The queue holds a whole round (`-n` slots; `-D` is refused: the server could not
//! size it). At the end of each round the server checks every slot once: exactly `n`
//! records of this round, each k once, each from the connection it was sent on, and
//! the queue pointer `n` strides past the base. It prints `OK` or `MISMATCH` on
//! stderr and, on a mismatch, exits non-zero at the end. Then it puts the pointer back
//! and lets the client start the next round through the credit word (see
//! [`crate::exchange`]); the client waits for that credit before every round, so a
//! round never races the server's check and reset.

use deposit::{global, ConnOptions, Device, RegProt, RegWindow, WorkRequest};

use crate::error::{PerfError, Result};
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::report::{BwStats, Reporter};
use crate::setup;
use crate::stream::{self, Stream};
use crate::verify;
use crate::{Params, Span};

/// Bytes of a record (the smallest size).
const RECORD: u64 = 16;
/// Largest size (one message per append).
const MAX_APPEND: u64 = 16384;

/// Runs append_bw in this process's role.
pub fn run(p: &Params) -> Result<()> {
    let Span::Iters(n) = p.span else {
        return Err(PerfError::Usage(
            "append_bw: give -n (the server's queue holds one whole round; -D cannot size it)"
                .into(),
        ));
    };
    harness::run(
        p,
        Spec {
            lay: Layout::with_queue(p.max_size().min(MAX_APPEND), n as usize),
            serve,
            dial,
            server,
            client,
            server_prints: true,
        },
    )
}

fn serve(dev: Device, p: &Params, lay: Layout, ready: Box<dyn FnOnce() + Send>) -> Result<Side> {
    let w = dev.alloc_registers(2)?;
    dev.write_register(w, 0, lay.queue as u64)?;
    dev.write_register(w, 1, lay.stride as u64)?;
    dev.set_register_protection(w, 0, RegProt::INDIRECT)?;
    let (s, more) = setup::serve_with(
        dev,
        p,
        lay,
        &ConnOptions::default(),
        |ep| Ok(ep.set_global_registers(w)?),
        ready,
        p.qps as usize,
    )?;
    Ok(Side {
        s,
        more,
        regs: Some(w),
        ip: None,
    })
}

fn dial(dev: Device, p: &Params, _lay: Layout, peer: [u8; 4]) -> Result<Side> {
    // The same control area as the server's; the queue part holds our source slots,
    // one per message outstanding.
    let lay = Layout::with_queue(
        p.max_size().min(MAX_APPEND),
        stream::window(p, p.qps as usize) as usize,
    );
    let (s, more) = setup::dial_with(dev, p, lay, peer, &ConnOptions::default(), p.qps as usize)?;
    Ok(Side {
        s,
        more,
        regs: None,
        ip: None,
    })
}

/// The sizes one message carries and a record fits (`-a`: the others are skipped).
fn sizes(side: &Side, p: &Params) -> Result<Vec<(usize, u64)>> {
    let max = u64::from(side.s.dev.segment_max()).min(MAX_APPEND);
    let ok: Vec<(usize, u64)> = p
        .sizes
        .iter()
        .copied()
        .filter(|&s| (RECORD..=max).contains(&s))
        .enumerate()
        .collect();
    if ok.len() < p.sizes.len() {
        if !p.all {
            return Err(PerfError::Usage(format!(
                "-s {}: append_bw sizes are {RECORD}..={max} B (a record, one message)",
                p.sizes[0]
            )));
        }
        eprintln!("ddperf: -a: append_bw runs sizes {RECORD}..={max} B only; others skipped");
    }
    Ok(ok)
}

/// The seed of the bytes after the record (`--verify`).
fn body_seed(round: usize) -> u64 {
    verify::seed(verify::kind::APPEND, round, 0)
}

/// `--verify`: the bytes after the 16-byte record of each of the `count` slots must be
/// the round's body.
fn check_bodies(
    side: &Side,
    round: usize,
    size: u64,
    count: u64,
    out: &mut verify::Outcome,
) -> Result<()> {
    let s = &side.s;
    let want = verify::body(body_seed(round), size as usize);
    let mut got = vec![0u8; size as usize];
    for i in 0..count as usize {
        s.ep.read(s.lay.slot(i) as u64, &mut got)?;
        let bad = verify::count_diff(&got[RECORD as usize..], &want[RECORD as usize..]);
        if bad > 0 {
            out.note(format!(
                "{size} B: queue slot {i}: {bad} bytes after the record differ"
            ));
        }
        out.add(0, size - RECORD, bad);
    }
    Ok(())
}

fn record(conn: u32, round: usize, list: u32, k: u64) -> [u8; RECORD as usize] {
    let mut b = [0u8; RECORD as usize];
    b[0..4].copy_from_slice(&conn.to_le_bytes());
    b[4..6].copy_from_slice(&(round as u16 + 1).to_le_bytes());
    b[6..8].copy_from_slice(&(list as u16).to_le_bytes());
    b[8..16].copy_from_slice(&k.to_le_bytes());
    b
}

fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    let conns: Vec<&deposit::Connection> = side.conns().collect();
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    // Message id (1-based) uses source slot (id - 1) mod slots: the stream keeps at
    // most `slots` outstanding, so a slot is rewritten only once its message completed.
    let slots = s.lay.slots;
    for &(round, size) in &sizes {
        if p.verify {
            // Every source slot carries the round's body after its record (not timed).
            let b = verify::body(body_seed(round), size as usize);
            for j in 0..slots {
                s.ep.write(s.lay.slot(j) as u64, &b)?;
            }
        }
        exchange::wait_credit(&s.dev, &s.conn, &s.ep, &s.lay, p, round as u64 + 1)?;
        let stats = Stream {
            size,
            req: WorkRequest::send(0, &s.ep, s.lay.slot(0) as u64, size as u32, global(0)),
            depth_cap: Some(slots as u64),
            laps: None,
            prepare: |id, conn, req: &mut WorkRequest| {
                let at = s.lay.slot(((id - 1) % slots as u64) as usize);
                s.ep.write(at as u64, &record(conn as u32, round, p.post_list, id - 1))?;
                *req = WorkRequest::send(0, &s.ep, at as u64, size as u32, global(0));
                Ok(())
            },
        }
        .run_on(s, &conns, p)?;
        let rend = RoundEnd::new(stats.iterations, stats.elapsed, stats.peak_rate);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &rend)?;
        exchange::take_verdict(s, p, round, round + 1 == sizes.len(), rep)?;
        rep.bw(&stats);
    }
    Ok(())
}

/// Checks the queue after round `round` of `count` records from `q` connections.
/// Returns a description of what is wrong, if anything.
fn check_queue(
    side: &Side,
    w: RegWindow,
    round: usize,
    count: u64,
    q: u64,
) -> Result<Option<String>> {
    let s = &side.s;
    let mut seen = vec![false; count as usize];
    let (mut foreign, mut dup, mut wrong_conn) = (0u64, 0u64, 0u64);
    let mut b = [0u8; RECORD as usize];
    for i in 0..count as usize {
        s.ep.read(s.lay.slot(i) as u64, &mut b)?;
        let conn = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) as u64;
        let tag = u16::from_le_bytes(b[4..6].try_into().expect("2 bytes"));
        let list = u64::from(u16::from_le_bytes(b[6..8].try_into().expect("2 bytes")));
        let k = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        if tag != round as u16 + 1 || k >= count || list == 0 {
            foreign += 1;
            continue;
        }
        if std::mem::replace(&mut seen[k as usize], true) {
            dup += 1;
        }
        if conn != (k / list) % q {
            wrong_conn += 1;
        }
    }
    let missing = seen.iter().filter(|s| !**s).count();
    let ptr = s.dev.read_register(w, 0)?;
    let want = (s.lay.queue + count as usize * s.lay.stride) as u64;
    if foreign + dup + wrong_conn == 0 && missing == 0 && ptr == want {
        return Ok(None);
    }
    Ok(Some(format!(
        "{missing} missing, {dup} duplicated, {foreign} not of this round, {wrong_conn} from the wrong connection; queue pointer {} slots past the base (expected {count})",
        (ptr as i64 - s.lay.queue as i64) / s.lay.stride as i64
    )))
}

fn server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    let w = side.regs.expect("the server has the queue registers");
    let q = side.more.len() as u64 + 1;
    // O(connections): once per round, not in the wait for the marker.
    let arrivals = || side.arrivals();
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    let mut base = arrivals();
    let mut bad = 0usize;
    let mut total = 0u64;
    for &(round, size) in &sizes {
        exchange::send_credit(&s.dev, &s.conn, &s.lay, p, round as u64 + 1)?;
        side.await_round_end(p, round, "the clients' appends or the end-of-round marker")?;
        let (end, next) =
            exchange::read_round_end_with(&s.dev, &s.ep, &s.lay, p, round, base, arrivals)?;
        base = next;
        total += end.count;
        let mut checked = verify::Outcome::default();
        match check_queue(side, w, round, end.count, q)? {
            None => {
                checked.add(end.count, end.count * RECORD, 0);
                eprintln!(
                    "ddperf: append check {size} B: OK ({} records from {q} connections, each once, no overlap)",
                    end.count
                )
            }
            Some(why) => {
                bad += 1;
                checked.add(end.count, end.count * RECORD, 1);
                checked.note(format!("{size} B: records: {why}"));
                eprintln!("ddperf: append check {size} B: MISMATCH: {why}");
            }
        }
        if p.verify {
            check_bodies(side, round, size, end.count, &mut checked)?;
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &checked.verdict())?;
            rep.outcome().merge(checked);
        }
        s.dev.write_register(w, 0, s.lay.queue as u64)?;
        rep.bw(&BwStats {
            bytes: size,
            iterations: end.count,
            timed: end.count,
            elapsed: end.elapsed,
            peak_rate: end.peak_rate,
        });
    }
    if p.role == crate::Role::Server {
        eprintln!("ddperf: server done: {total} appends received on {q} connections");
    }
    if bad > 0 {
        return Err(PerfError::Failed(format!(
            "append check failed in {bad} round(s) (see above)"
        )));
    }
    Ok(())
}
