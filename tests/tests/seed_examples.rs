//! The seed's worked examples (§3.4–3.5 of the hybrid deposit paper) on two in-process
//! nodes over a ring pair: the receiver (server) sets up and protects its address
//! registers, the sender (client) names them. Every test checks the exact memory image,
//! the exact register values and exactly which messages raised events.

use std::time::Duration;

use deposit::*;
use deposit_tests::seed_priority::{
    enqueue as priority_enqueue, landed, pointers_after, FINAL_LEVEL, HIGH, HIGH_BASE, INTERRUPTS,
    JOBS, LEVEL, LOW, LOW_BASE, SLOT,
};
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);
/// Endpoint size on both sides.
const LEN: usize = FIXTURE_LEN;

fn fixture(name: &str, nregs: u32, rights: Rights) -> RegFixture {
    RegFixture::new(name, nregs, rights, |_, _| {})
}

fn put(img: &mut [u8], off: u64, data: &[u8]) {
    img[off as usize..off as usize + data.len()].copy_from_slice(data);
}

// ---------------------------------------------------------------------------------
// 1. Store indirect with post-increment: strided deposit, variable strides.
// ---------------------------------------------------------------------------------

#[test]
fn strided_deposit_through_post_increment_with_varying_strides() {
    let f = fixture("seed_stride", 8, Rights::REMOTE_WRITE);
    // r0: the DMA pointer (the sender may only use it as an address); r1: the stride,
    // which the receiver changes between messages.
    f.set(0, 1000, RegProt::INDIRECT);
    f.set(1, 16, RegProt::NONE);
    let mut img = vec![0u8; LEN];
    let mut expect_at = 1000u64;
    let mut id = 0u64;
    for (stride, count) in [(16u64, 3u8), (40, 2), (0, 2), (100, 2)] {
        f.pair.server.write_register(f.regs, 1, stride).unwrap();
        let mut reqs = Vec::new();
        for _ in 0..count {
            id += 1;
            let data = [id as u8; 8];
            reqs.push(WorkRequest::send_inline(id, &data, 0).unwrap());
            put(&mut img, expect_at, &data);
            expect_at += stride;
        }
        f.run(&reqs, WcStatus::Success);
        assert_eq!(f.reg(0), expect_at, "pointer after stride {stride}");
    }
    // A multi-cell DMA block (from the sender's endpoint) through the same pointer.
    f.pair.server.write_register(f.regs, 1, 300).unwrap();
    fill_pattern(&f.c.cep, 0, 250, 9, 0);
    f.run(
        &[WorkRequest::write(50, &f.c.cep, 0, 250, 0).post_increment(0)],
        WcStatus::Success,
    );
    let block: Vec<u8> = (0..250).map(|i| pattern(9, i)).collect();
    put(&mut img, expect_at, &block);
    expect_at += 300;
    assert_eq!(f.reg(0), expect_at);
    assert_eq!(
        f.reg(1),
        300,
        "the stride register is not changed by the deposit"
    );

    // Variant: `indirect(r) + op1(Add, r, operand)`, the operand carrying the stride;
    // every message picks its own stride.
    f.set(2, 20_000, RegProt::INDIRECT | RegProt::WRITE);
    let mut at = 20_000u64;
    let mut reqs = Vec::new();
    for (k, stride) in [24u32, 8, 56, 4, 0, 1000].into_iter().enumerate() {
        let data = [0xA0 + k as u8; 4];
        reqs.push(
            WorkRequest::write_inline(100 + k as u64, &data, 0)
                .unwrap()
                .indirect(2)
                .operand(stride)
                .op1(RegOp::Add, 2, Src::Operand),
        );
        put(&mut img, at, &data);
        at += u64::from(stride);
    }
    f.run(&reqs, WcStatus::Success);
    assert_eq!(f.reg(2), at);

    // The seed's `<r_i> <- <r_i> + <r_j>` form, the stride register itself growing by
    // the operand in op2 (op1 sees the old stride, op2 runs after it).
    f.set(3, 30_000, RegProt::INDIRECT | RegProt::WRITE);
    f.set(4, 10, RegProt::READ | RegProt::WRITE);
    let (mut at, mut stride) = (30_000u64, 10u64);
    let mut reqs = Vec::new();
    for k in 0..5u8 {
        let data = [0xC0 + k; 3];
        reqs.push(
            WorkRequest::write_inline(200 + k as u64, &data, 0)
                .unwrap()
                .indirect(3)
                .operand(8)
                .op1(RegOp::Add, 3, Src::Reg(4))
                .op2(RegOp::Add, 4, Src::Operand),
        );
        put(&mut img, at, &data);
        at += stride;
        stride += 8;
    }
    f.run(&reqs, WcStatus::Success);
    assert_eq!((f.reg(3), f.reg(4)), (at, stride));

    assert!(
        f.mem() == img,
        "memory image differs from the strided deposits"
    );
    assert!(f.events().is_empty(), "no message asked for an interrupt");
    assert_eq!(f.c.server.dropped(), 0);
}

// ---------------------------------------------------------------------------------
// 2. Priority queueing with conditional interrupts.
// ---------------------------------------------------------------------------------

#[test]
fn priority_queueing_interrupts_only_above_the_receivers_level() {
    let f = fixture("seed_prio", 8, Rights::REMOTE_WRITE);
    // The queue pointers and sizes, the level (see `seed_priority`). The sender may
    // only use the pointers indirectly and may not touch the sizes; it or-s into the
    // level.
    f.set(HIGH.into(), HIGH_BASE, RegProt::INDIRECT);
    f.set((HIGH + 1).into(), SLOT, RegProt::NONE);
    f.set(LOW.into(), LOW_BASE, RegProt::INDIRECT);
    f.set((LOW + 1).into(), SLOT, RegProt::NONE);
    f.set(LEVEL.into(), 0, RegProt::WRITE);
    let reqs: Vec<_> = JOBS
        .iter()
        .enumerate()
        .map(|(i, j)| j.request(i as u64))
        .collect();
    let wcs = f.run(&reqs, WcStatus::Success);

    let ev = f.events();
    assert_eq!(ev.len(), INTERRUPTS.len(), "{ev:?}");
    // Each side's record names the other's connection number: a completion's peer_conn
    // is the conn of the events its request raised, and the other way round.
    for e in &ev {
        assert!(wcs
            .iter()
            .all(|wc| wc.peer_conn == e.conn && e.peer_conn == wc.conn));
    }
    // The device counts them too (its counters are the worker's, every one of them).
    assert_eq!(f.pair.server.stats().events, INTERRUPTS.len() as u64);
    let conn = f.c.server.local_number();
    for (e, (prio, ea, regs)) in ev.iter().zip(INTERRUPTS) {
        assert_eq!(e.kind, EventKind::Interrupt);
        assert_eq!(e.conn, conn);
        assert_eq!(e.operand, prio, "{e:?}");
        assert_eq!(e.ea, ea, "{e:?}");
        // The job's length; ra (the queue pointer after its increment), rb (level
        // after the or), rd.
        let job = landed()
            .find(|&(at, _)| at == ea)
            .expect("a job lands there");
        assert_eq!(e.len as usize, job.1.len(), "{e:?}");
        assert_eq!(e.regs, regs, "{e:?}");
    }
    assert_eq!(f.reg(LEVEL.into()), FINAL_LEVEL);
    assert_eq!((f.reg(HIGH.into()), f.reg(LOW.into())), pointers_after(0));
    let mut img = vec![0u8; LEN];
    for (at, data) in landed() {
        put(&mut img, at, data);
    }
    assert!(f.mem() == img);

    // The host serves the queues and lowers its level: the next message interrupts
    // again, then a lower one does not.
    f.pair
        .server
        .write_register(f.regs, LEVEL.into(), 0)
        .unwrap();
    f.run(
        &[
            priority_enqueue(10, b"job-e low 1", LOW, LEVEL, 1),
            priority_enqueue(11, b"job-f low 1", LOW, LEVEL, 1),
        ],
        WcStatus::Success,
    );
    let ev = f.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!((ev[0].operand, ev[0].ea), (1, pointers_after(0).1));
    assert_eq!(f.reg(LEVEL.into()), 1);
}

// ---------------------------------------------------------------------------------
// 3. Several queues, a bit vector of non-empty queues, interrupts blocked by the top
//    bit of the level register.
// ---------------------------------------------------------------------------------

#[test]
fn queue_bit_vector_with_interrupts_blocked_by_the_top_bit() {
    let f = fixture("seed_bitvec", 16, Rights::REMOTE_WRITE);
    const TOP: u64 = 1 << 63;
    // Queue q: pointer r(2q) at 4096 * (q + 1), stride r(2q+1) = 16. Level r10.
    for q in 0..5u32 {
        f.set(2 * q, 4096 * (u64::from(q) + 1), RegProt::INDIRECT);
        f.set(2 * q + 1, 16, RegProt::NONE);
    }
    let level = 10u8;
    f.set(level as u32, TOP, RegProt::WRITE);
    let append =
        |id: u64, q: u8| priority_enqueue(id, &[0x10 + id as u8; 16], 2 * q, level, 1 << q);
    let mut img = vec![0u8; LEN];
    let mut fill = [0u64; 5];
    let mut expect = |img: &mut Vec<u8>, id: u64, q: usize| {
        put(
            img,
            4096 * (q as u64 + 1) + 16 * fill[q],
            &[0x10 + id as u8; 16],
        );
        fill[q] += 1;
    };
    // Blocked: even appends to empty queues (level bits all lower) do not interrupt.
    let blocked = [(0u64, 2u8), (1, 0), (2, 3), (3, 2), (4, 0)];
    let reqs: Vec<_> = blocked.iter().map(|&(id, q)| append(id, q)).collect();
    f.run(&reqs, WcStatus::Success);
    for &(id, q) in &blocked {
        expect(&mut img, id, q as usize);
    }
    assert!(
        f.events().is_empty(),
        "interrupts are blocked by the top bit"
    );
    assert_eq!(
        f.reg(level as u32),
        TOP | 0b1101,
        "bit vector of non-empty queues"
    );

    // The host unblocks (clears the top bit, keeps the vector): an append to a queue
    // above every non-empty one interrupts, one below does not.
    f.pair
        .server
        .write_register(f.regs, level as u32, 0b1101)
        .unwrap();
    f.run(
        &[append(5, 1), append(6, 4), append(7, 3)],
        WcStatus::Success,
    );
    for (id, q) in [(5, 1), (6, 4), (7, 3)] {
        expect(&mut img, id, q);
    }
    let ev = f.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].operand, 1 << 4);
    assert_eq!(ev[0].ea, 4096 * 5);
    assert_eq!(f.reg(level as u32), 0b11111);
    for q in 0..5u32 {
        assert_eq!(
            f.reg(2 * q),
            4096 * (u64::from(q) + 1) + 16 * fill[q as usize]
        );
    }
    assert!(f.mem() == img);
}

// ---------------------------------------------------------------------------------
// 4. Fetch-and-increment and compare-and-swap, on memory and on registers.
// ---------------------------------------------------------------------------------

#[test]
fn fetch_and_increment_and_compare_and_swap_on_memory_and_registers() {
    let f = fixture("seed_atomic", 8, Rights::ALL);
    f.c.sep.write(512, &100u64.to_ne_bytes()).unwrap();
    f.c.sep.write(520, &5u64.to_ne_bytes()).unwrap();
    f.set(0, 7, RegProt::READ | RegProt::WRITE);
    f.set(1, 42, RegProt::READ | RegProt::WRITE);
    f.set(2, 0xdead_beef_0000_0001, RegProt::READ | RegProt::WRITE);

    // Fetch-and-increment a memory word five times: the old values 100..=104.
    let reqs: Vec<_> = (0..5u64)
        .map(|i| WorkRequest::fetch_add(i, &f.c.cep, 8 * i, 512, 1))
        .collect();
    f.run(&reqs, WcStatus::Success);
    for i in 0..5u64 {
        assert_eq!(f.c.cep.load_u64(8 * i).unwrap(), 100 + i);
    }
    assert_eq!(f.c.sep.load_u64(512).unwrap(), 105);

    // ... and a register three times.
    let reqs: Vec<_> = (0..3u64)
        .map(|i| WorkRequest::fetch_add(10 + i, &f.c.cep, 64 + 8 * i, 0, 1).on_register(0))
        .collect();
    f.run(&reqs, WcStatus::Success);
    for i in 0..3u64 {
        assert_eq!(f.c.cep.load_u64(64 + 8 * i).unwrap(), 7 + i);
    }
    assert_eq!(f.reg(0), 10);

    // Compare-and-swap: success then failure, on memory and on registers; the old value
    // always comes back. 64-bit operands travel whole.
    f.run(
        &[
            WorkRequest::cmp_swap(20, &f.c.cep, 128, 520, 5, 9),
            WorkRequest::cmp_swap(21, &f.c.cep, 136, 520, 5, 11),
            WorkRequest::cmp_swap(22, &f.c.cep, 144, 0, 42, 43).on_register(1),
            WorkRequest::cmp_swap(23, &f.c.cep, 152, 0, 42, 44).on_register(1),
            WorkRequest::cmp_swap(24, &f.c.cep, 160, 0, 0xdead_beef_0000_0001, u64::MAX)
                .on_register(2),
            WorkRequest::fetch_add(25, &f.c.cep, 168, 0, 1 << 40).on_register(2),
        ],
        WcStatus::Success,
    );
    let got: Vec<u64> = (0..6)
        .map(|i| f.c.cep.load_u64(128 + 8 * i).unwrap())
        .collect();
    assert_eq!(got, [5, 9, 42, 43, 0xdead_beef_0000_0001, u64::MAX]);
    assert_eq!(f.c.sep.load_u64(520).unwrap(), 9);
    assert_eq!(f.reg(1), 43);
    assert_eq!(f.reg(2), (1u64 << 40).wrapping_sub(1));
    // Nothing but the two words changed in the receiver's memory.
    let mut img = vec![0u8; LEN];
    put(&mut img, 512, &105u64.to_ne_bytes());
    put(&mut img, 520, &9u64.to_ne_bytes());
    assert!(f.mem() == img);
    assert!(f.events().is_empty());
    // Every atomic answered with its old value: 5 + 3 + 6 replies.
    assert_eq!(f.pair.server.stats().replies_tx, 14);
}

// ---------------------------------------------------------------------------------
// 5. A sender that may use a queue pointer only indirectly can neither read nor
//    overwrite it.
// ---------------------------------------------------------------------------------

#[test]
fn a_sender_cannot_read_or_overwrite_an_indirect_only_queue_pointer() {
    let f = fixture("seed_protect", 8, Rights::ALL);
    f.set(0, 2048, RegProt::INDIRECT); // queue pointer
    f.set(1, 64, RegProt::NONE); // message size
    f.set(2, 0, RegProt::READ | RegProt::WRITE); // the sender's own scratch register
    let regs0 = register_snapshot(&f.pair.server, f.regs);
    let mem0 = f.mem();
    let before = f
        .pair
        .server
        .stats()
        .dropped(DropReason::RegisterProtection);
    let hostile = [
        // Read it: a register fetch-and-add of 0 would return its value.
        WorkRequest::fetch_add(1, &f.c.cep, 0, 0, 0).on_register(0),
        // Read-modify-write it.
        WorkRequest::cmp_swap(2, &f.c.cep, 8, 0, 2048, 0).on_register(0),
        // Overwrite it.
        WorkRequest::reg_op(3)
            .operand(0)
            .op1(RegOp::Set, 0, Src::Operand),
        WorkRequest::reg_op(4)
            .operand(4096)
            .op1(RegOp::Add, 0, Src::Operand),
        // Copy it into a register the sender may read.
        WorkRequest::reg_op(5).op1(RegOp::Set, 2, Src::Reg(0)),
        WorkRequest::reg_op(6).op2(RegOp::Add, 2, Src::Reg(0)),
        // Change the message size.
        WorkRequest::reg_op(7)
            .operand(1)
            .op1(RegOp::Set, 1, Src::Operand),
        WorkRequest::fetch_add(8, &f.c.cep, 16, 0, 0).on_register(1),
        // A legitimate deposit combined with an overwrite of the pointer: refused whole.
        WorkRequest::send_inline(9, b"smuggled", 0)
            .unwrap()
            .operand(0)
            .op1(RegOp::Set, 0, Src::Operand),
    ];
    f.run(&hostile, WcStatus::RemoteAccessError);
    assert_eq!(
        f.pair
            .server
            .stats()
            .dropped(DropReason::RegisterProtection)
            - before,
        hostile.len() as u64
    );
    assert_eq!(f.c.server.dropped(), hostile.len() as u64);
    assert_eq!(register_snapshot(&f.pair.server, f.regs), regs0);
    assert!(f.mem() == mem0, "a refused message wrote memory");
    assert_eq!(
        memory_snapshot(&f.c.cep, 64),
        vec![0u8; 64],
        "no value came back to the sender"
    );

    // Using it indirectly is what the sender may do.
    f.run(
        &[
            WorkRequest::send_inline(10, b"msg one", 0).unwrap(),
            WorkRequest::send_inline(11, b"msg two", 0).unwrap(),
        ],
        WcStatus::Success,
    );
    let mut img = mem0;
    put(&mut img, 2048, b"msg one");
    put(&mut img, 2112, b"msg two");
    assert!(f.mem() == img);
    assert_eq!(f.reg(0), 2176);
    assert_eq!(f.reg(1), 64);
    assert_eq!(f.reg(2), 0);
}

// ---------------------------------------------------------------------------------
// 6. Send/receive as the degenerate case.
// ---------------------------------------------------------------------------------

#[test]
fn send_receive_is_the_degenerate_case_polled_by_arrival_count() {
    let f = fixture("seed_send", 4, Rights::REMOTE_WRITE);
    const SLOT: usize = 256;
    const BASE: u64 = 4096;
    f.set(0, BASE, RegProt::INDIRECT);
    f.set(1, SLOT as u64, RegProt::NONE);
    let sizes = [1usize, 31, 32, 33, 100, 200, 255, 256];
    let mut off = 0u64;
    for (i, &n) in sizes.iter().enumerate() {
        fill_pattern(&f.c.cep, off as usize, n, 21, i as u64 * 1000);
        // Unsignaled: the receiver learns of arrivals by polling its counter only.
        f.c.client
            .post(&WorkRequest::send(i as u64, &f.c.cep, off, n as u32, 0))
            .unwrap();
        off += n as u64;
    }
    assert!(
        wait_until(&f.pair.client, T, || f.c.server.arrivals()
            == sizes.len() as u64),
        "arrivals {}",
        f.c.server.arrivals()
    );
    let mut img = vec![0u8; LEN];
    for (i, &n) in sizes.iter().enumerate() {
        check_pattern(&f.c.sep, BASE as usize + i * SLOT, n, 21, i as u64 * 1000).unwrap();
        let data: Vec<u8> = (0..n as u64)
            .map(|k| pattern(21, i as u64 * 1000 + k))
            .collect();
        put(&mut img, BASE + (i * SLOT) as u64, &data);
    }
    assert!(f.mem() == img);
    assert_eq!(f.reg(0), BASE + (sizes.len() * SLOT) as u64);
    assert!(f.events().is_empty(), "a send raises no event");
    assert!(
        f.c.ccq.poll_one().is_none(),
        "unsignaled sends complete silently"
    );

    // The receiver consumes the buffers and reposts them: the pointer goes back.
    f.pair.server.write_register(f.regs, 0, BASE).unwrap();
    for i in 0..3u8 {
        f.c.client
            .post(&WorkRequest::send_inline(100 + i as u64, &[0xE0 | i; 8], 0).unwrap())
            .unwrap();
    }
    assert!(wait_until(&f.pair.client, T, || f.c.server.arrivals() == 11));
    for i in 0..3usize {
        put(&mut img, BASE + (i * SLOT) as u64, &[0xE0 | i as u8; 8]);
    }
    assert!(f.mem() == img);
    assert_eq!(f.reg(0), BASE + 3 * SLOT as u64);
}

// ---------------------------------------------------------------------------------
// 7. Many senders appending to one queue through an endpoint's global registers.
// ---------------------------------------------------------------------------------

#[test]
fn sixteen_connections_append_to_one_queue_through_a_global_register() {
    const CONNS: usize = 16;
    const PER: usize = 64;
    const REC: usize = 32;
    const BASE: u64 = 4096;
    let pair = RingPair::new("seed_append");
    let sep = pair
        .server
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let globals = pair.server.alloc_registers(2).unwrap();
    pair.server.write_register(globals, 0, BASE).unwrap();
    pair.server
        .set_register_protection(globals, 0, RegProt::INDIRECT)
        .unwrap();
    pair.server.write_register(globals, 1, REC as u64).unwrap();
    sep.set_global_registers(globals).unwrap();
    let scq = pair.server.create_cq(64);
    // No per-connection window at all: the global registers are enough.
    let l = pair.server.listen(13, &sep, &scq).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(CONNS * PER + 16);
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        let c = pair.client.connect([10, 0, 0, 1], 13, &cep, &ccq).unwrap();
        let s = l.accept(T).unwrap();
        conns.push((c, s));
    }
    let record = |c: usize, k: usize| {
        let mut r = [0u8; REC];
        r[..4].copy_from_slice(&(c as u32).to_le_bytes());
        r[4..8].copy_from_slice(&(k as u32).to_le_bytes());
        r[8..16].copy_from_slice(b"appendbw");
        r[16..].fill(0x40 | c as u8);
        r
    };
    for k in 0..PER {
        for (c, (conn, _)) in conns.iter().enumerate() {
            conn.post(
                &WorkRequest::send_inline((c * PER + k) as u64, &record(c, k), global(0))
                    .unwrap()
                    .signaled(),
            )
            .unwrap();
        }
    }
    for wc in wait_completions(&ccq, CONNS * PER, Duration::from_secs(20)) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    for (_, s) in &conns {
        assert_eq!(s.arrivals(), PER as u64);
    }
    let end = BASE + (CONNS * PER * REC) as u64;
    assert_eq!(pair.server.read_register(globals, 0).unwrap(), end);
    // Every record exactly once, whole, and each sender's in its posting order.
    let mut seen = vec![[false; PER]; CONNS];
    let mut next = [0usize; CONNS];
    for slot in 0..CONNS * PER {
        let mut r = [0u8; REC];
        sep.read((BASE as usize + slot * REC) as u64, &mut r)
            .unwrap();
        let c = u32::from_le_bytes(r[..4].try_into().unwrap()) as usize;
        let k = u32::from_le_bytes(r[4..8].try_into().unwrap()) as usize;
        assert!(c < CONNS && k < PER, "slot {slot}: garbage record {r:?}");
        assert_eq!(r, record(c, k), "slot {slot}: torn record");
        assert!(!seen[c][k], "slot {slot}: record ({c}, {k}) twice");
        seen[c][k] = true;
        assert_eq!(k, next[c], "sender {c}'s records out of order");
        next[c] += 1;
    }
    check_zero(&sep, 0, BASE as usize).unwrap();
    check_zero(&sep, end as usize, LEN - end as usize).unwrap();
    assert_eq!(pair.server.stats().dropped_total(), 0);
}
