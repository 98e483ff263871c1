//! What the fabric saw, for tests and plots: per flow the bytes delivered over time,
//! per egress port its queue depth over time and as percentiles, drops and marks.
//!
//! Memory stays bounded however many frames pass: a series is binned (one entry per
//! bin of simulated time that saw something, not one per frame) and a depth
//! distribution is a log-linear histogram of a few hundred counters. Every type here
//! compares with `==`, so that two runs of one seed can be shown identical.

use std::collections::BTreeMap;

use super::Port;

/// A quantity over simulated time, in bins of `bin_ns` nanoseconds: `(start of the
/// bin, value)` in time order, only for the bins that saw something. What a bin's
/// value means is the series' own (bytes delivered in it, the largest queue depth in
/// it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// Width of a bin.
    pub bin_ns: u64,
    /// `(bin start ns, value)`, bin starts increasing.
    pub bins: Vec<(u64, u64)>,
}

impl Series {
    /// An empty series of bins `bin_ns` wide.
    pub fn new(bin_ns: u64) -> Series {
        Series {
            bin_ns,
            bins: Vec::new(),
        }
    }

    fn start(&self, t: u64) -> u64 {
        t - t % self.bin_ns
    }

    /// Adds `v` to the bin of time `t` (times never go back).
    pub(super) fn add(&mut self, t: u64, v: u64) {
        let b = self.start(t);
        match self.bins.last_mut() {
            Some((s, x)) if *s == b => *x += v,
            _ => self.bins.push((b, v)),
        }
    }

    /// A level (a queue's depth) changed at `t` from `before` to `after`: each bin
    /// keeps the largest level it held. Bins the level crossed without a change in
    /// them get `before`, when it is not zero (a frame slower to send than a bin is
    /// wide), so that a plot of a standing queue has no holes.
    pub(super) fn level(&mut self, t: u64, before: u64, after: u64) {
        let b = self.start(t);
        match self.bins.last_mut() {
            Some((s, x)) if *s == b => {
                *x = (*x).max(after);
                return;
            }
            Some(&mut (s, _)) if before > 0 => {
                let mut s = s + self.bin_ns;
                while s < b {
                    self.bins.push((s, before));
                    s += self.bin_ns;
                }
            }
            _ => {}
        }
        self.bins.push((b, before.max(after)));
    }

    /// The sum of the values of the bins that start in `[from, to)`.
    pub fn sum_between(&self, from: u64, to: u64) -> u64 {
        self.bins
            .iter()
            .filter(|(s, _)| (from..to).contains(s))
            .map(|(_, v)| v)
            .sum()
    }

    /// The sum of every bin's value.
    pub fn total(&self) -> u64 {
        self.bins.iter().map(|(_, v)| v).sum()
    }
}

/// Sub-buckets per power of two of a [`Histogram`]: values are kept within 1/32
/// (3 %) of themselves, exactly below 64.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;

/// A distribution of non-negative values (queue depths in bytes) in log-linear
/// buckets, as HdrHistogram keeps them: exact below 64, within 1/32 above. (Not the
/// `hdrhistogram` crate: `sim` is also built by the fuzz crate, whose lock file is
/// its own, and this is forty lines.)
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    /// Values recorded.
    pub count: u64,
    /// The largest value recorded.
    pub max: u64,
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < 2 * SUB {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - SUB_BITS;
        (2 * SUB + u64::from(shift - 1) * SUB + ((v >> shift) - SUB)) as usize
    }

    /// The largest value of bucket `i`.
    fn high(i: usize) -> u64 {
        let i = i as u64;
        if i < 2 * SUB {
            return i;
        }
        let shift = (i - 2 * SUB) / SUB + 1;
        let top = (i - 2 * SUB) % SUB + SUB;
        ((top + 1) << shift) - 1
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        let i = Self::bucket(v);
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// The value below which `q` percent of the recorded values lie (the high end of
    /// its bucket, at most the largest value; 0 when nothing was recorded).
    pub fn percentile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q / 100.0 * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::high(i).min(self.max);
            }
        }
        self.max
    }
}

/// One egress port's record: a switch's output queue, or a host's NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStats {
    /// Which port.
    pub port: Port,
    /// Its rate now, bits/s.
    pub rate_bps: u64,
    /// Frames it sent.
    pub frames: u64,
    /// Their bytes, Ethernet header to the end of the payload as the node counts them
    /// (the 24 bytes of preamble, FCS and gap not included).
    pub bytes: u64,
    /// Frames that found the queue full (tail drop).
    pub drops: u64,
    /// ECN-capable frames it marked CE (queue above the threshold at enqueue).
    pub marks: u64,
    /// The smallest depth a marked frame found (`u64::MAX`: none marked): above the
    /// threshold, always.
    pub min_marked_depth: u64,
    /// The deepest the queue was, bytes (the frame being sent included).
    pub max_depth: u64,
    /// The queue's depth in bytes, each bin's largest.
    pub depth: Series,
    /// The depth each arriving frame found (dropped ones included): what a frame
    /// waits behind, the distribution its percentiles come from.
    pub arrivals: Histogram,
}

impl PortStats {
    pub(super) fn new(port: Port, rate_bps: u64, bin_ns: u64) -> PortStats {
        PortStats {
            port,
            rate_bps,
            frames: 0,
            bytes: 0,
            drops: 0,
            marks: 0,
            min_marked_depth: u64::MAX,
            max_depth: 0,
            depth: Series::new(bin_ns),
            arrivals: Histogram::default(),
        }
    }

    /// The queue depth (bytes) that `q` percent of arriving frames found at most.
    pub fn depth_percentile(&self, q: f64) -> u64 {
        self.arrivals.percentile(q)
    }
}

/// A flow as the fabric records it: frames from one host to another with one UDP
/// source port (a connection: deposit's source port comes from its number; 0 for
/// frames that are not UDP). Ordered, so that flows list the same on every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Sending host.
    pub from: usize,
    /// Receiving host.
    pub to: usize,
    /// UDP source port.
    pub src_port: u16,
}

/// What reached the receiving host of one flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStats {
    /// Frames delivered.
    pub frames: u64,
    /// Their bytes (as [`PortStats::bytes`] counts them).
    pub bytes: u64,
    /// Of those frames, the ones that arrived marked CE.
    pub ce: u64,
    /// When the first of them arrived, ns.
    pub first_ns: u64,
    /// When the last of them arrived, ns.
    pub last_ns: u64,
    /// The least one-way delay of its frames, from the node's transmit queue to the
    /// receiving host (NIC queueing, serialisation, propagation, switch queueing).
    pub min_delay_ns: u64,
    /// The largest one-way delay of its frames.
    pub max_delay_ns: u64,
    /// The one-way delays of its frames summed (their mean: over `frames`).
    pub sum_delay_ns: u64,
    /// The spines its frames crossed, one bit per spine (0: none, same leaf).
    pub spines: u64,
    /// Bytes delivered per bin.
    pub delivered: Series,
}

impl FlowStats {
    pub(super) fn new(bin_ns: u64) -> FlowStats {
        FlowStats {
            frames: 0,
            bytes: 0,
            ce: 0,
            first_ns: u64::MAX,
            last_ns: 0,
            min_delay_ns: u64::MAX,
            max_delay_ns: 0,
            sum_delay_ns: 0,
            spines: 0,
            delivered: Series::new(bin_ns),
        }
    }

    /// Bits per second delivered between the first and the last arrival (0 for
    /// fewer than two frames).
    pub fn goodput_bps(&self) -> f64 {
        if self.frames < 2 || self.last_ns <= self.first_ns {
            return 0.0;
        }
        self.bytes as f64 * 8.0 * 1e9 / (self.last_ns - self.first_ns) as f64
    }
}

/// Everything the fabric recorded, readable from the network after (or during) a
/// run: [`crate::sim::Network::fabric_stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricStats {
    /// Width of every series' bins, ns.
    pub bin_ns: u64,
    /// Every egress port, in [`Port`]'s order: the hosts' NICs, the leaves' ports to
    /// their hosts, the leaves' ports up to the spines, the spines' ports down.
    pub ports: Vec<PortStats>,
    /// Every flow that delivered a frame.
    pub flows: BTreeMap<FlowKey, FlowStats>,
    /// Unicast frames to a MAC no host has (dropped).
    pub unknown_mac: u64,
    /// Copies of broadcast and multicast frames delivered (one per receiving host).
    pub flooded: u64,
    /// Frames the test hook made ECN-capable (`FabricConfig::make_ect`).
    pub made_ect: u64,
}

impl FabricStats {
    /// The record of `port`.
    pub fn port(&self, port: Port) -> &PortStats {
        self.ports
            .iter()
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no port {port:?} in this fabric"))
    }

    /// Tail drops summed over every port.
    pub fn drops(&self) -> u64 {
        self.ports.iter().map(|p| p.drops).sum()
    }

    /// ECN marks summed over every port.
    pub fn marks(&self) -> u64 {
        self.ports.iter().map(|p| p.marks).sum()
    }

    /// The flows into host `to`.
    pub fn flows_to(&self, to: usize) -> impl Iterator<Item = (&FlowKey, &FlowStats)> {
        self.flows.iter().filter(move |(k, _)| k.to == to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_series_keeps_each_bins_largest_and_fills_a_standing_queue() {
        let mut s = Series::new(100);
        s.level(10, 0, 500);
        s.level(20, 500, 200);
        s.level(350, 200, 0); // held 200 through bins 100 and 200
        s.level(900, 0, 40); // idle meanwhile: no bins
        assert_eq!(
            s.bins,
            vec![(0, 500), (100, 200), (200, 200), (300, 200), (900, 40)]
        );
        let mut d = Series::new(100);
        d.add(5, 3);
        d.add(99, 4);
        d.add(250, 1);
        assert_eq!(d.bins, vec![(0, 7), (200, 1)]);
        assert_eq!((d.total(), d.sum_between(100, 300)), (8, 1));
    }

    #[test]
    fn histogram_percentiles_are_within_a_thirty_second() {
        let mut h = Histogram::default();
        for v in 0..=100_000u64 {
            h.record(v);
        }
        for q in [1.0, 50.0, 90.0, 99.0, 99.9] {
            let want = (q / 100.0 * 100_001.0f64).ceil() - 1.0;
            let got = h.percentile(q) as f64;
            assert!(
                got >= want && got <= want * (1.0 + 1.0 / 32.0) + 1.0,
                "p{q}: {got} for {want}"
            );
        }
        assert_eq!(h.percentile(100.0), 100_000);
        for v in [0, 1, 63, 64, 65, 127, 128, 1 << 20, u64::MAX >> 1] {
            let b = Histogram::bucket(v);
            assert!(Histogram::high(b) >= v, "{v}");
            assert!(b == 0 || Histogram::high(b - 1) < v, "{v}");
        }
    }
}
