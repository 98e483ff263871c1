//! The sending half of the two-process memif tests: this process is node 10.0.0.2
//! (memif client, progress driven inline by the test) and a `testnode` child is node
//! 10.0.0.1 (memif server), talking to the test on its stdout (one line per report) and
//! stdin (one line per request; closing it lets the child exit).
//!
//! Leaving is ordered: DPDK 22.11's memif can touch unmapped regions when the peer
//! leaves while this side is inside an rx/tx burst, so the child stops polling before it
//! reports its verdict, this side drops its device next, and only then is the child let
//! go (testnode's `wait_for_release`). Every wait is bounded.

use std::io::Write;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, Connection, Device, DeviceConfig, Endpoint, Rights, WcStatus, WorkRequest,
};

use crate::{line_reader, wait_child_for, wait_completions, ChildGuard, TempDir};

/// The bound on every wait of a two-process test.
pub const T: Duration = Duration::from_secs(20);

/// Bytes of the sender's endpoint.
const SENDER_LEN: usize = 64 * 1024;

/// The receiver process and the sender's device and connection to it.
pub struct MemifPeer {
    pub conn: Connection,
    pub ep: Endpoint,
    pub cq: CompletionQueue,
    pub dev: Device,
    /// What the receiver said before "ready" (values it hands the sender).
    pub announced: Vec<String>,
    lines: Receiver<String>,
    stdin: Option<ChildStdin>,
    child: ChildGuard,
    _dir: TempDir,
}

impl MemifPeer {
    /// Starts `exe MODE SOCKET ARGS..` in a fresh socket directory, collects what it
    /// says up to "ready", then connects to its `service`.
    pub fn start(exe: &str, mode: &str, args: &[&str], service: u32) -> MemifPeer {
        let dir = TempDir::new(&format!("{mode}-{}", args.join("-")));
        let sock = dir.sock();
        let mut child = ChildGuard(
            Command::new(exe)
                .arg(mode)
                .arg(&sock)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn testnode"),
        );
        let stdin = child.0.stdin.take();
        let lines = line_reader(child.0.stdout.take().expect("piped stdout"));
        let deadline = Instant::now() + T;
        let mut announced = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(l) if l == "ready" => break,
                Ok(l) => announced.push(l),
                Err(e) => panic!("receiver did not start ({e}); said {announced:?}"),
            }
        }
        let dev = Device::open(DeviceConfig::new(
            &format!("memif:{sock}:client"),
            [10, 0, 0, 2],
        ))
        .expect("sender device");
        let ep = dev
            .alloc_endpoint(SENDER_LEN as u64, Rights::REMOTE_WRITE)
            .expect("sender endpoint");
        let cq = dev.create_cq(256);
        let conn = dev
            .connect([10, 0, 0, 1], service, &ep, &cq)
            .expect("connect to the receiver");
        MemifPeer {
            conn,
            ep,
            cq,
            dev,
            announced,
            lines,
            stdin,
            child,
            _dir: dir,
        }
    }

    /// The value the receiver announced as `NAME VALUE`.
    pub fn announced(&self, name: &str) -> &str {
        self.announced
            .iter()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("receiver announced no {name}: {:?}", self.announced))
    }

    /// Posts `reqs` signaled and checks that each completes with `want`.
    pub fn run(&self, reqs: &[WorkRequest], want: WcStatus) {
        for r in reqs {
            self.conn.post(&r.signaled()).expect("post");
        }
        for wc in wait_completions(&self.cq, reqs.len(), T) {
            assert_eq!(wc.status, want, "{wc:?}");
        }
    }

    /// Posts one request and checks its completion status.
    pub fn run_one(&self, req: WorkRequest, want: WcStatus) {
        self.run(&[req], want);
    }

    /// Sends the receiver one line on its stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("receiver stdin still open");
        writeln!(stdin, "{line}").expect("receiver stdin");
        stdin.flush().expect("receiver stdin");
    }

    /// Waits for a line from the receiver, driving this side meanwhile.
    pub fn expect_line(&self, want: &str) {
        let start = Instant::now();
        loop {
            match self.lines.try_recv() {
                Ok(l) if l == want => return,
                Ok(l) => panic!("receiver said {l:?}, expected {want:?}"),
                Err(_) if start.elapsed() > T => panic!("receiver never said {want:?}"),
                Err(_) => {
                    self.dev.progress();
                }
            }
        }
    }

    /// Keeps acknowledging until the receiver says `verdict` (it has checked everything
    /// and stopped polling), then closes this side's port, lets the receiver go and
    /// checks that it exits 0.
    pub fn finish(self, verdict: &str) {
        let start = Instant::now();
        let mut said: Vec<String> = Vec::new();
        let MemifPeer {
            conn,
            ep,
            cq,
            dev,
            lines,
            stdin,
            mut child,
            ..
        } = self;
        while !said.iter().any(|l| l == verdict) {
            dev.progress();
            said.extend(lines.try_iter());
            if let Some(s) = child.0.try_wait().expect("try_wait") {
                said.extend(lines.try_iter());
                panic!("receiver exited ({s}) before saying {verdict:?}: {said:?}");
            }
            if start.elapsed() > T {
                panic!("receiver did not say {verdict:?}: {said:?}");
            }
        }
        drop((conn, ep, cq, dev));
        drop(stdin);
        let status = wait_child_for(&mut child.0, T).expect("the receiver exits");
        said.extend(lines.try_iter());
        assert!(
            status.success(),
            "receiver failed after {verdict:?}: {said:?}"
        );
    }
}
