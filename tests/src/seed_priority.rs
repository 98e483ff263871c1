//! The seed's priority-queueing example (docs/design.md §1; conditional interrupts, §3
//! "Interrupts, events and polling"): the jobs every priority-queue test sends — as
//! compound writes naming the receiver's registers (`tests/seed_examples*.rs`) or
//! through instruction pointers on isolated connections (`tests/instructions*.rs`), in one process or
//! across two (`testnode seed-receiver` / `ip-receiver`) — and what they must leave
//! behind, so that every variant runs and checks the very same example.
//!
//! Registers: r0/r1 the high queue's pointer and slot size, r3/r4 the low queue's, r2
//! the receiver's level (interrupt mask). Each job is stored at its queue's pointer
//! (post-incremented by the slot size), interrupts when its priority exceeds the level,
//! and ors its priority into the level.

use deposit::{Cond, Order, RegOp, Src, WorkRequest};

/// The high queue's pointer register (its slot size is the next one).
pub const HIGH: u8 = 0;
/// The low queue's pointer register (its slot size is the next one).
pub const LOW: u8 = 3;
/// The level register.
pub const LEVEL: u8 = 2;
/// Where the queues start, and their slot size.
pub const HIGH_BASE: u64 = 1024;
pub const LOW_BASE: u64 = 2048;
pub const SLOT: u64 = 32;

/// A job: its data, whether it goes to the high queue, its priority (the message's
/// operand).
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub data: &'static [u8],
    pub high: bool,
    pub prio: u32,
}

impl Job {
    /// The job's queue pointer register.
    pub fn queue(&self) -> u8 {
        if self.high {
            HIGH
        } else {
            LOW
        }
    }

    /// The job as a message naming the receiver's registers (the direct form).
    pub fn request(&self, id: u64) -> WorkRequest {
        enqueue(id, self.data, self.queue(), LEVEL, self.prio)
    }
}

/// The seed's priority enqueue, one compound operation: `<r_p> <- MSG; r_p += <r_s>;
/// if operand > <r_i> then interrupt at end; r_i <- <r_i> | operand`, with `queue` the
/// pointer `r_p` (its stride `r_s` the next register), `level` the level `r_i` and
/// `prio` the operand.
pub fn enqueue(id: u64, data: &[u8], queue: u8, level: u8, prio: u32) -> WorkRequest {
    WorkRequest::write_inline(id, data, 0)
        .expect("inline data")
        .post_increment(queue)
        .operand(prio)
        // `<rd> cond rhs`: "operand greater than <r_i>" is "<r_i> less than operand".
        .cond(Cond::Lt, Src::Operand, level)
        .op1(RegOp::Or, level, Src::Operand)
        .order(Order::CondFirst)
}

/// The jobs, in the order they are sent.
pub const JOBS: [Job; 4] = [
    Job {
        data: b"job-a low 2",
        high: false,
        prio: 2,
    },
    Job {
        data: b"job-b low 1",
        high: false,
        prio: 1,
    },
    Job {
        data: b"job-c high 8",
        high: true,
        prio: 8,
    },
    Job {
        data: b"job-d high 4",
        high: true,
        prio: 4,
    },
];

/// The interrupts [`JOBS`] raise from level 0, as `(operand, ea, regs)` (regs: the
/// queue pointer after its increment, the level after the or, 0, the level): 0 < 2
/// interrupts (level 2); 2 < 1 does not (3); 3 < 8 interrupts (11); 11 < 4 does not.
pub const INTERRUPTS: [(u32, u64, [u64; 4]); 2] = [
    (2, LOW_BASE, [LOW_BASE + SLOT, 2, 0, 2]),
    (8, HIGH_BASE, [HIGH_BASE + SLOT, 11, 0, 11]),
];

/// The level after [`JOBS`].
pub const FINAL_LEVEL: u64 = 15;

/// Where each of [`JOBS`] lands, `(offset, data)`, in the order sent.
pub fn landed() -> impl Iterator<Item = (u64, &'static [u8])> {
    let mut next = [HIGH_BASE, LOW_BASE];
    JOBS.iter().map(move |j| {
        let at = &mut next[usize::from(!j.high)];
        let off = *at;
        *at += SLOT;
        (off, j.data)
    })
}

/// The queue pointers `(high, low)` after [`JOBS`] and `more_low` more low-priority
/// jobs.
pub fn pointers_after(more_low: u64) -> (u64, u64) {
    let high = JOBS.iter().filter(|j| j.high).count() as u64;
    let low = JOBS.len() as u64 - high + more_low;
    (HIGH_BASE + high * SLOT, LOW_BASE + low * SLOT)
}
