//! The bystander of `tests/trust_at_connect.rs` (issue 34): a host on the hub that sees
//! every frame between the server (10.0.0.1) and the client (10.0.0.2) and answers as
//! fast as it can, before the server, with messages of its own, spoofed from the
//! server's or the client's addresses — the real-PMD counterpart of
//! `transport/tests/sim_trust.rs`, which forges the same over a simulated link:
//!
//! - a connect request without a handshake (a connect's first): a CHALLENGE naming the
//!   bystander's own identity key, with a random cookie;
//! - a connect request with a handshake: a REJECT (no listener) with a random tag and
//!   a CONNECT_REP of its own (its own ephemeral key, random connection, key, initial
//!   sequence number and tag);
//! - a data frame of the connection: a DISCONNECT_REQ to its receiver naming the
//!   receiver's connection, and a DISCONNECT_REP to its sender naming the sender's, each
//!   with a random MAC.
//!
//! Each frame seen is answered once (at most two forgeries per frame, and at most
//! `SEEN_MAX` frames): nothing floods. It also counts the frames that carry the
//! client's plaintext marker. It runs at a real-time priority when it may ("realtime
//! true"): woken by a frame, it goes before the nodes' busy-polling workers on a small
//! machine, so that its answers to a connect come before the server's (at the ordinary
//! priority its REJECT and reply often came after the server's reply, when the connect
//! no longer listens for them).

use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use deposit_transport::identity::Identity;
use deposit_transport::wire::cm::{CmMessage, RejectReason};
use deposit_transport::wire::underlay::v4_octets;
use deposit_transport::wire::{hflags, FrameView, UnderlayRepr, UDP_PORT};

use super::secure::{raw_socket, recv, send, MARKER};
use super::trust::{CLIENT, SERVER};
use super::{await_exit, await_line, fail, stdin_lines};

/// Frames of the two nodes answered at most (a bound, far above a run's).
const SEEN_MAX: u64 = 100_000;
/// The bystander stops by itself after this long (the parent stops it sooner).
const RUN_MAX: Duration = Duration::from_secs(60);

/// What the bystander sent and saw.
#[derive(Default)]
struct Counts {
    /// Connect requests seen, without and with a handshake.
    requests: u64,
    handshakes: u64,
    /// Data frames of the connection seen.
    data: u64,
    challenges: u64,
    rejects: u64,
    reps: u64,
    /// Disconnect requests and answers, by the node they went to.
    dreq_server: u64,
    dreq_client: u64,
    drep_server: u64,
    drep_client: u64,
    /// Frames (any) carrying the client's plaintext marker.
    plaintext: u64,
}

/// The underlay of an answer to a frame with underlay `u`: from its receiver to its
/// sender, to deposit's port.
fn back(u: &UnderlayRepr) -> UnderlayRepr {
    UnderlayRepr {
        src_mac: u.dst_mac,
        dst_mac: u.src_mac,
        src_ip: u.dst_ip,
        dst_ip: u.src_ip,
        src_port: UDP_PORT,
        dst_port: UDP_PORT,
        traffic_class: 0,
    }
}

/// What the bystander forges with: its socket, keys and random source.
struct Forger {
    fd: libc::c_int,
    /// Its identity key (what its challenges name) and an ephemeral key of its own.
    own: [u8; 32],
    ephemeral: [u8; 32],
    rng: deposit_transport::rng::Rng,
    out: Vec<u8>,
}

impl Forger {
    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn tag(&mut self) -> [u8; 16] {
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&self.random().to_ne_bytes());
        t[8..].copy_from_slice(&self.random().to_ne_bytes());
        t
    }

    /// Sends `m` with underlay `u`.
    fn emit(&mut self, m: &CmMessage, u: &UnderlayRepr) {
        let n = m
            .write_frame(&[], u, &mut self.out)
            .unwrap_or_else(|e| fail(e));
        send(self.fd, &self.out[..n]);
    }
}

/// The bystander's answers to frame `v` between the two nodes.
fn answer(v: &FrameView<'_>, c: &mut Counts, fg: &mut Forger) {
    let h = v.header;
    if h.flags & hflags::CM == 0 {
        if h.dst_conn == 0 {
            return;
        }
        c.data += 1;
        // Close the connection at the frame's receiver, as if its sender did…
        let dreq = CmMessage::DisconnectReq {
            target: h.dst_conn,
            sender: h.src_conn,
            ack: h.ack,
            mac: fg.tag(),
        };
        fg.emit(&dreq, &v.underlay);
        // …and answer a close of the sender's, as if the receiver did.
        let drep = CmMessage::DisconnectRep {
            sender: h.src_conn,
            mac: fg.tag(),
        };
        fg.emit(&drep, &back(&v.underlay));
        if v.underlay.dst_ip == std::net::IpAddr::from(SERVER) {
            c.dreq_server += 1;
            c.drep_client += 1;
        } else {
            c.dreq_client += 1;
            c.drep_server += 1;
        }
        return;
    }
    for m in v.messages().flatten() {
        let Ok(CmMessage::ConnectReq {
            request,
            conn,
            secure,
            handshake,
            ..
        }) = CmMessage::parse(&m.control, m.payload)
        else {
            continue;
        };
        // From the listener's addresses to the requester.
        let to_client = back(&v.underlay);
        if handshake.is_none() {
            c.requests += 1;
            let challenge = CmMessage::Challenge {
                request,
                client_conn: conn,
                cookie: fg.random() | 1,
                listener: fg.own,
            };
            fg.emit(&challenge, &to_client);
            c.challenges += 1;
        } else {
            c.handshakes += 1;
            let reject = CmMessage::Reject {
                request,
                reason: RejectReason::NoListener,
                client_conn: conn,
                tag: fg.tag(),
            };
            fg.emit(&reject, &to_client);
            c.rejects += 1;
            let rep = CmMessage::ConnectRep {
                request,
                conn: fg.random() as u32 | 1,
                key: fg.random(),
                isn: fg.random() as u32,
                max_frame: 1514,
                client_conn: conn,
                secure,
                ephemeral: fg.ephemeral,
                tag: fg.tag(),
            };
            fg.emit(&rep, &to_client);
            c.reps += 1;
        }
    }
}

/// Node 10.0.0.3 on `port` (a raw packet socket): the bystander, with an identity key
/// of its own (`"key <base64>"`), from the parent's "go" ("answering") until its "stop";
/// then it says what it sent ("sent challenges N rejects N reps N dreq_server N
/// dreq_client N drep_server N drep_client N"), what it saw ("seen requests N
/// handshakes N data N"), the frames with the client's plaintext marker ("plaintext N")
/// and "counts"; until "exit".
pub fn bystander(port: &str) {
    let lines = stdin_lines();
    let fd = raw_socket(port);
    // As fast as it can: woken by a frame, it runs before the nodes' busy-polling
    // workers (it sleeps otherwise). Without the privilege, at the ordinary priority.
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: a plain call with a valid parameter block, for this thread.
    let realtime = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
    println!("realtime {realtime}");
    let key = |what| {
        Identity::generate()
            .unwrap_or_else(|e| fail(format!("{what} key: {e}")))
            .public()
    };
    let (own, ephemeral) = (key("identity"), key("ephemeral"));
    println!("key {own}");
    println!("ready");
    await_line(&lines, "go");
    // The parent lets the client connect once this is said.
    println!("answering");
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut seed).unwrap_or_else(|e| fail(e));
    let mut fg = Forger {
        fd,
        own: own.0,
        ephemeral: ephemeral.0,
        rng: deposit_transport::rng::Rng::new(u64::from_ne_bytes(seed) | 1),
        out: vec![0u8; 1514],
    };
    let mut c = Counts::default();
    let mut buf = vec![0u8; 16384];
    let end = Instant::now() + RUN_MAX;
    let mut seen = 0u64;
    loop {
        match lines.try_recv() {
            Ok(l) if l == "stop" => break,
            Ok(_) | Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => fail("stdin closed"),
        }
        if Instant::now() > end || seen >= SEEN_MAX {
            // Bounded: answer nothing more, wait for the parent's stop.
            await_line(&lines, "stop");
            break;
        }
        let Some(len) = recv(fd, &mut buf) else {
            continue;
        };
        let f = &buf[..len];
        if let Ok(v) = FrameView::parse(f) {
            let (src, dst) = (v4_octets(v.underlay.src_ip), v4_octets(v.underlay.dst_ip));
            if (src == CLIENT && dst == SERVER) || (src == SERVER && dst == CLIENT) {
                seen += 1;
                answer(&v, &mut c, &mut fg);
            }
        }
        // After the answers: they go first.
        if f.windows(MARKER.len()).any(|w| w == MARKER) {
            c.plaintext += 1;
        }
    }
    println!(
        "sent challenges {} rejects {} reps {} dreq_server {} dreq_client {} drep_server {} \
         drep_client {}",
        c.challenges, c.rejects, c.reps, c.dreq_server, c.dreq_client, c.drep_server, c.drep_client
    );
    println!(
        "seen requests {} handshakes {} data {}",
        c.requests, c.handshakes, c.data
    );
    println!("plaintext {}", c.plaintext);
    println!("counts");
    await_exit(&lines);
}
