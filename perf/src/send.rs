//! `send_lat` / `send_bw`: verbs SEND as the degenerate case of the deposit model.
//!
//! A SEND is a write with indirect post-increment addressing into a queue the
//! RECEIVER manages: the sender names only register 0 of its connection's register
//! window ([`deposit::WorkRequest::send`]); the receiver set register 0 to the queue's
//! base offset in its endpoint (protection `INDIRECT`: the sender may use it as an
//! address and post-increment it, never learn or set it) and register 1 to the slot
//! stride (the largest size rounded up to 64 bytes). The receiver learns of a message
//! by polling its connection's arrival counter (MINI's PDU count), not memory.
//!
//! ## Recycling the queue
//!
//! The queue is a ring of `slots` slots: the iterations of one round, capped at
//! [`MAX_SLOTS`] (4096 with `-D`). Post-increment only moves forward, so the receiver
//! resets register 0 to the base (`Device::write_register`) after the `slots`th
//! message since the last reset, at a moment when it knows no message can be in
//! flight toward its queue:
//!
//! * **send_lat** (ping-pong, each side sends to the other's queue, RTT/2 like
//!   ib_send_lat): a side's next message from the peer can only come after it has
//!   answered, so each side counts its arrivals and, when the count since the last
//!   reset reaches `slots`, resets its register before it sends its next message
//!   (the client after it took the sample, the server before its reply).
//! * **send_bw**: the client streams, so it stops after every `slots` messages (counted
//!   over the whole run) until every one of them has completed and the server's credit
//!   word (see [`crate::exchange`]) shows that lap; the server, seeing `slots` arrivals
//!   since its last reset, resets register 0 and then writes the lap number into the
//!   client's credit word. With 4096 slots that costs one round trip per 4096
//!   messages. The client also waits for the credit when a round ends on a lap
//!   boundary, so the end-of-round marker never races a reset.
//!
//! The end-of-round markers are direct writes into the control area: they are
//! arrivals too, so the receiver tells them apart by loading the arrival counter first
//! and the marker's flag byte second (a marker stores its flag before its arrival is
//! counted: a counter value read before an unset flag never includes the marker).
//!
//! Sizes are limited to one message ([`deposit::Device::segment_max`]); `-a` skips
//! larger ones, `-s` refuses them.

use std::time::Instant;

use deposit::{ConnOptions, Device, RegProt, RegWindow, Registers, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::{self, Side, Spec};
use crate::lat::check_open;
use crate::report::{BwStats, LatStats, Reporter};
use crate::setup::{self, EMPTY_WC};
use crate::stream::{Laps, Stream};
use crate::verify;
use crate::warmup::LatRound;
use crate::{Params, Span, Test};

/// Most slots of a receive queue.
pub const MAX_SLOTS: u64 = 4096;

/// Slots of the receive queue for these options.
pub fn slots(p: &Params) -> usize {
    match p.span {
        Span::Iters(n) => n.clamp(1, MAX_SLOTS) as usize,
        Span::Duration(_) => MAX_SLOTS as usize,
    }
}

fn layout(p: &Params) -> Layout {
    Layout::with_queue(harness::one_message_max(p), slots(p))
}

/// Runs send_lat in this process's role.
pub fn run_lat(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: layout(p),
            serve,
            dial,
            server: lat_server,
            client: lat_client,
            server_prints: false,
        },
    )
}

/// Runs send_bw in this process's role.
pub fn run_bw(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: layout(p),
            serve,
            dial,
            server: bw_server,
            client: bw_client,
            server_prints: true,
        },
    )
}

/// Allocates the receive queue's registers: 0 = base (INDIRECT), 1 = stride.
fn queue_registers(dev: &Device, lay: &Layout) -> Result<RegWindow> {
    let w = dev.alloc_registers(2)?;
    dev.write_register(w, 0, lay.queue as u64)?;
    dev.write_register(w, 1, lay.stride as u64)?;
    dev.set_register_protection(w, 0, RegProt::INDIRECT)?;
    Ok(w)
}

fn serve(dev: Device, p: &Params, lay: Layout, ready: Box<dyn FnOnce() + Send>) -> Result<Side> {
    let w = queue_registers(&dev, &lay)?;
    let opts = ConnOptions {
        registers: Registers::Window(w),
        ..Default::default()
    };
    let (s, more) = setup::serve_with(dev, p, lay, &opts, |_| Ok(()), ready, 1)?;
    Ok(Side {
        s,
        more,
        regs: Some(w),
        ip: None,
    })
}

fn dial(dev: Device, p: &Params, lay: Layout, peer: [u8; 4]) -> Result<Side> {
    // send_lat: the server sends into the client's queue too.
    let (opts, regs) = if p.test == Test::SendLat {
        let w = queue_registers(&dev, &lay)?;
        (
            ConnOptions {
                registers: Registers::Window(w),
                ..Default::default()
            },
            Some(w),
        )
    } else {
        (ConnOptions::default(), None)
    };
    let (s, more) = setup::dial_with(dev, p, lay, peer, &opts, 1)?;
    Ok(Side {
        s,
        more,
        regs,
        ip: None,
    })
}

/// The sizes one message carries (`-a`: the others are skipped), as (round, size).
fn sizes(side: &Side, p: &Params) -> Result<Vec<(usize, u64)>> {
    let max = u64::from(side.s.dev.segment_max()).min(harness::MAX_ONE_MESSAGE);
    harness::one_message_sizes(p, max, "a SEND is one message")
}

/// Puts the queue pointer back to the base.
#[inline]
fn reset(side: &Side) -> Result<()> {
    let w = side.regs.expect("a queue side has registers");
    side.s.dev.write_register(w, 0, side.s.lay.queue as u64)?;
    Ok(())
}

fn drain(side: &Side, wcs: &mut [deposit::Completion]) -> Result<()> {
    loop {
        let n = side.s.conn.cq().poll(wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(PerfError::Failed(format!(
                    "send {} completed with {:?}",
                    wc.wr_id, wc.status
                )));
            }
        }
        if n < wcs.len() {
            return Ok(());
        }
    }
}

fn lat_client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let slots = s.lay.slots as u64;
    let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
    let mut wcs = [EMPTY_WC; 16];
    let cq_mod = p.cq_mod as u64;
    // The server sends nothing but replies into our queue.
    let mut seen = s.conn.arrivals();
    let mut used = 0u64;
    let (mut want, mut got) = (Vec::new(), Vec::new());
    for &(round, size) in &sizes {
        rtts.clear();
        let mut req = WorkRequest::send(0, &s.ep, s.lay.send as u64, size as u32, 0);
        if p.verify {
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                (verify::kind::SEND_PING, verify::kind::SEND_PONG),
                &mut want,
                &mut got,
            )?;
        }
        let mut seq = 0u64; // sends of the round, warm-up included
        let round_start = Instant::now();
        let mut lr = LatRound::start(p);
        while lr.more() {
            seq += 1;
            let signaled = seq % cq_mod == 0;
            req.set_signaled(signaled);
            req.set_wr_id(seq);
            if p.verify {
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &verify::stamp(round, seq))?;
            }
            let t0 = Instant::now();
            s.conn.post(&req)?;
            let mut wait = Wait::since(t0, p.timeout, "the server's reply send");
            while s.conn.arrivals() == seen {
                s.dev.progress();
                if wait.tick()? {
                    check_open(&s.conn)?;
                }
            }
            let t1 = Instant::now();
            seen += 1;
            let landed = s.lay.slot(used as usize);
            used += 1;
            if used == slots {
                reset(side)?;
                used = 0;
            }
            if signaled {
                drain(side, &mut wcs)?;
            }
            if p.verify {
                // Not timed; the server's next reply comes after our next send.
                stamp_image(&mut want, round, seq);
                s.ep.read(landed as u64, &mut got)?;
                let what = || format!("{size} B: reply {seq}");
                verify::check_message(&got, &want, what, rep.outcome());
            }
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        lr.report_cut(size);
        let end = RoundEnd::new(lr.iterations(), round_start.elapsed(), 0.0);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        drain(side, &mut wcs)?;
        exchange::take_verdict(s, p, round, round + 1 == sizes.len(), rep)?;
        rep.lat(&LatStats::from_rtts(size, &mut rtts));
    }
    Ok(())
}

/// The image of message `seq` of `round` in `img` (its body): the stamp over its
/// first bytes.
fn stamp_image(img: &mut [u8], round: usize, seq: u64) {
    let n = img.len().min(verify::STAMP);
    img[..n].copy_from_slice(&verify::stamp(round, seq)[..n]);
}

fn lat_server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    let slots = s.lay.slots as u64;
    let mut wcs = [EMPTY_WC; 16];
    let cq_mod = p.cq_mod as u64;
    let mut base = s.conn.arrivals();
    let mut used = 0u64;
    let mut total = 0u64;
    for &(round, size) in &sizes {
        let (flag_at, flag) = exchange::round_end_flag(&s.lay, round);
        let mut req = WorkRequest::send(0, &s.ep, s.lay.send as u64, size as u32, 0);
        let mut checked = verify::Outcome::default();
        let (mut want, mut got) = (Vec::new(), Vec::new());
        if p.verify {
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                (verify::kind::SEND_PONG, verify::kind::SEND_PING),
                &mut want,
                &mut got,
            )?;
        }
        let mut check = |landed: usize, seq: u64, checked: &mut verify::Outcome| -> Result<()> {
            stamp_image(&mut want, round, seq);
            s.ep.read(landed as u64, &mut got)?;
            let what = || format!("{size} B: send {seq}");
            verify::check_message(&got, &want, what, checked);
            Ok(())
        };
        let mut seen = base;
        let mut pongs = 0u64;
        let mut wait = Wait::new(p.timeout, "the client's next send");
        loop {
            // The counter first, the flag second (see the module doc).
            let a = s.conn.arrivals();
            if s.ep.load_u8(flag_at as u64)? == flag {
                break;
            }
            if a == seen {
                s.dev.progress();
                if wait.tick()? {
                    check_open(&s.conn)?;
                }
                continue;
            }
            wait.progressed();
            seen += 1;
            let landed = s.lay.slot(used as usize);
            used += 1;
            if used == slots {
                reset(side)?;
                used = 0;
            }
            // With one slot the client's next send lands on this one once we reply:
            // check first (timed); otherwise after the reply is out.
            if p.verify && slots == 1 {
                check(landed, pongs + 1, &mut checked)?;
            }
            let signaled = (pongs + 1) % cq_mod == 0;
            req.set_signaled(signaled);
            req.set_wr_id(pongs + 1);
            if p.verify {
                let st = verify::stamp(round, pongs + 1);
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &st)?;
            }
            s.conn.post(&req)?;
            pongs += 1;
            if p.verify && slots > 1 {
                check(landed, pongs, &mut checked)?;
            }
            if signaled {
                drain(side, &mut wcs)?;
            }
        }
        let (end, next) = exchange::read_round_end(&s.dev, &s.conn, &s.lay, p, round, base)?;
        base = next;
        if end.count != pongs {
            return Err(PerfError::Failed(format!(
                "{size} B: the client counts {} sends, this server answered {pongs}",
                end.count
            )));
        }
        drain(side, &mut wcs)?;
        total += pongs;
        if p.verify {
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &checked.verdict())?;
            rep.outcome().merge(checked);
        }
    }
    if p.role == crate::Role::Server {
        eprintln!("ddperf: server done: {total} sends answered");
    }
    Ok(())
}

fn bw_client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let wait = |lap: u64| exchange::wait_credit(&s.dev, &s.conn, &s.ep, &s.lay, p, lap);
    let mut before = 0u64;
    let slots = s.lay.slots as u64;
    for &(round, size) in &sizes {
        let req = WorkRequest::send(0, &s.ep, s.lay.send as u64, size as u32, 0);
        let laps = Laps {
            slots,
            before,
            wait: &wait,
        };
        if p.verify {
            let (k, kind) = (s.lay.slots, verify::kind::SEND_BW);
            verify::fill_queue(&s.ep, &s.lay, size, k, kind, round)?;
        }
        // --verify: message g (0-based over the run) from slot g mod slots of our own
        // queue area, stamped g + 1; the laps keep a slot from being restamped early.
        let stats = Stream {
            size,
            req,
            depth_cap: None,
            laps: Some(laps),
            prepare: |id, _conn, req: &mut WorkRequest| {
                if !p.verify {
                    return Ok(());
                }
                let g = before + id - 1;
                let at = s.lay.slot((g % slots) as usize);
                verify::put_stamp(&s.ep, at, size as usize, &verify::stamp(round, g + 1))?;
                *req = WorkRequest::send(0, &s.ep, at as u64, size as u32, 0);
                Ok(())
            },
        }
        .run(s, p)?;
        before += stats.iterations;
        let end = RoundEnd::new(stats.iterations, stats.elapsed, stats.peak_rate);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        exchange::take_verdict(s, p, round, round + 1 == sizes.len(), rep)?;
        rep.bw(&stats);
    }
    Ok(())
}

fn bw_server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    let slots = s.lay.slots as u64;
    let mut base = s.conn.arrivals();
    let mut used = 0u64; // messages in the queue since the last reset, at round start
    let mut laps = 0u64;
    let mut total = 0u64;
    for &(round, size) in &sizes {
        let (flag_at, flag) = exchange::round_end_flag(&s.lay, round);
        let mut wait = Wait::new(p.timeout, "the client's sends or its end-of-round marker");
        let mut resets = 0u64;
        let mut seen = base;
        let mut checked = verify::Outcome::default();
        let g0 = total; // messages before this round
        loop {
            // The counter first, the flag second (see the module doc).
            let a = s.conn.arrivals();
            if s.ep.load_u8(flag_at as u64)? == flag {
                break;
            }
            if a != seen {
                seen = a;
                wait.progressed();
            }
            if used + (a - base) - resets * slots >= slots {
                if p.verify {
                    // This lap's messages of this round (earlier rounds' were checked
                    // at their end), before the reset lets the next lap overwrite them.
                    let from = (laps * slots).max(g0);
                    check_lap(side, size, round, from..(laps + 1) * slots, &mut checked)?;
                }
                reset(side)?;
                resets += 1;
                laps += 1;
                exchange::send_credit(&s.dev, &s.conn, &s.lay, p, laps)?;
                continue;
            }
            s.dev.progress();
            if wait.tick()? {
                check_open(&s.conn)?;
            }
        }
        let (end, next) = exchange::read_round_end(&s.dev, &s.conn, &s.lay, p, round, base)?;
        base = next;
        used = used + end.count - resets * slots;
        if used >= slots {
            return Err(PerfError::Failed(format!(
                "{size} B: the queue overflowed ({used} of {slots} slots in use)"
            )));
        }
        if p.verify {
            let from = (laps * slots).max(g0);
            check_lap(side, size, round, from..g0 + end.count, &mut checked)?;
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &checked.verdict())?;
            rep.outcome().merge(checked);
        }
        total += end.count;
        rep.bw(&BwStats {
            bytes: size,
            iterations: end.count,
            timed: end.count,
            elapsed: end.elapsed,
            peak_rate: end.peak_rate,
        });
    }
    if p.role == crate::Role::Server {
        eprintln!("ddperf: server done: {total} sends received, {laps} queue laps");
    }
    Ok(())
}

/// send_bw `--verify`: checks messages `gs` (0-based over the run) of `round` in the
/// queue: message g lies in slot g mod slots, sent from slot g mod slots of the
/// client's queue area, stamped g + 1.
fn check_lap(
    side: &Side,
    size: u64,
    round: usize,
    gs: std::ops::Range<u64>,
    out: &mut verify::Outcome,
) -> Result<()> {
    let s = &side.s;
    let slots = s.lay.slots as u64;
    let mut got = vec![0u8; size as usize];
    for g in gs {
        let j = g % slots;
        let st = verify::stamp(round, g + 1);
        let want = verify::message(
            verify::seed(verify::kind::SEND_BW, round, j),
            &st,
            size as usize,
        );
        s.ep.read(s.lay.slot(j as usize) as u64, &mut got)?;
        let what = || format!("{size} B: send {} in slot {j}", g + 1);
        verify::check_message(&got, &want, what, out);
    }
    Ok(())
}
