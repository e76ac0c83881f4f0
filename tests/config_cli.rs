//! Process-level tests of the built `kube-proxy` binary.
#[path = "common/files.rs"]
pub mod files;

use files::tmp_file;
use std::process::{Command, Output};

fn kube_proxy(args: &[&str]) -> Output {
    // With a CARGO_TARGET_DIR shared by several worktrees, another build can replace the
    // binary between cargo building it and this test running it: say so instead of failing
    // obscurely.
    let version = Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .arg("--version")
        .output()
        .expect("run kube-proxy --version");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains("kube-proxy-rs"),
        "{} is not this build of kube-proxy (replaced by another build in the shared target dir?); rerun",
        env!("CARGO_BIN_EXE_kube-proxy")
    );
    Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .args(args)
        .env_remove("KUBE_PROXY_LOG")
        .output()
        .expect("run kube-proxy")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_flags_and_exits_zero() {
    let out = kube_proxy(&["--help"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for flag in [
        "--config",
        "--write-config-to",
        "--cleanup",
        "--hostname-override",
        "--proxy-mode",
        "--ipvs-scheduler",
        "--ipvs-sync-period",
        "--conntrack-max-per-core",
        "--feature-gates",
        "--nodeport-addresses",
        "--detect-local-mode",
        "--logging-format",
        "-v, --v",
    ] {
        assert!(stdout.contains(flag), "{flag} missing:\n{stdout}");
    }
}

#[test]
fn version_exits_zero() {
    let out = kube_proxy(&["--version"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn write_config_to_stdout_round_trips() {
    let out = kube_proxy(&[
        "--write-config-to=/dev/stdout",
        "--hostname-override=Node-1",
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=wrr",
        "--cluster-cidr=10.244.0.0/16",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let yaml = text(&out.stdout);
    assert!(
        yaml.starts_with("apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"),
        "{yaml}"
    );
    for line in [
        "kind: KubeProxyConfiguration",
        "mode: ipvs",
        "  scheduler: wrr",
        "healthzBindAddress: 0.0.0.0:10256",
        "metricsBindAddress: 127.0.0.1:10249",
        "configSyncPeriod: 15m0s",
        "  syncPeriod: 30s",
        "oomScoreAdj: -999",
        "hostnameOverride: node-1",
        "detectLocalMode: ClusterCIDR",
    ] {
        assert!(yaml.lines().any(|l| l == line), "{line:?} missing:\n{yaml}");
    }
    // Feeding the written file back in yields the same configuration, without warnings.
    let path = tmp_file("written.yaml", &yaml);
    let again = kube_proxy(&[
        &format!("--config={}", path.display()),
        "--write-config-to=/dev/stdout",
    ]);
    assert!(again.status.success(), "stderr: {}", text(&again.stderr));
    assert_eq!(text(&again.stdout), yaml);
    assert!(
        !text(&again.stderr).lines().any(|l| l.starts_with('W')),
        "{}",
        text(&again.stderr)
    );
}

#[test]
fn bad_config_file_fails_naming_the_field() {
    let path = tmp_file(
        "bad-type.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  syncPeriod: often\n",
    );
    let out = kube_proxy(&[
        &format!("--config={}", path.display()),
        "--hostname-override=n",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("ipvs.syncPeriod"), "{stderr}");
    assert!(stderr.contains("line 5"), "{stderr}");

    let path = tmp_file(
        "bad-values.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n\
         ipvs:\n  syncPeriod: -1s\noomScoreAdj: 2000\n",
    );
    let out = kube_proxy(&[
        &format!("--config={}", path.display()),
        "--hostname-override=n",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("ipvs.syncPeriod: Invalid value: \"-1s\": must be greater than 0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("oomScoreAdj: Invalid value: 2000"),
        "{stderr}"
    );

    let path = tmp_file(
        "iptables.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n",
    );
    let out = kube_proxy(&[
        &format!("--config={}", path.display()),
        "--hostname-override=n",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("only IPVS mode"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn unknown_field_warns_and_runs() {
    let path = tmp_file(
        "unknown.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nnewField: 1\n",
    );
    let out = kube_proxy(&[
        &format!("--config={}", path.display()),
        "--hostname-override=n",
        "--write-config-to=/dev/null",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with('W') && l.contains("newField")),
        "{stderr}"
    );
}

#[test]
fn unknown_flag_fails() {
    let out = kube_proxy(&["--frobnicate=1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error: unknown flag: --frobnicate"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn json_logging_format() {
    let out = kube_proxy(&[
        "--logging-format=json",
        "--hostname-override=n",
        "--write-config-to=/dev/null",
    ]);
    assert!(out.status.success());
    let stderr = text(&out.stderr);
    let first = stderr.lines().next().expect("a log line");
    let v: serde_json::Value = serde_json::from_str(first).expect("json log line");
    assert!(v.get("msg").is_some() && v.get("ts").is_some(), "{first}");
}

#[test]
fn starts_the_daemon_with_verbosity_from_v() {
    // No kubeconfig and no in-cluster environment: the daemon starts, logs at the chosen verbosity, then
    // fails to build its API client and exits 1 with the reason, before touching the kernel.
    let out = kube_proxy(&["--hostname-override=n", "--proxy-mode=ipvs"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("\"Version info\""), "{stderr}");
    assert!(stderr.contains("in-cluster config"), "{stderr}");
    assert!(!stderr.contains("Effective configuration"), "{stderr}");
    // --v=3 shows V(3) lines, which include the whole effective configuration and the node.
    let out = kube_proxy(&["--hostname-override=n", "--proxy-mode=ipvs", "--v=3"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("Effective configuration in full"),
        "{stderr}"
    );
    assert!(stderr.contains("node=\"n\""), "{stderr}");
}
