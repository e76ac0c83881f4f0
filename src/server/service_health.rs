//! Per-service health-check listeners for `externalTrafficPolicy: Local` services (upstream's
//! ServiceHealthServer), on plain hyper (HTTP/1).
//!
//! Each service with a `healthCheckNodePort` gets a listener on that port, on every node IP selected by
//! nodePortAddresses (or on the wildcard address when none are given). Any path answers 200 when the
//! service has local endpoints and the proxy is healthy, else 503, with the local endpoint count as a
//! load-balancer weight header and a small JSON body. A port that cannot be opened is reported, never
//! fatal: the service is retried at the next [`ServiceHealthServer::sync_services`].

use crate::cluster::model::ServiceName;
use crate::server::healthz::ProxyHealth;
use crate::server::http::{self, Limits};
use crate::server::listen::bind_tcp;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Header carrying the number of local endpoints, for load balancers that weight nodes.
pub const ENDPOINT_WEIGHT_HEADER: &str = "X-Load-Balancing-Endpoint-Weight";

/// A health-check port that could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenFailure {
    pub service: ServiceName,
    pub port: u16,
    /// The address whose bind failed.
    pub address: SocketAddr,
    pub kind: io::ErrorKind,
    pub error: String,
}

impl ListenFailure {
    /// The warning Event text upstream emits (reason `FailedToStartServiceHealthcheck`).
    pub fn message(&self, node_name: &str) -> String {
        format!(
            "node {node_name} failed to start healthcheck \"{}\" on port {}: {}",
            self.service, self.port, self.error
        )
    }
}

struct Listener {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Instance {
    port: u16,
    endpoints: Arc<AtomicUsize>,
    listeners: Vec<Listener>,
}

/// Manages the health-check listeners; cheap to share behind an [`Arc`].
pub struct ServiceHealthServer {
    node_ips: Vec<IpAddr>,
    health: Arc<ProxyHealth>,
    services: Mutex<BTreeMap<ServiceName, Instance>>,
    sync_lock: tokio::sync::Mutex<()>,
}

/// The JSON body upstream writes (tab-indented, no trailing newline).
pub fn response_body(service: &ServiceName, local_endpoints: usize, proxy_healthy: bool) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {}\n}}",
        q(&service.namespace),
        q(&service.name),
        local_endpoints,
        proxy_healthy
    )
}

fn respond(
    service: &ServiceName,
    endpoints: &AtomicUsize,
    health: &ProxyHealth,
) -> Response<Full<Bytes>> {
    let count = endpoints.load(Ordering::Relaxed);
    let healthy = health.is_healthy();
    let status = if count != 0 && healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut resp = Response::new(Full::new(Bytes::from(response_body(
        service, count, healthy,
    ))));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    h.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        ENDPOINT_WEIGHT_HEADER,
        hyper::header::HeaderValue::from(count),
    );
    resp
}

struct Shared {
    service: ServiceName,
    endpoints: Arc<AtomicUsize>,
    health: Arc<ProxyHealth>,
}

async fn accept_loop(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(service = %shared.service, error = %e, "Cannot register the healthcheck listener");
            return;
        }
    };
    let svc = service_fn(move |_req: Request<Incoming>| {
        let resp = respond(&shared.service, &shared.endpoints, &shared.health);
        async move { Ok::<_, Infallible>(resp) }
    });
    let shutdown = async move {
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                return;
            }
        }
    };
    http::serve(listener, svc, Limits::default(), shutdown).await;
}

impl ServiceHealthServer {
    /// A server listening on `node_ips` (the node addresses nodePortAddresses selects; empty = all
    /// addresses), reporting `health` as `serviceProxyHealthy`.
    pub fn new(node_ips: Vec<IpAddr>, health: Arc<ProxyHealth>) -> ServiceHealthServer {
        ServiceHealthServer {
            node_ips,
            health,
            services: Mutex::new(BTreeMap::new()),
            sync_lock: tokio::sync::Mutex::new(()),
        }
    }

    fn services(&self) -> MutexGuard<'_, BTreeMap<ServiceName, Instance>> {
        self.services.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn addresses(&self, port: u16) -> Vec<SocketAddr> {
        if self.node_ips.is_empty() {
            vec![SocketAddr::from(([0, 0, 0, 0], port))]
        } else {
            self.node_ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect()
        }
    }

    /// Binds `port` on every address and starts serving it for `name`. On a failure whatever was bound
    /// is dropped (closed), so a retry can take the port.
    fn open(&self, name: &ServiceName, port: u16) -> Result<Instance, ListenFailure> {
        let mut bound = Vec::new();
        for addr in self.addresses(port) {
            let l = bind_tcp(addr).map_err(|e| ListenFailure {
                service: name.clone(),
                port,
                address: addr,
                kind: e.kind(),
                error: e.to_string(),
            })?;
            bound.push(l);
        }
        tracing::debug!(service = %name, port, "Opening healthcheck");
        let endpoints = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            service: name.clone(),
            endpoints: endpoints.clone(),
            health: self.health.clone(),
        });
        let listeners = bound
            .into_iter()
            .map(|l| {
                let address = l
                    .local_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port)));
                let (stop, rx) = watch::channel(false);
                let task = tokio::spawn(accept_loop(l, shared.clone(), rx));
                Listener {
                    address,
                    stop,
                    task,
                }
            })
            .collect();
        Ok(Instance {
            port,
            endpoints,
            listeners,
        })
    }

    /// Makes `services` (service → healthCheckNodePort) the active set: listeners of services gone or
    /// whose port changed are closed (and their ports released) before new ones are opened; services
    /// already listening on the same port are left alone. Returns the ports that could not be opened;
    /// those services stay inactive and are retried on the next call. Must run inside a tokio runtime.
    pub async fn sync_services(&self, services: &BTreeMap<ServiceName, u16>) -> Vec<ListenFailure> {
        let _serial = self.sync_lock.lock().await;
        let closing: Vec<(ServiceName, Instance)> = {
            let mut map = self.services();
            let gone: Vec<ServiceName> = map
                .iter()
                .filter(|(name, inst)| services.get(*name) != Some(&inst.port))
                .map(|(name, _)| name.clone())
                .collect();
            gone.into_iter()
                .filter_map(|name| map.remove(&name).map(|inst| (name, inst)))
                .collect()
        };
        for (name, inst) in closing {
            tracing::debug!(service = %name, port = inst.port, "Closing healthcheck");
            for l in &inst.listeners {
                let _ = l.stop.send(true);
            }
            for l in inst.listeners {
                if let Err(e) = l.task.await {
                    tracing::warn!(service = %name, address = %l.address, error = %e, "Healthcheck task ended abnormally");
                }
            }
        }

        let mut failures = Vec::new();
        for (name, &port) in services {
            if self.services().contains_key(name) {
                continue;
            }
            match self.open(name, port) {
                Ok(inst) => {
                    self.services().insert(name.clone(), inst);
                }
                Err(f) => {
                    tracing::error!(service = %name, port, error = %f.error, "Failed to start healthcheck");
                    failures.push(f);
                }
            }
        }
        failures
    }

    /// Sets the local endpoint count of each active service; services missing from `endpoints` get 0,
    /// counts for services without a listener are ignored.
    pub fn sync_endpoints(&self, endpoints: &BTreeMap<ServiceName, usize>) {
        for (name, inst) in self.services().iter() {
            let n = endpoints.get(name).copied().unwrap_or(0);
            inst.endpoints.store(n, Ordering::Relaxed);
        }
    }

    /// Active services with their requested port and the addresses actually bound.
    pub fn listening(&self) -> BTreeMap<ServiceName, (u16, Vec<SocketAddr>)> {
        self.services()
            .iter()
            .map(|(name, inst)| {
                (
                    name.clone(),
                    (
                        inst.port,
                        inst.listeners.iter().map(|l| l.address).collect(),
                    ),
                )
            })
            .collect()
    }

    /// Closes every listener (same as syncing an empty set).
    pub async fn shutdown(&self) {
        self.sync_services(&BTreeMap::new()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_upstream_layout() {
        let s = ServiceName {
            namespace: "ns".into(),
            name: "web".into(),
        };
        let body = response_body(&s, 3, true);
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 3,\n\t\"serviceProxyHealthy\": true\n}"
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["localEndpoints"], 3);
    }
}
