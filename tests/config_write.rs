//! `--write-config-to` writes exactly what upstream kube-proxy writes for the same flags and file, and
//! the running configuration has upstream's effective sync periods. The expected texts are golden files
//! in `tests/config_data/`, derived from upstream's code with a comment on where each line comes from.

use kube_proxy_rs::config::{Invocation, Options, parse_args};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/config_data")
        .join(name)
}

/// The golden text without our comments: header lines starting with `#` and everything from `  # `.
fn golden(name: &str) -> String {
    let text = std::fs::read_to_string(data(name)).unwrap();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        out.push_str(line.split("  # ").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("config_write");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}-{name}", std::process::id()))
}

/// Run the built binary with `args` plus `--write-config-to=<file>` and return the file's text.
fn written_by_binary(args: &[&str], name: &str) -> String {
    let out_path = tmp(name);
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .args(args)
        .arg(format!("--write-config-to={}", out_path.display()))
        .env_remove("KUBE_PROXY_LOG")
        .output()
        .expect("run kube-proxy");
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&out_path).unwrap()
}

fn options(args: &[&str]) -> Options {
    let argv = std::iter::once("kube-proxy").chain(args.iter().copied());
    match parse_args(argv) {
        Ok(Invocation::Run(o)) => *o,
        other => panic!("{args:?}: {other:?}"),
    }
}

const MINIMAL_FILE: &str =
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n";

const IPV6_MH_FLAGS: &[&str] = &[
    "--proxy-mode=ipvs",
    "--bind-address=fd00::1",
    "--kube-api-qps=7.5",
    "--ipvs-min-sync-period=0s",
    "--iptables-sync-period=10s",
    "--nodeport-addresses=10.0.0.0/8,fd00::/64",
    "--feature-gates=KubeProxyIPVS=true",
    "--ipvs-scheduler=mh",
    "--ipvs-exclude-cidrs=10.96.0.0/12",
    "--hostname-override=0123",
];

#[test]
fn flags_only_ipvs_writes_upstreams_text() {
    let text = written_by_binary(&["--proxy-mode=ipvs"], "flags.yaml");
    assert_eq!(text, golden("write-config-flags-ipvs.yaml"));
}

#[test]
fn config_file_writes_upstreams_text() {
    let file = tmp("minimal.conf");
    std::fs::write(&file, MINIMAL_FILE).unwrap();
    let config = format!("--config={}", file.display());
    let text = written_by_binary(&[&config], "file.yaml");
    assert_eq!(text, golden("write-config-file-ipvs.yaml"));
}

#[test]
fn ipv6_and_list_flags_write_upstreams_text() {
    let text = written_by_binary(IPV6_MH_FLAGS, "ipv6.yaml");
    assert_eq!(text, golden("write-config-flags-ipv6-mh.yaml"));
}

#[test]
fn written_files_read_back_to_the_same_text() {
    for name in [
        "write-config-flags-ipvs.yaml",
        "write-config-file-ipvs.yaml",
        "write-config-flags-ipv6-mh.yaml",
    ] {
        let file = tmp(&format!("back-{name}"));
        std::fs::write(&file, golden(name)).unwrap();
        let config = format!("--config={}", file.display());
        let text = written_by_binary(&[&config], &format!("again-{name}"));
        assert_eq!(text, golden(name), "{name}");
    }
}

/// The daemon runs with what it would write: a flags-only node gets upstream's 1s minimum sync
/// period, a file without `ipvs.minSyncPeriod` gets 0s, and given flags win.
#[test]
fn effective_sync_periods_are_upstreams() {
    let flags_only = options(&["--proxy-mode=ipvs", "--hostname-override=n"]);
    let flags_only_s = flags_only.settings;
    assert_eq!(flags_only_s.sync_period, Duration::from_secs(30));
    assert_eq!(flags_only_s.min_sync_period, Duration::from_secs(1));

    let no_mode_s = options(&["--hostname-override=n"]).settings;
    assert_eq!(no_mode_s.min_sync_period, Duration::from_secs(1));

    let given = options(&[
        "--proxy-mode=ipvs",
        "--hostname-override=n",
        "--ipvs-sync-period=1m",
        "--ipvs-min-sync-period=0s",
    ])
    .settings;
    assert_eq!(given.sync_period, Duration::from_secs(60));
    assert_eq!(given.min_sync_period, Duration::ZERO);

    let file = tmp("periods.conf");
    std::fs::write(&file, MINIMAL_FILE).unwrap();
    let config = format!("--config={}", file.display());
    let from_file = options(&[&config, "--hostname-override=n"]);
    let from_file_s = from_file.settings;
    let from_file = from_file.config;
    assert_eq!(from_file_s.sync_period, Duration::from_secs(30));
    assert_eq!(from_file_s.min_sync_period, Duration::ZERO);
    // The inactive modes' periods are not kept, as upstream's internal configuration has none.
    assert!(from_file.iptables.sync_period.is_zero());
    assert!(from_file.nftables.min_sync_period.is_zero());
}
