//! A bounded, deterministic mutation fuzzer that runs on the stable toolchain under
//! `cargo test` (cargo-fuzz needs nightly and libFuzzer, which CI does not have).
//!
//! Each target starts from its seed corpus in `tests/fuzz/<target>/` (checked in) and feeds
//! the target `iterations` inputs, each a corpus entry with 1–4 random mutations (bit flips,
//! byte sets, "interesting" values, inserts, deletes, duplicated runs, splices with another
//! entry, truncation). There is no coverage feedback: it finds what random mutation of
//! realistic input finds, which for these parsers (length fields, separators, nesting) is
//! most of what matters; the coverage-guided libFuzzer targets in `fuzz/` (nightly) go
//! further over the same [`targets`].
//!
//! A panic is caught, the input is written to `tests/fuzz/crashes/<target>-<n>` and the
//! run fails naming it. The count of executions is returned (docs/BENCHMARKS.md records
//! long runs: `VIGIL_FUZZ_ITERS=10000000 cargo test --release -p vigil-tests --test fuzz`).

pub mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Iterations per target: `VIGIL_FUZZ_ITERS`, else a short run fit for every `cargo test`.
pub fn iterations() -> u64 {
    std::env::var("VIGIL_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn corpus_dir(target: &str) -> PathBuf {
    crate::workspace().join("tests/fuzz").join(target)
}

/// The seed corpus of `target` (every file of its directory).
pub fn corpus(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("seed corpus of {target}: {e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(p).expect("read seed"))
        .collect();
    assert!(!seeds.is_empty(), "{target}: empty seed corpus");
    seeds
}

/// xorshift64*: deterministic per target, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'\r', b'\n', b'$', b'"', b',', b'=', b':',
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 if len > 0 => {
                let i = rng.below(len);
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(16));
                input.drain(at..at + n);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                let run: Vec<u8> = input[at..at + n].to_vec();
                let to = rng.below(input.len() + 1);
                input.splice(to..to, run);
            }
            6 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let n = 1 + rng.below((other.len() - from).min(64));
                    let to = rng.below(input.len() + 1);
                    input.splice(to..to, other[from..from + n].iter().copied());
                }
            }
            _ => {
                let keep = rng.below(len + 1);
                input.truncate(keep);
            }
        }
    }
}

/// Runs `target` over its seeds and `iterations` mutations of them. Returns the executions.
pub fn run(target: &str, iterations: u64, mut f: impl FnMut(&[u8])) -> u64 {
    let seeds = corpus(target);
    let seed = target.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    let mut rng = Rng(seed | 1);
    let mut execs = 0u64;
    let mut input = Vec::new();
    let mut exec = |data: &[u8], execs: &mut u64| {
        *execs += 1;
        if catch_unwind(AssertUnwindSafe(|| f(data))).is_err() {
            let dir = crate::workspace().join("tests/fuzz/crashes");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{target}-{execs}"));
            let _ = std::fs::write(&path, data);
            panic!("{target}: crash on input saved as {}", path.display());
        }
    };
    for s in &seeds {
        exec(s, &mut execs);
    }
    for _ in 0..iterations {
        input.clear();
        input.extend_from_slice(&seeds[rng.below(seeds.len())]);
        mutate(&mut rng, &seeds, &mut input);
        exec(&input, &mut execs);
    }
    execs
}
