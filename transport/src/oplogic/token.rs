//! Payload-token deposits (docs/design.md §3, "Payload tokens"; the payload table is
//! [`PayloadTable`]).
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

use super::{announced, Access, EndpointAccess, Trap};
use crate::tables::{EndpointId, PayloadTable, Token, TokenMatch};
use crate::wire::cell::flags;
use crate::wire::ControlRepr;

/// Bytes of the token at the start of a `TOKEN_WRITE` payload.
pub const TOKEN_LEN: usize = 8;

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
/// [`Trap::BadToken`]; a wrong key is [`Trap::TokenKey`] with the event still owed.
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
    let entry = match tokens.lookup(token) {
        TokenMatch::Valid(e) => e,
        TokenMatch::WrongKey(e) => {
            let event = TokenEvent {
                endpoint: e.endpoint,
                index: token.index(),
                key_ok: false,
                ea: e.offset,
                len: 0,
            };
            return Err(TokenTrap {
                trap: Trap::TokenKey,
                event: Some(event),
            });
        }
        TokenMatch::None => return Err(Trap::BadToken.into()),
    };
    let mut mem = target(entry.endpoint).ok_or(Trap::BadToken)?;
    let len = data.len() as u64;
    if len > entry.len {
        return Err(Trap::OutOfBounds {
            ea: entry.offset,
            len,
            bound: entry.offset.saturating_add(entry.len),
        }
        .into());
    }
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
}
