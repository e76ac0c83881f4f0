//! Event writes as the test API server receives them: every create, patch and update of an Event is
//! logged with its time, method and answer (a test measures Events per second from it), and
//! events.k8s.io/v1 Events are checked against the real API server's field limits
//! (`pkg/apis/core/validation/events.go`): one that breaks them is answered 422 Invalid, as there.

use super::http::{Shared, lock};
use axum::http::{Method, StatusCode};
use serde_json::Value;
use std::time::Instant;

/// The API server's limit on `note`, in bytes.
pub const NOTE_LIMIT: usize = 1024;
/// The API server's limit on `reason`, `action` and `reportingInstance`, in bytes.
pub const NAME_LIMIT: usize = 128;

/// One Event write received.
#[derive(Clone, Debug)]
pub struct EventWrite {
    /// When it arrived.
    pub at: Instant,
    /// `POST`, `PATCH` or `PUT`.
    pub method: String,
    /// `events.k8s.io/v1` or `v1`.
    pub api_version: String,
    pub namespace: String,
    /// The Event's name (empty for a create that let the server choose).
    pub name: String,
    /// The HTTP status answered.
    pub status: u16,
    /// Bytes of the request body.
    pub body_bytes: usize,
    /// `series.count` in the request, if any.
    pub series_count: Option<i64>,
}

/// Every Event write received, in order.
#[derive(Default)]
pub struct EventLog {
    pub writes: Vec<EventWrite>,
}

/// One request to an Event resource.
#[derive(Clone, Copy)]
pub struct EventRequest<'a> {
    pub method: &'a Method,
    /// `events.k8s.io/v1` or `v1`.
    pub api_version: &'a str,
    pub ns: &'a str,
    /// The Event named in the path, if any.
    pub name: Option<&'a str>,
    pub body: &'a [u8],
}

/// Logs one Event request with its answer (reads are not logged).
pub fn observe(shared: &Shared, r: &EventRequest<'_>, status: StatusCode) {
    if *r.method == Method::GET {
        return;
    }
    let parsed: Value = serde_json::from_slice(r.body).unwrap_or(Value::Null);
    let name = r
        .name
        .map(str::to_string)
        .or_else(|| {
            parsed
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    lock(&shared.event_log).writes.push(EventWrite {
        at: Instant::now(),
        method: r.method.to_string(),
        api_version: r.api_version.to_string(),
        namespace: r.ns.to_string(),
        name,
        status: status.as_u16(),
        body_bytes: r.body.len(),
        series_count: parsed.pointer("/series/count").and_then(Value::as_i64),
    });
}

/// Why the API server would refuse events.k8s.io/v1 Event `ev` stored in namespace `ns`, if it would.
pub fn invalid(ev: &Value, ns: &str) -> Option<String> {
    let text = |f: &str| ev.get(f).and_then(Value::as_str).unwrap_or("");
    let mut errors = Vec::new();
    if ev.get("eventTime").is_none_or(Value::is_null) {
        errors.push("eventTime: Required value".to_string());
    }
    for (field, limit) in [
        ("reportingController", usize::MAX),
        ("reportingInstance", NAME_LIMIT),
        ("action", NAME_LIMIT),
        ("reason", NAME_LIMIT),
    ] {
        let v = text(field);
        if v.is_empty() {
            errors.push(format!("{field}: Required value"));
        } else if v.len() > limit {
            errors.push(format!("{field}: Too long: may not be longer than {limit}"));
        }
    }
    if text("note").len() > NOTE_LIMIT {
        errors.push(format!(
            "note: Too long: may not be longer than {NOTE_LIMIT}"
        ));
    }
    if !matches!(text("type"), "Normal" | "Warning") {
        errors.push(format!("type: Unsupported value: {:?}", text("type")));
    }
    if let Some(series) = ev.get("series").filter(|s| !s.is_null()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errors.push("series.count: Invalid value: should be at least 2".to_string());
        }
        if series.get("lastObservedTime").is_none_or(Value::is_null) {
            errors.push("series.lastObservedTime: Required value".to_string());
        }
    }
    let regarding_ns = ev
        .pointer("/regarding/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !regarding_ns.is_empty() && regarding_ns != ns {
        errors
            .push("regarding.namespace: Invalid value: does not match event.namespace".to_string());
    }
    (!errors.is_empty()).then(|| errors.join(", "))
}
