//! Nodes in real time on a named in-process segment: the driver a library above the
//! transport runs its nodes on where there is no DPDK (the `deposit` API's own tests in
//! the sans-IO step), beside [`super::Network`]'s simulated time.
//!
//! A segment is a switch that forwards by destination MAC: every port attached to it
//! (one per device, whatever its shards) has a bounded receive queue, as a NIC's
//! receive ring, and a frame for a full one is dropped and counted — the node's
//! reliability recovers it, as on a real link. A broadcast frame reaches every other
//! port. Frames are byte vectors; nothing here is meant to be fast.
//!
//! A device of several shards receives on shard 0, which hands each frame to the shard
//! it is for ([`Node::route`]) as the DPDK worker's software dispatch does; every shard
//! sends straight onto the segment. The clock is the wall clock in nanoseconds, so
//! connection management, retransmission and keepalives run on real time, as the API's
//! blocking calls and timeouts expect.
//!
//! What it must never do: block a turn (queues are lock-free; the segment's lock is
//! taken only to look up or attach a port, and once per burst of frames sent).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crossbeam::queue::ArrayQueue;

use crate::doorbell::Doorbell;
use crate::host::Driver;
use crate::node::{Clock, FrameQueue, LinkCaps, Node, NodeConfig, RX_BURST};

/// Frames a port's receive queue holds (beyond them a frame is dropped).
const RX_QUEUE: usize = 4096;

/// Receive descriptors the node is told of: what it shares out as credits.
const RX_DESC: u16 = 1024;

/// Why a node cannot be attached to a segment.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SegmentError {
    #[error("segment name {0:?} is empty")]
    NoName(String),
    #[error("MAC {mac:02x?} is already attached to segment {segment:?}")]
    AddressInUse { segment: String, mac: [u8; 6] },
    #[error("a device needs 1 to {max} shards, not {n}", max = crate::node::MAX_SHARDS)]
    Shards { n: usize },
}

/// One device's port on a segment: a receive queue per shard (shard 0's takes the
/// segment's frames), each with the doorbell that wakes its sleeping driver.
struct SegmentPort {
    mac: [u8; 6],
    queues: Vec<ArrayQueue<Vec<u8>>>,
    bells: Vec<Arc<Doorbell>>,
    /// Frames dropped because a receive queue was full.
    dropped: AtomicU64,
}

impl SegmentPort {
    /// Queues `frame` for shard `shard`; false (counted) when its queue is full.
    fn deliver(&self, shard: usize, frame: Vec<u8>) -> bool {
        let ok = self.queues[shard].push(frame).is_ok();
        if ok {
            self.bells[shard].ring();
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// A named segment: the ports attached to it.
struct Segment {
    name: String,
    ports: Mutex<Vec<Weak<SegmentPort>>>,
}

/// Every segment of the process, by name (kept while a port is attached).
static SEGMENTS: Mutex<Vec<Weak<Segment>>> = Mutex::new(Vec::new());

impl Segment {
    /// The segment called `name`, made on first use.
    fn named(name: &str) -> Arc<Segment> {
        let mut all = SEGMENTS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|s| s.strong_count() > 0);
        if let Some(s) = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.name == name)
        {
            return s;
        }
        let s = Arc::new(Segment {
            name: name.to_string(),
            ports: Mutex::new(Vec::new()),
        });
        all.push(Arc::downgrade(&s));
        s
    }

    fn attach(&self, port: &Arc<SegmentPort>) -> Result<(), SegmentError> {
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        ports.retain(|p| p.strong_count() > 0);
        if ports
            .iter()
            .filter_map(Weak::upgrade)
            .any(|p| p.mac == port.mac)
        {
            return Err(SegmentError::AddressInUse {
                segment: self.name.clone(),
                mac: port.mac,
            });
        }
        ports.push(Arc::downgrade(port));
        Ok(())
    }

    /// Forwards the frames `from` sent: by destination MAC, broadcast to every other
    /// port; a frame for no port is lost, as on a switch that knows every address.
    fn forward(&self, from: &[u8; 6], frames: &mut FrameQueue) {
        if frames.is_empty() {
            return;
        }
        let ports: Vec<Arc<SegmentPort>> = self
            .ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        while let Some(frame) = frames.pop() {
            let Some(dst) = frame.get(..6) else {
                continue;
            };
            if dst[0] & 1 != 0 {
                // Broadcast or multicast (ARP, neighbour discovery): everyone else.
                for p in ports.iter().filter(|p| &p.mac != from) {
                    p.deliver(0, frame.clone());
                }
            } else if let Some(p) = ports.iter().find(|p| p.mac == dst) {
                p.deliver(0, frame);
            }
        }
    }
}

/// The wall clock in nanoseconds since the driver started.
struct WallClock {
    start: Instant,
    turns: u64,
}

impl WallClock {
    fn read(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

impl Clock for WallClock {
    const CHEAP: bool = false;
    fn now(&mut self) -> u64 {
        self.read()
    }
    fn turns(&mut self) -> &mut u64 {
        &mut self.turns
    }
}

/// A node driven in real time on a segment (see [`crate::sim`]): one shard of
/// a device. Made by [`SegmentDriver::attach`].
pub struct SegmentDriver {
    node: Node,
    link: FrameQueue,
    clock: WallClock,
    segment: Arc<Segment>,
    port: Arc<SegmentPort>,
    shard: usize,
}

impl SegmentDriver {
    /// Attaches a device of `shards` nodes with configuration `cfg` (its `local`
    /// address names the device: its MAC is the port's) to the segment called
    /// `segment`, frames of at most `max_frame` bytes: one driver per shard, in shard
    /// order (each `cfg.shard` set to its own).
    pub fn attach(
        segment: &str,
        cfg: &NodeConfig,
        shards: usize,
        max_frame: usize,
    ) -> Result<Vec<SegmentDriver>, SegmentError> {
        if segment.is_empty() {
            return Err(SegmentError::NoName(segment.to_string()));
        }
        if shards == 0 || shards > crate::node::MAX_SHARDS {
            return Err(SegmentError::Shards { n: shards });
        }
        let mac = cfg.local.mac;
        let port = Arc::new(SegmentPort {
            mac,
            queues: (0..shards).map(|_| ArrayQueue::new(RX_QUEUE)).collect(),
            bells: (0..shards).map(|_| Arc::new(Doorbell::default())).collect(),
            dropped: AtomicU64::new(0),
        });
        let seg = Segment::named(segment);
        seg.attach(&port)?;
        let caps = LinkCaps {
            mac,
            max_frame,
            queues: 1,
            rx_desc: RX_DESC,
            external_min: usize::MAX,
        };
        let start = Instant::now();
        Ok((0..shards)
            .map(|k| {
                let mut c = cfg.clone();
                c.shard = k as u8;
                c.shards = shards as u8;
                let node = Node::new(c, caps, super::HZ, 0);
                port.bells[k].register(node.submit_ring());
                SegmentDriver {
                    node,
                    link: FrameQueue::new(max_frame, 1 << 12),
                    clock: WallClock { start, turns: 0 },
                    segment: seg.clone(),
                    port: port.clone(),
                    shard: k,
                }
            })
            .collect())
    }

    /// Frames the device's port dropped because a receive queue was full.
    pub fn dropped(&self) -> u64 {
        self.port.dropped.load(Ordering::Relaxed)
    }

    /// Takes a burst of what arrived for this shard into the node's receive queue;
    /// shard 0 hands other shards' frames on.
    fn receive(&mut self) {
        let q = &self.port.queues[self.shard];
        for _ in 0..RX_BURST {
            let Some(frame) = q.pop() else {
                break;
            };
            match self.node.route(&frame) {
                Some(k) if self.shard == 0 && usize::from(k) < self.port.queues.len() => {
                    self.port.deliver(usize::from(k), frame);
                }
                _ => self.link.rx.push_back(frame),
            }
        }
    }
}

impl crate::host::Drives for SegmentDriver {
    fn node(&self) -> &Node {
        &self.node
    }
    fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }
    fn sync_clock(&mut self) {
        let now = self.clock.read();
        self.node.set_now(now);
    }
}

impl Driver for SegmentDriver {
    fn poll(&mut self) -> usize {
        self.receive();
        let n = self.node.turn(&mut self.clock, &mut self.link);
        self.segment.forward(&self.port.mac, &mut self.link);
        n
    }

    fn poll_ticked(&mut self) -> usize {
        self.clock.turns |= 63;
        self.poll()
    }

    fn sleep_until(&mut self, deadline: Instant) {
        let bell = self.port.bells[self.shard].clone();
        bell.set_sleeping(true);
        if self.poll() == 0 {
            self.node.submit_ring().sleep_until(deadline);
        }
        bell.set_sleeping(false);
    }

    fn doorbells(&self) -> Vec<Arc<Doorbell>> {
        vec![self.port.bells[self.shard].clone()]
    }

    fn link_up(&self) -> bool {
        true
    }
}
