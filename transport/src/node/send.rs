//! Frames out: work requests into messages, acknowledgements and NAKs, completions.
//!
//! Per connection, posted work requests are admitted into flight within the window
//! (replies to the peer's reads and atomics join the same stream, outside the window),
//! then turned into frames from the transmit cursor on; a retransmission only moves the
//! cursor back, since [`message`] rebuilds every message identically. Completions are
//! generated in posting order once a request is acknowledged (and, for reads and
//! atomics, its reply has arrived).

use super::conn::{ConnContext, Dest};
use crate::connection::{seq_lt, ConnState};
use crate::cq::CqShared;
use crate::message;
use crate::reliability::SeqBits;
use crate::status::{DropReason, Nak, RemoteStatus};
use crate::tables::{EndpointTable, NodeAddr, NodeId, NodeTable};
use crate::wire::{self, hflags, op, ControlRepr, FrameWriter, TransportRepr, UnderlayRepr};
use crate::wr::{Completion, Pending, Priority, WcStatus, Work, WrOpcode, WR_SIGNALED};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::link::Tagging;
use super::{cc, External, FrameBuf, Link, Node, Stats};

impl Node {
    /// Sends one acknowledgement frame (with any NAKs) per connection that needs one.
    pub(super) fn flush_acks<L: Link>(&mut self, link: &mut L) {
        self.owed_frames = 0;
        self.owed_msgs_base = self.stats.msgs_rx;
        if self.ack_list.is_empty() {
            if !self.ack_new.is_empty() {
                std::mem::swap(&mut self.ack_list, &mut self.ack_new);
            }
            return;
        }
        let mut i = 0;
        while i < self.ack_list.len() {
            let slot = self.ack_list[i];
            let high = self
                .conns
                .get(slot)
                .is_some_and(|c| self.takes_high_queue(c.priority));
            if link.full(high) {
                // Keep the rest for the next turn.
                self.ack_list.drain(..i);
                self.ack_list.append(&mut self.ack_new);
                return;
            }
            i += 1;
            if !self.conns.get(slot).is_some_and(|c| c.ack_pending) {
                continue;
            }
            let Some(mbuf) = link.alloc() else {
                self.stats.drop_for(DropReason::NoBuffer);
                self.ack_list.drain(..i - 1);
                self.ack_list.append(&mut self.ack_new);
                return;
            };
            if !self.send_ack_frame(link, slot, mbuf, high, i) {
                i -= 1; // more NAKs for this connection: another frame
            }
        }
        self.ack_list.clear();
        std::mem::swap(&mut self.ack_list, &mut self.ack_new);
    }

    /// Builds connection `slot`'s acknowledgement frame in `mbuf` and hands it to the
    /// link; the acknowledgements owed by the connections to the same peer listed after
    /// it (from `ack_list[next]` on) fill the frame's room. Returns false when
    /// receiver-not-ready NAKs are left for another frame.
    fn send_ack_frame<L: Link>(
        &mut self,
        link: &mut L,
        slot: usize,
        mut mbuf: L::Frame,
        high: bool,
        next: usize,
    ) -> bool {
        let Some(conn) = self.conns.get_mut(slot) else {
            return true;
        };
        let max = self.caps.max_frame;
        let hold = hold_of(conn, self.acks_leave.max(self.now), self.hold_min, self.hz);
        // Every kept refusal's NAK rides in the frame, or the acknowledgement stops at
        // the first left out.
        let room = wire::max_cells(max)
            - seal_len(conn) as usize / wire::CELL_LEN
            - usize::from(hold.is_some());
        let told = conn.refusals.len().min(room);
        let credits = self.share.for_peer(&self.peer_conns, conn.peer);
        let (local, nodes) = (&self.cfg.local, &self.nodes);
        let (tag, pcp) = (super::link::Tagging::of(&self.cfg), pcp_of(conn.priority));
        let Some(mut w) = ack_frame(&mut mbuf, tag, max, conn, local, nodes, credits, 0, told)
        else {
            return true;
        };
        self.stats.acks_held += u64::from(hold.is_some());
        let pushed = push_ack_cells(conn, &mut w, told, hold);
        seal(conn, &mut w, &mut self.stats);
        conn.naks.drop_front(pushed);
        conn.ack_pending = !conn.naks.is_empty();
        let (done, peer) = (!conn.ack_pending, conn.dest());
        self.stats.naks_tx += (told + pushed) as u64;
        self.stats.acks_tx += 1;
        if done && !high {
            self.bundle_acks(&mut w, peer, next);
        }
        self.stats.cells_tx += w.frame_cells() as u64;
        let len = w.finish();
        tag.done(&mut mbuf, len, pcp);
        self.stats.bytes_tx += len as u64;
        if link.push(mbuf, high) {
            self.stats.frames_tx += 1;
        }
        done
    }

    /// Adds to acknowledgement frame `w` a section for each connection to `peer` that
    /// owes a plain acknowledgement (no NAK to carry) among the next [`BUNDLE_SCAN`] of
    /// `ack_list` from `next` on, while they fit: acknowledgements and credits of many
    /// connections to one peer go in one frame.
    fn bundle_acks(&mut self, w: &mut FrameWriter<'_>, peer: Dest, next: usize) {
        let end = self.ack_list.len().min(next.saturating_add(BUNDLE_SCAN));
        for j in next..end {
            if !self.ack_section(w, self.ack_list[j], peer) {
                break;
            }
        }
    }

    /// Adds to data frame `w` (of a connection to `peer`, whose own acknowledgement it
    /// carries) the acknowledgements other connections to `peer` owe, from the first
    /// [`BUNDLE_SCAN`] of those owed since the last turn and of those owed now, while
    /// they fit. A request on one connection answered on another (the libfabric
    /// provider's pair of connections per peer, a reply sent back on a connection of
    /// the server's own) then costs the answer's frame only, not one more frame for the
    /// acknowledgement.
    fn ride_acks(&mut self, w: &mut FrameWriter<'_>, peer: Dest) {
        let owed = self.ack_list.len().min(BUNDLE_SCAN);
        let new = self.ack_new.len().min(BUNDLE_SCAN);
        for j in 0..owed + new {
            let slot = if j < owed {
                self.ack_list[j]
            } else {
                self.ack_new[j - owed]
            };
            if !self.ack_section(w, slot, peer) {
                return;
            }
        }
    }

    /// Adds connection `slot`'s acknowledgement to frame `w` as a section of its own if
    /// the connection goes to `peer` and owes a plain one (no NAK, no refusal, not a
    /// high-priority connection, whose acknowledgements take the high queue). Returns
    /// false when the frame has no room for it.
    fn ack_section(&mut self, w: &mut FrameWriter<'_>, slot: usize, peer: Dest) -> bool {
        let eligible = self.conns.get(slot).is_some_and(|c| {
            c.ack_pending
                && c.dest() == peer
                && c.naks.is_empty()
                && c.refusals.is_empty()
                && !self.takes_high_queue(c.priority)
        });
        if !eligible {
            return true;
        }
        let conn = self.conns.get_mut(slot).expect("eligible slot");
        let credits = self.share.for_peer(&self.peer_conns, conn.peer);
        let hold = hold_of(conn, self.acks_leave.max(self.now), self.hold_min, self.hz);
        let cells = sack_cells(conn).count() + usize::from(hold.is_some());
        if !w.begin_section(&ack_header(conn, credits), cells) {
            return false;
        }
        self.stats.acks_held += u64::from(hold.is_some());
        push_ack_cells(conn, w, 0, hold);
        seal(conn, w, &mut self.stats);
        conn.ack_pending = false;
        self.stats.acks_tx += 1;
        self.stats.sections_tx += 1;
        true
    }

    /// Sends a liveness probe (an acknowledgement frame asking for one back) on every
    /// connection in `probe_list`.
    fn send_probes<L: Link>(&mut self, link: &mut L) {
        let (list, paths) = (self.probe_list.len(), self.path_probes.len());
        for i in 0..list + paths {
            let (slot, to) = match i.checked_sub(list) {
                None => (self.probe_list[i], None),
                Some(j) => (self.path_probes[j].0, Some(self.path_probes[j].1)),
            };
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            let Some(mut mbuf) = link.alloc() else {
                self.stats.drop_for(DropReason::NoBuffer);
                break;
            };
            let max = self.caps.max_frame;
            let credits = self.share.for_peer(&self.peer_conns, conn.peer);
            let (local, nodes) = (&self.cfg.local, &self.nodes);
            let (tag, pcp) = (super::link::Tagging::of(&self.cfg), pcp_of(conn.priority));
            let extra = hflags::ACK_REQ;
            let Some(mut w) = ack_frame(&mut mbuf, tag, max, conn, local, nodes, credits, extra, 0)
            else {
                continue;
            };
            seal(conn, &mut w, &mut self.stats);
            let len = w.finish();
            tag.done(&mut mbuf, len, pcp);
            if let Some(mac) = to {
                // Another path: only the destination MAC differs (no checksum has it).
                mbuf.room_mut()[..6].copy_from_slice(&mac);
                self.stats.path_probes += 1;
            } else if conn.heard {
                self.stats.keepalive_probes += 1;
            } // else: asking a new connection's peer for its first frame (or answer)
            self.stats.bytes_tx += len as u64;
            // When the queue is full the next period retries.
            if !link.full(false) && link.push(mbuf, false) {
                self.stats.frames_tx += 1;
            }
        }
        self.probe_list.clear();
        self.path_probes.clear();
    }

    /// Whether the next [`Node::transmit_control`] sends acknowledgements (those owed
    /// since the turn before: the turn's own wait a turn for a reply to carry them).
    #[inline]
    pub(crate) fn flushes_acks(&self) -> bool {
        match self.ack_list[..] {
            [] => false,
            [slot] => self.conns.get(slot).is_some_and(|c| c.ack_pending),
            _ => true,
        }
    }

    /// Makes every owed acknowledgement go with the next transmission (before a
    /// disconnect request, so the peer learns that its last messages ran before it
    /// hears the connection is gone).
    pub(crate) fn ack_now(&mut self) {
        self.ack_list.append(&mut self.ack_new);
    }

    /// Sends what is not data: diagnostic frames, acknowledgements and NAKs, liveness
    /// probes, connection management (in that order: a disconnect request follows the
    /// acknowledgements owed before it).
    pub fn transmit_control<L: Link>(&mut self, link: &mut L) {
        if !self.raw_tx.is_empty() {
            self.send_raw_frames(link);
        }
        self.flush_acks(link);
        if !(self.probe_list.is_empty() && self.path_probes.is_empty()) {
            self.send_probes(link);
        }
        if self.cm.has_output() {
            self.send_cm(link);
        }
        if self.neigh.has_output() {
            self.send_neigh(link);
        }
    }

    /// Turns posted work requests into frames: every high-priority connection first,
    /// as far as its window allows; then the low-priority ones round-robin, at most
    /// `LOW_BURST` frames each per turn, giving way as soon as a high-priority
    /// connection has work (it overtakes at the next frame boundary).
    ///
    /// Returns false when the link took no more frames.
    pub fn transmit_data<L: Link>(&mut self, now: u64, link: &mut L) -> bool {
        self.take_submissions(now);
        self.run_pacing(now);
        if !self.conns.high_slots().is_empty() && !self.transmit_high(now, link) {
            return false;
        }
        let n = self.ready.len();
        if n == 0 {
            return true;
        }
        let start = if self.rr_next < n { self.rr_next } else { 0 };
        let burst = if self.conns.high_slots().is_empty() {
            LOW_BURST
        } else {
            LOW_BURST_BESIDE_HIGH
        };
        let mut more = true;
        let mut next = start + 1;
        let mut finished = false;
        for i in 0..n {
            let idx = (start + i) % n;
            let slot = self.ready[idx];
            if !self.has_send_work(slot) {
                finished |= self.unlist(slot);
                continue;
            }
            let served = self.service_conn(link, slot, now, burst, Some(idx + 1));
            // What it sent starts the retransmission timer. A parked connection is
            // listed again when its peer's window or pace opens (`Node::unpark`).
            self.rearm(slot);
            if served == Served::Parked || !self.has_send_work(slot) {
                finished |= self.unlist(slot);
            }
            match served {
                Served::Done | Served::Parked => {}
                // Resume with this connection next turn (after the high ones).
                Served::Yielded => {
                    next = idx;
                    break;
                }
                Served::PortFull => {
                    next = idx;
                    more = false;
                    break;
                }
            }
        }
        self.rr_next = next;
        if finished {
            self.drop_unlisted();
        }
        more
    }

    /// Moves posted work requests from the submission ring to their connections,
    /// listing those connections as ready. A request goes straight into flight when
    /// nothing waits before it and the connection may send now (the common case in a
    /// stream: one move instead of two through the connection's queue); otherwise it
    /// waits in the connection's queue for `admit`.
    #[inline]
    pub(crate) fn take_submissions(&mut self, now: u64) {
        // Bulk requests beside high-priority connections are segmented at admission
        // (see `service_conn`): those go through the queue.
        let direct = self.conns.high_slots().is_empty();
        let (conns, ready, stats) = (&mut self.conns, &mut self.ready, &mut self.stats);
        let (endpoints, segment_max) = (&self.endpoints, self.segment_max);
        // Posts spread over many connections would miss on each one's state: that of
        // the post two places on is fetched ahead (once per run of one connection's;
        // not at all with few connections, whose state stays in cache).
        let ahead = conns.len() > PREFETCH_FROM_CONNS;
        let mut fetched = u32::MAX;
        // Departed connections nothing else holds any more, seen before the ring is
        // drained: a post made through one happened before that, so it is taken below,
        // and the entry may go after.
        let unheld = if self.departed.is_empty() {
            0
        } else {
            unheld_departed(&self.departed)
        };
        let (departed, stranded) = (&self.departed, &mut self.stranded);
        loop {
            if let Some(slot) = ahead
                .then(|| self.ring.slot_ahead(2))
                .flatten()
                .filter(|&s| s != fetched)
            {
                conns.prefetch_slot(slot as usize);
                fetched = slot;
            }
            let took = self.ring.pop_with(|s| {
                let slot = s.slot as usize;
                match conns.get_mut(slot) {
                    Some(c) if c.number == s.number => {
                        if direct && c.sendq.is_empty() && c.may_admit(now) {
                            admit_one(c, &s.work, endpoints, segment_max, None);
                            c.shared.dequeued(1);
                        } else {
                            c.sendq.push_back(s.work);
                        }
                        list(ready, c, slot);
                    }
                    // Filler of a claim dropped unfilled.
                    _ if s.slot == crate::submit::NO_SLOT => {}
                    // The connection went between the post and now (it was usable when
                    // posted): the request is flushed.
                    _ => {
                        stats.posts_orphaned += 1;
                        if let Some(d) = departed.iter().find(|d| d.number == s.number) {
                            flush_orphan(d, &s.work, stranded);
                        }
                    }
                }
            });
            if took.is_none() {
                if unheld != 0 {
                    let mut i = 0;
                    self.departed.retain(|_| {
                        i += 1;
                        i > 64 || unheld & (1 << (i - 1)) == 0
                    });
                }
                return;
            }
        }
    }

    /// Lists connection `slot` as ready if it has something to send.
    #[inline]
    pub(crate) fn schedule(&mut self, slot: usize) {
        if self.conns.get(slot).is_some_and(|c| !c.ready) && self.has_send_work(slot) {
            let c = self.conns.get_mut(slot).expect("slot with work");
            list(&mut self.ready, c, slot);
        }
    }

    /// Marks connection `slot` as off the ready list: it leaves the list at the end
    /// of the turn (`drop_unlisted`). Returns true (one was marked).
    fn unlist(&mut self, slot: usize) -> bool {
        if let Some(c) = self.conns.get_mut(slot) {
            c.ready = false;
        }
        true
    }

    /// Takes the connections marked off the ready list out of it.
    fn drop_unlisted(&mut self) {
        let conns = &self.conns;
        self.ready
            .retain(|&slot| conns.get(slot).is_some_and(|c| c.ready));
        if self.rr_next >= self.ready.len() {
            self.rr_next = 0;
        }
    }

    /// Sends what every high-priority connection may (its window allows) and, on a port
    /// with a high-priority queue, puts those frames on the wire at once. Returns
    /// false when the port takes no more frames this turn.
    pub fn transmit_high<L: Link>(&mut self, now: u64, link: &mut L) -> bool {
        for i in 0..self.conns.high_slots().len() {
            let slot = self.conns.high_slots()[i];
            if self.has_send_work(slot) {
                let served = self.service_conn(link, slot, now, u32::MAX, None);
                self.rearm(slot);
                if served == Served::PortFull {
                    return false;
                }
            }
        }
        if self.caps.queues > 1 {
            link.flush(true);
        }
        true
    }

    /// Whether connection `slot` may have something to send or flush: the cheap test
    /// that keeps an idle turn short (no call into `service_conn`).
    #[inline]
    fn has_send_work(&self, slot: usize) -> bool {
        self.conns.get(slot).is_some_and(|c| match c.state {
            ConnState::Normal | ConnState::Exceptioned => c.tx.has_to_send() || !c.sendq.is_empty(),
            ConnState::Error | ConnState::Closed => !c.inflight.is_empty() || !c.sendq.is_empty(),
            _ => false,
        })
    }

    /// Sends the diagnostic frames queued by `send_raw`.
    fn send_raw_frames<L: Link>(&mut self, link: &mut L) {
        for q in self.raw_tx.drain(..) {
            if let Some(mut m) = link.alloc() {
                let n = q.len().min(m.room_mut().len());
                m.room_mut()[..n].copy_from_slice(&q[..n]);
                m.set_len(n);
                if link.push(m, false) {
                    self.stats.frames_tx += 1;
                }
            }
        }
    }

    /// Whether a high-priority connection has posted or owes messages.
    fn high_pending(&self) -> bool {
        let high = self.conns.high_slots();
        // A post still on the ring may be a high-priority one.
        !high.is_empty()
            && (!self.ring.ring().is_empty()
                || high.iter().any(|&s| {
                    self.conns.get(s).is_some_and(|c| {
                        c.state == ConnState::Normal && (!c.sendq.is_empty() || c.tx.has_to_send())
                    })
                }))
    }

    /// Sends up to `budget` frames of connection `slot` (admitting posted work
    /// requests into its window first). `bundle_from` (the low-priority pass: it
    /// yields to high-priority work) is where on the ready list other connections to
    /// the same peer are looked for to fill a frame's room ([`Node::bundle`]).
    fn service_conn<L: Link>(
        &mut self,
        link: &mut L,
        slot: usize,
        now: u64,
        budget: u32,
        bundle_from: Option<usize>,
    ) -> Served {
        let yield_to_high = bundle_from.is_some();
        let Some(priority) = self.conns.get(slot).map(|c| c.priority) else {
            return Served::Done;
        };
        let high = self.takes_high_queue(priority);
        // Bulk writes beside high-priority connections are cut into segments that fit a
        // standard frame, and sent in such frames: a frame being built or taken in then
        // delays an urgent one by well under a microsecond.
        let beside_high = !high && !self.conns.high_slots().is_empty();
        if link.full(high) {
            return Served::PortFull;
        }
        if yield_to_high && priority == Priority::High {
            return Served::Done; // served in the first pass
        }
        if !self.admit(slot, now, beside_high) {
            return Served::Done;
        }
        let mut frames = 0;
        while frames < budget {
            let Some(first) = self.conns.get_mut(slot).and_then(|c| c.tx.next_to_send()) else {
                break;
            };
            if link.full(high) {
                return Served::PortFull;
            }
            let sent = frames > 0;
            let paced = match self
                .cc
                .params
                .enabled
                .then(|| self.cc_admits(slot, first, now, sent))
            {
                None => false,
                Some(Admit::Parked) => return Served::Parked,
                Some(a) => a == Admit::Gated,
            };
            let bundle = bundle_from.filter(|_| !high && !beside_high);
            match self.send_data_frame(link, slot, first, high, beside_high, bundle, now, paced) {
                Built::Sent => {}
                Built::NoBuffer => return Served::PortFull,
                Built::Nothing => break,
            }
            frames += 1;
            if yield_to_high && (self.high_pending() || link.urgent()) {
                self.stats.low_yields += 1;
                return Served::Yielded;
            }
        }
        Served::Done
    }

    /// Whether connection `slot` may send now; if so, its posted work requests are
    /// admitted into its window. A connection in error has its queue flushed.
    #[inline]
    fn admit(&mut self, slot: usize, now: u64, beside_high: bool) -> bool {
        let Some(conn) = self.conns.get_mut(slot) else {
            return false;
        };
        if matches!(conn.state, ConnState::Error | ConnState::Closed) {
            flush_queue(conn);
            return false;
        }
        if !conn.may_send(now) {
            return false; // not up, or the peer is not ready: back off
        }
        admit_work(
            conn,
            &self.endpoints,
            self.segment_max,
            beside_high.then_some(self.bulk_segment),
        );
        true
    }

    /// Builds one data frame of connection `slot` from message `first` on (as many
    /// messages as fit) and hands it to the link. With `bundle` (a place on the ready
    /// list), room the connection leaves is filled with sections of other connections
    /// to the same peer.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn send_data_frame<L: Link>(
        &mut self,
        link: &mut L,
        slot: usize,
        first: u32,
        high: bool,
        beside_high: bool,
        bundle: Option<usize>,
        now: u64,
        paced: bool,
    ) -> Built {
        let Some(conn) = self.conns.get_mut(slot) else {
            return Built::Nothing;
        };
        let Some(mut mbuf) = link.alloc() else {
            self.stats.drop_for(DropReason::NoBuffer);
            return Built::NoBuffer;
        };
        let max = if beside_high
            && first_message_len(conn, first) + seal_len(conn) <= self.bulk_segment
        {
            self.caps.max_frame.min(BULK_FRAME_BESIDE_HIGH)
        } else {
            self.caps.max_frame
        };
        let mut underlay = conn_underlay(&self.cfg.local, &self.nodes, conn);
        if self.cfg.ecn {
            underlay.traffic_class |= ECT0;
        }
        // Sprayed over the peer's paths: this frame's entropy (`CcConfig::paths`).
        let path = match self.cc.params.paths > 1 {
            true => self.cc.peer(conn.peer).pick_path(now),
            false => None,
        };
        if let Some((_, port)) = path {
            underlay.src_port = port;
        }
        let path = path.map(|(i, _)| i);
        let hdr = data_header(
            conn,
            first,
            self.share.for_peer(&self.peer_conns, conn.peer),
        );
        let (tag, pcp) = (super::link::Tagging::of(&self.cfg), pcp_of(conn.priority));
        let room = tag.room(&mut mbuf, max);
        let Ok(mut w) = FrameWriter::new(room, &underlay, &hdr) else {
            return Built::Nothing;
        };
        let mut ext = Payloads::new(self.caps.external_min);
        let (run, mut counted) =
            fill_frame(conn, first, &mut w, &self.endpoints, now, &mut ext, path);
        let (sent, bytes, resent) = (run.sent, run.bytes, run.resent);
        if sent == 0 {
            return Built::Nothing;
        }
        seal(conn, &mut w, &mut self.stats);
        took_ack(conn);
        let (peer, done) = (conn.dest(), conn.tx.next_to_send().is_none());
        self.stats.count_sent(sent, bytes, resent, run.resent_bytes);
        if let Some(from) = bundle.filter(|_| done) {
            counted += self.bundle(&mut w, peer, from, now, &mut ext, path);
            self.ride_acks(&mut w, peer);
        }
        self.stats.cells_tx += w.frame_cells() as u64;
        let len = match &ext.taken {
            None => w.finish(),
            Some(e) => w.finish_with_hole(|crc| e.crc32c_append(crc)),
        };
        self.stats.bytes_tx += len as u64;
        match ext.taken {
            None => tag.done(&mut mbuf, len, pcp),
            Some(e) => {
                self.stats.payloads_by_reference += 1;
                tag.done_external(&mut mbuf, len, e, pcp);
            }
        }
        if link.push(mbuf, high) {
            self.stats.frames_tx += 1;
        }
        if self.cc.params.enabled {
            let params = self.cc.params;
            let cc = self.cc.peer(peer.node);
            cc.on_frame_sent(&params, now, len as u64, counted, paced);
            if let (Some(i), true) = (path, counted != 0) {
                cc.on_path_sent(i, counted);
            }
        }
        for i in 0..self.bundled.len() {
            let s = self.bundled[i];
            self.rearm(s); // what went in the frame starts its retransmission timer
        }
        self.bundled.clear();
        Built::Sent
    }

    /// Fills the room left in frame `w` with sections of other connections to `peer`
    /// that have messages to send, looking at up to [`BUNDLE_SCAN`] connections of the
    /// ready list from `from` on (a cell train across connections, docs/design.md §4): many
    /// connections with a few small messages each then share frames instead of each
    /// costing one. The connections taken are left in `self.bundled`. Returns the
    /// bytes of first transmissions they added to the flight ([`cc`]). Nothing is
    /// added while the peer's congestion window is full.
    fn bundle(
        &mut self,
        w: &mut FrameWriter<'_>,
        peer: Dest,
        from: usize,
        now: u64,
        ext: &mut Payloads,
        path: Option<u8>,
    ) -> u64 {
        let mut counted = 0;
        if self.cc.params.enabled && self.cc.peer(peer.node).gate(now) != cc::Gate::Open {
            return 0;
        }
        let n = self.ready.len();
        for j in 0..n.min(BUNDLE_SCAN) {
            if !w.section_fits(1) {
                break;
            }
            let slot = self.ready[(from + j) % n];
            if n > PREFETCH_FROM_CONNS {
                self.conns.prefetch_slot(self.ready[(from + j + 2) % n]);
            }
            let eligible = self
                .conns
                .get(slot)
                .is_some_and(|c| c.dest() == peer && c.ready && c.priority == Priority::Low);
            if !eligible || !self.has_send_work(slot) || !self.admit(slot, now, false) {
                continue;
            }
            let conn = self.conns.get_mut(slot).expect("eligible slot");
            let Some(first) = conn.tx.next_to_send() else {
                continue;
            };
            let cells = wire::cells_for(first_message_len(conn, first));
            let credits = self.share.for_peer(&self.peer_conns, conn.peer);
            if !w.begin_section(&data_header(conn, first, credits), cells) {
                continue;
            }
            let (run, c) = fill_frame(conn, first, w, &self.endpoints, now, ext, path);
            counted += c;
            seal(conn, w, &mut self.stats);
            took_ack(conn);
            self.stats.sections_tx += 1;
            self.stats
                .count_sent(run.sent, run.bytes, run.resent, run.resent_bytes);
            self.bundled.push(slot);
        }
        counted
    }
}

/// Connections from which the worker prefetches the state of the connections it is
/// about to serve (fewer stay in cache).
const PREFETCH_FROM_CONNS: usize = 64;

/// Ready connections looked at, after a frame's own, for sections to fill its room.
pub const BUNDLE_SCAN: usize = 128;

/// A data frame of `conn` went out: it carried the acknowledgement owed, unless that
/// needs cells of its own (a gap's selective part, a NAK).
#[inline]
fn took_ack(conn: &mut ConnContext) {
    if conn.naks.is_empty() && !conn.rx.has_gap() && conn.refusals.is_empty() {
        conn.ack_pending = false;
    }
}

/// What the peer's congestion state says of a connection's next frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// Through the gate: the frame moves the pace.
    Gated,
    /// Past the gate (a retransmission, a lone small message).
    Past,
    /// The window or the pace is shut: the connection waits on the peer.
    Parked,
}

/// What building a data frame came to.
enum Built {
    Sent,
    /// The link had no buffer.
    NoBuffer,
    /// Nothing to send after all.
    Nothing,
}

impl Node {
    /// Whether connection `slot` may put message `first` in a frame now as far as its
    /// peer's congestion state goes: a retransmission always may, past the gate (the
    /// window counts first transmissions), and so may a lone small message; a new
    /// message when the peer's window has room and its pace allows. Otherwise the
    /// connection is parked on the peer: behind the others when it `sent` in this
    /// service, ahead of them when it could not send at all (the connections of a
    /// peer take its window in turn).
    #[inline]
    fn cc_admits(&mut self, slot: usize, first: u32, now: u64, sent: bool) -> Admit {
        let Some(conn) = self.conns.get(slot) else {
            return Admit::Parked;
        };
        if seq_lt(first, conn.tx_sent_high) {
            return Admit::Past;
        }
        if !self.persist.is_empty() {
            if let Some(i) = self.persist.iter().position(|&s| s == slot) {
                self.persist.swap_remove(i);
                return Admit::Past; // its persist timer fired
            }
        }
        // A lone small message (a ping-pong's, a credit write) is latency, not bulk: it
        // is not counted in flight, and waits for no window (another connection's
        // stalled bulk data must not hold it back).
        if first.wrapping_add(1) == conn.tx.next_seq()
            && u64::from(first_message_len(conn, first)) < crate::reliability::BDP_MIN_FRAME
        {
            return Admit::Past;
        }
        let peer = conn.peer;
        let cc = self.cc.peer(peer);
        match cc.gate(now) {
            cc::Gate::Open => Admit::Gated,
            cc::Gate::Window => {
                cc.counters.window_waits += 1;
                self.cc.park(peer, slot, None, sent);
                Admit::Parked
            }
            cc::Gate::Until(t) => {
                cc.counters.pace_waits += 1;
                self.cc.park(peer, slot, Some(t), sent);
                Admit::Parked
            }
        }
    }

    /// `bytes` of peer `id`'s flight are no longer in flight (a connection failed,
    /// closed or went): its parked connections may go.
    pub(super) fn cc_forget(&mut self, id: NodeId, bytes: u64) {
        if bytes != 0 && self.cc.params.enabled {
            self.cc.peer(id).forget(bytes);
            self.unpark(id, self.now);
        }
    }

    /// Lists again the connections parked on peer `id` if its window and pace let
    /// it send now.
    pub(super) fn unpark(&mut self, id: NodeId, now: u64) {
        let Some(cc) = self.cc.get(id) else {
            return;
        };
        if cc.parked.is_empty() {
            return;
        }
        match cc.gate(now) {
            cc::Gate::Open => {}
            cc::Gate::Window => return,
            // The pace moved on since the connections were parked (a retransmission
            // or a lone small message went meanwhile): wait for it.
            cc::Gate::Until(t) => return self.cc.wait_for(id, t),
        }
        let mut slots = std::mem::take(&mut self.unparked);
        self.cc.unpark(id, &mut slots);
        for s in slots.drain(..) {
            self.schedule(s as usize);
        }
        self.unparked = slots;
    }

    /// Peers whose pace came by `now`: their parked connections are listed again.
    #[inline]
    pub(super) fn run_pacing(&mut self, now: u64) {
        if self.cc.next_pace() > now {
            return;
        }
        let mut due = std::mem::take(&mut self.paced_due);
        self.cc.due(now, &mut due);
        for id in due.drain(..) {
            self.unpark(id, now);
        }
        self.paced_due = due;
    }

    /// Whether the frames of a connection of `priority` take the link's high-priority
    /// queue (a high-priority connection, on a link that has one).
    #[inline]
    fn takes_high_queue(&self, priority: Priority) -> bool {
        priority == Priority::High && self.caps.queues > 1
    }
}

/// Frame size of low-priority traffic while high-priority connections share the worker
/// (a standard Ethernet frame; `Node::bulk_segment` is the payload one message of it
/// carries).
pub const BULK_FRAME_BESIDE_HIGH: usize = 1514;

/// Whether a request is cut into segments that carry only their place in it (a write
/// without a compound descriptor), so its segment size may be chosen freely.
fn segments_placeable(wr: &crate::wr::Wqe) -> bool {
    wr.opcode == WrOpcode::Write && wr.remote.compound.is_none()
}

/// Length of the control-plus-payload of message `seq` (0 when unknown).
fn first_message_len(conn: &ConnContext, seq: u32) -> u32 {
    conn.locate(seq).map_or(0, |(i, seg)| {
        let p = &conn.inflight[i];
        match &p.work {
            Work::Cell(c) => c.length(),
            Work::Wr(wr) => {
                message::control_for(wr, seg, p.segments, p.seg_max, false)
                    .0
                    .length
            }
        }
    })
}

/// Low-priority frames one connection may send per turn before the next one's turn.
pub const LOW_BURST: u32 = 16;
/// The same while high-priority connections exist: one frame a turn, so that an urgent
/// frame waits for at most one bulk frame being built (measured with `cargo bench -p
/// deposit --bench priority`: urgent ping p50 under a bulk transfer ~8 us with 4 frames
/// a turn, ~3 us with 1, for 9000-byte frames; 1.35 us with 1514-byte frames).
pub const LOW_BURST_BESIDE_HIGH: u32 = 1;

/// How one connection's service ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// Nothing more to send now (or its burst is spent).
    Done,
    /// The port takes no more frames this turn.
    PortFull,
    /// A high-priority connection has work: low-priority sending stops for this turn.
    Yielded,
    /// Its peer's congestion window or pace is shut: it waits on the peer
    /// ([`cc::CcTable::park`]) off the ready list.
    Parked,
}

/// An acknowledgement frame of `conn` started in `mbuf` (up to `max` bytes): its
/// headers, with `extra` header flags; cells (SACK, NAK) may follow.
/// Starts an acknowledgement frame of `conn` that will carry NAK cells for its first
/// `told` kept refusals (its cumulative acknowledgement stops at the first left out).
#[allow(clippy::too_many_arguments)]
fn ack_frame<'m, F: FrameBuf>(
    mbuf: &'m mut F,
    tag: Tagging,
    max: usize,
    conn: &ConnContext,
    local: &NodeAddr,
    nodes: &NodeTable,
    credits: u16,
    extra: u8,
    told: usize,
) -> Option<FrameWriter<'m>> {
    let mut hdr = ack_header(conn, credits);
    hdr.flags |= extra;
    hdr.ack = conn.refusals.ack_point(conn.rx.expected(), told);
    let underlay = conn_underlay(local, nodes, conn);
    FrameWriter::new(tag.room(mbuf, max), &underlay, &hdr).ok()
}

/// The 802.1Q priority of a connection's frames: 5 for high-priority connections (the
/// latency class switches give a strict queue), 0 (best effort) for the others.
pub(super) fn pcp_of(p: crate::connection::Priority) -> u8 {
    match p {
        crate::connection::Priority::High => 5,
        crate::connection::Priority::Low => 0,
    }
}

/// The cells of an acknowledgement frame: its hold (when it has one to report,
/// [`hold_of`]), NAKs of the first `told` kept refusals, the receiver-not-ready NAKs
/// that fit, and — when the frame acknowledges everything that ran — the selective
/// part (which messages beyond it arrived; one cell per non-empty 32-bit word, at most
/// 8). Returns the receiver-not-ready NAKs it carried.
fn push_ack_cells(
    conn: &ConnContext,
    w: &mut FrameWriter<'_>,
    told: usize,
    hold: Option<u32>,
) -> usize {
    if let Some(ns) = hold {
        let h = ControlRepr {
            opcode: op::HOLD,
            operand: ns,
            ..Default::default()
        };
        let _ = w.push(&h, &[]); // room counted by the caller
    }
    let nak = |&(seq, nak): &(u32, Nak)| ControlRepr {
        opcode: op::NAK,
        operand: seq,
        index: nak.code(),
        ..Default::default()
    };
    for r in &conn.refusals.as_slice()[..told] {
        let _ = w.push(&nak(r), &[]); // room counted by the caller
    }
    let mut pushed = 0;
    for r in conn.naks.as_slice() {
        if w.push(&nak(r), &[]).is_err() {
            break;
        }
        pushed += 1;
    }
    if told == conn.refusals.len() {
        for c in sack_cells(conn) {
            let _ = w.push(&c, &[]);
        }
    }
    pushed
}

/// The hold cell of an acknowledgement of `conn` that leaves at `now` (ticks of a clock
/// of `hz`; `min`: [`wire::HOLD_MIN_NS`] in them): how long after its newest frame from the peer arrived ([`op::HOLD`]), if
/// at least [`wire::HOLD_MIN_NS`]. (The newest frame may be one the acknowledgement
/// does not sample — an acknowledgement, a resent message — which only makes the hold
/// reported shorter than the sampled frame's: the sender never takes off too much. An
/// acknowledgement that acknowledges nothing new — a new credit, a probe's answer —
/// gives its sender no sample, and the sender ignores its hold.)
#[inline]
fn hold_of(conn: &ConnContext, now: u64, min: u64, hz: u64) -> Option<u32> {
    let ticks = now.saturating_sub(conn.last_rx);
    if ticks < min {
        return None;
    }
    let ns = crate::ticks::ticks_to_ns(ticks, hz);
    (ns >= u64::from(wire::HOLD_MIN_NS)).then(|| u32::try_from(ns).unwrap_or(u32::MAX))
}

/// The selective part of `conn`'s acknowledgement: one SACK cell per non-empty 32-bit
/// word of what arrived beyond the cumulative point (none without a gap).
fn sack_cells(conn: &ConnContext) -> impl Iterator<Item = ControlRepr> + '_ {
    let words = conn.rx.has_gap().then(|| conn.rx.ack().1.words32());
    words
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|&(_, word)| word != 0)
        .map(|(i, word)| ControlRepr {
            opcode: op::SACK,
            operand: i as u32,
            index: word,
            ..Default::default()
        })
}

/// ECN-capable transport, codepoint 0 (RFC 3168), in the IP traffic class.
const ECT0: u8 = 0b10;

pub(super) fn conn_underlay(
    local: &NodeAddr,
    nodes: &NodeTable,
    conn: &ConnContext,
) -> UnderlayRepr {
    let peer = nodes.get(conn.peer).copied().unwrap_or(*local);
    UnderlayRepr {
        src_mac: local.mac,
        dst_mac: conn.peer_mac,
        src_ip: local.ip,
        dst_ip: peer.ip,
        src_port: Node::src_port_for(conn.number),
        dst_port: peer.udp_port,
        traffic_class: conn.traffic_class,
    }
}

/// Seals the section of `conn` that `w` is writing, when the connection is secure
/// (`crate::secure`).
#[inline]
fn seal(conn: &mut ConnContext, w: &mut FrameWriter<'_>, stats: &mut Stats) {
    if let Some(s) = conn.secure.as_mut() {
        w.seal(|header, cells, cell| {
            if s.seal(header, cells, cell) {
                stats.rekeys += 1;
            }
        });
        stats.sealed_tx += 1;
    }
}

/// Bytes a section of `conn` takes beyond its messages' cells and header: a secure
/// connection's seal cell.
#[inline]
fn seal_len(conn: &ConnContext) -> u32 {
    if conn.secure.is_some() {
        wire::CELL_LEN as u32
    } else {
        0
    }
}

fn ack_header(conn: &ConnContext, credits: u16) -> TransportRepr {
    let ece = if conn.ce_last { hflags::ECE } else { 0 };
    TransportRepr {
        flags: ece
            | if conn.secure.is_some() {
                hflags::ACK | hflags::SEALED
            } else {
                hflags::ACK
            },
        cells: 0,
        dst_conn: conn.peer_conn,
        key: conn.peer_key,
        seq: conn.tx.next_seq(),
        ack: conn.ack_point(),
        credits,
        acked: conn.tx.acked() as u16,
        src_conn: conn.number,
    }
}

fn data_header(conn: &ConnContext, first: u32, credits: u16) -> TransportRepr {
    TransportRepr {
        seq: first,
        ..ack_header(conn, credits)
    }
}

/// Puts connection `slot` (`conn`) on the ready list unless it is on it.
#[inline]
fn list(ready: &mut Vec<usize>, conn: &mut ConnContext, slot: usize) {
    if !conn.ready {
        conn.ready = true;
        ready.push(slot);
    }
}

/// Moves work requests from the application's send queue into flight, within the
/// window. Requests whose local ranges are invalid complete at once.
fn admit_work(
    conn: &mut ConnContext,
    endpoints: &EndpointTable,
    segment_max: u32,
    bulk_segment: Option<u32>,
) {
    let mut taken = 0;
    while conn.tx.in_flight() < conn.window {
        let Some(work) = conn.sendq.pop_front() else {
            break;
        };
        taken += 1;
        admit_one(conn, &work, endpoints, segment_max, bulk_segment);
    }
    if taken > 0 {
        conn.shared.dequeued(taken);
    }
}

/// Takes one work request into flight (the window has room), or completes it at once
/// when its local ranges are invalid or it cannot be sent. A cell (a one-message
/// request, `message::work`) takes one sequence number and nothing else.
#[inline]
fn admit_one(
    conn: &mut ConnContext,
    work: &Work,
    endpoints: &EndpointTable,
    segment_max: u32,
    bulk_segment: Option<u32>,
) {
    let inside = |id, offset: u64, len: u32| {
        endpoints.get(id).is_some_and(|e| {
            offset
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= e.len())
        })
    };
    let source_ok = match work.source_range() {
        Some((id, offset)) => inside(id, offset, work.len()),
        None => true,
    };
    let result_ok = match work.result() {
        Some((id, offset)) => inside(id, offset, work.len()),
        None => !work.wants_reply(),
    };
    if !source_ok || !result_ok {
        complete(conn, work, WcStatus::LocalProtectionError);
        return;
    }
    let mut seg_max = conn.segment_max.min(segment_max);
    let segments = match work {
        Work::Cell(_) => 1,
        Work::Wr(wr) => {
            if segments_placeable(wr) {
                if let Some(b) = bulk_segment {
                    seg_max = seg_max.min(b.saturating_sub(seal_len(conn)));
                }
            }
            let segments = message::segments_for(wr, seg_max);
            if segments == 1 && !message::single_message_fits(wr, seg_max) {
                complete(conn, work, WcStatus::LocalLengthError);
                return;
            }
            segments
        }
    };
    let first_seq = conn.tx.assign(segments);
    conn.take_into_flight(Pending {
        work: *work,
        first_seq,
        segments,
        seg_max,
        status: WcStatus::Success,
        reason: None,
        replied: false,
    });
}

/// Puts a run of consecutive messages from `first` on into the frame (retransmissions
/// the reliability state asks for, then new ones); returns (messages, payload bytes,
/// retransmitted messages, bytes added to the connection's flight).
fn fill_frame(
    conn: &mut ConnContext,
    first: u32,
    w: &mut FrameWriter<'_>,
    endpoints: &EndpointTable,
    now: u64,
    ext: &mut Payloads,
    path: Option<u8>,
) -> (Run, u64) {
    let Some((mut idx, mut seg)) = conn.locate(first) else {
        return (Run::default(), 0);
    };
    let mut run = Run {
        new_end: first,
        ..Run::default()
    };
    let mut seq = first;
    // The latest compound descriptor put in this frame: identical ones after it are
    // sent as repeats (the frame is rebuilt the same way on retransmission).
    let mut frame_desc: Option<[u8; 8]> = None;
    while idx < conn.inflight.len() {
        // The request is read in place, not copied out.
        let p = &conn.inflight[idx];
        let length = match &p.work {
            // A one-message request: its cell, as built when it was posted.
            Work::Cell(cell) => {
                let Some(dst) = w.push_cell() else {
                    break;
                };
                message::put_cell(cell, dst, endpoints);
                cell.length()
            }
            Work::Wr(wr) => {
                let repeat = wr.remote.compound.is_some() && wr.remote.compound == frame_desc;
                let (control, seg_off) =
                    message::control_for(wr, seg, p.segments, p.seg_max, repeat);
                if !w.fits(control.length) {
                    break;
                }
                // A sealed section's payloads are encrypted into the frame, never
                // referenced.
                if conn.secure.is_some() || !ext.push(w, &control, wr, seg_off, endpoints, repeat) {
                    let pushed = w.push_with(&control, |dst| {
                        message::fill_payload(wr, seg_off, dst, endpoints, repeat)
                    });
                    if pushed.is_err() {
                        break;
                    }
                }
                if wr.remote.compound.is_some() {
                    frame_desc = wr.remote.compound;
                }
                control.length
            }
        };
        let segments = p.segments;
        run.note(conn, seq, length, now);
        seq = seq.wrapping_add(1);
        // The run goes on only while the reliability state wants the next number.
        if conn.tx.next_to_send() != Some(seq) {
            break;
        }
        seg += 1;
        if seg == segments {
            idx += 1;
            seg = 0;
        }
    }
    let counted = conn.tx.on_frame_sent(run.new_end, run.new_bytes, now, path);
    (run, counted)
}

/// The payload a frame takes by reference to endpoint memory, if any (one per frame:
/// the first that qualifies), instead of as a copy ([`LinkCaps::external_min`]).
struct Payloads {
    /// Payloads of at least this many bytes qualify.
    min: usize,
    taken: Option<External>,
}

impl Payloads {
    fn new(min: usize) -> Self {
        Payloads { min, taken: None }
    }

    /// Puts message `wr`'s payload (`control`, for the segment at `seg_off`) into `w`
    /// by reference when it qualifies: large enough, the frame's first, and a plain
    /// copy of endpoint memory ([`message::payload_memory`]). False when it did not
    /// (the caller copies it).
    #[inline]
    fn push(
        &mut self,
        w: &mut FrameWriter<'_>,
        control: &ControlRepr,
        wr: &crate::wr::Wqe,
        seg_off: u32,
        endpoints: &EndpointTable,
        repeat: bool,
    ) -> bool {
        let len = control.length as usize;
        if len < self.min || self.taken.is_some() {
            return false;
        }
        let Some((mem, off)) = message::payload_memory(wr, seg_off, endpoints, repeat) else {
            return false;
        };
        // Checked before the frame changes: a range outside the memory is copied (as
        // zeros, the way `fill_payload` treats it).
        let Some(mut e) = External::new(mem, off, len, 0) else {
            return false;
        };
        let Some(at) = w.push_hole(control) else {
            return false;
        };
        e.at = at;
        self.taken = Some(e);
        true
    }
}

/// The messages one frame carries, counted as they go in.
#[derive(Default)]
struct Run {
    sent: u32,
    resent: u32,
    bytes: u64,
    /// Payload bytes of the retransmitted ones.
    resent_bytes: u64,
    /// Bytes of first transmissions (the in-flight cap counts them), and the sequence
    /// number after the last.
    new_bytes: u64,
    new_end: u32,
}

impl Run {
    /// Message `seq` of `len` payload bytes went into the frame.
    #[inline]
    fn note(&mut self, conn: &mut ConnContext, seq: u32, len: u32, now: u64) {
        self.sent += 1;
        self.bytes += u64::from(len);
        if seq_lt(seq, conn.tx_sent_high) {
            self.resent += 1;
            self.resent_bytes += u64::from(len);
        } else {
            conn.tx_sent_high = seq.wrapping_add(1);
        }
        if conn.tx.on_sent(seq, now) {
            self.new_bytes += u64::from(len) + wire::CONTROL_LEN as u64;
            self.new_end = seq.wrapping_add(1);
        }
    }
}

/// A NAK from the peer: an error for the request that message belongs to, or — for
/// "receiver not ready" (the peer's host must repair a fault) — a pause and a rewind
/// of the transmit cursor, bounded by the RNR retry limit.
pub(super) fn apply_nak(conn: &mut ConnContext, seq: u32, code: u32, now: u64, stats: &mut Stats) {
    let Nak { status, reason } = Nak::from_code(code);
    if status == RemoteStatus::PageFault {
        stats.rnr_rx += 1;
        if seq_lt(seq, conn.tx.acked()) || !seq_lt(seq, conn.tx.next_seq()) {
            return;
        }
        conn.rnr_retries = conn.rnr_retries.saturating_add(1);
        if conn.rnr_retries > conn.rnr_retry_limit || conn.rnr_retries == u16::MAX {
            // (Its bytes leave the peer's flight with the section's count.)
            fail_connection(conn, Some(WcStatus::RnrRetryExceeded));
            return;
        }
        let backoff = conn.rnr_timeout << conn.rnr_retries.min(6);
        conn.rnr_until = now + backoff;
        conn.tx.rewind_to(seq, now + backoff);
        return;
    }
    if let Some((idx, _)) = conn.locate(seq) {
        let p = &mut conn.inflight[idx];
        if p.status == WcStatus::Success {
            p.status = WcStatus::from_remote(status);
            p.reason = reason;
        }
    }
}

/// An acknowledgement from the peer: everything before `ack` arrived and ran, and the
/// messages in `sack` (beyond it) arrived.
pub(crate) fn process_ack(
    conn: &mut ConnContext,
    ack: u32,
    sack: &SeqBits,
    now: u64,
    waits: &[u64],
    paths: &mut impl crate::reliability::OnDelivery,
) -> crate::reliability::Acked {
    let acked = conn.tx.on_ack_paths(ack, sack, now, waits, paths);
    if acked.to != acked.from {
        conn.rnr_retries = 0;
    }
    acked
}

/// Completes, in posting order, the requests that are acknowledged and ready.
pub(crate) fn complete_ready(conn: &mut ConnContext) {
    if !conn.unreported.is_empty() {
        report_waiting(conn);
    }
    while let Some(p) = conn.inflight.front() {
        let end = p.first_seq.wrapping_add(p.segments);
        if seq_lt(conn.tx.acked(), end) || !p.ready() {
            break;
        }
        // Read in place: the request itself is not moved out.
        let wc =
            completion_for(&p.work, p.status, (conn.number, conn.peer_conn)).map(|wc| Completion {
                remote_reason: p.reason,
                ..wc
            });
        conn.inflight.pop_front();
        if let Some(wc) = wc {
            report(conn, wc);
        }
    }
}

/// Which of the first 64 departed connections nothing but the node holds (bit i:
/// `departed[i]`), read before the ring is drained.
#[cold]
fn unheld_departed(departed: &[std::sync::Arc<crate::connection::ConnShared>]) -> u64 {
    let mut unheld = 0u64;
    for (i, d) in departed.iter().take(64).enumerate() {
        if std::sync::Arc::strong_count(d) == 1 {
            unheld |= 1 << i;
        }
    }
    // Pairs with the release of the application's last reference: its posts are on
    // the ring for the drain that follows.
    std::sync::atomic::fence(Ordering::Acquire);
    unheld
}

/// A request posted on a connection that was removed before the worker took it: its
/// place in the send queue is given back and it completes `Flushed` on the
/// connection's completion queue (a signaled one into the slot it reserved; an
/// unsignaled one, which reserved none, waits for room in the node's `stranded` list
/// when there is none), as a request queued at the close would have.
#[cold]
fn flush_orphan(conn: &crate::connection::ConnShared, wr: &Work, stranded: &mut Stranded) {
    conn.dequeued(1);
    let peer = conn.peer_conn.load(Ordering::Relaxed) as u32;
    if let Some(wc) = completion_for(wr, WcStatus::Flushed, (conn.number, peer)) {
        strand(stranded, &conn.cq, wc);
    }
}

/// Completions whose connection is gone, waiting for room in their queues, oldest
/// first (`Node::stranded`).
pub(crate) type Stranded = std::collections::VecDeque<(Arc<CqShared>, Completion)>;

/// Reports a completion whose connection is gone: onto its queue, or — when the queue
/// is full, or completions of that queue already wait — behind them in `stranded`,
/// which the node's timer retries ([`Node::report_stranded`]).
#[cold]
pub(crate) fn strand(stranded: &mut Stranded, cq: &Arc<CqShared>, wc: Completion) {
    let behind = stranded.iter().any(|(q, _)| Arc::ptr_eq(q, cq));
    let wc = if behind {
        wc
    } else {
        match cq.push(wc) {
            Ok(()) => return,
            Err(wc) => wc,
        }
    };
    cq.waits.fetch_add(1, Ordering::Relaxed);
    stranded.push_back((cq.clone(), wc));
}

impl Node {
    /// Moves the completions in `stranded` onto their queues, in order per queue, as
    /// far as each has room. The completions of a queue that nothing but this list
    /// holds any more (the application let go of it and of its connections) are
    /// dropped and counted in its `overflows`: nothing could poll them.
    #[cold]
    pub(crate) fn report_stranded(&mut self) {
        let all = std::mem::take(&mut self.stranded);
        // Per queue: the entries of it still held here, and whether it has taken
        // every one of them so far this pass.
        let mut queues: Vec<(*const CqShared, usize, bool)> = Vec::new();
        for (cq, _) in &all {
            let p = Arc::as_ptr(cq);
            match queues.iter_mut().find(|q| q.0 == p) {
                Some(q) => q.1 += 1,
                None => queues.push((p, 1, true)),
            }
        }
        for (cq, wc) in all {
            let q = queues
                .iter_mut()
                .find(|q| q.0 == Arc::as_ptr(&cq))
                .expect("counted above");
            if Arc::strong_count(&cq) <= q.1 {
                cq.overflows.fetch_add(1, Ordering::Relaxed);
                drop(cq);
                q.1 -= 1;
                continue;
            }
            if q.2 {
                match cq.push(wc) {
                    Ok(()) => {
                        drop(cq);
                        q.1 -= 1;
                        continue;
                    }
                    Err(wc) => {
                        q.2 = false;
                        self.stranded.push_back((cq, wc));
                    }
                }
            } else {
                self.stranded.push_back((cq, wc));
            }
        }
    }

    /// Completions waiting for room in their queues after their connections went
    /// (retried every timer tick).
    pub fn stranded_completions(&self) -> usize {
        self.stranded.len()
    }
}

/// Reports a request's completion to the application, when it is owed one (signaled,
/// or failed): onto the completion queue, or — when the queue is full — into the
/// connection's list of completions waiting for room, behind any already there.
fn complete(conn: &mut ConnContext, wr: &Work, status: WcStatus) {
    if let Some(wc) = completion_for(wr, status, (conn.number, conn.peer_conn)) {
        report(conn, wc);
    }
}

/// The completion a request owes the application with this status, if any; `conn`: the
/// connection's local and peer numbers.
#[inline]
fn completion_for(wr: &Work, status: WcStatus, conn: (u32, u32)) -> Option<Completion> {
    if wr.is_reply() {
        return None; // ours, not the application's
    }
    let signaled = wr.flags() & WR_SIGNALED != 0;
    (status != WcStatus::Success || signaled).then(|| Completion {
        wr_id: wr.wr_id(),
        status,
        opcode: wr.opcode(),
        byte_len: wr.len(),
        conn: conn.0,
        peer_conn: conn.1,
        signaled,
        remote_reason: None,
    })
}

/// Puts a completion on the connection's queue, or behind those waiting for room
/// (each one that waits is counted in the queue's `waits`).
#[inline]
fn report(conn: &mut ConnContext, wc: Completion) {
    let wc = if conn.unreported.is_empty() {
        match conn.shared.cq.push(wc) {
            Ok(()) => return,
            Err(wc) => wc,
        }
    } else {
        wc
    };
    conn.shared.cq.waits.fetch_add(1, Ordering::Relaxed);
    conn.unreported.push_back(wc);
}

/// Moves the completions that waited for room onto the completion queue, in order, as
/// far as it has room (out of line: only after the application let its queue fill).
#[inline(never)]
pub(crate) fn report_waiting(conn: &mut ConnContext) {
    while let Some(wc) = conn.unreported.pop_front() {
        if let Err(wc) = conn.shared.cq.push(wc) {
            conn.unreported.push_front(wc);
            break;
        }
    }
}

/// The status of a request outstanding on a connection that can no longer complete
/// it: the error a NAK of the peer's gave it already (it completes as it would have),
/// else `Unacknowledged` when a message of it was transmitted (it may have run at the
/// peer) and `Flushed` when none ever was (it certainly did not).
#[inline]
fn outstanding_status(conn: &ConnContext, p: &Pending) -> (WcStatus, Option<DropReason>) {
    if p.status != WcStatus::Success {
        (p.status, p.reason)
    } else if seq_lt(p.first_seq, conn.tx_sent_high) {
        (WcStatus::Unacknowledged, None)
    } else {
        (WcStatus::Flushed, None)
    }
}

/// Completes everything still queued on a connection that is no longer usable: the
/// requests in flight as [`outstanding_status`] says, those not yet taken into flight
/// `Flushed`.
fn flush_queue(conn: &mut ConnContext) {
    while let Some(p) = conn.inflight.pop_front() {
        let (status, reason) = outstanding_status(conn, &p);
        if let Some(wc) = completion_for(&p.work, status, (conn.number, conn.peer_conn)) {
            report(
                conn,
                Completion {
                    remote_reason: reason,
                    ..wc
                },
            );
        }
    }
    let queued = conn.sendq.len() as u32;
    while let Some(wr) = conn.sendq.pop_front() {
        complete(conn, &wr, WcStatus::Flushed);
    }
    if queued > 0 {
        conn.shared.dequeued(queued);
    }
}

/// Moves a connection to error and completes everything outstanding on it: with
/// `failed` (the connection failed: retries or receiver-not-ready back-offs ran out)
/// the oldest request completes with that status; every other one (all of them
/// without: a close) as [`flush_queue`] says — `Unacknowledged` when it was
/// transmitted, `Flushed` when it never was.
///
/// Returns the bytes it had in flight (no longer counted: the caller takes them off
/// its peer's congestion window, `cc::PeerCc::forget`).
pub(crate) fn fail_connection(conn: &mut ConnContext, failed: Option<WcStatus>) -> u64 {
    let flight = conn.tx.drop_flight();
    conn.state = ConnState::Error;
    conn.shared.set_state(ConnState::Error);
    if let Some(status) = failed {
        if let Some(p) = conn.inflight.pop_front() {
            complete(conn, &p.work, status);
        }
    }
    flush_queue(conn);
    flight
}
