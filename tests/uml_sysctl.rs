//! The procfs sysctl backend against a real kernel (UML): the IPVS and ARP sysctls kube-proxy sets,
//! read back independently with `sysctl -n`; `ensure` writes only on change; the running kernel's version
//! and the conn_reuse_mode rule.
mod common {
    pub mod uml;
}

use common::uml::sh;
use kube_proxy_rs::kernel::KernelError;
use kube_proxy_rs::kernel::sysctl::procfs::ProcSysctl;
use kube_proxy_rs::kernel::sysctl::{KernelVersion, Sysctl, wants_conn_reuse_mode_zero};

/// (path, value kube-proxy wants).
const WANTED: &[(&str, i64)] = &[
    ("net/ipv4/vs/conntrack", 1),
    ("net/ipv4/vs/expire_nodest_conn", 1),
    ("net/ipv4/vs/expire_quiescent_template", 1),
    ("net/ipv4/ip_forward", 1),
    ("net/ipv4/conf/all/arp_ignore", 1),
    ("net/ipv4/conf/all/arp_announce", 2),
    ("net/ipv4/vs/conn_reuse_mode", 0),
];

fn sysctl_n(path: &str) -> i64 {
    sh(&format!("sysctl -n {}", path.replace('/', ".")))
        .trim()
        .parse()
        .unwrap()
}

uml_test!(sysctl_backend_on_real_kernel, {
    let mut s = ProcSysctl::new();
    for (path, value) in WANTED {
        let before = s.get(path).unwrap();
        assert_eq!(before, sysctl_n(path), "{path} read");
        let wrote = s.ensure(path, *value).unwrap();
        assert_eq!(
            wrote,
            before != *value,
            "{path}: ensure wrote={wrote} before={before}"
        );
        assert_eq!(sysctl_n(path), *value, "{path} after ensure");
        assert!(
            !s.ensure(path, *value).unwrap(),
            "{path}: second ensure wrote"
        );
    }
    // Plain set and back.
    s.set("net/ipv4/vs/conntrack", 0).unwrap();
    assert_eq!(sysctl_n("net/ipv4/vs/conntrack"), 0);
    s.set("net/ipv4/vs/conntrack", 1).unwrap();
    assert_eq!(s.get("net/ipv4/vs/conntrack").unwrap(), 1);
    // nf_conntrack_max: raise it, read it back.
    let max = s.get("net/netfilter/nf_conntrack_max").unwrap();
    s.set("net/netfilter/nf_conntrack_max", max + 1024).unwrap();
    assert_eq!(sysctl_n("net/netfilter/nf_conntrack_max"), max + 1024);
    // Errors: missing path, value the kernel refuses.
    assert!(matches!(
        s.get("net/ipv4/vs/no_such_knob"),
        Err(KernelError::NotFound(_))
    ));
    assert!(matches!(
        s.set("net/ipv4/vs/no_such_knob", 1),
        Err(KernelError::NotFound(_))
    ));
    assert!(s.set("net/ipv4/conf/all/arp_announce", 1 << 40).is_err());
    // The running kernel (6.1) is past 5.9: conn_reuse_mode is left alone there.
    let v = KernelVersion::running().unwrap();
    assert_eq!(
        v.to_string().split('.').take(2).collect::<Vec<_>>(),
        ["6", "1"]
    );
    assert!(!wants_conn_reuse_mode_zero(v));
    assert_eq!(
        KernelVersion::parse(&sh("uname -r")).unwrap(),
        v,
        "uname -r vs osrelease"
    );
});
