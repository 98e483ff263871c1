//! memif: two processes joined by a shared-memory interface (DPDK's memif): the client
//! writes 64 KiB into the server's endpoint, reads them back with a remote read and
//! checks them; the server checks them too.
//!
//! ```sh
//! cargo run -p deposit --example memif                   # both: spawns the server itself
//! cargo run -p deposit --example memif -- server [SOCK]  # one terminal
//! cargo run -p deposit --example memif -- client [SOCK]  # another
//! ```
//!
//! Run with no argument it starts itself as the server child (`server SOCK`, with a
//! socket path unique to the run), plays the client and waits for the child. The
//! programs are the in-process ones' (`examples/hello.rs`) with another port spec:
//! `memif:SOCK:server` on one side and `memif:SOCK:client` on the other (the library
//! sizes memif's buffers for its largest frame itself). The server is node 10.0.0.1,
//! the client 10.0.0.2; both use inline progress: a process's port moves only while
//! it is inside a deposit call.
//!
//! Leaving is ordered (a DPDK 22.11 memif that polls while its peer closes can touch
//! memory the peer just unmapped): the client closes its connection; the server, told
//! by the disconnect, stops polling and waits for the client's port to go away
//! (`Device::link_up`) before it closes its own.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use deposit::{ConnState, Device, DeviceConfig, Rights, WcStatus, WorkRequest};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The bound on the waits of a run (long enough to start the other side by hand).
const T: Duration = Duration::from_secs(30);
const SERVICE: u32 = 1;
/// The bytes written, then read back.
const LEN: u32 = 64 * 1024;
/// The socket of a run by hand (two terminals) when none is given.
const DEFAULT_SOCK: &str = "/tmp/deposit-example-memif.sock";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sock = args.get(1).map_or(DEFAULT_SOCK, String::as_str);
    let result = match args.first().map(String::as_str) {
        None => both(),
        Some("server") => server(sock),
        Some("client") => client(sock),
        Some(other) => {
            Err(format!("unknown role {other:?} (usage: memif [server|client [SOCK]])").into())
        }
    };
    if let Err(e) = result {
        eprintln!("memif: FAILED: {e}");
        std::process::exit(1);
    }
}

/// The byte at offset `i` of the data.
fn pattern(i: u32) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 24) as u8
}

/// No argument: the server in a child process, the client here.
fn both() -> Result<()> {
    let start = Instant::now();
    let sock = format!("/tmp/deposit-example-memif-{}.sock", std::process::id());
    let mut child = Command::new(std::env::current_exe()?)
        .args(["server", &sock])
        .spawn()?;
    let result = client(&sock).and_then(|()| wait_child(&mut child));
    if result.is_err() {
        // Do not leave the child behind (it would give up by itself after T).
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(&sock);
    result?;
    println!(
        "memif: both processes verified the data; {:.1?} in all",
        start.elapsed()
    );
    Ok(())
}

/// Waits (bounded) for the server child and checks that it succeeded.
fn wait_child(child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + T;
    loop {
        if let Some(status) = child.try_wait()? {
            return if status.success() {
                Ok(())
            } else {
                Err(format!("the server process failed ({status})").into())
            };
        }
        if Instant::now() > deadline {
            return Err("the server process did not exit".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server (node 10.0.0.1): an endpoint the client may write and read, served
/// until the client disconnects.
fn server(sock: &str) -> Result<()> {
    // A socket left by an earlier run that was killed would keep DPDK from listening.
    let _ = std::fs::remove_file(sock);
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:server"),
        [10, 0, 0, 1],
    ))?;
    let ep = dev.alloc_endpoint(u64::from(LEN), Rights::REMOTE_WRITE | Rights::REMOTE_READ)?;
    let cq = dev.create_cq(16);
    let listener = dev.listen(SERVICE, &ep, &cq)?;
    println!("memif server: listening on {sock} (node 10.0.0.1, service {SERVICE})");
    let conn = listener.accept(T)?;
    println!("memif server: accepted a connection from the client");

    // Nothing to do while the client writes and reads but to keep the port moving
    // (inline progress), until the client closes the connection.
    let deadline = Instant::now() + T;
    while conn.state() == ConnState::Normal {
        if dev.progress() == 0 {
            std::thread::yield_now();
        }
        if Instant::now() > deadline {
            return Err("the client did not disconnect".into());
        }
    }
    // From here on this process does not poll the port (see the top of the file).
    let mut got = vec![0u8; LEN as usize];
    ep.read(0, &mut got)?;
    let want: Vec<u8> = (0..LEN).map(pattern).collect();
    if got != want {
        return Err("the endpoint does not hold the client's data".into());
    }
    println!(
        "memif server: the client disconnected after {} messages; the {LEN} bytes it wrote are \
         here (verified)",
        conn.arrivals()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev.link_up() {
        if Instant::now() > deadline {
            return Err("the client's port did not go away".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((conn, listener, ep, cq, dev));
    let _ = std::fs::remove_file(sock);
    Ok(())
}

/// The client (node 10.0.0.2): writes the data, reads it back, compares.
fn client(sock: &str) -> Result<()> {
    // The server creates the socket: wait for it (bounded).
    let deadline = Instant::now() + T;
    while !Path::new(sock).exists() {
        if Instant::now() > deadline {
            return Err(format!("no server socket at {sock} (start `memif server` first)").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dev = Device::open(DeviceConfig::new(
        &format!("memif:{sock}:client"),
        [10, 0, 0, 2],
    ))?;
    // The local endpoint: the data at 0, the read's result at LEN. Neither range needs
    // a remote right (the source of a write and the target of a read are local).
    let ep = dev.alloc_endpoint(2 * u64::from(LEN), Rights::NONE)?;
    let cq = dev.create_cq(16);
    let conn = dev.connect([10, 0, 0, 1], SERVICE, &ep, &cq)?;
    println!("memif client: connected to 10.0.0.1 over {sock}");

    let data: Vec<u8> = (0..LEN).map(pattern).collect();
    ep.write(0, &data)?;
    // The write (segmented into frames by the transport), then the read; one
    // connection executes in order, so the read sees the write.
    conn.post(&WorkRequest::write(1, &ep, 0, LEN, 0).signaled())?;
    conn.post(&WorkRequest::read(2, &ep, u64::from(LEN), LEN, 0).signaled())?;
    for want in [1, 2] {
        let wc = cq.wait_one(T).ok_or("a request never completed")?;
        if (wc.wr_id, wc.status) != (want, WcStatus::Success) {
            return Err(format!("request {want} completed with {wc:?}").into());
        }
    }
    let mut back = vec![0u8; LEN as usize];
    ep.read(u64::from(LEN), &mut back)?;
    if back != data {
        let at = back
            .iter()
            .zip(&data)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!("the bytes read back differ from those written at byte {at}").into());
    }
    println!("memif client: wrote {LEN} bytes, read them back with a remote read: identical");

    // Close: the disconnect tells the server we are done. Keep the port moving a
    // moment so that it (and a retry, were it lost) gets out, then close the port.
    drop(conn);
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        if dev.progress() == 0 {
            std::thread::yield_now();
        }
    }
    drop((ep, cq, dev));
    Ok(())
}
