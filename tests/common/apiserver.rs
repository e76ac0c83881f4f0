//! A test Kubernetes API server over real HTTP, for the end-to-end tests and the demo.
//!
//! It serves list and watch of Services, EndpointSlices (discovery.k8s.io/v1) and Nodes with label and
//! field selectors, pagination, resourceVersions, bookmarks, 410 "Expired" for compacted history, and records
//! Events (events.k8s.io/v1 and core/v1). Lists, watches and gets are served in JSON or, when the `Accept`
//! header asks for it and [`Options::protobuf`] offers it, in protobuf made from the same stored objects
//! (`proto.rs`: the `k8s\0` envelope, length-prefixed watch frames), as the real API server does. Like it,
//! it compresses responses over 128 KiB for clients that accept gzip (`compression.rs`), and it counts
//! every connection and byte on the wire (`traffic.rs`). It can also stall instead of failing (`faults`:
//! a black hole that never answers, watches that go silent, a watch frame replaced). The server runs on
//! its own thread with its own tokio runtime, so the synchronous control handle works from plain threads
//! and from async tests alike.
//!
//! ```ignore
//! let api = TestApiServer::start("127.0.0.1:0")?;
//! api.load_yaml(&std::fs::read_to_string("objects.yaml")?)?;
//! api.write_kubeconfig("/tmp/kubeconfig")?;
//! ```
#![allow(dead_code)]

pub mod compression;
pub mod event_log;
pub mod faults;
pub mod http;
pub mod proto;
pub mod selector;
pub mod store;
pub mod traffic;

pub use http::Counters;
pub use store::Kind;

use anyhow::{Context, Result, anyhow, bail};
use http::{Shared, lock};
use serde::Serialize;
use serde_json::Value;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::Store;
use tokio::sync::{oneshot, watch};

/// Options of a test API server.
#[derive(Clone, Debug)]
pub struct Options {
    /// Changes kept per kind for watch replay; older resourceVersions get 410.
    pub history_limit: usize,
    /// Interval between BOOKMARK events on watches with `allowWatchBookmarks=true`.
    pub bookmark_interval: Duration,
    /// Whether lists, watches and gets are offered in protobuf (as the real API server does for
    /// built-in kinds); `false` = a server that speaks JSON only (406 to a protobuf-only `Accept`).
    pub protobuf: bool,
    /// Lists at resourceVersion `0` come whole, `limit` ignored, as kube-apiserver serves them from its
    /// watch cache (the daemon's first lists, like client-go's, ask `resourceVersion=0&limit=500`);
    /// `false` = pages of `limit` objects, as from etcd.
    pub watch_cache_lists: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(5),
            protobuf: true,
            watch_cache_lists: false,
        }
    }
}

/// Handle of a running test API server; dropping it stops the server.
pub struct TestApiServer {
    shared: Arc<Shared>,
    faults: Arc<faults::Faults>,
    traffic: Arc<traffic::Traffic>,
    compressed: Arc<compression::Compressed>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestApiServer {
    /// Starts a server on `addr` (e.g. "127.0.0.1:0") with default options.
    pub fn start(addr: impl ToSocketAddrs) -> Result<Self> {
        Self::start_with(addr, Options::default())
    }

    /// Starts a server on `addr` with `opts`.
    pub fn start_with(addr: impl ToSocketAddrs, opts: Options) -> Result<Self> {
        let listener = std::net::TcpListener::bind(addr).context("bind test API server")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(opts.history_limit)),
            changed: watch::Sender::new(0),
            hold: watch::Sender::new(false),
            counters: Mutex::new(Counters::default()),
            requests: Mutex::new(Vec::new()),
            bookmark_interval: Mutex::new(opts.bookmark_interval),
            unavailable: std::sync::atomic::AtomicBool::new(false),
            event_log: Mutex::new(event_log::EventLog::default()),
            protobuf: std::sync::atomic::AtomicBool::new(opts.protobuf),
            watch_cache_lists: opts.watch_cache_lists,
        });
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let app_state = shared.clone();
        let faults = Arc::new(faults::Faults::default());
        let fault_state = faults.clone();
        let traffic = Arc::new(traffic::Traffic::default());
        let counted = traffic.clone();
        let compressed = Arc::new(compression::Compressed::default());
        let compression_state = compressed.clone();
        let thread = std::thread::Builder::new()
            .name(format!("test-apiserver-{}", addr.port()))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let app = axum::Router::new()
                        .fallback(http::handle)
                        .with_state(app_state)
                        .layer(axum::middleware::from_fn_with_state(
                            compression_state,
                            compression::middleware,
                        ))
                        .layer(axum::middleware::from_fn_with_state(
                            fault_state,
                            faults::middleware,
                        ));
                    let listener = traffic::CountingListener::new(listener, counted);
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r {
                                eprintln!("test API server stopped: {e}");
                            }
                        }
                        _ = stop_rx => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(200));
            })
            .context("spawn test API server thread")?;
        ready_rx
            .recv()
            .map_err(|_| anyhow!("test API server thread died"))??;
        Ok(TestApiServer {
            shared,
            faults,
            traffic,
            compressed,
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL clients use (`http://127.0.0.1:<port>` when bound to an unspecified address).
    pub fn url(&self) -> String {
        let ip = if self.addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else if self.addr.is_ipv6() {
            format!("[{}]", self.addr.ip())
        } else {
            self.addr.ip().to_string()
        };
        format!("http://{ip}:{}", self.addr.port())
    }

    /// A kubeconfig pointing at this server without authentication.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: default\n\
             current-context: test\nusers:\n- name: test\n  user: {{}}\n",
            self.url()
        )
    }

    /// A client of this server built from [`Self::kubeconfig`], as the daemon builds its own.
    pub async fn client(&self) -> Result<kube::Client> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig())?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// Writes [`Self::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig())
            .with_context(|| format!("write kubeconfig {}", path.display()))
    }

    /// Creates or replaces a Service, EndpointSlice or Node; emits ADDED/MODIFIED; returns the object's
    /// resourceVersion. As on a real API server, applying an unchanged object is a no-op (same
    /// resourceVersion, no event).
    pub fn apply<K: k8s_openapi::Resource + Serialize>(&self, obj: &K) -> Result<u64> {
        let kind = Kind::from_kind(K::KIND)
            .ok_or_else(|| anyhow!("kind {} is not served by the test API server", K::KIND))?;
        self.apply_value(kind, serde_json::to_value(obj)?)
    }

    /// Creates or replaces an object given as JSON.
    pub fn apply_value(&self, kind: Kind, obj: Value) -> Result<u64> {
        let (rv, changed) = lock(&self.shared.store)
            .apply(kind, obj)
            .map_err(|e| anyhow!("apply {}: {e}", kind.kind()))?;
        if changed {
            self.shared.notify();
        }
        Ok(rv)
    }

    /// Deletes an object (namespace ignored for Nodes); emits DELETED. Returns the deletion's
    /// resourceVersion, or None when the object did not exist.
    pub fn delete(&self, kind: Kind, ns: &str, name: &str) -> Option<u64> {
        let rv = lock(&self.shared.store).delete(kind, ns, name);
        if rv.is_some() {
            self.shared.notify();
        }
        rv
    }

    /// The current object, typed.
    pub fn get<K: k8s_openapi::Resource + serde::de::DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<K> {
        let kind = Kind::from_kind(K::KIND)?;
        let v = lock(&self.shared.store).get(kind, ns, name).cloned()?;
        serde_json::from_value(v).ok()
    }

    /// Number of stored objects of a kind.
    pub fn count(&self, kind: Kind) -> usize {
        lock(&self.shared.store).count(kind)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv
    }

    /// Closes every open watch stream (clients see the stream end and re-watch from their last RV).
    pub fn drop_all_watches(&self) {
        lock(&self.shared.store).drop_generation += 1;
        self.shared.notify();
    }

    /// Compacts the history: any resourceVersion older than the current one gets 410 "Expired" (watches get
    /// an ERROR event, lists with `resourceVersionMatch=Exact` or a continue token an HTTP 410).
    pub fn expire_history(&self) {
        lock(&self.shared.store).expire();
        self.shared.notify();
    }

    /// While `true`, new watch requests wait (unanswered) until released with `false`. With
    /// `drop_all_watches` this lets a test change objects while no watch is open.
    pub fn hold_watches(&self, hold: bool) {
        self.shared.hold.send_replace(hold);
    }

    /// While `true`, every request is answered 503 ServiceUnavailable (open watches stay open; combine with
    /// `drop_all_watches` to simulate an API server outage).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared
            .unavailable
            .store(unavailable, std::sync::atomic::Ordering::Relaxed);
    }

    /// Offers protobuf (or stops offering it) to requests from now on.
    pub fn set_protobuf(&self, offer: bool) {
        self.shared
            .protobuf
            .store(offer, std::sync::atomic::Ordering::Relaxed);
    }

    /// List and watch responses served so far for `kind` in `wire`.
    pub fn responses(&self, kind: Kind, wire: proto::Wire) -> u64 {
        self.counters()
            .responses
            .get(&(kind, wire))
            .copied()
            .unwrap_or(0)
    }

    /// Connections and bytes on the wire so far.
    pub fn traffic(&self) -> traffic::TrafficCounts {
        self.traffic.counts()
    }

    /// Responses compressed so far and their body bytes before and after: (responses, plain, gzip).
    pub fn compressed(&self) -> (u64, u64, u64) {
        let c = &self.compressed;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::SeqCst);
        (get(&c.responses), get(&c.plain_bytes), get(&c.gzip_bytes))
    }

    /// Time spent compressing responses so far.
    pub fn compress_time(&self) -> Duration {
        Duration::from_nanos(
            self.compressed
                .nanos
                .load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// Requests that asked for gzip so far.
    pub fn gzip_asked(&self) -> u64 {
        self.compressed
            .asked
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Sets the BOOKMARK interval for watches started from now on.
    pub fn set_bookmark_interval(&self, d: Duration) {
        *lock(&self.shared.bookmark_interval) = d;
    }

    /// Recorded Events (events.k8s.io/v1 and core/v1 as JSON, in key order).
    pub fn events_json(&self) -> Vec<Value> {
        lock(&self.shared.store).events.values().cloned().collect()
    }

    /// Recorded events.k8s.io/v1 Events.
    pub fn events(&self) -> Vec<k8s_openapi::api::events::v1::Event> {
        lock(&self.shared.store)
            .events
            .iter()
            .filter(|((av, _, _), _)| av == "events.k8s.io/v1")
            .filter_map(|(_, v)| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    /// Every Event write received so far (creates, patches, updates), in order, with the answer.
    pub fn event_writes(&self) -> Vec<event_log::EventWrite> {
        lock(&self.shared.event_log).writes.clone()
    }

    /// A snapshot of the request counters.
    pub fn counters(&self) -> Counters {
        lock(&self.shared.counters).clone()
    }

    /// List requests served for a kind.
    pub fn list_requests(&self, kind: Kind) -> u64 {
        self.counters().lists.get(&kind).copied().unwrap_or(0)
    }

    /// Watch requests received for a kind.
    pub fn watch_requests(&self, kind: Kind) -> u64 {
        self.counters().watches.get(&kind).copied().unwrap_or(0)
    }

    /// Watch streams currently open for a kind.
    pub fn open_watches(&self, kind: Kind) -> u64 {
        self.counters()
            .open_watches
            .get(&kind)
            .copied()
            .unwrap_or(0)
    }

    /// Every request received so far, as "METHOD path?query".
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.requests).clone()
    }

    /// Polls `cond` every 20 ms until it holds or `timeout` passes (blocking; for plain threads).
    pub fn wait_until(&self, timeout: Duration, mut cond: impl FnMut(&Self) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if cond(self) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Async variant of [`Self::wait_until`] for async tests.
    pub async fn wait_until_async(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&Self) -> bool,
    ) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if cond(self) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Applies every Service, EndpointSlice and Node document of a multi-document YAML text (block or flow
    /// style, as in `/work/shared/reference/small-scenario/objects.yaml`). Text after a line `EOF` (a shell
    /// here-document end) is ignored. Returns (kind, namespace, name) of the applied objects.
    pub fn load_yaml(&self, text: &str) -> Result<Vec<(Kind, String, String)>> {
        let docs = parse_yaml(text)?;
        let mut out = Vec::new();
        for (kind, doc) in docs {
            let ns = if kind.namespaced() {
                doc.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string()
            } else {
                String::new()
            };
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            self.apply_value(kind, doc)?;
            out.push((kind, ns, name));
        }
        Ok(out)
    }

    /// Makes the stored Services, EndpointSlices and Nodes exactly those of a multi-document YAML text:
    /// new or changed documents are applied, unchanged ones left alone, objects missing from it deleted.
    /// The whole text is parsed before anything changes.
    pub fn sync_yaml(&self, text: &str) -> Result<SyncReport> {
        let docs = parse_yaml(text)?;
        let mut report = SyncReport::default();
        let mut wanted = std::collections::BTreeSet::new();
        for (kind, doc) in docs {
            let before = self.resource_version();
            let rv = self.apply_value(kind, doc.clone())?;
            let ns = if kind.namespaced() {
                doc.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string()
            } else {
                String::new()
            };
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if rv > before {
                report.applied.push((kind, ns.clone(), name.clone()));
            } else {
                report.unchanged += 1;
            }
            wanted.insert((kind, ns, name));
        }
        let existing: Vec<(Kind, String, String)> = {
            let store = lock(&self.shared.store);
            Kind::ALL
                .into_iter()
                .flat_map(|k| {
                    store
                        .snapshot(k, store.rv)
                        .map(|m| m.keys().cloned().collect::<Vec<_>>())
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |(ns, name)| (k, ns, name))
                })
                .collect()
        };
        for key in existing {
            if !wanted.contains(&key) {
                self.delete(key.0, &key.1, &key.2);
                report.deleted.push(key);
            }
        }
        Ok(report)
    }
}

/// What [`TestApiServer::sync_yaml`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Objects created or changed.
    pub applied: Vec<(Kind, String, String)>,
    /// Objects deleted because the YAML no longer has them.
    pub deleted: Vec<(Kind, String, String)>,
    /// Objects present and unchanged.
    pub unchanged: usize,
}

/// Parses multi-document YAML into (kind, object) pairs, checking each object against its k8s-openapi type.
/// Documents of other kinds are an error; empty documents are skipped.
pub fn parse_yaml(text: &str) -> Result<Vec<(Kind, Value)>> {
    use k8s_openapi::api::{core::v1::Node, core::v1::Service, discovery::v1::EndpointSlice};
    let mut body = String::new();
    for l in text.lines() {
        if l.trim_end() == "EOF" {
            break;
        }
        body.push_str(l);
        body.push('\n');
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&body).context("parse YAML")?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind_name = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some(kind) = Kind::from_kind(kind_name) else {
            bail!("YAML document {i}: kind {kind_name:?} is not served by the test API server");
        };
        let typed = match kind {
            Kind::Service => serde_json::from_value::<Service>(doc.clone()).map(|_| ()),
            Kind::EndpointSlice => serde_json::from_value::<EndpointSlice>(doc.clone()).map(|_| ()),
            Kind::Node => serde_json::from_value::<Node>(doc.clone()).map(|_| ()),
        };
        typed.with_context(|| format!("YAML document {i} is not a valid {kind_name}"))?;
        out.push((kind, doc));
    }
    Ok(out)
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
