//! A small deterministic random number generator (xorshift64*): the simulator's link
//! faults, test tools and property tests draw from it, reproducible by seed. Not for
//! anything secret: keys, connection numbers and sequence numbers come from the OS
//! random source (`crate::connection::random_u64`) — except, in builds with `sim`,
//! while a `SeededNumbers` guard lives on the thread (a simulated fabric's
//! network: its paths hash the UDP source port, which comes from the connection
//! number, so a seed must name the numbers too for a run to be reproducible).

/// xorshift64*: small, fast and good enough to decide link faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// A generator whose state is splitmix64 of `seed`: seed 0 and nearby seeds still
    /// give good streams (the fault layer's, whose seeds users type).
    pub fn splitmix(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `p` (never for 0, always for 1).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[cfg(any(test, feature = "sim"))]
thread_local! {
    /// The stream `crate::connection::random_u64` draws from instead of the OS while
    /// [`SeededNumbers`] guards live on this thread, and how many do.
    static SEEDED: std::cell::RefCell<(usize, Option<Rng>)> =
        const { std::cell::RefCell::new((0, None)) };
}

/// The next number of this thread's seeded stream, `None` when no [`SeededNumbers`]
/// guard lives (the OS random source is used then).
#[cfg(any(test, feature = "sim"))]
pub(crate) fn seeded_u64() -> Option<u64> {
    SEEDED.with(|s| s.borrow_mut().1.as_mut().map(Rng::next_u64))
}

/// While it lives, the connection numbers, keys and initial sequence numbers nodes on
/// this thread draw come from a stream of `seed` instead of the OS (identity keys
/// stay the OS's: they change bytes, never sizes or times). A newer guard restarts
/// the stream from its own seed; once the last one drops, numbers come from the OS
/// again (so guards may drop in any order). Simulations only (`sim`): nothing secret
/// may come from it.
#[cfg(any(test, feature = "sim"))]
pub struct SeededNumbers(());

#[cfg(any(test, feature = "sim"))]
impl SeededNumbers {
    /// Numbers from `seed` on this thread until the last guard drops.
    pub fn new(seed: u64) -> SeededNumbers {
        SEEDED.with(|s| {
            let mut s = s.borrow_mut();
            *s = (s.0 + 1, Some(Rng::splitmix(seed)));
        });
        SeededNumbers(())
    }
}

#[cfg(any(test, feature = "sim"))]
impl Drop for SeededNumbers {
    fn drop(&mut self) {
        SEEDED.with(|s| {
            let mut s = s.borrow_mut();
            s.0 -= 1;
            if s.0 == 0 {
                s.1 = None;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_numbers_repeat_by_seed_and_end_with_the_last_guard() {
        let draw = || (0..4).map(|_| seeded_u64().unwrap()).collect::<Vec<_>>();
        assert_eq!(seeded_u64(), None, "the OS's by default");
        let a = SeededNumbers::new(5);
        let first = draw();
        let b = SeededNumbers::new(5);
        assert_eq!(draw(), first, "a new guard restarts the stream");
        drop(a);
        assert!(seeded_u64().is_some(), "another guard still lives");
        drop(b);
        assert_eq!(seeded_u64(), None);
    }
}
