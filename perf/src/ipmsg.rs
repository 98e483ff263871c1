//! `ip_lat` / `ip_bw`: instruction-pointer messages (docs/design.md §3, "Instruction-pointer
//! messages") on isolated connections.
//!
//! Each side gives its peer an instruction window, a register window and isolation:
//! the peer's messages name nothing of this side but instruction pointers, and carry
//! data. The registers are named only by the instructions (no sender rights on any):
//!
//! ```text
//! r0  the control area's offset          r2  the ring's stride (a power of two)
//! r1  the ring pointer (ip_bw server)    r3  the ring's length less 1 (its mask)
//! ```
//!
//! and the window holds two entry points:
//!
//! * slot 0, **control**: a WRITE indexed on r0, its operand (the offset within the
//!   control area) from the message. The parameter exchange travels this way (see
//!   [`crate::exchange`]: a plain write is refused on an isolated connection), and it
//!   reaches nothing before the control area: the receive and send regions are the
//!   test's alone. Its pointer is [`CONTROL_IP`] by convention, since nothing can be
//!   exchanged before it.
//! * slot 1, **the message** (its pointer travels as an opaque value: the client's in
//!   its parameter block, the server's in its answer, see
//!   [`crate::exchange::send_answer`]):
//!   * ip_lat, both sides: a WRITE at offset 0, every operand the instruction's. The
//!     loops are write_lat's ([`crate::lat::ping`] / [`crate::lat::answer`] with
//!     [`Path::Invoke`]): the same bytes land in the same place, only the message names
//!     the peer's instruction instead of the address, so the two compare directly.
//!   * ip_bw, server only: ip_lat's WRITE at offset 0, where write_bw's writes land too,
//!     so the two compare directly. With `--verify`, as write_bw then writes into
//!     slots, the instruction is a WRITE at the ring pointer r1 with post-increment (by
//!     r2) and `r1 &= r3`, one compound operation: the server, not the sender, decides
//!     where each message lands, and message `g` of the run (0-based) lands in ring
//!     slot `g mod K` of the receive region. The ring is [`ring`]: the largest size
//!     rounded up to a power of two (64 at least) per slot, `K` slots in at most
//!     [`verify::REGION`] (at most [`verify::MAX_SLOTS`]). The ring adds a compound
//!     operation per message (in the transport's `fastpath` bench an invoke of it
//!     costs about 1.7 times one of the plain WRITE), which is why it is not the timed
//!     default.
//!     The client streams like write_bw ([`crate::stream`]); the server is passive
//!     ([`harness::passive_rounds`]) and prints the client's numbers, like write_bw's.
//!
//! Sizes are one message: at most the segment size (`-a`
//! skips larger ones, `-s` refuses them).
//!
//! `--verify`: ip_lat checks every ping and pong as write_lat does. ip_bw sends message
//! `g` from send slot `g mod K` (stamped `g + 1`, bodies written before each round) and
//! caps its depth at `K`; after each round the server checks every ring slot the
//! round used ([`verify::check_ring`]) and sends the client a verdict.

use deposit::{
    ConnOptions, Device, InstrPtr, Instruction, Operands, RegOp, RegWindow, Registers, Src,
    WorkRequest,
};

use crate::error::{PerfError, Result};
use crate::exchange::{self, Layout};
use crate::harness::{self, Side, Spec};
use crate::lat::{self, Path};
use crate::report::Reporter;
use crate::setup;
use crate::stream::Stream;
use crate::verify::{self, Ring};
use crate::{Params, Test};

/// The control instruction's pointer, on every side (see the module doc).
pub const CONTROL_IP: InstrPtr = InstrPtr(CONTROL_SLOT);
const CONTROL_SLOT: u32 = 0;
/// Where the message instruction sits (its pointer is handed over, not assumed).
const MESSAGE_SLOT: u32 = 1;
/// Register names (see the module doc); the ring's stride is `RING_PTR + 1`, as
/// post-increment wants.
const CTRL_BASE: u8 = 0;
const RING_PTR: u8 = 1;
const RING_MASK: u8 = 3;
const REGISTERS: u32 = 4;
/// Marks an offer as an instruction pointer (an offer of 0 is none).
const IP_OFFER: u64 = 1 << 63;

/// Runs ip_lat in this process's role.
pub fn run_lat(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: Layout::for_max_size(harness::one_message_max(p)),
            serve,
            dial,
            server: lat_server,
            client: lat_client,
            server_prints: false,
        },
    )
}

/// Runs ip_bw in this process's role.
pub fn run_bw(p: &Params) -> Result<()> {
    let max = harness::one_message_max(p);
    let lay = if p.verify {
        Layout::verified(max, ring(p).len())
    } else {
        Layout::for_max_size(max)
    };
    harness::run(
        p,
        Spec {
            lay,
            serve,
            dial,
            server: bw_server,
            client: bw_client,
            server_prints: true,
        },
    )
}

/// ip_bw's ring under `--verify` (see the module doc).
pub fn ring(p: &Params) -> Ring {
    ring_for(harness::one_message_max(p))
}

/// The ring for messages of up to `max` bytes.
fn ring_for(max: u64) -> Ring {
    let stride = max.max(64).next_power_of_two() as usize;
    Ring {
        stride,
        slots: (verify::REGION / stride).clamp(1, verify::MAX_SLOTS),
    }
}

/// The value that hands `ip` to the peer.
fn offer(ip: InstrPtr) -> u64 {
    IP_OFFER | u64::from(ip.0)
}

/// The instruction pointer the peer handed over in `offer`.
fn offered_ip(offer: u64, who: &str) -> Result<InstrPtr> {
    match offer.checked_sub(IP_OFFER).map(u32::try_from) {
        Some(Ok(ip)) => Ok(InstrPtr(ip)),
        _ => Err(PerfError::Failed(format!(
            "the {who} offered {offer:#x}, not an instruction pointer (does it run the same ddperf test?)"
        ))),
    }
}

/// The sizes of the run: one message each.
fn sizes(side: &Side, p: &Params) -> Result<Vec<(usize, u64)>> {
    // The messages name no register of the receiver: the data alone fills them.
    let max = u64::from(side.s.dev.segment_max());
    if max < exchange::CONTROL_MAX as u64 {
        return Err(PerfError::Usage(format!(
            "a message carries at most {max} B of data on this port; \
             the ip tests need {} B (their parameter exchange is instruction-pointer messages too): \
             raise --max-frame",
            exchange::CONTROL_MAX
        )));
    }
    let max = max.min(harness::MAX_ONE_MESSAGE);
    harness::one_message_sizes(p, max, "an instruction-pointer message is one message")
}

/// The message instruction of ip_lat (and ip_bw): a WRITE at offset 0, every operand
/// its own.
fn write_at_zero() -> Result<Instruction> {
    Ok(Instruction::write(0))
}

/// The message instruction of ip_bw's server under `--verify`: a WRITE at the ring
/// pointer, which it post-increments and wraps (see the module doc).
fn write_at_ring() -> Result<Instruction> {
    Ok(Instruction::write(0).post_increment(RING_PTR).op1(
        RegOp::And,
        RING_PTR,
        Src::Reg(RING_MASK),
    ))
}

/// The control instruction: a WRITE at r0 plus the message's operand.
fn control() -> Result<Instruction> {
    Ok(Instruction::write(0)
        .indexed(CTRL_BASE, 0)
        .from_message(Operands::OPERAND))
}

/// Sets up what this side gives its peer: registers, instructions, isolation. Returns
/// the connection options, the registers and the message's entry point (none for
/// ip_bw's client, which only receives control writes).
fn program(
    dev: &Device,
    p: &Params,
    lay: &Layout,
    server: bool,
) -> Result<(ConnOptions, RegWindow, Option<InstrPtr>)> {
    let regs = dev.alloc_registers(REGISTERS)?;
    dev.write_register(regs, u32::from(CTRL_BASE), lay.ctrl as u64)?;
    let code = dev.alloc_instructions(2)?;
    if dev.program(code, CONTROL_SLOT, &[control()?])? != CONTROL_IP {
        return Err(PerfError::Failed(
            "the control instruction is not where peers invoke it".into(),
        ));
    }
    let message = match (p.test, server) {
        (Test::IpLat, _) => Some(write_at_zero()?),
        (Test::IpBw, true) if !p.verify => Some(write_at_zero()?),
        (Test::IpBw, true) => {
            let ring = ring(p);
            let r = |name: u8| u32::from(name);
            dev.write_register(regs, r(RING_PTR), 0)?;
            dev.write_register(regs, r(RING_PTR) + 1, ring.stride as u64)?;
            dev.write_register(regs, r(RING_MASK), ring.len() as u64 - 1)?;
            Some(write_at_ring()?)
        }
        _ => None,
    };
    let ip = match message {
        Some(m) => Some(dev.program(code, MESSAGE_SLOT, &[m])?),
        None => None,
    };
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        instructions: Some(code),
        isolated: true,
        ..ConnOptions::default()
    };
    Ok((opts, regs, ip))
}

fn serve(dev: Device, p: &Params, lay: Layout, ready: Box<dyn FnOnce() + Send>) -> Result<Side> {
    let (opts, regs, ip) = program(&dev, p, &lay, true)?;
    let (s, more) = setup::serve_with(dev, p, lay, &opts, |_| Ok(()), ready, 1)?;
    Ok(Side {
        s,
        more,
        regs: Some(regs),
        ip,
    })
}

fn dial(dev: Device, p: &Params, lay: Layout, peer: [u8; 4]) -> Result<Side> {
    let (opts, regs, ip) = program(&dev, p, &lay, false)?;
    let (s, more) = setup::dial_with(dev, p, lay, peer, &opts, 1)?;
    Ok(Side {
        s,
        more,
        regs: Some(regs),
        ip,
    })
}

/// This side's entry point, as offered to the peer (0: none).
fn own_offer(side: &Side) -> u64 {
    side.ip.map_or(0, offer)
}

fn lat_client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::send_hello_offering(&s.dev, &s.conn, &s.ep, &s.lay, p, own_offer(side))?;
    let theirs = exchange::wait_answer(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let ip = offered_ip(theirs, "server")?;
    lat::ping(s, p, rep, Path::Invoke(ip), &sizes)
}

fn lat_server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    let ip = offered_ip(exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?, "client")?;
    // Before the answer, which lets the client start.
    let base = s.conn.arrivals();
    exchange::send_answer(&s.dev, &s.conn, &s.lay, p, own_offer(side))?;
    let n = lat::answer(s, p, rep.outcome(), Path::Invoke(ip), base, &sizes)?;
    if p.role == crate::Role::Server {
        eprintln!("ddperf: server done: {n} invokes answered");
    }
    Ok(())
}

fn bw_client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let ip = offered_ip(
        exchange::wait_answer(&s.dev, &s.conn, &s.ep, &s.lay, p)?,
        "server",
    )?;
    let k = ring(p).slots;
    let mut before = 0u64; // messages of the earlier rounds
    for (i, &(round, size)) in sizes.iter().enumerate() {
        let req = WorkRequest::invoke_from(0, ip, 0, &s.ep, s.lay.send as u64, size as u32);
        if p.verify {
            verify::fill_slots(&s.ep, s.lay.send, size, k, verify::kind::IP_BW, round)?;
        }
        let stats = Stream {
            size,
            req,
            // --verify: a send slot is restamped only once its message completed.
            depth_cap: p.verify.then_some(k as u64),
            laps: None,
            prepare: |id, _conn, req: &mut WorkRequest| {
                if !p.verify {
                    return Ok(());
                }
                let g = before + id - 1;
                let from = s.lay.send + (g % k as u64) as usize * verify::stride(size);
                verify::put_stamp(&s.ep, from, size as usize, &verify::stamp(round, g + 1))?;
                *req = WorkRequest::invoke_from(0, ip, 0, &s.ep, from as u64, size as u32);
                Ok(())
            },
        }
        .run(s, p)?;
        before += stats.iterations;
        let end = exchange::RoundEnd::new(stats.iterations, stats.elapsed, stats.peak_rate);
        exchange::send_round_end(&s.dev, &s.conn, &s.ep, &s.lay, p, round, &end)?;
        exchange::take_verdict(s, p, round, i + 1 == sizes.len(), rep)?;
        rep.bw(&stats);
    }
    Ok(())
}

fn bw_server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    // Before the answer, which lets the client start.
    let base = s.conn.arrivals();
    exchange::send_answer(&s.dev, &s.conn, &s.lay, p, own_offer(side))?;
    let ring = ring(p);
    let mut before = 0u64; // messages of the earlier rounds
    let mut region = Vec::new();
    harness::passive_rounds(side, p, rep, &sizes, base, &mut |round, size, end| {
        let msgs = before..before + end.count;
        before = msgs.end;
        if !p.verify {
            return Ok(None);
        }
        verify::read_region(&s.ep, 0, ring.len(), &mut region)?;
        let mut o = verify::Outcome::default();
        verify::check_ring(
            &region,
            ring,
            size,
            msgs,
            verify::kind::IP_BW,
            round,
            &mut o,
        );
        Ok(Some(o))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_wraps_by_its_mask_and_fits_the_region() {
        for max in [1, 32, 64, 65, 1000, 4096, 8904, harness::MAX_ONE_MESSAGE] {
            let r = ring_for(max);
            assert!(r.stride as u64 >= max && r.stride >= 64, "{max}: {r:?}");
            // A power of two: `ptr & (len - 1)` is `ptr mod len` for every slot start.
            assert!(r.len().is_power_of_two(), "{max}: {r:?}");
            assert!(r.len() <= verify::REGION && r.slots <= verify::MAX_SLOTS);
            // Sources of --verify (stride(size) apart) fit the send region as well.
            assert!(verify::stride(max) * r.slots <= r.len());
        }
        assert_eq!(ring_for(32).slots, verify::MAX_SLOTS);
        assert_eq!(
            ring_for(8904),
            Ring {
                stride: 16384,
                slots: 1024
            }
        );
    }

    #[test]
    fn an_offer_round_trips_and_nothing_else_passes_for_one() {
        for ip in [InstrPtr(0), InstrPtr(1), InstrPtr(u32::MAX)] {
            assert_eq!(offered_ip(offer(ip), "peer").unwrap(), ip);
        }
        // No offer, a token-sized value, a pointer without the mark.
        assert!(offered_ip(0, "peer").is_err());
        assert!(offered_ip(u64::MAX, "peer").is_err());
        assert!(offered_ip(1, "peer").is_err());
    }
}
