//! A switch fabric for the simulated network: links with a rate, switch output queues
//! with a byte limit and an ECN threshold, and ECMP over a leaf–spine — what a
//! congested data-centre network does to frames, so that tests can show what goes
//! wrong without congestion control and measure it (issue 38).
//!
//! ```text
//!  host 0 ─NIC─┐            ┌─Up─ spine 0 ─Down─┐            ┌─ToHost─ host 2
//!              ├── leaf 0 ──┤                   ├── leaf 1 ──┤
//!  host 1 ─NIC─┘   (ECMP)   └─Up─ spine 1 ─Down─┘            └─ToHost─ host 3
//! ```
//!
//! (Every link carries both ways, each direction its own port: leaf 1's hosts send
//! up from it too, and leaf 0 has a `ToHost` port for each of its hosts.)
//!
//! Every hop is an egress [`Port`] — a FIFO of frames in front of a link of a rate and
//! a propagation latency. A frame takes `(max(len, 60) + 24) × 8 / rate` to send: 60
//! bytes is Ethernet's shortest frame without its FCS (shorter ones are padded), and
//! 24 bytes are what every frame costs on the wire beyond the bytes a node writes:
//! preamble and start delimiter (8), FCS (4) and the inter-frame gap (12). A switch
//! stores and forwards: the frame reaches the next hop once its last bit is sent plus
//! the propagation latency. A port is busy until its frame is out (kept exactly, in
//! picoseconds, so that back-to-back frames do not gain a rounding each); that and
//! one event per frame per hop are the whole cost of serialisation, so a run is
//! O(frames × hops × log events), whatever the rates.
//!
//! - A host's own **NIC** is a port too (unbounded, never marks): a node that bursts
//!   its window waits for its link rather than teleporting it into the switch. Its
//!   frames leave in the order the node queued them (high-priority ones first within
//!   a turn, as `FrameQueue::pop` gives them; one transmit queue after that).
//! - A **switch's output queue** holds at most `QueueSpec::limit_bytes` (the frame
//!   being sent included): a frame that does not fit is dropped (tail drop, counted
//!   per port). A frame that finds more than `QueueSpec::ecn_bytes` queued is marked
//!   CE when it is ECN-capable (ECT(0) or ECT(1)); one that is not (ECN 00, every
//!   frame the transport sends today) is never marked. A step threshold, as DCTCP
//!   and NSCC-style tests use, not a RED ramp.
//! - **Routing** is by destination MAC (the hosts' own; an unknown one is counted and
//!   dropped). A leaf sends a frame for one of its hosts straight down and any other
//!   up to a spine chosen by hashing the frame's 5-tuple ([`FiveTuple`]) under the
//!   leaf's seed (from the network's): a connection (one UDP source port) keeps one
//!   path, different ones spread. A spine sends down to the destination's leaf.
//! - **Broadcast and multicast** frames (ARP, neighbour discovery: the group bit of
//!   the destination MAC) reach every other host after the path's idle delay
//!   (propagation and serialisation), bypassing the queues: they are few and small,
//!   and replicating them through every queue would model nothing tests look at.
//!
//! A [`Network`](super::Network) built with
//! [`Network::with_fabric`](super::Network::with_fabric) sends every frame through its
//! fabric instead of the flat link; the link's loss, duplication and corruption still
//! apply (at the sending host, before its NIC), its latency, jitter and reordering do
//! not. What the fabric saw is in [`FabricStats`].
//!
//! A switch here reads only the headers a real one reads (Ethernet, one VLAN tag, IP,
//! the UDP ports) and changes nothing in a frame but its ECN mark: whatever a node
//! makes of a frame is the node's, as on a real network.

mod frame;
mod record;
mod shape;

pub use frame::{ecn, set_ecn, FiveTuple, CE, ECT0, ECT1, NOT_ECT};
pub use record::{FabricStats, FlowKey, FlowStats, Histogram, PortStats, Series};
pub use shape::{
    serialisation_ns, serialisation_ps, wire_bytes, FabricConfig, LinkSpec, Port, QueueSpec,
    DEFAULT_BIN_NS, ETH_MIN_FRAME, ETH_OVERHEAD,
};

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// Where a port's link ends.
#[derive(Debug, Clone, Copy)]
enum Hop {
    /// Switch `s`: leaves `0..leaves`, then the spines.
    Switch(usize),
    /// The frame's destination host.
    Host,
}

/// A frame in the fabric.
struct Packet {
    bytes: Vec<u8>,
    from: usize,
    to: usize,
    /// When the node queued it, ns.
    sent_ns: u64,
    /// The spine it crossed.
    spine: Option<usize>,
    /// A broadcast copy (not a flow's).
    flooded: bool,
}

/// One egress port: its link and its queue.
struct PortState {
    rate_bps: u64,
    latency_ns: u64,
    queue: QueueSpec,
    /// A switch's port drops and marks; a NIC only waits.
    switch: bool,
    next: Hop,
    frames: VecDeque<Packet>,
    /// Bytes queued, the frame being sent included.
    depth: u64,
    /// When the link is free: the end of the last frame started, ps.
    free_ps: u64,
    busy: bool,
}

/// Something due in the fabric.
enum What {
    /// Port `p` finished sending its head frame.
    Sent(usize),
    /// A frame reached a switch or a host.
    Arrive(Hop, Packet),
}

struct Event {
    at: u64,
    /// Scheduling order: events of one time happen in the order they were made.
    order: u64,
    what: What,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.order) == (o.at, o.order)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.order).cmp(&(o.at, o.order))
    }
}

/// Sees every frame as it reaches a host: (time ns, from host, to host, frame bytes).
pub type Tap = Box<dyn FnMut(u64, usize, usize, &[u8])>;

/// The fabric of a simulated network: its ports, the frames in it, what it recorded.
pub struct Fabric {
    hosts: usize,
    leaves: usize,
    spines: usize,
    host_leaf: Vec<usize>,
    /// Each leaf's ECMP hash seed.
    leaf_seed: Vec<u64>,
    macs: HashMap<[u8; 6], usize>,
    ports: Vec<PortState>,
    events: BinaryHeap<Reverse<Event>>,
    order: u64,
    make_ect: bool,
    stats: FabricStats,
    tap: Option<Tap>,
}

impl Fabric {
    /// The fabric `cfg` for hosts of MACs `macs` (host `i` has `macs[i]`), its hashes
    /// seeded by `seed`. Panics on a shape that cannot be built (no leaf, several
    /// leaves and no spine, a host on a leaf that is not there, a zero rate).
    pub(super) fn new(cfg: &FabricConfig, macs: &[[u8; 6]], seed: u64) -> Fabric {
        let n = macs.len();
        assert!(cfg.leaves >= 1, "a fabric needs a leaf");
        assert!(
            cfg.leaves == 1 || cfg.spines >= 1,
            "{} leaves and no spine to join them",
            cfg.leaves
        );
        assert!(cfg.bin_ns > 0, "bins of 0 ns");
        assert!(
            cfg.host_link.rate_bps > 0 && cfg.core_link.rate_bps > 0,
            "a link of rate 0"
        );
        let host_leaf = if cfg.host_leaf.is_empty() {
            (0..n).map(|i| i * cfg.leaves / n.max(1)).collect()
        } else {
            cfg.host_leaf.clone()
        };
        assert_eq!(host_leaf.len(), n, "a leaf for each of the {n} hosts");
        assert!(
            host_leaf.iter().all(|&l| l < cfg.leaves),
            "hosts on leaves {host_leaf:?} of {}",
            cfg.leaves
        );
        let spines = if cfg.leaves == 1 { 0 } else { cfg.spines };
        let mut ports = Vec::new();
        let mut records = Vec::new();
        let mut add = |port: Port, link: LinkSpec, switch: bool, next: Hop| {
            ports.push(PortState {
                rate_bps: link.rate_bps,
                latency_ns: link.latency_ns,
                queue: cfg.queue,
                switch,
                next,
                frames: VecDeque::new(),
                depth: 0,
                free_ps: 0,
                busy: false,
            });
            records.push(PortStats::new(port, link.rate_bps, cfg.bin_ns));
        };
        for (h, &leaf) in host_leaf.iter().enumerate() {
            add(Port::Nic(h), cfg.host_link, false, Hop::Switch(leaf));
        }
        for h in 0..n {
            add(Port::ToHost(h), cfg.host_link, true, Hop::Host);
        }
        for leaf in 0..cfg.leaves {
            for spine in 0..spines {
                let s = Hop::Switch(cfg.leaves + spine);
                add(Port::Up { leaf, spine }, cfg.core_link, true, s);
            }
        }
        for spine in 0..spines {
            for leaf in 0..cfg.leaves {
                let l = Hop::Switch(leaf);
                add(Port::Down { spine, leaf }, cfg.core_link, true, l);
            }
        }
        Fabric {
            hosts: n,
            leaves: cfg.leaves,
            spines,
            leaf_seed: (0..cfg.leaves)
                .map(|l| frame::mix(seed ^ frame::mix(l as u64 + 1)))
                .collect(),
            host_leaf,
            macs: macs.iter().enumerate().map(|(i, &m)| (m, i)).collect(),
            ports,
            events: BinaryHeap::new(),
            order: 0,
            make_ect: cfg.make_ect,
            stats: FabricStats {
                bin_ns: cfg.bin_ns,
                ports: records,
                flows: Default::default(),
                unknown_mac: 0,
                flooded: 0,
                made_ect: 0,
            },
            tap: None,
        }
    }

    /// What the fabric recorded so far.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// The host of `mac`, if one has it.
    pub fn host_of(&self, mac: &[u8]) -> Option<usize> {
        let mac: [u8; 6] = mac.get(..6)?.try_into().ok()?;
        self.macs.get(&mac).copied()
    }

    /// The leaf host `h` is on.
    pub fn leaf_of(&self, h: usize) -> usize {
        self.host_leaf[h]
    }

    /// Spines (0 for one switch).
    pub fn spines(&self) -> usize {
        self.spines
    }

    fn index(&self, port: Port) -> usize {
        let (n, l, s) = (self.hosts, self.leaves, self.spines);
        let i = match port {
            Port::Nic(h) if h < n => h,
            Port::ToHost(h) if h < n => n + h,
            Port::Up { leaf, spine } if leaf < l && spine < s => 2 * n + leaf * s + spine,
            Port::Down { spine, leaf } if leaf < l && spine < s => 2 * n + l * s + spine * l + leaf,
            _ => panic!("no port {port:?} in a fabric of {n} hosts, {l} leaves, {s} spines"),
        };
        debug_assert_eq!(self.stats.ports[i].port, port);
        i
    }

    /// Sets `port`'s rate (a degraded link: a spine path at a tenth of the others'):
    /// the frames it starts from now on take the new time.
    pub fn set_rate(&mut self, port: Port, rate_bps: u64) {
        assert!(rate_bps > 0, "a link of rate 0");
        let i = self.index(port);
        self.ports[i].rate_bps = rate_bps;
        self.stats.ports[i].rate_bps = rate_bps;
    }

    /// Sets the rate of every link of spine `spine`, up from each leaf and down to it.
    pub fn set_spine_rate(&mut self, spine: usize, rate_bps: u64) {
        for leaf in 0..self.leaves {
            self.set_rate(Port::Up { leaf, spine }, rate_bps);
            self.set_rate(Port::Down { spine, leaf }, rate_bps);
        }
    }

    /// Bytes queued at `port` now (the frame being sent included).
    pub fn queued(&self, port: Port) -> u64 {
        self.ports[self.index(port)].depth
    }

    /// Sees every frame as it reaches a host (until replaced or cleared).
    pub fn set_tap(&mut self, tap: Option<Tap>) {
        self.tap = tap;
    }

    /// The spine a leaf sends `frame` up to.
    fn ecmp(&self, leaf: usize, frame: &[u8]) -> usize {
        (FiveTuple::of(frame).hash(self.leaf_seed[leaf]) % self.spines as u64) as usize
    }

    /// The ports `frame` crosses from host `from` to host `to`.
    pub fn path(&self, from: usize, to: usize, frame: &[u8]) -> Vec<Port> {
        let (a, b) = (self.host_leaf[from], self.host_leaf[to]);
        let mut p = vec![Port::Nic(from)];
        if a != b {
            let spine = self.ecmp(a, frame);
            p.push(Port::Up { leaf: a, spine });
            p.push(Port::Down { spine, leaf: b });
        }
        p.push(Port::ToHost(to));
        p
    }

    /// How long `frame` takes from host `from` to host `to` with every queue on its
    /// path empty: each hop's serialisation (rounded up to a nanosecond, as the
    /// fabric schedules it) and propagation.
    pub fn idle_delay_ns(&self, from: usize, to: usize, frame: &[u8]) -> u64 {
        self.path(from, to, frame)
            .into_iter()
            .map(|p| {
                let s = &self.ports[self.index(p)];
                serialisation_ns(frame.len(), s.rate_bps) + s.latency_ns
            })
            .sum()
    }

    fn schedule(&mut self, at: u64, what: What) {
        self.order += 1;
        self.events.push(Reverse(Event {
            at,
            order: self.order,
            what,
        }));
    }

    /// A unicast frame host `from` sent at `now` to host `to`: into its NIC's queue.
    pub(super) fn inject(&mut self, now: u64, from: usize, to: usize, mut bytes: Vec<u8>) {
        if self.make_ect && ecn(&bytes) == Some(NOT_ECT) && set_ecn(&mut bytes, ECT0) {
            self.stats.made_ect += 1;
        }
        let p = Packet {
            bytes,
            from,
            to,
            sent_ns: now,
            spine: None,
            flooded: false,
        };
        self.enqueue(self.index(Port::Nic(from)), p, now);
    }

    /// A broadcast copy from host `from` at `now` for host `to`: delivered after the
    /// idle path's delay, past the queues.
    pub(super) fn flood(&mut self, now: u64, from: usize, to: usize, bytes: Vec<u8>) {
        let at = now + self.idle_delay_ns(from, to, &bytes);
        self.stats.flooded += 1;
        let p = Packet {
            bytes,
            from,
            to,
            sent_ns: now,
            spine: None,
            flooded: true,
        };
        self.schedule(at, What::Arrive(Hop::Host, p));
    }

    /// Counts a unicast frame to a MAC no host has (the caller drops it).
    pub(super) fn unknown_mac(&mut self) {
        self.stats.unknown_mac += 1;
    }

    /// Queues `p` at port `i` at `now`: tail drop, ECN marking, then sending when the
    /// link is idle.
    fn enqueue(&mut self, i: usize, mut p: Packet, now: u64) {
        let port = &mut self.ports[i];
        let rec = &mut self.stats.ports[i];
        let len = p.bytes.len() as u64;
        let depth = port.depth;
        rec.arrivals.record(depth);
        if port.switch {
            if depth + len > port.queue.limit_bytes {
                rec.drops += 1;
                return;
            }
            if depth > port.queue.ecn_bytes
                && matches!(ecn(&p.bytes), Some(ECT0 | ECT1))
                && set_ecn(&mut p.bytes, CE)
            {
                rec.marks += 1;
                rec.min_marked_depth = rec.min_marked_depth.min(depth);
            }
        }
        port.depth += len;
        rec.max_depth = rec.max_depth.max(port.depth);
        rec.depth.level(now, depth, port.depth);
        port.frames.push_back(p);
        if !port.busy {
            let start = (now * 1000).max(port.free_ps);
            self.start(i, start);
        }
    }

    /// Port `i` starts sending its head frame at `start_ps`.
    fn start(&mut self, i: usize, start_ps: u64) {
        let port = &mut self.ports[i];
        let len = port.frames.front().expect("a frame to send").bytes.len();
        port.busy = true;
        port.free_ps = start_ps + serialisation_ps(len, port.rate_bps);
        let at = port.free_ps.div_ceil(1000);
        self.schedule(at, What::Sent(i));
    }

    /// Port `i`'s head frame is out at `now`: on its way to the next hop, and the next
    /// frame starts right behind it.
    fn sent(&mut self, i: usize, now: u64) {
        let port = &mut self.ports[i];
        let p = port.frames.pop_front().expect("the frame sent");
        let len = p.bytes.len() as u64;
        let before = port.depth;
        port.depth -= len;
        let rec = &mut self.stats.ports[i];
        rec.frames += 1;
        rec.bytes += len;
        rec.depth.level(now, before, port.depth);
        let (next, at) = (port.next, now + port.latency_ns);
        if port.frames.is_empty() {
            port.busy = false;
        } else {
            let free = port.free_ps;
            self.start(i, free);
        }
        self.schedule(at, What::Arrive(next, p));
    }

    /// A frame reached switch `s` at `now`: to the egress its destination takes.
    fn switch(&mut self, s: usize, mut p: Packet, now: u64) {
        let leaf = self.host_leaf[p.to];
        let port = if s >= self.leaves {
            Port::Down {
                spine: s - self.leaves,
                leaf,
            }
        } else if leaf == s {
            Port::ToHost(p.to)
        } else {
            let spine = self.ecmp(s, &p.bytes);
            p.spine = Some(spine);
            Port::Up { leaf: s, spine }
        };
        self.enqueue(self.index(port), p, now);
    }

    /// A frame reached its host at `now`: recorded, then handed over.
    fn arrive(&mut self, p: Packet, now: u64, deliver: &mut impl FnMut(usize, Vec<u8>)) {
        if let Some(tap) = self.tap.as_mut() {
            tap(now, p.from, p.to, &p.bytes);
        }
        if !p.flooded {
            let key = FlowKey {
                from: p.from,
                to: p.to,
                src_port: FiveTuple::of(&p.bytes).src_port,
            };
            let bin = self.stats.bin_ns;
            let f = self
                .stats
                .flows
                .entry(key)
                .or_insert_with(|| FlowStats::new(bin));
            let len = p.bytes.len() as u64;
            let delay = now - p.sent_ns;
            f.frames += 1;
            f.bytes += len;
            f.ce += u64::from(ecn(&p.bytes) == Some(CE));
            f.first_ns = f.first_ns.min(now);
            f.last_ns = now;
            f.min_delay_ns = f.min_delay_ns.min(delay);
            f.max_delay_ns = f.max_delay_ns.max(delay);
            f.sum_delay_ns += delay;
            if let Some(s) = p.spine {
                f.spines |= 1 << s;
            }
            f.delivered.add(now, len);
        }
        deliver(p.to, p.bytes);
    }

    fn handle(&mut self, e: Event, deliver: &mut impl FnMut(usize, Vec<u8>)) {
        match e.what {
            What::Sent(i) => self.sent(i, e.at),
            What::Arrive(Hop::Switch(s), p) => self.switch(s, p, e.at),
            What::Arrive(Hop::Host, p) => self.arrive(p, e.at, deliver),
        }
    }

    /// Runs everything due by `now`; frames that reach their hosts go to `deliver`
    /// (host, bytes).
    pub(super) fn advance(&mut self, now: u64, mut deliver: impl FnMut(usize, Vec<u8>)) {
        while self.events.peek().is_some_and(|e| e.0.at <= now) {
            let Reverse(e) = self.events.pop().expect("peeked");
            self.handle(e, &mut deliver);
        }
    }

    /// When a frame next reaches a host, running meanwhile what happens inside the
    /// fabric up to `bound` (nothing a host does can come before it: no host acts
    /// before its next timer or arrival). Beyond `bound`: the time of the next event
    /// of any kind, or `u64::MAX` when there is none.
    pub(super) fn next_delivery(&mut self, bound: u64) -> u64 {
        loop {
            let Some(Reverse(e)) = self.events.peek() else {
                return u64::MAX;
            };
            if e.at > bound || matches!(e.what, What::Arrive(Hop::Host, _)) {
                return e.at;
            }
            let Reverse(e) = self.events.pop().expect("peeked");
            self.handle(e, &mut |_, _| unreachable!("not a host's arrival"));
        }
    }
}
