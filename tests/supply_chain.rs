//! The supply chain around the code: the dependency policy (deny.toml, cargo-deny), `--locked` builds, the
//! license, and the crate list in the shipped binary.
//!
//! - `dependency_policy_accepts_ours_and_rejects_the_rest`: cargo-deny (installed by `scripts/install-deps.sh
//!   --tools`) with deny.toml passes on this crate's graph; the same policy fails a scratch crate that depends
//!   on a GPL-3.0 crate (licenses) and on a crate named openssl (bans).
//! - `advisory_check_passes_ours_and_fails_a_known_vulnerability`: scripts/advisories.sh (cargo-deny's
//!   advisories check against the RustSec database snapshot, offline) passes on this crate's graph and fails
//!   a graph holding smallvec 1.6.0 (RUSTSEC-2021-0003). A missing snapshot fails it (KPRS_SKIP_ADVISORIES=1
//!   skips).
//! - `test_command_runs_cargo_locked`: every cargo invocation of scripts/test.sh and of the scripts it runs
//!   carries `--locked` (`cargo fmt` excepted: it resolves no dependencies and has no such flag).
//! - `license_file_matches_cargo_toml`: LICENSE is the Apache License 2.0 text that Cargo.toml declares.
//! - `release_binary_carries_its_crate_list`: the host's release binary of scripts/build-release.sh has the
//!   `.dep-v0` section cargo-auditable writes, and a scanner (syft) lists this crate and its dependencies from
//!   it. (Per image and architecture, with the SBOM: tests/image_sbom.rs.)
mod common {
    pub mod image;
    pub mod uml;
}

use common::image::{run, target_dir, text, tool};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Set to 1 to skip the tests that need the tools of `scripts/install-deps.sh --tools` (cargo-deny, syft).
const SKIP_ENV: &str = "KPRS_SKIP_SUPPLY_CHAIN_TOOLS";

fn tools_required(test: &str) -> bool {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        println!("SKIP {test}: {SKIP_ENV}=1");
        return false;
    }
    true
}

fn cargo_deny(manifest: &Path, checks: &[&str]) -> std::process::Output {
    Command::new(tool("cargo-deny"))
        .args(["--locked", "--manifest-path"])
        .arg(manifest)
        .arg("--config")
        .arg(root().join("deny.toml"))
        .args(["check", "--hide-inclusion-graph"])
        .args(checks)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo-deny")
}

/// A crate `name` with `license` (and its dependencies) under `dir`.
fn scratch_crate(dir: &Path, name: &str, license: &str, deps: &[&str]) {
    std::fs::create_dir_all(dir.join("src")).expect("mkdir");
    let deps: String = deps
        .iter()
        .map(|d| format!("{d} = {{ path = \"../{d}\", version = \"0.1.0\" }}\n"))
        .collect();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\nlicense = \"{license}\"\n\
             publish = false\n\n[dependencies]\n{deps}"
        ),
    )
    .expect("write Cargo.toml");
    std::fs::write(dir.join("src/lib.rs"), "").expect("write lib.rs");
}

#[test]
fn dependency_policy_accepts_ours_and_rejects_the_rest() {
    if !tools_required("dependency_policy_accepts_ours_and_rejects_the_rest") {
        return;
    }
    let ours = cargo_deny(&root().join("Cargo.toml"), &["licenses", "bans", "sources"]);
    assert!(
        ours.status.success(),
        "cargo deny on this crate:\n{}",
        text(&ours)
    );

    let dir = common::uml::run_dir("deny_scratch");
    scratch_crate(
        &dir.join("app"),
        "app",
        "Apache-2.0",
        &["copyleft", "openssl"],
    );
    scratch_crate(&dir.join("copyleft"), "copyleft", "GPL-3.0-only", &[]);
    scratch_crate(&dir.join("openssl"), "openssl", "Apache-2.0", &[]);
    run(Command::new(env!("CARGO"))
        .args(["generate-lockfile", "--offline", "--manifest-path"])
        .arg(dir.join("app/Cargo.toml")));
    let manifest = dir.join("app/Cargo.toml");
    let licenses = cargo_deny(&manifest, &["licenses"]);
    assert!(
        !licenses.status.success(),
        "GPL-3.0 accepted:\n{}",
        text(&licenses)
    );
    assert!(
        text(&licenses).contains("GPL-3.0-only"),
        "{}",
        text(&licenses)
    );
    let bans = cargo_deny(&manifest, &["bans"]);
    assert!(!bans.status.success(), "openssl accepted:\n{}", text(&bans));
    assert!(text(&bans).contains("openssl"), "{}", text(&bans));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scripts/advisories.sh` with extra cargo-deny options.
fn advisories(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(root().join("scripts/advisories.sh"))
        .args(args)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run scripts/advisories.sh")
}

/// The advisory check against the RustSec database snapshot (scripts/advisories.sh, offline) passes on this
/// crate's graph and fails a graph holding a crate version with a known vulnerability: smallvec 1.6.0
/// (RUSTSEC-2021-0003), a scratch crate of that name and version presented as crates.io's (cargo's metadata
/// rewritten to the registry source, so nothing is downloaded).
#[test]
fn advisory_check_passes_ours_and_fails_a_known_vulnerability() {
    if !tools_required("advisory_check_passes_ours_and_fails_a_known_vulnerability") {
        return;
    }
    if std::env::var("KPRS_SKIP_ADVISORIES").is_ok_and(|v| v == "1") {
        println!("SKIP advisory check: KPRS_SKIP_ADVISORIES=1");
        return;
    }
    let ours = advisories(&[]);
    assert!(
        ours.status.success(),
        "advisories on this crate:\n{}",
        text(&ours)
    );
    assert!(
        text(&ours).contains("RustSec advisory database: "),
        "{}",
        text(&ours)
    );

    let dir = common::uml::run_dir("advisory_scratch");
    let sv = dir.join("smallvec");
    scratch_crate(&dir.join("app"), "app", "MIT", &["smallvec"]);
    scratch_crate(&sv, "smallvec", "MIT", &[]);
    let toml = std::fs::read_to_string(sv.join("Cargo.toml")).expect("read");
    std::fs::write(sv.join("Cargo.toml"), toml.replace("0.1.0", "1.6.0")).expect("write");
    let app_toml = dir.join("app/Cargo.toml");
    let app = std::fs::read_to_string(&app_toml).expect("read");
    std::fs::write(
        &app_toml,
        app.replace("version = \"0.1.0\" }", "version = \"1.6.0\" }"),
    )
    .expect("write");
    let meta = run(Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&app_toml));
    let local_id = format!("path+file://{}#1.6.0", sv.display());
    let registry = "registry+https://github.com/rust-lang/crates.io-index";
    let mut m: serde_json::Value = serde_json::from_str(
        &String::from_utf8_lossy(&meta.stdout)
            .replace(&local_id, &format!("{registry}#smallvec@1.6.0")),
    )
    .expect("cargo metadata JSON");
    for p in m["packages"].as_array_mut().expect("packages") {
        if p["name"] == "smallvec" {
            p["source"] = serde_json::json!(registry);
        }
    }
    let meta_path = dir.join("metadata.json");
    std::fs::write(&meta_path, m.to_string()).expect("write metadata");
    let vulnerable = advisories(&[
        "--manifest-path".as_ref(),
        app_toml.as_os_str(),
        "--metadata-path".as_ref(),
        meta_path.as_os_str(),
    ]);
    assert!(
        !vulnerable.status.success(),
        "smallvec 1.6.0 accepted:\n{}",
        text(&vulnerable)
    );
    assert!(
        text(&vulnerable).contains("RUSTSEC-2021-0003"),
        "{}",
        text(&vulnerable)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scripts the test command runs (itself included), by name.
const TEST_SCRIPTS: [&str; 6] = [
    "scripts/test.sh",
    "scripts/install-deps.sh",
    "scripts/build-release.sh",
    "scripts/build-image.sh",
    "scripts/image/rootfs.sh",
    "scripts/advisories.sh",
];

#[test]
fn test_command_runs_cargo_locked() {
    let test_sh = std::fs::read_to_string(root().join("scripts/test.sh")).expect("test.sh");
    for called in [
        "install-deps.sh",
        "build-release.sh",
        "build-image.sh",
        "advisories.sh",
    ] {
        assert!(
            test_sh.contains(called),
            "scripts/test.sh no longer runs {called}: update TEST_SCRIPTS"
        );
    }
    let mut checked = 0;
    for script in TEST_SCRIPTS {
        let text = std::fs::read_to_string(root().join(script)).expect("read script");
        let joined = text.replace("\\\n", " ");
        for line in joined
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            for (i, w) in words.iter().enumerate() {
                let is_cargo =
                    *w == "cargo" || w.ends_with("/cargo-deny\"") || w.ends_with("/cargo-deny");
                let Some(sub) = words.get(i + 1) else {
                    continue;
                };
                if !is_cargo || *sub == "fmt" {
                    continue;
                }
                checked += 1;
                assert!(
                    words[i..].contains(&"--locked"),
                    "{script}: cargo invocation without --locked: {line}"
                );
            }
        }
    }
    assert!(
        checked >= 6,
        "found only {checked} cargo invocations: is the parsing still right?"
    );
}

#[test]
fn license_file_matches_cargo_toml() {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        toml.lines().any(|l| l.trim() == "license = \"Apache-2.0\""),
        "Cargo.toml declares Apache-2.0"
    );
    let license =
        std::fs::read_to_string(root().join("LICENSE")).expect("LICENSE at the repository root");
    for phrase in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(license.contains(phrase), "LICENSE lacks {phrase:?}");
    }
}

#[test]
fn release_binary_carries_its_crate_list() {
    if !tools_required("release_binary_carries_its_crate_list") {
        return;
    }
    let bin = target_dir().join("release/dist/kube-proxy");
    assert!(
        bin.is_file(),
        "{} missing: run scripts/build-release.sh (scripts/test.sh does)",
        bin.display()
    );
    let sections = run(Command::new("readelf").arg("-S").arg(&bin));
    assert!(
        String::from_utf8_lossy(&sections.stdout).contains(".dep-v0"),
        "{} has no .dep-v0 section (cargo auditable)",
        bin.display()
    );
    let out = run(Command::new(tool("syft"))
        .arg("scan")
        .arg(format!("file:{}", bin.display()))
        .args(["-o", "syft-json", "-q"])
        .env("SYFT_CHECK_FOR_APP_UPDATE", "false"));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("syft JSON");
    let crates: Vec<String> = doc["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .filter(|a| a["type"] == "rust-crate")
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .collect();
    for name in [
        env!("CARGO_PKG_NAME"),
        "kube",
        "tokio",
        "netlink-packet-route",
    ] {
        assert!(
            crates.iter().any(|c| c == name),
            "syft does not see {name} in the binary: {crates:?}"
        );
    }
}
