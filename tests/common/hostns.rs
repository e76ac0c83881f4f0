//! Tests in a private network namespace of the host's own kernel, for what the UML kernel lacks: its
//! nf_tables has no `ip`, `ip6` or `inet` family (`linux --showconfig`: CONFIG_NF_TABLES_IPV4 is not
//! set), so the nftables mode's tables cannot exist there.
//!
//! `netns_test!(name, { body })` defines a `#[test]` that re-runs this same test binary, filtered to that
//! one test, under `unshare --net` with [`GUEST_ENV`] set; the body then runs in a fresh network namespace
//! (no rules, no tables, only `lo`), so nothing of the host's own network state is read or changed. It
//! needs root (CAP_SYS_ADMIN for the namespace, CAP_NET_ADMIN in it) and the `nft` tool; without them the
//! test fails, unless [`SKIP_ENV`]`=1` opts out, in which case it says loudly that it tested nothing.
#![allow(dead_code)]

use std::io::Write;
use std::process::Command;

/// Environment variable set inside the namespace.
pub const GUEST_ENV: &str = "KPRS_NETNS_GUEST";
/// Environment variable (`1`) opting out of these tests where they cannot run.
pub const SKIP_ENV: &str = "KPRS_SKIP_NETNS";

/// True when running inside the private namespace.
pub fn in_guest() -> bool {
    std::env::var_os(GUEST_ENV).is_some()
}

/// Why the tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "not root (a network namespace and nf_tables need CAP_SYS_ADMIN/CAP_NET_ADMIN)".into(),
        );
    }
    let nft = Command::new("nft").arg("--version").output();
    if !nft.is_ok_and(|o| o.status.success()) {
        return Some(
            "the nft tool is missing (install the nftables package; scripts/install-deps.sh does)"
                .into(),
        );
    }
    None
}

/// Runs `body` in a private network namespace (or, inside it, runs it directly). `name` is the test's path
/// as libtest filters it.
pub fn run(name: &str, body: impl FnOnce()) {
    if in_guest() {
        body();
        return;
    }
    if let Some(why) = missing_prerequisite() {
        if std::env::var(SKIP_ENV).is_ok_and(|v| v.trim() == "1") {
            let bar = "!".repeat(100);
            let _ = writeln!(
                std::io::stderr(),
                "{bar}\n!!! NOT TESTED: {name} did not run ({why}); {SKIP_ENV}=1 skips it.\n{bar}"
            );
            return;
        }
        panic!("{name} cannot run: {why}. Set {SKIP_ENV}=1 to skip it explicitly.");
    }
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(GUEST_ENV, "1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("spawn unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name} failed in its network namespace ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "{name} did not run in its network namespace:\n{text}"
    );
    println!("{text}");
}

/// Defines a test whose body runs in a private network namespace: `netns_test!(name, { ... })`.
#[macro_export]
macro_rules! netns_test {
    ($name:ident, $body:block) => {
        #[test]
        fn $name() {
            let full = {
                let p = module_path!();
                match p.split_once("::") {
                    Some((_, rest)) => format!("{}::{}", rest, stringify!($name)),
                    None => stringify!($name).to_string(),
                }
            };
            $crate::common::hostns::run(&full, || $body);
        }
    };
}
