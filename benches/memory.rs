//! Where the daemon's memory goes at scale, measured with a counting global allocator (no kernel needed).
//!
//! `cargo bench --bench memory -- [N...]` (default 10000) builds N Services × 10 endpoints exactly as the
//! scale bench does (`tests/common/scale.rs`), passes them through the same steps the daemon runs — watch
//! event cache, change trackers, service/endpoint maps, incremental planner, reconciler over the in-memory
//! backends — and prints, per step, the bytes that stay allocated and the peak while the step ran. The
//! in-memory backends' own share (their copy of the "kernel") is printed separately and is not part of
//! the daemon's footprint.
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../tests/common/scale.rs"]
mod scale;

use counting_alloc::{CHUNKS, LIVE, PEAK};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube_proxy_rs::cluster::model::{EndpointsMap, IpFamily, ServiceMap};
use kube_proxy_rs::cluster::watch::{EventCache, Trackers};
use kube_proxy_rs::explain::index::DecisionIndex;
use kube_proxy_rs::kernel::conntrack::fake::FakeConntrack;
use kube_proxy_rs::kernel::ipset::fake::FakeIpSets;
use kube_proxy_rs::kernel::iptables::fake::FakeIptables;
use kube_proxy_rs::kernel::ipvs::fake::FakeIpvs;
use kube_proxy_rs::kernel::link::fake::FakeLinks;
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig};
use kube_proxy_rs::proxier::reconcile::Backends;
use kube_proxy_rs::proxier::{FamilySnapshot, Proxier, SyncInput};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const M: usize = 10;

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Runs `f`, printing the bytes it left allocated and the peak above the starting point.
fn step<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    let after = LIVE.load(Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed);
    println!(
        "  {name:<52} retained {:>8.1} MiB   peak +{:>7.1} MiB   (live total {:>7.1} MiB, {:>7.1} MiB as malloc chunks)",
        mib(after.saturating_sub(before)),
        mib(peak.saturating_sub(before)),
        mib(after),
        mib(CHUNKS.load(Ordering::Relaxed))
    );
    out
}

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.replace('_', "").parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![10_000];
    }
    for n in sizes {
        run(n);
    }
}

fn run(n: usize) {
    println!("\nN = {n} services × {M} endpoints (scale-bench objects), live heap bytes per step:");
    let base = LIVE.load(Ordering::Relaxed);
    let chunks_base = CHUNKS.load(Ordering::Relaxed);
    let trackers = Trackers::new(scale::NODE);
    let mut svc_cache = EventCache::<Service>::keys_only();
    let mut eps_cache = EventCache::<EndpointSlice>::keys_only();
    step("watch: Service event cache + service tracker", || {
        svc_cache.handle(watcher::Event::Init, |_, _| {});
        for i in 0..n {
            let svc: Service = serde_json::from_value(scale::service(i)).expect("service");
            svc_cache.handle(watcher::Event::InitApply(svc), |prev, cur| {
                let mut t = trackers.services.lock().expect("lock");
                t.update(prev, cur);
            });
        }
        svc_cache.handle(watcher::Event::InitDone, |_, _| {});
    });
    step(
        "watch: EndpointSlice event cache + endpoints tracker",
        || {
            eps_cache.handle(watcher::Event::Init, |_, _| {});
            for i in 0..n {
                let s: EndpointSlice =
                    serde_json::from_value(scale::slice(i, M, &[], None)).expect("slice");
                eps_cache.handle(watcher::Event::InitApply(s), |prev, cur| {
                    let mut t = trackers.endpoints.lock().expect("lock");
                    match (prev, cur) {
                        (_, Some(cur)) => t.update(cur, false),
                        (Some(prev), None) => t.update(prev, true),
                        (None, None) => return,
                    };
                });
            }
            eps_cache.handle(watcher::Event::InitDone, |_, _| {});
        },
    );
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    step("trackers → ServiceMap + EndpointsMap", || {
        trackers.services.lock().expect("lock").apply(&mut sm);
        trackers.endpoints.lock().expect("lock").apply(&mut em);
    });
    let sm = Arc::new(sm);
    let em = Arc::new(em);

    let (ipvs, ipsets, iptables, links) = (
        FakeIpvs::new(),
        FakeIpSets::new(),
        FakeIptables::new(),
        FakeLinks::new(),
    );
    iptables.link_ipsets(&ipsets);
    links.add_link("node0", "dummy", true, &[node_ip()]);
    let backends = Backends {
        ipvs: Box::new(ipvs.clone()),
        ipsets: Box::new(ipsets.clone()),
        iptables: Box::new(iptables.clone()),
        links: Box::new(links.clone()),
        conntrack: Box::new(FakeConntrack::new()),
    };
    let mut proxier = Proxier::new(backends);
    let input = SyncInput {
        families: vec![FamilySnapshot {
            services: sm.clone(),
            endpoints: em.clone(),
            node: node(),
            config: config(),
        }],
        full: true,
        ..Default::default()
    };
    let before_sync = LIVE.load(Ordering::Relaxed);
    PEAK.store(before_sync, Ordering::Relaxed);
    let report = proxier.sync_proxy_rules(input.clone());
    assert_eq!(report.failure_count(), 0, "{report:?}");
    let first_peak = PEAK.load(Ordering::Relaxed) - before_sync;
    let after_first = LIVE.load(Ordering::Relaxed);
    PEAK.store(after_first, Ordering::Relaxed);
    let r = proxier.sync_proxy_rules(SyncInput {
        full: true,
        ..input
    });
    assert_eq!(r.failure_count(), 0, "{r:?}");
    let periodic_peak = PEAK.load(Ordering::Relaxed) - after_first;
    // The daemon publishes the first sync's decision records for explain and the state metrics.
    let index = step("published decision index (explain, metrics)", || {
        let mut index = DecisionIndex::new();
        for (family, changes) in proxier.take_decision_changes() {
            index.apply(family, changes);
        }
        index
    });
    let after_sync = LIVE.load(Ordering::Relaxed);
    let chunks_after_sync = CHUNKS.load(Ordering::Relaxed);
    // Owners of the proxier's share, freed in this order: what each holds that the next does not share.
    let published = before_free(|| drop(index));
    let plan = before_free(|| proxier.forget_plans());
    let applied = before_free(|| drop(proxier));
    let after_drop = LIVE.load(Ordering::Relaxed);
    let chunks_after_drop = CHUNKS.load(Ordering::Relaxed);
    drop((ipvs, ipsets, iptables, links));
    let fake_kernel = after_drop - LIVE.load(Ordering::Relaxed);
    let fake_chunks = chunks_after_drop - CHUNKS.load(Ordering::Relaxed);
    let proxier_bytes = after_sync - after_drop - published;
    println!(
        "  {:<52} retained {:>8.1} MiB   peak +{:>7.1} MiB (incl. fake kernel)",
        "first (full) sync: planner + reconciler state",
        mib(proxier_bytes),
        mib(first_peak),
    );
    println!(
        "  {:<52} {:>17} peak +{:>7.1} MiB",
        "periodic full sync (no-op)",
        "",
        mib(periodic_peak),
    );
    println!(
        "  {:<52} {:>8.1} MiB",
        "in-memory fake kernel (excluded)",
        mib(fake_kernel)
    );
    let total = after_sync.saturating_sub(base + fake_kernel);
    let total_chunks = chunks_after_sync.saturating_sub(chunks_base + fake_chunks);
    println!(
        "  {:<52} {:>8.1} MiB (event caches hold {} + {} objects); {:.1} MiB as malloc chunks",
        "daemon-side total after the syncs",
        mib(total),
        svc_cache.len(),
        eps_cache.len(),
        mib(total_chunks)
    );
    // Where the remaining bytes are: freed per structure, in an order that frees shared values last.
    println!("  of which (freed when dropped):");
    println!(
        "    {:<50} {:>8.1} MiB",
        "published decision index (records shared with the plan)",
        mib(published)
    );
    println!(
        "    {:<50} {:>8.1} MiB",
        "plan: per-Service contributions, desired state, records",
        mib(plan)
    );
    println!(
        "    {:<50} {:>8.1} MiB",
        "applied state (incl. virtual servers shared with the plan)",
        mib(applied)
    );
    freed("Service event cache", svc_cache);
    freed("EndpointSlice event cache", eps_cache);
    freed("change trackers (applied ports, slices)", trackers);
    freed("ServiceMap", sm);
    freed("EndpointsMap", em);
}

/// Runs `f` (which frees something) and returns the bytes it freed.
fn before_free(f: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    f();
    before.saturating_sub(LIVE.load(Ordering::Relaxed))
}

/// Drops `value` and prints the bytes that freed.
fn freed<T>(name: &str, value: T) {
    let before = LIVE.load(Ordering::Relaxed);
    drop(value);
    println!(
        "    {name:<50} {:>8.1} MiB",
        mib(before.saturating_sub(LIVE.load(Ordering::Relaxed)))
    );
}

fn node_ip() -> IpAddr {
    scale::NODE_IP.parse().expect("node ip")
}

fn node() -> NodeFacts {
    NodeFacts::new(scale::NODE, vec![node_ip()])
}

fn config() -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec![
            scale::CLUSTER_CIDR.parse().expect("cluster cidr"),
        ]),
        ..PlanConfig::new(IpFamily::V4)
    }
}
