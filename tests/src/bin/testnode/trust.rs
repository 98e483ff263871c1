//! Trust at connect time on real PMDs (`tests/trust_at_connect.rs`, issue 34): a server
//! whose identity key the client knows — pinned, listed in a known-peers file, or taken
//! on first use — and a client that connects to it while a bystander on the hub
//! (`bystander`) answers for the server, refuses the connect and closes the connection
//! with messages of its own. The client writes and runs fetch-and-adds that the server
//! checks; both say whom they are connected to, the state of their connection at the
//! end and what they refused.

use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit::*;

use super::secure::Workload;
use super::{await_exit, await_go, await_line, fail, stdin_lines, T};

/// Service of the trust test.
const SERVICE: u32 = 34;
/// What the client sends and the server checks (384 KiB of writes).
const LOAD: Workload = Workload {
    writes: 96,
    adds: 32,
    len: 1 << 20,
};
/// The pre-shared key of the `psk` mode (both sides have it, the bystander not).
const PSK: [u8; 32] = *b"deposit trust-at-connect psk 34!";
/// The server's address (the client's is 10.0.0.2, the bystander's 10.0.0.3).
pub const SERVER: [u8; 4] = [10, 0, 0, 1];
pub const CLIENT: [u8; 4] = [10, 0, 0, 2];

/// The connection options of mode `plain`, `secure` or `psk` (sealed frames with a
/// pre-shared key).
fn mode_opts(mode: &str) -> ConnOptions {
    let (secure, psk) = match mode {
        "plain" => (false, None),
        "secure" => (true, None),
        "psk" => (true, Some(PSK)),
        other => fail(format!("mode {other:?}: plain, secure or psk")),
    };
    ConnOptions {
        secure,
        psk,
        ..ConnOptions::default()
    }
}

/// A node on `port` at `ip` with a dedicated worker, frames of at most 1514 bytes, a CM
/// timeout of `cm_timeout`, as `identity` and with `known_peers`.
fn device(
    port: &str,
    ip: [u8; 4],
    cm_timeout: Duration,
    identity: Option<Arc<Identity>>,
    known_peers: Option<&str>,
) -> Device {
    let mut cfg = DeviceConfig::new(port, ip).progress(Progress::Dedicated);
    cfg.max_frame = Some(1514);
    cfg.cm_timeout = cm_timeout;
    cfg.identity = identity;
    cfg.known_peers = known_peers.map(std::path::PathBuf::from);
    Device::open(cfg).unwrap_or_else(|e| fail(e))
}

/// Prints the counters of what `dev` refused that the test looks at, `NAME N` a line.
fn print_refusals(dev: &Device) {
    let s = dev.stats();
    super::print_drops(
        dev,
        &[
            DropReason::CmForged,
            DropReason::PeerKey,
            DropReason::AuthFailed,
            DropReason::NotSealed,
            DropReason::Replayed,
            DropReason::WrongKey,
            DropReason::Unauthorized,
            DropReason::BadCookie,
            DropReason::SourceCap,
            DropReason::UnknownConnection,
        ],
    );
    println!("challenges {}", s.cm_challenges);
}

/// After the parent's "report" (the bystander has stopped), once what it sent last has
/// landed: the connection's state and the refusals, then "stats".
fn report(dev: &Device, lines: &Receiver<String>, conn: Option<&Connection>) {
    await_line(lines, "report");
    // The bystander's last forgeries reach us within a few milliseconds of its stop.
    std::thread::sleep(Duration::from_millis(200));
    if let Some(c) = conn {
        println!("state {:?}", c.state());
    }
    println!("connections {}", dev.connections());
    print_refusals(dev);
    println!("stats");
}

/// Node 10.0.0.1: listens in `mode` (plain, secure, psk) as the identity kept in
/// `identity` (a file, created if missing; "-": a fresh key), printing its key first
/// (`"key <base64>"`). With `expect` 1 it accepts one connection, says whose key it
/// proved (`"client_key <base64>"`), checks every write and the counter ("verified");
/// with 0 it accepts none. On "report" its connection's state, its connections and
/// refusals ("stats"); until "exit".
pub fn trust_server(port: &str, mode: &str, identity: &str, expect: u32) {
    let lines = stdin_lines();
    let identity = (identity != "-").then(|| {
        let (id, _) =
            Identity::load_or_generate(std::path::Path::new(identity)).unwrap_or_else(|e| fail(e));
        Arc::new(id)
    });
    let dev = device(port, SERVER, Duration::from_secs(5), identity, None);
    println!("key {}", dev.identity());
    let ep = dev
        .alloc_endpoint(
            LOAD.len as u64,
            Rights::REMOTE_WRITE | Rights::REMOTE_ATOMIC,
        )
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let opts = mode_opts(mode);
    let l = dev
        .listen_with(SERVICE, &ep, &cq, &opts)
        .unwrap_or_else(|e| fail(e));
    await_go(&dev, &lines);
    if expect == 0 {
        report(&dev, &lines, None);
        if let Ok(c) = l.accept(Duration::from_millis(100)) {
            fail(format!("accepted a connection ({})", c.local_number()));
        }
        await_exit(&lines);
        return;
    }
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    if conn.is_secure() != opts.secure {
        fail(format!(
            "the accepted connection is sealed {}, asked {}",
            conn.is_secure(),
            opts.secure
        ));
    }
    match conn.peer_key() {
        Some(k) => println!("client_key {k}"),
        None => fail("the accepted connection has no client key"),
    }
    LOAD.verify(&dev, &conn, &ep);
    report(&dev, &lines, Some(&conn));
    // No second connection came of the bystander's work.
    if let Ok(c) = l.accept(Duration::from_millis(100)) {
        fail(format!(
            "accepted a second connection ({})",
            c.local_number()
        ));
    }
    await_exit(&lines);
    drop(conn);
}

/// Node 10.0.0.2: connects to the server in `mode` knowing its key as `trust` says —
/// `pinned:<key>`, `file:<known-peers file>` (the file lists it), `tofu:<known-peers
/// file>` (trust on first use, kept in the file; a key listed there is pinned) — with a
/// CM timeout of `cm_timeout_ms`. Connected, it says so with the key the handshake
/// proved and whether it was known ("connected"), writes and adds, every completion
/// checked ("completed"); refused, it says why ("failed"). On "report" its
/// connection's state and its refusals ("stats"); until "exit".
pub fn trust_client(port: &str, mode: &str, trust: &str, cm_timeout_ms: u64) {
    let lines = stdin_lines();
    let mut opts = mode_opts(mode);
    let (how, what) = trust.split_once(':').unwrap_or_else(|| {
        fail(format!(
            "trust {trust:?}: pinned:KEY, file:PATH or tofu:PATH"
        ))
    });
    let known_peers = match how {
        "pinned" => {
            opts.peer_key = Some(what.parse().unwrap_or_else(|e| fail(e)));
            None
        }
        "file" => Some(what),
        "tofu" => {
            opts.trust_on_first_use = true;
            Some(what)
        }
        other => fail(format!("trust {other:?}: pinned, file or tofu")),
    };
    let dev = device(
        port,
        CLIENT,
        Duration::from_millis(cm_timeout_ms),
        None,
        known_peers,
    );
    println!("own_key {}", dev.identity());
    let ep = dev
        .alloc_endpoint(LOAD.len as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(256);
    await_go(&dev, &lines);
    let t0 = Instant::now();
    let conn = match dev.connect_with(SERVER, SERVICE, &ep, &cq, &opts) {
        Ok(c) => c,
        Err(e) => {
            println!("connect_ms {}", t0.elapsed().as_millis());
            println!("error {e}");
            match e {
                Error::Rejected(r) => println!("rejected {r:?}"),
                Error::PeerKeyMismatch { offered, .. } => {
                    println!("rejected PeerKey");
                    println!("offered {offered}");
                }
                _ => {}
            }
            print_refusals(&dev);
            println!("failed");
            report(&dev, &lines, None);
            await_exit(&lines);
            return;
        }
    };
    println!("connect_ms {}", t0.elapsed().as_millis());
    match conn.peer_key() {
        Some(k) => println!("server_key {k}"),
        None => fail("the connection has no server key"),
    }
    println!("key_verified {}", conn.peer_key_verified());
    println!("sealed {}", conn.is_secure());
    // What was refused while connecting (before any data frame).
    let s = dev.stats();
    println!("connect_cm_forged {}", s.dropped(DropReason::CmForged));
    println!("connect_peer_key {}", s.dropped(DropReason::PeerKey));
    println!("connected");
    LOAD.send(&conn, &ep, &cq);
    println!("completed");
    report(&dev, &lines, Some(&conn));
    await_exit(&lines);
    drop(conn);
}
