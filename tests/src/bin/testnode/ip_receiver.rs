//! `testnode ip-receiver SOCKET CASE`: the receiving node of the instruction-pointer
//! and payload-token tests across processes (the sender is
//! `tests/instructions_memif.rs`; the in-process originals are `tests/instructions.rs`).
//!
//! It programs its instructions or registers its tokens, announces what the sender may
//! use as `NAME VALUE` lines before "ready" (the sender learns nothing else of this
//! node's state), accepts one connection and then follows the sender's stdin lines:
//! "cancel" cancels the revocable token ("cancelled"), "verify" stops the worker, checks
//! memory, registers, events and drop counters against what the case expects and says
//! "verified CASE". It exits when the sender closes stdin; any failed check exits 1.

use std::sync::mpsc::Receiver;

use deposit::*;
use deposit_tests::programs::{add_operand, append, priority_enqueue};
use deposit_tests::seed_priority::{
    landed, pointers_after, FINAL_LEVEL, HIGH, HIGH_BASE, INTERRUPTS, LEVEL, LOW, LOW_BASE, SLOT,
};

use super::seed_check as check;
use super::{
    fail, memif_receiver, seed_image_check, seed_put, stdin_lines, wait_for_disconnect, T,
};

/// Service the sender connects to.
const SERVICE: u32 = 18;
const LEN: usize = 64 * 1024;
const REGISTERS: u32 = 8;
const WINDOW: u32 = 16;

/// The receiving node: its device, the endpoint the sender reaches, its register and
/// instruction windows and the image of what its memory must hold.
struct Node {
    dev: Device,
    ep: Endpoint,
    regs: RegWindow,
    code: InstrWindow,
    img: Vec<u8>,
}

/// What a case keeps between setup and verification.
enum Case {
    Priority,
    Refusals,
    Tokens { single: Token, revocable: Token },
}

pub fn ip_receiver(sock: &str, case: &str) {
    let lines = stdin_lines();
    let dev = memif_receiver(sock);
    let ep = dev
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap_or_else(|e| fail(e));
    let regs = dev.alloc_registers(REGISTERS).unwrap_or_else(|e| fail(e));
    let code = dev.alloc_instructions(WINDOW).unwrap_or_else(|e| fail(e));
    let mut rx = Node {
        dev,
        ep,
        regs,
        code,
        img: vec![0; LEN],
    };
    let (state, isolated) = match case {
        "priority" => (rx.program_priority_queues(), true),
        "refusals" => (rx.program_refusals(), false),
        "tokens" => (rx.register_tokens(), false),
        other => fail(format!("unknown case {other}")),
    };
    let cq = rx.dev.create_cq(64);
    let opts = ConnOptions {
        registers: Registers::Window(rx.regs),
        instructions: Some(rx.code),
        isolated,
        ..ConnOptions::default()
    };
    let l = rx
        .dev
        .listen_with(SERVICE, &rx.ep, &cq, &opts)
        .unwrap_or_else(|e| fail(e));
    println!("ready");
    let conn = l.accept(T).unwrap_or_else(|e| fail(e));
    follow(&lines, &rx, &state);
    // The sender has every completion: nothing is in flight. Stop polling before it
    // leaves (see wait_for_release), then check.
    rx.dev.shutdown_for_test();
    match state {
        Case::Priority => rx.verify_priority_queues(&conn),
        Case::Refusals => rx.verify_refusals(&conn),
        Case::Tokens { single, .. } => rx.verify_tokens(&conn, single),
    }
    println!("verified {case}");
    wait_for_disconnect(&lines);
}

/// Serves the sender's requests until it says "verify".
fn follow(lines: &Receiver<String>, rx: &Node, state: &Case) {
    loop {
        match lines.recv_timeout(T).as_deref() {
            Ok("verify") => return,
            Ok("cancel") => match state {
                Case::Tokens { revocable, .. } => {
                    rx.dev.cancel_token(*revocable).unwrap_or_else(|e| fail(e));
                    println!("cancelled");
                }
                _ => fail("cancel: this case has no token"),
            },
            Ok(other) => fail(format!("unexpected line {other:?}")),
            Err(e) => fail(format!("no word from the sender: {e}")),
        }
    }
}

impl Node {
    fn set(&self, i: u32, v: u64) {
        // The sender may not use any of them: only the instructions name them.
        self.dev
            .write_register(self.regs, i, v)
            .unwrap_or_else(|e| fail(e));
        self.dev
            .set_register_protection(self.regs, i, RegProt::NONE)
            .unwrap_or_else(|e| fail(e));
    }

    fn reg(&self, i: u32) -> u64 {
        self.dev
            .read_register(self.regs, i)
            .unwrap_or_else(|e| fail(e))
    }

    fn events(&self) -> Vec<Event> {
        let q = self.ep.events();
        std::iter::from_fn(|| q.poll()).collect()
    }

    /// Checks the refusals counted on the device, by reason, and on the connection.
    fn check_drops(&self, conn: &Connection, want: &[(DropReason, u64)]) {
        let stats = self.dev.stats();
        for &(r, n) in want {
            check(
                stats.dropped(r) == n,
                format!("{r:?} drops: {} (want {n})", stats.dropped(r)),
            );
        }
        // Every refusal of the connection is one of those (the device may also count
        // frames it discarded for reasons of its own, a late retransmission say).
        let total: u64 = want.iter().map(|w| w.1).sum();
        check(
            conn.dropped() == total,
            format!(
                "{} refusals on the connection (want {total}); device: {:?}",
                conn.dropped(),
                stats.drops().collect::<Vec<_>>(),
            ),
        );
    }

    /// The seed's queues and level (see `seed_priority`); one entry point per queue.
    fn program_priority_queues(&mut self) -> Case {
        self.set(HIGH.into(), HIGH_BASE);
        self.set((HIGH + 1).into(), SLOT);
        self.set(LEVEL.into(), 0);
        self.set(LOW.into(), LOW_BASE);
        self.set((LOW + 1).into(), SLOT);
        let hi = self.program(0, &[priority_enqueue(HIGH, LEVEL)]);
        let lo = self.program(1, &[priority_enqueue(LOW, LEVEL)]);
        println!("high {}", hi.0);
        println!("low {}", lo.0);
        Case::Priority
    }

    /// The seed's jobs (two interrupts), a refused direct write naming r0, one more
    /// low-priority job.
    fn verify_priority_queues(&mut self, conn: &Connection) {
        let evs = self.events();
        let got: Vec<_> = evs.iter().map(|e| (e.operand, e.ea, e.regs)).collect();
        check(got == INTERRUPTS, format!("interrupts {evs:?}"));
        check(
            evs.iter()
                .all(|e| e.kind == EventKind::Interrupt && e.conn == conn.local_number()),
            format!("event kinds and connection {evs:?}"),
        );
        let level = self.reg(LEVEL.into());
        check(level == FINAL_LEVEL, format!("level {level}"));
        let pointers = (self.reg(HIGH.into()), self.reg(LOW.into()));
        check(
            pointers == pointers_after(1),
            format!("queue pointers {pointers:?}"),
        );
        check(
            (self.reg((HIGH + 1).into()), self.reg((LOW + 1).into())) == (SLOT, SLOT),
            "queue sizes unchanged",
        );
        for (at, data) in landed() {
            seed_put(&mut self.img, at, data);
        }
        seed_put(&mut self.img, pointers_after(0).1, b"job-e low 1");
        seed_image_check(&self.ep, &self.img);
        self.check_drops(conn, &[(DropReason::Isolated, 1)]);
    }

    /// r0 a counter, r1/r2 a pointer and its stride. Slot 3: append then count (slot 4
    /// only through the sequencer); slots 6 to 15: appends, each continuing, from entry
    /// points 6 (a chain longer than the sequencer runs) and 12 (running off the
    /// window's end).
    fn program_refusals(&mut self) -> Case {
        self.set(0, 0);
        self.set(1, 1000);
        self.set(2, 16);
        let entry = self.program(3, &[append(1), add_operand(0)]);
        for s in 6..WINDOW {
            let ins = append(1).then();
            let ins = if s == 6 || s == 12 { ins.entry() } else { ins };
            self.dev
                .program_slot(self.code, s, Some(ins))
                .unwrap_or_else(|e| fail(e));
        }
        check(
            (6..WINDOW).len() > MAX_SEQUENCE,
            "the long chain exceeds the sequencer",
        );
        // A global instruction: every operand, register names included, from the
        // sender, resolved in its window under its protection. r3 is the one register
        // it may write.
        let global = self
            .dev
            .program_global(0, &[add_operand(0).from_message(Operands::ALL)])
            .unwrap_or_else(|e| fail(e));
        self.set(3, 100);
        self.dev
            .set_register_protection(self.regs, 3, RegProt::WRITE)
            .unwrap_or_else(|e| fail(e));
        println!("global {}", global.0);
        println!("entry {}", entry.0);
        println!("inner {}", entry.0 + 1);
        println!("window {WINDOW}");
        println!("long 6");
        println!("off-end 12");
        Case::Refusals
    }

    /// Two runs of the entry chain around six refused instruction pointers; one run of
    /// the global instruction on r3 around two refused ones.
    fn verify_refusals(&mut self, conn: &Connection) {
        check(self.reg(0) == 5 + 7, format!("counter {}", self.reg(0)));
        check(self.reg(1) == 1000 + 32, format!("pointer {}", self.reg(1)));
        check(self.reg(2) == 16, "stride unchanged");
        check(
            self.reg(3) == 100 + 9,
            format!("global target {}", self.reg(3)),
        );
        seed_put(&mut self.img, 1000, b"first");
        seed_put(&mut self.img, 1016, b"second");
        seed_image_check(&self.ep, &self.img);
        let evs = self.events();
        check(evs.is_empty(), format!("no event expected: {evs:?}"));
        self.check_drops(
            conn,
            &[
                (DropReason::NotEntryPoint, 1),
                (DropReason::InstructionWindow, 3),
                (DropReason::SequenceBounds, 1),
                (DropReason::RegisterProtection, 1),
                (DropReason::BadRegister, 1),
            ],
        );
    }

    /// A single-use buffer of 64 bytes at 4096 and a revocable one of 32 at 8192.
    fn register_tokens(&mut self) -> Case {
        let single = self
            .dev
            .create_token(&self.ep, 4096, 64)
            .unwrap_or_else(|e| fail(e));
        let revocable = self
            .dev
            .create_token(&self.ep, 8192, 32)
            .unwrap_or_else(|e| fail(e));
        println!("single {}", single.0);
        println!("revocable {}", revocable.0);
        Case::Tokens { single, revocable }
    }

    /// A forged key (a zero-length event, the entry kept), the rightful deposit, a
    /// duplicate, and a use after cancelling.
    fn verify_tokens(&mut self, conn: &Connection, single: Token) {
        let evs = self.events();
        let got: Vec<_> = evs.iter().map(|e| (e.kind, e.ea, e.len, e.conn)).collect();
        let token = |key_ok| EventKind::Token {
            index: single.index(),
            key_ok,
        };
        let c = conn.local_number();
        check(
            got == [(token(false), 4096, 0, c), (token(true), 4096, 7, c)],
            format!("token events {evs:?}"),
        );
        seed_put(&mut self.img, 4096, b"payload");
        seed_image_check(&self.ep, &self.img);
        self.check_drops(
            conn,
            &[(DropReason::TokenKey, 1), (DropReason::BadToken, 2)],
        );
    }

    fn program(&self, at: u32, chain: &[Instruction]) -> InstrPtr {
        self.dev
            .program(self.code, at, chain)
            .unwrap_or_else(|e| fail(e))
    }
}
