//! The HTTP stack under the API client, assembled here rather than by kube's default builder so that the
//! TCP connections carry keepalive probes and every request has a deadline ([`super::deadline`]), and so
//! that every request is counted ([`super::rest_metrics`]).
//!
//! From the outside in: rate limiter → deadlines → response size limits ([`super::body_limit`]) → base
//! URI → retries of 429/503/504 (when the config allows, as kube's builder does) → authentication → extra
//! headers → metrics → gzip ([`super::gzip`]: asks for it unless the kubeconfig has
//! `disable-compression: true`, decodes it) → hyper's pooled HTTP/1.1 client over rustls, on TCP
//! connections with keepalive and a connect timeout.

use super::body_limit::BodyLimitLayer;
use super::deadline::{
    CONNECT_TIMEOUT, DeadlineLayer, Deadlines, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES,
};
use super::gzip::GzipLayer;
use super::rate_limit::RateLimitLayer;
use super::rest_metrics::RestClientMetrics;
use anyhow::{Context, bail};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// What the stack is built with besides the kube configuration.
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

/// The `host:port` of the API server, as the metrics' `host` label.
fn host_label(config: &kube::Config) -> String {
    let url = &config.cluster_url;
    let host = url.host().unwrap_or_default();
    match url.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Builds an API client for `config` over [`tcp_connector`] with the layers of `t`.
pub fn build(config: kube::Config, t: Transport<'_>) -> anyhow::Result<kube::Client> {
    if let Some(proxy) = &config.proxy_url {
        bail!("kubeconfig proxy-url {proxy} is not supported: connect to the API server directly");
    }
    let https = config
        .rustls_https_connector_with_connector(tcp_connector())
        .context("setting up TLS for the API server")?;
    let hyper: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new()).build(https);
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
        .layer(t.metrics.layer(&host_label(&config)))
        .layer(GzipLayer::new(!config.disable_compression))
        .service(hyper);
    Ok(ClientBuilder::new(service, config.default_namespace.clone()).build())
}
