//! Instructions the instruction-pointer tests program, shared by the in-process ring
//! tests (`tests/instructions.rs`) and the receiving node across processes (`testnode
//! ip-receiver`), so that both run the very same programs.

use deposit::{Cond, Instruction, Operands, Order, RegOp, Src};

/// The seed's priority queue as one instruction ([`crate::seed_priority::enqueue`]):
/// enqueue the message's data at the queue's pointer register `queue` with
/// post-increment (by register `queue + 1`), interrupt when the message's priority
/// exceeds the level register `level`, and or the priority into the level. The sender
/// supplies only the operand (the priority).
pub fn priority_enqueue(queue: u8, level: u8) -> Instruction {
    // The same compound operation as the direct message, with the operand from the
    // message.
    Instruction::write(0)
        .post_increment(queue)
        .cond(Cond::Lt, Src::Operand, level)
        .op1(RegOp::Or, level, Src::Operand)
        .order(Order::CondFirst)
        .from_message(Operands::OPERAND)
}

/// `r[reg] += operand`, the operand from the message.
pub fn add_operand(reg: u8) -> Instruction {
    Instruction::reg_op()
        .op1(RegOp::Add, reg, Src::Operand)
        .from_message(Operands::OPERAND)
}

/// Appends the message's data at pointer register `reg`, post-incremented by register
/// `reg + 1`; every operand from the instruction.
pub fn append(reg: u8) -> Instruction {
    Instruction::write(0).post_increment(reg)
}
