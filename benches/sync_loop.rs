//! The daemon's whole sync loop on the host, over the in-memory backends: where the CPU of a sync goes
//! besides the kernel (planning, comparing, decision records, publishing, metrics, health checks).
//!
//! `cargo bench --bench sync_loop -- [N] [kind...]` (default `10000 noop 1 10 100`) loads N scale-bench
//! Services × 10 endpoints into the change trackers and runs the first (cold, full) sync; then per
//! kind: `noop`, periodic full syncs with nothing changed; a number B, event-driven syncs that each
//! follow B EndpointSlice changes (the scale bench's churn: one extra endpoint in, the previous one
//! out). Per kind it prints the process CPU and minor page faults per sync, and the counting
//! allocator's allocations, bytes allocated and peak heap above the start per sync: counts that repeat
//! exactly from run to run. `KPRS_SYNC_LOOP_SYNCS` sets the syncs per kind (default: 6000 / B, at least
//! 20; 20 for `noop`). The syncs of each kind run between two calls of `dump_mark`, so that
//! `scripts/bench-counts.sh` can count their instructions with `valgrind --tool=callgrind
//! --dump-before` (this host's `perf` has no instruction counter). `perf record -g` on it shows the
//! split by function.
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../tests/common/scale.rs"]
mod scale;

use counting_alloc::{AllocCounts, AllocMeter};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::cluster::watch::{NodeInfo, Synced, Trackers};
use kube_proxy_rs::config::{Invocation, parse_args};
use kube_proxy_rs::daemon::events::Events;
use kube_proxy_rs::daemon::sync::{ProcessUsage, SyncLoop, SyncParts, SyncSettings};
use kube_proxy_rs::explain::Published;
use kube_proxy_rs::explain::metrics::StateMetrics;
use kube_proxy_rs::kernel::KernelResult;
use kube_proxy_rs::kernel::conntrack::fake::FakeConntrack;
use kube_proxy_rs::kernel::ipset::fake::FakeIpSets;
use kube_proxy_rs::kernel::iptables::fake::FakeIptables;
use kube_proxy_rs::kernel::ipvs::fake::FakeIpvs;
use kube_proxy_rs::kernel::link::Links;
use kube_proxy_rs::kernel::link::fake::FakeLinks;
use kube_proxy_rs::metrics::Metrics;
use kube_proxy_rs::proxier::Proxier;
use kube_proxy_rs::proxier::reconcile::Backends;
use kube_proxy_rs::runner::{RunnerConfig, bounded_frequency_runner};
use kube_proxy_rs::server::{ProxyHealth, ServiceHealthServer};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

const M: usize = 10;

/// The fake links with the real backend's cache of the other links' addresses (kept until a write), so
/// that an event-driven sync here costs what it costs over netlink, not a walk of the fake's 10k
/// kube-ipvs0 addresses.
struct CachedLinks {
    inner: FakeLinks,
    others: Option<(String, Vec<(String, IpAddr)>)>,
}

impl Links for CachedLinks {
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool> {
        self.others = None;
        self.inner.ensure_dummy(name)
    }
    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>> {
        self.inner.addresses(name)
    }
    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        self.others = None;
        self.inner.add_address(name, ip)
    }
    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        self.others = None;
        self.inner.del_address(name, ip)
    }
    fn host_scoped(&mut self, name: &str) -> KernelResult<std::collections::BTreeSet<IpAddr>> {
        self.inner.host_scoped(name)
    }
    fn add_host_scoped(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        self.others = None;
        self.inner.add_host_scoped(name, ips)
    }
    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>> {
        self.inner.local_addresses()
    }
    fn local_addresses_except(&mut self, except: &str) -> KernelResult<Vec<(String, IpAddr)>> {
        if let Some((e, addrs)) = &self.others
            && e == except
        {
            return Ok(addrs.clone());
        }
        let addrs = self.inner.local_addresses_except(except)?;
        self.others = Some((except.to_string(), addrs.clone()));
        Ok(addrs)
    }
    fn delete_link(&mut self, name: &str) -> KernelResult<bool> {
        self.others = None;
        self.inner.delete_link(name)
    }
}

/// One kind of sync to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Periodic full syncs with nothing changed.
    Noop,
    /// Event-driven syncs, each after this many EndpointSlice changes.
    Changes(usize),
}

impl Kind {
    fn parse(a: &str) -> Option<Kind> {
        match a {
            "noop" => Some(Kind::Noop),
            n => n.replace('_', "").parse().ok().map(Kind::Changes),
        }
    }

    fn label(self) -> String {
        match self {
            Kind::Noop => "noop".into(),
            Kind::Changes(b) => format!("changes_per_sync={b}"),
        }
    }
}

fn main() {
    // The daemon's allocator settings (arena limit, fixed mmap threshold), as in its `main`.
    kube_proxy_rs::malloc::configure();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n = args
        .first()
        .and_then(|a| a.replace('_', "").parse().ok())
        .unwrap_or(10_000);
    let mut kinds: Vec<Kind> = args.iter().skip(1).filter_map(|a| Kind::parse(a)).collect();
    if kinds.is_empty() {
        kinds = vec![
            Kind::Noop,
            Kind::Changes(1),
            Kind::Changes(10),
            Kind::Changes(100),
        ];
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(n, &kinds));
}

/// The sync loop over fake backends, its trackers, and the fake kernel's links.
fn sync_loop(trackers: Arc<Trackers>, sync_period: &str) -> SyncLoop {
    let period = format!("--ipvs-sync-period={sync_period}");
    let argv = [
        "kube-proxy",
        "--hostname-override=bench-node",
        "--proxy-mode=ipvs",
        "--cluster-cidr=10.128.0.0/9",
        "--nodeport-addresses=10.0.0.0/24",
        &period,
        "--ipvs-min-sync-period=0s",
    ];
    let options = match parse_args(argv).expect("flags") {
        Invocation::Run(o) => *o,
        other => panic!("{other:?}"),
    };
    let node_ip: IpAddr = scale::NODE_IP.parse().expect("node ip");
    let links = FakeLinks::new();
    links.add_link("node0", "dummy", true, &[node_ip]);
    let (ipsets, iptables) = (FakeIpSets::new(), FakeIptables::new());
    iptables.link_ipsets(&ipsets);
    let backends = Backends {
        ipvs: Box::new(FakeIpvs::new()),
        ipsets: Box::new(ipsets),
        iptables: Box::new(iptables),
        links: Box::new(CachedLinks {
            inner: links,
            others: None,
        }),
        conntrack: Box::new(FakeConntrack::new()),
    };
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    metrics.init_family(IpFamily::V4);
    let published = Published::default();
    let state = StateMetrics::register(&metrics, published.drains.clone()).expect("state");
    let health = Arc::new(ProxyHealth::with_system_clock(
        Duration::from_secs(60),
        metrics.clone(),
    ));
    let (runner, _runner) = bounded_frequency_runner(RunnerConfig::token_bucket(
        Duration::ZERO,
        Duration::from_secs(3600),
    ));
    let client_config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = kube::Client::try_from(client_config).expect("client");
    let yes = || watch::channel(true).1;
    let node = NodeInfo {
        name: scale::NODE.into(),
        internal_ips: vec![node_ip],
        ..Default::default()
    };
    SyncLoop::new(SyncParts {
        settings: SyncSettings::new(
            &options.settings,
            &options.node_name,
            vec![node_ip],
            vec![IpFamily::V4],
            false,
        ),
        trackers,
        synced: Synced {
            services: yes(),
            endpoint_slices: yes(),
            node: yes(),
        },
        node: watch::channel(Some(Arc::new(node))).1,
        proxier: Arc::new(Mutex::new(Proxier::new(backends))),
        metrics,
        health: health.clone(),
        // All addresses: the node IP of the scale scenario is not on this host.
        service_health: Arc::new(ServiceHealthServer::new(Vec::new(), health)),
        runner,
        events: Events::start(client, scale::NODE),
        published,
        state_metrics: Arc::new(state),
    })
}

fn slice(i: usize, extra: &[Ipv4Addr]) -> EndpointSlice {
    serde_json::from_value(scale::slice(i, M, extra, Some(SystemTime::now()))).expect("slice")
}

/// Loads N Services into fresh trackers and runs the first (cold) sync of a loop whose periodic syncs
/// come every `sync_period` (1ms: every sync is full).
async fn loaded(n: usize, sync_period: &str) -> (Arc<Trackers>, SyncLoop) {
    let trackers = Trackers::new(scale::NODE);
    for i in 0..n {
        let svc: Service = serde_json::from_value(scale::service(i)).expect("service");
        let mut t = trackers.services.lock().expect("lock");
        t.update(None, Some(&svc));
        drop(t);
        let s = slice(i, &[]);
        trackers.endpoints.lock().expect("lock").update(&s, false);
    }
    let mut sync_loop = sync_loop(trackers.clone(), sync_period);
    let u0 = ProcessUsage::now();
    let a = AllocMeter::start();
    sync_loop.sync().await;
    let u1 = ProcessUsage::now();
    print_kind(n, "cold", 1, 0, &u0, &u1, a.stop());
    (trackers, sync_loop)
}

async fn run(n: usize, kinds: &[Kind]) {
    // Full syncs need a loop whose syncPeriod has always passed; event-driven ones one where it never has.
    let mut noop = None;
    let mut events = None;
    let mut rng = fastrand::Rng::with_seed(20261125);
    let mut k = 0;
    for &kind in kinds {
        let b = match kind {
            Kind::Noop => 0,
            Kind::Changes(b) => b.max(1),
        };
        let syncs = std::env::var("KPRS_SYNC_LOOP_SYNCS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| 6000usize.checked_div(b).map_or(20, |s| s.clamp(20, 2000)));
        let slot = if b == 0 { &mut noop } else { &mut events };
        if slot.is_none() {
            *slot = Some(loaded(n, if b == 0 { "1ms" } else { "1h" }).await);
        }
        let Some((trackers, sync_loop)) = slot.as_mut() else {
            continue;
        };
        let mut changes = |t: &Trackers| {
            for _ in 0..b {
                let s = slice(rng.usize(0..n), &[scale::churn_ip(k)]);
                t.endpoints.lock().expect("lock").update(&s, false);
                k += 1;
            }
        };
        let u0 = ProcessUsage::now();
        let a = AllocMeter::start();
        dump_mark();
        measured(sync_loop, trackers, syncs, &mut changes).await;
        dump_mark();
        let u1 = ProcessUsage::now();
        print_kind(n, &kind.label(), syncs, b, &u0, &u1, a.stop());
    }
}

/// Marks the start and end of the measured syncs: `scripts/bench-counts.sh` has callgrind dump its
/// counters on each call (`--dump-before`), so the dump between two marks holds exactly those syncs,
/// the sync threads' instructions included.
#[inline(never)]
fn dump_mark() {
    std::hint::black_box(());
}

/// `syncs` syncs, each after `changes`.
#[inline(never)]
async fn measured(
    sync_loop: &mut SyncLoop,
    trackers: &Trackers,
    syncs: usize,
    changes: &mut impl FnMut(&Trackers),
) {
    for _ in 0..syncs {
        changes(trackers);
        sync_loop.sync().await;
    }
}

/// One kind's line: per sync (and per change) CPU, minor faults, allocations, bytes allocated, and the
/// peak heap above the start.
fn print_kind(
    n: usize,
    kind: &str,
    syncs: usize,
    b: usize,
    u0: &ProcessUsage,
    u1: &ProcessUsage,
    a: AllocCounts,
) {
    let per = |v: f64| v / syncs as f64;
    let cpu = per((u1.cpu_seconds() - u0.cpu_seconds()) * 1e6);
    let faults = per((u1.minor_faults() - u0.minor_faults()) as f64);
    println!(
        "sync-loop: n={n} kind={kind} syncs={syncs} cpu_us_per_sync={cpu:.0} cpu_us_per_change={} minflt_per_sync={faults:.1} allocs_per_sync={:.0} alloc_bytes_per_sync={:.0} peak_heap_kib={:.0}",
        if b > 0 {
            format!("{:.0}", cpu / b as f64)
        } else {
            "NA".into()
        },
        per(a.allocations as f64),
        per(a.allocated as f64),
        a.peak as f64 / 1024.0
    );
}
