//! Waiting without spinning (issue 11, item 4): a completion-queue wait on a device
//! with a dedicated worker polls briefly, then sleeps until the worker queues the
//! completion, on real ring ports.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

/// CPU time of the calling thread (user + system), from /proc/thread-self/stat.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("thread stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10) // USER_HZ = 100
}

#[test]
fn a_completion_wait_on_a_dedicated_device_sleeps_until_the_completion_comes() {
    let pair = ring_pair_with(
        "waits",
        |_| {},
        |c| {
            c.rnr_retry_count = 100_000;
            c.progress = Progress::Dedicated;
        },
    );
    let sep = pair
        .server
        .alloc_endpoint(8192, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(3, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(8192, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(16);
    let c = pair.client.connect([10, 0, 0, 1], 3, &cep, &ccq).unwrap();
    let s = l.accept(T).unwrap();
    // The write finds its page missing: the server's host repairs it 400 ms later.
    sep.set_page_present(0, false).unwrap();
    c.post(&WorkRequest::write(1, &cep, 4096, 64, 0).signaled())
        .unwrap();
    let repair = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        sep.set_page_present(0, true).unwrap();
        let repaired = Instant::now();
        s.resume().expect("the write was kept for the host");
        repaired
    });
    let (t0, cpu0) = (Instant::now(), thread_cpu());
    let wc = ccq.wait_one(T).expect("completion");
    let (woke, cpu) = (Instant::now(), thread_cpu() - cpu0);
    let repaired = repair.join().unwrap();
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    let waited = woke - t0;
    assert!(waited >= Duration::from_millis(350), "waited {waited:?}");
    assert!(
        woke - repaired < Duration::from_millis(100),
        "woken {:?} after the repair",
        woke - repaired
    );
    // It spun for `idle::SPIN_FOR` (50 ms) at most, then slept.
    assert!(
        cpu < waited * 2 / 5,
        "the waiting thread used {cpu:?} of CPU in {waited:?}"
    );
}

#[test]
fn an_accept_on_a_dedicated_device_sleeps_until_a_peer_connects() {
    let pair = ring_pair_with("waits_accept", |_| {}, |_| {});
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(4, &sep, &scq).unwrap();
    let client = pair.client.clone();
    let dialer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
        let ccq = client.create_cq(16);
        let c = client.connect([10, 0, 0, 1], 4, &cep, &ccq).unwrap();
        (c, Instant::now())
    });
    let (t0, cpu0) = (Instant::now(), thread_cpu());
    let s = l.accept(T).expect("accepted");
    let (woke, cpu) = (Instant::now(), thread_cpu() - cpu0);
    let (c, connected) = dialer.join().unwrap();
    assert_eq!(s.remote_number(), c.local_number());
    let waited = woke - t0;
    assert!(waited >= Duration::from_millis(350), "waited {waited:?}");
    assert!(
        woke.saturating_duration_since(connected) < Duration::from_millis(100),
        "woken {:?} after the connection was up",
        woke.saturating_duration_since(connected)
    );
    assert!(
        cpu < waited * 2 / 5,
        "the accepting thread used {cpu:?} of CPU in {waited:?}"
    );
}
