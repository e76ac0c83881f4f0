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
mod published;
pub mod report;
pub mod request;
pub mod reuse;
pub mod text;
pub mod workers;

pub use drift::DriftMarks;
pub use explainer::Explainer;
pub use index::{DecisionIndex, FamilyDecisions};
pub use published::{Published, SharedIndex, shared_index};
