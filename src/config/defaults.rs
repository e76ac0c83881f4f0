//! Defaulting as upstream (`pkg/proxy/apis/config/v1alpha1/defaults.go` plus the Linux
//! platform defaults): zero values and nulls mean "use the default".

use super::types::{API_VERSION, KIND, ProxyConfig, Quantity};
use crate::gotime::{GoDuration, TimeOrDuration};
use std::net::IpAddr;

/// Port of the health check server.
pub const HEALTHZ_PORT: u16 = 10256;
/// Port of the metrics server.
pub const METRICS_PORT: u16 = 10249;
/// Default `oomScoreAdj`.
pub const OOM_SCORE_ADJ: i32 = -999;
/// Default `iptables.masqueradeBit`.
pub const MASQUERADE_BIT: i32 = 14;
/// Default `detectLocalMode`.
pub const DETECT_LOCAL_MODE: &str = "ClusterCIDR";
/// Default `clientConnection.contentType`.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why text is not `host:port`; the messages are Go's `net.SplitHostPort` wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("address {address}: {problem}")]
pub struct HostPortError {
    /// The text given.
    pub address: String,
    /// What is wrong with it.
    pub problem: HostPortProblem,
}

/// What is wrong with a `host:port` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostPortProblem {
    /// `[` without `]`.
    #[error("missing ']' in address")]
    MissingBracket,
    /// No `:port`.
    #[error("missing port in address")]
    MissingPort,
    /// An unbracketed IPv6 host or a second port.
    #[error("too many colons in address")]
    TooManyColons,
    /// A bracket in an unbracketed host.
    #[error("unexpected '[' or ']' in address")]
    UnexpectedBracket,
}

/// Split `host:port` like Go's `net.SplitHostPort` (IPv6 hosts must be bracketed).
pub fn split_host_port(input: &str) -> Result<(&str, &str), HostPortError> {
    let fail = |problem| HostPortError {
        address: input.to_string(),
        problem,
    };
    if let Some(rest) = input.strip_prefix('[') {
        let end = rest
            .find(']')
            .ok_or_else(|| fail(HostPortProblem::MissingBracket))?;
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| fail(HostPortProblem::MissingPort))?;
        if port.contains(':') || port.contains('[') || port.contains(']') {
            return Err(fail(HostPortProblem::TooManyColons));
        }
        return Ok((host, port));
    }
    let idx = input
        .rfind(':')
        .ok_or_else(|| fail(HostPortProblem::MissingPort))?;
    let (host, port) = (&input[..idx], &input[idx + 1..]);
    if host.contains(':') {
        return Err(fail(HostPortProblem::TooManyColons));
    }
    if host.contains('[') || host.contains(']') {
        return Err(fail(HostPortProblem::UnexpectedBracket));
    }
    Ok((host, port))
}

/// Add `:port` to a bare IP (bracketing IPv6); anything else is returned unchanged.
pub fn append_port_if_needed(addr: &str, port: u16) -> String {
    if split_host_port(addr).is_ok() {
        return addr.to_string();
    }
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => format!("{addr}:{port}"),
        Ok(IpAddr::V6(_)) => format!("[{addr}]:{port}"),
        Err(_) => addr.to_string(),
    }
}

/// Fill every unset field with upstream's default (and the type metadata). `mode` is left
/// alone (see `options`).
pub fn apply_defaults(c: &mut ProxyConfig) {
    if c.api_version.is_empty() {
        c.api_version = API_VERSION.to_string();
    }
    if c.kind.is_empty() {
        c.kind = KIND.to_string();
    }
    default_servers(c);
    c.oom_score_adj.get_or_insert(OOM_SCORE_ADJ);
    default_mode_sections(c);
    c.conntrack.max_per_core.get_or_insert(32 * 1024);
    c.conntrack.min.get_or_insert(128 * 1024);
    c.conntrack
        .tcp_established_timeout
        .get_or_insert(GoDuration::from_secs(24 * 3600));
    c.conntrack
        .tcp_close_wait_timeout
        .get_or_insert(GoDuration::from_secs(3600));
    if c.config_sync_period.is_zero() {
        c.config_sync_period = GoDuration::from_secs(15 * 60);
    }
    default_client(c);
    if c.detect_local_mode.is_empty() {
        c.detect_local_mode = DETECT_LOCAL_MODE.to_string();
    }
    default_logging(c);
}

/// `bindAddress` and the server addresses that follow its family.
fn default_servers(c: &mut ProxyConfig) {
    if c.bind_address.is_empty() {
        c.bind_address = "0.0.0.0".to_string();
    }
    let ipv4 = matches!(c.bind_address.parse::<IpAddr>(), Ok(IpAddr::V4(_)));
    let (healthz_host, metrics_host) = if ipv4 {
        ("0.0.0.0", "127.0.0.1")
    } else {
        ("[::]", "[::1]")
    };
    c.healthz_bind_address = if c.healthz_bind_address.is_empty() {
        format!("{healthz_host}:{HEALTHZ_PORT}")
    } else {
        append_port_if_needed(&c.healthz_bind_address, HEALTHZ_PORT)
    };
    c.metrics_bind_address = if c.metrics_bind_address.is_empty() {
        format!("{metrics_host}:{METRICS_PORT}")
    } else {
        append_port_if_needed(&c.metrics_bind_address, METRICS_PORT)
    };
}

/// The per-mode sections' periods and mark bits.
fn default_mode_sections(c: &mut ProxyConfig) {
    if c.iptables.sync_period.is_zero() {
        c.iptables.sync_period = GoDuration::from_secs(30);
    }
    if c.iptables.min_sync_period.is_zero() {
        c.iptables.min_sync_period = GoDuration::from_secs(1);
    }
    c.iptables.localhost_node_ports.get_or_insert(true);
    c.iptables.masquerade_bit.get_or_insert(MASQUERADE_BIT);

    if c.ipvs.sync_period.is_zero() {
        c.ipvs.sync_period = GoDuration::from_secs(30);
    }

    if c.nftables.sync_period.is_zero() {
        c.nftables.sync_period = GoDuration::from_secs(30);
    }
    if c.nftables.min_sync_period.is_zero() {
        c.nftables.min_sync_period = GoDuration::from_secs(1);
    }
    c.nftables.masquerade_bit.get_or_insert(MASQUERADE_BIT);
}

/// component-base's client connection defaults.
fn default_client(c: &mut ProxyConfig) {
    if c.client_connection.content_type.is_empty() {
        c.client_connection.content_type = CONTENT_TYPE.to_string();
    }
    if c.client_connection.qps == 0.0 {
        c.client_connection.qps = 5.0;
    }
    if c.client_connection.burst == 0 {
        c.client_connection.burst = 10;
    }
}

/// component-base's recommended logging configuration.
fn default_logging(c: &mut ProxyConfig) {
    if c.logging.format.is_empty() {
        c.logging.format = "text".to_string();
    }
    if c.logging.flush_frequency.0.is_zero() {
        c.logging.flush_frequency = TimeOrDuration(GoDuration::from_secs(5));
    }
    for opts in [&mut c.logging.options.json, &mut c.logging.options.text] {
        if opts.info_buffer_size.0.is_empty() {
            opts.info_buffer_size = Quantity::default();
        }
    }
}

/// Keep what upstream's internal configuration keeps once the mode is known. It holds one sync period
/// pair and one `masqueradeAll`, read from and written back to the active mode's section only
/// (`pkg/proxy/apis/config/v1alpha1/conversion.go`), so in IPVS mode upstream runs with, and
/// `--write-config-to` writes, `0s` for the iptables and nftables periods and `false` for
/// `nftables.masqueradeAll`.
pub fn keep_active_mode_only(c: &mut ProxyConfig) {
    c.iptables.sync_period = GoDuration::ZERO;
    c.iptables.min_sync_period = GoDuration::ZERO;
    c.nftables.sync_period = GoDuration::ZERO;
    c.nftables.min_sync_period = GoDuration::ZERO;
    c.nftables.masquerade_all = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_host_port_like_go() {
        assert_eq!(split_host_port("1.2.3.4:80").unwrap(), ("1.2.3.4", "80"));
        assert_eq!(split_host_port("[::1]:80").unwrap(), ("::1", "80"));
        assert_eq!(split_host_port(":80").unwrap(), ("", "80"));
        assert_eq!(split_host_port("1.2.3.4:").unwrap(), ("1.2.3.4", ""));
        assert!(split_host_port("1.2.3.4").is_err());
        assert!(split_host_port("::1:80").is_err());
        assert!(split_host_port("[::1]").is_err());
        assert_eq!(
            split_host_port("::1:80").unwrap_err().to_string(),
            "address ::1:80: too many colons in address"
        );
    }

    #[test]
    fn append_port() {
        assert_eq!(append_port_if_needed("1.2.3.4", 10256), "1.2.3.4:10256");
        assert_eq!(append_port_if_needed("::", 10256), "[::]:10256");
        assert_eq!(append_port_if_needed("1.2.3.4:99", 10256), "1.2.3.4:99");
        assert_eq!(append_port_if_needed("junk", 10256), "junk");
    }

    #[test]
    fn ipv6_bind_address_gives_ipv6_servers() {
        let mut c = ProxyConfig {
            bind_address: "fd00::1".into(),
            ..Default::default()
        };
        apply_defaults(&mut c);
        assert_eq!(c.healthz_bind_address, "[::]:10256");
        assert_eq!(c.metrics_bind_address, "[::1]:10249");
    }
}
