//! The reconciler growing sets over the in-memory kernel (the real kernel: `tests/uml_sync.rs`).

use crate::kernel::ipset::IpSetSize;
use crate::net::IpFamily;
use crate::proxier::desired::DesiredState;
use crate::proxier::plan::PlanConfig;
use crate::proxier::plan::incremental::empty_state;
use crate::proxier::reconcile::drift::ForeignKind;
use crate::proxier::reconcile::{ConntrackHints, FamilyInput};
use crate::proxier::report::{FailureKind, IpSetFigures, SyncReport};
use crate::proxier::testkit::{Applier, Kit};

const SET: &str = "KUBE-CLUSTER-IP";
const GROWN: IpSetSize = IpSetSize {
    hashsize: 2048,
    maxelem: 131_072,
};

/// `ip,tcp:port` entry number `i` of KUBE-CLUSTER-IP.
fn entry(i: u32) -> String {
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 96, 0, 1)) + i);
    format!("{ip},tcp:80")
}

/// A plan whose KUBE-CLUSTER-IP holds entries `0..n`, matched by a rule (so the set cannot be destroyed).
fn plan(n: u32) -> DesiredState {
    let mut d = empty_state(IpFamily::V4);
    let set = d.ipsets.get_mut(SET).expect("planned set");
    set.entries = (0..n).map(entry).collect();
    set.refresh_size();
    d.iptables_payload = "*nat\n:KUBE-SERVICES - [0:0]\n\
        -A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n"
        .into();
    d
}

fn sync(p: &mut Applier, d: &DesiredState, full: bool) -> SyncReport {
    let cfg = PlanConfig::new(IpFamily::V4);
    let input = FamilyInput {
        desired: d,
        delta: None,
        config: &cfg,
        node_port_ips: &[],
    };
    p.apply(&[input], full, &ConntrackHints::default())
}

fn figures(r: &SyncReport) -> Option<(usize, u32)> {
    let f: Vec<&IpSetFigures> = r.ipsets.iter().filter(|f| f.name == SET).collect();
    f.first().map(|f| (f.entries, f.maxelem))
}

#[test]
fn a_set_outgrowing_upstream_size_is_grown_and_swapped_in() {
    let k = Kit::new();
    let mut p = k.applier();
    let r = sync(&mut p, &plan(60_000), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    let set = k.ipsets.set(SET).expect("created");
    assert_eq!(
        set.size,
        IpSetSize::UPSTREAM,
        "upstream's size while it fits"
    );
    assert_eq!(figures(&r), Some((60_000, 65_536)));
    // An event-driven sync past 65,536: the set is rebuilt larger and swapped in, never destroyed.
    k.clear_logs();
    let r = sync(&mut p, &plan(70_000), false);
    assert!(!r.full);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipsets_grown, 1);
    let set = k.ipsets.set(SET).expect("kept");
    assert_eq!(set.size, GROWN);
    assert_eq!(set.members, plan(70_000).ipsets[SET].entries);
    assert_eq!(k.ipsets.set("KUBE-CLUSTER-IP-G"), None, "staging set gone");
    let writes = k.writes();
    let swap = writes
        .iter()
        .position(|w| w == "ipset.swap KUBE-CLUSTER-IP KUBE-CLUSTER-IP-G");
    let created = writes
        .iter()
        .position(|w| w == "ipset.create KUBE-CLUSTER-IP-G");
    let destroyed = writes
        .iter()
        .rposition(|w| w == "ipset.destroy KUBE-CLUSTER-IP-G");
    assert!(created < swap && swap < destroyed, "{writes:?}");
    assert!(!writes.iter().any(|w| w == "ipset.destroy KUBE-CLUSTER-IP"));
    assert_eq!(figures(&r), Some((70_000, 131_072)));
    // The next full sync reads the grown size back: nothing to do.
    let r = sync(&mut p, &plan(70_000), true);
    assert_eq!(r.writes(), 0, "{r:?}");
    // Fewer members: the set keeps its size (sets never shrink).
    let r = sync(&mut p, &plan(100), false);
    assert_eq!((r.ipsets_grown, r.failure_count()), (0, 0), "{r:?}");
    assert_eq!(k.ipsets.set(SET).map(|s| s.size), Some(GROWN));
    assert_eq!(figures(&r), Some((100, 131_072)));
    assert_eq!(sync(&mut p, &plan(100), true).writes(), 0);
}

#[test]
fn a_full_sync_grows_a_set_that_is_too_small_in_the_kernel() {
    // The node comes from upstream (or another tool re-created our set): the set has upstream's size
    // and its 65,536 members, the plan wants more.
    let k = Kit::new();
    let full = plan(65_536);
    k.ipsets.insert_set(
        SET,
        full.ipsets[SET].spec.set_type,
        IpFamily::V4,
        full.ipsets[SET].entries.iter().cloned(),
    );
    k.ipsets.insert_set(
        "KUBE-CLUSTER-IP-G",
        full.ipsets[SET].spec.set_type,
        IpFamily::V4,
        ["10.0.0.1,tcp:1"],
    );
    let mut p = k.applier();
    let r = sync(&mut p, &plan(80_000), false);
    assert!(r.full, "the first sync is full");
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipsets_grown, 1);
    assert_eq!(k.ipsets.members(SET), plan(80_000).ipsets[SET].entries);
    assert_eq!(k.ipsets.set(SET).map(|s| s.size), Some(GROWN));
    let foreign = r
        .foreign
        .as_ref()
        .and_then(|f| f.get(&ForeignKind::Ipset).copied());
    assert_eq!(foreign, Some(0), "the leftover staging set is ours");
    assert_eq!(k.ipsets.set("KUBE-CLUSTER-IP-G"), None);
    // Someone shrinks it behind our back: an event-driven sync trusts its memory, a full one repairs.
    k.ipsets.resize(SET, IpSetSize::UPSTREAM);
    assert_eq!(sync(&mut p, &plan(80_000), false).writes(), 0);
    let r = sync(&mut p, &plan(80_000), true);
    assert_eq!((r.ipsets_grown, r.failure_count()), (1, 0), "{r:?}");
    assert_eq!(k.ipsets.set(SET).map(|s| s.size), Some(GROWN));
}

#[test]
fn a_failed_grow_keeps_the_old_set_and_applies_what_fits() {
    let k = Kit::new();
    let mut p = k.applier();
    assert_eq!(sync(&mut p, &plan(65_000), true).failure_count(), 0);
    k.set_fail("ipset.swap", true);
    let r = sync(&mut p, &plan(66_000), false);
    assert_eq!(r.ipsets_grown, 0);
    assert_eq!(r.failures_of(FailureKind::Ipset), 1, "{r:?}");
    assert_eq!(r.failures_of(FailureKind::IpsetRejected), 464, "{r:?}");
    assert!(r.retry_needed);
    let set = k.ipsets.set(SET).expect("kept");
    assert_eq!(set.size, IpSetSize::UPSTREAM);
    assert_eq!(
        set.members.len(),
        65_536,
        "every old member kept, as many new ones as fit"
    );
    assert!(set.members.is_superset(&plan(65_000).ipsets[SET].entries));
    assert_eq!(
        k.ipsets.set("KUBE-CLUSTER-IP-G"),
        None,
        "staging set destroyed"
    );
    // The retry (a full sync) succeeds once the kernel does.
    k.set_fail("ipset.swap", false);
    let r = sync(&mut p, &plan(66_000), false);
    assert!(r.full);
    assert_eq!((r.ipsets_grown, r.failure_count()), (1, 0), "{r:?}");
    assert_eq!(k.ipsets.members(SET), plan(66_000).ipsets[SET].entries);
}
