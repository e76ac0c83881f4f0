//! Files a test writes, in its binary's own directory under cargo's `CARGO_TARGET_TMPDIR`. Standalone, so a
//! test binary takes it alone: `#[path = "common/files.rs"] pub mod files;`.

use std::path::PathBuf;

/// Writes `content` to `<CARGO_TARGET_TMPDIR>/<test binary>/<pid>-<name>`; its path.
pub fn tmp_file(name: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).expect("create the test's directory");
    let path = dir.join(format!("{}-{name}", std::process::id()));
    std::fs::write(&path, content).expect("write the test file");
    path
}
