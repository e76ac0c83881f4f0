//! The image index of scripts/build-image.sh: one linux/amd64 and one linux/arm64 image, each with the
//! binary of its architecture and the labels, and the arm64 image's programs run under qemu-user.
//!
//! - `index_holds_an_amd64_and_an_arm64_image` (host): the index lists exactly the two platforms (plus one
//!   SBOM attestation per image, checked in tests/image_sbom.rs); each config says its architecture; each
//!   image's kube-proxy, iptables, ipset and modprobe are ELF executables of that architecture; the
//!   org.opencontainers.image.* labels (and the index's annotations) say source, version, revision and
//!   license, as Cargo.toml and git do; the repository's LICENSE is in each image.
//! - `arm64_image_runs_under_qemu` (host): the arm64 root file system as a `chroot`, every program run by
//!   `qemu-aarch64-static` copied into it (named explicitly: no binfmt_misc registration is needed or made):
//!   `kube-proxy --version`, `--write-config-to` (the same text as the amd64 image's binary writes), a rejected
//!   configuration exiting non-zero with the field named, and the image's own iptables (legacy and nft save
//!   and restore), ipset and modprobe (which resolves a module's dependencies from a real modules.dep.bin). The same binary
//!   run without the emulator does not start (ENOEXEC): what ran really was aarch64 code.
//!
//! Not covered here, nor anywhere without an arm64 kernel: the arm64 binary's netlink, iptables and ipset
//! writes to a kernel (qemu-user passes only NETLINK_ROUTE sockets through) and the image under containerd on
//! an arm64 node. The amd64 image runs under containerd in tests/e2e_image.rs.
mod common {
    pub mod image;
    pub mod uml;
}

use common::image::{
    self, ARCHS, elf_machine, image_required, machine_of, run, text, unpack_archive,
    unpack_platform,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BINARY: &str = "/usr/local/bin/kube-proxy";
/// Where the emulator is copied inside the arm64 root file system.
const QEMU_IN_ROOTFS: &str = "/qemu-aarch64-static";
const QEMU: &str = "/usr/bin/qemu-aarch64-static";
/// The UML kernel's module tree (package user-mode-linux): a real depmod index for modprobe to read.
const UML_MODULES: &str = "/usr/lib/uml/modules";

fn cargo_toml_field(key: &str) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("read Cargo.toml");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("Cargo.toml has no {key}"))
        .trim_matches('"')
        .to_string()
}

fn git_head() -> String {
    let out = run(Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR")));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn index_holds_an_amd64_and_an_arm64_image() {
    if !image_required("index_holds_an_amd64_and_an_arm64_image") {
        return;
    }
    let dir = common::uml::run_dir("image_index");
    let index = unpack_archive(&dir);
    let platforms: Vec<String> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or("?"),
                m["platform"]["architecture"].as_str().unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(
        platforms,
        [
            "linux/amd64",
            "linux/arm64",
            "unknown/unknown",
            "unknown/unknown"
        ],
        "the index: two images, then their attestations"
    );
    let expected_labels = [
        (
            "org.opencontainers.image.source",
            cargo_toml_field("repository"),
        ),
        (
            "org.opencontainers.image.version",
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("org.opencontainers.image.revision", git_head()),
        (
            "org.opencontainers.image.licenses",
            cargo_toml_field("license"),
        ),
    ];
    for (key, want) in &expected_labels {
        assert_eq!(
            index["annotations"][key],
            want.as_str(),
            "index annotation {key}"
        );
    }
    for arch in ARCHS {
        let (_, config, rootfs) = unpack_platform(&dir, &index, arch);
        assert_eq!(config["architecture"], arch);
        assert_eq!(config["os"], "linux");
        for (key, want) in &expected_labels {
            assert_eq!(
                config["config"]["Labels"][key],
                want.as_str(),
                "{arch} label {key}"
            );
        }
        let license = std::fs::read(rootfs.join("usr/share/doc/kube-proxy-rs/LICENSE"))
            .unwrap_or_else(|e| panic!("{arch} image: /usr/share/doc/kube-proxy-rs/LICENSE: {e}"));
        let repo_license =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/LICENSE")).expect("LICENSE");
        assert!(
            license == repo_license,
            "{arch} image: LICENSE differs from the repository's"
        );
        for program in [
            BINARY,
            "/usr/sbin/xtables-legacy-multi",
            "/usr/sbin/xtables-nft-multi",
            "/usr/sbin/ipset",
            "/bin/kmod",
        ] {
            let path = rootfs.join(program.trim_start_matches('/'));
            assert_eq!(
                elf_machine(&path),
                machine_of(arch),
                "{arch} image: {program} is not an {arch} executable"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The arm64 root file system of a freshly unpacked archive, with the emulator copied in.
fn arm64_rootfs(dir: &Path) -> PathBuf {
    assert!(
        Path::new(QEMU).is_file(),
        "{QEMU} missing: scripts/install-deps.sh --tools installs qemu-user-static"
    );
    let index = unpack_archive(dir);
    let (_, _, rootfs) = unpack_platform(dir, &index, "arm64");
    std::fs::copy(QEMU, rootfs.join(QEMU_IN_ROOTFS.trim_start_matches('/'))).expect("copy qemu");
    rootfs
}

/// Runs an arm64 program of the image in its root file system under the emulator.
fn qemu(rootfs: &Path, argv: &[&str]) -> Output {
    Command::new("chroot")
        .arg(rootfs)
        .arg(QEMU_IN_ROOTFS)
        .args(argv)
        .output()
        .expect("chroot")
}

/// Like [`qemu`], and the program must succeed; returns its output text.
fn qemu_ok(rootfs: &Path, argv: &[&str]) -> String {
    let out = qemu(rootfs, argv);
    assert!(
        out.status.success(),
        "{argv:?} under qemu failed ({}):\n{}",
        out.status,
        text(&out)
    );
    text(&out)
}

/// The text `--write-config-to` writes, with the binary run by `runner` (a chroot command prefix).
fn written_config(rootfs: &Path, runner: &[&str]) -> String {
    let _ = std::fs::remove_file(rootfs.join("tmp/written.yaml"));
    let mut argv: Vec<&str> = runner.to_vec();
    argv.extend([BINARY, "--write-config-to", "/tmp/written.yaml"]);
    run(Command::new("chroot").arg(rootfs).args(&argv));
    std::fs::read_to_string(rootfs.join("tmp/written.yaml")).expect("written config")
}

#[test]
fn arm64_image_runs_under_qemu() {
    if !image_required("arm64_image_runs_under_qemu") {
        return;
    }
    let dir = common::uml::run_dir("image_arm64_qemu");
    let rootfs = arm64_rootfs(&dir);

    // Really aarch64: without the emulator the kernel refuses it with ENOEXEC (unless the host itself
    // registered qemu in binfmt_misc, which this test neither needs nor does); chroot's execvp then retries
    // through /bin/sh, which the image does not have: exit 127, "No such file or directory".
    if !Path::new("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists() {
        let direct = Command::new("chroot")
            .arg(&rootfs)
            .args([BINARY, "--version"])
            .output()
            .expect("chroot");
        assert_eq!(
            direct.status.code(),
            Some(127),
            "an arm64 binary ran natively?\n{}",
            text(&direct)
        );
        assert!(
            !text(&direct).contains(env!("CARGO_PKG_VERSION")),
            "{}",
            text(&direct)
        );
    }

    let version = qemu_ok(&rootfs, &[BINARY, "--version"]);
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");

    // --write-config-to: the arm64 binary writes exactly what the amd64 one writes.
    let arm64 = written_config(&rootfs, &[QEMU_IN_ROOTFS]);
    let index = image::json_file(&dir.join("index.json"));
    let index = image::json_file(&image::blob(&dir, &index["manifests"][0]));
    let (_, _, amd64_rootfs) = unpack_platform(&dir, &index, "amd64");
    let amd64 = written_config(&amd64_rootfs, &[]);
    assert!(arm64.contains("kind: KubeProxyConfiguration"), "{arm64}");
    assert_eq!(
        arm64, amd64,
        "--write-config-to differs between the arm64 and amd64 binaries"
    );

    // A rejected configuration: non-zero exit, the field named.
    std::fs::write(
        rootfs.join("tmp/bad.yaml"),
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n\
         detectLocalMode: Magic\n",
    )
    .expect("write bad config");
    let out = qemu(&rootfs, &[BINARY, "--config", "/tmp/bad.yaml"]);
    assert!(
        !out.status.success(),
        "bad config accepted:\n{}",
        text(&out)
    );
    assert!(
        text(&out).contains("detectLocalMode"),
        "field not named:\n{}",
        text(&out)
    );

    // The image's own tools, arm64 builds from Debian, with the image's libraries: the save/restore programs
    // the daemon runs, both variants (`iptables-nft --version` itself opens a NETLINK_NETFILTER socket first,
    // which qemu-user does not pass through: "Failed to initialize nft: Protocol not supported").
    for tool in ["iptables", "ip6tables"] {
        let legacy = qemu_ok(&rootfs, &[&format!("/usr/sbin/{tool}-legacy"), "--version"]);
        assert!(legacy.contains("(legacy)"), "{legacy}");
        for variant in ["legacy", "nft"] {
            for program in ["save", "restore"] {
                let path = format!("/usr/sbin/{tool}-{variant}-{program}");
                let out = qemu_ok(&rootfs, &[&path, "-V"]);
                let want = if variant == "nft" {
                    "(nf_tables)"
                } else {
                    "(legacy)"
                };
                assert!(out.contains(want), "{path} -V: {out}");
            }
        }
    }
    // `ipset --version` also asks the kernel for its protocol (NETLINK_NETFILTER again); `ipset help` lists
    // the set types libipset knows, the ones kube-proxy's sets use among them.
    let help = qemu_ok(&rootfs, &["/usr/sbin/ipset", "help"]);
    for set_type in [
        "hash:ip,port",
        "hash:ip,port,ip",
        "hash:ip,port,net",
        "hash:net",
        "bitmap:port",
    ] {
        assert!(
            help.contains(&format!("{set_type}\t")),
            "ipset help lacks {set_type}:\n{help}"
        );
    }
    assert!(qemu_ok(&rootfs, &["/sbin/modprobe", "--version"]).contains("kmod version"));
    modprobe_resolves_dependencies(&rootfs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The image's modprobe reads a real depmod index (the UML kernel's: its modules.* files and the modules
/// ip_vs_rr needs, copied into the root file system) and names ip_vs_rr's dependencies in load order: the
/// logic the DaemonSet's module loading runs, minus the kernel's insmod.
fn modprobe_resolves_dependencies(rootfs: &Path) {
    let release = std::fs::read_dir(UML_MODULES)
        .unwrap_or_else(|e| panic!("{UML_MODULES}: {e} (package user-mode-linux)"))
        .flatten()
        .find(|e| e.path().join("modules.dep.bin").is_file())
        .expect("a UML module tree with modules.dep.bin")
        .file_name();
    let release = release.to_string_lossy().into_owned();
    let src = Path::new(UML_MODULES).join(&release);
    let modules = rootfs.join("tmp/modules/lib/modules").join(&release);
    std::fs::create_dir_all(&modules).expect("mkdir modules");
    for entry in std::fs::read_dir(&src).expect("read modules").flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("modules.") {
            std::fs::copy(entry.path(), modules.join(&name)).expect("copy module index");
        }
    }
    let deps = std::fs::read_to_string(src.join("modules.dep")).expect("modules.dep");
    let line = deps
        .lines()
        .find(|l| l.starts_with("kernel/net/netfilter/ipvs/ip_vs_rr.ko:"))
        .expect("ip_vs_rr in modules.dep");
    for rel in line.split_whitespace().map(|f| f.trim_end_matches(':')) {
        let dst = modules.join(rel);
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
        std::fs::copy(src.join(rel), dst).expect("copy module");
    }
    let out = qemu_ok(
        rootfs,
        &[
            "/sbin/modprobe",
            "-d",
            "/tmp/modules",
            "-S",
            &release,
            "--show-depends",
            "ip_vs_rr",
        ],
    );
    let insmods: Vec<&str> = out
        .lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with("insmod "))
        .collect();
    let expected = line.split_whitespace().count();
    assert_eq!(
        insmods.len(),
        expected,
        "modprobe --show-depends ip_vs_rr:\n{out}"
    );
    assert!(
        insmods.iter().any(|l| l.ends_with("/ip_vs.ko"))
            && insmods.last().is_some_and(|l| l.ends_with("/ip_vs_rr.ko")),
        "modprobe --show-depends ip_vs_rr:\n{out}"
    );
}
