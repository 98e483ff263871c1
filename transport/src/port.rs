//! DPDK: the EAL, mempools, ports and queues. The only code that touches mbufs.
//!
//! * [`eal_init`] runs once per process (DPDK's EAL cannot be initialised twice). It
//!   always uses `--in-memory` (no hugepage files left behind, processes side by side),
//!   uses hugepages when enough are reserved and otherwise falls back to `--no-huge`
//!   with a warning on stderr.
//! * [`Port::open`] brings up one port from a [`PortSpec`]: `ring[:NAME:a|b]` (two
//!   cross-connected in-process ring ports make two nodes in one process), `null`
//!   (tx sink), `null:rx` (rx source), `memif:<socket>:<server|client>`,
//!   `af_packet:<iface>`, `af_xdp:<iface>`, or a PCI address.
//! * Ring ports have two queue pairs: queue 0 for everything, queue [`HIGH_QUEUE`]
//!   for high-priority connections (a traffic class of its own, which the worker polls
//!   first); other PMDs have one.
//! * [`RxBatch`] / [`TxBatch`] carry bursts of owned [`Mbuf`]s. Frames are always
//!   single-segment: the mempool's data room is sized for the largest frame.
//!
//! * memif bursts pass the interrupt gate (`intr_gate`): DPDK 22.11's memif unmaps its
//!   rings on the interrupt thread when the peer leaves, so bursts and the interrupt
//!   thread's callbacks never overlap.
//!
//! Nothing here allocates on the per-frame path; errors are [`PortError`] values.

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr::NonNull;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use dpdk_sys as sys;

mod intr_gate;

/// Frames per rx/tx burst.
pub const BURST: usize = 32;

/// Errors from the EAL and port layer.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("EAL initialisation failed: {0}")]
    Eal(String),
    #[error("bad port spec {spec:?}: {why}")]
    BadSpec { spec: String, why: &'static str },
    #[error("DPDK call {call} failed for {what}: {msg} (rc {rc})")]
    Dpdk {
        call: &'static str,
        what: String,
        rc: i32,
        msg: String,
    },
    #[error("port {0:?} is already open in this process")]
    InUse(String),
}

fn rte_err(rc: i32) -> String {
    let code = if rc < 0 {
        -rc
    } else {
        unsafe { sys::shim_errno() }
    };
    // SAFETY: rte_strerror returns a pointer to a static or thread-local C string.
    unsafe { CStr::from_ptr(sys::rte_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

fn dpdk_err(call: &'static str, what: impl Into<String>, rc: i32) -> PortError {
    PortError::Dpdk {
        call,
        what: what.into(),
        rc,
        msg: rte_err(rc),
    }
}

/// Whether the EAL should use hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugeMode {
    /// Hugepages when at least [`EalConfig::min_huge_mb`] are free, else `--no-huge`.
    #[default]
    Auto,
    /// Always `--no-huge`.
    Off,
}

/// EAL options. Only the first [`eal_init`] of a process applies them.
#[derive(Debug, Clone)]
pub struct EalConfig {
    pub huge: HugeMode,
    /// Hugepage memory that must be free to use hugepages in `Auto` mode.
    pub min_huge_mb: u64,
    /// Memory for `--no-huge` mode (`-m`).
    pub no_huge_mb: u64,
    /// Extra EAL arguments (also read from `DEPOSIT_EAL_ARGS`, whitespace separated).
    pub extra_args: Vec<String>,
    /// Allow-list a PCI device (otherwise `--no-pci`).
    pub pci: Option<String>,
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            huge: HugeMode::Auto,
            min_huge_mb: 256,
            no_huge_mb: 1024,
            extra_args: Vec::new(),
            pci: None,
        }
    }
}

/// What the EAL ended up with.
#[derive(Debug, Clone)]
pub struct EalInfo {
    /// Running on hugepages (false: `--no-huge`).
    pub hugepages: bool,
    /// Free hugepage memory seen before init, in MiB.
    pub huge_free_mb: u64,
    /// The arguments passed to `rte_eal_init`.
    pub args: Vec<String>,
    /// TSC frequency (Hz), the clock of the fast path.
    pub tsc_hz: u64,
}

static EAL: OnceLock<Result<EalInfo, String>> = OnceLock::new();

/// Free hugepage memory in MiB from /proc/meminfo (0 when unknown).
pub fn huge_free_mb() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/meminfo") else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    field("HugePages_Free:") * field("Hugepagesize:") / 1024
}

/// Initialises DPDK's EAL once per process; later calls return the first result.
pub fn eal_init(cfg: &EalConfig) -> Result<EalInfo, PortError> {
    EAL.get_or_init(|| eal_init_once(cfg))
        .clone()
        .map_err(PortError::Eal)
}

/// The EAL state if [`eal_init`] already succeeded.
pub fn eal_info() -> Option<EalInfo> {
    EAL.get().and_then(|r| r.as_ref().ok().cloned())
}

fn eal_init_once(cfg: &EalConfig) -> Result<EalInfo, String> {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let free = huge_free_mb();
    let hugepages = cfg.huge == HugeMode::Auto && free >= cfg.min_huge_mb;
    let mut args: Vec<String> = vec![
        "deposit".into(),
        // lcore 0 may run on every CPU: the EAL pins the calling thread to its lcore's
        // cpuset, and threads spawned later inherit that affinity.
        "--lcores".into(),
        format!("0@(0-{})", ncpu.saturating_sub(1)),
        "--no-telemetry".into(),
        "--log-level=*:warning".into(),
    ];
    match &cfg.pci {
        Some(p) => {
            args.push("-a".into());
            args.push(p.clone());
        }
        None => args.push("--no-pci".into()),
    }
    if hugepages {
        args.push("--in-memory".into());
    } else {
        eprintln!(
            "deposit: WARNING: {} MiB of hugepages free (< {} MiB): running DPDK with --no-huge (slower). \
             Reserve hugepages with scripts/hugepages.sh.",
            free, cfg.min_huge_mb
        );
        // --in-memory is refused with --no-huge; --no-shconf and a per-process prefix
        // give the same "nothing shared, nothing left behind".
        args.push("--no-huge".into());
        args.push("--no-shconf".into());
        args.push(format!("--file-prefix=dp{}", std::process::id()));
        args.push("-m".into());
        args.push(cfg.no_huge_mb.to_string());
    }
    args.extend(cfg.extra_args.iter().cloned());
    if let Ok(extra) = std::env::var("DEPOSIT_EAL_ARGS") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    let cargs: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| format!("NUL in EAL argument {a:?}")))
        .collect::<Result<_, _>>()?;
    // rte_eal_init may permute argv; keep the CStrings alive for the whole process.
    let cargs: &'static [CString] = Box::leak(cargs.into_boxed_slice());
    let mut argv: Vec<*mut libc::c_char> = cargs.iter().map(|c| c.as_ptr() as *mut _).collect();
    let argv: &'static mut [*mut libc::c_char] = Box::leak(argv.as_mut_slice().to_vec().into());
    // SAFETY: argv points at argc valid NUL-terminated strings leaked for the process
    // lifetime, as the EAL requires; eal_init_once runs once (OnceLock).
    let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
    if rc < 0 {
        return Err(format!(
            "rte_eal_init({}) : {}",
            args.join(" "),
            rte_err(rc)
        ));
    }
    // SAFETY: plain getter, valid after rte_eal_init.
    let tsc_hz = unsafe { sys::shim_get_tsc_hz() };
    Ok(EalInfo {
        hugepages,
        huge_free_mb: free,
        args,
        tsc_hz,
    })
}

thread_local! {
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives the calling (non-EAL) thread an lcore id so mempool per-lcore caches work.
/// Idempotent; failure only costs speed (the mempool then bypasses its cache).
pub fn register_thread() {
    REGISTERED.with(|r| {
        if !r.get() {
            // SAFETY: rte_lcore_id reads a thread-local; rte_thread_register is safe to
            // call from any thread after EAL init.
            unsafe {
                if sys::shim_lcore_id() == u32::MAX {
                    let _ = sys::rte_thread_register();
                }
            }
            r.set(true);
        }
    });
}

/// Pins the calling thread to the `n`th CPU of its current affinity set, when it has
/// more than `n` (benchmarks: two spinning threads must not share a CPU). Returns the
/// CPU chosen, or `None` when nothing was changed.
pub fn pin_current_thread_to_nth_cpu(n: usize) -> Option<usize> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); sched_getaffinity and
    // sched_setaffinity on pid 0 read/write the calling thread's mask through a valid
    // pointer of the size given; CPU_ISSET/CPU_SET index within CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .nth(n)?;
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        (libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0)
            .then_some(cpu)
    }
}

/// Current TSC value.
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads the time stamp counter; no memory effects (inline, no FFI call).
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: reads the time stamp counter; no memory effects.
    unsafe {
        sys::shim_rdtsc()
    }
}

/// TSC ticks per second (valid after [`eal_init`]).
pub fn tsc_hz() -> u64 {
    eal_info().map(|i| i.tsc_hz).unwrap_or(1_000_000_000)
}

/// Side of an in-process ring pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSide {
    A,
    B,
}

/// Role of a memif port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    Server,
    Client,
}

/// Which DPDK port to open (DESIGN.md §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// In-process ring port; the two sides of one name are cross-connected.
    Ring { name: String, side: RingSide },
    /// `net_null`: tx sink (`rx == false`) or rx source of 64-byte frames.
    Null { rx: bool },
    /// `net_memif` over a Unix socket path.
    Memif { socket: String, role: MemifRole },
    /// `net_af_packet` on a kernel interface.
    AfPacket { iface: String },
    /// `net_af_xdp` on a kernel interface.
    AfXdp { iface: String },
    /// A physical port by PCI address.
    Pci { addr: String },
}

impl FromStr for PortSpec {
    type Err = PortError;
    fn from_str(s: &str) -> Result<Self, PortError> {
        let bad = |why| PortError::BadSpec {
            spec: s.to_string(),
            why,
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts[0] {
            "ring" => match parts.len() {
                1 => Ok(PortSpec::Ring {
                    name: "lo".into(),
                    side: RingSide::A,
                }),
                3 => {
                    let side = match parts[2] {
                        "a" | "A" => RingSide::A,
                        "b" | "B" => RingSide::B,
                        _ => return Err(bad("ring side must be a or b")),
                    };
                    if parts[1].is_empty() || parts[1].len() > 16 {
                        return Err(bad("ring name must be 1..=16 characters"));
                    }
                    Ok(PortSpec::Ring {
                        name: parts[1].into(),
                        side,
                    })
                }
                _ => Err(bad("expected ring or ring:<name>:<a|b>")),
            },
            "null" => match parts.get(1) {
                None => Ok(PortSpec::Null { rx: false }),
                Some(&"rx") => Ok(PortSpec::Null { rx: true }),
                _ => Err(bad("expected null or null:rx")),
            },
            "memif" => {
                if parts.len() != 3 || parts[1].is_empty() {
                    return Err(bad("expected memif:<socket-path>:<server|client>"));
                }
                let role = match parts[2] {
                    "server" => MemifRole::Server,
                    "client" => MemifRole::Client,
                    _ => return Err(bad("memif role must be server or client")),
                };
                Ok(PortSpec::Memif {
                    socket: parts[1].into(),
                    role,
                })
            }
            "af_packet" | "af_xdp" => {
                if parts.len() != 2 || parts[1].is_empty() {
                    return Err(bad("expected af_packet:<iface> or af_xdp:<iface>"));
                }
                let iface = parts[1].to_string();
                Ok(if parts[0] == "af_packet" {
                    PortSpec::AfPacket { iface }
                } else {
                    PortSpec::AfXdp { iface }
                })
            }
            "pci" if parts.len() > 1 => Ok(PortSpec::Pci {
                addr: parts[1..].join(":"),
            }),
            _ if s
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
                && s.contains('.') =>
            {
                Ok(PortSpec::Pci { addr: s.into() })
            }
            _ => Err(bad(
                "unknown port kind (ring, null, memif, af_packet, af_xdp, pci)",
            )),
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Ring { name, side } => {
                write!(
                    f,
                    "ring:{name}:{}",
                    if *side == RingSide::A { "a" } else { "b" }
                )
            }
            PortSpec::Null { rx } => write!(f, "null{}", if *rx { ":rx" } else { "" }),
            PortSpec::Memif { socket, role } => write!(
                f,
                "memif:{socket}:{}",
                if *role == MemifRole::Server {
                    "server"
                } else {
                    "client"
                }
            ),
            PortSpec::AfPacket { iface } => write!(f, "af_packet:{iface}"),
            PortSpec::AfXdp { iface } => write!(f, "af_xdp:{iface}"),
            PortSpec::Pci { addr } => write!(f, "pci:{addr}"),
        }
    }
}

/// The MTU of a kernel interface (from sysfs of the caller's network namespace).
fn iface_mtu(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// af_packet ring frame size for frames of up to `max_frame` bytes: room for the
/// TPACKET header, a power of two.
fn af_packet_framesz(max_frame: usize) -> usize {
    (max_frame + 128).next_power_of_two().max(2048)
}

/// Port options.
#[derive(Debug, Clone)]
pub struct PortConfig {
    pub spec: PortSpec,
    /// Largest frame (Ethernet header to CRC trailer) the transport will send.
    /// Clamped to what the PMD allows; [`Port::max_frame`] tells the result.
    pub max_frame: usize,
    /// Mbufs in the port's mempool.
    pub mbufs: u32,
    pub rx_desc: u16,
    pub tx_desc: u16,
}

impl PortConfig {
    /// Defaults for a spec: jumbo frames (9000-byte MTU) everywhere but af_xdp, which
    /// stops near 3.5 KB on veth.
    pub fn new(spec: PortSpec) -> Self {
        let max_frame = match spec {
            PortSpec::AfXdp { .. } => 3498,
            _ => 9014,
        };
        PortConfig {
            spec,
            max_frame,
            mbufs: 8191,
            rx_desc: 1024,
            tx_desc: 1024,
        }
    }
}

/// An owned single-segment mbuf.
pub struct Mbuf(NonNull<sys::rte_mbuf>);

// SAFETY: an mbuf is a plain buffer owned by exactly one Mbuf; DPDK mempools are
// thread-safe for alloc/free.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// The frame bytes (first segment) and whether the frame is all in it
    /// (multi-segment frames are refused by the worker). One call into DPDK.
    #[inline]
    pub fn frame(&self) -> (&[u8], bool) {
        let mut len = 0u16;
        let mut single = 0u8;
        // SAFETY: the shim returns mtod and data_len of this valid mbuf; the bytes stay
        // valid and unchanged while we own it (and the borrow of self).
        unsafe {
            let p = sys::shim_pktmbuf_data(self.0.as_ptr(), &mut len, &mut single);
            (std::slice::from_raw_parts(p, len as usize), single != 0)
        }
    }

    /// The frame bytes (first segment), writable (fault injection flips bits here).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let mut len = 0u16;
        let mut single = 0u8;
        // SAFETY: as in `frame`; &mut self makes the access exclusive.
        unsafe {
            let p = sys::shim_pktmbuf_data(self.0.as_ptr(), &mut len, &mut single);
            std::slice::from_raw_parts_mut(p, len as usize)
        }
    }

    /// The frame bytes (first segment).
    #[inline]
    pub fn data(&self) -> &[u8] {
        self.frame().0
    }

    /// Whether the frame is in one segment.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.frame().1
    }

    /// The whole writable room of a freshly allocated mbuf (data length is set by
    /// [`Mbuf::set_len`]).
    #[inline]
    pub fn room_mut(&mut self) -> &mut [u8] {
        let mut room = 0u16;
        // SAFETY: a fresh mbuf owns `room` writable bytes from mtod; &mut self makes the
        // borrow exclusive.
        unsafe {
            let p = sys::shim_pktmbuf_room(self.0.as_ptr(), &mut room);
            std::slice::from_raw_parts_mut(p, room as usize)
        }
    }

    /// Sets the frame length; the caller keeps it within [`Mbuf::room_mut`]'s length
    /// (it is clamped to the buffer's room otherwise).
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        let len = len.min(u16::MAX as usize) as u16;
        // SAFETY: reads the room of a valid mbuf, then sets a length within it.
        unsafe {
            let mut room = 0u16;
            sys::shim_pktmbuf_room(self.0.as_ptr(), &mut room);
            sys::shim_pktmbuf_set_len(self.0.as_ptr(), len.min(room));
        }
    }

    fn into_raw(self) -> *mut sys::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; it returns to its mempool.
        unsafe { sys::shim_pktmbuf_free(self.0.as_ptr()) }
    }
}

/// Starts loading the cache line at `p` (a hint: no fault, whatever `p` is).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Cache lines of a frame's start fetched ahead: the Ethernet/IP/UDP underlay, the
/// deposit header and the first cell.
const PREFETCH_LINES: usize = 2;

/// Starts loading `n` cache lines from `p`, for writing when `write` (a hint, as
/// [`prefetch`]).
#[inline(always)]
fn prefetch_lines(p: *const u8, n: usize, write: bool) {
    for i in 0..n {
        let line = p.wrapping_add(i * 64);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `prefetch`.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
            if write {
                _mm_prefetch::<_MM_HINT_ET0>(line.cast());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(line.cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (line, write);
    }
}

/// A received burst; iterating hands out owned mbufs, dropping frees the rest.
pub struct RxBatch {
    ptrs: [*mut sys::rte_mbuf; BURST],
    n: usize,
    next: usize,
}

impl Default for RxBatch {
    fn default() -> Self {
        RxBatch {
            ptrs: [std::ptr::null_mut(); BURST],
            n: 0,
            next: 0,
        }
    }
}

impl RxBatch {
    /// Whether every received frame was taken out.
    #[inline]
    pub fn is_drained(&self) -> bool {
        self.next >= self.n
    }
}

impl Iterator for RxBatch {
    type Item = Mbuf;
    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        while self.next < self.n {
            let p = self.ptrs[self.next];
            self.next += 1;
            if self.next < self.n && !self.ptrs[self.next].is_null() {
                // The next frame's headers are parsed soon: fetch them while this one
                // is handled (its mbuf header was fetched at the burst).
                // SAFETY: a received pointer is a valid mbuf owned by the batch.
                let data = unsafe { sys::shim_pktmbuf_mtod(self.ptrs[self.next]) };
                prefetch_lines(data, PREFETCH_LINES, false);
            }
            if let Some(nn) = NonNull::new(p) {
                return Some(Mbuf(nn));
            }
        }
        None
    }
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        for m in self.by_ref() {
            drop(m);
        }
    }
}

/// Frames waiting to be transmitted.
pub struct TxBatch {
    ptrs: [*mut sys::rte_mbuf; BURST],
    n: usize,
}

impl Default for TxBatch {
    fn default() -> Self {
        TxBatch {
            ptrs: [std::ptr::null_mut(); BURST],
            n: 0,
        }
    }
}

// SAFETY: holds owned mbufs only.
unsafe impl Send for TxBatch {}
unsafe impl Send for RxBatch {}

impl TxBatch {
    /// Queues a frame; gives it back when the batch is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.n == BURST {
            return Err(m);
        }
        self.ptrs[self.n] = m.into_raw();
        self.n += 1;
        Ok(())
    }
    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    pub fn is_full(&self) -> bool {
        self.n == BURST
    }
}

impl Drop for TxBatch {
    fn drop(&mut self) {
        if self.n > 0 {
            // SAFETY: the first n pointers are owned mbufs.
            unsafe { sys::shim_pktmbuf_free_bulk(self.ptrs.as_mut_ptr(), self.n as u32) }
        }
    }
}

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

/// One open DPDK port with one or [`HIGH_QUEUES`] rx/tx queue pairs and its own
/// mempool.
pub struct Port {
    id: u16,
    name: String,
    pool: NonNull<sys::rte_mempool>,
    max_frame: usize,
    mac: [u8; 6],
    vdev: Option<CString>,
    ring: bool,
    /// Receive descriptors of the queue (after the device's adjustment).
    rx_desc: u16,
    /// Queue pairs: 1, or 2 where queue [`HIGH_QUEUE`] carries high-priority frames.
    queues: u16,
    /// `NAME:SIDE` of a ring port (released from `OPEN_RINGS` on drop).
    ring_key: Option<String>,
    /// Mbufs allocated (and reset) ahead, [`ALLOC_STASH`] at a time: one bulk
    /// allocation overlaps the cache misses on mbuf headers last written by another
    /// core (the peer that freed them), where one allocation per frame waits for each.
    stash: [*mut sys::rte_mbuf; ALLOC_STASH],
    stash_n: usize,
    /// Bursts go through the interrupt gate ([`intr_gate`]): memif, whose driver
    /// unmaps its rings on the interrupt thread when the peer leaves.
    gated: bool,
}

/// Mbufs a port allocates at once for transmission.
const ALLOC_STASH: usize = 16;

// SAFETY: the port's queues are used by one thread at a time (the owner of &mut Port);
// the mempool is thread-safe.
unsafe impl Send for Port {}

/// Queue pairs of a port with a high-priority traffic class, and that class's queue.
pub const HIGH_QUEUES: u16 = 2;
pub const HIGH_QUEUE: u16 = 1;

static PORT_SEQ: AtomicU32 = AtomicU32::new(0);
static OPEN_RINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("no NUL after replace")
}

fn ring_lookup_or_create(name: &str) -> Result<*mut sys::rte_ring, PortError> {
    let c = cstring(name);
    // SAFETY: valid C string; lookup returns null when absent.
    let r = unsafe { sys::rte_ring_lookup(c.as_ptr()) };
    if !r.is_null() {
        return Ok(r);
    }
    // SAFETY: valid name; the ring lives for the process (ring ports are never freed).
    let r = unsafe {
        sys::rte_ring_create(c.as_ptr(), 4096, 0, sys::RING_F_SP_ENQ | sys::RING_F_SC_DEQ)
    };
    if r.is_null() {
        return Err(dpdk_err("rte_ring_create", name, -1));
    }
    Ok(r)
}

impl Port {
    /// Initialises the EAL (defaults, if not done yet) and brings the port up.
    pub fn open(cfg: &PortConfig) -> Result<Port, PortError> {
        let eal_cfg = EalConfig {
            pci: match &cfg.spec {
                PortSpec::Pci { addr } => Some(addr.clone()),
                _ => None,
            },
            ..EalConfig::default()
        };
        eal_init(&eal_cfg)?;
        register_thread();
        let seq = PORT_SEQ.fetch_add(1, Ordering::Relaxed);
        let mut max_frame = cfg.max_frame.clamp(128, 9600);
        let mut ring_key = None;
        // Ring ports get a second queue pair for high-priority traffic (a traffic class
        // of its own: the receiver polls it first, so urgent frames never wait behind
        // bulk ones queued in the port). Other PMDs keep one queue: with two, DPDK
        // 22.11's memif crashed a ddperf server as its client left (seen 2 runs in 14).
        let queues: u16 = if matches!(cfg.spec, PortSpec::Ring { .. }) {
            HIGH_QUEUES
        } else {
            1
        };
        let (id, name, vdev) = match &cfg.spec {
            PortSpec::Ring { name, side } => {
                let key = format!("{name}:{side:?}");
                {
                    let mut open = OPEN_RINGS.lock().unwrap_or_else(|e| e.into_inner());
                    if open.contains(&key) {
                        return Err(PortError::InUse(cfg.spec.to_string()));
                    }
                    open.push(key.clone());
                }
                ring_key = Some(key);
                let mut rx = Vec::new();
                let mut tx = Vec::new();
                for q in 0..queues {
                    let suffix = if q == 0 { String::new() } else { q.to_string() };
                    let ab = ring_lookup_or_create(&format!("dp_{name}_ab{suffix}"))?;
                    let ba = ring_lookup_or_create(&format!("dp_{name}_ba{suffix}"))?;
                    let (r, t) = match side {
                        RingSide::A => (ba, ab),
                        RingSide::B => (ab, ba),
                    };
                    rx.push(r);
                    tx.push(t);
                }
                // The ethdev's own name is this process's port number, not the ring
                // name: unique on every open (a reopened side gets a fresh ethdev) and
                // short whatever the ring name (DPDK refuses long ethdev names).
                let pname = format!("dp_ring{seq}");
                let c = cstring(&pname);
                // SAFETY: valid name and `queues` ring pointers each way.
                let rc = unsafe {
                    sys::rte_eth_from_rings(
                        c.as_ptr(),
                        rx.as_ptr(),
                        queues.into(),
                        tx.as_ptr(),
                        queues.into(),
                        0,
                    )
                };
                if rc < 0 {
                    return Err(dpdk_err("rte_eth_from_rings", pname, rc));
                }
                (rc as u16, pname, None)
            }
            spec => {
                let (drv, args) = match spec {
                    PortSpec::Null { rx } => (
                        format!("net_null_dp{seq}"),
                        format!("size=64,copy=0,no-rx={}", if *rx { 0 } else { 1 }),
                    ),
                    PortSpec::Memif { socket, role } => {
                        if socket.contains(',') {
                            return Err(PortError::BadSpec {
                                spec: spec.to_string(),
                                why: "memif socket path must not contain ','",
                            });
                        }
                        // memif corrupts frames spanning more than two of its buffers:
                        // make one buffer hold the largest frame.
                        let bsize = max_frame.next_power_of_two().max(2048);
                        (
                            format!("net_memif{seq}"),
                            format!(
                                "role={},socket={socket},socket-abstract=no,bsize={bsize},rsize=11,id=0",
                                if *role == MemifRole::Server { "server" } else { "client" }
                            ),
                        )
                    }
                    PortSpec::AfPacket { iface } => {
                        if let Some(mtu) = iface_mtu(iface) {
                            max_frame = max_frame.min(mtu + 14);
                        }
                        // The kernel ring's frames must hold the largest frame plus the
                        // TPACKET header, and the mbufs must hold a whole ring frame
                        // (data room below follows `framesz`).
                        let framesz = af_packet_framesz(max_frame);
                        // TPACKET blocks are whole pages.
                        let blocksz = framesz.max(4096);
                        (
                            format!("net_af_packet{seq}"),
                            format!(
                                "iface={iface},qpairs=1,framesz={framesz},blocksz={blocksz},framecnt=2048"
                            ),
                        )
                    }
                    PortSpec::AfXdp { iface } => {
                        if let Some(mtu) = iface_mtu(iface) {
                            max_frame = max_frame.min(mtu + 14);
                        }
                        (
                            format!("net_af_xdp{seq}"),
                            format!("iface={iface},start_queue=0,queue_count=1"),
                        )
                    }
                    PortSpec::Pci { addr } => (addr.clone(), String::new()),
                    PortSpec::Ring { .. } => unreachable!("handled above"),
                };
                let cname = cstring(&drv);
                let mut vdev = None;
                if !matches!(spec, PortSpec::Pci { .. }) {
                    let cargs = cstring(&args);
                    // SAFETY: valid C strings; creates a virtual device after EAL init.
                    let rc = unsafe { sys::rte_vdev_init(cname.as_ptr(), cargs.as_ptr()) };
                    if rc < 0 {
                        return Err(dpdk_err("rte_vdev_init", format!("{drv} {args}"), rc));
                    }
                    vdev = Some(cname.clone());
                }
                let mut id: u16 = 0;
                // SAFETY: valid name and out pointer.
                let rc = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
                if rc < 0 {
                    return Err(dpdk_err("rte_eth_dev_get_port_by_name", drv, rc));
                }
                (id, drv, vdev)
            }
        };

        // SAFETY: zeroed POD out-parameter, valid port id.
        let mut info: sys::rte_eth_dev_info = Default::default();
        let rc = unsafe { sys::rte_eth_dev_info_get(id, &mut info) };
        if rc < 0 {
            return Err(dpdk_err("rte_eth_dev_info_get", &name, rc));
        }
        // The MTU we configure is bounded by what the device reports. Software PMDs
        // (ring, null, memif) carry larger frames than they report — memif carries
        // whatever fits its buffer size, which we set above — so for them the frame
        // size stays; for kernel and hardware ports it follows the MTU.
        let mut mtu = (max_frame - 14) as u32;
        if info.max_mtu > 0 && (info.max_mtu as u32) < mtu {
            mtu = info.max_mtu as u32;
        }
        if info.max_rx_pktlen > 18 && info.max_rx_pktlen - 18 < mtu {
            mtu = info.max_rx_pktlen - 18;
        }
        let software = matches!(
            cfg.spec,
            PortSpec::Ring { .. } | PortSpec::Null { .. } | PortSpec::Memif { .. }
        );
        if !software {
            max_frame = max_frame.min(mtu as usize + 14);
        }

        let pool_name = cstring(&format!("dp_pool{seq}"));
        let headroom = sys::RTE_PKTMBUF_HEADROOM as usize;
        let data_room = match &cfg.spec {
            // af_packet copies whole ring frames into mbufs.
            PortSpec::AfPacket { .. } => af_packet_framesz(max_frame) + headroom,
            // af_xdp's UMEM chunks are the mbufs: a power of two, at least 2 KiB.
            PortSpec::AfXdp { .. } => (max_frame + headroom).next_power_of_two().max(2048),
            _ => (max_frame + headroom).next_multiple_of(64),
        };
        // SAFETY: valid name; the pool lives as long as the port.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create(
                pool_name.as_ptr(),
                cfg.mbufs,
                256,
                0,
                data_room as u16,
                sys::SOCKET_ID_ANY,
            )
        };
        let pool =
            NonNull::new(pool).ok_or_else(|| dpdk_err("rte_pktmbuf_pool_create", &name, -1))?;

        let mut conf: sys::rte_eth_conf = Default::default();
        conf.rxmode.mtu = mtu;
        // SAFETY: valid port and configuration.
        let rc = unsafe { sys::rte_eth_dev_configure(id, queues, queues, &conf) };
        if rc < 0 {
            return Err(dpdk_err("rte_eth_dev_configure", &name, rc));
        }
        let mut rxd = cfg.rx_desc;
        let mut txd = cfg.tx_desc;
        // SAFETY: valid port; adjusts descriptor counts to the device limits.
        unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rxd, &mut txd) };
        for q in 0..queues {
            // SAFETY: valid port, a configured queue, the pool created above.
            let rc = unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    q,
                    rxd,
                    sys::SOCKET_ID_ANY as u32,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            if rc < 0 {
                return Err(dpdk_err("rte_eth_rx_queue_setup", &name, rc));
            }
            // SAFETY: valid port, a configured queue.
            let rc = unsafe {
                sys::rte_eth_tx_queue_setup(id, q, txd, sys::SOCKET_ID_ANY as u32, std::ptr::null())
            };
            if rc < 0 {
                return Err(dpdk_err("rte_eth_tx_queue_setup", &name, rc));
            }
        }
        // SAFETY: configured port.
        let rc = unsafe { sys::rte_eth_dev_start(id) };
        if rc < 0 {
            return Err(dpdk_err("rte_eth_dev_start", &name, rc));
        }
        // Not every PMD supports promiscuous mode; the transport filters by UDP port.
        // SAFETY: started port.
        unsafe { sys::rte_eth_promiscuous_enable(id) };
        let mut mac: sys::rte_ether_addr = Default::default();
        // SAFETY: started port, out parameter.
        unsafe { sys::rte_eth_macaddr_get(id, &mut mac) };
        Ok(Port {
            id,
            name,
            pool,
            max_frame,
            mac: mac.addr_bytes,
            vdev,
            ring: matches!(cfg.spec, PortSpec::Ring { .. }),
            ring_key,
            stash: [std::ptr::null_mut(); ALLOC_STASH],
            stash_n: 0,
            rx_desc: rxd,
            queues,
            gated: matches!(cfg.spec, PortSpec::Memif { .. }) && intr_gate::install(),
        })
    }

    /// DPDK port id.
    pub fn id(&self) -> u16 {
        self.id
    }
    /// Device name as DPDK knows it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Largest frame this port carries (Ethernet header to trailer).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }
    /// Frames the receive queue holds (its descriptors).
    pub fn rx_desc(&self) -> u16 {
        self.rx_desc
    }
    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Mbufs of the port's mempool not free (in rx/tx rings, batches, held frames, or
    /// leaked): a leak check, not a fast-path call.
    pub fn mbufs_in_use(&self) -> usize {
        // SAFETY: the pool lives as long as the port; the count only reads it.
        let n = unsafe { sys::rte_mempool_in_use_count(self.pool.as_ptr()) as usize };
        // The allocation stash is the port's own, not in use.
        n.saturating_sub(self.stash_n)
    }

    /// Whether the link is up (memif: the peer is connected).
    pub fn link_up(&self) -> bool {
        let mut link: sys::rte_eth_link = Default::default();
        // SAFETY: valid port, out parameter.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.id, &mut link) };
        // link_status is bit 17 of the packed bitfield word after link_speed.
        rc == 0 && link.link_status() != 0
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
                    self.pool.as_ptr(),
                    self.stash.as_mut_ptr(),
                    ALLOC_STASH as u32,
                )
            };
            if rc != 0 {
                // SAFETY: valid pool; returns null when empty.
                return NonNull::new(unsafe { sys::shim_pktmbuf_alloc(self.pool.as_ptr()) })
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
        let (id, ptrs) = (self.id, batch.ptrs.as_mut_ptr());
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
        if !self.gated {
            return f();
        }
        if !intr_gate::enter(self.id) {
            return 0;
        }
        let n = f();
        intr_gate::leave(self.id);
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
        let (id, ptrs, n) = (self.id, batch.ptrs.as_mut_ptr(), batch.n as u16);
        // SAFETY: the first n pointers are owned mbufs; the PMD takes the first `sent`.
        let sent = self.burst(|| unsafe { sys::shim_tx_burst(id, q, ptrs, n) }) as usize;
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
        unsafe { sys::rte_eth_stats_get(self.id, &mut s) };
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
        // memif's stop runs its disconnect here: not beside the interrupt thread's.
        let gate =
            self.gated && intr_gate::enter_waiting(self.id, std::time::Duration::from_secs(1));
        // SAFETY: the port is ours; stop and close release its queues. The mempool is
        // freed after the port no longer references its mbufs.
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
            let mut open = OPEN_RINGS.lock().unwrap_or_else(|e| e.into_inner());
            open.retain(|k| k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_port_specs() {
        assert_eq!(
            "ring".parse::<PortSpec>().unwrap(),
            PortSpec::Ring {
                name: "lo".into(),
                side: RingSide::A
            }
        );
        assert_eq!(
            "ring:x:b".parse::<PortSpec>().unwrap(),
            PortSpec::Ring {
                name: "x".into(),
                side: RingSide::B
            }
        );
        assert_eq!(
            "null".parse::<PortSpec>().unwrap(),
            PortSpec::Null { rx: false }
        );
        assert_eq!(
            "memif:/tmp/a.sock:server".parse::<PortSpec>().unwrap(),
            PortSpec::Memif {
                socket: "/tmp/a.sock".into(),
                role: MemifRole::Server
            }
        );
        assert_eq!(
            "af_packet:veth0".parse::<PortSpec>().unwrap(),
            PortSpec::AfPacket {
                iface: "veth0".into()
            }
        );
        assert_eq!(
            "0000:3b:00.0".parse::<PortSpec>().unwrap(),
            PortSpec::Pci {
                addr: "0000:3b:00.0".into()
            }
        );
        for bad in [
            "",
            "ring:x",
            "ring:x:c",
            "memif:/x",
            "memif:/x:boss",
            "tap0",
            "null:tx",
        ] {
            assert!(bad.parse::<PortSpec>().is_err(), "{bad:?} accepted");
        }
        for s in ["ring:lo:a", "null:rx", "memif:/tmp/s:client", "af_xdp:v1"] {
            assert_eq!(s.parse::<PortSpec>().unwrap().to_string(), s);
        }
    }
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
