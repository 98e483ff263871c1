//! Hostile and malformed operations from a connected peer (docs/design.md §3 Exceptions,
//! §10): each is refused, counted by its reason, reported to the sender's work
//! request, and writes nothing — neither memory nor registers.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;
use deposit_transport::wire::{
    cell::{flags, index_of},
    op, ControlRepr, TransportRepr,
};

const T: Duration = Duration::from_secs(10);
const LEN: usize = 4 * 4096;
const NREGS: u32 = 8;

struct Fixture {
    pair: RingPair,
    c: Conns,
    regs: RegWindow,
}

fn fixture(name: &str, rights: Rights, opts: ConnOptions) -> Fixture {
    let pair = RingPair::new(name);
    let regs = pair.server.alloc_registers(NREGS).unwrap();
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        ..opts
    };
    let sep = pair.server.alloc_endpoint(LEN as u64, rights).unwrap();
    let scq = pair.server.create_cq(64);
    let listener = pair.server.listen_with(31, &sep, &scq, &opts).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(LEN as u64, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(1024);
    let client = pair.client.connect([10, 0, 0, 1], 31, &cep, &ccq).unwrap();
    let server = listener.accept(T).unwrap();
    let c = Conns::from_parts(client, server, cep, sep, ccq, listener);
    // Recognisable contents, so that any write would show.
    fill_pattern(&c.sep, 0, LEN, 3, 0);
    for i in 0..NREGS {
        pair.server
            .write_register(regs, i, 0x1000 + u64::from(i))
            .unwrap();
    }
    Fixture { pair, c, regs }
}

impl Fixture {
    fn prot(&self, i: u32, p: RegProt) {
        self.pair
            .server
            .set_register_protection(self.regs, i, p)
            .unwrap();
    }
    fn set(&self, i: u32, v: u64) {
        self.pair.server.write_register(self.regs, i, v).unwrap();
    }

    /// Posts `req`, expects it refused with `status` and counted once as `reason`,
    /// with nothing written at the receiver (memory, registers, events) nor returned to
    /// the sender's result area.
    fn refused(&self, what: &str, req: WorkRequest, status: WcStatus, reason: DropReason) {
        let srv = &self.pair.server;
        let regs0 = register_snapshot(srv, self.regs);
        let mem0 = memory_snapshot(&self.c.sep, LEN);
        let res0 = memory_snapshot(&self.c.cep, 4096);
        let st0 = srv.stats();
        let conn_dropped0 = self.c.server.dropped();
        let arrivals0 = self.c.server.arrivals();
        self.c.client.post(&req.signaled()).unwrap();
        let wc = self
            .c
            .ccq
            .wait_one(T)
            .unwrap_or_else(|| panic!("{what}: no completion"));
        assert_eq!(wc.status, status, "{what}: {wc:?}");
        // The sender learns why, typed and printable (verbs gives a vendor code).
        assert_eq!(wc.remote_reason, Some(reason), "{what}: {wc:?}");
        assert!(reason.to_string().starts_with(reason.name()));
        let st = srv.stats();
        assert_eq!(
            st.dropped(reason) - st0.dropped(reason),
            1,
            "{what}: {reason:?} not counted once: {st:?}"
        );
        assert_eq!(
            st.dropped_total() - st0.dropped_total(),
            1,
            "{what}: counted under another reason too: {st:?}"
        );
        assert_eq!(self.c.server.dropped(), conn_dropped0 + 1, "{what}");
        assert_eq!(self.c.server.arrivals(), arrivals0 + 1, "{what}");
        assert_eq!(
            register_snapshot(srv, self.regs),
            regs0,
            "{what}: registers"
        );
        assert!(
            memory_snapshot(&self.c.sep, LEN) == mem0,
            "{what}: memory written"
        );
        assert!(
            memory_snapshot(&self.c.cep, 4096) == res0,
            "{what}: a value came back"
        );
        assert!(self.c.sep.events().poll().is_none(), "{what}: an event");
        assert_eq!(self.c.server.state(), ConnState::Normal, "{what}");
    }

    /// The connection still works: a plain write lands.
    fn still_works(&self) {
        self.c
            .client
            .post(
                &WorkRequest::write_inline(999, b"still ok", 8)
                    .unwrap()
                    .signaled(),
            )
            .unwrap();
        assert_eq!(self.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
        let mut b = [0u8; 8];
        self.c.sep.read(8, &mut b).unwrap();
        assert_eq!(&b, b"still ok");
    }
}

const RAE: WcStatus = WcStatus::RemoteAccessError;

/// A message for a raw frame: control part and payload.
type RawMsg = (ControlRepr, Vec<u8>);

#[test]
fn register_names_outside_the_window_or_globals_are_refused() {
    let f = fixture("hx_badreg", Rights::ALL, ConnOptions::default());
    for i in 0..NREGS {
        f.prot(i, RegProt::ALL);
    }
    let bad = DropReason::BadRegister;
    let w = || WorkRequest::write_inline(1, b"evil", 0).unwrap();
    f.refused("indirect r8", w().indirect(8), RAE, bad);
    f.refused("indexed r127", w().indexed(127, 0), RAE, bad);
    // The stride register of a post-increment is the one after ra: r7 + 1 is outside.
    f.refused("post-increment r7", w().post_increment(7), RAE, bad);
    f.refused("post-increment r127", w().post_increment(127), RAE, bad);
    f.refused(
        "op1 destination r8",
        WorkRequest::reg_op(1).op1(RegOp::Set, 8, Src::Operand),
        RAE,
        bad,
    );
    f.refused(
        "op2 source r100",
        WorkRequest::reg_op(1).op2(RegOp::Add, 0, Src::Reg(100)),
        RAE,
        bad,
    );
    f.refused(
        "conditional on r9",
        WorkRequest::reg_op(1).cond(Cond::Eq, Src::Operand, 9),
        RAE,
        bad,
    );
    f.refused(
        "conditional rhs r50",
        WorkRequest::reg_op(1).cond(Cond::Eq, Src::Reg(50), 0),
        RAE,
        bad,
    );
    f.refused(
        "register atomic on r8",
        WorkRequest::fetch_add(1, &f.c.cep, 0, 0, 1).on_register(8),
        RAE,
        bad,
    );
    // Global register names into an endpoint that has no global registers.
    f.refused("indirect global(0)", w().indirect(global(0)), RAE, bad);
    f.refused("send to global(0)", w().post_increment(global(0)), RAE, bad);
    f.refused(
        "op1 on global(3)",
        WorkRequest::reg_op(1).op1(RegOp::Add, global(3), Src::Operand),
        RAE,
        bad,
    );
    f.refused(
        "conditional on global(126)",
        WorkRequest::reg_op(1).cond(Cond::Ne, Src::Operand, global(126)),
        RAE,
        bad,
    );
    f.still_works();
}

#[test]
fn register_protection_refuses_what_the_receiver_did_not_grant() {
    let f = fixture("hx_regprot", Rights::ALL, ConnOptions::default());
    f.prot(0, RegProt::READ); // read-only
    f.prot(1, RegProt::INDIRECT); // indirect-only
    f.set(1, 64);
    f.prot(2, RegProt::WRITE); // write-only
    f.prot(3, RegProt::NONE); // receiver-only
    let prot = DropReason::RegisterProtection;
    f.refused(
        "Set on a read-only register",
        WorkRequest::reg_op(1)
            .operand(5)
            .op1(RegOp::Set, 0, Src::Operand),
        RAE,
        prot,
    );
    f.refused(
        "fetch-add on a read-only register",
        WorkRequest::fetch_add(1, &f.c.cep, 0, 0, 1).on_register(0),
        RAE,
        prot,
    );
    f.refused(
        "Add on an indirect-only register",
        WorkRequest::reg_op(1)
            .operand(5)
            .op1(RegOp::Add, 1, Src::Operand),
        RAE,
        prot,
    );
    f.refused(
        "copy of an indirect-only register into a writable one",
        WorkRequest::reg_op(1).op1(RegOp::Set, 2, Src::Reg(1)),
        RAE,
        prot,
    );
    f.refused(
        "register CAS on a write-only register (needs read)",
        WorkRequest::cmp_swap(1, &f.c.cep, 0, 0, 0x1002, 0).on_register(2),
        RAE,
        prot,
    );
    f.refused(
        "a write-only register as an address",
        WorkRequest::write_inline(1, b"evil", 0)
            .unwrap()
            .indirect(2),
        RAE,
        prot,
    );
    f.refused(
        "a receiver-only register as an address",
        WorkRequest::write_inline(1, b"evil", 0)
            .unwrap()
            .post_increment(3),
        RAE,
        prot,
    );
    f.refused(
        "op2 reads a receiver-only register",
        WorkRequest::reg_op(1).op2(RegOp::Xor, 2, Src::Reg(3)),
        RAE,
        prot,
    );
    // The first register operation is allowed, the second is not: nothing of it runs.
    f.refused(
        "allowed op1 with a refused op2",
        WorkRequest::reg_op(1)
            .operand(7)
            .op1(RegOp::Add, 2, Src::Operand)
            .op2(RegOp::Add, 0, Src::Operand),
        RAE,
        prot,
    );
    // Conditionals need no rights: testing the receiver-only register is allowed.
    f.c.client
        .post(
            &WorkRequest::reg_op(2)
                .operand(0x1003)
                .cond(Cond::Eq, Src::Operand, 3)
                .signaled(),
        )
        .unwrap();
    assert_eq!(f.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    let ev = wait_event(&f.pair.client, &f.c.sep, T).expect("the conditional fired");
    assert_eq!(ev.regs[3], 0x1003);
    f.still_works();
}

#[test]
fn addresses_past_the_endpoint_and_denied_rights_are_refused() {
    // The endpoint may be written but neither read nor used for atomics.
    let f = fixture("hx_bounds", Rights::REMOTE_WRITE, ConnOptions::default());
    f.prot(0, RegProt::INDIRECT);
    f.set(0, LEN as u64 - 16);
    f.set(1, 64);
    f.prot(2, RegProt::INDIRECT);
    f.set(2, u64::MAX - 3);
    // A post-increment runs the pointer past the end: the first deposit fits, the
    // second would not and is refused without moving the pointer again.
    f.c.client
        .post(
            &WorkRequest::send_inline(1, &[0xAB; 16], 0)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    assert_eq!(f.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    let mut b = [0u8; 16];
    f.c.sep.read((LEN - 16) as u64, &mut b).unwrap();
    assert_eq!(b, [0xAB; 16]);
    assert_eq!(
        f.pair.server.read_register(f.regs, 0).unwrap(),
        LEN as u64 + 48
    );
    let oob = DropReason::OutOfBounds;
    f.refused(
        "post-increment past the end",
        WorkRequest::send_inline(2, &[0xCD; 16], 0).unwrap(),
        RAE,
        oob,
    );
    f.refused(
        "indirect at a wrapping address",
        WorkRequest::write_inline(3, b"wrap", 0)
            .unwrap()
            .indirect(2),
        RAE,
        oob,
    );
    f.refused(
        "indexed overflow",
        WorkRequest::write_inline(3, b"wrap", 0)
            .unwrap()
            .indexed(2, 100),
        RAE,
        oob,
    );
    f.refused(
        "direct write straddling the end",
        WorkRequest::write_inline(4, b"straddle", LEN as u32 - 4).unwrap(),
        RAE,
        oob,
    );
    // Rights the endpoint does not grant.
    let denied = DropReason::AccessDenied;
    f.refused(
        "read of a write-only endpoint",
        WorkRequest::read(5, &f.c.cep, 0, 64, 0),
        RAE,
        denied,
    );
    f.refused(
        "fetch-add on a write-only endpoint",
        WorkRequest::fetch_add(6, &f.c.cep, 0, 64, 1),
        RAE,
        denied,
    );
    f.refused(
        "compare-and-swap on a write-only endpoint",
        WorkRequest::cmp_swap(7, &f.c.cep, 0, 64, 0, 1),
        RAE,
        denied,
    );
    // A page the receiver made read-only inside a writable endpoint.
    f.c.sep.set_page_rights(2, Rights::REMOTE_READ).unwrap();
    f.refused(
        "write into a read-only page",
        WorkRequest::write_inline(8, b"evil", 2 * 4096 + 100).unwrap(),
        RAE,
        denied,
    );
    f.still_works();
}

#[test]
fn misaligned_atomics_are_invalid_requests() {
    let f = fixture("hx_align", Rights::ALL, ConnOptions::default());
    let mis = DropReason::Misaligned;
    let inv = WcStatus::RemoteInvalidRequest;
    for off in [1u32, 4, 7, 12, 4095] {
        f.refused(
            "misaligned fetch-add",
            WorkRequest::fetch_add(1, &f.c.cep, 0, off, 1),
            inv,
            mis,
        );
        f.refused(
            "misaligned compare-and-swap",
            WorkRequest::cmp_swap(2, &f.c.cep, 0, off, 0, 1),
            inv,
            mis,
        );
    }
    // Aligned, but the word would straddle the end of the endpoint.
    f.refused(
        "atomic past the end",
        WorkRequest::fetch_add(3, &f.c.cep, 0, LEN as u32, 1),
        RAE,
        DropReason::OutOfBounds,
    );
    f.still_works();
}

#[test]
fn sender_forced_interrupts_are_refused_where_the_receiver_forbids_them() {
    let no_forced = ConnOptions {
        allow_forced_interrupts: false,
        report_traps: true,
        ..ConnOptions::default()
    };
    let f = fixture("hx_forced", Rights::ALL, no_forced);
    f.prot(0, RegProt::WRITE);
    let forced = DropReason::ForcedInterruptRefused;
    f.refused(
        "software exception",
        WorkRequest::exception(1, 77),
        RAE,
        forced,
    );
    f.refused(
        "conditional ALWAYS",
        WorkRequest::reg_op(2).cond(Cond::Always, Src::Operand, 0),
        RAE,
        forced,
    );
    f.refused(
        "a write with conditional ALWAYS (nothing written)",
        WorkRequest::write_inline(3, b"evil", 64)
            .unwrap()
            .operand(64)
            .cond(Cond::Always, Src::Operand, 0),
        RAE,
        forced,
    );
    f.refused(
        "a register op with conditional ALWAYS (register unchanged)",
        WorkRequest::reg_op(4)
            .operand(1)
            .op1(RegOp::Add, 0, Src::Operand)
            .cond(Cond::Always, Src::Operand, 0)
            .order(Order::CondLast),
        RAE,
        forced,
    );
    // The connection asked for trap reports: each refusal is on the exception queue.
    let x = f.c.sep.exceptions();
    let reports: Vec<_> = std::iter::from_fn(|| x.poll()).collect();
    assert_eq!(reports.len(), 4, "{reports:?}");
    for r in &reports {
        assert_eq!(
            r.kind,
            EventKind::Trap {
                status: RemoteStatus::RemoteAccessError,
                reason: forced
            }
        );
        assert_eq!(r.conn, f.c.server.local_number());
    }
    assert_eq!(reports[0].opcode, op::EXCEPTION);
    // A real conditional is not a forced interrupt: it still interrupts.
    f.c.client
        .post(
            &WorkRequest::reg_op(5)
                .operand(1)
                .op1(RegOp::Add, 0, Src::Operand)
                .cond(Cond::Eq, Src::Operand, 0)
                .order(Order::CondFirst)
                .signaled(),
        )
        .unwrap();
    assert_eq!(f.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert!(f.c.sep.events().poll().is_none(), "0x1000 != 1");
    f.set(0, 1);
    f.c.client
        .post(
            &WorkRequest::reg_op(6)
                .operand(1)
                .cond(Cond::Eq, Src::Operand, 0)
                .signaled(),
        )
        .unwrap();
    assert_eq!(f.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert!(wait_event(&f.pair.client, &f.c.sep, T).is_some());
    f.still_works();

    // The same requests on a connection that allows forced interrupts do interrupt.
    let g = fixture("hx_forced2", Rights::ALL, ConnOptions::default());
    g.c.client
        .post(&WorkRequest::exception(1, 77).signaled())
        .unwrap();
    assert_eq!(g.c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    let ev = wait_event(&g.pair.client, &g.c.sep, T).expect("exception event");
    assert_eq!((ev.kind, ev.operand), (EventKind::Exception, 77));
}

/// A hostile peer that holds the connection key but not the sequence number: it can
/// only probe. Frames behind the receive window's edge count as duplicates, frames
/// ahead as out of sequence; this finds the edge, then injects malformed operations
/// there. Each is refused by reason and nothing is written.
#[test]
fn raw_frames_with_unknown_opcodes_and_malformed_descriptors_are_refused() {
    // No receive window: a probe ahead of the edge is refused (out of sequence) rather
    // than kept for later, so the probes leave no state behind.
    let f = fixture(
        "hx_raw",
        Rights::ALL,
        ConnOptions {
            receive_window: 0,
            ..ConnOptions::default()
        },
    );
    for i in 0..NREGS {
        f.prot(i, RegProt::ALL);
    }
    let conn = f.c.server.local_number();
    let key = f.c.server.local_key();
    let srv = &f.pair.server;
    let regs0 = register_snapshot(srv, f.regs);
    let mem0 = memory_snapshot(&f.c.sep, LEN);
    let underlay = underlay_between([10, 0, 0, 2], [10, 0, 0, 1]);
    let frame = |seq: u32, msgs: &[(ControlRepr, Vec<u8>)]| {
        raw_frame_with(
            &underlay,
            &TransportRepr {
                dst_conn: conn,
                key,
                seq,
                src_conn: f.c.client.local_number(),
                ..Default::default()
            },
            msgs,
        )
    };
    let unknown = |operand: u32| {
        (
            ControlRepr {
                opcode: 0x3c,
                flags: flags::LAST,
                operand,
                ..Default::default()
            },
            Vec::new(),
        )
    };
    #[derive(Debug, PartialEq)]
    enum Seen {
        Duplicate,
        Ahead,
        Ran,
    }
    let probe = |seq: u32| -> Seen {
        let s0 = srv.stats();
        f.pair.client.send_raw_frame(&frame(seq, &[unknown(seq)]));
        let mut seen = None;
        assert!(wait_until(&f.pair.client, T, || {
            let s = srv.stats();
            seen = if s.duplicates > s0.duplicates {
                Some(Seen::Duplicate)
            } else if s.dropped(DropReason::OutOfSequence) > s0.dropped(DropReason::OutOfSequence) {
                Some(Seen::Ahead)
            } else if s.dropped(DropReason::UnknownOpcode) > s0.dropped(DropReason::UnknownOpcode) {
                Some(Seen::Ran)
            } else {
                None
            };
            seen.is_some()
        }));
        seen.unwrap()
    };
    // Coarse scan in steps of the duplicate window (2^20), then bisect.
    const STEP: u64 = 1 << 20;
    let (mut edge, mut behind) = (None, None);
    for k in 0..(1u64 << 32) / STEP {
        let s = (k * STEP) as u32;
        match probe(s) {
            Seen::Duplicate => {
                behind = Some(s);
                break;
            }
            Seen::Ran => {
                edge = Some(s);
                break;
            }
            Seen::Ahead => {}
        }
    }
    if edge.is_none() {
        // The edge is in [a, b].
        let lo = behind.expect("some probe fell behind the receive edge");
        let (mut a, mut b) = (lo.wrapping_add(1), lo.wrapping_add(STEP as u32));
        for _ in 0..40 {
            let mid = a.wrapping_add(b.wrapping_sub(a) / 2);
            match probe(mid) {
                Seen::Ran => {
                    edge = Some(mid);
                    break;
                }
                Seen::Duplicate => a = mid.wrapping_add(1),
                Seen::Ahead => b = mid.wrapping_sub(1),
            }
        }
    }
    let edge = edge.expect("receive window edge not found");
    let st = srv.stats();
    assert_eq!(st.dropped(DropReason::UnknownOpcode), 1, "{st:?}");
    // Only the probe that hit the edge ran (and was refused as an unknown opcode).
    assert_eq!(f.c.server.arrivals(), 1);
    assert_eq!(f.c.server.dropped(), 1);

    // Now in sequence: malformed operations, one per frame.
    let mut seq = edge.wrapping_add(1);
    let regs_idx = |r: [u8; 4]| index_of(r);
    let compound_write = |desc: [u8; 8], regs: [u8; 4]| {
        let mut p = desc.to_vec();
        p.extend_from_slice(b"evil");
        (
            ControlRepr {
                opcode: op::WRITE,
                flags: flags::LAST | flags::COMPOUND,
                operand: 256,
                index: regs_idx(regs),
                length: p.len() as u32,
                ..Default::default()
            },
            p,
        )
    };
    let cases: Vec<(&str, RawMsg, DropReason)> = vec![
        ("unknown opcode 0x3c", unknown(1), DropReason::UnknownOpcode),
        (
            "NOP is not an operation",
            (
                ControlRepr {
                    opcode: op::NOP,
                    flags: flags::LAST,
                    ..Default::default()
                },
                Vec::new(),
            ),
            DropReason::UnknownOpcode,
        ),
        (
            "unknown register operation code",
            compound_write([0x7f, 0xff, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3]),
            DropReason::BadCompound,
        ),
        (
            "unknown conditional code",
            compound_write([0, 0, 0, 0, 7, 0xff, 0, 0], [0, 1, 2, 3]),
            DropReason::BadCompound,
        ),
        (
            "unknown order",
            compound_write([0, 0, 0, 0, 1, 0xff, 9, 0], [0, 1, 2, 3]),
            DropReason::BadCompound,
        ),
        (
            "reserved descriptor byte",
            compound_write([4, 0xff, 0, 0, 0, 0, 0, 0x80], [0, 1, 2, 3]),
            DropReason::BadCompound,
        ),
        (
            "a forged reply to nothing outstanding",
            (
                ControlRepr {
                    opcode: op::WRITE,
                    flags: flags::LAST | flags::REPLY,
                    index: 12345,
                    length: 8,
                    ..Default::default()
                },
                vec![0xEE; 8],
            ),
            DropReason::BadReply,
        ),
        (
            "register target on a write",
            (
                ControlRepr {
                    opcode: op::WRITE,
                    flags: flags::LAST | flags::REG_TARGET,
                    operand: 256,
                    length: 4,
                    ..Default::default()
                },
                b"evil".to_vec(),
            ),
            DropReason::BadFlags,
        ),
        (
            "fetch-add with a 3-byte operand",
            (
                ControlRepr {
                    opcode: op::FETCH_ADD,
                    flags: flags::LAST,
                    operand: 256,
                    length: 3,
                    ..Default::default()
                },
                vec![0, 0, 1],
            ),
            DropReason::BadLength,
        ),
        (
            "compound flag with a descriptor shorter than 8 bytes",
            (
                ControlRepr {
                    opcode: op::REG_OP,
                    flags: flags::LAST | flags::COMPOUND,
                    length: 4,
                    ..Default::default()
                },
                vec![1, 0xff, 0, 0],
            ),
            DropReason::BadLength,
        ),
    ];
    for (what, msg, reason) in cases {
        let s0 = srv.stats();
        let a0 = f.c.server.arrivals();
        f.pair.client.send_raw_frame(&frame(seq, &[msg]));
        assert!(
            wait_until(&f.pair.client, T, || f.c.server.arrivals() > a0),
            "{what}: not processed; stats {:?}",
            srv.stats()
        );
        let s = srv.stats();
        assert_eq!(s.dropped(reason) - s0.dropped(reason), 1, "{what}: {s:?}");
        assert_eq!(s.dropped_total() - s0.dropped_total(), 1, "{what}: {s:?}");
        seq = seq.wrapping_add(1);
    }
    assert_eq!(register_snapshot(srv, f.regs), regs0);
    assert!(memory_snapshot(&f.c.sep, LEN) == mem0, "memory written");
    assert!(f.c.sep.events().poll().is_none());
    assert_eq!(f.c.server.state(), ConnState::Normal);
}

/// On a shared segment (a bridge floods frames to MACs it has not learned; ports run
/// promiscuous) a node sees frames addressed to other nodes. A connection request for
/// another IP must be left alone, not accepted.
#[test]
fn a_connection_request_for_another_node_is_not_accepted() {
    use deposit_transport::cm::CmMessage;
    use deposit_transport::wire::hflags;
    let pair = RingPair::new("hx_notours");
    let sep = pair
        .server
        .alloc_endpoint(4096, Rights::REMOTE_WRITE)
        .unwrap();
    let scq = pair.server.create_cq(16);
    let l = pair.server.listen(41, &sep, &scq).unwrap();
    let req = CmMessage::ConnectReq {
        request: 1,
        service: 41,
        conn: 0x1234_5678,
        key: 0x0bad_cafe,
        isn: 1000,
        max_frame: 1514,
        mac: [2, 0, 10, 0, 0, 2],
        cookie: 0,
        secure: false,
        ephemeral: [9; 32],
        handshake: None,
    };
    let mut p = [0u8; deposit_transport::wire::cm::CM_PAYLOAD_MAX];
    let (c, n) = req.emit(&[], &mut p);
    // From 10.0.0.2 to 10.0.0.77 (MAC and IP): not this node (10.0.0.1).
    let f = raw_frame_with(
        &underlay_between([10, 0, 0, 2], [10, 0, 0, 77]),
        &TransportRepr {
            flags: hflags::CM,
            ..Default::default()
        },
        &[(c, p[..n].to_vec())],
    );
    let before = pair.server.stats().dropped(DropReason::NotOurs);
    pair.client.send_raw_frame(&f);
    let counted = wait_until(&pair.client, Duration::from_secs(2), || {
        pair.server.stats().dropped(DropReason::NotOurs) > before
    });
    match l.accept(Duration::from_millis(300)) {
        Ok(conn) => panic!(
            "accepted a connection meant for 10.0.0.77 (connection {})",
            conn.local_number()
        ),
        Err(Error::Timeout(..)) => {}
        Err(e) => panic!("{e}"),
    }
    assert!(
        counted,
        "the frame for another node was not counted as NotOurs"
    );
}
