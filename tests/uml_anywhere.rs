//! It runs from any checkout: the UML guest mounts a private tmpfs on `/tmp`, which used to hide a
//! checkout under `/tmp` (its binaries and run directories) from the guest, so every kernel test and
//! `scripts/demo.sh` failed there (`cd: …/uml-runs/demo-…: No such file or directory`). The guest now
//! binds the host's directories that hold the binary, the run directory and the sources back into its
//! `/tmp`, and keeps the rest of `/tmp` private.
//!
//! Both tests copy what they run to a fresh directory under the host's `/tmp`, as a checkout there
//! would have it:
//! - this test binary itself, run with its run directories under `/tmp` ([`uml::RUNS_ENV`]): the guest
//!   sees its run directory (writes a file the host reads back) and its binary, and still does not see
//!   the rest of the host's `/tmp`;
//! - the demo (`target/<profile>/examples/demo` and `kube-proxy` beside it, as `cargo test` builds
//!   them): it prints PASS.
mod common {
    pub mod uml;
}

use common::uml::{self, BootOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// File the guest writes into its run directory.
const SEEN: &str = "seen-from-guest";

/// A fresh directory under the host's `/tmp`, and its sibling `<dir>-outside` with a marker file the
/// guest must not see; both removed on drop.
struct TmpCheckout(PathBuf);

impl TmpCheckout {
    fn new(what: &str) -> TmpCheckout {
        let root = PathBuf::from(format!("/tmp/kprs-anywhere-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create the /tmp checkout");
        let outside = outside_of(&root);
        std::fs::create_dir_all(&outside).expect("create the outside dir");
        std::fs::write(outside.join("marker"), "host only").expect("write the marker");
        TmpCheckout(root)
    }
}

impl Drop for TmpCheckout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(outside_of(&self.0));
    }
}

fn outside_of(root: &Path) -> PathBuf {
    PathBuf::from(format!("{}-outside", root.display()))
}

/// Copies `from` to `to` (creating its directory), executable.
fn copy_exe(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
}

/// In the guest: its run directory (under `/tmp`) and binary are there, the rest of `/tmp` is not.
#[test]
#[ignore = "run by a_checkout_under_tmp_runs_kernel_tests from a copy under /tmp"]
fn probe_under_tmp() {
    uml::run("probe_under_tmp", BootOptions::default(), || {
        let dir = uml::guest_run_dir().expect("run dir");
        assert!(dir.starts_with("/tmp/"), "{}", dir.display());
        assert!(std::env::current_exe().expect("exe").exists());
        // The checkout root is the first component under /tmp.
        let root: PathBuf = dir.components().take(3).collect();
        let marker = outside_of(&root).join("marker");
        assert!(
            !marker.exists(),
            "the host's /tmp is visible: {}",
            marker.display()
        );
        std::fs::write(dir.join(SEEN), "yes").expect("write into the run dir");
    });
}

#[test]
fn a_checkout_under_tmp_runs_kernel_tests() {
    let checkout = TmpCheckout::new("tests");
    let root = &checkout.0;
    let exe = root.join("target/debug/deps/uml_anywhere");
    copy_exe(&std::env::current_exe().expect("current_exe"), &exe);
    let runs = root.join("target/uml-runs");
    let out = Command::new(&exe)
        .args([
            "--exact",
            "probe_under_tmp",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(uml::RUNS_ENV, &runs)
        .env_remove(uml::GUEST_ENV)
        .output()
        .expect("run the probe from /tmp");
    let all = uml::output_text(&out);
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the probe failed from {}:\n{all}",
        root.display()
    );
    if uml::skip_opted_out() && !uml::kernel().exists() {
        return;
    }
    let dir = uml::find_run_dir_in(&runs, "probe_under_tmp").expect("the probe's run dir");
    assert_eq!(
        std::fs::read_to_string(dir.join(SEEN)).unwrap_or_default(),
        "yes",
        "the guest did not write into its run dir:\n{all}"
    );
}

/// `target/<profile>/examples/demo`, built by `cargo test` with the test binaries.
fn demo_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    profile.join("examples/demo")
}

fn modified(p: &Path) -> SystemTime {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

#[test]
fn the_demo_runs_from_a_checkout_under_tmp() {
    if uml::skip_opted_out() && !uml::kernel().exists() {
        eprintln!(
            "NOT TESTED: the demo from /tmp needs {}",
            uml::kernel().display()
        );
        return;
    }
    let demo = demo_binary();
    let sources = [
        "examples/demo.rs",
        "tests/common/uml.rs",
        "tests/common/e2e.rs",
    ]
    .map(|s| Path::new(env!("CARGO_MANIFEST_DIR")).join(s));
    let newest = sources.iter().map(|s| modified(s)).max().expect("sources");
    assert!(
        demo.exists() && modified(&demo) >= newest,
        "{} is missing or older than its sources: run the whole `cargo test` (it builds the \
         examples) or `cargo build --example demo` first",
        demo.display()
    );
    let checkout = TmpCheckout::new("demo");
    let root = &checkout.0;
    let copy = root.join("target/debug/examples/demo");
    copy_exe(&demo, &copy);
    copy_exe(
        Path::new(env!("CARGO_BIN_EXE_kube-proxy")),
        &root.join("target/debug/kube-proxy"),
    );
    let out = Command::new(&copy)
        .env_remove(uml::GUEST_ENV)
        .env_remove(uml::RUNS_ENV)
        .output()
        .expect("run the demo from /tmp");
    let all = uml::output_text(&out);
    assert!(
        out.status.success() && all.contains("PASS"),
        "the demo failed from {}:\n{all}",
        root.display()
    );
    assert!(!all.contains("No such file or directory"), "{all}");
}
