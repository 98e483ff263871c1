//! `deposit`: the verbs-like API of the deposit transport.
//!
//! The nouns are rdma-core's where the idea is the same — device, work request,
//! completion queue, completion status — and the seed's where it is new — endpoint,
//! connection, event, address register.
//!
//! ```no_run
//! use deposit::{Device, DeviceConfig, Rights, WriteRequest};
//! # fn main() -> Result<(), deposit::Error> {
//! let dev = Device::open(DeviceConfig::new("memif:/tmp/dp.sock:client", [10, 0, 0, 2]))?;
//! let ep = dev.alloc_endpoint(1 << 20, Rights::REMOTE_WRITE)?;
//! let cq = dev.create_cq(4096);
//! let conn = dev.connect([10, 0, 0, 1], 1, &ep, &cq)?;
//! ep.write(0, b"hello")?;
//! conn.post_write(&WriteRequest::from_endpoint(7, &ep, 0, 5, 0).signaled())?;
//! let wc = cq.wait_one(std::time::Duration::from_secs(1)).expect("completion");
//! assert!(wc.status.is_ok());
//! # Ok(()) }
//! ```
//!
//! Progress: a device runs its worker either on a dedicated thread
//! ([`Progress::Dedicated`]) or inline ([`Progress::Inline`]), driven by the
//! application's calls to [`Device::progress`], [`CompletionQueue::poll`] and the
//! blocking calls. Posting and polling never take a lock; control calls (allocating
//! endpoints, connecting) briefly take the device lock.

mod device;
mod endpoint;
mod error;
mod events;
mod idle;
mod multicast;
mod program;
mod queue;
mod wr;

pub use device::{ConnOptions, Device, DeviceConfig, DeviceStats, Listener, Progress};
pub use endpoint::Endpoint;
pub use error::Error;
pub use events::EventQueue;
pub use multicast::MulticastGroup;
pub use program::{InstrWindow, Instruction, Ip, Operands, Token, MAX_SEQUENCE};
pub use queue::{CompletionQueue, Connection, INLINE_DOORBELL};
pub use wr::{global, Cond, Order, RegOp, Src, WorkRequest, WriteRequest};

pub use deposit_transport::cm::Registers;
pub use deposit_transport::events::{Event, EventKind};
pub use deposit_transport::faults::{FaultConfig, FaultStats};
pub use deposit_transport::tables::{RegProt, RegWindow};

pub use deposit_transport::cm::RejectReason;
pub use deposit_transport::connection::{Completion, ConnState, Priority, WcStatus, WrOpcode};
pub use deposit_transport::mem::Backing;
pub use deposit_transport::oplogic::{DropReason, RemoteStatus};
pub use deposit_transport::port::PortSpec;
pub use deposit_transport::tables::{NodeAddr, Rights};
pub use deposit_transport::wire::UDP_PORT;
