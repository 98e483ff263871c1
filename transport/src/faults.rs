//! Fault injection between the port and the worker: what Ethernet does to frames, on
//! purpose and reproducibly. No `tc netem` here — this layer is ours.
//!
//! Every received frame gets a [`Verdict`] from a seeded generator: dropped,
//! duplicated, corrupted (one bit flipped), delayed, or held back so later frames
//! overtake it (reordered). The same seed and the same frame sequence give the same
//! verdicts, so a failing run can be replayed. Acting on receive covers every frame a
//! node sees — data, acknowledgements, connection management — in one place.
//!
//! Pure: [`Faults::verdict`] decides, the worker carries the decision out on mbufs.

use std::fmt;
use std::str::FromStr;

use crate::rng::Rng;

/// What to inject, as probabilities per frame (0.0 ..= 1.0).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    pub loss: f64,
    pub dup: f64,
    /// Held back until up to `reorder_window` later frames have passed it.
    pub reorder: f64,
    pub reorder_window: u32,
    /// One bit flipped somewhere in the frame.
    pub corrupt: f64,
    /// Held for `delay_us` microseconds.
    pub delay: f64,
    pub delay_us: u64,
    pub seed: u64,
}

/// Why a fault spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec {spec:?}: {why} (expected e.g. loss=0.01,reorder=0.01,dup=0.01,corrupt=0.001,delay=0.01,delay_us=100,reorder_window=8,seed=7)")]
pub struct FaultSpecError {
    pub spec: String,
    pub why: String,
}

impl FromStr for FaultConfig {
    type Err = FaultSpecError;
    fn from_str(s: &str) -> Result<Self, FaultSpecError> {
        let bad = |why: String| FaultSpecError {
            spec: s.to_string(),
            why,
        };
        let mut c = FaultConfig {
            reorder_window: 8,
            delay_us: 100,
            seed: 1,
            ..FaultConfig::default()
        };
        for item in s.split(',').filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("{item:?} is not key=value")))?;
            let prob = |v: &str| -> Result<f64, FaultSpecError> {
                let p: f64 = v
                    .parse()
                    .map_err(|_| bad(format!("{k}={v} is not a number")))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(bad(format!("{k}={v} is not a probability in [0, 1]")));
                }
                Ok(p)
            };
            let int = |v: &str| -> Result<u64, FaultSpecError> {
                v.parse()
                    .map_err(|_| bad(format!("{k}={v} is not an integer")))
            };
            match k {
                "loss" | "drop" => c.loss = prob(v)?,
                "dup" => c.dup = prob(v)?,
                "reorder" => c.reorder = prob(v)?,
                "corrupt" => c.corrupt = prob(v)?,
                "delay" => c.delay = prob(v)?,
                "delay_us" => c.delay_us = int(v)?,
                "reorder_window" => c.reorder_window = int(v)?.clamp(1, 1024) as u32,
                "seed" => c.seed = int(v)?,
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        Ok(c)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},reorder={},reorder_window={},corrupt={},delay={},delay_us={},seed={}",
            self.loss,
            self.dup,
            self.reorder,
            self.reorder_window,
            self.corrupt,
            self.delay,
            self.delay_us,
            self.seed
        )
    }
}

/// How long a passing frame waits before the worker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    None,
    /// Until this many later frames have passed it (or a short time cap).
    Frames(u32),
    /// For this many microseconds.
    Micros(u64),
}

/// The fate of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Pass {
        /// Deliver a second copy too.
        dup: bool,
        /// Flip this bit (index into the frame's bits).
        corrupt_bit: Option<usize>,
        hold: Hold,
    },
}

impl Verdict {
    /// A frame left alone.
    pub const CLEAN: Verdict = Verdict::Pass {
        dup: false,
        corrupt_bit: None,
        hold: Hold::None,
    };
}

/// Counters of what was injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub delayed: u64,
}

impl std::ops::AddAssign for FaultStats {
    fn add_assign(&mut self, o: FaultStats) {
        self.dropped += o.dropped;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.corrupted += o.corrupted;
        self.delayed += o.delayed;
    }
}

/// The deterministic fault generator.
#[derive(Debug, Clone)]
pub struct Faults {
    cfg: FaultConfig,
    rng: Rng,
    pub stats: FaultStats,
}

impl Faults {
    pub fn new(cfg: FaultConfig) -> Faults {
        Faults {
            cfg,
            rng: Rng::splitmix(cfg.seed),
            stats: FaultStats::default(),
        }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    fn next(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.chance(p)
    }

    /// Decides the fate of a frame of `len` bytes.
    pub fn verdict(&mut self, len: usize) -> Verdict {
        if self.chance(self.cfg.loss) {
            self.stats.dropped += 1;
            return Verdict::Drop;
        }
        let dup = self.chance(self.cfg.dup);
        let corrupt_bit = if len > 0 && self.chance(self.cfg.corrupt) {
            Some((self.next() % (len as u64 * 8)) as usize)
        } else {
            None
        };
        let hold = if self.chance(self.cfg.reorder) {
            Hold::Frames(1 + (self.next() % u64::from(self.cfg.reorder_window.max(1))) as u32)
        } else if self.chance(self.cfg.delay) {
            Hold::Micros(self.cfg.delay_us)
        } else {
            Hold::None
        };
        self.stats.duplicated += dup as u64;
        self.stats.corrupted += corrupt_bit.is_some() as u64;
        match hold {
            Hold::Frames(_) => self.stats.reordered += 1,
            Hold::Micros(_) => self.stats.delayed += 1,
            Hold::None => {}
        }
        Verdict::Pass {
            dup,
            corrupt_bit,
            hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        let c: FaultConfig = "loss=0.05,reorder=0.02,dup=0.02,corrupt=0.001,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            (c.loss, c.reorder, c.dup, c.corrupt, c.seed),
            (0.05, 0.02, 0.02, 0.001, 7)
        );
        assert_eq!(c.to_string().parse::<FaultConfig>().unwrap(), c);
        for bad in ["loss", "loss=2", "loss=x", "bogus=1", "seed=-1"] {
            assert!(bad.parse::<FaultConfig>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_verdicts() {
        let c: FaultConfig = "loss=0.1,dup=0.1,reorder=0.1,corrupt=0.1,delay=0.1,seed=42"
            .parse()
            .unwrap();
        let mut a = Faults::new(c);
        let mut b = Faults::new(c);
        let va: Vec<Verdict> = (0..10_000).map(|i| a.verdict(60 + i % 1400)).collect();
        let vb: Vec<Verdict> = (0..10_000).map(|i| b.verdict(60 + i % 1400)).collect();
        assert_eq!(va, vb);
        let mut other = Faults::new(FaultConfig { seed: 43, ..c });
        let vo: Vec<Verdict> = (0..10_000).map(|i| other.verdict(60 + i % 1400)).collect();
        assert_ne!(va, vo);
    }

    #[test]
    fn rates_match_the_configuration() {
        let c: FaultConfig = "loss=0.05,dup=0.02,reorder=0.03,corrupt=0.01,seed=9"
            .parse()
            .unwrap();
        let mut f = Faults::new(c);
        let n = 200_000u64;
        for _ in 0..n {
            if let Verdict::Pass {
                corrupt_bit: Some(b),
                ..
            } = f.verdict(100)
            {
                assert!(b < 800);
            }
        }
        let s = f.stats;
        let near = |got: u64, p: f64| {
            let want = p * n as f64;
            (got as f64 - want).abs() < 5.0 * want.sqrt() + 10.0
        };
        assert!(near(s.dropped, 0.05), "{s:?}");
        // The others apply to frames that were not dropped.
        assert!(near(s.duplicated, 0.02 * 0.95), "{s:?}");
        assert!(near(s.corrupted, 0.01 * 0.95), "{s:?}");
        assert!(near(s.reordered, 0.03 * 0.95), "{s:?}");
    }

    #[test]
    fn no_faults_means_every_frame_passes_clean() {
        let mut f = Faults::new(FaultConfig::default());
        for _ in 0..1000 {
            assert_eq!(f.verdict(64), Verdict::CLEAN);
        }
    }
}
