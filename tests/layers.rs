//! The crate's import structure, read from the code by `scripts/layers.py`: no circle between top-level
//! modules, none between files. A circle not in [`KNOWN`] fails, and so does a listed one that is gone
//! (take it off the list), so the list only shrinks. The tool itself is checked on a planted circle first.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Circles left to remove (issue 30 §2), as `scripts/layers.py --circles` prints them.
const KNOWN: &[&str] = &[
    "files: proxier::plan, proxier::plan::incremental, proxier::plan::iptables",
    "files: proxier::reconcile, proxier::reconcile::drift, proxier::reconcile::ipvs",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/layers.py --circles` over `src`: one line per circle.
fn circles(src: &Path) -> Vec<String> {
    let out = Command::new("python3")
        .arg(root().join("scripts/layers.py"))
        .arg("--circles")
        .arg("--src")
        .arg(src)
        .output()
        .unwrap_or_else(|e| {
            panic!("python3 is needed to read the import structure (apt-get install python3): {e}")
        });
    assert!(
        out.status.success(),
        "scripts/layers.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A crate of five files in which `x::a` and `x::b` use each other (one through `super::`, the other
/// through a module a `use` bound and the re-export in `x/mod.rs`) and both use the ground floor `c`,
/// whose test code (which does not count) uses `x::a`.
fn planted_crate() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layers-planted/src");
    let files: &[(&str, &str)] = &[
        ("lib.rs", "pub mod c;\npub mod x;\n"),
        (
            "c.rs",
            "pub struct Ground;\n#[cfg(test)]\nmod tests { use crate::x::a::f; }\n",
        ),
        ("x/mod.rs", "pub mod a;\npub mod b;\npub use a::A;\n"),
        (
            "x/a.rs",
            "use crate::c::Ground;\npub struct A(pub Ground);\npub fn f() { super::b::g() }\n",
        ),
        (
            "x/b.rs",
            "use crate::x;\n// crate::x::b::g in a comment does not count\npub fn g() { let _ = x::A(crate::c::Ground); }\n",
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("a parent"))
            .expect("create the planted crate");
        std::fs::write(&path, text).expect("write the planted crate");
    }
    dir
}

#[test]
fn the_tool_finds_a_planted_circle() {
    let src = planted_crate();
    assert_eq!(circles(&src), ["files: x::a, x::b"]);
    let status = Command::new("python3")
        .arg(root().join("scripts/layers.py"))
        .args(["--check", "--src"])
        .arg(&src)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs");
    assert_eq!(
        status.code(),
        Some(1),
        "--check fails on the planted circle"
    );
}

#[test]
fn no_circle_beyond_the_known_ones() {
    let found = circles(&root().join("src"));
    let new: Vec<_> = found
        .iter()
        .filter(|c| !KNOWN.contains(&c.as_str()))
        .collect();
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|k| !found.iter().any(|c| c == *k))
        .collect();
    assert!(
        new.is_empty(),
        "new import circles (run `python3 scripts/layers.py` for the imports that close them): {new:#?}"
    );
    assert!(
        gone.is_empty(),
        "circles gone: take them off KNOWN in tests/layers.rs: {gone:#?}"
    );
}
