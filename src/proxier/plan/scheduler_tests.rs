//! Per-Service schedulers in the plan: every virtual server of an annotated Service, both families.

use super::*;
use crate::cluster::model::{LoadBalancerIngress, ServicePortName};
use crate::cluster::service_options::{
    AnnotationError, ProblemKind, SchedulerRequest, ServiceOptions,
};
use crate::kernel::ipvs::FLAG_PERSISTENT;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A dual-stack LoadBalancer service port `name` with node port `np`, and per family: ClusterIP
/// `<prefix>3`, external IP `<prefix>1`, LB IP `<prefix>2`.
fn port(
    name: &str,
    np: u16,
    v4: &str,
    v6: &str,
    scheduler: Option<Arc<ServiceOptions>>,
) -> ServicePort {
    let spn = ServicePortName {
        namespace: "ns".into(),
        name: name.into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
    };
    ServicePort {
        node_port: Some(np),
        external_ips: vec![ip(&format!("{v4}1")), ip(&format!("{v6}1"))],
        load_balancer_ingress: [format!("{v4}2"), format!("{v6}2")]
            .iter()
            .map(|a| LoadBalancerIngress {
                ip: ip(a),
                ip_mode_proxy: false,
            })
            .collect(),
        options: scheduler,
        ..ServicePort::new(spn, vec![ip(&format!("{v4}3")), ip(&format!("{v6}3"))], 80)
    }
}

fn services(ports: Vec<ServicePort>) -> ServiceMap {
    ports
        .into_iter()
        .map(|p| (p.name.clone(), Arc::new(p)))
        .collect()
}

fn node() -> NodeFacts {
    NodeFacts::new("n1", vec![ip("192.168.0.10"), ip("fd00::10")])
}

/// (scheduler, flags) of every virtual server of the plan, by address and port.
fn schedulers(sm: &ServiceMap, cfg: &PlanConfig) -> BTreeMap<(IpAddr, u16), (String, u32)> {
    let d = plan(sm, &EndpointsMap::new(), &node(), cfg);
    d.virtual_servers
        .values()
        .map(|v| {
            let s = &v.service;
            ((s.key.addr, s.key.port), (s.scheduler.clone(), s.flags))
        })
        .collect()
}

fn set(scheduler: Scheduler, flags: u32) -> Option<Arc<ServiceOptions>> {
    let request = SchedulerRequest {
        scheduler,
        flags,
        source: "ipvs.kube-proxy-rs.io/scheduler",
    };
    Some(Arc::new(ServiceOptions {
        scheduler: Some(request),
        ..Default::default()
    }))
}

/// Asserts the four virtual servers of the service at `prefix` (node port `np`) have `want`.
fn assert_service(
    got: &BTreeMap<(IpAddr, u16), (String, u32)>,
    family: IpFamily,
    prefix: (&str, &str),
    np: u16,
    want: (&str, u32),
) {
    let (prefix, node_ip) = match family {
        IpFamily::V4 => (prefix.0, ip("192.168.0.10")),
        IpFamily::V6 => (prefix.1, ip("fd00::10")),
    };
    let mut keys: Vec<(IpAddr, u16)> = ["1", "2", "3"]
        .iter()
        .map(|s| (ip(&format!("{prefix}{s}")), 80))
        .collect();
    keys.push((node_ip, np));
    for k in keys {
        let (s, f) = &got[&k];
        assert_eq!((s.as_str(), *f), want, "{family:?} {k:?}");
    }
}

#[test]
fn every_virtual_server_of_the_service_gets_its_scheduler() {
    let sm = services(vec![
        port(
            "hashed",
            30001,
            "10.1.0.",
            "fd01::",
            set(Scheduler::Sh, 0x10),
        ),
        port("plain", 30002, "10.2.0.", "fd02::", None),
        port(
            "maglev",
            30003,
            "10.3.0.",
            "fd03::",
            set(Scheduler::Mh, 0x8),
        ),
    ]);
    for family in [IpFamily::V4, IpFamily::V6] {
        let cfg = PlanConfig {
            scheduler: Scheduler::Wrr,
            ..PlanConfig::new(family)
        };
        let got = schedulers(&sm, &cfg);
        assert_eq!(got.len(), 12, "{got:?}");
        let sh = ("sh", 0x10);
        assert_service(&got, family, ("10.1.0.", "fd01::"), 30001, sh);
        assert_service(&got, family, ("10.2.0.", "fd02::"), 30002, ("wrr", 0));
        // mh gets mh-port as upstream sets it, plus the annotated mh-fallback.
        let mh = ("mh", 0x18);
        assert_service(&got, family, ("10.3.0.", "fd03::"), 30003, mh);
    }
}

#[test]
fn mh_without_flags_gets_upstreams_flags_and_affinity_stays() {
    let mut p = port("m", 30001, "10.1.0.", "fd01::", set(Scheduler::Mh, 0));
    p.session_affinity_timeout = Some(60);
    let got = schedulers(&services(vec![p]), &PlanConfig::new(IpFamily::V4));
    let want = ("mh", 0x10 | FLAG_PERSISTENT);
    assert_service(&got, IpFamily::V4, ("10.1.0.", ""), 30001, want);
}

#[test]
fn invalid_or_unavailable_schedulers_fall_back_to_the_node_scheduler() {
    let bad = Arc::new(ServiceOptions {
        problems: vec![AnnotationError {
            annotation: "ipvs.kube-proxy-rs.io/scheduler",
            value: "fancy".into(),
            reason: "unknown".into(),
            kind: ProblemKind::Invalid,
        }],
        ..Default::default()
    });
    let sm = services(vec![
        port("bad", 30001, "10.1.0.", "fd01::", Some(bad)),
        port(
            "twos",
            30002,
            "10.2.0.",
            "fd02::",
            set(Scheduler::Twos, 0x20),
        ),
        port("lc", 30003, "10.3.0.", "fd03::", set(Scheduler::Lc, 0)),
    ]);
    let cfg = PlanConfig {
        scheduler: Scheduler::Mh,
        unavailable_schedulers: BTreeMap::from([(
            Scheduler::Twos,
            decision::Unavailable::ModuleNotLoaded("no module".into()),
        )]),
        ..PlanConfig::new(IpFamily::V4)
    };
    let got = schedulers(&sm, &cfg);
    let v4 = ("10.1.0.", "");
    assert_service(&got, IpFamily::V4, v4, 30001, ("mh", 0x10));
    let v4 = ("10.2.0.", "");
    assert_service(&got, IpFamily::V4, v4, 30002, ("mh", 0x10));
    let v4 = ("10.3.0.", "");
    assert_service(&got, IpFamily::V4, v4, 30003, ("lc", 0));
}

mod reconcile {
    //! The plan applied to the fake kernel: a scheduler change edits virtual servers in place; a
    //! scheduler the kernel refuses is reported.
    use super::*;
    use crate::proxier::testkit::{Applier, Kit};
    use crate::proxier::{ConntrackHints, FamilyInput, SyncReport};

    fn apply(p: &mut Applier, d: &DesiredState, cfg: &PlanConfig, full: bool) -> SyncReport {
        let nips = node().node_port_ips;
        let input = FamilyInput {
            desired: d,
            delta: None,
            config: cfg,
            node_port_ips: &nips,
        };
        p.apply(&[input], full, &ConntrackHints::default())
    }

    fn one(choice: Option<Arc<ServiceOptions>>) -> ServiceMap {
        services(vec![port("web", 30001, "10.1.0.", "fd01::", choice)])
    }

    #[test]
    fn a_scheduler_change_edits_every_virtual_server_in_place() {
        let kit = Kit::new();
        let mut p = kit.applier();
        let cfg = PlanConfig::new(IpFamily::V4);
        let eps = EndpointsMap::new();
        let first = plan(&one(set(Scheduler::Sh, 0)), &eps, &node(), &cfg);
        let r = apply(&mut p, &first, &cfg, true);
        assert_eq!(r.ipvs_services.added, 4, "{r:?}");
        for (choice, full) in [(set(Scheduler::Mh, 0x8), false), (None, true)] {
            let d = plan(&one(choice), &eps, &node(), &cfg);
            kit.clear_logs();
            let r = apply(&mut p, &d, &cfg, full);
            let counts = r.ipvs_services;
            assert_eq!(
                (counts.added, counts.updated, counts.deleted),
                (0, 4, 0),
                "{r:?}"
            );
            assert!(
                r.failures.is_empty() && r.refused_schedulers.is_empty(),
                "{r:?}"
            );
            let writes = kit.writes();
            let count = |op: &str| writes.iter().filter(|w| w.contains(op)).count();
            assert_eq!(count("ipvs.update_service"), 4, "{writes:?}");
            let recreated = count("ipvs.delete_service") + count("ipvs.add_service");
            assert_eq!(recreated, 0, "{writes:?}");
        }
    }

    #[test]
    fn a_scheduler_the_kernel_refuses_is_reported() {
        let kit = Kit::new();
        let mut p = kit.applier();
        let cfg = PlanConfig::new(IpFamily::V4);
        let mut d = plan(
            &one(set(Scheduler::Sh, 0)),
            &EndpointsMap::new(),
            &node(),
            &cfg,
        );
        // What the kernel says for a scheduler it has no module for (the fake knows the stock names).
        let vs = d.virtual_servers.values_mut().next().unwrap();
        Arc::make_mut(vs).service.scheduler = "nope".into();
        let r = apply(&mut p, &d, &cfg, true);
        assert_eq!(r.refused_schedulers, BTreeSet::from(["nope".to_string()]));
        assert!(r.retry_needed && !r.failures.is_empty(), "{r:?}");
        assert_eq!(r.ipvs_services.added, 3, "{r:?}");
    }
}
