//! `deposit-transport`: the hybrid-deposit network interface in software.
//!
//! The layers (see `DESIGN.md` §2) are kept apart so each can be read and tested alone:
//! [`wire`] (frame and cell formats, no state), [`mem`] (endpoint memory),
//! [`tables`] (endpoint, connection and node tables), [`tlb`] (the software TLB),
//! [`oplogic`] (what an operation means; pure), [`port`] (DPDK: the only code that
//! touches mbufs), [`worker`] (the poll loop) and [`cm`] (connection management over
//! connection 0). Applications use the `deposit` crate, not this one.
//!
//! The default feature `dpdk` brings in the driver: [`port`], [`worker`] and [`cm`].
//! Without it (`--no-default-features`) the sans-IO layers build and test on a machine
//! with no DPDK installed.

#[cfg(feature = "dpdk")]
pub mod cm;
pub mod connection;
pub mod events;
pub mod faults;
pub mod mem;
pub mod message;
pub mod oplogic;
#[cfg(feature = "dpdk")]
pub mod port;
pub mod reliability;
pub mod tables;
pub mod tlb;
pub mod wire;
#[cfg(feature = "dpdk")]
pub mod worker;
