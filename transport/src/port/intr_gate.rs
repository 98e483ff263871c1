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
//! included — can run, and bursts are allowed. Every [`PARK`] it leaves: it closes
//! the gate, waits until no burst is in progress, and returns to run whatever else is
//! pending (a disconnect unmapping regions, a connect handshake, alarms); it reopens
//! the gate when it enters the callback again. A burst that finds the gate closed does
//! nothing (0 frames) and is retried on the next turn. The two atomics follow Dekker's
//! pattern (sequentially consistent on both sides), so a burst and the interrupt
//! thread's other callbacks never overlap.
//!
//! Cost: two uncontended atomic operations per burst on a memif port (other ports are
//! not gated), and interrupt handling — memif's, alarms — delayed by up to [`PARK`].

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use dpdk_sys as sys;

/// Longest the interrupt thread stays parked before it runs its other callbacks.
pub const PARK: Duration = Duration::from_millis(1);

/// Bursts in progress.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The interrupt thread is out of the gate's callback (or has not entered it yet):
/// bursts must not start.
static CLOSED: AtomicBool = AtomicBool::new(true);
/// Where the parked interrupt thread waits (nobody wakes it: it waits out [`PARK`]).
static PARKING: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
/// Whether the gate is installed (once per process; `false` if registration failed).
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Installs the gate (once per process, after the EAL is up); returns whether it is
/// in force. Without it (registration refused), gated bursts are not guarded.
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| {
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
    CLOSED.store(false, SeqCst);
    let (m, cv) = &PARKING;
    // Futex waits (not pthread cancellation points: EAL clean-up cancels this thread
    // in its epoll wait, never here).
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout(g, PARK);
    CLOSED.store(true, SeqCst);
    while ACTIVE.load(SeqCst) != 0 {
        std::hint::spin_loop();
    }
}

/// Enters a guarded burst: `false` (do not burst) while the interrupt thread runs its
/// other callbacks. Every `true` is paired with [`leave`].
#[inline]
pub fn enter() -> bool {
    ACTIVE.fetch_add(1, SeqCst);
    if CLOSED.load(SeqCst) {
        ACTIVE.fetch_sub(1, SeqCst);
        return false;
    }
    true
}

/// Leaves a guarded burst.
#[inline]
pub fn leave() {
    ACTIVE.fetch_sub(1, SeqCst);
}

/// Enters the gate, waiting (bounded by `timeout`) while it is closed; for the
/// port's stop and close, which run memif's disconnect on this thread. Returns
/// whether it entered (then pair it with [`leave`]).
pub fn enter_waiting(timeout: Duration) -> bool {
    let start = std::time::Instant::now();
    while !enter() {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::yield_now();
    }
    true
}
