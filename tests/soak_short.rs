//! A short fixed-seed chaos soak (see `tests/common/soak.rs`): about two and a half minutes (at least three faults, 1.5 minutes of churn) of Service churn, traffic
//! to stable Services and faults on the real daemon in a UML guest. Fails when any check fails: the kernel
//! not back to the expected state after a fault, a foreign object touched, /healthz unhealthy after
//! recovery (or not unhealthy while a queued change cannot be applied), no failure counted for a failed
//! write, the daemon dead, or a request to a stable Service failing outside the faults that remove its
//! kernel objects by design. `scripts/soak.sh` runs longer soaks with any seed.
mod common;

use common::soak::{Fault, Params, run};
use common::uml::BootOptions;
use std::time::Duration;

uml_test!(
    soak_short_fixed_seed,
    BootOptions {
        mem: "1G",
        timeout: Duration::from_secs(1200),
    },
    {
        let params = Params {
            minutes: 1.5,
            seed: 20_261_125,
            services: 160,
            min_faults: 3,
            // The held wrong-type set (failure counted, /healthz 503 past the health timeout and 200
            // again) and a deleted jump (back in its place) first, then the seeded deck.
            first_faults: vec![Fault::SetInUse, Fault::IptablesDelJump],
        };
        let r = run(&params).expect("soak run");
        let table = r.table();
        println!("{table}");
        assert!(r.failures.is_empty(), "failed checks:\n{table}");
        assert_eq!(r.foreign_touched, 0, "{table}");
        assert_eq!(r.failed_unexpectedly(), 0, "{table}");
        assert!(
            r.faults() >= 3,
            "too few faults in the short soak:\n{table}"
        );
        assert!(r.requests_sent > 100, "too little traffic:\n{table}");
    }
);
