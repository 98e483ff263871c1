//! One exceptioned connection against the others' throughput, on a real in-process
//! ring pair: `cargo bench -p deposit --bench exceptioned`.
//!
//! Connections A and B go from the client into ONE server endpoint. A streams 4 KiB
//! writes; its delivered rate is measured (1) with B idle and (2) while B is
//! exceptioned — B's first write hit a page the server made not present, B's later
//! writes wait behind it and B's sender is throttled by the receiver-not-ready
//! back-off. Rounds alternate (1), (2), best of 5 each (the machine is shared and
//! noisy). Then the host repairs the page and resumes B: B's writes land once, in
//! order. Prints A's rates, their ratio (the target: at least 0.90), and how
//! many messages B's sender resent while it was held (the throttling).

use std::time::{Duration, Instant};

use deposit::{
    ConnState, Connection, Device, DeviceConfig, Progress, Rights, WcStatus, WorkRequest,
};

const LEN: usize = 64 << 20;
const SIZE: u32 = 4096;
/// Writes of A per measured round.
const N: u64 = 50_000;
const T: Duration = Duration::from_secs(30);
/// The page B's writes land in (made not present).
const PAGE: usize = 12_000; // beyond A's half of the endpoint

/// A's writes: `N` of `SIZE` bytes, 256 outstanding; returns writes per second.
fn stream(client: &Device, a: &Connection, cep_len: u64, cq: &deposit::CompletionQueue) -> f64 {
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < N {
        while posted < N && posted - done < 256 {
            let off = (posted * u64::from(SIZE)) % (cep_len / 2);
            let wr = WorkRequest::write(posted, a.endpoint(), off, SIZE, off as u32).signaled();
            a.post(&wr).unwrap();
            posted += 1;
        }
        client.progress();
        while let Some(c) = cq.poll_one() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            done += 1;
        }
        assert!(start.elapsed() < T, "A stalled at {done}");
    }
    N as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let server = Device::open(
        DeviceConfig::new("ring:excbench:b", [10, 0, 0, 1]).progress(Progress::Dedicated),
    )
    .expect("server device");
    let mut ccfg = DeviceConfig::new("ring:excbench:a", [10, 0, 0, 2]);
    ccfg.rnr_retry_count = 100_000; // B waits for the host as long as this runs
    let client = Device::open(ccfg).expect("client device");
    let sep = server
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = server.create_cq(64);
    let l = server.listen(9, &sep, &scq).unwrap();
    let cep = client
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let acq = client.create_cq(1 << 12);
    let bcq = client.create_cq(64);
    let a = client.connect([10, 0, 0, 1], 9, &cep, &acq).unwrap();
    let _sa = l.accept(T).unwrap();
    let b = client.connect([10, 0, 0, 1], 9, &cep, &bcq).unwrap();
    let sb = l.accept(T).unwrap();

    let mut alone = 0f64;
    let mut beside = 0f64;
    let mut b_frames = 0u64;
    let mut b_rnr = 0u64;
    let mut b_held = Duration::ZERO;
    for round in 0..5u64 {
        alone = alone.max(stream(&client, &a, LEN as u64, &acq));
        // B: a write into the missing page, then four that must wait behind it.
        sep.set_page_present(PAGE as u64, false).unwrap();
        let base = (PAGE * 4096) as u32;
        for k in 0..5u32 {
            let id = round * 10 + u64::from(k);
            let data = [(round * 10) as u8 + k as u8 + 1; 64];
            let wr = WorkRequest::write_inline(id, &data[..32], base + 64 * k)
                .unwrap()
                .signaled();
            b.post(&wr).unwrap();
        }
        let t0 = Instant::now();
        while sb.state() != ConnState::Exceptioned {
            client.progress();
            assert!(t0.elapsed() < T, "B never exceptioned");
        }
        let st0 = client.stats();
        let held_from = Instant::now();
        beside = beside.max(stream(&client, &a, LEN as u64, &acq));
        // B's resends while held (A loses nothing on a ring) and the receiver's
        // not-ready answers to them.
        let st = client.stats();
        b_frames = b_frames.max(st.retransmits - st0.retransmits);
        b_rnr = b_rnr.max(st.rnr_rx - st0.rnr_rx);
        b_held = b_held.max(held_from.elapsed());
        assert!(bcq.poll_one().is_none(), "B completed while held");
        // The host repairs and resumes: B's five writes land once, in order.
        sep.set_page_present(PAGE as u64, true).unwrap();
        sb.resume().unwrap();
        let t0 = Instant::now();
        let mut got = Vec::new();
        while got.len() < 5 {
            client.progress();
            if let Some(c) = bcq.poll_one() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                got.push(c.wr_id);
            }
            assert!(t0.elapsed() < T, "B did not finish after the resume");
        }
        let want: Vec<u64> = (0..5).map(|k| round * 10 + k).collect();
        assert_eq!(got, want, "B's writes completed in order");
        for k in 0..5usize {
            let mut v = [0u8; 32];
            sep.read((PAGE * 4096 + 64 * k) as u64, &mut v).unwrap();
            assert!(v.iter().all(|&x| x == (round * 10) as u8 + k as u8 + 1));
        }
    }
    println!(
        "A alone: {:.0} writes/s ({:.0} MiB/s); beside exceptioned B: {:.0} writes/s; \
         ratio {:.2} (target >= 0.90)",
        alone,
        alone * f64::from(SIZE) / f64::from(1 << 20),
        beside,
        beside / alone
    );
    println!(
        "B held for up to {b_held:?} per round: at most {b_frames} of its messages resent \
         and {b_rnr} not-ready answers meanwhile (the back-off); B resumed cleanly every round"
    );
}
