//! A node's counters, defined once: the worker writes them, `deposit::DeviceStats` is
//! this type, and everything that lists counters by name (DPDK telemetry, `ddperf
//! --stats`) walks [`Stats::each`], so a counter added to the list shows everywhere.

use crate::status::DropReason;
use crate::tlb::TlbStats;

/// Declares the summed counters once: the fields, `Stats::merge` and `Stats::each`.
macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident, )*) => {
        /// Counters of one node, or of a device (its shards' summed on read). Plain
        /// integers: only the node writes them.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Stats {
            $( $(#[$doc])* pub $name: u64, )*
            /// Mbufs of the port's pool not free when the counters were read (the
            /// port's, counted once for a device), and of those, the ones the shards'
            /// port handles allocated ahead (not in use: [`Self::mbufs_used`]
            /// subtracts them).
            pub mbufs_in_use: u64,
            pub mbufs_stashed: u64,
            /// Refusals by reason, indexed by [`DropReason`] (see [`Self::dropped`]).
            pub drops: [u64; DropReason::COUNT],
            /// Address translations of the worker's TLB.
            pub tlb: TlbStats,
        }

        impl Default for Stats {
            fn default() -> Self {
                Stats {
                    $( $name: 0, )*
                    mbufs_in_use: 0,
                    mbufs_stashed: 0,
                    drops: [0; DropReason::COUNT],
                    tlb: TlbStats::default(),
                }
            }
        }

        impl Stats {
            /// Adds another shard's counters to these (the mbufs in use are the
            /// port's, counted once).
            pub fn merge(&mut self, o: &Stats) {
                $( self.$name += o.$name; )*
                self.mbufs_in_use = self.mbufs_in_use.max(o.mbufs_in_use);
                self.mbufs_stashed += o.mbufs_stashed;
                for (d, s) in self.drops.iter_mut().zip(o.drops.iter()) {
                    *d += s;
                }
                self.tlb.hits += o.tlb.hits;
                self.tlb.misses += o.tlb.misses;
                self.tlb.faults += o.tlb.faults;
            }

            /// Every counter by name, in declaration order: the summed ones, then
            /// `mbufs_used`, `tlb_hits`, `tlb_misses`, `tlb_faults` and `drops` (the
            /// total; [`Self::drops`] has them by reason).
            pub fn each(&self, mut f: impl FnMut(&'static str, u64)) {
                $( f(stringify!($name), self.$name); )*
                f("mbufs_used", self.mbufs_used());
                f("tlb_hits", self.tlb.hits);
                f("tlb_misses", self.tlb.misses);
                f("tlb_faults", self.tlb.faults);
                f("drops", self.dropped_total());
            }
        }
    };
}

counters! {
    /// Frames received.
    frames_rx,
    /// Of those, frames taken from the high-priority queue.
    frames_rx_high,
    /// Low-priority sending cut short for high-priority work (posted or arrived).
    low_yields,
    /// Frames sent.
    frames_tx,
    /// Cells (messages and acknowledgement cells) received and sent.
    cells_rx,
    cells_tx,
    /// Frame bytes received / sent (Ethernet header to CRC trailer).
    bytes_rx,
    bytes_tx,
    /// Payload bytes of the messages sent (first transmissions and retransmissions).
    bytes_payload_tx,
    /// Messages taken in order and run here: deposited, or refused (the drops say
    /// why).
    msgs_rx,
    /// Messages sent (first transmissions and retransmissions).
    msgs_tx,
    /// Payload bytes deposited into local endpoints.
    bytes_deposited,
    /// Acknowledgements and negative acknowledgements sent; NAKs received.
    acks_tx,
    naks_tx,
    naks_rx,
    /// Of the acknowledgements sent, those that reported how long they were held
    /// (`wire::op::HOLD`: at least `wire::HOLD_MIN_NS` after the newest frame they
    /// acknowledge arrived).
    acks_held,
    /// Messages sent again.
    retransmits,
    /// Payload bytes of the messages sent again.
    bytes_retransmitted,
    /// Retransmission timer expiries.
    timeouts,
    /// Naps of the dedicated worker that a post, a control call or a frame doorbell
    /// ended before their deadline (see `deposit::Progress`).
    worker_woken,
    /// Liveness probes sent to silent idle peers, and connections failed because the
    /// peer stayed silent (half-open).
    keepalive_probes,
    keepalive_failures,
    /// Connections accepted here whose peer never finished the handshake (sent no
    /// frame of them) within a CM timeout: removed.
    handshakes_expired,
    /// Messages kept because they arrived ahead of a gap.
    reordered,
    /// Of those, segments placed on arrival (no copy kept).
    placed_ahead,
    /// Messages that arrived again (already executed: acknowledged, not run).
    duplicates,
    /// Events posted to endpoint event queues.
    events,
    /// Replies (read data, atomic old values) sent.
    replies_tx,
    /// Messages held for the host to repair (page not present, event queue full).
    faults,
    /// Receiver-not-ready NAKs received (the peer was exceptioned).
    rnr_rx,
    /// Times the link could not take every frame (back-pressure).
    tx_stalls,
    /// Posted work requests whose connection went before the worker took them (a post
    /// that raced the close): each completes `Flushed` on the connection's completion
    /// queue (waiting for room there, as any completion does).
    posts_orphaned,
    /// Sections sent in a frame after its first: messages or acknowledgements of another
    /// connection to the same peer that shared the frame (cell trains across
    /// connections).
    sections_tx,
    /// Frames that carried a payload by reference to endpoint memory instead of a copy
    /// (ports that copy frames as they send them: memif, af_packet).
    payloads_by_reference,
    /// Connect requests answered with a challenge (a cookie to echo) instead of a
    /// connection: every first request, and every one whose cookie did not check.
    cm_challenges,
    /// Sections sealed and opened on secure connections (`crate::secure`); refusals of
    /// sealed sections are the drops `auth_failed`, `replayed` and `not_sealed`.
    sealed_tx,
    opened_rx,
    /// Key generations the sending directions of secure connections moved on.
    rekeys,
    /// ARP requests sent (resolving next hops, and the node's announcement) and ARP
    /// replies sent (answering requests for the node's address) (`crate::neigh`).
    arp_requests_tx,
    arp_replies_tx,
    /// Next hops whose MAC an ARP answer gave or changed.
    neigh_resolved,
    /// ICMP echo requests answered (`ping`).
    echo_replies_tx,
    /// Connections whose peer's frames, checked, came from a new MAC (the peer's port
    /// or its router changed): the connection sends there from then on.
    peer_mac_changes,
    /// Liveness probes sent, after a retransmission timeout, to the MAC the neighbour
    /// table has for a connection's next hop when it is not the one the connection
    /// sends to: its peer's answer from there moves the connection.
    path_probes,
    /// Frames a shard received on its queue and handed to the shard that owns their
    /// connection (software dispatch, or a queue the port's hashing chose).
    frames_forwarded,
    /// Data frames that arrived marked CE (congestion experienced: a switch queue past
    /// its ECN threshold) on a connection.
    ce_rx,
    /// Acknowledgements that came back with ECE: the peer saw CE on our data frames.
    ecn_echoes_rx,
    /// Frames a connection sent past its peer's shut congestion window when its
    /// persist timer fired (nothing of its own had been on the wire for a
    /// retransmission timeout).
    cc_persists,
    /// Loss timer expiries over sprayed paths (`CcConfig::paths`): holes that waited
    /// on their paths' round trips and were then found lost.
    lost_by_time,
}

impl Stats {
    /// Mbufs of the port's pool in use: those not free less those allocated ahead (a
    /// leak check: back to its starting value when the traffic is over).
    pub fn mbufs_used(&self) -> u64 {
        self.mbufs_in_use.saturating_sub(self.mbufs_stashed)
    }

    /// A frame section carried `sent` messages (`resent` of them retransmissions, of
    /// `resent_bytes`) of `bytes` payload bytes.
    #[inline]
    pub(crate) fn count_sent(&mut self, sent: u32, bytes: u64, resent: u32, resent_bytes: u64) {
        self.msgs_tx += u64::from(sent);
        self.retransmits += u64::from(resent);
        self.bytes_retransmitted += resent_bytes;
        self.bytes_payload_tx += bytes;
    }

    /// Counts a refusal.
    #[inline]
    pub(crate) fn drop_for(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }

    /// Refusals of one reason.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }

    /// All refusals.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// The reasons with a refusal, and their counts.
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .zip(self.drops)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (*r, n))
    }
}
