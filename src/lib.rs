//! kube-proxy-rs: a drop-in replacement for Kubernetes kube-proxy in IPVS mode.

// `unsafe` lives in `sys` only, each call behind a safe function.
#![deny(unsafe_code)]

pub mod app;
pub mod cluster;
pub use sys::codepages;
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
#[allow(unsafe_code)]
pub mod sys;
pub mod traffic;
pub mod truncate;
