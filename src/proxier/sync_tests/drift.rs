//! Drift: full syncs find and repair what another tool changed, and count it by kind.

use super::*;

#[test]
fn full_sync_sees_real_server_drift_in_the_quick_view() {
    // The full sync reads every real server through the backend's quick view and dumps only the
    // virtual servers it shows differing: a weight changed behind our back is put back.
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    let (a, port) = EPS[0];
    let mut changed = IpvsDestination::masq(ip(a), port, 1);
    changed.weight = 7;
    k.ipvs.clone().update_destination(&tcp, &changed).unwrap();
    k.clear_logs();
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_destinations.updated, 1, "{r:?}");
    let reads = k.reads();
    let dumps: Vec<&String> = reads
        .iter()
        .filter(|l| l.starts_with("ipvs.destinations"))
        .collect();
    assert_eq!(
        dumps.len(),
        1,
        "only the differing virtual server: {reads:?}"
    );
    assert_eq!(k.dests(&tcp).unwrap()[&(ip(a), port)].weight, 1);
}

/// Changes a real server of `vs` behind the reconciler's back, in one of three ways by `i`: `first`
/// deleted, a stranger added, `first` reweighted. Returns the kind of drift that is.
fn tamper_real_server(
    k: &Kit,
    vs: &IpvsServiceKey,
    first: &IpvsDestination,
    i: usize,
) -> DriftKind {
    let mut ipvs = k.ipvs.clone();
    match i % 3 {
        0 => {
            ipvs.delete_destination(vs, first.addr, first.port).unwrap();
            DriftKind::RealServer
        }
        1 => {
            let stranger = IpvsDestination::masq(ip("10.244.9.9"), 8080, 1);
            ipvs.add_destination(vs, &stranger).unwrap();
            DriftKind::RealServer
        }
        _ => {
            let mut heavier = first.clone();
            heavier.weight = 9;
            ipvs.update_destination(vs, &heavier).unwrap();
            DriftKind::Weight
        }
    }
}

#[test]
fn real_servers_are_verified_one_slice_per_full_sync_within_one_pass() {
    // With a view slice of 2 virtual servers, the 4 of `small()` are read over 2 full syncs (one pass):
    // a real server of any of them deleted, added or reweighted behind our back is repaired, and counted
    // as drift, within one pass; each full sync reads only its slice.
    let k = Kit::new();
    let mut p = proxier(&k);
    p.reconciler.set_view_slice(2);
    let d = small();
    apply(&mut p, &d, true);
    let keys: Vec<IpvsServiceKey> = d.virtual_servers.keys().copied().collect();
    assert_eq!(keys.len(), 4);
    let mut in_a_later_slice = 0;
    for (i, vs) in keys.iter().enumerate() {
        let first = d.virtual_servers[vs].destinations.values().next().unwrap();
        let kind = tamper_real_server(&k, vs, &first, i);
        let before = k.dests(vs).unwrap();
        let mut repaired = None;
        for sync in 1..=2 {
            k.clear_logs();
            let r = apply(&mut p, &d, true);
            assert_eq!(r.failure_count(), 0, "{r:?}");
            let slices = k
                .reads()
                .iter()
                .filter(|l| l.starts_with("ipvs.destination_view"))
                .count();
            assert_eq!(slices, 1, "one slice per full sync");
            if r.drift.counts.get(&kind) == Some(&1) {
                repaired = Some(sync);
                break;
            }
            assert_eq!(
                k.dests(vs).unwrap(),
                before,
                "{vs} not in this sync's slice: left alone"
            );
        }
        assert!(
            repaired.is_some(),
            "{vs}: {kind:?} not repaired within one pass"
        );
        in_a_later_slice += usize::from(repaired == Some(2));
        let want: BTreeSet<(IpAddr, u16, u32)> = d.virtual_servers[vs]
            .destinations
            .values()
            .map(|x| (x.addr, x.port, x.weight))
            .collect();
        let have: BTreeSet<(IpAddr, u16, u32)> = k
            .dests(vs)
            .unwrap()
            .values()
            .map(|x| (x.addr, x.port, x.weight))
            .collect();
        assert_eq!(have, want, "{vs}");
    }
    assert!(
        in_a_later_slice > 0,
        "every repair came in the first full sync: no slices"
    );
    // No real server differs: a full sync dumps none of them.
    k.clear_logs();
    assert_eq!(apply(&mut p, &d, true).writes(), 0);
    assert!(!k.reads().iter().any(|l| l.starts_with("ipvs.destinations")));
}

#[test]
fn full_sync_repairs_drift() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    // Someone else breaks things.
    let mut ipvs = k.ipvs.clone();
    ipvs.delete_service(&key("10.96.0.1", 443, Protocol::Tcp))
        .unwrap();
    for (a, port) in EPS {
        ipvs.delete_destination(&tcp, ip(a), *port).unwrap();
    }
    let mut sets = k.ipsets.clone();
    let ops: Vec<IpSetOp> = k
        .ipsets
        .members("KUBE-CLUSTER-IP")
        .into_iter()
        .map(|entry| IpSetOp::Del {
            set: "KUBE-CLUSTER-IP".into(),
            entry,
        })
        .collect();
    sets.apply(&ops).unwrap();
    sets.destroy("KUBE-NODE-PORT-UDP").unwrap();
    let mut links = k.links.clone();
    for a in k.addrs(DUMMY_DEVICE) {
        links.del_address(DUMMY_DEVICE, a).unwrap();
    }
    let mut ipt = k.iptables.clone();
    assert!(
        ipt.delete_rule(
            IpFamily::V4,
            "nat",
            "PREROUTING",
            &jump_args("kubernetes service portals", "KUBE-SERVICES"),
        )
        .unwrap()
    );
    // An event-driven sync trusts its memory: no dumps, no writes.
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(r.ipvs_destinations.added, 3);
    assert_eq!(r.ipsets_created, 1);
    assert_eq!(r.ipset_entries.added, 3);
    assert_eq!(r.addresses.added, 3);
    assert_eq!(r.jumps_inserted, 1);
    assert_eq!(
        apply(&mut p, &small(), true).writes(),
        0,
        "repaired: the next periodic sync writes nothing"
    );
    // A foreign rule added to one of our chains is drift too: the payload is restored again.
    seed_chain(
        &k,
        "nat",
        "KUBE-SERVICES",
        &["-s", "10.9.9.9/32", "-j", "RETURN"],
    );
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.iptables_restores, 1, "{r:?}");
    assert_eq!(k.restored().last().unwrap().1, small().iptables_payload);
}

#[test]
fn full_sync_recreates_our_sets_of_the_wrong_type() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let want = k.ipsets.set("KUBE-NODE-PORT-TCP").unwrap();
    // Another tool destroys two of our (unreferenced) sets and re-creates them with another type or
    // family, and owns a set of its own.
    let port_set = IpSetType::HashIpPort;
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-TCP",
        port_set,
        IpFamily::V4,
        ["1.2.3.4,tcp:80"],
    );
    k.ipsets.insert_set(
        "KUBE-IPVS-IPS",
        IpSetType::HashIp,
        IpFamily::V6,
        ["fd00::1"],
    );
    k.ipsets.insert_set(
        "FOREIGN",
        IpSetType::HashIpPort,
        IpFamily::V4,
        ["1.2.3.4,tcp:80"],
    );
    // An event-driven sync trusts its memory; the next full sync repairs both.
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
    k.clear_logs();
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipsets_created, 2, "{r:?}");
    assert_eq!(k.ipsets.set("KUBE-NODE-PORT-TCP").unwrap(), want);
    let ipvs_ips = k.ipsets.set("KUBE-IPVS-IPS").unwrap();
    assert_eq!(ipvs_ips.family, IpFamily::V4);
    assert_eq!(ipvs_ips.members, small().ipsets["KUBE-IPVS-IPS"].entries);
    let foreign = k.ipsets.set("FOREIGN").unwrap();
    assert_eq!(foreign.set_type, IpSetType::HashIpPort);
    assert_eq!(foreign.members.len(), 1);
    let writes = k.writes();
    let destroyed: Vec<_> = writes
        .iter()
        .filter(|w| w.contains("ipset.destroy"))
        .collect();
    assert_eq!(destroyed.len(), 2, "{writes:?}");
    assert_eq!(apply(&mut p, &small(), true).writes(), 0, "repaired");

    // A wrong-type set in use cannot be destroyed: counted, left alone, retried on the next sync.
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-UDP",
        IpSetType::HashIp,
        IpFamily::V4,
        ["10.1.1.1"],
    );
    k.ipsets.pin("KUBE-NODE-PORT-UDP", true);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failures_of(FailureKind::Ipset), 1, "{r:?}");
    assert!(r.retry_needed);
    let stuck = k.ipsets.set("KUBE-NODE-PORT-UDP").unwrap();
    assert_eq!(
        (stuck.set_type, stuck.members.len()),
        (IpSetType::HashIp, 1)
    );
    k.ipsets.pin("KUBE-NODE-PORT-UDP", false);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert!(r.full, "the sync after a failure is full");
    let fixed = k.ipsets.set("KUBE-NODE-PORT-UDP").unwrap();
    assert_eq!(
        (fixed.set_type, fixed.members.len()),
        (IpSetType::BitmapPort, 0)
    );
}

/// A full sync counts what changed behind its back by kind (measured against what it applied, not the
/// plan), names the virtual servers, and counts the foreign objects it leaves alone.
#[test]
fn full_sync_counts_drift_by_kind_and_foreign_objects() {
    use crate::proxier::drift_report::{DriftKind, ForeignKind};
    let k = Kit::new();
    let mut p = proxier(&k);
    let first = apply(&mut p, &small(), true);
    assert!(first.drift.is_empty(), "adopting is not drift: {first:?}");
    let quiet = apply(&mut p, &small(), true);
    assert!(quiet.drift.is_empty(), "{quiet:?}");
    let foreign = |r: &SyncReport, kind| r.foreign.as_ref().and_then(|f| f.get(&kind)).copied();
    assert_eq!(foreign(&quiet, ForeignKind::VirtualServer), Some(0));
    assert_eq!(foreign(&quiet, ForeignKind::Ipset), Some(0));

    let member = break_behind_its_back(&k);
    let api = key("10.96.0.1", 443, Protocol::Tcp);
    let web = key("10.96.100.10", 80, Protocol::Tcp);
    let web2 = key("10.96.100.20", 80, Protocol::Tcp);
    // An event-driven sync trusts its memory: it neither sees nor counts anything.
    assert!(apply(&mut p, &small(), false).drift.is_empty());
    let r = apply(&mut p, &small(), true);
    let want = BTreeMap::from([
        (DriftKind::VirtualServer, 1),
        (DriftKind::RealServer, 1),
        (DriftKind::Weight, 1),
        (DriftKind::Scheduler, 1),
        (DriftKind::IpsetMember, 1),
        (DriftKind::IptablesRule, 1),
        (DriftKind::Address, 1),
    ]);
    assert_eq!(r.drift.counts, want, "{r:?}");
    let kinds = |key| {
        r.drift
            .virtual_servers
            .get(&key)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(kinds(api), BTreeSet::from([DriftKind::VirtualServer]));
    assert_eq!(kinds(web), BTreeSet::from([DriftKind::RealServer]));
    assert_eq!(
        kinds(web2),
        BTreeSet::from([DriftKind::Weight, DriftKind::Scheduler])
    );
    assert_eq!(r.drift.addresses, BTreeSet::from([ip("10.96.100.10")]));
    assert!(
        r.drift
            .set_members
            .contains(&("KUBE-CLUSTER-IP".into(), member))
    );
    assert_eq!(foreign(&r, ForeignKind::VirtualServer), Some(1));
    assert_eq!(foreign(&r, ForeignKind::Ipset), Some(1));
    // Repaired: the next full sync finds nothing.
    assert!(apply(&mut p, &small(), true).drift.is_empty());
}

/// Another tool changes one object of each kind of ours (and adds a foreign virtual server and set);
/// returns the member it deleted from KUBE-CLUSTER-IP.
fn break_behind_its_back(k: &Kit) -> String {
    let api = key("10.96.0.1", 443, Protocol::Tcp);
    let web = key("10.96.100.10", 80, Protocol::Tcp);
    let web2 = key("10.96.100.20", 80, Protocol::Tcp);
    let mut ipvs = k.ipvs.clone();
    ipvs.delete_service(&api).unwrap();
    ipvs.delete_destination(&web, ip(EPS[0].0), EPS[0].1)
        .unwrap();
    let reweighted = IpvsDestination::masq(ip(EPS[1].0), EPS[1].1, 5);
    ipvs.update_destination(&web2, &reweighted).unwrap();
    ipvs.update_service(&svc("10.96.100.20", 80, Protocol::Tcp, "wrr"))
        .unwrap();
    seed_vs(k, "10.1.1.1", 8080, "rr");
    let mut sets = k.ipsets.clone();
    let member = k
        .ipsets
        .members("KUBE-CLUSTER-IP")
        .into_iter()
        .next()
        .unwrap();
    let del = IpSetOp::Del {
        set: "KUBE-CLUSTER-IP".into(),
        entry: member.clone(),
    };
    sets.apply(&[del]).unwrap();
    let spec = IpSetSpec::new("FOREIGN", IpSetType::HashIp, IpFamily::V4);
    sets.create(&spec).unwrap();
    let mut links = k.links.clone();
    links.del_address(DUMMY_DEVICE, ip("10.96.100.10")).unwrap();
    let mut ipt = k.iptables.clone();
    let jump = jump_args("kubernetes service portals", "KUBE-SERVICES");
    assert!(
        ipt.delete_rule(IpFamily::V4, "nat", "PREROUTING", &jump)
            .unwrap()
    );

    member
}
