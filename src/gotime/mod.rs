//! Go's vocabulary for time, on the ground floor where every layer may use it: durations as Go's
//! `time.Duration` parses and prints them ([`duration`]), instants as `time.Time`, `metav1.Time`, klog and
//! component-base print them, and the civil date beneath ([`instant`]).

pub mod duration;
pub mod instant;

pub use duration::{DurationError, GoDuration, TimeOrDuration};
