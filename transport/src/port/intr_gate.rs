//! The interrupt gate: keeps memif's control-channel handling, which runs on DPDK's
//! interrupt thread, from running while a worker is inside a memif rx/tx burst.
//!
//! DPDK 22.11's memif handles a peer's departure (its control socket closes, or it
//! sends a disconnect) on the EAL interrupt thread: `memif_disconnect` clears the
//! "connected" flag and then unmaps the shared regions the rings and buffers live in.
//! A burst on another thread that checked the flag just before touches unmapped memory
//! and the process dies with SIGSEGV (seen as a server crashing about once in 20
//! client exits). The driver has no lock for this; the gate supplies one from outside.
//!
//! The interrupt thread runs one callback at a time. The gate registers a callback of
//! its own on an always-readable eventfd, so the thread enters it on every turn of its
//! loop, and *parks* there: while it is parked no other interrupt callback — memif's
//! included — can run, and bursts are allowed. Every [`PARK`] it leaves: it waits,
//! the gate still open, for a moment no burst is in progress, closes the gate there,
//! and returns to run whatever else is pending (a disconnect unmapping regions, a
//! connect handshake, alarms); it reopens the gate when it enters the callback again.
//! A burst that finds the gate closed does nothing (0 frames) and is retried on the
//! next turn, so a burst and the interrupt thread's other callbacks never overlap.
//!
//! The gate is closed for as short a time as possible because a closed gate stops
//! every memif port of the process. It used to close first and then wait for the
//! burst in progress: a large burst (tens of jumbo frames) or a preempted worker kept
//! it closed for tens of microseconds to milliseconds every [`PARK`] (measured in a
//! 64 KiB write_bw server: 471 of ~1000 closures 10-100 us, 42 of 1-10 ms), long
//! enough for the peer's retransmission timer to fire; now nearly all last under 10 us.
//!
//! A burst marks its port busy and then checks the gate; the interrupt thread closes
//! the gate and then checks every port's mark (Dekker's pattern). The fence both sides
//! need is paid by the interrupt thread alone, with `membarrier` (an asymmetric fence,
//! as in liburcu), so a burst pays two plain stores and a load — a full fence per burst
//! where `membarrier` is missing. Other PMDs are not gated. Interrupt handling —
//! memif's, alarms — waits up to [`PARK`].

use std::ffi::c_void;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering::*};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use dpdk_sys as sys;

/// Longest the interrupt thread stays parked before it runs its other callbacks.
pub const PARK: Duration = Duration::from_millis(1);

/// Ports that can be gated (DPDK port ids below this; Debian's build has 32).
const SLOTS: usize = 64;

/// Per port: a burst is in progress (written only by the port's owner thread).
static BUSY: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// The interrupt thread is out of the gate's callback (or has not entered it yet):
/// bursts must not start.
static CLOSED: AtomicBool = AtomicBool::new(true);
/// Where the parked interrupt thread waits (nobody wakes it: it waits out [`PARK`]).
static PARKING: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
/// Whether the gate is installed (once per process; `false` if registration failed).
static INSTALLED: OnceLock<bool> = OnceLock::new();
/// Whether the process-wide barrier (`membarrier`) is available: then the interrupt
/// thread pays the fence of both sides when it closes the gate, and a burst's entry
/// needs none (plain stores and loads); without it each entry pays a full fence.
static HEAVY_FENCE: AtomicBool = AtomicBool::new(false);

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> bool {
    // SAFETY: plain syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Installs the gate (once per process, after the EAL is up); returns whether it is
/// in force. Without it (registration refused), gated bursts are not guarded.
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| {
        HEAVY_FENCE.store(
            membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED),
            Relaxed,
        );
        // SAFETY: plain syscall; the descriptor is kept for the process.
        let fd = unsafe { libc::eventfd(1, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            eprintln!("deposit: no eventfd for the interrupt gate; memif bursts unguarded");
            return false;
        }
        // SAFETY: `park` is a valid callback for the life of the process and takes no
        // argument; the handle the shim allocates is never freed.
        let rc = unsafe { sys::shim_intr_register_ext(fd, Some(park), std::ptr::null_mut()) };
        if rc != 0 {
            eprintln!("deposit: interrupt gate not registered ({rc}); memif bursts unguarded");
            // SAFETY: our descriptor, registered nowhere.
            unsafe { libc::close(fd) };
            return false;
        }
        true
    })
}

/// The gate's callback, on the interrupt thread.
extern "C" fn park(_arg: *mut c_void) {
    // No other interrupt callback runs while this one does: bursts may run.
    CLOSED.store(false, Release);
    let (m, cv) = &PARKING;
    // Futex waits (not pthread cancellation points: EAL clean-up cancels this thread
    // in its epoll wait, never here).
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout(g, PARK);
    // Close only at a moment no burst is in progress: wait for one with the gate still
    // open (a worker inside a long burst may be preempted: the others go on meanwhile),
    // then close and check again (Dekker's pattern, both fences here: after the
    // barrier, a burst that had not seen the gate closed has made its BUSY flag
    // visible). A burst that slipped in between reopens the gate and the wait resumes.
    // Either way the gate is closed only from here to this callback's next entry.
    // (After CLOSE_TRIES such slips, bursts back to back, it closes and waits.)
    for tries in 1.. {
        wait_idle();
        CLOSED.store(true, Relaxed);
        if !(HEAVY_FENCE.load(Relaxed) && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) {
            fence(SeqCst);
        }
        if tries >= CLOSE_TRIES {
            wait_idle();
        }
        if BUSY.iter().all(|b| !b.load(Acquire)) {
            return;
        }
        CLOSED.store(false, Release);
    }
}

/// Attempts of [`park`] to close the gate between bursts before it closes during one.
const CLOSE_TRIES: u32 = 64;

/// Waits until no port's burst is in progress: a short spin (a small burst), then
/// yielding the core (a large memif burst copies tens of jumbo frames, tens of
/// microseconds, and on a machine with fewer cores than busy threads the worker inside
/// it may be preempted).
fn wait_idle() {
    let mut spins = 0u32;
    for busy in &BUSY {
        while busy.load(Acquire) {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Spins of [`wait_idle`] before it yields (a few hundred nanoseconds: a small burst).
const SPINS_BEFORE_YIELD: u32 = 256;

/// Enters a guarded burst on `port`: `false` (do not burst) while the interrupt thread
/// runs its other callbacks. Every `true` is paired with [`leave`].
#[inline]
pub fn enter(port: u16) -> bool {
    let busy = &BUSY[usize::from(port) % SLOTS];
    busy.store(true, Relaxed);
    if HEAVY_FENCE.load(Relaxed) {
        // The interrupt thread's membarrier orders this store before the load below.
        compiler_fence(SeqCst);
    } else {
        fence(SeqCst);
    }
    if CLOSED.load(Acquire) {
        busy.store(false, Release);
        return false;
    }
    true
}

/// Leaves a guarded burst on `port` (what the burst touched is done before the flag
/// clears).
#[inline]
pub fn leave(port: u16) {
    BUSY[usize::from(port) % SLOTS].store(false, Release);
}

/// Enters the gate on `port`, waiting (bounded by `timeout`) while it is closed; for
/// the port's stop and close, which run memif's disconnect on this thread. Returns
/// whether it entered (then pair it with [`leave`]).
pub fn enter_waiting(port: u16, timeout: Duration) -> bool {
    let start = std::time::Instant::now();
    while !enter(port) {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::yield_now();
    }
    true
}
