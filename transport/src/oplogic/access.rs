//! The target endpoint of an operation: [`EndpointAccess`], and its two
//! implementations, [`TlbAccess`] (a real endpoint through the worker's software TLB)
//! and [`VecAccess`] (a plain buffer for tests and fuzzing).
//!
//! `check` has no side effect on memory (it may fill the TLB); `load`, `store` and
//! `store_word` act only on ranges a `check` covered. [`TlbAccess`] turns endpoint
//! addresses into host addresses through the TLB and leaves the bytes to `mem`, whose
//! host-addressed methods check each access against the endpoint's memory.
//!
//! What it must never do: touch endpoint memory other than through `mem`. A caller that
//! skips `check` breaks the endpoint's bounds and rights, never memory safety: `mem`
//! still confines every access to the endpoint's memory.

use super::Trap;
use crate::mem::HostAddr;
use crate::tables::{EndpointEntry, EndpointId, Rights, PAGE_SHIFT, PAGE_SIZE};
use crate::tlb::{Fault, Tlb};

/// The kind of access an operation makes to endpoint memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Remote read (needs [`Rights::REMOTE_READ`]).
    Read,
    /// Remote write (needs [`Rights::REMOTE_WRITE`]).
    Write,
    /// Remote atomic (needs [`Rights::REMOTE_ATOMIC`]).
    Atomic,
}

impl Access {
    /// The right this access needs.
    pub fn rights(self) -> Rights {
        match self {
            Access::Read => Rights::REMOTE_READ,
            Access::Write => Rights::REMOTE_WRITE,
            Access::Atomic => Rights::REMOTE_ATOMIC,
        }
    }
}

/// The target endpoint of an operation, as the operation logic may touch it.
pub trait EndpointAccess {
    /// Length of the endpoint in bytes.
    fn len(&self) -> u64;

    /// Whether the endpoint is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks `[ea, ea + len)` is inside the endpoint, permitted for `access` (endpoint
    /// and page rights) and present. No side effects on memory.
    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap>;

    /// Stores `data` at `ea` (already checked), crossing pages as needed, writing the
    /// last byte last (after a Release fence) so a reader spinning on the last byte sees
    /// the whole deposit.
    fn store(&mut self, ea: u64, data: &[u8]);

    /// Copies `buf.len()` bytes at `ea` (already checked) into `buf`, crossing pages as
    /// needed (for atomics; a read's data is copied by the worker when it replies).
    fn load(&mut self, ea: u64, buf: &mut [u8]);

    /// Stores the native-endian 8-byte word `value` at `ea` (already checked, a multiple
    /// of 8): one 8-byte store where the host address allows, so a host polling the word
    /// never sees it torn.
    fn store_word(&mut self, ea: u64, value: u64) {
        self.store(ea, &value.to_ne_bytes());
    }
}

/// Checks `[ea, ea + len)` against a bound, returning the end.
fn check_bounds(ea: u64, len: u64, bound: u64) -> Result<u64, Trap> {
    match ea.checked_add(len) {
        Some(end) if end <= bound => Ok(end),
        _ => Err(Trap::OutOfBounds { ea, len, bound }),
    }
}

/// Logical pages covering the non-empty range `[ea, end)`.
fn pages_of(ea: u64, end: u64) -> std::ops::RangeInclusive<u64> {
    (ea >> PAGE_SHIFT)..=((end - 1) >> PAGE_SHIFT)
}

/// [`EndpointAccess`] over a real endpoint, through the worker's software TLB.
pub struct TlbAccess<'a> {
    id: EndpointId,
    ep: &'a EndpointEntry,
    tlb: &'a mut Tlb,
}

impl<'a> TlbAccess<'a> {
    /// The endpoint numbered `id`, whose entry is `ep`, translated through `tlb`.
    pub fn new(id: EndpointId, ep: &'a EndpointEntry, tlb: &'a mut Tlb) -> Self {
        Self { id, ep, tlb }
    }

    /// Host address of `ea`, which a successful `check` covered.
    fn host(&mut self, ea: u64) -> Option<HostAddr> {
        let (base, _) = self
            .tlb
            .translate(self.id, self.ep, ea >> PAGE_SHIFT)
            .ok()?;
        Some(base.wrapping_add((ea & (PAGE_SIZE - 1)) as usize))
    }
}

impl EndpointAccess for TlbAccess<'_> {
    fn len(&self) -> u64 {
        self.ep.len()
    }

    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        let end = check_bounds(ea, len, self.ep.len())?;
        if !self.ep.rights().contains(access.rights()) {
            return Err(Trap::AccessDenied { ea, access });
        }
        if len == 0 {
            return Ok(());
        }
        for page in pages_of(ea, end) {
            match self.tlb.translate(self.id, self.ep, page) {
                Ok((_, rights)) if rights.contains(access.rights()) => {}
                Ok(_) => {
                    return Err(Trap::AccessDenied {
                        ea: ea.max(page << PAGE_SHIFT),
                        access,
                    })
                }
                Err(Fault::PageNotPresent { page }) => return Err(Trap::PageNotPresent { page }),
                // Unreachable after the bounds check, but never trust that on this path.
                Err(Fault::OutOfRange { .. }) => {
                    return Err(Trap::OutOfBounds {
                        ea,
                        len,
                        bound: self.ep.len(),
                    })
                }
            }
        }
        Ok(())
    }

    fn store(&mut self, ea: u64, data: &[u8]) {
        let Some((&last, body)) = data.split_last() else {
            return;
        };
        if ea >> PAGE_SHIFT == (ea + body.len() as u64) >> PAGE_SHIFT {
            // All in one logical page (a small write's case): one translation for the
            // body and the last byte.
            let Some(dst) = self.host(ea) else { return };
            if self.ep.memory().write_at(dst, body).is_err() {
                return;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            let _ = self
                .ep
                .memory()
                .store_u8_at(dst.wrapping_add(body.len()), last);
            return;
        }
        let mut at = ea;
        let mut rest = body;
        while !rest.is_empty() {
            let in_page = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let n = in_page.min(rest.len());
            let Some(dst) = self.host(at) else { return };
            // `[dst, dst + n)` stays in one logical page; a refusal is unreachable after
            // `check`, and then nothing more is stored (least of all the last byte).
            if self.ep.memory().write_at(dst, &rest[..n]).is_err() {
                return;
            }
            at += n as u64;
            rest = &rest[n..];
        }
        let Some(dst) = self.host(at) else { return };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // `at = ea + data.len() - 1`, the last checked byte; a refusal is unreachable.
        let _ = self.ep.memory().store_u8_at(dst, last);
    }

    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        let mut at = ea;
        let mut rest = &mut buf[..];
        while !rest.is_empty() {
            let in_page = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let n = in_page.min(rest.len());
            // `[src, src + n)` stays in one logical page. Both refusals are unreachable
            // after `check`; leave a defined value rather than trust that.
            let copied = match self.host(at) {
                Some(src) => self.ep.memory().read_at(src, &mut rest[..n]).is_ok(),
                None => false,
            };
            if !copied {
                rest.fill(0);
                return;
            }
            at += n as u64;
            rest = &mut rest[n..];
        }
    }

    fn store_word(&mut self, ea: u64, value: u64) {
        // `check` covered `[ea, ea + 8)`, which lies in one logical page (ea is a
        // multiple of 8 and pages are multiples of 8), so one 8-byte store does it when
        // the host address is aligned too (always for allocated regions, which are page
        // aligned; a registered buffer may start anywhere, and then `mem` refuses the
        // unaligned word and bytes do).
        let Some(dst) = self.host(ea) else { return };
        let stored = ea % 8 == 0 && self.ep.memory().store_u64_at(dst, value).is_ok();
        if !stored {
            self.store(ea, &value.to_ne_bytes());
        }
    }
}

/// [`EndpointAccess`] over a plain buffer, for tests and fuzzing. Pages whose entry is
/// missing from `pages_present` / `page_rights` count as present / all rights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecAccess {
    /// The endpoint's bytes; its length is the endpoint's.
    pub bytes: Vec<u8>,
    /// Endpoint rights.
    pub rights: Rights,
    /// Present flag per logical page.
    pub pages_present: Vec<bool>,
    /// Rights per logical page (intersected with `rights`).
    pub page_rights: Vec<Rights>,
}

impl VecAccess {
    /// A zeroed endpoint of `len` bytes with `rights`, every page present with all rights.
    pub fn new(len: usize, rights: Rights) -> Self {
        let pages = (len as u64).div_ceil(PAGE_SIZE) as usize;
        Self {
            bytes: vec![0; len],
            rights,
            pages_present: vec![true; pages],
            page_rights: vec![Rights::ALL; pages],
        }
    }
}

impl EndpointAccess for VecAccess {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn check(&mut self, ea: u64, len: u64, access: Access) -> Result<(), Trap> {
        let end = check_bounds(ea, len, self.len())?;
        if !self.rights.contains(access.rights()) {
            return Err(Trap::AccessDenied { ea, access });
        }
        if len == 0 {
            return Ok(());
        }
        for page in pages_of(ea, end) {
            let i = page as usize;
            if !self.pages_present.get(i).copied().unwrap_or(true) {
                return Err(Trap::PageNotPresent { page });
            }
            let rights = self.page_rights.get(i).copied().unwrap_or(Rights::ALL);
            if !rights.contains(access.rights()) {
                return Err(Trap::AccessDenied {
                    ea: ea.max(page << PAGE_SHIFT),
                    access,
                });
            }
        }
        Ok(())
    }

    fn store(&mut self, ea: u64, data: &[u8]) {
        let start = ea as usize;
        if let Some(dst) = self.bytes.get_mut(start..start.saturating_add(data.len())) {
            dst.copy_from_slice(data);
        }
    }

    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        let start = usize::try_from(ea).unwrap_or(usize::MAX);
        match self.bytes.get(start..start.saturating_add(buf.len())) {
            Some(src) => buf.copy_from_slice(src),
            None => buf.fill(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::EndpointMemory;
    use std::sync::Arc;

    const PAGE: usize = PAGE_SIZE as usize;

    fn endpoint(pages: usize) -> (Arc<EndpointMemory>, EndpointEntry) {
        let mem = Arc::new(EndpointMemory::alloc_ordinary(pages * PAGE).unwrap());
        let ep = EndpointEntry::new(mem.clone(), 0, pages * PAGE, Rights::ALL).unwrap();
        (mem, ep)
    }

    #[test]
    fn tlb_load_reads_back_a_store_across_pages() {
        let (mem, ep) = endpoint(4);
        let mut tlb = Tlb::new();
        let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
        let data: Vec<u8> = (0..=255).cycle().take(PAGE + 20).collect();
        let ea = 2 * PAGE as u64 - 10;
        a.check(ea, data.len() as u64, Access::Write).unwrap();
        a.store(ea, &data);
        let mut back = vec![0; data.len()];
        a.load(ea, &mut back);
        assert_eq!(back, data);
        let mut raw = vec![0; data.len()];
        mem.read(ea as usize, &mut raw).unwrap();
        assert_eq!(raw, data);
    }

    #[test]
    fn tlb_store_word_writes_the_whole_word_in_place() {
        let (mem, ep) = endpoint(3);
        let mut tlb = Tlb::new();
        let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
        let ea = 2 * PAGE as u64 + 64;
        a.check(ea, 8, Access::Atomic).unwrap();
        a.store_word(ea, 0x0102_0304_0506_0708);
        assert_eq!(mem.load_u64(ea as usize).unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(mem.load_u8(ea as usize - 1).unwrap(), 0);
        assert_eq!(mem.load_u8(ea as usize + 8).unwrap(), 0);
    }

    #[test]
    fn unchecked_access_past_the_end_stops_at_the_endpoint_end() {
        // Without `check`, a store running off the endpoint stores what lies inside it,
        // then nothing (least of all the last byte); a load zero-fills the rest.
        let (mem, ep) = endpoint(1);
        let mut tlb = Tlb::new();
        let mut a = TlbAccess::new(EndpointId(0), &ep, &mut tlb);
        a.store(PAGE as u64 - 6, &[9; 10]);
        let mut tail = [0u8; 6];
        mem.read(PAGE - 6, &mut tail).unwrap();
        assert_eq!(tail, [9; 6]);
        let mut buf = [0xffu8; 10];
        a.load(PAGE as u64 - 6, &mut buf);
        assert_eq!(buf, [9, 9, 9, 9, 9, 9, 0, 0, 0, 0]);
    }
}
