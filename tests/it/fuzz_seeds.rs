//! The fuzz targets' short run, on every test run: each target's committed
//! seeds (fuzz/seeds/<target>/) and a few hundred deterministic mutations of
//! them (bit flips, byte changes, insertions, cuts, splices of two seeds) go
//! through the very bodies libFuzzer drives (fuzz/src/lib.rs, included
//! here), on the suite's own build. A target's assertion failing or
//! panicking fails the test and prints the input. Coverage-guided fuzzing
//! is scripts/fuzz's (docs/reference/testing.md says when to run it).

// The seed generator's helpers go unused here, and the harness reads its
// store's directory from the environment as the fuzz crate allows.
#[allow(dead_code, unused_imports, clippy::disallowed_methods)]
#[path = "../../fuzz/src/lib.rs"]
mod stepwell_fuzz;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Mutations of each seed, per target; `request` writes to a real store, so
/// it gets fewer.
const MUTATIONS: usize = 2000;
const REQUEST_MUTATIONS: usize = 200;

/// The seeds of `target`, in file-name order.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a seed's directory entry").path())
        .collect();
    paths.sort();
    let seeds: Vec<Vec<u8>> = paths.iter().map(|path| std::fs::read(path).expect("a seed reads")).collect();
    assert!(!seeds.is_empty(), "{target} has seeds in {}", dir.display());
    seeds
}

/// A xorshift generator: the same mutations on every run and machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `seed`, `other` the partner of a splice.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut input = seed.to_vec();
    for _ in 0..=rng.below(3) {
        let at = rng.below(input.len());
        match rng.below(6) {
            0 if !input.is_empty() => input[at] ^= 1 << rng.below(8),
            1 if !input.is_empty() => input[at] = rng.next() as u8,
            2 => input.insert(at.min(input.len()), rng.next() as u8),
            3 if !input.is_empty() => input.truncate(at),
            4 if input.len() > 1 => {
                let end = (at + 1 + rng.below(8)).min(input.len());
                input.drain(at..end);
            }
            _ => {
                let from = rng.below(other.len());
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
        }
    }
    input
}

/// Runs `body` over the seeds of `target` and `mutations` of each; panics
/// naming the first input that failed.
fn replay(target: &str, mutations: usize, body: fn(&[u8])) {
    let seeds = seeds(target);
    let mut rng = Rng(0x5eed_0f57_e9ee_0011);
    let mut inputs = seeds.clone();
    for (i, seed) in seeds.iter().enumerate() {
        for _ in 0..mutations {
            inputs.push(mutate(&mut rng, seed, &seeds[(i + 1) % seeds.len()]));
        }
    }
    for input in &inputs {
        if catch_unwind(AssertUnwindSafe(|| body(input))).is_err() {
            panic!("the {target} target failed on {} bytes: {input:?}", input.len());
        }
    }
}

#[test]
fn page_token_seeds_and_mutations() {
    replay("page_token", MUTATIONS, stepwell_fuzz::page_token);
}

#[test]
fn state_seeds_and_mutations() {
    replay("state", MUTATIONS, stepwell_fuzz::state);
}

#[test]
fn request_seeds_and_mutations() {
    let harness = stepwell_fuzz::harness();
    replay("request", REQUEST_MUTATIONS, stepwell_fuzz::request);
    std::fs::remove_dir_all(&harness.dir).expect("the store's directory is removed");
}
