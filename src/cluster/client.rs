//! Kubernetes client construction: in-cluster config, `--kubeconfig`, `--master`, and a QPS/burst limiter.

use super::deadline::Deadlines;
use super::http2::Http2;
use super::rate_limit::RateLimitLayer;
use super::rest_metrics::RestClientMetrics;
use super::transport::{Connections, Transport};
use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::PathBuf;

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

#[cfg(test)]
mod tests {
    use super::*;

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
