//! Bursts of owned mbufs: [`RxBatch`] (what one receive burst brought) and [`TxBatch`]
//! (what waits to be transmitted), each up to [`BURST`] frames, in fixed arrays so the
//! burst path never allocates.

use std::ptr::NonNull;

use dpdk_sys as sys;

use super::mbuf::Mbuf;
use super::BURST;
use super::PREFETCH_LINES;
use crate::prefetch::prefetch_lines;

/// A received burst; iterating hands out owned mbufs, dropping frees the rest.
pub struct RxBatch {
    pub(super) ptrs: [*mut sys::rte_mbuf; BURST],
    pub(super) n: usize,
    pub(super) next: usize,
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
    pub(super) ptrs: [*mut sys::rte_mbuf; BURST],
    pub(super) n: usize,
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
// SAFETY: as for TxBatch, holds owned mbufs only.
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

    /// Hands the frames, in order, to `f` until it gives one back (that one and the
    /// rest stay queued); returns how many it took.
    pub fn drain_into(&mut self, mut f: impl FnMut(Mbuf) -> Result<(), Mbuf>) -> usize {
        let mut i = 0;
        while i < self.n {
            // SAFETY: the first n pointers are owned, non-null mbufs.
            let m = Mbuf(unsafe { NonNull::new_unchecked(self.ptrs[i]) });
            if let Err(m) = f(m) {
                self.ptrs[i] = m.into_raw();
                break;
            }
            i += 1;
        }
        self.ptrs.copy_within(i..self.n, 0);
        self.n -= i;
        i
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
