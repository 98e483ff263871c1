//! Frames in: sequence and key checks, the operation logic, replies, events, faults.
//!
//! Each message of a connection runs in sequence order. Operation logic first *plans*
//! the message (every check, every new register value, with no side effect), then the
//! node checks what only it can (room on the event queue), then *commits*. A plan
//! that traps with an error refuses the message (NAK, counter, optional trap event); a
//! plan that faults (page not present) or an event queue that is full exceptions the
//! connection: the message is kept, later ones wait (the sender is told "receiver not
//! ready"), other connections go on, and [`Node::resume`] runs the kept message
//! exactly once after the host's repair.

use super::conn::{echoed_base, ConnContext, Held, RequestBase, Stored};
use crate::connection::ConnState;
use crate::events::{Event, EventKind, EventRing};
use crate::message;
use crate::oplogic::{
    self, DropReason, EndpointAccess, Nak, Plan, RegContext, RemoteStatus, SeqPlan, TlbAccess,
    TokenEvent, Trap,
};
use crate::reliability::BDP_MIN_FRAME;
use crate::reliability::{Arrival, SeqBits};
use crate::secure::Refusal;
use crate::tables::{EndpointTable, RegisterFile};
use crate::tlb::Tlb;
use crate::wire::cell::flags as cflags;
use crate::wire::compound::COMPOUND_LEN;
use crate::wire::underlay::ECN_MASK;
use crate::wire::{self, hflags, op, ControlRepr, FrameView, Message, WireError};
use crate::wr::{Pending, WcStatus};

use super::{send, wire_drop_reason, Node, Stats, DUPLICATE_WINDOW};

/// Why a resume was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    #[error("connection {0} does not exist")]
    NoConnection(u32),
    #[error("connection {0} is not exceptioned")]
    NotExceptioned(u32),
    /// Why, as the receiver's counters record it (`PageNotPresent`,
    /// `InstructionNotLoaded`, ...).
    #[error("the kept message still faults: {0}")]
    StillFaulting(DropReason),
}

/// What running one message came to.
enum Ran {
    Done,
    /// Refused with an error trap (already counted and NAKed).
    Refused,
    /// Kept for the host (fault): stop processing this connection.
    Held,
    /// Kept in `conn.reorder` at its sequence number, not run: it would store into the
    /// range of a read reply the peer has not acknowledged yet ([`ReadReplies`]); it
    /// runs when the acknowledgement arrives ([`run_waiting`]).
    ///
    /// [`ReadReplies`]: crate::connection::ReadReplies
    Wait,
    /// Not run: it would be refused while the record of refusals the peer has not
    /// confirmed is full ([`crate::connection::Refusals`]). [`deliver`] keeps it as
    /// for [`Ran::Wait`]; it runs when the peer's echo frees room.
    Deferred,
}

/// The pieces of the node a message may touch, borrowed apart from the connection.
struct Exec<'a> {
    endpoints: &'a EndpointTable,
    regs: &'a mut RegisterFile,
    code: &'a crate::tables::InstructionMemory,
    tokens: &'a mut crate::tables::PayloadTable,
    tlb: &'a mut Tlb,
    queues: &'a [Option<super::EndpointQueues>],
    stats: &'a mut Stats,
    segment_max: u32,
    /// What the peer's credit is multiplied by for this connection's own cap: with
    /// congestion control the peer's receiver grants the peer a share that its
    /// connections split (the peer's window holds the sum), without it each
    /// connection its share of the receive queue.
    credit_scale: u64,
    /// With congestion control, the period a credit is granted for (the receiver's
    /// drain rate is a credit per period), ticks; 0 without. A receiver that holds
    /// its acknowledgements keeps draining meanwhile: the connection's cap grows by
    /// what it drains in the hold ([`op::HOLD`]).
    credit_period: u64,
    hz: u64,
    now: u64,
}

/// What the messages of one frame came to, gathered as they run: the frame's ack
/// and credit step and the host's notifications act on it afterwards.
#[derive(Default)]
struct Intake {
    /// Sequence number of the frame's next message.
    seq: u32,
    /// Requests whose last message ran (the application's arrival count).
    arrivals: u64,
    /// Whether the frame asks for an acknowledgement (a data message, a NAK we owe, a
    /// liveness probe).
    owe_ack: bool,
    /// The latest compound descriptor of this frame (for COMPOUND_REPEAT messages).
    frame_desc: Option<[u8; COMPOUND_LEN]>,
    /// The selective part of the peer's acknowledgement, when the frame carries one.
    sack: SeqBits,
    /// What the frame's acknowledgement did to what we sent (congestion control's
    /// signals).
    acked: crate::reliability::Acked,
    /// How long the peer held the acknowledgement ([`op::HOLD`]), ticks (0: not
    /// said, or not of a frame the acknowledgement samples).
    hold: u64,
}

/// Whether the frame's messages go on after one of them.
enum Flow {
    Next,
    Stop,
}

impl Node {
    /// A received frame (after the fault layer), through the pipeline: validate the
    /// whole frame, then each of its sections in order ([`Node::receive_section`]).
    pub(super) fn receive(&mut self, data: &[u8], now: u64) {
        let Some(mut frame) = self.validate(data) else {
            return;
        };
        // A frame of many connections' sections (a cell train) would miss on each
        // connection's state in turn: the index bucket of the section after next and
        // the state of the next one are fetched while this one is worked on.
        let mut next = frame.next_section();
        let mut after = next.as_ref().and_then(FrameView::next_section);
        loop {
            if let Some(a) = &after {
                self.conns.prefetch_index(a.header.dst_conn);
            }
            if let Some(n) = &next {
                self.conns.prefetch(n.header.dst_conn);
            }
            self.receive_section(&frame, now);
            match next {
                Some(n) => {
                    frame = n;
                    next = after;
                    after = next.as_ref().and_then(FrameView::next_section);
                }
                None => return,
            }
        }
    }

    /// One section of a frame: connection and key → each message through reliability
    /// and delivery → the section's acknowledgement and credits → what the host is
    /// told. A section that fails (unknown connection, wrong key) costs only itself.
    fn receive_section(&mut self, frame: &FrameView<'_>, now: u64) {
        if frame.header.flags & hflags::CM != 0 || frame.header.dst_conn == 0 {
            if frame.header.dst_conn != 0 {
                // Management travels on connection 0 only.
                return self.stats.drop_for(DropReason::BadFlags);
            }
            self.handle_cm(frame);
            return;
        }
        let Some(slot) = self.lookup(frame) else {
            return;
        };
        let conn = self.conns.get_mut(slot).expect("slot from lookup");
        // Step 3, a secure connection's seal: nothing of the section is looked at
        // before it opens.
        // (A reference, not a copy: the view is some 140 bytes.)
        let opened;
        let frame = match (conn.secure.as_mut(), frame.seal()) {
            (None, None) => frame,
            (Some(session), Some(seal)) => {
                let n = frame.cells().len();
                match session.open(frame.head(), frame.cells(), seal, &mut self.opened[..n]) {
                    Ok(()) => self.stats.opened_rx += 1,
                    Err(Refusal::Auth) => return self.stats.drop_for(DropReason::AuthFailed),
                    Err(Refusal::Replay) => return self.stats.drop_for(DropReason::Replayed),
                }
                opened = frame.with_cells(&self.opened[..n]);
                &opened
            }
            _ => return self.stats.drop_for(DropReason::NotSealed),
        };
        // A frame that passed (opened, when sealed) confirms a connection accepted
        // here whose peer had not shown it finished the handshake.
        let confirmed = (!self.unconfirmed.is_empty()).then_some(conn.number);
        if frame.underlay.src_mac != conn.peer_mac && !self.nodes.is_static(conn.peer) {
            // The peer (or its router) moved to another MAC: learned only from a frame
            // of this connection that passed every check, never from ARP alone.
            conn.peer_mac = frame.underlay.src_mac;
            self.stats.peer_mac_changes += 1;
        }
        if frame.header.cells > 0 {
            // ECN: the echo of the last data frame's mark rides on our acknowledgements.
            conn.ce_last = frame.underlay.traffic_class & ECN_MASK == ECN_MASK;
            self.stats.ce_rx += u64::from(conn.ce_last);
        }
        if frame.header.flags & hflags::ECE != 0 {
            self.stats.ecn_echoes_rx += 1;
        }
        conn.last_rx = now;
        conn.probes_unanswered = 0;
        // Heard: the peer answered (a frame of its own that is not a probe: a new
        // listener asks for our first frame until it has it, so its probe says nothing
        // of whether ours arrived).
        if !conn.heard && frame.header.flags & hflags::ACK_REQ == 0 {
            conn.heard = true;
            conn.shared
                .heard
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let credit_scale = if self.cc.params.enabled {
            self.peer_conns
                .get(conn.peer.0 as usize)
                .map_or(1, |&k| u64::from(k.max(1)))
        } else {
            1
        };
        let mut ex = Exec {
            endpoints: &self.endpoints,
            regs: &mut self.regs,
            code: &self.instructions,
            tokens: &mut self.tokens,
            tlb: &mut self.tlb,
            queues: &self.event_queues,
            stats: &mut self.stats,
            segment_max: self.segment_max,
            credit_scale,
            credit_period: self.cc.params.credit_rate_period(),
            hz: self.hz,
            now,
        };
        // A liveness probe asks for an acknowledgement whatever the frame carries.
        let probe = frame.header.flags & hflags::ACK_REQ != 0;
        if probe && conn.inflight.is_empty() {
            super::timers::release_idle_memory(conn); // both sides idle
        }
        let mut intake = Intake {
            seq: frame.header.seq,
            owe_ack: probe,
            ..Intake::default()
        };
        if !conn.refusals.is_empty() {
            take_echo(conn, frame, &mut intake, &mut ex);
        }
        let flight = conn.tx.bytes_in_flight();
        for msg in frame.messages() {
            if let Flow::Stop = take_message(conn, msg, &mut intake, &mut ex) {
                break;
            }
        }
        let sprayed = self.cc.params.paths > 1;
        if frame.header.flags & hflags::ACK != 0 {
            let peer_cc = self.cc.get(conn.peer);
            let waits = match sprayed {
                true => peer_cc.map_or(&[][..], |c| &c.waits[..]),
                false => &[],
            };
            let held = peer_cc.map_or(0, |c| c.hold());
            take_ack(
                conn,
                frame,
                &mut intake,
                &mut ex,
                (waits, held),
                &mut self.path_events,
            );
        }
        let left = flight.saturating_sub(conn.tx.bytes_in_flight());
        let peer = conn.peer;
        // (What congestion control needs of the header, read while the view is here.)
        let bulk = usize::from(frame.header.cells) * wire::CELL_LEN >= BDP_MIN_FRAME as usize;
        let (ece, credits) = (frame.header.flags & hflags::ECE != 0, frame.header.credits);
        let hold = intake.hold;
        notify_host(conn, &intake);
        if intake.owe_ack {
            self.owed_frames = self.owed_frames.saturating_add(1);
            if !conn.ack_pending {
                conn.ack_pending = true;
                self.ack_new.push(slot);
            }
        }
        if self.cc.params.enabled && bulk {
            // A bulk section: its sender shares this receiver's budget (RCCC).
            self.saw_sender(peer, now);
        }
        if self.cc.params.enabled && (left != 0 || intake.acked.lost != 0) {
            // Acknowledged (or rewound: a receiver-not-ready NAK) bytes leave the
            // peer's flight; the acknowledgement's signals go to its law.
            let (params, a, k) = (self.cc.params, intake.acked, credit_scale);
            let cc = self.cc.peer(peer);
            cc.forget(left);
            if credits != 0 {
                cc.on_credit(&params, u64::from(credits) * wire::CREDIT_UNIT * k);
            }
            if sprayed {
                self.path_events.apply(cc, &params, now, hold, ece);
            }
            cc.on_ack(&params, now, a.bytes, (a.rtt, hold), ece, a.lost != 0);
            self.unpark(peer, now);
        } else if sprayed && !self.path_events.is_empty() {
            let params = self.cc.params;
            self.path_events
                .apply(self.cc.peer(peer), &params, now, hold, ece);
        }
        self.rearm(slot);
        if let Some(number) = confirmed {
            self.confirmed(number);
        }
    }

    /// Step 1, validate: a frame that parses (lengths, checksums, version) and is
    /// addressed to this node, counted; anything else is dropped with its reason.
    #[inline]
    fn validate<'a>(&mut self, data: &'a [u8]) -> Option<FrameView<'a>> {
        let frame = match FrameView::parse(data) {
            Ok(f) if self.cfg.vlan.is_none() => f,
            Err(WireError::BadEthertype(wire::vlan::ETHERTYPE_VLAN)) => self.untag(data)?,
            Err(WireError::BadEthertype(_) | WireError::BadIpProtocol(_))
                if self.cfg.vlan.is_none() =>
            {
                self.receive_other(data);
                return None;
            }
            // Untagged, to a node on a VLAN: another segment's.
            Ok(_) | Err(WireError::BadEthertype(_) | WireError::BadIpProtocol(_)) => {
                self.stats.drop_for(DropReason::NotOurs);
                return None;
            }
            Err(e) => {
                self.stats.drop_for(wire_drop_reason(&e));
                return None;
            }
        };
        if frame.underlay.dst_ip != self.cfg.local.ip
            || self.cfg.neigh.resolve && frame.underlay.dst_mac != self.cfg.local.mac
        {
            // Promiscuous ports on a shared segment (a bridge floods unknown MACs) see
            // frames for other nodes: never act on them.
            self.stats.drop_for(DropReason::NotOurs);
            return None;
        }
        self.stats.frames_rx += 1;
        self.stats.cells_rx += u64::from(frame.frame_cells());
        self.stats.bytes_rx += data.len() as u64;
        Some(frame)
    }

    /// A tagged frame: one of this node's VLAN parsed from behind its tag (its MACs
    /// read from the front); any other VLAN's, or any tagged frame when the node is
    /// on none, is not ours.
    #[cold]
    fn untag<'a>(&mut self, data: &'a [u8]) -> Option<FrameView<'a>> {
        let ours = wire::vlan::tag_of(data).map(wire::vlan::vid);
        if ours.is_none() || ours != self.cfg.vlan {
            self.stats.drop_for(DropReason::NotOurs);
            return None;
        }
        let inner = &data[wire::vlan::VLAN_LEN..];
        match FrameView::parse(inner) {
            Ok(mut f) => {
                f.underlay.dst_mac = wire::array(data, 0..6);
                f.underlay.src_mac = wire::array(data, 6..12);
                Some(f)
            }
            Err(WireError::BadEthertype(_) | WireError::BadIpProtocol(_)) => {
                self.receive_other(&wire::vlan::untagged(data));
                None
            }
            Err(e) => {
                self.stats.drop_for(wire_drop_reason(&e));
                None
            }
        }
    }

    /// Step 2, connection and key: the slot of the live connection the frame names,
    /// if its key matches.
    #[inline]
    fn lookup(&mut self, frame: &FrameView<'_>) -> Option<usize> {
        let Some(slot) = self.conns.slot_of(frame.header.dst_conn) else {
            self.stats.drop_for(DropReason::UnknownConnection);
            return None;
        };
        let conn = self.conns.get_mut(slot).expect("slot from map");
        if frame.header.key != conn.key {
            self.stats.drop_for(DropReason::WrongKey);
            return None;
        }
        if !conn.state.is_up() {
            self.stats.drop_for(DropReason::UnknownConnection);
            return None;
        }
        Some(slot)
    }

    /// Runs the message a fault kept, after the host repaired what it needed (mapped
    /// the page, drained the event queue). It commits exactly once, in order; later
    /// messages follow as the sender retransmits them.
    pub fn resume(&mut self, number: u32) -> Result<(), ResumeError> {
        let slot = self
            .conns
            .slot_of(number)
            .ok_or(ResumeError::NoConnection(number))?;
        let now = self.now;
        let conn = self.conns.get_mut(slot).expect("slot from map");
        if conn.state != ConnState::Exceptioned {
            return Err(ResumeError::NotExceptioned(number));
        }
        let held = conn
            .held
            .take()
            .expect("an exceptioned connection keeps its message");
        let mut ex = Exec {
            endpoints: &self.endpoints,
            regs: &mut self.regs,
            code: &self.instructions,
            tokens: &mut self.tokens,
            tlb: &mut self.tlb,
            queues: &self.event_queues,
            stats: &mut self.stats,
            segment_max: self.segment_max,
            credit_scale: 1,
            credit_period: self.cc.params.credit_rate_period(),
            hz: self.hz,
            now,
        };
        conn.state = ConnState::Normal;
        let frame_desc = None;
        let ran = deliver(
            conn,
            held.seq,
            &held.control,
            &held.payload,
            frame_desc,
            &mut ex,
        );
        if let Ran::Held = ran {
            let trap = conn.held.as_ref().map(|h| h.trap).unwrap_or(held.trap);
            return Err(ResumeError::StillFaulting(trap.reason()));
        }
        conn.shared.set_state(ConnState::Normal);
        let mut arrivals = 0;
        if !matches!(ran, Ran::Wait | Ran::Deferred) {
            arrivals += u64::from(held.control.flags & cflags::LAST != 0);
            // The messages kept ahead of it run now, in order.
            arrivals += advance(conn, &mut ex);
        }
        publish_arrivals(conn, arrivals);
        if !conn.ack_pending {
            conn.ack_pending = true;
            self.ack_new.push(slot);
        }
        self.rearm(slot);
        Ok(())
    }
}

/// Step 3, one message of a frame: acknowledgement parts (NAK, SACK) apply to what we
/// sent; anything else takes a sequence number and goes through reliability
/// (in order, duplicate, ahead of a gap) to delivery.
#[inline]
fn take_message(
    conn: &mut ConnContext,
    msg: Result<Message<'_>, WireError>,
    intake: &mut Intake,
    ex: &mut Exec<'_>,
) -> Flow {
    let m = match msg {
        Ok(m) => m,
        Err(e) => {
            undecodable(conn, intake, &e, ex);
            return Flow::Stop;
        }
    };
    if m.control.flags & cflags::COMPOUND != 0 {
        if let Some(d) = m.payload.get(..COMPOUND_LEN) {
            intake.frame_desc = d.try_into().ok();
        }
    }
    match m.control.opcode {
        op::NAK => {
            ex.stats.naks_rx += 1;
            send::apply_nak(conn, m.control.operand, m.control.index, ex.now, ex.stats);
            return Flow::Next;
        }
        op::SACK => {
            intake
                .sack
                .set_word32(m.control.operand as usize, m.control.index);
            return Flow::Next;
        }
        op::HOLD => {
            intake.hold = crate::ticks::ns_to_ticks(u64::from(m.control.operand), ex.hz);
            return Flow::Next;
        }
        _ => {}
    }
    let this = intake.seq;
    intake.seq = this.wrapping_add(1);
    intake.owe_ack = true;
    match conn.rx.classify(this, DUPLICATE_WINDOW) {
        Arrival::InOrder => take_in_order(conn, this, &m.control, m.payload, intake, ex),
        Arrival::Duplicate => {
            // Already executed or kept (a retransmission): acknowledge again.
            ex.stats.duplicates += 1;
            Flow::Next
        }
        Arrival::OutOfWindow => {
            ex.stats.drop_for(DropReason::OutOfSequence);
            Flow::Stop
        }
        Arrival::Ahead { offset } => {
            if conn.state == ConnState::Normal {
                keep_ahead(conn, this, offset, &m.control, m.payload, intake, ex);
            }
            Flow::Next
        }
    }
}

/// The rest of a frame cannot be decoded: the message at this sequence number is
/// refused (once) and the frame ends.
#[cold]
fn undecodable(conn: &mut ConnContext, intake: &mut Intake, e: &WireError, ex: &mut Exec<'_>) {
    let reason = wire_drop_reason(e);
    ex.stats.drop_for(reason);
    if intake.seq == conn.rx.expected()
        && conn.state == ConnState::Normal
        && conn.refusals.push(
            intake.seq,
            Nak::new(RemoteStatus::RemoteOperationError, reason),
        )
    {
        intake.arrivals += advance(conn, ex);
        intake.owe_ack = true;
    }
}

/// The message the receiver expects: delivered (unless the connection is exceptioned:
/// it waits behind the kept one), then the receive state moves on.
#[inline]
fn take_in_order(
    conn: &mut ConnContext,
    this: u32,
    control: &ControlRepr,
    payload: &[u8],
    intake: &mut Intake,
    ex: &mut Exec<'_>,
) -> Flow {
    if conn.state == ConnState::Exceptioned {
        // Later messages wait behind the kept one; the sender is told again.
        ex.stats.drop_for(DropReason::HeldBack);
        if conn.naks.is_empty() {
            let nak = conn
                .held
                .as_ref()
                .map_or(RemoteStatus::PageFault.into(), |h| h.trap.nak());
            conn.push_nak(conn.rx.expected(), nak);
        }
        return Flow::Stop;
    }
    match deliver(conn, this, control, payload, intake.frame_desc.as_ref(), ex) {
        Ran::Held => return Flow::Stop,
        // Kept; the messages after it are kept ahead of it.
        Ran::Wait | Ran::Deferred => return Flow::Next,
        Ran::Done | Ran::Refused => {}
    }
    if !conn.reorder.is_empty() {
        conn.reorder.remove(&this); // a copy kept when it had to wait
    }
    if control.flags & cflags::LAST != 0 {
        intake.arrivals += 1;
    }
    intake.arrivals += advance(conn, ex);
    Flow::Next
}

/// A message ahead of a gap: a segment whose request started at or before the gap is
/// placed now; anything else is kept (a copy, the loss path) and run when the gap
/// fills. One loss costs one retransmission either way.
#[inline(never)]
fn keep_ahead(
    conn: &mut ConnContext,
    this: u32,
    offset: u32,
    control: &ControlRepr,
    payload: &[u8],
    intake: &Intake,
    ex: &mut Exec<'_>,
) {
    let stored = if place_ahead(conn, this, control, payload, ex) {
        Stored {
            control: *control,
            payload: Vec::new(),
            frame_desc: None,
            placed: true,
        }
    } else {
        let len = (control.length as usize).min(payload.len());
        let repeat = control.flags & cflags::COMPOUND_REPEAT != 0;
        Stored {
            control: *control,
            payload: payload[..len].to_vec(),
            frame_desc: if repeat { intake.frame_desc } else { None },
            placed: false,
        }
    };
    conn.reorder.insert(this, stored);
    conn.rx.keep_ahead(offset);
    ex.stats.reordered += 1;
}

/// Before the messages: the peer's echo of how far it was acknowledged confirms the
/// refusals it was told of; a message deferred for want of room in that record runs.
#[cold]
fn take_echo(
    conn: &mut ConnContext,
    frame: &FrameView<'_>,
    intake: &mut Intake,
    ex: &mut Exec<'_>,
) {
    let base = echoed_base(conn.rx.expected(), frame.header.acked);
    if conn.refusals.confirm(base) && !conn.reorder.is_empty() {
        if let Some(n) = run_waiting(conn, ex) {
            intake.owe_ack = true;
            intake.arrivals += n;
        }
    }
}

/// Step 4, the frame's acknowledgement: what we sent is acknowledged (cumulatively and
/// selectively), the peer's credits apply, and a message kept waiting for a read
/// reply's acknowledgement may run now.
#[inline]
fn take_ack(
    conn: &mut ConnContext,
    frame: &FrameView<'_>,
    intake: &mut Intake,
    ex: &mut Exec<'_>,
    (waits, held): (&[u64], u64),
    paths: &mut super::cc::PathEvents,
) {
    intake.acked = if waits.is_empty() {
        send::process_ack(conn, frame.header.ack, &intake.sack, ex.now, &[], &mut ())
    } else {
        send::process_ack(conn, frame.header.ack, &intake.sack, ex.now, waits, paths)
    };
    if intake.acked.rtt == 0 || intake.hold >= intake.acked.rtt {
        // The hold is of the frame the acknowledgement samples: none without a
        // sample, and never as long as the round trip it is part of (a hold that is
        // says nothing this sender can use).
        intake.hold = 0;
    }
    let mut credit = u64::from(frame.header.credits) * wire::CREDIT_UNIT * ex.credit_scale;
    // (By the peer's recent hold, `held`, the same for all its connections, not by
    // this acknowledgement's alone: a cap that jumped with each hold would let one
    // connection run ahead of the others.)
    let hold = intake.hold.max(held);
    if ex.credit_period != 0 && hold != 0 {
        let more = u128::from(credit) * u128::from(hold) / u128::from(ex.credit_period);
        credit += more as u64;
    }
    conn.tx.on_credit(credit);
    if !conn.read_replies.is_empty() {
        let n = run_waiting(conn, ex);
        intake.owe_ack |= n.is_some();
        intake.arrivals += n.unwrap_or(0);
    }
}

/// Step 5, the host: arrivals published, completions of acknowledged requests posted.
#[inline]
fn notify_host(conn: &mut ConnContext, intake: &Intake) {
    if intake.arrivals > 0 {
        publish_arrivals(conn, intake.arrivals);
    }
    send::complete_ready(conn);
}

/// Adds to the connection's arrival count. The node is the only writer: a plain load
/// and a release store (no locked instruction) publish the count after the deposits
/// it counts.
#[inline]
fn publish_arrivals(conn: &ConnContext, arrivals: u64) {
    let a = &conn.shared.arrivals;
    a.store(
        a.load(std::sync::atomic::Ordering::Relaxed) + arrivals,
        std::sync::atomic::Ordering::Release,
    );
}

/// Runs the message the receiver expects: a reply to one of our requests, or an
/// operation.
fn deliver(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
    ex: &mut Exec<'_>,
) -> Ran {
    if control.flags & cflags::REPLY != 0 {
        ex.stats.msgs_rx += 1;
        if let Err(r) = take_reply(conn, control, payload, ex.endpoints) {
            ex.stats.drop_for(r);
        }
        return Ran::Done;
    }
    match run_message(conn, seq, control, payload, frame_desc, ex) {
        // Not run: kept, and counted when it runs.
        Ran::Deferred => wait_in_order(conn, seq, control, payload, frame_desc),
        ran => {
            ex.stats.msgs_rx += 1;
            ran
        }
    }
}

/// The expected message ran: moves the receive state on, then runs the messages kept
/// ahead of the gap that directly follow, in order. Returns the arrivals among them.
#[inline]
fn advance(conn: &mut ConnContext, ex: &mut Exec<'_>) -> u64 {
    if conn.rx.executed() {
        run_kept(conn, ex)
    } else {
        0
    }
}

/// The messages kept ahead of a gap that now directly follow the executed ones, run in
/// order (the loss path, out of line). Returns the arrivals among them.
#[inline(never)]
fn run_kept(conn: &mut ConnContext, ex: &mut Exec<'_>) -> u64 {
    let mut arrivals = 0;
    let mut next_kept = true;
    while next_kept {
        let seq = conn.rx.expected();
        let Some(st) = conn.reorder.remove(&seq) else {
            break;
        };
        if st.placed {
            // Placed on arrival (never a request's last segment): nothing left to do.
            next_kept = conn.rx.executed();
            continue;
        }
        if let Ran::Held | Ran::Wait | Ran::Deferred = deliver_kept(conn, seq, &st, ex) {
            return arrivals;
        }
        if st.control.flags & cflags::LAST != 0 {
            arrivals += 1;
        }
        next_kept = conn.rx.executed();
    }
    arrivals
}

/// Runs message `seq` that was kept (ahead of a gap, or waiting for a read reply's
/// acknowledgement).
fn deliver_kept(conn: &mut ConnContext, seq: u32, st: &Stored, ex: &mut Exec<'_>) -> Ran {
    deliver(
        conn,
        seq,
        &st.control,
        &st.payload,
        st.frame_desc.as_ref(),
        ex,
    )
}

/// After an acknowledgement: runs the expected message if it was kept waiting for a
/// read reply to be acknowledged and no longer has to, then those kept after it.
/// Returns the arrivals, or `None` when nothing ran.
fn run_waiting(conn: &mut ConnContext, ex: &mut Exec<'_>) -> Option<u64> {
    if conn.state != ConnState::Normal {
        return None;
    }
    let seq = conn.rx.expected();
    let st = conn.reorder.remove(&seq)?;
    match deliver_kept(conn, seq, &st, ex) {
        Ran::Held => Some(0),
        Ran::Wait | Ran::Deferred => None,
        Ran::Done | Ran::Refused => {
            let last = u64::from(st.control.flags & cflags::LAST != 0);
            Some(last + advance(conn, ex))
        }
    }
}

/// Out-of-order placement (PCI-DDC): writes a message that arrived ahead of a gap now,
/// when it is a later segment (`SEGMENT`, not the last) of a write whose request
/// started at or before the gap (and, placed relative to the request's address, whose
/// first segment ran) — so the gap holds only earlier segments of the same
/// request, which write other bytes — and it passes every check. Returns whether it
/// was placed; anything else (a trap, a fault, an overlap with a read reply still owed)
/// waits for its turn in order, where it is handled as usual.
fn place_ahead(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    ex: &mut Exec<'_>,
) -> bool {
    let f = control.flags;
    if f & cflags::SEGMENT == 0 || f & cflags::LAST != 0 || control.opcode != op::WRITE {
        return false;
    }
    let first = seq.wrapping_sub(control.index);
    if control.index == 0 || crate::reliability::seq_lt(conn.rx.expected(), first) {
        return false;
    }
    let Some(ep) = ex.endpoints.get(conn.endpoint) else {
        return false;
    };
    // A segment placed relative to its request's address needs the first segment to have
    // run (the base is unknown before): otherwise it is kept.
    let ctx = reg_context(conn, ex.regs, ep, segment_base(conn, seq, control));
    let mut mem = TlbAccess::new(conn.endpoint, ep, ex.tlb);
    let mut plan = Plan::NOTHING;
    if oplogic::plan_into(control, payload, &ctx, &mut mem, None, &mut plan).is_err() {
        return false;
    }
    if blocked_by_read_reply(conn, &plan) {
        return false;
    }
    oplogic::commit(&plan, ex.regs, &mut mem);
    ex.stats.bytes_deposited += plan.bytes_stored();
    ex.stats.msgs_rx += 1;
    ex.stats.placed_ahead += 1;
    true
}

/// The register view of a message of `conn` into endpoint `ep`.
fn reg_context<'a>(
    conn: &ConnContext,
    regs: &'a RegisterFile,
    ep: &'a crate::tables::EndpointEntry,
    segment_base: Option<u64>,
) -> RegContext<'a> {
    RegContext {
        regs,
        window: conn.regs,
        globals: ep.globals(),
        allow_forced_interrupts: conn.policy.allow_forced_interrupts(),
        prior: &[],
        trusted: [false; 5],
        segment_base,
    }
}

/// The address message `seq` of `conn` is placed relative to, when it is a later
/// segment (`SEGMENT`, `index` = its number) of the request whose first segment ran here
/// last.
#[inline]
fn segment_base(conn: &ConnContext, seq: u32, control: &ControlRepr) -> Option<u64> {
    if control.flags & cflags::SEGMENT == 0 {
        return None;
    }
    let first_seq = seq.wrapping_sub(control.index);
    conn.rx_request
        .filter(|r| r.first_seq == first_seq)
        .map(|r| r.ea)
}

/// After message `seq` of `conn` committed: the first segment of a multi-segment write
/// records where its request landed (its later segments are placed relative to it); the
/// last one ends the request.
#[inline]
fn note_request(conn: &mut ConnContext, seq: u32, control: &ControlRepr, plan: &Plan<'_>) {
    if control.opcode != op::WRITE {
        return;
    }
    if control.flags & cflags::LAST != 0 {
        conn.rx_request = None;
    } else if control.flags & cflags::SEGMENT == 0 {
        if let crate::oplogic::Store::Bytes { ea, .. } = plan.store {
            conn.rx_request = Some(RequestBase { first_seq: seq, ea });
        }
    }
}

/// Whether a planned store must wait for a read reply the peer has not acknowledged
/// yet ([`oplogic::ReadReplies`]).
#[inline(always)]
fn blocked_by_read_reply(conn: &mut ConnContext, plan: &Plan<'_>) -> bool {
    !conn.read_replies.is_empty()
        && conn
            .read_replies
            .blocks_store(conn.endpoint, &plan.store, &conn.tx)
}

/// Plans, checks and commits one message of `conn`.
fn run_message(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
    ex: &mut Exec<'_>,
) -> Ran {
    // A token is a capability this node handed out: naming it reveals none of the
    // receiver's state (registers, layout), which is what isolation keeps private, so
    // isolated connections take token writes and reads as well as instruction pointers.
    match control.opcode {
        op::INVOKE => {}
        op::TOKEN_WRITE => return run_token(conn, seq, control, payload, ex),
        op::TOKEN_READ => return run_token_read(conn, seq, control, payload, ex),
        _ if conn.policy.isolated() => return refuse(conn, seq, control, Trap::Isolated, ex),
        _ => {}
    }
    let Some(ep) = ex.endpoints.get(conn.endpoint) else {
        return refuse(conn, seq, control, Trap::NoEndpoint, ex);
    };
    // The common messages store or answer without a plan: the same checks (one
    // definition, `oplogic::plain_deposit` / `plain_read`), none of the rest applies.
    if oplogic::is_plain_deposit(control) && conn.read_replies.is_empty() {
        return run_deposit(conn, seq, control, payload, frame_desc, ep, ex);
    }
    if oplogic::is_plain_read(control) {
        return run_read(conn, seq, control, payload, ep, ex);
    }
    let ctx = reg_context(conn, ex.regs, ep, segment_base(conn, seq, control));
    let mut mem = TlbAccess::new(conn.endpoint, ep, ex.tlb);
    let mut plan = Plan::NOTHING;
    let planned = if control.opcode == op::INVOKE {
        // An instruction pointer to a single instruction plans (and commits) like a plain
        // message; a chain takes the sequencer's path.
        let code = oplogic::Code {
            memory: ex.code,
            window: conn.instructions,
        };
        oplogic::plan_invoke_one(control, payload, &code, &ctx, &mut mem, &mut plan)
    } else {
        oplogic::plan_into(control, payload, &ctx, &mut mem, frame_desc, &mut plan).map(|()| true)
    };
    match planned {
        Ok(true) => {}
        Ok(false) => return run_chain(conn, seq, control, payload, ex),
        Err(t) if t.is_fault() => return hold(conn, seq, control, payload, frame_desc, t, ex),
        Err(t) => return refuse(conn, seq, control, t, ex),
    };
    let blocked = blocked_by_read_reply(conn, &plan);
    let queue = match admit(ex.queues, conn.endpoint, blocked, plan.interrupt) {
        Admit::Go(q) => q,
        Admit::Wait => return wait_in_order(conn, seq, control, payload, frame_desc),
        Admit::Full => {
            let t = Trap::EventQueueFull;
            return hold(conn, seq, control, payload, frame_desc, t, ex);
        }
    };
    oplogic::commit(&plan, ex.regs, &mut mem);
    note_request(conn, seq, control, &plan);
    after_commit(conn, seq, control, &plan, queue, ex);
    Ran::Done
}

/// A plain deposit — a direct `WRITE` with no flag but `LAST` or `SEGMENT`, no read
/// reply of ours outstanding that it could overwrite — run as [`run_message`] would,
/// through the checks the plan runs (`oplogic::plain_deposit`), without building a
/// plan, checking admission or looking for an event queue: none of it applies (no
/// register, no event, nothing it waits for). Most small messages are these.
#[inline]
fn run_deposit(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
    ep: &crate::tables::EndpointEntry,
    ex: &mut Exec<'_>,
) -> Ran {
    let mut mem = TlbAccess::new(conn.endpoint, ep, ex.tlb);
    let (ea, data) = match oplogic::plain_deposit(control, payload, &mut mem) {
        Ok(d) => d,
        Err(t) if t.is_fault() => return hold(conn, seq, control, payload, frame_desc, t, ex),
        Err(t) => return refuse(conn, seq, control, t, ex),
    };
    if !data.is_empty() {
        mem.store(ea, data);
    }
    // As `note_request`: a first segment records where its request lands.
    if control.flags & cflags::LAST != 0 {
        conn.rx_request = None;
    } else if control.flags & cflags::SEGMENT == 0 {
        conn.rx_request = Some(RequestBase { first_seq: seq, ea });
    }
    ex.stats.bytes_deposited += data.len() as u64;
    Ran::Done
}

/// A plain read request — a direct `READ` with no flag but `LAST` — run as
/// [`run_message`] would, through the checks the plan runs (`oplogic::plain_read`):
/// it stores nothing (so waits for no read reply), names no register and raises no
/// event; its reply joins the send stream.
#[inline]
fn run_read(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    ep: &crate::tables::EndpointEntry,
    ex: &mut Exec<'_>,
) -> Ran {
    let mut mem = TlbAccess::new(conn.endpoint, ep, ex.tlb);
    let reply = match oplogic::plain_read(control, payload, &mut mem) {
        Ok(r) => r,
        Err(t) if t.is_fault() => return hold(conn, seq, control, payload, None, t, ex),
        Err(t) => return refuse(conn, seq, control, t, ex),
    };
    send_reply(conn, seq, &reply, ex);
    Ran::Done
}

/// Queues the reply a committed message owes (a read's data, an atomic's old value) and
/// records a read's, whose range later stores must not overwrite before the peer has it.
#[inline]
fn send_reply(conn: &mut ConnContext, seq: u32, reply: &oplogic::Reply, ex: &mut Exec<'_>) {
    if let Some(wr) = oplogic::reply_request(seq, conn.endpoint, reply) {
        let (first, end) = push_reply(conn, wr, ex);
        conn.read_replies.record(conn.endpoint, reply, first, end);
    }
}

/// Whether a planned message may commit now.
enum Admit<'q> {
    /// Yes; its endpoint's event queue, if it has one.
    Go(Option<&'q std::sync::Arc<EventRing>>),
    /// It stores into a read reply's range not yet acknowledged: it waits.
    Wait,
    /// It interrupts and the event queue is full: a fault.
    Full,
}

/// Whether a message into `endpoint` that is `blocked` by a read reply (or not) and
/// `interrupt`s (or not) may commit.
#[inline]
fn admit(
    queues: &[Option<super::EndpointQueues>],
    endpoint: crate::tables::EndpointId,
    blocked: bool,
    interrupt: bool,
) -> Admit<'_> {
    if blocked {
        return Admit::Wait;
    }
    if !interrupt {
        return Admit::Go(None); // no event: the queue is not needed
    }
    let queue = super::queues_of(queues, endpoint).map(|q| &q.events);
    if !queue.is_some_and(|q| q.has_room()) {
        return Admit::Full;
    }
    Admit::Go(queue)
}

/// Keeps the expected message at its sequence number until what it waits for comes:
/// the acknowledgement of a read reply it would overwrite, or room for a refusal
/// ([`run_waiting`] runs it).
fn wait_in_order(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
) -> Ran {
    conn.reorder.insert(
        seq,
        Stored {
            control: *control,
            payload: payload.to_vec(),
            frame_desc: frame_desc.copied(),
            placed: false,
        },
    );
    Ran::Wait
}

/// Plans, checks and commits an instruction-pointer message of `conn` whose entry
/// point starts a chain of instructions: the whole chain, as one operation (out of line:
/// its plan of eight steps would otherwise sit in every message's stack frame).
#[inline(never)]
fn run_chain(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    ex: &mut Exec<'_>,
) -> Ran {
    let Some(ep) = ex.endpoints.get(conn.endpoint) else {
        return refuse(conn, seq, control, Trap::NoEndpoint, ex);
    };
    let ctx = reg_context(conn, ex.regs, ep, None);
    let code = oplogic::Code {
        memory: ex.code,
        window: conn.instructions,
    };
    let mut mem = TlbAccess::new(conn.endpoint, ep, ex.tlb);
    let mut seqp = SeqPlan::NOTHING;
    match oplogic::plan_invoke(control, payload, &code, &ctx, &mut mem, &mut seqp) {
        Ok(()) => {}
        Err(t) if t.is_fault() => return hold(conn, seq, control, payload, None, t, ex),
        Err(t) => return refuse(conn, seq, control, t, ex),
    }
    let blocked = seqp.steps().iter().any(|p| blocked_by_read_reply(conn, p));
    let queue = match admit(ex.queues, conn.endpoint, blocked, seqp.interrupt) {
        Admit::Go(q) => q,
        Admit::Wait => return wait_in_order(conn, seq, control, payload, None),
        Admit::Full => return hold(conn, seq, control, payload, None, Trap::EventQueueFull, ex),
    };
    oplogic::commit_sequence(&seqp, ex.regs, &mut mem);
    ex.stats.bytes_deposited += seqp.bytes_stored();
    // Its reply and event, as one message's (the stores are counted above).
    let summary = Plan {
        reply: seqp.reply,
        interrupt: seqp.interrupt,
        event: seqp.event,
        ..Plan::NOTHING
    };
    after_commit(conn, seq, control, &summary, queue, ex);
    Ran::Done
}

/// A deposit with a payload token ([`oplogic::plan_token`]): into the buffer the token
/// names (whatever endpoint the connection reaches), once. The buffer's owner hears of
/// it either way (a wrong key: the control part alone), so it needs room for the event.
#[inline(never)]
fn run_token(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    ex: &mut Exec<'_>,
) -> Ran {
    let (endpoints, tlb) = (ex.endpoints, &mut *ex.tlb);
    let target = move |id| endpoints.get(id).map(move |ep| TlbAccess::new(id, ep, tlb));
    let (plan, mut mem) = match oplogic::plan_token(control, payload, ex.tokens, target) {
        Ok(p) => p,
        Err(t) => {
            if t.trap.is_fault() {
                return hold(conn, seq, control, payload, None, t.trap, ex);
            }
            let ran = refuse(conn, seq, control, t.trap, ex);
            // A wrong key: the control part still reaches the buffer's owner, once (not
            // while the refusal waits for room: it runs again then).
            if let (Ran::Refused, Some(e)) = (&ran, t.event) {
                if let Some(q) = super::queues_of(ex.queues, e.endpoint) {
                    post_event(&q.events, token_event(conn, control, &e, ex.now), ex.stats);
                }
            }
            return ran;
        }
    };
    let store = oplogic::Store::Bytes {
        ea: plan.ea,
        data: plan.data,
    };
    let blocked = !conn.read_replies.is_empty()
        && conn
            .read_replies
            .blocks_store(plan.endpoint, &store, &conn.tx);
    let queue = match admit(ex.queues, plan.endpoint, blocked, true) {
        Admit::Go(q) => q,
        Admit::Wait => return wait_in_order(conn, seq, control, payload, None),
        Admit::Full => return hold(conn, seq, control, payload, None, Trap::EventQueueFull, ex),
    };
    oplogic::commit_token(&plan, ex.tokens, &mut mem);
    ex.stats.bytes_deposited += plan.data.len() as u64;
    if let Some(q) = queue {
        let ev = token_event(conn, control, &plan.event(), ex.now);
        post_event(q, ev, ex.stats);
    }
    Ran::Done
}

/// A read with a read token ([`oplogic::plan_token_read`]): checked as a read of the
/// token's endpoint (whatever endpoint the connection reaches), answered exactly as a
/// `READ` — the answer built from the token's endpoint when sent, its range kept from
/// this connection's later stores until acknowledged. Refusals and faults as a read's;
/// no event, and the token stays for further reads.
#[inline(never)]
fn run_token_read(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    ex: &mut Exec<'_>,
) -> Ran {
    let (endpoints, tlb) = (ex.endpoints, &mut *ex.tlb);
    let target = move |id| endpoints.get(id).map(move |ep| TlbAccess::new(id, ep, tlb));
    let plan = match oplogic::plan_token_read(control, payload, ex.tokens, target) {
        Ok(p) => p,
        Err(t) if t.is_fault() => return hold(conn, seq, control, payload, None, t, ex),
        Err(t) => return refuse(conn, seq, control, t, ex),
    };
    if let Some(wr) = oplogic::reply_request(seq, plan.endpoint, &plan.reply) {
        let (first, end) = push_reply(conn, wr, ex);
        conn.read_replies
            .record(plan.endpoint, &plan.reply, first, end);
    }
    Ran::Done
}

/// The event of a deposit with a payload token, as the host sees it.
fn token_event(conn: &ConnContext, control: &ControlRepr, e: &TokenEvent, now: u64) -> Event {
    Event {
        kind: EventKind::Token {
            index: e.index,
            key_ok: e.key_ok,
        },
        conn: conn.number,
        peer_conn: conn.peer_conn,
        opcode: control.opcode,
        operand: control.operand,
        regs: [0; 4],
        ea: e.ea,
        len: e.len,
        timestamp: now,
    }
}

/// Posts an event, counting it (a full queue drops it: room was checked before the
/// message committed).
fn post_event(q: &EventRing, e: Event, stats: &mut Stats) {
    if q.push(e).is_ok() {
        stats.events += 1;
    }
}

/// What a committed message owes: its reply, its event, its counters (the usual
/// message owes neither a reply nor an event: it leaves at once).
#[inline]
fn after_commit(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    plan: &Plan<'_>,
    queue: Option<&std::sync::Arc<EventRing>>,
    ex: &mut Exec<'_>,
) {
    ex.stats.bytes_deposited += plan.bytes_stored();
    if matches!(plan.reply, oplogic::Reply::None) && !plan.interrupt {
        return;
    }
    send_reply(conn, seq, &plan.reply, ex);
    if plan.interrupt {
        if let Some(q) = queue {
            let kind = if control.opcode == op::EXCEPTION {
                EventKind::Exception
            } else {
                EventKind::Interrupt
            };
            post_event(q, event_of(conn, control, plan, kind, ex.now), ex.stats);
        }
    }
}

fn event_of(
    conn: &ConnContext,
    control: &ControlRepr,
    plan: &Plan<'_>,
    kind: EventKind,
    now: u64,
) -> Event {
    Event {
        kind,
        conn: conn.number,
        peer_conn: conn.peer_conn,
        opcode: control.opcode,
        operand: control.operand,
        regs: plan.event.regs,
        ea: plan.event.ea,
        len: plan.event.len,
        timestamp: now,
    }
}

/// Queues a reply as a message of this connection's send stream (reserved capacity:
/// replies are not held back by the send window); returns its sequence numbers, first
/// and one past the last.
fn push_reply(conn: &mut ConnContext, wr: crate::wr::Wqe, ex: &mut Exec<'_>) -> (u32, u32) {
    let seg_max = conn.segment_max.min(ex.segment_max);
    let segments = message::segments_for(&wr, seg_max);
    let first_seq = conn.tx.assign(segments);
    conn.take_into_flight(Pending {
        work: crate::wr::Work::Wr(wr),
        first_seq,
        segments,
        seg_max,
        status: WcStatus::Success,
        reason: None,
        replied: false,
    });
    ex.stats.replies_tx += 1;
    (first_seq, first_seq.wrapping_add(segments))
}

/// Refuses a message with an error trap: counted, NAKed, optionally reported.
fn refuse(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    t: Trap,
    ex: &mut Exec<'_>,
) -> Ran {
    if !conn.refusals.push(seq, t.nak()) {
        // The peer has not confirmed the NAKs of earlier refusals: this one waits
        // (moving on without a NAK the peer is sure to see would let it take a later
        // acknowledgement for success).
        ex.stats.drop_for(DropReason::NoBuffer);
        return Ran::Deferred;
    }
    ex.stats.drop_for(t.reason());
    conn.shared
        .dropped
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if conn.policy.report_traps() {
        report_exception(conn, control, t.status(), t, ex);
    }
    Ran::Refused
}

/// Puts a refused or held message on the endpoint's exception queue (a full queue only
/// moves its overflow counter: the sender has its own report).
fn report_exception(
    conn: &ConnContext,
    control: &ControlRepr,
    status: RemoteStatus,
    t: Trap,
    ex: &Exec<'_>,
) {
    let Some(q) = super::queues_of(ex.queues, conn.endpoint).map(|q| &q.exceptions) else {
        return;
    };
    let e = Event {
        kind: EventKind::Trap {
            status,
            reason: t.reason(),
        },
        conn: conn.number,
        peer_conn: conn.peer_conn,
        opcode: control.opcode,
        operand: control.operand,
        regs: [0; 4],
        ea: 0,
        len: control.length,
        timestamp: ex.now,
    };
    if q.push(e).is_err() {
        q.overflows
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps a message for the host: the connection is exceptioned, the sender told
/// "receiver not ready".
fn hold(
    conn: &mut ConnContext,
    seq: u32,
    control: &ControlRepr,
    payload: &[u8],
    frame_desc: Option<&[u8; COMPOUND_LEN]>,
    t: Trap,
    ex: &mut Exec<'_>,
) -> Ran {
    ex.stats.faults += 1;
    ex.stats.drop_for(t.reason());
    let len = (control.length as usize).min(payload.len());
    // The slow path: the frame's buffer goes back to the pool, the message stays — a
    // repeat of the frame's descriptor is kept as the full compound message it stands for.
    let mut kept = *control;
    let mut bytes = Vec::with_capacity(len + COMPOUND_LEN);
    if let (true, Some(d)) = (control.flags & cflags::COMPOUND_REPEAT != 0, frame_desc) {
        kept.flags = (kept.flags & !cflags::COMPOUND_REPEAT) | cflags::COMPOUND;
        kept.length += COMPOUND_LEN as u32;
        bytes.extend_from_slice(d);
    }
    bytes.extend_from_slice(&payload[..len]);
    conn.held = Some(Box::new(Held {
        seq,
        control: kept,
        payload: bytes,
        trap: t,
    }));
    conn.state = ConnState::Exceptioned;
    conn.push_nak(seq, t.nak()); // a fault's status: PageFault
    report_exception(conn, control, RemoteStatus::PageFault, t, ex);
    // Published after the report: a host that sees the state finds the report queued.
    conn.shared.set_state(ConnState::Exceptioned);
    Ran::Held
}

/// A reply to one of our reads or atomics: checked against the request its index names
/// ([`oplogic::plan_reply`]), placed in the request's result range.
fn take_reply(
    conn: &mut ConnContext,
    control: &ControlRepr,
    payload: &[u8],
    endpoints: &EndpointTable,
) -> Result<(), DropReason> {
    let i = conn.locate(control.index).map(|(i, _)| i);
    let request = i.and_then(|i| conn.inflight.get(i));
    let placement = oplogic::plan_reply(control, payload, request, endpoints)?;
    if let Some(request) = i.and_then(|i| conn.inflight.get_mut(i)) {
        oplogic::commit_reply(&placement, request);
    }
    Ok(())
}
