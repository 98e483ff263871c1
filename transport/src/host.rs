//! The host interface: the typed control calls a library above the transport makes on a
//! node — registers, instructions, payload tokens, endpoints, peers, listening and
//! connecting, faults and counters — whoever drives it (the DPDK worker,
//! `deposit_transport::worker::Worker`; a [`Node`] driven by hand, as `sim`'s hosts do).
//!
//! [`Host`] is implemented for every driver of a node and for the node itself; it is
//! the one way in for control (the worker no longer dereferences to its node). Posting
//! and completions go through the lock-free queues of [`crate::connection`] and
//! [`crate::cq`], events through [`crate::events`]; a driver moves frames with
//! [`Node::turn`] (or `handle_frame` / `poll_transmit` / `handle_timeout` /
//! `next_timeout`, quinn's four calls).

use std::net::IpAddr;
use std::sync::Arc;

use crate::cm::{CmError, ConnectOptions, PrivateData};
use crate::connection::{ConnShared, CqShared};
use crate::doorbell::Doorbell;
use crate::events::EventRing;
use crate::faults::{FaultConfig, FaultStats};
use crate::node::{Accepted, ConnSummary, Node, ResumeError, Stats};
use crate::submit::SubmitRing;
use crate::tables::{
    EndpointEntry, EndpointId, NodeAddr, NodeId, RegProt, RegWindow, Rights, StoredInstruction,
    TableError, Token,
};
use crate::wake::WaitQueue;

mod sealed {
    /// What drives a node: the node it drives. Sealed — out of reach outside this
    /// crate, so a [`Host`](super::Host) gives its typed calls and nothing else.
    pub trait Drives {
        fn node(&self) -> &super::Node;
        fn node_mut(&mut self) -> &mut super::Node;
        /// Brings the node's clock up to now before a call that starts timers (a
        /// driver whose node does not see time pass between turns reads its clock).
        fn sync_clock(&mut self) {}
        /// The node's counters with the driver's own (mbufs in use, wake-ups).
        fn driver_stats(&self) -> super::Stats {
            self.node().stats()
        }
    }
}

pub(crate) use sealed::Drives;

impl Drives for Node {
    #[inline]
    fn node(&self) -> &Node {
        self
    }
    #[inline]
    fn node_mut(&mut self) -> &mut Node {
        self
    }
}

/// The typed control calls on a node (see the [module doc](self)). Implemented for
/// [`Node`] and every driver of one.
pub trait Host: Drives {
    // Registers.

    /// Allocates a window of `n` registers (zero, no protection bits).
    fn alloc_registers(&mut self, n: u32) -> Result<RegWindow, TableError> {
        self.node_mut().regs.alloc(n)
    }
    /// Frees a register window.
    fn free_registers(&mut self, w: RegWindow) -> Result<(), TableError> {
        self.node_mut().regs.free(w)
    }
    /// Register `abs` (absolute number), if it exists.
    fn register(&self, abs: u32) -> Option<u64> {
        self.node().regs.get(abs)
    }
    /// Sets register `abs`.
    fn set_register(&mut self, abs: u32, v: u64) -> Result<(), TableError> {
        self.node_mut().regs.set(abs, v)
    }
    /// Sets what senders may do with register `abs`.
    fn set_register_prot(&mut self, abs: u32, p: RegProt) -> Result<(), TableError> {
        self.node_mut().regs.set_prot(abs, p)
    }

    // Instructions.

    /// Allocates a window of `n` instruction slots.
    fn alloc_instructions(&mut self, n: u32) -> Result<RegWindow, TableError> {
        self.node_mut().instructions.alloc(n)
    }
    /// Frees an instruction window.
    fn free_instructions(&mut self, w: RegWindow) -> Result<(), TableError> {
        self.node_mut().instructions.free(w)
    }
    /// Sets (or clears) slot `index` of instruction window `w`, after validating it.
    fn set_instruction(
        &mut self,
        w: RegWindow,
        index: u32,
        ins: Option<StoredInstruction>,
    ) -> Result<(), TableError> {
        self.node_mut().instructions.set(w, index, ins)
    }
    /// Sets (or clears) global instruction `index`, after validating it.
    fn set_global_instruction(
        &mut self,
        index: u32,
        ins: Option<StoredInstruction>,
    ) -> Result<(), TableError> {
        self.node_mut().instructions.set_global(index, ins)
    }

    // Payload tokens.

    /// A write token for `len` bytes at `offset` of `endpoint` (one deposit), with
    /// `key` from the OS random source.
    fn insert_token(
        &mut self,
        endpoint: EndpointId,
        offset: u64,
        len: u64,
        key: u32,
    ) -> Result<Token, TableError> {
        self.node_mut().tokens.insert(endpoint, offset, len, key)
    }
    /// A read token for `len` bytes at `offset` of `endpoint` (until cancelled).
    fn insert_read_token(
        &mut self,
        endpoint: EndpointId,
        offset: u64,
        len: u64,
        key: u32,
    ) -> Result<Token, TableError> {
        self.node_mut()
            .tokens
            .insert_read(endpoint, offset, len, key)
    }
    /// Cancels a token (it names nothing any more).
    fn cancel_token(&mut self, token: Token) -> Result<(), TableError> {
        self.node_mut().tokens.cancel(token).map(|_| ())
    }

    // Endpoints.

    /// Adds an endpoint; returns its number. Without queues
    /// ([`Host::set_endpoint_queues`]), a message that would raise an event there is
    /// held as for a full queue.
    fn add_endpoint(&mut self, entry: EndpointEntry) -> EndpointId {
        self.node_mut().endpoints.insert(entry)
    }
    /// Attaches an endpoint's event and exception queues.
    fn set_endpoint_queues(
        &mut self,
        id: EndpointId,
        events: Arc<EventRing>,
        exceptions: Arc<EventRing>,
    ) {
        self.node_mut().set_endpoint_queues(id, events, exceptions)
    }
    /// Removes an endpoint and cancels the tokens naming it.
    fn remove_endpoint(&mut self, id: EndpointId) {
        let node = self.node_mut();
        node.endpoints.remove(id);
        node.tokens.cancel_endpoint(id);
    }

    /// Sets the rights of logical page `page` of endpoint `id` (see
    /// [`EndpointEntry::set_page_rights`]).
    fn set_page_rights(
        &mut self,
        id: EndpointId,
        page: u64,
        rights: Rights,
    ) -> Result<(), TableError> {
        endpoint_mut(self.node_mut(), id)?.set_page_rights(page, rights)
    }
    /// Marks logical page `page` of endpoint `id` present or not (see
    /// [`EndpointEntry::set_page_present`]).
    fn set_page_present(
        &mut self,
        id: EndpointId,
        page: u64,
        present: bool,
    ) -> Result<(), TableError> {
        endpoint_mut(self.node_mut(), id)?.set_page_present(page, present)
    }
    /// Gives endpoint `id` global registers (see [`EndpointEntry::set_globals`]).
    fn set_global_registers(&mut self, id: EndpointId, w: RegWindow) -> Result<(), TableError> {
        endpoint_mut(self.node_mut(), id)?.set_globals(w);
        Ok(())
    }

    // Peers.

    /// Adds a peer node with its MAC (a static entry: neither ARP nor a peer's frames
    /// change it); returns its number in the node table.
    fn add_peer(&mut self, addr: NodeAddr) -> NodeId {
        let node = self.node_mut();
        node.neigh.config().table.insert_static(addr.ip, addr.mac);
        node.nodes.insert_static(addr)
    }
    /// The addresses of peer `id` of the node table.
    fn peer(&self, id: NodeId) -> Option<NodeAddr> {
        self.node().nodes.get(id).copied()
    }
    /// The addresses known for the peer at `ip`, if it was added.
    fn peer_at(&self, ip: IpAddr) -> Option<NodeAddr> {
        let nodes = &self.node().nodes;
        nodes.find_ip(ip).and_then(|id| nodes.get(id).copied())
    }

    // Connections.

    /// Listens for connect requests to `service` on `endpoint` (see [`Node::listen`]).
    fn listen(
        &mut self,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
        backlog: usize,
    ) -> Result<Arc<WaitQueue<Accepted>>, CmError> {
        self.node_mut().listen(service, endpoint, cq, opts, backlog)
    }
    /// Stops listening on `service`.
    fn unlisten(&mut self, service: u32) {
        self.node_mut().unlisten(service)
    }
    /// Says which shard of this device listens on `service` (see [`Node::set_route`]).
    fn set_route(&mut self, service: u32, shard: u8, listening: bool) {
        self.node_mut().set_route(service, shard, listening)
    }
    /// Connects `endpoint` to `service` at `peer` (see [`Node::connect`]).
    fn connect(
        &mut self,
        peer: NodeAddr,
        service: u32,
        endpoint: EndpointId,
        cq: Arc<CqShared>,
        opts: &ConnectOptions,
    ) -> Result<Arc<ConnShared>, CmError> {
        self.sync_clock();
        self.node_mut().connect(peer, service, endpoint, cq, opts)
    }
    /// Closes connection `number` (see [`Node::close`]).
    fn close(&mut self, number: u32) -> Result<(), CmError> {
        self.sync_clock();
        self.node_mut().close(number)
    }
    /// Runs the message a fault kept on connection `number`, once the host repaired
    /// what it needed (see [`Node::resume`]).
    fn resume(&mut self, number: u32) -> Result<(), ResumeError> {
        self.sync_clock();
        self.node_mut().resume(number)
    }
    /// The private data the peer sent with connection `conn`'s connect (once).
    fn take_peer_private(&mut self, conn: u32) -> PrivateData {
        self.node_mut().take_peer_private(conn)
    }
    /// Re-confirms connection `number` (see [`Node::reconfirm`]).
    fn reconfirm(&mut self, number: u32) {
        self.node_mut().reconfirm(number)
    }
    /// Connections in the node's table.
    fn connections(&self) -> usize {
        self.node().conns.len()
    }
    /// Summaries of up to `max` connections from number `from` on (see
    /// [`Node::conn_summaries`]).
    fn conn_summaries(&self, from: u32, max: usize) -> (usize, Vec<ConnSummary>) {
        self.node().conn_summaries(from, max)
    }
    /// Every peer node's congestion state (see [`Node::peer_summaries`]).
    fn peer_summaries(&self) -> Vec<crate::node::PeerSummary> {
        self.node().peer_summaries()
    }

    // Faults and counters.

    /// Sets (or clears) fault injection on the frames the node receives.
    fn set_faults(&mut self, cfg: Option<FaultConfig>) {
        self.node_mut().set_faults(cfg)
    }
    /// What fault injection did.
    fn fault_stats(&self) -> FaultStats {
        self.node().fault_stats()
    }
    /// The node's counters, with its driver's (mbufs in use and stashed, wake-ups).
    fn stats(&self) -> Stats {
        self.driver_stats()
    }
    /// Queues a raw frame for transmission as is (diagnostics and hostile-input tests).
    fn send_raw(&mut self, frame: &[u8]) {
        self.node_mut().send_raw(frame)
    }
    /// The node's submission ring (the one posts of its connections go on).
    fn submit_ring(&self) -> &Arc<SubmitRing> {
        self.node().submit_ring()
    }
    /// Largest payload of one message on this node's link.
    fn segment_max(&self) -> u32 {
        self.node().segment_max()
    }
}

impl<T: Drives> Host for T {}

/// A driver of a node, as a library above the transport runs one: the DPDK worker
/// (`deposit_transport::worker::Worker`), or `sim`'s in-process segment
/// (`deposit_transport::sim::SegmentDriver`, for tests without DPDK). Beside the
/// [`Host`] calls it takes the node's turns ([`Node::turn`], in the driver's own I/O)
/// and sleeps. Object-safe: `deposit` holds a `Box<dyn Driver>` per shard, so its API
/// is one over any driver.
pub trait Driver: Host + Send {
    /// One turn ([`Node::turn`] over the driver's link and clock): how much work it
    /// found (frames in + frames out).
    fn poll(&mut self) -> usize;
    /// A turn that reads the clock and runs the timers due whatever it finds (the
    /// first after a timed sleep, whose timers may have fallen due meanwhile).
    fn poll_ticked(&mut self) -> usize;
    /// Sleeps until a post, a control call, a frame the driver is told of (its
    /// doorbells) or `deadline`; returns at once, having polled, when work came in as
    /// it went to sleep.
    fn sleep_until(&mut self, deadline: std::time::Instant);
    /// The doorbells of its receive queues (none where frames cannot wake it): a thread
    /// that sleeps on the submission ring in the driver's stead marks them around its
    /// sleep, as [`Driver::sleep_until`] does, so that a frame wakes it.
    fn doorbells(&self) -> Vec<Arc<Doorbell>>;
    /// Whether the link is up (memif: the peer is connected).
    fn link_up(&self) -> bool;
}

/// Endpoint `id`'s table entry, or [`TableError::NoEndpoint`].
fn endpoint_mut(node: &mut Node, id: EndpointId) -> Result<&mut EndpointEntry, TableError> {
    node.endpoints
        .get_mut(id)
        .ok_or(TableError::NoEndpoint { id: id.0 })
}
