//! Soak (issue 4) across two processes over memif: this test process sends the mixed
//! workload of [`deposit_tests::soak`], `testnode soak-server` receives and checks its
//! memory, queue pointer and atomic words after every round; both inject 1 %, 5 % or
//! 10 % loss with reordering, duplication and corruption on what they receive.
//!
//! `DEPOSIT_SOAK_OPS` sets the operations per test (default [`CI_OPS`]),
//! `DEPOSIT_SOAK_SECS` the time bound.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::soak::{self, Plan, Sender};
use deposit_tests::*;

/// Operations per test by default (keeps the soak set within the CI budget).
const CI_OPS: u64 = 50_000;
const SECS: u64 = 120;
const T: Duration = Duration::from_secs(20);

/// Waits for the receiver's next line, driving `dev` meanwhile (bounded).
fn next_line(dev: &Device, lines: &Receiver<String>, until: Instant) -> Result<String, String> {
    loop {
        match lines.try_recv() {
            Ok(l) => return Ok(l),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                return Err("the receiver exited".into())
            }
            Err(_) if Instant::now() > until => return Err("no answer by the deadline".into()),
            Err(_) => {
                dev.progress();
            }
        }
    }
}

fn soak_over_memif(tag: &str, loss_pct: u32, seed: u64) {
    let spec = soak::fault_spec(loss_pct);
    let dir = TempDir::new(tag);
    let sock = dir.sock();
    let ops = soak::ops_from_env(CI_OPS);
    let deadline = Instant::now() + soak::deadline_from_env(SECS);
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_testnode"))
            .args([
                "soak-server",
                &sock,
                &seed.to_string(),
                &ops.to_string(),
                &format!("{spec},seed={}", seed + 1),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut to_child = child.0.stdin.take().unwrap();
    let lines = line_reader(child.0.stdout.take().unwrap());
    assert_eq!(
        lines.recv_timeout(T).as_deref(),
        Ok("ready"),
        "receiver did not start"
    );
    let mut cfg = DeviceConfig::new(&format!("memif:{sock}:client"), [10, 0, 0, 2]);
    cfg.faults = Some(format!("{spec},seed={seed}").parse().unwrap());
    cfg.retry_timeout = Duration::from_millis(2);
    cfg.retry_count = 12;
    let dev = Device::open(cfg).unwrap();
    let pool = soak::source_pool(seed);
    let cep = soak::sender_endpoint(&dev, &pool).unwrap();
    let cq = dev.create_cq(4 * soak::ROUND_OPS);
    let conn = dev
        .connect([10, 0, 0, 1], soak::SERVICE, &cep, &cq)
        .unwrap();
    let report = Sender {
        dev: &dev,
        conn: &conn,
        cep: &cep,
        cq: &cq,
        pool: &pool,
    }
    .run(Plan::new(seed, ops), deadline, |round| {
        writeln!(to_child, "verify {}", round.index).map_err(|e| e.to_string())?;
        let said = next_line(&dev, &lines, deadline)
            .map_err(|e| format!("receiver check of round {}: {e}", round.index))?;
        if said != format!("ok {}", round.index) {
            return Err(format!("receiver: {said}"));
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("soak over memif at {loss_pct} % loss, seed {seed}: {e}"));
    assert_eq!(report.ops, ops);
    writeln!(to_child, "done").unwrap();
    let server_faults = next_line(&dev, &lines, Instant::now() + T).unwrap();
    assert!(server_faults.starts_with("faults "), "{server_faults}");
    let cs = dev.fault_stats();
    soak::faults_were_injected("sender", &cs).unwrap();
    eprintln!(
        "soak memif {loss_pct}% loss: {report:?}\n  sender {cs:?}, retransmits {}\n  receiver \
         {server_faults}",
        dev.stats().retransmits
    );
    // Neither side polls while the other leaves (see testnode's wait_for_release):
    // close our port first, then let the receiver go.
    drop((conn, cep, cq, dev));
    drop(to_child);
    let status = wait_child_for(&mut child.0, T).expect("receiver did not exit");
    assert!(status.success(), "receiver failed at exit");
}

#[test]
fn soak_memif_mixed_ops_exact_under_1_percent_loss() {
    soak_over_memif("soak1", 1, 111);
}

#[test]
fn soak_memif_mixed_ops_exact_under_5_percent_loss() {
    soak_over_memif("soak5", 5, 555);
}

#[test]
fn soak_memif_mixed_ops_exact_under_10_percent_loss() {
    soak_over_memif("soak10", 10, 1111);
}
