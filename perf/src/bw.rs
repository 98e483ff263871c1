//! write_bw (ib_write_bw) and ip_bw: streams of writes, or of instruction-pointer
//! messages whose instruction writes, into the server's receive region at offset 0.
//!
//! The client streams in the loop every streaming test shares ([`crate::stream`]:
//! `--tx-depth` outstanding, every `--cq-mod`th signaled, `-q` connections
//! round-robin). BW average = messages × size / time, MsgRate = messages / time, BW
//! peak is [`crate::report::PeakRate`]'s. The server is passive and prints the
//! client's numbers.
//!
//! * **ip_bw**: the server programs an entry point (offered at connect) whose
//!   instruction is a WRITE at offset 0, where write_bw's writes land too, on an
//!   isolated connection, so the two compare directly. With `--verify`, as write_bw
//!   then writes into slots, the instruction is a WRITE at a ring pointer r0 with
//!   post-increment (by r1) and `r0 &= r2`, one compound operation: the server, not the
//!   sender, decides where each message lands, and message `g` of the run (0-based)
//!   lands in ring slot `g mod K` ([`ring`]). Sizes are one message.
//! * **`--compound`** (write_bw, hidden; scripts/bench.sh uses it) makes every write a
//!   compound operation, to measure what the model's per-message work costs: the
//!   server gives the connections a register window of five registers (0: the receive
//!   region's base, `INDIRECT`; 2 and 4: counters, `WRITE`; 3: a level of 0) and each
//!   write does one address generation (indirect on r0), two register operations
//!   (`r2 += 1`, `r4 += 1`) and a conditional (`r3 > 1`: never true, so no event). At
//!   the end the server checks that both counters equal the writes it received.
//!
//! `--verify`: write `i` goes from send slot `(i-1) mod K` to receive slot `(i-1) mod
//! K` ([`verify::slots`]), at most `K` outstanding; ip_bw's message `g` from send slot
//! `g mod K`. After each round the server checks every slot the round wrote last.

use deposit::{
    Cond, InstrPtr, Instruction, RegOp, RegProt, RegWindow, Registers, Src, WorkRequest,
};

use crate::error::Result;
use crate::harness::{self, At, Bench, Layout, Local, Round, Setup, Side};
use crate::report::Reporter;
use crate::stream::Stream;
use crate::verify::{self, Outcome, Ring};
use crate::{Params, Test};

/// write_bw or ip_bw; `before` counts the messages of the earlier rounds.
#[derive(Clone)]
pub struct Write {
    ip: bool,
    compound: Option<RegWindow>,
    before: u64,
}

impl Write {
    pub fn new(test: Test) -> Write {
        Write {
            ip: test == Test::IpBw,
            compound: None,
            before: 0,
        }
    }
}

/// ip_bw's ring under `--verify`: the largest size rounded up to a power of two (64 at
/// least) per slot, at most [`verify::MAX_SLOTS`] slots in [`verify::REGION`] bytes.
pub fn ring(p: &Params) -> Ring {
    let stride = harness::one_message_max(p).max(64).next_power_of_two() as usize;
    Ring {
        stride,
        slots: (verify::REGION / stride).clamp(1, verify::MAX_SLOTS),
    }
}

impl Bench for Write {
    fn layout(&self, p: &Params, _server: bool) -> Layout {
        let max = if self.ip {
            harness::one_message_max(p)
        } else {
            p.max_size()
        };
        let region = match (p.verify, self.ip) {
            (false, _) => 0,
            (true, false) => verify::region_len(max),
            (true, true) => ring(p).len(),
        };
        Layout::new(max, region, 0)
    }

    fn setup(&mut self, s: &Local<'_>, p: &Params, server: bool) -> Result<Setup> {
        let mut su = Setup::default();
        if !server {
            return Ok(su);
        }
        if p.compound {
            let w = s.ep.alloc_registers(5)?;
            s.dev.set_register_protection(w, 0, RegProt::INDIRECT)?;
            s.dev.set_register_protection(w, 2, RegProt::WRITE)?;
            s.dev.set_register_protection(w, 4, RegProt::WRITE)?;
            su.opts.registers = Registers::Window(w);
            self.compound = Some(w);
        }
        if self.ip {
            let mut ins = Instruction::write(0);
            if p.verify {
                let (ring, w) = (ring(p), s.ep.alloc_registers(3)?);
                s.dev.write_register(w, 1, ring.stride as u64)?;
                s.dev.write_register(w, 2, ring.len() as u64 - 1)?;
                ins = ins.post_increment(0).op1(RegOp::And, 0, Src::Reg(2));
                su.opts.registers = Registers::Window(w);
            }
            let code = s.dev.alloc_instructions_for(s.ep, 1)?;
            su.offer = u64::from(s.dev.program(code, 0, &[ins])?.0);
            su.opts.instructions = Some(code);
            su.opts.isolated = true;
        }
        Ok(su)
    }

    fn sizes(&self, dev: &deposit::Device, p: &Params) -> Result<Vec<(usize, u64)>> {
        if self.ip {
            let max = u64::from(dev.segment_max());
            harness::one_message_sizes(p, 1, max, "an instruction-pointer message is one message")
        } else {
            Ok(p.sizes.iter().copied().enumerate().collect())
        }
    }

    fn info(&self, _s: &Side, p: &Params, rep: &mut Reporter) {
        if p.compound {
            rep.info(
                "Compound",
                "indirect r0; r2 += 1; r4 += 1; interrupt if r3 > 1",
            );
        }
        if self.ip && p.verify {
            let r = ring(p);
            rep.info("Instruction", format!(
                "WRITE at the server's ring pointer, post-increment, wrapping over {} slots of {} B; isolated connections",
                r.slots, r.stride
            ));
        } else if self.ip {
            rep.info(
                "Instruction",
                "WRITE at offset 0 (the instruction's), isolated connections",
            );
        }
    }

    fn dial_round(&mut self, at: &At<'_>, _out: &mut Outcome) -> Result<Round> {
        let At { s, p, round, size } = *at;
        let ip = InstrPtr(s.peer_offer as u32);
        // From the endpoint of each connection's own shard (with several workers the
        // data connections spread over nested endpoints of `s.ep`, one per shard: a
        // request may name only its connection's shard's endpoints).
        let req = |ep: &deposit::Endpoint, from: usize, to: usize| {
            if self.ip {
                WorkRequest::invoke_from(0, ip, 0, ep, from as u64, size as u32)
            } else {
                WorkRequest::write(0, ep, from as u64, size as u32, to as u32)
            }
        };
        let spread = s.conns.iter().any(|c| c.endpoint().shard() != s.ep.shard());
        let mut first = req(&s.ep, s.lay.send, 0);
        if p.compound {
            first = first
                .indirect(0)
                .operand(1)
                .op1(RegOp::Add, 2, Src::Operand)
                .op2(RegOp::Add, 4, Src::Operand)
                .cond(Cond::Gt, Src::Operand, 3);
        }
        let k = match (p.verify, self.ip) {
            (false, _) => 0,
            (true, false) => verify::slots(size, s.lay.send),
            (true, true) => ring(p).slots,
        };
        let kind = if self.ip {
            verify::kind::IP_BW
        } else {
            verify::kind::WRITE_BW
        };
        if p.verify {
            verify::fill_slots(&s.ep, s.lay.send, size, k, kind, round)?;
        }
        // --verify: message g (0-based: over the run for ip_bw, whose ring pointer runs
        // on; over the round for write_bw) from send slot g mod k (to receive slot g mod
        // k), stamped g + 1 first; a slot is restamped only once its message completed.
        let before = if self.ip { self.before } else { 0 };
        let stride = verify::stride(size);
        let stats = Stream {
            size,
            req: first,
            depth_cap: p.verify.then_some(k as u64),
            laps: None,
            prepare: |id, c: usize, r: &mut WorkRequest| {
                if p.verify {
                    let g = before + id - 1;
                    let at = (g % k as u64) as usize * stride;
                    verify::put_stamp(
                        &s.ep,
                        s.lay.send + at,
                        size as usize,
                        &verify::stamp(round, g + 1),
                    )?;
                    *r = req(s.conns[c].endpoint(), s.lay.send + at, at);
                } else if spread {
                    *r = req(s.conns[c].endpoint(), s.lay.send, 0);
                }
                Ok(())
            },
        }
        .run(s, p)?;
        self.before += stats.iterations;
        Ok(Round::bw(stats))
    }

    fn check_round(&mut self, at: &At<'_>, count: u64, out: &mut Outcome) -> Result<()> {
        let At { s, p, round, size } = *at;
        let msgs = self.before..self.before + count;
        self.before = msgs.end;
        if !p.verify {
            return Ok(());
        }
        let mut region = Vec::new();
        if self.ip {
            let ring = ring(p);
            verify::read_region(&s.ep, 0, ring.len(), &mut region)?;
            verify::check_ring(&region, ring, size, msgs, verify::kind::IP_BW, round, out);
        } else {
            let k = verify::slots(size, s.lay.send);
            verify::read_region(
                &s.ep,
                0,
                k.min(count as usize) * verify::stride(size),
                &mut region,
            )?;
            verify::check_slots(&region, size, k, count, verify::kind::WRITE_BW, round, out);
        }
        Ok(())
    }

    fn finish(&mut self, s: &Side, _p: &Params, total: u64) -> Result<()> {
        if let Some(w) = self.compound {
            let (r2, r4) = (s.dev.read_register(w, 2)?, s.dev.read_register(w, 4)?);
            if r2 == total && r4 == total {
                eprintln!("ddperf: compound check: OK (both counters {total})");
            } else {
                eprintln!(
                    "ddperf: warning: compound counters r2 = {r2}, r4 = {r4}, expected {total}"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_wraps_by_its_mask_and_fits_the_region() {
        let p = |s: u64| {
            let mut p = crate::tests::params("ip_bw --loopback");
            p.sizes = vec![s];
            p
        };
        for max in [1, 32, 64, 65, 1000, 4096, 8904, harness::MAX_ONE_MESSAGE] {
            let r = ring(&p(max));
            assert!(r.stride as u64 >= max && r.stride >= 64, "{max}: {r:?}");
            // A power of two: `ptr & (len - 1)` is `ptr mod len` for every slot start.
            assert!(r.len().is_power_of_two(), "{max}: {r:?}");
            assert!(r.len() <= verify::REGION && r.slots <= verify::MAX_SLOTS);
            assert!(verify::stride(max) * r.slots <= r.len());
        }
        assert_eq!(ring(&p(32)).slots, verify::MAX_SLOTS);
        assert_eq!(
            ring(&p(8904)),
            Ring {
                stride: 16384,
                slots: 1024
            }
        );
    }
}
