//! The UML harness itself: a missing kernel fails a UML test unless `KPRS_SKIP_UML=1` opts out, and the
//! opt-out says loudly that nothing was tested. Runs this binary's `probe` test in a child process with
//! the kernel path pointed at a file that does not exist (no kernel boots).
mod common {
    pub mod uml;
}

use common::uml::{self, BootOptions};
use std::process::{Command, Output};

/// A UML test whose body would pass; only run through [`run_probe`].
#[test]
#[ignore = "run by the tests below in a child process with a bogus kernel path"]
fn probe() {
    uml::run("probe", BootOptions::default(), || {});
}

/// Runs `probe` (output captured, as in a normal run) with a kernel path that does not exist and
/// `KPRS_SKIP_UML` set to `skip` (or unset).
fn run_probe(skip: Option<&str>) -> Output {
    let missing = common::uml::run_dir("missing-kernel").join("no-such-linux");
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        "--exact",
        "probe",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(uml::KERNEL_ENV, &missing)
    .env_remove(uml::SKIP_ENV)
    .env_remove(uml::GUEST_ENV);
    if let Some(v) = skip {
        cmd.env(uml::SKIP_ENV, v);
    }
    cmd.output().expect("run the probe")
}

#[test]
fn missing_kernel_fails() {
    for skip in [None, Some(""), Some("0"), Some("yes")] {
        let out = run_probe(skip);
        let all = uml::output_text(&out);
        assert!(!out.status.success(), "{skip:?}: the probe passed:\n{all}");
        assert!(
            all.contains("cannot run") && all.contains("no-such-linux"),
            "{skip:?}: no reason given:\n{all}"
        );
        assert!(
            all.contains("KPRS_SKIP_UML=1"),
            "{skip:?}: opt-out not named:\n{all}"
        );
        assert!(all.contains("1 failed"), "{skip:?}: {all}");
    }
}

#[test]
fn missing_kernel_with_opt_out_passes_loudly() {
    let out = run_probe(Some("1"));
    let all = uml::output_text(&out);
    assert!(out.status.success(), "the opted-out probe failed:\n{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NOT TESTED: UML test probe did not run")
            && stderr.contains("no-such-linux"),
        "no loud notice on stderr:\n{all}"
    );
    assert!(all.contains("1 passed"), "{all}");
}
