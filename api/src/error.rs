//! Errors of the API: typed, saying what was wrong and with which value.

use deposit_transport::cm::{CmError, RejectReason};
use deposit_transport::connection::ConnState;
use deposit_transport::mem::MemError;
#[cfg(feature = "dpdk")]
use deposit_transport::port::PortError;
use deposit_transport::tables::TableError;

/// Everything an API call can refuse.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[cfg(feature = "dpdk")]
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(transparent)]
    Memory(#[from] MemError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Cm(#[from] CmError),
    #[error("connection refused: {0}")]
    Rejected(RejectReason),
    /// The listener at `peer` named another identity key than the one pinned for it
    /// (`ConnOptions::peer_key` or the known-peers file), and nothing answered with
    /// the pinned one before the CM timeout: another node answered, or the peer's key
    /// changed.
    #[error(
        "{peer}'s identity key is {offered}, not the pinned {pinned}: another node answered \
         for it, or its key changed (if it did, update the known-peers file or the pinned key)"
    )]
    PeerKeyMismatch {
        peer: std::net::IpAddr,
        pinned: deposit_transport::identity::IdentityKey,
        offered: deposit_transport::identity::IdentityKey,
    },
    /// Nobody answered the ARP requests (IPv6: neighbour solicitations) for the next
    /// hop towards `peer` (the peer itself, or the router `hop` before it).
    #[error(
        "no {} from {hop}{} on port {port} after {tries} tries: is it up, on this \
         subnet, or behind --gateway?",
        if hop.is_ipv6() { "neighbour advertisement" } else { "ARP reply" },
        if hop == peer { String::new() } else { format!(" (the gateway to {peer})") }
    )]
    Unresolved {
        peer: std::net::IpAddr,
        hop: std::net::IpAddr,
        port: String,
        tries: u32,
    },
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
    #[error(
        "send queue full ({depth} work requests not yet sent); drive progress or poll the \
         completion queue"
    )]
    SendQueueFull { depth: usize },
    #[error(
        "completion queue full: its {depth} entries are promised to signaled work requests \
         not yet polled; poll it (or make it deeper)"
    )]
    CompletionQueueFull { depth: usize },
    #[error(
        "the device's submission ring is full ({capacity} posts the worker has not taken \
         yet); drive progress (inline) or post fewer at once"
    )]
    SubmitRingFull { capacity: usize },
    #[error("connection is {0:?}; posting is refused")]
    NotConnected(ConnState),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("the endpoint belongs to another device")]
    ForeignEndpoint,
    #[error(transparent)]
    Resume(#[from] deposit_transport::node::ResumeError),
}

impl Error {
    /// The error of a refused post (the submission path's own, not public).
    pub(crate) fn from_post(e: deposit_transport::submit::PostError) -> Error {
        use deposit_transport::submit::PostError as P;
        match e {
            P::QueueFull { depth } => Error::SendQueueFull { depth },
            P::CompletionQueueFull { depth } => Error::CompletionQueueFull { depth },
            P::RingFull { capacity } => Error::SubmitRingFull { capacity },
        }
    }
}
