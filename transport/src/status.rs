//! What a refused message is told and counted as: the [`RemoteStatus`] its sender
//! gets back in a [`Nak`], and the [`DropReason`] counter it moves at the receiver.
//!
//! A bottom module: it imports nothing of the crate, so that work requests and
//! completions (`crate::wr`), events, the operation logic and the node can all name
//! these without depending on one another.

/// Status codes that travel back to the sender in a NAK (a `u8` on the wire).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteStatus {
    /// Executed.
    Ok = 0,
    /// Bounds, rights or register protection violation, bad register name, refused
    /// forced interrupt.
    RemoteAccessError = 1,
    /// Unknown opcode, bad length, bad check byte, bad compound descriptor or flags.
    RemoteOperationError = 2,
    /// Malformed message (e.g. payload shorter than its length, misaligned atomic).
    RemoteInvalidRequest = 3,
    /// A fault the receiving host must repair (page not present).
    PageFault = 4,
}

impl RemoteStatus {
    /// The status for a wire code, `None` for codes this version does not know.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            0 => RemoteStatus::Ok,
            1 => RemoteStatus::RemoteAccessError,
            2 => RemoteStatus::RemoteOperationError,
            3 => RemoteStatus::RemoteInvalidRequest,
            4 => RemoteStatus::PageFault,
            _ => return None,
        })
    }
}

/// What a NAK cell tells the sender: the status its message was refused with and,
/// where the receiver knows it, why (the receiver's [`DropReason`], so that the
/// sender's completion can say `RegisterProtection` where verbs gives a vendor code).
/// On the wire: the cell's index field, status in its low byte, reason in the next
/// ([`Nak::NO_REASON`] when there is none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nak {
    pub status: RemoteStatus,
    pub reason: Option<DropReason>,
}

impl Nak {
    /// The reason byte of a NAK that gives none.
    pub const NO_REASON: u8 = 0xff;

    pub fn new(status: RemoteStatus, reason: DropReason) -> Nak {
        Nak {
            status,
            reason: Some(reason),
        }
    }

    /// The NAK cell's index field.
    pub fn code(self) -> u32 {
        u32::from(self.status as u8)
            | u32::from(self.reason.map_or(Nak::NO_REASON, |r| r as u8)) << 8
    }

    /// A NAK cell's index field decoded (an unknown status reads as
    /// `RemoteInvalidRequest`, an unknown reason as none).
    pub fn from_code(code: u32) -> Nak {
        Nak {
            status: RemoteStatus::from_u8(code as u8).unwrap_or(RemoteStatus::RemoteInvalidRequest),
            reason: DropReason::from_u8((code >> 8) as u8),
        }
    }
}

impl From<RemoteStatus> for Nak {
    fn from(status: RemoteStatus) -> Nak {
        Nak {
            status,
            reason: None,
        }
    }
}

/// Reasons a cell or frame is refused, for per-reason counters (also used by the
/// worker for frame-level drops). Use `reason as usize` to index a `[u64; COUNT]`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Frame CRC32C mismatch.
    BadCrc,
    /// Control-part check byte mismatch.
    BadCheck,
    /// Frame or cell shorter than its headers say.
    Truncated,
    /// Not addressed to this node / not our protocol.
    NotOurs,
    /// Unsupported transport version.
    BadVersion,
    /// No such connection.
    UnknownConnection,
    /// Connection key mismatch.
    WrongKey,
    /// Sequence number outside the receive window.
    OutOfSequence,
    /// Unknown opcode.
    UnknownOpcode,
    /// Outside the endpoint.
    OutOfBounds,
    /// Endpoint or page rights refuse the access.
    AccessDenied,
    /// Page not present.
    PageNotPresent,
    /// Length not valid for the opcode.
    BadLength,
    /// No receive buffer (mbuf) available.
    NoBuffer,
    /// Register name outside the window or the global registers.
    BadRegister,
    /// Register protection refuses the use.
    RegisterProtection,
    /// Misaligned atomic.
    Misaligned,
    /// Sender-forced interrupt refused.
    ForcedInterruptRefused,
    /// Bad compound descriptor.
    BadCompound,
    /// Control flags not valid for the opcode.
    BadFlags,
    /// A message held because the endpoint's event queue was full (fault).
    EventQueueFull,
    /// A reply that matches no outstanding read or atomic of ours.
    BadReply,
    /// A message naming the receiver's memory or registers (not an instruction pointer
    /// or a token write or read) on a connection in isolation mode.
    Isolated,
    /// An instruction pointer outside the instruction window or global table.
    InstructionWindow,
    /// An instruction pointer to an instruction that is not an entry point.
    NotEntryPoint,
    /// An instruction slot not loaded (fault).
    InstructionNotLoaded,
    /// An instruction chain beyond the sequencer's bounds.
    SequenceBounds,
    /// A global instruction using a receiver-supplied operand.
    GlobalOperands,
    /// A payload token that is not outstanding.
    BadToken,
    /// A payload token with a wrong key (payload dropped, nothing read).
    TokenKey,
    /// A later segment of a work request whose first segment did not run.
    OrphanSegment,
    /// A connection request left unanswered: the listener's accept queue is full (the
    /// requester retries, as a TCP client does when its SYN meets a full backlog).
    BacklogFull,
    /// A connection request whose cookie is not the listener's (forged, or older than
    /// two CM timeouts): challenged anew, nothing made.
    BadCookie,
    /// A connection request over the rate allowed to its source, or a first request
    /// over the node's rate of challenges: left unanswered (the requester retries).
    CmRateLimited,
    /// A plain section on a secure connection, or a sealed one on a plain connection.
    NotSealed,
    /// A sealed section whose authentication tag does not verify under the
    /// connection's keys (forged or modified), or whose key generation is unknown.
    AuthFailed,
    /// A sealed section whose packet number was already taken or is older than the
    /// replay window (a replay); or a connect request repeated after its connection's
    /// peer was heard on it (`cm::Ignored::Repeated`: a delayed duplicate or a replay,
    /// which makes no second connection).
    Replayed,
    /// A connection request for a service nobody listens on (refused, `NoListener`).
    NoListener,
    /// A connection request refused for want of resources at the listener (the
    /// connection limit, a register window, the key agreement).
    CmResources,
    /// A message of a connection whose held message waits for the host's repair
    /// (exceptioned): not run; the sender is told again and resends after the resume.
    HeldBack,
    /// A connection-management message whose tag or MAC does not verify: a forged or
    /// modified handshake, reply, REJECT or disconnect (`crate::handshake`).
    CmForged,
    /// A listener's challenge naming another identity key than the one pinned for it.
    PeerKey,
    /// A connection request from an identity key the listener does not authorise.
    Unauthorized,
    /// A connection request over its source's cap on connections, or on handshakes
    /// not yet finished (`crate::cm::CmLimits`).
    SourceCap,
    /// A valid payload token of the other kind: a read token named by a write, or a
    /// write token by a read (wire version 14).
    TokenKind,
    /// A malformed ARP or ICMP frame (lengths, checksums, fields), or an answer to one
    /// that could not be built (`crate::neigh`).
    BadNeighbour,
    /// An ARP frame that teaches nothing this node asked for: a reply or announcement
    /// from an address not in the neighbour table, or one claiming this node's own
    /// address (`crate::neigh`: it cannot make an entry).
    Unsolicited,
    /// An ARP or echo request over the answers that may wait, or a resolution over
    /// the neighbour table's size (`crate::neigh::MAX_ANSWERS`, `NeighConfig::max_entries`).
    NeighCapped,
    /// An ICMP message other than an echo request to this node (counted, ignored).
    IcmpIgnored,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 49;

    /// Every reason, in counter-index order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::BadCrc,
        DropReason::BadCheck,
        DropReason::Truncated,
        DropReason::NotOurs,
        DropReason::BadVersion,
        DropReason::UnknownConnection,
        DropReason::WrongKey,
        DropReason::OutOfSequence,
        DropReason::UnknownOpcode,
        DropReason::OutOfBounds,
        DropReason::AccessDenied,
        DropReason::PageNotPresent,
        DropReason::BadLength,
        DropReason::NoBuffer,
        DropReason::BadRegister,
        DropReason::RegisterProtection,
        DropReason::Misaligned,
        DropReason::ForcedInterruptRefused,
        DropReason::BadCompound,
        DropReason::BadFlags,
        DropReason::EventQueueFull,
        DropReason::BadReply,
        DropReason::Isolated,
        DropReason::InstructionWindow,
        DropReason::NotEntryPoint,
        DropReason::InstructionNotLoaded,
        DropReason::SequenceBounds,
        DropReason::GlobalOperands,
        DropReason::BadToken,
        DropReason::TokenKey,
        DropReason::OrphanSegment,
        DropReason::BacklogFull,
        DropReason::BadCookie,
        DropReason::CmRateLimited,
        DropReason::NotSealed,
        DropReason::AuthFailed,
        DropReason::Replayed,
        DropReason::NoListener,
        DropReason::CmResources,
        DropReason::HeldBack,
        DropReason::CmForged,
        DropReason::PeerKey,
        DropReason::Unauthorized,
        DropReason::SourceCap,
        DropReason::TokenKind,
        DropReason::BadNeighbour,
        DropReason::Unsolicited,
        DropReason::NeighCapped,
        DropReason::IcmpIgnored,
    ];

    /// The reason of counter index (and wire code) `code`; `None` past the last.
    pub fn from_u8(code: u8) -> Option<DropReason> {
        DropReason::ALL.get(usize::from(code)).copied()
    }

    /// What the reason means, in words (its [`std::fmt::Display`]).
    pub fn describe(self) -> &'static str {
        match self {
            DropReason::BadCrc => "frame CRC32C mismatch",
            DropReason::BadCheck => "control-part check byte mismatch",
            DropReason::Truncated => "frame or cell shorter than its headers say",
            DropReason::NotOurs => "not addressed to this node / not our protocol",
            DropReason::BadVersion => "unsupported transport version",
            DropReason::UnknownConnection => "no such connection",
            DropReason::WrongKey => "connection key mismatch",
            DropReason::OutOfSequence => "sequence number outside the receive window",
            DropReason::UnknownOpcode => "unknown opcode",
            DropReason::OutOfBounds => "outside the endpoint",
            DropReason::AccessDenied => "endpoint or page rights refuse the access",
            DropReason::PageNotPresent => "page not present",
            DropReason::BadLength => "length not valid for the opcode",
            DropReason::NoBuffer => "no receive buffer (mbuf) available",
            DropReason::BadRegister => "register name outside the window or the global registers",
            DropReason::RegisterProtection => "register protection refuses the use",
            DropReason::Misaligned => "misaligned atomic",
            DropReason::ForcedInterruptRefused => "sender-forced interrupt refused",
            DropReason::BadCompound => "bad compound descriptor",
            DropReason::BadFlags => "control flags not valid for the opcode",
            DropReason::EventQueueFull => {
                "a message held because the endpoint's event queue was full (fault)"
            }
            DropReason::BadReply => "a reply that matches no outstanding read or atomic of ours",
            DropReason::Isolated => {
                "a message that is not an instruction pointer or token on an isolated connection"
            }
            DropReason::InstructionWindow => {
                "an instruction pointer outside the instruction window or global table"
            }
            DropReason::NotEntryPoint => {
                "an instruction pointer to an instruction that is not an entry point"
            }
            DropReason::InstructionNotLoaded => "an instruction slot not loaded (fault)",
            DropReason::SequenceBounds => "an instruction chain beyond the sequencer's bounds",
            DropReason::GlobalOperands => "a global instruction using a receiver-supplied operand",
            DropReason::BadToken => "a payload token that is not outstanding",
            DropReason::TokenKey => {
                "a payload token with a wrong key (payload dropped, nothing read)"
            }
            DropReason::OrphanSegment => {
                "a later segment of a work request whose first segment did not run"
            }
            DropReason::BacklogFull => {
                "a connection request left unanswered: the listener's accept queue is full"
            }
            DropReason::BadCookie => {
                "a connection request whose cookie is not the listener's (challenged anew)"
            }
            DropReason::CmRateLimited => {
                "a connection request over its source's rate or the node's rate of challenges"
            }
            DropReason::NotSealed => {
                "a plain section on a secure connection, or a sealed one on a plain connection"
            }
            DropReason::AuthFailed => {
                "a sealed section whose authentication tag does not verify (forged or modified)"
            }
            DropReason::Replayed => "a sealed section whose packet number was seen (a replay)",
            DropReason::NoListener => "a connection request for a service nobody listens on",
            DropReason::CmResources => {
                "a connection request refused for want of resources (connections, registers)"
            }
            DropReason::HeldBack => {
                "a message behind one held for the host's repair (resent after the resume)"
            }
            DropReason::CmForged => {
                "a connection-management message whose tag or MAC does not verify (forged)"
            }
            DropReason::PeerKey => {
                "a listener's challenge naming another identity key than the one pinned"
            }
            DropReason::Unauthorized => {
                "a connection request from an identity key the listener does not authorise"
            }
            DropReason::SourceCap => {
                "a connection request over its source's cap on connections or unfinished handshakes"
            }
            DropReason::TokenKind => {
                "a payload token of the other kind (a read token written, a write token read)"
            }
            DropReason::BadNeighbour => "a malformed ARP or ICMP frame",
            DropReason::Unsolicited => {
                "an ARP frame about an address this node did not ask for (not learned)"
            }
            DropReason::NeighCapped => {
                "an ARP or echo request over the answers waiting, or the neighbour table full"
            }
            DropReason::IcmpIgnored => "an ICMP message other than an echo request (ignored)",
        }
    }

    /// Counter name (snake case), for stats output.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::BadCrc => "bad_crc",
            DropReason::BadCheck => "bad_check",
            DropReason::Truncated => "truncated",
            DropReason::NotOurs => "not_ours",
            DropReason::BadVersion => "bad_version",
            DropReason::UnknownConnection => "unknown_connection",
            DropReason::WrongKey => "wrong_key",
            DropReason::OutOfSequence => "out_of_sequence",
            DropReason::UnknownOpcode => "unknown_opcode",
            DropReason::OutOfBounds => "out_of_bounds",
            DropReason::AccessDenied => "access_denied",
            DropReason::PageNotPresent => "page_not_present",
            DropReason::BadLength => "bad_length",
            DropReason::NoBuffer => "no_buffer",
            DropReason::BadRegister => "bad_register",
            DropReason::RegisterProtection => "register_protection",
            DropReason::Misaligned => "misaligned",
            DropReason::ForcedInterruptRefused => "forced_interrupt_refused",
            DropReason::BadCompound => "bad_compound",
            DropReason::BadFlags => "bad_flags",
            DropReason::EventQueueFull => "event_queue_full",
            DropReason::BadReply => "bad_reply",
            DropReason::Isolated => "isolated",
            DropReason::InstructionWindow => "instruction_window",
            DropReason::NotEntryPoint => "not_entry_point",
            DropReason::InstructionNotLoaded => "instruction_not_loaded",
            DropReason::SequenceBounds => "sequence_bounds",
            DropReason::GlobalOperands => "global_operands",
            DropReason::BadToken => "bad_token",
            DropReason::TokenKey => "token_key",
            DropReason::OrphanSegment => "orphan_segment",
            DropReason::BacklogFull => "backlog_full",
            DropReason::BadCookie => "bad_cookie",
            DropReason::CmRateLimited => "cm_rate_limited",
            DropReason::NotSealed => "not_sealed",
            DropReason::AuthFailed => "auth_failed",
            DropReason::Replayed => "replayed",
            DropReason::NoListener => "no_listener",
            DropReason::CmResources => "cm_resources",
            DropReason::HeldBack => "held_back",
            DropReason::CmForged => "cm_forged",
            DropReason::PeerKey => "peer_key",
            DropReason::Unauthorized => "unauthorized",
            DropReason::SourceCap => "cm_source_cap",
            DropReason::TokenKind => "token_kind",
            DropReason::BadNeighbour => "bad_neighbour",
            DropReason::Unsolicited => "unsolicited",
            DropReason::NeighCapped => "neigh_capped",
            DropReason::IcmpIgnored => "icmp_ignored",
        }
    }
}

impl std::fmt::Display for DropReason {
    /// `register_protection (register protection refuses the use)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nak_code_carries_status_and_reason_and_unknown_bytes_decode_safely() {
        for r in DropReason::ALL {
            let n = Nak::new(RemoteStatus::RemoteAccessError, r);
            assert_eq!(Nak::from_code(n.code()), n);
            assert_eq!(DropReason::from_u8(r as u8), Some(r));
        }
        let none = Nak::from(RemoteStatus::PageFault);
        assert_eq!(Nak::from_code(none.code()), none);
        // A code from a newer peer: status and reason this version does not know.
        let odd = Nak::from_code(0x00ee_c8fe);
        assert_eq!(odd.status, RemoteStatus::RemoteInvalidRequest);
        assert_eq!(odd.reason, None);
        assert_eq!(
            DropReason::RegisterProtection.to_string(),
            "register_protection (register protection refuses the use)"
        );
    }
}
