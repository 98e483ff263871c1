//! Barrier synchronisation across three nodes (seed §3.4: "toggles a bit in a
//! specified address register of all processes in the barrier set and then waits for
//! a conditional interrupt when all the bits are set (or cleared)").
//!
//! Three `testnode barrier-node` processes, each in its own network namespace on an
//! af_packet port over a veth pair, the three veths bridged in the root namespace
//! (hairpin on, so that a node reaches its own barrier register through the network
//! like the others'). Everything the test creates is removed at the end, on failure
//! too.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const NODES: usize = 3;
const ROUNDS: u32 = 6;
const T: Duration = Duration::from_secs(30);

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A bridge, three namespaces and three veth pairs; removed on drop.
struct Topology {
    bridge: String,
    host_ends: Vec<String>,
    namespaces: Vec<String>,
    /// The veth end inside each namespace (the node's af_packet port).
    ports: Vec<String>,
}

impl Topology {
    fn new() -> Result<Topology, String> {
        let pid = std::process::id() % 1_000_000;
        let mut t = Topology {
            bridge: format!("dpbr{pid}"),
            host_ends: Vec::new(),
            namespaces: Vec::new(),
            ports: Vec::new(),
        };
        // Every name is recorded before it is created, so that drop removes whatever
        // exists after a partial failure.
        ip(&["link", "add", &t.bridge, "type", "bridge"])?;
        ip(&["link", "set", &t.bridge, "up"])?;
        for i in 0..NODES {
            let (ns, host, port) = (
                format!("dpns{pid}n{i}"),
                format!("dph{pid}n{i}"),
                format!("dpv{pid}n{i}"),
            );
            t.namespaces.push(ns.clone());
            t.host_ends.push(host.clone());
            t.ports.push(port.clone());
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &host, "mtu", "1500", "type", "veth", "peer", "name", &port,
            ])?;
            ip(&["link", "set", &port, "netns", &ns])?;
            ip(&["link", "set", &host, "master", &t.bridge])?;
            ip(&[
                "link",
                "set",
                "dev",
                &host,
                "type",
                "bridge_slave",
                "hairpin",
                "on",
            ])?;
            ip(&["link", "set", &host, "up"])?;
            ip(&[
                "netns", "exec", &ns, "ip", "link", "set", &port, "mtu", "1500", "up",
            ])?;
            // Less kernel chatter on the segment (not required).
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{port}.disable_ipv6=1"))
                .output();
        }
        Ok(t)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for h in &self.host_ends {
            let _ = ip(&["link", "del", h]);
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// One node process: killed and reaped on drop.
struct Node {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn start(ns: &str, port: &str, index: usize, max_frame: usize) -> Node {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_testnode")])
            .args(["barrier-node", port])
            .args([index.to_string(), ROUNDS.to_string(), max_frame.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn testnode");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Node {
            child,
            stdin,
            lines,
        }
    }

    fn say(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").expect("node stdin");
        self.stdin.flush().unwrap();
    }

    /// Waits for `want`, returning the lines before it.
    fn expect(&mut self, index: usize, want: &str, deadline: Instant) -> Vec<String> {
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == want => return before,
                Ok(l) => before.push(l),
                Err(_) => {
                    let status = self.child.try_wait().ok().flatten();
                    panic!("node {index} never said {want:?} (said {before:?}; exit {status:?})")
                }
            }
        }
    }
}

/// Runs the barrier with each node on a `kind` port (`af_packet`, `af_xdp`) on its
/// namespace's veth end.
fn barrier_over(kind: &str, max_frame: usize) {
    let topo = match Topology::new() {
        Ok(t) => t,
        Err(e) => {
            // Network namespaces need root (CAP_NET_ADMIN); say why, do not pretend.
            eprintln!("SKIPPED: cannot build the veth/bridge topology: {e}");
            return;
        }
    };
    let mut nodes: Vec<Node> = (0..NODES)
        .map(|i| {
            Node::start(
                &topo.namespaces[i],
                &format!("{kind}:{}", topo.ports[i]),
                i,
                max_frame,
            )
        })
        .collect();
    let deadline = Instant::now() + T;
    for (i, n) in nodes.iter_mut().enumerate() {
        n.expect(i, "ready", deadline);
    }
    // Every node has announced its MAC to the bridge: start.
    for n in nodes.iter_mut() {
        n.say("go");
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        let rounds = n.expect(i, "done", deadline);
        let want: Vec<String> = (0..ROUNDS).map(|r| format!("round {r}")).collect();
        assert_eq!(rounds, want, "node {i}");
    }
    for n in nodes.iter_mut() {
        n.say("exit");
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        let status = deposit_tests::wait_child_for(&mut n.child, Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "node {i} exited {status:?}"
        );
    }
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
