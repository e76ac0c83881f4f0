//! The explanation of every Service on this node: the planner's decision records (why each virtual
//! server exists, which scheduler it got and why, which endpoints were selected and why the others were
//! not), published after each sync ([`index`]).

pub mod index;

pub use index::{DecisionIndex, FamilyDecisions};

use std::sync::{Arc, RwLock};

/// The decision index shared by the sync loop (writer) and its readers.
pub type SharedIndex = Arc<RwLock<DecisionIndex>>;

/// A new, empty shared index.
pub fn shared_index() -> SharedIndex {
    Arc::new(RwLock::new(DecisionIndex::new()))
}
