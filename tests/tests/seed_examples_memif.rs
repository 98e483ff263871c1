//! The seed's worked examples 1 (strided deposit), 2 (priority queueing) and 4
//! (atomics) across two processes over memif: this test process sends, `testnode
//! seed-receiver` receives, sets up and protects its registers, verifies memory,
//! registers and events, and exits 0 / 1.

use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);

/// The receiver process, its stdout lines (read on a thread, so waits stay bounded)
/// and the sender's device and connection.
struct Pair {
    conn: Connection,
    ep: Endpoint,
    cq: CompletionQueue,
    dev: Device,
    lines: Receiver<String>,
    /// Closing it lets the receiver exit (testnode's wait_for_release).
    release: Option<std::process::ChildStdin>,
    child: ChildGuard,
    _dir: TempDir,
}

fn start(example: &str) -> Pair {
    let dir = TempDir::new(&format!("seed-{example}"));
    let sock = dir.sock();
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_testnode"))
            .args(["seed-receiver", &sock, example])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let release = child.0.stdin.take();
    let lines = line_reader(child.0.stdout.take().unwrap());
    assert_eq!(
        lines.recv_timeout(T).as_deref(),
        Ok("ready"),
        "receiver did not start"
    );
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))
    .unwrap();
    let ep = dev.alloc_endpoint(64 * 1024, Rights::REMOTE_WRITE).unwrap();
    let cq = dev.create_cq(256);
    let conn = dev.connect([10, 0, 0, 1], 17, &ep, &cq).unwrap();
    Pair {
        release,
        conn,
        ep,
        cq,
        dev,
        lines,
        child,
        _dir: dir,
    }
}

impl Pair {
    fn run(&self, reqs: &[WorkRequest], want: WcStatus) {
        for r in reqs {
            self.conn.post(&r.signaled()).unwrap();
        }
        for wc in wait_completions(&self.cq, reqs.len(), T) {
            assert_eq!(wc.status, want, "{wc:?}");
        }
    }

    /// Waits for a line from the receiver, driving this side meanwhile.
    fn expect_line(&self, want: &str) {
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

    /// Keeps acknowledging until the receiver has verified and exited.
    fn finish(self, example: &str) {
        let start = Instant::now();
        let want = format!("verified {example}");
        let mut said: Vec<String> = Vec::new();
        let Pair {
            conn,
            ep,
            cq,
            dev,
            lines,
            release,
            mut child,
            _dir,
        } = self;
        // Serve (acknowledge) until the receiver says it verified; it then stops polling
        // and waits for us: close our port first, then let it go, so that neither
        // process polls a memif whose peer is leaving.
        while !said.contains(&want) {
            dev.progress();
            said.extend(lines.try_iter());
            if let Some(s) = child.0.try_wait().unwrap() {
                said.extend(lines.try_iter());
                panic!("receiver exited ({s}) before verifying: {said:?}");
            }
            if start.elapsed() > T {
                panic!("receiver did not finish: {said:?}");
            }
        }
        drop((conn, ep, cq, dev));
        drop(release);
        let status = wait_child_for(&mut child.0, T).expect("the receiver exits");
        said.extend(lines.try_iter());
        assert!(
            status.success(),
            "receiver failed after verifying: {said:?}"
        );
    }
}

#[test]
fn strided_deposit_across_processes() {
    let p = start("stride");
    // r0: pointer (indirect only), r1: stride 16, changed to 40 by the receiver.
    let batch = |ids: std::ops::RangeInclusive<u8>| -> Vec<WorkRequest> {
        ids.map(|k| WorkRequest::send_inline(u64::from(k), &[k; 8], 0).unwrap())
            .collect()
    };
    p.run(&batch(1..=3), WcStatus::Success);
    p.expect_line("stride 40");
    p.run(&batch(4..=5), WcStatus::Success);
    // The operand carries each message's stride: `indirect(r2) + op1(Add, r2, operand)`.
    let reqs: Vec<_> = [24u32, 8, 56, 4]
        .into_iter()
        .enumerate()
        .map(|(k, stride)| {
            WorkRequest::write_inline(10 + k as u64, &[0xA0 + k as u8; 4], 0)
                .unwrap()
                .indirect(2)
                .operand(stride)
                .op1(RegOp::Add, 2, Src::Operand)
        })
        .collect();
    p.run(&reqs, WcStatus::Success);
    p.finish("stride");
}

#[test]
fn priority_queueing_across_processes() {
    let p = start("priority");
    let enqueue = |id: u64, data: &[u8], queue: u8, prio: u32| {
        WorkRequest::write_inline(id, data, 0)
            .unwrap()
            .post_increment(queue)
            .operand(prio)
            .cond(Cond::Lt, Src::Operand, 2)
            .op1(RegOp::Or, 2, Src::Operand)
            .order(Order::CondFirst)
    };
    p.run(
        &[
            enqueue(1, b"job-a low 2", 3, 2),
            enqueue(2, b"job-b low 1", 3, 1),
            enqueue(3, b"job-c high 8", 0, 8),
            enqueue(4, b"job-d high 4", 0, 4),
        ],
        WcStatus::Success,
    );
    p.finish("priority");
}

#[test]
fn atomics_across_processes() {
    let p = start("atomic");
    let ep = &p.ep;
    let fai: Vec<_> = (0..5u64)
        .map(|i| WorkRequest::fetch_add(i, ep, 8 * i, 512, 1))
        .collect();
    p.run(&fai, WcStatus::Success);
    let regs: Vec<_> = (0..3u64)
        .map(|i| WorkRequest::fetch_add(10 + i, ep, 64 + 8 * i, 0, 1).on_register(0))
        .collect();
    p.run(&regs, WcStatus::Success);
    p.run(
        &[
            WorkRequest::cmp_swap(20, ep, 128, 520, 5, 9),
            WorkRequest::cmp_swap(21, ep, 136, 520, 5, 11),
            WorkRequest::cmp_swap(22, ep, 144, 0, 42, 43).on_register(1),
            WorkRequest::cmp_swap(23, ep, 152, 0, 42, 44).on_register(1),
        ],
        WcStatus::Success,
    );
    // The receiver's register 2 is indirect-only: no reading, no changing.
    p.run(
        &[
            WorkRequest::fetch_add(30, ep, 192, 0, 0).on_register(2),
            WorkRequest::reg_op(31)
                .operand(0)
                .op1(RegOp::Set, 2, Src::Operand),
        ],
        WcStatus::RemoteAccessError,
    );
    let got = |off: usize| ep.load_u64(off).unwrap();
    assert_eq!(
        (0..5).map(|i| got(8 * i)).collect::<Vec<_>>(),
        [100, 101, 102, 103, 104]
    );
    assert_eq!(
        (0..3).map(|i| got(64 + 8 * i)).collect::<Vec<_>>(),
        [7, 8, 9]
    );
    assert_eq!(
        (0..4).map(|i| got(128 + 8 * i)).collect::<Vec<_>>(),
        [5, 9, 42, 43]
    );
    assert_eq!(got(192), 0, "nothing came back from the refused read");
    p.finish("atomic");
}

#[test]
fn queue_bit_vector_with_interrupts_blocked_by_the_top_bit_across_processes() {
    let p = start("bitvec");
    const LEVEL: u8 = 10;
    // Append 16 bytes to queue q with priority bit q (the seed's priority enqueue).
    let append = |id: u64, q: u8| {
        WorkRequest::write_inline(id, &[0x10 + id as u8; 16], 0)
            .unwrap()
            .post_increment(2 * q)
            .operand(1 << q)
            .cond(Cond::Lt, Src::Operand, LEVEL)
            .op1(RegOp::Or, LEVEL, Src::Operand)
            .order(Order::CondFirst)
    };
    let blocked: Vec<_> = [(0, 2), (1, 0), (2, 3), (3, 2), (4, 0)]
        .into_iter()
        .map(|(id, q)| append(id, q))
        .collect();
    p.run(&blocked, WcStatus::Success);
    p.expect_line("unblocked");
    p.run(
        &[append(5, 1), append(6, 4), append(7, 3)],
        WcStatus::Success,
    );
    p.finish("bitvec");
}
