//! tokens: payload tokens, one-use capabilities to deposit into a buffer
//! (docs/design.md §3, "Payload tokens").
//!
//! ```sh
//! cargo run -p deposit --example tokens
//! ```
//!
//! Node a registers a 64-byte buffer in its payload table (`Device::create_token`)
//! and gets a `Token`, a plain `u64` (table index and a random key). It sends the value
//! to node b inside an ordinary write. b deposits into the buffer with it
//! (`WorkRequest::write_with_token`): b names no address of a's, only the token, and
//! a is told by a token event where and how much landed. The token is used up: a
//! second deposit with it is refused. (Closest in verbs: an rkey that works once,
//! for one buffer.) Two nodes in one process over a ring pair.

use std::time::{Duration, Instant};

use deposit::{Device, DeviceConfig, EventKind, Rights, Token, WcStatus, WorkRequest};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const T: Duration = Duration::from_secs(5);
const SERVICE: u32 = 1;
/// a's buffer the token names, in a's endpoint.
const BUF_OFF: u64 = 2048;
const BUF_LEN: u64 = 64;
/// Where b receives the token's value, in b's endpoint.
const VALUE_OFF: u32 = 0;
/// What b deposits (from its endpoint, at this offset).
const DATA: &[u8] = b"deposited with a token, no address named";
const DATA_OFF: u64 = 1024;

fn main() {
    if let Err(e) = run() {
        eprintln!("tokens: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let start = Instant::now();
    let a = Device::open(DeviceConfig::new("ring:tokens:a", [10, 0, 0, 1]))?;
    let b = Device::open(DeviceConfig::new("ring:tokens:b", [10, 0, 0, 2]))?;

    // Both endpoints take remote writes: a's for the token deposits (a token's
    // buffer must permit them), b's for the token value a sends it.
    let aep = a.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    let bep = b.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    let (acq, bcq) = (a.create_cq(16), b.create_cq(16));
    // One connection; either side posts on its own handle.
    let listener = b.listen(SERVICE, &bep, &bcq)?;
    let a_to_b = a.connect([10, 0, 0, 2], SERVICE, &aep, &acq)?;
    let b_to_a = listener.accept(T)?;

    // a: register the buffer and send the token's value to b in an ordinary write.
    let token = a.create_token(&aep, BUF_OFF, BUF_LEN)?;
    println!(
        "tokens: a registered {BUF_LEN} bytes at offset {BUF_OFF}: token {:#018x}",
        token.0
    );
    a_to_b.post(&WorkRequest::write_inline(1, &token.0.to_le_bytes(), VALUE_OFF)?.signaled())?;
    let wc = acq
        .wait_one(T)
        .ok_or("the token value was never delivered")?;
    if wc.status != WcStatus::Success {
        return Err(format!("sending the token value completed with {wc:?}").into());
    }

    // b: the value is in its memory (the write completed, so it landed).
    let mut value = [0u8; 8];
    bep.read(VALUE_OFF.into(), &mut value)?;
    let got = Token(u64::from_le_bytes(value));
    if got != token || b_to_a.arrivals() != 1 {
        return Err(format!("b holds {got:?}, a sent {token:?}").into());
    }
    // Deposit with it, from b's own memory.
    bep.write(DATA_OFF, DATA)?;
    b_to_a.post(
        &WorkRequest::write_with_token(2, got, &bep, DATA_OFF, DATA.len() as u32).signaled(),
    )?;
    let wc = bcq.wait_one(T).ok_or("the token deposit never completed")?;
    if wc.status != WcStatus::Success {
        return Err(format!("the token deposit completed with {wc:?}").into());
    }

    // a: the token event says where and how much; the bytes are there.
    let ev = aep.events().wait(T).ok_or("a saw no token event")?;
    let EventKind::Token { key_ok: true, .. } = ev.kind else {
        return Err(format!("unexpected event at a: {ev:?}").into());
    };
    let mut buf = vec![0u8; ev.len as usize];
    aep.read(ev.ea, &mut buf)?;
    if (ev.ea, ev.len as usize) != (BUF_OFF, DATA.len()) || buf != DATA {
        return Err(format!("token event {ev:?}, buffer holds {buf:?}").into());
    }
    println!(
        "tokens: b deposited {} bytes with it; a's event: {:?} at offset {} (verified)",
        ev.len, ev.kind, ev.ea
    );

    // The token is used up: the same deposit again is refused, and nothing changes.
    b_to_a.post(&WorkRequest::write_inline_with_token(3, got, b"again")?.signaled())?;
    let wc = bcq
        .wait_one(T)
        .ok_or("the second deposit never completed")?;
    if wc.status == WcStatus::Success {
        return Err("the second deposit with a used token succeeded".into());
    }
    aep.read(BUF_OFF, &mut buf)?;
    if buf != DATA {
        return Err("the refused deposit changed a's buffer".into());
    }
    if let Some(ev) = aep.events().poll() {
        return Err(format!("the refused deposit raised an event at a: {ev:?}").into());
    }
    println!(
        "tokens: a second deposit with the same token was refused: {:?} ({:?}); verified in \
         {:.0?}",
        wc.status,
        wc.remote_reason,
        start.elapsed()
    );
    Ok(())
}
