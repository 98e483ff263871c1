//! The fast path's clock: the time stamp counter, and its rate as the EAL measured it.

use super::eal::eal_info;

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
        dpdk_sys::shim_rdtsc()
    }
}

/// TSC ticks per second, the unit of event timestamps (valid once a device is open: DPDK
/// measures it when its EAL starts).
pub fn tsc_hz() -> u64 {
    eal_info().map(|i| i.tsc_hz).unwrap_or(1_000_000_000)
}
