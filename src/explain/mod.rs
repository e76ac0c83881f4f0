//! The explanation of every Service on this node: the planner's decision records (why each virtual
//! server exists, which scheduler it got and why, which endpoints were selected and why the others were
//! not), published after each sync ([`index`]), merged with the kernel's state when asked
//! ([`explainer`]) on threads of its own ([`workers`]), served to this node on `/debug/services`
//! ([`http`]) and printed by `kube-proxy explain` ([`cli`]).

pub mod answer;
pub mod answer_reader;
pub mod cli;
pub mod drift;
pub mod explainer;
pub mod http;
pub mod index;
pub mod kernel;
pub mod metrics;
pub mod report;
pub mod request;
pub mod reuse;
pub mod text;
pub mod workers;

pub use drift::DriftMarks;
pub use explainer::Explainer;
pub use index::{DecisionIndex, FamilyDecisions};

use crate::proxier::graceful::DrainQueue;
use std::sync::{Arc, Mutex, RwLock};

/// The decision index shared by the sync loop (writer) and its readers.
pub type SharedIndex = Arc<RwLock<DecisionIndex>>;

/// A new, empty shared index.
pub fn shared_index() -> SharedIndex {
    Arc::new(RwLock::new(DecisionIndex::new()))
}

/// What the sync loop publishes for readers outside it: the decision records, the last full sync's
/// repairs per Service, and the real servers draining.
#[derive(Clone, Default)]
pub struct Published {
    pub index: SharedIndex,
    pub drift: Arc<Mutex<DriftMarks>>,
    pub drains: Arc<Mutex<DrainQueue>>,
}

impl Published {
    /// Replaces the published drain queue (after a sync or a graceful-termination check).
    pub fn set_drains(&self, queue: &DrainQueue) {
        let mut d = self.drains.lock().unwrap_or_else(|p| p.into_inner());
        d.clone_from(queue);
    }
}
