//! The healthz server (`/healthz`, `/livez`; default 0.0.0.0:10256) and the metrics server (`/metrics`,
//! `/healthz`, `/proxyMode`, `/configz`, `/statusz`, `/flagz`, `/debug/services`; default 127.0.0.1:10249), on axum.
//!
//! Bind failures follow `bindAddressHardFail`: with it the start function returns the error so the daemon
//! can exit; without it the failure is logged and binding is retried every 5 s in the background, as
//! upstream does.

use crate::component::zpages::{self, Negotiated, ZPages};
use crate::metrics::Metrics;
use crate::server::healthz::{HealthResponse, ProxyHealth};
use crate::server::http::{self, Limits};
use crate::server::listen::bind_tcp;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long to wait before retrying a failed bind (upstream: `wait.Until(..., 5*time.Second)`).
pub const BIND_RETRY: Duration = Duration::from_secs(5);

/// The `/configz` key upstream registers the configuration under.
pub const CONFIGZ_KEY: &str = "kubeproxy.config.k8s.io";

/// Failure to start a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("failed to start {server} server on {addr}: {source}")]
    Bind {
        server: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// A started server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The address actually bound (`None` while binding failed and is being retried).
    pub local_addr: Option<SocketAddr>,
    /// The serving task; ends after the shutdown future completes.
    pub task: JoinHandle<()>,
}

/// What the metrics server serves.
#[derive(Clone)]
pub struct MetricsServerState {
    pub metrics: Arc<Metrics>,
    /// Proxy mode reported by `/proxyMode` (always `ipvs` for us).
    pub proxy_mode: String,
    /// Effective configuration shown by `/configz` under [`CONFIGZ_KEY`].
    pub configz: serde_json::Value,
    /// Answers `/debug/services`, to this node only unless allowed (`None`: not served).
    pub explain: Option<Arc<crate::explain::http::DebugEndpoints>>,
    /// What `/statusz` and `/flagz` show.
    pub zpages: Arc<ZPages>,
}

const NOSNIFF: (header::HeaderName, HeaderValue) = (
    header::X_CONTENT_TYPE_OPTIONS,
    HeaderValue::from_static("nosniff"),
);

fn json_health(r: HealthResponse) -> Response {
    let status = StatusCode::from_u16(r.code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            NOSNIFF,
        ],
        r.body,
    )
        .into_response()
}

async fn healthz(State(h): State<Arc<ProxyHealth>>) -> Response {
    json_health(h.healthz())
}

async fn livez(State(h): State<Arc<ProxyHealth>>) -> Response {
    json_health(h.livez())
}

/// Router of the healthz server.
pub fn healthz_router(health: Arc<ProxyHealth>) -> Router {
    Router::new()
        .route("/healthz", any(healthz))
        .route("/livez", any(livez))
        .with_state(health)
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            NOSNIFF,
        ],
        body,
    )
        .into_response()
}

async fn metrics(State(s): State<MetricsServerState>) -> Response {
    // Encoding may dump IPVS (traffic counters): keep it off the async workers.
    let m = s.metrics.clone();
    let encoded = match tokio::task::spawn_blocking(move || m.encode()).await {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("error gathering metrics: {e}\n"),
            );
        }
    };
    match encoded {
        Ok(body) => text(StatusCode::OK, prometheus::TEXT_FORMAT, body),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("error gathering metrics: {e}\n"),
        ),
    }
}

async fn ok() -> Response {
    text(
        StatusCode::OK,
        "text/plain; charset=utf-8",
        "ok".to_string(),
    )
}

async fn proxy_mode(State(s): State<MetricsServerState>) -> Response {
    text(
        StatusCode::OK,
        "text/plain; charset=utf-8",
        s.proxy_mode.clone(),
    )
}

async fn configz(State(s): State<MetricsServerState>) -> Response {
    let mut body = serde_json::Map::new();
    body.insert(CONFIGZ_KEY.to_string(), s.configz.clone());
    let body = serde_json::Value::Object(body).to_string();
    text(StatusCode::OK, "application/json", body)
}

// --- `/statusz` and `/flagz` (component-base z-pages, upstream 1.36's formats) ---

async fn statusz(State(s): State<MetricsServerState>, headers: HeaderMap) -> Response {
    let z = &s.zpages;
    zpage(
        &headers,
        "statusz",
        "Statusz",
        || z.statusz_text(),
        |v| z.statusz_json(v),
    )
}

async fn flagz(State(s): State<MetricsServerState>, headers: HeaderMap) -> Response {
    let z = &s.zpages;
    zpage(
        &headers,
        "flagz",
        "Flagz",
        || z.flagz_text(),
        |v| z.flagz_json(v),
    )
}

/// Answers a z-page in the form the `Accept` header negotiates.
fn zpage(
    headers: &HeaderMap,
    page: &str,
    kind: &str,
    text_body: impl FnOnce() -> String,
    json_body: impl FnOnce(&str) -> String,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match zpages::negotiate(accept, kind) {
        Negotiated::Text => text(StatusCode::OK, "text/plain; charset=utf-8", text_body()),
        Negotiated::Json(version) => {
            let mut r = text(StatusCode::OK, "application/json", json_body(version));
            if version == "v1alpha1"
                && let Ok(w) = HeaderValue::from_str(&zpages::deprecation_warning(page))
            {
                r.headers_mut().insert(header::WARNING, w);
            }
            r
        }
        Negotiated::NotAcceptable => text(
            StatusCode::NOT_ACCEPTABLE,
            "application/json",
            zpages::not_acceptable_body(),
        ),
    }
}

/// Router of the metrics server.
pub fn metrics_router(state: MetricsServerState) -> Router {
    let explain = state.explain.clone();
    let mut router = Router::new()
        .route("/metrics", any(metrics))
        .route("/healthz", any(ok))
        .route("/healthz/ping", any(ok))
        .route("/proxyMode", any(proxy_mode))
        .route("/configz", any(configz));
    // As upstream, a page whose feature gate is off is not installed.
    if state.zpages.statusz {
        router = router.route("/statusz", any(statusz));
    }
    if state.zpages.flagz {
        router = router.route("/flagz", any(flagz));
    }
    let router = router.with_state(state);
    match explain {
        Some(e) => crate::explain::http::serve_on(router, e),
        None => router,
    }
}

type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

async fn serve(
    server: &'static str,
    listener: std::net::TcpListener,
    router: Router,
    shutdown: Shutdown,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(server, error = %e, "Cannot register the listener");
            return;
        }
    };
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        // Router is always ready; each request gets its own clone, as axum::serve does.
        tower::Service::call(&mut router.clone(), req)
    });
    http::serve(listener, service, Limits::default(), shutdown).await;
}

/// Binds `addr` and serves `router` until `shutdown` completes. See the module doc for `hard_fail`.
pub async fn start_server<F>(
    server: &'static str,
    addr: SocketAddr,
    router: Router,
    hard_fail: bool,
    shutdown: F,
) -> Result<ServerHandle, ServeError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut shutdown: Shutdown = Box::pin(shutdown);
    match bind_tcp(addr) {
        Ok(listener) => {
            let local_addr = listener.local_addr().ok();
            let address = local_addr.map(|a| a.to_string()).unwrap_or_default();
            tracing::debug!(server, address, "Serving");
            let task = tokio::spawn(serve(server, listener, router, shutdown));
            Ok(ServerHandle { local_addr, task })
        }
        Err(source) => {
            let err = ServeError::Bind {
                server,
                addr,
                source,
            };
            if hard_fail {
                return Err(err);
            }
            tracing::error!(error = %err, retryIn = %crate::gotime::GoDuration::from_std(BIND_RETRY), "Failed to start server");
            let task = tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = &mut shutdown => return,
                        _ = tokio::time::sleep(BIND_RETRY) => {}
                    }
                    match bind_tcp(addr) {
                        Ok(listener) => {
                            tracing::info!(server, address = %addr, "Serving after retry");
                            serve(server, listener, router, shutdown).await;
                            return;
                        }
                        Err(e) => {
                            tracing::error!(server, address = %addr, error = %e, "Failed to start server")
                        }
                    }
                }
            });
            Ok(ServerHandle {
                local_addr: None,
                task,
            })
        }
    }
}

/// Starts the healthz server (`/healthz`, `/livez`) on `addr`.
pub async fn start_healthz_server<F>(
    addr: SocketAddr,
    health: Arc<ProxyHealth>,
    hard_fail: bool,
    shutdown: F,
) -> Result<ServerHandle, ServeError>
where
    F: Future<Output = ()> + Send + 'static,
{
    start_server("healthz", addr, healthz_router(health), hard_fail, shutdown).await
}

/// Starts the metrics server (`/metrics`, `/healthz`, `/proxyMode`, `/configz`) on `addr`.
pub async fn start_metrics_server<F>(
    addr: SocketAddr,
    state: MetricsServerState,
    hard_fail: bool,
    shutdown: F,
) -> Result<ServerHandle, ServeError>
where
    F: Future<Output = ()> + Send + 'static,
{
    start_server("metrics", addr, metrics_router(state), hard_fail, shutdown).await
}
