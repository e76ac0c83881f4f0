//! A short fixed-seed chaos soak (see `tests/common/soak.rs`): about two minutes (at least four faults) of Service churn, traffic
//! to stable Services and faults on the real daemon in a UML guest. Fails when any check fails: the kernel
//! not back to the expected state after a fault, a foreign object touched, /healthz unhealthy after
//! recovery, the daemon dead, or a request to a stable Service failing outside the faults that remove its
//! kernel objects by design. `scripts/soak.sh` runs longer soaks with any seed.
mod common;

use common::soak::{Params, run};
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
            minutes: 2.0,
            seed: 20_261_125,
            services: 160,
            min_faults: 4,
        };
        let r = run(&params).expect("soak run");
        let table = r.table();
        println!("{table}");
        assert!(r.failures.is_empty(), "failed checks:\n{table}");
        assert_eq!(r.foreign_touched, 0, "{table}");
        assert_eq!(r.failed_unexpectedly(), 0, "{table}");
        assert!(
            r.faults() >= 4,
            "too few faults in the short soak:\n{table}"
        );
        assert!(r.requests_sent > 100, "too little traffic:\n{table}");
    }
);
