//! Instruction-pointer messages, isolation and payload tokens across two processes over
//! memif: this test process is the sender, `testnode ip-receiver` the receiver. The
//! receiver programs its instructions (or registers its tokens) and announces only the
//! values a sender may use — instruction pointers, tokens, its window size; the sender
//! names nothing else of the receiver's. The receiver checks its own memory, registers,
//! events and drop counters and says "verified CASE" (the in-process originals of these
//! cases are in `tests/instructions.rs`).

use deposit::*;
use deposit_tests::memif_peer::MemifPeer;
use deposit_tests::seed_priority::{HIGH, JOBS};

/// `testnode ip-receiver SOCKET CASE`, connected (the receiver's service 18).
fn start(case: &str) -> MemifPeer {
    MemifPeer::start(env!("CARGO_BIN_EXE_testnode"), "ip-receiver", &[case], 18)
}

/// Asks the receiver to check everything and waits for its verdict.
fn verify(mut p: MemifPeer, case: &str) {
    p.say("verify");
    p.finish(&format!("verified {case}"));
}

fn ip(p: &MemifPeer, name: &str) -> InstrPtr {
    InstrPtr(p.announced(name).parse().expect("an instruction pointer"))
}

fn token(p: &MemifPeer, name: &str) -> Token {
    Token(p.announced(name).parse().expect("a token"))
}

fn invoke(id: u64, ip: InstrPtr, operand: u32, data: &[u8]) -> WorkRequest {
    WorkRequest::invoke(id, ip, operand, data).expect("inline data")
}

#[test]
fn priority_queue_through_instruction_pointers_with_isolation_across_processes() {
    let p = start("priority");
    let (hi, lo) = (ip(&p, "high"), ip(&p, "low"));
    // The sender supplies an entry point, its priority and the job; the receiver's
    // queues, pointers and level stay out of its reach.
    let reqs: Vec<_> = (1..)
        .zip(&JOBS)
        .map(|(id, j)| invoke(id, if j.high { hi } else { lo }, j.prio, j.data))
        .collect();
    p.run(&reqs, WcStatus::Success);
    // Isolation: a direct write naming the high queue's pointer register is refused
    // (the receiver counts it and finds nothing of it), and the connection goes on.
    let direct = WorkRequest::write_inline(5, b"sneaky", 0)
        .unwrap()
        .post_increment(HIGH);
    p.run_one(direct, WcStatus::RemoteAccessError);
    p.run_one(invoke(6, lo, 1, b"job-e low 1"), WcStatus::Success);
    verify(p, "priority");
}

#[test]
fn non_entry_out_of_window_and_overlong_instruction_pointers_are_refused_across_processes() {
    let p = start("refusals");
    let entry = ip(&p, "entry");
    let window: u32 = p.announced("window").parse().unwrap();
    p.run_one(invoke(1, entry, 5, b"first"), WcStatus::Success);
    // The second step of the entry chain: not an entry point.
    p.run_one(
        invoke(2, ip(&p, "inner"), 1, b"inner"),
        WcStatus::RemoteAccessError,
    );
    // Just past the window, and far past it.
    p.run(
        &[
            invoke(3, InstrPtr(window), 1, b"past"),
            invoke(4, InstrPtr(u32::MAX >> 1), 1, b"far"),
        ],
        WcStatus::RemoteAccessError,
    );
    // A chain longer than the sequencer runs, and one running off the window's end.
    p.run_one(
        invoke(5, ip(&p, "long"), 1, b"long"),
        WcStatus::RemoteOperationError,
    );
    p.run_one(
        invoke(6, ip(&p, "off-end"), 1, b"end"),
        WcStatus::RemoteAccessError,
    );
    // The global instruction runs on the register the sender names, in its window and
    // under its protection: r3 may be written, r0 may not, r9 is outside the window.
    let global = ip(&p, "global");
    let named = |id, r: u8| invoke(id, global, 9, &[]).registers([0, r, 0, 0]);
    p.run_one(named(10, 3), WcStatus::Success);
    p.run(&[named(11, 0), named(12, 9)], WcStatus::RemoteAccessError);
    // None of it ran: the entry chain appends right after the first run.
    p.run_one(invoke(7, entry, 7, b"second"), WcStatus::Success);
    verify(p, "refusals");
}

#[test]
fn payload_tokens_are_keyed_single_use_and_revocable_across_processes() {
    let mut p = start("tokens");
    let (single, revocable) = (token(&p, "single"), token(&p, "revocable"));
    let deposit = |id, t, data: &[u8]| WorkRequest::write_inline_with_token(id, t, data).unwrap();
    // A forged key: refused (the receiver gets the control part with length 0) and the
    // entry stays for the rightful holder.
    let forged = Token::new(single.index(), single.key() ^ 0x5a5a);
    p.run_one(deposit(1, forged, b"forged"), WcStatus::RemoteAccessError);
    p.run_one(deposit(2, single, b"payload"), WcStatus::Success);
    p.run_one(deposit(3, single, b"again!!"), WcStatus::RemoteAccessError);
    // The receiver revokes a token this side already holds.
    p.say("cancel");
    p.expect_line("cancelled");
    p.run_one(deposit(4, revocable, b"late"), WcStatus::RemoteAccessError);
    verify(p, "tokens");
}
