//! Why a message is refused: [`Trap`], the [`RemoteStatus`] its sender is told and the
//! [`DropReason`] counter it moves.

use super::Access;
pub use crate::status::{DropReason, Nak, RemoteStatus};
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

impl Trap {
    /// The NAK that refuses a message with this trap.
    pub fn nak(&self) -> Nak {
        Nak::new(self.status(), self.reason())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(DropReason::TokenKind as usize, 44);
        assert_eq!(DropReason::IcmpIgnored as usize, DropReason::COUNT - 1);
    }
}
