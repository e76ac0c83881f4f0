//! kube-proxy-rs: a drop-in replacement for Kubernetes kube-proxy in IPVS mode.

pub mod app;
pub mod cluster;
pub mod codepages;
pub mod component;
pub mod config;
pub mod daemon;
pub mod explain;
pub mod gotime;
pub mod kernel;
pub mod logging;
pub mod malloc;
pub mod metrics;
pub mod net;
pub mod proxier;
pub mod runner;
pub mod scheduler;
pub mod server;
pub mod traffic;
pub mod truncate;
