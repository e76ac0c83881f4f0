//! Typed mirror of `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`).
//!
//! Every field of the upstream v1alpha1 schema is present, including sections this IPVS-only
//! binary ignores, so real config files decode. Fields are declared in alphabetical order of
//! their YAML names, which is the order upstream writes them. A `null` value means "unset"
//! (the zero value, or `None` for upstream's pointer fields), as in Go.

use crate::gotime::{GoDuration, TimeOrDuration};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// The API group/version this binary reads and writes.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// The object kind of the configuration file.
pub const KIND: &str = "KubeProxyConfiguration";

/// Decode a value where YAML `null` means the type's zero value (Go semantics for non-pointers).
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// A string value; like Go's JSON decoding, numbers and booleans are not strings.
struct GoStr(String);

impl<'de> Deserialize<'de> for GoStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = GoStr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string (quote values that look like numbers or booleans)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GoStr, E> {
                Ok(GoStr(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Decode a string field: `null` is the empty string; numbers and booleans are type errors.
fn go_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Option::<GoStr>::deserialize(deserializer).map(|s| s.map(|s| s.0).unwrap_or_default())
}

/// Decode an optional list of strings (`null` stays `None`, as Go's nil slice).
fn go_string_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    Option::<Vec<GoStr>>::deserialize(deserializer)
        .map(|list| list.map(|items| items.into_iter().map(|s| s.0).collect()))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Write a float32 as upstream does (Go's JSON encoding, then YAML): integral values as integers,
/// others with their shortest float32 digits.
fn go_float32<S: Serializer>(v: &f32, serializer: S) -> Result<S::Ok, S::Error> {
    const I64_RANGE: f32 = 9.2e18;
    if v.is_finite() && v.fract() == 0.0 && v.abs() < I64_RANGE {
        serializer.serialize_i64(*v as i64)
    } else {
        serializer.serialize_f64(v.to_string().parse().unwrap_or(f64::from(*v)))
    }
}

/// A resource quantity such as `"0"` or `"1Mi"` (kept as text; only logging uses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl Default for Quantity {
    fn default() -> Self {
        Quantity("0".to_string())
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

struct QuantityVisitor;

impl serde::de::Visitor<'_> for QuantityVisitor {
    type Value = Quantity;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a quantity such as \"0\" or \"1Mi\"")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
        if v.is_empty() {
            return Err(E::custom(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ));
        }
        Ok(Quantity(v.to_string()))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
        Ok(Quantity(v.to_string()))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
        Ok(Quantity(v.to_string()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
        Ok(Quantity(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// Declares each struct twice: the public lenient type (unknown fields ignored) and a strict
/// twin in `strict` (unknown fields rejected) with identical fields, used for the first pass.
macro_rules! config_structs {
    ($(
        $(#[$smeta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    )*) => {
        $(
            $(#[$smeta])*
            #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
            #[serde(rename_all = "camelCase", default)]
            pub struct $name {
                $( $(#[$fmeta])* pub $field: $ty, )*
            }
        )*

        /// Strict twins of the configuration structs (unknown fields are errors).
        pub(crate) mod strict {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[derive(Debug, Default, Deserialize)]
                #[serde(rename_all = "camelCase", default, deny_unknown_fields)]
                #[allow(dead_code)]
                pub(crate) struct $name {
                    $( $(#[$fmeta])* pub $field: $ty, )*
                }
            )*
        }
    };
}

config_structs! {
    /// The whole kube-proxy configuration file.
    pub struct ProxyConfig {
        /// `kubeproxy.config.k8s.io/v1alpha1`.
        #[serde(deserialize_with = "go_string")]
        pub api_version: String,
        /// Overrides the node's primary IP (historical name; nothing binds to it).
        #[serde(deserialize_with = "go_string")]
        pub bind_address: String,
        /// Treat failure to bind the healthz/metrics ports as fatal.
        #[serde(deserialize_with = "nullable")]
        pub bind_address_hard_fail: bool,
        /// How to talk to the API server.
        #[serde(deserialize_with = "nullable")]
        pub client_connection: ClientConnection,
        /// Pod CIDR(s), comma-separated for dual-stack; used by `detectLocalMode: ClusterCIDR`.
        #[serde(rename = "clusterCIDR", deserialize_with = "go_string")]
        pub cluster_cidr: String,
        /// How often informers resync from the API server.
        #[serde(deserialize_with = "nullable")]
        pub config_sync_period: GoDuration,
        /// Conntrack sysctls.
        #[serde(deserialize_with = "nullable")]
        pub conntrack: ConntrackConfig,
        /// Settings for the interface-based local-traffic detectors.
        #[serde(deserialize_with = "nullable")]
        pub detect_local: DetectLocalConfig,
        /// `ClusterCIDR` (default), `NodeCIDR`, `BridgeInterface` or `InterfaceNamePrefix`.
        #[serde(deserialize_with = "go_string")]
        pub detect_local_mode: String,
        /// Accepted for compatibility; no profiling endpoints are served.
        #[serde(deserialize_with = "nullable")]
        pub enable_profiling: bool,
        /// Feature gates by name.
        #[serde(deserialize_with = "nullable", skip_serializing_if = "BTreeMap::is_empty")]
        pub feature_gates: BTreeMap<String, bool>,
        /// `ip:port` of the health check server (empty disables it).
        #[serde(deserialize_with = "go_string")]
        pub healthz_bind_address: String,
        /// Node name to use instead of the hostname.
        #[serde(deserialize_with = "go_string")]
        pub hostname_override: String,
        /// iptables-mode settings (`masqueradeBit`/`masqueradeAll` also apply to IPVS mode).
        #[serde(deserialize_with = "nullable")]
        pub iptables: IptablesConfig,
        /// IPVS-mode settings.
        #[serde(deserialize_with = "nullable")]
        pub ipvs: IpvsConfig,
        /// `KubeProxyConfiguration`.
        #[serde(deserialize_with = "go_string")]
        pub kind: String,
        /// Logging settings (component-base `LoggingConfiguration`).
        #[serde(deserialize_with = "nullable")]
        pub logging: LoggingConfig,
        /// `ip:port` of the metrics server (empty disables it).
        #[serde(deserialize_with = "go_string")]
        pub metrics_bind_address: String,
        /// Proxy mode; this binary implements only `ipvs` (empty means `ipvs` here).
        #[serde(deserialize_with = "go_string")]
        pub mode: String,
        /// nftables-mode settings (ignored).
        #[serde(deserialize_with = "nullable")]
        pub nftables: NftablesConfig,
        /// CIDRs, or the keyword `primary` alone, selecting NodePort addresses.
        #[serde(deserialize_with = "go_string_list")]
        pub node_port_addresses: Option<Vec<String>>,
        /// oom_score_adj of the process.
        pub oom_score_adj: Option<i32>,
        /// Unused (was for the userspace proxy).
        #[serde(deserialize_with = "go_string")]
        pub port_range: String,
        /// Previous minor version whose hidden metrics should be shown.
        #[serde(deserialize_with = "go_string")]
        pub show_hidden_metrics_for_version: String,
        /// Windows HNS settings (ignored).
        #[serde(deserialize_with = "nullable")]
        pub winkernel: WinkernelConfig,
        /// Windows service integration (ignored).
        #[serde(deserialize_with = "nullable", skip_serializing_if = "is_false")]
        pub windows_run_as_service: bool,
    }

    /// component-base `ClientConnectionConfiguration`.
    pub struct ClientConnection {
        /// `Accept` header override.
        #[serde(deserialize_with = "go_string")]
        pub accept_content_types: String,
        /// Client-side burst.
        #[serde(deserialize_with = "nullable")]
        pub burst: i32,
        /// Content type of requests.
        #[serde(deserialize_with = "go_string")]
        pub content_type: String,
        /// Path to a kubeconfig file (empty: in-cluster config).
        #[serde(deserialize_with = "go_string")]
        pub kubeconfig: String,
        /// Client-side queries per second.
        #[serde(deserialize_with = "nullable", serialize_with = "go_float32")]
        pub qps: f32,
    }

    /// Conntrack sysctl settings.
    pub struct ConntrackConfig {
        /// Connections tracked per CPU core (0: leave `nf_conntrack_max` alone).
        pub max_per_core: Option<i32>,
        /// Lower bound for `nf_conntrack_max`.
        pub min: Option<i32>,
        /// Set `nf_conntrack_tcp_be_liberal`.
        #[serde(deserialize_with = "nullable")]
        pub tcp_be_liberal: bool,
        /// `nf_conntrack_tcp_timeout_close_wait` (0: leave as is).
        pub tcp_close_wait_timeout: Option<GoDuration>,
        /// `nf_conntrack_tcp_timeout_established` (0: leave as is).
        pub tcp_established_timeout: Option<GoDuration>,
        /// `nf_conntrack_udp_timeout_stream` (0: leave as is).
        #[serde(deserialize_with = "nullable")]
        pub udp_stream_timeout: GoDuration,
        /// `nf_conntrack_udp_timeout` (0: leave as is).
        #[serde(deserialize_with = "nullable")]
        pub udp_timeout: GoDuration,
    }

    /// Settings for the interface-based local-traffic detectors.
    pub struct DetectLocalConfig {
        /// Bridge for `detectLocalMode: BridgeInterface`.
        #[serde(deserialize_with = "go_string")]
        pub bridge_interface: String,
        /// Interface name prefix for `detectLocalMode: InterfaceNamePrefix`.
        #[serde(deserialize_with = "go_string")]
        pub interface_name_prefix: String,
    }

    /// iptables-mode settings.
    pub struct IptablesConfig {
        /// Allow NodePorts on localhost (iptables mode only; ignored).
        pub localhost_node_ports: Option<bool>,
        /// SNAT all Service traffic.
        #[serde(deserialize_with = "nullable")]
        pub masquerade_all: bool,
        /// fwmark bit used to mark packets for SNAT (also used in IPVS mode).
        pub masquerade_bit: Option<i32>,
        /// iptables-mode minimum resync interval (ignored).
        #[serde(deserialize_with = "nullable")]
        pub min_sync_period: GoDuration,
        /// SNAT with the node's InternalIP (iptables mode only; ignored). Read for compatibility but
        /// never written: no upstream release has the key.
        #[serde(rename = "snatNodeInternalIP", skip_serializing)]
        pub snat_node_internal_ip: Option<bool>,
        /// iptables-mode full resync interval (ignored).
        #[serde(deserialize_with = "nullable")]
        pub sync_period: GoDuration,
    }

    /// IPVS-mode settings.
    pub struct IpvsConfig {
        /// IPVS services inside these CIDRs are never touched by cleanup.
        #[serde(rename = "excludeCIDRs")]
        #[serde(deserialize_with = "go_string_list")]
        pub exclude_cidrs: Option<Vec<String>>,
        /// Minimum interval between syncs (0: sync on every change).
        #[serde(deserialize_with = "nullable")]
        pub min_sync_period: GoDuration,
        /// IPVS scheduler (empty means `rr`).
        #[serde(deserialize_with = "go_string")]
        pub scheduler: String,
        /// Set `arp_ignore=1`/`arp_announce=2`.
        #[serde(rename = "strictARP", deserialize_with = "nullable")]
        pub strict_arp: bool,
        /// Maximum interval between full syncs.
        #[serde(deserialize_with = "nullable")]
        pub sync_period: GoDuration,
        /// IPVS TCP-after-FIN timeout (0: leave as is).
        #[serde(deserialize_with = "nullable")]
        pub tcp_fin_timeout: GoDuration,
        /// IPVS idle TCP timeout (0: leave as is).
        #[serde(deserialize_with = "nullable")]
        pub tcp_timeout: GoDuration,
        /// IPVS UDP timeout (0: leave as is).
        #[serde(deserialize_with = "nullable")]
        pub udp_timeout: GoDuration,
    }

    /// nftables-mode settings (ignored by this binary).
    pub struct NftablesConfig {
        /// SNAT all Service traffic.
        #[serde(deserialize_with = "nullable")]
        pub masquerade_all: bool,
        /// fwmark bit for SNAT.
        pub masquerade_bit: Option<i32>,
        /// Minimum resync interval.
        #[serde(deserialize_with = "nullable")]
        pub min_sync_period: GoDuration,
        /// Full resync interval.
        #[serde(deserialize_with = "nullable")]
        pub sync_period: GoDuration,
    }

    /// Windows HNS settings (ignored by this binary).
    pub struct WinkernelConfig {
        /// Create HNS policies with DSR.
        #[serde(rename = "enableDSR", deserialize_with = "nullable")]
        pub enable_dsr: bool,
        /// Forward the Service VIP for health-check ports.
        #[serde(deserialize_with = "nullable")]
        pub forward_health_check_vip: bool,
        /// HNS network name.
        #[serde(deserialize_with = "go_string")]
        pub network_name: String,
        /// Root HNS endpoint name.
        #[serde(deserialize_with = "go_string")]
        pub root_hns_endpoint_name: String,
        /// Source VIP for NAT.
        #[serde(deserialize_with = "go_string")]
        pub source_vip: String,
    }

    /// component-base `LoggingConfiguration`.
    pub struct LoggingConfig {
        /// Maximum time between log flushes.
        #[serde(deserialize_with = "nullable")]
        pub flush_frequency: TimeOrDuration,
        /// `text` or `json`.
        #[serde(deserialize_with = "go_string", skip_serializing_if = "String::is_empty")]
        pub format: String,
        /// Per-format options.
        #[serde(deserialize_with = "nullable")]
        pub options: LoggingFormatOptions,
        /// Verbosity (klog `-v`).
        #[serde(deserialize_with = "nullable")]
        pub verbosity: u32,
        /// Per-file verbosity overrides.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub vmodule: Option<Vec<VModuleItem>>,
    }

    /// Options of the `json` and `text` log formats.
    pub struct LoggingFormatOptions {
        /// `json` format options.
        #[serde(deserialize_with = "nullable")]
        pub json: LogOutputOptions,
        /// `text` format options.
        #[serde(deserialize_with = "nullable")]
        pub text: LogOutputOptions,
    }

    /// Output routing of one log format.
    pub struct LogOutputOptions {
        /// Buffer size for info messages when split.
        #[serde(deserialize_with = "nullable")]
        pub info_buffer_size: Quantity,
        /// Write errors to stderr and info to stdout.
        #[serde(deserialize_with = "nullable", skip_serializing_if = "is_false")]
        pub split_stream: bool,
    }

    /// One `vmodule` entry.
    pub struct VModuleItem {
        /// File name pattern.
        #[serde(deserialize_with = "go_string")]
        pub file_pattern: String,
        /// Verbosity for matching files.
        #[serde(deserialize_with = "nullable")]
        pub verbosity: u32,
    }
}
