//! The ping-pong tests: write_lat (ib_write_lat), ip_lat, token_lat and send_lat
//! (ib_send_lat), one loop along four [`Via`]s. RTT/2 is reported, as perftest does.
//!
//! The client's ping is `size` bytes of its send region with an iteration counter
//! (1..=255, cycling over the whole run) in the last byte; the server waits for it,
//! answers the same way, and the client times the round trip with `Instant`. No
//! completion queue is on the critical path: requests are unsignaled except every
//! `--cq-mod`th, whose completions are drained (and checked) after the sample.
//!
//! * **write_lat**: RDMA writes at offset 0 of the peer; each side spins on the last
//!   byte of its own receive region (`Endpoint::load_u8`, driving `Device::progress`).
//! * **ip_lat**: each side programs an entry point whose instruction is a WRITE at
//!   offset 0, every operand its own, on isolated connections (docs/design.md §3,
//!   "Instruction-pointer messages"), and offers it to the peer at connect; the
//!   messages name only that pointer and carry the data, so the same bytes land in the
//!   same place as write_lat's.
//! * **token_lat**: the client deposits with the server's latest payload token
//!   (docs/design.md §3, "Payload tokens"; the first one is the server's offer); the
//!   server learns of it from its endpoint's event queue (checked: that token, key
//!   accepted, `size` bytes at 0), creates a fresh token (a table entry and a key from
//!   the OS random source: part of what it measures) and writes it back with the
//!   counter in a 16-byte write ([`PONG_LEN`]), where the client spins on it.
//! * **send_lat**: a SEND is a write with indirect post-increment addressing into a
//!   queue the receiver manages: register 0 of the connection's window holds the
//!   queue's next slot (`INDIRECT`: usable, never readable), register 1 the stride. A
//!   side learns of a message from its data connection's arrival counter. The queue
//!   has `min(-n, 4096)` slots; a side resets its register to the base after that many
//!   arrivals, before its own next message, when no message can be in flight to it.
//!
//! `--verify`: every ping and pong is a pseudo-random body with a stamp (round,
//! number) and the counter ([`crate::verify`]); the client checks each pong after the
//! sample, the server each ping before it answers (the client's next ping lands in the
//! same place), so `--verify` latencies include the server's check. token_lat's
//! replies are tokens: only the server checks there.
//!
//! The measured loop neither allocates nor makes a syscall (token_lat's server aside):
//! the sample buffer is reserved before the round (`-D` runs stop at
//! [`DURATION_SAMPLES`] samples).

use std::time::Instant;

use deposit::{
    Event, EventKind, InstrPtr, Instruction, RegProt, RegWindow, Registers, Token, WorkRequest,
};

use crate::error::{PerfError, Result, Wait};
use crate::harness::{self, At, Bench, Layout, Local, Round, Setup, Side, Stats};
use crate::report::{LatStats, Reporter};
use crate::setup::EMPTY_WC;
use crate::verify::{self, Outcome};
use crate::warmup::LatRound;
use crate::{Params, Span, Test};

/// Samples reserved for one size of a `-D` run (64 MiB of u64).
pub const DURATION_SAMPLES: usize = 1 << 23;
/// Bytes of token_lat's reply: the token (u64, little endian), 7 spare bytes, the
/// counter.
pub const PONG_LEN: usize = 16;
/// Most slots of a send queue.
pub const MAX_SLOTS: u64 = 4096;

/// How pings and pongs travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Write,
    Invoke,
    Token,
    Send,
}

/// A ping-pong test; its state runs over the rounds.
#[derive(Clone)]
pub struct PingPong {
    via: Via,
    counter: u8,
    /// send_lat: this side's queue registers and the slots used since the last reset.
    queue: Option<RegWindow>,
    used: usize,
    /// token_lat: the server's latest token, the client's token to deposit with.
    token: Token,
}

impl PingPong {
    pub fn new(test: Test) -> PingPong {
        let via = match test {
            Test::IpLat => Via::Invoke,
            Test::TokenLat => Via::Token,
            Test::SendLat => Via::Send,
            _ => Via::Write,
        };
        PingPong {
            via,
            counter: 0,
            queue: None,
            used: 0,
            token: Token(0),
        }
    }

    /// The request of a ping (or, but for token_lat, a pong) of `size` bytes.
    fn request(&self, s: &Side, size: u64) -> WorkRequest {
        let (from, len) = (s.lay.send as u64, size as u32);
        match self.via {
            Via::Write => WorkRequest::write(0, &s.ep, from, len, 0),
            Via::Invoke => {
                WorkRequest::invoke_from(0, InstrPtr(s.peer_offer as u32), 0, &s.ep, from, len)
            }
            Via::Token => WorkRequest::write_with_token(0, self.token, &s.ep, from, len),
            Via::Send => WorkRequest::send(0, &s.ep, from, len, 0),
        }
    }

    /// send_lat: a message arrived; returns the slot it landed in, and resets the
    /// queue pointer after its last slot.
    fn landed(&mut self, s: &Side) -> Result<usize> {
        let Some(w) = self.queue else { return Ok(0) };
        let at = s.lay.slot(self.used);
        self.used += 1;
        if self.used == s.lay.slots {
            s.dev.write_register(w, 0, s.lay.queue as u64)?;
            self.used = 0;
        }
        Ok(at)
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

/// The queue's slots: the iterations of one round, at most [`MAX_SLOTS`].
fn slots(p: &Params) -> usize {
    match p.span {
        Span::Iters(n) => n.clamp(1, MAX_SLOTS) as usize,
        Span::Duration(_) => MAX_SLOTS as usize,
    }
}

impl Bench for PingPong {
    fn layout(&self, p: &Params, _server: bool) -> Layout {
        match self.via {
            Via::Write => Layout::new(p.max_size(), 0, 0),
            Via::Send => Layout::new(harness::one_message_max(p), 0, slots(p)),
            _ => Layout::new(harness::one_message_max(p), 0, 0),
        }
    }

    fn setup(&mut self, s: &Local<'_>, _p: &Params, server: bool) -> Result<Setup> {
        let mut su = Setup::default();
        match self.via {
            Via::Write => {}
            Via::Invoke => {
                let code = s.dev.alloc_instructions_for(s.ep, 1)?;
                su.offer = u64::from(s.dev.program(code, 0, &[Instruction::write(0)])?.0);
                su.opts.instructions = Some(code);
                su.opts.isolated = true;
            }
            Via::Token if server => {
                self.token = s.dev.create_token(s.ep, 0, s.lay.send as u64)?;
                su.offer = self.token.0;
            }
            Via::Token => {}
            Via::Send => {
                let w = queue_registers(s)?;
                su.opts.registers = Registers::Window(w);
                self.queue = Some(w);
            }
        }
        Ok(su)
    }

    fn sizes(&self, dev: &deposit::Device, p: &Params) -> Result<Vec<(usize, u64)>> {
        let max = u64::from(dev.segment_max());
        match self.via {
            Via::Write => Ok(p.sizes.iter().copied().enumerate().collect()),
            Via::Invoke => harness::one_message_sizes(
                p,
                1,
                max,
                "an instruction-pointer message is one message",
            ),
            Via::Token => {
                harness::one_message_sizes(p, 1, max - 8, "a deposit with a token is one message")
            }
            Via::Send => harness::one_message_sizes(p, 1, max, "a SEND is one message"),
        }
    }

    fn info(&self, _s: &Side, _p: &Params, rep: &mut Reporter) {
        match self.via {
            Via::Invoke => rep.info(
                "Instruction",
                "WRITE at offset 0 (the instruction's), isolated connections",
            ),
            Via::Token => rep.info(
                "Token",
                format!("one deposit each; a fresh token back ({PONG_LEN} B write) per iteration"),
            ),
            _ => {}
        }
    }

    fn dial_round(&mut self, at: &At<'_>, out: &mut Outcome) -> Result<Round> {
        let At { s, p, round, size } = *at;
        if self.via == Via::Token && round == 0 {
            self.token = Token(s.peer_offer);
        }
        let last = size as usize - 1;
        let flag = if self.via == Via::Token {
            PONG_LEN - 1
        } else {
            last
        };
        let mut req = self.request(s, size);
        let check = p.verify && self.via != Via::Token;
        let (mut want, mut got) = (Vec::new(), Vec::new());
        if p.verify {
            let kinds = (verify::kind::WRITE_PING, verify::kind::WRITE_PONG);
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                kinds,
                &mut want,
                &mut got,
            )?;
        }
        let mut rtts: Vec<u64> = Vec::with_capacity(LatRound::capacity(p));
        let mut wcs = [EMPTY_WC; 16];
        let mut seen = s.conn().arrivals();
        let mut seq = 0u64; // pings of the round, warm-up included
        let mut lr = LatRound::start(p);
        while lr.more() {
            self.counter = next_counter(self.counter);
            seq += 1;
            if p.verify {
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &verify::stamp(round, seq))?;
            }
            s.ep.write((s.lay.send + last) as u64, &[self.counter])?;
            let signaled = seq % u64::from(p.cq_mod) == 0;
            req.set_signaled(signaled);
            req.set_wr_id(seq);
            let t0 = Instant::now();
            s.conn().post(&req)?;
            let mut wait = Wait::since(t0, p.timeout, "the server's reply");
            loop {
                let arrived = match self.via {
                    Via::Send => s.conn().arrivals() != seen,
                    _ => s.ep.load_u8(flag as u64)? == self.counter,
                };
                if arrived {
                    break;
                }
                s.dev.progress();
                if wait.tick()? {
                    s.check_open()?;
                    // A refused ping completes with an error: say so, not a timeout.
                    s.drain(&mut wcs)?;
                }
            }
            let t1 = Instant::now();
            seen += 1;
            let at = self.landed(s)?;
            if self.via == Via::Token {
                let mut b = [0u8; 8];
                s.ep.read(0, &mut b)?;
                self.token = Token(u64::from_le_bytes(b));
                req = self.request(s, size);
            }
            if signaled {
                s.drain(&mut wcs)?;
            }
            if check {
                // Not timed; the server's next pong comes after our next ping.
                verify::ping_image(&mut want, &verify::stamp(round, seq), self.counter);
                s.ep.read(at as u64, &mut got)?;
                verify::check_message(&got, &want, || format!("{size} B: pong {seq}"), out);
            }
            if lr.sample(&mut rtts, t0, t1) {
                break;
            }
        }
        lr.report_cut(size);
        s.drain(&mut wcs)?;
        Ok(Round {
            count: lr.iterations(),
            stats: Stats::Lat(LatStats::from_rtts(size, &mut rtts)),
        })
    }

    fn serve_round(&mut self, at: &At<'_>, out: &mut Outcome) -> Result<Option<u64>> {
        let At { s, p, round, size } = *at;
        let last = size as usize - 1;
        let mut req = self.request(s, size);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        if p.verify {
            let kinds = (verify::kind::WRITE_PONG, verify::kind::WRITE_PING);
            verify::ping_pong_bodies(
                &s.ep,
                s.lay.send,
                size as usize,
                round,
                kinds,
                &mut want,
                &mut got,
            )?;
        }
        let events = s.ep.events();
        let mut wcs = [EMPTY_WC; 16];
        // The round's messages count from its base, not from now: the client's first
        // ping may have arrived already (it starts as soon as its connections are up;
        // a secure connection's listener sees it only after its first sealed frame).
        let mut seen = s.base.get();
        let mut pongs = 0u64;
        let mut wait = Wait::new(p.timeout, "the client's next ping");
        loop {
            let next = next_counter(self.counter);
            let arrived = match self.via {
                Via::Token => match events.poll() {
                    Some(ev) => {
                        check_event(&ev, self.token, size)?;
                        true
                    }
                    None => false,
                },
                Via::Send => s.conn().arrivals() != seen,
                _ => s.ep.load_u8(last as u64)? == next,
            };
            if !arrived {
                // The client ends the round only after the pong of its last ping.
                if s.ctrl.pending() {
                    break;
                }
                s.dev.progress();
                if wait.tick()? {
                    s.check_open()?;
                }
                continue;
            }
            wait.progressed();
            self.counter = next;
            seen += 1;
            pongs += 1;
            let at = self.landed(s)?;
            let st = verify::stamp(round, pongs);
            if p.verify {
                // Before the reply: the client's next ping overwrites this one.
                verify::ping_image(&mut want, &st, next);
                s.ep.read(at as u64, &mut got)?;
                verify::check_message(&got, &want, || format!("{size} B: ping {pongs}"), out);
                verify::put_stamp(&s.ep, s.lay.send, size as usize, &st)?;
            }
            if self.via == Via::Token {
                self.token = s.dev.create_token(&s.ep, 0, s.lay.send as u64)?;
                req = WorkRequest::write_inline(0, &pong_bytes(self.token, next), 0)?;
            } else {
                s.ep.write((s.lay.send + last) as u64, &[next])?;
            }
            let signaled = pongs % u64::from(p.cq_mod) == 0;
            req.set_signaled(signaled);
            req.set_wr_id(pongs);
            s.conn().post(&req)?;
            if signaled {
                s.drain(&mut wcs)?;
            }
        }
        s.drain(&mut wcs)?;
        Ok(Some(pongs))
    }

    fn finish(&mut self, s: &Side, _p: &Params, _total: u64) -> Result<()> {
        if self.via == Via::Token {
            // The last token handed out is never used: the rounds are over.
            s.dev.cancel_token(self.token)?;
        }
        Ok(())
    }
}

/// Allocates a receive queue's registers: 0 = base (INDIRECT), 1 = stride.
pub fn queue_registers(s: &Local<'_>) -> Result<RegWindow> {
    let w = s.ep.alloc_registers(2)?;
    s.dev.write_register(w, 0, s.lay.queue as u64)?;
    s.dev.write_register(w, 1, s.lay.stride as u64)?;
    s.dev.set_register_protection(w, 0, RegProt::INDIRECT)?;
    Ok(w)
}

fn pong_bytes(token: Token, counter: u8) -> [u8; PONG_LEN] {
    let mut b = [0u8; PONG_LEN];
    b[..8].copy_from_slice(&token.0.to_le_bytes());
    b[PONG_LEN - 1] = counter;
    b
}

/// token_lat's server: checks the event of a deposit expected with `token`, `size`
/// bytes at 0.
fn check_event(ev: &Event, token: Token, size: u64) -> Result<()> {
    let ok = matches!(ev.kind, EventKind::Token { index, key_ok: true } if index == token.index())
        && ev.ea == 0
        && u64::from(ev.len) == size;
    if ok {
        return Ok(());
    }
    Err(PerfError::Failed(format!(
        "{size} B: expected the event of a deposit with token index {} of {size} B at 0, got {:?} (ea {}, {} B)",
        token.index(),
        ev.kind,
        ev.ea,
        ev.len
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_carries_the_token_then_the_counter_last() {
        let t = Token::new(7, 0xdead_beef);
        let b = pong_bytes(t, 42);
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), t.0);
        assert_eq!(b[PONG_LEN - 1], 42);
        assert!(b[8..PONG_LEN - 1].iter().all(|&x| x == 0));
    }

    fn event(kind: EventKind, ea: u64, len: u32) -> Event {
        Event {
            kind,
            conn: 1,
            peer_conn: 2,
            opcode: 0,
            operand: 0,
            regs: [0; 4],
            ea,
            len,
            timestamp: 0,
        }
    }

    #[test]
    fn only_the_expected_deposit_passes() {
        let t = Token::new(3, 99);
        let good = EventKind::Token {
            index: 3,
            key_ok: true,
        };
        assert!(check_event(&event(good, 0, 32), t, 32).is_ok());
        let other = EventKind::Token {
            index: 4,
            key_ok: true,
        };
        assert!(check_event(&event(other, 0, 32), t, 32).is_err());
        let bad_key = EventKind::Token {
            index: 3,
            key_ok: false,
        };
        assert!(check_event(&event(bad_key, 0, 0), t, 32).is_err());
        assert!(check_event(&event(good, 0, 31), t, 32).is_err());
        assert!(check_event(&event(good, 64, 32), t, 32).is_err());
    }
}
