//! Instructions the instruction-pointer tests program, shared by the in-process ring
//! tests (`tests/instructions.rs`) and the receiving node across processes (`testnode
//! ip-receiver`), so that both run the very same programs.

use deposit::{Instruction, Operands, RegOp, Src, WorkRequest};

/// The seed's priority queue as one instruction ([`crate::seed_priority::enqueue`]):
/// enqueue the message's data at the queue's pointer register `queue` with
/// post-increment (by register `queue + 1`), interrupt when the message's priority
/// exceeds the level register `level`, and or the priority into the level. The sender
/// supplies only the operand (the priority).
pub fn priority_enqueue(queue: u8, level: u8) -> Instruction {
    let template = crate::seed_priority::enqueue(0, &[], queue, level, 0);
    Instruction::new(&template)
        .expect("a valid instruction")
        .from_message(Operands::OPERAND)
}

/// `r[reg] += operand`, the operand from the message.
pub fn add_operand(reg: u8) -> Instruction {
    Instruction::new(&WorkRequest::reg_op(0).op1(RegOp::Add, reg, Src::Operand))
        .expect("a valid instruction")
        .from_message(Operands::OPERAND)
}

/// Appends the message's data at pointer register `reg`, post-incremented by register
/// `reg + 1`; every operand from the instruction.
pub fn append(reg: u8) -> Instruction {
    let template = WorkRequest::write_inline(0, &[], 0)
        .expect("an empty inline write")
        .post_increment(reg);
    Instruction::new(&template).expect("a valid instruction")
}
