//! Hosts in network namespaces for multi-process tests on kernel interfaces
//! (af_packet, af_xdp): a bridge in the root namespace and one namespace per node,
//! each joined to the bridge by a veth pair, and the node processes that run in
//! them. Everything created is removed on drop, on failure too.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Instant;

/// Runs `ip ARGS`; the error says what failed.
pub fn ip(args: &[&str]) -> Result<(), String> {
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

/// A bridge, `n` namespaces and `n` veth pairs (MTU 1500); removed on drop.
pub struct Topology {
    bridge: String,
    host_ends: Vec<String>,
    pub namespaces: Vec<String>,
    /// The veth end inside each namespace (the node's af_packet port).
    pub ports: Vec<String>,
}

impl Topology {
    /// [`Topology::new`], or `None` after saying on stderr why the test is skipped
    /// (network namespaces need root: CAP_NET_ADMIN; say why, do not pretend).
    pub fn or_skip(nodes: usize) -> Option<Topology> {
        Topology::new(nodes)
            .map_err(|e| eprintln!("SKIPPED: cannot build the veth/bridge topology: {e}"))
            .ok()
    }

    /// Builds the topology (needs root: CAP_NET_ADMIN).
    pub fn new(nodes: usize) -> Result<Topology, String> {
        Topology::with_mtu(nodes, 1500)
    }

    /// [`Topology::or_skip`] with veths of MTU `mtu` (jumbo frames).
    pub fn or_skip_mtu(nodes: usize, mtu: u32) -> Option<Topology> {
        Topology::with_mtu(nodes, mtu)
            .map_err(|e| eprintln!("SKIPPED: cannot build the veth/bridge topology: {e}"))
            .ok()
    }

    /// [`Topology::new`] with veths of MTU `mtu`.
    pub fn with_mtu(nodes: usize, mtu: u32) -> Result<Topology, String> {
        let mtu = mtu.to_string();
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
        for i in 0..nodes {
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
                "link", "add", &host, "mtu", &mtu, "type", "veth", "peer", "name", &port,
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
                "netns", "exec", &ns, "ip", "link", "set", &port, "mtu", &mtu, "up",
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

impl Topology {
    /// Makes the bridge a hub: its ports learn no address, so every frame goes to every
    /// port (an attacker on one sees the others' traffic, as on a shared segment or a
    /// mirrored switch port).
    pub fn hub(&self) -> Result<(), String> {
        for host in &self.host_ends {
            ip(&[
                "link",
                "set",
                "dev",
                host,
                "type",
                "bridge_slave",
                "learning",
                "off",
            ])?;
        }
        ip(&[
            "link",
            "set",
            "dev",
            &self.bridge,
            "type",
            "bridge",
            "ageing_time",
            "0",
        ])
    }

    /// Starts `exe` with `args(i)` (given the node's port name) in each namespace,
    /// waits until every node said "ready" (each has announced its MAC to the bridge),
    /// then tells them all "go".
    pub fn start_all(
        &self,
        exe: &str,
        args: impl Fn(usize, &str) -> Vec<String>,
        deadline: Instant,
    ) -> Vec<Node> {
        let mut nodes: Vec<Node> = (0..self.namespaces.len())
            .map(|i| Node::start(exe, &self.namespaces[i], &args(i, &self.ports[i])))
            .collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.expect(i, "ready", deadline);
        }
        for n in nodes.iter_mut() {
            n.say("go");
        }
        nodes
    }
}

/// Tells every node "exit" and checks that each exits 0 within 10 s.
pub fn exit_all(nodes: &mut [Node]) {
    for n in nodes.iter_mut() {
        n.say("exit");
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        let status = crate::wait_child_for(&mut n.child, std::time::Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "node {i} exited {status:?}"
        );
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

/// One node process (`testnode` in a namespace): killed and reaped on drop.
pub struct Node {
    pub child: Child,
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
    /// Starts `testnode ARGS` (the binary at `exe`) in namespace `ns`.
    pub fn start(exe: &str, ns: &str, args: &[String]) -> Node {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, exe])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn testnode");
        let stdin = child.stdin.take().unwrap();
        let lines = crate::line_reader(child.stdout.take().unwrap());
        Node {
            child,
            stdin,
            lines,
        }
    }

    /// Writes a line to the node's stdin.
    pub fn say(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").expect("node stdin");
        self.stdin.flush().unwrap();
    }

    /// Waits for `want`, returning the lines before it.
    pub fn expect(&mut self, index: usize, want: &str, deadline: Instant) -> Vec<String> {
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

/// The value a node reported as `PREFIX VALUE` in `lines`; panics naming what the
/// node said when there is none.
pub fn value<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {prefix:?} in {lines:?}"))
}
