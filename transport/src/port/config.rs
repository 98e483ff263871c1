//! [`PortConfig`]: the options a port is opened with, and their defaults per PMD.

use super::spec::PortSpec;

/// Port options.
#[derive(Debug, Clone)]
pub struct PortConfig {
    pub spec: PortSpec,
    /// Largest frame (Ethernet header to CRC trailer) the transport will send.
    /// Clamped to what the PMD allows; [`Port::max_frame`](super::Port::max_frame)
    /// tells the result.
    pub max_frame: usize,
    /// Mbufs in the port's mempool.
    pub mbufs: u32,
    pub rx_desc: u16,
    pub tx_desc: u16,
    /// Queue pairs wanted: one per shard ([`Port::split`](super::Port::split)). Ring
    /// ports get them; other PMDs keep one and shards share it by software dispatch.
    pub queues: u16,
}

impl PortConfig {
    /// Defaults for a spec: jumbo frames (9000-byte MTU) everywhere but af_xdp, which
    /// stops near 3.5 KB on veth.
    pub fn new(spec: PortSpec) -> Self {
        let max_frame = match spec {
            PortSpec::AfXdp { .. } => 3498,
            _ => 9014,
        };
        PortConfig {
            spec,
            max_frame,
            mbufs: 8191,
            rx_desc: 1024,
            tx_desc: 1024,
            queues: 1,
        }
    }
}
