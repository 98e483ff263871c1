//! The node's own state of a connection ([`ConnContext`]: sequence state, queues,
//! what it may touch) and the table that finds it by number ([`ConnTable`]). The
//! application never sees these: it holds the connection's shared part
//! ([`crate::connection::ConnShared`]).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use super::refusals::{echoed_base, Refusals, MAX_REFUSALS};
use crate::connection::{random_u32, shard_of_conn, ConnShared, ConnState};
use crate::status::Nak;
use crate::tables::{EndpointId, NodeId};
use crate::wr::{Completion, Pending, Priority, Work};

/// Where a multi-segment work request of the peer's landed: the sequence number of its
/// first segment and the effective address that segment generated (once, whatever the
/// address mode: a post-increment moved its register once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBase {
    pub first_seq: u32,
    pub ea: u64,
}

/// A message kept by a fault until the host repairs it and resumes the connection.
#[derive(Debug, Clone)]
pub struct Held {
    pub seq: u32,
    pub control: crate::wire::ControlRepr,
    pub payload: Vec<u8>,
    pub trap: crate::oplogic::Trap,
}

/// A message kept because it arrived ahead of a gap in the sequence.
#[derive(Debug, Clone)]
pub struct Stored {
    pub control: crate::wire::ControlRepr,
    pub payload: Vec<u8>,
    /// The frame's compound descriptor, for a `COMPOUND_REPEAT` message.
    pub frame_desc: Option<[u8; 8]>,
    /// Already placed on arrival (a `SEGMENT`, no payload kept): when the gap fills it
    /// only moves the sequence on.
    pub placed: bool,
}

// Read replies not yet acknowledged, which later stores must not overtake: the rule is
// the operation logic's.
pub use crate::oplogic::ReadReplies;

/// Messages kept ahead of a gap, by sequence number ([`ConnContext::reorder`]): out of
/// line, made by the first one (the loss path), so that a connection that never saw a
/// gap carries a pointer for them.
#[derive(Default)]
#[allow(clippy::box_collection)] // the point: one pointer inline, not the map's header
pub struct Reorder(Option<Box<std::collections::BTreeMap<u32, Stored>>>);

impl Reorder {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }
    pub fn insert(&mut self, seq: u32, st: Stored) -> Option<Stored> {
        self.0.get_or_insert_with(Box::default).insert(seq, st)
    }
    pub fn remove(&mut self, seq: &u32) -> Option<Stored> {
        self.0.as_mut()?.remove(seq)
    }
}

/// Completions that found the completion queue full, oldest first
/// ([`ConnContext::unreported`]): out of line, made by the first one (only after the
/// application let its queue fill).
#[derive(Default)]
#[allow(clippy::box_collection)] // the point: one pointer inline, not the deque's header
pub struct Unreported(Option<Box<VecDeque<Completion>>>);

impl Unreported {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }
    pub fn iter(&self) -> impl Iterator<Item = &Completion> + '_ {
        self.0.iter().flat_map(|q| q.iter())
    }
    pub fn push_back(&mut self, wc: Completion) {
        self.0.get_or_insert_with(Box::default).push_back(wc)
    }
    pub fn push_front(&mut self, wc: Completion) {
        self.0.get_or_insert_with(Box::default).push_front(wc)
    }
    pub fn pop_front(&mut self) -> Option<Completion> {
        self.0.as_mut()?.pop_front()
    }
}

/// Receiver-not-ready NAKs owed to the peer, oldest first ([`ConnContext::naks`]):
/// out of line, made by the first (a held connection), as refusals are.
pub type Naks = super::refusals::NakList<MAX_PENDING_NAKS>;

/// Most receiver-not-ready NAKs remembered between two acknowledgement frames (they
/// need no record: the sender's timer covers their loss; refusals are in
/// [`Refusals`]). One is queued when a message is held and again when later messages
/// meet the held connection: a few slots are plenty (each costs every connection 8 B).
pub const MAX_PENDING_NAKS: usize = 4;

/// A connection's options that are flags, in one byte (the connection entry stays
/// within 512 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy(u8);

impl Policy {
    const FORCED: u8 = 1;
    const TRAPS: u8 = 2;
    const ISOLATED: u8 = 4;

    /// The flags of `ConnectOptions`: `allow_forced_interrupts`, `report_traps`,
    /// `isolated`.
    pub fn new(allow_forced_interrupts: bool, report_traps: bool, isolated: bool) -> Policy {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        Policy(
            bit(allow_forced_interrupts, Self::FORCED)
                | bit(report_traps, Self::TRAPS)
                | bit(isolated, Self::ISOLATED),
        )
    }

    /// The peer may force interrupts (cond ALWAYS, software exceptions).
    #[inline]
    pub fn allow_forced_interrupts(self) -> bool {
        self.0 & Self::FORCED != 0
    }

    /// Refused messages are also reported on the endpoint's event queue.
    #[inline]
    pub fn report_traps(self) -> bool {
        self.0 & Self::TRAPS != 0
    }

    /// Isolation mode: every message that is not an instruction pointer or a payload
    /// token's write or read is refused (`Trap::Isolated`).
    #[inline]
    pub fn isolated(self) -> bool {
        self.0 & Self::ISOLATED != 0
    }
}

/// The worker's entry for one connection.
pub struct ConnContext {
    pub number: u32,
    pub key: u64,
    /// Endpoint that incoming operations act on.
    pub endpoint: EndpointId,
    pub peer: NodeId,
    /// Where its frames go: the MAC the peer's checked frames come from (the peer's,
    /// or its router's), or the configured one.
    pub peer_mac: [u8; 6],
    pub peer_conn: u32,
    pub peer_key: u64,
    pub state: ConnState,
    pub shared: Arc<ConnShared>,
    /// Largest payload of one message (so one message fits one frame).
    pub segment_max: u32,
    /// Send priority.
    pub priority: Priority,
    /// The IP traffic class its frames leave with (`ConnectOptions::traffic_class`;
    /// its ECN bits clear; data frames add ECT(0) when `NodeConfig::ecn`).
    pub traffic_class: u8,
    /// The last data frame received was marked CE: acknowledgements carry ECE.
    pub ce_last: bool,
    /// The register window the peer's messages name (0..len).
    pub regs: crate::tables::RegWindow,
    /// What the peer may do and what is reported of it ([`Policy`]).
    pub policy: Policy,
    /// The instruction window the peer's instruction pointers name.
    pub instructions: crate::tables::RegWindow,
    /// The message a fault keeps (state Exceptioned).
    pub held: Option<Box<Held>>,
    /// A register window allocated for this connection alone (freed with it).
    pub owned_regs: Option<crate::tables::RegWindow>,
    /// A secure connection's sealing state (`crate::secure`): every section it sends
    /// is sealed, every one it takes must open.
    pub secure: Option<Box<crate::secure::Session>>,

    // Receive side.
    /// Sequence state of what the peer sends (cumulative + kept ahead of a gap).
    pub rx: crate::reliability::Receiver,
    /// Messages received ahead of a gap, run when it fills (copies: the loss path).
    pub reorder: Reorder,
    /// Read replies not yet acknowledged, which later stores must not overtake.
    pub read_replies: ReadReplies,
    /// Completions that found the completion queue full, oldest first: they go out,
    /// in order, as the application polls room free (never dropped).
    pub unreported: Unreported,
    /// The work request of the peer's whose first segment ran last, while its later
    /// segments are still to come: they are placed relative to its address.
    pub rx_request: Option<RequestBase>,
    pub ack_pending: bool,
    /// TSC of the last valid frame from the peer, and of our last liveness probe.
    pub last_rx: u64,
    pub last_probe: u64,
    /// Probes sent since the peer was last heard.
    pub probes_unanswered: u16,
    pub naks: Naks,
    /// Messages refused here whose NAK the peer has not confirmed seeing.
    pub refusals: Refusals,

    // Send side.
    /// Sequence state of what we send (selective repeat, retransmission timer).
    pub tx: crate::reliability::Sender,
    /// Our initial sequence number (repeated in connect replies).
    pub isn: u32,
    /// One past the highest sequence number ever sent (below it: retransmissions).
    pub tx_sent_high: u32,
    /// Posted work requests the worker took off the submission ring and has not yet
    /// taken into flight (the window was full), oldest first.
    pub sendq: VecDeque<Work>,
    /// On the node's list of connections with something to send (`Node::ready`).
    pub ready: bool,
    /// A frame of the peer's on this connection passed its checks (mirrored once in
    /// [`ConnShared::heard`]).
    pub heard: bool,
    pub inflight: VecDeque<Pending>,
    /// Most messages in flight (unacknowledged).
    pub window: u32,
    /// Receiver-not-ready: no sending before this TSC.
    pub rnr_until: u64,
    /// (16 bits each: a limit past 65 535 is as good as none, and the entry stays
    /// within its 512 bytes.)
    pub rnr_retries: u16,
    pub rnr_retry_limit: u16,
    /// First RNR back-off, in TSC ticks.
    pub rnr_timeout: u64,

    /// The earliest time the node's timer queue holds for this connection
    /// (`u64::MAX`: none).
    pub timer_armed: u64,
    /// A later entry the queue still holds for this connection (the one `timer_armed`
    /// superseded), adopted instead of arming anew when it comes no later than the
    /// next deadline (`u64::MAX`: none).
    pub timer_spare: u64,
}

/// Where a connection's frames go: the peer node and the shard there that owns the
/// peer's connection (the low byte of its number, [`shard_of_conn`]). Sections of one
/// frame go to one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub node: NodeId,
    pub shard: u8,
}

impl ConnContext {
    /// Takes a request (or a reply) into flight. The first one of an idle connection
    /// makes room for one only, not the four a `VecDeque` reserves by default: with
    /// tens of thousands of connections each carrying a message or two at a time, that
    /// is 144 bytes a connection instead of 576 (a streaming connection doubles up from
    /// there as any `VecDeque`; an idle one gives it all back,
    /// `timers::release_idle_memory`).
    #[inline]
    pub fn take_into_flight(&mut self, p: Pending) {
        if self.inflight.capacity() == 0 {
            self.inflight.reserve_exact(1);
        }
        self.inflight.push_back(p);
    }

    /// The peer node and shard this connection's frames go to.
    #[inline]
    pub fn dest(&self) -> Dest {
        Dest {
            node: self.peer,
            shard: shard_of_conn(self.peer_conn),
        }
    }

    /// Messages needed for a work request of `len` bytes.
    #[inline]
    pub fn segments_for(&self, len: u32) -> u32 {
        len.div_ceil(self.segment_max).max(1)
    }

    /// Whether the connection may send now: it is up and the peer is not backing it
    /// off (receiver not ready).
    #[inline]
    pub fn may_send(&self, now: u64) -> bool {
        self.state.is_up() && now >= self.rnr_until
    }

    /// Whether a posted request may go into flight now: the connection may send and
    /// its window has room.
    #[inline]
    pub fn may_admit(&self, now: u64) -> bool {
        self.may_send(now) && self.tx.in_flight() < self.window
    }

    /// Index in `inflight` and segment within it of sequence number `seq`.
    ///
    /// O(1) while every request before it is one message (request `i` then starts at
    /// the front's number plus `i`), else a binary search: the requests' first numbers
    /// grow along the deque, and a frame is filled from here on every send, so a scan
    /// from the front would cost the whole window per frame.
    pub fn locate(&self, seq: u32) -> Option<(usize, u32)> {
        locate_in(&self.inflight, seq)
    }

    /// The cumulative acknowledgement a frame that carries no NAK cell may give: up to
    /// the first refusal the peer may not know of.
    #[inline]
    pub fn ack_point(&self) -> u32 {
        if self.refusals.is_empty() {
            self.rx.expected()
        } else {
            self.refusals.ack_point(self.rx.expected(), 0)
        }
    }

    /// Queues a receiver-not-ready NAK for the next acknowledgement frame.
    pub fn push_nak(&mut self, seq: u32, nak: Nak) -> bool {
        self.naks.push(seq, nak)
    }
}

/// The index from connection number to slot: open addressing with linear probing,
/// the home bucket taken straight from the number's bits above its low byte (the
/// shard's). Numbers are random, and chosen where their home bucket is free
/// ([`ConnTable::unused_number`]), so a lookup is almost always one load — one whose
/// address is known from the number alone, so the receive path can prefetch it for
/// a frame's later sections (a hash map's two arrays and hidden layout could not be).
/// A peer cannot add entries, so it cannot build collisions.
#[derive(Clone)]
struct ConnIndex {
    /// (number, slot + 1); slot 0 marks an empty bucket. A power of two long, at most
    /// half full.
    buckets: Box<[(u32, u32)]>,
    len: usize,
}

impl Default for ConnIndex {
    fn default() -> Self {
        ConnIndex::with_capacity(0)
    }
}

impl ConnIndex {
    /// An index for `n` numbers before it grows.
    fn with_capacity(n: usize) -> Self {
        let size = (n.max(32) * 2).next_power_of_two();
        ConnIndex {
            buckets: vec![(0, 0); size].into_boxed_slice(),
            len: 0,
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The home bucket of `number`.
    #[inline]
    fn home(&self, number: u32) -> usize {
        (number >> 8) as usize & self.mask()
    }

    /// The bucket holding `number`, if any.
    #[inline]
    fn find(&self, number: u32) -> Option<usize> {
        let mut i = self.home(number);
        loop {
            let (n, s) = self.buckets[i];
            if s == 0 {
                return None;
            }
            if n == number {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    #[inline]
    fn get(&self, number: u32) -> Option<usize> {
        self.find(number).map(|i| self.buckets[i].1 as usize - 1)
    }

    /// Whether `number`'s home bucket is free (a new number should land there).
    fn home_free(&self, number: u32) -> bool {
        self.buckets[self.home(number)].1 == 0
    }

    /// The address of `number`'s home bucket (for a prefetch).
    #[inline]
    fn home_addr(&self, number: u32) -> *const u8 {
        (&self.buckets[self.home(number)] as *const (u32, u32)).cast()
    }

    /// Adds `number` (not present) at `slot`.
    fn insert(&mut self, number: u32, slot: usize) {
        if (self.len + 1) * 2 > self.buckets.len() {
            let mut bigger = ConnIndex::with_capacity(self.buckets.len());
            for &(n, s) in self.buckets.iter().filter(|b| b.1 != 0) {
                bigger.place(n, s);
            }
            bigger.len = self.len;
            *self = bigger;
        }
        self.place(number, slot as u32 + 1);
        self.len += 1;
    }

    /// Puts (number, stored slot) in the first free bucket from its home.
    fn place(&mut self, number: u32, stored: u32) {
        let mut i = self.home(number);
        while self.buckets[i].1 != 0 {
            i = (i + 1) & self.mask();
        }
        self.buckets[i] = (number, stored);
    }

    /// Removes `number`, returning its slot; later entries of its probe run move back
    /// into the gap (no tombstones).
    fn remove(&mut self, number: u32) -> Option<usize> {
        let mut gap = self.find(number)?;
        let slot = self.buckets[gap].1 as usize - 1;
        self.len -= 1;
        let mask = self.mask();
        let mut i = gap;
        loop {
            self.buckets[gap] = (0, 0);
            loop {
                i = (i + 1) & mask;
                let (n, s) = self.buckets[i];
                if s == 0 {
                    return Some(slot);
                }
                // The entry at i may move to the gap unless its home lies cyclically
                // in (gap, i].
                let home = self.home(n);
                let stays = if gap <= i {
                    gap < home && home <= i
                } else {
                    gap < home || home <= i
                };
                if !stays {
                    self.buckets[gap] = (n, s);
                    gap = i;
                    break;
                }
            }
        }
    }
}

/// Connection table: slots plus an index from the (random) connection number.
#[derive(Default)]
pub struct ConnTable {
    slots: Vec<Option<ConnContext>>,
    by_number: ConnIndex,
    free: Vec<usize>,
    /// Slots of high-priority connections (served first, checked between frames).
    high: Vec<usize>,
    /// Most connections the table holds (the node's `max_connections`; 0: no limit):
    /// the slots never grow past it (a doubling past 65 536 connections of 512 bytes
    /// would reserve 32 MiB that can never be used).
    limit: usize,
}

impl ConnTable {
    pub fn new() -> Self {
        Self::default()
    }
    /// A table of at most `n` connections, whose index holds them all before it
    /// grows.
    pub fn with_capacity(n: usize) -> Self {
        ConnTable {
            by_number: ConnIndex::with_capacity(n),
            limit: n,
            ..Self::default()
        }
    }
    pub fn len(&self) -> usize {
        self.by_number.len
    }
    pub fn is_empty(&self) -> bool {
        self.by_number.len == 0
    }
    pub fn contains(&self, number: u32) -> bool {
        self.by_number.find(number).is_some()
    }
    /// A connection number not in use: random (from the OS source) but for its low
    /// byte, `low` (the shard's), and nonzero, its home bucket in the index free.
    pub fn unused_number(&self, low: u8) -> u32 {
        loop {
            let n = (random_u32() & !0xff) | u32::from(low);
            if n != 0 && self.by_number.home_free(n) {
                return n;
            }
        }
    }
    pub fn insert(&mut self, c: ConnContext) -> usize {
        let n = c.number;
        let high = c.priority == Priority::High;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(c);
                s
            }
            None => {
                let (len, cap) = (self.slots.len(), self.slots.capacity());
                if len == cap && self.limit > len {
                    // Doubling, but never past the limit.
                    let want = (cap * 2).max(4).min(self.limit);
                    self.slots.reserve_exact(want - len);
                }
                self.slots.push(Some(c));
                self.slots.len() - 1
            }
        };
        self.by_number.insert(n, slot);
        if let Some(c) = &self.slots[slot] {
            c.shared.slot.store(slot as u32, Ordering::Relaxed);
        }
        if high {
            self.high.push(slot);
        }
        slot
    }
    #[inline]
    pub fn slot_of(&self, number: u32) -> Option<usize> {
        self.by_number.get(number)
    }
    /// Starts loading the index bucket where connection `number` is (a hint, as
    /// [`ConnTable::prefetch`], one step earlier: the bucket's address needs no load).
    #[inline]
    pub fn prefetch_index(&self, number: u32) {
        crate::prefetch::prefetch(self.by_number.home_addr(number));
    }
    /// Starts loading the state of connection `number` into the cache, if it is one
    /// of ours (a hint: the receive path asks for the next section's connection while
    /// it works on the current one, so that frames of many connections do not miss on
    /// each in turn).
    #[inline]
    pub fn prefetch(&self, number: u32) {
        if let Some(slot) = self.slot_of(number) {
            self.prefetch_slot(slot);
        }
    }
    /// [`ConnTable::prefetch`] by slot.
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        if let Some(Some(c)) = self.slots.get(slot) {
            let lines = std::mem::size_of::<ConnContext>().div_ceil(64);
            crate::prefetch::prefetch_lines((c as *const ConnContext).cast(), lines, true);
        }
    }
    #[inline]
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut ConnContext> {
        self.slots.get_mut(slot).and_then(|s| s.as_mut())
    }
    pub fn get(&self, slot: usize) -> Option<&ConnContext> {
        self.slots.get(slot).and_then(|s| s.as_ref())
    }
    pub fn remove(&mut self, number: u32) -> Option<ConnContext> {
        let slot = self.by_number.remove(number)?;
        self.free.push(slot);
        self.high.retain(|s| *s != slot);
        self.slots[slot].take()
    }
    /// Slots of the high-priority connections.
    pub fn high_slots(&self) -> &[usize] {
        &self.high
    }
    /// Number of slots (live or free) — iterate 0..slots() with get_mut.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &ConnContext> {
        self.slots.iter().flatten()
    }
}

/// [`ConnContext::locate`] on a deque of requests.
fn locate_in(inflight: &VecDeque<Pending>, seq: u32) -> Option<(usize, u32)> {
    let base = inflight.front()?.first_seq;
    let off = seq.wrapping_sub(base);
    let len = inflight.len();
    let guess = (off as usize).min(len - 1);
    let idx = if inflight[guess].first_seq.wrapping_sub(base) <= off {
        // Segments are at least one each, so no later request starts at or before it.
        guess
    } else {
        inflight.partition_point(|p| p.first_seq.wrapping_sub(base) <= off) - 1
    };
    let p = &inflight[idx];
    let within = seq.wrapping_sub(p.first_seq);
    (within < p.segments).then_some((idx, within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shards_connections_get_source_ports_of_their_own() {
        // Connection numbers of shard 3 (its low byte): 256 of them, as they come.
        let mut rng = crate::rng::Rng::new(7);
        let ports: std::collections::HashSet<u16> = (0..256)
            .map(|_| super::super::Node::src_port_for((rng.next_u64() as u32) << 8 | 3))
            .collect();
        assert!(ports.len() > 240, "{} distinct of 256", ports.len());
        assert!(ports.iter().all(|&p| p >= 49152));
    }
    use crate::wr::{Source, WcStatus};

    #[test]
    fn the_slots_never_grow_past_the_tables_limit() {
        use crate::sim::{LinkConfig, Network};
        use crate::tables::Rights;
        let cfg = crate::node::NodeConfig {
            max_connections: 5,
            ..crate::node::NodeConfig::default()
        };
        let mut net = Network::new(2, &cfg, LinkConfig::default(), 1);
        let cep = net.hosts[0].endpoint(4096, Rights::NONE, 16);
        let sep = net.hosts[1].endpoint(4096, Rights::REMOTE_WRITE, 16);
        let cq = crate::cq::CqShared::new(64);
        let opts = crate::cm::ConnectOptions::default();
        let up: Vec<_> = (0..5)
            .map(|_| net.connect(0, cep, &cq, 1, sep, &cq, 9, &opts).expect("up"))
            .collect();
        for h in &net.hosts {
            assert_eq!(h.node.conns.len(), 5);
            // Grown 4 -> 5 at the fifth, not doubled to 8.
            assert_eq!(h.node.conns.slots.capacity(), 5);
        }
        assert!(
            net.connect(0, cep, &cq, 1, sep, &cq, 9, &opts).is_none(),
            "a sixth is refused"
        );
        drop(up);
    }

    /// What a connection's entry costs every connection, idle or not (issue 36: at
    /// most 1 KiB per connection with what the application side adds). The state of
    /// losses, gaps, waiting completions and read replies is out of line until used.
    #[test]
    fn a_connection_entry_stays_small() {
        let size = std::mem::size_of::<ConnContext>();
        assert!(size <= 512, "ConnContext {size} B (720 before)");
    }

    #[test]
    fn the_index_finds_every_number_through_collisions_removals_and_growth() {
        // Numbers of one shard (low byte 3) whose home buckets collide in runs, some
        // removed as they go (backward shift), past several growths; checked against a
        // map after every step.
        let mut ix = ConnIndex::with_capacity(4);
        let mut model = std::collections::HashMap::new();
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        for step in 0..5000usize {
            let r = next();
            if r % 3 == 0 && !model.is_empty() {
                let victim = *model.keys().nth(r as usize % model.len()).unwrap();
                assert_eq!(ix.remove(victim), model.remove(&victim));
            } else {
                // Few distinct home buckets at first: long probe runs that wrap.
                let n = ((r % 97) << 8 | (next() & 0xff_0000) << 8) | 3;
                if n != 3 && !model.contains_key(&n) {
                    ix.insert(n, step);
                    model.insert(n, step);
                }
            }
            assert_eq!(ix.len, model.len());
            if step % 97 == 0 {
                for (&n, &slot) in &model {
                    assert_eq!(ix.get(n), Some(slot), "step {step}");
                }
                assert_eq!(ix.get(0xdead_0003), model.get(&0xdead_0003).copied());
            }
        }
        assert!(ix.buckets.len() >= 2 * ix.len);
        for (&n, &slot) in &model {
            assert_eq!(ix.get(n), Some(slot));
        }
    }

    /// `locate_in` against a scan from the front, with one- and many-message requests
    /// and sequence numbers that wrap.

    #[test]
    fn locate_finds_every_message_of_the_window() {
        for (base, multi_every) in [
            (0u32, 0usize),
            (u32::MAX - 40, 0),
            (100, 7),
            (u32::MAX - 3, 3),
        ] {
            let mut q = VecDeque::new();
            let mut seq = base;
            for i in 0..200usize {
                let segments = if multi_every > 0 && i % multi_every == 1 {
                    1 + (i % 5) as u32
                } else {
                    1
                };
                q.push_back(Pending {
                    work: Work::Wr(crate::wr::Wqe::write(i as u64, Source::None, 0, 0)),
                    first_seq: seq,
                    segments,
                    seg_max: 1,
                    status: WcStatus::Success,
                    reason: None,
                    replied: false,
                });
                seq = seq.wrapping_add(segments);
            }
            let scan = |s: u32| {
                let mut off = s.wrapping_sub(base);
                for (i, p) in q.iter().enumerate() {
                    if off < p.segments {
                        return Some((i, off));
                    }
                    off -= p.segments;
                }
                None
            };
            let end = seq;
            let mut s = base.wrapping_sub(10);
            while s != end.wrapping_add(10) {
                assert_eq!(locate_in(&q, s), scan(s), "base {base} seq {s}");
                s = s.wrapping_add(1);
            }
            for _ in 0..3 {
                q.pop_front();
            }
            let front = q.front().unwrap().first_seq;
            assert_eq!(locate_in(&q, front), Some((0, 0)));
            assert_eq!(locate_in(&q, front.wrapping_sub(1)), None);
        }
        assert_eq!(locate_in(&VecDeque::new(), 5), None);
    }

    #[test]
    fn an_idle_connection_is_small() {
        // What every connection costs before it sends anything, all told (issue 11: at
        // most 1 KiB): its slot in the node's table, the state it shares with the
        // application (behind an `Arc`: two counters more), its entry in the number
        // map and in the timer heap. Queues, in-flight lists, refusal records and held
        // messages are allocated when used and given back when the connection goes
        // quiet; a secure connection's keys are behind one pointer.
        let slot = std::mem::size_of::<Option<ConnContext>>();
        let shared = std::mem::size_of::<ConnShared>() + 16;
        let map = std::mem::size_of::<(u32, usize)>() + 1;
        let timer = std::mem::size_of::<(u64, u32)>();
        let total = slot + shared + map + timer;
        assert!(slot <= 720, "Connection is {slot} B");
        // (864: the peer's identity key, version 13, is behind a pointer.)
        assert!(total <= 864, "an idle connection costs {total} B");
    }
}
