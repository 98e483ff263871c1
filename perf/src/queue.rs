//! Streams into a queue the receiver manages: send_bw (ib_send_bw) and append_bw,
//! many senders appending to ONE queue — a test only this model has (docs/design.md §9).
//!
//! A SEND is a write with indirect post-increment addressing: the sender names only a
//! register ([`deposit::WorkRequest::send`]) that the receiver set to its queue's next
//! slot (`INDIRECT`: usable, never readable), next to the stride (the largest size
//! rounded up to 64).
//!
//! * **send_bw**: register 0 of the connection's window. The queue has `min(-n, 4096)`
//!   slots (4096 with `-D`); post-increment only moves forward, so after every lap of
//!   it the client, once every message of the lap has completed, asks for a credit (a
//!   control message); the server grants it once the lap has arrived and its pointer
//!   is back at the base. One round trip per 4096 messages. The server puts the
//!   pointer back at the end of every round too.
//! * **append_bw**: the client opens `-q N` connections (default 16); the server's
//!   endpoint has two **global registers** (`Endpoint::set_global_registers`), the
//!   queue pointer `global(0)` and its stride `global(1)`: every connection into the
//!   endpoint sees them, so each message takes the next slot whichever connection it
//!   came on, with no coordination between the senders. Each message carries a
//!   16-byte record: connection (u32), round + 1 (u16), the list length L (u16), its
//!   number k (u64). The queue holds a whole round (`-n` slots; `-D` is refused: the
//!   server could not size it). After each round the server checks every slot once —
//!   exactly `n` records of this round, each k once, each from the connection it was
//!   sent on, the pointer `n` strides on — prints `OK` or `MISMATCH` and puts the
//!   pointer back before it answers.
//!
//! `--verify`: send_bw's message `g` of the round goes from slot `g mod slots` of the
//! client's own queue area, stamped `g + 1`; the server checks each lap before it
//! resets. append_bw's bytes after the record carry a body, checked with the records.

use deposit::{global, RegWindow, Registers, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::harness::{self, kind, At, Bench, Layout, Local, Msg, Round, Setup, Side};
use crate::lat::{self, queue_registers};
use crate::report::Reporter;
use crate::stream::{self, Laps, Stream};
use crate::verify::{self, Outcome};
use crate::{Params, Span, Test};

/// Bytes of an append record (the smallest size).
const RECORD: u64 = 16;

/// send_bw or append_bw.
#[derive(Clone)]
pub struct Queue {
    append: bool,
    regs: Option<RegWindow>,
    /// Server: send_bw's laps granted in this round; append_bw's failed checks.
    laps: u64,
    failed: u64,
}

impl Queue {
    pub fn new(test: Test) -> Queue {
        Queue {
            append: test == Test::AppendBw,
            regs: None,
            laps: 0,
            failed: 0,
        }
    }

    fn reset(&mut self, s: &Side) -> Result<()> {
        let w = self.regs.expect("a queue side has registers");
        s.dev.write_register(w, 0, s.lay.queue as u64)?;
        Ok(())
    }

    /// send_bw `--verify`: checks the messages `gs` of the round (0-based), message g in
    /// slot g mod slots, sent from the client's slot g mod slots, stamped g + 1.
    fn check_lap(
        &self,
        s: &Side,
        size: u64,
        round: usize,
        gs: std::ops::Range<u64>,
        out: &mut Outcome,
    ) -> Result<()> {
        let slots = s.lay.slots as u64;
        let mut got = vec![0u8; size as usize];
        for g in gs {
            let j = g % slots;
            let seed = verify::seed(verify::kind::SEND_BW, round, j);
            let want = verify::message(seed, &verify::stamp(round, g + 1), size as usize);
            s.ep.read(s.lay.slot(j as usize) as u64, &mut got)?;
            verify::check_message(
                &got,
                &want,
                || format!("{size} B: send {} in slot {j}", g + 1),
                out,
            );
        }
        Ok(())
    }

    /// append_bw: checks the queue after a round of `count` records from the
    /// connections; says what is wrong, if anything.
    fn check_records(&self, s: &Side, round: usize, count: u64) -> Result<Option<String>> {
        let q = s.conns.len() as u64;
        let mut seen = vec![false; count as usize];
        let (mut foreign, mut dup, mut wrong_conn) = (0u64, 0u64, 0u64);
        let mut b = [0u8; RECORD as usize];
        for i in 0..count as usize {
            s.ep.read(s.lay.slot(i) as u64, &mut b)?;
            let u = |r: std::ops::Range<usize>| {
                b[r].iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x))
            };
            let (conn, tag, list, k) = (u(0..4), u(4..6), u(6..8), u(8..16));
            if tag != round as u64 + 1 || k >= count || list == 0 {
                foreign += 1;
                continue;
            }
            dup += u64::from(std::mem::replace(&mut seen[k as usize], true));
            wrong_conn += u64::from(conn != (k / list) % q);
        }
        let missing = seen.iter().filter(|s| !**s).count();
        let ptr = s.dev.read_register(self.regs.expect("registers"), 0)?;
        let want = (s.lay.queue + count as usize * s.lay.stride) as u64;
        if foreign + dup + wrong_conn == 0 && missing == 0 && ptr == want {
            return Ok(None);
        }
        Ok(Some(format!(
            "{missing} missing, {dup} duplicated, {foreign} not of this round, {wrong_conn} from the wrong connection; queue pointer {} slots past the base (expected {count})",
            (ptr as i64 - s.lay.queue as i64) / s.lay.stride as i64
        )))
    }
}

/// The seed of the bytes after an append record (`--verify`).
fn append_seed(round: usize) -> u64 {
    verify::seed(verify::kind::APPEND, round, 0)
}

fn record(conn: u32, round: usize, list: u32, k: u64) -> [u8; RECORD as usize] {
    let mut b = [0u8; RECORD as usize];
    b[0..4].copy_from_slice(&conn.to_le_bytes());
    b[4..6].copy_from_slice(&(round as u16 + 1).to_le_bytes());
    b[6..8].copy_from_slice(&(list as u16).to_le_bytes());
    b[8..16].copy_from_slice(&k.to_le_bytes());
    b
}

impl Bench for Queue {
    fn layout(&self, p: &Params, server: bool) -> Layout {
        let max = harness::one_message_max(p);
        let slots = match (self.append, server, p.span) {
            // The client's queue area holds its source slots, one per message in flight.
            (true, false, _) => stream::window(p, p.qps as usize) as usize,
            (true, true, Span::Iters(n)) => n as usize,
            (true, true, Span::Duration(_)) => 0,
            (false, _, Span::Iters(n)) => n.clamp(1, lat::MAX_SLOTS) as usize,
            (false, _, Span::Duration(_)) => lat::MAX_SLOTS as usize,
        };
        Layout::new(max, 0, slots)
    }

    fn setup(&mut self, s: &Local<'_>, _p: &Params, server: bool) -> Result<Setup> {
        let mut su = Setup::default();
        if !server {
            return Ok(su);
        }
        let w = queue_registers(s)?;
        if self.append {
            s.ep.set_global_registers(w)?;
        } else {
            su.opts.registers = Registers::Window(w);
        }
        self.regs = Some(w);
        Ok(su)
    }

    fn sizes(&self, dev: &deposit::Device, p: &Params) -> Result<Vec<(usize, u64)>> {
        let max = u64::from(dev.segment_max());
        if self.append {
            harness::one_message_sizes(p, RECORD, max, "an append is a record in one message")
        } else {
            harness::one_message_sizes(p, 1, max, "a SEND is one message")
        }
    }

    fn info(&self, s: &Side, _p: &Params, rep: &mut Reporter) {
        let on = if self.append {
            " on a global register"
        } else {
            ""
        };
        rep.info(
            "Receive queue",
            format!(
                "{} slots of {} B, post-increment{on}",
                s.lay.slots, s.lay.stride
            ),
        );
    }

    fn dial_round(&mut self, at: &At<'_>, _out: &mut Outcome) -> Result<Round> {
        let At { s, p, round, size } = *at;
        let slots = s.lay.slots;
        let (reg, kind) = if self.append {
            (global(0), verify::kind::APPEND)
        } else {
            (0, verify::kind::SEND_BW)
        };
        if p.verify {
            for j in 0..slots {
                let seed = if self.append {
                    append_seed(round)
                } else {
                    verify::seed(kind, round, j as u64)
                };
                verify::fill(&s.ep, s.lay.slot(j), size as usize, seed)?;
            }
        }
        let credit = |lap: u64| {
            s.ctrl
                .send(&Msg::new(kind::CREDIT, round, [lap, 0, 0, 0, 0, 0]))?;
            let m = s.ctrl.recv(
                kind::CREDIT,
                "the server's credit (its queue to be recycled)",
            )?;
            if m.v[0] == lap {
                return Ok(());
            }
            Err(PerfError::Failed(format!(
                "asked for the credit of lap {lap}, got {}",
                m.v[0]
            )))
        };
        // Message id (1-based) goes from slot (id - 1) mod slots (append_bw: with its
        // record; send_bw --verify: stamped); the stream keeps at most `slots`
        // outstanding (append_bw) or waits at each lap (send_bw).
        let append = self.append;
        let stats = Stream {
            size,
            req: WorkRequest::send(0, &s.ep, s.lay.slot(0) as u64, size as u32, reg),
            depth_cap: append.then_some(slots as u64),
            laps: (!append).then_some(Laps {
                slots: slots as u64,
                wait: &credit,
            }),
            prepare: |id, conn, req: &mut WorkRequest| {
                if !append && !p.verify {
                    return Ok(());
                }
                let at = s.lay.slot(((id - 1) % slots as u64) as usize);
                if append {
                    s.ep.write(at as u64, &record(conn as u32, round, p.post_list, id - 1))?;
                } else {
                    verify::put_stamp(&s.ep, at, size as usize, &verify::stamp(round, id))?;
                }
                *req = WorkRequest::send(0, &s.ep, at as u64, size as u32, reg);
                Ok(())
            },
        }
        .run(s, p)?;
        Ok(Round::bw(stats))
    }

    fn serve_round(&mut self, at: &At<'_>, out: &mut Outcome) -> Result<Option<u64>> {
        let At { s, p, round, size } = *at;
        if self.append {
            s.await_ctrl(p, "the clients' appends or the end of the round")?;
            return Ok(None);
        }
        // send_bw: grant credits until the end of the round.
        let (slots, base) = (s.lay.slots as u64, s.base.get());
        self.laps = 0;
        loop {
            s.await_ctrl(p, "the client's sends or its end of the round")?;
            if s.ctrl.peek_kind() != Some(kind::CREDIT) {
                return Ok(None);
            }
            let m = s.ctrl.recv(kind::CREDIT, "a credit request")?;
            self.laps += 1;
            let mut wait = Wait::new(p.timeout, "the lap's sends to arrive");
            while s.arrivals() < base + self.laps * slots {
                s.dev.progress();
                wait.tick()?;
            }
            if p.verify {
                let lap = (self.laps - 1) * slots..self.laps * slots;
                self.check_lap(s, size, round, lap, out)?;
            }
            self.reset(s)?;
            s.ctrl
                .send(&Msg::new(kind::CREDIT, round, [m.v[0], 0, 0, 0, 0, 0]))?;
        }
    }

    fn check_round(&mut self, at: &At<'_>, count: u64, out: &mut Outcome) -> Result<()> {
        let At { s, p, round, size } = *at;
        if !self.append {
            let slots = s.lay.slots as u64;
            if p.verify {
                self.check_lap(s, size, round, self.laps * slots..count, out)?;
            }
            return self.reset(s);
        }
        match self.check_records(s, round, count)? {
            None => {
                out.add(count, count * RECORD, 0);
                eprintln!("ddperf: append check {size} B: OK ({count} records from {} connections, each once, no overlap)", s.conns.len());
            }
            Some(why) => {
                self.failed += 1;
                out.add(count, count * RECORD, 1);
                out.note(format!("{size} B: records: {why}"));
                eprintln!("ddperf: append check {size} B: MISMATCH: {why}");
            }
        }
        if p.verify {
            let want = verify::body(append_seed(round), size as usize);
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
        }
        self.reset(s)
    }

    fn finish(&mut self, _s: &Side, _p: &Params, _total: u64) -> Result<()> {
        if self.failed > 0 {
            return Err(PerfError::Failed(format!(
                "append check failed in {} round(s) (see above)",
                self.failed
            )));
        }
        Ok(())
    }
}

/// append_bw's options (`-D` cannot size the server's queue).
pub fn check_span(p: &Params) -> Result<()> {
    if p.test == Test::AppendBw && matches!(p.span, Span::Duration(_)) {
        return Err(PerfError::Usage(
            "append_bw: give -n (the server's queue holds one whole round; -D cannot size it)"
                .into(),
        ));
    }
    Ok(())
}
