//! What idle connections cost: `cargo bench -p deposit --bench conns [-- N]`.
//!
//! Two devices in this process on an in-process ring pair (a server with a dedicated
//! worker, an inline client) open N connections (default 100 000) between one endpoint
//! each, then leave them idle. Reported: the process's resident memory
//! (`VmRSS` of `/proc/self/status`) before and after, per node and per connection, the
//! time to connect them, and how a 32 B write on the last connection fares among them
//! (the worker's turn must not grow with idle connections). Then the 32 B write rate
//! of one connection against the same writes spread round-robin over 10 000 of them
//! (`ddperf write_bw -q 1` vs `-q 10000`), rounds interleaved. Issue 11's goals: a
//! node with 100 000 idle connections under 100 MiB beyond one with none (1 KiB
//! each); a rate drop from 1 to 10 000 connections of at most 10 %.

use std::time::{Duration, Instant};

use deposit::{Connection, Device, DeviceConfig, Progress, Rights, WcStatus, WorkRequest};

const T: Duration = Duration::from_secs(10);
/// Signaled writes in flight at once in the rate test (all connections together).
const OUTSTANDING: usize = 1024;
/// Writes per rate measurement.
const WRITES: u64 = 2_000_000;

/// 32 B writes per second, posted round-robin over `conns` with at most
/// `OUTSTANDING` in flight (each signaled: the completion says which connection).
fn stream(conns: &[&Connection], wr: &WorkRequest) -> f64 {
    let cq = conns[0].cq();
    let mut wcs = vec![deposit::Completion::EMPTY; 256];
    let (mut posted, mut done, mut next) = (0u64, 0u64, 0usize);
    let t0 = Instant::now();
    while done < WRITES {
        while posted < WRITES && posted - done < OUTSTANDING as u64 {
            match conns[next].post(wr) {
                Ok(()) => posted += 1,
                Err(deposit::Error::SendQueueFull { .. }) => break,
                Err(e) => panic!("post: {e}"),
            }
            next = if next + 1 == conns.len() { 0 } else { next + 1 };
        }
        let n = cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success);
        }
        done += n as u64;
    }
    WRITES as f64 / t0.elapsed().as_secs_f64()
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Median time of `n` signaled 32 B writes, one at a time, on `c`.
fn write_rtt(c: &Connection, wr: &WorkRequest, n: usize) -> f64 {
    let mut us: Vec<f64> = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            c.post(wr).expect("post");
            let wc = c.cq().wait_one(T).expect("completion");
            assert_eq!(wc.status, WcStatus::Success);
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    us[n / 2]
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let cfg = |port: &str, ip| {
        let mut c = DeviceConfig::new(port, ip);
        c.max_connections = n + 16;
        // All of them come from the one client: above the per-source cap's default.
        c.cm_limits.per_source_connections = c
            .cm_limits
            .per_source_connections
            .max(u32::try_from(n + 16).unwrap_or(u32::MAX));
        c
    };
    let server = Device::open(cfg("ring:conns:b", [10, 0, 0, 1]).progress(Progress::Dedicated))
        .expect("server device");
    let client = Device::open(cfg("ring:conns:a", [10, 0, 0, 2])).expect("client device");
    let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let scq = server.create_cq(64);
    let l = server.listen(5, &sep, &scq).unwrap();
    let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let cq = client.create_cq(OUTSTANDING);
    let wr = WorkRequest::write(1, &cep, 0, 32, 0).signaled();

    // Warm up both devices (first connection, first frames) before the baseline.
    let c0 = client.connect([10, 0, 0, 1], 5, &cep, &cq).unwrap();
    let s0 = l.accept(T).unwrap();
    let alone = write_rtt(&c0, &wr, 2000);
    let before = rss_kib();
    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let c = client
            .connect([10, 0, 0, 1], 5, &cep, &cq)
            .expect("connect");
        let s = l.accept(T).expect("accept");
        conns.push((c, s));
    }
    let took = t0.elapsed();
    // Let both sides settle (acknowledgements, timers) before reading memory.
    for _ in 0..1000 {
        client.progress();
    }
    let after = rss_kib();
    let among = write_rtt(&conns[n - 1].0, &wr, 2000);
    let delta = after.saturating_sub(before) * 1024;
    println!("{n} idle connections between two nodes in one process (ring loopback)");
    println!(
        "  connected in {:.2} s ({:.1} us each)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "  resident memory: {} MiB before, {} MiB after: +{:.1} MiB for both nodes",
        before / 1024,
        after / 1024,
        delta as f64 / (1 << 20) as f64
    );
    println!(
        "  per node: +{:.1} MiB for {n} connections = {} B per connection (goal: < 100 MiB per 100 000)",
        delta as f64 / 2.0 / (1 << 20) as f64,
        delta / 2 / n as u64
    );
    println!("  32 B write round trip, median of 2000: {alone:.2} us with 1 connection, {among:.2} us among {n}");
    let spread: Vec<&Connection> = conns.iter().take(10_000).map(|c| &c.0).collect();
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        one.push(stream(&[&c0], &wr));
        many.push(stream(&spread, &wr));
    }
    one.sort_by(|a, b| a.partial_cmp(b).unwrap());
    many.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "  32 B write rate, {OUTSTANDING} in flight, median of 3 interleaved: {:.2} M/s on 1 connection, {:.2} M/s over {} ({:.3}x)",
        one[1] / 1e6,
        many[1] / 1e6,
        spread.len(),
        many[1] / one[1]
    );
    drop(s0);
}
