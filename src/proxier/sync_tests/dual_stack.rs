//! Both families at once: one IPVS handle and kube-ipvs0, each family its own objects and figures.

use super::*;

/// An IPv6 plan: one ClusterIP service with KUBE-6- sets.
/// (vip, port, endpoints) of a TCP service.
type Svc6<'a> = (&'a str, u16, &'a [(&'a str, u16)]);

fn desired_v6(services: &[Svc6<'_>]) -> DesiredState {
    let mut d = desired(&[], &[]);
    d.family = IpFamily::V6;
    d.ipsets.clear();
    let mut ips = BTreeSet::new();
    for (vip, port, eps) in services {
        let k = key(vip, *port, Protocol::Tcp);
        let mut service = svc(vip, *port, Protocol::Tcp, "rr");
        service.netmask = 128;
        d.virtual_servers.insert(
            k,
            Arc::new(DesiredVirtualServer {
                service,
                destinations: eps
                    .iter()
                    .map(|(a, p)| ((ip(a), *p), IpvsDestination::masq(ip(a), *p, 1)))
                    .collect(),
            }),
        );
        d.bound_addresses.insert(ip(vip));
        ips.insert(vip.to_string());
    }
    let mut set = set("KUBE-6-IPVS-IPS", IpSetType::HashIp, &[]);
    set.1.spec.family = IpFamily::V6;
    set.1.entries = ips;
    d.ipsets.insert(set.0, set.1);
    d.iptables_payload =
        "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n".into();
    d
}

#[test]
fn dual_stack_shares_ipvs_and_kube_ipvs0_without_crosstalk() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let v4 = small();
    let v6 = desired_v6(&[("fd00::10", 80, &[("fd01::11", 8080)])]);
    let (c4, mut c6) = (config(), config());
    c6.family = IpFamily::V6;
    let nips = node_ips();
    let both = |p: &mut Applier, v4: &DesiredState, v6: &DesiredState, full: bool| {
        p.apply(
            &[
                FamilyInput {
                    desired: v4,
                    delta: None,
                    config: &c4,
                    node_port_ips: &nips,
                },
                FamilyInput {
                    desired: v6,
                    delta: None,
                    config: &c6,
                    node_port_ips: &[],
                },
            ],
            full,
            &ConntrackHints::default(),
        )
    };
    let r = both(&mut p, &v4, &v6, true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 5);
    assert_eq!(r.iptables_restores, 2);
    assert_eq!(k.addrs(DUMMY_DEVICE).len(), 4);
    assert!(
        k.iptables
            .rules(IpFamily::V6, "nat", "KUBE-SERVICES")
            .is_some()
    );
    // One dump of IPVS / sets / addresses serves both families.
    k.clear_logs();
    let r = both(&mut p, &v4, &v6, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    let reads = k.reads();
    assert_eq!(
        reads
            .iter()
            .filter(|l| l.starts_with("ipvs.services"))
            .count(),
        1
    );
    assert_eq!(
        reads
            .iter()
            .filter(|l| l.starts_with("link.addresses"))
            .count(),
        1
    );
    // Emptying the IPv6 plan removes only IPv6 objects, and the reverse.
    let empty6 = desired_v6(&[]);
    let r = both(&mut p, &v4, &empty6, true);
    assert_eq!(r.ipvs_services.deleted, 1);
    assert_eq!(r.addresses.deleted, 1);
    assert_eq!(k.services().len(), 4);
    let r = both(&mut p, &desired(&[], &[]), &v6, true);
    assert_eq!(r.ipvs_services.deleted, 4);
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(
        k.services(),
        BTreeSet::from([key("fd00::10", 80, Protocol::Tcp)])
    );
    assert_eq!(k.addrs(DUMMY_DEVICE), vec![ip("fd00::10")]);
}

#[test]
fn dual_stack_reports_each_familys_own_figures() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut v4 = small();
    let v6 = desired_v6(&[("fd00::10", 80, &[("fd01::11", 8080)])]);
    let (c4, mut c6) = (config(), config());
    c6.family = IpFamily::V6;
    let nips = node_ips();
    let both = |p: &mut Applier, v4: &DesiredState, hints: &ConntrackHints| {
        let input = |desired, config, node_port_ips| FamilyInput {
            desired,
            delta: None,
            config,
            node_port_ips,
        };
        p.apply(&[input(v4, &c4, &nips), input(&v6, &c6, &[])], false, hints)
    };
    let r = both(&mut p, &v4, &ConntrackHints::default());
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(
        r.families.keys().copied().collect::<Vec<_>>(),
        vec![IpFamily::V4, IpFamily::V6]
    );
    let own: std::time::Duration = r.families.values().map(|f| f.duration).sum();
    assert!(own <= r.duration, "{own:?} > {:?}", r.duration);

    // Only v4's payload changes and its restore fails; a stale flow of a removed v6 UDP service.
    v4.iptables_payload =
        v4.iptables_payload
            .replacen("COMMIT", "-A KUBE-POSTROUTING -j RETURN\nCOMMIT", 1);
    k.set_fail("iptables.restore", true);
    k.conntrack.add_flow(ConntrackFlow {
        orig_src: ip("fd01::50"),
        orig_sport: 40000,
        orig_dst: ip("fd00::53"),
        orig_dport: 53,
        reply_src: ip("fd01::6"),
        reply_sport: 53,
    });
    let hints = ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("fd00::53")]),
        ..Default::default()
    };
    let r = both(&mut p, &v4, &hints);
    let (f4, f6) = (&r.families[&IpFamily::V4], &r.families[&IpFamily::V6]);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1, "{r:?}");
    assert_eq!(f4.iptables_restore_failures, 1, "{r:?}");
    assert_eq!(f6.iptables_restore_failures, 0, "{r:?}");
    assert_eq!(r.conntrack_deleted, 1, "{r:?}");
    assert_eq!(
        (f4.conntrack_deleted, f6.conntrack_deleted),
        (0, 1),
        "{r:?}"
    );
    assert!(f4.conntrack_duration.is_some() && f6.conntrack_duration.is_some());
    let own: std::time::Duration = r.families.values().map(|f| f.duration).sum();
    assert!(own <= r.duration, "{own:?} > {:?}", r.duration);
}

/// A dual-stack node whose IPv4 plan is `small()`: full syncs with a given IPv6 plan, and the IPVS
/// reads each made.
struct DualStack {
    k: Kit,
    p: Applier,
    v4: DesiredState,
    c4: PlanConfig,
    c6: PlanConfig,
    nips: Vec<IpAddr>,
}

/// The netlink dump (every family) and the one-call IPv4 read, as the kit logs them.
const DUMP: &str = "ipvs.services";
const IPV4: &str = "ipvs.services ipv4";

impl DualStack {
    /// Real-server view slices of 2 virtual servers, so a pass over `small()`'s takes a few syncs.
    fn new() -> Self {
        let k = Kit::new();
        let mut p = proxier(&k);
        p.reconciler.set_view_slice(2);
        let mut c6 = config();
        c6.family = IpFamily::V6;
        DualStack {
            k,
            p,
            v4: small(),
            c4: config(),
            c6,
            nips: node_ips(),
        }
    }

    /// One full sync (without failures) and the IPVS services reads it made.
    fn full(&mut self, v6: &DesiredState) -> (SyncReport, Vec<String>) {
        self.k.clear_logs();
        let input = |desired, config, node_port_ips| FamilyInput {
            desired,
            delta: None,
            config,
            node_port_ips,
        };
        let r = self.p.apply(
            &[
                input(&self.v4, &self.c4, &self.nips),
                input(v6, &self.c6, &[]),
            ],
            true,
            &ConntrackHints::default(),
        );
        assert_eq!(r.failure_count(), 0, "{r:?}");
        let reads = self.k.reads().into_iter();
        let reads = reads.filter(|l| l.starts_with(DUMP));
        (r, reads.map(|l| l.trim_end().to_string()).collect())
    }
}

/// The foreign virtual servers a full sync reported.
fn foreign_vs(r: &SyncReport) -> Option<u64> {
    use crate::proxier::reconcile::drift::ForeignKind;
    let foreign = r.foreign.as_ref()?;
    foreign.get(&ForeignKind::VirtualServer).copied()
}

/// A dual-stack node that plans no IPv6 virtual server dumps on its first full sync only, then reads
/// IPv4 with the one-call read and still writes nothing.
#[test]
fn dual_stack_without_ipv6_virtual_servers_reads_ipv4_in_one_call() {
    let mut n = DualStack::new();
    let none6 = desired_v6(&[]);
    assert_eq!(
        n.full(&none6).1,
        [DUMP],
        "the first full sync reads everything"
    );
    for _ in 0..3 {
        let (r, reads) = n.full(&none6);
        assert_eq!(r.writes(), 0, "{r:?}");
        assert_eq!(reads, [IPV4]);
    }
}

/// A foreign IPv6 virtual server that appears behind our back: a slice of the view's pass shows it,
/// that full sync dumps and counts it, later ones report the count without dumping, and a pass that
/// shows none after it went clears the count, still undumped.
#[test]
fn dual_stack_dumps_when_the_view_shows_an_ipv6_virtual_server() {
    let mut n = DualStack::new();
    let none6 = desired_v6(&[]);
    n.full(&none6);
    let mut ipvs = n.k.ipvs.clone();
    ipvs.add_service(&svc("fd00::99", 80, Protocol::Tcp, "rr"))
        .unwrap();
    let dumped = (0..4).find_map(|_| {
        let (r, reads) = n.full(&none6);
        (reads == [DUMP]).then_some(r)
    });
    let r = dumped.expect("no full sync of a pass dumped the IPv6 virtual server");
    assert_eq!(foreign_vs(&r), Some(1), "{r:?}");
    let (r, reads) = n.full(&none6);
    assert_eq!(reads, [IPV4]);
    assert_eq!(foreign_vs(&r), Some(1), "{r:?}");

    ipvs.delete_service(&key("fd00::99", 80, Protocol::Tcp))
        .unwrap();
    let mut last = None;
    for _ in 0..4 {
        let (r, reads) = n.full(&none6);
        assert_eq!(reads, [IPV4]);
        last = foreign_vs(&r);
    }
    assert_eq!(last, Some(0));
}

/// Planned IPv6 virtual servers: every full sync dumps and verifies them; the sync that removes the
/// last one still dumps (it was applied), the next does not.
#[test]
fn dual_stack_dumps_while_ipv6_virtual_servers_are_planned_or_applied() {
    let mut n = DualStack::new();
    let v6 = desired_v6(&[("fd00::10", 80, &[("fd01::11", 8080)])]);
    let (r, reads) = n.full(&v6);
    assert_eq!((r.ipvs_services.added, reads), (5, vec![DUMP.to_string()]));
    n.k.ipvs
        .clone()
        .delete_service(&key("fd00::10", 80, Protocol::Tcp))
        .unwrap();
    let (r, reads) = n.full(&v6);
    assert_eq!(r.ipvs_services.added, 1, "drift repaired: {r:?}");
    assert_eq!(reads, [DUMP]);
    let none6 = desired_v6(&[]);
    let (r, reads) = n.full(&none6);
    assert_eq!(
        (r.ipvs_services.deleted, reads),
        (1, vec![DUMP.to_string()])
    );
    let (r, reads) = n.full(&none6);
    assert_eq!(reads, [IPV4]);
    assert_eq!(foreign_vs(&r), Some(0), "{r:?}");
}
