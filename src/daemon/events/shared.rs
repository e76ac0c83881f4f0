//! The publisher's bounds and what the callers and the publisher share.

use super::correlator::{Correlator, Limits};
use crate::metrics::Metrics;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tokio::sync::Notify;

/// Reporting controller of every event.
pub const COMPONENT: &str = "kube-proxy";

/// The API's limit on `note` (bytes).
pub const MAX_NOTE_BYTES: usize = 1024;

/// The API's limit on `reason`, `action` and `reportingInstance` (bytes).
pub const MAX_NAME_BYTES: usize = 128;

/// Writes per second the publisher sends at most, once its burst is spent.
pub const EVENT_QPS: f64 = 1.0;

/// Writes the publisher may send back to back.
pub const EVENT_BURST: u32 = 25;

/// How the publisher is bounded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Queue, series and per-object limits.
    pub limits: Limits,
    /// Writes per second (`<= 0`: unlimited).
    pub qps: f64,
    /// Writes back to back.
    pub burst: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Limits::default(),
            qps: EVENT_QPS,
            burst: EVENT_BURST,
        }
    }
}

/// What the callers and the publisher share.
pub(super) struct Shared {
    pub(super) correlator: Mutex<Correlator>,
    /// Signalled when a write is queued.
    pub(super) wake: Notify,
    pub(super) metrics: OnceLock<Arc<Metrics>>,
}

impl Shared {
    pub(super) fn correlator(&self) -> MutexGuard<'_, Correlator> {
        self.correlator.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count(&self, result: &str, queued: usize) {
        if let Some(m) = self.metrics.get() {
            m.inc_event(result);
            m.set_events_queued(queued);
        }
    }
}
