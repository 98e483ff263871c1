//! Converting configured times to a node's clock: every sans-IO part (node, neighbour
//! table, connection management) counts in ticks of a clock whose rate it is given.

/// `us` microseconds in ticks of a clock of `hz`.
pub(crate) fn us_to_ticks(us: u64, hz: u64) -> u64 {
    us.saturating_mul(hz) / 1_000_000
}
