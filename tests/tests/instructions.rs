//! Instruction-pointer messages, isolation and payload tokens on a ring pair (issue 5).

use std::time::Duration;

use deposit::*;
use deposit_tests::programs::{add_operand, priority_enqueue as enqueue};
use deposit_tests::seed_priority::{
    landed, pointers_after, Job, FINAL_LEVEL, HIGH, HIGH_BASE, INTERRUPTS, JOBS, LEVEL, LOW,
    LOW_BASE, SLOT,
};
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

/// A ring pair whose server side gives the client registers and `code`, an
/// instruction window of 16 slots.
struct Fixture {
    base: RegFixture,
    code: InstrWindow,
}

impl std::ops::Deref for Fixture {
    type Target = RegFixture;
    fn deref(&self) -> &RegFixture {
        &self.base
    }
}

/// `nregs` registers and an instruction window, the connection isolated or not.
fn fixture(name: &str, nregs: u32, isolated: bool) -> Fixture {
    let mut code = None;
    let base = RegFixture::new(
        name,
        nregs,
        Rights::REMOTE_WRITE | Rights::REMOTE_ATOMIC,
        |pair, opts| {
            code = Some(pair.server.alloc_instructions(16).unwrap());
            opts.instructions = code;
            opts.isolated = isolated;
        },
    );
    Fixture {
        base,
        code: code.expect("allocated"),
    }
}

#[test]
fn priority_queue_through_instruction_pointers_with_isolation() {
    let f = fixture("ip_prio", 8, true);
    // The seed's queue pointers and sizes and its level (see `seed_priority`). None of
    // them is usable by the sender at all: the instructions name them.
    f.set(HIGH.into(), HIGH_BASE, RegProt::NONE);
    f.set((HIGH + 1).into(), SLOT, RegProt::NONE);
    f.set(LOW.into(), LOW_BASE, RegProt::NONE);
    f.set((LOW + 1).into(), SLOT, RegProt::NONE);
    f.set(LEVEL.into(), 0, RegProt::NONE);
    let hi = f
        .pair
        .server
        .program(f.code, 0, &[enqueue(HIGH, LEVEL)])
        .unwrap();
    let lo = f
        .pair
        .server
        .program(f.code, 1, &[enqueue(LOW, LEVEL)])
        .unwrap();
    let ip = |j: &Job| if j.high { hi } else { lo };
    let reqs: Vec<_> = JOBS
        .iter()
        .enumerate()
        .map(|(i, j)| WorkRequest::invoke(i as u64, ip(j), j.prio, j.data).unwrap())
        .collect();
    f.run(&reqs, WcStatus::Success);
    let ev = f.events();
    assert_eq!(ev.len(), INTERRUPTS.len(), "{ev:?}");
    for (e, (prio, ea, _)) in ev.iter().zip(INTERRUPTS) {
        assert_eq!((e.operand, e.ea), (prio, ea));
    }
    assert_eq!(f.reg(LEVEL.into()), FINAL_LEVEL);
    assert_eq!((f.reg(HIGH.into()), f.reg(LOW.into())), pointers_after(0));
    let mem = f.mem();
    for (at, data) in landed() {
        let at = at as usize;
        assert_eq!(&mem[at..at + data.len()], data);
    }

    // Isolation: naming the queue register directly is refused, counted, nothing
    // written, and the connection goes on.
    let before = f.mem();
    let direct = WorkRequest::write_inline(9, b"sneaky", 0)
        .unwrap()
        .post_increment(HIGH);
    f.run(&[direct], WcStatus::RemoteAccessError);
    let plain = WorkRequest::write_inline(10, b"plain", 100).unwrap();
    f.run(&[plain], WcStatus::RemoteAccessError);
    assert_eq!(f.drops(DropReason::Isolated), 2);
    assert!(f.mem() == before);
    assert_eq!(f.reg(HIGH.into()), pointers_after(0).0);
    f.run(
        &[WorkRequest::invoke(11, lo, 1, b"job-e").unwrap()],
        WcStatus::Success,
    );
    let at = pointers_after(0).1 as usize;
    assert_eq!(&f.mem()[at..at + 5], b"job-e");
}

#[test]
fn entry_points_window_bounds_and_sequencer_bounds_are_enforced() {
    let f = fixture("ip_refuse", 8, false);
    f.set(0, 0, RegProt::NONE);
    let bump = add_operand(0);
    // Slot 3: an entry point; slot 4: reachable only through the sequencer.
    let ip = f.pair.server.program(f.code, 3, &[bump, bump]).unwrap();
    f.run(
        &[WorkRequest::invoke(1, ip, 5, &[]).unwrap()],
        WcStatus::Success,
    );
    assert_eq!(f.reg(0), 10, "both steps ran");
    let before = f.mem();
    // Not an entry point.
    f.run(
        &[WorkRequest::invoke(2, InstrPtr(4), 1, &[]).unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(f.drops(DropReason::NotEntryPoint), 1);
    // Outside the window of 16.
    f.run(
        &[WorkRequest::invoke(3, InstrPtr(16), 1, &[]).unwrap()],
        WcStatus::RemoteAccessError,
    );
    f.run(
        &[WorkRequest::invoke(4, InstrPtr(u32::MAX >> 1), 1, &[]).unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(f.drops(DropReason::InstructionWindow), 2);
    // A chain longer than the sequencer runs (built slot by slot: `program` refuses
    // one), and one running off the end of the window.
    assert!(f.pair.server.program(f.code, 0, &[bump; 9]).is_err());
    for s in 6..16 {
        f.pair
            .server
            .program_slot(f.code, s, Some(bump.then()))
            .unwrap();
    }
    let long = bump.entry().then();
    f.pair.server.program_slot(f.code, 6, Some(long)).unwrap();
    f.run(
        &[WorkRequest::invoke(5, InstrPtr(6), 1, &[]).unwrap()],
        WcStatus::RemoteOperationError,
    );
    assert_eq!(f.drops(DropReason::SequenceBounds), 1);
    f.pair.server.program_slot(f.code, 12, Some(long)).unwrap();
    f.run(
        &[WorkRequest::invoke(6, InstrPtr(12), 1, &[]).unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(f.drops(DropReason::InstructionWindow), 3);
    // Nothing of the refused chains ran.
    assert_eq!(f.reg(0), 10);
    assert!(f.mem() == before);
}

#[test]
fn a_chain_is_atomic_a_trap_in_a_later_step_undoes_nothing_visible() {
    let f = fixture("ip_atomic", 8, false);
    f.set(0, 100, RegProt::NONE); // a pointer
    f.set(1, 0, RegProt::NONE); // a counter
    let write = Instruction::write(0).indirect(0);
    let count = add_operand(1);
    let ip = f.pair.server.program(f.code, 0, &[write, count]).unwrap();
    f.run(
        &[WorkRequest::invoke(1, ip, 3, b"hello").unwrap()],
        WcStatus::Success,
    );
    assert_eq!(&f.mem()[100..105], b"hello");
    assert_eq!(f.reg(1), 3);
    // The second step now fails (its register leaves the window): the first step's
    // write must not appear either.
    let bad = Instruction::reg_op().op1(RegOp::Add, 100, Src::Operand);
    f.pair.server.program_slot(f.code, 1, Some(bad)).unwrap();
    f.run(
        &[WorkRequest::invoke(2, ip, 3, b"WORLD").unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(&f.mem()[100..105], b"hello");
    assert_eq!(f.reg(1), 3);
}

#[test]
fn global_instructions_take_only_sender_operands() {
    let f = fixture("ip_global", 4, false);
    f.set(1, 7, RegProt::READ | RegProt::WRITE);
    let add = Instruction::reg_op().op1(RegOp::Add, 0, Src::Operand);
    // Refused locally: a global instruction naming its own register.
    assert!(f.pair.server.program_global(0, &[add]).is_err());
    let ip = f
        .pair
        .server
        .program_global(0, &[add.from_message(Operands::ALL)])
        .unwrap();
    assert!(ip.is_global());
    // The sender names register 1 of its own window: allowed by protection.
    let mut wr = WorkRequest::invoke(1, ip, 5, &[]).unwrap();
    wr = wr.registers([0, 1, 0, 0]);
    f.run(&[wr], WcStatus::Success);
    assert_eq!(f.reg(1), 12);
    // A name outside its window is refused: the instruction cannot reach other state.
    let wr = WorkRequest::invoke(2, ip, 5, &[])
        .unwrap()
        .registers([0, 9, 0, 0]);
    f.run(&[wr], WcStatus::RemoteAccessError);
    assert_eq!(f.drops(DropReason::BadRegister), 1);
    assert_eq!(f.reg(1), 12);
}

#[test]
fn payload_tokens_are_single_use_keyed_and_cancellable() {
    let f = fixture("tokens", 1, false);
    let tok = f.pair.server.create_token(&f.c.sep, 4096, 64).unwrap();
    // Wrong key: payload dropped, control part delivered with length 0.
    let forged = Token(tok.0 ^ 1);
    f.run(
        &[WorkRequest::write_inline_with_token(1, forged, b"forged").unwrap()],
        WcStatus::RemoteAccessError,
    );
    let ev = f.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(matches!(ev[0].kind, EventKind::Token { key_ok: false, .. }));
    assert_eq!(ev[0].len, 0);
    assert!(f.mem()[4096..4160].iter().all(|&b| b == 0));
    // The rightful holder deposits once.
    f.run(
        &[WorkRequest::write_inline_with_token(2, tok, b"payload").unwrap()],
        WcStatus::Success,
    );
    assert_eq!(&f.mem()[4096..4103], b"payload");
    let ev = f.events();
    assert_eq!(ev.len(), 1);
    assert!(matches!(ev[0].kind, EventKind::Token { key_ok: true, .. }));
    assert_eq!((ev[0].ea, ev[0].len), (4096, 7));
    // A duplicate is refused.
    f.run(
        &[WorkRequest::write_inline_with_token(3, tok, b"again!!").unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(&f.mem()[4096..4103], b"payload");
    // Cancelled before use: refused; larger than the buffer: refused.
    let t2 = f.pair.server.create_token(&f.c.sep, 8192, 4).unwrap();
    f.pair.server.cancel_token(t2).unwrap();
    f.run(
        &[WorkRequest::write_inline_with_token(4, t2, b"x").unwrap()],
        WcStatus::RemoteAccessError,
    );
    let t3 = f.pair.server.create_token(&f.c.sep, 8192, 4).unwrap();
    f.run(
        &[WorkRequest::write_inline_with_token(5, t3, b"too long").unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert!(f.mem()[8192..8200].iter().all(|&b| b == 0));
    assert_eq!(f.drops(DropReason::BadToken), 2);
    assert_eq!(f.drops(DropReason::TokenKey), 1);
    // Tokens are values: the server hands one to the client inside an ordinary write,
    // the client reads it from its memory and uses it.
    let t4 = f.pair.server.create_token(&f.c.sep, 12288, 32).unwrap();
    f.c.server
        .post(
            &WorkRequest::write_inline(1, &t4.0.to_le_bytes(), 0)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    let start = std::time::Instant::now();
    let got = loop {
        f.pair.client.progress();
        f.pair.server.progress();
        while f.scq.poll_one().is_some() {}
        let v = u64::from_le_bytes(memory_snapshot(&f.c.cep, 8)[..8].try_into().unwrap());
        if v != 0 || start.elapsed() > T {
            break Token(v);
        }
    };
    assert_eq!(got, t4);
    f.run(
        &[WorkRequest::write_inline_with_token(6, got, b"via a value").unwrap()],
        WcStatus::Success,
    );
    assert_eq!(&f.mem()[12288..12299], b"via a value");
}

#[test]
fn an_unloaded_instruction_is_a_fault_the_host_repairs_then_it_runs_once() {
    let f = fixture("ip_fault", 4, false);
    f.set(0, 0, RegProt::NONE);
    let bump = add_operand(0);
    let loaded = f.pair.server.program(f.code, 0, &[bump]).unwrap();
    // Slot 2 is empty: the first message faults, the second waits behind it.
    f.c.client
        .post(
            &WorkRequest::invoke(1, InstrPtr(2), 10, &[])
                .unwrap()
                .signaled(),
        )
        .unwrap();
    f.c.client
        .post(&WorkRequest::invoke(2, loaded, 1, &[]).unwrap().signaled())
        .unwrap();
    assert!(wait_until(&f.pair.client, T, || f.c.server.state()
        == ConnState::Exceptioned));
    let ev = f.c.sep.exceptions().poll().expect("the fault is reported");
    assert_eq!(
        ev.kind,
        EventKind::Trap {
            status: RemoteStatus::PageFault,
            reason: DropReason::InstructionNotLoaded
        }
    );
    assert_eq!(f.reg(0), 0, "nothing ran");
    // Resuming before loading it fails; load, resume: both run, once, in order.
    assert!(f.c.server.resume().is_err());
    f.pair.server.program(f.code, 2, &[bump]).unwrap();
    f.c.server.resume().unwrap();
    let wcs = wait_completions(&f.c.ccq, 2, T);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(f.reg(0), 11, "exactly once each");
    assert_eq!(f.c.server.state(), ConnState::Normal);
}

#[test]
fn a_released_endpoints_tokens_die_with_it() {
    let f = fixture("tokens_release", 1, false);
    let old = f
        .pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let tok = f.pair.server.create_token(&old, 0, 64).unwrap();
    drop(old);
    // A new endpoint takes the old one's number (the table reuses it): the token must
    // not reach it.
    let new = f
        .pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    f.run(
        &[WorkRequest::write_inline_with_token(1, tok, b"stale").unwrap()],
        WcStatus::RemoteAccessError,
    );
    assert_eq!(f.drops(DropReason::BadToken), 1);
    assert!(memory_snapshot(&new, 64).iter().all(|&b| b == 0));
}

#[test]
fn an_atomic_through_an_instruction_pointer_returns_its_old_value() {
    // An isolated counter: the instruction names the word, the sender only the add.
    let f = fixture("ip_fadd", 1, true);
    let add = Instruction::fetch_add(256);
    let ip = f.pair.server.program(f.code, 0, &[add]).unwrap();
    let write = f.pair.server.program(f.code, 1, &[write_at(512)]).unwrap();
    let old = |at: usize| {
        u64::from_le_bytes(
            memory_snapshot(&f.c.cep, 64)[at..at + 8]
                .try_into()
                .unwrap(),
        )
    };
    let word = || u64::from_ne_bytes(f.mem()[256..264].try_into().unwrap());
    f.run(
        &[WorkRequest::invoke_atomic(1, ip, 0, &[5], &f.c.cep, 0).unwrap()],
        WcStatus::Success,
    );
    f.run(
        &[WorkRequest::invoke_atomic(2, ip, 0, &[3], &f.c.cep, 8).unwrap()],
        WcStatus::Success,
    );
    assert_eq!((old(0), old(8), word()), (0, 5, 8));
    // Not waiting for the value of an atomic, or waiting for one from a write: refused,
    // nothing done.
    let no_wait = WorkRequest::invoke_from(3, ip, 0, &f.c.cep, 32, 8);
    f.run(&[no_wait], WcStatus::RemoteOperationError);
    f.run(
        &[WorkRequest::invoke_atomic(4, write, 0, &[1], &f.c.cep, 16).unwrap()],
        WcStatus::RemoteOperationError,
    );
    assert_eq!(word(), 8);
    assert!(f.mem()[512..520].iter().all(|&b| b == 0));
    assert_eq!(f.drops(DropReason::BadFlags), 2);
    assert!(WorkRequest::invoke_atomic(5, ip, 0, &[], &f.c.cep, 0).is_err());
}

/// A WRITE of the message data at `ea`.
fn write_at(ea: u32) -> Instruction {
    Instruction::write(ea)
}
