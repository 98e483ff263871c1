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
    // The floor under any of these: the operating system's own wake-up of a thread
    // asleep on a futex (a condition variable) on CPU #1 by one on CPU #0, after the
    // same gaps — what any worker that sleeps pays, whatever the transport.
    let (os50, os99, osmax) = os_wake(trials);
    println!(
        "{:>10} {:>7} {:>10.1} {:>10.1} {:>10.1}   <- OS baseline: a condvar wake-up, 1.2 s gaps",
        "futex", trials, os50, os99, osmax
    );
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

/// The OS baseline: a thread pinned to CPU #1 sleeps on a condition variable; after a
/// 1.2 s gap this thread (CPU #0) sets the flag and signals, and spins until the sleeper
/// acknowledges. Returns (p50, p99, max) in microseconds.
fn os_wake(trials: usize) -> (f64, f64, f64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    let shared = Arc::new((Mutex::new(0u64), Condvar::new(), AtomicU64::new(0)));
    let s2 = shared.clone();
    let sleeper = std::thread::spawn(move || {
        let _ = deposit_transport::port::pin_current_thread_to_nth_cpu(1);
        let (lock, cond, seen) = &*s2;
        let mut want = 1;
        loop {
            let mut g = lock.lock().unwrap();
            while *g < want {
                g = cond.wait(g).unwrap();
            }
            let v = *g;
            drop(g);
            seen.store(v, Ordering::Release);
            if v == u64::MAX {
                return;
            }
            want = v + 1;
        }
    });
    let (lock, cond, seen) = &*shared;
    let mut us = Vec::with_capacity(trials);
    for k in 1..=trials as u64 {
        std::thread::sleep(Duration::from_millis(1200));
        let t0 = Instant::now();
        *lock.lock().unwrap() = k;
        cond.notify_one();
        while seen.load(Ordering::Acquire) != k {
            std::hint::spin_loop();
        }
        us.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    *lock.lock().unwrap() = u64::MAX;
    cond.notify_one();
    sleeper.join().unwrap();
    let p50 = percentile(&mut us, 0.5);
    let p99 = percentile(&mut us, 0.99);
    (p50, p99, percentile(&mut us, 1.0))
}
