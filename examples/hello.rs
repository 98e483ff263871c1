//! hello: two nodes in one process, one 4 KiB RDMA-WRITE-style deposit, checked at the
//! receiver.
//!
//! ```sh
//! cargo run -p deposit --example hello
//! ```
//!
//! If you know verbs: a `Device` is an opened device plus its protection domain, an
//! `Endpoint` a registered memory region (addressed by offset, not by virtual
//! address), a `Connection` a connected queue pair and `WorkRequest::write` an
//! `IBV_WR_RDMA_WRITE`. `listen`/`accept`/`connect` play rdma_cm's part.
//!
//! The two nodes are the two sides of an in-process ring pair (`ring:hello:a` and
//! `ring:hello:b`): no setup, no second process. With the default inline progress
//! there is no worker thread; the calls below that block (connect, accept, wait_one)
//! drive both nodes. Between processes or hosts only the port spec changes (see
//! `examples/memif.rs`).

use std::time::{Duration, Instant};

use deposit::{Device, DeviceConfig, Rights, WcStatus, WorkRequest};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The bound on every wait.
const T: Duration = Duration::from_secs(5);
/// The size of the deposit.
const LEN: u32 = 4096;
/// The service number the server listens on (rdma_cm's port).
const SERVICE: u32 = 1;

fn main() {
    if let Err(e) = run() {
        eprintln!("hello: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let start = Instant::now();
    // Two nodes: 10.0.0.1 (the server, who receives) and 10.0.0.2 (the client).
    let server = Device::open(DeviceConfig::new("ring:hello:a", [10, 0, 0, 1]))?;
    let client = Device::open(DeviceConfig::new("ring:hello:b", [10, 0, 0, 2]))?;

    // Server: an endpoint peers may write into, a completion queue, and a listener
    // whose accepted connections act on that endpoint.
    let sep = server.alloc_endpoint(u64::from(LEN), Rights::REMOTE_WRITE)?;
    let scq = server.create_cq(16);
    let listener = server.listen(SERVICE, &sep, &scq)?;

    // Client: its own endpoint (local memory the write reads from; the source of a
    // write needs no remote right) and completion queue.
    let cep = client.alloc_endpoint(u64::from(LEN), Rights::NONE)?;
    let ccq = client.create_cq(16);
    let conn = client.connect([10, 0, 0, 1], SERVICE, &cep, &ccq)?;
    // Keep the accepted connection: dropping it would close the connection.
    let accepted = listener.accept(T)?;
    println!(
        "hello: connected (client connection {}, server connection {})",
        conn.local_number(),
        accepted.local_number()
    );

    // Fill the client's buffer and write all of it at offset 0 of the server's
    // endpoint. `signaled()` asks for a completion on success too.
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    cep.write(0, &data)?;
    conn.post(&WorkRequest::write(7, &cep, 0, LEN, 0).signaled())?;
    let wc = ccq
        .wait_one(T)
        .ok_or("no completion for the write within 5 s")?;
    if wc.wr_id != 7 || wc.status != WcStatus::Success {
        return Err(format!("the write completed with {wc:?}").into());
    }
    println!(
        "hello: the client's write of {LEN} bytes completed: {:?}",
        wc.status
    );

    // The receiving application was not involved: the bytes are simply in its memory.
    // A success completion means the server executed the write, so they are there now.
    let mut got = vec![0u8; LEN as usize];
    sep.read(0, &mut got)?;
    if got != data {
        let at = got.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("the server's endpoint differs from the data at byte {at}").into());
    }
    // The server can also count what arrived on a connection without any event.
    if accepted.arrivals() != 1 {
        return Err(format!("{} messages arrived, expected 1", accepted.arrivals()).into());
    }
    println!(
        "hello: the server's endpoint holds the {LEN} bytes (verified); {:.0?} in all",
        start.elapsed()
    );
    Ok(())
}
