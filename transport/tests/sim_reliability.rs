//! Reliable delivery between nodes over a simulated link: no DPDK, deterministic by
//! seed. Loss, reordering, duplication, corruption and delay come from the link; the
//! receiver's memory and the sender's completions are checked.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::{LinkConfig, HZ};

#[test]
fn a_write_crosses_a_clean_link() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        1,
        &ConnectOptions::default(),
    );
    let data = pattern(&net, &a, 0, 5000, 7);
    post_all(&a, [write(1, &a, 0, 5000, 4096)]);
    all_ok(&complete(&mut net, &a, 1, 1));
    assert_eq!(bytes(&net, &b, 4096, 5000), data);
    assert!(
        net.now < HZ / 100,
        "a clean write takes microseconds: {} ns",
        net.now
    );
}

use deposit_transport::connection::WcStatus;
use deposit_transport::oplogic::DropReason;
use deposit_transport::tables::PAGE_SIZE;
use deposit_transport::wire::{cell::AddrMode, FrameView};

/// Whether a frame carries messages (not an acknowledgement alone, not CM).
fn data_frame(f: &[u8]) -> Option<u32> {
    let v = FrameView::parse(f).ok()?;
    (v.header.cells > 0 && v.header.dst_conn != 0).then_some(v.header.seq)
}

/// Drops the `k`-th data frame (from 0) host `from` sends, once.
fn drop_nth_data_frame(from: usize, k: usize) -> deposit_transport::sim::Filter {
    let mut seen = 0;
    Box::new(move |src, _to, f| {
        if src != from || data_frame(f).is_none() {
            return false;
        }
        seen += 1;
        seen == k + 1
    })
}

#[test]
fn writes_land_exactly_once_over_a_hostile_link() {
    hostile_writes(usize::MAX);
}

/// The same with payloads of 512 bytes and more taken by reference to endpoint memory
/// (as on memif and af_packet ports): the frames' CRC is summed in three runs, the
/// payload's from the memory, and the link's buffers copy the payload in afterwards.
#[test]
fn writes_land_exactly_once_over_a_hostile_link_with_payloads_by_reference() {
    hostile_writes(512);
}

fn hostile_writes(external_min: usize) {
    for seed in 1..=6 {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig {
                external_min,
                ..LinkConfig::lossy(0.03)
            },
            seed,
            &ConnectOptions::default(),
        );
        let src = pattern(&net, &a, 0, 72 << 10, seed as u8);
        let mut wrs = Vec::new();
        let (mut dst, mut s) = (0u32, 0u64);
        for i in 0..300u64 {
            let len = 1 + ((i * 7919 + seed) % 6000) as u32;
            let off = s % (60 << 10);
            wrs.push((write(i, &a, off, len, dst), off, dst, len));
            dst += len;
            s += 977;
        }
        post_all(&a, wrs.iter().map(|w| w.0));
        let done = complete(&mut net, &a, wrs.len(), 60);
        all_ok(&done);
        // In posting order.
        assert!(done.windows(2).all(|w| w[0].wr_id < w[1].wr_id));
        for (_, off, dst, len) in &wrs {
            let (o, l) = (*off as usize, *len as usize);
            assert_eq!(
                bytes(&net, &b, *dst as usize, l),
                src[o..o + l],
                "seed {seed}"
            );
        }
        let (st, rx) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
        let l = net.stats;
        assert!(
            l.lost > 0 && l.duplicated > 0 && l.corrupted > 0 && l.reordered > 0,
            "{l:?}"
        );
        assert!(st.retransmits > 0, "seed {seed}: {st:?}");
        assert!(
            rx.duplicates > 0 && rx.dropped(DropReason::BadCrc) > 0,
            "seed {seed}: {rx:?}"
        );
        if external_min == usize::MAX {
            assert_eq!(st.payloads_by_reference, 0);
        } else {
            // Most of the 300 writes (1 to 6000 bytes) have a segment of 512 or more.
            assert!(st.payloads_by_reference > 200, "seed {seed}: {st:?}");
        }
    }
}

#[test]
fn one_lost_frame_is_repaired_by_selective_retransmission_not_the_timer() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        3,
        &ConnectOptions::default(),
    );
    let src = pattern(&net, &a, 0, 20_000, 3);
    net.set_filter(Some(drop_nth_data_frame(0, 2)));
    post_all(
        &a,
        (0..20).map(|i| write(i, &a, i * 1000, 1000, i as u32 * 1000)),
    );
    all_ok(&complete(&mut net, &a, 20, 1));
    same(&bytes(&net, &b, 0, 20_000), &src, "writes");
    let (st, rx) = (net.hosts[0].node.stats(), net.hosts[1].node.stats());
    assert_eq!(
        st.retransmits, 1,
        "only the lost message goes again: {st:?}"
    );
    assert_eq!(
        st.timeouts, 0,
        "the selective acknowledgement told, not the timer"
    );
    assert!(
        rx.reordered >= 3,
        "messages behind the gap were kept: {rx:?}"
    );
}

#[test]
fn a_refused_message_is_nakd_and_the_rest_go_on_even_when_naks_are_lost() {
    for (seed, link) in [
        (1, LinkConfig::default()),
        (2, LinkConfig::lossy(0.1)),
        (3, LinkConfig::lossy(0.1)),
    ] {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            link,
            seed,
            &ConnectOptions::default(),
        );
        let src = pattern(&net, &a, 0, 4000, 9);
        let beyond = (EP_LEN - 100) as u32; // 1000 bytes from here leave the endpoint
        let wrs = (0..30u64).map(|i| {
            if i % 10 == 5 {
                write(i, &a, 0, 1000, beyond)
            } else {
                write(i, &a, 0, 4000, i as u32 * 4000)
            }
        });
        post_all(&a, wrs);
        let done = complete(&mut net, &a, 30, 60);
        for c in &done {
            let want = if c.wr_id % 10 == 5 {
                WcStatus::RemoteAccessError
            } else {
                WcStatus::Success
            };
            assert_eq!(c.status, want, "seed {seed}: {c:?}");
            if want == WcStatus::Success {
                let d = c.wr_id as usize * 4000;
                same(&bytes(&net, &b, d, 4000), &src, "write");
            }
        }
        assert!(live(&a) && live(&b));
        assert_eq!(
            bytes(&net, &b, EP_LEN - 100, 100),
            vec![0; 100],
            "nothing of a refused write lands"
        );
        assert!(net.hosts[1].node.stats().naks_tx >= 3);
    }
}

#[test]
fn receiver_not_ready_backs_off_then_resumes_exactly_once() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::lossy(0.02),
        4,
        &ConnectOptions::default(),
    );
    let src = pattern(&net, &a, 0, 8192, 4);
    let page = 5u64;
    net.hosts[1]
        .node
        .set_page_present(b.ep, page, false)
        .unwrap();
    let at = (page * PAGE_SIZE) as u32;
    post_all(
        &a,
        [
            write(1, &a, 0, 4096, at - 4096),
            write(2, &a, 4096, 4096, at),
        ],
    );
    post_all(
        &a,
        [
            fetch_add(3, &a, 10_000, at + 4096, 5),
            write(4, &a, 0, 100, at + 8192),
        ],
    );
    // The second write faults: the connection is held for the host, the sender told
    // "not ready" and backing off.
    assert!(net.run_until(HZ, |n| n.hosts[0].node.stats().rnr_rx >= 3));
    let number = b.conn.number;
    assert_eq!(
        b.conn.state(),
        deposit_transport::connection::ConnState::Exceptioned
    );
    let exc = net.hosts[1]
        .node
        .endpoint_queues(b.ep)
        .unwrap()
        .exceptions
        .pop();
    assert!(exc.is_some(), "the fault is reported to the host");
    assert_eq!(
        sim_drain_len(&a),
        1,
        "only the write before the fault completed"
    );
    // The host maps the page and resumes.
    net.hosts[1]
        .node
        .set_page_present(b.ep, page, true)
        .unwrap();
    net.hosts[1].node.resume(number).unwrap();
    all_ok(&complete(&mut net, &a, 3, 10));
    same(
        &bytes(&net, &b, at as usize, 4096),
        &src[4096..8192],
        "the held write",
    );
    let word = u64::from_ne_bytes(bytes(&net, &b, at as usize + 4096, 8).try_into().unwrap());
    assert_eq!(word, 5, "the atomic behind the fault ran once");
    same(
        &bytes(&net, &b, at as usize + 8192, 100),
        &src[..100],
        "the write after",
    );
}

fn sim_drain_len(e: &End) -> usize {
    deposit_transport::sim::drain(&e.cq).len()
}

#[test]
fn receiver_not_ready_past_its_limit_fails_the_connection() {
    let cfg = NodeConfig {
        rnr_retry_count: 4,
        ..NodeConfig::default()
    };
    let (mut net, a, b) = pair(&cfg, LinkConfig::default(), 5, &ConnectOptions::default());
    net.hosts[1].node.set_page_present(b.ep, 2, false).unwrap();
    post_all(&a, [write(1, &a, 0, 64, 2 * PAGE_SIZE as u32)]);
    let done = complete(&mut net, &a, 1, 10);
    assert_eq!(done[0].status, WcStatus::RnrRetryExceeded);
    assert_eq!(
        net.hosts[0].node.stats().rnr_rx,
        5,
        "the limit, then one more"
    );
    assert!(!live(&a));
}

#[test]
fn keepalive_spares_a_live_peer_and_finds_a_dead_one() {
    let cfg = NodeConfig {
        keepalive_us: 1_000_000,
        keepalive_count: 3,
        ..NodeConfig::default()
    };
    let (mut net, a, b) = pair(&cfg, LinkConfig::default(), 6, &ConnectOptions::default());
    net.run_for(10 * HZ);
    assert!(live(&a) && live(&b));
    // Both sides probe an idle connection; each answer quiets the other side's timer.
    let probes: u64 = (0..2)
        .map(|h| net.hosts[h].node.stats().keepalive_probes)
        .sum();
    assert!(probes >= 5, "an idle connection probes its peer: {probes}");
    assert_eq!(net.hosts[0].node.stats().keepalive_failures, 0);
    // The server's host crashes: no answer to anything.
    net.hosts[1].down = true;
    let t0 = net.now;
    assert!(net.run_until(10 * HZ, |_| !live(&a)));
    let took = (net.now - t0) as f64 / HZ as f64;
    assert!(
        (3.0..6.0).contains(&took),
        "half-open detected after {took:.2} s"
    );
    assert_eq!(net.hosts[0].node.stats().keepalive_failures, 1);
    assert_eq!(
        a.conn.state(),
        deposit_transport::connection::ConnState::Error
    );
}

#[test]
fn credits_bound_what_a_sender_has_in_flight() {
    // Frames of one connection on the wire towards the receiver, at most, over a
    // link long enough to hold many: with the receiver's queue of 8 and of 1024.
    let most_in_flight = |rx_desc: u16| {
        let link = LinkConfig {
            latency_ns: 100_000,
            ..LinkConfig::default()
        };
        let (mut net, a, _b) = pair(&NodeConfig::default(), link, 7, &ConnectOptions::default());
        net.set_rx_desc(1, rx_desc);
        net.run_for(HZ / 100); // a timer turn: the grant goes out
        post_all(&a, [write(0, &a, 0, 8, 0)]);
        complete(&mut net, &a, 1, 1); // the sender hears the grant
        let seg = net.hosts[0].node.segment_max();
        pattern(&net, &a, 0, 300 * seg as usize, 1);
        post_all(
            &a,
            (0..300).map(|i| write(i, &a, i * seg as u64, seg, i as u32 * seg)),
        );
        let inflight = std::rc::Rc::new(std::cell::RefCell::new(std::collections::HashMap::new()));
        let most = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let (f, m) = (inflight.clone(), most.clone());
        let mut t = 0u64;
        net.set_filter(Some(Box::new(move |src, _, frame| {
            if src == 0 {
                if let Some(seq) = data_frame(frame) {
                    t += 1;
                    f.borrow_mut().insert(seq, t);
                    m.set(m.get().max(f.borrow().len()));
                }
            } else if let Ok(v) = FrameView::parse(frame) {
                let ack = v.header.ack;
                f.borrow_mut()
                    .retain(|&s, _| s.wrapping_sub(ack) as i32 >= 0);
            }
            false
        })));
        all_ok(&complete(&mut net, &a, 300, 10));
        most.get()
    };
    let (small, large) = (most_in_flight(8), most_in_flight(1024));
    assert!(small <= 8, "credits of 8 frames: {small} in flight");
    assert!(
        large > 3 * small,
        "a larger grant lets more fly: {large} vs {small}"
    );
}

#[test]
fn segments_ahead_of_a_gap_are_placed_relative_to_their_first() {
    // A send (post-increment on r0, stride r1) of six messages; one of its data frames
    // is lost. Later segments are placed on arrival once the first ran; when the first
    // is the lost one they are kept and run after it. Either way the address is taken
    // once and the data lands in order.
    for lost in [0usize, 1, 3] {
        let opts = with_registers();
        let (mut net, a, b) = pair(&NodeConfig::default(), LinkConfig::default(), 8, &opts);
        open_registers(&mut net, 1, 2);
        net.hosts[1].node.set_register(0, 40_000).unwrap();
        net.hosts[1].node.set_register(1, 100_000).unwrap();
        let seg = net.hosts[0].node.segment_max() as usize;
        let len = 5 * seg + 77;
        let src = pattern(&net, &a, 0, len, lost as u8);
        net.set_filter(Some(drop_nth_data_frame(0, lost)));
        post_all(
            &a,
            [with_mode(
                write(1, &a, 0, len as u32, 0),
                AddrMode::PostIncrement,
                0,
            )],
        );
        all_ok(&complete(&mut net, &a, 1, 1));
        same(
            &bytes(&net, &b, 40_000, len),
            &src,
            &format!("lost frame {lost}"),
        );
        assert_eq!(
            net.hosts[1].node.register(0),
            Some(140_000),
            "moved once, by the stride"
        );
        let rx = net.hosts[1].node.stats();
        assert_eq!(net.hosts[0].node.stats().retransmits, 1);
        if lost == 0 {
            assert_eq!(
                rx.placed_ahead, 0,
                "nothing is placed before its first segment ran"
            );
            assert!(rx.reordered >= 3);
        } else {
            // Every later segment but the last (which completes the request in order).
            assert_eq!(
                rx.placed_ahead as usize,
                6 - lost - 2,
                "lost {lost}: {rx:?}"
            );
        }
    }
}

#[test]
fn atomics_apply_exactly_once_under_loss_and_duplication() {
    for seed in 1..=3 {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig::lossy(0.05),
            seed,
            &ConnectOptions::default(),
        );
        let n = 400u64;
        post_all(&a, (0..n).map(|i| fetch_add(i, &a, i * 8, 512, 1)));
        all_ok(&complete(&mut net, &a, n as usize, 60));
        let word =
            |e: &End, off: usize| u64::from_ne_bytes(bytes(&net, e, off, 8).try_into().unwrap());
        assert_eq!(word(&b, 512), n, "seed {seed}");
        let mut old: Vec<u64> = (0..n as usize).map(|i| word(&a, i * 8)).collect();
        assert_eq!(old, (0..n).collect::<Vec<_>>(), "in order, each value once");
        old.dedup();
        assert!(net.stats.duplicated > 0 && net.stats.lost > 0);
    }
}

/// Whether a frame carries a NAK cell.
fn carries_nak(f: &[u8]) -> bool {
    FrameView::parse(f).is_ok_and(|v| {
        v.messages()
            .any(|m| m.is_ok_and(|m| m.control.opcode == deposit_transport::wire::op::NAK))
    })
}

/// Drops the first `k` frames host `from` sends that carry a NAK.
fn drop_first_naks(from: usize, k: usize) -> deposit_transport::sim::Filter {
    let mut dropped = 0;
    Box::new(move |src, _to, f| {
        let drop = src == from && dropped < k && carries_nak(f);
        dropped += usize::from(drop);
        drop
    })
}

/// Posts `n` writes from `a` where every `bad`-th one leaves the peer's endpoint, runs
/// them to completion and checks every status and every byte that landed.
fn refusals_complete_with_errors(
    net: &mut deposit_transport::sim::Network,
    a: &End,
    b: &End,
    n: u64,
    bad: u64,
) {
    let src = pattern(net, a, 0, 4000, 5);
    let beyond = (EP_LEN - 100) as u32;
    let wrs = (0..n).map(|i| {
        if i % bad == bad - 1 {
            write(i, a, 0, 1000, beyond)
        } else {
            write(i, a, 0, 4000, i as u32 * 4000)
        }
    });
    post_all(a, wrs);
    let done = complete(net, a, n as usize, 60);
    for c in &done {
        let want = if c.wr_id % bad == bad - 1 {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::Success
        };
        assert_eq!(c.status, want, "{c:?}");
        if want == WcStatus::Success {
            same(&bytes(net, b, c.wr_id as usize * 4000, 4000), &src, "write");
        }
    }
    assert_eq!(bytes(net, b, EP_LEN - 100, 100), vec![0; 100]);
    assert!(live(a) && live(b));
}

#[test]
fn a_lost_nak_never_turns_a_refused_write_into_success() {
    // The receiver refuses a write and moves on; the frames that carry the NAK are
    // lost while later writes are acknowledged. Its later acknowledgements must not
    // pass the refusal until the sender has seen the NAK. With traffic the other way
    // too, the acknowledgements that ride on data frames must not either.
    for (seed, both_ways) in [(1, false), (2, true), (3, false), (4, true)] {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig::default(),
            seed,
            &ConnectOptions::default(),
        );
        net.set_filter(Some(drop_first_naks(1, 1 + seed as usize)));
        if both_ways {
            post_all(
                &b,
                (0..40u64).map(|i| write(100 + i, &b, 0, 2000, 500_000 + i as u32 * 2000)),
            );
        }
        refusals_complete_with_errors(&mut net, &a, &b, 30, 10);
        if both_ways {
            all_ok(&complete(&mut net, &b, 40, 10));
        }
        let rx = net.hosts[1].node.stats();
        assert!(rx.naks_tx > 3, "the NAKs were repeated: {rx:?}");
    }
}

#[test]
fn more_refusals_than_the_record_holds_wait_for_room_and_all_complete() {
    // Every other write is refused: far more refusals than the receiver keeps
    // unconfirmed (MAX_REFUSALS), with the first NAK frames lost and a lossy link.
    for (seed, link) in [(5, LinkConfig::default()), (6, LinkConfig::lossy(0.05))] {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            link,
            seed,
            &ConnectOptions::default(),
        );
        net.set_filter(Some(drop_first_naks(1, 4)));
        refusals_complete_with_errors(&mut net, &a, &b, 120, 2);
    }
}

#[test]
fn a_connection_gives_back_its_in_flight_memory_when_it_goes_quiet() {
    let cfg = NodeConfig {
        keepalive_us: 1_000_000,
        ..NodeConfig::default()
    };
    let (mut net, a, b) = pair(&cfg, LinkConfig::default(), 9, &ConnectOptions::default());
    let capacity = |net: &deposit_transport::sim::Network, e: &End| {
        let node = &net.hosts[e.host].node;
        let conns = node.conn_table();
        let slot = conns.slot_of(e.conn.number).unwrap();
        conns.get(slot).unwrap().inflight.capacity()
    };
    assert_eq!(capacity(&net, &a), 0, "nothing preallocated");
    post_all(
        &a,
        (0..2000u64).map(|i| write(i, &a, 0, 64, (i * 64) as u32)),
    );
    post_all(
        &b,
        (0..2000u64).map(|i| write(i, &b, 0, 64, (i * 64) as u32)),
    );
    all_ok(&complete(&mut net, &a, 2000, 5));
    all_ok(&complete(&mut net, &b, 2000, 5));
    assert!(capacity(&net, &a) > 16, "grew with what was outstanding");
    net.run_for(5 * HZ / 2);
    assert!(live(&a) && live(&b));
    assert_eq!(
        capacity(&net, &a),
        0,
        "given back after a quiet keepalive period"
    );
    assert_eq!(
        capacity(&net, &b),
        0,
        "at the side that answered the probe too"
    );
    // And it grows again when needed.
    post_all(
        &a,
        (0..100u64).map(|i| write(i, &a, 0, 64, (i * 64) as u32)),
    );
    all_ok(&complete(&mut net, &a, 100, 5));
}

/// One connection carrying writes both ways at once over a lossy link (as the
/// libfabric provider's one connection per pair of endpoints does): retransmissions
/// in both directions, acknowledgements riding on the other side's data, and every
/// write of both sides lands exactly once and completes.
#[test]
fn writes_both_ways_on_one_connection_survive_loss() {
    for seed in 1..=6 {
        let (mut net, a, b) = pair(
            &NodeConfig::default(),
            LinkConfig::lossy(0.03),
            seed,
            &ConnectOptions::default(),
        );
        let src_a = pattern(&net, &a, 0, 64 << 10, seed as u8);
        let src_b = pattern(&net, &b, 0, 64 << 10, seed as u8 ^ 0x5a);
        let mut wrs = Vec::new();
        let mut dst = 128u32 << 10;
        for i in 0..200u64 {
            let len = 1 + ((i * 7919 + seed) % 9000) as u32;
            let off = (i * 977) % (50 << 10);
            wrs.push((i, off, dst, len));
            dst += len;
        }
        post_all(&a, wrs.iter().map(|&(i, o, d, l)| write(i, &a, o, l, d)));
        post_all(&b, wrs.iter().map(|&(i, o, d, l)| write(i, &b, o, l, d)));
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        net.run_until(60 * HZ, |_| {
            got_a.extend(deposit_transport::sim::drain(&a.cq));
            got_b.extend(deposit_transport::sim::drain(&b.cq));
            got_a.len() >= wrs.len() && got_b.len() >= wrs.len()
        });
        assert_eq!(
            (got_a.len(), got_b.len()),
            (wrs.len(), wrs.len()),
            "seed {seed}: completions within 60 s; a {:?} b {:?}",
            net.hosts[0].node.stats(),
            net.hosts[1].node.stats()
        );
        all_ok(&got_a);
        all_ok(&got_b);
        for &(_, off, dst, len) in &wrs {
            let (o, l, d) = (off as usize, len as usize, dst as usize);
            same(&bytes(&net, &b, d, l), &src_a[o..o + l], "a -> b");
            same(&bytes(&net, &a, d, l), &src_b[o..o + l], "b -> a");
        }
        assert!(net.hosts[0].node.stats().retransmits > 0);
        assert!(net.hosts[1].node.stats().retransmits > 0);
    }
}
