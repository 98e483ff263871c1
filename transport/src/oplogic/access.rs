//! The target endpoint of an operation: [`EndpointAccess`], and its two
//! implementations, [`TlbAccess`] (a real endpoint through the worker's software TLB)
//! and [`VecAccess`] (a plain buffer for tests and fuzzing).
//!
//! `check` has no side effect on memory (it may fill the TLB); `load`, `store` and
//! `store_word` act only on ranges a `check` covered. The unsafe code here is the
//! TLB-backed access, which dereferences endpoint host pointers.

use super::Trap;
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
    fn host(&mut self, ea: u64) -> Option<*mut u8> {
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
        let mut at = ea;
        let mut rest = body;
        while !rest.is_empty() {
            let in_page = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let n = in_page.min(rest.len());
            let Some(dst) = self.host(at) else { return };
            // SAFETY: `check` proved `[ea, ea + data.len())` lies inside the endpoint and
            // is present; the endpoint lies inside its `EndpointMemory` (checked by
            // `EndpointEntry::new`), which `self.ep` keeps alive through its `Arc` and
            // whose page map cannot change while we borrow it. `[dst, dst + n)` stays in
            // one logical page, and `data` is a Rust buffer, never endpoint memory.
            unsafe { crate::mem::copy_bytes(dst, rest.as_ptr(), n) };
            at += n as u64;
            rest = &rest[n..];
        }
        let Some(dst) = self.host(at) else { return };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: as above; `at = ea + data.len() - 1` is the last checked byte.
        unsafe { std::ptr::write_volatile(dst, last) };
    }

    fn load(&mut self, ea: u64, buf: &mut [u8]) {
        let mut at = ea;
        let mut rest = &mut buf[..];
        while !rest.is_empty() {
            let in_page = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let n = in_page.min(rest.len());
            let Some(src) = self.host(at) else {
                // Unreachable after `check`; leave a defined value rather than trust it.
                rest.fill(0);
                return;
            };
            // SAFETY: `check` proved `[ea, ea + buf.len())` lies inside the endpoint and
            // is present (see `store`); `[src, src + n)` stays in one logical page and
            // `buf` is a Rust buffer, never endpoint memory.
            unsafe { crate::mem::copy_bytes(rest.as_mut_ptr(), src, n) };
            at += n as u64;
            rest = &mut rest[n..];
        }
    }

    fn store_word(&mut self, ea: u64, value: u64) {
        // An 8-aligned endpoint offset is 8-aligned in host memory unless the endpoint
        // is a registered buffer at an odd address; then fall back to bytes.
        match self.host(ea) {
            Some(dst) if dst as usize % 8 == 0 && ea % 8 == 0 => {
                // SAFETY: `check` covered `[ea, ea + 8)`, which lies in one logical page
                // (ea is a multiple of 8 and pages are multiples of 8), and `dst` is
                // 8-aligned.
                unsafe { std::ptr::write_volatile(dst as *mut u64, value) };
            }
            Some(_) => self.store(ea, &value.to_ne_bytes()),
            None => {}
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
