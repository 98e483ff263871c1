//! Devices: one port plus its workers — a DPDK port driven by the transport's worker,
//! or (feature `sim`) an in-process segment — behind one [`Driver`] per shard.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;
use deposit_transport::cm::{
    private_data, CmLimits, ConnectOptions, PeerTrust, Registers, Security,
};
use deposit_transport::connection::{ConnShared, ConnState, Priority};
use deposit_transport::doorbell::Doorbell;
use deposit_transport::events::EventRing as Queue;
use deposit_transport::host::Driver;
#[cfg(feature = "dpdk")]
use deposit_transport::host::Host;
use deposit_transport::identity::{Identity, IdentityKey, KnownPeers};
use deposit_transport::mem::EndpointMemory;
use deposit_transport::node::NodeConfig;
use deposit_transport::node::{Accepted, MAX_SHARDS};
#[cfg(feature = "dpdk")]
use deposit_transport::port::{self, EalInfo, Port, PortConfig, PortSpec};
use deposit_transport::submit::SubmitRing;
use deposit_transport::tables::{EndpointEntry, NodeAddr, RegProt, RegWindow, Rights};
use deposit_transport::wake::{WaitFd, WaitQueue};
use deposit_transport::wire::{self, cm::PRIVATE_DATA_MAX};
#[cfg(feature = "dpdk")]
use deposit_transport::worker::{ShardLinks, Worker};
use std::net::IpAddr;

use crate::endpoint::EpInner;
use crate::idle::{armed_nap, wait_for, Backoff};
use crate::queue::{CompletionQueue, Connection};
use crate::{DeviceStats, Endpoint, Error, MulticastGroup, RejectReason};

/// Who drives the worker loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// The application's calls drive it (single-core machines, deterministic tests):
    /// the device moves only while a thread is in one of its calls — posting,
    /// [`CompletionQueue::poll`], [`Device::progress`] or a blocking call. A blocking
    /// call ([`Device::connect`], [`Listener::accept`], [`CompletionQueue::wait_one`],
    /// [`crate::EventQueue::wait`]) whose own device has nothing to do also drives the
    /// process's other inline devices that no thread is in, so two nodes in one
    /// process can be driven from one thread. A loop of non-blocking polls drives its
    /// own device only: a peer in the same process then needs its own polling (or
    /// [`Progress::Dedicated`]).
    #[default]
    Inline,
    /// A thread of its own polls the port; it backs off to short sleeps when idle
    /// for a while so an idle device does not burn a core.
    Dedicated,
}

/// Options of [`Device::open`].
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Port spec (docs/design.md §8): `ring`, `ring:NAME:a|b`, `null`, `memif:PATH:server|client`, ...
    pub port: String,
    /// This node's IP address: IPv4, or IPv6 (its frames then go over IPv6, and its
    /// peers are IPv6 nodes).
    pub ip: IpAddr,
    /// Its MAC. Default: the port's own (af_packet, af_xdp, NICs); on ports without
    /// one (ring, null, memif, `sim`) the one derived from `ip`
    /// (`NodeAddr::from_ip`), which every deposit node there assumes of its peers.
    pub mac: Option<[u8; 6]>,
    /// The prefix length of `ip` (`--ip A/P`): peers inside it are on the link, the
    /// others are reached through `gateway` or `routes`. 0 (the default): every peer
    /// is on the link.
    pub prefix_len: u8,
    /// The router for peers off the link (`--gateway`).
    pub gateway: Option<IpAddr>,
    /// Routes tried before the gateway, most specific first.
    pub routes: Vec<crate::Route>,
    /// Resolve peers' MACs by ARP before connecting. Default (`None`): on ports with a
    /// MAC of their own, off on the others (peers there have derived MACs). Peers in
    /// `nodes` (static entries) are never resolved.
    pub resolve: Option<bool>,
    /// The 802.1Q VLAN of this node (1 to 4094, `--vlan`): its frames leave tagged
    /// (priority 5 for high-priority connections, else 0) and it takes only frames of
    /// that VLAN. `None` (the default): untagged.
    pub vlan: Option<u16>,
    pub progress: Progress,
    /// Inline progress: a thread of the device's own takes a turn whenever no call
    /// has taken one for this long, so that what the peers wait for — an
    /// acknowledgement owed, a retransmission, a keepalive answer, connection
    /// management — still goes out while the application computes or waits elsewhere
    /// (an MPI rank between calls, a libfabric consumer blocked on its own socket).
    /// Without it an acknowledgement owed when the application stops calling waits
    /// for its next call, and a peer's request fails with `RetryExceeded` after the
    /// give-up budget. Its turns never run beside the application's (a turn is taken
    /// only when no thread is in one). Default: none. Ignored with a dedicated worker.
    pub progress_guard: Option<Duration>,
    /// Shards (docs/design.md §6): workers, each with its own node — endpoints, their
    /// connections, registers and instruction slots — and its own queue pair where the
    /// port has one per shard (ring), else sharing queue 0 by software dispatch (memif,
    /// af_packet, af_xdp, null). Endpoints are spread over them round-robin (or placed:
    /// [`Device::alloc_endpoint_on`]). Inline progress drives every shard from the
    /// application's calls. Default 1, at most 64.
    pub workers: usize,
    /// With a dedicated worker: pin its thread to this CPU of the process's affinity
    /// set (the `n`th one, like a DPDK lcore), so that a post waking it from a sleep
    /// is not queued behind a thread spinning on the CPU it last ran on (measured on
    /// this project's VM: 30-60 us to wake when pinned apart, about 4 ms — a scheduler
    /// tick — when the waker spins where the worker slept). Shard k goes to the
    /// `n + k`th. Default: not pinned.
    pub worker_cpu: Option<usize>,
    /// Largest frame; default: jumbo (9014) where the port allows.
    pub max_frame: Option<usize>,
    /// Extra node address table entries (configuration).
    pub nodes: Vec<NodeAddr>,
    /// Retransmission timeout: the ceiling of the adaptive one (measured round trips),
    /// and with `retry_count` the give-up budget: a connection fails after
    /// `retry_timeout x (1 + 2 + ... + 2^retry_count)` (factors capped at 64) without
    /// progress.
    pub retry_timeout: Duration,
    pub retry_count: u32,
    /// Floor of the adaptive retransmission timeout (default 100 us).
    pub min_retry_timeout: Duration,
    /// Connection management: how long a connect waits for its listener's answer
    /// (with retries) and a close for its peer's. Default 5 s.
    pub cm_timeout: Duration,
    /// Most connections of each shard (its connection table: connecting, up, or
    /// closing and not yet answered; with [`DeviceConfig::workers`] shards a device
    /// holds that many times as many). Beyond it a connect fails with
    /// [`CmError::TooManyConnections`](crate::CmError) and a listener refuses requests
    /// ([`RejectReason::Resources`](crate::RejectReason), counted `cm_resources`).
    /// Default 4096.
    pub max_connections: usize,
    /// Address registers in the node-wide file.
    pub registers: u32,
    /// Depth of each endpoint's event queue.
    pub event_queue_depth: usize,
    /// First receiver-not-ready back-off; doubles per retry (at most 64x).
    pub rnr_timeout: Duration,
    /// Receiver-not-ready retries before a connection goes to error (bounded).
    pub rnr_retry_count: u32,
    /// An idle connection whose peer was silent this long sends a liveness probe, again
    /// every period, and goes to error after `keepalive_count` unanswered ones (a
    /// half-open connection: the peer crashed or forgot it). Default 5 s x 5 (an
    /// inline-progress application must drive progress more often than that).
    pub keepalive: Duration,
    pub keepalive_count: u32,
    /// Most unacknowledged bytes of first transmissions per connection: a
    /// bandwidth-delay-product cap that bounds what one connection queues in the port
    /// ahead of others (default 1 MiB).
    pub max_inflight_bytes: u64,
    /// Congestion control per peer node (docs/design.md §5, "Congestion"): on by
    /// default, with a target queueing delay of 10 µs and the receive budget of a
    /// 100 Gb/s line. `enabled: false` leaves only `max_inflight_bytes` and the
    /// receivers' credits (what the transport did before, for comparison).
    pub congestion: crate::CcConfig,
    /// Fault injection on received frames (loss, duplication, reordering, corruption,
    /// delay), deterministic per seed: `"loss=0.01,reorder=0.01,seed=7".parse()`.
    pub faults: Option<deposit_transport::faults::FaultConfig>,
    /// This node's long-term identity key pair, which every connection's handshake
    /// proves to the peer (docs/design.md §10): from [`Identity::load_or_generate`]
    /// for a node whose key peers pin, as a server usually is. `None`: a fresh key pair
    /// for this device, forgotten when it closes (a client whose key nobody pins).
    pub identity: Option<Arc<Identity>>,
    /// Known peers (OpenSSH's `known_hosts`): a connect to a peer listed there pins the
    /// listener's key to the listed one ([`ConnOptions::peer_key`] wins over it), and a
    /// key taken on first use ([`ConnOptions::trust_on_first_use`]) is added to it.
    /// `None`: no file (keys taken on first use are still reported, not kept).
    pub known_peers: Option<std::path::PathBuf>,
    /// What one source may cost this node's listeners (docs/design.md §7, §10): rates
    /// of connect requests per source and of challenges, and caps per source address
    /// on connections (1024 by default) and on connections whose handshake it has not
    /// finished (64). A server that expects more connections from one host raises
    /// `per_source_connections`.
    pub cm_limits: CmLimits,
}

/// Workers of a device unless its configuration says: `DEPOSIT_WORKERS` when set to a
/// number (a run of an unchanged program over several shards), else 1.
fn default_workers() -> usize {
    std::env::var("DEPOSIT_WORKERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
}

impl DeviceConfig {
    /// The defaults for a device on `port` at `ip` (`[10, 0, 0, 1]`, an
    /// `Ipv4Addr`, an `Ipv6Addr` or an `IpAddr`).
    pub fn new(port: &str, ip: impl Into<IpAddr>) -> DeviceConfig {
        DeviceConfig {
            port: port.to_string(),
            ip: ip.into(),
            mac: None,
            prefix_len: 0,
            gateway: None,
            routes: Vec::new(),
            resolve: None,
            vlan: None,
            progress: Progress::Inline,
            progress_guard: None,
            workers: default_workers(),
            worker_cpu: None,
            max_frame: None,
            nodes: Vec::new(),
            retry_timeout: Duration::from_millis(20),
            retry_count: 7,
            min_retry_timeout: Duration::from_micros(100),
            cm_timeout: Duration::from_secs(5),
            max_connections: 4096,
            registers: 65536,
            event_queue_depth: 1024,
            rnr_timeout: Duration::from_micros(200),
            rnr_retry_count: 64,
            keepalive: Duration::from_secs(5),
            keepalive_count: 5,
            max_inflight_bytes: 1 << 20,
            congestion: crate::CcConfig::default(),
            faults: None,
            identity: None,
            known_peers: None,
            cm_limits: CmLimits::default(),
        }
    }
    pub fn progress(mut self, p: Progress) -> Self {
        self.progress = p;
        self
    }
    pub fn progress_guard(mut self, after: Duration) -> Self {
        self.progress_guard = Some(after);
        self
    }
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = Some(bytes);
        self
    }
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Reads a node table file for [`DeviceConfig::nodes`]: one `IP [MAC] UDP-PORT`
    /// line per peer (`10.0.0.2 52:54:00:12:34:56 18515`), `#` comments and blank
    /// lines skipped. Without a MAC a line gives the one derived from the IP. These
    /// entries are static: ARP never changes them.
    pub fn load_nodes(path: &std::path::Path) -> Result<Vec<NodeAddr>, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("node table {}: {e}", path.display())))?;
        text.lines()
            .filter(|l| !l.split('#').next().unwrap_or("").trim().is_empty())
            .map(|l| {
                deposit_transport::tables::NodeTable::parse_line(l).map_err(|e| {
                    Error::InvalidArgument(format!("node table {}: {e}", path.display()))
                })
            })
            .collect()
    }
}

/// A control call for the worker (endpoints, registers, connections, statistics...):
/// run by whoever owns the worker, its reply sent back through a channel it captured.
type Command = Box<dyn FnOnce(&mut dyn Driver) + Send>;

/// What the dedicated worker thread shares with the application handles. Kept apart
/// from [`DeviceInner`] so that dropping the last application handle stops and joins
/// the thread before the port is torn down.
///
/// With a dedicated worker, its thread owns the [`Worker`]: posts reach it through
/// the submission ring, control calls as [`Command`]s on a lock-free queue
/// ([`Core::call`]), completions and events come back through their own queues. No
/// lock is shared between an application thread and the worker thread.
struct Core {
    /// Where posts go; the dedicated worker sleeps on it when idle.
    ring: Arc<SubmitRing>,
    /// The worker while no thread owns it: inline mode, where the application's calls
    /// drive it (a lock among application threads only), or a dedicated worker's after
    /// its thread stopped. A worker thread never touches it while it runs. A spin
    /// mutex: the inline poll takes it on every call, and its release is a plain store
    /// where std's is a second locked instruction (measured: 20 -> 14 ns per idle
    /// poll).
    here: spin::Mutex<Option<Box<dyn Driver>>>,
    /// Control calls for the worker thread.
    commands: SegQueue<Command>,
    /// Whether a worker thread owns the worker (control calls go to it as commands).
    threaded: AtomicBool,
    /// The worker thread panicked (a bug): the worker is gone, and control calls
    /// panic with a message saying so instead of waiting for it forever.
    failed: AtomicBool,
    stop: AtomicBool,
    progress: Progress,
    /// Inline turns taken by the application's calls (the progress guard's clock;
    /// written only by the thread holding `here`).
    turns: AtomicU64,
    /// The last thread that took a turn (registered with DPDK; `pthread_self`).
    thread: AtomicU64,
    /// The doorbells of the shard's receive queues (ring ports): the inline wait-fd
    /// helper marks them around its sleeps ([`Core::drive_while_armed`]).
    bells: Vec<Arc<Doorbell>>,
}

pub(crate) struct DeviceInner {
    /// One per shard, in shard order.
    shards: Vec<Arc<Core>>,
    pub(crate) event_queue_depth: usize,
    /// [`DeviceConfig::max_connections`].
    pub(crate) max_connections: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
    local: NodeAddr,
    max_frame: usize,
    segment_max: u32,
    /// The port as opened: its spec as text (a DPDK port's normalised).
    port: String,
    #[cfg(feature = "dpdk")]
    port_spec: Option<PortSpec>,
    /// Registers and instruction slots per shard: a window's shard is its base over
    /// these (each shard's file is a range of its own).
    registers: u32,
    instructions: u32,
    /// The shard the next endpoint goes to (round-robin).
    next_shard: AtomicUsize,
    /// This node's identity key (its public half).
    identity: IdentityKey,
    /// The connection manager's timeout (what a connect waits for at most).
    cm_timeout: Duration,
    /// Next hops and resolution, as the nodes have them (for errors that name them).
    neigh: deposit_transport::neigh::NeighConfig,
    /// Listener keys by peer address: read at connect, added to on first use (the
    /// application's threads only; no worker takes it).
    known_peers: Mutex<KnownPeers>,
    /// The device's wait fd ([`Device::wait_fd`]): every completion queue, event queue
    /// and listener of the device signals it when armed.
    pub(crate) wait_fd: Arc<WaitFd>,
    /// Inline devices: whether the wait-fd helper threads run (started by the first
    /// [`Device::arm_wait_fd`]).
    wait_helpers: Mutex<bool>,
}

impl DeviceInner {
    /// Runs control call `f` on shard 0's worker and returns its result
    /// ([`Core::call`]).
    pub(crate) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Driver) -> R + Send + 'static,
    ) -> R {
        self.shards[0].call(f)
    }
    /// Runs control call `f` on the worker of shard `shard`.
    pub(crate) fn call_on<R: Send + 'static>(
        &self,
        shard: u8,
        f: impl FnOnce(&mut dyn Driver) -> R + Send + 'static,
    ) -> R {
        self.shards[usize::from(shard)].call(f)
    }
    /// Runs `f` on every shard's worker, in shard order; the results in that order.
    pub(crate) fn call_all<R: Send + 'static>(
        &self,
        f: impl Fn(&mut dyn Driver) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let f = Arc::new(f);
        self.shards
            .iter()
            .map(|c| {
                let f = f.clone();
                c.call(move |w| f(w))
            })
            .collect()
    }
    /// Every shard's counters, summed.
    pub(crate) fn stats(&self) -> DeviceStats {
        let mut all = self.call_all(|w| w.stats()).into_iter();
        let mut s = all.next().expect("a device has a shard");
        for o in all {
            s.merge(&o);
        }
        s
    }
    #[cfg(feature = "dpdk")]
    pub(crate) fn local(&self) -> NodeAddr {
        self.local
    }
    pub(crate) fn port(&self) -> &str {
        &self.port
    }
    /// Shards of the device.
    pub(crate) fn shards(&self) -> usize {
        self.shards.len()
    }
    /// The shard whose register file holds window `w` (shard 0 for a window of none).
    pub(crate) fn register_shard(&self, w: RegWindow) -> u8 {
        Self::shard_of(w.base, self.registers, self.shards.len())
    }
    /// Runs control call `f` on the shard whose register file holds window `w`.
    pub(crate) fn call_for_registers<R: Send + 'static>(
        &self,
        w: RegWindow,
        f: impl FnOnce(&mut dyn Driver) -> R + Send + 'static,
    ) -> R {
        self.call_on(self.register_shard(w), f)
    }
    /// Runs control call `f` on the shard whose instruction memory holds window `w`.
    pub(crate) fn call_for_instructions<R: Send + 'static>(
        &self,
        w: RegWindow,
        f: impl FnOnce(&mut dyn Driver) -> R + Send + 'static,
    ) -> R {
        let shard = Self::shard_of(w.base, self.instructions, self.shards.len());
        self.call_on(shard, f)
    }
    /// Allocates `n` registers from shard `shard`'s file.
    pub(crate) fn alloc_registers(&self, shard: u8, n: u32) -> Result<RegWindow, Error> {
        Ok(self.call_on(shard, move |w| w.alloc_registers(n))?)
    }
    fn shard_of(base: u32, per_shard: u32, shards: usize) -> u8 {
        (base.checked_div(per_shard).unwrap_or(0) as usize).min(shards - 1) as u8
    }
    /// Inline mode: one turn of every shard's worker loop; the frames it moved.
    #[inline]
    pub(crate) fn progress(&self) -> usize {
        match self.shards.as_slice() {
            [one] => one.progress(),
            all => all.iter().map(|c| c.progress()).sum(),
        }
    }
    /// [`DeviceInner::progress`] for a thread blocked in a call (connect, accept,
    /// a completion or event wait): when this device's turn moved nothing, the other
    /// inline devices of the process take a turn too, so that a program driving both
    /// ends of a connection from one thread — the two-node first program — does not
    /// wait forever for a peer nobody drives. A device another thread is in is passed
    /// over (its turn is a `try_lock`); busy-poll loops (`poll`, `progress`) drive
    /// their own device only.
    pub(crate) fn progress_waiting(&self) -> usize {
        let own = self.progress();
        if own != 0 || self.is_dedicated() || DEVICES.inline.load(Ordering::Relaxed) < 2 {
            return own;
        }
        DEVICES.serve_others(self)
    }
    pub(crate) fn is_dedicated(&self) -> bool {
        self.shards[0].progress == Progress::Dedicated
    }
    /// Inline progress around a post (on a connection, a list, a multicast group):
    /// `attempt` queues the requests and says whether they brought a connection's
    /// waiting requests to [`crate::INLINE_DOORBELL`] (a turn is taken, as a doorbell
    /// starts a NIC); a full submission ring is drained by a turn and the post tried
    /// once more. A dedicated worker needs neither.
    #[inline]
    pub(crate) fn post_with(&self, attempt: impl Fn() -> Result<bool, Error>) -> Result<(), Error> {
        match attempt() {
            Ok(true) => {
                self.doorbell();
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(Error::SubmitRingFull { .. }) if !self.is_dedicated() => {
                // The ring fills when the application posts without driving progress;
                // one turn takes it in.
                self.progress();
                attempt().map(|_| ())
            }
            Err(e) => Err(e),
        }
    }
    /// A post reached the doorbell: an inline device takes a turn.
    #[cold]
    #[inline(never)]
    fn doorbell(&self) {
        if !self.is_dedicated() {
            self.progress();
        }
    }
    /// Keeps a thread just spawned, to stop and join with the device; an error when it
    /// could not be spawned (the threads started so far stop with the device, dropped
    /// by the caller's return).
    fn keep_thread(&self, h: std::io::Result<JoinHandle<()>>, what: &str) -> Result<(), Error> {
        let h = h.map_err(|e| Error::InvalidArgument(format!("cannot spawn {what}: {e}")))?;
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(h);
        Ok(())
    }
    /// Inline devices: starts the wait-fd helper threads, one per shard, unless they
    /// run already ([`Core::drive_while_armed`]).
    fn start_wait_helpers(&self) -> Result<(), Error> {
        let mut started = self.wait_helpers.lock().unwrap_or_else(|e| e.into_inner());
        if *started || self.is_dedicated() {
            return Ok(());
        }
        let n = self.shards.len();
        for (k, core) in self.shards.iter().enumerate() {
            let (core, fd) = (core.clone(), self.wait_fd.clone());
            let name = if n == 1 {
                "deposit-waitfd".to_string()
            } else {
                format!("deposit-waitfd{k}")
            };
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || core.drive_while_armed(&fd));
            self.keep_thread(h, "the wait-fd helper thread")?;
        }
        *started = true;
        Ok(())
    }
    /// Stops the worker threads and joins them (they leave their workers behind).
    fn stop_threads(&self) {
        for c in &self.shards {
            // Sequentially consistent: a wait-fd helper about to block reads it after
            // registering as a waiter (`WaitFd::wait_armed`).
            c.stop.store(true, Ordering::SeqCst);
            c.ring.nudge();
        }
        self.wait_fd.wake_waiters();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for h in threads {
            let _ = h.join();
        }
    }
}

impl Core {
    /// Runs control call `f` on the worker and returns its result. With a worker
    /// thread, `f` travels to it as a command (it runs between two turns, or wakes
    /// the worker from its sleep) and the caller blocks for the typed reply; else the
    /// caller runs it on the worker here.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Driver) -> R + Send + 'static,
    ) -> R {
        if self.threaded.load(Ordering::Acquire) {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.commands.push(Box::new(move |w: &mut dyn Driver| {
                let _ = tx.send(f(w));
            }));
            self.ring.nudge();
            loop {
                match rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(r) => return r,
                    Err(_) if self.failed.load(Ordering::Acquire) => panic!(
                        "deposit: a worker thread of this device panicked; the device can \
                         no longer serve control calls"
                    ),
                    // The thread stopped and left the worker here: commands still
                    // queued (this one among them) run here.
                    Err(_) if !self.threaded.load(Ordering::Acquire) => self.run_queued(),
                    Err(_) => {}
                }
            }
        }
        let mut g = self.here.lock();
        f(&mut **g
            .as_mut()
            .expect("the worker is here when no thread owns it"))
    }

    /// Runs the queued commands on the worker kept here (after its thread stopped).
    fn run_queued(&self) {
        let mut g = self.here.lock();
        if let Some(w) = g.as_mut() {
            while let Some(c) = self.commands.pop() {
                c(&mut **w);
            }
        }
    }

    /// Inline mode: one turn of the worker loop, unless another thread is in it.
    #[inline]
    pub(crate) fn progress(&self) -> usize {
        if self.progress == Progress::Dedicated {
            std::hint::spin_loop();
            return 0;
        }
        self.turn(|w| w.poll())
    }

    /// One turn of the worker, `poll` or `poll_ticked`, unless another thread holds it.
    #[inline]
    fn turn(&self, poll: impl FnOnce(&mut dyn Driver) -> usize) -> usize {
        register_thread_at(&self.thread);
        match self.here.try_lock() {
            Some(mut w) => {
                // Only the holder of `here` writes it: no locked increment.
                let t = self.turns.load(Ordering::Relaxed);
                self.turns.store(t.wrapping_add(1), Ordering::Relaxed);
                w.as_mut().map_or(0, |w| poll(&mut **w))
            }
            None => 0,
        }
    }

    /// Inline mode: turns until one moves nothing (at most 16), the first one with
    /// the clock read and the timers due run ([`Driver::poll_ticked`]: it follows a
    /// sleep); the frames moved.
    fn turns_until_quiet(&self) -> usize {
        let mut moved = 0;
        for k in 0..16 {
            let n = if k == 0 {
                self.progress_ticked()
            } else {
                self.progress()
            };
            moved += n;
            if n == 0 {
                break;
            }
        }
        moved
    }

    /// [`Core::progress`] with [`Driver::poll_ticked`].
    fn progress_ticked(&self) -> usize {
        self.turn(|w| w.poll_ticked())
    }

    /// An inline device's wait-fd helper, one per shard ([`Device::arm_wait_fd`]).
    /// While the device's wait fd is armed it drives the shard for the application
    /// sleeping on the fd: turns while they move frames (its turns are the
    /// application's: never beside another thread's, counted for the progress guard),
    /// then a sleep on the submission ring with the shard's doorbells marked, which a
    /// post, a frame on a ring port or the end of a nap ends ([`armed_nap`]: the longer
    /// the quiet, the longer the nap, up to `LONG_NAP`, or `DOORBELL_NAP` where frames
    /// ring a doorbell). Once the fd is signalled it finishes the batch of turns that
    /// signalled it — the acknowledgement owed for what it received goes out — and
    /// blocks until the next arm: between arms it takes no turn (the application's
    /// calls and the progress guard drive the device, as without it).
    fn drive_while_armed(&self, fd: &WaitFd) {
        register_thread();
        let stop = || self.stop.load(Ordering::SeqCst);
        let mark = |sleeping: bool| {
            for b in &self.bells {
                b.set_sleeping(sleeping);
            }
        };
        let mut quiet_since = Instant::now();
        while !stop() {
            // The doorbells are marked before the turns, so that a frame sent after the
            // last turn looked ends the sleep below (one turn per wake: on this
            // project's VM a turn after a timed wake costs as much as the wake). A
            // frame sent during the turns rings too, which ends the next sleep at once.
            mark(true);
            let moved = self.turns_until_quiet();
            if !fd.is_armed() {
                mark(false);
                fd.wait_armed(stop);
                quiet_since = Instant::now();
            } else if moved != 0 {
                quiet_since = Instant::now();
            } else {
                let nap = armed_nap(quiet_since.elapsed(), !self.bells.is_empty());
                self.ring.sleep_until(Instant::now() + nap);
            }
        }
        mark(false);
    }

    /// The dedicated worker thread: owns `w`, runs control calls between turns, and
    /// leaves the worker here when it stops.
    fn run_dedicated(self: Arc<Self>, mut w: Box<dyn Driver>) {
        /// Marks the core failed if the thread unwinds (its worker is lost).
        struct OnPanic<'a>(&'a Core);
        impl Drop for OnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.failed.store(true, Ordering::Release);
                }
            }
        }
        let _guard = OnPanic(&self);
        register_thread();
        let mut backoff = Backoff::new();
        while !self.stop.load(Ordering::Relaxed) {
            let mut work = 0;
            while let Some(c) = self.commands.pop() {
                c(&mut *w);
                work += 1;
            }
            let batch = if backoff.napping() { 1 } else { 64 };
            for _ in 0..batch {
                work += w.poll();
                if !self.commands.is_empty() {
                    break;
                }
            }
            // Adaptive polling (`idle`): spin through a short quiet, then sleep
            // until a post, a control call or — on a ring port — a frame (its doorbell)
            // wakes it, or for a nap at most: on other ports frames arriving meanwhile
            // wait for the nap's end (their PMDs here have no rx interrupts).
            if work != 0 {
                backoff.reset();
            } else if !backoff.spin_or_yield() {
                let nap = backoff.nap_length();
                w.sleep_until(Instant::now() + nap);
            }
        }
        *self.here.lock() = Some(w);
        self.threaded.store(false, Ordering::Release);
        self.run_queued();
    }
}

/// An open device: a DPDK port, its worker and its tables.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("port", &self.port())
            .field("local_addr", &self.local_addr())
            .field("workers", &self.workers())
            .finish()
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("service", &self.service)
            .field("endpoint", &self.ep.id())
            .field("waiting", &self.accepted.len())
            .finish()
    }
}

impl Device {
    /// Opens the port (initialising DPDK's EAL on first use for a DPDK port) and starts
    /// the worker.
    pub fn open(cfg: DeviceConfig) -> Result<Device, Error> {
        let n = cfg.workers;
        if n == 0 || n > MAX_SHARDS {
            return Err(Error::InvalidArgument(format!(
                "{n} workers (1 to {MAX_SHARDS})"
            )));
        }
        if let Some(v) = cfg.vlan.filter(|v| !(1..=4094).contains(v)) {
            return Err(Error::InvalidArgument(format!("VLAN {v} (1 to 4094)")));
        }
        if u64::from(cfg.registers) * n as u64 > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "{} registers per shard over {n} shards exceed the 32-bit index space",
                cfg.registers
            )));
        }
        let local = NodeAddr {
            mac: cfg.mac.unwrap_or(NodeAddr::at(cfg.ip, wire::UDP_PORT).mac),
            ip: cfg.ip,
            udp_port: wire::UDP_PORT,
        };
        let ncfg = NodeConfig {
            local,
            retry_timeout_us: cfg.retry_timeout.as_micros() as u64,
            min_retry_timeout_us: cfg.min_retry_timeout.as_micros() as u64,
            retry_count: cfg.retry_count,
            cm_timeout_us: cfg.cm_timeout.as_micros() as u64,
            max_connections: cfg.max_connections,
            registers: cfg.registers,
            rnr_timeout_us: cfg.rnr_timeout.as_micros() as u64,
            rnr_retry_count: cfg.rnr_retry_count,
            max_inflight_bytes: cfg.max_inflight_bytes,
            cc: cfg.congestion,
            keepalive_us: cfg.keepalive.as_micros() as u64,
            keepalive_count: cfg.keepalive_count,
            shards: n as u8,
            cm_limits: cfg.cm_limits,
            identity: match &cfg.identity {
                Some(id) => id.clone(),
                None => Arc::new(
                    Identity::generate()
                        .map_err(|e| Error::InvalidArgument(format!("identity key: {e}")))?,
                ),
            },
            vlan: cfg.vlan,
            neigh: deposit_transport::neigh::NeighConfig {
                resolve: cfg.resolve.unwrap_or(false),
                prefix_len: cfg.prefix_len.min(32),
                gateway: cfg.gateway,
                routes: cfg.routes.clone(),
                ..Default::default()
            },
            ..NodeConfig::default()
        };
        let known_peers = match &cfg.known_peers {
            Some(path) => KnownPeers::load(path)
                .map_err(|e| Error::InvalidArgument(format!("known peers: {e}")))?,
            None => KnownPeers::empty(),
        };
        let identity = ncfg.identity.public();
        let instructions = ncfg.instructions;
        let Opened {
            mut workers,
            local,
            max_frame,
            port,
            #[cfg(feature = "dpdk")]
            port_spec,
        } = Opened::open(&cfg, &ncfg)?;
        for w in &mut workers {
            w.set_faults(cfg.faults);
            for a in &cfg.nodes {
                w.add_peer(*a);
            }
        }
        let segment_max = workers[0].segment_max();
        let dedicated = cfg.progress == Progress::Dedicated;
        let shards: Vec<Arc<Core>> = workers
            .iter()
            .map(|w| {
                Arc::new(Core {
                    ring: w.submit_ring().clone(),
                    here: spin::Mutex::new(None),
                    commands: SegQueue::new(),
                    threaded: AtomicBool::new(dedicated),
                    failed: AtomicBool::new(false),
                    stop: AtomicBool::new(false),
                    progress: cfg.progress,
                    turns: AtomicU64::new(0),
                    thread: AtomicU64::new(0),
                    bells: w.doorbells(),
                })
            })
            .collect();
        let wait_fd = WaitFd::new()
            .map_err(|e| Error::InvalidArgument(format!("cannot make the wait fd: {e}")))?;
        let inner = Arc::new(DeviceInner {
            shards: shards.clone(),
            event_queue_depth: cfg.event_queue_depth,
            max_connections: cfg.max_connections,
            threads: Mutex::new(Vec::new()),
            local,
            max_frame,
            segment_max,
            port,
            #[cfg(feature = "dpdk")]
            port_spec,
            registers: cfg.registers,
            instructions,
            next_shard: AtomicUsize::new(0),
            identity,
            known_peers: Mutex::new(known_peers),
            cm_timeout: cfg.cm_timeout,
            neigh: ncfg.neigh.clone(),
            wait_fd,
            wait_helpers: Mutex::new(false),
        });
        DEVICES.add(&inner);
        #[cfg(feature = "dpdk")]
        crate::telemetry::register_commands();
        if let Some(after) = cfg.progress_guard.filter(|_| !dedicated) {
            let cores = shards.clone();
            let h = std::thread::Builder::new()
                .name("deposit-guard".to_string())
                .spawn(move || guard_progress(&cores, after));
            inner.keep_thread(h, "the progress guard thread")?;
        }
        for (k, (core, worker)) in shards.into_iter().zip(workers).enumerate() {
            if !dedicated {
                *core.here.lock() = Some(worker);
                continue;
            }
            let cpu = cfg.worker_cpu.map(|c| c + k);
            let name = if n == 1 {
                "deposit-worker".to_string()
            } else {
                format!("deposit-worker{k}")
            };
            let h = std::thread::Builder::new().name(name).spawn(move || {
                if let Some(c) = cpu {
                    if pin_current_thread_to_nth_cpu(c).is_none() {
                        eprintln!("deposit: cannot pin worker {k} to CPU #{c}; it runs unpinned");
                    }
                }
                core.run_dedicated(worker)
            });
            inner.keep_thread(h, "worker thread")?;
        }
        Ok(Device { inner })
    }

    /// Runs one turn of the worker loop (inline mode; a no-op with a dedicated worker).
    /// Returns the frames received plus sent.
    #[inline]
    pub fn progress(&self) -> usize {
        self.inner.progress()
    }

    /// The device's wait file descriptor: readable when, after
    /// [`Device::arm_wait_fd`], a completion, an event or a connection to accept is
    /// ready on any of the device's completion queues, event queues (an endpoint's
    /// events and exceptions) or listeners — the verbs completion channel's role, for
    /// the whole device, so that an application can put deposit in its own `epoll`
    /// (or `poll`, `select`, an async runtime's reactor) loop.
    ///
    /// It is a Linux `eventfd(2)` (non-blocking, close-on-exec), one per device, open
    /// as long as the device is (any handle to it: the device, an endpoint, a queue, a
    /// connection); wait on it for readability only. The contract:
    ///
    /// 1. **Drain, arm, sleep.** Poll the queues until they are empty, then call
    ///    [`Device::arm_wait_fd`]: it empties the fd, arms it and looks at every queue
    ///    of the device once more. If something is ready already it returns `true` and
    ///    the fd is readable at once — drain again instead of sleeping (an arm never
    ///    misses what came before it). Else it returns `false`: sleep on the fd.
    /// 2. **Signalled once per arm.** The first completion, event or accepted
    ///    connection queued after the arm makes the fd readable (one 8-byte write of
    ///    the eventfd) and disarms it; later ones do not touch it. It stays readable —
    ///    level-triggered `epoll` keeps reporting it — until the next arm, which
    ///    empties it (reading the counter yourself is allowed, never needed).
    /// 3. **After a wake**: drain the queues (a wake may find them empty: another
    ///    thread drained them, or a signal of an earlier arm landed late), then arm
    ///    again before sleeping again.
    ///
    /// **Progress while the application sleeps.** With a dedicated worker
    /// ([`Progress::Dedicated`]) the worker thread queues the completion and signals
    /// the fd. An inline device ([`Progress::Inline`]) moves only when some thread
    /// drives it, so its first arm starts a helper thread per shard
    /// (`deposit-waitfd`) that drives it while the fd is armed: turns while frames
    /// move, then sleeps that a post, a frame on a ring port (its doorbell) or the end
    /// of a nap ends — naps that grow with the quiet, from 50 us to 2 ms (10 ms on ring
    /// ports, where they only time the timers), so an idle wait costs about 1 % of a
    /// core or less and a frame on a port without doorbells (memif, af_packet, af_xdp)
    /// is noticed within a quarter of the quiet before it.
    /// Once the fd is signalled the helper finishes what its last turns started (the
    /// acknowledgement owed goes out) and sleeps until the next arm; between arms the
    /// device is driven by the application's calls and the progress guard
    /// ([`DeviceConfig::progress_guard`]), as before.
    ///
    /// Completions are pushed by the worker and signal the fd without a system call
    /// while it is not armed (one load of a line only the arm and the signal write):
    /// posting and polling cost what they cost without it. What the fd does not
    /// report: arrivals that queue nothing ([`Connection::arrivals`] of plain writes
    /// into an endpoint) — ask the sender for an interrupt (an event) to be woken by
    /// one.
    ///
    /// ```
    /// use std::os::fd::AsRawFd;
    /// use std::time::Duration;
    /// use deposit::{Device, DeviceConfig, Progress, Rights, WcStatus, WorkRequest};
    /// # fn main() -> Result<(), deposit::Error> {
    /// // The server has a worker thread of its own; the client is inline: while it
    /// // sleeps on its fd, its wait-fd helper drives it.
    /// let server = Device::open(
    ///     DeviceConfig::new("ring:waitfd:a", [10, 0, 0, 1]).progress(Progress::Dedicated),
    /// )?;
    /// let client = Device::open(DeviceConfig::new("ring:waitfd:b", [10, 0, 0, 2]))?;
    /// let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    /// let scq = server.create_cq(16);
    /// let listener = server.listen(1, &sep, &scq)?;
    /// let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    /// let ccq = client.create_cq(16);
    /// let conn = client.connect([10, 0, 0, 1], 1, &cep, &ccq)?;
    /// let _accepted = listener.accept(Duration::from_secs(5))?;
    ///
    /// conn.post(&WorkRequest::write(7, &cep, 0, 64, 0).signaled())?;
    /// let mut pfd = libc::pollfd {
    ///     fd: client.wait_fd().as_raw_fd(),
    ///     events: libc::POLLIN,
    ///     revents: 0,
    /// };
    /// let wc = loop {
    ///     // Drain, arm, sleep.
    ///     if let Some(wc) = ccq.poll_one() {
    ///         break wc;
    ///     }
    ///     if client.arm_wait_fd()? {
    ///         continue; // something came meanwhile: the fd is readable, drain again
    ///     }
    ///     // SAFETY: one live pollfd.
    ///     let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
    ///     assert_eq!(n, 1, "woken by the completion, not the 5 s timeout");
    /// };
    /// assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
    /// # Ok(()) }
    /// ```
    pub fn wait_fd(&self) -> BorrowedFd<'_> {
        self.inner.wait_fd.fd()
    }

    /// Arms the wait fd ([`Device::wait_fd`], whose documentation states the
    /// contract): empties it, arms it, then looks at every completion queue, event
    /// queue and listener of the device. Returns `true` when one holds something
    /// already — the fd is readable at once; drain instead of sleeping — and `false`
    /// when nothing is ready: sleep on the fd, which the next completion, event or
    /// connection to accept makes readable. libfabric's `fi_trywait` (`true`:
    /// `-FI_EAGAIN`), verbs' `ibv_req_notify_cq` with the check for completions that
    /// came before it built in.
    ///
    /// On an inline device the first call starts the wait-fd helper threads (an error
    /// if they cannot be spawned), and each arm that returns `false` wakes them to
    /// drive the device while the application sleeps. Costs an `eventfd` read and a
    /// look at each queue of the device: call it before sleeping, not on every poll.
    pub fn arm_wait_fd(&self) -> Result<bool, Error> {
        self.inner.start_wait_helpers()?;
        Ok(self.inner.wait_fd.arm())
    }

    /// Times the device signalled its wait fd (at most one per [`Device::arm_wait_fd`]).
    pub fn wait_fd_signals(&self) -> u64 {
        self.inner.wait_fd.signals()
    }

    /// This node's address.
    pub fn local_addr(&self) -> NodeAddr {
        self.inner.local
    }
    /// Largest frame on the port.
    pub fn max_frame(&self) -> usize {
        self.inner.max_frame
    }
    /// Largest payload of one message (larger writes are split into messages).
    pub fn segment_max(&self) -> u32 {
        self.inner.segment_max
    }
    /// The port it was opened with, as text: a DPDK port's spec as [`PortSpec`] prints
    /// it, or the `sim:NAME` of an in-process segment.
    pub fn port(&self) -> &str {
        self.inner.port()
    }

    /// The error of a connect to `peer` whose next hop nobody answered ARP for.
    pub(crate) fn unresolved(&self, peer: IpAddr) -> Error {
        let n = &self.inner.neigh;
        let hop = n.next_hop(self.inner.local.ip, peer).unwrap_or(peer);
        Error::Unresolved {
            peer,
            hop,
            port: self.inner.port().to_string(),
            tries: n.tries,
        }
    }
    /// The DPDK port spec it was opened with; `None` for a device on an in-process
    /// segment (`sim:NAME`, feature `sim`).
    #[cfg(feature = "dpdk")]
    pub fn port_spec(&self) -> Option<&PortSpec> {
        self.inner.port_spec.as_ref()
    }
    /// What the EAL got (hugepages or not).
    #[cfg(feature = "dpdk")]
    pub fn eal(&self) -> Option<EalInfo> {
        port::eal_info()
    }
    /// Whether the port's link is up (memif: peer connected).
    pub fn link_up(&self) -> bool {
        self.inner.call(|w| w.link_up())
    }

    /// Adds or updates a node address table entry (every shard's).
    pub fn add_node(&self, addr: NodeAddr) {
        self.inner.call_all(move |w| {
            w.add_peer(addr);
        });
    }

    /// Worker shards of the device ([`DeviceConfig::workers`]).
    pub fn workers(&self) -> usize {
        self.inner.shards()
    }

    /// The shard the next endpoint goes to (round-robin).
    pub(crate) fn next_shard(&self) -> u8 {
        let n = self.inner.shards();
        (self.inner.next_shard.fetch_add(1, Ordering::Relaxed) % n) as u8
    }

    fn check_shard(&self, shard: usize) -> Result<u8, Error> {
        if shard < self.inner.shards() {
            Ok(shard as u8)
        } else {
            Err(Error::InvalidArgument(format!(
                "shard {shard} of a device of {} workers",
                self.inner.shards()
            )))
        }
    }

    fn add_endpoint(
        &self,
        shard: u8,
        mem: Arc<EndpointMemory>,
        offset: usize,
        len: usize,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        self.add_endpoint_with(
            shard,
            mem,
            offset,
            len,
            rights,
            self.inner.event_queue_depth,
        )
    }

    /// [`Device::add_endpoint`] with event queues of `depth` entries.
    pub(crate) fn add_endpoint_with(
        &self,
        shard: u8,
        mem: Arc<EndpointMemory>,
        offset: usize,
        len: usize,
        rights: Rights,
        depth: usize,
    ) -> Result<Endpoint, Error> {
        let entry = EndpointEntry::new(mem.clone(), offset, len, rights)?;
        let events = Arc::new(Queue::new(depth));
        let exceptions = Arc::new(Queue::new(depth));
        events.signal_to(&self.inner.wait_fd);
        exceptions.signal_to(&self.inner.wait_fd);
        let (ev, ex) = (events.clone(), exceptions.clone());
        let id = self.inner.call_on(shard, move |w| {
            let id = w.add_endpoint(entry);
            w.set_endpoint_queues(id, ev, ex);
            id
        });
        Ok(Endpoint(Arc::new(EpInner {
            dev: self.inner.clone(),
            shard,
            id,
            mem,
            offset,
            len,
            rights,
            events,
            exceptions,
        })))
    }

    /// Allocates a zeroed endpoint of `len` bytes, from hugepages when reserved
    /// (ordinary pages otherwise, with a warning), on the next shard (round-robin).
    pub fn alloc_endpoint(&self, len: u64, rights: Rights) -> Result<Endpoint, Error> {
        let shard = self.next_shard();
        self.alloc_endpoint_on(usize::from(shard), len, rights)
    }

    /// [`Device::alloc_endpoint`] on shard `shard`: its connections, and the register
    /// and instruction windows they use, are that shard's worker's.
    pub fn alloc_endpoint_on(
        &self,
        shard: usize,
        len: u64,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        let shard = self.check_shard(shard)?;
        if len == 0 {
            return Err(Error::InvalidArgument("endpoint length 0".into()));
        }
        let len = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("endpoint length {len}")))?;
        let mem = Arc::new(EndpointMemory::alloc(len)?);
        self.add_endpoint(shard, mem, 0, len, rights)
    }

    /// Registers an application buffer, wherever it starts, as an endpoint (like
    /// `ibv_reg_mr`): deposits go straight into it. Atomics and other 8-byte words
    /// are stored whole where the host address is 8-byte aligned, byte by byte elsewhere.
    ///
    /// # Safety
    /// The buffer must stay valid, and not be freed, while the endpoint or any
    /// connection using it exists; remote peers may write it at any time.
    pub unsafe fn register_endpoint(
        &self,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        let shard = self.next_shard();
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.register_endpoint_on(usize::from(shard), ptr, len, rights) }
    }

    /// [`Device::register_endpoint`] on shard `shard` (its connections, tokens and the
    /// reads that land in it are that shard's worker's).
    ///
    /// # Safety
    /// As [`Device::register_endpoint`].
    pub unsafe fn register_endpoint_on(
        &self,
        shard: usize,
        ptr: *mut u8,
        len: usize,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        let shard = self.check_shard(shard)?;
        // SAFETY: forwarded to the caller's contract.
        let mem = Arc::new(unsafe { EndpointMemory::register(ptr, len)? });
        self.add_endpoint(shard, mem, 0, len, rights)
    }

    /// A nested endpoint: `len` bytes of `parent` from `offset` (page aligned), with its
    /// own rights (a peer connected to it sees only that range), on the parent's shard.
    pub fn sub_endpoint(
        &self,
        parent: &Endpoint,
        offset: u64,
        len: u64,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        self.sub_endpoint_on(usize::from(parent.0.shard), parent, offset, len, rights)
    }

    /// [`Device::sub_endpoint`] on shard `shard` (one memory served by several
    /// shards: each nested endpoint's connections on its own).
    pub fn sub_endpoint_on(
        &self,
        shard: usize,
        parent: &Endpoint,
        offset: u64,
        len: u64,
        rights: Rights,
    ) -> Result<Endpoint, Error> {
        let shard = self.check_shard(shard)?;
        if !Arc::ptr_eq(&parent.0.dev, &self.inner) {
            return Err(Error::ForeignEndpoint);
        }
        if offset.checked_add(len).is_none_or(|e| e > parent.len()) {
            return Err(Error::InvalidArgument(format!(
                "sub-range {offset}+{len} outside parent of {} bytes",
                parent.len()
            )));
        }
        self.add_endpoint(
            shard,
            parent.0.mem.clone(),
            parent.0.offset + offset as usize,
            len as usize,
            rights,
        )
    }

    /// A completion queue of `depth` entries.
    pub fn create_cq(&self, depth: usize) -> CompletionQueue {
        CompletionQueue::new(self.inner.clone(), depth)
    }

    fn check_ep(&self, ep: &Endpoint) -> Result<(), Error> {
        if Arc::ptr_eq(&ep.0.dev, &self.inner) {
            Ok(())
        } else {
            Err(Error::ForeignEndpoint)
        }
    }

    /// A virtual multicast group of connections of this device (see
    /// [`MulticastGroup`]): one post queues a work request on every member.
    pub fn multicast_group(&self, conns: &[&Connection]) -> Result<MulticastGroup, Error> {
        MulticastGroup::new(&self.inner, conns)
    }

    /// Connects to `service` at node `peer_ip` (`[10, 0, 0, 2]`, or any
    /// `Into<IpAddr>`: an IPv6 address for a device on IPv6); remote operations from
    /// the peer act on `ep`. Blocks (driving progress in inline mode) until accepted,
    /// refused or the CM timeout.
    pub fn connect(
        &self,
        peer_ip: impl Into<IpAddr>,
        service: u32,
        ep: &Endpoint,
        cq: &CompletionQueue,
    ) -> Result<Connection, Error> {
        self.connect_with(peer_ip, service, ep, cq, &ConnOptions::default())
    }

    /// [`Device::connect`] with options for what the peer may do here (register window,
    /// forced interrupts, trap reports).
    pub fn connect_with(
        &self,
        peer_ip: impl Into<IpAddr>,
        service: u32,
        ep: &Endpoint,
        cq: &CompletionQueue,
        opts: &ConnOptions,
    ) -> Result<Connection, Error> {
        let pending = self.connect_start(peer_ip.into(), service, ep, cq, opts)?;
        let mut backoff = Backoff::new();
        while pending.shared.state() == ConnState::Connecting {
            if self.inner.progress_waiting() == 0 {
                backoff.snooze();
            } else {
                backoff.reset();
            }
        }
        if pending.shared.state() == ConnState::Normal && !self.inner.is_dedicated() {
            self.await_heard(&pending.shared, ep.0.shard);
        }
        pending.finish(self)
    }

    /// Starts a connect and returns at once: [`Connecting::finish`] makes the
    /// connection once its state is no longer `Connecting` (the device's progress, or
    /// the caller's, moves it).
    pub(crate) fn connect_start(
        &self,
        peer_ip: IpAddr,
        service: u32,
        ep: &Endpoint,
        cq: &CompletionQueue,
        opts: &ConnOptions,
    ) -> Result<Connecting, Error> {
        self.check_ep(ep)?;
        let (ep_id, cq_shared, mut topts) = (ep.0.id, cq.shared.clone(), opts.transport()?);
        let peer_name = peer_ip.to_string();
        let listed = self
            .inner
            .known_peers
            .lock()
            .map_err(|_| Error::InvalidArgument("known peers: poisoned".into()))?
            .get(&peer_name);
        // A key given in the options wins ([`ConnOptions::transport`]); else a listed one.
        if let (None, Some(k)) = (opts.peer_key, listed) {
            topts.peer_key = PeerTrust::Pinned(k);
        }
        let trust = topts.peer_key;
        let shared = self.inner.call_on(ep.0.shard, move |w| {
            let peer = w
                .peer_at(peer_ip)
                .unwrap_or(NodeAddr::at(peer_ip, wire::UDP_PORT));
            w.connect(peer, service, ep_id, cq_shared, &topts)
        })?;
        Ok(Connecting {
            shared,
            trust,
            peer_ip,
            ep: ep.clone(),
            cq: cq.clone(),
        })
    }

    /// An inline device's connect that is up: drives the device until the listener has
    /// answered the connection's first frame (it shows the connection to its
    /// application only then; a lost one is sent again every CM retry period, since
    /// nothing drives this device once the call returns), for at most the CM timeout.
    fn await_heard(&self, shared: &Arc<ConnShared>, shard: u8) {
        const AGAIN: Duration = Duration::from_millis(50);
        let start = Instant::now();
        let mut next = start + AGAIN;
        let mut backoff = Backoff::new();
        while !shared.heard.load(Ordering::Relaxed) && start.elapsed() < self.inner.cm_timeout {
            if self.inner.progress_waiting() == 0 {
                backoff.snooze();
            } else {
                backoff.reset();
            }
            if Instant::now() >= next {
                let number = shared.number;
                self.inner.call_on(shard, move |w| w.reconfirm(number));
                next += AGAIN;
            }
        }
    }

    /// A connect that took the listener's key on first use: said aloud, and kept in
    /// the known-peers file when there is one.
    fn trusted_on_first_use(&self, peer: &str, shared: &ConnShared) {
        let Some(&(key, _)) = shared.peer_identity.get().map(|b| &**b) else {
            return;
        };
        let mut known = match self.inner.known_peers.lock() {
            Ok(k) => k,
            Err(_) => return,
        };
        if known.get(peer).is_some() {
            return;
        }
        let kept = match known.add(peer, key) {
            Ok(()) => match known.path() {
                Some(p) => format!("added to {}", p.display()),
                None => "not kept: no known-peers file".to_string(),
            },
            Err(e) => format!("not kept: {e}"),
        };
        eprintln!(
            "deposit: WARNING: trusting {peer}'s identity key {key} on first use ({kept}); \
             nothing proved it is {peer}'s. Compare it with the key the peer prints, or pin it."
        );
    }

    /// This node's identity key: what a peer pins ([`ConnOptions::peer_key`]) or lists
    /// in its known-peers or authorised-keys file.
    pub fn identity(&self) -> IdentityKey {
        self.inner.identity
    }

    /// Listens for connections to `service`; accepted connections act on `ep`.
    pub fn listen(
        &self,
        service: u32,
        ep: &Endpoint,
        cq: &CompletionQueue,
    ) -> Result<Listener, Error> {
        self.listen_with(service, ep, cq, &ConnOptions::default())
    }

    /// [`Device::listen`] with options applied to every accepted connection.
    pub fn listen_with(
        &self,
        service: u32,
        ep: &Endpoint,
        cq: &CompletionQueue,
        opts: &ConnOptions,
    ) -> Result<Listener, Error> {
        self.check_ep(ep)?;
        let (ep_id, cq_shared, topts) = (ep.0.id, cq.shared.clone(), opts.transport()?);
        let shard = ep.0.shard;
        let backlog = match opts.backlog {
            0 => DEFAULT_BACKLOG,
            n => n,
        };
        let q = self.inner.call_on(shard, move |w| {
            w.listen(service, ep_id, cq_shared, &topts, backlog)
        })?;
        q.signal_to(&self.inner.wait_fd);
        if self.inner.shards() > 1 {
            // Every shard learns where requests for the service go.
            self.inner
                .call_all(move |w| w.set_route(service, shard, true));
        }
        Ok(Listener {
            dev: self.clone(),
            service,
            shard,
            accepted: q,
            ep: ep.clone(),
            cq: cq.clone(),
        })
    }

    /// Allocates `n` address registers from shard 0's file (zeroed, no sender
    /// rights). Give them to connections ([`ConnOptions::registers`]) or endpoints
    /// ([`Endpoint::set_global_registers`]) of that shard — with several workers,
    /// [`Endpoint::alloc_registers`] gives a window of an endpoint's shard; windows may
    /// nest or overlap.
    pub fn alloc_registers(&self, n: u32) -> Result<RegWindow, Error> {
        self.inner.alloc_registers(0, n)
    }
    /// Returns registers to the file.
    pub fn free_registers(&self, w: RegWindow) -> Result<(), Error> {
        Ok(self
            .inner
            .call_for_registers(w, move |wk| wk.free_registers(w))?)
    }
    fn reg_abs(w: RegWindow, i: u32) -> Result<u32, Error> {
        if i < w.len {
            Ok(w.base + i)
        } else {
            Err(Error::InvalidArgument(format!(
                "register {i} outside a window of {}",
                w.len
            )))
        }
    }
    /// Reads register `i` of window `w`, atomically with respect to message processing.
    pub fn read_register(&self, w: RegWindow, i: u32) -> Result<u64, Error> {
        let abs = Self::reg_abs(w, i)?;
        self.inner
            .call_for_registers(w, move |w| w.register(abs))
            .ok_or_else(|| Error::InvalidArgument(format!("register {abs} not in the file")))
    }
    /// Writes register `i` of window `w`, atomically with respect to message processing.
    pub fn write_register(&self, w: RegWindow, i: u32, v: u64) -> Result<(), Error> {
        let abs = Self::reg_abs(w, i)?;
        Ok(self
            .inner
            .call_for_registers(w, move |w| w.set_register(abs, v))?)
    }
    /// Sets what senders may do with register `i` of window `w` (which use needs
    /// which bit, and an example: [`crate::protection`]).
    pub fn set_register_protection(&self, w: RegWindow, i: u32, p: RegProt) -> Result<(), Error> {
        let abs = Self::reg_abs(w, i)?;
        Ok(self
            .inner
            .call_for_registers(w, move |w| w.set_register_prot(abs, p))?)
    }

    /// Turns fault injection on received frames on or off at run time.
    pub fn set_faults(&self, cfg: Option<deposit_transport::faults::FaultConfig>) {
        self.inner.call_all(move |w| w.set_faults(cfg));
    }

    /// What the fault layer injected so far.
    pub fn fault_stats(&self) -> deposit_transport::faults::FaultStats {
        let mut total = deposit_transport::faults::FaultStats::default();
        for s in self.inner.call_all(|w| w.fault_stats()) {
            total += s;
        }
        total
    }

    /// Device counters: every shard's, summed.
    pub fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    /// Naps of the dedicated workers that a post, a control call or an arriving frame
    /// ended early ([`DeviceStats::worker_woken`]), read without a control call: unlike
    /// [`Device::stats`], reading it does not wake a sleeping worker.
    pub fn worker_woken(&self) -> u64 {
        self.inner.shards.iter().map(|c| c.ring.woken()).sum()
    }

    /// Connections the device holds (every shard's): connecting, live, or closing.
    /// A connect request makes one only once its requester has answered the
    /// listener's challenge (docs/design.md §7), so spoofed requests never count here.
    pub fn connections(&self) -> usize {
        self.inner.call_all(|w| w.connections()).into_iter().sum()
    }

    /// Each peer node's congestion state: window, bytes in flight, pace, round trips,
    /// marks (docs/design.md §5, "Congestion"), one entry per peer and shard (a
    /// shard's connections to a peer share one context).
    pub fn peers(&self) -> Vec<crate::PeerSummary> {
        self.shard_peers().into_iter().flatten().collect()
    }

    /// [`Device::peers`] by shard: entry `i` is shard `i`'s peers, in address order.
    pub fn shard_peers(&self) -> Vec<Vec<crate::PeerSummary>> {
        self.inner.call_all(|w| w.peer_summaries())
    }

    /// Each shard's counters (per-shard counters are summed by [`Device::stats`]).
    pub fn shard_stats(&self) -> Vec<DeviceStats> {
        self.inner.call_all(|w| w.stats())
    }

    /// Stops the worker without telling any peer, as a crashed node would (tests of
    /// peer failure). The device is unusable afterwards.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn shutdown_for_test(&self) {
        self.inner.stop_threads();
    }

    /// Transmits a raw frame exactly as given (hostile-input tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn send_raw_frame(&self, frame: &[u8]) {
        let frame = frame.to_vec();
        self.inner.call(move |w| w.send_raw(&frame));
    }
}

/// What [`Device::open`] opened: one driver per shard, in shard order.
struct Opened {
    workers: Vec<Box<dyn Driver>>,
    /// The node's address as the port made it (a port's own MAC).
    local: NodeAddr,
    max_frame: usize,
    port: String,
    #[cfg(feature = "dpdk")]
    port_spec: Option<PortSpec>,
}

impl Opened {
    /// Opens `cfg.port` for `cfg.workers` nodes configured as `ncfg`: an in-process
    /// segment for `sim:NAME` (feature `sim`), else a DPDK port.
    fn open(cfg: &DeviceConfig, ncfg: &NodeConfig) -> Result<Opened, Error> {
        #[cfg(feature = "sim")]
        if let Some(name) = cfg.port.strip_prefix("sim:") {
            use deposit_transport::sim::{SegmentDriver, MAX_FRAME};
            let max_frame = cfg.max_frame.unwrap_or(MAX_FRAME);
            let drivers = SegmentDriver::attach(name, ncfg, cfg.workers, max_frame)
                .map_err(|e| Error::InvalidArgument(format!("port {:?}: {e}", cfg.port)))?;
            return Ok(Opened {
                workers: drivers
                    .into_iter()
                    .map(|d| Box::new(d) as Box<dyn Driver>)
                    .collect(),
                local: ncfg.local,
                max_frame,
                port: cfg.port.clone(),
                #[cfg(feature = "dpdk")]
                port_spec: None,
            });
        }
        Self::open_dpdk(cfg, ncfg)
    }

    #[cfg(feature = "dpdk")]
    fn open_dpdk(cfg: &DeviceConfig, ncfg: &NodeConfig) -> Result<Opened, Error> {
        let spec: PortSpec = cfg.port.parse()?;
        let n = cfg.workers;
        let mut pcfg = PortConfig::new(spec.clone());
        if let Some(m) = cfg.max_frame {
            pcfg.max_frame = m;
        }
        pcfg.queues = n as u16;
        let port = Port::open(&pcfg)?;
        let max_frame = port.max_frame();
        let mut ncfg = ncfg.clone();
        if spec.has_own_mac() {
            // Known on the network by the port's MAC; peers' MACs by ARP.
            if cfg.mac.is_none() {
                ncfg.local.mac = port.mac();
            }
            ncfg.neigh.resolve = cfg.resolve.unwrap_or(true);
        }
        let ncfg = &ncfg;
        let mut workers: Vec<Worker> = port
            .split(n)
            .into_iter()
            .enumerate()
            .map(|(k, p)| {
                let cfg = NodeConfig {
                    shard: k as u8,
                    ..ncfg.clone()
                };
                Worker::new(p, cfg)
            })
            .collect();
        if n > 1 {
            let links = ShardLinks::new(workers.iter().map(|w| w.submit_ring().clone()).collect());
            for (k, w) in workers.iter_mut().enumerate() {
                w.join_shards(links.clone(), k);
            }
        }
        Ok(Opened {
            workers: workers
                .into_iter()
                .map(|w| Box::new(w) as Box<dyn Driver>)
                .collect(),
            local: ncfg.local,
            max_frame,
            port: spec.to_string(),
            port_spec: Some(spec),
        })
    }

    #[cfg(not(feature = "dpdk"))]
    fn open_dpdk(cfg: &DeviceConfig, _: &NodeConfig) -> Result<Opened, Error> {
        Err(Error::InvalidArgument(format!(
            "port {:?}: this build of deposit has no DPDK driver (feature `dpdk`): \
             only in-process segments, `sim:NAME`",
            cfg.port
        )))
    }
}

#[cfg(not(any(feature = "dpdk", feature = "sim")))]
compile_error!("deposit needs a driver: feature `dpdk` (the default) or `sim`");

// Threads that take turns register with DPDK's EAL (a DPDK port's calls need an
// lcore id); with no DPDK there is nothing to register or pin with.
#[cfg(feature = "dpdk")]
use deposit_transport::port::{pin_current_thread_to_nth_cpu, register_thread, register_thread_at};

#[cfg(not(feature = "dpdk"))]
fn register_thread() {}

#[cfg(not(feature = "dpdk"))]
#[inline]
fn register_thread_at(_: &AtomicU64) {}

/// Without DPDK a worker is not pinned (`DeviceConfig::worker_cpu` is then said to
/// be ignored, as when pinning fails).
#[cfg(not(feature = "dpdk"))]
fn pin_current_thread_to_nth_cpu(_: usize) -> Option<usize> {
    None
}

/// The progress guard of an inline device ([`DeviceConfig::progress_guard`]): every
/// `after`, each shard that no call has driven since the last look takes turns here
/// until one moves nothing (at most 16), unless a thread is in a turn. Stops with the
/// device (`DeviceInner::stop_threads`).
fn guard_progress(cores: &[Arc<Core>], after: Duration) {
    register_thread();
    let mut seen: Vec<u64> = cores
        .iter()
        .map(|c| c.turns.load(Ordering::Relaxed))
        .collect();
    while !cores[0].stop.load(Ordering::Relaxed) {
        std::thread::sleep(after);
        for (c, seen) in cores.iter().zip(&mut seen) {
            let now = c.turns.load(Ordering::Relaxed);
            if now != *seen {
                *seen = now; // the application drives it
                continue;
            }
            if let Some(mut g) = c.here.try_lock() {
                if let Some(w) = g.as_mut() {
                    for _ in 0..16 {
                        if w.poll() == 0 {
                            break;
                        }
                    }
                }
            }
        }
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if !self.is_dedicated() {
            DEVICES.inline.fetch_sub(1, Ordering::Relaxed);
        }
        self.stop_threads();
    }
}

/// The devices of this process, held weakly in opening order, each marked inline or
/// not: blocking calls on an inline device drive the other inline ones when it has
/// nothing to do ([`DeviceInner::progress_waiting`]), and telemetry lists them all
/// ([`live_devices`]).
struct Devices {
    list: Mutex<Vec<(std::sync::Weak<DeviceInner>, bool)>>,
    /// Inline devices open (the list may still hold dropped ones until pruned).
    inline: AtomicUsize,
}

static DEVICES: Devices = Devices {
    list: Mutex::new(Vec::new()),
    inline: AtomicUsize::new(0),
};

impl Devices {
    fn add(&self, d: &Arc<DeviceInner>) {
        let inline = !d.is_dedicated();
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|(w, _)| w.strong_count() > 0);
        l.push((Arc::downgrade(d), inline));
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One turn of every inline device but `me` that no other thread is in; the
    /// frames moved. Skipped when another waiting thread (or a telemetry listing) is
    /// already at the list. The turns run under the list's lock (no copy of the list
    /// per idle poll): only opening a device waits for it, and a device dropped here
    /// touches only `inline`.
    fn serve_others(&self, me: &DeviceInner) -> usize {
        let Ok(l) = self.list.try_lock() else {
            return 0;
        };
        l.iter()
            .filter(|(_, inline)| *inline)
            .filter_map(|(w, _)| w.upgrade())
            .filter(|d| !std::ptr::eq(Arc::as_ptr(d), me))
            .map(|d| d.progress())
            .sum()
    }
}

/// The process's devices still open, in opening order (DPDK telemetry's list).
#[cfg(feature = "dpdk")]
pub(crate) fn live_devices() -> Vec<Arc<DeviceInner>> {
    let l = DEVICES.list.lock().unwrap_or_else(|e| e.into_inner());
    l.iter().filter_map(|(w, _)| w.upgrade()).collect()
}

/// Options of this side of a connection ([`Device::connect_with`],
/// [`Device::listen_with`]; each side gives its own, and each applies where it says).
///
/// - What the peer may do here, as the receiving side: [`registers`],
///   [`allow_forced_interrupts`], [`report_traps`], [`receive_window`],
///   [`instructions`], [`isolated`].
/// - How this side sends: [`sq_depth`], [`priority`].
/// - Connection management and security: [`private_data`],
///   [`require_private_data`], [`backlog`] (listening), [`secure`], [`psk`],
///   [`peer_key`], [`trust_on_first_use`] (connecting), [`authorized_keys`]
///   (listening).
///
/// [`registers`]: ConnOptions::registers
/// [`allow_forced_interrupts`]: ConnOptions::allow_forced_interrupts
/// [`report_traps`]: ConnOptions::report_traps
/// [`receive_window`]: ConnOptions::receive_window
/// [`instructions`]: ConnOptions::instructions
/// [`isolated`]: ConnOptions::isolated
/// [`sq_depth`]: ConnOptions::sq_depth
/// [`priority`]: ConnOptions::priority
/// [`private_data`]: ConnOptions::private_data
/// [`require_private_data`]: ConnOptions::require_private_data
/// [`backlog`]: ConnOptions::backlog
/// [`secure`]: ConnOptions::secure
/// [`psk`]: ConnOptions::psk
/// [`peer_key`]: ConnOptions::peer_key
/// [`trust_on_first_use`]: ConnOptions::trust_on_first_use
/// [`authorized_keys`]: ConnOptions::authorized_keys
#[derive(Debug, Clone)]
pub struct ConnOptions {
    /// The register window the peer's messages name (what they may do with each
    /// register: [`crate::protection`]).
    pub registers: Registers,
    /// Whether the peer may force interrupts (conditional ALWAYS, software exceptions).
    pub allow_forced_interrupts: bool,
    /// Whether refused messages are also reported on the endpoint's event queue.
    pub report_traps: bool,
    /// Depth of this side's send queue: the most work requests posted on the
    /// connection and not yet taken into flight by the worker (posting one more fails
    /// with [`Error::SendQueueFull`]); the worker takes them as the connection's window
    /// of unacknowledged messages allows. Default 4096 (0 is taken as 1).
    pub sq_depth: usize,
    /// Send priority of this side's work requests: [`Priority::High`] messages
    /// overtake low-priority bulk transfers of the same device between frames.
    pub priority: Priority,
    /// The IP traffic class of this side's frames, as verbs' `traffic_class`
    /// (perftest's `--tclass`): DSCP in its top six bits (`26 << 2` for AF31, a common
    /// RoCE class). The two ECN bits are the transport's and ignored. Default 0.
    pub traffic_class: u8,
    /// Messages from the peer kept when they arrive ahead of a gap (selective repeat;
    /// at most 256; 0: refused, the peer resends from the gap).
    pub receive_window: u32,
    /// The instruction window the peer's instruction pointers name.
    pub instructions: Option<crate::InstrWindow>,
    /// Isolation mode: every message from the peer that is not an instruction pointer
    /// or a token's write or read ([`WorkRequest::write_with_token`],
    /// [`WorkRequest::read_with_token`]) is refused, so the peer names no register or
    /// address of ours: a token is a capability this side handed out, and names only
    /// the range it was made for.
    ///
    /// [`WorkRequest::write_with_token`]: crate::WorkRequest::write_with_token
    /// [`WorkRequest::read_with_token`]: crate::WorkRequest::read_with_token
    pub isolated: bool,
    /// Bytes for the peer, as rdma_cm's `private_data`: in the connect request
    /// ([`Device::connect_with`]) or in the reply to every request a listener accepts
    /// ([`Device::listen_with`]); the other side reads them with
    /// [`Connection::private_data`]. At most [`PRIVATE_DATA_MAX`] bytes.
    pub private_data: Vec<u8>,
    /// Listening: the bytes every connect request's private data must begin with (a
    /// secret handed to the peers that may connect, e.g. a memory key). A request
    /// without them is answered as if no listener were there and counted as
    /// [`DropReason::WrongKey`](crate::DropReason); no connection is made, so nothing
    /// of the listener's endpoint is ever reachable without them. Empty: any request.
    pub require_private_data: Vec<u8>,
    /// Listening: connections made but not yet taken by [`Listener::accept`] (like
    /// `listen(fd, backlog)`); a request beyond them goes unanswered, counted as
    /// [`DropReason::BacklogFull`](crate::DropReason), and its requester retries. Only
    /// a requester that answered the listener's challenge gets this far (docs/design.md
    /// §10), so a spoofed request never takes a place. 0: the default, 64.
    pub backlog: usize,
    /// Seal every frame of the connection (docs/design.md §10): an X25519 key agreement
    /// in the handshake, then each frame's cells encrypted and its headers
    /// authenticated with AES-256-GCM, replays refused, keys changed before AES-GCM's
    /// limits. Connecting: ask for it. Listening: refuse connections without it
    /// ([`RejectReason::Insecure`](crate::RejectReason)); a listener without it still
    /// takes a secure request. Costs a seal cell (48 bytes) per frame and the cipher's
    /// time on both sides.
    pub secure: bool,
    /// A pre-shared key mixed into the secure connection's keys (implies
    /// [`ConnOptions::secure`]): both sides must hold the same, or the connect fails
    /// with [`RejectReason::Confirmation`](crate::RejectReason); without it a relay in
    /// the middle at connect time could read the connection, with it nobody can.
    pub psk: Option<[u8; 32]>,
    /// Connecting: the listener's identity key, pinned (its [`Device::identity`], as
    /// printed by `ddperf` or stored by an operator). The handshake then proves the
    /// listener holds it: a node that answers with another key gets no connection
    /// (the connect fails with [`RejectReason::PeerKey`](crate::RejectReason) if no
    /// other answer came). Without it, a key listed for the peer in
    /// [`DeviceConfig::known_peers`] is pinned.
    pub peer_key: Option<IdentityKey>,
    /// Connecting with no pinned key: take the key the listener names and report it
    /// (on standard error, and in the known-peers file when there is one), as SSH does
    /// for a new host. Protects later connects, not this one: a bystander who answers
    /// first is trusted. A secure connection needs a pinned key or this; a plain one
    /// without either authenticates its connection management only towards whoever
    /// answered, and takes a REJECT as a hint (it fails at `cm_timeout`).
    pub trust_on_first_use: bool,
    /// Listening: the identity keys of the clients that may connect; a request from
    /// any other is refused ([`RejectReason::Unauthorized`](crate::RejectReason)) and
    /// counted. `None`: any client.
    pub authorized_keys: Option<Vec<IdentityKey>>,
}

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions {
            registers: Registers::None,
            allow_forced_interrupts: true,
            report_traps: false,
            sq_depth: 4096,
            priority: Priority::Low,
            traffic_class: 0,
            receive_window: deposit_transport::reliability::SACK_BITS,
            instructions: None,
            isolated: false,
            private_data: Vec::new(),
            require_private_data: Vec::new(),
            backlog: DEFAULT_BACKLOG,
            secure: false,
            psk: None,
            peer_key: None,
            trust_on_first_use: false,
            authorized_keys: None,
        }
    }
}

/// A listener's backlog when [`ConnOptions::backlog`] is 0.
pub const DEFAULT_BACKLOG: usize = 64;

impl ConnOptions {
    /// The transport's options, once checked.
    fn transport(&self) -> Result<ConnectOptions, Error> {
        for (what, b) in [
            ("private data", &self.private_data),
            ("required private data", &self.require_private_data),
        ] {
            if b.len() > PRIVATE_DATA_MAX {
                return Err(Error::InvalidArgument(format!(
                    "{} bytes of {what} (at most {PRIVATE_DATA_MAX})",
                    b.len()
                )));
            }
        }
        Ok(ConnectOptions {
            sq_depth: self.sq_depth,
            priority: self.priority,
            traffic_class: self.traffic_class,
            registers: self.registers,
            allow_forced_interrupts: self.allow_forced_interrupts,
            report_traps: self.report_traps,
            receive_window: self.receive_window,
            instructions: self.instructions.map_or(RegWindow::EMPTY, |w| w.0),
            isolated: self.isolated,
            private_data: private_data(&self.private_data),
            require_private_data: private_data(&self.require_private_data),
            secure: match self.psk {
                Some(k) => Security::Psk(k),
                None if self.secure => Security::On,
                None => Security::Off,
            },
            // A key listed in the known peers is pinned at connect, unless one is given
            // here ([`Device::connect_with`]).
            peer_key: match self.peer_key {
                Some(k) => PeerTrust::Pinned(k),
                None if self.trust_on_first_use => PeerTrust::FirstUse,
                None => PeerTrust::Unverified,
            },
            authorized_keys: self.authorized_keys.as_deref().map(Arc::from),
        })
    }
}

/// Accepts connections to one service.
pub struct Listener {
    dev: Device,
    service: u32,
    /// The shard of its endpoint, where its connections are made.
    shard: u8,
    accepted: Arc<WaitQueue<Accepted>>,
    ep: Endpoint,
    cq: CompletionQueue,
}

impl Listener {
    /// Waits up to `timeout` for the next connection: polling (driving progress,
    /// inline) while the wait is short, then — with a dedicated worker — asleep until
    /// the worker accepts one, or — inline — napping between polls (`idle`).
    ///
    /// The connection is live (the peer may already be writing) and stays so while
    /// the returned [`Connection`] is kept: dropping it closes the connection, so
    /// `let _ = listener.accept(t)?` closes what it accepted. Keep it:
    ///
    /// ```no_run
    /// # fn f(listener: &deposit::Listener) -> Result<(), deposit::Error> {
    /// let conn = listener.accept(std::time::Duration::from_secs(5))?;
    /// // ... the peer writes into the listener's endpoint while `conn` lives ...
    /// # drop(conn); Ok(()) }
    /// ```
    #[must_use = "dropping the accepted Connection closes it at once (the peer sees it closed)"]
    pub fn accept(&self, timeout: Duration) -> Result<Connection, Error> {
        let deadline = Instant::now() + timeout;
        let q = &self.accepted;
        let a = wait_for(&self.dev.inner, deadline, || q.pop(), |d| q.wait_pop(d))
            .ok_or(Error::Timeout(timeout, "a connection request"))?;
        Ok(Connection::new(
            self.dev.inner.clone(),
            a.shared,
            self.ep.clone(),
            self.cq.clone(),
            a.private,
        ))
    }
    /// The next accepted connection, if one waits (no progress driven, no wait).
    pub(crate) fn try_accept(&self) -> Option<Connection> {
        let a = self.accepted.pop()?;
        Some(Connection::new(
            self.dev.inner.clone(),
            a.shared,
            self.ep.clone(),
            self.cq.clone(),
            a.private,
        ))
    }

    /// The service number.
    pub fn service(&self) -> u32 {
        self.service
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let (service, shard) = (self.service, self.shard);
        self.dev.inner.call_on(shard, move |w| w.unlisten(service));
        if self.dev.inner.shards() > 1 {
            self.dev
                .inner
                .call_all(move |w| w.set_route(service, shard, false));
        }
    }
}

/// Tests that bring up the EAL: each runs in its own process under `cargo nextest`.
/// A connect under way ([`Device::connect_start`]).
pub(crate) struct Connecting {
    pub(crate) shared: Arc<ConnShared>,
    trust: PeerTrust,
    peer_ip: IpAddr,
    ep: Endpoint,
    cq: CompletionQueue,
}

impl Connecting {
    /// The connection, once the peer accepted (its reply's private data taken, a key
    /// trusted on first use recorded); the typed refusal once it failed.
    pub(crate) fn finish(self, dev: &Device) -> Result<Connection, Error> {
        let shared = self.shared;
        match shared.state() {
            ConnState::Normal => {
                if self.trust == PeerTrust::FirstUse {
                    dev.trusted_on_first_use(&self.peer_ip.to_string(), &shared);
                }
                let number = shared.number;
                let private = dev
                    .inner
                    .call_on(self.ep.0.shard, move |w| w.take_peer_private(number));
                Ok(Connection::new(
                    dev.inner.clone(),
                    shared,
                    self.ep,
                    self.cq,
                    private,
                ))
            }
            ConnState::Failed => {
                let reason = RejectReason::from_u8(shared.fail_reason.load(Ordering::Relaxed));
                let offered = shared.peer_identity.get().map(|b| b.0);
                Err(match (reason, self.trust, offered) {
                    (RejectReason::PeerKey, PeerTrust::Pinned(pinned), Some(offered)) => {
                        Error::PeerKeyMismatch {
                            peer: self.peer_ip,
                            pinned,
                            offered,
                        }
                    }
                    (RejectReason::Unresolved, ..) => dev.unresolved(self.peer_ip),
                    _ => Error::Rejected(reason),
                })
            }
            s => Err(Error::NotConnected(s)),
        }
    }
}

// The device's own machinery (shards, worker threads), whatever the port: on an
// in-process segment, so that they run in the sans-IO step too.
#[cfg(test)]
mod shard_tests {
    use super::*;
    use crate::{Rights, WorkRequest};
    use deposit_transport::connection::WcStatus;

    /// Shards run in parallel: while shard 1's worker is held in a control call (a
    /// stand-in for a long compound operation or a burst of its own), shard 0's worker
    /// goes on serving writes into its endpoint.
    #[test]
    fn a_busy_shard_does_not_hold_up_another() {
        let server = Device::open(
            DeviceConfig::new("sim:par", [10, 0, 0, 1])
                .progress(Progress::Dedicated)
                .workers(2),
        )
        .unwrap();
        let client = Device::open(DeviceConfig::new("sim:par", [10, 0, 0, 2])).unwrap();
        let sep = server
            .alloc_endpoint_on(0, 1 << 16, Rights::REMOTE_WRITE)
            .unwrap();
        let scq = server.create_cq(64);
        let l = server.listen(5, &sep, &scq).unwrap();
        let cep = client.alloc_endpoint(4096, Rights::NONE).unwrap();
        let ccq = client.create_cq(4096);
        let c = client.connect([10, 0, 0, 1], 5, &cep, &ccq).unwrap();
        let _s = l.accept(Duration::from_secs(10)).unwrap();
        let hold = Duration::from_millis(1500);
        let inner = server.inner.clone();
        let held = std::thread::spawn(move || {
            inner.call_on(1, move |_| std::thread::sleep(hold));
        });
        std::thread::sleep(Duration::from_millis(50)); // shard 1 is in the call now
        let t0 = Instant::now();
        let mut done = 0;
        while done < 200 {
            c.post(&WorkRequest::write(done, &cep, 0, 32, 0).signaled())
                .unwrap();
            let wc = ccq.wait_one(Duration::from_secs(10)).expect("completion");
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
        let took = t0.elapsed();
        assert!(
            !held.is_finished(),
            "shard 1 was released before shard 0 served 200 round trips ({took:?})"
        );
        held.join().unwrap();
        assert_eq!(server.shard_stats()[0].msgs_rx, 200);
    }

    /// A worker thread that panics (a bug) does not leave control calls waiting
    /// forever: they panic, saying why.
    #[test]
    fn control_calls_after_a_worker_panic_fail_instead_of_hanging() {
        let dev = Device::open(
            DeviceConfig::new("sim:wpanic", [10, 0, 0, 1]).progress(Progress::Dedicated),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dev.clone();
        std::thread::spawn(move || {
            let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                d.inner.call(|_| panic!("a bug in the worker"))
            }));
            let later = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.stats()));
            let msg = |e: Box<dyn std::any::Any + Send>| match e.downcast_ref::<&str>() {
                Some(s) => s.to_string(),
                None => e.downcast_ref::<String>().cloned().unwrap_or_default(),
            };
            let _ = tx.send((first.err().map(msg), later.err().map(msg)));
        });
        let (first, later) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("control calls returned");
        for m in [first, later] {
            let m = m.expect("the call panicked");
            assert!(m.contains("worker thread of this device panicked"), "{m}");
        }
        drop(dev); // joins the thread that panicked; nothing else is left to stop
    }
}
