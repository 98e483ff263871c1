//! instruction_pointers: the receiver programs what a message does; the sender only
//! names an entry point (docs/design.md §3, "Instruction-pointer messages").
//!
//! ```sh
//! cargo run -p deposit --example instruction_pointers
//! ```
//!
//! The receiver stores a chain of two instructions in instruction memory:
//!
//! ```text
//! 1. <r0> <- the message's data; r0 += <r1>    append to a queue (a receive queue)
//! 2. r2 += the message's operand                keep a running total
//! ```
//!
//! and gives its window to an *isolated* connection: the peer may run the chain
//! (`WorkRequest::invoke` with the entry point's `InstrPtr`) and nothing else — it
//! names no register and no address of the receiver, which keeps its queue layout
//! private. A plain RDMA-style write on that connection is refused. (Closest in
//! verbs: nothing; think of an RPC whose handler runs in the NIC.) Two nodes in one
//! process over a ring pair.

use std::time::{Duration, Instant};

use deposit::{
    ConnOptions, Device, DeviceConfig, DropReason, Instruction, Operands, RegOp, Registers, Rights,
    Src, WcStatus, WorkRequest,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const T: Duration = Duration::from_secs(5);
const SERVICE: u32 = 1;
/// The queue: its start in the receiver's endpoint and its slot size.
const QUEUE_BASE: u64 = 1024;
const SLOT: u64 = 32;
/// What the sender sends: (data, operand).
const MESSAGES: [(&str, u32); 3] = [("first", 10), ("second", 20), ("third", 12)];

fn main() {
    if let Err(e) = run() {
        eprintln!("instruction_pointers: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let start = Instant::now();
    let rx = Device::open(DeviceConfig::new("ring:instr:a", [10, 0, 0, 1]))?;
    let tx = Device::open(DeviceConfig::new("ring:instr:b", [10, 0, 0, 2]))?;

    // Receiver: the endpoint and three registers: r0 the queue pointer, r1 its
    // stride, r2 the total. Their protection stays NONE: the sender may not use them
    // at all; the receiver's own instructions name them, which needs no right.
    let ep = rx.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    let regs = ep.alloc_registers(3)?;
    rx.write_register(regs, 0, QUEUE_BASE)?;
    rx.write_register(regs, 1, SLOT)?;

    // The program. Instructions are built like work requests; every operand comes
    // from the instruction unless `from_message` says otherwise. Register names are
    // relative to the connection's register window, as in a message.
    let code = rx.alloc_instructions_for(&ep, 4)?;
    let chain = [
        Instruction::write(0).post_increment(0),
        Instruction::reg_op()
            .op1(RegOp::Add, 2, Src::Operand)
            .from_message(Operands::OPERAND),
    ];
    // The first instruction of the chain becomes the entry point.
    let entry = rx.program(code, 0, &chain)?;

    let rcq = rx.create_cq(16);
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        instructions: Some(code),
        isolated: true, // instruction pointers only
        ..ConnOptions::default()
    };
    let listener = rx.listen_with(SERVICE, &ep, &rcq, &opts)?;

    // Sender. It learns the entry point out of band here (a real receiver would hand
    // the `InstrPtr` value over, e.g. in its connection private data).
    let sep = tx.alloc_endpoint(4096, Rights::NONE)?;
    let cq = tx.create_cq(16);
    let conn = tx.connect([10, 0, 0, 1], SERVICE, &sep, &cq)?;
    let _accepted = listener.accept(T)?;

    for (i, &(data, operand)) in MESSAGES.iter().enumerate() {
        conn.post(&WorkRequest::invoke(i as u64, entry, operand, data.as_bytes())?.signaled())?;
    }
    for _ in 0..MESSAGES.len() {
        let wc = cq.wait_one(T).ok_or("an invoke never completed")?;
        if wc.status != WcStatus::Success {
            return Err(format!("an invoke completed with {wc:?}").into());
        }
    }
    // Check what the chain did, step by step.
    for (i, &(data, _)) in MESSAGES.iter().enumerate() {
        let mut got = vec![0u8; data.len()];
        ep.read(QUEUE_BASE + i as u64 * SLOT, &mut got)?;
        if got != data.as_bytes() {
            return Err(format!("slot {i} holds {got:?}, expected {data:?}").into());
        }
    }
    let (ptr, total) = (rx.read_register(regs, 0)?, rx.read_register(regs, 2)?);
    let want_total: u32 = MESSAGES.iter().map(|m| m.1).sum();
    if ptr != QUEUE_BASE + MESSAGES.len() as u64 * SLOT || total != u64::from(want_total) {
        return Err(format!("queue pointer {ptr}, total {total}").into());
    }
    println!(
        "instruction_pointers: {} invokes of entry point {:?} ran the chain: queue holds {:?}, \
         total {total}",
        MESSAGES.len(),
        entry,
        MESSAGES.map(|m| m.0)
    );

    // A plain write on the isolated connection: refused whole, nothing written, and
    // the sender's completion says why.
    let before = {
        let mut b = vec![0u8; 4096];
        ep.read(0, &mut b)?;
        b
    };
    conn.post(&WorkRequest::write_inline(9, b"sneaky", 0)?.signaled())?;
    let wc = cq.wait_one(T).ok_or("the plain write never completed")?;
    let remote_error = matches!(
        wc.status,
        WcStatus::RemoteAccessError
            | WcStatus::RemoteOperationError
            | WcStatus::RemoteInvalidRequest
    );
    if !remote_error || wc.remote_reason != Some(DropReason::Isolated) {
        return Err(format!("the plain write completed with {wc:?}").into());
    }
    let mut after = vec![0u8; 4096];
    ep.read(0, &mut after)?;
    if after != before {
        return Err("the refused write changed the receiver's memory".into());
    }
    println!(
        "instruction_pointers: a plain write was refused: {:?} ({:?}); receiver counted {} \
         such refusal(s)",
        wc.status,
        wc.remote_reason,
        rx.stats().dropped(DropReason::Isolated)
    );

    // The connection goes on: invokes still work after the refusal.
    conn.post(&WorkRequest::invoke(10, entry, 0, b"fourth")?.signaled())?;
    let wc = cq.wait_one(T).ok_or("the last invoke never completed")?;
    let mut got = [0u8; 6];
    ep.read(QUEUE_BASE + MESSAGES.len() as u64 * SLOT, &mut got)?;
    if wc.status != WcStatus::Success || &got != b"fourth" {
        return Err(format!("the last invoke completed with {wc:?}, slot holds {got:?}").into());
    }
    println!("instruction_pointers: verified in {:.0?}", start.elapsed());
    Ok(())
}
