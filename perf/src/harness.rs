//! The role plumbing the tests added after write_* share: open the device(s), meet the
//! peer, run the server and/or client function, close, report. write_lat / write_bw
//! keep their own copies (their output is frozen); the newer tests differ only in how
//! a side sets up (rights, registers, connections) and what it runs, so they pass
//! those as functions.
//!
//! Nothing here runs inside a measured loop.

use std::time::{Duration, Instant};

use deposit::{Connection, Device, InstrPtr, RegWindow};

use crate::error::{PerfError, Result, Wait};
use crate::exchange::{self, Layout, RoundEnd};
use crate::report::Reporter;
use crate::setup::{self, Session, SocketFile};
use crate::verify::{self, Outcome};
use crate::{Params, Role, Test};

/// Largest size the layouts of the one-message tests (send_*, ip_*, token_lat) are
/// sized for: larger sizes need several messages on every port we know.
pub const MAX_ONE_MESSAGE: u64 = 16384;

/// One side of a test: the session (first connection), further connections
/// (append_bw), the register window it set up for its peer (send_*, ip_*), and the
/// entry point it programmed for its peer (ip_*).
pub struct Side {
    pub s: Session,
    pub more: Vec<Connection>,
    pub regs: Option<RegWindow>,
    pub ip: Option<InstrPtr>,
}

impl Side {
    /// Every connection, the session's first.
    pub fn conns(&self) -> impl Iterator<Item = &Connection> {
        std::iter::once(&self.s.conn).chain(self.more.iter())
    }

    /// Closes every connection, the session's first (the peer's last wait watches
    /// that one), and drives the worker until it has told the peer: at least 64
    /// turns, then until 64 turns in a row move no frame (with `-q 20000` one turn
    /// cannot send every disconnect), for at most a second.
    pub fn close(&self) {
        if self.more.is_empty() {
            return self.s.close();
        }
        self.s.conn.close();
        for c in self.more.iter() {
            c.close();
        }
        let t0 = Instant::now();
        let mut quiet = 0;
        while quiet < 64 && t0.elapsed() < Duration::from_secs(1) {
            quiet = if self.s.dev.progress() == 0 {
                quiet + 1
            } else {
                0
            };
        }
    }
}

impl Side {
    /// Messages that have arrived on all the connections. O(connections): not for a
    /// spin loop (see [`Side::await_round_end`]).
    pub fn arrivals(&self) -> u64 {
        self.conns().map(|c| c.arrivals()).sum()
    }

    /// Server: drives the device until the client's end-of-round marker of `round`
    /// shows, failing after `--timeout` without an arrival (`what` says what was
    /// awaited). An arrival on the first connection counts at once; the sum over all
    /// of them (65 536 counters with `-q 65536`, too many to read every turn) only
    /// every [`ARRIVALS_EVERY`] or so.
    pub fn await_round_end(&self, p: &Params, round: usize, what: &'static str) -> Result<()> {
        let s = &self.s;
        let (flag_at, flag) = exchange::round_end_flag(&s.lay, round);
        let mut wait = Wait::new(p.timeout, what);
        let mut seen = s.conn.arrivals();
        let mut seen_all = self.arrivals();
        let every = ARRIVALS_EVERY.min(p.timeout / 4);
        let mut summed = Instant::now();
        // A passive side with a dedicated worker has nothing to drive: it naps between
        // looks at the flag instead of taking a core from the workers.
        let nap = (p.progress == deposit::Progress::Dedicated).then(|| Duration::from_micros(200));
        while s.ep.load_u8(flag_at as u64)? != flag {
            s.dev.progress();
            if let Some(d) = nap {
                std::thread::sleep(d);
            }
            let a = s.conn.arrivals();
            if a != seen {
                seen = a;
                wait.progressed();
            }
            if wait.tick()? {
                crate::lat::check_open(&s.conn)?;
                if !self.more.is_empty() && summed.elapsed() >= every {
                    summed = Instant::now();
                    let a = self.arrivals();
                    if a != seen_all {
                        seen_all = a;
                        wait.progressed();
                    }
                }
            }
        }
        Ok(())
    }
}

/// How often [`Side::await_round_end`] sums the arrivals of every connection.
pub const ARRIVALS_EVERY: Duration = Duration::from_millis(200);

/// Sets up the server side: given the device, the options, the layout and the
/// "listening" call of `--loopback`.
pub type ServeFn = fn(Device, &Params, Layout, Box<dyn FnOnce() + Send>) -> Result<Side>;
/// Sets up the client side: given the device, the options, the layout, the server.
pub type DialFn = fn(Device, &Params, Layout, [u8; 4]) -> Result<Side>;
/// Runs one side; the reporter prints (or not, see [`run`]).
pub type SideFn = fn(&Side, &Params, &mut Reporter) -> Result<()>;

/// What a test is made of.
pub struct Spec {
    pub lay: Layout,
    pub serve: ServeFn,
    pub dial: DialFn,
    pub server: SideFn,
    pub client: SideFn,
    /// Whether the server prints the table too in two processes (bandwidth tests:
    /// perftest's server prints the client's numbers).
    pub server_prints: bool,
}

/// Runs a test in this process's role.
pub fn run(p: &Params, spec: Spec) -> Result<()> {
    if p.sizes.len() > exchange::MAX_ROUNDS {
        return Err(PerfError::Usage(format!(
            "at most {} sizes per run",
            exchange::MAX_ROUNDS
        )));
    }
    let lay = spec.lay;
    match p.role {
        Role::Server => {
            let _socket = SocketFile::for_spec(&p.dev);
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let side = (spec.serve)(dev, p, lay, Box::new(|| {}))?;
            let mut rep = reporter(p, &side, &p.dev, spec.server_prints);
            if spec.server_prints {
                rep.subtitle("server side, client's measurement");
            }
            let r = (spec.server)(&side, p, &mut rep);
            side.close();
            r?;
            verify::conclude(&mut rep, p, &[("server", &side.s.dev)])
        }
        Role::Client { peer } => {
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let side = (spec.dial)(dev, p, lay, peer)?;
            let mut rep = reporter(p, &side, &p.dev, true);
            let r = (spec.client)(&side, p, &mut rep);
            side.close();
            r?;
            verify::conclude(&mut rep, p, &[("client", &side.s.dev)])
        }
        Role::Loopback => {
            let sdev = setup::open_device(p, crate::LOOP_SERVER_DEV, crate::SERVER_IP)?;
            let cdev = setup::open_device(p, crate::LOOP_CLIENT_DEV, crate::CLIENT_IP)?;
            let ports = format!("{} <-> {}", crate::LOOP_CLIENT_DEV, crate::LOOP_SERVER_DEV);
            setup::banner(&ports, cdev.max_frame());
            let ps = p.clone();
            let sports = ports.clone();
            let (serve, server) = (spec.serve, spec.server);
            let sdev2 = sdev.clone();
            setup::loopback(
                p,
                move |ready| {
                    let side = serve(sdev, &ps, lay, ready)?;
                    let mut rep = reporter(&ps, &side, &sports, false);
                    let r = server(&side, &ps, &mut rep);
                    side.close();
                    r?;
                    // Dropped after the client is done (see setup::loopback).
                    Ok(side)
                },
                || {
                    let side = (spec.dial)(cdev, p, lay, crate::SERVER_IP)?;
                    let mut rep = reporter(p, &side, &ports, true);
                    let r = (spec.client)(&side, p, &mut rep);
                    side.close();
                    r?;
                    let devs = [("client", &side.s.dev), ("server", &sdev2)];
                    verify::conclude(&mut rep, p, &devs)
                },
            )?;
            Ok(())
        }
    }
}

fn reporter(p: &Params, side: &Side, ports: &str, enabled: bool) -> Reporter {
    let s = &side.s;
    let mut rep = Reporter::new(p.test, p.json, p.report_gbits, enabled);
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
    rep.queues(p.workers, side.more.len() + 1);
    if !p.test.is_lat() {
        rep.info("TX depth", p.tx_depth.to_string());
        if p.post_list > 1 {
            rep.info("Post list", p.post_list.to_string());
        }
    }
    rep.info("CQ Moderation", p.cq_mod.to_string());
    if matches!(p.test, Test::AtomicLat | Test::AtomicBw) {
        rep.info("Atomic type", p.atomic.name());
    }
    if matches!(p.test, Test::SendLat | Test::SendBw | Test::AppendBw) {
        rep.info(
            "Receive queue",
            format!(
                "{} slots of {} B, post-increment{}",
                s.lay.slots,
                s.lay.stride,
                if p.test == Test::AppendBw {
                    " on a global register"
                } else {
                    ""
                }
            ),
        );
    }
    match p.test {
        Test::IpBw if p.verify => {
            let ring = crate::ipmsg::ring(p);
            rep.info(
                "Instruction",
                format!(
                    "WRITE at the server's ring pointer, post-increment, wrapping over {} slots of {} B; isolated connections",
                    ring.slots, ring.stride
                ),
            )
        }
        Test::IpLat | Test::IpBw => rep.info(
            "Instruction",
            "WRITE at offset 0 (the instruction's), isolated connections",
        ),
        Test::TokenLat => rep.info(
            "Token",
            format!(
                "one deposit each; a fresh token back ({} B write) per iteration",
                crate::token::PONG_LEN
            ),
        ),
        _ => {}
    }
    if side.more.is_empty() {
        rep.connection(&s.conn);
    } else {
        rep.info("Connections", (side.more.len() + 1).to_string());
    }
    rep
}

/// A server with one connection, default options.
pub fn serve_plain(
    dev: Device,
    p: &Params,
    lay: Layout,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<Side> {
    let s = setup::serve(dev, p, lay, ready)?;
    Ok(Side {
        s,
        more: Vec::new(),
        regs: None,
        ip: None,
    })
}

/// A client with one connection.
pub fn dial_plain(dev: Device, p: &Params, lay: Layout, peer: [u8; 4]) -> Result<Side> {
    let s = setup::dial(dev, p, lay, peer)?;
    Ok(Side {
        s,
        more: Vec::new(),
        regs: None,
        ip: None,
    })
}

/// The largest size the layout of a one-message test must hold: `-s`, the largest of
/// `-a`, or for the default of send_bw / ip_bw (0, the largest one message carries)
/// [`MAX_ONE_MESSAGE`], which bounds them all.
pub fn one_message_max(p: &Params) -> u64 {
    match p.max_size() {
        0 => MAX_ONE_MESSAGE,
        m => m.min(MAX_ONE_MESSAGE),
    }
}

/// The sizes of the run that one message of at most `max` bytes carries, as (round,
/// size): `-a` skips the others (and says so), a larger `-s` is refused with `one` as
/// the reason (e.g. "a SEND is one message"); the size 0 (the default of send_bw and
/// ip_bw) is `max`.
pub fn one_message_sizes(p: &Params, max: u64, one: &str) -> Result<Vec<(usize, u64)>> {
    if p.sizes == [0] {
        return Ok(vec![(0, max)]);
    }
    let ok: Vec<(usize, u64)> = p
        .sizes
        .iter()
        .copied()
        .filter(|&s| s <= max)
        .enumerate()
        .collect();
    if ok.len() < p.sizes.len() {
        if !p.all {
            return Err(PerfError::Usage(format!(
                "-s {}: {one}, at most {max} B on this port",
                p.sizes[0]
            )));
        }
        eprintln!("ddperf: -a: sizes above {max} B need more than one message; skipped");
    }
    Ok(ok)
}

/// The server of the tests where only the client acts (read_*, atomic_*): it waits for
/// the parameter block, then for each round's end marker, and checks that as many
/// requests arrived. Prints the client's numbers for bandwidth tests; with `--verify`
/// it reports the client's checks, which the markers carry.
pub fn passive_server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    // Round 0's requests may have arrived already (a dedicated worker): counted from
    // the parameter block.
    let base = exchange::HELLO_ARRIVALS;
    let sizes: Vec<(usize, u64)> = p.sizes.iter().copied().enumerate().collect();
    passive_rounds(side, p, rep, &sizes, base, &mut |_, _, _| Ok(None))
}

/// What a passive server checks after a round: given the round, its size and the
/// client's marker, the outcome of its own checks (sent to the client in a verdict),
/// or `None`.
pub type RoundCheck<'a> = dyn FnMut(usize, u64, &RoundEnd) -> Result<Option<Outcome>> + 'a;

/// [`passive_server`]'s rounds, once the parameter exchange is done: `sizes` as (round,
/// size), `base` the connection's arrival count before round 0 (see
/// [`crate::lat::answer`]), and `check` after each round.
pub fn passive_rounds(
    side: &Side,
    p: &Params,
    rep: &mut Reporter,
    sizes: &[(usize, u64)],
    mut base: u64,
    check: &mut RoundCheck<'_>,
) -> Result<()> {
    let s = &side.s;
    let mut total = 0;
    for &(round, size) in sizes {
        side.await_round_end(p, round, "the client's requests or its end-of-round marker")?;
        let (end, next) = exchange::read_round_end(&s.dev, &s.conn, &s.lay, p, round, base)?;
        base = next;
        total += end.count;
        if let Some((items, bad)) = end.verdict {
            let v = crate::verify::Verdict {
                items: u64::from(items),
                bytes: 0,
                bad: u64::from(bad),
            };
            rep.outcome().merge_peer(&v, "client");
        }
        if let Some(o) = check(round, size, &end)? {
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &o.verdict())?;
            rep.outcome().merge(o);
        }
        if !p.test.is_lat() {
            rep.bw(&crate::report::BwStats {
                bytes: size,
                iterations: end.count,
                timed: end.count,
                elapsed: end.elapsed,
                peak_rate: end.peak_rate,
            });
        }
    }
    if p.role == Role::Server {
        eprintln!("ddperf: server done: {total} requests served");
    }
    Ok(())
}
