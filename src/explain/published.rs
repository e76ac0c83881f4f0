//! What the sync loop publishes for the explanation's readers: the decision index, drift marks and
//! draining real servers, each behind its own lock.

use super::drift::DriftMarks;
use super::index::DecisionIndex;
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
