//! Where the calling thread stands: an lcore id for DPDK, a CPU for benchmarks.

use dpdk_sys as sys;

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

/// [`register_thread`] unless `last` names the calling thread already (the last one a
/// caller registered): a thread-local look-up goes through `__tls_get_addr` in a
/// library loaded at run time, as by the libfabric provider (~1 % of a small-message
/// ping-pong, once a turn); `pthread_self` does not.
#[inline]
pub fn register_thread_at(last: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering;
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if last.load(Ordering::Relaxed) != me {
        register_thread();
        last.store(me, Ordering::Relaxed);
    }
}

/// The CPUs the calling thread may run on (its affinity set; empty if it cannot be
/// read). A process bound by its launcher (`mpirun` binds each rank to a core) sees
/// only its own.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); sched_getaffinity on
    // pid 0 writes the calling thread's mask through a valid pointer of the size given;
    // CPU_ISSET indexes within CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to the `n`th CPU of its current affinity set, when it has
/// more than `n` (benchmarks: two spinning threads must not share a CPU). Returns the
/// CPU chosen, or `None` when nothing was changed.
pub fn pin_current_thread_to_nth_cpu(n: usize) -> Option<usize> {
    let cpu = *allowed_cpus().get(n)?;
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); sched_setaffinity on
    // pid 0 reads the mask through a valid pointer of the size given; CPU_SET indexes
    // within CPU_SETSIZE.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        (libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0)
            .then_some(cpu)
    }
}
