//! `write_lat`: ib_write_lat's ping-pong over deposit writes, and the ping-pong loops
//! ip_lat and token_lat share with it ([`ping`], [`answer`], along a [`Path`]).
//!
//! The client writes `size` bytes from its send region into the server's receive
//! region (offset 0) with the last byte set to an iteration counter (1..=255, cycling);
//! the server spins on that last byte of its own endpoint (`Endpoint::load_u8`,
//! driving `Device::progress` — inline mode needs it) until it takes the expected
//! value, then writes back the same way; the client spins likewise. No completion
//! queue is on the critical path: writes are unsignaled except every `--cq-mod`th,
//! whose completions are drained (and their status checked) after the sample is taken.
//! The client times each round trip with `Instant` and reports RTT/2 (perftest).
//!
//! A round (one size) ends with the client's end-of-round marker (see
//! [`crate::exchange`]), which carries its count of iterations: the server stops on it,
//! which is also how a `-D` run tells the server it is over. With `-a` one connection
//! serves every size. The counter runs on across rounds.
//!
//! ip_lat ([`crate::ipmsg`]) sends the same pings and pongs as invokes of the peer's
//! entry point, whose instruction writes them at offset 0; token_lat ([`crate::token`])
//! sends the pings as deposits with the server's latest token, and the server's pongs
//! are fresh tokens. Everything else is this loop.
//!
//! The measured loop neither allocates nor makes a syscall: the sample buffer is
//! reserved before the round (`-D` runs stop at [`DURATION_SAMPLES`] samples). The one
//! exception is token_lat's server, whose fresh token per iteration costs a key from
//! the OS random source (`Device::create_token`): that is part of what it measures.

use std::time::Instant;

use deposit::{Completion, ConnState, Connection, InstrPtr, Token, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, Layout, RoundEnd};
use crate::report::{LatStats, Reporter};
use crate::setup::{self, Session, SocketFile, EMPTY_WC};
use crate::token;
use crate::verify;
use crate::warmup::LatRound;
use crate::{Params, Role};

/// Samples reserved for one size of a `-D` run (64 MiB of u64).
pub const DURATION_SAMPLES: usize = 1 << 23;

/// Runs write_lat in this process's role.
pub fn run(p: &Params) -> Result<()> {
    check_sizes(p)?;
    let lay = Layout::for_max_size(p.max_size());
    match p.role {
        Role::Server => {
            let _socket = SocketFile::for_spec(&p.dev);
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let s = setup::serve(dev, p, lay, || {})?;
            let mut rep = Reporter::new(p.test, p.json, p.report_gbits, false);
            let r = server(&s, p, rep.outcome());
            s.close();
            eprintln!("ddperf: server done: {} writes answered", r?);
            verify::conclude(&mut rep, p, &[("server", &s.dev)])
        }
        Role::Client { peer } => {
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let s = setup::dial(dev, p, lay, peer)?;
            let mut rep = reporter(p, &s, &p.dev);
            let r = client(&s, p, &mut rep);
            s.close();
            r?;
            verify::conclude(&mut rep, p, &[("client", &s.dev)])
        }
        Role::Loopback => {
            let sdev = setup::open_device(p, crate::LOOP_SERVER_DEV, crate::SERVER_IP)?;
            let cdev = setup::open_device(p, crate::LOOP_CLIENT_DEV, crate::CLIENT_IP)?;
            let ports = format!("{} <-> {}", crate::LOOP_CLIENT_DEV, crate::LOOP_SERVER_DEV);
            setup::banner(&ports, cdev.max_frame());
            let ps = p.clone();
            let sdev2 = sdev.clone();
            setup::loopback(
                p,
                move |ready| {
                    let s = setup::serve(sdev, &ps, lay, ready)?;
                    // The client learns this side's checks from its verdicts.
                    server(&s, &ps, &mut verify::Outcome::default())?;
                    s.close();
                    // Dropped after the client is done (see setup::loopback).
                    Ok(s)
                },
                || {
                    let s = setup::dial(cdev, p, lay, crate::SERVER_IP)?;
                    let mut rep = reporter(p, &s, &ports);
                    let r = client(&s, p, &mut rep);
                    s.close();
                    r?;
                    verify::conclude(&mut rep, p, &[("client", &s.dev), ("server", &sdev2)])
                },
            )?;
            Ok(())
        }
    }
}

fn check_sizes(p: &Params) -> Result<()> {
    if p.sizes.len() > exchange::MAX_ROUNDS {
        return Err(PerfError::Usage(format!(
            "at most {} sizes per run",
            exchange::MAX_ROUNDS
        )));
    }
    Ok(())
}

fn reporter(p: &Params, s: &Session, ports: &str) -> Reporter {
    let mut rep = Reporter::new(p.test, p.json, p.report_gbits, true);
    if verify::defers(p) {
        rep.defer_json();
    }
    rep.info("Port", ports);
    rep.info(
        "Max frame",
        format!(
            "{} B (one message carries up to {} B)",
            s.dev.max_frame(),
            s.dev.segment_max()
        ),
    );
    rep.info("Worker", format!("{:?}", p.progress));
    rep.queues(p.workers, 1);
    rep.info("CQ Moderation", p.cq_mod.to_string());
    rep.connection(&s.conn);
    rep
}

/// Polls the completion queue until it is empty; any error status fails the run.
#[inline]
fn drain(conn: &Connection, wcs: &mut [Completion]) -> Result<()> {
    loop {
        let n = conn.cq().poll(wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(PerfError::Failed(format!(
                    "write {} completed with {:?}",
                    wc.wr_id, wc.status
                )));
            }
        }
        if n < wcs.len() {
            return Ok(());
        }
    }
}

/// Fails when the peer closed the connection (it gave up, e.g. on mismatched options).
pub fn check_open(conn: &Connection) -> Result<()> {
    match conn.state() {
        ConnState::Normal => Ok(()),
        st => Err(PerfError::Failed(format!(
            "the connection is {st:?}: the peer closed it or failed (see its error message)"
        ))),
    }
}

#[inline]
fn next_counter(c: u8) -> u8 {
    if c == 255 {
        1
    } else {
        c + 1
    }
}

/// How the pings and pongs of a ping-pong test travel. The client's ping is `size`
/// bytes of its send region with the counter in the last byte, landing at offset 0 of
/// the server; so is the server's pong, except in token_lat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// write_lat: RDMA writes at offset 0 of the peer's endpoint.
    Write,
    /// ip_lat: invokes of the peer's entry point (its instruction writes at offset 0).
    Invoke(InstrPtr),
    /// token_lat: the client deposits with this token (the server's latest); the
    /// server takes the deposit's event and answers with a fresh token (see
    /// [`crate::token`]).
    Token(Token),
}

impl Path {
    /// The request of a ping (or write_lat / ip_lat pong) of `size` bytes.
    fn request(self, s: &Session, size: u64) -> WorkRequest {
        let (from, len) = (s.lay.send as u64, size as u32);
        match self {
            Path::Write => WorkRequest::write(0, &s.ep, from, len, 0),
            Path::Invoke(ip) => WorkRequest::invoke_from(0, ip, 0, &s.ep, from, len),
            Path::Token(t) => WorkRequest::write_with_token(0, t, &s.ep, from, len),
        }
    }

    /// Where the client's endpoint shows the counter of the server's reply.
    fn reply_flag(self, size: u64) -> usize {
        match self {
            Path::Token(_) => token::PONG_LEN - 1,
            _ => size as usize - 1,
        }
    }

    /// What the client waits for.
    fn reply(self) -> &'static str {
        match self {
            Path::Write => "the server's reply write",
            Path::Invoke(_) => "the server's reply invoke",
            Path::Token(_) => "the server's fresh token",
        }
    }
}

/// Every size of the run as (round, size).
fn all_sizes(p: &Params) -> Vec<(usize, u64)> {
    p.sizes.iter().copied().enumerate().collect()
}

/// write_lat's client.
fn client(s: &Session, p: &Params, rep: &mut Reporter) -> Result<()> {
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    ping(s, p, rep, Path::Write, &all_sizes(p))
}

/// write_lat's server; returns the number of writes answered.
fn server(s: &Session, p: &Params, out: &mut verify::Outcome) -> Result<u64> {
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    // Nothing of round 0 can have arrived yet: the client starts it once the
    // parameter block has completed, after `wait_hello` stopped driving the device.
    let base = s.conn.arrivals();
    answer(s, p, out, Path::Write, base, &all_sizes(p))
}

/// The client of a ping-pong test, once the parameter exchange is done: pings along
/// `path`, times, reports each of `sizes` (round, size). The counter runs over the
/// whole run, so a reply flag left by the previous round never passes for the next.
pub fn ping(
    s: &Session,
    p: &Params,
    rep: &mut Reporter,
    mut path: Path,
    sizes: &[(usize, u64)],
) -> Result<()> {
    let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
    let mut wcs = [EMPTY_WC; 16];
    let cq_mod = p.cq_mod as u64;
    let mut want = Vec::new();
    let mut got = Vec::new();
    let mut counter = 0u8;
    for (i, &(round, size)) in sizes.iter().enumerate() {
        rtts.clear();
        let last = size as usize - 1;
        let flag = path.reply_flag(size);
        let mut req = path.request(s, size);
        // token_lat's replies are tokens: only the server checks (the pings).
        let check = p.verify && !matches!(path, Path::Token(_));
        if p.verify {
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                (verify::kind::WRITE_PING, verify::kind::WRITE_PONG),
                &mut want,
                &mut got,
            )?;
        }
        let mut seq = 0u64; // pings of the round, warm-up included
        let round_start = Instant::now();
        let mut lr = LatRound::start(p);
        while lr.more() {
            counter = next_counter(counter);
            seq += 1;
            if p.verify {
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &verify::stamp(round, seq))?;
            }
            s.ep.write((s.lay.send + last) as u64, &[counter])?;
            let signaled = seq % cq_mod == 0;
            req.set_signaled(signaled);
            req.set_wr_id(seq);
            let t0 = Instant::now();
            s.conn.post(&req)?;
            let mut wait = Wait::since(t0, p.timeout, path.reply());
            while s.ep.load_u8(flag as u64)? != counter {
                s.dev.progress();
                if wait.tick()? {
                    check_open(&s.conn)?;
                    // A refused ping completes with an error: say so, not a timeout.
                    drain(&s.conn, &mut wcs)?;
                }
            }
            let t1 = Instant::now();
            if let Path::Token(_) = path {
                path = Path::Token(token::read_reply(&s.ep)?);
                req = path.request(s, size);
            }
            if signaled {
                drain(&s.conn, &mut wcs)?;
            }
            if check {
                // Not timed; the server's next pong comes after our next ping.
                verify::ping_image(&mut want, &verify::stamp(round, seq), counter);
                s.ep.read(0, &mut got)?;
                let what = || format!("{size} B: pong {seq}");
                verify::check_message(&got, &want, what, rep.outcome());
            }
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        lr.report_cut(size);
        let end = RoundEnd::new(lr.iterations(), round_start.elapsed(), 0.0);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        drain(&s.conn, &mut wcs)?;
        exchange::take_verdict(s, p, round, i + 1 == sizes.len(), rep)?;
        rep.lat(&LatStats::from_rtts(size, &mut rtts));
    }
    Ok(())
}

/// The server of a ping-pong test, once the parameter exchange is done: answers every
/// ping along `path` until the client's end-of-round marker; with `--verify` checks
/// each ping before it answers (into `out`, and a verdict to the client per round).
/// `base` is the connection's arrival count before round 0 (read before the client
/// may start it: before any answer to its parameter block). Returns the number of
/// pings answered.
pub fn answer(
    s: &Session,
    p: &Params,
    out: &mut verify::Outcome,
    mut path: Path,
    mut base: u64,
    sizes: &[(usize, u64)],
) -> Result<u64> {
    let mut wcs = [EMPTY_WC; 16];
    let cq_mod = p.cq_mod as u64;
    let mut total = 0;
    let events = s.ep.events();
    let mut counter = 0u8;
    for &(round, size) in sizes {
        let last = size as usize - 1;
        let (flag_at, flag) = exchange::round_end_flag(&s.lay, round);
        // The pong (token_lat: replaced by each fresh token's reply).
        let mut req = path.request(s, size);
        let mut checked = verify::Outcome::default();
        let (mut want, mut got) = (Vec::new(), Vec::new());
        if p.verify {
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                (verify::kind::WRITE_PONG, verify::kind::WRITE_PING),
                &mut want,
                &mut got,
            )?;
        }
        let mut pongs = 0u64;
        let mut wait = Wait::new(p.timeout, "the client's next ping");
        loop {
            let next = next_counter(counter);
            let ping = loop {
                let arrived = match path {
                    Path::Token(t) => match events.poll() {
                        Some(ev) => {
                            token::check_event(&ev, t, size)?;
                            true
                        }
                        None => false,
                    },
                    _ => s.ep.load_u8(last as u64)? == next,
                };
                if arrived {
                    break true;
                }
                if s.ep.load_u8(flag_at as u64)? == flag {
                    break false;
                }
                s.dev.progress();
                if wait.tick()? {
                    check_open(&s.conn)?;
                }
            };
            if !ping {
                break;
            }
            wait.progressed();
            counter = next;
            let st = verify::stamp(round, pongs + 1);
            if p.verify {
                // Before the reply: the client's next ping overwrites this one.
                verify::ping_image(&mut want, &st, counter);
                s.ep.read(0, &mut got)?;
                let what = || format!("{size} B: ping {}", pongs + 1);
                verify::check_message(&got, &want, what, &mut checked);
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &st)?;
            }
            if let Path::Token(_) = path {
                let t = token::fresh(s)?;
                path = Path::Token(t);
                req = token::reply(t, counter)?;
            } else {
                s.ep.write((s.lay.send + last) as u64, &[counter])?;
            }
            let signaled = (pongs + 1) % cq_mod == 0;
            req.set_signaled(signaled);
            req.set_wr_id(pongs + 1);
            s.conn.post(&req)?;
            pongs += 1;
            if signaled {
                drain(&s.conn, &mut wcs)?;
            }
        }
        let (end, next_base) = exchange::read_round_end(&s.dev, &s.conn, &s.lay, p, round, base)?;
        base = next_base;
        if end.count != pongs {
            return Err(PerfError::Failed(format!(
                "{size} B: the client counts {} iterations, this server answered {pongs}",
                end.count
            )));
        }
        drain(&s.conn, &mut wcs)?;
        total += pongs;
        if p.verify {
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &checked.verdict())?;
            out.merge(checked);
        }
    }
    if let Path::Token(t) = path {
        // The last token handed out is never used: the rounds are over.
        s.dev.cancel_token(t)?;
    }
    Ok(total)
}
