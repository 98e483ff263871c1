//! `raw_lat` / `raw_bw`: the physical-limit baseline. The same port spec, driven by a
//! bare DPDK burst loop (`deposit_transport::port`) with no transport at all: no
//! connection, no reliability, no deposit. What the write tests lose against these is
//! what the transport costs.
//!
//! A frame of `size` payload bytes is `size + FRAME_OVERHEAD` (78) bytes long, at least
//! 64: the on-wire length of a one-message deposit frame. Only its first 34 bytes are
//! written by raw_bw (a payload is not copied: the port's own copy, e.g. memif's, is the
//! baseline); raw_lat writes the whole frame (below):
//!
//! ```text
//!  0..6 dst MAC ff:ff:ff:ff:ff:ff   6..12 src MAC 02:dd:00:00:00:01
//! 12..14 ethertype 0x88b5 (local experimental)   14..16 magic dd f0
//! 16 kind (data, end of round, finish, report)   17 round (size index)
//! 18..26 sequence number / count (LE)            26..34 spare (LE)
//! ```
//!
//! * raw_bw: the sender (client) sends `-n` frames per size (or for `-D` seconds) in
//!   bursts of 32 as fast as the port takes them, then three end-of-round frames with
//!   its count; after the last size a finish frame, which the receiver answers with a
//!   report frame (its total), so the sender knows it may go. The receiver (server)
//!   counts frames and reports the RECEIVED rate: frames after its first burst over
//!   the time from that burst to the last one. Both print a table in two processes
//!   (client: offered, server: received); `--loopback` prints the received one.
//! * raw_lat: ping-pong of one frame, with the data path of ib_write_lat and nothing
//!   else: each side writes a whole frame (header and `size` payload bytes) into a
//!   fresh mbuf, and the receiving side waits for that frame's last byte — the byte an
//!   ib_write_lat receiver polls — before it answers with a frame of its own. No
//!   parsing, checksum, connection or deposit. RTT/2 is reported with the latency
//!   table.
//!
//! Sizes whose frame exceeds the port's largest frame are skipped with `-a` and refused
//! with `-s`. raw_bw's default size is the largest payload that fits one frame.
//! The measured loops neither allocate (mbufs come from the port's pool) nor make a
//! syscall beyond what the PMD does.

use std::time::{Duration, Instant};

use deposit_transport::port::{self, Mbuf, Port, PortConfig, PortSpec, RxBatch, TxBatch};
use deposit_transport::wire::FRAME_OVERHEAD;

use crate::error::{PerfError, Result, Wait};
use crate::report::{BwStats, LatStats, PeakRate, Reporter};
use crate::setup::{self, Place};
use crate::warmup::LatRound;
use crate::{Params, Role, Span};

const HDR_LEN: usize = 34;
const MIN_FRAME: usize = 64;
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
const MAGIC: [u8; 2] = [0xdd, 0xf0];
const SRC_MAC: [u8; 6] = [0x02, 0xdd, 0, 0, 0, 1];
/// Copies of each end-of-round / finish / report frame (a lossy port may drop some).
const CONTROL_COPIES: usize = 3;

/// What a frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Data = 1,
    End = 2,
    Finish = 3,
    Report = 4,
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: Kind,
    round: u8,
    seq: u64,
}

/// Writes the header and sets the frame length.
#[inline]
fn stamp(m: &mut Mbuf, kind: Kind, round: u8, seq: u64, len: usize) {
    let room = m.room_mut();
    room[0..6].copy_from_slice(&[0xff; 6]);
    room[6..12].copy_from_slice(&SRC_MAC);
    room[12..14].copy_from_slice(&ETHERTYPE);
    room[14..16].copy_from_slice(&MAGIC);
    room[16] = kind as u8;
    room[17] = round;
    room[18..26].copy_from_slice(&seq.to_le_bytes());
    room[26..34].fill(0);
    m.set_len(len);
}

/// The byte that ends frame `seq` of raw_lat (never 0, so a stale buffer cannot match).
#[inline]
fn last_byte(seq: u64) -> u8 {
    (seq % 255) as u8 + 1
}

/// Writes a whole raw_lat data frame of `len` bytes: header, payload, and the frame's
/// last byte last.
#[inline]
fn stamp_full(m: &mut Mbuf, round: u8, seq: u64, len: usize) {
    stamp(m, Kind::Data, round, seq, len);
    let room = m.room_mut();
    let b = last_byte(seq);
    room[HDR_LEN..len].fill(b);
}

/// Reads the header of a frame; `None` for anything that is not ours.
#[inline]
fn parse(d: &[u8]) -> Option<Header> {
    if d.len() < HDR_LEN || d[12..14] != ETHERTYPE || d[14..16] != MAGIC {
        return None;
    }
    let kind = match d[16] {
        1 => Kind::Data,
        2 => Kind::End,
        3 => Kind::Finish,
        4 => Kind::Report,
        _ => return None,
    };
    Some(Header {
        kind,
        round: d[17],
        seq: u64::from_le_bytes(d[18..26].try_into().ok()?),
    })
}

/// On-wire length of a frame carrying `size` payload bytes.
fn frame_len(size: u64) -> usize {
    (size as usize + FRAME_OVERHEAD).max(MIN_FRAME)
}

fn open_port(p: &Params, spec_str: &str) -> Result<Port> {
    let spec: PortSpec = spec_str.parse()?;
    let mut cfg = PortConfig::new(spec);
    if let Some(m) = p.max_frame {
        cfg.max_frame = m;
    }
    Port::open(&cfg).map_err(|e| setup::explain_open(spec_str, e.into()))
}

/// The sizes this port can carry in one frame.
fn sizes_for(p: &Params, max_frame: usize) -> Result<Vec<u64>> {
    let fit = (max_frame - FRAME_OVERHEAD) as u64;
    if p.sizes == [0] {
        return Ok(vec![fit]); // raw_bw's default
    }
    let sizes: Vec<u64> = p
        .sizes
        .iter()
        .copied()
        .filter(|&s| frame_len(s) <= max_frame)
        .collect();
    if sizes.len() < p.sizes.len() {
        if !p.all {
            return Err(PerfError::Usage(format!(
                "-s {}: a frame of {} B exceeds the port's largest frame ({max_frame} B); at most -s {fit}",
                p.sizes[0],
                frame_len(p.sizes[0])
            )));
        }
        eprintln!("ddperf: -a: sizes above {fit} B do not fit one {max_frame}-byte frame; skipped");
    }
    Ok(sizes)
}

/// Opens this process's port(s) and runs `client` and/or `server` on them.
fn run_sides(
    p: &Params,
    client: fn(&mut Port, &Params, &[u64], &mut Reporter) -> Result<()>,
    server: fn(&mut Port, &Params, &[u64], &mut Reporter) -> Result<()>,
) -> Result<()> {
    let side = |p: &Params, at: &Place, server: bool| -> Result<(Port, Vec<u64>, Reporter)> {
        if server {
            port::register_thread();
        }
        let port = open_port(p, &at.spec)?;
        if at.banner {
            setup::banner(&at.ports, port.max_frame());
        }
        let sizes = sizes_for(p, port.max_frame())?;
        setup::wait_link(|| port.link_up(), p)?;
        let mut rep = Reporter::new(p.test, p.json, p.report_gbits, at.report);
        rep.plot_to(p.plot.clone());
        rep.info("Port", at.ports.clone());
        rep.info("Max frame", format!("{} B", port.max_frame()));
        rep.info(
            "Frame",
            format!("payload + {FRAME_OVERHEAD} B (min {MIN_FRAME} B)"),
        );
        if !p.test.is_lat() {
            rep.subtitle(if server {
                "received"
            } else {
                "offered by the sender"
            });
        }
        Ok((port, sizes, rep))
    };
    let ps = p.clone();
    setup::roles(
        p,
        p.test == crate::Test::RawBw,
        move |at, ready| {
            let (mut port, sizes, mut rep) = side(&ps, &at, true)?;
            ready();
            server(&mut port, &ps, &sizes, &mut rep)?;
            rep.finish()?;
            Ok(port)
        },
        |at, _peer| {
            let (mut port, sizes, mut rep) = side(p, &at, false)?;
            client(&mut port, p, &sizes, &mut rep)?;
            rep.finish()?;
            Ok(())
        },
    )
}

/// Runs raw_bw in this process's role.
pub fn run_bw(p: &Params) -> Result<()> {
    run_sides(p, bw_sender, bw_receiver)
}

/// Runs raw_lat in this process's role.
pub fn run_lat(p: &Params) -> Result<()> {
    run_sides(p, lat_pinger, lat_echo)
}

/// An mbuf, waiting (bounded) for one to come back to the pool.
fn alloc_slow(port: &mut Port, p: &Params) -> Result<Mbuf> {
    let mut wait = Wait::new(p.timeout, "an mbuf from the port's pool");
    loop {
        if let Some(m) = port.alloc() {
            return Ok(m);
        }
        wait.tick()?;
    }
}

/// Sends `copies` control frames, waiting (bounded) until the port takes them.
fn send_control(
    port: &mut Port,
    p: &Params,
    kind: Kind,
    round: u8,
    seq: u64,
    copies: usize,
) -> Result<()> {
    let mut batch = TxBatch::default();
    for _ in 0..copies {
        let mut m = alloc_slow(port, p)?;
        stamp(&mut m, kind, round, seq, MIN_FRAME);
        let _ = batch.push(m);
    }
    let mut wait = Wait::new(p.timeout, "the port to take a control frame");
    while !batch.is_empty() {
        if port.tx(&mut batch) == 0 {
            wait.tick()?;
        }
    }
    Ok(())
}

/// raw_bw sender: one stream per size, then finish and wait for the receiver's report.
fn bw_sender(port: &mut Port, p: &Params, sizes: &[u64], rep: &mut Reporter) -> Result<()> {
    let mut total = 0u64;
    for (round, &size) in sizes.iter().enumerate() {
        let round = round as u8;
        let len = frame_len(size);
        let (mut target, run_for) = match p.span {
            Span::Iters(n) => (n, None),
            Span::Duration(d) => (u64::MAX, Some(d)),
        };
        let mut batch = TxBatch::default();
        let mut queued = 0u64;
        let mut sent = 0u64;
        let mut idle = Wait::new(
            p.timeout,
            "the port to take frames (is the receiver running?)",
        );
        let mut turns = 0u32;
        let t0 = Instant::now();
        let deadline = run_for.map(|d| t0 + d);
        let mut peak = PeakRate::new(t0);
        while sent < target {
            while !batch.is_full() && queued < target {
                let Some(mut m) = port.alloc() else { break };
                stamp(&mut m, Kind::Data, round, queued, len);
                if batch.push(m).is_err() {
                    break;
                }
                queued += 1;
            }
            let k = port.tx(&mut batch) as u64;
            sent += k;
            turns = turns.wrapping_add(1);
            if k == 0 {
                idle.tick()?;
            } else {
                idle.progressed();
            }
            if turns % 64 == 0 {
                let now = Instant::now();
                peak.record(now, sent);
                if deadline.is_some_and(|d| now >= d) {
                    target = queued;
                }
            }
        }
        let elapsed = t0.elapsed();
        send_control(port, p, Kind::End, round, sent, CONTROL_COPIES)?;
        total += sent;
        let mut stats = BwStats {
            bytes: size,
            iterations: sent,
            timed: sent,
            elapsed,
            peak_rate: 0.0,
        };
        stats.peak_rate = peak.peak(stats.rate());
        rep.bw(&stats);
    }
    send_control(port, p, Kind::Finish, 0, total, CONTROL_COPIES)?;
    // Wait for the receiver's report, so that nothing is lost by going away early.
    let mut rx = RxBatch::default();
    let mut wait = Wait::new(p.timeout, "the receiver's report");
    loop {
        if port.rx(&mut rx) == 0 {
            wait.tick()?;
            continue;
        }
        for m in rx.by_ref() {
            if let Some(h) = parse(m.data()).filter(|h| h.kind == Kind::Report) {
                if h.seq != total {
                    eprintln!(
                        "ddperf: the receiver got {} of the {total} frames sent",
                        h.seq
                    );
                }
                return Ok(());
            }
        }
    }
}

/// Receive-side counts of one round.
struct RxRound {
    frames: u64,
    first: Option<(Instant, u64)>,
    last: Option<Instant>,
    peak: PeakRate,
    bursts: u32,
}

impl RxRound {
    fn new() -> RxRound {
        RxRound {
            frames: 0,
            first: None,
            last: None,
            peak: PeakRate::new(Instant::now()),
            bursts: 0,
        }
    }

    /// `n` data frames of this round arrived in a burst at `now`.
    fn burst(&mut self, now: Instant, n: u64) {
        if n == 0 {
            return;
        }
        self.frames += n;
        if self.first.is_none() {
            self.first = Some((now, self.frames));
        }
        self.last = Some(now);
        self.bursts = self.bursts.wrapping_add(1);
        // A window of 16 events of 8 bursts: up to 4096 frames.
        if self.bursts % 8 == 0 {
            self.peak.record(now, self.frames);
        }
    }

    /// The received rate: frames after the first burst, over the time from it to the
    /// last burst.
    fn stats(&self, size: u64) -> BwStats {
        let (elapsed, timed) = match (self.first, self.last) {
            (Some((t0, n0)), Some(t1)) => (t1.duration_since(t0), self.frames - n0),
            _ => (Duration::ZERO, 0),
        };
        let mut s = BwStats {
            bytes: size,
            iterations: self.frames,
            timed,
            elapsed,
            peak_rate: 0.0,
        };
        s.peak_rate = self.peak.peak(s.rate());
        s
    }
}

/// raw_bw receiver: counts each round until its end frame, answers the finish frame.
fn bw_receiver(port: &mut Port, p: &Params, sizes: &[u64], rep: &mut Reporter) -> Result<()> {
    let mut rx = RxBatch::default();
    let mut round = 0u8;
    let mut cur = RxRound::new();
    let mut total = 0u64;
    let mut idle = Wait::new(p.timeout, "frames from the sender");
    loop {
        if port.rx(&mut rx) == 0 {
            idle.tick()?;
            continue;
        }
        idle.progressed();
        let now = Instant::now();
        let mut n = 0u64;
        let mut finish = false;
        for m in rx.by_ref() {
            let Some(h) = parse(m.data()) else { continue };
            match h.kind {
                Kind::Data if h.round == round => n += 1,
                Kind::End if h.round == round => {
                    cur.burst(now, n);
                    n = 0;
                    let size = sizes
                        .get(round as usize)
                        .copied()
                        .unwrap_or((m.data().len().max(FRAME_OVERHEAD) - FRAME_OVERHEAD) as u64);
                    if h.seq != cur.frames {
                        eprintln!(
                            "ddperf: {size} B: received {} of the {} frames sent",
                            cur.frames, h.seq
                        );
                    }
                    rep.bw(&cur.stats(size));
                    total += cur.frames;
                    round = round.wrapping_add(1);
                    cur = RxRound::new();
                }
                Kind::Finish => finish = true,
                _ => {}
            }
        }
        cur.burst(now, n);
        if finish {
            send_control(port, p, Kind::Report, round, total, CONTROL_COPIES)?;
            if (round as usize) < sizes.len() {
                return Err(PerfError::Failed(format!(
                    "the sender finished after {round} of {} sizes (same -s/-a on both sides?)",
                    sizes.len()
                )));
            }
            return Ok(());
        }
    }
}

/// raw_lat pinger: one frame out, wait for it to come back, per iteration.
fn lat_pinger(port: &mut Port, p: &Params, sizes: &[u64], rep: &mut Reporter) -> Result<()> {
    let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
    let mut tx = TxBatch::default();
    let mut rx = RxBatch::default();
    for (round, &size) in sizes.iter().enumerate() {
        let round = round as u8;
        let len = frame_len(size);
        rtts.clear();
        let mut lr = LatRound::start(p);
        // Frames sent this round, warm-up ones included: each echo is matched by it.
        let mut seq = 0u64;
        while lr.more() {
            let mut m = match port.alloc() {
                Some(m) => m,
                None => alloc_slow(port, p)?,
            };
            let t0 = Instant::now();
            stamp_full(&mut m, round, seq, len);
            let _ = tx.push(m);
            let mut wait = Wait::since(
                t0,
                p.timeout,
                "the echo of a frame (is the server running?)",
            );
            while port.tx(&mut tx) == 0 {
                wait.tick()?;
            }
            'echo: loop {
                if port.rx(&mut rx) > 0 {
                    for m in rx.by_ref() {
                        let d = m.data();
                        if d.last() == Some(&last_byte(seq))
                            && parse(d).is_some_and(|h| {
                                h.kind == Kind::Data && h.round == round && h.seq == seq
                            })
                        {
                            break 'echo;
                        }
                    }
                }
                wait.tick()?;
            }
            let t1 = Instant::now();
            seq += 1;
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        rep.lat(&LatStats::from_rtts(size, &mut rtts));
    }
    send_control(port, p, Kind::Finish, 0, 0, CONTROL_COPIES)
}

/// raw_lat echo: sends every data frame back as is until the finish frame.
fn lat_echo(port: &mut Port, p: &Params, _sizes: &[u64], _rep: &mut Reporter) -> Result<()> {
    let mut rx = RxBatch::default();
    let mut tx = TxBatch::default();
    let mut idle = Wait::new(p.timeout, "frames from the client");
    let mut echoed = 0u64;
    loop {
        if port.rx(&mut rx) == 0 {
            idle.tick()?;
            continue;
        }
        idle.progressed();
        let mut finish = false;
        for m in rx.by_ref() {
            let d = m.data();
            match parse(d) {
                Some(h) if h.kind == Kind::Data && d.last() == Some(&last_byte(h.seq)) => {
                    // Answer with a frame of our own, written whole, like a reply write.
                    let len = d.len();
                    drop(m);
                    let Some(mut r) = port.alloc() else { continue };
                    stamp_full(&mut r, h.round, h.seq, len);
                    if let Err(r) = tx.push(r) {
                        drop(r);
                    }
                }
                Some(h) if h.kind == Kind::Finish => finish = true,
                _ => {}
            }
        }
        while !tx.is_empty() {
            let k = port.tx(&mut tx);
            echoed += k as u64;
            if k == 0 {
                idle.tick()?;
            }
        }
        if finish {
            if p.role == Role::Server {
                eprintln!("ddperf: server done: {echoed} frames echoed");
            }
            return Ok(());
        }
    }
}
