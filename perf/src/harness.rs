//! The one harness every transport test runs in: a test is a [`Bench`] (its layout,
//! its set-up on each side, its rounds), and this module does the rest the same way
//! for all of them — devices, meeting, the side protocol, the role dispatch, the
//! reporter.
//!
//! ## How the two sides meet and talk (docs/design.md §7: no side channel)
//!
//! Each side has a small **control endpoint** and one **control connection** between
//! them, beside the test's own data endpoint and its `-q` data connections (so that a
//! data connection carries the test's messages and nothing else):
//!
//! * **Parameters** travel in connection private data ([`deposit::ConnOptions`]): the
//!   client's connect request carries its options ([`options`]) and its offer, the
//!   server's listener answers every request with its own options and offer. Each side
//!   compares the other's options with its own and stops with one clear line when
//!   they differ. An **offer** is an opaque `u64` a test hands its peer: ip_lat's
//!   entry points, ip_bw's server entry point, token_lat's first token.
//! * **Control messages** ([`Msg`]: end of round, the server's answer, send_bw's
//!   credits) are ordinary 64-byte writes into the peer's control ring, one slot per
//!   message in turn; the receiver learns of one from its control connection's arrival
//!   counter and reads its slot. Every exchange is a request and its answer, so the
//!   ring never holds more than two unread messages.
//!
//! ## A round (one size)
//!
//! The client runs the round ([`Bench::dial_round`]) and sends an **end-of-round**
//! message: its count of messages (the server cannot know it with `-D`), time, peak
//! rate and its `--verify` outcome. The server serves the round until that message is
//! pending ([`Bench::serve_round`]), waits until as many messages have arrived on its
//! data connections, checks what it checks ([`Bench::check_round`]) and **answers**
//! with its own outcome; the client starts the next round only then, so a server's
//! check or reset never races the next round. Bandwidth servers print the client's
//! numbers (perftest's server does).
//!
//! Nothing here runs inside a measured loop.

use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, ConnOptions, ConnState, Connection, Device, Endpoint, Registers, Rights,
    WorkRequest,
};

use crate::error::{PerfError, Result, Wait};
use crate::report::{BwStats, LatStats, Reporter};
use crate::setup::{self, Place, Ready, EMPTY_WC};
use crate::verify::{self, Outcome};
use crate::{Params, Role, Span, Test};

/// Largest size the layouts of the one-message tests (send_*, ip_*, token_lat) are
/// sized for: larger sizes need several messages on every port we know.
pub const MAX_ONE_MESSAGE: u64 = 16384;

/// Offsets in a data endpoint: the receive region at 0 (where the peer's messages
/// land: "write into the peer's endpoint at offset 0"), the send region (the source
/// of ours, apart so that a ping-pong side can spin on the last byte it receives while
/// the last byte it sends holds its own counter), then a queue of `slots` slots.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub send: usize,
    pub queue: usize,
    pub slots: usize,
    /// Bytes per queue slot: the largest size rounded up to 64.
    pub stride: usize,
    pub len: usize,
}

impl Layout {
    /// Regions of at least `max(max_size, region, 64)` bytes, a queue of `slots`.
    pub fn new(max_size: u64, region: usize, slots: usize) -> Layout {
        let r = (max_size.max(64) as usize).max(region).next_multiple_of(64);
        let stride = (max_size.max(1) as usize).next_multiple_of(64);
        Layout {
            send: r,
            queue: 2 * r,
            slots,
            stride,
            len: 2 * r + slots * stride,
        }
    }
    /// Offset of queue slot `i`.
    pub fn slot(&self, i: usize) -> usize {
        self.queue + i * self.stride
    }
}

/// A round's result on the client: the messages it sent (warm-up included) and what
/// the table shows.
pub struct Round {
    pub count: u64,
    pub stats: Stats,
}

pub enum Stats {
    Lat(LatStats),
    Bw(BwStats),
}

impl Round {
    /// A streaming round.
    pub fn bw(s: BwStats) -> Round {
        Round {
            count: s.iterations,
            stats: Stats::Bw(s),
        }
    }
}

/// The round a test runs: its side, the options, the round's number and size.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub s: &'a Side,
    pub p: &'a Params,
    pub round: usize,
    pub size: u64,
}

/// What a side sets up before it meets its peer.
#[derive(Default)]
pub struct Setup {
    /// Options of its data connections (registers, instructions, isolation).
    pub opts: ConnOptions,
    /// What it hands the peer (0: nothing).
    pub offer: u64,
}

/// One test. The harness calls, on each side: [`Bench::layout`], [`Bench::setup`],
/// meets the peer, then per size the client's [`Bench::dial_round`] or the server's
/// [`Bench::serve_round`] and [`Bench::check_round`], and at the end [`Bench::finish`].
pub trait Bench: Clone + Send + 'static {
    /// The data endpoint of this side.
    fn layout(&self, p: &Params, server: bool) -> Layout;
    /// Prepares this side's data endpoint (registers, instructions, tokens, contents).
    fn setup(&mut self, _s: &Local<'_>, _p: &Params, _server: bool) -> Result<Setup> {
        Ok(Setup::default())
    }
    /// The sizes this device runs, as (round, size); the default: all of them.
    fn sizes(&self, _dev: &Device, p: &Params) -> Result<Vec<(usize, u64)>> {
        Ok(p.sizes.iter().copied().enumerate().collect())
    }
    /// Lines of the title block.
    fn info(&self, _s: &Side, _p: &Params, _rep: &mut Reporter) {}
    /// Client: runs one round; its checks go to `out`.
    fn dial_round(&mut self, at: &At<'_>, out: &mut Outcome) -> Result<Round>;
    /// Server: serves one round until the client's end-of-round message is pending
    /// (the default: passively). Returns the count of messages it answered, when it
    /// answers them (checked against the client's).
    fn serve_round(&mut self, at: &At<'_>, _out: &mut Outcome) -> Result<Option<u64>> {
        let At { s, p, .. } = *at;
        s.await_ctrl(p, "the client's requests or its end of the round")?;
        Ok(None)
    }
    /// Server: once the round's `count` messages have arrived, its checks (and
    /// resets) before it answers.
    fn check_round(&mut self, _at: &At<'_>, _count: u64, _out: &mut Outcome) -> Result<()> {
        Ok(())
    }
    /// Server: after the last round, given the messages of the run.
    fn finish(&mut self, _s: &Side, _p: &Params, _total: u64) -> Result<()> {
        Ok(())
    }
}

/// A side before it meets its peer.
pub struct Local<'a> {
    pub dev: &'a Device,
    pub ep: &'a Endpoint,
    pub lay: Layout,
}

/// One side of a running test.
pub struct Side {
    pub dev: Device,
    pub ep: Endpoint,
    pub lay: Layout,
    /// The data connections (`-q`; one for most tests), sharing one completion queue.
    pub conns: Vec<Connection>,
    pub ctrl: Ctrl,
    /// What the peer offered (see the module doc).
    pub peer_offer: u64,
    /// Server: data arrivals before the current round's first message.
    pub base: std::cell::Cell<u64>,
    /// Client: how long the control connection took to come up (the connection
    /// manager's handshake: challenge, Noise IK, the first frame).
    pub connect_time: Option<Duration>,
}

impl Side {
    /// The first data connection.
    pub fn conn(&self) -> &Connection {
        &self.conns[0]
    }
    /// Messages that arrived on all the data connections. O(connections).
    pub fn arrivals(&self) -> u64 {
        self.conns.iter().map(|c| c.arrivals()).sum()
    }
    /// Fails when the peer closed (it gave up, e.g. on mismatched options).
    pub fn check_open(&self) -> Result<()> {
        for c in [&self.ctrl.conn, self.conn()] {
            if c.state() != ConnState::Normal {
                return Err(PerfError::Failed(format!(
                    "the connection is {:?}: the peer closed it or failed (see its error message)",
                    c.state()
                )));
            }
        }
        Ok(())
    }

    /// Polls the data completion queue until it is empty; an error status fails.
    #[inline]
    pub fn drain(&self, wcs: &mut [deposit::Completion]) -> Result<()> {
        loop {
            let n = self.conn().cq().poll(wcs);
            if let Some(wc) = wcs[..n].iter().find(|w| !w.status.is_ok()) {
                return Err(PerfError::Failed(format!(
                    "request {} completed with {:?}{}",
                    wc.wr_id,
                    wc.status,
                    wc.remote_reason
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )));
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    /// Server: drives the device until a control message is pending, failing after
    /// `--timeout` without an arrival. An arrival on the first data connection counts
    /// at once; the sum over all of them (65 536 counters with `-q 65536`) only every
    /// 200 ms or so. A passive side with a dedicated worker naps between looks.
    pub fn await_ctrl(&self, p: &Params, what: &'static str) -> Result<()> {
        let mut wait = Wait::new(p.timeout, what);
        let (mut seen, mut seen_all) = (self.conn().arrivals(), self.arrivals());
        let mut summed = Instant::now();
        let nap = (p.progress == deposit::Progress::Dedicated).then(|| Duration::from_micros(200));
        while !self.ctrl.pending() {
            self.dev.progress();
            if let Some(d) = nap {
                std::thread::sleep(d);
            }
            let a = self.conn().arrivals();
            if a != seen {
                seen = a;
                wait.progressed();
            }
            if wait.tick()? {
                self.check_open()?;
                if self.conns.len() > 1 && summed.elapsed() >= Duration::from_millis(200) {
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

    /// Closes every connection, the control one last, and drives the worker until the
    /// peer has answered every close (the entries are gone: a disconnect request lost
    /// on the way is sent again, where the peer would otherwise linger for its whole
    /// `--timeout`), for at most a second.
    pub fn close(&self) {
        for c in &self.conns {
            c.close();
        }
        self.ctrl.conn.close();
        let t0 = Instant::now();
        while self.dev.connections() > 0 && t0.elapsed() < Duration::from_secs(1) {
            self.dev.progress();
        }
    }
}

/// Kinds of control messages.
pub mod kind {
    /// Client: the end of a round (count, ns, peak bits, items, bytes, bad).
    pub const END: u8 = 1;
    /// Server: its answer to an end of round (items, bytes, bad).
    pub const ANSWER: u8 = 2;
    /// send_bw: the client asks for lap `v[0]`'s credit; the server grants it.
    pub const CREDIT: u8 = 3;
}

/// A control message: 64 bytes, kind, round and six words.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Msg {
    pub kind: u8,
    pub round: u8,
    pub v: [u64; 6],
}

const MSG_LEN: usize = 64;
/// Slots of a control ring (see the module doc).
const RING: u64 = 64;

impl Msg {
    pub fn new(kind: u8, round: usize, v: [u64; 6]) -> Msg {
        Msg {
            kind,
            round: round as u8,
            v,
        }
    }
    fn emit(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0] = self.kind;
        b[1] = self.round;
        for (i, w) in self.v.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
    fn parse(b: &[u8; MSG_LEN]) -> Msg {
        let w = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().expect("8"));
        Msg {
            kind: b[0],
            round: b[1],
            v: [w(0), w(1), w(2), w(3), w(4), w(5)],
        }
    }
    /// The verdict it carries from `at` (three words).
    pub fn verdict(&self, at: usize) -> verify::Verdict {
        verify::Verdict {
            items: self.v[at],
            bytes: self.v[at + 1],
            bad: self.v[at + 2],
        }
    }
}

/// This side's end of the control connection.
pub struct Ctrl {
    dev: Device,
    ep: Endpoint,
    cq: CompletionQueue,
    conn: Connection,
    sent: std::cell::Cell<u64>,
    got: std::cell::Cell<u64>,
    timeout: Duration,
}

impl Ctrl {
    /// Whether a message is waiting to be read.
    #[inline]
    pub fn pending(&self) -> bool {
        self.conn.arrivals() > self.got.get()
    }

    /// Writes `m` into the peer's next ring slot and waits for its completion.
    pub fn send(&self, m: &Msg) -> Result<()> {
        let k = self.sent.get();
        self.sent.set(k + 1);
        let (src, dst) = (
            (RING + k % RING) * MSG_LEN as u64,
            (k % RING) * MSG_LEN as u64,
        );
        self.ep.write(src, &m.emit())?;
        let req = WorkRequest::write(k, &self.ep, src, MSG_LEN as u32, dst as u32).signaled();
        self.conn.post(&req)?;
        let mut wait = Wait::new(self.timeout, "a control message to complete");
        let mut wcs = [EMPTY_WC; 4];
        loop {
            let n = self.cq.poll(&mut wcs);
            if let Some(wc) = wcs[..n].iter().find(|w| w.wr_id == k) {
                if wc.status.is_ok() {
                    return Ok(());
                }
                let st = self.dev.stats();
                return Err(PerfError::Failed(format!(
                    "a control message completed with {:?} (is the peer the same ddperf?); \
                     device: {} retransmits, {} timeouts, drops {:?}",
                    wc.status,
                    st.retransmits,
                    st.timeouts,
                    st.drops().collect::<Vec<_>>()
                )));
            }
            self.dev.progress();
            wait.tick()?;
        }
    }

    /// The kind of the pending message, if one is.
    pub fn peek_kind(&self) -> Option<u8> {
        let k = self.got.get();
        let at = (k % RING) * MSG_LEN as u64;
        self.pending().then(|| self.ep.load_u8(at).ok()).flatten()
    }

    /// Waits for the next message, which must be of `kind` (`what` says what it is).
    pub fn recv(&self, kind: u8, what: &'static str) -> Result<Msg> {
        let mut wait = Wait::new(self.timeout, what);
        while !self.pending() {
            self.dev.progress();
            if wait.tick()? && self.conn.state() != ConnState::Normal {
                return Err(PerfError::Failed(format!(
                    "the control connection is {:?} while waiting for {what}: the peer closed it or failed (see its error message)",
                    self.conn.state()
                )));
            }
        }
        let k = self.got.get();
        self.got.set(k + 1);
        let mut b = [0u8; MSG_LEN];
        self.ep.read((k % RING) * MSG_LEN as u64, &mut b)?;
        let m = Msg::parse(&b);
        if m.kind != kind {
            return Err(PerfError::Failed(format!(
                "expected {what}, got control message {m:?}"
            )));
        }
        Ok(m)
    }

    /// Client, at the end: keeps driving the device until the server closes (at most
    /// `--timeout`), so that a lost acknowledgement of its last answer can still be
    /// retransmitted and answered (the server then fails with RetryExceeded).
    fn linger(&self) {
        let t0 = Instant::now();
        while self.conn.state() == ConnState::Normal && t0.elapsed() < self.timeout {
            self.dev.progress();
            std::hint::spin_loop();
        }
    }
}

/// The options both sides must share, as the command line that gives them (e.g.
/// `write_bw -s 64 -n 1000 -q 4 --verify`).
fn options(p: &Params) -> String {
    let mut s = format!("{} ", p.test.name());
    s += &match p.span {
        Span::Iters(n) => format!("-n {n}"),
        Span::Duration(d) => format!("-D {}", d.as_secs_f64()),
    };
    s += &if p.all {
        " -a".into()
    } else {
        format!(" -s {}", p.max_size())
    };
    if matches!(p.test, Test::AtomicLat | Test::AtomicBw) {
        s += &format!(" -A {}", p.atomic.name());
    }
    for (on, opt) in [
        (p.qps != 1, format!(" -q {}", p.qps)),
        (p.compound, " --compound".into()),
        (p.verify, " --verify".into()),
    ] {
        if on {
            s += &opt;
        }
    }
    s
}

const MAGIC: &[u8; 4] = b"DDPF";
/// Version 4: parameters in private data, a control connection.
const VERSION: u8 = 4;

/// The private data of a connect request (the client's) or of the listener's answer
/// (the server's): magic, version, the offer, the options.
fn hello(p: &Params, offer: u64) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.push(VERSION);
    b.extend(offer.to_le_bytes());
    b.extend(options(p).bytes().take(deposit::PRIVATE_DATA_MAX - 13));
    b
}

/// The peer's offer, once the options in its private data `b` are found to be ours.
fn check_hello(p: &Params, b: &[u8], who: &str) -> Result<u64> {
    if b.len() < 13 || &b[..4] != MAGIC || b[4] != VERSION {
        return Err(PerfError::Failed(format!(
            "the {who} is not ddperf's version {VERSION} (its connection private data: {:02x?}); run the same ddperf on both sides",
            &b[..b.len().min(8)]
        )));
    }
    let (theirs, ours) = (String::from_utf8_lossy(&b[13..]), options(p));
    if theirs != ours {
        return Err(PerfError::Failed(format!(
            "the {who} runs `{theirs}` but this side `{ours}`: give both sides the same options"
        )));
    }
    Ok(u64::from_le_bytes(b[5..13].try_into().expect("8 bytes")))
}

/// Runs test `b` in this process's role(s).
pub fn run<B: Bench>(p: &Params, b: B) -> Result<()> {
    let (ps, sb) = (p.clone(), b.clone());
    setup::roles(
        p,
        false,
        move |at, ready| side(sb, &ps, at, None, ready),
        |at, peer| side(b, p, at, Some(peer), Box::new(|| {})),
    )
}

/// One side: the server (`peer` None) or the client.
fn side<B: Bench>(
    mut b: B,
    p: &Params,
    at: Place,
    peer: Option<std::net::IpAddr>,
    ready: Ready,
) -> Result<()> {
    let s = meet(&mut b, p, &at, peer, ready)?;
    let mut rep = reporter(&b, p, &s, &at.ports, at.report);
    let r = match peer {
        None => {
            rep.subtitle("server side, client's measurement");
            serve_rounds(&mut b, p, &s, &mut rep)
        }
        Some(_) => dial_rounds(&mut b, p, &s, &mut rep),
    };
    s.close();
    r?;
    // A loopback server's outcome reached the client in its answers.
    if peer.is_some() || p.role == Role::Server {
        verify::conclude(&mut rep, p)?;
    }
    Ok(())
}

/// The service data connections come to (the control connection's is `--service`).
fn data_service(p: &Params) -> u32 {
    p.service.wrapping_add(1)
}

/// Opens this side's device and endpoints, sets the test up and meets the peer: the
/// server listens, calls `ready` and accepts, the client connects; each checks the
/// other's options.
fn meet<B: Bench>(
    b: &mut B,
    p: &Params,
    at: &Place,
    peer: Option<std::net::IpAddr>,
    ready: Ready,
) -> Result<Side> {
    let dev = setup::open_device(p, &at.spec, at.ip)?;
    if at.banner {
        setup::banner(&at.ports, dev.max_frame());
    }
    if peer.is_some() {
        setup::wait_link(|| dev.link_up(), p)?;
    }
    let lay = b.layout(p, peer.is_none());
    let rights = peer.map_or(p.test.server_rights(), |_| Rights::REMOTE_WRITE);
    let ep = dev.alloc_endpoint_on(0, lay.len as u64, rights)?;
    // Room for every outstanding request to complete at once (a flush): the window
    // over all the connections, not a depth per connection (gigabytes at -q 65536).
    let cq = dev.create_cq((crate::stream::window(p, p.qps as usize) as usize + 64).max(256));
    let mut su = b.setup(
        &Local {
            dev: &dev,
            ep: &ep,
            lay,
        },
        p,
        peer.is_none(),
    )?;
    (su.opts.secure, su.opts.psk) = (p.secure, p.psk);
    su.opts.traffic_class = p.traffic_class;
    // The server's key: as given, else (loopback) the device's own, which both sides
    // share (`setup`); the known peers and --tofu cover the rest.
    let peer_key = p
        .peer_key
        .or((p.role == crate::Role::Loopback).then(|| dev.identity()));
    (su.opts.peer_key, su.opts.trust_on_first_use) = (peer_key, p.tofu);
    su.opts.authorized_keys = p.authorized_keys.clone();
    let cep = dev.alloc_endpoint_on(0, 2 * RING * MSG_LEN as u64, Rights::REMOTE_WRITE)?;
    let ccq = dev.create_cq(64);
    let hi = ConnOptions {
        private_data: hello(p, su.offer),
        traffic_class: p.traffic_class,
        secure: p.secure,
        psk: p.psk,
        peer_key,
        trust_on_first_use: p.tofu,
        authorized_keys: p.authorized_keys.clone(),
        ..ConnOptions::default()
    };
    let eps = shard_endpoints(&dev, p, &ep, rights, &su.opts)?;
    let mut connect_time = None;
    let (conn, peer_offer, conns) = match peer {
        None => {
            let control = dev.listen_with(p.service, &cep, &ccq, &hi)?;
            let listeners = eps
                .iter()
                .map(|e| dev.listen_with(data_service(p), e, &cq, &su.opts))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            ready();
            let c = control.accept(p.timeout)?;
            let offer = check_hello(p, c.private_data(), "client").inspect_err(|_| {
                c.close();
                (0..64).for_each(|_| {
                    dev.progress();
                });
            })?;
            let mut conns = Vec::with_capacity(p.qps as usize);
            let mut wait = Wait::new(p.timeout, "the client's data connections");
            // Data connections come from the control connection's peer: the node
            // whose identity key its handshake proved. Any other is closed.
            let client = c.peer_key();
            let mut others = 0u64;
            while conns.len() < p.qps as usize {
                let before = conns.len();
                for l in &listeners {
                    if conns.len() < p.qps as usize {
                        match l.accept(Duration::ZERO) {
                            Ok(d) if d.peer_key() == client => conns.push(d),
                            Ok(d) => {
                                others += 1;
                                d.close();
                                if others == 1 {
                                    eprintln!(
                                        "ddperf: closed a data connection from another node \
                                         than the client's ({:?}, not {:?})",
                                        d.peer_key(),
                                        client
                                    );
                                }
                            }
                            Err(_) => {}
                        }
                    }
                }
                if conns.len() == before {
                    dev.progress();
                    wait.tick()?;
                }
            }
            (c, offer, conns)
        }
        Some(peer) => {
            let timeout = |e: deposit::Error| {
                match e {
                deposit::Error::Rejected(deposit::RejectReason::Timeout) => PerfError::Timeout {
                    what: "the server to accept the connection (is `ddperf <test> --server` running with the same --service?)",
                    secs: p.timeout.as_secs_f64(),
                },
                e => e.into(),
            }
            };
            let t0 = std::time::Instant::now();
            let c = dev
                .connect_with(peer, p.service, &cep, &ccq, &hi)
                .map_err(timeout)?;
            connect_time = Some(t0.elapsed());
            let offer = check_hello(p, c.private_data(), "server")?;
            // From the endpoints of every shard in turn (see `shard_endpoints`).
            let conns = (0..p.qps as usize)
                .map(|k| {
                    dev.connect_with(peer, data_service(p), &eps[k % eps.len()], &cq, &su.opts)
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(timeout)?;
            (c, offer, conns)
        }
    };
    let ctrl = Ctrl {
        dev: dev.clone(),
        ep: cep,
        cq: ccq,
        conn,
        sent: 0.into(),
        got: 0.into(),
        timeout: p.timeout,
    };
    Ok(Side {
        dev,
        ep,
        lay,
        conns,
        ctrl,
        peer_offer,
        base: 0.into(),
        connect_time,
    })
}

fn serve_rounds<B: Bench>(b: &mut B, p: &Params, s: &Side, rep: &mut Reporter) -> Result<()> {
    let mut total = 0;
    // Fresh connections count from 0: the client may be sending already.
    let mut base = 0;
    for (round, size) in b.sizes(&s.dev, p)? {
        s.base.set(base);
        let mut out = Outcome::default();
        let at = At { s, p, round, size };
        let answered = b.serve_round(&at, &mut out)?;
        let end = s.ctrl.recv(kind::END, "the client's end of the round")?;
        let count = end.v[0];
        if let Some(n) = answered.filter(|&n| n != count) {
            return Err(PerfError::Failed(format!(
                "{size} B: the client counts {count} messages, this server answered {n}"
            )));
        }
        let mut wait = Wait::new(p.timeout, "the round's messages to arrive");
        while s.arrivals() < base + count {
            s.dev.progress();
            wait.tick()?;
        }
        b.check_round(&at, count, &mut out)?;
        base = s.arrivals();
        total += count;
        let v = out.verdict();
        s.ctrl.send(&Msg::new(
            kind::ANSWER,
            round,
            [v.items, v.bytes, v.bad, 0, 0, 0],
        ))?;
        if p.verify {
            rep.outcome().merge_peer(&end.verdict(3), "client");
        }
        rep.outcome().merge(out);
        if !p.test.is_lat() {
            rep.bw(&BwStats {
                bytes: size,
                iterations: count,
                timed: count,
                elapsed: Duration::from_nanos(end.v[1]),
                peak_rate: f64::from_bits(end.v[2]),
            });
        }
    }
    if p.role == Role::Server {
        eprintln!(
            "ddperf: server done: {total} messages on {} connection(s)",
            s.conns.len()
        );
    }
    b.finish(s, p, total)
}

fn dial_rounds<B: Bench>(b: &mut B, p: &Params, s: &Side, rep: &mut Reporter) -> Result<()> {
    for (round, size) in b.sizes(&s.dev, p)? {
        let mut out = Outcome::default();
        let r = b.dial_round(&At { s, p, round, size }, &mut out)?;
        let (elapsed, peak) = match &r.stats {
            Stats::Bw(b) => (b.elapsed, b.peak_rate),
            Stats::Lat(_) => (Duration::ZERO, 0.0),
        };
        let v = out.verdict();
        let end = [
            r.count,
            elapsed.as_nanos() as u64,
            peak.to_bits(),
            v.items,
            v.bytes,
            v.bad,
        ];
        s.ctrl.send(&Msg::new(kind::END, round, end))?;
        let answer = s
            .ctrl
            .recv(kind::ANSWER, "the server's answer to the end of the round")?;
        rep.outcome().merge(out);
        if p.verify {
            rep.outcome().merge_peer(&answer.verdict(0), "server");
        }
        match r.stats {
            Stats::Lat(l) => rep.lat(&l),
            Stats::Bw(b) => rep.bw(&b),
        }
    }
    s.ctrl.linger();
    Ok(())
}

/// The endpoints data connections go through: `ep`, or — write_bw with several
/// workers, several connections and options that name no register or instruction
/// window (those are one shard's) — a nested endpoint over all of `ep` on each shard,
/// so that the connections spread over the shards.
fn shard_endpoints(
    dev: &Device,
    p: &Params,
    ep: &Endpoint,
    rights: Rights,
    opts: &ConnOptions,
) -> Result<Vec<Endpoint>> {
    let spread = p.workers > 1
        && p.qps > 1
        && p.test == Test::WriteBw
        && opts.registers == Registers::None
        && opts.instructions.is_none();
    let mut eps = vec![ep.clone()];
    if spread {
        for k in (0..dev.workers().min(p.qps as usize)).filter(|&k| k != ep.shard()) {
            eps.push(dev.sub_endpoint_on(k, ep, 0, ep.len(), rights)?);
        }
    }
    Ok(eps)
}

fn reporter<B: Bench>(b: &B, p: &Params, s: &Side, ports: &str, enabled: bool) -> Reporter {
    let mut rep = Reporter::new(p.test, p.json, p.report_gbits, enabled);
    rep.plot_to(p.plot.clone());
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
    if s.conns.iter().all(|c| c.is_secure()) && !s.conns.is_empty() {
        rep.secure(p.psk.is_some());
    }
    if let Some(key) = s.ctrl.conn.peer_key() {
        let how = if !s.ctrl.conn.peer_key_verified() {
            "unverified: taken from the peer's challenge"
        } else if s.connect_time.is_none() {
            "proven by the client's handshake"
        } else {
            "pinned or trusted on first use"
        };
        let took = s
            .connect_time
            .map(|t| format!("; connected in {:.0} us", t.as_secs_f64() * 1e6))
            .unwrap_or_default();
        rep.info("Peer key", format!("{key} ({how}){took}"));
    }
    rep.queues(p.workers, s.conns.len());
    if !p.test.is_lat() {
        rep.info("TX depth", p.tx_depth.to_string());
        if p.post_list > 1 {
            rep.info("Post list", p.post_list.to_string());
        }
    }
    rep.info("CQ Moderation", p.cq_mod.to_string());
    b.info(s, p, &mut rep);
    if s.conns.len() == 1 {
        rep.connection(s.conn());
    } else {
        rep.info(
            "Outstanding",
            format!(
                "at most {} requests over the {} connections (posted round-robin)",
                crate::stream::window(p, s.conns.len()),
                s.conns.len()
            ),
        );
    }
    rep
}

/// The sizes of the run that one message of at most `max` bytes carries, as (round,
/// size), at least `min` each: `-a` skips the others (and says so), another `-s` is
/// refused with `one` as the reason (e.g. "a SEND is one message"); the size 0 (the
/// default of send_bw and ip_bw) is `max`.
pub fn one_message_sizes(p: &Params, min: u64, max: u64, one: &str) -> Result<Vec<(usize, u64)>> {
    let max = max.min(MAX_ONE_MESSAGE);
    if p.sizes == [0] {
        return Ok(vec![(0, max)]);
    }
    let fits = |s: &u64| (min..=max).contains(s);
    let ok: Vec<(usize, u64)> = p.sizes.iter().copied().filter(fits).enumerate().collect();
    if ok.len() < p.sizes.len() {
        if !p.all {
            return Err(PerfError::Usage(format!(
                "-s {}: {one}: {min}..={max} B on this port",
                p.sizes[0]
            )));
        }
        eprintln!("ddperf: -a: sizes outside {min}..={max} B skipped ({one})");
    }
    Ok(ok)
}

/// The largest size the layout of a one-message test must hold: `-s`, the largest of
/// `-a`, or for the default of send_bw / ip_bw (0) [`MAX_ONE_MESSAGE`].
pub fn one_message_max(p: &Params) -> u64 {
    match p.max_size() {
        0 => MAX_ONE_MESSAGE,
        m => m.min(MAX_ONE_MESSAGE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_carry_the_offer_beside_the_compared_options() {
        let p = crate::tests::params("atomic_bw --loopback -n 7 --verify");
        let b = hello(&p, 0x8000_0000_0000_0001);
        assert!(b.len() <= deposit::PRIVATE_DATA_MAX);
        assert_eq!(check_hello(&p, &b, "peer").unwrap(), 0x8000_0000_0000_0001);
        assert_eq!(options(&p), "atomic_bw -n 7 -s 8 -A FETCH_AND_ADD --verify");
        let q = crate::tests::params("atomic_bw --loopback -n 8 --verify");
        let e = check_hello(&q, &b, "client").unwrap_err().to_string();
        assert!(e.contains("client runs `atomic_bw -n 7"), "{e}");
        let mut old = b.clone();
        old[4] = 3;
        let e = check_hello(&p, &old, "client").unwrap_err().to_string();
        assert!(e.contains("version 4"), "{e}");
        assert!(
            check_hello(&p, &[], "server").is_err(),
            "no private data at all"
        );
    }

    #[test]
    fn a_control_message_round_trips() {
        let m = Msg::new(kind::END, 7, [1, 2, 3, 4, u64::MAX, 6]);
        assert_eq!(Msg::parse(&m.emit()), m);
        assert_eq!(m.verdict(3).bad, 6);
    }
}
