//! Validation rules: each bad value is reported with its field path and value, all errors
//! are collected, and the helpers parse what validation accepts.

use kube_proxy_rs::config::defaults::apply_defaults;
use kube_proxy_rs::config::validate::validate;
use kube_proxy_rs::config::{LocalDetection, ProxyConfig, ProxySettings};
use kube_proxy_rs::gotime::GoDuration;
use kube_proxy_rs::net::IpFamily;

fn base() -> ProxyConfig {
    let mut c = ProxyConfig {
        mode: "ipvs".into(),
        ..Default::default()
    };
    apply_defaults(&mut c);
    c
}

fn d(s: &str) -> GoDuration {
    GoDuration::parse(s).unwrap()
}

/// Apply `change` to a valid config and return the rendered errors.
fn errors(change: impl FnOnce(&mut ProxyConfig)) -> Vec<String> {
    let mut c = base();
    change(&mut c);
    match validate(&c) {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn assert_one(change: impl FnOnce(&mut ProxyConfig), expected: &str) {
    let errs = errors(change);
    assert_eq!(
        errs.len(),
        1,
        "expected one error containing {expected:?}, got {errs:?}"
    );
    assert!(
        errs[0].contains(expected),
        "expected {expected:?} in {:?}",
        errs[0]
    );
}

fn assert_valid(change: impl FnOnce(&mut ProxyConfig)) {
    let errs = errors(change);
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn defaults_are_valid() {
    assert_valid(|_| {});
}

/// A change to the default configuration.
type Change = fn(&mut ProxyConfig);

/// Each change alone gives exactly one error, containing its text.
fn one_error_each(cases: &[(Change, &str)]) {
    for (change, expected) in cases {
        assert_one(change, expected);
    }
}

/// Each change alone leaves the configuration valid.
fn valid_each(cases: &[Change]) {
    for change in cases {
        assert_valid(change);
    }
}

#[test]
fn sync_periods() {
    one_error_each(&[
        (
            |c| c.ipvs.sync_period = d("-1s"),
            "ipvs.syncPeriod: Invalid value: \"-1s\": must be greater than 0",
        ),
        (
            |c| c.ipvs.min_sync_period = d("-1s"),
            "ipvs.minSyncPeriod: Invalid value: \"-1s\"",
        ),
        (
            |c| c.ipvs.min_sync_period = d("1m"),
            "ipvs.syncPeriod: Invalid value: \"1m0s\": must be greater than or equal to ipvs.minSyncPeriod",
        ),
        (
            |c| c.config_sync_period = d("-5m"),
            "configSyncPeriod: Invalid value: \"-5m0s\"",
        ),
    ]);
    valid_each(&[
        |c| c.ipvs.min_sync_period = d("30s"),
        // iptables-mode periods are not used in IPVS mode.
        |c| c.iptables.sync_period = d("-1s"),
    ]);
}

#[test]
fn ipvs_timeouts_and_scheduler() {
    one_error_each(&[
        (|c| c.ipvs.tcp_timeout = d("-1s"), "ipvs.tcpTimeout"),
        (|c| c.ipvs.tcp_fin_timeout = d("-1s"), "ipvs.tcpFinTimeout"),
        (|c| c.ipvs.udp_timeout = d("-1s"), "ipvs.udpTimeout"),
        (
            |c| c.ipvs.scheduler = "RR".into(),
            "ipvs.scheduler: Invalid value: \"RR\"",
        ),
        (|c| c.ipvs.scheduler = "fancy".into(), "ipvs.scheduler"),
    ]);
    for s in [
        "", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh", "fo", "ovf",
        "twos",
    ] {
        assert_valid(|c| c.ipvs.scheduler = s.into());
    }
}

#[test]
fn masquerade_bit_and_oom_score_adj() {
    one_error_each(&[
        (
            |c| c.iptables.masquerade_bit = Some(32),
            "iptables.masqueradeBit: Invalid value: 32: must be within the range [0, 31]",
        ),
        (
            |c| c.iptables.masquerade_bit = Some(-1),
            "iptables.masqueradeBit",
        ),
        (
            |c| c.oom_score_adj = Some(1001),
            "oomScoreAdj: Invalid value: 1001: must be within the range [-1000, 1000]",
        ),
        (|c| c.oom_score_adj = Some(-1001), "oomScoreAdj"),
    ]);
    valid_each(&[
        |c| c.iptables.masquerade_bit = Some(0),
        |c| c.iptables.masquerade_bit = Some(31),
        |c| c.oom_score_adj = Some(-1000),
        |c| c.oom_score_adj = Some(1000),
    ]);
}

#[test]
fn bind_addresses() {
    one_error_each(&[
        (
            |c| c.bind_address = "not-an-ip".into(),
            "bindAddress: Invalid value: \"not-an-ip\"",
        ),
        (
            |c| c.healthz_bind_address = "0.0.0.0".into(),
            "healthzBindAddress: Invalid value: \"0.0.0.0\": must be IP:port",
        ),
        (
            |c| c.healthz_bind_address = "host:80".into(),
            "healthzBindAddress: Invalid value: \"host\": must be a valid IP",
        ),
        (
            |c| c.metrics_bind_address = "1.2.3.4:0".into(),
            "metricsBindAddress: Invalid value: \"0\": must be a valid port",
        ),
        (
            |c| c.metrics_bind_address = "1.2.3.4:65536".into(),
            "metricsBindAddress",
        ),
    ]);
    valid_each(&[
        |c| c.metrics_bind_address = "[::1]:10249".into(),
        |c| c.healthz_bind_address = String::new(),
        |c| c.metrics_bind_address = String::new(),
    ]);
}

#[test]
fn cluster_cidr() {
    one_error_each(&[
        (
            |c| c.cluster_cidr = "10.0.0.0/33".into(),
            "clusterCIDR[0]: Invalid value: \"10.0.0.0/33\"",
        ),
        (
            |c| c.cluster_cidr = "10.0.0.0/8,10.1.0.0/16".into(),
            "at most one per IP family",
        ),
        (
            |c| c.cluster_cidr = "fd00::/48,fd01::/48".into(),
            "clusterCIDR",
        ),
        (
            |c| c.cluster_cidr = "10.0.0.0/8,fd00::/48,10.1.0.0/16".into(),
            "clusterCIDR",
        ),
        (
            |c| c.cluster_cidr = "10.0.0.0/8,nope".into(),
            "clusterCIDR[1]: Invalid value: \"nope\"",
        ),
    ]);
    valid_each(&[
        |c| c.cluster_cidr = "10.0.0.0/8".into(),
        |c| c.cluster_cidr = "10.0.0.0/8,fd00::/48".into(),
        // Not used (and, as upstream, not checked) in the other detect-local modes.
        |c| {
            c.detect_local_mode = "NodeCIDR".into();
            c.cluster_cidr = "junk".into();
        },
    ]);
}

#[test]
fn detect_local() {
    one_error_each(&[
        (
            |c| c.detect_local_mode = "Magic".into(),
            "detectLocalMode: Unsupported value: \"Magic\"",
        ),
        (
            |c| c.detect_local_mode = "BridgeInterface".into(),
            "detectLocal.bridgeInterface",
        ),
        (
            |c| c.detect_local_mode = "InterfaceNamePrefix".into(),
            "detectLocal.interfaceNamePrefix",
        ),
    ]);
    valid_each(&[
        |c| {
            c.detect_local_mode = "BridgeInterface".into();
            c.detect_local.bridge_interface = "cbr0".into();
        },
        |c| {
            c.detect_local_mode = "InterfaceNamePrefix".into();
            c.detect_local.interface_name_prefix = "veth".into();
        },
        |c| c.detect_local_mode = "NodeCIDR".into(),
    ]);
}

#[test]
fn node_port_addresses() {
    one_error_each(&[
        (
            |c| c.node_port_addresses = Some(vec!["10.0.0.0/8".into(), "10.0.0.1".into()]),
            "nodePortAddresses[1]: Invalid value: \"10.0.0.1\"",
        ),
        (
            |c| c.node_port_addresses = Some(vec!["Primary".into()]),
            "nodePortAddresses[0]: Invalid value: \"Primary\": must be a valid CIDR",
        ),
        // Upstream's validation knows one keyword, `primary`, and only alone.
        (
            |c| c.node_port_addresses = Some(vec!["primary".into(), "10.0.0.0/8".into()]),
            "nodePortAddresses[0]: Invalid value: \"primary\": can't use both 'primary' and CIDRs",
        ),
        (
            |c| c.node_port_addresses = Some(vec!["10.0.0.0/8".into(), "primary".into()]),
            "nodePortAddresses[1]: Invalid value: \"primary\": can't use both 'primary' and CIDRs",
        ),
        (
            |c| c.node_port_addresses = Some(vec!["Localhost".into()]),
            "nodePortAddresses[0]: Invalid value: \"Localhost\": must be a valid CIDR",
        ),
    ]);
    valid_each(&[
        |c| c.node_port_addresses = Some(vec!["primary".into()]),
        |c| c.node_port_addresses = Some(vec![]),
        |c| c.node_port_addresses = Some(vec!["192.168.1.7/24".into(), "fd00::/64".into()]),
        // The newest upstream's shorthands, accepted beside CIDRs (a superset of upstream 1.36's values).
        |c| {
            c.node_port_addresses =
                Some(vec!["localhost".into(), "all".into(), "10.0.0.0/8".into()])
        },
    ]);
}

#[test]
fn exclude_cidrs() {
    assert_valid(|c| c.ipvs.exclude_cidrs = Some(vec!["10.0.0.0/8".into(), "fd00::/64".into()]));
    let errs = errors(|c| {
        c.ipvs.exclude_cidrs = Some(vec!["x".into(), "10.0.0.0/8".into(), "1.2.3.4/40".into()])
    });
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].starts_with("ipvs.excludeCIDRs[0]: Invalid value: \"x\""),
        "{errs:?}"
    );
    assert!(errs[1].starts_with("ipvs.excludeCIDRs[2]"), "{errs:?}");
}

#[test]
fn conntrack() {
    one_error_each(&[
        (
            |c| c.conntrack.max_per_core = Some(-1),
            "conntrack.maxPerCore: Invalid value: -1",
        ),
        (|c| c.conntrack.min = Some(-1), "conntrack.min"),
        (
            |c| c.conntrack.tcp_established_timeout = Some(d("-1s")),
            "conntrack.tcpEstablishedTimeout",
        ),
        (
            |c| c.conntrack.tcp_close_wait_timeout = Some(d("-1s")),
            "conntrack.tcpCloseWaitTimeout",
        ),
        (
            |c| c.conntrack.udp_timeout = d("-1s"),
            "conntrack.udpTimeout",
        ),
        (
            |c| c.conntrack.udp_stream_timeout = d("-1s"),
            "conntrack.udpStreamTimeout",
        ),
    ]);
    valid_each(&[|c| {
        c.conntrack.max_per_core = Some(0);
        c.conntrack.tcp_established_timeout = Some(GoDuration::ZERO);
    }]);
}

#[test]
fn client_connection_mode_and_misc() {
    one_error_each(&[
        (
            |c| c.client_connection.burst = -1,
            "clientConnection.burst: Invalid value: -1",
        ),
        (
            |c| c.client_connection.qps = f32::NAN,
            "clientConnection.qps",
        ),
        (
            |c| c.mode = "iptables".into(),
            "mode: Invalid value: \"iptables\": this binary implements only IPVS mode",
        ),
        (|c| c.port_range = "2000-300".into(), "portRange"),
        (
            |c| c.show_hidden_metrics_for_version = "v1".into(),
            "showHiddenMetricsForVersion",
        ),
        (
            |c| c.logging.format = "xml".into(),
            "logging.format: Unsupported value: \"xml\"",
        ),
    ]);
    valid_each(&[
        |c| c.port_range = "300-2000".into(),
        |c| c.show_hidden_metrics_for_version = "1.35".into(),
    ]);
}

#[test]
fn all_errors_are_collected() {
    let errs = errors(|c| {
        c.ipvs.sync_period = d("-1s");
        c.oom_score_adj = Some(5000);
        c.iptables.masquerade_bit = Some(99);
        c.ipvs.scheduler = "x".into();
        c.bind_address = "?".into();
    });
    assert_eq!(errs.len(), 5, "{errs:?}");
    let mut c = base();
    c.ipvs.sync_period = d("-1s");
    c.oom_score_adj = Some(5000);
    let text = validate(&c).unwrap_err().to_string();
    assert!(
        text.contains("2 errors")
            && text.contains("ipvs.syncPeriod")
            && text.contains("oomScoreAdj"),
        "{text}"
    );
}

/// The typed settings the daemon runs with, parsed once from a validated configuration.
#[test]
fn settings() {
    let mut c = base();
    c.cluster_cidr = "10.244.0.0/16, fd00:10:244::/56".into();
    let local = |c: &ProxyConfig| ProxySettings::new(c).local_detection;
    assert_eq!(
        local(&c),
        LocalDetection::ClusterCidr(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/56".parse().unwrap()
        ])
    );
    c.detect_local_mode = "NodeCIDR".into();
    assert_eq!(local(&c), LocalDetection::NodeCidr);
    c.detect_local_mode = "BridgeInterface".into();
    c.detect_local.bridge_interface = "cbr0".into();
    assert_eq!(local(&c), LocalDetection::BridgeInterface("cbr0".into()));

    // nodePortAddresses: unset or empty means all; `primary` means the Node's primary IPs; host bits
    // are dropped.
    let npa_of = |c: &ProxyConfig| ProxySettings::new(c).node_port_addresses;
    for unset in [None, Some(vec![])] {
        c.node_port_addresses = unset;
        let all = npa_of(&c);
        assert!(all.allows("203.0.113.9".parse().unwrap(), &[]));
        assert!(all.allows("2001:db8::1".parse().unwrap(), &[]));
        assert!(!all.primary);
    }
    let primary = ["10.0.0.5".parse().unwrap()];
    c.node_port_addresses = Some(vec!["primary".into()]);
    let npa = npa_of(&c);
    assert!(npa.cidrs.is_empty());
    assert!(npa.allows("10.0.0.5".parse().unwrap(), &primary));
    assert!(!npa.allows("10.0.0.6".parse().unwrap(), &primary));
    c.node_port_addresses = Some(vec!["192.168.1.7/24".into()]);
    let npa = npa_of(&c);
    assert_eq!(
        npa.cidrs_for(IpFamily::V4),
        vec!["192.168.1.0/24".parse().unwrap()]
    );
    assert!(npa.cidrs_for(IpFamily::V6).is_empty());
    assert!(npa.allows("192.168.1.200".parse().unwrap(), &primary));
    assert!(!npa.allows("10.0.0.5".parse().unwrap(), &primary));
    // The shorthands expand to their CIDRs: `localhost` to both loopback ranges.
    c.node_port_addresses = Some(vec!["localhost".into()]);
    let npa = npa_of(&c);
    assert_eq!(
        npa.cidrs,
        vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]
    );
    assert!(!npa.allows("10.0.0.5".parse().unwrap(), &primary));

    assert_eq!(ProxySettings::new(&c).scheduler, "rr");
    c.ipvs.scheduler = "mh".into();
    let s = ProxySettings::new(&c);
    assert_eq!(s.scheduler, "mh");
    assert_eq!(s.masquerade_bit, 14);
    assert_eq!(s.sync_period, std::time::Duration::from_secs(30));
    assert_eq!(s.min_sync_period, std::time::Duration::ZERO);
}

#[test]
fn client_content_types_must_be_readable() {
    assert_valid(|c| c.client_connection.content_type = "application/json".into());
    assert_valid(|c| {
        c.client_connection.accept_content_types =
            "application/vnd.kubernetes.protobuf,application/json".into()
    });
    assert_one(
        |c| c.client_connection.content_type = "application/yaml".into(),
        "clientConnection.contentType: Unsupported value: \"application/yaml\"",
    );
    assert_one(
        |c| c.client_connection.accept_content_types = "text/html".into(),
        "clientConnection.acceptContentTypes: Invalid value: \"text/html\"",
    );
}
