//! Posting through the node's submission ring: a turn looks only at connections with
//! work, the send-queue depth stays a per-connection bound, and a post that races a
//! close completes as flushed.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::WcStatus;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::{self, LinkConfig};
use deposit_transport::submit::PostError;

/// Posts `n` 64 B writes on `a`, which must all be taken, then one more, which must be
/// refused with `refusal` and take nothing.
fn fill_until_refused(a: &End, n: u64, refusal: PostError) {
    for i in 0..n {
        a.conn
            .post(&write(i, a, 0, 64, 0))
            .unwrap_or_else(|e| panic!("post {i} of {n}: {e:?}"));
    }
    assert_eq!(a.conn.post(&write(n, a, 0, 64, 0)), Err(refusal));
    assert_eq!(a.conn.queued(), n as usize, "the refused post took nothing");
}

#[test]
fn a_turn_visits_only_the_connections_that_have_work() {
    let cfg = NodeConfig {
        max_connections: 1000,
        ..NodeConfig::default()
    };
    let (mut net, eps) = network(2, &cfg, LinkConfig::default(), 3);
    let conns: Vec<(End, End)> = (0..300)
        .map(|_| connect(&mut net, &eps, 0, 1, &ConnectOptions::default()))
        .collect();
    net.run_for(1_000_000);
    assert_eq!(
        net.hosts[0].node.ready_connections(),
        0,
        "idle: nothing listed"
    );
    let busy = [7usize, 150, 299];
    for (k, &i) in busy.iter().enumerate() {
        let a = &conns[i].0;
        pattern(&net, a, 0, 4096, k as u8);
        post_all(a, (0..20).map(|j| write(j, a, 0, 4096, (j as u32) * 4096)));
    }
    net.step();
    let listed = net.hosts[0].node.ready_connections();
    assert!(
        (1..=busy.len()).contains(&listed),
        "only the posting connections are listed: {listed}"
    );
    // The connections of a host share its completion queue.
    all_ok(&complete(&mut net, &conns[0].0, 20 * busy.len(), 5));
    net.run_for(1_000_000);
    assert_eq!(
        net.hosts[0].node.ready_connections(),
        0,
        "done: nothing listed"
    );
}

#[test]
fn the_send_queue_depth_bounds_each_connection_until_the_worker_takes_requests() {
    let opts = ConnectOptions {
        sq_depth: 4,
        ..ConnectOptions::default()
    };
    let (mut net, a, b) = pair(&NodeConfig::default(), LinkConfig::default(), 5, &opts);
    pattern(&net, &a, 0, 64, 1);
    fill_until_refused(&a, 4, PostError::QueueFull { depth: 4 });
    // Another connection of the same node is not affected by this one's depth.
    assert!(b.conn.post(&write(9, &b, 0, 64, 0)).is_ok());
    net.step(); // the worker takes them into flight: their places are free again
    assert_eq!(a.conn.queued(), 0);
    a.conn.post(&write(4, &a, 0, 64, 0)).expect("room again");
    all_ok(&complete(&mut net, &a, 5, 5));
}

#[test]
fn a_post_that_races_a_close_completes_as_flushed() {
    let (mut net, a, _b) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        9,
        &ConnectOptions::default(),
    );
    // Posted while the connection was usable, still on the ring when it closes.
    assert!(sim::post(&a.conn, write(1, &a, 0, 64, 0)));
    net.hosts[a.host].node.close(a.conn.number).expect("close");
    let done = complete(&mut net, &a, 1, 5);
    assert_eq!(done[0].status, WcStatus::Flushed);
    assert_eq!(done[0].wr_id, 1);
}

#[test]
fn a_full_submission_ring_refuses_with_nothing_taken() {
    let cfg = NodeConfig {
        submit_ring: 8,
        ..NodeConfig::default()
    };
    let (mut net, a, _b) = pair(&cfg, LinkConfig::default(), 11, &ConnectOptions::default());
    pattern(&net, &a, 0, 64, 2);
    fill_until_refused(&a, 8, PostError::RingFull { capacity: 8 });
    assert_eq!(
        a.cq.reserved(),
        8,
        "the refused post gave its completion slot back"
    );
    all_ok(&complete(&mut net, &a, 8, 5));
}
