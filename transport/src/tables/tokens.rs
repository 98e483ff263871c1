//! The payload table (docs/design.md §3, "Payload tokens"; Trapeze's incoming payload
//! table, seed 004).
//!
//! The receiver registers a buffer (an endpoint range) and gets a [`Token`]: the entry's
//! index and a random key. Entries are of two kinds ([`TokenKind`]), in the same table,
//! with the same token format and the same [`PayloadTable::cancel`]:
//!
//! * **write** (payload) tokens: any node holding the token may deposit into the
//!   buffer once (`TOKEN_WRITE`): the entry is cancelled on the first match, so a
//!   dangling or duplicated token is refused. A token with the right index but a wrong
//!   key matches nothing: the payload is dropped (the control part still reaches the
//!   receiver, with length 0) and the entry stays for its rightful holder.
//! * **read** tokens: any node holding the token may read any part of the range
//!   (`TOKEN_READ`), over any of its connections to the node, as often as it likes,
//!   until the receiver cancels the entry (verbs' rkey or memory window over one
//!   range). A wrong key reads nothing.
//!
//! A token of one kind is refused for the other's operation (`Trap::TokenKind`). The
//! receiver may cancel an entry of either kind at any time.
//!
//! A token is a plain `u64` (index in the high half, key in the low half), so
//! applications pass it to other nodes inside ordinary messages. Keys come from the OS
//! random source and are never 0.

use super::{EndpointId, TableError};

/// A payload token: `index << 32 | key`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Token(pub u64);

impl Token {
    /// The entry's index.
    pub const fn index(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The entry's key.
    pub const fn key(self) -> u32 {
        self.0 as u32
    }
    /// The token of entry `index` with `key`.
    pub const fn new(index: u32, key: u32) -> Token {
        Token((index as u64) << 32 | key as u64)
    }
}

/// What a token lets its holder do with its range.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum TokenKind {
    /// Deposit into the buffer once (`TOKEN_WRITE`); used up on its first match.
    Write,
    /// Read any part of the range (`TOKEN_READ`), any number of times, until cancelled.
    Read,
}

/// A registered buffer: `len` bytes at `offset` of `endpoint`, and what a token
/// holder may do with it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TokenEntry {
    /// The endpoint holding the buffer.
    pub endpoint: EndpointId,
    /// The buffer's first byte in the endpoint.
    pub offset: u64,
    /// The buffer's length.
    pub len: u64,
    /// Write once, or read until cancelled.
    pub kind: TokenKind,
    key: u32,
}

/// What a token presented by a sender matched.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TokenMatch {
    /// An outstanding entry with this key.
    Valid(TokenEntry),
    /// An outstanding entry, but the key is wrong: the payload is dropped.
    WrongKey(TokenEntry),
    /// No outstanding entry at that index (used, cancelled, never issued).
    None,
}

/// The node's payload table.
#[derive(Clone, Debug, Default)]
pub struct PayloadTable {
    entries: Vec<Option<TokenEntry>>,
    /// Free indices (a stack).
    free: Vec<u32>,
}

impl PayloadTable {
    /// A table of `capacity` entries, all free.
    pub fn new(capacity: u32) -> Self {
        Self {
            entries: vec![None; capacity as usize],
            free: (0..capacity).rev().collect(),
        }
    }

    /// Registers `len` bytes at `offset` of `endpoint` for one deposit (a write token)
    /// with `key` (the caller draws it from the OS random source; 0 is replaced by 1)
    /// and returns its token.
    pub fn insert(
        &mut self,
        endpoint: EndpointId,
        offset: u64,
        len: u64,
        key: u32,
    ) -> Result<Token, TableError> {
        self.insert_kind(TokenKind::Write, endpoint, offset, len, key)
    }

    /// Registers `len` bytes at `offset` of `endpoint` for reads until cancelled (a
    /// read token) with `key`, as [`PayloadTable::insert`] does.
    pub fn insert_read(
        &mut self,
        endpoint: EndpointId,
        offset: u64,
        len: u64,
        key: u32,
    ) -> Result<Token, TableError> {
        self.insert_kind(TokenKind::Read, endpoint, offset, len, key)
    }

    /// Registers an entry of `kind` (see [`PayloadTable::insert`]).
    pub fn insert_kind(
        &mut self,
        kind: TokenKind,
        endpoint: EndpointId,
        offset: u64,
        len: u64,
        key: u32,
    ) -> Result<Token, TableError> {
        let index = self.free.pop().ok_or(TableError::TokensExhausted {
            capacity: self.entries.len() as u32,
        })?;
        let key = key.max(1);
        self.entries[index as usize] = Some(TokenEntry {
            endpoint,
            offset,
            len,
            kind,
            key,
        });
        Ok(Token::new(index, key))
    }

    /// What `token` matches, without using it.
    pub fn lookup(&self, token: Token) -> TokenMatch {
        match self.entries.get(token.index() as usize).copied().flatten() {
            Some(e) if e.key == token.key() => TokenMatch::Valid(e),
            Some(e) => TokenMatch::WrongKey(e),
            None => TokenMatch::None,
        }
    }

    /// Cancels the entry of `token`, of either kind (a write token on its match, or
    /// either by the receiver): the token and every copy of it are refused from now on.
    pub fn cancel(&mut self, token: Token) -> Result<TokenEntry, TableError> {
        match self.lookup(token) {
            TokenMatch::Valid(e) => {
                self.entries[token.index() as usize] = None;
                self.free.push(token.index());
                Ok(e)
            }
            _ => Err(TableError::NoSuchToken(token.0)),
        }
    }

    /// Cancels every entry into `endpoint` (it is being released).
    pub fn cancel_endpoint(&mut self, endpoint: EndpointId) {
        for (i, e) in self.entries.iter_mut().enumerate() {
            if e.is_some_and(|e| e.endpoint == endpoint) {
                *e = None;
                self.free.push(i as u32);
            }
        }
    }

    /// Entries outstanding.
    pub fn outstanding(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_once_and_only_with_its_key() {
        let mut t = PayloadTable::new(2);
        let ep = EndpointId(3);
        let tok = t.insert(ep, 4096, 100, 0xdead_beef).unwrap();
        let wrong = Token::new(tok.index(), tok.key() ^ 1);
        assert!(matches!(t.lookup(wrong), TokenMatch::WrongKey(_)));
        // A wrong key neither uses nor cancels the entry.
        assert!(t.cancel(wrong).is_err());
        let TokenMatch::Valid(e) = t.lookup(tok) else {
            panic!("valid token")
        };
        assert_eq!(
            (e.endpoint, e.offset, e.len, e.kind),
            (ep, 4096, 100, TokenKind::Write)
        );
        t.cancel(tok).unwrap();
        assert_eq!(t.lookup(tok), TokenMatch::None);
        assert_eq!(t.cancel(tok), Err(TableError::NoSuchToken(tok.0)));
        // The index is reused with a new key: the old token stays dead.
        let again = t.insert(ep, 0, 8, 0x1234).unwrap();
        assert_eq!(again.index(), tok.index());
        assert!(matches!(t.lookup(tok), TokenMatch::WrongKey(_)));
    }

    #[test]
    fn the_table_is_bounded_and_endpoint_release_cancels() {
        let mut t = PayloadTable::new(2);
        let a = t.insert(EndpointId(1), 0, 8, 7).unwrap();
        let b = t.insert(EndpointId(2), 0, 8, 0).unwrap();
        assert_eq!(b.key(), 1, "key 0 is never handed out");
        assert_eq!(
            t.insert(EndpointId(1), 0, 8, 9),
            Err(TableError::TokensExhausted { capacity: 2 })
        );
        t.cancel_endpoint(EndpointId(1));
        assert_eq!(t.lookup(a), TokenMatch::None);
        assert!(matches!(t.lookup(b), TokenMatch::Valid(_)));
        assert_eq!(t.outstanding(), 1);
        assert_eq!(Token::new(u32::MAX, 5).index(), u32::MAX);
        assert_eq!(Token(u64::MAX).key(), u32::MAX);
    }

    #[test]
    fn read_tokens_share_the_table_the_format_and_the_cancel() {
        let mut t = PayloadTable::new(3);
        let w = t.insert(EndpointId(1), 0, 8, 5).unwrap();
        let r = t.insert_read(EndpointId(1), 64, 1 << 20, 6).unwrap();
        let TokenMatch::Valid(e) = t.lookup(r) else {
            panic!("valid read token")
        };
        assert_eq!((e.kind, e.offset, e.len), (TokenKind::Read, 64, 1 << 20));
        assert!(matches!(t.lookup(w), TokenMatch::Valid(e) if e.kind == TokenKind::Write));
        assert_eq!(r, Token::new(r.index(), 6), "index << 32 | key");
        // Looking a read token up never uses it; only a cancel ends it.
        assert!(matches!(t.lookup(r), TokenMatch::Valid(_)));
        assert_eq!(t.cancel(r).map(|e| e.kind), Ok(TokenKind::Read));
        assert_eq!(t.lookup(r), TokenMatch::None);
        assert_eq!(t.outstanding(), 1);
        // Released endpoints take their read tokens with them.
        let r2 = t.insert_read(EndpointId(2), 0, 8, 7).unwrap();
        t.cancel_endpoint(EndpointId(2));
        assert_eq!(t.lookup(r2), TokenMatch::None);
    }
}
