//! Connection-management messages: one control part and its payload, in a frame
//! flagged `CM` with destination connection 0 and key 0 (docs/design.md §7).
//!
//! ```text
//! CONNECT_REQ     operand = request id, index = service
//!                  0..4 client conn | 4..12 client key | 12..16 client ISN
//!                 16..20 max frame  | 20..26 client MAC | 26..34 cookie
//!                 34 flags (1: sealed frames, 2: handshake) | 35..67 client ephemeral key
//!                 67..131 handshake: client identity key encrypted (48) | tag (16)
//!                 131.. private data
//! CHALLENGE       operand = request id
//!                  0..4 client conn | 4..12 cookie | 12..44 listener's identity key
//! CONNECT_REP     operand = request id
//!                  0..4 server conn | 4..12 server key | 12..16 server ISN
//!                 16..20 max frame  | 20..24 client conn | 24 flags (1: sealed frames)
//!                 25..57 server ephemeral key | 57..73 tag
//!                 73.. private data
//! REJECT          operand = request id, index = reason
//!                  0..4 client conn | 4..20 tag
//! DISCONNECT_REQ   0..4 target conn | 4..8 sender conn | 8..12 ack | 12..28 MAC
//! DISCONNECT_REP   0..4 sender conn | 4..20 MAC
//! ```
//! All fields big endian. The payload is covered by the frame's CRC32C, the Ethernet
//! header is not (a NIC checks and strips its FCS): so the requester's MAC, which the
//! server learns, travels in the payload (version 6), not only in the Ethernet header.
//!
//! The cookie (version 10): a listener answers a request without a valid one with a
//! CHALLENGE carrying it, and keeps nothing; only a request that echoes it makes a
//! connection (`crate::cm`). 0: none.
//!
//! The handshake (version 13, `crate::handshake`): every request carries the client's
//! ephemeral X25519 key; the challenge carries the listener's identity key; the request
//! that echoes the cookie carries Noise IK's first message (flag 2; zeros without it),
//! the reply IK's second (the server's ephemeral key and a tag over the reply's fields).
//! A REJECT carries a tag only the listener that read the request can compute, and a
//! disconnect request and its answer a MAC under the connection's CM key of the sender's
//! direction. What each covers is [`CmMessage::signed`]: the message with its cookie,
//! handshake, reply ephemeral key, tag and MAC fields cleared, its opcode, operand and
//! index before it.
//! Flag 1 asks for (request) or grants (reply) sealed frames (`crate::secure`); the
//! handshake runs either way.
//!
//! Private data (version 9, rdma_cm's `private_data`): the application's bytes after a
//! request's or a reply's fields, up to [`PRIVATE_DATA_MAX`], their length what the
//! control part's length leaves. A longer one is refused as a bad length.

use super::{
    check_len, get_u32, get_u64, hflags, op, set_u32, set_u64, ControlRepr, Field, FrameWriter,
    TransportRepr, UnderlayRepr, WireError,
};

mod field {
    use super::super::Field;

    pub mod req {
        use super::Field;
        pub const CONN: Field = 0..4;
        pub const KEY: Field = 4..12;
        pub const ISN: Field = 12..16;
        pub const MAX_FRAME: Field = 16..20;
        pub const MAC: Field = 20..26;
        pub const COOKIE: Field = 26..34;
        pub const FLAGS: usize = 34;
        pub const EPHEMERAL: Field = 35..67;
        pub const HANDSHAKE: Field = 67..131;
        pub const LEN: usize = 131;
    }
    pub mod rep {
        use super::Field;
        pub const CONN: Field = 0..4;
        pub const KEY: Field = 4..12;
        pub const ISN: Field = 12..16;
        pub const MAX_FRAME: Field = 16..20;
        pub const CLIENT_CONN: Field = 20..24;
        pub const FLAGS: usize = 24;
        pub const EPHEMERAL: Field = 25..57;
        pub const TAG: Field = 57..73;
        pub const LEN: usize = 73;
    }
    pub mod challenge {
        use super::Field;
        pub const CLIENT_CONN: Field = 0..4;
        pub const COOKIE: Field = 4..12;
        pub const LISTENER: Field = 12..44;
        pub const LEN: usize = 44;
    }
    pub mod reject {
        use super::Field;
        pub const CLIENT_CONN: Field = 0..4;
        pub const TAG: Field = 4..20;
        pub const LEN: usize = 20;
    }
    pub mod dreq {
        use super::Field;
        pub const TARGET: Field = 0..4;
        pub const SENDER: Field = 4..8;
        pub const ACK: Field = 8..12;
        pub const MAC: Field = 12..28;
        pub const LEN: usize = 28;
    }
    pub mod drep {
        use super::Field;
        pub const SENDER: Field = 0..4;
        pub const MAC: Field = 4..20;
        pub const LEN: usize = 20;
    }
}

/// Most bytes of private data a connect request or reply carries (rdma_cm allows 56 in
/// a request and 196 in a reply over InfiniBand; one frame holds these and more).
pub const PRIVATE_DATA_MAX: usize = 192;

/// Largest CM payload.
pub const CM_PAYLOAD_MAX: usize = if field::req::LEN > field::rep::LEN {
    field::req::LEN
} else {
    field::rep::LEN
} + PRIVATE_DATA_MAX;

/// Largest [`CmMessage::signed`]: the opcode, operand and index, then the payload.
pub const SIGNED_MAX: usize = 9 + CM_PAYLOAD_MAX;

/// What [`CmMessage::signed`] gives: the bytes a cookie, tag or MAC covers.
pub struct Signed {
    bytes: [u8; SIGNED_MAX],
    len: usize,
}

impl std::ops::Deref for Signed {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Bit of a request's or reply's flags byte: sealed frames.
const SECURE: u8 = 0x01;
/// Bit of a request's flags byte: the handshake follows the ephemeral key.
const HANDSHAKE: u8 = 0x02;

/// An X25519 public key (an ephemeral key, or a node's identity key).
pub type PublicKey = [u8; 32];

/// A tag or a MAC (`crate::handshake`).
pub type Tag = [u8; 16];

/// Bytes of a request's handshake (`crate::handshake::REQUEST_LEN`).
pub const HANDSHAKE_LEN: usize = 64;

/// A request's handshake: the client's identity key encrypted, and a tag.
pub type HandshakeBlock = [u8; HANDSHAKE_LEN];

/// Why a connection request was refused, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[repr(u8)]
pub enum RejectReason {
    #[error(
        "no answer from the peer before the connection-management timeout (is the peer up, \
         listening, and its device driven? A device with Progress::Inline moves only while \
         a thread calls into it: poll it, or open it with Progress::Dedicated)"
    )]
    Timeout = 0,
    #[error("no listener for that service at the peer")]
    NoListener = 1,
    #[error("the peer is out of connection resources")]
    Resources = 2,
    #[error("the listener accepts secure connections only (ask with ConnOptions::secure)")]
    Insecure = 3,
    #[error(
        "the handshake does not verify: the listener's pre-shared key differs from ours, or \
         the only replies came from a node without the listener's identity key"
    )]
    Confirmation = 4,
    #[error(
        "the listener does not authorise this node's identity key (add it to the listener's \
         authorised keys)"
    )]
    Unauthorized = 5,
    #[error(
        "the listener's identity key is not the one pinned for it (a node that is not the \
         peer answered, or the peer's key changed: check the known-peers file or the pinned \
         key)"
    )]
    PeerKey = 6,
    /// Local only (never on the wire): nobody answered the ARP requests for the next
    /// hop (the peer, or its router) — the API's `Error::Unresolved` names it.
    #[error(
        "no ARP reply from the next hop (the peer or its gateway): is it up, on this \
         subnet, or behind a gateway?"
    )]
    Unresolved = 7,
    /// Local only (never on the wire): the peer is off the link and no route or
    /// gateway leads to it.
    #[error("no route to the peer: it is outside this node's prefix and there is no gateway")]
    NoRoute = 8,
}

impl RejectReason {
    /// The reason a REJECT carries: the local-only codes read as `Timeout`.
    pub fn from_wire(v: u8) -> RejectReason {
        match RejectReason::from_u8(v) {
            RejectReason::Unresolved | RejectReason::NoRoute => RejectReason::Timeout,
            r => r,
        }
    }

    pub fn from_u8(v: u8) -> RejectReason {
        match v {
            1 => RejectReason::NoListener,
            2 => RejectReason::Resources,
            3 => RejectReason::Insecure,
            4 => RejectReason::Confirmation,
            5 => RejectReason::Unauthorized,
            6 => RejectReason::PeerKey,
            7 => RejectReason::Unresolved,
            8 => RejectReason::NoRoute,
            _ => RejectReason::Timeout,
        }
    }
}

/// Why a CM message was not understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmWireError {
    #[error("opcode {0:#04x} is not a connection-management message")]
    NotCm(u8),
    /// A connect request's or reply's flags byte with unknown bits, or a request
    /// without the handshake flag whose handshake bytes are not zero.
    #[error("connect flags {0:#04x}: unknown bits, or handshake bytes without its flag")]
    BadFlags(u8),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// A connection-management message, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    ConnectReq {
        request: u32,
        service: u32,
        conn: u32,
        key: u64,
        isn: u32,
        max_frame: u32,
        /// The requester's MAC address (what the server learns it by).
        mac: [u8; 6],
        /// The listener's cookie echoed (0: none yet).
        cookie: u64,
        /// Sealed frames asked for.
        secure: bool,
        /// The client's ephemeral key.
        ephemeral: PublicKey,
        /// Noise IK's first message (with the cookie).
        handshake: Option<HandshakeBlock>,
    },
    Challenge {
        request: u32,
        client_conn: u32,
        cookie: u64,
        /// The listener's identity key.
        listener: PublicKey,
    },
    ConnectRep {
        request: u32,
        conn: u32,
        key: u64,
        isn: u32,
        max_frame: u32,
        client_conn: u32,
        /// Sealed frames.
        secure: bool,
        /// The server's ephemeral key and Noise IK's tag.
        ephemeral: PublicKey,
        tag: Tag,
    },
    Reject {
        request: u32,
        reason: RejectReason,
        client_conn: u32,
        tag: Tag,
    },
    DisconnectReq {
        target: u32,
        sender: u32,
        /// Everything the target sent before this sequence number ran at the sender.
        ack: u32,
        mac: Tag,
    },
    DisconnectRep {
        sender: u32,
        mac: Tag,
    },
}

impl CmMessage {
    /// Decodes one CM message from its control part and payload (exactly
    /// `control.length` bytes, as the frame parser hands them out); its private data is
    /// [`CmMessage::private_data`].
    pub fn parse(c: &ControlRepr, p: &[u8]) -> Result<CmMessage, CmWireError> {
        use field::*;
        let fixed = match c.opcode {
            op::CM_CONNECT_REQ => req::LEN,
            op::CM_CONNECT_REP => rep::LEN,
            _ => p.len(),
        };
        if p.len() > fixed + PRIVATE_DATA_MAX {
            return Err(CmWireError::Wire(WireError::BadLength {
                length: c.length,
                payload: fixed + PRIVATE_DATA_MAX,
            }));
        }
        let tag = |f: Field| -> Tag { super::array(p, f) };
        Ok(match c.opcode {
            op::CM_CONNECT_REQ => {
                check_len(p, req::LEN)?;
                let f = p[req::FLAGS];
                let with = f & HANDSHAKE != 0;
                if f & !(SECURE | HANDSHAKE) != 0
                    || (!with && p[req::HANDSHAKE].iter().any(|&b| b != 0))
                {
                    return Err(CmWireError::BadFlags(f));
                }
                CmMessage::ConnectReq {
                    request: c.operand,
                    service: c.index,
                    conn: get_u32(p, req::CONN),
                    key: get_u64(p, req::KEY),
                    isn: get_u32(p, req::ISN),
                    max_frame: get_u32(p, req::MAX_FRAME),
                    mac: p[req::MAC].try_into().expect("6 bytes"),
                    cookie: get_u64(p, req::COOKIE),
                    secure: f & SECURE != 0,
                    ephemeral: super::array(p, req::EPHEMERAL),
                    handshake: with.then(|| super::array(p, req::HANDSHAKE)),
                }
            }
            op::CM_CHALLENGE => {
                check_len(p, challenge::LEN)?;
                CmMessage::Challenge {
                    request: c.operand,
                    client_conn: get_u32(p, challenge::CLIENT_CONN),
                    cookie: get_u64(p, challenge::COOKIE),
                    listener: super::array(p, challenge::LISTENER),
                }
            }
            op::CM_CONNECT_REP => {
                check_len(p, rep::LEN)?;
                let f = p[rep::FLAGS];
                if f & !SECURE != 0 {
                    return Err(CmWireError::BadFlags(f));
                }
                CmMessage::ConnectRep {
                    request: c.operand,
                    conn: get_u32(p, rep::CONN),
                    key: get_u64(p, rep::KEY),
                    isn: get_u32(p, rep::ISN),
                    max_frame: get_u32(p, rep::MAX_FRAME),
                    client_conn: get_u32(p, rep::CLIENT_CONN),
                    secure: f & SECURE != 0,
                    ephemeral: super::array(p, rep::EPHEMERAL),
                    tag: tag(rep::TAG),
                }
            }
            op::CM_REJECT => {
                check_len(p, reject::LEN)?;
                CmMessage::Reject {
                    request: c.operand,
                    reason: RejectReason::from_wire(c.index as u8),
                    client_conn: get_u32(p, reject::CLIENT_CONN),
                    tag: tag(reject::TAG),
                }
            }
            op::CM_DISCONNECT_REQ => {
                check_len(p, dreq::LEN)?;
                CmMessage::DisconnectReq {
                    target: get_u32(p, dreq::TARGET),
                    sender: get_u32(p, dreq::SENDER),
                    ack: get_u32(p, dreq::ACK),
                    mac: tag(dreq::MAC),
                }
            }
            op::CM_DISCONNECT_REP => {
                check_len(p, drep::LEN)?;
                CmMessage::DisconnectRep {
                    sender: get_u32(p, drep::SENDER),
                    mac: tag(drep::MAC),
                }
            }
            other => return Err(CmWireError::NotCm(other)),
        })
    }

    /// The private data of a request or reply that [`CmMessage::parse`] took from
    /// payload `p` (empty for the other messages).
    pub fn private_data<'a>(&self, p: &'a [u8]) -> &'a [u8] {
        let fixed = match self {
            CmMessage::ConnectReq { .. } => field::req::LEN,
            CmMessage::ConnectRep { .. } => field::rep::LEN,
            _ => return &[],
        };
        p.get(fixed..).unwrap_or(&[])
    }

    /// The same message with what authenticates it cleared: a request's cookie and
    /// handshake, a reply's ephemeral key and tag, a REJECT's tag, a disconnect
    /// message's MAC.
    pub fn unauthenticated(mut self) -> CmMessage {
        match &mut self {
            CmMessage::ConnectReq {
                cookie, handshake, ..
            } => {
                *cookie = 0;
                *handshake = None;
            }
            CmMessage::ConnectRep { ephemeral, tag, .. } => {
                // The handshake binds the ephemeral key itself.
                *ephemeral = [0; 32];
                *tag = [0; 16];
            }
            CmMessage::Reject { tag, .. } => *tag = [0; 16],
            CmMessage::DisconnectReq { mac, .. } | CmMessage::DisconnectRep { mac, .. } => {
                *mac = [0; 16]
            }
            CmMessage::Challenge { .. } => {}
        }
        self
    }

    /// The same message with `tag` where [`CmMessage::unauthenticated`] clears a tag or
    /// a MAC: a reply's or a REJECT's tag, a disconnect message's MAC (a request and a
    /// challenge have none: unchanged).
    pub fn authenticated(mut self, t: Tag) -> CmMessage {
        match &mut self {
            CmMessage::ConnectRep { tag, .. } | CmMessage::Reject { tag, .. } => *tag = t,
            CmMessage::DisconnectReq { mac, .. } | CmMessage::DisconnectRep { mac, .. } => *mac = t,
            CmMessage::ConnectReq { .. } | CmMessage::Challenge { .. } => {}
        }
        self
    }

    /// What a cookie, a tag or a MAC of this message covers: its opcode, operand and
    /// index, then its payload with `private` data, as [`CmMessage::unauthenticated`]
    /// emits them.
    pub fn signed(&self, private: &[u8]) -> Signed {
        let mut p = [0u8; CM_PAYLOAD_MAX];
        let (c, len) = self.unauthenticated().emit(private, &mut p);
        let mut out = Signed {
            bytes: [0; SIGNED_MAX],
            len: 9 + len,
        };
        out.bytes[0] = c.opcode;
        out.bytes[1..5].copy_from_slice(&c.operand.to_be_bytes());
        out.bytes[5..9].copy_from_slice(&c.index.to_be_bytes());
        out.bytes[9..9 + len].copy_from_slice(&p[..len]);
        out
    }

    /// Writes the whole frame of this message with `private` data into `buf` (at most
    /// the largest frame long): flagged `CM`, connection 0, key 0. Returns its length.
    pub fn write_frame(
        &self,
        private: &[u8],
        underlay: &UnderlayRepr,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let mut payload = [0u8; CM_PAYLOAD_MAX];
        let (c, len) = self.emit(private, &mut payload);
        let hdr = TransportRepr {
            flags: hflags::CM,
            ..Default::default()
        };
        let mut w = FrameWriter::new(buf, underlay, &hdr)?;
        w.push(&c, &payload[..len])?;
        Ok(w.finish())
    }

    /// Encodes into a control part and a payload buffer, with `private` data after a
    /// request's or reply's fields (ignored for the other messages; at most
    /// [`PRIVATE_DATA_MAX`] bytes, the rest cut); returns the payload length.
    pub fn emit(&self, private: &[u8], p: &mut [u8; CM_PAYLOAD_MAX]) -> (ControlRepr, usize) {
        let mut len = self.emit_payload(p);
        if matches!(
            self,
            CmMessage::ConnectReq { .. } | CmMessage::ConnectRep { .. }
        ) {
            let n = private.len().min(PRIVATE_DATA_MAX);
            p[len..len + n].copy_from_slice(&private[..n]);
            len += n;
        }
        let (opcode, operand, index) = match *self {
            CmMessage::ConnectReq {
                request, service, ..
            } => (op::CM_CONNECT_REQ, request, service),
            CmMessage::ConnectRep { request, .. } => (op::CM_CONNECT_REP, request, 0),
            CmMessage::Challenge { request, .. } => (op::CM_CHALLENGE, request, 0),
            CmMessage::Reject {
                request, reason, ..
            } => (op::CM_REJECT, request, reason as u32),
            CmMessage::DisconnectReq { .. } => (op::CM_DISCONNECT_REQ, 0, 0),
            CmMessage::DisconnectRep { .. } => (op::CM_DISCONNECT_REP, 0, 0),
        };
        let c = ControlRepr {
            opcode,
            operand,
            index,
            length: len as u32,
            ..Default::default()
        };
        (c, len)
    }

    /// Writes the payload; returns its length.
    fn emit_payload(&self, p: &mut [u8; CM_PAYLOAD_MAX]) -> usize {
        use field::*;
        match *self {
            CmMessage::ConnectReq {
                conn,
                key,
                isn,
                max_frame,
                mac,
                cookie,
                secure,
                ephemeral,
                handshake,
                ..
            } => {
                set_u32(p, req::CONN, conn);
                set_u64(p, req::KEY, key);
                set_u32(p, req::ISN, isn);
                set_u32(p, req::MAX_FRAME, max_frame);
                p[req::MAC].copy_from_slice(&mac);
                set_u64(p, req::COOKIE, cookie);
                p[req::FLAGS] = if secure { SECURE } else { 0 }
                    | if handshake.is_some() { HANDSHAKE } else { 0 };
                p[req::EPHEMERAL].copy_from_slice(&ephemeral);
                p[req::HANDSHAKE].copy_from_slice(&handshake.unwrap_or([0; HANDSHAKE_LEN]));
                req::LEN
            }
            CmMessage::Challenge {
                client_conn,
                cookie,
                listener,
                ..
            } => {
                set_u32(p, challenge::CLIENT_CONN, client_conn);
                set_u64(p, challenge::COOKIE, cookie);
                p[challenge::LISTENER].copy_from_slice(&listener);
                challenge::LEN
            }
            CmMessage::ConnectRep {
                conn,
                key,
                isn,
                max_frame,
                client_conn,
                secure,
                ephemeral,
                tag,
                ..
            } => {
                set_u32(p, rep::CONN, conn);
                set_u64(p, rep::KEY, key);
                set_u32(p, rep::ISN, isn);
                set_u32(p, rep::MAX_FRAME, max_frame);
                set_u32(p, rep::CLIENT_CONN, client_conn);
                p[rep::FLAGS] = if secure { SECURE } else { 0 };
                p[rep::EPHEMERAL].copy_from_slice(&ephemeral);
                p[rep::TAG].copy_from_slice(&tag);
                rep::LEN
            }
            CmMessage::Reject {
                client_conn, tag, ..
            } => {
                set_u32(p, reject::CLIENT_CONN, client_conn);
                p[reject::TAG].copy_from_slice(&tag);
                reject::LEN
            }
            CmMessage::DisconnectReq {
                target,
                sender,
                ack,
                mac,
            } => {
                set_u32(p, dreq::TARGET, target);
                set_u32(p, dreq::SENDER, sender);
                set_u32(p, dreq::ACK, ack);
                p[dreq::MAC].copy_from_slice(&mac);
                dreq::LEN
            }
            CmMessage::DisconnectRep { sender, mac } => {
                set_u32(p, drep::SENDER, sender);
                p[drep::MAC].copy_from_slice(&mac);
                drep::LEN
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const REQ: [u8; 131] = [
        0xde, 0xad, 0xbe, 0xef,                         // client conn
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, // client key
        0x00, 0x00, 0x00, 0x2a,                         // ISN 42
        0x00, 0x00, 0x23, 0x36,                         // max frame 9014
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x02,             // MAC
        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, // cookie
        0x03,                                           // flags: secure, handshake
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, // ephemeral key
        17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
        0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, // handshake (64 bytes)
        0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
        0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
        0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
        0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
        0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
        0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
        0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
    ];

    fn public() -> PublicKey {
        core::array::from_fn(|i| i as u8 + 1)
    }

    fn block() -> HandshakeBlock {
        core::array::from_fn(|i| 0xa0 + i as u8)
    }

    fn req() -> CmMessage {
        req_with(true, Some(block()))
    }

    fn req_with(secure: bool, handshake: Option<HandshakeBlock>) -> CmMessage {
        CmMessage::ConnectReq {
            request: 7,
            service: 18515,
            conn: 0xdead_beef,
            key: 0x0123_4567_89ab_cdef,
            isn: 42,
            max_frame: 9014,
            mac: [2, 0, 10, 0, 0, 2],
            cookie: 0x1032_5476_98ba_dcfe,
            secure,
            ephemeral: public(),
            handshake,
        }
    }

    fn rep() -> CmMessage {
        CmMessage::ConnectRep {
            request: 7,
            conn: 1,
            key: 2,
            isn: 3,
            max_frame: 1514,
            client_conn: 4,
            secure: true,
            ephemeral: public(),
            tag: [0xc0; 16],
        }
    }

    #[test]
    fn hand_built_connect_request_parses_and_emits_the_same_bytes() {
        let c = ControlRepr {
            opcode: op::CM_CONNECT_REQ,
            operand: 7,
            index: 18515,
            length: 131,
            ..Default::default()
        };
        assert_eq!(CmMessage::parse(&c, &REQ), Ok(req()));
        let mut p = [0xffu8; CM_PAYLOAD_MAX];
        let (c2, n) = req().emit(&[], &mut p);
        assert_eq!((c2, &p[..n]), (c, &REQ[..]));
    }

    #[test]
    fn every_message_round_trips_and_a_short_payload_is_truncated() {
        let msgs = [
            req(),
            rep(),
            req_with(false, None),
            CmMessage::Challenge {
                request: 3,
                client_conn: 8,
                cookie: u64::MAX - 5,
                listener: [9; 32],
            },
            CmMessage::Reject {
                request: 9,
                reason: RejectReason::NoListener,
                client_conn: 5,
                tag: [1; 16],
            },
            CmMessage::DisconnectReq {
                target: 1,
                sender: 3,
                ack: 4,
                mac: [2; 16],
            },
            CmMessage::DisconnectRep {
                sender: 3,
                mac: [3; 16],
            },
        ];
        for m in msgs {
            let mut p = [0u8; CM_PAYLOAD_MAX];
            let (c, len) = m.emit(&[], &mut p);
            assert_eq!(c.length as usize, len);
            assert_eq!(CmMessage::parse(&c, &p[..len]), Ok(m));
            assert!(m.private_data(&p[..len]).is_empty());
            assert_eq!(
                CmMessage::parse(&c, &p[..len - 1]),
                Err(CmWireError::Wire(WireError::Truncated {
                    needed: len,
                    got: len - 1
                })),
                "{m:?}"
            );
        }
    }

    #[test]
    fn handshake_bytes_without_the_flag_or_unknown_flags_are_refused() {
        let c = |opcode, length| ControlRepr {
            opcode,
            length,
            ..Default::default()
        };
        let mut p = REQ;
        assert!(CmMessage::parse(&c(op::CM_CONNECT_REQ, 131), &p).is_ok());
        p[34] = 0x01; // a handshake's bytes without its flag
        let e = CmMessage::parse(&c(op::CM_CONNECT_REQ, 131), &p);
        assert_eq!(e, Err(CmWireError::BadFlags(0x01)));
        p[67..131].fill(0);
        assert!(CmMessage::parse(&c(op::CM_CONNECT_REQ, 131), &p).is_ok());
        p[34] = 0x81;
        let e = CmMessage::parse(&c(op::CM_CONNECT_REQ, 131), &p);
        assert_eq!(e, Err(CmWireError::BadFlags(0x81)));
        let mut r = [0u8; CM_PAYLOAD_MAX];
        let (rc, n) = rep().emit(&[], &mut r);
        r[24] = 0x02; // no such flag in a reply
        assert_eq!(
            CmMessage::parse(&rc, &r[..n]),
            Err(CmWireError::BadFlags(0x02))
        );
    }

    #[test]
    fn what_is_signed_leaves_out_what_authenticates_and_keeps_everything_else() {
        let sign = |m: &CmMessage, private: &[u8]| m.signed(private).to_vec();
        // A request with and without its cookie and handshake signs the same bytes
        // (so its cookie can be checked and its prologue rebuilt).
        assert_eq!(sign(&req(), b"pd"), sign(&req_with(true, None), b"pd"));
        let mut other = req();
        if let CmMessage::ConnectReq { cookie, .. } = &mut other {
            *cookie = 1;
        }
        assert_eq!(sign(&req(), &[]), sign(&other, &[]));
        // Every other field, the private data, the opcode and the operand count.
        assert_ne!(sign(&req(), b"pd"), sign(&req(), b"pe"));
        assert_ne!(sign(&req(), &[]), sign(&req_with(false, None), &[]));
        let mut r2 = rep();
        if let CmMessage::ConnectRep { tag, .. } = &mut r2 {
            *tag = [0; 16];
        }
        assert_eq!(sign(&rep(), &[]), sign(&r2, &[]));
        if let CmMessage::ConnectRep { request, .. } = &mut r2 {
            *request = 8;
        }
        assert_ne!(sign(&rep(), &[]), sign(&r2, &[]));
        let s = sign(&rep(), &[]);
        assert_eq!((s[0], s.len()), (op::CM_CONNECT_REP, 9 + 73));
    }

    #[test]
    fn requests_and_replies_carry_private_data_up_to_the_limit() {
        let data: Vec<u8> = (0..=255).collect();
        for m in [req(), rep()] {
            for n in [1, 17, PRIVATE_DATA_MAX] {
                let mut p = [0u8; CM_PAYLOAD_MAX];
                let (c, len) = m.emit(&data[..n], &mut p);
                assert_eq!(CmMessage::parse(&c, &p[..len]), Ok(m));
                assert_eq!(m.private_data(&p[..len]), &data[..n]);
            }
            // More than the limit is cut when sent and refused when received.
            let mut p = [0u8; CM_PAYLOAD_MAX];
            let (mut c, len) = m.emit(&data, &mut p);
            assert_eq!(m.private_data(&p[..len]), &data[..PRIVATE_DATA_MAX]);
            let mut long = p[..len].to_vec();
            long.push(0);
            c.length += 1;
            assert!(matches!(
                CmMessage::parse(&c, &long),
                Err(CmWireError::Wire(WireError::BadLength { .. }))
            ));
        }
        // The other messages carry none.
        let mut p = [0u8; CM_PAYLOAD_MAX];
        let d = CmMessage::DisconnectRep {
            sender: 3,
            mac: [0; 16],
        };
        let (_, len) = d.emit(&data[..8], &mut p);
        assert_eq!(len, 20);
    }

    #[test]
    fn a_data_opcode_is_not_a_cm_message() {
        let c = ControlRepr {
            opcode: op::WRITE,
            ..Default::default()
        };
        assert_eq!(
            CmMessage::parse(&c, &[0; 32]),
            Err(CmWireError::NotCm(op::WRITE))
        );
    }
}
