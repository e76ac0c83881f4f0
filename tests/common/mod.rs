//! Helpers shared by the integration tests.
pub mod api_bytes;
pub mod apiserver;
pub mod cluster;
pub mod dashboard;
pub mod e2e;
pub mod hostns;
pub mod klog;
// Tests only: reads `CARGO_TARGET_TMPDIR`, which cargo gives test targets, not the demo or the benches.
#[cfg(test)]
pub mod image;
pub mod netns;
pub mod planner;
pub mod podsec;
pub mod scale;
pub mod soak;
pub mod udp_service;
pub mod udp_stream;
pub mod uml;
