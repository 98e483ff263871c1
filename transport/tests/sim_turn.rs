//! The simulator drives every node through `Node::turn`, the DPDK worker's own turn:
//! a host takes what arrived one receive burst at a time and acknowledges within a
//! burst, as the worker on a port does (before, `sim` handed a node every frame due at
//! once and acknowledged only after the last: per-turn behaviour was never simulated).

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::node::{NodeConfig, ACK_EVERY_FRAMES, RX_BURST};
use deposit_transport::sim::{LinkConfig, HZ};

#[test]
fn a_host_takes_a_burst_a_turn_and_acknowledges_within_it() {
    let (mut net, a, b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        3,
        &ConnectOptions::default(),
    );
    // Writes of one full frame each, posted at once: the sender's window puts them
    // on the wire in one turn, so they arrive together.
    let len = net.hosts[0].node.segment_max() as usize;
    let n = 100;
    let want = pattern(&net, &a, 0, len * n, 9);
    post_all(
        &a,
        (0..n).map(|i| write(i as u64, &a, (i * len) as u64, len as u32, (i * len) as u32)),
    );
    let (mut rx, mut tx) = {
        let s = net.hosts[1].node.stats();
        (s.frames_rx, s.frames_tx)
    };
    // Per turn of the receiver: frames taken, frames it sent.
    let mut turns = Vec::new();
    let mut got = Vec::new();
    net.run_until(HZ, |net| {
        let s = net.hosts[1].node.stats();
        if s.frames_rx > rx {
            turns.push((s.frames_rx - rx, s.frames_tx - tx));
        }
        (rx, tx) = (s.frames_rx, s.frames_tx);
        got.extend(deposit_transport::sim::drain(&a.cq));
        got.len() >= n
    });
    assert_eq!(got.len(), n, "{turns:?}");
    all_ok(&got);
    same(&bytes(&net, &b, 0, len * n), &want, "deposits");
    let most = turns.iter().map(|t| t.0).max().unwrap();
    assert_eq!(most, RX_BURST as u64, "frames taken per turn: {turns:?}");
    // A full burst is acknowledged every ACK_EVERY_FRAMES frames inside the turn,
    // not once after it.
    let (_, acks) = turns.iter().find(|t| t.0 == RX_BURST as u64).unwrap();
    assert!(
        *acks >= RX_BURST as u64 / u64::from(ACK_EVERY_FRAMES),
        "a burst of {RX_BURST} frames sent {acks} frames: {turns:?}"
    );
}
