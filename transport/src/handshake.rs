//! The connection handshake's cryptography: Noise IKpsk1 over X25519, AES-256-GCM and
//! SHA-256 (a side without a pre-shared key uses 32 zero bytes, as WireGuard does), run
//! inside the
//! connection-management messages (docs/design.md §7, §10; `crate::cm` carries it).
//!
//! # Why IK, and how the listener's key reaches a client that has not pinned one
//!
//! In Noise IK the client knows the listener's static (identity) key before it speaks:
//! its first message proves the client's own identity key to the listener (encrypted,
//! so a passive party never sees who connects, and an active one only if it holds the
//! listener's private key), and the listener's answer proves the listener's. That is
//! WireGuard's handshake, and it fits the connection manager's shape: the listener
//! answers a request without a cookie with a `CHALLENGE` and keeps nothing, so the
//! first request carries no handshake; the challenge carries the listener's identity
//! key, and the request that echoes the cookie carries IK's first message. A client
//! that pinned the listener's key ignores a challenge naming another; one that trusts
//! on first use takes it (and is told); a plain connection takes it unverified (its
//! CM messages are then authenticated towards whoever answered, no more).
//!
//! ```text
//! h = ck = "Noise_IKpsk1_25519_AESGCM_SHA256"
//! MixHash(prologue)           prologue = "deposit v13" | the request's fields but the
//!                                        cookie and the handshake | its private data
//! MixHash(s_listener)                                          pre-message: <- s
//! -> e, es, s, ss, psk        request: e (in clear), the client's s encrypted (48 bytes),
//!                             an empty payload's tag (16 bytes)
//! <- e, ee, se                reply: e (in clear), MixHash(the reply's fields | its
//!                             private data), an empty payload's tag (16 bytes)
//! c2s, s2c    = HKDF(ck, "", 2)                 (Noise's Split) traffic secrets
//! cm c2s, s2c = HKDF(ck, "deposit cm", 2)       keys of the connection's CM messages
//! ```
//!
//! With `psk1` the pre-shared key is mixed at the end of the first message (and every
//! `e` also calls MixKey, as Noise's psk modes require), so a listener learns a wrong
//! key from the request and says so in a REJECT the client can verify.
//!
//! A REJECT is authenticated under the state after `ss` (before the psk) and names the
//! request's last tag: only the holder of the listener's private key can compute it,
//! whatever the pre-shared key, and a copy of the request with another tag (which a
//! bystander could send to make the listener refuse it) gets a REJECT that the client,
//! comparing with its own tag, does not take.
//!
//! What the handshake gives (Noise's own analysis of IK): both identities proven, the
//! traffic secrets forward secret (they depend on `ee` and `se`), the client's identity
//! hidden from everyone but the holder of the listener's key. What it does not: the
//! first message can be replayed (the listener's cookie bounds that to its own source
//! address for two CM periods, and a replayer without the ephemeral key completes
//! nothing), and a client whose own private key leaked can be impersonated to by whoever
//! holds it (key-compromise impersonation, as in every IK).

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::digest::{digest, SHA256};
use aws_lc_rs::hmac;

use crate::identity::{Identity, IdentityKey};

/// Bytes of a hash, a chaining key and a symmetric key.
const HASHLEN: usize = 32;
/// Bytes of an AES-GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes of the client's encrypted identity key in the request.
pub const SEALED_KEY_LEN: usize = 32 + TAG_LEN;
/// Bytes of the handshake in a request: the encrypted identity key and the payload tag.
pub const REQUEST_LEN: usize = SEALED_KEY_LEN + TAG_LEN;
/// Bytes of a pre-shared key.
pub const PSK_LEN: usize = crate::secure::PSK_LEN;
/// The Noise protocol: IK with the pre-shared key mixed at the end of the first message.
/// Without a pre-shared key, 32 zero bytes take its place (as WireGuard does), so that
/// a pre-shared key on one side only reads as a different one.
pub const PROTOCOL: &[u8] = b"Noise_IKpsk1_25519_AESGCM_SHA256";
/// The pre-shared key of a side that has none.
const NO_PSK: [u8; PSK_LEN] = [0; PSK_LEN];
/// The prologue's first bytes (the wire version the handshake belongs to).
pub const PROLOGUE_LABEL: &[u8] = b"deposit v13";

/// Why a handshake message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// A tag did not verify: not made by the holder of the key we used, or modified.
    #[error("the handshake does not verify (another key, or a message modified on the way)")]
    Auth,
    /// The random source or a key agreement failed (a low-order public key among them).
    #[error("the key agreement or the random source failed")]
    Crypto,
}

/// Noise's CipherState and SymmetricState in one: chaining key, handshake hash, the
/// current key and its nonce. Plain bytes, so that a handshake in flight can be kept,
/// cloned and compared.
#[derive(Clone, PartialEq, Eq)]
pub struct Symmetric {
    ck: [u8; HASHLEN],
    h: [u8; HASHLEN],
    k: Option<[u8; HASHLEN]>,
    n: u64,
}

impl std::fmt::Debug for Symmetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Symmetric(..)")
    }
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; HASHLEN] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0; HASHLEN];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

/// Noise's HKDF (RFC 5869 with the chaining key as salt and no info): `N` outputs.
fn hkdf<const N: usize>(ck: &[u8; HASHLEN], ikm: &[u8]) -> [[u8; HASHLEN]; N] {
    let temp = hmac_sha256(ck, &[ikm]);
    let mut out = [[0; HASHLEN]; N];
    for i in 0..N {
        let prev: &[u8] = if i == 0 { &[] } else { &out[i - 1] };
        out[i] = hmac_sha256(&temp, &[prev, &[i as u8 + 1]]);
    }
    out
}

fn aead_nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

fn aead_key(k: &[u8; HASHLEN]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("32-byte key"))
}

impl Symmetric {
    /// InitializeSymmetric(protocol name).
    fn new() -> Symmetric {
        let name: &[u8] = PROTOCOL;
        let mut h = [0u8; HASHLEN];
        if name.len() <= HASHLEN {
            h[..name.len()].copy_from_slice(name);
        } else {
            h.copy_from_slice(digest(&SHA256, name).as_ref());
        }
        Symmetric {
            ck: h,
            h,
            k: None,
            n: 0,
        }
    }

    fn mix_hash(&mut self, parts: &[&[u8]]) {
        let mut ctx = aws_lc_rs::digest::Context::new(&SHA256);
        ctx.update(&self.h);
        for p in parts {
            ctx.update(p);
        }
        self.h.copy_from_slice(ctx.finish().as_ref());
    }

    fn mix_key(&mut self, ikm: &[u8]) {
        let [ck, k] = hkdf::<2>(&self.ck, ikm);
        self.ck = ck;
        self.k = Some(k);
        self.n = 0;
    }

    fn mix_key_and_hash(&mut self, ikm: &[u8]) {
        let [ck, th, k] = hkdf::<3>(&self.ck, ikm);
        self.ck = ck;
        self.mix_hash(&[&th]);
        self.k = Some(k);
        self.n = 0;
    }

    /// An `e` token: its public key hashed, and mixed into the key (as Noise's psk
    /// modes require).
    fn mix_ephemeral(&mut self, public: &[u8; 32]) {
        self.mix_hash(&[public]);
        self.mix_key(public);
    }

    /// EncryptAndHash of `buf[..len - TAG_LEN]` in place, its tag after it.
    fn encrypt_and_hash(&mut self, buf: &mut [u8]) {
        let k = self.k.expect("a key is mixed before anything is encrypted");
        let (plain, tag) = buf.split_at_mut(buf.len() - TAG_LEN);
        let t = aead_key(&k)
            .seal_in_place_separate_tag(aead_nonce(self.n), Aad::from(self.h), plain)
            .expect("AES-GCM seals any length here");
        tag.copy_from_slice(t.as_ref());
        self.n += 1;
        self.mix_hash(&[buf]);
    }

    /// DecryptAndHash of `buf` (ciphertext and tag) in place; the plaintext is
    /// `buf[..len - TAG_LEN]`.
    fn decrypt_and_hash(&mut self, buf: &mut [u8]) -> Result<(), HandshakeError> {
        let k = self.k.ok_or(HandshakeError::Auth)?;
        let h = self.h;
        let mut work = buf.to_vec();
        aead_key(&k)
            .open_in_place(aead_nonce(self.n), Aad::from(h), &mut work)
            .map_err(|_| HandshakeError::Auth)?;
        self.n += 1;
        self.mix_hash(&[buf]);
        let n = buf.len() - TAG_LEN;
        buf[..n].copy_from_slice(&work[..n]);
        Ok(())
    }

    /// A REJECT's MAC: only the two ends of this state can compute it; it names the
    /// request's last tag and the REJECT's `parts`.
    fn mac(&self, tag: &[u8; TAG_LEN], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let [key] = hkdf::<1>(&self.ck, b"deposit reject");
        let mut all: Vec<&[u8]> = vec![&self.h, tag];
        all.extend_from_slice(parts);
        truncate(hmac_sha256(&key, &all))
    }

    /// The session's keys, once the handshake is over.
    fn split(&self) -> SessionKeys {
        let [c2s, s2c] = hkdf::<2>(&self.ck, &[]);
        let [cm_c2s, cm_s2c] = hkdf::<2>(&self.ck, b"deposit cm");
        SessionKeys {
            c2s,
            s2c,
            cm_c2s,
            cm_s2c,
        }
    }
}

fn truncate(full: [u8; HASHLEN]) -> [u8; TAG_LEN] {
    let mut t = [0; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

/// What a finished handshake leaves both sides: the traffic secrets of a sealed
/// connection (`crate::secure`) and the keys that authenticate the connection's CM
/// messages, one per direction (client to server, server to client).
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub c2s: [u8; 32],
    pub s2c: [u8; 32],
    pub cm_c2s: [u8; 32],
    pub cm_s2c: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

/// The MAC of a CM message about a connection under `key` (one direction's
/// [`SessionKeys::cm_c2s`] or [`SessionKeys::cm_s2c`]): HMAC-SHA-256 of the message's
/// bytes, cut to 16.
pub fn cm_mac(key: &[u8; 32], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    truncate(hmac_sha256(key, parts))
}

/// The client's side, from the first request to the reply.
#[derive(Clone)]
pub struct Initiator {
    ephemeral: std::sync::Arc<Identity>,
    psk: Option<[u8; PSK_LEN]>,
}

impl std::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initiator")
            .field("ephemeral", &self.ephemeral.public())
            .finish_non_exhaustive()
    }
}

/// The client's state after writing its first message to one listener key: what
/// verifies that listener's REJECT and reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The listener key the message was written to.
    pub listener: IdentityKey,
    /// After `ss`: what a REJECT is authenticated under.
    before_psk: Symmetric,
    /// The request's last tag (a REJECT names it).
    tag: [u8; TAG_LEN],
    /// After the whole message.
    after: Symmetric,
}

impl Initiator {
    /// A fresh ephemeral key pair, and the pre-shared key (if any).
    pub fn new(psk: Option<[u8; PSK_LEN]>) -> Result<Initiator, HandshakeError> {
        Ok(Initiator {
            ephemeral: std::sync::Arc::new(
                Identity::generate().map_err(|_| HandshakeError::Crypto)?,
            ),
            psk,
        })
    }

    /// The ephemeral public key (in every request, the cookieless one too).
    pub fn ephemeral(&self) -> IdentityKey {
        self.ephemeral.public()
    }

    /// The first message to `listener`, from `identity`, bound to `prologue`: writes the
    /// handshake block of the request ([`REQUEST_LEN`] bytes) into `out`.
    pub fn write_request(
        &self,
        identity: &Identity,
        listener: IdentityKey,
        prologue: &[&[u8]],
        out: &mut [u8; REQUEST_LEN],
    ) -> Result<Sent, HandshakeError> {
        let mut s = Symmetric::new();
        s.mix_hash(prologue);
        s.mix_hash(&[&listener.0]);
        s.mix_ephemeral(&self.ephemeral.public().0);
        s.mix_key(&dh(&self.ephemeral, &listener)?);
        let (sealed, tag) = out.split_at_mut(SEALED_KEY_LEN);
        sealed[..32].copy_from_slice(&identity.public().0);
        s.encrypt_and_hash(sealed);
        s.mix_key(&dh(identity, &listener)?);
        let before_psk = s.clone();
        s.mix_key_and_hash(self.psk.as_ref().unwrap_or(&NO_PSK));
        s.encrypt_and_hash(tag);
        Ok(Sent {
            listener,
            before_psk,
            tag: tag.try_into().expect("16 bytes"),
            after: s,
        })
    }

    /// Whether `tag` is the listener's REJECT of the request `sent` for `reason`.
    pub fn verify_reject(&self, sent: &Sent, fields: &[&[u8]], tag: &[u8; TAG_LEN]) -> bool {
        crate::secure::same(&sent.before_psk.mac(&sent.tag, fields), tag)
    }

    /// The listener's reply to `sent`: its ephemeral key `e`, its fields (bound by
    /// MixHash) and its tag. The session's keys when it verifies.
    pub fn read_reply(
        &self,
        identity: &Identity,
        sent: &Sent,
        e: &IdentityKey,
        fields: &[&[u8]],
        tag: &[u8; TAG_LEN],
    ) -> Result<SessionKeys, HandshakeError> {
        let mut s = sent.after.clone();
        s.mix_ephemeral(&e.0);
        s.mix_key(&dh(&self.ephemeral, e)?);
        s.mix_key(&dh(identity, e)?);
        s.mix_hash(fields);
        let mut t = *tag;
        s.decrypt_and_hash(&mut t)?;
        Ok(s.split())
    }
}

fn dh(ours: &Identity, theirs: &IdentityKey) -> Result<[u8; 32], HandshakeError> {
    ours.dh(&theirs.0).map_err(|_| HandshakeError::Crypto)
}

/// The listener's side: a request read, its client's identity key proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The client's identity key.
    pub client: IdentityKey,
    client_e: IdentityKey,
    before_psk: Symmetric,
    /// The request's last tag.
    tag: [u8; TAG_LEN],
    /// After the whole message: `None` when its pre-shared key differs from ours.
    after: Option<Symmetric>,
}

impl Received {
    /// Reads a request's handshake `block` (its ephemeral key `e` beside it, bound to
    /// `prologue`) with the listener's `identity`, up to the pre-shared key (which the
    /// listener of the request's service holds: [`Received::check_psk`]). An error when
    /// it was not written to this identity, or was modified.
    pub fn read(
        identity: &Identity,
        prologue: &[&[u8]],
        e: IdentityKey,
        block: &[u8; REQUEST_LEN],
    ) -> Result<Received, HandshakeError> {
        let mut s = Symmetric::new();
        s.mix_hash(prologue);
        s.mix_hash(&[&identity.public().0]);
        s.mix_ephemeral(&e.0);
        s.mix_key(&dh(identity, &e)?);
        let mut sealed = [0u8; SEALED_KEY_LEN];
        sealed.copy_from_slice(&block[..SEALED_KEY_LEN]);
        s.decrypt_and_hash(&mut sealed)?;
        let client = IdentityKey(sealed[..32].try_into().expect("32 bytes"));
        s.mix_key(&dh(identity, &client)?);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&block[SEALED_KEY_LEN..]);
        Ok(Received {
            client,
            client_e: e,
            before_psk: s,
            tag,
            after: None,
        })
    }

    /// Finishes reading the request with the listener's pre-shared key (`None`: it has
    /// none): whether the request's last tag verifies — false for a different key (or
    /// none on one side only), or that tag modified.
    pub fn check_psk(&mut self, psk: Option<&[u8; PSK_LEN]>) -> bool {
        let mut s = self.before_psk.clone();
        s.mix_key_and_hash(psk.unwrap_or(&NO_PSK));
        let mut tag = self.tag;
        self.after = s.decrypt_and_hash(&mut tag).ok().map(|()| s);
        self.after.is_some()
    }

    /// The tag of a REJECT of this request over `fields`.
    pub fn reject_tag(&self, fields: &[&[u8]]) -> [u8; TAG_LEN] {
        self.before_psk.mac(&self.tag, fields)
    }

    /// The reply (once [`Received::check_psk`] said yes): a fresh ephemeral key pair,
    /// the reply's `fields` bound; returns the ephemeral public key and tag the reply
    /// carries, and the session's keys.
    pub fn write_reply(
        &self,
        fields: &[&[u8]],
    ) -> Result<(IdentityKey, [u8; TAG_LEN], SessionKeys), HandshakeError> {
        let mut s = self.after.clone().ok_or(HandshakeError::Auth)?;
        let e = Identity::generate().map_err(|_| HandshakeError::Crypto)?;
        s.mix_ephemeral(&e.public().0);
        s.mix_key(&dh(&e, &self.client_e)?);
        s.mix_key(&dh(&e, &self.client)?);
        s.mix_hash(fields);
        let mut tag = [0u8; TAG_LEN];
        s.encrypt_and_hash(&mut tag);
        Ok((e.public(), tag, s.split()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Identity, Identity) {
        (Identity::generate().unwrap(), Identity::generate().unwrap())
    }

    #[test]
    fn noise_hkdf_is_rfc5869_with_the_chaining_key_as_salt() {
        // RFC 5869 test case 3 (no salt, no info) cannot be used (Noise always has a
        // salt); check the construction against HMAC by hand instead.
        let ck = [7u8; 32];
        let [a, b] = hkdf::<2>(&ck, b"ikm");
        let prk = hmac_sha256(&ck, &[b"ikm"]);
        assert_eq!(a, hmac_sha256(&prk, &[&[1]]));
        assert_eq!(b, hmac_sha256(&prk, &[&a, &[2]]));
    }

    #[test]
    fn both_sides_derive_the_same_keys_and_learn_each_others_identity() {
        for psk in [None, Some([9u8; 32])] {
            let (client, server) = pair();
            let init = Initiator::new(psk).unwrap();
            let mut block = [0u8; REQUEST_LEN];
            let sent = init
                .write_request(&client, server.public(), &[b"req"], &mut block)
                .unwrap();
            assert_ne!(
                &block[..32],
                &client.public().0[..],
                "the identity is encrypted"
            );
            let mut got = Received::read(&server, &[b"req"], init.ephemeral(), &block).unwrap();
            assert_eq!(got.client, client.public());
            assert!(got.check_psk(psk.as_ref()));
            let (e, tag, keys) = got.write_reply(&[b"rep"]).unwrap();
            let mine = init
                .read_reply(&client, &sent, &e, &[b"rep"], &tag)
                .unwrap();
            assert_eq!(mine, keys);
            assert_ne!(keys.c2s, keys.s2c);
            assert_ne!(keys.cm_c2s, keys.cm_s2c);
            // Another reply field, or another tag, does not verify.
            assert_eq!(
                init.read_reply(&client, &sent, &e, &[b"rep!"], &tag),
                Err(HandshakeError::Auth)
            );
        }
    }

    #[test]
    fn a_request_to_another_key_or_with_another_prologue_does_not_read() {
        let (client, server) = pair();
        let other = Identity::generate().unwrap();
        let init = Initiator::new(None).unwrap();
        let mut block = [0u8; REQUEST_LEN];
        init.write_request(&client, other.public(), &[b"p"], &mut block)
            .unwrap();
        let e = init.ephemeral();
        assert_eq!(
            Received::read(&server, &[b"p"], e, &block).map(|_| ()),
            Err(HandshakeError::Auth)
        );
        init.write_request(&client, server.public(), &[b"p"], &mut block)
            .unwrap();
        assert_eq!(
            Received::read(&server, &[b"q"], e, &block).map(|_| ()),
            Err(HandshakeError::Auth)
        );
        for i in 0..REQUEST_LEN {
            let mut b = block;
            b[i] ^= 0x10;
            let read = Received::read(&server, &[b"p"], e, &b);
            if i < SEALED_KEY_LEN {
                assert!(read.is_err(), "{i}");
            } else {
                // The last tag is checked with the listener's pre-shared key.
                assert!(!read.unwrap().check_psk(None), "{i}");
            }
        }
    }

    #[test]
    fn a_bystander_cannot_answer_for_the_listener() {
        // The bystander sees the request, makes its own ephemeral key and a reply; it
        // does not hold the listener's private key.
        let (client, server) = pair();
        let bystander = Identity::generate().unwrap();
        let init = Initiator::new(None).unwrap();
        let mut block = [0u8; REQUEST_LEN];
        let sent = init
            .write_request(&client, server.public(), &[b"p"], &mut block)
            .unwrap();
        // It can read nothing with its own key, so it forges a state of its own.
        let forged = Received {
            client: client.public(),
            client_e: init.ephemeral(),
            before_psk: Symmetric::new(),
            tag: [0; TAG_LEN],
            after: Some(Symmetric::new()),
        };
        let _ = bystander;
        let (e, tag, _) = {
            let mut f = forged.clone();
            f.after.as_mut().unwrap().k = Some([1; 32]);
            f.write_reply(&[b"rep"]).unwrap()
        };
        assert_eq!(
            init.read_reply(&client, &sent, &e, &[b"rep"], &tag),
            Err(HandshakeError::Auth)
        );
        let fields: [&[u8]; 1] = [b"reject"];
        assert!(!init.verify_reject(&sent, &fields, &forged.reject_tag(&fields)));
    }

    #[test]
    fn a_different_psk_reads_as_a_mismatch_and_the_reject_still_verifies() {
        let (client, server) = pair();
        let init = Initiator::new(Some([1; 32])).unwrap();
        let mut block = [0u8; REQUEST_LEN];
        let sent = init
            .write_request(&client, server.public(), &[b"p"], &mut block)
            .unwrap();
        let e = init.ephemeral();
        let mut got = Received::read(&server, &[b"p"], e, &block).unwrap();
        assert!(!got.check_psk(Some(&[2; 32])));
        assert!(!got.check_psk(None));
        assert_eq!(got.write_reply(&[]).map(|_| ()), Err(HandshakeError::Auth));
        let fields: [&[u8]; 2] = [b"r", &[4]];
        assert!(init.verify_reject(&sent, &fields, &got.reject_tag(&fields)));
        assert!(!init.verify_reject(&sent, &[b"r", &[5]], &got.reject_tag(&fields)));
        // A copy of the request with its last tag changed is refused by the listener,
        // but the client does not take that REJECT: it names another request.
        let mut changed = block;
        changed[REQUEST_LEN - 1] ^= 1;
        let mut other = Received::read(&server, &[b"p"], e, &changed).unwrap();
        assert!(!other.check_psk(Some(&[1; 32])));
        assert!(!init.verify_reject(&sent, &fields, &other.reject_tag(&fields)));
        assert!(got.check_psk(Some(&[1; 32])));
    }
}
