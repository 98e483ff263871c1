//! Why a message is refused: [`Trap`], the [`RemoteStatus`] its sender is told and the
//! [`DropReason`] counter it moves.

use super::Access;
use crate::tables::RegProt;

/// Why a message was not executed. Error traps discard the message; faults
/// ([`Trap::is_fault`]) keep it for the host to repair. Either way nothing was written.
#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trap {
    /// The opcode is not one this receiver executes.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// `[ea, ea + len)` is not inside the endpoint of `bound` bytes (or overflows).
    #[error("{len} bytes at {ea:#x} are outside the endpoint of {bound} bytes")]
    OutOfBounds {
        /// Effective address.
        ea: u64,
        /// Length of the access.
        len: u64,
        /// Length of the endpoint.
        bound: u64,
    },
    /// The endpoint or page at `ea` does not permit `access`.
    #[error("{access:?} access at {ea:#x} denied")]
    AccessDenied {
        /// First address denied.
        ea: u64,
        /// The access attempted.
        access: Access,
    },
    /// Logical page `page` is not present: a fault the host must repair.
    #[error("page {page} not present")]
    PageNotPresent {
        /// The logical page.
        page: u64,
    },
    /// The length field is not valid for the opcode.
    #[error("length {length} not valid for opcode {opcode:#04x}")]
    BadLength {
        /// The opcode.
        opcode: u8,
        /// The length field.
        length: u32,
    },
    /// Fewer payload bytes arrived than the length field announces.
    #[error("length {length} announced but only {payload} payload bytes present")]
    PayloadTruncated {
        /// The length field.
        length: u32,
        /// Payload bytes present.
        payload: usize,
    },
    /// A register name outside the connection's window (names below 128) or the
    /// endpoint's global registers (128 and up); for a post-increment, `name` is the
    /// stride register `ra + 1`.
    #[error("register name {name} is outside the window")]
    BadRegister {
        /// The register name.
        name: u8,
    },
    /// The register's protection lacks `need` for what the message does with it.
    #[error("register {name} does not permit {need:?}")]
    RegisterProtection {
        /// The register name.
        name: u8,
        /// The protection bits the use needs.
        need: RegProt,
    },
    /// An atomic on an endpoint word at an address that is not a multiple of 8.
    #[error("atomic at {ea:#x} is not 8-byte aligned")]
    Misaligned {
        /// Effective address.
        ea: u64,
    },
    /// A sender-forced interrupt (conditional `ALWAYS`, software exception) on a
    /// connection that refuses them.
    #[error("sender-forced interrupt refused")]
    ForcedInterruptRefused,
    /// A compound descriptor with an unknown code or a non-zero reserved byte.
    #[error("compound descriptor byte {byte} has unknown value {value:#04x}")]
    BadCompound {
        /// Offset of the byte in the descriptor.
        byte: u8,
        /// Its value.
        value: u8,
    },
    /// Control flags the opcode does not allow (a reply handed to the operation logic,
    /// a register target on a non-atomic or with an address mode, a descriptor on an
    /// opcode that takes none).
    #[error("flags {flags:#04x} not valid for opcode {opcode:#04x}")]
    BadFlags {
        /// The opcode.
        opcode: u8,
        /// The flags byte.
        flags: u8,
    },
    /// The connection's endpoint is gone (the application released it).
    #[error("the connection's endpoint no longer exists")]
    NoEndpoint,
    /// The operation would interrupt but the endpoint's event queue is full: a fault
    /// the host repairs by draining the queue.
    #[error("event queue full")]
    EventQueueFull,
    /// A message that names an operation on a connection in isolation mode (only
    /// instruction pointers and payload-token writes and reads are taken: they name no
    /// state of the receiver's).
    #[error("connection in isolation mode takes instruction pointers and tokens only")]
    Isolated,
    /// An instruction pointer outside the connection's instruction window (or the
    /// global table).
    #[error("instruction pointer {ip:#x} is outside the window")]
    InstructionOutOfWindow {
        /// The instruction pointer.
        ip: u32,
    },
    /// An instruction pointer naming an instruction that is not an entry point.
    #[error("instruction {ip:#x} is not an entry point")]
    NotEntryPoint {
        /// The instruction pointer.
        ip: u32,
    },
    /// The instruction slot (or the next one of a chain) is empty: a fault the host
    /// repairs by loading it.
    #[error("instruction {ip:#x} not loaded")]
    InstructionNotLoaded {
        /// The empty slot (relative to the window, or global).
        ip: u32,
    },
    /// A chain of instructions longer than the sequencer runs, or one that returns more
    /// than one value.
    #[error("instruction chain from {ip:#x} exceeds the sequencer's bounds")]
    SequenceBounds {
        /// The entry point.
        ip: u32,
    },
    /// A global instruction that would take an operand from the instruction.
    #[error("global instruction {ip:#x} uses a receiver-supplied operand")]
    GlobalOperands {
        /// The instruction pointer.
        ip: u32,
    },
    /// A payload token that names no outstanding entry (used, cancelled, never issued).
    #[error("payload token not outstanding")]
    BadToken,
    /// A payload token with a wrong key: the payload is dropped (the receiver still
    /// gets the control part, with length 0; a read with a wrong key reads nothing).
    #[error("payload token key mismatch")]
    TokenKey,
    /// A valid token of the other kind: a read token named by a `TOKEN_WRITE`, or a
    /// write (payload) token by a `TOKEN_READ` (`crate::tables::TokenKind`). Nothing is
    /// written or read, and the token stays as it was.
    #[error("payload token of the other kind (read token written, or write token read)")]
    TokenKind,
    /// A later segment placed relative to its work request's address when the request's
    /// first segment did not run here (refused, or never sent): there is no address to
    /// place it at.
    #[error("segment {segment} has no first segment to place it after")]
    OrphanSegment {
        /// The segment number (1..) the message claims.
        segment: u32,
    },
}

impl Trap {
    /// The status returned to the sender in a NAK.
    pub fn status(&self) -> RemoteStatus {
        match self {
            Trap::OutOfBounds { .. }
            | Trap::AccessDenied { .. }
            | Trap::BadRegister { .. }
            | Trap::RegisterProtection { .. }
            | Trap::ForcedInterruptRefused
            | Trap::NoEndpoint
            | Trap::Isolated
            | Trap::InstructionOutOfWindow { .. }
            | Trap::NotEntryPoint { .. }
            | Trap::GlobalOperands { .. }
            | Trap::BadToken
            | Trap::TokenKey
            | Trap::TokenKind => RemoteStatus::RemoteAccessError,
            Trap::SequenceBounds { .. } | Trap::OrphanSegment { .. } => {
                RemoteStatus::RemoteOperationError
            }
            Trap::UnknownOpcode(_)
            | Trap::BadLength { .. }
            | Trap::BadCompound { .. }
            | Trap::BadFlags { .. } => RemoteStatus::RemoteOperationError,
            Trap::PayloadTruncated { .. } | Trap::Misaligned { .. } => {
                RemoteStatus::RemoteInvalidRequest
            }
            Trap::PageNotPresent { .. }
            | Trap::EventQueueFull
            | Trap::InstructionNotLoaded { .. } => RemoteStatus::PageFault,
        }
    }

    /// The counter this trap moves.
    pub fn reason(&self) -> DropReason {
        match self {
            Trap::UnknownOpcode(_) => DropReason::UnknownOpcode,
            Trap::OutOfBounds { .. } => DropReason::OutOfBounds,
            Trap::AccessDenied { .. } => DropReason::AccessDenied,
            Trap::PageNotPresent { .. } => DropReason::PageNotPresent,
            Trap::BadLength { .. } => DropReason::BadLength,
            Trap::PayloadTruncated { .. } => DropReason::Truncated,
            Trap::BadRegister { .. } => DropReason::BadRegister,
            Trap::RegisterProtection { .. } => DropReason::RegisterProtection,
            Trap::Misaligned { .. } => DropReason::Misaligned,
            Trap::ForcedInterruptRefused => DropReason::ForcedInterruptRefused,
            Trap::BadCompound { .. } => DropReason::BadCompound,
            Trap::BadFlags { .. } => DropReason::BadFlags,
            Trap::NoEndpoint => DropReason::AccessDenied,
            Trap::EventQueueFull => DropReason::EventQueueFull,
            Trap::Isolated => DropReason::Isolated,
            Trap::InstructionOutOfWindow { .. } => DropReason::InstructionWindow,
            Trap::NotEntryPoint { .. } => DropReason::NotEntryPoint,
            Trap::InstructionNotLoaded { .. } => DropReason::InstructionNotLoaded,
            Trap::SequenceBounds { .. } => DropReason::SequenceBounds,
            Trap::GlobalOperands { .. } => DropReason::GlobalOperands,
            Trap::BadToken => DropReason::BadToken,
            Trap::TokenKey => DropReason::TokenKey,
            Trap::TokenKind => DropReason::TokenKind,
            Trap::OrphanSegment { .. } => DropReason::OrphanSegment,
        }
    }

    /// Whether this is a fault the host must repair (the connection enters the
    /// exceptioned state and the message is kept) rather than an error trap (the
    /// message is discarded).
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Trap::PageNotPresent { .. } | Trap::EventQueueFull | Trap::InstructionNotLoaded { .. }
        )
    }
}

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

impl Trap {
    /// The NAK that refuses a message with this trap.
    pub fn nak(&self) -> Nak {
        Nak::new(self.status(), self.reason())
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
    /// replay window (a replay).
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
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 45;

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

    #[test]
    fn traps_map_to_statuses_and_reasons() {
        use RemoteStatus as S;
        let cases = [
            (
                Trap::UnknownOpcode(9),
                S::RemoteOperationError,
                DropReason::UnknownOpcode,
            ),
            (
                Trap::OutOfBounds {
                    ea: 0,
                    len: 1,
                    bound: 0,
                },
                S::RemoteAccessError,
                DropReason::OutOfBounds,
            ),
            (
                Trap::AccessDenied {
                    ea: 0,
                    access: Access::Atomic,
                },
                S::RemoteAccessError,
                DropReason::AccessDenied,
            ),
            (
                Trap::PageNotPresent { page: 3 },
                S::PageFault,
                DropReason::PageNotPresent,
            ),
            (
                Trap::BadLength {
                    opcode: 1,
                    length: 2,
                },
                S::RemoteOperationError,
                DropReason::BadLength,
            ),
            (
                Trap::PayloadTruncated {
                    length: 2,
                    payload: 1,
                },
                S::RemoteInvalidRequest,
                DropReason::Truncated,
            ),
            (
                Trap::BadRegister { name: 200 },
                S::RemoteAccessError,
                DropReason::BadRegister,
            ),
            (
                Trap::RegisterProtection {
                    name: 1,
                    need: RegProt::WRITE,
                },
                S::RemoteAccessError,
                DropReason::RegisterProtection,
            ),
            (
                Trap::Misaligned { ea: 4 },
                S::RemoteInvalidRequest,
                DropReason::Misaligned,
            ),
            (
                Trap::ForcedInterruptRefused,
                S::RemoteAccessError,
                DropReason::ForcedInterruptRefused,
            ),
            (
                Trap::BadCompound { byte: 4, value: 7 },
                S::RemoteOperationError,
                DropReason::BadCompound,
            ),
            (
                Trap::BadFlags {
                    opcode: 2,
                    flags: 0x24,
                },
                S::RemoteOperationError,
                DropReason::BadFlags,
            ),
        ];
        for (trap, status, reason) in cases {
            assert_eq!(trap.status(), status, "{trap}");
            assert_eq!(trap.reason(), reason, "{trap}");
            assert_eq!(trap.is_fault(), status == S::PageFault);
            assert_eq!(RemoteStatus::from_u8(status as u8), Some(status));
        }
        assert_eq!(RemoteStatus::from_u8(0), Some(RemoteStatus::Ok));
        assert_eq!(RemoteStatus::from_u8(200), None);
    }

    #[test]
    fn drop_reasons_are_indexed_in_order_with_unique_names() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            for other in &DropReason::ALL[..i] {
                assert_ne!(r.name(), other.name());
            }
        }
        // Existing counter indices never move.
        assert_eq!(DropReason::NoBuffer as usize, 13);
        assert_eq!(DropReason::BadFlags as usize, 19);
        assert_eq!(DropReason::TokenKey as usize, 29);
        assert_eq!(DropReason::OrphanSegment as usize, 30);
        assert_eq!(DropReason::CmRateLimited as usize, 33);
        assert_eq!(DropReason::Replayed as usize, 36);
        assert_eq!(DropReason::SourceCap as usize, 43);
        assert_eq!(DropReason::TokenKind as usize, DropReason::COUNT - 1);
    }
}
