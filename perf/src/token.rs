//! `token_lat`: a ping-pong of payload-token deposits (docs/design.md §3, "Payload tokens").
//!
//! One iteration: the client deposits `size` bytes (counter in the last byte, as
//! write_lat's ping) with the server's latest token (`WorkRequest::write_with_token`);
//! the token names the server's receive region, so the bytes land at offset 0. The
//! server learns of the deposit from its endpoint's event queue (`EventKind::Token`,
//! checked: that token, key accepted, `size` bytes at 0), creates a fresh token for the
//! same region (`Device::create_token`: a table entry and a key from the OS random
//! source) and writes it into the client's endpoint at offset 0 with an ordinary
//! 16-byte inline write ([`reply`]: the token, then the counter in the last byte),
//! where the client spins on the counter. So the client's round trip, reported as
//! RTT/2 like write_lat, is a deposit with a token plus a fresh token coming back;
//! every token is used once. The first token travels in the server's answer to the
//! parameter block ([`crate::exchange::send_answer`]); the last one is cancelled at the
//! end.
//!
//! The loops are write_lat's ([`crate::lat::ping`] / [`crate::lat::answer`] with
//! [`Path::Token`]); sizes are one message (the token takes 8 bytes of it). `--verify`
//! checks every deposit on the server before it answers, as write_lat's pings.

use deposit::{Endpoint, Event, EventKind, Token, WorkRequest};

use crate::error::{PerfError, Result};
use crate::exchange::{self, Layout};
use crate::harness::{self, Side, Spec};
use crate::lat::{self, Path};
use crate::report::Reporter;
use crate::setup::Session;
use crate::Params;

/// Bytes of the server's reply: the token (u64, little endian), 7 spare bytes, the
/// counter.
pub const PONG_LEN: usize = 16;

/// Bytes a token deposit adds to its data (one message holds both).
const TOKEN_LEN: u64 = 8;

/// Runs token_lat in this process's role.
pub fn run(p: &Params) -> Result<()> {
    harness::run(
        p,
        Spec {
            lay: Layout::for_max_size(harness::one_message_max(p)),
            serve: harness::serve_plain,
            dial: harness::dial_plain,
            server,
            client,
            server_prints: false,
        },
    )
}

/// The sizes of the run: one message each.
fn sizes(side: &Side, p: &Params) -> Result<Vec<(usize, u64)>> {
    let max = u64::from(side.s.dev.segment_max())
        .saturating_sub(TOKEN_LEN)
        .min(harness::MAX_ONE_MESSAGE);
    harness::one_message_sizes(p, max, "a deposit with a token is one message")
}

fn client(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::send_hello(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    let first = exchange::wait_answer(&s.dev, &s.conn, &s.ep, &s.lay, p)?;
    lat::ping(s, p, rep, Path::Token(Token(first)), &sizes)
}

fn server(side: &Side, p: &Params, rep: &mut Reporter) -> Result<()> {
    let s = &side.s;
    let sizes = sizes(side, p)?;
    exchange::wait_hello(&s.dev, &s.ep, &s.lay, p)?;
    // Before the answer, which lets the client start.
    let base = s.conn.arrivals();
    let first = fresh(s)?;
    exchange::send_answer(&s.dev, &s.conn, &s.lay, p, first.0)?;
    let n = lat::answer(s, p, rep.outcome(), Path::Token(first), base, &sizes)?;
    if p.role == crate::Role::Server {
        eprintln!("ddperf: server done: {n} deposits answered with a fresh token");
    }
    Ok(())
}

/// Server: a token for its receive region (offset 0 up to the send region).
pub fn fresh(s: &Session) -> Result<Token> {
    Ok(s.dev.create_token(&s.ep, 0, s.lay.send as u64)?)
}

/// Server: the reply carrying `token` to the client, `counter` in its last byte.
pub fn reply(token: Token, counter: u8) -> Result<WorkRequest> {
    Ok(WorkRequest::write_inline(
        0,
        &pong_bytes(token, counter),
        0,
    )?)
}

fn pong_bytes(token: Token, counter: u8) -> [u8; PONG_LEN] {
    let mut b = [0u8; PONG_LEN];
    b[..8].copy_from_slice(&token.0.to_le_bytes());
    b[PONG_LEN - 1] = counter;
    b
}

/// Client: the token of the reply that arrived (its counter seen).
pub fn read_reply(ep: &Endpoint) -> Result<Token> {
    let mut b = [0u8; 8];
    ep.read(0, &mut b)?;
    Ok(Token(u64::from_le_bytes(b)))
}

/// Server: checks the event of a deposit expected with `token`, `size` bytes at 0.
pub fn check_event(ev: &Event, token: Token, size: u64) -> Result<()> {
    let ok = matches!(
        ev.kind,
        EventKind::Token { index, key_ok: true } if index == token.index()
    ) && ev.ea == 0
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
        // Another token, a refused key, a short deposit, another place.
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
