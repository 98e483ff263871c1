//! Clients that leave a memif server while it streams writes to them — killed, exiting
//! without clean-up, or closing properly — 200 times against one server process: the
//! server never crashes, and every connection ends with an error or a close (issue 10,
//! bug 2: DPDK 22.11's memif unmaps the shared regions on its interrupt thread while a
//! worker may be inside a burst). `DEPOSIT_CHURN_ROUNDS` changes the count.

use std::io::Write;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

fn expect(lines: &Receiver<String>, want: &str, who: &str) {
    let l = lines
        .recv_timeout(T)
        .unwrap_or_else(|e| panic!("{who} did not say {want:?}: {e}"));
    assert_eq!(l, want, "{who}");
}

/// `testnode MODE SOCKET`, with its stdin and the lines of its stdout.
fn testnode(mode: &str, sock: &str) -> (ChildGuard, ChildStdin, Receiver<String>) {
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_testnode"))
            .args([mode, sock])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdin = child.0.stdin.take().unwrap();
    let lines = line_reader(child.0.stdout.take().unwrap());
    (child, stdin, lines)
}

#[test]
fn a_memif_server_survives_200_clients_leaving_mid_stream() {
    let rounds: u32 = std::env::var("DEPOSIT_CHURN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = TempDir::new("churn");
    let sock = dir.sock();
    let (mut server, mut server_in, server_out) = testnode("churn-server", &sock);
    expect(&server_out, "ready", "server");
    let t0 = Instant::now();
    for round in 0..rounds {
        let (mut client, mut client_in, client_out) = testnode("churn-client", &sock);
        expect(&client_out, "connected", "client");
        expect(&server_out, &format!("accepted {}", round + 1), "server");
        // The server streams into the client for a moment, then the client leaves.
        std::thread::sleep(Duration::from_millis(u64::from(round * 7 % 23)));
        match round % 3 {
            0 => client.0.kill().unwrap(),
            1 => writeln!(client_in, "exit").unwrap(),
            _ => writeln!(client_in, "close").unwrap(),
        }
        let status = wait_child_for(&mut client.0, T).expect("the client exits");
        assert!(
            round % 3 == 0 || status.success(),
            "round {round}: client {status}"
        );
        if let Some(s) = server.0.try_wait().unwrap() {
            panic!("round {round}: the server died: {s}");
        }
    }
    writeln!(server_in, "exit").unwrap();
    let summary = server_out
        .recv_timeout(T + T)
        .expect("the server's summary");
    let status = wait_child_for(&mut server.0, T).expect("the server exits");
    assert!(status.success(), "server {status}: {summary}");
    let n = format!("accepted {rounds} ended {rounds} ");
    assert!(summary.starts_with(&n), "{summary}");
    eprintln!("{rounds} rounds in {:?}: {summary}", t0.elapsed());
}
