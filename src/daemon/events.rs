//! Kubernetes Events (events.k8s.io/v1) about the own Node (and Services' ignored annotations), sent in the background so callers never wait
//! on the API server.

use crate::cluster::convert::ConvertError;
use crate::cluster::model::ServiceName;
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Reporting controller of every event.
pub const COMPONENT: &str = "kube-proxy";

struct Pending {
    /// What the event is about; `None`: the own Node.
    regarding: Option<ObjectReference>,
    warning: bool,
    reason: String,
    action: String,
    note: Option<String>,
}

/// Queues events regarding the Node; a background task publishes them.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Events {
    /// Starts the publisher task for Node `node_name`; must run inside a tokio runtime.
    pub fn start(client: kube::Client, node_name: &str) -> Events {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: COMPONENT.to_string(),
                instance: Some(format!("{COMPONENT}-{node_name}")),
            },
        );
        // Upstream's NodeRef: kind Node, name and UID both the node name, no namespace.
        let node_ref = ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node_name.to_string()),
            uid: Some(node_name.to_string()),
            ..Default::default()
        };
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                let ev = Event {
                    type_: if p.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: p.reason,
                    note: p.note,
                    action: p.action,
                    secondary: None,
                };
                let regarding = p.regarding.as_ref().unwrap_or(&node_ref);
                if let Err(e) = recorder.publish(&ev, regarding).await {
                    tracing::warn!(reason = %ev.reason, error = %e, "Could not publish an event");
                }
            }
        });
        Events { tx }
    }

    /// Queues a Normal event.
    pub fn normal(&self, reason: &str, action: &str, note: Option<String>) {
        self.send(false, reason, action, note);
    }

    /// Queues a Warning event.
    pub fn warning(&self, reason: &str, action: &str, note: Option<String>) {
        self.send(true, reason, action, note);
    }

    /// Queues a Warning event regarding Service `service` (published in its namespace).
    pub fn service_warning(&self, service: &ServiceName, reason: &str, action: &str, note: String) {
        let _ = self.tx.send(Pending {
            regarding: Some(ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Service".to_string()),
                namespace: Some(service.namespace.to_string()),
                name: Some(service.name.to_string()),
                ..Default::default()
            }),
            warning: true,
            reason: reason.to_string(),
            action: action.to_string(),
            note: Some(note),
        });
    }

    fn send(&self, warning: bool, reason: &str, action: &str, note: Option<String>) {
        let _ = self.tx.send(Pending {
            regarding: None,
            warning,
            reason: reason.to_string(),
            action: action.to_string(),
            note,
        });
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
