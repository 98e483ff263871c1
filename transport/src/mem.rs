//! Endpoint memory: the regions that remote operations deposit into (page-aligned
//! allocations, or application buffers registered wherever they are).
//!
//! An [`EndpointMemory`] owns (or, when registered, borrows) one contiguous region and
//! knows how to give it back. It is allocated from hugepages when the system has some
//! reserved (through `hugepage-rs`), otherwise from ordinary 4 KiB pages with a single
//! warning per process that says how to reserve hugepages; an application buffer can also
//! be registered as it is.
//!
//! The network (a worker core) writes this memory while the application may be reading
//! it, so this module never forms a `&[u8]` or `&mut [u8]` over the region: every access
//! is a bounds-checked raw copy, and the polling loads are volatile. This is the only
//! module that dereferences endpoint memory; everything else goes through its safe
//! methods, which check every range against the region they borrow.
//!
//! Two ways in, one per side of the deposit:
//! - the application addresses the region by offset ([`EndpointMemory::read`],
//!   [`EndpointMemory::write`], the volatile loads and stores);
//! - the network addresses it by [`HostAddr`], the host address that the endpoint page
//!   maps hold and the worker's TLB caches ([`EndpointMemory::write_at`] and its
//!   siblings, the per-message fast path of `oplogic`). A `HostAddr` is only a number: it
//!   grants no access, so it may outlive its region or be sent anywhere; an access
//!   borrows the region and checks the address lies inside it.
//!
//! What it must never do: hand out a reference into the region, dereference an address
//! it has not checked against a region it borrows, or free a registered buffer.

use std::alloc::Layout;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Once;

/// Granularity of every region: the ordinary page size.
const SMALL_PAGE: usize = 4096;
/// Hugepage size assumed when rounding a request for `hugepage-rs`.
const HUGE_PAGE: usize = 2 << 20;

/// Where an endpoint's memory came from, which also says how it is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Hugepages from `hugepage-rs` (anonymous `MAP_HUGETLB` mapping).
    HugePages,
    /// Ordinary 4 KiB pages from the global allocator (the fallback).
    OrdinaryPages,
    /// An application buffer the application registered
    /// (`deposit::Device::register_endpoint`); never freed here.
    Registered,
}

/// Errors of endpoint memory allocation, registration and access.
#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// A region of zero bytes was asked for or registered.
    #[error("endpoint memory of zero bytes")]
    ZeroLength,
    /// The length cannot be rounded up to whole pages without overflowing.
    #[error("endpoint memory of {len} bytes is too large")]
    TooLarge {
        /// The requested length.
        len: usize,
    },
    /// Neither hugepages nor ordinary pages could be had.
    #[error("out of memory allocating {len} bytes of endpoint memory")]
    OutOfMemory {
        /// The rounded length that could not be allocated.
        len: usize,
    },
    /// A registered buffer's pointer is null.
    #[error("registered buffer pointer is null")]
    Null,
    /// An access `[off, off + len)` does not fit in the region of `size` bytes.
    #[error("access of {len} bytes at offset {off:#x} outside endpoint memory of {size} bytes")]
    OutOfBounds {
        /// Offset of the access.
        off: usize,
        /// Length of the access.
        len: usize,
        /// Size of the region.
        size: usize,
    },
    /// A word access at an offset whose host address is not a multiple of the word
    /// size (an offset that is not, or any in a registered buffer that is not aligned).
    #[error("{align}-byte access at unaligned offset {off:#x}")]
    Unaligned {
        /// Offset of the access.
        off: usize,
        /// Required alignment.
        align: usize,
    },
}

/// A contiguous region of endpoint memory: page-aligned when allocated here, anywhere
/// when an application buffer is registered.
///
/// `Send + Sync`: all access goes through raw, bounds-checked copies, so sharing it
/// between the application and the workers is as safe as the hardware it models; what a
/// concurrent reader sees of a deposit in progress is decided by the deposit order (the
/// last byte is written last), not by Rust references.
pub struct EndpointMemory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// The layout given to the allocator (`HugePages`, `OrdinaryPages`); unused when
    /// `Registered`.
    layout: Layout,
}

// SAFETY: `EndpointMemory` is an owned (or exclusively registered) raw region; it never
// hands out references into it, only raw copies and volatile loads, and freeing happens
// once in `Drop`. Moving it to, or using it from, another thread is therefore sound.
unsafe impl Send for EndpointMemory {}
// SAFETY: see `Send`; every `&self` method accesses the region through raw pointers only,
// and races on the bytes themselves are the deposit model's, not a Rust aliasing issue.
unsafe impl Sync for EndpointMemory {}

/// The host address of a byte of endpoint memory, as an endpoint's page map holds it and
/// the worker's TLB caches it.
///
/// Only a number: no method reads or writes through it, and nothing keeps its region
/// alive, so it may be copied, cached, sent to another thread and outlive the region.
/// Access goes through the region, borrowed: [`EndpointMemory::write_at`],
/// [`EndpointMemory::read_at`], [`EndpointMemory::store_u8_at`] and
/// [`EndpointMemory::store_u64_at`] check that the bytes lie inside that region and then
/// use the region's own pointer, so a stale or foreign address is refused, never
/// dereferenced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HostAddr(*mut u8);

// SAFETY: a `HostAddr` is an address, never dereferenced as such: every access computes
// its offset from the region it borrows and goes through that region's pointer after a
// bounds check. Moving the number to another thread is therefore sound.
unsafe impl Send for HostAddr {}
// SAFETY: see `Send`; `&HostAddr` gives nothing but the number.
unsafe impl Sync for HostAddr {}

impl HostAddr {
    /// An address in no region: every access through it is refused (a placeholder for
    /// empty cache slots).
    pub const NULL: HostAddr = HostAddr(ptr::null_mut());

    /// The address `n` bytes further on (wrapping; still only a number).
    #[inline]
    #[must_use]
    pub fn wrapping_add(self, n: usize) -> HostAddr {
        HostAddr(self.0.wrapping_add(n))
    }
}

/// One warning per process when hugepages are asked for and none are available.
static HUGEPAGE_WARNING: Once = Once::new();

impl EndpointMemory {
    /// Allocates a page-aligned zeroed region of at least `len` bytes (rounded up to
    /// 4 KiB), from hugepages when enough are reserved and free, otherwise from ordinary
    /// pages after printing one warning per process on stderr.
    pub fn alloc(len: usize) -> Result<Self, MemError> {
        let rounded = round_up(len, SMALL_PAGE)?;
        if let Some(mem) = Self::alloc_huge(rounded) {
            return Ok(mem);
        }
        HUGEPAGE_WARNING.call_once(|| {
            eprintln!(
                "deposit: warning: hugepages are not reserved (or too few are free); endpoint \
                 memory falls back to ordinary 4 KiB pages, which costs TLB misses. Reserve \
                 some with `sudo scripts/hugepages.sh` (or write a count to \
                 /proc/sys/vm/nr_hugepages)."
            );
        });
        Self::alloc_ordinary(len)
    }

    /// Allocates a page-aligned zeroed region of at least `len` bytes (rounded up to
    /// 4 KiB) from ordinary pages, without trying hugepages.
    pub fn alloc_ordinary(len: usize) -> Result<Self, MemError> {
        let rounded = round_up(len, SMALL_PAGE)?;
        let layout =
            Layout::from_size_align(rounded, SMALL_PAGE).map_err(|_| MemError::TooLarge { len })?;
        // SAFETY: `layout` has a non-zero size (`round_up` refuses zero).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(MemError::OutOfMemory { len: rounded })?;
        Ok(Self {
            ptr,
            len: rounded,
            backing: Backing::OrdinaryPages,
            layout,
        })
    }

    /// Registers an application buffer of `len` bytes at `ptr` as endpoint memory.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as the
    /// returned value (and any clone of an `Arc` holding it) exists, and the caller must
    /// not free it meanwhile. The caller's own accesses race with deposits exactly as
    /// they would with a NIC's DMA.
    pub unsafe fn register(ptr: *mut u8, len: usize) -> Result<Self, MemError> {
        if len == 0 {
            return Err(MemError::ZeroLength);
        }
        let ptr = NonNull::new(ptr).ok_or(MemError::Null)?;
        Ok(Self {
            ptr,
            len,
            backing: Backing::Registered,
            layout: Layout::new::<u8>(),
        })
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a region made by this module).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base address of the region. Dereferencing it is the caller's (unsafe) business.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Where the region came from.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Copies `dst.len()` bytes from offset `off` into `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let src = self.range(off, dst.len())?;
        // SAFETY: `range` checked `[off, off + dst.len())` lies in the region, which is
        // valid while `self` lives; `dst` is a distinct Rust buffer, so they don't overlap.
        unsafe { copy_bytes(dst.as_mut_ptr(), src, dst.len()) };
        Ok(())
    }

    /// Copies `src` to offset `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), MemError> {
        let dst = self.range(off, src.len())?;
        // SAFETY: as in `read`, with the direction reversed.
        unsafe { copy_bytes(dst, src.as_ptr(), src.len()) };
        Ok(())
    }

    /// Volatile load of the byte at `off` (for spinning on the last byte of a deposit).
    pub fn load_u8(&self, off: usize) -> Result<u8, MemError> {
        let p = self.range(off, 1)?;
        // SAFETY: `p` is in bounds (checked) and a byte needs no alignment.
        Ok(unsafe { ptr::read_volatile(p) })
    }

    /// Volatile load of the native-endian 8-byte word at `off` (a multiple of 8).
    pub fn load_u64(&self, off: usize) -> Result<u64, MemError> {
        let p = self.word(off)?;
        // SAFETY: `word` checked bounds and the host address's 8-byte alignment.
        Ok(unsafe { ptr::read_volatile(p) })
    }

    /// Volatile store of the native-endian 8-byte word `v` at `off` (a multiple of 8).
    pub fn store_u64(&self, off: usize, v: u64) -> Result<(), MemError> {
        let p = self.word(off)?;
        // SAFETY: as in `load_u64`.
        unsafe { ptr::write_volatile(p, v) };
        Ok(())
    }

    /// Sets `len` bytes from offset `off` to `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), MemError> {
        let p = self.range(off, len)?;
        // SAFETY: `range` checked `[off, off + len)` lies in the region.
        unsafe { ptr::write_bytes(p, byte, len) };
        Ok(())
    }

    /// CRC32C of the `len` bytes at offset `off`, continuing from `init`: the check of
    /// a frame whose payload a port takes from here by reference
    /// ([`EndpointMemory::device_range`]).
    ///
    /// The one slice this module forms over the region, and only for this call: the
    /// checksum reads each byte once and nothing else sees the slice. A remote deposit
    /// into these bytes meanwhile is the same race as one during [`EndpointMemory::read`]
    /// (the deposit model's, see `Sync`): the sum may then disagree with the bytes the
    /// port copies a moment later, and the receiver refuses the frame for its CRC, to be
    /// sent again.
    pub fn crc32c_append(&self, init: u32, off: usize, len: usize) -> Result<u32, MemError> {
        let p = self.range(off, len)?;
        // SAFETY: `range` checked `[off, off + len)` lies in the region, which is valid
        // while `self` is borrowed; the slice does not outlive this call (see above).
        let bytes = unsafe { std::slice::from_raw_parts(p, len) };
        Ok(crate::wire::crc32c_append(init, bytes))
    }

    /// Pointer to `[off, off + len)` after checking it lies inside the region, for a
    /// device that reads those bytes itself: a port whose transmit burst copies frames
    /// (memif, af_packet) takes a payload from here instead of from a copy in its
    /// buffer. The caller keeps the region alive (an `Arc` of it) until the device is
    /// done; nothing here reads through the pointer.
    pub fn device_range(&self, off: usize, len: usize) -> Result<NonNull<u8>, MemError> {
        let p = self.range(off, len)?;
        Ok(NonNull::new(p).expect("endpoint memory is never at address 0"))
    }

    /// The host address of byte `off` of the region. Not checked: an address grants no
    /// access, and one outside the region is refused when it is used.
    #[inline]
    pub fn addr(&self, off: usize) -> HostAddr {
        HostAddr(self.ptr.as_ptr().wrapping_add(off))
    }

    /// Copies `src` to host address `at`, after checking `[at, at + src.len())` lies
    /// inside the region. Nothing is stored when the check fails.
    #[inline]
    pub fn write_at(&self, at: HostAddr, src: &[u8]) -> Result<(), MemError> {
        let dst = self.host_range(at, src.len())?;
        // SAFETY: `host_range` checked the bytes lie in the region, which is valid while
        // `self` is borrowed; `src` is a distinct Rust buffer, so they don't overlap.
        unsafe { copy_bytes(dst, src.as_ptr(), src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes at host address `at` into `dst`, after checking
    /// `[at, at + dst.len())` lies inside the region.
    #[inline]
    pub fn read_at(&self, at: HostAddr, dst: &mut [u8]) -> Result<(), MemError> {
        let src = self.host_range(at, dst.len())?;
        // SAFETY: as in `write_at`, with the direction reversed.
        unsafe { copy_bytes(dst.as_mut_ptr(), src, dst.len()) };
        Ok(())
    }

    /// Volatile store of the byte `v` at host address `at` (the last byte of a deposit,
    /// which a host may be spinning on), after checking it lies inside the region.
    #[inline]
    pub fn store_u8_at(&self, at: HostAddr, v: u8) -> Result<(), MemError> {
        let p = self.host_range(at, 1)?;
        // SAFETY: `p` is in bounds (checked) and a byte needs no alignment.
        unsafe { ptr::write_volatile(p, v) };
        Ok(())
    }

    /// Volatile store of the native-endian 8-byte word `v` at host address `at`: one
    /// 8-byte store, so a host polling the word never sees it torn. Refused
    /// ([`MemError::Unaligned`]) unless `at` is 8-byte aligned, and
    /// ([`MemError::OutOfBounds`]) unless the word lies inside the region.
    #[inline]
    pub fn store_u64_at(&self, at: HostAddr, v: u64) -> Result<(), MemError> {
        let p = self.word(self.offset_of(at))?;
        // SAFETY: `word` checked bounds and the host address's 8-byte alignment.
        unsafe { ptr::write_volatile(p, v) };
        Ok(())
    }

    /// Offset of host address `at` from the base (wrapping: an address below the base
    /// becomes an offset far past any region's end).
    #[inline]
    fn offset_of(&self, at: HostAddr) -> usize {
        (at.0 as usize).wrapping_sub(self.ptr.as_ptr() as usize)
    }

    /// Pointer to `[at, at + len)`, derived from the region's own pointer, after checking
    /// the bytes lie inside the region.
    #[inline]
    fn host_range(&self, at: HostAddr, len: usize) -> Result<*mut u8, MemError> {
        self.range(self.offset_of(at), len)
    }

    /// Pointer to `[off, off + len)` after checking it lies inside the region.
    #[inline]
    fn range(&self, off: usize, len: usize) -> Result<*mut u8, MemError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.as_ptr().wrapping_add(off)),
            _ => Err(MemError::OutOfBounds {
                off,
                len,
                size: self.len,
            }),
        }
    }

    /// Pointer to the aligned 8-byte word at `off`.
    #[inline]
    fn word(&self, off: usize) -> Result<*mut u64, MemError> {
        // The host address, not only the offset: a registered buffer may start anywhere.
        if (self.ptr.as_ptr() as usize).wrapping_add(off) & 7 != 0 {
            return Err(MemError::Unaligned { off, align: 8 });
        }
        Ok(self.range(off, 8)?.cast())
    }

    /// Tries hugepages for a region of `rounded` bytes; `None` when none are free.
    fn alloc_huge(rounded: usize) -> Option<Self> {
        // `hugepage-rs` panics when /proc/meminfo has no parseable hugepage size, and
        // mmap with MAP_HUGETLB fails slowly when none are reserved, so ask first.
        let info = HugepageInfo::read()?;
        let size = round_up(rounded, HUGE_PAGE.max(info.page_size)).ok()?;
        if info.free.saturating_mul(info.page_size) < size {
            return None;
        }
        let layout = Layout::from_size_align(size, SMALL_PAGE).ok()?;
        // SAFETY: `layout` has a non-zero size; the hugepage size was checked to be
        // parseable above, so `hugepage-rs` will not panic reading it.
        let raw = unsafe { hugepage_rs::alloc(layout) };
        // An anonymous mapping is zero-filled by the kernel.
        let ptr = NonNull::new(raw)?;
        Some(Self {
            ptr,
            len: size,
            backing: Backing::HugePages,
            layout,
        })
    }
}

impl Drop for EndpointMemory {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated by `hugepage_rs::alloc` with this very layout, freed once.
            Backing::HugePages => unsafe { hugepage_rs::dealloc(self.ptr.as_ptr(), self.layout) },
            // SAFETY: allocated by `alloc_zeroed` with this very layout, freed once.
            Backing::OrdinaryPages => unsafe {
                std::alloc::dealloc(self.ptr.as_ptr(), self.layout)
            },
            Backing::Registered => {}
        }
    }
}

impl fmt::Debug for EndpointMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("backing", &self.backing)
            .finish()
    }
}

/// `len` rounded up to a multiple of `to` (a power of two); zero is refused.
fn round_up(len: usize, to: usize) -> Result<usize, MemError> {
    if len == 0 {
        return Err(MemError::ZeroLength);
    }
    len.checked_add(to - 1)
        .map(|n| n & !(to - 1))
        .ok_or(MemError::TooLarge { len })
}

/// The default hugepage size and how many are free, from /proc/meminfo.
struct HugepageInfo {
    page_size: usize,
    free: usize,
}

impl HugepageInfo {
    fn read() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        Self::parse(&text)
    }

    /// Parses the lines `hugepage-rs` itself parses, in the same strict way, so that a
    /// `Some` here means its size lookup succeeds.
    fn parse(text: &str) -> Option<Self> {
        let mut page_size = None;
        let mut free = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("Hugepagesize:") {
                let mut parts = rest.split_whitespace();
                let n: usize = parts.next()?.parse().ok()?;
                let mult = match parts.next() {
                    None => 1,
                    Some("kB") => 1024,
                    Some(_) => return None,
                };
                page_size = n.checked_mul(mult);
            } else if let Some(rest) = line.strip_prefix("HugePages_Free:") {
                free = rest.trim().parse().ok();
            }
        }
        let page_size = page_size.filter(|s| s.is_power_of_two() && *s >= SMALL_PAGE)?;
        Some(Self {
            page_size,
            free: free?,
        })
    }
}

/// Copies `n` bytes; small copies (the common 1..=64-byte deposit) are done with a few
/// unaligned loads and stores instead of a call into libc's memmove, and always store
/// in ascending order so the last byte is stored last.
///
/// # Safety
/// `src` must be valid for `n` reads, `dst` for `n` writes, and they must not overlap.
#[inline(always)]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY (all arms): every access lies in [0, n) of both ranges, which the caller
    // guarantees valid and disjoint; head stores precede tail stores.
    unsafe {
        match n {
            0 => {}
            1..=7 => {
                for i in 0..n {
                    *dst.add(i) = *src.add(i);
                }
            }
            8..=16 => {
                let a = ptr::read_unaligned(src as *const u64);
                let b = ptr::read_unaligned(src.add(n - 8) as *const u64);
                ptr::write_unaligned(dst as *mut u64, a);
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
                ptr::write_unaligned(dst.add(n - 8) as *mut u64, b);
            }
            17..=32 => {
                let a = ptr::read_unaligned(src as *const u128);
                let b = ptr::read_unaligned(src.add(n - 16) as *const u128);
                ptr::write_unaligned(dst as *mut u128, a);
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
                ptr::write_unaligned(dst.add(n - 16) as *mut u128, b);
            }
            33..=64 => {
                let a = ptr::read_unaligned(src as *const [u128; 2]);
                let b = ptr::read_unaligned(src.add(n - 32) as *const [u128; 2]);
                ptr::write_unaligned(dst as *mut [u128; 2], a);
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
                ptr::write_unaligned(dst.add(n - 32) as *mut [u128; 2], b);
            }
            _ => {
                let mut off = 0;
                while off < n {
                    let k = COPY_CHUNK.min(n - off);
                    ptr::copy_nonoverlapping(src.add(off), dst.add(off), k);
                    off += k;
                }
            }
        }
    }
}

/// Largest piece [`copy_bytes`] hands to libc's memcpy at once. Above 8 KiB, glibc's
/// memmove on this kind of machine (AVX-512, ERMS) switches to `rep movsb`, whose
/// stores leave the destination in a state that makes the next reader slow: when a
/// frame's 9 KiB payload was copied into an mbuf that way, memif's copy of that mbuf
/// into its ring ran at 3.3 GB/s instead of 10-13 (64 KiB write_bw over memif, perf
/// samples per byte). In 4 KiB pieces glibc uses its vector loop.
const COPY_CHUNK: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_alloc_rounds_to_pages_and_is_zeroed() {
        let m = EndpointMemory::alloc_ordinary(5000).unwrap();
        assert_eq!(m.len(), 8192);
        assert_eq!(m.backing(), Backing::OrdinaryPages);
        assert_eq!(m.as_ptr() as usize % 4096, 0);
        let mut buf = vec![0xffu8; 8192];
        m.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn alloc_falls_back_or_uses_hugepages() {
        let m = EndpointMemory::alloc(10_000).unwrap();
        assert!(m.len() >= 10_000);
        assert_eq!(m.as_ptr() as usize % 4096, 0);
        match m.backing() {
            Backing::HugePages => assert_eq!(m.len() % HUGE_PAGE, 0),
            Backing::OrdinaryPages => assert_eq!(m.len(), 12288),
            Backing::Registered => panic!("alloc never registers"),
        }
        m.write(m.len() - 1, &[7]).unwrap();
        assert_eq!(m.load_u8(m.len() - 1).unwrap(), 7);
    }

    #[test]
    fn zero_and_huge_lengths_are_refused() {
        assert_eq!(
            EndpointMemory::alloc_ordinary(0).unwrap_err(),
            MemError::ZeroLength
        );
        assert!(matches!(
            EndpointMemory::alloc(usize::MAX - 10),
            Err(MemError::TooLarge { .. })
        ));
    }

    #[test]
    fn accesses_are_bounds_checked_including_overflow() {
        let m = EndpointMemory::alloc_ordinary(4096).unwrap();
        let mut b = [0u8; 8];
        assert!(m.read(4088, &mut b).is_ok());
        assert_eq!(
            m.read(4089, &mut b).unwrap_err(),
            MemError::OutOfBounds {
                off: 4089,
                len: 8,
                size: 4096
            }
        );
        assert!(m.write(usize::MAX - 2, &b).is_err());
        assert!(m.fill(4000, 97, 1).is_err());
        assert!(m.load_u8(4096).is_err());
        assert!(m.load_u64(4096).is_err());
        assert_eq!(
            m.store_u64(12, 1).unwrap_err(),
            MemError::Unaligned { off: 12, align: 8 }
        );
    }

    #[test]
    fn write_read_fill_and_words_round_trip() {
        let m = EndpointMemory::alloc_ordinary(8192).unwrap();
        m.write(4090, b"crossing").unwrap();
        let mut b = [0u8; 8];
        m.read(4090, &mut b).unwrap();
        assert_eq!(&b, b"crossing");
        m.store_u64(16, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(m.load_u64(16).unwrap(), 0x0102_0304_0506_0708);
        m.fill(100, 10, 0xab).unwrap();
        assert_eq!(m.load_u8(99).unwrap(), 0);
        assert_eq!(m.load_u8(100).unwrap(), 0xab);
        assert_eq!(m.load_u8(109).unwrap(), 0xab);
        assert_eq!(m.load_u8(110).unwrap(), 0);
    }

    #[test]
    fn registered_buffer_is_used_in_place_and_not_freed() {
        let layout = Layout::from_size_align(8192, 4096).unwrap();
        // SAFETY: non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!buf.is_null());
        {
            // SAFETY: `buf` is valid for 8192 bytes until freed below, after `m` drops.
            let m = unsafe { EndpointMemory::register(buf, 8192) }.unwrap();
            assert_eq!(m.backing(), Backing::Registered);
            assert_eq!(m.as_ptr(), buf);
            m.write(5, &[42]).unwrap();
        }
        // SAFETY: `buf` is still allocated (registration did not free it).
        assert_eq!(unsafe { *buf.add(5) }, 42);
        // SAFETY: allocated above with `layout`.
        unsafe { std::alloc::dealloc(buf, layout) };
    }

    #[test]
    fn unchecked_deposit_never_leaves_a_partial_registered_page() {
        use crate::oplogic::{EndpointAccess, TlbAccess};
        use crate::tables::{EndpointEntry, EndpointId, Rights};
        use crate::tlb::Tlb;
        use std::sync::Arc;

        let layout = Layout::from_size_align(4096, 4096).unwrap();
        // SAFETY: non-zero size.
        let buf = unsafe { std::alloc::alloc(layout) };
        assert!(!buf.is_null());
        // SAFETY: `buf` is valid for 4096 bytes.
        unsafe { ptr::write_bytes(buf, 0xee, 4096) };
        {
            // Only the first 100 bytes are endpoint memory: its one page is partial.
            // SAFETY: `buf` is valid for 100 bytes until freed below, after `mem` drops.
            let mem = Arc::new(unsafe { EndpointMemory::register(buf, 100) }.unwrap());
            let ep = EndpointEntry::new(mem, 0, 100, Rights::ALL).unwrap();
            let mut tlb = Tlb::new();
            let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
            // No `check`: the page translates, the bytes past 100 are refused by `mem`.
            a.store(96, &[1; 10]);
            a.store_word(96, u64::MAX);
            let mut back = [0xffu8; 10];
            a.load(96, &mut back);
            assert_eq!(back, [0; 10]);
        }
        for i in 0..4096 {
            // SAFETY: `buf` is still allocated (registration did not free it).
            assert_eq!(unsafe { *buf.add(i) }, 0xee, "byte {i}");
        }
        // SAFETY: allocated above with `layout`.
        unsafe { std::alloc::dealloc(buf, layout) };
    }

    #[test]
    fn register_takes_any_address_but_refuses_null_and_empty() {
        let mut v = vec![0u64; 1026];
        // An address 8-byte aligned plus 3: neither page- nor word-aligned.
        let odd = v.as_mut_ptr().cast::<u8>().wrapping_add(3);
        {
            // SAFETY: `odd` is valid for 8192 bytes (inside `v`), which outlives `m`.
            let m = unsafe { EndpointMemory::register(odd, 8192) }.unwrap();
            m.write(0, b"deposit").unwrap();
            let mut b = [0u8; 7];
            m.read(0, &mut b).unwrap();
            assert_eq!(&b, b"deposit");
            // Offset 5 puts the word at an aligned host address; offset 0 does not.
            m.store_u64(5, 0x1122_3344_5566_7788).unwrap();
            assert_eq!(m.load_u64(5).unwrap(), 0x1122_3344_5566_7788);
            assert_eq!(
                m.load_u64(0).unwrap_err(),
                MemError::Unaligned { off: 0, align: 8 }
            );
            assert!(m.store_u64(8192 - 3, 1).is_err());
        }
        assert_eq!(v[1].to_ne_bytes(), 0x1122_3344_5566_7788u64.to_ne_bytes());
        // SAFETY: refused before use.
        assert_eq!(
            unsafe { EndpointMemory::register(ptr::null_mut(), 16) }.unwrap_err(),
            MemError::Null
        );
        // SAFETY: refused before use.
        assert_eq!(
            unsafe { EndpointMemory::register(odd, 0) }.unwrap_err(),
            MemError::ZeroLength
        );
    }

    #[test]
    fn meminfo_parsing_matches_hugepage_rs() {
        let i =
            HugepageInfo::parse("HugePages_Free:      12\nHugepagesize:       2048 kB\n").unwrap();
        assert_eq!((i.page_size, i.free), (2 << 20, 12));
        assert!(HugepageInfo::parse("HugePages_Free: 3\n").is_none());
        assert!(HugepageInfo::parse("HugePages_Free: 3\nHugepagesize: 2 MB\n").is_none());
    }

    #[test]
    fn memory_and_host_addresses_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<EndpointMemory>();
        assert_send_sync::<HostAddr>();
    }

    #[test]
    fn host_addressed_accesses_round_trip() {
        let m = EndpointMemory::alloc_ordinary(8192).unwrap();
        m.write_at(m.addr(4090), b"crossing").unwrap();
        let mut b = [0u8; 8];
        m.read_at(m.addr(4088).wrapping_add(2), &mut b).unwrap();
        assert_eq!(&b, b"crossing");
        m.read(4090, &mut b).unwrap();
        assert_eq!(&b, b"crossing");
        m.store_u8_at(m.addr(8191), 7).unwrap();
        assert_eq!(m.load_u8(8191).unwrap(), 7);
        m.store_u64_at(m.addr(4096), 0x0102_0304_0506_0708).unwrap();
        assert_eq!(m.load_u64(4096).unwrap(), 0x0102_0304_0506_0708);
        m.write_at(m.addr(8192), &[]).unwrap();
    }

    #[test]
    fn host_addresses_outside_the_region_are_refused() {
        let m = EndpointMemory::alloc_ordinary(4096).unwrap();
        let other = EndpointMemory::alloc_ordinary(4096).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(
            m.write_at(m.addr(4090), &b).unwrap_err(),
            MemError::OutOfBounds {
                off: 4090,
                len: 8,
                size: 4096
            }
        );
        assert!(m.read_at(m.addr(4089), &mut b).is_err());
        assert!(m.store_u8_at(m.addr(4096), 1).is_err());
        assert!(m.store_u64_at(m.addr(4096), 1).is_err());
        assert_eq!(
            m.store_u64_at(m.addr(12), 1).unwrap_err(),
            MemError::Unaligned { off: 12, align: 8 }
        );
        // Below the base, in no region, and in another region: all refused, none touched.
        assert!(m
            .store_u8_at(m.addr(0).wrapping_add(usize::MAX), 1)
            .is_err());
        assert!(m.write_at(HostAddr::NULL, &b).is_err());
        assert!(m.store_u8_at(HostAddr::NULL, 1).is_err());
        assert!(m.write_at(other.addr(0), &[1]).is_err());
        assert!(other.write_at(m.addr(0), &[1]).is_err());
        let mut all = vec![0xffu8; 4096];
        m.read(0, &mut all).unwrap();
        assert!(all.iter().all(|&x| x == 0));
        other.read(0, &mut all).unwrap();
        assert!(all.iter().all(|&x| x == 0));
    }
}
