//! What completes, and with which status, when a connection can no longer complete
//! its requests the usual way: a close with many requests outstanding tells the ones
//! that certainly did not run (`Flushed`: never transmitted) from those that may have
//! (`Unacknowledged`); a failed request completes signaled or not, also after its
//! connection is gone and however full its completion queue; `waits` counts every
//! completion that waited for room; and what `LocalLengthError` is given for.

mod common;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::{Completion, ConnState, CqShared, WcStatus, WR_SIGNALED};
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{self, LinkConfig, Network, HZ};
use deposit_transport::tables::PAGE_SIZE;
use deposit_transport::wire::{cell::op, FrameView};

/// Bytes of each write of the close test: one message each.
const LEN: usize = 64;

/// The requests of `from`'s data frames (`filter` on the wire), by the remote offset
/// each write names: every request of which a message was put on the wire.
fn record_writes(net: &mut Network, from: usize, seen: Rc<RefCell<HashSet<u64>>>) {
    net.set_filter(Some(Box::new(move |src, _to, f| {
        if src != from {
            return false;
        }
        let mut v = FrameView::parse(f).ok();
        while let Some(s) = v {
            if s.header.dst_conn != 0 {
                for m in s.messages().flatten() {
                    if m.control.opcode == op::WRITE {
                        seen.borrow_mut()
                            .insert(u64::from(m.control.operand) / LEN as u64);
                    }
                }
            }
            v = s.next_section();
        }
        false
    })));
}

/// Posts `n` signaled writes of `LEN` distinct bytes each (request `i` from and to
/// offset `i * LEN`) on `a`, lets `after` of them complete, closes `a`'s connection and
/// checks each request's status against what the peer's memory and the wire show.
/// Returns how many completed (successfully, unacknowledged, flushed), and how many
/// of the unacknowledged ones ran at the peer.
fn close_with_outstanding(seed: u64, link: LinkConfig, n: usize, after: usize) -> [usize; 4] {
    let cfg = NodeConfig {
        window: 64,
        ..NodeConfig::default()
    };
    let (mut net, a, b) = pair(&cfg, link, seed, &ConnectOptions::default());
    let src = pattern(&net, &a, 0, n * LEN, seed as u8 | 1);
    let sent = Rc::new(RefCell::new(HashSet::new()));
    record_writes(&mut net, 0, sent.clone());
    post_all(
        &a,
        (0..n).map(|i| write(i as u64, &a, (i * LEN) as u64, LEN as u32, (i * LEN) as u32)),
    );
    let mut done: Vec<Completion> = Vec::new();
    assert!(net.run_until(10 * HZ, |_| {
        done.extend(sim::drain(&a.cq));
        done.len() >= after
    }));
    let now = net.now;
    net.hosts[0].node.set_now(now);
    net.hosts[0].node.close(a.conn.number).expect("close");
    // Every request completes at the close (nothing waits for the peer's answer).
    done.extend(sim::drain(&a.cq));
    assert_eq!(done.len(), n, "every request completes at the close");
    // What was on the wire lands meanwhile (it may: those are `Unacknowledged`).
    net.run_for(HZ / 10);
    assert!(sim::drain(&a.cq).is_empty(), "nothing completes twice");
    let sent = sent.borrow();
    let mut counts = [0; 4];
    for wc in &done {
        let i = wc.wr_id as usize;
        let there = bytes(&net, &b, i * LEN, LEN);
        let ran = there == src[i * LEN..(i + 1) * LEN];
        assert!(
            ran || there.iter().all(|&x| x == 0),
            "request {i}: a one-message write lands whole or not at all"
        );
        let transmitted = sent.contains(&(i as u64));
        let what = format!("request {i} (ran: {ran}, transmitted: {transmitted}): {wc:?}");
        assert!(!ran || transmitted, "{what}");
        match wc.status {
            WcStatus::Success => {
                assert!(ran, "{what}");
                counts[0] += 1;
            }
            WcStatus::Unacknowledged => {
                assert!(transmitted, "{what}");
                counts[1] += 1;
                counts[3] += usize::from(ran);
            }
            WcStatus::Flushed => {
                assert!(!transmitted && !ran, "{what}");
                counts[2] += 1;
            }
            _ => panic!("{what}"),
        }
    }
    // In posting order, successes first: a request completes after those before it.
    let first_failed = done.iter().position(|c| c.status != WcStatus::Success);
    assert!(first_failed.is_none_or(|f| done[f..].iter().all(|c| !c.status.is_ok())));
    assert_eq!(a.conn.state(), ConnState::Closed);
    counts
}

#[test]
fn a_close_flushes_only_what_never_left_and_says_unacknowledged_for_what_may_have_run() {
    let mut ran_unacknowledged = 0;
    for seed in 1..=20 {
        let [ok, unack, flushed, ran] =
            close_with_outstanding(seed, LinkConfig::default(), 1000, 100 + 10 * seed as usize);
        assert!(
            ok >= 100 && unack > 0 && flushed > 0,
            "seed {seed}: {ok} {unack} {flushed}"
        );
        ran_unacknowledged += ran;
    }
    // The case the status exists for: requests that ran at the peer, their
    // acknowledgement still on its way when the connection closed.
    assert!(ran_unacknowledged > 0);
}

#[test]
fn over_a_lossy_link_the_statuses_stay_truthful() {
    for seed in 1..=10 {
        let [ok, unack, flushed, _] =
            close_with_outstanding(seed, LinkConfig::lossy(0.05), 400, 50);
        assert_eq!(ok + unack + flushed, 400);
    }
}

/// Requests in flight on a connection that a message of its peer's holds for the host
/// (its receive side exceptioned) complete when it closes, as on any other.
#[test]
fn closing_an_exceptioned_connection_completes_its_outstanding_requests() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        7,
        &ConnectOptions::default(),
    );
    net.hosts[1].node.set_page_present(b.ep, 3, false).unwrap();
    post_all(&a, [write(1, &a, 0, 64, 3 * PAGE_SIZE as u32)]);
    assert!(net.run_until(HZ, |_| b.conn.state() == ConnState::Exceptioned));
    // The exceptioned side sends: two requests on the wire, one still posted.
    post_all(&b, [write(10, &b, 0, 64, 0), write(11, &b, 0, 64, 64)]);
    net.step();
    post_all(&b, [write(12, &b, 0, 64, 128)]);
    let now = net.now;
    net.hosts[1].node.set_now(now);
    net.hosts[1].node.close(b.conn.number).expect("close");
    let got: Vec<_> = complete(&mut net, &b, 3, 1)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [
            (10, WcStatus::Unacknowledged),
            (11, WcStatus::Unacknowledged),
            (12, WcStatus::Flushed)
        ]
    );
    assert_eq!(b.cq.reserved(), 0, "polled: every slot is back");
    // The peer is told: its outstanding request ends too.
    let wc = complete(&mut net, &a, 1, 10);
    assert_eq!(wc[0].wr_id, 1);
    assert_ne!(wc[0].status, WcStatus::Success);
    assert_eq!(a.conn.state(), ConnState::Closed);
}

/// `n` unsignaled writes past the end of the peer's endpoint: each is refused there.
fn refused_writes(net: &mut Network, a: &End, n: u64) {
    for id in 0..n {
        let mut wr = write(id, a, 0, 64, EP_LEN as u32 - 32);
        wr.flags &= !WR_SIGNALED;
        assert!(sim::post(&a.conn, wr));
    }
    let refused = |net: &Network| net.hosts[1].node.stats().dropped(DropReason::OutOfBounds);
    assert!(net.run_until(HZ, |net| refused(net) == n));
    net.run_for(HZ / 1000);
}

#[test]
fn failed_unsignaled_requests_complete_after_their_connection_is_gone_however_full_the_queue() {
    const DEPTH: usize = 4;
    const BAD: u64 = 12;
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 9);
    let small = CqShared::new(DEPTH);
    let (ep0, _) = eps[0].clone();
    let (ep1, cq1) = eps[1].clone();
    let (c, _s) = net
        .connect(
            0,
            ep0,
            &small,
            1,
            ep1,
            &cq1,
            101,
            &ConnectOptions::default(),
        )
        .expect("connected");
    let a = End {
        host: 0,
        ep: ep0,
        cq: small.clone(),
        conn: c,
    };
    refused_writes(&mut net, &a, BAD);
    // Four fit; every one of the other eight waited, and is counted.
    assert_eq!(
        a.cq.waits.load(std::sync::atomic::Ordering::Relaxed),
        BAD - DEPTH as u64
    );
    // The connection closes and goes (the peer answers) before anything is polled.
    let now = net.now;
    net.hosts[0].node.set_now(now);
    net.hosts[0].node.close(a.conn.number).unwrap();
    assert!(net.run_until(HZ, |n| n.hosts[0].node.connections() == 0));
    assert_eq!(
        net.hosts[0].node.stranded_completions(),
        BAD as usize - DEPTH
    );
    let got = complete(&mut net, &a, BAD as usize, 1);
    for (i, wc) in got.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status, wc.signaled, wc.remote_reason),
            (
                i as u64,
                WcStatus::RemoteAccessError,
                false,
                Some(DropReason::OutOfBounds)
            )
        );
    }
    assert_eq!(net.hosts[0].node.stranded_completions(), 0);
    assert_eq!(a.cq.overflows.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn stranded_completions_go_once_nothing_can_poll_their_queue() {
    let (mut net, eps) = network(2, &NodeConfig::default(), LinkConfig::default(), 10);
    let small = CqShared::new(2);
    let (ep0, _) = eps[0].clone();
    let (ep1, cq1) = eps[1].clone();
    let (c, _s) = net
        .connect(
            0,
            ep0,
            &small,
            1,
            ep1,
            &cq1,
            101,
            &ConnectOptions::default(),
        )
        .expect("connected");
    let a = End {
        host: 0,
        ep: ep0,
        cq: small,
        conn: c,
    };
    refused_writes(&mut net, &a, 6);
    let now = net.now;
    net.hosts[0].node.set_now(now);
    net.hosts[0].node.close(a.conn.number).unwrap();
    assert!(net.run_until(HZ, |n| n.hosts[0].node.connections() == 0));
    assert_eq!(net.hosts[0].node.stranded_completions(), 4);
    let cq = std::sync::Arc::downgrade(&a.cq);
    drop(a);
    net.run_for(HZ / 100);
    assert_eq!(net.hosts[0].node.stranded_completions(), 0);
    assert!(cq.upgrade().is_none(), "the queue itself is gone");
}

/// What must travel as one message and does not fit in one completes
/// `LocalLengthError`, without sending anything; a plain write of the same length, in
/// any address mode, is split into several messages and succeeds.
#[test]
fn local_length_error_is_for_what_must_fit_in_one_message() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        11,
        &with_registers(),
    );
    open_registers(&mut net, 1, 2);
    let max = net.hosts[0].node.segment_max();
    let long = max + 1;
    pattern(&net, &a, 0, long as usize, 5);
    // A register operation puts a compound descriptor in the request: one message.
    let mut compound = write(1, &a, 0, long, 0);
    compound.remote.compound = Some(
        deposit_transport::wire::compound::CompoundRepr {
            op1: deposit_transport::wire::compound::RegOpRepr {
                op: deposit_transport::wire::compound::RegOp::Add,
                src: deposit_transport::wire::compound::OpSource::Operand,
            },
            ..deposit_transport::wire::compound::CompoundRepr::NONE
        }
        .to_bytes(),
    );
    compound.remote.regs[1] = 1;
    let frames = net.hosts[0].node.stats().frames_tx;
    post_all(&a, [compound]);
    let wc = complete(&mut net, &a, 1, 1);
    assert_eq!(wc[0].status, WcStatus::LocalLengthError);
    assert_eq!(net.hosts[0].node.stats().frames_tx, frames, "nothing sent");
    // Without it, the same length (direct or post-increment) is split and lands.
    post_all(
        &a,
        [
            write(2, &a, 0, long, 0),
            with_mode(
                write(3, &a, 0, long, 0),
                deposit_transport::wire::cell::AddrMode::PostIncrement,
                0,
            ),
        ],
    );
    all_ok(&complete(&mut net, &a, 2, 1));
    let _ = b;
}
