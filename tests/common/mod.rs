//! Helpers shared by the integration tests.
pub mod apiserver;
pub mod e2e;
pub mod image;
pub mod netns;
pub mod planner;
pub mod scale;
pub mod soak;
pub mod uml;
