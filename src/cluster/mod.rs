//! The cluster side: models, conversion from API objects, change trackers, endpoint selection, watchers.

pub mod body_limit;
pub mod client;
pub mod connect_gate;
pub mod convert;
pub mod deadline;
pub mod decode;
pub mod gzip;
pub mod http2;
pub mod listwatch;
pub mod model;
pub mod observed_body;
pub mod proto;
pub mod rate_limit;
pub mod response_layer;
pub mod rest_metrics;
pub mod select;
pub mod service_options;
pub mod tracker;
pub mod transport;
pub mod watch;
