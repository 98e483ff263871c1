//! Cell trains across connections: small messages and acknowledgements of many
//! connections to one peer share frames (one section per connection), only
//! connections to the same peer share a frame, and the sharing survives a hostile
//! link.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{LinkConfig, HZ};
use deposit_transport::wire::{write_trailer, FrameView, UNDERLAY_LEN};

fn config(conns: usize) -> NodeConfig {
    NodeConfig {
        max_connections: conns + 16,
        ..NodeConfig::default()
    }
}

/// `n` connections from host `a` to host `b`.
fn open(
    net: &mut deposit_transport::sim::Network,
    eps: &[(
        deposit_transport::tables::EndpointId,
        std::sync::Arc<deposit_transport::connection::CqShared>,
    )],
    a: usize,
    b: usize,
    n: usize,
) -> Vec<(End, End)> {
    (0..n)
        .map(|_| connect(net, eps, a, b, &ConnectOptions::default()))
        .collect()
}

#[test]
fn small_writes_on_many_connections_share_frames_and_so_do_their_acks() {
    const N: usize = 200;
    let (mut net, eps) = network(2, &config(N), LinkConfig::default(), 21);
    let conns = open(&mut net, &eps, 0, 1, N);
    net.run_for(1_000_000);
    let (tx0, rx1) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
    let want = pattern(&net, &conns[0].0, 0, 32 * N, 5);
    for (i, (a, _)) in conns.iter().enumerate() {
        post_all(a, [write(i as u64, a, 32 * i as u64, 32, 32 * i as u32)]);
    }
    all_ok(&complete(&mut net, &conns[0].0, N, 5));
    same(&bytes(&net, &conns[0].1, 0, 32 * N), &want, "deposits");
    let (s0, s1) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
    let frames = s0.frames_tx - tx0.frames_tx;
    assert_eq!(s0.msgs_tx - tx0.msgs_tx, N as u64, "no retransmission");
    assert!(
        frames * 10 <= N as u64,
        "{N} messages on {N} connections took {frames} frames"
    );
    assert!(s0.sections_tx - tx0.sections_tx >= (N as u64) * 9 / 10);
    // The receiver acknowledged the {N} connections in a few frames too.
    let acks = s1.frames_tx - rx1.frames_tx;
    assert!(
        acks * 10 <= N as u64,
        "{N} acknowledgements took {acks} frames"
    );
    assert!(s1.acks_tx - rx1.acks_tx >= N as u64);
    assert_eq!(s1.msgs_rx - rx1.msgs_rx, N as u64);
    assert_eq!(s1.drops.iter().sum::<u64>(), 0, "{:?}", s1.drops);
}

#[test]
fn only_connections_to_the_same_peer_share_a_frame() {
    const N: usize = 40;
    let (mut net, eps) = network(3, &config(2 * N), LinkConfig::default(), 23);
    let to1 = open(&mut net, &eps, 0, 1, N);
    let to2 = open(&mut net, &eps, 0, 2, N);
    net.run_for(1_000_000);
    let want = pattern(&net, &to1[0].0, 0, 32 * N, 9);
    // Interleaved on the ready list: 1, 2, 1, 2, ...
    for i in 0..N {
        for (k, list) in [&to1, &to2].into_iter().enumerate() {
            let a = &list[i].0;
            post_all(
                a,
                [write(
                    (k * N + i) as u64,
                    a,
                    32 * i as u64,
                    32,
                    32 * i as u32,
                )],
            );
        }
    }
    all_ok(&complete(&mut net, &to1[0].0, 2 * N, 5));
    for (h, list) in [(1, &to1), (2, &to2)] {
        same(&bytes(&net, &list[0].1, 0, 32 * N), &want, "deposits");
        let s = net.hosts[h].node.stats();
        assert_eq!(s.msgs_rx, N as u64, "host {h}");
        assert_eq!(s.dropped(DropReason::UnknownConnection), 0, "host {h}");
        assert_eq!(s.dropped(DropReason::WrongKey), 0, "host {h}");
    }
    assert!(net.hosts[0].node.stats().sections_tx > 0);
}

#[test]
fn trains_across_connections_survive_a_hostile_link() {
    const N: usize = 50;
    const PER: usize = 20;
    let (mut net, eps) = network(2, &config(N), LinkConfig::lossy(0.03), 25);
    let conns = open(&mut net, &eps, 0, 1, N);
    let want = pattern(&net, &conns[0].0, 0, 32 * N * PER, 3);
    for j in 0..PER {
        for (i, (a, _)) in conns.iter().enumerate() {
            let at = 32 * (i * PER + j);
            post_all(a, [write(at as u64, a, at as u64, 32, at as u32)]);
        }
    }
    all_ok(&complete(&mut net, &conns[0].0, N * PER, 30));
    same(
        &bytes(&net, &conns[0].1, 0, 32 * N * PER),
        &want,
        "deposits",
    );
    let s0 = net.hosts[0].node.stats();
    assert!(s0.sections_tx > 0 && s0.retransmits > 0, "{s0:?}");
    // Each write ran exactly once.
    assert_eq!(net.hosts[1].node.stats().msgs_rx, (N * PER) as u64);
}

#[test]
fn a_bad_section_costs_only_itself() {
    use std::cell::RefCell;
    use std::rc::Rc;
    const N: usize = 20;
    let (mut net, eps) = network(2, &config(N), LinkConfig::default(), 27);
    let conns = open(&mut net, &eps, 0, 1, N);
    net.run_for(1_000_000);
    let want = pattern(&net, &conns[0].0, 0, 32 * N, 7);
    // Keep (and drop) the first frame from 0 to 1 that carries several sections.
    let kept: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let k = kept.clone();
    net.set_filter(Some(Box::new(move |from, _, f| {
        let bundled = FrameView::parse(f).is_ok_and(|v| v.next_section().is_some());
        if from == 0 && bundled && k.borrow().is_none() {
            *k.borrow_mut() = Some(f.to_vec());
            return true;
        }
        false
    })));
    for (i, (a, _)) in conns.iter().enumerate() {
        post_all(a, [write(i as u64, a, 32 * i as u64, 32, 32 * i as u32)]);
    }
    net.step();
    net.set_filter(None);
    let mut frame = kept
        .borrow_mut()
        .take()
        .expect("a frame of several sections");
    let mut sections = 0;
    let mut v = Some(FrameView::parse(&frame).unwrap());
    while let Some(s) = v {
        sections += 1;
        v = s.next_section();
    }
    // The first section's key is wrong; the frame is otherwise sound (CRC resealed).
    frame[UNDERLAY_LEN + 8] ^= 0x40;
    let len = frame.len();
    write_trailer(&mut frame, len);
    let before = net.hosts[1].node.stats();
    let now = net.now;
    net.hosts[1].node.handle_frame(&frame, now);
    let after = net.hosts[1].node.stats();
    assert_eq!(
        after.dropped(DropReason::WrongKey) - before.dropped(DropReason::WrongKey),
        1
    );
    assert_eq!(
        after.msgs_rx - before.msgs_rx,
        sections - 1,
        "the other sections ran"
    );
    // The refused section's connection retransmits; everything lands once.
    all_ok(&complete(&mut net, &conns[0].0, N, 5));
    same(&bytes(&net, &conns[0].1, 0, 32 * N), &want, "deposits");
    assert_eq!(net.hosts[1].node.stats().msgs_rx, N as u64);
}

/// A long burst is acknowledged within the receiver's turn, not at its end: past
/// `ACK_EVERY_FRAMES` data frames the node says acknowledgements are due, and
/// `send_acks` puts them out at once; a single frame (a ping-pong) still waits for
/// the turn's end, where a reply may carry its acknowledgement.
#[test]
fn a_long_burst_is_acknowledged_within_the_turn() {
    use deposit_transport::node::ACK_EVERY_FRAMES;
    use deposit_transport::wire::hflags;
    let (mut net, a, _b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        22,
        &ConnectOptions::default(),
    );
    net.run_for(1_000_000);
    let now = net.now;
    let n = 2000u64;
    post_all(
        &a,
        (0..n).map(|i| write(i, &a, 32 * (i % 1000), 32, 32 * (i % 1000) as u32)),
    );
    // The sender's turn: its data frames.
    let tx = &mut net.hosts[0];
    tx.node.poll_transmit(now, &mut tx.out);
    let frames: Vec<Vec<u8>> = std::iter::from_fn(|| net.hosts[0].out.pop()).collect();
    assert!(
        frames.len() > ACK_EVERY_FRAMES as usize + 2,
        "{} frames",
        frames.len()
    );
    // The receiver's turn, frame by frame.
    let rx = &mut net.hosts[1];
    rx.node.handle_frame(&frames[0], now);
    assert!(
        !rx.node.acks_due(),
        "one frame: the acknowledgement may wait"
    );
    for (i, f) in frames[1..].iter().enumerate() {
        rx.node.handle_frame(f, now);
        let taken = i as u32 + 2;
        assert_eq!(
            rx.node.acks_due(),
            taken >= ACK_EVERY_FRAMES,
            "after {taken} frames"
        );
        if rx.node.acks_due() {
            break;
        }
    }
    rx.node.send_acks(&mut rx.out);
    assert!(!rx.node.acks_due());
    let acks: Vec<Vec<u8>> = std::iter::from_fn(|| net.hosts[1].out.pop()).collect();
    assert_eq!(acks.len(), 1, "one acknowledgement frame");
    let view = FrameView::parse(&acks[0]).expect("a valid frame");
    assert_ne!(view.header.flags & hflags::ACK, 0, "it acknowledges");
    // The sender takes it: the writes it covers complete.
    net.hosts[0].node.handle_frame(&acks[0], now);
    let done = deposit_transport::sim::drain(&a.cq);
    assert!(
        done.len() as u32 >= ACK_EVERY_FRAMES * 10,
        "{} writes completed by the mid-turn acknowledgement",
        done.len()
    );
    all_ok(&done);
}

#[test]
fn an_answer_on_another_connection_carries_the_acknowledgement_of_its_request() {
    // The libfabric provider's shape: a request on host 0's connection to host 1, its
    // answer on host 1's own connection back. The answer's frame carries the request's
    // acknowledgement (a section of its own), and the next request carries the
    // answer's: one frame per message each way, none for acknowledgements alone.
    const ROUNDS: u64 = 100;
    let (mut net, eps) = network(2, &config(2), LinkConfig::default(), 29);
    let (req, req_at_1) = connect(&mut net, &eps, 0, 1, &ConnectOptions::default());
    let (ans, ans_at_0) = connect(&mut net, &eps, 1, 0, &ConnectOptions::default());
    net.run_for(1_000_000);
    let (f0, f1) = (
        net.hosts[0].node.stats().frames_tx,
        net.hosts[1].node.stats().frames_tx,
    );
    let mut answered = 0;
    for round in 0..ROUNDS {
        let off = 64 * round;
        let question = pattern(&net, &req, off as usize, 64, round as u8);
        let answer = pattern(&net, &ans, 8192 + off as usize, 64, !(round as u8));
        let got = net.hosts[1].node.stats().msgs_rx;
        post_all(&req, [write(round, &req, off, 64, 16384 + off as u32)]);
        // Host 1 takes the request in (its acknowledgement is owed) ...
        assert!(net.run_until(HZ, |n| n.hosts[1].node.stats().msgs_rx > got));
        same(
            &bytes(&net, &req_at_1, 16384 + off as usize, 64),
            &question,
            "request",
        );
        // ... and answers before its next transmission.
        post_all(
            &ans,
            [write(round, &ans, 8192 + off, 64, 24576 + off as u32)],
        );
        all_ok(&complete(&mut net, &req, 1, 1));
        same(
            &bytes(&net, &ans_at_0, 24576 + off as usize, 64),
            &answer,
            "answer",
        );
        answered += sim_drain_ok(&ans);
    }
    // The last answer's acknowledgement has no request to ride on: it goes alone.
    answered += complete(&mut net, &ans, (ROUNDS - answered) as usize, 1).len() as u64;
    assert_eq!(answered, ROUNDS);
    let (s0, s1) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
    assert_eq!(s1.frames_tx - f1, ROUNDS, "host 1: one frame per answer");
    assert_eq!(
        s0.frames_tx - f0,
        ROUNDS + 1,
        "host 0: one per request, one last ack"
    );
    assert_eq!(s0.msgs_tx + s1.msgs_tx, 2 * ROUNDS, "no retransmission");
    assert!(s1.sections_tx >= ROUNDS && s0.sections_tx >= ROUNDS - 1);
}

/// Takes `end`'s completions queued now (each a success); how many.
fn sim_drain_ok(end: &End) -> u64 {
    let c = deposit_transport::sim::drain(&end.cq);
    all_ok(&c);
    c.len() as u64
}
