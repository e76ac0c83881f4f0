//! The long fuzz run: `cargo bench --bench fuzz -- [CASES] [SEED] [TARGET-FILTER]` (or `scripts/fuzz.sh`).
//! `FUZZ_SECONDS=S` stops each target after S seconds (the line then shows the cases reached).
//! TARGET-FILTER is a comma-separated list of name parts. Prints one line per target, `fuzz: TARGET cases N panics P seconds T`, and exits non-zero if any case
//! failed (each failure is printed with its case number and input, replayable with the same seed).

#[path = "../tests/common/fuzz/mod.rs"]
mod fuzz;

// Counts each case's memory (per thread), for the targets' memory bounds.
#[global_allocator]
static ALLOC: fuzz::alloc::Counting = fuzz::alloc::Counting;

fn main() {
    // `cargo bench` passes `--bench`; take positional numbers only.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let cases: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let filter = args.get(2).map(String::as_str);
    let budget = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(std::time::Duration::from_secs);
    println!("fuzz: seed {seed} cases per target {cases}");
    // Failures are reported with their message and input; the default hook would print each backtrace.
    std::panic::set_hook(Box::new(|_| {}));
    let corpus = fuzz::Corpus::load();
    let mut failures = 0;
    for t in fuzz::TARGETS
        .iter()
        .filter(|t| filter.is_none_or(|f| f.split(',').any(|f| t.name.contains(f))))
    {
        let r = fuzz::run_target_for(t, &corpus, seed, cases, budget);
        println!(
            "{}  ({:.0} cases/s, {})",
            r.line(),
            r.cases as f64 / r.seconds.max(1e-9),
            r.extremes()
        );
        for (case, msg) in r.failures.iter().take(5) {
            println!("  {} case {case}: {msg}", r.target);
        }
        failures += r.failures.len();
    }
    if failures > 0 {
        std::process::exit(1);
    }
}
