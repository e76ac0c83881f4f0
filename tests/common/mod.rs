//! Helpers shared by the integration tests.
pub mod apiserver;
pub mod netns;
pub mod scale;
pub mod uml;
