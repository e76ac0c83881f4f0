//! Stale UDP conntrack flows: removed for gone real servers and Services, and only those.

use super::*;

#[test]
fn udp_conntrack_cleanup_removes_stale_flows_only() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let dns = |eps: &'static [(&'static str, u16)]| {
        desired(
            &[
                ("10.96.0.10", 53, Protocol::Udp, eps),
                ("10.96.0.11", 53, Protocol::Udp, eps),
            ],
            &[],
        )
    };
    apply(
        &mut p,
        &dns(&[("10.244.0.5", 53), ("10.244.0.6", 53)]),
        true,
    );
    let flow = |sport: u16, dst: &str, rs: &str| ConntrackFlow {
        orig_src: ip("10.244.0.50"),
        orig_sport: sport,
        orig_dst: ip(dst),
        orig_dport: 53,
        reply_src: ip(rs),
        reply_sport: 53,
    };
    let keep = flow(40001, "10.96.0.10", "10.244.0.5");
    let foreign = flow(40004, "8.8.8.8", "8.8.8.8");
    for f in [
        keep,
        flow(40002, "10.96.0.10", "10.244.0.6"),
        flow(40003, "10.96.0.11", "10.244.0.6"),
        foreign,
    ] {
        k.conntrack.add_flow(f);
    }
    // Endpoint 10.244.0.6 goes away.
    let r = apply(&mut p, &dns(&[("10.244.0.5", 53)]), false);
    assert_eq!(r.conntrack_deleted, 2, "{r:?}");
    assert_eq!(k.conntrack.flows(), vec![keep, foreign]);
    // Service 10.96.0.10 removed: its flows go, others stay.
    let only11 = desired(
        &[("10.96.0.11", 53, Protocol::Udp, &[("10.244.0.5", 53)])],
        &[],
    );
    let r = apply(&mut p, &only11, false);
    assert_eq!(r.conntrack_deleted, 1);
    assert_eq!(k.conntrack.flows(), vec![foreign]);
    // Nothing changed: no conntrack dump on an event-driven sync.
    k.clear_logs();
    apply(&mut p, &only11, false);
    assert!(!k.reads().iter().any(|r| r.starts_with("conntrack")));
}

#[test]
fn conntrack_hints_merge() {
    let mut h = ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("10.96.0.10")]),
        stale_endpoint_ips: BTreeSet::from([ip("10.244.0.6")]),
    };
    h.merge(ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("10.96.0.11")]),
        ..Default::default()
    });
    assert_eq!(h.stale_service_ips.len(), 2);
    assert_eq!(h.stale_endpoint_ips.len(), 1);
    assert!(!h.is_empty());
    assert!(ConntrackHints::default().is_empty());
}

#[test]
fn hinted_removed_service_flows_are_deleted_even_without_ipvs_changes() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // A UDP service that this process never programmed (e.g. removed while it restarted).
    let stale = ConntrackFlow {
        orig_src: ip("10.244.0.50"),
        orig_sport: 40000,
        orig_dst: ip("10.96.0.10"),
        orig_dport: 53,
        reply_src: ip("10.244.0.6"),
        reply_sport: 53,
    };
    k.conntrack.add_flow(stale);
    let nips = node_ips();
    let d = small();
    let r = p.apply(
        &[FamilyInput {
            desired: &d,
            delta: None,
            config: &config(),
            node_port_ips: &nips,
        }],
        false,
        &ConntrackHints {
            stale_service_ips: BTreeSet::from([ip("10.96.0.10")]),
            ..Default::default()
        },
    );
    assert_eq!(r.conntrack_deleted, 1, "{r:?}");
    assert!(k.conntrack.flows().is_empty());
}
