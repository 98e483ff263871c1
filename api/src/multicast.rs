//! Virtual multicast (MINI; docs/design.md §3 "Send side"): one work request posted on M
//! connections of a device.
//!
//! The data is not copied: a request's source is a range of a local endpoint (or its
//! 32 inline bytes), referenced by every member's copy of the 100-byte descriptor and
//! read by the worker as it builds each member's frames — one copy of the data, M
//! descriptors, M transmissions (Ethernet has no connection-level multicast: every
//! member has its own peer, key and sequence numbers). Each member completes on its own
//! completion queue, [`crate::Completion::conn`] naming the member, and keeps its own
//! order: a group post sits in every member's send queue between that member's
//! earlier and later posts.
//!
//! A post is all or nothing: the request is checked once, every member must be
//! connected and have room, then it is queued on all of them: the copies take
//! consecutive places on their shards' submission rings, claimed before any is written,
//! so other threads posting on the same shards meanwhile cannot split a group post.

use std::sync::Arc;

use deposit_transport::connection::{shard_of_conn, ConnShared};

use crate::device::DeviceInner;
use crate::queue::{check_local, check_postable, check_request};
use crate::{Connection, Error, WorkRequest};
use deposit_transport::connection::WR_SIGNALED;

/// A set of connections of one device that work requests are posted on together.
pub struct MulticastGroup {
    members: Vec<Arc<ConnShared>>,
    // Keeps the device (and so the members' worker) alive; drives inline progress.
    dev: Arc<DeviceInner>,
}

impl MulticastGroup {
    pub(crate) fn new(dev: &Arc<DeviceInner>, conns: &[&Connection]) -> Result<Self, Error> {
        if conns.is_empty() {
            return Err(Error::InvalidArgument(
                "a multicast group needs a member".into(),
            ));
        }
        let mut members: Vec<Arc<ConnShared>> = Vec::with_capacity(conns.len());
        for c in conns {
            if !Arc::ptr_eq(c.device(), dev) {
                return Err(Error::InvalidArgument(format!(
                    "connection {} belongs to another device",
                    c.local_number()
                )));
            }
            if members.iter().any(|m| m.number == c.local_number()) {
                return Err(Error::InvalidArgument(format!(
                    "connection {} is in the group twice",
                    c.local_number()
                )));
            }
            members.push(c.shared().clone());
        }
        Ok(MulticastGroup {
            members,
            dev: dev.clone(),
        })
    }

    /// Number of member connections.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the group has no member (never: groups are made with at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Local numbers of the members, in group order.
    pub fn members(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().map(|m| m.number)
    }

    /// Posts `req` on every member, or on none: fails at once, with nothing queued,
    /// when the request is invalid, a member is not connected, a member's send queue
    /// or completion queue is full, or a shard's submission ring lacks room for its
    /// members' copies.
    ///
    /// Inline progress, as [`Connection::post`]: a full submission ring is drained by
    /// a turn and the post tried once more, and a post that brings a member's requests
    /// waiting for the worker to a multiple of [`crate::INLINE_DOORBELL`] drives a turn.
    pub fn post(&self, req: &WorkRequest) -> Result<(), Error> {
        self.dev.post_with(|| self.try_post(req))
    }

    /// One attempt of [`MulticastGroup::post`]; whether a member reached the doorbell.
    fn try_post(&self, req: &WorkRequest) -> Result<bool, Error> {
        check_request(req)?;
        for m in &self.members {
            check_postable(m)?;
            check_local(req, m)?;
        }
        // Every member's place in its send queue and, when signaled, its completion
        // slot — or none: what was taken is given back on the first refusal.
        let signaled = usize::from(req.wr.flags & WR_SIGNALED != 0);
        let mut doorbell = false;
        for (i, m) in self.members.iter().enumerate() {
            match m.reserve_n(1, signaled) {
                Ok(waiting) => doorbell |= waiting % crate::INLINE_DOORBELL == 0,
                Err(e) => {
                    for t in &self.members[..i] {
                        t.unreserve_n(1, signaled);
                    }
                    return Err(Error::from_post(e));
                }
            }
        }
        // Consecutive places on each shard's ring for its members' copies, all claimed
        // before any is filled (other threads may post on the same rings meanwhile): a
        // claim dropped unfilled becomes entries the worker skips.
        let mut on_ring = [0usize; 256];
        for m in &self.members {
            on_ring[usize::from(shard_of_conn(m.number))] += 1;
        }
        let mut claims = Vec::new();
        for m in &self.members {
            let shard = shard_of_conn(m.number);
            let n = std::mem::take(&mut on_ring[usize::from(shard)]);
            if n == 0 {
                continue; // claimed with an earlier member of its shard
            }
            match m.ring().claim(n) {
                Some(c) => claims.push((shard, c)),
                None => {
                    drop(claims);
                    for t in &self.members {
                        t.unreserve_n(1, signaled);
                    }
                    return Err(Error::SubmitRingFull {
                        capacity: m.ring().capacity(),
                    });
                }
            }
        }
        for (shard, claim) in claims {
            let mut of_shard = self
                .members
                .iter()
                .filter(|m| shard_of_conn(m.number) == shard);
            claim.fill(|_| {
                of_shard
                    .next()
                    .expect("a place for each member of the shard")
                    .submission(&req.wr)
            });
        }
        Ok(doorbell)
    }
}

impl std::fmt::Debug for MulticastGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: Vec<u32> = self.members.iter().map(|m| m.number).collect();
        f.debug_struct("MulticastGroup")
            .field("members", &members)
            .finish()
    }
}
