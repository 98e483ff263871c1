//! Delivery under injected faults on ring (both nodes in one process, faults applied to
//! what each node receives).

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(60);

fn lossy_pair(name: &str, spec: &str) -> RingPair {
    let f: FaultConfig = spec.parse().unwrap();
    ring_pair_with(
        name,
        |c| {
            c.faults = Some(f);
            c.retry_timeout = Duration::from_millis(2);
            c.retry_count = 12;
        },
        |c| {
            c.faults = Some(FaultConfig {
                seed: f.seed + 1,
                ..f
            });
            c.retry_timeout = Duration::from_millis(2);
            c.retry_count = 12;
        },
    )
}

#[test]
fn writes_land_byte_exact_through_loss_duplication_reordering_and_corruption() {
    let pair = lossy_pair(
        "flt1",
        "loss=0.05,dup=0.02,reorder=0.02,corrupt=0.001,seed=11",
    );
    let (layout, len) = sweep_layout();
    let c = pair.connect(len, 7);
    let seed = 0xfa;
    for wc in c.write_layout(&pair.client, &layout, seed, T) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    for &(off, size) in &layout {
        check_pattern(&c.sep, off, size, seed, off as u64).unwrap();
    }
    let fs = pair.server.fault_stats();
    assert!(
        fs.dropped > 0 && fs.duplicated > 0 && fs.reordered > 0,
        "{fs:?}"
    );
    assert!(pair.client.stats().retransmits > 0);
}

#[test]
fn fetch_and_add_runs_exactly_once_under_loss() {
    let pair = lossy_pair("flt2", "loss=0.05,dup=0.05,reorder=0.02,seed=5");
    let sep = pair.server.alloc_endpoint(4096, Rights::ALL).unwrap();
    let scq = pair.server.create_cq(64);
    let l = pair.server.listen(3, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(65536, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(8192);
    let conn = pair.client.connect([10, 0, 0, 1], 3, &cep, &ccq).unwrap();
    let _s = l.accept(T).unwrap();
    let n = 2000u64;
    for i in 0..n {
        conn.post(&WorkRequest::fetch_add(i, &cep, 8 * (i % 8192), 0, 1).signaled())
            .unwrap();
    }
    let wcs = wait_completions(&ccq, n as usize, T);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        sep.load_u64(0).unwrap(),
        n,
        "every add applied exactly once"
    );
    // Every old value 0..n came back exactly once.
    let mut olds: Vec<u64> = (0..n).map(|i| cep.load_u64(8 * i).unwrap()).collect();
    olds.sort_unstable();
    assert_eq!(olds, (0..n).collect::<Vec<_>>());
}

#[test]
fn segments_of_large_writes_are_placed_on_arrival_ahead_of_a_gap() {
    // PCI-DDC's out-of-order placement: under loss, later segments of a large write
    // that arrive ahead of a missing earlier segment of the same request are written
    // at once (no copy kept); everything still lands byte-exact, and a segment that
    // follows another request's loss is kept and run in order as before.
    let pair = lossy_pair("flt_place", "loss=0.05,reorder=0.02,seed=23");
    const MIB: usize = 1 << 20;
    let c = pair.connect(16 * MIB, 8);
    let seed = 0x5e;
    let layout: Vec<_> = (0..16).map(|i| (i * MIB, MIB)).collect();
    for wc in c.write_layout(&pair.client, &layout, seed, T) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    check_pattern(&c.sep, 0, 16 * MIB, seed, 0).unwrap();
    let st = pair.server.stats();
    assert!(st.placed_ahead > 0, "nothing placed ahead of a gap: {st:?}");
    assert!(st.placed_ahead <= st.reordered);
    eprintln!(
        "kept ahead of a gap: {} messages, {} of them placed on arrival",
        st.reordered, st.placed_ahead
    );
}
