//! DPDK: the EAL, mempools, ports and queues. The only code that touches mbufs.
//!
//! * [`eal_init`] runs once per process (DPDK's EAL cannot be initialised twice). It
//!   shares nothing and leaves no hugepage files behind (`--in-memory`), so processes
//!   run side by side; it uses hugepages when enough are reserved and otherwise falls
//!   back to `--no-huge` with a warning on stderr.
//! * [`Port::open`] brings up one port from a [`PortSpec`]: `ring[:NAME:a|b]` (two
//!   cross-connected in-process ring ports make two nodes in one process), `null`
//!   (tx sink), `null:rx` (rx source), `memif:<socket>:<server|client>`,
//!   `af_packet:<iface>`, `af_xdp:<iface>`, or a PCI address.
//! * Ring ports have two queue pairs: queue 0 for everything, queue [`HIGH_QUEUE`]
//!   for high-priority connections (a traffic class of its own, which the worker polls
//!   first); other PMDs have one.
//! * [`RxBatch`] / [`TxBatch`] carry bursts of owned [`Mbuf`]s. Frames are written
//!   single-segment (the mempool's data room is sized for the largest frame), and
//!   received ones must be. On memif and af_packet, whose transmit burst copies every
//!   frame, a frame can leave as a chain of three whose middle segment is a payload in
//!   endpoint memory ([`Port::tx_external`], [`Mbuf::set_len_external`]): the PMD's
//!   copy is then the payload's only one.
//!
//! * memif bursts pass the interrupt gate (`intr_gate`): DPDK 22.11's memif unmaps its
//!   rings on the interrupt thread when the peer leaves, so bursts and the interrupt
//!   thread's callbacks never overlap.
//!
//! Nothing here allocates on the per-frame path; errors are [`PortError`] values.
//!
//! This file holds [`Port`] itself and its burst path; the rest has a room each:
//! `eal` (EAL arguments and initialisation), `thread` (lcore registration, CPU
//! pinning), `clock` (the TSC), `spec` (parsing and printing [`PortSpec`]), `config`
//! ([`PortConfig`]), `open` (bringing a port up, with each PMD's gotchas, in `open/ring`
//! and `open/vdev`), `mbuf`, `batch` (rx/tx bursts), `intr_gate` and `error`
//! (`crate::prefetch` holds the cache hints it shares with the node).

mod batch;
mod clock;
mod config;
mod eal;
mod error;
mod intr_gate;
mod mbuf;
mod open;
mod spec;
mod thread;

use std::ffi::CString;
use std::ptr::NonNull;

use dpdk_sys as sys;

pub use crate::doorbell::Doorbell;
pub use batch::{RxBatch, TxBatch};
pub use clock::{rdtsc, tsc_hz};
pub use config::PortConfig;
pub use eal::{eal_info, eal_init, huge_free_mb, EalConfig, EalInfo, HugeMode};
pub mod telemetry;
pub use error::PortError;
pub use mbuf::Mbuf;
pub use spec::{MemifRole, PortSpec, RingSide};
pub use thread::{pin_current_thread_to_nth_cpu, register_thread, register_thread_at};

use crate::prefetch::{prefetch, prefetch_lines};

/// Cache lines of a frame's start fetched ahead: the Ethernet/IP/UDP underlay, the
/// deposit header and the first cell.
const PREFETCH_LINES: usize = 2;

/// Frames per rx/tx burst.
pub const BURST: usize = 32;

/// Queue pairs of a port with a high-priority traffic class, and that class's queue.
pub const HIGH_QUEUES: u16 = 2;
pub const HIGH_QUEUE: u16 = 1;

/// Mbufs a port allocates at once for transmission.
const ALLOC_STASH: usize = 16;

/// Port counters from the PMD.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// An open DPDK device: what every handle of it ([`Port`]) shares. Closed, and its
/// mempool freed, when the last handle goes.
struct PortDev {
    id: u16,
    name: String,
    pool: NonNull<sys::rte_mempool>,
    max_frame: usize,
    mac: [u8; 6],
    /// The virtual device to uninit on drop (none for ring and PCI ports).
    vdev: Option<CString>,
    /// A ring port: its mempool is kept for the process on drop.
    ring: bool,
    /// Receive descriptors of each queue (after the device's adjustment).
    rx_desc: u16,
    /// Queue pairs the device was configured with.
    queues: u16,
    /// `NAME:SIDE` of a ring port (released from the open-rings registry of
    /// `open/ring` on drop).
    ring_key: Option<String>,
    /// Bursts go through the interrupt gate ([`intr_gate`]): memif, whose driver
    /// unmaps its rings on the interrupt thread when the peer leaves.
    gated: bool,
    /// Frames may take payloads by reference ([`Port::tx_external`]).
    tx_external: bool,
    /// Ring ports: the doorbells of this side's receive queues (its workers sleep by
    /// them) and of the peer's (rung after sending on the same queue); empty elsewhere.
    rx_bells: Vec<std::sync::Arc<Doorbell>>,
    tx_bells: Vec<std::sync::Arc<Doorbell>>,
}

// SAFETY: the device's fields are read-only after opening; the mempool is thread-safe;
// each queue is used by the one handle that owns it.
unsafe impl Send for PortDev {}
unsafe impl Sync for PortDev {}

/// One open DPDK port, or the share of one that a shard owns ([`Port::split`]): the
/// queue pairs this handle may use and its own allocation stash over the device's
/// mempool.
pub struct Port {
    dev: std::sync::Arc<PortDev>,
    /// The device queue of this handle's queue 0, and the queue pairs it owns: 1, or
    /// [`HIGH_QUEUES`] where its queue [`HIGH_QUEUE`] carries high-priority frames; 0
    /// for a shard that reaches the wire through another (software dispatch).
    first: u16,
    queues: u16,
    /// The receive descriptors this handle's shard may count on: the queue's, or its
    /// share of queue 0's when shards share it.
    rx_desc: u16,
    /// Mbufs allocated (and reset) ahead, [`ALLOC_STASH`] at a time: one bulk
    /// allocation overlaps the cache misses on mbuf headers last written by another
    /// core (the peer that freed them), where one allocation per frame waits for each.
    stash: [*mut sys::rte_mbuf; ALLOC_STASH],
    stash_n: usize,
}

// SAFETY: the handle's queues are used by one thread at a time (the owner of &mut Port);
// the mempool is thread-safe.
unsafe impl Send for Port {}

impl Port {
    /// Initialises the EAL (defaults, if not done yet) and brings the port up.
    pub fn open(cfg: &PortConfig) -> Result<Port, PortError> {
        open::open_port(cfg)
    }

    /// The one handle of a device just opened: all its queue pairs.
    fn new(dev: PortDev) -> Port {
        let (queues, rx_desc) = (dev.queues, dev.rx_desc);
        Port::handle(std::sync::Arc::new(dev), 0, queues, rx_desc)
    }

    /// A handle of `dev` owning `queues` queue pairs from `first`, counting on `rx_desc`
    /// receive descriptors, with an empty stash.
    fn handle(dev: std::sync::Arc<PortDev>, first: u16, queues: u16, rx_desc: u16) -> Port {
        Port {
            dev,
            first,
            queues,
            rx_desc,
            stash: [std::ptr::null_mut(); ALLOC_STASH],
            stash_n: 0,
        }
    }

    /// Splits the port among `n` shards: one queue pair each where the device has at
    /// least `n` (no high-priority queue then), else every queue to the first handle and
    /// none to the others, which reach the wire through it (software dispatch). One
    /// handle: the port as it is.
    pub fn split(self, n: usize) -> Vec<Port> {
        if n <= 1 {
            return vec![self];
        }
        let direct = usize::from(self.dev.queues) >= n;
        let mut v = Vec::with_capacity(n);
        for k in 0..n {
            let (first, queues) = match (direct, k) {
                (true, k) => (k as u16, 1),
                (false, 0) => (0, self.dev.queues),
                (false, _) => (0, 0),
            };
            let rx_desc = if direct {
                self.dev.rx_desc
            } else {
                (usize::from(self.dev.rx_desc) / n) as u16
            };
            v.push(Port::handle(self.dev.clone(), first, queues, rx_desc));
        }
        v
    }

    /// Queue pairs of the device (all handles together).
    pub fn device_queues(&self) -> u16 {
        self.dev.queues
    }

    /// The doorbells of this handle's receive queues (ring ports; none elsewhere): a
    /// peer in this process rings them after sending, waking the owner from a sleep.
    fn own_bells(&self) -> &[std::sync::Arc<Doorbell>] {
        let (a, n) = (usize::from(self.first), usize::from(self.queues));
        self.dev.rx_bells.get(a..a + n).unwrap_or(&[])
    }

    /// Makes `ring`'s sleeper the one the doorbells of this handle's queues wake.
    pub fn register_waker(&self, ring: &std::sync::Arc<crate::submit::SubmitRing>) {
        for b in self.own_bells() {
            b.register(ring);
        }
    }

    /// The doorbells of this handle's receive queues (none but on ring ports), for a
    /// thread that sleeps for the owner without holding the handle (an inline device's
    /// wait-fd helper: [`Doorbell::set_sleeping`] around its sleep).
    pub fn doorbells(&self) -> Vec<std::sync::Arc<Doorbell>> {
        self.own_bells().to_vec()
    }

    /// The owner of this handle's queues is going to sleep (true) or awake (false).
    pub fn set_sleeping(&self, sleeping: bool) {
        for b in self.own_bells() {
            b.set_sleeping(sleeping);
        }
    }

    /// DPDK port id.
    pub fn id(&self) -> u16 {
        self.dev.id
    }
    /// Device name as DPDK knows it.
    pub fn name(&self) -> &str {
        &self.dev.name
    }
    /// Largest frame this port carries (Ethernet header to trailer).
    pub fn max_frame(&self) -> usize {
        self.dev.max_frame
    }
    /// Frames the receive queue holds (its descriptors; a shard's share of them when
    /// shards share the queue).
    pub fn rx_desc(&self) -> u16 {
        self.rx_desc
    }
    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.dev.mac
    }

    /// Mbufs of the device's mempool not free (in rx/tx rings, batches, held frames,
    /// every handle's allocation stash — subtract [`Port::stashed`] of each — or
    /// leaked): a leak check, not a fast-path call.
    pub fn pool_in_use(&self) -> usize {
        // SAFETY: the pool lives as long as the device; the count only reads it.
        unsafe { sys::rte_mempool_in_use_count(self.dev.pool.as_ptr()) as usize }
    }

    /// Mbufs this handle allocated ahead (its stash: not in use).
    pub fn stashed(&self) -> usize {
        self.stash_n
    }

    /// Whether frames may carry a payload by reference to endpoint memory
    /// ([`Mbuf::set_len_external`]): the PMD copies every frame in its transmit burst
    /// (memif, af_packet) and takes chained mbufs.
    pub fn tx_external(&self) -> bool {
        self.dev.tx_external
    }

    /// Whether the link is up (memif: the peer is connected).
    pub fn link_up(&self) -> bool {
        link_up(self.dev.id)
    }

    /// Allocates an empty mbuf for transmission (from the port's stash, refilled in
    /// bulk; one at a time when the pool runs low).
    #[inline]
    pub fn alloc(&mut self) -> Option<Mbuf> {
        if self.stash_n == 0 {
            // SAFETY: valid pool; on success all ALLOC_STASH pointers are reset mbufs
            // we own, on failure none is written.
            let rc = unsafe {
                sys::shim_pktmbuf_alloc_bulk(
                    self.dev.pool.as_ptr(),
                    self.stash.as_mut_ptr(),
                    ALLOC_STASH as u32,
                )
            };
            if rc != 0 {
                // SAFETY: valid pool; returns null when empty.
                return NonNull::new(unsafe { sys::shim_pktmbuf_alloc(self.dev.pool.as_ptr()) })
                    .map(Mbuf);
            }
            self.stash_n = ALLOC_STASH;
        }
        self.stash_n -= 1;
        if self.stash_n > 0 {
            // The next frame's first bytes (its headers) are written soon: fetch them
            // now, while this one is filled.
            // SAFETY: a stashed pointer is a valid, reset mbuf we own.
            let next = unsafe { sys::shim_pktmbuf_mtod(self.stash[self.stash_n - 1]) };
            prefetch_lines(next, PREFETCH_LINES, true);
        }
        NonNull::new(self.stash[self.stash_n]).map(Mbuf)
    }

    /// Receives up to [`BURST`] frames into `batch` (anything left in it is freed first).
    #[inline]
    pub fn rx(&mut self, batch: &mut RxBatch) -> usize {
        self.rx_queue(0, batch)
    }

    /// [`Port::rx`] from queue `q` (below [`Port::queues`]).
    #[inline]
    pub fn rx_queue(&mut self, q: u16, batch: &mut RxBatch) -> usize {
        for m in batch.by_ref() {
            drop(m);
        }
        debug_assert!(q < self.queues);
        let (id, q, ptrs) = (self.dev.id, self.first + q, batch.ptrs.as_mut_ptr());
        // SAFETY: valid port and queue, owned by &mut self; ptrs has room for BURST.
        let n = self.burst(|| unsafe { sys::shim_rx_burst(id, q, ptrs, BURST as u16) });
        batch.n = n as usize;
        batch.next = 0;
        // The mbuf headers were last written by the sender's core: start fetching them
        // all now (as l2fwd does), not one miss per frame.
        for &p in &batch.ptrs[..batch.n] {
            prefetch(p.cast());
        }
        batch.n
    }

    /// Runs one rx or tx burst, through the interrupt gate on a gated port (0 frames
    /// while the gate is closed: the burst is retried next turn).
    #[inline]
    fn burst(&self, f: impl FnOnce() -> u16) -> u16 {
        if !self.dev.gated {
            return f();
        }
        if !intr_gate::enter(self.dev.id) {
            return 0;
        }
        let n = f();
        intr_gate::leave(self.dev.id);
        n
    }

    /// Queue pairs: 1, or [`HIGH_QUEUES`] when queue [`HIGH_QUEUE`] carries
    /// high-priority frames.
    #[inline]
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// Transmits what `batch` holds; frames the PMD did not take stay in the batch, in
    /// order, for the next call. Returns the number sent.
    #[inline]
    pub fn tx(&mut self, batch: &mut TxBatch) -> usize {
        self.tx_queue(0, batch)
    }

    /// [`Port::tx`] on queue `q` (below [`Port::queues`]).
    #[inline]
    pub fn tx_queue(&mut self, q: u16, batch: &mut TxBatch) -> usize {
        if batch.n == 0 {
            return 0;
        }
        debug_assert!(q < self.queues);
        let (id, q) = (self.dev.id, self.first + q);
        let (ptrs, n) = (batch.ptrs.as_mut_ptr(), batch.n as u16);
        // SAFETY: the first n pointers are owned mbufs; the PMD takes the first `sent`.
        let sent = self.burst(|| unsafe { sys::shim_tx_burst(id, q, ptrs, n) }) as usize;
        if sent > 0 {
            if let Some(b) = self.dev.tx_bells.get(usize::from(q)) {
                b.ring();
            }
        }
        if sent < batch.n {
            batch.ptrs.copy_within(sent..batch.n, 0);
        }
        batch.n -= sent;
        sent
    }

    /// The PMD's counters.
    pub fn stats(&self) -> PortStats {
        let mut s: sys::rte_eth_stats = Default::default();
        // SAFETY: valid port, out parameter.
        unsafe { sys::rte_eth_stats_get(self.dev.id, &mut s) };
        PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: the stash's first stash_n pointers are mbufs we own.
        unsafe { sys::shim_pktmbuf_free_bulk(self.stash.as_mut_ptr(), self.stash_n as u32) };
        self.stash_n = 0;
    }
}

impl Drop for PortDev {
    fn drop(&mut self) {
        // memif's stop runs its disconnect here: not beside the interrupt thread's.
        let gate =
            self.gated && intr_gate::enter_waiting(self.id, std::time::Duration::from_secs(1));
        // SAFETY: the device is ours (no handle is left); stop and close release its
        // queues. The mempool is freed after the port no longer references its mbufs.
        unsafe {
            sys::rte_eth_dev_stop(self.id);
            sys::rte_eth_dev_close(self.id);
            if let Some(v) = &self.vdev {
                sys::rte_vdev_uninit(v.as_ptr());
            }
        }
        if gate {
            intr_gate::leave(self.id);
        }
        // SAFETY: as above.
        unsafe {
            // A ring port's frames sit in a ring its peer reads, possibly after this
            // port is gone: its pool must outlive it, so it is kept for the process.
            if !self.ring {
                sys::rte_mempool_free(self.pool.as_ptr());
            }
        }
        if let Some(key) = &self.ring_key {
            open::release_ring_side(key);
        }
    }
}

/// Whether port `id`'s link is up (memif: the peer is connected).
fn link_up(id: u16) -> bool {
    let mut link: sys::rte_eth_link = Default::default();
    // SAFETY: a valid port id, out parameter.
    let rc = unsafe { sys::rte_eth_link_get_nowait(id, &mut link) };
    // link_status is bit 17 of the packed bitfield word after link_speed.
    rc == 0 && link.link_status() != 0
}

/// Tests that bring up the EAL: each runs in its own process under `cargo nextest`.
#[cfg(test)]
mod eal_tests {
    use super::*;

    #[test]
    fn ring_pair_is_cross_connected() {
        let mut a = Port::open(&PortConfig::new("ring:xc:a".parse().unwrap())).unwrap();
        let mut b = Port::open(&PortConfig::new("ring:xc:b".parse().unwrap())).unwrap();
        assert!(
            a.max_frame() >= 9000,
            "jumbo frames on ring: {}",
            a.max_frame()
        );
        let mut tx = TxBatch::default();
        for i in 0..3u8 {
            let mut m = a.alloc().expect("mbuf");
            m.room_mut()[..100].fill(i);
            m.set_len(100);
            tx.push(m).ok().unwrap();
        }
        assert_eq!(a.tx(&mut tx), 3);
        let mut rx = RxBatch::default();
        assert_eq!(b.rx(&mut rx), 3);
        for (i, m) in rx.enumerate() {
            assert_eq!(m.data(), &[i as u8; 100][..]);
        }
        // Nothing loops back to the sender.
        assert_eq!(a.rx(&mut RxBatch::default()), 0);
    }

    #[test]
    fn null_port_sinks_frames() {
        let mut n = Port::open(&PortConfig::new(PortSpec::Null { rx: false })).unwrap();
        let mut tx = TxBatch::default();
        let mut m = n.alloc().unwrap();
        m.set_len(64);
        tx.push(m).ok().unwrap();
        assert_eq!(n.tx(&mut tx), 1);
        assert_eq!(n.rx(&mut RxBatch::default()), 0);
    }
}
