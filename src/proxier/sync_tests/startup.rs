//! Node preparation at startup: conntrack limits, sysctls, IPVS timeouts and what a failure of each means.

use crate::daemon::prepare::{
    ConntrackHashsize, ConntrackSettings, StartupConfig, conntrack_max, needs_conn_reuse_mode_0,
    prepare_node,
};
use crate::kernel::KernelResult;
use crate::kernel::ipvs::IpvsTimeouts;
use crate::kernel::sysctl::fake::FakeSysctl;
use std::time::Duration;

/// Prepares a node with `sys`'s sysctls, a large conntrack table and the default configuration.
fn prepare_default(
    sys: &FakeSysctl,
) -> Result<crate::daemon::prepare::StartupReport, crate::daemon::prepare::StartupError> {
    let mut ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
    let cfg = StartupConfig {
        kernel_release: "6.1.0".into(),
        cpus: 1,
        ..Default::default()
    };
    prepare_node(&mut sys.clone(), &mut Hash(1 << 20, false), &mut ipvs, &cfg)
}

struct Hash(i64, bool);
impl ConntrackHashsize for Hash {
    fn get(&mut self) -> KernelResult<i64> {
        Ok(self.0)
    }
    fn set(&mut self, v: i64) -> KernelResult<()> {
        if self.1 {
            return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied).into());
        }
        self.0 = v;
        Ok(())
    }
}

fn defaults() -> ConntrackSettings {
    ConntrackSettings {
        max_per_core: Some(32768),
        min: Some(131072),
        tcp_established_timeout: Some(Duration::from_secs(86400)),
        tcp_close_wait_timeout: Some(Duration::from_secs(3600)),
        ..Default::default()
    }
}

#[test]
fn conntrack_max_rules() {
    assert_eq!(conntrack_max(&defaults(), 1), 131072);
    assert_eq!(conntrack_max(&defaults(), 8), 262144);
    let off = ConntrackSettings {
        max_per_core: Some(0),
        ..defaults()
    };
    assert_eq!(conntrack_max(&off, 8), 0);
    assert!(needs_conn_reuse_mode_0("5.4.0-150-generic"));
    assert!(needs_conn_reuse_mode_0("4.1.0"));
    assert!(!needs_conn_reuse_mode_0("5.9.0"));
    assert!(!needs_conn_reuse_mode_0("6.1.0-18-amd64"));
    assert!(!needs_conn_reuse_mode_0("4.0.9"));
}

#[test]
fn prepare_node_sets_what_upstream_sets() {
    let sys = FakeSysctl::with_defaults();
    sys.insert("net/ipv4/ip_forward", 1);
    let mut s = sys.clone();
    let mut ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
    let mut h = Hash(16384, false);
    let cfg = StartupConfig {
        strict_arp: false,
        arp_per_address: false,
        ipvs_timeouts: IpvsTimeouts::default(),
        conntrack: defaults(),
        kernel_release: "6.1.0".into(),
        cpus: 1,
    };
    let r = prepare_node(&mut s, &mut h, &mut ipvs, &cfg).unwrap();
    let v = |p: &str| sys.value(p).unwrap();
    assert_eq!(v("net/ipv4/vs/conntrack"), 1);
    assert_eq!(v("net/ipv4/vs/expire_nodest_conn"), 1);
    assert_eq!(v("net/ipv4/vs/expire_quiescent_template"), 1);
    assert_eq!(
        v("net/ipv4/vs/conn_reuse_mode"),
        1,
        "6.1 keeps conn_reuse_mode"
    );
    assert_eq!(v("net/ipv4/conf/all/arp_ignore"), 0);
    assert_eq!(v("net/netfilter/nf_conntrack_max"), 131072);
    assert_eq!(h.0, 32768);
    // Never lowered: 5 days stays; close_wait raised to 1h.
    assert_eq!(
        v("net/netfilter/nf_conntrack_tcp_timeout_established"),
        432000
    );
    assert_eq!(v("net/netfilter/nf_conntrack_tcp_timeout_close_wait"), 3600);
    assert!(ipvs.ops().is_empty(), "no IPVS timeouts configured");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert!(
        !sys.writes().iter().any(|(p, _)| p == "net/ipv4/ip_forward"),
        "unchanged value rewritten"
    );
    assert!(
        r.changed
            .iter()
            .any(|(p, old, new)| p == "net/netfilter/nf_conntrack_max"
                && *old == 65536
                && *new == 131072)
    );
}

#[test]
fn strict_arp_old_kernel_timeouts_and_high_existing_max() {
    let sys = FakeSysctl::with_defaults();
    sys.insert("net/netfilter/nf_conntrack_max", 1_000_000);
    let mut s = sys.clone();
    let ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
    let mut h = Hash(16384, true);
    let cfg = StartupConfig {
        strict_arp: true,
        arp_per_address: false,
        ipvs_timeouts: IpvsTimeouts {
            tcp: 900,
            tcp_fin: 60,
            udp: 0,
        },
        conntrack: defaults(),
        kernel_release: "5.4.0".into(),
        cpus: 2,
    };
    let r = prepare_node(&mut s, &mut h, &mut ipvs.clone(), &cfg).unwrap();
    let v = |p: &str| sys.value(p).unwrap();
    assert_eq!(v("net/ipv4/vs/conn_reuse_mode"), 0);
    assert_eq!(v("net/ipv4/conf/all/arp_ignore"), 1);
    assert_eq!(v("net/ipv4/conf/all/arp_announce"), 2);
    assert_eq!(v("net/netfilter/nf_conntrack_max"), 1_000_000, "lowered");
    assert_eq!(ipvs.timeouts().tcp_fin, 60);
    // The hash table should grow to 131072/4 but sysfs is read-only: a warning, not an error.
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("hashsize"), "{:?}", r.warnings);
}

#[test]
fn missing_br_netfilter_is_a_warning() {
    let sys = FakeSysctl::with_defaults();
    sys.insert("net/bridge/bridge-nf-call-iptables", 0);
    let r = prepare_default(&sys).unwrap();
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("bridge-nf-call-iptables"));
    assert_eq!(
        sys.value("net/bridge/bridge-nf-call-iptables"),
        Some(0),
        "only checked"
    );
}

#[test]
fn required_sysctl_failure_is_an_error() {
    let sys = FakeSysctl::with_defaults();
    sys.make_read_only("net/ipv4/vs/conntrack");
    let e = prepare_default(&sys).unwrap_err();
    assert!(e.to_string().contains("net/ipv4/vs/conntrack"), "{e}");
}
