//! The image archive scripts/build-image.sh builds (an OCI image index: linux/amd64, linux/arm64 and an SBOM
//! attestation per image), unpacked for the tests, and the supply-chain tools of `scripts/install-deps.sh
//! --tools` that read it.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Set to 1 to skip the image tests (for a checkout without the image build's packages).
pub const SKIP_ENV: &str = "KPRS_SKIP_IMAGE_TESTS";
/// The platforms of the index, in index order.
pub const ARCHS: [&str; 2] = ["amd64", "arm64"];

/// The cargo target directory (`target/`, or `$CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf()
}

/// `target/image/`: the archive, its summary, the SBOMs and package lists.
pub fn image_dir() -> PathBuf {
    target_dir().join("image")
}

/// `target/image/kube-proxy-rs.oci.tar`.
pub fn archive() -> PathBuf {
    image_dir().join("kube-proxy-rs.oci.tar")
}

/// The name scripts/build-image.sh gives the index.
pub fn image_ref() -> String {
    format!(
        "docker.io/library/kube-proxy-rs:{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// False (with a note) when opted out; panics when the image is missing.
pub fn image_required(test: &str) -> bool {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        println!("SKIP {test}: {SKIP_ENV}=1");
        return false;
    }
    assert!(
        archive().is_file(),
        "{test}: image archive {} missing: run scripts/build-release.sh amd64 arm64 && scripts/build-image.sh \
         (scripts/test.sh does), or set {SKIP_ENV}=1 to skip the image tests",
        archive().display()
    );
    true
}

/// A supply-chain tool of `scripts/install-deps.sh --tools` (target/tools/bin, else PATH); panics when missing.
pub fn tool(name: &str) -> PathBuf {
    let local = target_dir().join("tools/bin").join(name);
    if local.is_file() {
        return local;
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    on_path.unwrap_or_else(|| {
        panic!("{name} not found in target/tools/bin or PATH: run scripts/install-deps.sh --tools")
    })
}

/// Runs a command that must succeed; returns its output.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// stdout and stderr of an output, as one string.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn json_file(p: &Path) -> Value {
    let text = std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The blob a descriptor points to, under an unpacked archive.
pub fn blob(dir: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().expect("digest");
    dir.join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// The archive unpacked (outer tar only) into `dir`; returns the image index the layout's index.json names
/// (checked: one entry, an image index, named [`image_ref`]).
pub fn unpack_archive(dir: &Path) -> Value {
    std::fs::create_dir_all(dir).expect("mkdir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive())
        .arg("-C")
        .arg(dir));
    let top = json_file(&dir.join("index.json"));
    let entries = top["manifests"].as_array().expect("index.json manifests");
    assert_eq!(entries.len(), 1, "index.json names one image index: {top}");
    let entry = &entries[0];
    assert_eq!(
        entry["mediaType"], "application/vnd.oci.image.index.v1+json",
        "index.json points to an image index"
    );
    assert_eq!(
        entry["annotations"]["io.containerd.image.name"],
        image_ref().as_str()
    );
    json_file(&blob(dir, entry))
}

/// The descriptor of the linux/`arch` image in the image index.
pub fn platform_entry<'a>(index: &'a Value, arch: &str) -> &'a Value {
    let entries = index["manifests"].as_array().expect("index manifests");
    let found: Vec<&Value> = entries
        .iter()
        .filter(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == arch)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one linux/{arch} image in the index: {index}"
    );
    found[0]
}

/// One platform of an unpacked archive: (manifest, config, root file system unpacked from every layer in
/// order into `dir/rootfs-<arch>`).
pub fn unpack_platform(dir: &Path, index: &Value, arch: &str) -> (Value, Value, PathBuf) {
    let manifest = json_file(&blob(dir, platform_entry(index, arch)));
    let config = json_file(&blob(dir, &manifest["config"]));
    let rootfs = dir.join(format!("rootfs-{arch}"));
    std::fs::create_dir_all(&rootfs).expect("mkdir rootfs");
    for layer in manifest["layers"].as_array().expect("layers") {
        run(Command::new("tar")
            .arg("-xzf")
            .arg(blob(dir, layer))
            .arg("-C")
            .arg(&rootfs));
    }
    (manifest, config, rootfs)
}

/// The ELF machine of an executable (`e_machine`: 62 x86-64, 183 AArch64).
pub fn elf_machine(path: &Path) -> u16 {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(&data[..4], b"\x7fELF", "{} is not ELF", path.display());
    u16::from_le_bytes([data[18], data[19]])
}

/// The ELF machine number of an architecture of the index.
pub fn machine_of(arch: &str) -> u16 {
    match arch {
        "amd64" => 62,
        "arm64" => 183,
        other => panic!("no ELF machine for {other}"),
    }
}
