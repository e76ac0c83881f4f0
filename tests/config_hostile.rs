//! Hostile configuration fails fast, naming what is wrong:
//! - a configuration file is read up to 1 MiB only (a 50 MB file, `/dev/zero`);
//! - the YAML parser works within a small budget: a 381-byte alias bomb stops after a few MB of
//!   allocations (it cost about 118 MB before), measured by this binary's counting allocator;
//! - `detectLocal.bridgeInterface` / `interfaceNamePrefix` must be Linux interface names (a newline
//!   would otherwise reach the iptables-restore payload);
//! - `--healthz-port` / `--metrics-port` outside 0-65535 are refused (they were dropped silently).
#[path = "common/files.rs"]
pub mod files;

use files::tmp_file;
use kube_proxy_rs::config::file::{self, FileError, MAX_FILE_BYTES};
use kube_proxy_rs::config::{ConfigError, Invocation, Options, parse_args};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::Command;

/// The system allocator, counting the bytes the current thread holds and its peak.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn held(delta: isize) {
    let _ = HELD.try_with(|h| {
        let now = h.get() + delta;
        h.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are plain
// thread-local cells without destructors (their access never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        held(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        held(-(layout.size() as isize));
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        held(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most bytes this thread held at once meanwhile, beyond
/// what it held before.
fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let start = HELD.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    (out, PEAK.with(Cell::get) - start)
}

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/// The classic "billion laughs" in YAML: 9 anchors, each a list of nine aliases of the one before.
fn alias_bomb() -> String {
    let mut yaml = format!(
        "{HEADER}a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
    );
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for w in names.windows(2) {
        let (prev, name) = (w[0], w[1]);
        let items = vec![format!("*{prev}"); 9].join(",");
        yaml.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    yaml
}

fn parse(args: &[&str]) -> Result<Invocation, ConfigError> {
    let mut argv = vec!["kube-proxy", "--hostname-override=n"];
    argv.extend_from_slice(args);
    parse_args(argv)
}

fn run(args: &[&str]) -> Options {
    match parse(args) {
        Ok(Invocation::Run(o)) => *o,
        other => panic!("{args:?}: expected Run, got {other:?}"),
    }
}

fn err(args: &[&str]) -> String {
    match parse(args) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("{args:?}: expected an error, got {other:?}"),
    }
}

#[test]
fn a_file_over_the_size_limit_is_refused_before_parsing() {
    // A valid configuration padded with 50 MB of comments.
    let mut big = HEADER.as_bytes().to_vec();
    let line = b"# padding padding padding padding padding padding padding padding padding\n";
    while big.len() < 50_000_000 {
        big.extend_from_slice(line);
    }
    let path = tmp_file("big.yaml", &big);
    let e = file::load(&path).expect_err("a 50 MB file was accepted");
    assert!(
        matches!(e, FileError::TooLarge { limit, .. } if limit == MAX_FILE_BYTES),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("larger than 1048576 bytes") && msg.contains("big.yaml"),
        "{msg}"
    );
    let e = err(&[&format!("--config={}", path.display())]);
    assert!(e.contains("larger than"), "{e}");
    std::fs::remove_file(path).unwrap();
    // At the limit it is read (and decoded).
    big.truncate(usize::try_from(MAX_FILE_BYTES).unwrap() - line.len());
    let path = tmp_file("at-limit.yaml", big);
    file::load(&path).expect("a file just under the limit");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn dev_zero_as_config_fails_at_once_naming_the_limit() {
    // The real binary, with 2 GB of address space: reading /dev/zero to the end would exhaust it.
    let bin = env!("CARGO_BIN_EXE_kube-proxy");
    let out = Command::new("bash")
        .arg("-c")
        .arg("ulimit -v 2000000; exec timeout 60 \"$0\" --config=/dev/zero --hostname-override=n --write-config-to=/dev/null")
        .arg(bin)
        .output()
        .expect("run kube-proxy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted /dev/zero: {stderr}");
    assert!(
        stderr.contains("config file /dev/zero is larger than 1048576 bytes"),
        "{}: {stderr}",
        out.status
    );
}

#[test]
fn an_alias_bomb_stops_within_a_small_budget_with_a_clear_message() {
    let bomb = alias_bomb();
    assert!(bomb.len() < 450, "{} bytes", bomb.len());
    let (result, peak) = peak_bytes(|| file::decode(&bomb));
    let e = result.expect_err("the alias bomb decoded");
    let msg = e.to_string();
    assert!(
        msg.contains("too big for a KubeProxyConfiguration") && msg.contains("aliases"),
        "{msg}"
    );
    // The parser's own defaults let it reach about 118 MB; the budget stops it early.
    assert!(peak < 16 << 20, "the alias bomb cost {peak} bytes");
    // Through the file and the command line too.
    let path = tmp_file("bomb.yaml", bomb.as_bytes());
    let e = err(&[&format!("--config={}", path.display())]);
    assert!(e.contains("too big"), "{e}");
}

#[test]
fn ordinary_aliases_still_work() {
    let yaml = format!(
        "{HEADER}ipvs:\n  syncPeriod: &p 45s\n  minSyncPeriod: *p\nclientConnection: &cc\n  qps: 7\n"
    );
    let d = file::decode(&yaml).expect("aliases in a normal config");
    assert_eq!(d.config.ipvs.min_sync_period.to_string(), "45s");
}

#[test]
fn interface_names_are_checked_as_linux_does() {
    let bad: &[(&str, &str)] = &[
        ("cbr0\n-A INPUT -j ACCEPT", "must not contain '\\n'"),
        ("cbr0 x", "must not contain ' '"),
        ("a/b", "must not contain '/'"),
        ("eth0:1", "must not contain ':'"),
        ("br\"0", "must not contain '\"'"),
        (".", "must not be"),
        ("..", "must not be"),
        ("a-very-long-name", "at most 15 bytes"),
        ("", "must not be empty"),
    ];
    for (value, why) in bad {
        let e = err(&[
            "--detect-local-mode=BridgeInterface",
            &format!("--pod-bridge-interface={value}"),
        ]);
        assert!(
            e.contains("detectLocal.bridgeInterface") && e.contains(why),
            "{value:?}: {e}"
        );
        let e = err(&[
            "--detect-local-mode=InterfaceNamePrefix",
            &format!("--pod-interface-name-prefix={value}"),
        ]);
        assert!(
            e.contains("detectLocal.interfaceNamePrefix"),
            "{value:?}: {e}"
        );
    }
    // The rule matches `<prefix>+`: 14 bytes at most for a prefix, 15 for a name.
    let e = err(&[
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=abcdefghijklmno",
    ]);
    assert!(e.contains("at most 14 bytes"), "{e}");
    run(&[
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=abcdefghijklmn",
    ]);
    run(&[
        "--detect-local-mode=BridgeInterface",
        "--pod-bridge-interface=abcdefghijklmno",
    ]);
    // Unused (another detectLocalMode): not checked, as upstream.
    run(&["--pod-bridge-interface=a/b"]);
    // In a file, the error names the field too.
    let path = tmp_file(
        "iface.yaml",
        format!("{HEADER}detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: \"cbr0\\n\"\n")
            .as_bytes(),
    );
    let e = err(&[&format!("--config={}", path.display())]);
    assert!(
        e.contains("detectLocal.bridgeInterface: Invalid value: \"cbr0\\n\""),
        "{e}"
    );
}

#[test]
fn deprecated_ports_out_of_range_are_refused() {
    for (flag, value) in [
        ("healthz-port", "70000"),
        ("healthz-port", "65536"),
        ("healthz-port", "-1"),
        ("metrics-port", "-1"),
        ("metrics-port", "100000"),
    ] {
        let e = err(&[&format!("--{flag}={value}")]);
        assert!(
            e.contains(&format!(
                "invalid argument \"{value}\" for \"--{flag}\" flag"
            )),
            "{flag}={value}: {e}"
        );
        // As upstream, also when it would complete a bare bind address.
        let e = err(&[
            "--healthz-bind-address=10.0.0.1",
            "--metrics-bind-address=10.0.0.1",
            &format!("--{flag}={value}"),
        ]);
        assert!(e.contains(&format!("--{flag}")), "{flag}={value}: {e}");
    }
    let o = run(&["--healthz-port=0", "--metrics-port=65535"]);
    assert_eq!(o.config.healthz_bind_address, "");
    // Ignored (with a warning) where upstream ignores them: with --config.
    let path = tmp_file("ports.yaml", HEADER.as_bytes());
    let o = run(&[
        &format!("--config={}", path.display()),
        "--healthz-port=70000",
    ]);
    assert!(
        o.warnings.iter().any(|w| w.contains("--healthz-port")),
        "{:?}",
        o.warnings
    );
}
