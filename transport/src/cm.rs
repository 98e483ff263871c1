//! Connection management over reserved connection 0 (DESIGN.md §7; MINI's kernel
//! channel, the patent's boot-time connection).
//!
//! A small request/response protocol, each message one cell in a frame flagged `CM`
//! with destination connection 0 and key 0:
//!
//! ```text
//! CONNECT_REQ     operand = request id, index = service
//!                 payload: client conn u32 | client key u64 | client ISN u32 | max frame u32
//! CONNECT_REP     operand = request id
//!                 payload: server conn u32 | server key u64 | server ISN u32 | max frame u32 | client conn u32
//! REJECT          operand = request id, index = reason; payload: client conn u32
//! DISCONNECT_REQ  payload: target conn u32 | target key u64 | sender conn u32 | ack u32
//! DISCONNECT_REP  payload: sender conn u32
//! ```
//! Requests are retried until answered or until the CM timeout; the server answers a
//! repeated request with the same reply (it remembers (peer address, peer connection)),
//! so loss and duplication cannot create two connections. A disconnect request carries
//! the closing side's cumulative acknowledgement (like TCP's FIN with its ACK): the
//! peer's requests that ran before the close complete successfully even when the last
//! acknowledgement frame was lost; only the rest is flushed. Connection numbers, keys and
//! initial sequence numbers are random. The requesting node's address is learned
//! from the request frame into the node address table.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use crate::connection::{
    random_u32, random_u64, ConnShared, ConnState, Connection, CqShared, Priority, MAX_PENDING_NAKS,
};
use crate::node::{
    complete_ready, fail_connection, learn_node, process_ack, segment_max_for, FrameBuf, Link,
    Listener, Node,
};
use crate::oplogic::{DropReason, RemoteStatus};
use crate::reliability::{Receiver, Sender, SACK_BITS};
use crate::tables::{EndpointId, NodeAddr, NodeId, RegWindow};
use crate::wire::{
    self, hflags, op, ControlRepr, FrameView, FrameWriter, TransportRepr, UnderlayRepr,
};

/// Why a connection request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[repr(u8)]
pub enum RejectReason {
    #[error("no answer from the peer before the connection-management timeout")]
    Timeout = 0,
    #[error("no listener for that service at the peer")]
    NoListener = 1,
    #[error("the peer is out of connection resources")]
    Resources = 2,
}

impl RejectReason {
    pub fn from_u8(v: u8) -> RejectReason {
        match v {
            1 => RejectReason::NoListener,
            2 => RejectReason::Resources,
            _ => RejectReason::Timeout,
        }
    }
}

/// Errors of the connection-management calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    #[error("service {0} already has a listener")]
    ServiceInUse(u32),
    #[error("endpoint {0:?} does not exist")]
    NoEndpoint(EndpointId),
    #[error("connection limit reached ({0})")]
    TooManyConnections(usize),
    #[error("connection {0} does not exist")]
    NoConnection(u32),
    #[error("register window: {0}")]
    Registers(#[from] crate::tables::TableError),
}

/// Decoded CM message payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    ConnectReq {
        request: u32,
        service: u32,
        conn: u32,
        key: u64,
        isn: u32,
        max_frame: u32,
    },
    ConnectRep {
        request: u32,
        conn: u32,
        key: u64,
        isn: u32,
        max_frame: u32,
        client_conn: u32,
    },
    Reject {
        request: u32,
        reason: RejectReason,
        client_conn: u32,
    },
    DisconnectReq {
        target: u32,
        key: u64,
        sender: u32,
        /// Everything the target sent before this sequence number ran at the sender.
        ack: u32,
    },
    DisconnectRep {
        sender: u32,
    },
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl CmMessage {
    /// Decodes one CM message; `None` for anything malformed (counted by the caller).
    pub fn parse(c: &ControlRepr, p: &[u8]) -> Option<CmMessage> {
        Some(match c.opcode {
            op::CM_CONNECT_REQ => CmMessage::ConnectReq {
                request: c.operand,
                service: c.index,
                conn: be32(p, 0)?,
                key: be64(p, 4)?,
                isn: be32(p, 12)?,
                max_frame: be32(p, 16)?,
            },
            op::CM_CONNECT_REP => CmMessage::ConnectRep {
                request: c.operand,
                conn: be32(p, 0)?,
                key: be64(p, 4)?,
                isn: be32(p, 12)?,
                max_frame: be32(p, 16)?,
                client_conn: be32(p, 20)?,
            },
            op::CM_REJECT => CmMessage::Reject {
                request: c.operand,
                reason: RejectReason::from_u8(c.index as u8),
                client_conn: be32(p, 0)?,
            },
            op::CM_DISCONNECT_REQ => CmMessage::DisconnectReq {
                target: be32(p, 0)?,
                key: be64(p, 4)?,
                sender: be32(p, 12)?,
                ack: be32(p, 16)?,
            },
            op::CM_DISCONNECT_REP => CmMessage::DisconnectRep {
                sender: be32(p, 0)?,
            },
            _ => return None,
        })
    }

    /// Encodes into a control part and a payload buffer; returns the payload length.
    pub fn emit(&self, p: &mut [u8; 32]) -> (ControlRepr, usize) {
        let mut c = ControlRepr::default();
        let len = match *self {
            CmMessage::ConnectReq {
                request,
                service,
                conn,
                key,
                isn,
                max_frame,
            } => {
                c.opcode = op::CM_CONNECT_REQ;
                c.operand = request;
                c.index = service;
                p[0..4].copy_from_slice(&conn.to_be_bytes());
                p[4..12].copy_from_slice(&key.to_be_bytes());
                p[12..16].copy_from_slice(&isn.to_be_bytes());
                p[16..20].copy_from_slice(&max_frame.to_be_bytes());
                20
            }
            CmMessage::ConnectRep {
                request,
                conn,
                key,
                isn,
                max_frame,
                client_conn,
            } => {
                c.opcode = op::CM_CONNECT_REP;
                c.operand = request;
                p[0..4].copy_from_slice(&conn.to_be_bytes());
                p[4..12].copy_from_slice(&key.to_be_bytes());
                p[12..16].copy_from_slice(&isn.to_be_bytes());
                p[16..20].copy_from_slice(&max_frame.to_be_bytes());
                p[20..24].copy_from_slice(&client_conn.to_be_bytes());
                24
            }
            CmMessage::Reject {
                request,
                reason,
                client_conn,
            } => {
                c.opcode = op::CM_REJECT;
                c.operand = request;
                c.index = reason as u32;
                p[0..4].copy_from_slice(&client_conn.to_be_bytes());
                4
            }
            CmMessage::DisconnectReq {
                target,
                key,
                sender,
                ack,
            } => {
                c.opcode = op::CM_DISCONNECT_REQ;
                p[0..4].copy_from_slice(&target.to_be_bytes());
                p[4..12].copy_from_slice(&key.to_be_bytes());
                p[12..16].copy_from_slice(&sender.to_be_bytes());
                p[16..20].copy_from_slice(&ack.to_be_bytes());
                20
            }
            CmMessage::DisconnectRep { sender } => {
                c.opcode = op::CM_DISCONNECT_REP;
                p[0..4].copy_from_slice(&sender.to_be_bytes());
                4
            }
        };
        c.length = len as u32;
        (c, len)
    }
}

/// The register window a new connection gives its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Registers {
    /// None: messages naming a connection register are refused.
    #[default]
    None,
    /// This window (connections may share or overlap windows).
    Window(RegWindow),
    /// A fresh window of this many registers per connection, released with it.
    PerConnection(u32),
}

/// Options of a new connection (the receiving side's view of its peer).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Depth of the connection's send queue.
    pub sq_depth: usize,
    /// Send priority of what this side posts.
    pub priority: Priority,
    pub registers: Registers,
    /// Whether the peer may force interrupts (cond ALWAYS, software exceptions).
    pub allow_forced_interrupts: bool,
    /// Whether refused messages are also reported on the endpoint's event queue.
    pub report_traps: bool,
    /// The instruction window the peer's instruction pointers name (from
    /// `Node::instructions`; empty: none).
    pub instructions: RegWindow,
    /// Isolation mode: only instruction-pointer messages are taken from the peer.
    pub isolated: bool,
    /// Messages kept when they arrive ahead of a gap (selective repeat; at most
    /// `reliability::SACK_BITS`; 0: refused, the sender goes back to the gap).
    pub receive_window: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            sq_depth: 4096,
            priority: Priority::Low,
            registers: Registers::None,
            allow_forced_interrupts: true,
            report_traps: false,
            instructions: RegWindow::EMPTY,
            isolated: false,
            receive_window: SACK_BITS,
        }
    }
}

impl Node {
    fn unused_conn_number(&self) -> u32 {
        loop {
            let n = random_u32();
            if !self.conns.contains(n) {
                return n;
            }
        }
    }

    fn new_connection(
        &mut self,
        endpoint: EndpointId,
        peer: NodeId,
        shared: Arc<ConnShared>,
        opts: &ConnectOptions,
    ) -> Result<Connection, CmError> {
        let window = match opts.registers {
            Registers::None => RegWindow::EMPTY,
            Registers::Window(w) => w,
            Registers::PerConnection(n) => self.regs.alloc(n)?,
        };
        let isn = random_u32();
        let key = random_u64();
        shared.key.store(key, std::sync::atomic::Ordering::Relaxed);
        Ok(Connection {
            number: shared.number,
            key,
            endpoint,
            peer,
            peer_conn: 0,
            peer_key: 0,
            state: ConnState::Connecting,
            shared,
            segment_max: self.segment_max,
            priority: opts.priority,
            regs: window,
            allow_forced_interrupts: opts.allow_forced_interrupts,
            report_traps: opts.report_traps,
            instructions: opts.instructions,
            isolated: opts.isolated,
            held: None,
            rx: Receiver::new(0, opts.receive_window),
            reorder: std::collections::BTreeMap::new(),
            read_replies: Default::default(),
            rx_request: None,
            unreported: std::collections::VecDeque::new(),
            ack_pending: false,
            last_rx: self.now,
            last_probe: 0,
            probes_unanswered: 0,
            naks: [(0, RemoteStatus::Ok); MAX_PENDING_NAKS],
            nnaks: 0,
            refusals: Default::default(),
            tx: Sender::new(
                isn,
                self.us_to_ticks(self.cfg.retry_timeout_us),
                self.cfg.retry_count,
            )
            .with_max_bytes_in_flight(self.cfg.max_inflight_bytes)
            .with_min_rto(self.us_to_ticks(self.cfg.min_retry_timeout_us)),
            isn,
            tx_sent_high: isn,
            inflight: std::collections::VecDeque::with_capacity(self.cfg.window as usize),
            window: self.cfg.window,
            rnr_until: 0,
            rnr_retries: 0,
            rnr_retry_limit: self.cfg.rnr_retry_count,
            rnr_timeout: self.us_to_ticks(self.cfg.rnr_timeout_us),
            cm_request: 0,
            cm_deadline: 0,
            cm_next_retry: 0,
            cm_tries: 0,
            service: 0,
            closing: false,
            timer_armed: u64::MAX,
            owned_regs: matches!(opts.registers, Registers::PerConnection(_)).then_some(window),
        })
    }

    /// Removes a connection's entry, releasing a register window made for it.
    pub(crate) fn remove_connection(&mut self, number: u32) -> Option<Connection> {
        let c = self.conns.remove(number)?;
        for wc in &c.unreported {
            // The last chance for completions still waiting for room.
            if c.shared.cq.push(*wc).is_err() {
                c.shared.cq.overflows.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(w) = c.owned_regs {
            let _ = self.regs.free(w);
        }
        self.credits = self.credit_grant();
        Some(c)
    }

    /// Starts connecting to `service` at `peer`; the returned shared state turns
    /// `Normal` when the peer accepts, `Failed` when it refuses or times out.
    pub fn connect(
        &mut self,
        peer: NodeAddr,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
    ) -> Result<Arc<ConnShared>, CmError> {
        if self.endpoints.get(endpoint).is_none() {
            return Err(CmError::NoEndpoint(endpoint));
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(CmError::TooManyConnections(self.cfg.max_connections));
        }
        let peer_id = learn_node(&mut self.nodes, peer);
        let shared = ConnShared::new(self.unused_conn_number(), opts.sq_depth, cq);
        let mut c = self.new_connection(endpoint, peer_id, shared.clone(), opts)?;
        let now = self.now;
        c.cm_request = random_u32();
        c.service = service;
        c.cm_deadline = now + self.us_to_ticks(self.cfg.cm_timeout_us);
        // Sent now and once more soon (a first frame is the likeliest to meet a link
        // still coming up), then every `cm_retry_us`.
        c.cm_next_retry = now + self.timer_tick;
        self.insert_connection(c);
        self.send_connect_req(shared.number);
        Ok(shared)
    }

    /// Accepts connections to `service` into `endpoint`.
    pub fn listen(
        &mut self,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
        backlog: usize,
    ) -> Result<Arc<ArrayQueue<Arc<ConnShared>>>, CmError> {
        if self.endpoints.get(endpoint).is_none() {
            return Err(CmError::NoEndpoint(endpoint));
        }
        if self.listeners.contains_key(&service) {
            return Err(CmError::ServiceInUse(service));
        }
        let accepted = Arc::new(ArrayQueue::new(backlog.max(1)));
        self.listeners.insert(
            service,
            Listener {
                service,
                endpoint,
                cq,
                opts: opts.clone(),
                accepted: accepted.clone(),
            },
        );
        Ok(accepted)
    }

    /// Stops accepting on `service`.
    pub fn unlisten(&mut self, service: u32) {
        self.listeners.remove(&service);
    }

    /// Closes a connection: outstanding work is flushed, the peer is told (with
    /// retries), and the entry goes when the peer answers or the CM timeout passes.
    pub fn close(&mut self, number: u32) -> Result<(), CmError> {
        self.ack_now();
        let slot = self
            .conns
            .slot_of(number)
            .ok_or(CmError::NoConnection(number))?;
        let now = self.now;
        let deadline = now + self.us_to_ticks(self.cfg.cm_timeout_us);
        let conn = self.conns.get_mut(slot).expect("slot");
        let was_normal = conn.state == ConnState::Normal;
        if conn.state == ConnState::Normal || conn.state == ConnState::Error {
            fail_connection(conn, crate::connection::WcStatus::Flushed);
        }
        conn.state = ConnState::Closed;
        conn.shared.set_state(ConnState::Closed);
        if !was_normal || conn.peer_conn == 0 {
            self.remove_connection(number);
            return Ok(());
        }
        conn.closing = true;
        conn.cm_deadline = deadline;
        conn.cm_next_retry = now + self.timer_tick;
        self.rearm(slot);
        self.send_disconnect_req(number);
        Ok(())
    }

    /// Queues a message for the next transmission.
    fn cm_frame(&mut self, to: &NodeAddr, msg: &CmMessage) {
        self.cm_out.push_back((*to, *msg));
    }

    /// Sends the queued connection-management messages, one frame each.
    pub(crate) fn send_cm<L: Link>(&mut self, link: &mut L) {
        while let Some((to, msg)) = self.cm_out.pop_front() {
            if link.full(false) {
                // The rest waits for the next transmission.
                self.cm_out.push_front((to, msg));
                return;
            }
            self.send_cm_frame(link, &to, &msg);
        }
    }

    fn send_cm_frame<L: Link>(&mut self, link: &mut L, to: &NodeAddr, msg: &CmMessage) {
        let Some(mut m) = link.alloc() else {
            self.stats.drop_for(DropReason::NoBuffer);
            return;
        };
        let underlay = UnderlayRepr {
            src_mac: self.cfg.local.mac,
            dst_mac: to.mac,
            src_ip: self.cfg.local.ip,
            dst_ip: to.ip,
            src_port: wire::UDP_PORT,
            dst_port: to.udp_port,
        };
        let hdr = TransportRepr {
            flags: hflags::CM,
            ..Default::default()
        };
        let max = self.caps.max_frame;
        let mut payload = [0u8; 32];
        let (c, len) = msg.emit(&mut payload);
        let Ok(mut w) = FrameWriter::new(&mut m.room_mut()[..max], &underlay, &hdr) else {
            return;
        };
        if w.push(&c, &payload[..len]).is_err() {
            return;
        }
        let n = w.finish();
        m.set_len(n);
        self.stats.bytes_tx += n as u64;
        if link.push(m, false) {
            self.stats.frames_tx += 1;
        }
    }

    fn send_connect_req(&mut self, number: u32) {
        let Some(slot) = self.conns.slot_of(number) else {
            return;
        };
        let c = self.conns.get(slot).expect("slot");
        let msg = CmMessage::ConnectReq {
            request: c.cm_request,
            service: c.service,
            conn: c.number,
            key: c.key,
            isn: c.isn,
            max_frame: self.caps.max_frame as u32,
        };
        let to = self.nodes.get(c.peer).copied();
        if let Some(to) = to {
            self.cm_frame(&to, &msg);
        }
    }

    fn send_disconnect_req(&mut self, number: u32) {
        let Some(slot) = self.conns.slot_of(number) else {
            return;
        };
        let c = self.conns.get(slot).expect("slot");
        let msg = CmMessage::DisconnectReq {
            target: c.peer_conn,
            key: c.peer_key,
            sender: c.number,
            // Never past a refusal the peer may not know of.
            ack: c.ack_point(),
        };
        if let Some(to) = self.nodes.get(c.peer).copied() {
            self.cm_frame(&to, &msg);
        }
    }

    /// Adds a connection: its timer armed, the credits shared out again.
    fn insert_connection(&mut self, c: Connection) {
        let slot = self.conns.insert(c);
        self.credits = self.credit_grant();
        self.rearm(slot);
    }

    /// The connection-management timer of a connection connecting or closing: a
    /// retry when due, the end when past its deadline. Returns false when the
    /// connection went.
    pub(crate) fn cm_timer(&mut self, number: u32, now: u64) -> bool {
        let retry = self.us_to_ticks(self.cfg.cm_retry_us);
        let Some(slot) = self.conns.slot_of(number) else {
            return false;
        };
        let c = self.conns.get_mut(slot).expect("slot");
        if now >= c.cm_deadline {
            let c = self.remove_connection(number).expect("present");
            if !c.closing {
                c.shared
                    .fail_reason
                    .store(RejectReason::Timeout as u8, Ordering::Relaxed);
                c.shared.set_state(ConnState::Failed);
            }
            return false;
        }
        if now >= c.cm_next_retry {
            c.cm_next_retry = now + retry;
            c.cm_tries += 1;
            if c.closing {
                self.send_disconnect_req(number);
            } else {
                self.send_connect_req(number);
            }
        }
        true
    }

    /// Handles a frame addressed to connection 0.
    pub(crate) fn handle_cm(&mut self, frame: &FrameView<'_>, _now: u64) {
        let from = NodeAddr {
            mac: frame.underlay.src_mac,
            ip: frame.underlay.src_ip,
            udp_port: wire::UDP_PORT,
        };
        for m in frame.messages() {
            let Ok(m) = m else {
                self.stats.drop_for(DropReason::BadCheck);
                return;
            };
            let Some(msg) = CmMessage::parse(&m.control, m.payload) else {
                self.stats.drop_for(DropReason::BadLength);
                continue;
            };
            self.handle_cm_message(&from, msg);
        }
    }

    fn handle_cm_message(&mut self, from: &NodeAddr, msg: CmMessage) {
        match msg {
            CmMessage::ConnectReq {
                request,
                service,
                conn,
                key,
                isn,
                max_frame,
            } => {
                let reject = |reason| CmMessage::Reject {
                    request,
                    reason,
                    client_conn: conn,
                };
                if let Some(&ours) = self.cm_accepted.get(&(from.ip, conn)) {
                    if let Some(slot) = self.conns.slot_of(ours) {
                        let c = self.conns.get(slot).expect("slot");
                        let rep = CmMessage::ConnectRep {
                            request,
                            conn: c.number,
                            key: c.key,
                            isn: c.isn,
                            max_frame: self.caps.max_frame as u32,
                            client_conn: conn,
                        };
                        self.cm_frame(from, &rep);
                        return;
                    }
                    self.cm_accepted.remove(&(from.ip, conn));
                }
                let Some(l) = self.listeners.get(&service) else {
                    self.cm_frame(from, &reject(RejectReason::NoListener));
                    return;
                };
                if self.conns.len() >= self.cfg.max_connections || l.accepted.is_full() {
                    self.cm_frame(from, &reject(RejectReason::Resources));
                    return;
                }
                let (endpoint, cq, lopts, accepted) =
                    (l.endpoint, l.cq.clone(), l.opts.clone(), l.accepted.clone());
                let peer = learn_node(&mut self.nodes, *from);
                let shared = ConnShared::new(self.unused_conn_number(), lopts.sq_depth, cq);
                let mut c = match self.new_connection(endpoint, peer, shared.clone(), &lopts) {
                    Ok(c) => c,
                    Err(_) => {
                        self.cm_frame(from, &reject(RejectReason::Resources));
                        return;
                    }
                };
                c.peer_conn = conn;
                c.peer_key = key;
                c.rx = Receiver::new(isn, c.rx.window());
                c.segment_max = c.segment_max.min(segment_max_for(max_frame as usize));
                c.state = ConnState::Normal;
                shared
                    .peer_conn
                    .store(conn as u64, std::sync::atomic::Ordering::Relaxed);
                shared.set_state(ConnState::Normal);
                let rep = CmMessage::ConnectRep {
                    request,
                    conn: c.number,
                    key: c.key,
                    isn: c.isn,
                    max_frame: self.caps.max_frame as u32,
                    client_conn: conn,
                };
                self.cm_accepted.insert((from.ip, conn), c.number);
                self.insert_connection(c);
                let _ = accepted.push(shared);
                self.cm_frame(from, &rep);
            }
            CmMessage::ConnectRep {
                request,
                conn,
                key,
                isn,
                max_frame,
                client_conn,
            } => {
                let Some(slot) = self.conns.slot_of(client_conn) else {
                    return;
                };
                let c = self.conns.get_mut(slot).expect("slot");
                if c.state != ConnState::Connecting || c.cm_request != request {
                    return; // a duplicate reply
                }
                c.peer_conn = conn;
                c.peer_key = key;
                c.rx = Receiver::new(isn, c.rx.window());
                c.segment_max = c.segment_max.min(segment_max_for(max_frame as usize));
                c.state = ConnState::Normal;
                c.shared
                    .peer_conn
                    .store(conn as u64, std::sync::atomic::Ordering::Relaxed);
                c.shared.set_state(ConnState::Normal);
            }
            CmMessage::Reject {
                request,
                reason,
                client_conn,
            } => {
                let Some(slot) = self.conns.slot_of(client_conn) else {
                    return;
                };
                let c = self.conns.get(slot).expect("slot");
                if c.state != ConnState::Connecting || c.cm_request != request {
                    return;
                }
                let c = self.remove_connection(client_conn).expect("present");
                c.shared
                    .fail_reason
                    .store(reason as u8, std::sync::atomic::Ordering::Relaxed);
                c.shared.set_state(ConnState::Failed);
            }
            CmMessage::DisconnectReq {
                target,
                key,
                sender,
                ack,
            } => {
                if let Some(slot) = self.conns.slot_of(target) {
                    let c = self.conns.get_mut(slot).expect("slot");
                    if c.key == key {
                        // What ran at the peer completes; the rest is flushed.
                        if matches!(c.state, ConnState::Normal | ConnState::Exceptioned) {
                            let now = self.now;
                            process_ack(c, ack, &crate::reliability::SeqBits::default(), now);
                            complete_ready(c);
                        }
                        fail_connection(c, crate::connection::WcStatus::Flushed);
                        c.state = ConnState::Closed;
                        c.shared.set_state(ConnState::Closed);
                        self.cm_accepted.retain(|_, v| *v != target);
                        self.remove_connection(target);
                    } else {
                        self.stats.drop_for(DropReason::WrongKey);
                        return;
                    }
                }
                self.cm_frame(from, &CmMessage::DisconnectRep { sender });
            }
            CmMessage::DisconnectRep { sender } => {
                if let Some(slot) = self.conns.slot_of(sender) {
                    if self.conns.get(slot).is_some_and(|c| c.closing) {
                        self.remove_connection(sender);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_messages_round_trip() {
        let msgs = [
            CmMessage::ConnectReq {
                request: 7,
                service: 18515,
                conn: 0xdead_beef,
                key: 0x0123_4567_89ab_cdef,
                isn: 42,
                max_frame: 9014,
            },
            CmMessage::ConnectRep {
                request: 7,
                conn: 1,
                key: 2,
                isn: 3,
                max_frame: 1514,
                client_conn: 4,
            },
            CmMessage::Reject {
                request: 9,
                reason: RejectReason::NoListener,
                client_conn: 5,
            },
            CmMessage::DisconnectReq {
                target: 1,
                key: 2,
                sender: 3,
                ack: 4,
            },
            CmMessage::DisconnectRep { sender: 3 },
        ];
        for m in msgs {
            let mut p = [0u8; 32];
            let (c, len) = m.emit(&mut p);
            assert_eq!(c.length as usize, len);
            assert_eq!(CmMessage::parse(&c, &p[..len]), Some(m));
            // Short payloads are refused, not misread.
            if len > 0 {
                assert_eq!(CmMessage::parse(&c, &p[..len - 1]), None);
            }
        }
        let c = ControlRepr {
            opcode: op::WRITE,
            ..Default::default()
        };
        assert_eq!(CmMessage::parse(&c, &[0; 32]), None);
    }
}
