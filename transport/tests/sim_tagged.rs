//! Tagged messaging over simulated hosts, no DPDK: each host runs a tagged engine over a
//! `sim` node (its `Fabric`), the network steps between the engines' turns. Eager and
//! rendezvous, matching order per source and tag, wildcards, truncation, probes and
//! claims, cancel, receives posted before and after arrival, credits shared among many
//! peers, a lossy link.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use deposit_transport::cm::{private_data, ConnectOptions, Registers};
use deposit_transport::connection::{random_u32, Completion, ConnShared, ConnState, CqShared, Wqe};
use deposit_transport::events::{EventKind, EventRing};
use deposit_transport::host::Host;
use deposit_transport::mem::EndpointMemory;
use deposit_transport::node::{Accepted as NodeAccepted, NodeConfig};
use deposit_transport::sim::{LinkConfig, Network};
use deposit_transport::tables::{EndpointEntry, EndpointId, RegWindow, Rights, Token};
use deposit_transport::tagged::engine::{ring_instruction, ring_registers};
use deposit_transport::tagged::{
    Accepted, Arrival, Config, Engine, Fabric, PeerAddr, PeerId, RegionKey, RmaOp, Selector,
    TagCompletion, TagOp, TagStatus,
};
use deposit_transport::wake::WaitQueue;

/// One host's side of the simulated network, as a tagged engine sees a device.
struct SimFabric {
    net: Rc<RefCell<Network>>,
    host: usize,
    ep: EndpointId,
    cq: Arc<CqShared>,
    regs: RegWindow,
    code: RegWindow,
    accepted: Option<Arc<WaitQueue<NodeAccepted>>>,
    events: Arc<EventRing>,
    /// The endpoint of no rights connections to regions come from.
    nothing: Option<EndpointId>,
    /// Every connection it dialed (for tests that close them under the engine).
    dialed: RefCell<Vec<Arc<ConnShared>>>,
}

/// A region a sim host exposes: its endpoint, listener queue and accepted connections.
struct SimRegion {
    _ep: EndpointId,
    accepted: Arc<WaitQueue<NodeAccepted>>,
    conns: Vec<Arc<ConnShared>>,
}

impl SimFabric {
    fn new(net: &Rc<RefCell<Network>>, host: usize) -> SimFabric {
        SimFabric {
            net: net.clone(),
            host,
            ep: EndpointId(u32::MAX),
            cq: CqShared::new(1 << 16),
            regs: RegWindow { base: 0, len: 0 },
            code: RegWindow { base: 0, len: 0 },
            accepted: None,
            events: Arc::new(EventRing::new(1)),
            nothing: None,
            dialed: RefCell::new(Vec::new()),
        }
    }

    /// Starts connecting to `to` from `ep`.
    fn dial(
        &self,
        to: PeerAddr,
        ep: EndpointId,
        opts: &ConnectOptions,
    ) -> Result<Arc<ConnShared>, String> {
        let mut net = self.net.borrow_mut();
        let now = net.now;
        let addr = net
            .hosts
            .iter()
            .map(|h| h.addr())
            .find(|a| a.ip == to.ip)
            .ok_or_else(|| format!("no host {to}"))?;
        let node = &mut net.hosts[self.host].node;
        node.set_now(now);
        let c = node
            .connect(addr, to.service, ep, self.cq.clone(), opts)
            .map_err(|e| e.to_string())?;
        self.dialed.borrow_mut().push(c.clone());
        Ok(c)
    }

    fn options(&self, private: &[u8]) -> ConnectOptions {
        ConnectOptions {
            registers: Registers::Window(self.regs),
            instructions: self.code,
            isolated: true,
            private_data: private_data(private),
            sq_depth: 4096,
            ..ConnectOptions::default()
        }
    }
}

impl Fabric for SimFabric {
    type Conn = Arc<ConnShared>;
    type Mem = EndpointId;
    type Error = String;

    fn open(
        &mut self,
        len: u64,
        slot: u32,
        slots: u32,
    ) -> Result<(EndpointId, *mut u8, u32), String> {
        let mut net = self.net.borrow_mut();
        let h = &mut net.hosts[self.host];
        let mem =
            Arc::new(EndpointMemory::alloc_ordinary(len as usize).map_err(|e| e.to_string())?);
        let base = mem.as_ptr();
        let entry = EndpointEntry::new(
            mem.clone(),
            0,
            len as usize,
            Rights::REMOTE_WRITE | Rights::REMOTE_READ,
        )
        .map_err(|e| e.to_string())?;
        self.ep = h.node.add_endpoint(entry);
        self.events = Arc::new(EventRing::new(2 * slots as usize));
        h.node
            .set_endpoint_queues(self.ep, self.events.clone(), Arc::new(EventRing::new(64)));
        h.memory.push(mem);
        self.regs = h.node.alloc_registers(3).map_err(|e| e.to_string())?;
        for (i, v) in ring_registers(slot, slots).into_iter().enumerate() {
            h.node
                .set_register(self.regs.base + i as u32, v)
                .map_err(|e| e.to_string())?;
        }
        self.code = h.node.alloc_instructions(1).map_err(|e| e.to_string())?;
        h.node
            .set_instruction(self.code, 0, Some(ring_instruction()))
            .map_err(|e| e.to_string())?;
        Ok((self.ep, base, 0))
    }

    fn listen(&mut self, service: u32, reply: &[u8]) -> Result<(), String> {
        let opts = self.options(reply);
        let mut net = self.net.borrow_mut();
        let q = net.hosts[self.host]
            .node
            .listen(service, self.ep, self.cq.clone(), &opts, 4096)
            .map_err(|e| e.to_string())?;
        self.accepted = Some(q);
        Ok(())
    }

    fn accept(&mut self) -> Option<Accepted<Arc<ConnShared>>> {
        let a = self.accepted.as_ref()?.pop()?;
        Some(Accepted {
            number: a.shared.number,
            hello: a.private.as_deref().unwrap_or(&[]).to_vec(),
            conn: a.shared,
        })
    }

    fn connect(&mut self, to: PeerAddr, hello: &[u8]) -> Result<Arc<ConnShared>, String> {
        let opts = ConnectOptions {
            registers: Registers::None,
            instructions: RegWindow { base: 0, len: 0 },
            ..self.options(hello)
        };
        self.dial(to, self.ep, &opts)
    }

    fn state(&self, c: &Arc<ConnShared>) -> ConnState {
        c.state()
    }

    fn reply(&mut self, c: &mut Arc<ConnShared>) -> Vec<u8> {
        let mut net = self.net.borrow_mut();
        let p = net.hosts[self.host].node.take_peer_private(c.number);
        p.as_deref().unwrap_or(&[]).to_vec()
    }

    fn remote_number(&self, c: &Arc<ConnShared>) -> u32 {
        c.peer_conn.load(std::sync::atomic::Ordering::Relaxed) as u32
    }

    fn arrival(&mut self) -> Option<Arrival> {
        loop {
            let e = self.events.pop()?;
            if e.kind == EventKind::Interrupt {
                return Some(Arrival {
                    conn: e.conn,
                    ea: e.ea,
                    len: e.len,
                });
            }
        }
    }

    fn post(&mut self, c: &Arc<ConnShared>, wr: &Wqe) -> bool {
        c.post(wr).is_ok()
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        while let Some(c) = self.cq.pop() {
            out.push(c);
        }
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize) -> Result<EndpointId, String> {
        // SAFETY: forwarded to the caller's contract.
        let mem =
            Arc::new(unsafe { EndpointMemory::register(ptr, len) }.map_err(|e| e.to_string())?);
        let entry =
            EndpointEntry::new(mem, 0, len, Rights::REMOTE_READ).map_err(|e| e.to_string())?;
        let mut net = self.net.borrow_mut();
        Ok(net.hosts[self.host].node.add_endpoint(entry))
    }

    fn mem_id(&self, m: &EndpointId) -> EndpointId {
        *m
    }

    fn deregister(&mut self, m: EndpointId) {
        let mut net = self.net.borrow_mut();
        let node = &mut net.hosts[self.host].node;
        node.remove_endpoint(m);
    }

    fn read_token(&mut self, ep: &EndpointId, offset: u64, len: u64) -> Result<u64, String> {
        let mut net = self.net.borrow_mut();
        let t = net.hosts[self.host]
            .node
            .insert_read_token(*ep, offset, len, random_u32())
            .map_err(|e| e.to_string())?;
        Ok(t.0)
    }

    fn cancel_token(&mut self, token: u64) {
        let mut net = self.net.borrow_mut();
        let _ = net.hosts[self.host].node.cancel_token(Token(token));
    }

    fn now(&self) -> u64 {
        self.net.borrow().now
    }

    type Region = SimRegion;

    unsafe fn expose(
        &mut self,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
        service: u32,
        secret: &[u8],
        reply: &[u8],
    ) -> Result<SimRegion, String> {
        // SAFETY: forwarded to the caller's contract.
        let mem =
            Arc::new(unsafe { EndpointMemory::register(ptr, len) }.map_err(|e| e.to_string())?);
        let entry = EndpointEntry::new(mem, 0, len, rights).map_err(|e| e.to_string())?;
        let opts = ConnectOptions {
            private_data: private_data(reply),
            require_private_data: private_data(secret),
            ..ConnectOptions::default()
        };
        let mut net = self.net.borrow_mut();
        let node = &mut net.hosts[self.host].node;
        let ep = node.add_endpoint(entry);
        let accepted = node
            .listen(service, ep, self.cq.clone(), &opts, 4096)
            .map_err(|e| e.to_string())?;
        Ok(SimRegion {
            _ep: ep,
            accepted,
            conns: Vec::new(),
        })
    }

    fn serve(&mut self, r: &mut SimRegion) {
        while let Some(a) = r.accepted.pop() {
            r.conns.push(a.shared);
        }
    }

    fn connect_region(&mut self, to: PeerAddr, secret: &[u8]) -> Result<Arc<ConnShared>, String> {
        let ep = match self.nothing {
            Some(ep) => ep,
            None => {
                let mut net = self.net.borrow_mut();
                let h = &mut net.hosts[self.host];
                let mem = Arc::new(EndpointMemory::alloc_ordinary(64).map_err(|e| e.to_string())?);
                let entry = EndpointEntry::new(mem.clone(), 0, 64, Rights::NONE)
                    .map_err(|e| e.to_string())?;
                h.memory.push(mem);
                let ep = h.node.add_endpoint(entry);
                self.nothing = Some(ep);
                ep
            }
        };
        let opts = ConnectOptions {
            private_data: private_data(secret),
            sq_depth: 4096,
            ..ConnectOptions::default()
        };
        self.dial(to, ep, &opts)
    }
}

const SERVICE: u32 = 18700;

struct Job {
    net: Rc<RefCell<Network>>,
    engines: Vec<Engine<SimFabric>>,
    /// Completions taken so far, per engine.
    done: Vec<Vec<TagCompletion>>,
}

impl Job {
    fn new(n: usize, link: LinkConfig, seed: u64, cfg: Config) -> Job {
        Job::with_cm_timeout(n, link, seed, cfg, NodeConfig::default().cm_timeout_us)
    }

    fn with_cm_timeout(n: usize, link: LinkConfig, seed: u64, cfg: Config, cm_us: u64) -> Job {
        let node = NodeConfig {
            cm_timeout_us: cm_us,
            ..NodeConfig::default()
        };
        Job::with_node(n, link, seed, cfg, node)
    }

    /// Hosts of `node`'s configuration (on IPv6 when its address is), with room for the
    /// job's connections.
    fn with_node(n: usize, link: LinkConfig, seed: u64, cfg: Config, node: NodeConfig) -> Job {
        let node = NodeConfig {
            max_connections: 4 * n + 16,
            ..node
        };
        let net = Rc::new(RefCell::new(Network::new(n, &node, link, seed)));
        let engines = (0..n)
            .map(|h| {
                let ip = net.borrow().hosts[h].addr().ip;
                Engine::new(SimFabric::new(&net, h), cfg, PeerAddr::new(ip, SERVICE))
                    .expect("engine")
            })
            .collect();
        Job {
            net,
            engines,
            done: vec![Vec::new(); n],
        }
    }

    fn addr(&self, h: usize) -> PeerAddr {
        self.engines[h].local()
    }

    /// `h`'s id for host `to`.
    fn peer(&mut self, h: usize, to: usize) -> PeerId {
        let a = self.addr(to);
        self.engines[h].peer(a)
    }

    /// One network step and a turn of every engine.
    fn turn(&mut self) {
        self.net.borrow_mut().step();
        for (e, done) in self.engines.iter_mut().zip(&mut self.done) {
            let mut out = [TagCompletion {
                context: 0,
                op: TagOp::Send,
                tagged: false,
                status: TagStatus::Success,
                len: 0,
                olen: 0,
                tag: 0,
                data: None,
                src: None,
            }; 64];
            loop {
                let n = e.poll(&mut out);
                done.extend_from_slice(&out[..n]);
                if n < out.len() {
                    break;
                }
            }
        }
        let next = {
            let net = self.net.borrow();
            let t = net
                .hosts
                .iter()
                .map(|h| h.node.next_timeout())
                .min()
                .unwrap_or(u64::MAX);
            // Engines poll at least every microsecond of simulated time.
            t.min(net.now + 1_000).max(net.now + 100)
        };
        self.net.borrow_mut().now = next;
    }

    /// Turns until `done` holds or `limit_ns` of simulated time passed.
    fn run(&mut self, limit_ns: u64, mut done: impl FnMut(&Job) -> bool) -> bool {
        let end = self.net.borrow().now + limit_ns;
        while self.net.borrow().now < end {
            self.turn();
            if done(self) {
                return true;
            }
        }
        false
    }

    /// The completion of `h` with `context`, once it came.
    fn completion(&self, h: usize, op: TagOp, context: u64) -> Option<TagCompletion> {
        self.done[h]
            .iter()
            .find(|c| c.context == context && c.op == op)
            .copied()
    }

    fn wait(&mut self, h: usize, op: TagOp, context: u64) -> TagCompletion {
        let got = self.run(200_000_000, |j| j.completion(h, op, context).is_some());
        assert!(
            got,
            "host {h}: no {op:?} completion for {context:#x} in 200 ms simulated: {:?}",
            self.engines
                .iter()
                .map(|e| (e.stats(), e.queued()))
                .collect::<Vec<_>>()
        );
        self.completion(h, op, context).expect("came")
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn cfg() -> Config {
    Config::new(1024, 64, 64)
}

/// Sends `msg` from `from` to `to` with `tag` (inject: our copy goes at once).
fn send(j: &mut Job, from: usize, to: usize, tag: Option<u64>, msg: &[u8], ctx: u64) {
    let p = j.peer(from, to);
    // SAFETY: injected: copied before this returns.
    unsafe { j.engines[from].send(p, tag, None, msg.as_ptr(), msg.len() as u64, ctx, true) }
        .expect("send");
}

/// Posts a receive of `buf` at `h`.
fn recv(j: &mut Job, h: usize, sel: Selector, tagged: bool, buf: &mut [u8], ctx: u64) {
    // SAFETY: every test keeps its buffers until the completions it waits for came.
    unsafe { j.engines[h].recv(sel, tagged, buf.as_mut_ptr(), buf.len() as u64, ctx) }
        .expect("recv");
}

#[test]
fn eager_and_rendezvous_land_whole_posted_before_and_after_arrival() {
    let mut j = Job::new(2, LinkConfig::default(), 1, cfg());
    // One slot (up to 960 bytes), several slots (up to eager_max: 17 slots of 1 KiB),
    // rendezvous beyond.
    let e = cfg().eager_max as usize;
    assert_eq!(e, 17 * 1024 - 64);
    for (k, &n) in [
        0usize,
        1,
        959,
        960,
        961,
        1024,
        4096,
        e,
        e + 1,
        100_000,
        1 << 20,
    ]
    .iter()
    .enumerate()
    {
        let msg = pattern(n, k as u8);
        let k = k as u64;
        // Posted before: the receive waits for the message.
        let mut a = vec![0u8; n];
        recv(&mut j, 1, Selector::tag(k), true, &mut a, 100 + k);
        send(&mut j, 0, 1, Some(k), &msg, 200 + k);
        let c = j.wait(1, TagOp::Recv, 100 + k);
        assert_eq!(
            (c.status, c.len, c.olen, c.tag),
            (TagStatus::Success, n as u64, n as u64, k)
        );
        assert_eq!(c.src, Some(j.peer(1, 0)));
        assert!(a == msg, "{n} bytes posted before arrival");
        assert_eq!(j.wait(0, TagOp::Send, 200 + k).status, TagStatus::Success);
        // Posted after: the message waits (eager copied out, rendezvous announced).
        send(&mut j, 0, 1, Some(k), &msg, 300 + k);
        j.run(50_000_000, |j| j.engines[1].queued().1 == 1);
        let mut b = vec![0u8; n];
        recv(&mut j, 1, Selector::tag(k), true, &mut b, 400 + k);
        let c = j.wait(1, TagOp::Recv, 400 + k);
        assert_eq!((c.status, c.len), (TagStatus::Success, n as u64));
        assert!(b == msg, "{n} bytes posted after arrival");
        assert_eq!(j.wait(0, TagOp::Send, 300 + k).status, TagStatus::Success);
    }
    let s = j.engines[1].stats();
    assert_eq!((s.eager_rx, s.rndv_rx), (16, 6), "{s:?}");
    assert_eq!((s.bad_header, s.bad_source, s.bad_sequence), (0, 0, 0));
}

#[test]
fn a_multi_slot_message_takes_a_receive_posted_while_it_arrives_or_truncates() {
    // Four slots of credit at a time: a 10-slot message comes in several round trips.
    let mut c = cfg();
    c.burst = 4;
    let mut j = Job::new(2, LinkConfig::default(), 31, c);
    let msg = pattern(10_000, 3);
    // Unexpected at its first slot, a receive posted before its last takes it whole.
    send(&mut j, 0, 1, Some(1), &msg, 1);
    j.run(50_000_000, |j| j.engines[1].stats().slots >= 4);
    assert_eq!(j.engines[1].queued(), (0, 0), "not whole yet: not waiting");
    let mut a = vec![0u8; 10_000];
    recv(&mut j, 1, Selector::tag(1), true, &mut a, 1);
    assert_eq!(j.wait(1, TagOp::Recv, 1).status, TagStatus::Success);
    assert!(a == msg);
    // Matched at its first slot by a short receive: truncated, the rest dropped, and
    // the next message from the same sender still lands whole.
    let mut short = vec![0u8; 2500];
    recv(&mut j, 1, Selector::tag(2), true, &mut short, 2);
    send(&mut j, 0, 1, Some(2), &msg, 2);
    let c = j.wait(1, TagOp::Recv, 2);
    assert_eq!(
        (c.status, c.len, c.olen),
        (TagStatus::Truncated, 2500, 10_000)
    );
    assert!(short[..] == msg[..2500]);
    let mut b = vec![0u8; 10_000];
    recv(&mut j, 1, Selector::tag(3), true, &mut b, 3);
    send(&mut j, 0, 1, Some(3), &msg, 3);
    assert_eq!(j.wait(1, TagOp::Recv, 3).status, TagStatus::Success);
    assert!(b == msg);
    assert_eq!(j.wait(0, TagOp::Send, 2).status, TagStatus::Success);
}

#[test]
fn one_source_and_tag_match_in_sending_order_with_wildcards() {
    let mut j = Job::new(3, LinkConfig::default(), 2, cfg());
    // Host 0 sends 20 messages with tag 5, mixing eager and rendezvous sizes; host 2
    // sends 5 with tag 6. Host 1 takes them all with wildcards afterwards.
    for i in 0..20u8 {
        let n = if i % 3 == 0 { 3000 } else { 16 };
        send(&mut j, 0, 1, Some(5), &pattern(n, i), u64::from(i));
    }
    for i in 0..5u8 {
        send(
            &mut j,
            2,
            1,
            Some(6),
            &pattern(8, 100 + i),
            1000 + u64::from(i),
        );
    }
    j.run(100_000_000, |j| j.engines[1].queued().1 == 25);
    assert_eq!(j.engines[1].queued().1, 25);
    // From host 0, any tag: its messages in its order.
    let from0 = j.peer(1, 0);
    let mut bufs: Vec<Vec<u8>> = (0..20).map(|_| vec![0u8; 4096]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        let sel = Selector {
            src: Some(from0),
            tag: 0,
            ignore: u64::MAX,
        };
        recv(&mut j, 1, sel, true, b, 10_000 + i as u64);
    }
    for (i, b) in bufs.iter().enumerate() {
        let c = j.wait(1, TagOp::Recv, 10_000 + i as u64);
        let n = if i % 3 == 0 { 3000 } else { 16 };
        assert_eq!((c.status, c.len, c.tag), (TagStatus::Success, n as u64, 5));
        assert!(
            b[..n] == pattern(n, i as u8)[..],
            "message {i} out of order"
        );
    }
    // Any source, tag 6: host 2's, in order.
    for i in 0..5u8 {
        let mut b = [0u8; 8];
        recv(
            &mut j,
            1,
            Selector::tag(6),
            true,
            &mut b,
            20_000 + u64::from(i),
        );
        let c = j.wait(1, TagOp::Recv, 20_000 + u64::from(i));
        assert_eq!((c.src, c.tag), (Some(j.peer(1, 2)), 6));
        assert_eq!(b[..], pattern(8, 100 + i)[..]);
    }
    assert_eq!(j.engines[1].queued(), (0, 0));
}

#[test]
fn truncation_says_how_long_the_message_was() {
    let mut j = Job::new(2, LinkConfig::default(), 3, cfg());
    for (k, n) in [(1u64, 500usize), (2, 200_000)] {
        let msg = pattern(n, 7);
        let mut b = vec![0u8; 100];
        recv(&mut j, 1, Selector::tag(k), true, &mut b, k);
        send(&mut j, 0, 1, Some(k), &msg, k);
        let c = j.wait(1, TagOp::Recv, k);
        assert_eq!(
            (c.status, c.len, c.olen),
            (TagStatus::Truncated, 100, n as u64)
        );
        assert_eq!(b[..], msg[..100]);
        // The sender's send completes all the same.
        assert_eq!(j.wait(0, TagOp::Send, k).status, TagStatus::Success);
    }
}

#[test]
fn peek_claim_receive_and_discard() {
    let mut j = Job::new(2, LinkConfig::default(), 4, cfg());
    let sel = Selector::tag(9);
    assert!(j.engines[1].peek(&sel, true).is_none());
    send(&mut j, 0, 1, Some(9), &pattern(64, 1), 1);
    send(&mut j, 0, 1, Some(9), &pattern(50_000, 2), 2);
    send(&mut j, 0, 1, Some(9), &pattern(70_000, 3), 3);
    j.run(50_000_000, |j| j.engines[1].queued().1 == 3);
    let p = j.engines[1].peek(&sel, true).expect("waiting");
    assert_eq!((p.len, p.tag), (64, 9));
    // Claim the first: a receive posted now takes the second, the claim the first.
    let c = j.engines[1].claim(&sel, true, 77).expect("claimed");
    assert_eq!(c.len, 64);
    assert_eq!(j.engines[1].peek(&sel, true).expect("next").len, 50_000);
    let mut second = vec![0u8; 50_000];
    recv(&mut j, 1, sel, true, &mut second, 5);
    let mut first = vec![0u8; 64];
    // SAFETY: kept until its completion.
    unsafe { j.engines[1].recv_claimed(77, first.as_mut_ptr(), 64) }.expect("claimed");
    assert_eq!(j.wait(1, TagOp::Recv, 77).len, 64);
    assert_eq!(first, pattern(64, 1));
    assert_eq!(j.wait(1, TagOp::Recv, 5).len, 50_000);
    assert!(second == pattern(50_000, 2));
    // Claim and discard the rendezvous one: its sender completes, nothing is read.
    assert_eq!(
        j.engines[1].claim(&sel, true, 88).expect("third").len,
        70_000
    );
    assert_eq!(j.engines[1].discard(88).expect("claimed").len, 70_000);
    assert!(j.engines[1].discard(88).is_err(), "discarded once");
    assert_eq!(j.wait(0, TagOp::Send, 3).status, TagStatus::Success);
    assert_eq!(j.engines[1].queued(), (0, 0));
}

#[test]
fn cancel_takes_back_a_receive_that_nothing_matched() {
    let mut j = Job::new(2, LinkConfig::default(), 5, cfg());
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    recv(&mut j, 1, Selector::tag(1), true, &mut a, 1);
    recv(&mut j, 1, Selector::tag(2), true, &mut b, 2);
    send(&mut j, 0, 1, Some(2), b"matched", 9);
    assert_eq!(j.wait(1, TagOp::Recv, 2).status, TagStatus::Success);
    assert!(
        !j.engines[1].cancel(2),
        "a matched receive is not cancelled"
    );
    assert!(j.engines[1].cancel(1));
    assert_eq!(j.wait(1, TagOp::Recv, 1).status, TagStatus::Cancelled);
    // A message with the cancelled receive's tag now waits.
    send(&mut j, 0, 1, Some(1), b"late", 10);
    j.run(50_000_000, |j| j.engines[1].queued().1 == 1);
    assert_eq!(j.engines[1].queued(), (0, 1));
}

#[test]
fn untagged_and_tagged_messages_match_their_own_receives() {
    let mut j = Job::new(2, LinkConfig::default(), 6, cfg());
    send(&mut j, 0, 1, Some(0), b"tagged", 1);
    send(&mut j, 0, 1, None, b"untagged", 2);
    let mut u = [0u8; 8];
    recv(&mut j, 1, Selector::ANY, false, &mut u, 3);
    let c = j.wait(1, TagOp::Recv, 3);
    assert_eq!((c.tagged, c.len, &u), (false, 8, b"untagged"));
    let mut t = [0u8; 6];
    recv(&mut j, 1, Selector::ANY, true, &mut t, 4);
    assert_eq!(&t, b"tagged");
}

#[test]
fn many_senders_share_one_ring_by_credits() {
    // 24 senders into one receiver whose ring has 16 slots: each gets a slot or so at a
    // time, and every message arrives, in order per sender.
    let n = 25;
    let cfg = Config {
        burst: 4,
        ..Config::new(1024, 16, 256)
    };
    let mut j = Job::new(n, LinkConfig::default(), 7, cfg);
    let per = 30u64;
    for s in 1..n {
        for i in 0..per {
            let size = if i % 10 == 9 { 5000 } else { 100 };
            send(
                &mut j,
                s,
                0,
                Some(i),
                &pattern(size, (s as u8) ^ (i as u8)),
                i,
            );
        }
    }
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    for s in 1..n {
        let src = j.peer(0, s);
        for i in 0..per {
            bufs.push(vec![0u8; 5000]);
            let b = bufs.last_mut().expect("pushed");
            recv(
                &mut j,
                0,
                Selector::tag(i).from(src),
                true,
                b,
                (s as u64) << 32 | i,
            );
        }
    }
    let total = (n - 1) * per as usize;
    let ok = j.run(20_000_000_000, |j| {
        j.done[0].iter().filter(|c| c.op == TagOp::Recv).count() == total
    });
    assert!(ok, "{} of {total} received", j.done[0].len());
    let mut k = 0;
    for s in 1..n {
        for i in 0..per {
            let size = if i % 10 == 9 { 5000 } else { 100 };
            let c = j
                .completion(0, TagOp::Recv, (s as u64) << 32 | i)
                .expect("came");
            assert_eq!((c.status, c.len), (TagStatus::Success, size as u64));
            assert!(bufs[k][..size] == pattern(size, (s as u8) ^ (i as u8))[..]);
            k += 1;
        }
    }
    let st = j.engines[0].stats();
    assert_eq!((st.bad_sequence, st.bad_source), (0, 0), "{st:?}");
    let credit_reads: u64 = j.engines.iter().map(|e| e.stats().credit_reads).sum();
    assert!(credit_reads > 0, "senders read their credits");
    for s in 1..n {
        for i in 0..per {
            assert_eq!(j.wait(s, TagOp::Send, i).status, TagStatus::Success);
        }
    }
}

#[test]
fn a_lossy_link_delays_but_never_corrupts() {
    let mut j = Job::new(2, LinkConfig::lossy(0.02), 8, cfg());
    let mut bufs = Vec::new();
    for i in 0..40u64 {
        let n = [10usize, 900, 3000, 70_000][i as usize % 4];
        bufs.push(vec![0u8; n]);
        let b = bufs.last_mut().expect("pushed");
        recv(&mut j, 1, Selector::tag(i), true, b, i);
        send(&mut j, 0, 1, Some(i), &pattern(n, i as u8), i);
    }
    for (i, b) in bufs.iter().enumerate() {
        let c = j.wait(1, TagOp::Recv, i as u64);
        assert_eq!(c.status, TagStatus::Success, "message {i}");
        assert!(b[..] == pattern(b.len(), i as u8)[..], "message {i}");
    }
}

#[test]
fn a_hundred_senders_into_one_receiver() {
    let n = 101;
    let cfg = Config {
        burst: 8,
        ..Config::new(1024, 128, 512)
    };
    let mut j = Job::new(n, LinkConfig::default(), 10, cfg);
    for s in 1..n {
        for i in 0..3u64 {
            let size = if i == 2 { 4000 } else { 64 };
            send(
                &mut j,
                s,
                0,
                Some(s as u64),
                &pattern(size, (s + i as usize) as u8),
                i,
            );
        }
    }
    let mut bufs = vec![vec![0u8; 4000]; 3 * (n - 1)];
    for (k, b) in bufs.iter_mut().enumerate() {
        let s = 1 + k / 3;
        let src = j.peer(0, s);
        recv(
            &mut j,
            0,
            Selector::tag(s as u64).from(src),
            true,
            b,
            k as u64,
        );
    }
    let ok = j.run(2_000_000_000, |j| {
        j.done[0].iter().filter(|c| c.op == TagOp::Recv).count() == 3 * (n - 1)
    });
    assert!(ok, "{} received", j.done[0].len());
    for (k, b) in bufs.iter().enumerate() {
        let (s, i) = (1 + k / 3, k % 3);
        let size = if i == 2 { 4000 } else { 64 };
        let c = j.completion(0, TagOp::Recv, k as u64).expect("came");
        assert_eq!((c.status, c.len), (TagStatus::Success, size as u64));
        assert!(
            b[..size] == pattern(size, (s + i) as u8)[..],
            "sender {s} message {i}"
        );
    }
    assert_eq!(j.engines[0].peers(), n - 1);
}

#[test]
fn a_peer_that_writes_garbage_is_counted_and_cannot_pose_as_another() {
    let mut j = Job::new(3, LinkConfig::default(), 11, cfg());
    // Host 0 talks properly to host 1.
    send(&mut j, 0, 1, Some(1), b"first", 1);
    let mut a = [0u8; 5];
    recv(&mut j, 1, Selector::tag(1), true, &mut a, 1);
    j.wait(1, TagOp::Recv, 1);
    // Host 2 opens a connection of its own to host 1's ring and writes what it likes
    // with the ring instruction: garbage, a header naming host 0 as its source, and
    // more slots than its credit.
    let (raw_ep, conn, cq) = {
        let mut net = j.net.borrow_mut();
        let now = net.now;
        let to = net.hosts[1].addr();
        let h = &mut net.hosts[2];
        let ep = h.endpoint(1 << 16, Rights::REMOTE_WRITE, 16);
        let cq = CqShared::new(1024);
        let mut hello = Vec::new();
        hello.extend_from_slice(&0x6464_7467u32.to_le_bytes());
        hello.extend_from_slice(&[10, 0, 0, 3]);
        hello.extend_from_slice(&999u32.to_le_bytes());
        let opts = ConnectOptions {
            private_data: private_data(&hello),
            ..ConnectOptions::default()
        };
        h.node.set_now(now);
        let c = h
            .node
            .connect(to, SERVICE, ep, cq.clone(), &opts)
            .expect("connect");
        (ep, c, cq)
    };
    assert!(j.run(100_000_000, |_| conn.state() == ConnState::Normal));
    j.run(1_000_000, |_| false); // host 1 accepts and grants
    let forged = {
        use deposit_transport::tagged::wire::{Header, Kind, TAGGED};
        let mut slot = vec![0u8; 68];
        Header {
            kind: Kind::Eager,
            flags: TAGGED,
            service: SERVICE,
            seq: 0,
            tag: 1,
            data: 0,
            len: 4,
            token: 0,
            cookie: 0,
            credit: 0,
        }
        .encode(&mut slot);
        slot[64..].copy_from_slice(b"evil");
        slot
    };
    {
        let net = j.net.borrow();
        let mem = net.hosts[2].mem(raw_ep);
        mem.write(0, &[0xee; 64]).expect("garbage");
        mem.write(1024, &forged).expect("forged");
    }
    let invoke = |id: u64, off: u64, len: u32| Wqe {
        wr_id: id,
        opcode: deposit_transport::connection::WrOpcode::Invoke {
            ip: 0,
            mask: 0,
            returns: false,
        },
        flags: deposit_transport::connection::WR_SIGNALED,
        remote: Default::default(),
        len,
        source: deposit_transport::connection::Source::Endpoint {
            id: raw_ep,
            offset: off,
        },
        result: None,
    };
    assert!(conn.post(&invoke(1, 0, 64)).is_ok());
    assert!(conn.post(&invoke(2, 1024, 68)).is_ok());
    let before = j.engines[1].stats();
    assert!(j.run(100_000_000, |j| j.engines[1].stats().slots
        >= before.slots + 2));
    let s = j.engines[1].stats();
    assert_eq!(s.bad_header, before.bad_header + 1, "{s:?}");
    // The forged slot is the raw connection's (its first good one, seq 0): it waits
    // as a message from that peer, not from host 0.
    let mut b = [0u8; 4];
    let from0 = j.peer(1, 0);
    recv(&mut j, 1, Selector::tag(1).from(from0), true, &mut b, 2);
    j.run(10_000_000, |_| false);
    assert!(
        j.completion(1, TagOp::Recv, 2).is_none(),
        "taken as host 0's"
    );
    let (_, waiting) = j.engines[1].queued();
    assert_eq!(waiting, 1, "the forged message waits, as the raw peer's");
    let forger = j.engines[1].peer(PeerAddr::new([10, 0, 0, 3], 999));
    let info = j.engines[1]
        .peek(&Selector::tag(1).from(forger), true)
        .expect("its");
    assert_eq!(info.src, forger);
    // Past its credit: refused slot by slot.
    for k in 0..40 {
        let _ = conn.post(&invoke(10 + k, 1024, 68));
    }
    j.run(100_000_000, |_| false);
    assert!(
        j.engines[1].stats().bad_sequence > 0,
        "{:?}",
        j.engines[1].stats()
    );
    drop(cq);
    // Host 0's messages still arrive.
    send(&mut j, 0, 1, Some(1), b"real", 3);
    assert_eq!(j.wait(1, TagOp::Recv, 2).len, 4);
    assert_eq!(&b, b"real");
}

/// Starts `op` from `h` on `to`'s region `key` at `addr` with `buf`.
#[allow(clippy::too_many_arguments)]
fn rma(
    j: &mut Job,
    h: usize,
    to: usize,
    op: RmaOp,
    key: RegionKey,
    addr: u64,
    buf: &mut [u8],
    ctx: u64,
) {
    let p = j.peer(h, to);
    // SAFETY: every test keeps its buffers until the completions it waits for came.
    unsafe { j.engines[h].rma(p, op, key, addr, buf.as_mut_ptr(), buf.len() as u64, ctx) }
        .expect("rma");
}

fn one_sided_round(link: LinkConfig, seed: u64) {
    let mut j = Job::new(2, link, seed, cfg());
    let mut region = vec![0u8; 3 << 20];
    let mut virt = vec![0u8; 4096];
    // SAFETY: the regions outlive the engines' use of them (the job ends first).
    let key = unsafe { j.engines[1].expose(region.as_mut_ptr(), 3 << 20, Rights::ALL, false) }
        .expect("expose");
    let vbase = virt.as_mut_ptr() as u64;
    // SAFETY: as above.
    let vkey =
        unsafe { j.engines[1].expose(virt.as_mut_ptr(), 4096, Rights::ALL, true) }.expect("expose");
    assert_ne!(key, vkey);
    // Writes of every size class, then reads of the same bytes back.
    let sizes = [0usize, 1, 8, 4097, 100_000, 1 << 20];
    let mut srcs: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n as u8)).collect();
    let mut at = 0u64;
    let mut offs = Vec::new();
    for (i, s) in srcs.iter_mut().enumerate() {
        offs.push(at + 3);
        rma(&mut j, 0, 1, RmaOp::Write, key, at + 3, s, 10 + i as u64);
        at += s.len() as u64 + 64;
    }
    for (i, &n) in sizes.iter().enumerate() {
        let c = j.wait(0, TagOp::Write, 10 + i as u64);
        assert_eq!(
            (c.status, c.len),
            (TagStatus::Success, n as u64),
            "write {i}"
        );
    }
    for (i, s) in srcs.iter().enumerate() {
        let o = offs[i] as usize;
        assert!(region[o..o + s.len()] == s[..], "write {i} landed");
    }
    let mut backs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    for (i, b) in backs.iter_mut().enumerate() {
        rma(&mut j, 0, 1, RmaOp::Read, key, offs[i], b, 20 + i as u64);
    }
    for (i, b) in backs.iter().enumerate() {
        let c = j.wait(0, TagOp::Read, 20 + i as u64);
        assert_eq!(c.status, TagStatus::Success, "read {i}");
        assert!(b[..] == srcs[i][..], "read {i} brought the bytes back");
    }
    // Atomics on the region addressed by virtual address.
    virt[64..72].copy_from_slice(&40u64.to_ne_bytes());
    let mut old = [0u8; 8];
    rma(
        &mut j,
        0,
        1,
        RmaOp::FetchAdd(2),
        vkey,
        vbase + 64,
        &mut old,
        30,
    );
    assert_eq!(j.wait(0, TagOp::Atomic, 30).status, TagStatus::Success);
    assert_eq!(u64::from_ne_bytes(old), 40);
    let swap = RmaOp::CmpSwap {
        compare: 42,
        swap: 7,
    };
    rma(&mut j, 0, 1, swap, vkey, vbase + 64, &mut old, 31);
    assert_eq!(j.wait(0, TagOp::Atomic, 31).status, TagStatus::Success);
    assert_eq!(u64::from_ne_bytes(old), 42);
    rma(&mut j, 0, 1, swap, vkey, vbase + 64, &mut old, 32);
    assert_eq!(j.wait(0, TagOp::Atomic, 32).status, TagStatus::Success);
    assert_eq!(
        u64::from_ne_bytes(old),
        7,
        "a failed compare returns the value"
    );
    assert_eq!(u64::from_ne_bytes(virt[64..72].try_into().expect("8")), 7);
}

#[test]
fn one_sided_writes_reads_and_atomics_reach_an_exposed_region() {
    one_sided_round(LinkConfig::default(), 21);
}

#[test]
fn one_sided_operations_survive_a_lossy_link() {
    one_sided_round(LinkConfig::lossy(0.02), 22);
}

#[test]
fn one_sided_operations_outside_a_region_or_its_rights_are_refused() {
    // A wrong key's connect is refused, but on a connection whose listener's identity
    // is not pinned the refusal cannot be told from a forged one: it fails at the CM
    // timeout (shortened here to 50 ms).
    let mut j = Job::with_cm_timeout(2, LinkConfig::default(), 23, cfg(), 50_000);
    let mut region = vec![0u8; 4096];
    let mut ro = vec![5u8; 4096];
    // SAFETY: the regions outlive the engines' use of them.
    let key = unsafe { j.engines[1].expose(region.as_mut_ptr(), 4096, Rights::ALL, false) }
        .expect("expose");
    // SAFETY: as above.
    let rkey = unsafe { j.engines[1].expose(ro.as_mut_ptr(), 4096, Rights::REMOTE_READ, false) }
        .expect("expose");
    let mut buf = vec![9u8; 64];
    // Past the end, a wrong key, a write to a read-only region, an atomic there.
    rma(&mut j, 0, 1, RmaOp::Write, key, 4090, &mut buf, 1);
    let wrong = RegionKey(key.0 ^ 1 << 40);
    rma(&mut j, 0, 1, RmaOp::Read, wrong, 0, &mut buf, 2);
    rma(&mut j, 0, 1, RmaOp::Write, rkey, 0, &mut buf, 3);
    let mut old = [0u8; 8];
    rma(&mut j, 0, 1, RmaOp::FetchAdd(1), rkey, 8, &mut old, 4);
    for (ctx, op) in [
        (1, TagOp::Write),
        (2, TagOp::Read),
        (3, TagOp::Write),
        (4, TagOp::Atomic),
    ] {
        let c = j.wait(0, op, ctx);
        assert_eq!(
            (c.status, c.len),
            (TagStatus::Refused, 0),
            "operation {ctx}"
        );
    }
    assert!(
        region.iter().all(|&b| b == 0),
        "nothing landed past the end"
    );
    assert!(
        ro.iter().all(|&b| b == 5),
        "nothing landed in the read-only region"
    );
    // What the rights allow still works on the same connections.
    rma(&mut j, 0, 1, RmaOp::Read, rkey, 100, &mut buf, 5);
    assert_eq!(j.wait(0, TagOp::Read, 5).status, TagStatus::Success);
    assert!(buf.iter().all(|&b| b == 5));
    // A misaligned atomic is refused at the call; an unknown peer too.
    let p = j.peer(0, 1);
    // SAFETY: refused before anything is kept.
    let e = unsafe { j.engines[0].rma(p, RmaOp::FetchAdd(1), key, 4, old.as_mut_ptr(), 8, 6) };
    assert!(e.is_err());
    // Unexposed: later operations are refused.
    assert!(j.engines[1].unexpose(key));
    assert!(!j.engines[1].unexpose(key));
}

#[test]
fn rendezvous_buffers_used_again_are_registered_once_and_land_at_their_offsets() {
    let mut j = Job::new(2, LinkConfig::default(), 3, cfg());
    let n = 100_000usize;
    let big = pattern(3 * n, 9);
    let mut into = vec![0u8; 3 * n];
    let p = j.peer(0, 1);
    // A window of sends of one buffer into one receive buffer (osu_bw's pattern), then
    // sends from inside the first buffer, received inside the receive buffer.
    let rounds: Vec<(usize, usize, usize)> = (0..8)
        .map(|_| (0, 0, 3 * n))
        .chain([(n, 2 * n, n), (2 * n + 7, 5, n - 7), (0, n, 2 * n)])
        .collect();
    for (k, &(from, to, len)) in rounds.iter().enumerate() {
        let k = k as u64;
        into.fill(0);
        // SAFETY: `into` stays until the receive completes (waited for below).
        unsafe {
            j.engines[1].recv(
                Selector::tag(k),
                true,
                into[to..].as_mut_ptr(),
                len as u64,
                100 + k,
            )
        }
        .expect("recv");
        // SAFETY: `big` stays until the send completes (waited for below).
        unsafe {
            j.engines[0].send(
                p,
                Some(k),
                None,
                big[from..].as_ptr(),
                len as u64,
                200 + k,
                false,
            )
        }
        .expect("send");
        let c = j.wait(1, TagOp::Recv, 100 + k);
        assert_eq!((c.status, c.len), (TagStatus::Success, len as u64));
        assert!(into[to..to + len] == big[from..from + len], "round {k}");
        assert!(
            into[..to].iter().chain(&into[to + len..]).all(|&b| b == 0),
            "round {k}"
        );
        assert_eq!(j.wait(0, TagOp::Send, 200 + k).status, TagStatus::Success);
    }
    for h in 0..2 {
        let s = j.engines[h].stats();
        assert_eq!(
            (s.registrations, s.registrations_reused),
            (1, rounds.len() as u64 - 1),
            "host {h}: {s:?}"
        );
        assert_eq!(j.engines[h].idle_registrations(), 1);
    }
    // Many buffers: the cache keeps a bounded number of them.
    let bufs: Vec<Vec<u8>> = (0..40).map(|i| pattern(n, i as u8)).collect();
    let mut outs: Vec<Vec<u8>> = (0..40).map(|_| vec![0u8; n]).collect();
    for (i, (b, o)) in bufs.iter().zip(outs.iter_mut()).enumerate() {
        let k = 1000 + i as u64;
        recv(&mut j, 1, Selector::tag(k), true, o, k);
        // SAFETY: as above.
        unsafe { j.engines[0].send(p, Some(k), None, b.as_ptr(), n as u64, k, false) }
            .expect("send");
    }
    for (i, (b, o)) in bufs.iter().zip(&outs).enumerate() {
        let k = 1000 + i as u64;
        assert_eq!(j.wait(1, TagOp::Recv, k).status, TagStatus::Success);
        assert_eq!(j.wait(0, TagOp::Send, k).status, TagStatus::Success);
        assert!(o == b, "buffer {i}");
    }
    for h in 0..2 {
        assert!(j.engines[h].idle_registrations() <= 16, "host {h}");
    }
}

#[test]
fn a_steady_ping_pong_never_waits_for_credit() {
    // Each slot carries the grant of its sender's ring to the receiver: a ping-pong
    // reads no credit after its first message (it read every 32 and waited for it,
    // one round in 32 took a read's round trip more).
    let mut j = Job::new(2, LinkConfig::default(), 5, cfg());
    let rounds = 200u64;
    let mut times = Vec::new();
    let mut buf = [0u8; 8];
    for k in 0..rounds {
        let t0 = j.net.borrow().now;
        recv(&mut j, 1, Selector::tag(k), true, &mut buf, 1000 + k);
        send(&mut j, 0, 1, Some(k), &k.to_le_bytes(), 2000 + k);
        j.wait(1, TagOp::Recv, 1000 + k);
        recv(&mut j, 0, Selector::tag(k), true, &mut buf, 3000 + k);
        send(&mut j, 1, 0, Some(k), &k.to_le_bytes(), 4000 + k);
        j.wait(0, TagOp::Recv, 3000 + k);
        assert_eq!(u64::from_le_bytes(buf), k);
        times.push(j.net.borrow().now - t0);
    }
    // The first rounds connect; after them every round takes the same time.
    let steady = &times[10..];
    let (lo, hi) = (steady.iter().min().unwrap(), steady.iter().max().unwrap());
    assert!(hi * 4 <= lo * 5, "round trips {lo}..{hi} ns: {times:?}");
    for h in 0..2 {
        let s = j.engines[h].stats();
        assert_eq!((s.credit_stalls, s.credit_waits), (0, 1), "host {h}: {s:?}");
        assert_eq!(s.credit_reads, 1, "host {h}: {s:?}");
    }
}

#[test]
fn a_one_way_stream_reads_credit_ahead_and_does_not_wait_for_it() {
    // Nothing comes back to carry the grant: the sender reads the credit word when
    // half its grant is used, while the rest goes. A sender paced so that its grant
    // (32 slots) covers the round trip (4 µs simulated) waits only for its first one.
    let mut j = Job::new(2, LinkConfig::default(), 6, cfg());
    let n = 1000u64;
    let mut bufs = vec![[0u8; 8]; n as usize];
    for (k, b) in bufs.iter_mut().enumerate() {
        recv(&mut j, 1, Selector::tag(k as u64), true, b, k as u64);
    }
    for k in 0..n {
        send(&mut j, 0, 1, Some(k), &k.to_le_bytes(), k);
        j.run(500, |_| false);
    }
    for k in 0..n {
        assert_eq!(j.wait(1, TagOp::Recv, k).status, TagStatus::Success);
    }
    for (k, b) in bufs.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(*b), k as u64);
    }
    let s = j.engines[0].stats();
    // A read every half grant (16–20 sends); none found the grant used up.
    assert!((n / 24..=n / 12).contains(&s.credit_reads), "{s:?}");
    assert_eq!((s.credit_waits, s.credit_stalls), (1, 0), "{s:?}");
    // Unpaced, the sender outruns the grant: it waits, once per grant used up, and
    // every message still arrives in order.
    let mut j = Job::new(2, LinkConfig::default(), 7, cfg());
    for (k, b) in bufs.iter_mut().enumerate() {
        *b = [0; 8];
        recv(&mut j, 1, Selector::tag(k as u64), true, b, k as u64);
    }
    for k in 0..n {
        send(&mut j, 0, 1, Some(k), &k.to_le_bytes(), k);
    }
    for k in 0..n {
        assert_eq!(j.wait(1, TagOp::Recv, k).status, TagStatus::Success);
    }
    for (k, b) in bufs.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(*b), k as u64);
    }
    let s = j.engines[0].stats();
    assert!(s.credit_waits <= n / 32 + 1, "{s:?}");
}

#[test]
fn a_sender_that_goes_in_the_middle_of_a_multi_slot_message_fails_the_receive_it_matched() {
    use deposit_transport::wire::FrameView;
    let mut j = Job::new(2, LinkConfig::default(), 11, cfg());
    // Connected first (a small message), then the link drops host 0's writes from
    // the first frame of the big message on.
    let mut small = [0u8; 8];
    recv(&mut j, 1, Selector::tag(1), true, &mut small, 1);
    send(&mut j, 0, 1, Some(1), b"hello!!!", 2);
    assert_eq!(j.wait(1, TagOp::Recv, 1).status, TagStatus::Success);
    let writes = Rc::new(RefCell::new(0u32));
    let seen = writes.clone();
    j.net
        .borrow_mut()
        .set_filter(Some(Box::new(move |src, _to, f| {
            if src != 0 {
                return false;
            }
            let mut v = FrameView::parse(f).ok();
            let mut carries = false;
            while let Some(sec) = v {
                if sec.header.dst_conn != 0 {
                    carries |= sec.messages().flatten().any(|m| m.payload.len() >= 512);
                }
                v = sec.next_section();
            }
            if !carries {
                return false;
            }
            *seen.borrow_mut() += 1;
            *seen.borrow() > 1
        })));
    let n = cfg().eager_max as usize; // 17 slots
    let msg = pattern(n, 3);
    let mut into = vec![0u8; n];
    recv(&mut j, 1, Selector::tag(2), true, &mut into, 3);
    send(&mut j, 0, 1, Some(2), &msg, 4);
    j.run(2_000_000, |_| *writes.borrow() > 3);
    assert!(
        j.completion(1, TagOp::Recv, 3).is_none(),
        "the message is not whole"
    );
    // Host 0 closes its connection (it goes): the receive fails, it does not wait.
    let conns: Vec<u32> = j.engines[0]
        .fabric()
        .dialed
        .borrow()
        .iter()
        .map(|c| c.number)
        .collect();
    {
        let mut net = j.net.borrow_mut();
        let now = net.now;
        let node = &mut net.hosts[0].node;
        node.set_now(now);
        for c in conns {
            let _ = node.close(c);
        }
    }
    let c = j.wait(1, TagOp::Recv, 3);
    assert_eq!((c.status, c.len), (TagStatus::Unreachable, 0));
}

/// Hosts on IPv6 (fd00::1..).
fn ipv6_job(n: usize, seed: u64) -> Job {
    let mut node = NodeConfig::default();
    node.local.ip = "fd00::1".parse().unwrap();
    Job::with_node(n, LinkConfig::default(), seed, cfg(), node)
}

#[test]
fn ipv6_engines_name_each_other_by_ipv6_address_and_move_every_kind_of_message() {
    let mut j = ipv6_job(2, 41);
    let a1: std::net::IpAddr = "fd00::2".parse().unwrap();
    assert_eq!(j.addr(1), PeerAddr::new(a1, SERVICE));
    assert_eq!(j.addr(1).to_string(), "[fd00::2]:18700");
    // Eager in one slot, in several, and rendezvous.
    for (k, n) in [5usize, 4000, 100_000].into_iter().enumerate() {
        let k = k as u64;
        let msg = pattern(n, k as u8);
        let mut b = vec![0u8; n];
        recv(&mut j, 1, Selector::tag(k), true, &mut b, k);
        send(&mut j, 0, 1, Some(k), &msg, k);
        let c = j.wait(1, TagOp::Recv, k);
        assert_eq!((c.status, c.len), (TagStatus::Success, n as u64));
        assert!(b == msg, "{n} bytes over IPv6");
        assert_eq!(j.wait(0, TagOp::Send, k).status, TagStatus::Success);
    }
    // The receiver knows its sender by the IPv6 hello: the same peer it sends to.
    let from0 = j.peer(1, 0);
    assert_eq!(
        j.engines[1].peer_addr(from0),
        Some(PeerAddr::new(
            "fd00::1".parse::<std::net::IpAddr>().unwrap(),
            SERVICE
        ))
    );
    assert_eq!(j.engines[1].peers(), 1, "one peer for host 0, both ways");
    // A one-sided write and read of an exposed region (its connection is dialed from
    // the peer's IPv6 address too).
    let mut region = vec![0u8; 8192];
    // SAFETY: the region outlives the engines' use of it (the job ends first).
    let key = unsafe { j.engines[1].expose(region.as_mut_ptr(), 8192, Rights::ALL, false) }
        .expect("expose");
    let mut w = pattern(5000, 9);
    rma(&mut j, 0, 1, RmaOp::Write, key, 100, &mut w, 50);
    assert_eq!(j.wait(0, TagOp::Write, 50).status, TagStatus::Success);
    assert!(region[100..5100] == w[..]);
    let mut r = vec![0u8; 5000];
    rma(&mut j, 0, 1, RmaOp::Read, key, 100, &mut r, 51);
    assert_eq!(j.wait(0, TagOp::Read, 51).status, TagStatus::Success);
    assert!(r == w);
    let s = j.engines[1].stats();
    assert_eq!(
        (s.bad_hello, s.bad_header, s.bad_source),
        (0, 0, 0),
        "{s:?}"
    );
}

#[test]
fn a_connect_whose_hello_is_garbage_is_refused_and_counted() {
    let mut j = Job::new(3, LinkConfig::default(), 12, cfg());
    // Raw connections from host 2 to host 1's listener with what they like as hello.
    let dial = |j: &mut Job, hello: &[u8]| {
        let mut net = j.net.borrow_mut();
        let now = net.now;
        let to = net.hosts[1].addr();
        let h = &mut net.hosts[2];
        let ep = h.endpoint(4096, Rights::NONE, 16);
        let opts = ConnectOptions {
            private_data: private_data(hello),
            ..ConnectOptions::default()
        };
        h.node.set_now(now);
        h.node
            .connect(to, SERVICE, ep, CqShared::new(64), &opts)
            .expect("connect")
    };
    let mut v6 = Vec::new();
    v6.extend_from_slice(&0x6464_7436u32.to_le_bytes());
    v6.extend_from_slice(&[0xfd; 16]);
    v6.extend_from_slice(&7u32.to_le_bytes());
    let mut v4 = 0x6464_7467u32.to_le_bytes().to_vec();
    v4.extend_from_slice(&[10, 0, 0, 3, 7, 0, 0, 0]);
    let _keep: Vec<_> = [&[0xee; 12][..], &[], &v6[..23], &v4[..11]]
        .into_iter()
        .map(|h| dial(&mut j, h))
        .collect();
    assert!(
        j.run(100_000_000, |j| j.engines[1].stats().bad_hello >= 4),
        "{:?}",
        j.engines[1].stats()
    );
    assert_eq!(j.engines[1].peers(), 0, "none of them is a peer");
    // A whole old IPv4 hello and a whole IPv6 one are peers.
    let _ok = (dial(&mut j, &v4), dial(&mut j, &v6));
    assert!(j.run(100_000_000, |j| j.engines[1].peers() == 2));
    assert_eq!(j.engines[1].stats().bad_hello, 4);
    let v6addr = PeerAddr::new([0xfdu8; 16], 7);
    assert_eq!(j.engines[1].peer(v6addr), PeerId(1), "known from its hello");
    assert_eq!(
        j.engines[1].peer(PeerAddr::new([10, 0, 0, 3], 7)),
        PeerId(0)
    );
}
