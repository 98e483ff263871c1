//! The poll loop: the "network interface" of one node, driven by one core.
//!
//! ```text
//! poll():  [high-priority sends] -> rx burst (high queue first) -> parse
//!          -> (connection, key, sequence) -> oplogic -> NAK/ACK
//!          service send queues (high, then low round-robin) -> frames of cells -> tx burst
//!          timers (retransmission, keepalive, connection management)
//! ```
//! The worker owns the port, the tables and the TLB; applications reach it through
//! lock-free queues in [`ConnShared`] / [`CqShared`] for the fast path, and through
//! `&mut Worker` (behind the device's mutex) for the control path. It runs either on a
//! dedicated thread or inline, when the application's poll calls drive it.
//!
//! Delivery is the sans-IO machine of [`crate::reliability`]: in-order execution,
//! cumulative plus selective acknowledgements, NAKs for refused messages, selective
//! retransmission on a gap or on the adaptive timer, credits and a cap on unacknowledged
//! bulk bytes, keepalive probes for idle connections. Messages that arrive ahead of a
//! gap are kept (a copy: the loss path) or, for later segments of a large write,
//! placed at once. Nothing on the in-order per-frame path allocates, locks or makes a
//! syscall.
//!
//! * `recv`: frames in — sequence, operation logic (plan, then commit), replies to
//!   reads and atomics, events, exceptions and their repair ([`Worker::resume`]).
//! * `send`: frames out — work requests into messages, acknowledgements and NAKs,
//!   completions.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

mod recv;
mod send;

pub use recv::ResumeError;
pub(crate) use send::{complete_ready, fail_connection, process_ack};

use crate::connection::{ConnShared, ConnState, ConnTable, CqShared, WcStatus};
use crate::events::EventQueue;
use crate::faults::{FaultConfig, FaultStats, Faults, Hold, Verdict};
use crate::oplogic::DropReason;
use crate::port::{rdtsc, Mbuf, Port, RxBatch, TxBatch, HIGH_QUEUE};
use crate::reliability::Timeout;
use crate::tables::{EndpointId, EndpointTable, NodeAddr, NodeId, NodeTable, RegisterFile};
use crate::tlb::{Tlb, TlbStats};
use crate::wire::{self, WireError};

/// How far behind the expected sequence number a message still counts as a
/// retransmitted duplicate (acknowledged again); anything else out of order is refused.
pub const DUPLICATE_WINDOW: u32 = 1 << 20;

/// Worker tunables.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This node's address (MAC defaults to the port's when all zero).
    pub local: NodeAddr,
    /// Retransmission timeout: the ceiling of the adaptive one, and the unit of the
    /// give-up budget (`retry_count` back-offs of it).
    pub retry_timeout_us: u64,
    /// Floor of the adaptive retransmission timeout (srtt + 4 rttvar from measured
    /// round trips); the timers are checked at half this period.
    pub min_retry_timeout_us: u64,
    /// Retransmissions of the same data before the connection goes to error.
    pub retry_count: u32,
    /// Interval between connection-management retries.
    pub cm_retry_us: u64,
    /// Give up connecting/closing after this long.
    pub cm_timeout_us: u64,
    /// Most unacknowledged messages per connection.
    pub window: u32,
    /// Most unacknowledged bytes of first transmissions per connection (a
    /// bandwidth-delay-product cap: it bounds what one connection queues in the port
    /// ahead of the others' — and the high-priority — messages).
    pub max_inflight_bytes: u64,
    /// Most connections this node accepts.
    pub max_connections: usize,
    /// Address registers in the node-wide file.
    pub registers: u32,
    /// Instruction slots in the node's instruction memory (for connection windows).
    pub instructions: u32,
    /// Global instructions (shared by every connection).
    pub global_instructions: u32,
    /// Entries of the payload table (outstanding payload tokens).
    pub payload_tokens: u32,
    /// First receiver-not-ready back-off (doubles per retry, capped at 64x).
    pub rnr_timeout_us: u64,
    /// Receiver-not-ready retries before the connection goes to error (never infinite,
    /// unlike verbs' rnr_retry = 7).
    pub rnr_retry_count: u32,
    /// An idle connection that heard nothing from its peer for this long sends a
    /// liveness probe (an acknowledgement request), again every period; after
    /// `keepalive_count` unanswered probes it goes to error (a half-open connection:
    /// the peer crashed or forgot it). Busy connections have the retransmission timer.
    pub keepalive_us: u64,
    pub keepalive_count: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            local: NodeAddr::from_ip([10, 0, 0, 1], wire::UDP_PORT),
            retry_timeout_us: 20_000,
            min_retry_timeout_us: 100,
            retry_count: 7,
            cm_retry_us: 50_000,
            cm_timeout_us: 5_000_000,
            window: 4096,
            max_inflight_bytes: 1 << 20,
            max_connections: 4096,
            registers: 65536,
            instructions: 4096,
            global_instructions: 256,
            payload_tokens: 4096,
            rnr_timeout_us: 200,
            rnr_retry_count: 64,
            keepalive_us: 5_000_000,
            keepalive_count: 5,
        }
    }
}

/// Counters of one worker (plain integers: only the worker writes them; readers copy
/// them under the device lock).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub frames_rx: u64,
    /// Of those, frames taken from the high-priority queue.
    pub frames_rx_high: u64,
    /// Low-priority sending cut short for high-priority work (posted or arrived).
    pub low_yields: u64,
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
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Mbufs of the port's pool in use when the counters were read.
    pub mbufs_in_use: u64,
    /// Liveness probes sent to silent idle peers, and connections failed because the
    /// peer stayed silent (half-open).
    pub keepalive_probes: u64,
    pub keepalive_failures: u64,
    /// Messages kept because they arrived ahead of a gap.
    pub reordered: u64,
    /// Of those, segments placed on arrival (no copy kept).
    pub placed_ahead: u64,
    pub duplicates: u64,
    /// Events posted to endpoint event queues.
    pub events: u64,
    /// Replies (read data, atomic old values) sent.
    pub replies_tx: u64,
    /// Messages held for the host to repair (page not present, event queue full).
    pub faults: u64,
    /// Receiver-not-ready NAKs received (the peer was exceptioned).
    pub rnr_rx: u64,
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

/// When a frame held by the fault layer goes on.
#[derive(Debug, Clone, Copy)]
enum Release {
    AfterFrames(u64),
    At(u64),
}

/// A frame held by the fault layer.
struct HeldFrame {
    m: Mbuf,
    release: Release,
    cap: u64,
}

/// The host-facing queues of one endpoint.
#[derive(Clone)]
pub struct EndpointQueues {
    /// "Interrupt at end" and software exceptions.
    pub events: Arc<EventQueue>,
    /// Refused messages (connections with `report_traps`) and held faults.
    pub exceptions: Arc<EventQueue>,
}

/// The queues of endpoint `id` in a worker's table of them (indexed by endpoint).
#[inline]
fn queues_of(queues: &[Option<EndpointQueues>], id: EndpointId) -> Option<&EndpointQueues> {
    queues.get(id.0 as usize).and_then(|q| q.as_ref())
}

/// A service waiting for connection requests.
pub struct Listener {
    pub service: u32,
    pub endpoint: EndpointId,
    pub cq: Arc<CqShared>,
    pub opts: crate::cm::ConnectOptions,
    /// Connections accepted by the worker, waiting for the application's `accept`.
    pub accepted: Arc<ArrayQueue<Arc<ConnShared>>>,
}

/// One node's network interface.
pub struct Worker {
    pub(crate) cfg: WorkerConfig,
    pub endpoints: EndpointTable,
    pub nodes: NodeTable,
    pub conns: ConnTable,
    /// The node-wide address-register file.
    pub regs: RegisterFile,
    /// The node's instruction memory and global instructions.
    pub instructions: crate::tables::InstructionMemory,
    /// The payload table (tokens).
    pub tokens: crate::tables::PayloadTable,
    /// Event and exception queues of each endpoint, by endpoint number.
    pub(crate) event_queues: Vec<Option<EndpointQueues>>,
    pub(crate) tlb: Tlb,
    pub(crate) listeners: HashMap<u32, Listener>,
    /// (peer ip, peer connection) -> our connection, to answer repeated requests.
    pub(crate) cm_accepted: HashMap<([u8; 4], u32), u32>,
    pub stats: Stats,
    rx: RxBatch,
    pub(crate) tx: TxBatch,
    /// The high-priority queue's batches (ports with `port::HIGH_QUEUES` queue pairs).
    rx_hi: RxBatch,
    pub(crate) tx_hi: TxBatch,
    /// Connection slots owing an acknowledgement since an earlier turn: sent by this
    /// turn's `flush_acks` unless a data frame carried it first.
    ack_list: Vec<usize>,
    /// Connection slots that started owing one this turn. Waiting a turn lets the
    /// application's reply (a ping-pong write) carry the acknowledgement.
    ack_new: Vec<usize>,
    pub(crate) tsc_hz: u64,
    pub(crate) segment_max: u32,
    /// Largest payload of one message in a frame of `send::BULK_FRAME_BESIDE_HIGH` bytes.
    pub(crate) bulk_segment: u32,
    next_timer: u64,
    /// Period of the timer checks (half the minimum retransmission timeout, 25..200 us).
    timer_tick: u64,
    /// The clock as of the last reading (see `poll`), and the turn counter.
    now: u64,
    turn: u64,
    /// Fault injection on received frames, when configured.
    faults: Option<Faults>,
    /// Frames the fault layer holds back (reordered or delayed).
    held_frames: VecDeque<HeldFrame>,
    /// Frames the fault layer let through so far (the clock of reordering).
    passed_frames: u64,
    /// Diagnostic frames queued by [`Worker::send_raw`].
    raw_tx: Vec<Vec<u8>>,
    /// Where the low-priority round-robin starts next turn (a connection slot).
    rr_next: usize,
    /// Connection slots owing a liveness probe (keepalive).
    probe_list: Vec<usize>,
    /// High-priority frames arrived on this port's high-priority queue (it is polled
    /// every turn from then on).
    pub(crate) hi_active: bool,
    /// Frames of our receive queue each connection's peer may have unacknowledged
    /// (advertised in every header; recomputed at the timer tick).
    pub(crate) credits: u16,
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
        let bulk_segment = segment_max_for(port.max_frame().min(send::BULK_FRAME_BESIDE_HIGH));
        let mut nodes = NodeTable::new();
        nodes.insert(cfg.local);
        let regs = RegisterFile::new(cfg.registers);
        let instructions =
            crate::tables::InstructionMemory::new(cfg.instructions, cfg.global_instructions);
        let tokens = crate::tables::PayloadTable::new(cfg.payload_tokens);
        let tsc_hz = crate::port::tsc_hz();
        let timer_tick = (cfg.min_retry_timeout_us / 2).clamp(25, 200) * tsc_hz / 1_000_000;
        Worker {
            port,
            cfg,
            endpoints: EndpointTable::new(),
            nodes,
            conns: ConnTable::new(),
            instructions,
            tokens,
            regs,
            event_queues: Vec::new(),
            tlb: Tlb::new(),
            listeners: HashMap::new(),
            cm_accepted: HashMap::new(),
            stats: Stats::default(),
            rx: RxBatch::default(),
            tx: TxBatch::default(),
            rx_hi: RxBatch::default(),
            tx_hi: TxBatch::default(),
            ack_list: Vec::with_capacity(1024),
            ack_new: Vec::with_capacity(1024),
            tsc_hz: crate::port::tsc_hz(),
            segment_max,
            bulk_segment,
            next_timer: 0,
            timer_tick,
            now: rdtsc(),
            turn: 0,
            faults: None,
            held_frames: VecDeque::new(),
            passed_frames: 0,
            raw_tx: Vec::new(),
            rr_next: 0,
            probe_list: Vec::new(),
            hi_active: false,
            credits: u16::MAX,
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
    /// Counters, with the TLB's and the mbufs in use.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.tlb = self.tlb.stats();
        s.mbufs_in_use = self.port.mbufs_in_use() as u64;
        s
    }

    /// Attaches the queues of an endpoint: events (interrupts, software exceptions)
    /// and exceptions (refused messages of connections that report them, and faults
    /// that hold a connection for the host).
    pub fn set_endpoint_queues(
        &mut self,
        id: EndpointId,
        events: Arc<EventQueue>,
        exceptions: Arc<EventQueue>,
    ) {
        let i = id.0 as usize;
        if self.event_queues.len() <= i {
            self.event_queues.resize(i + 1, None);
        }
        self.event_queues[i] = Some(EndpointQueues { events, exceptions });
    }

    /// The queues of an endpoint.
    pub fn endpoint_queues(&self, id: EndpointId) -> Option<&EndpointQueues> {
        queues_of(&self.event_queues, id)
    }

    pub(crate) fn us_to_tsc(&self, us: u64) -> u64 {
        us.saturating_mul(self.tsc_hz) / 1_000_000
    }

    /// One turn of the loop; returns how much work it found (frames in + frames out).
    pub fn poll(&mut self) -> usize {
        // The high-priority queue is polled every turn once high-priority traffic was
        // seen on it or is sent from here, and every 64th turn until then: a port with
        // no high-priority connection pays (almost) nothing for it.
        let hi = self.port.queues() > 1
            && (self.hi_active || self.turn & 63 == 0 || !self.conns.high_slots().is_empty());
        let mut n = 0;
        if hi {
            // High-priority work first: what the application posted since the last
            // turn leaves before any bulk frame is processed, and urgent frames are
            // taken before the bulk ones that arrived with them.
            self.service_high(self.now);
            let h = self.port.rx_queue(HIGH_QUEUE, &mut self.rx_hi);
            self.hi_active |= h > 0;
            n += h;
        }
        // A bulk burst cut short for an urgent frame goes on where it stopped.
        n += if self.rx.is_drained() {
            self.port.rx(&mut self.rx)
        } else {
            1
        };
        // Reading the TSC costs as much as an idle turn on a virtual machine: read it when
        // frames arrive (event timestamps, acknowledgement times) and every 64th turn
        // otherwise (timers are micro- to milliseconds).
        self.turn = self.turn.wrapping_add(1);
        if n > 0 || self.turn & 63 == 0 {
            self.now = rdtsc();
        }
        let now = self.now;
        let mut urgent = false;
        while let Some(m) = self.rx_hi.next() {
            self.stats.frames_rx_high += 1;
            self.take_frame(m, now);
            urgent = true;
        }
        // Bulk frames wait for the next turn when urgent ones came first: the
        // application sees those at once.
        while let Some(m) = if urgent { None } else { self.rx.next() } {
            self.take_frame(m, now);
            if hi && self.port.rx_queue(HIGH_QUEUE, &mut self.rx_hi) > 0 {
                // An urgent frame came in meanwhile: take it now and end the turn's
                // receiving here, so that the application sees it at once.
                while let Some(m) = self.rx_hi.next() {
                    self.stats.frames_rx_high += 1;
                    self.take_frame(m, now);
                }
                urgent = true;
                break;
            }
        }
        if !self.held_frames.is_empty() {
            self.release_held(now);
        }
        if urgent {
            // No bulk sending in a turn that took an urgent frame: its answer may be
            // posted as soon as this turn ends.
            self.service_high(now);
        } else {
            self.service_send_queues(now);
            // Bulk sending stops when an urgent frame arrives: take it now.
            while let Some(m) = self.rx_hi.next() {
                self.stats.frames_rx_high += 1;
                self.take_frame(m, now);
            }
        }
        self.flush_acks();
        if now >= self.next_timer {
            self.next_timer = now + self.timer_tick;
            self.run_timers(now);
        }
        n + self.transmit()
    }

    /// A received frame: through the fault layer when one is configured.
    #[inline]
    fn take_frame(&mut self, m: Mbuf, now: u64) {
        if self.faults.is_some() {
            self.inject(m, now);
        } else {
            self.handle_frame(&m, now);
        }
    }

    /// Sends both batches, the high-priority one first; returns the frames sent.
    #[inline]
    fn transmit(&mut self) -> usize {
        let mut sent = 0;
        if !self.tx_hi.is_empty() {
            let queued = self.tx_hi.len();
            let s = self.port.tx_queue(HIGH_QUEUE, &mut self.tx_hi);
            if s < queued {
                self.stats.tx_stalls += 1;
            }
            sent += s;
        }
        let queued = self.tx.len();
        let s = self.port.tx(&mut self.tx);
        if s < queued {
            self.stats.tx_stalls += 1;
        }
        sent += s;
        self.stats.frames_tx += sent as u64;
        sent
    }

    /// Our receive queue shared among the live connections: each peer may have this
    /// many frames unacknowledged (at least 4).
    fn credit_grant(&self) -> u16 {
        let n = self.conns.len().max(1);
        (usize::from(self.port.rx_desc()) / n).clamp(4, usize::from(u16::MAX)) as u16
    }

    fn run_timers(&mut self, now: u64) {
        self.credits = self.credit_grant();
        let keepalive = self.us_to_tsc(self.cfg.keepalive_us);
        for slot in 0..self.conns.slots() {
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if !conn.unreported.is_empty() {
                send::report_waiting(conn);
            }
            if conn.state == ConnState::Normal && conn.inflight.is_empty() {
                // Idle: probe a silent peer once a period; give up on one that left
                // `keepalive_count` probes unanswered.
                let silent = now.saturating_sub(conn.last_rx);
                if silent > keepalive && now.saturating_sub(conn.last_probe) > keepalive {
                    if conn.probes_unanswered >= self.cfg.keepalive_count {
                        self.stats.keepalive_failures += 1;
                        fail_connection(conn, WcStatus::RetryExceeded);
                    } else {
                        conn.probes_unanswered += 1;
                        conn.last_probe = now;
                        self.probe_list.push(slot);
                    }
                }
                continue;
            }
            if conn.state == ConnState::Normal && now >= conn.rnr_until {
                match conn.tx.on_timer(now) {
                    Timeout::GiveUp => fail_connection(conn, WcStatus::RetryExceeded),
                    Timeout::Retransmit => self.stats.timeouts += 1,
                    Timeout::Idle => {}
                }
            }
        }
        self.cm_timers(now);
        if !self.probe_list.is_empty() {
            self.send_probes();
        }
    }

    /// Turns fault injection on (or off with `None`) for the frames this node receives.
    pub fn set_faults(&mut self, cfg: Option<FaultConfig>) {
        self.faults = cfg.map(Faults::new);
        if self.faults.is_none() {
            self.held_frames.clear();
        }
    }

    /// What the fault layer injected so far.
    pub fn fault_stats(&self) -> FaultStats {
        self.faults.as_ref().map(|f| f.stats).unwrap_or_default()
    }

    /// Applies the fault layer's verdict to a received frame.
    fn inject(&mut self, mut m: Mbuf, now: u64) {
        let Some(f) = self.faults.as_mut() else {
            self.handle_frame(&m, now);
            return;
        };
        let Verdict::Pass {
            dup,
            corrupt_bit,
            hold,
        } = f.verdict(m.data().len())
        else {
            return; // dropped
        };
        if dup {
            if let Some(mut copy) = self.port.alloc() {
                let n = m.data().len().min(copy.room_mut().len());
                copy.room_mut()[..n].copy_from_slice(&m.data()[..n]);
                copy.set_len(n);
                self.passed_frames += 1;
                self.handle_frame(&copy, now);
            }
        }
        if let Some(bit) = corrupt_bit {
            if let Some(b) = m.data_mut().get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
        }
        let release = match hold {
            Hold::None => {
                self.passed_frames += 1;
                self.handle_frame(&m, now);
                return;
            }
            Hold::Frames(k) => Release::AfterFrames(self.passed_frames + u64::from(k)),
            Hold::Micros(us) => Release::At(now + self.us_to_tsc(us)),
        };
        // A held frame never waits more than a millisecond (reordering needs traffic
        // behind it; the link may go quiet).
        let cap = now + self.us_to_tsc(1000);
        self.held_frames.push_back(HeldFrame { m, release, cap });
    }

    /// Hands the frames whose hold is over to the worker.
    fn release_held(&mut self, now: u64) {
        let mut i = 0;
        while i < self.held_frames.len() {
            let h = &self.held_frames[i];
            let due = now >= h.cap
                || match h.release {
                    Release::AfterFrames(n) => self.passed_frames >= n,
                    Release::At(t) => now >= t,
                };
            if due {
                let h = self.held_frames.remove(i).expect("index in range");
                self.passed_frames += 1;
                self.handle_frame(&h.m, now);
            } else {
                i += 1;
            }
        }
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
/// Node id of an address, learning it if new.
pub(crate) fn learn_node(nodes: &mut NodeTable, addr: NodeAddr) -> NodeId {
    match nodes.find_ip(addr.ip) {
        Some(id) if nodes.get(id) == Some(&addr) => id,
        _ => nodes.insert(addr),
    }
}
