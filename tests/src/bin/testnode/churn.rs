//! `churn-server` / `churn-client`: clients that come and go against one memif server
//! that streams writes to each of them (issue 10, bug 2: a peer leaving must end its
//! connections with errors, never crash the node).

use std::collections::BTreeMap;
use std::process::exit;
use std::time::{Duration, Instant};

use deposit::*;

use super::{fail, stdin_lines, T};

/// The service the churn server listens on.
const SERVICE: u32 = 31;
/// Bytes of each write the server streams.
const WRITE: u32 = 4096;
/// Bytes of either side's endpoint.
const LEN: usize = 64 * 1024;

/// Node 10.0.0.1, memif server on `sock`: accepts every client and streams 4 KiB writes
/// into its endpoint (every 8th signaled) until the connection fails or closes. Says
/// "ready", then "accepted N" per client; on "exit" it waits (bounded) for every
/// connection to end and prints `accepted A ended E` and the completions by status.
pub fn churn_server(sock: &str) {
    let mut cfg = DeviceConfig::new(&format!("memif:{sock}:server"), [10, 0, 0, 1])
        .progress(Progress::Dedicated);
    // A client that vanished is given up on within ~100 ms.
    cfg.retry_timeout = Duration::from_millis(10);
    let dev = Device::open(cfg).unwrap_or_else(|e| fail(e));
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(4096);
    let l = dev.listen(SERVICE, &ep, &cq).unwrap_or_else(|e| fail(e));
    let lines = stdin_lines();
    println!("ready");
    let mut live: Vec<Connection> = Vec::new();
    let (mut accepted, mut ended) = (0u64, BTreeMap::<String, u64>::new());
    let mut completions = BTreeMap::<String, u64>::new();
    let mut exit_by: Option<Instant> = None;
    let mut id = 0u64;
    loop {
        if exit_by.is_none() {
            if let Ok(c) = l.accept(Duration::from_millis(1)) {
                accepted += 1;
                println!("accepted {accepted}");
                live.push(c);
            }
        }
        for c in &live {
            for _ in 0..64 {
                id += 1;
                let mut wr = WorkRequest::write(id, &ep, 0, WRITE, 0);
                if id % 8 == 0 {
                    wr = wr.signaled();
                }
                if c.post(&wr).is_err() {
                    break;
                }
            }
        }
        while let Some(wc) = cq.poll_one() {
            *completions.entry(format!("{:?}", wc.status)).or_default() += 1;
        }
        live.retain(|c| match c.state() {
            s @ (ConnState::Error | ConnState::Closed) => {
                *ended.entry(format!("{s:?}")).or_default() += 1;
                false
            }
            _ => true,
        });
        match lines.try_recv() {
            Ok(l) if l == "exit" => exit_by = Some(Instant::now() + T),
            Ok(l) => fail(format!("unexpected line {l:?}")),
            Err(_) => {}
        }
        if let Some(by) = exit_by {
            if live.is_empty() || Instant::now() > by {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let n_ended: u64 = ended.values().sum();
    println!("accepted {accepted} ended {n_ended} {ended:?} completions {completions:?}");
    exit(0)
}

/// Node 10.0.0.2, memif client on `sock`: connects to the churn server, says
/// "connected", then drives its device until told how to leave: "exit" (at once, no
/// clean-up) or "close" (closes the connection and the device first) — or until killed.
pub fn churn_client(sock: &str) {
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))
    .unwrap_or_else(|e| fail(e));
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let cq = dev.create_cq(64);
    let conn = dev
        .connect([10, 0, 0, 1], SERVICE, &ep, &cq)
        .unwrap_or_else(|e| fail(e));
    let lines = stdin_lines();
    println!("connected");
    let start = Instant::now();
    loop {
        dev.progress();
        match lines.try_recv() {
            Ok(l) if l == "exit" => exit(0),
            Ok(l) if l == "close" => {
                drop(conn);
                drop(ep);
                drop(dev);
                exit(0)
            }
            Ok(l) => fail(format!("unexpected line {l:?}")),
            Err(_) if start.elapsed() > T => fail("never told to leave"),
            Err(_) => {}
        }
    }
}
