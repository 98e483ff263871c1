//! High-priority latency under a low-priority bulk transfer, on a real in-process ring
//! pair: `cargo bench -p deposit --bench priority [-- GIB]`.
//!
//! Two nodes, each driven inline by its own thread (as `ddperf --loopback`). The client
//! has two connections to the server: `urgent` (high priority) and `bulk` (low
//! priority). Urgent pings are 32-byte writes whose last byte the server's thread
//! watches and answers with a pong write on its own high-priority connection back;
//! the client times each round trip and reports RTT/2 like perftest. Four rounds of:
//! idle pings, then pings while the bulk connection streams a quarter of `GIB` GiB
//! (default 1) of 64 KiB writes, 16 outstanding (the machine's speed drifts; rounds
//! keep each comparison close in time). Prints the median, p99 and p99.9 of both, the
//! ratio of the medians, and each round's ratio (issue 4's target: loaded within 2x
//! idle). `DEPOSIT_MAX_FRAME=1514` runs it with
//! standard frames (a bulk frame in progress then delays an urgent one less),
//! `DEPOSIT_INFLIGHT_KIB` sets the in-flight cap of bulk data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deposit::{ConnOptions, Device, DeviceConfig, Priority, Rights, WorkRequest};

const T: Duration = Duration::from_secs(60);
const PING: u64 = 32;
const BULK_WR: u32 = 64 << 10;
const BULK_DEPTH: u64 = 16;
const BULK_REGION: u64 = 64 << 20;
const IDLE_PINGS: usize = 20_000;
/// Idle/loaded rounds the measurement alternates.
const ROUNDS: u64 = 4;
const SERVICE_URGENT: u32 = 1;
const SERVICE_BULK: u32 = 2;

fn high() -> ConnOptions {
    ConnOptions {
        priority: Priority::High,
        ..ConnOptions::default()
    }
}

/// The server: answers every ping (the last byte of the urgent region changes) with a
/// pong carrying the same byte, until `stop`.
fn server(stop: Arc<AtomicBool>, ready: std::sync::mpsc::Sender<()>) {
    let dev = Device::open(config("ring:priobench:b", [10, 0, 0, 1])).unwrap();
    let uep = dev.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let bep = dev
        .alloc_endpoint(BULK_REGION, Rights::REMOTE_WRITE)
        .unwrap();
    let cq = dev.create_cq(1 << 12);
    let lu = dev.listen_with(SERVICE_URGENT, &uep, &cq, &high()).unwrap();
    let lb = dev.listen(SERVICE_BULK, &bep, &cq).unwrap();
    ready.send(()).unwrap();
    let urgent = lu.accept(T).unwrap();
    let _bulk = lb.accept(T).unwrap();
    let mut seen = 0u8;
    let mut pongs = 0u64;
    while !stop.load(Ordering::Relaxed) {
        dev.progress();
        let b = uep.load_u8(PING - 1).unwrap();
        if b != seen {
            seen = b;
            uep.write(2048 + PING - 1, &[b]).unwrap();
            pongs += 1;
            let wr = WorkRequest::write(pongs, &uep, 2048, PING as u32, 2048);
            let wr = if pongs % 256 == 0 { wr.signaled() } else { wr };
            urgent.post(&wr).unwrap();
        }
        while cq.poll_one().is_some() {}
    }
}

/// A device's configuration: `DEPOSIT_MAX_FRAME` (bytes) and `DEPOSIT_INFLIGHT_KIB`
/// (the in-flight cap) from the environment when set.
fn config(port: &str, ip: [u8; 4]) -> DeviceConfig {
    let mut cfg = DeviceConfig::new(port, ip);
    if let Ok(b) = std::env::var("DEPOSIT_MAX_FRAME") {
        cfg.max_frame = Some(b.parse().expect("bytes"));
    }
    if let Ok(kib) = std::env::var("DEPOSIT_INFLIGHT_KIB") {
        cfg.max_inflight_bytes = kib.parse::<u64>().expect("KiB") << 10;
    }
    cfg
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    let gib: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let st = stop.clone();
    let srv = std::thread::spawn(move || server(st, tx));
    rx.recv_timeout(T).unwrap();
    let dev = Device::open(config("ring:priobench:a", [10, 0, 0, 2])).unwrap();
    let uep = dev.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let bep = dev
        .alloc_endpoint(BULK_REGION, Rights::REMOTE_WRITE)
        .unwrap();
    let ucq = dev.create_cq(1 << 12);
    let bcq = dev.create_cq(1 << 12);
    let urgent = dev
        .connect_with([10, 0, 0, 1], SERVICE_URGENT, &uep, &ucq, &high())
        .unwrap();
    let bulk = dev
        .connect([10, 0, 0, 1], SERVICE_BULK, &bep, &bcq)
        .unwrap();

    let total_wrs = gib * (1 << 30) / u64::from(BULK_WR);
    let (mut bulk_posted, mut bulk_done) = (0u64, 0u64);
    let mut counter = 0u8;
    let mut pings = 0u64;
    // One ping-pong; with `load`, keeps the bulk connection BULK_DEPTH writes deep
    // until `limit` writes are posted.
    let mut ping = |load: Option<u64>, bulk_posted: &mut u64, bulk_done: &mut u64| -> Duration {
        counter = if counter == 255 { 1 } else { counter + 1 };
        uep.write(PING - 1, &[counter]).unwrap();
        pings += 1;
        let wr = WorkRequest::write(pings, &uep, 0, PING as u32, 0);
        let wr = if pings % 256 == 0 { wr.signaled() } else { wr };
        let t0 = Instant::now();
        urgent.post(&wr).unwrap();
        let pong = || uep.load_u8(2048 + PING - 1).unwrap() == counter;
        // The pong is checked after every worker turn (progress, and the completion
        // poll, which also drives one), as a latency-sensitive application would.
        while !pong() {
            dev.progress();
            if pong() {
                break;
            }
            if let Some(limit) = load {
                while *bulk_posted < limit && *bulk_posted - *bulk_done < BULK_DEPTH {
                    let off = (*bulk_posted * u64::from(BULK_WR)) % BULK_REGION;
                    let w =
                        WorkRequest::write(*bulk_posted, &bep, off, BULK_WR, off as u32).signaled();
                    bulk.post(&w).unwrap();
                    *bulk_posted += 1;
                }
                if let Some(c) = bcq.poll_one() {
                    assert!(c.status.is_ok(), "{c:?}");
                    *bulk_done += 1;
                }
            }
            assert!(t0.elapsed() < T, "no pong");
        }
        let rtt = t0.elapsed();
        while ucq.poll_one().is_some() {}
        rtt / 2
    };
    // Warm-up.
    for _ in 0..2_000 {
        ping(None, &mut bulk_posted, &mut bulk_done);
    }
    // Rounds of idle samples, then samples under a quarter of the bulk transfer (until
    // it is all posted and done): the machine's speed drifts, and each round's ratio
    // compares samples taken close together.
    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    let mut ratios = Vec::new();
    let mut bulk_time = Duration::ZERO;
    for round in 1..=ROUNDS {
        let mut i: Vec<Duration> = (0..IDLE_PINGS / ROUNDS as usize)
            .map(|_| ping(None, &mut bulk_posted, &mut bulk_done))
            .collect();
        let limit = total_wrs * round / ROUNDS;
        let start = Instant::now();
        let mut l = Vec::new();
        while bulk_done < limit {
            l.push(ping(Some(limit), &mut bulk_posted, &mut bulk_done));
        }
        bulk_time += start.elapsed();
        i.sort();
        l.sort();
        ratios.push(percentile(&l, 0.5).as_secs_f64() / percentile(&i, 0.5).as_secs_f64());
        idle.extend(i);
        loaded.extend(l);
    }
    let bulk_secs = bulk_time.as_secs_f64();
    let st = dev.stats();
    eprintln!(
        "client: {} frames in, {} of them from the high-priority queue; bulk sending \
         gave way {} times",
        st.frames_rx, st.frames_rx_high, st.low_yields
    );
    stop.store(true, Ordering::Relaxed);
    srv.join().unwrap();
    idle.sort();
    loaded.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "urgent 32 B write latency (RTT/2), idle: p50 {:.2} us, p99 {:.2}, p99.9 {:.2} ({} samples)",
        us(percentile(&idle, 0.5)),
        us(percentile(&idle, 0.99)),
        us(percentile(&idle, 0.999)),
        idle.len()
    );
    println!(
        "during a {gib} GiB low-priority transfer ({:.0} MiB/s): p50 {:.2} us, p99 {:.2}, \
         p99.9 {:.2} ({} samples); p50 ratio {:.2} (target <= 2)",
        (gib << 10) as f64 / bulk_secs,
        us(percentile(&loaded, 0.5)),
        us(percentile(&loaded, 0.99)),
        us(percentile(&loaded, 0.999)),
        loaded.len(),
        us(percentile(&loaded, 0.5)) / us(percentile(&idle, 0.5))
    );
    let per_round: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    ratios.sort_by(f64::total_cmp);
    println!(
        "p50 ratio per idle/loaded round: {}; median {:.2}",
        per_round.join(" "),
        (ratios[ratios.len() / 2 - 1] + ratios[ratios.len() / 2]) / 2.0
    );
}
