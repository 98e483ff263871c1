//! Neighbours: the next hop towards a peer, its MAC by ARP, and the node's own answers
//! to ARP requests and ICMP echo requests, sans-IO (the clock is passed in, frames go
//! out through [`Neigh::poll_transmit`]), as [`crate::cm`] is.
//!
//! What a node resolves is only where its *connect requests* go: an established
//! connection keeps the MAC its peer's frames came from ([`crate::node`] learns a new
//! one only from a frame of that connection that passed every check), so neither a
//! forged ARP reply nor a forged connect request can redirect its traffic.
//!
//! * **Next hop.** A peer inside the node's prefix is reached directly; one outside
//!   through the first route whose prefix holds it, or the gateway; with neither, the
//!   connect fails at once ([`NeighError::NoRoute`]). Prefix 0 (the default) puts
//!   every address on the link, as before routing existed.
//! * **Resolution.** A next hop's MAC is asked for by broadcast ARP request, again
//!   after [`NeighConfig::retry_us`], doubling up to 8 times that (100, 200, 400, then
//!   800 ms by default: a lost request costs little, a loaded host — 64 MPI ranks on 2
//!   cores — has 4.7 s to answer; the connect's CM timeout counts from when its request
//!   leaves), at most
//!   [`NeighConfig::tries`] times; then the
//!   connects waiting for it fail ([`Resolved::Failed`], the API's `Unresolved`
//!   error). An answer is kept [`NeighConfig::reachable_us`]; after that it is still
//!   used while it is asked for again in the background (Linux's `STALE`), and
//!   forgotten if nobody answers.
//! * **What is believed.** A reply only for an address this node asked for and
//!   addressed to this node's IP; a request for this node's IP (RFC 826's merge) and
//!   an announcement (gratuitous ARP) make or change an entry; nothing else does, and
//!   there are at most [`NeighConfig::max_entries`] (announcements make no room): a
//!   flood of ARP cannot grow the table. Static entries (a node table file,
//!   `add_node`) are never changed.
//! * **Answers.** ARP requests for the node's IPv4 address and ICMP echo requests to
//!   it are answered (so `arping` and `ping` see the node), at most
//!   [`MAX_ANSWERS`] waiting at a time (the rest are counted and dropped); other ICMP
//!   is counted and ignored. A gratuitous ARP goes out when the node starts.
//!
//! The table is shared by a device's shards ([`NeighTable`], behind a mutex taken only
//! on these slow paths): an answer any shard receives serves the connects of all.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::status::DropReason;
use crate::wire::arp::{ArpOp, ArpRepr, BROADCAST_MAC as BROADCAST};
use crate::wire::icmp::{emit_echo_reply, EchoRequest};
use crate::wire::ndp::{self, Advert, EchoRequest6, Solicit};
use crate::wire::underlay::{v4_octets, v6_octets};

/// Answers (ARP replies, echo replies) that wait to be sent at most; more are dropped
/// and counted ([`DropReason::NeighCapped`]).
pub const MAX_ANSWERS: usize = 64;

/// A route: peers inside `dest/prefix_len` are reached through `via` (on the link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination network (of the node's own address family).
    pub dest: IpAddr,
    /// Its prefix length (0 to 32 for IPv4, to 128 for IPv6).
    pub prefix_len: u8,
    /// The next hop: a router on this node's link.
    pub via: IpAddr,
}

/// How a node finds its peers' MACs, and its place on the network.
#[derive(Debug, Clone)]
pub struct NeighConfig {
    /// Resolve a peer's MAC by ARP before the first connect request (ports with a MAC
    /// of their own: af_packet, af_xdp, NICs). Off, a peer without a static entry is
    /// taken to have the MAC derived from its IP (`NodeAddr::from_ip`), as every node
    /// on a ring, null, memif or `sim` port has. Answers are given either way.
    pub resolve: bool,
    /// Prefix length of the node's address: peers inside it are on the link. 0 (the
    /// default): every address is.
    pub prefix_len: u8,
    /// The router for peers off the link and outside every route.
    pub gateway: Option<IpAddr>,
    /// Routes tried before the gateway, most specific first.
    pub routes: Vec<Route>,
    /// How long an answer is believed without asking again (Linux: 30 s).
    pub reachable_us: u64,
    /// Wait after the first request for one address; it doubles after each.
    pub retry_us: u64,
    /// Requests sent for one address before its connects fail.
    pub tries: u32,
    /// Most entries in the table (static ones included).
    pub max_entries: usize,
    /// The table, shared by the shards of one device.
    pub table: Arc<NeighTable>,
}

impl NeighConfig {
    /// The next hop from a node at `local` towards `peer`: the peer itself on the
    /// link, else its route's router or the gateway.
    /// A peer of the other address family than the node's has none.
    pub fn next_hop(&self, local: IpAddr, peer: IpAddr) -> Result<IpAddr, NeighError> {
        if local.is_ipv6() != peer.is_ipv6() {
            return Err(NeighError::NoRoute(peer));
        }
        if same_prefix(peer, local, self.prefix_len) {
            return Ok(peer);
        }
        if let Some(r) = self
            .routes
            .iter()
            .find(|r| same_prefix(peer, r.dest, r.prefix_len))
        {
            return Ok(r.via);
        }
        self.gateway
            .filter(|g| g.is_ipv6() == peer.is_ipv6())
            .ok_or(NeighError::NoRoute(peer))
    }
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            resolve: false,
            prefix_len: 0,
            gateway: None,
            routes: Vec::new(),
            reachable_us: 30_000_000,
            retry_us: 100_000,
            tries: 8,
            max_entries: 1024,
            table: Arc::new(NeighTable::default()),
        }
    }
}

/// Why a peer cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NeighError {
    /// The peer is off the link and no route or gateway leads to it.
    #[error("no route to {0}: not inside this node's prefix (or not of its address family), and no gateway or route")]
    NoRoute(IpAddr),
}

/// Where resolving a peer's next hop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Send to this MAC.
    Mac([u8; 6]),
    /// Asked; a connect request to it waits (and goes once the answer is in).
    Waiting,
    /// Nobody answered for the next hop `hop` after `tries` requests.
    Failed {
        /// The address asked for (the peer's, or its router's).
        hop: IpAddr,
        /// Requests sent.
        tries: u32,
    },
    /// No next hop at all.
    NoRoute,
}

/// Whether `a` and `b` are of one family and share their first `prefix_len` bits
/// (at most the address's length).
pub fn same_prefix(a: IpAddr, b: IpAddr, prefix_len: u8) -> bool {
    let (a, b, len) = match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (
            u128::from(u32::from(a)) << 96,
            u128::from(u32::from(b)) << 96,
            prefix_len.min(32),
        ),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), prefix_len.min(128)),
        _ => return false,
    };
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    a & mask == b & mask
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Configured: never changed, never expires.
    Static,
    /// Answered; believed until the time given.
    Reachable(u64),
    /// Asked for (first time, `mac` unknown, or again, `mac` the old answer).
    Asking,
    /// Nobody answered; forgotten at the time given (a new connect asks again then).
    Failed(u64),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: Option<[u8; 6]>,
    state: State,
    tries: u32,
    /// When its MAC was last answered or announced (0: never).
    confirmed: u64,
}

impl Entry {
    /// An answered entry is asked for anew, its MAC serving meanwhile.
    fn ask_again(&mut self) {
        self.state = State::Asking;
        self.tries = 0;
    }
}

/// The neighbour table of a device: next hop → MAC.
#[derive(Debug, Default)]
pub struct NeighTable {
    inner: Mutex<HashMap<IpAddr, Entry>>,
}

impl NeighTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Entry>> {
        // A panic while the lock was held left a consistent map (every change is
        // one insert or field store).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a static entry.
    pub fn insert_static(&self, ip: IpAddr, mac: [u8; 6]) {
        self.lock().insert(
            ip,
            Entry {
                mac: Some(mac),
                state: State::Static,
                tries: 0,
                confirmed: 0,
            },
        );
    }

    /// The MAC known for `ip`, if any (static, answered or stale).
    pub fn mac_of(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.lock().get(&ip).and_then(|e| e.mac)
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which entries a full table gives up for a new one (a failed entry first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evict {
    Nothing,
    Failed,
    /// A failed one, else any that is not static.
    Learned,
}

/// Whether `table` has room for one more entry within `max`, made by removing one
/// that `evict` allows when it is full.
fn make_room(table: &mut HashMap<IpAddr, Entry>, max: usize, evict: Evict) -> bool {
    if table.len() < max {
        return true;
    }
    let failed = |e: &Entry| matches!(e.state, State::Failed(_));
    let victim = match evict {
        Evict::Nothing => None,
        Evict::Failed => table.iter().find(|(_, e)| failed(e)),
        Evict::Learned => table.iter().find(|(_, e)| failed(e)).or_else(|| {
            table
                .iter()
                .find(|(_, e)| !matches!(e.state, State::Static))
        }),
    }
    .map(|(ip, _)| *ip);
    victim.is_some_and(|v| table.remove(&v).is_some())
}

/// What one ARP or neighbour discovery message tells about its sender.
#[derive(Debug, Clone, Copy)]
struct Heard {
    /// The sender's address and MAC.
    ip: IpAddr,
    mac: [u8; 6],
    /// It asks for this node's address (an ARP request, a solicitation).
    asks_us: bool,
    /// It announces itself to everyone (gratuitous ARP, unsolicited advertisement).
    announced: bool,
    /// It is addressed to this node (an answer to our question).
    to_us: bool,
}

/// What waits to go out.
#[derive(Debug)]
enum Out {
    /// An ARP request (a neighbour solicitation) for this address: to this MAC (a
    /// refresh of a known one: the others on the segment need not hear it), or
    /// broadcast (to the address's solicited-node multicast group).
    Ask(IpAddr, Option<[u8; 6]>),
    /// An ARP reply (a solicited neighbour advertisement) to this requester.
    Answer { mac: [u8; 6], ip: IpAddr },
    /// Our own gratuitous ARP (unsolicited neighbour advertisement to all nodes).
    Announce,
    /// An echo reply, built.
    Echo(Box<[u8]>),
}

/// Counters of a node's neighbour machine (merged into the node's `Stats`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NeighStats {
    /// ARP requests (neighbour solicitations) and replies (advertisements) sent
    /// (gratuitous ones, unsolicited advertisements, included in the requests).
    pub arp_requests_tx: u64,
    pub arp_replies_tx: u64,
    /// Next hops resolved (answers believed, changes included).
    pub resolved: u64,
    /// Echo requests answered.
    pub echo_replies_tx: u64,
}

/// A node's neighbour machine. Its config's table may be shared with other shards.
#[derive(Debug)]
pub struct Neigh {
    cfg: NeighConfig,
    /// [`NeighConfig::retry_us`] and [`NeighConfig::reachable_us`] in clock ticks.
    retry: u64,
    reachable: u64,
    ip: IpAddr,
    mac: [u8; 6],
    /// Next hops this node asks for, with when it asks next.
    asking: Vec<(IpAddr, u64)>,
    out: VecDeque<Out>,
    /// Refusals since last taken ([`Neigh::take_drops`]).
    drops: Vec<DropReason>,
    /// Next hops answered since last taken ([`Neigh::take_resolved`]).
    answered: Vec<IpAddr>,
    /// Next hops given up on since last taken ([`Neigh::take_failed`]).
    failed: Vec<(IpAddr, u32)>,
    stats: NeighStats,
}

impl Neigh {
    /// The machine of a node with address `ip` and MAC `mac`, whose clock ticks `hz`
    /// times a second. With resolution on, it announces itself (a gratuitous ARP in
    /// the first transmission).
    pub fn new(cfg: NeighConfig, ip: IpAddr, mac: [u8; 6], hz: u64) -> Neigh {
        let ticks = |us| crate::ticks::us_to_ticks(us, hz);
        let mut out = VecDeque::new();
        if cfg.resolve {
            out.push_back(Out::Announce);
        }
        Neigh {
            retry: ticks(cfg.retry_us).max(1),
            reachable: ticks(cfg.reachable_us),
            cfg,
            ip,
            mac,
            asking: Vec::new(),
            out,
            drops: Vec::new(),
            answered: Vec::new(),
            failed: Vec::new(),
            stats: NeighStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> NeighStats {
        self.stats
    }

    /// The next hop towards `peer` ([`NeighConfig::next_hop`]).
    pub fn next_hop(&self, peer: IpAddr) -> Result<IpAddr, NeighError> {
        self.cfg.next_hop(self.ip, peer)
    }

    /// Where a connect request to `peer` goes, asking for it when not known (or known
    /// but stale: the old answer serves meanwhile).
    pub fn resolve(&mut self, peer: IpAddr, now: u64) -> Resolved {
        if peer == self.ip {
            // This node itself (a switch's hairpin brings the frames back).
            return Resolved::Mac(self.mac);
        }
        let Ok(hop) = self.next_hop(peer) else {
            return Resolved::NoRoute;
        };
        let mut table = self.cfg.table.lock();
        match table.get_mut(&hop) {
            Some(Entry {
                mac: Some(mac),
                state: State::Static,
                ..
            }) => Resolved::Mac(*mac),
            Some(
                e @ Entry {
                    state: State::Reachable(_),
                    ..
                },
            ) => {
                let mac = e.mac.expect("an answered entry has a MAC");
                if let State::Reachable(until) = e.state {
                    if now >= until {
                        // Stale: still used, asked for again.
                        e.ask_again();
                        drop(table);
                        self.start_asking(hop, now);
                    }
                }
                Resolved::Mac(mac)
            }
            Some(Entry {
                state: State::Asking,
                mac,
                ..
            }) => {
                let mac = *mac;
                drop(table);
                self.start_asking(hop, now); // another shard's ask: this one follows it too
                mac.map_or(Resolved::Waiting, Resolved::Mac)
            }
            Some(Entry {
                state: State::Failed(until),
                tries,
                ..
            }) if now < *until => Resolved::Failed { hop, tries: *tries },
            _ => {
                // A connect needs it: a failed, else any learned entry makes room.
                if !table.contains_key(&hop)
                    && !make_room(&mut table, self.cfg.max_entries, Evict::Learned)
                {
                    self.drops.push(DropReason::NeighCapped);
                    return Resolved::Failed { hop, tries: 0 };
                }
                table.insert(
                    hop,
                    Entry {
                        mac: None,
                        state: State::Asking,
                        tries: 0,
                        confirmed: 0,
                    },
                );
                drop(table);
                self.start_asking(hop, now);
                Resolved::Waiting
            }
        }
    }

    /// Asks for `hop` again, its answer still used meanwhile (a connection through it
    /// stopped hearing its peer). Nothing when it is static, already asked for, or
    /// answered less than a sixth of the reachable time ago (5 s by default): every
    /// retransmission timeout of every connection through it asks this, and a loaded
    /// segment — 64 MPI ranks on 2 cores time out often — must not get a request each.
    /// A `stalled` connection (several timeouts in a row, its retries running out
    /// within seconds) waits a thirtieth (1 s) only: a router whose MAC changed must be
    /// found before the connection gives up.
    pub fn refresh(&mut self, hop: IpAddr, now: u64, stalled: bool) {
        let mut table = self.cfg.table.lock();
        let quiet = if stalled {
            self.reachable / 30
        } else {
            self.reachable / 6
        };
        let recent = now.saturating_sub(quiet);
        if let Some(
            e @ Entry {
                state: State::Reachable(_),
                ..
            },
        ) = table.get_mut(&hop)
        {
            if e.confirmed > recent {
                return;
            }
            e.ask_again();
            drop(table);
            self.start_asking(hop, now);
        }
    }

    /// This node asks for `hop` (now, unless it already does).
    fn start_asking(&mut self, hop: IpAddr, now: u64) {
        if self.asking.iter().any(|a| a.0 == hop) {
            return;
        }
        self.asking.push((hop, now));
    }

    /// When [`Neigh::handle_timeout`] is next due.
    pub fn next_timeout(&self) -> u64 {
        self.asking.iter().map(|a| a.1).min().unwrap_or(u64::MAX)
    }

    /// Sends the requests due and gives up on the next hops asked for often enough.
    pub fn handle_timeout(&mut self, now: u64) {
        let mut i = 0;
        while i < self.asking.len() {
            let (hop, at) = self.asking[i];
            if at > now {
                i += 1;
                continue;
            }
            let mut table = self.cfg.table.lock();
            let Some(e) = table.get_mut(&hop) else {
                self.asking.swap_remove(i);
                continue;
            };
            match e.state {
                State::Asking if e.tries < self.cfg.tries => {
                    e.tries += 1;
                    // A refresh asks the known MAC first (as Linux's unicast probes),
                    // everyone after that (the node may have moved).
                    let to = e.mac.filter(|_| e.tries <= 2);
                    self.out.push_back(Out::Ask(hop, to));
                    // Backing off: the wait doubles with every request, up to 8 times
                    // the first.
                    self.asking[i].1 = now + (self.retry << (e.tries - 1).min(3));
                    i += 1;
                }
                State::Asking if e.mac.is_some() => {
                    // A refresh nobody answered: the node may only be too busy to
                    // (64 MPI ranks on 2 cores). Its last answer keeps serving — a
                    // connect to a MAC that moved fails at its CM timeout instead — and
                    // it is asked again no sooner than a refresh may be.
                    e.state = State::Reachable(now + self.reachable / 6);
                    e.confirmed = now;
                    e.tries = 0;
                    self.asking.swap_remove(i);
                }
                State::Asking => {
                    // Nobody answered: the connects waiting for it fail.
                    let tries = e.tries;
                    e.state = State::Failed(now + self.retry);
                    self.failed.push((hop, tries));
                    self.asking.swap_remove(i);
                }
                // Answered (or made static) meanwhile, maybe through another shard.
                _ => {
                    if !matches!(e.state, State::Failed(_)) {
                        self.answered.push(hop);
                    }
                    self.asking.swap_remove(i);
                }
            }
        }
    }

    /// An ARP frame received (its decoding already checked).
    pub fn handle_arp(&mut self, arp: &ArpRepr, now: u64) {
        let (sender, target) = (IpAddr::from(arp.sender_ip), IpAddr::from(arp.target_ip));
        let announced = arp.is_gratuitous();
        self.heard(
            Heard {
                ip: sender,
                mac: arp.sender_mac,
                asks_us: arp.op == ArpOp::Request && target == self.ip && !announced,
                announced,
                to_us: target == self.ip,
            },
            now,
        );
    }

    /// A neighbour solicitation received (its decoding already checked): one for
    /// this node's address is answered (a solicited advertisement to the asker), and
    /// the asker's link-layer address merged as an ARP request's is. Duplicate address
    /// detection for our address (from the unspecified address) is answered with an
    /// announcement to all nodes.
    pub fn handle_solicit(&mut self, ns: &Solicit, now: u64) {
        let target = IpAddr::from(ns.target);
        if ns.src_ip == [0; 16] {
            if target == self.ip && self.queue_room() {
                self.out.push_back(Out::Announce);
            }
            return;
        }
        let asks_us = target == self.ip;
        let Some(mac) = ns.sender_mac else {
            // No link-layer address to answer or learn: an asker that knows ours
            // (a unicast refresh) gets its answer at the frame's source.
            if asks_us && self.queue_room() {
                self.out.push_back(Out::Answer {
                    mac: ns.src_mac,
                    ip: IpAddr::from(ns.src_ip),
                });
            }
            return;
        };
        self.heard(
            Heard {
                ip: IpAddr::from(ns.src_ip),
                mac,
                asks_us,
                announced: false,
                to_us: asks_us,
            },
            now,
        );
    }

    /// A neighbour advertisement received (its decoding already checked): a solicited
    /// one to this node answers its question, an unsolicited one is an announcement.
    pub fn handle_advert(&mut self, na: &Advert, now: u64) {
        let Some(mac) = na.target_mac else {
            // Without its link-layer address it tells nothing a table keeps.
            return self.drops.push(DropReason::Unsolicited);
        };
        self.heard(
            Heard {
                ip: IpAddr::from(na.target),
                mac,
                asks_us: false,
                announced: !na.solicited,
                to_us: na.solicited && IpAddr::from(na.dst_ip) == self.ip,
            },
            now,
        );
    }

    /// Whether an answer may be queued; counts the refusal when not.
    fn queue_room(&mut self) -> bool {
        if self.out.len() >= MAX_ANSWERS {
            self.drops.push(DropReason::NeighCapped);
            return false;
        }
        true
    }

    /// What an ARP or neighbour discovery message says, believed as the module's
    /// documentation tells.
    fn heard(&mut self, h: Heard, now: u64) {
        if h.ip == self.ip {
            // Our own announcement looped back, or another node claims our address:
            // nothing to learn either way.
            return self.drops.push(DropReason::Unsolicited);
        }
        if h.asks_us && self.queue_room() {
            self.out.push_back(Out::Answer {
                mac: h.mac,
                ip: h.ip,
            });
        }
        let mut table = self.cfg.table.lock();
        if (h.asks_us || h.announced) && !table.contains_key(&h.ip) {
            // RFC 826's merge: a node asking for us is about to talk to us, and we
            // to it (an all-to-all resolves each pair once, not twice); a node that
            // announces itself at start (as every deposit node does) saves each of
            // its peers a broadcast — 64 ranks of a job that each ask for all the
            // others flood the segment with 4 032 requests and more, and a host
            // whose receive ring overflows drops answers with them. Only within the
            // table's size: an announcement makes no room, a request for us may
            // evict a failed entry.
            let evict = if h.announced {
                Evict::Nothing
            } else {
                Evict::Failed
            };
            if !make_room(&mut table, self.cfg.max_entries, evict) {
                return self.drops.push(DropReason::NeighCapped);
            }
            table.insert(
                h.ip,
                Entry {
                    mac: Some(h.mac),
                    state: State::Reachable(now + self.reachable),
                    tries: 0,
                    confirmed: now,
                },
            );
            return;
        }
        let Some(e) = table.get_mut(&h.ip) else {
            // Not asked for: learned from nothing but this frame, so not kept.
            if !h.asks_us {
                self.drops.push(DropReason::Unsolicited);
            }
            return;
        };
        match e.state {
            State::Static => {}
            // Asked for: the answer, the peer's own request for us, or its announcement
            // (a node that comes up after we first asked: the 64th rank of a job).
            State::Asking if h.to_us || h.announced => {
                e.mac = Some(h.mac);
                e.state = State::Reachable(now + self.reachable);
                e.tries = 0;
                e.confirmed = now;
                drop(table);
                self.stats.resolved += 1;
                self.answered.push(h.ip);
                self.asking.retain(|a| a.0 != h.ip);
            }
            // A node we know tells its MAC again: a change is noted for the next
            // connect (established connections follow their peer's own checked frames
            // only).
            State::Reachable(_) => {
                if e.mac != Some(h.mac) {
                    e.mac = Some(h.mac);
                    self.stats.resolved += 1;
                }
                e.state = State::Reachable(now + self.reachable);
                e.confirmed = now;
            }
            State::Asking | State::Failed(_) => {
                drop(table);
                if !h.asks_us {
                    self.drops.push(DropReason::Unsolicited);
                }
            }
        }
    }

    /// An ICMP echo request to this node: answered.
    pub fn handle_echo(&mut self, req: &EchoRequest<'_>) {
        let (mac, ip) = (self.mac, v4_octets(self.ip));
        self.answer_echo(req.data.len(), |buf| emit_echo_reply(req, mac, ip, buf));
    }

    /// An ICMPv6 echo request to this node: answered.
    pub fn handle_echo6(&mut self, req: &EchoRequest6<'_>) {
        let (mac, ip) = (self.mac, v6_octets(self.ip));
        self.answer_echo(req.data.len(), |buf| {
            ndp::emit_echo_reply6(req, mac, ip, buf)
        });
    }

    /// Queues the echo reply `emit` writes (of `data` bytes of echo data).
    fn answer_echo(
        &mut self,
        data: usize,
        emit: impl FnOnce(&mut [u8]) -> Result<usize, crate::wire::WireError>,
    ) {
        if !self.queue_room() {
            return;
        }
        let mut buf = vec![0u8; data + 128];
        match emit(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                self.out.push_back(Out::Echo(buf.into_boxed_slice()));
            }
            Err(_) => self.drops.push(DropReason::BadNeighbour),
        }
    }

    /// Whether frames wait to go out.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Writes the next frame into `buf` (at least 90 bytes; an echo reply needs its
    /// request's size) and returns its length; `None` when nothing waits. A frame
    /// that does not fit is dropped and counted.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            let o = self.out.pop_front()?;
            let written = match o {
                Out::Ask(ip, to) => {
                    self.stats.arp_requests_tx += 1;
                    self.emit_ask(ip, to, buf)
                }
                Out::Announce => {
                    self.stats.arp_requests_tx += 1;
                    match self.ip {
                        IpAddr::V4(me) => ArpRepr::gratuitous(self.mac, me.octets())
                            .emit(BROADCAST, self.mac, buf),
                        IpAddr::V6(me) => ndp::emit_advert(self.mac, me.octets(), None, buf),
                    }
                }
                Out::Answer { mac, ip } => {
                    self.stats.arp_replies_tx += 1;
                    self.emit_answer(mac, ip, buf)
                }
                Out::Echo(frame) => match buf.get_mut(..frame.len()) {
                    Some(b) => {
                        b.copy_from_slice(&frame);
                        self.stats.echo_replies_tx += 1;
                        Ok(frame.len())
                    }
                    None => Err(crate::wire::WireError::BufferTooSmall {
                        needed: frame.len(),
                        got: buf.len(),
                    }),
                },
            };
            match written {
                Ok(n) => return Some(n),
                Err(_) => self.drops.push(DropReason::NeighCapped),
            }
        }
    }

    /// An ARP request or neighbour solicitation for `ip`, to `to` or everyone.
    fn emit_ask(
        &self,
        ip: IpAddr,
        to: Option<[u8; 6]>,
        buf: &mut [u8],
    ) -> Result<usize, crate::wire::WireError> {
        match ip {
            IpAddr::V4(target) => ArpRepr::request(self.mac, v4_octets(self.ip), target.octets())
                .emit(to.unwrap_or(BROADCAST), self.mac, buf),
            IpAddr::V6(target) => {
                ndp::emit_solicit(self.mac, v6_octets(self.ip), target.octets(), to, buf)
            }
        }
    }

    /// An ARP reply or solicited neighbour advertisement to the asker at `mac`/`ip`.
    fn emit_answer(
        &self,
        mac: [u8; 6],
        ip: IpAddr,
        buf: &mut [u8],
    ) -> Result<usize, crate::wire::WireError> {
        match ip {
            IpAddr::V4(asker) => {
                let req = ArpRepr {
                    op: ArpOp::Request,
                    sender_mac: mac,
                    sender_ip: asker.octets(),
                    target_mac: [0; 6],
                    target_ip: v4_octets(self.ip),
                };
                req.reply_to(self.mac).emit(mac, self.mac, buf)
            }
            IpAddr::V6(asker) => ndp::emit_advert(
                self.mac,
                v6_octets(self.ip),
                Some((mac, asker.octets())),
                buf,
            ),
        }
    }

    /// Refusals since the last call, for the node's counters.
    pub fn take_drops(&mut self) -> impl Iterator<Item = DropReason> + '_ {
        self.drops.drain(..)
    }

    /// Next hops answered since the last call: connect requests waiting for them go.
    pub fn take_resolved(&mut self) -> Vec<IpAddr> {
        std::mem::take(&mut self.answered)
    }

    /// Next hops given up on since the last call, with the requests sent: the
    /// connects waiting for them fail.
    pub fn take_failed(&mut self) -> Vec<(IpAddr, u32)> {
        std::mem::take(&mut self.failed)
    }

    /// Whether anything was answered, given up on or refused since last taken.
    pub fn has_news(&self) -> bool {
        !(self.answered.is_empty() && self.failed.is_empty() && self.drops.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: [u8; 4]) -> IpAddr {
        a.into()
    }

    const ME: [u8; 4] = [10, 1, 0, 2];
    const MY_MAC: [u8; 6] = [0x52, 0, 0, 0, 0, 2];
    const PEER: [u8; 4] = [10, 1, 0, 3];
    const PEER_MAC: [u8; 6] = [0x52, 0, 0, 0, 0, 3];
    const GW: [u8; 4] = [10, 1, 0, 1];
    /// One tick per microsecond.
    const HZ: u64 = 1_000_000;

    fn neigh(cfg: NeighConfig) -> Neigh {
        let mut n = Neigh::new(cfg, ip(ME), MY_MAC, HZ);
        n.out.clear(); // the announcement
        n
    }

    fn resolving() -> NeighConfig {
        NeighConfig {
            resolve: true,
            prefix_len: 24,
            gateway: Some(ip(GW)),
            ..NeighConfig::default()
        }
    }

    /// Every frame waiting, decoded as ARP.
    fn sent(n: &mut Neigh) -> Vec<(ArpRepr, [u8; 6])> {
        let mut buf = [0u8; 1514];
        let mut out = Vec::new();
        while let Some(len) = n.poll_transmit(&mut buf) {
            let dst: [u8; 6] = buf[..6].try_into().unwrap();
            out.push((ArpRepr::parse(&buf[..len]).expect("ARP"), dst));
        }
        out
    }

    fn reply(from_ip: [u8; 4], from_mac: [u8; 6]) -> ArpRepr {
        ArpRepr::request(MY_MAC, ME, from_ip).reply_to(from_mac)
    }

    #[test]
    fn next_hops_follow_prefix_routes_and_gateway() {
        let mut cfg = resolving();
        cfg.routes.push(Route {
            dest: ip([192, 168, 0, 0]),
            prefix_len: 16,
            via: ip([10, 1, 0, 254]),
        });
        let n = neigh(cfg);
        assert_eq!(n.next_hop(ip(PEER)), Ok(ip(PEER)), "on the link");
        assert_eq!(
            n.next_hop(ip([192, 168, 7, 1])),
            Ok(ip([10, 1, 0, 254])),
            "a route"
        );
        assert_eq!(n.next_hop(ip([10, 2, 0, 9])), Ok(ip(GW)), "the gateway");
        let lonely = neigh(NeighConfig {
            prefix_len: 24,
            ..NeighConfig::default()
        });
        assert_eq!(
            lonely.next_hop(ip([10, 2, 0, 9])),
            Err(NeighError::NoRoute(ip([10, 2, 0, 9])))
        );
        let flat = neigh(NeighConfig::default());
        assert_eq!(
            flat.next_hop(ip([8, 8, 8, 8])),
            Ok(ip([8, 8, 8, 8])),
            "prefix 0: all on the link"
        );
        assert!(
            same_prefix([10, 1, 0, 200].into(), ME.into(), 24)
                && !same_prefix([10, 1, 1, 2].into(), ME.into(), 24)
        );
        assert!(
            same_prefix([1, 2, 3, 4].into(), ME.into(), 0)
                && !same_prefix([10, 1, 0, 3].into(), ME.into(), 32)
        );
    }

    #[test]
    fn a_peer_is_asked_for_answered_and_remembered() {
        let mut n = neigh(resolving());
        assert_eq!(n.resolve(ip(PEER), 0), Resolved::Waiting);
        n.handle_timeout(0);
        let out = sent(&mut n);
        assert_eq!(out.len(), 1);
        let (req, dst) = out[0];
        assert_eq!(dst, BROADCAST);
        assert_eq!(
            (req.op, req.target_ip, req.sender_ip, req.sender_mac),
            (ArpOp::Request, PEER, ME, MY_MAC)
        );
        n.handle_arp(&reply(PEER, PEER_MAC), 10);
        assert_eq!(n.take_resolved(), vec![ip(PEER)]);
        assert_eq!(n.resolve(ip(PEER), 20), Resolved::Mac(PEER_MAC));
        assert_eq!(n.next_timeout(), u64::MAX, "nothing more to ask");
        assert_eq!(n.stats().resolved, 1);
        // Off the link: the gateway is asked for, and serves every peer behind it.
        assert_eq!(n.resolve(ip([10, 9, 9, 9]), 30), Resolved::Waiting);
        n.handle_timeout(30);
        assert_eq!(sent(&mut n)[0].0.target_ip, GW);
        n.handle_arp(&reply(GW, [0x52, 0, 0, 0, 0, 1]), 40);
        assert_eq!(
            n.resolve(ip([10, 7, 7, 7]), 50),
            Resolved::Mac([0x52, 0, 0, 0, 0, 1])
        );
    }

    #[test]
    fn a_refresh_waits_5_s_after_an_answer_and_1_s_for_a_stalled_connection() {
        let mut n = neigh(resolving());
        assert_eq!(n.resolve(ip(PEER), 0), Resolved::Waiting);
        n.handle_timeout(0);
        sent(&mut n);
        n.handle_arp(&reply(PEER, PEER_MAC), 10);
        let s = HZ;
        n.refresh(ip(PEER), 2 * s, false);
        n.handle_timeout(2 * s);
        assert!(sent(&mut n).is_empty(), "answered 2 s ago");
        n.refresh(ip(PEER), 2 * s, true);
        n.handle_timeout(2 * s);
        let out = sent(&mut n);
        assert_eq!(out.len(), 1, "a stalled connection asks after 1 s");
        assert_eq!(out[0].1, PEER_MAC, "to the known MAC first");
        n.handle_arp(&reply(PEER, PEER_MAC), 2 * s + 10);
        n.refresh(ip(PEER), 2 * s + s / 2, true);
        n.handle_timeout(2 * s + s / 2);
        assert!(sent(&mut n).is_empty(), "not twice within a second");
        n.refresh(ip(PEER), 8 * s, false);
        n.handle_timeout(8 * s);
        assert_eq!(sent(&mut n).len(), 1, "5 s after the last answer");
    }

    #[test]
    fn an_unanswered_peer_fails_after_the_tries_and_is_asked_again_later() {
        let mut n = neigh(resolving());
        let retry = n.retry;
        assert_eq!(n.resolve(ip(PEER), 0), Resolved::Waiting);
        let mut t = 0;
        for k in 0..8 {
            n.handle_timeout(t);
            assert_eq!(sent(&mut n).len(), 1, "request {k}");
            let wait = retry << k.min(3);
            assert_eq!(n.next_timeout(), t + wait, "backing off");
            n.handle_timeout(n.next_timeout() - 1);
            assert!(sent(&mut n).is_empty(), "not before its time");
            t += wait;
        }
        assert!(
            n.take_failed().is_empty(),
            "the last try still has its wait"
        );
        n.handle_timeout(t);
        assert!(sent(&mut n).is_empty());
        assert_eq!(n.take_failed(), vec![(ip(PEER), 8)]);
        assert_eq!(t, 47 * retry, "100 + 200 + 400 + 5 x 800 ms by default");
        assert_eq!(
            n.resolve(ip(PEER), t + 1),
            Resolved::Failed {
                hop: ip(PEER),
                tries: 8
            }
        );
        // After a retry period, a new connect asks again.
        assert_eq!(n.resolve(ip(PEER), t + retry), Resolved::Waiting);
    }

    #[test]
    fn what_nobody_asked_for_is_not_learned_and_the_table_stays_bounded() {
        let mut n = neigh(NeighConfig {
            max_entries: 4,
            ..resolving()
        });
        // Forged replies and announcements for addresses never asked for.
        for i in 0..100u8 {
            n.handle_arp(&reply([10, 1, 0, 100 + i], [0x66, 0, 0, 0, 0, i]), 0);
        }
        assert!(n.config().table.is_empty(), "replies nobody asked for");
        assert_eq!(
            n.take_drops()
                .filter(|&d| d == DropReason::Unsolicited)
                .count(),
            100
        );
        // Announcements are learned, but only up to the table's size.
        for i in 0..100u8 {
            n.handle_arp(
                &ArpRepr::gratuitous([0x66, 1, 0, 0, 0, i], [10, 1, 1, i]),
                0,
            );
        }
        assert_eq!(n.config().table.len(), 4);
        assert_eq!(
            n.take_drops()
                .filter(|&d| d == DropReason::NeighCapped)
                .count(),
            96
        );
        n.config().table.inner.lock().unwrap().clear();
        // Resolutions make entries up to the cap; older ones make room.
        for i in 0..10u8 {
            let _ = n.resolve(ip([10, 1, 0, 10 + i]), 0);
        }
        assert_eq!(n.config().table.len(), 4);
        // A claim to be this node teaches nothing.
        n.handle_arp(&ArpRepr::gratuitous([0x66; 6], ME), 0);
        assert_eq!(n.take_drops().count(), 1);
    }

    #[test]
    fn a_question_is_answered_by_a_reply_a_request_for_us_or_an_announcement() {
        let mut n = neigh(resolving());
        assert_eq!(n.resolve(ip(PEER), 0), Resolved::Waiting);
        // A reply to someone else is no answer.
        let to_other =
            ArpRepr::request([0x52, 9, 9, 9, 9, 9], [10, 1, 0, 9], PEER).reply_to([0x66; 6]);
        n.handle_arp(&to_other, 1);
        assert_eq!(n.resolve(ip(PEER), 2), Resolved::Waiting);
        assert_eq!(
            n.take_drops().collect::<Vec<_>>(),
            vec![DropReason::Unsolicited]
        );
        // A peer that comes up announces itself: that answers.
        n.handle_arp(&ArpRepr::gratuitous(PEER_MAC, PEER), 2);
        assert_eq!(n.resolve(ip(PEER), 3), Resolved::Mac(PEER_MAC));
        let mut n = neigh(resolving());
        assert_eq!(n.resolve(ip(PEER), 0), Resolved::Waiting);
        // The peer's own request for us says where it is.
        n.handle_arp(&ArpRepr::request(PEER_MAC, PEER, ME), 3);
        assert_eq!(n.resolve(ip(PEER), 4), Resolved::Mac(PEER_MAC));
    }

    #[test]
    fn a_known_peer_that_moves_is_followed_and_a_static_one_is_not() {
        let mut n = neigh(resolving());
        let _ = n.resolve(ip(PEER), 0);
        n.handle_arp(&reply(PEER, PEER_MAC), 1);
        let moved = [0x52, 9, 9, 9, 9, 3];
        n.handle_arp(&ArpRepr::gratuitous(moved, PEER), 2);
        assert_eq!(n.resolve(ip(PEER), 3), Resolved::Mac(moved));
        let fixed = [0x52, 7, 7, 7, 7, 7];
        n.config().table.insert_static([10, 1, 0, 7].into(), fixed);
        n.handle_arp(&ArpRepr::gratuitous([0x66; 6], [10, 1, 0, 7]), 4);
        assert_eq!(n.resolve(ip([10, 1, 0, 7]), 5), Resolved::Mac(fixed));
    }

    #[test]
    fn a_stale_answer_serves_while_it_is_asked_for_again() {
        let mut n = neigh(resolving());
        let reachable = n.reachable;
        let _ = n.resolve(ip(PEER), 0);
        n.handle_timeout(0);
        sent(&mut n);
        n.handle_arp(&reply(PEER, PEER_MAC), 0);
        assert_eq!(
            n.resolve(ip(PEER), reachable + 1),
            Resolved::Mac(PEER_MAC),
            "stale, still used"
        );
        n.handle_timeout(reachable + 1);
        assert_eq!(sent(&mut n).len(), 1, "asked again");
        let moved = [0x52, 1, 1, 1, 1, 1];
        n.handle_arp(&reply(PEER, moved), reachable + 2);
        assert_eq!(n.resolve(ip(PEER), reachable + 3), Resolved::Mac(moved));
    }

    #[test]
    fn an_unanswered_refresh_keeps_the_last_answer() {
        let mut n = neigh(resolving());
        let (reachable, retry) = (n.reachable, n.retry);
        let _ = n.resolve(ip(PEER), 0);
        n.handle_timeout(0);
        sent(&mut n);
        n.handle_arp(&reply(PEER, PEER_MAC), 0);
        let mut t = reachable + 1;
        assert_eq!(n.resolve(ip(PEER), t), Resolved::Mac(PEER_MAC));
        let mut asked = Vec::new();
        while n.next_timeout() != u64::MAX {
            t = n.next_timeout();
            n.handle_timeout(t);
            asked.extend(sent(&mut n).into_iter().map(|(_, dst)| dst));
        }
        assert_eq!(asked.len(), 8);
        assert_eq!(&asked[..2], &[PEER_MAC; 2], "the known MAC asked first");
        assert!(asked[2..].iter().all(|&d| d == BROADCAST), "then everyone");
        assert!(n.take_failed().is_empty(), "no connect waited for it");
        assert_eq!(
            n.resolve(ip(PEER), t + retry),
            Resolved::Mac(PEER_MAC),
            "still served"
        );
        assert_eq!(n.next_timeout(), u64::MAX, "and not asked again at once");
    }

    #[test]
    fn requests_for_this_node_are_answered_up_to_the_cap() {
        let mut n = neigh(NeighConfig::default());
        let asker = [0x52, 5, 5, 5, 5, 5];
        n.handle_arp(&ArpRepr::request(asker, PEER, ME), 0);
        n.handle_arp(&ArpRepr::request(asker, PEER, [10, 1, 0, 99]), 0); // not us
        let out = sent(&mut n);
        assert_eq!(out.len(), 1);
        let (rep, dst) = out[0];
        assert_eq!(dst, asker);
        assert_eq!(
            (
                rep.op,
                rep.sender_ip,
                rep.sender_mac,
                rep.target_ip,
                rep.target_mac
            ),
            (ArpOp::Reply, ME, MY_MAC, PEER, asker)
        );
        for _ in 0..MAX_ANSWERS + 10 {
            n.handle_arp(&ArpRepr::request(asker, PEER, ME), 0);
        }
        assert_eq!(
            n.take_drops()
                .filter(|&d| d == DropReason::NeighCapped)
                .count(),
            10
        );
        assert_eq!(sent(&mut n).len(), MAX_ANSWERS);
        assert_eq!(n.stats().arp_replies_tx, 1 + MAX_ANSWERS as u64);
    }

    #[test]
    fn shards_share_what_any_of_them_hears() {
        let cfg = resolving();
        let mut a = neigh(cfg.clone());
        let mut b = neigh(cfg);
        assert_eq!(b.resolve(PEER.into(), 0), Resolved::Waiting);
        assert_eq!(
            a.resolve(PEER.into(), 0),
            Resolved::Waiting,
            "asked by b: a waits too"
        );
        b.handle_timeout(0);
        assert_eq!(sent(&mut b).len(), 1);
        a.handle_arp(&reply(PEER, PEER_MAC), 5); // the reply reaches shard a
        assert_eq!(b.resolve(PEER.into(), 6), Resolved::Mac(PEER_MAC));
        // b notices at its next retry (its connect requests' own retries, every CM
        // retry period, find the MAC sooner).
        b.handle_timeout(b.retry);
        assert_eq!(b.take_resolved(), vec![ip(PEER)], "b's waiting connects go");
        assert!(sent(&mut b).is_empty());
    }

    #[test]
    fn resolution_off_still_answers_and_announces_only_when_on() {
        let on = Neigh::new(resolving(), ME.into(), MY_MAC, HZ);
        assert!(on.has_output(), "a gratuitous ARP at start");
        let off = Neigh::new(NeighConfig::default(), ME.into(), MY_MAC, HZ);
        assert!(!off.has_output());
    }
}
