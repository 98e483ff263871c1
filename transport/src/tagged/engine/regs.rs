//! Registrations of the application's buffers, kept for reuse (a registration cache,
//! as UCX's rcache and libfabric's MR cache).
//!
//! A rendezvous send registers its buffer for the peer's read; a rendezvous receive
//! and a one-sided operation register theirs for the answer to land in. Programs send
//! and receive from the same buffers again and again (a benchmark's window of 64 sends
//! of one buffer, a halo exchange's planes), and a registration is a round trip to the
//! device's worker each way. So a registration outlives its use: the next buffer that
//! lies inside it takes it (at an offset) instead of a new one, and up to
//! [`REG_CACHE`] of them stay while unused, the least recently used going first.
//!
//! Keeping a registration of memory the application has since freed is safe here:
//! nothing reaches a registration but what the engine posts for a request whose
//! buffer is valid by that request's contract — a peer reads the sender's only through
//! a token scoped to that send's bytes and cancelled when it ends, and only our own
//! reads land in the receiver's —, and registrations name virtual addresses, which the
//! worker translates when it copies, not pinned pages.

use super::{Engine, Fabric};

/// Unused registrations kept for reuse (and at most this many cached in all).
pub(super) const REG_CACHE: usize = 16;

/// A registration: the buffer it covers, its users, and whether the cache holds it.
pub(super) struct Reg<M> {
    pub(super) mem: M,
    start: usize,
    len: usize,
    users: u32,
    /// Cache clock at the last use (least recently used goes first).
    used: u64,
    cached: bool,
}

impl<F: Fabric> Engine<F> {
    /// A registration covering `len` bytes at `ptr` (one of the cache's, or a new one):
    /// its index and the buffer's offset in it. [`Engine::unpin`] when done.
    ///
    /// # Safety
    /// The bytes stay valid until the matching [`Engine::unpin`].
    pub(super) unsafe fn pin(&mut self, ptr: *mut u8, len: usize) -> Result<(usize, u64), ()> {
        let (a, len) = (ptr as usize, len.max(1));
        let end = a.checked_add(len).ok_or(())?;
        self.reg_clock += 1;
        for &i in &self.reg_cached {
            let r = self.mems[i].as_mut().expect("cached");
            if r.start <= a && end <= r.start + r.len {
                r.users += 1;
                r.used = self.reg_clock;
                self.stats.registrations_reused += 1;
                return Ok((i, (a - r.start) as u64));
            }
        }
        // SAFETY: forwarded to the caller's contract; the registration outliving the
        // use is safe (see the module's documentation).
        let mem = unsafe { self.fab.register(ptr, len) }.map_err(|_| ())?;
        self.stats.registrations += 1;
        let reg = Reg {
            mem,
            start: a,
            len,
            users: 1,
            used: self.reg_clock,
            cached: false,
        };
        let i = match self.mems_free.pop() {
            Some(i) => {
                self.mems[i] = Some(reg);
                i
            }
            None => {
                self.mems.push(Some(reg));
                self.mems.len() - 1
            }
        };
        if self.reg_cached.len() >= REG_CACHE {
            // Make room: the least recently used of those nothing uses.
            let lru = self
                .reg_cached
                .iter()
                .enumerate()
                .filter(|(_, &j)| self.mems[j].as_ref().expect("cached").users == 0)
                .min_by_key(|(_, &j)| self.mems[j].as_ref().expect("cached").used)
                .map(|(k, _)| k);
            if let Some(k) = lru {
                let j = self.reg_cached.swap_remove(k);
                self.drop_reg(j);
            }
        }
        if self.reg_cached.len() < REG_CACHE {
            self.mems[i].as_mut().expect("kept").cached = true;
            self.reg_cached.push(i);
        }
        // A new registration starts at the buffer.
        Ok((i, 0))
    }

    /// One use of registration `i` is over: it stays for the next if cached.
    pub(super) fn unpin(&mut self, i: usize) {
        let Some(r) = self.mems.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        r.users = r.users.saturating_sub(1);
        if r.users == 0 && !r.cached {
            self.drop_reg(i);
        }
    }

    /// The registration `i`'s handle.
    pub(super) fn reg(&self, i: usize) -> &F::Mem {
        &self.mems[i].as_ref().expect("pinned").mem
    }

    fn drop_reg(&mut self, i: usize) {
        if let Some(r) = self.mems.get_mut(i).and_then(Option::take) {
            self.fab.deregister(r.mem);
            self.mems_free.push(i);
        }
    }

    /// Registrations held for reuse and nothing uses now (for tests and stats).
    pub fn idle_registrations(&self) -> usize {
        self.reg_cached
            .iter()
            .filter(|&&i| self.mems[i].as_ref().is_some_and(|r| r.users == 0))
            .count()
    }
}
