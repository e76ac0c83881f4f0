//! Link settings for the daemon binary (issue 14 item 3: the binary's resident pages), and the
//! compiler's version for `kubernetes_build_info` and `/statusz`.
//!
//! `-z pack-relative-relocs` stores the position-independent executable's relative relocations as a compact
//! bitmap (DT_RELR, glibc ≥ 2.36) instead of 24-byte RELA entries: the loader reads ~700 KB less at start,
//! pages that otherwise stay resident for the process's life. Binaries only (the tests and benches link as
//! before); the linker must be GNU ld ≥ 2.38 or lld ≥ 15.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    println!("cargo:rustc-env=KPRS_RUSTC_VERSION={}", rustc_version());
}

/// `rustc 1.91.1` from `$RUSTC -V` (the first two words), or `rustc` when it cannot be run.
fn rustc_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "rustc".to_string())
}
