//! The one random generator of the tests: splitmix64, small and seedable, so
//! that a failing run can be replayed from the seed it printed. A test binary
//! names the variable its seed is replayed from (`STEPWELL_MODEL_SEED`,
//! `STEPWELL_FAULT_SEED`); without it, the seed comes from the clock.

use std::time::Duration;

/// A seeded generator; `seed` says where it started.
#[derive(Debug, Clone)]
pub struct Rng {
    seed: u64,
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { seed, state: seed }
    }

    /// Seeded from the variable `var` if it is set, or else from the clock.
    /// A value that is not a whole number fails, so that a mistyped replay
    /// does not run some other seed unnoticed.
    pub fn from_env(var: &str) -> Rng {
        let seed = match crate::setting(var) {
            Some(text) => text.parse().unwrap_or_else(|_| panic!("{var}={text:?}: use a whole number")),
            None => stepwell::domain::clock::system_now() as u64,
        };
        Rng::new(seed)
    }

    /// The seed this generator started from, to print for a replay.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    /// A time in `low..=high` milliseconds.
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.range(low, high))
    }
}
