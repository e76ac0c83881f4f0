//! The background task of [`Events`](super::Events): takes the correlator's writes one at a time,
//! at the publisher's own rate, and sends them to the API server (create, or a merge patch of
//! `series`).

use super::correlator::{Outcome, Regarding, Write};
use super::shared::{COMPONENT, MAX_NAME_BYTES, Settings, Shared};
use crate::runner::TokenBucket;
use crate::truncate::truncate;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::sync::Arc;
use tokio::time::Instant;

/// Namespace of the Events about the Node (cluster-scoped), as upstream.
const NODE_EVENT_NAMESPACE: &str = "default";

/// Builds and sends the Event objects.
pub(super) struct Publisher {
    client: kube::Client,
    node_name: String,
    instance: String,
}

impl Publisher {
    pub(super) fn new(client: kube::Client, node_name: &str) -> Self {
        let instance = format!("{COMPONENT}-{node_name}");
        Publisher {
            client,
            node_name: node_name.to_string(),
            instance: truncate(&instance, MAX_NAME_BYTES).into_owned(),
        }
    }

    /// Upstream's references: the Node by name (its UID is its name), a Service by namespace/name.
    fn reference(&self, regarding: &Regarding) -> ObjectReference {
        match regarding {
            Regarding::Node => ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Node".to_string()),
                name: Some(self.node_name.clone()),
                uid: Some(self.node_name.clone()),
                ..Default::default()
            },
            Regarding::Service(s) => ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Service".to_string()),
                namespace: Some(s.namespace.to_string()),
                name: Some(s.name.to_string()),
                ..Default::default()
            },
        }
    }

    fn namespace(regarding: &Regarding) -> String {
        match regarding {
            Regarding::Node => NODE_EVENT_NAMESPACE.to_string(),
            Regarding::Service(s) => s.namespace.to_string(),
        }
    }

    fn series(w: &Write) -> Option<EventSeries> {
        (w.count >= 2).then_some(EventSeries {
            count: w.count,
            last_observed_time: MicroTime(w.last),
        })
    }

    /// The whole Event of `w`.
    fn event(&self, w: &Write) -> Event {
        let k = &w.key;
        Event {
            metadata: ObjectMeta {
                name: Some(w.name.clone()),
                namespace: Some(Self::namespace(&k.regarding)),
                ..Default::default()
            },
            event_time: Some(MicroTime(w.first)),
            series: Self::series(w),
            reporting_controller: Some(COMPONENT.to_string()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(k.action.clone()),
            reason: Some(k.reason.clone()),
            regarding: Some(self.reference(&k.regarding)),
            note: w.note.clone(),
            type_: Some(if k.warning { "Warning" } else { "Normal" }.to_string()),
            ..Default::default()
        }
    }

    /// Sends `w`: a create, or a merge patch of `series`.
    async fn send(&self, w: &Write) -> Outcome {
        let api: Api<Event> =
            Api::namespaced(self.client.clone(), &Self::namespace(&w.key.regarding));
        let result = if w.create {
            api.create(&PostParams::default(), &self.event(w))
                .await
                .map(drop)
        } else {
            let patch = serde_json::json!({ "series": Self::series(w) });
            api.patch(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        };
        match result {
            Ok(()) => Outcome::Done,
            Err(e) => {
                let outcome = classify(&e, w.create);
                let error = e.to_string();
                tracing::warn!(
                    reason = %w.key.reason,
                    error = %truncate(&error, 256),
                    ?outcome,
                    "Could not publish an event"
                );
                outcome
            }
        }
    }
}

/// How a failed write continues: a patch of a deleted Event creates it again; throttling, server
/// errors and transport errors are retried; anything else the API server refused is dropped.
fn classify(e: &kube::Error, create: bool) -> Outcome {
    match e {
        kube::Error::Api(status) => match status.code {
            404 if !create => Outcome::Gone,
            429 | 500..=599 => Outcome::Retry,
            _ => Outcome::Failed,
        },
        _ => Outcome::Retry,
    }
}

/// The `result` label of a write in `kubeproxy_rs_event_writes_total`.
fn write_label(w: &Write, outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Done if w.create => "created",
        Outcome::Done => "patched",
        Outcome::Gone | Outcome::Retry => "retry",
        Outcome::Failed => "failed",
    }
}

/// The publisher loop: waits for a token of its own rate limit, takes the next write, sends it;
/// runs the correlator's maintenance (series ends, refreshes) when due; sleeps while idle.
pub(super) async fn run(shared: Arc<Shared>, publisher: Publisher, settings: Settings) {
    let mut bucket = TokenBucket::new(settings.qps, settings.burst, Instant::now());
    loop {
        let wait = bucket.time_to_token(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let (write, wake_at) = {
            let mut c = shared.correlator();
            let now = Instant::now();
            if now >= c.next_maintenance(now) {
                c.maintain(now);
            }
            (c.next_write(), c.next_maintenance(now))
        };
        let Some(w) = write else {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
            continue;
        };
        bucket.try_accept(Instant::now());
        let outcome = publisher.send(&w).await;
        let queued = {
            let mut c = shared.correlator();
            c.written(&w, outcome);
            c.queued()
        };
        if let Some(m) = shared.metrics.get() {
            m.inc_event_write(write_label(&w, outcome));
            m.set_events_queued(queued);
        }
    }
}
