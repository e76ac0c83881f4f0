//! Helpers shared by the integration tests.
pub mod apiserver;
pub mod dashboard;
pub mod e2e;
pub mod hostns;
pub mod klog;
pub mod netns;
pub mod planner;
pub mod podsec;
pub mod scale;
pub mod soak;
pub mod uml;
