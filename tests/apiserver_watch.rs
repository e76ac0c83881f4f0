//! The test API server against the real kube-rs client and watcher (host-side, no UML).
mod common;
