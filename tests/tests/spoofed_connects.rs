//! ReDMArk's connection-exhaustion attack (A4) by spoofed connect requests, on a Linux
//! bridge with three namespaces (af_packet): an attacker sends thousands of connect
//! requests from random IP and MAC addresses, half with guessed cookies, while the
//! real client connects and writes 2 MiB. The server answers each spoofed request
//! with a challenge and keeps nothing: the client connects and every byte is checked,
//! the server holds one connection (backlog 4: the flood never takes a place), and its
//! counters show the challenges and the refused cookies (docs/design.md §7, §10).

use std::time::{Duration, Instant};

use deposit_tests::netns::Topology;

const T: Duration = Duration::from_secs(60);
const FLOOD: u64 = 20_000;

fn value(lines: &[String], name: &str) -> u64 {
    let v = deposit_tests::netns::value(lines, name);
    v.parse()
        .unwrap_or_else(|e| panic!("{name} {v:?}: {e} (said {lines:?})"))
}

#[test]
fn spoofed_connect_requests_make_no_connection_and_the_real_client_gets_in() {
    let Some(topo) = Topology::or_skip(3) else {
        return;
    };
    let deadline = Instant::now() + T;
    let mut nodes = topo.start_all(
        env!("CARGO_BIN_EXE_testnode"),
        |i, port| {
            let port = format!("af_packet:{port}");
            match i {
                0 => vec!["spoof-server".into(), port],
                1 => vec!["spoof-client".into(), port],
                _ => vec!["spoof-flood".into(), port, FLOOD.to_string()],
            }
        },
        deadline,
    );
    nodes[2].expect(2, "flooded", deadline);
    nodes[1].expect(1, "completed", deadline);
    nodes[0].expect(0, "verified", deadline);
    nodes[0].say("report"); // after the flood: its counters are whole
    let stats = nodes[0].expect(0, "stats", deadline);
    deposit_tests::netns::exit_all(&mut nodes);
    drop(nodes);
    drop(topo);
    eprintln!("server: {stats:?}");
    assert_eq!(value(&stats, "connections"), 1, "{stats:?}");
    let (challenges, bad, limited) = (
        value(&stats, "challenges"),
        value(&stats, "bad_cookie"),
        value(&stats, "rate_limited"),
    );
    // Thousands reached the server (af_packet rings and the bridge drop part of a
    // flood on two shared cores), each challenged or refused, its guessed cookies
    // (every other request carries one) counted.
    assert!(challenges + limited >= 2000, "{stats:?}");
    assert!(bad * 3 >= challenges, "{stats:?}");
}
