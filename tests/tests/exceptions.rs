//! Faults the host repairs (docs/design.md §3, Exceptions): a page not present or a full
//! event queue exceptions only the connection whose message hit it; the message is
//! kept, later ones wait, the sender is throttled, other connections into the same
//! endpoint go on; after the repair and a resume the kept message commits exactly
//! once, in order.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);
const LEN: usize = 16 * 4096;

/// A ring pair whose client keeps retrying a not-ready receiver for long enough that
/// these tests never run into the RNR retry limit; `depth` is the server's event queue
/// depth.
fn patient_pair(name: &str, depth: usize) -> RingPair {
    ring_pair_with(
        name,
        |s| s.event_queue_depth = depth,
        |c| c.rnr_retry_count = 100_000,
    )
}

/// `n` connections from the client into ONE server endpoint, all sharing `regs`.
fn connections(
    pair: &RingPair,
    n: usize,
    regs: RegWindow,
    rights: Rights,
) -> (
    Endpoint,
    Endpoint,
    CompletionQueue,
    Vec<(Connection, Connection)>,
    Listener,
) {
    let sep = pair.server.alloc_endpoint(LEN as u64, rights).unwrap();
    let scq = pair.server.create_cq(64);
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        ..ConnOptions::default()
    };
    let l = pair.server.listen_with(21, &sep, &scq, &opts).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(1024);
    let mut v = Vec::new();
    for _ in 0..n {
        let c = pair.client.connect([10, 0, 0, 1], 21, &cep, &ccq).unwrap();
        let s = l.accept(T).unwrap();
        v.push((c, s));
    }
    (sep, cep, ccq, v, l)
}

/// Appends digit `d` (1..=7) to register r0 (r0 = r0 << 4 | d, the digit read from
/// register r(8 + d)): the final value records which messages ran, how often and in
/// which order. The operand stays free for the address.
fn digit(w: WorkRequest, d: u8) -> WorkRequest {
    w.op1(RegOp::Shl, 0, Src::Reg(5))
        .op2(RegOp::Or, 0, Src::Reg(8 + d))
}

#[test]
fn a_missing_page_blocks_only_its_connection_and_the_kept_write_lands_once_in_order() {
    let pair = patient_pair("exc_page", 1024);
    let regs = pair.server.alloc_registers(16).unwrap();
    let srv = &pair.server;
    for d in 1..8u32 {
        srv.write_register(regs, 8 + d, u64::from(d)).unwrap();
        srv.set_register_protection(regs, 8 + d, RegProt::READ)
            .unwrap();
    }
    srv.set_register_protection(regs, 0, RegProt::WRITE)
        .unwrap();
    srv.write_register(regs, 3, 8192).unwrap(); // pointer into page 2
    srv.set_register_protection(regs, 3, RegProt::INDIRECT)
        .unwrap();
    srv.write_register(regs, 4, 16).unwrap();
    srv.write_register(regs, 5, 4).unwrap(); // shift amount, read by op1
    srv.set_register_protection(regs, 5, RegProt::READ).unwrap();
    srv.set_register_protection(regs, 6, RegProt::WRITE)
        .unwrap(); // conn 2's counter
    let (sep, _cep, ccq, conns, _l) = connections(&pair, 2, regs, Rights::REMOTE_WRITE);
    let (c1, s1) = &conns[0];
    let (c2, s2) = &conns[1];

    sep.set_page_present(2, false).unwrap();
    // Connection 1: a post-incremented write into the missing page (kept), then a
    // write over the same bytes and one elsewhere, which must wait behind it.
    let first = WorkRequest::write_inline(1, b"KEPT-AAAA", 0)
        .unwrap()
        .post_increment(3);
    c1.post(&digit(first, 1).signaled()).unwrap();
    let second = WorkRequest::write_inline(2, b"LATER-B", 8192).unwrap();
    c1.post(&digit(second, 2).signaled()).unwrap();
    let third = WorkRequest::write_inline(3, b"third", 100).unwrap();
    c1.post(&digit(third, 3).signaled()).unwrap();
    assert!(
        wait_until(&pair.client, T, || s1.state() == ConnState::Exceptioned),
        "connection 1 never exceptioned: {:?}",
        s1.state()
    );

    // Connection 2, into the same endpoint, runs meanwhile.
    for i in 0..20u64 {
        let off = if i % 2 == 0 {
            64 * i
        } else {
            3 * 4096 + 64 * i
        };
        let w = WorkRequest::write_inline(100 + i, &[i as u8 + 1; 16], off as u32)
            .unwrap()
            .operand(off as u32)
            .op1(RegOp::Add, 6, Src::Reg(5))
            .signaled();
        c2.post(&w).unwrap();
    }
    for wc in wait_completions(&ccq, 20, T) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(
            wc.conn,
            c2.local_number(),
            "only connection 2 completes: {wc:?}"
        );
    }
    assert_eq!(s2.arrivals(), 20);
    assert_eq!(s2.state(), ConnState::Normal);
    assert_eq!(srv.read_register(regs, 6).unwrap(), 80);
    for i in 0..20u64 {
        let off = if i % 2 == 0 {
            64 * i
        } else {
            3 * 4096 + 64 * i
        };
        let mut b = [0u8; 16];
        sep.read(off, &mut b).unwrap();
        assert_eq!(b, [i as u8 + 1; 16], "connection 2's write {i}");
    }
    // Connection 1 is still held: nothing of it is visible, not even its registers.
    assert_eq!(s1.state(), ConnState::Exceptioned);
    assert_eq!(s1.arrivals(), 0);
    assert_eq!(srv.read_register(regs, 0).unwrap(), 0);
    assert_eq!(srv.read_register(regs, 3).unwrap(), 8192);
    check_zero(&sep, 100, 5).unwrap();
    assert!(
        ccq.poll_one().is_none(),
        "connection 1 completed while held"
    );
    assert!(
        pair.client.stats().naks_rx > 0,
        "the sender was told to wait"
    );
    // The fault is reported on the endpoint's exception queue (not its event queue).
    assert!(sep.events().poll().is_none());
    let ev = sep.exceptions().poll().expect("a fault report");
    assert_eq!(
        ev.kind,
        EventKind::Trap {
            status: RemoteStatus::PageFault,
            reason: DropReason::PageNotPresent
        },
        "{ev:?}"
    );
    assert_eq!(ev.conn, s1.local_number());
    assert!(pair.server.stats().dropped(DropReason::PageNotPresent) >= 1);

    // Repair and resume: the kept write runs once, then the later ones in order.
    sep.set_page_present(2, true).unwrap();
    s1.resume().unwrap();
    let wcs = wait_completions(&ccq, 3, T);
    let ids: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert!(wait_until(&pair.client, T, || s1.arrivals() == 3));
    assert_eq!(s1.state(), ConnState::Normal);
    assert_eq!(
        srv.read_register(regs, 0).unwrap(),
        0x123,
        "each once, in order"
    );
    assert_eq!(srv.read_register(regs, 3).unwrap(), 8192 + 16);
    let mut b = [0u8; 9];
    sep.read(8192, &mut b).unwrap();
    assert_eq!(
        &b, b"LATER-BAA",
        "the later write landed after the kept one"
    );
    let mut b = [0u8; 5];
    sep.read(100, &mut b).unwrap();
    assert_eq!(&b, b"third");
    assert!(sep.events().poll().is_none());
    assert!(
        sep.exceptions().poll().is_none(),
        "the fault was reported once"
    );
    // Connection 1 goes on normally.
    c1.post(
        &WorkRequest::write_inline(4, b"after", 9000)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    assert_eq!(ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert_eq!(s1.arrivals(), 4);
}

#[test]
fn a_full_event_queue_holds_the_connection_until_the_host_drains_it() {
    let pair = patient_pair("exc_evq", 2);
    let regs = pair.server.alloc_registers(4).unwrap();
    pair.server
        .set_register_protection(regs, 0, RegProt::WRITE)
        .unwrap();
    let (sep, _cep, ccq, conns, _l) = connections(&pair, 1, regs, Rights::REMOTE_WRITE);
    let (c, s) = &conns[0];
    let q = sep.events();
    // r0 += 1; interrupt when r0 >= 1 (always, after the add).
    let tick = |id: u64| {
        WorkRequest::reg_op(id)
            .operand(1)
            .op1(RegOp::Add, 0, Src::Operand)
            .cond(Cond::Ge, Src::Operand, 0)
            .order(Order::CondLast)
            .signaled()
    };
    for id in 1..=4 {
        c.post(&tick(id)).unwrap();
    }
    // Two events fill the queue; the third message would need a third: held.
    assert!(wait_until(&pair.client, T, || s.state() == ConnState::Exceptioned));
    let wcs = wait_completions(&ccq, 2, T);
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (1, 2));
    assert_eq!(q.len(), 2);
    assert_eq!(pair.server.read_register(regs, 0).unwrap(), 2);
    assert!(pair.server.stats().dropped(DropReason::EventQueueFull) >= 1);
    assert!(ccq.wait_one(Duration::from_millis(50)).is_none());
    let ev = sep.exceptions().poll().expect("the fault is reported");
    assert_eq!(
        ev.kind,
        EventKind::Trap {
            status: RemoteStatus::PageFault,
            reason: DropReason::EventQueueFull
        }
    );
    assert_eq!(ev.conn, s.local_number());

    // Resuming before the repair fails and leaves everything as it was.
    match s.resume() {
        Err(Error::Resume(ResumeError::StillFaulting(_))) => {}
        other => panic!("resume with a full queue: {other:?}"),
    }
    assert_eq!(s.state(), ConnState::Exceptioned);
    assert_eq!(pair.server.read_register(regs, 0).unwrap(), 2);

    // Drain, resume: the kept message runs exactly once, then the fourth.
    let drained: Vec<u64> = std::iter::from_fn(|| q.poll()).map(|e| e.regs[3]).collect();
    assert_eq!(drained, [1, 2]);
    s.resume().unwrap();
    let wcs = wait_completions(&ccq, 2, T);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(3, WcStatus::Success), (4, WcStatus::Success)]
    );
    assert!(wait_until(&pair.client, T, || s.arrivals() == 4));
    assert_eq!(
        pair.server.read_register(regs, 0).unwrap(),
        4,
        "exactly once"
    );
    let rest: Vec<u64> = std::iter::from_fn(|| q.poll()).map(|e| e.regs[3]).collect();
    assert_eq!(rest, [3, 4]);
    assert_eq!(s.state(), ConnState::Normal);
}

#[test]
fn resuming_a_connection_that_is_not_exceptioned_is_an_error() {
    let pair = patient_pair("exc_resume", 64);
    let regs = pair.server.alloc_registers(1).unwrap();
    let (sep, _cep, ccq, conns, _l) = connections(&pair, 1, regs, Rights::REMOTE_WRITE);
    let (c, s) = &conns[0];
    match s.resume() {
        Err(Error::Resume(ResumeError::NotExceptioned(n))) => {
            assert_eq!(n, s.local_number())
        }
        other => panic!("resume of a normal connection: {other:?}"),
    }
    // After a fault and one resume, a second resume is refused too.
    sep.set_page_present(0, false).unwrap();
    c.post(&WorkRequest::write_inline(1, b"x", 0).unwrap().signaled())
        .unwrap();
    assert!(wait_until(&pair.client, T, || s.state() == ConnState::Exceptioned));
    sep.set_page_present(0, true).unwrap();
    s.resume().unwrap();
    assert!(matches!(
        s.resume(),
        Err(Error::Resume(ResumeError::NotExceptioned(_)))
    ));
    assert_eq!(ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert_eq!(s.arrivals(), 1);
    // The client end never faulted either.
    assert!(matches!(
        c.resume(),
        Err(Error::Resume(ResumeError::NotExceptioned(_)))
    ));
}

#[test]
fn a_receiver_that_never_repairs_ends_in_a_bounded_rnr_error() {
    let pair = ring_pair_with(
        "exc_rnr",
        |_| {},
        |c| {
            c.rnr_retry_count = 4;
            c.rnr_timeout = Duration::from_micros(100);
        },
    );
    let regs = pair.server.alloc_registers(1).unwrap();
    let (sep, _cep, ccq, conns, _l) = connections(&pair, 1, regs, Rights::REMOTE_WRITE);
    let (c, s) = &conns[0];
    sep.set_page_present(1, false).unwrap();
    let start = std::time::Instant::now();
    c.post(
        &WorkRequest::write_inline(1, b"never", 4096)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    c.post(
        &WorkRequest::write_inline(2, b"behind", 0)
            .unwrap()
            .signaled(),
    )
    .unwrap();
    let wcs = wait_completions(&ccq, 2, T);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        // The second was sent behind the first (the receiver held it back, but the
        // sender cannot know that it never will run it): unacknowledged.
        [
            (1, WcStatus::RnrRetryExceeded),
            (2, WcStatus::Unacknowledged)
        ]
    );
    assert_eq!(c.state(), ConnState::Error);
    assert!(matches!(
        c.post(&WorkRequest::write_inline(3, b"no", 0).unwrap()),
        Err(Error::NotConnected(ConnState::Error))
    ));
    assert_eq!(s.state(), ConnState::Exceptioned);
    check_zero(&sep, 0, LEN).unwrap();
}
