//! Tagged messaging (MPI's point-to-point, libfabric's `FI_TAGGED` and `FI_MSG`) over
//! the transport's own operations, sans-IO.
//!
//! - [`matching`]: posted receives against arrived messages, pure.
//! - [`wire`]: what a receive-ring slot holds.
//! - [`engine`]: the protocol — eager through the ring, rendezvous by a read into the
//!   posted buffer, credits read from the receiver — over any [`Fabric`]: the
//!   `deposit` crate's device, or `sim` hosts in tests.

pub mod engine;
mod ids;
pub mod matching;
pub mod wire;

pub use engine::{
    Accepted, Arrival, Config, Engine, Fabric, PeerAddr, RegionKey, RmaOp, TagCompletion, TagError,
    TagOp, TagStats, TagStatus,
};
pub use matching::{Arrived, Matched, Matcher, MsgId, MsgInfo, PeerId, Posted, RecvId, Selector};
