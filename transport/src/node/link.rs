//! Where a node's frames go: the driver's transmit side, seen from the node.
//!
//! The node writes each frame once, in place, into a buffer the link hands it (an mbuf
//! for the DPDK driver, a byte vector for a simulated link), then queues it on the
//! normal or the high-priority queue. The link decides when queued frames reach the
//! wire; the node only asks whether there is room.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::mem::EndpointMemory;

/// A payload a frame takes from endpoint memory by reference instead of a copy
/// ([`LinkCaps::external`](super::LinkCaps)): bytes `[at, at + len)` of the frame are
/// bytes `[off, off + len)` of `mem` (checked to lie inside it when made), left
/// unwritten in the frame's buffer.
pub struct External {
    pub mem: Arc<EndpointMemory>,
    pub off: usize,
    pub len: usize,
    /// Byte offset in the frame.
    pub at: usize,
}

impl External {
    /// The payload `[off, off + len)` of `mem`, at byte `at` of the frame; `None` when
    /// it does not lie inside `mem`, or when `mem` is a registered application buffer:
    /// the frame's `Arc` keeps our own allocations alive until the port is done with
    /// them, but not a buffer the application may free once its endpoint and
    /// connections are gone (while a frame still waits in a full transmit queue).
    pub fn new(mem: &Arc<EndpointMemory>, off: usize, len: usize, at: usize) -> Option<Self> {
        if mem.backing() == crate::mem::Backing::Registered {
            return None;
        }
        mem.device_range(off, len).ok()?;
        Some(External {
            mem: Arc::clone(mem),
            off,
            len,
            at,
        })
    }

    /// CRC32C over the payload, continuing from `crc`.
    pub fn crc32c_append(&self, crc: u32) -> u32 {
        self.mem
            .crc32c_append(crc, self.off, self.len)
            .expect("checked when made")
    }

    /// Copies the payload into its place in `frame` (the frame's room).
    pub fn copy_into(&self, frame: &mut [u8]) {
        let dst = &mut frame[self.at..self.at + self.len];
        self.mem.read(self.off, dst).expect("checked when made");
    }
}

/// A buffer one frame is written into.
pub trait FrameBuf {
    /// The writable room (at least the link's largest frame).
    fn room_mut(&mut self) -> &mut [u8];
    /// Sets the frame's length once written.
    fn set_len(&mut self, len: usize);
    /// Sets the frame's length once written, its payload `ext` left unwritten: a
    /// buffer that can carry bytes by reference takes them so; this default copies
    /// them in.
    fn set_len_external(&mut self, len: usize, ext: External) {
        ext.copy_into(self.room_mut());
        self.set_len(len);
    }
}

/// How a node's frames leave its buffers: untagged, or with an 802.1Q tag in front
/// (`NodeConfig::vlan`). A frame is written untagged at [`Tagging::room`] and finished
/// with [`Tagging::done`] (or [`Tagging::done_external`]), which puts the tag in.
///
/// The node counts a frame's size as over IPv4 (`LinkCaps::max_frame` less the tag,
/// and less [`crate::wire::ipv6::IPV6_EXTRA`] on an IPv6 node, so that a frame holds as many
/// cells whatever its underlay); the room it writes in holds the longer IPv6 underlay
/// too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tagging {
    vlan: Option<u16>,
    /// Bytes the underlay takes beyond IPv4's (IPv6: 20).
    extra: usize,
}

impl Tagging {
    /// The framing of a node of configuration `cfg` (its VLAN, its address family).
    #[inline]
    pub fn of(cfg: &super::NodeConfig) -> Tagging {
        let extra = if cfg.local.ip.is_ipv6() {
            crate::wire::ipv6::IPV6_EXTRA
        } else {
            0
        };
        Tagging {
            vlan: cfg.vlan,
            extra,
        }
    }

    /// Where the untagged frame of at most `max` bytes (counted as over IPv4) is
    /// written.
    #[inline]
    pub fn room<F: FrameBuf>(self, m: &mut F, max: usize) -> &mut [u8] {
        let off = self.len();
        &mut m.room_mut()[off..off + max + self.extra]
    }

    /// Bytes the tag takes (0 untagged).
    #[inline]
    pub fn len(self) -> usize {
        if self.vlan.is_some() {
            crate::wire::vlan::VLAN_LEN
        } else {
            0
        }
    }

    /// The frame written at [`Tagging::room`] is `len` bytes: tagged with priority
    /// `pcp` (when on a VLAN), its length set.
    #[inline]
    pub fn done<F: FrameBuf>(self, m: &mut F, len: usize, pcp: u8) {
        let tag = self.put_tag(m, pcp);
        m.set_len(len + tag);
    }

    /// [`Tagging::done`] for a frame whose payload `ext` is by reference.
    #[inline]
    pub fn done_external<F: FrameBuf>(self, m: &mut F, len: usize, mut ext: External, pcp: u8) {
        let tag = self.put_tag(m, pcp);
        ext.at += tag;
        m.set_len_external(len + tag, ext);
    }

    /// Puts the tag in front of the frame written at [`Tagging::room`] (nothing when
    /// untagged); returns the bytes it added.
    #[inline]
    fn put_tag<F: FrameBuf>(self, m: &mut F, pcp: u8) -> usize {
        if let Some(vid) = self.vlan {
            crate::wire::vlan::insert(m.room_mut(), crate::wire::vlan::tci(vid, pcp));
        }
        self.len()
    }
}

/// The transmit side of a driver.
pub trait Link {
    type Frame: FrameBuf;
    /// A buffer for one frame; `None` when the pool is empty.
    fn alloc(&mut self) -> Option<Self::Frame>;
    /// Queues a finished frame on the high-priority queue or the normal one; false
    /// when that queue is full (the frame is dropped).
    fn push(&mut self, frame: Self::Frame, high: bool) -> bool;
    /// Whether the queue takes no more frames now, after handing what it holds to the
    /// wire.
    fn full(&mut self, high: bool) -> bool;
    /// Hands the queued frames of one queue to the wire now.
    fn flush(&mut self, high: bool);
    /// Whether an urgent frame arrived meanwhile (the node then cuts bulk sending short
    /// so that the driver takes it at once).
    fn urgent(&mut self) -> bool {
        false
    }
}

impl FrameBuf for Vec<u8> {
    fn room_mut(&mut self) -> &mut [u8] {
        self
    }
    fn set_len(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// A link that keeps the frames as byte vectors, in order (high-priority frames in
/// their own queue): what a simulated link, a fuzzer or a test reads a node's output
/// from. Its receive side ([`Io`](super::Io): `rx`, taken a burst at a time) is where
/// `sim` puts the frames that arrive for the node, so that the node's own
/// [`Node::turn`](super::Node::turn) takes them as the DPDK worker's does.
#[derive(Debug, Clone)]
pub struct FrameQueue {
    max_frame: usize,
    /// Most frames held per queue (`full` beyond it).
    limit: usize,
    pub frames: VecDeque<Vec<u8>>,
    pub high: VecDeque<Vec<u8>>,
    /// Frames arrived for the node and not yet received, oldest first.
    pub rx: VecDeque<Vec<u8>>,
    /// The receive burst being taken.
    burst: VecDeque<Vec<u8>>,
}

impl FrameQueue {
    /// A queue of frames of up to `max_frame` bytes, at most `limit` of each class.
    pub fn new(max_frame: usize, limit: usize) -> FrameQueue {
        FrameQueue {
            max_frame,
            limit,
            frames: VecDeque::new(),
            high: VecDeque::new(),
            rx: VecDeque::new(),
            burst: VecDeque::new(),
        }
    }

    /// The next frame, high-priority ones first.
    pub fn pop(&mut self) -> Option<Vec<u8>> {
        self.high.pop_front().or_else(|| self.frames.pop_front())
    }

    pub fn len(&self) -> usize {
        self.frames.len() + self.high.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether frames arrived that the node has not taken yet.
    pub fn rx_pending(&self) -> bool {
        !(self.rx.is_empty() && self.burst.is_empty())
    }
}

impl Link for FrameQueue {
    type Frame = Vec<u8>;

    fn alloc(&mut self) -> Option<Vec<u8>> {
        Some(vec![0; self.max_frame])
    }

    fn push(&mut self, frame: Vec<u8>, high: bool) -> bool {
        if self.full(high) {
            return false;
        }
        if high {
            self.high.push_back(frame);
        } else {
            self.frames.push_back(frame);
        }
        true
    }

    fn full(&mut self, high: bool) -> bool {
        let q = if high { &self.high } else { &self.frames };
        q.len() >= self.limit
    }

    fn flush(&mut self, _high: bool) {}
}

impl super::Io for FrameQueue {
    type Rx = Vec<u8>;

    fn rx_bulk(&mut self) -> usize {
        if !self.burst.is_empty() {
            return 1;
        }
        let n = self.rx.len().min(super::RX_BURST);
        self.burst.extend(self.rx.drain(..n));
        n
    }

    fn next_bulk(&mut self) -> Option<Vec<u8>> {
        self.burst.pop_front()
    }

    /// The frames stay queued for whoever carries them (`sim`, a test).
    fn transmit(&mut self) -> (usize, bool) {
        (0, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_goes_by_reference_from_our_memory_only_and_copies_in_place() {
        let own = Arc::new(EndpointMemory::alloc_ordinary(8192).unwrap());
        own.write(100, &[7; 3000]).unwrap();
        let e = External::new(&own, 100, 3000, 60).expect("our own allocation");
        assert!(
            External::new(&own, 8000, 3000, 60).is_none(),
            "past the region"
        );
        // What a link without references does with it: the bytes land at `at`.
        let mut frame = vec![0u8; 4000];
        e.copy_into(&mut frame);
        assert!(frame[60..3060].iter().all(|&b| b == 7));
        assert!(frame[..60].iter().chain(&frame[3060..]).all(|&b| b == 0));
        assert_eq!(
            e.crc32c_append(0),
            crate::wire::crc32c(&frame[60..3060]),
            "the payload's CRC is read from the memory"
        );
        // A registered application buffer: no reference outlives the application's
        // hold on it, so its payloads are copied.
        let layout = std::alloc::Layout::from_size_align(8192, 4096).unwrap();
        // SAFETY: a fresh allocation of the layout, freed below after its last use.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        // SAFETY: `buf` is valid for 8192 bytes until it is freed below, after `reg`.
        let reg = Arc::new(unsafe { EndpointMemory::register(buf, 8192) }.unwrap());
        assert!(External::new(&reg, 0, 4096, 60).is_none());
        drop(reg);
        // SAFETY: allocated above with this layout; the region over it is dropped.
        unsafe { std::alloc::dealloc(buf, layout) };
    }
}
