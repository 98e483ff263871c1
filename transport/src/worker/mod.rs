//! The DPDK driver of a [`Node`]: bursts in, frames through the node, bursts out, timers.
//!
//! `poll()` is one [`Node::turn`] over the port's queues ([`Io`]) and the TSC
//! ([`Clock`]): the turn's order is the node's, the same one `sim` runs. The worker
//! owns the port and the clock; the node owns everything else.
//! Applications reach the node through lock-free queues in `ConnShared` / `CqShared`
//! for the fast path, and through `&mut Worker` (behind the device's mutex) and its
//! typed calls ([`crate::host::Host`]) for the control path. It runs either on a dedicated
//! thread or inline, when the application's poll calls drive it.

use std::sync::Arc;

mod shards;

pub use shards::{ShardLinks, SHARD_QUEUE};

use crate::node::{
    Clock, External, FrameBuf, Io, Link, LinkCaps, Node, NodeConfig, RxFrame, Stats, EXTERNAL_MIN,
    RX_BURST,
};
use crate::port::{rdtsc, tsc_hz, Mbuf, Port, RxBatch, TxBatch, BURST, HIGH_QUEUE};

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
}

impl RxFrame for Mbuf {
    #[inline]
    fn frame(&self) -> (&[u8], bool) {
        Mbuf::frame(self)
    }
}

impl Io for PortIo {
    type Rx = Mbuf;

    /// Receives a bulk burst, unless one cut short for an urgent frame still holds
    /// frames; a shard without a queue pair of its own receives only what shard 0
    /// forwards (its inbox).
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

    #[inline]
    fn next_bulk(&mut self) -> Option<Mbuf> {
        self.rx.next()
    }

    #[inline]
    fn has_high(&self) -> bool {
        self.port.queues() > 1
    }

    #[inline]
    fn high_active(&self) -> bool {
        self.hi_active
    }

    #[inline]
    fn rx_high(&mut self) -> usize {
        let n = self.port.rx_queue(HIGH_QUEUE, &mut self.rx_hi);
        self.hi_active |= n > 0;
        n
    }

    #[inline(always)]
    fn high_pending(&self) -> bool {
        !self.rx_hi.is_drained()
    }

    #[inline]
    fn next_high(&mut self) -> Option<Mbuf> {
        self.rx_hi.next()
    }

    #[inline]
    fn sharded(&self) -> bool {
        self.links.is_some()
    }

    fn forward(&mut self, owner: u8, m: Mbuf) -> Result<(), Mbuf> {
        let l = self.links.as_deref().expect("sharded");
        let owner = usize::from(owner);
        l.forward(owner, m)?;
        self.forwarded |= 1 << owner;
        Ok(())
    }

    fn wake_forwarded(&mut self) {
        let Some(l) = self.links.as_deref() else {
            return;
        };
        while self.forwarded != 0 {
            let k = self.forwarded.trailing_zeros() as usize;
            self.forwarded &= self.forwarded - 1;
            l.wake(k);
        }
    }

    fn inbox(&mut self) -> Option<Mbuf> {
        self.links.as_deref().and_then(|l| l.take(self.shard))
    }

    /// On shard 0 of a port shared by software dispatch: the other shards' frames,
    /// queued for the wire.
    fn relay(&mut self) {
        let Some(l) = self.links.as_deref() else {
            return;
        };
        if !self.relay {
            return;
        }
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

    /// Sends both batches, the high-priority one first.
    #[inline]
    fn transmit(&mut self) -> (usize, bool) {
        let mut sent = 0;
        let mut stalled = false;
        if !self.tx_hi.is_empty() {
            let queued = self.tx_hi.len();
            let s = self.port.tx_queue(HIGH_QUEUE, &mut self.tx_hi);
            stalled |= s < queued;
            sent += s;
        }
        let queued = self.tx.len();
        let s = self.tx_bulk();
        (sent + s, stalled || s < queued)
    }
}

// A turn takes one receive burst of the port's.
const _: () = assert!(RX_BURST == BURST);

/// Worker tunables: the node's.
pub type WorkerConfig = NodeConfig;

/// One node's network interface on a DPDK port.
pub struct Worker {
    node: Node,
    io: PortIo,
    clock: Tsc,
}

/// The worker's clock: the TSC, read when a turn needs it ([`Clock::CHEAP`]), and
/// the turn counter.
struct Tsc {
    turns: u64,
}

impl Clock for Tsc {
    const CHEAP: bool = false;
    #[inline]
    fn now(&mut self) -> u64 {
        rdtsc()
    }
    #[inline]
    fn turns(&mut self) -> &mut u64 {
        &mut self.turns
    }
}

impl crate::host::Drives for Worker {
    #[inline]
    fn node(&self) -> &Node {
        &self.node
    }
    #[inline]
    fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }
    /// The TSC into the node (it reads the clock in turns only).
    fn sync_clock(&mut self) {
        self.node.set_now(rdtsc());
    }
    /// Counters, with the mbufs in use and stashed and the worker's wake-ups.
    fn driver_stats(&self) -> Stats {
        let mut s = self.node.stats();
        s.mbufs_in_use = self.io.port.pool_in_use() as u64;
        s.mbufs_stashed = self.io.port.stashed() as u64;
        s.worker_woken = self.node.submit_ring().woken();
        s
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
            clock: Tsc { turns: 0 },
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
}

impl crate::host::Driver for Worker {
    /// One turn of the loop ([`Node::turn`]); returns how much work it found (frames
    /// in + frames out).
    #[inline]
    fn poll(&mut self) -> usize {
        self.node.turn(&mut self.clock, &mut self.io)
    }

    /// Sleeps until a post, a control call, a frame on a port with doorbells (ring
    /// ports: [`crate::doorbell::Doorbell`]), a frame another shard forwarded, or
    /// `deadline`: the dedicated worker's nap when it has been idle for a while.
    /// Returns at once, having polled, when work came in as it went to sleep.
    fn sleep_until(&mut self, deadline: std::time::Instant) {
        self.io.port.set_sleeping(true);
        // A frame that arrived before the mark was visible would wait for the nap's
        // end: poll once more after marking.
        if self.poll() == 0 {
            self.node.submit_ring().sleep_until(deadline);
        }
        self.io.port.set_sleeping(false);
    }

    /// [`Driver::poll`](crate::host::Driver::poll) that reads the clock and runs the timers due whatever the turn
    /// finds (an idle turn reads it every 64th time only).
    fn poll_ticked(&mut self) -> usize {
        // A turn reads the clock when its count reaches a multiple of 64.
        self.clock.turns |= 63;
        self.poll()
    }

    /// The doorbells of this worker's receive queues (ring ports; none elsewhere).
    fn doorbells(&self) -> Vec<Arc<crate::doorbell::Doorbell>> {
        self.io.port.doorbells()
    }

    fn link_up(&self) -> bool {
        self.io.port.link_up()
    }
}
