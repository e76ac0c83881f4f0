//! The daemon's whole sync loop on the host, over the in-memory backends: where the CPU of an
//! event-driven sync goes besides the proxier (decision records, publishing, metrics, health checks).
//!
//! `cargo bench --bench sync_loop -- [N] [changes-per-sync...]` (default 10000 and 1 10) loads N
//! scale-bench Services × 10 endpoints into the change trackers, runs the first (full) sync, then for
//! each batch size B runs syncs that each follow B EndpointSlice changes (the scale bench's churn:
//! one extra endpoint in, the previous one out), and prints the process CPU and minor page faults per
//! sync and per change. `perf record -g` on it shows the split by function.
#[path = "../tests/common/scale.rs"]
mod scale;

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
use std::time::{Duration, Instant, SystemTime};
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

fn main() {
    // The daemon's allocator settings (arena limit, fixed mmap threshold), as in its `main`.
    kube_proxy_rs::malloc::configure();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.replace('_', "").parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(10_000);
    let mut batches: Vec<usize> = args.iter().skip(1).copied().collect();
    if batches.is_empty() {
        batches = vec![1, 10];
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(n, &batches));
}

/// The sync loop over fake backends, its trackers, and the fake kernel's links.
fn sync_loop(trackers: Arc<Trackers>) -> SyncLoop {
    let argv = [
        "kube-proxy",
        "--hostname-override=bench-node",
        "--proxy-mode=ipvs",
        "--cluster-cidr=10.128.0.0/9",
        "--nodeport-addresses=10.0.0.0/24",
        "--ipvs-sync-period=1h",
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

async fn run(n: usize, batches: &[usize]) {
    let trackers = Trackers::new(scale::NODE);
    for i in 0..n {
        let svc: Service = serde_json::from_value(scale::service(i)).expect("service");
        let mut t = trackers.services.lock().expect("lock");
        t.update(None, Some(&svc));
        drop(t);
        let s = slice(i, &[]);
        trackers.endpoints.lock().expect("lock").update(&s, false);
    }
    let mut sync_loop = sync_loop(trackers.clone());
    let t = Instant::now();
    sync_loop.sync().await;
    println!(
        "N={n}: first sync {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let mut rng = fastrand::Rng::with_seed(20261125);
    let mut k = 0;
    for &b in batches {
        let syncs = (6000 / b).clamp(20, 2000);
        let u0 = ProcessUsage::now();
        let wall = Instant::now();
        for _ in 0..syncs {
            for _ in 0..b {
                let s = slice(rng.usize(0..n), &[scale::churn_ip(k)]);
                trackers.endpoints.lock().expect("lock").update(&s, false);
                k += 1;
            }
            sync_loop.sync().await;
        }
        let u1 = ProcessUsage::now();
        let cpu = (u1.cpu_seconds() - u0.cpu_seconds()) / syncs as f64 * 1e6;
        let faults = (u1.minor_faults() - u0.minor_faults()) as f64 / syncs as f64;
        println!(
            "sync-loop: n={n} changes_per_sync={b} syncs={syncs} cpu_us_per_sync={cpu:.0} cpu_us_per_change={:.0} minflt_per_sync={faults:.1} wall_ms={:.0}",
            cpu / b as f64,
            wall.elapsed().as_secs_f64() * 1e3
        );
    }
}
