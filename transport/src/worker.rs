//! The poll loop: the "network interface" of one node, driven by one core.
//!
//! ```text
//! poll():  rx burst -> parse -> (connection, key, sequence) -> oplogic -> NAK/ACK
//!          service send queues -> frames of cells -> tx burst
//!          timers (retransmission, connection management)
//! ```
//! The worker owns the port, the tables and the TLB; applications reach it through
//! lock-free queues in [`ConnShared`] / [`CqShared`] for the fast path, and through
//! `&mut Worker` (behind the device's mutex) for the control path. It runs either on a
//! dedicated thread or inline, when the application's poll calls drive it.
//!
//! Delivery here is in order with cumulative acknowledgements, NAKs for refused
//! messages and go-back-N retransmission on timeout, bounded by a retry limit. (The
//! selective, credit-based machine of DESIGN.md §5 replaces this later.) Nothing on the
//! per-frame path allocates, locks or makes a syscall.

use std::collections::HashMap;
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use crate::connection::{
    seq_lt, Completion, ConnShared, ConnState, ConnTable, Connection, CqShared, Pending, Source,
    WcStatus, WorkRequest, WrOpcode, WR_SIGNALED,
};
use crate::oplogic::{self, DropReason, RemoteStatus, TlbAccess};
use crate::port::{rdtsc, Mbuf, Port, RxBatch, TxBatch};
use crate::tables::{EndpointId, EndpointTable, NodeAddr, NodeId, NodeTable};
use crate::tlb::{Tlb, TlbStats};
use crate::wire::{
    self, flags as cflags, hflags, op, ControlRepr, FrameView, FrameWriter, TransportRepr,
    UnderlayRepr, WireError,
};

/// How far behind the expected sequence number a message still counts as a
/// retransmitted duplicate (acknowledged again); anything else out of order is refused.
pub const DUPLICATE_WINDOW: u32 = 1 << 20;

/// Worker tunables.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This node's address (MAC defaults to the port's when all zero).
    pub local: NodeAddr,
    /// Retransmission timeout.
    pub retry_timeout_us: u64,
    /// Retransmissions of the same data before the connection goes to error.
    pub retry_count: u32,
    /// Interval between connection-management retries.
    pub cm_retry_us: u64,
    /// Give up connecting/closing after this long.
    pub cm_timeout_us: u64,
    /// Most unacknowledged messages per connection.
    pub window: u32,
    /// Most connections this node accepts.
    pub max_connections: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            local: NodeAddr::from_ip([10, 0, 0, 1], wire::UDP_PORT),
            retry_timeout_us: 20_000,
            retry_count: 7,
            cm_retry_us: 50_000,
            cm_timeout_us: 5_000_000,
            window: 4096,
            max_connections: 4096,
        }
    }
}

/// Counters of one worker (plain integers: only the worker writes them; readers copy
/// them under the device lock).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub frames_rx: u64,
    pub frames_tx: u64,
    pub cells_rx: u64,
    pub cells_tx: u64,
    /// Frame bytes received / sent (Ethernet header to CRC trailer).
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    /// Payload bytes of the messages sent (first transmissions and retransmissions).
    pub bytes_payload_tx: u64,
    /// Messages executed (deposited) here.
    pub msgs_rx: u64,
    /// Messages sent (first transmissions and retransmissions).
    pub msgs_tx: u64,
    /// Payload bytes deposited into local endpoints.
    pub bytes_deposited: u64,
    pub acks_tx: u64,
    pub naks_tx: u64,
    pub naks_rx: u64,
    pub retransmits: u64,
    pub duplicates: u64,
    /// Times the tx burst could not take every frame (back-pressure).
    pub tx_stalls: u64,
    pub drops: [u64; DropReason::COUNT],
    pub tlb: TlbStats,
}

impl Stats {
    #[inline]
    pub fn drop_for(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }
    /// Drop count of one reason.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }
}

/// The drop reason for a frame that failed validation.
pub fn wire_drop_reason(e: &WireError) -> DropReason {
    match e {
        WireError::BadCrc { .. } => DropReason::BadCrc,
        WireError::BadCheck { .. } => DropReason::BadCheck,
        WireError::BadVersion(_) => DropReason::BadVersion,
        WireError::Truncated { .. } | WireError::BadLength { .. } => DropReason::Truncated,
        _ => DropReason::NotOurs,
    }
}

/// A service waiting for connection requests.
pub struct Listener {
    pub service: u32,
    pub endpoint: EndpointId,
    pub cq: Arc<CqShared>,
    pub sq_depth: usize,
    /// Connections accepted by the worker, waiting for the application's `accept`.
    pub accepted: Arc<ArrayQueue<Arc<ConnShared>>>,
}

/// One node's network interface.
pub struct Worker {
    pub(crate) cfg: WorkerConfig,
    pub endpoints: EndpointTable,
    pub nodes: NodeTable,
    pub conns: ConnTable,
    pub(crate) tlb: Tlb,
    pub(crate) listeners: HashMap<u32, Listener>,
    /// (peer ip, peer connection) -> our connection, to answer repeated requests.
    pub(crate) cm_accepted: HashMap<([u8; 4], u32), u32>,
    pub stats: Stats,
    rx: RxBatch,
    pub(crate) tx: TxBatch,
    /// Connection slots owing an acknowledgement since an earlier turn: sent by this
    /// turn's `flush_acks` unless a data frame carried it first.
    ack_list: Vec<usize>,
    /// Connection slots that started owing one this turn. Waiting a turn lets the
    /// application's reply (a ping-pong write) carry the acknowledgement.
    ack_new: Vec<usize>,
    pub(crate) tsc_hz: u64,
    pub(crate) segment_max: u32,
    next_timer: u64,
    /// Diagnostic frames queued by [`Worker::send_raw`].
    raw_tx: Vec<Vec<u8>>,
    /// Last: fields drop in order, and the batches above hold mbufs of its mempool.
    pub(crate) port: Port,
}

/// Largest payload of one message in a frame of `max_frame` bytes.
pub fn segment_max_for(max_frame: usize) -> u32 {
    let cells = wire::max_cells(max_frame);
    if cells == 0 {
        return 0;
    }
    (wire::BLOCK_LEN + wire::CELL_LEN * (cells - 1)) as u32
}

impl Worker {
    /// A worker over an open port.
    pub fn new(port: Port, mut cfg: WorkerConfig) -> Worker {
        if cfg.local.mac == [0; 6] {
            cfg.local.mac = port.mac();
        }
        let segment_max = segment_max_for(port.max_frame());
        let mut nodes = NodeTable::new();
        nodes.insert(cfg.local);
        Worker {
            port,
            cfg,
            endpoints: EndpointTable::new(),
            nodes,
            conns: ConnTable::new(),
            tlb: Tlb::new(),
            listeners: HashMap::new(),
            cm_accepted: HashMap::new(),
            stats: Stats::default(),
            rx: RxBatch::default(),
            tx: TxBatch::default(),
            ack_list: Vec::with_capacity(1024),
            ack_new: Vec::with_capacity(1024),
            tsc_hz: crate::port::tsc_hz(),
            segment_max,
            next_timer: 0,
            raw_tx: Vec::new(),
        }
    }

    /// This node's address.
    pub fn local(&self) -> NodeAddr {
        self.cfg.local
    }
    pub fn config(&self) -> &WorkerConfig {
        &self.cfg
    }
    /// The port.
    pub fn port(&self) -> &Port {
        &self.port
    }
    /// Largest payload of one message.
    pub fn segment_max(&self) -> u32 {
        self.segment_max
    }
    /// Counters, with the TLB's.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.tlb = self.tlb.stats();
        s
    }

    pub(crate) fn us_to_tsc(&self, us: u64) -> u64 {
        us.saturating_mul(self.tsc_hz) / 1_000_000
    }

    /// One turn of the loop; returns how much work it found (frames in + frames out).
    pub fn poll(&mut self) -> usize {
        let now = rdtsc();
        let n = self.port.rx(&mut self.rx);
        while let Some(m) = self.rx.next() {
            self.handle_frame(&m, now);
        }
        self.service_send_queues(now);
        self.flush_acks();
        if now >= self.next_timer {
            self.next_timer = now + self.us_to_tsc(200);
            self.run_timers(now);
        }
        let queued = self.tx.len();
        let sent = self.port.tx(&mut self.tx);
        if sent < queued {
            self.stats.tx_stalls += 1;
        }
        self.stats.frames_tx += sent as u64;
        n + sent
    }

    fn handle_frame(&mut self, m: &Mbuf, now: u64) {
        let (data, contiguous) = m.frame();
        if !contiguous {
            self.stats.drop_for(DropReason::Truncated);
            return;
        }
        let frame = match FrameView::parse(data) {
            Ok(f) => f,
            Err(e) => {
                self.stats.drop_for(wire_drop_reason(&e));
                return;
            }
        };
        self.stats.frames_rx += 1;
        self.stats.cells_rx += frame.header.cells as u64;
        self.stats.bytes_rx += data.len() as u64;
        if frame.header.flags & hflags::CM != 0 || frame.header.dst_conn == 0 {
            self.handle_cm(&frame, now);
            return;
        }
        let Some(slot) = self.conns.slot_of(frame.header.dst_conn) else {
            self.stats.drop_for(DropReason::UnknownConnection);
            return;
        };
        let conn = self.conns.get_mut(slot).expect("slot from map");
        if frame.header.key != conn.key {
            self.stats.drop_for(DropReason::WrongKey);
            return;
        }
        if conn.state != ConnState::Normal {
            self.stats.drop_for(DropReason::UnknownConnection);
            return;
        }

        let mut seq = frame.header.seq;
        let mut arrivals = 0u64;
        let mut executed = false;
        for msg in frame.messages() {
            let m = match msg {
                Ok(m) => m,
                Err(e) => {
                    // The rest of the frame cannot be decoded; refuse the message at
                    // this sequence number (once) and stop.
                    self.stats.drop_for(wire_drop_reason(&e));
                    if seq == conn.rx_expected
                        && conn.push_nak(seq, RemoteStatus::RemoteOperationError)
                    {
                        conn.rx_expected = seq.wrapping_add(1);
                        executed = true;
                    }
                    break;
                }
            };
            if m.control.opcode == op::NAK {
                self.stats.naks_rx += 1;
                apply_nak(conn, m.control.operand, m.control.index);
                continue;
            }
            if seq != conn.rx_expected {
                if seq_lt(seq, conn.rx_expected)
                    && conn.rx_expected.wrapping_sub(seq) <= DUPLICATE_WINDOW
                {
                    // Already executed (a retransmission): acknowledge again.
                    self.stats.duplicates += 1;
                    seq = seq.wrapping_add(1);
                    executed = true;
                    continue;
                }
                self.stats.drop_for(DropReason::OutOfSequence);
                executed = true;
                break;
            }
            let Some(ep) = self.endpoints.get(conn.endpoint) else {
                self.stats.drop_for(DropReason::AccessDenied);
                break;
            };
            let mut access = TlbAccess::new(conn.endpoint, ep, &mut self.tlb);
            match oplogic::execute(&m.control, m.payload, &mut access) {
                Ok(_) => {
                    self.stats.bytes_deposited += m.payload.len() as u64;
                }
                Err(trap) => {
                    if !conn.push_nak(seq, trap.status()) {
                        // NAK list full: leave this message for the retransmission.
                        break;
                    }
                    self.stats.drop_for(trap.reason());
                }
            }
            self.stats.msgs_rx += 1;
            if m.control.flags & cflags::LAST != 0 {
                arrivals += 1;
            }
            seq = seq.wrapping_add(1);
            conn.rx_expected = seq;
            executed = true;
        }
        if arrivals > 0 {
            // The worker is the only writer: a plain load and a release store (no
            // locked instruction) publish the count after the deposits it counts.
            let a = &conn.shared.arrivals;
            a.store(
                a.load(std::sync::atomic::Ordering::Relaxed) + arrivals,
                std::sync::atomic::Ordering::Release,
            );
        }
        if executed && !conn.ack_pending {
            conn.ack_pending = true;
            self.ack_new.push(slot);
        }
        if frame.header.flags & hflags::ACK != 0 {
            process_ack(conn, frame.header.ack, now);
        }
    }

    /// Sends one acknowledgement frame (with any NAKs) per connection that needs one.
    fn flush_acks(&mut self) {
        if self.ack_list.is_empty() {
            std::mem::swap(&mut self.ack_list, &mut self.ack_new);
            return;
        }
        let mut i = 0;
        while i < self.ack_list.len() {
            if self.tx.is_full() && self.port.tx(&mut self.tx) == 0 {
                // Keep the rest for the next turn.
                self.ack_list.drain(..i);
                self.ack_list.append(&mut self.ack_new);
                return;
            }
            let slot = self.ack_list[i];
            i += 1;
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if !conn.ack_pending {
                continue;
            }
            let Some(mut mbuf) = self.port.alloc() else {
                self.stats.drop_for(DropReason::NoBuffer);
                self.ack_list.drain(..i - 1);
                self.ack_list.append(&mut self.ack_new);
                return;
            };
            let max = self.port.max_frame();
            let hdr = ack_header(conn, 0);
            let underlay = conn_underlay(&self.cfg.local, &self.nodes, conn);
            let room = &mut mbuf.room_mut()[..max];
            let Ok(mut w) = FrameWriter::new(room, &underlay, &hdr) else {
                continue;
            };
            let mut pushed = 0;
            for k in 0..conn.nnaks {
                let (seq, status) = conn.naks[k];
                let c = ControlRepr {
                    opcode: op::NAK,
                    operand: seq,
                    index: status as u32,
                    ..Default::default()
                };
                if w.push(&c, &[]).is_err() {
                    break;
                }
                pushed += 1;
            }
            conn.naks.copy_within(pushed..conn.nnaks, 0);
            conn.nnaks -= pushed;
            self.stats.naks_tx += pushed as u64;
            self.stats.cells_tx += pushed as u64;
            if conn.nnaks == 0 {
                conn.ack_pending = false;
            } else {
                i -= 1; // more NAKs for this connection: another frame
            }
            let len = w.finish();
            mbuf.set_len(len);
            self.stats.acks_tx += 1;
            self.stats.bytes_tx += len as u64;
            let _ = self.tx.push(mbuf);
        }
        self.ack_list.clear();
        std::mem::swap(&mut self.ack_list, &mut self.ack_new);
    }

    /// Sends every owed acknowledgement now (before a disconnect request, so the peer
    /// learns that its last messages ran before it hears the connection is gone).
    pub(crate) fn flush_acks_now(&mut self) {
        self.ack_list.append(&mut self.ack_new);
        self.flush_acks();
        self.ack_list.append(&mut self.ack_new);
        self.flush_acks();
    }

    /// Turns posted work requests into frames, connection by connection.
    fn service_send_queues(&mut self, now: u64) {
        for q in self.raw_tx.drain(..) {
            if let Some(mut m) = self.port.alloc() {
                let n = q.len().min(m.room_mut().len());
                m.room_mut()[..n].copy_from_slice(&q[..n]);
                m.set_len(n);
                if let Err(m) = self.tx.push(m) {
                    drop(m);
                }
            }
        }
        for slot in 0..self.conns.slots() {
            if self.tx.is_full() && self.port.tx(&mut self.tx) == 0 {
                return;
            }
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            match conn.state {
                ConnState::Normal => {}
                ConnState::Error | ConnState::Closed => {
                    flush_queue(conn);
                    continue;
                }
                _ => continue,
            }
            admit_work(conn, &self.endpoints);
            while seq_lt(conn.tx_cursor, conn.tx_next) {
                if self.tx.is_full() && self.port.tx(&mut self.tx) == 0 {
                    break;
                }
                let Some(mut mbuf) = self.port.alloc() else {
                    self.stats.drop_for(DropReason::NoBuffer);
                    break;
                };
                if conn.tx_cursor == conn.tx_acked {
                    conn.last_progress = now;
                }
                let max = self.port.max_frame();
                let underlay = conn_underlay(&self.cfg.local, &self.nodes, conn);
                let hdr = data_header(conn);
                let room = &mut mbuf.room_mut()[..max];
                let Ok(mut w) = FrameWriter::new(room, &underlay, &hdr) else {
                    break;
                };
                let (sent, bytes, resent) = fill_frame(conn, &mut w, &self.endpoints);
                if sent == 0 {
                    break;
                }
                self.stats.msgs_tx += sent as u64;
                self.stats.retransmits += resent as u64;
                self.stats.cells_tx += w.cells() as u64;
                self.stats.bytes_payload_tx += bytes;
                let len = w.finish();
                self.stats.bytes_tx += len as u64;
                mbuf.set_len(len);
                if conn.nnaks == 0 {
                    conn.ack_pending = false; // piggy-backed
                }
                let _ = self.tx.push(mbuf);
            }
        }
    }

    fn run_timers(&mut self, now: u64) {
        let rto_base = self.us_to_tsc(self.cfg.retry_timeout_us);
        for slot in 0..self.conns.slots() {
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if conn.state == ConnState::Normal
                && !conn.inflight.is_empty()
                && seq_lt(conn.tx_acked, conn.tx_cursor)
                // Exponential back-off: the n-th retry waits rto * 2^n (capped at 2^6),
                // so a briefly starved peer is not declared dead by a tight timer.
                && now.saturating_sub(conn.last_progress) > rto_base << conn.retries.min(6)
            {
                conn.retries += 1;
                if conn.retries > self.cfg.retry_count {
                    fail_connection(conn, WcStatus::RetryExceeded);
                } else {
                    conn.tx_cursor = conn.tx_acked;
                    conn.last_progress = now;
                }
            }
        }
        self.cm_timers(now);
    }

    /// Queues a raw frame for transmission as is (diagnostics and hostile-input tests).
    pub fn send_raw(&mut self, frame: &[u8]) {
        self.raw_tx.push(frame.to_vec());
    }

    /// The UDP source port of a connection (spreads connections over RSS queues).
    pub(crate) fn src_port_for(number: u32) -> u16 {
        49152 | (number as u16 & 0x3fff)
    }
}

fn conn_underlay(local: &NodeAddr, nodes: &NodeTable, conn: &Connection) -> UnderlayRepr {
    let peer = nodes.get(conn.peer).copied().unwrap_or(*local);
    UnderlayRepr {
        src_mac: local.mac,
        dst_mac: peer.mac,
        src_ip: local.ip,
        dst_ip: peer.ip,
        src_port: Worker::src_port_for(conn.number),
        dst_port: peer.udp_port,
    }
}

fn ack_header(conn: &Connection, cells: u16) -> TransportRepr {
    TransportRepr {
        flags: hflags::ACK,
        cells,
        dst_conn: conn.peer_conn,
        key: conn.peer_key,
        seq: conn.tx_next,
        ack: conn.rx_expected,
        credits: 0,
        src_conn: conn.number,
    }
}

fn data_header(conn: &Connection) -> TransportRepr {
    TransportRepr {
        seq: conn.tx_cursor,
        ..ack_header(conn, 0)
    }
}

/// Moves work requests from the application's send queue into flight, within the
/// window. Requests whose local source is invalid complete at once.
fn admit_work(conn: &mut Connection, endpoints: &EndpointTable) {
    while conn.tx_next.wrapping_sub(conn.tx_acked) < conn.window {
        // `is_empty` is two plain loads; `pop` on an empty queue also pays a full
        // fence, so never pop to find out that the queue is empty.
        if conn.shared.sq.is_empty() {
            break;
        }
        let Some(wr) = conn.shared.sq.pop() else {
            break;
        };
        if let Source::Endpoint { id, offset } = wr.source {
            let ok = endpoints.get(id).is_some_and(|e| {
                offset
                    .checked_add(wr.len as u64)
                    .is_some_and(|end| end <= e.len())
            });
            if !ok {
                complete(conn, &wr, WcStatus::LocalProtectionError);
                continue;
            }
        }
        let segments = conn.segments_for(wr.len);
        conn.inflight.push_back(Pending {
            wr,
            first_seq: conn.tx_next,
            segments,
            status: WcStatus::Success,
            replied: false,
        });
        conn.tx_next = conn.tx_next.wrapping_add(segments);
    }
}

/// Puts messages from `tx_cursor` on into the frame; returns (messages, payload bytes,
/// messages that were sent before: retransmissions).
fn fill_frame(
    conn: &mut Connection,
    w: &mut FrameWriter<'_>,
    endpoints: &EndpointTable,
) -> (u32, u64, u32) {
    let Some((mut idx, mut seg)) = conn.locate(conn.tx_cursor) else {
        return (0, 0, 0);
    };
    let mut sent = 0u32;
    let mut resent = 0u32;
    let mut bytes = 0u64;
    while idx < conn.inflight.len() {
        let p = &conn.inflight[idx];
        let wr = p.wr;
        let seg_off = seg * conn.segment_max;
        let seg_len = (wr.len - seg_off.min(wr.len)).min(conn.segment_max);
        let last = seg + 1 == p.segments;
        let (control, len) = match wr.opcode {
            WrOpcode::Write => (
                ControlRepr {
                    opcode: op::WRITE,
                    mask: 0,
                    flags: if last { cflags::LAST } else { 0 },
                    operand: wr.remote.operand.wrapping_add(seg_off),
                    index: 0,
                    length: seg_len,
                },
                seg_len,
            ),
            WrOpcode::WriteMasked { mask } => (
                ControlRepr {
                    opcode: op::WRITE_MASKED,
                    mask,
                    flags: cflags::LAST,
                    operand: wr.remote.operand,
                    index: 0,
                    length: wire::BLOCK_LEN as u32,
                },
                wire::BLOCK_LEN as u32,
            ),
            // Issue 3 in progress: the other operations are built by `message`.
            _ => break,
        };
        if !w.fits(len) {
            break;
        }
        let pushed = w.push_with(&control, |dst| match wr.source {
            Source::Inline(data) => {
                let n = dst.len().min(32);
                dst[..n].copy_from_slice(&data[..n]);
            }
            Source::None => dst.fill(0),
            Source::Endpoint { id, offset } => {
                if let Some(e) = endpoints.get(id) {
                    let _ = e
                        .memory()
                        .read(e.offset() + (offset + seg_off as u64) as usize, dst);
                }
            }
        });
        if pushed.is_err() {
            break;
        }
        sent += 1;
        bytes += len as u64;
        if seq_lt(conn.tx_cursor, conn.tx_sent_max) {
            resent += 1;
        }
        conn.tx_cursor = conn.tx_cursor.wrapping_add(1);
        if seq_lt(conn.tx_sent_max, conn.tx_cursor) {
            conn.tx_sent_max = conn.tx_cursor;
        }
        seg += 1;
        if seg == conn.inflight[idx].segments {
            idx += 1;
            seg = 0;
        }
    }
    (sent, bytes, resent)
}

fn apply_nak(conn: &mut Connection, seq: u32, code: u32) {
    let status = RemoteStatus::from_u8(code as u8).unwrap_or(RemoteStatus::RemoteInvalidRequest);
    if let Some((idx, _)) = conn.locate(seq) {
        let p = &mut conn.inflight[idx];
        if p.status == WcStatus::Success {
            p.status = WcStatus::from_remote(status);
        }
    }
}

/// Cumulative acknowledgement: everything before `ack` arrived and ran.
fn process_ack(conn: &mut Connection, ack: u32, now: u64) {
    if !seq_lt(conn.tx_acked, ack) || seq_lt(conn.tx_next, ack) {
        return; // old, or acknowledges what was never sent
    }
    conn.tx_acked = ack;
    conn.retries = 0;
    conn.last_progress = now;
    while let Some(p) = conn.inflight.front() {
        let end = p.first_seq.wrapping_add(p.segments);
        if seq_lt(ack, end) {
            break;
        }
        let p = conn.inflight.pop_front().expect("front exists");
        complete(conn, &p.wr, p.status);
    }
    if seq_lt(conn.tx_cursor, ack) {
        conn.tx_cursor = ack;
    }
}

fn complete(conn: &Connection, wr: &WorkRequest, status: WcStatus) {
    if status != WcStatus::Success || wr.flags & WR_SIGNALED != 0 {
        conn.shared.cq.push(Completion {
            wr_id: wr.wr_id,
            status,
            opcode: wr.opcode,
            byte_len: wr.len,
            conn: conn.number,
        });
    }
}

/// Completes everything still queued on a connection that is no longer usable.
fn flush_queue(conn: &mut Connection) {
    while let Some(p) = conn.inflight.pop_front() {
        complete(conn, &p.wr, WcStatus::Flushed);
    }
    while let Some(wr) = conn.shared.sq.pop() {
        complete(conn, &wr, WcStatus::Flushed);
    }
}

/// Moves a connection to error: the request that failed completes with `status`,
/// everything else outstanding is flushed.
pub(crate) fn fail_connection(conn: &mut Connection, status: WcStatus) {
    conn.state = ConnState::Error;
    conn.shared.set_state(ConnState::Error);
    if let Some(p) = conn.inflight.pop_front() {
        complete(conn, &p.wr, status);
    }
    flush_queue(conn);
}

/// Node id of an address, learning it if new.
pub(crate) fn learn_node(nodes: &mut NodeTable, addr: NodeAddr) -> NodeId {
    match nodes.find_ip(addr.ip) {
        Some(id) if nodes.get(id) == Some(&addr) => id,
        _ => nodes.insert(addr),
    }
}
