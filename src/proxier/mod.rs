//! The proxier: the pure planner and the reconciler that applies its plan to the kernel.

pub mod desired;
pub mod plan;
