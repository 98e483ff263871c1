//! Cache prefetch hints: on the burst path, mbuf headers and frame starts last written
//! by another core; in the node, the state of the connection a frame's next section
//! names. Fetched ahead rather than missed one by one. No DPDK.

/// Starts loading the cache line at `p` (a hint: no fault, whatever `p` is).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading `n` cache lines from `p`, for writing when `write` (a hint, as
/// [`prefetch`]).
#[inline(always)]
pub(crate) fn prefetch_lines(p: *const u8, n: usize, write: bool) {
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
