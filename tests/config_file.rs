//! Configuration file decoding: kubeadm's output, strict/lenient decoding, type errors,
//! duplicate keys, apiVersion/kind, defaults and the --write-config-to round trip.
#[path = "common/files.rs"]
pub mod files;

use files::tmp_file;
use kube_proxy_rs::config::defaults::apply_defaults;
use kube_proxy_rs::config::file::{decode, encode};
use kube_proxy_rs::config::{Invocation, LocalDetection, ProxyConfig, ProxySettings, parse_args};
use kube_proxy_rs::gotime::GoDuration;
use std::path::PathBuf;

/// What `kubeadm init` stores in the kube-proxy ConfigMap (1.31+), with `mode: ipvs`.
const KUBEADM: &str = r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ipvs
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

fn run_options(args: &[&str]) -> kube_proxy_rs::config::Options {
    let mut argv = vec!["kube-proxy"];
    argv.extend_from_slice(args);
    match parse_args(argv).unwrap() {
        Invocation::Run(o) => *o,
        other => panic!("expected Run, got {other:?}"),
    }
}

#[test]
fn kubeadm_config_decodes_strictly_and_defaults_like_upstream() {
    let decoded = decode(KUBEADM).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let raw = &decoded.config;
    assert_eq!(raw.mode, "ipvs");
    assert_eq!(raw.conntrack.max_per_core, None);
    assert_eq!(raw.ipvs.exclude_cidrs, None);
    assert_eq!(raw.logging.flush_frequency.0, GoDuration::ZERO);

    let path = tmp_file("kubeadm.conf", KUBEADM);
    let o = run_options(&[
        "--config",
        path.to_str().unwrap(),
        "--hostname-override=Node-A",
    ]);
    let c = &o.config;
    assert_eq!(o.node_name, "node-a");
    assert_eq!(o.config_path.as_deref(), Some(path.as_path()));
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    assert_eq!(c.mode, "ipvs");
    assert_eq!(c.healthz_bind_address, "0.0.0.0:10256");
    assert_eq!(c.metrics_bind_address, "127.0.0.1:10249");
    assert_eq!(c.ipvs.sync_period.to_string(), "30s");
    assert_eq!(c.ipvs.min_sync_period, GoDuration::ZERO);
    assert_eq!(c.iptables.masquerade_bit, Some(14));
    assert_eq!(c.oom_score_adj, Some(-999));
    assert_eq!(c.conntrack.max_per_core, Some(32768));
    assert_eq!(c.conntrack.min, Some(131072));
    assert_eq!(
        c.conntrack.tcp_established_timeout.unwrap().to_string(),
        "24h0m0s"
    );
    assert_eq!(
        c.conntrack.tcp_close_wait_timeout.unwrap().to_string(),
        "1h0m0s"
    );
    assert_eq!(c.config_sync_period.to_string(), "15m0s");
    assert_eq!(
        c.client_connection.content_type,
        "application/vnd.kubernetes.protobuf"
    );
    assert_eq!(c.client_connection.qps, 5.0);
    assert_eq!(c.client_connection.burst, 10);
    assert_eq!(
        c.client_connection.kubeconfig,
        "/var/lib/kube-proxy/kubeconfig.conf"
    );
    assert_eq!(c.detect_local_mode, "ClusterCIDR");
    assert_eq!(c.logging.format, "text");
    assert_eq!(c.logging.flush_frequency.0.to_string(), "5s");
    assert_eq!(o.settings.scheduler, "rr");
    assert_eq!(
        o.settings.local_detection,
        LocalDetection::ClusterCidr(vec!["10.244.0.0/16".parse().unwrap()])
    );
}

#[test]
fn explicit_zero_values_keep_meaning_leave_as_is() {
    // Pointer fields set to 0 are not defaulted (0 = leave the kernel value alone).
    let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                conntrack:\n  maxPerCore: 0\n  tcpEstablishedTimeout: 0s\noomScoreAdj: 0\n";
    let mut c = decode(yaml).unwrap().config;
    apply_defaults(&mut c);
    assert_eq!(c.conntrack.max_per_core, Some(0));
    assert_eq!(c.conntrack.tcp_established_timeout, Some(GoDuration::ZERO));
    assert_eq!(c.oom_score_adj, Some(0));
    assert_eq!(c.conntrack.min, Some(131072));
}

#[test]
fn unknown_field_fails_strict_and_succeeds_lenient_with_warning() {
    let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                mode: ipvs\nipvs:\n  scheduler: wrr\n  fancyNewThing: true\n";
    let decoded = decode(yaml).unwrap();
    assert_eq!(decoded.config.ipvs.scheduler, "wrr");
    assert_eq!(decoded.warnings.len(), 1);
    let w = &decoded.warnings[0];
    assert!(w.contains("lenient"), "{w}");
    assert!(w.contains("ipvs.fancyNewThing"), "{w}");
    assert!(w.contains("line 6"), "{w}");
}

#[test]
fn duplicate_key_fails_strict_and_succeeds_lenient_with_warning() {
    let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                clusterCIDR: 10.0.0.0/8\nclusterCIDR: 10.1.0.0/16\n";
    let decoded = decode(yaml).unwrap();
    assert_eq!(decoded.warnings.len(), 1);
    let w = &decoded.warnings[0];
    assert!(w.contains("clusterCIDR"), "{w}");
    assert!(w.to_lowercase().contains("duplicate"), "{w}");
    assert!(w.contains("line 4"), "{w}");
    // The lenient pass keeps the last value, like Go's decoder.
    assert_eq!(decoded.config.cluster_cidr, "10.1.0.0/16");
}

#[test]
fn wrong_type_is_always_an_error_naming_the_field() {
    let cases = [
        (
            "conntrack:\n  maxPerCore: lots\n",
            "conntrack.maxPerCore",
            "line 4",
        ),
        (
            "ipvs:\n  syncPeriod: 30\n",
            "ipvs.syncPeriod",
            "missing unit",
        ),
        ("ipvs:\n  strictARP: maybe\n", "ipvs.strictARP", "line 4"),
        (
            "clientConnection:\n  qps: fast\n",
            "clientConnection.qps",
            "line 4",
        ),
        (
            "nodePortAddresses: 10.0.0.0/8\n",
            "nodePortAddresses",
            "line 3",
        ),
        ("oomScoreAdj: 99999999999\n", "oomScoreAdj", "line 3"),
        ("featureGates:\n  Foo: sure\n", "featureGates", "line 4"),
        ("ipvs: [1, 2]\n", "ipvs", "line 3"),
        ("hostnameOverride: 123\n", "hostnameOverride", "line 3"),
        ("mode: true\n", "mode", "line 3"),
        (
            "ipvs:\n  excludeCIDRs: [10]\n",
            "ipvs.excludeCIDRs",
            "line 4",
        ),
        (
            "showHiddenMetricsForVersion: 1.35\n",
            "showHiddenMetricsForVersion",
            "line 3",
        ),
    ];
    for (body, field, extra) in cases {
        let yaml = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n{body}"
        );
        let err = decode(&yaml).expect_err(body).to_string();
        assert!(err.contains(field), "{body:?}: {err}");
        assert!(err.contains(extra), "{body:?}: {err}");
    }
}

#[test]
fn wrong_type_in_file_with_unknown_field_still_fails() {
    let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                unknownThing: 1\nipvs:\n  syncPeriod: soon\n";
    let err = decode(yaml).unwrap_err().to_string();
    assert!(err.contains("ipvs.syncPeriod"), "{err}");
}

#[test]
fn api_version_and_kind_are_checked() {
    let missing_version = "kind: KubeProxyConfiguration\nmode: ipvs\n";
    assert!(
        decode(missing_version)
            .unwrap_err()
            .to_string()
            .contains("apiVersion")
    );
    let missing_kind = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: ipvs\n";
    assert!(
        decode(missing_kind)
            .unwrap_err()
            .to_string()
            .contains("Kind")
    );
    let wrong = "apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n";
    let err = decode(wrong).unwrap_err().to_string();
    assert!(err.contains("v1beta9"), "{err}");
    let wrong_kind = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n";
    let err = decode(wrong_kind).unwrap_err().to_string();
    assert!(err.contains("KubeletConfiguration"), "{err}");
    assert!(decode("").is_err());
}

/// A file with two documents (e.g. a KubeletConfiguration pasted after ours) is refused saying so, not
/// as "too big"; a single document with a leading `---` is fine.
#[test]
fn a_second_document_is_refused_saying_so() {
    let one =
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n";
    assert!(decode(&format!("---\n{one}")).is_ok());
    for two in [
        format!("{one}---\n{one}"),
        format!(
            "---\n{one}---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        ),
    ] {
        let err = decode(&two).unwrap_err().to_string();
        assert!(
            err.contains("more than one YAML document") && !err.contains("too big"),
            "{err}"
        );
    }
    let path = tmp_file("two-docs.yaml", format!("{one}---\n{one}"));
    let arg = format!("--config={}", path.display());
    let e = parse_args(["kube-proxy", arg.as_str()]).unwrap_err();
    assert!(
        e.to_string().contains(&path.display().to_string())
            && e.to_string().contains("more than one YAML document"),
        "{e}"
    );
}

#[test]
fn logging_section_accepts_integer_and_string_forms() {
    let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                logging:\n  format: json\n  flushFrequency: 2000000000\n  verbosity: 4\n  vmodule:\n  - filePattern: proxier*\n    verbosity: 6\n  options:\n    json:\n      splitStream: true\n      infoBufferSize: 1Mi\n";
    let c = decode(yaml).unwrap().config;
    assert_eq!(c.logging.flush_frequency.0.to_string(), "2s");
    assert_eq!(c.logging.verbosity, 4);
    assert_eq!(
        c.logging.vmodule.as_ref().unwrap()[0].file_pattern,
        "proxier*"
    );
    assert!(c.logging.options.json.split_stream);
    assert_eq!(c.logging.options.json.info_buffer_size.0, "1Mi");
}

#[test]
fn every_section_of_the_schema_is_accepted_strictly() {
    let yaml = r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
featureGates: {KubeProxyIPVS: true, SomethingNew: false}
iptables: {localhostNodePorts: false, snatNodeInternalIP: true, masqueradeBit: 12}
nftables: {masqueradeAll: true, masqueradeBit: 3, syncPeriod: 1m, minSyncPeriod: 2s}
winkernel: {networkName: net1, sourceVip: 1.2.3.4, enableDSR: true, rootHnsEndpointName: r, forwardHealthCheckVip: true}
windowsRunAsService: true
portRange: 30000-31000
showHiddenMetricsForVersion: "1.35"
ipvs: {excludeCIDRs: [10.0.0.0/8], strictARP: true, tcpTimeout: 1h, tcpFinTimeout: 2m, udpTimeout: 300ms}
conntrack: {tcpBeLiberal: true, udpTimeout: 30s, udpStreamTimeout: 5m}
"#;
    let decoded = decode(yaml).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    let c = decoded.config;
    assert_eq!(c.feature_gates.get("SomethingNew"), Some(&false));
    assert_eq!(c.iptables.snat_node_internal_ip, Some(true));
    assert_eq!(c.nftables.sync_period.to_string(), "1m0s");
    assert!(c.winkernel.enable_dsr);
    assert!(c.windows_run_as_service);
    assert_eq!(c.ipvs.udp_timeout.to_string(), "300ms");
    assert_eq!(
        ProxySettings::new(&c).exclude_cidrs,
        vec!["10.0.0.0/8".parse().unwrap()]
    );
}

#[test]
fn written_config_decodes_back_to_the_same_config() {
    let path = tmp_file("kubeadm-rt.conf", KUBEADM);
    let o = run_options(&[
        "--config",
        path.to_str().unwrap(),
        "--hostname-override=n1",
        "--v=3",
    ]);
    let text = encode(&o.config).unwrap();
    assert!(
        text.starts_with("apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"),
        "{text}"
    );
    assert!(text.contains("\nkind: KubeProxyConfiguration\n"), "{text}");
    let decoded = decode(&text).unwrap();
    assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
    assert_eq!(decoded.config, o.config);
    assert_eq!(decoded.config.logging.verbosity, 3);

    // A configuration with every optional value populated also survives the trip.
    let mut c = o.config.clone();
    c.feature_gates.insert("KubeProxyIPVS".into(), true);
    c.node_port_addresses = Some(vec!["primary".into(), "10.0.0.0/8".into()]);
    c.ipvs.exclude_cidrs = Some(vec!["fd00::/64".into()]);
    c.ipvs.min_sync_period = GoDuration::parse("1.5s").unwrap();
    c.client_connection.qps = 7.25;
    c.port_range = "100".into();
    c.hostname_override = "0123".into();
    c.windows_run_as_service = true;
    let back: ProxyConfig = decode(&encode(&c).unwrap()).unwrap().config;
    assert_eq!(back, c);
}

#[test]
fn write_config_to_writes_defaulted_yaml_file() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("config_file");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{}-written.yaml", std::process::id()));
    let o = run_options(&[
        "--write-config-to",
        out.to_str().unwrap(),
        "--ipvs-scheduler=wlc",
        "--hostname-override=n",
    ]);
    assert_eq!(o.write_config_to.as_deref(), Some(out.as_path()));
    kube_proxy_rs::config::file::write(&o.config, &out).unwrap();
    let loaded = kube_proxy_rs::config::file::load(&out).unwrap();
    assert_eq!(loaded.config, o.config);
    assert_eq!(loaded.config.ipvs.scheduler, "wlc");
}
