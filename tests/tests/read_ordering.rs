//! A read returns what the receiver held when it ran, even when a later message of the
//! same connection writes over the range before the reply has gone out (or while it is
//! still being retransmitted) — in-order execution (docs/design.md §5). Found by the soak.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

fn read_then_overwrite(pair: &RingPair, c: &Conns, sizes: &[usize]) {
    let mut id = 0;
    for (round, &size) in sizes.iter().enumerate() {
        let (old_seed, new_seed) = (2 * round as u64 + 1, 2 * round as u64 + 2);
        // Old bytes at the receiver, new bytes at the sender (landing ranges apart).
        fill_pattern(&c.sep, 0, size, old_seed, 0);
        fill_pattern(&c.cep, 0, size, new_seed, 0);
        let (first, second) = (size, 2 * size);
        c.client
            .post(&WorkRequest::read(id, &c.cep, first as u64, size as u32, 0).signaled())
            .unwrap();
        c.client
            .post(&WorkRequest::write(id + 1, &c.cep, 0, size as u32, 0).signaled())
            .unwrap();
        c.client
            .post(&WorkRequest::read(id + 2, &c.cep, second as u64, size as u32, 0).signaled())
            .unwrap();
        for wc in wait_completions(&c.ccq, 3, T) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        id += 3;
        check_pattern(&c.cep, first, size, old_seed, 0)
            .unwrap_or_else(|e| panic!("read before the write ({size} B): {e}"));
        check_pattern(&c.cep, second, size, new_seed, 0)
            .unwrap_or_else(|e| panic!("read after the write ({size} B): {e}"));
        check_pattern(&c.sep, 0, size, new_seed, 0).unwrap();
    }
    assert!(pair.client.stats().msgs_rx > 0);
}

fn pair_and_conns(name: &str, faults: Option<&str>) -> (RingPair, Conns) {
    let f: Option<FaultConfig> = faults.map(|s| s.parse().unwrap());
    let pair = ring_pair_with(
        name,
        |c| {
            c.faults = f;
            c.retry_timeout = Duration::from_millis(2);
            c.retry_count = 12;
        },
        |c| {
            c.faults = f.map(|f| FaultConfig {
                seed: f.seed + 1,
                ..f
            });
            c.retry_timeout = Duration::from_millis(2);
            c.retry_count = 12;
        },
    );
    let sep = pair.server.alloc_endpoint(1 << 20, Rights::ALL).unwrap();
    let scq = pair.server.create_cq(64);
    let l = pair.server.listen(5, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(3 << 20, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(64);
    let client = pair.client.connect([10, 0, 0, 1], 5, &cep, &ccq).unwrap();
    let server = l.accept(T).unwrap();
    let c = Conns::from_parts(client, server, cep, sep, ccq, l);
    (pair, c)
}

const SIZES: &[usize] = &[8, 100, 4096, 20_000, 100_000, 1 << 20];

#[test]
fn a_read_does_not_see_a_later_write_of_its_connection() {
    let (pair, c) = pair_and_conns("rord1", None);
    read_then_overwrite(&pair, &c, SIZES);
}

#[test]
fn a_retransmitted_read_reply_does_not_see_a_later_write() {
    let (pair, c) = pair_and_conns("rord2", Some("loss=0.1,reorder=0.05,seed=3"));
    for _ in 0..5 {
        read_then_overwrite(&pair, &c, SIZES);
    }
}
