//! Command-line flags, accepted the way upstream's pflag-based parser accepts them:
//! `--flag=value` and `--flag value`, Go booleans (`--cleanup`, `--cleanup=false`, `=1`, `=t`, ...),
//! `_` and `-` equivalent in flag names, `-v 4` / `--v=4`. Every flag is optional so that
//! "was it given?" is known (pflag's `Changed`).

use super::types::VModuleItem;
use crate::gotime::{DurationError, GoDuration};
use clap::{ArgAction, Parser};
use std::ffi::OsString;
use std::num::ParseIntError;
use std::path::PathBuf;

/// Why a flag's value could not be parsed; each message is the text the flag error shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    /// Not a Go boolean.
    #[error("strconv.ParseBool: parsing {0:?}: invalid syntax")]
    Bool(String),
    /// Not a Go duration.
    #[error("{0}")]
    Duration(#[source] DurationError),
    /// A `--feature-gates` pair without `=`.
    #[error("missing bool value for {0}")]
    GateWithoutValue(String),
    /// A `--feature-gates` pair without a name.
    #[error("missing feature gate name in {0:?}")]
    GateWithoutName(String),
    /// A `--feature-gates` value that is not a Go boolean.
    #[error("invalid value of {name}={value}, err: {source}")]
    GateValue {
        name: String,
        value: String,
        #[source]
        source: Box<FlagValueError>,
    },
    /// A `--vmodule` item without `=`.
    #[error("{0:?} does not have the pattern=N format")]
    VmoduleFormat(String),
    /// A `--vmodule` item with an empty pattern or a second `=`.
    #[error("invalid vmodule pattern {0:?}")]
    VmodulePattern(String),
    /// A `--vmodule` level that is not a number.
    #[error("parsing verbosity in {item:?}: invalid number")]
    VmoduleLevel {
        item: String,
        #[source]
        source: ParseIntError,
    },
    /// A proxy mode other than IPVS.
    #[error("this binary implements only IPVS mode; use --proxy-mode=ipvs (got {0:?})")]
    ProxyMode(String),
    /// A log format other than text or json.
    #[error("unsupported log format {0:?}: must be \"text\" or \"json\"")]
    LoggingFormat(String),
    /// A port that is not an `int32`.
    #[error("{0}")]
    Port(#[source] ParseIntError),
}

/// Parse a boolean like Go's `strconv.ParseBool`.
pub fn parse_go_bool(s: &str) -> Result<bool, FlagValueError> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(FlagValueError::Bool(s.to_string())),
    }
}

fn parse_duration(s: &str) -> Result<GoDuration, FlagValueError> {
    GoDuration::parse(s).map_err(FlagValueError::Duration)
}

/// One `--feature-gates` argument: comma-separated `Name=bool` pairs.
pub fn parse_feature_gates(s: &str) -> Result<Vec<(String, bool)>, FlagValueError> {
    let mut out = Vec::new();
    for pair in s.split(',') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| FlagValueError::GateWithoutValue(pair.to_string()))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(FlagValueError::GateWithoutName(pair.to_string()));
        }
        let value = parse_go_bool(value.trim()).map_err(|e| FlagValueError::GateValue {
            name: name.to_string(),
            value: value.to_string(),
            source: Box::new(e),
        })?;
        out.push((name.to_string(), value));
    }
    Ok(out)
}

/// One `--vmodule` argument: comma-separated `pattern=N` pairs.
pub fn parse_vmodule(s: &str) -> Result<Vec<VModuleItem>, FlagValueError> {
    let mut out = Vec::new();
    for pair in s.split(',') {
        if pair.is_empty() {
            continue;
        }
        let (pattern, level) = pair
            .split_once('=')
            .ok_or_else(|| FlagValueError::VmoduleFormat(pair.to_string()))?;
        if pattern.is_empty() || pattern.contains('=') {
            return Err(FlagValueError::VmodulePattern(pair.to_string()));
        }
        let verbosity = level
            .parse::<u32>()
            .map_err(|source| FlagValueError::VmoduleLevel {
                item: pair.to_string(),
                source,
            })?;
        out.push(VModuleItem {
            file_pattern: pattern.to_string(),
            verbosity,
        });
    }
    Ok(out)
}

fn parse_proxy_mode(s: &str) -> Result<String, FlagValueError> {
    match s {
        "" | "ipvs" => Ok(s.to_string()),
        _ => Err(FlagValueError::ProxyMode(s.to_string())),
    }
}

fn parse_logging_format(s: &str) -> Result<String, FlagValueError> {
    match s {
        "text" | "json" => Ok(s.to_string()),
        _ => Err(FlagValueError::LoggingFormat(s.to_string())),
    }
}

fn parse_port(s: &str) -> Result<i32, FlagValueError> {
    s.parse::<i32>().map_err(FlagValueError::Port)
}

/// Rewrite `--some_flag[=v]` to `--some-flag[=v]` (pflag's word-separator normalisation).
/// Values and everything after a bare `--` are left untouched.
pub fn normalize_args<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut out = Vec::new();
    let mut passthrough = false;
    for (i, arg) in args.into_iter().enumerate() {
        let arg: OsString = arg.into();
        if i == 0 || passthrough {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        if let Some(body) = text.strip_prefix("--") {
            let (name, rest) = match body.find('=') {
                Some(idx) => body.split_at(idx),
                None => (body, ""),
            };
            out.push(OsString::from(format!(
                "--{}{rest}",
                name.replace('_', "-")
            )));
        } else {
            out.push(arg);
        }
    }
    out
}

/// The description printed above `Usage:`.
pub const LONG_ABOUT: &str = "kube-proxy-rs runs on every node and programs IPVS virtual servers, ipsets and iptables \
rules so that Service cluster IPs, NodePorts, external IPs and load-balancer IPs reach their endpoints.
It is a drop-in replacement for kube-proxy in IPVS mode and reads the same flags and configuration file.
Flags marked \"Ignored with --config\" have no effect when a configuration file is given.";

/// kube-proxy's flags (Linux set, plus accepted legacy flags).
#[derive(Debug, Default, Clone, Parser)]
#[command(
    name = "kube-proxy",
    about = "kube-proxy-rs: the Kubernetes network proxy (IPVS mode) for each node.",
    long_about = LONG_ABOUT,
    disable_version_flag = true,
    args_override_self = true,
    allow_negative_numbers = true
)]
pub struct Flags {
    /// Path of a KubeProxyConfiguration file; when given, most other flags are ignored.
    #[arg(long, value_name = "string")]
    pub config: Option<PathBuf>,
    /// Write the fully defaulted configuration to this file and exit.
    #[arg(long, value_name = "string")]
    pub write_config_to: Option<PathBuf>,
    /// Remove the rules this proxy created (IPVS, ipsets, iptables) and exit.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub cleanup: Option<bool>,
    /// Do the steps needing full root privileges, then exit; a later run then only needs CAP_NET_ADMIN.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub init_only: Option<bool>,
    /// Not in upstream (kube-proxy-rs only): export per-Service IPVS traffic counters on /metrics, read from
    /// the kernel at each scrape. Also applies with --config; the file has no such field.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_traffic_metrics: Option<bool>,
    /// Not in upstream (kube-proxy-rs only): remove a draining TCP real server (weight 0 after its endpoint
    /// left) once it has drained this long, even if connections remain (e.g. 10m; default 0: never, as
    /// upstream). Also applies with --config; the file has no such field.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_max_drain_time: Option<GoDuration>,
    /// Not in upstream (kube-proxy-rs only): check every connection the node itself makes to a LoadBalancer
    /// IP against the Service's loadBalancerSourceRanges, whatever its source address (upstream drops only
    /// those from the LB IP, when no range covers the node IP). Also applies with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_lb_source_ranges_for_node: Option<bool>,
    /// Not in upstream (kube-proxy-rs only): answer no ARP request for the ClusterIPs and LoadBalancer IPs
    /// bound to kube-ipvs0, and still for external IPs and the node's own addresses on any interface
    /// (upstream: all of them, or with ipvs.strictARP none on another interface). Also applies with
    /// --config; cannot be combined with strictARP.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_arp_per_address: Option<bool>,
    /// Not in upstream (kube-proxy-rs only): masquerade the node's own connections (host-network pods too)
    /// to the LoadBalancer and external IPs of externalTrafficPolicy: Local Services, as iptables mode does,
    /// so that endpoints on other nodes can answer them. Also applies with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_etp_local_node_masquerade: Option<bool>,
    /// Not in upstream (kube-proxy-rs only): answer /debug/* on the metrics server (the explanation of every
    /// Service: endpoints, pod IPs, nodes, zones) to other hosts too; by default only this node is answered.
    /// Also applies with --config; the file has no such field.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub allow_remote_debug: Option<bool>,
    /// Print version information and exit (--version=raw prints it bare).
    #[arg(long, value_name = "version", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub version: Option<String>,

    /// Feature gates as comma-separated Name=true|false pairs; any gate name is accepted, none changes behaviour. Ignored with --config.
    #[arg(long, value_name = "mapStringBool", action = ArgAction::Append, value_parser = parse_feature_gates)]
    pub feature_gates: Vec<Vec<(String, bool)>>,
    /// kubeconfig file with the API server location and credentials (empty: in-cluster config). Ignored with --config.
    #[arg(long, value_name = "string")]
    pub kubeconfig: Option<String>,
    /// API server address; overrides the one in the kubeconfig.
    #[arg(long, value_name = "string")]
    pub master: Option<String>,
    /// Content type used for requests to the API server. Ignored with --config.
    #[arg(long, value_name = "string")]
    pub kube_api_content_type: Option<String>,
    /// Client burst towards the API server. Ignored with --config.
    #[arg(long, value_name = "int32")]
    pub kube_api_burst: Option<i32>,
    /// Client queries per second towards the API server. Ignored with --config.
    #[arg(long, value_name = "float32")]
    pub kube_api_qps: Option<f32>,

    /// Node name to use instead of the host name (also applies with --config).
    #[arg(long, value_name = "string")]
    pub hostname_override: Option<String>,
    /// Override of the node's primary IP (nothing binds to it despite the name). Ignored with --config.
    #[arg(long, value_name = "ip")]
    pub bind_address: Option<String>,
    /// ip:port of the health check server; empty disables it. Ignored with --config.
    #[arg(long, value_name = "ipport")]
    pub healthz_bind_address: Option<String>,
    /// ip:port of the metrics server; empty disables it. Ignored with --config.
    #[arg(long, value_name = "ipport")]
    pub metrics_bind_address: Option<String>,
    /// Exit with an error when a server port cannot be bound. Ignored with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub bind_address_hard_fail: Option<bool>,
    /// Accepted for compatibility; no profiling endpoints are served. Ignored with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub profiling: Option<bool>,
    /// Previous minor version (e.g. 1.16) whose hidden metrics should still be shown. Ignored with --config.
    #[arg(long, value_name = "string")]
    pub show_hidden_metrics_for_version: Option<String>,
    /// Proxy mode; only 'ipvs' is implemented (empty also means ipvs here). Ignored with --config.
    #[arg(long, value_name = "ProxyMode", value_parser = parse_proxy_mode)]
    pub proxy_mode: Option<String>,

    /// fwmark bit used to mark packets that need SNAT, in [0, 31]. Ignored with --config.
    #[arg(long, value_name = "int32")]
    pub iptables_masquerade_bit: Option<i32>,
    /// SNAT all traffic sent to Service cluster IPs (some CNI plugins need it). Ignored with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub masquerade_all: Option<bool>,
    /// iptables mode only: allow NodePorts on localhost (no effect in IPVS mode).
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub iptables_localhost_nodeports: Option<bool>,
    /// iptables mode only: full resync interval (no effect in IPVS mode).
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub iptables_sync_period: Option<GoDuration>,
    /// iptables mode only: minimum resync interval (no effect in IPVS mode).
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub iptables_min_sync_period: Option<GoDuration>,

    /// Longest interval between full IPVS syncs (e.g. 5s, 1m, 2h22m); must be above 0. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_sync_period: Option<GoDuration>,
    /// Shortest interval between IPVS syncs; 0 syncs on every Service/EndpointSlice change. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_min_sync_period: Option<GoDuration>,
    /// IPVS scheduler (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos; empty means rr). Ignored with --config.
    #[arg(long, value_name = "string")]
    pub ipvs_scheduler: Option<String>,
    /// Comma-separated CIDRs whose IPVS services are never deleted by syncs (--cleanup still flushes IPVS). Ignored with --config.
    #[arg(long, value_name = "strings", action = ArgAction::Append)]
    pub ipvs_exclude_cidrs: Vec<String>,
    /// Set arp_ignore=1 and arp_announce=2 (strict ARP). Ignored with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_strict_arp: Option<bool>,
    /// IPVS idle TCP timeout; 0 keeps the kernel's value. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_tcp_timeout: Option<GoDuration>,
    /// IPVS timeout for TCP connections after a FIN; 0 keeps the kernel's value. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_tcpfin_timeout: Option<GoDuration>,
    /// IPVS UDP timeout; 0 keeps the kernel's value. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub ipvs_udp_timeout: Option<GoDuration>,

    /// How local traffic is recognised: ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix. Ignored with --config.
    #[arg(long, value_name = "LocalMode")]
    pub detect_local_mode: Option<String>,
    /// Bridge whose traffic is local with --detect-local-mode=BridgeInterface. Ignored with --config.
    #[arg(long, value_name = "string")]
    pub pod_bridge_interface: Option<String>,
    /// Interface name prefix whose traffic is local with --detect-local-mode=InterfaceNamePrefix. Ignored with --config.
    #[arg(long, value_name = "string")]
    pub pod_interface_name_prefix: Option<String>,
    /// Pod CIDR of the cluster (a comma-separated IPv4,IPv6 pair for dual-stack), for ClusterCIDR detection. Ignored with --config.
    #[arg(long, value_name = "string")]
    pub cluster_cidr: Option<String>,
    /// CIDRs, or 'primary' alone, limiting the node IPs that accept NodePorts (unset: all). Ignored with --config.
    #[arg(long, value_name = "strings", action = ArgAction::Append)]
    pub nodeport_addresses: Vec<String>,

    /// oom_score_adj of the process, in [-1000, 1000]. Ignored with --config.
    #[arg(long, value_name = "int32")]
    pub oom_score_adj: Option<i32>,
    /// Tracked connections per CPU core (0 leaves nf_conntrack_max alone and ignores --conntrack-min). Ignored with --config.
    #[arg(long, value_name = "int32")]
    pub conntrack_max_per_core: Option<i32>,
    /// Lower bound for nf_conntrack_max regardless of --conntrack-max-per-core. Ignored with --config.
    #[arg(long, value_name = "int32")]
    pub conntrack_min: Option<i32>,
    /// Conntrack idle timeout of established TCP connections (0 leaves it alone). Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_established: Option<GoDuration>,
    /// Conntrack timeout of TCP connections in CLOSE_WAIT. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_close_wait: Option<GoDuration>,
    /// Make conntrack accept out-of-window TCP packets (nf_conntrack_tcp_be_liberal=1). Ignored with --config.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub conntrack_tcp_be_liberal: Option<bool>,
    /// Conntrack timeout of unreplied UDP flows (0 leaves it alone). Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub conntrack_udp_timeout: Option<GoDuration>,
    /// Conntrack timeout of assured UDP streams (0 leaves it alone). Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub conntrack_udp_timeout_stream: Option<GoDuration>,
    /// Accepted for compatibility (watches relist on their own); must be above 0. Ignored with --config.
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub config_sync_period: Option<GoDuration>,

    /// Deprecated: port of the health check server (0 disables); use --healthz-bind-address.
    #[arg(long, value_name = "int32", hide = true, value_parser = parse_port)]
    pub healthz_port: Option<i32>,
    /// Deprecated: port of the metrics server (0 disables); use --metrics-bind-address.
    #[arg(long, value_name = "int32", hide = true, value_parser = parse_port)]
    pub metrics_port: Option<i32>,

    /// Log format: text (klog) or json.
    #[arg(long, value_name = "string", value_parser = parse_logging_format)]
    pub logging_format: Option<String>,
    /// Longest time between log flushes (lines are written unbuffered here).
    #[arg(long, value_name = "duration", value_parser = parse_duration)]
    pub log_flush_frequency: Option<GoDuration>,
    /// Log verbosity: V(N) messages and lower are printed.
    #[arg(short = 'v', long = "v", value_name = "Level")]
    pub v: Option<u32>,
    /// Per-file verbosity as comma-separated pattern=N pairs (file base names without .rs; text and JSON formats).
    #[arg(long, value_name = "pattern=N,...", action = ArgAction::Append, value_parser = parse_vmodule)]
    pub vmodule: Vec<Vec<VModuleItem>>,
    /// JSON format: errors to stderr, info to stdout.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub log_json_split_stream: Option<bool>,
    /// JSON format with split streams: info buffer size.
    #[arg(long, value_name = "quantity")]
    pub log_json_info_buffer_size: Option<String>,
    /// Text format: errors to stderr, info to stdout.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub log_text_split_stream: Option<bool>,
    /// Text format with split streams: info buffer size.
    #[arg(long, value_name = "quantity")]
    pub log_text_info_buffer_size: Option<String>,

    /// Removed upstream (userspace proxy); accepted and ignored.
    #[arg(long, value_name = "port-range", hide = true)]
    pub proxy_port_range: Option<String>,
    /// Removed upstream (userspace proxy); accepted and ignored.
    #[arg(long, value_name = "duration", hide = true, value_parser = parse_duration)]
    pub udp_timeout: Option<GoDuration>,
    /// Legacy klog flags: accepted and ignored (logging goes to stderr).
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub add_dir_header: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub alsologtostderr: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub logtostderr: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub one_output: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub skip_headers: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "bool", long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub skip_log_headers: Option<bool>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "traceLocation", long, hide = true)]
    pub log_backtrace_at: Option<String>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "string", long, hide = true)]
    pub log_dir: Option<String>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "string", long, hide = true)]
    pub log_file: Option<String>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "uint", long, hide = true)]
    pub log_file_max_size: Option<u64>,
    /// Legacy klog flag: accepted and ignored.
    #[arg(value_name = "severity", long, hide = true)]
    pub stderrthreshold: Option<String>,
}

impl Flags {
    /// Names of the legacy flags that were given (for warnings).
    pub fn legacy_flags_given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let checks: [(&'static str, bool); 11] = [
            ("add-dir-header", self.add_dir_header.is_some()),
            ("alsologtostderr", self.alsologtostderr.is_some()),
            ("logtostderr", self.logtostderr.is_some()),
            ("one-output", self.one_output.is_some()),
            ("skip-headers", self.skip_headers.is_some()),
            ("skip-log-headers", self.skip_log_headers.is_some()),
            ("log-backtrace-at", self.log_backtrace_at.is_some()),
            ("log-dir", self.log_dir.is_some()),
            ("log-file", self.log_file.is_some()),
            ("log-file-max-size", self.log_file_max_size.is_some()),
            ("stderrthreshold", self.stderrthreshold.is_some()),
        ];
        for (name, given) in checks {
            if given {
                out.push(name);
            }
        }
        out
    }

    /// Names of the flags that only fill the configuration (ignored when `--config` is set).
    pub fn config_flags_given(&self) -> Vec<&'static str> {
        // `name => given` pairs, one line each.
        macro_rules! given {
            ($($name:literal => $given:expr,)*) => { [$(($name, $given)),*] };
        }
        let checks: [(&'static str, bool); 41] = given! {
            "feature-gates" => !self.feature_gates.is_empty(),
            "kubeconfig" => self.kubeconfig.is_some(),
            "kube-api-content-type" => self.kube_api_content_type.is_some(),
            "kube-api-burst" => self.kube_api_burst.is_some(),
            "kube-api-qps" => self.kube_api_qps.is_some(),
            "bind-address" => self.bind_address.is_some(),
            "healthz-bind-address" => self.healthz_bind_address.is_some(),
            "metrics-bind-address" => self.metrics_bind_address.is_some(),
            "bind-address-hard-fail" => self.bind_address_hard_fail.is_some(),
            "profiling" => self.profiling.is_some(),
            "show-hidden-metrics-for-version" => self.show_hidden_metrics_for_version.is_some(),
            "proxy-mode" => self.proxy_mode.is_some(),
            "iptables-masquerade-bit" => self.iptables_masquerade_bit.is_some(),
            "masquerade-all" => self.masquerade_all.is_some(),
            "iptables-localhost-nodeports" => self.iptables_localhost_nodeports.is_some(),
            "iptables-sync-period" => self.iptables_sync_period.is_some(),
            "iptables-min-sync-period" => self.iptables_min_sync_period.is_some(),
            "ipvs-sync-period" => self.ipvs_sync_period.is_some(),
            "ipvs-min-sync-period" => self.ipvs_min_sync_period.is_some(),
            "ipvs-scheduler" => self.ipvs_scheduler.is_some(),
            "ipvs-exclude-cidrs" => !self.ipvs_exclude_cidrs.is_empty(),
            "ipvs-strict-arp" => self.ipvs_strict_arp.is_some(),
            "ipvs-tcp-timeout" => self.ipvs_tcp_timeout.is_some(),
            "ipvs-tcpfin-timeout" => self.ipvs_tcpfin_timeout.is_some(),
            "ipvs-udp-timeout" => self.ipvs_udp_timeout.is_some(),
            "detect-local-mode" => self.detect_local_mode.is_some(),
            "pod-bridge-interface" => self.pod_bridge_interface.is_some(),
            "pod-interface-name-prefix" => self.pod_interface_name_prefix.is_some(),
            "cluster-cidr" => self.cluster_cidr.is_some(),
            "nodeport-addresses" => !self.nodeport_addresses.is_empty(),
            "oom-score-adj" => self.oom_score_adj.is_some(),
            "conntrack-max-per-core" => self.conntrack_max_per_core.is_some(),
            "conntrack-min" => self.conntrack_min.is_some(),
            "conntrack-tcp-timeout-established" => self.conntrack_tcp_timeout_established.is_some(),
            "conntrack-tcp-timeout-close-wait" => self.conntrack_tcp_timeout_close_wait.is_some(),
            "conntrack-tcp-be-liberal" => self.conntrack_tcp_be_liberal.is_some(),
            "conntrack-udp-timeout" => self.conntrack_udp_timeout.is_some(),
            "conntrack-udp-timeout-stream" => self.conntrack_udp_timeout_stream.is_some(),
            "config-sync-period" => self.config_sync_period.is_some(),
            "healthz-port" => self.healthz_port.is_some(),
            "metrics-port" => self.metrics_port.is_some(),
        };
        checks
            .into_iter()
            .filter_map(|(name, given)| given.then_some(name))
            .collect()
    }
}

/// Split comma-separated list arguments (pflag `StringSlice`: repeated flags append).
pub fn split_list(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_bools() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Ok(false));
        }
        for bad in ["yes", "tRUE", "", "2"] {
            assert!(parse_go_bool(bad).is_err());
        }
    }

    #[test]
    fn normalizes_underscores_in_names_only() {
        let out = normalize_args([
            "kube-proxy",
            "--hostname_override=my_node",
            "--ipvs_scheduler",
            "w_rr",
            "-v",
            "--",
            "--a_b",
        ]);
        let out: Vec<String> = out.into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(
            out,
            [
                "kube-proxy",
                "--hostname-override=my_node",
                "--ipvs-scheduler",
                "w_rr",
                "-v",
                "--",
                "--a_b"
            ]
        );
    }

    #[test]
    fn feature_gates() {
        assert_eq!(
            parse_feature_gates("KubeProxyIPVS=true, Foo=false").unwrap(),
            vec![
                ("KubeProxyIPVS".to_string(), true),
                ("Foo".to_string(), false)
            ]
        );
        assert!(parse_feature_gates("Foo").is_err());
        assert!(parse_feature_gates("Foo=maybe").is_err());
        assert!(parse_feature_gates("=true").is_err());
    }

    #[test]
    fn vmodule() {
        let v = parse_vmodule("proxier*=4,x=2").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].file_pattern, "proxier*");
        assert_eq!(v[0].verbosity, 4);
        assert!(parse_vmodule("x").is_err());
        assert!(parse_vmodule("x=y").is_err());
    }

    #[test]
    fn flag_value_errors_keep_their_cause() {
        use std::error::Error;
        let e = parse_feature_gates("Foo=maybe").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value of Foo=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
        let cause = e.source().map(ToString::to_string);
        assert_eq!(
            cause.as_deref(),
            Some("strconv.ParseBool: parsing \"maybe\": invalid syntax")
        );
        let e = parse_vmodule("x=y").unwrap_err();
        assert_eq!(
            e.to_string(),
            "parsing verbosity in \"x=y\": invalid number"
        );
        assert!(e.source().is_some_and(|c| c.is::<ParseIntError>()));
        let e = parse_duration("5 parsecs").unwrap_err();
        assert!(e.source().is_some_and(|c| c.is::<DurationError>()));
        assert!(parse_go_bool("yes").unwrap_err().source().is_none());
    }
}
