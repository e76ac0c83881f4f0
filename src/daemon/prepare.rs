//! One-time node preparation before the first sync (also all that `--init-only` does): IPVS and ARP
//! sysctls, conntrack limits and timeouts, IPVS connection timeouts.
//!
//! Conntrack values are only ever raised, never lowered (as upstream's conntracker); nf_conntrack_max is
//! max(maxPerCore × CPUs, min) when maxPerCore > 0, and the hash table grows to max/4 when it is smaller.

use crate::kernel::ipvs::{Ipvs, IpvsTimeouts};
use crate::kernel::sysctl::{KernelVersion, Sysctl, wants_conn_reuse_mode_zero};
use crate::kernel::{KernelError, KernelResult};
use std::time::Duration;

/// Path of the conntrack hash table size module parameter.
pub const HASHSIZE_PATH: &str = "/sys/module/nf_conntrack/parameters/hashsize";

/// The nf_conntrack `hashsize` module parameter (not a sysctl: it lives in sysfs).
pub trait ConntrackHashsize: Send {
    fn get(&mut self) -> KernelResult<i64>;
    fn set(&mut self, value: i64) -> KernelResult<()>;
}

/// The real module parameter in [`HASHSIZE_PATH`].
#[derive(Debug, Default)]
pub struct SysfsHashsize;

impl ConntrackHashsize for SysfsHashsize {
    fn get(&mut self) -> KernelResult<i64> {
        let s = std::fs::read_to_string(HASHSIZE_PATH)?;
        s.trim()
            .parse()
            .map_err(|_| KernelError::Invalid(format!("{HASHSIZE_PATH}: {s:?}")))
    }
    fn set(&mut self, value: i64) -> KernelResult<()> {
        std::fs::write(HASHSIZE_PATH, value.to_string())?;
        Ok(())
    }
}

/// Conntrack settings from KubeProxyConfiguration `conntrack` (None / 0 = leave alone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConntrackSettings {
    pub max_per_core: Option<u32>,
    pub min: Option<u32>,
    pub tcp_established_timeout: Option<Duration>,
    pub tcp_close_wait_timeout: Option<Duration>,
    pub tcp_be_liberal: bool,
    pub udp_timeout: Option<Duration>,
    pub udp_stream_timeout: Option<Duration>,
}

/// Everything node preparation needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupConfig {
    pub strict_arp: bool,
    /// `--ipvs-arp-per-address`: `conf/all/arp_ignore` 3, so that the addresses bound with scope host
    /// are never answered (the others as before).
    pub arp_per_address: bool,
    /// IPVS tcp / tcpfin / udp timeouts (0 = unchanged); applied only when any is non-zero.
    pub ipvs_timeouts: IpvsTimeouts,
    pub conntrack: ConntrackSettings,
    /// Kernel release (`uname -r`, e.g. `6.1.0-18-amd64`), for conn_reuse_mode.
    pub kernel_release: String,
    /// Number of CPUs, for nf_conntrack_max.
    pub cpus: usize,
}

/// What node preparation changed and what failed without being fatal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupReport {
    /// (path, old value, new value) of every value written.
    pub changed: Vec<(String, i64, i64)>,
    /// Non-fatal problems (e.g. read-only sysfs for the hash size).
    pub warnings: Vec<String>,
}

/// A required setting could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("setting {what}: {source}")]
pub struct StartupError {
    pub what: String,
    #[source]
    pub source: KernelError,
}

fn err(what: &str) -> impl FnOnce(KernelError) -> StartupError + '_ {
    move |source| StartupError {
        what: what.to_string(),
        source,
    }
}

/// nf_conntrack_max wanted by the settings (0 = leave alone).
pub fn conntrack_max(c: &ConntrackSettings, cpus: usize) -> i64 {
    match c.max_per_core {
        Some(per) if per > 0 => {
            let scaled = i64::from(per) * cpus.max(1) as i64;
            scaled.max(i64::from(c.min.unwrap_or(0)))
        }
        _ => 0,
    }
}

/// Whether `conn_reuse_mode=0` is needed (kernels 4.1 ≤ v < 5.9); false for an unparsable release.
pub fn needs_conn_reuse_mode_0(release: &str) -> bool {
    KernelVersion::parse(release).is_some_and(wants_conn_reuse_mode_zero)
}

/// Sets `path` to `value` when it differs; records the change.
fn ensure(s: &mut dyn Sysctl, path: &str, value: i64, r: &mut StartupReport) -> KernelResult<()> {
    let cur = s.get(path)?;
    if cur != value {
        s.set(path, value)?;
        r.changed.push((path.to_string(), cur, value));
    }
    Ok(())
}

/// Raises `path` to `value` (never lowers it); an unreadable value counts as lower.
fn raise(s: &mut dyn Sysctl, path: &str, value: i64, r: &mut StartupReport) -> KernelResult<()> {
    let cur = s.get(path).unwrap_or(i64::MIN);
    if cur < value {
        s.set(path, value)?;
        r.changed.push((path.to_string(), cur, value));
    }
    Ok(())
}

/// Applies every startup setting; fails on the first required one that cannot be applied.
pub fn prepare_node(
    sysctl: &mut dyn Sysctl,
    hashsize: &mut dyn ConntrackHashsize,
    ipvs: &mut dyn Ipvs,
    cfg: &StartupConfig,
) -> Result<StartupReport, StartupError> {
    let mut r = StartupReport::default();
    // Bridged pod traffic skips iptables without br_netfilter (upstream only warns, too).
    if sysctl.get("net/bridge/bridge-nf-call-iptables").ok() != Some(1) {
        r.warnings.push(
            "br_netfilter not loaded or net/bridge/bridge-nf-call-iptables unset: bridged traffic \
             may bypass kube-proxy's rules"
                .into(),
        );
    }
    setup_conntrack(sysctl, hashsize, &cfg.conntrack, cfg.cpus, &mut r)?;
    for path in [
        "net/ipv4/vs/conntrack",
        "net/ipv4/vs/expire_nodest_conn",
        "net/ipv4/vs/expire_quiescent_template",
        "net/ipv4/ip_forward",
    ] {
        ensure(sysctl, path, 1, &mut r).map_err(err(path))?;
    }
    if needs_conn_reuse_mode_0(&cfg.kernel_release) {
        let path = "net/ipv4/vs/conn_reuse_mode";
        if let Err(e) = ensure(sysctl, path, 0, &mut r) {
            r.warnings.push(format!("{path}: {e}"));
        }
    }
    if cfg.strict_arp {
        ensure(sysctl, "net/ipv4/conf/all/arp_ignore", 1, &mut r).map_err(err("arp_ignore"))?;
        ensure(sysctl, "net/ipv4/conf/all/arp_announce", 2, &mut r).map_err(err("arp_announce"))?;
    }
    if cfg.arp_per_address {
        ensure(sysctl, "net/ipv4/conf/all/arp_ignore", 3, &mut r).map_err(err("arp_ignore"))?;
    }
    let t = cfg.ipvs_timeouts;
    if t.tcp > 0 || t.tcp_fin > 0 || t.udp > 0 {
        ipvs.set_timeouts(t).map_err(err("IPVS timeouts"))?;
    }
    Ok(r)
}

/// The conntrack part of [`prepare_node`].
pub fn setup_conntrack(
    sysctl: &mut dyn Sysctl,
    hashsize: &mut dyn ConntrackHashsize,
    c: &ConntrackSettings,
    cpus: usize,
    r: &mut StartupReport,
) -> Result<(), StartupError> {
    let max = conntrack_max(c, cpus);
    if max > 0 {
        raise(sysctl, "net/netfilter/nf_conntrack_max", max, r).map_err(err("nf_conntrack_max"))?;
        match hashsize.get() {
            Ok(h) if h >= max / 4 => {}
            Ok(h) => match hashsize.set(max / 4) {
                Ok(()) => r.changed.push((HASHSIZE_PATH.to_string(), h, max / 4)),
                // A read-only /sys (container runtimes) is not fatal upstream either.
                Err(e) => r.warnings.push(format!("{HASHSIZE_PATH}: {e}")),
            },
            Err(e) => r.warnings.push(format!("{HASHSIZE_PATH}: {e}")),
        }
    }
    let secs = |d: &Option<Duration>| d.map(|d| d.as_secs() as i64).filter(|s| *s > 0);
    let timeouts = [
        (
            "net/netfilter/nf_conntrack_tcp_timeout_established",
            secs(&c.tcp_established_timeout),
        ),
        (
            "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
            secs(&c.tcp_close_wait_timeout),
        ),
        (
            "net/netfilter/nf_conntrack_tcp_be_liberal",
            c.tcp_be_liberal.then_some(1),
        ),
        (
            "net/netfilter/nf_conntrack_udp_timeout",
            secs(&c.udp_timeout),
        ),
        (
            "net/netfilter/nf_conntrack_udp_timeout_stream",
            secs(&c.udp_stream_timeout),
        ),
    ];
    for (path, v) in timeouts {
        if let Some(v) = v {
            raise(sysctl, path, v, r).map_err(err(path))?;
        }
    }
    Ok(())
}
