//! Connections, work requests and completion queues.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::connection::{
    Completion, ConnShared, ConnState, CqShared, Source, WorkRequest, WrOpcode, WR_SIGNALED,
};

use crate::device::DeviceInner;
use crate::{Endpoint, Error};

/// A completion queue. Several connections may share one.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) shared: Arc<CqShared>,
}

impl CompletionQueue {
    pub(crate) fn new(dev: Arc<DeviceInner>, depth: usize) -> Self {
        CompletionQueue {
            dev,
            shared: CqShared::new(depth),
        }
    }

    /// Takes up to `out.len()` completions; drives progress first in inline mode.
    #[inline]
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        if self.shared.queue.is_empty() {
            self.dev.progress();
        }
        let mut n = 0;
        while n < out.len() {
            match self.shared.queue.pop() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Takes one completion, if any.
    #[inline]
    pub fn poll_one(&self) -> Option<Completion> {
        if let Some(c) = self.shared.queue.pop() {
            return Some(c);
        }
        self.dev.progress();
        self.shared.queue.pop()
    }

    /// Waits up to `timeout` for one completion.
    pub fn wait_one(&self, timeout: Duration) -> Option<Completion> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.poll_one() {
                return Some(c);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Completions lost because the queue was full (size it for the outstanding work).
    pub fn overflows(&self) -> u64 {
        self.shared.overflows.load(Ordering::Relaxed)
    }
}

/// A write work request (the seed's send registers: opcode, operand, size, mode).
#[derive(Debug, Clone, Copy)]
pub struct WriteRequest {
    pub(crate) wr: WorkRequest,
}

impl WriteRequest {
    /// Write `len` bytes from `local` at `local_offset` to the remote endpoint at
    /// `remote_offset`. The local range must not change until the request completes.
    pub fn from_endpoint(
        wr_id: u64,
        local: &Endpoint,
        local_offset: u64,
        len: u32,
        remote_offset: u32,
    ) -> Self {
        WriteRequest {
            wr: WorkRequest::write(
                wr_id,
                Source::Endpoint {
                    id: local.0.id,
                    offset: local_offset,
                },
                len,
                remote_offset,
            ),
        }
    }

    /// Write up to 32 bytes carried in the request itself.
    pub fn inline(wr_id: u64, data: &[u8], remote_offset: u32) -> Result<Self, Error> {
        if data.len() > 32 {
            return Err(Error::InvalidArgument(format!(
                "inline data of {} bytes (at most 32)",
                data.len()
            )));
        }
        let mut block = [0u8; 32];
        block[..data.len()].copy_from_slice(data);
        Ok(WriteRequest {
            wr: WorkRequest::write(
                wr_id,
                Source::Inline(block),
                data.len() as u32,
                remote_offset,
            ),
        })
    }

    /// Write words of one 32-byte block under an 8-bit mask: word i (4 bytes at
    /// `remote_offset + 4*i`) is written when bit i of `mask` is set.
    pub fn masked(wr_id: u64, block: [u8; 32], mask: u8, remote_offset: u32) -> Self {
        WriteRequest {
            wr: WorkRequest {
                opcode: WrOpcode::WriteMasked { mask },
                ..WorkRequest::write(wr_id, Source::Inline(block), 32, remote_offset)
            },
        }
    }

    /// Ask for a completion on success too (errors always complete).
    pub fn signaled(mut self) -> Self {
        self.wr.flags |= WR_SIGNALED;
        self
    }
    /// Sets or clears the signaled flag.
    pub fn set_signaled(&mut self, on: bool) {
        if on {
            self.wr.flags |= WR_SIGNALED;
        } else {
            self.wr.flags &= !WR_SIGNALED;
        }
    }
    /// Changes the request id.
    pub fn set_wr_id(&mut self, id: u64) {
        self.wr.wr_id = id;
    }
    /// Changes the remote offset.
    pub fn set_remote_offset(&mut self, off: u32) {
        self.wr.remote.operand = off;
    }
}

/// A connection: authorises traffic between a local and a remote endpoint.
pub struct Connection {
    dev: Arc<DeviceInner>,
    shared: Arc<ConnShared>,
    // Keeps the endpoint (and its table entry) alive while the connection exists.
    ep: Endpoint,
    cq: CompletionQueue,
}

impl Connection {
    pub(crate) fn new(
        dev: Arc<DeviceInner>,
        shared: Arc<ConnShared>,
        ep: Endpoint,
        cq: CompletionQueue,
    ) -> Self {
        Connection {
            dev,
            shared,
            ep,
            cq,
        }
    }

    /// Posts a write (the "go"). Fails at once, with nothing queued, when the send
    /// queue is full or the connection is not usable.
    #[inline]
    pub fn post_write(&self, req: &WriteRequest) -> Result<(), Error> {
        let wr = &req.wr;
        let state = self.shared.state();
        if state != ConnState::Normal {
            return Err(Error::NotConnected(state));
        }
        if (wr.remote.operand as u64) + (wr.len as u64) > u32::MAX as u64 + 1 {
            return Err(Error::InvalidArgument(format!(
                "remote range {}+{} beyond the 32-bit offset space",
                wr.remote.operand, wr.len
            )));
        }
        if let Source::Endpoint { id, offset } = wr.source {
            if id != self.ep.0.id && offset.checked_add(wr.len as u64).is_none() {
                return Err(Error::InvalidArgument("local range overflows".into()));
            }
        }
        self.shared.sq.push(*wr).map_err(|_| Error::SendQueueFull {
            depth: self.shared.sq.capacity(),
        })
    }

    /// Messages (work requests) that have arrived complete on this connection — the
    /// receiver polls this instead of taking an event.
    #[inline]
    pub fn arrivals(&self) -> u64 {
        self.shared.arrivals.load(Ordering::Acquire)
    }
    /// Connection state.
    pub fn state(&self) -> ConnState {
        self.shared.state()
    }
    /// Local connection number.
    pub fn local_number(&self) -> u32 {
        self.shared.number
    }
    /// The key frames on this connection must carry. It is the local application's
    /// own secret (like a verbs rkey it may hand out); the peer learned it at connect.
    pub fn local_key(&self) -> u64 {
        self.shared.key.load(Ordering::Relaxed)
    }
    /// The peer's connection number.
    pub fn remote_number(&self) -> u32 {
        self.shared.peer_conn.load(Ordering::Relaxed) as u32
    }
    /// The local endpoint remote operations act on.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }
    /// The completion queue.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }
    /// Drives progress (inline mode).
    #[inline]
    pub fn progress(&self) -> usize {
        self.dev.progress()
    }

    /// Closes the connection: outstanding work completes as flushed, the peer is told.
    pub fn close(&self) {
        let _ = self.dev.lock().close(self.shared.number);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if matches!(self.shared.state(), ConnState::Normal | ConnState::Error) {
            self.close();
        }
    }
}
