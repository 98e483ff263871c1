//! The DPDK driver of a [`Node`]: bursts in, frames through the node, bursts out, timers.
//!
//! ```text
//! poll():  [high-priority sends] -> rx burst (high queue first) -> node.handle_frame
//!          -> node.transmit_data (high, then low round-robin) -> timers
//!          -> node.transmit_control (acks, NAKs, probes, CM) -> tx burst
//! ```
//! The worker owns the port and the clock (the TSC); the node owns everything else.
//! Applications reach the node through lock-free queues in `ConnShared` / `CqShared`
//! for the fast path, and through `&mut Worker` (behind the device's mutex; it
//! dereferences to its node) for the control path. It runs either on a dedicated
//! thread or inline, when the application's poll calls drive it.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

mod shards;

pub use shards::{ShardLinks, SHARD_QUEUE};

use crate::cm::{CmError, ConnectOptions};
use crate::connection::ConnShared;
use crate::cq::CqShared;
use crate::node::{
    External, FrameBuf, Link, LinkCaps, Node, NodeConfig, ResumeError, Stats, EXTERNAL_MIN,
};
use crate::port::{rdtsc, tsc_hz, Mbuf, Port, RxBatch, TxBatch, BURST, HIGH_QUEUE};
use crate::status::DropReason;
use crate::tables::{EndpointId, NodeAddr};

impl FrameBuf for Mbuf {
    #[inline]
    fn room_mut(&mut self) -> &mut [u8] {
        Mbuf::room_mut(self)
    }
    #[inline]
    fn set_len(&mut self, len: usize) {
        Mbuf::set_len(self, len)
    }
    fn set_len_external(&mut self, len: usize, ext: External) {
        let External {
            mem,
            off,
            len: n,
            at,
        } = ext;
        if let Err(mem) = Mbuf::set_len_external(self, len, at, mem, off, n) {
            // No mbufs to spare: the payload is copied in after all.
            External {
                mem,
                off,
                len: n,
                at,
            }
            .copy_into(self.room_mut());
            self.set_len(len);
        }
    }
}

/// The port and its bursts: the node's [`Link`].
struct PortIo {
    rx: RxBatch,
    tx: TxBatch,
    /// The high-priority queue's batches (ports with `port::HIGH_QUEUES` queue pairs).
    rx_hi: RxBatch,
    tx_hi: TxBatch,
    /// High-priority frames arrived on the high-priority queue (it is polled every
    /// turn from then on).
    hi_active: bool,
    /// A shard of a device of several: the queues between shards, this shard's
    /// index, whether its port handle has a queue pair of its own (else its frames
    /// leave through shard 0's), whether it sends the frames of shards without one,
    /// and the shards it forwarded frames to this turn (to wake).
    links: Option<Arc<ShardLinks>>,
    shard: usize,
    direct: bool,
    relay: bool,
    forwarded: u64,
    /// Last: fields drop in order, and the batches and queues above hold mbufs of its
    /// mempool.
    port: Port,
}

impl Link for PortIo {
    type Frame = Mbuf;

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        self.port.alloc()
    }

    #[inline]
    fn push(&mut self, m: Mbuf, high: bool) -> bool {
        let batch = if high { &mut self.tx_hi } else { &mut self.tx };
        batch.push(m).is_ok()
    }

    #[inline]
    fn full(&mut self, high: bool) -> bool {
        if high && self.direct {
            self.tx_hi.is_full() && self.port.tx_queue(HIGH_QUEUE, &mut self.tx_hi) == 0
        } else {
            self.tx.is_full() && self.tx_bulk() == 0
        }
    }

    #[inline]
    fn flush(&mut self, high: bool) {
        if high && self.direct {
            if !self.tx_hi.is_empty() {
                self.port.tx_queue(HIGH_QUEUE, &mut self.tx_hi);
            }
        } else if !self.tx.is_empty() {
            self.tx_bulk();
        }
    }

    /// On a port with a high-priority queue: whether an urgent frame arrived (it is
    /// then in `rx_hi`, taken at the end of the turn).
    #[inline]
    fn urgent(&mut self) -> bool {
        self.hi_active
            && (!self.rx_hi.is_drained() || self.port.rx_queue(HIGH_QUEUE, &mut self.rx_hi) > 0)
    }
}

impl PortIo {
    /// Sends the bulk batch: on the port, or — a shard without a queue pair of its
    /// own — through shard 0's. Returns the frames it took.
    #[inline]
    fn tx_bulk(&mut self) -> usize {
        match (&self.links, self.direct) {
            (Some(l), false) => {
                let n = self.tx.drain_into(|m| l.send(self.shard, m));
                if n > 0 {
                    l.wake(0); // shard 0 sends them, even from its sleep
                }
                n
            }
            _ => self.port.tx(&mut self.tx),
        }
    }

    /// A sharded device: wakes the shards frames were forwarded to, takes this
    /// shard's inbox (up to a burst) and, on shard 0 of a port shared by software
    /// dispatch, queues the other shards' frames for the wire. Returns the frames
    /// taken.
    #[inline(never)]
    fn exchange(&mut self, node: &mut Node, now: u64) -> usize {
        let Some(l) = self.links.as_deref() else {
            return 0;
        };
        while self.forwarded != 0 {
            let k = self.forwarded.trailing_zeros() as usize;
            self.forwarded &= self.forwarded - 1;
            l.wake(k);
        }
        let mut n = 0;
        while n < BURST {
            let Some(m) = self.links.as_deref().and_then(|l| l.take(self.shard)) else {
                break;
            };
            take(node, &m, now);
            self.ack_if_due(node);
            n += 1;
        }
        let Some(l) = self.links.as_deref() else {
            return n;
        };
        if self.relay {
            for k in 1..l.shards() {
                while !self.tx.is_full() {
                    let Some(m) = l.sent_by(k) else {
                        break;
                    };
                    let _ = self.tx.push(m);
                }
                if self.tx.is_full() && self.port.tx(&mut self.tx) == 0 {
                    break;
                }
            }
        }
        n
    }

    /// Sends the acknowledgements a long burst made due before the turn ends
    /// ([`Node::acks_due`]), on the wire at once.
    #[inline]
    fn ack_if_due(&mut self, node: &mut Node) {
        if node.acks_due() {
            node.send_acks(self);
            self.flush(true);
            self.flush(false);
        }
    }

    /// Hands the frames of the high-priority batch to the node; whether there were any.
    /// (Asked every turn: an empty batch costs a load, not a call.)
    #[inline(always)]
    fn take_high(&mut self, node: &mut Node, now: u64) -> bool {
        !self.rx_hi.is_drained() && self.take_high_frames(node, now)
    }

    #[inline(never)]
    fn take_high_frames(&mut self, node: &mut Node, now: u64) -> bool {
        let mut any = false;
        for m in self.rx_hi.by_ref() {
            node.stats.frames_rx_high += 1;
            deliver(self.links.as_deref(), &mut self.forwarded, node, m, now);
            any = true;
        }
        any
    }

    /// Receives a bulk burst, unless one cut short for an urgent frame still holds
    /// frames (it goes on where it stopped); returns the frames to take (1 for the
    /// rest of a burst: the turn has work).
    #[inline]
    fn rx_bulk(&mut self) -> usize {
        if !self.direct {
            return usize::from(self.links.as_ref().is_some_and(|l| l.has_inbox(self.shard)));
        }
        if self.rx.is_drained() {
            self.port.rx(&mut self.rx)
        } else {
            1
        }
    }

    /// Sends both batches, the high-priority one first; returns the frames sent.
    #[inline]
    fn transmit(&mut self, stats: &mut Stats) -> usize {
        let mut sent = 0;
        if !self.tx_hi.is_empty() {
            let queued = self.tx_hi.len();
            let s = self.port.tx_queue(HIGH_QUEUE, &mut self.tx_hi);
            stats.tx_stalls += u64::from(s < queued);
            sent += s;
        }
        let queued = self.tx.len();
        let s = self.tx_bulk();
        stats.tx_stalls += u64::from(s < queued);
        sent + s
    }
}

/// A received frame to the node, or — on a device of several shards — to the shard
/// that owns it (noted in `forwarded`, to wake it at the end of the turn).
#[inline]
fn deliver(links: Option<&ShardLinks>, forwarded: &mut u64, node: &mut Node, m: Mbuf, now: u64) {
    if let Some(l) = links {
        if let Some(owner) = node.route(m.frame().0) {
            let owner = usize::from(owner);
            match l.forward(owner, m) {
                Ok(()) => *forwarded |= 1 << owner,
                Err(m) => {
                    drop(m);
                    node.stats.drop_for(DropReason::NoBuffer);
                }
            }
            return;
        }
    }
    take(node, &m, now);
}

/// A received mbuf into the node (a frame split over segments is refused).
#[inline]
fn take(node: &mut Node, m: &Mbuf, now: u64) {
    match m.frame() {
        (data, true) => node.handle_frame(data, now),
        (_, false) => node.stats.drop_for(DropReason::Truncated),
    }
}

/// Worker tunables: the node's.
pub type WorkerConfig = NodeConfig;

/// One node's network interface on a DPDK port.
pub struct Worker {
    node: Node,
    io: PortIo,
    /// The clock as of the last reading (see `poll`), and the turn counter.
    now: u64,
    turn: u64,
}

impl Deref for Worker {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

impl DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

impl Worker {
    /// A worker over an open port (or a shard's handle of one: see
    /// [`Worker::join_shards`]).
    pub fn new(port: Port, cfg: WorkerConfig) -> Worker {
        let caps = LinkCaps {
            mac: port.mac(),
            max_frame: port.max_frame(),
            queues: port.queues(),
            rx_desc: port.rx_desc(),
            external_min: if port.tx_external() {
                EXTERNAL_MIN
            } else {
                usize::MAX
            },
        };
        let now = rdtsc();
        let node = Node::new(cfg, caps, tsc_hz(), now);
        port.register_waker(node.submit_ring());
        Worker {
            node,
            io: PortIo {
                rx: RxBatch::default(),
                tx: TxBatch::default(),
                rx_hi: RxBatch::default(),
                tx_hi: TxBatch::default(),
                hi_active: false,
                links: None,
                shard: 0,
                direct: true,
                relay: false,
                forwarded: 0,
                port,
            },
            now,
            turn: 0,
        }
    }

    /// Makes this worker shard `shard` of a device whose shards share `links`
    /// (`cfg.shard` of its node must say the same).
    pub fn join_shards(&mut self, links: Arc<ShardLinks>, shard: usize) {
        let io = &mut self.io;
        io.direct = io.port.queues() > 0;
        io.relay = shard == 0 && usize::from(io.port.device_queues()) < links.shards();
        io.shard = shard;
        io.links = Some(links);
    }

    /// The port.
    pub fn port(&self) -> &Port {
        &self.io.port
    }

    /// Counters, with the TLB's and the mbufs in use.
    pub fn stats(&self) -> Stats {
        let mut s = self.node.stats();
        s.mbufs_in_use = self.io.port.pool_in_use() as u64;
        s.mbufs_stashed = self.io.port.stashed() as u64;
        s.worker_woken = self.node.submit_ring().woken();
        s
    }

    /// One turn of the loop; returns how much work it found (frames in + frames out).
    pub fn poll(&mut self) -> usize {
        let (node, io) = (&mut self.node, &mut self.io);
        // The high-priority queue is polled every turn once high-priority traffic was
        // seen on it or is sent from here, and every 64th turn until then: a port with
        // no high-priority connection pays (almost) nothing for it.
        let hi = io.port.queues() > 1
            && (io.hi_active || self.turn & 63 == 0 || node.has_high_priority());
        let mut n = 0;
        if !hi && !node.submit_ring().is_empty() {
            // Posts first: what the application posted since the last turn leaves
            // before this turn's receiving (an inline ping-pong posts its answer and
            // drives the next turn at once).
            self.now = rdtsc();
            node.transmit_data(self.now, io);
            io.flush(false);
        }
        if hi {
            // High-priority work first: what the application posted since the last
            // turn leaves before any bulk frame is processed, and urgent frames are
            // taken before the bulk ones that arrived with them.
            node.transmit_high(self.now, io);
            let h = io.port.rx_queue(HIGH_QUEUE, &mut io.rx_hi);
            io.hi_active |= h > 0;
            n += h;
        }
        n += io.rx_bulk();
        // Reading the TSC costs as much as an idle turn on a virtual machine: read it when
        // frames arrive (event timestamps, acknowledgement times) and every 64th turn
        // otherwise (timers are micro- to milliseconds).
        self.turn = self.turn.wrapping_add(1);
        let ticked = n > 0 || self.turn & 63 == 0;
        if ticked {
            self.now = rdtsc();
        }
        let now = self.now;
        let mut urgent = io.take_high(node, now);
        // Bulk frames wait for the next turn when urgent ones came first: the
        // application sees those at once.
        while let Some(m) = if urgent { None } else { io.rx.next() } {
            deliver(io.links.as_deref(), &mut io.forwarded, node, m, now);
            io.ack_if_due(node);
            if hi && io.port.rx_queue(HIGH_QUEUE, &mut io.rx_hi) > 0 {
                // An urgent frame came in meanwhile: take it now and end the turn's
                // receiving here, so that the application sees it at once.
                urgent = io.take_high(node, now);
                break;
            }
        }
        if io.links.is_some() {
            n += io.exchange(node, now);
        }
        if urgent {
            // No bulk sending in a turn that took an urgent frame: its answer may be
            // posted as soon as this turn ends.
            node.transmit_high(now, io);
        } else {
            node.transmit_data(now, io);
            // Bulk sending stops when an urgent frame arrives: take it now.
            io.take_high(node, now);
        }
        // Timers fall due only as the clock moves (acknowledgements owed go out with
        // `transmit_control` below, every turn).
        if ticked && now >= node.next_timer() {
            node.handle_timeout(now);
        }
        node.transmit_control(io);
        n + io.transmit(&mut node.stats)
    }

    /// Sleeps until a post, a control call, a frame on a port with doorbells (ring
    /// ports: `port::Doorbell`), a frame another shard forwarded, or `deadline`: the
    /// dedicated worker's nap when it has been idle for a while. Returns at once, having
    /// polled, when work came in as it went to sleep.
    pub fn sleep_until(&mut self, deadline: std::time::Instant) {
        self.io.port.set_sleeping(true);
        // A frame that arrived before the mark was visible would wait for the nap's
        // end: poll once more after marking.
        if self.poll() == 0 {
            self.node.submit_ring().sleep_until(deadline);
        }
        self.io.port.set_sleeping(false);
    }

    /// [`Worker::poll`] that reads the clock and runs the timers due whatever the turn
    /// finds (an idle turn reads it every 64th time only): the first turn after a
    /// timed sleep, whose timers may have fallen due meanwhile.
    pub fn poll_ticked(&mut self) -> usize {
        // `poll` ticks when its turn counter reaches a multiple of 64.
        self.turn |= 63;
        self.poll()
    }

    /// The doorbells of this worker's receive queues (ring ports; none elsewhere): a
    /// thread that sleeps on the submission ring in the worker's stead marks them
    /// around its sleep, as [`Worker::sleep_until`] does, so that a frame wakes it.
    pub fn doorbells(&self) -> Vec<std::sync::Arc<crate::port::Doorbell>> {
        self.io.port.doorbells()
    }

    /// Reads the clock into the node before a host-side call that starts timers.
    fn sync_clock(&mut self) {
        self.now = rdtsc();
        self.node.set_now(self.now);
    }

    /// Starts connecting (see [`Node::connect`]).
    pub fn connect(
        &mut self,
        peer: NodeAddr,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
    ) -> Result<Arc<ConnShared>, CmError> {
        self.sync_clock();
        self.node.connect(peer, service, endpoint, cq, opts)
    }

    /// Closes a connection (see [`Node::close`]).
    pub fn close(&mut self, number: u32) -> Result<(), CmError> {
        self.sync_clock();
        self.node.close(number)
    }

    /// Runs the message a fault kept (see [`Node::resume`]).
    pub fn resume(&mut self, number: u32) -> Result<(), ResumeError> {
        self.sync_clock();
        self.node.resume(number)
    }
}
