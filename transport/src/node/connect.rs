//! The node's side of connection management: the host's calls (connect, listen,
//! close), connection entries made and removed, and the [`Cm`] machine's messages and
//! actions carried out. What the protocol says — retries, repeats, timeouts, keys of
//! disconnects — is the machine's ([`crate::cm`]); this file only acts on it.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::conn::ConnContext;
use crate::cm::{
    Action, CmError, CmMessage, CmWireError, ConnectOptions, Ignored, PeerParams, PrivateData,
    Registers, RejectReason,
};
use crate::connection::{random_u32, random_u64, ConnShared, ConnState};
use crate::cq::CqShared;
use crate::handshake::{Received, SessionKeys};
use crate::reliability::{Receiver, Sender, SeqBits};
use crate::status::DropReason;
use crate::tables::{EndpointId, NodeAddr, NodeId, RegWindow};
use crate::wake::WaitQueue;
use crate::wire::underlay::ECN_MASK;
use crate::wire::{self, FrameView, UnderlayRepr};

use super::{
    complete_ready, fail_connection, learn_node, process_ack, segment_max_for, Accepted, Link,
    ListenEntry, Node,
};

impl Node {
    /// A connection number not in use, random but for its low byte: this node's shard
    /// (`shard`).
    fn unused_conn_number(&self) -> u32 {
        self.conns.unused_number(self.cfg.shard)
    }

    /// A connection entry in state `Connecting`, its register window made when the
    /// options ask for one of its own.
    fn new_connection(
        &mut self,
        endpoint: EndpointId,
        peer: NodeId,
        peer_mac: [u8; 6],
        shared: Arc<ConnShared>,
        opts: &ConnectOptions,
    ) -> Result<ConnContext, CmError> {
        let window = match opts.registers {
            Registers::None => RegWindow::EMPTY,
            Registers::Window(w) => w,
            Registers::PerConnection(n) => self.regs.alloc(n)?,
        };
        let isn = random_u32();
        let key = random_u64();
        shared.key.store(key, Ordering::Relaxed);
        Ok(ConnContext {
            number: shared.number,
            key,
            endpoint,
            peer,
            peer_mac,
            peer_conn: 0,
            peer_key: 0,
            state: ConnState::Connecting,
            shared,
            segment_max: self.segment_max,
            priority: opts.priority,
            traffic_class: opts.traffic_class & !ECN_MASK,
            ce_last: false,
            regs: window,
            policy: super::conn::Policy::new(
                opts.allow_forced_interrupts,
                opts.report_traps,
                opts.isolated,
            ),
            instructions: opts.instructions,
            held: None,
            rx: Receiver::new(0, opts.receive_window),
            reorder: super::conn::Reorder::default(),
            read_replies: Default::default(),
            rx_request: None,
            unreported: super::conn::Unreported::default(),
            ack_pending: false,
            last_rx: self.now,
            last_probe: 0,
            probes_unanswered: 0,
            naks: super::conn::Naks::default(),
            refusals: Default::default(),
            tx: self.sender(isn),
            isn,
            tx_sent_high: isn,
            // Both grow with what is outstanding (a window's worth preallocated was
            // about 576 KiB per connection); given back when the connection goes quiet.
            sendq: std::collections::VecDeque::new(),
            ready: false,
            heard: false,
            inflight: std::collections::VecDeque::new(),
            window: self.cfg.window,
            rnr_until: 0,
            rnr_retries: 0,
            rnr_retry_limit: self.cfg.rnr_retry_count.min(u32::from(u16::MAX)) as u16,
            rnr_timeout: self.us_to_ticks(self.cfg.rnr_timeout_us),
            timer_armed: u64::MAX,
            timer_spare: u64::MAX,
            owned_regs: matches!(opts.registers, Registers::PerConnection(_)).then_some(window),
            secure: None,
        })
    }

    /// The send-side reliability state of a new connection, from the node's tunables.
    fn sender(&self, isn: u32) -> Sender {
        let rto = self.us_to_ticks(self.cfg.retry_timeout_us);
        Sender::new(isn, rto, self.cfg.retry_count)
            .with_max_bytes_in_flight(self.cfg.max_inflight_bytes)
            .with_min_rto(self.us_to_ticks(self.cfg.min_retry_timeout_us))
            // (Without congestion control, as before it: a frame beyond a hole counts
            // in flight until the hole closes.)
            .with_sacked_leaving_flight(self.cfg.cc.enabled)
    }

    /// Adds a connection: its timer armed, the credits shared out again.
    fn insert_connection(&mut self, c: ConnContext) {
        let peer = c.peer;
        let slot = self.conns.insert(c);
        self.count_peer_conn(peer, true);
        // Until a period shows who sends, every peer may (RCCC's new senders start on
        // a share): an incast's first frames then come paced.
        self.rx_active = self.rx_active.max(self.peers_live);
        self.set_credits_except(slot);
        self.rearm(slot);
    }

    /// Removes a connection's entry, releasing a register window made for it.
    pub(crate) fn remove_connection(&mut self, number: u32) -> Option<ConnContext> {
        let slot = self.conns.slot_of(number)?;
        let c = self.conns.remove(number)?;
        self.count_peer_conn(c.peer, false);
        // What it had in flight leaves its peer's.
        self.cc_forget(c.peer, c.tx.bytes_in_flight());
        if c.ready {
            // Off the ready list now: a connection that takes the slot is listed anew.
            self.ready.retain(|&s| s != slot);
        }
        self.cm.forget(number);
        self.peer_private.remove(&number);
        self.unconfirm(number);
        if let Some(ip) = self.accepted_source.remove(&number) {
            self.source_count(ip, |s| s.conns = s.conns.saturating_sub(1));
        }
        // What a flood of connections grew goes back once they are gone.
        crate::cm::shrink_sparse(&mut self.accepted_source);
        crate::cm::shrink_sparse(&mut self.unconfirmed);
        crate::cm::shrink_sparse(&mut self.peer_private);
        if !c.unreported.is_empty() {
            // Completions waiting for room: they wait in the node now (they were
            // counted in `waits` when they began to).
            self.stranded
                .extend(c.unreported.iter().map(|wc| (c.shared.cq.clone(), *wc)));
            self.report_stranded();
        }
        if let Some(w) = c.owned_regs {
            let _ = self.regs.free(w);
        }
        self.set_credits();
        if Arc::strong_count(&c.shared) > 1 {
            self.departed.push(c.shared.clone());
        }
        Some(c)
    }

    /// Whether connections into `endpoint` with `opts` can be made here: the endpoint
    /// exists, and the register and instruction windows the options name are this
    /// shard's.
    fn check_options(&self, endpoint: EndpointId, opts: &ConnectOptions) -> Result<(), CmError> {
        if self.endpoints.get(endpoint).is_none() {
            return Err(CmError::NoEndpoint(endpoint.0));
        }
        if self.cfg.shards <= 1 {
            return Ok(()); // windows outside the file name nothing (refused per message)
        }
        if let Registers::Window(w) = opts.registers {
            if !w.is_empty() && !self.regs.holds(w) {
                return Err(CmError::OtherShard("register", self.cfg.shard));
            }
        }
        let w = opts.instructions;
        if !w.is_empty() && !self.instructions.holds(w) {
            return Err(CmError::OtherShard("instruction", self.cfg.shard));
        }
        Ok(())
    }

    /// Starts connecting to `service` at `peer`; the returned shared state turns
    /// `Normal` when the peer accepts, `Failed` when it refuses or times out.
    pub fn connect(
        &mut self,
        peer: NodeAddr,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
    ) -> Result<Arc<ConnShared>, CmError> {
        self.check_options(endpoint, opts)?;
        if self.conns.len() >= self.cfg.max_connections {
            return Err(CmError::TooManyConnections(self.cfg.max_connections));
        }
        let resolve = self.cfg.neigh.resolve;
        if resolve {
            self.neigh.next_hop(peer.ip).map_err(CmError::NoRoute)?;
        }
        let peer_id = learn_node(&mut self.nodes, peer);
        let mut to = self.nodes.get(peer_id).copied().unwrap_or(peer);
        if resolve && !self.nodes.is_static(peer_id) {
            // The request goes once the next hop's MAC is known (`Node::send_cm`); the
            // connection's is the reply's source.
            to.mac = super::neighbours::UNRESOLVED;
        }
        let shared = ConnShared::new(
            self.unused_conn_number(),
            opts.sq_depth,
            cq,
            self.ring.ring().clone(),
        );
        let c = self.new_connection(endpoint, peer_id, to.mac, shared.clone(), opts)?;
        // What we ask for; the reply must grant the same.
        shared.secure.store(opts.secure.is_on(), Ordering::Relaxed);
        let (key, isn) = (c.key, c.isn);
        self.insert_connection(c);
        let started = self.cm.connect(
            shared.number,
            key,
            isn,
            random_u32(),
            to,
            service,
            self.now,
            opts,
        );
        if let Err(e) = started {
            self.remove_connection(shared.number);
            return Err(e);
        }
        Ok(shared)
    }

    /// Accepts connections to `service` into `endpoint`.
    pub fn listen(
        &mut self,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
        backlog: usize,
    ) -> Result<Arc<WaitQueue<Accepted>>, CmError> {
        self.check_options(endpoint, opts)?;
        if self.listeners.contains_key(&service) {
            return Err(CmError::ServiceInUse(service));
        }
        let accepted = Arc::new(WaitQueue::new(backlog));
        self.listeners.insert(
            service,
            ListenEntry {
                service,
                endpoint,
                cq,
                opts: opts.clone(),
                accepted: accepted.clone(),
                unconfirmed: 0,
            },
        );
        Ok(accepted)
    }

    /// The private data the peer of our connection `conn` answered with, once (kept
    /// from the reply until the application takes it or the connection goes).
    pub fn take_peer_private(&mut self, conn: u32) -> PrivateData {
        self.peer_private.remove(&conn)
    }

    /// Stops accepting on `service`.
    pub fn unlisten(&mut self, service: u32) {
        self.listeners.remove(&service);
    }

    /// Closes a connection: every request outstanding on it completes at once — those
    /// the peer acknowledged already did; the others `Unacknowledged` when they were
    /// transmitted (they may have run there), `Flushed` when they never were — the
    /// peer is told (with retries), and the entry goes when the peer answers or the CM
    /// timeout passes.
    pub fn close(&mut self, number: u32) -> Result<(), CmError> {
        self.ack_now();
        let slot = self
            .conns
            .slot_of(number)
            .ok_or(CmError::NoConnection(number))?;
        let conn = self.conns.get_mut(slot).expect("slot");
        let was_normal = conn.state.is_up();
        if was_normal || conn.state == ConnState::Error {
            let (flight, peer) = (fail_connection(conn, None), conn.peer);
            self.cc_forget(peer, flight);
        }
        let conn = self.conns.get_mut(slot).expect("slot");
        conn.state = ConnState::Closed;
        conn.shared.set_state(ConnState::Closed);
        if !was_normal || conn.peer_conn == 0 {
            self.remove_connection(number);
            return Ok(());
        }
        // Never acknowledge past a refusal the peer may not know of.
        let (peer_conn, ack) = (conn.peer_conn, conn.ack_point());
        let Some(mut to) = self.nodes.get(conn.peer).copied() else {
            self.remove_connection(number);
            return Ok(());
        };
        to.mac = conn.peer_mac;
        self.cm.close(number, to, peer_conn, ack, self.now);
        self.apply_cm_actions();
        Ok(())
    }

    /// A frame addressed to connection 0: each message to the machine, then its
    /// actions carried out.
    pub(crate) fn handle_cm(&mut self, frame: &FrameView<'_>) {
        let from = NodeAddr {
            mac: frame.underlay.src_mac,
            ip: frame.underlay.src_ip,
            udp_port: wire::UDP_PORT,
        };
        for m in frame.messages() {
            let m = match m {
                Ok(m) => m,
                Err(e) => return self.stats.drop_for(super::wire_drop_reason(&e)),
            };
            match CmMessage::parse(&m.control, m.payload) {
                Ok(msg) => {
                    let private = msg.private_data(m.payload);
                    match self.cm.handle(from, msg, private, self.now) {
                        Ok(()) => {}
                        Err(Ignored::WrongKey) => self.stats.drop_for(DropReason::WrongKey),
                        Err(Ignored::BadCookie) => self.stats.drop_for(DropReason::BadCookie),
                        Err(Ignored::RateLimited) => self.stats.drop_for(DropReason::CmRateLimited),
                        Err(Ignored::Forged | Ignored::Unverified) => {
                            self.stats.drop_for(DropReason::CmForged)
                        }
                        Err(Ignored::PeerKey) => self.stats.drop_for(DropReason::PeerKey),
                        Err(Ignored::SourceCap) => self.stats.drop_for(DropReason::SourceCap),
                        Err(Ignored::Repeated) => self.stats.drop_for(DropReason::Replayed),
                    }
                }
                Err(CmWireError::NotCm(_)) => self.stats.drop_for(DropReason::UnknownOpcode),
                Err(CmWireError::BadFlags(_)) => self.stats.drop_for(DropReason::BadFlags),
                // Fields short of what the message needs: a length not valid for it.
                Err(CmWireError::Wire(_)) => self.stats.drop_for(DropReason::BadLength),
            }
        }
        self.apply_cm_actions();
    }

    /// Carries out what the connection-management machine decided.
    pub(crate) fn apply_cm_actions(&mut self) {
        while let Some(a) = self.cm.poll_action() {
            match a {
                Action::Incoming {
                    from,
                    request,
                    service,
                    peer,
                    mut handshake,
                } => self.accept_incoming(from, request, service, peer, &mut handshake),
                Action::Established {
                    conn,
                    peer,
                    keys,
                    verified,
                    mac,
                } => {
                    let Some(slot) = self.conns.slot_of(conn) else {
                        continue;
                    };
                    let c = self.conns.get_mut(slot).expect("slot");
                    if !self.nodes.is_static(c.peer) {
                        c.peer_mac = mac;
                    }
                    if let Err(reason) = client_session(c, &keys, &peer, self.cfg.rekey_after) {
                        // Not up: the peer's connection times out unheard.
                        self.stats.drop_for(DropReason::NotSealed);
                        self.cm.forget(conn);
                        self.fail_connect(conn, reason);
                        continue;
                    }
                    let _ = c
                        .shared
                        .peer_identity
                        .set(Box::new((peer.identity, verified)));
                    establish(c, &peer);
                    // A frame at once, in this turn's transmission: the listener shows
                    // the connection to its application when one of ours passes (opens,
                    // when sealed). It asks for an answer, so that this side knows it
                    // arrived ([`ConnShared::heard`]); until then `reconfirm` sends it
                    // again.
                    self.probe_list.push(slot);
                    self.rearm(slot); // keepalive from now
                    if let Some(p) = peer.private {
                        self.peer_private.insert(conn, p);
                    }
                }
                Action::Failed {
                    conn,
                    reason,
                    offered,
                } => {
                    if let Some(key) = offered {
                        // What the listener named instead of the pinned key, for the
                        // error the application sees.
                        if let Some(c) = self.conns.slot_of(conn).and_then(|s| self.conns.get(s)) {
                            let _ = c.shared.peer_identity.set(Box::new((key, false)));
                        }
                    }
                    self.fail_connect(conn, reason)
                }
                Action::PeerClosed { conn, ack } => self.peer_closed(conn, ack),
                Action::Closed { conn } => {
                    self.remove_connection(conn);
                }
            }
        }
    }

    /// Our connection `number` is up but its listener has not answered our first frame
    /// yet ([`ConnShared::heard`]): it goes again (the first may have been lost, and a
    /// listener asks only while the application drives this device).
    pub fn reconfirm(&mut self, number: u32) {
        let Some(slot) = self.conns.slot_of(number) else {
            return;
        };
        let c = self.conns.get(slot).expect("slot");
        if c.state == ConnState::Normal && !c.heard && !self.probe_list.contains(&slot) {
            self.probe_list.push(slot);
        }
    }

    /// Connection `number`'s peer showed it finished the handshake (a frame of the
    /// connection passed its checks; a sealed one opened): an accepted connection
    /// waiting for that reaches the listener's queue.
    pub(crate) fn confirmed(&mut self, number: u32) {
        let Some(u) = self.unconfirmed.get(&number) else {
            return;
        };
        if u.queue.is_full() {
            // The application has not accepted the earlier ones yet (a backlog it
            // shrank meanwhile): the peer's next frame tries again.
            return self.stats.drop_for(DropReason::BacklogFull);
        }
        if let Some(u) = self.unconfirm(number) {
            let _ = u.queue.push(u.accepted);
            self.cm.heard(number);
        }
    }

    /// Takes connection `number` off the unconfirmed ones (its listener's and its
    /// source's counts with it).
    fn unconfirm(&mut self, number: u32) -> Option<super::Unconfirmed> {
        let u = self.unconfirmed.remove(&number)?;
        if let Some(l) = self.listeners.get_mut(&u.service) {
            if Arc::ptr_eq(&l.accepted, &u.queue) {
                l.unconfirmed = l.unconfirmed.saturating_sub(1);
            }
        }
        if let Some(&ip) = self.accepted_source.get(&number) {
            self.source_count(ip, |s| s.unconfirmed = s.unconfirmed.saturating_sub(1));
        }
        Some(u)
    }

    /// Changes source `ip`'s count (an entry back at zero goes), and tells the CM
    /// machine whether the source is at its cap of unconfirmed connections (its
    /// requests are then ignored before their handshake costs a key agreement).
    fn source_count(&mut self, ip: IpAddr, change: impl FnOnce(&mut super::SourceCount)) {
        let s = self.sources.entry(ip).or_default();
        change(s);
        let cap = self.cfg.cm_limits.per_source_unconfirmed;
        self.cm.set_capped(ip, cap != 0 && s.unconfirmed >= cap);
        if s.conns == 0 && s.unconfirmed == 0 {
            self.sources.remove(&ip);
            crate::cm::shrink_sparse(&mut self.sources);
        }
    }

    /// Removes the unconfirmed connections whose CM timeout passed (their peers never
    /// finished the handshake), and asks the others' peers for a frame once a CM retry
    /// period (the one that would have confirmed may have been lost).
    pub(crate) fn expire_unconfirmed(&mut self, now: u64) {
        if now >= self.unconfirmed_probe {
            for number in self.unconfirmed.keys() {
                if let Some(slot) = self.conns.slot_of(*number) {
                    self.probe_list.push(slot);
                }
            }
            self.unconfirmed_probe = if self.unconfirmed.is_empty() {
                u64::MAX
            } else {
                now + self.cm.timing().retry
            };
        }
        while let Some(&(until, number)) = self.unconfirmed_queue.front() {
            if until > now {
                break;
            }
            self.unconfirmed_queue.pop_front();
            if self
                .unconfirmed
                .get(&number)
                .is_some_and(|u| u.until == until)
            {
                self.stats.handshakes_expired += 1;
                if let Some(c) = self.remove_connection(number) {
                    c.shared.set_state(ConnState::Closed);
                }
            }
        }
        crate::cm::shrink_sparse(&mut self.unconfirmed_queue);
    }

    /// Our connect `conn` failed for `reason`: the entry goes, the application sees it.
    pub(super) fn fail_connect(&mut self, conn: u32, reason: RejectReason) {
        if let Some(c) = self.remove_connection(conn) {
            c.shared.fail_reason.store(reason as u8, Ordering::Relaxed);
            c.shared.set_state(ConnState::Failed);
        }
    }

    /// A peer's request for `service`, its handshake read up to the pre-shared key: a
    /// connection made for it on the listener's endpoint, or a refusal.
    fn accept_incoming(
        &mut self,
        from: NodeAddr,
        request: u32,
        service: u32,
        peer: PeerParams,
        handshake: &mut Received,
    ) {
        let refuse = |node: &mut Node, reason: RejectReason, why: DropReason, h: &Received| {
            node.stats.drop_for(why);
            node.cm.refuse(from, request, peer.conn, reason, h);
        };
        let Some(l) = self.listeners.get(&service) else {
            return refuse(
                self,
                RejectReason::NoListener,
                DropReason::NoListener,
                handshake,
            );
        };
        if let Some(need) = &l.opts.require_private_data {
            if !peer.private.as_deref().is_some_and(|p| p.starts_with(need)) {
                // As if no listener were there: the service is not revealed.
                return refuse(
                    self,
                    RejectReason::NoListener,
                    DropReason::WrongKey,
                    handshake,
                );
            }
        }
        if !handshake.check_psk(l.opts.secure.psk()) {
            // A different pre-shared key (or the request's last tag changed on the way:
            // then the client does not take this REJECT, which names its own tag).
            return refuse(
                self,
                RejectReason::Confirmation,
                DropReason::AuthFailed,
                handshake,
            );
        }
        if let Some(keys) = &l.opts.authorized_keys {
            if !keys.contains(&peer.identity) {
                return refuse(
                    self,
                    RejectReason::Unauthorized,
                    DropReason::Unauthorized,
                    handshake,
                );
            }
        }
        if l.opts.secure.is_on() && !peer.secure {
            return refuse(
                self,
                RejectReason::Insecure,
                DropReason::NotSealed,
                handshake,
            );
        }
        if l.accepted.len() + l.unconfirmed >= l.accepted.capacity() {
            // Transient: the application has not accepted the earlier ones yet, or
            // their peers have not confirmed. No answer, so the requester retries (a
            // refusal would be final).
            self.stats.drop_for(DropReason::BacklogFull);
            return;
        }
        let held = self.sources.get(&from.ip).copied().unwrap_or_default();
        let limits = self.cfg.cm_limits;
        // One source holds at most half of a backlog unconfirmed: another source's
        // client always finds room.
        let share = (l.accepted.capacity() / 2).max(1) as u32;
        if limits.per_source_unconfirmed != 0
            && held.unconfirmed >= limits.per_source_unconfirmed.min(share)
        {
            // Transient too: the source's handshakes finish or expire.
            self.stats.drop_for(DropReason::SourceCap);
            return;
        }
        if limits.per_source_connections != 0 && held.conns >= limits.per_source_connections {
            return refuse(
                self,
                RejectReason::Resources,
                DropReason::SourceCap,
                handshake,
            );
        }
        if self.conns.len() >= self.cfg.max_connections {
            return refuse(
                self,
                RejectReason::Resources,
                DropReason::CmResources,
                handshake,
            );
        }
        let (endpoint, cq, lopts, accepted) =
            (l.endpoint, l.cq.clone(), l.opts.clone(), l.accepted.clone());
        let peer_id = learn_node(&mut self.nodes, from);
        // Answered where the request came from, unless the peer's MAC is configured.
        let peer_mac = match self.nodes.get(peer_id) {
            Some(n) if self.nodes.is_static(peer_id) => n.mac,
            _ => from.mac,
        };
        let shared = ConnShared::new(
            self.unused_conn_number(),
            lopts.sq_depth,
            cq,
            self.ring.ring().clone(),
        );
        let Ok(mut c) = self.new_connection(endpoint, peer_id, peer_mac, shared.clone(), &lopts)
        else {
            return refuse(
                self,
                RejectReason::Resources,
                DropReason::CmResources,
                handshake,
            );
        };
        let (number, key, isn) = (c.number, c.key, c.isn);
        let private = lopts.private_data.clone();
        let keys = match self.cm.accepted(
            from,
            request,
            peer.conn,
            number,
            key,
            isn,
            private,
            peer.secure,
            handshake,
        ) {
            Ok(keys) => keys,
            Err(_) => {
                if let Some(w) = c.owned_regs {
                    let _ = self.regs.free(w); // made for it, never used
                }
                self.cm.forget(number);
                return refuse(
                    self,
                    RejectReason::Resources,
                    DropReason::CmResources,
                    handshake,
                );
            }
        };
        if peer.secure {
            let session =
                crate::secure::Session::new(&keys.c2s, &keys.s2c, false, self.cfg.rekey_after);
            c.secure = Some(Box::new(session));
        }
        let _ = c.shared.peer_identity.set(Box::new((peer.identity, true)));
        establish(&mut c, &peer);
        self.insert_connection(c);
        let a = Accepted {
            shared,
            private: peer.private,
        };
        // Visible to accept once the peer's first frame of it passes (opens, when
        // sealed): a requester that does not finish the handshake never reaches the
        // application, and its connection goes after a CM timeout.
        let until = self.now + self.cm.timing().timeout;
        self.unconfirmed.insert(
            number,
            super::Unconfirmed {
                service,
                queue: accepted,
                accepted: a,
                until,
            },
        );
        self.unconfirmed_queue.push_back((until, number));
        if self.unconfirmed_probe == u64::MAX {
            self.unconfirmed_probe = self.now + self.cm.timing().retry;
        }
        if let Some(l) = self.listeners.get_mut(&service) {
            l.unconfirmed += 1;
        }
        self.accepted_source.insert(number, from.ip);
        self.source_count(from.ip, |s| {
            s.conns += 1;
            s.unconfirmed += 1;
        });
    }

    /// The peer closed `conn`: what ran there completes, the rest is flushed.
    fn peer_closed(&mut self, conn: u32, ack: u32) {
        let Some(slot) = self.conns.slot_of(conn) else {
            return;
        };
        let c = self.conns.get_mut(slot).expect("slot");
        // What it acknowledged and what it had left in flight leave its peer's.
        let mut gone = 0;
        if c.state.is_up() {
            gone = process_ack(c, ack, &SeqBits::default(), self.now, &[], &mut ()).bytes;
            complete_ready(c);
        }
        let (flight, peer) = (fail_connection(c, None), c.peer);
        self.cc_forget(peer, gone + flight);
        let c = self.conns.get_mut(slot).expect("slot");
        c.state = ConnState::Closed;
        c.shared.set_state(ConnState::Closed);
        self.remove_connection(conn);
    }

    /// Sends the machine's messages, one frame each.
    pub(crate) fn send_cm<L: Link>(&mut self, link: &mut L) {
        // What the link cannot take now waits in the machine for the next turn.
        while self.cm.has_output() && !link.full(false) {
            let Some((mut to, msg, private)) = self.cm.poll_transmit() else {
                break;
            };
            match self.resolve_for_cm(&to) {
                Ok(Some(mac)) => {
                    if to.mac == super::neighbours::UNRESOLVED {
                        if let CmMessage::ConnectReq { conn, .. } = msg {
                            self.cm.resolved(conn, mac, self.now);
                        }
                    }
                    to.mac = mac;
                }
                // Asked for: it goes again when answered (or at the next retry).
                Ok(None) => continue,
                Err(reason) => {
                    if let CmMessage::ConnectReq { conn, .. } = msg {
                        self.cm.forget(conn);
                        self.fail_connect(conn, reason);
                    }
                    continue;
                }
            }
            self.send_cm_frame(link, &to, &msg, private.as_deref().unwrap_or(&[]));
        }
    }

    fn send_cm_frame<L: Link>(
        &mut self,
        link: &mut L,
        to: &NodeAddr,
        msg: &CmMessage,
        private: &[u8],
    ) {
        let Some(mut m) = link.alloc() else {
            self.stats.drop_for(DropReason::NoBuffer);
            return;
        };
        let underlay = UnderlayRepr {
            src_mac: self.cfg.local.mac,
            dst_mac: to.mac,
            src_ip: self.cfg.local.ip,
            dst_ip: to.ip,
            src_port: wire::UDP_PORT,
            dst_port: to.udp_port,
            traffic_class: 0,
        };
        let max = self.caps.max_frame;
        let tag = super::link::Tagging::of(&self.cfg);
        let Ok(n) = msg.write_frame(private, &underlay, tag.room(&mut m, max)) else {
            return;
        };
        tag.done(&mut m, n, 0);
        self.stats.bytes_tx += n as u64;
        if link.push(m, false) {
            self.stats.frames_tx += 1;
        }
    }
}

/// The sealing of our connect `c` as the verified reply grants it: the session made
/// from the handshake's traffic secrets when both sides seal. A reply that does not
/// grant the sealing we asked for (or grants one we did not) fails the connection.
fn client_session(
    c: &mut ConnContext,
    keys: &SessionKeys,
    peer: &PeerParams,
    rekey_after: u64,
) -> Result<(), RejectReason> {
    let asked = c.shared.secure.load(Ordering::Relaxed);
    if asked != peer.secure {
        return Err(RejectReason::Insecure);
    }
    if asked {
        c.secure = Some(Box::new(crate::secure::Session::new(
            &keys.c2s,
            &keys.s2c,
            true,
            rekey_after,
        )));
    }
    Ok(())
}

/// The peer's parameters into a connection, which is then up.
fn establish(c: &mut ConnContext, peer: &PeerParams) {
    c.peer_conn = peer.conn;
    c.peer_key = peer.key;
    c.rx = Receiver::new(peer.isn, c.rx.window());
    c.segment_max = c.segment_max.min(segment_max_for(peer.max_frame as usize));
    if c.secure.is_some() {
        // Every frame of it ends with a seal cell.
        c.segment_max = c.segment_max.saturating_sub(wire::CELL_LEN as u32);
    }
    c.state = ConnState::Normal;
    c.shared
        .peer_conn
        .store(u64::from(peer.conn), Ordering::Relaxed);
    c.shared.secure.store(c.secure.is_some(), Ordering::Relaxed);

    c.shared.set_state(ConnState::Normal);
}
