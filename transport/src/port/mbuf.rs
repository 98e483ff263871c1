//! [`Mbuf`]: one owned DPDK packet buffer, and the bytes of its frame.
//!
//! Frames are written single-segment: a port's mempool data room is sized for its
//! largest frame. On ports that copy frames as they send them, a finished frame can
//! become a chain of three whose middle segment is a payload in endpoint memory
//! ([`Mbuf::set_len_external`]); received frames of more than one segment are refused.
//! An `Mbuf` goes back to its mempool when dropped.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use dpdk_sys as sys;

use crate::mem::EndpointMemory;

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

    /// Sets the frame's length to `len`, its bytes `[at, at + n)` being the `n` bytes
    /// at offset `off` of `mem` (left unwritten in the room): the frame becomes a chain
    /// of three mbufs whose middle one is attached to that memory, holding `mem` alive
    /// until the PMD frees it. Only for ports whose transmit copies the frame
    /// ([`Port::tx_external`](super::Port::tx_external)). When the range is not
    /// inside `mem`, the frame does not fit the room, or the pool has no two mbufs to
    /// spare, `mem` is handed back unused (`Err`) and nothing changed.
    pub fn set_len_external(
        &mut self,
        len: usize,
        at: usize,
        mem: Arc<EndpointMemory>,
        off: usize,
        n: usize,
    ) -> Result<(), Arc<EndpointMemory>> {
        let (Ok(len16), Ok(at16), Ok(n16)) =
            (u16::try_from(len), u16::try_from(at), u16::try_from(n))
        else {
            return Err(mem);
        };
        let Ok(ptr) = mem.device_range(off, n) else {
            return Err(mem);
        };
        let opaque = Arc::into_raw(mem) as *mut c_void;
        // SAFETY: a valid mbuf we own; `ptr` points at `n` bytes of the region `opaque`
        // keeps alive, which the PMD only reads; the shim checks the ranges against the
        // room and, on success, hands `opaque` to `release_payload` exactly once.
        let rc = unsafe {
            sys::shim_pktmbuf_chain_external(
                self.0.as_ptr(),
                len16,
                at16,
                ptr.as_ptr(),
                n16,
                Some(release_payload),
                opaque,
            )
        };
        if rc != 0 {
            // SAFETY: the shim did not take `opaque`: it is still our `Arc`.
            return Err(unsafe { Arc::from_raw(opaque as *const EndpointMemory) });
        }
        Ok(())
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

/// The free callback of a payload attached by [`Mbuf::set_len_external`]: DPDK calls it
/// once, when the mbuf holding the payload is freed (by the PMD after its copy, or by
/// whoever drops the frame unsent); it releases the endpoint memory it kept alive.
unsafe extern "C" fn release_payload(_addr: *mut c_void, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Arc` that `set_len_external` turned into a raw pointer
    // for this one attachment (its shared-info reference count is 1).
    drop(unsafe { Arc::from_raw(opaque as *const EndpointMemory) });
}
