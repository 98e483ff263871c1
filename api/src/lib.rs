//! `deposit`: the verbs-like API of the deposit transport.
//!
//! The nouns are rdma-core's where the idea is the same — device, work request,
//! completion queue, completion status — and the seed's where it is new — endpoint,
//! connection, event, address register.
//!
//! Two nodes in one process (the two sides of an in-process ring port), one writing
//! into the other's endpoint — the whole program:
//!
//! ```
//! use std::time::Duration;
//! use deposit::{Device, DeviceConfig, Rights, WcStatus, WorkRequest};
//! # fn main() -> Result<(), deposit::Error> {
//! let server = Device::open(DeviceConfig::new("ring:hello:a", [10, 0, 0, 1]))?;
//! let client = Device::open(DeviceConfig::new("ring:hello:b", [10, 0, 0, 2]))?;
//! // The server's endpoint takes remote writes; the listener accepts on service 1.
//! let sep = server.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
//! let scq = server.create_cq(16);
//! let listener = server.listen(1, &sep, &scq)?;
//! // The client writes from its own endpoint (its local memory region).
//! let cep = client.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;
//! let ccq = client.create_cq(16);
//! let conn = client.connect([10, 0, 0, 1], 1, &cep, &ccq)?;
//! let _accepted = listener.accept(Duration::from_secs(5))?; // keep it: dropping closes
//! cep.write(0, b"hello")?;
//! conn.post(&WorkRequest::write(7, &cep, 0, 5, 0).signaled())?;
//! let wc = ccq.wait_one(Duration::from_secs(5)).expect("a completion");
//! assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
//! let mut got = [0u8; 5];
//! sep.read(0, &mut got)?;
//! assert_eq!(&got, b"hello");
//! # Ok(()) }
//! ```
//!
//! Between processes or hosts only the port spec changes: `memif:/tmp/dp.sock:server`
//! and `memif:/tmp/dp.sock:client` for two processes on one machine, `af_packet:IFACE`
//! or `af_xdp:IFACE` on a kernel interface, a PCI address on a NIC (docs/design.md §8).
//!
//! Numbers: offsets and sizes inside an endpoint are `u64` everywhere
//! ([`Endpoint::read`], [`Device::alloc_endpoint`], a work request's local offset,
//! [`Device::create_token`]); a work request's length is a `u32`, as verbs' `length`.
//! The remote offset of a direct-mode request is its 32-bit operand, so direct
//! addressing reaches the first 4 GiB of an endpoint and the register modes
//! ([`WorkRequest::indexed`], [`WorkRequest::indirect`]) reach the rest through 64-bit
//! address registers; a read token's offset ([`WorkRequest::read_with_token`]) is 64-bit.
//! A host buffer given to [`Device::register_endpoint`] is a
//! pointer and a `usize`, as `ibv_reg_mr` takes one.
//!
//! Progress: a device runs its worker either on a dedicated thread
//! ([`Progress::Dedicated`]) or inline ([`Progress::Inline`]), driven by the
//! application's calls to [`Device::progress`], [`CompletionQueue::poll`] and the
//! blocking calls. Posting and polling never take a lock; control calls (allocating
//! endpoints, connecting) briefly take the device lock.

#![warn(missing_debug_implementations)]

mod device;
mod endpoint;
mod error;
mod events;
mod idle;
pub mod mailbox;
mod multicast;
mod program;
pub mod protection;
mod queue;
#[cfg(feature = "dpdk")]
pub mod telemetry;
mod wr;

pub use device::{ConnOptions, Device, DeviceConfig, Listener, Progress, DEFAULT_BACKLOG};
pub use endpoint::Endpoint;
pub use error::Error;
pub use events::EventQueue;
pub use mailbox::{
    Mailbox, MailboxConfig, MsgInfo, PeerAddr, PeerId, RegionKey, RmaOp, Selector, TagCompletion,
    TagOp, TagStats, TagStatus,
};
pub use multicast::MulticastGroup;
pub use program::{InstrPtr, InstrWindow, Instruction, Operands, Token, MAX_SEQUENCE};
pub use queue::{CompletionQueue, Connection, INLINE_DOORBELL};
pub use wr::{global, Cond, Order, RegOp, Src, WorkRequest};

// The value types of the API that the worker and the wire share, re-exported as the
// crate's own: users never name `deposit_transport` (scripts/test.sh checks that the
// documentation links nowhere into it).
pub use deposit_transport::cm::{CmError, CmLimits, Registers};
pub use deposit_transport::events::{Event, EventKind};
pub use deposit_transport::faults::{FaultConfig, FaultSpecError, FaultStats};
pub use deposit_transport::identity::{
    load_authorized_keys, Identity, IdentityError, IdentityKey, KnownPeers,
};
pub use deposit_transport::mem::MemError;
pub use deposit_transport::neigh::{NeighError, Route};
/// Congestion control's settings ([`DeviceConfig::congestion`]) and counters.
pub use deposit_transport::node::cc::{CcConfig, CcCounters, PathCounters, MAX_PATHS};
/// Device counters ([`Device::stats`]): one definition, the worker's own.
pub use deposit_transport::node::Stats as DeviceStats;
pub use deposit_transport::node::{PathSummary, PeerSummary, ResumeError};
pub use deposit_transport::secure::SecureError;
pub use deposit_transport::tables::{RegProt, RegWindow, TableError};

pub use deposit_transport::cm::RejectReason;
pub use deposit_transport::connection::{Completion, ConnState, Priority, WcStatus, WrOpcode};
pub use deposit_transport::mem::Backing;
pub use deposit_transport::oplogic::{DropReason, RemoteStatus};
#[cfg(feature = "dpdk")]
pub use deposit_transport::port::{tsc_hz, EalInfo, MemifRole, PortError, PortSpec, RingSide};
pub use deposit_transport::tables::{NodeAddr, Rights};
pub use deposit_transport::tlb::TlbStats;
pub use deposit_transport::wire::cm::PRIVATE_DATA_MAX;
pub use deposit_transport::wire::UDP_PORT;
