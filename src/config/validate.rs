//! Validation as upstream (`pkg/proxy/apis/config/validation/validation.go`), limited to what
//! matters in IPVS mode. Every problem is collected; paths are the YAML field paths.

use super::defaults::split_host_port;
use super::types::ProxyConfig;
use crate::cluster::listwatch::{MediaTypes, media};
use crate::gotime::GoDuration;
use crate::scheduler::Scheduler;
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// Supported `detectLocalMode` values (`""` means `ClusterCIDR`).
pub const LOCAL_MODES: &[&str] = &[
    "ClusterCIDR",
    "NodeCIDR",
    "BridgeInterface",
    "InterfaceNamePrefix",
];

/// The keyword allowed in `nodePortAddresses` instead of CIDRs: the Node's primary IPs.
pub const NODE_PORT_PRIMARY: &str = "primary";

/// Shorthands accepted in `nodePortAddresses` beside CIDRs, with what they stand for: the newest upstream
/// releases know them (../shared/upstream-ipvs-reference.md); upstream's stored validation up to 1.36 does
/// not, so this accepts a superset of what an operator moving from upstream can have written.
pub const NODE_PORT_SHORTHANDS: &[(&str, &[&str])] = &[
    ("localhost", &["127.0.0.0/8", "::1/128"]),
    ("all", &["0.0.0.0/0", "::/0"]),
];

/// One invalid field, printed like Kubernetes' `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// YAML path of the field, e.g. `ipvs.syncPeriod` or `nodePortAddresses[1]`.
    pub field: String,
    /// What is wrong.
    pub kind: FieldErrorKind,
}

/// The kind of a [`FieldError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A bad value (already rendered, strings quoted) and why.
    Invalid { value: String, detail: String },
    /// A value outside a fixed set.
    NotSupported {
        value: String,
        supported: Vec<String>,
    },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FieldErrorKind::Invalid { value, detail } => {
                write!(f, "{}: Invalid value: {value}: {detail}", self.field)
            }
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "{}: Unsupported value: {value}: supported values: {}",
                    self.field,
                    list.join(", ")
                )
            }
        }
    }
}

/// All validation errors of a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        if parts.len() == 1 {
            write!(f, "{}", parts[0])
        } else {
            write!(f, "{} errors:", parts.len())?;
            for p in parts {
                write!(f, "\n  {p}")?;
            }
            Ok(())
        }
    }
}

fn q(s: &str) -> String {
    format!("{s:?}")
}

fn dq(d: GoDuration) -> String {
    q(&d.to_string())
}

struct Errs(Vec<FieldError>);

impl Errs {
    fn invalid(&mut self, field: impl Into<String>, value: String, detail: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            kind: FieldErrorKind::Invalid {
                value,
                detail: detail.into(),
            },
        });
    }

    fn not_supported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        self.0.push(FieldError {
            field: field.into(),
            kind: FieldErrorKind::NotSupported {
                value: q(value),
                supported: supported.iter().map(|s| s.to_string()).collect(),
            },
        });
    }

    fn non_negative_duration(&mut self, field: &str, d: GoDuration) {
        if d.is_negative() {
            self.invalid(field, dq(d), "must be greater than or equal to 0");
        }
    }

    /// An interface name (or prefix of at most `max` bytes) that `mode` puts into iptables rules.
    fn interface(&mut self, field: &str, name: &str, mode: &str, max: usize) {
        if let Some(why) = interface_name_error(name, max) {
            let detail = format!("{why} (detectLocalMode is {mode})");
            self.invalid(field, q(name), detail);
        }
    }

    fn host_port(&mut self, field: &str, input: &str) {
        let (host, port) = match split_host_port(input) {
            Ok(hp) => hp,
            Err(_) => {
                self.invalid(field, q(input), "must be IP:port");
                return;
            }
        };
        if host.parse::<IpAddr>().is_err() {
            self.invalid(field, q(host), "must be a valid IP");
        }
        match port.parse::<u32>() {
            Ok(p) if (1..=65535).contains(&p) => {}
            _ => self.invalid(field, q(port), "must be a valid port"),
        }
    }
}

/// Parse a CIDR like Go's `ParseCIDRSloppy` (host bits allowed; the network is returned).
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    s.trim().parse::<IpNet>().ok().map(|n| n.trunc())
}

/// Whether `s` is a port range as upstream accepts it (`""`, `N`, `A-B`, `A+N`).
fn valid_port_range(s: &str) -> bool {
    let s = s.trim();
    if s.is_empty() {
        return true;
    }
    let port = |p: &str| p.parse::<u32>().ok().filter(|p| *p <= 65535);
    if let Some((a, b)) = s.split_once('-') {
        matches!((port(a), port(b)), (Some(a), Some(b)) if a <= b)
    } else if let Some((a, n)) = s.split_once('+') {
        matches!((port(a), n.parse::<u32>().ok()), (Some(a), Some(n)) if a + n <= 65535)
    } else {
        port(s).is_some()
    }
}

/// Validate a defaulted configuration whose `mode` has been resolved.
pub fn validate(c: &ProxyConfig) -> Result<(), ValidationErrors> {
    let mut e = Errs(Vec::new());
    validate_feature_gates(c, &mut e);
    if let Some(bit) = c.iptables.masquerade_bit
        && !(0..=31).contains(&bit)
    {
        e.invalid(
            "iptables.masqueradeBit",
            bit.to_string(),
            "must be within the range [0, 31]",
        );
    }
    validate_ipvs(c, &mut e);
    validate_conntrack(c, &mut e);
    validate_media_types(c, &mut e);
    if let Some(v) = c.oom_score_adj
        && !(-1000..=1000).contains(&v)
    {
        e.invalid(
            "oomScoreAdj",
            v.to_string(),
            "must be within the range [-1000, 1000]",
        );
    }
    if c.mode != "ipvs" {
        e.invalid(
            "mode",
            q(&c.mode),
            "this binary implements only IPVS mode: must be \"ipvs\" or blank",
        );
    }
    validate_client(c, &mut e);
    validate_servers(c, &mut e);
    validate_addresses(c, &mut e);
    validate_detect_local(c, &mut e);
    if !matches!(c.logging.format.as_str(), "" | "text" | "json") {
        e.not_supported("logging.format", &c.logging.format, &["json", "text"]);
    }
    if e.0.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors(e.0))
    }
}

/// `featureGates` as upstream's feature gate takes them (unknown names and locked gates refused, with
/// the map rendered as Go's `%#v`); `KubeProxyIPVS=false` refuses IPVS mode, the only one here.
fn validate_feature_gates(c: &ProxyConfig, e: &mut Errs) {
    use super::features;
    if let Err(why) = features::check(&c.feature_gates) {
        let pairs: Vec<String> = c
            .feature_gates
            .iter()
            .map(|(k, v)| format!("{k:?}:{v}"))
            .collect();
        e.invalid(
            "featureGates",
            format!("map[string]bool{{{}}}", pairs.join(", ")),
            why,
        );
    } else if !features::enabled(&c.feature_gates, features::KUBE_PROXY_IPVS) {
        e.invalid(
            "featureGates",
            "map[string]bool{\"KubeProxyIPVS\":false}".to_string(),
            "the KubeProxyIPVS feature gate is off, which disables IPVS mode: this binary implements only \
             IPVS mode (remove the setting, or run upstream kube-proxy in another mode)",
        );
    }
}

/// `clientConnection.contentType` must be a media type lists and watches can read;
/// `acceptContentTypes`, when set, must name one.
fn validate_media_types(c: &ProxyConfig, e: &mut Errs) {
    let cc = &c.client_connection;
    if MediaTypes::from_config(&cc.content_type, "").is_err() {
        e.not_supported(
            "clientConnection.contentType",
            &cc.content_type,
            &[media::JSON, crate::cluster::proto::MEDIA_TYPE],
        );
    }
    if MediaTypes::from_config("", &cc.accept_content_types).is_err() {
        e.invalid(
            "clientConnection.acceptContentTypes",
            q(&cc.accept_content_types),
            "must name application/json or application/vnd.kubernetes.protobuf",
        );
    }
}

/// The `ipvs` section: in IPVS mode its sync periods are the proxier's.
fn validate_ipvs(c: &ProxyConfig, e: &mut Errs) {
    let ipvs = &c.ipvs;
    if ipvs.sync_period.as_nanos() <= 0 {
        e.invalid(
            "ipvs.syncPeriod",
            dq(ipvs.sync_period),
            "must be greater than 0",
        );
    }
    e.non_negative_duration("ipvs.minSyncPeriod", ipvs.min_sync_period);
    if ipvs.sync_period.as_nanos() > 0 && ipvs.min_sync_period > ipvs.sync_period {
        e.invalid(
            "ipvs.syncPeriod",
            dq(ipvs.min_sync_period),
            "must be greater than or equal to ipvs.minSyncPeriod",
        );
    }
    e.non_negative_duration("ipvs.tcpTimeout", ipvs.tcp_timeout);
    e.non_negative_duration("ipvs.tcpFinTimeout", ipvs.tcp_fin_timeout);
    e.non_negative_duration("ipvs.udpTimeout", ipvs.udp_timeout);
    if Scheduler::parse_or_default(&ipvs.scheduler).is_err() {
        e.invalid(
            "ipvs.scheduler",
            q(&ipvs.scheduler),
            format!(
                "must be one of [{}], blank means the default algorithm method (currently {})",
                Scheduler::names(),
                Scheduler::default()
            ),
        );
    }
    for (i, cidr) in ipvs.exclude_cidrs.iter().flatten().enumerate() {
        if parse_cidr(cidr).is_none() {
            e.invalid(
                format!("ipvs.excludeCIDRs[{i}]"),
                q(cidr),
                "must be a valid CIDR",
            );
        }
    }
}

fn validate_conntrack(c: &ProxyConfig, e: &mut Errs) {
    let ct = &c.conntrack;
    for (field, value) in [
        ("conntrack.maxPerCore", ct.max_per_core),
        ("conntrack.min", ct.min),
    ] {
        if let Some(v) = value
            && v < 0
        {
            e.invalid(field, v.to_string(), "must be greater than or equal to 0");
        }
    }
    if let Some(d) = ct.tcp_established_timeout {
        e.non_negative_duration("conntrack.tcpEstablishedTimeout", d);
    }
    if let Some(d) = ct.tcp_close_wait_timeout {
        e.non_negative_duration("conntrack.tcpCloseWaitTimeout", d);
    }
    e.non_negative_duration("conntrack.udpTimeout", ct.udp_timeout);
    e.non_negative_duration("conntrack.udpStreamTimeout", ct.udp_stream_timeout);
}

/// `clientConnection` and `configSyncPeriod`.
fn validate_client(c: &ProxyConfig, e: &mut Errs) {
    if c.client_connection.burst < 0 {
        e.invalid(
            "clientConnection.burst",
            c.client_connection.burst.to_string(),
            "must be greater than or equal to 0",
        );
    }
    if !c.client_connection.qps.is_finite() {
        e.invalid(
            "clientConnection.qps",
            c.client_connection.qps.to_string(),
            "must be a finite number",
        );
    }
    if c.config_sync_period.as_nanos() <= 0 {
        e.invalid(
            "configSyncPeriod",
            dq(c.config_sync_period),
            "must be greater than 0",
        );
    }
}

/// `bindAddress`, the two server addresses and `showHiddenMetricsForVersion`.
fn validate_servers(c: &ProxyConfig, e: &mut Errs) {
    if c.bind_address.parse::<IpAddr>().is_err() {
        e.invalid(
            "bindAddress",
            q(&c.bind_address),
            "not a valid textual representation of an IP address",
        );
    }
    if !c.healthz_bind_address.is_empty() {
        e.host_port("healthzBindAddress", &c.healthz_bind_address);
    }
    if !c.metrics_bind_address.is_empty() {
        e.host_port("metricsBindAddress", &c.metrics_bind_address);
    }
    let v = &c.show_hidden_metrics_for_version;
    if !v.is_empty() {
        let ok = v
            .split_once('.')
            .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
        if !ok {
            e.invalid(
                "showHiddenMetricsForVersion",
                q(v),
                "must be a version in the form <major>.<minor>, e.g. 1.16",
            );
        }
    }
}

/// `portRange` and `nodePortAddresses`.
fn validate_addresses(c: &ProxyConfig, e: &mut Errs) {
    if !valid_port_range(&c.port_range) {
        e.invalid(
            "portRange",
            q(&c.port_range),
            "must be a valid port range (e.g. 300-2000)",
        );
    }
    // As upstream: CIDRs, or the one keyword `primary` alone; also the shorthands `localhost` and `all`.
    let addresses = c.node_port_addresses.as_deref().unwrap_or_default();
    for (i, addr) in addresses.iter().enumerate() {
        if addr == NODE_PORT_PRIMARY {
            if i != 0 || addresses.len() != 1 {
                e.invalid(
                    format!("nodePortAddresses[{i}]"),
                    q(addr),
                    "can't use both 'primary' and CIDRs",
                );
            }
            break;
        }
        let shorthand = NODE_PORT_SHORTHANDS.iter().any(|(k, _)| k == addr);
        if !shorthand && parse_cidr(addr).is_none() {
            e.invalid(
                format!("nodePortAddresses[{i}]"),
                q(addr),
                "must be a valid CIDR",
            );
        }
    }
}

fn validate_detect_local(c: &ProxyConfig, e: &mut Errs) {
    let mode = c.detect_local_mode.as_str();
    if !mode.is_empty() && !LOCAL_MODES.contains(&mode) {
        let mut supported = LOCAL_MODES.to_vec();
        supported.push("");
        e.not_supported("detectLocalMode", mode, &supported);
        return;
    }
    match mode {
        "BridgeInterface" => e.interface(
            "detectLocal.bridgeInterface",
            &c.detect_local.bridge_interface,
            mode,
            IFNAMSIZ - 1,
        ),
        // The rule matches `<prefix>+`, which must be a valid name itself.
        "InterfaceNamePrefix" => e.interface(
            "detectLocal.interfaceNamePrefix",
            &c.detect_local.interface_name_prefix,
            mode,
            IFNAMSIZ - 2,
        ),
        "" | "ClusterCIDR" if !c.cluster_cidr.trim().is_empty() => {
            validate_cluster_cidr(&c.cluster_cidr, e)
        }
        _ => {}
    }
}

/// Linux's `IFNAMSIZ`: an interface name has at most 15 bytes (plus the terminating NUL).
pub const IFNAMSIZ: usize = 16;

/// Why `name` cannot be (the start of) a Linux interface name of at most `max` bytes, as the
/// kernel's `dev_valid_name` decides: not empty, not `.` or `..`, no `/`, `:`, NUL or white space
/// (the kernel's `isspace`, which includes byte 0xA0). A `"` is refused too: `iptables-restore`
/// reads it as a quote.
pub fn interface_name_error(name: &str, max: usize) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_string());
    }
    if name == "." || name == ".." {
        return Some("must not be \".\" or \"..\"".to_string());
    }
    let bad = |b: u8| matches!(b, b'/' | b':' | b'"' | 0 | b' ' | b'\t'..=b'\r' | 0xa0);
    if let Some(b) = name.bytes().find(|b| bad(*b)) {
        let what = if b.is_ascii() {
            format!("{:?}", char::from(b))
        } else {
            format!("byte 0x{b:02x}")
        };
        return Some(format!(
            "must not contain {what}: not valid in a Linux interface name"
        ));
    }
    if name.len() > max {
        return Some(format!(
            "must be at most {max} bytes (Linux interface names are shorter than IFNAMSIZ, {IFNAMSIZ})"
        ));
    }
    None
}

fn validate_cluster_cidr(value: &str, e: &mut Errs) {
    let parts: Vec<&str> = value.split(',').collect();
    if parts.len() > 2 {
        e.invalid(
            "clusterCIDR",
            q(value),
            "must be either a single CIDR or a dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
        );
        return;
    }
    let nets: Vec<Option<IpNet>> = parts.iter().map(|p| parse_cidr(p)).collect();
    for (i, net) in nets.iter().enumerate() {
        if net.is_none() {
            e.invalid(
                format!("clusterCIDR[{i}]"),
                q(parts[i].trim()),
                "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)",
            );
        }
    }
    if let [Some(a), Some(b)] = nets.as_slice()
        && matches!(a, IpNet::V4(_)) == matches!(b, IpNet::V4(_))
    {
        e.invalid(
            "clusterCIDR",
            q(value),
            "must be either a single CIDR or a dual-stack pair of CIDRs (at most one per IP family)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges() {
        for ok in ["", "0", "300-2000", "300+100", "65535", "0-0"] {
            assert!(valid_port_range(ok), "{ok}");
        }
        for bad in ["x", "2000-300", "70000", "1-", "65535+1"] {
            assert!(!valid_port_range(bad), "{bad}");
        }
    }

    #[test]
    fn error_format() {
        let e = FieldError {
            field: "ipvs.syncPeriod".into(),
            kind: FieldErrorKind::Invalid {
                value: dq(GoDuration::from_secs(-1)),
                detail: "must be greater than 0".into(),
            },
        };
        assert_eq!(
            e.to_string(),
            "ipvs.syncPeriod: Invalid value: \"-1s\": must be greater than 0"
        );
    }
}
