//! Connections, work requests and completion queues.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit_transport::cm::PrivateData;
use deposit_transport::connection::{
    shard_of_conn, Completion, ConnShared, ConnState, CqShared, Source, WrOpcode,
};
use deposit_transport::wire::cell::{flags, AddrMode};

use crate::device::DeviceInner;
use crate::idle::wait_for;
use crate::{Endpoint, Error, WorkRequest};

/// A completion queue. Several connections may share one.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) shared: Arc<CqShared>,
}

impl CompletionQueue {
    pub(crate) fn new(dev: Arc<DeviceInner>, depth: usize) -> Self {
        // Its pushes signal the device's wait fd when armed ([`crate::Device::wait_fd`]).
        let shared = CqShared::with_wait_fd(depth, &dev.wait_fd);
        CompletionQueue { dev, shared }
    }

    /// Takes up to `out.len()` completions; drives progress first in inline mode.
    #[inline]
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        if self.shared.is_empty() {
            self.dev.progress();
        }
        self.poll_queued(out)
    }

    /// Takes up to `out.len()` completions already queued, without driving the
    /// device: for a caller that drives an inline device itself
    /// ([`Device::progress`](crate::Device::progress)) and wants that to be the
    /// only turn it takes (an acknowledgement owed waits a turn for a reply to carry
    /// it; a second turn at once sends it alone).
    #[inline]
    pub fn poll_queued(&self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        // `is_empty` is two plain loads; a `pop` that finds the queue empty also pays a
        // full fence, which this loop would otherwise pay on every poll.
        while n < out.len() && !self.shared.is_empty() {
            match self.shared.pop() {
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
        if let Some(c) = self.take() {
            return Some(c);
        }
        self.dev.progress();
        self.take()
    }

    /// The oldest completion queued, without driving the device (an empty queue costs
    /// two plain loads: `pop` on it would also pay a full fence).
    #[inline]
    fn take(&self) -> Option<Completion> {
        if self.shared.is_empty() {
            return None;
        }
        self.shared.pop()
    }

    /// Waits up to `timeout` for one completion.
    ///
    /// It polls (driving progress, inline) while the wait is short, then — with a
    /// dedicated worker — sleeps until the worker queues a completion, or — inline —
    /// naps between polls (`idle`).
    pub fn wait_one(&self, timeout: Duration) -> Option<Completion> {
        let deadline = Instant::now() + timeout;
        wait_for(
            &self.dev,
            deadline,
            || self.take(),
            |d| self.shared.wait_pop(d),
        )
    }

    /// Entries the queue holds: at most this many signaled work requests may be
    /// outstanding (posted and their completions not yet polled) on the connections
    /// that share it; posting one more fails with [`Error::CompletionQueueFull`].
    pub fn depth(&self) -> usize {
        self.shared.capacity()
    }

    /// Completions that found the queue full and waited for room, each counted (also
    /// those that queued behind one already waiting). Only a failed unsignaled
    /// request, which reserves no room, fills the queue past what was promised: its
    /// completion, and those after it (signaled ones too), wait — in their
    /// connection, or in the device once the connection is gone — and are reported,
    /// in order, as polling frees room. Never dropped.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use deposit::{Device, DeviceConfig, Rights, WcStatus, WorkRequest};
    /// # fn main() -> Result<(), deposit::Error> {
    /// # let server = Device::open(DeviceConfig::new("ring:waits:a", [10, 0, 0, 1]))?;
    /// # let client = Device::open(DeviceConfig::new("ring:waits:b", [10, 0, 0, 2]))?;
    /// # let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    /// # let scq = server.create_cq(16);
    /// # let listener = server.listen(1, &sep, &scq)?;
    /// # let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    /// let cq = client.create_cq(2);
    /// let conn = client.connect([10, 0, 0, 1], 1, &cep, &cq)?;
    /// # let _accepted = listener.accept(Duration::from_secs(5))?;
    /// // Five unsignaled writes past the end of the peer's 4096 bytes: each fails, and
    /// // a failed request completes, signaled or not.
    /// for id in 0..5 {
    ///     conn.post(&WorkRequest::write_inline(id, &[1; 8], 4092)?)?;
    /// }
    /// // Nothing polled: two fit, and each of the other three waits.
    /// let t0 = std::time::Instant::now();
    /// while cq.waits() < 3 && t0.elapsed() < Duration::from_secs(5) {
    ///     client.progress();
    ///     server.progress();
    /// }
    /// assert_eq!(cq.waits(), 3);
    /// // Polled, they all come, in order.
    /// let got: Vec<_> =
    ///     std::iter::from_fn(|| cq.wait_one(Duration::from_secs(1))).take(5).collect();
    /// assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    /// assert!(got.iter().all(|c| c.status == WcStatus::RemoteAccessError && !c.signaled));
    /// # Ok(()) }
    /// ```
    pub fn waits(&self) -> u64 {
        self.shared.waits.load(Ordering::Relaxed)
    }

    /// Completions dropped: always 0 while the application holds the queue (a
    /// completion that finds it full waits until polling makes room, also after its
    /// connection is gone). It counts completions that waited after their connection
    /// went and whose queue then lost every handle, which nothing could poll.
    pub fn overflows(&self) -> u64 {
        self.shared.overflows.load(Ordering::Relaxed)
    }
}

/// A connection: authorises traffic between a local and a remote endpoint.
///
/// It lives as long as this handle: dropping it closes the connection (a disconnect
/// request to the peer, whose later posts complete with an error and whose event
/// queue sees [`crate::ConnState::Closed`]). So `let _ = listener.accept(t)?;`
/// accepts a connection and closes it at once; keep it (`let conn = ...`) for as long
/// as the peer should reach the endpoint. A call whose connection is thrown away
/// unnamed is a warning:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn serve(listener: &deposit::Listener) -> Result<(), deposit::Error> {
///     listener.accept(std::time::Duration::from_secs(5))?; // accepted, then closed
///     Ok(())
/// }
/// ```
#[must_use = "dropping a Connection closes it (the peer sees it closed); keep it while it is used"]
pub struct Connection {
    dev: Arc<DeviceInner>,
    shared: Arc<ConnShared>,
    // Keeps the endpoint (and its table entry) alive while the connection exists.
    ep: Endpoint,
    cq: CompletionQueue,
    /// What the peer sent in its connect request or reply.
    private: PrivateData,
}

/// How many posted requests of a connection wait for the worker before a post drives
/// a turn itself (inline progress; see [`Connection::post`]). Half of perftest's
/// default transmit depth of 128: a window of 128 built as one frame left the peer
/// idle while it was built, and the sender while the peer took it.
pub const INLINE_DOORBELL: usize = 64;

impl Connection {
    pub(crate) fn new(
        dev: Arc<DeviceInner>,
        shared: Arc<ConnShared>,
        ep: Endpoint,
        cq: CompletionQueue,
        private: PrivateData,
    ) -> Self {
        Connection {
            dev,
            shared,
            ep,
            cq,
            private,
        }
    }

    /// The private data the peer sent: the accepted request's on the listening side,
    /// the listener's reply's on the connecting side ([`crate::ConnOptions::private_data`];
    /// empty when it sent none).
    pub fn private_data(&self) -> &[u8] {
        self.private.as_deref().unwrap_or(&[])
    }

    /// Posts a work request (the "go"). Fails at once, with nothing queued, when the
    /// send queue is full, a signaled request finds no room left in the completion
    /// queue (every slot promised to outstanding signaled requests: poll first), the
    /// connection is not usable or the request cannot be carried.
    ///
    /// Inline progress: every [`INLINE_DOORBELL`]th request of a connection waiting
    /// for the worker drives a turn here, as a doorbell starts a NIC, so that the first
    /// requests of a long burst are on the wire (and the peer works on them) while the
    /// application posts the rest.
    #[inline]
    pub fn post(&self, req: &WorkRequest) -> Result<(), Error> {
        self.post_list(std::slice::from_ref(req))
    }

    /// Posts `reqs` in order, all or none, like a verbs list of work requests: each is
    /// checked as by [`Connection::post`], then the list takes its places in the send
    /// queue, the completion slots of its signaled requests and its places on the
    /// shard's submission ring at once — one reservation of each instead of one per
    /// request. Fails, with nothing queued, for the reasons `post` does, or when the
    /// list is longer than the send queue or the submission ring. An empty list posts
    /// nothing.
    ///
    /// Inline progress: a list that brings the requests waiting for the worker to or
    /// past a multiple of [`INLINE_DOORBELL`] drives a turn, as `post` does.
    #[inline]
    pub fn post_list(&self, reqs: &[WorkRequest]) -> Result<(), Error> {
        check_postable(&self.shared)?;
        for r in reqs {
            check_request(r)?;
            check_local(r, &self.shared)?;
        }
        let n = reqs.len();
        self.dev.post_with(|| {
            let waiting = self
                .shared
                .post_list(reqs.iter().map(|r| &r.wr))
                .map_err(Error::from_post)?;
            Ok(n > 0 && (waiting - n) / INLINE_DOORBELL != waiting / INLINE_DOORBELL)
        })
    }

    pub(crate) fn shared(&self) -> &Arc<ConnShared> {
        &self.shared
    }

    pub(crate) fn device(&self) -> &Arc<DeviceInner> {
        &self.dev
    }
}

/// Whether a connection takes work requests now.
#[inline]
pub(crate) fn check_postable(shared: &ConnShared) -> Result<(), Error> {
    let state = shared.state();
    if !state.is_up() {
        return Err(Error::NotConnected(state));
    }
    Ok(())
}

/// Whether the local endpoints `req` names are the connection's shard's: an endpoint
/// number means nothing in another shard's table (it may name another endpoint there,
/// which the request would then read or fill). Allocate them with
/// `Device::alloc_endpoint_on` (or use the connection's own endpoint's shard).
#[inline]
pub(crate) fn check_local(req: &WorkRequest, shared: &ConnShared) -> Result<(), Error> {
    let shard = u16::from(deposit_transport::connection::shard_of_conn(shared.number));
    match req.local_shard {
        crate::wr::NO_LOCAL => Ok(()),
        s if s == shard => Ok(()),
        crate::wr::MIXED_LOCAL => Err(Error::InvalidArgument(
            "the request's local endpoints are on different shards".into(),
        )),
        s => Err(Error::InvalidArgument(format!(
            "the request's local endpoint is on shard {s}, the connection on shard {shard}: \
             allocate it with Device::alloc_endpoint_on({shard}, ..)"
        ))),
    }
}

/// Checks what can be checked of a request before it is queued (the worker checks the
/// rest: local ranges against their endpoints).
#[inline]
pub(crate) fn check_request(req: &WorkRequest) -> Result<(), Error> {
    let wr = &req.wr;
    {
        let direct = AddrMode::from_flags(wr.remote.mode_flags) == AddrMode::Direct
            && wr.remote.mode_flags & flags::REG_TARGET == 0;
        if direct
            && matches!(wr.opcode, WrOpcode::Write | WrOpcode::Read)
            && u64::from(wr.remote.operand) + u64::from(wr.len) > u64::from(u32::MAX) + 1
        {
            return Err(Error::InvalidArgument(format!(
                "remote range {}+{} beyond the 32-bit offset space",
                wr.remote.operand, wr.len
            )));
        }
        if matches!(
            wr.opcode,
            WrOpcode::Invoke { .. } | WrOpcode::TokenWrite { .. } | WrOpcode::TokenRead { .. }
        ) && (wr.remote.compound.is_some() || wr.remote.mode_flags != 0)
        {
            // The receiver's instruction (or token) decides the operation.
            return Err(Error::InvalidArgument(
                "an instruction-pointer or token request carries no address mode, \
                 register operation or conditional"
                    .into(),
            ));
        }
        if let Source::Endpoint { offset, .. } = wr.source {
            if offset.checked_add(u64::from(wr.len)).is_none() {
                return Err(Error::InvalidArgument("local range overflows".into()));
            }
        }
    }
    Ok(())
}

impl Connection {
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
    /// Whether the connection's frames are sealed ([`ConnOptions::secure`]: asked
    /// for by this side or by the peer).
    ///
    /// [`ConnOptions::secure`]: crate::ConnOptions::secure
    pub fn is_secure(&self) -> bool {
        self.shared.secure.load(Ordering::Relaxed)
    }
    /// The peer's identity key, as the connection's handshake proved it (the peer
    /// holds its private half).
    pub fn peer_key(&self) -> Option<crate::IdentityKey> {
        self.shared.peer_identity.get().map(|b| b.0)
    }
    /// Whether the peer's key was known before the handshake: pinned
    /// ([`ConnOptions::peer_key`](crate::ConnOptions) or the known peers) on the
    /// connecting side; always on the accepting side (the client proved its key, which
    /// [`ConnOptions::authorized_keys`](crate::ConnOptions) may restrict). False for a
    /// connect whose listener key was taken on first use or unverified from the
    /// listener's challenge.
    pub fn peer_key_verified(&self) -> bool {
        self.shared.peer_identity.get().is_some_and(|b| b.1)
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

    /// Messages from the peer refused on this connection (sticky, never reset).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// After the host repaired the fault that exceptioned this connection (made the
    /// page present, drained the event queue), runs the kept message — exactly once, in
    /// order — and lets the peer's later messages in again.
    pub fn resume(&self) -> Result<(), Error> {
        let number = self.shared.number;
        Ok(self
            .dev
            .call_on(shard_of_conn(number), move |w| w.resume(number))?)
    }

    /// Closes the connection, and tells the peer (whose outstanding requests then
    /// complete the same way).
    ///
    /// Every request still outstanding completes at once on the completion queue,
    /// signaled or not: [`WcStatus::Unacknowledged`](crate::WcStatus) when a message of
    /// it was transmitted — the peer may have run it, wholly or in part —, and
    /// [`WcStatus::Flushed`](crate::WcStatus) when none was (posted, not yet sent: it
    /// certainly did not run). Those the peer had acknowledged completed already, as
    /// usual. Later posts fail with [`Error::NotConnected`]. Keep the completion
    /// queue to poll them: they wait there (never dropped) however full it is.
    pub fn close(&self) {
        let number = self.shared.number;
        let _ = self
            .dev
            .call_on(shard_of_conn(number), move |w| w.close(number));
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if matches!(
            self.shared.state(),
            ConnState::Normal | ConnState::Exceptioned | ConnState::Error
        ) {
            self.close();
        }
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("depth", &self.depth())
            .field("overflows", &self.overflows())
            .finish()
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("local_number", &self.local_number())
            .field("remote_number", &self.remote_number())
            .field("state", &self.state())
            .field("endpoint", &self.ep.id())
            .field("private_data", &self.private_data().len())
            .finish()
    }
}
