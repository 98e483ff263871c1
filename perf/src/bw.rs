//! `write_bw`: ib_write_bw's stream of writes.
//!
//! The client posts `-n` writes of `size` bytes (or writes for `-D` seconds) from its
//! send region into the server's receive region at offset 0, in the loop every
//! streaming test shares ([`crate::stream`]: `--tx-depth` outstanding, every
//! `--cq-mod`th signaled). BW average = writes × size / time, MsgRate = writes / time,
//! BW peak is [`crate::report::PeakRate`]'s (best window of 16 completion polls).
//!
//! With `-q N` (default 1) the client opens N connections into the server's one
//! endpoint (the server accepts N) and posts round-robin over them, with at most
//! `min(tx_depth × N, 4096)` writes outstanding in all (see [`crate::stream`]). Every
//! control write (parameter block, markers, verdicts) stays on the first connection.
//!
//! The server cannot know the count of a `-D` run, so every round (size) ends with the
//! client's end-of-round marker (see [`crate::exchange`]), written after its last data
//! write completed — on every connection, so the marker means the whole round has
//! arrived: it carries the client's count, time and peak. The server waits for it,
//! checks that as many writes arrived (`Connection::arrivals`, summed over the
//! connections), and prints the same table from the client's numbers (perftest's server
//! prints the client's results too).
//!
//! `--compound` (hidden; scripts/bench.sh uses it) makes every write a compound
//! operation, to measure what the model's per-message work costs against a plain
//! deposit: the server gives the connection a register window of [`COMPOUND_REGS`]
//! registers (0: the receive region's base, `INDIRECT`; 2 and 4: counters, `WRITE`;
//! 3: a level of 0) and each write does one address generation (indirect on register
//! 0), two register operations (`r2 += 1`, `r4 += 1`) and a conditional
//! (`r3 > 1`: never true, so no event) with operand 1. At the end the server checks
//! that both counters equal the number of writes it received and says so on stderr.

use deposit::{Cond, ConnOptions, RegOp, RegProt, Registers, Src, WorkRequest};

use crate::error::{PerfError, Result};
use crate::exchange::{self, Layout, RoundEnd};
use crate::harness::Side;
use crate::report::{BwStats, Reporter};
use crate::setup::{self, SocketFile};
use crate::stream::Stream;
use crate::verify;
use crate::{Params, Role};

/// Runs write_bw in this process's role.
pub fn run(p: &Params) -> Result<()> {
    if p.sizes.len() > exchange::MAX_ROUNDS {
        return Err(PerfError::Usage(format!(
            "at most {} sizes per run",
            exchange::MAX_ROUNDS
        )));
    }
    let lay = layout(p);
    match p.role {
        Role::Server => {
            let _socket = SocketFile::for_spec(&p.dev);
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let side = serve(dev, p, lay, Box::new(|| {}))?;
            let mut rep = reporter(p, &side, &p.dev, true);
            rep.subtitle("server side, client's measurement");
            let r = server(&side, p, &mut rep);
            side.close();
            r?;
            verify::conclude(&mut rep, p, &[("server", &side.s.dev)])
        }
        Role::Client { peer } => {
            let dev = setup::open_device(p, &p.dev, p.ip)?;
            setup::banner(&p.dev, dev.max_frame());
            let side = dial(dev, p, lay, peer)?;
            let mut rep = reporter(p, &side, &p.dev, true);
            let r = client(&side, p, &mut rep);
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
            let sdev2 = sdev.clone();
            setup::loopback(
                p,
                move |ready| {
                    let side = serve(sdev, &ps, lay, ready)?;
                    let mut rep = reporter(&ps, &side, &sports, false);
                    server(&side, &ps, &mut rep)?;
                    side.close();
                    // Dropped after the client is done (see setup::loopback).
                    Ok(side)
                },
                || {
                    let side = dial(cdev, p, lay, crate::SERVER_IP)?;
                    let mut rep = reporter(p, &side, &ports, true);
                    let r = client(&side, p, &mut rep);
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

/// The endpoint layout: `--verify` needs slot regions (see [`crate::verify`]).
fn layout(p: &Params) -> Layout {
    let max = p.max_size();
    if p.verify {
        Layout::verified(max, verify::region_len(max))
    } else {
        Layout::for_max_size(max)
    }
}

/// Registers of the `--compound` window.
pub const COMPOUND_REGS: u32 = 5;

/// Server set-up: accepts the `-q` connections; with `--compound`, the register
/// window the writes use (one for all the connections).
fn serve(
    dev: deposit::Device,
    p: &Params,
    lay: Layout,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<Side> {
    let mut opts = ConnOptions::default();
    let mut regs = None;
    if p.compound {
        let w = dev.alloc_registers(COMPOUND_REGS)?;
        dev.set_register_protection(w, 0, RegProt::INDIRECT)?;
        dev.set_register_protection(w, 2, RegProt::WRITE)?;
        dev.set_register_protection(w, 4, RegProt::WRITE)?;
        opts.registers = Registers::Window(w);
        regs = Some(w);
    }
    let conns = p.qps as usize;
    let (s, more) = setup::serve_with(dev, p, lay, &opts, |_| Ok(()), ready, conns)?;
    Ok(Side {
        s,
        more,
        regs,
        ip: None,
    })
}

/// Client set-up: the `-q` connections.
fn dial(dev: deposit::Device, p: &Params, lay: Layout, peer: [u8; 4]) -> Result<Side> {
    let opts = ConnOptions::default();
    let (s, more) = setup::dial_with(dev, p, lay, peer, &opts, p.qps as usize)?;
    Ok(Side {
        s,
        more,
        regs: None,
        ip: None,
    })
}

/// The request of every write of a round.
fn request(p: &Params, s: &setup::Session, size: u64) -> WorkRequest {
    let req = WorkRequest::write(0, &s.ep, s.lay.send as u64, size as u32, 0);
    if !p.compound {
        return req;
    }
    req.indirect(0)
        .operand(1)
        .op1(RegOp::Add, 2, Src::Operand)
        .op2(RegOp::Add, 4, Src::Operand)
        .cond(Cond::Gt, Src::Operand, 3)
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
    rep.info("TX depth", p.tx_depth.to_string());
    rep.info("CQ Moderation", p.cq_mod.to_string());
    if p.compound {
        rep.info(
            "Compound",
            "indirect r0; r2 += 1; r4 += 1; interrupt if r3 > 1",
        );
    }
    if side.more.is_empty() {
        rep.connection(&s.conn);
    } else {
        rep.info(
            "Outstanding",
            format!(
                "at most {} writes over the {} connections (posted round-robin)",
                crate::stream::window(p, side.more.len() + 1),
                side.more.len() + 1
            ),
        );
    }
    rep
}

/// The client: streams each size, reports, ends the round.
fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let conns: Vec<&deposit::Connection> = side.conns().collect();
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    for (round, &size) in p.sizes.iter().enumerate() {
        let slots = p.verify.then(|| verify::slots(size, s.lay.send));
        if let Some(k) = slots {
            verify::fill_slots(&s.ep, s.lay.send, size, k, verify::kind::WRITE_BW, round)?;
        }
        // --verify: write i goes from send slot (i-1) mod k to receive slot (i-1) mod k,
        // its stamp written first, and at most k writes are outstanding.
        let stride = verify::stride(size);
        let stats = Stream {
            size,
            req: request(p, s, size),
            depth_cap: slots.map(|k| k as u64),
            laps: None,
            prepare: |id, _conn, req: &mut WorkRequest| {
                let Some(k) = slots else { return Ok(()) };
                let off = ((id - 1) % k as u64) as usize * stride;
                let src = s.lay.send + off;
                verify::put_stamp(&s.ep, src, size as usize, &verify::stamp(round, id))?;
                *req = WorkRequest::write(id, &s.ep, src as u64, size as u32, off as u32);
                Ok(())
            },
        }
        .run_on(s, &conns, p)?;
        let end = RoundEnd::new(stats.iterations, stats.elapsed, stats.peak_rate);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        exchange::take_verdict(s, p, round, round + 1 == p.sizes.len(), rep)?;
        rep.bw(&stats);
    }
    Ok(())
}

/// The server: lets the writes land, waits for each round's marker, reports the
/// client's numbers.
fn server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    // O(connections): once per round, not in the wait for the marker.
    let arrivals = || side.arrivals();
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    // The client streams as soon as its parameter block completed: round 0's writes
    // may have landed already, so they are counted from the block, not from a reading.
    let mut base = exchange::HELLO_ARRIVALS;
    let mut total = 0;
    let mut region = Vec::new();
    for (round, &size) in p.sizes.iter().enumerate() {
        side.await_round_end(p, round, "the client's writes or its end-of-round marker")?;
        let (end, next) =
            exchange::read_round_end_with(&s.dev, &s.ep, &s.lay, p, round, base, arrivals)?;
        base = next;
        total += end.count;
        if p.verify {
            let k = verify::slots(size, s.lay.send);
            let used = k.min(end.count as usize);
            verify::read_region(&s.ep, 0, used * verify::stride(size), &mut region)?;
            let mut o = verify::Outcome::default();
            let kind = verify::kind::WRITE_BW;
            verify::check_slots(&region, size, k, end.count, kind, round, &mut o);
            exchange::send_verdict(&s.dev, &s.conn, &s.lay, p, round, &o.verdict())?;
            rep.outcome().merge(o);
        }
        rep.bw(&BwStats {
            bytes: size,
            iterations: end.count,
            timed: end.count,
            elapsed: end.elapsed,
            peak_rate: end.peak_rate,
        });
    }
    if p.role == Role::Server {
        eprintln!(
            "ddperf: server done: {total} writes received on {} connection(s)",
            side.more.len() + 1
        );
    }
    if let Some(w) = side.regs {
        let (r2, r4) = (s.dev.read_register(w, 2)?, s.dev.read_register(w, 4)?);
        if r2 == total && r4 == total {
            eprintln!("ddperf: compound check: OK (both counters {total})");
        } else {
            eprintln!("ddperf: warning: compound counters r2 = {r2}, r4 = {r4}, expected {total}");
        }
    }
    Ok(())
}
