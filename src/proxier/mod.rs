//! The proxier: the pure planner and the reconciler that applies its plan to the kernel.

pub mod cleanup;
pub mod desired;
pub mod drift_report;
pub mod graceful;
pub mod plan;
#[cfg(test)]
mod plan_reuse_tests;
pub mod reconcile;
pub mod report;
pub mod sync;
#[cfg(test)]
mod sync_tests;
#[cfg(any(test, feature = "testkit"))]
#[doc(hidden)]
pub mod testkit;

pub use reconcile::{Backends, ConntrackHints, FamilyInput, Reconciler};
pub use report::{FailureKind, SyncReport};
pub use sync::{FamilySnapshot, Proxier, SyncInput};
