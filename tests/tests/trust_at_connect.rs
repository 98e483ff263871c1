//! Trust at connect time on real PMDs (issue 34's first two acceptance points): three
//! namespaces on a Linux bridge made a hub (every frame reaches every port), af_packet.
//! A bystander (a raw packet socket, `testnode bystander`) sees every frame between the
//! server and the client and answers before the server: a CHALLENGE naming its own
//! identity key to each first connect request, a REJECT and a CONNECT_REP of its own to
//! each request with a handshake, and to every data frame a DISCONNECT_REQ to its
//! receiver and a DISCONNECT_REP to its sender — what `transport/tests/sim_trust.rs`
//! forges over a simulated link. Against a client that knows the server's key (pinned,
//! listed in a known-peers file, or learnt on a first use the bystander did not see)
//! none of it takes, plain or sealed, with or without a pre-shared key: the connect
//! reaches the real server (the key the handshake proved is the server's), the data
//! verifies, no connection closes, no plaintext crosses the wire when sealed, and each
//! forgery is counted (`peer_key` for the challenges, `cm_forged` for the rest). A
//! client pinned to another key fails at its CM timeout naming the key.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deposit_tests::netns::{exit_all, Node, Topology};
use deposit_tests::TempDir;

/// Bound of one round (processes up, connect, 384 KiB and 32 adds, reports).
const ROUND: Duration = Duration::from_secs(30);
/// The server's address, as the known-peers file names it.
const SERVER_IP: &str = "10.0.0.1";

/// The namespaces' names come from the test process's id: the tests of this file
/// take turns when they share one process (`cargo test`; nextest runs each alone).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn value(lines: &[String], name: &str) -> u64 {
    let v = deposit_tests::netns::value(lines, name);
    v.parse()
        .unwrap_or_else(|e| panic!("{name} {v:?}: {e} (said {lines:?})"))
}

fn text<'a>(lines: &'a [String], name: &str) -> &'a str {
    deposit_tests::netns::value(lines, name)
}

/// The number after `word` in the line of `lines` that starts with `line`
/// ("sent challenges N rejects N ...").
fn field(lines: &[String], line: &str, word: &str) -> u64 {
    let l = deposit_tests::netns::value(lines, line);
    let mut it = l.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            if let Some(v) = it.next().and_then(|v| v.parse().ok()) {
                return v;
            }
        }
    }
    panic!("no {word} in {l:?} (said {lines:?})")
}

/// How the client knows the server's key.
enum Trust {
    /// The key the server printed, passed on its command line.
    Pinned,
    /// Another key (a random one).
    Wrong(String),
    /// A known-peers file the test writes, listing the server's key.
    File(PathBuf),
    /// Trust on first use, kept in this known-peers file.
    FirstUse(PathBuf),
}

struct Round<'a> {
    /// plain, secure or psk.
    mode: &'a str,
    trust: Trust,
    /// The server's identity file ("-": a fresh key).
    identity: String,
    bystander: bool,
    /// Connections the server expects (0 when the connect must fail).
    connects: u32,
    cm_timeout_ms: u64,
}

impl Round<'_> {
    fn new(mode: &str, trust: Trust, bystander: bool) -> Round<'_> {
        Round {
            mode,
            trust,
            identity: "-".into(),
            bystander,
            connects: 1,
            cm_timeout_ms: 5000,
        }
    }
}

/// What the nodes said in one round.
struct Said {
    /// The server's key, as it printed it.
    key: String,
    /// Up to "verified" (nothing when no connection was expected).
    server: Vec<String>,
    server_report: Vec<String>,
    /// Up to "completed", or to "failed".
    client: Vec<String>,
    client_report: Vec<String>,
    bystander: Vec<String>,
    took: Duration,
}

/// Runs one round on `topo`: the server in namespace 0, the client in 1, the bystander
/// (if any) in 2; every process gone when it returns.
fn run(topo: &Topology, r: &Round<'_>) -> Said {
    let t0 = Instant::now();
    let deadline = t0 + ROUND;
    let exe = env!("CARGO_BIN_EXE_testnode");
    let port = |i: usize| format!("af_packet:{}", topo.ports[i]);
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut server = Node::start(
        exe,
        &topo.namespaces[0],
        &args(&[
            "trust-server",
            &port(0),
            r.mode,
            &r.identity,
            &r.connects.to_string(),
        ]),
    );
    let key = text(&server.expect(0, "ready", deadline), "key").to_string();
    let trust = match &r.trust {
        Trust::Pinned => format!("pinned:{key}"),
        Trust::Wrong(k) => format!("pinned:{k}"),
        Trust::File(p) => {
            std::fs::write(p, format!("# written by the test\n{SERVER_IP} {key}\n"))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            format!("file:{}", p.display())
        }
        Trust::FirstUse(p) => format!("tofu:{}", p.display()),
    };
    let mut client = Node::start(
        exe,
        &topo.namespaces[1],
        &args(&[
            "trust-client",
            &port(1),
            r.mode,
            &trust,
            &r.cm_timeout_ms.to_string(),
        ]),
    );
    let mut client_said = client.expect(1, "ready", deadline);
    let mut nodes = vec![server, client];
    let mut bystander_said = Vec::new();
    if r.bystander {
        let mut b = Node::start(
            exe,
            &topo.namespaces[2],
            &args(&["bystander", &topo.ports[2]]),
        );
        bystander_said = b.expect(2, "ready", deadline);
        // The bystander first: it answers from the client's first frame on.
        b.say("go");
        bystander_said.extend(b.expect(2, "answering", deadline));
        nodes.push(b);
    }
    for n in &mut nodes[..2] {
        n.say("go");
    }
    let mut server_said = Vec::new();
    if r.connects > 0 {
        client_said.extend(nodes[1].expect(1, "connected", deadline));
        client_said.extend(nodes[1].expect(1, "completed", deadline));
        server_said = nodes[0].expect(0, "verified", deadline);
    } else {
        client_said.extend(nodes[1].expect(1, "failed", deadline));
    }
    if r.bystander {
        nodes[2].say("stop");
        bystander_said.extend(nodes[2].expect(2, "counts", deadline));
    }
    nodes[0].say("report");
    nodes[1].say("report");
    let server_report = nodes[0].expect(0, "stats", deadline);
    let client_report = nodes[1].expect(1, "stats", deadline);
    exit_all(&mut nodes);
    Said {
        key,
        server: server_said,
        server_report,
        client: client_said,
        client_report,
        bystander: bystander_said,
        took: t0.elapsed(),
    }
}

fn print(what: &str, s: &Said) {
    eprintln!(
        "{what} ({:.1} s):\n  server key {}\n  server: {:?} {:?}\n  client: {:?} {:?}\n  \
         bystander: {:?}",
        s.took.as_secs_f64(),
        s.key,
        s.server,
        s.server_report,
        s.client,
        s.client_report,
        s.bystander
    );
}

/// A connect that reached the real server and a connection that lasted: the key the
/// client's handshake proved is the one the server printed, known beforehand, and the
/// server proved the client's; both connections Normal at the end, one each.
fn check_connected(s: &Said, mode: &str, pinned: bool) {
    let (c, cr, sv, sr) = (&s.client, &s.client_report, &s.server, &s.server_report);
    assert_eq!(text(c, "server_key"), s.key, "not the real server: {c:?}");
    // Pinned, the key was known beforehand; taken on first use, it was not.
    assert_eq!(text(c, "key_verified"), pinned.to_string(), "{c:?}");
    assert_eq!(text(c, "sealed"), (mode != "plain").to_string(), "{c:?}");
    assert_eq!(text(sv, "client_key"), text(c, "own_key"), "{sv:?} {c:?}");
    assert_eq!(
        text(cr, "state"),
        "Normal",
        "the client's connection: {cr:?}"
    );
    assert_eq!(
        text(sr, "state"),
        "Normal",
        "the server's connection: {sr:?}"
    );
    assert_eq!(value(cr, "connections"), 1, "{cr:?}");
    assert_eq!(value(sr, "connections"), 1, "{sr:?}");
}

/// What a bystander round must show besides [`check_connected`]: the bystander saw the
/// connect and the data and answered them; none of its answers took, each was counted
/// where it went; and no plaintext crossed the wire when sealed.
fn check_bystander(s: &Said, mode: &str) {
    check_connected(s, mode, true);
    let (b, cr, sr) = (&s.bystander, &s.client_report, &s.server_report);
    let sent = |w| field(b, "sent", w);
    let (challenges, rejects, reps) = (sent("challenges"), sent("rejects"), sent("reps"));
    let (dreq_s, dreq_c, drep_s, drep_c) = (
        sent("dreq_server"),
        sent("dreq_client"),
        sent("drep_server"),
        sent("drep_client"),
    );
    assert!(
        challenges >= 1 && rejects >= 1 && reps >= 1,
        "the bystander did not answer the connect: {b:?}"
    );
    assert!(
        field(b, "seen", "data") >= 100,
        "the bystander saw too few data frames: {b:?}"
    );
    let plaintext = value(b, "plaintext");
    if mode == "plain" {
        // The check sees what it looks for when it is there.
        assert!(plaintext > 0, "a plain connection's marker unseen: {b:?}");
    } else {
        assert_eq!(plaintext, 0, "plaintext on the wire: {b:?}");
    }
    // The client refused the bystander's challenges (another key than the pinned one)
    // and its REJECTs, replies and disconnect messages (tags and MACs that do not
    // verify): most of what reached it (af_packet and the bridge may drop some on two
    // busy cores), never more than was sent.
    let (c_forged, c_key) = (value(cr, "cm_forged"), value(cr, "peer_key"));
    assert!(
        c_key >= 1,
        "the bystander's challenge not refused: {cr:?} {b:?}"
    );
    assert!(c_key <= challenges, "{cr:?} {b:?}");
    assert!(c_forged >= 1, "{cr:?} {b:?}");
    assert!(
        c_forged * 10 >= (dreq_c + drep_c) * 8 && c_forged <= rejects + reps + dreq_c + drep_c,
        "the client's cm_forged against what went to it: {cr:?} {b:?}"
    );
    let s_forged = value(sr, "cm_forged");
    // The forged REJECTs and replies are counted when they come before the server's
    // reply (after it, the connect no longer waits for an answer, and a late one is not
    // told from a repeat of the server's); with no disconnect message lost, the client's
    // count beyond those sent to it is theirs.
    eprintln!(
        "  client: {c_forged} cm_forged = {} of the {} disconnect messages sent to it + \
         at least {} of the {} forged REJECTs and replies; server: {s_forged} cm_forged of \
         {} disconnect messages sent to it",
        c_forged.min(dreq_c + drep_c),
        dreq_c + drep_c,
        c_forged.saturating_sub(dreq_c + drep_c),
        rejects + reps,
        dreq_s + drep_s,
    );
    assert!(
        s_forged * 10 >= (dreq_s + drep_s) * 8 && s_forged <= dreq_s + drep_s,
        "the server's cm_forged against the disconnects sent to it: {sr:?} {b:?}"
    );
    assert!(s_forged * 10 >= dreq_s * 8, "{sr:?} {b:?}");
    // Nothing else was refused: the forgeries named real connections.
    for r in [cr, sr] {
        for name in ["auth_failed", "not_sealed", "replayed", "unauthorized"] {
            assert_eq!(value(r, name), 0, "{name}: {r:?}");
        }
    }
}

#[test]
fn a_bystander_answering_for_the_listener_gets_no_connection_and_closes_none() {
    let _turn = one_at_a_time();
    let Some(topo) = Topology::or_skip(3) else {
        return;
    };
    topo.hub().expect("bridge as a hub");
    let dir = TempDir::new("trust");
    let t0 = Instant::now();
    let rounds = [
        ("plain, pinned", Round::new("plain", Trust::Pinned, true)),
        ("secure, pinned", Round::new("secure", Trust::Pinned, true)),
        (
            "secure with a psk, pinned",
            Round::new("psk", Trust::Pinned, true),
        ),
        (
            "secure, known-peers file",
            Round::new("secure", Trust::File(dir.0.join("known_peers")), true),
        ),
    ];
    for (what, r) in &rounds {
        let s = run(&topo, r);
        print(what, &s);
        check_bystander(&s, r.mode);
    }
    eprintln!("all rounds: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The entries of a known-peers file (its lines but blank ones and comments).
fn entries(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn a_key_learnt_on_first_use_keeps_a_later_bystander_out() {
    let _turn = one_at_a_time();
    let Some(topo) = Topology::or_skip(3) else {
        return;
    };
    topo.hub().expect("bridge as a hub");
    let dir = TempDir::new("trust-tofu");
    let known = dir.0.join("known_peers");
    // The server keeps its key in a file: the same key in both rounds.
    let identity = dir.0.join("server.key").display().to_string();
    let first = Round {
        identity: identity.clone(),
        ..Round::new("secure", Trust::FirstUse(known.clone()), false)
    };
    let s = run(&topo, &first);
    print("first use, no bystander", &s);
    check_connected(&s, "secure", false);
    for name in ["cm_forged", "peer_key"] {
        assert_eq!(value(&s.client_report, name), 0, "{:?}", s.client_report);
        assert_eq!(value(&s.server_report, name), 0, "{:?}", s.server_report);
    }
    let learnt = vec![format!("{SERVER_IP} {}", s.key)];
    assert_eq!(entries(&known), learnt, "the key learnt on first use");
    // Again, with the bystander answering: the file pins the key now (the client still
    // asks for trust on first use, as a user's would), so its challenges are refused
    // (`peer_key`: a first use would take them) and the connect reaches the server.
    let second = Round {
        identity,
        ..Round::new("secure", Trust::FirstUse(known.clone()), true)
    };
    let s2 = run(&topo, &second);
    print("pinned by the file, bystander", &s2);
    assert_eq!(s2.key, s.key, "the server's key changed");
    check_bystander(&s2, "secure");
    assert_eq!(entries(&known), learnt, "the file changed");
}

#[test]
fn a_client_pinned_to_another_key_fails_at_its_timeout_naming_the_key() {
    let _turn = one_at_a_time();
    let Some(topo) = Topology::or_skip(2) else {
        return;
    };
    let other = deposit::Identity::generate().unwrap().public().to_string();
    let r = Round {
        connects: 0,
        cm_timeout_ms: 2000,
        ..Round::new("secure", Trust::Wrong(other.clone()), false)
    };
    let s = run(&topo, &r);
    print("pinned to another key", &s);
    let (c, cr, sr) = (&s.client, &s.client_report, &s.server_report);
    assert_eq!(text(c, "rejected"), "PeerKey", "{c:?}");
    let e = text(c, "error");
    assert!(
        e.contains("identity key") && e.contains("pinned") && e.contains(&other),
        "the error does not name the pinned key: {e:?}"
    );
    // And the key the listener named instead: the server's.
    let offered = text(c, "offered");
    assert!(e.contains(offered), "{e:?}");
    assert_eq!(offered, s.key, "the server's key");
    // At the CM timeout (not before: another answer could still come), not much after.
    let ms = value(c, "connect_ms");
    assert!((1900..3500).contains(&ms), "failed after {ms} ms");
    // The server's challenges named its key; the client refused each, and never sent
    // the handshake: the server made nothing.
    assert!(value(cr, "peer_key") >= 1, "{cr:?}");
    assert!(value(sr, "challenges") >= 1, "{sr:?}");
    assert_eq!(value(sr, "connections"), 0, "{sr:?}");
    assert_eq!(value(sr, "cm_forged"), 0, "{sr:?}");
}
