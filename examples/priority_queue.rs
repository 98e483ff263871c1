//! priority_queue: the seed's priority queue with conditional interrupts
//! (docs/design.md §1 and §3, "Interrupts, events and polling").
//!
//! ```sh
//! cargo run -p deposit --example priority_queue
//! ```
//!
//! The receiver keeps two queues (high and low) in its endpoint, each with a pointer
//! register and a slot size (the stride) in the next register, and a *level*
//! register. Each job is one compound message from the sender:
//!
//! ```text
//! <r_queue> <- data; r_queue += <r_queue + 1>      store at the queue pointer, move it
//! if <r_level> < priority: interrupt at end          only jobs above the level interrupt
//! r_level |= priority                                 and raise the level
//! ```
//!
//! so the receiving host is woken only for a job more urgent than anything it has
//! not served yet — in verbs terms, a receive queue that decides per message whether
//! to raise a completion event. The sender names the registers but their protection
//! lets it do only this (docs: the `deposit::protection` module). Two nodes in one
//! process over a ring pair.

use std::time::{Duration, Instant};

use deposit::{
    Cond, ConnOptions, Device, DeviceConfig, DropReason, Endpoint, EventKind, Order, RegOp,
    RegProt, RegWindow, Registers, Rights, Src, WcStatus, WorkRequest,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const T: Duration = Duration::from_secs(5);
const SERVICE: u32 = 1;

// The receiver's registers (names within the connection's register window).
/// The high queue's pointer; its slot size is register 1.
const HIGH: u8 = 0;
/// The level: the priorities of the jobs not yet served, or-ed together.
const LEVEL: u8 = 2;
/// The low queue's pointer; its slot size is register 4.
const LOW: u8 = 3;
/// Where the queues start in the receiver's endpoint, and their slot size.
const HIGH_BASE: u64 = 1024;
const LOW_BASE: u64 = 2048;
const SLOT: u64 = 32;

/// The jobs: (data, goes to the high queue, priority).
const JOBS: [(&str, bool, u32); 4] = [
    ("job-a low 2", false, 2), // 0 < 2: interrupts, level 2
    ("job-b low 1", false, 1), // 2 < 1 is false: quiet, level 3
    ("job-c high 8", true, 8), // 3 < 8: interrupts, level 11
    ("job-d high 4", true, 4), // 11 < 4 is false: quiet, level 15
];

fn main() {
    if let Err(e) = run() {
        eprintln!("priority_queue: FAILED: {e}");
        std::process::exit(1);
    }
}

/// The sender's enqueue: one compound write, data inline (at most 32 bytes).
fn enqueue(id: u64, data: &str, high: bool, prio: u32) -> Result<WorkRequest> {
    Ok(WorkRequest::write_inline(id, data.as_bytes(), 0)?
        // Address: the queue pointer, post-incremented by the next register.
        .post_increment(if high { HIGH } else { LOW })
        // The operand is the priority.
        .operand(prio)
        // The conditional is `<rd> cmp rhs`: "priority > <level>" is "<level> < priority".
        .cond(Cond::Lt, Src::Operand, LEVEL)
        .op1(RegOp::Or, LEVEL, Src::Operand)
        // Test the level before the or raises it.
        .order(Order::CondFirst)
        .signaled())
}

/// The host serves one queue: every job from its base up to its pointer, then
/// rewinds the pointer. Returns the jobs.
fn serve(
    dev: &Device,
    regs: RegWindow,
    ep: &Endpoint,
    queue: u8,
    base: u64,
) -> Result<Vec<String>> {
    let end = dev.read_register(regs, queue.into())?;
    let mut jobs = Vec::new();
    for at in (base..end).step_by(SLOT as usize) {
        let mut slot = [0u8; SLOT as usize];
        ep.read(at, &mut slot)?;
        let len = slot.iter().position(|&b| b == 0).unwrap_or(slot.len());
        jobs.push(String::from_utf8_lossy(&slot[..len]).into_owned());
        ep.fill(at, SLOT, 0)?;
    }
    dev.write_register(regs, queue.into(), base)?;
    Ok(jobs)
}

fn run() -> Result<()> {
    let start = Instant::now();
    let rx = Device::open(DeviceConfig::new("ring:prioq:a", [10, 0, 0, 1]))?;
    let tx = Device::open(DeviceConfig::new("ring:prioq:b", [10, 0, 0, 2]))?;

    // Receiver: the queues' endpoint and five registers for the sender's connection.
    let queues = rx.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
    let regs = queues.alloc_registers(5)?;
    let setup = [
        // (register, value, what the sender may do with it)
        (HIGH, HIGH_BASE, RegProt::INDIRECT), // store at it and move it, never read or set it
        (HIGH + 1, SLOT, RegProt::NONE),      // a stride needs no right
        (LEVEL, 0, RegProt::WRITE),           // or-ed into by senders
        (LOW, LOW_BASE, RegProt::INDIRECT),
        (LOW + 1, SLOT, RegProt::NONE),
    ];
    for (r, v, prot) in setup {
        rx.write_register(regs, r.into(), v)?;
        rx.set_register_protection(regs, r.into(), prot)?;
    }
    let rcq = rx.create_cq(16);
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        // Only conditionals may interrupt this host (no forced interrupts).
        allow_forced_interrupts: false,
        ..ConnOptions::default()
    };
    let listener = rx.listen_with(SERVICE, &queues, &rcq, &opts)?;

    // Sender: it sends inline data only, so its endpoint needs no rights.
    let ep = tx.alloc_endpoint(4096, Rights::NONE)?;
    let cq = tx.create_cq(16);
    let conn = tx.connect([10, 0, 0, 1], SERVICE, &ep, &cq)?;
    let _accepted = listener.accept(T)?;

    // The sender posts every job at once.
    for (i, &(data, high, prio)) in JOBS.iter().enumerate() {
        conn.post(&enqueue(i as u64, data, high, prio)?)?;
    }

    // The receiving host sleeps on its endpoint's event queue (inline progress: the
    // wait drives both nodes). Only jobs above its level wake it.
    let events = queues.events();
    let mut woken_by = Vec::new();
    for _ in 0..2 {
        let ev = events.wait(T).ok_or("no interrupt within 5 s")?;
        if ev.kind != EventKind::Interrupt {
            return Err(format!("unexpected event {ev:?}").into());
        }
        let mut job = vec![0u8; ev.len as usize];
        queues.read(ev.ea, &mut job)?;
        let job = String::from_utf8_lossy(&job).into_owned();
        println!(
            "priority_queue: interrupt: priority {} beat the level, job {job:?} at offset {} \
             (level now {})",
            ev.operand, ev.ea, ev.regs[1]
        );
        woken_by.push(job);
    }
    for _ in 0..JOBS.len() {
        let wc = cq.wait_one(T).ok_or("a job never completed")?;
        if wc.status != WcStatus::Success {
            return Err(format!("a job completed with {wc:?}").into());
        }
    }
    // Every job ran (all completed), so every event they raised is queued: no more.
    if let Some(ev) = events.poll() {
        return Err(format!("a third interrupt: {ev:?}").into());
    }
    if woken_by != ["job-a low 2", "job-c high 8"] {
        return Err(format!("interrupted by {woken_by:?}, expected job-a and job-c").into());
    }
    let level = rx.read_register(regs, LEVEL.into())?;
    if level != 2 | 1 | 8 | 4 {
        return Err(format!("level {level}, expected 15").into());
    }

    // The host serves the queues, high first, and lowers its level again.
    let high = serve(&rx, regs, &queues, HIGH, HIGH_BASE)?;
    let low = serve(&rx, regs, &queues, LOW, LOW_BASE)?;
    println!("priority_queue: served high {high:?}, then low {low:?}");
    if high != ["job-c high 8", "job-d high 4"] || low != ["job-a low 2", "job-b low 1"] {
        return Err("the queues do not hold the jobs in order".into());
    }
    rx.write_register(regs, LEVEL.into(), 0)?;

    // With the level back at 0 even a priority-1 job interrupts.
    conn.post(&enqueue(9, "job-e low 1", false, 1)?)?;
    let ev = events.wait(T).ok_or("no interrupt for job-e within 5 s")?;
    let wc = cq.wait_one(T).ok_or("job-e never completed")?;
    if wc.status != WcStatus::Success || (ev.operand, ev.ea) != (1, LOW_BASE) {
        return Err(format!("job-e: completion {wc:?}, event {ev:?}").into());
    }
    println!(
        "priority_queue: after serving, job-e (priority 1) interrupted again at offset {}",
        ev.ea
    );

    // What the protection keeps out: setting a queue pointer needs WRITE, and the
    // pointer has INDIRECT only. The receiver refuses the message whole.
    conn.post(
        &WorkRequest::reg_op(10)
            .op1(RegOp::Set, HIGH, Src::Operand)
            .signaled(),
    )?;
    let wc = cq
        .wait_one(T)
        .ok_or("the refused request never completed")?;
    if wc.status != WcStatus::RemoteAccessError
        || wc.remote_reason != Some(DropReason::RegisterProtection)
    {
        return Err(format!("setting the queue pointer completed with {wc:?}").into());
    }
    println!(
        "priority_queue: setting the queue pointer directly was refused: {:?} ({:?}); \
         verified in {:.0?}",
        wc.status,
        wc.remote_reason,
        start.elapsed()
    );
    Ok(())
}
