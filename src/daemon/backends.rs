//! The real kernel backends, the iptables backend choice, node preparation (`--init-only`) and
//! `--cleanup`.

use crate::config::Options;
use crate::daemon::prepare::{
    ConntrackSettings, StartupConfig, StartupReport, SysfsHashsize, prepare_node,
};
use crate::kernel::KernelError;
use crate::kernel::conntrack::netlink::NetlinkConntrack;
use crate::kernel::ipset::real_ipsets;
use crate::kernel::iptables::Iptables;
use crate::kernel::iptables::cli::{Backend, IptablesCli, detect_backend};
use crate::kernel::iptables::exec;
use crate::kernel::ipvs::netlink::NetlinkIpvs;
use crate::kernel::ipvs::{Ipvs, IpvsTimeouts};
use crate::kernel::link::rtnetlink::RtnetlinkLinks;
use crate::kernel::nftables::netlink::NetlinkNfTables;
use crate::kernel::sysctl::procfs::ProcSysctl;
use crate::net::IpFamily;
use crate::proxier::Backends;
use crate::proxier::cleanup::{CleanupReport, LeftoverBackends, cleanup_every_mode, nftables_mode};
use anyhow::{Context, bail};
use std::time::Duration;

/// Environment variable forcing the iptables backend (`legacy` or `nft`).
pub const BACKEND_ENV: &str = "KUBE_PROXY_IPTABLES_BACKEND";

/// The iptables backend to use: forced by [`BACKEND_ENV`], else detected from what the node already uses.
pub fn iptables_backend() -> anyhow::Result<Backend> {
    match std::env::var(BACKEND_ENV).as_deref().map(str::trim) {
        Ok("legacy") => {
            tracing::info!(
                backend = "legacy",
                "The iptables backend is forced by {BACKEND_ENV}"
            );
            Ok(Backend::Legacy)
        }
        Ok("nft") => {
            tracing::info!(
                backend = "nft",
                "The iptables backend is forced by {BACKEND_ENV}"
            );
            Ok(Backend::Nft)
        }
        Ok("") | Err(_) => Ok(detect_backend().backend),
        Ok(other) => bail!("{BACKEND_ENV}={other:?}: expected \"legacy\" or \"nft\""),
    }
}

/// Whether the node can run the IPv6 proxier: the kernel has IPv6 and ip6tables works. On the legacy
/// backend, the kernel's ip6tables nat table read without a process ([`Iptables::inspect`]) and the
/// tools found on `PATH` tell; otherwise (or when that fails) `ip6tables-save -t nat` has to work.
pub fn ipv6_supported(iptables: &mut IptablesCli) -> bool {
    if !std::path::Path::new("/proc/net/if_inet6").exists() {
        tracing::info!(ipFamily = "IPv6", "No kernel support for family");
        return false;
    }
    let tools = iptables.binaries(IpFamily::V6);
    let tools_found = exec::on_path(&tools.save) && exec::on_path(&tools.restore);
    if tools_found && iptables.inspect(IpFamily::V6, &["nat"]).is_some() {
        return true;
    }
    match iptables.save(IpFamily::V6, "nat") {
        Ok(_) => true,
        Err(e) => {
            tracing::info!(ipFamily = "IPv6", error = %e, "No iptables support for family");
            false
        }
    }
}

/// Opens every real backend (netlink sockets, CLI wrappers) with the given iptables backend.
pub fn real_backends(iptables: IptablesCli) -> anyhow::Result<Backends> {
    Ok(Backends {
        ipvs: Box::new(
            NetlinkIpvs::new().context("opening the IPVS netlink family (is ip_vs loaded?)")?,
        ),
        ipsets: real_ipsets(),
        iptables: Box::new(iptables),
        links: Box::new(RtnetlinkLinks::new().context("opening rtnetlink")?),
        conntrack: Box::new(NetlinkConntrack::new().context("opening ctnetlink")?),
    })
}

fn seconds(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// Node preparation settings from the configuration.
pub fn startup_config(options: &Options) -> StartupConfig {
    let c = &options.config;
    let ct = &c.conntrack;
    StartupConfig {
        strict_arp: c.ipvs.strict_arp,
        arp_per_address: options.settings.fixes.arp_per_address,
        ipvs_timeouts: IpvsTimeouts {
            tcp: seconds(c.ipvs.tcp_timeout.to_std()),
            tcp_fin: seconds(c.ipvs.tcp_fin_timeout.to_std()),
            udp: seconds(c.ipvs.udp_timeout.to_std()),
        },
        conntrack: ConntrackSettings {
            max_per_core: ct.max_per_core.and_then(|v| u32::try_from(v).ok()),
            min: ct.min.and_then(|v| u32::try_from(v).ok()),
            tcp_established_timeout: ct.tcp_established_timeout.and_then(|d| nonzero(d.to_std())),
            tcp_close_wait_timeout: ct.tcp_close_wait_timeout.and_then(|d| nonzero(d.to_std())),
            tcp_be_liberal: ct.tcp_be_liberal,
            udp_timeout: nonzero(ct.udp_timeout.to_std()),
            udp_stream_timeout: nonzero(ct.udp_stream_timeout.to_std()),
        },
        kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    }
}

/// Applies sysctls, conntrack limits and IPVS timeouts through `backends`' IPVS handle.
pub fn prepare(options: &Options, backends: &mut Backends) -> anyhow::Result<StartupReport> {
    let cfg = startup_config(options);
    let report = prepare_node(
        &mut ProcSysctl::new(),
        &mut SysfsHashsize,
        backends.ipvs.as_mut(),
        &cfg,
    )
    .context("preparing the node")?;
    log_prepare_report(&report);
    Ok(report)
}

/// Logs the settings node preparation changed (upstream's "Set sysctl" lines) and its warnings.
fn log_prepare_report(report: &StartupReport) {
    for (path, old, new) in &report.changed {
        tracing::info!(
            entry = path.as_str(),
            value = *new,
            old = *old,
            "Set sysctl"
        );
    }
    for w in &report.warnings {
        tracing::warn!("{w}");
    }
}

/// `--init-only`: node preparation, nothing else.
pub fn init_only(options: &Options) -> anyhow::Result<()> {
    let mut ipvs = NetlinkIpvs::new().context("opening the IPVS netlink family")?;
    let cfg = startup_config(options);
    let report = prepare_node(&mut ProcSysctl::new(), &mut SysfsHashsize, &mut ipvs, &cfg)
        .context("preparing the node")?;
    log_prepare_report(&report);
    tracing::info!("System initialized and --init-only specified");
    Ok(())
}

/// `--cleanup`: removes what every mode of kube-proxy creates (iptables, IPVS, nftables); fails if
/// anything could not be removed.
pub fn cleanup() -> anyhow::Result<()> {
    let mut iptables = IptablesCli::with_backend(iptables_backend()?);
    let mut families = vec![IpFamily::V4];
    if ipv6_supported(&mut iptables) {
        families.push(IpFamily::V6);
    }
    let mut ipvs = match NetlinkIpvs::new() {
        Ok(ipvs) => Some(ipvs),
        // A node that ran another mode may have no IPVS at all: there is nothing of it to flush.
        Err(KernelError::Unsupported(e)) => {
            tracing::info!(error = %e, "no IPVS in this kernel: no virtual servers to flush");
            None
        }
        Err(e) => return Err(e).context("opening the IPVS netlink family"),
    };
    let mut links = RtnetlinkLinks::new().context("opening rtnetlink")?;
    let mut ipsets = real_ipsets();
    let backends = LeftoverBackends {
        ipvs: ipvs.as_mut().map(|i| i as &mut dyn Ipvs),
        links: &mut links,
        iptables: &mut iptables,
        ipsets: ipsets.as_mut(),
        nftables: &mut NetlinkNfTables::new(),
    };
    match cleanup_every_mode(backends, &families) {
        Ok(report) => {
            log_report(&report);
            tracing::info!(removed = report.removed.len(), "Cleanup done");
            Ok(())
        }
        Err(e) => {
            log_report(&e.0);
            Err(e.into())
        }
    }
}

/// Before the IPVS proxier starts (and with `--init-only`), as upstream's `platformCleanup` in an
/// iptables-based mode: removes the nftables mode's tables, which the IPVS mode cannot be using. Best
/// effort: failures are logged and the start goes on.
pub fn cleanup_other_modes() {
    let mut report = CleanupReport::default();
    nftables_mode::cleanup(&mut NetlinkNfTables::new(), &mut report);
    log_report(&report);
}

fn log_report(report: &CleanupReport) {
    for r in &report.removed {
        tracing::info!(item = %r, "Removed");
    }
    for k in &report.kept {
        tracing::warn!(item = %k, "Left in place");
    }
    for f in &report.failures {
        tracing::error!(error = %f, "Cleanup failed");
    }
}
