//! Failed kernel writes, restores and dumps: counted, retried, and never flushing working rules.

use super::*;

#[test]
fn failed_restore_on_cold_start_withholds_ipvs_and_retries() {
    let k = Kit::new();
    // Rules already in the kernel (from before) must not be flushed by a failed restore.
    seed_chain(&k, "nat", "KUBE-SERVICES", &["-j", "RETURN"]);
    k.set_fail("iptables.restore", true);
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1);
    assert!(r.retry_needed);
    assert_eq!(r.ipvs_withheld, 1);
    assert!(
        k.services().is_empty(),
        "served a VIP without its SNAT rule"
    );
    assert!(k.addrs(DUMMY_DEVICE).is_empty());
    assert_eq!(
        k.iptables
            .rules(IpFamily::V4, "nat", "KUBE-SERVICES")
            .unwrap(),
        vec!["-j RETURN".to_string()]
    );
    assert!(
        !k.writes()
            .iter()
            .any(|w| w.contains("flush") || w.contains("delete_chain"))
    );
    // Fixed: the retry (forced full) programs everything.
    k.set_fail("iptables.restore", false);
    let r = apply(&mut p, &d, false);
    assert!(r.full, "a sync after a failure is full");
    assert_eq!(r.failure_count(), 0);
    assert_eq!(r.ipvs_services.added, 4);
    assert!(!r.retry_needed);
}

#[test]
fn failed_restore_later_keeps_old_rules_and_still_syncs_ipvs() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let old_rules = k.iptables.save_all(IpFamily::V4);
    // The fake's own whole-restore failure (as iptables-restore exiting 1): nothing applied.
    k.iptables
        .fail_next_restore("iptables-restore: line 3 failed");
    let mut d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, EPS),
        ],
        &[],
    );
    // A payload whose rules differ (a changed comment line alone is already in the kernel).
    d.iptables_payload = d.iptables_payload.replace(
        "-A KUBE-POSTROUTING -j MASQUERADE\n",
        "-A KUBE-POSTROUTING -j MASQUERADE\n-A KUBE-POSTROUTING -j RETURN\n",
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1);
    assert!(r.retry_needed);
    assert_eq!(r.ipvs_withheld, 0);
    assert_eq!(r.ipvs_services.deleted, 2);
    assert_eq!(k.iptables.save_all(IpFamily::V4), old_rules);
    // The next sync retries the restore (full), and succeeds.
    let r = apply(&mut p, &d, false);
    assert!(r.full);
    assert_eq!(r.iptables_restores, 1);
    assert_eq!(k.restored().last().unwrap().1, d.iptables_payload);
    // And then it settles.
    let r = apply(&mut p, &d, false);
    assert_eq!(r.writes(), 0);
}

#[test]
fn failed_ipvs_write_is_counted_and_retried() {
    let k = Kit::new();
    let mut p = proxier(&k);
    k.set_fail("ipvs.add_destination", true);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failures_of(FailureKind::IpvsDestination), 7);
    assert!(r.retry_needed);
    k.set_fail("ipvs.add_destination", false);
    let r = apply(&mut p, &small(), false);
    assert!(r.full);
    assert_eq!(r.ipvs_destinations.added, 7);
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
}

#[test]
fn failed_dump_requests_a_retry_without_deleting() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.set_fail("ipvs.services", true);
    k.clear_logs();
    let r = apply(&mut p, &desired(&[], &[]), true);
    assert!(r.retry_needed);
    assert_eq!(r.failures_of(FailureKind::KernelDump), 1);
    // Without a dump it still removes what it knows it applied.
    assert_eq!(r.ipvs_services.deleted, 4);
    k.set_fail("ipvs.services", false);
}

#[test]
fn rejected_ipset_entries_are_counted_not_retried_every_sync() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut d = small();
    d.ipsets
        .get_mut("KUBE-CLUSTER-IP")
        .unwrap()
        .entries
        .insert("not-an-entry".into());
    let r = apply(&mut p, &d, true);
    assert_eq!(r.failures_of(FailureKind::IpsetRejected), 1, "{r:?}");
    assert!(
        !r.retry_needed,
        "an invalid entry is not a transient failure"
    );
    assert_eq!(apply(&mut p, &d, false).writes(), 0);
}
