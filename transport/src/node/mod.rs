//! The protocol of one node as a state machine: no clock, no I/O (docs/design.md §2, §6).
//!
//! A [`Node`] is the "network interface" of the hybrid-deposit model with the device
//! taken out: its tables (endpoints, registers, instructions, tokens, nodes,
//! connections), its TLB, the reliability state of every connection, connection
//! management and the counters. A driver feeds it and drains it:
//!
//! ```text
//! frames in   node.handle_frame(&bytes, now)           (validate, connection and key,
//!                                                        reliability, deliver, ack/credit)
//! frames out  node.poll_transmit(now, &mut link)       (work requests into messages,
//!                                                        acks, NAKs, probes, CM)
//! timers      node.next_timeout() / node.handle_timeout(now)
//! host        connect, listen, close, resume, endpoints, registers, tokens (fields and
//!             methods of `Node`); posting goes through each connection's lock-free
//!             queue (`ConnShared`)
//! ```
//!
//! `now` is a tick count at [`Node::hz`] ticks per second, read by the driver (the DPDK
//! worker passes the TSC; tests pass a simulated clock). Frames go out through a
//! [`Link`]: the driver's transmit queues and buffers (mbufs for the DPDK driver, byte
//! vectors for a simulated link), so a frame is written once, in place.
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
//!   reads and atomics, events, exceptions and their repair ([`Node::resume`]).
//! * `send`: frames out — work requests into messages, acknowledgements and NAKs,
//!   completions.
//! * [`crate::cm`]: connection management over connection 0.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

pub mod cc;
pub mod conn;
mod connect;
mod link;
mod neighbours;
mod recv;
mod refusals;
mod send;
mod shard;
mod stats;
mod timers;
mod turn;

pub use link::{External, FrameBuf, FrameQueue, Link};
pub use recv::ResumeError;
pub(crate) use send::{complete_ready, fail_connection, process_ack};
pub use shard::{ServiceRoutes, MAX_SHARDS};
pub use stats::Stats;
pub use turn::{Clock, Io, RxFrame, RX_BURST};

use crate::cm::{Cm, CmTiming};
use crate::connection::ConnShared;
use crate::cq::CqShared;
use crate::events::EventRing;
use crate::faults::{FaultConfig, FaultStats, Faults, Hold, Verdict};
use crate::status::DropReason;
use crate::submit::{RingConsumer, SubmitRing};
use crate::tables::{EndpointId, EndpointTable, NodeAddr, NodeId, NodeTable, RegisterFile};
use crate::ticks::us_to_ticks;
use crate::tlb::Tlb;
use crate::wire::{self, WireError};
use conn::ConnTable;

/// How far behind the expected sequence number a message still counts as a
/// retransmitted duplicate (acknowledged again); anything else out of order is refused.
pub const DUPLICATE_WINDOW: u32 = 1 << 20;

/// A receiver acknowledges at least every this many data messages (within a turn,
/// see [`Node::acks_due`]): an eighth of the default window and of a 32-frame burst
/// of 32 B writes in jumbo frames.
pub const ACK_EVERY_MSGS: u64 = 512;

/// ... and at least every this many data frames (bulk writes: a few per frame).
pub const ACK_EVERY_FRAMES: u32 = 8;

/// Most unacknowledged messages a connection may have (its window, plus as many
/// replies): the acknowledged echo of the transport header carries 16 bits of the send
/// base, which its receiver rebuilds unambiguously within 2^16 of its receive point.
pub const MAX_WINDOW: u32 = 1 << 15;

/// Node tunables.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's address (MAC defaults to the link's when all zero).
    pub local: NodeAddr,
    /// Retransmission timeout: the ceiling of the adaptive one, and the unit of the
    /// give-up budget (`retry_count` back-offs of it).
    pub retry_timeout_us: u64,
    /// Floor of the adaptive retransmission timeout (srtt + 4 rttvar from measured
    /// round trips).
    pub min_retry_timeout_us: u64,
    /// Retransmissions of the same data before the connection goes to error.
    pub retry_count: u32,
    /// Interval between connection-management retries.
    pub cm_retry_us: u64,
    /// Give up connecting/closing after this long (also the period of connect
    /// cookies: one lives one to two of these).
    pub cm_timeout_us: u64,
    /// Sealed sections a secure connection's direction sends under one key
    /// generation before moving to the next (`crate::secure`; AES-GCM's limit of 2^23
    /// by default).
    pub rekey_after: u64,
    /// Rates of connect requests answered, per source and node-wide (`crate::cm`).
    pub cm_limits: crate::cm::CmLimits,
    /// This node's long-term identity key pair (`crate::identity`): every connection's
    /// handshake proves it to the peer. The shards of a device share one. The default
    /// is a fresh key pair, forgotten with the node.
    pub identity: std::sync::Arc<crate::identity::Identity>,
    /// Most unacknowledged messages per connection (at most [`MAX_WINDOW`]).
    pub window: u32,
    /// Most unacknowledged bytes of first transmissions per connection (a
    /// bandwidth-delay-product cap: it bounds what one connection queues in the port
    /// ahead of the others' — and the high-priority — messages).
    pub max_inflight_bytes: u64,
    /// Data frames leave ECN-capable (ECT(0) in their IP traffic class), so that an
    /// ECN switch marks them CE instead of dropping; a receiver echoes the mark in its
    /// acknowledgements (`hflags::ECE`). Default on.
    pub ecn: bool,
    /// Congestion control per peer node ([`cc`]): on by default.
    pub cc: cc::CcConfig,
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
    /// Entries of the submission ring posts go through (`submit`).
    pub submit_ring: usize,
    /// This node's shard of its device, and the device's shards (at most
    /// [`MAX_SHARDS`]): its connection numbers end in its shard (`shard`).
    pub shard: u8,
    pub shards: u8,
    /// The 802.1Q VLAN the node is on (1 to 4094): every frame leaves tagged (priority
    /// 5 for high-priority connections' frames, 0 for the rest), and only frames
    /// tagged with it are taken. `None`: untagged, and tagged frames are not ours.
    pub vlan: Option<u16>,
    /// Next hops and address resolution (`crate::neigh`): the node's prefix, gateway
    /// and routes, whether peers' MACs are resolved by ARP, and the table the shards
    /// of a device share.
    pub neigh: crate::neigh::NeighConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            local: NodeAddr::from_ip([10, 0, 0, 1], wire::UDP_PORT),
            retry_timeout_us: 20_000,
            min_retry_timeout_us: 100,
            retry_count: 7,
            cm_retry_us: 50_000,
            cm_timeout_us: 5_000_000,
            cm_limits: crate::cm::CmLimits::default(),
            identity: std::sync::Arc::new(
                crate::identity::Identity::generate().expect("the OS random source"),
            ),
            rekey_after: crate::secure::DEFAULT_REKEY_AFTER,
            window: 4096,
            max_inflight_bytes: 1 << 20,
            ecn: true,
            cc: cc::CcConfig::default(),
            max_connections: 4096,
            registers: 65536,
            instructions: 4096,
            global_instructions: 256,
            payload_tokens: 4096,
            rnr_timeout_us: 200,
            rnr_retry_count: 64,
            keepalive_us: 5_000_000,
            keepalive_count: 5,
            submit_ring: crate::submit::DEFAULT_RING,
            shard: 0,
            shards: 1,
            vlan: None,
            neigh: crate::neigh::NeighConfig::default(),
        }
    }
}

/// What a node needs to know of the link its frames travel on.
#[derive(Debug, Clone, Copy)]
pub struct LinkCaps {
    /// The link's MAC address (the node's unless its config names one).
    pub mac: [u8; 6],
    /// Largest frame, Ethernet header to CRC trailer.
    pub max_frame: usize,
    /// Transmit queues: 2 when there is a high-priority queue.
    pub queues: u16,
    /// Receive descriptors: the frames the peers may have in flight towards us,
    /// shared out as credits.
    pub rx_desc: u16,
    /// Payloads of at least this many bytes go into frames by reference to endpoint
    /// memory ([`External`], [`FrameBuf::set_len_external`]) instead of as a copy;
    /// `usize::MAX`: never. A port whose transmit burst copies every frame (memif,
    /// af_packet) then copies such a payload straight from endpoint memory, instead of
    /// from the node's copy of it in the frame ([`EXTERNAL_MIN`]).
    pub external_min: usize,
}

/// The [`LinkCaps::external_min`] of ports that copy frames as they send them: below
/// it, a copy into the frame costs less than the two extra buffers of a frame in three
/// pieces (head, payload, tail).
pub const EXTERNAL_MIN: usize = 2048;

/// One connection as a listing shows it (`deposit` telemetry's `/deposit/conns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSummary {
    pub number: u32,
    pub peer_ip: IpAddr,
    pub peer_conn: u32,
    pub state: crate::connection::ConnState,
    /// Messages that arrived complete; messages from the peer refused here.
    pub arrivals: u64,
    pub dropped: u64,
    /// Requests sent and not yet acknowledged.
    pub inflight: u64,
}

impl Node {
    /// The connections numbered `from` and above, at most `max` of them in number
    /// order, and how many the node holds in all.
    pub fn conn_summaries(&self, from: u32, max: usize) -> (usize, Vec<ConnSummary>) {
        let mut v: Vec<ConnSummary> = self
            .conns
            .iter()
            .filter(|c| c.number >= from)
            .map(|c| ConnSummary {
                number: c.number,
                peer_ip: self
                    .nodes
                    .get(c.peer)
                    .map_or(IpAddr::from([0; 4]), |a| a.ip),
                peer_conn: c.peer_conn,
                state: c.state,
                arrivals: c.shared.arrivals.load(std::sync::atomic::Ordering::Relaxed),
                dropped: c.shared.dropped.load(std::sync::atomic::Ordering::Relaxed),
                inflight: c.inflight.len() as u64,
            })
            .collect();
        v.sort_unstable_by_key(|c| c.number);
        v.truncate(max);
        (self.conns.len(), v)
    }
}

/// The credits a node grants (units of [`wire::CREDIT_UNIT`], see
/// [`Node::credit_grant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreditShare {
    /// A peer's only connection's.
    one: u16,
    /// Each connection's share of the receive queue.
    desc: u16,
    /// Each peer's share of the receive budget (RCCC).
    peer: u32,
    /// Peers with more than one connection (their connections split the share).
    multi: u32,
}

impl Default for CreditShare {
    fn default() -> Self {
        CreditShare {
            one: u16::MAX,
            desc: u16::MAX,
            peer: u32::MAX,
            multi: 0,
        }
    }
}

impl CreditShare {
    /// What a connection to peer `id` grants, `conns` counting each peer's
    /// connections.
    #[inline]
    pub(crate) fn for_peer(&self, conns: &[u32], id: NodeId) -> u16 {
        if self.multi == 0 {
            return self.one;
        }
        match conns.get(id.0 as usize).copied().unwrap_or(0) {
            0 | 1 => self.one,
            k => (self.peer / k).clamp(1, u32::from(self.desc)) as u16,
        }
    }
}

/// One peer node's congestion state as a listing shows it (`deposit` telemetry's
/// `/deposit/peers`, `ddperf --stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSummary {
    pub peer_ip: IpAddr,
    /// Window and bytes in flight (first transmissions), bytes.
    pub window: u64,
    pub inflight: u64,
    /// The pace, bytes per second (0: not paced: the window is two frames or more).
    pub paced_rate: u64,
    /// Smallest round trip (the receiver's hold taken off) and smoothed round trip
    /// (with it), nanoseconds (0: no sample yet).
    pub base_rtt_ns: u64,
    pub srtt_ns: u64,
    /// The largest hold the peer reported lately on its acknowledgements
    /// (`wire::op::HOLD`), nanoseconds: what it took them to leave after the frames
    /// they acknowledge arrived.
    pub hold_ns: u64,
    /// Connections waiting for its window or pace.
    pub parked: usize,
    pub counters: cc::CcCounters,
    /// The paths its frames are sprayed over (`CcConfig::paths`; empty: one path).
    pub paths: Vec<PathSummary>,
}

/// One of a peer's spray paths, as a peer's summary shows it (`PeerSummary::paths`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSummary {
    /// Its UDP source port (the entropy the fabric's ECMP hashes).
    pub port: u16,
    /// Bytes of first transmissions on it not yet acknowledged.
    pub inflight: u64,
    /// Its smoothed round trip, nanoseconds (0: none seen).
    pub srtt_ns: u64,
    /// Left out now (it showed marks with delay, a delay far above the target, or a
    /// loss), or back on probation.
    pub excluded: bool,
    pub probing: bool,
    pub counters: cc::PathCounters,
}

impl Node {
    /// Every peer node's congestion state (this shard's), in address order.
    pub fn peer_summaries(&self) -> Vec<PeerSummary> {
        let ns = |t: u64| crate::ticks::ticks_to_ns(t, self.hz);
        let mut v: Vec<PeerSummary> = self
            .cc
            .iter()
            .map(|(id, p)| {
                let (base, srtt) = p.rtts();
                PeerSummary {
                    peer_ip: self.nodes.get(id).map_or(IpAddr::from([0; 4]), |a| a.ip),
                    window: p.window(),
                    inflight: p.inflight,
                    paced_rate: p.paced_rate(&self.cc.params),
                    base_rtt_ns: ns(base),
                    srtt_ns: ns(srtt),
                    hold_ns: ns(p.hold()),
                    parked: p.parked.len(),
                    counters: p.counters,
                    paths: p
                        .paths
                        .iter()
                        .map(|q| PathSummary {
                            port: q.port,
                            inflight: q.inflight,
                            srtt_ns: ns(q.srtt),
                            excluded: q.excluded_until > self.now,
                            probing: q.probing,
                            counters: q.counters,
                        })
                        .collect(),
                }
            })
            .collect();
        v.sort_unstable_by_key(|p| p.peer_ip);
        v
    }
}

/// The drop reason for a frame that failed validation.
pub fn wire_drop_reason(e: &WireError) -> DropReason {
    match e {
        WireError::BadCrc { .. } => DropReason::BadCrc,
        WireError::BadCheck { .. } => DropReason::BadCheck,
        WireError::BadVersion(_) => DropReason::BadVersion,
        WireError::Truncated { .. }
        | WireError::BadLength { .. }
        | WireError::BadCellCount { .. } => DropReason::Truncated,
        _ => DropReason::NotOurs,
    }
}

/// When a frame held by the fault layer goes on.
#[derive(Debug, Clone, Copy)]
enum Release {
    AfterFrames(u64),
    At(u64),
}

/// A frame held by the fault layer (a copy: fault injection is a test path).
struct HeldFrame {
    bytes: Vec<u8>,
    release: Release,
    cap: u64,
}

/// The host-facing queues of one endpoint.
#[derive(Clone)]
pub struct EndpointQueues {
    /// "Interrupt at end" and software exceptions.
    pub events: Arc<EventRing>,
    /// Refused messages (connections with `report_traps`) and held faults.
    pub exceptions: Arc<EventRing>,
}

/// The queues of endpoint `id` in a node's table of them (indexed by endpoint).
#[inline]
fn queues_of(queues: &[Option<EndpointQueues>], id: EndpointId) -> Option<&EndpointQueues> {
    queues.get(id.0 as usize).and_then(|q| q.as_ref())
}

/// A service waiting for connection requests.
pub struct ListenEntry {
    pub service: u32,
    pub endpoint: EndpointId,
    pub cq: Arc<CqShared>,
    pub opts: crate::cm::ConnectOptions,
    /// Connections accepted by the node, waiting for the application's `accept`.
    pub accepted: Arc<crate::wake::WaitQueue<Accepted>>,
    /// Connections made for it whose peer has not confirmed yet (they count against
    /// the backlog, the capacity of `accepted`).
    pub unconfirmed: usize,
}

/// A connection the node accepted, with the private data of the request that made it.
pub struct Accepted {
    pub shared: Arc<ConnShared>,
    pub private: crate::cm::PrivateData,
}

/// One node's network interface, without its device.
pub struct Node {
    pub(crate) cfg: NodeConfig,
    pub(crate) caps: LinkCaps,
    pub(crate) endpoints: EndpointTable,
    pub(crate) nodes: NodeTable,
    pub(crate) conns: ConnTable,
    /// The node-wide address-register file.
    pub(crate) regs: RegisterFile,
    /// The node's instruction memory and global instructions.
    pub(crate) instructions: crate::tables::InstructionMemory,
    /// The payload table (tokens).
    pub(crate) tokens: crate::tables::PayloadTable,
    /// Event and exception queues of each endpoint, by endpoint number.
    pub(crate) event_queues: Vec<Option<EndpointQueues>>,
    pub(crate) tlb: Tlb,
    pub(crate) listeners: HashMap<u32, ListenEntry>,
    /// Which shards of the device listen on which service (`shard`).
    pub(crate) routes: ServiceRoutes,
    /// Connection management: its own machine, driven by the node.
    pub(crate) cm: Cm,
    /// Neighbours: next hops, ARP, answers to ARP and echo requests.
    pub(crate) neigh: crate::neigh::Neigh,
    /// Probes of connections to send to another MAC than their peer's
    /// (`Node::try_new_path`).
    pub(crate) path_probes: Vec<(usize, [u8; 6])>,
    /// Private data of the replies that accepted our connections, until the
    /// application takes it (only connections whose peer sent some).
    pub(crate) peer_private: HashMap<u32, Arc<[u8]>>,
    pub(crate) stats: Stats,
    /// Connection slots owing an acknowledgement since an earlier turn: sent by this
    /// turn's acknowledgements unless a data frame carried it first.
    ack_list: Vec<usize>,
    /// Connection slots that started owing one this turn. Waiting a turn lets the
    /// application's reply (a ping-pong write) carry the acknowledgement.
    ack_new: Vec<usize>,
    /// Data messages and frames received since acknowledgements last went out: past
    /// [`ACK_EVERY_MSGS`] or [`ACK_EVERY_FRAMES`] they are due within the turn
    /// ([`Node::acks_due`]).
    owed_msgs_base: u64,
    owed_frames: u32,
    /// When the acknowledgements of this turn leave (ticks): the clock read again
    /// after the turn's work, just before its control frames go ([`Node::turn`];
    /// older than `now` between such reads, and then `now` counts). Their hold
    /// (`wire::op::HOLD`) is measured from it.
    pub(crate) acks_leave: u64,
    /// [`wire::HOLD_MIN_NS`] in ticks: a shorter hold is not reported (and not
    /// converted to nanoseconds: most acknowledgements are compared, not divided).
    pub(crate) hold_min: u64,
    /// Ticks per second of the `now` the driver passes.
    pub(crate) hz: u64,
    /// Each peer node's congestion window and pace (`NodeConfig::cc`).
    pub(crate) cc: cc::CcTable,
    /// What the senders said of sprayed frames in the acknowledgement or timer being
    /// handled (scratch).
    path_events: cc::PathEvents,
    /// Scratch lists: connections unparked, peers whose pace came.
    unparked: Vec<u32>,
    /// Connections whose persist timer fired: their next frame goes past the gate.
    persist: Vec<usize>,
    paced_due: Vec<NodeId>,
    /// Receiver credit (RCCC): the peers that sent bulk data this period (a bit by
    /// node), how many did in the last one, and when this one ends.
    rx_seen: Vec<u64>,
    rx_seen_now: u32,
    pub(crate) rx_active: u32,
    rx_period_end: u64,
    pub(crate) segment_max: u32,
    /// Largest payload of one message in a frame of `send::BULK_FRAME_BESIDE_HIGH` bytes.
    pub(crate) bulk_segment: u32,
    /// Connection timers: a timing wheel (see `timers`).
    timers: timers::TimerQueue,
    /// The entries `run_timers` took (kept for its next call).
    timers_due: Vec<(u64, u32)>,
    /// `cfg.keepalive_us` in clock ticks (timers are re-armed per frame: no division
    /// there).
    pub(crate) keepalive_ticks: u64,
    /// Retry period of completions waiting for room in a completion queue, and of
    /// frames the fault layer holds (half the minimum retransmission timeout,
    /// 25..200 us).
    pub(crate) timer_tick: u64,
    /// The clock as of the driver's last call (host-side calls use it).
    pub(crate) now: u64,
    /// Fault injection on received frames, when configured.
    faults: Option<Faults>,
    /// Frames the fault layer holds back (reordered or delayed).
    held_frames: VecDeque<HeldFrame>,
    /// Frames the fault layer let through so far (the clock of reordering).
    passed_frames: u64,
    /// Diagnostic frames queued by [`Node::send_raw`].
    raw_tx: Vec<Vec<u8>>,
    /// Posted work requests on their way in (`submit`).
    pub(crate) ring: RingConsumer,
    /// Slots of the connections that may have something to send (posted requests,
    /// messages the window or a retransmission lets out, a queue to flush): the only
    /// ones a turn looks at. A connection is listed once (`ConnContext::ready`).
    pub(crate) ready: Vec<usize>,
    /// Connections whose sections went into the frame being built after its own
    /// connection's (`send::bundle`), to re-arm once it is sent.
    bundled: Vec<usize>,
    /// Where the low-priority round-robin starts next turn (an index into `ready`).
    rr_next: usize,
    /// Connection slots owing a liveness probe (keepalive).
    probe_list: Vec<usize>,
    /// Connections removed while the application may still hold them: a post that
    /// passed its state check before the close reaches the ring after the removal, and
    /// is flushed through its connection's completion queue (see `take_submissions`).
    /// An entry goes once nothing but this list holds the connection.
    pub(crate) departed: Vec<Arc<crate::connection::ConnShared>>,
    /// Completions whose connection went while they waited for room in their queue
    /// (a request that failed, unsignaled, and found the queue full; a post that raced
    /// the close), oldest first: retried every timer tick, in order per queue, until
    /// the application polls room free (`Node::report_stranded`). Never dropped while
    /// the application holds the queue.
    pub(crate) stranded: send::Stranded,
    /// What each connection's peer may have unacknowledged towards us (units of
    /// [`wire::CREDIT_UNIT`], advertised in every header; see
    /// [`Node::credit_grant`]): the grant of a peer's only connection, and the shares
    /// of a peer's several connections.
    pub(crate) credits: u16,
    pub(crate) share: CreditShare,
    /// Connections to each peer node (by its number): a peer's share of the receive
    /// budget is split among its connections, and summed back at its sender.
    pub(crate) peer_conns: Vec<u32>,
    /// Peers with a connection, and with more than one.
    pub(crate) peers_live: u32,
    /// The least grant every live connection was told since the credits last grew
    /// (see [`Node::set_credits`]).
    credits_told: u16,
    /// Where a secure connection's sealed cells are opened (a frame's worth).
    opened: Vec<u8>,
    /// Connections accepted here whose peer has not yet shown that it finished the
    /// handshake (a first frame of the connection that passes its checks — for a
    /// sealed one, that opens): they reach the listener's queue then, count against
    /// its backlog meanwhile, and go after a CM timeout.
    pub(crate) unconfirmed: HashMap<u32, Unconfirmed>,
    /// Unconfirmed connections in the order they expire.
    pub(crate) unconfirmed_queue: std::collections::VecDeque<(u64, u32)>,
    /// When the unconfirmed connections' peers are next asked for a frame (their
    /// first may have been lost; `u64::MAX`: none unconfirmed).
    pub(crate) unconfirmed_probe: u64,
    /// Connections accepted here by the source address that asked for them, and how
    /// many of them are unconfirmed (`crate::cm::CmLimits` caps both per source).
    pub(crate) sources: HashMap<IpAddr, SourceCount>,
    /// The source of each connection accepted here.
    pub(crate) accepted_source: HashMap<u32, IpAddr>,
}

/// An accepted connection waiting for its peer's first frame.
pub(crate) struct Unconfirmed {
    pub service: u32,
    pub queue: Arc<crate::wake::WaitQueue<Accepted>>,
    pub accepted: Accepted,
    pub until: u64,
}

/// What one source address holds at a listener.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SourceCount {
    pub conns: u32,
    pub unconfirmed: u32,
}

/// Largest payload of one message in a frame of `max_frame` bytes.
pub fn segment_max_for(max_frame: usize) -> u32 {
    let cells = wire::max_cells(max_frame);
    if cells == 0 {
        return 0;
    }
    (wire::BLOCK_LEN + wire::CELL_LEN * (cells - 1)) as u32
}

impl Node {
    /// A node on a link with `caps`, whose clock ticks `hz` times a second and reads
    /// `now`.
    pub fn new(mut cfg: NodeConfig, mut caps: LinkCaps, hz: u64, now: u64) -> Node {
        if cfg.local.mac == [0; 6] {
            cfg.local.mac = caps.mac;
        }
        cfg.window = cfg.window.clamp(1, MAX_WINDOW);
        cfg.vlan = cfg.vlan.filter(|v| (1..=wire::vlan::VID_MAX).contains(v));
        if cfg.vlan.is_some() {
            // The tag goes in front of what the node writes, within the port's frame.
            caps.max_frame -= wire::vlan::VLAN_LEN;
        }
        if cfg.local.ip.is_ipv6() {
            // Frame sizes are counted as over IPv4 (`link::Tagging`): an IPv6 frame of
            // as many cells is this much longer.
            caps.max_frame -= wire::ipv6::IPV6_EXTRA;
        }
        let segment_max = segment_max_for(caps.max_frame);
        let bulk_segment = segment_max_for(caps.max_frame.min(send::BULK_FRAME_BESIDE_HIGH));
        let mut nodes = NodeTable::new();
        nodes.insert(cfg.local);
        // Each shard's registers and instruction slots are a range of their own: a
        // window names its shard.
        let shard = u32::from(cfg.shard);
        let regs = RegisterFile::new_at(shard * cfg.registers, cfg.registers);
        let instructions = crate::tables::InstructionMemory::new_at(
            shard * cfg.instructions,
            cfg.instructions,
            cfg.global_instructions,
        );
        let tokens = crate::tables::PayloadTable::new(cfg.payload_tokens);
        let ticks = |us: u64| us_to_ticks(us, hz);
        let timer_tick = ticks((cfg.min_retry_timeout_us / 2).clamp(25, 200));
        let timing = CmTiming {
            first_retry: timer_tick,
            retry: ticks(cfg.cm_retry_us),
            timeout: ticks(cfg.cm_timeout_us),
        };
        let cm = Cm::with_limits(
            cfg.local.mac,
            caps.max_frame as u32,
            timing,
            &cfg.cm_limits,
            hz,
            cfg.identity.clone(),
        );
        let keepalive_ticks = ticks(cfg.keepalive_us);
        let ring = RingConsumer::new(cfg.submit_ring);
        let conns = ConnTable::with_capacity(cfg.max_connections);
        let neigh = crate::neigh::Neigh::new(cfg.neigh.clone(), cfg.local.ip, cfg.local.mac, hz);
        // A peer's first window: the ceiling, as RDMA and NSCC start at line rate (an
        // incast's first round trip is held by the receivers' credits, which count
        // every connection as a sender until a period shows otherwise).
        let params = cc::Params::new(&cfg.cc, hz, caps.max_frame, cfg.max_inflight_bytes);
        let salt = cfg
            .local
            .mac
            .iter()
            .fold(0u64, |h, &b| h << 8 | u64::from(b));
        let cc = cc::CcTable::new(params, cfg.max_inflight_bytes).with_salt(salt);
        Node {
            cc,
            path_events: cc::PathEvents::default(),
            unparked: Vec::new(),
            persist: Vec::new(),
            paced_due: Vec::new(),
            rx_seen: Vec::new(),
            rx_seen_now: 0,
            rx_active: 0,
            rx_period_end: 0,
            neigh,
            path_probes: Vec::new(),
            cfg,
            caps,
            endpoints: EndpointTable::new(),
            nodes,
            conns,
            instructions,
            tokens,
            regs,
            event_queues: Vec::new(),
            tlb: Tlb::new(),
            listeners: HashMap::new(),
            routes: ServiceRoutes::default(),
            cm,
            peer_private: HashMap::new(),
            stats: Stats::default(),
            ack_list: Vec::with_capacity(1024),
            ack_new: Vec::with_capacity(1024),
            owed_msgs_base: 0,
            owed_frames: 0,
            acks_leave: 0,
            hold_min: crate::ticks::ns_to_ticks(u64::from(wire::HOLD_MIN_NS), hz).max(1),
            hz,
            segment_max,
            bulk_segment,
            opened: vec![0; caps.max_frame],
            unconfirmed: HashMap::new(),
            unconfirmed_queue: std::collections::VecDeque::new(),
            unconfirmed_probe: u64::MAX,
            sources: HashMap::new(),
            accepted_source: HashMap::new(),
            timers: timers::TimerQueue::new(timer_tick),
            timers_due: Vec::new(),
            keepalive_ticks,
            timer_tick,
            now,
            faults: None,
            held_frames: VecDeque::new(),
            passed_frames: 0,
            raw_tx: Vec::new(),
            ring,
            ready: Vec::new(),
            bundled: Vec::new(),
            rr_next: 0,
            probe_list: Vec::new(),
            departed: Vec::new(),
            stranded: send::Stranded::new(),
            credits: u16::MAX,
            credits_told: u16::MAX,
            share: CreditShare::default(),
            peer_conns: Vec::new(),
            peers_live: 0,
        }
    }

    /// The ring posts reach this node through (a driver sleeps on it when idle).
    pub fn submit_ring(&self) -> &Arc<SubmitRing> {
        self.ring.ring()
    }

    /// Connections on the ready list: those that may have something to send (what a
    /// turn looks at; idle connections are not on it).
    pub fn ready_connections(&self) -> usize {
        self.ready.len()
    }

    /// Connections removed while the application still held them (kept to flush posts
    /// that raced their close; see `departed`).
    pub fn departed_connections(&self) -> usize {
        self.departed.len()
    }

    /// This node's address.
    pub fn local(&self) -> NodeAddr {
        self.cfg.local
    }
    /// This node's identity key (what its peers pin).
    pub fn identity(&self) -> crate::identity::IdentityKey {
        self.cfg.identity.public()
    }
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }
    /// What the node knows of its link.
    pub fn link(&self) -> &LinkCaps {
        &self.caps
    }
    /// Ticks per second of the clock the driver passes.
    pub fn hz(&self) -> u64 {
        self.hz
    }
    /// Largest payload of one message.
    pub fn segment_max(&self) -> u32 {
        self.segment_max
    }
    /// Counters, with the TLB's.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.tlb = self.tlb.stats();
        s.cm_challenges = self.cm.challenges_sent();
        let n = self.neigh.stats();
        s.arp_requests_tx = n.arp_requests_tx;
        s.arp_replies_tx = n.arp_replies_tx;
        s.neigh_resolved = n.resolved;
        s.echo_replies_tx = n.echo_replies_tx;
        s
    }

    /// Attaches the queues of an endpoint: events (interrupts, software exceptions)
    /// and exceptions (refused messages of connections that report them, and faults
    /// that hold a connection for the host).
    pub fn set_endpoint_queues(
        &mut self,
        id: EndpointId,
        events: Arc<EventRing>,
        exceptions: Arc<EventRing>,
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

    pub(crate) fn us_to_ticks(&self, us: u64) -> u64 {
        us_to_ticks(us, self.hz)
    }

    /// Whether high-priority connections exist (their frames take the high queue).
    #[inline]
    pub fn has_high_priority(&self) -> bool {
        !self.conns.high_slots().is_empty()
    }

    /// A frame received at `now`: through the fault layer when one is configured.
    #[inline]
    pub fn handle_frame(&mut self, frame: &[u8], now: u64) {
        self.now = now;
        if self.faults.is_none() {
            self.receive(frame, now);
            return;
        }
        self.inject(frame, now);
        if !self.held_frames.is_empty() {
            self.release_held(now);
        }
    }

    /// Everything the node has to send now: posted work (high-priority connections
    /// first), acknowledgements, NAKs, probes, connection management. Returns false
    /// when the link took no more frames (the rest waits for the next call).
    pub fn poll_transmit<L: Link>(&mut self, now: u64, link: &mut L) -> bool {
        let more = self.transmit_data(now, link);
        self.transmit_control(link);
        more
    }

    /// The clock for the host-side calls that follow (`connect`, `close` and `resume`
    /// start timers from it); the driver's calls set it too.
    #[inline]
    pub fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// When the driver must next call [`Node::handle_timeout`] and
    /// [`Node::poll_transmit`] (`u64::MAX`: not before a frame arrives or the host
    /// posts). Acknowledgements and other control frames owed make it now: a driver
    /// that sleeps must ask; one that transmits every turn (the DPDK worker) needs only
    /// [`Node::next_timer`].
    #[inline]
    pub fn next_timeout(&self) -> u64 {
        if self.owes_control() {
            return self.now;
        }
        self.next_timer()
    }

    /// When [`Node::handle_timeout`] is next due: the earliest connection or
    /// connection-management timer, or the next release of frames the fault layer
    /// holds.
    #[inline]
    pub fn next_timer(&self) -> u64 {
        let expiry = self.unconfirmed_queue.front().map_or(u64::MAX, |u| u.0);
        let t = self
            .timers
            .next()
            .min(self.cm.next_timeout())
            .min(self.neigh.next_timeout())
            .min(expiry.min(self.unconfirmed_probe))
            .min(self.cc.next_pace());
        if self.held_frames.is_empty() && self.stranded.is_empty() {
            t
        } else {
            t.min(self.now + self.timer_tick)
        }
    }

    /// Whether acknowledgements are due now, before the turn ends: a stream
    /// received [`ACK_EVERY_MSGS`] messages or [`ACK_EVERY_FRAMES`] frames since they
    /// last went out. (A burst of full frames takes the receiver a hundred
    /// microseconds and more; acknowledged only at the turn's end — a turn later,
    /// for piggybacking — the sender's window stood still meanwhile, and its
    /// retransmission timer fired without loss.) The driver then calls
    /// [`Node::send_acks`] and puts the frames on the wire.
    #[inline]
    pub fn acks_due(&self) -> bool {
        (self.owed_frames >= ACK_EVERY_FRAMES
            || self.stats.msgs_rx.wrapping_sub(self.owed_msgs_base) >= ACK_EVERY_MSGS)
            && !(self.ack_list.is_empty() && self.ack_new.is_empty())
    }

    /// Sends every acknowledgement owed now, also those that would wait a turn for
    /// a reply to carry them.
    pub fn send_acks<L: Link>(&mut self, link: &mut L) {
        self.ack_list.append(&mut self.ack_new);
        self.flush_acks(link);
    }

    /// Whether control frames wait for the next transmission.
    fn owes_control(&self) -> bool {
        !(self.ack_list.is_empty()
            && self.ack_new.is_empty()
            && self.probe_list.is_empty()
            && self.path_probes.is_empty()
            && !self.cm.has_output()
            && !self.neigh.has_output()
            && self.raw_tx.is_empty())
    }

    /// Runs the timers due at `now` — retransmission, receiver-not-ready back-off,
    /// keepalive, connection management, completions waiting for room — and releases
    /// frames the fault layer held. What they send goes out with the next
    /// [`Node::poll_transmit`].
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        if !self.held_frames.is_empty() {
            self.release_held(now);
        }
        if !self.stranded.is_empty() {
            self.report_stranded();
        }
        self.run_timers(now);
        self.run_pacing(now);
        self.expire_unconfirmed(now);
        if self.cm.next_timeout() <= now {
            self.cm.handle_timeout(now);
            self.apply_cm_actions();
        }
        if self.neigh.next_timeout() <= now {
            self.neigh.handle_timeout(now);
            self.absorb_neigh();
        }
    }

    /// The credits every acknowledgement grants (units of [`wire::CREDIT_UNIT`]): our
    /// receive queue shared among the live connections (at least 4 frames each) and,
    /// with congestion control, the receive budget shared among the peers that sent
    /// bulk data in the last period (RCCC: a receiver of many senders grants each its
    /// share of what it drains, so an incast is paced before a queue forms).
    ///
    /// Returns the grant of a peer's only connection; [`Node::share`] keeps what a
    /// peer of several connections grants each (its share split among them).
    pub(crate) fn credit_grant(&mut self) -> u16 {
        let n = self.conns.len().max(1);
        let frames = (usize::from(self.caps.rx_desc) / n).max(4) as u64;
        let desc = frames * u64::from(self.segment_max) / wire::CREDIT_UNIT;
        let peer = if self.cc.params.enabled {
            self.cfg.cc.receive_budget_bytes()
                / u64::from(self.rx_active.max(1))
                / wire::CREDIT_UNIT
        } else {
            u64::MAX
        };
        let units = |u: u64| u.clamp(1, u64::from(u16::MAX)) as u16;
        self.share = CreditShare {
            one: units(desc.min(peer)),
            desc: units(desc),
            peer: peer.min(u64::from(u32::MAX)) as u32,
            multi: self.share.multi,
        };
        self.share.one
    }

    /// Counts connection to (`up`) or from (`!up`) peer `id` going.
    pub(crate) fn count_peer_conn(&mut self, id: NodeId, up: bool) {
        let i = id.0 as usize;
        if i >= self.peer_conns.len() {
            self.peer_conns.resize(i + 1, 0);
        }
        let k = &mut self.peer_conns[i];
        if up {
            *k += 1;
            self.peers_live += u32::from(*k == 1);
            self.share.multi += u32::from(*k == 2);
        } else {
            *k = k.saturating_sub(1);
            self.peers_live -= u32::from(*k == 0);
            self.share.multi -= u32::from(*k == 1);
        }
    }

    /// The credits shared out again ([`Node::credit_grant`]). When they fell to half
    /// of what the connections were last all told, every live connection owes an
    /// acknowledgement to carry them: a peer that last heard a larger grant (a
    /// connection made before many others) must not start a burst on it.
    pub(crate) fn set_credits(&mut self) {
        self.set_credits_except(usize::MAX);
    }

    /// [`Node::set_credits`], connection slot `except` (one being made) told by its
    /// own first frames.
    pub(crate) fn set_credits_except(&mut self, except: usize) {
        let grant = self.credit_grant();
        if u32::from(grant) * 2 <= u32::from(self.credits_told) {
            for s in 0..self.conns.slots() {
                if s == except {
                    continue; // the one being made: its first frames carry the grant
                }
                if let Some(c) = self.conns.get_mut(s) {
                    if c.state.is_up() && !c.ack_pending {
                        c.ack_pending = true;
                        self.ack_new.push(s);
                    }
                }
            }
            self.credits_told = grant;
        }
        self.credits_told = self.credits_told.max(grant);
        self.credits = grant;
    }

    /// A bulk section from peer `id` arrived at `now`: it counts as sending in this
    /// period. More senders than the last period's share the budget at once (an
    /// incast's first frames shrink every grant); fewer, when the period ends.
    #[inline]
    pub(crate) fn saw_sender(&mut self, id: NodeId, now: u64) {
        if now >= self.rx_period_end {
            // A period in which nobody sent (an idle spell) says nothing of how many
            // will: the last count stands.
            if self.rx_seen_now != 0 {
                self.rx_active = self.rx_seen_now;
            }
            self.rx_seen.fill(0);
            self.rx_seen_now = 0;
            self.rx_period_end = now + self.cc.params.credit_period();
            self.set_credits();
        }
        let (w, b) = (id.0 as usize / 64, id.0 % 64);
        if w >= self.rx_seen.len() {
            self.rx_seen.resize(w + 1, 0);
        }
        if self.rx_seen[w] & (1 << b) == 0 {
            self.rx_seen[w] |= 1 << b;
            self.rx_seen_now += 1;
            if self.rx_seen_now > self.rx_active {
                self.rx_active = self.rx_seen_now;
                self.set_credits();
            }
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
    fn inject(&mut self, frame: &[u8], now: u64) {
        let Some(f) = self.faults.as_mut() else {
            self.receive(frame, now);
            return;
        };
        let Verdict::Pass {
            dup,
            corrupt_bit,
            hold,
        } = f.verdict(frame.len())
        else {
            return; // dropped
        };
        if dup {
            self.passed_frames += 1;
            self.receive(frame, now);
        }
        let mut bytes = frame.to_vec();
        if let Some(bit) = corrupt_bit {
            if let Some(b) = bytes.get_mut(bit / 8) {
                *b ^= 1 << (bit % 8);
            }
        }
        let release = match hold {
            Hold::None => {
                self.passed_frames += 1;
                self.receive(&bytes, now);
                return;
            }
            Hold::Frames(k) => Release::AfterFrames(self.passed_frames + u64::from(k)),
            Hold::Micros(us) => Release::At(now + self.us_to_ticks(us)),
        };
        // A held frame never waits more than a millisecond (reordering needs traffic
        // behind it; the link may go quiet).
        let cap = now + self.us_to_ticks(1000);
        self.held_frames.push_back(HeldFrame {
            bytes,
            release,
            cap,
        });
    }

    /// Hands the frames whose hold is over to the node.
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
                self.receive(&h.bytes, now);
            } else {
                i += 1;
            }
        }
    }

    /// Whether the fault layer holds frames back (they are released by
    /// [`Node::handle_timeout`]).
    pub fn holds_frames(&self) -> bool {
        !self.held_frames.is_empty()
    }

    /// Queues a raw frame for transmission as is (diagnostics and hostile-input tests).
    pub fn send_raw(&mut self, frame: &[u8]) {
        self.raw_tx.push(frame.to_vec());
    }

    /// The connection table, for tests that look inside connections (built with
    /// `sim`, which only tests and the fuzz crate enable).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn conn_table(&self) -> &ConnTable {
        &self.conns
    }

    /// The UDP source port of a connection, in 49152..65536: the entropy that ECMP
    /// paths and RSS queues hash. Mixed from every bit of the number — its low byte
    /// is its shard, so the low 14 bits alone gave one shard's connections 64 ports.
    pub(crate) fn src_port_for(number: u32) -> u16 {
        49152 | (number.wrapping_mul(0x9e37_79b1) >> 18) as u16
    }
}

/// Node id of an address, learning it if new.
pub(crate) fn learn_node(nodes: &mut NodeTable, addr: NodeAddr) -> NodeId {
    match nodes.find_ip(addr.ip) {
        Some(id) if nodes.get(id) == Some(&addr) => id,
        _ => nodes.insert(addr),
    }
}
