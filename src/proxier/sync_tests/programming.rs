//! What a sync writes and when: the first sync, batches, no-op and event syncs, per-family plans, jumps, real
//! server order.

use super::*;

#[test]
fn first_sync_programs_everything_rules_before_ipvs() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, false);
    assert!(r.full, "first sync is full");
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert!(!r.retry_needed);
    assert_eq!(r.ipvs_services.added, 4);
    assert_eq!(r.ipvs_destinations.added, 7);
    assert_eq!(r.addresses.added, 3);
    assert_eq!(r.iptables_restores, 1);
    assert_eq!(r.jumps_inserted, 2);
    assert_eq!(r.ipsets_created, 4);
    assert_eq!(k.services().len(), 4);
    assert_eq!(k.addrs(DUMMY_DEVICE).len(), 3);
    assert_eq!(
        k.ipsets.members("KUBE-NODE-PORT-TCP"),
        BTreeSet::from(["30080".to_string()])
    );
    assert_eq!(k.ipsets.members("KUBE-IPVS-IPS").len(), 3);
    assert_eq!(
        k.iptables
            .rules(IpFamily::V4, "nat", "PREROUTING")
            .unwrap()
            .len(),
        1
    );
    let w = k.writes();
    // k/k #133773: sets and SNAT rules exist before any VIP is served.
    assert!(pos(&w, "ipset.apply") < pos(&w, "iptables.restore"));
    assert!(pos(&w, "iptables.restore") < pos(&w, "ipvs.add_service"));
    // The jumps travel in the same restore as the payload: no -C / -I process per jump.
    assert!(
        !w.iter().any(|l| l.starts_with("iptables.insert_rule")),
        "{w:#?}"
    );
    assert_eq!(
        w.iter()
            .filter(|l| l.starts_with("iptables.restore"))
            .count(),
        1
    );
    assert!(pos(&w, "ipvs.add_service") < pos(&w, "link.add_address"));
    assert_eq!(w.iter().filter(|l| l.starts_with("ipset.apply")).count(), 1);
    // IPVS writes go in two batches: services, then real servers (no deletions).
    let batches = ipvs_batches(&k);
    assert_eq!(
        batches,
        vec!["B ipvs.batch 4".to_string(), "B ipvs.batch 7".to_string()]
    );
}

#[test]
fn many_real_server_changes_go_in_bounded_batches_and_share_the_plan() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let vips: Vec<String> = (0..500)
        .map(|i| format!("10.96.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let eps: Vec<Vec<(String, u16)>> = (0..500)
        .map(|i| {
            (0..10)
                .map(|j| (format!("10.1.{}.{}", i / 25, (i % 25) * 10 + j + 1), 8080))
                .collect()
        })
        .collect();
    let eps_ref: Vec<Vec<(&str, u16)>> = eps
        .iter()
        .map(|v| v.iter().map(|(a, p)| (a.as_str(), *p)).collect())
        .collect();
    let svcs: Vec<Svc<'_>> = vips
        .iter()
        .zip(&eps_ref)
        .map(|(v, e)| (v.as_str(), 80, Protocol::Tcp, e.as_slice()))
        .collect();
    let d = desired(&svcs, &[]);
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 500);
    assert_eq!(r.ipvs_destinations.added, 5000);
    // services in one batch, then real servers in batches of whole virtual servers (>= 4096 changes)
    let batches = ipvs_batches(&k);
    assert_eq!(
        batches,
        vec![
            "B ipvs.batch 500".to_string(),
            "B ipvs.batch 4100".to_string(),
            "B ipvs.batch 900".to_string()
        ]
    );
    for (key, vs) in &d.virtual_servers {
        let planned: BTreeMap<(IpAddr, u16), IpvsDestination> = vs
            .destinations
            .values()
            .map(|d| ((d.addr, d.port), d.clone()))
            .collect();
        assert_eq!(k.dests(key).unwrap(), planned, "{key}");
    }
    // the reconciler keeps the plan's values, not copies
    let applied = p.reconciler().applied(IpFamily::V4).unwrap();
    assert_eq!(applied.virtual_servers.len(), 500);
    assert!(
        d.virtual_servers
            .iter()
            .all(|(key, vs)| Arc::ptr_eq(vs, &applied.virtual_servers[key]))
    );
    // an equal plan built anew is adopted without writes
    let d2 = desired(&svcs, &[]);
    let r = apply(&mut p, &d2, false);
    assert_eq!(r.ipvs_destinations.added + r.ipvs_destinations.updated, 0);
    let applied = p.reconciler().applied(IpFamily::V4).unwrap();
    assert!(
        d2.virtual_servers
            .iter()
            .all(|(key, vs)| Arc::ptr_eq(vs, &applied.virtual_servers[key]))
    );
}

#[test]
fn identical_syncs_write_nothing_and_event_syncs_do_not_dump() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let d = small();
    apply(&mut p, &d, true);
    k.clear_logs();
    let r = apply(&mut p, &d, false);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    assert!(
        k.reads().is_empty(),
        "event-driven sync read the kernel: {:?}",
        k.reads()
    );

    // A full sync dumps once per kind, reads the tables, and writes nothing when the kernel already
    // holds the rules (drift would be repaired: see full_sync_repairs_drift).
    let r = apply(&mut p, &d, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    let reads = k.reads();
    let count = |p: &str| reads.iter().filter(|l| l.starts_with(p)).count();
    assert_eq!(count("ipvs.services"), 1);
    assert_eq!(count("ipset.dump"), 1);
    assert_eq!(count("link.addresses"), 1);
    // Real servers: one quick view of them all; no virtual server differs, so none is dumped.
    assert_eq!(count("ipvs.destination_view"), 1);
    assert_eq!(count("ipvs.destinations"), 0, "{reads:?}");
    // Jumps already in place are seen in one save per table: no per-jump `-N` / `-C` processes.
    let tables: BTreeSet<&str> = d.jumps.iter().map(|j| j.table).collect();
    assert!(!tables.is_empty());
    assert_eq!(count("iptables.save"), tables.len(), "{reads:?}");
    assert_eq!(count("iptables.check_rule"), 0, "{reads:?}");
    assert_eq!(count("iptables.ensure_chain"), 0, "{reads:?}");

    // The next full sync finds the tables' fingerprint unchanged since that save: no save at all.
    k.clear_logs();
    let r = apply(&mut p, &d, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    assert_eq!(
        k.reads()
            .iter()
            .filter(|l| l.starts_with("iptables.save"))
            .count(),
        0
    );
}

#[test]
fn event_sync_touches_only_the_changed_service() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.clear_logs();
    let three: &[(&str, u16)] = &[
        ("10.244.0.11", 8080),
        ("10.244.0.12", 8080),
        ("10.244.0.13", 8080),
    ];
    // One endpoint added to 10.96.100.10:80 (additions only: no dump needed).
    let d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, three),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(
        k.writes(),
        vec!["ipvs.add_destination 10.96.100.10:80/TCP 10.244.0.13:8080".to_string()]
    );
    assert!(k.reads().is_empty(), "{:?}", k.reads());
    assert_eq!(r.ipvs_destinations.added, 1);

    // A new service: set members, the payload (its text changed), one service, its real server, one address.
    k.clear_logs();
    let d2 = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, three),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
            ("10.96.100.30", 53, Protocol::Udp, &[("10.244.0.20", 53)]),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d2, false);
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(r.addresses.added, 1);
    assert_eq!(r.ipset_entries.added, 2);
    assert_eq!(
        r.ipvs_services.deleted + r.ipvs_destinations.deleted + r.addresses.deleted,
        0
    );
    assert!(
        !k.reads()
            .iter()
            .any(|l| l.starts_with("ipvs.") || l.starts_with("ipset.") || l.starts_with("link.")),
        "{:?}",
        k.reads()
    );

    // Removing it again deletes exactly its objects.
    let r = apply(&mut p, &d, false);
    assert_eq!(r.ipvs_services.deleted, 1);
    assert_eq!(r.addresses.deleted, 1);
    assert_eq!(r.ipset_entries.deleted, 2);
    assert!(
        !k.services()
            .contains(&key("10.96.100.30", 53, Protocol::Udp))
    );
}

/// One externalTrafficPolicy=Local NodePort service whose only endpoint is on another node.
fn local_policy_cluster() -> (ServiceMap, EndpointsMap) {
    let name = ServicePortName {
        namespace: "default".into(),
        name: "web".into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
    };
    let port = ServicePort {
        name: name.clone(),
        cluster_ips: vec![ip("10.96.0.10")],
        port: 80,
        protocol: Protocol::Tcp,
        node_port: Some(30080),
        external_ips: vec![],
        load_balancer_ingress: vec![],
        load_balancer_source_ranges: vec![],
        session_affinity_timeout: None,
        external_policy_local: true,
        internal_policy_local: false,
        health_check_node_port: Some(31000),
        options: None,
    };
    let endpoint = Endpoint::new(ip("10.244.1.5"), 8080).with_topology(Topology::on_node("other"));
    (
        ServiceMap::from([(name.clone(), Arc::new(port))]),
        EndpointsMap::from([(name, Arc::new(vec![endpoint]))]),
    )
}

#[test]
fn sync_proxy_rules_plans_each_family() {
    let k = Kit::new();
    let mut p = Proxier::new(k.backends());
    let (services, endpoints) = local_policy_cluster();
    let snap = FamilySnapshot {
        services: Arc::new(services),
        endpoints: Arc::new(endpoints),
        node: NodeFacts {
            node_name: "n".into(),
            node_ips: vec![ip(NODE)],
            node_port_ips: vec![ip(NODE)],
            ..Default::default()
        },
        config: config(),
    };
    let input = SyncInput {
        families: vec![snap],
        full: false,
        conntrack: ConntrackHints::default(),
        changed: None,
        dummy_addresses: None,
    };
    let r = p.sync_proxy_rules(input.clone());
    let planned = p.desired(IpFamily::V4).expect("the family was planned");
    // The ClusterIP and the NodePort on the node IP.
    assert_eq!(planned.virtual_servers.len(), 2);
    assert_eq!(r.ipvs_services.added, 2);
    assert_eq!(
        k.services(),
        planned.virtual_servers.keys().copied().collect()
    );
    assert_eq!(r.no_local_endpoints[&TrafficPolicy::External], 1);
    assert_eq!(r.no_local_endpoints[&TrafficPolicy::Internal], 0);
    assert!(p.desired(IpFamily::V6).is_none());
    assert_eq!(p.sync_proxy_rules(input).writes(), 0);
}

#[test]
fn event_sync_converges_a_service_that_appeared_behind_its_back() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // Someone created the next service's virtual server, with a stray real server and another scheduler.
    let mut ipvs = k.ipvs.clone();
    ipvs.add_service(&svc("10.96.100.30", 80, Protocol::Tcp, "wlc"))
        .unwrap();
    ipvs.add_destination(
        &key("10.96.100.30", 80, Protocol::Tcp),
        &IpvsDestination::masq(ip("10.244.9.9"), 8080, 1),
    )
    .unwrap();
    let d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, EPS),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
            ("10.96.100.30", 80, Protocol::Tcp, EPS),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.updated, 1);
    let snap = k.ipvs.snapshot();
    let (s, dests) = &snap[&key("10.96.100.30", 80, Protocol::Tcp)];
    assert_eq!(s.scheduler, "rr");
    let got: BTreeSet<IpAddr> = dests.iter().map(|d| d.addr).collect();
    assert_eq!(got, BTreeSet::from([ip("10.244.0.11"), ip("10.244.0.12")]));
    assert_eq!(apply(&mut p, &d, false).writes(), 0);
}

#[test]
fn proxier_can_move_to_a_blocking_thread() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<Proxier>();
    let k = Kit::new();
    let mut p = proxier(&k);
    let r = std::thread::spawn(move || apply(&mut p, &small(), false))
        .join()
        .unwrap();
    assert_eq!(r.ipvs_services.added, 4);
}

#[test]
fn non_canonical_planned_entry_never_ends_missing() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut d = small();
    let (name, mut set) = set(
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        IpSetType::HashIpPortNet,
        &["1.2.3.4,tcp:80,10.1.2.3/32"],
    );
    set.entries.insert("1.2.3.4,tcp:80,10.1.2.3/32".into());
    d.ipsets.insert(name.clone(), set);
    apply(&mut p, &d, true);
    assert_eq!(
        k.ipsets.members(&name),
        BTreeSet::from(["1.2.3.4,tcp:80,10.1.2.3".to_string()])
    );
    // The periodic sync sees the kernel's spelling differ from the plan's: it must not lose the member.
    apply(&mut p, &d, true);
    assert_eq!(
        k.ipsets.members(&name),
        BTreeSet::from(["1.2.3.4,tcp:80,10.1.2.3".to_string()])
    );
}

#[test]
fn jumps_never_pile_up_when_the_save_cannot_be_read_back() {
    let k = Kit::new();
    // A save format the reconciler cannot read back (as a differently printing iptables build might).
    k.iptables.hide_builtin_rules_in_save(true);
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.jumps_inserted, d.jumps.len());
    // Every later full sync sees the jumps "missing" again; `-C` finds them, nothing is added.
    for _ in 0..3 {
        let r = apply(&mut p, &d, true);
        assert_eq!(r.failure_count(), 0, "{r:?}");
        assert_eq!(r.jumps_inserted, 0, "{r:?}");
    }
    for jump in &d.jumps {
        let rules = k
            .iptables
            .rules(IpFamily::V4, jump.table, jump.chain)
            .unwrap();
        assert_eq!(rules.len(), 1, "{} {}: {rules:?}", jump.table, jump.chain);
    }
}

/// `d` with every virtual server on scheduler `name`.
fn with_scheduler(mut d: DesiredState, name: &str) -> DesiredState {
    for vs in d.virtual_servers.values_mut() {
        Arc::make_mut(vs).service.scheduler = name.into();
    }
    d
}

/// The real servers of `vip:80` as the fake kernel lists them (head first, as IPVS does).
fn kernel_order(k: &Kit, vip: &str) -> Vec<String> {
    let mut ipvs = k.ipvs.clone();
    let dests = ipvs.destinations(&key(vip, 80, Protocol::Tcp)).unwrap();
    dests.iter().map(|d| d.addr.to_string()).collect()
}

#[test]
fn hash_schedulers_get_one_real_server_order_whatever_the_history() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let two: &[(&str, u16)] = &[("10.244.0.10", 8080), ("10.244.0.30", 8080)];
    let three: &[(&str, u16)] = &[
        ("10.244.0.10", 8080),
        ("10.244.0.20", 8080),
        ("10.244.0.30", 8080),
    ];
    let plan = |eps, sched| {
        with_scheduler(
            desired(&[("10.96.0.1", 80, Protocol::Tcp, eps)], &[]),
            sched,
        )
    };
    let canonical = ["10.244.0.30", "10.244.0.20", "10.244.0.10"];
    // rr: IPVS keeps the history (the later addition at the head), nothing is relinked.
    apply(&mut p, &plan(two, "rr"), true);
    let r = apply(&mut p, &plan(three, "rr"), false);
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(
        kernel_order(&k, "10.96.0.1"),
        ["10.244.0.20", "10.244.0.30", "10.244.0.10"]
    );
    // The same list under mh: the full sync reads the kernel's order and relinks every real server.
    let r = apply(&mut p, &plan(three, "mh"), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(kernel_order(&k, "10.96.0.1"), canonical);
    assert_eq!(r.ipvs_destinations.updated, 3, "{r:?}");
    // Then identical syncs write nothing.
    let before = ipvs_batches(&k).len();
    apply(&mut p, &plan(three, "mh"), true);
    apply(&mut p, &plan(three, "mh"), false);
    assert_eq!(ipvs_batches(&k).len(), before, "{:#?}", ipvs_batches(&k));
    // An event-driven addition below others: those above it are unlinked first and linked after it.
    let k2 = Kit::new();
    let mut p2 = proxier(&k2);
    apply(&mut p2, &plan(two, "mh"), true);
    k2.log.lock().unwrap().calls.clear();
    apply(&mut p2, &plan(three, "mh"), false);
    assert_eq!(kernel_order(&k2, "10.96.0.1"), canonical);
    let calls = k2.log.lock().unwrap().calls.clone();
    let unlink = pos(
        &calls,
        "W ipvs.delete_destination 10.96.0.1:80/TCP 10.244.0.30:8080",
    );
    let added = pos(
        &calls,
        "W ipvs.add_destination 10.96.0.1:80/TCP 10.244.0.20:8080",
    );
    let relinked = pos(
        &calls,
        "W ipvs.add_destination 10.96.0.1:80/TCP 10.244.0.30:8080",
    );
    assert!(unlink < added && added < relinked, "{calls:#?}");
}
