//! How fast an idle device answers, and what idling costs:
//! `cargo bench -p deposit --bench wake [-- TRIALS]`.
//!
//! A server device with a dedicated worker and an inline client, on an in-process ring
//! pair. After an idle gap (nothing on the link, the server's worker left alone), the
//! client posts one signaled 32 B write and waits for its completion: the time from
//! post to completion, for gaps from 1 ms to past `idle::LONG_QUIET` (the server's
//! worker then naps longest). Then the process's CPU use from 2 to 5 s after the last
//! frame. Issue 11's goals: an idle device under 5 % of a core, and a first write after
//! 1 s of idle answered within 50 us at p99.

use std::time::{Duration, Instant};

use deposit::{Device, DeviceConfig, Progress, Rights, WcStatus, WorkRequest};

const T: Duration = Duration::from_secs(10);

/// CPU time this process used so far (user + system), from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // USER_HZ: 100 on Linux for every supported architecture.
    Duration::from_millis(ticks * 10)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let trials: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(8);
    // As DPDK applications place lcores: the worker on a CPU of its own, the
    // application on another (unpinned, a wake lands on the CPU the waker spins on
    // and waits for a scheduler tick: milliseconds on this project's VM).
    let mut scfg = DeviceConfig::new("ring:wake:b", [10, 0, 0, 1]).progress(Progress::Dedicated);
    scfg.worker_cpu = Some(1);
    let server = Device::open(scfg).expect("server device");
    let client = Device::open(DeviceConfig::new("ring:wake:a", [10, 0, 0, 2])).expect("client");
    let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let scq = server.create_cq(16);
    let l = server.listen(5, &sep, &scq).unwrap();
    if deposit_transport::port::pin_current_thread_to_nth_cpu(0).is_none() {
        eprintln!("wake: cannot pin the client to CPU #0 (one CPU?): it runs unpinned");
    }
    let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let cq = client.create_cq(16);
    let c = client.connect([10, 0, 0, 1], 5, &cep, &cq).unwrap();
    let _s = l.accept(T).unwrap();
    let wr = WorkRequest::write(1, &cep, 0, 32, 0).signaled();

    println!(
        "first write after an idle gap (server: dedicated worker on CPU #1, ring doorbell; \
         client: inline on CPU #0)"
    );
    println!(
        "{:>10} {:>7} {:>10} {:>10} {:>10}",
        "gap", "trials", "p50 us", "p99 us", "max us"
    );
    for (gap, n) in [
        (Duration::from_millis(1), trials * 8),
        (Duration::from_millis(100), trials * 2),
        (Duration::from_millis(1200), trials),
    ] {
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            std::thread::sleep(gap);
            let t0 = Instant::now();
            c.post(&wr).unwrap();
            let wc = cq.wait_one(T).expect("completion");
            us.push(t0.elapsed().as_secs_f64() * 1e6);
            assert_eq!(wc.status, WcStatus::Success);
        }
        println!(
            "{:>10?} {:>7} {:>10.1} {:>10.1} {:>10.1}",
            gap,
            n,
            percentile(&mut us, 0.5),
            percentile(&mut us, 0.99),
            percentile(&mut us, 1.0)
        );
    }
    // A quiet first (the worker naps short for `idle::LONG_QUIET`), then 3 s measured.
    std::thread::sleep(Duration::from_secs(2));
    let (t0, c0) = (Instant::now(), cpu_time());
    std::thread::sleep(Duration::from_secs(3));
    let used = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    println!(
        "idle, 2 to 5 s after the last frame: {:.1} % of a core",
        used * 100.0
    );
}
