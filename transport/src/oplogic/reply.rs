//! Read and atomic replies, from both sides (docs/design.md §3, Operations; §5, ordering).
//!
//! As the *responder*: a committed read or atomic answers its requester
//! ([`reply_request`]: the work request that carries the answer), and the endpoint
//! range a read's answer is built from is kept from later stores until the requester
//! has acknowledged every message of the answer ([`ReadReplies`]): the answer's frames
//! are built from endpoint memory when they are (re)sent, so a later store must not
//! overtake it.
//!
//! As the *requester*: a reply message is checked against the request it names and
//! placed in the request's result range ([`plan_reply`], then [`commit_reply`], which
//! cannot fail). A refused reply is only counted ([`DropReason`]): it is never NAKed,
//! the request's own timer and retransmission cover a lost or mangled answer.
//!
//! Pure, like the rest of `oplogic`: nothing here sends, and the only memory written is
//! the result range [`commit_reply`] is handed.

use std::collections::VecDeque;

use super::{DropReason, Reply, Store};
use crate::reliability::{seq_lt, Sender};
use crate::tables::{EndpointEntry, EndpointId, EndpointTable};
use crate::wire::cell::flags;
use crate::wire::ControlRepr;
use crate::wr::{Pending, Source, Wqe};

/// The work request that answers the peer's request `seq` whose plan returns `reply`:
/// a read's bytes are read from `endpoint` (the connection's; for a `TOKEN_READ`, the
/// token's) when the answer is sent,
/// an atomic's old value travels inline (8 bytes, little endian). `None`: the message
/// returns nothing.
#[inline]
pub fn reply_request(seq: u32, endpoint: EndpointId, reply: &Reply) -> Option<Wqe> {
    match *reply {
        Reply::None => None,
        Reply::Read { ea, len, .. } => Some(Wqe::reply(
            seq,
            Source::Endpoint {
                id: endpoint,
                offset: ea,
            },
            len,
        )),
        Reply::Value(old) => {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&old.to_le_bytes());
            Some(Wqe::reply(seq, Source::Inline(b), 8))
        }
    }
}

/// The endpoint ranges of read replies this side still owes the peer: a reply's
/// frames are built from endpoint memory when they are (re)sent, so until the peer has
/// acknowledged every message of the reply (cumulatively or selectively), no later
/// message of the connection may store into its range — else the read would return
/// bytes written after it, against in-order execution (docs/design.md §5). Such a message
/// waits (kept, not acknowledged) until those acknowledgements arrive.
///
/// A range is of an endpoint: the connection's for a `READ`, the token's for a
/// `TOKEN_READ` (which may be another), and only stores into that endpoint wait for it.
#[derive(Debug, Clone, Default)]
pub struct ReadReplies {
    /// `(first sequence number, one past the last, endpoint, first byte, end)`, oldest
    /// first; out of line, made by the first read reply (a connection that never
    /// answers a read carries a pointer for it).
    #[allow(clippy::box_collection)] // one pointer inline, not the deque's header
    ranges: Option<Box<VecDeque<ReplyRange>>>,
}

/// A read reply's `(first sequence number, one past the last, endpoint, first byte,
/// end)`.
type ReplyRange = (u32, u32, EndpointId, u64, u64);

impl ReadReplies {
    /// A read reply of `len` bytes at `start` of `endpoint` on sequence numbers
    /// `first..seq_end`.
    pub fn push(&mut self, first: u32, seq_end: u32, endpoint: EndpointId, start: u64, len: u32) {
        if len > 0 {
            self.ranges.get_or_insert_with(Box::default).push_back((
                first,
                seq_end,
                endpoint,
                start,
                start + u64::from(len),
            ));
        }
    }

    /// The answer to `reply`, read from `endpoint`, went out on sequence numbers
    /// `first..seq_end`: a read's range is kept from later stores until they are
    /// acknowledged (an atomic's old value travels inline and keeps nothing).
    #[inline]
    pub fn record(&mut self, endpoint: EndpointId, reply: &Reply, first: u32, seq_end: u32) {
        if let Reply::Read { ea, len, .. } = *reply {
            self.push(first, seq_end, endpoint, ea, len);
        }
    }

    /// Whether a store of `len` bytes at `start` of `endpoint` must wait: it overlaps a
    /// reply from that endpoint with a message `is_acked` does not confirm yet. Forgets
    /// replies acknowledged up to the cumulative point `acked` first.
    pub fn blocks(
        &mut self,
        endpoint: EndpointId,
        start: u64,
        len: u32,
        acked: u32,
        is_acked: impl Fn(u32) -> bool,
    ) -> bool {
        let Some(ranges) = self.ranges.as_mut() else {
            return false;
        };
        while let Some(&(_, end, ..)) = ranges.front() {
            if seq_lt(acked, end) {
                break;
            }
            ranges.pop_front();
        }
        let end = start + u64::from(len);
        len > 0
            && ranges.iter().any(|&(first, last, ep, s, e)| {
                ep == endpoint
                    && start < e
                    && s < end
                    && (0..last.wrapping_sub(first)).any(|i| !is_acked(first.wrapping_add(i)))
            })
    }

    /// Whether a planned `store` into `endpoint` must wait for the acknowledgement of a
    /// read reply `tx` (the connection's send side) has not had acknowledged yet.
    #[inline]
    pub fn blocks_store(&mut self, endpoint: EndpointId, store: &Store<'_>, tx: &Sender) -> bool {
        let Some((start, len)) = store.span() else {
            return false;
        };
        !self.is_empty() && self.blocks(endpoint, start, len, tx.acked(), |s| tx.is_acked(s))
    }

    /// Whether no reply is owed.
    pub fn is_empty(&self) -> bool {
        self.ranges.as_ref().is_none_or(|r| r.is_empty())
    }
}

/// Where a reply to one of our requests goes: `data` at `at` of `entry` (inside the
/// request's result range).
#[derive(Clone, Copy, Debug)]
pub struct Placement<'p, 't> {
    /// The endpoint of the request's result range.
    pub entry: &'t EndpointEntry,
    /// Offset in that endpoint.
    pub at: u64,
    /// The reply's bytes (part of the message payload).
    pub data: &'p [u8],
    /// The reply's last message: the request has its answer.
    pub last: bool,
}

/// Checks a reply message (`control` flagged `REPLY`, `index` = the request's first
/// sequence number, `operand` = the offset in its result, `length` = bytes) against
/// `request`, the request of ours its `index` falls in (`None`: no such request in
/// flight). No side effect.
///
/// Refused ([`DropReason::BadReply`]) when the request is not there, is not a read or
/// an atomic, starts at another sequence number, already has its answer, or has no
/// result range; when the bytes fall outside what the request asked for or outside the
/// result endpoint (gone: also refused); [`DropReason::Truncated`] when fewer bytes
/// arrived than announced.
pub fn plan_reply<'p, 't>(
    control: &ControlRepr,
    payload: &'p [u8],
    request: Option<&Pending>,
    endpoints: &'t EndpointTable,
) -> Result<Placement<'p, 't>, DropReason> {
    let p = request.ok_or(DropReason::BadReply)?;
    if !p.work.wants_reply() || p.first_seq != control.index || p.replied {
        return Err(DropReason::BadReply);
    }
    let (id, off) = p.work.result().ok_or(DropReason::BadReply)?;
    let len = u64::from(control.length);
    let data = payload
        .get(..control.length as usize)
        .ok_or(DropReason::Truncated)?;
    if u64::from(control.operand) + len > u64::from(p.work.len()) {
        return Err(DropReason::BadReply);
    }
    let entry = endpoints.get(id).ok_or(DropReason::BadReply)?;
    let at = off.saturating_add(u64::from(control.operand));
    if at.saturating_add(len) > entry.len() {
        return Err(DropReason::BadReply);
    }
    Ok(Placement {
        entry,
        at,
        data,
        last: control.flags & flags::LAST != 0,
    })
}

/// Places a reply [`plan_reply`] accepted and, on its last message, marks `request`
/// answered (it may complete once acknowledged). Infallible: the plan checked the range
/// inside the endpoint, and the endpoint lies inside its memory.
pub fn commit_reply(placement: &Placement<'_, '_>, request: &mut Pending) {
    let e = placement.entry;
    // Endpoint memory is the application's own: written directly, whatever its page map
    // says (that is for remote access).
    let _ = e
        .memory()
        .write(e.offset() + placement.at as usize, placement.data);
    if placement.last {
        request.replied = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::EndpointMemory;
    use crate::oplogic::{plan, RegContext, VecAccess};
    use crate::reliability::SeqBits;
    use crate::tables::{RegisterFile, Rights};
    use crate::wire::cell::op;
    use crate::wr::{Remote, WcStatus, Work, WrOpcode};
    use std::sync::Arc;

    #[test]
    fn a_store_waits_only_for_overlapping_unacknowledged_read_replies() {
        let mut r = ReadReplies::default();
        let (ep, other) = (EndpointId(1), EndpointId(2));
        // Reply A: bytes 100..200 on messages 10..12; reply B: 1000..1008 on 12.
        r.push(10, 12, ep, 100, 100);
        r.push(12, 13, ep, 1000, 8);
        let none = |_: u32| false;
        assert!(r.blocks(ep, 150, 1, 10, none));
        assert!(
            !r.blocks(other, 150, 1, 10, none),
            "another endpoint's bytes"
        );
        assert!(r.blocks(ep, 0, 101, 10, none), "overlaps the first byte");
        assert!(
            !r.blocks(ep, 0, 100, 10, none),
            "ends where the reply starts"
        );
        assert!(!r.blocks(ep, 200, 800, 10, none), "between the replies");
        assert!(r.blocks(ep, 1007, 4, 10, none));
        assert!(!r.blocks(ep, 150, 0, 10, none), "stores nothing");
        // Selectively acknowledged: only once every message of the reply is.
        assert!(r.blocks(ep, 150, 1, 10, |s| s == 10));
        assert!(!r.blocks(ep, 150, 1, 10, |s| s == 10 || s == 11));
        // Cumulatively acknowledged replies are forgotten (with sequence wrap).
        assert!(!r.blocks(ep, 150, 1, 12, none));
        assert!(r.blocks(ep, 1000, 8, 12, none));
        assert!(!r.blocks(ep, 1000, 8, 13, none));
        assert!(r.is_empty());
        r.push(u32::MAX - 1, 1, other, 0, 64);
        assert!(r.blocks(other, 0, 64, u32::MAX, none));
        assert!(!r.blocks(ep, 0, 64, u32::MAX, none));
        assert!(!r.blocks(other, 0, 64, 1, none));
    }

    fn write(operand: u32, len: u32) -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE,
            flags: flags::LAST,
            operand,
            length: len,
            ..ControlRepr::default()
        }
    }

    #[test]
    fn a_store_into_an_unacknowledged_read_reply_waits_until_the_ack() {
        let no_regs = RegisterFile::empty();
        let ctx = RegContext::none(&no_regs);
        let mut mem = VecAccess::new(4096, Rights::ALL);
        let mut tx = Sender::new(100, 1000, 5);
        let mut replies = ReadReplies::default();
        // A read of 64 bytes at 256 is answered on messages 100..102.
        let read = Reply::Read {
            ea: 256,
            len: 64,
            reply_control: ControlRepr::default(),
        };
        let ep = EndpointId(0);
        let first = tx.assign(2);
        replies.record(ep, &read, first, first + 2);
        // An atomic's answer keeps nothing.
        replies.record(ep, &Reply::Value(7), tx.assign(1), first + 3);

        let data = [9u8; 16];
        let inside = plan(&write(300, 16), &data, &ctx, &mut mem).unwrap();
        let beside = plan(&write(320, 16), &data, &ctx, &mut mem).unwrap();
        let nothing = plan(&write(256, 0), &[], &ctx, &mut mem).unwrap();
        assert!(replies.blocks_store(ep, &inside.store, &tx));
        assert!(
            !replies.blocks_store(EndpointId(5), &inside.store, &tx),
            "into another endpoint"
        );
        assert!(
            !replies.blocks_store(ep, &beside.store, &tx),
            "past the range"
        );
        assert!(
            !replies.blocks_store(ep, &nothing.store, &tx),
            "stores nothing"
        );
        assert!(!replies.blocks_store(ep, &Store::None, &tx));

        // Half the answer acknowledged: still waits.
        tx.on_ack(101, &SeqBits::default(), 0);
        assert!(replies.blocks_store(ep, &inside.store, &tx));
        // All of it: released, and the reply forgotten.
        tx.on_ack(102, &SeqBits::default(), 0);
        assert!(!replies.blocks_store(ep, &inside.store, &tx));
        assert!(replies.is_empty());
    }

    #[test]
    fn a_read_answers_from_the_endpoint_and_an_atomic_inline() {
        let ep = EndpointId(3);
        assert_eq!(reply_request(5, ep, &Reply::None), None);
        let wr = reply_request(
            5,
            ep,
            &Reply::Read {
                ea: 4096,
                len: 100,
                reply_control: ControlRepr::default(),
            },
        )
        .unwrap();
        assert_eq!(wr.opcode, WrOpcode::Reply { request: 5 });
        assert_eq!(
            (wr.source, wr.len),
            (
                Source::Endpoint {
                    id: ep,
                    offset: 4096
                },
                100
            )
        );
        let wr = reply_request(6, ep, &Reply::Value(0x0102_0304_0506_0708)).unwrap();
        assert_eq!((wr.opcode, wr.len), (WrOpcode::Reply { request: 6 }, 8));
        let Source::Inline(b) = wr.source else {
            panic!("inline answer")
        };
        assert_eq!(b[..8], [8, 7, 6, 5, 4, 3, 2, 1]);
    }

    /// A table with one 4-page endpoint (id returned) over fresh memory.
    fn table() -> (EndpointTable, EndpointId, Arc<EndpointMemory>) {
        let mem = Arc::new(EndpointMemory::alloc_ordinary(4 * 4096).unwrap());
        let mut t = EndpointTable::new();
        let id = t.insert(EndpointEntry::new(mem.clone(), 4096, 2 * 4096, Rights::NONE).unwrap());
        (t, id, mem)
    }

    /// Our read of `len` bytes on sequence number 40, answered into `id` at 100.
    fn read_request(id: EndpointId, len: u32) -> Pending {
        pending(read_wr(id, len))
    }

    fn read_wr(id: EndpointId, len: u32) -> Wqe {
        Wqe {
            wr_id: 1,
            opcode: WrOpcode::Read,
            flags: 0,
            remote: Remote::default(),
            len,
            source: Source::None,
            result: Some((id, 100)),
        }
    }

    /// `wr` in flight on sequence number 40, as the worker keeps it once posted (a
    /// read's or atomic's cell, `message::work`).
    fn pending(wr: Wqe) -> Pending {
        Pending {
            work: crate::message::work(&wr),
            first_seq: 40,
            segments: 1,
            seg_max: 1024,
            status: WcStatus::Success,
            reason: None,
            replied: false,
        }
    }

    fn reply(operand: u32, len: u32, last: bool) -> ControlRepr {
        ControlRepr {
            opcode: op::WRITE,
            flags: flags::REPLY | if last { flags::LAST } else { 0 },
            operand,
            index: 40,
            length: len,
            ..ControlRepr::default()
        }
    }

    #[test]
    fn a_reply_lands_in_the_result_range_and_its_last_message_answers() {
        let (t, id, mem) = table();
        let mut req = read_request(id, 64);
        // Two messages of the answer: 32 bytes at 0, then 32 at 32 (padded payload).
        let first = plan_reply(&reply(0, 32, false), &[1; 32], Some(&req), &t).unwrap();
        commit_reply(&first, &mut req);
        assert!(!req.replied);
        let second = plan_reply(&reply(32, 32, true), &[2; 40], Some(&req), &t).unwrap();
        assert_eq!((second.at, second.data.len(), second.last), (132, 32, true));
        commit_reply(&second, &mut req);
        assert!(req.replied && req.ready());
        let mut got = [0u8; 66];
        mem.read(4096 + 99, &mut got).unwrap();
        assert_eq!(got[0], 0);
        assert_eq!(got[1..33], [1; 32]);
        assert_eq!(got[33..65], [2; 32]);
        assert_eq!(got[65], 0);
        // Answered: a duplicate of the answer is refused.
        assert_eq!(
            plan_reply(&reply(0, 32, true), &[3; 32], Some(&req), &t).err(),
            Some(DropReason::BadReply)
        );
    }

    #[test]
    fn a_reply_that_matches_no_request_is_refused() {
        let (t, id, _) = table();
        let req = read_request(id, 64);
        let refused = |c: ControlRepr, p: &Pending| plan_reply(&c, &[0; 64], Some(p), &t).err();
        assert_eq!(
            plan_reply(&reply(0, 8, true), &[0; 8], None, &t).err(),
            Some(DropReason::BadReply),
            "no such request"
        );
        let later_segment = ControlRepr {
            index: 41,
            ..reply(0, 8, true)
        };
        assert_eq!(refused(later_segment, &req), Some(DropReason::BadReply));
        assert!(
            matches!(req.work, Work::Cell(_)),
            "a read is posted as a cell"
        );
        let wr = |f: &dyn Fn(&mut Wqe)| {
            let mut w = read_wr(id, 64);
            f(&mut w);
            pending(w)
        };
        let write = wr(&|w| w.opcode = WrOpcode::Write);
        assert_eq!(
            refused(reply(0, 8, true), &write),
            Some(DropReason::BadReply)
        );
        let no_result = wr(&|w| w.result = None);
        assert!(matches!(no_result.work, Work::Wr(_)));
        assert_eq!(
            refused(reply(0, 8, true), &no_result),
            Some(DropReason::BadReply)
        );
        let gone = wr(&|w| w.result = Some((EndpointId(id.0 + 1), 0)));
        assert_eq!(
            refused(reply(0, 8, true), &gone),
            Some(DropReason::BadReply)
        );
    }

    #[test]
    fn a_reply_of_the_wrong_length_is_refused() {
        let (t, id, mem) = table();
        let req = read_request(id, 64);
        let before = {
            let mut b = vec![0u8; mem.len()];
            mem.read(0, &mut b).unwrap();
            b
        };
        // More than the request asked for, in length or by offset.
        assert_eq!(
            plan_reply(&reply(0, 65, true), &[0; 65], Some(&req), &t).err(),
            Some(DropReason::BadReply)
        );
        assert_eq!(
            plan_reply(&reply(40, 32, true), &[0; 32], Some(&req), &t).err(),
            Some(DropReason::BadReply)
        );
        // Fewer bytes than announced.
        assert_eq!(
            plan_reply(&reply(0, 32, true), &[0; 31], Some(&req), &t).err(),
            Some(DropReason::Truncated)
        );
        // A result range past the end of its endpoint (or overflowing).
        let read = |off| {
            pending(Wqe {
                result: Some((id, off)),
                ..read_wr(id, 64)
            })
        };
        let past = read(2 * 4096 - 16);
        assert_eq!(
            plan_reply(&reply(0, 32, true), &[0; 32], Some(&past), &t).err(),
            Some(DropReason::BadReply)
        );
        let past = read(u64::MAX - 8);
        assert_eq!(
            plan_reply(&reply(16, 32, true), &[0; 32], Some(&past), &t).err(),
            Some(DropReason::BadReply)
        );
        let mut after = vec![0u8; mem.len()];
        mem.read(0, &mut after).unwrap();
        assert!(after == before, "a refused reply writes nothing");
    }
}
