//! Control calls as commands (issue 11, item 2): with a dedicated worker, its thread
//! owns the worker and every control call (registers, endpoints, statistics, ...)
//! travels to it as a command with a typed reply — answered while it streams, each
//! caller getting its own reply, and still answered after the thread stopped.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

#[test]
fn control_calls_reach_a_dedicated_worker_while_it_streams() {
    let pair = ring_pair_with("ctl_stream", |_| {}, |c| c.progress = Progress::Dedicated);
    let sep = pair
        .server
        .alloc_endpoint(1 << 16, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(64);
    let l = pair.server.listen(3, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(1 << 16, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(4096);
    let c = pair.client.connect([10, 0, 0, 1], 3, &cep, &ccq).unwrap();
    let _s = l.accept(T).unwrap();
    let regs = pair.client.alloc_registers(4).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let written = std::thread::scope(|sc| {
        let streamer = sc.spawn(|| {
            let wr = WorkRequest::write(1, &cep, 0, 32, 0).signaled();
            let mut wcs = vec![Completion::EMPTY; 64];
            let (mut posted, mut done) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                while posted - done < 256 && c.post(&wr).is_ok() {
                    posted += 1;
                }
                let n = ccq.poll(&mut wcs);
                for wc in &wcs[..n] {
                    assert_eq!(wc.status, WcStatus::Success);
                }
                done += n as u64;
            }
            while done < posted {
                done += ccq.wait_one(T).map(|_| 1).expect("completion");
            }
            done
        });
        let t0 = Instant::now();
        for i in 0..2000u64 {
            pair.client.write_register(regs, (i % 4) as u32, i).unwrap();
            assert_eq!(pair.client.read_register(regs, (i % 4) as u32).unwrap(), i);
        }
        let took = t0.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let written = streamer.join().unwrap();
        assert!(took < T, "4000 control calls took {took:?}");
        written
    });
    assert!(written > 0);
    let st = pair.client.stats();
    assert!(st.msgs_tx >= written, "{st:?}");
}

#[test]
fn each_caller_gets_its_own_reply() {
    let pair = ring_pair_with("ctl_threads", |_| {}, |c| c.progress = Progress::Dedicated);
    let regs = pair.client.alloc_registers(8).unwrap();
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let dev = &pair.client;
            sc.spawn(move || {
                for i in 0..500u64 {
                    let v = (u64::from(t) << 32) | i;
                    dev.write_register(regs, 2 * t, v).unwrap();
                    dev.write_register(regs, 2 * t + 1, !v).unwrap();
                    assert_eq!(dev.read_register(regs, 2 * t).unwrap(), v);
                    assert_eq!(dev.read_register(regs, 2 * t + 1).unwrap(), !v);
                }
            });
        }
    });
    // Typed errors come back too.
    assert!(matches!(
        pair.client.read_register(regs, 8),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn control_calls_are_answered_after_the_worker_thread_stopped() {
    let pair = ring_pair_with("ctl_stopped", |_| {}, |c| c.progress = Progress::Dedicated);
    let ep = pair
        .client
        .alloc_endpoint(8192, Rights::REMOTE_WRITE)
        .unwrap();
    let regs = pair.client.alloc_registers(2).unwrap();
    pair.client.shutdown_for_test();
    // The worker was left with the device: calls run on it in the caller's thread.
    pair.client.write_register(regs, 1, 77).unwrap();
    assert_eq!(pair.client.read_register(regs, 1).unwrap(), 77);
    ep.set_page_rights(1, Rights::NONE).unwrap();
    let _ = pair.client.stats();
    drop(ep);
}
