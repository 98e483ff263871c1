//! Endpoints: page-aligned regions remote operations may touch, addressed by offset.

use std::sync::Arc;

use deposit_transport::host::Driver;
use deposit_transport::mem::{Backing, EndpointMemory};
use deposit_transport::tables::{EndpointId, RegWindow, Rights, TableError, PAGE_SIZE};

use crate::device::DeviceInner;
use crate::{Error, EventQueue};

/// A local endpoint. Remote peers address it by offset through a connection; the
/// application reads and writes it here. Remote deposits may land at any moment, so
/// access goes through copies, never through a Rust reference into the memory.
#[derive(Clone)]
pub struct Endpoint(pub(crate) Arc<EpInner>);

pub(crate) struct EpInner {
    pub(crate) dev: Arc<DeviceInner>,
    /// The worker shard that serves it (its connections and their windows).
    pub(crate) shard: u8,
    pub(crate) id: EndpointId,
    pub(crate) mem: Arc<EndpointMemory>,
    /// Start of this endpoint inside `mem` (nested endpoints share memory).
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) rights: Rights,
    pub(crate) events: Arc<deposit_transport::events::EventRing>,
    pub(crate) exceptions: Arc<deposit_transport::events::EventRing>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.0.id)
            .field("len", &self.0.len)
            .field("rights", &self.0.rights)
            .field("backing", &self.0.mem.backing())
            .finish()
    }
}

impl Endpoint {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.0.len as u64
    }
    /// Whether it has no byte (never, for an endpoint the device made).
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    /// Rights remote peers have.
    pub fn rights(&self) -> Rights {
        self.0.rights
    }
    /// Hugepages, ordinary pages or a registered application buffer.
    pub fn backing(&self) -> Backing {
        self.0.mem.backing()
    }
    /// Local endpoint number (within its shard).
    pub fn id(&self) -> u32 {
        self.0.id.0
    }
    /// The worker shard that serves it ([`crate::DeviceConfig::workers`]).
    pub fn shard(&self) -> usize {
        usize::from(self.0.shard)
    }

    /// Allocates `n` address registers from the file of this endpoint's shard (see
    /// [`crate::Device::alloc_registers`]): a window its connections may use.
    pub fn alloc_registers(&self, n: u32) -> Result<RegWindow, Error> {
        self.0.dev.alloc_registers(self.0.shard, n)
    }
    /// Host address of offset 0 (for applications that manage the memory themselves).
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY-free: pointer arithmetic inside the allocation.
        self.0.mem.as_ptr().wrapping_add(self.0.offset)
    }

    /// The memory index of `len` bytes at `off`, when they are inside the endpoint.
    fn check(&self, off: u64, len: usize) -> Result<usize, Error> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.0.len as u64 => Ok(self.0.offset + off as usize),
            _ => Err(Error::InvalidArgument(format!(
                "range {off}+{len} outside endpoint of {} bytes",
                self.0.len
            ))),
        }
    }

    /// Copies bytes out of the endpoint.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), Error> {
        let at = self.check(off, dst.len())?;
        Ok(self.0.mem.read(at, dst)?)
    }
    /// Copies bytes into the endpoint.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), Error> {
        let at = self.check(off, src.len())?;
        Ok(self.0.mem.write(at, src)?)
    }
    /// Fills a range with one byte.
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<(), Error> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let at = self.check(off, len)?;
        Ok(self.0.mem.fill(at, len, byte)?)
    }
    /// Volatile load of one byte (poll for the last byte of a deposit, as
    /// ib_write_lat does: deposits store their last byte last).
    #[inline]
    pub fn load_u8(&self, off: u64) -> Result<u8, Error> {
        let at = self.check(off, 1)?;
        Ok(self.0.mem.load_u8(at)?)
    }
    /// Volatile load of a native-endian u64.
    pub fn load_u64(&self, off: u64) -> Result<u64, Error> {
        let at = self.check(off, 8)?;
        Ok(self.0.mem.load_u64(at)?)
    }
    /// The endpoint's event queue (conditional interrupts, software exceptions).
    pub fn events(&self) -> EventQueue {
        EventQueue {
            dev: self.0.dev.clone(),
            q: self.0.events.clone(),
        }
    }

    /// The endpoint's exception queue: refused messages of connections that report
    /// them (`ConnOptions::report_traps`, kind [`crate::EventKind::Trap`] with the
    /// status and reason) and faults that hold a connection for the host (status
    /// `PageFault`: repair, then [`crate::Connection::resume`]).
    pub fn exceptions(&self) -> EventQueue {
        EventQueue {
            dev: self.0.dev.clone(),
            q: self.0.exceptions.clone(),
        }
    }

    /// Sets the rights of logical page `page` (4 KiB) for remote peers; the endpoint's
    /// own rights still apply on top.
    pub fn set_page_rights(&self, page: u64, rights: Rights) -> Result<(), Error> {
        self.with_table(move |w, id| w.set_page_rights(id, page, rights))
    }

    /// Gives the endpoint global registers: names `global(0..w.len)` of every
    /// connection into it (one queue fed by many senders).
    pub fn set_global_registers(&self, w: RegWindow) -> Result<(), Error> {
        if !w.is_empty() && self.0.dev.register_shard(w) != self.0.shard {
            return Err(Error::InvalidArgument(format!(
                "register window {w:?} is not of this endpoint's shard ({}): use \
                 Endpoint::alloc_registers",
                self.0.shard
            )));
        }
        self.with_table(move |wk, id| wk.set_global_registers(id, w))
    }

    /// Logical pages of the endpoint's page map (4 KiB each).
    pub fn pages(&self) -> u64 {
        (self.0.len as u64).div_ceil(PAGE_SIZE)
    }

    /// Marks logical page `page` present or not ("page out" / revoke). A message
    /// touching a page that is not present exceptions its connection until the page is
    /// back and the connection resumed ([`crate::Connection::resume`]).
    pub fn set_page_present(&self, page: u64, present: bool) -> Result<(), Error> {
        self.with_table(move |w, id| w.set_page_present(id, page, present))
    }

    /// Runs the control call `f` with this endpoint's number on its shard's worker.
    fn with_table(
        &self,
        f: impl FnOnce(&mut dyn Driver, EndpointId) -> Result<(), TableError> + Send + 'static,
    ) -> Result<(), Error> {
        let id = self.0.id;
        Ok(self.0.dev.call_on(self.0.shard, move |w| f(w, id))?)
    }

    /// Drives progress (inline mode) — convenient inside a polling loop.
    #[inline]
    pub fn progress(&self) {
        self.0.dev.progress();
    }
}

impl Drop for EpInner {
    fn drop(&mut self) {
        // The last application handle is gone: remote operations on connections bound
        // to this endpoint are refused from now on.
        // Its payload tokens die with it: a later endpoint under the same number must
        // not receive a deposit meant for this one.
        let id = self.id;
        self.dev.call_on(self.shard, move |w| {
            w.remove_endpoint(id);
        });
    }
}
