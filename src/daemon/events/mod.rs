//! Kubernetes Events (events.k8s.io/v1) about the own Node and about Services, sent in the
//! background so callers never wait on the API server, and bounded so that nothing a user can write
//! into a Service makes the node flood the API server:
//! - the same Event again (same object, type, reason and action) counts into a series
//!   (`series.count`, patched) instead of creating an object (`correlator.rs`);
//! - at most [`Limits::queue`] writes wait; more are dropped and counted;
//! - each object may cause [`Limits::object_burst`] Events, then one per [`Limits::object_refill`];
//! - the publisher has its own rate limit ([`EVENT_QPS`], [`EVENT_BURST`]) and its own API client,
//!   apart from the watches';
//! - notes are cut to the API's 1 KiB ([`MAX_NOTE_BYTES`]), reason and action to 128 bytes.
//!
//! Counted in `kubeproxy_rs_events_total{result}` (occurrences: `queued`, `counted`,
//! `rate_limited`, `queue_full`), `kubeproxy_rs_event_writes_total{result}` (API writes: `created`,
//! `patched`, `retry`, `failed`) and the gauge `kubeproxy_rs_events_queued`.

mod correlator;
mod publisher;
mod shared;

pub use correlator::{Key, Limits, Recorded, Regarding};
use shared::Shared;
pub use shared::{COMPONENT, EVENT_BURST, EVENT_QPS, MAX_NAME_BYTES, MAX_NOTE_BYTES, Settings};

use crate::cluster::convert::ConvertError;
use crate::cluster::model::ServiceName;
use crate::metrics::Metrics;
use crate::truncate::truncate;
use correlator::Correlator;
use k8s_openapi::jiff::Timestamp;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Records Events; a background task publishes them. Cheap to clone; never blocks on the API.
#[derive(Clone)]
pub struct Events {
    shared: Arc<Shared>,
}

impl Events {
    /// Starts the publisher for Node `node_name` with the default [`Settings`], writing through
    /// `client` (give it a client of its own: its rate limit is the publisher's alone). Must run
    /// inside a tokio runtime.
    pub fn start(client: kube::Client, node_name: &str) -> Events {
        Self::start_with(client, node_name, Settings::default())
    }

    /// [`Self::start`] with other bounds.
    pub fn start_with(client: kube::Client, node_name: &str, settings: Settings) -> Events {
        let shared = Arc::new(Shared {
            correlator: Mutex::new(Correlator::new(settings.limits, node_name)),
            wake: Notify::new(),
            metrics: OnceLock::new(),
        });
        let publisher = publisher::Publisher::new(client, node_name);
        tokio::spawn(publisher::run(shared.clone(), publisher, settings));
        Events { shared }
    }

    /// Counts from now on in `metrics` (the first call wins).
    pub fn attach_metrics(&self, metrics: Arc<Metrics>) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// Records a Normal event about the Node.
    pub fn normal(&self, reason: &str, action: &str, note: Option<String>) {
        self.record(Regarding::Node, false, reason, action, note);
    }

    /// Records a Warning event about the Node.
    pub fn warning(&self, reason: &str, action: &str, note: Option<String>) {
        self.record(Regarding::Node, true, reason, action, note);
    }

    /// Records a Warning event about Service `service` (published in its namespace).
    pub fn service_warning(&self, service: &ServiceName, reason: &str, action: &str, note: String) {
        let regarding = Regarding::Service(service.clone());
        self.record(regarding, true, reason, action, Some(note));
    }

    /// Writes waiting for the API server.
    pub fn queued(&self) -> usize {
        self.shared.correlator().queued()
    }

    fn record(
        &self,
        regarding: Regarding,
        warning: bool,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) {
        let key = Key {
            regarding,
            warning,
            reason: truncate(reason, MAX_NAME_BYTES).into_owned(),
            action: truncate(action, MAX_NAME_BYTES).into_owned(),
        };
        let note = note.map(|n| {
            if n.len() <= MAX_NOTE_BYTES {
                n
            } else {
                truncate(&n, MAX_NOTE_BYTES).into_owned()
            }
        });
        let (recorded, queued) = {
            let mut c = self.shared.correlator();
            let r = c.record(key, note, Instant::now(), Timestamp::now());
            (r, c.queued())
        };
        self.shared.count(recorded.label(), queued);
        match recorded {
            Recorded::Queued | Recorded::Counted => self.shared.wake.notify_one(),
            Recorded::RateLimited | Recorded::QueueFull => {
                tracing::debug!(reason, result = recorded.label(), "event dropped");
            }
        }
    }
}

/// The daemon's answer to an object the watchers rejected (malformed or unreadable): the
/// `invalid_objects_total{kind}` counter and a Warning Event `Invalid<Kind>` naming it and why.
pub fn on_invalid_object(
    metrics: Arc<Metrics>,
    events: Events,
) -> impl Fn(&ConvertError) + Send + Sync + 'static {
    move |e| {
        let kind = e.kind.to_string();
        metrics.inc_invalid_object(&kind);
        events.warning(&format!("Invalid{kind}"), "Sync", Some(e.to_string()));
    }
}
