//! A [`Node`](crate::node::Node) holding live connections, fed arbitrary frames (the
//! stateful target, as smoltcp's `tcp_headers`).
//!
//! Two simulated hosts ([`crate::sim`]), a client and a server, with two connections
//! between them: **A**, which the input attacks, and **B**, a secure connection
//! (`crate::secure`) which it cannot name (it never learns B's key) and which must keep
//! working. On the server:
//!
//! ```text
//! memory M (6 pages):  | page 0 | E: A's endpoint, pages 1..4 | P: pages 4..6 |
//!                                 E page 0: every right          a read token's range:
//!                                 E page 1: remote read only     P at 100, 4596 bytes
//!                                 E page 2: not present (until the input has the host map it)
//! T: one page, a payload token's 200-byte buffer at 512     E2: B's endpoint
//! registers: A's window 8..24 and E's globals 32..40, some inside read-only or
//! unprotected; every register outside them fully open (the window alone guards them)
//! ```
//!
//! The input is a sequence of steps into the server: frames built from its bytes for
//! connection A (its number and key, sequence numbers near the expected one, messages of
//! every opcode — token writes and reads with either token, right or forged —, a second
//! section), raw frames (optionally given a valid underlay,
//! lengths, check bytes and CRC), the client's own frames for A mutated on the way,
//! connection-management frames, clock steps (the simulated link carries everything
//! both ways meanwhile), host calls (either side posts on A — the client token reads
//! too; the server's reads and atomics put their results in E, where forged replies may
//! aim —, the server's
//! host maps the missing page and resumes A, drains E's events, closes A), and B's
//! sealed frames on the path: the client writes E2's own bytes back into E2 on B (from
//! an endpoint of its own that no peer can write), and
//! the input changes, drops, replays (now or later) and re-seals the CRC of its frames
//! before the server sees them — none of it may open, so E2 never changes.
//!
//! Checked: every register outside A's rights is as set up, the token's buffer no
//! longer changes once the token is used up, and the read token is never used up
//! (after every step); memory outside E (page
//! 0 of M, and P, which the read token lets A's peer read but nothing write), E's
//! read-only page, E's missing page while it is missing, T outside
//! the token's buffer and E2 are as set up (at the end: nothing can write them, so
//! nothing can change them and back). Then B completes a write, verified byte for byte.
//! Nothing may panic on the way.

use std::sync::Arc;

use super::wire::fix_up;
use super::Input;
use crate::cm::{ConnectOptions, Registers, Security};
use crate::connection::ConnShared;
use crate::cq::CqShared;
use crate::events::EventRing;
use crate::mem::EndpointMemory;
use crate::node::NodeConfig;
use crate::sim::{self, LinkConfig, Network, HZ};
use crate::tables::{
    EndpointEntry, EndpointId, Operands, RegProt, RegWindow, Rights, StoredInstruction, Token,
    TokenMatch, GLOBAL_IP,
};
use crate::wire::cell::flags;
use crate::wire::cm::CM_PAYLOAD_MAX;
use crate::wire::{
    hflags, op, ControlRepr, FrameWriter, TransportRepr, UnderlayPacket, UnderlayRepr, UDP_PORT,
    UNDERLAY_LEN,
};
use crate::wr::{Source, WcStatus, Wqe, WrOpcode, WR_SIGNALED};

const PAGE: usize = crate::tables::PAGE_SIZE as usize;
const CLIENT: usize = 0;
const SERVER: usize = 1;
/// A's register window and E's global registers (absolute), in a file of 64.
const WINDOW: RegWindow = RegWindow { base: 8, len: 16 };
const GLOBALS: RegWindow = RegWindow { base: 32, len: 8 };
/// The token's buffer in T.
const TOKEN_AT: usize = 512;
const TOKEN_LEN: usize = 200;
/// Most steps of one input.
const MAX_STEPS: usize = 48;
/// The client's endpoint: source data for its posts.
const CLIENT_EP_LEN: usize = 4 * PAGE;

/// Protection of register `abs` as set up (`None`: outside A's rights, fully open).
fn prot_of(abs: u32) -> RegProt {
    let rel = |w: RegWindow| abs.checked_sub(w.base).filter(|&r| r < w.len);
    match (rel(WINDOW), rel(GLOBALS)) {
        (Some(r), _) => match r {
            4 | 5 => RegProt::INDIRECT,
            6 | 7 => RegProt::READ,
            8 | 9 => RegProt::NONE,
            _ => RegProt::ALL,
        },
        (None, Some(r)) => match r {
            4 | 5 => RegProt::READ,
            6 | 7 => RegProt::NONE,
            _ => RegProt::ALL,
        },
        (None, None) => RegProt::ALL,
    }
}

/// Whether A's peer may change register `abs` (inside the window or the globals, and
/// with `WRITE` or `INDIRECT`: no instruction of A's trusts its own register names).
fn writable_reg(abs: u32) -> bool {
    let inside = |w: RegWindow| abs >= w.base && u64::from(abs) < w.end();
    let p = prot_of(abs);
    (inside(WINDOW) || inside(GLOBALS))
        && (p.contains(RegProt::WRITE) || p.contains(RegProt::INDIRECT))
}

/// `len` bytes of a pattern that differs from page to page.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// The initial contents of the client's endpoint, M, T and E2 (made once).
fn patterns() -> &'static [Vec<u8>; 4] {
    static P: std::sync::OnceLock<[Vec<u8>; 4]> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        [
            pattern(CLIENT_EP_LEN, 7),
            pattern(6 * PAGE, 1),
            pattern(PAGE, 2),
            pattern(PAGE, 3),
        ]
    })
}

/// Panics naming the first byte where `got` is not `want`.
fn same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
    panic!(
        "{what}: byte {i:#x} changed ({:#04x} to {:#04x})",
        want[i], got[i]
    );
}

/// The two hosts, their connections and what the server must keep.
struct World {
    net: Network,
    /// Connection A at the client and at the server.
    a_client: Arc<ConnShared>,
    a_server: Arc<ConnShared>,
    /// Connection B at the client.
    b_client: Arc<ConnShared>,
    client_ep: EndpointId,
    /// B's endpoint at the client: page 0 holds E2's bytes as set up (what B writes
    /// back on the path), page 1 B's last write. No peer may write it: the client's
    /// endpoint is A's target, and a retransmission reads its source again.
    b_ep: EndpointId,
    m: Arc<EndpointMemory>,
    e: EndpointId,
    t: Arc<EndpointMemory>,
    e2: Arc<EndpointMemory>,
    /// E's event queue (the host drains it).
    e_events: Arc<EventRing>,
    /// What M, T, E2 and the registers held when set up (E2: and B's write since).
    m0: Vec<u8>,
    t0: Vec<u8>,
    e20: Vec<u8>,
    regs0: Vec<u64>,
    token: Token,
    /// A read token over 4596 bytes of P (never used up: nothing cancels it).
    read_token: Token,
    /// The token's buffer once the token was used up.
    token_done: Option<Vec<u8>>,
    /// Whether the host mapped E's missing page.
    mapped: bool,
    /// Work requests posted by the client (ids).
    posted: u64,
    /// B's sealed frames seen on the path, for replays (the last few).
    b_frames: Vec<Vec<u8>>,
}

impl World {
    /// Both hosts, the server's memory and tables, and connections A and B live.
    fn new() -> World {
        let cfg = NodeConfig {
            registers: 64,
            instructions: 16,
            global_instructions: 4,
            payload_tokens: 8,
            max_connections: 16,
            window: 256,
            submit_ring: 256,
            ..NodeConfig::default()
        };
        let mut net = Network::new(2, &cfg, LinkConfig::default(), 1);
        let client_ep = net.hosts[CLIENT].endpoint(CLIENT_EP_LEN, Rights::ALL, 64);
        net.hosts[CLIENT]
            .mem(client_ep)
            .write(0, &patterns()[0])
            .expect("client memory");
        let b_ep = net.hosts[CLIENT].endpoint(2 * PAGE, Rights::NONE, 4);
        net.hosts[CLIENT]
            .mem(b_ep)
            .write(0, &patterns()[3])
            .expect("client memory");
        let client_cq = CqShared::new(256);
        let server_cq = CqShared::new(64);
        // Memory M: E and P inside it.
        let m = Arc::new(EndpointMemory::alloc_ordinary(6 * PAGE).expect("memory"));
        m.write(0, &patterns()[1]).expect("memory");
        let node = &mut net.hosts[SERVER].node;
        let mut e = EndpointEntry::new(m.clone(), PAGE, 3 * PAGE, Rights::ALL).expect("E");
        e.set_page_rights(1, Rights::REMOTE_READ).expect("page");
        e.set_page_present(2, false).expect("page");
        e.set_globals(GLOBALS);
        let e = node.endpoints.insert(e);
        let e_events = Arc::new(EventRing::new(4));
        node.set_endpoint_queues(e, e_events.clone(), Arc::new(EventRing::new(4)));
        let p = EndpointEntry::new(m.clone(), 4 * PAGE, 2 * PAGE, Rights::ALL).expect("P");
        let p = node.endpoints.insert(p);
        node.set_endpoint_queues(p, Arc::new(EventRing::new(4)), Arc::new(EventRing::new(4)));
        let read_token = node
            .tokens
            .insert_read(p, 100, PAGE as u64 + 500, 0x0ead_070c)
            .expect("read token");
        // T, with a token's buffer; E2, B's endpoint.
        let t_id = net.hosts[SERVER].endpoint(PAGE, Rights::ALL, 4);
        let t = net.hosts[SERVER].memory[t_id.0 as usize].clone();
        t.write(0, &patterns()[2]).expect("T");
        let e2_id = net.hosts[SERVER].endpoint(PAGE, Rights::ALL, 4);
        let e2 = net.hosts[SERVER].memory[e2_id.0 as usize].clone();
        e2.write(0, &patterns()[3]).expect("E2");
        let node = &mut net.hosts[SERVER].node;
        let token = node
            .tokens
            .insert(t_id, TOKEN_AT as u64, TOKEN_LEN as u64, 0x5eed_f00d)
            .expect("token");
        // Registers, and A's instructions (every operand from the message: none trusts
        // its own register names).
        for abs in 0..64 {
            node.regs
                .set(abs, u64::from(abs) * 64 + 8)
                .expect("register");
            node.regs.set_prot(abs, prot_of(abs)).expect("register");
        }
        node.regs.set(WINDOW.base, 64).expect("r0: an address");
        node.regs.set(WINDOW.base + 1, 24).expect("r1: a stride");
        let code = node.instructions.alloc(8).expect("instructions");
        let ins = |opcode, more, entry| StoredInstruction {
            opcode,
            from_message: Operands::ALL,
            entry,
            more,
            ..StoredInstruction::default()
        };
        let program = [
            ins(op::WRITE, false, true),
            ins(op::FETCH_ADD, true, true),
            ins(op::REG_OP, false, false),
            ins(op::WRITE_MASKED, false, true),
            ins(op::READ, false, true),
        ];
        for (i, p) in program.into_iter().enumerate() {
            node.instructions
                .set(code, i as u32, Some(p))
                .expect("instruction");
        }
        node.instructions
            .set_global(0, Some(ins(op::WRITE, false, true)))
            .expect("global instruction");
        let opts = ConnectOptions {
            registers: Registers::Window(WINDOW),
            instructions: code,
            report_traps: true,
            receive_window: 32,
            ..ConnectOptions::default()
        };
        let (a_client, a_server) = net
            .connect(
                CLIENT, client_ep, &client_cq, SERVER, e, &server_cq, 101, &opts,
            )
            .expect("connection A comes up");
        let (b_client, _) = net
            .connect(
                CLIENT,
                b_ep,
                &client_cq,
                SERVER,
                e2_id,
                &server_cq,
                102,
                &ConnectOptions {
                    secure: Security::On,
                    peer_key: crate::cm::PeerTrust::FirstUse,
                    ..ConnectOptions::default()
                },
            )
            .expect("connection B comes up");
        let regs0 = (0..64)
            .map(|a| net.hosts[SERVER].node.regs.get(a).expect("register"))
            .collect();
        World {
            m0: patterns()[1].clone(),
            t0: patterns()[2].clone(),
            e20: patterns()[3].clone(),
            net,
            a_client,
            a_server,
            b_client,
            client_ep,
            b_ep,
            m,
            e,
            t,
            e2,
            e_events,
            regs0,
            token,
            read_token,
            token_done: None,
            mapped: false,
            posted: 0,
            b_frames: Vec::new(),
        }
    }

    /// The addresses of a frame from the client to the server.
    fn underlay(&self, src_port: u16) -> UnderlayRepr {
        let (c, s) = (self.net.hosts[CLIENT].addr(), self.net.hosts[SERVER].addr());
        UnderlayRepr {
            src_mac: c.mac,
            dst_mac: s.mac,
            src_ip: c.ip,
            dst_ip: s.ip,
            src_port,
            dst_port: UDP_PORT,
            traffic_class: 0,
        }
    }

    /// The server's view of A: (number, key, expected sequence number, next sequence
    /// number it sends); from the set-up when A is gone.
    fn a_state(&self) -> (u32, u64, u32, u32) {
        let node = &self.net.hosts[SERVER].node;
        let number = self.a_server.number;
        let key = self.a_server.key.load(std::sync::atomic::Ordering::Relaxed);
        match node.conns.slot_of(number).and_then(|s| node.conns.get(s)) {
            Some(c) => (number, key, c.rx.expected(), c.tx.next_seq()),
            None => (number, key, 0, 0),
        }
    }

    /// Hands a frame to the server now.
    fn deliver(&mut self, frame: &[u8]) {
        let now = self.net.now;
        self.net.hosts[SERVER].node.handle_frame(frame, now);
    }

    /// One step of the input.
    fn step(&mut self, input: &mut Input<'_>) {
        match input.u8() % 16 {
            0..=5 => {
                let f = self.structured(input);
                self.deliver(&f);
            }
            6 => {
                let f = self.raw(input);
                self.deliver(&f);
            }
            7 | 8 => self.mutated(input),
            9 => {
                let f = self.cm(input);
                self.deliver(&f);
            }
            10..=12 => {
                let dt = match input.u8() {
                    b @ 0..=99 => u64::from(b) * 1_000,
                    b @ 100..=199 => u64::from(b - 99) * 50_000,
                    b => u64::from(b - 199) * 1_000_000,
                };
                self.net.run_for(dt.max(100));
            }
            13 => self.post(input),
            14 => {
                // The host repairs what a fault kept: maps E's missing page, drains E's
                // events, resumes A (which may still fault, or not be exceptioned).
                if input.bool() && !self.mapped {
                    self.check_missing_page();
                    let node = &mut self.net.hosts[SERVER].node;
                    if let Some(e) = node.endpoints.get_mut(self.e) {
                        e.set_page_present(2, true).expect("page");
                        self.mapped = true;
                    }
                }
                while self.e_events.pop().is_some() {}
                let _ = self.net.hosts[SERVER].node.resume(self.a_server.number);
            }
            _ => match input.u8() {
                0xc1 => {
                    let _ = self.net.hosts[SERVER].node.close(self.a_server.number);
                }
                0xb0..=0xbf => self.b_on_path(input),
                b => self.server_post(b, input),
            },
        }
    }

    /// A frame of connection A built from the input: its number and key (mostly),
    /// sequence numbers near the expected one, up to four messages, maybe a second
    /// section (A again, or B with a wrong key).
    fn structured(&self, input: &mut Input<'_>) -> Vec<u8> {
        let (number, key, expected, next) = self.a_state();
        let shape = input.u8();
        let mut header = self.header(input, shape, number, key, expected, next);
        let mut buf = vec![0u8; crate::sim::MAX_FRAME];
        let port = 49152 | u16::from(input.u8());
        let mut w = FrameWriter::new(&mut buf, &self.underlay(port), &header).expect("frame");
        let n = input.below(5);
        for _ in 0..n {
            let (c, p) = self.message(input);
            if w.push(&c, &p).is_err() {
                break;
            }
        }
        if shape & 0x40 != 0 {
            header.dst_conn = if shape & 0x80 != 0 {
                self.b_number()
            } else {
                number
            };
            header.seq = header.seq.wrapping_add(u32::from(n));
            if w.begin_section(&header, 2) {
                for _ in 0..input.below(3) {
                    let (c, p) = self.message(input);
                    if w.push(&c, &p).is_err() {
                        break;
                    }
                }
            }
        }
        let len = w.finish();
        buf.truncate(len);
        buf
    }

    fn b_number(&self) -> u32 {
        let peer = self
            .b_client
            .peer_conn
            .load(std::sync::atomic::Ordering::Relaxed);
        peer as u32
    }

    /// A transport header for A from the input.
    fn header(
        &self,
        input: &mut Input<'_>,
        shape: u8,
        number: u32,
        key: u64,
        expected: u32,
        next: u32,
    ) -> TransportRepr {
        let near = |input: &mut Input<'_>, base: u32| match input.u8() {
            b @ 0..=0xef => base.wrapping_add((b as i8) as u32),
            _ => input.u32(),
        };
        let seq = near(input, expected);
        let ack = near(input, next);
        TransportRepr {
            flags: match shape & 3 {
                0 => hflags::ACK,
                1 => 0,
                2 => hflags::ACK | hflags::ACK_REQ,
                _ => input.u8() & !hflags::MORE,
            },
            cells: 0,
            dst_conn: if shape & 4 != 0 { input.u32() } else { number },
            key: if shape & 8 != 0 {
                key ^ input.u64()
            } else {
                key
            },
            seq,
            ack,
            credits: input.u16(),
            acked: (expected.wrapping_add(u32::from(input.u8()))).wrapping_sub(128) as u16,
            src_conn: self.a_client.number,
        }
    }

    /// A message from the input: an opcode of every kind, operands aimed at E's pages
    /// and A's registers, a payload of the length the operation takes (mostly).
    fn message(&self, input: &mut Input<'_>) -> (ControlRepr, Vec<u8>) {
        const OPS: [u8; 13] = [
            op::WRITE,
            op::WRITE_MASKED,
            op::READ,
            op::FETCH_ADD,
            op::CMP_SWAP,
            op::REG_OP,
            op::EXCEPTION,
            op::INVOKE,
            op::TOKEN_WRITE,
            op::NAK,
            op::SACK,
            op::WRITE,
            op::TOKEN_READ,
        ];
        let pick = input.u8();
        let opcode = if pick < 0xf0 {
            OPS[usize::from(pick) % OPS.len()]
        } else {
            input.u8()
        };
        let shape = input.u8();
        let mut fl = input.u8();
        if shape & 0x80 == 0 {
            // Mostly flags that make sense: LAST, an address mode, COMPOUND.
            fl &= flags::LAST | flags::COMPOUND | flags::ADDR_MASK | flags::REG_TARGET;
        }
        let operand = match input.u8() {
            b @ 0..=0xbf => u32::from(b) * 64 + u32::from(input.u8() & 7) * 8,
            _ => input.u32(),
        };
        // Register names: mostly inside the window or the globals.
        let name = |b: u8| {
            if b & 0x80 != 0 {
                128 + (b & 15)
            } else {
                b & 31
            }
        };
        let regs = [
            name(input.u8()),
            name(input.u8()),
            name(input.u8()),
            name(input.u8()),
        ];
        let mut payload = Vec::new();
        if fl & flags::COMPOUND != 0 && opcode != op::INVOKE {
            payload.extend_from_slice(&input.array::<8>());
        }
        let mut index = u32::from_be_bytes(regs);
        let body = match opcode {
            op::WRITE_MASKED => 32,
            op::READ => {
                let reply = ControlRepr {
                    opcode: op::WRITE,
                    flags: flags::REPLY | flags::LAST,
                    length: u32::from(input.u16() % 5000),
                    ..ControlRepr::default()
                };
                let mut b = [0u8; 16];
                reply.emit(&mut crate::wire::ControlPacket::new_unchecked(&mut b[..]));
                payload.extend_from_slice(&b);
                0
            }
            op::FETCH_ADD => 8,
            op::CMP_SWAP => 16,
            op::REG_OP | op::EXCEPTION | op::NAK | op::SACK => 0,
            op::INVOKE => {
                fl &= flags::LAST | flags::INVOKE_REGS | flags::INVOKE_RETURNS;
                index = u32::from(input.below(9)) | if shape & 1 != 0 { GLOBAL_IP } else { 0 };
                if fl & flags::INVOKE_REGS != 0 {
                    payload.extend_from_slice(&crate::oplogic::invoke_regs(regs));
                }
                usize::from(input.u8() % 64)
            }
            op::TOKEN_WRITE => {
                // Mostly the write token; sometimes the read token (refused: a read
                // token never writes P), either maybe forged.
                let t = self.pick_token(shape & 4 != 0, shape & 2 != 0, input);
                payload.extend_from_slice(&t.to_be_bytes());
                fl &= flags::LAST;
                usize::from(input.u8())
            }
            op::TOKEN_READ => {
                // Mostly the read token; sometimes the write token (refused), either
                // maybe forged; an offset near its range, the reply's control part.
                let t = self.pick_token(shape & 4 == 0, shape & 2 != 0, input);
                payload.extend_from_slice(&t.to_be_bytes());
                let offset = match input.u8() {
                    b @ 0..=0xef => u64::from(b) * 32,
                    _ => input.u64(),
                };
                payload.extend_from_slice(&offset.to_be_bytes());
                let reply = ControlRepr {
                    opcode: op::WRITE,
                    flags: flags::REPLY,
                    length: u32::from(input.u16() % 6000),
                    ..ControlRepr::default()
                };
                let mut b = [0u8; 16];
                reply.emit(&mut crate::wire::ControlPacket::new_unchecked(&mut b[..]));
                payload.extend_from_slice(&b);
                fl &= flags::LAST;
                0
            }
            _ => usize::from(input.u8()) * 4,
        };
        let body = if shape & 0x40 != 0 {
            usize::from(input.u8())
        } else {
            body
        };
        let data = input.bytes(body);
        payload.extend_from_slice(data);
        payload.resize(payload.len() + body - data.len(), 0x3c);
        let control = ControlRepr {
            opcode,
            mask: input.u8(),
            flags: fl,
            operand,
            index,
            length: payload.len() as u32,
        };
        (control, payload)
    }

    /// The read token (`read`) or the write token, its key changed by the input when
    /// `forged`.
    fn pick_token(&self, read: bool, forged: bool, input: &mut Input<'_>) -> u64 {
        let t = if read { self.read_token } else { self.token };
        if forged {
            t.0 ^ u64::from(input.u32())
        } else {
            t.0
        }
    }

    /// A raw frame from the input, maybe with the right underlay and sealed.
    fn raw(&self, input: &mut Input<'_>) -> Vec<u8> {
        let mode = input.u8();
        let len = usize::from(input.u16()) % (crate::sim::MAX_FRAME + 1);
        let mut f = input.bytes(len).to_vec();
        if mode & 0x80 != 0 && f.len() >= UNDERLAY_LEN {
            self.underlay(49152)
                .emit(&mut UnderlayPacket::new_unchecked(&mut f[..]), 0);
        }
        fix_up(&mut f, mode);
        f
    }

    /// Posts a request of the client's on A, takes the client's frames, mutates them as
    /// the input says and hands them to the server (sealed again or not).
    fn mutated(&mut self, input: &mut Input<'_>) {
        self.post(input);
        let now = self.net.now;
        let h = &mut self.net.hosts[CLIENT];
        h.node.set_now(now);
        h.node.poll_transmit(now, &mut h.out);
        let frames: Vec<Vec<u8>> = std::iter::from_fn(|| h.out.pop()).collect();
        for mut f in frames {
            let mode = input.u8();
            for _ in 0..input.below(4) {
                let at = usize::from(input.u16()) % f.len();
                f[at] ^= input.u8();
            }
            fix_up(&mut f, mode);
            self.deliver(&f);
        }
    }

    /// The client writes E2's own bytes into E2 on B (so nothing changes when each
    /// write lands as sent); what goes on the wire meanwhile reaches the server changed,
    /// dropped, replayed or as sent, as the input says. A frame changed on the path
    /// must not open: E2 is checked at the end.
    fn b_on_path(&mut self, input: &mut Input<'_>) {
        let at = usize::from(input.u16()) % (PAGE - 512);
        let len = 1 + usize::from(input.u16()) % 512;
        self.posted += 1;
        let wr = Wqe::write(
            self.posted,
            Source::Endpoint {
                id: self.b_ep,
                offset: at as u64,
            },
            len as u32,
            at as u32,
        );
        let _ = sim::post(&self.b_client, wr);
        let now = self.net.now;
        let h = &mut self.net.hosts[CLIENT];
        h.node.set_now(now);
        h.node.poll_transmit(now, &mut h.out);
        let frames: Vec<Vec<u8>> = std::iter::from_fn(|| h.out.pop()).collect();
        for f in frames {
            match input.u8() % 5 {
                0 => {}
                1 => {
                    self.deliver(&f);
                    self.deliver(&f);
                }
                2 => {
                    let mut g = f.clone();
                    for _ in 0..1 + input.below(4) {
                        let at = usize::from(input.u16()) % g.len();
                        g[at] ^= input.u8() | 1;
                    }
                    fix_up(&mut g, input.u8());
                    self.deliver(&g);
                    self.deliver(&f);
                }
                3 => {
                    if let Some(old) = self.b_frames.get(usize::from(input.u8()) % 8) {
                        let old = old.clone();
                        self.deliver(&old);
                    }
                    self.deliver(&f);
                }
                _ => self.deliver(&f),
            }
            if self.b_frames.len() == 8 {
                self.b_frames.remove(0);
            }
            self.b_frames.push(f);
        }
    }

    /// The client posts a request of its own on A (into E or not).
    fn post(&mut self, input: &mut Input<'_>) {
        let kind = input.u8();
        let len = u32::from(input.u16() % 6000);
        let remote = u32::from(input.u16() % (4 * PAGE as u16));
        let local = u64::from(input.u16() % (2 * PAGE as u16));
        self.posted += 1;
        let mut wr = Wqe::write(
            self.posted,
            Source::Endpoint {
                id: self.client_ep,
                offset: local,
            },
            len,
            remote,
        );
        wr.flags = WR_SIGNALED;
        match kind % 5 {
            0 => {}
            1 => {
                wr.opcode = WrOpcode::Read;
                wr.source = Source::None;
                wr.result = Some((self.client_ep, 2 * PAGE as u64 + local % PAGE as u64));
            }
            4 => {
                let token = self.pick_token(kind & 0x80 == 0, kind & 0x40 != 0, input);
                wr.opcode = WrOpcode::TokenRead {
                    token,
                    offset: u64::from(remote % (2 * PAGE as u32)),
                };
                wr.source = Source::None;
                wr.len = len.min(PAGE as u32);
                wr.result = Some((self.client_ep, 2 * PAGE as u64 + local % PAGE as u64));
            }
            2 => {
                wr.opcode = WrOpcode::FetchAdd { add: input.u64() };
                wr.source = Source::None;
                wr.len = 8;
                wr.remote.operand &= !7;
                wr.result = Some((self.client_ep, 3 * PAGE as u64));
            }
            _ => {
                wr.len = len.min(32);
                wr.source = Source::Inline(input.array());
            }
        }
        let _ = sim::post(&self.a_client, wr);
    }

    /// The server posts a request of its own on A, its data from (and a read's or
    /// atomic's result into) E's first page: what a forged reply may aim at.
    fn server_post(&mut self, kind: u8, input: &mut Input<'_>) {
        let len = u32::from(input.u16() % 2048);
        let local = u64::from(input.u16() % (PAGE as u16 - 2048)) & !7;
        let remote = u32::from(input.u16() % (4 * PAGE as u16));
        let mut wr = Wqe::write(
            0,
            Source::Endpoint {
                id: self.e,
                offset: local,
            },
            len,
            remote,
        );
        match kind % 3 {
            0 => {}
            1 => {
                wr.opcode = WrOpcode::Read;
                wr.source = Source::None;
                wr.result = Some((self.e, local));
            }
            _ => {
                wr.opcode = WrOpcode::CmpSwap {
                    compare: input.u64(),
                    swap: input.u64(),
                };
                wr.source = Source::None;
                wr.len = 8;
                wr.remote.operand &= !7;
                wr.result = Some((self.e, local));
            }
        }
        let _ = sim::post(&self.a_server, wr);
    }

    /// A connection-management frame: a message of each kind with A's numbers and key
    /// in its fields, bytes of the input mixed in.
    fn cm(&self, input: &mut Input<'_>) -> Vec<u8> {
        const CM: [u8; 6] = [
            op::CM_DISCONNECT_REQ,
            op::CM_CONNECT_REQ,
            op::CM_CONNECT_REP,
            op::CM_REJECT,
            op::CM_DISCONNECT_REP,
            op::CM_CHALLENGE,
        ];
        let (number, key, expected, _) = self.a_state();
        let opcode = CM[usize::from(input.u8()) % CM.len()];
        let mut p = Vec::with_capacity(CM_PAYLOAD_MAX);
        p.extend_from_slice(&number.to_be_bytes());
        p.extend_from_slice(&key.to_be_bytes());
        p.extend_from_slice(&self.a_client.number.to_be_bytes());
        p.extend_from_slice(&expected.to_be_bytes());
        p.extend_from_slice(&self.net.hosts[CLIENT].addr().mac);
        p.resize(34, 0);
        let len = usize::from(input.u8()) % (CM_PAYLOAD_MAX + 8);
        p.resize(len, 0);
        for b in p.iter_mut().take(usize::from(input.u8() % 40)) {
            *b ^= input.u8();
        }
        let shape = input.u8();
        let header = TransportRepr {
            flags: if shape & 1 != 0 { hflags::CM } else { 0 },
            dst_conn: if shape & 2 != 0 { input.u32() } else { 0 },
            key: if shape & 4 != 0 { input.u64() } else { 0 },
            ..TransportRepr::default()
        };
        let control = ControlRepr {
            opcode,
            operand: input.u32(),
            index: if shape & 8 != 0 { input.u32() } else { 101 },
            length: p.len() as u32,
            ..ControlRepr::default()
        };
        let mut buf = vec![0u8; crate::sim::MAX_FRAME];
        let mut w = FrameWriter::new(&mut buf, &self.underlay(49152), &header).expect("frame");
        let _ = w.push(&control, &p);
        let len = w.finish();
        buf.truncate(len);
        buf
    }

    /// Asserts the token's buffer is as it was, or as left by the token's one use, that
    /// the read token is still outstanding, and that no register outside A's rights
    /// changed: after every step.
    fn check_step(&mut self) {
        let end = TOKEN_AT + TOKEN_LEN;
        let mut buf = [0u8; TOKEN_LEN];
        self.t.read(TOKEN_AT, &mut buf).expect("T");
        let used = self.net.hosts[SERVER].node.tokens.lookup(self.token) == TokenMatch::None;
        match &self.token_done {
            Some(was) => same(&buf, was, "the token's buffer after its use"),
            None if used => self.token_done = Some(buf.to_vec()),
            None => same(&buf, &self.t0[TOKEN_AT..end], "the unused token's buffer"),
        }
        let tokens = &self.net.hosts[SERVER].node.tokens;
        assert!(
            matches!(tokens.lookup(self.read_token), TokenMatch::Valid(_)),
            "the read token was used up"
        );
        let regs = &self.net.hosts[SERVER].node.regs;
        for abs in 0..64u32 {
            if !writable_reg(abs) {
                let v = regs.get(abs).expect("register");
                assert_eq!(v, self.regs0[abs as usize], "register {abs} changed");
            }
        }
    }

    /// E's missing page (before the host maps it).
    fn check_missing_page(&self) {
        let mut page = vec![0; PAGE];
        self.m.read(3 * PAGE, &mut page).expect("memory");
        same(&page, &self.m0[3 * PAGE..4 * PAGE], "E's missing page");
    }

    /// Asserts nothing outside A's rights changed (see the module doc). Protected bytes
    /// cannot change and change back (nothing may write them), so this runs at the
    /// end; the token's buffer and the registers after every step (`World::check_step`).
    fn check(&mut self) {
        self.check_step();
        let mut m = vec![0; self.m.len()];
        self.m.read(0, &mut m).expect("memory");
        same(&m[..PAGE], &self.m0[..PAGE], "memory before E");
        same(
            &m[2 * PAGE..3 * PAGE],
            &self.m0[2 * PAGE..3 * PAGE],
            "E's read-only page",
        );
        if !self.mapped {
            self.check_missing_page();
        }
        same(&m[4 * PAGE..], &self.m0[4 * PAGE..], "endpoint P");
        let mut t = vec![0; self.t.len()];
        self.t.read(0, &mut t).expect("T");
        same(
            &t[..TOKEN_AT],
            &self.t0[..TOKEN_AT],
            "T before the token's buffer",
        );
        let end = TOKEN_AT + TOKEN_LEN;
        same(&t[end..], &self.t0[end..], "T after the token's buffer");
        let mut e2 = vec![0; self.e2.len()];
        self.e2.read(0, &mut e2).expect("E2");
        same(&e2, &self.e20, "B's endpoint");
    }

    /// B, which the input could not name, completes a write, verified.
    fn finish(&mut self) {
        self.net.run_for(1_000_000);
        self.check();
        let data = pattern(100, 0x77);
        self.net.hosts[CLIENT]
            .mem(self.b_ep)
            .write(PAGE, &data)
            .expect("client memory");
        let mut wr = Wqe::write(
            u64::MAX,
            Source::Endpoint {
                id: self.b_ep,
                offset: PAGE as u64,
            },
            100,
            300,
        );
        wr.flags = WR_SIGNALED;
        assert!(sim::post(&self.b_client, wr), "B takes no post");
        let cq = self.b_client.cq.clone();
        let mut done = None;
        self.net.run_until(2 * HZ, |_| {
            while let Some(c) = cq.pop() {
                if c.wr_id == u64::MAX {
                    done = Some(c);
                }
            }
            done.is_some()
        });
        let c = done.expect("B's write completes");
        assert_eq!(c.status, WcStatus::Success, "B's write: {c:?}");
        let mut got = vec![0; 100];
        self.e2.read(300, &mut got).expect("E2");
        assert_eq!(got, data, "B's write landed otherwise");
        self.e20[300..400].copy_from_slice(&data);
        self.check();
    }
}

/// Fuzz target: a sequence of steps into the server (see the module doc).
pub fn node(data: &[u8]) {
    let mut input = Input::new(data);
    let mut w = World::new();
    let mut steps = 0;
    while !input.is_empty() && steps < MAX_STEPS {
        w.step(&mut input);
        w.check_step();
        steps += 1;
    }
    w.finish();
}
