//! The running proxier: API client, Node, kernel preparation, servers, watchers and the sync loop, until
//! a signal (exit 0, kernel rules left in place), a Node IP change (exit 1) or a config file change.

pub mod annotations;
pub mod backends;
pub mod events;
pub mod node;
pub mod prepare;
pub mod scheduler_modules;
mod stop;
pub mod sync;
pub mod watch_config;

pub use stop::Stop;
use stop::wait_for_signal;

use crate::cluster::client::{ClientOptions, build_clients};
use crate::cluster::listwatch::{ApiClient, MediaTypes};
use crate::cluster::rest_metrics::RestClientMetrics;
use crate::cluster::watch::{self, NodeInfo, Notifier, Trackers};
use crate::component::zpages::ZPages;
use crate::config::{LocalDetection, Options, ProxyConfig};
use crate::explain::http::DebugEndpoints;
use crate::explain::metrics::{ExplainMetrics, StateMetrics};
use crate::explain::{Explainer, Published};
use crate::gotime::GoDuration;
use crate::kernel::iptables::Iptables;
use crate::kernel::iptables::cli::IptablesCli;
use crate::malloc::TrimSchedule;
use crate::metrics::Metrics;
use crate::net::IpFamily;
use crate::proxier::Proxier;
use crate::proxier::graceful::CHECK_INTERVAL;
use crate::runner::{Runner, RunnerConfig, RunnerHandle, bounded_frequency_runner};
use crate::server::{
    MetricsServerState, ProxyHealth, ServerHandle, ServiceHealthServer, start_healthz_server,
    start_metrics_server,
};
use anyhow::{Context, anyhow};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch as tokio_watch};
use tokio::task::JoinHandle;

/// Hidden environment variable shortening the graceful-termination check interval (Go duration; tests).
pub const GRACEFUL_INTERVAL_ENV: &str = "KUBE_PROXY_RS_GRACEFUL_CHECK_INTERVAL";

/// The graceful-termination check interval ([`GRACEFUL_INTERVAL_ENV`] or one minute).
pub fn graceful_interval() -> Duration {
    match std::env::var(GRACEFUL_INTERVAL_ENV) {
        Ok(v) => match GoDuration::parse(v.trim()) {
            Ok(d) if !d.to_std().is_zero() => d.to_std(),
            _ => {
                tracing::warn!(value = %v, "Ignoring invalid {GRACEFUL_INTERVAL_ENV}");
                CHECK_INTERVAL
            }
        },
        Err(_) => CHECK_INTERVAL,
    }
}

fn bind_address(what: &str, s: &str) -> anyhow::Result<Option<SocketAddr>> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .with_context(|| format!("{what} {s:?} is not host:port"))
}

/// Writes the OOM score adjustment of this process (failures are logged, as upstream).
fn set_oom_score(value: Option<i32>) {
    let Some(v) = value else { return };
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", v.to_string()) {
        // Upstream logs this at V(2) too.
        tracing::debug!(value = v, error = %e, "Failed to apply OOMScore");
    }
}

/// Watches the own Node: eligibility into `health`, and a stop request when its IPs (or, in NodeCIDR
/// mode, its podCIDRs) change from what the daemon started with.
fn watch_node(
    mut rx: tokio_watch::Receiver<Option<Arc<NodeInfo>>>,
    initial: Option<NodeInfo>,
    node_cidr_mode: bool,
    health: Arc<ProxyHealth>,
    stop: mpsc::UnboundedSender<Stop>,
) {
    let initial_ips = initial.as_ref().map(node::host_ips).unwrap_or_default();
    let initial_cidrs = initial.map(|n| n.pod_cidrs).unwrap_or_default();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let cur = rx.borrow_and_update().clone();
            let Some(info) = cur else {
                tracing::warn!("The Node object is gone");
                health.set_node_eligible(false);
                continue;
            };
            health.set_node_eligible(info.eligible());
            let ips = node::host_ips(&info);
            if !ips.is_empty() && ips != initial_ips {
                let _ = stop.send(Stop::NodeChanged(format!(
                    "node IPs changed from {initial_ips:?} to {ips:?}"
                )));
            }
            if node_cidr_mode && !initial_cidrs.is_empty() && info.pod_cidrs != initial_cidrs {
                let _ = stop.send(Stop::NodeChanged(format!(
                    "node podCIDRs changed from {initial_cidrs:?} to {:?}",
                    info.pod_cidrs
                )));
            }
        }
    });
}

/// The media types lists and watches ask for (`clientConnection.contentType`, `.acceptContentTypes`).
fn media_types(c: &crate::config::ProxyConfig) -> anyhow::Result<MediaTypes> {
    let cc = &c.client_connection;
    let media = MediaTypes::from_config(&cc.content_type, &cc.accept_content_types)?;
    tracing::info!(
        accept = media.accept(),
        "lists and watches ask for these media types"
    );
    Ok(media)
}

/// What the daemon learned before touching the kernel: the API client, the Event publisher and the
/// own Node as it was at start.
struct Cluster {
    client: kube::Client,
    events: events::Events,
    initial: Option<NodeInfo>,
    node_cidr_mode: bool,
}

/// Connects to the API server (requests counted in `rest_metrics`), announces the start and waits for
/// the own Node (at most [`node::NODE_WAIT`]) and, in NodeCIDR mode, for its podCIDRs.
async fn connect(options: &Options, rest_metrics: &RestClientMetrics) -> anyhow::Result<Cluster> {
    let c = &options.config;
    let client_options = ClientOptions {
        kubeconfig: Some(c.client_connection.kubeconfig.clone().into()),
        master: options.master.clone(),
        qps: c.client_connection.qps,
        burst: c.client_connection.burst,
    };
    // The Event publisher has a client of its own (its own rate limit, not the watches') on the same
    // connections.
    let clients = build_clients(&client_options, rest_metrics).await?;
    let client = clients.main;
    let events_client = clients.events;
    let node_name = &options.node_name;
    let events = events::Events::start(events_client, node_name);
    events.normal("Starting", "StartKubeProxy", None);

    let mut initial = node::wait_for_node(&client, node_name, node::NODE_WAIT).await;
    if initial.is_none() {
        tracing::warn!(
            node = %node_name,
            waited = ?node::NODE_WAIT,
            "The Node object could not be read; continuing without it"
        );
    }
    let node_cidr_mode = options.settings.local_detection == LocalDetection::NodeCidr;
    if node_cidr_mode {
        while initial.as_ref().is_none_or(|n| n.pod_cidrs.is_empty()) {
            tracing::info!(node = %node_name, "Waiting for the Node's podCIDRs (detectLocalMode NodeCIDR)");
            initial = node::wait_for_node(&client, node_name, Duration::from_secs(5)).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Ok(Cluster {
        client,
        events,
        initial,
        node_cidr_mode,
    })
}

/// The kernel side, all synchronous: iptables backend, IP families, node preparation and the
/// proxier. Returns the proxier, the families served and whether `--random-fully` is supported.
fn kernel(
    options: &Options,
    node_ips: &[IpAddr],
) -> anyhow::Result<(Arc<Mutex<Proxier>>, Vec<IpFamily>, bool)> {
    let backend = backends::iptables_backend()?;
    let mut iptables = IptablesCli::with_backend(backend);
    tracing::info!(backend = %backend, "Using iptables backend");
    let v6 = backends::ipv6_supported(&mut iptables);
    let families = node::families(node_ips, v6);
    let random_fully = iptables.supports_random_fully();
    log_proxier_start(options, node_ips, &families);
    let mut kernel = backends::real_backends(iptables)?;
    backends::prepare(options, &mut kernel)?;
    let proxier = Arc::new(Mutex::new(Proxier::new(kernel)));
    Ok((proxier, families, random_fully))
}

/// Upstream's lines announcing the proxier: the node IPs, the stack mode, "Using ipvs Proxier", and the
/// scheduler default per family.
fn log_proxier_start(options: &Options, node_ips: &[IpAddr], families: &[IpFamily]) {
    if !node_ips.is_empty() {
        let ips: Vec<String> = node_ips.iter().map(ToString::to_string).collect();
        tracing::info!(NodeIPs = ?crate::logging::json(&ips), "Successfully retrieved NodeIPs");
    }
    let primary = families.first().map_or("IPv4", |f| f.label());
    if families.len() > 1 {
        tracing::info!(
            "primary ipFamily" = primary,
            "kube-proxy running in dual-stack mode"
        );
    } else {
        tracing::info!(
            ipFamily = primary,
            "kube-proxy running in single-stack mode"
        );
    }
    tracing::info!("Using ipvs Proxier");
    for f in families {
        if options.config.ipvs.scheduler.is_empty() {
            tracing::info!(
                ipFamily = f.label(),
                "IPVS scheduler not specified, use rr by default"
            );
        }
        tracing::debug!(
            ipFamily = f.label(),
            minSyncPeriod = %options.config.ipvs.min_sync_period,
            syncPeriod = %options.config.ipvs.sync_period,
            burstSyncs = 2,
            "ipvs sync params"
        );
    }
}

/// Resolves when `rx` turns true.
async fn stopped(mut rx: tokio_watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Starts the `/healthz` and metrics servers that have a bind address; they stop when `stop` turns true.
async fn start_servers(
    options: &Options,
    obs: &Observers,
    explain: Arc<DebugEndpoints>,
    stop: &tokio_watch::Receiver<bool>,
) -> anyhow::Result<Vec<ServerHandle>> {
    let c = &options.config;
    let mut servers = Vec::new();
    if let Some(addr) = bind_address("healthzBindAddress", &c.healthz_bind_address)? {
        let hard_fail = c.bind_address_hard_fail;
        let stop = stopped(stop.clone());
        servers.push(start_healthz_server(addr, obs.health.clone(), hard_fail, stop).await?);
    }
    if let Some(addr) = bind_address("metricsBindAddress", &c.metrics_bind_address)? {
        let state = MetricsServerState {
            metrics: obs.metrics.clone(),
            proxy_mode: "ipvs".to_string(),
            configz: serde_json::to_value(c).unwrap_or_default(),
            explain: Some(explain),
            zpages: Arc::new(zpages(c)),
        };
        let hard_fail = c.bind_address_hard_fail;
        servers.push(start_metrics_server(addr, state, hard_fail, stopped(stop.clone())).await?);
    }
    Ok(servers)
}

/// `/statusz` and `/flagz`: this process's flags as given, each page served if its feature gate is on.
fn zpages(c: &ProxyConfig) -> ZPages {
    use crate::config::features::{COMPONENT_FLAGZ, COMPONENT_STATUSZ, enabled};
    ZPages::for_process(crate::config::help::flag_values(std::env::args_os())).with_pages(
        enabled(&c.feature_gates, COMPONENT_STATUSZ),
        enabled(&c.feature_gates, COMPONENT_FLAGZ),
    )
}

/// The watchers' callbacks: a recorded change marks every family queued and wakes the runner; a
/// rejected object is metered and evented.
fn watch_notifier(
    runner: RunnerHandle,
    health: Arc<ProxyHealth>,
    metrics: Arc<Metrics>,
    families: Vec<IpFamily>,
    events: events::Events,
) -> Notifier {
    let invalid = events::on_invalid_object(metrics.clone(), events);
    Notifier::new(move || {
        let now = SystemTime::now();
        for &f in &families {
            health.queued_update(f);
            metrics.set_last_queued(f, now);
        }
        runner.run();
    })
    .on_invalid(invalid)
}

/// Spawns what can stop the daemon besides the Node watch: signals and (with `--config`) a change
/// of the config file.
fn spawn_stop_sources(
    options: &Options,
    config_snapshot: Option<Option<Vec<u8>>>,
    stop: &mpsc::UnboundedSender<Stop>,
) {
    if let (Some(path), Some(initial)) = (options.config_path.clone(), config_snapshot) {
        watch_config::spawn(path, initial, stop.clone());
    }
    let stop = stop.clone();
    tokio::spawn(async move {
        let _ = stop.send(wait_for_signal().await);
    });
}

/// Runs the daemon until it is told to stop; `Ok` for a clean stop (signal), `Err` otherwise.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let options = Arc::new(options);
    // Read the config file before anything else: an edit from now on makes the daemon exit.
    let config_snapshot = options.config_path.as_deref().map(watch_config::snapshot);
    set_oom_score(options.config.oom_score_adj);
    // Health, metrics and the explanation are served from the start, whatever the API server does.
    let published = Published::default();
    let obs = observers(&options, &published)?;
    let (server_stop_tx, server_stop_rx) = tokio_watch::channel(false);
    let debug = debug_endpoints(&options, &published, &obs)?;
    let servers = start_servers(&options, &obs, debug, &server_stop_rx).await?;
    let cluster = connect(&options, &obs.rest).await?;
    cluster.events.attach_metrics(obs.metrics.clone());
    let node = prepare(&options, &cluster, &obs, &published)?;
    let (stop_tx, mut stop_rx) = mpsc::unbounded_channel::<Stop>();
    spawn_stop_sources(&options, config_snapshot, &stop_tx);
    let running = start_syncing(&options, cluster, node, obs, published, stop_tx)?;
    let stop = stop_rx
        .recv()
        .await
        .unwrap_or(Stop::Signal("channel closed"));
    running.stop().await;
    let _ = server_stop_tx.send(true);
    for s in servers {
        let _ = tokio::time::timeout(Duration::from_secs(2), s.task).await;
    }
    stop_result(stop)
}

/// This node, ready to be programmed: the proxier over the real kernel and what every sync uses.
struct Prepared {
    proxier: Arc<Mutex<Proxier>>,
    families: Vec<IpFamily>,
    settings: sync::SyncSettings,
}

/// The kernel side and the per-family metrics, once the Node (or its absence) is known.
fn prepare(
    options: &Options,
    cluster: &Cluster,
    obs: &Observers,
    published: &Published,
) -> anyhow::Result<Prepared> {
    let node_ips = node::node_ips(cluster.initial.as_ref(), &options.config.bind_address);
    let (proxier, families, random_fully) = kernel(options, &node_ips)?;
    proxier_lock(&proxier).set_max_drain(options.ipvs_max_drain_time);
    init_metrics(options, &obs.metrics, &families, published)?;
    let eligible = cluster.initial.as_ref().is_none_or(|n| n.eligible());
    obs.health.set_node_eligible(eligible);
    let settings = sync::SyncSettings::new(
        &options.settings,
        &options.node_name,
        node_ips,
        families.clone(),
        random_fully,
    );
    Ok(Prepared {
        proxier,
        families,
        settings,
    })
}

/// What runs until the daemon stops: the watchers, the service health checks and the sync loop.
struct Running {
    stores: watch::Stores,
    service_health: Arc<ServiceHealthServer>,
    loop_stop: tokio_watch::Sender<bool>,
    loop_task: JoinHandle<()>,
}

impl Running {
    /// Stops syncing, then the watchers and the health-check listeners; the kernel state stays.
    async fn stop(self) {
        stop_sync_loop(self.loop_stop, self.loop_task).await;
        self.stores.abort();
        self.service_health.shutdown().await;
    }
}

/// Starts the watchers, the Node watch, the graceful-termination check and the sync loop.
fn start_syncing(
    options: &Options,
    cluster: Cluster,
    node: Prepared,
    obs: Observers,
    published: Published,
    stop_tx: mpsc::UnboundedSender<Stop>,
) -> anyhow::Result<Running> {
    let Prepared {
        proxier,
        families,
        settings,
    } = node;
    let health = obs.health.clone();
    let health_ips: Vec<IpAddr> = health_check_ips(&settings, &proxier);
    let service_health = Arc::new(ServiceHealthServer::new(health_ips, health.clone()));
    let (runner_handle, runner) = bounded_frequency_runner(RunnerConfig::token_bucket(
        options.settings.min_sync_period,
        options.settings.sync_period,
    ));
    let trackers = Trackers::new(&options.node_name);
    let notifier = watch_notifier(
        runner_handle.clone(),
        health.clone(),
        obs.metrics.clone(),
        families.clone(),
        cluster.events.clone(),
    );
    let client = ApiClient::new(cluster.client.clone(), media_types(&options.config)?);
    let (stores, synced) = watch::start(client, &options.node_name, trackers.clone(), notifier);
    let mode = cluster.node_cidr_mode;
    watch_node(
        stores.node.clone(),
        cluster.initial,
        mode,
        health.clone(),
        stop_tx,
    );
    spawn_graceful_check(proxier.clone(), graceful_interval(), &published, &obs.state);
    for &f in &families {
        health.loop_started(f);
    }
    let synced_for_trim = synced.clone();
    let sync_loop = sync::SyncLoop::new(sync::SyncParts {
        settings,
        trackers,
        synced,
        node: stores.node.clone(),
        proxier,
        metrics: obs.metrics,
        health,
        service_health: service_health.clone(),
        runner: runner_handle,
        events: cluster.events,
        published,
        state_metrics: obs.state,
    });
    let (loop_stop, loop_task) = spawn_sync_loop(runner, sync_loop, synced_for_trim);
    Ok(Running {
        stores,
        service_health,
        loop_stop,
        loop_task,
    })
}

/// Runs `sync_loop` on the runner's schedule until the returned sender turns true, giving free heap
/// memory back to the kernel after syncs ([`trim_heap`]).
fn spawn_sync_loop(
    runner: Runner,
    sync_loop: sync::SyncLoop,
    synced: watch::Synced,
) -> (tokio_watch::Sender<bool>, JoinHandle<()>) {
    let sync_loop = Arc::new(tokio::sync::Mutex::new(sync_loop));
    let trim = Arc::new(Mutex::new(TrimSchedule::new(TRIM_INTERVAL)));
    let (stop_tx, stop_rx) = tokio_watch::channel(false);
    let task = tokio::spawn(runner.run(
        move || {
            let (sync_loop, trim, synced) = (sync_loop.clone(), trim.clone(), synced.clone());
            async move {
                let mut sync_loop = sync_loop.lock().await;
                // The first sync (right after the initial lists) and full syncs free the most.
                let ready = synced.proxy_ready();
                sync_loop.sync().await;
                if ready
                    && trim
                        .lock()
                        .is_ok_and(|mut t| t.due(std::time::Instant::now()))
                {
                    trim_heap().await;
                }
            }
        },
        stopped(stop_rx),
    ));
    (stop_tx, task)
}

/// Stops the sync loop; a sync in progress gets [`STOP_GRACE`] to finish.
async fn stop_sync_loop(stop: tokio_watch::Sender<bool>, task: JoinHandle<()>) {
    let _ = stop.send(true);
    if tokio::time::timeout(STOP_GRACE, task).await.is_err() {
        tracing::warn!(
            grace = %crate::gotime::GoDuration::from_std(STOP_GRACE),
            "A sync in progress did not finish in time; stopping anyway (the next start repairs the kernel state)"
        );
    }
}

/// Longest the daemon waits for a sync in progress when asked to stop: stopping mid-sync is as safe as
/// `kill -9` (each write is whole; the next start reconciles), and the kubelet's grace period is 30 s.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Free heap memory beyond this (or an eighth of the heap in use) is given back to the kernel.
const TRIM_MIN_FREE: u64 = 2 << 20;
/// Heap trims after syncs are at most this frequent (the first sync and full syncs free the most).
const TRIM_INTERVAL: Duration = Duration::from_secs(30);

/// Gives the allocator's free memory back to the kernel when it holds much (on a blocking thread: a trim
/// walks every arena).
async fn trim_heap() {
    let start = std::time::Instant::now();
    let r = tokio::task::spawn_blocking(|| crate::malloc::trim_if_wasteful(TRIM_MIN_FREE)).await;
    if let Ok(Some(s)) = r {
        tracing::debug!(
            inUseMiB = s.in_use >> 20,
            freeMiB = s.free >> 20,
            elapsed = %crate::gotime::GoDuration::from_std(start.elapsed()),
            "Returned free heap memory to the kernel"
        );
    }
}

/// The explanation of this node's Services on `/debug/services`, with an IPVS socket and threads of its
/// own (without the socket, the kernel's side is reported missing).
fn debug_endpoints(
    options: &Options,
    published: &Published,
    obs: &Observers,
) -> anyhow::Result<Arc<DebugEndpoints>> {
    let ipvs = match crate::kernel::ipvs::netlink::NetlinkIpvs::new() {
        Ok(i) => Some(Box::new(i) as Box<dyn crate::kernel::ipvs::Ipvs>),
        Err(e) => {
            tracing::warn!(err = %e, "Opening IPVS for /debug/services failed; it will show the plan only");
            None
        }
    };
    let metrics = obs.explain.clone();
    let x = Explainer::new(published.clone(), &options.node_name, ipvs, metrics.clone());
    let d = DebugEndpoints::new(Arc::new(x), options.allow_remote_debug, metrics)
        .context("starting the /debug/services threads")?;
    Ok(Arc::new(d))
}

/// What reports on the daemon: the metrics registry, the proxy health, the API client's request
/// metrics and the explanation's metrics (all in that registry).
struct Observers {
    metrics: Arc<Metrics>,
    health: Arc<ProxyHealth>,
    rest: RestClientMetrics,
    state: Arc<StateMetrics>,
    explain: ExplainMetrics,
}

fn proxier_lock(p: &Mutex<Proxier>) -> std::sync::MutexGuard<'_, Proxier> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// The metrics registry with every metric that exists before the families are known, and the proxy
/// health.
fn observers(options: &Options, published: &Published) -> anyhow::Result<Observers> {
    let metrics = Arc::new(Metrics::new().map_err(|e| anyhow!("creating metrics: {e}"))?);
    let rest = RestClientMetrics::register(metrics.registry())
        .map_err(|e| anyhow!("creating API client metrics: {e}"))?;
    let state = StateMetrics::register(&metrics, published.drains.clone())
        .map_err(|e| anyhow!("creating metrics: {e}"))?;
    let explain =
        ExplainMetrics::register(&metrics).map_err(|e| anyhow!("creating metrics: {e}"))?;
    metrics
        .register_component()
        .map_err(|e| anyhow!("creating metrics: {e}"))?;
    crate::config::features::register(metrics.registry(), &options.config.feature_gates)
        .map_err(|e| anyhow!("creating metrics: {e}"))?;
    let health = Arc::new(ProxyHealth::with_system_clock(
        options.settings.sync_period * 2,
        metrics.clone(),
    ));
    Ok(Observers {
        metrics,
        health,
        rest,
        state: Arc::new(state),
        explain,
    })
}

/// Initialises the per-family series and, with `--ipvs-traffic-metrics`, the traffic counters.
fn init_metrics(
    options: &Options,
    metrics: &Metrics,
    families: &[IpFamily],
    published: &Published,
) -> anyhow::Result<()> {
    let index = &published.index;
    for &f in families {
        metrics.init_family(f);
    }
    if options.ipvs_traffic_metrics {
        // Scrapes get their own netlink socket: a scrape never waits for (or delays) a sync.
        let ipvs = crate::kernel::ipvs::netlink::NetlinkIpvs::new()
            .context("opening the IPVS netlink family for --ipvs-traffic-metrics")?;
        let traffic = crate::traffic::TrafficMetrics::new(Box::new(ipvs), index.clone());
        metrics.register_collector(Arc::new(traffic));
    }
    Ok(())
}

/// The daemon's result for why it stopped: `Ok` after a signal, an error naming the cause otherwise.
fn stop_result(stop: Stop) -> anyhow::Result<()> {
    match stop {
        Stop::Signal(sig) => {
            tracing::info!(
                signal = sig,
                "Stopping; IPVS and iptables rules are left in place"
            );
            Ok(())
        }
        Stop::NodeChanged(why) => Err(anyhow!("{why}; exiting so that kube-proxy restarts")),
        Stop::ConfigChanged(why) => Err(anyhow!("{why}; exiting so that kube-proxy restarts")),
    }
}

/// Addresses the per-service health-check listeners bind: every address when nodePortAddresses selects
/// all, else the node addresses it selects now.
fn health_check_ips(settings: &sync::SyncSettings, proxier: &Arc<Mutex<Proxier>>) -> Vec<IpAddr> {
    if settings.node_ports_everywhere() {
        return Vec::new();
    }
    let local = match proxier.lock() {
        Ok(mut p) => p.backends_mut().links.local_addresses().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut by_iface: std::collections::BTreeMap<String, Vec<IpAddr>> = Default::default();
    for (iface, ip) in local {
        by_iface.entry(iface).or_default().push(ip);
    }
    let mut ips = Vec::new();
    for &f in &settings.families {
        let cidrs = &settings.node_port_cidrs;
        ips.extend(crate::proxier::plan::node_port_ips(
            &by_iface,
            &[],
            cidrs,
            f,
        ));
    }
    ips
}

/// Deletes drained real servers every `interval` (on a blocking thread; the kernel backends are
/// synchronous), then publishes the queue and counts removals at the maximum drain time.
fn spawn_graceful_check(
    proxier: Arc<Mutex<Proxier>>,
    interval: Duration,
    published: &Published,
    state: &Arc<StateMetrics>,
) {
    let (published, state) = (published.clone(), state.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let (p, published) = (proxier.clone(), published.clone());
            let r = tokio::task::spawn_blocking(move || {
                let mut p = proxier_lock(&p);
                let c = p.check_graceful();
                published.set_drains(p.reconciler().graceful().queue());
                c
            })
            .await;
            if let Ok(c) = &r
                && c.forced > 0
            {
                state.forced_drains(c.forced as u64);
            }
            match r {
                Ok(c) if c.deleted > 0 || c.failures > 0 => tracing::debug!(
                    deleted = c.deleted,
                    forced = c.forced,
                    pending = c.pending,
                    failures = c.failures,
                    "Graceful termination check"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "Graceful termination check panicked"),
            }
        }
    });
}

/// Families label for logs.
pub fn family_labels(families: &[IpFamily]) -> Vec<&'static str> {
    families.iter().map(|f| f.label()).collect()
}
