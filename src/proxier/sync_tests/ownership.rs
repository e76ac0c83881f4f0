//! Never touching what is not ours: foreign objects and excluded CIDRs survive syncs and `--cleanup`.

use super::*;
use crate::proxier::cleanup::{CleanupError, CleanupReport, cleanup_leftovers};

/// `kube-proxy --cleanup` (IPv4) on `k`'s kernel.
fn cleanup_v4(k: &Kit) -> Result<CleanupReport, CleanupError> {
    let mut b = k.backends();
    cleanup_leftovers(
        b.ipvs.as_mut(),
        b.links.as_mut(),
        b.iptables.as_mut(),
        b.ipsets.as_mut(),
        &[IpFamily::V4],
    )
}

/// Populates objects another tool owns, plus leftovers of ours from a previous run.
fn seed_foreign_and_leftovers(k: &Kit) {
    // keepalived VIP on eth0, kube-vip on the node IP at a port that is not a NodePort of ours.
    seed_vs(k, "192.168.1.100", 80, "wlc");
    seed_vs(k, NODE, 8443, "wlc");
    // Ours from a previous run: a ClusterIP bound on kube-ipvs0 and a NodePort recorded in our set.
    seed_vs(k, "10.96.55.5", 80, "rr");
    seed_vs(k, NODE, 30099, "rr");
    k.links
        .add_link("eth0", "ether", true, &[ip(NODE), ip("192.168.1.100")]);
    k.links
        .add_link(DUMMY_DEVICE, "dummy", false, &[ip("10.96.55.5")]);
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-TCP",
        IpSetType::BitmapPort,
        IpFamily::V4,
        ["30099"],
    );
    k.ipsets.insert_set(
        "keepalived-set",
        IpSetType::HashIp,
        IpFamily::V4,
        ["1.2.3.4"],
    );
    seed_chain(k, "filter", "FOREIGN", &["-j", "ACCEPT"]);
}

#[test]
fn foreign_objects_survive_and_our_leftovers_go() {
    let k = Kit::new();
    seed_foreign_and_leftovers(&k);
    let mut p = proxier(&k);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    let s = k.services();
    assert!(
        s.contains(&key("192.168.1.100", 80, Protocol::Tcp)),
        "keepalived VS deleted"
    );
    assert!(
        s.contains(&key(NODE, 8443, Protocol::Tcp)),
        "kube-vip VS deleted"
    );
    assert!(
        !s.contains(&key("10.96.55.5", 80, Protocol::Tcp)),
        "stale ClusterIP VS kept"
    );
    assert!(
        !s.contains(&key(NODE, 30099, Protocol::Tcp)),
        "stale NodePort VS kept"
    );
    assert_eq!(k.addrs("eth0").len(), 2, "foreign addresses touched");
    assert!(!k.addrs(DUMMY_DEVICE).contains(&ip("10.96.55.5")));
    assert!(k.ipsets.set("keepalived-set").is_some());
    assert_eq!(
        k.iptables.rules(IpFamily::V4, "filter", "FOREIGN").unwrap(),
        vec!["-j ACCEPT".to_string()]
    );

    // An empty plan (all services gone) still leaves them alone, over event-driven and full syncs.
    let empty = desired(&[], &[]);
    apply(&mut p, &empty, false);
    apply(&mut p, &empty, true);
    assert_eq!(
        k.services(),
        BTreeSet::from([
            key(NODE, 8443, Protocol::Tcp),
            key("192.168.1.100", 80, Protocol::Tcp)
        ])
    );
    assert!(k.addrs(DUMMY_DEVICE).is_empty());
    assert_eq!(k.addrs("eth0").len(), 2);
    assert!(k.ipsets.set("keepalived-set").is_some());
}

#[test]
fn exclude_cidrs_are_never_deleted() {
    let excluded = key("10.96.200.1", 80, Protocol::Tcp);
    let seed = |k: &Kit| {
        seed_vs(k, "10.96.200.1", 80, "rr");
        // Bound to kube-ipvs0, it looks like ours.
        k.links
            .add_link(DUMMY_DEVICE, "dummy", false, &[ip("10.96.200.1")]);
    };
    let k = Kit::new();
    seed(&k);
    let mut cfg = config();
    cfg.exclude_cidrs = vec!["10.96.200.0/24".parse().unwrap()];
    let mut p = proxier(&k);
    apply_cfg(&mut p, &small(), &cfg, true);
    apply_cfg(&mut p, &small(), &cfg, true);
    assert!(k.services().contains(&excluded));

    // Without the exclusion the same kernel state is ours and goes.
    let k2 = Kit::new();
    seed(&k2);
    let mut p2 = proxier(&k2);
    apply(&mut p2, &small(), true);
    assert!(!k2.services().contains(&excluded));
}

#[test]
fn cleanup_removes_only_ours() {
    let k = Kit::new();
    seed_foreign_and_leftovers(&k);
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // A foreign jump in a built-in chain to a foreign chain.
    seed_chain(&k, "nat", "FOREIGN-NAT", &["-j", "RETURN"]);
    seed_chain(&k, "nat", "PREROUTING", &["-j", "FOREIGN-NAT"]);
    let r = cleanup_v4(&k).expect("cleanup failed");
    assert!(
        r.removed.iter().any(|x| x == "ipset KUBE-CLUSTER-IP"),
        "{:?}",
        r.removed
    );
    // The IPVS flush is the one exception, as upstream.
    assert!(k.services().is_empty());
    assert!(k.links.link(DUMMY_DEVICE).is_none());
    assert_eq!(k.addrs("eth0").len(), 2);
    assert_eq!(k.ipsets.names(), vec!["keepalived-set".to_string()]);
    for table in ["nat", "filter"] {
        let chains = k.iptables.chains(IpFamily::V4, table);
        assert!(chains.iter().all(|c| !c.starts_with("KUBE-")), "{chains:?}");
    }
    assert!(
        k.iptables
            .chains(IpFamily::V4, "filter")
            .contains(&"FOREIGN".to_string())
    );
    assert_eq!(
        k.iptables.rules(IpFamily::V4, "nat", "PREROUTING").unwrap(),
        vec!["-j FOREIGN-NAT".to_string()]
    );
}

#[test]
fn cleanup_reports_failures() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.set_fail("ipset.destroy", true);
    let e = cleanup_v4(&k).expect_err("cleanup must fail");
    // Every set of both families and its staging name (an unfinished grow's): 2 x 17 x 2 destroys failed.
    assert_eq!(e.0.failures.len(), 68, "{:?}", e.0.failures);
    assert!(e.to_string().contains("KUBE-CLUSTER-IP"));
    // Everything else was still cleaned.
    assert!(k.services().is_empty());
    assert!(k.links.link(DUMMY_DEVICE).is_none());
}
