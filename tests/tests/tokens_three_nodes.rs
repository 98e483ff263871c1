//! A payload token is a value any node may carry (docs/design.md §3, "Payload tokens"):
//! three `testnode token-node` processes, each in its own network namespace on an
//! af_packet port (the topology of `tests/barrier.rs`). Node a registers a buffer and
//! writes the token into node b's memory with an ordinary write; b forwards it to node
//! c the same way; c deposits into a's buffer with it and then tries again. a checks
//! the bytes and its token event (key right, on the connection c opened), and that the
//! second try was refused and left nothing. Everything created is removed at the end,
//! on failure too.

use std::time::{Duration, Instant};

use deposit_tests::netns::{value, Topology};

const T: Duration = Duration::from_secs(30);

#[test]
fn a_token_forwarded_through_a_third_node_deposits_once_over_af_packet() {
    let Some(topo) = Topology::or_skip(3) else {
        return;
    };
    let deadline = Instant::now() + T;
    let mut nodes = topo.start_all(
        env!("CARGO_BIN_EXE_testnode"),
        |i, port| {
            let role = ["a", "b", "c"][i];
            vec![
                "token-node".into(),
                format!("af_packet:{port}"),
                role.into(),
            ]
        },
        deadline,
    );
    let a = nodes[0].expect(0, "awaiting check", deadline);
    let b = nodes[1].expect(1, "done", deadline);
    let c = nodes[2].expect(2, "done", deadline);
    // c has been refused: a checks that the second try left nothing.
    nodes[0].say("check");
    let a_after = nodes[0].expect(0, "done", deadline);

    let issued = value(&a, "token");
    assert_eq!(value(&b, "received"), issued, "b got a's token");
    assert_eq!(value(&b, "forwarded"), issued, "b forwarded it unchanged");
    assert_eq!(value(&c, "received"), issued, "c got it from b");
    // a's event names the connection c opened: c's view of its peer's number.
    assert_eq!(
        value(&a, "event"),
        format!("conn {} len 32", value(&c, "deposited conn")),
        "a's token event"
    );
    assert!(c.iter().any(|l| l == "refused"), "c: {c:?}");
    assert_eq!(a_after, ["single use"], "a after the second try");

    deposit_tests::netns::exit_all(&mut nodes);
    drop(nodes);
    drop(topo);
}
