//! HTTP front of the test API server: routing, list/get/watch of the served kinds, Event recording and
//! minimal discovery, in the wire format of the real kube-apiserver.

use super::proto::{self, Wire};
use super::selector::{FieldSelector, LabelSelector};
use super::store::{Change, Expired, Kind, Store};
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Request counters (per kind for lists and watches).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// List requests per kind.
    pub lists: HashMap<Kind, u64>,
    /// Watch requests per kind.
    pub watches: HashMap<Kind, u64>,
    /// Watch streams currently open per kind.
    pub open_watches: HashMap<Kind, u64>,
    /// Watch streams ended with a 410 "Expired" ERROR event, per kind.
    pub expired_watches: HashMap<Kind, u64>,
    /// GETs of single objects.
    pub gets: u64,
    /// Event creations and patches.
    pub event_writes: u64,
    /// Requests answered 404 because the path is not served.
    pub unknown: u64,
    /// Requests refused with 503 while the server was set unavailable.
    pub refused: u64,
    /// List and watch responses per kind and encoding.
    pub responses: HashMap<(Kind, Wire), u64>,
    /// Body bytes sent in list responses, per kind and encoding.
    pub list_bytes: HashMap<(Kind, Wire), u64>,
    /// Body bytes sent on watch streams, per kind and encoding.
    pub watch_bytes: HashMap<(Kind, Wire), u64>,
    /// Requests answered 406 (no acceptable media type offered).
    pub not_acceptable: u64,
}

/// State shared between the control handle and the HTTP tasks.
pub struct Shared {
    /// Objects and history.
    pub store: Mutex<Store>,
    /// Bumped (send_modify) on every change of the store or of the watch generation.
    pub changed: watch::Sender<u64>,
    /// While true, watch requests wait before being served.
    pub hold: watch::Sender<bool>,
    /// Request counters.
    pub counters: Mutex<Counters>,
    /// Log of requests: "METHOD path?query".
    pub requests: Mutex<Vec<String>>,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Mutex<Duration>,
    /// While true, every request is answered 503 ServiceUnavailable.
    pub unavailable: AtomicBool,
    /// Every Event write received.
    pub event_log: Mutex<super::event_log::EventLog>,
    /// Whether lists, watches and gets are offered in protobuf (the real API server offers it for
    /// every built-in kind).
    pub protobuf: AtomicBool,
    /// Lists at resourceVersion 0 ignore `limit` (served whole, as from kube-apiserver's watch cache).
    pub watch_cache_lists: bool,
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not wedge the server).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Wakes every watch task.
    pub fn notify(&self) {
        self.changed.send_modify(|v| *v += 1);
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

/// A `Status` object as the API server returns it for failures.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn status_response(code: u16, reason: &str, message: &str) -> Response {
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &status(code, reason, message),
    )
}

/// A response body in `wire`'s media type (watch streams have their own).
fn encoded(code: StatusCode, wire: Wire, body: Vec<u8>) -> Response {
    let content_type = match wire {
        Wire::Json => "application/json",
        Wire::Protobuf => proto::MEDIA_TYPE,
    };
    Response::builder()
        .status(code)
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap_or_default()
}

/// A failure `Status` in the negotiated encoding.
fn status_in(wire: Wire, code: u16, reason: &str, message: &str) -> Response {
    match wire {
        Wire::Json => status_response(code, reason, message),
        Wire::Protobuf => encoded(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            wire,
            proto::status(code, reason, message),
        ),
    }
}

/// The stored object could not be encoded in protobuf (a test fixture the protobuf encoding cannot
/// carry): the request fails loudly.
fn unencodable(message: String) -> Response {
    status_response(
        500,
        "InternalError",
        &format!("cannot encode as protobuf: {message}"),
    )
}

fn expired_message(rv: u64, e: Expired) -> String {
    format!("too old resource version: {rv} ({})", e.floor)
}

/// Which objects a list or watch selects.
#[derive(Clone, Debug, Default)]
struct Filter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

/// A parsed resource path.
enum Route {
    Version,
    ApiVersions,
    ApiGroups,
    ResourceList(String),
    Health,
    Collection {
        kind: Kind,
        ns: Option<String>,
    },
    Object {
        kind: Kind,
        ns: Option<String>,
        name: String,
    },
    Events {
        api_version: String,
        ns: String,
        name: Option<String>,
    },
}

fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match segs.as_slice() {
        ["version"] => return Some(Route::Version),
        ["healthz" | "readyz" | "livez"] => return Some(Route::Health),
        ["api"] => return Some(Route::ApiVersions),
        ["apis"] => return Some(Route::ApiGroups),
        ["api", "v1"] => return Some(Route::ResourceList("v1".into())),
        ["apis", g, v] => return Some(Route::ResourceList(format!("{g}/{v}"))),
        ["api", "v1", rest @ ..] => ("v1".to_string(), rest),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (ns, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(ns.to_string()), *plural, None),
        ["namespaces", ns, plural, name] => (Some(ns.to_string()), *plural, Some(name.to_string())),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(name.to_string())),
        _ => return None,
    };
    if plural == "events" && (api_version == "events.k8s.io/v1" || api_version == "v1") {
        return Some(Route::Events {
            api_version,
            ns: ns.unwrap_or_else(|| "default".into()),
            name,
        });
    }
    let kind = Kind::from_resource(&api_version, plural)?;
    let ns = if kind.namespaced() { ns } else { None };
    Some(match name {
        Some(name) => Route::Object { kind, ns, name },
        None => Route::Collection { kind, ns },
    })
}

/// The single handler of every request.
pub async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    lock(&shared.requests).push(format!("{method} {uri}"));
    if shared.unavailable.load(Ordering::Relaxed) {
        lock(&shared.counters).refused += 1;
        return status_response(
            503,
            "ServiceUnavailable",
            "the test API server is set unavailable",
        );
    }
    match (route(uri.path()), &method) {
        (Some(Route::Version), &Method::GET) => json_response(
            StatusCode::OK,
            &json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-kprs-test", "gitCommit": "test",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                "compiler": "gc", "platform": "linux/amd64"
            }),
        ),
        (Some(Route::Health), &Method::GET) => Response::new(Body::from("ok")),
        (Some(Route::ApiVersions), &Method::GET) => json_response(
            StatusCode::OK,
            &json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
            }),
        ),
        (Some(Route::ApiGroups), &Method::GET) => {
            let group = |name: &str| {
                json!({
                    "name": name,
                    "versions": [{"groupVersion": format!("{name}/v1"), "version": "v1"}],
                    "preferredVersion": {"groupVersion": format!("{name}/v1"), "version": "v1"}
                })
            };
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [group("discovery.k8s.io"), group("events.k8s.io")]
                }),
            )
        }
        (Some(Route::ResourceList(gv)), &Method::GET) => resource_list(&gv),
        (Some(Route::Collection { kind, ns }), &Method::GET) => {
            match negotiate(&shared, &headers) {
                Ok(wire) => collection(shared, kind, ns, &q, wire).await,
                Err(refused) => *refused,
            }
        }
        (Some(Route::Object { kind, ns, name }), &Method::GET) => {
            match negotiate(&shared, &headers) {
                Ok(wire) => get(&shared, kind, ns.as_deref().unwrap_or(""), &name, wire),
                Err(refused) => *refused,
            }
        }
        (
            Some(Route::Events {
                api_version,
                ns,
                name,
            }),
            m,
        ) => {
            let request = super::event_log::EventRequest {
                method: m,
                api_version: &api_version,
                ns: &ns,
                name: name.as_deref(),
                body: &body,
            };
            let response = events(&shared, &request);
            super::event_log::observe(&shared, &request, response.status());
            response
        }
        _ => {
            lock(&shared.counters).unknown += 1;
            status_response(
                404,
                "NotFound",
                &format!("the server could not find {method} {uri}"),
            )
        }
    }
}

/// The encoding the request accepts and the server offers, or a 406 answer.
fn negotiate(shared: &Shared, headers: &HeaderMap) -> Result<Wire, Box<Response>> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let offer = shared.protobuf.load(Ordering::Relaxed);
    Wire::negotiate(accept, offer).ok_or_else(|| {
        lock(&shared.counters).not_acceptable += 1;
        Box::new(status_response(
            406,
            "NotAcceptable",
            &format!("none of {accept:?} is offered (protobuf offered: {offer})"),
        ))
    })
}

fn get(shared: &Shared, kind: Kind, ns: &str, name: &str, wire: Wire) -> Response {
    lock(&shared.counters).gets += 1;
    let store = lock(&shared.store);
    match (store.get(kind, ns, name), wire) {
        (Some(obj), Wire::Json) => json_response(StatusCode::OK, obj),
        (Some(obj), Wire::Protobuf) => match proto::object(kind, obj) {
            Ok(body) => encoded(StatusCode::OK, wire, body),
            Err(e) => unencodable(e),
        },
        (None, _) => status_in(
            wire,
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", kind.plural()),
        ),
    }
}

fn resource_list(gv: &str) -> Response {
    let res = |name: &str, kind: &str, namespaced: bool, verbs: &[&str]| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs});
    let resources = match gv {
        "v1" => vec![
            res("services", "Service", true, &["get", "list", "watch"]),
            res("nodes", "Node", false, &["get", "list", "watch"]),
            res("events", "Event", true, &["create", "patch", "get", "list"]),
        ],
        "discovery.k8s.io/v1" => {
            vec![res(
                "endpointslices",
                "EndpointSlice",
                true,
                &["get", "list", "watch"],
            )]
        }
        "events.k8s.io/v1" => vec![res(
            "events",
            "Event",
            true,
            &["create", "patch", "get", "list"],
        )],
        _ => return status_response(404, "NotFound", &format!("group version {gv} not served")),
    };
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources
        }),
    )
}

/// Parses the selectors of a request; the error is a message for a 400 response.
fn parse_filter(ns: Option<String>, q: &HashMap<String, String>) -> Result<Filter, String> {
    let labels = LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str))?;
    Ok(Filter {
        namespace: ns,
        labels,
        fields,
    })
}

fn truthy(q: &HashMap<String, String>, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true" || v == "1")
}

async fn collection(
    shared: Arc<Shared>,
    kind: Kind,
    ns: Option<String>,
    q: &HashMap<String, String>,
    wire: Wire,
) -> Response {
    let filter = match parse_filter(ns, q) {
        Ok(f) => f,
        Err(e) => return status_in(wire, 400, "BadRequest", &e),
    };
    *lock(&shared.counters)
        .responses
        .entry((kind, wire))
        .or_default() += 1;
    if truthy(q, "watch") {
        return start_watch(shared, kind, filter, q, wire).await;
    }
    *lock(&shared.counters).lists.entry(kind).or_default() += 1;
    let response = list(&shared, kind, &filter, q, wire);
    let sent = axum::body::HttpBody::size_hint(response.body())
        .exact()
        .unwrap_or(0);
    *lock(&shared.counters)
        .list_bytes
        .entry((kind, wire))
        .or_default() += sent;
    response
}

fn list(
    shared: &Shared,
    kind: Kind,
    filter: &Filter,
    q: &HashMap<String, String>,
    wire: Wire,
) -> Response {
    let status_response =
        |code, reason: &str, message: &str| status_in(wire, code, reason, message);
    let store = lock(&shared.store);
    // The continue token is "<rv>:<namespace>/<name>" of the last returned item.
    let (at, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(tok) => {
            let Some((rv, key)) = tok.split_once(':') else {
                return status_response(400, "BadRequest", "invalid continue token");
            };
            let Ok(rv) = rv.parse::<u64>() else {
                return status_response(400, "BadRequest", "invalid continue token");
            };
            let (kns, kname) = key.split_once('/').unwrap_or(("", key));
            (rv, Some((kns.to_string(), kname.to_string())))
        }
        None => {
            let rv = q.get("resourceVersion").map_or("", String::as_str);
            let exact = q.get("resourceVersionMatch").map(String::as_str) == Some("Exact");
            let at = match rv.parse::<u64>() {
                _ if rv.is_empty() => store.rv,
                Ok(n) if exact => n,
                Ok(_) => store.rv,
                Err(_) => return status_response(400, "BadRequest", "invalid resourceVersion"),
            };
            (at, None)
        }
    };
    let objects = match store.snapshot(kind, at) {
        Ok(o) => o,
        Err(e) => {
            let msg = if after.is_some() {
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter."
                    .to_string()
            } else {
                expired_message(at, e)
            };
            return status_response(410, "Expired", &msg);
        }
    };
    // kube-apiserver serves `resourceVersion=0` from its watch cache, whole, whatever the limit.
    let from_cache = shared.watch_cache_lists
        && after.is_none()
        && q.get("resourceVersion").map(String::as_str) == Some("0");
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0 && !from_cache);
    let start = match &after {
        Some(a) => Bound::Excluded(a.clone()),
        None => Bound::Unbounded,
    };
    let matching: Vec<(&(String, String), &Value)> = objects
        .range((start, Bound::Unbounded))
        .filter(|(_, v)| filter.matches(v))
        .collect();
    let take = limit.unwrap_or(usize::MAX).min(matching.len());
    let mut metadata = json!({"resourceVersion": at.min(store.rv).to_string()});
    if take < matching.len() {
        let (lns, lname) = matching[take - 1].0;
        metadata["continue"] = json!(format!("{at}:{lns}/{lname}"));
        metadata["remainingItemCount"] = json!(matching.len() - take);
    }
    let items: Vec<&Value> = matching[..take].iter().map(|(_, v)| *v).collect();
    if wire == Wire::Protobuf {
        let meta = k8s_pb::apimachinery::pkg::apis::meta::v1::ListMeta {
            resource_version: metadata["resourceVersion"].as_str().map(str::to_string),
            r#continue: metadata["continue"].as_str().map(str::to_string),
            remaining_item_count: metadata["remainingItemCount"].as_i64(),
            self_link: None,
        };
        return match proto::list(kind, meta, &items) {
            Ok(body) => encoded(StatusCode::OK, wire, body),
            Err(e) => unencodable(e),
        };
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", kind.kind()),
            "apiVersion": kind.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// Encodes the events of one watch in its negotiated encoding.
#[derive(Clone, Copy, Debug)]
struct EventEncoder {
    kind: Kind,
    wire: Wire,
}

impl EventEncoder {
    /// An ADDED, MODIFIED or DELETED event. An object the protobuf encoding cannot carry ends the
    /// watch with an ERROR event (500), as a real server reports an encoding failure.
    fn event(&self, event_type: &str, object: &Value) -> Bytes {
        match self.wire {
            Wire::Json => line(event_type, object),
            Wire::Protobuf => match proto::object(self.kind, object) {
                Ok(obj) => Bytes::from(proto::watch_frame(event_type, obj)),
                Err(e) => self.error(
                    500,
                    "InternalError",
                    &format!("cannot encode as protobuf: {e}"),
                ),
            },
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        if self.wire == Wire::Protobuf {
            let obj = proto::bookmark(self.kind, rv, initial_end);
            return Bytes::from(proto::watch_frame("BOOKMARK", obj));
        }
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = (self.kind.kind(), self.kind.api_version());
        line(
            "BOOKMARK",
            &json!({"kind": kind, "apiVersion": api_version, "metadata": meta}),
        )
    }

    fn error(&self, code: u16, reason: &str, message: &str) -> Bytes {
        match self.wire {
            Wire::Json => line("ERROR", &status(code, reason, message)),
            Wire::Protobuf => Bytes::from(proto::watch_frame(
                "ERROR",
                proto::status(code, reason, message),
            )),
        }
    }
}

/// The watch event a change produces for a watcher with `filter` (None when it does not see it).
fn watch_event(ch: &Change, filter: &Filter, enc: EventEncoder) -> Option<Bytes> {
    let prev_ok = ch.prev.as_ref().is_some_and(|p| filter.matches(p));
    let new_ok = ch.obj.as_ref().is_some_and(|o| filter.matches(o));
    match (prev_ok, new_ok, &ch.obj) {
        (true, true, Some(o)) => Some(enc.event("MODIFIED", o)),
        (false, true, Some(o)) => Some(enc.event("ADDED", o)),
        (true, false, _) => {
            let mut gone = ch.prev.clone()?;
            gone["metadata"]["resourceVersion"] = json!(ch.rv.to_string());
            Some(enc.event("DELETED", &gone))
        }
        _ => None,
    }
}

/// Where a watch starts.
enum Start {
    /// Synthetic ADDED events for the current state, then changes (`initial_end`: a bookmark marks the end).
    Current { initial_end: bool },
    /// Changes after this resourceVersion.
    After(u64),
}

struct OpenWatchGuard {
    shared: Arc<Shared>,
    kind: Kind,
}

impl Drop for OpenWatchGuard {
    fn drop(&mut self) {
        let mut c = lock(&self.shared.counters);
        let n = c.open_watches.entry(self.kind).or_default();
        *n = n.saturating_sub(1);
    }
}

async fn start_watch(
    shared: Arc<Shared>,
    kind: Kind,
    filter: Filter,
    q: &HashMap<String, String>,
    wire: Wire,
) -> Response {
    let status_response =
        |code, reason: &str, message: &str| status_in(wire, code, reason, message);
    *lock(&shared.counters).watches.entry(kind).or_default() += 1;
    let mut hold = shared.hold.subscribe();
    let _ = hold.wait_for(|h| !*h).await;
    let rv = q.get("resourceVersion").map_or("", String::as_str);
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let start = if truthy(q, "sendInitialEvents") {
        Start::Current {
            initial_end: bookmarks,
        }
    } else if rv.is_empty() || rv == "0" {
        Start::Current { initial_end: false }
    } else {
        match rv.parse::<u64>() {
            Ok(n) => Start::After(n),
            Err(_) => return status_response(400, "BadRequest", "invalid resourceVersion"),
        }
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    *lock(&shared.counters).open_watches.entry(kind).or_default() += 1;
    let guard = OpenWatchGuard {
        shared: shared.clone(),
        kind,
    };
    let enc = EventEncoder { kind, wire };
    let counted = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        run_watch(shared, enc, filter, start, bookmarks, timeout, tx).await;
    });
    let stream = futures::stream::unfold(rx, move |mut rx| {
        let counted = counted.clone();
        async move {
            let b = rx.recv().await?;
            *lock(&counted.counters)
                .watch_bytes
                .entry((kind, wire))
                .or_default() += b.len() as u64;
            Some((Ok::<Bytes, Infallible>(b), rx))
        }
    });
    let content_type = match wire {
        Wire::Json => "application/json",
        Wire::Protobuf => proto::WATCH_MEDIA_TYPE,
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .header("cache-control", "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

async fn run_watch(
    shared: Arc<Shared>,
    enc: EventEncoder,
    filter: Filter,
    start: Start,
    bookmarks: bool,
    timeout: Duration,
    tx: mpsc::Sender<Bytes>,
) {
    let kind = enc.kind;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changed = shared.changed.subscribe();
    let interval = *lock(&shared.bookmark_interval);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let (generation, mut cursor, initial) = {
        let store = lock(&shared.store);
        let mut out = Vec::new();
        let cursor = match start {
            Start::Current { initial_end } => {
                if let Ok(objs) = store.snapshot(kind, store.rv) {
                    out.extend(
                        objs.values()
                            .filter(|o| filter.matches(o))
                            .map(|o| enc.event("ADDED", o)),
                    );
                }
                if initial_end {
                    out.push(enc.bookmark(store.rv, true));
                }
                store.rv
            }
            Start::After(n) => n,
        };
        (store.drop_generation, cursor, out)
    };
    for b in initial {
        if tx.send(b).await.is_err() {
            return;
        }
    }
    loop {
        let batch = {
            let store = lock(&shared.store);
            if store.drop_generation != generation {
                return;
            }
            match store.changes_since(kind, cursor) {
                Ok(changes) => {
                    let out: Vec<Bytes> = changes
                        .iter()
                        .filter_map(|c| watch_event(c, &filter, enc))
                        .collect();
                    cursor = cursor.max(store.rv);
                    Ok(out)
                }
                Err(e) => Err(expired_message(cursor, e)),
            }
        };
        match batch {
            Ok(out) => {
                for b in out {
                    if tx.send(b).await.is_err() {
                        return;
                    }
                }
            }
            Err(msg) => {
                *lock(&shared.counters)
                    .expired_watches
                    .entry(kind)
                    .or_default() += 1;
                let _ = tx.send(enc.error(410, "Expired", &msg)).await;
                return;
            }
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return; },
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tick.tick(), if bookmarks => {
                if tx.send(enc.bookmark(cursor, false)).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// The API server's refusal of an events.k8s.io/v1 Event (core/v1 Events are not checked).
fn invalid_event(api_version: &str, ev: &Value, ns: &str) -> Option<String> {
    (api_version == "events.k8s.io/v1")
        .then(|| super::event_log::invalid(ev, ns))
        .flatten()
}

fn events(shared: &Shared, request: &super::event_log::EventRequest<'_>) -> Response {
    let super::event_log::EventRequest {
        method,
        api_version,
        ns,
        name,
        body,
    } = *request;
    let mut store = lock(&shared.store);
    let key_of = |n: &str| (api_version.to_string(), ns.to_string(), n.to_string());
    match (method, name) {
        (&Method::GET, None) => {
            let items: Vec<&Value> = store
                .events
                .iter()
                .filter(|((av, ens, _), _)| av == api_version && ens == ns)
                .map(|(_, v)| v)
                .collect();
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "EventList", "apiVersion": api_version,
                    "metadata": {"resourceVersion": store.rv.to_string()}, "items": items
                }),
            )
        }
        (&Method::GET, Some(n)) => match store.events.get(&key_of(n)) {
            Some(ev) => json_response(StatusCode::OK, ev),
            None => status_response(404, "NotFound", &format!("events \"{n}\" not found")),
        },
        (&Method::POST, None) => {
            let mut ev: Value = match serde_json::from_slice(body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return status_response(400, "BadRequest", "event body is not a JSON object"),
            };
            lock(&shared.counters).event_writes += 1;
            store.rv += 1;
            let generated = format!(
                "{}{:x}",
                ev["metadata"]["generateName"].as_str().unwrap_or("event-"),
                store.rv
            );
            let meta = match ev.get_mut("metadata").and_then(Value::as_object_mut) {
                Some(m) => m,
                None => {
                    ev["metadata"] = json!({});
                    match ev.get_mut("metadata").and_then(Value::as_object_mut) {
                        Some(m) => m,
                        None => return status_response(400, "BadRequest", "bad metadata"),
                    }
                }
            };
            let name = match meta
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                Some(n) => n.to_string(),
                None => generated,
            };
            meta.insert("name".into(), json!(name));
            meta.insert("namespace".into(), json!(ns));
            if store.events.contains_key(&key_of(&name)) {
                return status_response(
                    409,
                    "AlreadyExists",
                    &format!("events \"{name}\" already exists"),
                );
            }
            if let Some(why) = invalid_event(api_version, &ev, ns) {
                return status_response(
                    422,
                    "Invalid",
                    &format!("Event \"{name}\" is invalid: {why}"),
                );
            }
            if let Err(e) = store.stamp(&mut ev, None) {
                return status_response(400, "BadRequest", &e);
            }
            ev["apiVersion"] = json!(api_version);
            ev["kind"] = json!("Event");
            store.events.insert(key_of(&name), ev.clone());
            json_response(StatusCode::CREATED, &ev)
        }
        (&Method::PATCH | &Method::PUT, Some(n)) => {
            let patch: Value = match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => return status_response(400, "BadRequest", &format!("bad patch: {e}")),
            };
            lock(&shared.counters).event_writes += 1;
            store.rv += 1;
            let Some(mut ev) = store.events.get(&key_of(n)).cloned() else {
                return status_response(404, "NotFound", &format!("events \"{n}\" not found"));
            };
            let prev = ev.clone();
            if method == Method::PUT {
                ev = patch;
            } else {
                merge_patch(&mut ev, &patch);
            }
            if let Some(why) = invalid_event(api_version, &ev, ns) {
                return status_response(
                    422,
                    "Invalid",
                    &format!("Event \"{n}\" is invalid: {why}"),
                );
            }
            if let Err(e) = store.stamp(&mut ev, Some(&prev)) {
                return status_response(400, "BadRequest", &e);
            }
            store.events.insert(key_of(n), ev.clone());
            json_response(StatusCode::OK, &ev)
        }
        _ => status_response(
            405,
            "MethodNotAllowed",
            &format!("{method} not allowed on events"),
        ),
    }
}
