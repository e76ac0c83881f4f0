//! Kubernetes client construction: in-cluster config, `--kubeconfig`, `--master`, and a QPS/burst limiter.

use super::deadline::Deadlines;
use super::http2::Http2;
use super::rest_metrics::RestClientMetrics;
use super::transport::{Connections, Transport};
use crate::runner::TokenBucket;
use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use tokio::time::{Instant, Sleep};

/// client-go's defaults when QPS / burst are 0.
pub const DEFAULT_QPS: f32 = 5.0;
/// client-go's default burst.
pub const DEFAULT_BURST: i32 = 10;

/// How to reach the API server (`clientConnection` plus `--master`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// Kubeconfig file; empty with no master = in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// API server URL overriding the kubeconfig's.
    pub master: Option<String>,
    /// Requests per second (0 = client-go default 5, negative = unlimited).
    pub qps: f32,
    /// Burst (0 = client-go default 10).
    pub burst: i32,
}

/// Loads the client configuration as upstream does: in-cluster when neither kubeconfig nor master is
/// given; otherwise the kubeconfig (if any) with the master URL (if any) overriding its server.
pub async fn load_config(opts: &ClientOptions) -> anyhow::Result<kube::Config> {
    let kubeconfig = opts
        .kubeconfig
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty());
    let master = opts.master.as_deref().filter(|m| !m.is_empty());
    let mut config = match (kubeconfig, master) {
        (None, None) => {
            tracing::info!(
                "Neither kubeconfig file nor master URL was specified, falling back to in-cluster config"
            );
            kube::Config::incluster().context("loading in-cluster config")?
        }
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        (None, Some(m)) => {
            kube::Config::new(m.parse().with_context(|| format!("master URL {m:?}"))?)
        }
    };
    if let Some(m) = master {
        config.cluster_url = m.parse().with_context(|| format!("master URL {m:?}"))?;
    }
    Ok(config)
}

/// The effective (rate, burst) for `qps`/`burst` options; rate 0 = unlimited.
pub fn effective_limits(qps: f32, burst: i32) -> (f64, u32) {
    let rate = if qps < 0.0 {
        0.0
    } else if qps == 0.0 {
        f64::from(DEFAULT_QPS)
    } else {
        f64::from(qps)
    };
    let burst = if burst <= 0 { DEFAULT_BURST } else { burst };
    (rate, burst.unsigned_abs())
}

/// The daemon's API clients.
pub struct Clients {
    /// The watchers' and the Node reads': the `qps`/`burst` limiter.
    pub main: kube::Client,
    /// The Event publisher's: no limiter of its own (the publisher paces itself).
    pub events: kube::Client,
}

/// Builds the daemon's clients with the request rate limiter, request deadlines, TCP keepalive and
/// request metrics (counted in `metrics`) installed ([`super::transport`]), on one pool of connections
/// speaking HTTP/2 as the environment says ([`super::http2`]): against an API server that offers HTTP/2,
/// every list, watch and Event write goes over one connection, as client-go's shared transport has them.
pub async fn build_clients(
    opts: &ClientOptions,
    metrics: &RestClientMetrics,
) -> anyhow::Result<Clients> {
    let config = load_config(opts).await?;
    let http2 = Http2::from_env()?;
    tracing::info!(
        http2 = http2.enabled,
        ping_after = ?http2.read_idle,
        ping_timeout = ?http2.ping_timeout,
        "API client connections"
    );
    let connections = Connections::new(config, http2).context("building API client")?;
    let (rate, burst) = effective_limits(opts.qps, opts.burst);
    let client = |rate_limit| {
        connections
            .client(Transport {
                rate_limit,
                deadlines: Deadlines::default(),
                metrics,
            })
            .context("building API client")
    };
    Ok(Clients {
        main: client(RateLimitLayer::new(rate, burst))?,
        events: client(RateLimitLayer::new(0.0, 1))?,
    })
}

/// Tower layer delaying requests to at most `rate` per second with `burst` back to back.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    /// `rate <= 0` = unlimited.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(rate, burst, Instant::now()))),
        }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            reserved: false,
            sleep: None,
        }
    }
}

/// Service produced by [`RateLimitLayer`]: readiness waits for a token.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    reserved: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            let now = Instant::now();
            let wait = match self.bucket.lock() {
                Ok(mut b) => b.reserve(now),
                Err(_) => std::time::Duration::ZERO,
            };
            self.reserved = true;
            if !wait.is_zero() {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(now + wait)));
            }
        }
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::time::Duration;
    use tower::{Layer, Service};

    struct Echo;
    impl Service<u32> for Echo {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;
        fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, r: u32) -> Self::Future {
            ready(Ok(r))
        }
    }

    async fn send(s: &mut RateLimited<Echo>, r: u32) -> u32 {
        std::future::poll_fn(|cx| s.poll_ready(cx)).await.unwrap();
        s.call(r).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn limiter_allows_burst_then_rate() {
        let layer = RateLimitLayer::new(2.0, 3);
        let mut a = layer.layer(Echo);
        let mut b = layer.layer(Echo); // clones share the bucket
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(send(&mut a, i).await, i);
        }
        assert_eq!(t0.elapsed(), Duration::ZERO);
        send(&mut b, 3).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        send(&mut a, 4).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let layer = RateLimitLayer::new(0.0, 1);
        let mut a = layer.layer(Echo);
        let t0 = Instant::now();
        for i in 0..100 {
            send(&mut a, i).await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }

    #[test]
    fn limits_follow_client_go_defaults() {
        assert_eq!(effective_limits(0.0, 0), (5.0, 10));
        assert_eq!(effective_limits(50.0, 100), (50.0, 100));
        assert_eq!(effective_limits(-1.0, 3), (0.0, 3));
    }

    #[tokio::test]
    async fn master_override_and_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("kp-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.1.2.3:6443\n    insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: abc\n",
        )
        .unwrap();
        let mut opts = ClientOptions {
            kubeconfig: Some(path.clone()),
            ..Default::default()
        };
        let cfg = load_config(&opts).await.unwrap();
        assert_eq!(cfg.cluster_url.to_string(), "https://10.1.2.3:6443/");
        opts.master = Some("http://127.0.0.1:8080".into());
        let cfg = load_config(&opts).await.unwrap();
        assert_eq!(cfg.cluster_url.to_string(), "http://127.0.0.1:8080/");
        opts.kubeconfig = None;
        let cfg = load_config(&opts).await.unwrap();
        assert_eq!(cfg.cluster_url.to_string(), "http://127.0.0.1:8080/");
        opts.kubeconfig = Some(dir.join("missing"));
        assert!(load_config(&opts).await.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
