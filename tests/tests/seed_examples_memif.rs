//! The seed's worked examples 1 (strided deposit), 2 (priority queueing) and 4
//! (atomics) across two processes over memif: this test process sends, `testnode
//! seed-receiver` receives, sets up and protects its registers, verifies memory,
//! registers and events, and exits 0 / 1.

use deposit::*;
use deposit_tests::fill_pattern;
use deposit_tests::memif_peer::MemifPeer;
use deposit_tests::seed_priority::{enqueue, JOBS};

/// `testnode seed-receiver SOCKET EXAMPLE`, connected (service 17).
fn start(example: &str) -> MemifPeer {
    MemifPeer::start(
        env!("CARGO_BIN_EXE_testnode"),
        "seed-receiver",
        &[example],
        17,
    )
}

#[test]
fn strided_deposit_across_processes() {
    let p = start("stride");
    // r0: pointer (indirect only), r1: stride 16, changed to 40 by the receiver.
    let batch = |ids: std::ops::RangeInclusive<u8>| -> Vec<WorkRequest> {
        ids.map(|k| WorkRequest::send_inline(u64::from(k), &[k; 8], 0).unwrap())
            .collect()
    };
    p.run(&batch(1..=3), WcStatus::Success);
    p.expect_line("stride 40");
    p.run(&batch(4..=5), WcStatus::Success);
    // The operand carries each message's stride: `indirect(r2) + op1(Add, r2, operand)`.
    let reqs: Vec<_> = [24u32, 8, 56, 4]
        .into_iter()
        .enumerate()
        .map(|(k, stride)| {
            WorkRequest::write_inline(10 + k as u64, &[0xA0 + k as u8; 4], 0)
                .unwrap()
                .indirect(2)
                .operand(stride)
                .op1(RegOp::Add, 2, Src::Operand)
        })
        .collect();
    p.run(&reqs, WcStatus::Success);
    p.finish("verified stride");
}

#[test]
fn priority_queueing_across_processes() {
    let p = start("priority");
    let reqs: Vec<_> = (1..).zip(&JOBS).map(|(id, j)| j.request(id)).collect();
    p.run(&reqs, WcStatus::Success);
    p.finish("verified priority");
}

#[test]
fn atomics_across_processes() {
    let p = start("atomic");
    let ep = &p.ep;
    let fai: Vec<_> = (0..5u64)
        .map(|i| WorkRequest::fetch_add(i, ep, 8 * i, 512, 1))
        .collect();
    p.run(&fai, WcStatus::Success);
    let regs: Vec<_> = (0..3u64)
        .map(|i| WorkRequest::fetch_add(10 + i, ep, 64 + 8 * i, 0, 1).on_register(0))
        .collect();
    p.run(&regs, WcStatus::Success);
    p.run(
        &[
            WorkRequest::cmp_swap(20, ep, 128, 520, 5, 9),
            WorkRequest::cmp_swap(21, ep, 136, 520, 5, 11),
            WorkRequest::cmp_swap(22, ep, 144, 0, 42, 43).on_register(1),
            WorkRequest::cmp_swap(23, ep, 152, 0, 42, 44).on_register(1),
        ],
        WcStatus::Success,
    );
    // The receiver's register 2 is indirect-only: no reading, no changing.
    p.run(
        &[
            WorkRequest::fetch_add(30, ep, 192, 0, 0).on_register(2),
            WorkRequest::reg_op(31)
                .operand(0)
                .op1(RegOp::Set, 2, Src::Operand),
        ],
        WcStatus::RemoteAccessError,
    );
    let got = |off: usize| ep.load_u64(off as u64).unwrap();
    assert_eq!(
        (0..5).map(|i| got(8 * i)).collect::<Vec<_>>(),
        [100, 101, 102, 103, 104]
    );
    assert_eq!(
        (0..3).map(|i| got(64 + 8 * i)).collect::<Vec<_>>(),
        [7, 8, 9]
    );
    assert_eq!(
        (0..4).map(|i| got(128 + 8 * i)).collect::<Vec<_>>(),
        [5, 9, 42, 43]
    );
    assert_eq!(got(192), 0, "nothing came back from the refused read");
    p.finish("verified atomic");
}

#[test]
fn queue_bit_vector_with_interrupts_blocked_by_the_top_bit_across_processes() {
    let p = start("bitvec");
    const LEVEL: u8 = 10;
    // Append 16 bytes to queue q with priority bit q (the seed's priority enqueue).
    let append = |id: u64, q: u8| enqueue(id, &[0x10 + id as u8; 16], 2 * q, LEVEL, 1 << q);
    let blocked: Vec<_> = [(0, 2), (1, 0), (2, 3), (3, 2), (4, 0)]
        .into_iter()
        .map(|(id, q)| append(id, q))
        .collect();
    p.run(&blocked, WcStatus::Success);
    p.expect_line("unblocked");
    p.run(
        &[append(5, 1), append(6, 4), append(7, 3)],
        WcStatus::Success,
    );
    p.finish("verified bitvec");
}

#[test]
fn multi_message_writes_in_every_mode_across_processes_over_a_lossy_link() {
    let p = start("segments");
    let ep = &p.ep;
    assert!(
        p.dev.segment_max() < 20_000,
        "each write takes several messages"
    );
    fill_pattern(ep, 0, 20_000, 5, 0);
    let write = |id| WorkRequest::write(id, ep, 0, 20_000, 0);
    p.run(
        &[
            write(1).post_increment(0),
            write(2).post_increment(0),
            write(3).indirect(2),
            write(4).indexed(3, 500),
        ],
        WcStatus::Success,
    );
    p.finish("verified segments");
}
