//! Hand-made starting inputs of each target: frames a `FrameWriter` built, control
//! parts and descriptors of every kind, real CM messages, rigs and messages of every
//! opcode, step sequences that exercise each kind of step, ARP, ping, neighbour
//! discovery and ping6 frames as Linux sends them, so that fuzzing starts deep in the decoders instead of at their
//! first length check.

use super::wire::{fixup, neigh_fixup, underlay};
use crate::wire::arp::{ArpRepr, BROADCAST_MAC};
use crate::wire::cm::{CmMessage, RejectReason, CM_PAYLOAD_MAX};
use crate::wire::compound::{CompoundRepr, Cond, CondRepr, OpSource, Order, RegOp, RegOpRepr};
use crate::wire::icmp::{emit_echo_reply, EchoRequest, IcmpPacket};
use crate::wire::ndp::{
    emit_advert, emit_echo_reply6, emit_solicit, icmpv6_checksum, EchoRequest6, UNSPECIFIED,
};
use crate::wire::{
    flags, hflags, op, ControlPacket, ControlRepr, FrameWriter, TransportPacket, TransportRepr,
};

/// The seeds of target `name` (empty for an unknown one).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "frame" => frames(),
        "cell" => cells(),
        "compound" => compounds(),
        "cm" => cms(),
        "plan" => plans(),
        "node" => nodes(),
        "neigh_wire" => neighs(),
        _ => Vec::new(),
    }
}

fn header(dst_conn: u32, flags: u8) -> TransportRepr {
    TransportRepr {
        flags,
        cells: 0,
        dst_conn,
        key: 0x0123_4567_89ab_cdef,
        seq: 1000,
        ack: 77,
        credits: 64,
        acked: 0x1234,
        src_conn: 5,
    }
}

fn control(opcode: u8, fl: u8, operand: u32, index: u32, length: u32) -> ControlRepr {
    ControlRepr {
        opcode,
        mask: 0xa5,
        flags: fl,
        operand,
        index,
        length,
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// A section of a frame: its header and messages.
type Section = (TransportRepr, Vec<(ControlRepr, Vec<u8>)>);

/// A frame of sections, over IPv4.
fn frame_of(sections: &[Section]) -> Vec<u8> {
    frame_over(&underlay(), sections)
}

/// The IPv6 underlay of the IPv6 seeds: fd00::1 to fd00::2.
fn underlay6() -> crate::wire::UnderlayRepr {
    let ip = |last: u8| {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        std::net::IpAddr::from(a)
    };
    crate::wire::UnderlayRepr {
        src_ip: ip(1),
        dst_ip: ip(2),
        ..underlay()
    }
}

/// A frame of sections over `underlay` (either family).
fn frame_over(underlay: &crate::wire::UnderlayRepr, sections: &[Section]) -> Vec<u8> {
    let mut buf = vec![0u8; 9014];
    let mut w = FrameWriter::new(&mut buf, underlay, &sections[0].0).expect("frame");
    for (i, (h, msgs)) in sections.iter().enumerate() {
        if i > 0 {
            assert!(w.begin_section(h, 0));
        }
        for (c, p) in msgs {
            w.push(c, p).expect("message fits");
        }
        // A sealed section's seal cell (the cells left as they are: the target reads
        // them as messages either way).
        w.seal(|_, _, cell| cell.fill(0x11));
    }
    let len = w.finish();
    buf.truncate(len);
    buf
}

fn frames() -> Vec<Vec<u8>> {
    let desc = descriptors()[1].to_bytes();
    let mut compound = desc.to_vec();
    compound.extend_from_slice(&data(40, 3));
    let msgs = vec![
        (control(op::WRITE, flags::LAST, 64, 0, 1), data(1, 1)),
        (control(op::WRITE, 0, 128, 0, 100), data(100, 2)),
        (
            control(op::WRITE_MASKED, flags::LAST, 0, 0x0102_0304, 32),
            data(32, 3),
        ),
        (
            control(op::WRITE, flags::COMPOUND | flags::LAST, 8, 0x0001_0203, 48),
            compound,
        ),
        (control(op::SACK, 0, 0, 0xffff_0000, 0), Vec::new()),
        (
            control(op::TOKEN_READ, flags::LAST, 0, 0, 32),
            token_read(7, 96, 1000),
        ),
    ];
    let one = frame_of(&[(header(17, hflags::ACK), msgs.clone())]);
    let three = frame_of(&[
        (header(17, hflags::ACK), msgs[..2].to_vec()),
        (header(18, hflags::ACK_REQ), Vec::new()),
        (header(19, 0), msgs[2..].to_vec()),
    ]);
    let ack_only = frame_of(&[(header(17, hflags::ACK), Vec::new())]);
    // Sealed sections only (no CRC, a zero trailer), and sealed beside plain.
    let sealed = frame_of(&[
        (header(17, hflags::ACK | hflags::SEALED), msgs[..2].to_vec()),
        (header(18, hflags::SEALED), msgs[2..].to_vec()),
    ]);
    let mixed = frame_of(&[
        (header(17, hflags::SEALED), msgs[..2].to_vec()),
        (header(19, hflags::ACK), msgs[2..].to_vec()),
    ]);
    let mut cm = vec![0u8; 1514];
    let n = cm_messages()[0]
        .write_frame(b"hello", &underlay(), &mut cm)
        .expect("CM frame");
    cm.truncate(n);
    // Over IPv6: one section, and sealed beside plain.
    let one6 = frame_over(&underlay6(), &[(header(17, hflags::ACK), msgs.clone())]);
    let mixed6 = frame_over(
        &underlay6(),
        &[
            (header(17, hflags::SEALED), msgs[..2].to_vec()),
            (header(19, hflags::ACK), msgs[2..].to_vec()),
        ],
    );
    let mut out = Vec::new();
    for (i, f) in [one, three, ack_only, cm, sealed, mixed, one6, mixed6]
        .into_iter()
        .enumerate()
    {
        for mode in [0, fixup::CHECKS | fixup::CRC] {
            let mut s = vec![mode, i as u8, 0x35];
            s.extend_from_slice(&f);
            out.push(s);
        }
    }
    out
}

fn cells() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let controls = [
        control(op::WRITE, flags::LAST, 4096, 0x0001_0203, 100),
        control(op::READ, flags::COMPOUND | (2 << 3), 8, 0x8081_0203, 24),
        control(op::NAK, 0, 99, 0x0000_0400, 0),
        control(
            op::INVOKE,
            flags::LAST | flags::INVOKE_REGS,
            1,
            0x8000_0002,
            40,
        ),
        control(op::CM_CONNECT_REQ, 0, 7, 18515, u32::MAX),
        control(op::TOKEN_READ, flags::LAST, 0, 0, 32),
    ];
    for (i, c) in controls.iter().enumerate() {
        let mut b = [0u8; 32];
        c.emit(&mut ControlPacket::new_unchecked(&mut b[..16]));
        let h = header(
            i as u32 * 1000 + 1,
            [hflags::ACK, hflags::CM, hflags::MORE][i % 3],
        );
        let mut hb = [0u8; 32];
        h.emit(&mut TransportPacket::new_unchecked(&mut hb[..]));
        // The control part over the header's first 16 bytes.
        hb[..16].copy_from_slice(&b[..16]);
        out.push(hb.to_vec());
        out.push(b[..16].to_vec());
    }
    out
}

/// The payload of a `TOKEN_READ`: the token, the offset in its range, the reply's
/// control part asking for `len` bytes.
fn token_read(token: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut p = token.to_be_bytes().to_vec();
    p.extend_from_slice(&offset.to_be_bytes());
    let reply = control(op::WRITE, flags::REPLY, 0, 0, len);
    let mut b = [0u8; 16];
    reply.emit(&mut ControlPacket::new_unchecked(&mut b[..]));
    p.extend_from_slice(&b);
    p
}

fn descriptors() -> Vec<CompoundRepr> {
    let r = |op, src| RegOpRepr { op, src };
    vec![
        CompoundRepr::NONE,
        CompoundRepr {
            op1: r(RegOp::Add, OpSource::Operand),
            op2: r(RegOp::Or, OpSource::Reg(0x81)),
            cond: CondRepr {
                cond: Cond::GtS,
                rhs: OpSource::Reg(3),
            },
            order: Order::CondLast,
        },
        CompoundRepr {
            op1: r(RegOp::MinS, OpSource::Reg(2)),
            op2: r(RegOp::Shl, OpSource::Operand),
            cond: CondRepr {
                cond: Cond::Eq,
                rhs: OpSource::Operand,
            },
            order: Order::CondAfterOp1,
        },
        CompoundRepr {
            op1: r(RegOp::Neg, OpSource::Reg(1)),
            op2: r(RegOp::None, OpSource::Operand),
            cond: CondRepr {
                cond: Cond::Always,
                rhs: OpSource::Operand,
            },
            order: Order::CondFirst,
        },
    ]
}

/// A rig for `plan` (and `compound`'s second half): window 0..16 and globals 16..24 of
/// every protection, small values, a two-page endpoint with every right.
fn rig(forced: bool) -> Vec<u8> {
    let mut b = vec![0, 16, 16, 8];
    b.extend((0..32u8).map(|i| i * 2));
    b.extend([0x77; 14]);
    b.extend([0x45, 0x12]);
    b.push(u8::from(forced));
    b.push(4);
    b.extend_from_slice(&8192u16.to_be_bytes());
    b.extend([7, 7, 7, 0x87]);
    b
}

fn compounds() -> Vec<Vec<u8>> {
    descriptors()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut b = d.to_bytes().to_vec();
            b.extend(rig(i % 2 == 0));
            b.extend([1, 0, 0x40, 1, 2, 3, 4]);
            b
        })
        .collect()
}

fn cm_messages() -> Vec<CmMessage> {
    // Built by parsing their bytes: what a peer sends, whatever fields the messages gain.
    let parse = |opcode, operand, index, payload: &[u8]| {
        let c = control(opcode, 0, operand, index, payload.len() as u32);
        CmMessage::parse(&c, payload).expect("a CM message")
    };
    // Version 13: a request's fields are 131 bytes (flags at 34: 1 sealed, 2 handshake;
    // the ephemeral key; the handshake, zero without its flag), a reply's 73 (flags at
    // 24, ephemeral key, tag).
    let mut req = data(131, 9);
    req[20..26].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    let mut secure_req = req.clone();
    secure_req[34] = 3;
    req[34] = 0;
    req[67..].fill(0); // no handshake yet (the first request)
    let mut secure_rep = data(73, 4);
    secure_rep[24] = 1;
    let mut rep = data(73, 4);
    rep[24] = 0;
    vec![
        parse(op::CM_CONNECT_REQ, 7, 101, &req),
        parse(op::CM_CONNECT_REQ, 8, 101, &secure_req),
        parse(op::CM_CONNECT_REP, 7, 0, &rep),
        parse(op::CM_CONNECT_REP, 8, 0, &secure_rep),
        parse(op::CM_CHALLENGE, 7, 0, &data(44, 5)),
        parse(
            op::CM_REJECT,
            7,
            RejectReason::NoListener as u32,
            &data(20, 6),
        ),
        parse(op::CM_DISCONNECT_REQ, 0, 0, &data(28, 7)),
        parse(op::CM_DISCONNECT_REP, 0, 0, &data(20, 8)),
    ]
}

fn cms() -> Vec<Vec<u8>> {
    cm_messages()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut p = [0u8; CM_PAYLOAD_MAX];
            let (c, n) = m.emit(&data(i * 7, 1), &mut p);
            let pick = super::wire::CM_OPS
                .iter()
                .position(|&o| o == c.opcode)
                .expect("a CM opcode") as u8;
            let mut b = vec![pick, 0];
            b.extend_from_slice(&c.operand.to_be_bytes());
            b.extend_from_slice(&c.index.to_be_bytes());
            b.extend_from_slice(&p[..n]);
            b
        })
        .collect()
}

fn plans() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // (pick of the opcode table, flags, index, shape, extra body bytes)
    let desc = descriptors()[2].to_bytes();
    let messages: [(u8, u8, [u8; 4], u8); 9] = [
        (0, flags::LAST, [0, 0, 0, 0], 0),
        (1, flags::LAST, [0, 0, 0, 0], 0),
        (2, flags::LAST, [0, 0, 0, 0], 0),
        (3, flags::LAST, [0, 0, 0, 0], 0),
        (4, flags::LAST | flags::REG_TARGET, [2, 0, 0, 0], 0),
        (5, flags::LAST, [0, 1, 2, 3], 1),
        (6, flags::LAST, [0, 1, 2, 3], 1),
        (0, flags::LAST | (3 << 3), [0, 1, 2, 3], 1),
        (0, flags::LAST | (2 << 3), [0x80, 0x81, 0x82, 0x83], 0),
    ];
    for (way, (pick, fl, regs, shape)) in messages.into_iter().enumerate() {
        let mut b = rig(way % 2 == 0);
        b.push(way as u8 % 3);
        b.push(0); // no frame descriptor
        b.extend([pick, 0x0f, fl, 5]);
        b.extend(regs);
        b.push(shape);
        if shape & 1 != 0 {
            b.extend(desc);
        }
        b.extend(data(48, way as u8));
        out.push(b);
    }
    // An instruction pointer (way 3) and a token (way 4).
    let mut b = rig(true);
    b.extend([
        3, 2, 0, 0x06, 0, 1, 2, 3, 4, 5, 6, 7, 0, 0xff, 0, 0, 2, 0x03, 0, 1,
    ]);
    b.extend(data(24, 1));
    out.push(b);
    let mut b = rig(false);
    b.extend([
        4, 0, 0, 1, 0, 0, 0, 200, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 40,
    ]);
    b.extend(data(40, 2));
    out.push(b);
    // Token reads (way 5): one token of 4096 bytes at 256 of endpoint 0 — a read token
    // (byte 0x40) read at 64 for 2048 bytes; a write token read (refused for its kind);
    // and a read token named by a deposit (way 4, refused for its kind).
    for kind in [0x40, 0x00] {
        let mut b = rig(true);
        b.extend([
            5, 0, kind, 0x20, 0x10, 0x00, 1, 2, 3, 4, 0, 0x02, 0x00, 0x40, 0x08, 0x00,
        ]);
        out.push(b);
    }
    let mut b = rig(false);
    b.extend([4, 0, 0x40, 0x20, 0x10, 0x00, 1, 2, 3, 4, 0, 0, 0, 40]);
    b.extend(data(40, 5));
    out.push(b);
    out
}

fn nodes() -> Vec<Vec<u8>> {
    let write = [
        0, 0x00, 0x00, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 8, 0, 0x42, 0, 0, 0, 0, 40,
    ];
    let mut out = vec![write.to_vec()];
    // Every kind of step once, then a few of each structured message.
    let mut all = Vec::new();
    for k in 0..16u8 {
        all.push(k);
        all.extend(data(24, k));
    }
    out.push(all);
    for pick in 0..13u8 {
        let mut s = vec![
            0,
            0x02,
            0x00,
            0,
            0,
            0,
            0,
            1,
            pick,
            0x00,
            flags::LAST,
            4,
            0,
            1,
            2,
            3,
        ];
        s.extend(data(40, pick));
        s.extend([10, 5]);
        out.push(s);
    }
    // The client's frames mutated, a CM disconnect, the host's repair.
    out.push(vec![
        7,
        0,
        0,
        16,
        0,
        0,
        0,
        0,
        fixup::CRC,
        1,
        0,
        30,
        0x55,
        10,
        50,
    ]);
    out.push(vec![9, 0, 20, 0, 0, 10, 50, 14, 1]);
    // B's sealed frames on the path: changed (CRC or trailer fixed up) then as sent,
    // replayed at once and later, dropped; the clock runs between.
    out.push(vec![
        15,
        0xb0,
        0x01,
        0x00,
        0x00,
        0x40,
        2,
        1,
        0x00,
        0x50,
        0x08,
        0x00,
        0x51,
        0x80,
        fixup::CRC,
        10,
        50,
        15,
        0xb1,
        0x00,
        0x20,
        0x01,
        0x00,
        1,
        10,
        20,
        15,
        0xb2,
        0x02,
        0x00,
        0x00,
        0x10,
        3,
        0,
        0,
        10,
        150,
    ]);
    out.push(vec![
        13, 2, 0, 8, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 10, 100,
    ]);
    // Token reads: in a frame of A (the read token, 1000 bytes at 96 of its range), and
    // posted by the client — the read token at 16 for 2000 bytes, forged, and the
    // write token (refused for its kind); a deposit naming the read token (refused:
    // P never changes). The clock runs between.
    out.push(vec![
        13,
        4,
        0x07,
        0xd0,
        0x00,
        0x10,
        0x00,
        0x00,
        10,
        150,
        13,
        0x40,
        0x07,
        0xd0,
        0x00,
        0x10,
        0x00,
        0x00,
        0xde,
        0xad,
        0xbe,
        0xef,
        10,
        150,
        13,
        0x81,
        0x00,
        0x40,
        0x00,
        0x10,
        0x00,
        0x00,
        10,
        150,
        0,
        0x02,
        0,
        0,
        0x00,
        0x40,
        0x80,
        1,
        1, // a structured frame of one message
        12,
        0x00,
        flags::LAST,
        0,
        0,
        0,
        0,
        0,
        0,
        0x03,
        0x03,
        0xe8,
        0, // TOKEN_READ
        10,
        50,
        0,
        0x02,
        0,
        0,
        0x00,
        0x40,
        0x80,
        1,
        1,
        8,
        0x04,
        flags::LAST,
        0,
        0,
        0,
        0,
        0,
        0,
        64, // TOKEN_WRITE with the read token
    ]);
    out
}

/// An IPv4 ICMP frame of type `kind` from 192.168.122.1 to 192.168.122.10, as Linux's
/// `ping` sends an echo request (DF set, an identification, TTL 64), with both
/// checksums right.
fn icmp_frame(kind: u8, code: u8, ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let req = EchoRequest {
        src_mac: [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef],
        dst_mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
        src_ip: [192, 168, 122, 10],
        dst_ip: [192, 168, 122, 1],
        ident,
        seq,
        data,
    };
    let mut buf = vec![0u8; 1514];
    // A reply from .1 to .10 is the request's layout with another type.
    let n = emit_echo_reply(
        &req,
        [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
        [192, 168, 122, 1],
        &mut buf,
    )
    .expect("an echo fits");
    buf.truncate(n);
    buf[18..22].copy_from_slice(&[0x1c, 0x46, 0x40, 0x00]);
    buf[34] = kind;
    buf[35] = code;
    let mut p = IcmpPacket::new_unchecked(&mut buf[..]);
    let c = p
        .compute_icmp_checksum()
        .expect("the message is in the frame");
    p.set_icmp_checksum(c);
    let mut u = crate::wire::UnderlayPacket::new_unchecked(&mut buf[..]);
    let c = u.compute_ip_checksum();
    u.set_ip_checksum(c);
    buf
}

fn neighs() -> Vec<Vec<u8>> {
    let host = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    let us = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    let (host_ip, our_ip) = ([192, 168, 122, 1], [192, 168, 122, 10]);
    let arp = |r: ArpRepr, dst, src, len: usize| {
        let mut b = vec![0u8; 60];
        r.emit(dst, src, &mut b).expect("60 bytes");
        b.truncate(len);
        b
    };
    let request = ArpRepr::request(host, host_ip, our_ip);
    // Linux's `ping` data: a struct timeval (little endian), then bytes 0x10, 0x11...
    let mut ping = 1_700_000_000u64.to_le_bytes().to_vec();
    ping.extend_from_slice(&123_456u64.to_le_bytes());
    ping.extend(16..56u8);
    let frames = [
        // ARP: Linux's request (42 bytes as sent, 60 as received), a reply, a
        // gratuitous announcement, a unicast probe.
        arp(request, BROADCAST_MAC, host, 42),
        arp(request, BROADCAST_MAC, host, 60),
        arp(request.reply_to(us), host, us, 60),
        arp(ArpRepr::gratuitous(us, our_ip), BROADCAST_MAC, us, 60),
        arp(request, us, host, 60),
        // ICMP: `ping` (56 bytes), `ping -s 0` padded to 60, an odd length, a reply,
        // a destination unreachable.
        icmp_frame(8, 0, 0x0d2a, 1, &ping),
        {
            let mut f = icmp_frame(8, 0, 0x0d2a, 2, &[]);
            f.resize(60, 0);
            f
        },
        icmp_frame(8, 0, 0x0d2b, 7, &ping[..33]),
        icmp_frame(0, 0, 0x0d2a, 1, &ping),
        icmp_frame(3, 3, 0, 0, &ping[..28]),
        // Others: a deposit frame, an IPv6 header, a VLAN tag.
        frame_of(&[(header(17, hflags::ACK), Vec::new())]),
        {
            let mut f = vec![0u8; 54];
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            f[14] = 0x60;
            f
        },
        {
            let mut f = arp(request, BROADCAST_MAC, host, 60);
            f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            f
        },
    ];
    let all = neigh_fixup::LENGTH | neigh_fixup::IP_CHECKSUM | neigh_fixup::ICMP_CHECKSUM;
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let mut s = vec![0];
        s.extend_from_slice(f);
        out.push(s);
        // The ICMP ones again with every fix-up (not the padded one: it would take
        // the padding in).
        if (5..10).contains(&i) && i != 6 {
            let mut s = vec![all];
            s.extend_from_slice(f);
            out.push(s);
        }
    }
    // Neighbour discovery and ICMPv6 echo, as they are and with the IPv6 fix-ups.
    let v6 = neigh_fixup::IPV6_LENGTH | neigh_fixup::ICMPV6_CHECKSUM;
    for f in ndp_frames() {
        for mode in [0, v6] {
            let mut s = vec![mode];
            s.extend_from_slice(&f);
            out.push(s);
        }
    }
    out
}

/// Sets an IPv6 frame's payload length (to the end of the buffer) and ICMPv6 checksum.
fn fix_icmpv6(f: &mut [u8]) {
    let len = u16::try_from(f.len() - 54).expect("a short frame");
    f[18..20].copy_from_slice(&len.to_be_bytes());
    let c = icmpv6_checksum(f).expect("the message is in the frame");
    f[56..58].copy_from_slice(&c.to_be_bytes());
}

/// IPv6 frames between fe80::5054:ff:fe12:3456 (the host) and fe80::5054:ff:feab:cdef
/// (us), as Linux 6.18 sends them around `ping -6` (`wire::ndp`'s tests hold the
/// captured bytes): the host's solicitation for us, our advertisement in answer, our
/// unicast probe of the host, the host's duplicate address detection (with its nonce
/// option), an unsolicited advertisement, a solicitation with an unknown option before
/// the source link-layer address, the host's router solicitation, `ping -6` with 56
/// and with 3 bytes of data.
fn ndp_frames() -> Vec<Vec<u8>> {
    let host = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    let us = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    let ll = |mac: [u8; 6]| {
        let mut ip = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0];
        ip[8] = mac[0] ^ 2;
        ip[9..11].copy_from_slice(&mac[1..3]);
        ip[13..].copy_from_slice(&mac[3..]);
        ip
    };
    let (host_ip, our_ip) = (ll(host), ll(us));
    let mut frames = Vec::new();
    let mut b = vec![0u8; 128];
    let n = emit_solicit(host, host_ip, our_ip, None, &mut b).expect("room");
    frames.push(b[..n].to_vec());
    let n = emit_advert(us, our_ip, Some((host, host_ip)), &mut b).expect("room");
    frames.push(b[..n].to_vec());
    let n = emit_solicit(us, our_ip, host_ip, Some(host), &mut b).expect("room");
    frames.push(b[..n].to_vec());
    let n = emit_solicit(host, UNSPECIFIED, host_ip, None, &mut b).expect("room");
    let mut dad = b[..n].to_vec();
    dad.extend_from_slice(&[0x0e, 0x01, 0x0c, 0x8e, 0x3f, 0x89, 0x79, 0xad]);
    fix_icmpv6(&mut dad);
    frames.push(dad);
    let n = emit_advert(us, our_ip, None, &mut b).expect("room");
    frames.push(b[..n].to_vec());
    let n = emit_solicit(host, host_ip, our_ip, None, &mut b).expect("room");
    let mut options = b[..78].to_vec();
    options.extend_from_slice(&[200, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
    options.extend_from_slice(&b[78..n]);
    fix_icmpv6(&mut options);
    frames.push(options);
    // The router solicitation: a solicitation without its target, type 133, to ff02::2.
    let n = emit_solicit(host, host_ip, our_ip, None, &mut b).expect("room");
    let mut rs = b[..n].to_vec();
    rs[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 2]);
    rs[38..54].copy_from_slice(&[0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    rs[54] = 133;
    rs.drain(62..78);
    fix_icmpv6(&mut rs);
    frames.push(rs);
    // Linux's `ping -6` data: a struct timeval (little endian), then 0x10, 0x11...
    let mut ping = 1_796_183_440u64.to_le_bytes().to_vec();
    ping.extend_from_slice(&753_979u64.to_le_bytes());
    ping.extend(16..56u8);
    for (seq, data) in [(1u16, &ping[..]), (1, &[0u8, 1, 2][..])] {
        // A reply from the host to us is the request's layout with another type.
        let req = EchoRequest6 {
            src_mac: us,
            dst_mac: host,
            src_ip: our_ip,
            dst_ip: host_ip,
            ident: 0x6bf2 + u16::from(data.len() == 3),
            seq,
            data,
        };
        let n = emit_echo_reply6(&req, host, host_ip, &mut b).expect("room");
        let mut f = b[..n].to_vec();
        f[14..18].copy_from_slice(&[0x60, 0x09, 0x29, 0x5c]);
        f[54] = 128;
        fix_icmpv6(&mut f);
        frames.push(f);
    }
    frames
}
