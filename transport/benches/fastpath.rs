//! Per-message costs of the fast-path pieces, with no I/O: `cargo bench -p
//! deposit-transport --bench fastpath`. Prints nanoseconds per operation (best of 5
//! runs, the machine is shared and noisy). These are the numbers behind the
//! optimisations of the worker loop; keep them when changing wire, oplogic or tlb.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use deposit_transport::connection::{Source, Wqe, WrOpcode};
use deposit_transport::mem::EndpointMemory;
use deposit_transport::message;
use deposit_transport::oplogic::{
    commit, commit_sequence, plan, plan_into, plan_invoke, plan_invoke_one, Code, Plan, RegContext,
    SeqPlan, TlbAccess,
};
use deposit_transport::tables::{
    EndpointEntry, EndpointId, EndpointTable, InstructionMemory, RegProt, RegWindow, RegisterFile,
    Rights, StoredInstruction,
};
use deposit_transport::tlb::Tlb;
use deposit_transport::wire::cell::{flags, index_of, AddrMode};
use deposit_transport::wire::compound::{
    CompoundRepr, Cond, CondRepr, OpSource, Order, RegOp, RegOpRepr,
};
use deposit_transport::wire::{
    op, ControlRepr, FrameView, FrameWriter, TransportRepr, UnderlayRepr, UDP_PORT,
};

fn bench(name: &str, iters: u64, mut f: impl FnMut(u64)) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..iters {
            f(i);
        }
        best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    println!("{name:<48} {best:>8.1} ns");
}

/// The register view of a message on a connection with window `w` (no globals).
fn context(regs: &RegisterFile, w: RegWindow) -> RegContext<'_> {
    RegContext {
        regs,
        window: w,
        globals: RegWindow::EMPTY,
        allow_forced_interrupts: true,
        prior: &[],
        trusted: [false; 5],
        segment_base: None,
    }
}

fn underlay() -> UnderlayRepr {
    UnderlayRepr {
        src_mac: [2, 0, 10, 0, 0, 2],
        dst_mac: [2, 0, 10, 0, 0, 1],
        src_ip: [10, 0, 0, 2].into(),
        dst_ip: [10, 0, 0, 1].into(),
        src_port: 49152,
        dst_port: UDP_PORT,
        traffic_class: 0,
    }
}

fn build(buf: &mut [u8], msgs: usize, payload: &[u8]) -> usize {
    let hdr = TransportRepr {
        dst_conn: 7,
        key: 9,
        seq: 1,
        ..Default::default()
    };
    let mut w = FrameWriter::new(buf, &underlay(), &hdr).unwrap();
    for i in 0..msgs {
        let c = ControlRepr {
            opcode: op::WRITE,
            flags: 1,
            operand: (i * 32) as u32,
            length: payload.len() as u32,
            ..Default::default()
        };
        w.push_with(&c, |d| d.copy_from_slice(payload)).unwrap();
    }
    w.finish()
}

fn main() {
    let mut buf = vec![0u8; 9014];
    let payload = [0xabu8; 32];
    const N: u64 = 2_000_000;

    bench("frame build, 1 x 32 B write", N, |_| {
        black_box(build(black_box(&mut buf), 1, &payload));
    });
    bench(
        "frame build, 180 x 32 B writes (whole frame)",
        N / 180,
        |_| {
            black_box(build(black_box(&mut buf), 180, &payload));
        },
    );
    let n1 = build(&mut buf, 1, &payload);
    let one = buf[..n1].to_vec();
    bench("frame parse + decode, 1 x 32 B write", N, |_| {
        let f = FrameView::parse(black_box(&one)).unwrap();
        for m in f.messages() {
            black_box(m.unwrap());
        }
    });
    let n180 = build(&mut buf, 180, &payload);
    let many = buf[..n180].to_vec();
    bench(
        "frame parse + decode, 180 x 32 B (whole frame)",
        N / 180,
        |_| {
            let f = FrameView::parse(black_box(&many)).unwrap();
            for m in f.messages() {
                black_box(m.unwrap());
            }
        },
    );

    let mem = Arc::new(EndpointMemory::alloc_ordinary(1 << 20).unwrap());
    let mut table = EndpointTable::new();
    let id: EndpointId = table.insert(EndpointEntry::new(mem, 0, 1 << 20, Rights::ALL).unwrap());
    let mut tlb = Tlb::new();
    let f = FrameView::parse(&one).unwrap();
    let m = f.messages().next().unwrap().unwrap();
    // A plain deposit: no registers, the plan's inlined fast path.
    let mut no_regs = RegisterFile::empty();
    let empty = RegisterFile::empty();
    let none = RegContext::none(&empty);
    bench("plan + commit, plain 32 B write (direct mapping)", N, |i| {
        let ep = table.get(id).unwrap();
        let mut c = m.control;
        c.operand = (i as u32 & 63) * 32;
        let mut acc = TlbAccess::new(id, ep, &mut tlb);
        let p = plan(&c, m.payload, &none, &mut acc).unwrap();
        commit(&p, &mut no_regs, &mut acc);
        black_box(p.store);
    });
    bench(
        "plan + commit, plain 32 B write (through the TLB)",
        N,
        |i| {
            let ep = table.get(id).unwrap();
            let mut c = m.control;
            c.operand = 65536 + (i as u32 & 1023) * 32;
            let mut acc = TlbAccess::new(id, ep, &mut tlb);
            let p = plan(&c, m.payload, &none, &mut acc).unwrap();
            commit(&p, &mut no_regs, &mut acc);
            black_box(p.store);
        },
    );

    // A compound operation: indirect post-increment address generation, two register
    // operations and a conditional, against a plain direct write of the same 32 bytes.
    let mut regs = RegisterFile::new(64);
    let w = regs.alloc(8).unwrap();
    regs.set(w.base, 4096).unwrap();
    regs.set(w.base + 1, 32).unwrap();
    regs.set_prot(w.base, RegProt::INDIRECT).unwrap();
    regs.set_prot(w.base + 2, RegProt::WRITE).unwrap();
    regs.set_prot(w.base + 3, RegProt::WRITE).unwrap();
    let desc = CompoundRepr {
        op1: RegOpRepr {
            op: RegOp::Add,
            src: OpSource::Operand,
        },
        op2: RegOpRepr {
            op: RegOp::Or,
            src: OpSource::Operand,
        },
        cond: CondRepr {
            cond: Cond::Gt,
            rhs: OpSource::Operand,
        },
        order: Order::CondFirst,
    }
    .to_bytes();
    let mut cpayload = desc.to_vec();
    cpayload.extend_from_slice(&payload);
    let cctl = ControlRepr {
        opcode: op::WRITE,
        flags: flags::LAST | flags::COMPOUND | AddrMode::PostIncrement.to_flags(),
        operand: 1,
        index: index_of([0, 2, 3, 2]),
        length: cpayload.len() as u32,
        ..Default::default()
    };
    bench("plan + commit, direct 32 B write", N, |i| {
        let ep = table.get(id).unwrap();
        let mut c = m.control;
        c.operand = (i as u32 & 63) * 32;
        let ctx = context(&regs, w);
        let mut acc = TlbAccess::new(id, ep, &mut tlb);
        let p = plan(&c, m.payload, &ctx, &mut acc).unwrap();
        let interrupt = p.interrupt;
        commit(&p, &mut regs, &mut acc);
        black_box(interrupt);
    });
    bench(
        "plan + commit, compound 32 B write (post-inc, 2 ops, cond)",
        N,
        |i| {
            let ep = table.get(id).unwrap();
            if i & 63 == 0 {
                regs.set(w.base, 4096).unwrap();
            }
            let ctx = context(&regs, w);
            let mut acc = TlbAccess::new(id, ep, &mut tlb);
            let mut p = Plan::NOTHING;
            plan_into(&cctl, &cpayload, &ctx, &mut acc, None, &mut p).unwrap();
            let interrupt = p.interrupt;
            commit(&p, &mut regs, &mut acc);
            black_box(interrupt);
        },
    );

    // Instruction-pointer messages (ip_lat / ip_bw): the same 32 bytes through an entry
    // point, as the worker's run_invoke plans and commits them (a fresh chain plan per
    // message). One instruction writes at its own offset; the other at a ring pointer
    // it post-increments and wraps (`r4 &= r6`), ip_bw's.
    let mut code = InstructionMemory::new(16, 0);
    let cw = code.alloc(2).unwrap();
    let fixed = StoredInstruction {
        opcode: op::WRITE,
        operand: 64,
        entry: true,
        ..StoredInstruction::default()
    };
    let wrap = CompoundRepr {
        op1: RegOpRepr {
            op: RegOp::And,
            src: OpSource::Reg(6),
        },
        ..CompoundRepr::NONE
    };
    let ring = StoredInstruction {
        opcode: op::WRITE,
        flags: AddrMode::PostIncrement.to_flags(),
        regs: [4, 4, 0, 0],
        compound: Some(wrap.to_bytes()),
        entry: true,
        ..StoredInstruction::default()
    };
    code.set(cw, 0, Some(fixed)).unwrap();
    code.set(cw, 1, Some(ring)).unwrap();
    regs.set(w.base + 4, 0).unwrap();
    regs.set(w.base + 5, 64).unwrap();
    regs.set(w.base + 6, 4095).unwrap();
    for (name, ip) in [
        ("plan + commit, invoke of a 32 B WRITE at 64", 0u32),
        ("plan + commit, invoke of a 32 B WRITE at a ring", 1),
    ] {
        let ipayload = payload.to_vec();
        let ictl = ControlRepr {
            opcode: op::INVOKE,
            flags: flags::LAST,
            index: ip,
            length: ipayload.len() as u32,
            ..Default::default()
        };
        bench(name, N, |_| {
            let ep = table.get(id).unwrap();
            let ctx = context(&regs, w);
            let code = Code {
                memory: &code,
                window: cw,
            };
            let mut acc = TlbAccess::new(id, ep, &mut tlb);
            let mut p = Plan::NOTHING;
            assert!(plan_invoke_one(&ictl, &ipayload, &code, &ctx, &mut acc, &mut p).unwrap());
            let interrupt = p.interrupt;
            commit(&p, &mut regs, &mut acc);
            black_box(interrupt);
        });
    }
    // The same one-instruction write as a chain plan (what a chained entry point costs).
    let ipayload = payload.to_vec();
    let ictl = ControlRepr {
        opcode: op::INVOKE,
        flags: flags::LAST,
        length: ipayload.len() as u32,
        ..Default::default()
    };
    bench("plan + commit, the same invoke as a chain plan", N, |_| {
        let ep = table.get(id).unwrap();
        let ctx = context(&regs, w);
        let code = Code {
            memory: &code,
            window: cw,
        };
        let mut acc = TlbAccess::new(id, ep, &mut tlb);
        let mut sp = SeqPlan::NOTHING;
        plan_invoke(&ictl, &ipayload, &code, &ctx, &mut acc, &mut sp).unwrap();
        let interrupt = sp.interrupt;
        commit_sequence(&sp, &mut regs, &mut acc);
        black_box(interrupt);
    });

    // The sender's part of a message: its control part and payload from the request
    // (what fill_frame does per message), a 32 B write and a 32 B invoke.
    let write_wr = Wqe::write(1, Source::Endpoint { id, offset: 0 }, 32, 64);
    let invoke_wr = Wqe {
        opcode: WrOpcode::Invoke {
            ip: 1,
            mask: 0,
            returns: false,
        },
        ..write_wr
    };
    for (name, wr) in [
        ("message build (control + payload), 32 B write", write_wr),
        ("message build (control + payload), 32 B invoke", invoke_wr),
    ] {
        let mut dst = [0u8; 64];
        bench(name, N, |_| {
            let wr = black_box(&wr);
            let (c, off) = message::control_for(wr, 0, 1, 8192, false);
            message::fill_payload(wr, off, &mut dst[..c.length as usize], &table, false);
            black_box((&c, &dst));
        });
    }

    let q = crossbeam::queue::ArrayQueue::new(4096);
    bench("send queue push + pop (crossbeam ArrayQueue)", N, |i| {
        q.push(black_box(i)).unwrap();
        black_box(q.pop());
    });
    let mut map = std::collections::HashMap::new();
    for k in 0..64u32 {
        map.insert(k.wrapping_mul(0x9E37_79B9), k as usize);
    }
    bench("connection lookup (std HashMap)", N, |i| {
        black_box(map.get(&black_box((i as u32 & 63).wrapping_mul(0x9E37_79B9))));
    });
}
