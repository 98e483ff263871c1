//! A node's long-term identity: an X25519 key pair, and the files users keep of their own
//! key and of their peers' (in the shape of WireGuard's keys and OpenSSH's files).
//!
//! The public half, an [`IdentityKey`], names a node: the handshake (`crate::handshake`)
//! proves that each side holds the private half of the key it claims, and a side decides
//! whether to trust the key it was shown from one of the two lists below. Keys are written
//! as standard base64 with padding, 44 characters, as `wg genkey` and `wg pubkey` do.
//!
//! # The files
//!
//! The **identity file** ([`Identity::default_path`]: `$DEPOSIT_IDENTITY`, else
//! `$XDG_CONFIG_HOME/deposit/identity`, else `~/.config/deposit/identity`) holds the
//! node's private key, one line in base64 (a `wg genkey` output can be used as it is):
//!
//! ```text
//! yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=
//! ```
//!
//! [`Identity::load_or_generate`] creates it when missing, mode 0600 in a directory
//! created 0700, and refuses to read one that group or others can read or write (as
//! OpenSSH refuses such a private key): `chmod 600` it.
//!
//! **Known peers** ([`KnownPeers::default_path`]: `~/.config/deposit/known_peers`), a
//! client's record of the keys its listeners showed, as OpenSSH's `known_hosts`
//! (trust on first use): one `<peer> <key>` a line, the peer a free-form address without
//! whitespace; `#` starts a comment line. [`KnownPeers::add`] creates the file 0600.
//!
//! ```text
//! # peer            key
//! 10.0.0.2          HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=
//! 10.0.0.3:18515    xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
//! fe80::1           TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=
//! ```
//!
//! **Authorised keys** ([`load_authorized_keys`]), a listener's list of the clients it
//! accepts, as OpenSSH's `authorized_keys` or WireGuard's peer list: one key a line,
//! optionally followed by whitespace and a free-form comment; `#` starts a comment line.
//! A missing file is an error, not an empty list that would let everybody in by mistake.
//!
//! ```text
//! # the storage nodes
//! HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw= storage-1
//! xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg= storage-2 (rack 4)
//! ```
//!
//! # What this module must never do
//!
//! Write a private key to a file that group or others can read (the file is created
//! 0600 under a new name and renamed into place, never written in place under looser
//! permissions), or print one: `Identity`'s `Debug` shows the public key only, and no
//! error carries a private key's text (a malformed identity file is reported by path and
//! reason, not content). Buffers that held private bytes are zeroed after use.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey, X25519};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use zeroize::Zeroizing;

/// Bytes of an X25519 key, public or private.
pub const KEY_LEN: usize = 32;

/// Characters of a key in padded base64.
const B64_LEN: usize = 44;

/// Largest identity file read: a key, its newline and some slack for whitespace.
const MAX_IDENTITY_FILE: u64 = 256;

/// What went wrong with a key, a key file or a key agreement.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file (or directory).
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A string that is not a key.
    #[error(
        "{what:?} is not a key (expected {B64_LEN} characters of base64 encoding {KEY_LEN} bytes)"
    )]
    BadKey {
        /// The string.
        what: String,
    },
    /// A line of a key file that cannot be read.
    #[error("{}, line {line}: {why}", path.display())]
    BadLine {
        /// The file.
        path: PathBuf,
        /// Its line number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A peer name that cannot be written to the known-peers file.
    #[error("{peer:?} cannot name a known peer: {why}")]
    BadPeer {
        /// The name.
        peer: String,
        /// Why.
        why: &'static str,
    },
    /// A private key file that group or others can read or write.
    #[error("identity key file {} is readable by others (mode {mode:o}): chmod 600 it", path.display())]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key agreement or the random source failed (or the peer's key is of low order).
    #[error("the key agreement or the random source failed")]
    Crypto,
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An X25519 public key: a node's identity as others see it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityKey(pub [u8; KEY_LEN]);

impl fmt::Display for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; B64_LEN];
        let n = STANDARD
            .encode_slice(self.0, &mut out)
            .map_err(|_| fmt::Error)?;
        f.write_str(std::str::from_utf8(&out[..n]).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for IdentityKey {
    type Err = IdentityError;

    /// Parses a key in padded base64 (44 characters, nothing around them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        decode_key(s.as_bytes())
            .map(|k| IdentityKey(*k))
            .ok_or_else(|| IdentityError::BadKey { what: s.to_owned() })
    }
}

/// Decodes exactly 32 bytes from padded base64, into a buffer zeroed when dropped.
fn decode_key(b64: &[u8]) -> Option<Zeroizing<[u8; KEY_LEN]>> {
    if b64.len() != B64_LEN {
        return None;
    }
    // 44 characters decode to at most 33 bytes; the engine wants room for its estimate.
    let mut buf = Zeroizing::new([0u8; B64_LEN]);
    let n = STANDARD.decode_slice(b64, &mut buf[..]).ok()?;
    if n != KEY_LEN {
        return None;
    }
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    key.copy_from_slice(&buf[..KEY_LEN]);
    Some(key)
}

/// A node's long-term X25519 key pair.
pub struct Identity {
    private: PrivateKey,
    public: IdentityKey,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A new key pair from the system's random source.
    pub fn generate() -> Result<Identity, IdentityError> {
        let private = PrivateKey::generate(&X25519).map_err(|_| IdentityError::Crypto)?;
        Self::with(private)
    }

    /// The key pair of a private key (any 32 bytes: X25519 clamps them).
    pub fn from_private(bytes: &[u8; KEY_LEN]) -> Result<Identity, IdentityError> {
        let private =
            PrivateKey::from_private_key(&X25519, bytes).map_err(|_| IdentityError::Crypto)?;
        Self::with(private)
    }

    fn with(private: PrivateKey) -> Result<Identity, IdentityError> {
        let public = private
            .compute_public_key()
            .map_err(|_| IdentityError::Crypto)?;
        let public = IdentityKey(
            public
                .as_ref()
                .try_into()
                .map_err(|_| IdentityError::Crypto)?,
        );
        Ok(Identity { private, public })
    }

    /// The public key.
    pub fn public(&self) -> IdentityKey {
        self.public
    }

    /// X25519 of our private key and `peer`'s public key. A peer key of low order (which
    /// gives the all-zero secret whatever our key, RFC 7748 §6.1) is an error. The caller
    /// owns the secret: zero it once used.
    pub fn dh(&self, peer: &[u8; KEY_LEN]) -> Result<[u8; KEY_LEN], IdentityError> {
        agreement::agree(
            &self.private,
            UnparsedPublicKey::new(&X25519, peer),
            IdentityError::Crypto,
            |s| {
                let s: &[u8; KEY_LEN] = s.try_into().map_err(|_| IdentityError::Crypto)?;
                // Without an early exit: the secret's value should not show in the timing.
                if s.iter().fold(0u8, |acc, b| acc | b) == 0 {
                    return Err(IdentityError::Crypto);
                }
                Ok(*s)
            },
        )
    }

    /// The identity file's default place: `$DEPOSIT_IDENTITY` if set, else
    /// `$XDG_CONFIG_HOME/deposit/identity`, else `$HOME/.config/deposit/identity`;
    /// `None` when none of these is set.
    pub fn default_path() -> Option<PathBuf> {
        config_path(
            std::env::var_os("DEPOSIT_IDENTITY"),
            std::env::var_os("XDG_CONFIG_HOME"),
            std::env::var_os("HOME"),
            "identity",
        )
    }

    /// The identity kept at `path`, and whether it was generated just now: reads the file
    /// (a private key in base64, one line), or, if there is none, generates a key and
    /// writes it there (mode 0600, its directory created 0700 if missing). Refuses a file
    /// that group or others can read or write ([`IdentityError::Permissions`]).
    pub fn load_or_generate(path: &Path) -> Result<(Identity, bool), IdentityError> {
        match File::open(path) {
            Ok(file) => Ok((Self::read(path, file)?, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::create(path),
            Err(e) => Err(io_error(path)(e)),
        }
    }

    /// Reads an opened identity file (the permissions are those of the file opened, not of
    /// whatever is at `path` by now).
    fn read(path: &Path, file: File) -> Result<Identity, IdentityError> {
        let meta = file.metadata().map_err(io_error(path))?;
        if !meta.is_file() {
            return Err(IdentityError::BadLine {
                path: path.to_path_buf(),
                line: 1,
                why: "not a regular file".into(),
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(IdentityError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        let mut text = Zeroizing::new(Vec::with_capacity(MAX_IDENTITY_FILE as usize + 1));
        (&file)
            .take(MAX_IDENTITY_FILE + 1)
            .read_to_end(&mut text)
            .map_err(io_error(path))?;
        // Never the content in the error: it may be a private key a character off.
        let bad = |why: &str| IdentityError::BadLine {
            path: path.to_path_buf(),
            line: 1,
            why: why.into(),
        };
        if text.len() as u64 > MAX_IDENTITY_FILE {
            return Err(bad("too long for a private key"));
        }
        let key = decode_key(text.trim_ascii())
            .ok_or_else(|| bad("not a private key (one line of base64 encoding 32 bytes)"))?;
        Self::from_private(&key)
    }

    /// Generates an identity and writes it to `path`, which did not exist.
    fn create(path: &Path) -> Result<(Identity, bool), IdentityError> {
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        aws_lc_rs::rand::fill(&mut key[..]).map_err(|_| IdentityError::Crypto)?;
        let identity = Self::from_private(&key)?;
        let mut line = Zeroizing::new([0u8; B64_LEN + 1]);
        let n = STANDARD
            .encode_slice(&key[..], &mut line[..])
            .map_err(|_| IdentityError::Crypto)?;
        line[n] = b'\n';

        let dir = parent_dir(path);
        create_dir(dir)?;
        let tmp = temp_name(path);
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&line[..=n])?;
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error(&tmp)(e));
        }
        // Into place without replacing a file another process wrote meanwhile: a hard
        // link fails if `path` exists (then that process's key is the one to use). Where
        // the file system has no hard links, a rename.
        let placed = match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(_) => fs::rename(&tmp, path).map(|()| true),
        };
        let _ = fs::remove_file(&tmp);
        match placed {
            Ok(true) => {
                // The new name durable too (best effort: not every file system can).
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
                Ok((identity, true))
            }
            Ok(false) => {
                let file = File::open(path).map_err(io_error(path))?;
                Ok((Self::read(path, file)?, false))
            }
            Err(e) => Err(io_error(path)(e)),
        }
    }
}

/// `path`'s directory (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates `dir` and its missing ancestors, mode 0700.
fn create_dir(dir: &Path) -> Result<(), IdentityError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error(dir))
}

/// A name next to `path` for a file to be renamed into place.
fn temp_name(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_else(|| "identity".as_ref()));
    name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    parent_dir(path).join(name)
}

/// `explicit`, else `$XDG_CONFIG_HOME/deposit/<name>`, else `$HOME/.config/deposit/<name>`
/// (empty variables count as unset; a relative `XDG_CONFIG_HOME` is ignored, as the XDG
/// specification says).
fn config_path(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
    name: &str,
) -> Option<PathBuf> {
    let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = set(explicit) {
        return Some(p);
    }
    if let Some(x) = set(xdg).filter(|x| x.is_absolute()) {
        return Some(x.join("deposit").join(name));
    }
    set(home).map(|h| h.join(".config").join("deposit").join(name))
}

/// Lines of a key file that are not blank or comments, numbered from 1, trimmed.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// The keys of the peers a client has met, by address (as OpenSSH's `known_hosts`):
/// lines `<peer> <key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPeers {
    path: Option<PathBuf>,
    entries: Vec<(String, IdentityKey)>,
}

impl KnownPeers {
    /// The peers listed at `path` (none if there is no file there yet; [`KnownPeers::add`]
    /// will create it).
    pub fn load(path: &Path) -> Result<KnownPeers, IdentityError> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_error(path)(e)),
        };
        let mut entries = Vec::new();
        for (line, l) in content_lines(&text) {
            let bad = |why: String| IdentityError::BadLine {
                path: path.to_path_buf(),
                line,
                why,
            };
            let mut fields = l.split_whitespace();
            let (Some(peer), Some(key), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(format!("expected `<peer> <key>`, found {l:?}")));
            };
            if peer.contains('#') {
                return Err(bad(format!("{peer:?}: a peer name cannot contain '#'")));
            }
            let key = key.parse().map_err(|e: IdentityError| bad(e.to_string()))?;
            entries.push((peer.to_owned(), key));
        }
        Ok(KnownPeers {
            path: Some(path.to_path_buf()),
            entries,
        })
    }

    /// An empty list kept in memory only.
    pub fn empty() -> KnownPeers {
        KnownPeers {
            path: None,
            entries: Vec::new(),
        }
    }

    /// The key recorded for `peer` (the first, if the file lists it more than once).
    pub fn get(&self, peer: &str) -> Option<IdentityKey> {
        self.entries
            .iter()
            .find(|(p, _)| p == peer)
            .map(|(_, k)| *k)
    }

    /// Records `key` for `peer`: in memory, and at the end of the file if the list has
    /// one (created 0600, its directory 0700, if missing). It does not replace an earlier
    /// entry for `peer`, which [`KnownPeers::get`] still finds first; deciding what to do
    /// with a peer whose key changed is the caller's business. `peer` must be non-empty
    /// and hold neither whitespace nor '#'.
    pub fn add(&mut self, peer: &str, key: IdentityKey) -> Result<(), IdentityError> {
        let bad = |why| IdentityError::BadPeer {
            peer: peer.to_owned(),
            why,
        };
        if peer.is_empty() {
            return Err(bad("it is empty"));
        }
        if peer.chars().any(char::is_whitespace) {
            return Err(bad("it contains whitespace"));
        }
        if peer.contains('#') {
            return Err(bad("it contains '#'"));
        }
        if let Some(path) = &self.path {
            create_dir(parent_dir(path))?;
            let mut file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600)
                .open(path)
                .map_err(io_error(path))?;
            // A file edited by hand may lack its last newline.
            let len = file.metadata().map_err(io_error(path))?.len();
            let mut last = [b'\n'];
            if len > 0 {
                file.read_exact_at(&mut last, len - 1)
                    .map_err(io_error(path))?;
            }
            let sep = if last[0] == b'\n' { "" } else { "\n" };
            // One write: O_APPEND keeps it whole against another writer.
            file.write_all(format!("{sep}{peer} {key}\n").as_bytes())
                .map_err(io_error(path))?;
        }
        self.entries.push((peer.to_owned(), key));
        Ok(())
    }

    /// The file the list is kept in, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The known-peers file's default place: `$XDG_CONFIG_HOME/deposit/known_peers`, else
    /// `$HOME/.config/deposit/known_peers`.
    pub fn default_path() -> Option<PathBuf> {
        config_path(
            None,
            std::env::var_os("XDG_CONFIG_HOME"),
            std::env::var_os("HOME"),
            "known_peers",
        )
    }
}

/// The keys listed at `path`, as OpenSSH's `authorized_keys`: one key a line, optionally
/// followed by whitespace and a comment. A missing file is an error.
pub fn load_authorized_keys(path: &Path) -> Result<Vec<IdentityKey>, IdentityError> {
    let text = fs::read_to_string(path).map_err(io_error(path))?;
    content_lines(&text)
        .map(|(line, l)| {
            let key = l.split_whitespace().next().unwrap_or(l);
            key.parse()
                .map_err(|e: IdentityError| IdentityError::BadLine {
                    path: path.to_path_buf(),
                    line,
                    why: e.to_string(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "deposit-identity-test.{}.{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn hex(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn key_base64_round_trip_and_refusals() {
        let k = IdentityKey(core::array::from_fn(|i| i as u8 * 7));
        let s = k.to_string();
        assert_eq!(s.len(), 44);
        assert!(s.ends_with('='));
        assert_eq!(format!("{k:?}"), s);
        assert_eq!(s.parse::<IdentityKey>().unwrap(), k);
        // `wg pubkey`'s form of RFC 7748's Alice key.
        let alice = IdentityKey(hex(
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
        ));
        assert_eq!(
            alice.to_string(),
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="
        );

        let trailing_bits = format!("{}B=", &s[..42]); // last character with unused bits set
        for bad in [
            "",
            "not a key",
            &s[..43],                                       // padding missing
            &format!("{s}A"),                               // too long
            &format!(" {s}"),                               // whitespace around it
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  // 43 chars: 32 bytes unpadded
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", // 44 chars: 33 bytes
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==", // 31 bytes
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA*=", // not base64
            &trailing_bits,
        ] {
            match bad.parse::<IdentityKey>() {
                Err(IdentityError::BadKey { what }) => assert_eq!(what, bad),
                other => panic!("{bad:?} parsed: {other:?}"),
            }
        }
    }

    #[test]
    fn rfc7748_vector() {
        let alice = Identity::from_private(&hex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        ))
        .unwrap();
        assert_eq!(
            alice.public(),
            IdentityKey(hex(
                "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
            ))
        );
        let bob = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
        assert_eq!(
            alice.dh(&bob).unwrap(),
            hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        );
        // Debug shows the public key, never the private one.
        let debug = format!("{alice:?}");
        assert!(debug.contains(&alice.public().to_string()), "{debug}");
        assert!(!debug.contains("dwdtCnMYpX08"), "{debug}");
    }

    #[test]
    fn generated_identities_agree() {
        let a = Identity::generate().unwrap();
        let b = Identity::generate().unwrap();
        assert_ne!(a.public(), b.public());
        let ab = a.dh(&b.public().0).unwrap();
        assert_eq!(ab, b.dh(&a.public().0).unwrap());
        assert_ne!(ab, [0; 32]);
    }

    #[test]
    fn low_order_peer_is_refused() {
        let a = Identity::generate().unwrap();
        assert!(matches!(a.dh(&[0; 32]), Err(IdentityError::Crypto)));
        let mut one = [0; 32];
        one[0] = 1; // u = 1, another low-order point
        assert!(matches!(a.dh(&one), Err(IdentityError::Crypto)));
    }

    #[test]
    fn load_or_generate_creates_0600_then_loads() {
        let dir = TempDir::new();
        let path = dir.0.join("conf").join("deposit").join("identity");
        let (a, generated) = Identity::load_or_generate(&path).unwrap();
        assert!(generated);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), 45);
        assert!(text.ends_with('\n'));
        // No temporary file left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);

        let (b, generated) = Identity::load_or_generate(&path).unwrap();
        assert!(!generated);
        assert_eq!(a.public(), b.public());
        let peer = Identity::generate().unwrap();
        assert_eq!(
            a.dh(&peer.public().0).unwrap(),
            b.dh(&peer.public().0).unwrap()
        );
    }

    #[test]
    fn reads_a_wg_genkey_file() {
        let dir = TempDir::new();
        let path = dir.0.join("identity");
        // RFC 7748's Alice, as `wg genkey` would print it, with extra whitespace.
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        f.write_all(b"dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo= \n\n")
            .unwrap();
        let (id, generated) = Identity::load_or_generate(&path).unwrap();
        assert!(!generated);
        assert_eq!(
            id.public().to_string(),
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="
        );
    }

    #[test]
    fn open_key_file_is_refused() {
        let dir = TempDir::new();
        let path = dir.0.join("identity");
        Identity::load_or_generate(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        match Identity::load_or_generate(&path) {
            Err(e @ IdentityError::Permissions { .. }) => {
                let IdentityError::Permissions { path: p, mode } = &e else {
                    unreachable!()
                };
                assert_eq!((p, *mode), (&path, 0o644));
                let msg = e.to_string();
                assert!(msg.contains("644") && msg.contains("chmod 600"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o620)).unwrap();
        assert!(matches!(
            Identity::load_or_generate(&path),
            Err(IdentityError::Permissions { mode: 0o620, .. })
        ));
    }

    #[test]
    fn malformed_key_file_does_not_echo_it() {
        let dir = TempDir::new();
        let path = dir.0.join("identity");
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        f.write_all(b"dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LC\n")
            .unwrap();
        let e = Identity::load_or_generate(&path).unwrap_err();
        assert!(
            matches!(&e, IdentityError::BadLine { line: 1, .. }),
            "{e:?}"
        );
        assert!(!e.to_string().contains("dwdtCnMY"), "{e}");
        assert!(!format!("{e:?}").contains("dwdtCnMY"), "{e:?}");
    }

    #[test]
    fn known_peers_add_get_reload() {
        let dir = TempDir::new();
        let path = dir.0.join("sub").join("known_peers");
        let a = Identity::generate().unwrap().public();
        let b = Identity::generate().unwrap().public();

        let mut kp = KnownPeers::load(&path).unwrap();
        assert_eq!(kp.path(), Some(path.as_path()));
        assert_eq!(kp.get("10.0.0.2"), None);
        kp.add("10.0.0.2", a).unwrap();
        kp.add("fe80::1", b).unwrap();
        kp.add("10.0.0.2", b).unwrap(); // a later entry does not shadow the first
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(kp.get("10.0.0.2"), Some(a));
        assert_eq!(kp.get("fe80::1"), Some(b));
        assert_eq!(kp.get("10.0.0.2:18515"), None);

        for bad in ["", "10.0.0.2 x", "a\tb", "host#1"] {
            assert!(
                matches!(kp.add(bad, a), Err(IdentityError::BadPeer { .. })),
                "{bad:?}"
            );
        }

        let again = KnownPeers::load(&path).unwrap();
        assert_eq!(again, kp);

        // Hand edits: comments, blank lines, no final newline; `add` still appends a line.
        fs::write(
            &path,
            format!("# known peers\n\n   \n10.0.0.3:18515   {a}   \n  # indented comment\nh {b}"),
        )
        .unwrap();
        let mut kp = KnownPeers::load(&path).unwrap();
        assert_eq!(kp.get("10.0.0.3:18515"), Some(a));
        assert_eq!(kp.get("h"), Some(b));
        kp.add("z", a).unwrap();
        let kp = KnownPeers::load(&path).unwrap();
        assert_eq!((kp.get("h"), kp.get("z")), (Some(b), Some(a)));

        let mut mem = KnownPeers::empty();
        assert_eq!(mem.path(), None);
        mem.add("x", a).unwrap();
        assert_eq!(mem.get("x"), Some(a));
    }

    #[test]
    fn known_peers_malformed_line_names_its_number() {
        let dir = TempDir::new();
        let path = dir.0.join("known_peers");
        let k = Identity::generate().unwrap().public();
        for (text, line) in [
            (format!("# c\n10.0.0.2 {k}\n\n10.0.0.3\n"), 4),
            (format!("10.0.0.2 {k} extra\n"), 1),
            (format!("\n10.0.0.2 {}\n", &k.to_string()[..40]), 2),
            (format!("a {k}\nb#c {k}\n"), 2),
        ] {
            fs::write(&path, &text).unwrap();
            match KnownPeers::load(&path) {
                Err(e @ IdentityError::BadLine { .. }) => {
                    let IdentityError::BadLine {
                        path: p, line: l, ..
                    } = &e
                    else {
                        unreachable!()
                    };
                    assert_eq!((p, *l), (&path, line), "{text:?}");
                    assert!(e.to_string().contains(&format!("line {line}")), "{e}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn authorized_keys() {
        let dir = TempDir::new();
        let path = dir.0.join("authorized_keys");
        assert!(matches!(
            load_authorized_keys(&path),
            Err(IdentityError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound
        ));

        let a = Identity::generate().unwrap().public();
        let b = Identity::generate().unwrap().public();
        fs::write(
            &path,
            format!("# clients\n\n{a}\n  {b}   storage-2 (rack 4)\n#{a}\n"),
        )
        .unwrap();
        assert_eq!(load_authorized_keys(&path).unwrap(), vec![a, b]);
        fs::write(&path, "").unwrap();
        assert_eq!(load_authorized_keys(&path).unwrap(), vec![]);

        fs::write(&path, format!("{a} ok\n\nnot-a-key comment\n")).unwrap();
        match load_authorized_keys(&path) {
            Err(IdentityError::BadLine {
                path: p,
                line: 3,
                why,
            }) => {
                assert_eq!(p, path);
                assert!(why.contains("not-a-key"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn default_paths() {
        let s = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(
            config_path(s("/k"), s("/x"), s("/h"), "identity"),
            Some(PathBuf::from("/k"))
        );
        assert_eq!(
            config_path(None, s("/x"), s("/h"), "identity"),
            Some(PathBuf::from("/x/deposit/identity"))
        );
        assert_eq!(
            config_path(s(""), s(""), s("/h"), "known_peers"),
            Some(PathBuf::from("/h/.config/deposit/known_peers"))
        );
        assert_eq!(
            config_path(None, s("rel"), s("/h"), "identity"),
            Some(PathBuf::from("/h/.config/deposit/identity"))
        );
        assert_eq!(config_path(None, None, None, "identity"), None);
    }
}
