//! `testnode token-node PORT ROLE`: one of three nodes passing a payload token along
//! (the test is `tests/tokens_three_nodes.rs`). Node a (10.0.0.1) registers a buffer
//! and writes the token's value into node b's memory in an ordinary write; b (10.0.0.2)
//! forwards the value to c (10.0.0.3) the same way; c deposits into a's buffer with it,
//! then tries the same token again and is refused. Each node says what it saw on
//! stdout; a checks its buffer and the token event itself, and on "check" (sent once
//! c has been refused) that the second deposit left no trace.

use deposit::*;

use super::{await_go, barrier_ip, fail, netns_device, stdin_lines, T};

const SERVICE: u32 = 41;
const LEN: usize = 8192;
/// a's buffer: where the token lets a deposit land.
const BUF_OFF: u64 = 4096;
const BUF_LEN: u64 = 64;
/// Where b and c receive the token's value.
const VALUE_OFF: u32 = 0;
const DATA: &[u8] = b"deposited with a forwarded token";

pub fn token_node(port: &str, role: &str) {
    let me = match role {
        "a" => 0,
        "b" => 1,
        "c" => 2,
        other => fail(format!("unknown role {other} (a, b or c)")),
    };
    let lines = stdin_lines();
    let dev = netns_device(port, barrier_ip(me), 1514);
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let l = dev.listen(SERVICE, &ep, &cq).unwrap_or_else(|e| fail(e));
    await_go(&dev, &lines);
    let node = Node { dev, ep, cq, l };
    let kept = match me {
        0 => node.issue(&lines),
        1 => node.forward(),
        _ => node.deposit(),
    };
    println!("done");
    match lines.recv_timeout(T).as_deref() {
        Ok("exit") => {}
        other => fail(format!("no exit from the parent: {other:?}")),
    }
    drop(kept);
}

struct Node {
    dev: Device,
    ep: Endpoint,
    cq: CompletionQueue,
    l: Listener,
}

impl Node {
    fn connect(&self, to: usize) -> Connection {
        self.dev
            .connect(barrier_ip(to), SERVICE, &self.ep, &self.cq)
            .unwrap_or_else(|e| fail(format!("connecting to node {to}: {e}")))
    }

    /// Posts `wr` signaled and checks its completion.
    fn run(&self, conn: &Connection, wr: WorkRequest, want: WcStatus) {
        conn.post(&wr.signaled()).unwrap_or_else(|e| fail(e));
        let wc = self
            .cq
            .wait_one(T)
            .unwrap_or_else(|| fail(format!("no completion (expected {want:?})")));
        if wc.status != want {
            fail(format!("{wc:?}, expected {want:?}"));
        }
    }

    /// Sends a token value in an ordinary write.
    fn send_value(&self, conn: &Connection, token: Token) {
        let wr = WorkRequest::write_inline(1, &token.0.to_le_bytes(), VALUE_OFF)
            .unwrap_or_else(|e| fail(e));
        self.run(conn, wr, WcStatus::Success);
    }

    /// Accepts the one incoming connection and reads the token value its first write
    /// brought.
    fn receive_value(&self) -> (Connection, Token) {
        let conn = self.l.accept(T).unwrap_or_else(|e| fail(e));
        let events = self.ep.events();
        let start = std::time::Instant::now();
        while conn.arrivals() < 1 {
            // The dedicated worker delivers; this thread only watches (bounded).
            if start.elapsed() > T {
                fail("the token value never arrived");
            }
            std::thread::yield_now();
        }
        if let Some(e) = events.poll() {
            fail(format!("an ordinary write posted an event: {e:?}"));
        }
        let v = self
            .ep
            .load_u64(VALUE_OFF as u64)
            .unwrap_or_else(|e| fail(e));
        let token = Token(u64::from_le_bytes(v.to_ne_bytes()));
        println!("received {:#x}", token.0);
        (conn, token)
    }

    /// Node a: registers the buffer, hands the token to b, then checks c's deposit
    /// (bytes, event, connection) and, on "check", that nothing came of the second.
    fn issue(self, lines: &std::sync::mpsc::Receiver<String>) -> Vec<Connection> {
        let token = self
            .dev
            .create_token(&self.ep, BUF_OFF, BUF_LEN)
            .unwrap_or_else(|e| fail(e));
        println!("token {:#x}", token.0);
        let to_b = self.connect(1);
        self.send_value(&to_b, token);
        let from_c = self.l.accept(T).unwrap_or_else(|e| fail(e));
        let events = self.ep.events();
        let ev = events
            .wait(T)
            .unwrap_or_else(|| fail("no token event for c's deposit"));
        let want = EventKind::Token {
            index: token.index(),
            key_ok: true,
        };
        if (ev.kind, ev.ea, ev.len) != (want, BUF_OFF, DATA.len() as u32) {
            fail(format!("token event {ev:?}"));
        }
        if ev.conn != from_c.local_number() {
            fail(format!(
                "token event on connection {}, c's is {}",
                ev.conn,
                from_c.local_number()
            ));
        }
        self.check_buffer();
        println!("event conn {} len {}", ev.conn, ev.len);
        println!("awaiting check");
        match lines.recv_timeout(T).as_deref() {
            Ok("check") => {}
            other => fail(format!("no check from the parent: {other:?}")),
        }
        if let Some(e) = events.poll() {
            fail(format!("an event after the single use: {e:?}"));
        }
        self.check_buffer();
        let refused = self.dev.stats().dropped(DropReason::BadToken);
        if (refused, from_c.dropped()) != (1, 1) {
            fail(format!(
                "second deposit: {refused} BadToken drops, {} on c's connection",
                from_c.dropped()
            ));
        }
        println!("single use");
        vec![to_b, from_c]
    }

    /// a's memory: the deposit in the buffer, nothing anywhere else.
    fn check_buffer(&self) {
        let mut want = vec![0u8; LEN];
        want[BUF_OFF as usize..][..DATA.len()].copy_from_slice(DATA);
        let mut got = vec![0u8; LEN];
        self.ep.read(0, &mut got).unwrap_or_else(|e| fail(e));
        if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
            fail(format!("a's memory differs at offset {i}: {:#04x}", got[i]));
        }
    }

    /// Node b: passes the value it received on to c.
    fn forward(self) -> Vec<Connection> {
        let (from_a, token) = self.receive_value();
        let to_c = self.connect(2);
        self.send_value(&to_c, token);
        println!("forwarded {:#x}", token.0);
        vec![from_a, to_c]
    }

    /// Node c: deposits into a's buffer with the value it received, twice.
    fn deposit(self) -> Vec<Connection> {
        let (from_b, token) = self.receive_value();
        let to_a = self.connect(0);
        let wr = WorkRequest::write_inline_with_token(1, token, DATA).unwrap_or_else(|e| fail(e));
        self.run(&to_a, wr, WcStatus::Success);
        println!("deposited conn {}", to_a.remote_number());
        let wr =
            WorkRequest::write_inline_with_token(2, token, b"again").unwrap_or_else(|e| fail(e));
        self.run(&to_a, wr, WcStatus::RemoteAccessError);
        println!("refused");
        vec![from_b, to_a]
    }
}
