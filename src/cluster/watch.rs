//! Watchers on Services, EndpointSlices and the own Node, feeding the change trackers.
//!
//! Objects are decoded one at a time and leniently ([`Decoded`]): an object that cannot be read is
//! reported (warning, counter, the notifier's Event and metric) and treated as a malformed object is,
//! never as a stream error. A watcher error never ends a stream: it is logged, the watcher backs off
//! and relists. A relist (`Init` … `InitDone`) deletes objects that vanished meanwhile. Each recorded
//! change calls the `sync_requested` notifier. One generic loop (`run_watcher`) serves all three
//! kinds; a `Handler` per kind says what a change means.

use super::convert::{ConvertError, InvalidReason, ObjectKind};
use super::deadline;
use super::decode::{Decoded, Unreadable};
use super::listwatch::{ApiClient, Watched, list_watch};
use super::model::{EndpointsMap, ServiceMap};
use super::tracker::{
    EndpointsChangeTracker, EndpointsUpdateResult, ServiceChangeTracker, ServiceUpdateResult,
    TrackOutcome,
};
use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::runtime::{WatchStreamExt, watcher};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch as tokio_watch;
use tokio::task::JoinHandle;

/// Label selector kube-proxy uses for Services and EndpointSlices.
pub const PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
/// Field selector for Services (headless ones are not proxied).
pub const SERVICE_FIELD_SELECTOR: &str = "spec.clusterIP!=None";
/// Node label carrying the zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Taint the cluster autoscaler puts on nodes it is about to delete.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// Watch parameters every watcher starts from: a server-side timeout picked at random in 5–10 minutes
/// ([`deadline::watch_timeout_seconds`]; the client-side limits are the transport's, see [`deadline`]);
/// the first list at `resourceVersion=0`, as client-go's reflector lists: the API server answers it from
/// its watch cache, whole, in one response it can compress (a relist after 410 Gone is consistent).
fn base_watch_config() -> watcher::Config {
    watcher::Config::default()
        .timeout(deadline::watch_timeout_seconds())
        .any_semantic()
}

/// Watch parameters for Services.
pub fn service_watch_config() -> watcher::Config {
    base_watch_config()
        .labels(PROXY_LABEL_SELECTOR)
        .fields(SERVICE_FIELD_SELECTOR)
}

/// Watch parameters for EndpointSlices.
pub fn slice_watch_config() -> watcher::Config {
    base_watch_config().labels(PROXY_LABEL_SELECTOR)
}

/// Watch parameters for the own Node.
pub fn node_watch_config(node_name: &str) -> watcher::Config {
    base_watch_config().fields(&format!("metadata.name={node_name}"))
}

/// The change trackers, shared between the watchers and the sync loop.
#[derive(Debug)]
pub struct Trackers {
    pub services: Mutex<ServiceChangeTracker>,
    pub endpoints: Mutex<EndpointsChangeTracker>,
}

impl Trackers {
    /// Fresh trackers for node `hostname`.
    pub fn new(hostname: &str) -> Arc<Self> {
        Arc::new(Self {
            services: Mutex::new(ServiceChangeTracker::new()),
            endpoints: Mutex::new(EndpointsChangeTracker::new(hostname)),
        })
    }

    /// Applies all pending changes (start of a sync).
    pub fn apply(
        &self,
        services: &mut ServiceMap,
        endpoints: &mut EndpointsMap,
    ) -> (ServiceUpdateResult, EndpointsUpdateResult) {
        let s = lock(&self.services).apply(services);
        let e = lock(&self.endpoints).apply(endpoints);
        (s, e)
    }

    /// Pending (service, endpoint) changes, for the `*_changes_pending` metrics.
    pub fn pending(&self) -> (usize, usize) {
        (
            lock(&self.services).pending(),
            lock(&self.endpoints).pending(),
        )
    }

    /// Recorded (service, endpoint) updates since start, for the `*_changes_total` metrics.
    pub fn totals(&self) -> (u64, u64) {
        (lock(&self.services).total(), lock(&self.endpoints).total())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What kube-proxy needs from its Node object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// InternalIP addresses, in the order the Node lists them.
    pub internal_ips: Vec<IpAddr>,
    /// ExternalIP addresses.
    pub external_ips: Vec<IpAddr>,
    /// `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// `spec.podCIDRs` (or `spec.podCIDR`).
    pub pod_cidrs: Vec<IpNet>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Tainted `ToBeDeletedByClusterAutoscaler`.
    pub to_be_deleted: bool,
    /// All labels (topology decisions may use them).
    pub labels: std::collections::BTreeMap<String, String>,
}

impl NodeInfo {
    /// Whether the node may receive load-balancer traffic (for `/healthz`'s nodeEligible).
    pub fn eligible(&self) -> bool {
        !self.deleting && !self.to_be_deleted
    }
}

/// Extracts [`NodeInfo`] from a Node; unparseable addresses / CIDRs are skipped with a warning.
pub fn node_info(node: &Node) -> NodeInfo {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut info = NodeInfo {
        zone: labels.get(ZONE_LABEL).cloned(),
        deleting: node.metadata.deletion_timestamp.is_some(),
        labels,
        ..Default::default()
    };
    for addr in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
    {
        let target = match addr.type_.as_str() {
            "InternalIP" => &mut info.internal_ips,
            "ExternalIP" => &mut info.external_ips,
            _ => continue,
        };
        match addr.address.parse::<IpAddr>() {
            Ok(ip) if !target.contains(&ip) => target.push(ip),
            Ok(_) => {}
            Err(_) => {
                tracing::warn!(node = %name, address = %addr.address, "Ignoring an invalid node address")
            }
        }
    }
    if let Some(spec) = &node.spec {
        let cidrs: Vec<&String> = match (&spec.pod_cidrs, &spec.pod_cidr) {
            (Some(list), _) if !list.is_empty() => list.iter().collect(),
            (_, Some(one)) if !one.is_empty() => vec![one],
            _ => Vec::new(),
        };
        for c in cidrs {
            match c.parse::<IpNet>() {
                Ok(net) => info.pod_cidrs.push(net),
                Err(_) => tracing::warn!(node = %name, cidr = %c, "Ignoring an invalid podCIDR"),
            }
        }
        info.to_be_deleted = spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == TAINT_TO_BE_DELETED);
    }
    info.name = name;
    info
}

/// Callbacks from the watchers to the daemon.
#[derive(Clone)]
pub struct Notifier {
    /// Called after each recorded change (the runner's `run()`).
    pub sync_requested: Arc<dyn Fn() + Send + Sync>,
    /// Called for each rejected object (to emit an event / bump a metric).
    pub invalid_object: Arc<dyn Fn(&ConvertError) + Send + Sync>,
}

impl Notifier {
    /// A notifier that only requests syncs.
    pub fn new(sync_requested: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            sync_requested: Arc::new(sync_requested),
            invalid_object: Arc::new(|_| {}),
        }
    }

    /// Adds a callback for rejected objects.
    pub fn on_invalid(mut self, f: impl Fn(&ConvertError) + Send + Sync + 'static) -> Self {
        self.invalid_object = Arc::new(f);
        self
    }
}

/// "Listed once" flags per kind.
#[derive(Debug, Clone)]
pub struct Synced {
    pub services: tokio_watch::Receiver<bool>,
    pub endpoint_slices: tokio_watch::Receiver<bool>,
    pub node: tokio_watch::Receiver<bool>,
}

impl Synced {
    /// Whether Services and EndpointSlices have both been listed once.
    pub fn proxy_ready(&self) -> bool {
        *self.services.borrow() && *self.endpoint_slices.borrow()
    }

    /// Waits until Services and EndpointSlices have both been listed once.
    pub async fn wait_proxy_ready(&mut self) {
        let _ = self.services.wait_for(|v| *v).await;
        let _ = self.endpoint_slices.wait_for(|v| *v).await;
    }
}

/// What the watchers expose besides the trackers.
#[derive(Debug)]
pub struct Stores {
    /// The own Node, `None` until seen or after deletion.
    pub node: tokio_watch::Receiver<Option<Arc<NodeInfo>>>,
    /// Objects rejected by conversion so far.
    pub invalid_objects: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Stores {
    /// Stops the watchers.
    pub fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        self.abort();
    }
}

type Key = (String, String);

fn key_of(meta: &kube::api::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Turns watcher events into (previous, current) changes, keeping the last object per key (like an
/// informer cache) and synthesising deletions for objects missing from a relist.
///
/// Stored objects pass through a `slim` function first (managedFields are always dropped), so only
/// what later `previous` lookups need is kept in memory. A [`keys_only`](Self::keys_only) cache keeps
/// no object at all: its `previous` objects carry only namespace and name.
#[derive(Debug)]
pub struct EventCache<K> {
    /// `None`: only the key is kept.
    objects: HashMap<Key, Option<Box<K>>>,
    relisting: Option<HashSet<Key>>,
    listed: bool,
    /// `None`: keep keys only.
    slim: Option<fn(&mut K)>,
}

impl<K> Default for EventCache<K> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            relisting: None,
            listed: false,
            slim: Some(|_| {}),
        }
    }
}

/// Keeps only what an EndpointSlice deletion needs (namespace, name, labels).
pub fn slim_slice(slice: &mut EndpointSlice) {
    slice.endpoints = Vec::new();
    slice.ports = None;
    slice.metadata.annotations = None;
}

impl<K: kube::Resource + Clone + Default> EventCache<K> {
    /// A cache that slims objects with `slim` before storing them.
    pub fn with_slim(slim: fn(&mut K)) -> Self {
        Self {
            slim: Some(slim),
            ..Self::default()
        }
    }

    /// A cache that keeps only each object's namespace/name: `previous` objects passed to the change
    /// callback carry nothing else (for consumers that track the previous state themselves).
    pub fn keys_only() -> Self {
        Self {
            slim: None,
            ..Self::default()
        }
    }

    /// Whether a full list has completed at least once.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Applies one watcher event, calling `change(previous, current)` for each object change.
    pub fn handle(
        &mut self,
        event: watcher::Event<K>,
        mut change: impl FnMut(Option<&K>, Option<&K>),
    ) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(obj) => {
                let key = key_of(obj.meta());
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(key.clone());
                }
                self.store(key, obj, &mut change);
            }
            watcher::Event::Apply(obj) => {
                let key = key_of(obj.meta());
                self.store(key, obj, &mut change);
            }
            watcher::Event::Delete(obj) => {
                let key = key_of(obj.meta());
                match self.objects.remove(&key) {
                    Some(Some(prev)) => change(Some(&prev), None),
                    // not cached, or only its key: the deleted object itself is the best previous
                    _ => change(Some(&obj), None),
                }
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<Key> = self
                        .objects
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        if let Some(prev) = self.objects.remove(&k) {
                            let prev = prev.unwrap_or_else(|| Box::new(keyed(&k)));
                            change(Some(&prev), None);
                        }
                    }
                }
                self.listed = true;
            }
        }
    }

    fn store(&mut self, key: Key, mut obj: K, change: &mut impl FnMut(Option<&K>, Option<&K>)) {
        obj.meta_mut().managed_fields = None;
        match self.objects.remove(&key) {
            Some(Some(prev)) => change(Some(&prev), Some(&obj)),
            Some(None) => change(Some(&keyed(&key)), Some(&obj)),
            None => change(None, Some(&obj)),
        }
        let stored = self.slim.map(|slim| {
            slim(&mut obj);
            Box::new(obj)
        });
        self.objects.insert(key, stored);
    }
}

/// An empty object carrying only namespace/name `key`.
fn keyed<K: kube::Resource + Default>(key: &Key) -> K {
    let mut obj = K::default();
    let meta = obj.meta_mut();
    if !key.0.is_empty() {
        meta.namespace = Some(key.0.clone());
    }
    meta.name = Some(key.1.clone());
    meta.managed_fields = None;
    obj
}

/// Logs, counts and announces (through the notifier) what conversion or decoding rejected.
#[derive(Clone)]
struct Reporter {
    notifier: Notifier,
    invalid: Arc<AtomicU64>,
}

impl Reporter {
    /// Reports the warnings and error of one tracked change, and requests a sync when one is pending.
    fn outcome(&self, kind: ObjectKind, outcome: &TrackOutcome) {
        for w in &outcome.warnings {
            tracing::warn!(kind = %kind, "{w}");
        }
        if let Some(e) = &outcome.error {
            self.invalid(e);
        }
        if outcome.pending {
            (self.notifier.sync_requested)();
        }
    }

    /// Reports one rejected object: a warning, the counter, and the notifier's callback (Event, metric).
    fn invalid(&self, e: &ConvertError) {
        tracing::warn!(kind = %e.kind, error = %e, "Ignoring an invalid object");
        self.invalid.fetch_add(1, Ordering::Relaxed);
        (self.notifier.invalid_object)(e);
    }
}

/// The error reported for an object of `kind` that could not be decoded.
pub fn unreadable_error(kind: ObjectKind, u: &Unreadable) -> ConvertError {
    ConvertError {
        kind,
        namespace: u.meta.namespace.clone().unwrap_or_default(),
        name: u.meta.name.clone().unwrap_or_default(),
        reason: InvalidReason::Unreadable(u.error.clone()),
    }
}

/// What one watcher does with the object changes of its kind.
trait Handler<K>: Send + 'static {
    /// The kind watched (logs, Events, metrics).
    const KIND: ObjectKind;

    /// An object was added or updated (`cur` set) or deleted (`cur` None); `prev` is the cached one.
    fn change(&mut self, prev: Option<&K>, cur: Option<&K>);

    /// An object could not be read (already reported); `prev` is its cached state. By default it is
    /// treated as absent, as a malformed object is.
    fn unreadable(&mut self, prev: Option<&K>) {
        self.change(prev, None);
    }

    /// The first full list completed.
    fn listed(&mut self) {}
}

struct ServiceHandler {
    trackers: Arc<Trackers>,
    reporter: Reporter,
}

impl Handler<Service> for ServiceHandler {
    const KIND: ObjectKind = ObjectKind::Service;

    fn change(&mut self, prev: Option<&Service>, cur: Option<&Service>) {
        let outcome = lock(&self.trackers.services).update(prev, cur);
        self.reporter.outcome(Self::KIND, &outcome);
    }

    fn listed(&mut self) {
        (self.reporter.notifier.sync_requested)();
    }
}

struct SliceHandler {
    trackers: Arc<Trackers>,
    reporter: Reporter,
}

impl Handler<EndpointSlice> for SliceHandler {
    const KIND: ObjectKind = ObjectKind::EndpointSlice;

    fn change(&mut self, prev: Option<&EndpointSlice>, cur: Option<&EndpointSlice>) {
        let outcome = {
            let mut t = lock(&self.trackers.endpoints);
            match (prev, cur) {
                (_, Some(cur)) => t.update(cur, false),
                (Some(prev), None) => t.update(prev, true),
                (None, None) => return,
            }
        };
        self.reporter.outcome(Self::KIND, &outcome);
    }

    fn listed(&mut self) {
        (self.reporter.notifier.sync_requested)();
    }
}

struct NodeHandler {
    node: tokio_watch::Sender<Option<Arc<NodeInfo>>>,
    notifier: Notifier,
}

impl Handler<Node> for NodeHandler {
    const KIND: ObjectKind = ObjectKind::Node;

    fn change(&mut self, _prev: Option<&Node>, cur: Option<&Node>) {
        let info = cur.map(|n| Arc::new(node_info(n)));
        let changed = self.node.send_if_modified(|slot| {
            if *slot != info {
                *slot = info;
                true
            } else {
                false
            }
        });
        if changed {
            (self.notifier.sync_requested)();
        }
    }

    /// An unreadable Node keeps its last readable state (the daemon needs its addresses).
    fn unreadable(&mut self, _prev: Option<&Node>) {}
}

/// A readable object, or an empty one carrying an unreadable object's namespace/name.
fn readable_or_keyed<K: Resource + Clone + Default>(d: &Decoded<K>) -> Cow<'_, K> {
    match d {
        Decoded::Object(k) => Cow::Borrowed(k),
        Decoded::Unreadable(u) => Cow::Owned(keyed(&key_of(&u.meta))),
    }
}

/// Passes one cached change to `handler`, reporting an unreadable current object first.
fn dispatch<K, H>(
    handler: &mut H,
    reporter: &Reporter,
    prev: Option<&Decoded<K>>,
    cur: Option<&Decoded<K>>,
) where
    K: Resource + Clone + Default,
    H: Handler<K>,
{
    let prev = prev.map(readable_or_keyed);
    let prev = prev.as_deref();
    match cur {
        Some(Decoded::Object(k)) => handler.change(prev, Some(k)),
        Some(Decoded::Unreadable(u)) => {
            reporter.invalid(&unreadable_error(H::KIND, u));
            handler.unreadable(prev);
        }
        None => handler.change(prev, None),
    }
}

/// One watcher: list + watch of `api`, each event through `cache` to `handler`; `listed` turns true
/// after the first full list. A stream error is logged and the watcher backs off (and relists when
/// it must); an object it cannot read never is a stream error.
async fn run_watcher<K, H>(
    api: ApiClient,
    config: watcher::Config,
    mut cache: EventCache<Decoded<K>>,
    mut handler: H,
    reporter: Reporter,
    listed: tokio_watch::Sender<bool>,
) where
    K: Watched + Default + std::fmt::Debug,
    H: Handler<K>,
{
    let start = std::time::Instant::now();
    let controller = controller_name(H::KIND);
    tracing::info!("Starting {controller} controller");
    tracing::info!(controller, "Waiting for caches to sync");
    let mut stream = list_watch::<K>(api, config).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(kind = %H::KIND, err = %deadline::error_chain(&e), "Watch failed, backing off and retrying");
                continue;
            }
        };
        let was_listed = cache.listed();
        cache.handle(event, |prev, cur| {
            dispatch(&mut handler, &reporter, prev, cur)
        });
        if cache.listed() && !was_listed {
            tracing::info!(
                controller,
                objects = cache.len(),
                elapsed = %crate::gotime::GoDuration::from_std(start.elapsed()),
                "Caches are synced"
            );
            listed.send_replace(true);
            handler.listed();
        }
    }
}

/// The name upstream's informers log for the watcher of `kind` (`service config`, ...).
fn controller_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Service => "service config",
        ObjectKind::EndpointSlice => "endpoint slice config",
        ObjectKind::Node => "node config",
    }
}

/// Starts the Service, EndpointSlice and Node watchers on the tokio runtime; `client` carries the
/// media types to ask for (a bare `kube::Client` asks for protobuf, JSON as the fallback).
pub fn start(
    client: impl Into<ApiClient>,
    node_name: &str,
    trackers: Arc<Trackers>,
    notifier: Notifier,
) -> (Stores, Synced) {
    let client: ApiClient = client.into();
    let reporter = Reporter {
        notifier: notifier.clone(),
        invalid: Arc::new(AtomicU64::new(0)),
    };
    let (svc_tx, svc_rx) = tokio_watch::channel(false);
    let (eps_tx, eps_rx) = tokio_watch::channel(false);
    let (node_synced_tx, node_synced_rx) = tokio_watch::channel(false);
    let (node_tx, node_rx) = tokio_watch::channel(None);
    let services = ServiceHandler {
        trackers: trackers.clone(),
        reporter: reporter.clone(),
    };
    let slices = SliceHandler {
        trackers,
        reporter: reporter.clone(),
    };
    let node = NodeHandler {
        node: node_tx,
        notifier,
    };
    let tasks = vec![
        tokio::spawn(run_watcher(
            client.clone(),
            service_watch_config(),
            EventCache::keys_only(),
            services,
            reporter.clone(),
            svc_tx,
        )),
        tokio::spawn(run_watcher(
            client.clone(),
            slice_watch_config(),
            EventCache::keys_only(),
            slices,
            reporter.clone(),
            eps_tx,
        )),
        tokio::spawn(run_watcher(
            client,
            node_watch_config(node_name),
            EventCache::default(),
            node,
            reporter.clone(),
            node_synced_tx,
        )),
    ];
    let stores = Stores {
        node: node_rx,
        invalid_objects: reporter.invalid,
        tasks,
    };
    let synced = Synced {
        services: svc_rx,
        endpoint_slices: eps_rx,
        node: node_synced_rx,
    };
    (stores, synced)
}
