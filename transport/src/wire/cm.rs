//! Connection-management messages: one control part and its payload, in a frame
//! flagged `CM` with destination connection 0 and key 0 (docs/design.md §7).
//!
//! ```text
//! CONNECT_REQ     operand = request id, index = service
//!                  0..4 client conn | 4..12 client key | 12..16 client ISN
//!                 16..20 max frame  | 20..26 client MAC | 26..34 cookie
//!                 34 flags (1: secure) | 35..67 client X25519 public key (secure)
//!                 67.. private data
//! CHALLENGE       operand = request id
//!                  0..4 client conn | 4..12 cookie
//! CONNECT_REP     operand = request id
//!                  0..4 server conn | 4..12 server key | 12..16 server ISN
//!                 16..20 max frame  | 20..24 client conn | 24 flags (1: secure)
//!                 25..57 server X25519 public key | 57..73 key confirmation
//!                 73.. private data
//! REJECT          operand = request id, index = reason
//!                  0..4 client conn
//! DISCONNECT_REQ   0..4 target conn | 4..12 target key | 12..16 sender conn | 16..20 ack
//! DISCONNECT_REP   0..4 sender conn
//! ```
//! All fields big endian. The payload is covered by the frame's CRC32C, the Ethernet
//! header is not (a NIC checks and strips its FCS): so the requester's MAC, which the
//! server learns, travels in the payload (version 6), not only in the Ethernet header.
//!
//! The cookie (version 10): a listener answers a request without a valid one with a
//! CHALLENGE carrying it, and keeps nothing; only a request that echoes it makes a
//! connection (`crate::cm`). 0: none.
//!
//! Secure connections (version 11, `crate::secure`): a request flagged secure carries
//! the client's ephemeral public key, the reply the server's and its key confirmation;
//! a plain request or reply carries zeros there.
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
        pub const PUBLIC: Field = 35..67;
        pub const LEN: usize = 67;
    }
    pub mod rep {
        use super::Field;
        pub const CONN: Field = 0..4;
        pub const KEY: Field = 4..12;
        pub const ISN: Field = 12..16;
        pub const MAX_FRAME: Field = 16..20;
        pub const CLIENT_CONN: Field = 20..24;
        pub const FLAGS: usize = 24;
        pub const PUBLIC: Field = 25..57;
        pub const CONFIRM: Field = 57..73;
        pub const LEN: usize = 73;
    }
    pub mod challenge {
        use super::Field;
        pub const CLIENT_CONN: Field = 0..4;
        pub const COOKIE: Field = 4..12;
        pub const LEN: usize = 12;
    }
    pub mod reject {
        use super::Field;
        pub const CLIENT_CONN: Field = 0..4;
        pub const LEN: usize = 4;
    }
    pub mod dreq {
        use super::Field;
        pub const TARGET: Field = 0..4;
        pub const KEY: Field = 4..12;
        pub const SENDER: Field = 12..16;
        pub const ACK: Field = 16..20;
        pub const LEN: usize = 20;
    }
    pub mod drep {
        use super::Field;
        pub const SENDER: Field = 0..4;
        pub const LEN: usize = 4;
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

/// Bit of a request's or reply's flags byte: a secure connection (a public key follows).
const SECURE: u8 = 0x01;

/// An X25519 public key (`crate::secure`).
pub type PublicKey = [u8; 32];

/// A listener's key confirmation (`crate::secure`).
pub type Confirm = [u8; 16];

/// Why a connection request was refused.
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
        "the peer's key confirmation does not match: a different pre-shared key, or the \
         reply was modified on the way"
    )]
    Confirmation = 4,
}

impl RejectReason {
    pub fn from_u8(v: u8) -> RejectReason {
        match v {
            1 => RejectReason::NoListener,
            2 => RejectReason::Resources,
            3 => RejectReason::Insecure,
            4 => RejectReason::Confirmation,
            _ => RejectReason::Timeout,
        }
    }
}

/// Why a CM message was not understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmWireError {
    #[error("opcode {0:#04x} is not a connection-management message")]
    NotCm(u8),
    /// A connect request's or reply's flags byte with unknown bits, or a plain one
    /// whose key (and confirmation) bytes are not zero.
    #[error("connect flags {0:#04x}: unknown bits, or key bytes without the secure flag")]
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
        /// The client's public key: it asks for a secure connection.
        public: Option<PublicKey>,
    },
    Challenge {
        request: u32,
        client_conn: u32,
        cookie: u64,
    },
    ConnectRep {
        request: u32,
        conn: u32,
        key: u64,
        isn: u32,
        max_frame: u32,
        client_conn: u32,
        /// The server's public key and key confirmation: the connection is secure.
        secure: Option<(PublicKey, Confirm)>,
    },
    Reject {
        request: u32,
        reason: RejectReason,
        client_conn: u32,
    },
    DisconnectReq {
        target: u32,
        key: u64,
        sender: u32,
        /// Everything the target sent before this sequence number ran at the sender.
        ack: u32,
    },
    DisconnectRep {
        sender: u32,
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
        // A plain request or reply carries zeros where a secure one has its key.
        let flags_ok = |at: usize, key: Field| {
            let f = p[at];
            (f & !SECURE == 0 && (f & SECURE != 0 || p[key].iter().all(|&b| b == 0)))
                .then_some(())
                .ok_or(CmWireError::BadFlags(f))
        };
        Ok(match c.opcode {
            op::CM_CONNECT_REQ => {
                check_len(p, req::LEN)?;
                flags_ok(req::FLAGS, req::PUBLIC)?;
                CmMessage::ConnectReq {
                    request: c.operand,
                    service: c.index,
                    conn: get_u32(p, req::CONN),
                    key: get_u64(p, req::KEY),
                    isn: get_u32(p, req::ISN),
                    max_frame: get_u32(p, req::MAX_FRAME),
                    mac: p[req::MAC].try_into().expect("6 bytes"),
                    cookie: get_u64(p, req::COOKIE),
                    public: (p[req::FLAGS] & SECURE != 0).then(|| super::array(p, req::PUBLIC)),
                }
            }
            op::CM_CHALLENGE => {
                check_len(p, challenge::LEN)?;
                CmMessage::Challenge {
                    request: c.operand,
                    client_conn: get_u32(p, challenge::CLIENT_CONN),
                    cookie: get_u64(p, challenge::COOKIE),
                }
            }
            op::CM_CONNECT_REP => {
                check_len(p, rep::LEN)?;
                flags_ok(rep::FLAGS, rep::PUBLIC.start..rep::CONFIRM.end)?;
                CmMessage::ConnectRep {
                    request: c.operand,
                    conn: get_u32(p, rep::CONN),
                    key: get_u64(p, rep::KEY),
                    isn: get_u32(p, rep::ISN),
                    max_frame: get_u32(p, rep::MAX_FRAME),
                    client_conn: get_u32(p, rep::CLIENT_CONN),
                    secure: (p[rep::FLAGS] & SECURE != 0)
                        .then(|| (super::array(p, rep::PUBLIC), super::array(p, rep::CONFIRM))),
                }
            }
            op::CM_REJECT => {
                check_len(p, reject::LEN)?;
                CmMessage::Reject {
                    request: c.operand,
                    reason: RejectReason::from_u8(c.index as u8),
                    client_conn: get_u32(p, reject::CLIENT_CONN),
                }
            }
            op::CM_DISCONNECT_REQ => {
                check_len(p, dreq::LEN)?;
                CmMessage::DisconnectReq {
                    target: get_u32(p, dreq::TARGET),
                    key: get_u64(p, dreq::KEY),
                    sender: get_u32(p, dreq::SENDER),
                    ack: get_u32(p, dreq::ACK),
                }
            }
            op::CM_DISCONNECT_REP => {
                check_len(p, drep::LEN)?;
                CmMessage::DisconnectRep {
                    sender: get_u32(p, drep::SENDER),
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

    /// The same message with its cookie cleared (what a cookie is computed over).
    pub fn without_cookie(mut self) -> CmMessage {
        if let CmMessage::ConnectReq { cookie, .. } = &mut self {
            *cookie = 0;
        }
        self
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
                public,
                ..
            } => {
                set_u32(p, req::CONN, conn);
                set_u64(p, req::KEY, key);
                set_u32(p, req::ISN, isn);
                set_u32(p, req::MAX_FRAME, max_frame);
                p[req::MAC].copy_from_slice(&mac);
                set_u64(p, req::COOKIE, cookie);
                p[req::FLAGS] = if public.is_some() { SECURE } else { 0 };
                p[req::PUBLIC].copy_from_slice(&public.unwrap_or_default());
                req::LEN
            }
            CmMessage::Challenge {
                client_conn,
                cookie,
                ..
            } => {
                set_u32(p, challenge::CLIENT_CONN, client_conn);
                set_u64(p, challenge::COOKIE, cookie);
                challenge::LEN
            }
            CmMessage::ConnectRep {
                conn,
                key,
                isn,
                max_frame,
                client_conn,
                secure,
                ..
            } => {
                set_u32(p, rep::CONN, conn);
                set_u64(p, rep::KEY, key);
                set_u32(p, rep::ISN, isn);
                set_u32(p, rep::MAX_FRAME, max_frame);
                set_u32(p, rep::CLIENT_CONN, client_conn);
                let (public, confirm) = secure.unwrap_or_default();
                p[rep::FLAGS] = if secure.is_some() { SECURE } else { 0 };
                p[rep::PUBLIC].copy_from_slice(&public);
                p[rep::CONFIRM].copy_from_slice(&confirm);
                rep::LEN
            }
            CmMessage::Reject { client_conn, .. } => {
                set_u32(p, reject::CLIENT_CONN, client_conn);
                reject::LEN
            }
            CmMessage::DisconnectReq {
                target,
                key,
                sender,
                ack,
            } => {
                set_u32(p, dreq::TARGET, target);
                set_u64(p, dreq::KEY, key);
                set_u32(p, dreq::SENDER, sender);
                set_u32(p, dreq::ACK, ack);
                dreq::LEN
            }
            CmMessage::DisconnectRep { sender } => {
                set_u32(p, drep::SENDER, sender);
                drep::LEN
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const REQ: [u8; 67] = [
        0xde, 0xad, 0xbe, 0xef,                         // client conn
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, // client key
        0x00, 0x00, 0x00, 0x2a,                         // ISN 42
        0x00, 0x00, 0x23, 0x36,                         // max frame 9014
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x02,             // MAC
        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, // cookie
        0x01,                                           // flags: secure
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, // public key
        17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
    ];

    fn public() -> PublicKey {
        core::array::from_fn(|i| i as u8 + 1)
    }

    fn req() -> CmMessage {
        req_with(Some(public()))
    }

    fn req_with(public: Option<PublicKey>) -> CmMessage {
        CmMessage::ConnectReq {
            request: 7,
            service: 18515,
            conn: 0xdead_beef,
            key: 0x0123_4567_89ab_cdef,
            isn: 42,
            max_frame: 9014,
            mac: [2, 0, 10, 0, 0, 2],
            cookie: 0x1032_5476_98ba_dcfe,
            public,
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
            secure: Some((public(), [0xc0; 16])),
        }
    }

    #[test]
    fn hand_built_connect_request_parses_and_emits_the_same_bytes() {
        let c = ControlRepr {
            opcode: op::CM_CONNECT_REQ,
            operand: 7,
            index: 18515,
            length: 67,
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
            req_with(None),
            CmMessage::Challenge {
                request: 3,
                client_conn: 8,
                cookie: u64::MAX - 5,
            },
            CmMessage::Reject {
                request: 9,
                reason: RejectReason::NoListener,
                client_conn: 5,
            },
            CmMessage::DisconnectReq {
                target: 1,
                key: 2,
                sender: 3,
                ack: 4,
            },
            CmMessage::DisconnectRep { sender: 3 },
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
    fn a_key_without_the_secure_flag_or_unknown_flags_are_refused() {
        let c = |opcode, length| ControlRepr {
            opcode,
            length,
            ..Default::default()
        };
        let mut p = REQ;
        assert!(CmMessage::parse(&c(op::CM_CONNECT_REQ, 67), &p).is_ok());
        p[34] = 0; // a plain request carrying a key
        let e = CmMessage::parse(&c(op::CM_CONNECT_REQ, 67), &p);
        assert_eq!(e, Err(CmWireError::BadFlags(0)));
        p[35..67].fill(0);
        assert!(CmMessage::parse(&c(op::CM_CONNECT_REQ, 67), &p).is_ok());
        p[34] = 0x81;
        let e = CmMessage::parse(&c(op::CM_CONNECT_REQ, 67), &p);
        assert_eq!(e, Err(CmWireError::BadFlags(0x81)));
        let mut r = [0u8; CM_PAYLOAD_MAX];
        let (rc, n) = rep().emit(&[], &mut r);
        r[24] = 0; // a plain reply with a confirmation
        assert_eq!(
            CmMessage::parse(&rc, &r[..n]),
            Err(CmWireError::BadFlags(0))
        );
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
        let d = CmMessage::DisconnectRep { sender: 3 };
        let (_, len) = d.emit(&data[..8], &mut p);
        assert_eq!(len, 4);
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
