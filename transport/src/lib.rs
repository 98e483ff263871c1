//! `deposit-transport`: the hybrid-deposit network interface in software.
//!
//! The layers (see `docs/design.md` §2) are kept apart so each can be read and tested alone:
//! [`status`], [`wr`] and [`cq`] at the bottom (refusal reasons, work requests and
//! completions, completion queues: plain data), [`connection`] (what a connection shares
//! with the application), [`wire`] (frame and cell formats, no state), [`mem`] (endpoint memory),
//! [`tables`] (endpoint, connection and node tables), [`tlb`] (the software TLB),
//! [`oplogic`] (what an operation means; pure), [`node`] (the protocol of one node as a
//! state machine with no clock and no I/O), [`cm`] (connection management over
//! connection 0, its own machine: messages and timers in, actions out), `sim` (nodes
//! over a simulated link, for tests), `port` (DPDK: the only code that touches mbufs)
//! and `worker` (the driver: bursts in and out of a port through a node). Applications
//! use the `deposit` crate, not this one.
//!
//! The default feature `dpdk` brings in the driver: `port` and `worker`. Without it
//! (`--no-default-features`) everything else builds and tests on a machine with no DPDK
//! installed.
//!
//! No module imports one that imports it back (`scripts/modcycles.py transport/src`).
//!
//! `sim` (nodes over a simulated link) and `fuzzing` (the fuzz targets' drivers) are
//! for tests and the fuzz crate: features `sim` and `fuzzing`, off in the shipped
//! library (this crate's own tests turn them on).

pub mod cm;
pub mod connection;
pub mod cq;
pub mod doorbell;
pub mod events;
pub mod faults;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
pub mod host;
pub mod identity;
pub mod mem;
pub mod message;
pub mod neigh;
pub mod node;
pub mod oplogic;
#[cfg(feature = "dpdk")]
pub mod port;
mod prefetch;
pub mod reliability;
pub mod rng;
pub mod secure;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod status;
pub mod submit;
pub mod tables;
pub mod tagged;
mod ticks;
pub mod tlb;
pub mod wake;
pub mod wire;
#[cfg(feature = "dpdk")]
pub mod worker;
pub mod wr;
