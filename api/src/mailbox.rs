//! Mailboxes: two-sided messaging with tag matching (MPI's point-to-point, libfabric's
//! `FI_TAGGED` and `FI_MSG`), built on the device's own operations.
//!
//! A [`Mailbox`] is a receive ring in an endpoint of its own plus a listener (a service
//! number of the device). Messages to it are sent with a tag (or untagged), matched
//! against the receives posted — by source (one peer or any) and tag with an ignore
//! mask, in posting order — or wait in the unexpected list until a receive or a probe
//! takes them. A message of up to [`Mailbox::eager_max`] bytes travels through the
//! ring, in one slot or several (one copy out of it at the receiver); a longer one is announced, and the
//! receiver reads it with a read token straight from the sender's buffer into the
//! posted one: no copy at the receiving host but the transport's own deposit. Peers are
//! named by [`PeerAddr`] (node address and service) and connected on first use; there
//! is no limit on their number but the ring's slots, shared among those that send.
//! The protocol, its credits and what it trusts: `docs/design.md` §12.
//!
//! ```
//! use std::time::Duration;
//! use deposit::{Device, DeviceConfig, MailboxConfig, Selector, TagStatus};
//! # fn main() -> Result<(), deposit::Error> {
//! let a = Device::open(DeviceConfig::new("ring:mbox:a", [10, 0, 0, 1]))?;
//! let b = Device::open(DeviceConfig::new("ring:mbox:b", [10, 0, 0, 2]))?;
//! let mut ma = a.mailbox(&MailboxConfig::new(7))?;
//! let mut mb = b.mailbox(&MailboxConfig::new(7))?;
//! let to_b = ma.peer(mb.addr());
//! ma.send(to_b, Some(42), b"hello", 1)?;
//! let mut buf = [0u8; 16];
//! // SAFETY: `buf` outlives the receive: we wait for its completion below.
//! unsafe { mb.recv(Selector::tag(42), true, buf.as_mut_ptr(), buf.len(), 2)? };
//! let c = loop {
//!     ma.progress(); // the sender's side moves too (both in one thread here)
//!     if let Some(c) = mb.wait(Duration::from_millis(10)) {
//!         break c;
//!     }
//! };
//! assert_eq!((c.context, c.status, c.len), (2, TagStatus::Success, 5));
//! assert_eq!(&buf[..5], b"hello");
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::connection::{Completion, ConnShared, ConnState, CqShared, Wqe};
use deposit_transport::events::{EventKind, EventRing};
use deposit_transport::mem::EndpointMemory;
use deposit_transport::tables::{EndpointId, RegWindow, Token};
use deposit_transport::tagged::engine::{ring_instruction, ring_registers};
use deposit_transport::tagged::{Accepted, Arrival, Config, Engine, Fabric};

pub use deposit_transport::tagged::{
    MsgInfo, PeerAddr, PeerId, RegionKey, RmaOp, Selector, TagCompletion, TagOp, TagStats,
    TagStatus,
};

use crate::device::Connecting;
use crate::{
    CompletionQueue, ConnOptions, Connection, Device, Endpoint, Error, Listener, Registers, Rights,
    WorkRequest,
};

/// How a mailbox is made ([`Device::mailbox`]).
#[derive(Clone, Debug)]
pub struct MailboxConfig {
    /// The service number its listener takes.
    pub service: u32,
    /// Bytes per ring slot, a power of two (0: the largest up to 8 KiB that one
    /// message of the device carries, secure or not).
    pub slot: u32,
    /// Ring slots, a power of two (default 1024): what all senders together may have
    /// outstanding.
    pub slots: u32,
    /// Most slots one sender holds at once (default 32).
    pub burst: u32,
    /// Messages up to this many bytes go eager through the ring (in as many slots as
    /// they need, at most 64), longer ones by rendezvous (0: whole slots carrying at
    /// least 16 KiB: 24 512 bytes with 8 KiB slots). A sender uses the smaller of its
    /// own and the receiver's.
    pub eager_max: u32,
    /// Staging slots for what this mailbox sends (default 256).
    pub stage: u32,
    /// Options of its connections (secure, keys; the rest is the mailbox's).
    pub conn: ConnOptions,
}

impl MailboxConfig {
    /// The defaults, listening on `service`.
    pub fn new(service: u32) -> MailboxConfig {
        MailboxConfig {
            service,
            slot: 0,
            slots: 1024,
            burst: 32,
            eager_max: 0,
            stage: 256,
            conn: ConnOptions::default(),
        }
    }
}

/// A mailbox: tagged and untagged sends and receives, probes, claims and cancels,
/// completions polled. Not shared between threads at once (`&mut self`), as a
/// libfabric endpoint of `FI_THREAD_DOMAIN`; move it where it is used.
pub struct Mailbox {
    engine: Engine<DevFabric>,
}

// SAFETY: the engine's raw pointers point into its own endpoint's memory (which it
// keeps) or into buffers whose callers promised them valid until the completion, from
// whichever thread polls; the connections, endpoints and queues it holds are `Send`.
unsafe impl Send for Mailbox {}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("addr", &self.addr())
            .field("peers", &self.engine.peers())
            .field("stats", &self.engine.stats())
            .finish()
    }
}

impl Device {
    /// Opens a mailbox on service `cfg.service` (its ring in an endpoint of its own).
    pub fn mailbox(&self, cfg: &MailboxConfig) -> Result<Mailbox, Error> {
        let slot = match cfg.slot {
            0 => {
                // What one message carries on a secure connection, less its seal.
                let room = self.segment_max().saturating_sub(64).min(8192);
                if room < 128 {
                    return Err(Error::InvalidArgument(format!(
                        "one message of this device carries {} bytes: too few for a mailbox",
                        self.segment_max()
                    )));
                }
                1 << (31 - room.leading_zeros())
            }
            s => s,
        };
        let mut c = Config::new(slot, cfg.slots, self.inner.max_connections as u32);
        c.burst = cfg.burst;
        c.stage = cfg.stage;
        if cfg.eager_max != 0 {
            c.eager_max = cfg.eager_max;
        }
        let fab = DevFabric {
            dev: self.clone(),
            shard: usize::from(self.next_shard()),
            cq: self.create_cq(1 << 16),
            listener: None,
            ring: None,
            events: None,
            regs: RegWindow::EMPTY,
            code: None,
            opts: cfg.conn.clone(),
            start: Instant::now(),
            nothing: None,
        };
        let local = PeerAddr::new(self.local_addr().ip, cfg.service);
        let engine = Engine::new(fab, c, local).map_err(tag_error)?;
        Ok(Mailbox { engine })
    }
}

fn tag_error(e: deposit_transport::tagged::TagError) -> Error {
    use deposit_transport::tagged::TagError as T;
    match e {
        T::Invalid(s) | T::Fabric(s) => Error::InvalidArgument(s),
    }
}

impl Mailbox {
    /// Its address: the node's and its service number (what peers name it by).
    pub fn addr(&self) -> PeerAddr {
        self.engine.local()
    }

    /// Messages up to this many bytes go through the ring; longer ones by rendezvous.
    pub fn eager_max(&self) -> u32 {
        self.engine.config().eager_max
    }

    /// The peer at `addr` (entered on first use; connected when first needed).
    pub fn peer(&mut self, addr: PeerAddr) -> PeerId {
        self.engine.peer(addr)
    }

    /// A peer's address.
    pub fn peer_addr(&self, p: PeerId) -> Option<PeerAddr> {
        self.engine.peer_addr(p)
    }

    /// Why a peer cannot be reached (its sends complete
    /// [`TagStatus::Unreachable`]), as the device said it.
    pub fn peer_error(&self, p: PeerId) -> Option<&str> {
        self.engine.peer_error(p)
    }

    /// Sends a copy of `data` to `dest`, tagged (`Some(tag)`) or not; `data` is free
    /// again when this returns. Its completion carries `context`.
    pub fn send(
        &mut self,
        dest: PeerId,
        tag: Option<u64>,
        data: &[u8],
        context: u64,
    ) -> Result<(), Error> {
        // SAFETY: injected: copied before this returns.
        unsafe { self.send_raw(dest, tag, None, data.as_ptr(), data.len(), context, true) }
    }

    /// Sends `len` bytes at `buf` to `dest` with the sender's immediate data `imm` if
    /// any; without `inject`, zero-copy: the buffer is the message until the send
    /// completes (read by the receiver's read for a rendezvous message).
    ///
    /// # Safety
    /// Without `inject`, the `len` bytes at `buf` stay valid and unchanged until the
    /// send's completion is polled.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_raw(
        &mut self,
        dest: PeerId,
        tag: Option<u64>,
        imm: Option<u64>,
        buf: *const u8,
        len: usize,
        context: u64,
        inject: bool,
    ) -> Result<(), Error> {
        // SAFETY: forwarded to the caller's contract.
        unsafe {
            self.engine
                .send(dest, tag, imm, buf, len as u64, context, inject)
        }
        .map_err(tag_error)
    }

    /// Posts a receive of at most `len` bytes into `buf` for what `sel` selects,
    /// tagged or untagged (untagged receives take untagged messages only); a message
    /// waiting is taken at once.
    ///
    /// # Safety
    /// The `len` bytes at `buf` stay valid, and the caller neither reads nor writes
    /// them, until the receive's completion is polled (or it is cancelled).
    pub unsafe fn recv(
        &mut self,
        sel: Selector,
        tagged: bool,
        buf: *mut u8,
        len: usize,
        context: u64,
    ) -> Result<(), Error> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.engine.recv(sel, tagged, buf, len as u64, context) }.map_err(tag_error)
    }

    /// The first waiting message `sel` selects, left waiting (`MPI_Iprobe`,
    /// `FI_PEEK`); progress is made first.
    pub fn peek(&mut self, sel: &Selector, tagged: bool) -> Option<MsgInfo> {
        self.engine.progress();
        self.engine.peek(sel, tagged)
    }

    /// The first waiting message `sel` selects, claimed for `context`: no receive or
    /// probe sees it until [`Mailbox::recv_claimed`] or [`Mailbox::discard`] with that
    /// context (`MPI_Improbe`, `FI_PEEK | FI_CLAIM`).
    pub fn claim(&mut self, sel: &Selector, tagged: bool, context: u64) -> Option<MsgInfo> {
        self.engine.progress();
        self.engine.claim(sel, tagged, context)
    }

    /// Receives the message claimed for `context` (`MPI_Mrecv`, `FI_CLAIM`).
    ///
    /// # Safety
    /// As [`Mailbox::recv`].
    pub unsafe fn recv_claimed(
        &mut self,
        context: u64,
        buf: *mut u8,
        len: usize,
    ) -> Result<(), Error> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.engine.recv_claimed(context, buf, len as u64) }.map_err(tag_error)
    }

    /// Drops the message claimed for `context` (`FI_DISCARD`): its sender's send
    /// completes as if it had been received.
    pub fn discard(&mut self, context: u64) -> Result<MsgInfo, Error> {
        self.engine.discard(context).map_err(tag_error)
    }

    /// Cancels the posted receive with `context`: it completes `Cancelled`. False when
    /// none is posted with it (it matched already, or never was).
    pub fn cancel(&mut self, context: u64) -> bool {
        self.engine.cancel(context)
    }

    /// Exposes `len` bytes at `ptr` to the peers the returned key is given to, with
    /// `rights` ([`Rights::REMOTE_READ`], `REMOTE_WRITE`, `REMOTE_ATOMIC`): they reach
    /// it with [`Mailbox::rma`]. `virt`: they address it by virtual address (its first
    /// byte is `ptr`, libfabric's `FI_MR_VIRT_ADDR`), else by offset. The key — a
    /// random service number of the device and a random secret — is the capability:
    /// send it to peers in a message. The region is the device's own registration,
    /// behind a listener of its own that admits only the key's holders; its bounds and
    /// rights are checked on every access by this device.
    ///
    /// # Safety
    /// The bytes stay valid until [`Mailbox::unexpose`] (or the mailbox's drop); peers
    /// may write them at any time meanwhile.
    pub unsafe fn expose(
        &mut self,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
        virt: bool,
    ) -> Result<RegionKey, Error> {
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.engine.expose(ptr, len as u64, rights, virt) }.map_err(tag_error)
    }

    /// Stops exposing the region of `key`: its listener and the connections peers made
    /// to it close (their later operations fail). False when no region has that key.
    pub fn unexpose(&mut self, key: RegionKey) -> bool {
        self.engine.unexpose(key)
    }

    /// Starts a one-sided operation on `dest`'s region `key` at `addr` (an offset, or
    /// a virtual address if it was exposed so): [`RmaOp::Write`] of the `len` bytes at
    /// `buf`, [`RmaOp::Read`] of `len` bytes into `buf`, or an atomic on the 8-byte
    /// word at `addr` (8-aligned) whose old value lands in the 8 bytes at `buf`
    /// (native byte order). The first operation on a (peer, key) connects to the
    /// region; later ones reuse it. No copy on either side: `buf` is registered for
    /// the time of the operation. It completes with `context` in this mailbox's
    /// completions ([`TagOp::Write`], [`TagOp::Read`], [`TagOp::Atomic`]):
    /// `Success`, or `Refused` (a wrong key, no such region, out of its bounds, or a
    /// right it lacks), or the transport's status.
    ///
    /// # Safety
    /// The bytes at `buf` stay valid, and the caller neither writes them (nor, for a
    /// read or an atomic, reads them) until the completion is polled.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rma(
        &mut self,
        dest: PeerId,
        op: RmaOp,
        key: RegionKey,
        addr: u64,
        buf: *mut u8,
        len: usize,
        context: u64,
    ) -> Result<(), Error> {
        // SAFETY: forwarded to the caller's contract.
        unsafe {
            self.engine
                .rma(dest, op, key, addr, buf, len as u64, context)
        }
        .map_err(tag_error)
    }

    /// One turn of progress: new connections, arrivals, the device's completions,
    /// queued sends.
    pub fn progress(&mut self) {
        self.engine.progress();
    }

    /// Takes up to `out.len()` completions (after a turn of progress).
    pub fn poll(&mut self, out: &mut [TagCompletion]) -> usize {
        self.engine.poll(out)
    }

    /// The oldest completion ready, without a turn of progress ([`Mailbox::progress`]
    /// first to look for new ones).
    pub fn take(&mut self) -> Option<TagCompletion> {
        self.engine.take()
    }

    /// Waits up to `timeout` for a completion, driving progress.
    pub fn wait(&mut self, timeout: Duration) -> Option<TagCompletion> {
        let deadline = Instant::now() + timeout;
        let mut out = [EMPTY];
        let mut spins = 0u32;
        loop {
            if self.engine.poll(&mut out) == 1 {
                return Some(out[0]);
            }
            if Instant::now() >= deadline {
                return None;
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
    }

    /// Drives progress until nothing of this mailbox's is in flight or owed to its
    /// peers (sends, one-sided operations and rendezvous reads complete, FINs and credit
    /// reads sent and acknowledged), or `timeout` passed: true when it got there.
    /// Completions stay queued for [`Mailbox::poll`]. Call it before dropping a
    /// mailbox whose peers may still be reading its rendezvous buffers or waiting for
    /// its FINs: a drop does not wait.
    pub fn flush(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.engine.progress();
            if self.engine.idle() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// What it received, refused and read.
    pub fn stats(&self) -> TagStats {
        self.engine.stats()
    }

    /// Receives posted and messages waiting (tagged and untagged together).
    pub fn queued(&self) -> (usize, usize) {
        self.engine.queued()
    }
}

/// A completion with nothing in it (to size arrays for [`Mailbox::poll`]).
pub const EMPTY: TagCompletion = TagCompletion {
    context: 0,
    op: TagOp::Recv,
    tagged: false,
    status: TagStatus::Success,
    len: 0,
    olen: 0,
    tag: 0,
    data: None,
    src: None,
};

/// The tagged engine's view of a device.
struct DevFabric {
    dev: Device,
    /// Every endpoint and connection of the mailbox is this shard's.
    shard: usize,
    cq: CompletionQueue,
    listener: Option<Listener>,
    ring: Option<Endpoint>,
    events: Option<Arc<EventRing>>,
    regs: RegWindow,
    code: Option<crate::InstrWindow>,
    opts: ConnOptions,
    start: Instant,
    /// The endpoint of no rights our connections to peers' regions come from.
    nothing: Option<Endpoint>,
}

/// A region the mailbox exposes: its registration, its listener and the connections
/// it accepted (dropped with it).
struct DevRegion {
    _ep: Endpoint,
    listener: Listener,
    conns: Vec<Connection>,
}

/// A mailbox's connection: under way, or made.
enum DevConn {
    Connecting(Option<Connecting>),
    Up(Connection),
    /// The connect failed (its shared state kept for what it says).
    Failed(Arc<ConnShared>),
}

impl DevConn {
    fn shared(&self) -> &ConnShared {
        match self {
            DevConn::Connecting(Some(c)) => &c.shared,
            DevConn::Connecting(None) => unreachable!("finish replaces it"),
            DevConn::Up(c) => c.shared(),
            DevConn::Failed(s) => s,
        }
    }
}

impl Fabric for DevFabric {
    type Conn = DevConn;
    type Mem = Endpoint;
    type Error = Error;

    fn open(&mut self, len: u64, slot: u32, slots: u32) -> Result<(Endpoint, *mut u8, u32), Error> {
        let len = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("a mailbox of {len} bytes")))?;
        let mem = Arc::new(EndpointMemory::alloc(len)?);
        let depth = (2 * slots as usize).max(self.dev.inner.event_queue_depth);
        let ep = self.dev.add_endpoint_with(
            self.shard as u8,
            mem,
            0,
            len,
            Rights::REMOTE_WRITE | Rights::REMOTE_READ,
            depth,
        )?;
        self.regs = ep.alloc_registers(3)?;
        for (i, v) in ring_registers(slot, slots).into_iter().enumerate() {
            self.dev.write_register(self.regs, i as u32, v)?;
        }
        let code = self.dev.alloc_instructions_for(&ep, 1)?;
        self.dev.program_stored(code, 0, ring_instruction())?;
        self.code = Some(code);
        self.events = Some(ep.0.events.clone());
        self.ring = Some(ep.clone());
        let base = ep.as_ptr();
        Ok((ep, base, 0))
    }

    fn listen(&mut self, service: u32, reply: &[u8]) -> Result<(), Error> {
        let ep = self.ring()?;
        let opts = ConnOptions {
            registers: Registers::Window(self.regs),
            instructions: self.code,
            isolated: true,
            private_data: reply.to_vec(),
            backlog: self.dev.inner.max_connections.max(64),
            ..self.opts.clone()
        };
        self.listener = Some(self.dev.listen_with(service, &ep, &self.cq, &opts)?);
        Ok(())
    }

    fn accept(&mut self) -> Option<Accepted<DevConn>> {
        let c = self.listener.as_ref()?.try_accept()?;
        Some(Accepted {
            number: c.local_number(),
            hello: c.private_data().to_vec(),
            conn: DevConn::Up(c),
        })
    }

    fn connect(&mut self, to: PeerAddr, hello: &[u8]) -> Result<DevConn, Error> {
        let ep = self.ring()?;
        self.dial(to, &ep, hello)
    }

    fn state(&self, c: &DevConn) -> ConnState {
        c.shared().state()
    }

    fn reply(&mut self, c: &mut DevConn) -> Vec<u8> {
        if let DevConn::Connecting(pending) = c {
            let pending = pending.take().expect("under way");
            let shared = pending.shared.clone();
            *c = match pending.finish(&self.dev) {
                Ok(conn) => DevConn::Up(conn),
                Err(_) => DevConn::Failed(shared),
            };
        }
        match c {
            DevConn::Up(conn) => conn.private_data().to_vec(),
            _ => Vec::new(),
        }
    }

    fn remote_number(&self, c: &DevConn) -> u32 {
        c.shared()
            .peer_conn
            .load(std::sync::atomic::Ordering::Relaxed) as u32
    }

    fn arrival(&mut self) -> Option<Arrival> {
        let q = self.events.as_ref()?;
        loop {
            let e = q.pop()?;
            if e.kind == EventKind::Interrupt {
                return Some(Arrival {
                    conn: e.conn,
                    ea: e.ea,
                    len: e.len,
                });
            }
        }
    }

    fn post(&mut self, c: &DevConn, wr: &Wqe) -> bool {
        match c {
            DevConn::Up(c) => c.post(&WorkRequest::from_wqe(*wr)).is_ok(),
            _ => false,
        }
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        let q: &CqShared = &self.cq.shared;
        while let Some(c) = q.pop() {
            out.push(c);
        }
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize) -> Result<Endpoint, Error> {
        // SAFETY: forwarded to the caller's contract.
        let mem = Arc::new(unsafe { EndpointMemory::register(ptr, len.max(1))? });
        // Event queues of one entry: nothing posts events to a buffer a token reads or
        // a read's answer lands in, and a registration per message must stay cheap
        // (the device's default depth allocated 2 x 1 024 entries each time).
        self.dev
            .add_endpoint_with(self.shard as u8, mem, 0, len.max(1), Rights::REMOTE_READ, 1)
    }

    fn mem_id(&self, m: &Endpoint) -> EndpointId {
        m.0.id
    }

    fn deregister(&mut self, m: Endpoint) {
        drop(m);
    }

    fn read_token(&mut self, m: &Endpoint, offset: u64, len: u64) -> Result<u64, Error> {
        Ok(self.dev.create_read_token(m, offset, len)?.0)
    }

    fn cancel_token(&mut self, token: u64) {
        let _ = self.dev.cancel_token(Token(token));
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn drive(&mut self) {
        self.dev.progress();
    }

    type Region = DevRegion;

    unsafe fn expose(
        &mut self,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
        service: u32,
        secret: &[u8],
        reply: &[u8],
    ) -> Result<DevRegion, Error> {
        // SAFETY: forwarded to the caller's contract.
        let mem = Arc::new(unsafe { EndpointMemory::register(ptr, len)? });
        // Nothing posts events to a region: an event queue of one entry.
        let ep = self
            .dev
            .add_endpoint_with(self.shard as u8, mem, 0, len, rights, 1)?;
        let opts = ConnOptions {
            private_data: reply.to_vec(),
            require_private_data: secret.to_vec(),
            backlog: self.dev.inner.max_connections.max(64),
            ..self.opts.clone()
        };
        let listener = self.dev.listen_with(service, &ep, &self.cq, &opts)?;
        Ok(DevRegion {
            _ep: ep,
            listener,
            conns: Vec::new(),
        })
    }

    fn serve(&mut self, r: &mut DevRegion) {
        while let Some(c) = r.listener.try_accept() {
            r.conns.push(c);
        }
        r.conns.retain(|c| {
            matches!(
                c.shared().state(),
                ConnState::Normal | ConnState::Connecting | ConnState::Exceptioned
            )
        });
    }

    fn connect_region(&mut self, to: PeerAddr, secret: &[u8]) -> Result<DevConn, Error> {
        let ep = match &self.nothing {
            Some(ep) => ep.clone(),
            None => {
                let mem = Arc::new(EndpointMemory::alloc(64)?);
                let ep =
                    self.dev
                        .add_endpoint_with(self.shard as u8, mem, 0, 64, Rights::NONE, 1)?;
                self.nothing = Some(ep.clone());
                ep
            }
        };
        self.dial(to, &ep, secret)
    }
}

impl DevFabric {
    /// Starts connecting to `to` from `ep` with `hello` as the private data. Isolated:
    /// the peer reaches nothing of ours over it (it is only ours to post on; the ring
    /// has its own listener's isolated connections for what peers send us).
    fn dial(&self, to: PeerAddr, ep: &Endpoint, hello: &[u8]) -> Result<DevConn, Error> {
        let opts = ConnOptions {
            private_data: hello.to_vec(),
            sq_depth: 4096,
            isolated: true,
            ..self.opts.clone()
        };
        let c = self
            .dev
            .connect_start(to.ip, to.service, ep, &self.cq, &opts)?;
        Ok(DevConn::Connecting(Some(c)))
    }

    /// The mailbox's endpoint (the listener keeps it; before that, none).
    fn ring(&self) -> Result<Endpoint, Error> {
        self.ring
            .clone()
            .ok_or_else(|| Error::InvalidArgument("the mailbox is not open".into()))
    }
}
