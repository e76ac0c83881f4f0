//! Flag parsing: Go booleans, `_`/`-`, deprecated and legacy flags, unknown flags, proxy-mode,
//! feature gates, logging flags and precedence between flags and the config file.
#[path = "common/files.rs"]
pub mod files;

use files::tmp_file;
use kube_proxy_rs::config::{ConfigError, Invocation, Options, parse_args};
use kube_proxy_rs::gotime::GoDuration;

fn parse(args: &[&str]) -> Result<Invocation, ConfigError> {
    let mut argv = vec!["kube-proxy"];
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
fn go_style_booleans() {
    assert!(run(&["--cleanup", "--hostname-override=n"]).cleanup);
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert!(
            run(&[&format!("--cleanup={t}"), "--hostname-override=n"]).cleanup,
            "{t}"
        );
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert!(
            !run(&[&format!("--cleanup={f}"), "--hostname-override=n"]).cleanup,
            "{f}"
        );
    }
    assert!(!run(&["--hostname-override=n"]).cleanup);
    let e = err(&["--cleanup=yes"]);
    assert!(e.contains("--cleanup") && e.contains("yes"), "{e}");
    // Like pflag, a boolean does not consume the next argument.
    let e = err(&["--cleanup", "false"]);
    assert!(e.contains("false"), "{e}");
    let o = run(&[
        "--init-only=t",
        "--ipvs-strict-arp",
        "--masquerade-all=1",
        "--hostname-override=n",
    ]);
    assert!(o.init_only && o.config.ipvs.strict_arp && o.config.iptables.masquerade_all);
}

#[test]
fn underscores_and_dashes_are_equivalent_and_both_value_forms_work() {
    let a = run(&[
        "--hostname_override=my_node",
        "--ipvs_scheduler",
        "wrr",
        "--cluster-cidr=10.0.0.0/8",
    ]);
    assert_eq!(a.node_name, "my_node");
    assert_eq!(a.config.ipvs.scheduler, "wrr");
    assert_eq!(a.config.cluster_cidr, "10.0.0.0/8");
    let b = run(&[
        "--hostname-override",
        "My_Node",
        "--ipvs-scheduler=wrr",
        "--cluster_cidr",
        "10.0.0.0/8",
    ]);
    assert_eq!(b.node_name, "my_node");
    assert_eq!(b.config, a.config);
}

#[test]
fn verbosity_forms() {
    for args in [
        &["--v=4"][..],
        &["--v", "4"],
        &["-v", "4"],
        &["-v=4"],
        &["-v4"],
    ] {
        let mut all = args.to_vec();
        all.push("--hostname-override=n");
        assert_eq!(run(&all).config.logging.verbosity, 4, "{args:?}");
    }
    // Repeating a flag: the last one wins, as with pflag.
    assert_eq!(
        run(&["--v=2", "--v=6", "--hostname-override=n"])
            .config
            .logging
            .verbosity,
        6
    );
    let e = err(&["--v=loud"]);
    assert!(e.contains("--v") || e.contains("-v"), "{e}");
}

#[test]
fn unknown_flags_are_rejected_by_name() {
    let e = err(&["--no-such-flag=1"]);
    assert!(e.contains("unknown flag: --no-such-flag"), "{e}");
    let e = err(&["--resource_container", "x"]);
    assert!(e.contains("--resource-container"), "{e}");
    let e = err(&["stray"]);
    assert!(e.contains("stray"), "{e}");
}

#[test]
fn deprecated_and_legacy_flags_are_accepted_with_warnings() {
    let o = run(&[
        "--healthz-port=0",
        "--metrics-port=10249",
        "--proxy-port-range=30000-31000",
        "--iptables-sync-period=10s",
        "--iptables-min-sync-period=1s",
        "--udp-timeout=250ms",
        "--logtostderr",
        "--alsologtostderr=false",
        "--log_dir=/tmp",
        "--hostname-override=n",
    ]);
    for name in [
        "healthz-port",
        "metrics-port",
        "proxy-port-range",
        "iptables-sync-period",
        "iptables-min-sync-period",
        "udp-timeout",
        "logtostderr",
        "alsologtostderr",
        "log-dir",
    ] {
        assert!(
            o.warnings.iter().any(|w| w.contains(&format!("--{name} "))),
            "no warning for --{name}: {:?}",
            o.warnings
        );
    }
    // --healthz-port=0 disables the health server; the iptables periods don't touch IPVS and, as
    // upstream in IPVS mode, are not kept (written as 0s).
    assert_eq!(o.config.healthz_bind_address, "");
    assert_eq!(o.config.metrics_bind_address, "127.0.0.1:10249");
    assert_eq!(o.config.ipvs.sync_period.to_string(), "30s");
    assert_eq!(o.config.iptables.sync_period.to_string(), "0s");
    assert_eq!(o.config.port_range, "30000-31000");
}

#[test]
fn deprecated_port_completes_a_bare_bind_ip() {
    let o = run(&[
        "--healthz-bind-address=10.1.2.3",
        "--healthz-port=9999",
        "--hostname-override=n",
    ]);
    assert_eq!(o.config.healthz_bind_address, "10.1.2.3:9999");
    let o = run(&["--metrics-bind-address=::", "--hostname-override=n"]);
    assert_eq!(o.config.metrics_bind_address, "[::]:10249");
}

#[test]
fn proxy_mode() {
    assert_eq!(
        run(&["--proxy-mode=ipvs", "--hostname-override=n"])
            .config
            .mode,
        "ipvs"
    );
    assert!(
        run(&["--proxy-mode=ipvs", "--hostname-override=n"])
            .warnings
            .is_empty()
    );
    let o = run(&["--proxy-mode=", "--hostname-override=n"]);
    assert_eq!(o.config.mode, "ipvs");
    assert!(
        o.warnings.iter().any(|w| w.contains("IPVS")),
        "{:?}",
        o.warnings
    );
    let o = run(&["--hostname-override=n"]);
    assert_eq!(o.config.mode, "ipvs");
    for mode in ["iptables", "nftables", "kernelspace", "userspace", "IPVS"] {
        let e = err(&[&format!("--proxy-mode={mode}")]);
        assert!(e.contains("only IPVS mode"), "{mode}: {e}");
        assert!(e.contains("--proxy-mode"), "{mode}: {e}");
    }
}

#[test]
fn feature_gates() {
    let o = run(&[
        "--feature-gates=KubeProxyIPVS=true,AllowServiceExternalIPs=false",
        "--feature_gates",
        "ComponentFlagz=t",
        "--hostname-override=n",
    ]);
    let g = &o.config.feature_gates;
    assert_eq!(g.get("KubeProxyIPVS"), Some(&true));
    assert_eq!(g.get("AllowServiceExternalIPs"), Some(&false));
    assert_eq!(g.get("ComponentFlagz"), Some(&true));
    // Setting a deprecated gate is allowed with upstream's warning.
    assert!(
        o.warnings.iter().any(|w| w
            == "Setting deprecated feature gate KubeProxyIPVS=true. It will be removed in a future release."),
        "{:?}",
        o.warnings
    );
    for bad in [
        "--feature-gates=KubeProxyIPVS",
        "--feature-gates=A=maybe",
        "--feature-gates==true",
    ] {
        let e = err(&[bad]);
        assert!(e.contains("--feature-gates"), "{bad}: {e}");
    }
}

/// Unknown gates are refused as upstream refuses them, naming the gate; so are locked gates set against
/// their value, and `KubeProxyIPVS=false` (this binary runs IPVS mode only).
#[test]
fn unknown_locked_and_ipvs_disabling_gates_are_refused() {
    let e = err(&["--feature-gates=SidecarContainers=true,NoSuchGate=true,Zzz=false"]);
    assert_eq!(
        e,
        "invalid configuration: featureGates: Invalid value: map[string]bool{\"NoSuchGate\":true, \"SidecarContainers\":true, \
         \"Zzz\":false}: unrecognized feature gate: NoSuchGate"
    );
    let e = err(&["--feature-gates=NFTablesProxyMode=false"]);
    assert!(
        e.ends_with(
            "cannot set feature gate NFTablesProxyMode to false, feature is locked to true"
        ),
        "{e}"
    );
    let e = err(&["--feature-gates=KubeProxyIPVS=false"]);
    assert!(
        e.starts_with(
            "invalid configuration: featureGates: Invalid value: \
             map[string]bool{\"KubeProxyIPVS\":false}: the KubeProxyIPVS feature gate is off"
        ),
        "{e}"
    );
    // A gate of another component is known to upstream's kube-proxy, so accepted.
    let o = run(&[
        "--feature-gates=SidecarContainers=true",
        "--hostname-override=n",
    ]);
    assert_eq!(o.config.feature_gates.get("SidecarContainers"), Some(&true));
}

#[test]
fn every_value_flag_lands_in_the_config() {
    let o = run(&[
        "--kubeconfig=/k",
        "--master=https://1.2.3.4:6443",
        "--kube-api-content-type=application/json",
        "--kube-api-burst=20",
        "--kube-api-qps=7.5",
        "--bind-address=10.0.0.1",
        "--healthz-bind-address=0.0.0.0:1",
        "--metrics-bind-address=0.0.0.0:2",
        "--bind-address-hard-fail",
        "--profiling",
        "--show-hidden-metrics-for-version=1.35",
        "--iptables-masquerade-bit=15",
        "--iptables-localhost-nodeports=false",
        "--ipvs-sync-period=1m",
        "--ipvs-min-sync-period=2s",
        "--ipvs-exclude-cidrs=10.0.0.0/8,192.168.0.0/16",
        "--ipvs-exclude-cidrs=fd00::/8",
        "--ipvs-tcp-timeout=1h",
        "--ipvs-tcpfin-timeout=30s",
        "--ipvs-udp-timeout=5s",
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=veth",
        "--pod-bridge-interface=cbr0",
        "--nodeport-addresses=10.0.0.0/8",
        "--oom-score-adj",
        "-500",
        "--conntrack-max-per-core=0",
        "--conntrack-min=1",
        "--conntrack-tcp-timeout-established=2h",
        "--conntrack-tcp-timeout-close-wait=30m",
        "--conntrack-tcp-be-liberal",
        "--conntrack-udp-timeout=30s",
        "--conntrack-udp-timeout-stream=2m",
        "--config-sync-period=5m",
        "--logging-format=json",
        "--log-flush-frequency=1s",
        "--vmodule=proxier=5",
        "--hostname-override=NODE",
    ]);
    let c = &o.config;
    assert_eq!(o.master.as_deref(), Some("https://1.2.3.4:6443"));
    assert_eq!(o.node_name, "node");
    assert_eq!(c.client_connection.kubeconfig, "/k");
    assert_eq!(c.client_connection.content_type, "application/json");
    assert_eq!(c.client_connection.burst, 20);
    assert_eq!(c.client_connection.qps, 7.5);
    assert_eq!(c.bind_address, "10.0.0.1");
    assert_eq!(c.healthz_bind_address, "0.0.0.0:1");
    assert_eq!(c.metrics_bind_address, "0.0.0.0:2");
    assert!(c.bind_address_hard_fail && c.enable_profiling);
    assert_eq!(c.show_hidden_metrics_for_version, "1.35");
    assert_eq!(o.settings.masquerade_bit, 15);
    assert_eq!(c.iptables.localhost_node_ports, Some(false));
    assert_eq!(c.ipvs.sync_period, GoDuration::from_secs(60));
    assert_eq!(c.ipvs.min_sync_period, GoDuration::from_secs(2));
    assert_eq!(
        c.ipvs.exclude_cidrs.as_deref().unwrap(),
        ["10.0.0.0/8", "192.168.0.0/16", "fd00::/8"]
    );
    assert_eq!(c.ipvs.tcp_timeout.to_string(), "1h0m0s");
    assert_eq!(c.ipvs.tcp_fin_timeout.to_string(), "30s");
    assert_eq!(c.ipvs.udp_timeout.to_string(), "5s");
    assert_eq!(c.detect_local_mode, "InterfaceNamePrefix");
    assert_eq!(c.detect_local.interface_name_prefix, "veth");
    assert_eq!(c.detect_local.bridge_interface, "cbr0");
    let npa = &o.settings.node_port_addresses;
    assert!(!npa.primary);
    assert_eq!(npa.cidrs, vec!["10.0.0.0/8".parse().unwrap()]);
    assert_eq!(c.oom_score_adj, Some(-500));
    assert_eq!(c.conntrack.max_per_core, Some(0));
    assert_eq!(c.conntrack.min, Some(1));
    assert_eq!(
        c.conntrack.tcp_established_timeout,
        Some(GoDuration::from_secs(7200))
    );
    assert_eq!(
        c.conntrack.tcp_close_wait_timeout,
        Some(GoDuration::from_secs(1800))
    );
    assert!(c.conntrack.tcp_be_liberal);
    assert_eq!(c.conntrack.udp_timeout, GoDuration::from_secs(30));
    assert_eq!(c.conntrack.udp_stream_timeout, GoDuration::from_secs(120));
    assert_eq!(c.config_sync_period, GoDuration::from_secs(300));
    assert_eq!(c.logging.format, "json");
    assert_eq!(c.logging.flush_frequency.0, GoDuration::from_secs(1));
    assert_eq!(c.logging.vmodule.as_ref().unwrap()[0].verbosity, 5);
}

#[test]
fn bad_flag_values_name_the_flag() {
    for (arg, flag) in [
        ("--ipvs-sync-period=30", "--ipvs-sync-period"),
        ("--kube-api-burst=lots", "--kube-api-burst"),
        ("--oom-score-adj=99999999999", "--oom-score-adj"),
        ("--logging-format=xml", "--logging-format"),
        ("--vmodule=foo", "--vmodule"),
    ] {
        let e = err(&[arg]);
        assert!(e.contains(flag), "{arg}: {e}");
    }
}

#[test]
fn config_file_wins_over_flags_except_hostname_logging_and_actions() {
    let path = tmp_file(
        "precedence.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n\
         hostnameOverride: from-file\nipvs:\n  scheduler: lc\nlogging:\n  verbosity: 1\n",
    );
    let p = path.to_str().unwrap();
    let o = run(&[
        &format!("--config={p}"),
        "--ipvs-scheduler=sh",
        "--cluster-cidr=10.0.0.0/8",
        "--feature-gates=Foo=true",
        "--v=5",
        "--logging-format=json",
        "--master=https://api:6443",
        "--cleanup",
        "--init-only=false",
    ]);
    let c = &o.config;
    assert_eq!(c.ipvs.scheduler, "lc", "file wins over --ipvs-scheduler");
    assert_eq!(c.cluster_cidr, "", "file wins over --cluster-cidr");
    assert!(
        c.feature_gates.is_empty(),
        "--feature-gates ignored with --config"
    );
    assert_eq!(c.logging.verbosity, 5, "--v applies on top of the file");
    assert_eq!(c.logging.format, "json");
    assert_eq!(o.master.as_deref(), Some("https://api:6443"));
    assert_eq!(o.node_name, "from-file");
    assert!(o.cleanup && !o.init_only);
    for name in ["ipvs-scheduler", "cluster-cidr", "feature-gates"] {
        assert!(
            o.warnings
                .iter()
                .any(|w| w.contains(&format!("--{name} is ignored"))),
            "{name}: {:?}",
            o.warnings
        );
    }

    // --hostname-override wins over the file's hostnameOverride and is lower-cased.
    let o = run(&[&format!("--config={p}"), "--hostname-override=  Worker-7 "]);
    assert_eq!(o.node_name, "worker-7");
    assert_eq!(o.config.hostname_override, "worker-7");
    // An empty value (e.g. an unset $(NODE_NAME)) means "not given".
    let o = run(&[&format!("--config={p}"), "--hostname-override="]);
    assert_eq!(o.node_name, "from-file");
    let e = err(&[&format!("--config={p}"), "--hostname-override=  "]);
    assert!(e.contains("hostname-override"), "{e}");
}

#[test]
fn node_name_defaults_to_lowercased_hostname() {
    let o = run(&[]);
    let expected = kube_proxy_rs::config::options::hostname().unwrap();
    assert_eq!(o.node_name, expected);
    assert_eq!(o.node_name, o.node_name.to_lowercase());
}

#[test]
fn missing_config_file_is_an_error() {
    let e = err(&["--config=/nonexistent/kube-proxy.conf"]);
    assert!(e.contains("/nonexistent/kube-proxy.conf"), "{e}");
}

#[test]
fn help_and_version() {
    match parse(&["--help"]).unwrap() {
        Invocation::Help(text) => {
            for flag in [
                "--config",
                "--proxy-mode",
                "--ipvs-scheduler",
                "--hostname-override",
                "--write-config-to",
            ] {
                assert!(text.contains(flag), "{flag} missing from help");
            }
            assert!(!text.contains("--log-dir"), "legacy flags are hidden");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse(&["-h"]).unwrap(), Invocation::Help(_)));
    match parse(&["--version"]).unwrap() {
        Invocation::Version(v) => assert!(v.contains(env!("CARGO_PKG_VERSION"))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&["--version=raw"]).unwrap(),
        Invocation::Version(_)
    ));
    assert!(matches!(
        parse(&["--version=false", "--hostname-override=n"]).unwrap(),
        Invocation::Run(_)
    ));
}
