//! Mailboxes in C: tagged and untagged two-sided messaging with matching
//! (`deposit::Mailbox`). Peers are numbered by the mailbox (`dd_mailbox_peer`);
//! buffers are the caller's, zero copy unless `DD_MB_INJECT` says otherwise.

use std::ffi::{c_char, c_int, c_void};

use api::{
    Mailbox, MailboxConfig, PeerAddr, PeerId, RegionKey, RmaOp, Selector, TagCompletion, TagOp,
    TagStatus,
};

use crate::{dd_device, guard, guard_count, invalid, obj, path, put, Fail};

/// A mailbox (`dd_mailbox_open`); used from one thread at a time.
pub struct dd_mailbox(Mailbox);

/// How a mailbox is made (`dd_mailbox_config_init` fills in the defaults).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dd_mailbox_config {
    /// The service number its listener takes (what peers name it by, with the node's
    /// address, IPv4 or IPv6).
    pub service: u32,
    /// Bytes per ring slot, a power of two (0, the default: the largest up to 8 KiB
    /// one message of the device carries).
    pub slot: u32,
    /// Ring slots, a power of two (default 1024): what all senders together may have
    /// outstanding.
    pub slots: u32,
    /// Most slots one sender holds at once (default 32).
    pub burst: u32,
    /// Messages up to this many bytes go through the ring (in as many slots as they
    /// need, at most 64), longer ones by rendezvous (0, the default: whole slots
    /// carrying at least 16 KiB).
    pub eager_max: u32,
    /// Staging slots for what it sends (default 256).
    pub stage: u32,
    /// Its connections are secure (sealed), both ways (default false).
    pub secure: bool,
    /// Connecting: a peer's identity key not pinned by the device's known-peers file is
    /// taken on first use (default false: such a secure connect fails).
    pub trust_on_first_use: bool,
    /// A file of the identity keys whose nodes may connect (others are refused); NULL
    /// (the default): any.
    pub authorized_keys_path: *const c_char,
}

/// Send and receive flag: a tagged message (`FI_TAGGED`); untagged ones (`FI_MSG`)
/// match untagged receives only.
pub const DD_MB_TAGGED: u32 = 1;
/// Send flag: `imm` is the sender's immediate data (delivered with the receive's
/// completion, `DD_MB_DATA` in its flags).
pub const DD_MB_DATA: u32 = 2;
/// Send flag: copy the bytes before returning (the buffer is free at once).
pub const DD_MB_INJECT: u32 = 4;
/// A receive's or probe's source: any peer.
pub const DD_MB_ANY_SOURCE: u32 = u32::MAX;

/// A completion's operation.
pub const DD_MB_OP_SEND: u32 = 0;
pub const DD_MB_OP_RECV: u32 = 1;
/// One-sided operations (`dd_mailbox_rma`): a write, a read, an atomic.
pub const DD_MB_OP_WRITE: u32 = 2;
pub const DD_MB_OP_READ: u32 = 3;
pub const DD_MB_OP_ATOMIC: u32 = 4;

/// `dd_mailbox_rma`'s operations: write `len` bytes from `buf`; read `len` bytes into
/// `buf`; add `operand` to the 8-byte word; swap it for `operand` if it equals
/// `compare` (atomics: the old value into the 8 bytes at `buf`, native byte order).
pub const DD_RMA_WRITE: u32 = 0;
pub const DD_RMA_READ: u32 = 1;
pub const DD_RMA_FETCH_ADD: u32 = 2;
pub const DD_RMA_CMP_SWAP: u32 = 3;

/// Completion status: the whole message.
pub const DD_MB_SUCCESS: i32 = 0;
/// The message was longer than the receive's buffer: `len` bytes landed, `olen` says
/// how long it was.
pub const DD_MB_TRUNCATED: i32 = 1;
/// The receive was cancelled before a message took it.
pub const DD_MB_CANCELLED: i32 = 2;
/// The peer could not be reached (`dd_mailbox_peer_error` says why).
pub const DD_MB_UNREACHABLE: i32 = 3;
/// The transport failed the transfer: `wc_status` is its `DD_WC_*` status.
pub const DD_MB_TRANSPORT: i32 = 4;
/// The receiver refused the message (its read of it failed).
pub const DD_MB_REFUSED: i32 = 5;

/// A send's or receive's completion.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dd_tag_completion {
    /// The context the send or receive was posted with.
    pub context: u64,
    /// `DD_MB_OP_SEND` or `DD_MB_OP_RECV`.
    pub op: u32,
    /// `DD_MB_TAGGED` (a tagged message), `DD_MB_DATA` (`data` holds the sender's
    /// immediate data).
    pub flags: u32,
    /// `DD_MB_SUCCESS` .. `DD_MB_REFUSED`.
    pub status: i32,
    /// With `DD_MB_TRANSPORT`: the transport's `DD_WC_*` status (else 0).
    pub wc_status: i32,
    /// Bytes sent, or placed in the receive's buffer.
    pub len: u64,
    /// Receives: the message's length (more than `len` when truncated).
    pub olen: u64,
    pub tag: u64,
    pub data: u64,
    /// Receives: the sender's peer number (`DD_MB_ANY_SOURCE` for sends).
    pub src: u32,
}

/// What a probe saw of a waiting message.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dd_msg_info {
    /// The sender's peer number.
    pub src: u32,
    /// `DD_MB_DATA` when `data` holds the sender's immediate data.
    pub flags: u32,
    pub tag: u64,
    /// The whole message's length.
    pub len: u64,
    pub data: u64,
}

fn info(i: &api::MsgInfo) -> dd_msg_info {
    dd_msg_info {
        src: i.src.0,
        flags: if i.data.is_some() { DD_MB_DATA } else { 0 },
        tag: i.tag,
        len: i.len,
        data: i.data.unwrap_or(0),
    }
}

fn completion(c: &TagCompletion) -> dd_tag_completion {
    let (status, wc) = match c.status {
        TagStatus::Success => (DD_MB_SUCCESS, 0),
        TagStatus::Truncated => (DD_MB_TRUNCATED, 0),
        TagStatus::Cancelled => (DD_MB_CANCELLED, 0),
        TagStatus::Unreachable => (DD_MB_UNREACHABLE, 0),
        TagStatus::Transport(s) => (DD_MB_TRANSPORT, crate::wc_code(s)),
        TagStatus::Refused => (DD_MB_REFUSED, 0),
    };
    dd_tag_completion {
        context: c.context,
        op: match c.op {
            TagOp::Send => DD_MB_OP_SEND,
            TagOp::Recv => DD_MB_OP_RECV,
            TagOp::Write => DD_MB_OP_WRITE,
            TagOp::Read => DD_MB_OP_READ,
            TagOp::Atomic => DD_MB_OP_ATOMIC,
        },
        flags: if c.tagged { DD_MB_TAGGED } else { 0 }
            | if c.data.is_some() { DD_MB_DATA } else { 0 },
        status,
        wc_status: wc,
        len: c.len,
        olen: c.olen,
        tag: c.tag,
        data: c.data.unwrap_or(0),
        src: c.src.map_or(DD_MB_ANY_SOURCE, |p| p.0),
    }
}

/// A caller's buffer: NULL only when it is empty.
fn check_buf(buf: *const c_void, len: usize) -> Result<(), Fail> {
    if buf.is_null() && len > 0 {
        return Err(invalid("buf is NULL"));
    }
    Ok(())
}

/// A probe's answer: 1 with what it found in `*out`, 0 for nothing.
unsafe fn found(i: Option<api::MsgInfo>, out: *mut dd_msg_info) -> Result<c_int, Fail> {
    match i {
        Some(i) => put(out, info(&i), "out").map(|()| 1),
        None => Ok(0),
    }
}

fn selector(src: u32, tag: u64, ignore: u64) -> Selector {
    Selector {
        src: (src != DD_MB_ANY_SOURCE).then_some(PeerId(src)),
        tag,
        ignore,
    }
}

unsafe fn mb<'a>(m: *mut dd_mailbox) -> Result<&'a mut Mailbox, Fail> {
    m.as_mut()
        .map(|m| &mut m.0)
        .ok_or_else(|| invalid("mailbox is NULL"))
}

/// Fills `cfg` with the defaults, listening on `service`. Returns `DD_OK`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_config_init(
    cfg: *mut dd_mailbox_config,
    service: u32,
) -> c_int {
    let d = MailboxConfig::new(service);
    guard(|| {
        put(
            cfg,
            dd_mailbox_config {
                service,
                slot: d.slot,
                slots: d.slots,
                burst: d.burst,
                eager_max: d.eager_max,
                stage: d.stage,
                secure: false,
                trust_on_first_use: false,
                authorized_keys_path: std::ptr::null(),
            },
            "cfg",
        )
    })
}

/// Opens a mailbox on `dev` (its ring in an endpoint of its own, a listener on
/// `cfg->service`) into `*out`. Returns `DD_OK` or a `DD_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_open(
    dev: *const dd_device,
    cfg: *const dd_mailbox_config,
    out: *mut *mut dd_mailbox,
) -> c_int {
    guard(|| {
        let dev = &obj(dev, "dev")?.0;
        let c = *obj(cfg, "cfg")?;
        let mut conn = api::ConnOptions {
            secure: c.secure,
            trust_on_first_use: c.trust_on_first_use,
            ..api::ConnOptions::default()
        };
        if let Some(p) = path(c.authorized_keys_path, "cfg->authorized_keys_path")? {
            conn.authorized_keys = Some(
                api::load_authorized_keys(&p)
                    .map_err(|e| invalid(format!("authorized keys {}: {e}", p.display())))?,
            );
        }
        let m = dev.mailbox(&MailboxConfig {
            service: c.service,
            slot: c.slot,
            slots: c.slots,
            burst: c.burst,
            eager_max: c.eager_max,
            stage: c.stage,
            conn,
        })?;
        put(out, Box::into_raw(Box::new(dd_mailbox(m))), "out")
    })
}

/// Drives progress until nothing of the mailbox's is in flight or owed to its peers
/// (sends, one-sided operations, rendezvous reads, FINs and credit reads all done and
/// acknowledged) or `timeout_ms` passed. Returns 1 (flushed), 0 (timed out) or a
/// `DD_ERR_*` code. Completions stay queued for `dd_mailbox_poll`. Call it before
/// `dd_mailbox_close` when peers may still be reading this mailbox's buffers.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_flush(m: *mut dd_mailbox, timeout_ms: u32) -> c_int {
    guard_count(|| {
        let m = mb(m)?;
        Ok(c_int::from(m.flush(std::time::Duration::from_millis(
            u64::from(timeout_ms),
        ))))
    })
}

/// Closes a mailbox (NULL: nothing) at once. Sends and receives not completed are
/// dropped (poll them first), and what its peers were still owed is not sent:
/// `dd_mailbox_flush` first.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_close(m: *mut dd_mailbox) {
    crate::release(m);
}

/// The mailbox's address: the node's IPv4 address (4 bytes, network order) into
/// `ip` and its service into `*service`. A mailbox on an IPv6 device fails
/// (`DD_ERR_INVALID`): `dd_mailbox_addr6` gives an address of either family.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_addr(
    m: *const dd_mailbox,
    ip: *mut u8,
    service: *mut u32,
) -> c_int {
    guard(|| {
        let a = obj(m, "mailbox")?.0.addr();
        put(ip.cast::<[u8; 4]>(), v4(a, "dd_mailbox_addr")?, "ip")?;
        put(service, a.service, "service")
    })
}

/// `a`'s IPv4 address for a function of 4-byte addresses (`what`), or the error that
/// names the function of 16 bytes to use instead.
fn v4(a: PeerAddr, what: &str) -> Result<[u8; 4], Fail> {
    match a.ip {
        std::net::IpAddr::V4(ip) => Ok(ip.octets()),
        std::net::IpAddr::V6(ip) => Err(invalid(format!(
            "{what}: {ip} is an IPv6 address, which 4 bytes cannot hold: use {what}6"
        ))),
    }
}

/// Bytes up to which a message goes eager (through the ring); longer ones go by
/// rendezvous.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_eager_max(m: *const dd_mailbox) -> u32 {
    m.as_ref().map_or(0, |m| m.0.eager_max())
}

/// The peer number of the mailbox at `ip` (4 bytes, network order) and `service`
/// into `*peer` (the same number for the same address; connected on first use). IPv6
/// peers: `dd_mailbox_peer6`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peer(
    m: *mut dd_mailbox,
    ip: *const u8,
    service: u32,
    peer: *mut u32,
) -> c_int {
    guard(|| peer_at::<4>(m, ip, "ip", service, peer))
}

/// The peer number of the mailbox at the `N`-byte address `ip` (named `what`) and
/// `service` into `*peer`: `dd_mailbox_peer` and `dd_mailbox_peer6`.
unsafe fn peer_at<const N: usize>(
    m: *mut dd_mailbox,
    ip: *const u8,
    what: &str,
    service: u32,
    peer: *mut u32,
) -> Result<(), Fail>
where
    [u8; N]: Into<std::net::IpAddr>,
{
    let m = mb(m)?;
    if ip.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    let a: [u8; N] = ip.cast::<[u8; N]>().read_unaligned();
    let p = m.peer(PeerAddr::new(a, service));
    put(peer, p.0, "peer")
}

/// The address of mailbox `m`'s peer number `peer`.
unsafe fn peer_addr_of(m: *const dd_mailbox, peer: u32) -> Result<PeerAddr, Fail> {
    obj(m, "mailbox")?
        .0
        .peer_addr(PeerId(peer))
        .ok_or_else(|| invalid(format!("no peer {peer}")))
}

/// The address of peer number `peer` (as `dd_mailbox_addr`: an IPv6 peer fails,
/// `dd_mailbox_peer_addr6` gives it).
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peer_addr(
    m: *const dd_mailbox,
    peer: u32,
    ip: *mut u8,
    service: *mut u32,
) -> c_int {
    guard(|| {
        let a = peer_addr_of(m, peer)?;
        put(ip.cast::<[u8; 4]>(), v4(a, "dd_mailbox_peer_addr")?, "ip")?;
        put(service, a.service, "service")
    })
}

/// `a`'s address as 16 bytes in address order: an IPv6 address, or an IPv4 one mapped
/// (`::ffff:a.b.c.d`).
fn v6(a: PeerAddr) -> [u8; 16] {
    match a.ip {
        std::net::IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(ip) => ip.octets(),
    }
}

/// [`dd_mailbox_addr`] of either family: the node's address as 16 bytes in address
/// order (a `struct in6_addr`'s) into `ip6` — an IPv6 address, or an IPv4 one
/// IPv4-mapped (`::ffff:a.b.c.d`) — and its service into `*service`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_addr6(
    m: *const dd_mailbox,
    ip6: *mut u8,
    service: *mut u32,
) -> c_int {
    guard(|| {
        let a = obj(m, "mailbox")?.0.addr();
        put(ip6.cast::<[u8; 16]>(), v6(a), "ip6")?;
        put(service, a.service, "service")
    })
}

/// [`dd_mailbox_peer`] of either family: the mailbox at `ip6` (16 bytes in address
/// order; an IPv4-mapped address `::ffff:a.b.c.d` names the IPv4 node, the same peer
/// as `dd_mailbox_peer` with its 4 bytes) and `service`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peer6(
    m: *mut dd_mailbox,
    ip6: *const u8,
    service: u32,
    peer: *mut u32,
) -> c_int {
    guard(|| peer_at::<16>(m, ip6, "ip6", service, peer))
}

/// The address of peer number `peer` (as `dd_mailbox_addr6`: 16 bytes, IPv4
/// IPv4-mapped).
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peer_addr6(
    m: *const dd_mailbox,
    peer: u32,
    ip6: *mut u8,
    service: *mut u32,
) -> c_int {
    guard(|| {
        let a = peer_addr_of(m, peer)?;
        put(ip6.cast::<[u8; 16]>(), v6(a), "ip6")?;
        put(service, a.service, "service")
    })
}

/// Why peer `peer` cannot be reached (a NUL-terminated message, valid until this
/// thread's next failing call), or NULL when it can (or no reason was given).
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peer_error(m: *const dd_mailbox, peer: u32) -> *const c_char {
    match m.as_ref().and_then(|m| m.0.peer_error(PeerId(peer))) {
        Some(e) => {
            crate::set_last(e.to_string());
            crate::dd_last_error()
        }
        None => std::ptr::null(),
    }
}

/// Sends `len` bytes at `buf` to peer `peer`: tagged with `tag` (`DD_MB_TAGGED`) or
/// not, with immediate data `imm` (`DD_MB_DATA`), copied at once (`DD_MB_INJECT`) or
/// zero copy — then the bytes must stay valid and unchanged until the send's
/// completion is polled. Its completion carries `context`. Returns `DD_OK` or a
/// `DD_ERR_*` code (nothing queued).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dd_mailbox_send(
    m: *mut dd_mailbox,
    peer: u32,
    tag: u64,
    imm: u64,
    buf: *const c_void,
    len: usize,
    context: u64,
    flags: u32,
) -> c_int {
    guard(|| {
        let m = mb(m)?;
        check_buf(buf, len)?;
        if flags & !(DD_MB_TAGGED | DD_MB_DATA | DD_MB_INJECT) != 0 {
            return Err(invalid(format!("send flags {flags:#x}")));
        }
        let tag = (flags & DD_MB_TAGGED != 0).then_some(tag);
        let imm = (flags & DD_MB_DATA != 0).then_some(imm);
        let b = if len == 0 {
            [0u8; 1].as_ptr()
        } else {
            buf as *const u8
        };
        // SAFETY: the caller's contract (above).
        Ok(m.send_raw(
            PeerId(peer),
            tag,
            imm,
            b,
            len,
            context,
            flags & DD_MB_INJECT != 0,
        )?)
    })
}

/// Posts a receive of at most `len` bytes into `buf` for messages from peer `src`
/// (`DD_MB_ANY_SOURCE`: any) whose tag equals `tag` in the bits not set in `ignore`;
/// tagged (`DD_MB_TAGGED` in `flags`) or untagged (tag and ignore unused). A waiting
/// message is taken at once. The bytes at `buf` stay valid, and the caller neither
/// reads nor writes them, until the receive's completion is polled.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dd_mailbox_recv(
    m: *mut dd_mailbox,
    src: u32,
    tag: u64,
    ignore: u64,
    buf: *mut c_void,
    len: usize,
    context: u64,
    flags: u32,
) -> c_int {
    guard(|| {
        let m = mb(m)?;
        check_buf(buf as *const c_void, len)?;
        let tagged = flags & DD_MB_TAGGED != 0;
        let sel = if tagged {
            selector(src, tag, ignore)
        } else {
            selector(src, 0, u64::MAX)
        };
        // SAFETY: the caller's contract (above).
        Ok(m.recv(sel, tagged, buf as *mut u8, len, context)?)
    })
}

/// Looks for a waiting message as `dd_mailbox_recv` would select it, and leaves it
/// waiting (`MPI_Iprobe`, `FI_PEEK`). Returns 1 (found: `*out` says what it is), 0
/// (none), or a `DD_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_peek(
    m: *mut dd_mailbox,
    src: u32,
    tag: u64,
    ignore: u64,
    flags: u32,
    out: *mut dd_msg_info,
) -> c_int {
    guard_count(|| {
        let m = mb(m)?;
        found(
            m.peek(&selector(src, tag, ignore), flags & DD_MB_TAGGED != 0),
            out,
        )
    })
}

/// `dd_mailbox_peek`, and the message found is claimed for `context`: no receive or
/// probe sees it until `dd_mailbox_recv_claimed` or `dd_mailbox_discard` with that
/// context (`MPI_Improbe`, `FI_PEEK | FI_CLAIM`). Returns 1, 0 or a `DD_ERR_*` code.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dd_mailbox_claim(
    m: *mut dd_mailbox,
    src: u32,
    tag: u64,
    ignore: u64,
    flags: u32,
    context: u64,
    out: *mut dd_msg_info,
) -> c_int {
    guard_count(|| {
        let m = mb(m)?;
        let sel = selector(src, tag, ignore);
        found(m.claim(&sel, flags & DD_MB_TAGGED != 0, context), out)
    })
}

/// Receives the message claimed for `context` into `buf` (as `dd_mailbox_recv`);
/// its completion carries `context` (`MPI_Mrecv`, `FI_CLAIM`).
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_recv_claimed(
    m: *mut dd_mailbox,
    context: u64,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let m = mb(m)?;
        check_buf(buf as *const c_void, len)?;
        // SAFETY: the caller's contract (dd_mailbox_recv's).
        Ok(m.recv_claimed(context, buf as *mut u8, len)?)
    })
}

/// Drops the message claimed for `context` (`FI_DISCARD`); what it was into `*out`
/// (may be NULL). Its sender's send completes as if it had been received.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_discard(
    m: *mut dd_mailbox,
    context: u64,
    out: *mut dd_msg_info,
) -> c_int {
    guard(|| {
        let i = mb(m)?.discard(context)?;
        if !out.is_null() {
            out.write(info(&i));
        }
        Ok(())
    })
}

/// Cancels the posted receive with `context`: it completes `DD_MB_CANCELLED`. Returns
/// 1 (cancelled), 0 (no receive posted with it: it matched already) or a `DD_ERR_*`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_cancel(m: *mut dd_mailbox, context: u64) -> c_int {
    guard_count(|| Ok(c_int::from(mb(m)?.cancel(context))))
}

/// Exposes `len` bytes at `buf` to the peers the key written to `*key` is given to,
/// with `rights` (`DD_REMOTE_READ | DD_REMOTE_WRITE | DD_REMOTE_ATOMIC`); `virt`: they
/// address it by virtual address (its first byte is `buf`), else by offset from 0.
/// The key (a random service of the device and a random secret) is the capability:
/// whoever holds it reaches the region with `dd_mailbox_rma`, nobody else. The bytes
/// stay valid until `dd_mailbox_unexpose` or the mailbox's close; peers may write them
/// at any time meanwhile. Returns `DD_OK` or a `DD_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_expose(
    m: *mut dd_mailbox,
    buf: *mut c_void,
    len: usize,
    rights: u32,
    virt: bool,
    key: *mut u64,
) -> c_int {
    guard(|| {
        let m = mb(m)?;
        if buf.is_null() {
            return Err(invalid("buf is NULL"));
        }
        let r = crate::rights(rights)?;
        // SAFETY: the caller's contract (above).
        let k = m.expose(buf as *mut u8, len, r, virt)?;
        put(key, k.0, "key")
    })
}

/// Stops exposing the region of `key` (its peers' connections close). Returns 1, 0
/// (no region with that key) or a `DD_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_unexpose(m: *mut dd_mailbox, key: u64) -> c_int {
    guard_count(|| Ok(c_int::from(mb(m)?.unexpose(RegionKey(key)))))
}

/// Starts a one-sided operation `op` (`DD_RMA_*`) on peer `peer`'s region `key` at
/// `addr` (an offset, or a virtual address if exposed so) with the local buffer `buf`
/// (`len` bytes; atomics: 8 bytes at an 8-aligned `addr`, `len` unused). No copy:
/// `buf` stays valid, and the caller neither writes it (nor, for a read or an atomic,
/// reads it) until the completion (`DD_MB_OP_WRITE`, `_READ`, `_ATOMIC`, carrying
/// `context`) is polled. It completes `DD_MB_SUCCESS`, or `DD_MB_REFUSED` (a wrong
/// key, out of bounds, a right the region lacks), or `DD_MB_TRANSPORT`. Returns
/// `DD_OK` or a `DD_ERR_*` code (nothing started).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dd_mailbox_rma(
    m: *mut dd_mailbox,
    peer: u32,
    op: u32,
    key: u64,
    addr: u64,
    buf: *mut c_void,
    len: usize,
    operand: u64,
    compare: u64,
    context: u64,
) -> c_int {
    guard(|| {
        let m = mb(m)?;
        let op = match op {
            DD_RMA_WRITE => RmaOp::Write,
            DD_RMA_READ => RmaOp::Read,
            DD_RMA_FETCH_ADD => RmaOp::FetchAdd(operand),
            DD_RMA_CMP_SWAP => RmaOp::CmpSwap {
                compare,
                swap: operand,
            },
            _ => return Err(invalid(format!("rma op {op}"))),
        };
        let atomic = !matches!(op, RmaOp::Write | RmaOp::Read);
        check_buf(buf as *const c_void, if atomic { 8 } else { len })?;
        // SAFETY: the caller's contract (above).
        Ok(m.rma(
            PeerId(peer),
            op,
            RegionKey(key),
            addr,
            buf as *mut u8,
            len,
            context,
        )?)
    })
}

/// One turn of progress (new connections, arrivals, the device's completions, queued
/// sends). Returns `DD_OK`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_progress(m: *mut dd_mailbox) -> c_int {
    guard(|| {
        mb(m)?.progress();
        Ok(())
    })
}

/// Takes up to `n` completions into `out` after a turn of progress. Returns how many
/// (0 when none), or a `DD_ERR_*` code.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_poll(
    m: *mut dd_mailbox,
    out: *mut dd_tag_completion,
    n: u32,
) -> c_int {
    guard_count(|| {
        let mut got = 0;
        let m = mb(m)?;
        if out.is_null() && n > 0 {
            return Err(invalid("out is NULL"));
        }
        // One turn, then what is ready straight into `out` (no staging array: this is
        // the provider's every poll).
        m.progress();
        while got < n as usize {
            let Some(c) = m.take() else { break };
            out.add(got).write(completion(&c));
            got += 1;
        }
        Ok(got as c_int)
    })
}

/// The mailbox's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dd_mailbox_stats {
    /// Ring slots consumed; eager messages and rendezvous announcements received.
    pub slots: u64,
    pub eager_rx: u64,
    pub rndv_rx: u64,
    /// Slots refused: a bad header, an unknown connection, a sequence that does not
    /// follow (a peer past its credit, or writing garbage).
    pub bad_header: u64,
    pub bad_source: u64,
    pub bad_sequence: u64,
    /// Rendezvous completions naming no send of ours.
    pub bad_fin: u64,
    /// Connections refused: a malformed hello, a full credit-table bucket.
    pub bad_hello: u64,
    pub credit_table_full: u64,
    /// Credit reads posted, and those that found no new credit.
    pub credit_reads: u64,
    pub credit_stalls: u64,
}

/// The mailbox's counters into `*out`.
#[no_mangle]
pub unsafe extern "C" fn dd_mailbox_stats(
    m: *const dd_mailbox,
    out: *mut dd_mailbox_stats,
) -> c_int {
    guard(|| {
        let s = obj(m, "mailbox")?.0.stats();
        put(
            out,
            dd_mailbox_stats {
                slots: s.slots,
                eager_rx: s.eager_rx,
                rndv_rx: s.rndv_rx,
                bad_header: s.bad_header,
                bad_source: s.bad_source,
                bad_sequence: s.bad_sequence,
                bad_fin: s.bad_fin,
                bad_hello: s.bad_hello,
                credit_table_full: s.credit_table_full,
                credit_reads: s.credit_reads,
                credit_stalls: s.credit_stalls,
            },
            "out",
        )
    })
}
