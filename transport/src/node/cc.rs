//! Congestion control per peer node (docs/design.md §5, "Congestion"): one context for
//! all the connections a shard has to one peer node — ten thousand connections to one
//! host share one window, not ten thousand — sans-IO, with the clock passed in.
//!
//! Signals, per acknowledgement that completes bulk frames:
//! * **delay**: the round trip of the newest frame it completes, from when the frame
//!   was sent ([`crate::reliability::Acked::rtt`]; the sender keeps its own send times,
//!   so no timestamp travels), less the time the receiver held the acknowledgement
//!   (`wire::op::HOLD`: a burst delivered, its own frames sent, a turn waited for a
//!   reply to carry it — not queueing) and less the smallest such round trip seen
//!   (the base): the queueing delay. It is compared with a target (Swift's: the base
//!   plus an allowance, [`CcConfig::target_delay_ns`]). The smoothed round trip that
//!   periods, pacing and the credit window go by keeps the hold: it is how long the
//!   acknowledgements really take to come back.
//! * **ECN**: data frames leave ECT(0); a switch above its threshold marks them CE and
//!   the receiver echoes the mark on its acknowledgements (`hflags::ECE`).
//! * **loss**: messages the selective acknowledgements show lost, and timeouts.
//!
//! The law combines them as Ultra Ethernet's NSCC does, in four quadrants: no mark and
//! delay under the target, a proportional increase (the further under, the faster); no
//! mark at or above the target, a small fair increase (the same bytes for every flow,
//! which is what makes them converge); a mark with the delay above the target, a
//! multiplicative decrease by how far above, at most once per round trip; a mark with
//! the delay under the target (a queue just forming, or another path's), nothing.
//! After a loss or a delay far above the target, "quick adapt": the window becomes
//! what the peer acknowledged in the last round trip (what the path really carried).
//! Increases are gathered and applied once per round trip or every few frames, scaled
//! by the window, so a flow adds the same bytes per round trip whatever its size.
//!
//! A window under one frame cannot be kept by counting bytes in flight (a frame is
//! the least that can be): the peer is then **paced**, one frame per
//! `frame × round trip / window` ([`PeerCc::on_frame_sent`]); the worker keeps the
//! paced peers in one queue by time ([`CcTable`]), not a timer per connection.
//!
//! With [`CcConfig::paths`] over 1 a peer's bulk frames are **sprayed** over that many
//! UDP source ports ([`Path`]; [`PeerCc::pick_path`]): a path that came back unmarked
//! and on time is used again first (REPS), a path much slower than the median or that
//! lost a frame is left out for a while, and the sender's loss detection goes by path
//! ([`crate::reliability::Sender::on_ack_paths`]), so that reordering across paths is
//! not loss.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::tables::NodeId;

/// Congestion control's settings (`NodeConfig::cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// On (the default): each peer node has a window and, under one frame, a pace.
    /// Off: only each connection's cap (`NodeConfig::max_inflight_bytes`) and the
    /// receiver's credits hold a sender back (what the transport did before).
    pub enabled: bool,
    /// Queueing delay a peer's round trips may show above the smallest seen before
    /// the window stops growing by proportion (Swift's target: the base round trip
    /// plus this allowance). Nanoseconds.
    pub target_delay_ns: u64,
    /// The port's line rate, Mb/s: the receive budget's default is what it drains in
    /// two targets, and the increase steps scale with the path's bandwidth-delay
    /// product at it (the window's ceiling is `NodeConfig::max_inflight_bytes`).
    /// `sim` sets it from its links; the DPDK port leaves the default (virtual PMDs
    /// report no real speed).
    pub line_rate_mbps: u64,
    /// Bytes a receiver lets all its peers have in flight towards it together
    /// (Ultra Ethernet RCCC's idea: a receiver that sees many senders shares out
    /// what it drains in a round trip, so that an incast is paced before a queue
    /// forms). Shared out as the credits of every acknowledgement. 0: what the line
    /// drains in two target delays (the path's round trip and a target of queue).
    pub receive_budget: u64,
    /// Delay alone (no ECN mark) far above the target — four targets, smoothed —
    /// decreases the window, as Swift does: for paths whose switches drop instead of
    /// marking (a kernel bridge with a shaper). Off by default: NSCC decreases on
    /// marks, and on software ports the round trip is mostly the hosts' turns.
    pub delay_decrease: bool,
    /// Paths a peer's bulk frames are sprayed over (Ultra Ethernet's multipath idea):
    /// each frame takes one of this many UDP source ports (entropy values, one set per
    /// peer) — the ECMP paths of a fabric hash them apart — chosen by the least bytes
    /// in flight, and a path that shows ECN marks with its delay above the target, a
    /// delay far above it or a loss is left out for a while (longer each time it
    /// comes back bad). Loss is then detected by time per path (a frame late on a
    /// slower path is not lost: `reliability::Sender::on_ack_paths`). 1 (the
    /// default): every frame of a connection takes its one port, as before — what a
    /// port whose receive side hashes frames to queues (RSS, af_packet fanout) wants,
    /// since sprayed frames of one connection reach several queues and are forwarded
    /// to their shard. At most 32 (`MAX_PATHS`); only with `enabled`.
    pub paths: u8,
    /// The receiver's hold on an acknowledgement (`wire::op::HOLD`) is taken off the
    /// round-trip sample before the law reads it as queueing (the default). Off (for
    /// comparison): a receiver that holds its acknowledgements — a busy turn, a
    /// bidirectional stream — reads as a queue in the network.
    pub subtract_hold: bool,
}

/// Most paths a peer's frames are sprayed over ([`CcConfig::paths`]).
pub const MAX_PATHS: u8 = 32;

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            enabled: true,
            target_delay_ns: 10_000,
            line_rate_mbps: 100_000,
            receive_budget: 0,
            delay_decrease: false,
            paths: 1,
            subtract_hold: true,
        }
    }
}

impl CcConfig {
    /// Bytes the line carries in `ns` nanoseconds.
    fn line_bytes(&self, ns: u64) -> u64 {
        (u128::from(self.line_rate_mbps.max(1)) * u128::from(ns) / 8_000) as u64
    }

    /// The receiver's budget in bytes ([`CcConfig::receive_budget`]).
    pub fn receive_budget_bytes(&self) -> u64 {
        if self.receive_budget != 0 {
            self.receive_budget
        } else {
            self.line_bytes(2 * self.target_delay_ns)
        }
    }
}

/// Gain of the decrease: the window shrinks by this fraction of how far the delay is
/// above the target, relative to the delay (NSCC's γ).
const GAMMA: f64 = 0.8;
/// The most one decrease takes.
const MAX_DECREASE: f64 = 0.5;
/// A delay this many targets above the base is as good as a loss for quick adapt.
const QUICK_ADAPT_DELAYS: u64 = 4;
/// Increases are applied after this many frames' worth of acknowledged bytes, or a
/// round trip, whichever comes first.
const ADJUST_FRAMES: u64 = 8;
/// The proportional increase per round trip with no queue at all, in bandwidth-delay
/// products (nothing at the target).
const PI_GAIN: f64 = 0.25;
/// The fair increase per round trip, in bandwidth-delay products.
const FAIR_GAIN: f64 = 1.0 / 64.0;
/// Without a mark, a delay this many targets above the base decreases the window.
const DELAY_ONLY_TARGETS: u64 = 4;
/// Under this fraction of the target for a whole window, the window doubles per
/// round trip.
const FAST_BELOW: f64 = 0.125;

/// What a peer's context decided about the next frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Send it.
    Open,
    /// The window is full: wait for acknowledgements.
    Window,
    /// Paced: not before this time.
    Until(u64),
}

/// Counters of one peer's context (and, summed, of a node's: [`super::Stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CcCounters {
    /// Acknowledgements that echoed ECN.
    pub marks: u64,
    /// Multiplicative decreases.
    pub decreases: u64,
    /// Quick adapts (after a loss or a delay far above the target).
    pub quick_adapts: u64,
    /// Frames that waited for the window, or for the pace.
    pub window_waits: u64,
    pub pace_waits: u64,
}

/// One peer node's congestion state, within one shard.
#[derive(Debug, Clone)]
pub struct PeerCc {
    /// The window, bytes (may be under one frame: then the peer is paced).
    cwnd: f64,
    /// Bytes of first transmissions in flight, over the peer's connections.
    pub inflight: u64,
    /// Smallest round trip seen (the receiver's hold taken off), and the smoothed one
    /// (with it: how long acknowledgements take to come back; ticks; 0: no sample).
    base_rtt: u64,
    srtt: u64,
    /// The largest hold the peer reported lately (ticks; decays by an eighth per
    /// acknowledgement, to 0): what a path's wait for loss detection allows beyond its
    /// round trip, which has the hold taken off.
    hold: u64,
    /// Smoothed queueing delay (ticks).
    avg_delay: f64,
    /// Increase gathered since the last adjustment (bytes², applied divided by the
    /// window), and the bytes acknowledged since.
    inc: f64,
    acked_since: u64,
    /// Bytes acknowledged in a row with the path empty (the fast increase).
    fast: u64,
    last_adjust: u64,
    last_decrease: u64,
    /// Quick adapt: bytes acknowledged in the current period, its end, whether a loss
    /// asked for it.
    achieved: u64,
    qa_end: u64,
    qa_loss: bool,
    /// What the peer's receiver grants (bytes per credit period, its latest credit;
    /// `u64::MAX`: none said), and the window that rate makes over this path's round
    /// trip and a target: the window used is the smaller of this and `cwnd`.
    credit: u64,
    credit_window: f64,
    /// Paced: no frame before this.
    next_send: u64,
    /// On the pacing queue until this time (0: not on it).
    queued_until: u64,
    /// Connection slots waiting for this peer's window or pace.
    pub parked: std::collections::VecDeque<u32>,
    pub counters: CcCounters,
    /// The paths its frames are sprayed over (empty: one, the connections' own ports).
    pub paths: Vec<Path>,
    /// By path, how long after it was sent a frame on it that nothing overtook counts
    /// as lost (`set_wait`).
    pub waits: Vec<u64>,
    /// Paths whose frames came back unmarked and on time, in the order they did
    /// (Ultra Ethernet's REPS: a path is used again as fast as it delivers, so each
    /// carries what it drains and a slower one less, whatever the hashing gave it).
    recycled: std::collections::VecDeque<u8>,
}

/// One of a peer's paths: a UDP source port, and what its frames showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    pub port: u16,
    /// Bytes of first transmissions sent on it and not yet acknowledged.
    pub inflight: u64,
    /// Smoothed round trip on it, its variation and the latest (ticks; 0: none).
    pub srtt: u64,
    rttvar: u64,
    pub last_rtt: u64,
    /// Left out until then.
    pub excluded_until: u64,
    /// Exclusions in a row (each doubles the next), and since when it is back in use:
    /// a path that stays good for [`EXCLUDE_FORGIVE_RTTS`] round trips starts over.
    backoff: u8,
    in_since: u64,
    /// Back from an exclusion: one frame at a time until one shows it good.
    pub probing: bool,
    pub counters: PathCounters,
}

/// What one path saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCounters {
    /// Bulk frames sent on it.
    pub frames: u64,
    /// Acknowledgements of its frames that echoed ECN.
    pub marks: u64,
    /// Its frames' messages found lost.
    pub losses: u64,
    /// Times it was left out.
    pub exclusions: u64,
}

/// A path left out is out for this many round trips, doubled for each time in a row.
const EXCLUDE_RTTS: u64 = 8;
/// Most doublings of an exclusion.
const EXCLUDE_MAX_BACKOFF: u8 = 6;
/// A path back in use this many round trips without being left out again is
/// forgiven its past exclusions.
const EXCLUDE_FORGIVE_RTTS: u64 = 1024;
/// A path whose round trip is over the median path's by this many targets is left
/// out.
const EXCLUDE_TARGETS: u64 = 2;
/// Most paths kept for recycling.
const RECYCLED_MAX: usize = 256;

/// What the law needs of the configuration, in the node's ticks.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub enabled: bool,
    /// [`CcConfig::delay_decrease`].
    delay_decrease: bool,
    /// Target queueing delay.
    target: u64,
    /// Line bytes per tick.
    rate: f64,
    /// A frame's bytes (the largest).
    mss: f64,
    /// The window's ceiling (`NodeConfig::max_inflight_bytes`).
    ceiling: f64,
    hz: u64,
    /// Paths per peer ([`CcConfig::paths`]; 1: no spraying).
    pub paths: u8,
    /// [`CcConfig::subtract_hold`].
    subtract_hold: bool,
}

impl Params {
    /// The law's settings for a node of clock `hz`, frames of `mss` bytes and a
    /// window ceiling of `ceiling` bytes.
    pub fn new(cfg: &CcConfig, hz: u64, mss: usize, ceiling: u64) -> Params {
        let mss = mss.max(64) as f64;
        Params {
            enabled: cfg.enabled,
            delay_decrease: cfg.delay_decrease,
            target: (crate::ticks::us_to_ticks(cfg.target_delay_ns, hz) / 1000).max(1),
            rate: cfg.line_rate_mbps.max(1) as f64 * 1e6 / 8.0 / hz.max(1) as f64,
            mss,
            ceiling: (ceiling as f64).max(2.0 * mss),
            hz,
            paths: if cfg.enabled {
                cfg.paths.clamp(1, MAX_PATHS)
            } else {
                1
            },
            subtract_hold: cfg.subtract_hold,
        }
    }

    /// Of a receiver's hold, what the law takes off a round trip: all of it, or
    /// nothing with [`CcConfig::subtract_hold`] off.
    #[inline]
    fn subtracted(&self, hold: u64) -> u64 {
        if self.subtract_hold {
            hold
        } else {
            0
        }
    }

    /// The time a receiver's budget drains in at its line rate (two targets: see
    /// [`CcConfig::receive_budget`]): a credit is that many bytes per this long.
    pub fn credit_period_of_rate(&self) -> u64 {
        2 * self.target
    }

    /// [`Params::credit_period_of_rate`] with congestion control on (a credit is then
    /// a rate); 0 with it off (a credit is a window).
    pub fn credit_rate_period(&self) -> u64 {
        if self.enabled {
            self.credit_period_of_rate()
        } else {
            0
        }
    }

    /// How long a receiver counts its senders before sharing its budget out again
    /// (four targets).
    pub fn credit_period(&self) -> u64 {
        4 * self.target
    }

    /// The law's least window: a frame (NSCC's; below that only a receiver's credit
    /// goes, which paces many senders each under a frame per round trip).
    fn min_window(&self) -> f64 {
        self.mss
    }

    /// The least window a pace is spread over: a sixty-fourth of a frame (a frame
    /// per 64 credit periods at worst).
    fn min_pace_window(&self) -> f64 {
        self.mss / 64.0
    }
}

impl PeerCc {
    /// A peer's context: its window starts at `initial` bytes (capped at the ceiling).
    pub fn new(p: &Params, initial: u64) -> PeerCc {
        PeerCc {
            cwnd: (initial as f64).clamp(p.min_window(), p.ceiling),
            inflight: 0,
            base_rtt: 0,
            srtt: 0,
            hold: 0,
            avg_delay: 0.0,
            inc: 0.0,
            acked_since: 0,
            fast: 0,
            last_adjust: 0,
            last_decrease: 0,
            achieved: 0,
            qa_end: 0,
            qa_loss: false,
            credit: u64::MAX,
            credit_window: f64::MAX,
            next_send: 0,
            queued_until: 0,
            parked: std::collections::VecDeque::new(),
            counters: CcCounters::default(),
            paths: Vec::new(),
            waits: Vec::new(),
            recycled: std::collections::VecDeque::new(),
        }
    }

    /// Sprays its frames over paths of these source ports (more than one).
    pub fn with_paths(mut self, ports: impl Iterator<Item = u16>) -> PeerCc {
        self.paths = ports
            .map(|port| Path {
                port,
                inflight: 0,
                srtt: 0,
                rttvar: 0,
                last_rtt: 0,
                excluded_until: 0,
                backoff: 0,
                in_since: 0,
                probing: false,
                counters: PathCounters::default(),
            })
            .collect();
        self.waits = vec![u64::MAX; self.paths.len()];
        self
    }

    /// The path the next frame takes at `now` and its source port (`None`: one path,
    /// the connection's own port): the oldest path that came back good and is not
    /// left out (REPS's recycling); with none, the path not left out with the fewest
    /// bytes in flight (the earliest listed on a tie; one on probation only with
    /// nothing in flight). If every path is left out, the one back soonest.
    #[inline]
    pub fn pick_path(&mut self, now: u64) -> Option<(u8, u16)> {
        if self.paths.is_empty() {
            return None;
        }
        while let Some(i) = self.recycled.pop_front() {
            let path = &self.paths[usize::from(i)];
            if path.excluded_until <= now && !path.probing {
                return Some((i, path.port));
            }
        }
        let mut best: Option<(usize, u64)> = None;
        for (i, path) in self.paths.iter().enumerate() {
            if path.excluded_until > now || (path.probing && path.inflight > 0) {
                continue;
            }
            if best.is_none_or(|(_, f)| path.inflight < f) {
                best = Some((i, path.inflight));
            }
        }
        let i = best.map_or_else(
            || {
                (0..self.paths.len())
                    .min_by_key(|&i| self.paths[i].excluded_until)
                    .unwrap_or(0)
            },
            |(i, _)| i,
        );
        Some((i as u8, self.paths[i].port))
    }

    /// Whether path `i` is in use at `now`: not left out, not on probation.
    fn path_in_use(&self, i: u8, now: u64) -> bool {
        self.paths
            .get(usize::from(i))
            .is_some_and(|q| q.excluded_until <= now)
    }

    /// A bulk frame's `bytes` of first transmissions went on path `i`.
    #[inline]
    pub fn on_path_sent(&mut self, i: u8, bytes: u64) {
        if let Some(path) = self.paths.get_mut(usize::from(i)) {
            path.inflight += bytes;
            path.counters.frames += 1;
        }
    }

    /// A frame of `bytes` that went on path `i` was acknowledged, `rtt` ticks after
    /// it was sent (0: no sample), the acknowledgement echoing ECN or not.
    pub fn on_path_delivered(
        &mut self,
        p: &Params,
        now: u64,
        i: u8,
        bytes: u64,
        rtt: u64,
        ece: bool,
    ) {
        let base = self.base_rtt;
        let period = self.period(p);
        let Some(path) = self.paths.get_mut(usize::from(i)) else {
            return;
        };
        path.inflight = path.inflight.saturating_sub(bytes);
        path.counters.marks += u64::from(ece);
        if rtt != 0 {
            path.last_rtt = rtt;
            if path.srtt == 0 {
                path.srtt = rtt;
                path.rttvar = rtt / 2;
            } else {
                path.rttvar = (3 * path.rttvar + path.srtt.abs_diff(rtt)) / 4;
                path.srtt = (7 * path.srtt + rtt) / 8;
            }
        }
        // Left out: a path whose round trip is well above the typical path's (twice
        // the median's and a target: a slower or longer path, or one with a queue of
        // its own). A mark on it only keeps it from being used again at once (REPS):
        // marks on every path are the peer's congestion, which its window answers.
        let typical = self.median_srtt(now).max(base);
        if rtt != 0 {
            self.set_wait(p, i);
        }
        let path = &mut self.paths[usize::from(i)];
        let delay = path.srtt.min(path.last_rtt);
        if path.last_rtt != 0 && typical != 0 && delay > typical + EXCLUDE_TARGETS * p.target {
            Self::exclude(&mut self.paths, i, now, period);
            return;
        }
        if rtt != 0 && path.probing {
            path.probing = false; // back, and good
            path.in_since = now;
        }
        if !ece && !path.probing {
            if self.recycled.len() >= RECYCLED_MAX {
                self.recycled.pop_front();
            }
            self.recycled.push_back(i);
        }
    }

    /// Each path's wait for the sender's loss detection by time
    /// (`reliability::Sender::on_ack_paths`): a frame on it that nothing later on its
    /// own path overtook counts as lost this long after it was sent — twice its
    /// latest or smoothed round trip (a queue on it that grew since) and the peer's
    /// recent hold (which the path's round trips have taken off), four variations and
    /// a target; `u64::MAX` for a path with no round trip yet (the timeout finds
    /// its losses).
    fn set_wait(&mut self, p: &Params, i: u8) {
        let q = &self.paths[usize::from(i)];
        self.waits[usize::from(i)] = if q.srtt == 0 {
            u64::MAX
        } else {
            2 * (q.srtt.max(q.last_rtt) + self.hold) + 4 * q.rttvar + p.target
        };
    }

    /// A message of a frame that went on path `i` was found lost.
    pub fn on_path_lost(&mut self, p: &Params, now: u64, i: u8) {
        let period = self.period(p);
        if let Some(path) = self.paths.get_mut(usize::from(i)) {
            path.counters.losses += 1;
            Self::exclude(&mut self.paths, i, now, period);
        }
    }

    /// A frame of `bytes` that went on path `i` is no longer in flight, unacknowledged.
    pub fn on_path_forgot(&mut self, i: u8, bytes: u64) {
        if let Some(path) = self.paths.get_mut(usize::from(i)) {
            path.inflight = path.inflight.saturating_sub(bytes);
        }
    }

    /// Leaves path `i` out for a while from `now` (unless it is out already, or it is
    /// the only one left in).
    fn exclude(paths: &mut [Path], i: u8, now: u64, period: u64) {
        let i = usize::from(i);
        if paths[i].excluded_until > now {
            return;
        }
        // At most half the paths are out at once: a fabric whose every path shows a
        // queue is the peer's congestion (its window's business), not a bad path.
        let out = paths.iter().filter(|q| q.excluded_until > now).count();
        if 2 * (out + 1) > paths.len() {
            return;
        }
        let path = &mut paths[i];
        if now.saturating_sub(path.in_since) > EXCLUDE_FORGIVE_RTTS * period.max(1) {
            path.backoff = 0;
        }
        path.excluded_until = now + ((EXCLUDE_RTTS * period.max(1)) << path.backoff);
        path.backoff = (path.backoff + 1).min(EXCLUDE_MAX_BACKOFF);
        path.probing = true;
        path.counters.exclusions += 1;
    }

    /// The median smoothed round trip of the paths in use that have one (0: none).
    fn median_srtt(&self, now: u64) -> u64 {
        let mut v = [0u64; MAX_PATHS as usize];
        let mut n = 0;
        for q in &self.paths {
            if q.srtt != 0 && q.excluded_until <= now {
                v[n] = q.srtt;
                n += 1;
            }
        }
        if n == 0 {
            return 0;
        }
        let (_, m, _) = v[..n].select_nth_unstable(n / 2);
        *m
    }

    /// The window, bytes: the law's, or the receiver's credit when smaller.
    pub fn window(&self) -> u64 {
        self.effective() as u64
    }

    /// The law's window and the receiver's credit's, the smaller.
    #[inline]
    fn effective(&self) -> f64 {
        self.cwnd.min(self.credit_window)
    }

    /// The receiver's credit, `bytes` per credit period ([`Params::credit_period_of_rate`],
    /// what a receiver of many senders shares out is a rate: RCCC): over this path's
    /// base round trip and a target that rate keeps `bytes × (base + target) /
    /// period` in flight, whatever the path's length.
    pub fn on_credit(&mut self, p: &Params, bytes: u64) {
        if bytes == self.credit {
            return;
        }
        self.credit = bytes;
        self.credit_window_again(p);
    }

    /// The credit's window: its rate over this path's round trip and a target — the
    /// smoothed round trip, which on a software port is mostly the hosts' turns (the
    /// smallest would make a window the rate cannot be kept at).
    fn credit_window_again(&mut self, p: &Params) {
        if self.credit == u64::MAX {
            return;
        }
        let rtt = match (self.base_rtt, self.srtt) {
            (0, _) => p.target,
            (b, s) => b.max(s),
        };
        let per = p.credit_period_of_rate() as f64;
        self.credit_window = self.credit as f64 * (rtt + p.target) as f64 / per;
    }

    /// Smallest (the receiver's hold taken off) and smoothed round trips, ticks (0: no
    /// sample yet).
    pub fn rtts(&self) -> (u64, u64) {
        (self.base_rtt, self.srtt)
    }

    /// The largest hold the peer reported lately, ticks.
    pub fn hold(&self) -> u64 {
        self.hold
    }

    /// The round trip pacing and periods go by: the smoothed one, else the target.
    fn period(&self, p: &Params) -> u64 {
        if self.srtt == 0 {
            p.target
        } else {
            self.srtt
        }
    }

    /// The window the pace follows and the time it is spread over: the receiver's
    /// credit over its credit period (a receiver grants its drain rate, RCCC: the
    /// pace then adds up to its line over all its senders, whatever the queue), or
    /// the law's window over the smoothed round trip.
    #[inline]
    fn pace(&self, p: &Params) -> (f64, u64) {
        if self.credit_window <= self.cwnd {
            // The credit's rate, spread so as to keep its window.
            let per = self.credit_window / self.credit as f64 * p.credit_period_of_rate() as f64;
            (self.credit_window, per as u64)
        } else {
            (self.cwnd, self.period(p))
        }
    }

    /// May a new frame go at `now`? One always may when nothing is in flight and the
    /// pace allows (a frame is the least a peer can send).
    #[inline]
    pub fn gate(&self, now: u64) -> Gate {
        if now < self.next_send {
            return Gate::Until(self.next_send);
        }
        if self.inflight == 0 || (self.inflight as f64) < self.effective() {
            Gate::Open
        } else {
            Gate::Window
        }
    }

    /// A frame of `bytes` bytes went at `now`, `new` of them first transmissions
    /// (counted in flight). Under a window of two frames the peer is paced: the next
    /// may go a round trip's share later (`bytes / window` round trips).
    #[inline]
    pub fn on_frame_sent(&mut self, p: &Params, now: u64, bytes: u64, new: u64, paced: bool) {
        self.inflight += new;
        let (w, per) = self.pace(p);
        // (Only frames the gate let through move the pace, `paced`: a retransmission
        // or a lone small message that went past it must not push new data back.)
        if w < 2.0 * p.mss && paced && bytes > 0 {
            let gap = bytes as f64 * per as f64 / w.max(p.min_pace_window());
            self.next_send = now.max(self.next_send) + gap as u64;
        }
    }

    /// Bytes no longer in flight without an acknowledgement (a connection rewound, or
    /// went).
    pub fn forget(&mut self, bytes: u64) {
        self.inflight = self.inflight.saturating_sub(bytes);
    }

    /// An acknowledgement at `now` that completed `bytes` of first transmissions, with
    /// round-trip sample `rtt` (0: none) of which the receiver held it `hold`
    /// (ticks), echoing ECN or not, and `lost` messages found lost.
    pub fn on_ack(
        &mut self,
        p: &Params,
        now: u64,
        bytes: u64,
        (rtt, hold): (u64, u64),
        ece: bool,
        lost: bool,
    ) {
        if !p.enabled {
            return;
        }
        self.counters.marks += u64::from(ece);
        self.hold = hold.max(self.hold - self.hold.div_ceil(8));
        let delay = (rtt != 0).then(|| self.sample(rtt, p.subtracted(hold)));
        if delay.is_some() {
            self.credit_window_again(p);
        }
        self.achieved += bytes;
        if lost && self.congested(p) {
            // A loss on a path that shows a queue: the network dropped. (Losses on an
            // empty path — corruption, a lossy link — say nothing of congestion, and
            // shrinking for them would starve the connection.)
            self.qa_loss = true;
        }
        if self.quick_adapt(p, now, delay) {
            return;
        }
        let target = p.target as f64;
        let bdp = self.bdp(p);
        match (ece, delay) {
            // A mark, above the target: decrease, once per round trip.
            (true, _) if self.avg_delay > target => self.decrease(p, now),
            // A mark under the target: a queue forming, or noise. Nothing.
            (true, _) => {}
            // No mark, but far above the target: on a path without ECN (a shaper, a
            // switch that only drops) delay alone says so, when the configuration
            // trusts it (`CcConfig::delay_decrease`: on software ports the round trip
            // is mostly the hosts' turns, which a smaller window does not shorten).
            (false, Some(_))
                if p.delay_decrease && self.avg_delay > (DELAY_ONLY_TARGETS * p.target) as f64 =>
            {
                self.decrease(p, now)
            }
            (false, Some(d)) if (d as f64) < target => {
                if (d as f64) < target * FAST_BELOW {
                    // An empty path for a whole window: double per round trip.
                    self.fast += bytes;
                    if self.fast as f64 >= self.cwnd {
                        self.cwnd += bytes as f64;
                        self.bound(p);
                        return;
                    }
                } else {
                    self.fast = 0;
                }
                // Proportional increase: the further under the target, the faster.
                self.inc += PI_GAIN * bdp * (target - d as f64) / target * bytes as f64;
            }
            // At or above the target (or no sample): the fair increase, the same
            // bytes per round trip for every flow.
            _ => {
                self.fast = 0;
                self.inc += FAIR_GAIN * bdp * bytes as f64;
            }
        }
        self.acked_since += bytes;
        let period = self.period(p);
        if self.acked_since as f64 >= ADJUST_FRAMES as f64 * p.mss
            || now.saturating_sub(self.last_adjust) >= period
        {
            // At most doubling per adjustment (the first sample of a path comes with
            // no queue, and all it says is that the path was empty).
            self.cwnd += (self.inc / self.cwnd).min(self.cwnd);
            self.inc = 0.0;
            self.acked_since = 0;
            self.last_adjust = now;
        }
        self.bound(p);
    }

    /// A round-trip sample, `hold` of it the receiver's: the smoothed round trip
    /// follows all of it; the base and the smoothed queueing delay what is left
    /// without the hold. Returns its queueing delay.
    fn sample(&mut self, rtt: u64, hold: u64) -> u64 {
        self.srtt = if self.srtt == 0 {
            rtt
        } else {
            (7 * self.srtt + rtt) / 8
        };
        let rtt = without_hold(rtt, hold);
        if self.base_rtt == 0 || rtt < self.base_rtt {
            self.base_rtt = rtt;
        }
        let d = rtt - self.base_rtt;
        self.avg_delay = 0.875 * self.avg_delay + 0.125 * d as f64;
        d
    }

    /// The path's bandwidth-delay product at the line rate (bytes; the steps of the
    /// increases are fractions of it), at least a frame.
    fn bdp(&self, p: &Params) -> f64 {
        let rtt = if self.base_rtt == 0 {
            p.target
        } else {
            self.base_rtt
        };
        (p.rate * rtt as f64).max(p.mss)
    }

    fn decrease(&mut self, p: &Params, now: u64) {
        if now.saturating_sub(self.last_decrease) < self.period(p) {
            return;
        }
        let target = p.target as f64;
        let f = (GAMMA * (self.avg_delay - target) / self.avg_delay).min(MAX_DECREASE);
        self.cwnd *= 1.0 - f;
        self.inc = 0.0;
        self.last_decrease = now;
        self.counters.decreases += 1;
        self.bound(p);
    }

    /// Quick adapt, once per period (a round trip and a target): after a loss or a
    /// delay far above the target, the window becomes what was acknowledged in the
    /// period, if that is less. Returns whether it did (the acknowledgement is
    /// spent).
    fn quick_adapt(&mut self, p: &Params, now: u64, delay: Option<u64>) -> bool {
        // (Delay alone asks for it only where delay is trusted: on software ports the
        // round trip is mostly the hosts' turns, which a smaller window does not
        // shorten — every period would quick-adapt.)
        if p.delay_decrease && delay.is_some_and(|d| d > QUICK_ADAPT_DELAYS * p.target) {
            self.qa_loss = true;
        }
        if now < self.qa_end {
            return false;
        }
        let mut done = false;
        if self.qa_end != 0 && self.qa_loss && (self.achieved as f64) < self.cwnd {
            self.cwnd = (self.achieved as f64).max(self.floor(p));
            self.inc = 0.0;
            self.acked_since = 0;
            self.counters.quick_adapts += 1;
            done = true;
        }
        self.qa_loss = false;
        self.achieved = 0;
        self.qa_end = now + self.period(p) + p.target;
        done
    }

    /// A retransmission timeout on a connection to the peer: on a congested path the
    /// window halves and quick adapt follows (what the path carried in the period is
    /// all it takes).
    pub fn on_timeout(&mut self, p: &Params) {
        if p.enabled && self.congested(p) {
            self.qa_loss = true;
            self.cwnd = (self.cwnd / 2.0).max(self.floor(p));
        }
    }

    /// Whether the path shows congestion: the smoothed queueing delay above the
    /// target.
    fn congested(&self, p: &Params) -> bool {
        self.avg_delay > p.target as f64
    }

    fn bound(&mut self, p: &Params) {
        self.cwnd = self.cwnd.clamp(self.floor(p), p.ceiling);
    }

    /// The law's least window: a frame, or under a receiver's credit of less than a
    /// frame (an incast of many senders), a quarter of that credit's window, so that
    /// the law can still take the queue below what the receiver allows.
    fn floor(&self, p: &Params) -> f64 {
        p.min_window()
            .min(self.credit_window / 4.0)
            .max(p.min_pace_window())
    }

    /// The pace's rate, bytes per second (0: not paced).
    pub fn paced_rate(&self, p: &Params) -> u64 {
        let (w, per) = self.pace(p);
        if w < 2.0 * p.mss && per != 0 {
            (w * p.hz as f64 / per as f64) as u64
        } else {
            0
        }
    }
}

/// Round trip `rtt` without the receiver's `hold` of it: at least a tick (a hold is
/// never longer than the round trip it is part of, unless the clocks disagree); 0 (no
/// sample) stays 0.
#[inline]
fn without_hold(rtt: u64, hold: u64) -> u64 {
    if rtt == 0 {
        0
    } else {
        rtt.saturating_sub(hold).max(1)
    }
}

/// What a sender said of its sprayed frames in one acknowledgement or timer
/// (`reliability::OnDelivery`), for the peer's paths.
#[derive(Debug, Default)]
pub struct PathEvents {
    events: Vec<PathEvent>,
}

#[derive(Debug, Clone, Copy)]
enum PathEvent {
    Delivered { path: u8, bytes: u64, rtt: u64 },
    Lost(u8),
    Forgot { path: u8, bytes: u64 },
}

impl crate::reliability::OnDelivery for PathEvents {
    #[inline]
    fn delivered(&mut self, path: u8, bytes: u64, rtt: u64) {
        self.events.push(PathEvent::Delivered { path, bytes, rtt });
    }
    #[inline]
    fn lost(&mut self, path: u8) {
        self.events.push(PathEvent::Lost(path));
    }
    #[inline]
    fn forgot(&mut self, path: u8, bytes: u64) {
        self.events.push(PathEvent::Forgot { path, bytes });
    }
}

impl PathEvents {
    /// Whether nothing was gathered.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Applies what was gathered to `peer`'s paths at `now` (the acknowledgement
    /// held `hold` ticks by the receiver, echoing ECN or not) and empties it. Returns
    /// the round-trip sample the peer's
    /// window should hear: the newest frame's delivered on a path in use (0: none) —
    /// the frames a path just left out (slower, or with a queue of its own) still
    /// brings in must not read as the peer's queue.
    pub fn apply(&mut self, peer: &mut PeerCc, p: &Params, now: u64, hold: u64, ece: bool) -> u64 {
        let mut rtt = 0;
        for e in self.events.drain(..) {
            match e {
                PathEvent::Delivered {
                    path,
                    bytes,
                    rtt: sample,
                } => {
                    let sample = without_hold(sample, p.subtracted(hold));
                    peer.on_path_delivered(p, now, path, bytes, sample, ece);
                    if sample != 0 && peer.path_in_use(path, now) {
                        rtt = sample;
                    }
                }
                PathEvent::Lost(path) => peer.on_path_lost(p, now, path),
                PathEvent::Forgot { path, bytes } => peer.on_path_forgot(path, bytes),
            }
        }
        // (A connection that failed or closed forgets its frames without saying on
        // which paths: no path holds more than the peer has in flight.)
        let all = peer.inflight;
        for path in &mut peer.paths {
            path.inflight = path.inflight.min(all);
        }
        rtt
    }
}

/// The source port of path `i` of a peer, in 49152..65536, from a salt of this node
/// and the peer: different peers' paths hash differently, and a peer's paths stay
/// put for the node's life.
pub fn path_port(salt: u64, peer: NodeId, i: u8) -> u16 {
    let mut x = salt ^ (u64::from(peer.0) << 8 | u64::from(i));
    // (splitmix64's finaliser)
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    49152 | (x >> 50) as u16
}

/// A shard's peers' contexts, by node, and the queue of paced peers by time.
#[derive(Debug)]
pub struct CcTable {
    pub params: Params,
    initial: u64,
    peers: Vec<Option<Box<PeerCc>>>,
    /// (when its pace allows, peer): peers with parked connections waiting for time.
    paced: BinaryHeap<Reverse<(u64, u32)>>,
    /// Of this node, for its peers' path ports ([`path_port`]).
    salt: u64,
    /// A bit per connection slot: parked on its peer (so that parking is O(1) however
    /// many of a peer's connections wait).
    parked_slots: Vec<u64>,
}

impl CcTable {
    pub fn new(params: Params, initial: u64) -> CcTable {
        CcTable {
            params,
            initial,
            peers: Vec::new(),
            paced: BinaryHeap::new(),
            salt: 0,
            parked_slots: Vec::new(),
        }
    }

    /// Salts the peers' path ports (with [`Params::paths`] over 1).
    pub fn with_salt(mut self, salt: u64) -> CcTable {
        self.salt = salt;
        self
    }

    /// Peer `id`'s context, made on first use.
    #[inline]
    pub fn peer(&mut self, id: NodeId) -> &mut PeerCc {
        let i = id.0 as usize;
        if i >= self.peers.len() {
            self.peers.resize_with(i + 1, || None);
        }
        let (p, initial, salt) = (&self.params, self.initial, self.salt);
        self.peers[i].get_or_insert_with(|| {
            let peer = PeerCc::new(p, initial);
            Box::new(if p.paths > 1 {
                // Sprayed: a frame per path to begin with, until the paths have shown
                // their round trips (a burst of the whole ceiling would fill a slower
                // path's queue before its first frame came back).
                let mut peer = peer.with_paths((0..p.paths).map(|k| path_port(salt, id, k)));
                peer.cwnd = peer.cwnd.min(f64::from(p.paths) * p.mss);
                peer
            } else {
                peer
            })
        })
    }

    /// Peer `id`'s context, if it has one.
    pub fn get(&self, id: NodeId) -> Option<&PeerCc> {
        self.peers.get(id.0 as usize)?.as_deref()
    }

    /// Every peer's context.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &PeerCc)> + '_ {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((NodeId(i as u32), p.as_deref()?)))
    }

    /// Parks connection `slot` on peer `id` (its window or pace is shut), `behind`
    /// the connections parked already or ahead of them; with a pace, the peer goes
    /// on the queue for `until`.
    pub fn park(&mut self, id: NodeId, slot: usize, until: Option<u64>, behind: bool) {
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        if word >= self.parked_slots.len() {
            self.parked_slots.resize(word + 1, 0);
        }
        let fresh = self.parked_slots[word] & bit == 0;
        self.parked_slots[word] |= bit;
        let peer = self.peer(id);
        if fresh {
            if behind {
                peer.parked.push_back(slot as u32);
            } else {
                peer.parked.push_front(slot as u32);
            }
        }
        if let Some(t) = until {
            self.wait_for(id, t);
        }
    }

    /// Puts peer `id` (whose connections are parked) on the pacing queue for `until`.
    pub fn wait_for(&mut self, id: NodeId, until: u64) {
        let peer = self.peer(id);
        if peer.queued_until != until {
            peer.queued_until = until;
            self.paced.push(Reverse((until, id.0)));
        }
    }

    /// When the next paced peer may send (`u64::MAX`: none waits).
    #[inline]
    pub fn next_pace(&self) -> u64 {
        self.paced.peek().map_or(u64::MAX, |r| r.0 .0)
    }

    /// Peers whose pace allows them at `now`, into `out`.
    pub fn due(&mut self, now: u64, out: &mut Vec<NodeId>) {
        while let Some(&Reverse((t, id))) = self.paced.peek() {
            if t > now {
                break;
            }
            self.paced.pop();
            if let Some(Some(p)) = self.peers.get_mut(id as usize) {
                if p.queued_until == t {
                    p.queued_until = 0;
                    out.push(NodeId(id));
                }
            }
        }
    }

    /// Takes peer `id`'s parked connections (its window opened, or its pace allows).
    pub fn unpark(&mut self, id: NodeId, out: &mut Vec<u32>) {
        if let Some(Some(p)) = self.peers.get_mut(id.0 as usize) {
            for &s in &p.parked {
                let s = s as usize;
                self.parked_slots[s / 64] &= !(1u64 << (s % 64));
            }
            out.extend(p.parked.drain(..));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock of nanoseconds, 100 Gb/s, 4 KiB frames, a 10 µs target.
    fn params() -> Params {
        Params::new(&CcConfig::default(), 1_000_000_000, 4096, 1 << 20)
    }

    /// A peer acknowledged a frame at a time, each with round trip `rtt` and `ece`.
    fn acks(cc: &mut PeerCc, p: &Params, now: &mut u64, n: usize, rtt: u64, ece: bool) {
        for _ in 0..n {
            *now += 1000;
            cc.on_frame_sent(p, *now, 4096, 4096, true);
            cc.forget(4096);
            cc.on_ack(p, *now, 4096, (rtt, 0), ece, false);
        }
    }

    #[test]
    fn an_empty_path_opens_the_window_and_a_marked_queue_shuts_it() {
        let p = params();
        let mut cc = PeerCc::new(&p, 16 << 10);
        let mut now = 1;
        acks(&mut cc, &p, &mut now, 1, 5_000, false); // the base: 5 µs
        let start = cc.window();
        acks(&mut cc, &p, &mut now, 200, 5_000, false);
        assert!(
            cc.window() > start,
            "no queue: grows ({start} -> {})",
            cc.window()
        );
        // Marked, 30 µs of queue (above the 10 µs target): decreases, at most once a
        // round trip.
        let before = cc.window();
        acks(&mut cc, &p, &mut now, 40, 35_000, true);
        assert!(cc.window() < before / 2, "{before} -> {}", cc.window());
        assert!(cc.counters.decreases >= 2 && cc.counters.decreases <= 8);
        // Marked but under the target: nothing.
        let w = cc.window();
        acks(&mut cc, &p, &mut now, 10, 8_000, true);
        assert!(cc.window() <= w + 64, "{w} -> {}", cc.window());
    }

    #[test]
    fn the_receivers_hold_is_not_queueing_but_is_part_of_the_round_trip() {
        // 5 µs of path, then 200 round trips of 35 µs of which the receiver held 30,
        // every other one marked; returns the window after the first sample.
        fn held(cc: &mut PeerCc, p: &Params) -> u64 {
            let mut now = 1;
            cc.on_ack(p, now, 4096, (5_000, 0), false, false);
            let start = cc.window();
            for i in 0..200 {
                now += 1000;
                cc.on_frame_sent(p, now, 4096, 4096, true);
                cc.forget(4096);
                cc.on_ack(p, now, 4096, (35_000, 30_000), i % 2 == 0, false);
            }
            start
        }
        let p = params();
        let mut cc = PeerCc::new(&p, 16 << 10);
        // No queue: the window grows as on an empty path, and marks (a queue forming
        // elsewhere, under the target) decrease nothing.
        let start = held(&mut cc, &p);
        assert!(cc.window() > start, "{start} -> {}", cc.window());
        assert_eq!(cc.counters.decreases, 0);
        assert!(cc.avg_delay < 1.0, "{}", cc.avg_delay);
        // The base is the path's; the smoothed round trip (periods, pacing) has the
        // hold; the peer's latest hold is kept for its paths' loss waits.
        let (base, srtt) = cc.rtts();
        assert_eq!(base, 5_000);
        assert!(srtt > 30_000, "{srtt}");
        assert_eq!(cc.hold(), 30_000);
        // With the hold kept (`subtract_hold` off), the same acknowledgements read as
        // 30 µs of queue: marked above the target, they decrease.
        let kept = Params::new(
            &CcConfig {
                subtract_hold: false,
                ..CcConfig::default()
            },
            1_000_000_000,
            4096,
            1 << 20,
        );
        let mut k = PeerCc::new(&kept, 16 << 10);
        held(&mut k, &kept);
        assert!(k.counters.decreases > 0, "{:?}", k.counters);
        assert!(k.window() < cc.window(), "{} / {}", k.window(), cc.window());
    }

    #[test]
    fn at_the_target_every_flow_gains_the_same_bytes() {
        let p = params();
        let (mut a, mut b) = (PeerCc::new(&p, 8 << 10), PeerCc::new(&p, 64 << 10));
        let (mut ta, mut tb) = (1, 1);
        acks(&mut a, &p, &mut ta, 1, 5_000, false);
        acks(&mut b, &p, &mut tb, 1, 5_000, false);
        let (a0, b0) = (a.window(), b.window());
        // A round trip's worth of acknowledgements each, at 12 µs of queue.
        for _ in 0..20 {
            let (na, nb) = (a.window() / 4096 + 1, b.window() / 4096 + 1);
            acks(&mut a, &p, &mut ta, na as usize, 17_000, false);
            acks(&mut b, &p, &mut tb, nb as usize, 17_000, false);
        }
        let (ga, gb) = (a.window() - a0, b.window() - b0);
        assert!(ga > 0 && gb > 0);
        assert!(ga.abs_diff(gb) * 3 < ga.max(gb), "gains {ga} and {gb}");
    }

    #[test]
    fn a_window_under_two_frames_paces_the_peer() {
        let p = params();
        let mut cc = PeerCc::new(&p, 1024);
        let mut now = 1;
        acks(&mut cc, &p, &mut now, 1, 10_000, false);
        cc.cwnd = 1024.0;
        now += 100_000;
        assert_eq!(cc.gate(now), Gate::Open);
        cc.on_frame_sent(&p, now, 4096, 4096, true);
        // 4096 bytes at 1024 a round trip of 10 µs: the next in 40 µs.
        match cc.gate(now) {
            Gate::Until(t) => assert_eq!(t - now, 40_000),
            g => panic!("{g:?}"),
        }
        assert!(cc.paced_rate(&p) > 0);
    }

    #[test]
    fn a_loss_adapts_the_window_to_what_got_through() {
        let p = params();
        let mut cc = PeerCc::new(&p, 128 << 10);
        let mut now = 1;
        acks(&mut cc, &p, &mut now, 1, 5_000, false);
        // A loss on an empty path (corruption): nothing changes.
        now += 30_000;
        cc.on_ack(&p, now, 4096, (0, 0), false, true);
        now += 30_000;
        cc.on_ack(&p, now, 4096, (0, 0), false, false);
        assert!(cc.window() >= 128 << 10 && cc.counters.quick_adapts == 0);
        // A queue builds (20 µs above the 5 µs base, unmarked), then a period in which
        // only 8 KiB was acknowledged, and a loss.
        acks(&mut cc, &p, &mut now, 30, 25_000, false);
        let before = cc.window();
        now += 60_000;
        cc.on_ack(&p, now, 4096, (0, 0), false, true);
        cc.on_ack(&p, now + 1, 4096, (0, 0), false, false);
        now += 60_000;
        cc.on_ack(&p, now, 4096, (0, 0), false, false);
        assert!(cc.window() < before / 2, "{before} -> {}", cc.window());
        assert_eq!(cc.counters.quick_adapts, 1);
    }

    #[test]
    fn the_table_parks_connections_and_wakes_paced_peers_in_time_order() {
        let mut t = CcTable::new(params(), 4096);
        t.park(NodeId(3), 7, Some(500), true);
        t.park(NodeId(3), 7, Some(500), true);
        t.park(NodeId(1), 2, Some(200), true);
        t.park(NodeId(5), 9, None, true);
        t.park(NodeId(5), 4, None, false);
        assert_eq!(t.next_pace(), 200);
        let mut due = Vec::new();
        t.due(300, &mut due);
        assert_eq!(due, [NodeId(1)]);
        t.due(600, &mut due);
        assert_eq!(due, [NodeId(1), NodeId(3)]);
        let mut slots = Vec::new();
        t.unpark(NodeId(3), &mut slots);
        assert_eq!(slots, [7], "parked once");
        t.unpark(NodeId(5), &mut slots);
        assert_eq!(slots, [7, 4, 9], "one that could not send goes first");
        assert_eq!(t.next_pace(), u64::MAX);
    }

    /// A peer sprayed over four paths, each having delivered one frame in `rtt[i]`.
    fn four_paths(rtts: [u64; 4]) -> (PeerCc, Params) {
        let p = Params::new(
            &CcConfig {
                paths: 4,
                ..CcConfig::default()
            },
            1_000_000_000,
            4096,
            1 << 20,
        );
        let mut cc =
            PeerCc::new(&p, 1 << 20).with_paths([50_001, 50_002, 50_003, 50_004].into_iter());
        for (i, &rtt) in rtts.iter().enumerate() {
            cc.on_path_sent(i as u8, 4096);
            cc.on_path_delivered(&p, 1_000, i as u8, 4096, rtt, false);
        }
        (cc, p)
    }

    #[test]
    fn a_path_much_slower_than_the_median_is_left_out_then_probed() {
        // Three at 10 µs, one at 60 µs (over the median and two targets): out.
        let (mut cc, p) = four_paths([10_000, 10_000, 10_000, 60_000]);
        assert!(cc.paths[3].excluded_until > 1_000);
        assert_eq!(cc.paths[3].counters.exclusions, 1);
        // The others came back good and are used again in that order (REPS), never
        // the one left out.
        let picks: Vec<u8> = (0..6).map(|_| cc.pick_path(2_000).unwrap().0).collect();
        assert_eq!(&picks[..3], &[0, 1, 2]);
        assert!(picks.iter().all(|&i| i != 3));
        // Once its time is out, it is on probation: one frame, then it waits for it.
        let back = cc.paths[3].excluded_until;
        cc.recycled.clear();
        for i in 0..3 {
            cc.on_path_sent(i, 8192);
        }
        assert_eq!(cc.pick_path(back).map(|x| x.0), Some(3));
        cc.on_path_sent(3, 4096);
        assert_ne!(
            cc.pick_path(back).map(|x| x.0),
            Some(3),
            "one probe at a time"
        );
        // The probe comes back good: in use again.
        cc.on_path_delivered(&p, back + 12_000, 3, 4096, 11_000, false);
        assert!(!cc.paths[3].probing);
    }

    #[test]
    fn at_most_half_the_paths_are_left_out() {
        let (mut cc, p) = four_paths([10_000; 4]);
        for i in 0..4 {
            cc.on_path_lost(&p, 2_000, i);
        }
        let out = cc.paths.iter().filter(|q| q.excluded_until > 2_000).count();
        assert_eq!(out, 2, "losses on every path are the peer's congestion");
        assert_eq!(cc.paths.iter().map(|q| q.counters.losses).sum::<u64>(), 4);
    }

    #[test]
    fn path_ports_are_ephemeral_and_differ_by_peer() {
        let a: Vec<u16> = (0..16).map(|i| path_port(7, NodeId(1), i)).collect();
        let b: Vec<u16> = (0..16).map(|i| path_port(7, NodeId(2), i)).collect();
        assert!(a.iter().chain(&b).all(|&p| p >= 49152));
        assert_ne!(a, b);
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() >= 15, "{a:?}");
        assert_eq!(
            a,
            (0..16)
                .map(|i| path_port(7, NodeId(1), i))
                .collect::<Vec<_>>()
        );
    }
}
