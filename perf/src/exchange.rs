//! What the two sides of a write test tell each other, through endpoint memory only
//! (docs/design.md §7: no side channel): the endpoint layout, the client's parameter block,
//! and one end-of-round marker per size.
//!
//! ```text
//! endpoint:  0          S            2S          2S+64             C               C+64
//!            | receive  |  send      | parameter  | round markers ... | credit word | queue ...
//!            | (peer    |  (source   | block      | (32 bytes each,   | (64 bytes)  | (send_* /
//!            |  writes) |   of ours) | (64 bytes) |  64 of them)      |             |  append_bw)
//! S = max(largest size, 64) rounded up to 64;  C = 2S + 64 + 32*64
//! ```
//!
//! * The **receive** region at offset 0 is where the peer's benchmark writes land (the
//!   spec of the tests: "write into the peer's endpoint at offset 0"); the **send**
//!   region is the local source of our writes. They are apart so a latency test can
//!   spin on the last byte it receives while the last byte it sends holds its own
//!   counter. The brief's endpoint of `max(size, 64)` bytes therefore doubles, plus
//!   the control area.
//! * The **parameter block** is written once by the client, right after connecting;
//!   the server checks it against its own options, so mismatched options fail with a
//!   clear message instead of a hang. Its last byte is [`READY`].
//! * A **round marker** ends round `r` (one size): the client writes it after its last
//!   data write of the round. It carries the client's count of writes (the server
//!   cannot know it with `-D`), the elapsed time and the peak rate, so that a bandwidth
//!   server prints the same table. Its last byte is `r + 1`.
//!
//! * The **credit word** (8 bytes, native order) is written by the server into the
//!   client's endpoint when the client must wait for it: send_bw after every lap of its
//!   receive queue, append_bw before every round (see [`send_credit`]). The rest of its
//!   64 bytes holds `--verify`'s verdicts ([`send_verdict`]) and the server's
//!   **answer** ([`send_answer`]).
//! * **Offers** are the opaque values a test hands its peer before the first round: the
//!   client's rides in its parameter block ([`send_hello_offering`]), the server's in
//!   its answer, written once after it took the block. ip_lat offers each side's entry
//!   point, ip_bw the server's, token_lat the server's first payload token.
//! * The **queue** (send_lat, send_bw, append_bw only; empty otherwise) is the
//!   receive queue that post-increment sends land in: `slots` slots of `stride` bytes.
//!
//! Version 2 of the parameter block added the atomic operation (`-A`), the number of
//! connections (`-q`) and write_bw's `--compound` flag; version 3 the client's offer.
//!
//! On isolated connections (`Test::isolated`: ip_lat, ip_bw) a plain write is refused,
//! so every control write here is an invoke of the peer's control instruction instead
//! ([`crate::ipmsg::CONTROL_IP`], which writes at the offset the message names within
//! the peer's control area): same bytes, same places.
//!
//! Both rely on the transport's promise that a deposit stores its last byte last
//! (docs/design.md §11): once the last byte is seen, the whole block is there. Markers and
//! data travel on one in-order connection, so a marker also means "everything of the
//! round has arrived"; the server checks that against [`deposit::Connection::arrivals`].
//!
//! Nothing here runs inside a measured loop.

use std::time::Duration;

use deposit::{CompletionQueue, Connection, Device, Endpoint, WorkRequest};

use crate::error::{PerfError, Result, Wait};
use crate::{Params, Span, Test};

/// Bytes of the parameter block.
const HELLO_LEN: usize = 64;
/// Bytes of the largest control write (the parameter block): on an isolated
/// connection one message must carry it.
pub const CONTROL_MAX: usize = HELLO_LEN;
/// Bytes of one round marker.
const MARKER_LEN: usize = 32;
/// Most rounds (sizes) of one run.
pub const MAX_ROUNDS: usize = 64;
/// Last byte of a complete parameter block.
const READY: u8 = 0xA5;
const MAGIC: &[u8; 4] = b"DDPF";
const VERSION: u8 = 3;
/// Work request ids of control writes (benchmark writes count from 1).
const HELLO_WR: u64 = u64::MAX - 1;
const MARKER_WR: u64 = u64::MAX - 2;
/// Work request id of a credit write (server to client).
const CREDIT_WR: u64 = u64::MAX - 3;
/// Bytes reserved for the credit word.
const CREDIT_LEN: usize = 64;
/// Work request id of a verdict write (server to client).
const VERDICT_WR: u64 = u64::MAX - 4;
/// Where a verdict lands, from the credit word: items, bytes, bad (u64 each), then
/// 7 spare bytes and the flag byte (round + 1), 32 bytes in all.
const VERDICT_AT: usize = 16;
const VERDICT_LEN: usize = 32;
/// Work request id of the server's answer.
const ANSWER_WR: u64 = u64::MAX - 5;
/// Where the answer lands, from the credit word: the offer (u64, little endian), 7
/// spare bytes, then [`READY`].
const ANSWER_AT: usize = 48;
const ANSWER_LEN: usize = 16;
/// Where the client's offer lies in the parameter block.
const OFFER_AT: usize = 40;

/// Offsets in a test endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Start of the send region (the receive region starts at 0).
    pub send: usize,
    /// Start of the control area (parameter block, then round markers).
    pub ctrl: usize,
    /// The credit word (see the module doc).
    pub credit: usize,
    /// Start of the receive queue of post-increment sends.
    pub queue: usize,
    /// Slots of the queue (0: no queue).
    pub slots: usize,
    /// Bytes per queue slot (a multiple of 64).
    pub stride: usize,
    /// Endpoint length.
    pub len: usize,
}

impl Layout {
    /// The layout for sizes up to `max_size`.
    pub fn for_max_size(max_size: u64) -> Layout {
        Layout::with_queue(max_size, 0)
    }

    /// The layout for sizes up to `max_size` with a queue of `slots` slots, each the
    /// largest size rounded up to 64 bytes.
    pub fn with_queue(max_size: u64, slots: usize) -> Layout {
        Layout::with_region(max_size, slots, 0)
    }

    /// [`Layout::for_max_size`] with receive and send regions of at least `region`
    /// bytes each (the slot regions of `--verify`, see [`crate::verify`]).
    pub fn verified(max_size: u64, region: usize) -> Layout {
        Layout::with_region(max_size, 0, region)
    }

    fn with_region(max_size: u64, slots: usize, region: usize) -> Layout {
        let region = (max_size.max(64) as usize).max(region).next_multiple_of(64);
        let ctrl = 2 * region;
        let credit = ctrl + HELLO_LEN + MARKER_LEN * MAX_ROUNDS;
        let queue = credit + CREDIT_LEN;
        let stride = (max_size.max(1) as usize).next_multiple_of(64);
        Layout {
            send: region,
            ctrl,
            credit,
            queue,
            slots,
            stride,
            len: queue + slots * stride,
        }
    }

    /// Offset of queue slot `i`.
    pub fn slot(&self, i: usize) -> usize {
        self.queue + i * self.stride
    }
    fn marker(&self, round: usize) -> usize {
        self.ctrl + HELLO_LEN + MARKER_LEN * round
    }
}

/// The client's options the server must share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    test: u8,
    all: bool,
    duration_ms: u64,
    iters: u64,
    size: u64,
    atomic: u8,
    qps: u32,
    compound: bool,
    verify: bool,
}

impl Hello {
    fn of(p: &Params) -> Hello {
        let (iters, duration_ms) = match p.span {
            Span::Iters(n) => (n, 0),
            Span::Duration(d) => (0, d.as_millis() as u64),
        };
        Hello {
            test: p.test.code(),
            all: p.all,
            duration_ms,
            iters,
            size: p.max_size(),
            atomic: p.atomic.code(),
            qps: p.qps,
            compound: p.compound,
            verify: p.verify,
        }
    }

    /// The block, carrying the client's `offer` too.
    fn emit(&self, offer: u64) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = self.test;
        b[6] = self.all as u8;
        b[8..16].copy_from_slice(&self.iters.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.duration_ms.to_le_bytes());
        b[32] = self.atomic;
        b[33] = self.compound as u8;
        b[34] = self.verify as u8;
        b[36..40].copy_from_slice(&self.qps.to_le_bytes());
        b[OFFER_AT..OFFER_AT + 8].copy_from_slice(&offer.to_le_bytes());
        b[HELLO_LEN - 1] = READY;
        b
    }

    fn parse(b: &[u8; HELLO_LEN]) -> Result<Hello> {
        if &b[0..4] != MAGIC || b[4] != VERSION {
            return Err(PerfError::Failed(format!(
                "the client's parameter block is not ddperf's version {VERSION} (magic {:02x?}, version {})",
                &b[0..4],
                b[4]
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Hello {
            test: b[5],
            all: b[6] != 0,
            iters: u64_at(8),
            size: u64_at(16),
            duration_ms: u64_at(24),
            atomic: b[32],
            compound: b[33] != 0,
            verify: b[34] != 0,
            qps: u32::from_le_bytes(b[36..40].try_into().expect("4 bytes")),
        })
    }

    fn describe(&self) -> String {
        let test = Test::from_code(self.test)
            .map(Test::name)
            .unwrap_or("an unknown test");
        let sizes = if self.all {
            "-a".to_string()
        } else {
            format!("-s {}", self.size)
        };
        let span = if self.duration_ms > 0 {
            format!("-D {}", self.duration_ms as f64 / 1000.0)
        } else {
            format!("-n {}", self.iters)
        };
        let mut extra = String::new();
        if matches!(
            Test::from_code(self.test),
            Some(Test::AtomicLat | Test::AtomicBw)
        ) {
            let a = if self.atomic == 0 {
                "FETCH_AND_ADD"
            } else {
                "CMP_AND_SWAP"
            };
            extra.push_str(&format!(" -A {a}"));
        }
        if self.qps != 1 {
            extra.push_str(&format!(" -q {}", self.qps));
        }
        if self.compound {
            extra.push_str(" --compound");
        }
        if self.verify {
            extra.push_str(" --verify");
        }
        format!("{test} {sizes} {span}{extra}")
    }
}

/// What the client reports at the end of a round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundEnd {
    /// Benchmark writes the client posted in the round.
    pub count: u64,
    /// Client-measured time of the round.
    pub elapsed: Duration,
    /// Client-measured peak rate, messages per second (0 for latency tests).
    pub peak_rate: f64,
    /// `--verify` of read_* / atomic_*: what the client's checks of the round found
    /// (items, bad), for the passive server's report.
    pub verdict: Option<(u32, u32)>,
}

impl RoundEnd {
    /// A round end without a verdict.
    pub fn new(count: u64, elapsed: Duration, peak_rate: f64) -> RoundEnd {
        RoundEnd {
            count,
            elapsed,
            peak_rate,
            verdict: None,
        }
    }
}

/// Waits for one completion of a control write and checks it.
fn wait_control(
    dev: &Device,
    cq: &CompletionQueue,
    wr_id: u64,
    p: &Params,
    what: &'static str,
) -> Result<()> {
    let mut wait = Wait::new(p.timeout, what);
    let mut wcs = [crate::setup::EMPTY_WC; 16];
    loop {
        let n = cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                let st = dev.stats();
                return Err(PerfError::Failed(format!(
                    "control write {} failed with {:?} (do both sides run the same test with the same -s/-a?); \
                     device: {} retransmits, {} timeouts, {} NAKs in, drops {:?}",
                    wc.wr_id, wc.status, st.retransmits, st.timeouts, st.naks_rx,
                    st.drops().collect::<Vec<_>>()
                )));
            }
            if wc.wr_id == wr_id {
                return Ok(());
            }
        }
        if n == 0 {
            dev.progress();
        }
        wait.tick()?;
    }
}

/// What a control write carries: `len` bytes of the local endpoint at the destination
/// offset, or up to 32 bytes inline.
#[derive(Clone, Copy)]
enum Body<'a> {
    Local(&'a Endpoint, usize),
    Inline(&'a [u8]),
}

/// One control write: its request id, the offset it lands at in the peer's endpoint
/// (at or after the control area) and what it carries.
struct Control<'a> {
    wr_id: u64,
    at: usize,
    body: Body<'a>,
}

/// The signaled request of a control write: a plain write, or on isolated connections
/// an invoke of the peer's control instruction with the offset within its control area
/// as the operand.
fn control_request(p: &Params, lay: &Layout, c: &Control<'_>) -> Result<WorkRequest> {
    let (id, at) = (c.wr_id, c.at);
    let req = if p.test.isolated() {
        let (ip, off) = (crate::ipmsg::CONTROL_IP, (at - lay.ctrl) as u32);
        match c.body {
            Body::Local(ep, len) => {
                WorkRequest::invoke_from(id, ip, off, ep, at as u64, len as u32)
            }
            Body::Inline(data) => WorkRequest::invoke(id, ip, off, data)?,
        }
    } else {
        match c.body {
            Body::Local(ep, len) => WorkRequest::write(id, ep, at as u64, len as u32, at as u32),
            Body::Inline(data) => WorkRequest::write_inline(id, data, at as u32)?,
        }
    };
    Ok(req.signaled())
}

/// Posts a control write and waits for its completion.
fn send_control(
    dev: &Device,
    conn: &Connection,
    lay: &Layout,
    p: &Params,
    c: Control<'_>,
    what: &'static str,
) -> Result<()> {
    conn.post(&control_request(p, lay, &c)?)?;
    wait_control(dev, conn.cq(), c.wr_id, p, what)
}

/// Client: writes the parameter block into the server's endpoint and waits for it to
/// complete (a refusal means the server's endpoint is laid out for other sizes).
pub fn send_hello(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
) -> Result<()> {
    send_hello_offering(dev, conn, ep, lay, p, 0)
}

/// Work requests of the client that arrive before its first round when nothing
/// separates them (write_bw, read_bw, atomic_bw): the parameter block, one write. A
/// server counts the round's arrivals from it, not from a reading of its counters taken
/// after the block came: with a dedicated worker (or several shards), the round's
/// first writes may land before that reading.
pub const HELLO_ARRIVALS: u64 = 1;

/// [`send_hello`] with the client's offer to the server (see the module doc).
pub fn send_hello_offering(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
    offer: u64,
) -> Result<()> {
    ep.write(lay.ctrl as u64, &Hello::of(p).emit(offer))?;
    let c = Control {
        wr_id: HELLO_WR,
        at: lay.ctrl,
        body: Body::Local(ep, HELLO_LEN),
    };
    send_control(
        dev,
        conn,
        lay,
        p,
        c,
        "the server to take the parameter block",
    )
}

/// Server: waits for the client's parameter block and checks it against our options.
/// Returns the client's offer (0 when it made none).
pub fn wait_hello(dev: &Device, ep: &Endpoint, lay: &Layout, p: &Params) -> Result<u64> {
    let mut wait = Wait::new(
        p.timeout,
        "the client's parameter block (do both sides run the same test with the same -s/-a?)",
    );
    while ep.load_u8((lay.ctrl + HELLO_LEN - 1) as u64)? != READY {
        dev.progress();
        wait.tick()?;
    }
    let mut b = [0u8; HELLO_LEN];
    ep.read(lay.ctrl as u64, &mut b)?;
    let theirs = Hello::parse(&b)?;
    let ours = Hello::of(p);
    if theirs != ours {
        return Err(PerfError::Failed(format!(
            "the client runs `{}` but this server `{}`: give both sides the same options",
            theirs.describe(),
            ours.describe()
        )));
    }
    Ok(offer_of(&b))
}

/// The client's offer in a parameter block.
fn offer_of(b: &[u8; HELLO_LEN]) -> u64 {
    u64::from_le_bytes(b[OFFER_AT..OFFER_AT + 8].try_into().expect("8 bytes"))
}

/// Server: answers the parameter block with its own offer (written into the client's
/// credit area, flag byte last) and waits for the write to complete.
pub fn send_answer(
    dev: &Device,
    conn: &Connection,
    lay: &Layout,
    p: &Params,
    offer: u64,
) -> Result<()> {
    let mut b = [0u8; ANSWER_LEN];
    b[..8].copy_from_slice(&offer.to_le_bytes());
    b[ANSWER_LEN - 1] = READY;
    let at = lay.credit + ANSWER_AT;
    let c = Control {
        wr_id: ANSWER_WR,
        at,
        body: Body::Inline(&b),
    };
    send_control(dev, conn, lay, p, c, "the answer to the client to complete")
}

/// Client: waits for the server's answer to its parameter block; returns the server's
/// offer.
pub fn wait_answer(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
) -> Result<u64> {
    let at = lay.credit + ANSWER_AT;
    let mut wait = Wait::new(p.timeout, "the server's answer to the parameter block");
    while ep.load_u8((at + ANSWER_LEN - 1) as u64)? != READY {
        dev.progress();
        if wait.tick()? {
            crate::lat::check_open(conn)?;
        }
    }
    let mut b = [0u8; 8];
    ep.read(at as u64, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Client: ends round `round` and waits for the marker's completion (which also
/// means every earlier write of the round completed: completions are in order).
pub fn send_round_end(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
    round: usize,
    end: &RoundEnd,
) -> Result<()> {
    let at = lay.marker(round);
    let mut b = [0u8; MARKER_LEN];
    b[0..8].copy_from_slice(&end.count.to_le_bytes());
    b[8..16].copy_from_slice(&(end.elapsed.as_nanos() as u64).to_le_bytes());
    b[16..24].copy_from_slice(&end.peak_rate.to_bits().to_le_bytes());
    if let Some((items, bad)) = end.verdict {
        b[24..28].copy_from_slice(&items.to_le_bytes());
        b[28..30].copy_from_slice(&(bad.min(u16::MAX as u32) as u16).to_le_bytes());
        b[30] = 1;
    }
    b[MARKER_LEN - 1] = round as u8 + 1;
    ep.write(at as u64, &b)?;
    let c = Control {
        wr_id: MARKER_WR,
        at,
        body: Body::Local(ep, MARKER_LEN),
    };
    send_control(dev, conn, lay, p, c, "the end-of-round marker to complete")
}

/// Server: the byte to poll for the end of `round` and the value it will take.
pub fn round_end_flag(lay: &Layout, round: usize) -> (usize, u8) {
    (lay.marker(round) + MARKER_LEN - 1, round as u8 + 1)
}

/// Server: reads the marker of `round` once [`round_end_flag`] has shown it, and waits
/// until every write it announces has arrived: `arrivals_before` is the connection's
/// arrival count (work requests) at the start of the round. Returns the marker and the
/// arrival count at the start of the next round (the client may already be sending
/// it, so the caller must not read the counter instead).
pub fn read_round_end(
    dev: &Device,
    conn: &Connection,
    lay: &Layout,
    p: &Params,
    round: usize,
    arrivals_before: u64,
) -> Result<(RoundEnd, u64)> {
    read_round_end_with(dev, conn.endpoint(), lay, p, round, arrivals_before, || {
        conn.arrivals()
    })
}

/// [`read_round_end`] with the arrival count of several connections (append_bw: the
/// sum over every connection into the endpoint).
pub fn read_round_end_with(
    dev: &Device,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
    round: usize,
    arrivals_before: u64,
    arrivals: impl Fn() -> u64,
) -> Result<(RoundEnd, u64)> {
    let mut b = [0u8; MARKER_LEN];
    ep.read(lay.marker(round) as u64, &mut b)?;
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let end = RoundEnd {
        count: u64_at(0),
        elapsed: Duration::from_nanos(u64_at(8)),
        peak_rate: f64::from_bits(u64_at(16)),
        verdict: (b[30] == 1).then(|| {
            (
                u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
                u32::from(u16::from_le_bytes(b[28..30].try_into().expect("2 bytes"))),
            )
        }),
    };
    // The arrival counter moves after the frame holding the marker is executed.
    let expect = arrivals_before + end.count + 1;
    let mut wait = Wait::new(
        p.timeout,
        "the arrival count to include the end-of-round marker",
    );
    while arrivals() < expect {
        dev.progress();
        wait.tick()?;
    }
    Ok((end, expect))
}

/// Server: writes `value` into the client's credit word (an 8-byte inline write) and
/// waits for its completion.
pub fn send_credit(
    dev: &Device,
    conn: &Connection,
    lay: &Layout,
    p: &Params,
    value: u64,
) -> Result<()> {
    let credit = value.to_ne_bytes();
    let c = Control {
        wr_id: CREDIT_WR,
        at: lay.credit,
        body: Body::Inline(&credit),
    };
    send_control(
        dev,
        conn,
        lay,
        p,
        c,
        "a credit write to the client to complete",
    )
}

/// Client: waits until the credit word holds at least `value`.
pub fn wait_credit(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
    value: u64,
) -> Result<()> {
    let mut wait = Wait::new(p.timeout, "the server's credit (its queue to be recycled)");
    while ep.load_u64(lay.credit as u64)? < value {
        dev.progress();
        if wait.tick()? {
            crate::lat::check_open(conn)?;
        }
    }
    Ok(())
}

/// Server (`--verify`): tells the client what its checks of `round` found: a 32-byte
/// inline write into the client's credit area (flag byte last), waited for.
pub fn send_verdict(
    dev: &Device,
    conn: &Connection,
    lay: &Layout,
    p: &Params,
    round: usize,
    v: &crate::verify::Verdict,
) -> Result<()> {
    let mut b = [0u8; VERDICT_LEN];
    b[0..8].copy_from_slice(&v.items.to_le_bytes());
    b[8..16].copy_from_slice(&v.bytes.to_le_bytes());
    b[16..24].copy_from_slice(&v.bad.to_le_bytes());
    b[VERDICT_LEN - 1] = round as u8 + 1;
    let at = lay.credit + VERDICT_AT;
    let c = Control {
        wr_id: VERDICT_WR,
        at,
        body: Body::Inline(&b),
    };
    send_control(
        dev,
        conn,
        lay,
        p,
        c,
        "a verdict write to the client to complete",
    )
}

/// Client: with `--verify`, waits for the server's verdict on `round` (`last`: the
/// run's last round) and adds it to the report.
pub fn take_verdict(
    s: &crate::setup::Session,
    p: &Params,
    round: usize,
    last: bool,
    rep: &mut crate::report::Reporter,
) -> Result<()> {
    if p.verify {
        let v = wait_verdict(&s.dev, &s.conn, &s.ep, &s.lay, p, round, last)?;
        rep.outcome().merge_peer(&v, "server");
    }
    Ok(())
}

/// Client (`--verify`): waits for the server's verdict on `round`. After the `last`
/// one it keeps driving the device until the server closes (at most `--timeout`): the
/// server waits for its verdict write to complete, and closing at once would leave the
/// acknowledgement of a verdict write to a lossy link with nobody answering its
/// retransmissions (the server then fails with RetryExceeded).
pub fn wait_verdict(
    dev: &Device,
    conn: &Connection,
    ep: &Endpoint,
    lay: &Layout,
    p: &Params,
    round: usize,
    last: bool,
) -> Result<crate::verify::Verdict> {
    let at = lay.credit + VERDICT_AT;
    let mut wait = Wait::new(p.timeout, "the server's verify verdict on the round");
    while ep.load_u8((at + VERDICT_LEN - 1) as u64)? != round as u8 + 1 {
        dev.progress();
        if wait.tick()? {
            crate::lat::check_open(conn)?;
        }
    }
    let mut b = [0u8; VERDICT_LEN];
    ep.read(at as u64, &mut b)?;
    if last {
        let t0 = std::time::Instant::now();
        while conn.state() == deposit::ConnState::Normal && t0.elapsed() < p.timeout {
            dev.progress();
            std::hint::spin_loop();
        }
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Ok(crate::verify::Verdict {
        items: u64_at(0),
        bytes: u64_at(8),
        bad: u64_at(16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            test: Test::IpLat.code(),
            all: false,
            duration_ms: 0,
            iters: 1000,
            size: 32,
            atomic: 0,
            qps: 1,
            compound: false,
            verify: true,
        }
    }

    #[test]
    fn parameter_block_carries_the_offer_beside_the_compared_options() {
        let b = hello().emit(0x8000_0000_0000_0001);
        assert_eq!(b[HELLO_LEN - 1], READY);
        assert_eq!(Hello::parse(&b).unwrap(), hello());
        assert_eq!(offer_of(&b), 0x8000_0000_0000_0001);
        // Two clients differing only in their offers run the same options.
        assert_eq!(Hello::parse(&hello().emit(7)).unwrap(), hello());
    }

    #[test]
    fn a_block_of_the_previous_version_is_refused_by_name() {
        let mut b = hello().emit(0);
        b[4] = 2;
        let e = Hello::parse(&b).unwrap_err().to_string();
        assert!(e.contains("version 3"), "{e}");
    }
}
