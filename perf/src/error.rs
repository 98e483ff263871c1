//! Failures of a benchmark run, and the bounded waits that turn a silent peer into one.
//!
//! Every wait in ddperf goes through [`Wait`], so no run can hang: after `--timeout`
//! without progress it fails with [`PerfError::Timeout`] (exit status 2). Everything
//! else the user can get wrong (bad port spec, mismatched options, refused connection)
//! is a [`PerfError`] too, printed as one line on stderr — never a panic.

use std::time::{Duration, Instant};

use deposit::RejectReason;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// A bounded wait ran out.
    #[error("timed out after {secs:.1} s waiting for {what}")]
    Timeout { what: &'static str, secs: f64 },
    /// Options that do not make sense together.
    #[error("{0}")]
    Usage(String),
    /// The deposit API refused a call.
    #[error(transparent)]
    Api(#[from] deposit::Error),
    /// The raw port layer refused a call.
    #[error(transparent)]
    Port(#[from] deposit_transport::port::PortError),
    /// The run itself went wrong (error completion, protocol mismatch with the peer).
    #[error("{0}")]
    Failed(String),
}

impl PerfError {
    /// Process exit status: 2 for every timeout (ours or the API's), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            PerfError::Timeout { .. }
            | PerfError::Api(deposit::Error::Timeout(..))
            | PerfError::Api(deposit::Error::Rejected(RejectReason::Timeout)) => 2,
            _ => 1,
        }
    }
}

pub type Result<T> = std::result::Result<T, PerfError>;

/// A bounded wait: call [`Wait::tick`] in the spin loop. It reads the clock only every
/// [`Wait::CHECK_EVERY`] ticks, so it costs a counter increment in measured loops.
pub struct Wait {
    start: Instant,
    limit: Duration,
    what: &'static str,
    spins: u32,
    progressed: bool,
}

impl Wait {
    /// Ticks between two clock reads.
    pub const CHECK_EVERY: u32 = 4096;

    /// A wait of at most `limit`, starting now.
    pub fn new(limit: Duration, what: &'static str) -> Wait {
        Wait::since(Instant::now(), limit, what)
    }

    /// A wait of at most `limit` counted from `start` (reuses a timestamp the caller
    /// already took).
    #[inline]
    pub fn since(start: Instant, limit: Duration, what: &'static str) -> Wait {
        Wait {
            start,
            limit,
            what,
            spins: 0,
            progressed: false,
        }
    }

    /// One more spin; fails once the limit has passed. Returns whether this tick read
    /// the clock (a cue for other slow checks, e.g. the connection state).
    #[inline]
    pub fn tick(&mut self) -> Result<bool> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % Self::CHECK_EVERY == 0 {
            if self.progressed {
                self.progressed = false;
                self.start = Instant::now();
            } else if self.start.elapsed() > self.limit {
                return Err(PerfError::Timeout {
                    what: self.what,
                    secs: self.limit.as_secs_f64(),
                });
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Progress was made: the limit counts again from (about) now, which makes this an
    /// idle timeout. Costs a store: the clock is read at the next check.
    #[inline]
    pub fn progressed(&mut self) {
        self.progressed = true;
    }
}
