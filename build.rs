//! Link settings for the daemon binary (issue 14 item 3: the binary's resident pages).
//!
//! `-z pack-relative-relocs` stores the position-independent executable's relative relocations as a compact
//! bitmap (DT_RELR, glibc ≥ 2.36) instead of 24-byte RELA entries: the loader reads ~700 KB less at start,
//! pages that otherwise stay resident for the process's life. Binaries only (the tests and benches link as
//! before); the linker must be GNU ld ≥ 2.38 or lld ≥ 15.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
}
