//! User-Mode Linux harness: runs a test body inside a real Linux kernel with IPVS.
//!
//! `uml_test!(name, { body })` defines a `#[test]`. On the host it boots `/usr/bin/linux` with an init script
//! that loads the netfilter/IPVS modules and re-runs this same test binary, filtered to that one test, inside
//! the guest with `KPRS_UML_GUEST` set; the body then runs in the guest. The guest's exit status and output
//! come back through the test's own run directory under `target/uml-runs/`.
//!
//! The guest sees the host's root file system read-write, with private tmpfs mounts on `/run` and
//! `/tmp`; the host directories under `/tmp` that hold the test binary, its run directory or the
//! sources (a checkout under `/tmp`) are bound back into the guest's `/tmp` ([`tmp_roots`]).
//!
//! A missing kernel fails the test. Whoever cannot run kernel tests opts out explicitly with
//! `KPRS_SKIP_UML=1`: a test whose kernel is missing then passes without testing anything and says so
//! loudly on stderr. `KPRS_UML_KERNEL` overrides the kernel path (the harness's own test uses it).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The UML kernel binary.
pub const KERNEL: &str = "/usr/bin/linux";

/// Environment variable overriding [`KERNEL`].
pub const KERNEL_ENV: &str = "KPRS_UML_KERNEL";

/// Environment variable (`1`) opting out of kernel tests when the kernel is missing.
pub const SKIP_ENV: &str = "KPRS_SKIP_UML";

/// The kernel to boot: [`KERNEL_ENV`] if set and not empty, else [`KERNEL`].
pub fn kernel() -> PathBuf {
    std::env::var_os(KERNEL_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(KERNEL))
}

/// Whether the person running the tests opted out of kernel tests ([`SKIP_ENV`]`=1`).
pub fn skip_opted_out() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| v.trim() == "1")
}

/// A missing kernel: panics, or with [`SKIP_ENV`]`=1` says loudly that `name` tested nothing.
fn missing_kernel(name: &str, kernel: &Path) {
    let why = format!(
        "{}: not found (install the user-mode-linux package; scripts/test.sh does)",
        kernel.display()
    );
    if !skip_opted_out() {
        panic!(
            "UML test {name} cannot run: {why}. Set {SKIP_ENV}=1 to skip kernel tests explicitly."
        );
    }
    // Straight to the process's stderr, past libtest's output capture, so it shows in a passing run too.
    let bar = "!".repeat(100);
    let _ = writeln!(
        std::io::stderr(),
        "{bar}\n!!! NOT TESTED: UML test {name} did not run ({why}); {SKIP_ENV}=1 skips it.\n!!! It passes without testing anything against a kernel.\n{bar}"
    );
}

/// Environment variable set inside the guest (its value is the run directory).
pub const GUEST_ENV: &str = "KPRS_UML_GUEST";

/// Modules loaded in every guest (missing ones are reported in the console log, not fatal).
pub const MODULES: &[&str] = &[
    "ipv6",
    "dummy",
    "veth",
    "sctp",
    "nf_conntrack",
    "nf_conntrack_netlink",
    "nf_nat",
    "ip_vs",
    "ip_vs_rr",
    "ip_vs_wrr",
    "ip_vs_lc",
    "ip_vs_wlc",
    "ip_vs_sh",
    "ip_vs_mh",
    "ip_vs_sed",
    "ip_vs_nq",
    "ip_vs_dh",
    "ip_vs_lblc",
    "ip_vs_lblcr",
    "ip_vs_fo",
    "ip_vs_ovf",
    "ip_set",
    "ip_set_hash_ip",
    "ip_set_hash_ipport",
    "ip_set_hash_ipportip",
    "ip_set_hash_ipportnet",
    "ip_set_hash_net",
    "ip_set_bitmap_port",
    "x_tables",
    "ip_tables",
    "ip6_tables",
    "xt_set",
    "xt_comment",
    "xt_mark",
    "xt_addrtype",
    "xt_MASQUERADE",
    "xt_conntrack",
    "xt_physdev",
    "xt_ipvs",
    "xt_tcpudp",
    "xt_multiport",
    "xt_sctp",
    "xt_nat",
    "ipt_REJECT",
    "ip6t_REJECT",
    "iptable_nat",
    "iptable_filter",
    "iptable_mangle",
    "ip6table_nat",
    "ip6table_filter",
    "ip6table_mangle",
];

/// True when running inside the UML guest.
pub fn in_guest() -> bool {
    std::env::var_os(GUEST_ENV).is_some()
}

/// The run directory of the current guest (inside the guest), or None on the host.
pub fn guest_run_dir() -> Option<PathBuf> {
    std::env::var_os(GUEST_ENV).map(PathBuf::from)
}

/// Options for one boot.
#[derive(Clone, Debug)]
pub struct BootOptions {
    /// Guest memory (`mem=`).
    pub mem: &'static str,
    /// Host-side limit for the whole boot.
    pub timeout: Duration,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            mem: "512M",
            timeout: Duration::from_secs(240),
        }
    }
}

/// Runs `body` in a UML guest (or, inside the guest, runs it directly). `name` is the test's path as
/// libtest filters it (`module::name` for tests in modules).
pub fn run(name: &str, opts: BootOptions, body: impl FnOnce()) {
    if in_guest() {
        body();
        return;
    }
    let kernel = kernel();
    if !kernel.exists() {
        missing_kernel(name, &kernel);
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = run_dir(name);
    let script = init_script(&exe, name, &dir);
    let init = dir.join("init.sh");
    std::fs::write(&init, script).expect("write init.sh");
    set_executable(&init);
    let console = dir.join("console.log");
    let started = Instant::now();
    let status = Command::new("timeout")
        .arg("--kill-after=5")
        .arg(format!("{}", opts.timeout.as_secs()))
        .arg(&kernel)
        .arg(format!("mem={}", opts.mem))
        .arg("root=/dev/root")
        .arg("rootfstype=hostfs")
        .arg("rootflags=/")
        .arg("rw")
        .arg(format!("init={}", init.display()))
        .arg("con=null")
        .arg("con0=fd:0,fd:1")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&console).expect("console.log"))
        .stderr(std::process::Stdio::null())
        .current_dir(&dir)
        .status()
        .expect("spawn linux");
    let elapsed = started.elapsed();
    let result = std::fs::read_to_string(dir.join("result")).unwrap_or_default();
    let output = std::fs::read_to_string(dir.join("guest-output.log")).unwrap_or_default();
    if result.trim() != "0" {
        let console_text = std::fs::read_to_string(&console).unwrap_or_default();
        panic!(
            "UML test {name} failed (guest exit {:?}, linux {status}, {elapsed:.1?})\n--- guest output ---\n{output}\n--- console (tail) ---\n{}",
            result.trim(),
            tail(&console_text, 80)
        );
    }
    println!(
        "UML test {name} passed in {elapsed:.1?} (run dir {})",
        dir.display()
    );
    if let Ok(report) = std::fs::read_to_string(dir.join(REPORT_FILE)) {
        println!("{report}");
    }
}

/// A file a guest may write into its run directory ([`guest_run_dir`]): the host prints it after a passing
/// run (figures a test reports besides its verdict).
pub const REPORT_FILE: &str = "report.txt";

/// Environment variable naming the directory to hold the run directories instead of [`runs_base`]'s
/// default (any host path: the guest is given whatever it names, `/tmp` included).
pub const RUNS_ENV: &str = "KPRS_UML_RUNS";

/// The directory holding every run's directory (`target/uml-runs/`, or [`RUNS_ENV`]).
pub fn runs_base() -> PathBuf {
    if let Some(dir) = std::env::var_os(RUNS_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    // Integration tests get CARGO_TARGET_TMPDIR; examples (the demo) don't: use the directory of the binary
    // (`target/<profile>/examples`), which the guest sees through hostfs too.
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(t) => PathBuf::from(t),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("target")),
    }
    .join("uml-runs")
}

/// The run directory [`run_dir`] made for the boot named `name` (bench names are unique per boot).
pub fn find_run_dir(name: &str) -> Option<PathBuf> {
    find_run_dir_in(&runs_base(), name)
}

/// [`find_run_dir`] under `base` instead of [`runs_base`].
pub fn find_run_dir_in(base: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{}-", name.replace("::", "-"));
    std::fs::read_dir(base)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
}

/// A fresh directory for one run under `target/uml-runs/`.
pub fn run_dir(name: &str) -> PathBuf {
    let base = runs_base();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = base.join(format!(
        "{}-{}-{}",
        name.replace("::", "-"),
        std::process::id(),
        stamp
    ));
    std::fs::create_dir_all(&dir).expect("create run dir");
    dir
}

fn set_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(p).expect("stat").permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(p, perm).expect("chmod");
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The host directories directly under `/tmp` that hold one of `paths` (a checkout, a target directory
/// or a run directory under `/tmp`): the guest mounts its own tmpfs over `/tmp` and binds these back.
pub fn tmp_roots(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = paths
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .filter_map(|p| {
            let rest = p.strip_prefix("/tmp").ok()?;
            let first = rest.components().next()?;
            Some(Path::new("/tmp").join(first))
        })
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

/// Shell lines giving the guest a private tmpfs on `/tmp` that still shows the host's `keep`
/// directories (see [`tmp_roots`]): the host's `/tmp` is bound to `/run/host-tmp` first, then each kept
/// directory is bound back into the new `/tmp`.
fn private_tmp(keep: &[PathBuf]) -> String {
    let mut lines = vec![
        "mkdir -p /run/host-tmp".to_string(),
        "mount --bind /tmp /run/host-tmp".to_string(),
        "mount -t tmpfs tmpfs /tmp".to_string(),
    ];
    for k in keep {
        let name = k.strip_prefix("/tmp").unwrap_or(k).display().to_string();
        lines.push(format!(
            "mkdir -p '/tmp/{name}' && mount --bind '/run/host-tmp/{name}' '/tmp/{name}'"
        ));
    }
    lines.push("umount -l /run/host-tmp".to_string());
    lines.join("\n")
}

/// The host paths a guest needs to see: the binary it re-runs, its run directory, the source tree
/// (tests read files from it) and the current directory.
fn needed_paths(exe: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut paths = vec![
        exe.to_path_buf(),
        dir.to_path_buf(),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    ];
    paths.extend(std::env::current_dir().ok());
    paths
}

fn init_script(exe: &Path, name: &str, dir: &Path) -> String {
    let modules = MODULES.join(" ");
    let tmp = private_tmp(&tmp_roots(&needed_paths(exe, dir)));
    format!(
        r#"#!/bin/bash
# Generated by tests/common/uml.rs: init of a UML guest for one test.
export PATH=/run/legacy-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run
{tmp}
mkdir -p /run/netns /run/xtables-lock-dir
ip link set lo up
K=$(uname -r)
mkdir -p /run/m/lib/modules
ln -s /usr/lib/uml/modules/$K /run/m/lib/modules/$K
echo "boot: $(cut -d" " -f1 /proc/uptime)s"
modprobe -a -d /run/m {modules} || echo "some modules failed to load"
echo "modules: $(cut -d" " -f1 /proc/uptime)s"
mkdir -p /run/legacy-bin
for t in iptables ip6tables; do
  ln -sf /usr/sbin/$t-legacy /run/legacy-bin/$t
  ln -sf /usr/sbin/$t-legacy-save /run/legacy-bin/$t-save
  ln -sf /usr/sbin/$t-legacy-restore /run/legacy-bin/$t-restore
done
cd {dir}
echo "guest up: $(uname -r)"
{GUEST_ENV}={dir} RUST_BACKTRACE=1 {exe} --exact '{name}' --include-ignored --nocapture --test-threads=1 > {dir}/guest-output.log 2>&1
echo $? > {dir}/result.tmp
mv {dir}/result.tmp {dir}/result
sync
halt -f
"#,
        dir = dir.display(),
        exe = exe.display(),
    )
}

/// A test's path as libtest filters it: `module_path` without the crate name, then `name`.
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{name}"),
        None => name.to_string(),
    }
}

/// Defines a test whose body runs inside a UML guest: `uml_test!(name, { ... })`, or
/// `uml_test!(#[ignore = "why"] name, opts, { ... })` for one `cargo test` runs only with `--ignored`.
#[macro_export]
macro_rules! uml_test {
    (#[ignore = $why:literal] $name:ident, $opts:expr, $body:block) => {
        #[test]
        #[ignore = $why]
        fn $name() {
            let full = $crate::common::uml::test_name(module_path!(), stringify!($name));
            $crate::common::uml::run(&full, $opts, || $body);
        }
    };
    ($name:ident, $body:block) => {
        uml_test!($name, $crate::common::uml::BootOptions::default(), $body);
    };
    ($name:ident, $opts:expr, $body:block) => {
        #[test]
        fn $name() {
            let full = $crate::common::uml::test_name(module_path!(), stringify!($name));
            $crate::common::uml::run(&full, $opts, || $body);
        }
    };
}

/// A child's stdout and stderr, one after the other.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a shell command in the guest and returns stdout; panics with stderr on failure.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("spawn bash");
    if !out.status.success() {
        panic!(
            "command failed: {cmd}\nstatus: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `main` of a bench that measures inside one UML boot: in the guest it runs `body`, which writes its
/// figures to `result`; on the host it boots the guest (with `mem` and `timeout`) and prints that file.
pub fn bench_main(name: &str, mem: &'static str, timeout: Duration, result: &Path, body: fn()) {
    if in_guest() {
        body();
        return;
    }
    let _ = std::fs::remove_file(result);
    run(name, BootOptions { mem, timeout }, body);
    match std::fs::read_to_string(result) {
        Ok(t) => print!("{t}"),
        Err(_) => println!("{name}: no result (is /usr/bin/linux installed?)"),
    }
}
