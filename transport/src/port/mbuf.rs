//! [`Mbuf`]: one owned, single-segment DPDK packet buffer, and the bytes of its frame.
//!
//! Frames are always single-segment: a port's mempool data room is sized for its
//! largest frame. An `Mbuf` goes back to its mempool when dropped.

use std::ptr::NonNull;

use dpdk_sys as sys;

/// An owned single-segment mbuf.
pub struct Mbuf(pub(super) NonNull<sys::rte_mbuf>);

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

    /// Hands the mbuf over as a raw pointer (to a [`TxBatch`](super::TxBatch), then the
    /// PMD), which then owns it.
    #[inline]
    pub(super) fn into_raw(self) -> *mut sys::rte_mbuf {
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
