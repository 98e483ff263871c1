//! Every work request that is owed a completion gets it, however small the completion
//! queue: a signaled request that would overrun it is refused at post with a clear
//! error, and the completions of failed unsignaled requests (which reserve no room)
//! wait in their connection until polling frees room — never dropped.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);
const DEPTH: usize = 4;

/// A connection whose client completion queue has `DEPTH` entries (and what must live
/// as long as it: the server's side and listener).
fn small_cq(
    name: &str,
) -> (
    RingPair,
    Connection,
    CompletionQueue,
    (Connection, Endpoint, Listener),
) {
    let pair = RingPair::new(name);
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(64);
    let listener = pair.server.listen(5, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(DEPTH);
    let client = pair.client.connect([10, 0, 0, 1], 5, &cep, &ccq).unwrap();
    let server = listener.accept(T).unwrap();
    (pair, client, ccq, (server, cep, listener))
}

#[test]
fn a_signaled_request_beyond_the_completion_queue_is_refused_at_post_and_none_is_lost() {
    let (pair, conn, cq, _keep) = small_cq("cq_full");
    assert_eq!(cq.depth(), DEPTH);
    let write = |id: u64| WorkRequest::write_inline(id, &[id as u8; 8], 8 * id as u32).unwrap();
    for id in 0..DEPTH as u64 {
        conn.post(&write(id).signaled()).unwrap();
    }
    match conn.post(&write(99).signaled()) {
        Err(Error::CompletionQueueFull { depth: DEPTH }) => {}
        other => panic!("expected CompletionQueueFull, got {other:?}"),
    }
    // An unsignaled request reserves nothing: it may still be posted.
    conn.post(&write(100)).unwrap();
    // Let everything complete before polling anything.
    let stats = || pair.server.stats().msgs_rx;
    assert!(
        wait_until(&pair.client, T, || stats() == DEPTH as u64 + 1),
        "{:?}",
        pair.server.stats()
    );
    let wcs = wait_completions(&cq, DEPTH, T);
    let ids: Vec<u64> = wcs.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
    // Polled: room again.
    conn.post(&write(4).signaled()).unwrap();
    assert_eq!(wait_completions(&cq, 1, T)[0].wr_id, 4);
    assert_eq!((cq.waits(), cq.overflows()), (0, 0));
}

#[test]
fn failed_unsignaled_requests_wait_for_room_and_complete_in_order() {
    let (pair, conn, cq, _keep) = small_cq("cq_wait");
    const BAD: u64 = 12;
    // Past the end of the 4096-byte remote endpoint: each is refused remotely, and a
    // failed request always completes, signaled or not.
    for id in 0..BAD {
        conn.post(&WorkRequest::write_inline(id, &[1; 8], 4092).unwrap())
            .unwrap();
    }
    conn.post(
        &WorkRequest::write_inline(BAD, &[2; 8], 0)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    let refused = || pair.server.stats().dropped(DropReason::OutOfBounds);
    assert!(
        wait_until(&pair.client, T, || refused() == BAD),
        "{:?}",
        pair.server.stats()
    );
    // Give the client time to take every NAK with the queue full.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(50) {
        pair.client.progress();
    }
    // Four fit; each of the other nine (the signaled one too, behind them) waited.
    assert_eq!(
        cq.waits(),
        BAD + 1 - DEPTH as u64,
        "every completion that found the queue full is counted"
    );
    let wcs = wait_completions(&cq, BAD as usize + 1, T);
    for (i, wc) in wcs.iter().enumerate() {
        let want = if (i as u64) < BAD {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::Success
        };
        assert_eq!((wc.wr_id, wc.status), (i as u64, want), "{wc:?}");
    }
    assert_eq!(cq.overflows(), 0);
    assert!(cq.poll_one().is_none());
}
