//! Barrier synchronisation across three nodes (seed §3.4: "toggles a bit in a
//! specified address register of all processes in the barrier set and then waits for
//! a conditional interrupt when all the bits are set (or cleared)").
//!
//! Three `testnode barrier-node` processes, each in its own network namespace on an
//! af_packet port over a veth pair, the three veths bridged in the root namespace
//! (hairpin on, so that a node reaches its own barrier register through the network
//! like the others'). Everything the test creates is removed at the end, on failure
//! too.

use std::time::{Duration, Instant};

use deposit_tests::netns::Topology;

const NODES: usize = 3;
const ROUNDS: u32 = 6;
const T: Duration = Duration::from_secs(30);

/// Runs the barrier with each node on a `kind` port (`af_packet`, `af_xdp`) on its
/// namespace's veth end.
fn barrier_over(kind: &str, max_frame: usize) {
    let Some(topo) = Topology::or_skip(NODES) else {
        return;
    };
    let deadline = Instant::now() + T;
    let mut nodes = topo.start_all(
        env!("CARGO_BIN_EXE_testnode"),
        |i, port| {
            vec![
                "barrier-node".into(),
                format!("{kind}:{port}"),
                i.to_string(),
                ROUNDS.to_string(),
                max_frame.to_string(),
            ]
        },
        deadline,
    );
    for (i, n) in nodes.iter_mut().enumerate() {
        let rounds = n.expect(i, "done", deadline);
        let want: Vec<String> = (0..ROUNDS).map(|r| format!("round {r}")).collect();
        assert_eq!(rounds, want, "node {i}");
    }
    deposit_tests::netns::exit_all(&mut nodes);
    drop(nodes);
    drop(topo);
}

#[test]
fn three_nodes_pass_a_barrier_by_toggling_bits_over_af_packet() {
    barrier_over("af_packet", 1514);
}

#[test]
fn three_nodes_pass_a_barrier_by_toggling_bits_over_af_xdp() {
    barrier_over("af_xdp", 1514);
}
