//! Shards (docs/design.md §6): a device's nodes, one per worker, each owning the endpoints
//! assigned to it and their connections. A frame belongs to the shard of the connection
//! it names — the low byte of every connection number is its shard
//! ([`shard_of_conn`]) — and a connection request to a shard listening on its service
//! (several may: requests are spread over them). [`Node::route`] tells
//! a driver which shard a received frame is for, reading as little of it as it can:
//! the destination connection of the first section (all sections of a frame go to
//! one destination, `send::bundle`), or for connection management the message.

use std::collections::HashMap;

use crate::connection::shard_of_conn;
use crate::wire::{self, cm::CmMessage, FrameView};

use super::Node;

/// Most shards of one device (connection numbers carry the shard in their low byte).
pub const MAX_SHARDS: usize = 64;

/// Which shards listen on which service: every shard holds a copy (kept by the host's
/// calls), so routing a connection request reads nothing another shard writes.
#[derive(Debug, Default, Clone)]
pub struct ServiceRoutes {
    by_service: HashMap<u32, Vec<u8>>,
}

impl ServiceRoutes {
    /// Shard `shard` listens on `service`.
    pub fn add(&mut self, service: u32, shard: u8) {
        let v = self.by_service.entry(service).or_default();
        if !v.contains(&shard) {
            v.push(shard);
            v.sort_unstable();
        }
    }
    /// Shard `shard` stopped listening on `service`.
    pub fn remove(&mut self, service: u32, shard: u8) {
        if let Some(v) = self.by_service.get_mut(&service) {
            v.retain(|s| *s != shard);
            if v.is_empty() {
                self.by_service.remove(&service);
            }
        }
    }
    /// The shard that takes a request for `service` from a requester whose connection
    /// is `client_conn`: spread over the listening shards by the random part of that
    /// number, so the same one for every retry of the request, and connections from a
    /// peer of one shard are spread as well as those of a peer of many.
    pub fn pick(&self, service: u32, client_conn: u32) -> Option<u8> {
        let v = self.by_service.get(&service)?;
        Some(v[(client_conn >> 8) as usize % v.len()])
    }
}

impl Node {
    /// The other shard that must take `frame`, or `None` when it is this one's (or
    /// nobody's: this shard then refuses and counts it).
    #[inline]
    pub fn route(&self, frame: &[u8]) -> Option<u8> {
        if self.cfg.shards <= 1 {
            return None;
        }
        // A tagged frame (a node on a VLAN) is routed by what follows its tag.
        let frame = match self.cfg.vlan {
            Some(_) => frame.get(wire::vlan::VLAN_LEN..)?,
            None => frame,
        };
        if wire::classify(frame) != wire::FrameKind::Udp {
            // Not UDP (ARP, ICMP, ICMPv6): the neighbour machine of the shard that
            // received it answers (their table is the device's).
            return None;
        }
        let at = wire::underlay::header_len_of(frame) + 4;
        let conn = u32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?);
        let owner = if conn != 0 {
            shard_of_conn(conn)
        } else {
            self.route_cm(frame)?
        };
        (owner != self.cfg.shard && owner < self.cfg.shards).then_some(owner)
    }

    /// The shard a connection-management frame is for: that of the listener (a
    /// request) or of the local connection it answers or closes.
    #[cold]
    fn route_cm(&self, frame: &[u8]) -> Option<u8> {
        let view = FrameView::parse(frame).ok()?;
        let m = view.messages().next()?.ok()?;
        Some(match CmMessage::parse(&m.control, m.payload).ok()? {
            CmMessage::ConnectReq { service, conn, .. } => self.routes.pick(service, conn)?,
            CmMessage::ConnectRep { client_conn, .. } => shard_of_conn(client_conn),
            CmMessage::Challenge { client_conn, .. } => shard_of_conn(client_conn),
            CmMessage::Reject { client_conn, .. } => shard_of_conn(client_conn),
            CmMessage::DisconnectReq { target, .. } => shard_of_conn(target),
            CmMessage::DisconnectRep { sender, .. } => shard_of_conn(sender),
        })
    }

    /// Shard `shard` of this device listens on `service` (or no longer does).
    pub fn set_route(&mut self, service: u32, shard: u8, listening: bool) {
        if listening {
            self.routes.add(service, shard);
        } else {
            self.routes.remove(service, shard);
        }
    }
}
