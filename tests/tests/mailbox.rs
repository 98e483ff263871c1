//! Mailboxes (tagged messaging) over a real PMD: two devices on an in-process ring
//! port, one with a dedicated worker, one inline. Eager and rendezvous sizes up to
//! 4 MiB land byte-exact, whichever side posts first; probes, claims and cancels; a
//! secure pair; the sender's buffer is read in place (zero copy) for rendezvous; the
//! same over IPv6 devices.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

struct Pair {
    _ring: RingPair,
    a: Mailbox,
    b: Mailbox,
}

fn pair(name: &str, conn: ConnOptions) -> Pair {
    pair_on(RingPair::new(name), conn)
}

/// A ring pair on IPv6: the server at fd00::1, the client at fd00::2.
fn ipv6_ring(name: &str) -> RingPair {
    let ip = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
    let server = Device::open(
        DeviceConfig::new(&format!("ring:{name}:b"), ip("fd00::1")).progress(Progress::Dedicated),
    )
    .expect("server device");
    let client = Device::open(DeviceConfig::new(&format!("ring:{name}:a"), ip("fd00::2")))
        .expect("client device");
    RingPair { client, server }
}

fn pair_on(ring: RingPair, conn: ConnOptions) -> Pair {
    let cfg = MailboxConfig {
        conn,
        ..MailboxConfig::new(40)
    };
    let a = ring.client.mailbox(&cfg).expect("mailbox a");
    let b = ring.server.mailbox(&cfg).expect("mailbox b");
    Pair { _ring: ring, a, b }
}

/// Drives both mailboxes until `b` (or `a`, with `on_a`) yields the completion with
/// `context` and `op`.
/// Message `k` of `n` bytes from a to b (`to_b`), its receive posted first: its
/// bytes land whole, both ends complete successfully. Returns the message and the
/// receive's completion.
fn receive_first(p: &mut Pair, to_b: PeerId, k: u64, n: usize) -> (Vec<u8>, TagCompletion) {
    let msg = pattern(n, k as u8);
    let mut got = vec![0u8; n];
    // SAFETY: `got` lives until the completion below.
    unsafe {
        p.b.recv(Selector::tag(k), true, got.as_mut_ptr(), n, 10 + k)
    }
    .unwrap();
    // SAFETY: `msg` lives until the send's completion below (zero copy).
    unsafe {
        p.a.send_raw(to_b, Some(k), None, msg.as_ptr(), n, 20 + k, false)
    }
    .unwrap();
    let c = wait_for(p, false, TagOp::Recv, 10 + k);
    assert_eq!(
        (c.status, c.len, c.olen),
        (TagStatus::Success, n as u64, n as u64),
        "{n} B"
    );
    assert!(got == msg, "{n} bytes, receive posted first");
    assert_eq!(
        wait_for(p, true, TagOp::Send, 20 + k).status,
        TagStatus::Success
    );
    (msg, c)
}

fn wait_for(p: &mut Pair, on_a: bool, op: TagOp, context: u64) -> TagCompletion {
    let deadline = Instant::now() + T;
    let mut out = [deposit::mailbox::EMPTY; 16];
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let (this, other) = if on_a {
            (&mut p.a, &mut p.b)
        } else {
            (&mut p.b, &mut p.a)
        };
        other.progress();
        let n = this.poll(&mut out);
        for c in &out[..n] {
            if c.context == context && c.op == op {
                return *c;
            }
            seen.push(*c);
        }
    }
    panic!(
        "no {op:?} completion {context} in {T:?}; saw {seen:?}; a {:?} b {:?}",
        p.a, p.b
    );
}

#[test]
fn eager_and_rendezvous_messages_land_whole_either_way_round() {
    let mut p = pair("mbox1", ConnOptions::default());
    let to_b = p.a.peer(p.b.addr());
    let eager = p.a.eager_max() as usize;
    assert!(eager >= 960, "eager messages up to {eager} bytes");
    for (k, n) in [0, 1, eager, eager + 1, 65536, 1 << 20, 4 << 20]
        .into_iter()
        .enumerate()
    {
        let k = k as u64;
        let (msg, _) = receive_first(&mut p, to_b, k, n);
        // The message first (unexpected: copied out of the ring, or announced).
        p.a.send(to_b, Some(k), &msg, 30 + k).unwrap();
        let deadline = Instant::now() + T;
        while p.b.peek(&Selector::tag(k), true).is_none() {
            p.a.progress();
            assert!(Instant::now() < deadline, "{n} bytes never arrived");
        }
        let mut got = vec![0u8; n];
        // SAFETY: as above.
        unsafe {
            p.b.recv(Selector::tag(k), true, got.as_mut_ptr(), n, 40 + k)
        }
        .unwrap();
        let c = wait_for(&mut p, false, TagOp::Recv, 40 + k);
        assert_eq!((c.status, c.len), (TagStatus::Success, n as u64));
        assert!(got == msg, "{n} bytes, message first");
        assert_eq!(
            wait_for(&mut p, true, TagOp::Send, 30 + k).status,
            TagStatus::Success
        );
    }
    let s = p.b.stats();
    assert!(s.rndv_rx >= 6 && s.eager_rx >= 6, "{s:?}");
    assert_eq!(
        (s.bad_header, s.bad_source, s.bad_sequence, s.bad_fin),
        (0, 0, 0, 0)
    );
}

#[test]
fn probes_claims_and_cancels() {
    let mut p = pair("mbox2", ConnOptions::default());
    let to_b = p.a.peer(p.b.addr());
    let sel = Selector::tag(5);
    assert!(p.b.peek(&sel, true).is_none());
    let mut never = [0u8; 8];
    // SAFETY: `never` lives until the cancel's completion below.
    unsafe { p.b.recv(Selector::tag(99), true, never.as_mut_ptr(), 8, 1) }.unwrap();
    p.a.send(to_b, Some(5), &pattern(100, 1), 2).unwrap();
    p.a.send(to_b, Some(5), &pattern(300_000, 2), 3).unwrap();
    let deadline = Instant::now() + T;
    while p.b.queued().1 < 2 {
        p.a.progress();
        p.b.progress();
        assert!(Instant::now() < deadline);
    }
    let info = p.b.claim(&sel, true, 7).expect("claimed");
    assert_eq!(info.len, 100);
    assert_eq!(p.b.peek(&sel, true).expect("the next").len, 300_000);
    assert_eq!(p.b.discard(7).expect("claimed").len, 100);
    let info = p.b.claim(&sel, true, 8).expect("the big one");
    assert_eq!((info.len, info.tag), (300_000, 5));
    let mut got = vec![0u8; 300_000];
    // SAFETY: `got` lives until the completion below.
    unsafe { p.b.recv_claimed(8, got.as_mut_ptr(), got.len()) }.unwrap();
    assert_eq!(wait_for(&mut p, false, TagOp::Recv, 8).len, 300_000);
    assert!(got == pattern(300_000, 2));
    assert!(p.b.cancel(1));
    assert_eq!(
        wait_for(&mut p, false, TagOp::Recv, 1).status,
        TagStatus::Cancelled
    );
    for ctx in [2, 3] {
        assert_eq!(
            wait_for(&mut p, true, TagOp::Send, ctx).status,
            TagStatus::Success
        );
    }
}

#[test]
fn secure_mailboxes_carry_the_same_bytes() {
    let conn = ConnOptions {
        secure: true,
        trust_on_first_use: true,
        ..ConnOptions::default()
    };
    let mut p = pair("mbox3", conn);
    let to_b = p.a.peer(p.b.addr());
    for (k, n) in [(1u64, 700usize), (2, 2 << 20)] {
        let msg = pattern(n, 9);
        let mut got = vec![0u8; n];
        // SAFETY: `got` lives until the completion below.
        unsafe { p.b.recv(Selector::ANY, true, got.as_mut_ptr(), n, k) }.unwrap();
        p.a.send(to_b, Some(k), &msg, k).unwrap();
        assert_eq!(wait_for(&mut p, false, TagOp::Recv, k).len, n as u64);
        assert!(got == msg);
    }
}

/// Starts `op` from `a` on `b`'s region `key` at `addr` with `buf`.
fn rma(p: &mut Pair, op: RmaOp, key: RegionKey, addr: u64, buf: &mut [u8], ctx: u64) {
    let to = p.a.peer(p.b.addr());
    // SAFETY: the test keeps `buf` until it waited for this operation's completion.
    unsafe { p.a.rma(to, op, key, addr, buf.as_mut_ptr(), buf.len(), ctx) }.expect("rma");
}

#[test]
fn one_sided_operations_reach_exposed_regions_and_nothing_else() {
    let mut p = pair("mbox-rma", ConnOptions::default());
    let mut region = vec![0u8; 5 << 20];
    let mut ro = vec![7u8; 4096];
    // SAFETY: both regions outlive the mailboxes' use of them (unexposed or the pair
    // dropped first).
    let key = unsafe {
        p.b.expose(region.as_mut_ptr(), region.len(), Rights::ALL, false)
    }
    .expect("expose");
    let rbase = ro.as_mut_ptr() as u64;
    // SAFETY: as above.
    let rkey = unsafe {
        p.b.expose(ro.as_mut_ptr(), ro.len(), Rights::REMOTE_READ, true)
    }
    .expect("expose");
    // Writes of every size class (the longest is several transport messages), then
    // reads of the same bytes back, all zero copy.
    let mut at = 0u64;
    for (i, n) in [0usize, 1, 8, 8191, 65_537, 1 << 20, 4 << 20]
        .into_iter()
        .enumerate()
    {
        let i = i as u64;
        let mut src = pattern(n, i as u8);
        rma(&mut p, RmaOp::Write, key, at + 5, &mut src, 10 + i);
        let c = wait_for(&mut p, true, TagOp::Write, 10 + i);
        assert_eq!(
            (c.status, c.len),
            (TagStatus::Success, n as u64),
            "write of {n}"
        );
        let o = at as usize + 5;
        assert!(
            region[o..o + n] == src[..],
            "the write of {n} landed byte-exact"
        );
        let mut back = vec![0u8; n];
        rma(&mut p, RmaOp::Read, key, at + 5, &mut back, 20 + i);
        let c = wait_for(&mut p, true, TagOp::Read, 20 + i);
        assert_eq!(
            (c.status, c.len),
            (TagStatus::Success, n as u64),
            "read of {n}"
        );
        assert!(back == src, "the read of {n} brought the bytes back");
        at = (at + n as u64 + 64) % (1 << 20);
    }
    // Atomics, native byte order both ways.
    region[64..72].copy_from_slice(&100u64.to_ne_bytes());
    let mut old = [0u8; 8];
    rma(&mut p, RmaOp::FetchAdd(5), key, 64, &mut old, 30);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Atomic, 30).status,
        TagStatus::Success
    );
    assert_eq!(u64::from_ne_bytes(old), 100);
    let swap = RmaOp::CmpSwap {
        compare: 105,
        swap: 1,
    };
    rma(&mut p, swap, key, 64, &mut old, 31);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Atomic, 31).status,
        TagStatus::Success
    );
    assert_eq!(u64::from_ne_bytes(region[64..72].try_into().expect("8")), 1);
    // Refused: past the end, a write or an atomic on a read-only region; allowed: a
    // read of it by virtual address.
    let mut buf = vec![1u8; 64];
    rma(&mut p, RmaOp::Write, key, (5 << 20) - 10, &mut buf, 40);
    let c = wait_for(&mut p, true, TagOp::Write, 40);
    assert_eq!(c.status, TagStatus::Refused, "past the end");
    rma(&mut p, RmaOp::Write, rkey, rbase, &mut buf, 41);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Write, 41).status,
        TagStatus::Refused
    );
    rma(&mut p, RmaOp::FetchAdd(1), rkey, rbase + 8, &mut old, 42);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Atomic, 42).status,
        TagStatus::Refused
    );
    assert!(
        ro.iter().all(|&b| b == 7),
        "nothing landed in the read-only region"
    );
    rma(&mut p, RmaOp::Read, rkey, rbase + 100, &mut buf, 43);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Read, 43).status,
        TagStatus::Success
    );
    assert!(buf.iter().all(|&b| b == 7));
    // Unexposed: the region's connections close and later operations fail.
    assert!(p.b.unexpose(key));
    let before = region.clone();
    let deadline = Instant::now() + T;
    let mut k = 50;
    loop {
        rma(&mut p, RmaOp::Write, key, 0, &mut buf, k);
        let c = wait_for(&mut p, true, TagOp::Write, k);
        if c.status != TagStatus::Success {
            break;
        }
        // The close may not have reached `a` yet: that write still went in.
        assert!(
            Instant::now() < deadline,
            "writes still succeed after unexpose"
        );
        k += 1;
    }
    let mut late = vec![9u8; 64];
    rma(&mut p, RmaOp::Write, key, 128, &mut late, 99);
    let c = wait_for(&mut p, true, TagOp::Write, 99);
    assert_ne!(c.status, TagStatus::Success, "a write after unexpose");
    assert!(region[128..192] == before[128..192]);
    drop(p);
}

#[test]
fn a_peer_reaches_nothing_over_the_connection_a_mailbox_opened_to_it() {
    // `b` is not a mailbox: a plain listener on the service `a` sends to, which accepts
    // `a`'s connection and then tries to write over it into whatever `a` connected from
    // (the mailbox's ring, its credit table).
    let ring = RingPair::new("mbox-iso");
    let mut a = ring
        .client
        .mailbox(&MailboxConfig::new(40))
        .expect("mailbox a");
    let cq = ring.server.create_cq(64);
    let ep = ring
        .server
        .alloc_endpoint(4096, Rights::NONE)
        .expect("endpoint");
    let l = ring.server.listen(41, &ep, &cq).expect("listen");
    let to = a.peer(PeerAddr::new(ring.server.local_addr().ip, 41));
    a.send(to, Some(1), b"hello", 1).expect("send");
    let deadline = Instant::now() + T;
    let c = loop {
        a.progress();
        if let Ok(c) = l.accept(Duration::from_millis(1)) {
            break c;
        }
        assert!(Instant::now() < deadline, "a never connected");
    };
    let before = a.stats();
    let wr = WorkRequest::write_inline(7, &[0xee; 32], 0).expect("wr");
    c.post(&wr.signaled()).expect("post");
    let wc = loop {
        a.progress();
        if let Some(wc) = cq.poll_one() {
            break wc;
        }
        assert!(Instant::now() < deadline, "no completion for the write");
    };
    assert_ne!(
        wc.status,
        WcStatus::Success,
        "a write over a mailbox's own connection"
    );
    assert_eq!(a.stats().slots, before.slots, "nothing reached the ring");
}

#[test]
fn a_flushed_mailbox_owes_its_peers_nothing_when_it_goes() {
    // `b`'s device has a worker of its own (it acknowledges what reaches it without
    // `b` being driven); `a`'s progress is inline (only `a`'s calls move it).
    let mut p = pair("mbox-flush", ConnOptions::default());
    let to_a = p.b.peer(p.a.addr());
    // A rendezvous message: `a` reads it, then owes `b` a FIN.
    let msg = pattern(256 * 1024, 3);
    // SAFETY: `msg` outlives the send (we wait for its completion below).
    unsafe {
        p.b.send_raw(to_a, Some(5), None, msg.as_ptr(), msg.len(), 1, false)
    }
    .expect("send");
    let mut buf = vec![0u8; msg.len()];
    // SAFETY: `buf` outlives the receive.
    unsafe {
        p.a.recv(Selector::tag(5), true, buf.as_mut_ptr(), buf.len(), 2)
    }
    .expect("recv");
    let c = wait_for(&mut p, true, TagOp::Recv, 2);
    assert_eq!(c.status, TagStatus::Success);
    assert!(buf == msg);
    // `a` flushes (its FIN may wait for a credit `b`'s mailbox grants: `b` is alive and
    // polled meanwhile, on a thread of its own) and goes at once; `b`'s send completes.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (a, b) = (&mut p.a, &mut p.b);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                b.progress();
                std::thread::yield_now();
            }
        });
        let flushed = a.flush(T);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(flushed, "a flushed");
    });
    let Pair { _ring, a, mut b } = p;
    drop(a);
    let deadline = Instant::now() + T;
    let c = loop {
        if let Some(c) = b.wait(Duration::from_millis(10)) {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "b's rendezvous send never completed"
        );
    };
    assert_eq!(
        (c.op, c.context, c.status),
        (TagOp::Send, 1, TagStatus::Success)
    );
    assert!(b.flush(T), "b has nothing left in flight");
    drop(_ring);
}

#[test]
fn a_rendezvous_send_fails_when_its_receiver_goes_without_flushing() {
    let mut p = pair("mbox-gone", ConnOptions::default());
    let to_a = p.b.peer(p.a.addr());
    let msg = pattern(256 * 1024, 4);
    // SAFETY: `msg` outlives the send (we wait for its completion below).
    unsafe {
        p.b.send_raw(to_a, Some(6), None, msg.as_ptr(), msg.len(), 1, false)
    }
    .expect("send");
    // `a` sees the announcement, then goes without receiving it: the FIN never comes.
    let deadline = Instant::now() + T;
    while p.a.queued().1 == 0 {
        p.b.progress();
        p.a.progress();
        assert!(Instant::now() < deadline, "the message never reached a");
    }
    let Pair { _ring, a, mut b } = p;
    drop(a);
    // `a`'s device lives on (its progress is inline: driven here), and closes the
    // mailbox's connections.
    let c = loop {
        _ring.client.progress();
        if let Some(c) = b.wait(Duration::from_millis(1)) {
            break c;
        }
        assert!(Instant::now() < deadline, "b's send never completed");
    };
    assert_eq!(
        (c.op, c.context, c.status),
        (TagOp::Send, 1, TagStatus::Unreachable)
    );
    assert!(b.peer_error(to_a).is_some());
    assert!(b.flush(T), "b has nothing left in flight");
    drop(_ring);
}

#[test]
fn ipv6_mailboxes_carry_eager_rendezvous_and_one_sided_operations() {
    let mut p = pair_on(ipv6_ring("mbox6"), ConnOptions::default());
    let b_addr = p.b.addr();
    assert_eq!(b_addr.ip, "fd00::1".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(b_addr.to_string(), "[fd00::1]:40");
    let to_b = p.a.peer(b_addr);
    let eager = p.a.eager_max() as usize;
    for (k, n) in [0, 1, eager, eager + 1, 1 << 20].into_iter().enumerate() {
        let k = k as u64;
        let (_, c) = receive_first(&mut p, to_b, k, n);
        // The receiver knows the sender by its IPv6 address.
        let src = c.src.expect("a source");
        assert_eq!(p.b.peer_addr(src), Some(p.a.addr()));
    }
    let s = p.b.stats();
    assert!(s.rndv_rx >= 2 && s.eager_rx >= 3, "{s:?}");
    assert_eq!(
        (s.bad_hello, s.bad_header, s.bad_source),
        (0, 0, 0),
        "{s:?}"
    );
    // A region of b's, written and read back by a (its connection dialed to b's IPv6
    // address).
    let mut region = vec![0u8; 2 << 20];
    // SAFETY: the region outlives the mailboxes' use of it (the pair goes first).
    let key = unsafe {
        p.b.expose(region.as_mut_ptr(), region.len(), Rights::ALL, false)
    }
    .expect("expose");
    let mut src = pattern(1 << 20, 3);
    rma(&mut p, RmaOp::Write, key, 7, &mut src, 30);
    let c = wait_for(&mut p, true, TagOp::Write, 30);
    assert_eq!((c.status, c.len), (TagStatus::Success, 1 << 20));
    assert!(region[7..7 + (1 << 20)] == src[..], "the write landed");
    let mut back = vec![0u8; 1 << 20];
    rma(&mut p, RmaOp::Read, key, 7, &mut back, 31);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Read, 31).status,
        TagStatus::Success
    );
    assert!(back == src, "the read brought the bytes back");
    let mut old = [0u8; 8];
    rma(&mut p, RmaOp::FetchAdd(5), key, 1 << 20 | 8, &mut old, 32);
    assert_eq!(
        wait_for(&mut p, true, TagOp::Atomic, 32).status,
        TagStatus::Success
    );
    let w = (1 << 20) + 8;
    assert_eq!(
        u64::from_ne_bytes(region[w..w + 8].try_into().unwrap()),
        u64::from_ne_bytes(old) + 5
    );
}
