//! Work requests longer than one message, in every address mode, on a ring pair,
//! clean and over a lossy link: the receiver generates the address once per work
//! request (a post-increment moves its register once), places every later segment
//! relative to it, exactly once, and `Success` means every byte is where it should be.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);
/// Bytes of the server's endpoint.
const LEN: usize = 1 << 20;
/// Where register r0 points at the start.
const BASE: u64 = 4096;
/// The stride register r1 of the post-increment mode.
const STRIDE: u64 = 64 * 1024;

/// How a test addresses the server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Direct,
    Indirect,
    Indexed,
    PostIncrement,
}

const MODES: [Mode; 4] = [
    Mode::Direct,
    Mode::Indirect,
    Mode::Indexed,
    Mode::PostIncrement,
];

struct Fixture {
    pair: RingPair,
    c: Conns,
    regs: RegWindow,
}

fn fixture(name: &str) -> Fixture {
    let pair = RingPair::new(name);
    let regs = pair.server.alloc_registers(4).unwrap();
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        ..ConnOptions::default()
    };
    let (c, _scq) = pair.connect_with(LEN, 21, Rights::REMOTE_WRITE, &opts);
    // r0: the queue pointer, which the sender may only use as an address; r1: the
    // stride, which the sender may not touch at all.
    for (i, v, p) in [(0, BASE, RegProt::INDIRECT), (1, STRIDE, RegProt::NONE)] {
        pair.server.write_register(regs, i, v).unwrap();
        pair.server.set_register_protection(regs, i, p).unwrap();
    }
    Fixture { pair, c, regs }
}

/// Sizes of the requests: one message, exactly two, a few (a middle segment can be
/// lost while a later one arrives), and ragged ends; twice.
fn sizes(seg: usize) -> Vec<usize> {
    let once = [20_000, seg, seg + 1, 2 * seg, 3 * seg - 7, 33, 5 * seg + 3];
    once.iter().chain(&once).copied().collect()
}

/// Posts one write per size in `mode` (the client's data at offset 0 of its endpoint,
/// a fresh pattern per request), waits for every completion and returns the server
/// memory image and r0 the test expects.
fn run(f: &Fixture, mode: Mode, sizes: &[usize]) -> (Vec<u8>, u64) {
    let mut img = vec![0u8; LEN];
    let mut r0 = BASE;
    let arrived = f.c.server.arrivals();
    let mut direct_at = 200_000usize;
    for (i, &n) in sizes.iter().enumerate() {
        let seed = 0x5e6 + i as u64;
        // Each request's data sits at its own client offset (posted requests read their
        // source when sent).
        let src = i * 64 * 1024;
        fill_pattern(&f.c.cep, src, n, seed, 0);
        let wr = WorkRequest::write(i as u64, &f.c.cep, src as u64, n as u32, 0);
        let (wr, at) = match mode {
            Mode::Direct => {
                let at = direct_at;
                direct_at += n + 64;
                (wr.operand(at as u32), at)
            }
            Mode::Indirect => (wr.indirect(0), BASE as usize),
            Mode::Indexed => (wr.indexed(0, 500), BASE as usize + 500),
            Mode::PostIncrement => {
                let at = r0 as usize;
                r0 += STRIDE;
                (wr.post_increment(0), at)
            }
        };
        for (k, b) in img[at..at + n].iter_mut().enumerate() {
            *b = pattern(seed, k as u64);
        }
        f.c.client.post(&wr.signaled()).unwrap();
    }
    let wcs = wait_completions(&f.c.ccq, sizes.len(), T);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status),
            (i as u64, WcStatus::Success),
            "{mode:?}: {wc:?}"
        );
        assert_eq!(wc.byte_len as usize, sizes[i]);
    }
    let n = arrived + sizes.len() as u64;
    assert!(
        wait_until(&f.pair.client, T, || f.c.server.arrivals() == n),
        "{mode:?}: {} of {n} arrived",
        f.c.server.arrivals()
    );
    (img, r0)
}

fn check(f: &Fixture, mode: Mode, want: &[u8], r0: u64) {
    let got = memory_snapshot(&f.c.sep, LEN);
    if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
        panic!(
            "{mode:?}: byte {i} is {:#04x}, want {:#04x}",
            got[i], want[i]
        );
    }
    let reg = f.pair.server.read_register(f.regs, 0).unwrap();
    assert_eq!(reg, r0, "{mode:?}: r0 moves once per work request");
    assert_eq!(f.pair.server.read_register(f.regs, 1).unwrap(), STRIDE);
}

/// Clears the server endpoint and puts r0 back.
fn reset(f: &Fixture) {
    f.c.sep.write(0, &vec![0u8; LEN]).unwrap();
    f.pair.server.write_register(f.regs, 0, BASE).unwrap();
}

#[test]
fn multi_message_writes_generate_their_address_once_in_every_mode() {
    let f = fixture("seg_clean");
    let seg = f.pair.client.segment_max() as usize;
    assert!(seg < 20_000, "the test needs writes of several messages");
    for mode in MODES {
        reset(&f);
        let (img, r0) = run(&f, mode, &sizes(seg));
        check(&f, mode, &img, r0);
    }
    let st = f.pair.server.stats();
    assert_eq!(st.dropped_total(), 0, "{st:?}");
}

#[test]
fn multi_message_writes_land_exactly_once_under_loss_reordering_and_duplication() {
    let f = fixture("seg_lossy");
    let seg = f.pair.client.segment_max() as usize;
    let faults = |seed| {
        format!("loss=0.1,reorder=0.1,dup=0.1,seed={seed}")
            .parse::<FaultConfig>()
            .unwrap()
    };
    f.pair.server.set_faults(Some(faults(3)));
    f.pair.client.set_faults(Some(faults(4)));
    for mode in MODES {
        reset(&f);
        let (img, r0) = run(&f, mode, &sizes(seg));
        check(&f, mode, &img, r0);
    }
    let fs = f.pair.server.fault_stats();
    assert!(
        fs.dropped > 0 && fs.duplicated > 0 && fs.reordered > 0,
        "{fs:?}"
    );
    assert!(f.pair.client.stats().retransmits > 0);
}
