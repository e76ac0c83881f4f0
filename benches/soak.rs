//! Chaos soak of the real daemon on a real kernel (issue 13, §1).
//!
//! `cargo bench --bench soak -- [MINUTES] [SEED] [SERVICES]` (or `scripts/soak.sh [minutes] [seed]`) boots
//! ONE User-Mode Linux guest; inside it the test API server holds a few hundred Services of every kind the
//! planner handles, churned at a fixed rate by a seeded RNG, the release `kube-proxy` programs the kernel,
//! a client network namespace sends TCP and UDP requests to stable Services, and faults are injected at
//! seeded random points (kill -9, watch cut, 410 Gone, API server down, another tool deleting or changing
//! our IPVS / ipset / iptables / address state, foreign objects, a set of ours replaced by one of the wrong
//! type, and such a set held by another tool's rule so that every sync fails until the rule goes: the
//! failure counter must move, `/healthz` turn 503 once a queued change is pending for 2 × syncPeriod and
//! 200 again after). Every fifth churned Service is IPv6 and one stable IPv6 Service gets traffic. After every fault the kernel must come back to the expected state within syncPeriod + margin;
//! how that state is established (the oracle) is described in `tests/common/soak.rs`. Figures are printed
//! and written to `soak-results.txt` in the run directory; the last line is machine-readable:
//! `soak: minutes M seed S faults F recovered R requests_sent N requests_failed X foreign_touched 0`.
//! The bench exits non-zero when a check failed.
#[path = "../tests/common/mod.rs"]
mod common;

use common::soak::{Params, run};
use std::time::{Duration, SystemTime};

const NAME_PREFIX: &str = "soak";

fn main() {
    if common::uml::in_guest() {
        let mut args = std::env::args().skip_while(|a| a != "--exact");
        let name = args.nth(1).unwrap_or_default();
        std::process::exit(guest(&name));
    }
    let nums: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let minutes: f64 = nums.first().and_then(|a| a.parse().ok()).unwrap_or(10.0);
    let seed: u64 = nums.get(1).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let services: usize = nums.get(2).and_then(|a| a.parse().ok()).unwrap_or(300);
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    // The parameters travel in the boot's name (the guest runs this binary with `--exact NAME`).
    let name = format!("{NAME_PREFIX}_m{minutes}_s{seed}_n{services}_{stamp}");
    println!(
        "soak: {minutes} minutes, seed {seed}, {services} churned Services; progress: tail -f {}/uml-runs/{name}-*/guest-output.log",
        env!("CARGO_TARGET_TMPDIR")
    );
    let budget = Duration::from_secs_f64(minutes * 60.0 + 900.0);
    let run_result = std::panic::catch_unwind(|| {
        common::uml::run(
            &name,
            common::uml::BootOptions {
                mem: "1G",
                timeout: budget,
            },
            || {},
        )
    });
    let dir = common::uml::find_run_dir(&name);
    if let Some(f) = dir.map(|d| d.join("e2e").join("soak-results.txt")) {
        println!("results ({}):", f.display());
        print!("{}", std::fs::read_to_string(&f).unwrap_or_default());
    }
    if run_result.is_err() {
        std::process::exit(1);
    }
}

/// Inside the guest: parses the parameters from the boot's name, runs the soak, prints the figures.
fn guest(name: &str) -> i32 {
    // Fields `m<minutes>`, `s<seed>`, `n<services>` of `soak_m.._s.._n.._<stamp>` (the first that parses).
    fn field<T: std::str::FromStr>(name: &str, p: &str) -> Option<T> {
        name.split('_')
            .find_map(|w| w.strip_prefix(p)?.parse().ok())
    }
    let params = Params {
        minutes: field(name, "m").unwrap_or(10.0),
        seed: field(name, "s").unwrap_or(1),
        services: field(name, "n").unwrap_or(300),
        min_faults: 1,
        first_faults: Vec::new(),
    };
    match run(&params) {
        Ok(r) => {
            println!("{}", r.table());
            if r.failures.is_empty() && r.foreign_touched == 0 {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("soak FAILED: {e:#}");
            1
        }
    }
}
