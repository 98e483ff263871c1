//! A peer process killed mid-run (SIGKILL, no goodbye): every outstanding work
//! request of the survivor completes — the oldest with retry exceeded, the rest
//! unacknowledged (sent) or flushed (never sent) — within the configured retry budget;
//! later posts fail clearly; no mbuf is left behind; no hang.
//!
//! Two `testnode` processes in network namespaces on af_packet ports over veth pairs
//! joined by a bridge (memif is not used here: DPDK 22.11's memif unmaps a departed
//! peer's rings from its interrupt thread, which a survivor inside a burst does not
//! survive).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use deposit_tests::netns::{Node, Topology};

const T: Duration = Duration::from_secs(30);
/// The client's retransmission timeout and retries: it gives up after
/// 10 x (1 + 2 + 4 + 8) ms = 150 ms of silence (exponential back-off).
const RETRY_MS: u64 = 10;
const RETRIES: u32 = 3;

fn field(fields: &HashMap<String, String>, k: &str) -> u64 {
    fields
        .get(k)
        .unwrap_or_else(|| panic!("no {k} in {fields:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{k}: {e}"))
}

#[test]
fn killing_the_peer_mid_run_completes_every_outstanding_request_with_an_error() {
    let Some(topo) = Topology::or_skip(2) else {
        return;
    };
    let exe = env!("CARGO_BIN_EXE_testnode");
    let port = |i: usize| format!("af_packet:{}", topo.ports[i]);
    let mut server = Node::start(exe, &topo.namespaces[0], &["sink-server".into(), port(0)]);
    let mut client = Node::start(
        exe,
        &topo.namespaces[1],
        &[
            "stream-client".into(),
            port(1),
            RETRY_MS.to_string(),
            RETRIES.to_string(),
        ],
    );
    let deadline = Instant::now() + T;
    server.expect(0, "ready", deadline);
    client.expect(1, "ready", deadline);
    client.say("go");
    server.expect(0, "accepted", deadline);
    client.expect(1, "streaming", deadline);

    let killed = Instant::now();
    server.child.kill().expect("kill the server");
    let _ = server.child.wait();

    let before = client.expect(1, "done", deadline);
    let elapsed = killed.elapsed();
    let result = before
        .iter()
        .find_map(|l| l.strip_prefix("result "))
        .unwrap_or_else(|| panic!("no result line in {before:?}"));
    let fields: HashMap<String, String> = result
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (posted, ok) = (field(&fields, "posted"), field(&fields, "ok"));
    let (rex, flushed) = (field(&fields, "retry_exceeded"), field(&fields, "flushed"));
    let unacknowledged = field(&fields, "unacknowledged");
    assert_eq!(field(&fields, "other"), 0, "{result}");
    assert_eq!(
        rex, 1,
        "exactly the oldest request fails with retry exceeded: {result}"
    );
    assert_eq!(
        posted,
        ok + rex + unacknowledged + flushed,
        "every request completed: {result}"
    );
    assert!(
        unacknowledged + flushed > 0,
        "requests were outstanding at the kill: {result}"
    );
    assert_eq!(
        fields.get("refused").map(String::as_str),
        Some("true"),
        "{result}"
    );
    // Silence is detected within the retry budget (150 ms) plus scheduling slack.
    let detect = field(&fields, "detect_ms");
    assert!(detect < 2_000, "took {detect} ms to give up: {result}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    // Nothing leaked: the mbufs in use are back to what they were before streaming.
    assert!(
        field(&fields, "mbufs_after") <= field(&fields, "mbufs_before"),
        "mbufs leaked: {result}"
    );
    eprintln!("peer killed: {result} (client done {elapsed:?} after the kill)");
    client.say("exit");
    drop(client);
    drop(topo);
}
