//! The HTTP stack under the API client, assembled here rather than by kube's default builder so that the
//! connections speak HTTP/2 where the server offers it ([`super::http2`]) and carry keepalive probes, so
//! that every request has a deadline ([`super::deadline`]), and so that every request is counted
//! ([`super::rest_metrics`]).
//!
//! From the outside in: rate limiter → deadlines → response size limits ([`super::body_limit`]) → base
//! URI → retries of 429/503/504 (when the config allows, as kube's builder does) → authentication → extra
//! headers → metrics → gzip ([`super::gzip`]: asks for it unless the kubeconfig has
//! `disable-compression: true`, decodes it) → [`Connections`]: the connect gate
//! ([`super::connect_gate`]: one request opens a connection while the others wait) → hyper's pooled
//! client over rustls, HTTP/2 by ALPN with health pings or HTTP/1.1, on TCP connections with keepalive
//! and a connect timeout.
//!
//! Clients built on one [`Connections`] share its pool: against an HTTP/2 server the daemon's watchers
//! and its Event publisher use one connection, as client-go's shared transport has them do.

use super::body_limit::BodyLimitLayer;
use super::connect_gate::ConnectGateLayer;
use super::deadline::{
    CONNECT_TIMEOUT, DeadlineLayer, Deadlines, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES,
};
use super::gzip::GzipLayer;
use super::http2::Http2;
use super::rate_limit::RateLimitLayer;
use super::rest_metrics::RestClientMetrics;
use anyhow::{Context, bail};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// What a client is built with besides the kube configuration and its connections.
pub struct Transport<'a> {
    /// Client-side request rate limit.
    pub rate_limit: RateLimitLayer,
    /// Request deadlines and the watch idle limit.
    pub deadlines: Deadlines,
    /// Where requests are counted.
    pub metrics: &'a RestClientMetrics,
}

/// The TCP connector: keepalive probes, connect timeout, no Nagle delay; https URLs allowed (TLS wraps it).
pub fn tcp_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    http
}

/// The TLS connector over [`tcp_connector`] for `config` (its CA, client identity, server name and
/// `insecure-skip-tls-verify`), offering `h2` and `http/1.1` by ALPN when `http2.enabled`. Plain `http://`
/// URLs pass through without TLS.
fn https_connector(
    config: &kube::Config,
    http2: Http2,
) -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let tls = config
        .rustls_client_config()
        .context("setting up TLS for the API server")?;
    let mut builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .with_context(|| format!("kubeconfig tls-server-name {name:?}"))?;
        builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    Ok(if http2.enabled {
        builder
            .enable_all_versions()
            .wrap_connector(tcp_connector())
    } else {
        builder.enable_http1().wrap_connector(tcp_connector())
    })
}

/// The `host:port` of the API server, as the metrics' `host` label.
fn host_label(config: &kube::Config) -> String {
    let url = &config.cluster_url;
    let host = url.host().unwrap_or_default();
    match url.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// A pool of connections to one API server, shared by the clients built on it.
#[derive(Clone)]
pub struct Connections {
    config: kube::Config,
    hyper: HyperClient<HttpsConnector<HttpConnector>, Body>,
    /// Closed at first only where a connection may be HTTP/2.
    gate: ConnectGateLayer,
}

impl Connections {
    /// Connections to the server of `config`, speaking HTTP/2 as `http2` says.
    pub fn new(config: kube::Config, http2: Http2) -> anyhow::Result<Connections> {
        if let Some(proxy) = &config.proxy_url {
            bail!(
                "kubeconfig proxy-url {proxy} is not supported: connect to the API server directly"
            );
        }
        let https = https_connector(&config, http2)?;
        let mut builder = HyperClient::builder(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new());
        if let Some(idle) = http2.read_idle {
            builder
                .http2_keep_alive_interval(idle)
                .http2_keep_alive_timeout(http2.ping_timeout)
                .http2_keep_alive_while_idle(true);
        }
        let hyper = builder.build(https);
        let gate = ConnectGateLayer::new(
            http2.enabled && config.cluster_url.scheme_str() == Some("https"),
        );
        Ok(Connections {
            config,
            hyper,
            gate,
        })
    }

    /// An API client on these connections with the layers of `t`.
    pub fn client(&self, t: Transport<'_>) -> anyhow::Result<kube::Client> {
        let config = &self.config;
        let retry = config
            .default_retry
            .then(|| RetryLayer::new(RetryPolicy::server_retry()));
        let service = ServiceBuilder::new()
            .layer(t.rate_limit)
            .layer(DeadlineLayer::new(t.deadlines))
            .layer(BodyLimitLayer::default())
            .layer(config.base_uri_layer())
            .option_layer(retry)
            .option_layer(config.auth_layer().context("API server credentials")?)
            .layer(
                config
                    .extra_headers_layer()
                    .context("API request headers")?,
            )
            .layer(t.metrics.layer(&host_label(config)))
            .layer(GzipLayer::new(!config.disable_compression))
            .layer(self.gate.clone())
            .service(self.hyper.clone());
        Ok(ClientBuilder::new(service, config.default_namespace.clone()).build())
    }
}

/// Builds an API client for `config` on connections of its own (HTTP/2 with client-go's defaults) with
/// the layers of `t`.
pub fn build(config: kube::Config, t: Transport<'_>) -> anyhow::Result<kube::Client> {
    Connections::new(config, Http2::default())?.client(t)
}
