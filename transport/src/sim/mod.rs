//! A simulated network of [`Node`]s: no DPDK, no threads, no clock — deterministic by
//! seed (quinn-proto's test shape).
//!
//! Every host is a node with a [`FrameQueue`] as its link. A frame a node sends is
//! routed by its destination MAC to another host and delivered after the link's
//! latency, unless the link loses it; it may also be duplicated, corrupted (one bit
//! flipped) or held back (reordered). Time is simulated in nanoseconds and jumps from
//! one event (a delivery, a node's timer) to the next, so a test of a five-second
//! keepalive runs in milliseconds. A host can be taken down (it neither sends nor
//! receives: a crashed peer) and a filter can drop chosen frames (a targeted loss).
//!
//! Instead of the flat link, a network can be built on a switch [`fabric`]
//! ([`Network::with_fabric`]): links with rates, switch queues that fill, drop and
//! mark ECN, ECMP over a leaf–spine, and a record of what every flow and queue did.
//!
//! Beside it, [`SegmentDriver`]: nodes in real time on a named in-process segment, the
//! driver `deposit` runs its devices on when built without DPDK (its own tests'
//! sans-IO step).
//!
//! ```text
//! step():  deliver due frames -> node.handle_frame
//!          due timers         -> node.handle_timeout
//!          node.poll_transmit -> link faults -> in flight until now + latency (+ jitter)
//! ```

#[warn(missing_docs)]
pub mod fabric;
mod segment;

pub use fabric::{Fabric, FabricConfig, FabricStats, LinkSpec, Port, QueueSpec};
pub use segment::{SegmentDriver, SegmentError};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::cm::ConnectOptions;
use crate::connection::{ConnShared, ConnState};
use crate::cq::CqShared;
use crate::events::EventRing;
use crate::mem::EndpointMemory;
use crate::node::{FrameQueue, LinkCaps, Node, NodeConfig};
use crate::tables::{EndpointEntry, EndpointId, NodeAddr, Rights};
use crate::wire;
use crate::wr::{Completion, Wqe};

/// Ticks per second of the simulated clock (nanoseconds).
pub const HZ: u64 = 1_000_000_000;

/// What the link does to frames, each decided per frame from the seeded generator.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// One-way latency.
    pub latency_ns: u64,
    /// Extra latency, uniform in `0..=jitter_ns` (reorders frames close together).
    pub jitter_ns: u64,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability one bit of a frame is flipped.
    pub corrupt: f64,
    /// Probability a frame is held back by `reorder_ns` (overtaken by later ones).
    pub reorder: f64,
    pub reorder_ns: u64,
    /// Payloads of at least this many bytes go into frames by reference
    /// ([`LinkCaps::external_min`]; the simulated buffers copy them in when the frame
    /// is finished, after its CRC was summed in three runs); `usize::MAX`: never.
    pub external_min: usize,
}

impl Default for LinkConfig {
    /// A clean link: 2 µs, no jitter, no faults.
    fn default() -> Self {
        LinkConfig {
            latency_ns: 2_000,
            jitter_ns: 0,
            loss: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            reorder: 0.0,
            reorder_ns: 20_000,
            external_min: usize::MAX,
        }
    }
}

impl LinkConfig {
    /// Each fault with probability `p`, with jitter: a hostile link.
    pub fn lossy(p: f64) -> LinkConfig {
        LinkConfig {
            jitter_ns: 1_000,
            loss: p,
            dup: p,
            corrupt: p,
            reorder: p,
            ..LinkConfig::default()
        }
    }
}

/// What the link did.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Dropped by the test's filter or because a host was down.
    pub filtered: u64,
}

pub use crate::rng::Rng;

/// One simulated host: a node, its link queue and its endpoints' memory.
/// The simulated clock, as a host's turn reads it (free to read, so read every turn),
/// and the host's count of turns.
struct SimClock<'a> {
    now: u64,
    /// When the turn's frames leave (`Host::turn_ns`).
    sending: u64,
    turns: &'a mut u64,
}

impl crate::node::Clock for SimClock<'_> {
    const CHEAP: bool = true;
    fn now(&mut self) -> u64 {
        self.now
    }
    fn now_sending(&mut self) -> u64 {
        self.sending
    }
    fn turns(&mut self) -> &mut u64 {
        self.turns
    }
}

pub struct Host {
    pub node: Node,
    pub out: FrameQueue,
    /// Down: neither sends nor receives (a crashed or unplugged peer).
    pub down: bool,
    pub memory: Vec<Arc<EndpointMemory>>,
    /// Turns the host took.
    pub turns: u64,
    /// How long each of its turns works before the frames it sent leave, ns: drawn
    /// uniformly between the two for every turn ((0, 0), the default: they leave as
    /// the turn begins). A receiver busy delivering a burst or sending its own data,
    /// which holds its acknowledgements that long (and reports it, `wire::op::HOLD`),
    /// while its next turn still takes what arrives meanwhile. Frames leave in the
    /// order sent.
    pub turn_ns: (u64, u64),
    /// Frames of its turns that leave later (`turn_ns`), with when.
    late: VecDeque<(u64, Vec<u8>)>,
}

impl Host {
    pub fn addr(&self) -> NodeAddr {
        self.node.local()
    }

    /// A new endpoint of `len` bytes (ordinary memory, zeroed) with `rights`, with
    /// event and exception queues of `events` entries.
    pub fn endpoint(&mut self, len: usize, rights: Rights, events: usize) -> EndpointId {
        let mem = Arc::new(EndpointMemory::alloc_ordinary(len).expect("endpoint memory"));
        let entry = EndpointEntry::new(mem.clone(), 0, len, rights).expect("endpoint");
        let id = self.node.endpoints.insert(entry);
        self.node.set_endpoint_queues(
            id,
            Arc::new(EventRing::new(events)),
            Arc::new(EventRing::new(events)),
        );
        let i = id.0 as usize;
        if self.memory.len() <= i {
            self.memory.resize(i + 1, mem.clone());
        }
        self.memory[i] = mem;
        id
    }

    /// The memory behind endpoint `id`.
    pub fn mem(&self, id: EndpointId) -> &EndpointMemory {
        &self.memory[id.0 as usize]
    }
}

/// A frame on the wire.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: u64,
    /// Sending order: equal times deliver in the order sent.
    order: u64,
    to: usize,
    bytes: Vec<u8>,
}

/// Which frames a filter sees: (from host, to host, frame bytes); true drops it.
pub type Filter = Box<dyn FnMut(usize, usize, &[u8]) -> bool>;

/// Hosts on one simulated segment, or on a switch fabric.
pub struct Network {
    pub hosts: Vec<Host>,
    /// Simulated time, ns.
    pub now: u64,
    pub link: LinkConfig,
    pub stats: LinkStats,
    rng: Rng,
    wire: BinaryHeap<Reverse<InFlight>>,
    order: u64,
    filter: Option<Filter>,
    /// The fabric every frame crosses instead of the flat link, when built with one.
    fabric: Option<Fabric>,
    /// A fabric network's nodes draw their numbers from its seed while it lives.
    _numbers: Option<crate::rng::SeededNumbers>,
}

/// Largest frame of the simulated link (a standard Ethernet frame: writes of a few
/// kilobytes take several messages).
pub const MAX_FRAME: usize = 1514;

impl Network {
    /// `n` hosts 10.0.0.1.. with node configuration `cfg` (its `local` is replaced),
    /// on a link that behaves as `link`, faults drawn from `seed`.
    pub fn new(n: usize, cfg: &NodeConfig, link: LinkConfig, seed: u64) -> Network {
        Network::build(n, cfg, link, seed, None)
    }

    /// `n` hosts as [`Network::new`] makes them, on the switch fabric `fabric`
    /// instead of a flat link: every frame waits for its links and queues, ECMP
    /// hashes and tail drops are seeded by `seed`. Of `link`, only the faults drawn
    /// per frame apply (loss, duplication, corruption, at the sending host) and
    /// `external_min`; latency, jitter and reordering are the fabric's business.
    ///
    /// While the network lives, the nodes on this thread draw their connection
    /// numbers, keys and initial sequence numbers from `seed`
    /// ([`crate::rng::SeededNumbers`]): a connection's UDP source port comes from its
    /// number, and the path ECMP gives it from the port, so this is what makes a run
    /// the same for the same seed.
    pub fn with_fabric(
        n: usize,
        cfg: &NodeConfig,
        link: LinkConfig,
        fabric: &FabricConfig,
        seed: u64,
    ) -> Network {
        let numbers = crate::rng::SeededNumbers::new(seed);
        let mut net = Network::build(n, cfg, link, seed, Some(fabric));
        net._numbers = Some(numbers);
        net
    }

    fn build(
        n: usize,
        cfg: &NodeConfig,
        link: LinkConfig,
        seed: u64,
        fabric: Option<&FabricConfig>,
    ) -> Network {
        let hosts: Vec<Host> = (0..n)
            .map(|i| {
                let mac = [2, 0, 0, 0, 0, i as u8 + 1];
                let caps = LinkCaps {
                    mac,
                    max_frame: MAX_FRAME,
                    queues: 1,
                    rx_desc: 1024,
                    external_min: link.external_min,
                };
                let mut c = cfg.clone();
                if let Some(f) = fabric {
                    // The port's line rate is its link's, as a DPDK port reads its
                    // link's speed (unless the configuration named one).
                    if c.cc.line_rate_mbps == crate::node::cc::CcConfig::default().line_rate_mbps {
                        c.cc.line_rate_mbps = (f.host_link.rate_bps / 1_000_000).max(1);
                    }
                }
                // Every host a node of its own: its own identity key.
                c.identity =
                    Arc::new(crate::identity::Identity::generate().expect("the OS random source"));
                // IPv4 hosts 10.0.0.1.., or IPv6 ones fd00::1.. when `cfg` is on IPv6.
                let ip = if cfg.local.ip.is_ipv6() {
                    std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1).into()
                } else {
                    [10, 0, 0, i as u8 + 1].into()
                };
                c.local = NodeAddr {
                    mac,
                    ip,
                    udp_port: wire::UDP_PORT,
                };
                Host {
                    node: Node::new(c, caps, HZ, 0),
                    out: FrameQueue::new(MAX_FRAME, 1 << 16),
                    down: false,
                    memory: Vec::new(),
                    turns: 0,
                    turn_ns: (0, 0),
                    late: VecDeque::new(),
                }
            })
            .collect();
        let macs: Vec<[u8; 6]> = hosts.iter().map(|h| h.addr().mac).collect();
        Network {
            fabric: fabric.map(|f| Fabric::new(f, &macs, seed)),
            hosts,
            now: 0,
            link,
            stats: LinkStats::default(),
            rng: Rng::new(seed),
            wire: BinaryHeap::new(),
            order: 0,
            filter: None,
            _numbers: None,
        }
    }

    /// The fabric, when the network was built with one.
    pub fn fabric(&self) -> Option<&Fabric> {
        self.fabric.as_ref()
    }

    /// The fabric, to change (a link's rate, a tap), when the network was built with
    /// one.
    pub fn fabric_mut(&mut self) -> Option<&mut Fabric> {
        self.fabric.as_mut()
    }

    /// What the fabric recorded; panics on a flat network (a test that asks expects a
    /// fabric).
    pub fn fabric_stats(&self) -> &FabricStats {
        self.fabric
            .as_ref()
            .expect("a network built with_fabric")
            .stats()
    }

    /// Gives host `h` a receive queue of `n` descriptors (what it shares out as
    /// credits, from its next timer on).
    pub fn set_rx_desc(&mut self, h: usize, n: u16) {
        let node = &mut self.hosts[h].node;
        node.caps.rx_desc = n;
        node.set_credits();
    }

    /// Drops the frames `f` returns true for (until replaced or cleared with `None`).
    pub fn set_filter(&mut self, f: Option<Filter>) {
        self.filter = f;
    }

    /// One round: the frames due now reach their hosts' receive queues, then every
    /// host takes one [`Node::turn`] — the DPDK worker's turn, in its order (a burst
    /// of at most `RX_BURST` frames; the rest in the next rounds) — and what it sent
    /// goes on the wire.
    pub fn step(&mut self) {
        let now = self.now;
        if let Some(fabric) = self.fabric.as_mut() {
            let (hosts, stats) = (&mut self.hosts, &mut self.stats);
            fabric.advance(now, |to, bytes| {
                let h = &mut hosts[to];
                if h.down {
                    stats.filtered += 1;
                } else {
                    stats.delivered += 1;
                    h.out.rx.push_back(bytes);
                }
            });
        }
        for i in 0..self.hosts.len() {
            while self.hosts[i].late.front().is_some_and(|f| f.0 <= now) {
                let (_, frame) = self.hosts[i].late.pop_front().expect("looked at");
                self.send(i, frame);
            }
        }
        while self.wire.peek().is_some_and(|f| f.0.at <= now) {
            let Reverse(f) = self.wire.pop().expect("peeked");
            let h = &mut self.hosts[f.to];
            if h.down {
                self.stats.filtered += 1;
                continue;
            }
            self.stats.delivered += 1;
            h.out.rx.push_back(f.bytes);
        }
        for i in 0..self.hosts.len() {
            let h = &mut self.hosts[i];
            if h.down {
                continue;
            }
            let sending = match h.turn_ns {
                (0, 0) => now,
                (lo, hi) => {
                    let d = lo + self.rng.below(hi.saturating_sub(lo) + 1);
                    // (in the order sent: not before the last turn's frames)
                    (now + d).max(h.late.back().map_or(0, |f| f.0))
                }
            };
            let mut clock = SimClock {
                now,
                sending,
                turns: &mut h.turns,
            };
            h.node.turn(&mut clock, &mut h.out);
            while let Some(frame) = self.hosts[i].out.pop() {
                if sending > now {
                    self.hosts[i].late.push_back((sending, frame));
                } else {
                    self.send(i, frame);
                }
            }
        }
    }

    /// Puts a frame from host `from` on the wire, through the link's faults: to the
    /// host of its destination MAC, or to every other host when it is broadcast or
    /// multicast (ARP, neighbour discovery).
    fn send(&mut self, from: usize, frame: Vec<u8>) {
        self.stats.sent += 1;
        if frame[0] & 1 != 0 {
            for to in (0..self.hosts.len()).filter(|&h| h != from) {
                self.send_to(from, to, frame.clone(), true);
            }
            return;
        }
        let to = match &self.fabric {
            Some(f) => f.host_of(&frame),
            None => self.hosts.iter().position(|h| frame[..6] == h.addr().mac),
        };
        let Some(to) = to else {
            self.stats.filtered += 1;
            if let Some(f) = self.fabric.as_mut() {
                f.unknown_mac();
            }
            return;
        };
        self.send_to(from, to, frame, false);
    }

    /// One frame (a broadcast's copy when `flood`) from host `from` to host `to`,
    /// through the filter and the link's faults.
    fn send_to(&mut self, from: usize, to: usize, mut frame: Vec<u8>, flood: bool) {
        if let Some(f) = self.filter.as_mut() {
            if f(from, to, &frame) {
                self.stats.filtered += 1;
                return;
            }
        }
        let l = self.link;
        if self.rng.chance(l.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(l.corrupt) {
            let bit = self.rng.below(frame.len() as u64 * 8) as usize;
            frame[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let copies = if self.rng.chance(l.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if let Some(f) = self.fabric.as_mut() {
                if flood {
                    f.flood(self.now, from, to, frame.clone());
                } else {
                    f.inject(self.now, from, to, frame.clone());
                }
                continue;
            }
            let mut at = self.now + l.latency_ns;
            if l.jitter_ns > 0 {
                at += self.rng.below(l.jitter_ns + 1);
            }
            if self.rng.chance(l.reorder) {
                at += l.reorder_ns;
                self.stats.reordered += 1;
            }
            self.order += 1;
            self.wire.push(Reverse(InFlight {
                at,
                order: self.order,
                to,
                bytes: frame.clone(),
            }));
        }
    }

    /// When something next happens for a host: a delivery or a node's timer (at least
    /// 100 ns on). A fabric runs what happens inside it meanwhile, up to `end` at most.
    fn next_event(&mut self, end: u64) -> u64 {
        let timers = self
            .hosts
            .iter()
            .filter(|h| !h.down)
            .map(|h| {
                if h.out.rx_pending() {
                    self.now // frames a turn left for the next
                } else {
                    let late = h.late.front().map_or(u64::MAX, |f| f.0);
                    h.node.next_timeout().min(late)
                }
            })
            .min()
            .unwrap_or(u64::MAX);
        let wire = match self.fabric.as_mut() {
            Some(f) => f.next_delivery(timers.min(end)),
            None => self.wire.peek().map_or(u64::MAX, |f| f.0.at),
        };
        wire.min(timers).max(self.now + 100)
    }

    /// Steps until `done` holds (true) or `limit_ns` of simulated time passed (false).
    pub fn run_until(&mut self, limit_ns: u64, mut done: impl FnMut(&mut Network) -> bool) -> bool {
        let end = self.now + limit_ns;
        loop {
            self.step();
            if done(self) {
                return true;
            }
            let next = self.next_event(end);
            if next > end {
                self.now = end;
                return done(self);
            }
            self.now = next;
        }
    }

    /// Steps for `ns` of simulated time.
    pub fn run_for(&mut self, ns: u64) {
        self.run_until(ns, |_| false);
    }

    /// Listens on `service` at host `server` (into `endpoint`), connects from host
    /// `client` (from `client_ep`) and runs until both ends are live. Returns the
    /// (client, server) connections.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        client: usize,
        client_ep: EndpointId,
        client_cq: &Arc<CqShared>,
        server: usize,
        server_ep: EndpointId,
        server_cq: &Arc<CqShared>,
        service: u32,
        opts: &ConnectOptions,
    ) -> Option<(Arc<ConnShared>, Arc<ConnShared>)> {
        let accepted = match self.hosts[server].node.listeners.get(&service) {
            Some(l) => l.accepted.clone(),
            None => self.hosts[server]
                .node
                .listen(service, server_ep, server_cq.clone(), opts, 64)
                .ok()?,
        };
        let peer = self.hosts[server].addr();
        let now = self.now;
        let node = &mut self.hosts[client].node;
        node.set_now(now);
        let c = node
            .connect(peer, service, client_ep, client_cq.clone(), opts)
            .ok()?;
        let mut s = None;
        let ok = self.run_until(30 * HZ, |_| {
            if s.is_none() {
                s = accepted.pop().map(|a| a.shared);
            }
            s.is_some() && c.state() != ConnState::Connecting
        });
        (ok && c.state() == ConnState::Normal).then(|| (c, s.expect("accepted")))
    }
}

/// Posts a work request on a connection (reserving its completion when signaled);
/// false when the send queue, the completion queue or the submission ring is full.
pub fn post(conn: &ConnShared, wr: Wqe) -> bool {
    conn.post(&wr).is_ok()
}

/// Takes every completion waiting in `cq`.
pub fn drain(cq: &CqShared) -> Vec<Completion> {
    std::iter::from_fn(|| cq.pop()).collect()
}
