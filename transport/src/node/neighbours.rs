//! The node's side of `crate::neigh`: frames that are not the transport's (ARP, ICMP,
//! ICMPv6) to the neighbour machine, its answers onto the link, and the connect
//! requests that wait for a next hop's MAC sent, or failed, when it is known.

use std::net::IpAddr;

use crate::cm::RejectReason;
use crate::neigh::Resolved;
use crate::status::DropReason;
use crate::tables::NodeAddr;
use crate::wire::arp::ArpRepr;
use crate::wire::icmp::{parse_echo_request, Icmp};
use crate::wire::ndp::{parse_icmpv6, Icmpv6};
use crate::wire::{self, FrameKind};

use super::{Link, Node};

/// The MAC of a connect request whose next hop is still to be resolved (no frame
/// leaves with it: [`Node::send_cm`] resolves it first).
pub(crate) const UNRESOLVED: [u8; 6] = [0; 6];

impl Node {
    /// A frame the transport's decoder refused for its protocol: ARP, or ICMP to this
    /// node, goes to the neighbour machine; anything else is not ours.
    #[cold]
    pub(super) fn receive_other(&mut self, data: &[u8]) {
        let now = self.now;
        match wire::classify(data) {
            FrameKind::Arp => match ArpRepr::parse(data) {
                Ok(arp) => self.neigh.handle_arp(&arp, now),
                Err(_) => self.stats.drop_for(DropReason::BadNeighbour),
            },
            FrameKind::Icmp => match parse_echo_request(data) {
                Ok(Icmp::EchoRequest(req)) if IpAddr::from(req.dst_ip) == self.cfg.local.ip => {
                    self.neigh.handle_echo(&req)
                }
                Ok(Icmp::EchoRequest(_)) => self.stats.drop_for(DropReason::NotOurs),
                Ok(Icmp::Other { .. }) => self.stats.drop_for(DropReason::IcmpIgnored),
                Err(_) => self.stats.drop_for(DropReason::BadNeighbour),
            },
            FrameKind::Icmpv6 => match parse_icmpv6(data) {
                Ok(Icmpv6::Solicit(ns)) => self.neigh.handle_solicit(&ns, now),
                Ok(Icmpv6::Advert(na)) => self.neigh.handle_advert(&na, now),
                Ok(Icmpv6::EchoRequest(req)) if IpAddr::from(req.dst_ip) == self.cfg.local.ip => {
                    self.neigh.handle_echo6(&req)
                }
                Ok(Icmpv6::EchoRequest(_)) => self.stats.drop_for(DropReason::NotOurs),
                // Router advertisements, multicast listener reports, echo replies...
                Ok(Icmpv6::Other { .. }) => self.stats.drop_for(DropReason::IcmpIgnored),
                Err(_) => self.stats.drop_for(DropReason::BadNeighbour),
            },
            _ => self.stats.drop_for(DropReason::NotOurs),
        }
        self.absorb_neigh();
    }

    /// What the neighbour machine found since last asked: its refusals counted, the
    /// connect requests waiting for a next hop it resolved sent, those whose next hop
    /// nobody answered for failed.
    pub(super) fn absorb_neigh(&mut self) {
        if !self.neigh.has_news() {
            return;
        }
        for r in self.neigh.take_drops() {
            self.stats.drops[r as usize] += 1;
        }
        let resolved = self.neigh.take_resolved();
        let failed = self.neigh.take_failed();
        if resolved.is_empty() && failed.is_empty() {
            return;
        }
        for hop in resolved {
            let neigh = &self.neigh;
            self.cm
                .requeue_where(|to| to.mac == UNRESOLVED && neigh.next_hop(to.ip) == Ok(hop));
        }
        for (hop, _) in failed {
            let neigh = &self.neigh;
            let waiting = self
                .cm
                .waiting_for(|to| to.mac == UNRESOLVED && neigh.next_hop(to.ip) == Ok(hop));
            for conn in waiting {
                self.cm.forget(conn);
                self.fail_connect(conn, RejectReason::Unresolved);
            }
        }
    }

    /// The MAC a connect request to `to` leaves with, resolved now if it was not:
    /// `None` while its next hop is asked for (the request goes when the answer is
    /// in) or when it cannot be reached (the connect then fails: `fail` says why).
    pub(super) fn resolve_for_cm(
        &mut self,
        to: &NodeAddr,
    ) -> Result<Option<[u8; 6]>, RejectReason> {
        if to.mac != UNRESOLVED {
            return Ok(Some(to.mac));
        }
        match self.neigh.resolve(to.ip, self.now) {
            Resolved::Mac(mac) => Ok(Some(mac)),
            Resolved::Waiting => Ok(None),
            Resolved::Failed { .. } => Err(RejectReason::Unresolved),
            Resolved::NoRoute => Err(RejectReason::NoRoute),
        }
    }

    /// A connection's retransmission timer fired: its peer (or its router) may have
    /// moved to another MAC. Its next hop is asked for again, and when the table
    /// already has another MAC for it, a probe of the connection goes there: the
    /// connection moves only when the peer's answer, a frame of the connection that
    /// passes every check, comes back from that MAC (`Node::receive_section`).
    pub(super) fn try_new_path(&mut self, slot: usize, now: u64) {
        if !self.cfg.neigh.resolve {
            return;
        }
        let Some(conn) = self.conns.get(slot) else {
            return;
        };
        if self.nodes.is_static(conn.peer) {
            return;
        }
        let Some(hop) = self
            .nodes
            .get(conn.peer)
            .and_then(|p| self.neigh.next_hop(p.ip).ok())
        else {
            return;
        };
        let known = self.neigh.config().table.mac_of(hop);
        // Three timeouts in a row: stalled (its retries run out within seconds).
        let stalled = conn.tx.retries() >= 3;
        self.neigh.refresh(hop, now, stalled);
        if let Some(mac) = known.filter(|&m| m != conn.peer_mac) {
            if !self.path_probes.iter().any(|&(s, _)| s == slot) {
                self.path_probes.push((slot, mac));
            }
        }
    }

    /// Sends the neighbour machine's frames (ARP requests and replies, echo replies).
    pub(super) fn send_neigh<L: Link>(&mut self, link: &mut L) {
        while self.neigh.has_output() && !link.full(false) {
            let Some(mut m) = link.alloc() else {
                self.stats.drop_for(DropReason::NoBuffer);
                return;
            };
            let (max, tag) = (self.caps.max_frame, super::link::Tagging::of(&self.cfg));
            let Some(n) = self.neigh.poll_transmit(tag.room(&mut m, max)) else {
                return;
            };
            tag.done(&mut m, n, 0);
            self.stats.bytes_tx += n as u64;
            if link.push(m, false) {
                self.stats.frames_tx += 1;
            }
        }
        self.absorb_neigh();
    }
}
