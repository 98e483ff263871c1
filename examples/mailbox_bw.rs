//! mailbox_bw: tagged messaging's bandwidth and latency between two processes over
//! memif — what MPI's ping-pong and osu_bw see through a mailbox, to set beside
//! `ddperf write_bw` on the same port.
//!
//! ```sh
//! cargo run --release -p deposit --example mailbox_bw            # spawns the receiver
//! cargo run --release -p deposit --example mailbox_bw -- server SOCK   # by hand
//! cargo run --release -p deposit --example mailbox_bw -- client SOCK
//! ```
//!
//! The client (node 10.0.0.2) sends windows of 16 messages of each size (zero copy:
//! one buffer, read in place by the receiver for rendezvous sizes), the server (node
//! 10.0.0.1) receives them into posted buffers and answers each window with a 4-byte
//! message (osu_bw's pattern); then a ping-pong of 8-byte messages (osu_latency's,
//! RTT/2). The server checks the first and last bytes of every message it received.

use std::process::Command;
use std::time::{Duration, Instant};

use deposit::{Device, DeviceConfig, Mailbox, MailboxConfig, PeerAddr, Selector, TagStatus};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const SERVICE: u32 = 5;
const WINDOW: usize = 16;
const SIZES: [usize; 4] = [8192, 65536, 1 << 20, 4 << 20];
const T: Duration = Duration::from_secs(60);
const ACK: u64 = 1 << 40;
const PING: u64 = 1 << 41;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None => both(),
        Some("server") => server(&args[1]),
        Some("client") => client(&args[1]),
        Some(r) => Err(format!("role {r:?}: server SOCK | client SOCK").into()),
    };
    if let Err(e) = result {
        eprintln!("mailbox_bw: FAILED: {e}");
        std::process::exit(1);
    }
}

fn both() -> Result<()> {
    let sock = format!("/tmp/deposit-mailbox-bw-{}.sock", std::process::id());
    let mut child = Command::new(std::env::current_exe()?)
        .args(["server", &sock])
        .spawn()?;
    let r = client(&sock);
    if r.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let _ = std::fs::remove_file(&sock);
    r?;
    if !status.success() {
        return Err(format!("the server failed ({status})").into());
    }
    Ok(())
}

fn iters(size: usize) -> usize {
    (256 << 20) / size.max(1) / WINDOW
}

/// Waits for the completion of `context`, driving progress.
fn wait(m: &mut Mailbox, context: u64) -> Result<deposit::TagCompletion> {
    let deadline = Instant::now() + T;
    let mut out = [deposit::mailbox::EMPTY; 32];
    loop {
        let n = m.poll(&mut out);
        if let Some(c) = out[..n].iter().find(|c| c.context == context) {
            if c.status != TagStatus::Success {
                return Err(format!("completion {context}: {:?}", c.status).into());
            }
            return Ok(*c);
        }
        if Instant::now() > deadline {
            return Err(format!("no completion {context} in {T:?}").into());
        }
    }
}

/// Waits for `left` completions (any order), each a success.
fn wait_all(m: &mut Mailbox, mut left: usize) -> Result<()> {
    let deadline = Instant::now() + T;
    let mut out = [deposit::mailbox::EMPTY; 32];
    while left > 0 {
        let n = m.poll(&mut out);
        for c in &out[..n] {
            if c.status != TagStatus::Success {
                return Err(format!("completion {}: {:?}", c.context, c.status).into());
            }
        }
        left -= n;
        if Instant::now() > deadline {
            return Err(format!("{left} completions missing after {T:?}").into());
        }
    }
    Ok(())
}

fn server(sock: &str) -> Result<()> {
    let _ = std::fs::remove_file(sock);
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:server"),
        [10, 0, 0, 1],
    ))?;
    let mut m = dev.mailbox(&MailboxConfig::new(SERVICE))?;
    let to_client = m.peer(PeerAddr::new([10, 0, 0, 2], SERVICE));
    let max = *SIZES.iter().max().expect("sizes");
    let mut bufs: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; max]).collect();
    for size in SIZES {
        for _ in 0..iters(size) {
            for (k, b) in bufs.iter_mut().enumerate() {
                // SAFETY: `b` outlives the receive: its completion is waited for below.
                unsafe {
                    m.recv(
                        Selector::tag(size as u64),
                        true,
                        b.as_mut_ptr(),
                        size,
                        k as u64,
                    )
                }?;
            }
            wait_all(&mut m, WINDOW)?;
            for b in &bufs {
                if b[0] != 0xa5 || b[size - 1] != 0x5a {
                    return Err(format!("a {size}-byte message arrived wrong").into());
                }
            }
            m.send(to_client, Some(ACK), &[1, 2, 3, 4], ACK)?;
            wait(&mut m, ACK)?;
        }
    }
    let mut b = [0u8; 8];
    loop {
        // SAFETY: `b` outlives the receive.
        unsafe { m.recv(Selector::ANY, true, b.as_mut_ptr(), 8, PING) }?;
        let c = wait(&mut m, PING)?;
        m.send(to_client, Some(c.tag), &b, PING + 1)?;
        wait(&mut m, PING + 1)?;
        if c.tag == 1 {
            break;
        }
    }
    // Let the last reply be acknowledged before the port goes.
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        m.progress();
    }
    Ok(())
}

fn client(sock: &str) -> Result<()> {
    let deadline = Instant::now() + T;
    while !std::path::Path::new(sock).exists() {
        if Instant::now() > deadline {
            return Err("no server socket".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))?;
    let mut m = dev.mailbox(&MailboxConfig::new(SERVICE))?;
    let to_server = m.peer(PeerAddr::new([10, 0, 0, 1], SERVICE));
    println!("# mailbox_bw over memif: eager up to {} B", m.eager_max());
    println!("# {:>10} {:>12} {:>10}", "bytes", "MiB/s", "Gb/s");
    let max = *SIZES.iter().max().expect("sizes");
    let mut buf = vec![0u8; max];
    let mut ack = [0u8; 4];
    for size in SIZES {
        buf[0] = 0xa5;
        buf[size - 1] = 0x5a;
        let n = iters(size);
        let start = Instant::now();
        for _ in 0..n {
            // SAFETY: `ack` outlives the receive.
            unsafe { m.recv(Selector::tag(ACK), true, ack.as_mut_ptr(), 4, ACK) }?;
            for k in 0..WINDOW {
                // SAFETY: `buf` stays unchanged until the window's sends completed.
                unsafe {
                    m.send_raw(
                        to_server,
                        Some(size as u64),
                        None,
                        buf.as_ptr(),
                        size,
                        k as u64,
                        false,
                    )
                }?;
            }
            wait_all(&mut m, WINDOW + 1)?;
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = (n * WINDOW * size) as f64;
        println!(
            "  {:>10} {:>12.1} {:>10.2}",
            size,
            bytes / secs / (1 << 20) as f64,
            bytes * 8.0 / secs / 1e9
        );
    }
    let mut b = [0u8; 8];
    let rounds = 20_000;
    let start = Instant::now();
    for i in 0..=rounds {
        let last = i == rounds;
        // SAFETY: `b` outlives the receive.
        unsafe { m.recv(Selector::ANY, true, b.as_mut_ptr(), 8, PING) }?;
        m.send(to_server, Some(u64::from(last)), &[7u8; 8], PING + 1)?;
        wait_all(&mut m, 2)?;
    }
    let rtt = start.elapsed().as_secs_f64() / f64::from(rounds + 1);
    println!("# 8-byte ping-pong: {:.2} us RTT/2", rtt / 2.0 * 1e6);
    // The server's last reply is acknowledged by this port: keep it up a moment.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        m.progress();
    }
    Ok(())
}
