//! Secure connections: a key agreement in the connection handshake and every section of
//! the connection's frames sealed with AES-256-GCM (docs/design.md §10).
//!
//! # Keys
//!
//! The connection's handshake (`crate::handshake`, Noise IK between the two nodes'
//! identity keys, an optional pre-shared key mixed in) leaves one traffic secret per
//! direction, client to server and server to client; [`Session::new`] takes them.
//! Closing a connection and every other CM message about it is authenticated by the
//! handshake's CM keys (`crate::cm`), not here.
//!
//! # A sealed section
//!
//! ```text
//! | header 32 (flag SEALED) | N cells (encrypted) | seal cell 48 |
//! seal cell:  0..8 packet number | 8..12 key generation | 12..32 zero | 32..48 GCM tag
//! nonce     = IV(generation) XOR (0^4 | packet number)       (as TLS 1.3 and QUIC)
//! AAD       = header (MORE flag cleared) | seal cell 0..32
//! ```
//!
//! Every sealed section takes the next packet number of its direction — a
//! retransmission too, since frames are rebuilt each time — so a (key, nonce) pair is
//! never used twice. The transport header (connection, key, sequence, acknowledgement,
//! credits) is authenticated, not encrypted; the cells are both. `MORE` is left out of
//! the AAD because the writer sets it when a later section begins; the frame's
//! structure (and its CRC) already pin it.
//!
//! The receiver refuses, before touching any message: a section that does not verify
//! (`auth_failed`), a packet number already taken or older than the replay window of
//! [`REPLAY_WINDOW`] numbers (`replayed`, as IPsec's anti-replay window), a plain
//! section on a secure connection or a sealed one on a plain connection (`not_sealed`).
//!
//! # Rekeying
//!
//! Each direction moves to the next key generation after [`DEFAULT_REKEY_AFTER`] sealed
//! sections (AES-GCM's confidentiality limit, RFC 9001 §6.6; `NodeConfig::rekey_after`,
//! at least [`REPLAY_WINDOW`]):
//! `secret(g+1) = HKDF-Expand(secret(g), "ku", 32)`, key and IV of a generation expanded
//! from its secret. The generation travels in every seal cell; the receiver opens the
//! current one, the one before (sections reordered across the change) and up to
//! [`MAX_GENERATIONS_AHEAD`] ahead (computed once and kept: a forged generation costs
//! one authentication failure, not a derivation each time), and forgets a generation
//! once a later one verified. Packet numbers run on across generations, and are 64 bits:
//! they do not wrap in the life of a connection.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::hkdf::{self, KeyType, HKDF_SHA256};

use crate::wire::{CELL_LEN, HEADER_LEN};

/// Bytes of a pre-shared key.
pub const PSK_LEN: usize = 32;
/// The seal cell that ends a sealed section.
pub const SEAL_LEN: usize = CELL_LEN;
/// Bytes of the GCM tag.
pub const TAG_LEN: usize = 16;
/// Packet numbers below the highest taken that the receiver still tells apart.
pub const REPLAY_WINDOW: u64 = 1024;
/// Sealed sections per key generation by default: AES-GCM's confidentiality limit of
/// 2^23 (RFC 9001 §6.6).
pub const DEFAULT_REKEY_AFTER: u64 = 1 << 23;
/// Key generations ahead of its current one a receiver tries.
pub const MAX_GENERATIONS_AHEAD: u32 = 8;

mod seal {
    use crate::wire::Field;
    pub const PN: Field = 0..8;
    pub const GENERATION: Field = 8..12;
    /// The tag covers bytes 0..32 of the seal cell (zero after the generation).
    pub const TAG: Field = 32..48;
}

/// Why a secure connection could not be set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SecureError {
    #[error("the system's random source or the key agreement failed")]
    Crypto,
}

/// Why a sealed section was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The tag does not verify, or the generation is not one the receiver tries.
    Auth,
    /// The packet number was taken, or is older than the window.
    Replay,
}

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand<const N: usize>(prk: &hkdf::Prk, label: &[u8], context: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    prk.expand(&[b"deposit ", label, context], Len(N))
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF-SHA256 expands up to 8160 bytes");
    out
}

impl Session {
    /// The session of one side (`client`: the side that connected) from the
    /// handshake's traffic secrets of the two directions (client to server, server to
    /// client), sealing with `rekey_after` sections per key generation (at least
    /// [`REPLAY_WINDOW`], so that every section the replay window still takes is of the
    /// receiver's current generation or the one before, whose keys it keeps).
    pub fn new(c2s: &[u8; 32], s2c: &[u8; 32], client: bool, rekey_after: u64) -> Session {
        let (tx, rx) = if client { (c2s, s2c) } else { (s2c, c2s) };
        let rx = Keys::new(*rx, 0);
        Session {
            tx: TxState {
                keys: Keys::new(*tx, 0),
                pn: 0,
                in_generation: 0,
                rekey_after: rekey_after.max(REPLAY_WINDOW),
            },
            rx: RxState {
                ahead: Vec::new(),
                previous: None,
                current: rx,
                window: Window::default(),
            },
            rekeys: 0,
        }
    }
}

/// The key, IV and secret of one generation of one direction.
struct Keys {
    generation: u32,
    secret: [u8; 32],
    key: LessSafeKey,
    iv: [u8; 12],
}

impl Keys {
    fn new(secret: [u8; 32], generation: u32) -> Keys {
        let prk = hkdf::Prk::new_less_safe(HKDF_SHA256, &secret);
        let key: [u8; 32] = expand(&prk, b"key", &[]);
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("32-byte key"));
        Keys {
            generation,
            secret,
            key,
            iv: expand(&prk, b"iv", &[]),
        }
    }

    fn next(&self) -> Keys {
        let prk = hkdf::Prk::new_less_safe(HKDF_SHA256, &self.secret);
        Keys::new(expand(&prk, b"ku", &[]), self.generation.wrapping_add(1))
    }

    fn nonce(&self, pn: u64) -> Nonce {
        let mut n = self.iv;
        for (b, p) in n[4..].iter_mut().zip(pn.to_be_bytes()) {
            *b ^= p;
        }
        Nonce::assume_unique_for_key(n)
    }
}

/// The sending direction.
struct TxState {
    keys: Keys,
    pn: u64,
    in_generation: u64,
    rekey_after: u64,
}

/// The receiving direction.
struct RxState {
    /// Generations after `current`, derived when a section named one (at most
    /// [`MAX_GENERATIONS_AHEAD`]).
    ahead: Vec<Keys>,
    previous: Option<Keys>,
    current: Keys,
    window: Window,
}

/// Which packet numbers were taken: the highest, plus a bitmap of the
/// [`REPLAY_WINDOW`] below it kept as a ring of words indexed by packet number (as
/// RFC 6479 does): a number in order costs one bit and, once in 64, clearing one word,
/// not a shift of the whole map.
#[derive(Default)]
struct Window {
    /// One past the highest packet number taken (0: none yet).
    top: u64,
    /// Bit `pn % 64` of word `(pn / 64) % WINDOW_WORDS`: packet number `pn` taken, for
    /// the numbers of the words up to the one of `top - 1`.
    bits: [u64; WINDOW_WORDS],
}

/// Words of the ring: the window's 1024 numbers below `top` touch at most 17 of them.
const WINDOW_WORDS: usize = (REPLAY_WINDOW / 64) as usize + 1;

impl Window {
    fn slot(pn: u64) -> (usize, u64) {
        (((pn / 64) % WINDOW_WORDS as u64) as usize, 1 << (pn % 64))
    }

    fn fresh(&self, pn: u64) -> bool {
        if pn >= self.top {
            return true;
        }
        let (word, bit) = Window::slot(pn);
        self.top - 1 - pn < REPLAY_WINDOW && self.bits[word] & bit == 0
    }

    fn take(&mut self, pn: u64) {
        if pn >= self.top {
            // The words after the one of `top - 1` up to the one of `pn` held numbers
            // a whole ring ago: cleared (all of them at most once).
            let from = if self.top == 0 {
                0
            } else {
                (self.top - 1) / 64 + 1
            };
            let to = pn / 64;
            if to >= from {
                for w in from..=to.min(from + WINDOW_WORDS as u64 - 1) {
                    self.bits[(w % WINDOW_WORDS as u64) as usize] = 0;
                }
            }
            self.top = pn + 1;
        }
        let (word, bit) = Window::slot(pn);
        self.bits[word] |= bit;
    }
}

/// A secure connection's sealing state, both directions.
pub struct Session {
    tx: TxState,
    rx: RxState,
    rekeys: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("tx_pn", &self.tx.pn)
            .field("tx_generation", &self.tx.keys.generation)
            .field("rx_generation", &self.rx.current.generation)
            .finish_non_exhaustive()
    }
}

/// The AAD of a section: its header with `MORE` cleared, then the seal cell up to the
/// tag (`sealed`: its first 16 bytes, the packet number and the generation; the 16
/// after them are zero).
///
/// Built from whole 16-byte words: the library reads the AAD 16 bytes at a time, and a
/// byte patched in place (`MORE`) or fields stored one by one would stall those loads
/// (store-to-load forwarding fails), about 20 ns a section here.
fn aad(header: &[u8; HEADER_LEN], sealed: u128) -> [u8; HEADER_LEN + 32] {
    let h0 = u128::from_le_bytes(crate::wire::array(header, 0..16))
        & !(u128::from(crate::wire::hflags::MORE) << 8);
    let h1 = u128::from_le_bytes(crate::wire::array(header, 16..32));
    let mut a = [0; HEADER_LEN + 32];
    a[0..16].copy_from_slice(&h0.to_le_bytes());
    a[16..32].copy_from_slice(&h1.to_le_bytes());
    a[32..48].copy_from_slice(&sealed.to_le_bytes());
    a
}

/// The first 16 bytes of a seal cell as a little-endian word: the packet number and
/// the generation, big-endian, then zeros.
fn sealed_word(pn: u64, generation: u32) -> u128 {
    u128::from(pn.swap_bytes()) | u128::from(generation.swap_bytes()) << 64
}

impl Session {
    /// Seals a section: encrypts `cells` in place and writes the seal cell. `header`
    /// is the section's header as it goes on the wire (its cell count set). Returns
    /// whether the direction moved to a new key generation for it.
    pub fn seal(
        &mut self,
        header: &[u8; HEADER_LEN],
        cells: &mut [u8],
        seal_cell: &mut [u8; SEAL_LEN],
    ) -> bool {
        let tx = &mut self.tx;
        let rekeyed = tx.in_generation >= tx.rekey_after;
        if rekeyed {
            tx.keys = tx.keys.next();
            tx.in_generation = 0;
            self.rekeys += 1;
        }
        let pn = tx.pn;
        tx.pn += 1;
        tx.in_generation += 1;
        let sealed = sealed_word(pn, tx.keys.generation);
        let tag = tx
            .keys
            .key
            .seal_in_place_separate_tag(
                tx.keys.nonce(pn),
                Aad::from(&aad(header, sealed)[..]),
                cells,
            )
            .expect("a section is far below GCM's length limit");
        seal_cell[..16].copy_from_slice(&sealed.to_le_bytes());
        seal_cell[16..32].fill(0);
        seal_cell[seal::TAG].copy_from_slice(tag.as_ref());
        rekeyed
    }

    /// Opens a sealed section: `cipher` (the cells as the frame carries them) is
    /// decrypted into `plain` (as long) when the tag verifies and the packet number is
    /// fresh; then the packet number is taken and a newer key generation becomes the
    /// current one. On a refusal the session is unchanged and `plain` holds nothing of
    /// use (it may have been written).
    pub fn open(
        &mut self,
        header: &[u8; HEADER_LEN],
        cipher: &[u8],
        seal_cell: &[u8],
        plain: &mut [u8],
    ) -> Result<(), Refusal> {
        let seal_cell: &[u8; SEAL_LEN] = seal_cell.try_into().map_err(|_| Refusal::Auth)?;
        let pn = u64::from_be_bytes(crate::wire::array(seal_cell, seal::PN));
        let generation = u32::from_be_bytes(crate::wire::array(seal_cell, seal::GENERATION));
        let rx = &mut self.rx;
        if !rx.window.fresh(pn) {
            return Err(Refusal::Replay);
        }
        let ahead = generation.wrapping_sub(rx.current.generation);
        let keys = if ahead == 0 {
            &rx.current
        } else if ahead <= MAX_GENERATIONS_AHEAD {
            while rx.ahead.len() < ahead as usize {
                let next = rx.ahead.last().unwrap_or(&rx.current).next();
                rx.ahead.push(next);
            }
            &rx.ahead[ahead as usize - 1]
        } else {
            match &rx.previous {
                Some(p) if p.generation == generation => p,
                _ => return Err(Refusal::Auth),
            }
        };
        // The seal cell as received: bytes 12..32 are authenticated whatever they hold.
        let sealed = u128::from_le_bytes(crate::wire::array(seal_cell, 0..16));
        let mut aad = aad(header, sealed);
        aad[48..].copy_from_slice(&seal_cell[16..32]);
        keys.key
            .open_separate_gather(
                keys.nonce(pn),
                Aad::from(&aad[..]),
                cipher,
                &seal_cell[seal::TAG],
                plain,
            )
            .map_err(|_| Refusal::Auth)?;
        rx.window.take(pn);
        if (1..=MAX_GENERATIONS_AHEAD).contains(&ahead) {
            let mut newer = rx.ahead.drain(..ahead as usize);
            let mut current = newer.next_back().expect("derived above");
            let previous = newer.next_back();
            drop(newer);
            std::mem::swap(&mut rx.current, &mut current);
            // The generation just before the new current one stays for sections
            // reordered across the change.
            rx.previous = Some(previous.unwrap_or(current));
        }
        Ok(())
    }

    /// Key generations the sending direction moved on.
    pub fn rekeys(&self) -> u64 {
        self.rekeys
    }

    /// The sending direction's key generation.
    pub fn tx_generation(&self) -> u32 {
        self.tx.keys.generation
    }

    /// The receiving direction's key generation.
    pub fn rx_generation(&self) -> u32 {
        self.rx.current.generation
    }

    /// Sealed sections sent.
    pub fn sealed(&self) -> u64 {
        self.tx.pn
    }
}

/// Equality in constant time, for keys, tags and MACs.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two sides' sessions from secrets `c2s`/`s2c` (the client's) and the
    /// server's (the same unless a test makes them differ).
    fn sessions(
        client: ([u8; 32], [u8; 32]),
        server: ([u8; 32], [u8; 32]),
        rekey: u64,
    ) -> (Session, Session) {
        (
            Session::new(&client.0, &client.1, true, rekey),
            Session::new(&server.0, &server.1, false, rekey),
        )
    }

    fn pair(rekey: u64) -> (Session, Session) {
        let mut k = [[0u8; 32]; 2];
        for x in &mut k {
            aws_lc_rs::rand::fill(x).unwrap();
        }
        sessions((k[0], k[1]), (k[0], k[1]), rekey)
    }

    fn header(seq: u8) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = crate::wire::VERSION;
        h[16] = seq;
        h
    }

    /// Opens `ct` under `h` with `seal` into a new vector.
    fn opened(
        s: &mut Session,
        h: &[u8; HEADER_LEN],
        ct: &[u8],
        seal: &[u8],
    ) -> Result<Vec<u8>, Refusal> {
        let mut plain = vec![0; ct.len()];
        s.open(h, ct, seal, &mut plain).map(|()| plain)
    }

    fn sealed(s: &mut Session, seq: u8, plain: &[u8]) -> (Vec<u8>, [u8; SEAL_LEN]) {
        let mut cells = plain.to_vec();
        let mut seal = [0; SEAL_LEN];
        s.seal(&header(seq), &mut cells, &mut seal);
        (cells, seal)
    }

    #[test]
    fn a_sealed_section_opens_once_and_reads_as_sent() {
        let (mut c, mut s) = pair(DEFAULT_REKEY_AFTER);
        let plain: Vec<u8> = (0..96).map(|i| i as u8).collect();
        let (ct, seal) = sealed(&mut c, 7, &plain);
        assert_ne!(ct, plain, "encrypted");
        assert_eq!(opened(&mut s, &header(7), &ct, &seal), Ok(plain.clone()));
        assert_eq!(opened(&mut s, &header(7), &ct, &seal), Err(Refusal::Replay));
        // The other direction has its own keys.
        let (back, seal) = sealed(&mut s, 1, &plain);
        assert_eq!(opened(&mut c, &header(1), &back, &seal), Ok(plain));
    }

    #[test]
    fn any_changed_bit_of_header_cells_or_seal_is_refused() {
        let (mut c, mut s) = pair(DEFAULT_REKEY_AFTER);
        let plain = [0x5a; 48];
        let (ct, seal) = sealed(&mut c, 3, &plain);
        for bit in 0..(HEADER_LEN + 48 + SEAL_LEN) * 8 {
            let (mut h, mut cells, mut sc) = (header(3), ct.clone(), seal);
            let (byte, mask) = (bit / 8, 1u8 << (bit % 8));
            if byte < HEADER_LEN {
                if byte == 1 && mask == crate::wire::hflags::MORE {
                    continue; // not authenticated: the frame's structure pins it
                }
                h[byte] ^= mask;
            } else if byte < HEADER_LEN + 48 {
                cells[byte - HEADER_LEN] ^= mask;
            } else {
                sc[byte - HEADER_LEN - 48] ^= mask;
            }
            let r = opened(&mut s, &h, &cells, &sc);
            assert!(r.is_err(), "bit {bit} changed and still opened");
        }
        assert_eq!(opened(&mut s, &header(3), &ct, &seal), Ok(plain.to_vec()));
    }

    #[test]
    fn other_secrets_fail_every_section() {
        let (mut c, mut s) = sessions(([1; 32], [2; 32]), ([1; 32], [3; 32]), 100);
        let (ct, seal) = sealed(&mut c, 0, &[9; 48]);
        assert_eq!(opened(&mut s, &header(0), &ct, &seal), Ok(vec![9; 48]));
        let (ct, seal) = sealed(&mut s, 0, &[9; 48]);
        assert_eq!(opened(&mut c, &header(0), &ct, &seal), Err(Refusal::Auth));
    }

    #[test]
    fn keys_change_every_rekey_after_sections_and_reordered_ones_still_open() {
        let (mut c, mut s) = pair(10);
        let mut held = Vec::new();
        for i in 0..10 * REPLAY_WINDOW as u32 {
            let plain = [i as u8; 48];
            let (ct, seal) = sealed(&mut c, i as u8, &plain);
            // Every seventh is held back and delivered after the next two.
            if i % 7 == 3 {
                held.push((i, ct, seal, plain));
                continue;
            }
            assert_eq!(
                opened(&mut s, &header(i as u8), &ct, &seal),
                Ok(plain.to_vec())
            );
            if held.first().is_some_and(|h| h.0 + 2 <= i) {
                let (j, ct, seal, plain) = held.remove(0);
                let back = opened(&mut s, &header(j as u8), &ct, &seal)
                    .unwrap_or_else(|e| panic!("section {j} reordered across a rekey: {e:?}"));
                assert_eq!(back, plain);
            }
        }
        assert_eq!(c.rekeys(), 9, "10 is below the floor of {REPLAY_WINDOW}");
        assert_eq!(c.tx_generation(), 9);
        assert_eq!(s.rx_generation(), 9);
        // Sections of many generations lost: the receiver catches up within the limit.
        for _ in 0..(MAX_GENERATIONS_AHEAD as u64 * REPLAY_WINDOW - 5) {
            sealed(&mut c, 0, &[0; 48]);
        }
        let (ct, seal) = sealed(&mut c, 0, &[1; 48]);
        assert_eq!(opened(&mut s, &header(0), &ct, &seal), Ok(vec![1; 48]));
        assert_eq!(s.rx_generation(), c.tx_generation());
    }

    #[test]
    fn a_forged_generation_is_refused_and_derives_once() {
        let (mut c, mut s) = pair(1000);
        let (ct, mut seal) = sealed(&mut c, 0, &[1; 48]);
        seal[seal::GENERATION].copy_from_slice(&3u32.to_be_bytes());
        for _ in 0..3 {
            assert_eq!(opened(&mut s, &header(0), &ct, &seal), Err(Refusal::Auth));
        }
        assert_eq!(s.rx.ahead.len(), 3);
        seal[seal::GENERATION].copy_from_slice(&100u32.to_be_bytes());
        assert_eq!(opened(&mut s, &header(0), &ct, &seal), Err(Refusal::Auth));
        assert_eq!(s.rx_generation(), 0);
    }

    #[test]
    fn the_replay_window_takes_each_number_once_and_refuses_the_too_old() {
        let mut w = Window::default();
        let mut taken = std::collections::HashSet::new();
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let top = w.top;
            // Mostly near the top, behind it up to twice the window; one in 50 far
            // ahead (past the whole ring of words).
            let pn = if x % 50 == 0 {
                top + x % 5000
            } else {
                (top + (x % 64)).saturating_sub(x % 2000)
            };
            let expect = if pn >= top {
                true
            } else {
                top - 1 - pn < REPLAY_WINDOW && !taken.contains(&pn)
            };
            assert_eq!(w.fresh(pn), expect, "pn {pn} top {top}");
            if expect {
                w.take(pn);
                taken.insert(pn);
            }
        }
    }
}
