//! Converting configured times to a node's clock: every sans-IO part (node, neighbour
//! table, connection management) counts in ticks of a clock whose rate it is given.

/// `us` microseconds in ticks of a clock of `hz`.
pub(crate) fn us_to_ticks(us: u64, hz: u64) -> u64 {
    us.saturating_mul(hz) / 1_000_000
}

/// `ns` nanoseconds in ticks of a clock of `hz`.
#[inline]
pub(crate) fn ns_to_ticks(ns: u64, hz: u64) -> u64 {
    (u128::from(ns) * u128::from(hz) / 1_000_000_000) as u64
}

/// `ticks` of a clock of `hz` in nanoseconds (saturating).
#[inline]
pub(crate) fn ticks_to_ns(ticks: u64, hz: u64) -> u64 {
    u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(hz.max(1))).unwrap_or(u64::MAX)
}
