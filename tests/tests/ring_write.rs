//! Writes between two nodes in one process on cross-connected ring ports.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

#[test]
fn writes_from_1_byte_to_1_mib_land_byte_exact() {
    let pair = RingPair::new("sweep");
    let (layout, len) = sweep_layout();
    let c = pair.connect(len, 7);
    let seed = 0x5eed;
    // Each work request counts as one arrival, however many messages it took.
    let wcs = c.write_layout(&pair.client, &layout, seed, T);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.wr_id, i as u64, "completions in order");
        assert_eq!(wc.byte_len as usize, layout[i].1);
    }
    let mut prev_end = 0;
    for &(off, size) in &layout {
        check_zero(&c.sep, prev_end, off - prev_end).unwrap();
        check_pattern(&c.sep, off, size, seed, off as u64).unwrap();
        prev_end = off + size;
    }
    check_zero(&c.sep, prev_end, len - prev_end).unwrap();
    let st = pair.server.stats();
    assert_eq!(st.dropped_total(), 0, "{st:?}");
    assert!(st.tlb.hits > 0);
}

#[test]
fn inline_and_masked_writes() {
    let pair = RingPair::new("mask");
    let c = pair.connect(4096, 1);
    c.client
        .post(
            &WorkRequest::write_inline(1, b"inline!", 8)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    let mut block = [0u8; 32];
    for (i, b) in block.iter_mut().enumerate() {
        *b = 0xA0 + i as u8;
    }
    // Words 0, 2 and 7 only.
    c.client
        .post(&WorkRequest::masked(2, block, 0b1000_0101, 64).signaled())
        .unwrap();
    for wc in wait_completions(&c.ccq, 2, T) {
        assert_eq!(wc.status, WcStatus::Success);
    }
    assert!(wait_until(&pair.client, T, || c.server.arrivals() == 2));
    let mut got = [0u8; 7];
    c.sep.read(8, &mut got).unwrap();
    assert_eq!(&got, b"inline!");
    let mut got = [0u8; 32];
    c.sep.read(64, &mut got).unwrap();
    for w in 0..8 {
        let want: &[u8] = if [0, 2, 7].contains(&w) {
            &block[w * 4..w * 4 + 4]
        } else {
            &[0; 4]
        };
        assert_eq!(&got[w * 4..w * 4 + 4], want, "word {w}");
    }
    assert!(WorkRequest::write_inline(3, &[0; 33], 0).is_err());
}

#[test]
fn unsignaled_writes_complete_silently_but_errors_always_complete() {
    let pair = RingPair::new("unsig");
    let c = pair.connect(4096, 1);
    for i in 0..100 {
        c.client
            .post(&WorkRequest::write_inline(i, &[i as u8; 4], (i * 4) as u32).unwrap())
            .unwrap();
    }
    // Past the end of the 4096-byte remote endpoint: refused remotely, always reported.
    c.client
        .post(&WorkRequest::write_inline(1000, &[1; 8], 4092).unwrap())
        .unwrap();
    c.client
        .post(
            &WorkRequest::write_inline(1001, &[2; 1], 0)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    let wcs = wait_completions(&c.ccq, 2, T);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (1000, WcStatus::RemoteAccessError)
    );
    assert_eq!((wcs[1].wr_id, wcs[1].status), (1001, WcStatus::Success));
    check_zero(&c.sep, 4092, 4).unwrap();
    assert_eq!(pair.server.stats().dropped(DropReason::OutOfBounds), 1);
    // The connection keeps working after a refused write.
    assert_eq!(c.client.state(), ConnState::Normal);
}

#[test]
fn connection_setup_through_connection_0() {
    let pair = RingPair::new("cm");
    let c = pair.connect(4096, 42);
    assert_ne!(c.client.local_number(), 0);
    assert_eq!(c.client.remote_number(), c.server.local_number());
    assert_eq!(c.server.remote_number(), c.client.local_number());
    // Numbers and keys are random, not sequential.
    assert_ne!(c.client.local_key(), c.server.local_key());
    assert_ne!(
        c.client.local_number().wrapping_add(1),
        c.server.local_number()
    );

    // No listener for the service: refused, with the reason — at once, since the
    // listener's key is pinned (an unpinned connect takes the REJECT as a hint and
    // fails with it at its CM timeout).
    let ep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let cq = pair.client.create_cq(16);
    let pinned = ConnOptions {
        peer_key: Some(pair.server.identity()),
        ..ConnOptions::default()
    };
    match pair
        .client
        .connect_with([10, 0, 0, 1], 999, &ep, &cq, &pinned)
    {
        Err(Error::Rejected(RejectReason::NoListener)) => {}
        other => panic!("expected NoListener, got {:?}", other.err()),
    }
    // A second connection to the same service works alongside the first.
    let sep2 = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq2 = pair.server.create_cq(16);
    let l2 = pair.server.listen(43, &sep2, &scq2).unwrap();
    let c2 = pair.client.connect([10, 0, 0, 1], 43, &ep, &cq).unwrap();
    let s2 = l2.accept(T).unwrap();
    c2.post(&WorkRequest::write_inline(5, b"two", 0).unwrap().signaled())
        .unwrap();
    assert_eq!(cq.wait_one(T).unwrap().status, WcStatus::Success);
    assert!(wait_until(&pair.client, T, || s2.arrivals() == 1));

    // Teardown: the peer sees the connection closed, posting fails clearly.
    c2.close();
    assert!(wait_until(&pair.client, T, || s2.state() == ConnState::Closed));
    match c2.post(&WorkRequest::write_inline(6, b"x", 0).unwrap()) {
        Err(Error::NotConnected(ConnState::Closed)) => {}
        other => panic!("post after close: {other:?}"),
    }
    // The first connection is unaffected.
    c.client
        .post(&WorkRequest::write_inline(7, b"one", 0).unwrap().signaled())
        .unwrap();
    assert_eq!(c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
}

#[test]
fn nested_endpoint_limits_what_a_peer_sees() {
    let pair = RingPair::new("nest");
    let outer = pair
        .server
        .alloc_endpoint(16384, Rights::REMOTE_WRITE)
        .unwrap();
    let inner = pair
        .server
        .sub_endpoint(&outer, 8192, 4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(9, &inner, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(16);
    let c = pair.client.connect([10, 0, 0, 1], 9, &cep, &ccq).unwrap();
    let _s = l.accept(T).unwrap();
    c.post(
        &WorkRequest::write_inline(1, b"inside", 0)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    assert_eq!(ccq.wait_one(T).unwrap().status, WcStatus::Success);
    // Offset 4096 of the inner endpoint would be 12288 of the outer one: refused.
    c.post(
        &WorkRequest::write_inline(2, b"outside", 4096)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    assert_eq!(ccq.wait_one(T).unwrap().status, WcStatus::RemoteAccessError);
    let mut got = [0u8; 6];
    outer.read(8192, &mut got).unwrap();
    assert_eq!(&got, b"inside");
    check_zero(&outer, 0, 8192).unwrap();
    check_zero(&outer, 8192 + 6, 16384 - 8192 - 6).unwrap();

    // A read-only endpoint refuses writes.
    let ro = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_READ)
        .unwrap();
    let l2 = pair.server.listen(10, &ro, &scq).unwrap();
    let c2 = pair.client.connect([10, 0, 0, 1], 10, &cep, &ccq).unwrap();
    let _s2 = l2.accept(T).unwrap();
    c2.post(&WorkRequest::write_inline(3, b"nope", 0).unwrap().signaled())
        .unwrap();
    assert_eq!(ccq.wait_one(T).unwrap().status, WcStatus::RemoteAccessError);
    check_zero(&ro, 0, 4096).unwrap();
    assert_eq!(pair.server.stats().dropped(DropReason::AccessDenied), 1);
}

#[test]
fn posting_refuses_bad_arguments_locally() {
    let pair = RingPair::new("bad");
    let c = pair.connect(4096, 1);
    // Local source past the local endpoint: completes with a local protection error.
    c.client
        .post(&WorkRequest::write(1, &c.cep, 4000, 200, 0).signaled())
        .unwrap();
    assert_eq!(
        c.ccq.wait_one(T).unwrap().status,
        WcStatus::LocalProtectionError
    );
    // Remote range past the 32-bit offset space: refused at post.
    assert!(matches!(
        c.client
            .post(&WorkRequest::write(2, &c.cep, 0, 100, u32::MAX - 10)),
        Err(Error::InvalidArgument(_))
    ));
    check_zero(&c.sep, 0, 4096).unwrap();
}

#[test]
fn the_longest_ring_name_works_and_a_longer_one_is_a_typed_error() {
    // 16 characters: the limit the spec parser states, for the first open and a reopen.
    let name = "abcdefghijklmnop";
    for _ in 0..2 {
        let pair = RingPair::new(name);
        let c = pair.connect(4096, 7);
        c.client
            .post(
                &WorkRequest::write_inline(1, b"long name", 0)
                    .unwrap()
                    .signaled(),
            )
            .unwrap();
        let wc = wait_completions(&c.ccq, 1, T);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(&memory_snapshot(&c.sep, 9)[..], b"long name");
    }
    match Device::open(DeviceConfig::new("ring:abcdefghijklmnopq:a", [10, 0, 0, 1])) {
        Err(Error::Port(deposit_transport::port::PortError::BadSpec { .. })) => {}
        other => panic!("17-character ring name: {:?}", other.err()),
    }
}

/// Inline progress: posting alone puts the first requests of a long burst on the wire
/// once `INLINE_DOORBELL` of them wait (the peer works on them while the rest are
/// posted); fewer wait for the application's next poll.
#[test]
fn an_inline_burst_leaves_at_the_doorbell_without_a_poll() {
    let pair = RingPair::new("doorbell");
    let c = pair.connect(4096, 3);
    let write =
        |i: usize| WorkRequest::write_inline(i as u64, &[i as u8; 8], 8 * i as u32).unwrap();
    let sent = || pair.client.stats().msgs_tx;
    let before = sent();
    for i in 0..INLINE_DOORBELL - 1 {
        c.client.post(&write(i)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(sent(), before, "below the doorbell, posts wait for a poll");
    assert_eq!(pair.server.stats().msgs_rx, 0);
    c.client.post(&write(INLINE_DOORBELL - 1)).unwrap();
    assert_eq!(
        sent(),
        before + INLINE_DOORBELL as u64,
        "the doorbell's turn sent them"
    );
    // The server (a dedicated worker) takes them with the client never polled.
    let deadline = std::time::Instant::now() + T;
    while pair.server.stats().msgs_rx < INLINE_DOORBELL as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            pair.server.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..INLINE_DOORBELL {
        let mut b = [0u8; 8];
        c.sep.read((8 * i) as u64, &mut b).unwrap();
        assert_eq!(b, [i as u8; 8], "write {i}");
    }
}

/// A list of work requests is posted in order, all or none: a list longer than the
/// send queue, one with a bad request, or one whose signaled requests find too few
/// completion slots queues nothing; a list that fits lands in order, its signaled
/// requests completing.
#[test]
fn a_list_of_requests_is_posted_in_order_all_or_none() {
    const DEPTH: usize = 16;
    let pair = RingPair::new("postlist");
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(64);
    let listener = pair.server.listen(9, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(4);
    let opts = ConnOptions {
        sq_depth: DEPTH,
        ..ConnOptions::default()
    };
    let conn = pair
        .client
        .connect_with([10, 0, 0, 1], 9, &cep, &ccq, &opts)
        .unwrap();
    let _server = listener.accept(T).unwrap();
    // Write i puts [i; 8] at 8 * i.
    let write =
        |i: usize| WorkRequest::write_inline(i as u64, &[i as u8 + 1; 8], 8 * i as u32).unwrap();
    let arrived = || pair.server.stats().msgs_rx;

    let too_long: Vec<_> = (0..DEPTH + 1).map(write).collect();
    match conn.post_list(&too_long) {
        Err(Error::SendQueueFull { depth: DEPTH }) => {}
        other => panic!("expected SendQueueFull, got {other:?}"),
    }
    let mut bad: Vec<_> = (0..4).map(write).collect();
    bad.push(WorkRequest::write(99, &cep, u64::MAX - 2, 8, 0)); // local range overflows
    assert!(
        conn.post_list(&bad).is_err(),
        "a bad request refuses the list"
    );
    // Five signaled requests, four completion slots.
    let signaled: Vec<_> = (0..5).map(|i| write(i).signaled()).collect();
    match conn.post_list(&signaled) {
        Err(Error::CompletionQueueFull { depth: 4 }) => {}
        other => panic!("expected CompletionQueueFull, got {other:?}"),
    }
    conn.post_list(&[]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !wait_until(&pair.client, Duration::from_millis(50), || arrived() > 0),
        "a refused list queued nothing"
    );

    // A whole send queue's worth in one list, every fourth signaled: in order, all there.
    let list: Vec<_> = (0..DEPTH)
        .map(|i| {
            if i % 4 == 3 {
                write(i).signaled()
            } else {
                write(i)
            }
        })
        .collect();
    conn.post_list(&list).unwrap();
    let wcs = wait_completions(&ccq, 4, T);
    let ids: Vec<u64> = wcs.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [3, 7, 11, 15]);
    assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
    assert!(wait_until(&pair.client, T, || arrived() == DEPTH as u64));
    for i in 0..DEPTH {
        let mut b = [0u8; 8];
        sep.read((8 * i) as u64, &mut b).unwrap();
        assert_eq!(b, [i as u8 + 1; 8], "write {i}");
    }
}
