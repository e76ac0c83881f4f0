//! Fuzzing of every decoder and parser that reads outside input (the short run of the test command; the
//! long run is `scripts/fuzz.sh`). Targets and generators are in `tests/common/fuzz/`.
//!
//! `FUZZ_CASES` (default 3000) and `FUZZ_SEED` (default a fixed seed, so the test command is
//! reproducible) override the run.

#[path = "common/fuzz/mod.rs"]
mod fuzz;

use fuzz::{Corpus, TARGETS, run_target};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_target_survives_mutated_and_random_input() {
    let corpus = Corpus::load();
    let cases = env_u64("FUZZ_CASES", 3000);
    let seed = env_u64("FUZZ_SEED", 13);
    let mut failed = Vec::new();
    for t in TARGETS {
        let r = run_target(t, &corpus, seed, cases);
        println!(
            "{} (slowest case {} took {:?})",
            r.line(),
            r.slowest.0,
            r.slowest.1
        );
        for (case, msg) in r.failures.iter().take(3) {
            failed.push(format!("{} case {case} (seed {seed}): {msg}", r.target));
        }
    }
    assert!(failed.is_empty(), "fuzz failures:\n{}", failed.join("\n"));
}

#[test]
fn the_samples_themselves_decode() {
    // The generators start from these: they must be valid, or the fuzzing explores only error paths.
    let corpus = Corpus::load();
    assert!(corpus.services.len() >= 3 && corpus.slices.len() >= 3);
    for t in TARGETS {
        let mut rng = fuzz::case_rng(0, t.name, 0);
        let input = (t.generate)(&mut rng, &corpus);
        fuzz::run_case(t, &input).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    }
}
