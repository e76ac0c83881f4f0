//! The long fuzz run: `cargo bench --bench fuzz -- [CASES] [SEED] [TARGET-FILTER]` (or `scripts/fuzz.sh`).
//! Prints one line per target, `fuzz: TARGET cases N panics P seconds T`, and exits non-zero if any case
//! failed (each failure is printed with its case number and input, replayable with the same seed).

#[path = "../tests/common/fuzz/mod.rs"]
mod fuzz;

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
    println!("fuzz: seed {seed} cases per target {cases}");
    let corpus = fuzz::Corpus::load();
    let mut failures = 0;
    for t in fuzz::TARGETS
        .iter()
        .filter(|t| filter.is_none_or(|f| t.name.contains(f)))
    {
        let r = fuzz::run_target(t, &corpus, seed, cases);
        println!(
            "{}  ({:.0} cases/s, slowest case {} {:?})",
            r.line(),
            r.cases as f64 / r.seconds.max(1e-9),
            r.slowest.0,
            r.slowest.1
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
