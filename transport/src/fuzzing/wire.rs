//! The decoders of [`crate::wire`]: frames, control parts and transport headers,
//! compound descriptors, connection-management messages.
//!
//! * `frame`: a frame that parses has sections and messages that lie inside it and
//!   follow each other as the layout says (cell counts, `MORE`, first cells), payloads
//!   exactly as long as announced; written again by a `FrameWriter` from what was
//!   parsed it parses to the same underlay, headers and messages, and its bytes after
//!   the underlay are the original's but for padding; and any single bit flipped in
//!   the IPv4 header or in what the CRC32C covers makes it fail (in a frame whose
//!   every section is sealed, which has no CRC, in its zero trailer). IPv6 frames
//!   (by the ethertype) go through the same checks at their own offsets.
//! * `cell`: a control part that parses emits back to the same 16 bytes, one that
//!   does not failed only on its check byte; any fields emit to bytes that parse back to
//!   them; `cells_for` is the least number of cells that holds the payload; a transport
//!   header round-trips the same way.
//! * `compound`: a descriptor that parses emits back to the same 8 bytes; a refusal
//!   names a byte holding the value it complains of, the first bad field in order;
//!   and the register operations and conditional it describes compute what the
//!   reference model of `super::plan` says.
//! * `cm`: a CM message that parses emits back to a control part and payload that
//!   parse to it (private data kept), and travels through its own frame unchanged; a
//!   refusal is for the reason the lengths and opcode give.
//! * `neigh_wire`: `classify` never panics and agrees with every decoder (a frame that
//!   parses as ARP is `Arp`, as ICMP `Icmp`, as a deposit frame `Udp`); the ARP and
//!   ICMP decoders never panic and refuse only for the reasons they document; an ARP
//!   message that parses emits back to the same 42 bytes (given the frame's Ethernet
//!   addresses), zero padding after them, and parses to the same message; any ARP
//!   fields emit to a frame that parses back to them exactly when the sender is
//!   unicast; an echo request's reply parses as a valid ICMP message of type 0 code 0
//!   with the request's identifier, sequence number and data, addressed back to its
//!   source; an ICMP frame that parses is refused by the underlay for its protocol
//!   alone; emits into a buffer one byte short are refused. ICMPv6 (`wire::ndp`): the
//!   decoder never panics and refuses only for the reasons it documents (a refusal
//!   names the bad value: ethertype, next header, checksum; a neighbour discovery
//!   refusal only for types 135 and 136); a message that parses is `Icmpv6`, has a
//!   right checksum and the fields its bytes say; a solicitation or advertisement
//!   emitted again (to the same place, or where `emit_solicit` and `emit_advert` send
//!   it) parses back to the same fields, and to the same bytes when the original was
//!   what they write; an echo request's reply parses as type 129 with its identifier,
//!   sequence number and data, back to its source, and made a request again parses to
//!   the request with the addresses swapped; any addresses of a frame emitted as a
//!   solicitation or an advertisement parse back to them, or are refused for a
//!   multicast target, a solicited advertisement to a multicast address or a probe
//!   from `::` sent unicast.

use super::Input;
use crate::wire::arp::{
    is_unicast_mac, ArpOp, ArpPacket, ArpRepr, ARP_FRAME_LEN, BROADCAST_MAC, ETHERTYPE_ARP,
    MIN_FRAME_LEN,
};
use crate::wire::cell::{self, cells_for, check8, flags, op, AddrMode};
use crate::wire::cm::{CmMessage, CmWireError, CM_PAYLOAD_MAX, PRIVATE_DATA_MAX};
use crate::wire::compound::{
    CompoundError, CompoundPacket, CompoundRepr, Cond, Order, RegOp, COMPOUND_LEN,
};
use crate::wire::icmp::{
    emit_echo_reply, parse_echo_request, Icmp, IcmpPacket, ICMP_ECHO_REQUEST, ICMP_HEADERS_LEN,
    IP_PROTO_ICMP,
};
use crate::wire::ipv6::IPV6_UNDERLAY_LEN;
use crate::wire::ipv6::{check_ipv6_header, IPV6_HEADERS_LEN, NEXT_ICMPV6};
use crate::wire::ndp::{
    emit_advert, emit_echo_reply6, emit_solicit, icmpv6_checksum, is_multicast, is_solicited_node,
    multicast_mac, parse_icmpv6, solicited_node, Advert, EchoRequest6, Icmpv6, Solicit, ALL_NODES,
    ALL_NODES_MAC, ECHO6_HEADERS_LEN, ICMPV6_ECHO_REPLY, ICMPV6_ECHO_REQUEST, NDP_ADVERT,
    NDP_FRAME_LEN, NDP_HOP_LIMIT, NDP_SOLICIT, UNSPECIFIED,
};
use crate::wire::underlay::{header_len_of, set_lengths, ETH_HEADER_LEN};
use crate::wire::{
    classify, hflags, ControlPacket, ControlRepr, FrameKind, FrameView, FrameWriter,
    TransportPacket, TransportRepr, UnderlayPacket, UnderlayRepr, WireError, CELL_LEN, CONTROL_LEN,
    CRC_LEN, HEADER_LEN, UDP_PORT, UNDERLAY_LEN,
};

/// Fix-ups `frame` applies before parsing (bits of its first byte), so that mutated
/// frames get past the checksums to the decoders behind them.
pub mod fixup {
    /// Set the IPv4 total length and UDP length from the buffer, and the IPv4 checksum.
    pub const LENGTHS: u8 = 0x01;
    /// Fill the check byte of every control part where the layout puts one.
    pub const CHECKS: u8 = 0x02;
    /// Seal the CRC32C over header and cells.
    pub const CRC: u8 = 0x04;
}

/// Fuzz target: `data[0]` selects `fixup`s, `data[1..3]` a bit to flip, the rest is
/// the frame. See the module doc for the properties.
pub fn frame(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let flip = input.u16();
    let mut buf = input.rest().to_vec();
    fix_up(&mut buf, mode);
    check_frame(&buf, flip);
}

/// Applies the fix-ups `mode` selects to a frame in `buf`.
pub fn fix_up(buf: &mut [u8], mode: u8) {
    // (Either family, by the ethertype: IPv6 frames have a longer underlay.)
    let hdr = header_len_of(buf);
    if buf.len() < hdr {
        return;
    }
    if mode & fixup::LENGTHS != 0 && buf.len() - ETH_HEADER_LEN <= usize::from(u16::MAX) {
        set_lengths(buf, buf.len() - hdr);
        if hdr == IPV6_UNDERLAY_LEN {
            // (No UDP checksum: the frame's CRC covers what matters.)
            buf[IPV6_UNDERLAY_LEN - 2..IPV6_UNDERLAY_LEN].fill(0); // (its last field)
        }
    }
    let end = ip_end(buf).min(buf.len());
    if end < hdr + CRC_LEN {
        return;
    }
    if mode & fixup::CHECKS != 0 {
        fill_checks(&mut buf[hdr..end - CRC_LEN]);
    }
    if mode & fixup::CRC != 0 {
        crate::wire::write_trailer(buf, end);
    }
}

/// Where the IP packet of a frame ends: by the IPv4 total length, or the IPv6
/// header's end and payload length.
fn ip_end(buf: &[u8]) -> usize {
    if header_len_of(buf) == IPV6_UNDERLAY_LEN {
        IPV6_HEADERS_LEN + usize::from(u16::from_be_bytes([buf[18], buf[19]]))
    } else {
        ETH_HEADER_LEN + usize::from(UnderlayPacket::new_unchecked(buf).ip_total_len())
    }
}

/// Fills the check byte of each control part where the sections' headers and the
/// messages' lengths put one (as the parser will walk them).
fn fill_checks(covered: &mut [u8]) {
    let mut pos = 0;
    while pos + HEADER_LEN <= covered.len() {
        let h = TransportPacket::new_unchecked(&covered[pos..]);
        let (cells, more) = (usize::from(h.cell_count()), h.flags() & hflags::MORE != 0);
        let start = pos + HEADER_LEN;
        let end = (start + cells * CELL_LEN).min(covered.len());
        let mut at = start;
        while at + CONTROL_LEN <= end {
            let mut c = ControlPacket::new_unchecked(&mut covered[at..at + CONTROL_LEN]);
            c.fill_check();
            let len = c.length();
            at = at.saturating_add(cells_for(len).saturating_mul(CELL_LEN));
        }
        if !more {
            return;
        }
        pos = end;
    }
}

/// One section as parsed: its header and messages (control part, payload).
/// A parsed section: its header, its messages and its seal cell (empty when plain).
type Section<'a> = (TransportRepr, Vec<(ControlRepr, &'a [u8])>, &'a [u8]);

/// The frame properties of the module doc, on one buffer.
pub fn check_frame(buf: &[u8], flip: u16) {
    let Ok(view) = FrameView::parse(buf) else {
        return;
    };
    let end = ip_end(buf);
    assert!(end <= buf.len(), "a frame parsed past its buffer");
    let hdr = view.underlay.header_len();
    assert_eq!(hdr, header_len_of(buf), "the family is the ethertype's");
    let offset_of = |s: &[u8]| s.as_ptr() as usize - buf.as_ptr() as usize;
    let mut sections: Vec<Section<'_>> = Vec::new();
    // Positions of padding bytes (after a payload, in its message's last cell).
    let mut padding = Vec::new();
    let mut all_ok = true;
    let mut all_sealed = true;
    let mut cells_seen = 0u32;
    let mut next_header = hdr;
    let mut section = Some(view);
    while let Some(v) = section {
        assert_eq!(v.underlay, view.underlay, "sections share the underlay");
        let cells = v.cells();
        let at = offset_of(cells);
        assert_eq!(at, next_header + HEADER_LEN, "sections follow each other");
        assert_eq!(cells.len(), usize::from(v.header.cells) * CELL_LEN);
        let seal = v.seal().unwrap_or(&[]);
        assert_eq!(
            seal.len(),
            if v.header.flags & hflags::SEALED != 0 {
                CELL_LEN
            } else {
                0
            },
            "a seal cell exactly when the section is sealed"
        );
        if !seal.is_empty() {
            assert_eq!(
                offset_of(seal),
                at + cells.len(),
                "the seal cell after the cells"
            );
        }
        assert!(
            at + cells.len() + seal.len() <= end - CRC_LEN,
            "cells past the trailer"
        );
        all_sealed &= !seal.is_empty();
        cells_seen += u32::from(v.header.cells) + (seal.len() / CELL_LEN) as u32;
        let mut messages = Vec::new();
        let mut first_cell = 0usize;
        let mut walk = v.messages();
        for m in walk.by_ref() {
            match m {
                Ok(m) => {
                    assert_eq!(usize::from(m.first_cell), first_cell);
                    assert_eq!(m.payload.len(), m.control.length as usize);
                    let start = first_cell * CELL_LEN;
                    assert_eq!(offset_of(m.payload), at + start + CONTROL_LEN);
                    let span = m.control.cells() * CELL_LEN;
                    assert!(start + span <= cells.len(), "message past its section");
                    let pad = at + start + CONTROL_LEN + m.payload.len()..at + start + span;
                    padding.extend(pad);
                    first_cell += m.control.cells();
                    messages.push((m.control, m.payload));
                }
                Err(e) => {
                    assert!(
                        matches!(e, WireError::BadCheck { .. } | WireError::Truncated { .. }),
                        "message error {e:?}"
                    );
                    all_ok = false;
                    break;
                }
            }
        }
        assert!(walk.next().is_none(), "messages after an error");
        if all_ok {
            assert_eq!(first_cell, cells.len() / CELL_LEN, "cells left over");
        }
        let next = v.next_section();
        assert_eq!(
            v.header.flags & hflags::MORE != 0,
            next.is_some(),
            "MORE says whether a section follows"
        );
        next_header = at + cells.len() + seal.len();
        sections.push((v.header, messages, seal));
        section = next;
    }
    assert_eq!(next_header, end - CRC_LEN, "sections fill the frame");
    assert_eq!(cells_seen, view.frame_cells());
    // (A frame of several sections can be longer than the writer's largest, whose
    // cells alone fill the IPv4 total length.)
    if all_ok && end - (hdr - UNDERLAY_LEN) <= crate::wire::frame_len(crate::wire::MAX_CELLS) {
        rewrite(buf, (hdr, end), &view.underlay, &sections, &padding);
    }
    // CRC32C catches every single-bit error of what it covers, the IPv4 checksum every
    // one of the IPv4 header (IPv6 has none: there only what the CRC covers). A frame
    // of sealed sections only has no CRC (each tag, checked later, covers its
    // section): there a flip of its zero trailer is refused.
    let covered = if all_sealed {
        assert_eq!(
            buf[end - CRC_LEN..end],
            [0; CRC_LEN],
            "sealed sections, a zero trailer"
        );
        CRC_LEN * 8
    } else {
        (end - hdr) * 8
    };
    let ip = match view.underlay.is_ipv6() {
        false => (UNDERLAY_LEN - ETH_HEADER_LEN - 8) * 8,
        true => 0,
    };
    let bit = usize::from(flip) % (covered + ip);
    let byte = if bit < ip {
        ETH_HEADER_LEN + bit / 8
    } else if all_sealed {
        end - CRC_LEN + (bit - ip) / 8
    } else {
        hdr + (bit - ip) / 8
    };
    let mut flipped = buf.to_vec();
    flipped[byte] ^= 1 << (bit % 8);
    assert!(
        FrameView::parse(&flipped).is_err(),
        "bit {} of byte {byte} flipped went unnoticed",
        bit % 8
    );
}

/// Writes the parsed frame again and compares.
fn rewrite(
    buf: &[u8],
    (hdr, end): (usize, usize),
    underlay: &UnderlayRepr,
    sections: &[Section<'_>],
    padding: &[usize],
) {
    let mut out = vec![0xa5u8; end];
    let mut w = FrameWriter::new(&mut out, underlay, &sections[0].0).expect("room for a frame");
    for (i, (header, messages, seal)) in sections.iter().enumerate() {
        if i > 0 {
            assert!(
                w.begin_section(header, usize::from(header.cells)),
                "section {i} does not fit again"
            );
        }
        for (c, p) in messages {
            w.push(c, p).expect("message fits again");
        }
        assert_eq!(w.cells(), header.cells);
        // The cells as they are (taken for sealed already), the seal cell as parsed.
        w.seal(|_, _, cell| cell.copy_from_slice(seal));
    }
    let len = w.finish();
    assert_eq!(len, end, "written again, the frame has another length");
    let again = FrameView::parse(&out).expect("the frame written again parses");
    assert_eq!(&again.underlay, underlay);
    let mut section = Some(again);
    for (header, messages, seal) in sections {
        let v = section.expect("as many sections");
        assert_eq!(&v.header, header);
        assert_eq!(v.seal().unwrap_or(&[]), *seal);
        let got: Vec<_> = v.messages().map(|m| m.expect("message parses")).collect();
        assert_eq!(got.len(), messages.len());
        for (g, (c, p)) in got.iter().zip(messages) {
            assert_eq!((&g.control, g.payload), (c, *p));
        }
        section = v.next_section();
    }
    assert!(section.is_none(), "more sections written than parsed");
    // The bytes: the same but for padding (zero when written), and so the CRC.
    let mut original = buf[..end].to_vec();
    for &i in padding {
        original[i] = 0;
    }
    if padding.iter().all(|&i| buf[i] == 0) {
        assert_eq!(out[hdr..], original[hdr..], "written again, other bytes");
    } else {
        assert_eq!(
            out[hdr..end - CRC_LEN],
            original[hdr..end - CRC_LEN],
            "written again, other bytes"
        );
    }
}

/// Fuzz target: `data[..16]` is a control part, `data[..32]` a transport header; see the
/// module doc.
pub fn cell(data: &[u8]) {
    let mut b = [0u8; 32];
    b[..data.len().min(32)].copy_from_slice(&data[..data.len().min(32)]);
    let c: [u8; CONTROL_LEN] = b[..CONTROL_LEN].try_into().expect("16 bytes");
    match ControlRepr::parse(&ControlPacket::new_unchecked(&c[..])) {
        Ok(r) => {
            let mut out = [0u8; CONTROL_LEN];
            r.emit(&mut ControlPacket::new_unchecked(&mut out[..]));
            assert_eq!(out, c, "a control part emits back to other bytes");
            assert_eq!(r.check_byte(), c[3]);
            assert_eq!(r.cells(), cells_for(r.length));
        }
        Err(e) => {
            let expected = check8(&c);
            assert_eq!(
                e,
                WireError::BadCheck {
                    expected,
                    got: c[3]
                }
            );
            let mut fixed = c;
            fixed[3] = expected;
            assert!(ControlRepr::parse(&ControlPacket::new_unchecked(&fixed[..])).is_ok());
        }
    }
    // The same bytes read as fields, emitted, parse back to them.
    let p = ControlPacket::new_unchecked(&c[..]);
    let r = ControlRepr {
        opcode: p.opcode(),
        mask: p.mask(),
        flags: p.flags(),
        operand: p.operand(),
        index: p.index(),
        length: p.length(),
    };
    let mut out = [0u8; CONTROL_LEN];
    r.emit(&mut ControlPacket::new_unchecked(&mut out[..]));
    assert_eq!(out[3], check8(&out), "emit's check byte");
    assert_eq!(out[3], r.check_byte());
    assert_eq!(
        ControlRepr::parse(&ControlPacket::new_unchecked(&out[..])),
        Ok(r)
    );
    // The least number of cells that holds the control part and the payload.
    let n = cells_for(r.length) as u64;
    let need = u64::from(r.length) + CONTROL_LEN as u64;
    assert!(n * CELL_LEN as u64 >= need && (n - 1) * (CELL_LEN as u64) < need);
    assert_eq!(
        AddrMode::from_flags(r.flags).to_flags(),
        r.flags & flags::ADDR_MASK
    );
    assert_eq!(cell::index_of(cell::regs_of(r.index)), r.index);
    // The transport header.
    match TransportRepr::parse(&TransportPacket::new_unchecked(&b[..])) {
        Ok(h) => {
            let mut out = [0u8; HEADER_LEN];
            h.emit(&mut TransportPacket::new_unchecked(&mut out[..]));
            assert_eq!(out, b, "a transport header emits back to other bytes");
            assert_eq!(h.is_ack_only(), h.cells == 0 && h.flags & hflags::ACK != 0);
        }
        Err(e) => assert_eq!(e, WireError::BadVersion(b[0])),
    }
}

/// Fuzz target: `data[..8]` is a compound descriptor; the rest, registers and an
/// operand for a `REG_OP` message running it. See the module doc.
pub fn compound(data: &[u8]) {
    let mut input = Input::new(data);
    let d: [u8; COMPOUND_LEN] = input.array();
    let packet = CompoundPacket::new_unchecked(&d[..]);
    match CompoundRepr::parse(&packet) {
        Ok(r) => {
            assert_eq!(r.to_bytes(), d, "a descriptor emits back to other bytes");
            super::plan::reg_op_message(&d, &mut input);
        }
        Err(e) => {
            let (byte, value) = e.byte_and_value();
            assert_eq!(d[usize::from(byte)], value, "{e:?} names another value");
            // The first bad field, in the order of the bytes.
            let op1 = RegOp::from_u8(d[0]).is_some();
            let op2 = RegOp::from_u8(d[2]).is_some();
            let cond = Cond::from_u8(d[4]).is_some();
            let order = Order::from_u8(d[6]).is_some();
            let expected = if !op1 {
                CompoundError::UnknownRegOp {
                    byte: 0,
                    code: d[0],
                }
            } else if !op2 {
                CompoundError::UnknownRegOp {
                    byte: 2,
                    code: d[2],
                }
            } else if !cond {
                CompoundError::UnknownCond(d[4])
            } else if !order {
                CompoundError::UnknownOrder(d[6])
            } else {
                assert_ne!(d[7], 0, "refused a descriptor with every field known");
                CompoundError::Reserved(d[7])
            };
            assert_eq!(e, expected);
        }
    }
}

/// The opcodes of connection management, for `cm` to pick from.
pub(super) const CM_OPS: [u8; 6] = [
    op::CM_CONNECT_REQ,
    op::CM_CONNECT_REP,
    op::CM_REJECT,
    op::CM_DISCONNECT_REQ,
    op::CM_DISCONNECT_REP,
    op::CM_CHALLENGE,
];

/// Fuzz target: an opcode (mostly a CM one), operand, index and payload of a CM
/// message. See the module doc.
pub fn cm(data: &[u8]) {
    let mut input = Input::new(data);
    let pick = input.u8();
    let raw = input.u8();
    let opcode = if pick < 0xf0 {
        CM_OPS[usize::from(pick) % CM_OPS.len()]
    } else {
        raw
    };
    let operand = input.u32();
    let index = input.u32();
    let payload = input.bytes(CM_PAYLOAD_MAX + 64);
    let c = ControlRepr {
        opcode,
        operand,
        index,
        length: payload.len() as u32,
        ..ControlRepr::default()
    };
    let takes_private = matches!(opcode, op::CM_CONNECT_REQ | op::CM_CONNECT_REP);
    let m = match CmMessage::parse(&c, payload) {
        Ok(m) => m,
        Err(CmWireError::NotCm(o)) => {
            assert_eq!(o, opcode);
            assert!(!CM_OPS.contains(&o), "a CM opcode refused as not CM");
            return;
        }
        Err(CmWireError::Wire(WireError::Truncated { needed, got })) => {
            // Too short for the message's fields: as long as that, it parses.
            assert!(got == payload.len() && needed > got, "refused as truncated");
            let mut longer = payload.to_vec();
            longer.resize(needed, 0);
            let c = ControlRepr {
                length: needed as u32,
                ..c
            };
            // (Zeros padded into a request's handshake leave what the input put in its
            // first bytes: handshake bytes without their flag are another refusal.)
            assert!(
                matches!(
                    CmMessage::parse(&c, &longer),
                    Ok(_) | Err(CmWireError::BadFlags(_))
                ),
                "{needed} bytes not enough"
            );
            return;
        }
        Err(CmWireError::Wire(WireError::BadLength { payload: most, .. })) => {
            // Private data past the limit: cut to it, it parses (unless its flags are
            // refused too: the length is checked first).
            assert!(takes_private && payload.len() > most && most >= PRIVATE_DATA_MAX);
            let c = ControlRepr {
                length: most as u32,
                ..c
            };
            assert!(matches!(
                CmMessage::parse(&c, &payload[..most]),
                Ok(_) | Err(CmWireError::BadFlags(_))
            ));
            return;
        }
        Err(CmWireError::BadFlags(f)) => {
            // A request's (byte 34) or reply's (byte 24) flags: with the known flags
            // set, whatever the handshake bytes hold, it parses.
            let at = match opcode {
                op::CM_CONNECT_REQ => 34,
                op::CM_CONNECT_REP => 24,
                _ => panic!("flags {f:#04x} refused for opcode {opcode:#04x}"),
            };
            assert_eq!(payload[at], f);
            let mut fixed = payload.to_vec();
            fixed[at] = if opcode == op::CM_CONNECT_REQ { 3 } else { 1 };
            assert!(CmMessage::parse(&c, &fixed).is_ok(), "flags {f:#04x}");
            return;
        }
        Err(e) => panic!("CM message refused with {e:?}"),
    };
    assert!(CM_OPS.contains(&opcode));
    // The message's own fields: what it emits with no private data.
    let fixed = m.emit(&[], &mut [0u8; CM_PAYLOAD_MAX]).1;
    assert!(payload.len() >= fixed);
    let private = m.private_data(payload);
    if takes_private {
        assert_eq!(private, &payload[fixed..], "private data");
    } else {
        assert!(private.is_empty());
    }
    // Emitted again: a control part and payload that parse to the same message.
    let mut p = [0u8; CM_PAYLOAD_MAX];
    let (c2, n) = m.emit(private, &mut p);
    assert_eq!((c2.opcode, c2.length as usize), (opcode, n));
    assert_eq!(n, fixed + private.len());
    assert_eq!(&p[..n], &payload[..n], "emitted payload");
    assert_eq!(CmMessage::parse(&c2, &p[..n]), Ok(m));
    assert_eq!(m.private_data(&p[..n]), private);
    // Its own frame: CM, connection 0, key 0, one message, the same.
    let underlay = underlay();
    let mut buf = [0u8; 1514];
    let len = m
        .write_frame(private, &underlay, &mut buf)
        .expect("a CM message fits a frame");
    let v = FrameView::parse(&buf[..len]).expect("a CM frame parses");
    assert_eq!(v.underlay, underlay);
    assert_eq!(
        (v.header.flags, v.header.dst_conn, v.header.key),
        (hflags::CM, 0, 0)
    );
    let mut msgs = v.messages();
    let got = msgs.next().expect("one message").expect("it parses");
    assert!(msgs.next().is_none() && v.next_section().is_none());
    assert_eq!(CmMessage::parse(&got.control, got.payload), Ok(m));
    assert_eq!(m.private_data(got.payload), private);
    // What authenticates it is cleared, nothing else: what it signs is the same as
    // the cleared message's, and only those fields differ.
    let cleared = m.unauthenticated();
    assert_eq!(cleared.unauthenticated(), cleared);
    assert_eq!(*m.signed(private), *cleared.signed(private));
    // ... and authenticating the cleared copy with the original's tag gives it back.
    let tag = match m {
        CmMessage::ConnectRep { tag, .. } | CmMessage::Reject { tag, .. } => Some(tag),
        CmMessage::DisconnectReq { mac, .. } | CmMessage::DisconnectRep { mac, .. } => Some(mac),
        _ => None,
    };
    if let (Some(t), false) = (tag, matches!(m, CmMessage::ConnectRep { .. })) {
        assert_eq!(cleared.authenticated(t), m);
    }
    match (m, cleared) {
        (
            CmMessage::ConnectReq { .. },
            CmMessage::ConnectReq {
                cookie, handshake, ..
            },
        ) => assert_eq!((cookie, handshake), (0, None)),
        (CmMessage::ConnectRep { .. }, CmMessage::ConnectRep { ephemeral, tag, .. }) => {
            assert_eq!((ephemeral, tag), ([0; 32], [0; 16]))
        }
        (CmMessage::Reject { .. }, CmMessage::Reject { tag, .. })
        | (CmMessage::DisconnectReq { .. }, CmMessage::DisconnectReq { mac: tag, .. })
        | (CmMessage::DisconnectRep { .. }, CmMessage::DisconnectRep { mac: tag, .. }) => {
            assert_eq!(tag, [0; 16])
        }
        _ => assert_eq!(cleared, m),
    }
}

/// The addresses of the seeds' frames (and of the `cm` target's own frame).
pub(super) fn underlay() -> UnderlayRepr {
    UnderlayRepr {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1].into(),
        dst_ip: [10, 0, 0, 2].into(),
        src_port: 49153,
        dst_port: UDP_PORT,
        traffic_class: 0,
    }
}

/// Fix-ups `neigh_wire` applies before parsing (bits of its first byte), so that
/// mutated frames get past the IPv4 and ICMP checksums to the checks behind them.
pub mod neigh_fixup {
    /// Set the IPv4 total length from the buffer.
    pub const LENGTH: u8 = 0x01;
    /// Set the IPv4 header checksum.
    pub const IP_CHECKSUM: u8 = 0x02;
    /// Set the ICMP checksum (over the message the total length gives).
    pub const ICMP_CHECKSUM: u8 = 0x04;
    /// Set the IPv6 payload length from the buffer (after the IPv4 fix-ups).
    pub const IPV6_LENGTH: u8 = 0x08;
    /// Set the ICMPv6 checksum (over the payload the payload length gives), last.
    pub const ICMPV6_CHECKSUM: u8 = 0x10;
}

/// The address the `neigh_wire` target answers from.
const OUR_MAC: [u8; 6] = [0x02, 0xde, 0xad, 0xbe, 0xef, 0x01];
/// The IPv4 address the `neigh_wire` target answers from.
const OUR_IP: [u8; 4] = [10, 9, 8, 7];
/// The IPv6 address the `neigh_wire` target answers echo requests from (fd00::7).
const OUR_IP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];

/// Fuzz target: `data[0]` selects `neigh_fixup`s, the rest is a frame (ARP, ICMP,
/// ICMPv6 or anything else). See the module doc.
pub fn neigh_wire(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let mut buf = input.rest().to_vec();
    neigh_fix_up(&mut buf, mode);
    check_neigh(&buf);
}

/// Applies the fix-ups `mode` selects to a frame in `buf`.
pub fn neigh_fix_up(buf: &mut [u8], mode: u8) {
    if buf.len() >= ETH_HEADER_LEN + 20 {
        ipv4_fix_up(buf, mode);
    }
    if buf.len() >= IPV6_HEADERS_LEN {
        if mode & neigh_fixup::IPV6_LENGTH != 0 {
            if let Ok(len) = u16::try_from(buf.len() - IPV6_HEADERS_LEN) {
                buf[18..20].copy_from_slice(&len.to_be_bytes());
            }
        }
        if mode & neigh_fixup::ICMPV6_CHECKSUM != 0 {
            if let Some(c) = icmpv6_checksum(buf) {
                buf[56..58].copy_from_slice(&c.to_be_bytes());
            }
        }
    }
}

/// The IPv4 fix-ups of [`neigh_fix_up`], on a buffer of at least 34 bytes.
fn ipv4_fix_up(buf: &mut [u8], mode: u8) {
    if mode & neigh_fixup::LENGTH != 0 {
        if let Ok(total) = u16::try_from(buf.len() - ETH_HEADER_LEN) {
            buf[16..18].copy_from_slice(&total.to_be_bytes());
        }
    }
    if mode & neigh_fixup::IP_CHECKSUM != 0 {
        // (The underlay's view reads and writes only the IPv4 header here.)
        let mut u = UnderlayPacket::new_unchecked(&mut *buf);
        let c = u.compute_ip_checksum();
        u.set_ip_checksum(c);
    }
    if mode & neigh_fixup::ICMP_CHECKSUM != 0 {
        if let Ok(mut p) = IcmpPacket::new_checked(&mut *buf) {
            if let Some(c) = p.compute_icmp_checksum() {
                p.set_icmp_checksum(c);
            }
        }
    }
}

/// The `neigh_wire` properties of the module doc, on one frame.
pub fn check_neigh(buf: &[u8]) {
    let kind = classify(buf);
    let ethertype = buf.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
    if FrameView::parse(buf).is_ok() {
        assert_eq!(kind, FrameKind::Udp, "a deposit frame classified otherwise");
    }
    check_arp(buf, kind, ethertype);
    check_icmp(buf, kind, ethertype);
    check_icmpv6(buf, kind, ethertype);
    check_ndp_fields(buf);
}

/// ARP: parse, emit again, the fields of any frame emitted.
fn check_arp(buf: &[u8], kind: FrameKind, ethertype: Option<u16>) {
    match ArpRepr::parse(buf) {
        Ok(r) => {
            assert_eq!(kind, FrameKind::Arp, "an ARP frame classified otherwise");
            let p = ArpPacket::new_unchecked(buf);
            let mut out = [0xa5u8; MIN_FRAME_LEN + 1];
            assert_eq!(
                r.emit(p.dst_mac(), p.src_mac(), &mut out),
                Ok(MIN_FRAME_LEN)
            );
            assert_eq!(
                out[..ARP_FRAME_LEN],
                buf[..ARP_FRAME_LEN],
                "an ARP message emits back to other bytes"
            );
            assert!(
                out[ARP_FRAME_LEN..MIN_FRAME_LEN].iter().all(|&b| b == 0),
                "ARP padding not zero"
            );
            assert_eq!(out[MIN_FRAME_LEN], 0xa5, "ARP written past 60 bytes");
            assert_eq!(ArpRepr::parse(&out), Ok(r));
            assert_eq!(r.is_gratuitous(), r.sender_ip == r.target_ip);
            if r.op == ArpOp::Request {
                // Its answer goes back to the requester and parses.
                let rep = r.reply_to(OUR_MAC);
                assert_eq!(
                    (rep.op, rep.target_mac, rep.target_ip, rep.sender_ip),
                    (ArpOp::Reply, r.sender_mac, r.sender_ip, r.target_ip)
                );
                rep.emit(r.sender_mac, OUR_MAC, &mut out).expect("room");
                assert_eq!(ArpRepr::parse(&out), Ok(rep));
            }
            assert_eq!(
                r.emit(BROADCAST_MAC, OUR_MAC, &mut out[..MIN_FRAME_LEN - 1]),
                Err(WireError::BufferTooSmall {
                    needed: MIN_FRAME_LEN,
                    got: MIN_FRAME_LEN - 1
                })
            );
        }
        Err(e) => {
            if buf.len() < ARP_FRAME_LEN {
                assert_eq!(
                    e,
                    WireError::Truncated {
                        needed: ARP_FRAME_LEN,
                        got: buf.len()
                    }
                );
            } else {
                assert!(matches!(e, WireError::BadArp(_)), "ARP refused with {e:?}");
                if ethertype == Some(ETHERTYPE_ARP) {
                    assert_eq!(kind, FrameKind::Arp);
                }
            }
        }
    }
    // The frame's bytes read as ARP fields, emitted: they parse back to them exactly
    // when the sender is unicast (every other field is written right).
    if buf.len() >= ARP_FRAME_LEN {
        let p = ArpPacket::new_unchecked(buf);
        let r = ArpRepr {
            op: if p.op() & 1 != 0 {
                ArpOp::Request
            } else {
                ArpOp::Reply
            },
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        };
        let mut out = [0u8; MIN_FRAME_LEN];
        r.emit(p.dst_mac(), p.src_mac(), &mut out).expect("room");
        match ArpRepr::parse(&out) {
            Ok(back) => {
                assert!(is_unicast_mac(r.sender_mac));
                assert_eq!(back, r, "ARP fields emitted parse to others");
            }
            Err(e) => {
                assert!(!is_unicast_mac(r.sender_mac), "ARP fields refused: {e:?}");
                assert!(matches!(e, WireError::BadArp(_)));
            }
        }
    }
}

/// ICMP: parse, answer a request, check the answer.
fn check_icmp(buf: &[u8], kind: FrameKind, ethertype: Option<u16>) {
    match parse_echo_request(buf) {
        Ok(m) => {
            assert_eq!(kind, FrameKind::Icmp, "an ICMP frame classified otherwise");
            // The underlay's checks are the same up to the protocol.
            let u = UnderlayPacket::new_checked(buf).expect("42 bytes");
            assert_eq!(
                UnderlayRepr::parse(&u),
                Err(WireError::BadIpProtocol(IP_PROTO_ICMP))
            );
            let p = IcmpPacket::new_unchecked(buf);
            match m {
                Icmp::EchoRequest(req) => {
                    assert_eq!((p.icmp_type(), p.icmp_code()), (ICMP_ECHO_REQUEST, 0));
                    check_echo_reply(&req);
                }
                Icmp::Other { kind, code } => {
                    assert_eq!((p.icmp_type(), p.icmp_code()), (kind, code));
                    assert_ne!((kind, code), (ICMP_ECHO_REQUEST, 0));
                }
            }
        }
        Err(e) => {
            if buf.len() < ICMP_HEADERS_LEN {
                assert!(
                    matches!(e, WireError::Truncated { needed, got }
                        if needed == ICMP_HEADERS_LEN && got == buf.len()),
                    "{e:?}"
                );
                return;
            }
            assert!(
                matches!(
                    e,
                    WireError::BadEthertype(_)
                        | WireError::BadIpVersion(_)
                        | WireError::BadIpHeaderLen(_)
                        | WireError::BadIpChecksum { .. }
                        | WireError::IpFragment(_)
                        | WireError::NotIcmp(_)
                        | WireError::BadIpLength { .. }
                        | WireError::Truncated { .. }
                        | WireError::BadIcmpChecksum { .. }
                ),
                "ICMP refused with {e:?}"
            );
            if let WireError::BadEthertype(t) = e {
                assert_eq!(Some(t), ethertype);
            }
        }
    }
}

/// The reply to `req`: its length, that it parses as a valid echo reply, its fields.
fn check_echo_reply(req: &crate::wire::icmp::EchoRequest<'_>) {
    let len = (ICMP_HEADERS_LEN + req.data.len()).max(MIN_FRAME_LEN);
    let mut out = vec![0xa5u8; len + 1];
    assert_eq!(emit_echo_reply(req, OUR_MAC, OUR_IP, &mut out), Ok(len));
    assert_eq!(out[len], 0xa5, "echo reply written past its length");
    let out = &out[..len];
    assert_eq!(
        parse_echo_request(out),
        Ok(Icmp::Other { kind: 0, code: 0 }),
        "the echo reply is not a valid echo reply"
    );
    assert_eq!(classify(out), FrameKind::Icmp);
    let p = IcmpPacket::new_unchecked(out);
    let u = p.underlay();
    assert_eq!((u.dst_mac(), u.src_mac()), (req.src_mac, OUR_MAC));
    assert_eq!((u.dst_ip(), u.src_ip()), (req.src_ip, OUR_IP));
    assert_eq!((u.ip_ttl(), u.ip_ident(), u.ip_flags_frag()), (64, 0, 0));
    assert_eq!(
        (p.ident(), p.seq()),
        (req.ident, req.seq),
        "echo identifier and sequence number"
    );
    assert_eq!(p.echo_data(), Some(req.data), "echo data");
    assert!(
        out[ICMP_HEADERS_LEN + req.data.len()..]
            .iter()
            .all(|&b| b == 0),
        "echo reply padding not zero"
    );
    let mut short = vec![0u8; len - 1];
    assert_eq!(
        emit_echo_reply(req, OUR_MAC, OUR_IP, &mut short),
        Err(WireError::BufferTooSmall {
            needed: len,
            got: len - 1
        })
    );
}

/// ICMPv6: parse; emit again what parsed and check it parses back.
fn check_icmpv6(buf: &[u8], kind: FrameKind, ethertype: Option<u16>) {
    let m = match parse_icmpv6(buf) {
        Ok(m) => m,
        Err(e) => {
            match e {
                WireError::Truncated { .. }
                | WireError::BadIpVersion(_)
                | WireError::NotIcmp(_)
                | WireError::BadIcmpChecksum { .. }
                | WireError::BadNdp(_) => {}
                WireError::BadEthertype(t) => assert_eq!(Some(t), ethertype),
                other => panic!("ICMPv6 refused with {other:?}"),
            }
            if let WireError::NotIcmp(next) = e {
                assert_eq!(next, buf[20]);
                assert_ne!(next, NEXT_ICMPV6);
            }
            if let WireError::BadIcmpChecksum { expected, got } = e {
                assert_eq!(kind, FrameKind::Icmpv6);
                assert_eq!(Some(expected), icmpv6_checksum(buf), "expected checksum");
                assert_eq!(got, u16::from_be_bytes([buf[56], buf[57]]), "checksum got");
                assert_ne!(expected, got);
            }
            if let WireError::BadNdp(_) = e {
                assert_eq!(kind, FrameKind::Icmpv6);
                assert!(
                    matches!(buf[54], NDP_SOLICIT | NDP_ADVERT),
                    "neighbour discovery refusal of type {}",
                    buf[54]
                );
            }
            return;
        }
    };
    assert_eq!(
        kind,
        FrameKind::Icmpv6,
        "an ICMPv6 frame classified otherwise"
    );
    let h = check_ipv6_header(buf).expect("an ICMPv6 frame has an IPv6 header");
    assert_eq!(h.next, NEXT_ICMPV6);
    let end = IPV6_HEADERS_LEN + usize::from(h.payload_len);
    let sum = icmpv6_checksum(buf).expect("the message is in the frame");
    let carried = u16::from_be_bytes([buf[56], buf[57]]);
    assert!(
        carried == sum || (sum == 0 && carried == 0xffff),
        "ICMPv6 checksum {carried:#06x} accepted, {sum:#06x} computed"
    );
    let (t, code) = (buf[54], buf[55]);
    match m {
        Icmpv6::Solicit(s) => {
            assert_eq!((t, code, h.hop_limit), (NDP_SOLICIT, 0, NDP_HOP_LIMIT));
            assert_eq!(
                (s.src_mac, s.dst_mac, s.src_ip, s.dst_ip),
                (h.src_mac, h.dst_mac, h.src, h.dst)
            );
            assert_eq!(s.target[..], buf[62..78]);
            assert!(!is_multicast(s.target));
            if s.is_dad() {
                assert!(is_solicited_node(s.dst_ip) && s.sender_mac.is_none());
            }
            check_solicit_again(buf, &s);
        }
        Icmpv6::Advert(a) => {
            assert_eq!((t, code, h.hop_limit), (NDP_ADVERT, 0, NDP_HOP_LIMIT));
            assert_eq!(
                (a.src_mac, a.dst_mac, a.src_ip, a.dst_ip),
                (h.src_mac, h.dst_mac, h.src, h.dst)
            );
            assert_eq!(a.target[..], buf[62..78]);
            assert_eq!(
                (a.router, a.solicited, a.override_),
                (
                    buf[58] & 0x80 != 0,
                    buf[58] & 0x40 != 0,
                    buf[58] & 0x20 != 0
                )
            );
            assert!(!is_multicast(a.target));
            assert!(!(a.solicited && is_multicast(a.dst_ip)));
            check_advert_again(buf, &a);
        }
        Icmpv6::EchoRequest(req) => {
            assert_eq!((t, code), (ICMPV6_ECHO_REQUEST, 0));
            assert_eq!(
                (req.src_mac, req.dst_mac, req.src_ip, req.dst_ip),
                (h.src_mac, h.dst_mac, h.src, h.dst)
            );
            assert_eq!(
                (req.ident, req.seq),
                (
                    u16::from_be_bytes([buf[58], buf[59]]),
                    u16::from_be_bytes([buf[60], buf[61]])
                )
            );
            assert_eq!(req.data, &buf[62..end]);
            check_echo_reply6(&req);
        }
        Icmpv6::Other { kind: k, code: c } => {
            assert_eq!((t, code), (k, c));
            assert!(k != NDP_SOLICIT && k != NDP_ADVERT, "type {k} not decoded");
            assert_ne!((k, c), (ICMPV6_ECHO_REQUEST, 0));
        }
    }
}

/// Whether the original frame's bytes are what an emit writes, so that the emitted
/// frame must equal them: no flow label or traffic class, reserved bits clear, the
/// length `n` the emit wrote, a checksum not carried as 0xffff (for 0).
fn emitted_alike(buf: &[u8], n: usize, reserved_mask: u8) -> bool {
    buf[14..18] == [0x60, 0, 0, 0]
        && buf[58] & reserved_mask == 0
        && buf[59..62] == [0; 3]
        && usize::from(u16::from_be_bytes([buf[18], buf[19]])) == n - IPV6_HEADERS_LEN
        && buf[56..58] != [0xff, 0xff]
}

/// A solicitation emitted again (unicast to the same MAC when it was unicast): it
/// parses back to its fields, as `emit_solicit` addresses it.
fn check_solicit_again(buf: &[u8], s: &Solicit) {
    let to = (!is_multicast(s.dst_ip)).then_some(s.dst_mac);
    let mut out = [0xa5u8; NDP_FRAME_LEN + 1];
    let n = emit_solicit(s.src_mac, s.src_ip, s.target, to, &mut out)
        .expect("a solicitation that parsed emits again");
    assert_eq!(n, if s.is_dad() { 78 } else { NDP_FRAME_LEN });
    assert_eq!(out[n], 0xa5, "solicitation written past its length");
    let dst_ip = if to.is_some() {
        s.target
    } else {
        solicited_node(s.target)
    };
    let want = Solicit {
        dst_mac: to.unwrap_or(multicast_mac(dst_ip)),
        dst_ip,
        sender_mac: (!s.is_dad()).then_some(s.src_mac),
        ..*s
    };
    assert_eq!(
        parse_icmpv6(&out[..n]),
        Ok(Icmpv6::Solicit(want)),
        "a solicitation emitted again parses to other fields"
    );
    if want == *s && emitted_alike(buf, n, 0xff) {
        assert_eq!(
            out[..n],
            buf[..n],
            "a solicitation emits back to other bytes"
        );
    }
    assert_eq!(
        emit_solicit(s.src_mac, s.src_ip, s.target, to, &mut out[..n - 1]),
        Err(WireError::BufferTooSmall {
            needed: n,
            got: n - 1
        })
    );
}

/// An advertisement emitted again by its target (to the same place when solicited,
/// else to all nodes): it parses back to its fields, as `emit_advert` writes them.
fn check_advert_again(buf: &[u8], a: &Advert) {
    let to = a.solicited.then_some((a.dst_mac, a.dst_ip));
    let mut out = [0xa5u8; NDP_FRAME_LEN + 1];
    let n = emit_advert(a.src_mac, a.target, to, &mut out)
        .expect("an advertisement that parsed emits again");
    assert_eq!(n, NDP_FRAME_LEN);
    assert_eq!(out[n], 0xa5, "advertisement written past its length");
    let (dst_mac, dst_ip) = to.unwrap_or((ALL_NODES_MAC, ALL_NODES));
    let want = Advert {
        src_mac: a.src_mac,
        dst_mac,
        src_ip: a.target,
        dst_ip,
        target: a.target,
        router: false,
        solicited: a.solicited,
        override_: true,
        target_mac: Some(a.src_mac),
    };
    assert_eq!(
        parse_icmpv6(&out[..n]),
        Ok(Icmpv6::Advert(want)),
        "an advertisement emitted again parses to other fields"
    );
    if want == *a && emitted_alike(buf, n, 0x1f) {
        assert_eq!(
            out[..n],
            buf[..n],
            "an advertisement emits back to other bytes"
        );
    }
    assert_eq!(
        emit_advert(a.src_mac, a.target, to, &mut out[..n - 1]),
        Err(WireError::BufferTooSmall {
            needed: n,
            got: n - 1
        })
    );
}

/// The reply to an ICMPv6 echo request: its length, that it parses as an echo reply,
/// its fields; made a request again, it parses to `req` with the addresses swapped.
fn check_echo_reply6(req: &EchoRequest6<'_>) {
    let len = ECHO6_HEADERS_LEN + req.data.len();
    let mut out = vec![0xa5u8; len + 1];
    assert_eq!(emit_echo_reply6(req, OUR_MAC, OUR_IP6, &mut out), Ok(len));
    assert_eq!(out[len], 0xa5, "echo reply written past its length");
    let out = &mut out[..len];
    assert_eq!(
        parse_icmpv6(out),
        Ok(Icmpv6::Other {
            kind: ICMPV6_ECHO_REPLY,
            code: 0
        }),
        "the ICMPv6 echo reply is not a valid echo reply"
    );
    let h = check_ipv6_header(out).expect("IPv6");
    assert_eq!((h.dst_mac, h.src_mac), (req.src_mac, OUR_MAC));
    assert_eq!((h.dst, h.src), (req.src_ip, OUR_IP6));
    assert_eq!(h.hop_limit, 64);
    out[54] = ICMPV6_ECHO_REQUEST;
    let c = icmpv6_checksum(out).expect("the message is in the frame");
    out[56..58].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        parse_icmpv6(out),
        Ok(Icmpv6::EchoRequest(EchoRequest6 {
            src_mac: OUR_MAC,
            dst_mac: req.src_mac,
            src_ip: OUR_IP6,
            dst_ip: req.src_ip,
            ..*req
        })),
        "the echo reply carries other identifier, sequence number or data"
    );
    let mut short = vec![0u8; len - 1];
    assert_eq!(
        emit_echo_reply6(req, OUR_MAC, OUR_IP6, &mut short),
        Err(WireError::BufferTooSmall {
            needed: len,
            got: len - 1
        })
    );
}

/// The frame's addresses (MACs, source, destination, the bytes where a target goes)
/// emitted as solicitations and advertisements, whatever the frame is: each parses
/// back to them, or is refused for the reason the addresses give.
fn check_ndp_fields(buf: &[u8]) {
    if buf.len() < 78 {
        return;
    }
    let a = |r: core::ops::Range<usize>| -> [u8; 16] { buf[r].try_into().expect("16 bytes") };
    let m = |r: core::ops::Range<usize>| -> [u8; 6] { buf[r].try_into().expect("6 bytes") };
    let (dst_mac, src_mac) = (m(0..6), m(6..12));
    let (src_ip, dst_ip, target) = (a(22..38), a(38..54), a(62..78));
    let mut out = [0u8; NDP_FRAME_LEN];
    for to in [None, Some(dst_mac)] {
        let r = emit_solicit(src_mac, src_ip, target, to, &mut out);
        let dad = src_ip == UNSPECIFIED;
        if is_multicast(target) {
            assert_eq!(r, Err(WireError::BadNdp("target address is multicast")));
            continue;
        }
        if dad && to.is_some() {
            assert!(matches!(r, Err(WireError::BadNdp(_))), "{r:?}");
            continue;
        }
        let n = r.expect("a solicitation of any addresses");
        let want_dst = if to.is_some() {
            target
        } else {
            solicited_node(target)
        };
        assert_eq!(
            parse_icmpv6(&out[..n]),
            Ok(Icmpv6::Solicit(Solicit {
                src_mac,
                dst_mac: to.unwrap_or(multicast_mac(want_dst)),
                src_ip,
                dst_ip: want_dst,
                target,
                sender_mac: (!dad).then_some(src_mac),
            })),
            "solicitation fields emitted parse to others"
        );
    }
    for to in [None, Some((dst_mac, dst_ip))] {
        let r = emit_advert(src_mac, target, to, &mut out);
        if is_multicast(target) {
            assert_eq!(r, Err(WireError::BadNdp("target address is multicast")));
            continue;
        }
        if to.is_some() && is_multicast(dst_ip) {
            assert!(matches!(r, Err(WireError::BadNdp(_))), "{r:?}");
            continue;
        }
        assert_eq!(r, Ok(NDP_FRAME_LEN));
        let (to_mac, to_ip) = to.unwrap_or((ALL_NODES_MAC, ALL_NODES));
        assert_eq!(
            parse_icmpv6(&out),
            Ok(Icmpv6::Advert(Advert {
                src_mac,
                dst_mac: to_mac,
                src_ip: target,
                dst_ip: to_ip,
                target,
                router: false,
                solicited: to.is_some(),
                override_: true,
                target_mac: Some(src_mac),
            })),
            "advertisement fields emitted parse to others"
        );
    }
}
