//! Fuzz targets for every decoder and parser that reads outside input, and the loop that runs them.
//!
//! Shared by the test command (`tests/fuzz_parsers.rs`, a few thousand cases per target) and the bench
//! (`benches/fuzz.rs`, a million and more). Stable Rust only: a seeded RNG ([`fastrand`]) drives a mix of
//! structure-aware generation (valid samples built with the crate's own encoders, real `iptables-save` /
//! `ipset save` output from `tests/planner_data`, the configuration files of `config/`, the Services and
//! EndpointSlices of the planner scenario, mutated per field, and the same objects in protobuf, mutated
//! per wire field) and raw byte mutation.
//!
//! Case `i` of a run is generated from `(seed, target, i)` alone, so a failure is replayed from the three
//! numbers printed with it ([`replay`]). A case that panics is a failure; a case still running after
//! [`CASE_BOUND`] is reported as a hang by a watchdog thread; a case whose thread allocates more at once
//! than its target's [`Memory`] bound for the input's length fails (when the binary installs the counting
//! allocator of `alloc.rs`, as the test and the bench do). Targets with a deterministic work measure
//! (the watch framer's examined bytes) check it too, as the time bound that does not depend on the host.

#![allow(dead_code)]

pub mod alloc;
mod api_targets;
mod corpus;
mod explain_targets;
mod mutate;
mod targets;

// The test API server's protobuf encoder builds the protobuf samples from the JSON ones.
#[path = "../apiserver/proto.rs"]
mod proto;
#[path = "../apiserver/store.rs"]
mod store;

pub use corpus::Corpus;
pub use targets::{TARGETS, Target};

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest one case may run before the watchdog calls it a hang.
pub const CASE_BOUND: Duration = Duration::from_secs(2);

/// Outcome of running one target.
#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub cases: u64,
    /// Cases that panicked or broke a property, with their case number and message.
    pub failures: Vec<(u64, String)>,
    pub seconds: f64,
    /// The slowest case and its duration.
    pub slowest: (u64, Duration),
    /// The case that allocated the most at once, and how much (0 without the counting allocator).
    pub largest: (u64, usize),
}

impl Report {
    /// The line the bench prints: `fuzz: TARGET cases N panics P seconds T`.
    pub fn line(&self) -> String {
        format!(
            "fuzz: {} cases {} panics {} seconds {:.1}",
            self.target,
            self.cases,
            self.failures.len(),
            self.seconds
        )
    }

    /// The slowest and the largest case.
    pub fn extremes(&self) -> String {
        format!(
            "slowest case {} {:?}, largest case {} {} KiB",
            self.slowest.0,
            self.slowest.1,
            self.largest.0,
            self.largest.1 / 1024
        )
    }
}

/// The RNG of case `case` of `target` in a run seeded with `seed`.
pub fn case_rng(seed: u64, target: &str, case: u64) -> fastrand::Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in target.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    fastrand::Rng::with_seed(h ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The input case `case` of `target` gets.
pub fn input_of(t: &Target, corpus: &Corpus, seed: u64, case: u64) -> Vec<u8> {
    let mut rng = case_rng(seed, t.name, case);
    (t.generate)(&mut rng, corpus)
}

/// Runs one case: Ok, or the panic / property message.
pub fn run_case(t: &Target, input: &[u8]) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| (t.check)(input))) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string payload)")
        )),
    }
}

/// Replays one case and returns its input and outcome.
pub fn replay(t: &Target, corpus: &Corpus, seed: u64, case: u64) -> (Vec<u8>, Result<(), String>) {
    let input = input_of(t, corpus, seed, case);
    let r = run_case(t, &input);
    (input, r)
}

/// Watches a running target: if the case number stops moving for [`CASE_BOUND`], reports the case and
/// aborts the process (a hang cannot be unwound).
fn watchdog(name: &'static str, seed: u64, current: Arc<AtomicU64>, done: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut last = u64::MAX;
        let mut since = Instant::now();
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            let now = current.load(Ordering::Relaxed);
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() > CASE_BOUND {
                eprintln!(
                    "fuzz: {name} case {now} (seed {seed}) still running after {CASE_BOUND:?}: hang"
                );
                std::process::abort();
            }
        }
    });
}

/// Runs `cases` cases of `t`, seeded with `seed`.
pub fn run_target(t: &Target, corpus: &Corpus, seed: u64, cases: u64) -> Report {
    run_target_for(t, corpus, seed, cases, None)
}

/// As [`run_target`], stopping early once `budget` has passed (the report says how many cases ran).
pub fn run_target_for(
    t: &Target,
    corpus: &Corpus,
    seed: u64,
    cases: u64,
    budget: Option<Duration>,
) -> Report {
    let current = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    watchdog(t.name, seed, current.clone(), done.clone());
    let start = Instant::now();
    let counting = alloc::installed();
    let mut failures = Vec::new();
    let mut slowest = (0, Duration::ZERO);
    let mut largest = (0, 0);
    let mut ran = 0;
    for case in 0..cases {
        if case % 1024 == 0 && budget.is_some_and(|b| start.elapsed() > b) {
            break;
        }
        ran = case + 1;
        current.store(case, Ordering::Relaxed);
        let input = input_of(t, corpus, seed, case);
        let base = alloc::current();
        alloc::reset_peak();
        let t0 = Instant::now();
        let mut r = run_case(t, &input);
        let took = t0.elapsed();
        let used = alloc::peak_since_reset(base);
        if took > slowest.1 {
            slowest = (case, took);
        }
        if used > largest.1 {
            largest = (case, used);
        }
        let bound = t.memory.bound(input.len());
        if r.is_ok() && counting && used > bound {
            r = Err(format!(
                "took {used} bytes of memory at once for {} input bytes (bound {bound})",
                input.len()
            ));
        }
        if let Err(e) = r {
            failures.push((case, format!("{e}; input {}", escape(&input))));
        }
    }
    done.store(true, Ordering::Relaxed);
    Report {
        target: t.name,
        cases: ran,
        failures,
        seconds: start.elapsed().as_secs_f64(),
        slowest,
        largest,
    }
}

/// Input bytes as a Rust byte-string literal, for regression tests.
pub fn escape(input: &[u8]) -> String {
    let mut s = String::from("b\"");
    for &b in input.iter().take(4096) {
        s.extend(std::ascii::escape_default(b).map(char::from));
    }
    if input.len() > 4096 {
        s.push_str("...");
    }
    s.push('"');
    s
}

/// Runs every target (or those whose name contains `filter`) and returns the reports.
pub fn run_all(seed: u64, cases: u64, filter: Option<&str>) -> Vec<Report> {
    let corpus = Corpus::load();
    TARGETS
        .iter()
        .filter(|t| filter.is_none_or(|f| t.name.contains(f)))
        .map(|t| run_target(t, &corpus, seed, cases))
        .collect()
}
