//! The cluster side: models, conversion from API objects, change trackers, endpoint selection, watchers.

pub mod model;
pub mod select;
