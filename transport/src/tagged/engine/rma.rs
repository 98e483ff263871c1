//! One-sided operations on regions peers exposed (libfabric's `FI_RMA` and
//! `FI_ATOMIC`, MPI's windows; UCX's put/get with an rkey).
//!
//! A region is memory of the application's, registered as an endpoint of its own with
//! the rights asked for, behind a listener on a random service number that admits only
//! connect requests carrying the region's secret. Its [`RegionKey`] — the service and
//! the secret — is what the owner hands to peers (inside an ordinary message): holding
//! it is the right to reach the region, as holding an rkey is in verbs. Its listener's
//! reply says the region's base address (0 when peers address it by offset, else the
//! virtual address of its first byte) and its length.
//!
//! An initiator names a peer, a key, an address and a local buffer; the engine opens a
//! connection to that region on first use (from an endpoint of no rights: the region's
//! owner can reach nothing of ours over it), and posts the transport's own write, read,
//! fetch-and-add or compare-and-swap with the local buffer registered for the time of
//! the operation: no staging copy on either side. Operations queue per (peer, key) until
//! the connection is up; bounds are checked against the reply before anything is sent
//! (the region's owner checks them again, with its rights: what it refuses completes
//! [`TagStatus::Refused`]). An operation completes once, in the mailbox's completions,
//! with [`TagOp::Write`], [`TagOp::Read`] or [`TagOp::Atomic`].

use std::collections::{HashMap, HashSet, VecDeque};

use super::super::ids::IdMap;

use super::{fabric, Engine, Fabric, PeerId, TagCompletion, TagError, TagOp, TagStatus, WR_KIND};
use crate::connection::{random_u32, ConnState};
use crate::tables::Rights;
use crate::wr::WR_SIGNALED;
use crate::wr::{Remote, Source, WcStatus, Wqe, WrOpcode};

pub(super) const WR_RMA: u64 = 4 << 56;
const REGION_MAGIC: u32 = 0x6464_7267; // "ddrg"
/// Most bytes one work request moves (a longer operation is several).
const CHUNK: u64 = 1 << 30;
/// Turns between looks for new initiators of our regions (their connections work
/// before we take them from the listener; we only keep them).
const SERVE_EVERY: u32 = 64;

/// What a peer needs to reach a region: its listener's service (high bit set) and its
/// secret, as one `u64` (`secret << 32 | service`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RegionKey(pub u64);

impl RegionKey {
    pub const fn service(self) -> u32 {
        self.0 as u32
    }
    fn secret(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }
}

/// A one-sided operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RmaOp {
    /// The local buffer's bytes into the region.
    Write,
    /// The region's bytes into the local buffer.
    Read,
    /// Adds to the region's 8-byte word; its old value into the local buffer (8 bytes).
    FetchAdd(u64),
    /// Swaps the region's 8-byte word for `swap` if it equals `compare`; its old value
    /// into the local buffer (8 bytes).
    CmpSwap { compare: u64, swap: u64 },
}

/// Our connection to a peer's region, and what waits for it.
struct RConn<C> {
    conn: C,
    /// The reply's base and length, once connected.
    ready: Option<(u64, u64)>,
    queue: VecDeque<u64>,
}

pub(super) struct Rma {
    /// Its connection (peer, key).
    conn: (PeerId, u64),
    context: u64,
    op: RmaOp,
    addr: u64,
    buf: *mut u8,
    len: u64,
    /// Bytes posted; requests in flight; the registration of `buf`.
    off: u64,
    inflight: u32,
    /// Its buffer's registration and offset in it.
    mem: Option<(usize, u64)>,
    status: TagStatus,
}

/// The engine's one-sided state.
pub(super) struct Rmas<C, R> {
    /// Our regions by key.
    regions: HashMap<u64, R>,
    conns: HashMap<(PeerId, u64), RConn<C>>,
    /// The connections whose queues hold something (walked every turn, not all).
    waiting: HashSet<(PeerId, u64)>,
    pub(super) ops: IdMap<u64, Rma>,
    next: u64,
    turns: u32,
}

impl<C, R> Default for Rmas<C, R> {
    fn default() -> Self {
        Rmas {
            regions: HashMap::new(),
            conns: HashMap::new(),
            waiting: HashSet::new(),
            ops: IdMap::default(),
            next: 1,
            turns: 0,
        }
    }
}

impl<F: Fabric> Engine<F> {
    /// Exposes `len` bytes at `ptr` to peers holding the returned key, with `rights`
    /// (remote read, write, atomic). `virt`: peers address it by virtual address (its
    /// first byte is `ptr`), else by offset.
    ///
    /// # Safety
    /// The bytes stay valid until [`Engine::unexpose`] (or the engine's drop), and may
    /// change under the caller as peers write them.
    pub unsafe fn expose(
        &mut self,
        ptr: *mut u8,
        len: u64,
        rights: Rights,
        virt: bool,
    ) -> Result<RegionKey, TagError> {
        let n = usize::try_from(len)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| TagError::Invalid(format!("a region of {len} bytes")))?;
        let base = if virt { ptr as u64 } else { 0 };
        let mut reply = Vec::with_capacity(20);
        reply.extend_from_slice(&REGION_MAGIC.to_le_bytes());
        reply.extend_from_slice(&base.to_le_bytes());
        reply.extend_from_slice(&len.to_le_bytes());
        let mut last = None;
        // A random service; another draw when it is taken.
        for _ in 0..16 {
            let key =
                RegionKey(u64::from(random_u32()) << 32 | u64::from(0x8000_0000 | random_u32()));
            // SAFETY: the caller's contract.
            match unsafe {
                self.fab
                    .expose(ptr, n, rights, key.service(), &key.secret(), &reply)
            } {
                Ok(r) => {
                    self.rma.regions.insert(key.0, r);
                    return Ok(key);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(fabric(last.expect("tried")))
    }

    /// Stops exposing the region of `key` (its initiators' connections close; what
    /// they post after fails). False when no region has that key.
    pub fn unexpose(&mut self, key: RegionKey) -> bool {
        self.rma.regions.remove(&key.0).is_some()
    }

    /// Starts `op` on `len` bytes at `addr` of `dest`'s region `key`, with the local
    /// buffer `buf` (the source of a write, where a read or an atomic's old value
    /// lands; atomics: 8 bytes, `len` is ignored). Completes with `context`.
    ///
    /// # Safety
    /// The bytes at `buf` stay valid, and the caller neither writes them (nor, for a
    /// read or an atomic, reads them) until the operation's completion is polled.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rma(
        &mut self,
        dest: PeerId,
        op: RmaOp,
        key: RegionKey,
        addr: u64,
        buf: *mut u8,
        len: u64,
        context: u64,
    ) -> Result<(), TagError> {
        let Some(peer) = self.peers.get(dest.0 as usize) else {
            return Err(TagError::Invalid(format!("no peer {}", dest.0)));
        };
        let len = match op {
            RmaOp::Write | RmaOp::Read => len,
            _ if addr % 8 != 0 => {
                return Err(TagError::Invalid(format!(
                    "an atomic at {addr:#x}, not 8-aligned"
                )))
            }
            _ => 8,
        };
        if buf.is_null() && len > 0 {
            return Err(TagError::Invalid("a null local buffer".into()));
        }
        let k = (dest, key.0);
        if !self.rma.conns.contains_key(&k) {
            let to = super::PeerAddr {
                ip: peer.addr.ip,
                service: key.service(),
            };
            let conn = self.fab.connect_region(to, &key.secret()).map_err(fabric)?;
            self.rma.conns.insert(
                k,
                RConn {
                    conn,
                    ready: None,
                    queue: VecDeque::new(),
                },
            );
        }
        let id = self.rma.next;
        self.rma.next += 1;
        self.rma.ops.insert(
            id,
            Rma {
                conn: k,
                context,
                op,
                addr,
                buf,
                len,
                off: 0,
                inflight: 0,
                mem: None,
                status: TagStatus::Success,
            },
        );
        self.rma
            .conns
            .get_mut(&k)
            .expect("made")
            .queue
            .push_back(id);
        self.rma.waiting.insert(k);
        self.rma_push(k);
        Ok(())
    }

    /// A turn of one-sided work: what waits for a connection or for room, and now and
    /// then our regions' new initiators.
    pub(super) fn rma_progress(&mut self) {
        self.rma.turns = self.rma.turns.wrapping_add(1);
        if self.rma.turns % SERVE_EVERY == 0 {
            for r in self.rma.regions.values_mut() {
                self.fab.serve(r);
            }
        }
        if !self.rma.waiting.is_empty() {
            let keys: Vec<_> = self.rma.waiting.iter().copied().collect();
            for k in keys {
                self.rma_push(k);
            }
        }
    }

    /// Posts what `k`'s queue holds as far as its connection allows.
    fn rma_push(&mut self, k: (PeerId, u64)) {
        let Some(rc) = self.rma.conns.get_mut(&k) else {
            return;
        };
        if rc.ready.is_some() && !self.fab.state(&rc.conn).is_up() {
            // The region went (unexposed) or its node: what waits fails, and the next
            // operation connects again.
            let rc = self.rma.conns.remove(&k).expect("there");
            self.rma.waiting.remove(&k);
            for id in rc.queue {
                self.rma_end(id, TagStatus::Unreachable);
            }
            return;
        }
        if rc.ready.is_none() {
            match self.fab.state(&rc.conn) {
                ConnState::Connecting => return,
                ConnState::Normal => {
                    let r = self.fab.reply(&mut rc.conn);
                    if r.len() >= 20 && r[..4] == REGION_MAGIC.to_le_bytes() {
                        let at = |a: usize| u64::from_le_bytes(r[a..a + 8].try_into().expect("8"));
                        rc.ready = Some((at(4), at(12)));
                    }
                }
                _ => {}
            }
            if rc.ready.is_none() {
                // Refused (no region with that key there, or no answer), or not a
                // region's reply.
                let rc = self.rma.conns.remove(&k).expect("there");
                self.rma.waiting.remove(&k);
                for id in rc.queue {
                    self.rma_end(id, TagStatus::Refused);
                }
                return;
            }
        }
        while let Some(&id) = self.rma.conns[&k].queue.front() {
            if !self.rma_post(k, id) {
                return;
            }
            self.rma.conns.get_mut(&k).expect("there").queue.pop_front();
        }
        self.rma.waiting.remove(&k);
    }

    /// Posts `id`'s requests; true once it needs no more room (all posted, or ended).
    fn rma_post(&mut self, k: (PeerId, u64), id: u64) -> bool {
        let (base, rlen) = self.rma.conns[&k].ready.expect("connected");
        let t = &self.rma.ops[&id];
        let (addr, len, buf, mem) = (t.addr, t.len, t.buf, t.mem);
        let at = addr.wrapping_sub(base);
        if addr < base || at.checked_add(len).is_none_or(|e| e > rlen || e > 1 << 32) {
            self.rma_end(id, TagStatus::Refused);
            return true;
        }
        if len == 0 {
            self.rma_end(id, TagStatus::Success);
            return true;
        }
        let (m, off) = match mem {
            Some(m) => m,
            // SAFETY: the operation's contract: the buffer is ours until it completes,
            // and the registration's use ends before that (rma_end).
            None => match unsafe { self.pin(buf, len as usize) } {
                Ok(m) => {
                    self.rma.ops.get_mut(&id).expect("queued").mem = Some(m);
                    m
                }
                Err(()) => {
                    self.rma_end(id, TagStatus::Transport(WcStatus::LocalProtectionError));
                    return true;
                }
            },
        };
        let local = self.fab.mem_id(self.reg(m));
        let t = self.rma.ops.get_mut(&id).expect("queued");
        let conn = &self.rma.conns[&k].conn;
        while t.off < len {
            let n = (len - t.off).min(CHUNK);
            let (opcode, source, result) = match t.op {
                RmaOp::Write => (
                    WrOpcode::Write,
                    Source::Endpoint {
                        id: local,
                        offset: off + t.off,
                    },
                    None,
                ),
                RmaOp::Read => (WrOpcode::Read, Source::None, Some((local, off + t.off))),
                RmaOp::FetchAdd(add) => {
                    (WrOpcode::FetchAdd { add }, Source::None, Some((local, off)))
                }
                RmaOp::CmpSwap { compare, swap } => (
                    WrOpcode::CmpSwap { compare, swap },
                    Source::None,
                    Some((local, off)),
                ),
            };
            let wr = Wqe {
                wr_id: WR_RMA | id,
                opcode,
                flags: WR_SIGNALED,
                remote: Remote {
                    operand: (at + t.off) as u32,
                    ..Remote::default()
                },
                len: n as u32,
                source,
                result,
            };
            if !self.fab.post(conn, &wr) {
                return false;
            }
            t.off += n;
            t.inflight += 1;
        }
        true
    }

    /// A request of operation `id` completed.
    pub(super) fn rma_done(&mut self, id: u64, status: WcStatus) {
        debug_assert_eq!(id & WR_KIND, 0);
        let Some(t) = self.rma.ops.get_mut(&id) else {
            return;
        };
        t.inflight = t.inflight.saturating_sub(1);
        if status != WcStatus::Success && t.status == TagStatus::Success {
            t.status = match status {
                WcStatus::RemoteAccessError
                | WcStatus::RemoteOperationError
                | WcStatus::RemoteInvalidRequest => TagStatus::Refused,
                s => TagStatus::Transport(s),
            };
        }
        if t.inflight == 0 && (t.off >= t.len || t.status != TagStatus::Success) {
            let st = t.status;
            // What is still queued of it (a failure half way) is dropped with it.
            if t.off < t.len {
                let k = t.conn;
                if let Some(rc) = self.rma.conns.get_mut(&k) {
                    rc.queue.retain(|&q| q != id);
                }
            }
            self.rma_end(id, st);
        }
    }

    /// Completes operation `id` with `status` and forgets it.
    fn rma_end(&mut self, id: u64, status: TagStatus) {
        let Some(t) = self.rma.ops.remove(&id) else {
            return;
        };
        if let Some((m, _)) = t.mem {
            self.unpin(m);
        }
        let op = match t.op {
            RmaOp::Write => TagOp::Write,
            RmaOp::Read => TagOp::Read,
            _ => TagOp::Atomic,
        };
        self.done.push_back(TagCompletion {
            context: t.context,
            op,
            tagged: false,
            status,
            len: if status == TagStatus::Success {
                t.len
            } else {
                0
            },
            olen: t.len,
            tag: 0,
            data: None,
            src: None,
        });
    }
}
