//! The shape of a fabric, as a test writes it down: its links' rates and latencies,
//! its queues' limits and thresholds, which hosts hang off which leaf, and the names
//! of its egress ports; and what a frame costs on a link of a rate (Ethernet's
//! padding and per-frame overhead included). No state: [`super::Fabric`] builds from
//! it.

/// Bytes every Ethernet frame costs on the wire beyond those the node writes:
/// preamble and start-of-frame delimiter (8), FCS (4), inter-frame gap (12).
pub const ETH_OVERHEAD: u64 = 24;
/// Ethernet's shortest frame without its FCS: shorter frames are padded to it.
pub const ETH_MIN_FRAME: usize = 60;

/// The bytes a frame of `len` bytes (as the node writes it) occupies on a link.
pub fn wire_bytes(len: usize) -> u64 {
    len.max(ETH_MIN_FRAME) as u64 + ETH_OVERHEAD
}

/// Picoseconds to send a frame of `len` bytes at `rate_bps`.
pub fn serialisation_ps(len: usize, rate_bps: u64) -> u64 {
    (u128::from(wire_bytes(len)) * 8 * 1_000_000_000_000 / u128::from(rate_bps)) as u64
}

/// Nanoseconds to send a frame of `len` bytes at `rate_bps`, rounded up: what one
/// hop adds to an idle path besides its latency.
pub fn serialisation_ns(len: usize, rate_bps: u64) -> u64 {
    serialisation_ps(len, rate_bps).div_ceil(1000)
}

/// A link's rate and propagation latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bits per second.
    pub rate_bps: u64,
    /// One-way propagation latency, ns.
    pub latency_ns: u64,
}

impl LinkSpec {
    /// A link of `gbps` gigabits per second (10^9) and `latency_ns` of propagation.
    pub fn gbps(gbps: f64, latency_ns: u64) -> LinkSpec {
        LinkSpec {
            rate_bps: (gbps * 1e9) as u64,
            latency_ns,
        }
    }
}

/// A switch output queue: its byte limit and its ECN marking threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// Most bytes queued (the frame being sent included); a frame that does not fit
    /// is dropped.
    pub limit_bytes: u64,
    /// An ECN-capable frame that finds more than this queued is marked CE
    /// (`u64::MAX`: never).
    pub ecn_bytes: u64,
}

impl QueueSpec {
    /// A queue of `limit_bytes` that marks above `ecn_bytes`.
    pub fn new(limit_bytes: u64, ecn_bytes: u64) -> QueueSpec {
        QueueSpec {
            limit_bytes,
            ecn_bytes,
        }
    }

    /// A queue of `limit_bytes` that only drops.
    pub fn tail_drop(limit_bytes: u64) -> QueueSpec {
        QueueSpec::new(limit_bytes, u64::MAX)
    }
}

/// The shape of a fabric: hosts on leaves, leaves under spines, the links and the
/// queues.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricConfig {
    /// Every host's link to its leaf (both ways; its NIC sends at this rate).
    pub host_link: LinkSpec,
    /// Every leaf's link to every spine (both ways).
    pub core_link: LinkSpec,
    /// Leaf switches (at least one).
    pub leaves: usize,
    /// Spine switches: at least one when there are several leaves, none for one.
    pub spines: usize,
    /// The leaf of each host; empty: the hosts in contiguous blocks, as even as they
    /// go (host `i` of `n` on leaf `i × leaves / n`).
    pub host_leaf: Vec<usize>,
    /// Every switch output queue.
    pub queue: QueueSpec,
    /// Width of the recorded series' bins, ns.
    pub bin_ns: u64,
    /// Test hook, standing in for senders that set ECT until the transport does
    /// (the underlay's `traffic_class` will carry it): every IP frame a host sends
    /// with ECN 00 is made ECT(0) before its NIC (IPv4 checksum updated), so the
    /// switches may mark it.
    pub make_ect: bool,
}

/// Default width of the recorded bins: 100 µs.
pub const DEFAULT_BIN_NS: u64 = 100_000;

impl FabricConfig {
    /// One switch (one leaf, no spine) with every host on it: the incast fabric.
    pub fn switch(host_link: LinkSpec, queue: QueueSpec) -> FabricConfig {
        FabricConfig::leaf_spine(1, 0, host_link, host_link, queue)
    }

    /// `leaves` leaves under `spines` spines, every leaf linked to every spine.
    pub fn leaf_spine(
        leaves: usize,
        spines: usize,
        host_link: LinkSpec,
        core_link: LinkSpec,
        queue: QueueSpec,
    ) -> FabricConfig {
        FabricConfig {
            host_link,
            core_link,
            leaves,
            spines,
            host_leaf: Vec::new(),
            queue,
            bin_ns: DEFAULT_BIN_NS,
            make_ect: false,
        }
    }
}

/// An egress port of the fabric, named by where it sends: what
/// [`FabricStats::ports`](super::FabricStats::ports) records and
/// [`Fabric::set_rate`](super::Fabric::set_rate) changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// Host `h`'s NIC, toward its leaf.
    Nic(usize),
    /// The leaf's port down to host `h` (an incast's bottleneck).
    ToHost(usize),
    /// Leaf `leaf`'s port up to spine `spine`.
    Up {
        /// The leaf it leaves.
        leaf: usize,
        /// The spine it goes to.
        spine: usize,
    },
    /// Spine `spine`'s port down to leaf `leaf`.
    Down {
        /// The spine it leaves.
        spine: usize,
        /// The leaf it goes to.
        leaf: usize,
    },
}
