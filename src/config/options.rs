//! Resolution of flags and configuration file into the [`Options`] the daemon runs with,
//! with upstream's precedence.

use super::defaults::{append_port_if_needed, apply_defaults, keep_active_mode_only};
use super::file::{self, FileError};
use super::flags::{Flags, normalize_args, split_list};
use super::types::{ProxyConfig, Quantity};
use super::validate::{ValidationErrors, validate};
use crate::gotime::GoDuration;
use clap::Parser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::ffi::OsString;
use std::path::PathBuf;

/// Why the command line could not be turned into [`Options`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Bad flag syntax, unknown flag or bad flag value.
    #[error("{0}")]
    Flags(String),
    /// The configuration file could not be read or decoded.
    #[error(transparent)]
    File(#[from] FileError),
    /// The resolved configuration is invalid.
    #[error("invalid configuration: {0}")]
    Invalid(#[from] ValidationErrors),
    /// `--hostname-override` is blank, or the host name cannot be determined.
    #[error("{0}")]
    NodeName(#[source] NodeNameError),
}

/// Why this node's name is unknown.
#[derive(Debug, thiserror::Error)]
pub enum NodeNameError {
    /// `--hostname-override` is blank.
    #[error("empty hostname-override is invalid")]
    BlankOverride,
    /// The host name could not be read.
    #[error("couldn't determine hostname: {0}")]
    Unreadable(#[source] std::io::Error),
    /// The host name is empty.
    #[error("empty hostname is invalid")]
    Empty,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// Run (or clean up / init / write config) with these options.
    Run(Box<Options>),
    /// Print this help text and exit 0.
    Help(String),
    /// Print this version text and exit 0.
    Version(String),
}

/// Everything the daemon needs, resolved, defaulted and validated.
#[derive(Debug, Clone)]
pub struct Options {
    /// Effective configuration (defaulted; `mode` is `ipvs`).
    pub config: ProxyConfig,
    /// The parts of `config` the syncs use, typed once after validation.
    pub settings: super::settings::ProxySettings,
    /// The `--config` file, if any (upstream exits when it changes).
    pub config_path: Option<PathBuf>,
    /// `--cleanup`: remove our kernel state and exit.
    pub cleanup: bool,
    /// `--init-only`: do privileged initialisation and exit.
    pub init_only: bool,
    /// `--ipvs-traffic-metrics` (not in upstream): per-Service IPVS traffic counters on /metrics.
    pub ipvs_traffic_metrics: bool,
    /// `--allow-remote-debug` (not in upstream): `/debug/*` answers other hosts too, not only this node.
    pub allow_remote_debug: bool,
    /// `--ipvs-max-drain-time` (not in upstream): a draining TCP real server is removed after this long,
    /// connections or not; `None` (the default, or 0): never.
    pub ipvs_max_drain_time: Option<std::time::Duration>,
    /// `--write-config-to`: write the effective configuration there and exit.
    pub write_config_to: Option<PathBuf>,
    /// `--master`: API server URL overriding the kubeconfig's.
    pub master: Option<String>,
    /// Node name: `--hostname-override`/`hostnameOverride`, else the lower-cased host name.
    pub node_name: String,
    /// Warnings gathered while parsing, to be logged once logging is set up.
    pub warnings: Vec<String>,
}

/// The version line printed by `--version`.
pub fn version_text(raw: bool) -> String {
    let v = env!("CARGO_PKG_VERSION");
    if raw {
        format!("version: v{v}\nimplementation: kube-proxy-rs (IPVS mode)\n")
    } else {
        format!("kube-proxy-rs v{v}\n")
    }
}

/// Render a clap error as one line naming the offending flag or value.
fn clap_error_text(err: &clap::Error) -> String {
    let arg = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    match err.kind() {
        ErrorKind::UnknownArgument if arg.as_deref().is_some_and(|a| a.starts_with('-')) => {
            let arg = arg.unwrap_or_default();
            let name = arg.split('=').next().unwrap_or(&arg).to_string();
            format!("unknown flag: {name}")
        }
        ErrorKind::UnknownArgument => format!(
            "unexpected argument {:?}: kube-proxy takes no positional arguments (boolean flags take values as --flag=false)",
            arg.unwrap_or_default()
        ),
        _ => {
            let text = err.render().to_string();
            let first = text.lines().next().unwrap_or("").trim();
            first.strip_prefix("error: ").unwrap_or(first).to_string()
        }
    }
}

/// The lower-cased host name of this machine.
pub fn hostname() -> Result<String, NodeNameError> {
    let buf = crate::sys::process::hostname().map_err(NodeNameError::Unreadable)?;
    let name = String::from_utf8_lossy(&buf).trim().to_lowercase();
    if name.is_empty() {
        return Err(NodeNameError::Empty);
    }
    Ok(name)
}

/// Parse a full argv (program name first) into an [`Invocation`].
pub fn parse_args<I, T>(args: I) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let flags = match Flags::try_parse_from(normalize_args(args)) {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            return Ok(Invocation::Help(super::help::help_text()));
        }
        Err(e) => return Err(ConfigError::Flags(clap_error_text(&e))),
    };
    if let Some(v) = &flags.version {
        match v.as_str() {
            "raw" => return Ok(Invocation::Version(version_text(true))),
            other => {
                let show = super::flags::parse_go_bool(other).map_err(|_| {
                    ConfigError::Flags(format!(
                        "invalid argument {other:?} for \"--version\" flag: must be true, false or raw"
                    ))
                })?;
                if show {
                    return Ok(Invocation::Version(version_text(false)));
                }
            }
        }
    }
    resolve(flags).map(|o| Invocation::Run(Box::new(o)))
}

/// Warnings about legacy, removed, deprecated and iptables-only flags that were given.
fn flag_warnings(flags: &Flags) -> Vec<String> {
    let mut warnings = Vec::new();
    for name in flags.legacy_flags_given() {
        warnings.push(format!(
            "Flag --{name} is a legacy klog flag; it is accepted and ignored (logs go to stderr)"
        ));
    }
    if flags.proxy_port_range.is_some() {
        warnings.push(
            "Flag --proxy-port-range has been removed upstream (userspace proxy); it is ignored"
                .to_string(),
        );
    }
    if flags.udp_timeout.is_some() {
        warnings.push(
            "Flag --udp-timeout has been removed upstream (userspace proxy); it is ignored"
                .to_string(),
        );
    }
    if flags.healthz_port.is_some() {
        warnings.push(
            "Flag --healthz-port has been deprecated, use --healthz-bind-address instead"
                .to_string(),
        );
    }
    if flags.metrics_port.is_some() {
        warnings.push(
            "Flag --metrics-port has been deprecated, use --metrics-bind-address instead"
                .to_string(),
        );
    }
    for name in [
        "iptables-sync-period",
        "iptables-min-sync-period",
        "iptables-localhost-nodeports",
    ] {
        if flags.config_flags_given().contains(&name) {
            warnings.push(format!(
                "Flag --{name} applies to iptables mode only; it has no effect in IPVS mode"
            ));
        }
    }
    warnings
}

/// Apply upstream's precedence: a config file wins over flags except `--hostname-override`,
/// `--master`, logging flags and action flags. Then default, resolve the mode and validate.
pub fn resolve(flags: Flags) -> Result<Options, ConfigError> {
    check_deprecated_ports(&flags)?;
    let mut warnings = flag_warnings(&flags);
    let mut config = match &flags.config {
        Some(path) => {
            let decoded = file::load(path)?;
            warnings.extend(decoded.warnings);
            for name in flags.config_flags_given() {
                warnings.push(format!(
                    "Flag --{name} is ignored because --config is set; set it in the configuration file instead"
                ));
            }
            decoded.config
        }
        None => config_from_flags(&flags),
    };
    apply_logging_flags(&flags, &mut config);

    // As upstream, an empty value means "not set"; a blank one is an error.
    if let Some(h) = flags.hostname_override.as_deref().filter(|h| !h.is_empty()) {
        let h = h.trim();
        if h.is_empty() {
            return Err(ConfigError::NodeName(NodeNameError::BlankOverride));
        }
        config.hostname_override = h.to_lowercase();
    }

    apply_defaults(&mut config);
    if flags.config.is_none() {
        apply_disabled_servers(&flags, &mut config);
    }
    if config.mode.is_empty() {
        warnings.push(
            "No proxy mode set; this binary implements IPVS mode, using \"ipvs\"".to_string(),
        );
        config.mode = "ipvs".to_string();
    }
    keep_active_mode_only(&mut config);
    validate(&config)?;
    warnings.extend(super::features::check(&config.feature_gates).unwrap_or_default());

    let node_name = if config.hostname_override.trim().is_empty() {
        hostname().map_err(ConfigError::NodeName)?
    } else {
        config.hostname_override.trim().to_lowercase()
    };

    let fixes = fixes(&flags, &config)?;
    Ok(Options {
        settings: super::settings::ProxySettings {
            fixes,
            ..super::settings::ProxySettings::new(&config)
        },
        config,
        config_path: flags.config.clone(),
        cleanup: flags.cleanup.unwrap_or(false),
        init_only: flags.init_only.unwrap_or(false),
        ipvs_traffic_metrics: flags.ipvs_traffic_metrics.unwrap_or(false),
        allow_remote_debug: flags.allow_remote_debug.unwrap_or(false),
        ipvs_max_drain_time: max_drain_time(&flags)?,
        write_config_to: flags.write_config_to.clone(),
        master: flags.master.clone(),
        node_name,
        warnings,
    })
}

/// The fixes' flags; `--ipvs-arp-per-address` and `ipvs.strictARP` are refused together (strictARP's
/// `arp_ignore=1` would stop the answers the option keeps).
fn fixes(flags: &Flags, config: &ProxyConfig) -> Result<super::fixes::IpvsFixes, ConfigError> {
    let f = super::fixes::IpvsFixes {
        lb_source_ranges_for_node: flags.ipvs_lb_source_ranges_for_node.unwrap_or(false),
        arp_per_address: flags.ipvs_arp_per_address.unwrap_or(false),
        etp_local_node_masquerade: flags.ipvs_etp_local_node_masquerade.unwrap_or(false),
    };
    if f.arp_per_address && config.ipvs.strict_arp {
        return Err(ConfigError::Flags(
            "--ipvs-arp-per-address cannot be combined with ipvs.strictARP (--ipvs-strict-arp): strictARP stops every answer the option keeps".to_string(),
        ));
    }
    Ok(f)
}

/// `--ipvs-max-drain-time`: `None` when unset or 0; a negative value is refused.
fn max_drain_time(flags: &Flags) -> Result<Option<std::time::Duration>, ConfigError> {
    match flags.ipvs_max_drain_time {
        Some(d) if d.is_negative() => Err(ConfigError::Flags(format!(
            "invalid argument \"{d}\" for \"--ipvs-max-drain-time\" flag: must not be negative"
        ))),
        d => Ok(d.map(|d| d.to_std()).filter(|d| !d.is_zero())),
    }
}

/// `--healthz-port` / `--metrics-port`, where they apply (neither `--config` nor `--write-config-to`),
/// must be a port or 0 (server off). Upstream turns a bad one into a bind address that validation
/// refuses; it would otherwise be dropped without a word.
fn check_deprecated_ports(f: &Flags) -> Result<(), ConfigError> {
    if f.config.is_some() || f.write_config_to.is_some() {
        return Ok(());
    }
    for (flag, port, server) in [
        ("healthz-port", f.healthz_port, "health check"),
        ("metrics-port", f.metrics_port, "metrics"),
    ] {
        if let Some(p) = port.filter(|p| u16::try_from(*p).is_err()) {
            return Err(ConfigError::Flags(format!(
                "invalid argument \"{p}\" for \"--{flag}\" flag: must be a port number \
                 (1-65535), or 0 to disable the {server} server"
            )));
        }
    }
    Ok(())
}

/// Bare IP from a bind-address flag completed with the deprecated `--*-port` value.
fn address_with_port(addr: &str, port: i32) -> String {
    match u16::try_from(port) {
        Ok(p) if p != 0 && !addr.is_empty() => append_port_if_needed(addr, p),
        _ => addr.to_string(),
    }
}

/// Flags-only mode: servers disabled by an empty bind address or a deprecated port of 0
/// stay disabled after defaulting (upstream applies flags on top of defaults).
fn apply_disabled_servers(f: &Flags, c: &mut ProxyConfig) {
    let deprecated_ports_apply = f.write_config_to.is_none();
    if f.healthz_bind_address.as_deref() == Some("")
        || (deprecated_ports_apply && f.healthz_port == Some(0))
    {
        c.healthz_bind_address.clear();
    }
    if f.metrics_bind_address.as_deref() == Some("")
        || (deprecated_ports_apply && f.metrics_port == Some(0))
    {
        c.metrics_bind_address.clear();
    }
}

/// Defaults upstream gives `--ipvs-sync-period` / `--ipvs-min-sync-period`: its flags take their
/// defaults from the configuration built before the mode is known, i.e. from the iptables section
/// (30s / 1s). A flags-only IPVS node therefore syncs at most once a second unless told otherwise,
/// while a configuration file's unset `ipvs.minSyncPeriod` stays 0s.
pub const FLAGS_SYNC_PERIOD: GoDuration = GoDuration::from_secs(30);
/// See [`FLAGS_SYNC_PERIOD`].
pub const FLAGS_MIN_SYNC_PERIOD: GoDuration = GoDuration::from_secs(1);

/// `dst = src` when the flag was given.
fn set<T: Clone>(dst: &mut T, src: &Option<T>) {
    if let Some(v) = src {
        *dst = v.clone();
    }
}

/// `dst = Some(src)` when the flag was given (upstream's pointer fields).
fn set_some<T: Clone>(dst: &mut Option<T>, src: &Option<T>) {
    if src.is_some() {
        dst.clone_from(src);
    }
}

/// Build the configuration from flags alone (no `--config`).
fn config_from_flags(f: &Flags) -> ProxyConfig {
    let mut c = ProxyConfig::default();
    general_flags(f, &mut c);
    ipvs_flags(f, &mut c);
    local_traffic_flags(f, &mut c);
    conntrack_flags(f, &mut c);
    // Deprecated port flags only apply when neither --config nor --write-config-to is used.
    if f.write_config_to.is_none() {
        if let Some(port) = f.healthz_port {
            c.healthz_bind_address = address_with_port(&c.healthz_bind_address, port);
        }
        if let Some(port) = f.metrics_port {
            c.metrics_bind_address = address_with_port(&c.metrics_bind_address, port);
        }
    }
    c
}

/// API client, servers, mode, masquerading and the other top-level flags.
fn general_flags(f: &Flags, c: &mut ProxyConfig) {
    for (name, value) in f.feature_gates.iter().flatten() {
        c.feature_gates.insert(name.clone(), *value);
    }
    let cc = &mut c.client_connection;
    set(&mut cc.kubeconfig, &f.kubeconfig);
    set(&mut cc.content_type, &f.kube_api_content_type);
    set(&mut cc.burst, &f.kube_api_burst);
    set(&mut cc.qps, &f.kube_api_qps);
    set(&mut c.bind_address, &f.bind_address);
    set(&mut c.healthz_bind_address, &f.healthz_bind_address);
    set(&mut c.metrics_bind_address, &f.metrics_bind_address);
    set(&mut c.bind_address_hard_fail, &f.bind_address_hard_fail);
    set(&mut c.enable_profiling, &f.profiling);
    set(
        &mut c.show_hidden_metrics_for_version,
        &f.show_hidden_metrics_for_version,
    );
    set(&mut c.mode, &f.proxy_mode);
    set_some(&mut c.iptables.masquerade_bit, &f.iptables_masquerade_bit);
    set(&mut c.iptables.masquerade_all, &f.masquerade_all);
    set_some(
        &mut c.iptables.localhost_node_ports,
        &f.iptables_localhost_nodeports,
    );
    set_some(&mut c.oom_score_adj, &f.oom_score_adj);
    set(&mut c.config_sync_period, &f.config_sync_period);
    set(&mut c.port_range, &f.proxy_port_range);
    // --iptables-sync-period / --iptables-min-sync-period apply to iptables mode only: as upstream,
    // they are not kept (resolve warns about them).
}

/// The `--ipvs-*` flags; the sync periods get upstream's flag defaults.
fn ipvs_flags(f: &Flags, c: &mut ProxyConfig) {
    let ipvs = &mut c.ipvs;
    ipvs.sync_period = f.ipvs_sync_period.unwrap_or(FLAGS_SYNC_PERIOD);
    ipvs.min_sync_period = f.ipvs_min_sync_period.unwrap_or(FLAGS_MIN_SYNC_PERIOD);
    set(&mut ipvs.scheduler, &f.ipvs_scheduler);
    if !f.ipvs_exclude_cidrs.is_empty() {
        ipvs.exclude_cidrs = Some(split_list(&f.ipvs_exclude_cidrs));
    }
    set(&mut ipvs.strict_arp, &f.ipvs_strict_arp);
    set(&mut ipvs.tcp_timeout, &f.ipvs_tcp_timeout);
    set(&mut ipvs.tcp_fin_timeout, &f.ipvs_tcpfin_timeout);
    set(&mut ipvs.udp_timeout, &f.ipvs_udp_timeout);
}

/// Local-traffic detection and NodePort addresses.
fn local_traffic_flags(f: &Flags, c: &mut ProxyConfig) {
    set(&mut c.detect_local_mode, &f.detect_local_mode);
    set(
        &mut c.detect_local.bridge_interface,
        &f.pod_bridge_interface,
    );
    set(
        &mut c.detect_local.interface_name_prefix,
        &f.pod_interface_name_prefix,
    );
    set(&mut c.cluster_cidr, &f.cluster_cidr);
    if !f.nodeport_addresses.is_empty() {
        c.node_port_addresses = Some(split_list(&f.nodeport_addresses));
    }
}

/// The `--conntrack-*` flags.
fn conntrack_flags(f: &Flags, c: &mut ProxyConfig) {
    let ct = &mut c.conntrack;
    set_some(&mut ct.max_per_core, &f.conntrack_max_per_core);
    set_some(&mut ct.min, &f.conntrack_min);
    set_some(
        &mut ct.tcp_established_timeout,
        &f.conntrack_tcp_timeout_established,
    );
    set_some(
        &mut ct.tcp_close_wait_timeout,
        &f.conntrack_tcp_timeout_close_wait,
    );
    set(&mut ct.tcp_be_liberal, &f.conntrack_tcp_be_liberal);
    set(&mut ct.udp_timeout, &f.conntrack_udp_timeout);
    set(&mut ct.udp_stream_timeout, &f.conntrack_udp_timeout_stream);
}

/// Logging flags override the configuration (file or flags), as upstream's copyLogsFromFlags.
fn apply_logging_flags(f: &Flags, c: &mut ProxyConfig) {
    let l = &mut c.logging;
    if let Some(v) = &f.logging_format {
        l.format = v.clone();
    }
    if let Some(v) = f.log_flush_frequency {
        l.flush_frequency = crate::gotime::TimeOrDuration(v);
    }
    if let Some(v) = f.v {
        l.verbosity = v;
    }
    if !f.vmodule.is_empty() {
        let mut items: Vec<_> = f.vmodule.iter().flatten().cloned().collect();
        items.extend(l.vmodule.take().unwrap_or_default());
        l.vmodule = Some(items);
    }
    if let Some(v) = f.log_json_split_stream {
        l.options.json.split_stream = v;
    }
    if let Some(v) = &f.log_json_info_buffer_size {
        l.options.json.info_buffer_size = Quantity(v.clone());
    }
    if let Some(v) = f.log_text_split_stream {
        l.options.text.split_stream = v;
    }
    if let Some(v) = &f.log_text_info_buffer_size {
        l.options.text.info_buffer_size = Quantity(v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn node_name_errors_keep_their_cause() {
        let e = parse_args(["kube-proxy", "--hostname-override= "]).unwrap_err();
        assert_eq!(e.to_string(), "empty hostname-override is invalid");
        let cause = e.source().and_then(|c| c.downcast_ref::<NodeNameError>());
        assert!(matches!(cause, Some(NodeNameError::BlankOverride)));
        let unreadable =
            ConfigError::NodeName(NodeNameError::Unreadable(std::io::Error::other("x")));
        let io = unreadable.source().and_then(Error::source);
        assert!(io.is_some_and(|c| c.is::<std::io::Error>()));
    }
}
