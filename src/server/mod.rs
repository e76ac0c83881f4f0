//! HTTP servers: healthz, metrics and per-service health checks.
