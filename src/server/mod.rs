//! HTTP servers: healthz, metrics and per-service health checks.

pub mod admin;
pub mod clock;
pub mod healthz;
pub mod http;
pub mod listen;
pub mod service_health;

pub use admin::{
    MetricsServerState, ServeError, ServerHandle, start_healthz_server, start_metrics_server,
};
#[cfg(any(test, feature = "testkit"))]
pub use clock::FakeClock;
pub use clock::{Clock, SystemClock};
pub use healthz::{HealthResponse, HealthStatus, ProxyHealth};
pub use service_health::{ListenFailure, ServiceHealthServer};
