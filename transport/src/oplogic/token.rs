//! Payload-token deposits and reads (docs/design.md §3, "Payload tokens"; the payload
//! table is [`PayloadTable`]).
//!
//! A `TOKEN_WRITE` message carries the 8-byte token (big endian) of a buffer the
//! receiver registered, then the data. The data lands at the buffer's first byte, in
//! whatever endpoint holds the buffer (not necessarily the connection's), once: the
//! entry is used up. [`plan_token`] checks the message, the token and the buffer with no
//! side effect; [`commit_token`] stores the data and uses the token up, and cannot fail.
//!
//! The buffer's owner always hears of a deposit: a [`TokenEvent`], which is why a
//! deposit needs room on that endpoint's event queue before it commits. A token with a
//! wrong key drops the payload but still reports the control part (length 0,
//! [`TokenTrap::event`]); the entry stays for its rightful holder.
//!
//! A `TOKEN_READ` message (wire version 14) carries a read token, an offset in its
//! range and the control part of the reply write (`wire::cell::op::TOKEN_READ`).
//! [`plan_token_read`] checks the message and the token, then the bytes asked for
//! against the token's range and — with the same `EndpointAccess::check` a `READ`
//! calls — against the endpoint's bounds, rights and page map (a page not present is a
//! fault, as for a read). What it returns is a read's [`Reply`]: the node answers it
//! exactly as a `READ` (`reply_request`, `ReadReplies`), from the token's endpoint.
//! Nothing is stored and the token is not used up: a read token serves any number of
//! reads until its owner cancels it. A read posts no event (the owner hears of nothing;
//! a wrong key is only counted).
//!
//! A token of one kind named by the other operation is refused with
//! [`Trap::TokenKind`] (after its key matched: a holder learns nothing a forger could).

use super::plan::reply_control;
use super::{announced, Access, EndpointAccess, Reply, Trap};
use crate::tables::{EndpointId, PayloadTable, Token, TokenEntry, TokenKind, TokenMatch};
use crate::wire::cell::flags;
use crate::wire::{ControlRepr, CONTROL_LEN};

/// Bytes of the token at the start of a `TOKEN_WRITE` or `TOKEN_READ` payload.
pub const TOKEN_LEN: usize = 8;

/// Bytes of a `TOKEN_READ` payload: the token, the offset in its range (u64 big
/// endian) and the control part of the reply write — the control cell's data block.
pub const TOKEN_READ_LEN: usize = TOKEN_LEN + 8 + CONTROL_LEN;

/// The entry `token` names for an operation on tokens of `kind`, or why not:
/// [`Trap::BadToken`] when no entry is outstanding at its index, [`Trap::TokenKey`] when
/// the key is wrong (with the entry: a deposit's owner is still told), and
/// [`Trap::TokenKind`] when the entry is of the other kind.
fn entry_for(
    tokens: &PayloadTable,
    token: Token,
    kind: TokenKind,
) -> Result<TokenEntry, (Trap, Option<TokenEntry>)> {
    match tokens.lookup(token) {
        TokenMatch::Valid(e) if e.kind == kind => Ok(e),
        TokenMatch::Valid(_) => Err((Trap::TokenKind, None)),
        TokenMatch::WrongKey(e) => Err((Trap::TokenKey, Some(e))),
        TokenMatch::None => Err((Trap::BadToken, None)),
    }
}

/// The first byte, in the token's endpoint, of `len` bytes at `offset` of the token's
/// range; [`Trap::OutOfBounds`] (`ea` where they would start, `bound` the range's
/// end) when they do not lie inside it.
fn in_range(e: &TokenEntry, offset: u64, len: u64) -> Result<u64, Trap> {
    let ea = e.offset.checked_add(offset);
    match (ea, offset.checked_add(len)) {
        (Some(ea), Some(end)) if end <= e.len => Ok(ea),
        _ => Err(Trap::OutOfBounds {
            ea: e.offset.saturating_add(offset),
            len,
            bound: e.offset.saturating_add(e.len),
        }),
    }
}

/// What the buffer's owner is told of a deposit with a payload token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenEvent {
    /// The endpoint holding the buffer (its event queue is told).
    pub endpoint: EndpointId,
    /// The token's entry in the payload table.
    pub index: u32,
    /// Whether the key matched (else the payload was dropped).
    pub key_ok: bool,
    /// The buffer's first byte.
    pub ea: u64,
    /// Bytes deposited.
    pub len: u32,
}

/// A token deposit [`plan_token`] accepted: `data` at `ea` of `endpoint`, using up
/// `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenPlan<'p> {
    /// The token, cancelled on commit.
    pub token: Token,
    /// The endpoint holding the buffer.
    pub endpoint: EndpointId,
    /// The buffer's first byte.
    pub ea: u64,
    /// The data (part of the message payload).
    pub data: &'p [u8],
}

impl TokenPlan<'_> {
    /// The event the deposit posts once committed.
    #[inline]
    pub fn event(&self) -> TokenEvent {
        TokenEvent {
            endpoint: self.endpoint,
            index: self.token.index(),
            key_ok: true,
            ea: self.ea,
            len: self.data.len() as u32,
        }
    }
}

/// Why a token deposit was not made, and what the buffer's owner is told all the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenTrap {
    /// The trap (an error refuses the message; a fault keeps it for the host).
    pub trap: Trap,
    /// A wrong key: the control part still reaches the buffer's owner, with length 0.
    pub event: Option<TokenEvent>,
}

impl From<Trap> for TokenTrap {
    fn from(trap: Trap) -> Self {
        TokenTrap { trap, event: None }
    }
}

/// Plans a `TOKEN_WRITE`, with no side effect: the flags (`LAST` only), the announced
/// length (at least the token), the token against `tokens`, then the buffer's endpoint
/// through `target` (`None`: gone), the data against the buffer's length and the
/// endpoint's bounds, rights and presence (a page not present is a fault). Returns the
/// plan and the access to the buffer's endpoint that [`commit_token`] stores through.
///
/// A token that names no outstanding entry, or an entry whose endpoint is gone, is
/// [`Trap::BadToken`]; a wrong key is [`Trap::TokenKey`] with the event still owed (to
/// a write token's owner; a read token's owner is told nothing); a read token is
/// [`Trap::TokenKind`].
pub fn plan_token<'p, A: EndpointAccess>(
    control: &ControlRepr,
    payload: &'p [u8],
    tokens: &PayloadTable,
    target: impl FnOnce(EndpointId) -> Option<A>,
) -> Result<(TokenPlan<'p>, A), TokenTrap> {
    if control.flags & !flags::LAST != 0 {
        return Err(Trap::BadFlags {
            opcode: control.opcode,
            flags: control.flags,
        }
        .into());
    }
    let body = announced(control, payload)?;
    let Some((tok, data)) = body.split_first_chunk::<TOKEN_LEN>() else {
        return Err(Trap::BadLength {
            opcode: control.opcode,
            length: control.length,
        }
        .into());
    };
    let token = Token(u64::from_be_bytes(*tok));
    let entry = entry_for(tokens, token, TokenKind::Write).map_err(|(trap, e)| {
        let event = e
            .filter(|e| e.kind == TokenKind::Write)
            .map(|e| TokenEvent {
                endpoint: e.endpoint,
                index: token.index(),
                key_ok: false,
                ea: e.offset,
                len: 0,
            });
        TokenTrap { trap, event }
    })?;
    let mut mem = target(entry.endpoint).ok_or(Trap::BadToken)?;
    let len = data.len() as u64;
    in_range(&entry, 0, len)?;
    mem.check(entry.offset, len, Access::Write)?;
    let plan = TokenPlan {
        token,
        endpoint: entry.endpoint,
        ea: entry.offset,
        data,
    };
    Ok((plan, mem))
}

/// Makes a deposit [`plan_token`] accepted: stores the data (its last byte last) through
/// `mem`, the access the plan returned, and uses the token up. Infallible: the plan
/// checked everything, and nothing changed the tables since.
pub fn commit_token(
    plan: &TokenPlan<'_>,
    tokens: &mut PayloadTable,
    mem: &mut impl EndpointAccess,
) {
    mem.store(plan.ea, plan.data);
    // Valid when planned: the entry is cancelled here, once.
    let _ = tokens.cancel(plan.token);
}

/// A read with a read token that [`plan_token_read`] accepted: answered as a `READ`
/// of `reply` from `endpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenReadPlan {
    /// The token (not used up: a read token serves until cancelled).
    pub token: Token,
    /// The token's endpoint, which the answer is read from.
    pub endpoint: EndpointId,
    /// What a `READ` of the same bytes plans: [`Reply::Read`] with the address in
    /// `endpoint`, the length and the requester's reply control part.
    pub reply: Reply,
}

/// Plans a `TOKEN_READ`, with no side effect: the flags (`LAST` only), the length
/// (exactly [`TOKEN_READ_LEN`]) and the payload present, the token against `tokens`
/// (outstanding, its key, a read token), then the token's endpoint through `target`
/// (`None`: gone, [`Trap::BadToken`]), the bytes asked for (the reply control part's
/// `length`, at the offset the message gives) inside the token's range, and — as a
/// `READ` checks them, with the same `EndpointAccess::check` — inside the endpoint,
/// permitted for reading and present (a page not present is a fault the host
/// repairs).
///
/// Refusals: [`Trap::BadFlags`], [`Trap::BadLength`], [`Trap::PayloadTruncated`] for
/// the message's shape; [`Trap::BadToken`] (no entry, or its endpoint is gone),
/// [`Trap::TokenKey`] (wrong key), [`Trap::TokenKind`] (a write token) for the token;
/// [`Trap::OutOfBounds`] outside the token's range; then what the endpoint's check
/// says. No event is owed in any case.
pub fn plan_token_read<A: EndpointAccess>(
    control: &ControlRepr,
    payload: &[u8],
    tokens: &PayloadTable,
    target: impl FnOnce(EndpointId) -> Option<A>,
) -> Result<TokenReadPlan, Trap> {
    if control.flags & !flags::LAST != 0 {
        return Err(Trap::BadFlags {
            opcode: control.opcode,
            flags: control.flags,
        });
    }
    if control.length as usize != TOKEN_READ_LEN {
        return Err(Trap::BadLength {
            opcode: control.opcode,
            length: control.length,
        });
    }
    let body = announced(control, payload)?;
    let (tok, rest) = body.split_at(TOKEN_LEN);
    let (off, reply) = rest.split_at(8);
    let token = Token(u64::from_be_bytes(tok.try_into().expect("8 bytes")));
    let offset = u64::from_be_bytes(off.try_into().expect("8 bytes"));
    let rc = reply_control(reply).ok_or(Trap::BadLength {
        opcode: control.opcode,
        length: control.length,
    })?;
    let entry = entry_for(tokens, token, TokenKind::Read).map_err(|(trap, _)| trap)?;
    let mut mem = target(entry.endpoint).ok_or(Trap::BadToken)?;
    let len = u64::from(rc.length);
    let ea = in_range(&entry, offset, len)?;
    mem.check(ea, len, Access::Read)?;
    Ok(TokenReadPlan {
        token,
        endpoint: entry.endpoint,
        reply: Reply::Read {
            ea,
            len: rc.length,
            reply_control: rc,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oplogic::VecAccess;
    use crate::tables::{Rights, PAGE_SIZE};
    use crate::wire::cell::op;

    const EP: EndpointId = EndpointId(2);

    /// A payload table with one 100-byte buffer at 4000 of endpoint [`EP`] (two pages).
    fn setup() -> (PayloadTable, Token, VecAccess) {
        let mut tokens = PayloadTable::new(4);
        let token = tokens.insert(EP, 4000, 100, 0x5eed).unwrap();
        (
            tokens,
            token,
            VecAccess::new(2 * PAGE_SIZE as usize, Rights::ALL),
        )
    }

    fn message(token: Token, data: &[u8]) -> (ControlRepr, Vec<u8>) {
        let mut payload = token.0.to_be_bytes().to_vec();
        payload.extend_from_slice(data);
        let control = ControlRepr {
            opcode: op::TOKEN_WRITE,
            flags: flags::LAST,
            operand: 0x77,
            length: payload.len() as u32,
            ..ControlRepr::default()
        };
        (control, payload)
    }

    /// Plans against `mem` as endpoint [`EP`] (any other endpoint is gone).
    fn plan_on<'p>(
        control: &ControlRepr,
        payload: &'p [u8],
        tokens: &PayloadTable,
        mem: &VecAccess,
    ) -> Result<(TokenPlan<'p>, VecAccess), TokenTrap> {
        plan_token(control, payload, tokens, |id| {
            (id == EP).then(|| mem.clone())
        })
    }

    #[test]
    fn a_token_deposit_lands_in_its_buffer_once() {
        let (mut tokens, token, mem) = setup();
        let (c, p) = message(token, &[7; 96]);
        let (plan, mut target) = plan_on(&c, &p, &tokens, &mem).unwrap();
        assert_eq!(
            plan.event(),
            TokenEvent {
                endpoint: EP,
                index: token.index(),
                key_ok: true,
                ea: 4000,
                len: 96
            }
        );
        assert_eq!(target, mem, "planning changes nothing");
        commit_token(&plan, &mut tokens, &mut target);
        assert!(target.bytes[4000..4096].iter().all(|&b| b == 7));
        assert!(target.bytes[..4000].iter().all(|&b| b == 0));
        assert!(target.bytes[4096..].iter().all(|&b| b == 0));
        // Used up: the same token again names nothing.
        assert_eq!(tokens.outstanding(), 0);
        assert_eq!(
            plan_on(&c, &p, &tokens, &target).err(),
            Some(TokenTrap::from(Trap::BadToken))
        );
    }

    #[test]
    fn a_wrong_key_drops_the_payload_but_reports_the_control_part() {
        let (tokens, token, mem) = setup();
        let forged = Token::new(token.index(), token.key() ^ 0x100);
        let (c, p) = message(forged, &[7; 8]);
        assert_eq!(
            plan_on(&c, &p, &tokens, &mem).err(),
            Some(TokenTrap {
                trap: Trap::TokenKey,
                event: Some(TokenEvent {
                    endpoint: EP,
                    index: token.index(),
                    key_ok: false,
                    ea: 4000,
                    len: 0
                })
            })
        );
        // The entry stays for its rightful holder.
        assert!(matches!(tokens.lookup(token), TokenMatch::Valid(_)));
    }

    #[test]
    fn a_token_deposit_is_refused_without_its_entry_or_room_in_its_buffer() {
        let (mut tokens, token, mem) = setup();
        let trap = |c: &ControlRepr, p: &[u8], tokens: &PayloadTable| {
            plan_on(c, p, tokens, &mem).err().map(|t| t.trap)
        };
        // No entry at that index.
        let (c, p) = message(Token::new(3, 1), &[1; 4]);
        assert_eq!(trap(&c, &p, &tokens), Some(Trap::BadToken));
        // More data than the buffer holds.
        let (c, p) = message(token, &[1; 101]);
        assert_eq!(
            trap(&c, &p, &tokens),
            Some(Trap::OutOfBounds {
                ea: 4000,
                len: 101,
                bound: 4100
            })
        );
        // No token at all, fewer bytes than announced, flags beyond LAST.
        let (mut c, p) = message(token, &[]);
        c.length = 7;
        assert_eq!(
            trap(&c, &p, &tokens),
            Some(Trap::BadLength {
                opcode: op::TOKEN_WRITE,
                length: 7
            })
        );
        let (c, p) = message(token, &[1; 4]);
        assert_eq!(
            trap(&c, &p[..10], &tokens),
            Some(Trap::PayloadTruncated {
                length: 12,
                payload: 10
            })
        );
        let segment = ControlRepr {
            flags: flags::LAST | flags::SEGMENT,
            ..c
        };
        assert!(matches!(
            trap(&segment, &p, &tokens),
            Some(Trap::BadFlags { .. })
        ));
        // The buffer's endpoint is gone.
        let elsewhere = tokens.insert(EndpointId(9), 0, 8, 3).unwrap();
        let (c, p) = message(elsewhere, &[1; 4]);
        assert_eq!(trap(&c, &p, &tokens), Some(Trap::BadToken));
        // None of these used a token up.
        assert_eq!(tokens.outstanding(), 2);
    }

    #[test]
    fn a_token_deposit_obeys_the_endpoint_rights_and_page_map() {
        let (tokens, token, mut mem) = setup();
        let (c, p) = message(token, &[1; 100]);
        // The buffer spans pages 0 and 1 (4000..4100).
        mem.page_rights[1] = Rights::REMOTE_READ;
        assert_eq!(
            plan_on(&c, &p, &tokens, &mem).err().map(|t| t.trap),
            Some(Trap::AccessDenied {
                ea: 4096,
                access: Access::Write
            })
        );
        mem.page_rights[1] = Rights::ALL;
        mem.pages_present[1] = false;
        let t = plan_on(&c, &p, &tokens, &mem).err().unwrap().trap;
        assert_eq!(t, Trap::PageNotPresent { page: 1 });
        assert!(t.is_fault(), "kept for the host, not refused");
        // An empty deposit touches no page: the missing one does not stop it.
        let (c, p) = message(token, &[]);
        let (plan, _) = plan_on(&c, &p, &tokens, &mem).unwrap();
        assert_eq!(plan.event().len, 0);
    }

    // ---- Read tokens ----

    /// A read token over 3000 bytes at 1000 of endpoint [`EP`] (three pages), and a
    /// write token beside it.
    fn read_setup() -> (PayloadTable, Token, Token, VecAccess) {
        let mut tokens = PayloadTable::new(4);
        let read = tokens.insert_read(EP, 1000, 3000, 0xbead).unwrap();
        let write = tokens.insert(EP, 8000, 100, 0x5eed).unwrap();
        let mem = VecAccess::new(3 * PAGE_SIZE as usize, Rights::ALL);
        (tokens, read, write, mem)
    }

    /// A `TOKEN_READ` of `len` bytes at `offset` of `token`'s range, as the sender
    /// builds it (`crate::message`).
    fn read_message(token: Token, offset: u64, len: u32) -> (ControlRepr, Vec<u8>) {
        use crate::wr::{Remote, Source, Wqe, WrOpcode};
        let wr = Wqe {
            wr_id: 1,
            opcode: WrOpcode::TokenRead {
                token: token.0,
                offset,
            },
            flags: 0,
            remote: Remote::default(),
            len,
            source: Source::None,
            result: Some((EndpointId(0), 0)),
        };
        let (control, _) = crate::message::control_for(&wr, 0, 1, 1024, false);
        let mut payload = vec![0u8; control.length as usize];
        crate::message::fill_payload(
            &wr,
            0,
            &mut payload,
            &crate::tables::EndpointTable::new(),
            false,
        );
        (control, payload)
    }

    fn plan_read(
        c: &ControlRepr,
        p: &[u8],
        tokens: &PayloadTable,
        mem: &VecAccess,
    ) -> Result<TokenReadPlan, Trap> {
        plan_token_read(c, p, tokens, |id| (id == EP).then(|| mem.clone()))
    }

    #[test]
    fn a_token_read_is_one_cell_of_token_offset_and_reply_control() {
        let token = Token::new(3, 0x0102_0304);
        let (c, p) = read_message(token, 0x1122_3344_5566, 4096);
        assert_eq!(
            (c.opcode, c.flags, c.operand, c.index, c.length),
            (op::TOKEN_READ, flags::LAST, 0, 0, 32)
        );
        assert_eq!(c.cells(), 1, "the token read fits its control cell");
        assert_eq!(p[..8], [0, 0, 0, 3, 1, 2, 3, 4]);
        assert_eq!(p[8..16], 0x1122_3344_5566u64.to_be_bytes());
        let reply = reply_control(&p[16..]).unwrap();
        assert_eq!(reply, crate::message::read_reply_control(4096));
    }

    #[test]
    fn a_read_token_reads_any_part_of_its_range_any_number_of_times() {
        let (tokens, read, _, mem) = read_setup();
        for (offset, len) in [
            (0, 3000),
            (0, 1),
            (2999, 1),
            (100, 0),
            (3000, 0),
            (96, 2048),
        ] {
            let (c, p) = read_message(read, offset, len);
            let plan = plan_read(&c, &p, &tokens, &mem).unwrap();
            let Reply::Read {
                ea,
                len: n,
                reply_control,
            } = plan.reply
            else {
                panic!("a read's reply")
            };
            assert_eq!(
                (plan.endpoint, plan.token, ea, n),
                (EP, read, 1000 + offset, len)
            );
            assert_eq!(reply_control, crate::message::read_reply_control(len));
        }
        // Not used up, nothing changed.
        assert!(matches!(tokens.lookup(read), TokenMatch::Valid(_)));
        assert_eq!(tokens.outstanding(), 2);
        assert_eq!(mem, VecAccess::new(3 * PAGE_SIZE as usize, Rights::ALL));
    }

    #[test]
    fn a_token_read_with_a_wrong_or_dead_token_is_refused() {
        let (mut tokens, read, write, mem) = read_setup();
        let trap = |t: Token, tokens: &PayloadTable| {
            let (c, p) = read_message(t, 0, 8);
            plan_read(&c, &p, tokens, &mem).err()
        };
        // A wrong key: refused, the entry stays for its holder.
        let forged = Token::new(read.index(), read.key() ^ 0x40);
        assert_eq!(trap(forged, &tokens), Some(Trap::TokenKey));
        // A write token read.
        assert_eq!(trap(write, &tokens), Some(Trap::TokenKind));
        // An index with no entry.
        assert_eq!(trap(Token::new(3, 1), &tokens), Some(Trap::BadToken));
        assert_eq!(trap(Token(u64::MAX), &tokens), Some(Trap::BadToken));
        // The token's endpoint is gone.
        let elsewhere = tokens.insert_read(EndpointId(9), 0, 8, 3).unwrap();
        assert_eq!(trap(elsewhere, &tokens), Some(Trap::BadToken));
        assert!(matches!(tokens.lookup(read), TokenMatch::Valid(_)));
        // Cancelled: every copy is refused from then on.
        tokens.cancel(read).unwrap();
        assert_eq!(trap(read, &tokens), Some(Trap::BadToken));
        for t in [Trap::TokenKey, Trap::TokenKind, Trap::BadToken] {
            assert_eq!(t.status(), crate::oplogic::RemoteStatus::RemoteAccessError);
            assert!(!t.is_fault());
        }
        assert_eq!(
            Trap::TokenKind.reason(),
            crate::oplogic::DropReason::TokenKind
        );
    }

    #[test]
    fn a_read_token_is_refused_for_a_deposit_and_stays() {
        let (mut tokens, read, _, mem) = read_setup();
        let (c, p) = message(read, &[1; 8]);
        let refused = plan_on(&c, &p, &tokens, &mem).err();
        assert_eq!(refused, Some(TokenTrap::from(Trap::TokenKind)), "no event");
        // A wrong key on a read token's index: refused, and its owner is told nothing.
        let forged = Token::new(read.index(), read.key() ^ 1);
        let (c, p) = message(forged, &[1; 8]);
        assert_eq!(
            plan_on(&c, &p, &tokens, &mem).err(),
            Some(TokenTrap::from(Trap::TokenKey))
        );
        assert!(matches!(tokens.lookup(read), TokenMatch::Valid(_)));
        assert!(tokens.cancel(read).is_ok());
    }

    #[test]
    fn a_token_read_stays_inside_the_tokens_range_and_the_endpoint() {
        let (mut tokens, read, _, mem) = read_setup();
        let trap = |t: Token, offset: u64, len: u32, tokens: &PayloadTable| {
            let (c, p) = read_message(t, offset, len);
            plan_read(&c, &p, tokens, &mem).err()
        };
        // Past the token's range (1000..4000), by length or by offset, or overflowing.
        assert_eq!(
            trap(read, 0, 3001, &tokens),
            Some(Trap::OutOfBounds {
                ea: 1000,
                len: 3001,
                bound: 4000
            })
        );
        assert_eq!(
            trap(read, 2990, 11, &tokens),
            Some(Trap::OutOfBounds {
                ea: 3990,
                len: 11,
                bound: 4000
            })
        );
        assert_eq!(
            trap(read, 3001, 0, &tokens),
            Some(Trap::OutOfBounds {
                ea: 4001,
                len: 0,
                bound: 4000
            })
        );
        assert_eq!(
            trap(read, u64::MAX - 2, 8, &tokens),
            Some(Trap::OutOfBounds {
                ea: u64::MAX,
                len: 8,
                bound: 4000
            })
        );
        // A range that runs past its endpoint (12288 bytes): the endpoint's bound, as
        // for a read.
        let long = tokens.insert_read(EP, 12000, 1000, 9).unwrap();
        assert_eq!(trap(long, 0, 288, &tokens), None);
        assert_eq!(
            trap(long, 100, 200, &tokens),
            Some(Trap::OutOfBounds {
                ea: 12100,
                len: 200,
                bound: 12288
            })
        );
    }

    #[test]
    fn a_token_read_obeys_the_endpoint_rights_and_page_map_as_a_read_does() {
        let (mut tokens, read, _, mut mem) = read_setup();
        // A range across pages 0 and 1 (3000..5000); the other one lies on page 0.
        let across = tokens.insert_read(EP, 3000, 2000, 0xcafe).unwrap();
        let (c, p) = read_message(across, 0, 2000);
        let plain_read = |mem: &mut VecAccess| mem.check(3000, 2000, Access::Read).err();
        mem.page_rights[1] = Rights::REMOTE_WRITE;
        let t = plan_read(&c, &p, &tokens, &mem).err();
        assert_eq!(
            t,
            Some(Trap::AccessDenied {
                ea: 4096,
                access: Access::Read
            })
        );
        assert_eq!(t, plain_read(&mut mem.clone()));
        mem.page_rights[1] = Rights::ALL;
        mem.pages_present[1] = false;
        let t = plan_read(&c, &p, &tokens, &mem).err().unwrap();
        assert_eq!(t, Trap::PageNotPresent { page: 1 });
        assert!(t.is_fault(), "kept for the host, as a read's");
        // Within page 0 the missing page does not matter.
        let (c0, p0) = read_message(read, 0, 1000);
        assert!(plan_read(&c0, &p0, &tokens, &mem).is_ok());
        // An endpoint without the remote-read right.
        let wo = VecAccess::new(3 * PAGE_SIZE as usize, Rights::REMOTE_WRITE);
        assert_eq!(
            plan_read(&c0, &p0, &tokens, &wo).err(),
            Some(Trap::AccessDenied {
                ea: 1000,
                access: Access::Read
            })
        );
    }

    #[test]
    fn a_token_read_of_the_wrong_shape_is_refused() {
        let (tokens, read, _, mem) = read_setup();
        let (c, p) = read_message(read, 0, 8);
        let with = |f: &dyn Fn(&mut ControlRepr)| {
            let mut c = c;
            f(&mut c);
            plan_read(&c, &p, &tokens, &mem).err()
        };
        assert!(matches!(
            with(&|c| c.flags |= flags::COMPOUND),
            Some(Trap::BadFlags { .. })
        ));
        assert!(matches!(
            with(&|c| c.flags |= flags::REPLY),
            Some(Trap::BadFlags { .. })
        ));
        assert_eq!(
            with(&|c| c.length = 31),
            Some(Trap::BadLength {
                opcode: op::TOKEN_READ,
                length: 31
            })
        );
        assert_eq!(
            with(&|c| c.length = 48),
            Some(Trap::BadLength {
                opcode: op::TOKEN_READ,
                length: 48
            })
        );
        assert_eq!(
            plan_read(&c, &p[..20], &tokens, &mem).err(),
            Some(Trap::PayloadTruncated {
                length: 32,
                payload: 20
            })
        );
        // Flags LAST or none: both fine (a read is one message either way).
        assert!(with(&|c| c.flags = 0).is_none());
    }
}
